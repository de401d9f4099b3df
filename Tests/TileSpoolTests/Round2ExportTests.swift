// Issue 29, second outside attack (planning, exports and the filesystem): each test reproduces a
// finding of the round-2 report through the real binary, or pins the pure rule that fixes it, and
// checks what a user would check: exit statuses, states, error codes, bytes on disk.
import Foundation
import Glibc
import TileSpoolCore
import TileSpoolIO
import TileSpoolExport
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

/// A style's plan is made off the daemon's loop: a geometry whose count runs to the tile limit
/// (a strip 140 degrees tall, a 256 px raster source loading z22, `--max-tiles 300000`)
/// no longer holds up control files. A pause dropped once the plan is being made is applied at
/// once; the plan being made for the paused download stops and is dropped; a resume plans
/// again and the region fails then, over the limit. With the plan on the loop, the region failed
/// first and the pause was ignored.
final class StylePlanOffLoopTests: FaultServerSpoolTestCase {
    func testAPauseIsAppliedWhileAStylePlanIsMade() throws {
        try server.register("thinstyle.json", json: #"{"version": 8, "sources": {"r": {"type": "raster", "tileSize": 256, "tiles": ["__BASE__/ok/thin/{z}/{x}/{y}.png"]}}, "layers": []}"#)
        try fx.start(["--max-tiles", "300000"]) // the count stops there: about 2 s a plan in a debug build
        try fx.drop("thin.json", ["style": server.url("/json/thinstyle.json"), "minZoom": 0, "maxZoom": 21,
                                  "geometry": ["type": "Polygon", "coordinates": [[[10, -70], [10.000001, -70], [10.000001, 70], [10, 70], [10, -70]]]]])
        try waitUntil("the daemon is making the plan", timeout: 30) { fx.log().contains("making the plan") }
        var (rc, out) = try fx.cli(["pause", "thin", "--wait", "--timeout", "60", "--spool", fx.spool])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.hasSuffix("thin: pausedUser\n"), out)
        // The plan being made for the paused download stops (attack round 49: 30 pause and resume
        // pairs queued 30 whole plans ahead of every later style region).
        try waitUntil("the paused download's plan is cancelled", timeout: 60) { fx.log().contains("the plan of a stopped download was cancelled") }
        // The plan made for the paused download is dropped when it comes: a resume makes it again.
        (rc, out) = try fx.cli(["resume", "thin", "--wait", "--timeout", "60", "--spool", fx.spool])
        XCTAssertEqual(rc, 0, out)
        try fx.waitForState("thin", "failed", timeout: 120)
        XCTAssertEqual(fx.errorCode("thin"), "tileLimitExceeded")
        XCTAssertTrue((fx.errorMessage("thin") ?? "").contains("at least 30000"), fx.errorMessage("thin") ?? "")
        XCTAssertEqual(fx.eventStates("thin"), ["queued", "downloading", "pausedUser", "queued", "downloading", "failed"])
        XCTAssertEqual(server.allHits().keys.filter { $0.hasPrefix("/ok/thin/") }, [], "no tile asked")
    }
}

/// A `tiles` request's plan is made off the daemon's loop (`Daemon.planOnArrival`) and decided on
/// it: control files of other regions are applied meanwhile, a request dropped behind it is taken
/// once it is decided, and SIGTERM stops the daemon with the request left in requests/.
final class TilesPlanOnArrivalTests: FaultServerSpoolTestCase {
    func testTheDaemonGoesOnWhileATilesRequestIsPlanned() throws {
        try fx.start(["--max-tiles", "600000"]) // the count stops there: a few seconds in a debug build
        try fx.drop("a.json", ["id": "a", "tiles": [server.url("/ok/a/{z}/{x}/{y}.png")], "bounds": [-10, -10, 10, 10], "minZoom": 0, "maxZoom": 1])
        try fx.waitForState("a", "completed")
        let thin = thinRequest()
        try fx.drop("thin.json", thin)
        try waitUntil("the daemon is making the plan", timeout: 30) { fx.log().contains("making the plan of thin.json") }
        try fx.drop("b.json", ["id": "b", "tiles": [server.url("/ok/b/{z}/{x}/{y}.png")], "bounds": [-10, -10, 10, 10], "minZoom": 0, "maxZoom": 1])
        let (rc, out) = try fx.cli(["delete", "a", "--wait", "--timeout", "60", "--spool", fx.spool])
        XCTAssertEqual(rc, 0, out)
        XCTAssertNil(fx.status("a"))
        // With the plan made on the loop, the delete waited for it: thin was refused first.
        XCTAssertFalse(fx.log().contains("rejected thin.json"), "the delete was applied while the plan was made")
        try fx.waitForState("thin", "failed", timeout: 120)
        XCTAssertEqual(fx.errorCode("thin"), "tileLimitExceeded")
        XCTAssertTrue((fx.errorMessage("thin") ?? "").contains("at least 60000"), fx.errorMessage("thin") ?? "")
        XCTAssertTrue(fx.entryExists(fx.spool + "/rejected/thin.json"))
        // b, dropped while thin was planned, is taken once thin is decided, and downloaded.
        try fx.waitForState("b", "completed")
        let log = fx.log()
        let refused = try XCTUnwrap(log.range(of: "rejected thin.json")), accepted = try XCTUnwrap(log.range(of: "accepted b.json"))
        XCTAssertLessThan(refused.lowerBound, accepted.lowerBound)
        XCTAssertEqual(fx.status("b")?["state"] as? String, "completed")

        // SIGTERM while a plan is made: the daemon stops without deciding; the file stays.
        try fx.drop("thin2.json", thin)
        try waitUntil("the daemon is making the plan", timeout: 30) { fx.log().contains("making the plan of thin2.json") }
        XCTAssertEqual(fx.stop(), 0)
        XCTAssertFalse(fx.log().contains("rejected thin2.json"), "the daemon stopped before the plan was decided")
        XCTAssertTrue(fx.entryExists(fx.spool + "/requests/thin2.json"))
        XCTAssertNil(fx.status("thin2"))
        // The next start reads it again, and refuses it.
        try fx.start(["--max-tiles", "600000"])
        try fx.waitForState("thin2", "failed", timeout: 120)
        XCTAssertEqual(fx.errorCode("thin2"), "tileLimitExceeded")
        XCTAssertEqual(server.allHits().keys.filter { $0.hasPrefix("/ok/thin/") }, [], "no tile asked")
    }

