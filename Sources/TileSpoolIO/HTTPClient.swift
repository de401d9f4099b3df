import CCurl
import Foundation
import Glibc
import TileSpoolCore

/// Settings of the HTTP client. Times in seconds, sizes in bytes.
public struct HTTPOptions: Sendable {
    /// Most connections open at once, across all hosts (`CURLMOPT_MAX_TOTAL_CONNECTIONS`).
    public var maxConnections = 16
    /// Most connections to one host (`CURLMOPT_MAX_HOST_CONNECTIONS`).
    public var maxConnectionsPerHost = 8
    /// Time allowed to connect (`CURLOPT_CONNECTTIMEOUT_MS`).
    public var connectTimeout: Double = 10
    /// A transfer slower than 1 byte/s for this long is aborted (`CURLOPT_LOW_SPEED_TIME`).
    public var lowSpeedTime = 30
    /// The most time one transfer may take, redirects included, from `start` to its last byte
    /// (`CURLOPT_TIMEOUT_MS`, set per hop to what is left); 0: no limit. Past it the transfer
    /// fails as `TransferFailure.network` ("transfer timeout"), like any other timeout: a
    /// server dripping two bytes a second (above the low-speed limit) would otherwise hold a
    /// download slot for as long as it likes.
    /// Default 300 (5 minutes: a 32 MiB body at about 110 KB/s).
    public var transferTimeout: Double = 300
    /// Largest body accepted, after content decoding (`CURLOPT_MAXFILESIZE_LARGE` and a check while
    /// receiving). Default 32 MiB.
    public var maxObjectSize = 32 << 20
    /// Redirects followed at most; one more fails the transfer (`TransferFailure.refused`).
    /// `HTTPClient` follows them itself, hop by hop (`Redirect`).
    public var maxRedirects = 5
    /// The User-Agent sent (`--user-agent`); by default it names TileSpool, its version and the
    /// project's URL, as tile usage policies ask (e.g. https://operations.osmfoundation.org/policies/tiles/).
    public var userAgent = TileSpoolVersion.defaultUserAgent
    /// Hosts (lower-case) a redirect may lead to although `TileUsagePolicy` lists them (the
    /// daemon's `--allow-host`); a redirect to any other listed host fails the transfer with
    /// `TransferFailure.policyRefused` before anything is asked from it.
    public var allowedHosts: Set<String> = []
    /// The largest `connectTimeout`, `lowSpeedTime` and `transferTimeout` the command line
    /// accepts, in seconds (a day): libcurl takes them as integers (milliseconds for two of them),
    /// which a larger number could overflow.
    public static let maximumTimeout = 86_400.0
    public init() {}
}

/// The version of TileSpool, sent in the User-Agent.
public enum TileSpoolVersion {
    public static let string = "0.1.0"
    /// Where the project lives, named in the default User-Agent.
    public static let projectURL = "https://github.com/tilespool/tilespool"
    /// `TileSpool/<version> (+<projectURL>)`.
    public static let defaultUserAgent = "TileSpool/\(string) (+\(projectURL))"
}

/// Why a transfer produced no usable response.
public enum TransferFailure: Sendable, Equatable {
    /// The server could not be reached or stopped answering: refused, reset, DNS, timeout.
    case network(String)
    /// The response arrived damaged: a body shorter than announced, an undecodable content
    /// encoding, a body too large, response headers over libcurl's limit (100 KB).
    case badResponse(String)
    /// The transfer cannot succeed by retrying: a scheme other than http(s) (also by redirect),
    /// more than `maxRedirects` redirects, a malformed URL.
    case refused(String)
    /// A redirect led to a host whose tile usage policy forbids bulk downloading
    /// (`TileUsagePolicy`, not in `HTTPOptions.allowedHosts`): not fetched. The message names the
    /// host and the policy.
    case policyRefused(String)
}

