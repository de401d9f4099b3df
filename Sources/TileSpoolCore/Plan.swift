import Foundation

/// The kind of a downloaded resource: the first column of a manifest line.
public enum ResourceKind: String, Sendable, Codable, CaseIterable {
    /// The style JSON.
    case style
    /// A source's TileJSON.
    case source
    /// A sprite sheet's `.json` or `.png`, at @1x or @2x.
    case sprite
    /// One 256-code-point glyph range of one fontstack (a PBF).
    case glyphs
    /// A geojson source's `data` URL or an image source's `url`.
    case data
    /// A tile of a tiled source.
    case tile

    /// True for resources whose 404 is recorded as missing instead of failing the region.
    public var missingIsAllowed: Bool { self == .sprite || self == .glyphs }
}

/// One resource that is not a tile: what to fetch and how it is named in the manifest.
public struct PlannedResource: Sendable, Equatable, Codable {
    public var kind: ResourceKind
    /// The manifest key: `style`, a source name, `sprite@2x.png`, `<fontstack>/<range>`, ...
    public var key: String
    /// The absolute URL to request.
    public var url: String
    public init(kind: ResourceKind, key: String, url: String) {
        self.kind = kind; self.key = ManifestLine.sanitizeKey(key); self.url = url
    }
}

/// The tiles of one source over the region: a URL template and a rectangle per zoom (two at
/// zooms where the region crosses the antimeridian). For a GeoJSON region, `shape` limits the
/// rectangles to the tiles it covers; `rectCounts` holds how many that is in each rectangle.
///
/// A request with a corridor or parts has `areas` and `rectAreas` instead: rectangle k plans the
/// tiles that its area (`areas[rectAreas[k].area]`, for a corridor only the stretch
/// `rectAreas[k].piece` of the line) meets and that no earlier rectangle of the same zoom plans, so
/// that each tile is planned once, in the first rectangle that reaches it. Rectangles are in
/// download order: a corridor's along the route from its start (`Planner`).
public struct TileSet: Sendable, Equatable, Codable {
    /// The source name (the style's source id, or `tiles0`, `tiles1`, ... for a `tiles` request).
    public var source: String
    public var template: TileURLTemplate
    public var rects: [TileRect]
    public var shape: RegionShape?
    /// The areas of a corridor or parts request, nil otherwise.
    public var areas: [TileArea]?
    /// Per rectangle, its area (with `areas`).
    public var rectAreas: [RectArea]?
    /// Planned tiles per rectangle (the rectangle's size without a shape).
    public var rectCounts: [Int]
    /// A PMTiles archive source (issue 31): the archive, its pinned version and exactly the tiles
    /// the region takes from it (`rectCounts` count those); nil for a tile URL template.
    public var archive: ArchiveSource? = nil
    /// The exact bytes of the tiles (`ArchiveSource.tileBytes`), known for an archive; nil otherwise.
    public var tileBytes: Int? { archive?.tileBytes }
    public init(source: String, template: TileURLTemplate, rects: [TileRect], shape: RegionShape? = nil) {
        self.init(source: source, template: template, rects: rects, shape: shape,
                  rectCounts: rects.map { r in shape.map { $0.count(in: r) } ?? r.count })
    }
    /// A tile set whose planned tiles per rectangle are already counted (`RegionShape.counts`).
    public init(source: String, template: TileURLTemplate, rects: [TileRect], shape: RegionShape?, rectCounts: [Int]) {
        self.source = ManifestLine.sanitizeKey(source); self.template = template; self.rects = rects
        self.shape = shape
        self.rectCounts = rectCounts
    }
    /// A tile set over areas (a corridor or parts): `rectAreas[k]` names rectangle k's area.
    /// Counts every rectangle's planned tiles row by row (`TileSetCover`); with `cancel`
    /// cancelled, stops between rectangles (the counts are then incomplete: the caller drops the
    /// set, `Planner.plan`).
    public init(source: String, template: TileURLTemplate, rects: [TileRect], areas: [TileArea], rectAreas: [RectArea],
                cancel: PlanCancellation? = nil) {
        self.source = ManifestLine.sanitizeKey(source); self.template = template; self.rects = rects
        self.areas = areas; self.rectAreas = rectAreas
        rectCounts = []
        let cover = TileSetCover(self)
        var counts: [Int] = []
        counts.reserveCapacity(rects.count)
        for k in rects.indices {
            if k % 64 == 0, cancel?.isCancelled == true { break }
            counts.append(cover.count(rect: k))
        }
        counts += Array(repeating: 0, count: rects.count - counts.count)
        rectCounts = counts
    }
    /// Number of tiles planned in the set (`Int.max` when it overflows: `SaturatingCount`).
    public var count: Int { SaturatingCount.sum(rectCounts) }
    /// Number of plan indices the set spans (its rectangles' sizes; more than `count` with a
    /// shape), saturating at `Int.max`.
    public var indexCount: Int { rects.reduce(0) { SaturatingCount.add($0, $1.count) } }
}

