import Foundation
import TileSpoolCore
import TileSpoolIO
import TileSpoolDaemon

let planHelp = """
usage: tilespool plan REQUEST.json|- [--geometry FILE | --corridor FILE --buffer-meters N] [--json]
                      [--estimate [--estimate-per-zoom N] [--estimate-max-requests N]]
                      [--max-tiles N] [--allow-host HOST]... [--spool DIR] [--store DIR]

A dry run: validates the request, fetches the style and each source's TileJSON (not tiles,
sprites or glyphs) and, for a PMTiles archive source, its header, root directory and the leaf
directories that meet the region (range requests), and prints the exact number of resources the request would download, by
kind, by source and by zoom, and the tile total; with PMTiles sources the exact tile bytes too
(`tileBytes` at the top and per source in --json: the sum of the archive's tile lengths). Writes nothing. The plan is counted from tile
rectangles, so a plan of millions of tiles takes little time and memory.

It refuses what the daemon would refuse, with the same error code and exit status 1: an invalid
request; a host whose tile usage policy forbids bulk downloading (policyRefused: nothing is
fetched from it; --allow-host HOST as for `tilespool run`); a plan over the request's maxTiles or
--max-tiles (tileLimitExceeded, default 1000000; printed after the plan).

--estimate: also estimates the bytes of the planned tiles, as an interval, by fetching a sample
of them: up to --estimate-per-zoom tiles (default 32) of each source and zoom, spread evenly
over the zoom's tiles in plan order (a zoom with fewer is fetched whole, and is then exact), at
most --estimate-max-requests requests in all (default 256; the per-zoom number shrinks to fit,
down to 2). The interval is the 95% t-interval of the stratified estimate of the total
(docs/contract.md). Requests are as polite as the daemon's: its rate limits (10 per second per
remote host, the request's maxRequestsPerSecond), 8 in flight, the request's headers. It also
says how much of the plan the store (--store) already holds: resources a region's manifest
records under the same URL, and their bytes. With --json: "estimatedBytes": {"low", "high"},
"alreadyStored": {"resources", "bytes"}, "estimate" (the sample's facts) and per source
"estimatedBytes".

\(RegionFileOptions.help)
The request with the file embedded must stay within a request file's 1 MiB (about 25,000 track
points): simplify a longer track first.
"""

