import Foundation
import Glibc
import TileSpoolCore
import TileSpoolIO

/// Settings of the daemon (the options of `tilespool run`). Times in seconds.
public struct DaemonOptions: Sendable {
    public var spool: String
    public var store: String
    /// Regions downloading at once; the rest wait as `queued` in arrival order.
    public var maxActiveRegions = 2
    /// Requests in flight for one region.
    public var maxRequestsPerRegion = 8
    /// The largest plan accepted, in tiles (a request's `maxTiles` can only lower it).
    public var maxTiles = 1_000_000
    /// Attempts after the first for a transient failure (5xx, 429, network, damaged body).
    public var maxRetries = 5
    /// First retry delay; doubles each attempt up to `maxRetryDelay`.
    public var retryDelay = 1.0
    public var maxRetryDelay = 30.0
    /// Longest gap between two probes of a server while a region is `pausedNetwork`.
    public var maxProbeInterval = 60.0
    /// Objects are made durable and recorded in the manifest at least this often, or every
    /// `syncBatch` objects, whichever comes first.
    public var syncInterval = 1.0
    public var syncBatch = 4096
    /// Status files of a downloading region are rewritten at most this often.
    public var statusInterval = 1.0
    public var http = HTTPOptions()
    public init(spool: String, store: String) { self.spool = spool; self.store = store }
}

/// A fixed-size bit set over plan indices: which resources are in the manifest.
struct Bitmap {
    private var words: [UInt64]
    init(count: Int) { words = [UInt64](repeating: 0, count: (count + 63) / 64) }
    subscript(i: Int) -> Bool {
        get { words[i >> 6] & (1 << UInt64(i & 63)) != 0 }
        set { if newValue { words[i >> 6] |= 1 << UInt64(i & 63) } else { words[i >> 6] &= ~(1 << UInt64(i & 63)) } }
    }
}

/// What one transfer fetches for a region: a plan index, or a document needed before the plan.
enum WorkItem: Hashable {
    /// Plan index (the plan exists).
    case index(Int)
    /// The style document (before the plan).
    case style
    /// A source's TileJSON (before the plan).
    case tileJSON(String)
}

/// A transfer under way: the item and what `Daemon.describe` said of it, worked out once when it
/// is issued (a plan look-up and a URL per tile, not one per step).
struct Fetch {
    let item: WorkItem
    let url: String
    let kind: ResourceKind
    let key: String
}

/// A region the daemon knows: its request, state, progress and, while downloading, its executor.
final class Region {
    let id: String
    var request: RegionRequest
    var state: RegionState
    var progress = RegionProgress()
    var error: RegionError?
    let files: RegionFiles
    /// Arrival order (for the queue).
    var arrival: Int
    var download: Download?
    /// Status needs rewriting; when it was last written (monotonic seconds).
    var statusDirty = false
    var lastStatusWrite = 0.0
    /// While `pausedNetwork`: the URL to probe, when, and the current probe gap.
    var probeURL: String?
    var nextProbe = 0.0
    var probeGap = 1.0
    var probing = false
    /// The `exports` entries of the status (see `RegionStatus.exports`); nil when none were asked.
    var exports: [[String: Any]]?
    /// Which run of `Daemon.startExports` the entries of `exports` belong to.
    var exportGeneration = 0

    init(id: String, request: RegionRequest, state: RegionState, files: RegionFiles, arrival: Int) {
        self.id = id; self.request = request; self.state = state; self.files = files; self.arrival = arrival
    }
}

/// The state of a region's download while it is `downloading`.
final class Download {
    var plan: ResourcePlan?
    var done = Bitmap(count: 0)
    /// Next plan index to consider.
    var cursor = 0
    /// Transfers under way: tag -> item.
    var inFlight: [Int: Fetch] = [:]
    var nonTileInFlight = 0
    /// Items waiting to be retried: (due time, item).
    var retries: [(due: Double, item: WorkItem)] = []
    var attempts: [WorkItem: Int] = [:]
    /// Objects written to the store, waiting for the next sync to enter the manifest.
    var pending: [(item: WorkItem, line: ManifestLine)] = []
    /// Lines of `pending` not yet appended to the journal (written once per loop iteration).
    var journalBuffer: [ManifestLine] = []
    /// No new request before this time (a server's Retry-After).
    var holdUntil = 0.0
    /// The covered columns of the last tile row looked at (GeoJSON regions), by set, zoom and row.
    var rowCache: (set: Int, z: Int, y: Int, columns: [ClosedRange<Int>])?
    /// The shape's rings projected at the zoom of `rowCache` (projected once per zoom).
    var ringCache: (set: Int, z: Int, rings: [[(Double, Double)]])?

    /// False for a tile index that a GeoJSON shape leaves out of its rectangle.
    func isPlanned(_ i: Int, _ plan: ResourcePlan) -> Bool {
        guard i >= plan.resources.count, plan.tileSets.contains(where: { $0.shape != nil }),
              case .tile(let s, let t) = plan.item(at: i), let shape = plan.tileSets[s].shape else { return true }
        if let c = rowCache, c.set == s, c.z == t.z, c.y == t.y { return c.columns.contains { $0.contains(t.x) } }
        if ringCache?.set != s || ringCache?.z != t.z { ringCache = (s, t.z, shape.projected(z: t.z)) }
        let columns = shape.columns(z: t.z, y: t.y, rings: ringCache!.rings)
        rowCache = (s, t.z, t.y, columns)
        return columns.contains { $0.contains(t.x) }
    }