/// The outcome of one transfer: an HTTP status and body, or a failure.
public struct TransferResult: Sendable {
    /// The caller's tag given to `HTTPClient.start`.
    public var tag: Int
    public var status: Int
    /// The body after HTTP content decoding (gzip, deflate).
    public var body: Data
    /// Seconds the server asked to wait (`Retry-After`, in seconds or as an HTTP date, read for a
    /// 3xx (not 304), 4xx or 5xx answer), at most `RetryAfter.maximum` (1 hour): a longer wait,
    /// or a number too large for any integer, counts as that. Nil when absent, 0, past or invalid.
    public var retryAfter: Double?
    public var failure: TransferFailure?
    /// The response's validators and expiry (`ETag`, `Last-Modified`, `Cache-Control: max-age`,
    /// `Expires`), with `fetched` = when it was received.
    public var freshness = Freshness()
    /// True when the server answered 304 Not Modified (to a conditional request): the stored copy
    /// is current. Only a 304 sets it; a 200 is always a new body.
    public var notModified = false
    /// The `Content-Range` field of a 206 answer as received (nil for any other status).
    public var contentRange: String?
    /// The response's `Content-Type` header (after redirects), if any.
    public var contentType: String?
    /// True when the answer's headers were read (`freshness`, `contentRange`): every answer, and
    /// a 206 cut short, whose bytes are kept; false for a transfer that failed otherwise.
    public var headersRead = false
    /// The size limit (bytes) the body passed, when the transfer was ended there (`failure` is
    /// then `.badResponse`); nil otherwise.
    public var cutAtLimit: Int?
}

/// One transfer's state: what its hops send, and the receive state reached from libcurl's write
/// callback through `CURLOPT_WRITEDATA`.
final class Transfer {
    var tag = 0
    var body = Data()
    var limit = 0
    var tooLarge = false
    /// The header list of the hop under way (freed when the next hop starts or the transfer ends).
    var headers: UnsafeMutablePointer<curl_slist>?
    /// The conditional headers (sent on every hop) and the caller's own (sent while
    /// `sendsRequestHeaders`), CR/LF-free.
    var conditional: [(String, String)] = []
    var requestHeaders: [(String, String)] = []
    var sendsRequestHeaders = true
    /// The URL first asked; its origin, parsed when the first redirect needs it (`.some(nil)`:
    /// libcurl could not parse it); how many redirects were followed.
    var firstURL = ""
    var firstOrigin: HTTPOrigin??
    var redirects = 0
    /// When the transfer must have ended (`HTTPClient.now()` seconds; infinity: no limit).
    var deadline = Double.infinity
    /// The body's expected size in bytes (a range request's length), reserved before the first
    /// byte so that the body is not copied as it grows; 0: unknown.
    var expectedSize = 0
    let easy: UnsafeMutableRawPointer
    init(easy: UnsafeMutableRawPointer) { self.easy = easy }
}

/// libcurl's write callback: appends to the transfer's body, or aborts it past the size limit.
private func writeBody(_ ptr: UnsafeMutablePointer<CChar>?, _ size: Int, _ nmemb: Int, _ user: UnsafeMutableRawPointer?) -> Int {
    guard let user, let ptr else { return 0 }
    let t = Unmanaged<Transfer>.fromOpaque(user).takeUnretainedValue()
    let n = size * nmemb
    if t.body.count + n > t.limit { t.tooLarge = true; return 0 }
    t.body.append(UnsafeRawPointer(ptr).assumingMemoryBound(to: UInt8.self), count: n)
    return n
}

/// An HTTP client over libcurl's multi interface (https://curl.se/libcurl/c/libcurl-multi.html):
/// many transfers at once on one thread, connections kept alive and reused, gzip accepted.
/// Redirects are followed here, not by libcurl (`CURLOPT_FOLLOWLOCATION` is off): on a 3xx with a
/// Location (`CURLINFO_REDIRECT_URL`, libcurl's parse) the same transfer starts again at the
/// target, under the same tag, at most `maxRedirects` times, only to http and https
/// (`Redirect.followedSchemes`), never to a host a tile usage policy lists (`TileUsagePolicy`,
/// unless in `allowedHosts`), and the request's own headers go along only while every hop stays
/// on the first URL's origin (`Redirect.keepsRequestHeaders`). Not thread-safe: use it from one
/// thread, which also calls `wait` and `collect`.
public final class HTTPClient: @unchecked Sendable {
    private let multi: UnsafeMutableRawPointer
    private let options: HTTPOptions
    /// The largest body this client accepts, in bytes (`HTTPOptions.maxObjectSize`).
    public var maxObjectSize: Int { options.maxObjectSize }
    private var idle: [Transfer] = []
    private var active: [Int: Transfer] = [:]
    private var byEasy: [UnsafeMutableRawPointer: Transfer] = [:]
    /// The last HTTP date parsed and its value: tiles of one server mostly carry the same
    /// `Last-Modified`, so `curl_getdate` (an sscanf per field) runs once per distinct string.
    private var lastDate: (text: String, value: Int) = ("", -1)

    /// Number of transfers under way.
    public var inFlight: Int { active.count }

