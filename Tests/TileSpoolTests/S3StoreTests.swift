import Foundation
import XCTest
@testable import TileSpoolIO
import TileSpoolCore

/// Issue 12: the store in S3, end to end against a real Ceph RADOS Gateway (started once for the
/// class): the real `tilespool` binary downloads from the test nginx into `--store s3://tiles/P`,
/// and what a user checks is read back from the bucket (objects, manifest segments) and from
/// `verify`, `export` and `gc`, as with the disk store.
final class S3StoreTests: CephTestCase {

    /// A fresh prefix in the test bucket, the S3 options for the daemon and CLI, and the
    /// credentials in the fixture's environment.
    func s3Spool(_ rgw: CephRGW, prefix: String, endpoint: String? = nil, secret: String = CephRGW.secretKey) throws -> (SpoolFixture, [String]) {
        let fx = try SpoolFixture()
        fx.environment = ["AWS_ACCESS_KEY_ID": CephRGW.accessKey, "AWS_SECRET_ACCESS_KEY": secret, "AWS_ENDPOINT_URL": ""]
        return (fx, ["--store", "s3://\(CephRGW.bucket)/\(prefix)", "--s3-endpoint", endpoint ?? rgw.endpoint])
    }

    /// The map data served by nginx, a fresh prefix with a client on it, and two spools on it
    /// with the daemon options (the caller starts and stops them, and nginx).
    func twoSpoolsOnOnePrefix(_ rgw: CephRGW) throws -> (nginx: NginxServer, s3: S3Client, a: SpoolFixture, b: SpoolFixture, opts: [String]) {
        let nginx = try NginxServer(root: try MapData.require())
        let (s3, a, b, opts) = try twoSpools(rgw)
        return (nginx, s3, a, b, opts)
    }

    /// Two spool fixtures on one fresh prefix, a client on that prefix (to check the bucket), and
    /// the daemon options that point at it (the caller stops both fixtures).
    func twoSpools(_ rgw: CephRGW) throws -> (s3: S3Client, a: SpoolFixture, b: SpoolFixture, opts: [String]) {
        let prefix = S3StoreTests.newPrefix()
        let (a, opts) = try s3Spool(rgw, prefix: prefix)
        let (b, _) = try s3Spool(rgw, prefix: prefix)
        return (S3Client(config: rgw.config(prefix: prefix)), a, b, opts)
    }

    /// A fresh prefix reached through a TCP forwarder in front of RGW (stop it to make the
    /// endpoint go away), a client on the prefix that goes to RGW directly, and a spool fixture
    /// with the options that point the daemon at the forwarder (the caller stops both).
    func spoolBehindForwarder(_ rgw: CephRGW) throws -> (proxy: TCPForwarder, s3: S3Client, fx: SpoolFixture, opts: [String]) {
        let proxy = try TCPForwarder(target: rgw.port)
        let prefix = S3StoreTests.newPrefix()
        let (fx, opts) = try s3Spool(rgw, prefix: prefix, endpoint: "http://127.0.0.1:\(proxy.port)")
        return (proxy, S3Client(config: rgw.config(prefix: prefix)), fx, opts)
    }

    static func newPrefix() -> String { "t-\(UUID().uuidString.prefix(8).lowercased())" }

    /// A fresh prefix, a client on it (to check the bucket), and a spool fixture with the options
    /// that point the daemon at it (the caller stops the fixture).
    func freshPrefixSpool(_ rgw: CephRGW) throws -> (s3: S3Client, fx: SpoolFixture, opts: [String]) {
        let prefix = S3StoreTests.newPrefix()
        let (fx, opts) = try s3Spool(rgw, prefix: prefix)
        return (S3Client(config: rgw.config(prefix: prefix)), fx, opts)
    }

    let monacoBounds: [Double] = [7.409205, 43.72335, 7.448637, 43.75169]

    func monacoRequest(_ nginx: NginxServer, bounds: [Double]? = nil) -> [String: Any] {
        ["style": nginx.baseURL + "/styles/bright/style.local-template.json", "bounds": bounds ?? monacoBounds, "minZoom": 0, "maxZoom": 14]
    }

    /// The region's manifest as stored in the bucket (docs/s3.md, object layout): the newest
    /// compacted object `<N>.all.tsv` if there is one, then the segments numbered above N, in order,
    /// concatenated. (Read here from the key names, not through the store's own reader.)
    func s3Manifest(_ s3: S3Client, _ id: String) throws -> (text: String, segments: Int, lines: [SpoolFixture.Line]) {
        let m = try StoreSite.joinedSegments(try s3.list(prefix: "regions/\(id)/manifest/").map(\.key)) { try XCTUnwrap(try s3.get($0)) }
        return (m.text, m.segments, SpoolFixture.Line.parse(m.text))
    }

    /// A tile line whose SHA-256 is `sha` repeated (a placeholder: no object behind it).
    func line(_ key: String, _ sha: String) -> ManifestLine {
        ManifestLine(kind: .tile, sha256: String(repeating: sha, count: 64), bytes: 10, key: key, url: "http://x/" + key)
    }

    /// The manifest as the store reads it, one "key=first hex digit of its SHA-256" per line.
    func keys(_ files: any RegionStorage) -> [String] {
        var out: [String] = []
        files.readManifest(cutPartialLine: true) { out.append($0.key + "=" + ($0.sha256?.prefix(1) ?? "-")) }
        return out
    }

    /// A store on a fresh prefix (and a client on it) with region `id`'s manifest in two
    /// segments, t/0/0/0 and t/1/0/0, both "a".
    func regionWithTwoSegments(_ rgw: CephRGW, _ id: String) throws -> (S3Client, PackedStore, any RegionStorage) {
        let prefix = S3StoreTests.newPrefix()
        let store = try PackedStore(backend: S3Backend(config: rgw.config(prefix: prefix)), scratch: S3StoreTests.scratch())
        let files = store.region(id)
        try files.appendToManifest([line("t/0/0/0", "a")])
        try files.appendToManifest([line("t/1/0/0", "a")])
        return (S3Client(config: rgw.config(prefix: prefix)), store, files)
    }

    /// A fresh local folder for a store's scratch files, removed when the test ends.
    static func scratch() throws -> String {
        try TestScratch.folder("tilespool-scratch").path
    }

    /// The bucket's store files (packs, index files, loose objects) copied into a local folder,
    /// for the independent reader (`Tests/Support/store_reader.py`).
    func mirror(_ s3: S3Client) throws -> String {
        let dir = try S3StoreTests.scratch()
        for prefix in ["packs/", "index/", "objects/"] {
            for o in try s3.list(prefix: prefix) {
                let path = dir + "/" + o.key
                try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
                try XCTUnwrap(try s3.get(o.key)).write(to: URL(fileURLWithPath: path))
            }
        }
        return dir
    }

    /// The objects in the bucket, as the independent reader finds them in a mirror: SHA-256 ->
    /// size (an object two daemons both wrote counts once).
    func s3Objects(_ s3: S3Client) throws -> [String: Int] {
        let dir = try mirror(s3)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let (rc, out) = try runTool("/usr/bin/python3", [SpoolFixture.storeReader, "list", dir])
        XCTAssertEqual(rc, 0, out)
        let (vrc, vout) = try runTool("/usr/bin/python3", [SpoolFixture.storeReader, "verify", dir])
        XCTAssertEqual(vrc, 0, "the bucket's packs and index files check out: \(vout)")
        var o: [String: Int] = [:]
        for l in out.split(separator: "\n") { let f = l.split(separator: " "); o[String(f[0])] = Int(f[1]) }
        return o
    }

