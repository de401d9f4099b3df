import Foundation
import XCTest

/// Issue 4: `tilespool verify` and `--repair`, credentials redacted, files that honour the umask.
final class VerifyTests: XCTestCase {
    var nginx: NginxServer!
    var fx: SpoolFixture!

    override func setUpWithError() throws {
        nginx = try NginxServer(root: try MapData.require())
        fx = try SpoolFixture()
        try fx.start()
    }

    override func tearDown() {
        fx?.stop()
        nginx?.stop()
    }

    func testVerifyFindsDamageAndRepairLetsResumeFetchOnlyWhatIsMissing() throws {
        try fx.drop("toner.json", ["tiles": [nginx.baseURL + "/raster/stamen_toner/{z}/{x}/{y}.png"],
                                   "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 3])
        try fx.waitForState("toner", "completed")
        var (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.contains("80 objects"), out)
        XCTAssertTrue(out.contains("0 faults"), out)

        // Damage: flip the bytes of one object, delete another, leave a temp file behind.
        let lines = fx.manifest("toner")
        let damaged = lines[10], deleted = lines.first { $0.sha != damaged.sha && $0.key.hasPrefix("tiles0/3/") }!
        let usingDamaged = lines.filter { $0.sha == damaged.sha || $0.sha == deleted.sha }.count
        XCTAssertEqual(try runTool("/usr/bin/python3", [SpoolFixture.storeReader, "corrupt", fx.store, damaged.sha]).0, 0)
        XCTAssertEqual(try runTool("/usr/bin/python3", [SpoolFixture.storeReader, "drop", fx.store, deleted.sha]).0, 0)
        XCTAssertTrue(FileManager.default.createFile(atPath: fx.store + "/tmp/leftover.tmp", contents: Data("x".utf8)))
        (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("bad object (content does not hash to its name): packs/") && out.contains(": \(damaged.sha)"), out)
        XCTAssertTrue(out.contains("missing object: toner: \(deleted.key)"), out)
        // A file under a name TileSpool never gives in tmp/ is foreign: nothing but the operator
        // removes it (attack round 40).
        XCTAssertTrue(out.contains("entry TileSpool did not make (left alone; remove it by hand): tmp/leftover.tmp (a file under a name TileSpool never gives)"), out)

        // --repair needs the daemon stopped.
        (rc, out) = try fx.cli(["verify", "--repair", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 1)
        XCTAssertTrue(out.contains("needs the daemon stopped"), out)
        fx.stop()
        (rc, out) = try fx.cli(["verify", "--repair", "--spool", fx.spool, "--store", fx.store])
        XCTAssertTrue(out.contains("quarantined 1 files"), out)
        XCTAssertEqual((try FileManager.default.contentsOfDirectory(atPath: fx.store + "/quarantine")).count, 1, "the damaged pack")
        XCTAssertNil(fx.storeObjects()[damaged.sha])
        XCTAssertEqual(fx.storeFaults(), "")
        XCTAssertEqual(fx.state("toner"), "failed")
        XCTAssertEqual(fx.errorCode("toner"), "storeDamaged")
        XCTAssertEqual(fx.manifest("toner").count, 85 - usingDamaged)
        try FileManager.default.removeItem(atPath: fx.store + "/tmp/leftover.tmp")

        // Resume fetches exactly the missing resources.
        let before = nginx.accessLog().count
        try fx.start()
        try fx.control("toner", "resume")
        try fx.waitForState("toner", "completed")
        try waitUntil("access log written", timeout: 10) { nginx.accessLog().count >= before + usingDamaged }
        let refetched = nginx.accessLog().dropFirst(before).map(\.path)
        XCTAssertEqual(refetched.count, usingDamaged, "\(refetched)")
        fx.assertStoreMatchesManifest("toner")
        (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
    }

    /// `verify` exits 1 with every line of `saying` and `summary`, changing nothing; then
    /// `verify --repair` marks `ids` (in that order) `failed`, `storeDamaged`.
    func verifyFindsThenRepairMarks(_ ids: [String], saying: [String], summary: String, line: UInt = #line) throws {
        let before = ids.map { fx.state($0) }
        var (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 1, out, line: line)
        for s in saying + [summary] { XCTAssertTrue(out.contains(s), "\(s)\n\(out)", line: line) }
        XCTAssertEqual(ids.map { fx.state($0) }, before, "verify alone changes nothing", line: line)
        (rc, out) = try fx.cli(["verify", "--repair", "--spool", fx.spool, "--store", fx.store])
        XCTAssertTrue(out.contains("regions marked for re-download: " + ids.joined(separator: ", ")), out, line: line)
        for id in ids {
            XCTAssertEqual(fx.state(id), "failed", id, line: line)
            XCTAssertEqual(fx.errorCode(id), "storeDamaged", id, line: line)
        }
    }

    /// A region folder whose request a running daemon is still writing (its folder comes a moment
    /// before `request.json`: the daemon's `.tmp-request.json-<pid>-<n>` is in it) is a region
    /// being created, not a fault (attack round 60: 2 of 358 verify runs beside a daemon taking
    /// requests named one); the same folder with the temp file of a process that is gone is one.
    func testARegionWhoseRequestTheDaemonIsWritingIsNoFault() throws {
        try fx.drop("kept.json", ["tiles": [nginx.baseURL + "/raster/stamen_toner/{z}/{x}/{y}.png"],
                                  "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 1])
        try fx.waitForState("kept", "completed")
        let daemon = try XCTUnwrap(fx.daemon?.processIdentifier)
        let folder = fx.store + "/regions/new"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: false)
        XCTAssertTrue(FileManager.default.createFile(atPath: folder + "/.tmp-request.json-\(daemon)-1", contents: Data("{".utf8)))
        var (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertFalse(out.contains("new"), out)
        // A pid no process has (above the kernel's pid_max, 2^22).
        try FileManager.default.moveItem(atPath: folder + "/.tmp-request.json-\(daemon)-1", toPath: folder + "/.tmp-request.json-4999999-1")
        (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("region without its request: new: store/regions/new/request.json is missing"), out)
        // The daemon's pid on a temp file a minute old: left over, not being written (attack
        // round 62: a stray one hid the fault for as long as the daemon ran).
        let stray = folder + "/.tmp-request.json-\(daemon)-7"
        try FileManager.default.moveItem(atPath: folder + "/.tmp-request.json-4999999-1", toPath: stray)
        try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-60)], ofItemAtPath: stray)
        (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("region without its request: new: store/regions/new/request.json is missing"), out)
    }

    /// Beside a running daemon a count or plan fault is looked at again once the status has had
    /// time to follow (a new request replacing a completed pack empties it a moment before its
    /// status says `queued`: attack round 61); a damaged region whose status stays is reported.
    func testAPlanGoneBesideARunningDaemonIsStillAFault() throws {
        try fx.drop("a.json", ["tiles": [nginx.baseURL + "/raster/stamen_toner/{z}/{x}/{y}.png"],
                               "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 1])
        try fx.waitForState("a", "completed")
        // The status settled: its unique bytes are counted a moment after it completes.
        try waitUntil("unique bytes counted", timeout: 30) { (self.fx.status("a")?["uniqueBytes"] as? Int ?? 0) > 0 }
        try FileManager.default.removeItem(atPath: fx.store + "/regions/a/plan.json")
        let (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("unreadable plan: a: plan.json is missing or unreadable"), out)
        XCTAssertEqual(fx.state("a"), "completed")
    }

    /// A region the spool says is completed whose files are gone from the store is a fault
    /// (attack round 53: verify said 0 faults), and `--repair` marks it `failed` (`storeDamaged`)
    /// so that no script reads it as complete; a region still there is not touched.
    func testACompletedRegionGoneFromTheStoreIsAFaultAndRepairMarksIt() throws {
        for id in ["kept", "gone"] {
            try fx.drop("\(id).json", ["tiles": [nginx.baseURL + "/raster/stamen_toner/{z}/{x}/{y}.png"],
                                        "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 1])
            try fx.waitForState(id, "completed")
        }
        fx.stop()
        try FileManager.default.removeItem(atPath: fx.store + "/regions/gone")
        try verifyFindsThenRepairMarks(["gone"], saying: ["missing region: gone: the status says completed, and the store \(fx.store) holds no files of this region"],
                                       summary: "1 manifests, 5 lines checked; 1 faults")
        XCTAssertEqual(fx.progress("gone")["resourcesCompleted"], 0, "what the store holds of it")
        XCTAssertEqual(fx.state("kept"), "completed")
        let (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
    }

    /// A delete killed half way (attack round 58: verify said 0 faults). Without a daemon, one
    /// whose region lost its request.json and plan is a fault, and `--repair` marks it as the
    /// daemon's start would; `tilespool delete` then finishes it. One the daemon had taken (its
    /// taken control file still there) is named, not a fault, and the daemon's start finishes it.
    func testARegionLeftHalfDeletedIsNamedAndADeleteTheDaemonTookIsFinishedAtItsStart() throws {
        for id in ["kept", "half", "taken", "paused"] {
            try fx.drop("\(id).json", ["tiles": [nginx.baseURL + "/raster/stamen_toner/{z}/{x}/{y}.png"],
                                        "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 1])
            try fx.waitForState(id, "completed")
        }
        fx.stop()
        for id in ["half", "taken"] {
            for name in ["request.json", "plan.json"] { try FileManager.default.removeItem(atPath: fx.store + "/regions/\(id)/\(name)") }
        }
        XCTAssertTrue(FileManager.default.createFile(atPath: fx.spool + "/control/.tilespool-taken-taken.delete", contents: Data()))
        // A paused region whose delete was cut short between its files and its status (attack
        // round 59: the status stayed, verify said 0 faults).
        try FileManager.default.removeItem(atPath: fx.store + "/regions/paused")
        var paused = try XCTUnwrap(fx.status("paused"))
        paused["state"] = "pausedUser"
        try JSONSerialization.data(withJSONObject: paused).write(to: URL(fileURLWithPath: fx.spool + "/status/paused.json"))
        try Data("pausedUser\n".utf8).write(to: URL(fileURLWithPath: fx.spool + "/status/paused.state"))
        try verifyFindsThenRepairMarks(["half", "paused"], saying: [
            "region without its request: half: store/regions/half/request.json is missing",
            "delete not finished (not a fault): taken: a delete under way or cut short",
            "missing region: paused: the status says pausedUser, and the store \(fx.store) holds no files of this region",
        ], summary: "3 manifests, 15 lines checked; 2 faults")
        var (rc, out) = try fx.cli(["delete", "paused", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertNil(fx.status("paused"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: fx.spool + "/status/paused.state"))
        (rc, out) = try fx.cli(["delete", "half", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertFalse(FileManager.default.fileExists(atPath: fx.store + "/regions/half"))
        try fx.start()
        try waitUntil("the taken delete applied", timeout: 60) {
            !FileManager.default.fileExists(atPath: self.fx.store + "/regions/taken") && self.fx.status("taken") == nil
        }
        // Finished, not first marked failed (attack round 62: a `failed` event, then `deleted`).
        let takenEvents = fx.events().filter { $0["id"] as? String == "taken" }.compactMap { $0["state"] as? String }
        XCTAssertFalse(takenEvents.contains("failed"), "\(takenEvents)")
        XCTAssertEqual(takenEvents.last, "deleted")
        fx.stop()
        XCTAssertEqual(fx.state("kept"), "completed")
        (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.contains("1 manifests, 5 lines checked; 0 faults"), out)
    }
}

final class SecretsAndConfinementTests: XCTestCase {
    func testCredentialsAreSentButRedactedInStatusEventsAndLogs() throws {
        let nginx = try NginxServer(root: try MapData.require())
        defer { nginx.stop() }
        let fx = try SpoolFixture()
        defer { fx.stop() }
        try fx.start()
        // A tile that fails (500 is not served by nginx: use a missing style instead, 404).
        try fx.drop("s.json", ["tiles": [nginx.baseURL + "/raster/stamen_toner/{z}/{x}/{y}.png?access_token=SECRET1&key=SECRET2&lang=en"],
                               "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 1])
        try fx.waitForState("s", "completed")
        try fx.drop("f.json", ["style": nginx.baseURL + "/nothing/style.json?api_key=SECRET3",
                               "bounds": [0, 0, 1, 1], "minZoom": 0, "maxZoom": 1])
        try fx.waitForState("f", "failed")
        XCTAssertEqual(fx.errorCode("f"), "httpError")
        let url = (fx.status("f")?["error"] as? [String: Any])?["url"] as? String
        XCTAssertEqual(url, nginx.baseURL + "/nothing/style.json?api_key=REDACTED")
        // The server received the real credentials.
        try waitUntil("access log", timeout: 10) { nginx.accessLog().contains { $0.uri.contains("SECRET3") } }
        XCTAssertTrue(nginx.accessLog().contains { $0.uri.contains("access_token=SECRET1&key=SECRET2") })
        // Nothing a user reads holds them.
        var readable = fx.log()
        for name in try FileManager.default.contentsOfDirectory(atPath: fx.spool + "/status") {
            readable += (try? String(contentsOfFile: fx.spool + "/status/" + name, encoding: .utf8)) ?? ""
        }
        readable += (try? String(contentsOfFile: fx.spool + "/events.jsonl", encoding: .utf8)) ?? ""
        readable += (try? String(contentsOfFile: fx.store + "/regions/s/manifest.tsv", encoding: .utf8)) ?? ""
        XCTAssertFalse(readable.contains("SECRET"), "a credential leaked")
        XCTAssertTrue(readable.contains("access_token=REDACTED"))
        let (_, status) = try fx.cli(["status", "--json", "--spool", fx.spool])
        XCTAssertFalse(status.contains("SECRET"))
    }

    func testFilesHonourTheUmaskAndSymlinksAreNotFollowed() throws {
        let nginx = try NginxServer(root: try MapData.require())
        defer { nginx.stop() }
        let fx = try SpoolFixture()
        defer { fx.stop() }
        let old = umask(0o027)
        defer { umask(old) }
        try fx.start()
        // A symlink in status/ named like the region's status file, pointing outside the spool.
        let outside = fx.root.appendingPathComponent("outside.txt").path
        XCTAssertTrue(FileManager.default.createFile(atPath: outside, contents: Data("keep".utf8)))
        try FileManager.default.createSymbolicLink(atPath: fx.spool + "/status/u.state", withDestinationPath: outside)
        try fx.drop("u.json", ["tiles": [nginx.baseURL + "/raster/stamen_toner/{z}/{x}/{y}.png"],
                               "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 1])
        try fx.waitForState("u", "completed")
        XCTAssertEqual(try String(contentsOfFile: outside, encoding: .utf8), "keep", "the symlink's target was written")
        func mode(_ p: String) -> Int { ((try? FileManager.default.attributesOfItem(atPath: p))?[.posixPermissions] as? NSNumber)?.intValue ?? -1 }
        let sha = fx.manifest("u").first { $0.sha != "-" }!.sha
        let pack = try XCTUnwrap(fx.storeObjects()[sha]?.place)
        XCTAssertEqual(mode(fx.store + "/packs/\(pack).pack"), 0o640)
        XCTAssertEqual(mode(fx.spool + "/status/u.json"), 0o640)
        XCTAssertEqual(mode(fx.store + "/regions/u/manifest.tsv"), 0o640)
        XCTAssertEqual(mode(fx.store + "/packs"), 0o750)
    }
}
