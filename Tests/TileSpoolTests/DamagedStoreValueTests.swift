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

    /// A completed region `t` of toner tiles at zooms 0...2 (21 lines), the daemon stopped.
    func completedRegion() throws {
        try fx.start()
        try fx.drop("t.json", ["id": "t", "tiles": [nginx.baseURL + "/raster/stamen_toner/{z}/{x}/{y}.png"],
                               "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 2] as [String: Any])
        try fx.waitForState("t", "completed")
        XCTAssertEqual(fx.stop(), 0)
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
}
