import Foundation
import Glibc
import TileSpoolCore
import TileSpoolIO

let pruneHelp = """
usage: tilespool prune [--older-than DURATION] [--state LIST] [--rejected-older-than DURATION]
                       [--dry-run] [--spool DIR] [--store DIR]

Deletes finished regions, for cron or the tilespool-gc timer, only when asked to with
--older-than, --state or both: every region whose state is in LIST (comma-separated; default
completed,cancelled,failed; also failedStorage, pausedUser) and that entered that state at least
DURATION ago (default 0: any age). DURATION is a number with s, m, h, d or w (e.g. 30d). With
neither option no region is deleted. When a daemon runs on the spool, prune drops
control/<id>.delete for each (the daemon is the one writer); otherwise it deletes them itself,
holding the daemon's lock.
It always removes entries of rejected/ (and their .error) put there at least
--rejected-older-than ago (default 7d). Objects are freed by a later `tilespool gc`.
--dry-run prints what would be deleted and deletes nothing.
"""

func commandPrune(_ argv: [String]) throws -> Int32 {
    let a = try Arguments(argv, flags: commonFlags.union(["--dry-run"]),
                          valued: commonValued.union(["--older-than", "--state", "--rejected-older-than"]))
    if a.flags.contains("--help") { out(pruneHelp); return 0 }
    if !a.positionals.isEmpty { throw UsageError("prune takes no arguments") }
    func duration(_ name: String, _ d: Double) throws -> Double {
        guard let s = a.options[name] else { return d }
        guard let v = DurationText.seconds(s) else { throw UsageError("\(name) must be a duration such as 90s, 15m, 12h, 7d or 2w") }
        return v
    }
    let olderThan = try duration("--older-than", 0)
    let rejectedOlderThan = try duration("--rejected-older-than", 7 * 86400)
    let allowed: Set<RegionState> = [.completed, .cancelled, .failed, .failedStorage, .pausedUser]
    var states: Set<RegionState> = [.completed, .cancelled, .failed]
    if let list = a.options["--state"] {
        states = []
        for word in list.split(separator: ",", omittingEmptySubsequences: false) {
            guard let st = RegionState(rawValue: String(word)), allowed.contains(st) else {
                throw UsageError("--state: '\(word)' is not one of \(allowed.map(\.rawValue).sorted().joined(separator: ", "))")
            }
            states.insert(st)
        }
    }
    let loc = try Locations(a)
    try loc.requireSpool()
    let layout = loc.layout
    let dryRun = a.flags.contains("--dry-run")
    let writer = StatusWriter(layout: layout)
    let now = Date()
    // Regions are deleted only when asked for: a bare `prune` (or the timer's default) keeps every pack.
    let selecting = a.options["--older-than"] != nil || a.options["--state"] != nil
    let selected = !selecting ? [] : writer.readAll().filter { st in
        states.contains(st.state) && now.timeIntervalSince(st.stateChangedAt ?? st.updatedAt) >= olderThan
    }.map { (id: $0.id, took: $0.namesItsRequest) }

    // The daemon's lock tells whether a daemon runs; holding it keeps one from starting meanwhile.
    let locks = !dryRun && selecting ? try OfflineLocks.take(loc, command: "prune") : nil
    if dryRun {
        for (id, _) in selected { out("would delete \(id)") }
    } else if locks == nil {
        try Files.makeDirectories(layout.control)
        for (id, _) in selected {
            try Files.writeAtomically(Data(), to: "\(layout.control)/\(id).delete")
            out("delete requested for \(id) (the daemon deletes it)")
        }
    } else {
        try deleteRegionsWithoutDaemon(selected, loc: loc, writer: writer, note: "prune")
    }
    _ = locks
    // rejected/: aged by the change time, which the rename into rejected/ sets (the mtime is the
    // original file's).
    // The folder is opened without following a symlink and walked by descriptor; an entry counts
    // as removed only when it is gone afterwards.
    var rejected = 0
    let rejectedDir = try? Directory(path: layout.rejected, followFinal: false)
    for name in rejectedDir?.list().sorted() ?? [] where !name.hasPrefix(".") {
        guard let dir = rejectedDir, let st = dir.status(name) else { continue }
        let ctime = Double(st.st_ctim.tv_sec) + Double(st.st_ctim.tv_nsec) / 1e9
        guard now.timeIntervalSince1970 - ctime >= rejectedOlderThan else { continue }
        if dryRun {
            rejected += 1
            out("would remove rejected/\(TerminalText.safe(name))")
        } else if dir.removeTree(name) {
            rejected += 1
        } else {
            err("tilespool: cannot remove rejected/\(TerminalText.safe(name)) (it is left in place)")
        }
    }
    let regions = !selecting ? "no region selected (regions are deleted only with --older-than or --state)"
        : "\(selected.count) regions \(dryRun ? "would be deleted" : locks == nil ? "sent to the daemon for deletion" : "deleted")"
    out("prune: \(regions), \(rejected) rejected entries \(dryRun ? "would be removed" : "removed")")
    return 0
}

/// The lock at `path`, or nil when another process holds it.
/// - Throws: `SystemError` for any other failure (the folder cannot be written, say).
/// The locks a command takes to change the spool and store without a daemon (`prune`, and
/// `delete` when no daemon runs): the spool's, and a disk store's when it is another file.
struct OfflineLocks {
    let spool: SpoolLock
    let store: SpoolLock?

    /// Takes both, or nil when a daemon holds the spool's lock (the caller then asks the daemon).
    /// - Throws: `CommandFailure` when a daemon of another spool holds the store's lock (`command`
    ///   names what to run from that spool); the lock's own error.
    static func take(_ loc: Locations, command: String) throws -> OfflineLocks? {
        guard let spool = try takeLock(loc.layout.lock) else { return nil }
        var store: SpoolLock?
        if !loc.isS3, StoreSpec.looksLikeStore(loc.store),
           !SpoolLock.sameFile(loc.store + "/daemon.lock", loc.layout.lock) { // --spool X --store X: one lock
            store = try takeLock(loc.store + "/daemon.lock")
            if store == nil {
                throw CommandFailure("a daemon of another spool holds the store's lock (\(loc.store)/daemon.lock); \(command) from that spool")
            }
        }
        return OfflineLocks(spool: spool, store: store)
    }
}

/// Deletes regions without a daemon (`OfflineLocks` held): each one's files in the store (in a
/// store other daemons write, only a region this spool took, `took`: the region of a refused
/// request's id there is another daemon's, attack round 53), its status files, and a `deleted`
/// event with `note`. Objects are freed by a later gc.
/// - Throws: the store's error when it cannot be opened.
func deleteRegionsWithoutDaemon(_ regions: [(id: String, took: Bool)], loc: Locations, writer: StatusWriter, note: String) throws {
    // Through the store, whichever backend it is on (no store there: no region files to remove).
    let store = loc.isS3 || StoreSpec.looksLikeStore(loc.store) ? try loc.openStore() : nil
    for (id, took) in regions {
        if let store, !store.isShared || took { store.region(id).remove() }
        writer.remove(id: id)
        writer.event(StatusEvent(id: id, state: "deleted", note: note, action: "delete"))
        out("deleted \(id)")
    }
}

func takeLock(_ path: String) throws -> SpoolLock? {
    let result: Result<SpoolLock, SystemError>
    do { result = .success(try SpoolLock(path: path)) } catch { result = .failure(error) }
    switch result {
    case .success(let l): return l
    case .failure(let e): if e.errno == EWOULDBLOCK { return nil }; throw e
    }
}