    /// - Throws: `TransferFailure.refused` when libcurl cannot be initialised.
    public init(options: HTTPOptions) {
        curl_global_init(Int(CURL_GLOBAL_DEFAULT))
        multi = curl_multi_init()
        self.options = options
        tilespool_multi_setopt_long(multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, options.maxConnections)
        tilespool_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, options.maxConnectionsPerHost)
        tilespool_multi_setopt_long(multi, CURLMOPT_MAXCONNECTS, options.maxConnections * 2)
    }

    deinit {
        for (_, t) in active { curl_multi_remove_handle(multi, t.easy); curl_easy_cleanup(t.easy) }
        for t in idle { curl_easy_cleanup(t.easy) }
        curl_multi_cleanup(multi)
    }

    private func makeTransfer() -> Transfer {
        if let t = idle.popLast() { return t }
        let easy = curl_easy_init()!
        let t = Transfer(easy: easy)
        tilespool_easy_setopt_long(easy, CURLOPT_FOLLOWLOCATION, 0) // followed in `collect`, hop by hop
        tilespool_easy_setopt_string(easy, CURLOPT_PROTOCOLS_STR, "http,https")
        tilespool_easy_setopt_string(easy, CURLOPT_ACCEPT_ENCODING, "") // every encoding libcurl decodes
        // Clamped again here (the command line refuses more than `maximumTimeout`): a Double that
        // does not fit an Int would trap.
        let connect = options.connectTimeout
        let connectMS = (connect.isNaN ? 0 : min(max(connect, 0), HTTPOptions.maximumTimeout)) * 1000
        tilespool_easy_setopt_long(easy, CURLOPT_CONNECTTIMEOUT_MS, Int(connectMS.rounded(.up)))
        tilespool_easy_setopt_long(easy, CURLOPT_LOW_SPEED_LIMIT, 1)
        tilespool_easy_setopt_long(easy, CURLOPT_LOW_SPEED_TIME, min(max(options.lowSpeedTime, 0), Int(HTTPOptions.maximumTimeout)))
        tilespool_easy_setopt_off(easy, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(options.maxObjectSize))
        tilespool_easy_setopt_string(easy, CURLOPT_USERAGENT, options.userAgent)
        tilespool_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1)
        tilespool_easy_setopt_long(easy, CURLOPT_TCP_NODELAY, 1)
        tilespool_easy_setopt_write_cb(easy, CURLOPT_WRITEFUNCTION, writeBody)
        tilespool_easy_setopt_pointer(easy, CURLOPT_WRITEDATA, Unmanaged.passUnretained(t).toOpaque())
        return t
    }

    /// Starts a GET of `url`. `tag` identifies the transfer in `collect`'s results and must be unique
    /// among transfers under way. `validators` (the stored response's, if any) make the GET
    /// conditional as `ConditionalRequest.headers(for:)` says (RFC 9110 section 13.1: the ETag as
    /// `If-None-Match` when there is one, else `If-Modified-Since`); only a 304 answer comes back
    /// with `notModified` set, a 200 always with its body. libcurl's `CURLOPT_TIMECONDITION` is
    /// not used: it drops the body of a 200 whose `Last-Modified` did not move.
    /// `headers` (name, value) are sent as well, in the same per-transfer header list, to the
    /// first URL's origin only (a redirect to another origin drops them: they may be credentials);
    /// `everyHop` (a range request's `Range` and the archive version it is conditional on) go to
    /// every hop, as the conditional headers do (attack round 28: an archive redirected to another
    /// host was sent whole for every range). Values with CR or LF are skipped (they would split
    /// the request). `expectedSize` (bytes; 0: unknown), a range request's length, is reserved for
    /// the body up front (at most the size limit). `limit` (bytes) lowers the size limit
    /// (`HTTPOptions.maxObjectSize`) for this transfer: a longer body ends it, answered
    /// `TransferFailure.badResponse`.
    public func start(url: String, tag: Int, validators: Freshness? = nil, headers extra: [(String, String)] = [],
                      everyHop: [(String, String)] = [], expectedSize: Int = 0, limit: Int? = nil) {
        let t = makeTransfer()
        t.tag = tag
        t.limit = min(options.maxObjectSize, limit ?? .max)
        t.expectedSize = expectedSize
        func sendable(_ h: (String, String)) -> Bool { !(h.0 + h.1).contains(where: { $0 == "\r" || $0 == "\n" }) }
        t.conditional = (ConditionalRequest.headers(for: validators) + everyHop).filter(sendable)
        t.requestHeaders = extra.filter(sendable)
        t.sendsRequestHeaders = true
        t.firstURL = url
        t.firstOrigin = nil
        t.redirects = 0
        t.deadline = options.transferTimeout > 0 ? HTTPClient.now() + min(options.transferTimeout, HTTPOptions.maximumTimeout) : .infinity
        active[tag] = t
        byEasy[t.easy] = t
        begin(t, url: url)
    }

    /// Starts (or starts again, after a redirect) the request of `t` to `url`.
    private func begin(_ t: Transfer, url: String) {
        t.body = Data()
        if t.expectedSize > 0 { t.body.reserveCapacity(min(t.expectedSize, t.limit)) }
        // A large body (a PMTiles range) is received in 512 KiB reads, not libcurl's default 16
        // KiB: fewer `recv`s and write callbacks for the same bytes.
        tilespool_easy_setopt_long(t.easy, CURLOPT_BUFFERSIZE, t.expectedSize >= 1 << 20 ? 512 << 10 : 16 << 10)
        t.tooLarge = false
        var list: UnsafeMutablePointer<curl_slist>?
        for (name, value) in t.sendsRequestHeaders ? t.conditional + t.requestHeaders : t.conditional {
            // "Name;" is libcurl's way to send a header with an empty value.
            list = curl_slist_append(list, value.isEmpty ? "\(name);" : "\(name): \(value)")
        }
        tilespool_easy_setopt_slist(t.easy, CURLOPT_HTTPHEADER, list)
        if let old = t.headers { curl_slist_free_all(old) }
        t.headers = list
        tilespool_easy_setopt_string(t.easy, CURLOPT_URL, url)
        // What is left of the transfer's time (at least 1 ms: 0 would mean "no limit").
        let left = t.deadline.isFinite ? max(1, Int(((t.deadline - HTTPClient.now()) * 1000).rounded(.up))) : 0
        tilespool_easy_setopt_long(t.easy, CURLOPT_TIMEOUT_MS, left)
        curl_multi_add_handle(multi, t.easy)
    }

    /// Seconds on the monotonic clock (`CLOCK_MONOTONIC`), for transfer deadlines.
    static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    /// The failure of a transfer that ran out of `transferTimeout`.
    private var transferTimedOut: TransferFailure {
        .network("transfer timeout: not finished within \(String(format: "%g", options.transferTimeout)) s (--transfer-timeout)")
    }

    /// What to do with a finished hop of `t`: nil when it was not a redirect (the transfer is
    /// done); `.success(())` when the next hop started; `.failure` when the redirect is refused.
    private func followRedirect(_ t: Transfer) -> Result<Void, RedirectRefused>? {
        var status = 0
        tilespool_easy_getinfo_long(t.easy, CURLINFO_RESPONSE_CODE, &status)
        guard (300...399).contains(status), status != 304 else { return nil }
        var location: UnsafeMutablePointer<CChar>?
        tilespool_easy_getinfo_string(t.easy, CURLINFO_REDIRECT_URL, &location)
        guard let location else { return nil } // a 3xx without a Location: the answer itself
        let next = String(cString: location)
        guard t.redirects < options.maxRedirects else {
            return .failure(RedirectRefused(.refused("more than \(options.maxRedirects) redirects (the last to \(Redaction.redact(next)))")))
        }
        guard let parts = HTTPClient.urlParts(next) else {
            return .failure(RedirectRefused(.refused("redirect to a malformed URL")))
        }
        guard Redirect.followedSchemes.contains(parts.scheme), let target = parts.origin else {
            return .failure(RedirectRefused(.refused("redirect to an unsupported protocol '\(parts.scheme)' (only http and https are followed)")))
        }
        if HTTPClient.now() >= t.deadline { return .failure(RedirectRefused(transferTimedOut)) }
        if let e = TileUsagePolicy.refusal(host: target.host, url: next, allowedHosts: options.allowedHosts) {
            return .failure(RedirectRefused(.policyRefused("redirect to \(Redaction.redact(next)): \(e.message)")))
        }
        if t.firstOrigin == nil { t.firstOrigin = .some(HTTPClient.urlParts(t.firstURL)?.origin) }
        t.sendsRequestHeaders = Redirect.keepsRequestHeaders(sentSoFar: t.sendsRequestHeaders, first: t.firstOrigin!, next: target)
        t.redirects += 1
        begin(t, url: next)
        return .success(())
    }

    /// Why a redirect is not followed: the transfer's failure.
    private struct RedirectRefused: Error { var failure: TransferFailure; init(_ f: TransferFailure) { failure = f } }

    /// The scheme (lower-case) of `url` and, for a URL with a host, its origin (the port filled in
    /// with the scheme's default); nil when libcurl cannot parse it. The corresponding C
    /// functions are `curl_url_set` and `curl_url_get` (libcurl's URL API).
    static func urlParts(_ url: String) -> (scheme: String, origin: HTTPOrigin?)? {
        guard let h = curl_url() else { return nil }
        defer { curl_url_cleanup(h) }
        guard curl_url_set(h, CURLUPART_URL, url, UInt32(CURLU_NON_SUPPORT_SCHEME)) == CURLUE_OK else { return nil }
        func part(_ p: CURLUPart, _ flags: Int32 = 0) -> String? {
            var out: UnsafeMutablePointer<CChar>?
            guard curl_url_get(h, p, &out, UInt32(flags)) == CURLUE_OK, let out else { return nil }
            defer { curl_free(out) }
            return String(cString: out)
        }
        guard let scheme = part(CURLUPART_SCHEME)?.lowercased() else { return nil }
        guard let host = part(CURLUPART_HOST), !host.isEmpty else { return (scheme, nil) }
        let port = part(CURLUPART_PORT, CURLU_DEFAULT_PORT).flatMap { Int($0) }
        return (scheme, HTTPOrigin(scheme: scheme, host: host, port: port))
    }

    /// Stops a transfer under way; no result is reported for it.
    public func cancel(tag: Int) { _ = stop(tag: tag, reading: { _ in () }) }

    /// Stops a transfer under way, as `cancel` does, and returns what it had received, as a
    /// transfer cut short by the network (`failure` `.network`) is returned by `collect`: a 206
    /// whose headers were read keeps its body so far, its validators and its `Content-Range`
    /// (`headersRead`), so that the whole tiles of a range request stopped by a pause or a stop
    /// are kept (`Daemon.keepRangesReceived`); any other answer has an empty body. Nil for a tag
    /// not under way.
    public func cancelKeepingReceived(tag: Int) -> TransferResult? {
        stop(tag: tag) { t in result(of: t, code: CURLE_ABORTED_BY_CALLBACK) }
    }

    /// Stops transfer `tag` under way and returns what `reading` made of it, read before its
    /// handle leaves the multi handle (the status and headers of the response under way: libcurl
    /// keeps them from the end of the header block); nil for a tag not under way.
    private func stop<T>(tag: Int, reading: (Transfer) -> T) -> T? {
        guard let t = active.removeValue(forKey: tag) else { return nil }
        byEasy.removeValue(forKey: t.easy)
        let r = reading(t)
        curl_multi_remove_handle(multi, t.easy)
        recycle(t)
        return r
    }

    /// Reads what has arrived for the transfers under way (`curl_multi_perform`) without
    /// reporting any: a transfer that finishes here is reported by the next `collect`, or stopped
    /// with all its bytes by `cancelKeepingReceived`.
    public func receiveArrived() {
        var running: Int32 = 0
        curl_multi_perform(multi, &running)
    }

    /// Returns a finished or cancelled transfer to the idle pool.
    private func recycle(_ t: Transfer) {
        t.body = Data()
        if let h = t.headers { curl_slist_free_all(h); t.headers = nil }
        idle.append(t)
    }

    /// Makes a `wait` under way on another thread return at once (`curl_multi_wakeup`; with
    /// `abandon`, the calls of this class that are thread-safe).
    public func wakeup() { curl_multi_wakeup(multi) }

    private let abandonLock = NSLock()
    private var abandoned = false
    /// True once `abandon` was called.
    public var isAbandoned: Bool { abandonLock.lock(); defer { abandonLock.unlock() }; return abandoned }

    /// Makes a `fetchAll` under way on another thread give up at once, and every later one return
    /// at once: their transfers are cancelled and answered `TransferFailure.network("abandoned")`.
    /// For the daemon, whose region stops while a thread of its own still reads (a PMTiles
    /// archive's directories): without it, a server that stalls held that thread until
    /// `--low-speed-time`. Thread-safe; the caller keeps the client alive while it calls it.
    public func abandon() {
        abandonLock.lock()
        abandoned = true
        abandonLock.unlock()
        wakeup()
    }

    /// Waits up to `timeout` seconds for network activity or for one of `fds` to become readable
    /// (a negative fd, "none", is left out). The corresponding C function is `curl_multi_poll`.
    /// - Returns: per entry of `fds`, whether it was readable on return (false for a negative fd),
    ///   so the caller reads only those (no failing `read` per turn).
    @discardableResult
    public func wait(timeout: Double, fds: [Int32]) -> [Bool] {
        var waitfds = fds.filter { $0 >= 0 }.map { curl_waitfd(fd: $0, events: Int16(CURL_WAIT_POLLIN), revents: 0) }
        var n: Int32 = 0
        let rc = waitfds.withUnsafeMutableBufferPointer { buf in
            curl_multi_poll(multi, buf.baseAddress, UInt32(buf.count), Int32((max(0, min(timeout, 60)) * 1000).rounded(.up)), &n)
        }
        var k = 0
        return fds.map { fd in
            guard fd >= 0 else { return false }
            defer { k += 1 }
            // Should the poll itself fail, every fd counts as readable: the caller's reads find out.
            return rc != CURLM_OK || waitfds[k].revents != 0
        }
    }

    /// Drives the transfers and returns those that finished since the last call.
    /// The corresponding C functions are `curl_multi_perform` and `curl_multi_info_read`.
    public func collect() -> [TransferResult] {
        var running: Int32 = 0
        curl_multi_perform(multi, &running)
        var results: [TransferResult] = []
        var left: Int32 = 0
        while let msg = curl_multi_info_read(multi, &left) {
            guard msg.pointee.msg == CURLMSG_DONE, let easy = msg.pointee.easy_handle else { continue }
            let code = msg.pointee.data.result
            guard let t = byEasy[easy] else { continue }
            curl_multi_remove_handle(multi, easy)
            var refused: TransferFailure?
            if code == CURLE_OK {
                switch followRedirect(t) {
                case .success?: continue // the next hop is under way, same tag
                case .failure(let why)?: refused = why.failure
                case nil: break
                }
            }
            byEasy.removeValue(forKey: easy)
            active.removeValue(forKey: t.tag)
            var r = result(of: t, code: code)
            if let refused { r.failure = refused; r.body = Data(); r.notModified = false }
            results.append(r)
            recycle(t)
        }
        return results
    }

    private func result(of t: Transfer, code: CURLcode) -> TransferResult {
        var status = 0
        tilespool_easy_getinfo_long(t.easy, CURLINFO_RESPONSE_CODE, &status)
        var r = TransferResult(tag: t.tag, status: status, body: t.body, retryAfter: nil, failure: nil)
        if code == CURLE_OK {
            r.headersRead = true
            // Retry-After only where it can mean something (not on every tile's 200).
            let h = headers(t.easy, retryAfter: status >= 300 && status != 304, contentRange: status == 206 || status == 416)
            r.freshness = freshness(h)
            r.contentType = h.contentType
            r.contentRange = h.contentRange
            // Read here, not from CURLINFO_RETRY_AFTER: libcurl gives nothing for a number past
            // its integer range, which must count as the longest wait, not as none.
            r.retryAfter = h.retryAfter.flatMap { field in
                RetryAfter.seconds(field, now: Date().timeIntervalSince1970) { let t = httpDate($0); return t >= 0 ? Double(t) : nil }
            }
            r.notModified = status == 304 // a 200 is a new body, whatever its Last-Modified says
            if r.notModified { r.body = Data() }
            return r
        }
        let text = String(cString: curl_easy_strerror(code))
        switch code {
        case CURLE_WRITE_ERROR where t.tooLarge, CURLE_FILESIZE_EXCEEDED:
            r.failure = .badResponse("body larger than \(t.limit) bytes")
            r.cutAtLimit = t.limit
        case CURLE_PARTIAL_FILE, CURLE_BAD_CONTENT_ENCODING, CURLE_WRITE_ERROR:
            r.failure = .badResponse(text)
        case CURLE_OUT_OF_MEMORY:
            // libcurl's answer to response headers over its limit (CURL_MAX_HTTP_HEADER, 100 KB,
            // lib/http.c): a server that lies, not a network that failed (which would pause the
            // region and probe it forever).
            r.failure = .badResponse("response headers larger than libcurl accepts (100 KB; libcurl: \(text))")
        case CURLE_UNSUPPORTED_PROTOCOL, CURLE_TOO_MANY_REDIRECTS, CURLE_URL_MALFORMAT:
            r.failure = .refused(text)
        case CURLE_OPERATION_TIMEDOUT where HTTPClient.now() >= t.deadline - 0.05:
            r.failure = transferTimedOut // else the connect or low-speed timeout: libcurl's words
        default:
            r.failure = .network(text)
        }
        // A 206 cut short (the connection dropped, a timeout) keeps the bytes that came and the
        // headers that say which they are: a range request's tiles wholly within them are kept
        // (`RangeDecision.salvage`). Any other failed answer's bytes are dropped.
        var cutShort = false
        switch r.failure {
        case .network?: cutShort = true
        case .badResponse?: cutShort = code == CURLE_PARTIAL_FILE
        default: break
        }
        if status == 206 && cutShort && !t.tooLarge {
            r.headersRead = true
            let h = headers(t.easy, retryAfter: false, contentRange: true)
            r.freshness = freshness(h)
            r.contentRange = h.contentRange
        } else {
            r.body = Data()
        }
        return r
    }
}

