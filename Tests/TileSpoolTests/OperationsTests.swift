import Foundation
import XCTest
import TileSpoolCore
import TileSpoolIO

/// Issue 11, pure parts: rate window, ETA, durations, Prometheus text, logfmt.
final class OperationsCoreTests: XCTestCase {
    func progress(_ resources: Int, of expected: Int, bytes: Int = 0, precise: Bool = true) -> RegionProgress {
        var p = RegionProgress()
        p.resourcesCompleted = resources; p.tilesCompleted = resources; p.resourcesExpected = expected
        p.resourcesExpectedIsPrecise = precise; p.bytesCompleted = bytes
        return p
    }

    func testRateWindowFollowsTheLastSecondsAndETAIsNullUntilMeaningful() {
        var w = RateWindow(span: 10, minimumSpan: 2)
        w.add(time: 100, progress: progress(0, of: 1000))
        w.add(time: 101, progress: progress(10, of: 1000, bytes: 1000))
        XCTAssertNil(w.rates, "less than 2 s of samples")
        XCTAssertNil(RateWindow.eta(progress(10, of: 1000), w.rates))
        w.add(time: 102, progress: progress(20, of: 1000, bytes: 2000))
        XCTAssertEqual(w.rates?.tilesPerSecond, 10)
        XCTAssertEqual(w.rates?.bytesPerSecond, 1000)
        XCTAssertEqual(RateWindow.eta(progress(20, of: 1000), w.rates), 98)
        XCTAssertNil(RateWindow.eta(progress(20, of: 1000, precise: false), w.rates), "no ETA before the plan is exact")
        // A slow start is forgotten once out of the window: 100 tiles/s from t=102 to t=122.
        for t in 103...122 { w.add(time: Double(t), progress: progress(20 + 100 * (t - 102), of: 10000)) }
        XCTAssertEqual(w.rates!.tilesPerSecond, 100, accuracy: 0.001)
        // A stall: the rate falls to 0, and no ETA (not infinity).
        for t in 123...140 { w.add(time: Double(t), progress: progress(2020, of: 10000)) }
        XCTAssertEqual(w.rates?.tilesPerSecond, 0)
        XCTAssertNil(RateWindow.eta(progress(2020, of: 10000), w.rates))
        w.reset()
        XCTAssertNil(w.rates)
    }

    func testDurations() {
        XCTAssertEqual(DurationText.seconds("90"), 90)
        XCTAssertEqual(DurationText.seconds("90s"), 90)
        XCTAssertEqual(DurationText.seconds("15m"), 900)
        XCTAssertEqual(DurationText.seconds("1.5h"), 5400)
        XCTAssertEqual(DurationText.seconds("7d"), 604800)
        XCTAssertEqual(DurationText.seconds("2w"), 1209600)
        for bad in ["", "d", "-1d", "7x", "1e3", "7 d"] { XCTAssertNil(DurationText.seconds(bad), bad) }
    }

    func testLogfmtValuesCannotForgeKeysOrLines() {
        XCTAssertEqual(LogFmt.line([("a", "b"), ("msg", "two words"), ("e", ""), ("q", "x=\"y\"\n")]),
                       #"a=b msg="two words" e="" q="x=\"y\"\n""#)
        let entry = Log.entry(level: "info", "hello", region: "r1", state: "queued", url: "http://h/t?key=SECRET",
                              [("n", 3)], time: Date(timeIntervalSince1970: 0), format: .logfmt)
        XCTAssertEqual(entry, "time=1970-01-01T00:00:00Z level=info region=r1 state=queued msg=hello n=3 url=\"http://h/t?key=REDACTED\"\n")
        let json = Log.entry(level: "error", "a\nb", region: "r1", time: Date(timeIntervalSince1970: 0), format: .json)
        XCTAssertEqual(json.filter { $0 == "\n" }.count, 1)
        let o = try? JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any]
        XCTAssertEqual(o?["msg"] as? String, "a\nb")
        XCTAssertEqual(o?["level"] as? String, "error")
        XCTAssertEqual(o?["region"] as? String, "r1")
    }

