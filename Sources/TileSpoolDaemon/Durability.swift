// Durability: objects written to the store enter a region's manifest only after they are
// durable. Each loop turn appends to the journal the lines whose objects the store has written
// (a kill -9 loses nothing the journal names); a commit
// hands the waiting lines to the writer thread, which syncs the store and appends them to the
// manifests (fdatasync) while the loop keeps downloading; only when the writer reports back are
// they counted in the progress. Restart promotes intact journal lines (docs/durability.md).
import CLinux
import Foundation
import Glibc
import TileSpoolCore
import TileSpoolIO

/// One batch of durability work for the writer thread: `syncfs` of the store, then, for each
/// entry, its lines appended to its manifest and `fdatasync`ed. The writer fills in the errors.
final class CommitJob: @unchecked Sendable {
    struct Entry {
        /// The manifest the lines go to: the download's `files` (`Download.files`).
        let files: any RegionStorage
        /// The lines, rendered (`ManifestLine.text`), in order.
        let text: [UInt8]
        /// The objects the lines name (their SHA-256s): the entry is refused when one of them
        /// failed to be written (`TileStore.writeFailure(among:)`).
        let objects: [String]
        /// Set by the writer when the append or its fdatasync failed.
        var error: Error?
    }
    var entries: [Entry]
    /// Set by the writer when `TileStore.sync` failed; then no manifest was touched.
    var syncError: Error?
    /// Manifests of completed regions to join into one piece after the entries
    /// (`RegionStorage.compactManifest`; S3 only does something), with the region's id.
    var compactions: [(id: String, files: any RegionStorage)] = []
    /// Set by the writer: the compactions that failed (the manifest stays in pieces).
    var compactionErrors: [(id: String, error: Error)] = []
    init(entries: [Entry], compactions: [(id: String, files: any RegionStorage)] = []) {
        self.entries = entries
        self.compactions = compactions
    }
}

/// The writer thread: runs one `CommitJob` at a time, off the event loop, and posts it back as
/// finished (a mailbox the loop empties, and an eventfd the loop polls, so it wakes at once).
final class DurabilityWriter: @unchecked Sendable {
    /// Readable when a job has finished (eventfd(2), non-blocking).
    let fd: Int32
    private let store: any TileStore
    private let cond = NSCondition()
    private var queued: CommitJob?
    private var finished: CommitJob?
    private var stopping = false
    private var exited = false

    /// Starts the thread. - Throws: `SystemError` when no eventfd can be made.
    init(store: any TileStore) throws(SystemError) {
        self.store = store
        fd = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        if fd < 0 { throw SystemError("eventfd", "") }
        let t = Thread { [self] in main() }
        t.name = "tilespool.writer"
        t.start()
    }

    /// Hands a job to the thread. At most one job is queued or running at a time.
    func submit(_ job: CommitJob) {
        cond.lock()
        precondition(queued == nil && finished == nil, "one commit at a time")
        queued = job
        cond.broadcast()
        cond.unlock()
    }

    /// The finished job, if any (does not block; no system call). The loop empties the eventfd
    /// with `clearWake` whenever poll finds it readable.
    func takeFinished() -> CommitJob? {
        cond.lock(); defer { cond.unlock() }
        let j = finished
        finished = nil
        return j
    }

    /// Empties the eventfd (call when poll found it readable, before `takeFinished`). The thread
    /// sets `finished` before it writes the eventfd, so a job whose signal is read here is seen by
    /// the `takeFinished` that follows, and a signal is never left readable for a job already
    /// taken (the loop would spin).
    /// Makes `fd` readable, so the loop wakes at once (also for work finished elsewhere: a read
    /// of PMTiles directories, `collectArchiveReads`); callable from any thread.
    func wake() {
        var one: UInt64 = 1
        _ = write(fd, &one, 8)
    }

    func clearWake() {
        var v: UInt64 = 0
        _ = read(fd, &v, 8)
    }

    /// Waits until the job handed over last has finished and returns it.
    func waitFinished() -> CommitJob {
        cond.lock()
        while finished == nil { cond.wait() }
        let j = finished!
        finished = nil
        cond.unlock()
        var v: UInt64 = 0
        _ = read(fd, &v, 8)
        return j
    }

    /// Ends the thread once the queued job (if any) has run; waits for it to exit.
    func stop() {
        cond.lock()
        stopping = true
        cond.broadcast()
        while !exited { cond.wait() }
        cond.unlock()
    }

    private func main() {
        while true {
            cond.lock()
            while queued == nil && !stopping { cond.wait() }
            guard let job = queued else { exited = true; cond.broadcast(); cond.unlock(); return }
            queued = nil
            cond.unlock()
            run(job)
            cond.lock()
            finished = job
            cond.broadcast()
            cond.unlock()
            var one: UInt64 = 1
            _ = write(fd, &one, 8)
        }
    }

