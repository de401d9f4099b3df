import Foundation
import XCTest
@testable import TileSpoolCore

/// Tile cover of GeoJSON polygons, checked against the box cover and hand counts.
final class GeometryTests: XCTestCase {
    func box(_ w: Double, _ s: Double, _ e: Double, _ n: Double) -> [[[Double]]] {
        [[[w, s], [e, s], [e, n], [w, n], [w, s]]]
    }

    /// Rows asked through the edge index (`ProjectedRings`: only the edges near the row) give
    /// the columns going over every edge gives, on random polygons (seeded): stars with long
    /// and short edges, holes, two polygons, edges on tile borders, latitudes near the pole,
    /// every row of the bounding box at z2 to z16, and rows past the shape (none).
    func testIndexedRingsGiveTheSameColumns() throws {
        var rng = SeededRandom(seed: 7)
        func unit() -> Double { Double(rng.next() % 1_000_001) / 1_000_000 }
        var rows = 0, rowsWithTiles = 0
        for trial in 0..<30 {
            let (cx, cy) = (unit() * 340 - 170, unit() * 160 - 80)
            let radius = [0.001, 0.05, 1.0, 8.0][trial % 4]
            func ring(_ r: Double, _ count: Int, spikes: Bool) -> [[Double]] {
                var out: [[Double]] = (0..<count).map { k in
                    let a = 2 * Double.pi * Double(k) / Double(count)
                    let rr = r * (spikes && k % 7 == 0 ? 3 : 0.4 + 0.6 * unit())
                    // Some positions on whole tile borders at z10 (0.3515625° apart in longitude).
                    let x = trial % 3 == 0 ? ((cx + rr * cos(a)) / 0.3515625).rounded() * 0.3515625 : cx + rr * cos(a)
                    return [x, max(-85, min(85, cy + rr * sin(a) * 0.6))]
                }
                out.append(out[0])
                return out
            }
            var polygons: [[[[Double]]]] = [[ring(radius, 5 + trial * 7, spikes: true), ring(radius * 0.2, 6, spikes: false)]]
            if trial % 2 == 1 { polygons.append([ring(radius * 0.5, 40, spikes: false).map { [$0[0] + radius * 2, $0[1]] }]) }
            let shape = RegionShape(polygons: polygons)
            for z in [2, 6, 10, 13, 16] {
                let indexed = shape.indexed(z: z), every = shape.projected(z: z)
                let rect = WebMercator.cover(shape.bounds, z: z)[0]
                for y in max(0, rect.minY - 2)...min((1 << z) - 1, rect.maxY + 2) {
                    let a = shape.columns(z: z, y: y, rings: indexed), b = shape.columns(z: z, y: y, rings: every)
                    XCTAssertEqual(a, b, "trial \(trial) z\(z) row \(y)")
                    rows += 1
                    if !b.isEmpty { rowsWithTiles += 1 }
                    if rows > 200_000 { break }
                }
            }
        }
        XCTAssertGreaterThan(rowsWithTiles, 2000, "\(rows) rows compared")
    }

