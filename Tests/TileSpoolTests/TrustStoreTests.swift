// Issue 29, "Trust first": verify --repair covers a refresh under way, the quota is counted again
// once space is freed, a refresh that fails over maxFailedTiles says what it did, and the
// dangerous defaults a new user hit (an all-empty region completing, a pack replaced silently,
// bounds read across the antimeridian without a word) are said in the status.
import Foundation
import Glibc
import TileSpoolCore
import XCTest

final class TrustStoreTests: XCTestCase {
    var nginx: NginxServer!
    var fx: SpoolFixture!
    var others: [NginxServer] = []

    override func setUpWithError() throws {
        nginx = try NginxServer(root: try MapData.require())
        fx = try SpoolFixture()
    }

    override func tearDown() {
        fx?.stop()
        nginx?.stop()
        for s in others { s.stop() }
        others = []
    }

    var tonerTemplate: String { nginx.baseURL + "/raster/stamen_toner/{z}/{x}/{y}.png" }

    func toner(_ id: String, zooms: ClosedRange<Int> = 0...2, template: String? = nil, extra: [String: Any] = [:]) -> [String: Any] {
        var r: [String: Any] = ["id": id, "tiles": [template ?? tonerTemplate], "bounds": [-180, -85, 180, 85],
                                "minZoom": zooms.lowerBound, "maxZoom": zooms.upperBound]
        for (k, v) in extra { r[k] = v }
        return r
    }

    // MARK: - Finding 10: verify --repair and a refresh under way

