import Foundation
import Glibc
import TileSpoolCore
import TileSpoolDaemon
import TileSpoolExport
import TileSpoolIO

let getHelp = """
usage: tilespool get FILE|- --output PATH [--format FORMAT] [--source NAME] [--base-url URL]
                     [--force] [--geometry FILE | --corridor FILE --buffer-meters N]
                     [--spool DIR] [--store DIR] [options]

The whole job in the foreground, without a running daemon: checks the request FILE (- reads
standard input, whose request must have an "id") as `tilespool plan` does, downloads it with the
daemon's own engine run in this process for this one region (a progress line with tiles, bytes
and ETA on a terminal), then exports it to PATH as `tilespool export` does.

Where: the request goes to a spool of its own, --spool DIR if given, else
$XDG_CACHE_HOME/tilespool/get (~/.cache/tilespool/get); the store is --store DIR, else
<spool>/store. Give the daemon's --store to share its objects: nothing the store already holds
for this region is fetched again (no daemon may run on that store meanwhile: it holds the
store's lock; use `tilespool submit --wait` and `tilespool export` then). Only this region of the
store is touched, and only requests/<id>.json and control/<id>.* of the spool.

Ctrl-C (SIGINT), SIGTERM, SIGQUIT or SIGHUP (unless nohup ignores it) stops it cleanly (what was downloaded is recorded; exit status 130);
the same command again goes on from there, fetching only what is missing. Run again after it
completed, it fetches nothing and exports again (with --force to replace PATH). A region of that
id in the store that downloads something else is replaced when it is finished (completed, failed,
cancelled: the daemon's rules, docs/contract.md), else refused. Exports the request itself
names (`exports`) are not waited for: they are written into <spool>/exports/ only if they finish
before get stops (a later get or run writes them); --output is get's export.

options:
--output PATH        the file or folder to write (required); refused if it exists, unless --force
--format FORMAT      mbtiles, pmtiles, maplibre or site; default from PATH: .mbtiles, .pmtiles,
                     .db (maplibre), a folder or a name ending in / or .site (site)
--source NAME        the tile source for mbtiles and pmtiles (when several sources have tiles)
--base-url URL       site: the URL the folder will be served at
--force              replace an existing PATH (a regular file, or a folder a site export made)
\(RegionFileOptions.help)
--max-tiles N        the largest plan accepted (default 1000000)
--allow-host HOST    as for `tilespool run` (repeatable)
--max-requests-per-second-per-host N, --max-retries N, --retry-delay SECONDS,
--user-agent TEXT    as for `tilespool run`
--verbose            the daemon's info log lines too (warnings and errors are always shown)

exit status:
  0    the export was written
  1    nothing written: the check failed, a daemon holds the spool's or the store's lock, a
       region of that id is another unfinished download, or the export failed
  2    a usage mistake
  3    the engine refused the request on arrival (rejected/<id>.json.error says why, e.g. the
       store could not be written)
  4    the download failed (the status in <spool>/status/<id>.json says why)
  6    failedStorage: disk full, or the store cannot be written
  7    the region was cancelled (a control file in the spool)
  8    the region was deleted (a control file in the spool)
  10   the server cannot be reached after the retries; run again to go on
  130  stopped by SIGINT, SIGTERM, SIGQUIT or SIGHUP; run again to go on
"""

/// The export format `tilespool get` writes to `output`: `--format`, else from the name.
/// - Throws: `UsageError` when neither gives one.
func getFormat(_ given: String?, output: String) throws -> ExportFormat {
    if let given {
        guard let f = ExportFormat(rawValue: given) else {
            throw UsageError("--format must be one of \(ExportFormat.allCases.map(\.rawValue).joined(separator: ", ")), not '\(given)'")
        }
        return f
    }
    let lower = output.lowercased()
    if lower.hasSuffix(".mbtiles") { return .mbtiles }
    if lower.hasSuffix(".pmtiles") { return .pmtiles }
    if lower.hasSuffix(".db") { return .maplibre }
    if lower.hasSuffix("/") || lower.hasSuffix(".site") || Files.entryType(output) == .directory { return .site }
    throw UsageError("cannot tell the format from \(output): give --format (mbtiles, pmtiles, maplibre or site), or a name ending in .mbtiles, .pmtiles, .db or /")
}

/// The options of `tilespool run` that `get` takes too, parsed as `run` parses them.
let getRunOptions = RunOption.named(["--max-tiles", "--allow-host", "--max-requests-per-second-per-host",
                                     "--max-retries", "--retry-delay", "--user-agent"])