extension HTTPClient {
    /// The response headers the daemon reads, of the last response (after redirects): the
    /// content type as libcurl parsed it (`CURLINFO_CONTENT_TYPE`), and the first `ETag`,
    /// `Last-Modified`, `Cache-Control`, `Age`, `Expires`, and (when asked) `Retry-After` and
    /// `Content-Range` (a 206's); `ETag`, `Last-Modified` and `Content-Range` only when sent once.
    /// `Expires` is read only when `Cache-Control` gives no lifetime (RFC 9111 section 5.3: it
    /// would be ignored), `Age` only when it does. The corresponding C function is `curl_easy_header` (libcurl's header API, 7.84
    /// and later): one lookup per name (walking every header with `curl_easy_nextheader` costs a
    /// pass over all of them per header, more in all).
    struct ResponseHeaders {
        var contentType, etag, lastModified, expires, retryAfter, contentRange: String?
        /// `Cache-Control`'s lifetime (`CacheLifetime.maxAge`) and the `Age` header
        /// (`CacheLifetime.age`), in seconds, each at most 2^31.
        var maxAge, age: Int64?
    }

    private func headers(_ easy: UnsafeMutableRawPointer, retryAfter: Bool, contentRange: Bool) -> ResponseHeaders {
        func value(_ name: String) -> String? {
            var h: UnsafeMutablePointer<curl_header>?
            guard curl_easy_header(easy, name, 0, UInt32(CURLH_HEADER), -1, &h) == CURLHE_OK,
                  let v = h?.pointee.value else { return nil }
            return String(cString: v)
        }
        /// The field's value when the answer has exactly one field of that name (any case), else
        /// nil: two are no value at all.
        func single(_ name: String) -> String? {
            var h: UnsafeMutablePointer<curl_header>?
            guard curl_easy_header(easy, name, 0, UInt32(CURLH_HEADER), -1, &h) == CURLHE_OK, let first = h?.pointee,
                  first.amount == 1, let v = first.value else { return nil }
            return String(cString: v)
        }
        var out = ResponseHeaders()
        var type: UnsafeMutablePointer<CChar>?
        tilespool_easy_getinfo_string(easy, CURLINFO_CONTENT_TYPE, &type)
        out.contentType = type.map { String(cString: $0) }
        // ETag and Last-Modified only when sent once: two of them (a proxy adding its own) are no
        // validator at all, never the first one read alone (attack round 28: `"v1"` then `"v2"`
        // let a new archive version pass as the pinned one; round 29: the same with two
        // Last-Modified, whose joined text parsed as the first date).
        out.etag = single("ETag")
        out.lastModified = single("Last-Modified")
        out.maxAge = CacheLifetime.maxAge(value("Cache-Control"))
        if out.maxAge == nil { out.expires = value("Expires") } else { out.age = CacheLifetime.age(value("Age")) }
        if retryAfter { out.retryAfter = value("Retry-After") }
        // Likewise Content-Range: two of them (a proxy adding its own) are none, never the one
        // range asked (attack round 25: the first was read alone).
        if contentRange { out.contentRange = single("Content-Range") }
        return out
    }

