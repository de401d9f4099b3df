import Foundation
import Glibc
import TileSpoolCore
import TileSpoolIO

/// Exit statuses of `tilespool submit` and `tilespool get` (docs/contract.md, "The command
/// line"): 0, 1 and 2 as every command; the others say how the region ended.
enum RegionExit {
    /// `submit`: written (with `--wait`: the region completed); `get`: the output was written.
    static let done: Int32 = 0
    /// Nothing done: an invalid request, a request of that id still waiting in `requests/`, a
    /// region of that id still unfinished, a daemon holding the lock (`get`), an export that failed.
    static let notDone: Int32 = 1
    /// `submit --wait`: the daemon refused the request (moved it to `rejected/`, or failed it on
    /// arrival as `invalidRequest`, `tileLimitExceeded` or `policyRefused`).
    static let refused: Int32 = 3
    /// The region ended `failed` (a refresh of it failed).
    static let failed: Int32 = 4
    /// `submit --wait`: not ended within `--timeout` (the daemon goes on with it).
    static let timedOut: Int32 = 5
    /// The region ended `failedStorage` (disk full, quota, read-only store).
    static let failedStorage: Int32 = 6
    /// The region was cancelled (a refresh of it cancelled).
    static let cancelled: Int32 = 7
    /// `submit --wait`: the region was deleted.
    static let deleted: Int32 = 8
    /// `submit --wait`: no daemon runs on the spool, or it stopped while waiting (the request
    /// stays in `requests/` or the region `queued`, for its next start).
    static let noDaemon: Int32 = 9
    /// `get`: the server could not be reached after the retries (`pausedNetwork`); a re-run goes on.
    static let network: Int32 = 10
    /// `get`: stopped by SIGINT, SIGTERM, SIGQUIT or SIGHUP; a re-run goes on from where it stopped.
    static let interrupted: Int32 = 130
}

let submitHelp = """
usage: tilespool submit FILE|- [--geometry FILE | --corridor FILE --buffer-meters N]
                        [--wait [--timeout SECONDS]] [--max-tiles N] [--allow-host HOST]...
                        [--spool DIR] [--store DIR]

Checks the request FILE (- reads standard input, whose request must have an "id") exactly as
`tilespool plan` does, the way the daemon will (a style request's style and TileJSON are
fetched), then writes it atomically as <spool>/requests/<id>.json (a dotfile in requests/,
fsynced, renamed into place without replacing anything) and prints the id on standard output.
Nothing is written when the check fails, when the spool folder does not exist, when
requests/<id>.json is already there (the daemon has not read it yet), or when region <id> is
unfinished (queued, downloading, paused, failedStorage: the daemon would refuse it as
duplicateId). Over a finished region (completed, failed, cancelled) the daemon's rules apply
(docs/contract.md): the request replaces it, or refreshes it when it downloads exactly the same.
No daemon needs to run: one handles the file when it starts.

options:
\(RegionFileOptions.help)
--wait               follow the region until it ends (events.jsonl and status/<id>.json): a
                     progress line on a terminal, else a line per state change, on standard error
--timeout SECONDS    with --wait: give up after SECONDS (default 0: no limit)
--max-tiles N        the limit the check uses (default 1000000, as `tilespool run`)
--allow-host HOST    as for `tilespool run` (repeatable)

exit status:
  0  written; with --wait: the region completed
  1  nothing written (the check failed, no spool folder, requests/<id>.json exists, the region
     is unfinished)
  2  a usage mistake
  3  with --wait: the daemon refused the request (rejected/, or failed on arrival as
     invalidRequest, tileLimitExceeded or policyRefused)
  4  with --wait: the region failed (or a refresh of it failed)
  5  with --wait: not ended within --timeout (the daemon goes on with it)
  6  with --wait: the region ended failedStorage (disk full, --max-store-bytes, read-only)
  7  with --wait: the region was cancelled
  8  with --wait: the region was deleted
  9  with --wait: no daemon runs on the spool, or it stopped while waiting (the request waits
     for its next start)
"""

