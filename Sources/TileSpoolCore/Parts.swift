import Foundation

/// One part of a region (request field `parts`): an area and the map zooms it is downloaded at.
/// The region is the union of its parts; a tile that several parts reach is planned once.
public struct RegionPart: Sendable, Equatable {
    /// A part's area.
    public enum Area: Sendable, Equatable {
        /// `[west, south, east, north]` in degrees (`west > east` across the antimeridian).
        case bounds(GeoBounds)
        /// A GeoJSON Polygon or MultiPolygon (`RegionShape`).
        case shape(RegionShape)
        /// A line and a buffer in metres (`Corridor`).
        case corridor(Corridor)
    }
    /// The part's area.
    public var area: Area
    /// Map zoom range, `0 <= minZoom <= maxZoom <= 24`.
    public var minZoom: Int
    public var maxZoom: Int

    /// The most parts a request may have.
    public static let maxParts = 64

    public init(area: Area, minZoom: Int, maxZoom: Int) { self.area = area; self.minZoom = minZoom; self.maxZoom = maxZoom }

    /// The part's bounding box in degrees (a corridor's includes its buffer).
    public var bounds: GeoBounds {
        switch area {
        case .bounds(let b): return b
        case .shape(let s): return s.bounds
        case .corridor(let c): return c.bounds
        }
    }

    /// The part as written in `request.json` (`{"bounds"|"geometry"|"corridor": ..., "minZoom", "maxZoom"}`).
    public var jsonObject: [String: Any] {
        var o: [String: Any] = ["minZoom": minZoom, "maxZoom": maxZoom]
        switch area {
        case .bounds(let b): o["bounds"] = [b.west, b.south, b.east, b.north]
        case .shape(let s): o["geometry"] = ["type": "MultiPolygon", "coordinates": s.polygons] as [String: Any]
        case .corridor(let c): o["corridor"] = c.jsonObject
        }
        return o
    }

    /// Validates `minZoom` and `maxZoom` of object `o` (a request or a part; `prefix` names it in
    /// messages, e.g. `parts[1].`).
    /// - Throws: `RegionError` `invalidRequest` naming the field.
    static func zooms(_ o: [String: Any], prefix: String) throws(RegionError) -> ClosedRange<Int> {
        func bad(_ message: String) -> RegionError { RegionError(code: .invalidRequest, message: message) }
        let maxZoomLevel = RequestValidator.maxZoomLevel
        func zoom(_ key: String) throws(RegionError) -> Int {
            guard let v = o[key] else { throw bad("\(prefix)\(key): missing; give an integer 0...\(maxZoomLevel)") }
            guard let z = JSONKind.integer(v) else { throw bad("\(prefix)\(key): must be an integer, not \(JSONKind.name(v) == "number" ? "\(v)" : "a " + JSONKind.name(v))") }
            guard (0...maxZoomLevel).contains(z) else { throw bad("\(prefix)\(key): \(z) is outside 0...\(maxZoomLevel)") }
            return z
        }
        let lo = try zoom("minZoom"), hi = try zoom("maxZoom")
        if lo > hi { throw bad("\(prefix)minZoom (\(lo)) is greater than maxZoom (\(hi))") }
        return lo...hi
    }

    /// What validating a request's corridors and geometries has counted so far against the
    /// planning budget (`RegionShape.maxPlanRows`, `RegionShape.maxPlanStationZooms`), over the
    /// request's zooms: the tile rows of their rectangles, and each corridor's stations times
    /// its zooms. A `bounds` part counts neither: its rows take no working out.
    struct PlanWork: Sendable {
        var rows = 0
        var stationZooms = 0
        /// A geometry's rows times its long edges (`RegionShape.longEdgeRows`).
        var longEdgeRows = 0
        /// False for a top-level `geometry`: its rows are counted against the shape's
        /// index space by the planner (`RegionShape.maxPlanIndexSpace`), one edge index lookup
        /// each, not swept as a part's are.
        var countsRows = true
    }

