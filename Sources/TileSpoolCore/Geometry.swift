import Foundation

/// One member of a GeoJSON `FeatureCollection` (a Feature's geometry) or `GeometryCollection`
/// (RFC 7946, sections 3.3 and 3.1.8): its geometry object and `type`, and where it is
/// (`features[3]`) for messages.
public struct GeoJSONMember {
    public var geometry: [String: Any]
    public var type: String
    /// `features` or `geometries`, and the member's index in that array.
    public var key: String
    public var index: Int
    /// The label of the member in messages: `features[3]`.
    public var label: String { "\(key)[\(index)]" }

    /// Every member of the collection `o` of type `type` (`FeatureCollection` or
    /// `GeometryCollection`), in order.
    /// - Returns: the members, or a message: an empty or missing array, a `features` entry that is
    ///   not a Feature, a member without a geometry.
    public static func all(of o: [String: Any], _ type: String) -> Result<[GeoJSONMember], ShapeError> {
        let key = type == "FeatureCollection" ? "features" : "geometries"
        guard let members = o[key] as? [Any], !members.isEmpty else { return .failure("the \(type) needs a non-empty '\(key)' array") }
        var out: [GeoJSONMember] = []
        out.reserveCapacity(members.count)
        for (i, m) in members.enumerated() {
            var g = m as? [String: Any]
            if type == "FeatureCollection" {
                guard (g?["type"] as? String) == "Feature" else { return .failure("\(key)[\(i)] must be a Feature") }
                g = g?["geometry"] as? [String: Any]
            }
            guard let g, let t = g["type"] as? String else { return .failure("\(key)[\(i)] has no geometry") }
            out.append(GeoJSONMember(geometry: g, type: t, key: key, index: i))
        }
        return .success(out)
    }
}

/// Why a GeoJSON region is refused: a message for the status file.
public struct ShapeError: Error, Sendable, ExpressibleByStringInterpolation {
    public var message: String
    public init(stringLiteral value: String) { message = value }
    public init(stringInterpolation: DefaultStringInterpolation) { message = String(stringInterpolation: stringInterpolation) }
}

/// A region given as a GeoJSON Polygon or MultiPolygon (RFC 7946, sections 3.1.6 and 3.1.7):
/// polygons of linear rings of `[longitude, latitude]` positions in degrees, the first ring the
/// exterior and the others holes. Rings must be closed (first position equals the last) with at
/// least four positions. A `FeatureCollection` or `GeometryCollection` is the union of its Polygon
/// and MultiPolygon members. Longitudes may reach -360...360: a polygon going beyond ±180 (a
/// region across the antimeridian given as, say, 170...190) is split at ±180 and the part beyond
/// shifted by 360° (Sutherland-Hodgman clipping of each ring against the meridians).
public struct RegionShape: Sendable, Equatable, Codable {
    /// polygons[p][r][i] = (lon, lat) of position i of ring r of polygon p.
    public var polygons: [[[[Double]]]]

    public init(polygons: [[[[Double]]]]) { self.polygons = polygons }

    /// True for a position requests and plans may hold: a finite longitude within -360...360
    /// (beyond ±180 only to cross the antimeridian) and a finite latitude within ±`maxLatitude`
    /// (degrees: 90 for a shape, `WebMercator.maxLatitude` for a corridor's line).
    public static func isPosition(lon: Double, lat: Double, maxLatitude: Double = 90) -> Bool {
        lon.isFinite && lat.isFinite && abs(lon) <= 360 && abs(lat) <= maxLatitude
    }

