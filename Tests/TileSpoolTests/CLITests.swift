import Foundation
import XCTest

/// The command line as a shell script uses it: status text and JSON, control commands, plan,
/// --help, and options before or after arguments.
final class CLITests: FaultServerSpoolTestCase {
    func testControlAndStatusWithOptionsOnEitherSideOfTheID() throws {
        try fx.start()
        try fx.drop("c.json", server.tilesRequest(["/slow/30/cli/{z}/{x}/{y}.png"], id: "c", maxZoom: 4))
        try fx.waitForState("c", "downloading")
        // Options after the ID.
        var (rc, out) = try fx.cli(["pause", "c", "--spool", fx.spool])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.contains("pause requested for c"), out)
        try fx.waitForState("c", "pausedUser")
        XCTAssertFalse(FileManager.default.fileExists(atPath: fx.spool + "/control/c.pause"))
        // Options before the ID; the text shows state, bar, counts.
        (rc, out) = try fx.cli(["status", "--spool", fx.spool, "c"])
        XCTAssertEqual(rc, 0, out)
        let done = fx.progress("c")["resourcesCompleted"] ?? -1
        XCTAssertTrue(out.hasPrefix("c  pausedUser  ["), out)
        XCTAssertTrue(out.contains("resources \(done)/341"), out)
        XCTAssertTrue(out.contains("tiles \(done)/341"), out)
        // --name=value form.
        (rc, out) = try fx.cli(["resume", "--spool=\(fx.spool)", "c"])
        XCTAssertEqual(rc, 0, out)
        try fx.waitForState("c", "completed")
        (rc, out) = try fx.cli(["status", "c", "--json", "--spool", fx.spool])
        XCTAssertEqual(rc, 0, out)
        let o = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: Any])
        XCTAssertEqual(o["state"] as? String, "completed")
        XCTAssertEqual((o["progress"] as? [String: Any])?["tilesCompleted"] as? Int, 341)
        // Every region, as a JSON array.
        (rc, out) = try fx.cli(["status", "--json", "--spool", fx.spool])
        XCTAssertEqual((try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [Any])?.count, 1)
        // An unknown id: exit 1.
        (rc, out) = try fx.cli(["status", "nobody", "--spool", fx.spool])
        XCTAssertEqual(rc, 1, out)
    }

    func testEveryCommandExplainsItselfAndRefusesUnknownOptions() throws {
        for command in ["run", "status", "pause", "resume", "cancel", "delete", "gc", "verify", "plan"] {
            let (rc, out) = try fx.cli([command, "--help"])
            XCTAssertEqual(rc, 0, out)
            XCTAssertTrue(out.hasPrefix("usage: tilespool \(command)"), out)
            XCTAssertTrue(out.contains("--spool"), "\(command) --help names --spool")
            let (rc2, out2) = try fx.cli([command, "--no-such-option"])
            XCTAssertEqual(rc2, 2, out2)
            XCTAssertTrue(out2.contains("unknown option --no-such-option"), out2)
        }
        let (rc, out) = try fx.cli(["--help"])
        XCTAssertEqual(rc, 0)
        for command in ["run", "status", "gc", "verify", "plan"] { XCTAssertTrue(out.contains("  \(command)"), command) }
        XCTAssertEqual(try fx.cli(["frobnicate"]).0, 2)
    }
}