/// Reads a request: the file at `path` (a regular file, at most a request's 1 MiB) or standard
/// input for `-`. The name in `requests/` that gives a default id is the file's name (none for
/// standard input).
/// - Throws: `SystemError` for a file that cannot be read; `CommandFailure` for standard input
///   over 1 MiB.
func readRequestArgument(_ path: String) throws -> (data: Data, fileName: String) {
    if path == "-" {
        var data = Data()
        while let chunk = try FileHandle.standardInput.read(upToCount: 65536), !chunk.isEmpty {
            data.append(chunk)
            if data.count > RequestValidator.maxFileSize { throw RegionError(code: .invalidRequest, message: "the request on standard input is larger than \(RequestValidator.maxFileSize) bytes") }
        }
        return (data, "-")
    }
    let data: Data
    do {
        data = try Files.readRegularFile(path, limit: RequestValidator.maxFileSize)
    } catch {
        // The daemon's words for the same file (it was `read FILE: EFBIG (File too large)`).
        if error.errno == EFBIG { throw RegionError(code: .invalidRequest, message: "the request file is larger than \(RequestValidator.maxFileSize) bytes") }
        // The daemon's words for a request entry that is not a regular file (docs/contract.md).
        if error.errno == ELOOP || error.errno == EINVAL {
            throw RegionError(code: .invalidRequest, message: "\(path) is not a regular file (a symlink, a FIFO or a folder): give the request file itself, or '-' with the request on standard input ('< FILE' follows a link; request files are read without following one, as the daemon reads requests/)")
        }
        throw error
    }
    return (data, (path as NSString).lastPathComponent)
}

/// Writes `data` as `<requests>/<id>.json` the way the contract asks of anyone who drops a
/// request: a new dotfile `.tmp-<id>.json-<pid>-<n>` made in `requests/` with O_EXCL (the daemon
/// ignores dotfiles), written, fsynced, then renamed to `<id>.json` with RENAME_NOREPLACE, and the
/// folder synced. `requests/` is opened without following a symlink at its name (made when
/// missing), so nothing is written where a planted link points.
/// - Returns: false when `<id>.json` is already there (nothing written).
/// - Throws: `SystemError` for anything else; the dotfile is removed then.
func writeRequestFile(_ data: Data, id: String, layout: SpoolLayout) throws -> Bool {
    if Files.entryType(layout.requests) == .missing { try Files.makeDirectories(layout.requests) }
    let folder: Directory
    do { folder = try Directory(path: layout.requests, followFinal: false) } catch {
        if Files.entryType(layout.requests) != .directory {
            throw SystemError("open", layout.requests + " (not a folder; a symlink there is never followed)", errno: error.errno)
        }
        throw error
    }
    let name = id + ".json"
    let tmp = Directory.tempName(for: name) // the one form of temp names (`SaveTempName` reads it)
    let fd = try folder.createFile(tmp)
    do throws(SystemError) {
        try Files.writeAll(fd, data, path: folder.display(tmp))
        try Files.fsync(fd, path: folder.display(tmp))
    } catch {
        close(fd); _ = folder.remove(tmp); throw error
    }
    close(fd)
    do {
        try folder.rename(tmp, to: folder, name, mode: .noReplace)
    } catch {
        _ = folder.remove(tmp)
        if error.errno == EEXIST { return false }
        throw error
    }
    try folder.sync()
    return true
}

/// How a followed region ended (`RegionFollower`).
enum RegionEnd: Equatable {
    case completed
    case refused(String)
    case failed(String)
    case failedStorage(String)
    case cancelled
    case deleted
    case pausedNetwork(String)

    /// The exit status it gives (`RegionExit`).
    var exitStatus: Int32 {
        switch self {
        case .completed: return RegionExit.done
        case .refused: return RegionExit.refused
        case .failed: return RegionExit.failed
        case .failedStorage: return RegionExit.failedStorage
        case .cancelled: return RegionExit.cancelled
        case .deleted: return RegionExit.deleted
        case .pausedNetwork: return RegionExit.network
        }
    }
}

