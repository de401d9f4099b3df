// Issue 30: exports read objects in pack order, and the site copies tile files out of the packs
// (copy_file_range). A store whose packs hold the tiles of three regions interleaved, in the reverse
// of their manifest order, exports to every format the tiles a server served: MBTiles read by
// Python's sqlite3, PMTiles by the PyPI `pmtiles` reader (Tests/Support/read_tiles.py), the site's
// files compared byte for byte; and a style region (the MapLibre database needs a style), its
// objects rewritten into such a store, exports its tiles to the MapLibre database (read by sqlite3
// and zlib in Python) and the site.
import Foundation
import TileSpoolCore
import TileSpoolIO
import XCTest

final class PackOrderExportTests: XCTestCase {
    var fx: SpoolFixture!
    var mapdata: URL!

    var nginx: NginxServer?

    override func setUpWithError() throws {
        mapdata = try MapData.require()
        fx = try SpoolFixture()
        try fx.start()
    }

    override func tearDown() { fx?.stop(); nginx?.stop() }

    func export(_ id: String, _ format: String, _ out: String, store: String, file: StaticString = #filePath, line: UInt = #line) throws -> [String: Any] {
        let (rc, text) = try fx.cli(["export", id, "--format", format, "--output", out, "--spool", fx.spool, "--store", store, "--json"])
        XCTAssertEqual(rc, 0, text, file: file, line: line)
        return (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] ?? [:]
    }
    func decoded(_ d: Data) -> Data { isGzip([UInt8](d.prefix(2))) ? (gunzip(d) ?? d) : d }

    struct Region {
        var id: String
        var served: String    // the folder a server served the tiles from: <served>/z/x/y.<ext>
        var ext: String
        var request: RegionRequest
        var plan: ResourcePlan
        var tiles: [(TileID, String, Data?)] = [] // manifest order: tile, key, the served bytes (nil: not served, an empty tile)
    }

    func region(_ id: String, served: String, ext: String, bounds: GeoBounds, maxZoom: Int) throws -> Region {
        let template = "http://127.0.0.1:9/\(id)/{z}/{x}/{y}.\(ext)"
        let request = RegionRequest(id: id, source: .tiles([template]), bounds: bounds, minZoom: 0, maxZoom: maxZoom)
        let plan = try Planner.plan(request: request, templates: [template])
        var r = Region(id: id, served: served, ext: ext, request: request, plan: plan)
        for set in plan.tileSets {
            for rect in set.rects {
                for i in 0..<rect.count {
                    let t = rect.tile(at: i)
                    let body = FileManager.default.contents(atPath: "\(served)/\(t.z)/\(t.x)/\(t.y).\(ext)")
                    r.tiles.append((t, ManifestLine.tileKey(source: set.source, t), body))
                }
            }
        }
        return r
    }

