import Foundation
import Glibc
import TileSpoolCore
import TileSpoolIO

/// Exit statuses of `tilespool pause|resume|cancel|delete|refresh` (docs/contract.md, "The
/// command line"): 0 and 2 as every command; the others say what became of the action.
enum ControlExit {
    /// Sent; with `--wait`, applied (a refresh: finished).
    static let done: Int32 = 0
    /// Not sent: no region of that id, no daemon running, or the control file could not be written.
    static let notSent: Int32 = 1
    /// `--wait`: the daemon did not apply it (it does not apply in the region's state, or the
    /// control file went to rejected/).
    static let notApplied: Int32 = 3
    /// `--wait`: applied but did not end as asked (a refresh failed or was cancelled, or the region
    /// was deleted meanwhile).
    static let failed: Int32 = 4
    /// `--wait`: no answer within `--timeout` (the daemon may still act on it).
    static let timedOut: Int32 = 5
}

/// The default of `--timeout` with `--wait`, in seconds (0: no limit).
let defaultWaitTimeout = 600.0

func controlHelp(_ action: String) -> String {
    let refresh = action == "refresh"
    var text = """
    usage: tilespool \(action) ID\(refresh ? " [--max-age SECONDS]" : "") [--wait [--timeout SECONDS]] [--spool DIR] [--store DIR]

    Drops <spool>/control/ID.\(action) atomically (a dotfile, then a rename), the same file a shell
    script may drop, for the running daemon, which acts on it within a second. Nothing is dropped,
    exit status 1, when the spool has no region ID or when no daemon runs on the spool (its lock
    <spool>/daemon.lock is not held): the file would wait there for the next start. (delete
    without a daemon deletes the region itself, holding the daemon's lock, as prune does.)
    Without --wait it returns at once; read the result with 'tilespool status ID' or in
    <spool>/events.jsonl.
    """ + "\n\n"
    if refresh {
        text += """
        A refresh re-checks every resource of a completed region with conditional requests
        (If-None-Match, If-Modified-Since) and swaps the new manifest in when it completes; with
        --max-age, only resources fetched at least SECONDS ago (or expired by their own headers) are
        checked. The file then holds {"maxAge": SECONDS}. See docs/refresh.md.
        """ + "\n\n"
    }
    text += """
    options:
      --wait             wait for the daemon's answer in <spool>/events.jsonl and print it: the
                         region's new state\(refresh ? "; for a refresh, its end (finished, failed or\n                     cancelled)" : ""); or why the action was not applied
      --timeout SECONDS  with --wait: give up after SECONDS (default \(Int(defaultWaitTimeout)); 0: no limit)

    exit status:
      0  sent; with --wait: applied\(refresh ? " (the refresh finished)" : "")
      1  not sent: no region ID, or no daemon running (delete: deleted then, exit 0)
      2  a usage mistake
      3  with --wait: not applied (it does not apply in the region's state, or the daemon refused
         the control file to rejected/)
      4  with --wait: applied but did not end as asked (a refresh failed or was cancelled, or the
         region was deleted meanwhile)
      5  with --wait: no answer within --timeout (the daemon may still act on it)
    """
    return text
}