    /// `uniqueBytes` counts in bounded memory (sorted runs spilled to a scratch file, merged):
    /// the same bytes per region as a count in one dictionary, whether everything fits in one run,
    /// spills to many, or spills to /tmp when TMPDIR is a folder that is not there.
    func testUniqueBytesAreTheSameInOneRunSpilledOrKeptInMemory() {
        var rng = SystemRandomNumberGenerator()
        // 6,000 lines over 5 regions naming 2,500 objects: repeats within a region, shares across.
        let lines: [(key: UInt64, region: Int, bytes: Int)] = (0..<6000).map { _ in
            let object = UInt64.random(in: 0..<2500, using: &rng)
            return (object &* 0x9E37_79B9_7F4A_7C15, Int.random(in: 0..<5, using: &rng), Int(object % 977) + 1)
        }
        var owner: [UInt64: (region: Int, bytes: Int, shared: Bool)] = [:]
        for l in lines {
            if let o = owner[l.key] { if o.region != l.region { owner[l.key]!.shared = true } } else { owner[l.key] = (l.region, l.bytes, false) }
        }
        var expected = [Int](repeating: 0, count: 5)
        for o in owner.values where !o.shared { expected[o.region] += o.bytes }
        XCTAssertGreaterThan(expected.filter { $0 > 0 }.count, 3, "most regions own some objects alone")
        XCTAssertLessThan(owner.values.filter { !$0.shared }.count, owner.count, "some objects are shared")

        func count(runRecords: Int) -> [Int] {
            var c = UniqueBytesCount(regions: 5, runRecords: runRecords)
            for l in lines { c.add(key: l.key, region: l.region, bytes: l.bytes) }
            return c.finish()
        }
        XCTAssertEqual(count(runRecords: 1 << 20), expected, "one run in memory")
        XCTAssertEqual(count(runRecords: 64), expected, "94 runs spilled and merged")
        XCTAssertEqual(count(runRecords: 7), expected, "857 runs of 7")
        let old = ProcessInfo.processInfo.environment["TMPDIR"]
        setenv("TMPDIR", "/nonexistent-\(UUID().uuidString)", 1)
        defer { if let old { setenv("TMPDIR", old, 1) } else { unsetenv("TMPDIR") } }
        XCTAssertEqual(count(runRecords: 64), expected, "a TMPDIR where no scratch file can be made: /tmp instead")
        var none = UniqueBytesCount(regions: 2)
        XCTAssertEqual(none.finish(), [0, 0])
    }
}

/// Issue 11 against the real binary and a fault-injecting server: logs, metrics, hooks, prune,
/// events rotation, status --watch.
final class OperationsTests: FaultServerSpoolTestCase {
    func metric(_ text: String, _ series: String) -> Double? {
        for line in text.split(separator: "\n") where line.hasPrefix(series + " ") {
            return Double(line.dropFirst(series.count + 1))
        }
        return nil
    }

