import Foundation
import XCTest

/// Issue 4, "Faulty servers": the real daemon against the fault-injecting test server. Rate limits
/// are honoured (not hammered), transient errors retried, permanent ones fail the region with the
/// URL; network trouble that outlives its retries pauses the region (`pausedNetwork`, issue 3);
/// a damaged body (truncated, undecodable, too large) fails it with `badResponse`. No truncated or
/// undecodable body is ever stored or counted: every object in the store is a body the server
/// sent whole, and the status counts equal the manifest's.
final class FaultyServerTests: FaultServerSpoolTestCase {
    /// Hashes of the `/ok/`-style bodies of `paths`: what may legitimately be in the store.
    func okHashes(_ paths: [String]) -> Set<String> { Set(paths.map { sha256Hex(FaultServer.okBody($0)) }) }

    /// Watches the hit counts of `paths` until every one has `count` hits; returns the time each
    /// path's hits were first seen at 1 and at 2 (seconds since the reference date).
    func watchHits(_ paths: [String], until count: Int, timeout: TimeInterval) throws -> (first: Date, second: Date) {
        var first: Date?, second: Date?
        try waitUntil("every path has \(count) hits", timeout: timeout, poll: 0.01) {
            let hits = server.allHits()
            let now = Date()
            if first == nil, paths.contains(where: { (hits[$0] ?? 0) >= 1 }) { first = now }
            if second == nil, paths.contains(where: { (hits[$0] ?? 0) >= 2 }) { second = now }
            return paths.allSatisfy { (hits[$0] ?? 0) >= count }
        }
        return (first!, second!)
    }

    /// A one-tile region `id` against `/<fault>/<tag>/{z}/{x}/{y}.png` on a daemon started with
    /// `options`: waits for `state`, checks `error.code` and that `error.url` names the tile, and
    /// returns the tile's path (z0, `/<fault>/<tag>/0/0/0.png`).
    @discardableResult
    func runOneTile(_ id: String, fault: String, tag: String, options: [String], until state: String,
                    code: String, timeout: TimeInterval = 30, file: StaticString = #filePath, line: UInt = #line) throws -> String {
        try fx.start(options)
        try fx.drop("\(id).json", server.tilesRequest(["/\(fault)/\(tag)/{z}/{x}/{y}.png"]))
        try fx.waitForState(id, state, timeout: timeout)
        let path = "/\(fault)/\(tag)/0/0/0.png"
        XCTAssertEqual(fx.errorCode(id), code, file: file, line: line)
        XCTAssertEqual(fx.errorObject(id)?["url"] as? String, server.url(path), file: file, line: line)
        return path
    }

    // MARK: - Retried and honoured

    /// 429 with `Retry-After: 1`: no tile is asked again before a second has passed, each tile is
    /// asked exactly twice, and the region completes.
    func testRateLimitWithRetryAfterSeconds() throws {
        try fx.start(["--max-retries", "2"])
        let template = "/ratelimit/1/rs/{z}/{x}/{y}.png"
        let paths = FaultServer.worldPaths(template, maxZoom: 1)
        try fx.drop("rs.json", server.tilesRequest([template], maxZoom: 1))
        let t = try watchHits(paths, until: 2, timeout: 20)
        XCTAssertGreaterThanOrEqual(t.second.timeIntervalSince(t.first), 0.9, "a retry came before Retry-After (1 s) had passed")
        try fx.waitForState("rs", "completed", timeout: 20)
        try fx.waitForEvent("rs", "completed")
        for p in paths { XCTAssertEqual(server.hits(p), 2, "\(p): asked once, then once after the wait") }
        XCTAssertEqual(fx.eventStates("rs"), ["queued", "downloading", "completed"])
        XCTAssertEqual(Set(fx.manifest("rs").map(\.sha)), okHashes(paths))
        fx.assertStoreMatchesManifest("rs")
    }

    /// 429 with `Retry-After` as an HTTP date 1-2 s ahead: honoured the same way.
    func testRateLimitWithRetryAfterHTTPDate() throws {
        try fx.start(["--max-retries", "2"])
        let template = "/ratelimitdate/1/rd/{z}/{x}/{y}.png"
        let paths = FaultServer.worldPaths(template, maxZoom: 1)
        try fx.drop("rd.json", server.tilesRequest([template], maxZoom: 1))
        let t = try watchHits(paths, until: 2, timeout: 20)
        XCTAssertGreaterThanOrEqual(t.second.timeIntervalSince(t.first), 0.9, "a retry came before the Retry-After date")
        try fx.waitForState("rd", "completed", timeout: 20)
        for p in paths { XCTAssertEqual(server.hits(p), 2, p) }
        XCTAssertEqual(Set(fx.manifest("rd").map(\.sha)), okHashes(paths))
        fx.assertStoreMatchesManifest("rd")
    }

