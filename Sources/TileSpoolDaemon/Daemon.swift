// The daemon's event loop: one thread polling libcurl's multi handle, the inotify fd, a
// signalfd and the durability writer's eventfd, and calling in turn the intake (Intake.swift), the scheduler (Scheduler.swift), each
// region's download (RegionDownload.swift), the durability step (Durability.swift) and the
// exports (Exports.swift). It is also the one place that changes a region's state and writes
// its status.
import Foundation
import Glibc
import TileSpoolCore
import TileSpoolIO
import TileSpoolExport

/// Settings of the daemon (the options of `tilespool run`). Times in seconds.
public struct DaemonOptions: Sendable {
    public var spool: String
    /// `--store`: a folder, or `s3://BUCKET[/PREFIX]` (docs/s3.md).
    public var store: String
    /// `--s3-endpoint` (else `AWS_ENDPOINT_URL`) and `--s3-addressing` (path-style by default)
    /// for an S3 store; credentials come from the environment only.
    public var s3Endpoint: String?
    public var s3PathStyle = true
    /// Regions downloading at once; the rest wait as `queued` in arrival order.
    public var maxActiveRegions = 2
    /// Requests in flight for one region.
    public var maxRequestsPerRegion = 8
    /// The largest plan accepted, in tiles (a request's `maxTiles` can only lower it).
    public var maxTiles = DaemonOptions.defaultMaxTiles
    /// The default of `maxTiles` (`--max-tiles`), also `tilespool plan`'s.
    public static let defaultMaxTiles = 1_000_000
    /// Attempts after the first for a transient failure (5xx, 429, network, damaged body).
    public var maxRetries = 5
    /// First retry delay; doubles each attempt up to `maxRetryDelay`.
    public var retryDelay = 1.0
    public var maxRetryDelay = 30.0
    /// Longest gap between two probes of a server while a region is `pausedNetwork`.
    public var maxProbeInterval = 60.0
    /// Objects are made durable and recorded in the manifest at most this long (seconds) after
    /// the oldest of them was downloaded, or once `syncBatch` objects wait, whichever comes first.
    public var syncInterval = 1.0
    public var syncBatch = 4096
    /// Seconds between periodic rescans of `requests/` and `control/` (`--rescan-interval`):
    /// inotify events are hints, a rescan finds what none announced (a hard link, a folder made
    /// again).
    public var rescanInterval = 5.0
    /// Seconds a regular file found by a rescan must have gone unmodified before it is read,
    /// where a read lease cannot tell whether a writer holds it open, and before a misnamed file
    /// is moved to `rejected/` (`--settle-time`).
    public var settleTime = 3.0
    /// Status files of a downloading region are rewritten at most this often.
    public var statusInterval = 1.0
    /// Completed regions are refreshed by themselves this many seconds after their manifest was
    /// last written (download or refresh), checking resources at least that old; nil: never. A
    /// request's `refreshAfter` wins over it.
    public var refreshInterval: Double?
    public var http = HTTPOptions()
    /// `--metrics-file`: the Prometheus text file written every `metricsInterval` seconds (nil: none).
    public var metricsFile: String?
    public var metricsInterval = 5.0
    /// `--on-state-change`: an executable run on every state change (nil: none), killed after
    /// `hookTimeout` seconds.
    public var onStateChange: String?
    public var hookTimeout = 30.0
    /// `--max-store-bytes`: the store quota (nil: none).
    public var maxStoreBytes: Int?
    /// `--events-max-bytes` (0: never rotate) and `--events-keep`.
    public var eventsMaxBytes = 64 << 20
    public var eventsKeep = 5
    /// Hosts (lower-case) exempt from `TileUsagePolicy` (`--allow-host`, repeatable).
    public var allowedHosts: Set<String> = []
    /// `--max-requests-per-second-per-host` and `--max-bytes-per-second` (the buckets start empty).
    public var rateLimits = RateLimiter()
    /// A foreground run for one region (`tilespool get`): when set, only this region is loaded
    /// from the store, and only `requests/<id>.json` and `control/<id>.<action>` are read; every
    /// other region of the store and every other file in the spool is left alone (nil: all).
    public var onlyRegion: String?
    /// The PMTiles archives `tilespool get` read for its check, taken once in place of reading
    /// them again when the daemon plans that very request (nil: none).
    public var archivesRead: ArchivesRead?
    public init(spool: String, store: String) { self.spool = spool; self.store = store }
}