/// Follows one region from the moment its request is written, from the files a script reads:
/// the lines of `events.jsonl` appended since (`EventsFollower`, across rotations), the
/// `rejected/<name>.error` file, and `status/<id>.json` for the progress line. Used by
/// `submit --wait` and `get`.
final class RegionFollower {
    let id: String
    let layout: SpoolLayout
    /// True once the daemon accepted the request (a `queued` line for the id).
    private(set) var accepted = false
    /// Whether `pausedNetwork` ends the follow (`get`) or is waited through (`submit --wait`,
    /// the daemon resumes by itself).
    let endAtPausedNetwork: Bool
    private let events: EventsFollower
    private let rejection: String
    private let rejectedBefore: FileVersion?
    private let terminal: Bool
    private var lastDraw = 0.0
    private var drawn = false
    private var lastState = ""

    /// Starts following: make it before the request is written, so no line is missed.
    init(id: String, layout: SpoolLayout, endAtPausedNetwork: Bool) {
        self.id = id
        self.layout = layout
        self.endAtPausedNetwork = endAtPausedNetwork
        events = EventsFollower(path: layout.events)
        rejection = layout.rejected + "/" + SpoolLayout.rejectedName(id + ".json") + ".error"
        rejectedBefore = FileVersion(path: rejection)
        terminal = isatty(2) == 1
    }

    /// The end, if the region has ended since the last call; prints state changes (a plain line
    /// each, off a terminal) or redraws the progress line (on a terminal, at most 5 times a second).
    func check() -> RegionEnd? {
        let batch = events.pollEvents()
        for (i, e) in batch.enumerated() where e.id == id {
            if let end = end(at: e) {
                awaitStatusFiles(layout, event: e, after: batch[(i + 1)...], events: events)
                return end
            }
        }
        if !accepted, FileVersion(path: rejection) != rejectedBefore, let text = try? String(contentsOfFile: rejection, encoding: .utf8) {
            return .refused(String(text.split(separator: "\n").first ?? ""))
        }
        if terminal { draw(force: false) }
        return nil
    }

    /// The end `e` (an event of this region) tells, if any; notes its state (printed off a terminal).
    private func end(at e: StatusEvent) -> RegionEnd? {
        let state = e.state
        if e.ignored != nil { return nil }
        let error = e.error.map { "\($0.code.rawValue): \($0.message)" } ?? ""
        if let refresh = e.refresh {
            if refresh == "failed" { return .failed("the refresh failed: \(error)") }
            if refresh == "cancelled" { return .cancelled }
        }
        if state != lastState { lastState = state; if !terminal { err("\(id): \(state)") } }
        switch state {
        case "queued": accepted = true
        case "completed": if e.refresh != "started" { return .completed }
        case "failed":
            if !accepted, let code = e.error?.code, [.invalidRequest, .tileLimitExceeded, .policyRefused].contains(code) { return .refused(error) }
            return .failed(error)
        case "failedStorage": return .failedStorage(error)
        case "cancelled": return .cancelled
        case "deleted": return .deleted
        case "pausedNetwork" where endAtPausedNetwork: return .pausedNetwork(error)
        default: break
        }
        return nil
    }

    /// Redraws the progress line from `status/<id>.json` (terminal only).
    func draw(force: Bool) {
        let now = Date().timeIntervalSince1970
        guard terminal, force || now - lastDraw >= 0.2, let st = StatusWriter(layout: layout).read(id: id) else { return }
        lastDraw = now
        let p = st.progress
        var line = "\(id): \(st.state.rawValue) \(p.tilesCompleted)/\(p.tilesExpected > 0 ? String(p.tilesExpected) : "?") tiles, \(formatBytes(p.bytesCompleted))"
        if let bps = st.bytesPerSecond { line += ", \(formatBytes(displayCount(bps)))/s" }
        if let eta = st.etaSeconds { line += ", ETA \(formatDuration(eta))" }
        // \r, the line, then clear to the end of the line (a shorter line leaves nothing behind).
        FileHandle.standardError.write(Data(("\r" + TerminalText.safe(line) + "\u{1B}[K").utf8))
        drawn = true
    }