    /// The longitude and latitude of a GeoJSON position (RFC 7946, section 3.1.1: an array of two
    /// or more numbers, the third an altitude), or what is wrong with it (for
    /// "`where`: <message>"): not an array, fewer than two elements, or an element that is not a
    /// finite number (`[10, 50, "x"]` is no position).
    public static func lonLat(_ position: Any) -> Result<(lon: Double, lat: Double), ShapeError> {
        let form = "a position's elements are numbers: longitude, latitude, then optionally altitude (RFC 7946 section 3.1.1)"
        guard let p = position as? [Any] else { return .failure("must be a position, not \(JSONKind.aName(position)); \(form)") }
        guard p.count >= 2 else { return .failure("has \(p.count) element\(p.count == 1 ? "" : "s"); \(form)") }
        var numbers: [Double] = []
        for (i, e) in p.enumerated() {
            guard let v = JSONKind.number(e), v.isFinite else {
                let what = JSONKind.number(e) == nil ? JSONKind.aName(e) : "not finite"
                return .failure("element \(i) is \(what), not a number; \(form)")
            }
            numbers.append(v)
        }
        return .success((numbers[0], numbers[1]))
    }

    /// The most rows times long edges a request's geometries may have over its zooms
    /// (`longEdgeRows`): each row of a shape goes over its edges spanning more than
    /// `ProjectedRings.bandRows` rows, the others only near it. A polygon zigzagging from 60° S
    /// to 60° N 30,000 times (every edge long; 26 billion at z18) would plan for minutes; a
    /// detailed country's long edges are a few hundred. About 2-4 s at the limit.
    public static let maxPlanLongEdgeRows = 200_000_000

    /// The edges of the shape spanning more than `ProjectedRings.bandRows` tile rows at zoom `z`,
    /// times `rows` (the rows a plan asks at that zoom), saturating.
    public func longEdgeRows(z: Int, rows: Int) -> Int { indexed(z: z).longEdgeRows(rows: rows) }

    /// The most positions a shape may have in all.
    public static let maxPositions = 100_000
    /// The most tiles a shape's bounding box may span over the request's zooms (and one deeper,
    /// for 256 px raster sources): the daemon tracks progress over the bounding rectangles, one bit
    /// per tile, and scans them row by row.
    public static let maxBoundingTiles = 50_000_000
    /// The most plan indices a plan with a shape may span: its bounding rectangles over every tile
    /// source at the zooms each loads (a 64 px raster source loads 3 zooms deeper than the map,
    /// a 256 px one 1), one bit each in the daemon's progress bitmap (25 MB here), and each of
    /// their rows scanned once to count the shape's tiles. `Planner` refuses a plan over it with
    /// `tileLimitExceeded` before counting.
    public static let maxPlanIndexSpace = 200_000_000
    /// The most tile rows the rectangles of a request's corridors and geometry parts may have
    /// over its zooms (validation, `RegionPart.checkBoundingTiles`; the planner allows twice it
    /// over every tile source at the zooms each loads, `Planner.checkPlanWork`): the planner
    /// works out the tiles of each row (a corridor's caps, a shape's rings), on the daemon's loop
    /// when a request is taken. At about 6 us a corridor row (release build, 2026-12-07) this
    /// keeps planning within a few seconds; attack round 44 planned 16 parts of a 1,000 km line
    /// at z24 (14.5 million rows) for 50 s and 816 MB while the daemon answered no control file
    /// and no SIGTERM. `bounds` parts and a top-level geometry are not counted.
    public static let maxPlanRows = 500_000
    /// The most stations times zooms a request's corridors may have in all: each zoom goes over
    /// every station of each corridor once or more (its rows), however few rows that makes
    /// (attack round 45: 64 corridor parts of 3.6 million stations each, z0-16, planned for 40 s
    /// within the row limit). A single corridor at its station limit (4,000,000) may have 25
    /// zooms; about a second a 60 million (release build).
    public static let maxPlanStationZooms = 100_000_000

    /// The smallest box holding every polygon (`GeoBounds.union` of their boxes): across the
    /// antimeridian (west > east) for a shape split at ±180, where `bounds` is the whole width.
    /// What exports state as the region's box (its centre is the shape's: attack round 12).
    public var outline: GeoBounds {
        GeoBounds.union(polygons.map { RegionShape(polygons: [$0]).bounds })
    }

