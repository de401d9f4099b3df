// Issue 32, "export what was asked": a subset of a region (--bounds, --min-zoom, --max-zoom) and
// several regions of one tile source in one file. Real map data served by nginx; the files are
// read back with readers we did not write (Python's sqlite3 for MBTiles, the PyPI pmtiles reader
// for PMTiles: Tests/Support/read_tiles.py), and the expected tile sets are computed here, from the
// slippy-map formulas, not with TileSpool's own cover.
import Foundation
import TileSpoolCore
@testable import TileSpoolExport
import XCTest

/// The z/x/y tiles (XYZ rows) whose square shares interior with box `[w, s, e, n]` (degrees,
/// w < e) at each zoom of `zooms`: x = (lon + 180) / 360 · 2^z, y = (1 − asinh(tan φ) / π) / 2 · 2^z
/// (OSM wiki "Slippy map tilenames"), the first tile floor(x0), the last ceil(x1) − 1.
func slippyTiles(_ b: [Double], _ zooms: ClosedRange<Int>) -> Set<String> {
    var out = Set<String>()
    for z in zooms {
        let n = Double(1 << z)
        func fx(_ lon: Double) -> Double { (lon + 180) / 360 * n }
        func fy(_ lat: Double) -> Double {
            let phi = min(max(lat, -85.0511287798066), 85.0511287798066) * .pi / 180
            return (1 - asinh(tan(phi)) / .pi) / 2 * n
        }
        func clamp(_ v: Int) -> Int { min(max(v, 0), (1 << z) - 1) }
        let x0 = clamp(Int(floor(fx(b[0])))), x1 = clamp(max(Int(ceil(fx(b[2]))) - 1, Int(floor(fx(b[0])))))
        let y0 = clamp(Int(floor(fy(b[3])))), y1 = clamp(max(Int(ceil(fy(b[1]))) - 1, Int(floor(fy(b[3])))))
        for x in x0...x1 { for y in y0...y1 { out.insert("\(z)/\(x)/\(y)") } }
    }
    return out
}

final class ExportSubsetTests: XCTestCase {
    var mapdata: URL!
    var nginx: NginxServer!
    var fx: SpoolFixture!
    var servers: [NginxServer] = []

    override func setUpWithError() throws {
        mapdata = try MapData.require()
        nginx = try NginxServer(root: mapdata)
        fx = try SpoolFixture()
        try fx.start()
    }

    override func tearDown() {
        fx?.stop()
        nginx?.stop()
        for s in servers { s.stop() }
        servers = []
    }

    var carto: String { mapdata.path + "/raster/osm_carto" }

    func completeCarto(_ id: String, bounds: [Double], zooms: ClosedRange<Int> = 0...4, base: String? = nil) throws {
        try fx.drop(id + ".json", ["id": id, "tiles": [(base ?? nginx.baseURL) + "/raster/osm_carto/{z}/{x}/{y}.png"],
                                   "bounds": bounds, "minZoom": zooms.lowerBound, "maxZoom": zooms.upperBound])
        try fx.waitForState(id, "completed")
    }

    func export(_ args: [String], file: StaticString = #filePath, line: UInt = #line) throws -> [String: Any] {
        let (rc, out) = try fx.cli(["export"] + args + ["--spool", fx.spool, "--store", fx.store, "--json"])
        XCTAssertEqual(rc, 0, out, file: file, line: line)
        return (try? JSONSerialization.jsonObject(with: Data(out.utf8))) as? [String: Any] ?? [:]
    }

    /// What read_tiles.py reads from `archive`, comparing with `served`.
    func read(_ archive: String, served: String, ext: String = "png", file: StaticString = #filePath, line: UInt = #line) throws -> [String: Any] {
        try ExportTools.require([ExportTools.python], file: file, line: line)
        let (rc, out) = try runTool(ExportTools.python, [ExportTools.support + "/read_tiles.py", archive, served, ext])
        XCTAssertEqual(rc, 0, out, file: file, line: line)
        return (try? JSONSerialization.jsonObject(with: Data(out.utf8))) as? [String: Any] ?? [:]
    }