/// PMTiles archives read before the daemon runs (`tilespool get`'s check): the region's id and
/// request, the archive sources they were read for (`Planner.archiveSources`: name, URL, style
/// source), the limits they were planned under (`--max-tiles`, `--max-object-size` in bytes),
/// and the readings by source name. The daemon plans from them instead of reading each header
/// and directory a second time when the same region starts with the same request, sources and
/// limits, and not as a refresh (round 28 counted 22 leaf directories read twice on a 26 MB archive).
public struct ArchivesRead: Sendable {
    public var id: String
    public var request: RegionRequest
    public var sources: [(source: String, url: String, styleSource: StyleSource?)]
    public var maxTiles: Int
    public var maxObjectSize: Int
    public var readings: [String: PMTilesRemote.Reading]
    /// These readings without the whole archives a server that ignores Range sent
    /// (`PMTilesRemote.Reading.wholeFile`), for a holder that needs only what was planned.
    public var withoutWholeFiles: ArchivesRead {
        var copy = self
        for k in copy.readings.keys { copy.readings[k]?.wholeFile = nil }
        return copy
    }
    public init(id: String, request: RegionRequest, sources: [(source: String, url: String, styleSource: StyleSource?)],
                maxTiles: Int, maxObjectSize: Int, readings: [String: PMTilesRemote.Reading]) {
        self.id = id; self.request = request; self.sources = sources
        self.maxTiles = maxTiles; self.maxObjectSize = maxObjectSize; self.readings = readings
    }

    /// True when these readings are what reading `request`'s archives (for `sources`) under
    /// those limits would give: the same request, sources and limits.
    func serves(id: String, request: RegionRequest, sources: [(source: String, url: String, styleSource: StyleSource?)],
                maxTiles: Int, maxObjectSize: Int) -> Bool {
        id == self.id && request == self.request && maxTiles == self.maxTiles && maxObjectSize == self.maxObjectSize
            && sources.count == self.sources.count
            && zip(sources, self.sources).allSatisfy { $0.source == $1.source && $0.url == $1.url && $0.styleSource == $1.styleSource }
    }
}

