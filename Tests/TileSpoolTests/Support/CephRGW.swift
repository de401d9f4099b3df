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

    /// Starts the cluster and returns once the bucket takes requests.
    /// - Throws: `SupportError` when a Ceph binary is missing (run `make deps`) or a step does not come up.
    init() throws {
        for tool in ["ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "monmaptool", "ceph"] {
            guard ChildProcess.find(tool, override: "TILESPOOL_\(tool.uppercased().replacingOccurrences(of: "-", with: "_"))",
                                    fallbacks: ["/usr/bin/\(tool)"]) != nil else {
                throw SupportError("\(tool) not found (run `make deps`: Debian's radosgw ceph-mon ceph-osd ceph-common)")
            }
        }
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("tilespool-ceph-\(UUID().uuidString)")
        port = try Loopback.freePort()
        let monPort = try Loopback.freePort()
        let (code, out) = CephRGW.script(["up"], env: ["D": directory.path, "RGW_PORT": "\(port)", "MON_PORT": "\(monPort)"])
        guard code == 0 else {
            _ = CephRGW.script(["down"], env: ["D": directory.path])
            throw SupportError("Ceph RGW did not start (ceph.sh up exited \(code)):\n\(out.suffix(3000))")
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
