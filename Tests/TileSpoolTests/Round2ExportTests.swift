// Issue 29, second outside attack (planning, exports and the filesystem): each test reproduces a
// finding of the round-2 report through the real binary, or pins the pure rule that fixes it, and
// checks what a user would check: exit statuses, states, error codes, bytes on disk.
import Foundation
import Glibc
import TileSpoolCore
import TileSpoolIO
import XCTest

/// A style of `count` raster sources of 64 px tiles up to zoom 30: at maxZoom 24 each loads
/// zoom 27 (MapLibre's covering zoom: 24 + log2(512 / 64)), about 2.4e16 tiles a source over the
/// world, so the sum over the sources passes Int.max (finding 2).
func overflowingStyle(sources count: Int, base: String) -> String {
    let sources = (0..<count).map { i in
        #""s\#(i)": {"type": "raster", "tileSize": 64, "maxzoom": 30, "tiles": ["\#(base)/ok/s\#(i)/{z}/{x}/{y}.png"]}"#
    }.joined(separator: ",\n")
    return #"{"version": 8, "sources": {"# + sources + #"}, "layers": []}"#
}

/// Finding 2: tile counts saturate instead of trapping on overflow.
final class PlanArithmeticTests: XCTestCase {
    let world = GeoBounds(west: -180, south: -85, east: 180, north: 85)

    func testAnOverflowingPlanSaturatesAndIsOverTheLimit() throws {
        let style = try StyleDocument(data: Data(overflowingStyle(sources: 1000, base: "http://h").utf8), baseURL: "http://h/style.json")
        let req = RegionRequest(id: "ov", source: .style("http://h/style.json"), bounds: world, minZoom: 0, maxZoom: 24)
        let plan = try Planner.plan(request: req, styleURL: "http://h/style.json", style: style, tileJSONs: [:])
        XCTAssertEqual(plan.tileSets.count, 1000)
        // A 64 px source loads zooms 3 (map zoom 0) to 27 (map zoom 24).
        XCTAssertEqual(plan.tileSets[0].rects.map(\.z), Array(3...27))
        // One source alone fits in an Int (about 2.4e16 tiles); a thousand do not.
        let one = plan.tileSets[0].count
        XCTAssertEqual(one, plan.tileSets[0].rects.reduce(0) { $0 + $1.width * $1.height })
        XCTAssertGreaterThan(one, 1 << 54)
        XCTAssertGreaterThan(Double(one) * 1000, Double(Int.max))
        XCTAssertEqual(plan.tileCount, Int.max)
        XCTAssertEqual(plan.count, Int.max)
        XCTAssertEqual(plan.indexSpace, Int.max)
        XCTAssertEqual(plan.tileCountsByZoom().count, 1000 * 25)
        let e = try XCTUnwrap(RequestValidator.tileLimitError(tiles: plan.tileCount, maxTiles: nil, daemonMaxTiles: 1_000_000))
        XCTAssertEqual(e.code, .tileLimitExceeded)
        XCTAssertTrue(e.message.contains("at least 9223372036854775807 tiles"), e.message)
        let e2 = try XCTUnwrap(RequestValidator.tileLimitError(tiles: plan.tileCount, maxTiles: 5, daemonMaxTiles: 1_000_000))
        XCTAssertTrue(e2.message.contains("maxTiles (5)"), e2.message)
    }

    /// Rectangles at the deepest zoom a style may name (30) count without overflow, and a count
    /// that would pass Int.max in a rectangle saturates.
    func testRectangleCountsAtZoom30() {
        let r = TileRect(z: 30, minX: 0, minY: 0, maxX: (1 << 30) - 1, maxY: (1 << 30) - 1)
        XCTAssertEqual(r.count, 1 << 60)
        XCTAssertEqual(TileRect(z: 62, minX: 0, minY: 0, maxX: (1 << 62) - 1, maxY: (1 << 62) - 1).count, Int.max)
        let cover = WebMercator.cover(world, z: 30)
        XCTAssertEqual(cover.count, 1)
        XCTAssertEqual(cover[0].width, 1 << 30)
        XCTAssertTrue(cover[0].count > 1 << 59 && cover[0].count <= 1 << 60, "\(cover[0])")
    }
}