/// The daemon: one event loop over libcurl's multi handle, the inotify fd, a signalfd and the
/// durability writer's eventfd (the writer thread runs the commits' syncs). Plans are values from `TileSpoolCore`; this class executes them and is the only
/// place that changes a region's state (through `RegionStateMachine`).
public final class Daemon {
    let options: DaemonOptions
    let layout: SpoolLayout
    let store: any TileStore
    let status: StatusWriter
    let http: HTTPClient
    let watcher: FolderWatcher
    let signals: SignalFD
    let lock: SpoolLock
    /// One daemon per disk store too (an S3 store is shared: no lock).
    let storeLock: SpoolLock?
    var regions: [String: Region] = [:]
    /// The regions the event loop looks at each turn: queued, downloading, pausedNetwork, or with
    /// a status still to write. Finished regions stay out of the hot path however many there are.
    var live: [String: Region] = [:]
    var arrivals = 0
    var nextTag = 1
    /// The range budget of the scheduler's current pass (`schedule`, `fillRanges`): made when the
    /// first region of the pass asks for a range, nil between passes.
    var rangeBudget: RangeBudget?
    /// Range answers still being cut on `cutQueue` for downloads stopped since (pause, cancel,
    /// delete, a failure): their bytes, by (region, `Download.serial`, range), until their cut
    /// is collected (`collectRangeCuts`); they count in `rangeBytesHeld`.
    var strayCuts: [StrayCut: UInt64] = [:]
    /// tag -> (region id, item); probes use item nil.
    var transfers: [Int: (String, WorkItem?)] = [:]
    /// When the oldest line waiting for a commit was added (`pendingCount` going from 0 to 1):
    /// a commit is due `syncInterval` after it, so no line waits longer, and a region that starts
    /// after an idle spell does not commit its first line alone.
    var firstPendingAt = 0.0
    var lastRescan = Daemon.now()
    var pendingCount = 0
    /// Completed regions whose manifest the next commit job joins into one piece (S3).
    var compactionsWanted: [(id: String, files: any RegionStorage)] = []
    var stopping = false
    /// This daemon's lease on a store several daemons write (`TileStore.renewLease`): its id, when
    /// it was last saved and when to save it next (`Daemon.now()`), and whether a short-grace gc or
    /// a repair was under way when it was saved (its `locks/gc-*.lock`: regions wait for it).
    let leaseID = Repository.newLeaseID(kind: "daemon")
    var leaseSaved = -Double.infinity, leaseNextSave = -Double.infinity
    var gcUnderWay = false
    private var leaseWarned = -Double.infinity
    /// Exports run here, one at a time, off the event loop (Exports.swift).
    let exportQueue = DispatchQueue(label: "tilespool.exports", qos: .utility)
    let exportMailbox = ExportMailbox()
    /// Reads of PMTiles directories, made off the loop (`startArchiveReads`), and their results.
    let archiveQueue = DispatchQueue(label: "tilespool.archives", attributes: .concurrent)
    let archiveMailbox = Mailbox<ArchiveReadResult>()
    /// Regions whose directory read is under way: at most one each, whatever pauses and resumes
    /// happen meanwhile (attack round 9: each resume started another on a hanging server).
    var archiveReadsRunning: Set<String> = []
    /// The HTTP client of each directory read under way, by region: a region that stops
    /// (paused, cancelled, deleted, the daemon stopping) abandons its read (`HTTPClient.abandon`),
    /// so that a stalled server does not hold it until `--low-speed-time`.
    var archiveReadClients: [String: HTTPClient] = [:]
    /// `DaemonOptions.archivesRead`, until taken (once).
    var archivesRead: ArchivesRead?
    /// Plans made off the loop, one at a time (a style's and a `tiles` request's with PMTiles
    /// archives in `makePlan`, a `tiles` request's on arrival in `planOnArrival`), and the
    /// regions' results: planning a shape or corridor near the budgets takes seconds, during
    /// which the loop answers control files, SIGTERM and the other regions.
    let planQueue = DispatchQueue(label: "tilespool.plans")
    let planMailbox = Mailbox<PlanResult>()
    /// The `tiles` request whose plan is being made off the loop before it is taken
    /// (`planOnArrival`), and the plans made for it.
    var arriving: Arrival?
    /// Files met while `arriving` is planned and held for after its decision, in the order met
    /// (`hold`).
    var heldFiles: [(folder: String, name: String, id: String?)] = []
    /// `folder/name` of each file in `heldFiles`, so that one is held once; the ids the held
    /// request files name, with how many name each (`controlWaits`).
    var heldNames: Set<String> = []
    var heldIDs: [String: Int] = [:]
    let arrivalMailbox = Mailbox<ArrivalPlan>()
    /// Range answers being cut into tiles, hashed and stored off the loop (`handleRange`), one
    /// at a time in arrival order, and their results.
    let cutQueue = DispatchQueue(label: "tilespool.range-cuts")
    let cutMailbox = Mailbox<RangeCut>()
    var exportGeneration = 0
    /// Metrics, hooks and background scans (Operations.swift).
    let ops = Operations()
    /// The durability writer thread (Durability.swift) and the batch it is working on, if any.
    let writer: DurabilityWriter
    var commitInFlight: CommitInFlight?
    /// The request and byte buckets shared by every region (RateLimit.swift); `lastHost` caches
    /// whether the last host asked about is outside every limit (the hot path's fast answer).
    var limiter: RateLimiter
    var lastHost: (host: Substring, unlimited: Bool) = ("", false)