    /// The `ETag` as it can be kept and sent back byte for byte: trimmed of white space, and
    /// only when it is an entity-tag (`ConditionalRequest.isEntityTag`, RFC 9110 section 8.8.3:
    /// `"..."` or `W/"..."` of visible ASCII, at most 1024 bytes), else nil: no validator, and the
    /// next refresh asks with If-Modified-Since or unconditionally. `ETag: *` or an unquoted
    /// `v1` is not kept (`*` sent back as `If-None-Match: *` is answered 304 whatever changed).
    public static func storableETag(_ raw: String) -> String? {
        // Once per tile: an ETag that starts and ends with visible ASCII has nothing to trim
        // (Foundation's trim bridges to NSString: 3% of the loop's CPU in the throughput bench).
        let u = raw.utf8
        if let a = u.first, let z = u.last, (0x21...0x7E).contains(a), (0x21...0x7E).contains(z) {
            return ConditionalRequest.isEntityTag(raw) ? raw : nil
        }
        let t = raw.trimmingCharacters(in: .whitespacesAndNewlines)
        return ConditionalRequest.isEntityTag(t) ? t : nil
    }

    /// An HTTP date (RFC 9110 section 5.6.7) in seconds since 1970, or -1 when invalid
    /// (`curl_getdate`, then `ConditionalRequest.checkedHTTPDate`: a year it misread, such as
    /// 0001 read as 2001, is invalid); the last one is remembered.
    private func httpDate(_ text: String) -> Int {
        if text == lastDate.text { return lastDate.value }
        let v = ConditionalRequest.checkedHTTPDate(text, parsed: Int64(curl_getdate(text, nil))).map { Int($0) } ?? -1
        lastDate = (text, v)
        return v
    }