    /// Refuses a geometry or corridor whose bounding rectangles span more than
    /// `RegionShape.maxBoundingTiles` tiles over `zooms` and one deeper (for 256 px raster
    /// sources): for a corridor, the rectangles of its pieces (`Corridor.pieces`), not its box.
    /// With `work` (the counts of the parts before it; nil for the stored copy of a request
    /// accepted before, or a top-level geometry), also refuses an area that takes the request
    /// past the planning budget (`PlanWork`), zoom by zoom, so a request far over it is refused
    /// before its deepest zooms are cut into pieces (attack round 44: 16 corridor parts at z24
    /// took 5 s and 700 MB to be refused by the planner). Zooms one deeper are the planner's to
    /// count (`Planner.checkPlanWork`).
    /// - Returns: `work` with this area's counts added.
    /// - Throws: `RegionError` `tileLimitExceeded`.
    @discardableResult
    static func checkBoundingTiles(_ area: Area, _ zooms: ClosedRange<Int>, name: String, work: PlanWork? = nil) throws(RegionError) -> PlanWork? {
        let before = work.map { $0.rows > 0 || $0.stationZooms > 0 || $0.longEdgeRows > 0 } == true ? " and those of the parts before it" : ""
        func over(_ what: String) -> RegionError {
            // (A buffer is a corridor's to widen: round 46 saw the advice given for a geometry.)
            let advice = isCorridor(area) ? "give fewer or shallower zooms, a wider buffer, or split the region into smaller requests"
                : "give fewer or shallower zooms, a simpler shape, or split the region into smaller requests"
            return RegionError(code: .tileLimitExceeded, message: "\(name): \(what); \(advice)")
        }
        var counted = work
        if case .corridor(let c) = area, counted != nil {
            counted!.stationZooms = SaturatingCount.add(counted!.stationZooms, SaturatingCount.multiply(c.stationCount, zooms.count))
            if counted!.stationZooms > RegionShape.maxPlanStationZooms {
                throw over("the stations of its line\(before) times their zooms come to \(counted!.stationZooms), more than \(RegionShape.maxPlanStationZooms) (each zoom goes over every station)")
            }
        }
        if case .bounds = area { return counted } // its rows take no working out
        var spanned = 0
        for z in zooms.lowerBound...min(zooms.upperBound + 1, RequestValidator.maxZoomLevel) {
            let rects: [TileRect]
            switch area {
            case .bounds: rects = []
            case .shape(let s): rects = WebMercator.cover(s.bounds, z: z)
            case .corridor(let c): rects = c.pieces(z: z).flatMap(\.rects)
            }
            spanned = SaturatingCount.add(spanned, rects.reduce(0) { SaturatingCount.add($0, $1.count) })
            if spanned > RegionShape.maxBoundingTiles {
                throw RegionError(code: .tileLimitExceeded, message: "\(name): its \(isCorridor(area) ? "rectangles along the line span" : "bounding box spans") more than \(RegionShape.maxBoundingTiles) tiles at zooms \(zooms.lowerBound)...\(zooms.upperBound); split the region into smaller requests")
            }
            let rows = rects.reduce(0) { SaturatingCount.add($0, $1.height) }
            if counted != nil, z <= zooms.upperBound, case .shape(let shape) = area {
                counted!.longEdgeRows = SaturatingCount.add(counted!.longEdgeRows, shape.longEdgeRows(z: z, rows: rows))
                if counted!.longEdgeRows > RegionShape.maxPlanLongEdgeRows {
                    throw over("its long edges (spanning more than \(ProjectedRings.bandRows) tile rows)\(before) times their rows come to \(counted!.longEdgeRows) by zoom \(z), more than \(RegionShape.maxPlanLongEdgeRows) (each row goes over every long edge)")
                }
            }
            if counted?.countsRows == true, z <= zooms.upperBound {
                counted!.rows = SaturatingCount.add(counted!.rows, rows)
                if counted!.rows > RegionShape.maxPlanRows {
                    throw over("its rectangles\(before) have \(counted!.rows) tile rows by zoom \(z), more than \(RegionShape.maxPlanRows) (each row is worked out when planning)")
                }
            }
        }
        return counted
    }

    static func isCorridor(_ a: Area) -> Bool { if case .corridor = a { return true }; return false }

