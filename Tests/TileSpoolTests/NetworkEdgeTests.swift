// Issue 29, round 2 (/work/attack2/REPORT-round2.md), the network edge: numbers a server sends
// (Cache-Control, Age, Expires) never trap, nor do huge timeouts on the command line; only real
// entity-tags are kept as validators; a response whose headers libcurl refuses is a bad response;
// what a server echoes back of a request's credentials is redacted wherever it is quoted; S3 error
// messages too; more parameter names and fragments are redacted; tile usage policies cover every
// URL fetched; `plan` and the daemon refuse the same hosts. Each test runs the real binary against
// the fault server (`/reply/NAME/...` answers what the test registered), or pins a pure rule.
import Foundation
import Glibc
import XCTest
@testable import TileSpoolCore
@testable import TileSpoolIO

/// The daemon and `plan` against servers that send hostile numbers, echo credentials, or lead to
/// hosts under a tile usage policy.
final class NetworkEdgeTests: FaultServerSpoolTestCase {
    /// 2^31 seconds: the largest lifetime kept (RFC 9111 section 1.2.2).
    let cap: Int64 = 2_147_483_648

    /// The manifest lines of `id` as columns, by key.
    func columns(_ id: String) -> [String: [String]] {
        let text = (try? String(contentsOfFile: "\(fx.store)/regions/\(id)/manifest.tsv", encoding: .utf8)) ?? ""
        var out: [String: [String]] = [:]
        for l in text.split(separator: "\n") where !l.hasPrefix("#") {
            let f = l.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            out[f[3]] = f
        }
        return out
    }

    /// The conditional headers each request for `path` carried, in order: `INM=...` for
    /// If-None-Match, `IMS=...` for If-Modified-Since, "" for a plain GET.
    func sent(_ path: String) -> [String] {
        server.requests().filter { $0.path == path }.map { r in
            [r.headers["If-None-Match"].map { "INM=\($0)" }, r.headers["If-Modified-Since"].map { "IMS=\($0)" }].compactMap { $0 }.joined(separator: " ")
        }
    }

    /// Seconds from a manifest line's fetch time (column 9, whole seconds) to its expiry
    /// (column 8); nil when either is `-`.
    func lifetime(_ line: [String]?) -> Int64? {
        guard let line, let expires = Int64(line[7]), let fetched = Double(line[8]) else { return nil }
        return expires - Int64(fetched.rounded(.down))
    }

    // MARK: Finding 1: no number in Cache-Control, Age or Expires traps

    /// A tile server sending `Cache-Control: max-age=9223372036854775807` (and its variants)
    /// crashed the daemon on every start. Now every lifetime is clamped to 2^31 s, an invalid
    /// `max-age` counts as already expired, and `Age` is taken off max-age without overflowing:
    /// the region completes and the manifest's expiry says so.
    func testHugeCacheLifetimesDoNotCrashTheDaemon() throws {
        let variants: [(String, [(String, String)], Int64?)] = [
            ("int64max", [("Cache-Control", "max-age=9223372036854775807")], cap),
            ("plus", [("Cache-Control", "public, max-age=+9223372036854775807")], 0),
            ("zeros", [("Cache-Control", "max-age=09223372036854775807")], cap),
            ("quoted", [("Cache-Control", "max-age=\"9223372036854775807\"")], cap),
            ("huge", [("Cache-Control", "max-age=99999999999999999999999999")], cap),
            ("negative", [("Cache-Control", "max-age=-9223372036854775808")], 0),
            ("age", [("Cache-Control", "max-age=9223372036854775807"), ("Age", "100")], cap - 100),
            ("hugeage", [("Cache-Control", "max-age=100"), ("Age", "9223372036854775807")], 0),
            ("someage", [("Cache-Control", "max-age=100"), ("Age", "30")], 70),
            ("expires", [("Expires", "Fri, 31 Dec 9999 23:59:59 GMT")], nil),
        ]
        for (name, headers, _) in variants { try server.registerReply(name, headers: headers, body: "tile \(name)") }
        try fx.start()
        try fx.drop("cc.json", server.tilesRequest(variants.map { "/reply/\($0.0)/{z}/{x}/{y}.pbf" }, id: "cc"))
        try fx.waitForState("cc", "completed", timeout: 30)
        let lines = columns("cc")
        for (i, (name, _, expected)) in variants.enumerated() {
            let line = lines["tiles\(i)/0/0/0"]
            if let expected {
                let got = try XCTUnwrap(lifetime(line), name)
                XCTAssertTrue(abs(got - expected) <= 1, "\(name): lifetime \(got), expected \(expected)")
            }
        }
        XCTAssertEqual(lines["tiles9/0/0/0"]?[7], "253402300799", "Expires kept as the date it names")
        fx.assertStoreMatchesManifest("cc")
        // And once more after a restart (it used to crash again at every start).
        XCTAssertEqual(fx.stop(), 0)
        try fx.start()
        try fx.drop("cc.json", server.tilesRequest(variants.map { "/reply/\($0.0)/{z}/{x}/{y}.pbf" }, id: "cc"))
        try waitUntil("the same request again refreshes cc") {
            if let d = fx.daemon, !d.isRunning { XCTFail("daemon exited: \(fx.log().suffix(2000))"); return true }
            // The event is written before the status (contract.md): wait for both.
            return fx.events("cc").contains { $0["refresh"] as? String == "finished" } && fx.state("cc") == "completed"
        }
        XCTAssertEqual(fx.state("cc"), "completed")
    }