    /// Validators and expiry of a response: `ETag` (`storableETag`); `Last-Modified` and
    /// `Expires` parsed as HTTP dates (`curl_getdate`); the expiry from `Cache-Control`
    /// `max-age=N` less `Age` (wins over `Expires`, RFC 9111 section 5.3), `no-cache` or
    /// `no-store` (expired at once), or `Expires` (`CacheLifetime.expiry`: clamped and saturating,
    /// so no number a server sends can trap).
    func freshness(_ h: ResponseHeaders) -> Freshness {
        let time = Date().timeIntervalSince1970
        let now = Int64(time)
        var f = Freshness(fetched: ManifestLine.roundedToMilliseconds(time))
        f.etag = h.etag.flatMap(HTTPClient.storableETag)
        if let lm = h.lastModified {
            let t = httpDate(lm)
            if t >= 0 { f.lastModified = Int64(t) }
        }
        // An invalid Expires date means already expired (RFC 9111 section 5.3).
        let expires = h.expires.map { ex -> Int64 in let t = httpDate(ex); return t >= 0 ? Int64(t) : now }
        f.expires = CacheLifetime.expiry(fetched: now, maxAge: h.maxAge, age: h.age, expires: expires)
        return f
    }

    /// Fetches `urls` concurrently and waits for all of them (for small jobs such as `tilespool
    /// plan`; the daemon drives transfers from its event loop instead). Results are in `urls` order.
    /// `headers` and `everyHop` as for `start`.
    public func fetchAll(_ urls: [String], headers: [(String, String)] = [], everyHop: [(String, String)] = []) -> [TransferResult] {
        var results = [TransferResult?](repeating: nil, count: urls.count)
        for (i, u) in urls.enumerated() { start(url: u, tag: i, headers: headers, everyHop: everyHop) }
        while inFlight > 0 {
            if isAbandoned {
                for i in results.indices where results[i] == nil {
                    cancel(tag: i)
                    results[i] = TransferResult(tag: i, status: 0, body: Data(), failure: .network("abandoned: the region stopped"))
                }
                break
            }
            wait(timeout: 1, fds: [])
            for r in collect() { results[r.tag] = r }
        }
        return results.map { $0! }
    }