/// Asks a plan under way off the daemon's loop to stop: its download stopped (paused,
/// cancelled, deleted, replaced), so the plan would be dropped (attack round 49: 30 pause and
/// resume pairs queued 30 whole plans of 5 s each ahead of every later style region). The planner
/// looks at it between tile rows and rectangles and throws `PlanCancellation.error`.
public final class PlanCancellation: @unchecked Sendable {
    private let lock = NSLock()
    private var cancelled = false
    public init() {}
    /// Asks the plan to stop (from any thread).
    public func cancel() { lock.lock(); cancelled = true; lock.unlock() }
    public var isCancelled: Bool { lock.lock(); defer { lock.unlock() }; return cancelled }
    /// What a cancelled plan throws; nobody shows it (the plan is dropped).
    public static let error = RegionError(code: .invalidRequest, message: "the plan was cancelled: its download stopped")
}

/// What a rectangle of a corridor or parts tile set plans (`TileSet.areas`).
public enum TileArea: Sendable, Equatable, Codable {
    /// Every tile of the rectangle (a `bounds` part).
    case all
    /// The tiles a GeoJSON polygon's interior meets (a `geometry` part; `RegionShape.columns`).
    case shape(RegionShape)
    /// The tiles within a corridor's buffer of a stretch of its line (`Corridor`).
    case corridor(Corridor)
}

/// A rectangle's area in `TileSet.areas`, and for a corridor the stretch of line (stations).
public struct RectArea: Sendable, Equatable, Codable {
    /// The area's position in `TileSet.areas`.
    public var area: Int
    /// For a corridor area, the stretch of line whose buffer the rectangle holds; nil otherwise.
    public var piece: Corridor.Piece?
    public init(area: Int, piece: Corridor.Piece? = nil) { self.area = area; self.piece = piece }
}

/// Which tiles of a corridor or parts tile set are planned, row by row, with the caches that make
/// repeated questions cheap (a shape's rings per zoom, a corridor's stations per line, the last
/// row). Not thread-safe; one per user.
public final class TileSetCover {
    /// The tile set asked about.
    public let set: TileSet
    private var rings: [Int: (z: Int, rings: ProjectedRings)] = [:]
    private var stations: [Int: (line: Int, stations: Corridor.Stations)] = [:]
    private var earlierCache: [Int: [Int]] = [:]
    /// The entries of every list in `earlierCache`.
    private var earlierCached = 0
    private var last: (rect: Int, y: Int, columns: [ClosedRange<Int>])?

    public init(_ set: TileSet) { self.set = set }

    /// Own columns already worked out, by rectangle and row (`Int64(k) << 32 | y`), at most
    /// `ownMemoLimit` of them (emptied when full). Where a route doubles back, its pieces overlap,
    /// and each row of a piece is asked again for every later piece overlapping it: without this,
    /// a 1,000 km route wound within 6 km planned in 93 s instead of 6.
    private var ownMemo: [Int64: [ClosedRange<Int>]] = [:]
    /// How many times `own` was asked (the work of a question, for tests).
    var ownAsked = 0
    /// The most rows `ownMemo` keeps (a few MB of column ranges).
    static let ownMemoLimit = 1 << 16

    /// The columns of row `y` that rectangle `k`'s own area meets, within the rectangle.
    func own(rect k: Int, y: Int) -> [ClosedRange<Int>] {
        ownAsked += 1
        let r = set.rects[k]
        guard y >= r.minY, y <= r.maxY, let areas = set.areas, let ra = set.rectAreas else { return [] }
        if case .all = areas[ra[k].area] { return [r.minX...r.maxX] }
        let key = Int64(k) << 32 | Int64(y)
        if let cols = ownMemo[key] { return cols }
        let cols = ownColumns(rect: k, y: y)
        if ownMemo.count >= TileSetCover.ownMemoLimit { ownMemo.removeAll(keepingCapacity: true) }
        ownMemo[key] = cols
        return cols
    }

    /// `own` worked out: the area's columns of row `y`, clipped to rectangle `k`.
    private func ownColumns(rect k: Int, y: Int) -> [ClosedRange<Int>] {
        let r = set.rects[k]
        guard let areas = set.areas, let ra = set.rectAreas else { return [] }
        let cols: [ClosedRange<Int>]
        switch areas[ra[k].area] {
        case .all: return [r.minX...r.maxX]
        case .shape(let s):
            if rings[ra[k].area]?.z != r.z { rings[ra[k].area] = (r.z, s.indexed(z: r.z)) }
            cols = s.columns(z: r.z, y: y, rings: rings[ra[k].area]!.rings)
        case .corridor(let c):
            guard let piece = ra[k].piece else { return [] }
            if stations[ra[k].area]?.line != piece.line { stations[ra[k].area] = (piece.line, c.stations(piece.line)) }
            cols = c.columns(piece, stations[ra[k].area]!.stations, z: r.z, y: y)
        }
        return TileColumns.clip(cols, r.minX, r.maxX)
    }

