import Foundation

/// The arithmetic of `tilespool plan --estimate` (docs/contract.md, "plan --estimate"), pure: which
/// tiles to fetch as a sample, and the interval the sample gives for the bytes of every planned tile.
///
/// The design is stratified sampling with one stratum per source and zoom (tile sizes differ most
/// between zooms), a systematic sample inside each stratum, and the stratified estimator of a
/// total with its t-interval (W. G. Cochran, *Sampling Techniques*, 3rd ed., 1977: the estimate
/// of a total, eq. 5.7; its variance with the finite population correction, eq. 5.6; the
/// Satterthwaite degrees of freedom, eq. 5.16). A stratum fetched whole is exact (no variance).
public enum SizeEstimate {
    /// Tiles fetched per source and zoom by default; a zoom with fewer planned tiles is fetched whole.
    public static let defaultPerZoom = 32
    /// The most sample requests by default, all sources and zooms together.
    public static let defaultMaxRequests = 256
    /// The confidence level of the interval: 95 %, two-sided.
    public static let confidence = 0.95

    /// How many tiles to fetch from each stratum of `counts` planned tiles: `min(count, k)` with
    /// the largest `k <= perZoom` whose total stays within `maxRequests`, but at least 2 per
    /// stratum of 2 or more tiles (a variance needs two), so the total may pass `maxRequests`
    /// only when it is below twice the number of strata.
    public static func allocate(counts: [Int], perZoom: Int, maxRequests: Int) -> [Int] {
        var k = max(2, perZoom)
        func total(_ k: Int) -> Int { counts.reduce(0) { $0 + min($1, k) } }
        while k > 2 && total(k) > maxRequests { k -= 1 }
        return counts.map { min($0, k) }
    }

    /// A systematic sample of `k` of the positions `0 ..< n`: the middle of each of `k` equal
    /// strata, `floor((2i + 1) · n / 2k)` for `i` in `0 ..< k`, ascending and distinct (every
    /// position when `k >= n`). Spread evenly over the plan's order of tiles (row by row), so the
    /// sample covers the whole area rather than one corner.
    public static func positions(population n: Int, sample k: Int) -> [Int] {
        guard n > 0, k > 0 else { return [] }
        if k >= n { return Array(0..<n) }
        return (0..<k).map { i in Int((Double(2 * i + 1) * Double(n) / Double(2 * k)).rounded(.down)) }
    }

    /// One stratum: `population` planned tiles, of which the sample's bytes are `sizes`.
    public struct Stratum: Sendable, Equatable {
        /// Planned tiles in the stratum (N_h).
        public var population: Int
        /// Bytes of each sampled tile (n_h values; 0 for an empty tile).
        public var sizes: [Int]
        /// A stratum of `population` tiles whose sample weighs `sizes` bytes.
        public init(population: Int, sizes: [Int]) { self.population = population; self.sizes = sizes }
    }

    /// The estimate of the total bytes of the strata's tiles: `low ... high` in bytes, the
    /// two-sided `confidence` t-interval of the stratified estimator `T = Σ N_h · mean_h` with
    /// `Var(T) = Σ N_h² (1 − n_h/N_h) s_h² / n_h` and Satterthwaite's degrees of freedom
    /// (Cochran eq. 5.6, 5.7, 5.16). `low` is at least the bytes of the sample itself (they are
    /// known) and never negative; a stratum fetched whole, or of one tile, adds its exact bytes.
    /// - Returns: the interval and the point estimate `T`, in bytes.
    public static func interval(_ strata: [Stratum]) -> (low: Int, high: Int, estimate: Double) {
        var total = 0.0, variance = 0.0, known = 0.0
        var dfNumerator = 0.0, dfDenominator = 0.0
        for s in strata where s.population > 0 && !s.sizes.isEmpty {
            let n = Double(s.sizes.count), N = Double(s.population)
            let mean = Double(s.sizes.reduce(0, +)) / n
            total += N * mean
            known += Double(s.sizes.reduce(0, +))
            guard s.sizes.count < s.population, s.sizes.count >= 2 else { continue }
            let s2 = s.sizes.reduce(0.0) { $0 + (Double($1) - mean) * (Double($1) - mean) } / (n - 1)
            let g = N * (N - n) / n
            variance += g * s2
            dfNumerator += g * s2
            dfDenominator += (g * s2) * (g * s2) / (n - 1)
        }
        guard variance > 0 else { let t = Int(total.rounded()); return (t, t, total) }
        let df = dfDenominator > 0 ? (dfNumerator * dfNumerator) / dfDenominator : 1
        let half = tQuantile975(df: df) * variance.squareRoot()
        let low = max(known, total - half, 0), high = total + half
        return (Int(low.rounded(.down)), Int(high.rounded(.up)), total)
    }

