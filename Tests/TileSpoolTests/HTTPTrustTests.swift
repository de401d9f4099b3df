// Issue 29, "Trust first", the HTTP slice: conditional requests that never keep stale data,
// request headers that stay on their origin across redirects, tile usage policies that hold for
// every `{s}` expansion and every redirect, a deadline per transfer, and a capped Retry-After.
// Pure rules first (TileSpoolCore), then the HTTP client against the fault server, then the real
// daemon.
import Foundation
import XCTest
@testable import TileSpoolCore
@testable import TileSpoolIO

// MARK: - Pure rules

/// `ConditionalRequest`: which conditional header a stored `Freshness` gives (RFC 9110 13.1.3).
final class ConditionalRequestTests: XCTestCase {
    let lastModified: Int64 = 1_735_689_600 // Wed, 01 Jan 2025 00:00:00 GMT

    func testAnETagIsSentAloneAndLastModifiedOnlyWithoutOne() {
        func names(_ f: Freshness?) -> [String] { ConditionalRequest.headers(for: f).map(\.0) }
        let both = Freshness(etag: "\"abc\"", lastModified: lastModified, expires: 1, fetched: 2)
        XCTAssertEqual(ConditionalRequest.headers(for: both).map { "\($0.0): \($0.1)" }, ["If-None-Match: \"abc\""])
        XCTAssertEqual(ConditionalRequest.headers(for: Freshness(etag: "W/\"x\"")).map(\.1), ["W/\"x\""], "a weak ETag as sent")
        XCTAssertEqual(ConditionalRequest.headers(for: Freshness(lastModified: lastModified)).map { "\($0.0): \($0.1)" },
                       ["If-Modified-Since: Wed, 01 Jan 2025 00:00:00 GMT"])
        XCTAssertEqual(names(nil), [])
        XCTAssertEqual(names(Freshness()), [])
        XCTAssertEqual(names(Freshness(expires: 5, fetched: 6)), [], "expiry alone is no validator")
        // An ETag that cannot be sent (it would split the request) counts as absent.
        XCTAssertEqual(names(Freshness(etag: "\"a\"\r\nX-Evil: 1", lastModified: lastModified)), ["If-Modified-Since"])
        XCTAssertEqual(names(Freshness(etag: "", lastModified: lastModified)), ["If-Modified-Since"])
        XCTAssertEqual(names(Freshness(etag: "\"a\"\n")), [])
        // A time the date format cannot carry is not sent.
        XCTAssertEqual(names(Freshness(lastModified: -1)), [])
        XCTAssertEqual(names(Freshness(lastModified: 253_402_300_800)), [])
    }