    /// Before the plan: the style and the TileJSON documents fetched so far.
    var style: StyleDocument?
    var styleURL = ""
    var tileJSONs: [String: TileJSON] = [:]
    var needed: [WorkItem] = []
}

/// The daemon: one thread, one event loop over libcurl's multi handle, the inotify fd and a
/// signalfd. Plans are values from `TileSpoolCore`; this class executes them and is the only
/// place that changes a region's state (through `RegionStateMachine`).
public final class Daemon {
    let options: DaemonOptions
    let layout: SpoolLayout
    let store: ObjectStore
    let status: StatusWriter
    let http: HTTPClient
    let watcher: FolderWatcher
    let signals: SignalFD
    let lock: SpoolLock
    let storeLock: SpoolLock
    var regions: [String: Region] = [:]
    /// The regions the event loop looks at each turn: queued, downloading, pausedNetwork, or with
    /// a status still to write. Finished regions stay out of the hot path however many there are.
    var live: [String: Region] = [:]
    var arrivals = 0
    var nextTag = 1
    /// tag -> (region id, item); probes use item nil.
    var transfers: [Int: (String, WorkItem?)] = [:]
    var lastSync = 0.0
    var lastRescan = Daemon.now()
    var pendingCount = 0
    var stopping = false
    /// Exports run here, one at a time, off the event loop (Exports.swift).
    let exportQueue = DispatchQueue(label: "tilespool.exports", qos: .utility)
    let exportMailbox = ExportMailbox()
    var exportGeneration = 0

    /// Opens the spool and store, takes the spool lock, and loads the regions already known.
    /// - Throws: `SystemError` when the lock is held (EWOULDBLOCK) or a folder cannot be made.
    public init(options: DaemonOptions) throws {
        self.options = options
        layout = SpoolLayout(root: options.spool)
        try layout.create()
        lock = try SpoolLock(path: layout.lock)
        store = try ObjectStore(root: options.store)
        storeLock = try SpoolLock(path: store.root + "/daemon.lock") // one daemon per store too
        status = StatusWriter(layout: layout)
        http = HTTPClient(options: options.http)
        watcher = try FolderWatcher()
        signals = try SignalFD()
        try watcher.watch(layout.requests)
        try watcher.watch(layout.control)
        cleanTemporaryFiles()
        loadRegions()
    }

    static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    /// Removes temp files a previous run left in the store (no other process writes there).
    func cleanTemporaryFiles() {
        store.restoreObjectsSetAside()
        for name in Files.list(store.tmpDir) where !name.hasPrefix("gc-") { Files.remove(store.tmpDir + "/" + name) }
        for name in Files.list(layout.status) where name.hasPrefix(".tmp-") { Files.remove(layout.status + "/" + name) }
        for name in Files.list(layout.exports) where name.hasPrefix(".") && name.contains(".tmp-") {
            Files.removeTree(layout.exports + "/" + name)
        }
    }

    /// Loads every region under `store/regions/`, with the state its status file gives. Regions
    /// that were `queued` or `downloading` are queued again.
    func loadRegions() {
        var loaded: [(Region, Date)] = []
        for id in Files.list(store.regionsDir) where RequestValidator.isValidID(id) {
            let files = RegionFiles(dir: store.regionDir(id))
            guard let request = try? files.loadRequest() else {
                Log.error("\(id): store/regions/\(id)/request.json is missing or invalid; region skipped (delete it to clean up)")
                if let st = status.read(id: id), st.state != .failed || st.error?.code != .storeDamaged {
                    var failed = st
                    failed.state = .failed
                    failed.error = RegionError(code: .storeDamaged, message: "store/regions/\(id)/request.json is missing or invalid; drop the request again, or delete the region")
                    failed.updatedAt = Date()
                    try? status.write(failed)
                    status.event(id: id, state: failed.state.rawValue, error: failed.error)
                }
                continue
            }
            let st = status.read(id: id)
            let state = st?.state ?? .queued
            let r = Region(id: id, request: request, state: state, files: files, arrival: 0)
            r.progress = st?.progress ?? RegionProgress()
            r.error = st?.error
            r.exports = st?.exports
            loaded.append((r, st?.updatedAt ?? Date(timeIntervalSince1970: 0)))
        }
        for (r, _) in loaded.sorted(by: { ($0.1, $0.0.id) < ($1.1, $1.0.id) }) {
            arrivals += 1
            r.arrival = arrivals
            regions[r.id] = r
            if r.state.resumesOnRestart || r.state == .pausedNetwork {
                if r.state != .queued { setState(r, .queued, note: "daemon restarted") } else { writeStatus(r) }
            }
            // Exports cut short by a stop are written again.
            if r.state == .completed && !r.request.exports.isEmpty
                && (r.exports == nil || r.exports!.contains { $0["state"] as? String == "writing" }) {
                startExports(r)
            }
        }
    }

    // MARK: - The event loop

