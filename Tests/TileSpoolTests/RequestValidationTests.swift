import Foundation
import XCTest
@testable import TileSpoolCore
@testable import TileSpoolDaemon

/// A table of request validation cases: each bad request must fail with `invalidRequest` and a
/// message naming the field; each good one must give the expected values.
final class RequestValidationTests: XCTestCase {
    let okBody = #""tiles":["http://h/{z}/{x}/{y}.png"],"bounds":[0,0,1,1],"minZoom":0,"maxZoom":2"#

    func validate(_ text: String, name: String = "r.json") -> Result<RegionRequest, RegionError> {
        do { return .success(try RequestValidator.validate(Data(text.utf8), fileName: name)) } catch { return .failure(error) }
    }

    func testBadRequests() {
        // (request text, a word the message must contain)
        let cases: [(String, String)] = [
            ("", "empty"),
            ("   \n", "empty"),
            // Attack round 39: headers the daemon sets for PMTiles ranges, and one header twice.
            ("{" + okBody + ",\"headers\":{\"If-Match\":\"*\"}}", "headers: If-Match is set by the daemon"),
            ("{" + okBody + ",\"headers\":{\"range\":\"bytes=0-1\"}}", "headers: range is set by the daemon"),
            ("{" + okBody + ",\"headers\":{\"X-A\":\"1\",\"x-a\":\"2\"}}", "'X-A' and 'x-a' name one header"),
            ("not json", "not valid JSON"),
            ("[1,2]", "JSON object"),
            ("\"a string\"", "JSON object"),
            ("{" + okBody + ",\"minZoom\":NaN}", "not valid JSON"),
            ("{" + okBody + ",\"bounds\":[0,0,Infinity,1]}", "not valid JSON"),
            (String(repeating: "[", count: 10000) + String(repeating: "]", count: 10000), "nested"),
            ("{" + okBody + ",\"colour\":1}", "'colour'"),
            (#"{"bounds":[0,0,1,1],"minZoom":0,"maxZoom":2}"#, "style or tiles"),
            ("{" + okBody + #","style":"http://h/s.json"}"#, "exactly one"),
            (#"{"style":42,"bounds":[0,0,1,1],"minZoom":0,"maxZoom":2}"#, "style"),
            (#"{"style":"file:///etc/passwd","bounds":[0,0,1,1],"minZoom":0,"maxZoom":2}"#, "'file'"),
            (#"{"style":"ftp://h/s.json","bounds":[0,0,1,1],"minZoom":0,"maxZoom":2}"#, "'ftp'"),
            (#"{"style":"gopher://h/s","bounds":[0,0,1,1],"minZoom":0,"maxZoom":2}"#, "'gopher'"),
            (#"{"style":"dict://h/s","bounds":[0,0,1,1],"minZoom":0,"maxZoom":2}"#, "'dict'"),
            (#"{"style":"scp://h/s","bounds":[0,0,1,1],"minZoom":0,"maxZoom":2}"#, "'scp'"),
            (#"{"tiles":["http://h/{x}/{y}.png"],"bounds":[0,0,1,1],"minZoom":0,"maxZoom":2}"#, "{z}"),
            (#"{"tiles":[],"bounds":[0,0,1,1],"minZoom":0,"maxZoom":2}"#, "at least one"),
            (#"{"tiles":"http://h/{z}/{x}/{y}","bounds":[0,0,1,1],"minZoom":0,"maxZoom":2}"#, "array"),
            (#"{"tiles":["http://h/{z}/{x}/{y}"],"minZoom":0,"maxZoom":2}"#, "bounds: missing"),
            (#"{"tiles":["http://h/{z}/{x}/{y}"],"bounds":[0,0,1],"minZoom":0,"maxZoom":2}"#, "4 numbers"),
            (#"{"tiles":["http://h/{z}/{x}/{y}"],"bounds":[0,0,"1",1],"minZoom":0,"maxZoom":2}"#, "bounds[2]"),
            (#"{"tiles":["http://h/{z}/{x}/{y}"],"bounds":[-200,0,1,1],"minZoom":0,"maxZoom":2}"#, "west"),
            (#"{"tiles":["http://h/{z}/{x}/{y}"],"bounds":[0,-95,1,1],"minZoom":0,"maxZoom":2}"#, "south"),
            (#"{"tiles":["http://h/{z}/{x}/{y}"],"bounds":[0,10,1,5],"minZoom":0,"maxZoom":2}"#, "south"),
            (#"{"tiles":["http://h/{z}/{x}/{y}"],"bounds":[1,0,1,1],"minZoom":0,"maxZoom":2}"#, "no area"),
            (#"{"tiles":["http://h/{z}/{x}/{y}"],"bounds":[0,1,1,1],"minZoom":0,"maxZoom":2}"#, "south"),
            (#"{"tiles":["http://h/{z}/{x}/{y}"],"bounds":[0,0,1,1],"minZoom":3,"maxZoom":2}"#, "minZoom (3)"),
            (#"{"tiles":["http://h/{z}/{x}/{y}"],"bounds":[0,0,1,1],"minZoom":0,"maxZoom":25}"#, "maxZoom"),
            (#"{"tiles":["http://h/{z}/{x}/{y}"],"bounds":[0,0,1,1],"minZoom":-1,"maxZoom":2}"#, "minZoom"),
            (#"{"tiles":["http://h/{z}/{x}/{y}"],"bounds":[0,0,1,1],"minZoom":1.5,"maxZoom":2}"#, "integer"),
            (#"{"tiles":["http://h/{z}/{x}/{y}"],"bounds":[0,0,1,1],"minZoom":true,"maxZoom":2}"#, "integer"),
            (#"{"tiles":["http://h/{z}/{x}/{y}"],"bounds":[0,0,1,1],"maxZoom":2}"#, "minZoom: missing"),
            ("{" + okBody + #","id":"../etc"}"#, "id"),
            ("{" + okBody + #","id":"a/b"}"#, "id"),
            ("{" + okBody + #","id":"a\u0000b"}"#, "id"),
            ("{" + okBody + #","id":"a\nb"}"#, "id"),
            ("{" + okBody + #","id":""# + String(repeating: "a", count: 500) + #""}"#, "id"),
            ("{" + okBody + #","id":"Zürich"}"#, "id"),
            ("{" + okBody + #","id":7}"#, "id"),
            ("{" + okBody + #","pixelRatio":0}"#, "pixelRatio"),
            ("{" + okBody + #","includeIdeographs":1}"#, "includeIdeographs"),
            ("{" + okBody + #","maxTiles":-5}"#, "maxTiles"),
            ("{" + okBody + #","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,0]]]}}"#, "exactly one"),
            (#"{"tiles":["http://h/{z}/{x}/{y}"],"geometry":{"type":"Point","coordinates":[0,0]},"minZoom":0,"maxZoom":2}"#, "geometry"),
            (#"{"tiles":["http://h/{z}/{x}/{y}"],"geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1]]]},"minZoom":0,"maxZoom":2}"#, "geometry"),
        ]
        for (text, word) in cases {
            switch validate(text) {
            case .success: XCTFail("accepted a bad request: \(text.prefix(120))")
            case .failure(let e):
                XCTAssertEqual(e.code, .invalidRequest, text)
                XCTAssertTrue(e.message.contains(word), "message '\(e.message)' should mention '\(word)' for \(text.prefix(120))")
            }
        }
        XCTAssertGreaterThanOrEqual(cases.count, 30)
    }

    /// A shape whose bounding box is huge (two specks at opposite corners of the world) is refused
    /// before anything is allocated for it.
    func testGeometryWithAHugeBoundingBoxIsRefused() {
        let text = #"{"tiles":["http://h/{z}/{x}/{y}"],"geometry":{"type":"MultiPolygon","coordinates":[[[[-179,-80],[-178,-80],[-178,-79],[-179,-80]]],[[[178,79],[179,79],[179,80],[178,79]]]]},"minZoom":0,"maxZoom":22}"#
        guard case .failure(let e) = validate(text) else { return XCTFail("accepted") }
        XCTAssertEqual(e.code, .tileLimitExceeded)
        XCTAssertTrue(e.message.contains("bounding box"), e.message)
        let small = text.replacingOccurrences(of: #""maxZoom":22"#, with: #""maxZoom":10"#)
        if case .failure(let e) = validate(small) { XCTFail(e.message) }
    }

    func testFileNamesThatGiveNoID() {
        XCTAssertNil(RequestValidator.id(fromFileName: "my region.json"))
        XCTAssertNil(RequestValidator.id(fromFileName: "région.json"))
        XCTAssertNil(RequestValidator.id(fromFileName: ".hidden.json"))
        XCTAssertNil(RequestValidator.id(fromFileName: "a.txt"))
        XCTAssertEqual(RequestValidator.id(fromFileName: "monaco-1.2_b.json"), "monaco-1.2_b")
        // A file name without a valid id is fine when the request names its own id.
        if case .failure(let e) = validate("{" + okBody + #","id":"good"}"#, name: "my region.json") { XCTFail(e.message) }
        if case .success = validate("{" + okBody + "}", name: "my region.json") { XCTFail("no id should be an error") }
    }

    func testDefaultsAndValues() throws {
        let r = try validate(#"{"style":"https://demotiles.maplibre.org/style.json","bounds":[170,-10,-170,10],"minZoom":0,"maxZoom":4,"context":{"k":[1,"x"]}}"#, name: "demo.json").get()
        XCTAssertEqual(r.id, "demo")
        XCTAssertEqual(r.source, .style("https://demotiles.maplibre.org/style.json"))
        XCTAssertEqual(r.bounds, GeoBounds(west: 170, south: -10, east: -170, north: 10))
        XCTAssertEqual(r.pixelRatio, 1)
        XCTAssertFalse(r.includeIdeographs)
        XCTAssertNil(r.maxTiles)
        XCTAssertEqual(String(decoding: JSONKind.serialize(r.context), as: UTF8.self), #"{"k":[1,"x"]}"#)
        let o = r.jsonObject
        XCTAssertEqual(o["pixelRatio"] as? Double, 1)
        XCTAssertEqual(o["includeIdeographs"] as? Bool, false)
        // Accepted templates: {-y} and {quadkey}.
        XCTAssertNoThrow(try validate(#"{"tiles":["http://h/{z}/{x}/{-y}.png","http://h/{quadkey}.png"],"bounds":[0,0,1,1],"minZoom":0,"maxZoom":1}"#).get())
    }
}

/// Issue 29: JSON errors name a line and a column (not Foundation's byte offset), and a trailing
/// comma, which RFC 8259 refuses and Foundation on Linux accepts, is refused the same way.
final class JSONTextTests: XCTestCase {
    func message(_ text: String) -> String? {
        do { _ = try JSONKind.parse(Data(text.utf8)); return nil } catch { return error.message }
    }

    func testErrorsNameLineAndColumn() {
        XCTAssertEqual(message("{\n  \"a\": x\n}"), "not valid JSON: Invalid value at line 2, column 8")
        // Columns count characters, not bytes: é is two bytes, one column.
        XCTAssertEqual(message("{\"é\": [1,\n 2, x]}"), "not valid JSON: Invalid value at line 2, column 5")
        XCTAssertEqual(message("{\"ééé\": x}"), "not valid JSON: Invalid value at line 1, column 9")
        XCTAssertEqual(message("[01]"), "not valid JSON: Number with leading zero at line 1, column 3")
        XCTAssertEqual(message("{\"a\": 1}\n}"), "not valid JSON: Invalid value at line 2, column 1")
        // A byte order mark is skipped by Foundation and by the count.
        XCTAssertEqual(message("\u{FEFF}[1,\n x]"), "not valid JSON: Invalid value at line 2, column 2")
        // Comments, NaN, single quotes were refused already; now with a position.
        XCTAssertEqual(message("{\"a\": 1, // note\n\"b\": 2}"), "not valid JSON: Invalid value at line 1, column 10")
        XCTAssertEqual(message("[NaN]"), "not valid JSON: Invalid value at line 1, column 2")
        XCTAssertEqual(message("['a']"), "not valid JSON: Invalid value at line 1, column 2")
        XCTAssertEqual(message("[\"abc"), "not valid JSON: Unexpected end of file during JSON parse.")
        // Attack round 36: a lone surrogate was "Unexpected end of file" without a position.
        XCTAssertEqual(message(#"{"a": "ok \"\\\ud83d\ude00", "b": "\ud800x"}"#), #"not valid JSON: a lone UTF-16 surrogate \ud800 at line 1, column 36 (it names no character)"#)
        XCTAssertEqual(message("{\n \"\\udc00\": 1}"), #"not valid JSON: a lone UTF-16 surrogate \udc00 at line 2, column 3 (it names no character)"#)
        XCTAssertEqual(message(#"["\uD800\u0041"]"#), #"not valid JSON: a lone UTF-16 surrogate \uD800 at line 1, column 3 (it names no character)"#)
        XCTAssertNil(JSONKind.loneSurrogate(Data(#"["\\ud800", "\ud83d\ude00"]"#.utf8)), "an escaped backslash, then a pair")
        // A number past a double's range: Foundation said "Number 1e400 is not representable in Swift."
        XCTAssertEqual(message("{\"bounds\": [0, 0, 1e400, 1]}"), "not JSON TileSpool can read: the number 1e400 is beyond a 64-bit float's range (about ±1.8e308; RFC 8259 section 6 lets a reader set that limit)")
        XCTAssertEqual(message("[-2E+999]"), "not JSON TileSpool can read: the number -2E+999 is beyond a 64-bit float's range (about ±1.8e308; RFC 8259 section 6 lets a reader set that limit)")
    }

    /// Attack round 35: a request with a key twice (`"maxZoom": 3, "maxZoom": 1`) was accepted
    /// and the last value taken without a word (RFC 8259 section 4 leaves a reader's choice
    /// "unpredictable"). It is refused, naming the key and where it appears the second time;
    /// keys are compared as the strings they name, and keys alike in different objects, or
    /// inside strings, are not repeats.
    func testAKeyRepeatedInOneObjectIsRefused() {
        let request = #"{"tiles": ["http://h/{z}/{x}/{y}.png"], "bounds": [0, 0, 1, 1],"# + "\n \"maxZoom\": 3, \"minZoom\": 0, \"maxZoom\": 1}"
        XCTAssertThrowsError(try RequestValidator.validate(Data(request.utf8), fileName: "t.json")) { e in
            XCTAssertEqual((e as? RegionError)?.message, "the request is ambiguous JSON: the key 'maxZoom' appears twice in one object, at line 2, column 30")
            XCTAssertEqual((e as? RegionError)?.code, .invalidRequest)
        }
        // The same request with the key once is valid.
        XCTAssertNoThrow(try RequestValidator.validate(Data(request.replacingOccurrences(of: #", "maxZoom": 1"#, with: "").utf8), fileName: "t.json"))
        func repeated(_ text: String) -> String? { JSONKind.repeatedKey(Data(text.utf8))?.key }
        XCTAssertEqual(repeated(#"{"a": 1, "a": 2}"#), "a", "an escape names the same key")
        XCTAssertEqual(repeated(#"{"x": {"b": [1, {"c": 1, "c": 2}]}}"#), "c", "in a nested object")
        XCTAssertEqual(JSONKind.repeatedKey(Data(#"[{"a": 1}, {"b": "a", "b": 2}]"#.utf8))?.offset, 22)
        XCTAssertNil(repeated(#"{"a": {"a": 1}, "b": [{"a": 2}, {"a": 3}]}"#), "the same key in different objects")
        XCTAssertNil(repeated(#"{"a": ""a": 1, "a"", "b": ["a", "a"]}"#), "keys in strings and strings in arrays")
        XCTAssertNil(repeated(#"{"a": 1, "A": 2, "a ": 3}"#), "keys differ by case or space")
        // Through the id a refused request's status is written under: a repeated `id` names none.
        XCTAssertEqual(RequestValidator.statusID(Data(#"{"id": "one", "id": "two"}"#.utf8), fileName: "file.json"), "file")
        // Attack round 36: keys equal as Unicode text (canonical equivalents: the parsed object
        // keeps one of them) are one key, and the message shows both spellings as code points;
        // keys only compatible (the ligature fi and "fi"), or differing by a NUL, are two keys.
        func parsed(_ text: String) -> String? {
            do { _ = try JSONKind.parse(Data(text.utf8), uniqueKeys: true); return nil } catch { return error.message }
        }
        XCTAssertEqual(parsed(#"{"\u00e9": 1, "e\u0301": 2}"#),
                       "ambiguous JSON: the key 'e\u{301}' appears twice in one object (as U+00E9 and as U+0065 U+0301, one text in Unicode), at line 1, column 15")
        XCTAssertEqual(parsed(#"{"a": 1, "\u0061": 2}"#), "ambiguous JSON: the key 'a' appears twice in one object, at line 1, column 10")
        XCTAssertNil(parsed(#"{"\ufb01": 1, "fi": 2, "a\u0000": 3, "a": 4}"#))
        // A key with a line feed adds no line to the message (attack round 39).
        XCTAssertEqual(parsed(#"{"a\nb": 1, "a\nb": 2}"#), "ambiguous JSON: the key 'a\\u{A}b' appears twice in one object, at line 1, column 13")
        // A refresh control file: its message names the ambiguity.
        let control = FileManager.default.temporaryDirectory.appendingPathComponent("refresh-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: control) }
        XCTAssertNoThrow(try Data(#"{"maxAge": 1, "\u006daxAge": 2}"#.utf8).write(to: control))
        guard case .failure(let e) = Daemon.refreshMaxAge(control.path) else { return XCTFail("a repeated maxAge is refused") }
        XCTAssertEqual(e.message, "the refresh control file is ambiguous JSON: the key 'maxAge' appears twice in one object, at line 1, column 15; it is empty or holds {\"maxAge\": SECONDS}")
    }

    func testTrailingCommasAreRefusedWithTheirPosition() {
        XCTAssertEqual(message("{\"a\": [1, 2,\n]}"), "not valid JSON: trailing comma at line 1, column 12 (before ']')")
        XCTAssertEqual(message("{\"a\": 1,}"), "not valid JSON: trailing comma at line 1, column 8 (before '}')")
        XCTAssertEqual(message("{\n  \"a\": {\"b\": \"x\" ,\n\t}\n}"), "not valid JSON: trailing comma at line 2, column 18 (before '}')")
        // Commas and brackets inside strings (escaped quotes included) are text, not syntax.
        XCTAssertNil(message(#"["a,]", "b,}", "c\",]"]"#))
        XCTAssertEqual(JSONKind.trailingComma(Data(#"["\\",]"#.utf8))?.offset, 5)
        XCTAssertNil(JSONKind.trailingComma(Data("[1, 2]".utf8)))
        // Through a request: the message a status file and rejected/<name>.error carry.
        XCTAssertThrowsError(try RequestValidator.validate(Data(#"{"tiles": ["http://h/{z}/{x}/{y}.png"], "bounds": [0, 0, 1, 1],"#.utf8 + Data("\n \"minZoom\": 0, \"maxZoom\": 2,\n}".utf8)), fileName: "t.json")) { e in
            XCTAssertEqual((e as? RegionError)?.message, "the request is not valid JSON: trailing comma at line 2, column 28 (before '}')")
            XCTAssertEqual((e as? RegionError)?.code, .invalidRequest)
        }
    }
}