    /// The durability steps, in this order: every object put before the job was handed over is
    /// written and flushed (`TileStore.sync`), and only then are lines naming them appended to a
    /// manifest; an entry naming an object whose write failed gets that failure instead.
    private func run(_ job: CommitJob) {
        if !job.entries.isEmpty {
            do { try store.sync() } catch { job.syncError = error; return }
        }
        for k in job.entries.indices {
            if let e = store.writeFailure(among: job.entries[k].objects) { job.entries[k].error = e; continue }
            do { try job.entries[k].files.appendToManifest(text: job.entries[k].text) } catch {
                job.entries[k].error = error
            }
        }
        for c in job.compactions {
            do { try c.files.compactManifest() } catch { job.compactionErrors.append((c.id, error)) }
        }
    }
}

/// What the loop remembers of the batch at the writer: per entry, the region, its download and
/// the items the lines record.
struct CommitInFlight {
    var owners: [(region: Region, download: Download, batch: [(item: WorkItem, line: ManifestLine)])]
}

extension Daemon {
    /// Appends to each region's journal the waiting lines whose objects the store has written
    /// (`TileStore.writesDone`: the writer thread may still hold the newest), so that a `kill -9`
    /// before the next commit loses no downloaded object and the journal never names one that was
    /// still in memory. Lines not yet journaled go to the manifest with the next commit all the
    /// same. (A store without journals, S3, hands out no tickets: its lines go at once, to a
    /// no-op.)
    func writeJournals() {
        store.resetWake()
        var done: Int?
        var waitFor = 0
        for r in Array(live.values) {
            guard let d = r.download, d.journaledLines < d.pendingEnds.count else { continue }
            let written = done ?? store.writesDone
            done = written
            var k = d.journaledLines
            while k < d.pendingEnds.count && d.pendingEnds[k].ticket <= written { k += 1 }
            if k < d.pendingEnds.count { waitFor = max(waitFor, d.pendingEnds[d.pendingEnds.count - 1].ticket) }
            guard k > d.journaledLines else { continue }
            let end = d.pendingEnds[k - 1].end
            do { try d.files.appendToJournal(text: d.pendingText[d.journaled..<end]) } catch { storageFailed(r, error); continue }
            d.journaled = end
            d.journaledLines = k
        }
        // Lines wait for objects still at the writer: wake as soon as it has written them.
        if waitFor > 0 { store.wakeWhenDone(through: waitFor) }
    }

    /// True when a downloading region waits only for its last objects to be recorded: they are
    /// then synced at once instead of at the next sync interval.
    func aRegionHasNothingLeftToFetch() -> Bool {
        live.values.contains { r in
            guard let d = r.download, let plan = d.plan else { return false }
            return !d.pending.isEmpty && d.inFlight.isEmpty && d.rangesCutting.isEmpty && d.retries.isEmpty && d.cursor >= plan.indexSpace
        }
    }

    /// Records an object's line as waiting for the next commit (rendered once, for the journal
    /// and the manifest).
    func addPending(_ d: Download, _ item: WorkItem, _ line: ManifestLine) {
        line.appendText(to: &d.pendingText)
        addedPending(d, item, line, ticket: store.writesQueued)
    }

    /// `addPending` of a line rendered already (`ManifestLine.appendText`) whose object was put
    /// by store ticket `ticket` (`TileStore.writesQueued` after its `put`, or later).
    func addPending(_ d: Download, _ item: WorkItem, _ line: ManifestLine, text: ArraySlice<UInt8>, ticket: Int) {
        d.pendingText += text
        addedPending(d, item, line, ticket: ticket)
    }

    /// The rest of `addPending`, once the line's text is in `d.pendingText`.
    private func addedPending(_ d: Download, _ item: WorkItem, _ line: ManifestLine, ticket: Int) {
        d.pending.append((item, line))
        d.pendingEnds.append((d.pendingText.count, ticket))
        if pendingCount == 0 { firstPendingAt = Daemon.now() }
        pendingCount += 1
    }

    /// Makes one pre-plan document durable and records it at once (waiting for the writer: the
    /// plan is made from the manifest next).
    func commitNow(_ r: Region, _ d: Download, _ item: WorkItem, _ line: ManifestLine) {
        addPending(d, item, line)
        commitAndWait()
    }

