import Foundation
import XCTest
import TileSpoolCore

/// Issue 10, "Real-world inputs and a polite client", against the fault-injecting server: bodies
/// that are not tiles are never stored, empty statuses are the request's, and what the server's
/// own request log shows about headers, throttling and retried tiles.
final class RealWorldTests: FaultServerSpoolTestCase {
    // MARK: - Bodies that are not tiles

    /// An HTML login page, a text/plain error and a GIF where a PNG was asked, each with 200:
    /// retried (the server's log counts 1 + --max-retries requests), never stored, and the region
    /// fails `badResponse` naming the URL and what was received.
    func testBodiesThatAreNotTilesAreNeverStored() throws {
        try fx.start(["--max-retries", "1", "--retry-delay", "0.05"])
        let cases: [(fault: String, mentions: String)] = [("html", "HTML"), ("text", "text/plain"), ("notpng", "PNG")]
        for c in cases {
            try fx.drop("nt-\(c.fault).json", server.tilesRequest(["/\(c.fault)/nt/{z}/{x}/{y}.png"]))
        }
        for c in cases {
            let id = "nt-\(c.fault)", path = "/\(c.fault)/nt/0/0/0.png"
            try fx.waitForState(id, "failed", timeout: 30)
            XCTAssertEqual(fx.errorCode(id), "badResponse", id)
            XCTAssertEqual(fx.errorObject(id)?["url"] as? String, server.url(path), id)
            let message = fx.errorMessage(id) ?? ""
            XCTAssertTrue(message.contains(c.mentions) && message.contains("received"), "\(id): \(message)")
            XCTAssertEqual(server.hits(path), 2, "\(id): asked once and retried once")
            XCTAssertEqual(fx.manifest(id).filter { $0.kind == "tile" }.count, 0, id)
        }
        XCTAssertEqual(fx.objects(), [], "nothing entered the store")
    }

    /// A 200 with an empty body is an empty tile (like 204); the real PNG beside it is stored.
    func testEmptyBodyWith200IsAnEmptyTile() throws {
        try fx.start()
        try fx.drop("e200.json", server.tilesRequest(["/empty200/e2/{z}/{x}/{y}.png", "/ok/e2/{z}/{x}/{y}.png"]))
        try fx.waitForState("e200", "completed", timeout: 30)
        let lines = fx.manifest("e200")
        XCTAssertEqual(lines.first { $0.url.contains("/empty200/") }?.sha, "-", "recorded as an empty tile")
        XCTAssertEqual(lines.first { $0.url.contains("/ok/") }?.sha, sha256Hex(FaultServer.okBody("/ok/e2/0/0/0.png")))
        XCTAssertEqual(fx.objects().count, 1)
        XCTAssertEqual(server.hits("/empty200/e2/0/0/0.png"), 1)
    }

    /// `emptyStatuses: [400]`: a server answering 400 beyond its zooms gives empty tiles; a 404
    /// (no longer in the list) then fails the region with `httpError`; the default keeps 404 empty.
    func testEmptyStatusesPerRequest() throws {
        try fx.start()
        // Every tile of these regions is empty: they complete only with allowEmpty (issue 29).
        var r400 = server.tilesRequest(["/status/400/es/{z}/{x}/{y}.png"], maxZoom: 1)
        r400["emptyStatuses"] = [400]
        r400["allowEmpty"] = true
        try fx.drop("es400.json", r400)
        var r404 = server.tilesRequest(["/missing/es/{z}/{x}/{y}.png"])
        r404["emptyStatuses"] = [400]
        try fx.drop("es404.json", r404)
        var rdefault = server.tilesRequest(["/missing/esd/{z}/{x}/{y}.png"])
        rdefault["allowEmpty"] = true
        try fx.drop("esdefault.json", rdefault)
        try fx.waitForState("es400", "completed", timeout: 30)
        XCTAssertEqual(fx.manifest("es400").filter { $0.kind == "tile" }.map(\.sha), Array(repeating: "-", count: 5))
        XCTAssertEqual(fx.progress("es400")["tilesCompleted"], 5)
        XCTAssertEqual((fx.status("es400")?["request"] as? [String: Any])?["emptyStatuses"] as? [Int], [400])
        try fx.waitForState("es404", "failed", timeout: 30)
        XCTAssertEqual(fx.errorCode("es404"), "httpError")
        XCTAssertEqual(fx.errorObject("es404")?["httpStatus"] as? Int, 404)
        try fx.waitForState("esdefault", "completed", timeout: 30)
    }
}