    /// Runs until SIGINT or SIGTERM. Files already in `requests/` and `control/` are handled first.
    public func run() {
        Log.info("watching \(layout.root) (store \(store.root))")
        rescan(layout.requests)
        rescan(layout.control)
        while !stopping {
            schedule()
            http.wait(timeout: nextTimeout(), fds: [watcher.fd, signals.fd])
            if !signals.drain().isEmpty { stopping = true; break }
            for ev in watcher.drain() {
                switch ev {
                case .file(let folder, let name): handleFile(folder: folder, name: name)
                case .rescan(let folder):
                    if let folder { rescan(folder) } else { rescan(layout.requests); rescan(layout.control) }
                }
            }
            for r in http.collect() { handle(r) }
            collectExports()
            writeJournals()
            let now = Daemon.now()
            if pendingCount >= options.syncBatch || (pendingCount > 0 && (now - lastSync >= options.syncInterval || aRegionHasNothingLeftToFetch())) {
                commit()
            }
            for r in live.values where r.statusDirty && now - r.lastStatusWrite >= options.statusInterval { writeStatus(r) }
            if now - lastRescan >= Daemon.rescanInterval {
                lastRescan = now
                try? layout.create()      // a removed folder comes back
                watcher.ensureWatches()   // and is watched again
                rescan(layout.requests)
                rescan(layout.control)
            }
        }
        shutdown()
    }

    /// True when a downloading region waits only for its last objects to be recorded: they are
    /// then synced at once instead of at the next sync interval.
    func aRegionHasNothingLeftToFetch() -> Bool {
        live.values.contains { r in
            guard let d = r.download, let plan = d.plan else { return false }
            return !d.pending.isEmpty && d.inFlight.isEmpty && d.retries.isEmpty && d.cursor >= plan.indexSpace
        }
    }

    func nextTimeout() -> Double {
        let now = Daemon.now()
        var t = 1.0
        if pendingCount > 0 { t = min(t, max(0, lastSync + options.syncInterval - now)) }
        for r in live.values {
            if let d = r.download {
                for x in d.retries { t = min(t, max(0, x.due - now)) }
                if d.holdUntil > now { t = min(t, d.holdUntil - now) }
            }
            if r.state == .pausedNetwork && !r.probing { t = min(t, max(0, r.nextProbe - now)) }
            if r.statusDirty { t = min(t, max(0, r.lastStatusWrite + options.statusInterval - now)) }
        }
        return t
    }

    func shutdown() {
        Log.info("stopping")
        for r in regions.values where r.download != nil {
            stopDownload(r)
            if r.state == .downloading { setState(r, .queued, note: "daemon stopped") }
        }
        commit()
        for r in regions.values where r.statusDirty { writeStatus(r) }
    }

    // MARK: - The watch folder

    /// A regular file found by a rescan (not announced by an inotify event) is read only when no
    /// writer holds it open (a read lease says so); where leases are not available, only once it
    /// has been left unmodified this many seconds.
    static let settleTime = 3.0
    /// Seconds between periodic rescans (events are hints: a missed one, a hard link, a recreated
    /// folder are all found this way).
    static let rescanInterval = 5.0

    /// Handles every file in `folder`, oldest first (so arrival order follows the files' age),
    /// leaving regular files modified in the last `settleTime` seconds for their close event or
    /// the next rescan.
    func rescan(_ folder: String) {
        let now = Date().timeIntervalSince1970
        let names = Files.list(folder).filter { !$0.hasPrefix(".") }
        let dated = names.compactMap { name -> (String, Int)? in
            var st = stat()
            guard lstat(folder + "/" + name, &st) == 0 else { return nil }
            let mtime = Int(st.st_mtim.tv_sec) * 1_000_000_000 + Int(st.st_mtim.tv_nsec)
            if (st.st_mode & S_IFMT) == S_IFREG {
                switch Files.isOpenForWriting(folder + "/" + name) {
                case true?: return nil
                case false?: break
                case nil: if now - Double(mtime) / 1e9 < Daemon.settleTime { return nil }
                }
            }
            return (name, mtime)
        }
        for (name, _) in dated.sorted(by: { ($0.1, $0.0) < ($1.1, $1.0) }) { handleFile(folder: folder, name: name) }
    }

    func handleFile(folder: String, name: String) {
        if name.hasPrefix(".") { return }
        let path = folder + "/" + name
        guard Files.entryType(path) != .missing else { return }
        if folder == layout.requests { handleRequest(path: path, name: name) } else { handleControl(path: path, name: name) }
    }

    /// Moves a refused file to `rejected/` and writes `rejected/<name>.error`.
    func reject(path: String, name: String, reason: String) {
        Log.error("rejected \(name): \(reason)")
        let stored = SpoolLayout.rejectedName(name)
        let dest = layout.rejected + "/" + stored
        Files.remove(dest)
        if (try? Files.rename(path, dest)) == nil { Files.remove(path) }
        let note = stored == name ? "" : "(the file was named \(name.debugDescription))\n"
        try? Files.writeAtomically(Data((reason + "\n" + note).utf8), to: dest + ".error")
    }

