// The status model: what `<spool>/status/<id>.json` and each line of `events.jsonl` say, as
// typed `Codable` values (docs/contract.md, "Status files" and "events.jsonl"). The daemon builds
// a `RegionStatus` in one place and writes it, the metrics and `tilespool status` read the same
// values; `StatusCoding` is the one encoder and decoder of both files (Foundation's JSONEncoder
// and JSONDecoder: sorted keys, `/` unescaped, the status pretty-printed).
import Foundation

/// RFC 3339 timestamps in UTC with second precision, as in `updatedAt` and `events.jsonl`.
public enum Timestamp {
    /// `2026-12-02T05:00:00Z` (the fraction of a second dropped).
    public static func iso8601(_ d: Date) -> String {
        var t = time_t(d.timeIntervalSince1970)
        var tmv = tm()
        gmtime_r(&t, &tmv)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02dZ", tmv.tm_year + 1900, tmv.tm_mon + 1, tmv.tm_mday,
                      tmv.tm_hour, tmv.tm_min, tmv.tm_sec)
    }
    /// Reads what `iso8601` writes; nil for anything else, a date that does not exist included
    /// (February 30, hour 25: `timegm` would roll them over; attack round 11).
    public static func parse(_ s: String) -> Date? {
        let u = Array(s.utf8)
        guard u.count == 20, u[4] == 0x2D, u[7] == 0x2D, u[10] == 0x54, u[13] == 0x3A, u[16] == 0x3A, u[19] == 0x5A else { return nil }
        func num(_ a: Int, _ b: Int) -> Int32? { Int32(String(decoding: u[a..<b], as: UTF8.self)) }
        guard let y = num(0, 4), let mo = num(5, 7), let d = num(8, 10), let h = num(11, 13), let mi = num(14, 16), let sec = num(17, 19) else { return nil }
        var tmv = tm()
        tmv.tm_year = y - 1900; tmv.tm_mon = mo - 1; tmv.tm_mday = d; tmv.tm_hour = h; tmv.tm_min = mi; tmv.tm_sec = sec
        let date = Date(timeIntervalSince1970: TimeInterval(timegm(&tmv)))
        return iso8601(date) == s ? date : nil
    }
}

/// Coding keys given as strings: the status files' field names.
struct FieldKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(_ s: String) { stringValue = s }
    init?(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

extension KeyedEncodingContainer where K == FieldKey {
    /// `value`, or JSON `null` when it is nil (the status writes its optional fields as null).
    mutating func encodeOrNull<T: Encodable>(_ value: T?, _ key: String) throws {
        if let value { try encode(value, forKey: FieldKey(key)) } else { try encodeNil(forKey: FieldKey(key)) }
    }
    /// A number, or JSON `null` when it is nil or not finite (JSON has no NaN or infinity).
    mutating func encodeOrNull(_ value: Double?, _ key: String) throws {
        if let value, value.isFinite { try encode(value, forKey: FieldKey(key)) } else { try encodeNil(forKey: FieldKey(key)) }
    }
    /// `value` when it is not nil; nothing otherwise (the field is absent).
    mutating func encodeIfGiven<T: Encodable>(_ value: T?, _ key: String) throws {
        if let value { try encode(value, forKey: FieldKey(key)) }
    }
    mutating func encodeTime(_ date: Date?, _ key: String, nullWhenAbsent: Bool = true) throws {
        if let date { try encode(Timestamp.iso8601(date), forKey: FieldKey(key)) } else if nullWhenAbsent { try encodeNil(forKey: FieldKey(key)) }
    }
}

/// An element of a list read as far as it goes: `value` is nil for an element that does not
/// decode (a damaged warning drops itself, not the whole list).
struct Lossy<T: Decodable>: Decodable {
    let value: T?
    init(from decoder: Decoder) throws { value = try? T(from: decoder) }
}

extension KeyedDecodingContainer where K == FieldKey {
    /// The field as `T`, nil when absent, null or of another type (status files written by
    /// earlier versions, or edited by hand, are read as far as they go).
    func lenient<T: Decodable>(_ type: T.Type, _ key: String) -> T? {
        (try? decodeIfPresent(T.self, forKey: FieldKey(key))) ?? nil
    }
    func time(_ key: String) -> Date? { lenient(String.self, key).flatMap(Timestamp.parse) }
}

extension RegionError: Codable {
    /// `{"code", "message", "url"?, "httpStatus"?}`; an unknown code does not decode.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: FieldKey.self)
        let raw = try c.decode(String.self, forKey: FieldKey("code"))
        guard let code = ErrorCode(rawValue: raw) else {
            throw DecodingError.dataCorruptedError(forKey: FieldKey("code"), in: c, debugDescription: "unknown error code \(raw)")
        }
        self.init(code: code, message: c.lenient(String.self, "message") ?? "")
        url = c.lenient(String.self, "url") // as written: already redacted
        httpStatus = c.lenient(Int.self, "httpStatus")
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: FieldKey.self)
        try c.encode(code.rawValue, forKey: FieldKey("code"))
        try c.encode(message, forKey: FieldKey("message"))
        try c.encodeIfGiven(url, "url")
        try c.encodeIfGiven(httpStatus, "httpStatus")
    }
}