    /// Rectangle positions by zoom, ascending (made on first use).
    private var byZoom: [Int: [Int]]?
    /// Per zoom, a grid of cells `cellSize` tiles square, each listing (ascending) the rectangles
    /// that overlap it: the rectangles overlapping one are found among its cells' lists, not
    /// among every rectangle of the zoom (a long corridor has thousands).
    private var grids: [Int: (cell: Int, cells: [Int64: [Int]])] = [:]

    func grid(_ z: Int) -> (cell: Int, cells: [Int64: [Int]]) {
        if let g = grids[z] { return g }
        if byZoom == nil { byZoom = Dictionary(grouping: set.rects.indices, by: { set.rects[$0].z }) }
        let members = byZoom![z] ?? []
        // Cells about the size of the largest side of a typical rectangle (the median).
        let sides = members.map { max(set.rects[$0].width, set.rects[$0].height) }.sorted()
        let cell = max(1, sides.isEmpty ? 1 : sides[sides.count / 2])
        var cells: [Int64: [Int]] = [:]
        for k in members {
            let r = set.rects[k]
            let cx0 = r.minX / cell, cx1 = r.maxX / cell, cy0 = r.minY / cell, cy1 = r.maxY / cell
            if (cx1 - cx0 + 1) * (cy1 - cy0 + 1) > 4096 { cells[-1, default: []].append(k); continue } // a huge one: checked always
            for cy in cy0...cy1 { for cx in cx0...cx1 { cells[Int64(cy) << 32 | Int64(cx), default: []].append(k) } }
        }
        grids[z] = (cell, cells)
        return (cell, cells)
    }

    /// Earlier rectangles of the same zoom that overlap rectangle `k`, ascending.
    func earlier(_ k: Int) -> [Int] {
        if let e = earlierCache[k] { return e }
        let r = set.rects[k]
        let g = grid(r.z)
        var candidates = Set<Int>()
        let cx0 = r.minX / g.cell, cx1 = r.maxX / g.cell, cy0 = r.minY / g.cell, cy1 = r.maxY / g.cell
        if (cx1 - cx0 + 1) * (cy1 - cy0 + 1) > 4096 {
            candidates = Set(byZoom![r.z] ?? [])
        } else {
            for cy in cy0...cy1 { for cx in cx0...cx1 { for j in g.cells[Int64(cy) << 32 | Int64(cx)] ?? [] where j < k { candidates.insert(j) } } }
            for j in g.cells[-1] ?? [] where j < k { candidates.insert(j) }
        }
        var out: [Int] = []
        for j in candidates.sorted() where j < k {
            let q = set.rects[j]
            if q.minX <= r.maxX && q.maxX >= r.minX && q.minY <= r.maxY && q.maxY >= r.minY { out.append(j) }
        }
        // Bounded: a route wound over the same ground makes these lists quadratic in its length.
        earlierCached += out.count
        if earlierCached > 1 << 22 { earlierCache.removeAll(); earlierCached = out.count }
        earlierCache[k] = out
        return out
    }

    /// The planned columns of row `y` in rectangle `k`: its area's, less those an earlier
    /// rectangle of the same zoom plans (each tile once, in the first rectangle reaching it).
    public func planned(rect k: Int, y: Int) -> [ClosedRange<Int>] {
        if let l = last, l.rect == k, l.y == y { return l.columns }
        var cols = own(rect: k, y: y)
        if !cols.isEmpty { cols = TileColumns.subtract(cols, taken(before: k, y: y)) }
        last = (k, y, cols)
        return cols
    }

    /// A walk over one zoom's rectangles in plan order: the first `done` of them (positions in
    /// `byZoom[z]`) have their own columns, every row, merged into `seen` (by row).
    private final class Sweep {
        var done = 0
        var seen: [Int: [ClosedRange<Int>]] = [:]
    }
    /// The sweep of each zoom asked about (questions in plan order, as counting, downloading and
    /// exporting ask them, cost one subtraction each; a corridor's plan order goes along the
    /// route, every zoom at a time).
    private var sweeps: [Int: Sweep] = [:]
    /// The rows all sweeps keep.
    private var sweptRows = 0
    /// Each rectangle's position in its zoom's `byZoom` list (made on first use).
    private var zoomPosition: [Int]?
    /// Zooms whose sweep was dropped when the sweeps grew past `sweepRowLimit` rows: asked
    /// through `earlier` from then on.
    private var unswept: Set<Int> = []
    /// The most rows the sweeps keep (each a short array of column ranges; about 25 MB).
    static let sweepRowLimit = 1 << 18