    /// A shape's tiles counted only over the rows some ring reaches (`ProjectedRings.rowSpans`)
    /// are those of every row of the rectangle, on the random polygons above and on two specks
    /// 140 degrees apart (whose rectangle is millions of empty rows at z18); the specks' rows
    /// between them are not asked.
    func testCountingOnlyTheRowsTheRingsReachGivesTheSameCount() throws {
        var rng = SeededRandom(seed: 11)
        func unit() -> Double { Double(rng.next() % 1_000_001) / 1_000_000 }
        func everyRow(_ shape: RegionShape, _ rect: TileRect) -> Int {
            let rings = shape.projected(z: rect.z)
            var n = 0
            for y in rect.minY...rect.maxY {
                for c in shape.columns(z: rect.z, y: y, rings: rings) { n += max(0, min(c.upperBound, rect.maxX) - max(c.lowerBound, rect.minX) + 1) }
            }
            return n
        }
        var compared = 0
        for trial in 0..<20 {
            let (cx, cy) = (unit() * 300 - 150, unit() * 140 - 70)
            var polygons: [[[[Double]]]] = []
            for p in 0..<(1 + trial % 3) {
                let r = [0.01, 0.3, 2.0][p], dy = Double(p) * (unit() * 10 - 5)
                var ring: [[Double]] = (0..<9).map { k in
                    let a = 2 * Double.pi * Double(k) / 9
                    return [cx + Double(p) * 3 + r * cos(a) * (0.5 + unit()), max(-84, min(84, cy + dy + r * sin(a) * (0.5 + unit())))]
                }
                ring.append(ring[0])
                polygons.append([ring])
            }
            let shape = RegionShape(polygons: polygons)
            for z in [3, 8, 12] {
                for rect in WebMercator.cover(shape.bounds, z: z) {
                    XCTAssertEqual(shape.count(in: rect), everyRow(shape, rect), "trial \(trial) z\(z)")
                    compared += 1
                }
            }
        }
        XCTAssertGreaterThanOrEqual(compared, 60)
        let specks = RegionShape(polygons: [box(10, -70, 10.000001, -69.999999), box(10, 70, 10.000001, 70.000001)])
        let rect = WebMercator.cover(specks.bounds, z: 18)[0]
        XCTAssertGreaterThan(rect.height, 100_000)
        XCTAssertEqual(specks.count(in: rect), everyRow(specks, rect))
        XCTAssertEqual(specks.count(in: rect), 2)
        let spans = specks.indexed(z: 18).rowSpans
        XCTAssertEqual(spans.count, 2, "\(spans)")
        XCTAssertLessThan(spans.reduce(0) { $0 + $1.count }, 10, "\(spans)")
    }

    /// A thin shape 140 degrees tall to z24 has 18.5 million tiles: counting them took 15 s
    /// (the daemon's loop waiting) before the plan was refused for the default limit (here
    /// 200,000, to keep the debug build's count short). With the
    /// limits given, the planner stops counting once the plan passes them and says how many it
    /// counted; under them the count is exact, and the templates of one request share it.
    func testCountingAShapeStopsOnceThePlanPassesTheTileLimit() throws {
        func request(maxZoom: Int, maxTiles: Int? = nil) throws -> RegionRequest {
            var o: [String: Any] = ["id": "thin", "tiles": ["http://127.0.0.1/a/{z}/{x}/{y}.png", "http://127.0.0.1/b/{z}/{x}/{y}.png"],
                                    "geometry": ["type": "Polygon", "coordinates": box(10, -70, 10.000001, 70)], "minZoom": 0, "maxZoom": maxZoom]
            if let maxTiles { o["maxTiles"] = maxTiles }
            return try RequestValidator.validate(try JSONSerialization.data(withJSONObject: o), fileName: "thin.json")
        }
        let limits = RequestValidator.TileLimits(maxTiles: nil, daemonMaxTiles: 200_000)
        let big = try request(maxZoom: 24)
        XCTAssertThrowsError(try Planner.plan(request: big, templates: ["http://127.0.0.1/a/{z}/{x}/{y}.png", "http://127.0.0.1/b/{z}/{x}/{y}.png"], limits: limits)) { e in
            let message = (e as? RegionError)?.message ?? ""
            XCTAssertEqual((e as? RegionError)?.code, .tileLimitExceeded)
            // Both templates' tiles, one row past the limit (a row of this strip is one or two
            // tiles, twice over), not 2 x 18.5 million; not one template's (attack round 48).
            XCTAssertTrue(message.hasPrefix("the plan has at least 20000") && message.contains("tiles (counting stopped there), more than the daemon's --max-tiles (200000)"), message)
            let counted = Int(message.split(separator: " ")[5]) ?? 0
            XCTAssertTrue((200_001...200_004).contains(counted), message)
            XCTAssertEqual(counted % 2, 0, "two templates: twice one count")
        }
        // The request's own maxTiles is named when it is the lower.
        XCTAssertThrowsError(try Planner.plan(request: try request(maxZoom: 24, maxTiles: 5000), templates: ["http://127.0.0.1/a/{z}/{x}/{y}.png"],
                                              limits: RequestValidator.TileLimits(maxTiles: 5000, daemonMaxTiles: 200_000))) { e in
            XCTAssertTrue(((e as? RegionError)?.message ?? "").hasPrefix("maxTiles: the plan has at least 500"), "\(e)")
        }
        // Within the limits: the same plan as without them; two templates, one count each.
        let small = try request(maxZoom: 14)
        let templates = ["http://127.0.0.1/a/{z}/{x}/{y}.png", "http://127.0.0.1/b/{z}/{x}/{y}.png"]
        let limited = try Planner.plan(request: small, templates: templates, limits: limits)
        XCTAssertEqual(limited, try Planner.plan(request: small, templates: templates))
        XCTAssertEqual(limited.tileSets.map(\.count), [limited.tileSets[0].count, limited.tileSets[0].count])
        XCTAssertGreaterThan(limited.tileSets[0].count, 1000)
        // Two templates each within the limit pass it together: the one count stops once twice
        // it passes the limit. Exactly at the limit, the plan is made.
        let one = limited.tileSets[0].count
        XCTAssertThrowsError(try Planner.plan(request: small, templates: templates, limits: RequestValidator.TileLimits(maxTiles: nil, daemonMaxTiles: one + 1))) { e in
            XCTAssertTrue(((e as? RegionError)?.message ?? "").hasPrefix("the plan has at least "), "\(e)")
        }
        XCTAssertEqual(try Planner.plan(request: small, templates: templates, limits: RequestValidator.TileLimits(maxTiles: nil, daemonMaxTiles: 2 * one)), limited)
        // A count that passes the limit on its last rows is whole: the plan is made, and the
        // caller's check says its exact count, not "at least" (attack round 48).
        let justOver = try Planner.plan(request: small, templates: [templates[0]], limits: RequestValidator.TileLimits(maxTiles: nil, daemonMaxTiles: one - 1))
        XCTAssertEqual(justOver.tileCount, one)
        XCTAssertEqual(RequestValidator.tileLimitError(tiles: justOver.tileCount, maxTiles: nil, daemonMaxTiles: one - 1)?.message,
                       "the plan has \(one) tiles, more than the daemon's --max-tiles (\(one - 1))")
    }

