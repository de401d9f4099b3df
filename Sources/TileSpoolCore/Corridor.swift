import Foundation

/// A corridor region: the ground within `bufferMeters` of a line (a route), request field
/// `"corridor": {"line": GEOJSON, "bufferMeters": N}`.
///
/// **Model.** Distances are great-circle distances on a sphere of radius `earthRadius`
/// (6378137 m, the WGS 84 semi-major axis). Against the WGS 84 ellipsoid this overstates
/// distances by at most about 0.7 % (0 at the equator east-west, most near the poles north-south),
/// so the corridor is at most that much wider than a geodesic buffer. A segment between two
/// consecutive positions is straight in longitude/latitude (RFC 7946, section 3.1.1); one whose
/// longitudes differ by more than 180° goes the short way, across the antimeridian (a route
/// `[179.9, 0] -> [-179.9, 0]` is 22 km long, not 40,000 km).
///
/// **Cover.** The line is sampled at stations at most `spacing` (= `bufferMeters / 4`) apart along
/// each segment, and a tile is planned when it meets the spherical cap of radius
/// `coverRadius` = `bufferMeters · √(1 + 1/64)` (≈ 1.0078 × the buffer) around some station; whether
/// a cap meets a tile row's latitude band, and over which longitudes, is worked out exactly (spherical
/// trigonometry, below). Every tile within `bufferMeters` of the line is planned (a point within
/// d of the line is within √(d² + (s/2)²) of the nearest station, s the spacing: exact in the
/// plane, to within (d/R)² on the sphere); a tile planned is within `coverRadius` of the line. So
/// the only tiles in doubt are those whose distance from the line is between the buffer and 1.0078
/// times it.
///
/// Positions are `[longitude, latitude]` in degrees: longitude within -360...360 (beyond ±180
/// only to cross the antimeridian), latitude within ±85.0511 (Web Mercator's).
public struct Corridor: Sendable, Equatable, Codable {
    /// lines[l][i] = [lon, lat] of position i of line l, in degrees, as given.
    public var lines: [[[Double]]]
    /// The buffer on either side of the line, in metres on the ground.
    public var bufferMeters: Double

    /// The sphere's radius in metres (WGS 84 semi-major axis).
    public static let earthRadius = 6378137.0
    /// The widest buffer a corridor may have, in metres (100 km).
    public static let maxBufferMeters = 100_000.0
    /// The most positions a corridor's line may have (as a geometry's, `RegionShape.maxPositions`).
    public static let maxPositions = RegionShape.maxPositions
    /// The most stations (samples along the line, `bufferMeters / 4` apart) a corridor may have:
    /// a long route with a very narrow buffer is refused (1000 km needs a buffer of at least 1 m).
    public static let maxStations = 4_000_000

    public init(lines: [[[Double]]], bufferMeters: Double) {
        self.lines = lines; self.bufferMeters = bufferMeters
    }

    /// Distance between stations in metres: a quarter of the buffer.
    public var spacing: Double { bufferMeters / 4 }
    /// The radius of the caps around stations, metres: `bufferMeters · √(1 + 1/64)`.
    public var coverRadius: Double { (bufferMeters * bufferMeters + spacing * spacing / 4).squareRoot() }

    private enum CodingKeys: String, CodingKey { case lines, bufferMeters }

    // MARK: parsing