    func tileSet(_ r: [String: Any]) -> Set<String> { Set(r["tiles"] as? [String] ?? []) }

    // MARK: - A subset of one region

    /// An MBTiles and a PMTiles of a box over Europe at z2-4 from a world region z0-4 hold exactly
    /// the tiles meeting the box at those zooms, with the served bytes, and say so in their metadata.
    func testSubsetHoldsExactlyTheTilesMeetingTheBox() throws {
        try completeCarto("world", bounds: [-180, -85, 180, 85])
        let box = [-10.0, 35.0, 30.0, 60.0]
        let expected = slippyTiles(box, 2...4)
        XCTAssertEqual(expected.count, 2 + 4 + 9, "z2: 2x1 tiles, z3: 2x2, z4: 3x3") // a check of the formula itself
        let mb = fx.root.appendingPathComponent("eu.mbtiles").path
        let r = try export(["world", "--format", "mbtiles", "--output", mb, "--bounds", "-10,35,30,60", "--min-zoom", "2", "--max-zoom", "4"])
        XCTAssertEqual(r["tiles"] as? Int, expected.count)
        let m = try read(mb, served: carto)
        XCTAssertEqual(tileSet(m), expected)
        XCTAssertEqual(m["differ_count"] as? Int, 0, "\(m["differ"] ?? "")")
        XCTAssertEqual(m["duplicates"] as? Int, 0)
        let meta = m["meta"] as? [String: String] ?? [:]
        XCTAssertEqual(meta["bounds"], "-10,35,30,60")
        XCTAssertEqual(meta["minzoom"], "2")
        XCTAssertEqual(meta["maxzoom"], "4")

        // Options before the positional, and PMTiles.
        let pm = fx.root.appendingPathComponent("eu.pmtiles").path
        _ = try export(["--min-zoom", "2", "--max-zoom", "4", "--bounds", "-10,35,30,60", "--format", "pmtiles", "--output", pm, "world"])
        let p = try read(pm, served: carto)
        XCTAssertEqual(tileSet(p), expected)
        XCTAssertEqual(p["differ_count"] as? Int, 0, "\(p["differ"] ?? "")")
        let h = p["meta"] as? [String: Any] ?? [:]
        XCTAssertEqual(h["min_zoom"] as? Int, 2)
        XCTAssertEqual(h["max_zoom"] as? Int, 4)
        XCTAssertEqual(h["addressed_tiles_count"] as? Int, expected.count)
        XCTAssertEqual((h["bounds"] as? [Double])?.map { ($0 * 1e4).rounded() / 1e4 }, box)
    }