    /// Opens the spool and store, takes the spool lock, and loads the regions already known.
    /// - Throws: `SystemError` when the lock is held (EWOULDBLOCK) or a folder cannot be made.
    public init(options: DaemonOptions) throws {
        // Held once, here, until taken: a whole archive a Range-ignoring server sent may be in it.
        var kept = options
        kept.archivesRead = nil
        self.options = kept
        archivesRead = options.archivesRead
        limiter = options.rateLimits
        layout = SpoolLayout(root: options.spool)
        try layout.create()
        lock = try SpoolLock(path: layout.lock)
        store = try StoreSpec.open(options.store, endpoint: options.s3Endpoint, pathStyle: options.s3PathStyle,
                                   scratch: layout.root + "/scratch")
        // --spool X --store X: one lock file, taken once (a second flock of it here would fail).
        storeLock = try store.lockPath.flatMap { [lock] in SpoolLock.sameFile($0, lock.path) ? nil : try SpoolLock(path: $0) }
        status = StatusWriter(layout: layout)
        watcher = try FolderWatcher()
        signals = try SignalFD()
        // The tile usage policy holds for redirects too, with the same --allow-host exemptions.
        var httpOptions = options.http
        httpOptions.allowedHosts.formUnion(options.allowedHosts)
        http = HTTPClient(options: httpOptions)
        writer = try DurabilityWriter(store: store)
        try watcher.watch(layout.requests)
        try watcher.watch(layout.control)
        status.eventsMaxBytes = options.eventsMaxBytes
        status.eventsKeep = options.eventsKeep
        store.maxBytes = options.maxStoreBytes
        Daemon.raiseOpenFileLimit()
        cleanTemporaryFiles()
        if options.maxStoreBytes != nil || options.metricsFile != nil {
            // Once, before the first download, so the quota holds from the first object.
            if let measured = store.measureUsage() { store.setUsage(measured, addedAtStart: store.added) }
            ops.lastStoreMeasure = Daemon.now()
        }
        loadRegions()
    }

    static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    /// Raises the soft limit on open files to the hard one (at most 1,048,576): each region's
    /// folder is held open by descriptor (`RegionFiles`), so a spool of many regions needs more
    /// than the usual soft limit of 1,024 beside its transfers.
    static func raiseOpenFileLimit() {
        var rl = rlimit()
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        guard getrlimit(resource, &rl) == 0 else { return }
        let want = min(rl.rlim_max, 1 << 20)
        guard rl.rlim_cur < want else { return }
        rl.rlim_cur = want
        _ = setrlimit(resource, &rl)
    }

    /// Removes temp files a previous run left in the store (no other process writes there).
    func cleanTemporaryFiles() {
        store.recoverLeftovers()
        for name in Files.list(layout.status) where name.hasPrefix(".tmp-") { Files.remove(layout.status + "/" + name) }
        // Work folders of exports a stop or a kill cut short (`.<name>.tmp-<pid>-<n>`), by the
        // CLI's own rule: only those whose process is gone (a CLI export may be running).
        if let exports = try? Directory(path: layout.exports, followFinal: false) {
            Exporter.removeAbandonedWorkFolders(in: exports)
        }
    }