    /// The bounding box of every position.
    public var bounds: GeoBounds {
        var w = 180.0, s = 90.0, e = -180.0, n = -90.0
        for poly in polygons { for ring in poly { for p in ring { w = min(w, p[0]); e = max(e, p[0]); s = min(s, p[1]); n = max(n, p[1]) } } }
        return GeoBounds(west: w, south: s, east: e, north: n)
    }

    /// Parses a GeoJSON geometry object (`Polygon` or `MultiPolygon`, a `Feature` holding one,
    /// or a `FeatureCollection`/`GeometryCollection` of them: their union).
    /// - Returns: the shape, or a message naming what is wrong (a member by its index).
    public static func parse(_ v: Any) -> Result<RegionShape, ShapeError> {
        guard let o = v as? [String: Any], let type = o["type"] as? String else {
            return .failure("must be a GeoJSON object with a 'type'")
        }
        switch type {
        case "Feature":
            guard let g = o["geometry"] as? [String: Any], let t = g["type"] as? String else { return .failure("the Feature has no geometry") }
            if t == "GeometryCollection" { return parse(g) }
            return parseGeometry(t, g["coordinates"])
        case "FeatureCollection", "GeometryCollection":
            let members: [GeoJSONMember]
            switch GeoJSONMember.all(of: o, type) { case .success(let m): members = m; case .failure(let e): return .failure(e) }
            var polys: [[[[Double]]]] = []
            for member in members {
                let (g, t, key, i) = (member.geometry, member.type, member.key, member.index)
                guard t == "Polygon" || t == "MultiPolygon" else {
                    return .failure("\(key)[\(i)] is a \(t); only Polygon and MultiPolygon members are supported")
                }
                switch parseGeometry(t, g["coordinates"]) {
                case .success(let s): polys += s.polygons
                case .failure(let e): return .failure("\(key)[\(i)]: \(e.message)")
                }
                if polys.reduce(0, { $0 + $1.reduce(0) { $0 + $1.count } }) > maxPositions { return .failure("more than \(maxPositions) positions") }
            }
            return .success(RegionShape(polygons: polys))
        default:
            return parseGeometry(type, o["coordinates"])
        }
    }

    /// `poly` clipped to the longitudes `lo...hi` and shifted by `shift` degrees; nil when nothing
    /// of its exterior is left. Each ring is clipped on its own (Sutherland-Hodgman against two
    /// meridians), which is exact for the covered area: the clip band is convex.
    static func clip(_ poly: [[[Double]]], lo: Double, hi: Double, shift: Double) -> [[[Double]]]? {
        func clipRing(_ ring: [[Double]], keep: ([Double]) -> Bool, at lon: Double) -> [[Double]] {
            var out: [[Double]] = []
            let pts = Array(ring.dropLast())
            for i in 0..<pts.count {
                let a = pts[i], b = pts[(i + 1) % pts.count]
                let ina = keep(a), inb = keep(b)
                if ina { out.append(a) }
                if ina != inb {
                    let t = (lon - a[0]) / (b[0] - a[0])
                    out.append([lon, a[1] + (b[1] - a[1]) * t])
                }
            }
            if let f = out.first { out.append(f) }
            return out
        }
        var rings: [[[Double]]] = []
        for (i, r) in poly.enumerated() {
            var c = clipRing(r, keep: { $0[0] >= lo }, at: lo)
            if c.count >= 4 { c = clipRing(c, keep: { $0[0] <= hi }, at: hi) }
            if c.count < 4 {
                if i == 0 { return nil }
                continue
            }
            rings.append(c.map { [$0[0] + shift, $0[1]] })
        }
        return rings
    }

