// Issue 32: `tilespool submit` (check, write atomically, --wait's exit statuses) and
// `tilespool get` (the whole job in the foreground, Ctrl-C and a re-run, a shared store), run as
// the real binary against nginx serving ../shared/mapdata.
import Foundation
import Glibc
import XCTest

final class SubmitGetTests: XCTestCase {
    /// ../shared/mapdata, nginx serving it (the caller stops it) and a fresh spool.
    func servedSpool() throws -> (mapdata: URL, nginx: NginxServer, fx: SpoolFixture) {
        let mapdata = try MapData.require()
        return (mapdata, try NginxServer(root: mapdata), try SpoolFixture())
    }

    /// A tiles request for the OSM Carto raster set of the map data, the whole world at zooms
    /// 0...maxZoom (1 + 4 + 16 + ... tiles), written to `<root>/<name>.json`.
    func rasterRequest(_ nginx: NginxServer, in fx: SpoolFixture, name: String, maxZoom: Int,
                       path: String = "/raster/osm_carto") throws -> String {
        let file = fx.root.appendingPathComponent("\(name).json").path
        try JSONSerialization.data(withJSONObject: ["tiles": [nginx.baseURL + path + "/{z}/{x}/{y}.png"],
                                                    "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": maxZoom])
            .write(to: URL(fileURLWithPath: file))
        return file
    }

    /// The paths of the OSM Carto tiles at zooms 0...maxZoom, as nginx logs them.
    func rasterPaths(maxZoom: Int) -> Set<String> {
        var paths = Set<String>()
        for z in 0...maxZoom { for x in 0..<(1 << z) { for y in 0..<(1 << z) { paths.insert("/raster/osm_carto/\(z)/\(x)/\(y).png") } } }
        return paths
    }

    /// Requests nginx finished per path under `prefix`.
    func hits(_ nginx: NginxServer, _ prefix: String) -> [String: Int] {
        var n: [String: Int] = [:]
        for e in nginx.accessLog() where e.path.hasPrefix(prefix) { n[e.path, default: 0] += 1 }
        return n
    }

