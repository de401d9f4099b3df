import Foundation
import XCTest
@testable import TileSpoolCore

/// Tile cover of GeoJSON polygons, checked against the box cover and hand counts.
final class GeometryTests: XCTestCase {
    func box(_ w: Double, _ s: Double, _ e: Double, _ n: Double) -> [[[Double]]] {
        [[[w, s], [e, s], [e, n], [w, n], [w, s]]]
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