    static func parseGeometry(_ type: String, _ coords: Any?) -> Result<RegionShape, ShapeError> {
        var total = 0
        func ring(_ v: Any, _ where_: String) -> Result<[[Double]], ShapeError> {
            guard let arr = v as? [Any] else { return .failure("\(where_) must be an array of positions") }
            var out: [[Double]] = []
            for (i, pv) in arr.enumerated() {
                let lon: Double, lat: Double
                switch RegionShape.lonLat(pv) {
                case .success(let p): (lon, lat) = p
                case .failure(let e): return .failure("\(where_)[\(i)] \(e.message)")
                }
                guard RegionShape.isPosition(lon: lon, lat: lat) else {
                    return .failure("\(where_)[\(i)] [\(lon), \(lat)] is outside -360...360, -90...90 degrees (beyond ±180 only to cross the antimeridian)")
                }
                out.append([lon, lat])
            }
            total += out.count
            guard out.count >= 4 else { return .failure("\(where_) needs at least 4 positions") }
            guard out.first! == out.last! else { return .failure("\(where_) is not closed (its first and last positions differ)") }
            return .success(out)
        }
        func polygon(_ v: Any, _ where_: String) -> Result<[[[Double]]], ShapeError> {
            guard let rings = v as? [Any], !rings.isEmpty else { return .failure("\(where_) must be a non-empty array of rings") }
            var out: [[[Double]]] = []
            for (i, r) in rings.enumerated() {
                switch ring(r, "\(where_)[\(i)]") {
                case .success(let x): out.append(x)
                case .failure(let m): return .failure(m)
                }
            }
            return .success(out)
        }
        var polys: [[[[Double]]]] = []
        switch type {
        case "Polygon":
            guard let c = coords else { return .failure("the Polygon has no coordinates") }
            switch polygon(c, "coordinates") { case .success(let p): polys = [p]; case .failure(let m): return .failure(m) }
        case "MultiPolygon":
            guard let c = coords as? [Any], !c.isEmpty else { return .failure("the MultiPolygon needs an array of polygons") }
            for (i, pv) in c.enumerated() {
                switch polygon(pv, "coordinates[\(i)]") { case .success(let p): polys.append(p); case .failure(let m): return .failure(m) }
            }
        default:
            return .failure("type '\(type)' is not supported; use Polygon or MultiPolygon")
        }
        if total > maxPositions { return .failure("\(total) positions; at most \(maxPositions)") }
        // Across the antimeridian: the parts beyond ±180 move to the other side.
        polys = polys.flatMap { p -> [[[[Double]]]] in
            let lons = p[0].map { $0[0] }
            guard lons.contains(where: { $0 > 180 || $0 < -180 }) else { return [p] }
            return [clip(p, lo: -540, hi: -180, shift: 360), clip(p, lo: -180, hi: 180, shift: 0), clip(p, lo: 180, hi: 540, shift: -360)].compactMap { $0 }
        }
        if polys.isEmpty { return .failure("the polygon has no area") }
        let shape = RegionShape(polygons: polys)
        let b = shape.bounds
        if b.west >= b.east || b.south >= b.north { return .failure("the polygon has no area") }
        return .success(shape)
    }

    /// The covered columns of tile row `y` at zoom `z`: sorted, disjoint, inclusive ranges of x.
    /// A tile is covered when the shape's interior meets the tile (touching an edge is not
    /// enough). Exact: the union of the interior spans on the row's top and bottom lines (even-odd
    /// rule) and the x-extent of every edge clipped to the row. Web Mercator, latitudes clamped.
    public func columns(z: Int, y: Int) -> [ClosedRange<Int>] { columns(z: z, y: y, rings: projected(z: z)) }

    /// Every ring projected to fractional tile coordinates at zoom `z`, in `polygons` order; positions
    /// within 1e-9 tile of a tile border are snapped onto it (floating noise).
    public func projected(z: Int) -> [[(Double, Double)]] {
        func snap(_ v: Double) -> Double { abs(v - v.rounded()) < 1e-9 ? v.rounded() : v }
        return polygons.flatMap { poly in
            poly.map { ring in ring.map { (snap(WebMercator.tileX(lon: $0[0], z: z)), snap(WebMercator.tileY(lat: $0[1], z: z))) } }
        }
    }

