import Foundation

// What one HTTP answer to a region's request means, decided without touching anything: the
// daemon gathers the facts (`AnswerFacts`), asks `AnswerDecision.decide`, and applies the
// decision (store the body, schedule a retry, fail the region...). Every answer class is unit
// tested in AnswerDecisionTests. A PMTiles range request's answer is decided by
// `AnswerDecision.decideRange` (`RangeAnswerFacts`), with the same failures and retries.

/// The facts of one answer to a region's whole-body GET (a style, a TileJSON, a sprite, a glyph
/// range or a tile) that `AnswerDecision.decide` needs. A value: no I/O, no daemon types.
public struct AnswerFacts: Sendable {
    /// Why a transfer produced no HTTP answer: the core's view of the HTTP client's
    /// `TransferFailure` (same cases, same texts: the text is as the client wrote it, not yet
    /// redacted; `decide` quotes it through `Redaction`).
    public enum Failure: Sendable, Equatable {
        /// The server could not be reached or stopped answering (refused, reset, DNS, timeout).
        case network(String)
        /// The answer arrived damaged (short body, undecodable encoding, too large).
        case badResponse(String)
        /// Retrying cannot help: a scheme other than http(s), too many redirects, a bad URL.
        case refused(String)
        /// A redirect led to a host whose tile usage policy forbids bulk downloading.
        case policyRefused(String)
    }

    /// The URL asked, as it was sent (credentials kept): its extension gives the format a tile
    /// must have (`TileBody`), and its credentials are secrets too. Messages show it redacted.
    public var url: String
    /// The request's secrets (`RegionRequest.secrets`): replaced in every text `decide` builds
    /// from the URL or from the server's words.
    public var secrets: Redaction.Secrets
    /// What was asked for (`tile`, `style`, `sprite`...).
    public var kind: ResourceKind
    /// Set when the transfer produced no HTTP answer; the other answer fields are then unused.
    public var failure: Failure?
    /// The HTTP status (after redirects).
    public var status: Int
    /// The body after content decoding (only its emptiness and, for a tile, its first bytes are
    /// read).
    public var body: Data
    /// The answer's `Content-Type`, if any.
    public var contentType: String?
    /// Seconds the server asked to wait (`Retry-After`, RFC 9110 section 10.2.3), as the HTTP
    /// client read it (at most `RetryAfter.maximum`); nil when absent or invalid.
    public var retryAfter: Double?
    /// True when the answer was 304 Not Modified.
    public var notModified: Bool
    /// True when the request carried `If-None-Match` or `If-Modified-Since` (a refresh asking
    /// about a resource whose pack line has validators).
    public var conditional: Bool
    /// True when the refresh has the pack's previous manifest line for this resource (the one a
    /// 304 keeps). Read only for a 304: a caller may leave it false for any other answer.
    public var hasPreviousLine: Bool
    /// The request's `emptyStatuses`: statuses that mean "no tile here" for a tile.
    public var emptyStatuses: [Int]

    /// The facts of one answer; see each property.
    public init(url: String, secrets: Redaction.Secrets = .none, kind: ResourceKind, failure: Failure? = nil,
                status: Int = 0, body: Data = Data(), contentType: String? = nil, retryAfter: Double? = nil,
                notModified: Bool = false, conditional: Bool = false, hasPreviousLine: Bool = false,
                emptyStatuses: [Int] = RegionRequest.defaultEmptyStatuses) {
        self.url = url; self.secrets = secrets; self.kind = kind; self.failure = failure
        self.status = status; self.body = body; self.contentType = contentType; self.retryAfter = retryAfter
        self.notModified = notModified; self.conditional = conditional; self.hasPreviousLine = hasPreviousLine
        self.emptyStatuses = emptyStatuses
    }

    /// `url` as messages show it: the request's secrets replaced, credentials in URL form
    /// redacted (`Redaction.redact(_:secrets:)`).
    public var shownURL: String { Redaction.redact(url, secrets: secrets) }

    /// `text`, from the server or quoting it, as a message may show it: the request's secrets
    /// and the URL's credentials replaced (`Redaction.redactEmbedded`).
    public func quoted(_ text: String) -> String {
        Redaction.redactEmbedded(text, secrets: secrets.adding(url: url))
    }
}

