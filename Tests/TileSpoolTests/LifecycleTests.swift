import Foundation
import XCTest

/// Issue 3: every state and action of a region through files alone, scheduling, restart,
/// pausedNetwork, failedStorage and gc, against the real binary.
final class LifecycleTests: FaultServerSpoolTestCase {
    /// A `tiles` request over the whole world at z0...maxZoom against the fault server's slow path
    /// (each tile answers after `ms` milliseconds): 1, 5, 21, 85, 341, 1365 tiles up to z5.
    func slowRequest(_ id: String, maxZoom: Int, ms: Int = 20) -> [String: Any] {
        ["id": id, "tiles": [server.baseURL + "/slow/\(ms)/\(id)/{z}/{x}/{y}.png"],
         "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": maxZoom]
    }

    /// Every tile line of `id`'s manifest has the body the fault server sends for its URL.
    func assertTilesMatchServer(_ id: String, count: Int, file: StaticString = #filePath, line: UInt = #line) {
        let tiles = fx.manifest(id).filter { $0.kind == "tile" }
        XCTAssertEqual(tiles.count, count, file: file, line: line)
        XCTAssertEqual(Set(tiles.map(\.key)).count, count, "duplicate manifest keys", file: file, line: line)
        for t in tiles.prefix(50) {
            let path = String(t.url.dropFirst(server.baseURL.count))
            XCTAssertEqual(t.sha, sha256Hex(FaultServer.okBody(path)), t.key, file: file, line: line)
        }
        fx.assertStoreMatchesManifest(id, file: file, line: line)
    }

    /// Hits per tile path of region `id` on the fault server.
    func tileHits(_ id: String) -> [String: Int] { server.allHits().filter { $0.key.contains("/\(id)/") } }

    func testPauseThenResumeContinuesFromStoredCountsWithoutRefetching() throws {
        try fx.start()
        try fx.drop("p.json", slowRequest("p", maxZoom: 5))
        var seen: [Int] = []
        try waitUntil("100 tiles done", timeout: 60) {
            let n = fx.progress("p")["tilesCompleted"] ?? 0
            seen.append(n)
            return n >= 100
        }
        try fx.control("p", "pause")
        try fx.waitForState("p", "pausedUser")
        let atPause = fx.progress("p")
        XCTAssertFalse(FileManager.default.fileExists(atPath: fx.spool + "/control/p.pause"), "control file removed")
        XCTAssertEqual(fx.manifest("p").count, atPause["resourcesCompleted"], "status counts what the manifest holds")
        try fx.resumeUntilCompleted("p", seen: &seen)
        XCTAssertEqual(seen, seen.sorted(), "progress never goes backwards")
        XCTAssertEqual(fx.eventStates("p"), ["queued", "downloading", "pausedUser", "queued", "downloading", "completed"])
        assertTilesMatchServer("p", count: 1365)
        // Nothing already in the manifest was requested again: one request per tile, except the
        // requests that were in flight when the pause stopped them (at most the per-region limit).
        let hits = tileHits("p")
        XCTAssertEqual(hits.count, 1365)
        XCTAssertLessThanOrEqual(hits.values.filter { $0 > 1 }.count, 8)
        XCTAssertEqual(hits.values.max(), hits.values.filter { $0 > 1 }.isEmpty ? 1 : 2)
    }

    func testCancelKeepsDataUntilDeleteAndResumeCompletes() throws {
        try fx.start()
        try fx.drop("c.json", slowRequest("c", maxZoom: 5))
        try waitUntil("50 tiles done", timeout: 60) { (fx.progress("c")["tilesCompleted"] ?? 0) >= 50 }
        try fx.control("c", "cancel")
        try fx.waitForState("c", "cancelled")
        let kept = fx.manifest("c")
        XCTAssertGreaterThanOrEqual(kept.count, 50)
        let held = fx.storeObjects()
        for l in kept where l.sha != "-" { XCTAssertNotNil(held[l.sha]) }
        // A cancelled region can be resumed; it completes from what was stored.
        try fx.control("c", "resume")
        try fx.waitForState("c", "completed")
        assertTilesMatchServer("c", count: 1365)
        // Delete: status files and region folder gone, events.jsonl says deleted.
        try fx.control("c", "delete")
        try waitUntil("c deleted", timeout: 10) { fx.events("c").last?["state"] as? String == "deleted" }
        XCTAssertNil(fx.state("c"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: fx.spool + "/status/c.json"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: fx.store + "/regions/c"))
    }