    /// A box larger than the region is clipped to the region in the metadata, and only the
    /// region's tiles go out; a box across the antimeridian takes both edges.
    func testSubsetClipsToTheRegionAndCrossesTheAntimeridian() throws {
        try completeCarto("pacific", bounds: [150, -50, 179.9, 10], zooms: 0...4)
        let mb = fx.root.appendingPathComponent("p.mbtiles").path
        _ = try export(["pacific", "--format", "mbtiles", "--output", mb, "--bounds", "100,-20,180,60", "--min-zoom", "3"])
        let m = try read(mb, served: carto)
        XCTAssertEqual(tileSet(m), slippyTiles([150, -20, 179.9, 10], 3...4))
        XCTAssertEqual((m["meta"] as? [String: String])?["bounds"], "150,-20,179.9,10")
        XCTAssertEqual((m["meta"] as? [String: String])?["maxzoom"], "4")

        try completeCarto("world", bounds: [-180, -85, 180, 85], zooms: 0...3)
        let am = fx.root.appendingPathComponent("am.pmtiles").path
        _ = try export(["world", "--format", "pmtiles", "--output", am, "--bounds", "170,-10,-170,10", "--min-zoom", "3", "--max-zoom", "3"])
        let p = try read(am, served: carto)
        XCTAssertEqual(tileSet(p), slippyTiles([170, -10, 180, 10], 3...3).union(slippyTiles([-180, -10, -170, 10], 3...3)))
        XCTAssertEqual(tileSet(p).count, 4, "x 0 and 7, y 3 and 4 at z3")

        // With a second region beside the box (no tile in it), the file holds the same tiles and
        // states the same box and centre: longitude 180, where the tiles are (attack round 34:
        // the region beside the box made its stated box the whole world, centre longitude 0).
        try completeCarto("beside", bounds: [0, 0, 30, 30], zooms: 0...3)
        for format in ["mbtiles", "pmtiles"] {
            let one = fx.root.appendingPathComponent("one.\(format)").path, two = fx.root.appendingPathComponent("two.\(format)").path
            _ = try export(["world", "--format", format, "--output", one, "--bounds", "170,-10,-170,10", "--min-zoom", "3", "--max-zoom", "3"])
            _ = try export(["world", "beside", "--format", format, "--output", two, "--bounds", "170,-10,-170,10", "--min-zoom", "3", "--max-zoom", "3"])
            let a = try read(one, served: carto), b = try read(two, served: carto)
            XCTAssertEqual(tileSet(b), tileSet(p), format)
            // MBTiles: "lon,lat,zoom" and "w,s,e,n" strings; PMTiles: the header's numbers.
            func numbers(_ r: [String: Any], _ key: String) -> [Double] {
                let v = (r["meta"] as? [String: Any])?[key]
                if let text = v as? String { return text.split(separator: ",").compactMap { Double($0) } }
                return (v as? [Any] ?? []).compactMap { ($0 as? NSNumber)?.doubleValue }
            }
            XCTAssertEqual(numbers(a, "center").first.map(abs), 180, "\(format): \(numbers(a, "center"))")
            XCTAssertEqual(numbers(b, "center"), numbers(a, "center"), format)
            XCTAssertEqual(numbers(b, "bounds"), numbers(a, "bounds"), format)
            XCTAssertEqual(numbers(a, "bounds").count, 4, format)
        }
    }