    /// Shape requests dropped together are planned one at a time off the loop, each held file
    /// taken in turn: every one is taken once and completes, and none is left in requests/.
    func testManyShapeRequestsDroppedTogetherAreEachTakenOnce() throws {
        try fx.start()
        let n = 60
        for i in 0..<n {
            try fx.drop("g\(i).json", ["id": "g\(i)", "tiles": [server.url("/ok/g\(i)/{z}/{x}/{y}.png")], "minZoom": 0, "maxZoom": 1,
                                        "geometry": ["type": "Polygon", "coordinates": [[[10, 10], [11, 10], [11, 11], [10, 11], [10, 10]]]]])
        }
        try waitUntil("all \(n) complete", timeout: 120) { (0..<n).allSatisfy { fx.state("g\($0)") == "completed" } }
        for i in 0..<n {
            XCTAssertEqual(fx.eventStates("g\(i)"), ["queued", "downloading", "completed"], "g\(i)")
            XCTAssertEqual(fx.progress("g\(i)")["tilesCompleted"], 2, "g\(i): z0 and the one z1 tile the square meets")
        }
        XCTAssertEqual(fx.names(in: fx.spool + "/requests").filter { !$0.hasPrefix(".") }, [])
        XCTAssertEqual(fx.names(in: fx.spool + "/rejected"), [])
    }

    /// A region whose new request is being planned gets no scheduled refresh meanwhile: the
    /// request is decided against the state it was read in (attack round 51: a refresh begun
    /// during the plan refused it as `duplicateId`).
    func testNoRefreshBeginsForARegionWhoseNewRequestIsPlanned() throws {
        try fx.start(["--max-tiles", "2000000", "--refresh-interval", "1", "--rescan-interval", "0.1"])
        try fx.drop("d.json", ["id": "d", "tiles": [server.url("/ok/d/{z}/{x}/{y}.png")], "bounds": [-10, -10, 10, 10], "minZoom": 0, "maxZoom": 1])
        try fx.waitForState("d", "completed")
        var thin = thinRequest()
        thin["id"] = "d"
        thin["maxZoom"] = 20 // about 1.16 million tiles: taken, after a count of seconds
        try fx.drop("d2.json", thin)
        try waitUntil("the plan begins", timeout: 30) { fx.log().contains("making the plan of d2.json") }
        let begun = Date()
        try waitUntil("d2.json is decided", timeout: 120) { fx.log().contains("accepted d2.json") || fx.log().contains("rejected d2.json") }
        XCTAssertGreaterThan(Date().timeIntervalSince(begun), 1.5, "the refresh came due while the plan was made (else this checks nothing)")
        XCTAssertTrue(fx.log().contains("accepted d2.json"), String(fx.log().suffix(1500)))
        XCTAssertFalse(fx.log().contains("refresh due"), "no refresh began")
        let (rc, out) = try fx.cli(["delete", "d", "--wait", "--timeout", "60", "--spool", fx.spool])
        XCTAssertEqual(rc, 0, out)
    }

    /// A request file replaced while its plan is made is read again: the new request is the one
    /// taken, and the plan of the old one stops as the change is seen (contract.md, "What a
    /// tiles request downloads").
    func testARequestReplacedWhileItsPlanIsMadeIsReadAgain() throws {
        // Within the limit: the thin strip's whole count, about two minutes in a debug build.
        try fx.start(["--max-tiles", "100000000"])
        try fx.drop("r.json", thinRequest())
        try waitUntil("the daemon is making the plan", timeout: 30) { fx.log().contains("making the plan of r.json") }
        try fx.drop("r.json", ["id": "r", "tiles": [server.url("/ok/r/{z}/{x}/{y}.png")], "minZoom": 0, "maxZoom": 1,
                               "geometry": ["type": "Polygon", "coordinates": [[[10, 10], [11, 10], [11, 11], [10, 11], [10, 10]]]]])
        // The old version's plan stops as the change is seen: the new one is taken without it.
        try fx.waitForState("r", "completed", timeout: 60)
        XCTAssertTrue(fx.log().contains("r.json changed while its plan was made: read again"))
        XCTAssertEqual(fx.eventStates("r"), ["queued", "downloading", "completed"])
        XCTAssertEqual(fx.progress("r")["tilesCompleted"], 2)
        XCTAssertFalse(fx.entryExists(fx.spool + "/rejected/r.json"))
    }

    /// A thin strip 140 degrees tall, 1e-6 degrees wide, to z24 (about 18.5 million tiles): its
    /// count passes `--max-tiles 600000` after a few seconds in a debug build.
    func thinRequest() -> [String: Any] {
        ["tiles": [server.url("/ok/thin/{z}/{x}/{y}.png")], "minZoom": 0, "maxZoom": 24,
         "geometry": ["type": "Polygon", "coordinates": [[[10, -70], [10.000001, -70], [10.000001, 70], [10, 70], [10, -70]]]]]
    }