    func handleRequest(path: String, name: String) {
        guard name.hasSuffix(".json") else { return }
        var raw: Data?
        var request: RegionRequest
        var tilesPlan: ResourcePlan?
        do {
            guard Files.entryType(path) == .regular else {
                throw RegionError(code: .invalidRequest, message: "the request is not a regular file (symlinks, FIFOs and folders are refused)")
            }
            let data: Data
            do { data = try Files.readRegularFile(path, limit: RequestValidator.maxFileSize) } catch {
                throw RegionError(code: .invalidRequest, message: error.errno == EFBIG
                    ? "the request file is larger than \(RequestValidator.maxFileSize) bytes"
                    : "cannot read the request: \(error.errnoDescription)")
            }
            raw = data
            request = try RequestValidator.validate(data, fileName: name)
            // A tiles request's plan is known now: one over the limit is refused like any bad request.
            if case .tiles(let templates) = request.source {
                let plan = Planner.plan(request: request, templates: templates)
                if let e = RequestValidator.tileLimitError(tiles: plan.tileCount, maxTiles: request.maxTiles, daemonMaxTiles: options.maxTiles) {
                    throw e
                }
                tilesPlan = plan
            }
        } catch let e as RegionError {
            // A region of that id exists: a bad request must not touch it (its status stays).
            guard let id = RequestValidator.statusID(raw, fileName: name), regions[id] == nil else {
                reject(path: path, name: name, reason: "\(e.code.rawValue): \(e.message)")
                return
            }
            let st = RegionStatus(id: id, state: .failed, progress: RegionProgress(), error: e, request: nil, context: NSNull())
            try? status.write(st)
            status.event(id: id, state: RegionState.failed.rawValue, error: e)
            reject(path: path, name: name, reason: "\(e.code.rawValue): \(e.message)")
            return
        } catch {
            reject(path: path, name: name, reason: "\(error)")
            return
        }
        if let existing = regions[request.id], !existing.state.isTerminal {
            reject(path: path, name: name, reason: "duplicateId: region '\(request.id)' is \(existing.state.rawValue); cancel or delete it first")
            return
        }
        accept(request, plan: tilesPlan, path: path, name: name)
    }

    /// Makes a region of a valid request: its files in the store, state `queued`. `plan` is the
    /// exact plan of a `tiles` request (nil for a style, planned once its TileJSON is in).
    func accept(_ request: RegionRequest, plan: ResourcePlan?, path: String, name: String) {
        let files = RegionFiles(dir: store.regionDir(request.id))
        if let old = regions[request.id] { stopDownload(old) }
        arrivals += 1
        let r = Region(id: request.id, request: request, state: .queued, files: files, arrival: arrivals)
        do {
            files.resetDownload()
            try files.create(request: request)
            if let plan { try files.savePlan(plan) }
        } catch {
            // No region without its files: the request is refused like a bad one (drop it again
            // once the store can be written), and nothing half made stays in the store.
            let e = RegionError(code: .storageError, message: "cannot write the region's files: \(error)")
            if regions.removeValue(forKey: request.id) != nil { live.removeValue(forKey: request.id) }
            Files.removeTree(files.dir)
            try? status.write(RegionStatus(id: request.id, state: .failed, progress: RegionProgress(), error: e,
                                           request: request.redactedJSONObject, context: request.context))
            status.event(id: request.id, state: RegionState.failed.rawValue, error: e)
            reject(path: path, name: name, reason: "\(e.code.rawValue): \(e.message)")
            return
        }
        regions[r.id] = r
        if let plan {
            r.progress.resourcesExpected = plan.count
            r.progress.tilesExpected = plan.tileCount
            r.progress.resourcesExpectedIsPrecise = true
        }
        Files.remove(path)
        Log.info("\(r.id): accepted \(name)")
        setState(r, .queued)
    }

    /// The error when `plan` has more tiles than the region's `maxTiles` or the daemon's
    /// `--max-tiles` allow (naming the limit that applies), or nil. A `tiles` request over the
    /// limit is refused on arrival (`handleRequest`); a style's plan is known only in `makePlan`,
    /// and a region resumed after `--max-tiles` was lowered is checked again in `start`.
    func tileLimitError(_ r: Region, _ plan: ResourcePlan) -> RegionError? {
        RequestValidator.tileLimitError(tiles: plan.tileCount, maxTiles: r.request.maxTiles, daemonMaxTiles: options.maxTiles)
    }

    func handleControl(path: String, name: String) {
        guard let dot = name.lastIndex(of: ".") else {
            reject(path: path, name: name, reason: "a control file is named <id>.<action> (pause, resume, cancel, delete)")
            return
        }
        let id = String(name[..<dot])
        guard let action = RegionAction(rawValue: String(name[name.index(after: dot)...])) else {
            reject(path: path, name: name, reason: "unknown action '\(name[name.index(after: dot)...])'; use pause, resume, cancel or delete")
            return
        }
        guard Files.entryType(path) == .regular else {
            reject(path: path, name: name, reason: "the control file is not a regular file")
            return
        }
        guard let r = regions[id] else {
            if action == .delete, status.read(id: id) != nil || Files.entryType(store.regionDir(id)) == .directory {
                Files.remove(path)
                Files.removeTree(store.regionDir(id))
                status.remove(id: id)
                status.event(id: id, state: "deleted", error: nil, extra: ["action": "delete"])
                Log.info("\(id): deleted (status only)")
                return
            }
            reject(path: path, name: name, reason: "no region with id '\(id)'")
            return
        }
        Files.remove(path)
        apply(action, to: r)
    }