/// The facts of one answer to a PMTiles range request (`Range: bytes=start-(end-1)` with the
/// archive's pinned version) that `AnswerDecision.decideRange` needs. A value, like `AnswerFacts`.
public struct RangeAnswerFacts: Sendable {
    /// The archive's URL as sent, the request's secrets, the failure, status, body and
    /// `Retry-After`: as in `AnswerFacts` (`kind` is `tile`; no 304, no conditional request).
    public var answer: AnswerFacts
    /// The bytes asked: `start..<end` of the archive file (offsets in bytes).
    public var start: UInt64
    public var end: UInt64
    /// The tile set's name (`tiles0`, a style's source id), named when the archive changed.
    public var source: String
    /// True when the answer's validator (ETag, else Last-Modified) is not the one pinned at plan
    /// time, or is missing (`PMTilesRemote.changed`); false for a transfer that failed before
    /// any answer was read.
    public var versionChanged: Bool
    /// The answer's ETag, quoted in the message when the archive changed (nil: none, or one that
    /// holds a secret).
    public var etag: String?
    /// The answer's `Content-Range` field as received (read for a 206 only; nil: none).
    public var contentRange: String?
    /// The size limit (bytes, `--max-object-size`) the body was cut at, when it was; nil
    /// otherwise.
    public var cutAtLimit: Int?

    /// The facts of one range answer; see each property.
    public init(answer: AnswerFacts, start: UInt64, end: UInt64, source: String, versionChanged: Bool, etag: String? = nil,
                contentRange: String? = nil, cutAtLimit: Int? = nil) {
        self.answer = answer; self.start = start; self.end = end; self.source = source
        self.versionChanged = versionChanged; self.etag = etag; self.contentRange = contentRange
        self.cutAtLimit = cutAtLimit
    }
}

/// A 206 answer's `Content-Range` field (RFC 9110 section 14.4: `bytes first-last/complete`, the
/// complete length a number or `*`): which bytes of the file the body holds. A body of the right
/// length for the wrong bytes (a proxy or cache that shifts the range) would otherwise be cut
/// into tiles that each hash to their own wrong bytes (attack round 24).
public enum ContentRange {
    /// The bytes `first...last` a `Content-Range` field names, nil when it is not a satisfied
    /// byte range (absent, another unit, `bytes */complete`, last before first, or not numbers).
    public static func parse(_ field: String?) -> ClosedRange<UInt64>? {
        guard let field else { return nil }
        let text = field.trimmingCharacters(in: .whitespaces)
        guard text.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = text.dropFirst(6).trimmingCharacters(in: .whitespaces)
        guard let slash = spec.firstIndex(of: "/"), let dash = spec[..<slash].firstIndex(of: "-") else { return nil }
        let complete = spec[spec.index(after: slash)...]
        // Digits only (UInt64's parser takes a sign), as ConditionalRequest and Operations check.
        func digits(_ t: Substring) -> Bool { !t.isEmpty && t.allSatisfy { $0.isASCII && $0.isNumber } }
        guard complete == "*" || (digits(complete) && UInt64(complete) != nil) else { return nil }
        let a = spec[..<dash], b = spec[spec.index(after: dash)..<slash]
        guard digits(a), digits(b),
              let first = UInt64(a), let last = UInt64(b), first <= last else { return nil }
        if let total = UInt64(complete), last >= total { return nil }
        return first...last
    }

    /// The complete length (bytes) a `Content-Range` field gives: `N` of `bytes */N` (a 416's,
    /// RFC 9110 section 14.4) or of `bytes first-last/N`; nil when absent, unknown (`*`) or not a
    /// number.
    public static func completeLength(_ field: String?) -> UInt64? {
        guard let field else { return nil }
        let text = field.trimmingCharacters(in: .whitespaces)
        guard text.lowercased().hasPrefix("bytes "), let slash = text.lastIndex(of: "/") else { return nil }
        let n = text[text.index(after: slash)...]
        guard !n.isEmpty, n.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return UInt64(n)
    }