    /// Files held while a request is planned act in the order they came, not by mtime and name
    /// (attack round 50: `c.json` then `c.delete` in one clock tick, or a control file whose
    /// mtime is older, deleted nothing and left c downloading), a control file waiting for the
    /// held request of its id whatever that file is named; and a different request for a
    /// region under way is refused at once as `duplicateId`, not after its plan (by when the
    /// region may have completed, and lost its pack to it).
    func testHeldFilesActInTheOrderTheyCameAndADuplicateIsRefusedAtOnce() throws {
        try fx.start(["--max-tiles", "600000"])
        // A region under way: its one tile takes 30 s.
        try fx.drop("s.json", ["id": "s", "tiles": [server.url("/slow/30000/s/{z}/{x}/{y}.png")], "bounds": [-10, -10, 10, 10], "minZoom": 0, "maxZoom": 0])
        try fx.waitForState("s", "downloading")
        try fx.drop("s2.json", thinRequest().merging(["id": "s"]) { $1 })
        try waitUntil("s2.json is refused", timeout: 30) { fx.entryExists(fx.spool + "/rejected/s2.json.error") }
        let reason = try String(contentsOfFile: fx.spool + "/rejected/s2.json.error", encoding: .utf8)
        XCTAssertTrue(reason.hasPrefix("duplicateId: region 's' is downloading"), reason)
        XCTAssertFalse(fx.log().contains("making the plan of s2.json"), "refused without a plan")
        XCTAssertEqual(fx.state("s"), "downloading")

        try fx.drop("thin.json", thinRequest())
        try waitUntil("the daemon is making the plan", timeout: 30) { fx.log().contains("making the plan of thin.json") }
        try fx.drop("c.json", ["id": "c", "tiles": [server.url("/ok/c/{z}/{x}/{y}.png")], "bounds": [-10, -10, 10, 10], "minZoom": 0, "maxZoom": 1])
        // Dropped after c.json, with an mtime a minute older (a rescan takes the oldest first).
        let tmp = fx.spool + "/control/.c.tmp"
        XCTAssertTrue(FileManager.default.createFile(atPath: tmp, contents: Data()))
        try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-60)], ofItemAtPath: tmp)
        XCTAssertEqual(rename(tmp, fx.spool + "/control/c.delete"), 0)
        // A request file named otherwise than its id: a control file of that id waits for it too
        // (attack round 51: the pause acted first, and the request then undid it).
        try fx.drop("k2.json", ["id": "k", "tiles": [server.url("/ok/k/{z}/{x}/{y}.png")], "bounds": [-10, -10, 10, 10], "minZoom": 0, "maxZoom": 1])
        try fx.control("k", "pause")
        try fx.waitForState("thin", "failed", timeout: 120)
        try fx.waitForState("k", "pausedUser")
        XCTAssertEqual(fx.eventStates("k"), ["queued", "pausedUser"])
        XCTAssertFalse(fx.entryExists(fx.spool + "/rejected/k.pause"))
        try waitUntil("c is deleted", timeout: 30) { fx.eventStates("c").last == "deleted" }
        XCTAssertEqual(fx.eventStates("c"), ["queued", "deleted"], "taken, then deleted before it started")
        XCTAssertNil(fx.status("c"))
        XCTAssertFalse(fx.entryExists(fx.spool + "/rejected/c.delete"), "the delete came after c.json")
    }
}

