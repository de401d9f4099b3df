import Foundation
import XCTest

/// nginx config that serves the bright style pointed at another TileJSON (Liechtenstein's), with
/// `__BASE__` filled in from nginx's own port.
func brightStyleLocation(name: String, tileJSON: String, mapdata: URL) -> String {
    """
    location = /styles/bright/\(name).json {
        alias \(mapdata.path)/styles/bright/style.local-template.json;
        default_type application/json;
        sub_filter_types application/json;
        sub_filter_once off;
        sub_filter "__BASE__" "http://127.0.0.1:$server_port";
        sub_filter "/tiles/monaco.tilejson.json" "/tiles/\(tileJSON).tilejson.json";
    }
    """
}

/// Runs `gzip -dc` on a file (the body a map client receives from a gzip tile).
func gunzip(_ path: String) -> Data {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/bin/gzip")
    p.arguments = ["-dc", path]
    let pipe = Pipe()
    p.standardOutput = pipe
    try? p.run()
    let d = pipe.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    return d
}

/// Issue 2 end to end: real map data served by nginx, the real binary, requests dropped into the
/// spool, and what a shell script reads back.
final class EndToEndTests: XCTestCase {
    var mapdata: URL!
    var nginx: NginxServer!
    var fx: SpoolFixture!

    override func setUpWithError() throws {
        mapdata = try MapData.require()
        nginx = try NginxServer(root: mapdata, extraLocations: brightStyleLocation(name: "liechtenstein", tileJSON: "liechtenstein", mapdata: mapdata))
        fx = try SpoolFixture()
        try fx.start()
    }

    override func tearDown() {
        fx?.stop()
        nginx?.stop()
    }

    /// The bright style over Monaco z0-14 with the monaco TileJSON.
    func testBrightStyleOverMonaco() throws {
        try fx.drop("monaco.json", ["style": nginx.baseURL + "/styles/bright/style.local-template.json",
                                    "bounds": [7.409205, 43.72335, 7.448637, 43.75169], "minZoom": 0, "maxZoom": 14,
                                    "context": ["vehicle": 7]])
        try fx.waitForState("monaco", "completed")
        XCTAssertEqual(fx.eventStates("monaco"), ["queued", "downloading", "completed"])
        fx.assertStoreMatchesManifest("monaco")
        let lines = fx.manifest("monaco")
        let byKind = Dictionary(grouping: lines, by: \.kind).mapValues(\.count)
        XCTAssertEqual(byKind, ["style": 1, "source": 1, "sprite": 4, "glyphs": 390, "tile": 23])
        // The sea tile answers 404: a completed empty tile, no object.
        XCTAssertEqual(lines.first { $0.key == "openmaptiles/14/8530/5975" }?.sha, "-")
        // A tile's object is the MVT after HTTP content decoding.
        let tile = try XCTUnwrap(lines.first { $0.key == "openmaptiles/14/8529/5973" })
        XCTAssertEqual(fx.objectData(tile.sha), gunzip(mapdata.path + "/tiles/monaco/14/8529/5973.pbf"))
        // A glyph range's object is the file's bytes.
        let glyph = try XCTUnwrap(lines.first { $0.key == "KlokanTech Noto Sans Bold/0-255" })
        XCTAssertEqual(fx.objectData(glyph.sha),
                       FileManager.default.contents(atPath: mapdata.path + "/fonts/KlokanTech Noto Sans Bold/0-255.pbf"))
        // The status echoes the context and the request with defaults.
        let st = try XCTUnwrap(fx.status("monaco"))
        XCTAssertEqual((st["context"] as? [String: Any])?["vehicle"] as? Int, 7)
        XCTAssertEqual((st["request"] as? [String: Any])?["pixelRatio"] as? Double, 1)
        XCTAssertEqual(fx.progress("monaco")["resourcesExpectedIsPrecise"], 1)
        XCTAssertTrue(st["error"] is NSNull)
        // Each resource was requested exactly once.
        XCTAssertEqual(nginx.accessLog().filter { $0.path.hasPrefix("/tiles/monaco/") }.count, 23)
        XCTAssertEqual(nginx.accessLog().filter { $0.path.hasPrefix("/fonts/") }.count, 390)
        XCTAssertEqual(try String(contentsOfFile: fx.spool + "/status/monaco.state", encoding: .utf8), "completed\n")
        // A download where nothing went wrong logs no error (a new region's absent folder was
        // once logged as a refresh that could not be removed).
        XCTAssertEqual(fx.log().split(separator: "\n").filter { $0.contains("level=error") || $0.contains("level=warning") }, [])
    }