    /// Every ring `projected(z:)`, with its edges indexed by row (`ProjectedRings`), for
    /// `columns(z:y:rings:)` row after row.
    public func indexed(z: Int) -> ProjectedRings {
        var polygonOfRing: [Int] = []
        for (p, poly) in polygons.enumerated() { polygonOfRing += Array(repeating: p, count: poly.count) }
        return ProjectedRings(projected(z: z), polygonOfRing: polygonOfRing)
    }

    /// `columns(z:y:rings:)` asking only the edges that can meet row `y` (`ProjectedRings`): the
    /// same columns (`GeometryTests.testIndexedRingsGiveTheSameColumns`), in time of the edges
    /// near the row rather than of every edge (a review of 2026-12-07: a shape's every row went
    /// over every edge, so a 60,001-position polygon to z18 planned for 55 s).
    public func columns(z: Int, y: Int, rings indexed: ProjectedRings) -> [ClosedRange<Int>] {
        let n = 1 << z
        let top = Double(y), bottom = Double(y + 1)
        let rings = indexed.rings
        let near = indexed.edges(near: y)
        var spans: [(Double, Double)] = []
        for e in near {
            let ring = rings[Int(e.ring)], i = Int(e.i)
            if let span = RegionShape.clip(ring[i], ring[i + 1], top: top, bottom: bottom) { spans.append(span) }
        }
        for line in [top + 1e-7, bottom - 1e-7] {
            var xs: [Int: [Double]] = [:] // by polygon
            for e in near {
                let ring = rings[Int(e.ring)], i = Int(e.i)
                if let x = RegionShape.crossing(ring[i], ring[i + 1], line: line) { xs[indexed.polygonOfRing[Int(e.ring)], default: []].append(x) }
            }
            for (_, found) in xs {
                let sorted = found.sorted()
                var k = 0
                while k + 1 < sorted.count { spans.append((sorted[k], sorted[k + 1])); k += 2 }
            }
        }
        return RegionShape.spansToColumns(spans, n: n)
    }

    /// `columns(z:y:)` with the rings already `projected(z:)` (project once per zoom, not per
    /// row), going over every edge for the row (the reference `ProjectedRings` is held to).
    public func columns(z: Int, y: Int, rings: [[(Double, Double)]]) -> [ClosedRange<Int>] {
        let n = 1 << z
        let top = Double(y), bottom = Double(y + 1)
        var spans: [(Double, Double)] = []
        // Edges clipped to the row band.
        for ring in rings {
            for i in 0..<(ring.count - 1) {
                if let span = RegionShape.clip(ring[i], ring[i + 1], top: top, bottom: bottom) { spans.append(span) }
            }
        }
        // Interior just inside the band's top and bottom lines, polygon by polygon (holes by
        // even-odd); just inside, so that a shape touching the row only along its border is out.
        for line in [top + 1e-7, bottom - 1e-7] {
            var start = 0
            for poly in polygons {
                var xs: [Double] = []
                for ring in rings[start..<(start + poly.count)] {
                    for i in 0..<(ring.count - 1) {
                        if let x = RegionShape.crossing(ring[i], ring[i + 1], line: line) { xs.append(x) }
                    }
                }
                start += poly.count
                xs.sort()
                var k = 0
                while k + 1 < xs.count { spans.append((xs[k], xs[k + 1])); k += 2 }
            }
        }
        return RegionShape.spansToColumns(spans, n: n)
    }