    /// The columns of row `y` that the rectangles of `k`'s zoom before it own, merged. In plan
    /// order from a sweep: each rectangle's rows are worked out once, however many later
    /// rectangles overlap it (a route wound back and forth over the same ground made that
    /// quadratic: 46 s and 1.9 GB for one of 4,000,000 stations). A question behind the sweep
    /// (out of plan order: a store's manifest lines) asks the overlapping rectangles (`earlier`)
    /// and keeps the sweep; so does one in a zoom whose sweep was dropped.
    func taken(before k: Int, y: Int) -> [ClosedRange<Int>] {
        let z = set.rects[k].z
        if byZoom == nil { byZoom = Dictionary(grouping: set.rects.indices, by: { set.rects[$0].z }) }
        if zoomPosition == nil {
            var at = [Int](repeating: 0, count: set.rects.count)
            for (_, members) in byZoom! { for (p, j) in members.enumerated() { at[j] = p } }
            zoomPosition = at
        }
        let position = zoomPosition![k]
        // Behind the sweep (questions out of plan order: a store's manifest lines, say), the
        // overlapping rectangles are asked and the sweep is kept for the questions ahead of it.
        if !unswept.contains(z), sweeps[z].map({ $0.done <= position }) ?? true {
            let s = sweeps[z] ?? Sweep()
            sweeps[z] = s
            let members = byZoom![z]!
            while s.done < position && sweptRows <= TileSetCover.sweepRowLimit {
                let r = set.rects[members[s.done]]
                for row in r.minY...r.maxY {
                    let cols = own(rect: members[s.done], y: row)
                    if cols.isEmpty { continue }
                    if let had = s.seen[row] { s.seen[row] = TileColumns.merge(had + cols) } else { s.seen[row] = cols; sweptRows += 1 }
                }
                s.done += 1
            }
            if sweptRows <= TileSetCover.sweepRowLimit { return s.seen[y] ?? [] }
            unswept.insert(z)
            sweptRows -= s.seen.count
            sweeps[z] = nil
        }
        var taken: [ClosedRange<Int>] = []
        for j in earlier(k) { taken += own(rect: j, y: y) }
        return TileColumns.merge(taken)
    }

    private var shapeRings: (z: Int, rings: ProjectedRings)?

    /// The planned columns of row `y` in rectangle `k` for a set of any kind: a corridor's or
    /// parts' (`planned`), a geometry's (the shape's columns within the rectangle), or a box's
    /// (the whole row of the rectangle). Empty outside the rectangle's rows.
    public func plannedColumns(rect k: Int, y: Int) -> [ClosedRange<Int>] {
        let r = set.rects[k]
        guard y >= r.minY, y <= r.maxY else { return [] }
        if set.areas != nil { return planned(rect: k, y: y) }
        guard let shape = set.shape else { return [r.minX...r.maxX] }
        if shapeRings?.z != r.z { shapeRings = (r.z, shape.indexed(z: r.z)) }
        return TileColumns.clip(shape.columns(z: r.z, y: y, rings: shapeRings!.rings), r.minX, r.maxX)
    }

    /// True when tile `t` of rectangle `k` is planned there.
    public func isPlanned(rect k: Int, _ t: TileID) -> Bool {
        planned(rect: k, y: t.y).contains { $0.contains(t.x) }
    }

    /// The rectangle that plans `t` (the first whose area meets it), or nil.
    public func owner(of t: TileID) -> Int? {
        if byZoom == nil { byZoom = Dictionary(grouping: set.rects.indices, by: { set.rects[$0].z }) }
        // The rectangles containing `t` are all listed in its grid cell, or among the huge ones.
        let g = grid(t.z)
        let candidates = ((g.cells[Int64(t.y / g.cell) << 32 | Int64(t.x / g.cell)] ?? []) + (g.cells[-1] ?? [])).sorted()
        for k in candidates {
            let r = set.rects[k]
            guard t.x >= r.minX && t.x <= r.maxX && t.y >= r.minY && t.y <= r.maxY else { continue }
            if own(rect: k, y: t.y).contains(where: { $0.contains(t.x) }) { return k }
        }
        return nil
    }

    /// The number of tiles rectangle `k` plans.
    public func count(rect k: Int) -> Int {
        let r = set.rects[k]
        var n = 0
        for y in r.minY...r.maxY { n += TileColumns.count(planned(rect: k, y: y)) }
        return n
    }
}