    /// Applies a user action through the state machine.
    func apply(_ action: RegionAction, to r: Region) {
        switch RegionStateMachine.apply(action, to: r.state) {
        case .ignored(let why):
            Log.info("\(r.id): \(action.rawValue) ignored: \(why)")
            status.event(id: r.id, state: r.state.rawValue, error: r.error, extra: ["action": action.rawValue, "ignored": why])
        case .delete:
            stopDownload(r, commitPending: false)
            regions.removeValue(forKey: r.id)
            live.removeValue(forKey: r.id)
            Files.removeTree(r.files.dir)
            status.remove(id: r.id)
            status.event(id: r.id, state: "deleted", error: nil, extra: ["action": "delete"])
            Log.info("\(r.id): deleted")
        case .to(let next):
            stopDownload(r)
            if next == .queued { r.error = nil; r.probeURL = nil }
            setState(r, next, note: action.rawValue)
        }
    }

    // MARK: - State and status

    /// Changes a region's state, writes its status at once, and appends to events.jsonl.
    func setState(_ r: Region, _ next: RegionState, note: String? = nil) {
        r.state = next
        // The event first: whoever sees the new state in the status file finds its event too.
        status.event(id: r.id, state: next.rawValue, error: r.error, extra: note.map { ["note": $0] } ?? [:])
        writeStatus(r)
        Log.info("\(r.id): \(next.rawValue)" + (r.error.map { " (\($0.code.rawValue): \($0.message))" } ?? ""))
    }

    func writeStatus(_ r: Region) {
        var st = RegionStatus(id: r.id, state: r.state, progress: r.progress, error: r.error,
                              request: r.request.redactedJSONObject, context: r.request.context)
        st.exports = r.exports
        do { try status.write(st) } catch { Log.error("\(r.id): cannot write status: \(error)") }
        r.statusDirty = false
        r.lastStatusWrite = Daemon.now()
        updateLive(r)
    }

    /// Keeps `live` in step with a region's state (call after any state change or removal).
    func updateLive(_ r: Region) {
        let isLive = regions[r.id] === r && (r.state == .queued || r.state == .downloading || r.state == .pausedNetwork
            || r.statusDirty || r.download != nil)
        if isLive { live[r.id] = r } else { live.removeValue(forKey: r.id) }
    }

    func fail(_ r: Region, _ e: RegionError) {
        guard case .to(let next) = RegionStateMachine.apply(.fail, to: r.state) else { return }
        stopDownload(r)
        r.error = e
        setState(r, next)
    }

    // MARK: - Scheduling

    func schedule() {
        let now = Daemon.now()
        var active = live.values.filter { $0.state == .downloading }.count
        if active < options.maxActiveRegions {
            for r in live.values.filter({ $0.state == .queued }).sorted(by: { $0.arrival < $1.arrival }) {
                guard active < options.maxActiveRegions else { break }
                start(r)
                if r.state == .downloading { active += 1 }
            }
        }
        for r in Array(live.values) {
            if r.state == .downloading, let d = r.download { fill(r, d, now: now) }
            if r.state == .pausedNetwork, !r.probing, let url = r.probeURL, now >= r.nextProbe {
                r.probing = true
                let tag = nextTag; nextTag += 1
                transfers[tag] = (r.id, nil)
                http.start(url: url, tag: tag)
            }
        }
    }

    /// Starts (or resumes) a queued region: reads its plan and manifest back, so nothing already
    /// recorded is fetched again and progress starts from the stored counts.
    func start(_ r: Region) {
        let d = Download()
        r.download = d
        r.error = nil
        if case .style(let url) = r.request.source { d.styleURL = url }
        var lines: [ManifestLine] = []
        var journalError: Error?
        var savedPlan = r.files.loadPlan()
        if savedPlan == nil, case .tiles(let templates) = r.request.source {
            // A tiles plan needs no document: made again (plan.json lost to a power cut, say).
            let plan = Planner.plan(request: r.request, templates: templates)
            try? r.files.savePlan(plan)
            savedPlan = plan
        }
        if let plan = savedPlan {
            d.plan = plan
            d.done = Bitmap(count: plan.indexSpace)
            var p = RegionProgress()
            p.resourcesExpected = plan.count
            p.tilesExpected = plan.tileCount
            p.resourcesExpectedIsPrecise = true
            r.files.readManifest(cutPartialLine: true) { line in
                guard let i = plan.index(kind: line.kind, key: line.key), !d.done[i] else { return }
                d.done[i] = true
                count(line, into: &p)
            }
            r.progress = p
            journalError = recoverJournal(r, d, plan)
        } else {
            r.files.readManifest(cutPartialLine: true) { lines.append($0) }
            var p = RegionProgress()
            // Each document once (a style fetched again after a crash has two lines): the recount
            // once the plan exists must not come out lower.
            var seen = Set<String>()
            for l in lines where (l.kind == .style || l.kind == .source) && seen.insert("\(l.kind.rawValue)\t\(l.key)").inserted {
                count(l, into: &p)
            }
            p.resourcesExpected = max(p.resourcesExpected, 1) // at least the style
            r.progress = p
        }
        switch RegionStateMachine.apply(.start, to: r.state) {
        case .to(let next): setState(r, next)
        default: return
        }
        if let journalError { storageFailed(r, journalError, commitPending: false); return }
        if d.plan == nil { resumePrePlan(r, d, lines: lines) }
        if let plan = d.plan, r.state == .downloading {
            if let e = tileLimitError(r, plan) { fail(r, e); return }
            finishIfDone(r, d)
        }
    }