extension RegionWarning: Codable {
    /// `{"code", "message"}`.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: FieldKey.self)
        self.init(code: try c.decode(String.self, forKey: FieldKey("code")), message: c.lenient(String.self, "message") ?? "")
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: FieldKey.self)
        try c.encode(code, forKey: FieldKey("code"))
        try c.encode(message, forKey: FieldKey("message"))
    }
}

/// A region's status as written to `status/<id>.json` (docs/contract.md, "Status files"): the
/// one model of it. The daemon builds it (`Daemon.statusValue`), `StatusWriter` writes it,
/// `tilespool status`, `wait`, `get` and `prune` read it, and the metrics file is made from it.
public struct RegionStatus: Sendable, Equatable, Codable {
    public var id: String
    public var state: RegionState
    public var progress: RegionProgress
    public var error: RegionError?
    /// The request with defaults filled in (credentials redacted), or nil for an unreadable request.
    public var request: JSONValue?
    /// True when the status names its request, as every region the daemon took has; false for
    /// a refused request's (`request` null or absent). On a store other daemons write (S3), the
    /// region of that id in the store is then not this spool's: it is never loaded, resumed or
    /// removed from this spool (attack round 53: a refused request's status made a spool take
    /// another daemon's region, and its `prune` removed it).
    public var namesItsRequest: Bool {
        if let request, request != .null { return true }
        return false
    }
    /// True when the status says `failed` with `storeDamaged` already: the daemon's start and
    /// `verify --repair` mark a region so once, not again.
    public var isMarkedStoreDamaged: Bool { state == .failed && error?.code == .storeDamaged }
    /// The request's `context`, verbatim (`null` when absent).
    public var context: JSONValue
    /// When the status was written.
    public var updatedAt: Date
    /// The request's `exports` once the region completed: one object per export, `{"format",
    /// "source"?, "state": "writing"|"written"|"failed", "path", "bytes", "tiles", "sha256",
    /// "error"?}`; nil (absent) when the request names none.
    public var exports: [JSONValue]?
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
    public var area: JSONValue?

    public init(id: String, state: RegionState, progress: RegionProgress, error: RegionError?, request: JSONValue?,
                context: JSONValue, updatedAt: Date = Date()) {
        self.id = id; self.state = state; self.progress = progress; self.error = error
        self.request = request; self.context = context; self.updatedAt = updatedAt
    }