    /// `z/x/y` (XYZ rows) -> SHA-256 of each tile of an MBTiles file, read with Python's sqlite3
    /// module (a reader we did not write).
    func mbtilesDigests(_ path: String) throws -> [String: String] {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["python3", "-c", """
            import hashlib, sqlite3, sys
            db = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
            for z, x, row, data in db.execute("select zoom_level, tile_column, tile_row, tile_data from tiles"):
                print("%d/%d/%d %s" % (z, x, (1 << z) - 1 - row, hashlib.sha256(data).hexdigest()))
            """, path]
        let pipe = Pipe()
        p.standardOutput = pipe
        try p.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 0, "python3 could not read \(path)")
        var out: [String: String] = [:]
        for line in String(decoding: data, as: UTF8.self).split(separator: "\n") {
            let f = line.split(separator: " ")
            out[String(f[0])] = String(f[1])
        }
        return out
    }

    /// What the server holds for those tiles: `z/x/y` -> SHA-256 (sha256sum).
    /// Writes request `json` as `<fx.root>/<name>.json` for `get` and `submit`; its path.
    func requestFile(_ fx: SpoolFixture, _ name: String, _ json: [String: Any]) throws -> String {
        let file = fx.root.appendingPathComponent("\(name).json").path
        try JSONSerialization.data(withJSONObject: json).write(to: URL(fileURLWithPath: file))
        return file
    }

    /// `z/x/y` -> SHA-256 of mapdata/raster/stamen_toner's file of each of `tiles` (the tiles of
    /// the stamen PMTiles archive, the same bytes).
    func stamenDigests(_ mapdata: URL, _ tiles: some Sequence<String>) -> [String: String] {
        let folder = mapdata.path + "/raster/stamen_toner/"
        return Dictionary(uniqueKeysWithValues: sha256sum(tiles.map { folder + "\($0).png" }).map {
            (String($0.key.dropFirst(folder.count).dropLast(4)), $0.value)
        })
    }

    func servedDigests(_ mapdata: URL, maxZoom: Int) -> [String: String] {
        let paths = rasterPaths(maxZoom: maxZoom).map { mapdata.path + $0 }
        var out: [String: String] = [:]
        for (file, sha) in sha256sum(paths) {
            out[String(file.dropFirst((mapdata.path + "/raster/osm_carto/").count).dropLast(4))] = sha
        }
        return out
    }

    func testSubmitWaitExitsZeroWhenCompletedAndFourWhenFailed() throws {
        let nginx = try NginxServer(root: try MapData.require())
        defer { nginx.stop() }
        let fx = try SpoolFixture()
        try fx.start()
        defer { fx.stop() }
        let good = try rasterRequest(nginx, in: fx, name: "world", maxZoom: 2)
        var (rc, out) = try fx.cli(["submit", good, "--wait", "--timeout", "120", "--spool", fx.spool])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.hasPrefix("world\n"), "the id first, on its own line: \(out)")
        XCTAssertEqual(fx.state("world"), "completed")
        XCTAssertEqual(fx.progress("world")["tilesCompleted"], 21)
        XCTAssertEqual(Set(hits(nginx, "/raster/osm_carto/").keys), rasterPaths(maxZoom: 2))

        // Every tile 404s: no tile has content, the region fails (allTilesEmpty): exit 4.
        let missing = try rasterRequest(nginx, in: fx, name: "nowhere", maxZoom: 1, path: "/raster/no-such-set")
        (rc, out) = try fx.cli(["submit", "--spool", fx.spool, "--wait", missing, "--timeout", "120"])
        XCTAssertEqual(rc, 4, out)
        XCTAssertTrue(out.contains("nowhere failed: allTilesEmpty"), out)
        XCTAssertEqual(fx.state("nowhere"), "failed")

        // Submitted again while the daemon is stopped: written (exit 9 with --wait: no daemon to
        // follow), and handled when the daemon starts again.
        fx.stop()
        (rc, out) = try fx.cli(["submit", good, "--wait", "--spool", fx.spool])
        XCTAssertEqual(rc, 9, out)
        XCTAssertTrue(FileManager.default.fileExists(atPath: fx.spool + "/requests/world.json"))
        // Pending: a second submit of the same id writes nothing.
        (rc, out) = try fx.cli(["submit", good, "--spool", fx.spool])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("already there"), out)
    }

    /// Runs `tilespool ARGS` as a child whose output goes to a file; returns it running.
    func launch(_ fx: SpoolFixture, _ args: [String], log name: String) throws -> (Process, URL) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: SpoolFixture.binary)
        p.arguments = args
        let log = fx.root.appendingPathComponent(name)
        XCTAssertTrue(FileManager.default.createFile(atPath: log.path, contents: nil))
        let h = try FileHandle(forWritingTo: log)
        p.standardOutput = h
        p.standardError = h
        try p.run()
        return (p, log)
    }

    /// The other ends of `submit --wait`: refused by the daemon (3), not ended within --timeout
    /// (5), cancelled (7), deleted (8), each while the daemon runs.
    func testSubmitWaitExitStatusForRefusedTimedOutCancelledAndDeleted() throws {
        let nginx = try NginxServer(root: try MapData.require())
        defer { nginx.stop() }
        let fx = try SpoolFixture()
        // 5 requests a second: the 341 tiles of zooms 0-4 take over a minute.
        try fx.start(["--max-tiles", "100", "--max-requests-per-second-per-host", "5"])
        defer { fx.stop() }
        // Within submit's own limit (1,000,000), over the daemon's --max-tiles 100.
        let big = try rasterRequest(nginx, in: fx, name: "big", maxZoom: 4)
        var (rc, out) = try fx.cli(["submit", big, "--wait", "--spool", fx.spool, "--timeout", "60"])
        XCTAssertEqual(rc, 3, out)
        XCTAssertTrue(out.contains("refused the request for big: tileLimitExceeded"), out)

        let slow = try rasterRequest(nginx, in: fx, name: "slow", maxZoom: 3)
        (rc, out) = try fx.cli(["submit", slow, "--wait", "--timeout", "1", "--spool", fx.spool])
        XCTAssertEqual(rc, 5, out)
        XCTAssertTrue(["queued", "downloading"].contains(fx.state("slow") ?? ""), "the daemon goes on: \(fx.state("slow") ?? "-")")
        // Unfinished: a second submit of the id writes nothing (the daemon would refuse it).
        (rc, out) = try fx.cli(["submit", slow, "--spool", fx.spool])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("not finished"), out)
        (rc, out) = try fx.cli(["delete", "slow", "--wait", "--spool", fx.spool])
        XCTAssertEqual(rc, 0, out)

        for (action, status) in [("cancel", Int32(7)), ("delete", Int32(8))] {
            let id = "slow-\(action)"
            let file = try rasterRequest(nginx, in: fx, name: id, maxZoom: 3)
            let (p, log) = try launch(fx, ["submit", file, "--wait", "--spool", fx.spool], log: "\(id).log")
            defer { if p.isRunning { kill(p.processIdentifier, SIGKILL); p.waitUntilExit() } }
            try waitUntil("\(id) is downloading", timeout: 30) { fx.state(id) == "downloading" || !p.isRunning }
            XCTAssertTrue(p.isRunning, ChildProcess.tail(of: log))
            (rc, out) = try fx.cli([action, id, "--spool", fx.spool])
            XCTAssertEqual(rc, 0, out)
            p.waitUntilExit()
            XCTAssertEqual(p.terminationStatus, status, ChildProcess.tail(of: log))
            XCTAssertTrue(ChildProcess.tail(of: log).hasPrefix("\(id)\n"), ChildProcess.tail(of: log))
        }
    }

    func testSubmitOfAnInvalidRequestWritesNothing() throws {
        let fx = try SpoolFixture()
        let file = fx.root.appendingPathComponent("bad.json").path
        try JSONSerialization.data(withJSONObject: ["tiles": ["http://127.0.0.1:9/{z}/{x}/{y}.png"], "bounds": [0, 0, 1, 1],
                                                    "minZoom": 3, "maxZoom": 2]).write(to: URL(fileURLWithPath: file))
        let (rc, out) = try fx.cli(["submit", file, "--spool", fx.spool, "--wait"])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.hasPrefix("tilespool: invalidRequest: "), out)
        XCTAssertEqual((try? FileManager.default.contentsOfDirectory(atPath: fx.spool + "/requests")) ?? [], [])
        // The same check as plan: the same message.
        let (planRC, planOut) = try fx.cli(["plan", file])
        XCTAssertEqual(planRC, 1)
        XCTAssertEqual(planOut, out)
        // A symlink, a folder or a FIFO for the request file: invalidRequest, in the daemon's words
        // (attack round 13: a bare errno), never read through, nothing written; no wait on the FIFO.
        let link = fx.root.appendingPathComponent("link.json").path, folder = fx.root.appendingPathComponent("folder.json").path
        let fifo = fx.root.appendingPathComponent("fifo.json").path
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: file)
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: false)
        XCTAssertEqual(mkfifo(fifo, 0o644), 0)
        for path in [link, folder, fifo] {
            for command in ["plan", "submit"] {
                let (rc, text) = try fx.cli([command, path, "--spool", fx.spool])
                XCTAssertEqual(rc, 1, text)
                XCTAssertEqual(text, "tilespool: invalidRequest: \(path) is not a regular file (a symlink, a FIFO or a folder): give the request file itself, or '-' with the request on standard input ('< FILE' follows a link; request files are read without following one, as the daemon reads requests/)\n")
            }
        }
        XCTAssertEqual((try? FileManager.default.contentsOfDirectory(atPath: fx.spool + "/requests")) ?? [], [])
        // A valid request to a spool that does not exist (a mistyped --spool): nothing made.
        try JSONSerialization.data(withJSONObject: ["tiles": ["http://127.0.0.1:9/{z}/{x}/{y}.png"], "bounds": [0, 0, 1, 1],
                                                    "minZoom": 0, "maxZoom": 1]).write(to: URL(fileURLWithPath: file))
        let typo = fx.root.appendingPathComponent("spoool").path
        let (typoRC, typoOut) = try fx.cli(["submit", file, "--spool", typo])
        XCTAssertEqual(typoRC, 1, typoOut)
        XCTAssertTrue(typoOut.contains("no spool at \(typo)"), typoOut)
        XCTAssertFalse(FileManager.default.fileExists(atPath: typo))
        // Standard input: the request must carry its id (no file name gives one).
        for (body, expected) in [(#"{"tiles": ["http://127.0.0.1:9/{z}/{x}/{y}.png"], "bounds": [0, 0, 1, 1], "minZoom": 0, "maxZoom": 1}"#, Int32(1)),
                                 (#"{"id": "piped", "tiles": ["http://127.0.0.1:9/{z}/{x}/{y}.png"], "bounds": [0, 0, 1, 1], "minZoom": 0, "maxZoom": 1}"#, Int32(0))] {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: SpoolFixture.binary)
            p.arguments = ["submit", "-", "--spool", fx.spool]
            let input = Pipe(), output = Pipe()
            p.standardInput = input
            p.standardOutput = output
            p.standardError = output
            try p.run()
            input.fileHandleForWriting.write(Data(body.utf8))
            try input.fileHandleForWriting.close()
            let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            p.waitUntilExit()
            XCTAssertEqual(p.terminationStatus, expected, text)
            XCTAssertEqual(text, expected == 0 ? "piped\n" : "tilespool: invalidRequest: id: a request on standard input has no file name to take its id from: give it an \"id\"\n")
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: fx.spool + "/requests"), ["piped.json"])
    }

    /// The request appears under its name only by a rename (inotify IN_MOVED_TO), never created or
    /// written there (IN_CREATE, IN_CLOSE_WRITE): a reader never sees a partial file. What is written
    /// is the request's bytes.
    func testSubmitWritesTheRequestAtomically() throws {
        let fx = try SpoolFixture()
        let requests = fx.spool + "/requests"
        try FileManager.default.createDirectory(atPath: requests, withIntermediateDirectories: true)
        // A large request (900 KB of context), so a write in place would take many write(2)s.
        let request: [String: Any] = ["id": "big", "tiles": ["http://127.0.0.1:9/{z}/{x}/{y}.png"], "bounds": [0, 0, 1, 1],
                                      "minZoom": 0, "maxZoom": 1, "context": String(repeating: "x", count: 900_000)]
        let bytes = try JSONSerialization.data(withJSONObject: request)
        let file = fx.root.appendingPathComponent("big-request.json").path
        try bytes.write(to: URL(fileURLWithPath: file))
        let fd = inotify_init1(Int32(IN_NONBLOCK))
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        XCTAssertGreaterThanOrEqual(inotify_add_watch(fd, requests, UInt32(IN_CREATE | IN_CLOSE_WRITE | IN_MOVED_TO)), 0)
        let (rc, out) = try fx.cli(["submit", file, "--spool", fx.spool])
        XCTAssertEqual(rc, 0, out)
        XCTAssertEqual(out, "big\n")
        var events: [(mask: UInt32, name: String)] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        var i = 0
        while i < n {
            let (mask, len) = buffer.withUnsafeBytes { raw -> (UInt32, Int) in
                (raw.load(fromByteOffset: i + 4, as: UInt32.self), Int(raw.load(fromByteOffset: i + 12, as: UInt32.self)))
            }
            let nameBytes = buffer[(i + 16)..<(i + 16 + len)].prefix { $0 != 0 }
            events.append((mask, String(decoding: nameBytes, as: UTF8.self)))
            i += 16 + len
        }
        let onFinalName = events.filter { $0.name == "big.json" }
        XCTAssertEqual(onFinalName.map(\.mask), [UInt32(IN_MOVED_TO)], "\(events)")
        XCTAssertTrue(events.filter { $0.name != "big.json" }.allSatisfy { $0.name.hasPrefix(".") }, "the work file is a dotfile: \(events)")
        XCTAssertEqual(try (FileManager.default.contentsOfDirectory(atPath: requests)), ["big.json"], "no dotfile left")
        XCTAssertEqual(FileManager.default.contents(atPath: requests + "/big.json"), bytes)
    }

    /// A symlink planted at requests/ is never followed: submit writes nothing where it points.
    func testSubmitNeverWritesThroughASymlinkedRequestsFolder() throws {
        let fx = try SpoolFixture()
        let elsewhere = fx.root.appendingPathComponent("elsewhere").path
        try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: fx.spool + "/requests", withDestinationPath: elsewhere)
        let file = fx.root.appendingPathComponent("r.json").path
        try JSONSerialization.data(withJSONObject: ["tiles": ["http://127.0.0.1:9/{z}/{x}/{y}.png"], "bounds": [0, 0, 1, 1],
                                                    "minZoom": 0, "maxZoom": 1]).write(to: URL(fileURLWithPath: file))
        let (rc, out) = try fx.cli(["submit", file, "--spool", fx.spool])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("requests"), out)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: elsewhere), [])
    }

    func testGetWritesAnMBTilesWhoseTilesAreTheServedFiles() throws {
        let (mapdata, nginx, fx) = try servedSpool()
        defer { nginx.stop() }
        let request = try rasterRequest(nginx, in: fx, name: "carto", maxZoom: 2)
        let output = fx.root.appendingPathComponent("carto.mbtiles").path
        // Another request waiting in the spool (an idle daemon's): get leaves it for the daemon.
        try fx.drop("other.json", ["tiles": [nginx.baseURL + "/raster/stamen_toner/{z}/{x}/{y}.png"], "bounds": [-180, -85, 180, 85],
                                   "minZoom": 0, "maxZoom": 0])
        let (rc, out) = try fx.cli(["get", request, "--output", output, "--spool", fx.spool])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.contains("\(output): mbtiles (source tiles0), 21 tiles"), out)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: fx.spool + "/requests"), ["other.json"])
        XCTAssertNil(fx.state("other"))
        XCTAssertEqual(hits(nginx, "/raster/stamen_toner/"), [:])
        let exported = try mbtilesDigests(output)
        XCTAssertEqual(exported.count, 21)
        XCTAssertEqual(exported, servedDigests(mapdata, maxZoom: 2))
        XCTAssertEqual(fx.state("carto"), "completed")
    }

    /// `get` of a PMTiles archive reads its header and directories once: the check's reading is
    /// what its daemon plans from (round 28 counted 22 leaf directories read twice on a 26 MB
    /// archive). The stamen archive (85 tiles, its root in the first read, one range): two
    /// requests in all, and the MBTiles holds the archive's tiles, the served PNG files.
    func testGetOfAPMTilesArchiveReadsItsDirectoriesOnce() throws {
        let (mapdata, nginx, fx) = try servedSpool()
        defer { nginx.stop() }
        let request = try requestFile(fx, "stamen", ["tiles": ["pmtiles://" + nginx.baseURL + "/pmtiles/stamen_toner(raster)CC-BY+ODbL_z3.pmtiles"],
                                                     "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
        let output = fx.root.appendingPathComponent("stamen.mbtiles").path
        let (rc, out) = try fx.cli(["get", request, "--output", output, "--spool", fx.spool])
        XCTAssertEqual(rc, 0, out)
        XCTAssertEqual(hits(nginx, "/pmtiles/").values.reduce(0, +), 2, "the header and root once, then one range: \(nginx.accessLog().map(\.path))")
        let exported = try mbtilesDigests(output)
        XCTAssertEqual(exported.count, 85)
        XCTAssertEqual(exported, stamenDigests(mapdata, exported.keys))
    }

    /// A `get` whose region failed because its PMTiles archive changed (the server's ETag "v1"
    /// became "v2" after the plan's request: 412 to the range) plans again when run again, over
    /// the version its check read, and completes; a resume of the old plan failed for good, on
    /// every later `get` of that spool (attack round 31). The tiles are the served PNG files.
    func testGetAfterTheArchiveChangedPlansTheNewVersion() throws {
        let mapdata = try MapData.require()
        let server = try FaultServer()
        defer { server.stop() }
        try server.registerFile("stamen.pmtiles", data: try Data(contentsOf: mapdata.appendingPathComponent("pmtiles/stamen_toner(raster)CC-BY+ODbL_z3.pmtiles")))
        let fx = try SpoolFixture()
        let request = try requestFile(fx, "stamen", ["tiles": ["pmtiles://" + server.url("/pmtiles/changed/1/stamen.pmtiles")],
                                                     "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
        let output = fx.root.appendingPathComponent("stamen.mbtiles").path
        var (rc, out) = try fx.cli(["get", request, "--output", output, "--spool", fx.spool])
        XCTAssertEqual(rc, 4, out)
        XCTAssertTrue(out.contains("archiveChanged"), out)
        (rc, out) = try fx.cli(["get", request, "--output", output, "--spool", fx.spool])
        XCTAssertEqual(rc, 0, out)
        let asked = server.requests().filter { $0.path == "/pmtiles/changed/1/stamen.pmtiles" }
        XCTAssertEqual(asked.last?.headers["If-Match"], "\"v2\"", "the range pinned to the version the second check read")
        let exported = try mbtilesDigests(output)
        XCTAssertEqual(exported.count, 85)
        XCTAssertEqual(exported, stamenDigests(mapdata, exported.keys))

        // Round 32: a get on another spool over the same store, the region failed there with
        // archiveChanged (that spool's status says nothing of it): it goes on with the stored
        // plan, fails, and is planned again over the version its check read, in the same run.
        try server.registerFile("stamen2.pmtiles", data: try Data(contentsOf: mapdata.appendingPathComponent("pmtiles/stamen_toner(raster)CC-BY+ODbL_z3.pmtiles")))
        let failing = try requestFile(fx, "s", ["id": "s", "tiles": ["pmtiles://" + server.url("/pmtiles/changed/1/stamen2.pmtiles")],
                                                "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
        let second = fx.root.appendingPathComponent("s.mbtiles").path
        (rc, out) = try fx.cli(["get", failing, "--output", second, "--spool", fx.root.appendingPathComponent("spool2").path, "--store", fx.store])
        XCTAssertEqual(rc, 4, out)
        (rc, out) = try fx.cli(["get", failing, "--output", second, "--spool", fx.root.appendingPathComponent("spool3").path, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.contains("s: failed"), "the stored plan failed first: \(out)")
        XCTAssertEqual(try mbtilesDigests(second), exported)
    }

    /// Attack round 5: `get --force` with a symlink at PATH downloaded the whole region, then
    /// refused to write through the symlink. What the export would refuse at PATH is refused
    /// first now: exit 1, nothing asked of the server, the symlink's target untouched.
    func testGetRefusesAnOutputItWouldNotWriteBeforeDownloading() throws {
        let (_, nginx, fx) = try servedSpool()
        defer { nginx.stop() }
        let request = try rasterRequest(nginx, in: fx, name: "carto", maxZoom: 2)
        let target = fx.root.appendingPathComponent("elsewhere.mbtiles").path
        try Data("keep".utf8).write(to: URL(fileURLWithPath: target))
        let output = fx.root.appendingPathComponent("carto.mbtiles").path
        XCTAssertEqual(symlink(target, output), 0)
        let (rc, out) = try fx.cli(["get", request, "--output", output, "--force", "--spool", fx.spool])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("(nothing downloaded)"), out)
        XCTAssertEqual(hits(nginx, "/raster/"), [:], "no tile asked")
        XCTAssertEqual(try String(contentsOfFile: target, encoding: .utf8), "keep")
    }

    /// A style request: get fetches the style, TileJSON, sprites, glyphs and tiles and writes a
    /// MapLibre offline database (format from `.db`) holding every served tile of Monaco.
    func testGetOfAStyleWritesAMapLibreDatabase() throws {
        let (mapdata, nginx, fx) = try servedSpool()
        defer { nginx.stop() }
        let request = try requestFile(fx, "monaco", ["style": nginx.baseURL + "/styles/bright/style.local-template.json",
                                                     "bounds": [7.409205, 43.72335, 7.448637, 43.75169], "minZoom": 0, "maxZoom": 14])
        let output = fx.root.appendingPathComponent("monaco.db").path
        let (rc, out) = try fx.cli(["get", request, "--output", output, "--spool", fx.spool])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.contains("get monaco: 419 resources, 23 tiles"), out)
        XCTAssertTrue(out.contains("\(output): maplibre"), out)
        // Read back with Python's sqlite3: one row per tile with content, the same count as the
        // served files whose body is not empty (8530/5975 at z14 is sea, a 404; 0/0/0 inflates
        // to nothing: empty tiles are not stored).
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["python3", "-c", """
            import glob, gzip, sqlite3, sys
            db = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
            stored = db.execute("select count(*) from tiles where data is not null").fetchone()[0]
            served = sum(1 for f in glob.glob(sys.argv[2] + "/*/*/*.pbf") if gzip.decompress(open(f, "rb").read()))
            print(stored, served)
            """, output, mapdata.path + "/tiles/monaco"]
        let pipe = Pipe()
        p.standardOutput = pipe
        try p.run()
        let counts = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        XCTAssertEqual(counts, "21 21\n")
        XCTAssertEqual(hits(nginx, "/tiles/monaco/").count, 23)
    }

    /// On a terminal (a pty from util-linux `script`), get redraws one progress line (carriage
    /// returns, tiles done/expected, bytes, ETA) instead of a line per state change.
    func testGetDrawsAProgressLineOnATerminal() throws {
        let (_, nginx, fx) = try servedSpool()
        defer { nginx.stop() }
        let request = try rasterRequest(nginx, in: fx, name: "carto", maxZoom: 3)
        let output = fx.root.appendingPathComponent("carto.pmtiles").path
        // 20 requests a second: about 4 s, so the status reports a rate and an ETA on the way.
        let command = [SpoolFixture.binary, "get", request, "--output", output, "--spool", fx.spool,
                       "--max-requests-per-second-per-host", "20"].joined(separator: " ")
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/script")
        p.arguments = ["-q", "-e", "-c", command, "/dev/null"]
        let pipe = Pipe()
        p.standardOutput = pipe
        p.standardInput = FileHandle.nullDevice
        try p.run()
        let text = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 0, text)
        XCTAssertTrue(text.contains("\rcarto: downloading "), text)
        XCTAssertTrue(text.range(of: #"\rcarto: downloading \d+/85 tiles, [0-9.]+ (B|KiB|MiB)[^\r]*, ETA [0-9hms]+"#, options: .regularExpression) != nil, text)
        XCTAssertTrue(text.contains("\rcarto: completed 85/85 tiles"), text)
        XCTAssertFalse(text.contains("carto: queued\r\n"), "no plain state lines on a terminal: \(text)")
        XCTAssertEqual(try isPMTiles(output), true)
    }

    func isPMTiles(_ path: String) throws -> Bool {
        let d = try Data(contentsOf: URL(fileURLWithPath: path))
        return d.prefix(7) == Data("PMTiles".utf8)
    }

    /// Runs `get REQUEST --output OUTPUT` on `fx`'s spool at 20 requests a second, sends it
    /// `signal` once nginx served `afterTiles` OSM Carto tiles, and waits for it: its exit status
    /// and the end of its output.
    func getStopped(by signal: Int32, afterTiles: Int, request: String, output: String, fx: SpoolFixture, nginx: NginxServer) throws -> (Int32, String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: SpoolFixture.binary)
        p.arguments = ["get", request, "--output", output, "--spool", fx.spool, "--max-requests-per-second-per-host", "20"]
        let log = fx.root.appendingPathComponent("get-\(signal).log")
        XCTAssertTrue(FileManager.default.createFile(atPath: log.path, contents: nil))
        let h = try FileHandle(forWritingTo: log)
        p.standardOutput = h
        p.standardError = h
        try p.run()
        defer { if p.isRunning { kill(p.processIdentifier, SIGKILL); p.waitUntilExit() } }
        try waitUntil("\(afterTiles) tiles were served", timeout: 60) { hits(nginx, "/raster/osm_carto/").count >= afterTiles || !p.isRunning }
        XCTAssertTrue(p.isRunning, ChildProcess.tail(of: log))
        kill(p.processIdentifier, signal)
        p.waitUntilExit()
        return (p.terminationStatus, ChildProcess.tail(of: log))
    }

    /// SIGHUP (the terminal closed) stops `get` as Ctrl-C does (attack round 54: it killed it,
    /// exit 129, its region left `downloading`); then a changed request of the same id is refused
    /// with advice that works without a daemon: the `delete` it names clears the stopped region,
    /// and the changed request is got whole.
    func testGetStoppedBySIGHUPThenAChangedRequestIsRefusedUntilTheDeleteItNames() throws {
        let (mapdata, nginx, fx) = try servedSpool()
        defer { nginx.stop() }
        let request = try rasterRequest(nginx, in: fx, name: "carto", maxZoom: 4)
        let output = fx.root.appendingPathComponent("carto.mbtiles").path
        let (status, log) = try getStopped(by: SIGHUP, afterTiles: 20, request: request, output: output, fx: fx, nginx: nginx)
        XCTAssertEqual(status, 130, log)
        XCTAssertEqual(fx.state("carto"), "queued")

        let changed = try rasterRequest(nginx, in: fx, name: "carto", maxZoom: 2)
        var (rc, out) = try fx.cli(["get", changed, "--output", output, "--spool", fx.spool])
        XCTAssertEqual(rc, 1, out)
        let advice = "'tilespool delete carto --spool \(fx.spool)'"
        XCTAssertTrue(out.contains("is another download (queued)") && out.contains(advice), out)
        (rc, out) = try fx.cli(["delete", "carto", "--spool", fx.spool])
        XCTAssertEqual(rc, 0, out)
        XCTAssertEqual(out, "deleted carto\n")
        (rc, out) = try fx.cli(["get", changed, "--output", output, "--spool", fx.spool])
        XCTAssertEqual(rc, 0, out)
        XCTAssertEqual(try mbtilesDigests(output), servedDigests(mapdata, maxZoom: 2))
    }

    /// Ctrl-C after some tiles, then the same command: each tile is asked of the server exactly
    /// once across both runs, and the export holds them all. A third run (--force) asks nothing.
    func testGetInterruptedBySIGINTGoesOnWithOnlyWhatWasMissing() throws {
        let (mapdata, nginx, fx) = try servedSpool()
        defer { nginx.stop() }
        let request = try rasterRequest(nginx, in: fx, name: "carto", maxZoom: 4)
        let output = fx.root.appendingPathComponent("carto.mbtiles").path
        let all = rasterPaths(maxZoom: 4)
        XCTAssertEqual(all.count, 341)

        // 20 requests a second: about 17 s for the whole set, stopped after 40 tiles.
        let (status, firstLog) = try getStopped(by: SIGINT, afterTiles: 40, request: request, output: output, fx: fx, nginx: nginx)
        XCTAssertEqual(status, 130, firstLog)
        XCTAssertTrue(firstLog.contains("run the same command again"), firstLog)
        XCTAssertFalse(FileManager.default.fileExists(atPath: output), "no export of a partial download")
        let firstRun = hits(nginx, "/raster/osm_carto/")
        XCTAssertLessThan(firstRun.count, all.count, "stopped before the end")

        var (rc, out) = try fx.cli(["get", request, "--output", output, "--spool", fx.spool])
        XCTAssertEqual(rc, 0, out)
        try waitUntil("nginx logged every tile", timeout: 10) { hits(nginx, "/raster/osm_carto/").count >= all.count }
        let both = hits(nginx, "/raster/osm_carto/")
        XCTAssertEqual(Set(both.keys), all)
        XCTAssertEqual(both.filter { $0.value != 1 }, [:], "each tile asked once across both runs")
        XCTAssertEqual(try mbtilesDigests(output), servedDigests(mapdata, maxZoom: 4))

        // Completed: the same command again asks nothing and exports again (with --force).
        (rc, out) = try fx.cli(["get", request, "--output", output, "--spool", fx.spool])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("exists: give --force"), out)
        (rc, out) = try fx.cli(["get", request, "--output", output, "--spool", fx.spool, "--force"])
        XCTAssertEqual(rc, 0, out)
        XCTAssertEqual(nginx.accessLog().count, both.values.reduce(0, +))
    }

    /// `get --store <the daemon's store>` after the daemon downloaded the region: no tile asked.
    /// While the daemon runs on that store, get refuses.
    func testGetOnTheDaemonsStoreFetchesNothingAlreadyStored() throws {
        let (_, nginx, fx) = try servedSpool()
        defer { nginx.stop() }
        try fx.start()
        defer { fx.stop() }
        let request = try rasterRequest(nginx, in: fx, name: "carto", maxZoom: 3)
        var (rc, out) = try fx.cli(["submit", request, "--wait", "--timeout", "120", "--spool", fx.spool])
        XCTAssertEqual(rc, 0, out)
        try waitUntil("nginx logged every tile", timeout: 10) { hits(nginx, "/raster/osm_carto/").count >= 85 }
        let served = nginx.accessLog().count
        let getSpool = fx.root.appendingPathComponent("get-spool").path
        let output = fx.root.appendingPathComponent("carto.pmtiles").path

        (rc, out) = try fx.cli(["get", request, "--output", output, "--spool", getSpool, "--store", fx.store])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("a daemon is running on the store"), out)
        (rc, out) = try fx.cli(["get", request, "--output", output, "--spool", fx.spool])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("a daemon is running on the spool \(fx.spool)"), out)
        XCTAssertFalse(FileManager.default.fileExists(atPath: output))

        fx.stop()
        (rc, out) = try fx.cli(["get", request, "--output", output, "--spool", getSpool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.contains("\(output): pmtiles (source tiles0), 85 tiles"), out)
        XCTAssertEqual(nginx.accessLog().count, served, "nothing asked of the server: \(nginx.accessLog().dropFirst(served))")
        // The daemon's region is still its own: completed, once the daemon is back.
        try fx.start()
        try waitUntil("the daemon's region is completed", timeout: 30) { fx.state("carto") == "completed" }
        XCTAssertEqual(nginx.accessLog().count, served)
    }
}