    func count(_ line: ManifestLine, into p: inout RegionProgress) {
        p.resourcesCompleted += 1
        p.bytesCompleted += line.bytes
        if line.kind == .tile { p.tilesCompleted += 1; p.tileBytesCompleted += line.bytes }
        if line.kind != .tile && line.sha256 == nil { p.resourcesMissing += 1 }
    }

    /// Before the plan exists: works out which of the style and TileJSON documents are still
    /// needed, using the copies already in the store.
    func resumePrePlan(_ r: Region, _ d: Download, lines: [ManifestLine]) {
        for l in lines {
            guard let sha = l.sha256, let data = try? store.read(sha) else { continue }
            if l.kind == .style, d.style == nil {
                d.style = try? StyleDocument(data: data, baseURL: d.styleURL)
            }
        }
        guard let style = d.style else { d.needed = [.style]; r.progress.resourcesExpected = max(r.progress.resourcesExpected, 1); return }
        let urls = Planner.tileJSONURLs(style)
        for l in lines where l.kind == .source {
            guard let sha = l.sha256, let data = try? store.read(sha),
                  let u = urls.first(where: { $0.source == l.key }) else { continue }
            d.tileJSONs[l.key] = try? TileJSON(data: data, baseURL: u.url)
        }
        d.needed = urls.filter { d.tileJSONs[$0.source] == nil }.map { .tileJSON($0.source) }
        r.progress.resourcesExpected = max(r.progress.resourcesExpected, 1 + urls.count)
        if d.needed.isEmpty { makePlan(r, d) }
    }

    /// Builds and saves the exact plan once the style and every TileJSON are known.
    func makePlan(_ r: Region, _ d: Download) {
        guard let style = d.style else { return }
        let plan = Planner.plan(request: r.request, styleURL: d.styleURL, style: style, tileJSONs: d.tileJSONs)
        if let e = tileLimitError(r, plan) {
            // Known only now for a style: the request is refused like a bad file, as a copy of the
            // accepted request in rejected/ (the region stays, so a resume can retry it).
            if let data = try? Files.readRegularFile(r.files.requestPath, limit: RequestValidator.maxFileSize) {
                try? Files.writeAtomically(data, to: "\(layout.rejected)/\(r.id).json")
                try? Files.writeAtomically(Data("\(e.code.rawValue): \(e.message)\n".utf8), to: "\(layout.rejected)/\(r.id).json.error")
            }
            fail(r, e)
            return
        }
        do { try r.files.savePlan(plan) } catch { storageFailed(r, error); return }
        d.plan = plan
        d.done = Bitmap(count: plan.indexSpace)
        var p = RegionProgress()
        r.files.readManifest(cutPartialLine: true) { line in
            guard let i = plan.index(kind: line.kind, key: line.key), !d.done[i] else { return }
            d.done[i] = true
            count(line, into: &p)
        }
        p.resourcesExpected = plan.count
        p.tilesExpected = plan.tileCount
        p.resourcesExpectedIsPrecise = true
        r.progress = p
        r.statusDirty = true
        Log.info("\(r.id): planned \(plan.count) resources (\(plan.tileCount) tiles)")
        finishIfDone(r, d)
    }

    /// Issues requests for a downloading region up to its limit.
    func fill(_ r: Region, _ d: Download, now: Double) {
        guard now >= d.holdUntil else { return }
        // Retries that are due.
        if !d.retries.isEmpty {
            var keep: [(due: Double, item: WorkItem)] = []
            for x in d.retries {
                if x.due <= now && d.inFlight.count < options.maxRequestsPerRegion { issue(r, d, x.item) } else { keep.append(x) }
            }
            d.retries = keep
        }
        guard let plan = d.plan else {
            while d.inFlight.count < options.maxRequestsPerRegion, let item = d.needed.first {
                d.needed.removeFirst()
                issue(r, d, item)
            }
            return
        }
        while d.inFlight.count < options.maxRequestsPerRegion && d.cursor < plan.indexSpace {
            let i = d.cursor
            if d.done[i] || !d.isPlanned(i, plan) { d.cursor += 1; continue }
            // Phases run in order: no tile before every other resource is finished.
            if i >= plan.resources.count && (d.nonTileInFlight > 0 || d.retries.contains(where: { if case .index(let j) = $0.item { return j < plan.resources.count }; return false })) {
                break
            }
            d.cursor += 1
            issue(r, d, .index(i))
        }
    }

    /// What a work item fetches and how the manifest names it, from one look-up in the plan.
    func describe(_ item: WorkItem, _ d: Download) -> (url: String, kind: ResourceKind, key: String) {
        switch item {
        case .style: return (d.styleURL, .style, "style")
        case .tileJSON(let name):
            return (d.style?.sources.first { $0.name == name }?.tileJSONURL ?? "", .source, ManifestLine.sanitizeKey(name))
        case .index(let i):
            switch d.plan!.item(at: i) {
            case .resource(let res): return (res.url, res.kind, res.key)
            case .tile(let s, let t):
                let set = d.plan!.tileSets[s]
                return (set.template.url(for: t), .tile, ManifestLine.tileKey(source: set.source, t))
            }
        }
    }