    /// Loads every region under `store/regions/`, with the state its status file gives. Regions
    /// that were `queued` or `downloading` are queued again.
    func loadRegions() {
        var loaded: [(region: Region, updatedAt: Date, refreshing: Bool, noStatus: Bool)] = []
        let ids: [String]
        do { ids = try store.regionIDs() } catch {
            Log.error("cannot list the regions of the store \(store.location): \(error)")
            ids = []
        }
        // A shared store (S3) holds other daemons' regions too: this one resumes those its spool
        // took (a refused request's status, which names no request, is not one: attack round 53).
        for id in ids where RequestValidator.isValidID(id) && (!store.isShared || status.read(id: id)?.namesItsRequest == true)
            && (options.onlyRegion == nil || options.onlyRegion == id) {
            let files = store.region(id)
            // A symlink (or anything but a folder) at store/regions/<id> was not made by us: it is
            // never followed, so nothing is read from or written into where it points.
            // A region skipped so is marked `failed` (`storeDamaged`) once, with `message`.
            func markSkipped(_ message: String) {
                guard var failed = status.read(id: id), !failed.isMarkedStoreDamaged else { return }
                failed.state = .failed
                failed.error = RegionError(code: .storeDamaged, message: message)
                failed.updatedAt = Date()
                status.record(failed)
            }
            if let message = files.refusal(id: id) {
                Log.error(message, region: id)
                markSkipped(message)
                continue
            }
            guard let request = try? files.loadRequest() else {
                Log.error("store/regions/\(id)/request.json is missing or invalid; region skipped (delete it to clean up)", region: id)
                // A delete the daemon took and a kill cut short is finished next
                // (`applyTakenControls`): not marked first (attack round 62: a `failed` event,
                // then `deleted`).
                if !layout.deleteTaken(id: id) { markSkipped(StoreMaintenance.requestMissing(id)) }
                continue
            }
            let st = status.read(id: id)
            var state = st?.state ?? .queued
            // A status that says `completed` for a pack the store does not hold (a kill -9 while a
            // new request for the id replaced the pack, before its status was written): the
            // store is the truth, and the download goes on.
            if state == .completed, let st, !files.holdsCompletedPack(expected: st.progress.resourcesExpected) {
                Log.warning("the status says completed but the store holds no complete pack for this plan: downloading it", region: id)
                state = .queued
            }
            let r = Region(id: id, request: request, state: state, files: files, arrival: 0)
            r.progress = st?.progress ?? RegionProgress()
            r.error = st?.error
            r.exports = st?.exports?.compactMap { $0.any as? [String: Any] }
            r.startedAt = st?.startedAt
            r.completedAt = st?.completedAt
            r.stateChangedAt = st?.stateChangedAt
            r.uniqueBytes = st?.uniqueBytes
            r.warnings = st?.warnings ?? RegionWarning.of(request)
            loaded.append((r, st?.updatedAt ?? Date(timeIntervalSince1970: 0), st?.refreshing == true, st == nil))
        }
        for (r, _, refreshingBefore, noStatus) in loaded.sorted(by: { ($0.updatedAt, $0.region.id) < ($1.updatedAt, $1.region.id) }) {
            arrivals += 1
            r.arrival = arrivals
            regions[r.id] = r
            recoverRefresh(r, refreshingBefore: refreshingBefore)
            // A compaction cut short (kill -9 right after completion) or failed is tried again.
            if r.state == .completed && !r.refreshing { compactionsWanted.append((r.id, r.files)) }
            if r.state.resumesOnRestart || r.state == .pausedNetwork {
                // A region whose status could not be read (or is missing) is `queued` anew, and
                // says so in events.jsonl (attack round 49: its events went on at `downloading`).
                if r.state != .queued || noStatus { setState(r, .queued, note: "daemon restarted") } else { writeStatus(r) }
            }
            // Exports cut short by a stop, or made stale by a swap finished just above, or never
            // written, are written (again).
            reconcileExports(r)
        }
    }