    /// The 0.975 quantile of Student's t distribution with `df` degrees of freedom (two-sided
    /// 95 %), from the standard table (df 1–30, 40, 60, 120, ∞), taking the table's next lower df
    /// for a fractional or missing one (a wider interval, never a narrower one).
    public static func tQuantile975(df: Double) -> Double {
        let table: [(Double, Double)] = [
            (1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (5, 2.571), (6, 2.447), (7, 2.365), (8, 2.306),
            (9, 2.262), (10, 2.228), (11, 2.201), (12, 2.179), (13, 2.160), (14, 2.145), (15, 2.131),
            (16, 2.120), (17, 2.110), (18, 2.101), (19, 2.093), (20, 2.086), (21, 2.080), (22, 2.074),
            (23, 2.069), (24, 2.064), (25, 2.060), (26, 2.056), (27, 2.052), (28, 2.048), (29, 2.045),
            (30, 2.042), (40, 2.021), (60, 2.000), (120, 1.980),
        ]
        guard df.isFinite else { return 1.960 }
        var q = table[0].1
        for (d, v) in table where d <= df { q = v }
        return df > 1000 ? 1.960 : q
    }

    /// The sample of one tile set: for each zoom the set plans tiles at, `counts[z]` tiles at the
    /// positions `positions(population:sample:)` picks among the zoom's planned tiles taken in
    /// plan order (rectangle by rectangle, row by row, west to east; a geometry's or corridor's
    /// rectangles only where planned, `TileSetCover.plannedColumns`).
    /// - Parameter counts: tiles to sample per zoom (`allocate`); a zoom missing takes none.
    /// - Returns: per zoom, the sampled tiles in plan order.
    public static func sample(_ set: TileSet, counts: [Int: Int]) -> [Int: [TileID]] {
        let cover = TileSetCover(set)
        func columns(_ k: Int, _ y: Int) -> [ClosedRange<Int>] { cover.plannedColumns(rect: k, y: y) }
        var out: [Int: [TileID]] = [:]
        let byZoom = Dictionary(grouping: set.rects.indices, by: { set.rects[$0].z })
        for (z, rects) in byZoom {
            guard let k = counts[z], k > 0 else { continue }
            // The zoom's planned tiles, counted row by row.
            var population = 0
            for i in rects { let r = set.rects[i]; for y in r.minY...r.maxY { population += TileColumns.count(columns(i, y)) } }
            var wanted = positions(population: population, sample: k)[...]
            var seen = 0
            var picked: [TileID] = []
            scan: for i in rects {
                let r = set.rects[i]
                for y in r.minY...r.maxY {
                    for c in columns(i, y) {
                        while let p = wanted.first, p < seen + c.count {
                            picked.append(TileID(z: z, x: c.lowerBound + (p - seen), y: y))
                            wanted.removeFirst()
                        }
                        seen += c.count
                        if wanted.isEmpty { break scan }
                    }
                }
            }
            out[z] = picked
        }
        return out
    }
}

/// How much of a plan a store already holds (`tilespool plan --estimate`, `alreadyStored`): the
/// plan's resources (style, TileJSON, sprites, glyphs, data, tiles) that a region's manifest in
/// the store records under the same URL, each counted once, with the bytes its line records.
/// Fed manifest lines (`record`) by the caller; pure.
///
/// "The same URL" is the URL the plan would fetch (for a tile, its template filled in for that
/// z/x/y, `TileURLTemplate.url(for:)`) as a manifest records it, credentials redacted
/// (`Redaction.redact`: two URLs differing only in a key or password match); so a region of
/// another id or source name fetched from the same server counts; a line recorded as failed
/// does not.
public final class PlanHoldings {
    /// The plan matched against.
    public let plan: ResourcePlan
    private let cover: PlanCover
    private let resourceIndex: [String: [Int]]
    private var seen: [UInt64]
    /// Plan resources found so far.
    public private(set) var resources = 0
    /// Their bytes, as the manifest lines record them (the stored body's size; 0 for an empty tile).
    public private(set) var bytes = 0

    /// Starts with nothing found; memory: one bit per plan index (`ResourcePlan.indexSpace`).
    public init(plan: ResourcePlan) {
        self.plan = plan
        cover = PlanCover(plan)
        var idx: [String: [Int]] = [:]
        for (i, r) in plan.resources.enumerated() { idx["\(r.kind.rawValue)\t\(Redaction.redact(r.url))", default: []].append(i) }
        resourceIndex = idx
        seen = [UInt64](repeating: 0, count: max(0, plan.indexSpace) / 64 + 1)
    }

    /// Counts `line` when it records a resource of the plan not counted yet.
    public func record(_ line: ManifestLine) {
        guard !line.failed else { return }
        if line.kind != .tile {
            for i in resourceIndex["\(line.kind.rawValue)\t\(line.url)"] ?? [] { mark(i, line.bytes) }
            return
        }
        guard let (_, t) = ManifestLine.parseTileKey(line.key) else { return }
        for set in plan.tileSets where Redaction.redact(set.template.url(for: t)) == line.url {
            if let i = plan.index(kind: .tile, key: ManifestLine.tileKey(source: set.source, t), cover: cover), isPlanned(i) { mark(i, line.bytes) }
        }
    }

    /// True when tile index `i` is planned (a geometry's or corridor's rectangle plans only part).
    private func isPlanned(_ i: Int) -> Bool {
        guard let (s, k, t) = cover.locate(i) else { return false }
        return cover.cover(s).plannedColumns(rect: k, y: t.y).contains { $0.contains(t.x) }
    }

    private func mark(_ i: Int, _ b: Int) {
        guard i >= 0, i >> 6 < seen.count else { return }
        let bit: UInt64 = 1 << UInt64(i & 63)
        guard seen[i >> 6] & bit == 0 else { return }
        seen[i >> 6] |= bit
        resources += 1
        bytes += b
    }
}