/// `Planner.plan` with a cancelled `PlanCancellation` throws `PlanCancellation.error` instead
/// of counting on: before it begins, and while it counts a shape whose whole count would take
/// minutes here (a thin strip 140 degrees tall to z24, no tile limit given).
final class PlanCancellationTests: XCTestCase {
    func testACancelledPlanStops() throws {
        let style = try StyleDocument(data: Data(#"{"version": 8, "sources": {"r": {"type": "raster", "tileSize": 256, "tiles": ["http://h/{z}/{x}/{y}.png"]}}, "layers": []}"#.utf8), baseURL: "http://h/s.json")
        let request = try RequestValidator.validate(try JSONSerialization.data(withJSONObject: [
            "id": "c", "style": "http://h/s.json", "minZoom": 0, "maxZoom": 23,
            "geometry": ["type": "Polygon", "coordinates": [[[10, -70], [10.000001, -70], [10.000001, 70], [10, 70], [10, -70]]]]] as [String: Any]), fileName: "c.json")
        for cancelFirst in [true, false] {
            let cancel = PlanCancellation()
            if cancelFirst { cancel.cancel() } else { DispatchQueue.global().asyncAfter(deadline: .now() + 0.3) { cancel.cancel() } }
            XCTAssertThrowsError(try Planner.plan(request: request, styleURL: "http://h/s.json", style: style, tileJSONs: [:], cancel: cancel)) { e in
                XCTAssertEqual((e as? RegionError)?.message, PlanCancellation.error.message)
            }
        }
    }
}

/// Finding 3: a body stored as a gzip file (its server sent gzip bytes without Content-Encoding)
/// is inflated by the site and maplibre exports at most up to `--max-object-size` bytes, streamed
/// (memory does not grow with the inflated size); over the bound the export fails and leaves
/// nothing. mbtiles and pmtiles keep such a body as it is (their vector tiles are gzip) once it is
/// known to inflate within the bound.
final class ExportInflateBoundTests: FaultServerSpoolTestCase {
    /// A style of one vector source whose tiles are `/gzipped/KIB/v/{z}/{x}/{y}.pbf`, z0 to `maxZoom`.
    func completeGzipStyle(id: String, kib: Int, maxZoom: Int) throws {
        try server.register("\(id).json", json: #"{"version": 8, "sources": {"v": {"type": "vector", "maxzoom": \#(maxZoom), "tiles": ["__BASE__/gzipped/\#(kib)/\#(id)/{z}/{x}/{y}.pbf"]}}, "layers": []}"#)
        try fx.drop("\(id).json", ["id": id, "style": server.url("/json/\(id).json"), "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": maxZoom])
        try fx.waitForState(id, "completed")
        // Stored as received: gzip files of a few KiB, not the inflated bodies.
        let tiles = fx.manifest(id).filter { $0.kind == "tile" }
        XCTAssertFalse(tiles.isEmpty)
        for t in tiles { XCTAssertLessThan(t.bytes, kib * 1024 / 100, "\(t.key) is stored as received") }
    }

    func export(_ args: [String]) throws -> (Int32, String) {
        try fx.cli(["export"] + args + ["--spool", fx.spool, "--store", fx.store])
    }

    /// The body a user expects in a site tile or a MapLibre row: the inflated gzip file.
    func expected(_ id: String, _ kib: Int, _ z: Int, _ x: Int, _ y: Int) -> Data {
        FaultServer.gzippedBody("/gzipped/\(kib)/\(id)/\(z)/\(x)/\(y).pbf", kib: kib)
    }

    func testOverTheBoundTheSiteAndMapLibreExportsFail() throws {
        try fx.start()
        try completeGzipStyle(id: "g", kib: 2048, maxZoom: 1)
        for format in ["site", "maplibre"] {
            let output = fx.root.appendingPathComponent("g-\(format)").path
            let (rc, out) = try export(["g", "--format", format, "--output", output, "--max-object-size", "1048576"])
            XCTAssertEqual(rc, 1, out)
            XCTAssertTrue(out.contains("inflates to more than 1048576 bytes") && out.contains("--max-object-size"), out)
            XCTAssertFalse(fx.entryExists(output), "nothing at \(output)")
        }
        XCTAssertEqual(fx.names(in: fx.root.path).filter { $0.hasPrefix(".") }, [], "no work folder left")

        // Within the bound: the inflated bodies, byte for byte.
        let site = fx.root.appendingPathComponent("g-site").path
        var (rc, out) = try export(["g", "--format", "site", "--output", site])
        XCTAssertEqual(rc, 0, out)
        for (z, x, y) in [(0, 0, 0), (1, 0, 0), (1, 1, 1)] {
            XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: "\(site)/tiles/v/\(z)/\(x)/\(y).pbf")), expected("g", 2048, z, x, y), "\(z)/\(x)/\(y)")
        }
        let db = fx.root.appendingPathComponent("g.db").path
        (rc, out) = try export(["g", "--format", "maplibre", "--output", db])
        XCTAssertEqual(rc, 0, out)
        // MapLibre's rows: zlib (compressed = 1) of the inflated body, read back by Python's zlib.
        let (prc, pout) = try runTool("/usr/bin/python3", ["-c", """
            import sqlite3, zlib, hashlib, sys
            c = sqlite3.connect(sys.argv[1])
            for z, x, y, data, comp in c.execute("SELECT z, x, y, data, compressed FROM tiles ORDER BY z, x, y"):
                body = zlib.decompress(data) if comp else data
                print(z, x, y, comp, len(body), hashlib.sha256(body).hexdigest())
            """, db])
        XCTAssertEqual(prc, 0, pout)
        let rows = pout.split(separator: "\n")
        XCTAssertEqual(rows.count, 5, pout)
        for row in rows {
            let f = row.split(separator: " ").map(String.init)
            let body = expected("g", 2048, Int(f[0])!, Int(f[1])!, Int(f[2])!)
            XCTAssertEqual(f[3], "1", "compressed")
            XCTAssertEqual(Int(f[4]), body.count)
            XCTAssertEqual(f[5], sha256Hex(body))
        }

        // mbtiles and pmtiles keep the gzip files as they are, once they inflate within the bound.
        let mb = fx.root.appendingPathComponent("g.mbtiles").path
        (rc, out) = try export(["g", "--format", "mbtiles", "--output", mb, "--max-object-size", "1048576"])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("inflates to more than 1048576 bytes"), out)
        (rc, out) = try export(["g", "--format", "mbtiles", "--output", mb])
        XCTAssertEqual(rc, 0, out)
        let stored = try XCTUnwrap(fx.manifest("g").first { $0.key == "v/0/0/0" })
        XCTAssertEqual(try sqlite(mb, "SELECT hex(tile_data) FROM tiles WHERE zoom_level = 0"),
                       try XCTUnwrap(fx.objectData(stored.sha)).map { String(format: "%02X", $0) }.joined())
    }

    /// The exports a request names are bounded by the daemon's own `--max-object-size`.
    func testTheDaemonsExportsUseItsMaxObjectSize() throws {
        try fx.start(["--max-object-size", "1048576"])
        try fx.drop("d.json", server.tilesRequest(["/gzipped/2048/d/{z}/{x}/{y}.pbf"], id: "d", maxZoom: 1)
                        .merging(["exports": [["format": "site"], ["format": "pmtiles"]]]) { a, _ in a })
        try fx.waitForState("d", "completed")
        try waitUntil("both exports are done") {
            let e = fx.status("d")?["exports"] as? [[String: Any]] ?? []
            return e.count == 2 && e.allSatisfy { $0["state"] as? String == "failed" || $0["state"] as? String == "written" }
        }
        for e in try XCTUnwrap(fx.status("d")?["exports"] as? [[String: Any]]) {
            XCTAssertEqual(e["state"] as? String, "failed", "\(e)")
            XCTAssertTrue(((e["error"] as? [String: Any])?["message"] as? String ?? "").contains("inflates to more than 1048576 bytes"), "\(e)")
        }
        XCTAssertEqual(fx.names(in: fx.spool + "/exports"), [], "nothing written, no work folder left")
        XCTAssertEqual(fx.state("d"), "completed")
    }

    /// One tile whose gzip file inflates to 96 MiB: the site and maplibre exports write it with
    /// their peak memory (as /usr/bin/time reports it) far below the inflated size.
    func testInflatingIsStreamed() throws {
        try fx.start()
        let kib = 96 * 1024
        try completeGzipStyle(id: "big", kib: kib, maxZoom: 0)
        for format in ["site", "maplibre"] {
            let output = fx.root.appendingPathComponent("big-\(format)").path
            let (rc, out) = try runTool("/usr/bin/time", ["-f", "maxrss=%M", SpoolFixture.binary, "export", "big", "--format", format,
                                                          "--output", output, "--max-object-size", String(128 << 20),
                                                          "--spool", fx.spool, "--store", fx.store])
            XCTAssertEqual(rc, 0, out)
            let kb = try XCTUnwrap(out.split(separator: "\n").last { $0.hasPrefix("maxrss=") }.flatMap { Int($0.dropFirst(7)) }, out)
            XCTAssertLessThan(kb, 64 * 1024, "\(format): peak RSS \(kb) KiB for a body that inflates to \(kib) KiB")
            if format == "site" {
                XCTAssertEqual(Files_size(output + "/tiles/v/0/0/0.pbf"), kib * 1024)
                XCTAssertEqual(sha256sum([output + "/tiles/v/0/0/0.pbf"]).values.first, sha256Hex(expected("big", kib, 0, 0, 0)))
            } else {
                XCTAssertEqual(try sqlite(output, "SELECT compressed FROM tiles"), "1")
            }
        }
    }
}

