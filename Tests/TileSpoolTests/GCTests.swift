import Foundation
import XCTest

/// `tilespool gc`: frees exactly what no region references, and never what a running download uses.
final class GCTests: XCTestCase {
    var nginx: NginxServer!
    var fx: SpoolFixture!
    var mapdata: URL!

    override func setUpWithError() throws {
        mapdata = try MapData.require()
        // A slow copy of the toner tiles (16 KiB/s per connection), for a download gc runs beside.
        nginx = try NginxServer(root: mapdata, extraLocations: """
            location /slowtoner/ { alias \(mapdata.path)/raster/stamen_toner/; limit_rate 16k; }
            """)
        fx = try SpoolFixture()
        try fx.start()
    }

    override func tearDown() {
        fx?.stop()
        nginx?.stop()
    }

    func toner(_ id: String, maxZoom: Int, path: String = "/raster/stamen_toner") -> [String: Any] {
        ["id": id, "tiles": [nginx.baseURL + path + "/{z}/{x}/{y}.png"], "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": maxZoom]
    }

    func gc(grace: Double) throws -> String {
        let (rc, out) = try fx.cli(["gc", "--grace", String(grace), "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        return out
    }

    /// The numbers of gc's first line: objects removed, bytes freed.
    func removedAndFreed(_ out: String) -> (Int, Int)? {
        guard let r = out.range(of: #"removed (\d+) objects, freed (\d+) bytes"#, options: .regularExpression) else { return nil }
        let nums = out[r].split(whereSeparator: { !$0.isNumber }).compactMap { Int($0) }
        return nums.count == 2 ? (nums[0], nums[1]) : nil
    }

    func testDeletingOneOfTwoRegionsThatShareTilesFreesExactlyItsOwnObjects() throws {
        try fx.drop("small.json", toner("small", maxZoom: 1))
        try fx.drop("big.json", toner("big", maxZoom: 3))
        try fx.waitForState("small", "completed")
        try fx.waitForState("big", "completed")
        let small = Set(fx.manifest("small").map(\.sha).filter { $0 != "-" })
        let big = Set(fx.manifest("big").map(\.sha).filter { $0 != "-" })
        XCTAssertFalse(small.intersection(big).isEmpty, "the regions share objects")
        // gc --grace 0 only with the daemon stopped.
        XCTAssertEqual(fx.stop(), 0)
        XCTAssertEqual(removedAndFreed(try gc(grace: 0))?.0, 0)
        try fx.start()
        try fx.control("big", "delete")
        try waitUntil("big deleted", timeout: 10) { fx.events("big").last?["state"] as? String == "deleted" }
        XCTAssertEqual(fx.stop(), 0)
        let onlyBig = big.subtracting(small)
        let held = fx.storeObjects()
        let payload = onlyBig.reduce(0) { $0 + (held[$1]?.size ?? 0) }
        let storeBefore = fx.storeFileBytes()
        let out = try gc(grace: 0)
        let (removed, freed) = try XCTUnwrap(removedAndFreed(out), out)
        XCTAssertEqual(removed, onlyBig.count, out)
        // At least the objects' bytes left the disk, and gc says so.
        XCTAssertGreaterThanOrEqual(freed, payload, out)
        XCTAssertGreaterThanOrEqual(storeBefore - fx.storeFileBytes(), payload, out)
        XCTAssertEqual(Set(fx.objects()), small)
        XCTAssertEqual(fx.storeFaults(), "")
        let (rc, v) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, v)
    }

    /// Issue 29: gc right after a delete frees nothing (the objects are younger than the grace
    /// period) and says so, with how many and how large, and how to free them now.
    func testGCSaysWhatTheGracePeriodKeeps() throws {
        try fx.drop("gone.json", toner("gone", maxZoom: 1))
        try fx.waitForState("gone", "completed")
        let objects = Set(fx.manifest("gone").map(\.sha).filter { $0 != "-" })
        let held = fx.storeObjects()
        let bytes = objects.reduce(0) { $0 + (held[$1]?.size ?? 0) }
        XCTAssertGreaterThan(objects.count, 0)
        // Referenced young objects are not "unreferenced": no such line yet.
        var (rc, out) = try fx.cli(["gc", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertFalse(out.contains("unreferenced"), out)
        try fx.control("gone", "delete")
        try waitUntil("gone deleted", timeout: 10) { fx.events("gone").last?["state"] as? String == "deleted" }
        (rc, out) = try fx.cli(["gc", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.contains("gc: removed 0 objects, freed 0 bytes"), out)
        XCTAssertTrue(out.contains("gc: kept \(objects.count) unreferenced objects (\(bytes) bytes, \(String(format: "%.1f KiB", Double(bytes) / 1024))) younger than the grace period (3600 s): a later gc frees them; --grace 0 when no daemon runs"), out)
        XCTAssertEqual(Set(fx.objects()), objects)
        // Below the safe grace period only with the daemon stopped: refused while it runs.
        (rc, out) = try fx.cli(["gc", "--grace", "0", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("gc --grace below 3600 s needs the daemon stopped (lock \(fx.spool)/daemon.lock is held)"), out)
        XCTAssertEqual(Set(fx.objects()), objects)
        fx.stop()
        let (removed, freed) = try XCTUnwrap(removedAndFreed(try gc(grace: 0)))
        XCTAssertEqual(removed, objects.count)
        XCTAssertGreaterThanOrEqual(freed, bytes)
        XCTAssertEqual(fx.objects(), [])
        XCTAssertEqual(fx.storeFileBytes(), 0, "no pack or index file left")
    }

    /// gc from cron while a region downloads: the new region needs the same toner bodies, which
    /// sit in packs made two hours ago and no region references any more (old enough for gc to
    /// remove them); gc runs again and again meanwhile, with its default grace period. A download
    /// never relies on a copy that old (it writes the body again), so nothing it records may
    /// disappear.
    func testGCBesideARunningDownloadNeverRemovesWhatTheDownloadUses() throws {
        try fx.drop("old.json", toner("old", maxZoom: 3))
        try fx.waitForState("old", "completed")
        try fx.control("old", "delete")
        try waitUntil("old deleted", timeout: 10) { fx.events("old").last?["state"] as? String == "deleted" }
        // Every pack two hours old: unreferenced and old, so gc may remove any of it.
        XCTAssertEqual(fx.stop(), 0)
        XCTAssertEqual(try runTool("/usr/bin/python3", [SpoolFixture.storeReader, "backdate", fx.store, "7200"]).0, 0)
        try fx.start()
        try fx.drop("new.json", toner("new", maxZoom: 3, path: "/slowtoner"))
        try fx.waitForState("new", "downloading")
        var runs = 0, removed = 0
        while fx.state("new") == "downloading" && runs < 200 {
            removed += removedAndFreed(try gc(grace: 3600))?.0 ?? 0
            runs += 1
        }
        XCTAssertGreaterThan(runs, 1, "gc ran while the download was in progress")
        XCTAssertGreaterThan(removed, 0, "gc removed the old packs meanwhile")
        try fx.waitForState("new", "completed")
        fx.assertStoreMatchesManifest("new")
        XCTAssertEqual(fx.stop(), 0)
        _ = try gc(grace: 0)
        fx.assertStoreMatchesManifest("new")
        XCTAssertEqual(Set(fx.objects()), Set(fx.manifest("new").map(\.sha).filter { $0 != "-" }))
    }
}