    /// Parses the request's `corridor` object, `{"line": GEOJSON, "bufferMeters": N}`, GEOJSON a
    /// `LineString` or `MultiLineString`, or a `Feature`/`FeatureCollection`/`GeometryCollection`
    /// of them (their lines, in order).
    /// - Returns: the corridor, or a message naming what is wrong (for `corridor: <message>`).
    public static func parse(_ v: Any) -> Result<Corridor, ShapeError> {
        guard let o = v as? [String: Any] else { return .failure("must be an object {\"line\": GeoJSON LineString or MultiLineString, \"bufferMeters\": N}") }
        let unknown = Set(o.keys).subtracting(["line", "bufferMeters"]).sorted()
        if !unknown.isEmpty { return .failure("unknown field \(unknown.map { "'\($0)'" }.joined(separator: ", ")); give 'line' and 'bufferMeters'") }
        guard let bv = o["bufferMeters"] else { return .failure("bufferMeters: missing; give the buffer in metres, e.g. 1000") }
        guard let d = JSONKind.number(bv), !JSONKind.isBool(bv) else { return .failure("bufferMeters: must be a number of metres, not a \(JSONKind.name(bv))") }
        guard d.isFinite, d > 0 else { return .failure("bufferMeters: \(d) must be a finite number greater than 0") }
        guard d <= maxBufferMeters else { return .failure("bufferMeters: \(d) is more than \(Int(maxBufferMeters)) m; give a narrower buffer or use a geometry") }
        guard let lv = o["line"] else { return .failure("line: missing; give a GeoJSON LineString or MultiLineString") }
        let lines: [[[Double]]]
        switch parseLines(lv) {
        case .success(let l): lines = l
        case .failure(let e): return .failure("line: \(e.message)")
        }
        let c = Corridor(lines: lines, bufferMeters: d)
        let stations = c.stationCount
        if stations > maxStations {
            let shown = stations >= maxSegmentSteps ? "more than \(maxSegmentSteps)" : "\(stations)"
            // A quarter of the smallest buffers is 0 as a double (5e-324 / 4): said as a quarter.
            let apart = c.spacing > 0 ? "\(c.spacing) m" : "\(d) m / 4"
            return .failure("the line is too long for a buffer of \(d) m: \(shown) stations \(apart) apart, at most \(maxStations); give a wider buffer or split the route")
        }
        return .success(c)
    }

    /// Parses GeoJSON lines: a `LineString` or `MultiLineString` geometry, or a `Feature`,
    /// `FeatureCollection` or `GeometryCollection` of them, in order.
    /// - Returns: lines of `[lon, lat]` positions (degrees), each of at least 2 positions, or a
    ///   message naming the member and position that is wrong.
    public static func parseLines(_ v: Any) -> Result<[[[Double]]], ShapeError> {
        guard let o = v as? [String: Any], let type = o["type"] as? String else { return .failure("must be a GeoJSON object with a 'type'") }
        var total = 0
        func positions(_ v: Any?, _ where_: String) -> Result<[[Double]], ShapeError> {
            guard let arr = v as? [Any] else { return .failure("\(where_) must be an array of positions") }
            guard arr.count >= 2 else { return .failure("\(where_) needs at least 2 positions") }
            var out: [[Double]] = []
            out.reserveCapacity(arr.count)
            for (i, pv) in arr.enumerated() {
                let lon: Double, lat: Double
                switch RegionShape.lonLat(pv) {
                case .success(let p): (lon, lat) = p
                case .failure(let e): return .failure("\(where_)[\(i)] \(e.message)")
                }
                guard RegionShape.isPosition(lon: lon, lat: lat, maxLatitude: WebMercator.maxLatitude) else {
                    return .failure("\(where_)[\(i)] [\(lon), \(lat)] is outside -360...360, ±85.0511 degrees (Web Mercator's latitudes; beyond ±180 only to cross the antimeridian)")
                }
                out.append([lon, lat])
            }
            total += out.count
            if total > maxPositions { return .failure("more than \(maxPositions) positions") }
            return .success(out)
        }
        func geometry(_ g: [String: Any], _ t: String, _ prefix: String) -> Result<[[[Double]]], ShapeError> {
            switch t {
            case "LineString":
                return positions(g["coordinates"], prefix + "coordinates").map { [$0] }
            case "MultiLineString":
                guard let ls = g["coordinates"] as? [Any], !ls.isEmpty else { return .failure("\(prefix)the MultiLineString needs an array of lines") }
                var out: [[[Double]]] = []
                for (i, l) in ls.enumerated() {
                    switch positions(l, "\(prefix)coordinates[\(i)]") { case .success(let p): out.append(p); case .failure(let e): return .failure(e) }
                }
                return .success(out)
            default:
                return .failure("\(prefix.isEmpty ? "" : prefix)type '\(t)' is not supported; use LineString or MultiLineString")
            }
        }
        switch type {
        case "Feature":
            guard let g = o["geometry"] as? [String: Any], let t = g["type"] as? String else { return .failure("the Feature has no geometry") }
            if t == "GeometryCollection" { return parseLines(g) }
            return geometry(g, t, "")
        case "FeatureCollection", "GeometryCollection":
            let members: [GeoJSONMember]
            switch GeoJSONMember.all(of: o, type) { case .success(let m): members = m; case .failure(let e): return .failure(e) }
            var out: [[[Double]]] = []
            for m in members {
                switch geometry(m.geometry, m.type, "\(m.label): ") { case .success(let l): out += l; case .failure(let e): return .failure(e) }
            }
            return .success(out)
        default:
            return geometry(o, type, "")
        }
    }