    /// The x-extent within the row band `top...bottom` of the edge from `a` to `b` (tile units),
    /// or nil when it does not enter the band: a horizontal edge counts only strictly inside
    /// the band (on its border it touches).
    static func clip(_ a: (Double, Double), _ b: (Double, Double), top: Double, bottom: Double) -> (Double, Double)? {
        let (x0, y0) = a, (x1, y1) = b
        if y0 == y1 { return y0 > top && y0 < bottom ? (min(x0, x1), max(x0, x1)) : nil }
        let lo = max(min(y0, y1), top), hi = min(max(y0, y1), bottom)
        guard lo < hi else { return nil }
        let xa = x0 + (x1 - x0) * (lo - y0) / (y1 - y0)
        let xb = x0 + (x1 - x0) * (hi - y0) / (y1 - y0)
        return (min(xa, xb), max(xa, xb))
    }

    /// The x where the edge from `a` to `b` crosses the horizontal line `line` (one end at or
    /// below it, the other above), or nil.
    static func crossing(_ a: (Double, Double), _ b: (Double, Double), line: Double) -> Double? {
        let (x0, y0) = a, (x1, y1) = b
        return (y0 <= line) != (y1 <= line) ? x0 + (x1 - x0) * (line - y0) / (y1 - y0) : nil
    }

    /// Spans of fractional tile x to tile columns within `0..<n`, merged.
    static func spansToColumns(_ spans: [(Double, Double)], n: Int) -> [ClosedRange<Int>] {
        // Spans to tile columns: half-open, so a span ending exactly on a tile edge stops there.
        var cols: [ClosedRange<Int>] = []
        for (a, b) in spans {
            // A zero-width span on a column border (a vertical edge) only touches those columns.
            if a == b && a == a.rounded() { continue }
            let lo = min(max(Int(floor(a)), 0), n - 1)
            let hi = min(max(max(Int(ceil(b)) - 1, Int(floor(a))), 0), n - 1)
            cols.append(lo...hi)
        }
        return TileColumns.merge(cols)
    }

    /// Number of tiles covered within `rect`. Only rows some ring reaches are asked
    /// (`ProjectedRings.rowSpans`): a MultiPolygon's bounding rectangle may be mostly empty rows.
    public func count(in rect: TileRect) -> Int { counted(in: rect, stoppingAbove: Int.max).count }

    /// The tiles covered within `rect`, counting stopped as soon as the count passes `limit`
    /// with more than the last two rows left (a plan over its tile limit is refused, and a thin
    /// shape 140 degrees tall took 15 s to be counted whole at z0-24): the count is then of some
    /// of the tiles, more than `limit`, and `whole` is false.
    func counted(in rect: TileRect, stoppingAbove limit: Int, cancel: PlanCancellation? = nil) -> (count: Int, whole: Bool) {
        var total = 0
        let rings = indexed(z: rect.z)
        let lastRow = rings.rowSpans.last { $0.lowerBound <= rect.maxY }.map { min($0.upperBound, rect.maxY) }
        for span in rings.rowSpans {
            let first = max(span.lowerBound, rect.minY), last = min(span.upperBound, rect.maxY)
            guard first <= last else { continue }
            for y in first...last {
                if y & 1023 == 0, cancel?.isCancelled == true { return (total, false) }
                for c in columns(z: rect.z, y: y, rings: rings) {
                    let lo = max(c.lowerBound, rect.minX), hi = min(c.upperBound, rect.maxX)
                    if lo <= hi { total += hi - lo + 1 }
                }
                // The last two rows are counted whatever (a ring's first and last rows may hold
                // no tile): a count that passes the limit there is the whole count.
                if total > limit, let lastRow, y + 1 < lastRow { return (total, false) }
            }
        }
        return (total, true)
    }

    /// The tiles covered within each of `rects` (`count(in:)`), counting stopped once their sum
    /// passes `limit` with tiles left to count: `stopped` then, and `total` (more than `limit`)
    /// counts only some of them. A count that passes `limit` on its last rows is whole, not
    /// stopped (attack round 48: "at least" was said of an exact count).
    /// With `cancel` cancelled, counting stops within a thousand rows (`stopped`; the caller
    /// looks at `cancel`).
    public func counts(in rects: [TileRect], stoppingAbove limit: Int = Int.max, cancel: PlanCancellation? = nil) -> (counts: [Int], total: Int, stopped: Bool) {
        var counts: [Int] = [], total = 0
        for (k, r) in rects.enumerated() {
            let (n, whole) = counted(in: r, stoppingAbove: limit - total, cancel: cancel)
            if cancel?.isCancelled == true { return (counts + [n], total + n, true) }
            counts.append(n)
            total += n
            if total > limit && (!whole || k < rects.count - 1) { return (counts, total, true) }
        }
        return (counts, total, false)
    }
}

