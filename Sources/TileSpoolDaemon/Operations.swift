// Running the daemon as a service (issue 11, docs/operations.md): counters and the Prometheus
// metrics file, the state-change hook, and the background scans (store usage, unique bytes per
// region). Nothing here blocks the event loop: hooks and scans run on background queues and hand
// their results back through mailboxes the loop empties each turn (`operationsTick`), like the
// exports (Exports.swift).
import Foundation
import Glibc
import TileSpoolCore
import TileSpoolIO

/// Results handed from a background queue to the event loop.
final class Mailbox<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [T] = []
    func post(_ item: T) { lock.lock(); items.append(item); lock.unlock() }
    func take() -> [T] {
        lock.lock(); defer { lock.unlock() }
        let r = items
        items.removeAll()
        return r
    }
}

/// What one run of the `--on-state-change` hook did.
struct HookResult: Sendable {
    var id: String
    var state: String
    /// `ok` (exit 0), `failed` (other exit status or a signal), `timeout` (killed), `error` (not started).
    var outcome: String
    var exitStatus: Int?
    var signal: Int?
    var seconds: Double
    /// Standard output and error together, at most the last 4 KiB.
    var output: String
    var error: String?
}

/// The state of the service side of the daemon (only the event loop touches it, except the
/// mailboxes and queues).
final class Operations {
    let startTime = Date()
    /// HTTP outcomes (`HTTPOutcome`) -> count.
    var requests: [String: Int] = [:]
    var retries = 0
    var lastCommit: Date?
    var lastMetricsWrite = -Double.infinity
    var metricsFailed = false
    /// Hook runs by outcome, and how many are queued or running.
    var hookRuns: [String: Int] = [:]
    var hooksQueued = 0
    let hookQueue = DispatchQueue(label: "tilespool.hooks", qos: .utility)
    let hookMailbox = Mailbox<HookResult>()
    var hookSerial = 0
    /// Background scans: unique bytes per region, and the store's usage.
    let scanQueue = DispatchQueue(label: "tilespool.scans", qos: .utility)
    let uniqueMailbox = Mailbox<[String: Int]>()
    var uniqueRunning = false
    var uniqueWanted = true
    /// True once the first scan of unique bytes since start has been applied (and logged).
    var uniqueMeasured = false
    var committedSinceUnique = false
    var lastUnique = -Double.infinity
    let usageMailbox = Mailbox<(measured: (objects: Int, bytes: Int), addedAtStart: (objects: Int, bytes: Int))>()
    var usageRunning = false
    var lastStoreMeasure = -Double.infinity
}

/// The outcome label of a transfer in `tilespool_http_requests_total`.
enum HTTPOutcome {
    static let all = ["2xx", "304", "404", "429", "5xx", "other", "network", "bad_response", "refused"]
    static func of(_ res: TransferResult) -> String {
        switch res.failure {
        case .network?: return "network"
        case .badResponse?: return "bad_response"
        case .refused?, .policyRefused?: return "refused"
        case nil:
            switch res.status {
            case 200...299: return "2xx"
            case 304, 404, 429: return String(res.status)
            case 500...599: return "5xx"
            default: return "other"
            }
        }
    }
}

extension Daemon {
    /// A downloading region's status is rewritten at least this often (seconds), so its rates
    /// and ETA follow a stall too.
    static let rateRefresh = 5.0
    /// Seconds between recounts of the store's usage (objects `gc` removed are seen then).
    static let storeMeasureInterval = 300.0
    /// Seconds between recomputations of `uniqueBytes` while downloads commit objects.
    static let uniqueInterval = 30.0
    /// Hook runs queued at most; beyond, a state change runs no hook (logged).
    static let maxQueuedHooks = 256

    /// Called once per loop turn: collects hook and scan results, starts scans that are due,
    /// writes the metrics file when due.
    func operationsTick(now: Double) {
        for h in ops.hookMailbox.take() { hookFinished(h) }
        for u in ops.uniqueMailbox.take() { applyUniqueBytes(u) }
        for u in ops.usageMailbox.take() {
            store.setUsage(u.measured, addedAtStart: u.addedAtStart)
            ops.usageRunning = false
        }
        if store.usage != nil, !ops.usageRunning, now - ops.lastStoreMeasure >= Daemon.storeMeasureInterval {
            ops.usageRunning = true
            ops.lastStoreMeasure = now
            let store = self.store, start = store.added, mailbox = ops.usageMailbox
            ops.scanQueue.async { if let measured = store.measureUsage() { mailbox.post((measured, start)) } }
        }
        if ops.committedSinceUnique && now - ops.lastUnique >= Daemon.uniqueInterval { ops.uniqueWanted = true }
        if ops.uniqueWanted && !ops.uniqueRunning && now - ops.lastUnique >= 1 {
            ops.uniqueWanted = false
            ops.committedSinceUnique = false
            ops.uniqueRunning = true
            ops.lastUnique = now
            let store = self.store, mailbox = ops.uniqueMailbox
            ops.scanQueue.async { mailbox.post(StoreMaintenance.uniqueBytes(store: store)) }
        }
        if options.metricsFile != nil && now - ops.lastMetricsWrite >= options.metricsInterval { writeMetrics(now: now) }
    }