    /// A deleted region leaves no descriptor open in the daemon: after three regions are
    /// completed and deleted, no entry of `/proc/<daemon>/fd` names a removed folder of the store
    /// (attack round 24: one stayed open per deleted region, held by a cycle between a region's
    /// files and its refresh's).
    func testDeletedRegionsLeaveNoDescriptorOpen() throws {
        try fx.start()
        for id in ["fa", "fb", "fc"] { try fx.drop("\(id).json", slowRequest(id, maxZoom: 2, ms: 1)) }
        for id in ["fa", "fb", "fc"] { try fx.waitForState(id, "completed") }
        for id in ["fa", "fb", "fc"] { try fx.control(id, "delete") }
        for id in ["fa", "fb", "fc"] {
            try waitUntil("\(id) deleted", timeout: 10) { fx.events(id).last?["state"] as? String == "deleted" }
        }
        let pid = try XCTUnwrap(fx.daemon?.processIdentifier)
        func removedFolders() -> [String] {
            let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? []
            return fds.compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\($0)") }
                .filter { $0.hasPrefix(fx.store) && $0.hasSuffix(" (deleted)") }
        }
        // The daemon lets go of a deleted region on the loop turn that deletes it.
        try waitUntil("no descriptor on a removed folder", timeout: 10) { removedFolders().isEmpty }
        XCTAssertEqual(removedFolders(), [])
    }