    /// The corridor as the request's `corridor` object (a `MultiLineString`), for `request.json`.
    public var jsonObject: [String: Any] {
        ["line": ["type": "MultiLineString", "coordinates": lines] as [String: Any], "bufferMeters": bufferMeters]
    }

    // MARK: stations

    /// The line `l` with longitudes unwrapped: each position moved by a multiple of 360° so that
    /// it is within 180° of the one before (a segment goes the short way).
    public func unwrapped(_ l: Int) -> [[Double]] {
        var out = lines[l]
        for i in 1..<max(out.count, 1) {
            var lon = out[i][0]
            while lon - out[i - 1][0] > 180 { lon -= 360 }
            while lon - out[i - 1][0] < -180 { lon += 360 }
            out[i][0] = lon
        }
        return out
    }

    /// An upper bound of the ground length in metres of the segment from `a` to `b` (degrees,
    /// straight in lon/lat): R·√(Δφ² + (cos φ₀ Δλ)²), φ₀ the segment's latitude nearest the
    /// equator (the metric ds² = R²(dφ² + cos²φ dλ²) is largest there).
    static func segmentLengthBound(_ a: [Double], _ b: [Double]) -> Double {
        let rad = Double.pi / 180
        let dphi = (b[1] - a[1]) * rad, dlam = (b[0] - a[0]) * rad
        let phi0 = (a[1] > 0) == (b[1] > 0) ? min(abs(a[1]), abs(b[1])) * rad : 0
        return earthRadius * (dphi * dphi + cos(phi0) * cos(phi0) * dlam * dlam).squareRoot()
    }

    /// The stations of one line: `steps[k]` sub-steps on segment k (each at most `spacing` long),
    /// `start[k]` the station index of position k (`start.last` = the line's last station).
    struct Stations {
        var positions: [[Double]]
        var start: [Int]
        var count: Int { start.last! + 1 }
        /// The position (unwrapped lon, lat) of station `g`.
        func position(_ g: Int) -> (Double, Double) { position(g, onSegment: segment(of: g)) }
        /// The segment k with start[k] <= g < start[k+1] (the last segment for the last station).
        func segment(of g: Int) -> Int {
            var lo = 0, hi = start.count - 1
            while hi - lo > 1 { let mid = (lo + hi) / 2; if start[mid] <= g { lo = mid } else { hi = mid } }
            return lo
        }
        /// The position of station `g` on segment `k` (`segment(of:)`): interpolated between
        /// the segment's ends.
        func position(_ g: Int, onSegment k: Int) -> (Double, Double) {
            let a = positions[k]
            if k == start.count - 1 || g == start[k] { return (a[0], a[1]) }
            let b = positions[k + 1]
            let t = Double(g - start[k]) / Double(start[k + 1] - start[k])
            return (a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t)
        }
        /// Calls `body` with the position of each station `from...to` in turn, exactly as
        /// `position(_:)` gives it, walking the segments instead of searching for each station's;
        /// stops when `body` returns false.
        func forEachPosition(_ from: Int, _ to: Int, _ body: (Double, Double) -> Bool) {
            guard from <= to else { return }
            var k = segment(of: from)
            for g in from...to {
                while k + 1 < start.count - 1 && start[k + 1] <= g { k += 1 }
                let (lon, lat) = position(g, onSegment: k)
                if !body(lon, lat) { return }
            }
        }
    }