    /// At start: a refresh whose swap was cut short is finished (roll forward); one under way is
    /// resumed (`refreshing` again, queued if the status still said completed); refresh files of a
    /// region in any other state are dropped. The store's `refresh/` folder is the truth, not the status.
    /// `refreshingBefore`: the status said a refresh was under way.
    func recoverRefresh(_ r: Region, refreshingBefore: Bool = false) {
        do {
            if try r.files.finishInterruptedRefreshCommit() {
                // A swap whose refresh was already reported finished (only its clean-up was cut
                // short) is not reported again (attack round 17: two `refresh finished` events).
                if !refreshingBefore && r.state == .completed && r.error == nil { return }
                closeRefreshAsFinished(r)
                return
            }
        } catch {
            Log.error("cannot finish the refresh's swap: \(error)", region: r.id)
            return
        }
        guard r.files.refreshUnderWay() != nil else {
            // The status said a refresh was under way, but no refresh is left and no swap is
            // pending: it ended while no daemon ran (`verify --repair` finishes a swap cut short;
            // attack round 15: the refresh was then never closed in the events, and a script
            // waiting for `refresh finished` or `failed` waited for ever). The pack in use is
            // whole either way (the one refreshed, or the one swapped in): the refresh is closed
            // as finished, with the counts the status last reported.
            if refreshingBefore, [.queued, .downloading, .pausedUser].contains(r.state) { closeRefreshAsFinished(r) }
            return
        }
        switch r.state {
        case .queued, .downloading, .pausedUser:
            r.refresh = RefreshRun(progressBefore: nil)
        case .completed:
            r.refresh = RefreshRun(progressBefore: nil)
            setState(r, .queued, note: "daemon restarted", event: StatusEvent(refresh: "started"))
        default:
            r.files.abandonRefresh()
        }
    }

    /// At start, a refresh that happened while no daemon watched it (its swap finished now or
    /// before) is closed: `completed`, the pack's progress with the refresh's tallies as the
    /// status last reported them (the swap began after the last resource was counted, so they
    /// are the final ones or just short of them), and one `refresh finished` event. An error a
    /// failed attempt left is not the region's now.
    func closeRefreshAsFinished(_ r: Region) {
        let reported = r.progress
        r.progress = packProgress(r)
        r.progress.resourcesChecked = reported.resourcesChecked
        r.progress.resourcesChanged = reported.resourcesChanged
        r.progress.resourcesUnchanged = reported.resourcesUnchanged
        r.refresh = nil
        r.error = nil
        setState(r, .completed, note: "daemon restarted", event: .refreshFinished(reported))
    }

    /// Runs until SIGINT, SIGTERM, SIGQUIT or SIGHUP (`SignalFD`). Files already in `requests/` and `control/` are handled first.
    public func run() { _ = run(until: { false }) }

    /// Runs until SIGINT, SIGTERM, SIGQUIT or SIGHUP, or until `done` returns true (asked once per turn of the
    /// event loop, at least once a second), then stops as for a signal: every status written,
    /// downloads in progress back to `queued`, the open pack sealed.
    /// - Returns: true when a signal stopped it, false when `done` did.
    public func run(until done: () -> Bool) -> Bool {
        Log.info("watching \(layout.root) (store \(store.location))")
        renewLeaseIfDue(now: Daemon.now())
        applyTakenControls()
        rescan(layout.requests, layout.control)
        var signalled = false
        while !stopping {
            if done() { break }
            schedule()
            let ready = http.wait(timeout: nextTimeout(), fds: [watcher.fd, signals.fd, writer.fd, store.writesWakeFD])
            let (watcherReady, signalsReady, writerReady) = (ready[0], ready[1], ready[2])
            if signalsReady && !signals.drain().isEmpty { stopping = true; signalled = true; break }
            if writerReady { writer.clearWake() }
            for ev in watcherReady ? watcher.drain() : [] {
                switch ev {
                case .file(let folder, let name): handleFile(folder: folder, name: name)
                case .rescan(let folder):
                    if let folder { rescan(folder) } else { rescan(layout.requests, layout.control) }
                }
            }
            for r in http.collect() { handle(r) }
            collectExports()
            collectArchiveReads()
            collectPlans()
            collectArrivals()
            collectRangeCuts()
            collectCommit()
            writeJournals()
            let now = Daemon.now()
            if commitInFlight == nil && (pendingCount >= options.syncBatch || !compactionsWanted.isEmpty
                || (pendingCount > 0 && (now - firstPendingAt >= options.syncInterval || aRegionHasNothingLeftToFetch()))) {
                commit()
            }
            for r in live.values where (r.statusDirty || r.state == .downloading && now - r.lastStatusWrite >= Daemon.rateRefresh)
                && now - r.lastStatusWrite >= options.statusInterval { writeStatus(r) }
            operationsTick(now: now)
            renewLeaseIfDue(now: now)
            if now - lastRescan >= options.rescanInterval {
                lastRescan = now
                try? layout.create()      // a removed folder comes back
                watcher.ensureWatches()   // and is watched again
                rescan(layout.requests, layout.control)
                scheduleRefreshes()
            }
        }
        shutdown()
        return signalled
    }

