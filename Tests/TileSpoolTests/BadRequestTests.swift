import Foundation
import Glibc
import XCTest

/// Issue 4, "Bad requests": hostile request files dropped into the `requests/` folder of one
/// running daemon. Each case must end as state `failed` with the right `error.code` and a message
/// naming the field in `status/<id>.json` (or `rejected/<name>.error` when no id can be derived);
/// the file leaves `requests/` for `rejected/`; and after every case a good request still completes
/// (checked in `tearDown`), so by the end one daemon has survived all of them.
final class BadRequestTests: XCTestCase {
    // One daemon and one fault server for the whole class: the point is that the same daemon goes on.
    nonisolated(unsafe) static var sharedServer: FaultServer?
    nonisolated(unsafe) static var sharedSpool: SpoolFixture?
    var server: FaultServer { Self.sharedServer! }
    var fx: SpoolFixture { Self.sharedSpool! }

    override func setUpWithError() throws {
        if Self.sharedServer == nil {
            let server = try FaultServer()
            server.keepAcrossTests()
            Self.sharedServer = server
        }
        if let f = Self.sharedSpool, !(f.daemon?.isRunning ?? false) {
            XCTFail("the shared daemon died in an earlier test: \(f.log().suffix(3000))")
            Self.sharedSpool = nil
        }
        if Self.sharedSpool == nil {
            let f = try SpoolFixture()
            // Short sync interval: a good request completes in a fraction of a second.
            try f.start(["--max-retries", "2", "--sync-interval", "0.1"])
            f.keepAcrossTests()
            Self.sharedSpool = f
        }
    }

    /// After every case the daemon still runs and a good request still completes.
    override func tearDownWithError() throws {
        guard let f = Self.sharedSpool else { return }
        try assertDaemonGoesOn(f)
    }

    override class func tearDown() {
        sharedSpool?.stop()
        sharedSpool = nil
        sharedServer?.stop()
        sharedServer = nil
        super.tearDown()
    }

    func assertDaemonGoesOn(_ f: SpoolFixture, file: StaticString = #filePath, line: UInt = #line) throws {
        XCTAssertTrue(f.daemon?.isRunning ?? true, "daemon exited: \(f.log().suffix(3000))", file: file, line: line)
        let id = "good-" + UUID().uuidString.prefix(8).lowercased()
        try f.drop("\(id).json", server.tilesRequest(["/ok/\(id)/{z}/{x}/{y}.png"]))
        try f.waitForState(id, "completed", timeout: 20)
        XCTAssertEqual(f.manifest(id).map(\.sha), [sha256Hex(FaultServer.okBody("/ok/\(id)/0/0/0.png"))], file: file, line: line)
        f.assertStoreMatchesManifest(id, file: file, line: line)
    }

    // MARK: - Helpers

    /// A valid request for `id` (1 tile, never actually fetched by the bad cases) to be spoiled one field at a time.
    func base(_ id: String? = nil) -> [String: Any] {
        var o: [String: Any] = ["tiles": [server.url("/ok/base/{z}/{x}/{y}.png")], "bounds": [-10, -10, 10, 10],
                                "minZoom": 0, "maxZoom": 1]
        if let id { o["id"] = id }
        return o
    }

    /// `base()` with `changes` applied (NSNull removes a field).
    func spoiled(_ changes: [String: Any]) -> Data {
        var o = base()
        for (k, v) in changes { if v is NSNull { o.removeValue(forKey: k) } else { o[k] = v } }
        return jsonData(o)
    }

    /// One bad request file: its name, its bytes, the id its status must be written under, the
    /// expected `error.code`, and words its message must contain (the field it names).
    struct Case {
        var name: String
        var data: Data
        var id: String
        var code = "invalidRequest"
        var mentions: [String]
    }

    /// Drops every case at once, then checks each by name: `failed` with the code and a message
    /// naming the field in `status/<id>.json` and `events.jsonl`; the file moved to `rejected/`
    /// beside a `.error` file; the region never queued.
    func expectFailed(_ cases: [Case], file: StaticString = #filePath, line: UInt = #line) throws {
        for c in cases { try fx.dropRaw(c.name, c.data) }
        for c in cases {
            try waitUntil("\(c.name) moves to rejected/", timeout: 10, file: file, line: line) {
                !fx.inRequests(c.name) && fx.inRejected(c.name) && fx.rejectionText(c.name) != nil
            }
            XCTAssertEqual(fx.state(c.id), "failed", "case \(c.name)", file: file, line: line)
            let err = fx.errorObject(c.id)
            XCTAssertEqual(err?["code"] as? String, c.code, "case \(c.name): \(String(describing: err))", file: file, line: line)
            let message = err?["message"] as? String ?? ""
            for m in c.mentions {
                XCTAssertTrue(message.contains(m), "case \(c.name): message '\(message)' should name '\(m)'", file: file, line: line)
            }
            let failedEvent = fx.events(c.id).last { ($0["state"] as? String) == "failed" }
            XCTAssertEqual((failedEvent?["error"] as? [String: Any])?["code"] as? String, c.code, "case \(c.name): events.jsonl", file: file, line: line)
            XCTAssertFalse(fx.eventStates(c.id).contains("queued"), "case \(c.name): a bad request is never queued", file: file, line: line)
            XCTAssertTrue(fx.rejectionText(c.name)?.contains(c.code) ?? false, "case \(c.name): rejected/.error names the code", file: file, line: line)
        }
    }

    /// Drops a file whose name gives no id and whose content gives none either: it must land in
    /// `rejected/<name>` beside `rejected/<name>.error` that names the code and `mentions`.
    func expectRejectedWithoutID(_ name: String, _ data: Data, code: String = "invalidRequest", mentions: [String],
                                 file: StaticString = #filePath, line: UInt = #line) throws {
        let before = Set(fx.names(in: fx.spool + "/status"))
        try fx.dropRaw(name, data)
        try waitUntil("\(name.debugDescription) moves to rejected/", timeout: 10, file: file, line: line) {
            !fx.inRequests(name) && fx.inRejected(name) && fx.rejectionText(name) != nil
        }
        let text = fx.rejectionText(name) ?? ""
        XCTAssertTrue(text.contains(code), "\(name.debugDescription): '\(text)'", file: file, line: line)
        for m in mentions { XCTAssertTrue(text.contains(m), "\(name.debugDescription): '\(text)' should name '\(m)'", file: file, line: line) }
        XCTAssertEqual(fx.rejectedDirContents(named: name), data, "the rejected file is the file dropped", file: file, line: line)
        // No status appeared for it (good-* statuses of other tests aside, and their status
        // writer's temp files in flight: a CI run listed `.tmp-good-<...>.json-<pid>-<n>`).
        let added = Set(fx.names(in: fx.spool + "/status")).subtracting(before).filter { !$0.hasPrefix("good-") && !$0.hasPrefix(".tmp-good-") }
        XCTAssertEqual(added, [], file: file, line: line)
    }