    /// An object only a refresh under way names is damaged: `verify` reports it, `--repair`
    /// quarantines it and drops its line from the refresh's manifest, so the refresh fetches the
    /// tile again and the pack it swaps in names no quarantined object (`verify` clean after).
    func testVerifyRepairCoversARefreshUnderWay() throws {
        try fx.start()
        try fx.drop("t.json", toner("t"))
        try fx.waitForState("t", "completed")
        XCTAssertEqual(fx.stop(), 0)
        // A refresh under way that recorded a new body for tile 2/1/1; the object is then damaged.
        let dir = fx.store + "/regions/t"
        let body = Data("a body the refresh recorded".utf8)
        let sha = sha256Hex(body)
        try FileManager.default.createDirectory(atPath: fx.store + "/objects/" + sha.prefix(2), withIntermediateDirectories: true)
        // A loose object (as an earlier version stored them), damaged.
        try (body + Data("DAMAGE".utf8)).write(to: URL(fileURLWithPath: fx.loosePath(sha)))
        let lines = try String(contentsOfFile: dir + "/manifest.tsv", encoding: .utf8).split(separator: "\n").map(String.init)
        let refreshed = lines.map { l -> String in
            guard l.contains("\ttiles0/2/1/1\t") else { return l }
            var f = l.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            f[1] = sha; f[2] = String(body.count)
            return f.joined(separator: "\t")
        }
        try FileManager.default.createDirectory(atPath: dir + "/refresh", withIntermediateDirectories: true)
        try Data((refreshed.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: dir + "/refresh/manifest.tsv"))
        try FileManager.default.copyItem(atPath: dir + "/plan.json", toPath: dir + "/refresh/plan.json")
        try Data(#"{"maxAge":null}"#.utf8).write(to: URL(fileURLWithPath: dir + "/refresh/refresh.json"))

        var (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("bad object"), out)
        (rc, out) = try fx.cli(["verify", "--repair", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 1, out) // it found faults (and repaired them)
        XCTAssertFalse(try String(contentsOfFile: dir + "/refresh/manifest.tsv", encoding: .utf8).contains(sha))
        XCTAssertEqual(fx.state("t"), "completed", "the pack in use was not damaged")

        try fx.start()
        try waitUntil("the refresh resumed at start ends") { fx.events("t").contains { $0["refresh"] as? String == "finished" } }
        try fx.waitForState("t", "completed")
        XCTAssertEqual(fx.stop(), 0)
        (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        let tile = try XCTUnwrap(fx.manifest("t").first { $0.key == "tiles0/2/1/1" })
        let served = try Data(contentsOf: URL(fileURLWithPath: nginx.root.path + "/raster/stamen_toner/2/1/1.png"))
        XCTAssertEqual(tile.sha, sha256Hex(served))
    }

    // MARK: - Attack round 2, finding 7: verify --repair killed half way

    /// A `verify --repair` killed after rewriting a manifest but before the status (what the
    /// attacker did with strace and kill -9) left `completed` 21/21 over 20 lines, and a second
    /// repair said "none". Now the count mismatch is repaired too: the region is marked failed
    /// with the manifest's own counts (the same however often the repair runs), and resume
    /// fetches the missing tile.
    func testRepairMarksACompletedRegionWhoseManifestIsShort() throws {
        try fx.start()
        try fx.drop("t.json", toner("t"))
        try fx.waitForState("t", "completed")
        XCTAssertEqual(fx.stop(), 0)
        let path = fx.store + "/regions/t/manifest.tsv"
        var lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
        let cut = try XCTUnwrap(lines.firstIndex { $0.contains("\ttiles0/2/1/1\t") })
        lines.remove(at: cut)
        try Data(lines.joined(separator: "\n").utf8).write(to: URL(fileURLWithPath: path))

        var (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("count mismatch: t: status says 21 resources, manifest has 20, plan has 21"), out)
        for round in 0..<2 {
            (rc, out) = try fx.cli(["verify", "--repair", "--spool", fx.spool, "--store", fx.store])
            // Marked once; the second repair finds nothing more to mark, and counts no less.
            XCTAssertTrue(out.contains("regions marked for re-download: " + (round == 0 ? "t" : "none")), out)
            XCTAssertEqual(fx.state("t"), "failed")
            XCTAssertEqual(fx.errorCode("t"), "storeDamaged")
            let progress = try XCTUnwrap(fx.status("t")?["progress"] as? [String: Any])
            XCTAssertEqual(progress["resourcesCompleted"] as? Int, 20)
            XCTAssertEqual(progress["tilesCompleted"] as? Int, 20)
        }
        try fx.start()
        try fx.control("t", "resume")
        try fx.waitForState("t", "completed")
        XCTAssertEqual(fx.manifest("t").count, 21)
        XCTAssertEqual(fx.stop(), 0)
        (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
    }

    // MARK: - Finding 13: the quota after a gc

    /// A region that hit `--max-store-bytes` goes `failedStorage`; once another region is deleted
    /// and gc frees its objects, `resume` completes it (the daemon counts the store again instead
    /// of trusting a count from before the gc), and the message named the size then. gc with no
    /// grace period needs the daemon stopped; the count taken again while a daemon runs and a gc
    /// with its grace period frees space beside it is StoreTests'
    /// `testQuotaIsCountedAgainAfterAGCBesideIt`.
    /// Attack round 4: a manifest that is not a regular file was read as an empty one: gc then
    /// removed every object of the region (a symlink or a folder at manifest.tsv), and a FIFO
    /// there hung gc, verify and the daemon's start. Each is a read failure now: gc and verify
    /// stop without removing anything, the daemon starts and stays up.
    func testAManifestThatIsNotARegularFileStopsGCAndHangsNothing() throws {
        try fx.start()
        try fx.drop("t.json", toner("t"))
        try fx.waitForState("t", "completed")
        XCTAssertEqual(fx.stop(), 0)
        let before = Set(fx.objects())
        XCTAssertFalse(before.isEmpty)
        let path = fx.store + "/regions/t/manifest.tsv", kept = fx.root.appendingPathComponent("kept.tsv").path
        try FileManager.default.moveItem(atPath: path, toPath: kept)
        func plant(_ what: String) throws {
            try? FileManager.default.removeItem(atPath: path)
            switch what {
            case "symlink": try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: kept)
            case "folder": try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
            default: XCTAssertEqual(mkfifo(path, 0o644), 0)
            }
        }
        for what in ["symlink", "folder", "fifo"] {
            try plant(what)
            let (rc, out) = try fx.cli(["gc", "--grace", "0", "--spool", fx.spool, "--store", fx.store])
            XCTAssertEqual(rc, 1, "\(what): \(out)")
            XCTAssertEqual(Set(fx.objects()), before, "\(what): gc removed objects")
            let (vrc, vout) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
            XCTAssertNotEqual(vrc, 0, "\(what): \(vout)")
        }
        // The daemon starts with a FIFO there and answers SIGTERM.
        try fx.start()
        try fx.drop("u.json", toner("u", zooms: 0...0))
        try fx.waitForState("u", "completed")
        XCTAssertEqual(fx.stop(), 0)
        try? FileManager.default.removeItem(atPath: path)
        try FileManager.default.moveItem(atPath: kept, toPath: path)
        let (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
    }

    func testQuotaIsCountedAgainOnceSpaceIsFreed() throws {
        try fx.start(["--max-store-bytes", "600000"])
        try fx.drop("big.json", toner("big", zooms: 3...3))       // 476,245 bytes of tiles
        try fx.waitForState("big", "completed")
        try fx.drop("small.json", toner("small", zooms: 0...2))   // 243,790 more: over 600,000
        try fx.waitForState("small", "failedStorage")
        let message = fx.errorMessage("small") ?? ""
        XCTAssertTrue(message.contains("--max-store-bytes 600000"), message)
        try fx.control("big", "delete")
        try fx.waitForEvent("big", "deleted")
        XCTAssertEqual(fx.stop(), 0)
        let (rc, out) = try fx.cli(["gc", "--grace", "0", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        try fx.start(["--max-store-bytes", "600000"])
        XCTAssertEqual(fx.state("small"), "failedStorage")
        try fx.control("small", "resume")
        try fx.waitForState("small", "completed", timeout: 30)
        fx.assertStoreMatchesManifest("small")
    }

    // MARK: - Finding 14: a refresh over maxFailedTiles

    /// A refresh whose tiles now fail past `maxFailedTiles` is abandoned (the pack stays), and its
    /// message says so instead of pointing at a failed.tsv it did not write.
    func testARefreshOverMaxFailedTilesSaysThePackIsUnchanged() throws {
        // The tiles served from a copy this test can change.
        let copy = fx.root.appendingPathComponent("served")
        try FileManager.default.createDirectory(at: copy.appendingPathComponent("raster"), withIntermediateDirectories: true)
        try FileManager.default.copyItem(at: nginx.root.appendingPathComponent("raster/stamen_toner"), to: copy.appendingPathComponent("raster/stamen_toner"))
        let web = try NginxServer(root: copy)
        others.append(web)
        try fx.start()
        try fx.drop("t.json", toner("t", template: web.baseURL + "/raster/stamen_toner/{z}/{x}/{y}.png",
                                    extra: ["emptyStatuses": [204], "maxFailedTiles": 1]))
        try fx.waitForState("t", "completed")
        let before = fx.manifest("t").map(\.sha)
        for xy in ["0/0", "0/1", "1/0"] { try FileManager.default.removeItem(at: copy.appendingPathComponent("raster/stamen_toner/2/\(xy).png")) }
        try fx.control("t", "refresh")
        try waitUntil("the refresh ends") { fx.events("t").contains { $0["refresh"] as? String == "failed" } }
        try fx.waitForState("t", "completed")
        let message = fx.errorMessage("t") ?? ""
        XCTAssertTrue(message.contains("the refresh was abandoned and the pack is unchanged"), message)
        XCTAssertFalse(message.contains("failed.tsv"), message)
        XCTAssertFalse(FileManager.default.fileExists(atPath: fx.store + "/regions/t/failed.tsv"))
        XCTAssertEqual(fx.manifest("t").map(\.sha), before)
    }

    /// Found by AdversarialTests: a kill -9 while a new request for a completed region's id
    /// replaced its pack (the store holds the new request, the old manifest is gone) but before
    /// the new status was written left a region that said `completed` with an empty pack. The
    /// store is the truth at start: the region downloads its plan and completes for real.
    func testAStatusThatOutlivedItsPackIsNotBelieved() throws {
        try fx.start()
        try fx.drop("t.json", toner("t"))
        try fx.waitForState("t", "completed")
        fx.kill9()
        // The store as a replacing request leaves it before its status is written.
        let dir = fx.store + "/regions/t"
        var request = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir + "/request.json"))) as? [String: Any])
        request["maxZoom"] = 1
        try JSONSerialization.data(withJSONObject: request).write(to: URL(fileURLWithPath: dir + "/request.json"))
        try FileManager.default.removeItem(atPath: dir + "/manifest.tsv")
        try FileManager.default.removeItem(atPath: dir + "/plan.json")
        XCTAssertEqual(fx.state("t"), "completed")
        try fx.start()
        try waitUntil("the region downloads its new plan") { fx.state("t") == "completed" && fx.progress("t")["resourcesExpected"] == 5 }
        fx.assertStoreMatchesManifest("t")
        XCTAssertEqual(fx.stop(), 0)
        let (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
    }

    // MARK: - Dangerous defaults

    /// A template that answers 404 everywhere no longer ends `completed` with 0 bytes: the region
    /// fails with `allTilesEmpty`, the status counting the empty tiles; `allowEmpty` lets an area
    /// that really has no tiles complete, with a warning per empty source.
    func testARegionOfEmptyTilesFailsUnlessAllowed() throws {
        try fx.start()
        let typo = nginx.baseURL + "/raster/stamen_toner/{z}/{x}/{y}.pnf"
        try fx.drop("typo.json", toner("typo", template: typo))
        try fx.waitForState("typo", "failed")
        XCTAssertEqual(fx.errorCode("typo"), "allTilesEmpty")
        XCTAssertTrue(fx.errorMessage("typo")?.contains("check the tile URL template") == true, fx.errorMessage("typo") ?? "")
        XCTAssertEqual(fx.progress("typo")["tilesEmpty"], 21)
        XCTAssertEqual(fx.progress("typo")["tilesCompleted"], 21)
        let (rc, out) = try fx.cli(["export", "typo", "--format", "mbtiles", "--output", fx.root.appendingPathComponent("t.mbtiles").path,
                                    "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 1, out)

        try fx.drop("sea.json", toner("sea", template: typo, extra: ["allowEmpty": true]))
        try fx.waitForState("sea", "completed")
        let warnings = fx.status("sea")?["warnings"] as? [[String: Any]] ?? []
        XCTAssertEqual(warnings.map { $0["code"] as? String }, ["sourceEmpty"])
    }

    /// A request that replaces a completed region's pack says so: a status warning, the event's
    /// `replaced` object, and a warning in the log.
    func testReplacingACompletedPackIsSaidLoudly() throws {
        try fx.start()
        try fx.drop("t.json", toner("t"))
        try fx.waitForState("t", "completed")
        try fx.drop("t.json", toner("t", zooms: 0...1))
        try waitUntil("the new download completes") { fx.state("t") == "completed" && fx.progress("t")["tilesExpected"] == 5 }
        let warnings = fx.status("t")?["warnings"] as? [[String: Any]] ?? []
        XCTAssertEqual(warnings.map { $0["code"] as? String }, ["packReplaced"])
        let queued = try XCTUnwrap(fx.events("t").last { $0["replaced"] != nil })
        XCTAssertEqual((queued["replaced"] as? [String: Any])?["resources"] as? Int, 21)
        XCTAssertTrue(fx.log().contains("level=warning") && fx.log().contains("replaces the completed pack"), fx.log())
    }

    /// `west > east` is read as a box across the antimeridian (as MapLibre does) with a warning
    /// that gives the width of both readings; the status shows the area and the tile count.
    func testBoundsAcrossTheAntimeridianAreSaidAndTheAreaShown() throws {
        try fx.start()
        try fx.drop("wide.json", ["tiles": [tonerTemplate], "bounds": [10, 40, -10, 50], "minZoom": 0, "maxZoom": 1])
        try waitUntil("the status is written") { fx.status("wide") != nil }
        let st = try XCTUnwrap(fx.status("wide"))
        let w = try XCTUnwrap((st["warnings"] as? [[String: Any]])?.first)
        XCTAssertEqual(w["code"] as? String, "boundsCrossAntimeridian")
        XCTAssertTrue((w["message"] as? String ?? "").contains("340° wide"), "\(w)")
        XCTAssertTrue((w["message"] as? String ?? "").contains("[-10.0, 40.0, 10.0, 50.0]"), "\(w)")
        let area = try XCTUnwrap(st["area"] as? [String: Any])
        XCTAssertEqual(area["widthDegrees"] as? Double, 340)
        XCTAssertEqual(area["crossesAntimeridian"] as? Bool, true)
        // R² · Δλ · (sin 50° − sin 40°), computed here independently.
        let expected = 6371.0088 * 6371.0088 * (340 * .pi / 180) * (sin(50 * .pi / 180) - sin(40 * .pi / 180))
        XCTAssertEqual(try XCTUnwrap(area["km2"] as? Double), expected, accuracy: 1)
        XCTAssertEqual(fx.progress("wide")["tilesExpected"], 1 + 2) // z0: 1; z1: columns 1 and 0 of row 0
        try fx.drop("narrow.json", ["tiles": [tonerTemplate], "bounds": [-10, 40, 10, 50], "minZoom": 0, "maxZoom": 1])
        try waitUntil("the status is written") { fx.status("narrow") != nil }
        XCTAssertEqual((fx.status("narrow")?["warnings"] as? [Any])?.count, 0)
    }
}