extension RealWorldTests {
    // MARK: - A polite client

    /// The default User-Agent names TileSpool, its version and the project URL (the server's
    /// request log is the witness).
    func testDefaultUserAgentNamesTileSpoolVersionAndURL() throws {
        try fx.start()
        try fx.drop("ua.json", server.tilesRequest(["/ok/ua/{z}/{x}/{y}.png"]))
        try fx.waitForState("ua", "completed", timeout: 30)
        let seen = server.requests().filter { $0.path == "/ok/ua/0/0/0.png" }
        XCTAssertEqual(seen.count, 1)
        let ua = seen.first?.headers["User-Agent"] ?? ""
        XCTAssertTrue(ua.hasPrefix("TileSpool/0.1.0 ") && ua.contains("https://"), ua)
    }

    /// `--user-agent` and a request's `headers` (Referer, Authorization) are sent with every
    /// request of the region, the style's documents included; the Authorization value never
    /// appears in the status, events, the daemon's log or anything else in the spool.
    func testUserAgentAndRequestHeadersAreSentAndRedacted() throws {
        let secret = "Bearer s3cret-7f2a9c"
        try server.register("hdr-style.json", json: """
            {"version": 8, "sources": {"t": {"type": "raster", "tiles": ["__BASE__/ok/hdr/{z}/{x}/{y}.png"], "maxzoom": 1}},
             "layers": [{"id": "t", "type": "raster", "source": "t"}]}
            """)
        try fx.start(["--user-agent", "AcmeMaps/2.1 (ops@example.org)"])
        try fx.drop("hdr.json", ["style": server.url("/json/hdr-style.json"), "bounds": [-180, -85, 180, 85],
                                 "minZoom": 0, "maxZoom": 1,
                                 "headers": ["Referer": "https://maps.example.org/", "Authorization": secret]])
        try fx.waitForState("hdr", "completed", timeout: 30)
        let seen = server.requests()
        XCTAssertEqual(seen.filter { $0.path.hasPrefix("/ok/hdr/") }.count, 5, "the 5 tiles of z0-1")
        XCTAssertEqual(seen.filter { $0.path == "/json/hdr-style.json" }.count, 1)
        for r in seen {
            XCTAssertEqual(r.headers["User-Agent"], "AcmeMaps/2.1 (ops@example.org)", r.path)
            XCTAssertEqual(r.headers["Referer"], "https://maps.example.org/", r.path)
            XCTAssertEqual(r.headers["Authorization"], secret, r.path)
        }
        let headers = (fx.status("hdr")?["request"] as? [String: Any])?["headers"] as? [String: String]
        XCTAssertEqual(headers, ["Referer": "REDACTED", "Authorization": "REDACTED"])
        XCTAssertFalse(fx.log().contains("s3cret"), "the daemon's log")
        let spool = FileManager.default.enumerator(atPath: fx.spool)!
        while let name = spool.nextObject() as? String {
            let data = FileManager.default.contents(atPath: "\(fx.spool)/\(name)") ?? Data()
            XCTAssertNil(data.range(of: Data("s3cret".utf8)), "\(name) holds the credential")
        }
    }
}

extension RealWorldTests {
    // MARK: - Retry-After beyond 300 s

