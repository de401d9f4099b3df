// Attack round 4: values in store files that trapped the daemon and the CLI (a crash loop at
// every start). A manifest line or plan.json whose values are out of range is damage, refused
// by its one parser (skipped or unreadable, reported as other damage), never a crash.
import Foundation
import Glibc
import TileSpoolCore
import XCTest

final class DamagedStoreValueTests: XCTestCase {
    var nginx: NginxServer!
    var fx: SpoolFixture!

    override func setUpWithError() throws {
        nginx = try NginxServer(root: try MapData.require())
        fx = try SpoolFixture()
    }

    override func tearDown() {
        fx?.stop()
        nginx?.stop()
    }

    /// A completed region `t` of toner tiles at zooms 0...2 (21 lines), or of the bright style
    /// over Monaco at zooms 0...2 (`style`), the daemon stopped.
    func completedRegion(style: Bool = false) throws {
        try fx.start()
        try fx.drop("t.json", request(style: style))
        try fx.waitForState("t", "completed")
        XCTAssertEqual(fx.stop(), 0)
    }

    /// The request of region `t`, plus `extra` fields.
    func request(style: Bool = false, _ extra: [String: Any] = [:]) -> [String: Any] {
        var r: [String: Any] = ["id": "t", "tiles": [nginx.baseURL + "/raster/stamen_toner/{z}/{x}/{y}.png"],
                                "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 2]
        if style {
            r["tiles"] = nil
            r["style"] = nginx.baseURL + "/styles/bright/style.local-template.json"
            r["bounds"] = ExportTests.monacoBounds
        }
        for (k, v) in extra { r[k] = v }
        return r
    }

    /// Rewrites column `column` (0-based) of every tile line of `t`'s manifest to `value`.
    func setManifestColumn(_ column: Int, _ value: String) throws {
        let path = fx.store + "/regions/t/manifest.tsv"
        let text = try String(contentsOfFile: path, encoding: .utf8)
        let lines = text.split(separator: "\n").map { l -> String in
            guard l.hasPrefix("tile\t") else { return String(l) }
            var f = l.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            f[column] = value
            return f.joined(separator: "\t")
        }
        try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: path))
    }

    /// The daemon is started on the damaged store and is still running once its first scan of
    /// every manifest (the unique bytes, where a value out of range once overflowed) is done: it
    /// logs that, and the test waits for the line, not for time.
    func assertDaemonStaysUp(file: StaticString = #filePath, line: UInt = #line) throws {
        try fx.start()
        try waitUntil("the daemon's first scan of the manifests is done, or the daemon is gone", timeout: 30) {
            fx.daemon?.isRunning != true || fx.log().contains("measured the unique bytes of")
        }
        XCTAssertEqual(fx.daemon?.isRunning, true, "daemon crashed: \(fx.log().suffix(2000))", file: file, line: line)
    }

    /// `bytes` of 2^62 on every tile line: the daemon overflowed summing them (unique bytes) about
    /// a second after start, and `verify` said nothing. Such lines are refused (past
    /// `PackFormat.maxBody`): the daemon stays up and `verify` reports the count mismatch.
    func testBytesPastTheLargestBodyAreDamageNotACrash() throws {
        try completedRegion()
        try setManifestColumn(2, "4611686018427387904")
        try assertDaemonStaysUp()
        XCTAssertEqual(fx.stop(), 0)
        let (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("count mismatch: t:"), out)
    }

    /// `fetched` of 1e19 (and 9223372036854775807.5) on the tile lines: `export --format
    /// maplibre` trapped converting it to Int64, and a daemon writing a maplibre export crashed
    /// (again at every start). Such lines are refused (times outside 0 ... 253402300799, year
    /// 9999): the export does not trap and the daemon stays up.
    func testFetchedPastYear9999IsDamageNotACrash() throws {
        try completedRegion(style: true)
        for value in ["1e19", "9223372036854775807.5"] {
            try setManifestColumn(8, value)
            let out = fx.root.appendingPathComponent("t-\(value).db").path
            let (rc, text) = try fx.cli(["export", "t", "--format", "maplibre", "--output", out, "--spool", fx.spool, "--store", fx.store])
            XCTAssertTrue(rc == 0 || rc == 1, "export trapped (\(rc)): \(text)")
            XCTAssertFalse(text.contains("Fatal error"), text)
        }
        try assertDaemonStaysUp()
        // A maplibre export asked of the damaged pack: written or failed, the daemon stays up.
        try fx.drop("t.json", request(style: true, ["exports": [["format": "maplibre"]]]))
        try waitUntil("the export settles", timeout: 30) {
            guard fx.daemon?.isRunning == true else { return true }
            let exports = (fx.status("t")?["exports"] as? [[String: Any]]) ?? []
            return !exports.isEmpty && exports.allSatisfy { $0["state"] as? String != "writing" }
        }
        // The export's end was written to the status by the daemon's loop: it outlived the export.
        XCTAssertEqual(fx.daemon?.isRunning, true, "daemon crashed: \(fx.log().suffix(2000))")
        XCTAssertEqual(fx.stop(), 0)
    }

    /// A tile rectangle in `t`'s plan.json made huge (maxX = maxY = 2^62: a bitmap of 1e18 bytes)
    /// or overflowing (minX = -2^63, maxX = 2^63 - 1: `TileRect.width` trapped): the daemon
    /// aborted at every start and `export` crashed. Such a plan is unreadable, as one that is not
    /// JSON: `verify` reports it, `export` refuses the region, and the daemon stays up and
    /// downloads the region again from a plan made anew.
    func testAPlanRectangleOutsideItsZoomIsUnreadableNotACrash() throws {
        try completedRegion()
        let path = fx.store + "/regions/t/plan.json"
        let original = try Data(contentsOf: URL(fileURLWithPath: path))
        for (minX, maxX, maxY) in [(0, 1 << 62, 1 << 62), (Int.min, Int.max, 0)] {
            var plan = try XCTUnwrap(JSONSerialization.jsonObject(with: original) as? [String: Any])
            var sets = try XCTUnwrap(plan["tileSets"] as? [[String: Any]])
            var rects = try XCTUnwrap(sets[0]["rects"] as? [[String: Any]])
            rects[0]["minX"] = minX; rects[0]["maxX"] = maxX; rects[0]["maxY"] = maxY
            sets[0]["rects"] = rects; plan["tileSets"] = sets
            try JSONSerialization.data(withJSONObject: plan).write(to: URL(fileURLWithPath: path))

            var (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
            XCTAssertEqual(rc, 1, out)
            XCTAssertTrue(out.contains("unreadable plan: t:"), out)
            (rc, out) = try fx.cli(["export", "t", "--format", "mbtiles", "--output", fx.root.appendingPathComponent("t\(minX).mbtiles").path,
                                    "--spool", fx.spool, "--store", fx.store])
            XCTAssertEqual(rc, 1, "export: \(out)")
            XCTAssertTrue(out.contains("no plan"), out)

            try assertDaemonStaysUp()
            try fx.waitForState("t", "completed")
            XCTAssertEqual(fx.stop(), 0)
            (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
            XCTAssertEqual(rc, 0, out)
        }
    }
}

/// Numbers read from files that may be damaged or planted, which once trapped (a review of
/// 2026-12-07): each is refused or bounded, never an overflow.
final class BoundedNumberTests: XCTestCase {
    /// A manifest key's tile beyond zoom 30 or outside its zoom is no tile key (a planted
    /// `src/63/0/0` trapped `plan --estimate` at `1 << 63`).
    func testTileKeysOutsideTheZoomsAreNotTiles() {
        XCTAssertEqual(ManifestLine.parseTileKey("src/30/1073741823/0")?.1, TileID(z: 30, x: (1 << 30) - 1, y: 0))
        for key in ["src/63/0/0", "src/31/0/0", "src/2/4/0", "src/2/0/4", "src/9999999999/0/0"] {
            XCTAssertNil(ManifestLine.parseTileKey(key), key)
        }
    }
}

/// `ResourcePlan` decoding refuses a plan that could not have been planned.
final class PlanDecodingTests: XCTestCase {
    func plan(_ rect: TileRect, counts: [Int]? = nil) throws -> Data {
        // Made over a good rectangle, then given `rect` as it is (a bad one's count could trap).
        var set = TileSet(source: "s", template: TileURLTemplate("http://h/{z}/{x}/{y}.png"), rects: [TileRect(z: 0, minX: 0, minY: 0, maxX: 0, maxY: 0)])
        set.rects = [rect]
        set.rectCounts = counts ?? [1]
        return try JSONEncoder().encode(ResourcePlan(resources: [], tileSets: [set]))
    }

    func testRectanglesOutsideTheirZoomAndBadCountsAreUnreadable() throws {
        let good = TileRect(z: 2, minX: 0, minY: 1, maxX: 3, maxY: 2)
        XCTAssertEqual(try JSONDecoder().decode(ResourcePlan.self, from: plan(good, counts: [8])).tileCount, 8)
        let world30 = TileRect(z: 30, minX: 0, minY: 0, maxX: (1 << 30) - 1, maxY: (1 << 30) - 1)
        XCTAssertNoThrow(try JSONDecoder().decode(ResourcePlan.self, from: plan(world30)))
        let bad: [TileRect] = [
            TileRect(z: 2, minX: 0, minY: 0, maxX: 1 << 62, maxY: 1 << 62),
            TileRect(z: 2, minX: Int.min, minY: 0, maxX: Int.max, maxY: 0),
            TileRect(z: 2, minX: 3, minY: 0, maxX: 2, maxY: 0),       // min > max
            TileRect(z: 2, minX: 0, minY: 0, maxX: 4, maxY: 0),       // past 2^z - 1
            TileRect(z: 2, minX: -1, minY: 0, maxX: 0, maxY: 0),
            TileRect(z: 31, minX: 0, minY: 0, maxX: 0, maxY: 0),
            TileRect(z: -1, minX: 0, minY: 0, maxX: 0, maxY: 0),
            TileRect(z: 63, minX: 0, minY: 0, maxX: 0, maxY: 0),
        ]
        for r in bad {
            XCTAssertThrowsError(try JSONDecoder().decode(ResourcePlan.self, from: plan(r)), "\(r)")
        }
        for counts in [[], [1, 1], [-1], [9]] {
            XCTAssertThrowsError(try JSONDecoder().decode(ResourcePlan.self, from: plan(good, counts: counts)), "\(counts)")
        }
    }
}
