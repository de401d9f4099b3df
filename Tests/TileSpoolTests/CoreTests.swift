import Foundation
import XCTest
@testable import TileSpoolCore

/// Pure tests of the core: tile cover, covering zoom, glyph ranges, planning, state machine.
final class TileCoverTests: XCTestCase {
    func count(_ b: GeoBounds, _ z: Int) -> Int { WebMercator.cover(b, z: z).reduce(0) { $0 + $1.count } }

    /// Liechtenstein's TileJSON bounds against the tiles tilemaker generated for them in
    /// ../shared/mapdata: at every zoom the cover is exactly the bounding rectangle of the tiles on
    /// disk (tilemaker skips empty corner tiles at z13-14, so counts are compared up to z12).
    func testCoverMatchesTilesGeneratedForLiechtenstein() throws {
        let root = try MapData.require()
        let tj = try JSONSerialization.jsonObject(with: Data(contentsOf: root.appendingPathComponent("tiles/liechtenstein.tilejson.json"))) as! [String: Any]
        let b = (tj["bounds"] as! [NSNumber]).map(\.doubleValue)
        let bounds = GeoBounds(west: b[0], south: b[1], east: b[2], north: b[3])
        for z in 0...14 {
            let zdir = root.appendingPathComponent("tiles/liechtenstein/\(z)")
            var onDisk: [TileID] = []
            for x in try FileManager.default.contentsOfDirectory(atPath: zdir.path) {
                for y in try FileManager.default.contentsOfDirectory(atPath: zdir.appendingPathComponent(x).path) {
                    onDisk.append(TileID(z: z, x: Int(x)!, y: Int(y.split(separator: ".")[0])!))
                }
            }
            let disk = TileRect(z: z, minX: onDisk.map(\.x).min()!, minY: onDisk.map(\.y).min()!,
                                maxX: onDisk.map(\.x).max()!, maxY: onDisk.map(\.y).max()!)
            XCTAssertEqual(WebMercator.cover(bounds, z: z), [disk], "zoom \(z)")
            if z <= 12 { XCTAssertEqual(count(bounds, z), onDisk.count, "zoom \(z)") }
        }
    }

    /// Monaco's bounds at z14: 2 columns x 3 rows; the data has 5 tiles and one sea tile (8530/5975).
    func testCoverMonacoZ14() {
        let rects = WebMercator.cover(GeoBounds(west: 7.409205, south: 43.72335, east: 7.448637, north: 43.75169), z: 14)
        XCTAssertEqual(rects, [TileRect(z: 14, minX: 8529, minY: 5973, maxX: 8530, maxY: 5975)])
    }

    /// The whole world: 4^z tiles (latitudes clamped to ±85.0511).
    func testCoverWorld() {
        for z in [0, 1, 3, 7] {
            XCTAssertEqual(count(GeoBounds(west: -180, south: -90, east: 180, north: 90), z), 1 << (2 * z))
        }
    }

    /// Crossing the antimeridian: [170, -10, -170, 10]. By hand at z5: columns 31 and 0
    /// ((170+180)/360*32 = 31.1; (-170+180)/360*32 = 0.89), rows 15 and 16 (y(±10°) = 15.1 / 16.9).
    func testCoverAcrossTheAntimeridian() {
        let b = GeoBounds(west: 170, south: -10, east: -170, north: 10)
        XCTAssertEqual(count(b, 0), 1)
        XCTAssertEqual(count(b, 2), 4)
        let r5 = WebMercator.cover(b, z: 5)
        XCTAssertEqual(r5, [TileRect(z: 5, minX: 0, minY: 15, maxX: 0, maxY: 16), TileRect(z: 5, minX: 31, minY: 15, maxX: 31, maxY: 16)])
    }

    /// Touching the latitude clamp: [0, 80, 10, 89] at z6: rows 0...7 (y(80°) = 7.18), columns 32...33.
    func testCoverTouchingTheLatitudeClamp() {
        let b = GeoBounds(west: 0, south: 80, east: 10, north: 89)
        XCTAssertEqual(WebMercator.cover(b, z: 6), [TileRect(z: 6, minX: 32, minY: 0, maxX: 33, maxY: 7)])
        XCTAssertEqual(count(b, 0), 1)
    }

    /// A box whose edges lie on tile edges does not pull in the neighbours.
    func testCoverOnTileEdges() {
        XCTAssertEqual(count(GeoBounds(west: 0, south: 0, east: 90, north: 60), 2), 1) // column 2, row 1 (y(0°) = 2.0 exactly)
        XCTAssertEqual(count(GeoBounds(west: -180, south: -85.0511287798066, east: 0, north: 0), 1), 1)
    }

    func testCoveringZoomRule() {
        XCTAssertEqual(WebMercator.coveringZoom(10, tileSize: 512, rounds: false), 10) // vector
        XCTAssertEqual(WebMercator.coveringZoom(10, tileSize: 256, rounds: true), 11)  // 256 px raster
        XCTAssertEqual(WebMercator.coveringZoom(10, tileSize: 512, rounds: true), 10)
        XCTAssertEqual(WebMercator.coveringZoom(0, tileSize: 256, rounds: false), 1)   // raster-dem floors
        XCTAssertEqual(WebMercator.coveringZoom(10, tileSize: 1024, rounds: true), 9)
    }

    func testQuadkeyAndTMS() {
        XCTAssertEqual(TileID(z: 3, x: 3, y: 5).quadkey, "213") // Bing Maps Tile System example
        XCTAssertEqual(TileID(z: 3, x: 3, y: 5).tmsY, 2)
        let t = TileURLTemplate("http://h/{z}/{x}/{-y}/{quadkey}{ratio}.png", ratio: "@2x")
        XCTAssertEqual(t.url(for: TileID(z: 3, x: 3, y: 5)), "http://h/3/3/2/213@2x.png")
        XCTAssertEqual(TileURLTemplate("http://h/{z}/{x}/{y}", tms: true).url(for: TileID(z: 1, x: 0, y: 0)), "http://h/1/0/1")
    }

    func testTemplatePartsAndCoding() throws {
        let t = TileURLTemplate("https://{s}.h/v1/{z}/{x}/{y}{ratio}.pbf?key=a{b}", ratio: "@2x")
        // {s} is a subdomain since issue 10: (8529 + 5973) % 3 = 0, "a"; {b} is no token and stays.
        XCTAssertEqual(t.url(for: TileID(z: 14, x: 8529, y: 5973)), "https://a.h/v1/14/8529/5973@2x.pbf?key=a{b}")
        let back = try JSONDecoder().decode(TileURLTemplate.self, from: JSONEncoder().encode(t))
        XCTAssertEqual(back, t)
        XCTAssertEqual(back.url(for: TileID(z: 0, x: 0, y: 0)), "https://a.h/v1/0/0/0@2x.pbf?key=a{b}")
        XCTAssertEqual(TileURLTemplate("http://h/{bbox-epsg-3857}").url(for: TileID(z: 0, x: 0, y: 0)),
                       "http://h/-20037508.342789244,-20037508.342789244,20037508.342789244,20037508.342789244")
    }

    func testGlyphRanges() {
        let all = GlyphRanges.starts(includeIdeographs: true)
        XCTAssertEqual(all.count, 256)
        XCTAssertEqual(all.first, 0)
        XCTAssertEqual(all.last, 65280)
        let some = GlyphRanges.starts(includeIdeographs: false)
        XCTAssertEqual(some.count, 130)
        XCTAssertFalse(some.contains(0x4E00))
        XCTAssertFalse(some.contains(0xAC00))
        XCTAssertTrue(some.contains(0x4D00))
        XCTAssertTrue(some.contains(0xA000))
        XCTAssertTrue(some.contains(0xD800))
        XCTAssertEqual(GlyphRanges.name(256), "256-511")
    }
}

final class PlannerTests: XCTestCase {
    /// The plan of ../shared/mapdata's bright style over Monaco z0-14.
    func testBrightStylePlan() throws {
        let root = try MapData.require()
        let base = "http://127.0.0.1:9"
        let text = try String(contentsOf: root.appendingPathComponent("styles/bright/style.local-template.json"), encoding: .utf8)
            .replacingOccurrences(of: "__BASE__", with: base)
        let style = try StyleDocument(data: Data(text.utf8), baseURL: base + "/styles/bright/style.json")
        XCTAssertEqual(style.sources.map(\.name), ["openmaptiles"])
        XCTAssertEqual(style.fontstacks, [["KlokanTech Noto Sans Bold"], ["KlokanTech Noto Sans Italic"], ["KlokanTech Noto Sans Regular"]])
        let tjText = try String(contentsOf: root.appendingPathComponent("tiles/monaco.tilejson.json"), encoding: .utf8)
            .replacingOccurrences(of: "__BASE__", with: base)
        let tj = try TileJSON(data: Data(tjText.utf8), baseURL: base + "/tiles/monaco.tilejson.json")
        XCTAssertEqual(tj.minZoom, 0); XCTAssertEqual(tj.maxZoom, 14)
        let req = RegionRequest(id: "monaco", source: .style(base + "/styles/bright/style.json"),
                                bounds: GeoBounds(west: 7.409205, south: 43.72335, east: 7.448637, north: 43.75169),
                                minZoom: 0, maxZoom: 14)
        let plan = try Planner.plan(request: req, styleURL: base + "/styles/bright/style.json", style: style, tileJSONs: ["openmaptiles": tj])
        let kinds = Dictionary(grouping: plan.resources, by: \.kind).mapValues(\.count)
        XCTAssertEqual(kinds[.style], 1)
        XCTAssertEqual(kinds[.source], 1)
        XCTAssertEqual(kinds[.sprite], 4)
        XCTAssertEqual(kinds[.glyphs], 3 * 130)
        // z0-12 one tile each, z13 2x2, z14 2x3.
        XCTAssertEqual(plan.tileCount, 13 + 4 + 6)
        XCTAssertEqual(plan.count, 1 + 1 + 4 + 390 + 23)
        XCTAssertTrue(plan.resources.contains { $0.url == base + "/fonts/KlokanTech%20Noto%20Sans%20Bold/0-255.pbf" })
        XCTAssertTrue(plan.resources.contains { $0.url == base + "/sprites/osm-bright/sprite@2x.png" })
        // Index arithmetic round-trips for every resource.
        for i in 0..<plan.count {
            switch plan.item(at: i) {
            case .resource(let r): XCTAssertEqual(plan.index(kind: r.kind, key: r.key), i)
            case .tile(let s, let t): XCTAssertEqual(plan.index(kind: .tile, key: ManifestLine.tileKey(source: plan.tileSets[s].source, t)), i)
            }
        }
    }