/// A plan's index arithmetic with caches, for the daemon and exports that ask about many indices:
/// where an index lies (binary search over rectangle offsets) and whether a corridor's or parts'
/// tile there is planned (`TileSetCover`). Not thread-safe; one per user.
public final class PlanCover {
    /// The plan asked about.
    public let plan: ResourcePlan
    /// Per rectangle, in plan order: its first plan index, its set and its position in the set.
    private var starts: [(base: Int, set: Int, rect: Int)] = []
    private var covers: [Int: TileSetCover] = [:]

    /// Per set, the position in `starts` of its first rectangle.
    private var setStarts: [Int] = []

    public init(_ plan: ResourcePlan) {
        self.plan = plan
        var base = plan.resources.count
        for (s, set) in plan.tileSets.enumerated() {
            setStarts.append(starts.count)
            for (k, r) in set.rects.enumerated() { starts.append((base, s, k)); base = SaturatingCount.add(base, r.count) }
        }
    }

    /// The first plan index of rectangle `k` of tile set `s` (saturating at `Int.max`).
    public func base(set s: Int, rect k: Int) -> Int { starts[setStarts[s] + k].base }

    func cover(_ s: Int) -> TileSetCover {
        if let c = covers[s] { return c }
        let c = TileSetCover(plan.tileSets[s])
        covers[s] = c
        return c
    }

    /// The set, rectangle and tile at tile index `i` (`resources.count ..< indexSpace`).
    public func locate(_ i: Int) -> (set: Int, rect: Int, tile: TileID)? {
        var lo = 0, hi = starts.count
        while hi - lo > 1 { let mid = (lo + hi) / 2; if starts[mid].base <= i { lo = mid } else { hi = mid } }
        guard lo < starts.count, starts[lo].base <= i else { return nil }
        let e = starts[lo]
        let r = plan.tileSets[e.set].rects[e.rect]
        guard i - e.base < r.count else { return nil }
        return (e.set, e.rect, r.tile(at: i - e.base))
    }

    /// False for a tile index of a corridor or parts set that its rectangle does not plan; true for
    /// every other index (a `shape` set's are the daemon's to check, as before).
    public func isPlannedInAreas(_ i: Int) -> Bool {
        guard i >= plan.resources.count, let (s, k, t) = locate(i), plan.tileSets[s].areas != nil else { return true }
        return cover(s).isPlanned(rect: k, t)
    }

    /// `ResourcePlan.index(kind:key:)` with this cover's caches.
    public func index(kind: ResourceKind, key: String) -> Int? { plan.index(kind: kind, key: key, cover: self) }
}

/// Everything a region downloads, as a value: the non-tile resources in phase order, then the
/// tile sets. Each resource has an index in `0..<count` (resources first, then each tile set's
/// rectangles in row-major order), so progress can be tracked in a bitmap of `count` bits and no
/// list of tiles is ever held in memory. Written to `store/regions/<id>/plan.json` once exact.
public struct ResourcePlan: Sendable, Equatable, Codable {
    public var resources: [PlannedResource]
    public var tileSets: [TileSet]

    public init(resources: [PlannedResource], tileSets: [TileSet]) {
        self.resources = resources; self.tileSets = tileSets
    }

    private enum CodingKeys: String, CodingKey { case resources, tileSets }