func commandControl(_ action: String, _ argv: [String]) throws -> Int32 {
    guard let act = RegionAction(rawValue: action) else { throw UsageError("unknown command '\(action)'") }
    let refresh = act == .refresh
    let a = try Arguments(argv, flags: commonFlags.union(["--wait"]),
                          valued: commonValued.union(refresh ? ["--max-age", "--timeout"] : ["--timeout"]))
    if a.flags.contains("--help") { out(controlHelp(action)); return 0 }
    guard a.positionals.count == 1, let id = a.positionals.first else { throw UsageError("\(action) takes one region ID") }
    guard RequestValidator.isValidID(id) else { throw UsageError("'\(TerminalText.inline(id))' is not a valid region id") }
    let wait = a.flags.contains("--wait")
    if a.options["--timeout"] != nil && !wait { throw UsageError("--timeout goes with --wait") }
    let timeout = try a.seconds("--timeout", default: defaultWaitTimeout)
    var content = Data()
    if refresh, a.options["--max-age"] != nil {
        content = JSONKind.serialize(["maxAge": try a.seconds("--max-age", default: 0)])
    }
    let loc = try Locations(a)
    try loc.requireSpool()
    let layout = loc.layout

    // The daemon knows a region by its store folder (and its status); a refused request has only
    // a status, which only delete removes (docs/contract.md, "Control files").
    let status = StatusWriter(layout: layout).read(id: id)
    let inStore = !loc.isS3 && Files.entryType(loc.store + "/regions/" + id) == .directory
    guard status != nil || inStore else {
        err("tilespool: no region '\(id)' in \(loc.spool) (no status/\(id).json): nothing sent")
        return ControlExit.notSent
    }
    if act != .delete, !inStore, status?.namesItsRequest != true {
        err("tilespool: '\(id)' is only the status of a refused request (\(status?.error.map { "\($0.code.rawValue): \($0.message)" } ?? "no request")): only delete applies; nothing sent")
        return ControlExit.notSent
    }
    var running: Bool
    do { running = try SpoolLock.isHeld(path: layout.lock) } catch {
        err("tilespool: cannot tell whether a daemon runs: \(error)")
        return ControlExit.notSent
    }
    // delete without a daemon: done here, as prune does, holding the daemon's locks (a `get`
    // stopped half way left a region only a delete can clear: attack round 54).
    if !running, act == .delete {
        if let locks = try OfflineLocks.take(loc, command: "delete") {
            try deleteRegionsWithoutDaemon([(id, status?.namesItsRequest ?? inStore)], loc: loc, writer: StatusWriter(layout: layout), note: "no daemon runs: deleted by tilespool delete")
            _ = locks
            return ControlExit.done
        }
        running = true // a daemon took the lock meanwhile: it is asked
    }
    guard running else {
        err("tilespool: no daemon is running on \(loc.spool) (its lock \(layout.lock) is not held): nothing sent. "
            + "Start one with 'tilespool run', or drop control/\(id).\(action) yourself to have it applied when one starts")
        return ControlExit.notSent
    }

    // Where the answer will be: events appended after this point, or the file refused to rejected/.
    let events = wait ? EventsFollower(path: layout.events) : nil
    let name = "\(id).\(action)"
    let rejection = layout.rejected + "/" + SpoolLayout.rejectedName(name) + ".error"
    let rejectedBefore = FileVersion(path: rejection)

    try Files.makeDirectories(layout.control)
    let final = "\(layout.control)/\(name)"
    try Files.writeAtomically(content, to: final)
    out("\(action) requested for \(id) (\(final))")
    guard let events else { return ControlExit.done }

    var watch = ActionWatch(id: id, action: act)
    let deadline = timeout > 0 ? Date().addingTimeInterval(timeout) : Date.distantFuture
    var lastLockCheck = Date(), daemonGone = false
    while true {
        let batch = events.pollEvents()
        for (i, event) in batch.enumerated() {
            let answer = watch.answer(event)
            if let answer, answer != .started {
                awaitStatusFiles(layout, event: event, after: batch[(i + 1)...], events: events)
            }
            switch answer {
            case nil: continue
            case .started?:
                out("\(id): refresh started")
            case .applied(let state)?:
                out("\(id): \(state)")
                return ControlExit.done
            case .ignored(let why, let state)?:
                err("tilespool: \(action) ignored: \(why) (\(id) stays \(state))")
                return ControlExit.notApplied
            case .failed(let why)?:
                err("tilespool: \(id): \(why)")
                return ControlExit.failed
            }
        }
        if FileVersion(path: rejection) != rejectedBefore, let text = try? String(contentsOfFile: rejection, encoding: .utf8) {
            err("tilespool: the daemon refused control/\(name): \(text.split(separator: "\n").first ?? "")")
            return ControlExit.notApplied
        }
        if Date() >= deadline {
            err("tilespool: no answer from the daemon within \(String(format: "%g", timeout)) s (control/\(name) \(Files.entryType(final) == .missing ? "was taken" : "is still waiting")); it may still act on it")
            return ControlExit.timedOut
        }
        // A daemon that stopped answers nothing more: said once its last lines are read (the
        // events were polled above after the lock was seen free), not after the whole --timeout.
        if daemonGone {
            err("tilespool: the daemon stopped before answering (control/\(name) \(Files.entryType(final) == .missing ? "was taken" : "waits for its next start")); no answer")
            return ControlExit.timedOut
        }
        if Date().timeIntervalSince(lastLockCheck) >= 1 {
            lastLockCheck = Date()
            if (try? SpoolLock.isHeld(path: layout.lock)) != true { daemonGone = true; continue }
        }
        usleep(100_000)
    }
}

/// The daemon appends a state change's event before it rewrites `<id>.json` and `<id>.state`
/// (`StatusWriter.record`, `Daemon.setState`, one at a time), so an answer read in `events.jsonl`
/// may come a moment before the status files say it. `--wait` returns once they have caught up:
/// `<id>.state` holds the event's state (is absent after `deleted`), or a later event of the region
/// is in `events.jsonl` (`after`: the rest of the batch read, then new lines), whose change the
/// daemon began only once this one's files were written. At most 5 seconds: a status file the
/// daemon cannot write is an error in its log, not a hang here.
func awaitStatusFiles(_ layout: SpoolLayout, event: StatusEvent, after: ArraySlice<StatusEvent>, events: EventsFollower) {
    let stateFile = layout.statusState(event.id)
    var later = after.contains { $0.id == event.id }
    let deadline = Date().addingTimeInterval(5)
    while !later && Date() < deadline {
        let text = try? String(contentsOfFile: stateFile, encoding: .utf8)
        if event.state == "deleted" ? text == nil : text?.trimmingCharacters(in: .whitespacesAndNewlines) == event.state { return }
        usleep(5_000)
        later = events.pollEvents().contains { $0.id == event.id }
    }
}