    /// Parses the request's `parts`: a non-empty array of at most `maxParts` objects, each with
    /// exactly one of `bounds`, `geometry` and `corridor`, and `minZoom` and `maxZoom`.
    /// - Throws: `RegionError` (`invalidRequest`, or `tileLimitExceeded` for a part too large to
    ///   plan) naming the part by its index.
    /// - Parameter rowBudget: false for the stored copy of a request accepted before
    ///   (`RegionShape.maxPlanRows` is not held against it).
    static func parseList(_ v: Any, rowBudget: Bool = true) throws(RegionError) -> [RegionPart] {
        func bad(_ message: String) -> RegionError { RegionError(code: .invalidRequest, message: message) }
        guard let arr = v as? [Any] else { throw bad("parts: must be an array of parts {\"bounds\"|\"geometry\"|\"corridor\": ..., \"minZoom\": a, \"maxZoom\": b}") }
        guard !arr.isEmpty else { throw bad("parts: must have at least one part") }
        guard arr.count <= maxParts else { throw bad("parts: at most \(maxParts) parts") }
        var out: [RegionPart] = []
        var work: PlanWork? = rowBudget ? PlanWork() : nil // the parts so far (`checkBoundingTiles`)
        for (i, pv) in arr.enumerated() {
            let prefix = "parts[\(i)]."
            guard let o = pv as? [String: Any] else { throw bad("parts[\(i)]: must be an object, not a \(JSONKind.name(pv))") }
            let unknown = Set(o.keys).subtracting(["bounds", "geometry", "corridor", "minZoom", "maxZoom"]).sorted()
            if !unknown.isEmpty { throw bad("parts[\(i)]: unknown field \(unknown.map { "'\($0)'" }.joined(separator: ", ")); a part has one of bounds, geometry and corridor, and minZoom and maxZoom") }
            let given = ["bounds", "geometry", "corridor"].filter { o[$0] != nil }
            guard given.count == 1 else {
                throw bad(given.isEmpty ? "parts[\(i)]: give one of bounds, geometry and corridor" : "parts[\(i)]: \(given.joined(separator: " and ")): give exactly one of them")
            }
            let area: Area
            if let gv = o["geometry"] {
                switch RegionShape.parse(gv) { case .success(let s): area = .shape(s); case .failure(let e): throw bad("\(prefix)geometry: \(e.message)") }
            } else if let cv = o["corridor"] {
                switch Corridor.parse(cv) { case .success(let c): area = .corridor(c); case .failure(let e): throw bad("\(prefix)corridor: \(e.message)") }
            } else {
                do { area = .bounds(try RequestValidator.validateBounds(o["bounds"])) } catch {
                    throw bad(prefix + error.message)
                }
            }
            let z = try zooms(o, prefix: prefix)
            work = try checkBoundingTiles(area, z, name: "parts[\(i)]", work: work)
            out.append(RegionPart(area: area, minZoom: z.lowerBound, maxZoom: z.upperBound))
        }
        var positions = 0
        for p in out {
            switch p.area {
            case .shape(let s): positions += s.polygons.reduce(0) { $0 + $1.reduce(0) { $0 + $1.count } }
            case .corridor(let c): positions += c.lines.reduce(0) { $0 + $1.count }
            case .bounds: break
            }
        }
        if positions > RegionShape.maxPositions { throw bad("parts: \(positions) positions in all; at most \(RegionShape.maxPositions)") }
        return out
    }
}

