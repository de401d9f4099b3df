// Issue 8: packs out. Each export is opened by a client nobody here wrote: Qt Location's mapboxgl
// plugin (a MapLibre-family renderer), MapLibre's own merge SQL run by sqlite3, MapLibre GL JS in
// headless Chromium, GDAL, mb-util and the PyPI pmtiles reader.
import Foundation
import TileSpoolCore
import TileSpoolIO
import XCTest

/// Runs a program to completion; returns (exit status, stdout + stderr).
@discardableResult
func runTool(_ exe: String, _ args: [String], env: [String: String] = [:], cwd: String? = nil) throws -> (Int32, String) {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: exe)
    p.arguments = args
    if !env.isEmpty { p.environment = ProcessInfo.processInfo.environment.merging(env) { _, b in b } }
    if let cwd { p.currentDirectoryURL = URL(fileURLWithPath: cwd) }
    let pipe = Pipe()
    p.standardOutput = pipe
    p.standardError = pipe
    try p.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    return (p.terminationStatus, String(decoding: data, as: UTF8.self))
}

/// sqlite3's answer to `sql` on `db` (one value per line, `|` between columns).
func sqlite(_ db: String, _ sql: String) throws -> String {
    let (rc, out) = try runTool("/usr/bin/sqlite3", [db, sql])
    XCTAssertEqual(rc, 0, out)
    return out.trimmingCharacters(in: .whitespacesAndNewlines)
}

enum ExportTools {
    static var support: String { MapData.packageRoot.appendingPathComponent("Tests/Support").path }
    static var venv: String { MapData.packageRoot.appendingPathComponent(".build/py").path }
    static var python: String { venv + "/bin/python" }

    /// Fails the test (with the make target to run) when a reader is not installed.
    static func require(_ paths: [String], file: StaticString = #filePath, line: UInt = #line) throws {
        for p in paths where !FileManager.default.isExecutableFile(atPath: p) {
            XCTFail("\(p) is missing: run `make deps`", file: file, line: line)
            throw SupportError("\(p) missing")
        }
    }
}

final class ExportTests: XCTestCase {
    var mapdata: URL!
    var nginx: NginxServer!
    var fx: SpoolFixture!
    var others: [NginxServer] = []

    static let monacoBounds = [7.409205, 43.72335, 7.448637, 43.75169]

    override func setUpWithError() throws {
        mapdata = try MapData.require()
        nginx = try NginxServer(root: mapdata)
        fx = try SpoolFixture()
        try fx.start()
    }

    override func tearDown() {
        fx?.stop()
        nginx?.stop()
        for s in others { s.stop() }
        others = []
    }

    var styleURL: String { nginx.baseURL + "/styles/bright/style.local-template.json" }

    func completeMonaco(_ extra: [String: Any] = [:]) throws {
        var r: [String: Any] = ["style": styleURL, "bounds": ExportTests.monacoBounds, "minZoom": 0, "maxZoom": 14,
                                "context": ["vehicle": 7]]
        for (k, v) in extra { r[k] = v }
        try fx.drop("monaco.json", r)
        try fx.waitForState("monaco", "completed")
    }

    func completeToner(id: String = "toner", geometry: [String: Any]? = nil) throws {
        var r: [String: Any] = ["id": id, "tiles": [nginx.baseURL + "/raster/stamen_toner/{z}/{x}/{y}.png"], "minZoom": 0, "maxZoom": 3]
        if let geometry { r["geometry"] = geometry } else { r["bounds"] = [-180, -85, 180, 85] }
        try fx.drop(id + ".json", r)
        try fx.waitForState(id, "completed")
    }

    func export(_ args: [String], file: StaticString = #filePath, line: UInt = #line) throws -> [String: Any] {
        let (rc, out) = try fx.cli(["export"] + args + ["--spool", fx.spool, "--store", fx.store, "--json"])
        XCTAssertEqual(rc, 0, out, file: file, line: line)
        return (try? JSONSerialization.jsonObject(with: Data(out.utf8))) as? [String: Any] ?? [:]
    }

    // MARK: - MapLibre offline database