    /// True when `field` says the body holds exactly `count` bytes from offset `start`.
    public static func holds(_ field: String?, start: UInt64, count: Int) -> Bool {
        guard count > 0, let r = parse(field) else { return false }
        return r.lowerBound == start && r.upperBound - r.lowerBound == UInt64(count - 1)
    }
}

/// What the daemon does with one answer to a PMTiles range request (`AnswerDecision.decideRange`).
public enum RangeDecision: Sendable, Equatable {
    /// The bytes asked lie in the body from offset `from` (0 for a 206, `start` for a 200 with
    /// the whole file): each tile is cut out of them, stored and recorded.
    case cut(from: Int)
    /// `.region`: the region fails now; `.resource`: each tile of the range fails with the error
    /// (`failTile`, within `maxFailedTiles`); `.networkLost`: the region pauses for the network.
    case fail(AnswerDecision.Failure)
    /// Asked again later; once attempts run out, `exhausted` applies to each tile of the range.
    case retry(AnswerDecision.Retry)
    /// A 206 for the bytes asked that was cut short (the connection dropped, a timeout) after
    /// `received` bytes: the tiles wholly within them are cut and stored as for `.cut(from: 0)`,
    /// and the rest of the range is asked again as a range of its own (`retry` when no tile is
    /// whole in them). So a server or proxy that cuts every long answer, or a link too slow for
    /// a range within `--transfer-timeout`, still gets the region done, a few tiles an attempt.
    case salvage(received: Int, retry: AnswerDecision.Retry)
}

/// What the daemon does with one answer (`decide`). The messages of the errors are the ones the
/// status, events and `failed.tsv` show, already redacted.
public enum AnswerDecision: Sendable, Equatable {
    /// How a failure lands.
    public enum Failure: Sendable, Equatable {
        /// The region fails with this error, whatever the resource (refused by the client or by
        /// a tile usage policy, a 304 that lies).
        case region(RegionError)
        /// The resource failed with this error: a tile is recorded as failed within the
        /// request's `maxFailedTiles` and the region goes on; otherwise (not a tile, no budget
        /// left) the region fails with it. The daemon's `failTile` counts the budget.
        case resource(RegionError)
        /// The server does not answer: the region pauses (`pausedNetwork`) and probes the URL.
        /// `why` is the client's text, redacted; the daemon appends the URL shown.
        case networkLost(why: String)
    }

    /// Another attempt, with capped exponential backoff.
    public struct Retry: Sendable, Equatable {
        /// The server's `Retry-After` in seconds (RFC 9110 section 10.2.3, for a 429, RFC 6585
        /// section 4, or a 5xx such as 503, RFC 9110 section 15.6.4): the attempt waits at least
        /// this long (cut to `RetryAfter.maximum`). Nil: backoff alone.
        public var after: Double?
        /// Seconds during which the region asks its servers nothing more (its `throttledUntil`),
        /// the `Retry-After` cut to `RetryAfter.maximum`; nil when no wait was asked.
        public var holdFor: Double?
        /// What happens once the request's attempts are used up.
        public var exhausted: Failure
        /// A line for the error log at each attempt (a damaged answer, a body that is not a
        /// tile), or nil.
        public var log: String?

        /// A retry; see each property.
        public init(after: Double? = nil, holdFor: Double? = nil, exhausted: Failure, log: String? = nil) {
            self.after = after; self.holdFor = holdFor; self.exhausted = exhausted; self.log = log
        }
    }

    /// What enters the manifest for an answer that is recorded.
    public enum Record: Sendable, Equatable {
        /// The body is stored and its line names it (a 2xx with a body, or any 2xx for a
        /// resource that is not a tile).
        case body
        /// An empty tile: one of the request's `emptyStatuses`, or a 2xx (200, 204) with no
        /// body. Its line has no object (`-`, 0 bytes).
        case emptyTile
        /// A sprite or glyph range the server does not have (404, `ResourceKind.missingIsAllowed`):
        /// recorded without an object, like an empty tile.
        case missing
    }