/// A shape's rings projected to tile units at one zoom (`RegionShape.projected(z:)`), with their
/// edges indexed by row, so that working out one row asks only the edges that can meet it: an
/// edge meets the closed band of row y (y...y+1) only for y within ceil(ymin) - 1 ... floor(ymax).
/// Edges spanning at most `bandRows` rows are listed by the band (`bandRows` rows) of their first
/// row; longer ones are asked for every row. `RegionShape.longEdgeRows` counts what those cost.
public struct ProjectedRings: Sendable {
    /// rings[r][i] = (x, y), fractional tile coordinates.
    public let rings: [[(Double, Double)]]
    /// The polygon (in `RegionShape.polygons`) of each ring.
    let polygonOfRing: [Int]
    /// Short edges (ring, index of their first position) by band of their first row.
    let bands: [Int: [(ring: Int32, i: Int32)]]
    /// Edges spanning more than `bandRows` rows.
    let long: [(ring: Int32, i: Int32)]
    /// Rows a band holds: 1 << `bandShift`.
    static let bandShift = 4
    static let bandRows = 1 << bandShift
    /// The rows some edge may meet (`rows` of each ring's lowest and highest y: a ring's edges
    /// join end to end), merged and sorted. No other row has a tile: a row band inside a ring
    /// has the ring's edges crossing it on both sides.
    public let rowSpans: [ClosedRange<Int>]

    init(_ rings: [[(Double, Double)]], polygonOfRing: [Int]) {
        self.rings = rings
        self.polygonOfRing = polygonOfRing
        var spans: [ClosedRange<Int>] = []
        for ring in rings where ring.count > 1 {
            let ys = ring.map(\.1)
            let (first, last) = ProjectedRings.rows(ys.min()!, ys.max()!)
            spans.append(first...last)
        }
        rowSpans = TileColumns.merge(spans)
        var bands: [Int: [(ring: Int32, i: Int32)]] = [:], long: [(ring: Int32, i: Int32)] = []
        for (r, ring) in rings.enumerated() {
            for i in 0..<max(ring.count - 1, 0) {
                let (first, last) = ProjectedRings.rows(ring[i].1, ring[i + 1].1)
                if last - first + 1 > ProjectedRings.bandRows { long.append((Int32(r), Int32(i))) } else {
                    bands[first >> ProjectedRings.bandShift, default: []].append((Int32(r), Int32(i)))
                }
            }
        }
        self.bands = bands
        self.long = long
    }

    /// The rows whose closed band an edge from y `a` to y `b` may meet: ceil(min) - 1 ... floor(max).
    static func rows(_ a: Double, _ b: Double) -> (first: Int, last: Int) {
        (Int(min(a, b).rounded(.up)) - 1, Int(max(a, b).rounded(.down)))
    }

    /// Every edge that can meet row `y`'s closed band, and some that cannot.
    func edges(near y: Int) -> [(ring: Int32, i: Int32)] {
        var out = long
        // A short edge meeting row y has its first row within y - bandRows + 1 ... y.
        for band in ((y - ProjectedRings.bandRows + 1) >> ProjectedRings.bandShift)...(y >> ProjectedRings.bandShift) { out += bands[band] ?? [] }
        return out
    }

    /// Rows times long edges: what asking this zoom's every row costs beyond the short edges
    /// near it (`rows` the rows asked).
    func longEdgeRows(rows: Int) -> Int { SaturatingCount.multiply(long.count, rows) }
}