/// Finding 5: the metadata of mbtiles and pmtiles exports (from the TileJSON: name, attribution,
/// description, vector_layers) has every credential redacted, as the site export's style and
/// TileJSON do; the maplibre export keeps the URLs MapLibre looks resources up by, and only those.
final class ExportMetadataRedactionTests: FaultServerSpoolTestCase {
    static let secrets = ["TOKA1", "KEYB2", "SIGC3", "TOKD4", "PWE5"]

    func testTileJSONMetadataIsRedactedInMBTilesAndPMTiles() throws {
        try ExportTools.require([ExportTools.python])
        // A TileJSON whose free-text fields carry credentials, the way real ones quote their own URLs.
        try server.register("tj.json", json: """
            {"tilejson": "3.0.0", "name": "Keyed ?access_token=TOKA1", "tiles": ["__BASE__/ok/k/{z}/{x}/{y}.pbf?api_key=KEYB2"],
             "minzoom": 0, "maxzoom": 1,
             "attribution": "<a href=\\"https://maps.example.org/copyright?signature=SIGC3&x=1\\">© Example</a>",
             "description": "served from https://u:PWE5@tiles.example.org/v1?access_token=TOKD4",
             "vector_layers": [{"id": "roads", "fields": {}, "description": "see https://h/x?api_key=KEYB2"}]}
            """)
        try server.register("st.json", json: #"{"version": 8, "sources": {"k": {"type": "vector", "url": "__BASE__/json/tj.json?access_token=TOKA1"}}, "layers": []}"#)
        try fx.start()
        try fx.drop("k.json", ["id": "k", "style": server.url("/json/st.json?access_token=TOKA1"), "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 1])
        try fx.waitForState("k", "completed")
        let mb = fx.root.appendingPathComponent("k.mbtiles").path
        let pm = fx.root.appendingPathComponent("k.pmtiles").path
        for (format, path) in [("mbtiles", mb), ("pmtiles", pm)] {
            let (rc, out) = try fx.cli(["export", "k", "--format", format, "--output", path, "--spool", fx.spool, "--store", fx.store])
            XCTAssertEqual(rc, 0, out)
        }
        // What a reader of each format shows: sqlite3 for MBTiles, the pmtiles reader's metadata.
        let mbMeta = try sqlite(mb, "SELECT name || '=' || value FROM metadata")
        let (prc, pmMeta) = try runTool(ExportTools.python, ["-c", """
            import sys, json
            from pmtiles.reader import Reader, MmapSource
            with open(sys.argv[1], "rb") as f:
                print(json.dumps(Reader(MmapSource(f)).metadata(), ensure_ascii=False))
            """, pm])
        XCTAssertEqual(prc, 0, pmMeta)
        for (what, text) in [("mbtiles", mbMeta), ("pmtiles", pmMeta)] {
            for s in ExportMetadataRedactionTests.secrets { XCTAssertFalse(text.contains(s), "\(what) metadata keeps \(s): \(text)") }
            XCTAssertTrue(text.contains("REDACTED"), "\(what): \(text)")
            XCTAssertTrue(text.contains("© Example") && text.contains("roads"), "\(what): the metadata is still there: \(text)")
        }
        // Whole files: no secret anywhere in either (tiles are ours, gzip; metadata redacted).
        for path in [mb, pm] {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: path))
            for s in ExportMetadataRedactionTests.secrets { XCTAssertNil(bytes.range(of: Data(s.utf8)), "\(path) holds \(s)") }
        }

        // maplibre keeps the URLs MapLibre looks resources up by (its cache keys) and the
        // documents as served, whose URLs lead to the next keys; nothing else.
        let db = fx.root.appendingPathComponent("k.db").path
        let (rc, out) = try fx.cli(["export", "k", "--format", "maplibre", "--output", db, "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertEqual(try sqlite(db, "SELECT url FROM resources WHERE kind = 1"), server.url("/json/st.json?access_token=TOKA1"))
        XCTAssertEqual(try sqlite(db, "SELECT DISTINCT url_template FROM tiles"), server.url("/ok/k/{z}/{x}/{y}.pbf?api_key=KEYB2"))
        XCTAssertTrue(try sqlite(db, "SELECT definition FROM regions").contains("access_token=TOKA1"))
    }
}

/// Finding 8: manifest keys are escaped injectively (`%` too), so two sources never share keys;
/// keys of ordinary names are what they were.
final class ManifestKeyTests: XCTestCase {
    func testKeyEscapingIsInjectiveAndKeepsOrdinaryKeys() {
        XCTAssertEqual(ManifestLine.sanitizeKey("a\tb"), "a%09b")
        XCTAssertEqual(ManifestLine.sanitizeKey("a%09b"), "a%2509b")
        XCTAssertEqual(ManifestLine.sanitizeKey("100% Sans\r\n"), "100%25 Sans%0D%0A")
        for plain in ["openmaptiles", "KlokanTech Noto Sans Regular,Arial Unicode MS Regular/0-255", "sprite@2x.png", "icons:sprite.json", "tiles0"] {
            XCTAssertEqual(ManifestLine.sanitizeKey(plain), plain)
        }
        // Distinct names, distinct keys, over names built from the characters that are escaped.
        let alphabet = ["a", "%", "0", "9", "\t", "2", "5", "D", "\r", "\n"]
        var seen: [String: String] = [:]
        for a in alphabet { for b in alphabet { for c in alphabet {
            let name = a + b + c
            let key = ManifestLine.sanitizeKey(name)
            if let other = seen[key] { XCTFail("\(name.debugDescription) and \(other.debugDescription) share key \(key)") }
            seen[key] = name
            XCTAssertFalse(key.contains("\t") || key.contains("\n") || key.contains("\r"))
            XCTAssertEqual(ManifestLine.unescapeKey(key), name)
        } } }
    }
}

/// Finding 8 through the binary: sources `a<TAB>b` and `a%09b` of one style keep their own tiles,
/// and `export --source` (the name as the manifest writes it) exports the one named.
final class ManifestKeyCollisionTests: FaultServerSpoolTestCase {
    func testSourcesWhoseNamesOnceCollidedKeepTheirOwnTiles() throws {
        try server.register("clash.json", json: """
            {"version": 8, "sources": {
              "a\\tb": {"type": "raster", "tileSize": 512, "maxzoom": 0, "tiles": ["__BASE__/ok/tab/{z}/{x}/{y}.png"]},
              "a%09b": {"type": "raster", "tileSize": 512, "maxzoom": 0, "tiles": ["__BASE__/ok/pct/{z}/{x}/{y}.png"]}},
             "layers": []}
            """)
        try fx.start()
        try fx.drop("clash.json", ["id": "clash", "style": server.url("/json/clash.json"), "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 0])
        try fx.waitForState("clash", "completed")
        let tiles = fx.manifest("clash").filter { $0.kind == "tile" }
        XCTAssertEqual(Set(tiles.map(\.key)), ["a%09b/0/0/0", "a%2509b/0/0/0"], "\(tiles.map(\.key))")
        XCTAssertEqual(tiles.count, 2)
        for (source, path) in [("a%09b", "/ok/tab/0/0/0.png"), ("a%2509b", "/ok/pct/0/0/0.png")] {
            let output = fx.root.appendingPathComponent("\(source).mbtiles").path
            let (rc, out) = try fx.cli(["export", "clash", "--format", "mbtiles", "--source", source, "--output", output,
                                        "--spool", fx.spool, "--store", fx.store])
            XCTAssertEqual(rc, 0, out)
            XCTAssertEqual(try sqlite(output, "SELECT count(*) FROM tiles"), "1")
            XCTAssertEqual(try sqlite(output, "SELECT hex(tile_data) FROM tiles"),
                           FaultServer.okBody(path).map { String(format: "%02X", $0) }.joined(), source)
        }
        // A site: each of the style's sources points at its own TileJSON and tiles, as a web
        // server (nginx) serves them to a client following the style's URLs.
        let site = fx.root.appendingPathComponent("clash-site").path
        let (rc, out) = try fx.cli(["export", "clash", "--format", "site", "--output", site, "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        let web = try NginxServer(root: URL(fileURLWithPath: site))
        defer { web.stop() }
        let style = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: site + "/style.json"))) as? [String: Any])
        let sources = try XCTUnwrap(style["sources"] as? [String: [String: Any]])
        for (name, path) in [("a\tb", "/ok/tab/0/0/0.png"), ("a%09b", "/ok/pct/0/0/0.png")] {
            let tjURL = try XCTUnwrap(sources[name]?["url"] as? String, "\(sources)")
            XCTAssertFalse(tjURL.hasPrefix("http"), tjURL)
            let (trc, tj) = try runTool("/usr/bin/curl", ["-sf", web.baseURL + "/" + tjURL])
            XCTAssertEqual(trc, 0, "\(name): \(tjURL) is not served")
            let template = try XCTUnwrap(((try? JSONSerialization.jsonObject(with: Data(tj.utf8))) as? [String: Any])?["tiles"] as? [String]).first ?? ""
            let tileURL = web.baseURL + "/" + template.replacingOccurrences(of: "{z}/{x}/{y}", with: "0/0/0")
            let got = fx.root.appendingPathComponent("got.png").path
            let (crc, _) = try runTool("/usr/bin/curl", ["-sf", "-o", got, tileURL])
            XCTAssertEqual(crc, 0, "\(name): \(tileURL)")
            XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: got)), FaultServer.okBody(path), name)
        }
    }
}