    /// Fetches `urls` as the daemon fetches a region's resources, for small jobs beside it
    /// (`tilespool plan --estimate`'s sample): at most `concurrency` transfers in flight, each
    /// started only when `limiter` admits it (`RateLimiter.admit`: the per-host limit and the
    /// region's `regionLimit` requests per second), bodies counted against its byte limit.
    /// No retries: a failure is returned as it came. Results are in `urls` order.
    /// - Parameters:
    ///   - region: the bucket key of the region's own limit.
    ///   - regionLimit: the request's `maxRequestsPerSecond`; nil: none.
    public func fetchPolitely(_ urls: [String], headers: [(String, String)] = [], limiter: inout RateLimiter,
                              region: String, regionLimit: Double?, concurrency: Int) -> [TransferResult] {
        var results = [TransferResult?](repeating: nil, count: urls.count)
        var next = 0
        let clock = { ProcessInfo.processInfo.systemUptime }
        while next < urls.count || inFlight > 0 {
            var pause = 1.0
            while next < urls.count && inFlight < max(1, concurrency) {
                let wait = limiter.admit(host: RateLimiter.host(of: urls[next]), region: region, regionLimit: regionLimit, now: clock())
                if wait > 0 { pause = min(pause, wait); break }
                start(url: urls[next], tag: next, headers: headers)
                next += 1
            }
            if inFlight > 0 {
                wait(timeout: pause, fds: [])
            } else if next < urls.count {
                usleep(useconds_t(min(pause, 1) * 1_000_000)) // nothing in flight: the limiter's wait
            }
            for r in collect() {
                limiter.received(bytes: r.body.count, now: clock())
                results[r.tag] = r
            }
        }
        return results.map { $0! }
    }
}