    /// Checks what a user checks after a download into S3: every manifest line's object is in the
    /// bucket with the recorded size and bytes that hash (sha256sum) to its name, and the status
    /// counts equal the manifest's.
    func assertBucketMatchesManifest(_ fx: SpoolFixture, _ s3: S3Client, _ id: String, expected: Int? = nil,
                                     file: StaticString = #filePath, line: UInt = #line) throws {
        let m = try s3Manifest(s3, id)
        XCTAssertFalse(m.lines.isEmpty, "empty manifest", file: file, line: line)
        if let expected { XCTAssertEqual(m.lines.count, expected, file: file, line: line) }
        XCTAssertEqual(Set(m.lines.map { "\($0.kind) \($0.key)" }).count, m.lines.count, "each resource once", file: file, line: line)
        let objects = try s3Objects(s3)
        for l in m.lines where l.sha != "-" {
            XCTAssertEqual(objects[l.sha], l.bytes, "object of \(l.key) in the bucket with its size", file: file, line: line)
        }
        // Every body hashes to its name: `s3Objects` ran the independent reader's verify.
        let p = fx.progress(id)
        XCTAssertEqual(p["resourcesCompleted"], m.lines.count, file: file, line: line)
        XCTAssertEqual(p["resourcesExpected"], m.lines.count, file: file, line: line)
        XCTAssertEqual(p["bytesCompleted"], m.lines.reduce(0) { $0 + $1.bytes }, file: file, line: line)
    }