    /// 503 twice, then 200: retried with backoff and completed; the region never looks failed.
    func testServiceUnavailableThenSuccess() throws {
        try fx.start(["--max-retries", "3"])
        let template = "/flaky/2/fl/{z}/{x}/{y}.png"
        let paths = FaultServer.worldPaths(template, maxZoom: 1)
        try fx.drop("fl.json", server.tilesRequest([template], maxZoom: 1))
        try fx.waitForState("fl", "completed", timeout: 20)
        try fx.waitForEvent("fl", "completed")
        for p in paths { XCTAssertEqual(server.hits(p), 3, p) }
        XCTAssertEqual(fx.eventStates("fl"), ["queued", "downloading", "completed"])
        XCTAssertEqual(Set(fx.manifest("fl").map(\.sha)), okHashes(paths))
        fx.assertStoreMatchesManifest("fl")
    }

    /// One tile answers 500 forever: after its retries the region fails, and the status, the event
    /// and the log name that URL and the status 500.
    func testError500ForOneTileForeverFailsTheRegionWithThatURL() throws {
        try fx.start(["--max-retries", "2"])
        let bad = server.url("/error500/e5/0/0/0.png")
        try fx.drop("e5.json", server.tilesRequest(["/ok/e5/{z}/{x}/{y}.png", "/error500/e5/{z}/{x}/{y}.png"]))
        try fx.waitForState("e5", "failed", timeout: 20)
        try fx.waitForEvent("e5", "failed")
        let err = try XCTUnwrap(fx.errorObject("e5"))
        XCTAssertEqual(err["code"] as? String, "httpError")
        XCTAssertEqual(err["httpStatus"] as? Int, 500)
        XCTAssertEqual(err["url"] as? String, bad)
        XCTAssertTrue((err["message"] as? String ?? "").contains(bad), "\(err)")
        XCTAssertTrue((err["message"] as? String ?? "").contains("500"), "\(err)")
        XCTAssertEqual(server.hits("/error500/e5/0/0/0.png"), 3, "the first attempt and --max-retries 2")
        let event = fx.events("e5").last
        XCTAssertEqual((event?["error"] as? [String: Any])?["url"] as? String, bad)
        try waitUntil("the log names the URL and the status", timeout: 10) { fx.log().contains(bad) && fx.log().contains("500") }
        fx.assertCountsMatchManifest("e5")
        fx.assertOnlyWholeBodiesStored(okHashes(["/ok/e5/0/0/0.png"]))
        XCTAssertFalse(fx.manifest("e5").contains { $0.url == bad })
    }

    // MARK: - Network trouble: pausedNetwork (issue 3)

    /// The server resets the connection after 100 of 1000 bytes: nothing of it is stored; once the
    /// retries are spent the region is `pausedNetwork` with the URL and the reason.
    func testConnectionResetMidBody() throws {
        let path = try runOneTile("reset", fault: "reset", tag: "rs", options: ["--max-retries", "1"],
                                  until: "pausedNetwork", code: "networkError", timeout: 20)
        XCTAssertGreaterThanOrEqual(server.hits(path), 2, "retried before giving up")
        // The daemon logs a state change just after writing the status file: wait for the line.
        try waitUntil("the log names the URL", timeout: 10) { fx.log().contains(server.url(path)) }
        assertNothingStored("reset")
    }

    /// A body that never ends (1 byte every 2 s) is cut by the low-speed timeout (`--low-speed-time 2`).
    func testBodyThatNeverEndsIsCutByTheLowSpeedTimeout() throws {
        let started = Date()
        try runOneTile("slow", fault: "slowbody", tag: "sb", options: ["--max-retries", "1", "--low-speed-time", "2"],
                       until: "pausedNetwork", code: "networkError")
        XCTAssertLessThan(Date().timeIntervalSince(started), 20)
        XCTAssertTrue((fx.errorMessage("slow") ?? "").lowercased().contains("timeout") || (fx.errorMessage("slow") ?? "").lowercased().contains("timed out"),
                      fx.errorMessage("slow") ?? "")
        assertNothingStored("slow")
    }

    /// A server that accepts the connection and never answers.
    func testServerThatAcceptsAndNeverAnswers() throws {
        let path = try runOneTile("hang", fault: "hang", tag: "hg", options: ["--max-retries", "1", "--low-speed-time", "2"],
                                  until: "pausedNetwork", code: "networkError")
        XCTAssertGreaterThanOrEqual(server.hits(path), 2)
        assertNothingStored("hang")
    }

    // MARK: - Damaged bodies: failed with badResponse

    /// Content-Length 1000, 500 bytes, clean close.
    func testBodyShorterThanItsContentLength() throws {
        let path = try runOneTile("short", fault: "short", tag: "sh", options: ["--max-retries", "2"],
                                  until: "failed", code: "badResponse", timeout: 20)
        XCTAssertTrue(fx.errorMessage("short")?.contains(server.url(path)) ?? false)
        XCTAssertEqual(server.hits(path), 3, "retried, then given up")
        XCTAssertNil(fx.storeObjects()[sha256Hex(Data(repeating: UInt8(ascii: "s"), count: 500))], "the truncated body was stored")
        assertNothingStored("short")
    }

