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
    public func statusJSON(_ id: String) -> String { "\(status)/\(id).json" }
    public func statusState(_ id: String) -> String { "\(status)/\(id).state" }
}

/// A region's status as written to `status/<id>.json`.
public struct RegionStatus: @unchecked Sendable {
    public var id: String
    public var state: RegionState
    public var progress: RegionProgress
    public var error: RegionError?
    /// The request with defaults filled in (credentials redacted), or nil for an unreadable request.
    public var request: [String: Any]?
    /// The request's `context`, verbatim (NSNull when absent).
    public var context: Any
    /// When the status was written.
    public var updatedAt: Date
    /// The request's `exports` once the region completed: one object per export, `{"format",
    /// "source"?, "state": "writing"|"written"|"failed", "path", "bytes", "tiles", "sha256",
    /// "error"?}`; nil when the request names none.
    public var exports: [[String: Any]]?
    /// True while a refresh of the region is under way (docs/refresh.md): the region is `queued`,
    /// `downloading` or `pausedUser`, and its previous pack stays usable until the refresh completes.
    public var refreshing = false
    /// While `downloading`: tiles and bytes per second over the last seconds (`RateWindow`), and
    /// the seconds left at that rate; nil (JSON null) otherwise, and `etaSeconds` stays null until
    /// it is meaningful (exact plan, a few seconds of samples, something moving).
    public var tilesPerSecond: Double?
    public var bytesPerSecond: Double?
    public var etaSeconds: Double?
    /// When the region first went `downloading` (kept across pauses and restarts), when it went
    /// `completed`, and when it entered its current state (what `tilespool prune` ages by).
    public var startedAt: Date?
    public var completedAt: Date?
    public var stateChangedAt: Date?
    /// Bytes of the objects that only this region's manifest references (what deleting it and
    /// running gc would free); nil until the daemon first worked it out.
    public var uniqueBytes: Int?
    /// While a downloading region waits on a server's `Retry-After`: when it will ask again
    /// (written as `throttledUntil`, RFC 3339 UTC); nil otherwise (the field is then absent).
    public var throttledUntil: Date?
    /// What a person should look at although the region goes on (`RegionWarning`); empty: none.
    public var warnings: [RegionWarning] = []
    /// The ground the request covers (`RegionArea.jsonObject`); nil for a request not read.
    public var area: [String: Any]?

    public init(id: String, state: RegionState, progress: RegionProgress, error: RegionError?, request: [String: Any]?, context: Any, updatedAt: Date = Date()) {
        self.id = id; self.state = state; self.progress = progress; self.error = error
        self.request = request; self.context = context; self.updatedAt = updatedAt
    }

    /// The JSON object of `<id>.json`.
    public var jsonObject: [String: Any] {
        var o: [String: Any] = ["id": id, "state": state.rawValue, "progress": progress.jsonObject,
                                "error": error?.jsonObject ?? NSNull(), "request": request ?? NSNull(), "context": context,
                                "updatedAt": Timestamp.iso8601(updatedAt), "refreshing": refreshing]
        let null = NSNull()
        o["tilesPerSecond"] = tilesPerSecond.map { ($0 * 100).rounded() / 100 } ?? null
        o["bytesPerSecond"] = bytesPerSecond.map { $0.rounded() } ?? null
        o["etaSeconds"] = etaSeconds ?? null
        o["startedAt"] = startedAt.map(Timestamp.iso8601) ?? null
        o["completedAt"] = completedAt.map(Timestamp.iso8601) ?? null
        o["stateChangedAt"] = stateChangedAt.map(Timestamp.iso8601) ?? null
        o["uniqueBytes"] = uniqueBytes ?? null
        if let exports { o["exports"] = exports }
        if let throttledUntil { o["throttledUntil"] = Timestamp.iso8601(throttledUntil) }
        o["warnings"] = warnings.map(\.jsonObject)
        o["area"] = area ?? null
        return o
    }

    /// Reads a status written by `jsonObject`; nil when it is not one.
    public init?(jsonObject o: Any) {
        guard let o = o as? [String: Any], let id = o["id"] as? String, let s = o["state"] as? String,
              let state = RegionState(rawValue: s) else { return nil }
        self.init(id: id, state: state, progress: RegionProgress(jsonObject: o["progress"]), error: RegionError(jsonObject: o["error"]),
                  request: o["request"] as? [String: Any], context: o["context"] ?? NSNull(),
                  updatedAt: (o["updatedAt"] as? String).flatMap(Timestamp.parse) ?? Date(timeIntervalSince1970: 0))
        exports = o["exports"] as? [[String: Any]]
        refreshing = o["refreshing"] as? Bool ?? false
        tilesPerSecond = (o["tilesPerSecond"] as? NSNumber)?.doubleValue
        bytesPerSecond = (o["bytesPerSecond"] as? NSNumber)?.doubleValue
        etaSeconds = (o["etaSeconds"] as? NSNumber)?.doubleValue
        startedAt = (o["startedAt"] as? String).flatMap(Timestamp.parse)
        completedAt = (o["completedAt"] as? String).flatMap(Timestamp.parse)
        stateChangedAt = (o["stateChangedAt"] as? String).flatMap(Timestamp.parse)
        uniqueBytes = o["uniqueBytes"].flatMap(JSONKind.integer)
        throttledUntil = (o["throttledUntil"] as? String).flatMap(Timestamp.parse)
        warnings = (o["warnings"] as? [Any] ?? []).compactMap(RegionWarning.init(jsonObject:))
        area = o["area"] as? [String: Any]
    }
}

