// Issue 31, exports: a pack of a style whose source is a PMTiles archive renders offline in the
// real clients the other export tests use, since its exported style points the source at tiles
// the file or folder holds (MapLibre Native's offline database does not cache range requests).
import Foundation
import XCTest

final class PMTilesRenderTests: XCTestCase {
    var mapdata: URL!
    var generated: URL!
    var nginx: NginxServer!
    var fx: SpoolFixture!
    var others: [NginxServer] = []

    override func setUpWithError() throws {
        mapdata = try MapData.require()
        generated = try TestScratch.folder("pmtiles-render")
        nginx = try NginxServer(root: mapdata, extraLocations: "location ^~ /gen/ { alias \(generated.path)/; }")
        fx = try SpoolFixture()
        try fx.start()
    }

    override func tearDown() {
        _ = fx?.stop()
        nginx?.stop()
        for o in others { o.stop() }
    }

    var styleURL: String { nginx.url("/gen/style.json") }

    /// A raster style over the stamen toner archive (world, tiles z0-3, 85 PNG tiles), downloaded.
    func completeToner() throws {
        let style: [String: Any] = ["version": 8, "sources": ["toner": ["type": "raster", "tileSize": 256, "url": "pmtiles://" + nginx.url(PMTilesPlanTests.stamen)]],
                                    "layers": [["id": "toner", "type": "raster", "source": "toner"]]]
        try JSONSerialization.data(withJSONObject: style).write(to: generated.appendingPathComponent("style.json"))
        try fx.drop("toner.json", ["id": "toner", "style": styleURL, "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 3])
        try fx.waitForState("toner", "completed")
        // Map zooms 0-3 of a 256 px raster source load tile zooms 1-3 (MapLibre's covering zoom):
        // 4 + 16 + 64 tiles of the archive's 85.
        XCTAssertEqual(fx.manifest("toner").filter { $0.kind == "tile" }.count, 84)
    }

    func export(_ args: [String]) throws {
        let (rc, out) = try fx.cli(["export"] + args + ["--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
    }

    /// The MapLibre database renders in Qt Location's mapboxgl plugin with the origin stopped; the
    /// same client with an empty database is the control and renders a flat colour.
    func testMapLibreDatabaseOfAnArchiveStyleRendersOfflineInQtMapboxGL() throws {
        try ExportTools.require(["/usr/bin/qmlscene", "/usr/bin/xvfb-run"])
        try completeToner()
        let db = fx.root.appendingPathComponent("toner.db").path
        try export(["toner", "--format", "maplibre", "--output", db])
        nginx.stop() // offline from here on
        XCTAssertFalse(Loopback.canConnect(port: nginx.port))
        let shot = fx.root.appendingPathComponent("qt.png").path
        let (rc, log) = try runTool(ExportTools.support + "/render_qt.sh", [db, styleURL, "30", "0", "3", shot, "8"])
        XCTAssertEqual(rc, 0, log)
        let (flat, measure) = try runTool(ExportTools.support + "/image_flat.sh", [shot])
        XCTAssertEqual(flat, 0, "the offline render is a flat colour: \(measure)\n\(log.suffix(3000))")
        XCTAssertFalse(log.contains("loading style failed"), log)
        let empty = fx.root.appendingPathComponent("empty.png").path
        XCTAssertEqual(try runTool(ExportTools.support + "/render_qt.sh", ["-", styleURL, "30", "0", "3", empty, "8"]).0, 0)
        XCTAssertEqual(try runTool(ExportTools.support + "/image_flat.sh", [empty]).0, 1)
    }

    /// The site renders in MapLibre GL JS (headless Chromium), served by nginx with the generated
    /// snippet, with the origin stopped: every request answered from the site, none failed.
    func testSiteOfAnArchiveStyleRendersInMapLibreGLJSWithOriginStopped() throws {
        try ExportTools.require(["/usr/bin/chromium", "/usr/bin/chromedriver", ExportTools.python])
        try completeToner()
        let site = fx.root.appendingPathComponent("toner-site").path
        try export(["toner", "--format", "site", "--output", site])
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
        try export(["toner", "--format", "site", "--output", site, "--force", "--base-url", web.baseURL + "/toner/"])
        nginx.stop()
        let styleText = String(decoding: try Data(contentsOf: URL(fileURLWithPath: site + "/style.json")), as: UTF8.self)
        XCTAssertFalse(styleText.contains("pmtiles://"), styleText)
        XCTAssertFalse(styleText.contains(nginx.baseURL), styleText)
        let page = web.baseURL + "/viewer/index.html?style=" + (web.baseURL + "/toner/style.json").addingPercentEncoding(withAllowedCharacters: .alphanumerics)! + "&lat=30&lon=0&zoom=2"
        let shot = fx.root.appendingPathComponent("site.png").path
        let (rc, title) = try runTool("/usr/bin/python3", [ExportTools.support + "/render_site.py", page, shot, "90"])
        XCTAssertEqual(rc, 0, title)
        XCTAssertEqual(try runTool(ExportTools.support + "/image_flat.sh", [shot]).0, 0)
        let log = web.accessLog()
        XCTAssertTrue(log.contains { $0.path.hasPrefix("/toner/tiles/toner/") && $0.status == 200 }, "\(log.map(\.uri))")
        XCTAssertEqual(log.filter { $0.status >= 400 && $0.path != "/favicon.ico" }.map { "\($0.status) \($0.uri)" }, [])
    }
}