func commandPlan(_ argv: [String]) throws -> Int32 {
    let a = try Arguments(argv, flags: commonFlags.union(["--json", "--estimate"]),
                          valued: commonValued.union(["--max-tiles", "--allow-host", "--estimate-per-zoom", "--estimate-max-requests"]).union(RegionFileOptions.valued))
    if a.flags.contains("--help") { out(planHelp); return 0 }
    guard a.positionals.count == 1, let path = a.positionals.first else { throw UsageError("plan takes one request file") }
    let estimating = a.flags.contains("--estimate")
    if !estimating && (a.options["--estimate-per-zoom"] != nil || a.options["--estimate-max-requests"] != nil) {
        throw UsageError("--estimate-per-zoom and --estimate-max-requests go with --estimate")
    }
    let perZoom = try a.int("--estimate-per-zoom", default: SizeEstimate.defaultPerZoom, range: 2...10_000)
    let maxRequests = try a.int("--estimate-max-requests", default: SizeEstimate.defaultMaxRequests, range: 2...100_000)
    let (raw, fileName) = try readRequestArgument(path) // a file, as submit and get read it
    let data = try RegionFileOptions.embed(raw, a)
    let checked = try CheckedRequest(data, fileName: fileName, a)
    let (request, plan) = (checked.request, checked.plan)
    func refuse(_ e: RegionError) -> Int32 { err("tilespool: \(e.code.rawValue): \(e.message)"); return 1 }
    let overLimit = checked.overLimit
    var byKind: [String: Int] = [:]
    for r in plan.resources { byKind[r.kind.rawValue, default: 0] += 1 }
    byKind["tile"] = plan.tileCount
    let zooms = plan.tileCountsByZoom()
    var estimate: PlanEstimate?
    var holdings: PlanHoldings?
    if estimating && overLimit == nil {
        estimate = PlanEstimate.run(plan: plan, request: request, perZoom: perZoom, maxRequests: maxRequests, allowed: checked.allowedHosts)
        holdings = try PlanEstimate.alreadyStored(plan, try Locations(a))
    }
    if a.flags.contains("--json") {
        var bySource: [String: Any] = [:]
        for (name, count, bytes) in plan.tileSets.map({ ($0.source, $0.count, $0.tileBytes) }) {
            var z: [String: Int] = [:]
            for e in zooms where e.source == name { z[String(e.z)] = e.tiles }
            var s: [String: Any] = ["tiles": count, "byZoom": z]
            if let bytes { s["tileBytes"] = bytes }
            if let r = estimate?.interval(of: name) { s["estimatedBytes"] = PlanEstimate.json(r) }
            bySource[name] = s
        }
        var doc: [String: Any] = ["id": request.id, "resources": plan.count, "tiles": plan.tileCount,
                                  "byKind": byKind, "bySource": bySource]
        if let b = plan.tileBytes { doc["tileBytes"] = b }
        if let estimate {
            if estimate.unsampled.isEmpty { doc["estimatedBytes"] = PlanEstimate.json((estimate.low, estimate.high)) }
            doc["estimate"] = estimate.jsonObject
            doc["alreadyStored"] = ["resources": holdings?.resources ?? 0, "bytes": holdings?.bytes ?? 0]
        }
        outJSON(JSONKind.serialize(doc, pretty: true))
        if let e = estimate, !e.unsampled.isEmpty { return noEstimate(e) }
        return overLimit.map(refuse) ?? 0
    }
    // Counts saturate at Int.max (`SaturatingCount`): such a count means at least that many.
    func n(_ v: Int) -> String { v == Int.max ? "at least \(v)" : "\(v)" }
    out("plan for \(request.id): \(n(plan.count)) resources, \(n(plan.tileCount)) tiles" + (plan.tileBytes.map { ", \($0) tile bytes" } ?? ""))
    for k in ResourceKind.allCases where byKind[k.rawValue, default: 0] > 0 { out("  \(k.rawValue): \(n(byKind[k.rawValue]!))") }
    for (name, count, bytes) in plan.tileSets.map({ ($0.source, $0.count, $0.tileBytes) }) {
        out("  source \(name): \(n(count)) tiles" + (bytes.map { ", \($0) tile bytes (PMTiles archive)" } ?? ""))
        for e in zooms where e.source == name { out("    z\(e.z): \(n(e.tiles))") }
        if let r = estimate?.interval(of: name) { out("    estimated \(formatBytes(r.low)) to \(formatBytes(r.high))") }
    }
    if let e = estimate, !e.unsampled.isEmpty { return noEstimate(e) }
    if let e = estimate {
        out("estimated tile bytes: \(formatBytes(e.low)) to \(formatBytes(e.high)) (\(e.low) to \(e.high) bytes; 95% interval from \(e.requests - e.failed) sample tiles\(e.failed > 0 ? ", \(e.failed) failed" : ""))")
        if let h = holdings {
            out("already in the store: \(h.resources) of the \(n(plan.count)) resources, \(formatBytes(h.bytes))")
        } else {
            out("already in the store: nothing (no store at \((try? Locations(a))?.store ?? "?"))")
        }
    }
    return overLimit.map(refuse) ?? 0
}

/// `plan --estimate` when a source and zoom with planned tiles got no sample answered (every
/// sample request failed there): no interval can be given; says which, exit status 1.
func noEstimate(_ e: PlanEstimate) -> Int32 {
    err("tilespool: cannot estimate the tile bytes: no sample tile was answered for \(e.unsampled.joined(separator: ", ")) (\(e.failed) of \(e.requests) sample requests failed)")
    return 1
}

/// A request checked the way the daemon checks it, the one code path of `plan`, `submit` and
/// `get`: validated (`RequestValidator`), its hosts held against the tile usage policies (with
/// `--allow-host`), a style request's style and TileJSON fetched (no tiles, sprites or glyphs),
/// and planned exactly.
struct CheckedRequest {
    /// The validated request, defaults filled in.
    let request: RegionRequest
    /// The exact plan (counts from tile rectangles).
    let plan: ResourcePlan
    /// `tileLimitExceeded` when the plan passes the request's `maxTiles` or `--max-tiles` (plan
    /// prints the counts first, then this), else nil.
    let overLimit: RegionError?
    /// The hosts `--allow-host` exempts from the tile usage policies (lower case, no trailing dot).
    let allowedHosts: Set<String>
    /// The PMTiles archives read for the plan (none: empty), what they were read for and under
    /// which limits (`get` hands them to its daemon: `DaemonOptions.archivesRead`).
    var archivesRead: ArchivesRead