extension Planner {
    /// The rectangles and areas of one tile source over a request's parts (`RegionRequest.areaParts`):
    /// part by part in request order, a corridor's rectangles along its line from the start (by
    /// line, then first station, then zoom), others zoom by zoom. `zooms` gives the tile zooms a
    /// part loads for this source (nil: none); `sourceBounds` limits the rectangles to a
    /// TileJSON's `bounds`.
    static func areaRects(_ parts: [RegionPart], zooms: (RegionPart) -> ClosedRange<Int>?, sourceBounds: GeoBounds?)
        -> (rects: [TileRect], areas: [TileArea], rectAreas: [RectArea]) {
        var rects: [TileRect] = [], areas: [TileArea] = [], rectAreas: [RectArea] = []
        func limited(_ r: [TileRect], _ z: Int) -> [TileRect] {
            guard let sb = sourceBounds else { return r }
            return intersect(r, WebMercator.cover(sb, z: z))
        }
        for (i, part) in parts.enumerated() {
            switch part.area {
            case .bounds: areas.append(.all)
            case .shape(let s): areas.append(.shape(s))
            case .corridor(let c): areas.append(.corridor(c))
            }
            guard let zr = zooms(part) else { continue }
            switch part.area {
            case .bounds(let b):
                for z in zr { for r in limited(WebMercator.cover(b, z: z), z) { rects.append(r); rectAreas.append(RectArea(area: i)) } }
            case .shape(let s):
                for z in zr { for r in limited(WebMercator.cover(s.bounds, z: z), z) { rects.append(r); rectAreas.append(RectArea(area: i)) } }
            case .corridor(let c):
                var entries: [(piece: Corridor.Piece, z: Int, rects: [TileRect])] = []
                for z in zr { for (p, rs) in c.pieces(z: z) { entries.append((p, z, limited(rs, z))) } }
                entries.sort { ($0.piece.line, $0.piece.from, $0.z) < ($1.piece.line, $1.piece.from, $1.z) }
                for e in entries { for r in e.rects { rects.append(r); rectAreas.append(RectArea(area: i, piece: e.piece)) } }
            }
        }
        return (rects, areas, rectAreas)
    }

    /// Refuses area rectangles (all sources) spanning more than `RegionShape.maxPlanIndexSpace`.
    static func checkAreaBudget(_ rectangles: [[TileRect]], sources: String) throws(RegionError) {
        let spanned = SaturatingCount.sum(rectangles.lazy.flatMap { $0 }.map(\.count))
        guard spanned > RegionShape.maxPlanIndexSpace else { return }
        throw RegionError(code: .tileLimitExceeded, message: "corridor or parts: their rectangles, over \(sources), span \(spanned == Int.max ? "more than \(Int.max - 1)" : String(spanned)) tiles, more than \(RegionShape.maxPlanIndexSpace); split the region into smaller requests")
    }

    /// Refuses area rectangles worked out separately (one list per tile source that plans its
    /// own: a style's sources at the zooms each loads; a tiles request's templates share one),
    /// before any is counted, when their corridor and geometry rectangles have more than twice
    /// `RegionShape.maxPlanRows` tile rows in all, or their corridors more than twice
    /// `RegionShape.maxPlanStationZooms` stations times zooms (each source goes over every
    /// station of a corridor at each of its zooms: a review of 2026-12-07 found a style of
    /// 1,000 sources multiplying a corridor the validation had let through). Twice: validation
    /// held the request's zooms to the limits, and a style's 256 px raster source loads one zoom
    /// deeper (about twice the rows); a region accepted before the limits is planned again (a
    /// refresh, `plan.json` lost) unless it is that far over them.
    static func checkPlanWork(_ sets: [(rects: [TileRect], areas: [TileArea], rectAreas: [RectArea])], sources: String) throws(RegionError) {
        var rows = 0, stationZooms = 0
        var stations: [Int: Int] = [:] // by area position: the same parts in every set
        for set in sets {
            var zooms: [Int: Set<Int>] = [:]
            for (r, ra) in zip(set.rects, set.rectAreas) {
                if case .all = set.areas[ra.area] { continue }
                rows = SaturatingCount.add(rows, r.height)
                if case .corridor = set.areas[ra.area] { zooms[ra.area, default: []].insert(r.z) }
            }
            for (a, zs) in zooms {
                guard case .corridor(let c) = set.areas[a] else { continue }
                if stations[a] == nil { stations[a] = c.stationCount }
                stationZooms = SaturatingCount.add(stationZooms, SaturatingCount.multiply(stations[a]!, zs.count))
            }
        }
        func over(_ what: String) -> RegionError {
            RegionError(code: .tileLimitExceeded, message: "corridor or parts: \(what); give fewer or shallower zooms, a wider buffer, fewer sources, or split the region into smaller requests")
        }
        if rows > 2 * RegionShape.maxPlanRows {
            throw over("their rectangles, over \(sources), have \(rows) tile rows, more than \(2 * RegionShape.maxPlanRows) (each row is worked out when planning)")
        }
        if stationZooms > 2 * RegionShape.maxPlanStationZooms {
            throw over("the stations of their lines times the zooms, over \(sources), come to \(stationZooms), more than \(2 * RegionShape.maxPlanStationZooms) (each source's zooms go over every station)")
        }
    }
}
