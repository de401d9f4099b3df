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

    /// The daemon is started on the damaged store and is still running a few seconds later.
    func assertDaemonStaysUp(file: StaticString = #filePath, line: UInt = #line) throws {
        try fx.start()
        Thread.sleep(forTimeInterval: 3)
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
        Thread.sleep(forTimeInterval: 1)
        XCTAssertEqual(fx.daemon?.isRunning, true, "daemon crashed: \(fx.log().suffix(2000))")
        XCTAssertEqual(fx.stop(), 0)
    }
}
