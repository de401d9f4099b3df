import Foundation
import Glibc
import TileSpoolCore
import TileSpoolExport
import TileSpoolIO

let exportHelp = """
usage: tilespool export ID --format FORMAT [--output PATH] [--source NAME] [--base-url URL]
                        [--bounds W,S,E,N] [--min-zoom A] [--max-zoom B]
                        [--force] [--json] [--spool DIR] [--store DIR]
       tilespool export ID1 ID2 ... --format mbtiles|pmtiles --output PATH [options]

Writes a completed region as a pack a map client opens offline (docs/export.md):
  maplibre   MapLibre Native offline database (iOS addContentsOfURL, Android mergeOfflineRegions)
  mbtiles    MBTiles 1.3 of one tile source (tileserver-gl, martin, QGIS, GDAL)
  pmtiles    PMTiles v3 of one tile source (pmtiles:// in MapLibre GL JS, pmtiles serve)
  site       a folder for a static web server: style.json, TileJSON, tiles (copied from the packs;
             hard links to the loose objects of a store written before packs), sprites,
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
  --bounds W,S,E,N   export only the tiles that meet this box (degrees; west > east crosses the
                     antimeridian); style, sprites and glyphs as for a whole export; the
                     metadata states the box clipped to the region's
  --min-zoom A, --max-zoom B
                     export only tiles of these tile zooms (the z of z/x/y; default all); a
                     subset holding no tile of the region is refused
  --force            replace an existing PATH
  --max-object-size BYTES
                     the most bytes a body stored as a gzip file (its server sent gzip bytes
                     without Content-Encoding) may inflate to where the export decodes it (site,
                     maplibre) or hands it on (mbtiles, pmtiles); past it the export fails
                     (default 33554432, as the daemon's --max-object-size)
  --json             print the result as JSON: format, source, path, bytes, tiles, sha256
Several IDs (mbtiles and pmtiles only, --output required): completed regions fetched from the
same tile URL template go in one file, their union, each z/x/y once; where two regions hold a
tile, the one whose pack was written last wins (docs/export.md). Different sources are refused.
SIGINT, SIGTERM, SIGHUP or SIGQUIT stop it between tiles: the work folder is removed and PATH is as it was
(exit 130); one that comes once PATH is replaced does not undo it (exit 0, with a note).
Exit status: 0 written, 1 not written (the region is not completed, a missing source, ...), 2 usage,
130 stopped by SIGINT, SIGTERM, SIGHUP or SIGQUIT.
"""