    /// Counts a transfer's outcome (call for every result, probes included).
    func countRequest(_ res: TransferResult) { ops.requests[HTTPOutcome.of(res), default: 0] += 1 }

    // MARK: unique bytes

    func applyUniqueBytes(_ map: [String: Int]) {
        ops.uniqueRunning = false
        if !ops.uniqueMeasured {
            // The first scan of every manifest since start is done (a script, or a test, can wait
            // for this line rather than for time).
            ops.uniqueMeasured = true
            Log.info("measured the unique bytes of \(regions.count) regions")
        }
        for r in regions.values {
            let v = map[r.id] ?? 0
            guard r.uniqueBytes != v else { continue }
            r.uniqueBytes = v
            if live[r.id] != nil { r.statusDirty = true } else { writeStatus(r) }
        }
    }

    // MARK: hooks

    /// Queues a run of the `--on-state-change` hook for a state change (`deleted` included).
    func runHook(id: String, state: String, previous: String?) {
        guard let path = options.onStateChange else { return }
        guard ops.hooksQueued < Daemon.maxQueuedHooks else {
            Log.error("hook not run: \(ops.hooksQueued) runs are already waiting", region: id, state: state, [("hook", path)])
            ops.hookRuns["dropped", default: 0] += 1
            return
        }
        ops.hooksQueued += 1
        ops.hookSerial += 1
        let statusPath = layout.statusJSON(id)
        var env = ProcessInfo.processInfo.environment
        env["TILESPOOL_REGION"] = id
        env["TILESPOOL_STATE"] = state
        env["TILESPOOL_PREVIOUS_STATE"] = previous ?? ""
        env["TILESPOOL_STATUS"] = statusPath
        env["TILESPOOL_SPOOL"] = layout.root
        env["TILESPOOL_STORE"] = store.location
        let timeout = options.hookTimeout, mailbox = ops.hookMailbox, environment = env
        ops.hookQueue.async {
            let r = Spawn.run(path: path, arguments: [id, state, statusPath], environment: environment, timeout: timeout)
            mailbox.post(HookResult(id: id, state: state, outcome: r.outcome, exitStatus: r.exitStatus, signal: r.signal,
                                    seconds: r.seconds, output: r.output, error: r.error))
        }
    }

    func hookFinished(_ h: HookResult) {
        ops.hooksQueued -= 1
        ops.hookRuns[h.outcome, default: 0] += 1
        var fields: [(String, Any)] = [("hook", options.onStateChange ?? ""), ("outcome", h.outcome)]
        if let s = h.exitStatus { fields.append(("exit", s)) }
        if let s = h.signal { fields.append(("signal", s)) }
        fields.append(("seconds", (h.seconds * 1000).rounded() / 1000))
        if let e = h.error { fields.append(("error", e)) }
        fields.append(("output", h.output))
        switch h.outcome {
        case "ok": Log.info("hook ran", region: h.id, state: h.state, fields)
        case "error": Log.error("hook could not start", region: h.id, state: h.state, fields)
        default: Log.warning(h.outcome == "timeout" ? "hook timed out and was killed" : "hook failed", region: h.id, state: h.state, fields)
        }
    }

    // MARK: metrics

    /// Writes `--metrics-file` (atomically: temp file in its folder, then rename).
    func writeMetrics(now: Double) {
        guard let path = options.metricsFile else { return }
        ops.lastMetricsWrite = now
        let text = metricsText()
        do {
            try Files.writeAtomically(Data(text.utf8), to: path)
            if ops.metricsFailed { ops.metricsFailed = false; Log.info("metrics file written again", [("path", path)]) }
        } catch {
            if !ops.metricsFailed { Log.error("cannot write the metrics file: \(error)", [("path", path)]) }
            ops.metricsFailed = true
        }
    }