    func testEveryFormatOfInterleavedPacksHoldsTheServedTiles() throws {
        try ExportTools.require([ExportTools.python])
        let toner = mapdata.appendingPathComponent("raster/stamen_toner").path
        let liech = mapdata.appendingPathComponent("tiles/liechtenstein").path
        let regions = [
            try region("west", served: toner, ext: "png", bounds: GeoBounds(west: -180, south: -85, east: -1, north: 85), maxZoom: 3),
            try region("east", served: toner, ext: "png", bounds: GeoBounds(west: 1, south: -85, east: 180, north: 85), maxZoom: 3),
            // Vector tiles served gzip-compressed: stored as gzip files, decoded in the site.
            try region("liech", served: liech, ext: "pbf", bounds: GeoBounds(west: 9.4717, south: 47.0484, east: 9.6357, north: 47.2706), maxZoom: 14),
        ]
        XCTAssertGreaterThan(regions[2].tiles.filter { $0.2 != nil }.count, 100)
        XCTAssertTrue(regions[2].tiles.contains { $0.2.map { isGzip([UInt8]($0.prefix(2))) } == true })

        // Objects go in the reverse of manifest order, the regions taking turns, a pack sealed
        // every 16 puts: each region's objects are spread over many packs, out of order.
        let store = try PackedStore(root: fx.store)
        var queues = regions.map { Array($0.tiles.reversed()) }
        var puts = 0
        while queues.contains(where: { !$0.isEmpty }) {
            for k in queues.indices where !queues[k].isEmpty {
                let (_, _, body) = queues[k].removeFirst()
                guard let body else { continue }
                try store.put(body)
                puts += 1
                if puts % 16 == 0 { try store.sync() }
            }
        }
        try store.sync()
        for k in regions.indices {
            let locations = regions[k].tiles.compactMap { $0.2.flatMap { store.objectLocation(SHA256.hex($0)) } }
            XCTAssertEqual(locations.count, regions[k].tiles.filter { $0.2 != nil }.count, "every object is in a sealed pack")
            XCTAssertGreaterThan(Set(locations.map(\.pack)).count, 3)
            XCTAssertNotEqual(locations, locations.sorted(), "pack order differs from manifest order")
        }

        for r in regions {
            let files = RegionFiles(dir: fx.store + "/regions/" + r.id)
            try files.create(request: r.request)
            try files.savePlan(r.plan)
            try files.appendToManifest(r.tiles.map { (_, key, body) in
                ManifestLine(kind: .tile, sha256: body.map { SHA256.hex($0) }, bytes: body?.count ?? 0, key: key, url: "-")
            })
            try Files.writeAtomically(Data("completed\n".utf8), to: fx.spool + "/status/\(r.id).state")
            let st = RegionStatus(id: r.id, state: .completed, progress: RegionProgress(), error: nil, request: nil, context: .null)
            try StatusWriter(layout: SpoolLayout(root: fx.spool)).write(st)
        }


        for r in regions {
            let served = r.tiles.filter { $0.2 != nil }
            let expected = Set(served.map { "\($0.0.z)/\($0.0.x)/\($0.0.y)" })
            // MBTiles (Python's sqlite3) and PMTiles (the PyPI reader): every served tile, its bytes.
            for format in ["mbtiles", "pmtiles"] {
                let out = fx.root.appendingPathComponent("\(r.id).\(format)").path
                let result = try export(r.id, format, out, store: fx.store)
                XCTAssertEqual(result["tiles"] as? Int, served.count, "\(r.id) \(format)")
                let (rc, text) = try runTool(ExportTools.python, [ExportTools.support + "/read_tiles.py", out, r.served, r.ext])
                XCTAssertEqual(rc, 0, text)
                let read = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] ?? [:]
                XCTAssertEqual(Set(read["tiles"] as? [String] ?? []), expected, "\(r.id) \(format)")
                XCTAssertEqual(read["duplicates"] as? Int, 0)
                XCTAssertEqual(read["differ_count"] as? Int, 0, "\(r.id) \(format): \(read["differ"] ?? "")")
            }
            // The site: each tile file is the object's bytes (a gzip vector tile decoded).
            let site = fx.root.appendingPathComponent("\(r.id)-site").path
            _ = try export(r.id, "site", site, store: fx.store)
            let src = r.plan.tileSets[0].source
            var files = 0
            for (t, _, body) in r.tiles {
                let path = "\(site)/tiles/\(src)/\(t.z)/\(t.x)/\(t.y).\(r.ext)"
                guard let body else {
                    // An empty vector tile is an empty file; an empty raster tile is absent.
                    if r.ext == "pbf" { XCTAssertEqual(FileManager.default.contents(atPath: path), Data()) } else { XCTAssertFalse(FileManager.default.fileExists(atPath: path)) }
                    continue
                }
                let got = FileManager.default.contents(atPath: path)
                XCTAssertEqual(got, r.ext == "pbf" ? decoded(body) : body, "\(r.id) \(path)")
                if r.ext == "pbf" { XCTAssertFalse(isGzip([UInt8]((got ?? Data()).prefix(2))), path) }
                files += 1
            }
            XCTAssertEqual(files, served.count)
        }