    /// IMF-fixdate (RFC 9110 5.6.7): the RFC's own example, the edges, and a sweep compared with
    /// Foundation's formatter (an independent implementation).
    func testIMFFixdate() {
        XCTAssertEqual(ConditionalRequest.imfFixdate(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT")
        XCTAssertEqual(ConditionalRequest.imfFixdate(0), "Thu, 01 Jan 1970 00:00:00 GMT")
        XCTAssertEqual(ConditionalRequest.imfFixdate(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT")
        XCTAssertEqual(ConditionalRequest.imfFixdate(lastModified), "Wed, 01 Jan 2025 00:00:00 GMT")
        XCTAssertNotNil(ConditionalRequest.imfFixdate(253_402_300_799))
        XCTAssertNil(ConditionalRequest.imfFixdate(-1))
        XCTAssertNil(ConditionalRequest.imfFixdate(253_402_300_800))
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "GMT")
        f.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        var t: Int64 = 0
        while t < 253_402_300_800 {
            XCTAssertEqual(ConditionalRequest.imfFixdate(t), f.string(from: Date(timeIntervalSince1970: Double(t))), "\(t)")
            t += 7_777_777_777 / 1000 + 12_345 // about 90 days and a bit: every month and weekday over the range
        }
    }
}

/// `HTTPOrigin` and `Redirect`: same-origin rules and which headers follow a redirect.
final class RedirectRuleTests: XCTestCase {
    func testOrigins() {
        XCTAssertEqual(HTTPOrigin(scheme: "HTTP", host: "Tiles.Example.ORG", port: nil), HTTPOrigin(scheme: "http", host: "tiles.example.org", port: 80))
        XCTAssertEqual(HTTPOrigin(scheme: "https", host: "h", port: nil).port, 443)
        XCTAssertNotEqual(HTTPOrigin(scheme: "http", host: "h", port: 8080), HTTPOrigin(scheme: "http", host: "h", port: nil), "another port")
        XCTAssertNotEqual(HTTPOrigin(scheme: "https", host: "h", port: 443), HTTPOrigin(scheme: "http", host: "h", port: 443), "another scheme")
        XCTAssertNotEqual(HTTPOrigin(scheme: "http", host: "127.0.0.1", port: 80), HTTPOrigin(scheme: "http", host: "localhost", port: 80), "another host")
        XCTAssertEqual(Redirect.followedSchemes, ["http", "https"])
    }

    func testRequestHeadersStayOnTheFirstOrigin() {
        let a = HTTPOrigin(scheme: "https", host: "a.example", port: nil), b = HTTPOrigin(scheme: "https", host: "b.example", port: nil)
        XCTAssertTrue(Redirect.keepsRequestHeaders(sentSoFar: true, first: a, next: a))
        XCTAssertFalse(Redirect.keepsRequestHeaders(sentSoFar: true, first: a, next: b))
        XCTAssertFalse(Redirect.keepsRequestHeaders(sentSoFar: false, first: a, next: a), "dropped once: not back on a later hop")
        XCTAssertFalse(Redirect.keepsRequestHeaders(sentSoFar: true, first: nil, next: a), "an unknown first origin keeps nothing")
    }

    /// libcurl's URL API gives the parts the rules compare.
    func testURLPartsThroughLibcurl() {
        XCTAssertEqual(HTTPClient.urlParts("http://127.0.0.1:8080/x?y=1")?.origin, HTTPOrigin(scheme: "http", host: "127.0.0.1", port: 8080))
        XCTAssertEqual(HTTPClient.urlParts("HTTPS://Tiles.Example.org/a")?.origin, HTTPOrigin(scheme: "https", host: "tiles.example.org", port: 443))
        XCTAssertEqual(HTTPClient.urlParts("http://user:pw@h:80/")?.origin, HTTPOrigin(scheme: "http", host: "h", port: 80))
        XCTAssertEqual(HTTPClient.urlParts("file:///etc/passwd")?.scheme, "file")
        XCTAssertNil(HTTPClient.urlParts("file:///etc/passwd")?.origin ?? nil)
        XCTAssertEqual(HTTPClient.urlParts("gopher://h/x")?.scheme, "gopher")
        XCTAssertNil(HTTPClient.urlParts("not a url"))
    }
}

/// `TileUsagePolicy` over every expansion of a template (finding 3).
final class PolicyExpansionTests: XCTestCase {
    func testSubdomainExpansions() {
        XCTAssertEqual(TileURLTemplate("https://{s}/x/{z}/{x}/{y}.png", subdomains: ["tile.openstreetmap.org"]).subdomainExpansions,
                       ["https://tile.openstreetmap.org/x/{z}/{x}/{y}.png"])
        XCTAssertEqual(TileURLTemplate("https://{s}.t.example/{z}/{x}/{y}{ratio}.png", ratio: "@2x").subdomainExpansions,
                       ["https://a.t.example/{z}/{x}/{y}@2x.png", "https://b.t.example/{z}/{x}/{y}@2x.png", "https://c.t.example/{z}/{x}/{y}@2x.png"])
        XCTAssertEqual(TileURLTemplate("https://{s}.t.example/{quadkey}/{s}", subdomains: ["x", "y", "x"]).subdomainExpansions,
                       ["https://x.t.example/{quadkey}/x", "https://y.t.example/{quadkey}/y"], "every {s} takes the same value; duplicates dropped")
        XCTAssertEqual(TileURLTemplate("https://t.example/{z}/{x}/{-y}.pbf").subdomainExpansions, ["https://t.example/{z}/{x}/{-y}.pbf"])
        // The expansions cover every URL the template gives: each tile's host is one of them.
        let t = TileURLTemplate("https://{s}.t{ratio}.example/{z}/{x}/{y}.png", ratio: "", subdomains: ["p", "q", "r", "s", "t"])
        let hosts = Set(TileUsagePolicy.hosts(of: t))
        XCTAssertEqual(hosts, ["p.t.example", "q.t.example", "r.t.example", "s.t.example", "t.t.example"])
        for z in 0...4 { for x in 0..<(1 << z) { for y in 0..<(1 << z) {
            XCTAssertTrue(hosts.contains(TileUsagePolicy.host(of: t.url(for: TileID(z: z, x: x, y: y)))!))
        } } }
    }

    func testEveryExpansionIsJudged() throws {
        // The bypass of issue 29: `{s}` standing for the whole host.
        let bypass = try XCTUnwrap(TileUsagePolicy.refusal(urls: ["https://{s}/x/{z}/{x}/{y}.png"], subdomains: ["tile.openstreetmap.org"], allowedHosts: []))
        XCTAssertEqual(bypass.code, .policyRefused)
        XCTAssertTrue(bypass.message.hasPrefix("tile.openstreetmap.org: "), bypass.message)
        XCTAssertEqual(bypass.url, "https://{s}/x/{z}/{x}/{y}.png")
        XCTAssertNil(TileUsagePolicy.refusal(urls: ["https://{s}/x/{z}/{x}/{y}.png"], subdomains: ["tile.openstreetmap.org"],
                                             allowedHosts: ["tile.openstreetmap.org"]))
        // One listed expansion among others is enough; none listed passes.
        XCTAssertEqual(TileUsagePolicy.refusal(urls: ["https://{s}.tile.openstreetmap.org/{z}/{x}/{y}.png"], subdomains: ["x", "c"], allowedHosts: [])?
            .message.hasPrefix("c.tile.openstreetmap.org: "), true)
        XCTAssertNil(TileUsagePolicy.refusal(urls: ["https://{s}.tile.openstreetmap.org/{z}/{x}/{y}.png"], subdomains: ["x", "y"], allowedHosts: []))
        XCTAssertNil(TileUsagePolicy.refusal(urls: ["https://{s}/x/{z}/{x}/{y}.png"], subdomains: ["tiles.example.org"], allowedHosts: []))
        XCTAssertNotNil(TileUsagePolicy.refusal(urls: ["https://maps.{s}.org/{z}/{x}/{y}.png"], subdomains: ["a", "wikimedia"], allowedHosts: []))
        // Tokens that can be empty in the host: {ratio} (filled in) and {quadkey} (empty at z0).
        XCTAssertNotNil(TileUsagePolicy.refusal(templates: [TileURLTemplate("https://tile.openstreetmap.org{ratio}/{z}/{x}/{y}.png")], allowedHosts: []))
        XCTAssertNotNil(TileUsagePolicy.refusal(urls: ["https://tile.openstreetmap.org{quadkey}/{z}/{x}/{y}.png"], allowedHosts: []))
        // A concrete host, as libcurl parsed it from a redirect.
        XCTAssertNotNil(TileUsagePolicy.refusal(host: "Tile.OpenStreetMap.org.", url: "https://tile.openstreetmap.org/1/2/3.png", allowedHosts: []))
        XCTAssertNil(TileUsagePolicy.refusal(host: "tile.openstreetmap.org", url: "u", allowedHosts: ["tile.openstreetmap.org"]))
        XCTAssertNil(TileUsagePolicy.refusal(host: "tiles.example.org", url: "u", allowedHosts: []))
    }
}

/// `RetryAfter` (RFC 9110 10.2.3): delay-seconds or an HTTP date, capped; an overflowing number
/// is the cap (finding 5).
final class RetryAfterTests: XCTestCase {
    let now = 1_800_000_000.0

    func testDelaySeconds() {
        func parse(_ s: String) -> Double? { RetryAfter.seconds(s, now: now) { _ in XCTFail("no date here: \(s)"); return nil } }
        XCTAssertEqual(parse("120"), 120)
        XCTAssertEqual(parse(" \t7 "), 7, "white space around it")
        XCTAssertEqual(parse("3600"), 3600)
        XCTAssertEqual(parse("7200"), 3600, "capped at an hour")
        XCTAssertEqual(parse("9223372036854775807"), 3600, "Int64.max")
        XCTAssertEqual(parse("99999999999999999999"), 3600, "too large for any integer: the cap, not nothing")
        XCTAssertEqual(parse(String(repeating: "9", count: 400)), 3600)
        XCTAssertEqual(parse("000042"), 42)
        XCTAssertNil(parse("0"), "no wait")
        XCTAssertNil(parse(""))
        XCTAssertEqual(RetryAfter.seconds("99999999999999999999", now: now, cap: 60) { _ in nil }, 60)
        XCTAssertEqual(RetryAfter.maximum, 3600)
    }

    func testHTTPDates() {
        let dates = ["Wed, 01 Jan 2025 00:00:00 GMT": now + 90, "past": now - 5, "far": now + 86_400 * 365, "now": now]
        func parse(_ s: String) -> Double? { RetryAfter.seconds(s, now: now) { dates[$0] } }
        XCTAssertEqual(parse("Wed, 01 Jan 2025 00:00:00 GMT"), 90)
        XCTAssertEqual(parse("far"), 3600, "capped")
        XCTAssertNil(parse("past"))
        XCTAssertNil(parse("now"))
        XCTAssertNil(parse("-5"), "not delay-seconds, not a date")
        XCTAssertNil(parse("1.5"))
        XCTAssertNil(parse("soon"))
    }
}

// MARK: - The HTTP client against the fault server

/// `HTTPClient` at the edge: what the server received and what came back.
final class HTTPClientTrustTests: XCTestCase {
    var server: FaultServer!

    override func setUpWithError() throws { server = try FaultServer() }
    override func tearDown() { server?.stop() }

    /// Runs one GET to completion on `client`.
    func fetch(_ client: HTTPClient, _ url: String, validators: Freshness? = nil, headers: [(String, String)] = [],
               timeout: TimeInterval = 30) throws -> TransferResult {
        client.start(url: url, tag: 1, validators: validators, headers: headers)
        var result: TransferResult?
        try waitUntil("the transfer of \(url) ends", timeout: timeout, poll: 0) {
            client.wait(timeout: 0.1, fds: [])
            result = client.collect().first
            return result != nil
        }
        return result!
    }

    /// The conditional headers the server received with each request for `path`, in order:
    /// `INM=<value>` and `IMS=<value>`, or `plain`.
    func conditionalHeaders(_ path: String) -> [String] {
        server.requests().filter { $0.path == path }.map { r in
            let c = [r.headers["If-None-Match"].map { "INM=\($0)" }, r.headers["If-Modified-Since"].map { "IMS=\($0)" }].compactMap { $0 }
            return c.isEmpty ? "plain" : c.joined(separator: " ")
        }
    }

    /// Finding 1: a 200 with a new body and a new ETag but the same Last-Modified is a new body,
    /// not "not modified"; with an ETag only `If-None-Match` goes out; a real 304 is reported as
    /// such; without an ETag `If-Modified-Since` goes out as an IMF-fixdate.
    func testA200IsANewBodyAndOnlyIfNoneMatchGoesOutWithAnETag() throws {
        let client = HTTPClient(options: HTTPOptions())
        let path = "/changing/2/hc/0/0/0.png", lm: Int64 = 1_735_689_600
        // The stored copy is "v0"; the server has v1 now, under the same Last-Modified.
        let first = try fetch(client, server.url(path), validators: Freshness(etag: "\"v0\"", lastModified: lm))
        XCTAssertEqual(first.status, 200)
        XCTAssertFalse(first.notModified)
        XCTAssertEqual(first.body, FaultServer.okBody(path) + Data(" v1".utf8))
        XCTAssertEqual(first.freshness.etag, "\"v1\"")
        XCTAssertEqual(first.freshness.lastModified, lm)
        // v2 is current and asked with its ETag: a real 304.
        _ = try fetch(client, server.url(path)) // v2 goes out (a plain GET)
        let current = try fetch(client, server.url(path), validators: Freshness(etag: "\"v2\"", lastModified: lm))
        XCTAssertEqual(current.status, 304)
        XCTAssertTrue(current.notModified)
        XCTAssertEqual(current.body, Data())
        // No ETag: If-Modified-Since with the time.
        let byDate = try fetch(client, server.url(path), validators: Freshness(lastModified: lm))
        XCTAssertTrue(byDate.notModified)
        XCTAssertEqual(conditionalHeaders(path), ["INM=\"v0\"", "plain", "INM=\"v2\"", "IMS=Wed, 01 Jan 2025 00:00:00 GMT"])
    }

    /// Finding 2: the request's headers follow a same-origin redirect and no other: not to
    /// another port (a second server), not to another host name of the same server (`localhost`
    /// for 127.0.0.1), and not back to the first origin once they were dropped. Conditional
    /// headers go with every hop. The transfer keeps its tag and ends with the target's body.
    func testRequestHeadersAreDroppedOnACrossOriginRedirect() throws {
        let other = try FaultServer()
        defer { other.stop() }
        let client = HTTPClient(options: HTTPOptions())
        let key = [("X-Api-Key", "k-123")], stale = Freshness(etag: "\"old\"")
        func apiKeys(_ s: FaultServer, _ path: String) -> [String] { s.requests().filter { $0.path == path }.map { $0.headers["X-Api-Key"] ?? "-" } }
        func etags(_ s: FaultServer, _ path: String) -> [String] { s.requests().filter { $0.path == path }.map { $0.headers["If-None-Match"] ?? "-" } }

        let same = try fetch(client, server.url("/redirect/so/1/2/3.png"), validators: stale, headers: key)
        XCTAssertEqual(same.status, 200)
        XCTAssertEqual(same.body, FaultServer.okBody("/ok/so/1/2/3.png"))
        XCTAssertEqual(apiKeys(server, "/ok/so/1/2/3.png"), ["k-123"], "same origin: kept")

        let cross = try fetch(client, server.url("/redirectto/http/127.0.0.1:\(other.port)/ok/xo/1/2/3.png"), validators: stale, headers: key)
        XCTAssertEqual(cross.tag, 1)
        XCTAssertEqual(cross.status, 200)
        XCTAssertEqual(cross.body, FaultServer.okBody("/ok/xo/1/2/3.png"))
        XCTAssertEqual(apiKeys(server, "/redirectto/http/127.0.0.1:\(other.port)/ok/xo/1/2/3.png"), ["k-123"], "the first origin has it")
        XCTAssertEqual(apiKeys(other, "/ok/xo/1/2/3.png"), ["-"], "another port: dropped")
        XCTAssertEqual(etags(other, "/ok/xo/1/2/3.png"), ["\"old\""], "conditional headers go along")

        _ = try fetch(client, server.url("/redirectto/http/localhost:\(server.port)/ok/lh/1/2/3.png"), headers: key)
        XCTAssertEqual(apiKeys(server, "/ok/lh/1/2/3.png"), ["-"], "another host name: dropped")

        let back = "/redirectto/http/127.0.0.1:\(other.port)/redirectto/http/127.0.0.1:\(server.port)/ok/back/1/2/3.png"
        let backAgain = try fetch(client, server.url(back), headers: key)
        XCTAssertEqual(backAgain.body, FaultServer.okBody("/ok/back/1/2/3.png"))
        XCTAssertEqual(apiKeys(server, "/ok/back/1/2/3.png"), ["-"], "not back once dropped")
    }

    /// Redirects followed by the client itself still stop after `maxRedirects` and never leave
    /// http(s): a loop fails as refused after the request and 5 redirects; `file:` is refused
    /// without being read.
    func testRedirectLimitsHold() throws {
        let client = HTTPClient(options: HTTPOptions())
        let loop = try fetch(client, server.url("/redirectloop/c/1/2/3.png"))
        guard case .refused(let why)? = loop.failure else { return XCTFail("\(String(describing: loop.failure))") }
        XCTAssertTrue(why.contains("redirect"), why)
        XCTAssertEqual(server.hits("/redirectloop/c/1/2/3.png"), 6)
        let file = try fetch(client, server.url("/redirectfile/c/1/2/3.png"))
        guard case .refused(let fileWhy)? = file.failure else { return XCTFail("\(String(describing: file.failure))") }
        XCTAssertTrue(fileWhy.contains("protocol 'file'"), fileWhy)
        XCTAssertEqual(file.body, Data())
    }

    /// Finding 3: a redirect to a host a tile usage policy lists is refused before anything is
    /// asked from it (libcurl is never given that URL: no DNS, no connection), with
    /// `policyRefused`; `allowedHosts` lifts it (offline here: the follow fails on the network).
    func testRedirectToAPolicyHostIsNotFollowed() throws {
        let client = HTTPClient(options: HTTPOptions())
        let path = "/redirectto/https/tile.openstreetmap.org/1/2/3.png"
        let r = try fetch(client, server.url(path))
        guard case .policyRefused(let why)? = r.failure else { return XCTFail("\(String(describing: r.failure))") }
        XCTAssertTrue(why.contains("tile.openstreetmap.org") && why.contains("https://operations.osmfoundation.org/policies/tiles/"), why)
        XCTAssertEqual(r.body, Data())
        XCTAssertEqual(server.hits(path), 1)
        let wiki = try fetch(client, server.url("/redirectto/http/MAPS.wikimedia.org./x/1/2/3.png"))
        guard case .policyRefused? = wiki.failure else { return XCTFail("\(String(describing: wiki.failure))") }

        var allowed = HTTPOptions()
        allowed.allowedHosts = ["tile.openstreetmap.org"]
        allowed.connectTimeout = 2
        let lifted = try fetch(HTTPClient(options: allowed), server.url(path))
        guard case .network? = lifted.failure else { return XCTFail("followed, so a network failure offline: \(String(describing: lifted.failure))") }
    }

    /// Finding 4: a body dripping a byte every 2 s (which the low-speed limit of 60 s would let
    /// run for a minute) is cut at the transfer's deadline, redirects included, as a network
    /// failure that says so.
    func testTransferTimeoutCutsASlowBody() throws {
        var options = HTTPOptions()
        options.transferTimeout = 1.5
        options.lowSpeedTime = 60
        let client = HTTPClient(options: options)
        for path in ["/slowbody/tt/1/2/3.png", "/redirectto/http/127.0.0.1:\(server.port)/slowbody/tr/1/2/3.png"] {
            let started = Date()
            let r = try fetch(client, server.url(path), timeout: 20)
            let took = Date().timeIntervalSince(started)
            guard case .network(let why)? = r.failure else { return XCTFail("\(path): \(String(describing: r.failure))") }
            XCTAssertTrue(why.hasPrefix("transfer timeout: not finished within 1.5 s"), why)
            XCTAssertTrue((1.4...6).contains(took), "\(path): \(took) s")
            XCTAssertEqual(r.body, Data())
        }
    }

    /// Finding 5: the client reads Retry-After itself: an overflowing number is the cap (1 h),
    /// seconds and HTTP dates as before; a 200 carries none.
    func testRetryAfterIsReadAndCapped() throws {
        let client = HTTPClient(options: HTTPOptions())
        let huge = try fetch(client, server.url("/retryafter/99999999999999999999/1/c/1/2/3.png"))
        XCTAssertEqual(huge.status, 429)
        XCTAssertEqual(huge.retryAfter, 3600)
        XCTAssertEqual(try fetch(client, server.url("/retryafter/7200/1/d/1/2/3.png")).retryAfter, 3600)
        XCTAssertEqual(try fetch(client, server.url("/retryafter/120/1/e/1/2/3.png")).retryAfter, 120)
        let date = try XCTUnwrap(try fetch(client, server.url("/ratelimitdate/1/f/1/2/3.png")).retryAfter)
        XCTAssertTrue((0.01...2.01).contains(date), "an HTTP date 1-2 s ahead: \(date)")
        let ok = try fetch(client, server.url("/retryafter/120/1/e/1/2/3.png")) // its second request: 200
        XCTAssertEqual(ok.status, 200)
        XCTAssertNil(ok.retryAfter)
    }
}

// MARK: - The daemon

/// The real daemon against the fault server.
final class HTTPTrustTests: FaultServerSpoolTestCase {
    /// Waits for the `n`th `refresh` event `what` of `id`, and the status to say so.
    func waitForRefresh(_ id: String, _ what: String, count n: Int, timeout: TimeInterval = 30) throws {
        try waitUntil("refresh \(what) (#\(n)) of \(id)", timeout: timeout) {
            if let d = fx.daemon, !d.isRunning { XCTFail("daemon exited: \(fx.log().suffix(2000))"); return true }
            guard fx.events(id).filter({ $0["refresh"] as? String == what }).count >= n else { return false }
            return (fx.status(id)?["refreshing"] as? Bool) == (what == "started")
        }
    }

    /// The manifest's lines of `id` as columns (comments left out).
    func manifestColumns(_ id: String) -> [[String]] {
        let text = (try? String(contentsOfFile: "\(fx.store)/regions/\(id)/manifest.tsv", encoding: .utf8)) ?? ""
        return text.split(separator: "\n").filter { !$0.hasPrefix("#") }.map { $0.split(separator: "\t", omittingEmptySubsequences: false).map(String.init) }
    }

    /// The conditional headers the server received with each request for `path`, in order.
    func conditionalHeaders(_ path: String) -> [String] {
        server.requests().filter { $0.path == path }.map { r in
            let c = [r.headers["If-None-Match"].map { "INM=\($0)" }, r.headers["If-Modified-Since"].map { "IMS=\($0)" }].compactMap { $0 }
            return c.isEmpty ? "plain" : c.joined(separator: " ")
        }
    }

    func refresh(_ id: String) throws {
        let (code, out) = try fx.cli(["refresh", id, "--spool", fx.spool])
        XCTAssertEqual(code, 0, out)
    }

    // MARK: Finding 2: request headers stay on their origin

    /// A region with an API key in its `headers`: the tiles behind a same-origin redirect get
    /// the key, those behind a redirect to another server do not; both complete with the
    /// target's bytes under the URL asked.
    func testRegionHeadersDoNotFollowACrossOriginRedirect() throws {
        let other = try FaultServer()
        defer { other.stop() }
        try fx.start()
        var request = server.tilesRequest(["/redirect/so/{z}/{x}/{y}.png", "/redirectto/http/127.0.0.1:\(other.port)/ok/xo/{z}/{x}/{y}.png"])
        request["headers"] = ["X-Api-Key": "k-123"]
        try fx.drop("hd.json", request)
        try fx.waitForState("hd", "completed", timeout: 20)
        func apiKeys(_ s: FaultServer, _ path: String) -> [String] { s.requests().filter { $0.path == path }.map { $0.headers["X-Api-Key"] ?? "-" } }
        XCTAssertEqual(apiKeys(server, "/redirect/so/0/0/0.png"), ["k-123"])
        XCTAssertEqual(apiKeys(server, "/ok/so/0/0/0.png"), ["k-123"], "same origin: kept")
        XCTAssertEqual(apiKeys(server, "/redirectto/http/127.0.0.1:\(other.port)/ok/xo/0/0/0.png"), ["k-123"])
        XCTAssertEqual(apiKeys(other, "/ok/xo/0/0/0.png"), ["-"], "another origin: dropped")
        let lines = fx.manifest("hd").sorted { $0.key < $1.key }
        XCTAssertEqual(lines.map(\.sha), [sha256Hex(FaultServer.okBody("/ok/so/0/0/0.png")), sha256Hex(FaultServer.okBody("/ok/xo/0/0/0.png"))])
        XCTAssertEqual(lines.map(\.url), [server.url("/redirect/so/0/0/0.png"), server.url("/redirectto/http/127.0.0.1:\(other.port)/ok/xo/0/0/0.png")])
        fx.assertStoreMatchesManifest("hd")
    }

    // MARK: Finding 3: tile usage policies hold for every {s} and every redirect

    /// A `tiles` template whose `{s}` is the whole host, with `subdomains` naming a listed host,
    /// is refused on arrival (before: taken for `a` and accepted); `tilespool plan` refuses it the
    /// same way.
    func testSubdomainThatIsAListedHostIsRefused() throws {
        var request = server.tilesRequest([])
        request["tiles"] = ["https://{s}/x/{z}/{x}/{y}.png"]
        request["subdomains"] = ["tile.openstreetmap.org"]
        let file = fx.root.appendingPathComponent("sub.json")
        try JSONSerialization.data(withJSONObject: request).write(to: file)
        let (code, out) = try fx.cli(["plan", file.path])
        XCTAssertEqual(code, 1, out)
        XCTAssertTrue(out.contains("policyRefused: tile.openstreetmap.org:"), out)

        try fx.start()
        try fx.drop("sub.json", request)
        try fx.waitForState("sub", "failed", timeout: 20)
        XCTAssertEqual(fx.errorCode("sub"), "policyRefused")
        XCTAssertTrue(fx.errorMessage("sub")?.hasPrefix("tile.openstreetmap.org: ") ?? false, fx.errorMessage("sub") ?? "")
        try waitUntil("the request is moved to rejected/ (just after its status is written)", timeout: 10) { fx.inRejected("sub.json") }
        XCTAssertEqual(fx.eventStates("sub"), ["failed"], "refused on arrival, never queued")
    }

    /// A tile that redirects to tile.openstreetmap.org fails the region with `policyRefused` at
    /// once (not retried, nothing asked of that host), the error naming the URL asked.
    func testRedirectToAListedHostFailsTheRegionWithPolicyRefused() throws {
        try fx.start(["--max-retries", "2"])
        let path = "/redirectto/https/tile.openstreetmap.org/0/0/0.png"
        try fx.drop("rp.json", server.tilesRequest(["/redirectto/https/tile.openstreetmap.org/{z}/{x}/{y}.png"]))
        try fx.waitForState("rp", "failed", timeout: 20)
        XCTAssertEqual(fx.errorCode("rp"), "policyRefused")
        XCTAssertEqual(fx.errorObject("rp")?["url"] as? String, server.url(path))
        let m = fx.errorMessage("rp") ?? ""
        XCTAssertTrue(m.contains("tile.openstreetmap.org") && m.contains("--allow-host"), m)
        XCTAssertEqual(server.hits(path), 1, "not retried")
        XCTAssertEqual(fx.objects(), [])
    }

    // MARK: Finding 4: a deadline per transfer

    /// `--transfer-timeout 2` with the low-speed limit out of the way (60 s): a tile whose body
    /// drips a byte every 2 s is cut after 2 s, retried once, and the region goes `pausedNetwork`
    /// with a `networkError` that names the timeout; nothing is stored.
    func testTransferTimeoutPausesARegionOnADrippingServer() throws {
        let started = Date()
        try fx.start(["--transfer-timeout", "2", "--low-speed-time", "60", "--max-retries", "1"])
        let path = "/slowbody/tt/0/0/0.png"
        try fx.drop("tt.json", server.tilesRequest(["/slowbody/tt/{z}/{x}/{y}.png"]))
        try fx.waitForState("tt", "pausedNetwork", timeout: 30)
        XCTAssertLessThan(Date().timeIntervalSince(started), 20, "two attempts of 2 s, not two of 60 s")
        XCTAssertEqual(fx.errorCode("tt"), "networkError")
        XCTAssertEqual(fx.errorObject("tt")?["url"] as? String, server.url(path))
        let m = fx.errorMessage("tt") ?? ""
        XCTAssertTrue(m.contains("transfer timeout") && m.contains("--transfer-timeout"), m)
        XCTAssertGreaterThanOrEqual(server.hits(path), 2, "retried before pausing")
        XCTAssertEqual(fx.objects(), [])
        XCTAssertEqual(fx.progress("tt")["tilesCompleted"] ?? 0, 0)
        let (_, help) = try fx.cli(["run", "--help"])
        XCTAssertTrue(help.contains("--transfer-timeout SECONDS") && help.contains("default 300"), help)
    }

    // MARK: Finding 5: an overflowing Retry-After is capped, not ignored

    /// `Retry-After: 99999999999999999999` on a 429: the region waits the longest time honoured
    /// (1 hour, shown as `throttledUntil`) instead of retrying at once, and the server sees no
    /// second request.
    func testOverflowingRetryAfterThrottlesForAnHour() throws {
        try fx.start(["--max-retries", "3"])
        let path = "/retryafter/99999999999999999999/1/ro/0/0/0.png"
        try fx.drop("ro.json", server.tilesRequest(["/retryafter/99999999999999999999/1/ro/{z}/{x}/{y}.png"]))
        var throttled: Double?
        try waitUntil("ro shows throttledUntil", timeout: 20) {
            if let s = fx.status("ro")?["throttledUntil"] as? String { throttled = ISO8601DateFormatter().date(from: s)?.timeIntervalSinceNow }
            return throttled != nil
        }
        XCTAssertTrue((3560...3601).contains(throttled!), "throttled for \(throttled!) s")
        XCTAssertEqual(fx.state("ro"), "downloading")
        // Time passes on the same daemon: another region completes; ro is not asked again.
        try fx.drop("ok.json", server.tilesRequest(["/ok/ok/{z}/{x}/{y}.png"], maxZoom: 1))
        try fx.waitForState("ok", "completed", timeout: 20)
        XCTAssertEqual(server.hits(path), 1)
    }

    // MARK: Finding 1: refresh never keeps stale data

    /// A tile whose body and ETag change while its Last-Modified does not: the first refresh
    /// stores the NEW body (the manifest's SHA-256 and the object's bytes are v2's), and the
    /// second asks with `If-None-Match` "v2" alone, gets a 304 and keeps v2. A tile served with
    /// a Last-Modified and no ETag is asked with `If-Modified-Since` alone.
    func testRefreshStoresANewBodyWhoseLastModifiedDidNotChange() throws {
        try fx.start()
        let path = "/changing/2/rt/0/0/0.png", byDate = "/lastmodified/rt/0/0/0.png"
        try fx.drop("rt.json", server.tilesRequest(["/changing/2/rt/{z}/{x}/{y}.png", "/lastmodified/rt/{z}/{x}/{y}.png"]))
        try fx.waitForState("rt", "completed", timeout: 20)
        let v1 = FaultServer.okBody(path) + Data(" v1".utf8), v2 = FaultServer.okBody(path) + Data(" v2".utf8)
        func changingLine() -> [String]? { manifestColumns("rt").first { $0[4] == server.url(path) } }
        XCTAssertEqual(changingLine()?[1], sha256Hex(v1))

        try refresh("rt")
        try waitForRefresh("rt", "finished", count: 1)
        let line = try XCTUnwrap(changingLine())
        XCTAssertEqual(line[1], sha256Hex(v2), "the new body is recorded")
        XCTAssertEqual(line[5], "\"v2\"", "next to its own ETag")
        XCTAssertEqual(fx.objectData(sha256Hex(v2)), v2)
        XCTAssertEqual(fx.progress("rt")["resourcesChanged"], 1)

        try refresh("rt")
        try waitForRefresh("rt", "finished", count: 2)
        XCTAssertEqual(conditionalHeaders(path), ["plain", "INM=\"v1\"", "INM=\"v2\""], "If-None-Match alone once an ETag is known")
        XCTAssertEqual(conditionalHeaders(byDate), ["plain"] + Array(repeating: "IMS=Wed, 01 Jan 2025 00:00:00 GMT", count: 2),
                       "If-Modified-Since only without an ETag")
        XCTAssertEqual(changingLine()?[1], sha256Hex(v2), "the 304 keeps v2")
        XCTAssertEqual(fx.progress("rt")["resourcesUnchanged"], 2, "both answered 304")
        fx.assertStoreMatchesManifest("rt")
    }

    /// The same for a style document: the refreshed style is the new one, byte for byte.
    func testRefreshStoresANewStyleWhoseLastModifiedDidNotChange() throws {
        let doc = """
            {"version": 8, "name": "changing v__VERSION__",
             "sources": {"r": {"type": "raster", "tiles": ["__BASE__/ok/rs/{z}/{x}/{y}.png"], "maxzoom": 0}},
             "layers": [{"id": "r", "type": "raster", "source": "r"}]}
            """
        try server.register("changing-style", json: doc)
        func version(_ v: Int) -> Data {
            Data(doc.replacingOccurrences(of: "__BASE__", with: server.baseURL).replacingOccurrences(of: "__VERSION__", with: "\(v)").utf8)
        }
        try fx.start()
        try fx.drop("rs.json", ["style": server.url("/changingjson/2/changing-style"), "bounds": [-180, -85, 180, 85],
                                "minZoom": 0, "maxZoom": 0])
        try fx.waitForState("rs", "completed", timeout: 20)
        XCTAssertEqual(fx.manifest("rs").first { $0.kind == "style" }?.sha, sha256Hex(version(1)))
        try refresh("rs")
        try waitForRefresh("rs", "finished", count: 1)
        let style = try XCTUnwrap(manifestColumns("rs").first { $0[0] == "style" })
        XCTAssertEqual(style[1], sha256Hex(version(2)), "the new style is recorded")
        XCTAssertEqual(style[5], "\"v2\"")
        XCTAssertEqual(fx.objectData(sha256Hex(version(2))), version(2))
        XCTAssertEqual(conditionalHeaders("/changingjson/2/changing-style"), ["plain", "INM=\"v1\""])
        fx.assertStoreMatchesManifest("rs")
    }
}