    /// Decodes a plan (`plan.json`) and checks it (`damage`): a plan whose rectangles or counts
    /// could not have been planned is unreadable (a `DecodingError`), exactly as one that is not
    /// JSON, so that no value in the file can trap or exhaust memory.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        resources = try c.decode([PlannedResource].self, forKey: .resources)
        tileSets = try c.decode([TileSet].self, forKey: .tileSets)
        if let why = damage {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "plan.json is damaged: \(why)"))
        }
    }

    /// Why the plan could not have been planned, nil when it could: every rectangle within its
    /// zoom's tiles (`TileRect.isValid`), one count per rectangle, each `0 ... rect.count`; each
    /// tile set's source named once; a `pmtiles://` set with its archive, and every archive tile
    /// planned by one of the set's rectangles, whose counts are exactly the tiles each plans
    /// (attack rounds 22 and 23: a plan whose rectangles and archive tiles disagree left a region
    /// downloading for ever, or completed with manifest lines no export accepted); every shape
    /// and corridor position a finite longitude and latitude (±360, ±90), each line of at least
    /// 2 positions, a corridor buffer of 0 < N <= 100 km over at most `Corridor.maxStations`
    /// stations, and a corridor rectangle's stretch within its line.
    public var damage: String? {
        var sources = Set<String>()
        for set in tileSets {
            guard sources.insert(set.source).inserted else { return "tile set '\(set.source)' is listed twice" }
            if set.archive == nil && PMTiles.innerURL(set.template.template) != nil {
                return "tile set '\(set.source)' names a PMTiles archive but holds none of its tiles"
            }
            if set.rectCounts.count != set.rects.count {
                return "tile set '\(set.source)' has \(set.rects.count) rectangles but \(set.rectCounts.count) counts"
            }
            for (r, n) in zip(set.rects, set.rectCounts) {
                guard r.isValid else {
                    return "tile set '\(set.source)': rectangle z\(r.z) x \(r.minX)...\(r.maxX), y \(r.minY)...\(r.maxY) is outside its zoom's tiles (zooms \(TileRect.zoomRange))"
                }
                guard n >= 0, n <= r.count else { return "tile set '\(set.source)': count \(n) for a rectangle of \(r.count) tiles" }
            }
            // Positions and buffers as a request's are checked (a review of 2026-12-07: a shape
            // longitude of 1e300 or a corridor buffer of 1e-300 in a plan trapped the daemon at
            // start, converting to Int, before any request could be refused).
            func usable(_ line: [[Double]], maxLatitude: Double = 90) -> Bool {
                line.count >= 2 && line.allSatisfy { $0.count >= 2 && RegionShape.isPosition(lon: $0[0], lat: $0[1], maxLatitude: maxLatitude) }
            }
            var shapes = set.shape.map { [$0] } ?? []
            for a in set.areas ?? [] {
                switch a {
                case .all: break
                case .shape(let s): shapes.append(s)
                case .corridor(let c):
                    guard !c.lines.isEmpty, c.lines.allSatisfy({ usable($0, maxLatitude: WebMercator.maxLatitude) }), c.bufferMeters > 0, c.bufferMeters <= Corridor.maxBufferMeters,
                          c.stationCount <= Corridor.maxStations else {
                        return "tile set '\(set.source)': a corridor's line or buffer is out of range"
                    }
                }
            }
            for shape in shapes where !shape.polygons.allSatisfy({ $0.allSatisfy { usable($0) } }) {
                return "tile set '\(set.source)': a shape's position is not a longitude and latitude in range"
            }
            if let archive = set.archive {
                // `ArchiveSource.init(from:)` checked the tiles; each rectangle counts those it plans.
                var counts = [Int](repeating: 0, count: set.rects.count)
                let owners = ArchiveTileIndex(set)
                for t in archive.tiles { if let k = owners.rect(of: t.tile) { counts[k] += 1 } }
                guard counts == set.rectCounts, counts.reduce(0, +) == archive.tiles.count else {
                    return "tile set '\(set.source)': its rectangles count \(set.rectCounts.reduce(0, +)) tiles and plan \(counts.reduce(0, +)) of the archive's \(archive.tiles.count)"
                }
            }
            if set.areas != nil || set.rectAreas != nil {
                guard let areas = set.areas, let ra = set.rectAreas, ra.count == set.rects.count else {
                    return "tile set '\(set.source)' has areas for \(set.rectAreas?.count ?? 0) of \(set.rects.count) rectangles"
                }
                var stationCounts: [[Int]: Int] = [:]
                for a in ra {
                    guard areas.indices.contains(a.area) else { return "tile set '\(set.source)': area \(a.area) of \(areas.count)" }
                    if case .corridor(let c) = areas[a.area] {
                        guard let p = a.piece, c.lines.indices.contains(p.line), c.lines[p.line].count >= 2,
                              c.bufferMeters > 0, c.bufferMeters <= Corridor.maxBufferMeters,
                              p.from >= 0, p.from <= p.to else {
                            return "tile set '\(set.source)': a corridor rectangle's stretch of line is out of range"
                        }
                        if stationCounts[[a.area, p.line]] == nil { stationCounts[[a.area, p.line]] = c.stations(p.line).count }
                        guard p.to < stationCounts[[a.area, p.line]]! else {
                            return "tile set '\(set.source)': a corridor rectangle's stretch of line is out of range"
                        }
                    }
                }
            }
        }
        return nil
    }

    /// Number of tiles planned. Saturates at `Int.max` (`SaturatingCount`): a plan can name more
    /// tiles than an `Int` holds, and any tile limit refuses that count. Check it against the
    /// limits (`RequestValidator.tileLimitError`) before using `count` or `indexSpace` to size
    /// anything.
    public var tileCount: Int { tileSets.reduce(0) { SaturatingCount.add($0, $1.count) } }
    /// The exact bytes of the tiles when every tile set is a PMTiles archive (`TileSet.tileBytes`),
    /// nil when any tile set's bytes are unknown before download (or there are none).
    public var tileBytes: Int? {
        guard !tileSets.isEmpty else { return nil }
        var total = 0
        for s in tileSets { guard let b = s.tileBytes else { return nil }; total += b }
        return total
    }
    /// Number of resources planned, tiles included (saturating at `Int.max`).
    public var count: Int { SaturatingCount.add(resources.count, tileCount) }
    /// Number of plan indices: `count`, plus the tiles of rectangles a GeoJSON shape leaves out
    /// (saturating at `Int.max`).
    public var indexSpace: Int { tileSets.reduce(resources.count) { SaturatingCount.add($0, $1.indexCount) } }

    /// What lives at a plan index.
    public enum Item: Sendable, Equatable {
        case resource(PlannedResource)
        /// A tile: the tile set's position in `tileSets` and the tile.
        case tile(set: Int, TileID)
    }

    /// The resource at `index` (`0..<indexSpace`; with a shape, some tiles there are not planned:
    /// see `TileSet.shape`).
    public func item(at index: Int) -> Item {
        if index < resources.count { return .resource(resources[index]) }
        var i = index - resources.count
        for (s, set) in tileSets.enumerated() {
            for rect in set.rects {
                if i < rect.count { return .tile(set: s, rect.tile(at: i)) }
                i -= rect.count
            }
        }
        preconditionFailure("plan index \(index) out of range 0..<\(count)")
    }

    /// The plan index of a manifest entry (kind and key), or nil when the plan has no such resource.
    /// A corridor's or parts' tile is at its index in the rectangle that plans it (`TileSetCover`);
    /// pass `cover` when asking about many entries (its caches make it cheap).
    public func index(kind: ResourceKind, key: String, cover: PlanCover? = nil) -> Int? {
        if kind != .tile {
            return resources.firstIndex { $0.kind == kind && $0.key == key }
        }
        guard let (source, tile) = ManifestLine.parseTileKey(key) else { return nil }
        return index(source: source, tile: tile, cover: cover)
    }

    /// The index of `tile` of tile set `source` (`index(kind:key:cover:)` of its key, for a
    /// caller that has parsed the key already); nil when the plan does not name it.
    public func index(source: String, tile: TileID, cover: PlanCover? = nil) -> Int? {
        var base = resources.count
        for (s, set) in tileSets.enumerated() {
            if set.source == source {
                if set.areas != nil {
                    let pc = cover ?? PlanCover(self)
                    guard let k = pc.cover(s).owner(of: tile) else { return nil }
                    return SaturatingCount.add(pc.base(set: s, rect: k), set.rects[k].index(of: tile)!)
                }
                for rect in set.rects {
                    if let i = rect.index(of: tile) { return base + i }
                    base += rect.count
                }
                return nil
            }
            base += set.indexCount
        }
        return nil
    }

    /// Tile counts per source and zoom, for `tilespool plan` (each saturating at `Int.max`).
    public func tileCountsByZoom() -> [(source: String, z: Int, tiles: Int)] {
        var out: [(String, Int, Int)] = []
        for set in tileSets {
            var byZoom: [Int: Int] = [:]
            for (r, n) in zip(set.rects, set.rectCounts) { byZoom[r.z] = SaturatingCount.add(byZoom[r.z] ?? 0, n) }
            for z in byZoom.keys.sorted() { out.append((set.source, z, byZoom[z]!)) }
        }
        return out
    }
}