    /// The status's `throttledUntil` as seconds from now, or nil when absent.
    func throttledFor(_ id: String) -> Double? {
        guard let s = fx.status(id)?["throttledUntil"] as? String else { return nil }
        let f = ISO8601DateFormatter()
        return f.date(from: s).map { $0.timeIntervalSinceNow }
    }

    /// `Retry-After: 1000` is honoured whole (no longer cut to 300 s) and shown as `throttledUntil`;
    /// `Retry-After: 7200` is cut to the 1 h cap. Meanwhile the server sees no second request
    /// (its log, while another region on the same daemon completes), and a pause clears the field.
    func testLongRetryAfterIsHonouredUpToOneHourAndShown() throws {
        // A throttled region keeps its slot: three slots, so the third region can run.
        try fx.start(["--max-retries", "3", "--retry-delay", "0.05", "--max-active-regions", "3"])
        try fx.drop("ra1000.json", server.tilesRequest(["/retryafter/1000/1/ra/{z}/{x}/{y}.png"]))
        try fx.drop("ra7200.json", server.tilesRequest(["/retryafter/7200/1/rb/{z}/{x}/{y}.png"]))
        try waitUntil("both regions show throttledUntil", timeout: 20) { self.throttledFor("ra1000") != nil && self.throttledFor("ra7200") != nil }
        let a = throttledFor("ra1000")!, b = throttledFor("ra7200")!
        XCTAssertTrue((960...1001).contains(a), "Retry-After 1000 s: throttled for \(a) s")
        XCTAssertTrue((3560...3601).contains(b), "Retry-After 7200 s, capped at 3600 s: throttled for \(b) s")
        XCTAssertEqual(fx.state("ra1000"), "downloading")
        // Time passes on the same daemon: another region is downloaded whole.
        try fx.drop("rc.json", server.tilesRequest(["/ok/rc/{z}/{x}/{y}.png"], maxZoom: 2))
        try fx.waitForState("rc", "completed", timeout: 30)
        XCTAssertEqual(server.hits("/retryafter/1000/1/ra/0/0/0.png"), 1, "asked again before Retry-After")
        XCTAssertEqual(server.hits("/retryafter/7200/1/rb/0/0/0.png"), 1, "asked again before the capped Retry-After")
        try fx.control("ra1000", "pause")
        try fx.waitForState("ra1000", "pausedUser", timeout: 10)
        XCTAssertNil(fx.status("ra1000")?["throttledUntil"], "no download, no throttle")
    }
}

extension RealWorldTests {
    // MARK: - Tile usage policies

    /// A `tiles` request for tile.openstreetmap.org (and an alias with user info, port and
    /// upper case) is refused on arrival with `policyRefused` quoting the policy URL; a style
    /// whose source points at c.tile.openstreetmap.org is refused once its plan is known, before
    /// any tile is asked (the fault server served the style only).
    func testBulkDownloadFromAPolicyHostIsRefused() throws {
        try server.register("osm-style.json", json: """
            {"version": 8, "sources": {"osm": {"type": "raster", "tiles": ["https://c.tile.openstreetmap.org/{z}/{x}/{y}.png"], "maxzoom": 19}},
             "layers": [{"id": "osm", "type": "raster", "source": "osm"}]}
            """)
        try fx.start()
        try fx.drop("osm.json", ["tiles": ["https://tile.openstreetmap.org/{z}/{x}/{y}.png"], "bounds": [7.4, 43.7, 7.5, 43.8], "minZoom": 0, "maxZoom": 2])
        try fx.drop("osmb.json", ["tiles": ["https://user@B.Tile.OpenStreetMap.org:443/{z}/{x}/{y}.png"], "bounds": [7.4, 43.7, 7.5, 43.8], "minZoom": 0, "maxZoom": 2])
        try fx.drop("osmstyle.json", ["style": server.url("/json/osm-style.json"), "bounds": [7.4, 43.7, 7.5, 43.8], "minZoom": 0, "maxZoom": 2])
        for id in ["osm", "osmb", "osmstyle"] {
            try fx.waitForState(id, "failed", timeout: 20)
            XCTAssertEqual(fx.errorCode(id), "policyRefused", id)
            let m = fx.errorMessage(id) ?? ""
            XCTAssertTrue(m.contains("https://operations.osmfoundation.org/policies/tiles/") && m.contains("--allow-host"), m)
        }
        XCTAssertTrue(fx.errorMessage("osmb")?.contains("b.tile.openstreetmap.org") ?? false)
        XCTAssertTrue(fx.inRejected("osm.json"))
        XCTAssertEqual(fx.eventStates("osm"), ["failed"], "refused on arrival, never queued")
        XCTAssertEqual(server.allHits(), ["/json/osm-style.json": 1], "the style only; no tile asked")
    }