    /// Round 46: a polygon zigzagging across a strip of 440,000 rows planned for 55 s (each row
    /// went over every edge). Edges near a row are found through the index; a shape whose
    /// edges spanning many rows, times its rows, pass `RegionShape.maxPlanLongEdgeRows` is
    /// refused as it is validated (a top-level `geometry` or a part); a polygon of 20,000
    /// short edges over the same rows is taken.
    func testAShapeOfManyLongEdgesIsRefusedBeforeItIsPlanned() throws {
        func refusal(_ fields: [String: Any]) -> RegionError? {
            var o: [String: Any] = ["id": "g", "tiles": ["http://127.0.0.1/{z}/{x}/{y}.png"]]
            for (k, v) in fields { o[k] = v }
            do { _ = try RequestValidator.validate(try JSONSerialization.data(withJSONObject: o), fileName: "g.json"); return nil } catch let e as RegionError { return e } catch { return nil }
        }
        // 2,000 edges from 60° S to 60° N and back, 0.01° wide.
        var zigzag: [[Double]] = (0..<2_000).map { [Double($0) * 0.000005, $0 % 2 == 0 ? -60 : 60] }
        zigzag += [[0.01, 60], [0.01, -60.5], [0, -60.5], zigzag[0]]
        let long = refusal(["geometry": ["type": "Polygon", "coordinates": [zigzag]], "minZoom": 0, "maxZoom": 18])
        XCTAssertEqual(long?.code, .tileLimitExceeded)
        XCTAssertTrue(long?.message.hasPrefix("geometry: its long edges (spanning more than 16 tile rows) times their rows come to ") == true, long?.message ?? "")
        XCTAssertTrue(long?.message.contains(", more than 200000000 (each row goes over every long edge); give fewer or shallower zooms, a simpler shape, or split the region into smaller requests") == true, long?.message ?? "")
        let part = refusal(["parts": [["geometry": ["type": "Polygon", "coordinates": [zigzag]], "minZoom": 0, "maxZoom": 18]]])
        XCTAssertTrue(part?.message.hasPrefix("parts[0]: its long edges") == true, part?.message ?? "")
        // The same strip drawn with 20,000 short steps along its sides: taken.
        var steps: [[Double]] = (0...10_000).map { [0, -60 + 120 * Double($0) / 10_000] }
        steps += (0...10_000).map { [0.01, 60 - 120 * Double($0) / 10_000] }
        steps.append(steps[0])
        XCTAssertNil(refusal(["geometry": ["type": "Polygon", "coordinates": [steps]], "minZoom": 0, "maxZoom": 18]))
    }