    func stations(_ l: Int) -> Stations {
        let p = unwrapped(l)
        var start = [0]
        start.reserveCapacity(p.count)
        for k in 1..<max(1, p.count) {
            start.append(start[k - 1] + steps(p[k - 1], p[k]))
        }
        return Stations(positions: p, start: start)
    }

    /// The most stations one segment counts (10^15): past it the count is a bound, not exact.
    static let maxSegmentSteps = 1_000_000_000_000_000

    /// The stations a segment from `a` to `b` takes: at least 1, at most `maxSegmentSteps`
    /// (never an overflow: a review of 2026-12-07 found a buffer of 1e-15 m trapped here,
    /// `Int(4.5e20)`, and a spacing of 0 over a segment of length 0 gave NaN).
    func steps(_ a: [Double], _ b: [Double]) -> Int {
        let q = (Corridor.segmentLengthBound(a, b) / spacing).rounded(.up)
        guard q >= 1 else { return 1 } // also NaN
        return q >= Double(Corridor.maxSegmentSteps) ? Corridor.maxSegmentSteps : Int(q)
    }

    /// The number of stations of all lines, more than `maxStations` when there are too many
    /// (the count stops there). A line of fewer than 2 positions counts 1.
    public var stationCount: Int {
        var n = 0
        for l in lines.indices {
            let p = unwrapped(l)
            n += 1
            for k in 1..<max(1, p.count) {
                n += steps(p[k - 1], p[k])
                if n > Corridor.maxStations { return n }
            }
        }
        return n
    }

    // MARK: pieces

    /// The length in metres of the pieces a line is cut into at tile zoom `z`: a tile at the
    /// equator or twice the buffer, whichever is longer. Tiles are downloaded piece by piece along
    /// the line (row by row within a piece, so the order along the route is exact to about a
    /// piece), and a piece's rectangle is mostly corridor, so the progress bitmap and the rows
    /// scanned stay within a few times the tiles planned.
    public func pieceLength(z: Int) -> Double {
        max(2 * Double.pi * Corridor.earthRadius / Double(1 << z), 2 * bufferMeters)
    }

    /// A stretch of a line: stations `from...to` of line `line`.
    public struct Piece: Sendable, Equatable, Hashable, Codable {
        /// The line's position in `lines`.
        public var line: Int
        /// The first station (0 is the line's first position; stations are `spacing` apart or less).
        public var from: Int
        /// The last station, `from...to` inclusive.
        public var to: Int
        public init(line: Int, from: Int, to: Int) { self.line = line; self.from = from; self.to = to }
    }

    /// The pieces of every line at tile zoom `z` and the tile rectangles containing every tile
    /// that their caps meet (two for a piece across the antimeridian), in order along the lines.
    /// Holds one line's station table at a time; returns one entry per piece.
    public func pieces(z: Int) -> [(piece: Piece, rects: [TileRect])] {
        var out: [(Piece, [TileRect])] = []
        let per = max(1, Int(min(pieceLength(z: z) / spacing, Double(Corridor.maxStations + 1))))
        for l in lines.indices {
            let st = stations(l)
            var g = 0
            while g < st.count - 1 {
                let to = min(g + per, st.count - 1)
                let piece = Piece(line: l, from: g, to: to)
                out.append((piece, rects(piece, st, z: z)))
                g = to
            }
        }
        return out
    }

    /// The angular radius of the caps, radians.
    var capAngle: Double { coverRadius / Corridor.earthRadius }