    /// The bright style over Liechtenstein z0-14 with the liechtenstein TileJSON.
    func testBrightStyleOverLiechtenstein() throws {
        let tj = try JSONSerialization.jsonObject(with: Data(contentsOf: mapdata.appendingPathComponent("tiles/liechtenstein.tilejson.json"))) as! [String: Any]
        let bounds = tj["bounds"] as! [Double]
        try fx.drop("li.json", ["id": "liechtenstein", "style": nginx.baseURL + "/styles/bright/liechtenstein.json",
                                "bounds": bounds, "minZoom": 0, "maxZoom": 14])
        try fx.waitForState("liechtenstein", "completed")
        XCTAssertEqual(fx.eventStates("liechtenstein"), ["queued", "downloading", "completed"])
        fx.assertStoreMatchesManifest("liechtenstein")
        let tiles = fx.manifest("liechtenstein").filter { $0.kind == "tile" }
        // Every tile on disk was stored; the rest of the cover (tilemaker's empty corners) are empty tiles.
        let onDisk = nginx.accessLog().filter { $0.path.hasPrefix("/tiles/liechtenstein/") && $0.status == 200 }.count
        XCTAssertEqual(onDisk, 180)
        // Three of them are gzip files of nothing (0 bytes once decoded): a 200 with an empty body
        // is an empty tile (issue 10), so 177 objects and those three as `-`.
        XCTAssertEqual(tiles.filter { $0.sha != "-" }.count, 177)
        let emptyBodies = ["14/8623/5748", "14/8623/5754", "14/8623/5756"]
        XCTAssertEqual(Set(tiles.filter { $0.sha == "-" && $0.url.contains("/tiles/liechtenstein/") && emptyBodies.contains(where: $0.url.contains) }.map(\.url)).count, 3)
        XCTAssertFalse(FileManager.default.fileExists(atPath: fx.spool + "/requests/li.json"))
    }

    /// A `tiles` request for stamen_toner over the world z0-3: 85 tiles, 80 distinct bodies.
    func testStamenTonerTilesRequestDeduplicates() throws {
        try fx.drop("toner.json", ["tiles": [nginx.baseURL + "/raster/stamen_toner/{z}/{x}/{y}.png"],
                                   "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
        try fx.waitForState("toner", "completed")
        XCTAssertEqual(fx.eventStates("toner"), ["queued", "downloading", "completed"])
        fx.assertStoreMatchesManifest("toner")
        let tiles = fx.manifest("toner").filter { $0.kind == "tile" }
        XCTAssertEqual(tiles.count, 85)
        XCTAssertEqual(Set(tiles.map(\.sha)).count, 80)
        XCTAssertEqual(fx.objects().count, 80)
        XCTAssertEqual(fx.progress("toner")["tilesExpected"], 85)
    }

    /// A GeoJSON region: a right triangle with its right angle at (0°, 0°) reaching 90° E and
    /// 66.513° N (a tile corner at z2). By hand: z0-2 one tile each, z3 rows 2-3 cover 1 + 2 tiles,
    /// z4 rows 4-7 cover 1 + 2 + 3 + 4 tiles (the hypotenuse runs corner to corner).
    func testGeoJSONPolygonRegion() throws {
        let triangle: [String: Any] = ["type": "Polygon", "coordinates": [[[0, 0], [90, 0], [0, 66.51326044311186], [0, 0]]]]
        try fx.drop("tri.json", ["tiles": [nginx.baseURL + "/raster/osm_carto/{z}/{x}/{y}.png"],
                                 "geometry": triangle, "minZoom": 0, "maxZoom": 4])
        try fx.waitForState("tri", "completed")
        let keys = Set(fx.manifest("tri").map(\.key))
        XCTAssertEqual(keys, ["tiles0/0/0/0", "tiles0/1/1/0", "tiles0/2/2/1", "tiles0/3/4/2", "tiles0/3/4/3", "tiles0/3/5/3",
                              "tiles0/4/8/4", "tiles0/4/8/5", "tiles0/4/9/5", "tiles0/4/8/6", "tiles0/4/9/6", "tiles0/4/10/6",
                              "tiles0/4/8/7", "tiles0/4/9/7", "tiles0/4/10/7", "tiles0/4/11/7"])
        XCTAssertEqual(fx.progress("tri")["tilesExpected"], 16)
        fx.assertStoreMatchesManifest("tri")
        XCTAssertEqual(((fx.status("tri")?["request"] as? [String: Any])?["geometry"] as? [String: Any])?["type"] as? String, "MultiPolygon")
    }

    /// A style's plan is known only once its TileJSON is in: over `maxTiles` it fails then, and a
    /// copy of the request goes to rejected/ with the reason.
    func testStylePlanOverMaxTilesIsRefusedOnceKnown() throws {
        try fx.drop("big.json", ["style": nginx.baseURL + "/styles/bright/style.local-template.json",
                                 "bounds": [7.409205, 43.72335, 7.448637, 43.75169], "minZoom": 0, "maxZoom": 14, "maxTiles": 20])
        try fx.waitForState("big", "failed")
        XCTAssertEqual(fx.errorCode("big"), "tileLimitExceeded")
        XCTAssertTrue(fx.errorMessage("big")?.contains("23") ?? false, fx.errorMessage("big") ?? "")
        let reason = try String(contentsOfFile: fx.spool + "/rejected/big.json.error", encoding: .utf8)
        XCTAssertTrue(reason.hasPrefix("tileLimitExceeded"), reason)
        XCTAssertTrue(FileManager.default.fileExists(atPath: fx.spool + "/rejected/big.json"))
        XCTAssertEqual(nginx.accessLog().filter { $0.path.hasPrefix("/tiles/monaco/") }.count, 0, "no tile requested")
    }

    /// Two regions sharing tiles store each body once.
    func testIdenticalTilesAcrossRegionsAreStoredOnce() throws {
        for id in ["a", "b"] {
            try fx.drop("\(id).json", ["tiles": [nginx.baseURL + "/raster/stamen_toner/{z}/{x}/{y}.png"],
                                       "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 2])
        }
        try fx.waitForState("a", "completed")
        try fx.waitForState("b", "completed")
        XCTAssertEqual(Set(fx.manifest("a").map(\.sha)), Set(fx.manifest("b").map(\.sha)))
        XCTAssertEqual(fx.objects().count, Set(fx.manifest("a").map(\.sha)).count)
    }
}