    /// Ends the progress line (a newline) if one was drawn.
    func finishLine() {
        if drawn { FileHandle.standardError.write(Data("\n".utf8)); drawn = false }
    }
}

/// Prints how a region ended, on standard error (nothing for `completed`).
func report(_ end: RegionEnd, id: String) {
    switch end {
    case .completed: break
    case .refused(let why): err("tilespool: the daemon refused the request for \(id): \(why)")
    case .failed(let why): err("tilespool: \(id) failed: \(why)")
    case .failedStorage(let why): err("tilespool: \(id) failedStorage: \(why) (free space, then resume)")
    case .cancelled: err("tilespool: \(id) was cancelled")
    case .deleted: err("tilespool: \(id) was deleted")
    case .pausedNetwork(let why): err("tilespool: \(id): the server cannot be reached (\(why)); run the same command again to go on")
    }
}

func commandSubmit(_ argv: [String]) throws -> Int32 {
    let a = try Arguments(argv, flags: commonFlags.union(["--wait"]),
                          valued: commonValued.union(["--timeout", "--max-tiles", "--allow-host"]).union(RegionFileOptions.valued))
    if a.flags.contains("--help") { out(submitHelp); return 0 }
    guard a.positionals.count == 1, let path = a.positionals.first else { throw UsageError("submit takes one request file (or - for standard input)") }
    let wait = a.flags.contains("--wait")
    if a.options["--timeout"] != nil && !wait { throw UsageError("--timeout goes with --wait") }
    let timeout = try a.seconds("--timeout", default: 0)
    let loc = try Locations(a)
    let (raw, fileName) = try readRequestArgument(path)
    let data = try RegionFileOptions.embed(raw, a)
    let checked = try CheckedRequest(data, fileName: fileName, a)
    if let e = checked.overLimit { throw e }
    let id = checked.request.id
    let layout = loc.layout
    // A mistyped --spool must not become a new spool no daemon watches (requests/ is made in an
    // existing spool folder, as `tilespool run` would make it).
    guard Files.entryType(loc.spool) == .directory else {
        throw CommandFailure("no spool at \(loc.spool) (is --spool right? 'tilespool run --spool DIR' makes one): nothing written")
    }
    // Read before the write: once written, the daemon may take the request and write its own
    // status at once (attack round 49: a new id was noted as "queued: this request replaces it").
    let before = StatusWriter(layout: layout).read(id: id)
    if let st = before, st.namesItsRequest, !st.state.isTerminal {
        err("tilespool: region '\(id)' is \(st.state.rawValue), not finished: the daemon would refuse the request (duplicateId); cancel or delete it first. Nothing written")
        return RegionExit.notDone
    }
    let follower = wait ? RegionFollower(id: id, layout: layout, endAtPausedNetwork: false) : nil
    guard try writeRequestFile(data, id: id, layout: layout) else {
        err("tilespool: \(layout.requests)/\(id).json is already there (the daemon has not read it yet): nothing written")
        return RegionExit.notDone
    }
    out(id)
    if let st = before, st.namesItsRequest {
        err("tilespool: note: region '\(id)' is \(st.state.rawValue): this request replaces it, or refreshes it if it downloads exactly the same (docs/contract.md)")
    }
    guard let follower else { return RegionExit.done }
    let deadline = timeout > 0 ? Date().addingTimeInterval(timeout) : Date.distantFuture
    var lastLockCheck = 0.0
    while true {
        if let end = follower.check() {
            follower.finishLine()
            report(end, id: id)
            return end.exitStatus
        }
        let now = Date().timeIntervalSince1970
        if now - lastLockCheck >= 1 {
            lastLockCheck = now
            if (try? SpoolLock.isHeld(path: layout.lock)) != true {
                follower.finishLine()
                err("tilespool: no daemon is running on \(loc.spool) (its lock is not held): \(id) waits for the next 'tilespool run'")
                return RegionExit.noDaemon
            }
        }
        if Date() >= deadline {
            follower.finishLine()
            err("tilespool: \(id) did not end within \(String(format: "%g", timeout)) s; the daemon goes on with it")
            return RegionExit.timedOut
        }
        usleep(100_000)
    }
}