    /// Saves this daemon's lease on a shared store when due (at start, then every
    /// `Repository.leaseRenewal` seconds), then looks for a short-grace gc or a repair under way
    /// (a fresh `locks/gc-*.lock`). Either saves its mark first and then looks for leases, so one
    /// of the two always sees the other: the gc refuses, or the daemon starts no region until the
    /// mark is gone (attack round 21: a daemon started during such a gc lost every object). A
    /// failed save, or a gc under way, is tried again 5 s later; meanwhile no region starts
    /// (`leaseAllowsDownloads`).
    func renewLeaseIfDue(now: Double) {
        guard store.isShared, now >= leaseNextSave else { return }
        do {
            try store.renewLease(leaseID, text: Repository.leaseText("tilespool daemon", spool: layout.root))
            leaseSaved = now
            let gcs = try store.freshLeases(now: Date().timeIntervalSince1970).filter { $0.name.hasPrefix("locks/gc-") }
            if let g = gcs.first, !gcUnderWay { Log.warning("a gc with a short grace period or a repair runs on this store (\(g.name)): no region starts until it ends") }
            if gcs.isEmpty && gcUnderWay { Log.info("the gc or repair on this store has ended: regions start") }
            gcUnderWay = !gcs.isEmpty
            leaseNextSave = now + (gcUnderWay ? 5 : Repository.leaseRenewal)
        } catch {
            if now - leaseWarned >= 60 {
                leaseWarned = now
                Log.warning("cannot save this daemon's lease in the store (\(error)): no region starts until it is saved")
            }
            leaseNextSave = now + 5
        }
    }

    /// True when regions may start downloading: on a store no other daemon writes, always; on a
    /// shared one, while this daemon's lease is fresh and no short-grace gc or repair runs.
    var leaseAllowsDownloads: Bool {
        !store.isShared || (!gcUnderWay && Daemon.now() - leaseSaved < Repository.leaseStaleAfter - Repository.leaseRenewal)
    }

    func shutdown() {
        Log.info("stopping")
        arriving?.cancel.cancel() // its file stays in requests/ for the next start
        for r in regions.values where r.download != nil {
            stopDownload(r, keepReceived: true)
            if r.state == .downloading { setState(r, .queued, note: "daemon stopped") }
        }
        cutQueue.sync {} // no range is stored into the pack sealed below, nor after
        commitAndWait() // the writer is drained before the process exits
        // Objects whose lines no region waits for any more (a region deleted, cancelled or
        // replaced meanwhile) may still sit in the open pack: sealed too, so a clean stop leaves
        // no open pack in tmp/ (verify would report it; gc removes the unreferenced objects).
        do { try store.sync() } catch { Log.error("cannot seal the open pack at stop: \(error)") }
        writer.stop()
        if store.isShared {
            do { try store.dropLease(leaseID) } catch { Log.warning("cannot remove this daemon's lease \(leaseID) from the store (\(error)): gc --grace 0 waits until it is stale") }
        }
        for r in regions.values where r.statusDirty { writeStatus(r) }
        if options.metricsFile != nil { writeMetrics(now: Daemon.now()) }
    }