    func promtool(_ path: String) throws -> (Int32, String) {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/promtool") else {
            XCTFail("promtool missing: run make deps (Debian package prometheus)"); return (-1, "")
        }
        // promtool reads the metrics on standard input.
        return try runTool("/bin/sh", ["-c", "exec /usr/bin/promtool check metrics < \"$0\"", path])
    }

    func testMetricsFilePassesPromtoolAndCountersMove() throws {
        let file = fx.root.path + "/tilespool.prom"
        try fx.start(["--metrics-file", file, "--metrics-interval", "0.2", "--max-retries", "1"])
        try fx.drop("a.json", server.tilesRequest(["/ok/a/{z}/{x}/{y}.png"], id: "a", maxZoom: 1))
        try fx.waitForState("a", "completed")
        var text = ""
        try waitUntil("the metrics show a's 5 tiles", timeout: 10) {
            text = (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
            return metric(text, #"tilespool_region_tiles_completed{region="a"}"#) == 5
        }
        let (rc, out) = try promtool(file)
        XCTAssertEqual(rc, 0, "promtool check metrics: \(out)\n\(text)")
        XCTAssertEqual(metric(text, #"tilespool_http_requests_total{outcome="2xx"}"#), 5)
        XCTAssertEqual(metric(text, #"tilespool_regions{state="completed"}"#), 1)
        XCTAssertEqual(metric(text, #"tilespool_build_info{version="0.1.0"}"#), 1)
        XCTAssertEqual(metric(text, "tilespool_store_objects"), Double(fx.objects().count))
        let objectBytes = fx.storeFileBytes()
        XCTAssertEqual(metric(text, "tilespool_store_bytes"), Double(objectBytes))
        XCTAssertGreaterThan(metric(text, "tilespool_last_commit_time_seconds") ?? 0, Date().timeIntervalSince1970 - 120)
        XCTAssertLessThanOrEqual(metric(text, "tilespool_daemon_start_time_seconds") ?? .infinity, Date().timeIntervalSince1970)
        // A 404 tile, a 429 then 200, a 500 twice (one retry, then failed): the counters move.
        var b = server.tilesRequest(["/missing/b/{z}/{x}/{y}.png"], id: "b")
        b["allowEmpty"] = true // every tile 404: completes only when allowed
        try fx.drop("b.json", b)
        try fx.drop("c.json", server.tilesRequest(["/ratelimit/1/c/{z}/{x}/{y}.png"], id: "c"))
        try fx.drop("d.json", server.tilesRequest(["/error500/d/{z}/{x}/{y}.png"], id: "d"))
        try fx.waitForState("b", "completed")
        try fx.waitForState("c", "completed", timeout: 30)
        try fx.waitForState("d", "failed", timeout: 30)
        try waitUntil("the metrics count d's failure and c's completion", timeout: 10) {
            text = (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
            return metric(text, #"tilespool_regions{state="failed"}"#) == 1 && metric(text, #"tilespool_regions{state="completed"}"#) == 3
        }
        XCTAssertEqual(metric(text, #"tilespool_http_requests_total{outcome="2xx"}"#), 6)
        XCTAssertEqual(metric(text, #"tilespool_http_requests_total{outcome="404"}"#), 1)
        XCTAssertEqual(metric(text, #"tilespool_http_requests_total{outcome="429"}"#), 1)
        XCTAssertEqual(metric(text, #"tilespool_http_requests_total{outcome="5xx"}"#), Double(server.hits("/error500/d/0/0/0.png")))
        XCTAssertEqual(server.hits("/error500/d/0/0/0.png"), 2)
        XCTAssertEqual(metric(text, "tilespool_http_retries_total"), 2)
        XCTAssertEqual(metric(text, #"tilespool_regions{state="completed"}"#), 3)
        XCTAssertEqual(try promtool(file).0, 0)
        // A tile recorded as failed within the budget shows as tiles_failed.
        var e = server.tilesRequest(["/error500/e/{z}/{x}/{y}.png"], id: "e")
        e["maxFailedTiles"] = 1
        e["allowEmpty"] = true // its one tile fails: no content, which completes only when allowed
        try fx.drop("e.json", e)
        try fx.waitForState("e", "completed", timeout: 30)
        try waitUntil("the metrics show e's failed tile", timeout: 10) {
            text = (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
            return metric(text, #"tilespool_region_tiles_failed{region="e"}"#) == 1
        }
        XCTAssertEqual(metric(text, #"tilespool_region_tiles_failed{region="a"}"#), 0)
        XCTAssertEqual(try promtool(file).0, 0)
        // No temp file is left beside it (written atomically).
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: fx.root.path).filter { $0.contains(".tmp-") }, [])
    }

    func testLogEntriesAreLogfmtByDefaultAndJSONOnRequestWithURLsRedacted() throws {
        try fx.start()
        try fx.drop("l.json", server.tilesRequest(["/error500/l/{z}/{x}/{y}.png?api_key=SECRET9"], id: "l"))
        try fx.waitForState("l", "failed", timeout: 60)
        // The status file is written before the state change's log line: wait for the line
        // (a CI run under load read the log in between).
        try waitUntil("the failed state change is logged", timeout: 10) { fx.log().contains("region=l state=failed msg=\"state change\"") }
        fx.assertLogLinesAreEntries()
        let log = fx.log()
        XCTAssertFalse(log.contains("SECRET9"), log)
        XCTAssertTrue(log.contains("region=l state=failed msg=\"state change\""), log)
        XCTAssertTrue(log.contains("region=l state=queued msg=\"state change\""), log)
        fx.stop()
        let own = try SpoolFixture()
        try own.start(["--log-format", "json"])
        try own.drop("j.json", server.tilesRequest(["/ok/j/{z}/{x}/{y}.png?token=SECRET8"], id: "j"))
        try own.waitForState("j", "completed")
        own.stop()
        let lines = own.log().split(separator: "\n")
        XCTAssertGreaterThan(lines.count, 3)
        var states: [String] = []
        for l in lines {
            guard let o = (try? JSONSerialization.jsonObject(with: Data(l.utf8))) as? [String: Any] else { XCTFail("not JSON: \(l)"); continue }
            XCTAssertNotNil(o["time"]); XCTAssertNotNil(o["level"]); XCTAssertNotNil(o["msg"])
            if o["msg"] as? String == "state change", o["region"] as? String == "j" { states.append(o["state"] as? String ?? "") }
        }
        XCTAssertEqual(states, ["queued", "downloading", "completed"])
        XCTAssertFalse(own.log().contains("SECRET8"))
    }

    /// Writes an executable shell script (the hook itself may be a script; the daemon runs it
    /// without a shell of its own, by its #! line).
    func script(_ name: String, _ body: String) throws -> String {
        let path = fx.root.path + "/" + name
        try ("#!/bin/sh\n" + body + "\n").write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o755)
        return path
    }

    func testHooksThatHangOrFailNeverDelayDownloadsAndAreLogged() throws {
        let record = fx.root.path + "/hook-calls"
        let marks = fx.root.path + "/hook-marks"
        try FileManager.default.createDirectory(atPath: marks, withIntermediateDirectories: true)
        // On `queued`: record the arguments and environment, then hang until killed by the timeout.
        // On `downloading`: fail with output. On `completed`: say how many tiles the server had
        // been asked for by then (its hit log), then exit 0.
        let hook = try script("hook", """
            echo "$1 $2 $3 $TILESPOOL_REGION $TILESPOOL_STATE $TILESPOOL_STATUS" >> \(record)
            case "$2" in
              queued) sleep 300 ;;
              downloading) grep -c "^/ok/h/" \(server.stateDirectory.path)/hits.log > \(marks)/downloading-hits
                           echo "boom on stderr" >&2; exit 3 ;;
              completed) grep -c "^/ok/h/" \(server.stateDirectory.path)/hits.log > \(marks)/completed-hits ;;
            esac
            """)
        try fx.start(["--on-state-change", hook, "--hook-timeout", "4"])
        let started = Date()
        try fx.drop("h.json", server.tilesRequest(["/ok/h/{z}/{x}/{y}.png"], id: "h", maxZoom: 2))
        try fx.waitForState("h", "completed")
        // Every tile was fetched while the first hook still hung: the server had all 21 requests
        // before the hook of `queued` was killed (logged below), which the hooks after it wait for.
        XCTAssertEqual(server.allHits().keys.filter { $0.hasPrefix("/ok/h/") }.count, 21)
        let hungHookLogged = fx.log().contains("hook timed out")
        XCTAssertFalse(hungHookLogged, "the download finished before the hung hook's timeout")
        try waitUntil("the three hooks ran", timeout: 30) {
            FileManager.default.fileExists(atPath: marks + "/completed-hits") && fx.log().contains("hook ran")
        }
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(started), 4, "hooks run one after another, the first killed at 4 s")
        // The server's log when the hung hook was killed (the next hook's first command): every tile
        // had been requested while it hung.
        XCTAssertEqual(try String(contentsOfFile: marks + "/downloading-hits", encoding: .utf8), "21\n")
        XCTAssertEqual(try String(contentsOfFile: marks + "/completed-hits", encoding: .utf8), "21\n")
        let status = fx.spool + "/status/h.json"
        XCTAssertEqual(try String(contentsOfFile: record, encoding: .utf8), """
            h queued \(status) h queued \(status)
            h downloading \(status) h downloading \(status)
            h completed \(status) h completed \(status)

            """)
        let log = fx.log()
        XCTAssertTrue(log.contains("level=warning region=h state=queued msg=\"hook timed out and was killed\""), log)
        XCTAssertTrue(log.contains("level=warning region=h state=downloading msg=\"hook failed\""), log)
        XCTAssertTrue(log.contains("exit=3"), log)
        XCTAssertTrue(log.contains("output=\"boom on stderr\""), log)
        XCTAssertTrue(log.contains("level=info region=h state=completed msg=\"hook ran\""), log)
        XCTAssertEqual(fx.eventStates("h"), ["queued", "downloading", "completed"])
    }

    /// Issue 29: a brand-new region's first hook run has an empty previous state (not `queued`,
    /// which it never was); a request that replaces a finished region has that region's state.
    func testHookPreviousStateIsEmptyForANewRegion() throws {
        let record = fx.root.path + "/hook-previous"
        let hook = try script("hook", #"echo "$1 $2 [$TILESPOOL_PREVIOUS_STATE]" >> "# + record)
        try fx.start(["--on-state-change", hook])
        func lines(_ n: Int) throws -> [String] {
            var got: [String] = []
            try waitUntil("\(n) hook runs", timeout: 20) {
                got = ((try? String(contentsOfFile: record, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
                return got.count >= n
            }
            return got
        }
        try fx.drop("n.json", server.tilesRequest(["/ok/n/{z}/{x}/{y}.png"], id: "n"))
        try fx.waitForState("n", "completed")
        XCTAssertEqual(try lines(3), ["n queued []", "n downloading [queued]", "n completed [downloading]"])
        // Another download for the same id replaces the completed region.
        try fx.drop("n.json", server.tilesRequest(["/ok/n2/{z}/{x}/{y}.png"], id: "n"))
        XCTAssertEqual(Array(try lines(6).dropFirst(3)), ["n queued [completed]", "n downloading [queued]", "n completed [downloading]"])
    }

    /// Attack round 4: a status file planted with an `id` that is not its own name
    /// (`y.json` saying `"id": "../../../victim"`) made prune delete a folder outside the store
    /// (`<store>/regions/../../../victim`), or write `control/../../x.delete` beside a daemon.
    /// A status is the file's own valid id or none.
    func testPruneTrustsNoIdAStatusFileClaims() throws {
        try fx.start()
        try fx.drop("p1.json", server.tilesRequest(["/ok/pv/{z}/{x}/{y}.png"], id: "p1"))
        try fx.waitForState("p1", "completed")
        let victim = fx.root.appendingPathComponent("victim").path
        try FileManager.default.createDirectory(atPath: victim + "/sub", withIntermediateDirectories: true)
        try Data("keep".utf8).write(to: URL(fileURLWithPath: victim + "/a"))
        var st = try XCTUnwrap(fx.status("p1"))
        let up = String(repeating: "../", count: 8)
        st["id"] = up + String(victim.dropFirst())
        try JSONSerialization.data(withJSONObject: st).write(to: URL(fileURLWithPath: fx.spool + "/status/y.json"))
        try Data("completed\n".utf8).write(to: URL(fileURLWithPath: fx.spool + "/status/y.state"))
        st["id"] = "../../pwned"
        try JSONSerialization.data(withJSONObject: st).write(to: URL(fileURLWithPath: fx.spool + "/status/z.json"))
        // Beside a running daemon prune writes control files: none outside control/.
        var (rc, out) = try fx.cli(["prune", "--state", "completed", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertFalse(out.contains("pwned") || out.contains("victim"), out)
        XCTAssertFalse(FileManager.default.fileExists(atPath: fx.root.appendingPathComponent("pwned.delete").path))
        try waitUntil("the daemon deleted p1", timeout: 15) { fx.state("p1") == nil }
        fx.stop()
        (rc, out) = try fx.cli(["prune", "--state", "completed", "--dry-run", "--spool", fx.spool, "--store", fx.store])
        XCTAssertFalse(out.contains("victim") || out.contains(".."), out)
        (rc, out) = try fx.cli(["prune", "--state", "completed", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertFalse(out.contains("victim"), out)
        XCTAssertEqual(try String(contentsOfFile: victim + "/a", encoding: .utf8), "keep")
        XCTAssertTrue(FileManager.default.fileExists(atPath: victim + "/sub"))
    }

    func testPruneDeletesExactlyTheSelectedRegionsDirectlyOrThroughTheDaemon() throws {
        try fx.start()
        for id in ["p1", "p2", "p3"] { try fx.drop("\(id).json", server.tilesRequest(["/ok/\(id)/{z}/{x}/{y}.png"], id: id)) }
        try fx.drop("p4.json", server.tilesRequest(["/error500/p4/{z}/{x}/{y}.png"], id: "p4"))
        try fx.drop("bad.json", ["id": "bad"]) // rejected
        for id in ["p1", "p2", "p3"] { try fx.waitForState(id, "completed") }
        try fx.waitForState("p4", "failed", timeout: 60)
        try fx.control("p3", "cancel") // ignored: completed; p3 stays completed
        try fx.drop("p5.json", server.tilesRequest(["/hang/p5/{z}/{x}/{y}.png"], id: "p5"))
        try fx.waitForState("p5", "downloading")
        try fx.control("p5", "cancel")
        try fx.waitForState("p5", "cancelled")
        // A daemon runs: prune of failed and cancelled goes through control files.
        var (rc, out) = try fx.cli(["prune", "--state", "failed,cancelled", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.contains("delete requested for p4") && out.contains("delete requested for p5"), out)
        try waitUntil("the daemon deleted p4 and p5", timeout: 15) { fx.state("p4") == nil && fx.state("p5") == nil }
        XCTAssertTrue(fx.eventStates("p4").last == "deleted" && fx.eventStates("p5").last == "deleted")
        XCTAssertFalse(FileManager.default.fileExists(atPath: fx.store + "/regions/p4"))
        // --older-than: nothing is a day old.
        (rc, out) = try fx.cli(["prune", "--older-than", "1d", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.contains("prune: 0 regions"), out)
        fx.stop()
        // No daemon: prune deletes directly, and the rejected entries older than 0 s go too.
        XCTAssertTrue(FileManager.default.fileExists(atPath: fx.spool + "/rejected/bad.json"))
        (rc, out) = try fx.cli(["prune", "--older-than", "0s", "--state", "completed", "--rejected-older-than", "0",
                                "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.contains("deleted p1") && out.contains("deleted p2") && out.contains("deleted p3"), out)
        for id in ["p1", "p2", "p3"] {
            XCTAssertNil(fx.state(id))
            XCTAssertFalse(FileManager.default.fileExists(atPath: fx.store + "/regions/\(id)"))
            XCTAssertEqual(fx.eventStates(id).last, "deleted")
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: fx.spool + "/rejected"), [])
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: fx.spool + "/control"), [])
        // Objects are freed by gc afterwards.
        (rc, out) = try fx.cli(["gc", "--grace", "0", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertEqual(fx.objects(), [])
    }

    /// Issue 29: `prune` with neither --older-than nor --state deletes no region (it used to
    /// delete every completed, cancelled and failed one), with or without a daemon running.
    func testPruneWithoutOlderThanOrStateDeletesNoRegion() throws {
        try fx.start()
        try fx.drop("k.json", server.tilesRequest(["/ok/k/{z}/{x}/{y}.png"], id: "k"))
        try fx.waitForState("k", "completed")
        var (rc, out) = try fx.cli(["prune", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertEqual(out, "prune: no region selected (regions are deleted only with --older-than or --state), 0 rejected entries removed\n")
        XCTAssertEqual(fx.names(in: fx.spool + "/control"), [], "no delete sent to the daemon")
        fx.stop()
        for args in [["prune", "--dry-run"], ["prune"], ["prune", "--rejected-older-than", "0s"]] {
            (rc, out) = try fx.cli(args + ["--spool", fx.spool, "--store", fx.store])
            XCTAssertEqual(rc, 0, out)
            XCTAssertTrue(out.contains("no region selected"), out)
            XCTAssertEqual(fx.state("k"), "completed", "\(args): \(out)")
            XCTAssertTrue(FileManager.default.fileExists(atPath: fx.store + "/regions/k/manifest.tsv"))
        }
        // Asked for, it goes.
        (rc, out) = try fx.cli(["prune", "--state", "completed", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertNil(fx.state("k"), out)
    }

    func testPruneKeepsRegionsYoungerThanTheLimitAndRejectsBadOptions() throws {
        try fx.start()
        try fx.drop("y.json", server.tilesRequest(["/ok/y/{z}/{x}/{y}.png"], id: "y"))
        try fx.waitForState("y", "completed")
        fx.stop()
        var (rc, out) = try fx.cli(["prune", "--older-than", "1h", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertEqual(fx.state("y"), "completed")
        (rc, out) = try fx.cli(["prune", "--state", "downloading", "--spool", fx.spool])
        XCTAssertEqual(rc, 2, out)
        (rc, out) = try fx.cli(["prune", "--older-than", "soon", "--spool", fx.spool])
        XCTAssertEqual(rc, 2, out)
        XCTAssertEqual(fx.state("y"), "completed")
    }

    func testEventsRotationKeepsEachFileUnderTheLimitAndNOldFiles() throws {
        try fx.start(["--events-max-bytes", "600", "--events-keep", "2"])
        for i in 0..<12 { try fx.drop("e\(i).json", server.tilesRequest(["/ok/e\(i)/{z}/{x}/{y}.png"], id: "e\(i)")) }
        for i in 0..<12 { try fx.waitForState("e\(i)", "completed") }
        fx.stop()
        let base = fx.spool + "/events.jsonl"
        var lines: [String] = []
        for path in [base + ".2", base + ".1", base] {
            XCTAssertTrue(FileManager.default.fileExists(atPath: path), path)
            XCTAssertLessThanOrEqual(Files_size(path), 600, path)
            let text = try String(contentsOfFile: path, encoding: .utf8)
            XCTAssertTrue(text.hasSuffix("\n"))
            lines += text.split(separator: "\n").map(String.init)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: base + ".3"))
        for l in lines { XCTAssertNotNil(try? JSONSerialization.jsonObject(with: Data(l.utf8)), l) }
        // The newest events are kept, in order: the last region's completion is the last line of all.
        let last = try JSONSerialization.jsonObject(with: Data(lines.last!.utf8)) as? [String: Any]
        XCTAssertEqual(last?["state"] as? String, "completed")
        XCTAssertLessThan(lines.count, 36, "old events were dropped (12 regions make 36)")
    }

    func testStatusWatchRedrawsUntilEveryRegionIsFinished() throws {
        try fx.start(["--max-requests-per-region", "4"])
        try fx.drop("w.json", ["id": "w", "tiles": [server.baseURL + "/slow/30/w/{z}/{x}/{y}.png"],
                               "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 5] as [String: Any])
        try fx.waitForState("w", "downloading")
        // Into a pipe (fx.cli): plain frames, an empty line between two, no terminal escapes.
        var (rc, out) = try fx.cli(["status", "--watch", "--interval", "0.2", "--spool", fx.spool])
        XCTAssertEqual(rc, 0, out)
        XCTAssertEqual(fx.state("w"), "completed", "--watch returned only once w finished")
        XCTAssertFalse(out.contains("\u{1B}"), "no escape sequence in a pipe: \(out.debugDescription.prefix(300))")
        let frames = out.components(separatedBy: "\n\n")
        XCTAssertGreaterThan(frames.count, 3, "redrawn several times")
        XCTAssertTrue(frames.first!.hasPrefix("w  downloading"), frames.first!)
        XCTAssertTrue(frames.last!.hasPrefix("w  completed") && frames.last!.contains("100.0%"), frames.last!)
        XCTAssertTrue(frames.contains { $0.contains("tiles/s") && $0.contains("ETA ") }, "rate and ETA shown while downloading")
        // On a terminal (script(1) gives it one): the frame is drawn in place, with the escapes.
        (rc, out) = try runTool("/usr/bin/script", ["-qec", "'\(SpoolFixture.binary)' status --watch --spool '\(fx.spool)'", "/dev/null"])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.hasPrefix("\u{1B}[H\u{1B}[Jw  completed"), out.debugDescription)
    }
}

/// Issue 11 on real map data: rates and ETA on a throttled nginx, the store quota, unique bytes.
final class OperationsMapDataTests: XCTestCase {
    var nginx: NginxServer!
    var fx: SpoolFixture!
    var mapdata: URL!

    override func setUpWithError() throws {
        mapdata = try MapData.require()
        nginx = try NginxServer(root: mapdata, extraLocations: """
            location /slowtoner/ { alias \(mapdata.path)/raster/stamen_toner/; limit_rate 6k; }
            """)
        fx = try SpoolFixture()
    }

    override func tearDown() {
        fx?.stop()
        nginx?.stop()
    }

    func toner(_ id: String, maxZoom: Int, path: String = "/raster/stamen_toner") -> [String: Any] {
        ["id": id, "tiles": [nginx.baseURL + path + "/{z}/{x}/{y}.png"], "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": maxZoom]
    }

    func testRatesAndETAOnAThrottledServer() throws {
        try fx.start(["--max-requests-per-region", "8"])
        try fx.drop("t.json", toner("t", maxZoom: 3, path: "/slowtoner"))
        var samples: [(at: Date, eta: Double, tps: Double, bps: Double, tiles: Int)] = []
        try waitUntil("t completes", timeout: 120, poll: 0.2) {
            if let st = fx.status("t"), st["state"] as? String == "downloading", let eta = (st["etaSeconds"] as? NSNumber)?.doubleValue {
                samples.append((Date(), eta, (st["tilesPerSecond"] as? NSNumber)?.doubleValue ?? -1,
                                (st["bytesPerSecond"] as? NSNumber)?.doubleValue ?? -1, fx.progress("t")["tilesCompleted"] ?? -1))
            }
            return fx.state("t") == "completed"
        }
        let done = Date()
        XCTAssertGreaterThan(samples.count, 5, "an ETA was shown while downloading")
        guard let first = samples.first else { return }
        // 8 connections at 6 KiB/s each, and nginx lets each response send its first second's
        // worth at once: the rate cannot pass 8 x 2 x 6 KiB/s (with a margin).
        for s in samples {
            XCTAssertGreaterThan(s.bps, 0)
            XCTAssertLessThanOrEqual(s.bps, 8 * 2 * 6 * 1024 * 1.5, "bytesPerSecond over what the server sends")
            XCTAssertGreaterThan(s.tps, 0)
            XCTAssertGreaterThanOrEqual(s.eta, 0)
        }
        // Sane: the first ETA shown is within a factor 3 of the time it actually took from then.
        let actual = done.timeIntervalSince(first.at)
        XCTAssertLessThan(first.eta, actual * 3 + 3, "ETA \(first.eta) s, took \(actual) s")
        XCTAssertGreaterThan(first.eta * 3 + 3, actual, "ETA \(first.eta) s, took \(actual) s")
        // Once completed: no rate, no ETA; startedAt <= completedAt.
        let st = fx.status("t")!
        XCTAssertTrue(st["etaSeconds"] is NSNull && st["tilesPerSecond"] is NSNull && st["bytesPerSecond"] is NSNull)
        let started = Timestamp.parse(st["startedAt"] as! String)!, completed = Timestamp.parse(st["completedAt"] as! String)!
        XCTAssertLessThanOrEqual(started, completed)
        XCTAssertGreaterThanOrEqual(completed.timeIntervalSince(started), 3, "a throttled download takes seconds")
        let (_, text) = try fx.cli(["status", "--spool", fx.spool])
        XCTAssertTrue(text.contains("t  completed"), text)
    }

    func testQuotaFailsTheDownloadThatWouldPassItAndDamagesNothing() throws {
        try fx.start(["--max-store-bytes", "400000"])
        try fx.drop("small.json", toner("small", maxZoom: 1))
        try fx.waitForState("small", "completed")
        let smallObjects = Set(fx.manifest("small").map(\.sha))
        try fx.drop("big.json", toner("big", maxZoom: 3))
        try fx.waitForState("big", "failedStorage", timeout: 60)
        XCTAssertEqual(fx.errorCode("big"), "storageError")
        XCTAssertTrue(fx.errorMessage("big")?.contains("--max-store-bytes 400000") ?? false, fx.errorMessage("big") ?? "")
        let bytes = fx.storeFileBytes()
        XCTAssertLessThanOrEqual(bytes, 400000, "the store stayed under the quota")
        // The other region's data is untouched, and the store verifies clean.
        fx.assertStoreMatchesManifest("small")
        XCTAssertTrue(smallObjects.isSubset(of: Set(fx.objects())))
        XCTAssertGreaterThan(fx.manifest("big").count, 0, "big stopped part-way")
        let (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
    }

    func testUniqueBytesCountObjectsOnlyThisRegionReferences() throws {
        try fx.start()
        try fx.drop("small.json", toner("small", maxZoom: 1))
        try fx.drop("big.json", toner("big", maxZoom: 3))
        try fx.waitForState("small", "completed")
        try fx.waitForState("big", "completed")
        func sizes(_ id: String) -> [String: Int] {
            var m: [String: Int] = [:]
            for l in fx.manifest(id) where l.sha != "-" { m[l.sha] = l.bytes }
            return m
        }
        let small = sizes("small"), big = sizes("big")
        let onlyBig = big.filter { small[$0.key] == nil }.values.reduce(0, +)
        let onlySmall = small.filter { big[$0.key] == nil }.values.reduce(0, +)
        XCTAssertGreaterThan(onlyBig, 0)
        try waitUntil("uniqueBytes computed", timeout: 15) {
            (fx.status("big")?["uniqueBytes"] as? Int) == onlyBig && (fx.status("small")?["uniqueBytes"] as? Int) == onlySmall
        }
        try fx.control("big", "delete")
        let all = small.values.reduce(0, +)
        try waitUntil("small owns all its objects once big is gone", timeout: 15) { (fx.status("small")?["uniqueBytes"] as? Int) == all }
    }
}