/// A tile URL template (MapLibre/TileJSON conventions): `{z}`, `{x}`, `{y}`, `{-y}` (TMS row),
/// `{quadkey}`, `{prefix}`, `{ratio}`, `{bbox-epsg-3857}` and `{s}` (a subdomain, as Leaflet's
/// `L.TileLayer`: `subdomains[|x + y| % count]`, so a tile always comes from the same one). Reference: TileJSON 3.0.0 `tiles`,
/// maplibre-native `src/mbgl/storage/resource.cpp` (`Resource::tile`).
public struct TileURLTemplate: Sendable, Equatable, Codable {
    public var template: String { didSet { parts = TileURLTemplate.parse(template) } }
    /// True when the source's TileJSON says `"scheme": "tms"`: `{y}` is then the TMS row.
    public var tms: Bool
    /// What `{ratio}` becomes: `""` or `"@2x"`.
    public var ratio: String
    /// What `{s}` becomes (the request's `subdomains`, default `["a", "b", "c"]`).
    public var subdomains: [String]
    /// The default `subdomains`, Leaflet's.
    public static let defaultSubdomains = ["a", "b", "c"]
    /// The template split once into literal text and tokens, so a URL is built by appending.
    private var parts: [Part]

    enum Part: Sendable, Equatable { case text(String), z, x, y, tmsY, quadkey, prefix, ratio, bbox, subdomain }
    enum CodingKeys: String, CodingKey { case template, tms, ratio, subdomains }

