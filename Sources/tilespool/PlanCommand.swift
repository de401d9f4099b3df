import Foundation
import TileSpoolCore
import TileSpoolIO

let planHelp = """
usage: tilespool plan REQUEST.json [--json] [--spool DIR] [--store DIR]

A dry run: validates the request, fetches the style and each source's TileJSON (not tiles,
sprites or glyphs), and prints the exact number of resources the request would download, by
kind, by source and by zoom, and the tile total. Writes nothing. The plan is counted from tile
rectangles, so a plan of millions of tiles takes little time and memory.
"""

func commandPlan(_ argv: [String]) throws -> Int32 {
    let a = try Arguments(argv, flags: commonFlags.union(["--json"]), valued: commonValued)
    if a.flags.contains("--help") { out(planHelp); return 0 }
    guard a.positionals.count == 1, let path = a.positionals.first else { throw UsageError("plan takes one request file") }
    let data = try Files.readRegularFile(path, limit: RequestValidator.maxFileSize)
    let request: RegionRequest
    do { request = try RequestValidator.validate(data, fileName: (path as NSString).lastPathComponent) } catch {
        err("tilespool: \(error.code.rawValue): \(error.message)")
        return 1
    }
    let plan: ResourcePlan
    switch request.source {
    case .tiles(let templates):
        plan = Planner.plan(request: request, templates: templates)
    case .style(let styleURL):
        let http = HTTPClient(options: HTTPOptions())
        func body(_ r: TransferResult, _ url: String) throws -> Data {
            if let f = r.failure { throw CommandFailure("cannot fetch \(Redaction.redact(url)): \(f)") }
            guard (200...299).contains(r.status) else { throw CommandFailure("HTTP \(r.status) from \(Redaction.redact(url))") }
            return r.body
        }
        let style = try StyleDocument(data: try body(http.fetchAll([styleURL], headers: request.headerList)[0], styleURL), baseURL: styleURL)
        let urls = Planner.tileJSONURLs(style)
        let results = http.fetchAll(urls.map(\.url), headers: request.headerList)
        var tileJSONs: [String: TileJSON] = [:]
        for (u, r) in zip(urls, results) { tileJSONs[u.source] = try TileJSON(data: try body(r, u.url), baseURL: u.url) }
        plan = Planner.plan(request: request, styleURL: styleURL, style: style, tileJSONs: tileJSONs)
    }
    var byKind: [String: Int] = [:]
    for r in plan.resources { byKind[r.kind.rawValue, default: 0] += 1 }
    byKind["tile"] = plan.tileCount
    let zooms = plan.tileCountsByZoom()
    if a.flags.contains("--json") {
        var bySource: [String: Any] = [:]
        for set in plan.tileSets {
            var z: [String: Int] = [:]
            for e in zooms where e.source == set.source { z[String(e.z)] = e.tiles }
            bySource[set.source] = ["tiles": set.count, "byZoom": z]
        }
        let doc: [String: Any] = ["id": request.id, "resources": plan.count, "tiles": plan.tileCount,
                                  "byKind": byKind, "bySource": bySource]
        out(String(decoding: JSONKind.serialize(doc, pretty: true), as: UTF8.self))
        return 0
    }
    out("plan for \(request.id): \(plan.count) resources, \(plan.tileCount) tiles")
    for k in ResourceKind.allCases where byKind[k.rawValue, default: 0] > 0 { out("  \(k.rawValue): \(byKind[k.rawValue]!)") }
    for set in plan.tileSets {
        out("  source \(set.source): \(set.count) tiles")
        for e in zooms where e.source == set.source { out("    z\(e.z): \(e.tiles)") }
    }
    return 0
}

/// A failure that is not a usage mistake: printed, exit status 1.
struct CommandFailure: Error, CustomStringConvertible { var description: String; init(_ d: String) { description = d } }