    /// The durability step, started: hands the waiting lines of every downloading region to the
    /// writer thread (which syncs the store, then appends them to each download's manifest), unless
    /// a batch is still there; `collectCommit` counts them in the progress when it is back. A crash
    /// before the manifest write loses only work that was never reported.
    func commit() {
        guard pendingCount > 0 || !compactionsWanted.isEmpty, commitInFlight == nil else { return }
        var entries: [CommitJob.Entry] = []
        var inFlight = CommitInFlight(owners: [])
        for r in live.values {
            guard let d = r.download, !d.pending.isEmpty else { continue }
            entries.append(CommitJob.Entry(files: d.files, text: d.pendingText, objects: d.pending.compactMap { $0.line.sha256 }))
            inFlight.owners.append((r, d, d.pending))
            d.committing = d.pending.count
            d.pending = []
            d.pendingText = []
            d.pendingEnds = []
            d.journaled = 0 // the journal holds those lines; what is journaled from now on follows them
            d.journaledLines = 0
        }
        pendingCount = 0
        guard !entries.isEmpty || !compactionsWanted.isEmpty else { return }
        commitInFlight = inFlight
        writer.submit(CommitJob(entries: entries, compactions: compactionsWanted))
        compactionsWanted = []
    }

    /// Applies the writer's result if it is back (the loop calls this every turn).
    func collectCommit() {
        guard commitInFlight != nil, let job = writer.takeFinished() else { return }
        applyCommit(job)
    }

    /// Waits for the batch at the writer, if any, and applies its result. Called before anything
    /// that stops a download or reads a manifest the writer may be appending to.
    func finishCommit() {
        guard commitInFlight != nil else { return }
        applyCommit(writer.waitFinished())
    }

    /// Commits everything waiting and waits for it (stops, pre-plan documents, shutdown).
    func commitAndWait() {
        finishCommit()
        commit()
        finishCommit()
    }

    /// The writer is back: counts the recorded lines in each region's progress and empties the
    /// journal of them; a failed sync or append makes the region failedStorage or failed
    /// (`storageFailed`), its journal kept for the next start.
    func applyCommit(_ job: CommitJob) {
        guard let inFlight = commitInFlight else { return }
        commitInFlight = nil
        for (id, e) in job.compactionErrors { Log.error("cannot compact the manifest (it stays in pieces, read as before): \(e)", region: id) }
        if job.syncError == nil {
            ops.lastCommit = Date()
            ops.committedSinceUnique = true
        }
        for (k, (r, d, batch)) in inFlight.owners.enumerated() {
            d.committing = 0
            guard r.download === d else { continue }
            if let e = job.syncError ?? job.entries[k].error {
                // Nothing of the batch is recorded (the journal keeps it for a restart to check).
                storageFailed(r, e, commitPending: false)
                continue
            }
            d.files.replaceJournal(with: d.pendingText[..<d.journaled])
            for (item, line) in batch {
                if case .index(let i) = item { d.done[i] = true }
                count(line, d, into: &r.progress)
            }
            r.statusDirty = true
            finishIfDone(r, d)
        }
    }

    /// After a crash: promotes journal lines whose objects are intact (they hash to their names)
    /// into the manifest, after a sync, and counts them. Lines naming lost objects are dropped.
    /// - Returns: the error when the recovered lines could not be recorded (the region then goes
    ///   to failedStorage; the journal is kept for the next try).
    func recoverJournal(_ r: Region, _ d: Download, _ plan: ResourcePlan) -> Error? {
        var recovered: [(Int, ManifestLine)] = []
        var seen = Set<Int>()
        d.files.readJournal(cutPartialLine: true) { line in
            guard let i = plan.index(kind: line.kind, key: line.key, cover: d.cover(plan)), !d.done[i], !seen.contains(i) else { return }
            if let sha = line.sha256, !store.isIntact(sha) { return }
            seen.insert(i)
            recovered.append((i, line))
        }
        if !recovered.isEmpty {
            do {
                try store.sync()
                try d.files.appendToManifest(recovered.map(\.1))
            } catch {
                Log.error("cannot recover the journal: \(error)", region: r.id)
                return error
            }
            for (i, l) in recovered { d.done[i] = true; count(l, d, into: &r.progress) }
            Log.info("recovered \(recovered.count) resources from the journal", region: r.id)
        }
        d.files.clearJournal()
        return nil
    }

    func count(_ line: ManifestLine, _ d: Download?, into p: inout RegionProgress) {
        if let d, d.previous != nil { p.tally(Refresh.outcome(previous: d.previousLine(line.kind, line.key), current: line)) }
        p.count(line)
        if line.kind == .tile, let d, line.sha256 != nil, let (source, _) = ManifestLine.parseTileKey(line.key) {
            d.tilesWithContent[source, default: 0] += 1
        }
    }
}