    /// `--allow-host tile.openstreetmap.org` lifts the refusal: the request is accepted and tried
    /// (offline here, so it ends `pausedNetwork` with `networkError`, not `policyRefused`).
    func testAllowHostLiftsThePolicy() throws {
        try fx.start(["--allow-host", "tile.openstreetmap.org", "--max-retries", "0", "--connect-timeout", "2"])
        try fx.drop("osmok.json", ["tiles": ["https://tile.openstreetmap.org/{z}/{x}/{y}.png"], "bounds": [7.4, 43.7, 7.5, 43.8], "minZoom": 0, "maxZoom": 0])
        try fx.waitForState("osmok", "pausedNetwork", timeout: 30)
        XCTAssertEqual(fx.errorCode("osmok"), "networkError")
        XCTAssertEqual(Array(fx.eventStates("osmok").prefix(2)), ["queued", "downloading"])
    }
}

extension RealWorldTests {
    // MARK: - Failure budget

    func failedList(_ id: String) -> [String] {
        guard let text = try? String(contentsOfFile: "\(fx.store)/regions/\(id)/failed.tsv", encoding: .utf8) else { return [] }
        return text.split(separator: "\n").filter { !$0.hasPrefix("#") }.map { String($0.split(separator: "\t")[0]) }
    }