/// RFC 3339 timestamps in UTC with second precision, as in `updatedAt` and `events.jsonl`.
public enum Timestamp {
    public static func iso8601(_ d: Date) -> String {
        var t = time_t(d.timeIntervalSince1970)
        var tmv = tm()
        gmtime_r(&t, &tmv)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02dZ", tmv.tm_year + 1900, tmv.tm_mon + 1, tmv.tm_mday,
                      tmv.tm_hour, tmv.tm_min, tmv.tm_sec)
    }
    public static func parse(_ s: String) -> Date? {
        let u = Array(s.utf8)
        guard u.count == 20, u[4] == 0x2D, u[7] == 0x2D, u[10] == 0x54, u[13] == 0x3A, u[16] == 0x3A, u[19] == 0x5A else { return nil }
        func num(_ a: Int, _ b: Int) -> Int32? { Int32(String(decoding: u[a..<b], as: UTF8.self)) }
        guard let y = num(0, 4), let mo = num(5, 7), let d = num(8, 10), let h = num(11, 13), let mi = num(14, 16), let sec = num(17, 19) else { return nil }
        var tmv = tm()
        tmv.tm_year = y - 1900; tmv.tm_mon = mo - 1; tmv.tm_mday = d; tmv.tm_hour = h; tmv.tm_min = mi; tmv.tm_sec = sec
        return Date(timeIntervalSince1970: TimeInterval(timegm(&tmv)))
    }
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
        var data = JSONKind.serialize(status.jsonObject, pretty: true)
        data.append(0x0A)
        // status/ opened anew, never through a symlink: one swapped in while the daemon runs
        // makes the write fail instead of landing outside the spool.
        let dir = try Directory(path: layout.status, followFinal: false)
        try dir.writeAtomically(data, to: status.id + ".json")
        try dir.writeAtomically(Data((status.state.rawValue + "\n").utf8), to: status.id + ".state")
    }

    /// Records a state that no live region carries (a refused request, a region whose files are
    /// damaged, a repair): its event is appended first, then `<id>.json` and `<id>.state` are written, so
    /// whoever reads the new state in the status files finds its event too.
    public func record(_ status: RegionStatus, extra: [String: Any] = [:]) {
        event(id: status.id, state: status.state.rawValue, error: status.error, extra: extra)
        do { try write(status) } catch { Log.error("cannot write status: \(error)", region: status.id) }
    }

    /// Appends one line to `events.jsonl`: `{"time","id","state","error"}` plus `extra` fields
    /// (e.g. `action` and `ignored` for an action that did not apply).
    public func event(id: String, state: String, error: RegionError?, extra: [String: Any] = [:]) {
        var o: [String: Any] = ["time": Timestamp.iso8601(Date()), "id": id, "state": state,
                                "error": error?.jsonObject ?? NSNull()]
        for (k, v) in extra { o[k] = v }
        var line = JSONKind.serialize(o)
        line.append(0x0A)
        if eventsMaxBytes > 0, let size = Files.size(layout.events), size > 0, size + line.count > eventsMaxBytes { rotateEvents() }
        do { try Files.append(line, to: layout.events) } catch { Log.error("cannot append to \(layout.events): \(error)") }
    }

    /// `events.jsonl` -> `events.jsonl.1` -> ... -> `events.jsonl.<eventsKeep>` (renames; the
    /// oldest is removed). Readers holding the old file open keep reading it.
    func rotateEvents() {
        let base = layout.events
        Files.remove("\(base).\(max(eventsKeep, 1))")
        if eventsKeep > 1 { for n in stride(from: eventsKeep - 1, through: 1, by: -1) { Glibc.rename("\(base).\(n)", "\(base).\(n + 1)") } }
        if eventsKeep == 0 { Files.remove(base) } else { Glibc.rename(base, base + ".1") }
    }

    /// Removes `<id>.json` and `<id>.state`.
    public func remove(id: String) {
        guard let dir = try? Directory(path: layout.status, followFinal: false) else { return }
        dir.remove(id + ".json")
        dir.remove(id + ".state")
    }

    /// Reads `<id>.json`; nil when absent or unreadable.
    ///
    /// A file whose `id` is not a valid region id or is not `id` (a status file edited or planted
    /// by hand) is not a status: nil. Callers use the id to name files (`prune` removes
    /// `<store>/regions/<id>`), so it must be the file's own, valid name (`RequestValidator.isValidID`).
    public func read(id: String) -> RegionStatus? {
        guard RequestValidator.isValidID(id),
              let data = try? Files.readRegularFile(layout.statusJSON(id), limit: 4 << 20),
              let o = try? JSONKind.parse(data), let status = RegionStatus(jsonObject: o), status.id == id else { return nil }
        return status
    }

    /// Every status in `status/`, sorted by id.
    public func readAll() -> [RegionStatus] {
        Files.list(layout.status).filter { $0.hasSuffix(".json") && !$0.hasPrefix(".") }.sorted()
            .compactMap { read(id: String($0.dropLast(5))) }
    }
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