    /// Checks request bytes `data` (its default id from `fileName`, as in `requests/`) with the
    /// options `--allow-host HOST` (repeatable) and `--max-tiles N` of `a`.
    /// - Throws: `RegionError` for what the daemon would refuse (`invalidRequest`,
    ///   `policyRefused`, `invalidStyle`, `invalidTileJSON`, ...; not `tileLimitExceeded`, which
    ///   is `overLimit`); `CommandFailure` when the style or a TileJSON cannot be fetched;
    ///   `UsageError` for a bad `--max-tiles`.
    init(_ data: Data, fileName: String, _ a: Arguments) throws {
        let request = try RequestValidator.validate(data, fileName: fileName)
        let allowed = Set((a.allValues["--allow-host"] ?? []).map { $0.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: ".")) })
        let maxTiles = try a.int("--max-tiles", default: DaemonOptions.defaultMaxTiles)
        let named: [String]
        switch request.source { case .style(let u): named = [u]; case .tiles(let t): named = t }
        if let e = TileUsagePolicy.refusal(urls: named, subdomains: request.subdomains, allowedHosts: allowed) { throw e }
        let plan: ResourcePlan
        let readings: [String: PMTilesRemote.Reading]
        let sources: [(source: String, url: String, styleSource: StyleSource?)]
        var httpOptions = HTTPOptions()
        httpOptions.allowedHosts = allowed // a redirect to a listed host is refused too
        let http = HTTPClient(options: httpOptions)
        switch request.source {
        case .tiles(let templates):
            // PMTiles archives (issue 31): header, root and the leaves that meet the region.
            let archives = try PMTilesRemote.readAll(request: request, style: nil, http: http, headers: request.headerList, maxTiles: maxTiles)
            plan = try Planner.plan(request: request, templates: templates, archives: archives.mapValues(\.set),
                                    limits: .init(maxTiles: request.maxTiles, daemonMaxTiles: maxTiles))
            readings = archives
            sources = Planner.archiveSources(request: request, style: nil)
        case .style(let styleURL):
            // What a server sent (libcurl's text, a Location, a parse error quoting the body) is
            // printed with the request's secrets replaced, as the daemon quotes it (contract.md).
            func quoted(_ text: String, _ url: String) -> String {
                Redaction.redactEmbedded(text, secrets: request.secrets.adding(url: url))
            }
            func body(_ r: TransferResult, _ url: String) throws -> Data {
                if case .policyRefused(let why)? = r.failure { throw CommandFailure("policyRefused: \(quoted(why, url)) (redirected from \(Redaction.redact(url)))") }
                if let f = r.failure { throw CommandFailure("cannot fetch \(Redaction.redact(url)): \(quoted(String(describing: f), url))") }
                guard (200...299).contains(r.status) else { throw CommandFailure("HTTP \(r.status) from \(Redaction.redact(url))") }
                return r.body
            }
            func parsed<T>(_ url: String, _ make: () throws -> T) throws -> T {
                do { return try make() } catch var e as RegionError { e.message = quoted(e.message, url); throw e }
            }
            let styleBody = try body(http.fetchAll([styleURL], headers: request.headerList)[0], styleURL)
            let style = try parsed(styleURL) { try StyleDocument(data: styleBody, baseURL: styleURL) }
            if let e = TileUsagePolicy.refusal(style: style, allowedHosts: allowed) { throw e }
            let urls = Planner.tileJSONURLs(style)
            let results = http.fetchAll(urls.map(\.url), headers: request.headerList)
            var tileJSONs: [String: TileJSON] = [:]
            for (u, r) in zip(urls, results) {
                let data = try body(r, u.url)
                tileJSONs[u.source] = try parsed(u.url) { try TileJSON(data: data, baseURL: u.url) }
            }
            let archives = try PMTilesRemote.readAll(request: request, style: style, http: http, headers: request.headerList, maxTiles: maxTiles)
            plan = try Planner.plan(request: request, styleURL: styleURL, style: style, tileJSONs: tileJSONs, archives: archives.mapValues(\.set),
                                    limits: .init(maxTiles: request.maxTiles, daemonMaxTiles: maxTiles))
            readings = archives
            sources = Planner.archiveSources(request: request, style: style)
        }
        // A style's tile servers, sprites, glyphs and data are known only now, as for the daemon.
        if let e = TileUsagePolicy.refusal(plan: plan, allowedHosts: allowed) { throw e }
        // A plan of no tile fails at the daemon (only a PMTiles archive can give one): refused
        // here too, with the daemon's code, unless the request allows an empty region.
        if plan.tileCount == 0 && !request.allowEmpty {
            throw RegionError.emptyPlan
        }
        self.request = request
        self.plan = plan
        allowedHosts = allowed
        archivesRead = ArchivesRead(id: request.id, request: request, sources: sources, maxTiles: maxTiles,
                                    maxObjectSize: httpOptions.maxObjectSize, readings: readings)
        overLimit = RequestValidator.tileLimitError(tiles: plan.tileCount, maxTiles: request.maxTiles, daemonMaxTiles: maxTiles)
    }
}

/// A failure that is not a usage mistake: printed, exit status 1.
struct CommandFailure: Error, CustomStringConvertible { var description: String; init(_ d: String) { description = d } }

