import Foundation
import Glibc
import TileSpoolCore

/// The folders and files of a spool (the contract in docs/contract.md):
///
///     <spool>/requests/<name>.json     requests dropped by users
///     <spool>/control/<id>.<action>    pause, resume, cancel, delete
///     <spool>/status/<id>.json         full status, replaced atomically
///     <spool>/status/<id>.state        the state word and a newline
///     <spool>/rejected/                request or control files that were refused, with <name>.error
///     <spool>/events.jsonl             one JSON object per line per state change
///     <spool>/exports/                 exports named in requests, written when a region completes
///     <spool>/daemon.lock              flock(2) held by the running daemon
public struct SpoolLayout: Sendable {
    public let root: String
    public init(root: String) { self.root = root }
    public var requests: String { root + "/requests" }
    public var control: String { root + "/control" }
    public var status: String { root + "/status" }
    public var rejected: String { root + "/rejected" }
    public var events: String { root + "/events.jsonl" }
    public var lock: String { root + "/daemon.lock" }
    /// Where the daemon writes the exports a request names (`<id>.<ext>`, `<id>/` for a site).
    public var exports: String { root + "/exports" }

    /// Creates the folders that are missing.
    public func create() throws(SystemError) {
        for d in [requests, control, status, rejected, exports] { try Files.makeDirectories(d) }
    }
    /// The name a refused file gets in `rejected/`: its own, unless the name is so long (over 200
    /// bytes) that `<name>.error` and its temp file would not fit in a file name (255 bytes); then its
    /// first 150 bytes, `-`, and a 64-bit FNV-1a hash of the whole name in hex.
    public static func rejectedName(_ name: String) -> String {
        guard name.utf8.count > 200 else { return name }
        var head = String.UnicodeScalarView()
        var bytes = 0
        for s in name.unicodeScalars {
            bytes += String(s).utf8.count
            if bytes > 150 { break }
            head.append(s)
        }
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in name.utf8 { h = (h ^ UInt64(b)) &* 0x100_0000_01b3 }
        return String(head) + "-" + String(h, radix: 16)
    }
    /// The name a control file is given while the daemon applies its action
    /// (`.tilespool-taken-<id>.<action>`; docs/contract.md, control files): a kill -9 before the
    /// action's effect is on disk leaves it, and the next start applies it again.
    public static let takenPrefix = ".tilespool-taken-"
    /// The path of `<id>.<action>` (`delete`, `pause`, ...) as the daemon has taken it.
    public func takenControl(id: String, action: String) -> String { "\(control)/\(SpoolLayout.takenPrefix)\(id).\(action)" }
    /// True while a delete of region `id` the daemon took is there to be finished (a regular
    /// file `control/.tilespool-taken-<id>.delete`): under way, or cut short by a kill.
    public func deleteTaken(id: String) -> Bool { Files.entryType(takenControl(id: id, action: "delete")) == .regular }
    public func statusJSON(_ id: String) -> String { "\(status)/\(id).json" }
    public func statusState(_ id: String) -> String { "\(status)/\(id).state" }
}

/// The one writer of status files and events. `<id>.json` and `<id>.state` are each replaced
/// atomically (temp file in `status/`, then rename); events are appended with one `write` each.
public final class StatusWriter: @unchecked Sendable {
    public let layout: SpoolLayout
    /// When appending an event would make `events.jsonl` larger than this many bytes, it is first
    /// renamed to `events.jsonl.1` (`.1` to `.2`, ..., the oldest beyond `eventsKeep` removed), so
    /// each file stays at or under the limit (a single longer line aside). 0: never rotate.
    public var eventsMaxBytes = 0
    /// Rotated files kept (`events.jsonl.1` ... `events.jsonl.N`); 0 keeps none.
    public var eventsKeep = 5
    public init(layout: SpoolLayout) { self.layout = layout }

    /// Writes `<id>.json`, then `<id>.state`.
    /// - Throws: `SystemError` when the status folder cannot be written.
    public func write(_ status: RegionStatus) throws(SystemError) {
        let data = StatusCoding.statusFile(status)
        // status/ opened anew, never through a symlink: one swapped in while the daemon runs
        // makes the write fail instead of landing outside the spool.
        let dir = try Directory(path: layout.status, followFinal: false)
        try dir.writeAtomically(data, to: status.id + ".json")
        try dir.writeAtomically(Data((status.state.rawValue + "\n").utf8), to: status.id + ".state")
    }

    /// Records a state that no live region carries (a refused request, a region whose files are
    /// damaged, a repair): its event is appended first, then `<id>.json` and `<id>.state` are written, so
    /// whoever reads the new state in the status files finds its event too.
    /// Its state changed now: `stateChangedAt` is set (it was null in a refused request's status).
    public func record(_ status: RegionStatus, note: String? = nil) {
        var status = status
        status.stateChangedAt = Date()
        event(StatusEvent(id: status.id, state: status.state.rawValue, error: status.error, note: note))
        do { try write(status) } catch { Log.error("cannot write status: \(error)", region: status.id) }
    }

    /// Appends one line to `events.jsonl` (`StatusCoding.eventLine`), rotating the file first
    /// when the line would take it past `eventsMaxBytes`. A failed append is logged, not thrown:
    /// the status files still say the state.
    public func event(_ e: StatusEvent) {
        let line = StatusCoding.eventLine(e)
        if eventsMaxBytes > 0, let size = Files.size(layout.events), size > 0, size + line.count > eventsMaxBytes { rotateEvents() }
        do { try Files.append(line, to: layout.events, onNewLine: true) } catch { Log.error("cannot append to \(layout.events): \(error)") }
    }