    /// Tile rectangles at zoom `z` around `piece`: the box of its positions widened by the cap.
    func rects(_ piece: Piece, _ st: Stations, z: Int) -> [TileRect] {
        var (w, s) = st.position(piece.from), (e, n) = (w, s)
        func add(_ p: (Double, Double)) { w = min(w, p.0); e = max(e, p.0); s = min(s, p.1); n = max(n, p.1) }
        add(st.position(piece.to))
        // The positions strictly inside the piece: from the first whose station is past `from`.
        var lo = 0, hi = st.start.count
        while lo < hi { let mid = (lo + hi) / 2; if st.start[mid] <= piece.from { lo = mid + 1 } else { hi = mid } }
        var k = lo
        while k < st.start.count && st.start[k] < piece.to { add((st.positions[k][0], st.positions[k][1])); k += 1 }
        let rho = capAngle, deg = 180 / Double.pi
        let south = max(s - rho * deg, -90), north = min(n + rho * deg, 90)
        let widest = max(abs(south), abs(north)) / deg
        let dlon: Double = widest >= Double.pi / 2 - 1e-12 || sin(rho) >= cos(widest) ? 180 : asin(sin(rho) / cos(widest)) * deg
        w -= dlon; e += dlon
        // A little margin for floating noise at tile borders.
        w -= 1e-9; e += 1e-9
        let bounds: GeoBounds
        if e - w >= 360 {
            bounds = GeoBounds(west: -180, south: south, east: 180, north: north)
        } else {
            func norm(_ x: Double) -> Double { var v = x; while v > 180 { v -= 360 }; while v < -180 { v += 360 }; return v }
            var ww = norm(w), ee = norm(e)
            if ww == 180 { ww = -180 }
            if ee == -180 { ee = 180 }
            bounds = GeoBounds(west: ww, south: south, east: ee, north: north)
        }
        return WebMercator.cover(bounds, z: z)
    }

    /// The bounding box in degrees of the corridor (the lines widened by the buffer), within
    /// -180...180 (`west > east` across the antimeridian).
    public var bounds: GeoBounds {
        var boxes: [GeoBounds] = []
        for l in lines.indices {
            let p = unwrapped(l)
            var w = p[0][0], e = w, s = p[0][1], n = s
            for q in p { w = min(w, q[0]); e = max(e, q[0]); s = min(s, q[1]); n = max(n, q[1]) }
            let rho = bufferMeters / Corridor.earthRadius, deg = 180 / Double.pi
            let south = max(s - rho * deg, -90), north = min(n + rho * deg, 90)
            let widest = max(abs(south), abs(north)) / deg
            let dlon: Double = sin(rho) >= cos(widest) ? 180 : asin(sin(rho) / cos(widest)) * deg
            boxes.append(GeoBounds(west: w - dlon, south: south, east: e + dlon, north: north))
        }
        return GeoBounds.union(boxes)
    }

    // MARK: cover

    /// The latitude in degrees of the top edge of tile row `y` at zoom `z` (inverse Web Mercator).
    static func rowLatitude(_ y: Int, z: Int) -> Double {
        let n = Double(1 << z)
        return atan(sinh(Double.pi * (1 - 2 * Double(y) / n))) * 180 / Double.pi
    }