    func issue(_ r: Region, _ d: Download, _ item: WorkItem) {
        let tag = nextTag; nextTag += 1
        let (url, kind, key) = describe(item, d)
        d.inFlight[tag] = Fetch(item: item, url: url, kind: kind, key: key)
        if kind != .tile { d.nonTileInFlight += 1 }
        transfers[tag] = (r.id, item)
        http.start(url: url, tag: tag)
    }

    /// Stops a region's transfers; by default objects already written enter the manifest first.
    func stopDownload(_ r: Region, commitPending: Bool = true) {
        if r.probing {
            for (tag, v) in transfers where v.0 == r.id && v.1 == nil { http.cancel(tag: tag); transfers.removeValue(forKey: tag) }
            r.probing = false
        }
        guard let d = r.download else { return }
        for tag in d.inFlight.keys { http.cancel(tag: tag); transfers.removeValue(forKey: tag) }
        d.inFlight.removeAll()
        if commitPending { commit() } else { pendingCount -= d.pending.count; d.pending.removeAll() }
        r.download = nil
        r.files.closeManifest()
    }

    // MARK: - Results

    func handle(_ res: TransferResult) {
        guard let (id, item) = transfers.removeValue(forKey: res.tag), let r = regions[id] else { return }
        guard let item else { probeAnswered(r, res); return }
        guard let d = r.download, let fetch = d.inFlight.removeValue(forKey: res.tag) else { return }
        let (url, kind, key) = (fetch.url, fetch.kind, fetch.key)
        if kind != .tile { d.nonTileInFlight -= 1 }

        if let f = res.failure {
            switch f {
            case .refused(let why):
                fail(r, RegionError(code: .httpError, message: "\(why) (\(Redaction.redact(url)))", url: url))
            case .network(let why):
                retry(r, d, item, after: nil, exhausted: {
                    self.networkLost(r, url: url, why: why)
                })
            case .badResponse(let why):
                Log.error("\(r.id): \(Redaction.redact(url)): \(why)")
                retry(r, d, item, after: nil, exhausted: {
                    self.fail(r, RegionError(code: .badResponse, message: "\(why) (\(Redaction.redact(url)))", url: url))
                })
            }
            return
        }
        let s = res.status
        if s == 429 || s >= 500 {
            if let ra = res.retryAfter { d.holdUntil = max(d.holdUntil, Daemon.now() + min(ra, 300)) }
            retry(r, d, item, after: res.retryAfter, exhausted: {
                self.fail(r, RegionError(code: .httpError, message: "HTTP \(s) from \(Redaction.redact(url))", url: url, httpStatus: s))
            })
            return
        }
        let empty = kind == .tile && (s == 204 || s == 404)
        let missing = kind.missingIsAllowed && s == 404
        if !(200...299).contains(s) && !empty && !missing {
            fail(r, RegionError(code: .httpError, message: "HTTP \(s) from \(Redaction.redact(url))", url: url, httpStatus: s))
            return
        }
        d.attempts.removeValue(forKey: item)
        var sha: String?
        if !empty && !missing {
            do { sha = try store.put(res.body).sha256 } catch { storageFailed(r, error); return }
        }
        let line = ManifestLine(kind: kind, sha256: sha, bytes: sha == nil ? 0 : res.body.count, key: key, url: url)

        switch item {
        case .style:
            do { d.style = try StyleDocument(data: res.body, baseURL: url) } catch { fail(r, error); return }
            d.needed = Planner.tileJSONURLs(d.style!).map { .tileJSON($0.source) }
            commitNow(r, d, item, line)
            guard r.download === d else { return } // the commit failed the region
            r.progress.resourcesExpected = max(r.progress.resourcesExpected, 1 + d.needed.count)
            if d.needed.isEmpty { makePlan(r, d) }
        case .tileJSON(let name):
            do { d.tileJSONs[name] = try TileJSON(data: res.body, baseURL: url) } catch { fail(r, error); return }
            commitNow(r, d, item, line)
            guard r.download === d else { return }
            if d.inFlight.isEmpty && d.needed.isEmpty && d.retries.isEmpty { makePlan(r, d) }
        case .index:
            d.pending.append((item, line))
            d.journalBuffer.append(line)
            pendingCount += 1
        }
    }

    /// Appends the lines of objects written in this loop iteration to each region's journal, so
    /// that a `kill -9` before the next sync loses no downloaded object.
    func writeJournals() {
        for r in Array(live.values) {
            guard let d = r.download, !d.journalBuffer.isEmpty else { continue }
            do { try r.files.appendToJournal(d.journalBuffer) } catch { storageFailed(r, error); continue }
            d.journalBuffer.removeAll(keepingCapacity: true)
        }
    }

