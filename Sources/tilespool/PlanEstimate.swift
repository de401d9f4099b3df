import Foundation
import TileSpoolCore
import TileSpoolDaemon
import TileSpoolIO

/// What `tilespool plan --estimate` found: the interval for the planned tiles' bytes, overall and
/// per source, and how the sample went (docs/contract.md, "plan --estimate").
struct PlanEstimate {
    /// Bytes of every planned tile, as the store would hold them (bodies after HTTP content
    /// decoding; an empty tile 0): the `SizeEstimate.confidence` interval `low ... high`.
    var low = 0, high = 0
    /// Per source: `(low, high)` as above.
    var bySource: [String: (low: Int, high: Int)] = [:]
    /// Sample requests sent, and how many failed (left out of the sample: neither a body nor an
    /// empty answer).
    var requests = 0, failed = 0
    /// Tiles sampled per zoom at most (`SizeEstimate.allocate`) and the cap on requests.
    var perZoom = 0, maxRequests = 0
    /// The strata (`<source> z<zoom>`) with planned tiles but no sample answered: the bytes there
    /// are unknown, so no interval is given (`plan` exits 1 and says which).
    var unsampled: [String] = []
    /// Sources with an unsampled zoom: no per-source interval for them.
    var unsampledSources: Set<String> = []

    /// The interval of `source`'s tiles, or nil when it has none (an unsampled zoom).
    func interval(of source: String) -> (low: Int, high: Int)? {
        unsampledSources.contains(source) ? nil : bySource[source]
    }

    /// `{"low", "high"}`.
    static func json(_ r: (low: Int, high: Int)) -> [String: Int] { ["low": r.low, "high": r.high] }

    /// The `estimate` object of `plan --estimate --json`: the sample's facts.
    var jsonObject: [String: Any] {
        ["confidence": SizeEstimate.confidence, "sampleRequests": requests, "failedSamples": failed, "unsampled": unsampled,
         "perZoom": perZoom, "maxRequests": maxRequests, "method": "stratified by source and zoom, systematic sample, t-interval (Cochran 5.6, 5.7, 5.16)"]
    }

    /// Fetches the sample of every tile set of `plan` and works out the interval.
    /// - Parameters:
    ///   - perZoom: tiles sampled per source and zoom at most (`--estimate-per-zoom`).
    ///   - maxRequests: the cap on sample requests (`--estimate-max-requests`).
    ///   - allowed: `--allow-host`, as for the plan's own requests.
    /// Requests go through `HTTPClient.fetchPolitely` with the daemon's defaults: its rate limits
    /// (`RateLimiter()`: 10 requests per second per remote host, the request's
    /// `maxRequestsPerSecond`), its `--max-requests-per-region` in flight, the request's headers.
    static func run(plan: ResourcePlan, request: RegionRequest, perZoom: Int, maxRequests: Int, allowed: Set<String>) -> PlanEstimate {
        var e = PlanEstimate()
        e.perZoom = perZoom; e.maxRequests = maxRequests
        let archives = Set(plan.tileSets.filter { $0.archive != nil }.map(\.source))
        let zooms = plan.tileCountsByZoom().filter { $0.tiles > 0 && !archives.contains($0.source) }
        let counts = SizeEstimate.allocate(counts: zooms.map(\.tiles), perZoom: perZoom, maxRequests: maxRequests)
        var want: [String: [Int: Int]] = [:]
        for (z, k) in zip(zooms, counts) { want[z.source, default: [:]][z.z] = k }
        // The sample: (source, zoom, url) in plan order.
        var picks: [(source: String, z: Int, url: String)] = []
        for set in plan.tileSets {
            // A PMTiles archive's tile bytes are known exactly from its directories: no sample.
            guard set.archive == nil, let w = want[set.source] else { continue }
            let sample = SizeEstimate.sample(set, counts: w)
            for z in sample.keys.sorted() { for t in sample[z]! { picks.append((set.source, z, set.template.url(for: t))) } }
        }
        var options = HTTPOptions()
        options.allowedHosts = allowed
        let http = HTTPClient(options: options)
        var limiter = RateLimiter()
        let results = http.fetchPolitely(picks.map(\.url), headers: request.headerList, limiter: &limiter, region: request.id,
                                         regionLimit: request.maxRequestsPerSecond, concurrency: DaemonOptions(spool: "", store: "").maxRequestsPerRegion)
        e.requests = results.count
        var sizes: [String: [Int: [Int]]] = [:]
        for (p, r) in zip(picks, results) {
            let size: Int
            if r.failure == nil && (200...299).contains(r.status) {
                size = r.body.count
            } else if r.failure == nil && request.emptyStatuses.contains(r.status) {
                size = 0
            } else {
                e.failed += 1
                continue
            }
            sizes[p.source, default: [:]][p.z, default: []].append(size)
        }
        var all: [SizeEstimate.Stratum] = []
        var exact = 0
        for set in plan.tileSets {
            if set.archive != nil {
                let b = set.tileBytes ?? 0
                e.bySource[set.source] = (b, b)
                exact += b
                continue
            }
            var strata: [SizeEstimate.Stratum] = []
            for z in zooms where z.source == set.source {
                let got = sizes[set.source]?[z.z] ?? []
                if got.isEmpty { e.unsampled.append("\(set.source) z\(z.z)"); e.unsampledSources.insert(set.source) }
                strata.append(SizeEstimate.Stratum(population: z.tiles, sizes: got))
            }
            let r = SizeEstimate.interval(strata)
            e.bySource[set.source] = (r.low, r.high)
            all += strata
        }
        let r = all.isEmpty ? (low: 0, high: 0, estimate: 0.0) : SizeEstimate.interval(all)
        e.low = r.low + exact; e.high = r.high + exact
        return e
    }

    /// How much of `plan` the store at `loc` holds (`PlanHoldings`, from every region's
    /// manifest), or nil when there is no store there.
    static func alreadyStored(_ plan: ResourcePlan, _ loc: Locations) throws -> PlanHoldings? {
        guard loc.isS3 || StoreSpec.looksLikeStore(loc.store) else { return nil }
        let store = try loc.openStore()
        let holdings = PlanHoldings(plan: plan)
        for id in (try? store.regionIDs()) ?? [] {
            store.region(id).readManifest { holdings.record($0) }
        }
        return holdings
    }
}
