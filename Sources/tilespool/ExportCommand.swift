import Foundation
import Glibc
import TileSpoolCore
import TileSpoolExport
import TileSpoolIO

let exportHelp = """
usage: tilespool export ID --format FORMAT [--output PATH] [--source NAME] [--base-url URL]
                        [--force] [--json] [--spool DIR] [--store DIR]

Writes a completed region as a pack a map client opens offline (docs/export.md):
  maplibre   MapLibre Native offline database (iOS addContentsOfURL, Android mergeOfflineRegions)
  mbtiles    MBTiles 1.3 of one tile source (tileserver-gl, martin, QGIS, GDAL)
  pmtiles    PMTiles v3 of one tile source (pmtiles:// in MapLibre GL JS, pmtiles serve)
  site       a folder for a static web server: style.json, TileJSON, tiles (hard links), sprites,
             fonts and an nginx.conf snippet

The export is written in a work folder beside PATH, checked against the region's plan, and
renamed into place; an existing PATH is refused unless --force, and even then only a regular file
(or, for a site, a folder an earlier site export made) is replaced: never a symlink. PATH may not
be in the spool or the store (but <spool>/exports/). It reads the store only: safe beside a
running daemon and gc.

options:
  --format FORMAT    maplibre, mbtiles, pmtiles or site (required)
  --output PATH      the file or folder to write (default <spool>/exports/<id>.<ext>, or
                     <id>+<source>.<ext> with --source; .db, .mbtiles, .pmtiles, .site)
  --source NAME      the tile source for mbtiles and pmtiles (required when several sources have
                     planned tiles; a source with none does not count)
  --base-url URL     site: the URL the folder will be served at (absolute URLs in style.json);
                     without it the URLs are relative paths
  --force            replace an existing PATH
  --max-object-size BYTES
                     the most bytes a body stored as a gzip file (its server sent gzip bytes
                     without Content-Encoding) may inflate to where the export decodes it (site,
                     maplibre) or hands it on (mbtiles, pmtiles); past it the export fails
                     (default 33554432, as the daemon's --max-object-size)
  --json             print the result as JSON: format, source, path, bytes, tiles, sha256
Exit status: 0 written, 1 not written (the region is not completed, a missing source, ...), 2 usage.
"""

func commandExport(_ argv: [String]) throws -> Int32 {
    let a = try Arguments(argv, flags: commonFlags.union(["--force", "--json"]),
                          valued: commonValued.union(["--format", "--output", "--source", "--base-url", "--max-object-size"]))
    if a.flags.contains("--help") { out(exportHelp); return 0 }
    guard a.positionals.count == 1, let id = a.positionals.first else { throw UsageError("export takes one region ID") }
    guard let f = a.options["--format"] else { throw UsageError("--format is required (maplibre, mbtiles, pmtiles or site)") }
    guard let format = ExportFormat(rawValue: f) else {
        throw UsageError("--format must be one of \(ExportFormat.allCases.map(\.rawValue).joined(separator: ", ")), not '\(f)'")
    }
    if let s = a.options["--source"], let p = ExportSpec.sourceProblem(s) { throw UsageError("--source: \(p)") }
    if let b = a.options["--base-url"], let p = ExportSpec.baseURLProblem(b) {
        throw UsageError("--base-url \(p)")
    }
    guard RequestValidator.isValidID(id) else { throw CommandFailure("'\(id)' is not a valid region id") }
    let loc = try Locations(a)
    try loc.requireStore()
    // Only a completed region is exported: any other state may be a partial pack. A region being
    // refreshed has its previous pack complete and untouched until the swap (docs/refresh.md).
    if Files.entryType(loc.spool + "/status") == .directory {
        let writer = StatusWriter(layout: loc.layout)
        guard let st = writer.read(id: id) else { throw CommandFailure("no region '\(id)' in \(loc.spool)/status") }
        guard st.state == .completed || st.refreshing else {
            throw CommandFailure("region '\(id)' is \(st.state.rawValue), not completed: only a completed region can be exported")
        }
    }
    let maxObjectSize = try a.int("--max-object-size", default: Exporter.defaultMaxObjectSize, range: 1...(1 << 34))
    let spec = ExportSpec(format: format, source: a.options["--source"], baseURL: a.options["--base-url"])
    let output: String
    if let o = a.options["--output"] {
        output = o
    } else {
        output = Exporter.spoolOutput(spool: loc.spool, id: id, spec: spec)
        try? Files.makeDirectories(loc.spool + "/exports")
    }
    let pack = try RegionPack(store: try loc.openStore(), id: id)
    let onTerminal = isatty(2) == 1
    var lastDraw = 0.0
    let progress: Exporter.Progress? = onTerminal ? { done, total in
        let now = Date().timeIntervalSince1970
        guard now - lastDraw >= 0.2 || done >= total else { return }
        lastDraw = now
        let pct = total > 0 ? 100 * Double(min(done, total)) / Double(total) : 100
        FileHandle.standardError.write(Data(String(format: "\rexport %@: %d/%d tiles (%.0f%%)", id, done, total, pct).utf8))
    } : nil
    let started = Date()
    let result = try Exporter.export(pack, spec, to: output, force: a.flags.contains("--force"),
                                     guard: .spool(loc.spool, store: loc.store), maxObjectSize: maxObjectSize, progress: progress)
    if onTerminal { FileHandle.standardError.write(Data("\n".utf8)) }
    if a.flags.contains("--json") {
        out(String(decoding: JSONKind.serialize(result.jsonObject, pretty: true), as: UTF8.self))
    } else {
        let secs = Date().timeIntervalSince(started)
        out("\(result.path): \(format.rawValue)\(result.source.map { " (source \($0))" } ?? ""), \(result.tiles) tiles, \(formatBytes(result.bytes)), \(String(format: "%.1f", secs)) s")
    }
    return 0
}