    /// A request the daemon accepts (it is valid) that fails once the daemon has fetched what it names.
    @discardableResult
    func expectFailedAfterAccept(_ id: String, _ request: [String: Any], code: String, mentions: [String],
                                 url: String? = nil, file: StaticString = #filePath, line: UInt = #line) throws -> [String: Any] {
        try fx.drop("\(id).json", request)
        try fx.waitForState(id, "failed", timeout: 30)
        try fx.waitForEvent(id, "failed", file: file, line: line)
        XCTAssertFalse(fx.inRequests("\(id).json"), file: file, line: line)
        let err = fx.errorObject(id) ?? [:]
        XCTAssertEqual(err["code"] as? String, code, "\(err)", file: file, line: line)
        let message = err["message"] as? String ?? ""
        for m in mentions { XCTAssertTrue(message.contains(m), "message '\(message)' should name '\(m)'", file: file, line: line) }
        if let url { XCTAssertEqual(err["url"] as? String, url, file: file, line: line) }
        XCTAssertEqual(fx.eventStates(id).last, "failed", file: file, line: line)
        XCTAssertEqual(fx.progress(id)["tilesCompleted"] ?? 0, 0, file: file, line: line)
        return err
    }

    // MARK: - Not a JSON object

    func testEmptyFile() throws {
        try expectFailed([Case(name: "br-empty.json", data: Data(), id: "br-empty", mentions: ["empty"]),
                          Case(name: "br-blank.json", data: Data(" \n\t\n".utf8), id: "br-blank", mentions: ["empty"])])
    }

    func testNotJSON() throws {
        try expectFailed([Case(name: "br-notjson.json", data: Data("bounds: [1, 2, 3, 4]\n".utf8), id: "br-notjson", mentions: ["not valid JSON"]),
                          Case(name: "br-truncated.json", data: jsonData(base()).prefix(20), id: "br-truncated", mentions: ["not valid JSON"]),
                          Case(name: "br-binary.json", data: Data([0xFF, 0xFE, 0x00, 0x7B, 0x89, 0x50]), id: "br-binary", mentions: ["not valid JSON"])])
    }

    func testJSONArrayStringAndOtherValues() throws {
        try expectFailed([Case(name: "br-array.json", data: Data("[{\"bounds\": [0, 0, 1, 1]}]".utf8), id: "br-array", mentions: ["JSON object", "array"]),
                          Case(name: "br-string.json", data: Data("\"monaco\"".utf8), id: "br-string", mentions: ["JSON object", "string"]),
                          Case(name: "br-number.json", data: Data("42".utf8), id: "br-number", mentions: ["JSON object", "number"]),
                          Case(name: "br-null.json", data: Data("null".utf8), id: "br-null", mentions: ["JSON object", "null"])])
    }

    func testFileOverOneMiB() throws {
        // Valid JSON, padded with spaces past 1 MiB: refused for its size alone.
        var text = Array(jsonData(base()))
        text.insert(contentsOf: [UInt8](repeating: 0x20, count: (1 << 20) + 1 - text.count), at: 1)
        try expectFailed([Case(name: "br-big.json", data: Data(text), id: "br-big", mentions: ["larger than 1048576 bytes"])])
    }

    /// An 8 GiB sparse file is refused at once: the daemon looks at its size, it does not read it.
    func testHugeSparseFileIsRefusedWithoutReadingIt() throws {
        let name = "br-sparse.json"
        let tmp = fx.requestsDir + "/.sparse"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertEqual(ftruncate(fd, 8 << 30), 0)
        close(fd)
        let started = Date()
        XCTAssertEqual(rename(tmp, fx.requestsDir + "/" + name), 0)
        try waitUntil("the sparse file is rejected", timeout: 10) { fx.inRejected(name) && fx.rejectionText(name) != nil }
        XCTAssertLessThan(Date().timeIntervalSince(started), 5, "reading 8 GiB would take far longer")
        XCTAssertEqual(fx.errorCode("br-sparse"), "invalidRequest")
        XCTAssertTrue(fx.errorMessage("br-sparse")?.contains("larger than 1048576 bytes") ?? false, fx.errorMessage("br-sparse") ?? "")
        unlink(fx.rejectedDir + "/" + name)
    }

    func testDeeplyNestedJSON() throws {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        let objects = String(repeating: "{\"a\":", count: 50_000) + "1" + String(repeating: "}", count: 50_000)
        var text = String(decoding: jsonData(base()), as: UTF8.self)
        text.removeLast()
        try expectFailed([Case(name: "br-deep.json", data: Data((text + ",\"context\":" + deep + "}").utf8), id: "br-deep", mentions: ["nested"]),
                          Case(name: "br-deepobj.json", data: Data(objects.utf8), id: "br-deepobj", mentions: ["nested"])])
    }

    // MARK: - Fields

