import Foundation
import XCTest
import TileSpoolIO

/// Issue 4, crashes and durability: `kill -9` at 20 random moments of one download.
final class CrashTests: XCTestCase {
    func testKill9AtTwentyRandomMomentsLosesNothingAndRefetchesLittle() throws { try killTwentyTimes([]) }

    /// 20 kills of one download started with `options`; then completed, `verify` clean, `tmp/`
    /// empty, and the bytes sent at most the pack plus what the design lets a kill lose, at the
    /// pack's mean resource size: the requests in flight (8, the default per region) and the
    /// bodies of one loop turn not yet written to the open pack (at most as many: each loop turn
    /// writes the open pack's buffer, and a restart reads the open pack back).
    func killTwentyTimes(_ options: [String]) throws {
        let mapdata = try MapData.require()
        // Every response at 512 KiB/s per connection, so that a kill often finds transfers half done.
        let nginx = try NginxServer(root: mapdata, extraLocations: "limit_rate 512k;")
        defer { nginx.stop() }
        let fx = try SpoolFixture()
        defer { fx.stop() }
        try fx.start(options)
        try fx.drop("monaco.json", ["style": nginx.baseURL + "/styles/bright/style.local-template.json",
                                    "bounds": [7.409205, 43.72335, 7.448637, 43.75169], "minZoom": 0, "maxZoom": 14])
        // 20 random moments of the download, as points in its progress (resources written so far,
        // manifest and journal together), so each kill interrupts a different stretch of it.
        var generator = SystemRandomNumberGenerator()
        var moments = Set<Int>()
        while moments.count < 20 { moments.insert(Int.random(in: 3...415, using: &generator)) }
        var reported = 0
        for (kill, moment) in moments.sorted().enumerated() {
            try waitUntil("kill \(kill) at \(moment) resources", timeout: 60) {
                fx.manifest("monaco").count + fx.journalCount("monaco") >= moment || fx.state("monaco") == "completed"
            }
            let before = fx.progress("monaco")["resourcesCompleted"] ?? 0
            XCTAssertGreaterThanOrEqual(before, reported, "progress never goes backwards across restarts")
            reported = before
            fx.kill9()
            // What the status reported done is in the manifest.
            XCTAssertGreaterThanOrEqual(fx.manifest("monaco").count, reported, "kill \(kill)")
            try fx.start(options)
        }
        try fx.waitForState("monaco", "completed", timeout: 120)
        fx.assertStoreMatchesManifest("monaco")
        XCTAssertEqual(fx.manifest("monaco").count, 419)
        let (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: fx.store + "/tmp"), [])
        // Bytes the server sent, against the pack's size (each distinct URL's body once).
        try waitUntil("access log complete", timeout: 10) { nginx.accessLog().filter { $0.status == 200 }.count >= 418 }
        let log = nginx.accessLog()
        var packBytes: [String: Int] = [:]
        for e in log where e.status == 200 { packBytes[e.path] = max(packBytes[e.path] ?? 0, e.bytes) }
        let pack = packBytes.values.reduce(0, +)
        let sent = log.reduce(0) { $0 + $1.bytes }
        let mean = Double(pack) / 419
        let perKill = 8 * mean + 8 * mean
        let bound = Double(pack) + Double(moments.count) * perKill
        print("kill -9 x20: server sent \(sent) bytes for a pack of \(pack) bytes (ratio \(String(format: "%.2f", Double(sent) / Double(pack))), bound \(String(format: "%.2f", bound / Double(pack))))")
        if Double(sent) > bound {
            var waste: [String: (Int, Int)] = [:]
            for e in log { let w = waste[e.path] ?? (0, 0); waste[e.path] = (w.0 + 1, w.1 + e.bytes) }
            for (p, w) in waste.sorted(by: { $0.value.1 > $1.value.1 }).prefix(15) { print("  \(w.0) requests, \(w.1) bytes: \(p)") }
            print(fx.log().suffix(4000))
        }
        XCTAssertLessThanOrEqual(Double(sent), bound)
    }
}
