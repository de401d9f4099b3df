// A real S3 server for tests: single-node Ceph RADOS Gateway from Debian's packages, started by
// Tests/Support/ceph.sh (one mon, one memstore OSD, radosgw, auth none) on fresh loopback ports
// in a temp folder, and stopped by pid. About 16-20 s to a usable bucket on these machines.
import Foundation
import XCTest
@testable import TileSpoolIO

final class CephRGW: @unchecked Sendable {
    /// The folder holding ceph.conf, the daemons' data, logs and pid files.
    let directory: URL
    let port: Int
    var endpoint: String { "http://127.0.0.1:\(port)" }
    /// The user and bucket ceph.sh creates.
    static let accessKey = "TESTKEY", secretKey = "TESTSECRET", bucket = "tiles"

    static let tools = ["ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "monmaptool", "ceph"]

    /// The executable `tool` (`$TILESPOOL_<TOOL>` first), or nil when it is not installed.
    static func find(_ tool: String) -> String? {
        ChildProcess.find(tool, override: "TILESPOOL_\(tool.uppercased().replacingOccurrences(of: "-", with: "_"))", fallbacks: ["/usr/bin/\(tool)"])
            .flatMap { FileManager.default.isExecutableFile(atPath: $0) ? $0 : nil }
    }

    /// True when every Ceph binary the harness runs is installed.
    static var binariesInstalled: Bool { tools.allSatisfy { find($0) != nil } }

    /// For a test that needs Ceph when it is not installed: prints `SKIPPED: <test>: ...` on its
    /// own line and throws `XCTSkip`; with `TILESPOOL_REQUIRE_MAPDATA=1` records a failure instead.
    static func requireInstalled(_ test: String, file: StaticString, line: UInt) throws {
        guard !binariesInstalled else { return }
        let missing = tools.filter { find($0) == nil }.joined(separator: ", ")
        let reason = "\(test): Ceph is not installed (\(missing) missing; run `make deps`)"
        if ProcessInfo.processInfo.environment["TILESPOOL_REQUIRE_MAPDATA"] == "1" {
            let message = "\(reason); TILESPOOL_REQUIRE_MAPDATA=1 makes this a failure"
            XCTFail(message, file: file, line: line)
            throw SupportError(message)
        }
        print("SKIPPED: \(reason)")
        throw XCTSkip(reason)
    }

    /// Starts the cluster and returns once the bucket takes requests.
    /// - Throws: `SupportError` when a Ceph binary is missing (run `make deps`) or a step does not come up.
    init() throws {
        for tool in CephRGW.tools {
            guard CephRGW.find(tool) != nil else {
                throw SupportError("\(tool) not found (run `make deps`: Debian's radosgw ceph-mon ceph-osd ceph-common)")
            }
        }
        // Two tries, each on fresh ports in a fresh folder: a port found free can be taken by
        // another process (test classes run four at once) before the mon or radosgw binds it.
        var failures: [String] = []
        while true {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tilespool-ceph-\(UUID().uuidString)")
            let port = try Loopback.freePort()
            let monPort = try Loopback.freePort()
            let (code, out) = CephRGW.script(["up"], env: ["D": directory.path, "RGW_PORT": "\(port)", "MON_PORT": "\(monPort)"])
            if code == 0 {
                self.directory = directory
                self.port = port
                return
            }
            _ = CephRGW.script(["down"], env: ["D": directory.path])
            failures.append("ceph.sh up exited \(code) (RGW port \(port), mon port \(monPort)):\n\(out.suffix(3000))")
            if failures.count == 2 { throw SupportError("Ceph RGW did not start, twice:\n" + failures.joined(separator: "\n")) }
        }
    }

    /// Stops radosgw, the OSD and the mon by pid and removes the folder. Idempotent.
    func stop() { _ = CephRGW.script(["down"], env: ["D": directory.path]) }

    /// A config for the test bucket under `prefix`, with `secret` (the right one by default).
    func config(prefix: String, secret: String = CephRGW.secretKey) -> S3Config {
        S3Config(endpoint: endpoint, bucket: CephRGW.bucket, prefix: prefix, accessKeyID: CephRGW.accessKey, secretAccessKey: secret)
    }

    private static func script(_ args: [String], env: [String: String]) -> (Int32, String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/bash")
        p.arguments = [MapData.packageRoot.appendingPathComponent("Tests/Support/ceph.sh").path] + args
        p.environment = ProcessInfo.processInfo.environment.merging(env) { _, b in b }
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("tilespool-ceph-\(UUID().uuidString).log")
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: log) }
        guard let h = try? FileHandle(forWritingTo: log) else { return (-1, "cannot write \(log.path)") }
        p.standardOutput = h
        p.standardError = h
        p.standardInput = FileHandle.nullDevice
        do { try p.run() } catch { return (-1, "\(error)") }
        p.waitUntilExit()
        try? h.close()
        return (p.terminationStatus, (try? String(contentsOf: log, encoding: .utf8)) ?? "")
    }
}

/// The Ceph RGWs of the test classes that use one: one per class, started by the class's
/// `setUp()` and stopped by pid in its `tearDown()`. Without Ceph installed, `server(for:)`
/// reports the test SKIPPED (a failure with TILESPOOL_REQUIRE_MAPDATA=1, as in CI).
enum CephServers {
    nonisolated(unsafe) private static var servers: [ObjectIdentifier: Result<CephRGW, Error>] = [:]

    static func start(for testClass: AnyClass) {
        guard CephRGW.binariesInstalled else { return }
        servers[ObjectIdentifier(testClass)] = Result { try CephRGW() }
    }
    static func stop(for testClass: AnyClass) {
        if case .success(let rgw) = servers.removeValue(forKey: ObjectIdentifier(testClass)) { rgw.stop() }
    }

    /// The server of `testClass`; throws when it could not start or Ceph is not installed.
    static func server(for testClass: AnyClass, test: String, file: StaticString, line: UInt) throws -> CephRGW {
        switch servers[ObjectIdentifier(testClass)] {
        case .success(let rgw): return rgw
        case .failure(let e): throw SupportError("Ceph RGW did not start: \(e)")
        case nil:
            try CephRGW.requireInstalled(test, file: file, line: line)
            throw SupportError("no Ceph RGW: not started")
        }
    }
}

/// A test class that starts one Ceph RGW for all its tests (`CephServers`). Subclasses get
/// their own server each.
class CephTestCase: XCTestCase {
    override class func setUp() { CephServers.start(for: self) }
    override class func tearDown() { CephServers.stop(for: self) }

    /// The class's server; throws when it could not start or Ceph is not installed.
    func server(_ test: String = #function, file: StaticString = #filePath, line: UInt = #line) throws -> CephRGW {
        try CephServers.server(for: type(of: self), test: test, file: file, line: line)
    }
}