    func testWrongTypes() throws {
        let table: [(String, [String: Any], String)] = [
            ("minzoom-string", ["minZoom": "3"], "minZoom"),
            ("minzoom-bool", ["minZoom": true], "minZoom"),
            ("maxzoom-fraction", ["maxZoom": 3.5], "maxZoom"),
            ("bounds-string", ["bounds": "7,43,8,44"], "bounds"),
            ("bounds-three", ["bounds": [7, 43, 8]], "bounds"),
            ("bounds-element", ["bounds": [7, "43", 8, 44]], "bounds[1]"),
            ("bounds-object", ["bounds": ["west": 7, "south": 43, "east": 8, "north": 44]], "bounds"),
            ("id-number", ["id": 42], "id"),
            ("id-bool", ["id": true], "id"),
            ("tiles-string", ["tiles": server.url("/ok/x/{z}/{x}/{y}.png")], "tiles"),
            ("tiles-empty", ["tiles": [String]()], "tiles"),
            ("tiles-number", ["tiles": [7]], "tiles[0]"),
            ("style-number", ["style": 5, "tiles": NSNull()], "style"),
            ("pixelratio-string", ["pixelRatio": "2"], "pixelRatio"),
            ("pixelratio-zero", ["pixelRatio": 0], "pixelRatio"),
            ("ideographs-string", ["includeIdeographs": "yes"], "includeIdeographs"),
            ("maxtiles-negative", ["maxTiles": -5], "maxTiles"),
            ("maxtiles-fraction", ["maxTiles": 1.5], "maxTiles"),
            ("maxtiles-string", ["maxTiles": "100"], "maxTiles"),
        ]
        var cases = table.map { Case(name: "br-type-\($0.0).json", data: spoiled($0.1), id: "br-type-\($0.0)", mentions: [$0.2]) }
        // A JSON null where a number belongs (spoiled() cannot write one: NSNull removes the field there).
        var nullZoom = base()
        nullZoom["maxZoom"] = NSNull()
        cases.append(Case(name: "br-type-maxzoom-null.json", data: jsonData(nullZoom), id: "br-type-maxzoom-null", mentions: ["maxZoom", "null"]))
        try expectFailed(cases)
    }