/// Finding 9: a symlink at `<store>/regions/<id>` is never followed: at a start the region is
/// skipped with a log line, a request for that id is refused, and nothing is written into (or
/// removed from) the folder the link points to.
final class RegionFolderSymlinkTests: FaultServerSpoolTestCase {
    func testASymlinkedRegionFolderIsRefusedNotWrittenThrough() throws {
        try fx.start()
        try fx.drop("good.json", server.tilesRequest(["/ok/g/{z}/{x}/{y}.png"], id: "good"))
        try fx.waitForState("good", "completed")
        XCTAssertEqual(fx.stop(), 0)
        let outside = fx.root.appendingPathComponent("elsewhere").path
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        let request = try Data(contentsOf: URL(fileURLWithPath: fx.store + "/regions/good/request.json"))
        let evilRequest = try XCTUnwrap(String(data: request, encoding: .utf8)).replacingOccurrences(of: "\"good\"", with: "\"evil\"")
        try Data(evilRequest.utf8).write(to: URL(fileURLWithPath: outside + "/request.json"))
        try Data("precious\n".utf8).write(to: URL(fileURLWithPath: outside + "/manifest.tsv"))
        XCTAssertEqual(symlink(outside, fx.store + "/regions/evil"), 0)

        try fx.start()
        try waitUntil("the daemon refuses (or loads) the symlinked region") {
            fx.log().contains("store/regions/evil is not a folder TileSpool made") || fx.state("evil") != nil
        }
        XCTAssertTrue(fx.log().contains("store/regions/evil is not a folder TileSpool made"), fx.log())
        XCTAssertNil(fx.state("evil"))
        // A request for the id is refused too: the folder cannot be made by descriptor.
        try fx.drop("evil.json", server.tilesRequest(["/ok/e/{z}/{x}/{y}.png"], id: "evil"))
        try fx.waitForState("evil", "failed")
        XCTAssertEqual(fx.errorCode("evil"), "storageError")
        XCTAssertEqual(server.hits("/ok/e/0/0/0.png"), 0)
        // The good region still works beside it.
        XCTAssertEqual(fx.state("good"), "completed")
        XCTAssertEqual(fx.stop(), 0)
        XCTAssertEqual(Set(fx.names(in: outside)), ["request.json", "manifest.tsv"])
        XCTAssertEqual(try String(contentsOfFile: outside + "/manifest.tsv", encoding: .utf8), "precious\n")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: outside + "/request.json")), Data(evilRequest.utf8))
        var st = stat()
        XCTAssertEqual(lstat(fx.store + "/regions/evil", &st), 0)
        XCTAssertEqual(st.st_mode & S_IFMT, S_IFLNK, "the planted link is left as it was")
        // gc cannot read that region: it removes nothing rather than guess.
        let (rc, out) = try fx.cli(["gc", "--grace", "0", "--spool", fx.spool, "--store", fx.store])
        XCTAssertNotEqual(rc, 0, out)
        XCTAssertTrue(out.contains("regions/evil"), out)
        fx.assertStoreMatchesManifest("good")
    }
}

