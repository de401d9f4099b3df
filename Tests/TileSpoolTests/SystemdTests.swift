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
            _ = try PackedStore(root: fx.store)
            let status = StatusWriter(layout: SpoolLayout(root: fx.spool))
            try SpoolLayout(root: fx.spool).create()
            for (id, days) in [("old", 60.0), ("young", 1.0)] {
                let request = RegionRequest(id: id, source: .tiles(["http://127.0.0.1:9/{z}/{x}/{y}.png"]),
                                            bounds: GeoBounds(west: 0, south: 0, east: 1, north: 1), minZoom: 0, maxZoom: 0)
                try RegionFiles(dir: fx.store + "/regions/" + id).create(request: request)
                var st = RegionStatus(id: id, state: .completed, progress: RegionProgress(), error: nil, request: JSONValue(request.jsonObject), context: .null)
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
            let left = ["old", "young"].filter { fx.state($0) == "completed" && FileManager.default.fileExists(atPath: fx.store + "/regions/" + $0) }
            return (left, text)
        }
        var (left, out) = try runUnit("")
        XCTAssertEqual(left, ["old", "young"], "by default the timer deletes no region: \(out)")
        XCTAssertTrue(out.contains("prune: no region selected") && out.contains("gc: removed 0 objects"), out)
        (left, out) = try runUnit("--older-than 30d --state completed,cancelled,failed")
        XCTAssertEqual(left, ["young"], out)
        XCTAssertTrue(out.contains("deleted old"), out)
    }

    /// Issue 29: the units and docs/operations.md agree on who drops requests. Run as the unit
    /// runs the daemon (its ExecStartPre= lines, then `run`, as a user of its own with the unit's
    /// UMask=), a member of the daemon's group drops a request and a control file and reads the
    /// status; a user outside the group can do none of it; and the daemon's files are 0640/0750.
    /// Needs root (to take other uids with setpriv); skipped otherwise.
    func testAGroupMemberDropsRequestsUnderTheUnitsUMask() throws {
        guard getuid() == 0 else {
            print("SKIPPED: testAGroupMemberDropsRequestsUnderTheUnitsUMask needs root (it runs as three other uids)")
            throw XCTSkip("not root")
        }
        let unit = try String(contentsOf: MapData.packageRoot.appendingPathComponent("dist/tilespool.service"), encoding: .utf8)
        let lines = unit.split(separator: "\n").map(String.init)
        let umask = try XCTUnwrap(lines.first { $0.hasPrefix("UMask=") }?.dropFirst("UMask=".count))
        XCTAssertEqual(umask, "0027")
        let server = try FaultServer()
        defer { server.stop() }
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("tilespool-perm-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: base) }
        let lib = base + "/lib"  // /var/lib/tilespool: StateDirectory=tilespool, StateDirectoryMode=0750
        try FileManager.default.createDirectory(atPath: lib, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o750])
        chmod(base, 0o755)
        let daemonUID = 64100, memberUID = 64101, outsiderUID = 64102
        XCTAssertEqual(chown(lib, uid_t(daemonUID), gid_t(daemonUID)), 0)
        /// The setpriv(1) arguments that run `words` as `uid` (primary group = uid, plus `groups`)
        /// with `mask` as the umask.
        func setprivArguments(_ uid: Int, groups: [Int] = [], umask mask: String, _ words: [String]) -> [String] {
            ["--reuid=\(uid)", "--regid=\(uid)"] + (groups.isEmpty ? ["--clear-groups"] : ["--groups=" + groups.map(String.init).joined(separator: ",")])
                + ["/bin/sh", "-c", "umask \(mask) && exec \"$@\"", "sh"] + words
        }
        func run(_ uid: Int, groups: [Int] = [], umask mask: String = "022", _ words: [String]) throws -> (Int32, String) {
            try runTool("/usr/bin/setpriv", setprivArguments(uid, groups: groups, umask: mask, words))
        }
        let paths = { (w: String) in w.replacingOccurrences(of: "/var/lib/tilespool", with: lib) }
        for pre in lines.filter({ $0.hasPrefix("ExecStartPre=") }) {
            let words = pre.dropFirst("ExecStartPre=".count).split(separator: " ").map { paths(String($0)) }
            let (rc, out) = try run(daemonUID, umask: String(umask), words)
            XCTAssertEqual(rc, 0, "\(pre): \(out)")
        }
        let spool = lib + "/spool", store = lib + "/store"
        let log = base + "/daemon.log"
        FileManager.default.createFile(atPath: log, contents: nil)
        let daemon = Process()
        daemon.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        daemon.arguments = setprivArguments(daemonUID, umask: String(umask), [SpoolFixture.binary, "run", "--spool", spool, "--store", store, "--retry-delay", "0.1"])
        let logHandle = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        daemon.standardError = logHandle
        daemon.standardOutput = logHandle
        try daemon.run()
        defer { if daemon.isRunning { daemon.terminate(); daemon.waitUntilExit() } }
        try waitUntil("the daemon runs", timeout: 10) { ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("watching") || !daemon.isRunning }
        XCTAssertTrue(daemon.isRunning, (try? String(contentsOfFile: log, encoding: .utf8)) ?? "")

        // A member of the group drops a request the documented way (a dotfile, then mv).
        let request = String(decoding: try JSONSerialization.data(withJSONObject: server.tilesRequest(["/ok/g/{z}/{x}/{y}.png"], id: "g")), as: UTF8.self)
        var (rc, out) = try run(memberUID, groups: [daemonUID], ["/bin/sh", "-c", "printf '%s' \"$0\" > \(spool)/requests/.g.json && mv \(spool)/requests/.g.json \(spool)/requests/g.json", request])
        XCTAssertEqual(rc, 0, out)
        try waitUntil("g completes", timeout: 20) { (try? String(contentsOfFile: spool + "/status/g.state", encoding: .utf8)) == "completed\n" }
        (rc, out) = try run(memberUID, groups: [daemonUID], [SpoolFixture.binary, "status", "g", "--spool", spool, "--store", store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.hasPrefix("g  completed"), out)
        (rc, out) = try run(memberUID, groups: [daemonUID], [SpoolFixture.binary, "refresh", "g", "--wait", "--timeout", "20", "--spool", spool, "--store", store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.hasSuffix("g: refresh finished: 1 checked, 0 changed, 1 unchanged\n"), out)
        // Someone outside the group can neither drop nor read.
        (rc, out) = try run(outsiderUID, ["/bin/sh", "-c", "printf x > \(spool)/requests/.o.json"])
        XCTAssertNotEqual(rc, 0, out)
        (rc, out) = try run(outsiderUID, [SpoolFixture.binary, "status", "--spool", spool])
        XCTAssertEqual(rc, 1, out)
        // What the daemon made: read-only for the group, nothing for others; requests/ and control/ group-writable.
        func mode(_ p: String) -> Int { ((try? FileManager.default.attributesOfItem(atPath: p))?[.posixPermissions] as? NSNumber)?.intValue ?? -1 }
        XCTAssertEqual(mode(spool), 0o750)
        XCTAssertEqual(mode(spool + "/requests"), 0o770)
        XCTAssertEqual(mode(spool + "/control"), 0o770)
        for p in [spool + "/status", spool + "/rejected", store, store + "/packs", store + "/regions/g"] { XCTAssertEqual(mode(p), 0o750, p) }
        for p in [spool + "/status/g.json", spool + "/events.jsonl", store + "/regions/g/manifest.tsv"] { XCTAssertEqual(mode(p), 0o640, p) }
    }
}