    /// `events.jsonl` -> `events.jsonl.1` -> ... -> `events.jsonl.<eventsKeep>` (renames; the
    /// oldest is removed). Readers holding the old file open keep reading it.
    func rotateEvents() {
        let base = layout.events
        Files.remove("\(base).\(max(eventsKeep, 1))")
        if eventsKeep > 1 { for n in stride(from: eventsKeep - 1, through: 1, by: -1) { Glibc.rename("\(base).\(n)", "\(base).\(n + 1)") } }
        if eventsKeep == 0 { Files.remove(base) } else { Glibc.rename(base, base + ".1") }
    }

    /// Removes `<id>.state`, then `<id>.json`.
    public func remove(id: String) {
        guard let dir = try? Directory(path: layout.status, followFinal: false) else { return }
        // `.state` first, the reverse of `write`: a kill -9 in between leaves the JSON, which
        // `status` and `verify` show, never a lone `.state` that a script reads as the region's
        // (attack round 59: a deleted region's `pausedUser` stayed in `<id>.state`).
        dir.remove(id + ".state")
        dir.remove(id + ".json")
    }

    /// Reads `<id>.json`; nil when absent or unreadable.
    ///
    /// A file whose `id` is not a valid region id or is not `id` (a status file edited or planted
    /// by hand) is not a status: nil. Callers use the id to name files (`prune` removes
    /// `<store>/regions/<id>`), so it must be the file's own, valid name (`RequestValidator.isValidID`).
    public func read(id: String) -> RegionStatus? {
        guard RequestValidator.isValidID(id),
              let data = try? Files.readRegularFile(layout.statusJSON(id), limit: RequestValidator.maxStoredSize),
              let status = StatusCoding.status(data), status.id == id else { return nil }
        return status
    }

    /// Every status in `status/`, sorted by id, and the ids of `status/<id>.json` files that are
    /// there but not statuses `read` takes (damaged, cut short, written by hand or by a newer
    /// version), which `tilespool status` names rather than leave out without a word. Each file
    /// is read once.
    public func scan() -> (statuses: [RegionStatus], unreadable: [String]) {
        var statuses: [RegionStatus] = [], unreadable: [String] = []
        for name in Files.list(layout.status).filter({ $0.hasSuffix(".json") && !$0.hasPrefix(".") }).sorted() {
            let id = String(name.dropLast(5))
            if let st = read(id: id) { statuses.append(st) } else if RequestValidator.isValidID(id) { unreadable.append(id) }
        }
        return (statuses, unreadable)
    }

    /// Every status in `status/`, sorted by id (`scan`'s statuses).
    public func readAll() -> [RegionStatus] { scan().statuses }
}

/// Log entries on standard error, one line each, for journald and log shippers (docs/operations.md):
///
///     time=2026-12-02T05:00:00Z level=info region=alps state=downloading msg="state change"
///
/// `--log-format logfmt` (the default) writes `key=value` pairs (`LogFmt`) in a stable order:
/// `time`, `level` (`info`, `warning`, `error`), `region`, `state`, `msg`, then the entry's own
/// fields, then `url`; `--log-format json` writes the same keys as one JSON object per line. URLs
/// given as `url:` are redacted here (`Redaction.redact`); URLs inside `message` must be redacted
/// by the caller. One `write(2)` per entry, so entries from other threads never interleave.
public enum Log {
    /// How entries are written.
    public enum Format: String, Sendable, CaseIterable { case logfmt, json }
    /// Set once at start-up (`tilespool run --log-format`), before any other thread logs.
    nonisolated(unsafe) public static var format: Format = .logfmt
    /// False: `info` entries are not written, warnings and errors are (`tilespool get`, which
    /// shows a progress line instead). Set once at start-up, before any other thread logs.
    nonisolated(unsafe) public static var showsInfo = true

    public static func info(_ message: String, region: String? = nil, state: String? = nil, url: String? = nil, _ fields: [(String, Any)] = []) {
        if showsInfo { emit("info", message, region: region, state: state, url: url, fields) }
    }
    public static func warning(_ message: String, region: String? = nil, state: String? = nil, url: String? = nil, _ fields: [(String, Any)] = []) {
        emit("warning", message, region: region, state: state, url: url, fields)
    }
    public static func error(_ message: String, region: String? = nil, state: String? = nil, url: String? = nil, _ fields: [(String, Any)] = []) {
        emit("error", message, region: region, state: state, url: url, fields)
    }

    /// The entry's text with its newline (exposed for tests of the format).
    public static func entry(level: String, _ message: String, region: String? = nil, state: String? = nil, url: String? = nil,
                             _ fields: [(String, Any)] = [], time: Date = Date(), format: Format = Log.format) -> String {
        var all: [(String, Any)] = [("time", Timestamp.iso8601(time)), ("level", level)]
        if let region { all.append(("region", region)) }
        if let state { all.append(("state", state)) }
        all.append(("msg", message))
        all += fields
        if let url { all.append(("url", Redaction.redact(url))) }
        switch format {
        case .logfmt:
            return LogFmt.line(all.map { ($0.0, "\($0.1)") }) + "\n"
        case .json:
            var o: [String: Any] = [:]
            for (k, v) in all where o[k] == nil { o[k] = (v is Int || v is Double || v is Bool) ? v : "\(v)" }
            return String(decoding: JSONKind.serialize(o), as: UTF8.self) + "\n"
        }
    }

    private static func emit(_ level: String, _ message: String, region: String?, state: String?, url: String?, _ fields: [(String, Any)]) {
        let line = entry(level: level, message, region: region, state: state, url: url, fields)
        _ = line.withCString { write(2, $0, strlen($0)) }
    }
}