    func testNaNAndInfinity() throws {
        func raw(_ bounds: String) -> Data {
            Data(#"{"tiles":["\#(server.url("/ok/n/{z}/{x}/{y}.png"))"],"bounds":\#(bounds),"minZoom":0,"maxZoom":1}"#.utf8)
        }
        // JSON has no NaN or Infinity: as literals the file is not JSON; as an overflowing number
        // (1e999) it must not pass as a coordinate either.
        try expectFailed([Case(name: "br-nan.json", data: raw("[NaN, 0, 1, 1]"), id: "br-nan", mentions: ["not valid JSON"]),
                          Case(name: "br-inf.json", data: raw("[Infinity, 0, 1, 1]"), id: "br-inf", mentions: ["not valid JSON"]),
                          Case(name: "br-neginf.json", data: raw("[0, -Infinity, 1, 1]"), id: "br-neginf", mentions: ["not valid JSON"]),
                          // Foundation refuses a number that overflows a Double; the message quotes it.
                          Case(name: "br-1e999.json", data: raw("[0, 0, 1e999, 1]"), id: "br-1e999", mentions: ["1e999"]),
                          Case(name: "br-zoom1e999.json", data: Data(#"{"tiles":["\#(server.url("/ok/n/{z}/{x}/{y}.png"))"],"bounds":[0,0,1,1],"minZoom":0,"maxZoom":1e999}"#.utf8),
                               id: "br-zoom1e999", mentions: ["1e999"])])
    }

    func testBoundsOutOfRange() throws {
        try expectFailed([Case(name: "br-west.json", data: spoiled(["bounds": [-181, 0, 1, 1]]), id: "br-west", mentions: ["bounds", "west"]),
                          Case(name: "br-east.json", data: spoiled(["bounds": [0, 0, 180.5, 1]]), id: "br-east", mentions: ["bounds", "east"]),
                          Case(name: "br-south.json", data: spoiled(["bounds": [0, -91, 1, 1]]), id: "br-south", mentions: ["bounds", "south"]),
                          Case(name: "br-north.json", data: spoiled(["bounds": [0, 0, 1, 1000]]), id: "br-north", mentions: ["bounds", "north"]),
                          Case(name: "br-polar.json", data: spoiled(["bounds": [0, 86, 1, 89]]), id: "br-polar", mentions: ["bounds", "Web Mercator"])])
    }

    func testSouthGreaterThanNorth() throws {
        try expectFailed([Case(name: "br-southnorth.json", data: spoiled(["bounds": [7, 44, 8, 43]]), id: "br-southnorth", mentions: ["bounds", "south", "north"])])
    }

    func testZeroAreaBox() throws {
        try expectFailed([Case(name: "br-zero-we.json", data: spoiled(["bounds": [7, 43, 7, 44]]), id: "br-zero-we", mentions: ["bounds", "no area"]),
                          Case(name: "br-zero-sn.json", data: spoiled(["bounds": [7, 43, 8, 43]]), id: "br-zero-sn", mentions: ["bounds", "south"]),
                          Case(name: "br-zero-point.json", data: spoiled(["bounds": [7, 43, 7, 43]]), id: "br-zero-point", mentions: ["bounds"])])
    }

    func testMinZoomGreaterThanMaxZoom() throws {
        try expectFailed([Case(name: "br-minmax.json", data: spoiled(["minZoom": 5, "maxZoom": 3]), id: "br-minmax", mentions: ["minZoom", "maxZoom"])])
    }

    func testZoomOver24() throws {
        try expectFailed([Case(name: "br-z25.json", data: spoiled(["maxZoom": 25]), id: "br-z25", mentions: ["maxZoom", "25"]),
                          Case(name: "br-zhuge.json", data: spoiled(["minZoom": 1e15, "maxZoom": 1e15]), id: "br-zhuge", mentions: ["minZoom"])])
    }

    func testNegativeZoom() throws {
        try expectFailed([Case(name: "br-zneg.json", data: spoiled(["minZoom": -1]), id: "br-zneg", mentions: ["minZoom", "-1"]),
                          Case(name: "br-zneg2.json", data: spoiled(["minZoom": -3, "maxZoom": -1]), id: "br-zneg2", mentions: ["minZoom"])])
    }

    func testUnknownFields() throws {
        try expectFailed([Case(name: "br-typo.json", data: spoiled(["maxzoom": 3]), id: "br-typo", mentions: ["unknown field", "maxzoom"]),
                          Case(name: "br-extra.json", data: spoiled(["priority": "high", "callback": "http://x"]), id: "br-extra", mentions: ["callback", "priority"])])
    }

    func testMissingOrConflictingFields() throws {
        try expectFailed([Case(name: "br-nobounds.json", data: spoiled(["bounds": NSNull()]), id: "br-nobounds", mentions: ["bounds", "missing"]),
                          Case(name: "br-nosource.json", data: spoiled(["tiles": NSNull()]), id: "br-nosource", mentions: ["style", "tiles"]),
                          Case(name: "br-both.json", data: spoiled(["style": server.url("/json/x")]), id: "br-both", mentions: ["style", "tiles"]),
                          Case(name: "br-nominzoom.json", data: spoiled(["minZoom": NSNull()]), id: "br-nominzoom", mentions: ["minZoom"]),
                          Case(name: "br-emptyobject.json", data: Data("{}".utf8), id: "br-emptyobject", mentions: ["style", "tiles"])])
    }

    // MARK: - Ids

    /// Ids that are not `[A-Za-z0-9][A-Za-z0-9._-]{0,127}` in the `id` field: the status is written
    /// under the file name's id, and nothing is created at the path the bad id names.
    func testIDsThatAreNotSafeNames() throws {
        let table: [(String, String)] = [
            ("dotdot", ".."), ("dotdot-escape", "../../escaped"), ("slash", "a/b"), ("abs", "/tmp/escaped"),
            ("nul", "a\u{0}b"), ("newline", "a\nb"), ("long500", String(repeating: "x", count: 500)),
            ("empty", ""), ("leading-dot", ".hidden"), ("leading-dash", "-x"), ("space", "a b"), ("unicode", "région"),
        ]
        try expectFailed(table.map { Case(name: "br-id-\($0.0).json", data: spoiled(["id": $0.1]), id: "br-id-\($0.0)", mentions: ["id", "must match"]) })
        // Nothing appeared where the bad ids point.
        XCTAssertFalse(fx.entryExists(fx.root.path + "/escaped"))
        XCTAssertFalse(fx.entryExists("/tmp/escaped"))
        XCTAssertFalse(fx.entryExists(fx.spool + "/escaped"))
        XCTAssertEqual(fx.names(in: fx.store + "/regions").filter { $0.hasPrefix("br-id") || $0.contains("escaped") }, [])
        // The newline and NUL ids are in the log as escapes, each entry on one line.
        fx.assertLogLinesAreEntries()
        XCTAssertTrue(fx.log().contains("'a\\nb'"), "the newline id is logged escaped")
    }

    /// The same bad ids as file names, where a file system allows them (not `/` or NUL).
    func testFileNamesThatGiveNoID() throws {
        let table: [(String, String)] = [
            ("spaces", "my region.json"), ("accents", "région.json"), ("cjk", "東京.json"), ("umlaut", "Ünïcode.json"),
            ("newline", "two\nlines.json"), ("leading-dash", "-x.json"), ("tab", "a\tb.json"),
            ("long", String(repeating: "y", count: 190) + ".json"),
        ]
        for (_, name) in table {
            try expectRejectedWithoutID(name, spoiled([:]), mentions: ["id"])
        }
        fx.assertLogLinesAreEntries()
    }

    /// A 250-character name (255 bytes with `.json`): `rejected/<name>.error` would be longer than a
    /// file name may be. The file must still leave `requests/` with its reason beside it.
    func testFileNameOf250Characters() throws {
        let stem = String(repeating: "z", count: 250)
        let name = stem + ".json"
        try fx.dropRaw(name, spoiled([:]))
        try waitUntil("the long name leaves requests/", timeout: 10) { !fx.inRequests(name) }
        let rejected = fx.names(in: fx.rejectedDir).filter { $0.hasPrefix(String(repeating: "z", count: 100)) }
        XCTAssertEqual(rejected.count, 2, "the file and its .error: \(rejected)")
        let errorFile = try XCTUnwrap(rejected.first { $0.hasSuffix(".error") })
        let text = try String(contentsOfFile: fx.rejectedDir + "/" + errorFile, encoding: .utf8)
        XCTAssertTrue(text.contains("invalidRequest") && text.contains("id"), text)
        let moved = try XCTUnwrap(rejected.first { !$0.hasSuffix(".error") })
        XCTAssertEqual(FileManager.default.contents(atPath: fx.rejectedDir + "/" + moved), spoiled([:]))
    }

    /// A file name with spaces still works when the `id` field gives a valid id; a bad field in such
    /// a file is reported under that id.
    func testIDFieldGivesTheIDWhenTheNameCannot() throws {
        try fx.drop("my good region.json", server.tilesRequest(["/ok/named/{z}/{x}/{y}.png"], id: "br-named"))
        try fx.waitForState("br-named", "completed", timeout: 20)
        try expectFailed([Case(name: "my bad region.json", data: jsonData(base("br-badnamed").merging(["maxZoom": 30]) { $1 }),
                               id: "br-badnamed", mentions: ["maxZoom"])])
        try expectFailed([Case(name: "br-file-name.json", data: jsonData(base("br-field-id").merging(["bounds": [1, 2]]) { $1 }),
                               id: "br-field-id", mentions: ["bounds"])])
        XCTAssertNil(fx.state("br-file-name"), "a valid id field names the region, not the file name")
    }

    /// A second request with the id of a region that is still downloading is refused with
    /// `duplicateId`; the first region's status, request and download are unaffected.
    func testSecondRequestWithTheIDOfAnUnfinishedRegion() throws {
        // The first region is held at least 1 s by a 429 with Retry-After: 1.
        let first = server.tilesRequest(["/ratelimit/1/dup/{z}/{x}/{y}.png"], maxZoom: 1)
        try fx.drop("br-dup.json", first)
        try waitUntil("the first region is downloading", timeout: 10) { server.hits("/ratelimit/1/dup/0/0/0.png") >= 1 }
        // The same file name again (the first was consumed), and a different name with the same id.
        try fx.dropRaw("br-dup.json", jsonData(server.tilesRequest(["/ok/dup2/{z}/{x}/{y}.png"])))
        try fx.dropRaw("br-dup-other.json", jsonData(server.tilesRequest(["/ok/dup3/{z}/{x}/{y}.png"], id: "br-dup")))
        // And a broken file under the same name: it must not overwrite the running region's status.
        try waitUntil("both duplicates are rejected", timeout: 10) {
            fx.rejectionText("br-dup.json") != nil && fx.rejectionText("br-dup-other.json") != nil
        }
        try fx.dropRaw("br-dup.json", Data("not json".utf8))
        try waitUntil("the broken duplicate is rejected", timeout: 10) {
            !fx.inRequests("br-dup.json") && (fx.rejectionText("br-dup.json")?.contains("invalidRequest") ?? false)
        }
        XCTAssertTrue(fx.rejectionText("br-dup-other.json")?.contains("duplicateId") ?? false, fx.rejectionText("br-dup-other.json") ?? "")
        XCTAssertEqual(fx.state("br-dup"), "downloading", "the first region is unaffected")
        try fx.waitForState("br-dup", "completed", timeout: 20)
        try fx.waitForEvent("br-dup", "completed")
        let tiles = fx.manifest("br-dup")
        XCTAssertEqual(tiles.count, 5)
        XCTAssertTrue(tiles.allSatisfy { $0.url.contains("/ratelimit/1/dup/") }, "the first request's tiles, not a duplicate's")
        XCTAssertEqual(server.allHits().keys.filter { $0.contains("/dup2/") || $0.contains("/dup3/") }, [])
        let request = fx.status("br-dup")?["request"] as? [String: Any]
        XCTAssertEqual(request?["tiles"] as? [String], [server.url("/ratelimit/1/dup/{z}/{x}/{y}.png")])
        XCTAssertEqual(fx.eventStates("br-dup"), ["queued", "downloading", "completed"])
        fx.assertStoreMatchesManifest("br-dup")
    }

    // MARK: - Not regular files

    /// A symlink made in `requests/` (`ln -s`) to a valid request outside the spool: refused, not
    /// followed; the link itself moves to `rejected/`; the target is untouched and never fetched.
    func testSymlinkToAFileOutsideTheSpoolIsNotFollowed() throws {
        let outside = fx.root.path + "/outside"
        try fx.makeFolder(outside)
        let target = outside + "/target.json"
        let content = jsonData(server.tilesRequest(["/ok/symlinked/{z}/{x}/{y}.png"], id: "br-symlinked"))
        try content.write(to: URL(fileURLWithPath: target))
        var before = stat()
        XCTAssertEqual(stat(target, &before), 0)
        // Made in place, as `ln -s` does, and made elsewhere then moved in.
        XCTAssertEqual(symlink(target, fx.requestsDir + "/br-link.json"), 0)
        XCTAssertEqual(symlink(target, outside + "/br-mvlink.json"), 0)
        XCTAssertEqual(rename(outside + "/br-mvlink.json", fx.requestsDir + "/br-mvlink.json"), 0)
        XCTAssertEqual(symlink("/nonexistent/dangling.json", fx.requestsDir + "/br-dangling.json"), 0)
        for id in ["br-link", "br-mvlink", "br-dangling"] {
            try waitUntil("\(id) is rejected", timeout: 10) { !fx.inRequests("\(id).json") && fx.rejectionText("\(id).json") != nil }
            XCTAssertEqual(fx.state(id), "failed")
            XCTAssertEqual(fx.errorCode(id), "invalidRequest")
            XCTAssertTrue(fx.errorMessage(id)?.contains("not a regular file") ?? false, fx.errorMessage(id) ?? "")
            XCTAssertEqual(try FileManager.default.destinationOfSymbolicLink(atPath: fx.rejectedDir + "/\(id).json").hasSuffix(".json"), true,
                           "the link itself was moved, not a copy of its target")
        }
        XCTAssertEqual(FileManager.default.contents(atPath: target), content, "target untouched")
        var after = stat()
        XCTAssertEqual(stat(target, &after), 0)
        XCTAssertEqual(after.st_mtim.tv_sec, before.st_mtim.tv_sec)
        XCTAssertEqual(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec)
        XCTAssertNil(fx.state("br-symlinked"), "the target's request was never read")
        XCTAssertEqual(server.hits("/ok/symlinked/0/0/0.png"), 0)
    }

    /// A FIFO in `requests/` (`mkfifo`, nobody writing to it) must not block the daemon: it is
    /// refused, and later requests still complete (tearDown).
    func testFIFODoesNotBlockTheDaemon() throws {
        XCTAssertEqual(mkfifo(fx.requestsDir + "/br-fifo.json", 0o644), 0)
        let outside = fx.root.path + "/outside-fifo"
        try fx.makeFolder(outside)
        XCTAssertEqual(mkfifo(outside + "/br-mvfifo.json", 0o644), 0)
        XCTAssertEqual(rename(outside + "/br-mvfifo.json", fx.requestsDir + "/br-mvfifo.json"), 0)
        for id in ["br-fifo", "br-mvfifo"] {
            try waitUntil("\(id) is rejected", timeout: 10) { !fx.inRequests("\(id).json") && fx.rejectionText("\(id).json") != nil }
            XCTAssertEqual(fx.errorCode(id), "invalidRequest")
            XCTAssertTrue(fx.errorMessage(id)?.contains("not a regular file") ?? false, fx.errorMessage(id) ?? "")
            var st = stat()
            XCTAssertEqual(lstat(fx.rejectedDir + "/\(id).json", &st), 0)
            XCTAssertEqual(st.st_mode & S_IFMT, S_IFIFO)
        }
    }

    /// A folder named like a request.
    func testDirectoryNamedLikeARequest() throws {
        XCTAssertEqual(mkdir(fx.requestsDir + "/br-dir.json", 0o755), 0)
        try waitUntil("the folder is rejected", timeout: 10) { !fx.inRequests("br-dir.json") && fx.rejectionText("br-dir.json") != nil }
        XCTAssertEqual(fx.errorCode("br-dir"), "invalidRequest")
        XCTAssertTrue(fx.errorMessage("br-dir")?.contains("not a regular file") ?? false)
    }

    /// A file the daemon may not read (mode 000). Root reads any file whatever its mode, and the
    /// tests run as root, so the daemon then runs as `nobody` (setpriv) on a spool it owns.
    func testUnreadableFile() throws {
        if geteuid() != 0 {
            try fx.writeInPlace(".unreadable", jsonData(base()))
            XCTAssertEqual(chmod(fx.requestsDir + "/.unreadable", 0), 0)
            XCTAssertEqual(rename(fx.requestsDir + "/.unreadable", fx.requestsDir + "/br-unreadable.json"), 0)
            try waitUntil("rejected", timeout: 10) { fx.rejectionText("br-unreadable.json") != nil }
            XCTAssertEqual(fx.errorCode("br-unreadable"), "invalidRequest")
            XCTAssertTrue(fx.errorMessage("br-unreadable")?.contains("EACCES") ?? false, fx.errorMessage("br-unreadable") ?? "")
            return
        }
        let setpriv = "/usr/bin/setpriv"
        guard FileManager.default.isExecutableFile(atPath: setpriv) else {
            print("SKIPPED: testUnreadableFile: running as root, which reads mode-000 files, and \(setpriv) is missing to run the daemon as nobody")
            throw XCTSkip("root reads mode-000 files and setpriv is missing")
        }
        let own = try SpoolFixture()
        let nobody: uid_t = 65534
        try own.makeFolder(own.spool)
        for p in [own.root.path, own.spool] { XCTAssertEqual(chown(p, nobody, nobody), 0) }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: setpriv)
        p.arguments = ["--reuid=\(nobody)", "--regid=\(nobody)", "--clear-groups", "--", SpoolFixture.binary,
                       "run", "--spool", own.spool, "--store", own.store, "--retry-delay", "0.1"]
        _ = FileManager.default.createFile(atPath: own.logPath, contents: nil)
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: own.logPath))
        p.standardError = log
        p.standardOutput = log
        try p.run()
        defer { if p.isRunning { p.terminate() }; p.waitUntilExit() }
        try waitUntil("the daemon runs as nobody", timeout: 10) { own.log().contains("watching") || !p.isRunning }
        XCTAssertTrue(p.isRunning, own.log())
        // Written by root with mode 000, then moved in.
        let tmp = own.requestsDir + "/.unreadable"
        try jsonData(base()).write(to: URL(fileURLWithPath: tmp))
        XCTAssertEqual(chmod(tmp, 0), 0)
        XCTAssertEqual(rename(tmp, own.requestsDir + "/br-unreadable.json"), 0)
        try waitUntil("the unreadable file is rejected", timeout: 10) {
            !own.inRequests("br-unreadable.json") && own.rejectionText("br-unreadable.json") != nil
        }
        XCTAssertEqual(own.state("br-unreadable"), "failed")
        XCTAssertEqual(own.errorCode("br-unreadable"), "invalidRequest")
        XCTAssertTrue(own.errorMessage("br-unreadable")?.contains("EACCES") ?? false, own.errorMessage("br-unreadable") ?? "")
        // That daemon goes on too.
        try own.drop("br-nobody-good.json", server.tilesRequest(["/ok/nobody/{z}/{x}/{y}.png"]))
        try own.waitForState("br-nobody-good", "completed", timeout: 20)
        XCTAssertTrue(p.isRunning)
    }

    // MARK: - URLs

    func testStyleURLSchemesOtherThanHTTP() throws {
        let urls = [("file", "file:///etc/passwd"), ("ftp", "ftp://127.0.0.1/style.json"), ("gopher", "gopher://127.0.0.1/1"),
                    ("dict", "dict://127.0.0.1/d:style"), ("scp", "scp://root@127.0.0.1/etc/shadow"), ("FILE", "FILE:///etc/passwd"),
                    ("ldap", "ldap://127.0.0.1/"), ("data", "data:application/json,{}")]
        try expectFailed(urls.map { Case(name: "br-style-\($0.0.lowercased())\($0.0 == "FILE" ? "2" : "").json",
                                         data: spoiled(["tiles": NSNull(), "style": $0.1]),
                                         id: "br-style-\($0.0.lowercased())\($0.0 == "FILE" ? "2" : "")",
                                         mentions: ["style", "scheme"]) })
    }

    func testTileTemplateSchemesOtherThanHTTP() throws {
        let schemes = ["file", "ftp", "gopher", "dict", "scp"]
        try expectFailed(schemes.map { s in
            Case(name: "br-tiles-\(s).json", data: spoiled(["tiles": [server.url("/ok/a/{z}/{x}/{y}.png"), "\(s)://127.0.0.1/{z}/{x}/{y}.png"]]),
                 id: "br-tiles-\(s)", mentions: ["tiles[1]", "scheme '\(s)'"])
        })
    }

    func testURLsWithoutHostOrNotURLs() throws {
        try expectFailed([Case(name: "br-nohost.json", data: spoiled(["tiles": ["http:///{z}/{x}/{y}.png"]]), id: "br-nohost", mentions: ["tiles[0]"]),
                          Case(name: "br-relative.json", data: spoiled(["tiles": NSNull(), "style": "styles/bright.json"]), id: "br-relative", mentions: ["style"])])
    }

    /// A tile URL that redirects to `file:///etc/passwd`: the region fails and the file is not read.
    func testRedirectToFileIsRefused() throws {
        let err = try expectFailedAfterAccept("br-redirfile", server.tilesRequest(["/redirectfile/rf/{z}/{x}/{y}.png"]), code: "httpError",
                                              mentions: ["/redirectfile/rf/0/0/0.png"], url: server.url("/redirectfile/rf/0/0/0.png"))
        XCTAssertTrue((err["message"] as? String ?? "").lowercased().contains("protocol"), "\(err)")
        XCTAssertEqual(server.hits("/redirectfile/rf/0/0/0.png"), 1, "a refused redirect is not retried")
        let passwd = try Data(contentsOf: URL(fileURLWithPath: "/etc/passwd"))
        XCTAssertNil(fx.storeObjects()[sha256Hex(passwd)], "/etc/passwd was stored")
        XCTAssertEqual(fx.manifest("br-redirfile").filter { $0.kind == "tile" }.count, 0)
    }

    // MARK: - Styles and TileJSON

    func testStyleThatIsNotJSON() throws {
        try server.register("br-notjson-style", json: "<html><body>502 Bad Gateway</body></html>")
        try expectFailedAfterAccept("br-style-notjson", styleRequest("br-notjson-style"), code: "invalidStyle",
                                    mentions: ["style", "not valid JSON"], url: server.url("/json/br-notjson-style"))
        try server.register("br-array-style", json: "[1, 2, 3]")
        try expectFailedAfterAccept("br-style-array", styleRequest("br-array-style"), code: "invalidStyle", mentions: ["style", "JSON object"])
    }

    func styleRequest(_ document: String, maxZoom: Int = 1, extra: [String: Any] = [:]) -> [String: Any] {
        var o: [String: Any] = ["style": server.url("/json/\(document)"), "bounds": [-10, -10, 10, 10], "minZoom": 0, "maxZoom": maxZoom]
        for (k, v) in extra { o[k] = v }
        return o
    }

    func testStyleWith100000Sources() throws {
        let sources = (0..<100_000).map { "\"s\($0)\":{\"type\":\"geojson\",\"data\":\"__BASE__/ok/d/\($0).json\"}" }.joined(separator: ",")
        try server.register("br-many-sources", json: "{\"version\":8,\"sources\":{\(sources)},\"layers\":[]}")
        try expectFailedAfterAccept("br-many-sources", styleRequest("br-many-sources"), code: "invalidStyle", mentions: ["100000 sources"])
        XCTAssertEqual(server.hits("/ok/d/0.json"), 0)
    }

    func testStyleWith100000Layers() throws {
        let layers = (0..<100_000).map { "{\"id\":\"l\($0)\",\"type\":\"background\"}" }.joined(separator: ",")
        try server.register("br-many-layers", json: "{\"version\":8,\"sources\":{},\"layers\":[\(layers)]}")
        try expectFailedAfterAccept("br-many-layers", styleRequest("br-many-layers"), code: "invalidStyle", mentions: ["100000 layers"])
    }

    /// 20,000 fontstacks in one `text-font` expression would plan 2.6 million glyph ranges (and
    /// block the daemon for half a minute, holding gigabytes): refused like too many sources.
    func testStyleWith20000Fontstacks() throws {
        let stops = (0..<20_000).map { "[\"literal\",[\"Font \($0)\"]]" }.joined(separator: ",1,")
        try server.register("br-many-fonts", json: """
            {"version":8,"glyphs":"__BASE__/ok/fonts/{fontstack}/{range}.pbf","sources":{},
             "layers":[{"id":"l","type":"symbol","layout":{"text-font":["step",["zoom"],\(stops)]}}]}
            """)
        let started = Date()
        try expectFailedAfterAccept("br-many-fonts", styleRequest("br-many-fonts"), code: "invalidStyle", mentions: ["fontstacks"])
        XCTAssertLessThan(Date().timeIntervalSince(started), 10)
        XCTAssertEqual(server.allHits().keys.filter { $0.hasPrefix("/ok/fonts/") }, [])
    }

    func testStyleWith100000Sprites() throws {
        let sprites = (0..<100_000).map { "{\"id\":\"s\($0)\",\"url\":\"__BASE__/ok/sprites/s\($0)\"}" }.joined(separator: ",")
        try server.register("br-many-sprites", json: "{\"version\":8,\"sprite\":[\(sprites)],\"sources\":{},\"layers\":[]}")
        try expectFailedAfterAccept("br-many-sprites", styleRequest("br-many-sprites"), code: "invalidStyle", mentions: ["100000 sprites"])
        XCTAssertEqual(server.allHits().keys.filter { $0.hasPrefix("/ok/sprites/") }, [])
    }

    /// A style (or TileJSON) that points anywhere but http(s) is refused before anything is fetched from it.
    func testStyleReferencingOtherSchemes() throws {
        let table: [(String, String, String)] = [
            ("sprite", "\"sprite\":\"file:///etc/passwd\",\"sources\":{}", "sprite"),
            ("glyphs", "\"glyphs\":\"ftp://127.0.0.1/{fontstack}/{range}.pbf\",\"sources\":{}", "glyphs"),
            ("tilejson", "\"sources\":{\"v\":{\"type\":\"vector\",\"url\":\"gopher://127.0.0.1/tj.json\"}}", "sources.v.url"),
            ("geojson", "\"sources\":{\"g\":{\"type\":\"geojson\",\"data\":\"dict://127.0.0.1/d:x\"}}", "sources.g.data"),
            ("inline", "\"sources\":{\"r\":{\"type\":\"raster\",\"tiles\":[\"scp://127.0.0.1/{z}/{x}/{y}.png\"]}}", "sources.r.tiles"),
            ("image", "\"sources\":{\"i\":{\"type\":\"image\",\"url\":\"file:///etc/shadow\",\"coordinates\":[[0,1],[1,1],[1,0],[0,0]]}}", "sources.i.url"),
        ]
        for (name, body, field) in table {
            try server.register("br-scheme-\(name)", json: "{\"version\":8,\(body),\"layers\":[]}")
            try expectFailedAfterAccept("br-scheme-\(name)", styleRequest("br-scheme-\(name)"), code: "invalidStyle", mentions: [field, "scheme"])
        }
        try server.register("br-tj-file", json: "{\"tiles\":[\"file:///etc/{z}/{x}/{y}\"]}")
        try server.register("br-scheme-tj", json: "{\"version\":8,\"sources\":{\"v\":{\"type\":\"vector\",\"url\":\"__BASE__/json/br-tj-file\"}},\"layers\":[]}")
        try expectFailedAfterAccept("br-scheme-tj", styleRequest("br-scheme-tj"), code: "invalidTileJSON", mentions: ["tiles", "scheme 'file'"])
        XCTAssertEqual(fx.objects().filter { fx.objectData($0) == FileManager.default.contents(atPath: "/etc/passwd") }, [])
    }

    func testTileJSONWithZoomsOutOfRange() throws {
        let table: [(String, String, String)] = [("maxzoom99", "\"minzoom\":0,\"maxzoom\":99", "maxzoom"),
                                                  ("minzoomneg", "\"minzoom\":-1,\"maxzoom\":14", "minzoom"),
                                                  ("minovermax", "\"minzoom\":10,\"maxzoom\":2", "minzoom"),
                                                  ("zoomstring", "\"minzoom\":\"0\",\"maxzoom\":14", "minzoom")]
        for (name, zooms, field) in table {
            try server.register("br-tj-\(name)", json: "{\"tilejson\":\"3.0.0\",\"tiles\":[\"__BASE__/ok/tj/{z}/{x}/{y}.pbf\"],\(zooms)}")
            try server.register("br-tjstyle-\(name)", json: "{\"version\":8,\"sources\":{\"v\":{\"type\":\"vector\",\"url\":\"__BASE__/json/br-tj-\(name)\"}},\"layers\":[]}")
            try expectFailedAfterAccept("br-tj-\(name)", styleRequest("br-tjstyle-\(name)"), code: "invalidTileJSON",
                                            mentions: ["TileJSON", field], url: server.url("/json/br-tj-\(name)"))
        }
        XCTAssertEqual(server.allHits().keys.filter { $0.hasPrefix("/ok/tj/") }, [])
    }

    func testTemplateWithoutZ() throws {
        // In a tiles request: refused at once.
        try expectFailed([Case(name: "br-noz.json", data: spoiled(["tiles": [server.url("/ok/noz/{x}/{y}.png")]]), id: "br-noz", mentions: ["tiles[0]", "{z}"]),
                          Case(name: "br-noxy.json", data: spoiled(["tiles": [server.url("/ok/noz/{z}.png")]]), id: "br-noxy", mentions: ["tiles[0]", "{z}"])])
        // In a TileJSON.
        try server.register("br-tj-noz", json: "{\"tiles\":[\"__BASE__/ok/tjnoz/{x}/{y}.pbf\"]}")
        try server.register("br-tjstyle-noz", json: "{\"version\":8,\"sources\":{\"v\":{\"type\":\"vector\",\"url\":\"__BASE__/json/br-tj-noz\"}},\"layers\":[]}")
        try expectFailedAfterAccept("br-tj-noz", styleRequest("br-tjstyle-noz"), code: "invalidTileJSON", mentions: ["tiles", "{z}"])
        // Inline in a style's source.
        try server.register("br-inline-noz", json: "{\"version\":8,\"sources\":{\"r\":{\"type\":\"raster\",\"tiles\":[\"__BASE__/ok/inlinenoz/{x}/{y}.png\"]}},\"layers\":[]}")
        try expectFailedAfterAccept("br-inline-noz", styleRequest("br-inline-noz"), code: "invalidStyle", mentions: ["sources.r.tiles", "{z}"])
        XCTAssertEqual(server.allHits().keys.filter { $0.contains("noz") && !$0.hasPrefix("/json/") }, [])
    }

    // MARK: - Tile limits

    func testPlanOverTheRequestsMaxTiles() throws {
        // The world over z0-3 is 85 tiles.
        try expectFailed([Case(name: "br-maxtiles.json", data: jsonData(server.tilesRequest(["/ok/mt/{z}/{x}/{y}.png"], maxZoom: 3).merging(["maxTiles": 84]) { $1 }),
                               id: "br-maxtiles", code: "tileLimitExceeded", mentions: ["maxTiles", "85", "84"]),
                          Case(name: "br-maxtiles0.json", data: jsonData(server.tilesRequest(["/ok/mt/{z}/{x}/{y}.png"]).merging(["maxTiles": 0]) { $1 }),
                               id: "br-maxtiles0", code: "tileLimitExceeded", mentions: ["maxTiles"])])
        XCTAssertEqual(server.allHits().keys.filter { $0.hasPrefix("/ok/mt/") }, [], "nothing fetched")
        // Exactly at the limit is fine.
        try fx.drop("br-maxtiles-ok.json", server.tilesRequest(["/ok/mtok/{z}/{x}/{y}.png"], maxZoom: 3).merging(["maxTiles": 85]) { $1 })
        try fx.waitForState("br-maxtiles-ok", "completed", timeout: 20)
    }

    func testPlanOverTheDaemonsMaxTiles() throws {
        // The world over z0-10 is about 1.4 million tiles, more than the default --max-tiles (1,000,000).
        try expectFailed([Case(name: "br-daemonmax.json", data: jsonData(server.tilesRequest(["/ok/dm/{z}/{x}/{y}.png"], maxZoom: 10)),
                               id: "br-daemonmax", code: "tileLimitExceeded", mentions: ["--max-tiles", "1000000"]),
                          // A request's maxTiles cannot raise the daemon's limit.
                          Case(name: "br-daemonmax2.json", data: jsonData(server.tilesRequest(["/ok/dm/{z}/{x}/{y}.png"], maxZoom: 10).merging(["maxTiles": 5_000_000]) { $1 }),
                               id: "br-daemonmax2", code: "tileLimitExceeded", mentions: ["--max-tiles"])])
        XCTAssertEqual(server.allHits().keys.filter { $0.hasPrefix("/ok/dm/") }, [], "nothing fetched")
    }

    /// A style's plan is known only once the style (and its TileJSON) are fetched; it is checked then,
    /// before any tile is requested.
    func testStylePlanOverMaxTiles() throws {
        try server.register("br-bigstyle", json: "{\"version\":8,\"sources\":{\"r\":{\"type\":\"raster\",\"tileSize\":256,\"tiles\":[\"__BASE__/ok/bigstyle/{z}/{x}/{y}.png\"]}},\"layers\":[]}")
        var request = styleRequest("br-bigstyle", maxZoom: 6)
        request["bounds"] = [-180, -85, 180, 85]
        request["maxTiles"] = 1000
        try expectFailedAfterAccept("br-bigstyle", request, code: "tileLimitExceeded", mentions: ["maxTiles", "1000"])
        XCTAssertEqual(server.allHits().keys.filter { $0.hasPrefix("/ok/bigstyle/") }, [], "no tile fetched")
    }
}