    /// Every field of the contract; the optional ones as `null`, except `exports` and
    /// `throttledUntil`, which are absent when nil. Rates are rounded (tiles to 0.01, bytes to 1).
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: FieldKey.self)
        try c.encode(id, forKey: FieldKey("id"))
        try c.encode(state, forKey: FieldKey("state"))
        try c.encode(progress, forKey: FieldKey("progress"))
        try c.encodeOrNull(error, "error")
        try c.encodeOrNull(request, "request")
        try c.encode(context, forKey: FieldKey("context"))
        try c.encodeTime(updatedAt, "updatedAt")
        try c.encode(refreshing, forKey: FieldKey("refreshing"))
        try c.encodeOrNull(tilesPerSecond.map { ($0 * 100).rounded() / 100 }, "tilesPerSecond")
        try c.encodeOrNull(bytesPerSecond.map { $0.rounded() }, "bytesPerSecond")
        try c.encodeOrNull(etaSeconds, "etaSeconds")
        try c.encodeTime(startedAt, "startedAt")
        try c.encodeTime(completedAt, "completedAt")
        try c.encodeTime(stateChangedAt, "stateChangedAt")
        try c.encodeOrNull(uniqueBytes, "uniqueBytes")
        try c.encodeIfGiven(exports, "exports")
        try c.encodeTime(throttledUntil, "throttledUntil", nullWhenAbsent: false)
        try c.encode(warnings, forKey: FieldKey("warnings"))
        try c.encodeOrNull(area, "area")
    }

    /// Reads a status: `id`, a known `state` and an RFC 3339 `updatedAt` are required (every
    /// status TileSpool writes has them; else it is not a status and this throws
    /// `DecodingError`: `prune` never ages a region by a time it cannot read); every other
    /// field is read when present and well-formed.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: FieldKey.self)
        let id = try c.decode(String.self, forKey: FieldKey("id"))
        let state = try c.decode(RegionState.self, forKey: FieldKey("state"))
        guard let updatedAt = c.time("updatedAt") else {
            throw DecodingError.dataCorruptedError(forKey: FieldKey("updatedAt"), in: c, debugDescription: "no RFC 3339 updatedAt")
        }
        // A progress whose counts are damaged makes the status unreadable (`RegionProgress`);
        // one absent or not an object is read as none (a status of an earlier version).
        let progress: RegionProgress
        do { progress = try c.decodeIfPresent(RegionProgress.self, forKey: FieldKey("progress")) ?? RegionProgress() } catch {
            if case DecodingError.dataCorrupted = error { throw error }
            progress = RegionProgress()
        }
        self.init(id: id, state: state, progress: progress,
                  error: c.lenient(RegionError.self, "error"), request: c.lenient(JSONValue.self, "request").flatMap { $0 == .null ? nil : $0 },
                  context: c.lenient(JSONValue.self, "context") ?? .null, updatedAt: updatedAt)
        exports = c.lenient([JSONValue].self, "exports")
        refreshing = c.lenient(Bool.self, "refreshing") ?? false
        // A rate or ETA below 0 or not finite is none ("-"), as one of another type is.
        func rate(_ key: String) -> Double? { c.lenient(Double.self, key).flatMap { $0 >= 0 && $0.isFinite ? $0 : nil } }
        tilesPerSecond = rate("tilesPerSecond")
        bytesPerSecond = rate("bytesPerSecond")
        etaSeconds = rate("etaSeconds")
        startedAt = c.time("startedAt")
        completedAt = c.time("completedAt")
        stateChangedAt = c.time("stateChangedAt")
        uniqueBytes = c.lenient(Int.self, "uniqueBytes").flatMap { $0 >= 0 ? $0 : nil } // a count, as progress's
        throttledUntil = c.time("throttledUntil")
        warnings = (c.lenient([Lossy<RegionWarning>].self, "warnings") ?? []).compactMap(\.value)
        area = c.lenient(JSONValue.self, "area").flatMap { $0 == .null ? nil : $0 }
    }
}

/// How a completed pack was replaced by a new request of the same id (`replaced` in the event).
public struct PackReplaced: Sendable, Equatable, Codable {
    /// The old region's state (`completed`, or the state of a refresh under way).
    public var state: RegionState
    /// When the old pack completed; nil (null) when unknown.
    public var completedAt: Date?
    /// Its `resourcesCompleted` and `bytesCompleted`.
    public var resources: Int
    public var bytes: Int
    public init(state: RegionState, completedAt: Date?, resources: Int, bytes: Int) {
        self.state = state; self.completedAt = completedAt; self.resources = resources; self.bytes = bytes
    }
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: FieldKey.self)
        state = try c.decode(RegionState.self, forKey: FieldKey("state"))
        completedAt = c.time("completedAt")
        resources = c.lenient(Int.self, "resources") ?? 0
        bytes = c.lenient(Int.self, "bytes") ?? 0
    }
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: FieldKey.self)
        try c.encode(state, forKey: FieldKey("state"))
        try c.encodeTime(completedAt, "completedAt")
        try c.encode(resources, forKey: FieldKey("resources"))
        try c.encode(bytes, forKey: FieldKey("bytes"))
    }
}