    /// `maxFailedTiles: 5`: five tiles that outlive their retries are recorded as failed (sha256
    /// `!`, `tilesFailed`, failed.tsv) and the region completes; verify and an MBTiles export take
    /// them for empty tiles; `resume` then asks again exactly those five (the server's log: each
    /// failing path 2 + 1 times, each good one once) and completes with none failed.
    func testFailureBudgetRecordsFailedTilesAndResumeRetriesExactlyThose() throws {
        try fx.start(["--max-retries", "1", "--retry-delay", "0.05", "--sync-interval", "0.05"])
        var request = server.tilesRequest(["/ok/fb/{z}/{x}/{y}.png", "/flaky/2/fb/{z}/{x}/{y}.png"], maxZoom: 1)
        request["maxFailedTiles"] = 5
        try fx.drop("fb.json", request)
        try fx.waitForState("fb", "completed", timeout: 30)
        let good = FaultServer.worldPaths("/ok/fb/{z}/{x}/{y}.png", maxZoom: 1)
        let flaky = FaultServer.worldPaths("/flaky/2/fb/{z}/{x}/{y}.png", maxZoom: 1)
        XCTAssertEqual(fx.progress("fb")["tilesFailed"], 5)
        XCTAssertEqual(fx.progress("fb")["tilesCompleted"], 10)
        let failedLines = fx.manifest("fb").filter { $0.sha == "!" }
        XCTAssertEqual(Set(failedLines.map(\.url)), Set(flaky.map(server.url)))
        XCTAssertEqual(failedList("fb").count, 5)
        XCTAssertEqual(Set(failedList("fb")), Set(failedLines.map(\.key)))
        for p in flaky { XCTAssertEqual(server.hits(p), 2, "\(p): once and one retry") }
        let (verifyCode, verifyOut) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(verifyCode, 0, verifyOut)
        let mbtiles = fx.root.appendingPathComponent("fb.mbtiles").path
        let (exportCode, exportOut) = try fx.cli(["export", "fb", "--format", "mbtiles", "--output", mbtiles, "--source", "tiles1", "--json", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(exportCode, 0, exportOut)
        let exported = (try? JSONSerialization.jsonObject(with: Data(exportOut.utf8))) as? [String: Any]
        XCTAssertEqual(exported?["tiles"] as? Int, 0, "failed tiles are exported like empty ones (none written): \(exportOut)")

        try fx.control("fb", "resume")
        try waitUntil("fb retried its failed tiles and completed", timeout: 30) {
            self.fx.state("fb") == "completed" && self.fx.progress("fb")["tilesFailed"] == 0
                && (self.fx.status("fb")?["refreshing"] as? Bool) == false
        }
        for p in flaky { XCTAssertEqual(server.hits(p), 3, "\(p): asked exactly once more by the resume") }
        for p in good { XCTAssertEqual(server.hits(p), 1, "\(p): not asked again") }
        XCTAssertEqual(fx.manifest("fb").filter { $0.sha == "!" }.count, 0)
        XCTAssertEqual(Set(fx.manifest("fb").map(\.sha)), Set((good + flaky).map { sha256Hex(FaultServer.okBody($0)) }))
        XCTAssertEqual(failedList("fb"), [], "failed.tsv is gone")
        fx.assertStoreMatchesManifest("fb")
    }

    /// Over the budget the region fails, the message naming `maxFailedTiles`, and failed.tsv lists
    /// the tiles recorded as failed before it.
    func testFailureBudgetExceededFailsTheRegion() throws {
        try fx.start(["--max-retries", "0", "--sync-interval", "0.05"])
        var request = server.tilesRequest(["/error500/fx/{z}/{x}/{y}.png"], maxZoom: 1)
        request["maxFailedTiles"] = 2
        try fx.drop("fx.json", request)
        try fx.waitForState("fx", "failed", timeout: 30)
        XCTAssertEqual(fx.errorCode("fx"), "httpError")
        XCTAssertTrue(fx.errorMessage("fx")?.contains("maxFailedTiles (2)") ?? false, fx.errorMessage("fx") ?? "")
        XCTAssertEqual(failedList("fx").count, 2)
        XCTAssertEqual(fx.manifest("fx").filter { $0.sha == "!" }.count, 2)
        XCTAssertEqual(fx.progress("fx")["tilesFailed"], 2)
    }
}

extension RealWorldTests {
    // MARK: - Region forms: {s} + subdomains, TileJSON bounds

    /// `tilespool plan --json` of `request` (written to a file): its tile total.
    func plannedTiles(_ request: [String: Any], name: String) throws -> Int? {
        let path = fx.root.appendingPathComponent(name).path
        try jsonData(request).write(to: URL(fileURLWithPath: path))
        let (code, out) = try fx.cli(["plan", path, "--json"])
        XCTAssertEqual(code, 0, out)
        return ((try? JSONSerialization.jsonObject(with: Data(out.utf8))) as? [String: Any])?["tiles"] as? Int
    }

    /// `{s}` with `subdomains: ["s1", "s2"]`: tile (x, y) comes from `s[(x + y) % 2]` (Leaflet's
    /// rule; the server's log shows which), the manifest keys tiles by z/x/y, and `tilespool plan`
    /// counts what was downloaded.
    func testSubdomainsSpreadRequestsAndKeysStayZXY() throws {
        try fx.start()
        var request = server.tilesRequest(["/ok/sd/{s}/{z}/{x}/{y}.png"], maxZoom: 2)
        request["subdomains"] = ["s1", "s2"]
        try fx.drop("sd.json", request)
        try fx.waitForState("sd", "completed", timeout: 30)
        var expected: Set<String> = []
        for z in 0...2 { for x in 0..<(1 << z) { for y in 0..<(1 << z) { expected.insert("/ok/sd/\((x + y) % 2 == 0 ? "s1" : "s2")/\(z)/\(x)/\(y).png") } } }
        XCTAssertEqual(Set(server.allHits().keys), expected)
        XCTAssertTrue(server.allHits().values.allSatisfy { $0 == 1 })
        let keys = Set(fx.manifest("sd").map(\.key))
        XCTAssertTrue(keys.contains("tiles0/2/1/2") && keys.count == 21, "\(keys.sorted().prefix(5))")
        XCTAssertEqual(try plannedTiles(request, name: "sd-plan.json"), 21)
    }

    /// A TileJSON whose `bounds` cover the north-east quarter: only the tiles inside are planned
    /// and asked (6 of the world's 21 over z0-2), and `tilespool plan` agrees.
    func testTileJSONBoundsLimitThePlannedTiles() throws {
        try server.register("tb-tilejson.json", json: """
            {"tilejson": "3.0.0", "tiles": ["__BASE__/ok/tb/{z}/{x}/{y}.pbf"], "bounds": [0.5, 0.5, 179, 80], "maxzoom": 2}
            """)
        try server.register("tb-style.json", json: """
            {"version": 8, "sources": {"v": {"type": "vector", "url": "__BASE__/json/tb-tilejson.json"}}, "layers": []}
            """)
        try fx.start()
        let request: [String: Any] = ["id": "tb", "style": server.url("/json/tb-style.json"), "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 2]
        try fx.drop("tb.json", request)
        try fx.waitForState("tb", "completed", timeout: 30)
        let asked = Set(server.allHits().keys.filter { $0.hasPrefix("/ok/tb/") })
        XCTAssertEqual(asked, ["/ok/tb/0/0/0.pbf", "/ok/tb/1/1/0.pbf", "/ok/tb/2/2/0.pbf", "/ok/tb/2/3/0.pbf", "/ok/tb/2/2/1.pbf", "/ok/tb/2/3/1.pbf"])
        XCTAssertEqual(fx.progress("tb")["tilesExpected"], 6)
        XCTAssertEqual(try plannedTiles(request, name: "tb-plan.json"), 6)
    }
}

extension RealWorldTests {
    // MARK: - Region forms: FeatureCollection, antimeridian

    /// A polygon given across the antimeridian as 170...190 (lat -10...10) is split, not refused:
    /// at z3 exactly the tiles either side of ±180 are asked (x 7 and x 0, rows 3-4), 13 over
    /// z0-3, and `tilespool plan` counts the same.
    func testAntimeridianShapeBeyond180IsSplit() throws {
        try fx.start()
        var request = server.tilesRequest(["/ok/am/{z}/{x}/{y}.png"], maxZoom: 3)
        request.removeValue(forKey: "bounds")
        request["geometry"] = ["type": "Polygon", "coordinates": [[[170, -10], [190, -10], [190, 10], [170, 10], [170, -10]]]]
        try fx.drop("am.json", request)
        try fx.waitForState("am", "completed", timeout: 30)
        let z3 = Set(server.allHits().keys.filter { $0.hasPrefix("/ok/am/3/") })
        XCTAssertEqual(z3, ["/ok/am/3/7/3.png", "/ok/am/3/7/4.png", "/ok/am/3/0/3.png", "/ok/am/3/0/4.png"])
        XCTAssertEqual(server.allHits().count, 13)
        XCTAssertEqual(try plannedTiles(request, name: "am-plan.json"), 13)
    }

    /// The download's cursor crosses a shape's empty rows (between a speck at 60° S and the rest,
    /// 100° apart), the columns between its pieces (a U open to the north) and a hole in one step
    /// each (`Download.unplannedRun`): the tiles asked are exactly those of every row worked out
    /// against every edge, z0-8, each once, and `tilespool plan` counts as many.
    func testAShapesEmptyRowsColumnsAndHolesAreCrossedAndEveryTileAsked() throws {
        try fx.start()
        let square: [[[Double]]] = [[[40, 40], [52, 40], [52, 50], [40, 50], [40, 40]], [[43, 43], [49, 43], [49, 47], [43, 47], [43, 43]]]
        let u: [[[Double]]] = [[[0, 0], [30, 0], [30, 20], [25, 20], [25, 5], [5, 5], [5, 20], [0, 20], [0, 0]]]
        let speck: [[[Double]]] = [[[12, -60], [12.01, -60], [12.01, -59.99], [12, -59.99], [12, -60]]]
        var request = server.tilesRequest(["/ok/holes/{z}/{x}/{y}.png"], maxZoom: 8)
        request.removeValue(forKey: "bounds")
        request["geometry"] = ["type": "MultiPolygon", "coordinates": [square, u, speck]]
        try fx.drop("holes.json", request)
        try fx.waitForState("holes", "completed", timeout: 60)
        let shape = RegionShape(polygons: [square, u, speck])
        var expected = Set<String>()
        for z in 0...8 {
            let rings = shape.projected(z: z)
            for rect in WebMercator.cover(shape.bounds, z: z) {
                for y in rect.minY...rect.maxY {
                    for c in shape.columns(z: z, y: y, rings: rings) where c.upperBound >= rect.minX && c.lowerBound <= rect.maxX {
                        for x in max(c.lowerBound, rect.minX)...min(c.upperBound, rect.maxX) { expected.insert("/ok/holes/\(z)/\(x)/\(y).png") }
                    }
                }
            }
        }
        let hits = server.allHits()
        XCTAssertEqual(Set(hits.keys), expected)
        XCTAssertEqual(hits.values.filter { $0 != 1 }.count, 0, "each tile asked once")
        XCTAssertGreaterThan(expected.count, 400)
        XCTAssertFalse(expected.contains("/ok/holes/8/160/92.png"), "the hole's middle (46° E, 45° N) is left out")
        XCTAssertEqual(try plannedTiles(request, name: "holes-plan.json"), expected.count)
        XCTAssertEqual(fx.progress("holes")["tilesCompleted"], expected.count)
    }

    /// A FeatureCollection (as geojson.io exports it) of two polygons is their union: the tiles
    /// downloaded are those of either polygon, and `tilespool plan` counts the same.
    func testFeatureCollectionIsTheUnionOfItsPolygons() throws {
        try fx.start()
        func feature(_ w: Double, _ s: Double, _ e: Double, _ n: Double) -> [String: Any] {
            ["type": "Feature", "properties": [:] as [String: Any],
             "geometry": ["type": "Polygon", "coordinates": [[[w, s], [e, s], [e, n], [w, n], [w, s]]]]]
        }
        var request = server.tilesRequest(["/ok/fc/{z}/{x}/{y}.png"], maxZoom: 3)
        request.removeValue(forKey: "bounds")
        request["geometry"] = ["type": "FeatureCollection", "features": [feature(10, 10, 20, 20), feature(100, -30, 110, -20)]]
        try fx.drop("fc.json", request)
        try fx.waitForState("fc", "completed", timeout: 30)
        // z3 tiles are 45° wide: (10..20, 10..20) is x 4 row 3; (100..110, -30..-20) is x 6 row 4.
        XCTAssertEqual(Set(server.allHits().keys.filter { $0.hasPrefix("/ok/fc/3/") }), ["/ok/fc/3/4/3.png", "/ok/fc/3/6/4.png"])
        let planned = try plannedTiles(request, name: "fc-plan.json")
        XCTAssertEqual(planned, server.allHits().count)
        XCTAssertEqual(fx.progress("fc")["tilesCompleted"], planned)
    }
}
