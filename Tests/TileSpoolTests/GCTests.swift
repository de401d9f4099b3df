import Foundation
import XCTest

/// `tilespool gc` beside a daemon, on the store `makeSite` gives (a folder here; a bucket in
/// `GCOnS3Tests`): frees exactly what no region references, and never what a running download
/// uses. What a user checks is read from the store's files (`StoreSite`: the manifest as stored,
/// the independent reader's list and verify, the bytes of packs and index files).
class GCTestCase: XCTestCase {
    var nginx: NginxServer!
    var fx: SpoolFixture!
    var mapdata: URL!
    var site: StoreSite!

    /// The store the daemon and gc use: the fixture's folder.
    func makeSite() throws -> StoreSite { try StoreSite(root: fx.store) }

    override func setUpWithError() throws {
        mapdata = try MapData.require()
        // A slow copy of the toner tiles (16 KiB/s per connection), for a download gc runs beside.
        nginx = try NginxServer(root: mapdata, extraLocations: """
            location /slowtoner/ { alias \(mapdata.path)/raster/stamen_toner/; limit_rate 16k; }
            """)
        fx = try SpoolFixture()
        site = try makeSite()
        fx.environment = site.environment
        try start()
    }

    override func tearDown() {
        fx?.stop()
        nginx?.stop()
        if site?.root == nil { try? site?.removeAll() }
    }

    /// Starts the daemon on the site's store.
    func start() throws { try fx.start(site.storeArguments) }

    /// `tilespool ARGS --spool S --store ...`.
    func cli(_ args: [String]) throws -> (Int32, String) { try fx.cli(args + ["--spool", fx.spool] + site.storeArguments) }

    func toner(_ id: String, maxZoom: Int, path: String = "/raster/stamen_toner") -> [String: Any] {
        ["id": id, "tiles": [nginx.baseURL + path + "/{z}/{x}/{y}.png"], "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": maxZoom]
    }

    func gc(grace: Double) throws -> String {
        let (rc, out) = try cli(["gc", "--grace", String(grace)])
        XCTAssertEqual(rc, 0, out)
        return out
    }

    /// The objects region `id`'s manifest names, as stored.
    func objects(of id: String) throws -> Set<String> { Set(try site.manifest(id).map(\.sha).filter { $0 != "-" }) }

    /// The numbers of gc's first line: objects removed, bytes freed.
    func removedAndFreed(_ out: String) -> (Int, Int)? {
        guard let r = out.range(of: #"removed (\d+) objects, freed (\d+) bytes"#, options: .regularExpression) else { return nil }
        let nums = out[r].split(whereSeparator: { !$0.isNumber }).compactMap { Int($0) }
        return nums.count == 2 ? (nums[0], nums[1]) : nil
    }

    /// Deletes region `id` through a control file and waits for its `deleted` event.
    func delete(_ id: String) throws {
        try fx.control(id, "delete")
        try waitUntil("\(id) deleted", timeout: 10) { fx.events(id).last?["state"] as? String == "deleted" }
    }
}

/// gc's cases on both stores (`GCOnS3Tests` runs them in a bucket).
class GCTests: GCTestCase {
    func testDeletingOneOfTwoRegionsThatShareTilesFreesExactlyItsOwnObjects() throws {
        try fx.drop("small.json", toner("small", maxZoom: 1))
        try fx.drop("big.json", toner("big", maxZoom: 3))
        try fx.waitForState("small", "completed")
        try fx.waitForState("big", "completed")
        let small = try objects(of: "small")
        let big = try objects(of: "big")
        XCTAssertFalse(small.intersection(big).isEmpty, "the regions share objects")
        // gc --grace 0 only with the daemon stopped.
        XCTAssertEqual(fx.stop(), 0)
        XCTAssertEqual(removedAndFreed(try gc(grace: 0))?.0, 0)
        try start()
        try delete("big")
        XCTAssertEqual(fx.stop(), 0)
        let onlyBig = big.subtracting(small)
        let held = try site.readerList()
        let payload = onlyBig.reduce(0) { $0 + (held[$1] ?? 0) }
        let storeBefore = try site.fileBytes()
        let out = try gc(grace: 0)
        let (removed, freed) = try XCTUnwrap(removedAndFreed(out), out)
        XCTAssertEqual(removed, onlyBig.count, out)
        // At least the objects' bytes left the disk, and gc says so.
        XCTAssertGreaterThanOrEqual(freed, payload, out)
        XCTAssertGreaterThanOrEqual(storeBefore - (try site.fileBytes()), payload, out)
        XCTAssertEqual(Set(try site.readerList().keys), small)
        XCTAssertEqual(try site.readerVerify(), "")
        let (rc, v) = try cli(["verify"])
        XCTAssertEqual(rc, 0, v)
    }