/// Finding 2, the audit: a GeoJSON region's plan is tracked over its bounding rectangles, which
/// a style of 64 px raster sources (3 zooms deeper than the request) multiplies past what the
/// request's own check (50,000,000 tiles at its zooms and one deeper) allowed for. Such a plan
/// is refused before its tiles are counted row by row (which took minutes a source, the daemon's
/// event loop blocked, again at every restart).
final class ShapePlanBudgetTests: XCTestCase {
    func testAShapePlanOverItsIndexBudgetIsRefusedBeforeCounting() throws {
        // A thin shape from 80° S to 80° N: 1-2 tiles wide at z23, so its bounding box passes
        // the request's check (about 26 million tiles over z0-23).
        let geometry: [String: Any] = ["type": "Polygon", "coordinates": [[[0, -80], [0.0001, -80], [0.0001, 80], [0, 80], [0, -80]]]]
        let data = try JSONSerialization.data(withJSONObject: ["id": "thin", "style": "http://h/style.json", "geometry": geometry,
                                                               "minZoom": 0, "maxZoom": 22])
        let req = try RequestValidator.validate(data, fileName: "thin.json")
        let style = try StyleDocument(data: Data(overflowingStyle(sources: 2, base: "http://h").utf8), baseURL: "http://h/style.json")
        let started = Date()
        XCTAssertThrowsError(try Planner.plan(request: req, styleURL: "http://h/style.json", style: style, tileJSONs: [:])) { e in
            XCTAssertEqual((e as? RegionError)?.code, .tileLimitExceeded)
            XCTAssertTrue((e as? RegionError)?.message.contains("200000000") ?? false, "\(e)")
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 5, "refused before the rows are counted")
        // The same shape with a vector source (512 px: the request's zooms) is planned.
        let vector = #"{"version": 8, "sources": {"v": {"type": "vector", "tiles": ["http://h/{z}/{x}/{y}.pbf"], "maxzoom": 14}}, "layers": []}"#
        let plan = try Planner.plan(request: req, styleURL: "http://h/style.json", style: try StyleDocument(data: Data(vector.utf8), baseURL: "http://h/style.json"), tileJSONs: [:])
        XCTAssertGreaterThan(plan.tileCount, 0)
        XCTAssertLessThanOrEqual(plan.indexSpace, RegionShape.maxPlanIndexSpace)
    }
}

/// Finding 2 through the binary: `plan` and the daemon refuse the plan with `tileLimitExceeded`
/// instead of dying on an arithmetic overflow, and the daemon stays up across a restart.
final class PlanOverflowTests: FaultServerSpoolTestCase {
    func testAnOverflowingPlanIsRefusedNotACrash() throws {
        try server.register("stbig.json", json: overflowingStyle(sources: 1000, base: "__BASE__"))
        let request: [String: Any] = ["id": "ov", "style": server.url("/json/stbig.json"), "bounds": [-180, -85, 180, 85],
                                      "minZoom": 0, "maxZoom": 24]
        let file = fx.root.appendingPathComponent("ov.json")
        try JSONSerialization.data(withJSONObject: request).write(to: file)
        var (rc, out) = try fx.cli(["plan", file.path])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("tileLimitExceeded") && out.contains("--max-tiles (1000000)"), out)
        XCTAssertTrue(out.contains("plan for ov: at least 9223372036854775807 resources, at least 9223372036854775807 tiles"), String(out.prefix(300)))
        (rc, out) = try fx.cli(["plan", file.path, "--json"])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("tileLimitExceeded"), out)

        try fx.start()
        try fx.drop("ov.json", request)
        try fx.waitForState("ov", "failed")
        XCTAssertEqual(fx.errorCode("ov"), "tileLimitExceeded")
        XCTAssertTrue((fx.errorMessage("ov") ?? "").contains("at least 9223372036854775807 tiles"), fx.errorMessage("ov") ?? "")
        XCTAssertEqual(fx.stop(), 0, "the daemon was running and stops cleanly")
        try fx.start()
        try fx.drop("t.json", server.tilesRequest(["/ok/t/{z}/{x}/{y}.png"], id: "t"))
        try fx.waitForState("t", "completed")
        XCTAssertEqual(fx.state("ov"), "failed")
        XCTAssertEqual(fx.errorCode("ov"), "tileLimitExceeded")
        XCTAssertTrue(fx.daemon?.isRunning ?? false)
        XCTAssertEqual(server.allHits().keys.filter { $0.hasPrefix("/ok/s") }, [], "no tile of the refused plan was asked")
    }
}