    /// `tilespool plan` read the same headers on the style and TileJSON and crashed.
    func testPlanSurvivesHugeCacheLifetimes() throws {
        try server.registerReply("tj", headers: [("Cache-Control", "max-age=9223372036854775807"), ("Content-Type", "application/json")],
                                 body: #"{"tiles": ["__BASE__/ok/tj/{z}/{x}/{y}.pbf"], "maxzoom": 2}"#)
        try server.registerReply("st", headers: [("Cache-Control", "max-age=9223372036854775807"), ("Age", "9223372036854775807")],
                                 body: #"{"version": 8, "sources": {"v": {"type": "vector", "url": "__BASE__/reply/tj/x.json"}}, "layers": []}"#)
        let file = fx.root.appendingPathComponent("p.json")
        try JSONSerialization.data(withJSONObject: ["style": server.url("/reply/st/style.json"), "bounds": [-180, -85, 180, 85],
                                                    "minZoom": 0, "maxZoom": 1]).write(to: file)
        let (rc, out) = try fx.cli(["plan", file.path])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.contains("plan for p: 7 resources, 5 tiles"), out)
    }

    // MARK: Finding 15: huge timeouts are usage errors

    /// `tilespool run` with `option value` on this spool: whether it exited by itself within
    /// 10 s (a refused option; otherwise it is stopped), its exit status and what it printed.
    func runWithOption(_ option: String, _ value: String) throws -> (exited: Bool, status: Int32, text: String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: SpoolFixture.binary)
        p.arguments = ["run", "--spool", fx.spool, "--store", fx.store, option, value]
        let pipe = Pipe()
        p.standardOutput = pipe
        p.standardError = pipe
        try p.run()
        var exited = false
        try? waitUntil("run \(option) \(value) exits", timeout: 10) { exited = !p.isRunning; return exited }
        if !exited { p.terminate(); p.waitUntilExit() }
        return (exited, p.terminationStatus, String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self))
    }

    /// `tilespool run OPTION VALUE` is a usage error (exit status 2, the daemon never starts)
    /// whose message says `says`.
    func assertRunRefuses(_ option: String, _ value: String, says: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let run = try runWithOption(option, value)
        XCTAssertTrue(run.exited, "run \(option) \(value) was accepted: the daemon runs", file: file, line: line)
        XCTAssertEqual(run.status, 2, "run \(option) \(value): \(run.text)", file: file, line: line)
        XCTAssertTrue(run.text.contains("tilespool: \(says)"), "run \(option) \(value): \(run.text)", file: file, line: line)
    }

    /// `--rescan-interval` below 0.1 s (a rescan every loop turn) or above an hour, and
    /// `--settle-time` outside 0 to 3600, are usage errors (exit status 2): the daemon never starts.
    func testRescanIntervalAndSettleTimeOutOfRangeAreUsageErrors() throws {
        for (option, value, says) in [("--rescan-interval", "0.05", "--rescan-interval must be a number of seconds from 0.1 to 3600"),
                                      ("--rescan-interval", "3601", "--rescan-interval must be a number of seconds from 0.1 to 3600"),
                                      ("--rescan-interval", "-1", "--rescan-interval must be a number of seconds from 0.1 to 3600"),
                                      ("--settle-time", "-1", "--settle-time must be a number of seconds from 0 to 3600"),
                                      ("--settle-time", "1e9", "--settle-time must be a number of seconds from 0 to 3600"),
                                      ("--settle-time", "0x1p3", "--settle-time must be a number of seconds from 0 to 3600"),
                                      ("--rescan-interval", "0x10", "--rescan-interval must be a number of seconds from 0.1 to 3600"),
                                      // Attack round 10: a refresh storm, and nonsense values that started the daemon.
                                      ("--refresh-interval", "0", "--refresh-interval must be a number of seconds from 1 to 3.1536e+08"),
                                      ("--refresh-interval", "1e23", "--refresh-interval must be a number of seconds from 1 to 3.1536e+08"),
                                      ("--max-probe-interval", "0", "--max-probe-interval must be a number of seconds from 0.5 to 86400"),
                                      ("--sync-interval", "0", "--sync-interval must be a number of seconds from 0.01 to 3600"),
                                      ("--hook-timeout", "0", "--hook-timeout must be a number of seconds from 0.1 to 86400"),
                                      ("--metrics-interval", "0", "--metrics-interval must be a number of seconds from 0.1 to 86400"),
                                      ("--retry-delay", "9223372036854775807", "--retry-delay must be a number of seconds from 0 to 3600"),
                                      ("--max-requests-per-second-per-host", "0.0001", "--max-requests-per-second-per-host must be a number of requests per second from 0.01 to 100000")] {
            try assertRunRefuses(option, value, says: says)
        }
    }

    /// `--connect-timeout`, `--low-speed-time` and `--transfer-timeout` of 9.3e18 were accepted
    /// and crashed the daemon at its first transfer; now they are usage mistakes (exit 2) like
    /// every other option out of range, and the limit is in `run --help`.
    func testHugeTimeoutsAreUsageErrors() throws {
        for option in ["--connect-timeout", "--low-speed-time", "--transfer-timeout"] {
            for value in ["9.3e18", "86401", "1e400", "-1"] {
                try assertRunRefuses(option, value, says: "\(option) must be a number of seconds from 0 to 86400")
            }
        }
        // The largest value is fine: the daemon starts and downloads with it.
        try fx.start(["--connect-timeout", "86400", "--low-speed-time", "86400", "--transfer-timeout", "86400"])
        try fx.drop("t.json", server.tilesRequest(["/ok/t/{z}/{x}/{y}.png"], id: "t"))
        try fx.waitForState("t", "completed")
        let (_, help) = try fx.cli(["run", "--help"])
        XCTAssertTrue(help.contains("--connect-timeout SECONDS") && help.contains("at most 86400"), help)
    }

    /// The download options `get` shares with `run` are one declaration (`RunOption`), so both
    /// refuse the same values with the same message before anything runs: `get` used to take any
    /// `--allow-host` (a URL or a path too) and read `0x10` as 16 requests a second, which `run` did
    /// not. `get` exits 2 before it reads its request file (which does not exist here).
    func testGetAndRunRefuseTheSameBadValues() throws {
        for (option, value, says) in [("--allow-host", "http://tiles.example.com/", "--allow-host takes a host name such as tile.openstreetmap.org"),
                                      ("--allow-host", "tiles\u{1B}[31m.example.com", "--allow-host takes a host name such as tile.openstreetmap.org"),
                                      ("--max-requests-per-second-per-host", "0x10", "--max-requests-per-second-per-host must be a number of requests per second"),
                                      ("--max-requests-per-second-per-host", "inf", "--max-requests-per-second-per-host must be a number of requests per second"),
                                      ("--max-retries", "101", "--max-retries must be an integer in 0...100"),
                                      ("--retry-delay", "0x1p3", "--retry-delay must be a number of seconds"),
                                      ("--max-tiles", "-1", "--max-tiles must be an integer in 0..."),
                                      ("--user-agent", "", "--user-agent must be 1 to 512 printable characters")] {
            try assertRunRefuses(option, value, says: says)
            let (status, text) = try fx.cli(["get", fx.spool + "/no-such-request.json", "--output", fx.spool + "/out.mbtiles",
                                             "--spool", fx.spool + "/get", option, value])
            XCTAssertEqual(status, 2, "get \(option) \(value): \(text)")
            XCTAssertTrue(text.contains("tilespool: \(says)"), "get \(option) \(value): \(text)")
        }
    }

    // MARK: Finding 13: only entity-tags are validators

    /// `ETag: *` (and an unquoted ETag) was kept and sent back as `If-None-Match: *`, which any
    /// server answers 304. Now such a response has no ETag: a refresh asks with its
    /// `Last-Modified` instead, or unconditionally.
    func testAnETagThatIsNotAnEntityTagIsNotKept() throws {
        try server.registerReply("star", headers: [("ETag", "*"), ("Last-Modified", "Wed, 01 Jan 2025 00:00:00 GMT")], body: "tile star")
        try server.registerReply("bare", headers: [("ETag", "v1")], body: "tile bare")
        try server.registerReply("good", headers: [("ETag", "W/\"v1\"")], body: "tile good")
        try fx.start()
        try fx.drop("et.json", server.tilesRequest(["/reply/star/{z}/{x}/{y}.pbf", "/reply/bare/{z}/{x}/{y}.pbf", "/reply/good/{z}/{x}/{y}.pbf"], id: "et"))
        try fx.waitForState("et", "completed")
        let lines = columns("et")
        XCTAssertEqual(lines["tiles0/0/0/0"]?[5], "-")
        XCTAssertEqual(lines["tiles0/0/0/0"]?[6], "1735689600", "Last-Modified kept")
        XCTAssertEqual(lines["tiles1/0/0/0"]?[5], "-")
        XCTAssertEqual(lines["tiles2/0/0/0"]?[5], "W/\"v1\"")
        let (rc, out) = try fx.cli(["refresh", "et", "--wait", "--spool", fx.spool])
        XCTAssertEqual(rc, 0, out)
        XCTAssertEqual(sent("/reply/star/0/0/0.pbf"), ["", "IMS=Wed, 01 Jan 2025 00:00:00 GMT"])
        XCTAssertEqual(sent("/reply/bare/0/0/0.pbf"), ["", ""])
        XCTAssertEqual(sent("/reply/good/0/0/0.pbf"), ["", "INM=W/\"v1\""])
    }

    /// Attack round 3: a Last-Modified whose year libcurl misreads (Go's zero time, year 0001,
    /// read as 2001; year -9999 read as 9999) is no date at all: not kept, so a refresh asks
    /// unconditionally instead of `If-Modified-Since` a wrong date (9999: a permanent 304). The
    /// three RFC 9110 date forms are still read.
    func testAMisreadYearIsNoDate() throws {
        try server.registerReply("y1", headers: [("Last-Modified", "Mon, 01 Jan 0001 00:00:00 GMT")], body: "tile y1")
        try server.registerReply("ym", headers: [("Last-Modified", "Fri, 31 Dec -9999 23:59:59 GMT")], body: "tile ym")
        try server.registerReply("ok", headers: [("Last-Modified", "Sun, 06 Nov 1994 08:49:37 GMT")], body: "tile ok")
        try server.registerReply("asc", headers: [("Last-Modified", "Sun Nov  6 08:49:37 1994")], body: "tile asc")
        try fx.start()
        try fx.drop("yr.json", server.tilesRequest(["/reply/y1/{z}/{x}/{y}.pbf", "/reply/ym/{z}/{x}/{y}.pbf",
                                                    "/reply/ok/{z}/{x}/{y}.pbf", "/reply/asc/{z}/{x}/{y}.pbf"], id: "yr"))
        try fx.waitForState("yr", "completed")
        let lines = columns("yr")
        XCTAssertEqual(lines["tiles0/0/0/0"]?[6], "-")
        XCTAssertEqual(lines["tiles1/0/0/0"]?[6], "-")
        XCTAssertEqual(lines["tiles2/0/0/0"]?[6], "784111777")
        XCTAssertEqual(lines["tiles3/0/0/0"]?[6], "784111777")
    }

    /// Round 3, finding 6: a server that echoes a request header's value as its ETag
    /// (`ETag: "TOKQQ1SECRETC"`) had it written to manifest.tsv's etag column. Such an ETag is
    /// not kept: the line has `-`, and a refresh asks with `If-Modified-Since` when there is a
    /// `Last-Modified`, else unconditionally.
    func testAnETagQuotingARequestSecretIsNotKept() throws {
        try server.registerReply("etsec", headers: [("ETag", "\"__HEADER:X-Custom__\""), ("Last-Modified", "Wed, 01 Jan 2025 00:00:00 GMT")],
                                 body: "tile etsec")
        try server.registerReply("etsec2", headers: [("ETag", "W/\"v-__HEADER:X-Custom__\"")], body: "tile etsec2")
        var request = server.tilesRequest(["/reply/etsec/{z}/{x}/{y}.pbf", "/reply/etsec2/{z}/{x}/{y}.pbf"], id: "ets")
        request["headers"] = ["X-Custom": custom]
        try fx.start()
        try fx.drop("ets.json", request)
        try fx.waitForState("ets", "completed")
        let lines = columns("ets")
        XCTAssertEqual(lines["tiles0/0/0/0"]?[5], "-")
        XCTAssertEqual(lines["tiles0/0/0/0"]?[6], "1735689600", "Last-Modified kept")
        XCTAssertEqual(lines["tiles1/0/0/0"]?[5], "-")
        XCTAssertEqual(leaked(readable("ets"), [custom]), [])
        let (rc, out) = try fx.cli(["refresh", "ets", "--wait", "--spool", fx.spool])
        XCTAssertEqual(rc, 0, out)
        XCTAssertEqual(sent("/reply/etsec/0/0/0.pbf"), ["", "IMS=Wed, 01 Jan 2025 00:00:00 GMT"])
        XCTAssertEqual(sent("/reply/etsec2/0/0/0.pbf"), ["", ""])
        XCTAssertEqual(leaked(readable("ets"), [custom]), [])
    }

    // MARK: Finding 14: response headers libcurl refuses are a bad response

    /// A 200 KB response header (libcurl accepts 100 KB) gave libcurl's "Out of memory", taken for
    /// a network failure: the region went `pausedNetwork` and probed the liar forever. It is a
    /// bad response: retried, then `failed` with `badResponse`.
    func testOversizedResponseHeaderIsABadResponse() throws {
        try server.registerReply("bighdr", headers: [("X-Big", String(repeating: "a", count: 200_000))], body: "tile")
        try fx.start(["--max-retries", "1"])
        try fx.drop("bh.json", server.tilesRequest(["/reply/bighdr/{z}/{x}/{y}.pbf"], id: "bh"))
        try fx.waitForState("bh", "failed", timeout: 30)
        XCTAssertEqual(fx.errorCode("bh"), "badResponse")
        let m = fx.errorMessage("bh") ?? ""
        XCTAssertTrue(m.contains("response headers"), m)
        XCTAssertEqual(server.hits("/reply/bighdr/0/0/0.pbf"), 2, "the first attempt and one retry")
        XCTAssertEqual(fx.objects(), [])
    }

    // MARK: Finding 4: what a server echoes of the request's credentials

    /// Secrets of the request, as `secretsLeaked` looks for them.
    let authorization = "Bearer TOKH90SECRETA", custom = "TOKQQ1SECRETC", queryKey = "QK7SECRET"

    /// Every secret of `secrets` found in `text`.
    func leaked(_ text: String, _ secrets: [String]) -> [String] { secrets.filter { text.contains($0) } }

    /// Everything a user reads: status files, events, the daemon's log, the region's manifest and
    /// failed.tsv, `rejected/`.
    func readable(_ id: String) -> String {
        var text = fx.log()
        for dir in [fx.spool + "/status", fx.spool + "/rejected"] {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? [] {
                text += (try? String(contentsOfFile: dir + "/" + name, encoding: .utf8)) ?? ""
            }
        }
        for f in [fx.spool + "/events.jsonl", "\(fx.store)/regions/\(id)/manifest.tsv", "\(fx.store)/regions/\(id)/failed.tsv"] {
            text += (try? String(contentsOfFile: f, encoding: .utf8)) ?? ""
        }
        return text
    }

    /// A tile server that quotes the request's `Authorization` and custom header values and its
    /// query key (not in URL form) in a 200 text body and in the Content-Type: the bodies are
    /// refused as before, and every quote of them (status, events, log, failed.tsv) shows
    /// `REDACTED` where the secret was.
    func testCredentialsEchoedByTheServerAreRedactedWhereverQuoted() throws {
        try server.registerReply("echoauth", headers: [("Content-Type", "text/plain; x=__HEADER:X-Custom__")],
                                 body: "__HEADER:Authorization__ for __QUERY:key__ and more text after it")
        try server.registerReply("echokey", headers: [("Content-Type", "text/plain")], body: "Invalid key: __QUERY:key__")
        try server.registerReply("echohtml", headers: [("Content-Type", "text/html")], body: "__HEADER:X-Custom__<html>")
        var request = server.tilesRequest(["/reply/echoauth/{z}/{x}/{y}.pbf?key=\(queryKey)", "/reply/echokey/{z}/{x}/{y}.pbf?key=\(queryKey)",
                                           "/reply/echohtml/{z}/{x}/{y}.pbf?key=\(queryKey)"], id: "echo")
        request["headers"] = ["Authorization": authorization, "X-Custom": custom]
        request["maxFailedTiles"] = 2
        try fx.start(["--max-retries", "0"])
        try fx.drop("echo.json", request)
        try fx.waitForState("echo", "failed", timeout: 30)
        // The server did receive them (the test is not vacuous).
        let received = server.requests().filter { $0.path.hasPrefix("/reply/echo") }
        XCTAssertEqual(received.count, 3)
        XCTAssertTrue(received.allSatisfy { $0.headers["Authorization"] == authorization && $0.headers["X-Custom"] == custom })
        let text = readable("echo")
        XCTAssertEqual(leaked(text, [authorization, "TOKH90SECRETA", custom, queryKey]), [])
        // The three refusals, each quoting what the server sent with the secrets replaced.
        XCTAssertTrue(text.contains("of Content-Type 'text/plain; x=REDACTED' starting 'REDACTED for REDACTED an...'"), text)
        XCTAssertTrue(text.contains("starting 'Invalid key: REDACTED'"), text)
        XCTAssertTrue(text.contains("starting 'REDACTED<html>'"), text)
        let failed = (try? String(contentsOfFile: "\(fx.store)/regions/echo/failed.tsv", encoding: .utf8)) ?? ""
        XCTAssertEqual(failed.split(separator: "\n").count, 3, "a header and the two tiles within the budget: \(failed)")
        XCTAssertTrue(failed.contains("REDACTED"), failed)
    }

    /// A redirect whose Location carries the request's secrets, to a host under a tile usage
    /// policy: the `policyRefused` message quotes the Location with them replaced.
    func testCredentialsEchoedInALocationAreRedacted() throws {
        try server.registerReply("loc", status: 302,
                                 headers: [("Location", "https://tile.openstreetmap.org/x.png?q=__HEADER:X-Custom__&k=__QUERY:key__")])
        var request = server.tilesRequest(["/reply/loc/{z}/{x}/{y}.pbf?key=\(queryKey)"], id: "loc")
        request["headers"] = ["Authorization": authorization, "X-Custom": custom]
        try fx.start()
        try fx.drop("loc.json", request)
        try fx.waitForState("loc", "failed", timeout: 30)
        XCTAssertEqual(fx.errorCode("loc"), "policyRefused")
        let m = fx.errorMessage("loc") ?? ""
        XCTAssertTrue(m.hasPrefix("redirect to https://tile.openstreetmap.org/x.png?q=REDACTED&k=REDACTED: "), m)
        XCTAssertEqual(leaked(readable("loc"), ["TOKH90SECRETA", custom, queryKey]), [])
    }

    /// Round 3, finding 4: a server that echoes a header value with upper-case letters as a
    /// text Content-Type (`text/TOKQQ1SECRETC`): the "the body is text (...)" part of the
    /// message used to lower-case the media type before the secrets were searched for, and
    /// showed `text/tokqq1secretc`. It is quoted as sent, with the secret replaced.
    func testSecretEchoedInATextContentTypeIsReplacedInTheMediaTypePart() throws {
        try server.registerReply("echoct", headers: [("Content-Type", "text/__HEADER:X-Custom__")], body: "plain text")
        var request = server.tilesRequest(["/reply/echoct/{z}/{x}/{y}.pbf"], id: "ect")
        request["headers"] = ["X-Custom": custom]
        try fx.start(["--max-retries", "0"])
        try fx.drop("ect.json", request)
        try fx.waitForState("ect", "failed", timeout: 30)
        XCTAssertEqual(server.requests().first { $0.path.hasPrefix("/reply/echoct") }?.headers["X-Custom"], custom)
        let m = fx.errorMessage("ect") ?? ""
        XCTAssertTrue(m.contains("the body is text (text/REDACTED), not a tile"), m)
        XCTAssertEqual(leaked(readable("ect").lowercased(), [custom.lowercased()]), [])
    }

    /// Round 3, finding 5: a secret with `/`, `+` and `=` that the server echoes
    /// percent-encoded with lower-case hex digits (`%2f`, RFC 3986 section 2.1 makes them the
    /// same as `%2F`), in a body and in a Location: replaced like the upper-case form.
    func testSecretsEchoedPercentEncodedInLowerCaseHexAreRedacted() throws {
        let secret = "SECRET/TOKEN+123=abc", echoed = "SECRET%2fTOKEN%2b123%3dabc"
        try server.registerReply("lhbody", headers: [("Content-Type", "text/plain")], body: "bad token \(echoed) here")
        try server.registerReply("lhloc", status: 302, headers: [("Location", "https://tile.openstreetmap.org/x.png?q=\(echoed)")])
        var request = server.tilesRequest(["/reply/lhbody/{z}/{x}/{y}.pbf"], id: "lhb")
        request["headers"] = ["X-Custom": secret]
        try fx.start(["--max-retries", "0"])
        try fx.drop("lhb.json", request)
        try fx.waitForState("lhb", "failed", timeout: 30)
        XCTAssertTrue((fx.errorMessage("lhb") ?? "").contains("starting 'bad token REDACTED here'"), fx.errorMessage("lhb") ?? "")
        request = server.tilesRequest(["/reply/lhloc/{z}/{x}/{y}.pbf"], id: "lhl")
        request["headers"] = ["X-Custom": secret]
        try fx.drop("lhl.json", request)
        try fx.waitForState("lhl", "failed", timeout: 30)
        let m = fx.errorMessage("lhl") ?? ""
        XCTAssertTrue(m.hasPrefix("redirect to https://tile.openstreetmap.org/x.png?q=REDACTED: "), m)
        XCTAssertEqual(leaked((readable("lhb") + readable("lhl")).lowercased(), [echoed.lowercased(), "secret/token"]), [])
    }

    /// Round 3, finding 3: a style (and a TileJSON it names) whose tile URLs carry the request's
    /// secrets, echoed by the server in the path and under an ordinary parameter name
    /// (`/t/SECRET/{z}/{x}/{y}.pbf?u=SECRET`): the `Authorization` and a custom header's values
    /// and the style URL's `key`. The tiles are asked as they are, but every URL the daemon
    /// shows (the status message "HTTP 500 from ...", events, the log, manifest.tsv's url
    /// column, failed.tsv) has them replaced.
    func testSecretsEchoedIntoPlanURLsAreRedactedWhereverShown() throws {
        let bare = "TOKENA7SECRET9"
        try server.registerReply("dsty", headers: [("Content-Type", "application/json")], body: """
            {"version": 8, "sources": {\
            "a": {"type": "vector", "tiles": ["__BASE__/reply/d500/a/__HEADER:X-Custom__/{z}/{x}/{y}.pbf?u=__QUERY:key__"], "maxzoom": 0},\
            "b": {"type": "vector", "tiles": ["__BASE__/reply/dok/__QUERY:key__/{z}/{x}/{y}.pbf?u=__HEADER:X-Custom__"], "maxzoom": 0},\
            "c": {"type": "vector", "url": "__BASE__/reply/dtj/tiles.json"}},\
            "layers": [{"id": "a", "type": "line", "source": "a", "source-layer": "x"}, {"id": "b", "type": "line", "source": "b", "source-layer": "x"},\
            {"id": "c", "type": "line", "source": "c", "source-layer": "x"}]}
            """)
        try server.registerReply("dtj", headers: [("Content-Type", "application/json")], body: """
            {"tilejson": "3.0.0", "tiles": ["__BASE__/reply/d500/c/__HEADER:Authorization__/{z}/{x}/{y}.pbf?u=__HEADER:Authorization__"], "maxzoom": 0}
            """)
        try server.registerReply("d500", status: 500, body: "oops")
        try server.registerReply("dok", headers: [("Content-Type", "application/x-protobuf")], body: "tile")
        func request(_ id: String, budget: Int) -> [String: Any] {
            ["id": id, "style": server.url("/reply/dsty/style.json?key=\(queryKey)"), "bounds": [0, 0, 1, 1], "minZoom": 0, "maxZoom": 0,
             "headers": ["Authorization": bare, "X-Custom": custom], "maxFailedTiles": budget]
        }
        try fx.start(["--max-retries", "0"])
        // Two tiles answer 500, one of them more than the budget: failed, with failed.tsv.
        try fx.drop("dsec.json", request("dsec", budget: 1))
        try fx.waitForState("dsec", "failed", timeout: 30)
        XCTAssertEqual(fx.errorCode("dsec"), "httpError")
        let m = fx.errorMessage("dsec") ?? ""
        XCTAssertTrue(m.contains("HTTP 500 from ") && m.contains("/reply/d500/"), m)
        XCTAssertTrue(m.contains("REDACTED"), m)
        // Within the budget: completed, every line in the manifest.
        try fx.drop("dsok.json", request("dsok", budget: 5))
        try fx.waitForState("dsok", "completed", timeout: 30)
        let urls = fx.manifest("dsok").map(\.url)
        XCTAssertTrue(urls.contains(server.url("/reply/dok/REDACTED/0/0/0.pbf?u=REDACTED")), "\(urls)")
        XCTAssertTrue(urls.contains(server.url("/reply/d500/c/REDACTED/0/0/0.pbf?u=REDACTED")), "\(urls)")
        // The server was asked the real URLs.
        let paths = Set(server.requests().map(\.path))
        XCTAssertTrue(paths.isSuperset(of: ["/reply/d500/a/\(custom)/0/0/0.pbf", "/reply/dok/\(queryKey)/0/0/0.pbf", "/reply/d500/c/\(bare)/0/0/0.pbf"]), "\(paths)")
        let failed = (try? String(contentsOfFile: "\(fx.store)/regions/dsec/failed.tsv", encoding: .utf8)) ?? ""
        XCTAssertTrue(failed.contains("/reply/d500/"), failed)
        XCTAssertEqual(leaked(readable("dsec") + readable("dsok"), [custom, queryKey, bare]), [])
    }

    /// `tilespool plan` quotes what a server sent as the daemon does: a redirect of the style
    /// to a host under a tile usage policy, whose Location carries the request's header value
    /// and query key, is printed with both replaced.
    func testPlanQuotesServerTextWithTheRequestsSecretsReplaced() throws {
        try server.registerReply("ploc", status: 302,
                                 headers: [("Location", "https://tile.openstreetmap.org/s.json?q=__HEADER:X-Custom__&k=__QUERY:key__")])
        let file = fx.root.appendingPathComponent("pq.json")
        try JSONSerialization.data(withJSONObject: ["style": server.url("/reply/ploc/style.json?key=\(queryKey)"),
                                                    "headers": ["X-Custom": custom], "bounds": [0, 0, 1, 1], "minZoom": 0, "maxZoom": 0])
            .write(to: file)
        let (rc, out) = try fx.cli(["plan", file.path])
        XCTAssertEqual(rc, 1, out)
        XCTAssertEqual(server.requests().filter { $0.path.hasPrefix("/reply/ploc") }.first?.headers["X-Custom"], custom)
        XCTAssertTrue(out.contains("policyRefused: redirect to https://tile.openstreetmap.org/s.json?q=REDACTED&k=REDACTED"), out)
        XCTAssertEqual(leaked(out, [custom, queryKey]), [])
    }

    // MARK: Doc gaps: fragments and more parameter names

    /// Credentials in a fragment and under parameter names the first list missed are redacted
    /// in the status `request` and in the manifest; ordinary parameters (a short `code`, `lang`)
    /// are not.
    func testFragmentsAndMoreParameterNamesAreRedacted() throws {
        let query = "accessKey=SEKRIT01&appKey=SEKRIT02&api.key=SEKRIT03&key%5B%5D=SEKRIT04&X-Goog-Credential=SEKRIT05&jwt=SEKRIT06"
            + "&authorization=SEKRIT07&credential=SEKRIT08&sessionid=SEKRIT09&%20key=SEKRIT10&key%20=SEKRIT11"
            + "&code=SEKRIT12oauthcode0123456789&code=de&lang=en"
        let template = "/ok/fr/{z}/{x}/{y}.png?" + query + "#access_token=SEKRIT13"
        try fx.start()
        try fx.drop("fr.json", server.tilesRequest([template], id: "fr"))
        try fx.waitForState("fr", "completed")
        let expected = "accessKey=REDACTED&appKey=REDACTED&api.key=REDACTED&key%5B%5D=REDACTED&X-Goog-Credential=REDACTED&jwt=REDACTED"
            + "&authorization=REDACTED&credential=REDACTED&sessionid=REDACTED&%20key=REDACTED&key%20=REDACTED&code=REDACTED&code=de&lang=en"
            + "#access_token=REDACTED"
        let shown = (fx.status("fr")?["request"] as? [String: Any])?["tiles"] as? [String]
        XCTAssertEqual(shown, [server.url("/ok/fr/{z}/{x}/{y}.png?") + expected])
        XCTAssertEqual(fx.manifest("fr").map(\.url), [server.url("/ok/fr/0/0/0.png?") + expected])
        XCTAssertFalse(readable("fr").contains("SEKRIT"), readable("fr"))
        XCTAssertTrue(server.requests().contains { $0.path == "/ok/fr/0/0/0.png" }, "the server was asked")
    }

    // MARK: Doc gaps: tile usage policies cover every URL fetched

    /// A style on our own server whose glyphs, sprite, TileJSON or GeoJSON data lie on a host
    /// under a tile usage policy: refused with `policyRefused` before anything is asked from that
    /// host, by the daemon and by `plan` alike; `--allow-host` lifts it.
    func testPolicyHoldsForGlyphsSpritesTileJSONAndData() throws {
        let base = #""sources": {"r": {"type": "raster", "tiles": ["__BASE__/ok/r/{z}/{x}/{y}.png"], "maxzoom": 0}}"#
        let styles: [(String, String, String)] = [
            ("glyphs", #"{"version": 8, \#(base), "glyphs": "https://tile.openstreetmap.org/fonts/{fontstack}/{range}.pbf", "layers": [{"id": "l", "type": "symbol", "source": "r", "layout": {"text-field": "x"}}]}"#, "tile.openstreetmap.org"),
            ("sprite", #"{"version": 8, \#(base), "sprite": "https://maps.wikimedia.org/sprite", "layers": []}"#, "maps.wikimedia.org"),
            ("tilejson", #"{"version": 8, "sources": {"v": {"type": "vector", "url": "https://a.tile.openstreetmap.org/tiles.json"}}, "layers": []}"#, "a.tile.openstreetmap.org"),
            ("data", #"{"version": 8, "sources": {"g": {"type": "geojson", "data": "https://MAPS.wikimedia.org./x.geojson"}}, "layers": []}"#, "maps.wikimedia.org"),
        ]
        try fx.start(["--max-retries", "0"])
        for (name, doc, host) in styles {
            try server.register("pol-\(name)", json: doc)
            let request: [String: Any] = ["id": "pol-\(name)", "style": server.url("/json/pol-\(name)"), "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 0]
            let file = fx.root.appendingPathComponent("pol-\(name).json")
            try JSONSerialization.data(withJSONObject: request).write(to: file)
            let (rc, out) = try fx.cli(["plan", file.path])
            XCTAssertEqual(rc, 1, "\(name): \(out)")
            XCTAssertTrue(out.contains("policyRefused: \(host): "), "\(name): \(out)")
            try fx.drop("pol-\(name).json", request)
            try fx.waitForState("pol-\(name)", "failed", timeout: 20)
            XCTAssertEqual(fx.errorCode("pol-\(name)"), "policyRefused", "\(name): \(fx.errorMessage("pol-\(name)") ?? "")")
            XCTAssertTrue(fx.errorMessage("pol-\(name)")?.hasPrefix("\(host): ") ?? false, fx.errorMessage("pol-\(name)") ?? "")
            XCTAssertEqual(fx.manifest("pol-\(name)").filter { $0.kind != "style" }.map(\.url), [], "\(name): nothing but the style")
        }
        // `--allow-host` lifts it for plan (the glyphs are not fetched by plan).
        let (rc, out) = try fx.cli(["plan", fx.root.appendingPathComponent("pol-glyphs.json").path, "--allow-host", "tile.openstreetmap.org"])
        XCTAssertEqual(rc, 0, out)
    }

    /// Fullwidth and ideographic forms of a host (`ｔｉｌｅ.openstreetmap.org`,
    /// `tile．openstreetmap．org`): `plan` printed a plan while the daemon failed at the first tile
    /// ("bad/illegal format"). Both now refuse the request on arrival with the same
    /// `invalidRequest` message, as for any host libcurl cannot use.
    func testPlanAndTheDaemonRefuseTheSameNonASCIIHosts() throws {
        try fx.start()
        for (i, url) in ["http://ｔｉｌｅ.openstreetmap.org/{z}/{x}/{y}.png", "http://tile．openstreetmap．org/{z}/{x}/{y}.png",
                         "http://tile。openstreetmap。org/{z}/{x}/{y}.png", "http://tile.openstreetmap.org%00/{z}/{x}/{y}.png"].enumerated() {
            let request: [String: Any] = ["id": "idn\(i)", "tiles": [url], "bounds": [0, 0, 1, 1], "minZoom": 0, "maxZoom": 0]
            let file = fx.root.appendingPathComponent("idn\(i).json")
            try JSONSerialization.data(withJSONObject: request).write(to: file)
            let (rc, out) = try fx.cli(["plan", file.path])
            XCTAssertEqual(rc, 1, "\(url): \(out)")
            try fx.drop("idn\(i).json", request)
            try fx.waitForState("idn\(i)", "failed", timeout: 20)
            XCTAssertEqual(fx.errorCode("idn\(i)"), "invalidRequest", url)
            let m = try XCTUnwrap(fx.errorMessage("idn\(i)"))
            XCTAssertTrue(m.contains("host"), m)
            XCTAssertTrue(out.contains("tilespool: invalidRequest: " + m), "plan says what the daemon says: \(out) / \(m)")
            XCTAssertEqual(fx.eventStates("idn\(i)"), ["failed"], "refused on arrival")
        }
    }

    // MARK: Finding 16: S3 error messages

    /// An S3 endpoint whose error message echoes the session token, the secret or the access
    /// key: the `S3Error` (what the log and a status quote) has them replaced.
    func testS3ErrorMessagesAreRedacted() throws {
        try server.registerReply("s3", status: 403, headers: [("Content-Type", "application/xml")], body: """
            <?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidToken __HEADER:x-amz-security-token__</Code>\
            <Message>The provided token __HEADER:x-amz-security-token__ is malformed (secret SECRETKEY4567890, key AKIDTEST7890)</Message></Error>
            """)
        let config = S3Config(endpoint: server.baseURL, bucket: "reply", prefix: "s3", accessKeyID: "AKIDTEST7890",
                              secretAccessKey: "SECRETKEY4567890", sessionToken: "SESSIONTOKEN123456", pathStyle: true)
        let s3 = S3Client(config: config)
        XCTAssertThrowsError(try s3.put("objects/x", Data("x".utf8))) { error in
            let text = "\(error)"
            XCTAssertEqual(leaked(text, ["SESSIONTOKEN123456", "SECRETKEY4567890", "AKIDTEST7890"]), [], text)
            XCTAssertEqual(text, "S3 403 InvalidToken REDACTED: The provided token REDACTED is malformed (secret REDACTED, key REDACTED)")
        }
        XCTAssertEqual(server.requests().last?.headers["x-amz-security-token"], "SESSIONTOKEN123456", "sent as it is")
    }

    /// Round 3, finding 5: a session token with `/`, `+` and `=` that the store echoes
    /// percent-encoded with lower-case hex digits is replaced too.
    func testS3ErrorMessagesAreRedactedWhenEchoedInLowerCaseHex() throws {
        try server.registerReply("s3lh", status: 403, headers: [("Content-Type", "application/xml")], body: """
            <?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidToken</Code>\
            <Message>The provided token SESSION%2fTOKEN%2b12%3d34 is malformed</Message></Error>
            """)
        let config = S3Config(endpoint: server.baseURL, bucket: "reply", prefix: "s3lh", accessKeyID: "AKIDTEST7890",
                              secretAccessKey: "SECRETKEY4567890", sessionToken: "SESSION/TOKEN+12=34", pathStyle: true)
        XCTAssertThrowsError(try S3Client(config: config).put("objects/x", Data("x".utf8))) { error in
            XCTAssertEqual("\(error)", "S3 403 InvalidToken: The provided token REDACTED is malformed")
        }
    }
}

/// The pure rules behind finding 1: every number a server sends in `Cache-Control`, `Age` or
/// `Expires` gives an expiry, none traps.
final class ServerNumberTests: XCTestCase {
    let cap = CacheLifetime.maximumDeltaSeconds

    /// What libcurl's lenient parser made of a date is kept only when the year it names is the
    /// year parsed (the values are curl_getdate's, measured).
    func testHTTPDatesWhoseYearWasMisreadAreInvalid() {
        XCTAssertNil(ConditionalRequest.checkedHTTPDate("Mon, 01 Jan 0001 00:00:00 GMT", parsed: 978_307_200))
        XCTAssertNil(ConditionalRequest.checkedHTTPDate("Fri, 31 Dec -9999 23:59:59 GMT", parsed: 253_402_300_799))
        XCTAssertNil(ConditionalRequest.checkedHTTPDate("garbage", parsed: -1))
        XCTAssertEqual(ConditionalRequest.checkedHTTPDate("Sun, 06 Nov 1994 08:49:37 GMT", parsed: 784_111_777), 784_111_777)
        XCTAssertEqual(ConditionalRequest.checkedHTTPDate("Sunday, 06-Nov-94 08:49:37 GMT", parsed: 784_111_777), 784_111_777)
        XCTAssertEqual(ConditionalRequest.checkedHTTPDate("Sun Nov  6 08:49:37 1994", parsed: 784_111_777), 784_111_777)
        XCTAssertEqual(ConditionalRequest.checkedHTTPDate("Fri, 31 Dec 9999 23:59:59 GMT", parsed: 253_402_300_799), 253_402_300_799)
    }

    func testDeltaSecondsAreClampedTo2To31() {
        XCTAssertEqual(cap, 2_147_483_648)
        XCTAssertEqual(CacheLifetime.deltaSeconds("0"), 0)
        XCTAssertEqual(CacheLifetime.deltaSeconds("60"), 60)
        XCTAssertEqual(CacheLifetime.deltaSeconds("2147483647"), 2_147_483_647)
        XCTAssertEqual(CacheLifetime.deltaSeconds("2147483648"), cap)
        XCTAssertEqual(CacheLifetime.deltaSeconds("9223372036854775807"), cap, "Int64.max")
        XCTAssertEqual(CacheLifetime.deltaSeconds("09223372036854775807"), cap)
        XCTAssertEqual(CacheLifetime.deltaSeconds(String(repeating: "9", count: 5000)), cap)
        XCTAssertEqual(CacheLifetime.deltaSeconds("0000000000000000000000060"), 60)
        for bad in ["", "+9223372036854775807", "-1", "1.5", " 60", "60s", "６０"] {
            XCTAssertNil(CacheLifetime.deltaSeconds(bad), bad)
        }
    }

    func testMaxAgeAndAge() {
        XCTAssertEqual(CacheLifetime.maxAge("max-age=9223372036854775807"), cap)
        XCTAssertEqual(CacheLifetime.maxAge("max-age=\"9223372036854775807\""), cap)
        XCTAssertEqual(CacheLifetime.maxAge("public, max-age=+9223372036854775807"), 0, "not delta-seconds: stale")
        XCTAssertEqual(CacheLifetime.maxAge("max-age=-9223372036854775808"), 0)
        XCTAssertEqual(CacheLifetime.maxAge("max-age=\""), 0)
        XCTAssertEqual(CacheLifetime.age(" 30 "), 30)
        XCTAssertEqual(CacheLifetime.age("9223372036854775807"), cap)
        XCTAssertNil(CacheLifetime.age("-1"))
        XCTAssertNil(CacheLifetime.age(nil))
    }

    /// The expiry saturates whatever it is given: the clamped lifetime less the clamped age,
    /// never before the fetch, never past Int64.max.
    func testExpiryNeverOverflows() {
        let now: Int64 = 1_800_000_000
        XCTAssertEqual(CacheLifetime.expiry(fetched: now, maxAge: 60, age: nil, expires: 5), now + 60, "max-age wins over Expires")
        XCTAssertEqual(CacheLifetime.expiry(fetched: now, maxAge: 100, age: 30, expires: nil), now + 70)
        XCTAssertEqual(CacheLifetime.expiry(fetched: now, maxAge: 100, age: 300, expires: nil), now, "older than its lifetime: expired")
        XCTAssertEqual(CacheLifetime.expiry(fetched: now, maxAge: .max, age: .min, expires: nil), now + cap)
        XCTAssertEqual(CacheLifetime.expiry(fetched: now, maxAge: .min, age: .max, expires: nil), now)
        XCTAssertEqual(CacheLifetime.expiry(fetched: .max, maxAge: .max, age: nil, expires: nil), .max)
        XCTAssertEqual(CacheLifetime.expiry(fetched: .max - 5, maxAge: 60, age: nil, expires: nil), .max)
        XCTAssertEqual(CacheLifetime.expiry(fetched: now, maxAge: nil, age: .max, expires: .max), .max, "Expires as it is")
        XCTAssertNil(CacheLifetime.expiry(fetched: now, maxAge: nil, age: 5, expires: nil))
    }
}

/// The host rule `plan` and the daemon share (`RequestValidator.hostProblem`, through `urlProblem`).
final class UsableHostTests: XCTestCase {
    func testOnlyHostsLibcurlCanUsePass() {
        for good in ["http://127.0.0.1:8080/x", "http://[::1]:8080/x", "https://tile%2eexample.org/x", "https://u:p@a_b-c.Example.ORG./x?q=ｔ",
                     "http://[fe80::1%25eth0]/x", "https://h:443"] {
            XCTAssertNil(RequestValidator.urlProblem(good), good)
        }
        for bad in ["http://ｔｉｌｅ.openstreetmap.org/x", "http://tile．openstreetmap．org/x", "http://tile。openstreetmap。org/x",
                    "http://tile.openstreetmap.org%00/x", "http://ex%ZZample/x", "http://[::1/x", "http://münchen.de/x", "http://a%2Fb/x"] {
            let p = RequestValidator.urlProblem(bad)
            XCTAssertTrue(p?.hasPrefix("has the host '") ?? false, "\(bad): \(p ?? "accepted")")
        }
        XCTAssertEqual(RequestValidator.urlProblem("ftp://ｔ/x"), "uses the scheme 'ftp'; only http and https are allowed")
        // Attack round 3: plan accepted what libcurl then refused ("URL using bad/illegal format").
        for good in ["http://[::ffff:127.0.0.1]:80/x", "http://h:/x", "http://h:65535/x"] { XCTAssertNil(RequestValidator.urlProblem(good), good) }
        for bad in ["http://[::ffff:tile.openstreetmap.org]/x", "http://[::1]x/y"] {
            XCTAssertTrue(RequestValidator.urlProblem(bad)?.hasPrefix("has the host '") ?? false, bad)
        }
        for bad in ["http://h:99999999999999999999/x", "http://h:65536/x", "http://h:8o/x", "http://[::1]:-1/x"] {
            XCTAssertTrue(RequestValidator.urlProblem(bad)?.hasPrefix("has the port '") ?? false, "\(bad): \(RequestValidator.urlProblem(bad) ?? "accepted")")
        }
    }
}

/// Finding 13's rule: only an entity-tag (RFC 9110 section 8.8.3) is kept and sent back.
final class EntityTagTests: XCTestCase {
    func testOnlyEntityTagsAreValidators() {
        for good in ["\"v1\"", "W/\"v1\"", "\"\"", "W/\"\"", "\"5f1e-2a\"", "\"!#~\""] {
            XCTAssertTrue(ConditionalRequest.isEntityTag(good), good)
            XCTAssertEqual(HTTPClient.storableETag(" \(good)\t"), good)
        }
        for bad in ["*", "v1", "W/v1", "w/\"v1\"", "\"a\"b\"", "\"a", "a\"", "\"", "W/\"", "\"a b\"", "\"é\"", "\"a\r\"", "",
                    "\"" + String(repeating: "a", count: 1023) + "\""] {
            XCTAssertFalse(ConditionalRequest.isEntityTag(bad), bad)
            XCTAssertNil(HTTPClient.storableETag(bad), bad)
        }
        XCTAssertTrue(ConditionalRequest.isEntityTag("\"" + String(repeating: "a", count: 1022) + "\""), "1024 bytes")
        XCTAssertFalse(ConditionalRequest.isEntityTag("\"a\"\r\n"), "CR LF would split the request")
        // A manifest line written before the rule, with `*`: If-Modified-Since instead, or nothing.
        XCTAssertEqual(ConditionalRequest.headers(for: Freshness(etag: "*", lastModified: 1_735_689_600)).map(\.0), ["If-Modified-Since"])
        XCTAssertEqual(ConditionalRequest.headers(for: Freshness(etag: "v1")).map(\.0), [])
    }
}