/// Finding 10: a daemon start removes only the export work folders whose process is gone, by the
/// rule the CLI's own cleanup uses (`Exporter.isAbandonedWorkFolder`): a running CLI export's
/// folder stays, and so does anything not named like a work folder.
final class ExportWorkFolderTests: FaultServerSpoolTestCase {
    func testWorkFolderNames() {
        XCTAssertEqual(Exporter.workFolderOwner(".x.mbtiles.tmp-123-4"), 123)
        XCTAssertEqual(Exporter.workFolderOwner(".a.tmp-b.pmtiles.tmp-5-6"), 5)
        for name in ["x.tmp-1-2", ".x.tmp-1", ".x.tmp--1-2", ".x.tmp-1-", ".tmp-1-2", ".x.tmp-1-2-3", ".x.tmp-a-2", ".notes"] {
            XCTAssertNil(Exporter.workFolderOwner(name), name)
        }
        XCTAssertFalse(Exporter.isAbandonedWorkFolder(".x.mbtiles.tmp-\(getpid())-1"))
    }

    func testADaemonStartKeepsALiveExportsWorkFolder() throws {
        // A process that has exited (reaped): its pid names no process.
        let gone = Process()
        gone.executableURL = URL(fileURLWithPath: "/bin/true")
        try gone.run()
        gone.waitUntilExit()
        let deadPID = gone.processIdentifier
        XCTAssertTrue(kill(deadPID, 0) != 0 && errno == ESRCH)
        let exports = fx.spool + "/exports"
        try FileManager.default.createDirectory(atPath: exports, withIntermediateDirectories: true)
        // This test process stands for a CLI export running beside the daemon.
        let live = ".x.mbtiles.tmp-\(getpid())-1", dead = ".y.mbtiles.tmp-\(deadPID)-1", other = ".notes.tmp-mine"
        for name in [live, dead, other] {
            try FileManager.default.createDirectory(atPath: exports + "/" + name, withIntermediateDirectories: false)
            try Data("x".utf8).write(to: URL(fileURLWithPath: exports + "/" + name + "/out"))
        }
        try fx.start() // returns once the daemon logs "watching", after its start-up cleanup
        XCTAssertEqual(Set(fx.names(in: exports)), [live, other])
        XCTAssertEqual(fx.names(in: exports + "/" + live), ["out"])
        XCTAssertEqual(fx.stop(), 0)
    }
}