    /// Issue 29: gc right after a delete frees nothing (the objects are younger than the grace
    /// period) and says so, with how many and how large, and how to free them now.
    func testGCSaysWhatTheGracePeriodKeeps() throws {
        try fx.drop("gone.json", toner("gone", maxZoom: 1))
        try fx.waitForState("gone", "completed")
        let objects = try objects(of: "gone")
        let held = try site.readerList()
        let bytes = objects.reduce(0) { $0 + (held[$1] ?? 0) }
        XCTAssertGreaterThan(objects.count, 0)
        // Referenced young objects are not "unreferenced": no such line yet.
        var (rc, out) = try cli(["gc"])
        XCTAssertEqual(rc, 0, out)
        XCTAssertFalse(out.contains("unreferenced"), out)
        try delete("gone")
        (rc, out) = try cli(["gc"])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.contains("gc: removed 0 objects, freed 0 bytes"), out)
        XCTAssertTrue(out.contains("gc: kept \(objects.count) unreferenced objects (\(bytes) bytes, \(String(format: "%.1f KiB", Double(bytes) / 1024))) younger than the grace period (3600 s): a later gc frees them; --grace 0 when no daemon runs"), out)
        XCTAssertEqual(Set(try site.readerList().keys), objects)
        // Below the safe grace period only with the daemon stopped: refused while it runs.
        (rc, out) = try cli(["gc", "--grace", "0"])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("gc --grace below 3600 s needs the daemon stopped (lock \(fx.spool)/daemon.lock is held)"), out)
        XCTAssertEqual(Set(try site.readerList().keys), objects)
        fx.stop()
        let (removed, freed) = try XCTUnwrap(removedAndFreed(try gc(grace: 0)))
        XCTAssertEqual(removed, objects.count)
        XCTAssertGreaterThanOrEqual(freed, bytes)
        XCTAssertEqual(try site.readerList(), [:])
        XCTAssertEqual(try site.fileBytes(), 0, "no pack or index file left")
    }
}

/// `GCTests` with the store in a bucket of a real Ceph RGW, one server for the class.
final class GCOnS3Tests: GCTests {
    override class func setUp() { CephServers.start(for: self) }
    override class func tearDown() { CephServers.stop(for: self) }
    override func makeSite() throws -> StoreSite {
        try StoreSite(rgw: CephServers.server(for: type(of: self), test: name, file: #filePath, line: #line), label: "gc")
    }

    // Linux test discovery lists a class (with what it inherits) only when it declares a test.
    /// A deleted region leaves nothing under its `regions/<id>/` prefix (request, plan, manifest
    /// segments), and gc then frees its own objects while the daemon's lease stays in `locks/`.
    func testADeletedRegionLeavesNoKeyInTheBucket() throws {
        try fx.drop("gone.json", toner("gone", maxZoom: 1))
        try fx.waitForState("gone", "completed")
        XCTAssertFalse(try site.names("regions/gone/").isEmpty)
        XCTAssertEqual(try site.names("locks/").filter { $0.hasPrefix("locks/daemon-") }.count, 1, "the running daemon's lease")
        let objects = try objects(of: "gone")
        try delete("gone")
        XCTAssertEqual(try site.names("regions/gone/"), [])
        XCTAssertEqual(fx.stop(), 0)
        XCTAssertEqual(try site.names("locks/"), [], "the lease is removed at stop")
        XCTAssertEqual(removedAndFreed(try gc(grace: 0))?.0, objects.count)
        XCTAssertEqual(try site.readerList(), [:])
    }
}

/// gc cases of a folder store only (pack mtimes are set back: a bucket's `LastModified` cannot be).
final class LocalGCTests: GCTestCase {

    /// gc from cron while a region downloads: the new region needs the same toner bodies, which
    /// sit in packs made two hours ago and no region references any more (old enough for gc to
    /// remove them); gc runs again and again meanwhile, with its default grace period. A download
    /// never relies on a copy that old (it writes the body again), so nothing it records may
    /// disappear.
    func testGCBesideARunningDownloadNeverRemovesWhatTheDownloadUses() throws {
        try fx.drop("old.json", toner("old", maxZoom: 3))
        try fx.waitForState("old", "completed")
        try delete("old")
        // Every pack two hours old: unreferenced and old, so gc may remove any of it.
        XCTAssertEqual(fx.stop(), 0)
        XCTAssertEqual(try runTool("/usr/bin/python3", [SpoolFixture.storeReader, "backdate", fx.store, "7200"]).0, 0)
        try start()
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