    /// A daemon that runs for months keeps its descriptors bounded (attack round 26): a request
    /// dropped again over a completed region (a refresh, with an MBTiles export each time) and
    /// over a failed one (a new download) leaves no more descriptors into the store or the
    /// spool's exports than the first time, and none on a removed folder or replaced file.
    /// Before: two more per refresh (the refresh's files and the region's held each other) and
    /// one more MBTiles file per export (`sqlite3_close` refused while a statement lived).
    func testRequestsDroppedAgainLeaveNoDescriptorBehind() throws {
        try fx.start(["--max-retries", "0"])
        let pid = try XCTUnwrap(fx.daemon?.processIdentifier)
        func held() -> [String] {
            let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? []
            return fds.compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\($0)") }
                .filter { $0.hasPrefix(fx.store) || $0.hasPrefix(fx.spool + "/exports") }.sorted()
        }
        var again = slowRequest("ag", maxZoom: 2, ms: 1)
        again["exports"] = [["format": "mbtiles"]]
        let failing = ["id": "fl", "tiles": [server.url("/error500/fl/{z}/{x}/{y}.png")], "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 0] as [String: Any]
        // State changes only (an export's line repeats the state it was written in).
        func changes(_ id: String, _ state: String) -> Int { fx.events(id).filter { $0["export"] == nil && $0["state"] as? String == state }.count }
        var baseline: [String] = []
        for round in 1...4 {
            try fx.drop("ag.json", again)
            try fx.drop("fl.json", failing)
            try waitUntil("ag completed \(round) times", timeout: 60) { changes("ag", "completed") >= round }
            try waitUntil("fl failed \(round) times", timeout: 60) { changes("fl", "failed") >= round }
            try waitUntil("ag's export written", timeout: 60) {
                let e = (fx.status("ag")?["exports"] as? [[String: Any]]) ?? []
                return !e.isEmpty && e.allSatisfy { $0["state"] as? String == "written" }
            }
            if round == 1 { baseline = held(); continue }
            do {
                try waitUntil("no more descriptors than after the first round", timeout: 10) { held().count <= baseline.count }
            } catch {
                XCTFail("round \(round): \(held()) against \(baseline)")
                break
            }
        }
        let now = held()
        XCTAssertLessThanOrEqual(now.count, baseline.count, "\(now)")
        XCTAssertEqual(now.filter { $0.hasSuffix(" (deleted)") }, [])
        XCTAssertEqual(now.filter { $0.hasSuffix(".mbtiles") }, [], "an export's file is closed once written")
        XCTAssertEqual(fx.state("ag"), "completed")
    }

    func testDeleteWhileDownloadingStopsTheDownload() throws {
        try fx.start()
        try fx.drop("d.json", slowRequest("d", maxZoom: 5, ms: 50))
        try waitUntil("20 tiles done", timeout: 60) { (fx.progress("d")["tilesCompleted"] ?? 0) >= 20 }
        try fx.control("d", "delete")
        try waitUntil("d deleted", timeout: 10) { fx.events("d").last?["state"] as? String == "deleted" }
        let hitsAtDelete = tileHits("d").values.reduce(0, +)
        XCTAssertNil(fx.state("d"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: fx.store + "/regions/d"))
        // The daemon goes on: another region completes, and no request for d was made meanwhile
        // beyond those already in flight.
        try fx.drop("e.json", slowRequest("e", maxZoom: 2, ms: 1))
        try fx.waitForState("e", "completed")
        XCTAssertLessThanOrEqual(tileHits("d").values.reduce(0, +), hitsAtDelete + 8)
    }

    /// A control file is renamed to `.tilespool-taken-<name>` while its action is applied and
    /// removed after; a kill -9 in between leaves the taken file, and the next start applies it
    /// before reading requests (attack round 18: a `delete` left by a kill in `control/` removed a
    /// new region of the same id requested after it). A taken `delete` whose region is gone
    /// (applied before the kill) is removed without an error or a rejection.
    func testAControlFileTakenBeforeAKillActsBeforeANewRequestOfTheSameID() throws {
        try fx.start()
        try fx.drop("r.json", slowRequest("r", maxZoom: 1, ms: 1))
        try fx.waitForState("r", "completed")
        XCTAssertEqual(fx.stop(), 0)
        // The kill came after the delete was taken, before it was applied; the user then asked
        // for region r anew (z0-2).
        let taken = fx.spool + "/control/.tilespool-taken-r.delete"
        XCTAssertTrue(FileManager.default.createFile(atPath: taken, contents: Data()))
        try fx.drop("r.json", slowRequest("r", maxZoom: 2, ms: 1))
        try fx.start()
        // The region was completed before: wait for the new one's events, not the old state.
        try waitUntil("the new region completed", timeout: 60) { fx.eventStates("r").count >= 7 && fx.state("r") == "completed" }
        XCTAssertEqual(fx.progress("r")["tilesCompleted"], 21, "the new request's z0-2")
        XCTAssertEqual(Array(fx.eventStates("r").dropFirst(3)), ["deleted", "queued", "downloading", "completed"])
        XCTAssertFalse(FileManager.default.fileExists(atPath: taken))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: fx.spool + "/rejected"), [])
        // The kill came after the delete was applied: its region is gone, and a new request of
        // the same id is not touched by it.
        let events = fx.eventStates("r").count
        try fx.control("r", "delete")
        try waitUntil("deleted", timeout: 30) { fx.eventStates("r").last == "deleted" }
        XCTAssertEqual(fx.stop(), 0)
        XCTAssertTrue(FileManager.default.createFile(atPath: taken, contents: Data()))
        try fx.drop("r.json", slowRequest("r", maxZoom: 1, ms: 1))
        try fx.start()
        try waitUntil("the new region completed", timeout: 60) { fx.eventStates("r").count >= events + 4 && fx.state("r") == "completed" }
        XCTAssertEqual(fx.progress("r")["tilesCompleted"], 5)
        XCTAssertEqual(Array(fx.eventStates("r").dropFirst(events)), ["deleted", "queued", "downloading", "completed"])
        XCTAssertFalse(FileManager.default.fileExists(atPath: taken))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: fx.spool + "/rejected"), [])
        XCTAssertEqual(fx.log().split(separator: "\n").filter { $0.contains("level=error") }, [])
        // Taken names TileSpool could not have made (`..delete` would name the regions folder
        // itself as region `.`; a pause of a region that does not exist): refused to
        // `rejected/` without the leading dot, never deleted, nothing else touched.
        XCTAssertEqual(fx.stop(), 0)
        let hostile = [".tilespool-taken-..delete", ".tilespool-taken-.x.delete", ".tilespool-taken-ghost.pause"]
        for name in hostile {
            XCTAssertTrue(FileManager.default.createFile(atPath: fx.spool + "/control/" + name, contents: Data()))
        }
        try fx.start()
        // Each refusal moves the file, then writes its `.error` (a temp file, then a rename):
        // wait for both folders, not for control/ alone (a CI run read rejected/ while the last
        // `.error` was still under its temp name).
        let refused = Set(hostile.flatMap { [String($0.dropFirst()), String($0.dropFirst()) + ".error"] })
        try waitUntil("the hostile names refused", timeout: 30) {
            (try? FileManager.default.contentsOfDirectory(atPath: fx.spool + "/control"))?.isEmpty == true
                && Set((try? FileManager.default.contentsOfDirectory(atPath: fx.spool + "/rejected")) ?? []) == refused
        }
        let rejected = Set(try FileManager.default.contentsOfDirectory(atPath: fx.spool + "/rejected"))
        XCTAssertEqual(rejected, refused)
        XCTAssertEqual(fx.log().components(separatedBy: "is no control file TileSpool took").count - 1, 2)
        XCTAssertTrue(fx.log().contains("names region 'ghost', which does not exist"))
        XCTAssertEqual(fx.state("r"), "completed")
        XCTAssertEqual(fx.manifest("r").filter { $0.kind == "tile" }.count, 5)
        fx.assertStoreMatchesManifest("r")
    }

    /// Files dropped while no daemon ran are handled at its start oldest first across
    /// `requests/` and `control/`: a `delete` dropped before a new request of the same id
    /// deletes the old region, not the new one; a `pause` dropped after a request pauses it.
    func testFilesDroppedWhileNoDaemonRanActInTheOrderTheyWereDropped() throws {
        try fx.start()
        try fx.drop("r.json", slowRequest("r", maxZoom: 1, ms: 1))
        try fx.waitForState("r", "completed")
        XCTAssertEqual(fx.stop(), 0)
        func age(_ path: String, _ seconds: Double) throws {
            try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-seconds)], ofItemAtPath: path)
        }
        try fx.control("r", "delete")
        try age(fx.spool + "/control/r.delete", 30)
        try fx.drop("r.json", slowRequest("r", maxZoom: 2, ms: 1))
        try age(fx.spool + "/requests/r.json", 20)
        try fx.drop("p.json", slowRequest("p", maxZoom: 5, ms: 50))
        try age(fx.spool + "/requests/p.json", 20)
        try fx.control("p", "pause")
        try age(fx.spool + "/control/p.pause", 10)
        try fx.start()
        try waitUntil("the new region completed", timeout: 60) { fx.eventStates("r").count >= 7 && fx.state("r") == "completed" }
        XCTAssertEqual(fx.progress("r")["tilesCompleted"], 21, "the new request's z0-2")
        XCTAssertEqual(Array(fx.eventStates("r").dropFirst(3)), ["deleted", "queued", "downloading", "completed"])
        try fx.waitForState("p", "pausedUser")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: fx.spool + "/rejected"), [])
    }

    func testActionsThatDoNotApplyChangeNothing() throws {
        try fx.start()
        try fx.drop("done.json", slowRequest("done", maxZoom: 1, ms: 1))
        try fx.waitForState("done", "completed")
        let before = fx.progress("done")
        try fx.control("done", "pause")
        try fx.control("done", "cancel")
        try waitUntil("both actions logged", timeout: 10) { fx.events("done").filter { $0["ignored"] != nil }.count == 2 }
        XCTAssertEqual(fx.state("done"), "completed")
        XCTAssertEqual(fx.progress("done"), before)
        let ignored = fx.events("done").filter { $0["ignored"] != nil }
        XCTAssertEqual(ignored.map { $0["action"] as? String }, ["pause", "cancel"])
        XCTAssertTrue(fx.log().contains("pause ignored"))
        // Resume of a downloading region is ignored too.
        try fx.drop("busy.json", slowRequest("busy", maxZoom: 4, ms: 30))
        try fx.waitForState("busy", "downloading")
        try fx.control("busy", "resume")
        try waitUntil("resume logged", timeout: 10) { fx.events("busy").contains { $0["action"] as? String == "resume" } }
        XCTAssertEqual(fx.state("busy"), "downloading")
        // A control file for an unknown id goes to rejected/ with a .error file.
        try fx.control("nobody", "pause")
        try waitUntil("rejected", timeout: 10) { FileManager.default.fileExists(atPath: fx.spool + "/rejected/nobody.pause.error") }
        XCTAssertFalse(FileManager.default.fileExists(atPath: fx.spool + "/control/nobody.pause"))
    }

    func testABadRequestForAnExistingIDLeavesThatRegionAlone() throws {
        try fx.start()
        try fx.drop("x.json", slowRequest("x", maxZoom: 1, ms: 1))
        try fx.waitForState("x", "completed")
        try fx.dropRaw("x.json", Data("{ not json".utf8))
        try waitUntil("rejected", timeout: 10) { FileManager.default.fileExists(atPath: fx.spool + "/rejected/x.json.error") }
        XCTAssertEqual(fx.state("x"), "completed")
        XCTAssertEqual(fx.manifest("x").count, 5)
        XCTAssertTrue(try String(contentsOfFile: fx.spool + "/rejected/x.json.error", encoding: .utf8).contains("invalidRequest"))
    }

    /// Events are hints: a hard link (no close event) and a requests/ folder removed and made again
    /// are both found by the periodic rescan (every 0.5 s here: `--rescan-interval`).
    func testPeriodicRescanFindsHardLinksAndRecreatedFolders() throws {
        try fx.start(["--rescan-interval", "0.5"])
        let outside = fx.root.appendingPathComponent("linked.json").path
        let data = try JSONSerialization.data(withJSONObject: slowRequest("linked", maxZoom: 1, ms: 1))
        try data.write(to: URL(fileURLWithPath: outside))
        XCTAssertEqual(link(outside, fx.spool + "/requests/linked.json"), 0)
        try fx.waitForState("linked", "completed", timeout: 20)
        try FileManager.default.removeItem(atPath: fx.spool + "/requests")
        try waitUntil("requests/ made again", timeout: 20) { FileManager.default.fileExists(atPath: fx.spool + "/requests") }
        try fx.drop("again.json", slowRequest("again", maxZoom: 1, ms: 1))
        try fx.waitForState("again", "completed", timeout: 20)
    }

    /// A writer that pauses longer than a rescan period in the middle of a request: the rescan
    /// sees the file still open for writing (a read lease is refused) and leaves it alone.
    func testRescanLeavesAFileStillOpenForWritingAlone() throws {
        try fx.start(["--rescan-interval", "0.5", "--settle-time", "0.3"])
        let data = try JSONSerialization.data(withJSONObject: slowRequest("held", maxZoom: 1, ms: 1))
        let fd = open(fx.spool + "/requests/held.json", O_WRONLY | O_CREAT | O_EXCL, 0o644)
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertEqual(data.prefix(data.count / 2).withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }, data.count / 2)
        // The pause is the scenario: three rescan periods plus the settle time.
        let resumeAt = Date().addingTimeInterval(1.9)
        try waitUntil("the writer's pause", timeout: 10) { Date() >= resumeAt }
        XCTAssertNil(fx.state("held"), "the half-written file was read: \(fx.log().suffix(500))")
        XCTAssertTrue(FileManager.default.fileExists(atPath: fx.spool + "/requests/held.json"))
        let rest = data.suffix(from: data.count / 2)
        XCTAssertEqual(rest.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }, rest.count)
        close(fd)
        try fx.waitForState("held", "completed", timeout: 20)
    }

    func testAtMostMaxActiveRegionsDownloadInArrivalOrder() throws {
        try fx.start(["--max-active-regions", "1"])
        for id in ["q1", "q2", "q3"] { try fx.drop("\(id).json", slowRequest(id, maxZoom: 3, ms: 10)) }
        var maxDownloading = 0
        try waitUntil("all complete", timeout: 60) {
            let states = ["q1", "q2", "q3"].map { fx.state($0) }
            maxDownloading = max(maxDownloading, states.filter { $0 == "downloading" }.count)
            return states.allSatisfy { $0 == "completed" }
        }
        XCTAssertEqual(maxDownloading, 1)
        let completions = fx.events().filter { $0["state"] as? String == "completed" }.compactMap { $0["id"] as? String }
        XCTAssertEqual(completions, ["q1", "q2", "q3"])
        let starts = fx.events().filter { $0["state"] as? String == "downloading" }.compactMap { $0["id"] as? String }
        XCTAssertEqual(starts, ["q1", "q2", "q3"])
    }

    func testRestartAfterKill9CompletesWithTheSameManifest() throws {
        try fx.start()
        try fx.drop("k.json", slowRequest("k", maxZoom: 5))
        try waitUntil("200 tiles done", timeout: 60) { (fx.progress("k")["tilesCompleted"] ?? 0) >= 200 }
        let reported = fx.progress("k")["resourcesCompleted"] ?? 0
        let killed = try XCTUnwrap(fx.daemon?.processIdentifier)
        fx.kill9()
        // Nothing already reported done is lost.
        XCTAssertGreaterThanOrEqual(fx.manifest("k").count, reported)
        XCTAssertEqual(fx.state("k"), "downloading")
        // What a kill between a save's write and its rename leaves in the region's folder (the CI
        // run of c19de50: a plan's temp file, credentials and all, outlived every restart).
        let leftover = fx.store + "/regions/k/.tmp-plan.json-\(killed)-7"
        try Data("{}".utf8).write(to: URL(fileURLWithPath: leftover))
        try fx.start()
        try fx.waitForState("k", "completed")
        XCTAssertFalse(FileManager.default.fileExists(atPath: leftover), "the restart removes the killed daemon's temp file")
        assertTilesMatchServer("k", count: 1365)
        let (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
    }

    func testSigtermQueuesDownloadsAndRestartResumesThem() throws {
        try fx.start()
        try fx.drop("t.json", slowRequest("t", maxZoom: 5))
        try fx.drop("paused.json", slowRequest("paused", maxZoom: 5))
        try waitUntil("t has progress", timeout: 60) { (fx.progress("t")["tilesCompleted"] ?? 0) >= 20 }
        try fx.control("paused", "pause")
        try fx.waitForState("paused", "pausedUser")
        XCTAssertEqual(fx.stop(), 0)
        XCTAssertEqual(fx.state("t"), "queued")
        XCTAssertEqual(fx.state("paused"), "pausedUser")
        try fx.start()
        try fx.waitForState("t", "completed")
        XCTAssertEqual(fx.state("paused"), "pausedUser")
        assertTilesMatchServer("t", count: 1365)
    }

    /// Starts the daemon, drops region t (1,365 slow tiles), and stops the daemon with `signal`
    /// once t has 20 tiles: the daemon exits 0 and leaves t `queued`.
    func stopDuringADownload(signal: Int32) throws {
        try fx.start()
        try fx.drop("t.json", slowRequest("t", maxZoom: 5))
        try waitUntil("t has progress", timeout: 60) { (fx.progress("t")["tilesCompleted"] ?? 0) >= 20 }
        XCTAssertEqual(fx.stop(signal: signal), 0)
        XCTAssertEqual(fx.state("t"), "queued")
    }

    /// SIGQUIT stops the daemon as SIGTERM does (nginx's graceful stop); left to the Swift
    /// runtime it printed a crash report and the daemon went on.
    func testSigquitStopsTheDaemonCleanly() throws {
        try stopDuringADownload(signal: SIGQUIT)
        XCTAssertFalse(fx.log().contains("crashed"), fx.log().suffix(2000).description)
        XCTAssertEqual(fx.eventStates("t").last, "queued")
    }

    /// SIGHUP (its terminal closed) stops the daemon as SIGTERM does (attack round 54: it killed
    /// `get`, and `run`, without their clean stop); a daemon that comes with SIGHUP ignored
    /// (`nohup tilespool run`) keeps it ignored and goes on.
    func testSighupStopsTheDaemonCleanlyUnlessNohupIgnoresIt() throws {
        try stopDuringADownload(signal: SIGHUP)
        XCTAssertEqual(fx.eventStates("t").last, "queued")
        XCTAssertTrue(fx.log().contains("stopping"), fx.log().suffix(2000).description)

        try fx.start(ignoringHangup: true)
        kill(try XCTUnwrap(fx.daemon).processIdentifier, SIGHUP)
        // Still the daemon after the signal: a request dropped after it is taken and completed.
        try fx.drop("after.json", ["id": "after", "tiles": [server.baseURL + "/ok/after/{z}/{x}/{y}.png"], "bounds": [-10, -10, 10, 10], "minZoom": 0, "maxZoom": 1])
        try fx.waitForState("after", "completed")
        XCTAssertTrue(try XCTUnwrap(fx.daemon).isRunning)
        XCTAssertEqual(fx.stop(), 0)
    }

    /// SIGINT and SIGQUIT stop a daemon that a shell script started in the background
    /// (`tilespool run &`: they come ignored). They are blocked for the signalfd, and Linux keeps
    /// a blocked signal pending even when its action is to ignore it, so the daemon sees them.
    func testSigintStopsADaemonStartedWithInterruptsIgnored() throws {
        try fx.start(ignoringInterrupts: true)
        // The setting is real: the daemon's process has SIGINT and SIGQUIT ignored (`SigIgn`).
        let status = try String(contentsOfFile: "/proc/\(try XCTUnwrap(fx.daemon).processIdentifier)/status", encoding: .utf8)
        let ignored = status.split(separator: "\n").first { $0.hasPrefix("SigIgn:") }.flatMap { UInt64($0.split(separator: "\t").last!, radix: 16) } ?? 0
        XCTAssertEqual(ignored & (1 << (UInt64(SIGINT) - 1) | 1 << (UInt64(SIGQUIT) - 1)), 1 << (UInt64(SIGINT) - 1) | 1 << (UInt64(SIGQUIT) - 1), String(ignored, radix: 16))
        try fx.drop("t.json", slowRequest("t", maxZoom: 5))
        try waitUntil("t has progress", timeout: 60) { (fx.progress("t")["tilesCompleted"] ?? 0) >= 20 }
        XCTAssertEqual(fx.stop(signal: SIGINT), 0)
        XCTAssertEqual(fx.state("t"), "queued")
        XCTAssertEqual(fx.eventStates("t").last, "queued")
        try fx.start(ignoringInterrupts: true)
        XCTAssertEqual(fx.stop(signal: SIGQUIT), 0)
    }

    /// A tiles region whose plan.json was lost (a power cut before the rename reached the disk)
    /// makes its plan again at restart and completes.
    func testTilesRegionWithoutItsPlanMakesItAgain() throws {
        try fx.start()
        try fx.drop("lost.json", slowRequest("lost", maxZoom: 4, ms: 20))
        try waitUntil("some tiles", timeout: 30) { (fx.progress("lost")["tilesCompleted"] ?? 0) >= 20 }
        XCTAssertEqual(fx.stop(), 0)
        try FileManager.default.removeItem(atPath: fx.store + "/regions/lost/plan.json")
        try fx.start()
        try fx.waitForState("lost", "completed")
        assertTilesMatchServer("lost", count: 341)
    }

    func testSecondDaemonOnTheSameSpoolRefusesToStart() throws {
        try fx.start()
        let (rc, out) = try fx.cli(["run", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 1)
        XCTAssertTrue(out.contains("another daemon is already running"), out)
        // Another spool on the same store is refused too.
        let other = fx.root.appendingPathComponent("other-spool").path
        let (rc2, out2) = try fx.cli(["run", "--spool", other, "--store", fx.store])
        XCTAssertEqual(rc2, 1)
        XCTAssertTrue(out2.contains("another daemon is already running") && out2.contains(fx.store + "/daemon.lock"), out2)
        // A mistyped --spool or --store is an error, not an empty spool.
        let (rc3, out3) = try fx.cli(["status", "--spool", fx.root.appendingPathComponent("nope").path])
        XCTAssertEqual(rc3, 1)
        XCTAssertTrue(out3.contains("no spool at"), out3)
        let (rc4, out4) = try fx.cli(["verify", "--store", fx.root.appendingPathComponent("nope").path])
        XCTAssertEqual(rc4, 1)
        XCTAssertTrue(out4.contains("no store at"), out4)
    }

    /// Issue 29: `--spool X --store X` (one folder, so one `daemon.lock`) is one daemon, not a
    /// second one it refuses: it starts and completes a region, and while it runs a second daemon
    /// is still refused; stopped, `verify --repair` and `prune`, which take both locks, run too.
    func testSpoolAndStoreInOneFolderTakeTheLockOnce() throws {
        let both = fx.spool
        try fx.start(["--store", both])
        try fx.drop("one.json", server.tilesRequest(["/ok/one/{z}/{x}/{y}.png"], id: "one", maxZoom: 1))
        try fx.waitForState("one", "completed")
        let manifest = (try? String(contentsOfFile: both + "/regions/one/manifest.tsv", encoding: .utf8)) ?? ""
        XCTAssertEqual(manifest.split(separator: "\n").filter { $0.hasPrefix("tile\t") }.count, 5, manifest)
        var (rc, out) = try fx.cli(["run", "--spool", both, "--store", both])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("another daemon is already running"), out)
        XCTAssertEqual(fx.stop(), 0)
        (rc, out) = try fx.cli(["verify", "--repair", "--spool", both, "--store", both])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.contains("verify: 5 objects"), out)
        (rc, out) = try fx.cli(["prune", "--state", "completed", "--spool", both, "--store", both])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.contains("deleted one"), out)
        XCTAssertNil(fx.state("one"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: both + "/regions/one"))
    }

    func testPausedNetworkWhenTheServerGoesAwayAndBackByItself() throws {
        try fx.start(["--max-retries", "2", "--max-probe-interval", "1", "--connect-timeout", "2"])
        try fx.drop("n.json", slowRequest("n", maxZoom: 5))
        try waitUntil("50 tiles done", timeout: 60) { (fx.progress("n")["tilesCompleted"] ?? 0) >= 50 }
        server.stop()
        try fx.waitForState("n", "pausedNetwork", timeout: 30)
        XCTAssertEqual(fx.errorCode("n"), "networkError")
        let atPause = fx.progress("n")["tilesCompleted"] ?? 0
        try server.restart()
        try fx.waitForState("n", "completed", timeout: 60)
        XCTAssertGreaterThanOrEqual(fx.progress("n")["tilesCompleted"] ?? 0, atPause)
        let states = fx.eventStates("n")
        XCTAssertEqual(Array(states.prefix(3)), ["queued", "downloading", "pausedNetwork"])
        XCTAssertEqual(Array(states.suffix(3)), ["queued", "downloading", "completed"])
        assertTilesMatchServer("n", count: 1365)
    }

    func testResumeOfPausedNetworkTriesAtOnce() throws {
        try fx.start(["--max-retries", "1", "--max-probe-interval", "3600", "--retry-delay", "0.1"])
        server.stop()
        try fx.drop("r.json", slowRequest("r", maxZoom: 1, ms: 1))
        try fx.waitForState("r", "pausedNetwork", timeout: 30)
        try server.restart()
        try fx.control("r", "resume")
        try fx.waitForState("r", "completed", timeout: 20)
    }
}