    /// The database MapLibre would write: schema v6, the exact definition, every resource under
    /// MapLibre's URL, decoded bodies zlib-compressed only where smaller, far-future expiry.
    func testMapLibreDatabaseHasMapLibresRowsAndURLs() throws {
        try completeMonaco()
        let db = fx.root.appendingPathComponent("monaco.db").path
        let r = try export(["monaco", "--format", "maplibre", "--output", db])
        XCTAssertEqual(r["tiles"] as? Int, 23)
        XCTAssertEqual(r["sha256"] as? String, sha256sum([db])[db])
        XCTAssertEqual(try sqlite(db, "PRAGMA user_version; PRAGMA journal_mode;"), "6\ndelete")
        XCTAssertEqual(try sqlite(db, "SELECT definition FROM regions"),
                       #"{"style_url":"\#(styleURL)","bounds":[43.72335,7.409205,43.75169,7.448637],"min_zoom":0.0,"max_zoom":14.0,"pixel_ratio":1.0,"include_ideographs":false}"#)
        XCTAssertEqual(try sqlite(db, "SELECT CAST(description AS TEXT) FROM regions"), #"{"vehicle":7}"#)
        // Kinds: style, TileJSON, 390 glyph ranges, 2 sprite images, 2 sprite JSON; all linked.
        XCTAssertEqual(try sqlite(db, "SELECT kind, count(*) FROM resources GROUP BY kind ORDER BY kind"), "1|1\n2|1\n4|390\n5|2\n6|2")
        XCTAssertEqual(try sqlite(db, "SELECT count(*) FROM region_resources WHERE region_id = 1"), "396")
        // Two rows without data: the sea tile (404) and z0 (a gzip of nothing: an empty tile since issue 10).
        XCTAssertEqual(try sqlite(db, "SELECT count(*), sum(data IS NULL) FROM tiles"), "23|2")
        XCTAssertEqual(try sqlite(db, "SELECT count(*) FROM region_tiles"), "23")
        // The sea tile (404) is a row with NULL data; tiles are keyed by the TileJSON's template.
        XCTAssertEqual(try sqlite(db, "SELECT url_template, pixel_ratio FROM tiles WHERE z = 14 AND x = 8530 AND y = 5975 AND data IS NULL"),
                       nginx.baseURL + "/tiles/monaco/{z}/{x}/{y}.pbf|1")
        // Glyph URLs as MapLibre builds them: lower-case percent-encoding.
        XCTAssertEqual(try sqlite(db, "SELECT count(*) FROM resources WHERE kind = 4 AND url LIKE '%KlokanTech\u{25}20Noto\u{25}20Sans\u{25}20Bold/0-255.pbf'"), "1")
        XCTAssertEqual(try sqlite(db, "SELECT count(*) FROM resources WHERE url GLOB '*%[0-9][A-F]*'"), "0")
        // Compressed rows are zlib (78 9c), never gzip; a tile's bytes decode to the served MVT.
        XCTAssertEqual(try sqlite(db, "SELECT count(*) FROM tiles WHERE compressed = 1 AND hex(substr(data, 1, 1)) <> '78'"), "0")
        XCTAssertEqual(try sqlite(db, "SELECT count(*) FROM tiles WHERE hex(substr(data, 1, 2)) = '1F8B'"), "0")
        XCTAssertEqual(try sqlite(db, "SELECT count(*) FROM resources WHERE expires <> 253402300799 OR must_revalidate <> 0 OR modified IS NULL"), "0")
        let zhex = try sqlite(db, "SELECT compressed || ' ' || hex(data) FROM tiles WHERE z = 14 AND x = 8529 AND y = 5973")
        let parts = zhex.split(separator: " ")
        XCTAssertEqual(parts.count, 2)
        let blob = Data(hex: String(parts[1]))
        let body = parts[0] == "1" ? try XCTUnwrap(zlibInflate(blob)) : blob
        XCTAssertEqual(body, gunzip(mapdata.path + "/tiles/monaco/14/8529/5973.pbf"))
    }

    /// MapLibre's own merge (maplibre-native `merge_sideloaded.sql`, the statements
    /// `mergeOfflineRegions` / `addContentsOfURL` run) imports the region into an empty v6 database
    /// with every row linked.
    func testMapLibreMergeImportsEveryRow() throws {
        try completeMonaco()
        let side = fx.root.appendingPathComponent("side.db").path
        _ = try export(["monaco", "--format", "maplibre", "--output", side])
        let main = fx.root.appendingPathComponent("main.db").path
        let schema = try sqlite(side, ".schema")
        XCTAssertEqual(try runTool("/usr/bin/sqlite3", [main, schema.replacingOccurrences(of: "CREATE TABLE sqlite_sequence(name,seq);", with: "") + "\nPRAGMA user_version = 6;"]).0, 0)
        // The merge's semantics: regions by definition+description, then tiles and resources
        // linked to the side region (replacing only older rows), then the links.
        let merge = """
        ATTACH DATABASE '\(side)' AS side;
        INSERT INTO regions SELECT DISTINCT NULL, sr.definition, sr.description FROM side.regions sr
          LEFT JOIN regions r ON sr.definition = r.definition AND sr.description IS r.description WHERE r.definition IS NULL;
        CREATE TEMPORARY TABLE region_mapping AS SELECT sr.id AS side_region_id, r.id AS main_region_id
          FROM side.regions sr JOIN regions r ON sr.definition = r.definition AND sr.description IS r.description;
        REPLACE INTO tiles SELECT t.id, st.url_template, st.pixel_ratio, st.z, st.x, st.y, st.expires, st.modified, st.etag,
            st.data, st.compressed, st.accessed, st.must_revalidate
          FROM (SELECT DISTINCT sti.* FROM side.region_tiles srt JOIN side.tiles sti ON srt.tile_id = sti.id) AS st
          LEFT JOIN tiles t ON st.url_template = t.url_template AND st.pixel_ratio = t.pixel_ratio AND st.z = t.z AND st.x = t.x AND st.y = t.y
          WHERE t.id IS NULL OR st.modified > t.modified;
        INSERT OR IGNORE INTO region_tiles SELECT rm.main_region_id, sti.id FROM side.region_tiles srt
          JOIN region_mapping rm ON srt.region_id = rm.side_region_id
          JOIN (SELECT t.id, st.id AS side_tile_id FROM side.tiles st JOIN tiles t ON st.url_template = t.url_template
                AND st.pixel_ratio = t.pixel_ratio AND st.z = t.z AND st.x = t.x AND st.y = t.y) AS sti ON srt.tile_id = sti.side_tile_id;
        REPLACE INTO resources SELECT r.id, sr.url, sr.kind, sr.expires, sr.modified, sr.etag, sr.data, sr.compressed, sr.accessed, sr.must_revalidate
          FROM side.region_resources srr JOIN side.resources sr ON srr.resource_id = sr.id
          LEFT JOIN resources r ON sr.url = r.url WHERE r.id IS NULL OR sr.modified > r.modified;
        INSERT OR IGNORE INTO region_resources SELECT rm.main_region_id, sri.id FROM side.region_resources srr
          JOIN region_mapping rm ON srr.region_id = rm.side_region_id
          JOIN (SELECT r.id, sr.id AS side_resource_id FROM side.resources sr JOIN resources r ON sr.url = r.url) AS sri
            ON srr.resource_id = sri.side_resource_id;
        DROP TABLE region_mapping;
        SELECT (SELECT count(*) FROM regions), (SELECT count(*) FROM tiles), (SELECT count(*) FROM region_tiles),
               (SELECT count(*) FROM resources), (SELECT count(*) FROM region_resources),
               (SELECT count(*) FROM tiles t JOIN side.tiles s USING (url_template, pixel_ratio, z, x, y) WHERE t.data IS s.data);
        """
        XCTAssertEqual(try sqlite(main, merge), "1|23|23|396|396|23")
    }

    /// The database renders in a MapLibre-family client (Qt Location's mapboxgl plugin) with the
    /// origin server stopped; an empty database is the control and renders a flat colour.
    func testMapLibreDatabaseRendersOfflineInQtMapboxGL() throws {
        try ExportTools.require(["/usr/bin/qmlscene", "/usr/bin/xvfb-run"])
        try completeMonaco()
        let db = fx.root.appendingPathComponent("monaco.db").path
        _ = try export(["monaco", "--format", "maplibre", "--output", db])
        let style = styleURL
        nginx.stop() // offline from here on
        XCTAssertFalse(Loopback.canConnect(port: nginx.port))
        let shot = fx.root.appendingPathComponent("qt.png").path
        let (rc, log) = try runTool(ExportTools.support + "/render_qt.sh", [db, style, "43.7384", "7.4246", "14", shot, "8"])
        XCTAssertEqual(rc, 0, log)
        let (flat, measure) = try runTool(ExportTools.support + "/image_flat.sh", [shot])
        XCTAssertEqual(flat, 0, "the offline render is a flat colour: \(measure)\n\(log.suffix(3000))")
        XCTAssertFalse(log.contains("loading style failed"), log)
        // Control: the same client and style with an empty database renders nothing.
        let empty = fx.root.appendingPathComponent("empty.png").path
        XCTAssertEqual(try runTool(ExportTools.support + "/render_qt.sh", ["-", style, "43.7384", "7.4246", "14", empty, "8"]).0, 0)
        XCTAssertEqual(try runTool(ExportTools.support + "/image_flat.sh", [empty]).0, 1)
    }

    // MARK: - Site

    /// The site renders in MapLibre GL JS (headless Chromium) served by nginx with the generated
    /// snippet, with the origin stopped and no failed request in nginx's log.
    func testSiteRendersInMapLibreGLJSWithOriginStopped() throws {
        try ExportTools.require(["/usr/bin/chromium", "/usr/bin/chromedriver", ExportTools.python])
        try completeMonaco()
        let site = fx.root.appendingPathComponent("monaco-site").path
        // First without a base URL (relative paths) to get the nginx snippet, then served by it.
        _ = try export(["monaco", "--format", "site", "--output", site])
        let js = ExportTools.venv + "/lib/python3.11/site-packages/maplibre/srcjs"
        let viewer = fx.root.appendingPathComponent("viewer").path
        try FileManager.default.createDirectory(atPath: viewer, withIntermediateDirectories: true)
        for f in ["maplibre-gl.js", "maplibre-gl.css"] { try FileManager.default.copyItem(atPath: js + "/" + f, toPath: viewer + "/" + f) }
        try FileManager.default.copyItem(atPath: ExportTools.support + "/site_viewer.html", toPath: viewer + "/index.html")
        let web = try NginxServer(root: URL(fileURLWithPath: viewer), extraLocations: """
            include \(site)/nginx.conf;
            location ^~ /viewer/ {
                alias \(viewer)/;
                types { text/html html; application/javascript js; text/css css; }
            }
            """)
        others.append(web)
        // Again with the URL it is served at: absolute URLs in style.json, same snippet.
        let r = try export(["monaco", "--format", "site", "--output", site, "--force", "--base-url", web.baseURL + "/monaco/"])
        XCTAssertEqual(r["tiles"] as? Int, 23)
        nginx.stop()
        let style = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: site + "/style.json"))) as? [String: Any])
        XCTAssertEqual(style["glyphs"] as? String, web.baseURL + "/monaco/fonts/{fontstack}/{range}.pbf")
        XCTAssertFalse(String(decoding: try Data(contentsOf: URL(fileURLWithPath: site + "/style.json")), as: UTF8.self).contains(nginx.baseURL))
        // Tiles are copies of the store's objects (a packed object has no file to link to), so
        // editing a site never touches the store.
        let tileLine = try XCTUnwrap(fx.manifest("monaco").first { $0.key == "openmaptiles/14/8529/5973" })
        let a = try FileManager.default.attributesOfItem(atPath: site + "/tiles/openmaptiles/14/8529/5973.pbf")
        XCTAssertEqual(a[.referenceCount] as? Int, 1)
        XCTAssertEqual(FileManager.default.contents(atPath: site + "/tiles/openmaptiles/14/8529/5973.pbf"), fx.objectData(tileLine.sha))

        let page = web.baseURL + "/viewer/index.html?style=" + (web.baseURL + "/monaco/style.json").addingPercentEncoding(withAllowedCharacters: .alphanumerics)! + "&lat=43.7384&lon=7.4246&zoom=13"
        let shot = fx.root.appendingPathComponent("site.png").path
        let (rc, title) = try runTool("/usr/bin/python3", [ExportTools.support + "/render_site.py", page, shot, "90"])
        XCTAssertEqual(rc, 0, title)
        XCTAssertEqual(try runTool(ExportTools.support + "/image_flat.sh", [shot]).0, 0)
        let log = web.accessLog()
        XCTAssertTrue(log.contains { $0.path.hasPrefix("/monaco/tiles/openmaptiles/") && $0.status == 200 })
        XCTAssertTrue(log.contains { $0.path.hasPrefix("/monaco/fonts/") && $0.status == 200 })
        XCTAssertEqual(log.filter { $0.status >= 400 && $0.path != "/favicon.ico" }.map { "\($0.status) \($0.uri)" }, [])
    }

    // MARK: - MBTiles

    /// A vector MBTiles that GDAL reads with its layers, and a raster one that GDAL renders and
    /// mb-util unpacks to the very bytes the server sent; identical tiles stored once.
    func testMBTilesOpenInGDALAndMbUtil() throws {
        try ExportTools.require(["/usr/bin/ogrinfo", "/usr/bin/gdal_translate", ExportTools.venv + "/bin/mb-util"])
        try completeMonaco()
        try completeToner()
        let vec = fx.root.appendingPathComponent("monaco.mbtiles").path
        // 23 planned, less the sea tile (404) and z0, which decodes to 0 bytes (an empty tile).
        XCTAssertEqual(try export(["monaco", "--format", "mbtiles", "--output", vec])["tiles"] as? Int, 21)
        XCTAssertEqual(try sqlite(vec, "PRAGMA application_id"), "1297105496")
        XCTAssertEqual(try sqlite(vec, "SELECT value FROM metadata WHERE name IN ('format', 'minzoom', 'maxzoom') ORDER BY name"), "pbf\n14\n0")
        XCTAssertEqual(try sqlite(vec, "SELECT count(*) FROM tiles WHERE hex(substr(tile_data, 1, 2)) <> '1F8B'"), "0")
        // TMS rows: z14 x8529 y5973 is row 2^14-1-5973.
        XCTAssertEqual(try sqlite(vec, "SELECT count(*) FROM tiles WHERE zoom_level = 14 AND tile_column = 8529 AND tile_row = \((1 << 14) - 1 - 5973)"), "1")
        let (orc, info) = try runTool("/usr/bin/ogrinfo", ["-ro", "-so", vec])
        XCTAssertEqual(orc, 0, info)
        let layers = info.split(separator: "\n").compactMap { l -> String? in
            guard let r = l.range(of: ": "), Int(l[..<r.lowerBound]) != nil else { return nil }
            return String(l[r.upperBound...].split(separator: " ").first ?? "")
        }
        for layer in ["water", "transportation", "building"] { XCTAssertTrue(layers.contains(layer), info) }

        let ras = fx.root.appendingPathComponent("toner.mbtiles").path
        XCTAssertEqual(try export(["toner", "--format", "mbtiles", "--output", ras])["tiles"] as? Int, 85)
        XCTAssertEqual(try sqlite(ras, "SELECT (SELECT count(*) FROM map), (SELECT count(*) FROM images)"), "85|80")
        let tif = fx.root.appendingPathComponent("toner.tif").path
        let (grc, gout) = try runTool("/usr/bin/gdal_translate", ["-q", "-outsize", "256", "256", ras, tif])
        XCTAssertEqual(grc, 0, gout)
        XCTAssertGreaterThan(Files.size(tif) ?? 0, 100_000)
        let tree = fx.root.appendingPathComponent("mbutil").path
        let (mrc, mout) = try runTool(ExportTools.venv + "/bin/mb-util", ["--image_format=png", ras, tree])
        XCTAssertEqual(mrc, 0, mout)
        let served = mapdata.path + "/raster/stamen_toner"
        let ours = pngFiles(tree), theirs = pngFiles(served)
        XCTAssertEqual(ours.count, 85)
        XCTAssertEqual(ours, theirs)
        let a = sha256sum(ours.map { tree + "/" + $0 }), b = sha256sum(theirs.map { served + "/" + $0 })
        XCTAssertEqual(ours.map { a[tree + "/" + $0] }, theirs.map { b[served + "/" + $0] })
    }

    func pngFiles(_ dir: String) -> [String] {
        (FileManager.default.enumerator(atPath: dir)?.allObjects as? [String] ?? []).filter { $0.hasSuffix(".png") }.sorted()
    }

    // MARK: - PMTiles

    /// The PyPI pmtiles reader returns every tile equal to the served bytes; header counts right;
    /// run lengths and shared bodies for the toner's identical ocean tiles.
    func testPMTilesReadByThePMTilesReader() throws {
        try ExportTools.require([ExportTools.python])
        try completeMonaco()
        try completeToner()
        let vec = fx.root.appendingPathComponent("monaco.pmtiles").path
        _ = try export(["monaco", "--format", "pmtiles", "--output", vec])
        let v = try checkPMTiles(vec, served: mapdata.path + "/tiles/monaco", ext: "pbf")
        XCTAssertEqual(v["tiles_read"] as? Int, 21, "23 less the sea tile and the empty z0")
        XCTAssertEqual(v["differ_count"] as? Int, 0, "\(v)")
        XCTAssertEqual(v["addressed_tiles_count"] as? Int, 21)
        XCTAssertEqual(v["tile_type"] as? Int, 1)
        XCTAssertEqual(v["tile_compression"] as? Int, 2)
        XCTAssertEqual(v["min_zoom"] as? Int, 1, "z0 decodes to 0 bytes: an empty tile, not in the archive")
        XCTAssertEqual(v["max_zoom"] as? Int, 14)
        XCTAssertGreaterThan(v["vector_layers"] as? Int ?? 0, 5)

        let ras = fx.root.appendingPathComponent("toner.pmtiles").path
        _ = try export(["toner", "--format", "pmtiles", "--output", ras])
        let r = try checkPMTiles(ras, served: mapdata.path + "/raster/stamen_toner", ext: "png")
        XCTAssertEqual(r["tiles_read"] as? Int, 85)
        XCTAssertEqual(r["differ_count"] as? Int, 0, "\(r)")
        XCTAssertEqual(r["addressed_tiles_count"] as? Int, 85)
        XCTAssertEqual(r["tile_contents_count"] as? Int, 80)
        XCTAssertLessThan(r["tile_entries_count"] as? Int ?? 99, 85) // consecutive identical tiles share an entry
        XCTAssertEqual(r["tile_type"] as? Int, 2)
        XCTAssertEqual(r["clustered"] as? Bool, true)
    }

    func checkPMTiles(_ file: String, served: String, ext: String) throws -> [String: Any] {
        let (rc, out) = try runTool(ExportTools.python, [ExportTools.support + "/check_pmtiles.py", file, served, ext])
        XCTAssertEqual(rc, 0, out)
        return (try? JSONSerialization.jsonObject(with: Data(out.utf8))) as? [String: Any] ?? [:]
    }

    // MARK: - Regions of every kind, and what is refused

    /// A GeoJSON region exports exactly its planned tiles in every format.
    func testGeometryRegionExportsItsTiles() throws {
        try ExportTools.require([ExportTools.python])
        let poly: [String: Any] = ["type": "Polygon", "coordinates": [[[-10, 35], [30, 35], [30, 60], [-10, 60], [-10, 35]]]]
        try completeToner(id: "europe", geometry: poly)
        let tiles = fx.manifest("europe").filter { $0.kind == "tile" }.count
        XCTAssertLessThan(tiles, 85)
        XCTAssertEqual(try export(["europe", "--format", "mbtiles", "--output", fx.root.appendingPathComponent("e.mbtiles").path])["tiles"] as? Int, tiles)
        let pm = fx.root.appendingPathComponent("e.pmtiles").path
        _ = try export(["europe", "--format", "pmtiles", "--output", pm])
        let r = try checkPMTiles(pm, served: mapdata.path + "/raster/stamen_toner", ext: "png")
        XCTAssertEqual(r["tiles_read"] as? Int, tiles)
        XCTAssertEqual(r["differ_count"] as? Int, 0)
        let site = try export(["europe", "--format", "site", "--output", fx.root.appendingPathComponent("e-site").path])
        XCTAssertEqual(site["tiles"] as? Int, tiles)
    }

    /// Two tile sources need --source; a region that is not completed, an existing output without
    /// --force, and a maplibre export of a tiles request are refused with exit 1 and a message.
    func testRefusalsNameTheProblem() throws {
        try fx.drop("two.json", ["tiles": [nginx.baseURL + "/raster/stamen_toner/{z}/{x}/{y}.png", nginx.baseURL + "/raster/osm_carto/{z}/{x}/{y}.png"],
                                 "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 1])
        try fx.waitForState("two", "completed")
        let out = fx.root.appendingPathComponent("two.mbtiles").path
        var (rc, msg) = try fx.cli(["export", "two", "--format", "mbtiles", "--output", out, "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 1)
        XCTAssertTrue(msg.contains("2 tile sources (tiles0, tiles1)") && msg.contains("--source"), msg)
        XCTAssertFalse(FileManager.default.fileExists(atPath: out))
        XCTAssertEqual(try export(["two", "--format", "mbtiles", "--source", "tiles1", "--output", out])["tiles"] as? Int, 5)
        (rc, msg) = try fx.cli(["export", "two", "--format", "mbtiles", "--source", "tiles0", "--output", out, "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 1)
        XCTAssertTrue(msg.contains("exists (use --force"), msg)
        XCTAssertEqual(try export(["--force", "two", "--format", "mbtiles", "--source", "tiles0", "--output", out])["source"] as? String, "tiles0")
        (rc, msg) = try fx.cli(["export", "two", "--format", "maplibre", "--output", out + ".db", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 1)
        XCTAssertTrue(msg.contains("needs a style"), msg)
        // A region that is not completed (its server is down: pausedNetwork) is not exported.
        try fx.drop("down.json", ["tiles": ["http://127.0.0.1:9/{z}/{x}/{y}.png"], "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 1])
        try fx.waitForState("down", "pausedNetwork")
        (rc, msg) = try fx.cli(["export", "down", "--format", "pmtiles", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 1)
        XCTAssertTrue(msg.contains("region 'down' is pausedNetwork, not completed"), msg)
        (rc, msg) = try fx.cli(["export", "nosuch", "--format", "pmtiles", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 1)
        XCTAssertTrue(msg.contains("no region 'nosuch'"), msg)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: fx.spool + "/exports"), [])
    }

    /// A style with two sources (liberty: a vector TileJSON source and an inline raster one):
    /// single-source formats need --source and name both; each source exports in its own format;
    /// the MapLibre database and the site carry both.
    func testStyleWithTwoSources() throws {
        try fx.drop("li.json", ["style": nginx.baseURL + "/styles/liberty/style.local-template.json",
                                "bounds": [9.4717, 47.0484, 9.6357, 47.2706], "minZoom": 0, "maxZoom": 8])
        try fx.waitForState("li", "completed")
        let (rc, msg) = try fx.cli(["export", "li", "--format", "pmtiles", "--output", fx.root.appendingPathComponent("x.pmtiles").path,
                                    "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 1)
        XCTAssertTrue(msg.contains("2 tile sources (natural_earth_shaded_relief, openmaptiles): choose one with --source"), msg)
        let ras = fx.root.appendingPathComponent("relief.mbtiles").path
        let r = try export(["li", "--format", "mbtiles", "--source", "natural_earth_shaded_relief", "--output", ras])
        let rasterTiles = fx.manifest("li").filter { $0.key.hasPrefix("natural_earth_shaded_relief/") && $0.sha != "-" }.count
        XCTAssertEqual(r["tiles"] as? Int, rasterTiles)
        XCTAssertEqual(try sqlite(ras, "SELECT value FROM metadata WHERE name = 'format'"), "png")
        let vec = fx.root.appendingPathComponent("vec.mbtiles").path
        _ = try export(["li", "--format", "mbtiles", "--source", "openmaptiles", "--output", vec])
        XCTAssertEqual(try sqlite(vec, "SELECT value FROM metadata WHERE name = 'format'"), "pbf")
        let db = fx.root.appendingPathComponent("li.db").path
        _ = try export(["li", "--format", "maplibre", "--output", db])
        XCTAssertEqual(try sqlite(db, "SELECT url_template FROM tiles GROUP BY url_template ORDER BY url_template"),
                       "\(nginx.baseURL)/raster/osm_carto/{z}/{x}/{y}.png\n\(nginx.baseURL)/tiles/liechtenstein/{z}/{x}/{y}.pbf")
        let site = fx.root.appendingPathComponent("li-site").path
        _ = try export(["li", "--format", "site", "--output", site, "--base-url", "http://maps.test/li/"])
        let style = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: site + "/style.json"))) as? [String: Any])
        let sources = try XCTUnwrap(style["sources"] as? [String: [String: Any]])
        XCTAssertEqual(sources["natural_earth_shaded_relief"]?["url"] as? String, "http://maps.test/li/sources/natural_earth_shaded_relief.json")
        XCTAssertNil(sources["natural_earth_shaded_relief"]?["tiles"])
        let tj = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: site + "/sources/natural_earth_shaded_relief.json"))) as? [String: Any])
        XCTAssertEqual(tj["tiles"] as? [String], ["http://maps.test/li/tiles/natural_earth_shaded_relief/{z}/{x}/{y}.png"])
        let pngs = (FileManager.default.enumerator(atPath: site + "/tiles/natural_earth_shaded_relief")?.allObjects as? [String] ?? []).filter { $0.hasSuffix(".png") }
        XCTAssertEqual(pngs.count, rasterTiles)
    }

    /// A request's `exports` are written by the daemon when the region completes, and reported
    /// in the status and in events.jsonl; a failing one does not un-complete the region.
    func testDaemonWritesTheExportsARequestNames() throws {
        try completeMonaco(["exports": [["format": "pmtiles"], ["format": "maplibre"], ["format": "mbtiles", "source": "nope"]]])
        try waitUntil("three export results") {
            ((self.fx.status("monaco")?["exports"] as? [[String: Any]]) ?? []).filter { ($0["state"] as? String) != "writing" }.count == 3
        }
        let list = try XCTUnwrap(fx.status("monaco")?["exports"] as? [[String: Any]])
        XCTAssertEqual(list.map { $0["state"] as? String }, ["written", "written", "failed"])
        let pm = try XCTUnwrap(list[0]["path"] as? String)
        XCTAssertEqual(pm, fx.spool + "/exports/monaco.pmtiles")
        XCTAssertEqual(list[0]["sha256"] as? String, sha256sum([pm])[pm])
        XCTAssertEqual(list[0]["bytes"] as? Int, Files.size(pm))
        XCTAssertEqual(list[0]["tiles"] as? Int, 21, "23 less the sea tile and the empty z0")
        XCTAssertEqual(try sqlite(fx.spool + "/exports/monaco.db", "SELECT count(*) FROM region_tiles"), "23")
        XCTAssertTrue(((list[2]["error"] as? [String: Any])?["message"] as? String ?? "").contains("no tile source 'nope'"))
        XCTAssertEqual(fx.state("monaco"), "completed")
        XCTAssertEqual(fx.events("monaco").compactMap { ($0["export"] as? [String: Any])?["state"] as? String }.sorted(), ["failed", "written", "written"])
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: fx.spool + "/exports").sorted(), ["monaco.db", "monaco.pmtiles"])
    }

    /// A 1,000,000-tile region (every tile one of three bodies) exports to PMTiles with memory
    /// that does not grow with the tile count; the reader finds the counts and the tiles.
    func testMillionTilePMTilesExportHasFlatMemory() throws {
        try ExportTools.require([ExportTools.python, "/usr/bin/time"])
        func peakKiB(_ id: String) throws -> (Int, [String: Any]) {
            let out = fx.root.appendingPathComponent("\(id).pmtiles").path
            let (rc, text) = try runTool("/usr/bin/time", ["-f", "maxrss=%M", SpoolFixture.binary, "export", id, "--format", "pmtiles",
                                                           "--output", out, "--spool", fx.spool, "--store", fx.store, "--json"])
            XCTAssertEqual(rc, 0, text)
            let rss = Int(text.components(separatedBy: "maxrss=").last?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "") ?? -1
            let json = text.components(separatedBy: "maxrss=").first ?? ""
            return (rss, (try? JSONSerialization.jsonObject(with: Data(json.utf8))) as? [String: Any] ?? [:])
        }
        let small = try fx.makeSyntheticRegion("small", maxZoom: 7, bounds: GeoBounds(west: -180, south: -85, east: 180, north: 85)) // 21,845
        let big = try fx.makeSyntheticRegion("big", maxZoom: 15, bounds: GeoBounds(west: 4, south: 45, east: 15, north: 52))
        XCTAssertGreaterThan(big, 1_000_000)
        let (smallRSS, _) = try peakKiB("small")
        let (bigRSS, bigResult) = try peakKiB("big")
        print("pmtiles export peak RSS: \(small) tiles \(smallRSS) KiB, \(big) tiles \(bigRSS) KiB")
        XCTAssertLessThan(bigRSS - smallRSS, 16 * 1024, "memory grew with the tile count: \(smallRSS) -> \(bigRSS) KiB")
        // The reader agrees: every non-empty tile addressed, three bodies, far fewer entries.
        let (rc, out) = try runTool(ExportTools.python, ["-c", """
            import sys, json
            from pmtiles.reader import Reader, MmapSource
            r = Reader(MmapSource(open(sys.argv[1], 'rb'))); h = r.header()
            print(json.dumps({'addressed': h['addressed_tiles_count'], 'entries': h['tile_entries_count'], 'contents': h['tile_contents_count'],
                              'leaves': h['leaf_directory_length'], 't': r.get(15, 17301, 11468) is not None, 'e': r.get(15, 17294, 11468) is None}))
            """, fx.root.appendingPathComponent("big.pmtiles").path])
        XCTAssertEqual(rc, 0, out)
        let h = (try? JSONSerialization.jsonObject(with: Data(out.utf8))) as? [String: Any] ?? [:]
        XCTAssertEqual(h["addressed"] as? Int, bigResult["tiles"] as? Int)
        XCTAssertEqual(h["contents"] as? Int, 3)
        XCTAssertEqual(h["t"] as? Bool, true)  // a tile with a body is found
        XCTAssertEqual(h["e"] as? Bool, true)  // an empty (204) tile is absent
        XCTAssertGreaterThan(h["leaves"] as? Int ?? 0, 0)
        XCTAssertLessThan(h["entries"] as? Int ?? Int.max, h["addressed"] as? Int ?? 0)
    }
}