    /// Changes a region's state, writes its status at once, and appends to events.jsonl.
    /// Moves `r` to `next`: the event (`event`'s own fields, with the id, state, error and `note`
    /// filled in) is appended first, then the status files are written, the log line and the hook.
    /// `packUnchanged`: `completed` again with the pack as it was (a refresh that failed or was
    /// cancelled): `completedAt` keeps the time the pack was completed.
    func setState(_ r: Region, _ next: RegionState, note: String? = nil, event: StatusEvent = StatusEvent(), packUnchanged: Bool = false) {
        let previous = r.state
        r.state = next
        r.stateChangedAt = Date()
        if next == .downloading {
            if r.startedAt == nil { r.startedAt = r.stateChangedAt }
            r.rates.reset()
        }
        if next == .completed && (!packUnchanged || r.completedAt == nil) { r.completedAt = r.stateChangedAt }
        // The event first: whoever sees the new state in the status file finds its event too.
        var e = event
        e.id = r.id
        e.state = next.rawValue
        e.error = r.error
        if let note { e.note = note }
        status.event(e)
        writeStatus(r)
        Log.info("state change", region: r.id, state: next.rawValue,
                 (note.map { [("note", $0)] } ?? []) + (r.error.map { [("code", $0.code.rawValue), ("error", $0.message)] } ?? []))
        runHook(id: r.id, state: next.rawValue, previous: r.isNew ? nil : previous.rawValue)
        r.isNew = false
    }

    /// The region's status as the status file says it (`RegionStatus`, the one model of it): what
    /// `writeStatus` writes and the metrics file counts. Rates are those of the samples so far.
    func statusValue(_ r: Region) -> RegionStatus {
        let (request, context, area) = r.statusRequest
        var st = RegionStatus(id: r.id, state: r.state, progress: r.progress, error: r.error, request: request, context: context)
        st.exports = r.exports?.map(JSONValue.init)
        st.refreshing = r.refreshing
        st.startedAt = r.startedAt
        st.completedAt = r.completedAt
        st.stateChangedAt = r.stateChangedAt
        st.uniqueBytes = r.uniqueBytes
        st.warnings = r.warnings
        st.area = area
        if r.state == .downloading {
            let rates = r.rates.rates
            st.tilesPerSecond = rates?.tilesPerSecond
            st.bytesPerSecond = rates?.bytesPerSecond
            st.etaSeconds = RateWindow.eta(r.progress, rates)
        }
        if let d = r.download, d.holdUntil > Daemon.now() { st.throttledUntil = Date(timeIntervalSinceNow: d.holdUntil - Daemon.now()) }
        return st
    }

    func writeStatus(_ r: Region) {
        if r.state == .downloading { r.rates.add(time: Daemon.now(), progress: r.progress) }
        do { try status.write(statusValue(r)) } catch { Log.error("cannot write status: \(error)", region: r.id) }
        r.statusDirty = false
        r.lastStatusWrite = Daemon.now()
        updateLive(r)
    }

    func fail(_ r: Region, _ e: RegionError) {
        switch RegionStateMachine.apply(.fail, to: r.state, refreshing: r.refreshing) {
        case .to(let next):
            // What its ranges received is kept, as for a pause, for the resume (attack round 51:
            // the whole tiles of an archive cut short were being cut when the tiles past its end
            // failed the region, and were lost).
            stopDownload(r, keepReceived: true)
            r.error = shown(e, r)
            setState(r, next)
        case .abandonRefresh:
            stopDownload(r)
            r.error = shown(e, r)
            abandonRefresh(r, "failed")
        default: break
        }
    }
}