/// Finding 11: "not inside the spool or store" goes by device and inode, so a bind mount of the
/// spool is the spool; and the CLI refuses `<spool>/exports` when it is a symlink, as the daemon does.
final class ExportEscapeTests: FaultServerSpoolTestCase {
    func testABindMountOfTheSpoolIsTheSpool() throws {
        try fx.start()
        try fx.drop("bm.json", server.tilesRequest(["/ok/bm/{z}/{x}/{y}.png"], id: "bm"))
        try fx.waitForState("bm", "completed")
        XCTAssertEqual(fx.stop(), 0)
        let bm = fx.root.appendingPathComponent("bm").path
        try FileManager.default.createDirectory(atPath: bm, withIntermediateDirectories: true)
        // The bind mount lives in a mount namespace of its own, gone with the command.
        let script = #"mount --bind "$1" "$2" || exit 77; shift 2; exec "$@""#
        let (rc, out) = try runTool("/usr/bin/unshare", ["-m", "--propagation", "private", "/bin/sh", "-c", script, "sh", fx.spool, bm,
                                                         SpoolFixture.binary, "export", "bm", "--format", "pmtiles", "--output", bm + "/status/x.pmtiles",
                                                         "--spool", fx.spool, "--store", fx.store])
        if rc == 77 || out.contains("unshare failed") || out.contains("Operation not permitted") { throw XCTSkip("no bind mount here: \(out)") }
        XCTAssertNotEqual(rc, 0, out)
        XCTAssertTrue(out.contains("lies inside"), out)
        XCTAssertFalse(FileManager.default.fileExists(atPath: fx.spool + "/status/x.pmtiles"))
        // Through the store's parent too: the output may not contain the store.
        let (rc2, out2) = try runTool("/usr/bin/unshare", ["-m", "--propagation", "private", "/bin/sh", "-c", script, "sh", fx.store, bm,
                                                           SpoolFixture.binary, "export", "bm", "--format", "pmtiles", "--output", bm + "/regions/bm/x.pmtiles",
                                                           "--spool", fx.spool, "--store", fx.store])
        XCTAssertNotEqual(rc2, 0, out2)
        XCTAssertTrue(out2.contains("lies inside"), out2)
        XCTAssertFalse(FileManager.default.fileExists(atPath: fx.store + "/regions/bm/x.pmtiles"))
    }

    func testTheCLIRefusesASymlinkedExportsFolder() throws {
        try fx.start()
        try fx.drop("sl.json", server.tilesRequest(["/ok/sl/{z}/{x}/{y}.png"], id: "sl"))
        try fx.waitForState("sl", "completed")
        XCTAssertEqual(fx.stop(), 0)
        let outside = fx.root.appendingPathComponent("outside").path
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        let exports = fx.spool + "/exports"
        if FileManager.default.fileExists(atPath: exports) { XCTAssertEqual(rename(exports, exports + ".real"), 0) }
        XCTAssertEqual(symlink(outside, exports), 0)
        for args in [[String](), ["--output", exports + "/sl.mbtiles"]] {
            let (rc, out) = try fx.cli(["export", "sl", "--format", "mbtiles", "--spool", fx.spool, "--store", fx.store] + args)
            XCTAssertNotEqual(rc, 0, out)
            XCTAssertTrue(out.contains("a symlink there is never followed"), out)
        }
        XCTAssertEqual(fx.names(in: outside), [])
        // An output elsewhere is not concerned.
        let elsewhere = fx.root.appendingPathComponent("sl.mbtiles").path
        let (rc, out) = try fx.cli(["export", "sl", "--format", "mbtiles", "--output", elsewhere, "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
    }
}

/// Region files are named by descriptor (`/proc/self/fd/<fd>/...`); a message about one shows
/// the region's folder instead, which is what a reader can look at.
final class RegionFilesMessageTests: XCTestCase {
    func testMessagesNameTheRegionFolderNotADescriptor() throws {
        let root = try TestScratch.folder("regionfiles-msg").path
        try FileManager.default.createDirectory(atPath: root + "/regions/r1", withIntermediateDirectories: true)
        let files = RegionFiles(dir: root + "/regions/r1")
        XCTAssertTrue(files.manifestPath.hasPrefix("/proc/self/fd/"), files.manifestPath)
        try files.beginRefresh(scope: .all)
        let refreshManifest = files.refreshFiles.manifestPath
        XCTAssertTrue(refreshManifest.hasPrefix("/proc/self/fd/"), refreshManifest)
        let store: any RegionStorage = files
        XCTAssertEqual(store.shown("write \(files.manifestPath): ENOSPC (No space left on device)"),
                       "write \(root)/regions/r1/manifest.tsv: ENOSPC (No space left on device)")
        XCTAssertEqual(store.shown("fdatasync \(refreshManifest): EIO"), "fdatasync \(root)/regions/r1/refresh/manifest.tsv: EIO")
        XCTAssertEqual(store.shown("open /proc/self/fd/999999/x: ENOENT"), "open /proc/self/fd/999999/x: ENOENT")
    }
}
