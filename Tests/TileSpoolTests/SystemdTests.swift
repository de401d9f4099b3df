import Foundation
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
}