/// One line of `events.jsonl` (docs/contract.md, "events.jsonl"): `time`, `id`, `state` and
/// `error` always (`error` null when none), the other fields only when they apply.
public struct StatusEvent: Sendable, Equatable, Codable {
    public var time: Date
    public var id: String
    /// The state after the event, or `deleted` after a delete.
    public var state: String
    public var error: RegionError?
    /// Why the state changed: the action, `daemon restarted`, `refresh finished`, `prune`, ...
    public var note: String?
    /// The action of an ignored action or of a delete; `ignored`: why the action did not apply.
    public var action: String?
    public var ignored: String?
    /// A refresh `started`, `finished`, `failed` or `cancelled`; with `maxAge` (seconds) and
    /// `failedTiles` for a start, the three tallies for a finish.
    public var refresh: String?
    public var maxAge: Double?
    public var failedTiles: Bool?
    public var resourcesChecked: Int?
    public var resourcesChanged: Int?
    public var resourcesUnchanged: Int?
    /// A request's export that finished: its entry as in the status's `exports`.
    public var export: JSONValue?
    /// The completed pack this request replaced.
    public var replaced: PackReplaced?
    /// The region's warnings when it is queued with some.
    public var warnings: [RegionWarning]?

    /// An event; the daemon fills `id`, `state`, `error` and `note` of a state change itself, so
    /// a caller gives only the fields that say more.
    public init(id: String = "", state: String = "", error: RegionError? = nil, note: String? = nil, action: String? = nil,
                ignored: String? = nil, refresh: String? = nil, maxAge: Double? = nil, failedTiles: Bool? = nil,
                resourcesChecked: Int? = nil, resourcesChanged: Int? = nil, resourcesUnchanged: Int? = nil,
                export: JSONValue? = nil, replaced: PackReplaced? = nil, warnings: [RegionWarning]? = nil, time: Date = Date()) {
        self.time = time; self.id = id; self.state = state; self.error = error; self.note = note
        self.action = action; self.ignored = ignored; self.refresh = refresh; self.maxAge = maxAge
        self.failedTiles = failedTiles; self.resourcesChecked = resourcesChecked; self.resourcesChanged = resourcesChanged
        self.resourcesUnchanged = resourcesUnchanged; self.export = export; self.replaced = replaced; self.warnings = warnings
    }

    /// The tallies of a finished refresh, from the refresh's progress.
    public static func refreshFinished(_ p: RegionProgress, note: String? = nil) -> StatusEvent {
        StatusEvent(note: note, refresh: "finished", resourcesChecked: p.resourcesChecked,
                    resourcesChanged: p.resourcesChanged, resourcesUnchanged: p.resourcesUnchanged)
    }