    /// A body over `--max-object-size`.
    func testBodyOverMaxObjectSize() throws {
        try runOneTile("huge", fault: "huge", tag: "hu", options: ["--max-retries", "1", "--max-object-size", "1000000"],
                       until: "failed", code: "badResponse")
        XCTAssertTrue(fx.errorMessage("huge")?.contains("1000000") ?? false, fx.errorMessage("huge") ?? "")
        assertNothingStored("huge")
    }

    /// The default limit is 32 MiB: a 64 MiB body is refused without any option.
    func testBodyOverTheDefaultMaxObjectSize() throws {
        try runOneTile("huge2", fault: "huge", tag: "hu2", options: ["--max-retries", "0"], until: "failed", code: "badResponse")
        XCTAssertTrue(fx.errorMessage("huge2")?.contains("\(32 << 20)") ?? false, fx.errorMessage("huge2") ?? "")
        assertNothingStored("huge2")
    }

    /// `Content-Encoding: gzip` over bytes that are not gzip: neither the raw nor a half-decoded body is stored.
    func testGzipThatDoesNotDecode() throws {
        let path = try runOneTile("gz", fault: "badgzip", tag: "bg", options: ["--max-retries", "1"],
                                  until: "failed", code: "badResponse", timeout: 20)
        XCTAssertNil(fx.storeObjects()[sha256Hex(Data("this is not gzip: \(path)".utf8))])
        assertNothingStored("gz")
    }

    /// Good tiles beside damaged ones: the store holds exactly the whole bodies, and the counts are
    /// the manifest's, whichever tile ended the region.
    func testDamagedBodiesBesideGoodOnesLeaveOnlyWholeBodies() throws {
        try fx.start(["--max-retries", "1", "--sync-interval", "0.05"])
        let good = FaultServer.worldPaths("/ok/mix/{z}/{x}/{y}.png", maxZoom: 2)
        try fx.drop("mix.json", server.tilesRequest(["/ok/mix/{z}/{x}/{y}.png", "/short/mix/{z}/{x}/{y}.png", "/badgzip/mix/{z}/{x}/{y}.png"], maxZoom: 2))
        try fx.waitForState("mix", "failed", timeout: 30)
        XCTAssertEqual(fx.errorCode("mix"), "badResponse")
        fx.assertCountsMatchManifest("mix")
        fx.assertOnlyWholeBodiesStored(okHashes(good))
        for l in fx.manifest("mix") {
            XCTAssertTrue(l.url.contains("/ok/mix/"), "only whole bodies are recorded: \(l.url)")
            XCTAssertEqual(l.sha, sha256Hex(FaultServer.okBody(String(l.url.dropFirst(server.baseURL.count)))))
        }
    }

    // MARK: - Redirects

    /// A redirect to itself: refused after at most 5 redirects, not retried, failed with the URL.
    func testRedirectLoop() throws {
        try fx.start(["--max-retries", "2"])
        let path = "/redirectloop/rl/0/0/0.png"
        try fx.drop("loop.json", server.tilesRequest(["/redirectloop/rl/{z}/{x}/{y}.png"]))
        try fx.waitForState("loop", "failed", timeout: 20)
        XCTAssertEqual(fx.errorCode("loop"), "httpError")
        XCTAssertEqual(fx.errorObject("loop")?["url"] as? String, server.url(path))
        XCTAssertTrue(fx.errorMessage("loop")?.lowercased().contains("redirect") ?? false, fx.errorMessage("loop") ?? "")
        XCTAssertEqual(server.hits(path), 6, "the request and 5 redirects, once: a loop is not retried")
        assertNothingStored("loop")
    }

    /// A plain redirect is followed and the body stored is the target's (control for the above).
    func testRedirectIsFollowed() throws {
        try fx.start()
        try fx.drop("redir.json", server.tilesRequest(["/redirect/rd/{z}/{x}/{y}.png"]))
        try fx.waitForState("redir", "completed", timeout: 20)
        XCTAssertEqual(fx.manifest("redir").map(\.sha), [sha256Hex(FaultServer.okBody("/ok/rd/0/0/0.png"))])
        XCTAssertEqual(fx.manifest("redir").first?.url, server.url("/redirect/rd/0/0/0.png"), "the manifest keeps the URL asked for")
        fx.assertStoreMatchesManifest("redir")
    }

    // MARK: - Helpers

    /// Nothing was stored or counted for a region whose only tile was damaged.
    func assertNothingStored(_ id: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(fx.objects(), [], "objects in the store", file: file, line: line)
        XCTAssertEqual(fx.manifest(id).filter { $0.kind == "tile" }.count, 0, "tile lines in the manifest", file: file, line: line)
        XCTAssertEqual(fx.progress(id)["tilesCompleted"] ?? 0, 0, file: file, line: line)
        XCTAssertEqual(fx.progress(id)["bytesCompleted"] ?? 0, 0, file: file, line: line)
        XCTAssertEqual(fx.storeTempFiles(), [], "temp files left in the store", file: file, line: line)
    }
}