    /// The region fails now (`.region`), or the resource fails without a retry (`.resource`).
    case fail(Failure)
    /// Asked again later (a network failure, a damaged answer, 206, 429, 5xx, a body that is
    /// not a tile).
    case retry(Retry)
    /// 304 Not Modified to a conditional request with a previous line (RFC 9110 section
    /// 15.4.5): the pack's object is current; the previous line is kept with the answer's
    /// validators and fetch time.
    case revalidated
    /// The answer is recorded as `Record` says.
    case record(Record)

    /// What `answer` means, in this order:
    /// 1. No HTTP answer: `refused` fails the region (`httpError`), `policyRefused` too
    ///    (`policyRefused`, "redirected from"); `network` is retried, then the region pauses
    ///    for the network; `badResponse` is retried, then the resource fails (`badResponse`).
    /// 2. 206 Partial Content to a request that sent no `Range` (RFC 9110 section 15.3.7: only
    ///    an answer to a range request): never stored as the whole; retried, then the resource
    ///    fails (`badResponse`).
    /// 3. 304 Not Modified (RFC 9110 section 15.4.5): revalidated when the request was
    ///    conditional and the previous line exists; otherwise the server lies and the region
    ///    fails (`httpError`): never a reason to keep what we have.
    /// 4. 429 Too Many Requests (RFC 6585 section 4) and 5xx: retried, after `Retry-After`
    ///    when given (which also holds the whole region), then the resource fails
    ///    (`httpError`).
    /// 5. A tile with one of `emptyStatuses`, or a 2xx with no body: an empty tile; a sprite or
    ///    glyph 404: missing; any other status outside 2xx: the resource fails (`httpError`).
    /// 6. A tile body that is not a tile (`TileBody.problem`: HTML, text, a wrong image
    ///    signature): retried, then the resource fails (`badResponse`).
    /// 7. Otherwise the body is stored.
    public static func decide(_ a: AnswerFacts) -> AnswerDecision {
        if let f = a.failure {
            switch f {
            case .refused(let text):
                let shown = a.shownURL
                return .fail(.region(RegionError(code: .httpError, message: "\(a.quoted(text)) (\(shown))", url: shown)))
            case .policyRefused(let text):
                let shown = a.shownURL
                return .fail(.region(RegionError(code: .policyRefused, message: "\(a.quoted(text)) (redirected from \(shown))", url: shown)))
            case .network(let text):
                return .retry(Retry(exhausted: .networkLost(why: a.quoted(text))))
            case .badResponse(let text):
                let why = a.quoted(text), shown = a.shownURL
                return .retry(Retry(exhausted: .resource(RegionError(code: .badResponse, message: "\(why) (\(shown))", url: shown)),
                                    log: "bad response: \(why)"))
            }
        }
        let s = a.status
        if s == 206 {
            let shown = a.shownURL
            return .retry(Retry(exhausted: .resource(RegionError(
                code: .badResponse, message: "HTTP 206 Partial Content to a request for the whole body, from \(shown)", url: shown, httpStatus: s))))
        }
        if a.notModified {
            guard a.conditional && a.hasPreviousLine else {
                let shown = a.shownURL
                return .fail(.region(RegionError(code: .httpError, message: "HTTP \(s) Not Modified to a request that was not conditional, from \(shown)",
                                                 url: shown, httpStatus: s)))
            }
            return .revalidated
        }
        if s == 429 || s >= 500 {
            let shown = a.shownURL
            return .retry(Retry(after: a.retryAfter, holdFor: a.retryAfter.map { min($0, RetryAfter.maximum) },
                                exhausted: .resource(RegionError(code: .httpError, message: "HTTP \(s) from \(shown)", url: shown, httpStatus: s))))
        }
        let success = (200...299).contains(s)
        let empty = a.kind == .tile && (a.emptyStatuses.contains(s) || (success && a.body.isEmpty))
        let missing = a.kind.missingIsAllowed && s == 404
        if !success && !empty && !missing {
            let shown = a.shownURL
            return .fail(.resource(RegionError(code: .httpError, message: "HTTP \(s) from \(shown)", url: shown, httpStatus: s)))
        }
        if empty { return .record(.emptyTile) }
        if missing { return .record(.missing) }
        if a.kind == .tile, let why = TileBody.problem(url: a.url, contentType: a.contentType, body: a.body, secrets: a.secrets.adding(url: a.url)) {
            // Never stored: an HTML login page or a text error with 200 is not a tile.
            let shown = a.shownURL
            return .retry(Retry(exhausted: .resource(RegionError(code: .badResponse, message: "HTTP \(s) from \(shown): \(why)", url: shown, httpStatus: s)),
                                log: "HTTP \(s): \(why)"))
        }
        return .record(.body)
    }

