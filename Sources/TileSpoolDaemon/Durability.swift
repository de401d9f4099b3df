// Durability: objects written to the store enter a region's manifest only after they are
// durable. Each loop turn appends their lines to the journal (a kill -9 loses nothing); the
// commit syncs the store, appends the lines to the manifest and only then counts them in the
// progress. Restart promotes intact journal lines (docs/durability.md).
import Foundation
import Glibc
import TileSpoolCore
import TileSpoolIO

extension Daemon {
    /// Appends the lines of objects written in this loop iteration to each region's journal, so
    /// that a `kill -9` before the next sync loses no downloaded object.
    func writeJournals() {
        for r in Array(live.values) {
            guard let d = r.download, !d.journalBuffer.isEmpty else { continue }
            do { try d.files.appendToJournal(d.journalBuffer) } catch { storageFailed(r, error); continue }
            d.journalBuffer.removeAll(keepingCapacity: true)
        }
    }

    /// True when a downloading region waits only for its last objects to be recorded: they are
    /// then synced at once instead of at the next sync interval.
    func aRegionHasNothingLeftToFetch() -> Bool {
        live.values.contains { r in
            guard let d = r.download, let plan = d.plan else { return false }
            return !d.pending.isEmpty && d.inFlight.isEmpty && d.retries.isEmpty && d.cursor >= plan.indexSpace
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
        ops.lastCommit = Date()
        ops.committedSinceUnique = true
        for r in Array(live.values) {
            guard let d = r.download, !d.pending.isEmpty else { continue }
            let batch = d.pending
            d.pending.removeAll(keepingCapacity: true)
            d.journalBuffer.removeAll(keepingCapacity: true)
            do { try d.files.appendToManifest(batch.map(\.line)) } catch {
                storageFailed(r, error); continue
            }
            d.files.clearJournal()
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
            guard let i = plan.index(kind: line.kind, key: line.key), !d.done[i], !seen.contains(i) else { return }
            if let sha = line.sha256, SHA256.hex(file: store.objectPath(sha)) != sha { return }
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
        p.resourcesCompleted += 1
        p.bytesCompleted += line.bytes
        if line.kind == .tile { p.tilesCompleted += 1; p.tileBytesCompleted += line.bytes }
        if line.kind != .tile && line.sha256 == nil { p.resourcesMissing += 1 }
        if line.failed { p.tilesFailed += 1 }
    }
}