    /// After a crash: promotes journal lines whose objects are intact (they hash to their names)
    /// into the manifest, after a sync, and counts them. Lines naming lost objects are dropped.
    /// - Returns: the error when the recovered lines could not be recorded (the region then goes
    ///   to failedStorage; the journal is kept for the next try).
    func recoverJournal(_ r: Region, _ d: Download, _ plan: ResourcePlan) -> Error? {
        var recovered: [(Int, ManifestLine)] = []
        var seen = Set<Int>()
        r.files.readJournal(cutPartialLine: true) { line in
            guard let i = plan.index(kind: line.kind, key: line.key), !d.done[i], !seen.contains(i) else { return }
            if let sha = line.sha256, SHA256.hex(file: store.objectPath(sha)) != sha { return }
            seen.insert(i)
            recovered.append((i, line))
        }
        if !recovered.isEmpty {
            do {
                try store.sync()
                try r.files.appendToManifest(recovered.map(\.1))
            } catch {
                Log.error("\(r.id): cannot recover the journal: \(error)")
                return error
            }
            for (i, l) in recovered { d.done[i] = true; count(l, into: &r.progress) }
            Log.info("\(r.id): recovered \(recovered.count) resources from the journal")
        }
        r.files.clearJournal()
        return nil
    }

    /// Schedules another attempt with capped exponential backoff (or the server's Retry-After), or
    /// calls `exhausted` when the attempts are used up.
    func retry(_ r: Region, _ d: Download, _ item: WorkItem, after: Double?, exhausted: () -> Void) {
        let n = (d.attempts[item] ?? 0) + 1
        d.attempts[item] = n
        if n > options.maxRetries { exhausted(); return }
        let backoff = min(options.retryDelay * pow(2, Double(n - 1)), options.maxRetryDelay)
        let delay = max(after.map { min($0, 300) } ?? 0, backoff * Double.random(in: 0.75...1.0))
        d.retries.append((Daemon.now() + delay, item))
    }

    func networkLost(_ r: Region, url: String, why: String) {
        stopDownload(r)
        r.error = RegionError(code: .networkError, message: "\(why) (\(Redaction.redact(url)))", url: url)
        r.probeURL = url
        r.probeGap = max(0.5, min(options.retryDelay, options.maxProbeInterval))
        r.nextProbe = Daemon.now() + r.probeGap
        switch RegionStateMachine.apply(.networkLost, to: r.state) {
        case .to(let next): setState(r, next)
        default: break
        }
    }

    func probeAnswered(_ r: Region, _ res: TransferResult) {
        r.probing = false
        guard r.state == .pausedNetwork else { return }
        if case .network = res.failure {
            r.probeGap = max(0.5, min(r.probeGap * 2, options.maxProbeInterval))
            r.nextProbe = Daemon.now() + r.probeGap
            return
        }
        r.error = nil
        r.probeURL = nil
        switch RegionStateMachine.apply(.networkBack, to: r.state) {
        case .to(let next): setState(r, next, note: "server answers again")
        default: break
        }
    }

    /// A write to the store or the region's files failed: ENOSPC, EDQUOT, EROFS, EIO and EFBIG make
    /// the region `failedStorage` (resume once space is freed); any other error makes it `failed`
    /// with code `storageError`. Objects already written enter the manifest first when
    /// `commitPending` (not when the sync itself failed).
    func storageFailed(_ r: Region, _ error: Error, commitPending: Bool = true) {
        guard r.state == .downloading else { return }
        let sys = error as? SystemError
        stopDownload(r, commitPending: commitPending)
        r.error = RegionError(code: .storageError, message: sys?.description ?? "\(error)")
        switch RegionStateMachine.apply(sys?.isStorageFailure == true ? .storageFailed : .fail, to: r.state) {
        case .to(let next): setState(r, next)
        default: break
        }
    }

    /// Makes one pre-plan document durable and records it at once.
    func commitNow(_ r: Region, _ d: Download, _ item: WorkItem, _ line: ManifestLine) {
        d.pending.append((item, line))
        pendingCount += 1
        commit()
    }

    /// The durability step: sync the store, then append the waiting lines to each region's
    /// manifest, then count them in the progress. A crash before the manifest write loses only
    /// work that was never reported.
    func commit() {
        lastSync = Daemon.now()
        guard pendingCount > 0 else { return }
        do { try store.sync() } catch {
            // Nothing waiting can be recorded: drop it (the journal keeps it for a restart to check).
            for r in Array(live.values) {
                guard let d = r.download, !d.pending.isEmpty else { continue }
                pendingCount -= d.pending.count
                d.pending.removeAll()
                d.journalBuffer.removeAll()
                storageFailed(r, error, commitPending: false)
            }
            pendingCount = 0
            return
        }
        pendingCount = 0
        for r in Array(live.values) {
            guard let d = r.download, !d.pending.isEmpty else { continue }
            let batch = d.pending
            d.pending.removeAll(keepingCapacity: true)
            d.journalBuffer.removeAll(keepingCapacity: true)
            do { try r.files.appendToManifest(batch.map(\.line)) } catch {
                storageFailed(r, error); continue
            }
            r.files.clearJournal()
            for (item, line) in batch {
                if case .index(let i) = item { d.done[i] = true }
                count(line, into: &r.progress)
            }
            r.statusDirty = true
            finishIfDone(r, d)
        }
    }

    func finishIfDone(_ r: Region, _ d: Download) {
        guard let plan = d.plan, r.state == .downloading, d.inFlight.isEmpty, d.pending.isEmpty, d.retries.isEmpty else { return }
        guard r.progress.resourcesCompleted >= plan.count else { return }
        r.download = nil
        r.files.closeManifest()
        if case .to(let next) = RegionStateMachine.apply(.finish, to: r.state) {
            setState(r, next)
            if next == .completed && !r.request.exports.isEmpty { startExports(r) }
        }
    }
}