    /// The region's error when a server that ignores Range sends a PMTiles archive larger than
    /// the largest body accepted (`limit` bytes, `--max-object-size`), to a tile range
    /// (`decideRange`) or a directory read (`PMTilesRemote.read`): attack round 39 saw each range
    /// retried, about 60 whole files of 10 MB, and round 38 a message that said "body larger
    /// than N bytes" alone.
    public static func wholeArchiveTooLarge(source: String, url: String, limit: Int) -> RegionError {
        RegionError(code: .badResponse, message: "source '\(source)': the server ignored Range and sent the whole PMTiles archive, which is larger than the largest body accepted (\(limit) bytes, --max-object-size); raise it, or serve the archive from a server that honours Range", url: url, httpStatus: 200)
    }

    /// What the answer to a PMTiles range request (bytes `start..<end`) means, in this order:
    /// 1. No HTTP answer: as `decide` (`refused` and `policyRefused` fail the region, `network`
    ///    is retried then pauses it, `badResponse` is retried then each tile fails).
    /// 2. 412 Precondition Failed to the pinned `If-Match` (RFC 9110 section 13.1.1), or a 2xx
    ///    whose validator is not the pinned one: the archive changed, the region fails
    ///    (`archiveChanged`): never tiles of two versions.
    /// 3. 206 Partial Content (RFC 9110 section 15.3.7) with exactly the bytes asked: cut from 0;
    ///    with fewer or more: retried, then each tile fails (`badResponse`).
    /// 4. 200 with at least `end` bytes (the server ignored Range and sent the file, up to the
    ///    client's largest body): cut from `start`; a shorter 200: retried, then `badResponse`;
    ///    a 200 cut at the largest body (`cutAtLimit`): the region fails at once
    ///    (`wholeArchiveTooLarge`), as asking again would bring the whole file again.
    /// 5. 429 and 5xx: retried after `Retry-After` (which holds the region), 416 Range Not
    ///    Satisfiable (RFC 9110 section 15.5.17) retried with backoff alone; then each tile
    ///    fails (`httpError`).
    /// 6. Any other status: each tile fails (`httpError`).
    public static func decideRange(_ f: RangeAnswerFacts) -> RangeDecision {
        let a = f.answer
        let want = Int(f.end - f.start)
        let s = a.status, shown = a.shownURL
        // Another version's answer, whole or cut short (attack round 27: one cut short was
        // retried as a network fault, then failed as one), fails the region.
        if (a.failure == nil && s == 412) || ((200...299).contains(s) && f.versionChanged) {
            return .fail(.region(RegionError(
                code: .archiveChanged,
                message: "source '\(f.source)': the PMTiles archive \(shown) changed since the region was planned (HTTP \(s)\(f.etag.map { ", ETag \($0)" } ?? "")); no tile of the new version was stored: drop the request again to plan over the new archive",
                url: shown, httpStatus: s)))
        }
        // A 200 cut at the largest body accepted: the server ignored Range and sends the whole
        // archive, over the limit, to every request; asking again would only bring it again.
        if s == 200, let limit = f.cutAtLimit {
            return .fail(.region(wholeArchiveTooLarge(source: f.source, url: shown, limit: limit)))
        }
        if a.failure != nil {
            switch decide(a) {
            case .fail(let x): return .fail(x)
            case .retry(let x):
                // Cut short, but the bytes that came are the first of those asked, of the
                // version pinned: they are kept (`salvage`).
                if a.status == 206, !f.versionChanged, a.body.count > 0, a.body.count < want,
                   ContentRange.holds(f.contentRange, start: f.start, count: want) {
                    return .salvage(received: a.body.count, retry: x)
                }
                return .retry(x)
            default: break // a failure is always failed or retried
            }
        }
        let asked = "bytes \(f.start)-\(f.end &- 1)"
        switch s {
        case 206 where a.body.count == want && !ContentRange.holds(f.contentRange, start: f.start, count: want):
            return .retry(Retry(exhausted: .resource(RegionError(
                code: .badResponse, message: "HTTP 206 from \(shown) for \(asked) says it holds \(f.contentRange.map { "Content-Range: \($0.prefix(100))" } ?? "no Content-Range"): not the bytes asked",
                url: shown, httpStatus: s))))
        case 206 where a.body.count == want:
            return .cut(from: 0)
        case 206:
            let short = Retry(exhausted: .resource(RegionError(code: .badResponse, message: "HTTP 206 with \(a.body.count) of the \(want) bytes asked (\(asked)) from \(shown)",
                                                               url: shown, httpStatus: s)))
            // A server may send fewer bytes than asked, from the first (RFC 9110 section 14.2;
            // some cap the length of a range): its Content-Range says which, and they are kept.
            if a.body.count > 0, a.body.count < want, ContentRange.holds(f.contentRange, start: f.start, count: a.body.count) {
                return .salvage(received: a.body.count, retry: short)
            }
            return .retry(short)
        case 200 where a.body.count >= Int(f.end):
            return .cut(from: Int(f.start))
        case 200:
            return .retry(Retry(exhausted: .resource(RegionError(
                code: .badResponse, message: "HTTP 200 with \(a.body.count) bytes to a range request for \(asked) from \(shown): the server ignored Range and the file is cut short",
                url: shown, httpStatus: s))))
        case 416 where ContentRange.completeLength(f.contentRange).map({ $0 <= f.start }) == true:
            // The archive as served ends before the range begins: asking again brings the same.
            return .fail(.resource(pastArchiveEnd(status: s, shown: shown, start: f.start, end: f.end, length: ContentRange.completeLength(f.contentRange)!)))
        case 429, 500...599, 416:
            let wait = s == 416 ? nil : a.retryAfter
            return .retry(Retry(after: wait, holdFor: wait.map { min($0, RetryAfter.maximum) },
                                exhausted: .resource(RegionError(code: .httpError, message: "HTTP \(s) from \(shown) for \(asked)", url: shown, httpStatus: s))))
        default:
            return .fail(.resource(RegionError(code: .httpError, message: "HTTP \(s) from \(shown) for \(asked)", url: shown, httpStatus: s)))
        }
    }