func commandExport(_ argv: [String]) throws -> Int32 {
    let a = try Arguments(argv, flags: commonFlags.union(["--force", "--json"]),
                          valued: commonValued.union(["--format", "--output", "--source", "--base-url", "--max-object-size",
                                                      "--bounds", "--min-zoom", "--max-zoom"]))
    if a.flags.contains("--help") { out(exportHelp); return 0 }
    let ids = a.positionals
    guard let id = ids.first else { throw UsageError("export takes a region ID (or several, for mbtiles and pmtiles)") }
    guard let f = a.options["--format"] else { throw UsageError("--format is required (maplibre, mbtiles, pmtiles or site)") }
    guard let format = ExportFormat(rawValue: f) else {
        throw UsageError("--format must be one of \(ExportFormat.allCases.map(\.rawValue).joined(separator: ", ")), not '\(f)'")
    }
    if ids.count > 1 {
        guard format.isSingleSource else { throw UsageError("several regions go in one file only as mbtiles or pmtiles; a \(format.rawValue) export takes one region ID") }
        guard a.options["--output"] != nil else { throw UsageError("several regions need --output PATH") }
        if let dup = ids.first(where: { d in ids.filter { $0 == d }.count > 1 }) { throw UsageError("region '\(dup)' is given twice") }
    }
    if let s = a.options["--source"], let p = ExportSpec.sourceProblem(s) { throw UsageError("--source: \(p)") }
    if let b = a.options["--base-url"], let p = ExportSpec.baseURLProblem(b) {
        throw UsageError("--base-url \(p)")
    }
    var subset: ExportSubset?
    if a.options["--bounds"] != nil || a.options["--min-zoom"] != nil || a.options["--max-zoom"] != nil {
        var box = GeoBounds(west: -180, south: -90, east: 180, north: 90)
        if let text = a.options["--bounds"] {
            let (b, problem) = ExportSubset.parseBounds(text)
            guard let b else { throw UsageError("--bounds \(problem ?? "is not W,S,E,N")") }
            box = b
        }
        let lo = try a.int("--min-zoom", default: TileRect.zoomRange.lowerBound, range: TileRect.zoomRange)
        let hi = try a.int("--max-zoom", default: TileRect.zoomRange.upperBound, range: TileRect.zoomRange)
        guard lo <= hi else { throw UsageError("--min-zoom \(lo) is above --max-zoom \(hi)") }
        subset = ExportSubset(bounds: box, zooms: lo...hi)
    }
    for id in ids { guard RequestValidator.isValidID(id) else { throw CommandFailure("'\(TerminalText.inline(id))' is not a valid region id") } }
    let loc = try Locations(a)
    try loc.requireStore()
    // Only a completed region is exported: any other state may be a partial pack. A region being
    // refreshed has its previous pack complete and untouched until the swap (docs/refresh.md).
    if Files.entryType(loc.spool + "/status") == .directory {
        let writer = StatusWriter(layout: loc.layout)
        for id in ids {
            guard let st = writer.read(id: id) else { throw CommandFailure("no region '\(id)' in \(loc.spool)/status") }
            guard st.state == .completed || st.refreshing else {
                throw CommandFailure("region '\(id)' is \(st.state.rawValue), not completed: only a completed region can be exported")
            }
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
    let store = try loc.openStore()
    let packs = try ids.map { try RegionPack(store: store, id: $0) }
    let onTerminal = isatty(2) == 1
    var lastDraw = 0.0
    // SIGINT, SIGTERM, SIGHUP and SIGQUIT stop the export between tiles: its work folder is removed and PATH is
    // as it was (attack round 14: the work folder was left behind), exit status 130.
    StopSignal.install()
    let progress: Exporter.Progress = { done, total in
        try StopSignal.throwIfReceived()
        guard onTerminal else { return }
        let now = Date().timeIntervalSince1970
        guard now - lastDraw >= 0.2 || done >= total else { return }
        lastDraw = now
        let pct = total > 0 ? 100 * Double(min(done, total)) / Double(total) : 100
        FileHandle.standardError.write(Data("\rexport \(ids.joined(separator: "+")): \(done)/\(total) tiles (\(String(format: "%.0f", pct))%)".utf8))
    }
    let started = Date()
    let result: ExportResult
    do {
        result = try Exporter.export(packs, spec, to: output, force: a.flags.contains("--force"),
                                     guard: .spool(loc.spool, store: loc.store), maxObjectSize: maxObjectSize,
                                     subset: subset, progress: progress)
    } catch {
        if onTerminal { FileHandle.standardError.write(Data("\n".utf8)) }
        guard StopSignal.received != 0 else { throw error }
        err("tilespool: stopped before the export was written; \(output) is as it was")
        return RegionExit.interrupted
    }
    if onTerminal { FileHandle.standardError.write(Data("\n".utf8)) }
    StopSignal.noteIfReceivedAfterWriting(result.path)
    if a.flags.contains("--json") {
        outJSON(JSONKind.serialize(result.jsonObject, pretty: true))
    } else {
        let secs = Date().timeIntervalSince(started)
        out("\(result.path): \(format.rawValue)\(result.source.map { " (source \($0))" } ?? ""), \(result.tiles) tiles, \(formatBytes(result.bytes)), \(String(format: "%.1f", secs)) s")
    }
    return 0
}