/// failedStorage on a real full filesystem: a 1 MiB tmpfs holding the store.
final class StorageTests: XCTestCase {
    var nginx: NginxServer!
    var fx: SpoolFixture!
    var mountPoint = ""

    override func setUpWithError() throws {
        guard geteuid() == 0 else {
            print("SKIPPED: StorageTests: mounting a small tmpfs needs root")
            throw XCTSkip("mounting a tmpfs needs root")
        }
        let mapdata = try MapData.require()
        nginx = try NginxServer(root: mapdata)
        fx = try SpoolFixture()
        mountPoint = fx.root.appendingPathComponent("small").path
        try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
        XCTAssertEqual(run(["/bin/mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mountPoint]), 0)
    }

    override func tearDown() {
        fx?.stop()
        nginx?.stop()
        if !mountPoint.isEmpty { _ = run(["/bin/umount", "-l", mountPoint]) }
    }

    func run(_ args: [String]) -> Int32 { runStatus(args) }

    /// Issue 29 (attack round 2): events.jsonl on a full spool filesystem. An event that does not
    /// fit is not left half written (the next one used to be glued onto it: a line that is not
    /// JSON, and jq stopped there); once there is room again, every line is one JSON object.
    func testAFullSpoolLeavesNoHalfEventLine() throws {
        let spoolMount = fx.spool
        XCTAssertEqual(run(["/bin/mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", spoolMount]), 0)
        defer { _ = run(["/bin/umount", "-l", spoolMount]) }
        try fx.start(["--store", mountPoint + "/store"])
        try fx.drop("a.json", ["tiles": [nginx.baseURL + "/raster/osm_carto/{z}/{x}/{y}.png"],
                               "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 0])
        try fx.waitForState("a", "completed")
        // Fill every free page of the spool's filesystem (events.jsonl keeps the room left in its
        // last page), then ask for actions that do not apply: each is an event line, and one of
        // them no longer fits. Control files are empty: they need no page.
        let filler = FileManager.default.createFile(atPath: spoolMount + "/filler", contents: nil)
        XCTAssertTrue(filler)
        let h = try FileHandle(forWritingTo: URL(fileURLWithPath: spoolMount + "/filler"))
        let page = Data(repeating: 0x78, count: 4096)
        while (try? h.write(contentsOf: page)) != nil {}
        try? h.close()
        var asked = 0
        try waitUntil("an event did not fit", timeout: 60) {
            if fx.log().contains("cannot append to \(spoolMount)/events.jsonl") { return true }
            if !FileManager.default.fileExists(atPath: spoolMount + "/control/a.pause") {
                try fx.control("a", "pause")
                asked += 1
            }
            return false
        }
        XCTAssertGreaterThan(asked, 0)
        try waitUntil("the control file is taken") { !FileManager.default.fileExists(atPath: spoolMount + "/control/a.pause") }
        let before = fx.events("a").count
        XCTAssertEqual(run(["/bin/mount", "-o", "remount,size=64m", spoolMount]), 0)
        try fx.control("a", "pause")
        try waitUntil("the next event is in events.jsonl") { fx.events("a").count > before }
        let text = try String(contentsOfFile: spoolMount + "/events.jsonl", encoding: .utf8)
        XCTAssertTrue(text.hasSuffix("\n"))
        for line in text.split(separator: "\n", omittingEmptySubsequences: false).dropLast() {
            XCTAssertNotNil((try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any], "not one JSON object: \(line)")
        }
    }

    func testFullDiskGivesFailedStorageAndResumeCompletesAfterSpaceIsFreed() throws {
        let store = mountPoint + "/store"
        try fx.start(["--store", store])
        // OSM Carto z0-4: 341 PNG tiles, several MiB: more than the 1 MiB filesystem holds.
        try fx.drop("carto.json", ["tiles": [nginx.baseURL + "/raster/osm_carto/{z}/{x}/{y}.png"],
                                   "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 4])
        try fx.waitForState("carto", "failedStorage")
        let message = fx.errorMessage("carto") ?? ""
        XCTAssertTrue(message.contains("ENOSPC"), message)
        XCTAssertTrue(message.contains(store), message)
        XCTAssertEqual(fx.errorCode("carto"), "storageError")
        // The store is consistent: no temp file, every object hashes to its name, every manifest
        // line names an object that exists.
        let (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", store])
        XCTAssertEqual(rc, 0, out)
        // Free space (grow the filesystem), resume, complete.
        XCTAssertEqual(run(["/bin/mount", "-o", "remount,size=64m", mountPoint]), 0)
        try fx.control("carto", "resume")
        try fx.waitForState("carto", "completed")
        let lines = (try String(contentsOfFile: store + "/regions/carto/manifest.tsv", encoding: .utf8)).split(separator: "\n").filter { !$0.hasPrefix("#") }
        XCTAssertEqual(lines.count, 341)
        let (rc2, out2) = try fx.cli(["verify", "--spool", fx.spool, "--store", store])
        XCTAssertEqual(rc2, 0, out2)
    }
}
