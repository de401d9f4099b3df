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

    func testDeletingOneOfTwoRegionsThatShareTilesFreesExactlyItsOwnObjects() throws {
        try fx.drop("small.json", toner("small", maxZoom: 1))
        try fx.drop("big.json", toner("big", maxZoom: 3))
        try fx.waitForState("small", "completed")
        try fx.waitForState("big", "completed")
        let small = Set(fx.manifest("small").map(\.sha).filter { $0 != "-" })
        let big = Set(fx.manifest("big").map(\.sha).filter { $0 != "-" })
        XCTAssertFalse(small.intersection(big).isEmpty, "the regions share objects")
        XCTAssertTrue(try gc(grace: 0).contains("removed 0 objects"))
        try fx.control("big", "delete")
        try waitUntil("big deleted", timeout: 10) { fx.events("big").last?["state"] as? String == "deleted" }
        let onlyBig = big.subtracting(small)
        let bytes = onlyBig.reduce(0) { $0 + Files_size(fx.objectPath($1)) }
        let out = try gc(grace: 0)
        XCTAssertTrue(out.contains("removed \(onlyBig.count) objects, freed \(bytes) bytes"), out)
        XCTAssertEqual(Set(fx.objects()), small)
        let (rc, v) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, v)
    }

    /// Issue 29: gc right after a delete frees nothing (the objects are younger than the grace
    /// period) and says so, with how many and how large, and how to free them now.
    func testGCSaysWhatTheGracePeriodKeeps() throws {
        try fx.drop("gone.json", toner("gone", maxZoom: 1))
        try fx.waitForState("gone", "completed")
        let objects = Set(fx.manifest("gone").map(\.sha).filter { $0 != "-" })
        let bytes = objects.reduce(0) { $0 + Files_size(fx.objectPath($1)) }
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
        fx.stop()
        XCTAssertTrue(try gc(grace: 0).contains("removed \(objects.count) objects, freed \(bytes) bytes"))
        XCTAssertEqual(fx.objects(), [])
    }

    /// gc from cron while a region downloads: the new region re-uses old unreferenced objects (the
    /// same toner bodies) and writes new ones; gc runs again and again meanwhile. Nothing the
    /// download records may disappear.
    func testGCBesideARunningDownloadNeverRemovesWhatTheDownloadUses() throws {
        try fx.drop("old.json", toner("old", maxZoom: 3))
        try fx.waitForState("old", "completed")
        try fx.control("old", "delete")
        try waitUntil("old deleted", timeout: 10) { fx.events("old").last?["state"] as? String == "deleted" }
        // Age every object by two hours: unreferenced and old, so gc may remove any of them.
        for sha in fx.objects() {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/touch")
            p.arguments = ["-d", "2 hours ago", fx.objectPath(sha)]
            try p.run(); p.waitUntilExit()
        }
        try fx.drop("new.json", toner("new", maxZoom: 3, path: "/slowtoner"))
        try fx.waitForState("new", "downloading")
        var runs = 0
        while fx.state("new") == "downloading" && runs < 200 {
            _ = try gc(grace: 5)
            runs += 1
        }
        XCTAssertGreaterThan(runs, 1, "gc ran while the download was in progress")
        try fx.waitForState("new", "completed")
        fx.assertStoreMatchesManifest("new")
        _ = try gc(grace: 0)
        fx.assertStoreMatchesManifest("new")
        XCTAssertEqual(Set(fx.objects()), Set(fx.manifest("new").map(\.sha).filter { $0 != "-" }))
    }
}