    /// The error of the tiles of range `start..<end` that lie past the end of their PMTiles
    /// archive, `length` bytes long as a 416's or a short 206's `Content-Range` says (RFC 9110
    /// section 14.4): the archive is shorter than its directories say, so asking again brings the
    /// same; each such tile fails at once (`badResponse`, within `maxFailedTiles`).
    public static func pastArchiveEnd(status: Int, shown: String, start: UInt64, end: UInt64, length: UInt64) -> RegionError {
        RegionError(code: .badResponse, message: "HTTP \(status) from \(shown) for bytes \(start)-\(end &- 1): the archive holds \(length) bytes, and its directories put tiles beyond its end: it is shorter than they say (cut short on the server), or it changed since the region was planned",
                    url: shown, httpStatus: status)
    }

    /// The message of a tile's error when it is one failure more than the request's
    /// `maxFailedTiles` allows: `message` followed by the count and the budget, and where to
    /// look (`failed.tsv` for a download; a refresh is abandoned and the pack stays as it was).
    /// - Parameters:
    ///   - failed: the tiles failed so far, this one not counted.
    ///   - budget: the request's `maxFailedTiles` (> 0).
    public static func overBudgetMessage(_ message: String, failed: Int, budget: Int, refreshing: Bool) -> String {
        message + "; \(failed + 1) tiles failed, more than the request's maxFailedTiles (\(budget))"
            + (refreshing ? ": the refresh was abandoned and the pack is unchanged" : "; see failed.tsv")
    }
}