    /// Reads an event strictly, as the command line acts on it (`--wait`): `time` (RFC 3339),
    /// `id`, `state` and `error` (null or an error of a known code) must be there, and every other
    /// field present must have its type; else this throws `DecodingError` and the line is not an
    /// event (a line planted or damaged by hand never ends a wait: attack round 10).
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: FieldKey.self)
        func k(_ s: String) -> FieldKey { FieldKey(s) }
        guard let time = Timestamp.parse(try c.decode(String.self, forKey: k("time"))) else {
            throw DecodingError.dataCorruptedError(forKey: k("time"), in: c, debugDescription: "not an RFC 3339 time")
        }
        let error = try c.decodeNil(forKey: k("error")) ? nil : try c.decode(RegionError.self, forKey: k("error"))
        self.init(id: try c.decode(String.self, forKey: k("id")), state: try c.decode(String.self, forKey: k("state")),
                  error: error, note: try c.decodeIfPresent(String.self, forKey: k("note")),
                  action: try c.decodeIfPresent(String.self, forKey: k("action")), ignored: try c.decodeIfPresent(String.self, forKey: k("ignored")),
                  refresh: try c.decodeIfPresent(String.self, forKey: k("refresh")), maxAge: try c.decodeIfPresent(Double.self, forKey: k("maxAge")),
                  failedTiles: try c.decodeIfPresent(Bool.self, forKey: k("failedTiles")),
                  resourcesChecked: try c.decodeIfPresent(Int.self, forKey: k("resourcesChecked")),
                  resourcesChanged: try c.decodeIfPresent(Int.self, forKey: k("resourcesChanged")),
                  resourcesUnchanged: try c.decodeIfPresent(Int.self, forKey: k("resourcesUnchanged")),
                  export: try c.decodeIfPresent(JSONValue.self, forKey: k("export")),
                  replaced: try c.decodeIfPresent(PackReplaced.self, forKey: k("replaced")),
                  warnings: try c.decodeIfPresent([RegionWarning].self, forKey: k("warnings")), time: time)
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: FieldKey.self)
        try c.encodeTime(time, "time")
        try c.encode(id, forKey: FieldKey("id"))
        try c.encode(state, forKey: FieldKey("state"))
        try c.encodeOrNull(error, "error")
        try c.encodeIfGiven(note, "note")
        try c.encodeIfGiven(action, "action")
        try c.encodeIfGiven(ignored, "ignored")
        try c.encodeIfGiven(refresh, "refresh")
        try c.encodeIfGiven(maxAge, "maxAge")
        try c.encodeIfGiven(failedTiles, "failedTiles")
        try c.encodeIfGiven(resourcesChecked, "resourcesChecked")
        try c.encodeIfGiven(resourcesChanged, "resourcesChanged")
        try c.encodeIfGiven(resourcesUnchanged, "resourcesUnchanged")
        try c.encodeIfGiven(export, "export")
        try c.encodeIfGiven(replaced, "replaced")
        try c.encodeIfGiven(warnings, "warnings")
    }
}

/// The one encoder and decoder of status files and event lines: Foundation's `JSONEncoder` and
/// `JSONDecoder`, keys sorted and `/` unescaped (docs/contract.md); the status pretty-printed,
/// an event compact on one line.
public enum StatusCoding {
    /// `<id>.json`'s bytes, with a final newline.
    public static func statusFile(_ s: RegionStatus) -> Data { encode(s, pretty: true) + Data([0x0A]) }

    /// Statuses as one pretty-printed JSON array (`tilespool status --json`), without a final newline.
    public static func statusList(_ list: [RegionStatus]) -> Data { encode(list, pretty: true) }

    /// One line of `events.jsonl`, with its newline.
    public static func eventLine(_ e: StatusEvent) -> Data { encode(e, pretty: false) + Data([0x0A]) }

    /// Reads a status file; nil when it is not JSON, not an object, or lacks an `id`, a known
    /// `state` or a readable `updatedAt`.
    public static func status(_ data: Data) -> RegionStatus? { decode(RegionStatus.self, data) }

    /// Reads one line of `events.jsonl`; nil when it is not an event.
    public static func event(_ data: Data) -> StatusEvent? { decode(StatusEvent.self, data) }

    /// `JSONDecoder` on `data`, after the checks every JSON document we read gets
    /// (`JSONKind.parse`'s, without its parse): at most `JSONKind.maxDepth` levels deep, no trailing comma.
    static func decode<T: Decodable>(_ type: T.Type, _ data: Data) -> T? {
        guard JSONKind.nestingDepth(data) <= JSONKind.maxDepth, JSONKind.trailingComma(data) == nil else { return nil }
        return try? JSONDecoder().decode(T.self, from: data)
    }

    static func encode<T: Encodable>(_ value: T, pretty: Bool) -> Data {
        let e = JSONEncoder()
        e.outputFormatting = pretty ? [.sortedKeys, .withoutEscapingSlashes, .prettyPrinted] : [.sortedKeys, .withoutEscapingSlashes]
        // Every field is a string, number, boolean, array or object of those: encoding cannot fail.
        return (try? e.encode(value)) ?? Data("null".utf8)
    }
}