    /// A rectangle covers exactly what the same bounds cover, at every zoom.
    func testRectangleCoversLikeItsBounds() {
        for b in [GeoBounds(west: 9.47, south: 47.04, east: 9.64, north: 47.27), GeoBounds(west: -10, south: 35, east: 30, north: 60),
                  GeoBounds(west: 0, south: 80, east: 10, north: 89)] {
            let shape = RegionShape(polygons: [box(b.west, b.south, b.east, b.north)])
            for z in [0, 3, 8, 12, 14] {
                let rect = WebMercator.cover(b, z: z)[0]
                XCTAssertEqual(shape.count(in: rect), rect.count, "z\(z) \(b)")
            }
        }
    }

    /// A box on tile edges does not pull in its neighbours: at z2, [0, 0, 90, 60] is column 2, row 1.
    func testEdgesOnTileBordersOnlyTouch() {
        let shape = RegionShape(polygons: [box(0, 0, 90, 60)])
        XCTAssertEqual(shape.columns(z: 2, y: 1), [2...2])
        XCTAssertEqual(shape.columns(z: 2, y: 2), [])
        XCTAssertEqual(shape.count(in: TileRect(z: 2, minX: 0, minY: 0, maxX: 3, maxY: 3)), 1)
    }

    /// A right triangle with its right angle at the south-west corner: at z4 its box [0, 0, 90, 66.51]
    /// is columns 8-11, rows 4-7, and the hypotenuse runs from (12, 8) to (8, 4) in tile units, so
    /// rows 4, 5, 6, 7 cover 1, 2, 3, 4 tiles.
    func testTriangle() {
        let south = 0.0, north = 66.51326044311186 // y = 4.0 at z4
        let shape = RegionShape(polygons: [[[[0, south], [90, south], [0, north], [0, south]]]])
        // The hypotenuse runs x = 8 + (y - 4): row 4 (the north tip) reaches column 8, row 7 column 11.
        XCTAssertEqual(shape.columns(z: 4, y: 4), [8...8])
        XCTAssertEqual(shape.columns(z: 4, y: 7), [8...11])
        XCTAssertEqual(shape.count(in: TileRect(z: 4, minX: 0, minY: 0, maxX: 15, maxY: 15)), 4 + 3 + 2 + 1)
    }

    func testHoleAndMultiPolygon() {
        // Outer 4x4 tiles at z4 (x 8-11, rows 4-7), hole of the middle 2x2 tiles.
        func lon(_ x: Double) -> Double { x / 16 * 360 - 180 }
        func lat(_ y: Double) -> Double { atan(sinh(.pi * (1 - 2 * y / 16))) * 180 / .pi }
        let outer = [[lon(8), lat(8)], [lon(12), lat(8)], [lon(12), lat(4)], [lon(8), lat(4)], [lon(8), lat(8)]]
        let hole = [[lon(9), lat(7)], [lon(9), lat(5)], [lon(11), lat(5)], [lon(11), lat(7)], [lon(9), lat(7)]]
        let ring = RegionShape(polygons: [[outer, hole]])
        XCTAssertEqual(ring.count(in: TileRect(z: 4, minX: 0, minY: 0, maxX: 15, maxY: 15)), 16 - 4)
        let two = RegionShape(polygons: [box(-170, 10, -160, 20), box(160, -20, 170, -10)])
        let r3 = TileRect(z: 3, minX: 0, minY: 0, maxX: 7, maxY: 7)
        XCTAssertEqual(two.count(in: r3), 2)
    }

    func testParse() throws {
        let ok = try JSONSerialization.jsonObject(with: Data(#"{"type":"Feature","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,0]]]}}"#.utf8))
        XCTAssertNoThrow(try RegionShape.parse(ok).get())
        for (text, word) in [(#"{"type":"Point","coordinates":[0,0]}"#, "Point"),
                             (#"{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1]]]}"#, "not closed"),
                             (#"{"type":"Polygon","coordinates":[[[0,0],[1,0],[0,0]]]}"#, "at least 4"),
                             (#"{"type":"Polygon","coordinates":[[[0,0],[400,0],[1,1],[0,0]]]}"#, "outside")] {
            let v = try JSONSerialization.jsonObject(with: Data(text.utf8))
            guard case .failure(let m) = RegionShape.parse(v) else { XCTFail(text); continue }
            XCTAssertTrue(m.message.contains(word), m.message)
        }
    }
}