        // A pack gone (the store damaged): every format fails naming what cannot be read, and
        // writes nothing.
        let victim = try XCTUnwrap(regions[0].tiles.compactMap { $0.2.flatMap { store.objectLocation(SHA256.hex($0)) } }.first)
        try FileManager.default.removeItem(atPath: "\(fx.store)/packs/\(victim.pack).pack")
        for format in ["mbtiles", "pmtiles", "site"] {
            let out = fx.root.appendingPathComponent("damaged.\(format)").path
            let (rc, text) = try fx.cli(["export", "west", "--format", format, "--output", out, "--spool", fx.spool, "--store", fx.store])
            XCTAssertEqual(rc, 1, text)
            XCTAssertTrue(text.contains("cannot be read") && text.contains("tilespool verify"), text)
            XCTAssertFalse(FileManager.default.fileExists(atPath: out), format)
        }
    }

    /// A style region (Monaco, vector tiles served gzip) downloaded by the daemon, its objects then
    /// written into a second store in the reverse of manifest order, a pack every 8 objects: the
    /// MapLibre database and the site exported from that store hold the served tiles.
    func testMapLibreAndSiteOfAStyleRegionInShuffledPacks() throws {
        try ExportTools.require([ExportTools.python])
        let server = try NginxServer(root: mapdata)
        nginx = server
        try fx.drop("monaco.json", ["style": server.baseURL + "/styles/bright/style.local-template.json",
                                    "bounds": [7.409205, 43.72335, 7.448637, 43.75169], "minZoom": 0, "maxZoom": 14])
        try fx.waitForState("monaco", "completed")
        _ = fx.stop()

        let from = try PackedStore(root: fx.store)
        var lines: [ManifestLine] = []
        RegionFiles(dir: fx.store + "/regions/monaco").readManifest { lines.append($0) }
        XCTAssertGreaterThan(lines.count, 300)
        let shuffled = fx.root.appendingPathComponent("shuffled").path
        let to = try PackedStore(root: shuffled)
        var puts = 0
        for line in lines.reversed() {
            guard let sha = line.sha256 else { continue }
            try to.put(try from.read(sha, limit: 1 << 30))
            puts += 1
            if puts % 8 == 0 { try to.sync() }
        }
        try to.sync()
        try FileManager.default.copyItem(atPath: fx.store + "/regions/monaco", toPath: shuffled + "/regions/monaco")
        let tiles = lines.filter { $0.kind == .tile }
        let locations = tiles.compactMap { $0.sha256.flatMap { to.objectLocation($0) } }
        XCTAssertEqual(locations.count, tiles.filter { $0.sha256 != nil }.count)
        XCTAssertGreaterThan(Set(locations.map(\.pack)).count, 2)
        XCTAssertNotEqual(locations, locations.sorted(), "pack order differs from manifest order")

        let served = mapdata.appendingPathComponent("tiles/monaco").path
        let db = fx.root.appendingPathComponent("monaco.db").path
        let r = try export("monaco", "maplibre", db, store: shuffled)
        XCTAssertEqual(r["tiles"] as? Int, 23)
        let (rc, text) = try runTool(ExportTools.python, ["-c", """
            import sqlite3, sys, os, gzip, zlib, json
            db = sqlite3.connect(sys.argv[1]); served = sys.argv[2]
            dec = lambda b: gzip.decompress(b) if b[:2] == b'\\x1f\\x8b' else b
            rows = differ = nulls = 0
            for z, x, y, data, c in db.execute('SELECT z, x, y, data, compressed FROM tiles'):
                rows += 1
                p = os.path.join(served, str(z), str(x), f'{y}.pbf')
                if data is None:
                    nulls += 1; continue
                body = zlib.decompress(data) if c else bytes(data)
                differ += not os.path.exists(p) or body != dec(open(p, 'rb').read())
            print(json.dumps({'rows': rows, 'nulls': nulls, 'differ': differ}))
            """, db, served])
        XCTAssertEqual(rc, 0, text)
        let rows = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Int] ?? [:]
        XCTAssertEqual(rows["rows"], 23)
        XCTAssertEqual(rows["nulls"], 2, "the sea tile (404) and the empty z0")
        XCTAssertEqual(rows["differ"], 0)
        // The same rows as the export from the store the daemon wrote (any order of insertion).
        let db0 = fx.root.appendingPathComponent("monaco0.db").path
        _ = try export("monaco", "maplibre", db0, store: fx.store)
        let q = "SELECT z, x, y, hex(data) FROM tiles ORDER BY z, x, y; SELECT url, hex(data) FROM resources ORDER BY url"
        XCTAssertEqual(try sqlite(db, q), try sqlite(db0, q))

        let site = fx.root.appendingPathComponent("monaco-site").path
        _ = try export("monaco", "site", site, store: shuffled)
        var files = 0
        for line in tiles {
            guard let sha = line.sha256, let (source, t) = ManifestLine.parseTileKey(line.key) else { continue }
            let got = FileManager.default.contents(atPath: "\(site)/tiles/\(source)/\(t.z)/\(t.x)/\(t.y).pbf")
            XCTAssertEqual(got, decoded(try from.read(sha, limit: 1 << 30)), line.key)
            let file = "\(served)/\(t.z)/\(t.x)/\(t.y).pbf"
            if let body = FileManager.default.contents(atPath: file) { XCTAssertEqual(got, decoded(body), file) }
            files += 1
        }
        XCTAssertEqual(files, 21, "23 less the sea tile (404) and the empty z0")
    }
}

/// Inflates a gzip stream with Python's gzip module (a decoder we did not write).
func gunzip(_ data: Data) -> Data? { pythonDecompress(data, module: "gzip") }
