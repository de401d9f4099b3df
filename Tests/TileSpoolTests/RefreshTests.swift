import Foundation
import XCTest

/// Issue 9: refresh a completed region with conditional requests, swapped in atomically. nginx
/// serves a copy of the real bright/Monaco data (JSON with the base URL filled in, so that nginx
/// sends ETag and Last-Modified for every file, as for any static file); the tests change files in
/// the copy and read nginx's log of conditional headers as the witness.
final class RefreshTests: XCTestCase {
    var mapdata: URL!
    var served: URL!
    var nginx: NginxServer!
    var fx: SpoolFixture!
    let monacoBounds = [7.409205, 43.72335, 7.448637, 43.75169]
    /// Resources of bright over Monaco z0-14: 1 style, 1 TileJSON, 4 sprite files, 390 glyph ranges, 23 tiles.
    let resources = 419

    override func setUpWithError() throws {
        mapdata = try MapData.require()
        served = FileManager.default.temporaryDirectory.appendingPathComponent("tilespool-served-\(UUID().uuidString)")
        let fm = FileManager.default
        for dir in ["styles/bright", "tiles", "sprites", "fonts"] {
            try fm.createDirectory(at: served.appendingPathComponent(dir), withIntermediateDirectories: true)
        }
        try fm.copyItem(at: mapdata.appendingPathComponent("tiles/monaco"), to: served.appendingPathComponent("tiles/monaco"))
        try fm.copyItem(at: mapdata.appendingPathComponent("sprites/osm-bright"), to: served.appendingPathComponent("sprites/osm-bright"))
        for stack in try fm.contentsOfDirectory(atPath: mapdata.path + "/fonts") where stack.hasPrefix("KlokanTech") {
            try fm.copyItem(at: mapdata.appendingPathComponent("fonts/" + stack), to: served.appendingPathComponent("fonts/" + stack))
        }
        // JSON without nginx's sub_filter (which drops ETag and Last-Modified); /tiles/monaco/14/
        // answers 503 while the file FAIL exists in the served folder.
        nginx = try NginxServer(root: served, extraLocations: """
            location ~ \\.json$ { default_type application/json; }
            location ~ ^/tiles/monaco/14/ {
                if (-f $document_root/FAIL) { return 503; }
                add_header Content-Encoding gzip;
            }
            """)
        for (from, to) in [("styles/bright/style.local-template.json", "styles/bright/style.json"),
                           ("tiles/monaco.tilejson.json", "tiles/monaco.tilejson.json")] {
            let text = try String(contentsOf: mapdata.appendingPathComponent(from), encoding: .utf8)
            try text.replacingOccurrences(of: "__BASE__", with: nginx.baseURL)
                .write(to: served.appendingPathComponent(to), atomically: true, encoding: .utf8)
        }
        fx = try SpoolFixture()
    }

    override func tearDown() {
        fx?.stop()
        nginx?.stop()
        if let served { try? FileManager.default.removeItem(at: served) }
    }

    var request: [String: Any] {
        ["id": "monaco", "style": nginx.baseURL + "/styles/bright/style.json", "bounds": monacoBounds,
         "minZoom": 0, "maxZoom": 14, "exports": [["format": "mbtiles"]]]
    }

    /// The `export` events of monaco whose state is `written`.
    func exportsWritten() -> [[String: Any]] {
        fx.events("monaco").compactMap { $0["export"] as? [String: Any] }.filter { $0["state"] as? String == "written" }
    }

    /// Downloads the region and returns once it is completed and nginx has logged every request.
    func completeMonaco() throws {
        try fx.drop("monaco.json", request)
        try fx.waitForState("monaco", "completed")
        try waitUntil("nginx logged the download") { nginx.conditionalLog().count >= resources }
        try waitUntil("the export is written") { exportsWritten().count == 1 }
    }

    /// Waits for the `refresh` event `what` (started, finished, failed, cancelled) of monaco, the
    /// `n`th of its kind.
    func waitForRefresh(_ what: String, count n: Int = 1, timeout: TimeInterval = 60) throws {
        try waitUntil("refresh \(what) (#\(n))", timeout: timeout) {
            if let d = fx.daemon, !d.isRunning { XCTFail("daemon exited: \(fx.log().suffix(2000))"); return true }
            guard fx.events("monaco").filter({ $0["refresh"] as? String == what }).count >= n else { return false }
            // The daemon writes the event before the status file: wait for the status to say it too.
            // A refresh that ends is followed by the region's settled state (completed); the
            // status can say refreshing false a moment before it does.
            guard (fx.status("monaco")?["refreshing"] as? Bool) == (what == "started") else { return false }
            return what == "started" || fx.state("monaco") != "downloading"
        }
    }