extension BadRequestTests {
    /// Issue 10: bad `headers` and `emptyStatuses`; a header's value (a credential) is never
    /// quoted in the message, the status or the `.error` file.
    func testBadHeadersAndEmptyStatuses() throws {
        try expectFailed([
            Case(name: "br-hdrtype.json", data: spoiled(["headers": ["Authorization", "x"]]), id: "br-hdrtype", mentions: ["headers", "object"]),
            Case(name: "br-hdrname.json", data: spoiled(["headers": ["Bad Name": "v"]]), id: "br-hdrname", mentions: ["headers", "Bad Name"]),
            Case(name: "br-hdrcrlf.json", data: spoiled(["headers": ["Authorization": "Bearer leak-me\r\nX-Evil: 1"]]), id: "br-hdrcrlf", mentions: ["Authorization", "CR"]),
            Case(name: "br-hdrhost.json", data: spoiled(["headers": ["Host": "example.org"]]), id: "br-hdrhost", mentions: ["Host"]),
            Case(name: "br-hdrnum.json", data: spoiled(["headers": ["X-Key": 5]]), id: "br-hdrnum", mentions: ["X-Key", "string"]),
            Case(name: "br-es200.json", data: spoiled(["emptyStatuses": [200]]), id: "br-es200", mentions: ["emptyStatuses[0]"]),
            Case(name: "br-es429.json", data: spoiled(["emptyStatuses": [404, 429]]), id: "br-es429", mentions: ["emptyStatuses[1]", "429"]),
            Case(name: "br-estype.json", data: spoiled(["emptyStatuses": 404]), id: "br-estype", mentions: ["emptyStatuses"]),
        ])
        XCTAssertFalse(fx.errorMessage("br-hdrcrlf")?.contains("leak-me") ?? true)
        XCTAssertFalse(fx.rejectionText("br-hdrcrlf.json")?.contains("leak-me") ?? true)
    }
}

extension SpoolFixture {
    /// The bytes of `rejected/<name>` (nil for a missing or non-regular entry).
    func rejectedDirContents(named name: String) -> Data? { FileManager.default.contents(atPath: rejectedDir + "/" + name) }
}
