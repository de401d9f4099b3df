import Foundation
import TileSpoolCore
import TileSpoolIO
import XCTest

/// Issue 11: `make install` (PREFIX, DESTDIR) and the systemd units in dist/, checked by
/// `systemd-analyze verify` (which also checks that ExecStart= names an executable).
final class SystemdTests: XCTestCase {
    func testMakeInstallPutsBinaryUnitsAndDocsUnderPrefixAndTheUnitsVerify() throws {
        let prefix = FileManager.default.temporaryDirectory.appendingPathComponent("tilespool-prefix-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: prefix) }
        var (rc, out) = try runTool("/usr/bin/make", ["install", "PREFIX=\(prefix)", "TILESPOOL_BIN=\(SpoolFixture.binary)"], cwd: MapData.packageRoot.path)
        XCTAssertEqual(rc, 0, out)
        let units = prefix + "/lib/systemd/system"
        (rc, out) = try runTool(prefix + "/bin/tilespool", ["--version"])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.hasPrefix("tilespool "), out)
        XCTAssertTrue(FileManager.default.fileExists(atPath: prefix + "/share/doc/tilespool/operations.md"))
        XCTAssertTrue((try? String(contentsOfFile: prefix + "/share/doc/tilespool/tilespool.txt", encoding: .utf8))?.contains("--metrics-file") ?? false)
        let service = try String(contentsOfFile: units + "/tilespool.service", encoding: .utf8)
        XCTAssertTrue(service.contains("ExecStart=\(prefix)/bin/tilespool run "), service)
        for line in ["Type=simple", "User=tilespool", "ProtectSystem=strict", "ReadWritePaths=/var/lib/tilespool", "NoNewPrivileges=yes",
                     "PrivateTmp=yes", "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX"] {
            XCTAssertTrue(service.split(separator: "\n").contains(Substring(line)), "tilespool.service lacks \(line)")
        }
        XCTAssertFalse(service.contains("@BINDIR@") || service.contains("@DOCDIR@"))
        let analyze = "/usr/bin/systemd-analyze"
        guard FileManager.default.isExecutableFile(atPath: analyze) else {
            print("SKIPPED: systemd-analyze is not installed (Debian package systemd); the units were not verified")
            throw XCTSkip("systemd-analyze missing")
        }
        (rc, out) = try runTool(analyze, ["verify", units + "/tilespool.service", units + "/tilespool-gc.service", units + "/tilespool-gc.timer"])
        XCTAssertEqual(rc, 0, out)
        XCTAssertFalse(out.contains("Unknown key") || out.contains("Unknown section") || out.contains("ignoring"), "systemd-analyze warned: \(out)")
    }

    /// Issue 29: the shipped timer deletes no region unless told which with
    /// `TILESPOOL_PRUNE_REGIONS`; rejected/ cleanup and gc still run. The gc unit's `ExecStart=`
    /// lines run as systemd runs them (`$TILESPOOL_PRUNE_REGIONS`, a word of its own, becomes zero
    /// or more words), on the unit's default and on the documented setting, over two completed
    /// regions, one 60 days in that state and one 1 day.
    func testTheGCTimerDeletesRegionsOnlyWhenConfiguredTo() throws {
        let unit = try String(contentsOf: MapData.packageRoot.appendingPathComponent("dist/tilespool-gc.service"), encoding: .utf8)
        let lines = unit.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.filter { $0.hasPrefix("Environment=") }, ["Environment=TILESPOOL_PRUNE_REGIONS="], "empty by default")
        XCTAssertTrue(lines.contains("EnvironmentFile=-/etc/default/tilespool-gc"), unit)
        let execs = lines.filter { $0.hasPrefix("ExecStart=") }.map { $0.dropFirst("ExecStart=".count).split(separator: " ").map(String.init) }
        XCTAssertEqual(execs.map { $0.prefix(2) }, [["@BINDIR@/tilespool", "prune"], ["@BINDIR@/tilespool", "gc"]])

        /// Runs the unit's commands with TILESPOOL_PRUNE_REGIONS = `setting` on a fresh spool; the
        /// regions left, and the output.
        func runUnit(_ setting: String) throws -> (left: [String], out: String) {
            let fx = try SpoolFixture()
            let store = try ObjectStore(root: fx.store)
            let status = StatusWriter(layout: SpoolLayout(root: fx.spool))
            try SpoolLayout(root: fx.spool).create()
            for (id, days) in [("old", 60.0), ("young", 1.0)] {
                let request = RegionRequest(id: id, source: .tiles(["http://127.0.0.1:9/{z}/{x}/{y}.png"]),
                                            bounds: GeoBounds(west: 0, south: 0, east: 1, north: 1), minZoom: 0, maxZoom: 0)
                try RegionFiles(dir: store.regionDir(id)).create(request: request)
                var st = RegionStatus(id: id, state: .completed, progress: RegionProgress(), error: nil, request: request.jsonObject, context: NSNull())
                st.stateChangedAt = Date(timeIntervalSinceNow: -days * 86400)
                try status.write(st)
            }
            var text = ""
            for exec in execs {
                let words = exec.flatMap { w -> [String] in
                    if w == "$TILESPOOL_PRUNE_REGIONS" { return setting.split(separator: " ").map(String.init) }
                    return [w.replacingOccurrences(of: "/var/lib/tilespool/spool", with: fx.spool)
                        .replacingOccurrences(of: "/var/lib/tilespool/store", with: fx.store)]
                }
                let (rc, out) = try fx.cli(Array(words.dropFirst()))
                XCTAssertEqual(rc, 0, "\(words.joined(separator: " ")): \(out)")
                text += out
            }
            let left = ["old", "young"].filter { fx.state($0) == "completed" && FileManager.default.fileExists(atPath: store.regionDir($0)) }
            return (left, text)
        }
        var (left, out) = try runUnit("")
        XCTAssertEqual(left, ["old", "young"], "by default the timer deletes no region: \(out)")
        XCTAssertTrue(out.contains("prune: no region selected") && out.contains("gc: removed 0 objects"), out)
        (left, out) = try runUnit("--older-than 30d --state completed,cancelled,failed")
        XCTAssertEqual(left, ["young"], out)
        XCTAssertTrue(out.contains("deleted old"), out)
    }
}