    /// A style region's site and MapLibre database subset: the documents as for a whole export,
    /// tiles only in the box and zooms, the TileJSON and the region definition saying so.
    func testSiteAndMapLibreSubsetOfAStyleRegion() throws {
        try fx.drop("monaco.json", ["style": nginx.baseURL + "/styles/bright/style.local-template.json",
                                    "bounds": ExportTests.monacoBounds, "minZoom": 0, "maxZoom": 14])
        try fx.waitForState("monaco", "completed")
        let box = [7.40, 43.72, 7.42, 43.74]
        // The planned tiles of the region in the box at z13-14, from the manifest's keys.
        let planned = Set(fx.manifest("monaco").filter { $0.kind == "tile" }.map { String($0.key.split(separator: "/", maxSplits: 1)[1]) })
        let expected = planned.intersection(slippyTiles(box, 13...14))
        XCTAssertGreaterThan(expected.count, 1)
        XCTAssertLessThan(expected.count, planned.filter { $0.hasPrefix("13/") || $0.hasPrefix("14/") }.count, "the box must cut the region")
        let site = fx.root.appendingPathComponent("m-site").path
        let r = try export(["monaco", "--format", "site", "--output", site, "--bounds", "7.40,43.72,7.42,43.74", "--min-zoom", "13", "--max-zoom", "14"])
        XCTAssertEqual(r["tiles"] as? Int, expected.count)
        let files = (FileManager.default.enumerator(atPath: site + "/tiles/openmaptiles")?.allObjects as? [String] ?? []).filter { $0.hasSuffix(".pbf") }
        XCTAssertEqual(Set(files.map { String($0.dropLast(4)) }), expected)
        XCTAssertTrue(FileManager.default.fileExists(atPath: site + "/style.json"))
        let fonts = FileManager.default.enumerator(atPath: site + "/fonts")?.allObjects.count ?? 0
        XCTAssertGreaterThan(fonts, 0, "glyphs as for a whole export")
        let tj = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: site + "/sources/openmaptiles.json"))) as? [String: Any])
        XCTAssertEqual(tj["minzoom"] as? Int, 13)
        XCTAssertEqual(tj["maxzoom"] as? Int, 14)
        XCTAssertEqual((tj["bounds"] as? [Double])?.map { ($0 * 1e6).rounded() / 1e6 }, [7.409205, 43.72335, 7.42, 43.74], "the box clipped to the region's")

        let db = fx.root.appendingPathComponent("m.db").path
        let d = try export(["monaco", "--format", "maplibre", "--output", db, "--bounds", "7.40,43.72,7.42,43.74", "--min-zoom", "13", "--max-zoom", "14"])
        XCTAssertEqual(d["tiles"] as? Int, expected.count)
        XCTAssertEqual(try sqlite(db, "SELECT count(*) FROM tiles"), "\(expected.count)")
        let def = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(try sqlite(db, "SELECT definition FROM regions").utf8)) as? [String: Any])
        XCTAssertEqual((def["bounds"] as? [Double])?.map { ($0 * 1e6).rounded() / 1e6 }, [43.72335, 7.409205, 43.74, 7.42])
        XCTAssertEqual(def["min_zoom"] as? Double, 13)
        XCTAssertEqual(def["max_zoom"] as? Double, 14)
        XCTAssertGreaterThan(Int(try sqlite(db, "SELECT count(*) FROM resources")) ?? 0, 3, "style, sprites, glyphs")
    }

    /// An empty subset, one outside the region, a malformed box and inverted zooms are refused;
    /// nothing is written.
    func testSubsetRefusals() throws {
        try completeCarto("eu", bounds: [-10, 35, 30, 60], zooms: 0...3)
        let out = fx.root.appendingPathComponent("x.mbtiles").path
        func run(_ args: [String]) throws -> (Int32, String) {
            try fx.cli(["export", "eu", "--format", "mbtiles", "--output", out, "--spool", fx.spool, "--store", fx.store] + args)
        }
        var (rc, msg) = try run(["--bounds", "140,-40,150,-30", "--min-zoom", "3"])
        XCTAssertEqual(rc, 1, msg)
        XCTAssertTrue(msg.contains("holds no tile of region 'eu'"), msg)
        (rc, msg) = try run(["--min-zoom", "5", "--max-zoom", "8"])
        XCTAssertEqual(rc, 1, msg)
        XCTAssertTrue(msg.contains("holds no tile of region 'eu'") && msg.contains("tile zooms 0-3"), msg)
        (rc, msg) = try run(["--bounds", "1,2,3"])
        XCTAssertEqual(rc, 2, msg)
        XCTAssertTrue(msg.contains("--bounds must be four numbers"), msg)
        (rc, msg) = try run(["--bounds", "1,50,3,40"])
        XCTAssertEqual(rc, 2, msg)
        (rc, msg) = try run(["--min-zoom", "3", "--max-zoom", "2"])
        XCTAssertEqual(rc, 2, msg)
        XCTAssertTrue(msg.contains("--min-zoom 3 is above --max-zoom 2"), msg)
        XCTAssertFalse(FileManager.default.fileExists(atPath: out))

        // A geometry region: a box inside its bounding box but off its outline holds none of its tiles.
        try fx.drop("tri.json", ["id": "tri", "tiles": [nginx.baseURL + "/raster/osm_carto/{z}/{x}/{y}.png"], "minZoom": 0, "maxZoom": 4,
                                 "geometry": ["type": "Polygon", "coordinates": [[[0, 0], [40, 0], [0, 40], [0, 0]]]]])
        try fx.waitForState("tri", "completed")
        (rc, msg) = try fx.cli(["export", "tri", "--format", "pmtiles", "--output", out, "--bounds", "30,30,40,40", "--min-zoom", "4",
                                "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 1, msg)
        XCTAssertTrue(msg.contains("holds no tile of region 'tri'"), msg)
        // ... and a box over its corner holds the planned tiles there only.
        let corner = fx.root.appendingPathComponent("corner.mbtiles").path
        _ = try export(["tri", "--format", "mbtiles", "--output", corner, "--bounds", "0,0,40,40", "--min-zoom", "4"])
        let planned = Set(fx.manifest("tri").filter { $0.kind == "tile" && $0.key.contains("/4/") }.map { String($0.key.split(separator: "/", maxSplits: 1)[1]) })
        let got = tileSet(try read(corner, served: carto))
        XCTAssertEqual(got, planned.intersection(slippyTiles([0, 0, 40, 40], 4...4)))
        XCTAssertLessThan(got.count, slippyTiles([0, 0, 40, 40], 4...4).count, "the outline leaves part of the box out")
        XCTAssertFalse(FileManager.default.fileExists(atPath: out))
    }

    // MARK: - Several regions in one file

    /// Two overlapping regions of one source in one MBTiles and one PMTiles: their union, each
    /// tile once, the served bytes; the metadata states the union's box and zooms.
    func testTwoOverlappingRegionsMakeTheirUnion() throws {
        let a = [-30.0, 0, 40, 60], b = [20.0, -40, 100, 30]
        try completeCarto("west", bounds: a, zooms: 0...4)
        try completeCarto("east", bounds: b, zooms: 1...4)
        let ua = slippyTiles(a, 0...4), ub = slippyTiles(b, 1...4)
        let union = ua.union(ub)
        XCTAssertGreaterThan(ua.intersection(ub).count, 5, "the regions overlap")
        XCTAssertEqual(Set(fx.manifest("west").filter { $0.kind == "tile" }.map { String($0.key.split(separator: "/", maxSplits: 1)[1]) }), ua)

        let mb = fx.root.appendingPathComponent("u.mbtiles").path
        let r = try export(["west", "east", "--format", "mbtiles", "--output", mb])
        XCTAssertEqual(r["tiles"] as? Int, union.count)
        let m = try read(mb, served: carto)
        XCTAssertEqual(tileSet(m), union)
        XCTAssertEqual(m["duplicates"] as? Int, 0)
        XCTAssertEqual(m["differ_count"] as? Int, 0, "\(m["differ"] ?? "")")
        let meta = m["meta"] as? [String: String] ?? [:]
        XCTAssertEqual(meta["bounds"], "-30,-40,100,60")
        XCTAssertEqual(meta["minzoom"], "0")
        XCTAssertEqual(meta["maxzoom"], "4")
        XCTAssertEqual(try sqlite(mb, "SELECT count(*) FROM images WHERE tile_id NOT IN (SELECT tile_id FROM map)"), "0")

        let pm = fx.root.appendingPathComponent("u.pmtiles").path
        _ = try export(["--format", "pmtiles", "east", "--output", pm, "west"])
        let p = try read(pm, served: carto)
        XCTAssertEqual(tileSet(p), union)
        XCTAssertEqual(p["duplicates"] as? Int, 0)
        XCTAssertEqual(p["differ_count"] as? Int, 0, "\(p["differ"] ?? "")")
        XCTAssertEqual((p["meta"] as? [String: Any])?["addressed_tiles_count"] as? Int, union.count)

        // With a subset: the union's tiles in the box.
        let sub = fx.root.appendingPathComponent("us.mbtiles").path
        _ = try export(["west", "east", "--format", "mbtiles", "--output", sub, "--bounds", "10,-10,50,20", "--min-zoom", "3", "--max-zoom", "4"])
        XCTAssertEqual(tileSet(try read(sub, served: carto)), union.intersection(slippyTiles([10, -10, 50, 20], 3...4)))
    }

    /// Where two regions hold different bytes for one z/x/y (the server changed the tile between
    /// their downloads), the region downloaded last wins, whatever the order of the IDs.
    func testTheNewestRegionWinsAConflict() throws {
        // A copy of z0-2 served by a second nginx whose files change between downloads.
        let root = fx.root.appendingPathComponent("served")
        let dir = root.appendingPathComponent("raster/osm_carto")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        for z in 0...2 { try FileManager.default.copyItem(atPath: carto + "/\(z)", toPath: dir.path + "/\(z)") }
        let second = try NginxServer(root: root)
        servers.append(second)
        try completeCarto("old", bounds: [-180, -85, 180, 85], zooms: 0...2, base: second.baseURL)
        // 2/2/1 now serves the bytes of 2/0/0.
        let changed = dir.path + "/2/2/1.png"
        try FileManager.default.removeItem(atPath: changed)
        try FileManager.default.copyItem(atPath: dir.path + "/2/0/0.png", toPath: changed)
        try completeCarto("new", bounds: [0, 0, 180, 85], zooms: 2...2, base: second.baseURL)
        let newSha = try XCTUnwrap(fx.manifest("new").first { $0.key.hasSuffix("/2/2/1") }?.sha)
        let oldSha = try XCTUnwrap(fx.manifest("old").first { $0.key.hasSuffix("/2/2/1") }?.sha)
        XCTAssertNotEqual(newSha, oldSha)
        let servedNow = dir.path
        for (i, order) in [["old", "new"], ["new", "old"]].enumerated() {
            for format in ["mbtiles", "pmtiles"] {
                let out = fx.root.appendingPathComponent("c\(i).\(format)").path
                let r = try export(order + ["--format", format, "--output", out])
                XCTAssertEqual(r["tiles"] as? Int, 21)
                let t = try read(out, served: servedNow)
                XCTAssertEqual(tileSet(t).count, 21)
                XCTAssertEqual(t["differ_count"] as? Int, 0, "\(format) \(order): \(t["differ"] ?? "")") // 2/2/1 as served now, by "new"
                XCTAssertEqual((t["sha256"] as? [String: String])?["2/2/1"], newSha, "\(format) \(order)")
            }
        }
    }

    /// Regions of different sources, several regions in a format that takes one, and several
    /// without --output are refused with a message; nothing is written.
    func testSeveralRegionsRefusals() throws {
        try completeCarto("carto", bounds: [-10, 35, 30, 60], zooms: 0...2)
        try fx.drop("toner.json", ["id": "toner", "tiles": [nginx.baseURL + "/raster/stamen_toner/{z}/{x}/{y}.png"],
                                   "bounds": [-10, 35, 30, 60], "minZoom": 0, "maxZoom": 2])
        try fx.waitForState("toner", "completed")
        let out = fx.root.appendingPathComponent("mix.pmtiles").path
        var (rc, msg) = try fx.cli(["export", "carto", "toner", "--format", "pmtiles", "--output", out, "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 1, msg)
        XCTAssertTrue(msg.contains("different tile sources") && msg.contains("stamen_toner") && msg.contains("osm_carto"), msg)
        (rc, msg) = try fx.cli(["export", "carto", "toner", "--format", "site", "--output", out, "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 2, msg)
        XCTAssertTrue(msg.contains("only as mbtiles or pmtiles"), msg)
        (rc, msg) = try fx.cli(["export", "carto", "toner", "--format", "mbtiles", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 2, msg)
        XCTAssertTrue(msg.contains("need --output"), msg)
        (rc, msg) = try fx.cli(["export", "carto", "carto", "--format", "mbtiles", "--output", out, "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 2, msg)
        XCTAssertFalse(FileManager.default.fileExists(atPath: out))
        XCTAssertEqual((try? FileManager.default.contentsOfDirectory(atPath: fx.spool + "/exports")) ?? [], [])
    }
}

/// The pure parts: `ExportSubset` and `Exporter.sameSourceProblem`.
final class ExportSubsetUnitTests: XCTestCase {
    func testContainsIsTheHalfOpenCover() {
        let s = ExportSubset(bounds: GeoBounds(west: 0, south: 0, east: 90, north: 60), zooms: 2...3)
        // At z2 the box is within tile x 2, y 1; its west and east edges lie on tile edges (0°, 90°) and pull in no neighbour.
        XCTAssertTrue(s.contains(TileID(z: 2, x: 2, y: 1)))
        XCTAssertFalse(s.contains(TileID(z: 2, x: 3, y: 1)))
        XCTAssertFalse(s.contains(TileID(z: 2, x: 2, y: 2)))
        XCTAssertFalse(s.contains(TileID(z: 1, x: 1, y: 0)), "outside the zooms")
        XCTAssertEqual((0..<8).flatMap { x in (0..<8).map { TileID(z: 3, x: x, y: $0) } }.filter(s.contains).count, 4)
        let across = ExportSubset(bounds: GeoBounds(west: 170, south: -10, east: -170, north: 10), zooms: 3...3)
        XCTAssertTrue(across.contains(TileID(z: 3, x: 0, y: 3)) && across.contains(TileID(z: 3, x: 7, y: 4)))
        XCTAssertFalse(across.contains(TileID(z: 3, x: 4, y: 3)))
    }

    func testParseBoundsAndClip() {
        XCTAssertEqual(ExportSubset.parseBounds("5,45,25.5,55").0, GeoBounds(west: 5, south: 45, east: 25.5, north: 55))
        XCTAssertNotNil(ExportSubset.parseBounds("5,45,25").problem)
        XCTAssertNotNil(ExportSubset.parseBounds("5,55,25,45").problem)
        XCTAssertNotNil(ExportSubset.parseBounds("5,45,200,55").problem)
        XCTAssertNotNil(ExportSubset.parseBounds("5,x,25,55").problem)
        let s = ExportSubset(bounds: GeoBounds(west: 0, south: 40, east: 20, north: 70), zooms: 0...1)
        XCTAssertEqual(s.clipped(to: GeoBounds(west: 10, south: 30, east: 30, north: 50)), GeoBounds(west: 10, south: 40, east: 20, north: 50))
        // Attack round 5: boxes beyond Web Mercator's latitudes hold no tile; one reaching past
        // them is cut there; a box across the antimeridian states the world's longitudes.
        let m = WebMercator.maxLatitude
        XCTAssertEqual(ExportSubset.parseBounds("0,-89.9,10,-86").problem, "the box lies beyond Web Mercator's latitudes (-\(m)...\(m)): it holds no tile")
        XCTAssertNotNil(ExportSubset.parseBounds("0,85.06,10,89").problem)
        XCTAssertEqual(ExportSubset.parseBounds("0,80,10,89").0, GeoBounds(west: 0, south: 80, east: 10, north: m))
        // Across the antimeridian: where the arcs meet, a crossing box (its centre is the
        // export's; MBTiles and PMTiles state it as -180...180: attack round 12).
        let across = ExportSubset(bounds: GeoBounds(west: 170, south: -10, east: -170, north: 10), zooms: 0...1)
        XCTAssertEqual(across.clipped(to: GeoBounds(west: 160, south: -5, east: -160, north: 20)), GeoBounds(west: 170, south: -5, east: -170, north: 10))
        XCTAssertEqual(MBTilesExport.stated(across.clipped(to: GeoBounds(west: 160, south: -5, east: -160, north: 20))), GeoBounds(west: -180, south: -5, east: 180, north: 10))
        XCTAssertEqual(ExportSubset(bounds: GeoBounds(west: 175, south: -10, east: -175, north: 5), zooms: 0...1)
                        .clipped(to: GeoBounds(west: 170, south: -20, east: 175.5, north: 20)), GeoBounds(west: 175, south: -10, east: 175.5, north: 5))
        // A subset that does not cross, of a region that does: the subset's own longitudes.
        XCTAssertEqual(ExportSubset(bounds: GeoBounds(west: 0, south: 40, east: 20, north: 50), zooms: 0...1)
                        .clipped(to: GeoBounds(west: -30, south: -80, east: -100, north: 70)), GeoBounds(west: 0, south: 40, east: 20, north: 50))
        // The whole world meets a crossing region in the region's arc (two pieces touching at
        // ±180 are one), so its centre is the region's (round 13); [180, s, -180, n] has no width.
        XCTAssertEqual(ExportSubset(bounds: GeoBounds(west: -180, south: -85, east: 180, north: 85), zooms: 0...1)
                        .clipped(to: GeoBounds(west: 170, south: -20, east: -170, north: 20)), GeoBounds(west: 170, south: -20, east: -170, north: 20))
        XCTAssertNotNil(ExportSubset.parseBounds("180,-5,-180,5").problem)
        // Arcs meeting in two pieces (100...170 and -170...-100): the smallest box around both,
        // across the antimeridian, centre 180 (round 13: the world's, centre 0); the other way
        // round the same; of two gaps, the widest is left out.
        XCTAssertEqual(ExportSubset(bounds: GeoBounds(west: 100, south: 0, east: -100, north: 10), zooms: 0...1)
                        .clipped(to: GeoBounds(west: -170, south: 0, east: 170, north: 10)), GeoBounds(west: 100, south: 0, east: -100, north: 10))
        XCTAssertEqual(MBTilesExport.center(GeoBounds(west: 100, south: 0, east: -100, north: 10)).0, 180)
        XCTAssertEqual(ExportSubset(bounds: GeoBounds(west: -170, south: 0, east: 170, north: 10), zooms: 0...1)
                        .clipped(to: GeoBounds(west: 100, south: 0, east: -100, north: 10)), GeoBounds(west: 100, south: 0, east: -100, north: 10))
        XCTAssertEqual(ExportSubset(bounds: GeoBounds(west: -179, south: 0, east: 179, north: 10), zooms: 0...1)
                        .clipped(to: GeoBounds(west: 0, south: 0, east: -1, north: 10)), GeoBounds(west: -179, south: 0, east: 179, north: 10),
                       "pieces -179...-1 and 0...179: the widest gap (2 degrees at 180, not 1 at 0) is left out")
        XCTAssertEqual(ExportSubset(bounds: GeoBounds(west: -10, south: 0, east: 10, north: 10), zooms: 0...1)
                        .clipped(to: GeoBounds(west: 170, south: 0, east: -170, north: 10)), GeoBounds(west: -180, south: 0, east: 180, north: 10), "no meeting")
    }

    func testSameSourceIsTheSameResolvedTemplate() {
        let t = TileURLTemplate("https://a.test/{z}/{x}/{y}.png")
        func set(_ name: String, _ tpl: TileURLTemplate) -> TileSet { TileSet(source: name, template: tpl, rects: []) }
        XCTAssertNil(Exporter.sameSourceProblem([("a", set("tiles0", t)), ("b", set("osm", t))]), "names may differ")
        XCTAssertNotNil(Exporter.sameSourceProblem([("a", set("s", t)), ("b", set("s", TileURLTemplate("https://a.test/{z}/{x}/{y}.png?key=2")))]))
        XCTAssertNotNil(Exporter.sameSourceProblem([("a", set("s", t)), ("b", set("s", TileURLTemplate("https://a.test/{z}/{x}/{y}.png", tms: true)))]))
    }
}