    /// The columns of row `y` at zoom `z` whose tiles meet the cap around some station of `piece`:
    /// sorted, disjoint, inclusive ranges within `0..<2^z` (wrapped across the antimeridian).
    /// A cap meets a tile when it meets the tile's closed rectangle. `skipping` false works out
    /// every station's cap (the same answer, slower; for tests).
    func columns(_ piece: Piece, _ st: Stations, z: Int, y: Int, skipping: Bool = true) -> [ClosedRange<Int>] {
        let rad = Double.pi / 180
        let north = Corridor.rowLatitude(y, z: z) * rad, south = Corridor.rowLatitude(y + 1, z: z) * rad
        let rho = capAngle, cosRho = cos(rho)
        let n = 1 << z
        // A bound on any cap's half-width in longitude within this band (radians), to skip the
        // trigonometry of a station whose cap cannot reach past the span the one before it gave
        // (the union is the same): a cap of angular radius ρ centred at latitude φ spans at most
        // asin(sin ρ / cos φ) either side in longitude (the bounding box of a spherical cap),
        // and a station meeting the band lies within ρ of it. Doubled, plus what rounding can
        // add to the `acos` below, so that no station is passed over whose computed span would
        // have reached further (the columns stay exactly those of every station's, as plans
        // stored before were counted): `c` is within about 1.2e-15 / cos²(reach) of its true
        // value, and acos(x - ε) exceeds acos(x) by at most acos(1 - ε) ≈ √(2ε), so by at most
        // 4.9e-8 / cos(reach) (attack round 44: with a bound of 1e-9, buffers of 5-8 mm at
        // z22-24 planned 1 or 2 tiles fewer than before). Nil near a pole.
        let reach = max(abs(south - rho), abs(north + rho))
        let skipBound: Double? = skipping && reach < Double.pi / 2 && sin(rho) < cos(reach)
            ? 2 * asin(sin(rho) / cos(reach)) + 1e-7 / cos(reach) : nil
        var spans: [(Int, Int)] = []
        var wholeRow = false
        st.forEachPosition(piece.from, piece.to) { lonDeg, latDeg in
            let phi = latDeg * rad
            if phi - rho > north || phi + rho < south { return true }
            if let bound = skipBound, let (a, b) = spans.last,
               Int(floor(WebMercator.tileX(lon: lonDeg - bound / rad, z: z))) >= a,
               Int(floor(WebMercator.tileX(lon: lonDeg + bound / rad, z: z))) <= b {
                return true // its span lies within the last one: nothing new
            }
            // The cap is widest in longitude at asin(sin φ / cos ρ) (poleward of its centre); the
            // widest point within the band is the band's latitude nearest to it.
            let sw = sin(phi) / cosRho
            let widestLat = abs(sw) >= 1 ? (sw > 0 ? Double.pi / 2 : -Double.pi / 2) : asin(sw)
            let at = min(max(widestLat, south), north)
            // Spherical law of cosines: cos ρ = sin φ sin φ' + cos φ cos φ' cos Δλ.
            let c = (cosRho - sin(at) * sin(phi)) / (cos(at) * cos(phi))
            let dlon = c <= -1 ? Double.pi : acos(min(c, 1))
            let lo = WebMercator.tileX(lon: lonDeg - dlon / rad, z: z), hi = WebMercator.tileX(lon: lonDeg + dlon / rad, z: z)
            let a = Int(floor(lo)), b = max(Int(ceil(hi)) - 1, a)
            if b - a + 1 >= n { wholeRow = true; return false }
            spans.append((a, b))
            return true
        }
        if wholeRow { return [0...(n - 1)] }
        // Wrap into 0..<n.
        var cols: [ClosedRange<Int>] = []
        for (a, b) in spans {
            let shift = Int((Double(a) / Double(n)).rounded(.down)) * n
            let a0 = a - shift, b0 = b - shift
            if b0 < n { cols.append(a0...b0) } else { cols.append(a0...(n - 1)); cols.append(0...(b0 - n)) }
        }
        return TileColumns.merge(cols)
    }
}

/// Column range arithmetic for tile rows.
public enum TileColumns {
    /// `ranges` sorted and merged (adjacent ranges joined).
    public static func merge(_ ranges: [ClosedRange<Int>]) -> [ClosedRange<Int>] {
        let sorted = ranges.sorted { $0.lowerBound < $1.lowerBound }
        var merged: [ClosedRange<Int>] = []
        for c in sorted {
            if let last = merged.last, c.lowerBound <= last.upperBound + 1 {
                merged[merged.count - 1] = last.lowerBound...max(last.upperBound, c.upperBound)
            } else {
                merged.append(c)
            }
        }
        return merged
    }