func commandGet(_ argv: [String]) throws -> Int32 {
    let a = try Arguments(argv, flags: commonFlags.union(["--force", "--verbose"]),
                          valued: commonValued.union(["--output", "--format", "--source", "--base-url"])
                            .union(getRunOptions.map(\.name)).union(RegionFileOptions.valued))
    if a.flags.contains("--help") { out(getHelp); return 0 }
    guard a.positionals.count == 1, let path = a.positionals.first else { throw UsageError("get takes one request file (or - for standard input)") }
    guard var output = a.options["--output"], !output.isEmpty else { throw UsageError("--output PATH is required") }
    let format = try getFormat(a.options["--format"], output: output)
    while output.count > 1 && output.hasSuffix("/") { output.removeLast() }
    if let s = a.options["--source"], let p = ExportSpec.sourceProblem(s) { throw UsageError("--source: \(p)") }
    if let b = a.options["--base-url"], let p = ExportSpec.baseURLProblem(b) { throw UsageError("--base-url \(p)") }
    var loc = try Locations(a)
    if a.options["--spool"] == nil {
        let env = ProcessInfo.processInfo.environment
        let cache = env["XDG_CACHE_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil } ?? env["HOME"].map { $0 + "/.cache" }
        guard let cache else { throw UsageError("no HOME to keep get's spool in: give --spool DIR") }
        loc.spool = cache + "/tilespool/get"
        if a.options["--store"] == nil { loc.store = loc.spool + "/store" }
    }
    var o = DaemonOptions(spool: loc.spool, store: loc.store)
    o.s3Endpoint = loc.s3Endpoint
    o.s3PathStyle = loc.s3PathStyle
    try RunOption.apply(getRunOptions, a, to: &o)

    // The request, checked as plan checks it.
    let (raw, fileName) = try readRequestArgument(path)
    let data = try RegionFileOptions.embed(raw, a)
    var checked = try CheckedRequest(data, fileName: fileName, a)
    if let e = checked.overLimit { throw e }
    let request = checked.request, id = request.id
    o.onlyRegion = id
    // The archives the check read are not read again to plan the same download.
    // (A whole archive a Range-ignoring server sent goes to the daemon only, not kept here too.)
    if !checked.archivesRead.readings.isEmpty { o.archivesRead = checked.archivesRead; checked.archivesRead = checked.archivesRead.withoutWholeFiles }
    let spec = ExportSpec(format: format, source: a.options["--source"], baseURL: a.options["--base-url"])
    if !a.flags.contains("--force"), Files.entryType(output) != .missing {
        throw CommandFailure("\(output) exists: give --force to replace it (nothing downloaded)")
    }
    // Everything the export will refuse at PATH (a symlink, a folder we did not make, a folder
    // that is not there, the spool or store) is refused now, before the download.
    do { try Exporter.checkOutput(output, format: format, force: a.flags.contains("--force"), guard: .spool(loc.spool, store: loc.store)) } catch {
        throw CommandFailure("\(error.message) (nothing downloaded)")
    }
    err("get \(id): \(checked.plan.count) resources, \(checked.plan.tileCount) tiles (spool \(loc.spool), store \(loc.store))")

    // No daemon may hold the spool or the store: the lock files say (Daemon.init takes them too).
    let layout = loc.layout
    for lock in [layout.lock] + (loc.isS3 ? [] : [loc.store + "/daemon.lock"]) where (try? SpoolLock.isHeld(path: lock)) == true {
        err("tilespool: a daemon is running on \(lock == layout.lock ? "the spool " + loc.spool : "the store " + loc.store) (lock \(lock) is held; "
            + "another 'tilespool get' on it holds it too): get runs the download itself and cannot share it; use 'tilespool submit --wait' and 'tilespool export' with that daemon, "
            + "give each get its own --spool, or stop it")
        return RegionExit.notDone
    }

    // What the store and the spool already have of this id decides what is dropped.
    try Files.makeDirectories(loc.spool)
    let statusNow = StatusWriter(layout: layout).read(id: id)
    var existing: RegionRequest?
    // The stored plan pins a version of a PMTiles archive other than the one the check read.
    var archiveMoved = false
    do {
        let store = try loc.openStore()
        if store.regionExists(id) {
            existing = try? store.region(id).loadRequest()
            for set in store.region(id).loadPlan()?.tileSets ?? [] {
                guard let pinned = set.archive, let read = checked.archivesRead.readings[set.source]?.set.archive else { continue }
                // The daemon's own test of an answer against the version pinned.
                if pinned.url != read.url || PMTilesRemote.changed(Freshness(etag: pinned.etag, lastModified: pinned.lastModified),
                                                                   Freshness(etag: read.etag, lastModified: read.lastModified)) {
                    archiveMoved = true
                }
            }
        }
    }
    enum Step { case nothing, resume, drop }
    var step = Step.drop
    var alreadyComplete = false
    if let existing {
        if existing.downloadsTheSame(as: request) {
            // The same download: the daemon goes on with it (a re-dropped request would refresh it).
            switch statusNow?.state {
            case .completed? where statusNow?.refreshing == false: alreadyComplete = true; step = .nothing
            // Its plan pins a PMTiles archive's version other than the check read (it failed with
            // archiveChanged): planned again over the version the check read (a resume would ask
            // the old version and fail again for good: attack round 31).
            case .failed? where archiveMoved: step = .drop
            case .failed?, .cancelled?, .pausedUser?, .failedStorage?: step = .resume
            default: step = .nothing
            }
        } else if existing.differsOnlyInCredentials(from: request) {
            step = .drop // new credentials: the daemon keeps what the region has
        } else if let st = statusNow, st.namesItsRequest, st.state.isTerminal {
            err("tilespool: note: this request replaces region '\(id)' (\(st.state.rawValue)) in \(loc.store)")
        } else {
            err("tilespool: region '\(id)' in the store \(loc.store) is another download (\(statusNow.map { $0.state.rawValue } ?? "no status in \(loc.spool)")): give the request another id, or delete that region ('tilespool delete \(id) --spool \(loc.spool)\(loc.store == loc.spool + "/store" ? "" : " --store \(loc.store)")', which needs no daemon)")
            return RegionExit.notDone
        }
    }

    if !alreadyComplete {
        let follower = RegionFollower(id: id, layout: layout, endAtPausedNetwork: true)
        if !a.flags.contains("--verbose") { Log.showsInfo = false }
        let daemon: Daemon
        do { daemon = try Daemon(options: o); o.archivesRead = nil } catch let e as SystemError where e.operation == "flock" {
            err("tilespool: a daemon is running on this spool or store (lock \(e.path) is held), or another 'tilespool get' on the same spool: use 'tilespool submit --wait' with a daemon, or give each get its own --spool")
            return RegionExit.notDone
        }
        switch step {
        case .drop:
            guard try writeRequestFile(data, id: id, layout: layout) else {
                err("tilespool: \(layout.requests)/\(id).json is already there: nothing done")
                return RegionExit.notDone
            }
        case .resume:
            try Files.makeDirectories(layout.control)
            try Files.writeAtomically(Data(), to: "\(layout.control)/\(id).resume")
        case .nothing:
            break
        }
        var end: RegionEnd?
        var lastCheck = 0.0
        var replanned = false
        let signalled = daemon.run(until: {
            let now = Date().timeIntervalSince1970
            guard now - lastCheck >= 0.1 else { return false }
            lastCheck = now
            end = follower.check()
            // A region going on with a plan pinned to a version of its archive other than the
            // one the check read, which a request dropped over it now would not replace (not
            // finished here: a get interrupted before the archive changed, or its region failed
            // on another spool over this store: round 32), fails with archiveChanged: then it is
            // dropped again, once, and planned over the version the check read.
            if archiveMoved, !replanned, case .failed(let why)? = end, why.hasPrefix(ErrorCode.archiveChanged.rawValue + ":") {
                replanned = true
                if (try? writeRequestFile(data, id: id, layout: layout)) == true { end = nil }
            }
            return end != nil
        })
        follower.draw(force: true)
        follower.finishLine()
        if signalled {
            err("tilespool: stopped; what was downloaded is kept: run the same command again to go on")
            return RegionExit.interrupted
        }
        guard let end else { return RegionExit.notDone }
        if end != .completed { report(end, id: id); return end.exitStatus }
    }
    // SIGINT, SIGTERM (and SIGHUP, SIGQUIT) stop the export too: a handler notes the signal (one the daemon left
    // blocked and pending is delivered now), and the export, checking between tiles, ends with
    // its work folder removed and PATH as it was; exit status 130 either way.
    StopSignal.install()
    func stopped() -> Int32 {
        err("tilespool: stopped before the export was written; \(output) is as it was: run the same command again to write it")
        return RegionExit.interrupted
    }
    if StopSignal.received != 0 { return stopped() }

    let pack = try RegionPack(store: try loc.openStore(), id: id)
    let started = Date()
    let result: ExportResult
    do {
        result = try Exporter.export(pack, spec, to: output, force: a.flags.contains("--force"),
                                     guard: .spool(loc.spool, store: loc.store), progress: { _, _ in try StopSignal.throwIfReceived() })
    } catch {
        if StopSignal.received != 0 { return stopped() }
        throw error
    }
    StopSignal.noteIfReceivedAfterWriting(result.path)
    let secs = Date().timeIntervalSince(started)
    out("\(result.path): \(format.rawValue)\(result.source.map { " (source \($0))" } ?? ""), \(result.tiles) tiles, \(formatBytes(result.bytes)), \(String(format: "%.1f", secs)) s")
    return RegionExit.done
}