    /// A 256 px raster source loads tiles one zoom deeper (MapLibre's covering-zoom rule), clamped to the TileJSON.
    func testRasterSourceUsesCoveringZoom() throws {
        let styleJSON = #"{"version":8,"sources":{"r":{"type":"raster","tileSize":256,"tiles":["http://h/{z}/{x}/{y}.png"],"maxzoom":3}},"layers":[]}"#
        let style = try StyleDocument(data: Data(styleJSON.utf8), baseURL: "http://h/style.json")
        let req = RegionRequest(id: "r", source: .style("http://h/style.json"),
                                bounds: GeoBounds(west: -180, south: -85, east: 180, north: 85), minZoom: 0, maxZoom: 4)
        let plan = try Planner.plan(request: req, styleURL: "http://h/style.json", style: style, tileJSONs: [:])
        XCTAssertEqual(plan.tileSets[0].rects.map(\.z), [1, 2, 3])
        XCTAssertEqual(plan.tileCount, 4 + 16 + 64)
    }

    /// A raster source's `tileSize` that is not a whole number was read as the default 512, so a
    /// 256 px source written `"256"` planned a zoom too shallow: refused as MapLibre's style
    /// validation refuses it, naming the value; `null` is the default, as absent.
    func testARasterTileSizeThatIsNotAWholeNumberIsRefused() throws {
        func style(_ tileSize: String) -> Data {
            Data(#"{"version":8,"sources":{"r":{"type":"raster","tileSize":\#(tileSize),"tiles":["http://h/{z}/{x}/{y}.png"]}},"layers":[]}"#.utf8)
        }
        for (value, named) in [(#""256""#, "not a string"), ("100.5", "not 100.5"), ("true", "not a boolean"), ("[256]", "not an array")] {
            XCTAssertThrowsError(try StyleDocument(data: style(value), baseURL: "http://h/s.json")) { e in
                XCTAssertEqual((e as? RegionError)?.code, .invalidStyle)
                XCTAssertTrue((e as? RegionError)?.message.contains("source 'r': tileSize must be a whole number of pixels (64, 128, 256, 512, 1024 or 2048), \(named)") == true, "\(e)")
            }
        }
        XCTAssertEqual(try StyleDocument(data: style("null"), baseURL: "http://h/s.json").sources[0].tileSize, 512)
        XCTAssertEqual(try StyleDocument(data: style("256.0"), baseURL: "http://h/s.json").sources[0].tileSize, 256)
    }

    /// Attack round 42: 1,000 fontstacks of 8,000 characters (an 8 MB style) made 130,000 glyph
    /// URLs of about 24 KB each, and the daemon grew past 9 GB planning them. The style's own
    /// resources may take 32 MiB of URLs: such a style is refused before they are made, as is a
    /// glyph template naming {fontstack} many times; a style of ordinary names plans as before.
    func testAStyleWhoseGlyphURLsWouldTakeMoreThan32MiBIsRefused() throws {
        func style(stacks: Int, nameLength: Int, glyphs: String = "http://h/{fontstack}/{range}.pbf") throws -> StyleDocument {
            let layers = (0..<stacks).map { i -> [String: Any] in
                ["id": "l\(i)", "type": "symbol", "source": "s", "layout": ["text-field": "x", "text-font": ["F\(i)-" + String(repeating: " ", count: nameLength)]]]
            }
            let doc: [String: Any] = ["version": 8, "glyphs": glyphs, "layers": layers,
                                      "sources": ["s": ["type": "vector", "tiles": ["http://h/t/{z}/{x}/{y}.pbf"], "maxzoom": 0]]]
            return try StyleDocument(data: JSONSerialization.data(withJSONObject: doc), baseURL: "http://h/style.json")
        }
        let req = RegionRequest(id: "f", source: .style("http://h/style.json"), bounds: GeoBounds(west: -10, south: -10, east: 10, north: 10), minZoom: 0, maxZoom: 0)
        for refused in [try style(stacks: 1000, nameLength: 8000), try style(stacks: 10, nameLength: 10, glyphs: "http://h/" + String(repeating: "{fontstack}", count: 100_000) + "/{range}.pbf")] {
            XCTAssertThrowsError(try Planner.plan(request: req, styleURL: "http://h/style.json", style: refused, tileJSONs: [:])) { e in
                XCTAssertEqual((e as? RegionError)?.code, .invalidStyle)
                XCTAssertTrue((e as? RegionError)?.message.contains("more than 32 MiB of URLs") == true, "\(e)")
            }
        }
        let fine = try Planner.plan(request: req, styleURL: "http://h/style.json", style: try style(stacks: 1000, nameLength: 20), tileJSONs: [:])
        XCTAssertEqual(fine.resources.filter { $0.kind == .glyphs }.count, 130_000)
    }

    func testTilesRequestUsesTileZooms() {
        let req = RegionRequest(id: "t", source: .tiles(["http://h/{z}/{x}/{y}.png"]),
                                bounds: GeoBounds(west: -180, south: -85, east: 180, north: 85), minZoom: 0, maxZoom: 3)
        XCTAssertEqual(try Planner.plan(request: req, templates: ["http://h/{z}/{x}/{y}.png"]).tileCount, 85)
    }

    func testInlineSourceZoomsAreCheckedAndKeysAreUnique() throws {
        let bad = #"{"version":8,"sources":{"r":{"type":"raster","tileSize":2048,"minzoom":-5,"tiles":["http://h/{z}/{x}/{y}.png"]}},"layers":[]}"#
        XCTAssertThrowsError(try StyleDocument(data: Data(bad.utf8), baseURL: "http://h/s.json")) { e in
            XCTAssertEqual((e as? RegionError)?.code, .invalidStyle)
        }
        // A 2048 px raster source at z0 would load zoom -2: clamped to 0.
        let big = #"{"version":8,"sources":{"r":{"type":"raster","tileSize":2048,"tiles":["http://h/{z}/{x}/{y}.png"]}},"layers":[]}"#
        let style = try StyleDocument(data: Data(big.utf8), baseURL: "http://h/s.json")
        let req = RegionRequest(id: "r", source: .style("http://h/s.json"), bounds: GeoBounds(west: 0, south: 0, east: 1, north: 1), minZoom: 0, maxZoom: 3)
        XCTAssertEqual(try Planner.plan(request: req, styleURL: "http://h/s.json", style: style, tileJSONs: [:]).tileSets[0].rects.map(\.z), [0, 1])
        // Fontstacks ["A,B"] and ["A", "B"] name the same glyph files: planned once.
        let fonts = #"{"version":8,"sources":{},"glyphs":"http://h/{fontstack}/{range}.pbf","layers":[{"id":"a","type":"symbol","layout":{"text-font":["A,B"]}},{"id":"b","type":"symbol","layout":{"text-font":["A","B"]}}]}"#
        let fstyle = try StyleDocument(data: Data(fonts.utf8), baseURL: "http://h/s.json")
        let plan = try Planner.plan(request: req, styleURL: "http://h/s.json", style: fstyle, tileJSONs: [:])
        XCTAssertEqual(plan.resources.filter { $0.kind == .glyphs }.count, 130)
    }

    func testTextFontExpressions() throws {
        let styleJSON = #"""
        {"version":8,"sources":{},"glyphs":"http://h/{fontstack}/{range}.pbf","layers":[
          {"id":"a","type":"symbol","layout":{"text-font":["step",["zoom"],["literal",["A","B"]],5,["literal",["C"]]]}},
          {"id":"b","type":"symbol","layout":{"text-field":"x"}},
          {"id":"c","type":"line","layout":{"text-font":["Z"]}}]}
        """#
        let style = try StyleDocument(data: Data(styleJSON.utf8), baseURL: "http://h/s.json")
        XCTAssertEqual(style.fontstacks, [["A", "B"], ["C"], StyleDocument.defaultFontstack])
        let req = RegionRequest(id: "g", source: .style("http://h/s.json"), bounds: GeoBounds(west: 0, south: 0, east: 1, north: 1), minZoom: 0, maxZoom: 0)
        let plan = try Planner.plan(request: req, styleURL: "http://h/s.json", style: style, tileJSONs: [:])
        XCTAssertTrue(plan.resources.contains { $0.url == "http://h/A%2cB/0-255.pbf" })
    }
}

final class StateMachineTests: XCTestCase {
    /// Every (state, action) pair against the table in docs/contract.md.
    func testEveryStateActionPair() {
        let expected: [RegionState: [RegionAction: Transition]] = [
            .queued: [.pause: .to(.pausedUser), .cancel: .to(.cancelled)],
            .downloading: [.pause: .to(.pausedUser), .cancel: .to(.cancelled)],
            .pausedUser: [.resume: .to(.queued), .cancel: .to(.cancelled)],
            .pausedNetwork: [.resume: .to(.queued), .cancel: .to(.cancelled)],
            .failedStorage: [.resume: .to(.queued), .cancel: .to(.cancelled)],
            .failed: [.resume: .to(.queued)],
            .cancelled: [.resume: .to(.queued)],
            .completed: [.refresh: .beginRefresh],
        ]
        for state in RegionState.allCases {
            for action in RegionAction.allCases {
                let got = RegionStateMachine.apply(action, to: state)
                if action == .delete { XCTAssertEqual(got, .delete); continue }
                if let want = expected[state]![action] {
                    XCTAssertEqual(got, want, "\(state) + \(action)")
                } else if case .ignored = got {} else {
                    XCTFail("\(state) + \(action) should be ignored, got \(got)")
                }
            }
        }
    }

    /// While a refresh is under way, nothing loses the pack: failures, a cancel and a network loss
    /// all abandon the refresh (the region completed with its pack as it was), the finish swaps
    /// it in; pause and resume work as for a download.
    func testRefreshingRegion() {
        let m = RegionStateMachine.self
        XCTAssertEqual(m.apply(.cancel, to: .downloading, refreshing: true), .abandonRefresh)
        XCTAssertEqual(m.apply(.cancel, to: .queued, refreshing: true), .abandonRefresh)
        XCTAssertEqual(m.apply(.cancel, to: .pausedUser, refreshing: true), .abandonRefresh)
        XCTAssertEqual(m.apply(.pause, to: .downloading, refreshing: true), .to(.pausedUser))
        XCTAssertEqual(m.apply(.resume, to: .pausedUser, refreshing: true), .to(.queued))
        XCTAssertEqual(m.apply(.delete, to: .downloading, refreshing: true), .delete)
        if case .ignored = m.apply(.refresh, to: .downloading, refreshing: true) {} else { XCTFail("a second refresh must be ignored") }
        XCTAssertEqual(m.apply(.fail, to: .downloading, refreshing: true), .abandonRefresh)
        XCTAssertEqual(m.apply(.fail, to: .queued, refreshing: true), .abandonRefresh)
        XCTAssertEqual(m.apply(.storageFailed, to: .downloading, refreshing: true), .abandonRefresh)
        XCTAssertEqual(m.apply(.networkLost, to: .downloading, refreshing: true), .abandonRefresh)
        XCTAssertEqual(m.apply(.finish, to: .downloading, refreshing: true), .swapRefresh)
        XCTAssertEqual(m.apply(.start, to: .queued, refreshing: true), .to(.downloading))
    }

    /// The refresh phase is left only by `swapRefresh`, `abandonRefresh` or `delete`: no action
    /// or event in any state of a refresh (queued, downloading, pausedUser) leads to a state in
    /// which the pack would be lost or unusable (failed, cancelled, failedStorage, pausedNetwork),
    /// and only the refresh phase swaps or abandons.
    func testNoTransitionOfARefreshLosesThePack() {
        let events: [RegionEvent] = [.start, .finish, .networkLost, .networkBack, .storageFailed, .fail]
        let losing: Set<RegionState> = [.failed, .cancelled, .failedStorage, .pausedNetwork]
        for state in [RegionState.queued, .downloading, .pausedUser] {
            let got = RegionAction.allCases.map { RegionStateMachine.apply($0, to: state, refreshing: true) }
                + events.map { RegionStateMachine.apply($0, to: state, refreshing: true) }
            for t in got {
                if case .to(let next) = t { XCTAssertFalse(losing.contains(next), "refreshing \(state) -> \(next)") }
            }
        }
        for state in RegionState.allCases {
            let got = RegionAction.allCases.map { RegionStateMachine.apply($0, to: state) }
                + events.map { RegionStateMachine.apply($0, to: state) }
            XCTAssertFalse(got.contains(.swapRefresh) || got.contains(.abandonRefresh), "\(state) outside a refresh")
        }
    }

    func testEvents() {
        XCTAssertEqual(RegionStateMachine.apply(.start, to: .queued), .to(.downloading))
        XCTAssertEqual(RegionStateMachine.apply(.finish, to: .downloading), .to(.completed))
        XCTAssertEqual(RegionStateMachine.apply(.networkLost, to: .downloading), .to(.pausedNetwork))
        XCTAssertEqual(RegionStateMachine.apply(.networkBack, to: .pausedNetwork), .to(.queued))
        XCTAssertEqual(RegionStateMachine.apply(.storageFailed, to: .downloading), .to(.failedStorage))
        XCTAssertEqual(RegionStateMachine.apply(.fail, to: .downloading), .to(.failed))
        if case .ignored = RegionStateMachine.apply(.finish, to: .pausedUser) {} else { XCTFail("finish must not apply to pausedUser") }
        if case .ignored = RegionStateMachine.apply(.start, to: .completed) {} else { XCTFail("start must not apply to completed") }
    }
}

final class ManifestAndRedactionTests: XCTestCase {
    func testManifestLineRoundTrip() {
        let sha = String(repeating: "ab", count: 32)
        let l = ManifestLine(kind: .glyphs, sha256: sha, bytes: 123, key: "Noto Sans/0-255", url: "http://h/a?key=SECRET")
        XCTAssertEqual(l.text, "glyphs\t\(sha)\t123\tNoto Sans/0-255\thttp://h/a?key=REDACTED\t-\t-\t-\t-\n")
        XCTAssertEqual(ManifestLine(Substring(l.text.dropLast()))?.sha256, sha)
        XCTAssertNil(ManifestLine("tile\tnothex\t1\tk\tu"))
        XCTAssertEqual(ManifestLine("tile\t-\t0\ts/1/2/3\tu")?.sha256, nil)
        // Nine columns: the response's ETag, Last-Modified, expiry and fetch time round-trip.
        let fresh = Freshness(etag: "\"5f1e-2a\"", lastModified: 1_700_000_000, expires: nil, fetched: 1_800_000_000.042)
        let v2 = ManifestLine(kind: .tile, sha256: sha, bytes: 9, key: "s/1/0/0", url: "http://h/1/0/0", freshness: fresh)
        XCTAssertEqual(v2.text, "tile\t\(sha)\t9\ts/1/0/0\thttp://h/1/0/0\t\"5f1e-2a\"\t1700000000\t-\t1800000000.042\n")
        XCTAssertEqual(ManifestLine(Substring(v2.text.dropLast())), v2)
        // A five-column line (a manifest written before validators were kept) has no freshness.
        XCTAssertEqual(ManifestLine("tile\t-\t0\ts/1/2/3\tu")?.freshness, Freshness())
        XCTAssertNil(ManifestLine("tile\t-\t0\ts/1/2/3\tu\t-\tx\t-\t-"), "a time that is not a number")
        XCTAssertNil(ManifestLine("tile\t-\t0\ts/1/2/3\tu\t-\t-"), "seven columns")
        XCTAssertNil(ManifestLine("tile\t-\t0\ts/1/2/3\tu\t-\t-\t-\t-\t-"), "ten columns")
        XCTAssertNil(ManifestLine("tile\t-\t0\ts/1/2/3\tu\t"), "six columns (a trailing tab)")
        XCTAssertNil(ManifestLine("tile\t-\t-1\ts/1/2/3\tu"), "negative bytes")
        XCTAssertNil(ManifestLine("tile\t-\t99999999999999999999\ts/1/2/3\tu"), "bytes past Int64")
        // No body a pack holds is larger than PackFormat.maxBody (u32): more is damage, refused.
        XCTAssertNil(ManifestLine("tile\t-\t4611686018427387904\ts/1/2/3\tu"), "bytes 2^62")
        XCTAssertNil(ManifestLine("tile\t-\t\(PackFormat.maxBody + 1)\ts/1/2/3\tu"), "bytes past maxBody")
        XCTAssertEqual(ManifestLine("tile\t-\t\(PackFormat.maxBody)\ts/1/2/3\tu")?.bytes, PackFormat.maxBody)
        // Times outside 0 ... 253402300799 (9999-12-31T23:59:59Z) are damage, refused.
        for bad in ["1e19", "9223372036854775807.5", "-1", "253402300800", "nan", "inf"] {
            XCTAssertNil(ManifestLine("tile\t-\t0\ts/1/2/3\tu\t-\t-\t-\t\(bad)"), "fetched \(bad)")
            XCTAssertNil(ManifestLine("tile\t-\t0\ts/1/2/3\tu\t-\t\(bad)\t-\t-"), "lastModified \(bad)")
            XCTAssertNil(ManifestLine("tile\t-\t0\ts/1/2/3\tu\t-\t-\t\(bad)\t-"), "expires \(bad)")
        }
        XCTAssertEqual(ManifestLine("tile\t-\t0\ts/1/2/3\tu\t-\t253402300799\t0\t253402300799.000")?.freshness,
                       Freshness(lastModified: 253402300799, expires: 0, fetched: 253402300799))
        XCTAssertNil(ManifestLine("tile\t" + String(repeating: "AB", count: 32) + "\t1\ts/1/2/3\tu"), "upper-case hex")
        XCTAssertNil(ManifestLine("pyramid\t-\t0\ts/1/2/3\tu"), "unknown kind")
        // A failed tile, signed times (a negative one is refused), and a fetch time that is no time.
        let failed = ManifestLine("tile\t!\t0\ts/1/2/3\tu\t-\t+5\t7\t-")
        XCTAssertEqual(failed?.failed, true)
        XCTAssertNil(failed?.sha256)
        XCTAssertEqual(failed?.freshness.lastModified, 5)
        XCTAssertEqual(failed?.freshness.expires, 7)
        XCTAssertEqual(failed?.text, "tile\t!\t0\ts/1/2/3\tu\t-\t5\t7\t-\n")
        XCTAssertNil(ManifestLine("tile\t!\t0\ts/1/2/3\tu\t-\t+5\t-7\t-"), "a negative expiry")
        XCTAssertNil(ManifestLine("tile\t-\t0\ts/1/2/3\tu\t-\t-\t-\t1e17"), "a fetch time past year 9999")
        let farFuture = ManifestLine(kind: .tile, sha256: nil, bytes: 0, key: "s/1/2/3", url: "u", freshness: Freshness(fetched: 1e17))
        XCTAssertEqual(farFuture.text, "tile\t-\t0\ts/1/2/3\tu\t-\t-\t-\t-\n", "rendered without trapping")
        // Export's conversion of a fetch time never traps.
        XCTAssertNil(MapLibreOffline.seconds(1e19))
        XCTAssertNil(MapLibreOffline.seconds(9223372036854775807.5))
        XCTAssertEqual(MapLibreOffline.seconds(1_700_000_000.9), 1_700_000_000)
        XCTAssertEqual(ManifestLine.parseTileKey("a/b/14/8530/5975")?.0, "a/b")
        XCTAssertEqual(ManifestLine.parseTileKey("a/b/14/8530/5975")?.1, TileID(z: 14, x: 8530, y: 5975))
        // The last three columns are the numbers, whatever the source holds; anything else is nil.
        XCTAssertEqual(ManifestLine.parseTileKey("/0/0/0")?.0, "")
        XCTAssertEqual(ManifestLine.parseTileKey("é/1/1/0")?.0, "é")
        XCTAssertEqual(ManifestLine.parseTileKey("s//1/1/1")?.0, "s/")
        XCTAssertEqual(ManifestLine.parseTileKey("s/24/16777215/16777215")?.1, TileID(z: 24, x: 16777215, y: 16777215))
        // A tile of its zoom, zoom 0...30, as tileKey writes them (a review of 2026-12-07: a
        // planted z63 key trapped `plan --estimate`): `BoundedNumberTests`.
        XCTAssertNil(ManifestLine.parseTileKey("s/24/4294967295/9999999999"))
        // Only as tileKey writes them (attack round 14: +0, -0 and 00 were read as 0).
        for bad in ["", "1/2/3", "s/1/2/", "s/1//3", "s/a/2/3", "s/1/2/3 ", "s/1/2/99999999999999999999", "s/1/2/0x3", "s/1/2/3/",
                    "s/+0/0/0", "s/-0/0/0", "s/00/0/0", "s/0/01/0", "s/-1/2/3", "s/1/2/٣", "s/1/2/10000000000"] {
            XCTAssertNil(ManifestLine.parseTileKey(bad), bad)
        }
    }

    func testRedaction() {
        XCTAssertEqual(Redaction.redact("https://h/s.json?access_token=pk.123&lang=en"), "https://h/s.json?access_token=REDACTED&lang=en")
        XCTAssertEqual(Redaction.redact("https://h/{z}/{x}/{y}.png?api_key=abc&sig=zz"), "https://h/{z}/{x}/{y}.png?api_key=REDACTED&sig=REDACTED")
        XCTAssertEqual(Redaction.redact("https://user:pw@h/x?Key=1"), "https://REDACTED@h/x?Key=REDACTED")
        XCTAssertEqual(Redaction.redact("https://h/x"), "https://h/x")
        // Attack round 3: HERE's app_code and PHP-style nested names (the last part counts).
        XCTAssertEqual(Redaction.redact("https://h/t?app_id=A1&app_code=C0DE99&params%5Bkey%5D=K1&params[key]=K2&auth[token]=T3&layer[name]=roads"),
                       "https://h/t?app_id=A1&app_code=REDACTED&params%5Bkey%5D=REDACTED&params[key]=REDACTED&auth[token]=REDACTED&layer[name]=roads")
        // A tile of a PMTiles archive (`…#z/x/y`, the fast path): the fragment kept, the rest
        // redacted as without it; a fragment with a parameter is redacted too.
        XCTAssertEqual(Redaction.redact("https://h/x.pmtiles#3/1/2"), "https://h/x.pmtiles#3/1/2")
        XCTAssertEqual(Redaction.redact("https://u:pw@h/x.pmtiles?key=K1#3/1/2"), "https://REDACTED@h/x.pmtiles?key=REDACTED#3/1/2")
        XCTAssertEqual(Redaction.redact("https://h/x.pmtiles#3/1/2@u:pw"), "https://h/x.pmtiles#3/1/2@u:pw")
        XCTAssertEqual(Redaction.redact("https://h/x#a?token=T9"), "https://h/x#a?token=REDACTED")
    }

    /// A request's secrets (finding 4 of round 2): header values (and a Basic pair's parts) and
    /// URL credentials, in their percent-encoded and decoded forms, replaced wherever they appear;
    /// a body's preview never shows one, not even in hexadecimal.
    func testRequestSecretsAreReplacedWhereverQuoted() {
        let s = Redaction.Secrets(headers: [("Authorization", "Basic " + Data("alice:pa ss1234".utf8).base64EncodedString())],
                                  urls: ["https://h/{z}/{x}/{y}.png?key=K%2FEY1234&lang=en"])
        XCTAssertEqual(Redaction.redactEmbedded("user alice said pa ss1234, pa+ss1234 and K/EY1234, lang en", secrets: s),
                       "user REDACTED said REDACTED, REDACTED and REDACTED, lang en")
        XCTAssertEqual(Redaction.redactEmbedded("no secret here", secrets: s), "no secret here")
        XCTAssertEqual(TileBody.preview(Data("K/EY1234 is wrong".utf8), secrets: s), "'REDACTED is wrong'")
        XCTAssertEqual(TileBody.preview(Data([0x00, 0x41] + Array("K/EY1234".utf8)), secrets: s), "0x0041 REDACTED")
        XCTAssertEqual(TileBody.preview(Data([0x00, 0x41, 0x42])), "0x004142")
        // A Referer (often the tile server's own origin) or a User-Agent is no secret: a URL on
        // that origin is shown as it is; an API key header is.
        let h = Redaction.Secrets(headers: [("Referer", "https://maps.example.org/"), ("User-Agent", "FieldKit/2.1"), ("X-Api-Key", "KEY7SECRET")], urls: [])
        XCTAssertEqual(Redaction.redact("https://maps.example.org/t/1/2/3.png?a=KEY7SECRET", secrets: h), "https://maps.example.org/t/1/2/3.png?a=REDACTED")
        XCTAssertEqual(Redaction.redactEmbedded("FieldKit/2.1 at https://maps.example.org/", secrets: h), "FieldKit/2.1 at https://maps.example.org/")
    }

    /// Round 3, finding 3: a URL shown (`redact(_:secrets:)`) has the request's secrets replaced
    /// in its path and under any parameter name, then its URL credentials redacted; with no
    /// secrets it is `redact(_:)`.
    func testURLsShownHaveTheRequestsSecretsReplaced() {
        let s = Redaction.Secrets(headers: [("Authorization", "Bearer TOKH90SECRETA")], urls: ["https://h/s.json?key=QK7SECRET"])
        XCTAssertEqual(Redaction.redact("https://h/t/TOKH90SECRETA/0/0/0.pbf?u=QK7SECRET&token=x&lang=en", secrets: s),
                       "https://h/t/REDACTED/0/0/0.pbf?u=REDACTED&token=REDACTED&lang=en")
        XCTAssertEqual(Redaction.redact("https://h/t/0.pbf?token=x", secrets: .none), "https://h/t/0.pbf?token=REDACTED")
        XCTAssertEqual(Redaction.redact("https://h/t/0.pbf", secrets: s), "https://h/t/0.pbf")
    }

    /// Round 3, finding 5: percent-encodings are found whatever the case of their hex digits
    /// (RFC 3986 section 2.1), mixed case included; other letters keep their case.
    func testRequestSecretsArePercentEncodingCaseInsensitiveInHex() {
        let s = Redaction.Secrets(headers: [("X-Token", "SECRET/TOKEN+123=abc")], urls: [])
        XCTAssertEqual(Redaction.redactEmbedded("a SECRET%2fTOKEN%2b123%3dabc b", secrets: s), "a REDACTED b")
        XCTAssertEqual(Redaction.redactEmbedded("a SECRET%2FTOKEN%2b123%3Dabc b", secrets: s), "a REDACTED b")
        XCTAssertEqual(Redaction.redactEmbedded("a SECRET%2fTOKEN%2b123%3dABC b", secrets: s), "a SECRET%2fTOKEN%2b123%3dABC b",
                       "only hex digits of an encoding are case-insensitive")
        XCTAssertEqual(TileBody.preview(Data("x SECRET%2fTOKEN%2b123%3dabc".utf8), secrets: s), "'x REDACTED'")
        let v = Redaction.Secrets(values: ["SESSION/TOKEN+12=34"])
        XCTAssertEqual(v.replaced(in: "token SESSION%2ftoken%2b12%3d34"), "token SESSION%2ftoken%2b12%3d34")
        XCTAssertEqual(v.replaced(in: "token SESSION%2fTOKEN%2b12%3d34"), "token REDACTED")
    }

    /// Round 3, finding 4: a header secret with upper-case letters echoed in a text
    /// Content-Type is replaced in the "the body is text (...)" part too (the media type used
    /// to be lower-cased before the secrets were searched for, which hid them).
    func testSecretEchoedInATextContentTypeIsReplacedInEveryPart() throws {
        let s = Redaction.Secrets(headers: [("X-Api-Key", "SeCrEtToKeN42")], urls: [])
        let why = try XCTUnwrap(TileBody.problem(url: "http://h/1/2/3.pbf", contentType: "text/SeCrEtToKeN42; q=SeCrEtToKeN42",
                                                 body: Data("x".utf8), secrets: s))
        XCTAssertFalse(why.lowercased().contains("secrettoken42"), why)
        XCTAssertTrue(why.hasPrefix("the body is text (text/REDACTED), not a tile"), why)
    }
}

/// The pure encodings the exports use (issue 8): PMTiles ids, directories and header, MapLibre's
/// region definition, and the `exports` request field.
final class ExportEncodingTests: XCTestCase {

    /// TileIds from the PMTiles v3 spec's examples and the reference implementation.
    func testPMTilesTileIDsFollowTheHilbertCurve() {
        XCTAssertEqual(PMTiles.tileID(TileID(z: 0, x: 0, y: 0)), 0)
        XCTAssertEqual(PMTiles.tileID(TileID(z: 1, x: 0, y: 0)), 1)
        XCTAssertEqual(PMTiles.tileID(TileID(z: 1, x: 0, y: 1)), 2)
        XCTAssertEqual(PMTiles.tileID(TileID(z: 1, x: 1, y: 1)), 3)
        XCTAssertEqual(PMTiles.tileID(TileID(z: 1, x: 1, y: 0)), 4)
        XCTAssertEqual(PMTiles.tileID(TileID(z: 2, x: 0, y: 0)), 5)
        XCTAssertEqual(PMTiles.tileID(TileID(z: 12, x: 3423, y: 1763)), 19_078_479)
        // Every tile of z3 gets a distinct id in its zoom's range.
        let ids = Set((0..<64).map { PMTiles.tileID(TileID(z: 3, x: $0 % 8, y: $0 / 8)) })
        XCTAssertEqual(ids, Set(21..<85))
    }

    func testPMTilesDirectoryAndHeaderBytes() {
        let entries = [PMTiles.Entry(tileID: 0, offset: 0, length: 10, runLength: 1),
                       PMTiles.Entry(tileID: 1, offset: 10, length: 5, runLength: 3),
                       PMTiles.Entry(tileID: 300, offset: 0, length: 10, runLength: 1)]
        // count 3; delta ids 0, 1, 299 (varint ab 02); run lengths 1 3 1; lengths 10 5 10;
        // offsets 0+1, 0 (contiguous), 0+1.
        XCTAssertEqual(PMTiles.serializeDirectory(entries), [3, 0, 1, 0xAB, 0x02, 1, 3, 1, 10, 5, 10, 1, 0, 1])
        var h = PMTiles.Header()
        h.minLon = 7.4; h.maxLat = -1
        let b = h.bytes
        XCTAssertEqual(b.count, 127)
        XCTAssertEqual(Array(b[0..<8]), Array("PMTiles".utf8) + [3])
        XCTAssertEqual(Array(b[102..<106]), [0x80, 0x26, 0x69, 0x04]) // 74,000,000 little-endian
        XCTAssertEqual(Array(b[114..<118]), [0x80, 0x69, 0x67, 0xFF]) // -10,000,000
    }

    func testMapLibreDefinitionNumbersAlwaysHaveAFraction() {
        XCTAssertEqual(MapLibreOffline.number(14), "14.0")
        XCTAssertEqual(MapLibreOffline.number(-0.5), "-0.5")
        XCTAssertEqual(MapLibreOffline.number(7.4246), "7.4246")
        let shape = RegionShape(polygons: [[[[0, 0], [1, 0], [1, 1], [0, 0]]]])
        let r = RegionRequest(id: "g", source: .style("http://h/s.json"), bounds: shape.bounds, minZoom: 2, maxZoom: 3,
                              pixelRatio: 2, includeIdeographs: true, shape: shape)
        XCTAssertEqual(MapLibreOffline.definition(styleURL: "http://h/s.json", request: r),
                       #"{"style_url":"http://h/s.json","geometry":{"type":"MultiPolygon","coordinates":[[[[0.0,0.0],[1.0,0.0],[1.0,1.0],[0.0,0.0]]]]},"min_zoom":2.0,"max_zoom":3.0,"pixel_ratio":2.0,"include_ideographs":true}"#)
        XCTAssertEqual(MapLibreOffline.tilePixelRatio(template: "http://h/{z}/{x}/{y}{ratio}.png", pixelRatio: 1.25), 2)
        XCTAssertEqual(MapLibreOffline.tilePixelRatio(template: "http://h/{z}/{x}/{y}.png", pixelRatio: 2), 1)
        XCTAssertEqual(Planner.ratioToken(1.25), "@2x")
        XCTAssertEqual(Planner.ratioToken(1), "")
    }

    func testExportsFieldIsValidated() throws {
        func req(_ exports: String) -> String {
            #"{"id":"a","style":"http://h/s.json","bounds":[0,0,1,1],"minZoom":0,"maxZoom":1,"exports":"# + exports + "}"
        }
        let ok = try RequestValidator.validate(Data(req(#"[{"format":"pmtiles","source":"v"},{"format":"site","baseURL":"https://m/x/"}]"#).utf8), fileName: "a.json")
        XCTAssertEqual(ok.exports, [ExportSpec(format: .pmtiles, source: "v"), ExportSpec(format: .site, baseURL: "https://m/x/")])
        // `null` is the default, as for every field (attack round 13): the same specs as without.
        let nulls = try RequestValidator.validate(Data(req(#"[{"format":"pmtiles","source":null},{"format":"site","baseURL":null,"source":null}]"#).utf8), fileName: "a.json")
        XCTAssertEqual(nulls.exports, [ExportSpec(format: .pmtiles), ExportSpec(format: .site)])
        XCTAssertEqual(JSONKind.serialize(nulls.jsonObject["exports"] as Any), JSONKind.serialize([["format": "pmtiles"], ["format": "site"]]))
        for (bad, words) in [(#"[{"format":"zip"}]"#, "exports[0].format"), (#"{"format":"site"}"#, "must be an array"),
                             (#"[{"format":"site","extra":1}]"#, "unknown field 'extra'"), (#"[{"format":"mbtiles","source":"../x"}]"#, "exports[0].source"),
                             (#"[{"format":"site"},{"format":"site"}]"#, "named twice")] {
            XCTAssertThrowsError(try RequestValidator.validate(Data(req(bad).utf8), fileName: "a.json")) { e in
                XCTAssertTrue(((e as? RegionError)?.message ?? "").contains(words), "\(bad): \(e)")
            }
        }
        let tiles = #"{"id":"a","tiles":["http://h/{z}/{x}/{y}.png"],"bounds":[0,0,1,1],"minZoom":0,"maxZoom":1,"exports":[{"format":"maplibre"}]}"#
        XCTAssertThrowsError(try RequestValidator.validate(Data(tiles.utf8), fileName: "a.json"))
    }
}

final class RefreshRuleTests: XCTestCase {
    let sha = String(repeating: "ab", count: 32)
    func line(sha: String?, fetched: Int64?, expires: Int64? = nil) -> ManifestLine {
        let fetched = fetched.map(Double.init)
        return ManifestLine(kind: .tile, sha256: sha, bytes: 1, key: "s/1/0/0", url: "http://h/1/0/0",
                     freshness: Freshness(etag: "\"e\"", lastModified: 100, expires: expires, fetched: fetched))
    }

    func testIsDue() {
        let now: Int64 = 10_000
        let nowSeconds = Double(now)
        XCTAssertTrue(Refresh.isDue(line(sha: sha, fetched: now - 10), maxAge: nil, now: nowSeconds), "without max-age everything is checked")
        XCTAssertFalse(Refresh.isDue(line(sha: sha, fetched: now - 10), maxAge: 60, now: nowSeconds))
        XCTAssertTrue(Refresh.isDue(line(sha: sha, fetched: now - 60), maxAge: 60, now: nowSeconds))
        XCTAssertTrue(Refresh.isDue(line(sha: sha, fetched: now - 10, expires: now - 1), maxAge: 60, now: nowSeconds), "expired by its own headers")
        XCTAssertFalse(Refresh.isDue(line(sha: sha, fetched: now - 10, expires: now + 5), maxAge: 60, now: nowSeconds))
        XCTAssertTrue(Refresh.isDue(line(sha: sha, fetched: nil), maxAge: 60, now: nowSeconds), "unknown fetch time")
        // `now` keeps its fraction: fetched at 9,998.5, a resource is 2 s old at 10,000.5 (due
        // with max-age 2), and 1.75 s old if fetched at 9,998.75 (not yet). With whole seconds
        // the first looked 1.5 s old, and a refresh due at exactly 2 s left it unasked.
        func fetchedAt(_ t: Double) -> ManifestLine {
            ManifestLine(kind: .tile, sha256: sha, bytes: 1, key: "s/1/0/0", url: "http://h/1/0/0", freshness: Freshness(etag: "\"e\"", fetched: t))
        }
        XCTAssertTrue(Refresh.isDue(fetchedAt(9_998.5), maxAge: 2, now: 10_000.5))
        XCTAssertFalse(Refresh.isDue(fetchedAt(9_998.75), maxAge: 2, now: 10_000.5))
    }

    func testRevalidatedKeepsTheObjectAndTakesTheNewHeaders() {
        let prev = line(sha: sha, fetched: 5)
        let got = Refresh.revalidated(prev, url: "http://h/new", response: Freshness(etag: nil, lastModified: nil, expires: 900, fetched: 50.5))
        XCTAssertEqual(got.sha256, sha)
        XCTAssertEqual(got.url, "http://h/new")
        XCTAssertEqual(got.freshness, Freshness(etag: "\"e\"", lastModified: 100, expires: 900, fetched: 50.5))
    }

    func testOutcome() {
        let prev = line(sha: sha, fetched: 5)
        XCTAssertEqual(Refresh.outcome(previous: prev, current: prev), .kept)
        XCTAssertEqual(Refresh.outcome(previous: prev, current: line(sha: sha, fetched: 6)), .unchanged)
        XCTAssertEqual(Refresh.outcome(previous: prev, current: line(sha: nil, fetched: 6)), .changed)
        XCTAssertEqual(Refresh.outcome(previous: prev, current: line(sha: String(repeating: "cd", count: 32), fetched: 6)), .changed)
        XCTAssertEqual(Refresh.outcome(previous: nil, current: prev), .changed)
        var p = RegionProgress()
        for o in [RefreshOutcome.kept, .unchanged, .unchanged, .changed] { p.tally(o) }
        XCTAssertEqual([p.resourcesChecked, p.resourcesUnchanged, p.resourcesChanged], [3, 2, 1])
    }

    func testDownloadsTheSameIgnoresContextExportsAndRefreshAfter() throws {
        func req(_ extra: [String: Any]) throws -> RegionRequest {
            var o: [String: Any] = ["id": "a", "tiles": ["http://h/{z}/{x}/{y}.png"], "bounds": [0, 0, 1, 1], "minZoom": 0, "maxZoom": 3]
            for (k, v) in extra { o[k] = v }
            return try RequestValidator.validate(JSONSerialization.data(withJSONObject: o), fileName: "a.json")
        }
        let base = try req([:])
        XCTAssertTrue(base.downloadsTheSame(as: try req(["context": ["x": 1], "refreshAfter": 3600, "exports": [["format": "pmtiles"]]])))
        XCTAssertFalse(base.downloadsTheSame(as: try req(["maxZoom": 4])))
        XCTAssertFalse(base.downloadsTheSame(as: try req(["tiles": ["http://other/{z}/{x}/{y}.png"]])))
        XCTAssertThrowsError(try req(["refreshAfter": 5]))
    }
}

/// Issue 10: the tile usage policy list and the body check, as pure functions.
final class RealWorldCoreTests: XCTestCase {
    func testPolicyHostMatching() {
        XCTAssertEqual(TileUsagePolicy.host(of: "https://u:p@A.Tile.OpenStreetMap.org.:8080/{z}/{x}/{y}.png?k=1"), "a.tile.openstreetmap.org")
        // A template's hosts are those of its expansions (issue 29): `{s}` is not guessed as `a`.
        XCTAssertEqual(TileUsagePolicy.hosts(of: TileURLTemplate("https://{s}.tile.openstreetmap.org/{z}/{x}/{y}.png")),
                       ["a.tile.openstreetmap.org", "b.tile.openstreetmap.org", "c.tile.openstreetmap.org"])
        XCTAssertNotNil(TileUsagePolicy.refusal(urls: ["https://maps.wikimedia.org/osm-intl/{z}/{x}/{y}.png"], allowedHosts: []))
        XCTAssertNil(TileUsagePolicy.refusal(urls: ["https://tile.openstreetmap.org/{z}/{x}/{y}.png"], allowedHosts: ["tile.openstreetmap.org"]))
        XCTAssertNil(TileUsagePolicy.refusal(urls: ["https://tile.openstreetmap.org.example.com/{z}/{x}/{y}.png"], allowedHosts: []))
        XCTAssertNil(TileUsagePolicy.refusal(urls: ["https://tiles.example.org/tile.openstreetmap.org/{z}/{x}/{y}.png"], allowedHosts: []))
    }

    func testTileBodyCheck() {
        let png = Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 1, 2])
        XCTAssertNil(TileBody.problem(url: "http://h/1/2/3.png?key=x", contentType: "image/png", body: png))
        XCTAssertNotNil(TileBody.problem(url: "http://h/1/2/3.png", contentType: "image/png", body: Data([0xFF, 0xD8, 0xFF, 0])))
        XCTAssertNil(TileBody.problem(url: "http://h/1/2/3.jpg", contentType: nil, body: Data([0xFF, 0xD8, 0xFF, 0])))
        XCTAssertNotNil(TileBody.problem(url: "http://h/1/2/3.webp", contentType: nil, body: Data("RIFF0000WEBQ".utf8)))
        XCTAssertNil(TileBody.problem(url: "http://h/1/2/3.webp", contentType: nil, body: Data("RIFF0000WEBPVP8 ".utf8)))
        XCTAssertNotNil(TileBody.problem(url: "http://h/1/2/3.pbf", contentType: "application/x-protobuf", body: Data("\u{FEFF}  <HTML><body>".utf8)))
        XCTAssertNotNil(TileBody.problem(url: "http://h/1/2/3.pbf", contentType: "text/plain; charset=utf-8", body: Data("x".utf8)))
        XCTAssertNil(TileBody.problem(url: "http://h/1/2/3.pbf", contentType: "application/x-protobuf", body: Data([0x1f, 0x8b, 8])))
        XCTAssertNil(TileBody.problem(url: "http://h/1/2/3.png", contentType: "text/html", body: Data()), "empty is an empty tile")
        // Edge cases: extension case, query and fragment, a dot only in the host, media type
        // parameters, white space and case.
        XCTAssertEqual(TileBody.expectedFormat(url: "http://h/1/2/3.PNG"), "PNG")
        XCTAssertEqual(TileBody.expectedFormat(url: "http://h/1/2/3.Jpeg#a.webp"), "JPEG")
        XCTAssertEqual(TileBody.expectedFormat(url: "http://h/1/2/3.webp?f=x.png"), "WebP")
        XCTAssertNil(TileBody.expectedFormat(url: "http://tiles.example.org/1/2/3"))
        XCTAssertNil(TileBody.expectedFormat(url: "http://h/1/2/3.pbf"))
        XCTAssertNil(TileBody.expectedFormat(url: "http://h/a.png/3"))
        XCTAssertNil(TileBody.expectedFormat(url: ""))
        XCTAssertEqual(TileBody.problem(url: "http://h/1/2/3.pbf", contentType: " TEXT/Plain ; charset=utf-8", body: Data("x".utf8))?
            .hasPrefix("the body is text (TEXT/Plain), not a tile"), true, "quoted as sent")
        XCTAssertEqual(TileBody.problem(url: "http://h/1/2/3.pbf", contentType: "Application/XHTML+XML", body: Data("x".utf8))?
            .hasPrefix("the body is an HTML page"), true)
        XCTAssertNil(TileBody.problem(url: "http://h/1/2/3.pbf", contentType: "textual/x", body: Data("x".utf8)))
        XCTAssertNotNil(TileBody.problem(url: "http://h/1/2/3.png", contentType: "image/png", body: png.prefix(7)), "a short signature")
        XCTAssertNotNil(TileBody.problem(url: "http://h/1/2/3.jpg", contentType: nil, body: Data([0xFF, 0xD8])))
    }
}

extension RealWorldCoreTests {
    func testSubdomainTemplate() {
        let t = TileURLTemplate("https://{s}.tiles.example.org/{z}/{x}/{y}.png", subdomains: ["a", "b", "c"])
        XCTAssertEqual(t.url(for: TileID(z: 3, x: 1, y: 1)), "https://c.tiles.example.org/3/1/1.png")
        XCTAssertEqual(t.url(for: TileID(z: 3, x: 4, y: 0)), "https://b.tiles.example.org/3/4/0.png")
        XCTAssertNotNil(TileUsagePolicy.refusal(urls: ["https://{s}.tile.openstreetmap.org/{z}/{x}/{y}.png"], allowedHosts: []))
        // A plan saved before subdomains existed reads back with the default.
        let old = Data(#"{"template": "https://{s}.x.org/{z}/{x}/{y}.png", "tms": false, "ratio": ""}"#.utf8)
        XCTAssertEqual(try JSONDecoder().decode(TileURLTemplate.self, from: old).subdomains, ["a", "b", "c"])
    }
}

extension RealWorldCoreTests {
    func testCollectionsAndAntimeridian() {
        let point: [String: Any] = ["type": "Feature", "geometry": ["type": "Point", "coordinates": [1, 2]]]
        let poly: [String: Any] = ["type": "Feature", "geometry": ["type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1], [0, 1], [0, 0]]]]]
        guard case .failure(let e) = RegionShape.parse(["type": "FeatureCollection", "features": [poly, point]]) else { return XCTFail("accepted a Point") }
        XCTAssertTrue(e.message.contains("features[1]") && e.message.contains("Point"), e.message)
        guard case .failure(let g) = RegionShape.parse(["type": "GeometryCollection", "geometries": [poly["geometry"]!, ["type": "LineString", "coordinates": [[0, 0], [1, 1]]]]]) else { return XCTFail("accepted a LineString") }
        XCTAssertTrue(g.message.contains("geometries[1]"), g.message)
        guard case .success(let gc) = RegionShape.parse(["type": "GeometryCollection", "geometries": [poly["geometry"]!, poly["geometry"]!]]) else { return XCTFail() }
        XCTAssertEqual(gc.polygons.count, 2)
        guard case .success(let am) = RegionShape.parse(["type": "Polygon", "coordinates": [[[170, -10], [190, -10], [190, 10], [170, 10], [170, -10]]]]) else { return XCTFail() }
        XCTAssertEqual(am.polygons.count, 2)
        XCTAssertTrue(am.polygons.allSatisfy { $0[0].allSatisfy { (-180...180).contains($0[0]) } })
        XCTAssertEqual(am.count(in: TileRect(z: 3, minX: 0, minY: 0, maxX: 7, maxY: 7)), 4)
    }
}

/// Issue 10: MapLibre's offline region definition as a request, credential-only changes and the
/// rate limiter, as pure functions.
final class ImportAndLimitTests: XCTestCase {
    func request(_ o: [String: Any], name: String = "a.json") throws -> RegionRequest {
        try RequestValidator.validate(JSONSerialization.data(withJSONObject: o), fileName: name)
    }
    func refusal(_ o: [String: Any]) -> String {
        do { _ = try request(o); return "accepted" } catch { return (error as? RegionError)?.message ?? "\(error)" }
    }
    let style = "https://maps.example/style.json"

    /// The definition MapLibre Native writes (offline_schema.sql's example): latitude-first
    /// bounds, double zooms floored and ceiled, include_ideographs as given, MapLibre's defaults.
    func testMapLibreDefinitionBecomesTheCanonicalRequest() throws {
        let r = try request(["style_url": style, "bounds": [37.2, -122.8, 38.1, -121.7], "include_ideographs": false,
                             "max_zoom": 15.0, "min_zoom": 0.0, "pixel_ratio": 1.0], name: "sf.json")
        XCTAssertEqual(r.id, "sf")
        XCTAssertEqual(r.source, .style(style))
        XCTAssertEqual([r.bounds.west, r.bounds.south, r.bounds.east, r.bounds.north], [-122.8, 37.2, -121.7, 38.1])
        XCTAssertEqual([r.minZoom, r.maxZoom], [0, 15])
        XCTAssertEqual(r.pixelRatio, 1)
        XCTAssertFalse(r.includeIdeographs)
        let f = try request(["style_url": style, "bounds": [37.2, -122.8, 38.1, -121.7], "min_zoom": 10.7, "max_zoom": 13.2,
                             "pixel_ratio": 2.0, "id": "x", "context": ["a": 1], "maxTiles": 5000])
        XCTAssertEqual([f.minZoom, f.maxZoom], [10, 14])
        XCTAssertEqual(f.pixelRatio, 2)
        XCTAssertTrue(f.includeIdeographs, "absent include_ideographs is true, as MapLibre decodes it")
        XCTAssertEqual(f.id, "x")
        XCTAssertEqual(f.maxTiles, 5000)
        let unbounded = try request(["style_url": style, "bounds": [37.2, -122.8, 38.1, -121.7], "min_zoom": 0, "pixel_ratio": 1, "maxTiles": 100])
        XCTAssertEqual(unbounded.maxZoom, 24, "no max_zoom: each source's highest zoom, bounded by maxTiles")
        let high = try request(["style_url": style, "bounds": [37.2, -122.8, 38.1, -121.7], "min_zoom": 3, "max_zoom": 25.5, "pixel_ratio": 1])
        XCTAssertEqual([high.minZoom, high.maxZoom], [3, 24], "a max_zoom above 24 loads what MapLibre would, up to 24")
        let shape = try request(["style_url": style, "min_zoom": 1, "max_zoom": 2, "pixel_ratio": 1,
                                 "geometry": ["type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1], [0, 0]]]]])
        XCTAssertNotNil(shape.shape)
    }

    func testBadMapLibreDefinitionsNameTheirField() {
        let b: [Double] = [37.2, -122.8, 38.1, -121.7]
        let cases: [([String: Any], String)] = [
            (["style_url": style, "bounds": b, "min_zoom": 0, "pixel_ratio": 1], "max_zoom: missing"),
            (["style_url": style, "bounds": b, "max_zoom": 3, "pixel_ratio": 1], "min_zoom: missing"),
            (["bounds": b, "min_zoom": 0, "max_zoom": 3], "style_url: missing"),
            (["style_url": style, "bounds": b, "min_zoom": 4, "max_zoom": 3], "max_zoom (3.0) is less than min_zoom"),
            (["style_url": style, "bounds": [1, 2, 3], "min_zoom": 0, "max_zoom": 3], "[south, west, north, east]"),
            (["style_url": style, "min_zoom": 0, "max_zoom": 3], "bounds: missing"),
            (["style_url": style, "style": style, "bounds": b, "min_zoom": 0, "max_zoom": 3], "style: this request is a MapLibre"),
            (["style_url": style, "bounds": b, "minZoom": 0, "max_zoom": 3], "minZoom: this request is a MapLibre"),
            (["style_url": style, "bounds": b, "min_zoom": -1, "max_zoom": 3], "min_zoom: must be a number"),
            // Attack round 3: a min_zoom above 24 was read as 24 (1e300 became a z24 region).
            (["style_url": style, "bounds": b, "min_zoom": 1e300, "max_zoom": 1e300], "min_zoom (1e+300) must be at most 24"),
            (["style_url": style, "bounds": b, "min_zoom": 30, "max_zoom": 31], "min_zoom (30.0) must be at most 24"),
            (["style_url": style, "bounds": b, "min_zoom": 0, "max_zoom": 3, "include_ideographs": 1], "include_ideographs: must be true or false"),
            (["style_url": "mapbox://styles/mapbox/streets-v11", "bounds": b, "min_zoom": 0, "max_zoom": 3], "'mapbox'"),
            (["style_url": style, "bounds": [38.1, -122.8, 37.2, -121.7], "min_zoom": 0, "max_zoom": 3], "south (38.1) must be less than north"),
        ]
        for (o, word) in cases {
            let m = refusal(o)
            XCTAssertTrue(m.contains(word), "\(o): \(m)")
        }
    }

    /// Only what `Redaction` hides differs: a rotated key or header value. A changed path, zoom
    /// or a query parameter that is not a secret is another download.
    func testDiffersOnlyInCredentials() throws {
        func tiles(_ t: String, _ extra: [String: Any] = [:]) throws -> RegionRequest {
            var o: [String: Any] = ["id": "a", "tiles": [t], "bounds": [0, 0, 1, 1], "minZoom": 0, "maxZoom": 3]
            for (k, v) in extra { o[k] = v }
            return try request(o)
        }
        let old = try tiles("https://h/{z}/{x}/{y}.png?key=OLD&lang=en")
        XCTAssertTrue(old.differsOnlyInCredentials(from: try tiles("https://h/{z}/{x}/{y}.png?key=NEW&lang=en")))
        XCTAssertTrue(old.differsOnlyInCredentials(from: try tiles("https://h/{z}/{x}/{y}.png?key=NEW&lang=en", ["context": 1])))
        XCTAssertFalse(old.differsOnlyInCredentials(from: old), "the same request is not a credential change (it is a refresh)")
        XCTAssertFalse(old.differsOnlyInCredentials(from: try tiles("https://h/{z}/{x}/{y}.png?key=NEW&lang=de")))
        XCTAssertFalse(old.differsOnlyInCredentials(from: try tiles("https://h/v2/{z}/{x}/{y}.png?key=NEW&lang=en")))
        XCTAssertFalse(old.differsOnlyInCredentials(from: try tiles("https://h/{z}/{x}/{y}.png?key=NEW&lang=en", ["maxZoom": 4])))
        let auth = try tiles("https://h/{z}/{x}/{y}.png", ["headers": ["Authorization": "Bearer 1"]])
        XCTAssertTrue(auth.differsOnlyInCredentials(from: try tiles("https://h/{z}/{x}/{y}.png", ["headers": ["Authorization": "Bearer 2"]])))
        XCTAssertFalse(auth.differsOnlyInCredentials(from: try tiles("https://h/{z}/{x}/{y}.png", ["headers": ["X-Api-Key": "Bearer 2"]])))
    }

    func testMaxRequestsPerSecondField() throws {
        let base: [String: Any] = ["tiles": ["http://h/{z}/{x}/{y}.png"], "bounds": [0, 0, 1, 1], "minZoom": 0, "maxZoom": 2]
        var o = base; o["maxRequestsPerSecond"] = 2.5
        let r = try request(o)
        XCTAssertEqual(r.maxRequestsPerSecond, 2.5)
        XCTAssertEqual(r.jsonObject["maxRequestsPerSecond"] as? Double, 2.5)
        XCTAssertTrue(r.downloadsTheSame(as: try request(base)), "a rate changes how fast, not what")
        for bad in [0, -1, 20_000, "fast"] as [Any] {
            o["maxRequestsPerSecond"] = bad
            XCTAssertTrue(refusal(o).contains("maxRequestsPerSecond"), "\(bad)")
        }
    }

    /// Depth-one buckets: requests to one host start 1/rate apart whatever the region; a
    /// region's own limit holds only that region; loopback is spared unless the option was given;
    /// the byte bucket makes requests wait while it is in debt.
    func testRateLimiter() {
        var l = RateLimiter(perHost: 4)
        XCTAssertEqual(RateLimiter.host(of: "https://user:pw@Tiles.Example.org:8443/a/{z}?k=1"), "Tiles.Example.org")
        XCTAssertEqual(RateLimiter.host(of: "http://[::1]:8080/x"), "[::1]")
        XCTAssertEqual(RateLimiter.host(of: "http://a@b@Host.example:1/p@q"), "Host.example", "the last @ of the authority")
        XCTAssertEqual(RateLimiter.host(of: "https://tiles.example.org"), "tiles.example.org")
        XCTAssertEqual(RateLimiter.host(of: "https://tiles.example.org#f"), "tiles.example.org")
        XCTAssertEqual(RateLimiter.host(of: "http://[::1"), "[::1")
        XCTAssertEqual(RateLimiter.host(of: "tiles.example.org/a"), "")
        XCTAssertEqual(RateLimiter.host(of: "mailto:x"), "")
        XCTAssertEqual(RateLimiter.host(of: "http:/x"), "")
        XCTAssertEqual(RateLimiter.host(of: "http://ünï.example/x"), "ünï.example", "non-ASCII bytes pass through")
        XCTAssertTrue(RateLimiter.isLoopback("127.0.0.1") && RateLimiter.isLoopback("localhost") && RateLimiter.isLoopback("[::1]"))
        XCTAssertFalse(RateLimiter.isLoopback("127.example.org") || RateLimiter.isLoopback("10.0.0.1"))
        XCTAssertTrue(l.isUnlimited(host: "127.0.0.1"), "the default spares loopback")
        XCTAssertFalse(l.isUnlimited(host: "tiles.example.org"))
        XCTAssertEqual(l.admit(host: "tiles.example.org", region: "a", regionLimit: nil, now: 100), 0)
        XCTAssertEqual(l.admit(host: "tiles.example.org", region: "b", regionLimit: nil, now: 100.1), 0.15, accuracy: 1e-9, "the host's limit holds across regions")
        XCTAssertEqual(l.admit(host: "other.example.org", region: "b", regionLimit: nil, now: 100.1), 0, "another host has its own bucket")
        XCTAssertEqual(l.admit(host: "tiles.example.org", region: "b", regionLimit: nil, now: 100.25), 0)
        XCTAssertEqual(l.admit(host: "tiles.example.org", region: "a", regionLimit: nil, now: 100.4), 0.1, accuracy: 1e-9)
        XCTAssertEqual(l.admit(host: "127.0.0.1", region: "a", regionLimit: nil, now: 100.4), 0)
        XCTAssertEqual(l.admit(host: "127.0.0.1", region: "a", regionLimit: 1, now: 100.4), 0)
        XCTAssertEqual(l.admit(host: "127.0.0.1", region: "a", regionLimit: 1, now: 100.9), 0.5, accuracy: 1e-9, "the region's own limit")
        XCTAssertEqual(l.admit(host: "127.0.0.1", region: "b", regionLimit: 1, now: 100.9), 0, "another region's limit is its own")
        var everywhere = RateLimiter(perHost: 2, perHostAppliesToLoopback: true)
        XCTAssertEqual(everywhere.admit(host: "127.0.0.1", region: "a", regionLimit: nil, now: 0), 0)
        XCTAssertEqual(everywhere.admit(host: "127.0.0.1", region: "a", regionLimit: nil, now: 0.1), 0.4, accuracy: 1e-9)
        var bytes = RateLimiter(perHost: nil, bytesPerSecond: 1000)
        XCTAssertEqual(bytes.admit(host: "h", region: "a", regionLimit: nil, now: 0), 0)
        bytes.received(bytes: 3000, now: 0)
        XCTAssertEqual(bytes.admit(host: "h", region: "a", regionLimit: nil, now: 0.5), 1.5, accuracy: 1e-9, "2,000 bytes of debt less 500 repaid")
        XCTAssertEqual(bytes.admit(host: "h", region: "a", regionLimit: nil, now: 2), 0)
        // A request counted without asking (`charge`): the buckets go into debt, and the next
        // request waits for both turns.
        var charged = RateLimiter(perHost: 4)
        XCTAssertEqual(charged.admit(host: "tiles.example.org", region: "a", regionLimit: 1, now: 10), 0)
        charged.charge(host: "tiles.example.org", region: "a", regionLimit: 1, now: 10)
        XCTAssertEqual(charged.admit(host: "tiles.example.org", region: "a", regionLimit: 1, now: 10), 2, accuracy: 1e-9, "two turns of the region's 1 a second")
        XCTAssertEqual(charged.admit(host: "tiles.example.org", region: "b", regionLimit: nil, now: 10), 0.5, accuracy: 1e-9, "two turns of the host's 4 a second")
        charged.charge(host: "127.0.0.1", region: "a", regionLimit: nil, now: 10)
        XCTAssertEqual(charged.admit(host: "127.0.0.1", region: "a", regionLimit: nil, now: 10), 0, "loopback is spared by default, charged or not")
        // A region that stops (pause) and starts again keeps a bucket still in debt: its next
        // request waits as it would have; buckets whose turn has come are forgotten.
        var slow = RateLimiter(perHost: nil)
        XCTAssertEqual(slow.admit(host: "h", region: "p", regionLimit: 0.01, now: 0), 0)
        slow.forgetPast(now: 1)
        XCTAssertEqual(slow.admit(host: "h", region: "p", regionLimit: 0.01, now: 1), 99, accuracy: 1e-9, "a pause and resume skip nothing")
        slow.forgetPast(now: 100)
        XCTAssertEqual(slow.admit(host: "h", region: "p", regionLimit: 0.01, now: 100), 0)
    }

    /// The range budget in turns: a range that does not fit makes the regions after it in the
    /// pass wait, so the room that frees up goes to it; one range always fits when none is held.
    func testRangeBudgetIsTakenInTurns() {
        let mib: UInt64 = 1 << 20
        // Region A holds three ranges of 1.5 MiB, one of which is done: 3 MiB held.
        var pass = RangeBudget(limit: 6 * mib, held: 3 * mib)
        XCTAssertTrue(pass.mayAsk(2 * mib), "B, served least recently, fits")
        pass.take(2 * mib)
        XCTAssertFalse(pass.mayAsk(3 * mib / 2), "A's next range does not fit in what is left")
        XCTAssertFalse(pass.mayAsk(mib / 2), "and nothing after it in the pass takes the room")
        XCTAssertEqual(pass.held, 5 * mib)
        // B's next range is a 5 MiB body: it waits, and A may not take the 1.5 MiB that frees.
        var next = RangeBudget(limit: 6 * mib, held: 3 * mib)
        XCTAssertFalse(next.mayAsk(5 * mib))
        XCTAssertTrue(next.aRegionWaits)
        XCTAssertFalse(next.mayAsk(3 * mib / 2), "A waits behind B's turn")
        XCTAssertEqual(next.held, 3 * mib)
        // With 1 MiB held the body fits exactly; with none held any range does.
        var room = RangeBudget(limit: 6 * mib, held: mib)
        XCTAssertTrue(room.mayAsk(5 * mib))
        var empty = RangeBudget(limit: 6 * mib, held: 0)
        XCTAssertTrue(empty.mayAsk(40 * mib), "one range is always allowed when none is held")
        empty.take(40 * mib)
        XCTAssertFalse(empty.mayAsk(1))
        // Two regions asking: a region that holds its share (3 MiB) or more asks for no more,
        // and leaves the room to the other (it is not made to wait for it).
        var shared = RangeBudget(limit: 6 * mib, held: 4 * mib, regions: 2)
        XCTAssertEqual(shared.share, 3 * mib)
        XCTAssertFalse(shared.mayAsk(mib, own: 4 * mib), "A, slow, already holds two ranges")
        XCTAssertFalse(shared.aRegionWaits)
        XCTAssertTrue(shared.mayAsk(2 * mib, own: 0), "B takes the room")
        shared.take(2 * mib)
        var below = RangeBudget(limit: 6 * mib, held: 2 * mib, regions: 2)
        XCTAssertTrue(below.mayAsk(2 * mib, own: 2 * mib), "below its share, a region asks one more range")
        var four = RangeBudget(limit: 6 * mib, held: 5 * mib, regions: 4)
        XCTAssertTrue(four.mayAsk(mib, own: 0), "a first range within the limit, whatever the share")
    }
}

/// Issue 29: which line of events.jsonl answers an action (`tilespool ACTION ID --wait`).
final class ActionWatchTests: XCTestCase {
    /// The event of a line of events.jsonl with these fields, read as the CLI reads it.
    func ev(_ id: String, _ state: String, _ extra: [String: Any] = [:]) -> StatusEvent {
        var o: [String: Any] = ["id": id, "state": state, "error": NSNull(), "time": "2026-12-05T00:00:00Z"]
        for (k, v) in extra { o[k] = v }
        return StatusCoding.event(JSONKind.serialize(o))!
    }

    func testPauseResumeCancelAreAnsweredByTheirStateChangeOrAnIgnoredEvent() {
        var w = ActionWatch(id: "a", action: .pause)
        XCTAssertNil(w.answer(ev("b", "pausedUser", ["note": "pause"])), "another region")
        XCTAssertNil(w.answer(ev("a", "downloading")), "the daemon's own change")
        XCTAssertEqual(w.answer(ev("a", "pausedUser", ["note": "pause"])), .applied("pausedUser"))
        w = ActionWatch(id: "a", action: .pause)
        XCTAssertEqual(w.answer(ev("a", "completed", ["action": "pause", "ignored": "pause applies to queued or downloading regions, not completed"])),
                       .ignored(why: "pause applies to queued or downloading regions, not completed", state: "completed"))
        w = ActionWatch(id: "a", action: .resume)
        XCTAssertNil(w.answer(ev("a", "completed", ["action": "pause", "ignored": "x"])), "another action's ignored event")
        XCTAssertEqual(w.answer(ev("a", "queued", ["note": "resume"])), .applied("queued"))
        w = ActionWatch(id: "a", action: .resume)
        XCTAssertEqual(w.answer(ev("a", "queued", ["note": "resume: retrying 2 failed tiles", "refresh": "started", "failedTiles": true])),
                       .applied("queued (refreshing its failed tiles)"))
        w = ActionWatch(id: "a", action: .cancel)
        XCTAssertEqual(w.answer(ev("a", "completed", ["note": "refresh cancelled", "refresh": "cancelled"])), .applied("completed (refresh cancelled)"))
        w = ActionWatch(id: "a", action: .cancel)
        XCTAssertEqual(w.answer(ev("a", "deleted", ["action": "delete"])), .failed("the region was deleted"))
    }

    func testDeleteAndRefresh() {
        var w = ActionWatch(id: "a", action: .delete)
        XCTAssertNil(w.answer(ev("a", "pausedUser", ["note": "pause"])))
        XCTAssertEqual(w.answer(ev("a", "deleted", ["action": "delete"])), .applied("deleted"))
        w = ActionWatch(id: "a", action: .refresh)
        // A refresh's end counts only after its start: one that ended before ours began is not the answer.
        XCTAssertNil(w.answer(ev("a", "completed", ["note": "refresh finished", "refresh": "finished"])))
        XCTAssertEqual(w.answer(ev("a", "queued", ["note": "refresh", "refresh": "started"])), .started)
        XCTAssertNil(w.answer(ev("a", "downloading")))
        XCTAssertEqual(w.answer(ev("a", "completed", ["note": "refresh finished", "refresh": "finished", "resourcesChecked": 5, "resourcesChanged": 1, "resourcesUnchanged": 4])),
                       .applied("refresh finished: 5 checked, 1 changed, 4 unchanged"))
        w = ActionWatch(id: "a", action: .refresh)
        _ = w.answer(ev("a", "queued", ["note": "refresh", "refresh": "started"]))
        XCTAssertEqual(w.answer(ev("a", "completed", ["note": "refresh failed", "refresh": "failed", "error": ["code": "networkError", "message": "down"]])),
                       .failed("refresh failed: networkError: down"))
        w = ActionWatch(id: "a", action: .refresh)
        XCTAssertEqual(w.answer(ev("a", "failed", ["action": "refresh", "ignored": "refresh applies to completed regions, not failed"])),
                       .ignored(why: "refresh applies to completed regions, not failed", state: "failed"))
        w = ActionWatch(id: "a", action: .refresh)
        XCTAssertEqual(w.answer(ev("a", "completed", ["note": "refresh", "refresh": "failed", "error": ["code": "storageError", "message": "cannot start a refresh"]])),
                       .failed("refresh failed: storageError: cannot start a refresh"))
    }
}