extension Data {
    init(hex: String) {
        var d = Data()
        var it = hex.utf8.makeIterator()
        func v(_ c: UInt8) -> UInt8 { c >= 65 ? (c & 0xDF) - 55 : c - 48 }
        while let a = it.next(), let b = it.next() { d.append(v(a) << 4 | v(b)) }
        self = d
    }
}

/// Inflates a zlib stream with Python's zlib (a decoder we did not write).
func zlibInflate(_ data: Data) -> Data? { pythonDecompress(data, module: "zlib") }

/// `data` decompressed by Python's module `module` (`zlib` or `gzip`: decoders we did not write),
/// nil when it fails.
func pythonDecompress(_ data: Data, module: String) -> Data? {
    let tmp = FileManager.default.temporaryDirectory.appendingPathComponent("\(module)-\(UUID().uuidString)")
    try? data.write(to: tmp)
    defer { try? FileManager.default.removeItem(at: tmp) }
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
    p.arguments = ["-c", "import sys, \(module); sys.stdout.buffer.write(\(module).decompress(open(sys.argv[1], 'rb').read()))", tmp.path]
    let pipe = Pipe()
    p.standardOutput = pipe
    try? p.run()
    let d = pipe.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    return p.terminationStatus == 0 ? d : nil
}

/// Issue 29: a source with no planned tile (its zooms are outside the request's) does not count
/// when `export` picks the one source of an MBTiles or PMTiles pack.
final class ExportSourceChoiceTests: FaultServerSpoolTestCase {
    func testASourceWithNoPlannedTileIsNotAChoice() throws {
        try server.register("two-sources-style", json: """
            {"version": 8, "layers": [],
             "sources": {"low": {"type": "raster", "tiles": ["__BASE__/ok/low/{z}/{x}/{y}.png"], "maxzoom": 5},
                         "high": {"type": "raster", "tiles": ["__BASE__/ok/high/{z}/{x}/{y}.png"], "minzoom": 10, "maxzoom": 12}}}
            """)
        try fx.start()
        try fx.drop("ts.json", ["style": server.url("/json/two-sources-style"), "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 1])
        try fx.waitForState("ts", "completed")
        let plan = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: fx.store + "/regions/ts/plan.json"))) as? [String: Any])
        XCTAssertEqual((plan["tileSets"] as? [Any])?.count, 2, "both sources are in the plan, one with no tile")
        let out = fx.root.appendingPathComponent("ts.mbtiles").path
        var (rc, text) = try fx.cli(["export", "ts", "--format", "mbtiles", "--output", out, "--json", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, text)
        let result = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] ?? [:]
        XCTAssertEqual(result["source"] as? String, "low")
        XCTAssertEqual(result["tiles"] as? Int, 5)
        XCTAssertEqual(try sqlite(out, "SELECT count(*) FROM tiles"), "5")
        // An unknown source is still refused, naming both.
        (rc, text) = try fx.cli(["export", "ts", "--format", "pmtiles", "--source", "nope", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 1, text)
        XCTAssertTrue(text.contains("no tile source 'nope' (its sources: high, low)"), text)
    }
}