    /// `a` without the columns of `b` (both sorted and disjoint).
    public static func subtract(_ a: [ClosedRange<Int>], _ b: [ClosedRange<Int>]) -> [ClosedRange<Int>] {
        guard !b.isEmpty else { return a }
        var out: [ClosedRange<Int>] = []
        for r in a {
            var lo = r.lowerBound
            for s in b where s.upperBound >= lo && s.lowerBound <= r.upperBound {
                if s.lowerBound > lo { out.append(lo...(s.lowerBound - 1)) }
                lo = max(lo, s.upperBound + 1)
                if lo > r.upperBound { break }
            }
            if lo <= r.upperBound { out.append(lo...r.upperBound) }
        }
        return out
    }

    /// `a` within `lo...hi`.
    public static func clip(_ a: [ClosedRange<Int>], _ lo: Int, _ hi: Int) -> [ClosedRange<Int>] {
        a.compactMap { r in
            let l = max(r.lowerBound, lo), h = min(r.upperBound, hi)
            return l <= h ? l...h : nil
        }
    }

    /// The number of columns in `a`.
    public static func count(_ a: [ClosedRange<Int>]) -> Int { a.reduce(0) { $0 + $1.count } }
}

extension GeoBounds {
    /// The smallest box containing every box of `boxes` (longitudes may lie beyond ±180 or have
    /// `west > east`): latitudes their extremes; longitudes the shortest arc of the circle holding
    /// every box's arc (the complement of the widest gap between them), written within -180...180
    /// with `west > east` when it crosses the antimeridian.
    public static func union(_ boxes: [GeoBounds]) -> GeoBounds {
        guard !boxes.isEmpty else { return GeoBounds(west: -180, south: -90, east: 180, north: 90) }
        let s = boxes.map(\.south).min()!, n = boxes.map(\.north).max()!
        // Arcs as [start, start + width) on 0..<360.
        var arcs: [(Double, Double)] = []
        for b in boxes {
            var width = b.east - b.west
            if width < 0 { width += 360 }
            if width >= 360 { return GeoBounds(west: -180, south: s, east: 180, north: n) }
            var start = (b.west + 180).truncatingRemainder(dividingBy: 360)
            if start < 0 { start += 360 }
            arcs.append((start, start + width))
        }
        arcs.sort { $0.0 < $1.0 }
        // Merge on the unrolled line, then find the widest gap (the one across 360 included).
        var merged: [(Double, Double)] = []
        for a in arcs {
            if let last = merged.last, a.0 <= last.1 { merged[merged.count - 1].1 = max(last.1, a.1) } else { merged.append(a) }
        }
        if merged.count > 1, let last = merged.last, last.1 - 360 >= merged[0].0 {
            merged[0].0 = last.0 - 360
            merged[0].1 = max(merged[0].1, last.1 - 360)
            merged.removeLast()
        }
        // Of two gaps as wide, the one across the antimeridian (the last: the box then does not
        // cross it), so that boxes that do not cross never give one that does (attack round 11).
        var best = -1.0, bestEnd = 0.0
        for (i, a) in merged.enumerated() {
            let next = i + 1 < merged.count ? merged[i + 1].0 : merged[0].0 + 360
            let gap = next - a.1
            if gap > best || (gap == best && i == merged.count - 1) { best = gap; bestEnd = next }
        }
        if best <= 0 { return GeoBounds(west: -180, south: s, east: 180, north: n) }
        let startOfArc = bestEnd, width = 360 - best
        func lon(_ v: Double) -> Double { var x = (v.truncatingRemainder(dividingBy: 360)); if x < 0 { x += 360 }; return x - 180 }
        let west = lon(startOfArc)
        var east = lon(startOfArc + width)
        if east == -180 && width > 0 { east = 180 }
        return GeoBounds(west: west, south: s, east: east, north: n)
    }
}