    public init(_ template: String, tms: Bool = false, ratio: String = "", subdomains: [String] = TileURLTemplate.defaultSubdomains) {
        self.template = template; self.tms = tms; self.ratio = ratio
        self.subdomains = subdomains.isEmpty ? TileURLTemplate.defaultSubdomains : subdomains
        parts = TileURLTemplate.parse(template)
    }

    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(try c.decode(String.self, forKey: .template), tms: try c.decode(Bool.self, forKey: .tms),
                  ratio: try c.decode(String.self, forKey: .ratio),
                  subdomains: try c.decodeIfPresent([String].self, forKey: .subdomains) ?? TileURLTemplate.defaultSubdomains)
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(template, forKey: .template); try c.encode(tms, forKey: .tms); try c.encode(ratio, forKey: .ratio)
        if parts.contains(.subdomain) { try c.encode(subdomains, forKey: .subdomains) }
    }

    static let tokens: [(String, Part)] = [("{z}", .z), ("{x}", .x), ("{y}", .y), ("{-y}", .tmsY), ("{quadkey}", .quadkey),
                                           ("{prefix}", .prefix), ("{ratio}", .ratio), ("{bbox-epsg-3857}", .bbox), ("{s}", .subdomain)]

    static func parse(_ template: String) -> [Part] {
        var parts: [Part] = []
        var literal = Substring()
        var rest = Substring(template)
        outer: while let c = rest.first {
            if c == "{" {
                for (token, part) in tokens where rest.hasPrefix(token) {
                    if !literal.isEmpty { parts.append(.text(String(literal))); literal = "" }
                    parts.append(part)
                    rest = rest.dropFirst(token.count)
                    continue outer
                }
            }
            literal = literal.isEmpty ? rest.prefix(1) : template[literal.startIndex..<rest.index(after: rest.startIndex)]
            rest = rest.dropFirst()
        }
        if !literal.isEmpty { parts.append(.text(String(literal))) }
        return parts
    }

    /// Why `template` cannot be used (a message), or nil when it is fine.
    public static func problem(_ template: String) -> String? {
        let hasXY = template.contains("{x}") && (template.contains("{y}") || template.contains("{-y}"))
        guard (template.contains("{z}") && hasXY) || template.contains("{quadkey}") || template.contains("{bbox-epsg-3857}") else {
            return "must contain {z}, {x} and {y} (or {-y}, {quadkey}, {bbox-epsg-3857})"
        }
        let sample = TileURLTemplate(template).url(for: TileID(z: 1, x: 0, y: 1))
        return RequestValidator.urlProblem(sample)
    }

    /// The URL of tile `t`.
    public func url(for t: TileID) -> String {
        var s = ""
        s.reserveCapacity(template.utf8.count + 16)
        for p in parts {
            switch p {
            case .text(let x): s += x
            case .z: s += String(t.z)
            case .x: s += String(t.x)
            case .y: s += String(tms ? t.tmsY : t.y)
            case .tmsY: s += String(t.tmsY)
            case .quadkey: s += t.quadkey
            case .prefix: s += String(t.x % 16, radix: 16) + String(t.y % 16, radix: 16)
            case .ratio: s += ratio
            case .bbox: let b = WebMercator.bbox3857(t); s += "\(b.0),\(b.1),\(b.2),\(b.3)"
            case .subdomain: s += subdomains[abs(t.x + t.y) % subdomains.count]
            }
        }
        return s
    }
}

/// The glyph ranges MapLibre requests for a fontstack: 256 ranges of 256 code points each.
public enum GlyphRanges {
    /// Start code points of every range, `0, 256, ..., 65280`; without ideographs, the 126 ranges
    /// starting in CJK Unified Ideographs (U+4E00-U+9FFF) or Hangul Syllables (U+AC00-U+D7AF) are
    /// left out, leaving 130. Reference: maplibre-native `src/mbgl/util/i18n.cpp`
    /// (`allowsFixedWidthGlyphGeneration`) and `offline_download.cpp`.
    public static func starts(includeIdeographs: Bool) -> [Int] {
        stride(from: 0, to: 65536, by: 256).filter { start in
            includeIdeographs || !((0x4E00...0x9FFF).contains(start) || (0xAC00...0xD7AF).contains(start))
        }
    }

    /// The `{range}` token for a range starting at `start`: `"0-255"`.
    public static func name(_ start: Int) -> String { "\(start)-\(start + 255)" }
}

/// A fixed-size bit set over plan indices (`ResourcePlan.index`, `0..<indexSpace`): which
/// resources a manifest holds. Used by the daemon's recount, the exports' tile walk and the
/// refresh swap's check of a manifest.
public struct Bitmap: Sendable {
    private var words: [UInt64]
    /// `count` bits, all clear.
    public init(count: Int) { words = [UInt64](repeating: 0, count: (count + 63) / 64) }
    public subscript(i: Int) -> Bool {
        get { words[i >> 6] & (1 << UInt64(i & 63)) != 0 }
        set { if newValue { words[i >> 6] |= 1 << UInt64(i & 63) } else { words[i >> 6] &= ~(1 << UInt64(i & 63)) } }
    }
    /// Sets bit `i`; true when it was clear.
    @discardableResult
    public mutating func insert(_ i: Int) -> Bool {
        guard !self[i] else { return false }
        self[i] = true
        return true
    }
}