    /// The metrics in the Prometheus text format (docs/operations.md lists them).
    func metricsText() -> String {
        var m = PrometheusText()
        // Per region, from the same value the status file is written from.
        let sorted = regions.values.sorted { $0.id < $1.id }.map(statusValue)
        m.family("tilespool_build_info", .gauge, "TileSpool version (always 1).", [([("version", TileSpoolVersion.string)], 1)])
        m.family("tilespool_daemon_start_time_seconds", .gauge, "When the daemon started, in seconds since the Unix epoch.",
                 ops.startTime.timeIntervalSince1970.rounded())
        var byState: [RegionState: Int] = [:]
        for r in sorted { byState[r.state, default: 0] += 1 }
        m.family("tilespool_regions", .gauge, "Regions known to the daemon, by state.",
                 RegionState.allCases.map { ([("state", $0.rawValue)], Double(byState[$0] ?? 0)) })
        func perRegion(_ f: (RegionStatus) -> Int?) -> [([(String, String)], Double)] {
            sorted.compactMap { r in f(r).map { ([("region", r.id)], Double($0)) } }
        }
        m.family("tilespool_region_resources_completed", .gauge, "Resources of a region in its manifest.", perRegion { $0.progress.resourcesCompleted })
        m.family("tilespool_region_resources_expected", .gauge, "Resources a region's plan holds (a lower bound until the plan is exact).",
                 perRegion { $0.progress.resourcesExpected })
        m.family("tilespool_region_tiles_completed", .gauge, "Tiles of a region in its manifest.", perRegion { $0.progress.tilesCompleted })
        m.family("tilespool_region_tiles_expected", .gauge, "Tiles a region's plan holds.", perRegion { $0.progress.tilesExpected })
        m.family("tilespool_region_tiles_failed", .gauge, "Tiles of a region recorded as failed within its maxFailedTiles.",
                 perRegion { $0.progress.tilesFailed })
        m.family("tilespool_region_bytes_completed", .gauge, "Bytes of a region's completed resources.", perRegion { $0.progress.bytesCompleted })
        m.family("tilespool_region_bytes_expected", .gauge,
                 "Estimated bytes of a region when complete: bytes so far scaled by resources expected over completed (exact once completed; absent before the plan is exact).",
                 perRegion { r in
                     let p = r.progress
                     guard p.resourcesExpectedIsPrecise, p.resourcesCompleted > 0 else { return nil }
                     // Counts read back from a status file may be anything: never past 2^53.
                     let v = (Double(p.bytesCompleted) * Double(p.resourcesExpected) / Double(p.resourcesCompleted)).rounded()
                     return v.isFinite ? Int(max(0, min(v, 9e15))) : nil
                 })
        m.family("tilespool_region_unique_bytes", .gauge, "Bytes of the objects only this region references.", perRegion { $0.uniqueBytes })
        m.family("tilespool_http_requests_total", .counter, "HTTP transfers finished, by outcome (status class, or network, bad_response, refused).",
                 HTTPOutcome.all.map { ([("outcome", $0)], Double(ops.requests[$0] ?? 0)) })
        m.family("tilespool_http_retries_total", .counter, "Retries scheduled after a transient failure.", Double(ops.retries))
        if let u = store.usage {
            m.family("tilespool_store_objects", .gauge, "Objects in the store (recounted every 5 minutes, plus those written since).", Double(u.objects))
            m.family("tilespool_store_bytes", .gauge, "Bytes of the objects in the store.", Double(u.bytes))
        }
        if let q = options.maxStoreBytes { m.family("tilespool_store_max_bytes", .gauge, "The store quota, --max-store-bytes.", Double(q)) }
        m.family("tilespool_store_objects_written_total", .counter, "Objects this daemon wrote to the store.", Double(store.added.objects))
        m.family("tilespool_store_written_bytes_total", .counter, "Bytes this daemon wrote to the store.", Double(store.added.bytes))
        m.family("tilespool_last_commit_time_seconds", .gauge, "When objects were last made durable and recorded in a manifest (0: not yet).",
                 (ops.lastCommit?.timeIntervalSince1970 ?? 0).rounded())
        if options.onStateChange != nil {
            m.family("tilespool_hook_runs_total", .counter, "Runs of the --on-state-change hook, by outcome.",
                     ["ok", "failed", "timeout", "error", "dropped"].map { ([("outcome", $0)], Double(ops.hookRuns[$0] ?? 0)) })
        }
        return m.text
    }
}