/// `tilespool plan`: exact counts from the style and TileJSON alone, nothing written.
final class PlanCommandTests: XCTestCase {
    /// plan refuses what the daemon refuses, with the same code: a policy host (lifted by
    /// --allow-host) and a plan over maxTiles or --max-tiles (printed, then refused).
    func testPlanRefusesWhatTheDaemonRefuses() throws {
        let fx = try SpoolFixture()
        let file = fx.root.appendingPathComponent("osm.json")
        func write(_ o: [String: Any]) throws { try JSONSerialization.data(withJSONObject: o).write(to: file) }
        try write(["tiles": ["https://{s}.tile.openstreetmap.org/{z}/{x}/{y}.png"], "bounds": [7.4, 43.7, 7.5, 43.8], "minZoom": 0, "maxZoom": 3])
        var (rc, out) = try fx.cli(["plan", file.path])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("policyRefused") && out.contains("https://operations.osmfoundation.org/policies/tiles/"), out)
        (rc, out) = try fx.cli(["plan", file.path, "--allow-host", "a.tile.openstreetmap.org"])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.contains("plan for osm: 4 resources, 4 tiles"), out)
        try write(["tiles": ["https://tiles.example.org/{z}/{x}/{y}.png"], "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 3, "maxTiles": 50])
        (rc, out) = try fx.cli(["plan", file.path])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("plan for osm: 85 resources, 85 tiles") && out.contains("tileLimitExceeded") && out.contains("maxTiles (50)"), out)
        (rc, out) = try fx.cli(["plan", "--max-tiles", "20", file.path, "--json"])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("--max-tiles (20)"), out)
    }

    func testPlanOfBrightOverMonacoFetchesOnlyTheStyleAndTileJSON() throws {
        let nginx = try NginxServer(root: try MapData.require())
        defer { nginx.stop() }
        let fx = try SpoolFixture()
        let request = fx.root.appendingPathComponent("monaco.json")
        try JSONSerialization.data(withJSONObject: ["style": nginx.baseURL + "/styles/bright/style.local-template.json",
                                                    "bounds": [7.409205, 43.72335, 7.448637, 43.75169], "minZoom": 0, "maxZoom": 14])
            .write(to: request)
        var (rc, out) = try fx.cli(["plan", request.path, "--json"])
        XCTAssertEqual(rc, 0, out)
        let o = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: Any])
        XCTAssertEqual(o["resources"] as? Int, 419)
        XCTAssertEqual(o["tiles"] as? Int, 23)
        XCTAssertEqual((o["byKind"] as? [String: Int])?["glyphs"], 390)
        let zooms = ((o["bySource"] as? [String: Any])?["openmaptiles"] as? [String: Any])?["byZoom"] as? [String: Int]
        XCTAssertEqual(zooms?["14"], 6)
        XCTAssertEqual(zooms?["13"], 4)
        (rc, out) = try fx.cli(["--spool", fx.spool, "plan", request.path])
        XCTAssertEqual(rc, 2, "a command comes first: \(out)")
        (rc, out) = try fx.cli(["plan", "--spool", fx.spool, request.path])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.contains("plan for monaco: 419 resources, 23 tiles"), out)
        XCTAssertTrue(out.contains("    z14: 6"), out)
        try waitUntil("access log", timeout: 10) { nginx.accessLog().count >= 4 }
        XCTAssertEqual(Set(nginx.accessLog().map(\.path)), ["/styles/bright/style.local-template.json", "/tiles/monaco.tilejson.json"])
        XCTAssertFalse(FileManager.default.fileExists(atPath: fx.store), "plan writes nothing")
    }
}

/// Issue 29: errors read as `tilespool: CODE: message` and transfer failures as words, never as
/// Swift's dump of a value (`RegionError(code: ...)`, `network("...")`).
final class CLIErrorTextTests: FaultServerSpoolTestCase {
    func testPlanPrintsCodeAndMessageNotASwiftDump() throws {
        try server.register("plan-bad-style", json: #"{"version": 8, "sources": 3, "layers": []}"#)
        let file = fx.root.appendingPathComponent("bad.json")
        try JSONSerialization.data(withJSONObject: ["style": server.url("/json/plan-bad-style"), "bounds": [0, 0, 1, 1], "minZoom": 0, "maxZoom": 1])
            .write(to: file)
        var (rc, out) = try fx.cli(["plan", file.path])
        XCTAssertEqual(rc, 1, out)
        XCTAssertEqual(out, "tilespool: invalidStyle: style: 'sources' must be an object\n")
        // A server that cannot be reached (nothing listens on port 9 of loopback).
        try JSONSerialization.data(withJSONObject: ["style": "http://127.0.0.1:9/style.json", "bounds": [0, 0, 1, 1], "minZoom": 0, "maxZoom": 1])
            .write(to: file)
        (rc, out) = try fx.cli(["plan", file.path])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.hasPrefix("tilespool: cannot fetch http://127.0.0.1:9/style.json: network error: "), out)
        XCTAssertFalse(out.contains("network(") || out.contains("\\'"), out)
    }
}