    /// `(z/x/y) -> SHA-256 of tile_data` of an MBTiles file, read with Python's sqlite3 module.
    func mbtilesTiles(_ path: String) throws -> [String: String] {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        p.arguments = ["-c", """
            import sqlite3, hashlib, sys
            for z, x, y, d in sqlite3.connect(sys.argv[1]).execute("select zoom_level, tile_column, tile_row, tile_data from tiles"):
                print(f"{z}/{x}/{y} {hashlib.sha256(d).hexdigest()}")
            """, path]
        let pipe = Pipe()
        p.standardOutput = pipe
        try p.run()
        let out = pipe.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 0)
        var tiles: [String: String] = [:]
        for l in String(decoding: out, as: UTF8.self).split(separator: "\n") {
            let f = l.split(separator: " ")
            tiles[String(f[0])] = String(f[1])
        }
        return tiles
    }

    /// The same region into the disk store and into S3: the bucket holds each object once with
    /// the right bytes, the manifest's segments concatenated have every resource, `verify` on the
    /// bucket is clean, and `export --format mbtiles` from S3 has the same tiles, byte for byte,
    /// as from disk. `status` and `gc` take the same options.
    func testDownloadIntoS3VerifyAndExportMatchTheDiskStore() throws {
        let rgw = try server()
        let mapdata = try MapData.require()
        let nginx = try NginxServer(root: mapdata)
        defer { nginx.stop() }
        let prefix = S3StoreTests.newPrefix()
        let s3 = S3Client(config: rgw.config(prefix: prefix))
        let disk = try SpoolFixture()
        defer { disk.stop() }
        let (fx, opts) = try s3Spool(rgw, prefix: prefix)
        defer { fx.stop() }
        try disk.start()
        try fx.start(opts)
        try disk.drop("monaco.json", monacoRequest(nginx))
        try fx.drop("monaco.json", monacoRequest(nginx))
        try disk.waitForState("monaco", "completed", timeout: 60)
        try fx.waitForState("monaco", "completed", timeout: 90)
        try assertBucketMatchesManifest(fx, s3, "monaco", expected: 419)
        XCTAssertFalse(FileManager.default.fileExists(atPath: fx.store), "nothing of the store on the local disk")
        // The same lines as the disk store's manifest (fetch times aside).
        let diskLines = Set(disk.manifest("monaco").map { "\($0.kind) \($0.key) \($0.sha) \($0.bytes)" })
        XCTAssertEqual(Set(try s3Manifest(s3, "monaco").lines.map { "\($0.kind) \($0.key) \($0.sha) \($0.bytes)" }), diskLines)
        XCTAssertEqual(Set(try s3Objects(s3).keys), Set(disk.objects()), "the same objects, each once")
        XCTAssertNotNil(try s3.get("regions/monaco/request.json"))
        XCTAssertNotNil(try s3.get("regions/monaco/plan.json"))

        let (vrc, vout) = try fx.cli(["verify", "--spool", fx.spool] + opts)
        XCTAssertEqual(vrc, 0, vout)
        XCTAssertTrue(vout.contains("verify: \(Set(disk.objects()).count) objects, 1 manifests, 419 lines checked; 0 faults"), vout)
        let (src, sout) = try fx.cli(["status", "monaco"] + opts + ["--spool", fx.spool])
        XCTAssertEqual(src, 0, sout)
        XCTAssertTrue(sout.contains("monaco  completed"), sout)

        let fromDisk = disk.root.appendingPathComponent("disk.mbtiles").path
        let fromS3 = fx.root.appendingPathComponent("s3.mbtiles").path
        let (e1, o1) = try disk.cli(["export", "monaco", "--format", "mbtiles", "--output", fromDisk, "--spool", disk.spool, "--store", disk.store])
        XCTAssertEqual(e1, 0, o1)
        let (e2, o2) = try fx.cli(["export", "monaco", "--format", "mbtiles", "--output", fromS3, "--spool", fx.spool] + opts)
        XCTAssertEqual(e2, 0, o2)
        let tiles = try mbtilesTiles(fromS3)
        XCTAssertEqual(tiles.count, 21)
        XCTAssertEqual(tiles, try mbtilesTiles(fromDisk))
        // A site export has nothing to hard-link from S3: it writes the bytes.
        let site = fx.root.appendingPathComponent("site").path
        let (e3, o3) = try fx.cli(["export", "monaco", "--format", "site", "--output", site, "--spool", fx.spool] + opts)
        XCTAssertEqual(e3, 0, o3)
        XCTAssertTrue(FileManager.default.fileExists(atPath: site + "/style.json"))

        let (grc, gout) = try fx.cli(["gc", "--spool", fx.spool] + opts)
        XCTAssertEqual(grc, 0, gout)
        XCTAssertTrue(gout.contains("removed 0 objects"), gout)
        // The credentials are in no file the daemon wrote, nor in its log.
        for path in [fx.spool + "/status/monaco.json", fx.spool + "/events.jsonl", fx.logPath] {
            XCTAssertFalse((try? String(contentsOfFile: path, encoding: .utf8))?.contains(CephRGW.secretKey) ?? true, path)
        }
    }

    /// kill -9 in the middle of a download into S3, then a restart: the region completes, each
    /// resource once in the manifest, what the status reported before the kill is in the
    /// bucket's manifest, and `verify` is clean.
    func testKill9MidDownloadThenRestartResumes() throws {
        let rgw = try server()
        let mapdata = try MapData.require()
        // Every response at 128 KiB/s per connection: the download takes several seconds.
        let nginx = try NginxServer(root: mapdata, extraLocations: "limit_rate 128k;")
        defer { nginx.stop() }
        let (s3, fx, opts) = try freshPrefixSpool(rgw)
        defer { fx.stop() }
        try fx.start(opts)
        try fx.drop("monaco.json", monacoRequest(nginx))
        var reported = 0
        for kill in 0..<2 {
            try waitUntil("kill \(kill): a few resources recorded", timeout: 60) {
                (fx.progress("monaco")["resourcesCompleted"] ?? 0) > max(40, reported) || fx.state("monaco") == "completed"
            }
            reported = fx.progress("monaco")["resourcesCompleted"] ?? 0
            print("kill \(kill) at \(reported) resources reported, state \(fx.state("monaco") ?? "-")")
            fx.kill9()
            XCTAssertGreaterThanOrEqual(try s3Manifest(s3, "monaco").lines.count, reported, "what the status reported is in the bucket")
            try fx.start(opts)
        }
        XCTAssertLessThan(reported, 419, "the kills came before the end")
        try fx.waitForState("monaco", "completed", timeout: 120)
        try assertBucketMatchesManifest(fx, s3, "monaco", expected: 419)
        let (vrc, vout) = try fx.cli(["verify", "--spool", fx.spool] + opts)
        XCTAssertEqual(vrc, 0, vout)
    }

    /// The lifecycle tests of LifecycleTests on S3, two regions at once against the fault server's
    /// slow path (30 ms a tile, 341 tiles each): pause (control file) gives `pausedUser` with
    /// the status counting what the bucket's manifest holds, resume completes without asking again
    /// what was recorded; cancel gives `cancelled` with what was stored kept in the bucket, resume
    /// completes it; delete removes the status files and every key under `regions/<id>/` in the
    /// bucket, and leaves the other region alone.
    func testPauseResumeCancelDeleteOnS3() throws {
        let rgw = try server()
        let faults = try FaultServer()
        defer { faults.stop() }
        let (s3, fx, opts) = try freshPrefixSpool(rgw)
        defer { fx.stop() }
        func slow(_ id: String) -> [String: Any] {
            ["id": id, "tiles": [faults.baseURL + "/slow/30/\(id)/{z}/{x}/{y}.png"], "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 4]
        }
        func hits(_ id: String) -> [String: Int] { faults.allHits().filter { $0.key.contains("/\(id)/") } }
        try fx.start(opts)
        try fx.drop("p.json", slow("p"))
        try fx.drop("c.json", slow("c"))

        var seen: [Int] = []
        try waitUntil("p: 60 tiles done", timeout: 60) {
            seen.append(fx.progress("p")["tilesCompleted"] ?? 0)
            return seen.last! >= 60
        }
        try fx.control("p", "pause")
        try waitUntil("c: 30 tiles done", timeout: 60) { (fx.progress("c")["tilesCompleted"] ?? 0) >= 30 }
        try fx.control("c", "cancel")
        try fx.waitForState("p", "pausedUser")
        try fx.waitForState("c", "cancelled")
        XCTAssertFalse(FileManager.default.fileExists(atPath: fx.spool + "/control/p.pause"), "control file removed")
        let atPause = fx.progress("p")
        XCTAssertLessThan(atPause["tilesCompleted"] ?? 0, 341, "paused before the end")
        XCTAssertEqual(try s3Manifest(s3, "p").lines.count, atPause["resourcesCompleted"], "the status counts what the bucket's manifest holds")
        let kept = try s3Manifest(s3, "c").lines
        XCTAssertGreaterThanOrEqual(kept.count, 30)
        XCTAssertLessThan(kept.count, 341, "cancelled before the end")
        let objects = try s3Objects(s3)
        for l in kept { XCTAssertNotNil(objects[l.sha], "\(l.key): what the cancelled region stored stays in the bucket") }

        try fx.resumeUntilCompleted("p", seen: &seen)
        XCTAssertEqual(seen, seen.sorted(), "progress never goes backwards")
        XCTAssertEqual(fx.eventStates("p"), ["queued", "downloading", "pausedUser", "queued", "downloading", "completed"])
        try assertBucketMatchesManifest(fx, s3, "p", expected: 341)
        for l in try s3Manifest(s3, "p").lines.prefix(20) {
            XCTAssertEqual(l.sha, sha256Hex(FaultServer.okBody(String(l.url.dropFirst(faults.baseURL.count)))), l.key)
        }
        // Nothing recorded was asked again: one request a tile, beyond those in flight at the pause.
        let h = hits("p")
        XCTAssertEqual(h.count, 341)
        XCTAssertLessThanOrEqual(h.values.filter { $0 > 1 }.count, 8)

        try fx.control("c", "resume")
        try fx.waitForState("c", "completed")
        XCTAssertEqual(Array(fx.eventStates("c").suffix(3)), ["queued", "downloading", "completed"])
        try assertBucketMatchesManifest(fx, s3, "c", expected: 341)
        XCTAssertTrue(Set(try s3Manifest(s3, "c").lines.map(\.key)).isSuperset(of: kept.map(\.key)))

        XCTAssertFalse(try s3.list(prefix: "regions/c/").isEmpty)
        try fx.control("c", "delete")
        try waitUntil("c deleted", timeout: 20) { fx.events("c").last?["state"] as? String == "deleted" }
        XCTAssertNil(fx.state("c"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: fx.spool + "/status/c.json"))
        XCTAssertEqual(try s3.list(prefix: "regions/c/").map(\.key), [], "no key of c left in the bucket")
        XCTAssertEqual(try s3.listFolders(prefix: "regions/"), ["p"])
        XCTAssertEqual(try s3Manifest(s3, "p").lines.count, 341, "p untouched")
        let (src, sout) = try fx.cli(["status", "--spool", fx.spool] + opts)
        XCTAssertEqual(src, 0, sout)
        XCTAssertTrue(sout.contains("p  completed") && !sout.contains("c  "), sout)
        let (vrc, vout) = try fx.cli(["verify", "--spool", fx.spool] + opts)
        XCTAssertEqual(vrc, 0, vout)
        XCTAssertTrue(vout.contains("1 manifests"), vout)
    }

    /// Refresh on S3 (docs/s3.md, Refresh): one tile of a completed region changes on the server;
    /// `refresh` asks again, the bucket's manifest then names the new object for that tile and the
    /// same objects for the 20 others, through one new compacted object numbered above every
    /// earlier key; nothing is left under `regions/<id>/refresh/`; `verify` is clean.
    func testRefreshOnS3SwapsTheNewManifestIn() throws {
        let rgw = try server()
        let mapdata = try MapData.require()
        let served = FileManager.default.temporaryDirectory.appendingPathComponent("tilespool-served-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: served) }
        try FileManager.default.createDirectory(at: served.appendingPathComponent("raster"), withIntermediateDirectories: true)
        try FileManager.default.copyItem(at: mapdata.appendingPathComponent("raster/osm_carto"), to: served.appendingPathComponent("raster/osm_carto"))
        let nginx = try NginxServer(root: served)
        defer { nginx.stop() }
        let (s3, fx, opts) = try freshPrefixSpool(rgw)
        defer { fx.stop() }
        try fx.start(opts)
        try fx.drop("carto.json", ["tiles": [nginx.baseURL + "/raster/osm_carto/{z}/{x}/{y}.png"], "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 2])
        try fx.waitForState("carto", "completed", timeout: 30)
        let folder = "regions/carto/manifest/"
        // 21 tiles are recorded in one commit (one segment, nothing to join) or, on a slow run, in
        // more, then joined: wait until the manifest is one piece either way.
        try waitUntil("the manifest is one piece", timeout: 20, poll: 0.1) {
            let keys = try s3.list(prefix: folder).map(\.key)
            return keys.count == 1 || keys.contains { $0.hasSuffix(".all.tsv") }
        }
        let before = try s3Manifest(s3, "carto").lines
        XCTAssertEqual(before.count, 21)
        let keysBefore = try s3.list(prefix: folder).map(\.key)

        let changed = "raster/osm_carto/2/1/1.png"
        let newBytes = try Data(contentsOf: mapdata.appendingPathComponent("raster/stamen_toner/2/1/1.png"))
        try newBytes.write(to: served.appendingPathComponent(changed))
        try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(100)], ofItemAtPath: served.appendingPathComponent(changed).path)
        let (code, text) = try fx.cli(["refresh", "carto", "--spool", fx.spool])
        XCTAssertEqual(code, 0, text)
        try waitUntil("refresh finished", timeout: 30) {
            if let d = fx.daemon, !d.isRunning { XCTFail("daemon exited: \(fx.log().suffix(2000))"); return true }
            // `<id>.state` is written after `<id>.json` (docs/contract.md): wait until both say the same.
            return fx.events("carto").contains { $0["refresh"] as? String == "finished" } && (fx.status("carto")?["refreshing"] as? Bool) == false
                && fx.state("carto") == fx.status("carto")?["state"] as? String
        }
        XCTAssertEqual(fx.state("carto"), "completed", fx.log().suffix(2000).description)
        let after = try s3Manifest(s3, "carto").lines
        XCTAssertEqual(after.count, 21)
        XCTAssertEqual(after.first { $0.key.hasSuffix("/2/1/1") }?.sha, sha256Hex(newBytes), "the changed tile's new object")
        XCTAssertEqual(Set(after.filter { !$0.key.hasSuffix("/2/1/1") }.map { "\($0.key) \($0.sha)" }),
                       Set(before.filter { !$0.key.hasSuffix("/2/1/1") }.map { "\($0.key) \($0.sha)" }), "the others unchanged")
        let p = fx.progress("carto")
        XCTAssertEqual(p["resourcesChanged"], 1)
        XCTAssertEqual(p["resourcesUnchanged"], 20)
        XCTAssertEqual(p["resourcesCompleted"], 21)
        let number = { (k: String) in Int(k.split(separator: "/").last!.prefix(10))! }
        let newKeys = Set(try s3.list(prefix: folder).map(\.key)).subtracting(keysBefore)
        XCTAssertEqual(newKeys.count, 1, "the swap is one new object")
        let swapped = try XCTUnwrap(newKeys.first)
        XCTAssertTrue(swapped.hasSuffix(".all.tsv"), swapped)
        XCTAssertGreaterThan(number(swapped), keysBefore.map(number).max()!, "numbered above every earlier key")
        XCTAssertEqual(try s3.list(prefix: "regions/carto/refresh/").map(\.key), [], "no refresh files left")
        try assertBucketMatchesManifest(fx, s3, "carto", expected: 21)
        let (vrc, vout) = try fx.cli(["verify", "--spool", fx.spool] + opts)
        XCTAssertEqual(vrc, 0, vout)
    }

    /// A refresh's swap cut short after its commit mark (as by a kill -9 there) is finished by the
    /// next start: the refreshed lines and plan replace the pack's, the refresh keys go, and a
    /// second call finds nothing to do. Before the mark, an abandoned refresh leaves the pack.
    func testInterruptedRefreshSwapIsFinishedAtTheNextStart() throws {
        let (s3, store, files) = try regionWithTwoSegments(try server(), "r")
        // Plans naming the two tiles (t/0/0/0, t/1/0/0): a mark is finished from only when the
        // refreshed manifest holds every resource of its plan. The refresh's differs in its URL.
        func plan(_ host: String) -> Data {
            RegionFiles.planData(ResourcePlan(resources: [], tileSets: [TileSet(source: "t", template: TileURLTemplate("http://\(host)/{z}/{x}/{y}.png"),
                                                                                rects: [TileRect(z: 0, minX: 0, minY: 0, maxX: 0, maxY: 0),
                                                                                        TileRect(z: 1, minX: 0, minY: 0, maxX: 0, maxY: 0)])]))
        }
        let oldPlan = plan("old"), newPlan = plan("new")
        XCTAssertEqual(try s3.put("regions/r/plan.json", oldPlan), .created)

        try files.beginRefresh(scope: .all)
        XCTAssertEqual(files.refreshUnderWay(), .all)
        try files.refreshStorage.appendToManifest([line("t/0/0/0", "b")])
        try files.refreshStorage.appendToManifest([line("t/1/0/0", "c")])
        files.abandonRefresh()
        XCTAssertNil(files.refreshUnderWay())
        XCTAssertEqual(keys(store.region("r")), ["t/0/0/0=a", "t/1/0/0=a"], "an abandoned refresh leaves the pack")
        XCTAssertEqual(try s3.list(prefix: "regions/r/refresh/").map(\.key), [])

        try files.beginRefresh(scope: .olderThan(60))
        try files.refreshStorage.appendToManifest([line("t/0/0/0", "b")])
        try files.refreshStorage.appendToManifest([line("t/1/0/0", "c")])
        XCTAssertEqual(try s3.put("regions/r/refresh/plan.json", newPlan), .created)
        // The swap stops right after its commit mark (the number above the two segments).
        XCTAssertEqual(try s3.put("regions/r/refresh/commit.json", Data(#"{"manifestNumber":2}"#.utf8)), .created)
        XCTAssertEqual(keys(store.region("r")), ["t/0/0/0=a", "t/1/0/0=a"], "not swapped yet")

        let restarted = store.region("r")
        XCTAssertTrue(try restarted.finishInterruptedRefreshCommit())
        XCTAssertEqual(keys(store.region("r")), ["t/0/0/0=b", "t/1/0/0=c"], "the refreshed lines")
        XCTAssertEqual(try s3.get("regions/r/plan.json"), newPlan, "the refreshed plan")
        XCTAssertEqual(try s3.list(prefix: "regions/r/refresh/").map(\.key), [], "the refresh keys are gone")
        XCTAssertEqual(try s3.list(prefix: "regions/r/manifest/").map(\.key).filter { $0.hasSuffix(".all.tsv") }, ["regions/r/manifest/0000000002.all.tsv"])
        XCTAssertFalse(try store.region("r").finishInterruptedRefreshCommit(), "nothing left to finish")
        // A mark whose refreshed segments are gone (and no new manifest) is dropped, never swapped
        // in as an empty manifest.
        XCTAssertEqual(try s3.put("regions/r/refresh/commit.json", Data(#"{"manifestNumber":3}"#.utf8)), .created)
        XCTAssertFalse(try store.region("r").finishInterruptedRefreshCommit())
        XCTAssertNil(try s3.get("regions/r/refresh/commit.json"))
        XCTAssertNil(try s3.get("regions/r/manifest/0000000003.all.tsv"))
        XCTAssertEqual(keys(store.region("r")), ["t/0/0/0=b", "t/1/0/0=c"])
        // A mark whose refreshed segments miss a tile of the plan (attack round 15: planted) is
        // dropped too: the pack stays, the refresh is still under way.
        let partial = store.region("r")
        try partial.beginRefresh(scope: .all)
        try partial.refreshStorage.appendToManifest([line("t/0/0/0", "f")])
        XCTAssertEqual(try s3.put("regions/r/refresh/commit.json", Data(#"{"manifestNumber":3}"#.utf8)), .created)
        XCTAssertFalse(try store.region("r").finishInterruptedRefreshCommit())
        XCTAssertNil(try s3.get("regions/r/refresh/commit.json"))
        XCTAssertEqual(keys(store.region("r")), ["t/0/0/0=b", "t/1/0/0=c"])
        XCTAssertNotNil(store.region("r").refreshUnderWay())
        // abandonRefresh with a mark and its (whole) segments there finishes the swap instead of
        // dropping it.
        let again = store.region("r")
        try again.beginRefresh(scope: .all)
        try again.refreshStorage.appendToManifest([line("t/0/0/0", "e"), line("t/1/0/0", "e")])
        XCTAssertEqual(try s3.put("regions/r/refresh/commit.json", Data(#"{"manifestNumber":3}"#.utf8)), .created)
        again.abandonRefresh()
        XCTAssertEqual(keys(store.region("r")), ["t/0/0/0=e", "t/1/0/0=e"])
        XCTAssertEqual(try s3.list(prefix: "regions/r/refresh/").map(\.key), [])
        // The next segment follows the swapped manifest.
        try store.region("r").appendToManifest([line("t/2/0/0", "d")])
        XCTAssertEqual(keys(store.region("r")), ["t/0/0/0=e", "t/1/0/0=e", "t/2/0/0=d"])
    }

    /// Rewriting a manifest (a repair, new credentials for a style) is one PUT of a compacted
    /// object above every key: the old segments stay until gc, a reader sees the old lines or the
    /// new ones. gc groups keys by region exactly: for a region named `manifest`, a refresh's
    /// segments (`regions/manifest/refresh/manifest/...`) are not taken for covered segments.
    func testManifestRewriteIsOnePutAndGCTellsARefreshFromThePack() throws {
        let (s3, store, files) = try regionWithTwoSegments(try server(), "manifest")
        try files.replaceManifest([line("t/1/0/0", "b")])
        let folder = "regions/manifest/manifest/"
        XCTAssertEqual(try s3.list(prefix: folder).map(\.key).sorted(),
                       [folder + "0000000000.tsv", folder + "0000000001.tsv", folder + "0000000002.all.tsv"], "nothing deleted, one PUT")
        XCTAssertEqual(keys(store.region("manifest")), ["t/1/0/0=b"])
        try files.appendToManifest([line("t/2/0/0", "c")])
        XCTAssertEqual(keys(store.region("manifest")), ["t/1/0/0=b", "t/2/0/0=c"])

        try files.beginRefresh(scope: .all)
        try files.refreshStorage.appendToManifest([line("t/1/0/0", "d")])
        try files.refreshStorage.appendToManifest([line("t/2/0/0", "d")])
        try waitUntil("the rewrite is 2 s old by its Last-Modified", timeout: 10, poll: 0.2) {
            let o = try s3.list(prefix: folder + "0000000002.all.tsv").first
            return Date().timeIntervalSince1970 - (o?.lastModified ?? .infinity) >= 2.5
        }
        let report = try store.collectGarbage(grace: 2) { [] }
        XCTAssertEqual(report.segmentsRemoved, 2, "the two segments the rewrite covers")
        XCTAssertEqual(try s3.list(prefix: folder).map(\.key).sorted(), [folder + "0000000002.all.tsv", folder + "0000000003.tsv"])
        XCTAssertEqual(try s3.list(prefix: "regions/manifest/refresh/manifest/").count, 2, "the refresh's segments stay")
        try files.commitRefresh()
        XCTAssertEqual(keys(store.region("manifest")), ["t/1/0/0=d", "t/2/0/0=d"])
        XCTAssertEqual(try s3.list(prefix: "regions/manifest/refresh/").map(\.key), [])
    }

    /// A tiles region whose token expired (osm_carto's z3 answers 403 to key=OLD) fails; the same
    /// request with key=NEW keeps the manifest in the bucket: nginx sees exactly the tiles that
    /// were missing, each with the new key, and the bucket then holds the whole pack.
    func testRotatedTokenKeepsTheManifestInTheBucket() throws {
        let rgw = try server()
        let nginx = try NginxServer(root: try MapData.require(), extraLocations: """
            location ~ ^/raster/osm_carto/3/ { if ($arg_key = OLD) { return 403; } }
            """)
        defer { nginx.stop() }
        let (s3, fx, opts) = try freshPrefixSpool(rgw)
        defer { fx.stop() }
        func carto(_ key: String) -> [String: Any] {
            ["tiles": [nginx.baseURL + "/raster/osm_carto/{z}/{x}/{y}.png?key=" + key], "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 3]
        }
        try fx.start(opts)
        try fx.drop("carto.json", carto("OLD"))
        try fx.waitForState("carto", "failed", timeout: 30)
        XCTAssertEqual(fx.errorCode("carto"), "httpError")
        let kept = try s3Manifest(s3, "carto").lines
        XCTAssertTrue((1...21).contains(kept.count), "tiles of z0-2 were recorded before z3 failed: \(kept.count)")
        XCTAssertTrue(kept.allSatisfy { !$0.key.hasPrefix("tiles0/3/") })

        try fx.drop("carto.json", carto("NEW"))
        try fx.waitForState("carto", "completed", timeout: 30)
        func withNewKey() -> [NginxServer.AccessEntry] { nginx.accessLog().filter { $0.uri.hasSuffix("?key=NEW") } }
        try waitUntil("nginx logged the rest", timeout: 10) { withNewKey().count >= 85 - kept.count }
        let asked = withNewKey()
        XCTAssertEqual(asked.count, 85 - kept.count, "only the missing tiles")
        let askedKeys = Set(asked.map { "tiles0/" + $0.path.dropFirst("/raster/osm_carto/".count).replacingOccurrences(of: ".png", with: "") })
        XCTAssertTrue(askedKeys.isDisjoint(with: kept.map(\.key)), "nothing recorded was asked again")
        try assertBucketMatchesManifest(fx, s3, "carto", expected: 85)
        let (vrc, vout) = try fx.cli(["verify", "--spool", fx.spool] + opts)
        XCTAssertEqual(vrc, 0, vout)
    }

    /// gc on a bucket: an object no manifest references is kept while younger than the grace
    /// period (its Last-Modified), and removed after it; every referenced object stays. The
    /// completed region's manifest segments (a commit every 50 ms: many) are joined into one
    /// compacted object, byte for byte; gc removes the segments it covers only once it is older
    /// than the grace period, and the manifest reads the same before and after.
    func testGCRemovesUnreferencedObjectsAndCompactedSegmentsOnlyAfterTheGracePeriod() throws {
        let rgw = try server()
        let mapdata = try MapData.require()
        let nginx = try NginxServer(root: mapdata)
        defer { nginx.stop() }
        let (s3, fx, opts) = try freshPrefixSpool(rgw)
        defer { fx.stop() }
        try fx.start(opts + ["--sync-interval", "0.05"])
        try fx.drop("monaco.json", monacoRequest(nginx))
        try fx.waitForState("monaco", "completed", timeout: 90)
        let folder = "regions/monaco/manifest/"
        try waitUntil("the manifest is compacted", timeout: 20, poll: 0.1) {
            try s3.list(prefix: folder).contains { $0.key.hasSuffix(".all.tsv") }
        }
        let keys = try s3.list(prefix: folder).map(\.key).sorted()
        let segments = keys.filter { !$0.hasSuffix(".all.tsv") }
        let compacted = try XCTUnwrap(keys.first { $0.hasSuffix(".all.tsv") })
        XCTAssertGreaterThan(segments.count, 2, "a commit every 50 ms writes many segments")
        XCTAssertEqual(keys.filter { $0.hasSuffix(".all.tsv") }.count, 1)
        XCTAssertEqual(compacted, segments.last!.dropLast(4) + ".all.tsv", "named after the last segment it covers")
        var joined = Data()
        for k in segments { joined.append(try XCTUnwrap(try s3.get(k))) }
        XCTAssertEqual(try s3.get(compacted), joined, "the segments' bytes, in order")
        try assertBucketMatchesManifest(fx, s3, "monaco", expected: 419)
        // A compaction lost (as to a kill -9 right after completion) is made again at the next start.
        XCTAssertEqual(fx.stop(), 0)
        try s3.delete(compacted)
        try fx.start(opts)
        try waitUntil("the manifest is compacted again", timeout: 20, poll: 0.1) { try s3.get(compacted) != nil }
        XCTAssertEqual(try s3.get(compacted), joined)
        XCTAssertEqual(try s3.list(prefix: folder).map(\.key).sorted(), keys)
        let referenced = try s3Objects(s3)
        let orphan = Data("an object no region references \(UUID())".utf8)
        let orphanSHA = SHA256.hex(orphan)
        XCTAssertEqual(try s3.put("objects/\(orphanSHA.prefix(2))/\(orphanSHA)", orphan, ifNoneMatch: true), .created)

        let (rc1, out1) = try fx.cli(["gc", "--grace", "3600", "--spool", fx.spool] + opts)
        XCTAssertEqual(rc1, 0, out1)
        XCTAssertTrue(out1.contains("removed 0 objects"), out1)
        XCTAssertFalse(out1.contains("manifest segments"), out1)
        XCTAssertNotNil(try s3Objects(s3)[orphanSHA], "younger than the grace period: kept")
        XCTAssertEqual(try s3.list(prefix: folder).map(\.key).sorted(), keys, "segments kept within the grace period")

        try waitUntil("the orphan and the compacted manifest are 2 s old by their Last-Modified", timeout: 10, poll: 0.2) {
            let o = try s3.list(prefix: "objects/\(orphanSHA.prefix(2))/\(orphanSHA)").first
            return Date().timeIntervalSince1970 - (o?.lastModified ?? .infinity) >= 2.5
        }
        XCTAssertEqual(fx.stop(), 0) // a grace period that short only with the daemon stopped
        let (rc2, out2) = try fx.cli(["gc", "--grace", "2", "--spool", fx.spool] + opts)
        XCTAssertEqual(rc2, 0, out2)
        // The orphan (a loose object) went; small packs were joined meanwhile (their overhead freed too).
        XCTAssertTrue(out2.contains("removed 1 objects, freed "), out2)
        XCTAssertTrue(out2.contains("removed \(segments.count) compacted manifest segments"), out2)
        XCTAssertEqual(try s3Objects(s3), referenced, "only the orphan went")
        XCTAssertEqual(try s3.list(prefix: folder).map(\.key), [compacted], "only the compacted manifest is left")
        try assertBucketMatchesManifest(fx, s3, "monaco", expected: 419)
        let (vrc, vout) = try fx.cli(["verify", "--spool", fx.spool] + opts)
        XCTAssertEqual(vrc, 0, vout)
        XCTAssertTrue(vout.contains("1 manifests, 419 lines checked; 0 faults"), vout)
        let (src, sout) = try fx.cli(["status", "monaco", "--spool", fx.spool] + opts)
        XCTAssertEqual(src, 0, sout)
        XCTAssertTrue(sout.contains("resources 419/419"), sout)
    }

    /// Two daemons with their own spools on one bucket and prefix, downloading overlapping
    /// regions at the same time: each object is stored once (the bucket holds exactly the union
    /// of both manifests' objects), both manifests are complete, and `verify` is clean from
    /// either spool.
    func testTwoDaemonsOnOneBucketWithOverlappingRegions() throws {
        let (nginx, s3, a, b, opts) = try twoSpoolsOnOnePrefix(try server())
        defer { a.stop(); b.stop(); nginx.stop() }
        try a.start(opts)
        try b.start(opts)
        // The same glyphs, sprites and style, and overlapping tiles (b is a shifted over a).
        try a.drop("west.json", monacoRequest(nginx))
        try b.drop("east.json", monacoRequest(nginx, bounds: [7.42, 43.72335, 7.46, 43.75169]))
        try a.waitForState("west", "completed", timeout: 120)
        try b.waitForState("east", "completed", timeout: 120)
        let west = try s3Manifest(s3, "west").lines, east = try s3Manifest(s3, "east").lines
        try assertBucketMatchesManifest(a, s3, "west", expected: 419)
        try assertBucketMatchesManifest(b, s3, "east")
        let shared = Set(west.map(\.sha)).intersection(east.map(\.sha)).subtracting(["-"])
        XCTAssertGreaterThan(shared.count, 390, "glyphs, sprites, style and tiles in common")
        let union = Set(west.map(\.sha)).union(east.map(\.sha)).subtracting(["-"])
        XCTAssertEqual(Set(try s3Objects(s3).keys), union, "every object, none left over (two daemons may each pack one: gc keeps one)")
        XCTAssertNil(a.state("east"), "a daemon does not take another spool's region")
        XCTAssertNil(b.state("west"))
        for fx in [a, b] {
            let (vrc, vout) = try fx.cli(["verify", "--spool", fx.spool] + opts)
            XCTAssertEqual(vrc, 0, vout)
            XCTAssertTrue(vout.contains("2 manifests"), vout)
        }
        // The other daemon's region id dropped on b: refused, a's region untouched.
        try b.drop("west.json", monacoRequest(nginx))
        try waitUntil("b rejects west.json", timeout: 20) { FileManager.default.fileExists(atPath: b.spool + "/rejected/west.json.error") }
        let why = try String(contentsOfFile: b.spool + "/rejected/west.json.error", encoding: .utf8)
        XCTAssertTrue(why.contains("duplicateId") && why.contains("another daemon"), why)
        XCTAssertNil(b.state("west"))
        XCTAssertEqual(try s3Manifest(s3, "west").lines.count, 419)
    }

    /// A refused request's status (it names no request) does not make a spool the owner of the
    /// region of that id another daemon holds in the bucket (attack round 53): the spool's next
    /// start does not take that region, a valid request of the id is refused as another
    /// daemon's, and `delete` (through the daemon) and `prune` (without one) remove only this
    /// spool's status: the other daemon's region stays whole in the bucket.
    func testARefusedRequestsStatusNeverTakesAnotherDaemonsRegion() throws {
        let rgw = try server()
        let faults = try FaultServer()
        defer { faults.stop() }
        let (s3, a, b, opts) = try twoSpools(rgw)
        defer { a.stop(); b.stop() }
        func request(_ maxZoom: Int) -> [String: Any] {
            ["id": "y", "tiles": [faults.baseURL + "/ok/y/{z}/{x}/{y}.png"], "bounds": [-10, -10, 10, 10], "minZoom": 0, "maxZoom": maxZoom]
        }
        let refused: [String: Any] = ["id": "y", "tiles": ["ftp://127.0.0.1/{z}/{x}/{y}.png"], "bounds": [-10, -10, 10, 10], "minZoom": 0, "maxZoom": 1]
        try a.start(opts)
        try b.start(opts)
        try b.drop("y.json", refused)
        try b.waitForState("y", "failed")
        XCTAssertEqual(b.errorCode("y"), "invalidRequest")
        for f in ["y.json", "y.json.error"] { try FileManager.default.removeItem(atPath: b.spool + "/rejected/" + f) }
        try a.drop("y.json", request(2))
        try a.waitForState("y", "completed")
        let before = try s3Manifest(s3, "y").lines
        let requestBefore = try XCTUnwrap(try s3.get("regions/y/request.json"))
        XCTAssertEqual(before.count, 1 + 4 + 4, "z0-2 over the box")
        func assertAsItWas(_ when: String) throws {
            XCTAssertEqual(try s3Manifest(s3, "y").lines.map(\.key), before.map(\.key), when)
            XCTAssertEqual(try s3.get("regions/y/request.json"), requestBefore, when)
            XCTAssertEqual(a.state("y"), "completed", when)
        }

        // b's next start does not take y; a valid request of that id is another daemon's.
        XCTAssertEqual(b.stop(), 0)
        try b.start(opts)
        try b.drop("y.json", request(3))
        try waitUntil("b refuses y.json", timeout: 30) { b.entryExists(b.spool + "/rejected/y.json.error") }
        let why = try String(contentsOfFile: b.spool + "/rejected/y.json.error", encoding: .utf8)
        XCTAssertTrue(why.hasPrefix("duplicateId") && why.contains("another daemon"), why)
        XCTAssertEqual(b.state("y"), "failed")
        try assertAsItWas("after b's restart and request")

        // delete through b's daemon: b's status goes, the bucket's region stays.
        try b.control("y", "delete")
        try waitUntil("b deletes its status of y", timeout: 30) { b.state("y") == nil }
        try assertAsItWas("after delete on b")

        // prune on b without a daemon: the same.
        try b.drop("y.json", refused)
        try b.waitForState("y", "failed")
        XCTAssertEqual(b.stop(), 0)
        let (prc, pout) = try b.cli(["prune", "--state", "failed", "--spool", b.spool] + opts)
        XCTAssertEqual(prc, 0, pout)
        XCTAssertTrue(pout.contains("deleted y"), pout)
        XCTAssertNil(b.state("y"))
        try assertAsItWas("after prune on b")
        let (vrc, vout) = try a.cli(["verify", "--spool", a.spool] + opts)
        XCTAssertEqual(vrc, 0, vout)
    }

    /// `verify --repair` from one spool of a shared bucket rewrites only the manifests of its own
    /// regions: another spool's region that names lost objects is named and left for that
    /// spool's repair, which marks its status (attack round 56: a repair from one spool shortened
    /// the other's manifest under a status still saying completed).
    func testARepairFromOneSpoolLeavesAnotherSpoolsRegionToItsOwnRepair() throws {
        let rgw = try server()
        let faults = try FaultServer()
        defer { faults.stop() }
        let (s3, a, b, opts) = try twoSpools(rgw)
        defer { a.stop(); b.stop() }
        func request(_ id: String) -> [String: Any] {
            ["id": id, "tiles": [faults.baseURL + "/ok/\(id)/{z}/{x}/{y}.png"], "bounds": [-10, -10, 10, 10], "minZoom": 0, "maxZoom": 2]
        }
        try a.start(opts)
        try b.start(opts)
        try a.drop("ra.json", request("ra"))
        try b.drop("rb.json", request("rb"))
        try a.waitForState("ra", "completed")
        try b.waitForState("rb", "completed")
        XCTAssertEqual(a.stop(), 0)
        XCTAssertEqual(b.stop(), 0)
        // Every pack lost: both regions name missing objects.
        for p in try s3.list(prefix: "packs/") { try s3.delete(p.key) }
        var (rc, out) = try a.cli(["verify", "--repair", "--spool", a.spool] + opts)
        XCTAssertTrue(out.contains("regions marked for re-download: ra\n"), out)
        XCTAssertTrue(out.contains("another spool's region, left for its repair: rb: 9 manifest lines name damaged or missing objects"), out)
        XCTAssertEqual(try s3Manifest(s3, "rb").lines.count, 9, "b's manifest as it was")
        XCTAssertEqual(b.state("rb"), "completed")
        XCTAssertEqual(a.state("ra"), "failed")
        (rc, out) = try b.cli(["verify", "--repair", "--spool", b.spool] + opts)
        XCTAssertTrue(out.contains("regions marked for re-download: rb\n"), out)
        XCTAssertEqual(b.state("rb"), "failed")
        XCTAssertEqual(b.errorCode("rb"), "storeDamaged")
        (rc, out) = try b.cli(["verify", "--spool", b.spool] + opts)
        XCTAssertEqual(rc, 0, out)
    }

    /// Two daemons on one bucket, one after the other: daemon b has read the store's index (its
    /// own first region), then daemon a stores Monaco; a region b starts afterwards over the same
    /// place, one zoom level less (so that its pack is not a's very pack, which would be saved
    /// under the same name), stores none of a's objects again (b takes in the index files a
    /// saved when the region starts): every object of the bucket is in exactly one pack record.
    func testARegionStartedLaterStoresNoObjectAnotherDaemonHolds() throws {
        let (nginx, s3, a, b, opts) = try twoSpoolsOnOnePrefix(try server())
        defer { a.stop(); b.stop(); nginx.stop() }
        try a.start(opts)
        try b.start(opts)
        // b reads the index with a small region of its own (the toner tiles: nothing in common).
        try b.drop("first.json", ["id": "first", "tiles": [nginx.baseURL + "/raster/stamen_toner/{z}/{x}/{y}.png"],
                                   "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 1])
        try b.waitForState("first", "completed", timeout: 60)
        try a.drop("west.json", monacoRequest(nginx))
        try a.waitForState("west", "completed", timeout: 120)
        var lower = monacoRequest(nginx)
        lower["maxZoom"] = 13
        try b.drop("again.json", lower)
        try b.waitForState("again", "completed", timeout: 120)
        let west = try s3Manifest(s3, "west").lines, again = try s3Manifest(s3, "again").lines
        XCTAssertTrue(Set(again.map(\.sha)).isSubset(of: west.map(\.sha)), "the same place, less deep: objects a holds")
        XCTAssertLessThan(again.count, west.count)
        let dir = try mirror(s3)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let (rc, out) = try runTool("/usr/bin/python3", [SpoolFixture.storeReader, "list", dir])
        XCTAssertEqual(rc, 0, out)
        var records: [String: Int] = [:]
        for l in out.split(separator: "\n") { records[String(l.split(separator: " ")[0]), default: 0] += 1 }
        XCTAssertEqual(records.filter { $0.value > 1 }.count, 0, "objects stored twice: \(records.filter { $0.value > 1 }.count) of \(records.count)")
        XCTAssertEqual(Set(records.keys), Set((west + again + (try s3Manifest(s3, "first").lines)).map(\.sha)).subtracting(["-"]))
        try assertBucketMatchesManifest(b, s3, "again")
    }

    /// Attack round 20 (high): `gc --grace 0` from a spool with no daemon, on a bucket another
    /// spool's daemon writes, removed the young pack that daemon was re-using; its region ended
    /// `completed` with 189 objects gone. A daemon on a bucket now keeps a lease there
    /// (`locks/<id>.lock`), and a short-grace gc or a repair from any spool refuses while one is
    /// fresh; the default grace runs; once the daemon stops (its lease removed) --grace 0 runs.
    func testAShortGraceGCIsRefusedWhileADaemonOnAnotherSpoolWritesTheBucket() throws {
        let (nginx, s3, a, g, opts) = try twoSpoolsOnOnePrefix(try server()) // no daemon runs on g
        defer { a.stop(); g.stop(); nginx.stop() }
        try a.start(opts)
        try a.drop("west.json", monacoRequest(nginx))
        try a.waitForState("west", "completed", timeout: 120)
        let leases = try s3.list(prefix: "locks/").map(\.key)
        XCTAssertEqual(leases.count, 1, "the running daemon's lease: \(leases)")
        for args in [["gc", "--grace", "0"], ["gc", "--grace", "60"], ["verify", "--repair"]] {
            let (rc, out) = try g.cli(args + ["--spool", g.spool] + opts)
            XCTAssertEqual(rc, 1, "\(args): \(out)")
            XCTAssertTrue(out.contains("needs every daemon that writes this store stopped") && out.contains(leases[0]), out)
        }
        let objects = try s3Objects(s3)
        let (rc, out) = try g.cli(["gc", "--spool", g.spool] + opts)
        XCTAssertEqual(rc, 0, "the default grace runs beside daemons: \(out)")
        XCTAssertEqual(try s3Objects(s3), objects, "young objects kept")
        XCTAssertEqual(a.stop(), 0)
        XCTAssertEqual(try s3.list(prefix: "locks/").count, 0, "a daemon that stops removes its lease")
        let (rc2, out2) = try g.cli(["gc", "--grace", "0", "--spool", g.spool] + opts)
        XCTAssertEqual(rc2, 0, out2)
        XCTAssertTrue(out2.contains("gc: removed 0 objects"), "west is referenced: \(out2)")
        XCTAssertEqual(try s3.list(prefix: "locks/").count, 0, "gc removes its mark")

        // Attack round 21: a daemon started while a short-grace gc ran lost every object. A gc
        // under way (its mark, as gc saves it before looking for leases): a second short-grace
        // gc refuses, and a daemon starting meanwhile starts no region until the mark is gone.
        let mark = "locks/gc-" + String(repeating: "7", count: 32) + ".lock"
        _ = try s3.put(mark, Data("tilespool gc --grace below 3600 s\n".utf8))
        let (rc3, out3) = try g.cli(["gc", "--grace", "0", "--spool", g.spool] + opts)
        XCTAssertEqual(rc3, 1, out3)
        XCTAssertTrue(out3.contains(mark) && out3.contains("no other gc or repair running"), out3)
        try a.start(opts)
        try a.drop("east.json", monacoRequest(nginx, bounds: [7.42, 43.72335, 7.46, 43.75169]))
        try waitUntil("the daemon says it waits for the gc", timeout: 20) { (try? String(contentsOfFile: a.logPath, encoding: .utf8))?.contains("no region starts until it ends") == true }
        try a.waitForState("east", "queued", timeout: 20)
        // Absence is watched for a bounded time: 3 s of loop turns (each one schedules).
        let watchUntil = Date().addingTimeInterval(3)
        while Date() < watchUntil && a.eventStates("east") == ["queued"] { usleep(50_000) }
        XCTAssertEqual(a.eventStates("east"), ["queued"], "no region starts while a gc runs")
        try s3.delete(mark)
        try a.waitForState("east", "completed", timeout: 120)
    }

    /// Attack round 21 (critical): a daemon that could not save its lease at start (the bucket
    /// down) downloaded without one, unseen by a short-grace gc elsewhere. A region accepted
    /// before the lease is saved (tried every 5 s) now waits for it, then completes.
    func testNoRegionStartsBeforeTheDaemonsLeaseIsSaved() throws {
        let nginx = try NginxServer(root: try MapData.require())
        defer { nginx.stop() }
        let (proxy, s3, fx, opts) = try spoolBehindForwarder(try server())
        defer { fx.stop(); proxy.stop() }
        proxy.stop()
        try fx.start(opts)
        try waitUntil("the daemon says it has no lease", timeout: 20) { (try? String(contentsOfFile: fx.logPath, encoding: .utf8))?.contains("no region starts until it is saved") == true }
        // The bucket answers again and a request comes at once: the region may download only
        // once the lease is in the bucket (states read first, then the bucket: a download seen
        // with no lease listed after it is a download without one).
        try proxy.start()
        try fx.drop("monaco.json", monacoRequest(nginx))
        var leased = false
        let deadline = Date().addingTimeInterval(30)
        while !leased && Date() < deadline {
            let states = fx.eventStates("monaco")
            leased = try !s3.list(prefix: "locks/").filter { $0.key.hasPrefix("locks/daemon-") }.isEmpty
            XCTAssertFalse(!leased && states.contains("downloading"), "a region downloaded before the daemon's lease was saved")
            if !leased { usleep(20_000) }
        }
        XCTAssertTrue(leased, "the lease is saved once the bucket answers")
        try fx.waitForState("monaco", "completed", timeout: 120)
        XCTAssertEqual(try s3.list(prefix: "locks/").filter { $0.key.hasPrefix("locks/daemon-") }.count, 1, "the lease, saved once the bucket answered")
    }

    /// A wrong secret: the region fails at once with the server's reason in its status (not a
    /// hang, not a retry loop), and the secret is nowhere in the spool or the log.
    func testWrongSecretIsAClearErrorInTheStatus() throws {
        let rgw = try server()
        let mapdata = try MapData.require()
        let nginx = try NginxServer(root: mapdata)
        defer { nginx.stop() }
        let (fx, opts) = try s3Spool(rgw, prefix: S3StoreTests.newPrefix(), secret: "WRONG-SECRET-VALUE")
        defer { fx.stop() }
        try fx.start(opts)
        let t0 = Date()
        try fx.drop("monaco.json", monacoRequest(nginx))
        try fx.waitForState("monaco", "failed", timeout: 20)
        XCTAssertLessThan(Date().timeIntervalSince(t0), 15)
        XCTAssertEqual(fx.errorCode("monaco"), "storageError")
        XCTAssertTrue(fx.errorMessage("monaco")?.contains("403 SignatureDoesNotMatch") ?? false, fx.errorMessage("monaco") ?? "no error")
        XCTAssertEqual(fx.eventStates("monaco"), ["failed"], "no retry loop")
        for path in [fx.spool + "/status/monaco.json", fx.spool + "/events.jsonl", fx.logPath] {
            XCTAssertFalse((try? String(contentsOfFile: path, encoding: .utf8))?.contains("WRONG-SECRET-VALUE") ?? true, path)
        }
        let (vrc, vout) = try fx.cli(["verify", "--spool", fx.spool] + opts)
        XCTAssertEqual(vrc, 1, vout)
        XCTAssertTrue(vout.contains("SignatureDoesNotMatch"), vout)
    }

    /// A body damaged on its way to the server (one byte range replaced by a forwarder) is
    /// refused by the server against the SHA-256 the upload declared, and the upload is retried:
    /// `sync` succeeds and the bucket holds the right bytes.
    func testBodyCorruptedInFlightIsRefusedAndRetried() throws {
        let rgw = try server()
        let marker = "TILESPOOL-DAMAGE-ME"
        let proxy = try TCPForwarder(target: rgw.port, corruptOnce: marker)
        defer { proxy.stop() }
        let prefix = S3StoreTests.newPrefix()
        var config = rgw.config(prefix: prefix)
        config.endpoint = "http://127.0.0.1:\(proxy.port)"
        let store = try PackedStore(backend: S3Backend(config: config), scratch: S3StoreTests.scratch())
        let body = Data("a tile body with \(marker) in it, \(UUID())".utf8)
        let sha = try store.put(body).sha256
        try store.sync()
        XCTAssertEqual(proxy.corruptions, 1, "the first attempt (the pack holding it) was damaged")
        XCTAssertEqual(try s3Objects(S3Client(config: rgw.config(prefix: prefix)))[sha], body.count)
        XCTAssertTrue(store.isIntact(sha))
    }

    /// A request accepted while the endpoint does not answer is refused (`storageError`, moved
    /// to rejected/), and its status names no request, as a refused request's: once the endpoint
    /// is back, the id is this spool's only if a new request takes it (docs/s3.md, Failures).
    func testARequestRefusedWhileTheEndpointIsDownLeavesAStatusThatNamesNoRequest() throws {
        let faults = try FaultServer()
        defer { faults.stop() }
        let (proxy, s3, fx, opts) = try spoolBehindForwarder(try server())
        defer { fx.stop(); proxy.stop() }
        try fx.start(opts)
        proxy.stop()
        let request: [String: Any] = ["id": "d", "tiles": [faults.baseURL + "/ok/d/{z}/{x}/{y}.png"], "bounds": [-10, -10, 10, 10], "minZoom": 0, "maxZoom": 1]
        try fx.drop("d.json", request)
        try waitUntil("d.json is refused", timeout: 60) { fx.entryExists(fx.spool + "/rejected/d.json.error") }
        XCTAssertEqual(fx.state("d"), "failed")
        XCTAssertEqual(fx.errorCode("d"), "storageError")
        let named = fx.status("d")?["request"]
        XCTAssertTrue(named == nil || named is NSNull, "\(String(describing: named))")
        try proxy.start()
        try fx.drop("d.json", request)
        try fx.waitForState("d", "completed")
        XCTAssertEqual(try s3Manifest(s3, "d").lines.count, 5)
    }

    /// The endpoint goes away in the middle of a download (a TCP forwarder in front of RGW is
    /// stopped): the region becomes pausedNetwork; once the forwarder is back it completes, and
    /// `verify` is clean.
    func testUnreachableEndpointPausesAndRecovers() throws {
        let mapdata = try MapData.require()
        let nginx = try NginxServer(root: mapdata, extraLocations: "limit_rate 128k;")
        defer { nginx.stop() }
        let (proxy, s3, fx, opts) = try spoolBehindForwarder(try server())
        defer { fx.stop(); proxy.stop() }
        try fx.start(opts + ["--max-probe-interval", "1"])
        try fx.drop("monaco.json", monacoRequest(nginx))
        try waitUntil("some resources recorded", timeout: 60) { (fx.progress("monaco")["resourcesCompleted"] ?? 0) >= 40 }
        proxy.stop()
        XCTAssertEqual(fx.state("monaco"), "downloading", "the endpoint went away before the end")
        try fx.waitForState("monaco", "pausedNetwork", timeout: 30)
        XCTAssertEqual(fx.errorCode("monaco"), "networkError")
        XCTAssertTrue(fx.errorMessage("monaco")?.contains("does not answer") ?? false, fx.errorMessage("monaco") ?? "")
        try proxy.start()
        try fx.waitForState("monaco", "completed", timeout: 120)
        try assertBucketMatchesManifest(fx, s3, "monaco", expected: 419)
        let (vrc, vout) = try fx.cli(["verify", "--spool", fx.spool] + opts)
        XCTAssertEqual(vrc, 0, vout)
    }
}

/// `Tests/Support/tcpproxy.py`: forwards 127.0.0.1:`port` to 127.0.0.1:`target` while it runs;
/// `stop()` makes the target unreachable, `start()` brings it back on the same port.
/// With `corruptOnce`, the first time those bytes pass to the server they are replaced (a body
/// damaged in flight); `corruptions` counts it.
final class TCPForwarder: @unchecked Sendable {
    let port: Int
    let target: Int
    let corruptOnce: String?
    let notes = ((try? TestScratch.folder("tilespool-tcpproxy").path) ?? NSTemporaryDirectory()) + "/notes-\(UUID().uuidString)"
    private var process: Process?

    init(target: Int, corruptOnce: String? = nil) throws {
        self.target = target
        self.corruptOnce = corruptOnce
        port = try Loopback.freePort()
        try start()
    }
    deinit { stop(); try? FileManager.default.removeItem(atPath: notes) }

    /// How many times a body was damaged on its way.
    var corruptions: Int {
        ((try? String(contentsOfFile: notes, encoding: .utf8)) ?? "").split(separator: "\n").count
    }

    /// Starts the forwarder and returns once it listens (retrying for 10 s while the port is busy).
    func start() throws {
        guard let python = ChildProcess.find("python3", override: "TILESPOOL_PYTHON", preferred: ["/usr/bin/python3"]) else {
            throw SupportError("python3 not found (run `make deps`)")
        }
        let deadline = Date().addingTimeInterval(10)
        while true {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: python)
            p.arguments = [MapData.packageRoot.appendingPathComponent("Tests/Support/tcpproxy.py").path, "\(port)", "\(target)"]
                + (corruptOnce.map { [$0, notes] } ?? [])
            let out = Pipe()
            p.standardOutput = out
            p.standardError = FileHandle.nullDevice
            try p.run()
            let line = out.fileHandleForReading.availableData
            if String(decoding: line, as: UTF8.self).hasPrefix("listening") { process = p; return }
            p.waitUntilExit()
            if Date() > deadline { throw SupportError("tcpproxy.py did not listen on \(port)") }
            usleep(200_000)
        }
    }

    /// Stops it (SIGKILL): connections are cut, new ones refused.
    func stop() {
        guard let p = process else { return }
        process = nil
        if p.isRunning { kill(p.processIdentifier, SIGKILL) }
        p.waitUntilExit()
    }
}