    /// Replaces a served file's bytes and moves its modification time on, so nginx's ETag
    /// (mtime-size) and Last-Modified both change.
    func change(_ path: String, to bytes: Data) throws {
        let url = served.appendingPathComponent(path)
        try bytes.write(to: url)
        try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(100)], ofItemAtPath: url.path)
    }

    var manifestPath: String { fx.store + "/regions/monaco/manifest.tsv" }
    func manifestBytes() -> Data { FileManager.default.contents(atPath: manifestPath) ?? Data() }

    /// Requests nginx logged after the first `skip`.
    func requests(after skip: Int) -> [NginxServer.ConditionalEntry] { Array(nginx.conditionalLog().dropFirst(skip)) }

    func sha256(_ data: Data) -> String {
        let tmp = NSTemporaryDirectory() + "/tilespool-sha-\(UUID().uuidString)"
        XCTAssertTrue(FileManager.default.createFile(atPath: tmp, contents: data))
        defer { try? FileManager.default.removeItem(atPath: tmp) }
        return sha256sum([tmp])[tmp] ?? ""
    }

    /// Two files change on the server; a refresh asks about every resource once, conditionally
    /// where a validator was recorded; exactly the two changed ones come back 200 and their new
    /// objects are in the manifest.
    func testRefreshFetchesOnlyWhatChanged() throws {
        try fx.start()
        try completeMonaco()
        let before = nginx.conditionalLog().count
        let tilePath = "tiles/monaco/14/8529/5973.pbf", glyphPath = "fonts/KlokanTech Noto Sans Bold/0-255.pbf"
        let newTile = try Data(contentsOf: mapdata.appendingPathComponent("tiles/liechtenstein/14/8623/5744.pbf"))
        let newGlyph = try Data(contentsOf: mapdata.appendingPathComponent("fonts/Roboto Regular/0-255.pbf"))
        try change(tilePath, to: newTile)
        try change(glyphPath, to: newGlyph)
        let exportBefore = try XCTUnwrap(exportsWritten().first?["sha256"] as? String)

        let (code, text) = try fx.cli(["refresh", "monaco", "--spool", fx.spool])
        XCTAssertEqual(code, 0, text)
        try waitForRefresh("finished")
        try waitUntil("nginx logged the refresh") { requests(after: before).count >= resources }

        let log = requests(after: before)
        XCTAssertEqual(log.count, resources, "one request per resource")
        XCTAssertEqual(Set(log.map(\.uri)).count, resources, "no resource asked twice")
        // Every resource that had validators is asked conditionally; only the 404 sea tile had none.
        // nginx sends an ETag with every file: If-None-Match alone, never If-Modified-Since beside
        // it (RFC 9110 section 13.1.3; issue 29).
        XCTAssertEqual(log.filter { !$0.isConditional }.map(\.uri), ["/tiles/monaco/14/8530/5975.pbf"])
        XCTAssertTrue(log.filter(\.isConditional).allSatisfy { !$0.ifNoneMatch.isEmpty && $0.ifModifiedSince.isEmpty })
        XCTAssertEqual(Set(log.filter { $0.status == 200 }.map(\.uri)),
                       ["/tiles/monaco/14/8529/5973.pbf", "/fonts/KlokanTech%20Noto%20Sans%20Bold/0-255.pbf"])
        XCTAssertEqual(log.filter { $0.status == 304 }.count, resources - 3)

        let lines = fx.manifest("monaco")
        XCTAssertEqual(lines.count, resources)
        XCTAssertEqual(lines.first { $0.key == "openmaptiles/14/8529/5973" }?.sha, sha256(gunzip(mapdata.path + "/tiles/liechtenstein/14/8623/5744.pbf")))
        XCTAssertEqual(lines.first { $0.key == "KlokanTech Noto Sans Bold/0-255" }?.sha, sha256(newGlyph))
        fx.assertStoreMatchesManifest("monaco")

        let p = fx.progress("monaco")
        XCTAssertEqual(p["resourcesChanged"], 2)
        XCTAssertEqual(p["resourcesUnchanged"], resources - 2)
        XCTAssertEqual(p["resourcesChecked"], resources)
        XCTAssertEqual(p["resourcesCompleted"], resources)
        XCTAssertEqual(fx.state("monaco"), "completed")
        XCTAssertEqual(fx.status("monaco")?["refreshing"] as? Bool, false)
        let finished = try XCTUnwrap(fx.events("monaco").last { $0["refresh"] as? String == "finished" })
        XCTAssertEqual(finished["resourcesChanged"] as? Int, 2)
        XCTAssertFalse(FileManager.default.fileExists(atPath: fx.store + "/regions/monaco/refresh"))
        // Something changed: the request's export is written again, with the new tile.
        try waitUntil("the export is written again") { exportsWritten().count == 2 }
        XCTAssertNotEqual(exportsWritten().last?["sha256"] as? String, exportBefore)
        // While it ran, the region said so: downloading with refreshing true, then completed.
        let stateChanges = fx.events("monaco").filter { $0["export"] == nil }.compactMap { $0["state"] as? String }
        XCTAssertEqual(Array(stateChanges.suffix(3)), ["queued", "downloading", "completed"])
    }

    /// Nothing changed: every answer is 304, no object is written or touched, and the manifest
    /// says the same except the fetch times. Dropping the same request again is a refresh too.
    func testUnchangedRefreshWritesNothingAndRedropIsARefresh() throws {
        try fx.start()
        try completeMonaco()
        /// The store's object files (packs and index files) with their modification times: a
        /// refresh that writes no object leaves them as they were.
        func objectTimes() -> [String: Date] {
            var out: [String: Date] = [:]
            for dir in ["packs", "index"] {
                let e = FileManager.default.enumerator(atPath: fx.store + "/" + dir)
                while let rel = e?.nextObject() as? String {
                    out[dir + "/" + rel] = (try? FileManager.default.attributesOfItem(atPath: fx.store + "/" + dir + "/" + rel))?[.modificationDate] as? Date
                }
            }
            return out
        }
        /// Manifest lines without their last column (the fetch time), sorted.
        func linesWithoutFetchTimes() -> [String] {
            String(decoding: manifestBytes(), as: UTF8.self).split(separator: "\n")
                .map { $0.split(separator: "\t", omittingEmptySubsequences: false).dropLast().joined(separator: "\t") }.sorted()
        }
        let objectsBefore = objectTimes(), linesBefore = linesWithoutFetchTimes()

        for round in 1...2 {
            let before = nginx.conditionalLog().count
            if round == 1 {
                _ = try fx.cli(["refresh", "monaco", "--spool", fx.spool])
            } else {
                // The same request dropped again (with another context): conditional requests only.
                var again = request
                again["context"] = ["round": 2]
                try fx.drop("monaco.json", again)
            }
            try waitForRefresh("finished", count: round)
            try waitUntil("nginx logged refresh \(round)") { requests(after: before).count >= resources }
            let log = requests(after: before)
            XCTAssertEqual(log.count, resources)
            XCTAssertEqual(log.filter { $0.status == 304 }.count, resources - 1, "round \(round)")
            XCTAssertEqual(log.filter { !$0.isConditional }.map(\.uri), ["/tiles/monaco/14/8530/5975.pbf"])
            XCTAssertEqual(objectTimes(), objectsBefore, "round \(round): no object written or touched")
            XCTAssertEqual(linesWithoutFetchTimes(), linesBefore, "round \(round)")
            XCTAssertEqual(fx.progress("monaco")["resourcesChanged"], 0)
            XCTAssertEqual(fx.progress("monaco")["resourcesUnchanged"], resources)
        }
        XCTAssertEqual((fx.status("monaco")?["context"] as? [String: Any])?["round"] as? Int, 2)
        XCTAssertEqual(exportsWritten().count, 1, "nothing changed: the export is not written again")
        XCTAssertEqual(fx.state("monaco"), "completed")
    }

    /// The server fails part-way through a refresh (z14 answers 503 until the retries run out):
    /// the region is completed again with the old manifest byte for byte and the error reported.
    func testServerFailingMidRefreshLeavesTheOldPack() throws {
        try fx.start(["--retry-delay", "0.05", "--max-retries", "2"])
        try completeMonaco()
        // A first refresh that completes: its counts are the pack's from then on.
        _ = try fx.cli(["refresh", "monaco", "--spool", fx.spool])
        try waitForRefresh("finished")
        let counted = fx.progress("monaco")
        XCTAssertEqual(counted["resourcesChecked"], resources)
        let old = manifestBytes()
        try change("tiles/monaco/13/4264/2986.pbf", to: try Data(contentsOf: mapdata.appendingPathComponent("tiles/liechtenstein/14/8623/5748.pbf")))
        XCTAssertTrue(FileManager.default.createFile(atPath: served.path + "/FAIL", contents: Data()))
        _ = try fx.cli(["refresh", "monaco", "--spool", fx.spool])
        try waitForRefresh("failed")
        XCTAssertEqual(fx.state("monaco"), "completed")
        XCTAssertEqual(manifestBytes(), old, "the old manifest is untouched")
        XCTAssertEqual(fx.errorCode("monaco"), "httpError")
        XCTAssertTrue(fx.errorMessage("monaco")?.contains("503") == true, fx.errorMessage("monaco") ?? "")
        XCTAssertEqual(fx.progress("monaco"), counted, "the pack's counts (and the last refresh's) are put back")
        XCTAssertEqual(fx.status("monaco")?["refreshing"] as? Bool, false)
        XCTAssertFalse(FileManager.default.fileExists(atPath: fx.store + "/regions/monaco/refresh"))
        fx.assertStoreMatchesManifest("monaco")
    }

    /// kill -9 while a refresh waits on z14: the old pack is intact, gc keeps the objects of both
    /// manifests, and after a restart the refresh asks only for what it had not recorded, then
    /// swaps the new manifest in.
    /// Starts a refresh of monaco with the z14 tiles failing (the `FAIL` switch; the daemon retries
    /// them after its --retry-delay) and waits until everything but those six tiles is recorded in
    /// the refresh's own manifest.
    func refreshUntilAllButZ14() throws {
        XCTAssertTrue(FileManager.default.createFile(atPath: served.path + "/FAIL", contents: Data()))
        _ = try fx.cli(["refresh", "monaco", "--spool", fx.spool])
        let refreshManifest = fx.store + "/regions/monaco/refresh/manifest.tsv"
        try waitUntil("the refresh recorded all but z14") {
            let text = (try? String(contentsOfFile: refreshManifest, encoding: .utf8)) ?? ""
            return text.split(separator: "\n").filter { !$0.hasPrefix("#") }.count == resources - 6
        }
    }

    func testKill9MidRefreshResumesAndGCKeepsBothManifests() throws {
        try fx.start(["--retry-delay", "30"])
        try completeMonaco()
        let old = manifestBytes()
        let z13 = "tiles/monaco/13/4264/2986.pbf"
        guard FileManager.default.fileExists(atPath: served.path + "/" + z13) else { throw SupportError("no \(z13) in the data") }
        // A tile with content (5748 decodes to 0 bytes, which is an empty tile since issue 10).
        try change(z13, to: try Data(contentsOf: mapdata.appendingPathComponent("tiles/liechtenstein/14/8623/5749.pbf")))
        let newSha = sha256(gunzip(mapdata.path + "/tiles/liechtenstein/14/8623/5749.pbf"))
        try refreshUntilAllButZ14()
        XCTAssertEqual(fx.state("monaco"), "downloading")
        XCTAssertEqual(fx.status("monaco")?["refreshing"] as? Bool, true)
        XCTAssertEqual(manifestBytes(), old)
        fx.kill9()
        XCTAssertEqual(manifestBytes(), old, "the old pack survives kill -9")
        // The pack in use can be exported while its refresh is under way.
        let out = fx.root.appendingPathComponent("during.mbtiles").path
        let (exportCode, exportOut) = try fx.cli(["export", "monaco", "--format", "mbtiles", "--output", out,
                                                  "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(exportCode, 0, exportOut)

        // gc with no grace period keeps the new object (only the refresh references it) and the old one.
        let oldSha = try XCTUnwrap(fx.manifest("monaco").first { $0.key == "openmaptiles/13/4264/2986" }?.sha)
        let (gcCode, gcOut) = try fx.cli(["gc", "--grace", "0", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(gcCode, 0, gcOut)
        let held = fx.storeObjects()
        XCTAssertNotNil(held[newSha], "object of the refresh's manifest kept")
        XCTAssertNotNil(held[oldSha], "object of the pack's manifest kept")

        try FileManager.default.removeItem(atPath: served.path + "/FAIL")
        let before = nginx.conditionalLog().count
        try fx.start(["--retry-delay", "0.1"])
        try waitForRefresh("finished")
        try waitUntil("nginx logged the rest") { requests(after: before).count >= 6 }
        XCTAssertEqual(Set(requests(after: before).map(\.uri)),
                       Set(["8529/5973", "8529/5974", "8529/5975", "8530/5973", "8530/5974", "8530/5975"].map { "/tiles/monaco/14/\($0).pbf" }),
                       "after the restart only the z14 tiles are asked for")
        XCTAssertEqual(requests(after: before).count, 6)
        XCTAssertEqual(fx.state("monaco"), "completed")
        XCTAssertEqual(fx.manifest("monaco").first { $0.key == "openmaptiles/13/4264/2986" }?.sha, newSha)
        XCTAssertEqual(fx.manifest("monaco").count, resources)
        XCTAssertEqual(fx.progress("monaco")["resourcesChanged"], 1)
        fx.assertStoreMatchesManifest("monaco")
        let (verifyCode, verifyOut) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(verifyCode, 0, verifyOut)
    }

    /// Attack round 15: a refresh that ended while no daemon ran (its `refresh/` gone with no
    /// swap pending, as `verify --repair` leaves one whose swap it finished) is closed at the next
    /// start: `completed`, a `refresh` `finished` event, so a script waiting for it ends. Before,
    /// the region was downloaded again as a plain download and the refresh never closed.
    func testARefreshThatEndedWhileNoDaemonRanIsClosedAtStart() throws {
        try fx.start(["--retry-delay", "30"])
        try completeMonaco()
        try refreshUntilAllButZ14()
        fx.kill9()
        XCTAssertEqual(fx.status("monaco")?["refreshing"] as? Bool, true)
        try FileManager.default.removeItem(atPath: fx.store + "/regions/monaco/refresh")
        try FileManager.default.removeItem(atPath: served.path + "/FAIL")
        let before = nginx.conditionalLog().count
        try fx.start(["--retry-delay", "0.1"])
        try waitForRefresh("finished")
        XCTAssertEqual(fx.state("monaco"), "completed")
        XCTAssertEqual(fx.status("monaco")?["refreshing"] as? Bool, false)
        XCTAssertEqual(fx.progress("monaco")["resourcesCompleted"], resources)
        XCTAssertEqual(requests(after: before).count, 0, "nothing downloaded again")
        let (verifyCode, verifyOut) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(verifyCode, 0, verifyOut)
    }

    /// `--max-age`: only resources fetched longer ago than that are asked about (the tiles here,
    /// made two hours old in the manifest); the rest are kept as they are.
    func testMaxAgeChecksOnlyOlderResources() throws {
        try fx.start()
        try completeMonaco()
        XCTAssertEqual(fx.stop(), 0)
        // Two hours older for every tile line (column 9 is the fetch time).
        let twoHoursAgo = Int(Date().timeIntervalSince1970) - 7200
        let text = String(decoding: manifestBytes(), as: UTF8.self).split(separator: "\n").map { line -> String in
            guard line.hasPrefix("tile\t") else { return String(line) }
            var f = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            f[8] = String(twoHoursAgo)
            return f.joined(separator: "\t")
        }.joined(separator: "\n") + "\n"
        try text.write(toFile: manifestPath, atomically: true, encoding: .utf8)
        try fx.start()
        let before = nginx.conditionalLog().count
        let (code, out) = try fx.cli(["refresh", "--max-age", "3600", "monaco", "--spool", fx.spool])
        XCTAssertEqual(code, 0, out)
        try waitForRefresh("finished")
        try waitUntil("nginx logged the tiles") { requests(after: before).count >= 23 }
        let log = requests(after: before)
        XCTAssertEqual(log.count, 23, "only the 23 tiles, not the style, TileJSON, sprites or glyphs")
        XCTAssertTrue(log.allSatisfy { $0.uri.hasPrefix("/tiles/monaco/") })
        let p = fx.progress("monaco")
        XCTAssertEqual(p["resourcesChecked"], 23)
        XCTAssertEqual(p["resourcesCompleted"], resources)
        XCTAssertEqual(fx.manifest("monaco").count, resources)
        let started = try XCTUnwrap(fx.events("monaco").last { $0["refresh"] as? String == "started" })
        XCTAssertEqual(started["maxAge"] as? Double, 3600)
    }

    /// `--refresh-interval`: a completed region is refreshed by itself once its manifest is that
    /// old, with conditional requests.
    func testRefreshIntervalRefreshesByItself() throws {
        // Refreshes fall due at rescans: every 0.5 s here, so the refresh starts right at 2 s,
        // when the last resources are just 2 s old (a `now` cut to whole seconds once left 2 of
        // the 419 unasked: `Refresh.isDue`).
        try fx.start(["--refresh-interval", "2", "--rescan-interval", "0.5"])
        try completeMonaco()
        let before = nginx.conditionalLog().count
        try waitForRefresh("finished", timeout: 30)
        let started = try XCTUnwrap(fx.events("monaco").first { $0["refresh"] as? String == "started" })
        XCTAssertEqual(started["maxAge"] as? Double, 2)
        try waitUntil("nginx logged the refresh") { requests(after: before).count >= resources }
        XCTAssertEqual(Array(requests(after: before).prefix(resources)).filter { $0.status == 304 }.count, resources - 1)
        // The first refresh's own count (its `finished` event): the status may already show the
        // next one, due 2 s after this one swapped its manifest in.
        let finished = try XCTUnwrap(fx.events("monaco").first { $0["refresh"] as? String == "finished" })
        XCTAssertEqual(finished["resourcesChecked"] as? Int, resources)
    }

    /// Pause and resume a refresh (it stays a refresh), then cancel it: the region is completed
    /// again with the old pack byte for byte, no error, no refresh files left, and the
    /// `completedAt` of that pack.
    func testPauseResumeAndCancelDuringARefresh() throws {
        try fx.start(["--retry-delay", "30"])
        try completeMonaco()
        let old = manifestBytes()
        let completedAt = try XCTUnwrap(fx.status("monaco")?["completedAt"] as? String)
        XCTAssertTrue(FileManager.default.createFile(atPath: served.path + "/FAIL", contents: Data()))
        _ = try fx.cli(["refresh", "monaco", "--spool", fx.spool])
        try waitUntil("the refresh waits on z14") {
            fx.state("monaco") == "downloading" && fx.progress("monaco")["resourcesCompleted"] == resources - 6
        }
        _ = try fx.cli(["pause", "monaco", "--spool", fx.spool])
        try fx.waitForState("monaco", "pausedUser")
        XCTAssertEqual(fx.status("monaco")?["refreshing"] as? Bool, true)
        XCTAssertEqual(manifestBytes(), old)
        _ = try fx.cli(["resume", "monaco", "--spool", fx.spool])
        try fx.waitForState("monaco", "downloading")
        XCTAssertEqual(fx.status("monaco")?["refreshing"] as? Bool, true)
        // (The status gives times to the second: the cancel comes in a later one than the completion.)
        try waitUntil("the clock is past the second monaco completed in") { ISO8601DateFormatter().string(from: Date()) > completedAt }
        _ = try fx.cli(["cancel", "monaco", "--spool", fx.spool])
        try waitForRefresh("cancelled")
        XCTAssertGreaterThan(try XCTUnwrap(fx.status("monaco")?["stateChangedAt"] as? String), completedAt)
        XCTAssertEqual(fx.status("monaco")?["completedAt"] as? String, completedAt, "when the pack completed, not when its refresh was cancelled")
        XCTAssertEqual(fx.state("monaco"), "completed")
        XCTAssertEqual(fx.status("monaco")?["refreshing"] as? Bool, false)
        XCTAssertTrue(fx.status("monaco")?["error"] is NSNull)
        XCTAssertEqual(manifestBytes(), old, "the old pack, byte for byte")
        XCTAssertEqual(fx.progress("monaco")["resourcesCompleted"], resources)
        XCTAssertFalse(FileManager.default.fileExists(atPath: fx.store + "/regions/monaco/refresh"))
    }
}
