import Foundation
import XCTest
import TileSpoolCore
import TileSpoolIO

/// Issue 33: the status file and the event lines come from one typed model (`RegionStatus`,
/// `StatusEvent`, `StatusCoding`); these tests pin what a script reading them sees, and keep the
/// model and docs/contract.md's tables in step.
final class StatusModelTests: XCTestCase {
    /// A status with every field set.
    func fullStatus() -> RegionStatus {
        var p = RegionProgress()
        p.resourcesCompleted = 419; p.resourcesExpected = 419; p.resourcesExpectedIsPrecise = true
        p.bytesCompleted = 9_028_742; p.tilesCompleted = 23; p.tilesExpected = 23; p.tileBytesCompleted = 215_929
        p.tileBytesExpected = 215_929; p.tilesEmpty = 2
        let request = try! JSONKind.parse(Data(#"{"id":"europe","bounds":[-10,35,30.5,60],"maxZoom":4,"minZoom":0,"includeIdeographs":false,"maxTiles":null,"context":{"by":"ops"}}"#.utf8))
        var st = RegionStatus(id: "europe", state: .downloading, progress: p,
                              error: RegionError(code: .networkError, message: "down", url: "http://h/x", httpStatus: 503),
                              request: JSONValue(request), context: JSONValue(["by": "ops"]),
                              updatedAt: Date(timeIntervalSince1970: 1_796_000_000))
        st.exports = [JSONValue(["format": "mbtiles", "state": "written", "bytes": 10])]
        st.refreshing = true
        st.tilesPerSecond = 12.3456; st.bytesPerSecond = 1000.4; st.etaSeconds = 7
        st.startedAt = Date(timeIntervalSince1970: 1_796_000_000); st.completedAt = st.startedAt; st.stateChangedAt = st.startedAt
        st.uniqueBytes = 42
        st.throttledUntil = Date(timeIntervalSince1970: 1_796_000_060)
        st.warnings = [RegionWarning(code: RegionWarning.packReplaced, message: "replaced")]
        st.area = JSONValue(["km2": 1.5, "of": "bounds"])
        return st
    }

    func object(_ data: Data) throws -> [String: Any] { try XCTUnwrap(try JSONSerialization.jsonObject(with: data) as? [String: Any]) }

    /// Written and read back, a status is the same value; the file is pretty-printed with sorted
    /// keys, numbers keep their kind (4 stays 4, 30.5 stays 30.5), rates are rounded.
    func testAStatusReadsBackAsWritten() throws {
        let st = fullStatus()
        let data = StatusCoding.statusFile(st)
        XCTAssertEqual(data.last, 0x0A)
        var expected = st
        expected.tilesPerSecond = 12.35; expected.bytesPerSecond = 1000
        XCTAssertEqual(StatusCoding.status(data), expected)
        let text = String(decoding: data, as: UTF8.self)
        XCTAssertTrue(text.hasPrefix("{\n  \"area\" : {"), text)
        XCTAssertTrue(text.contains("\"maxZoom\" : 4,"), text)
        XCTAssertTrue(text.contains("30.5"), text)
        XCTAssertTrue(text.contains("\"tilesPerSecond\" : 12.35"), text)
        XCTAssertTrue(text.contains("\"updatedAt\" : \"\(Timestamp.iso8601(st.updatedAt))\""), text)
        let o = try object(data)
        XCTAssertEqual((o["error"] as? [String: Any])?["httpStatus"] as? Int, 503)
        XCTAssertEqual(o["throttledUntil"] as? String, Timestamp.iso8601(st.throttledUntil!))
    }

    /// The optional fields are `null` when unknown, except `exports` and `throttledUntil`, which
    /// are absent; a refused request's status has `request` null and every count 0.
    func testUnknownFieldsAreNullAndTwoAreAbsent() throws {
        let st = RegionStatus(id: "bad", state: .failed, progress: RegionProgress(),
                              error: RegionError(code: .invalidRequest, message: "x"), request: nil, context: .null,
                              updatedAt: Date(timeIntervalSince1970: 1_796_000_000)) // whole seconds: the file keeps no fraction
        let o = try object(StatusCoding.statusFile(st))
        for key in ["request", "context", "tilesPerSecond", "bytesPerSecond", "etaSeconds", "startedAt", "completedAt",
                    "stateChangedAt", "uniqueBytes", "area"] {
            XCTAssertTrue(o[key] is NSNull, "\(key): \(String(describing: o[key]))")
        }
        XCTAssertNil(o["exports"]); XCTAssertNil(o["throttledUntil"])
        XCTAssertEqual(o["refreshing"] as? Bool, false)
        XCTAssertEqual((o["warnings"] as? [Any])?.count, 0)
        let p = try XCTUnwrap(o["progress"] as? [String: Any])
        XCTAssertEqual(p["resourcesCompleted"] as? Int, 0)
        XCTAssertNil(p["tileBytesExpected"], "absent unless every tile source is a PMTiles archive")
        XCTAssertEqual(StatusCoding.status(StatusCoding.statusFile(st)), st)
    }

    /// A rate that is not a number (JSON has no NaN or infinity) is written as null: the rest of
    /// the status is still written (before, the whole file would have been `null`).
    func testANonFiniteRateIsNullNotAnUnwritableStatus() throws {
        var st = fullStatus()
        st.tilesPerSecond = .infinity; st.etaSeconds = .nan
        let o = try object(StatusCoding.statusFile(st))
        XCTAssertTrue(o["tilesPerSecond"] is NSNull); XCTAssertTrue(o["etaSeconds"] is NSNull)
        XCTAssertEqual(o["id"] as? String, "europe")
    }

    /// A status written before some fields existed (no `tilesEmpty`, `warnings`, `area`, ...)
    /// reads with those at their defaults; one without an `id` or with an unknown state is not a
    /// status; an unknown error code leaves `error` nil, not the whole status unread.
    func testOlderAndDamagedStatusFiles() throws {
        let old = Data(#"{"id":"a","state":"completed","progress":{"resourcesCompleted":3,"resourcesExpected":3},"error":null,"request":null,"context":null,"updatedAt":"2026-01-02T03:04:05Z"}"#.utf8)
        let st = try XCTUnwrap(StatusCoding.status(old))
        XCTAssertEqual(st.progress.resourcesCompleted, 3)
        XCTAssertEqual(st.progress.tilesEmpty, 0)
        XCTAssertEqual(st.warnings, [])
        XCTAssertNil(st.area); XCTAssertNil(st.request)
        XCTAssertEqual(st.updatedAt, Timestamp.parse("2026-01-02T03:04:05Z"))
        XCTAssertNil(StatusCoding.status(Data(#"{"state":"completed"}"#.utf8)))
        XCTAssertNil(StatusCoding.status(Data(#"{"id":"a","state":"finished"}"#.utf8)))
        XCTAssertNil(StatusCoding.status(Data(#"[1,2]"#.utf8)))
        XCTAssertNil(StatusCoding.status(Data(#"{"id":"a","state":"completed",}"#.utf8)), "a trailing comma is not JSON")
        // No readable `updatedAt`: not a status TileSpool wrote (prune must not age it from 1970).
        XCTAssertNil(StatusCoding.status(Data(#"{"id":"a","state":"completed","updatedAt":"not a date"}"#.utf8)))
        XCTAssertNil(StatusCoding.status(Data(#"{"id":"a","state":"completed"}"#.utf8)))
        let odd = try XCTUnwrap(StatusCoding.status(Data(#"{"id":"a","state":"failed","updatedAt":"2026-01-02T03:04:05Z","error":{"code":"noSuchCode","message":"m"}}"#.utf8)))
        XCTAssertNil(odd.error)
    }

    /// An event line is compact JSON with sorted keys: `time`, `id`, `state` and `error` always,
    /// other fields only when given; it reads back as written.
    func testAnEventLineHasOnlyItsFields() throws {
        let e = StatusEvent(id: "europe", state: "pausedUser", note: "pause", time: Date(timeIntervalSince1970: 1_796_000_000))
        let line = StatusCoding.eventLine(e)
        XCTAssertEqual(String(decoding: line, as: UTF8.self),
                       #"{"error":null,"id":"europe","note":"pause","state":"pausedUser","time":"\#(Timestamp.iso8601(e.time))"}"# + "\n")
        XCTAssertEqual(StatusCoding.event(line.dropLast()), e)
        var p = RegionProgress(); p.resourcesChecked = 5; p.resourcesChanged = 1; p.resourcesUnchanged = 4
        var f = StatusEvent.refreshFinished(p, note: "refresh finished")
        f.id = "europe"; f.state = "completed"; f.time = e.time
        let o = try object(StatusCoding.eventLine(f))
        XCTAssertEqual(Set(o.keys), ["time", "id", "state", "error", "note", "refresh", "resourcesChecked", "resourcesChanged", "resourcesUnchanged"])
        XCTAssertEqual(o["resourcesUnchanged"] as? Int, 4)
        XCTAssertEqual(StatusCoding.event(StatusCoding.eventLine(f)), f)
    }

    // MARK: in step with docs/contract.md

    /// The backticked names in the first column of the table that follows `heading` in contract.md
    /// (`allColumns`: in every column).
    func contractNames(after heading: String, allColumns: Bool = false) throws -> Set<String> {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/contract.md")
        let text = try String(contentsOf: url, encoding: .utf8)
        let start = try XCTUnwrap(text.range(of: heading))
        var names = Set<String>(), inTable = false, rows = 0
        for line in text[start.upperBound...].split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("|") { inTable = true } else if inTable { break } else { continue }
            rows += 1
            if rows <= 2 { continue } // the header and its rule
            let cells = line.split(separator: "|", omittingEmptySubsequences: false)
            let cell = allColumns ? line[...] : (cells.count > 1 ? cells[1] : "")
            let parts = cell.split(separator: "`", omittingEmptySubsequences: false)
            for (i, part) in parts.enumerated() where i % 2 == 1 && part.allSatisfy({ $0.isLetter || $0.isNumber }) { names.insert(String(part)) }
        }
        return names
    }

    /// Every field the status file holds is in contract.md's status table, and every field there is written.
    func testStatusFieldsAreTheContractsFields() throws {
        let documented = try contractNames(after: "`<id>.json` (pretty-printed, keys sorted):")
        let written = Set(try object(StatusCoding.statusFile(fullStatus())).keys)
        XCTAssertEqual(written.subtracting(documented).sorted(), [], "written, not in contract.md")
        XCTAssertEqual(documented.subtracting(written).sorted(), [], "in contract.md, not written")
        let progress = try contractNames(after: "MapLibre's `OfflineRegionStatus`:")
        let progressWritten = Set(try XCTUnwrap(try object(StatusCoding.statusFile(fullStatus()))["progress"] as? [String: Any]).keys)
        XCTAssertEqual(progressWritten.subtracting(progress).sorted(), [], "progress fields written, not in contract.md")
        XCTAssertEqual(progress.subtracting(progressWritten).sorted(), [], "progress fields in contract.md, not written")
    }

    /// Every key an event line can hold is named in contract.md's events.jsonl table.
    func testEventKeysAreInTheContract() throws {
        let documented = try contractNames(after: #"{"action":"delete","error":null,"id":"europe","state":"deleted""#, allColumns: true)
        let all = StatusEvent(id: "a", state: "queued", error: RegionError(code: .networkError, message: "m"), note: "n", action: "pause",
                              ignored: "i", refresh: "started", maxAge: 60, failedTiles: true, resourcesChecked: 1, resourcesChanged: 1,
                              resourcesUnchanged: 0, export: JSONValue(["format": "mbtiles"]),
                              replaced: PackReplaced(state: .completed, completedAt: nil, resources: 1, bytes: 2),
                              warnings: [RegionWarning(code: "c", message: "m")])
        let keys = Set(try object(StatusCoding.eventLine(all)).keys)
        XCTAssertEqual(keys.count, 16)
        XCTAssertEqual(keys.subtracting(documented).sorted(), [], "event keys not in contract.md")
    }

    /// The request fields the validator knows are exactly the rows of contract.md's request table.
    func testRequestFieldsAreTheContractsFields() throws {
        let documented = try contractNames(after: "## The request file")
        XCTAssertEqual(RequestValidator.knownFields.subtracting(documented).sorted(), [], "accepted, not in contract.md")
        XCTAssertEqual(documented.subtracting(RequestValidator.knownFields).sorted(), [], "in contract.md, not accepted")
    }

    // MARK: attack round 10

    /// `context` is kept verbatim: integers beyond 64 bits, 2^63 and -2^63, 2^64 and 23 digits
    /// keep every digit (they wrapped to -1 or became 1.8e19), small ones and decimals stay as
    /// they were; and the value reads back as written.
    func testContextNumbersKeepEveryDigit() throws {
        let text = "[18446744073709551615,9223372036854775808,-9223372036854775808,18446744073709551616,12345678901234567890123,9007199254740993,0.1,1e+300,2.5,-7]"
        let context = JSONValue(try JSONKind.parse(Data(text.utf8)))
        var st = fullStatus()
        st.context = context
        let file = StatusCoding.statusFile(st)
        let written = String(decoding: file, as: UTF8.self)
        let start = try XCTUnwrap(written.range(of: "\"context\" : ["))
        let array = written[start.upperBound...].prefix { $0 != "]" }.split(separator: ",").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
        XCTAssertEqual(array, text.dropFirst().dropLast().split(separator: ",").map(String.init))
        XCTAssertEqual(StatusCoding.status(file)?.context, context)
    }

    /// An events line without `time` or `error`, with an error of no known code, or with a field
    /// of the wrong type is not an event: `--wait` never acts on one (they ended waits with exit
    /// 4, or 0 for a refresh still under way). Real lines still read.
    func testEventLinesMissingFieldsOrOfWrongTypesAreNotEvents() {
        for bad in [#"{"id":"r7","state":"failed"}"#,
                    #"{"id":"r7","state":"failed","error":null}"#,
                    #"{"id":"r7","state":"failed","error":null,"time":"x"}"#,
                    #"{"id":"r6","state":"failed","error":{"code":"bogusCode","message":5},"time":"2026-12-06T00:00:00Z"}"#,
                    #"{"id":"r2","refresh":"finished","state":"completed","error":null,"time":"2026-12-06T00:00:00Z","resourcesChecked":"lots"}"#,
                    #"{"id":"r2","state":"completed","error":null,"time":"2026-12-06T00:00:00Z","note":5}"#] {
            XCTAssertNil(StatusCoding.event(Data(bad.utf8)), bad)
        }
        for good in [#"{"id":"r2","refresh":"finished","state":"completed","error":null,"time":"2026-12-06T00:00:00Z","resourcesChecked":3,"future":"kept out"}"#,
                     #"{"id":"r6","state":"failed","error":{"code":"httpError","message":"m","httpStatus":404},"time":"2026-12-06T00:00:00Z"}"#] {
            XCTAssertNotNil(StatusCoding.event(Data(good.utf8)), good)
        }
    }

    /// A state recorded for no live region (a refused request, `verify --repair`) changed now:
    /// its status has `stateChangedAt` (it was null, and `prune --older-than` could not age it),
    /// and its event is appended first.
    func testARecordedStateHasItsTimeOfChange() throws {
        let root = try TestScratch.folder("record")
        let layout = SpoolLayout(root: root.path)
        try layout.create()
        let writer = StatusWriter(layout: layout)
        let before = Date(timeIntervalSinceNow: -1)
        writer.record(RegionStatus(id: "bad", state: .failed, progress: RegionProgress(), error: RegionError(code: .invalidRequest, message: "x"),
                                   request: nil, context: .null), note: "refused")
        let st = try XCTUnwrap(writer.read(id: "bad"))
        XCTAssertGreaterThanOrEqual(try XCTUnwrap(st.stateChangedAt), before)
        let line = try String(contentsOfFile: layout.events, encoding: .utf8).split(separator: "\n").map(String.init)
        XCTAssertEqual(line.compactMap { StatusCoding.event(Data($0.utf8)) }.map(\.note), ["refused"])
    }

    /// An event appended after a line someone left without its newline starts a line of its own
    /// (it was glued onto the partial line, and readers lost it).
    func testAnEventAfterAPartialLineStartsALineOfItsOwn() throws {
        let root = try TestScratch.folder("events-partial")
        let layout = SpoolLayout(root: root.path)
        try layout.create()
        try Data(#"{"id":"zz","sta"#.utf8).write(to: URL(fileURLWithPath: layout.events))
        let writer = StatusWriter(layout: layout)
        writer.event(StatusEvent(id: "t1", state: "queued"))
        writer.event(StatusEvent(id: "t1", state: "downloading"))
        let lines = try String(contentsOfFile: layout.events, encoding: .utf8).split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, 3, lines.joined(separator: "\n"))
        XCTAssertEqual(lines.dropFirst().compactMap { StatusCoding.event(Data($0.utf8))?.state }, ["queued", "downloading"])
    }

    /// JSON for a terminal: U+2028, a bidi override, ESC and C1 controls become JSON escapes, so
    /// `status --json` stays valid JSON with the same value (it printed `\u{2028}`, not JSON).
    func testJSONForATerminalIsStillJSONWithTheSameValue() throws {
        let value = ["u": "a\u{2028}b\u{202E}c\u{1B}[31m\u{9B}d/é"]
        let json = String(decoding: try JSONSerialization.data(withJSONObject: value, options: [.sortedKeys]), as: UTF8.self)
        let safe = TerminalText.safeJSON(json)
        XCTAssertFalse(safe.unicodeScalars.contains { TerminalText.isInvisibleControl($0) || $0.value == 0x1B }, safe)
        XCTAssertEqual(try JSONSerialization.jsonObject(with: Data(safe.utf8)) as? [String: String], value)
        XCTAssertTrue(safe.contains("\\u2028") && safe.contains("\\u202e"), safe)
    }

    /// Counts and limits in a request (`maxTiles`, `maxFailedTiles`) take any whole number of at
    /// least 0: 2^53 and beyond were refused as "not a non-negative integer".
    func testLargeCountsAreCountsNotErrors() throws {
        func count(_ text: String) throws -> Int? { JSONKind.count(try JSONKind.parse(Data(text.utf8))) }
        XCTAssertEqual(try count("9007199254740992"), 9_007_199_254_740_992)
        XCTAssertEqual(try count("4611686018427387904"), 4_611_686_018_427_387_904)
        XCTAssertEqual(try count("18446744073709551615"), Int.max)
        XCTAssertEqual(try count("1e20"), Int.max)
        XCTAssertEqual(try count("0"), 0)
        XCTAssertNil(try count("-1")); XCTAssertNil(try count("1.5")); XCTAssertNil(try count("true")); XCTAssertNil(try count("\"5\""))
        let r = try RequestValidator.validate(Data(#"{"id":"a","tiles":["http://h.example/{z}/{x}/{y}.png"],"bounds":[0,0,1,1],"minZoom":0,"maxZoom":1,"maxTiles":9007199254740992,"maxFailedTiles":9223372036854775806}"#.utf8), fileName: "a.json")
        XCTAssertEqual(r.maxTiles, 9_007_199_254_740_992)
        XCTAssertEqual(r.maxFailedTiles, 9_223_372_036_854_775_806)
    }

    /// A status whose progress counts are damaged (`-5`, `1.5`, `9e99`, `"7"`) is unreadable, so
    /// `status` names the file instead of printing `resources -5/10`; missing counts and a
    /// progress of another type are read as before (0, none); a negative or absent rate is none.
    func testDamagedProgressCountsMakeTheStatusUnreadable() throws {
        func status(_ progress: String, rates: String = "") -> RegionStatus? {
            StatusCoding.status(Data(#"{"id":"a","state":"downloading","updatedAt":"2026-12-07T10:00:00Z"\#(rates),"progress":\#(progress)}"#.utf8))
        }
        for damaged in [#"{"resourcesCompleted": -5}"#, #"{"tilesExpected": 9e99}"#, #"{"bytesCompleted": 1.5}"#,
                        #"{"tilesCompleted": "7"}"#, #"{"tileBytesExpected": -1}"#] {
            XCTAssertNil(status(damaged), damaged)
        }
        let fine = try XCTUnwrap(status(#"{"resourcesCompleted": 5, "resourcesExpected": 10, "tileBytesExpected": null}"#))
        XCTAssertEqual(fine.progress.resourcesCompleted, 5)
        XCTAssertEqual(fine.progress.tilesCompleted, 0)
        XCTAssertNil(fine.progress.tileBytesExpected)
        XCTAssertEqual(try XCTUnwrap(status(#""none""#)).progress, RegionProgress())
        let rates = try XCTUnwrap(status("{}", rates: #","tilesPerSecond":-3,"bytesPerSecond":12.5,"etaSeconds":-1,"uniqueBytes":-5"#))
        XCTAssertNil(rates.uniqueBytes, "a negative count is none")
        XCTAssertNil(rates.tilesPerSecond)
        XCTAssertEqual(rates.bytesPerSecond, 12.5)
        XCTAssertNil(rates.etaSeconds)
        // Through the command line: the file is named, not printed with its numbers.
        let root = try TestScratch.folder("status-damaged")
        let layout = SpoolLayout(root: root.path)
        try layout.create()
        try Data(#"{"id":"a","state":"downloading","updatedAt":"2026-12-07T10:00:00Z","progress":{"resourcesCompleted":-5,"resourcesExpected":10}}"#.utf8)
            .write(to: URL(fileURLWithPath: layout.statusJSON("a")))
        let (rc, out) = try runTool(SpoolFixture.binary, ["status", "--spool", root.path])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.contains("a  status file not readable (status/a.json: damaged, cut short or edited by hand)") && !out.contains("-5"), out)
    }

    /// `tilespool status --json` of a status whose context holds U+2028 and a bidi override is
    /// valid JSON; a status file that cannot be read is named by `status` and `status ID`, not
    /// left out or denied; `prune` never selects a region whose status has no readable time.
    func testTheCommandLineOnOddStatusFiles() throws {
        let root = try TestScratch.folder("status-odd")
        let layout = SpoolLayout(root: root.path)
        try layout.create()
        let writer = StatusWriter(layout: layout)
        var st = RegionStatus(id: "ctx", state: .completed, progress: RegionProgress(), error: nil, request: nil,
                              context: .object(["u": .string("a\u{2028}b\u{202E}")]), updatedAt: Date(timeIntervalSinceNow: -86400 * 30))
        st.stateChangedAt = st.updatedAt
        try writer.write(st)
        try Data(#"{"id":"odd","state":"completed","updatedAt":"not a date","progress":{}}"#.utf8).write(to: URL(fileURLWithPath: layout.statusJSON("odd")))
        // Standard output alone is the JSON; standard error names the unreadable file.
        var (rc, out) = try runTool("/bin/sh", ["-c", "exec \"$0\" status --spool \"$1\" --json 2>/dev/null", SpoolFixture.binary, root.path])
        XCTAssertEqual(rc, 0, out)
        let list = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [[String: Any]], out)
        (rc, out) = try runTool("/bin/sh", ["-c", "exec \"$0\" status --spool \"$1\" --json 2>&1 >/dev/null", SpoolFixture.binary, root.path])
        XCTAssertEqual(out, "tilespool: odd  status file not readable (status/odd.json: damaged, cut short or edited by hand)\n")
        XCTAssertEqual((list.first?["context"] as? [String: String])?["u"], "a\u{2028}b\u{202E}")
        (rc, out) = try runTool(SpoolFixture.binary, ["status", "--spool", root.path])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.contains("odd  status file not readable"), out)
        (rc, out) = try runTool(SpoolFixture.binary, ["status", "odd", "--spool", root.path])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("status/odd.json is not a status tilespool can read"), out)
        // A folder by a status's name is not a region either, and is said so (round 13).
        try FileManager.default.createDirectory(atPath: layout.statusJSON("dirx"), withIntermediateDirectories: false)
        (rc, out) = try runTool(SpoolFixture.binary, ["status", "dirx", "--spool", root.path])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("status/dirx.json is not a status tilespool can read"), out)
        (rc, out) = try runTool(SpoolFixture.binary, ["prune", "--older-than", "1d", "--dry-run", "--spool", root.path])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.contains("would delete ctx"), out)
        XCTAssertFalse(out.contains("odd"), out)
    }

    /// A time that does not exist (February 30, hour 25, month 13) is not a time: `timegm` rolled
    /// it over, and such a line ended `--wait`, such a status was listed and pruned (round 11).
    func testImpossibleTimesAreNotTimes() {
        for bad in ["2026-02-30T12:00:00Z", "2026-12-06T25:00:00Z", "2026-13-45T00:00:00Z", "2026-12-06T23:60:00Z", "2026-12-06T99:99:99Z"] {
            XCTAssertNil(Timestamp.parse(bad), bad)
            XCTAssertNil(StatusCoding.event(Data(#"{"error":null,"id":"s2","state":"completed","time":"\#(bad)"}"#.utf8)), bad)
            XCTAssertNil(StatusCoding.status(Data(#"{"id":"s2","state":"completed","updatedAt":"\#(bad)"}"#.utf8)), bad)
        }
        XCTAssertEqual(Timestamp.parse("2024-02-29T23:59:59Z").map(Timestamp.iso8601), "2024-02-29T23:59:59Z")
    }

    /// Each request field is declared once (`RequestField.all`): a request giving every one of
    /// them at a value other than its default is written (`jsonObject`) with each of them, and
    /// reads back as the same request; the fields that do not change what is fetched are the five
    /// contract.md names (a re-drop differing only there refreshes).
    func testEveryRequestFieldIsReadAndWrittenFromItsOneDeclaration() throws {
        let text = #"{"id":"all","style":"http://h.example/style.json","bounds":[7.4,43.7,7.5,43.8],"minZoom":2,"maxZoom":9,"pixelRatio":2,"includeIdeographs":true,"maxTiles":5000,"context":{"by":"ops","n":[1,2.5]},"exports":[{"format":"mbtiles"}],"refreshAfter":3600,"emptyStatuses":[404,400],"headers":{"Referer":"https://maps.example.org/"},"maxFailedTiles":3,"subdomains":["x","y"],"maxRequestsPerSecond":2.5,"allowEmpty":true}"#
        let r = try RequestValidator.validate(Data(text.utf8), fileName: "all.json")
        let o = r.jsonObject
        for f in RequestField.all { XCTAssertNotNil(o[f.name], "\(f.name) is written") }
        XCTAssertEqual(Set(o.keys).subtracting(RequestValidator.knownFields), [])
        XCTAssertEqual(try RequestValidator.validate(JSONKind.serialize(o), fileName: "all.json"), r)
        XCTAssertEqual(r.emptyStatuses, [400, 404])
        XCTAssertEqual(Set(RegionRequest.notFetchedFields), ["context", "exports", "refreshAfter", "maxRequestsPerSecond", "allowEmpty"])
        // A null is the default for every field (contract.md: as if absent); pixelRatio and
        // includeIdeographs refused it until attack round 12, unlike allowEmpty of the same type.
        for f in RequestField.all {
            let doc = #"{"id":"n","tiles":["http://h.example/{z}/{x}/{y}.png"],"bounds":[0,0,1,1],"minZoom":0,"maxZoom":1,"\#(f.name)":null}"#
            let r = try? RequestValidator.validate(Data(doc.utf8), fileName: "n.json")
            XCTAssertNotNil(r, "\(f.name): null is the default")
            XCTAssertEqual(r.map { $0.jsonObject as NSDictionary }, (try? RequestValidator.validate(Data(doc.replacingOccurrences(of: ",\"\(f.name)\":null", with: "").utf8), fileName: "n.json")).map { $0.jsonObject as NSDictionary }, f.name)
        }
        // refreshAfter of any size (it was refused from 9e15 with a message about its minimum).
        let late = #"{"id":"n","tiles":["http://h.example/{z}/{x}/{y}.png"],"bounds":[0,0,1,1],"minZoom":0,"maxZoom":1,"refreshAfter":9000000000000000}"#
        XCTAssertEqual(try RequestValidator.validate(Data(late.utf8), fileName: "n.json").refreshAfter, 9_000_000_000_000_000)
    }

    /// `bounds` [180, s, -180, n] is a box of no width (180 and -180 are one meridian), refused
    /// as [10, s, 10, n] is; it planned the columns on both sides of the line (attack round 12).
    func testAZeroWidthBoxOnTheAntimeridianIsRefused() {
        for box in ["[180,0,-180,10]", "[10,0,10,10]"] {
            let doc = #"{"id":"z","tiles":["http://h.example/{z}/{x}/{y}.png"],"bounds":\#(box),"minZoom":0,"maxZoom":3}"#
            XCTAssertThrowsError(try RequestValidator.validate(Data(doc.utf8), fileName: "z.json"), box) { e in
                XCTAssertTrue((e as? RegionError)?.message.contains("the box has no area") == true, "\(e)")
            }
        }
        let wide = #"{"id":"z","tiles":["http://h.example/{z}/{x}/{y}.png"],"bounds":[179,0,-179,10],"minZoom":0,"maxZoom":3}"#
        XCTAssertNoThrow(try RequestValidator.validate(Data(wide.utf8), fileName: "z.json"))
    }

    /// The daemon reads back what it wrote, however large the request made it: a request of
    /// nearly 1 MiB is stored with its defaults, pretty-printed, past 1 MiB (a geometry of
    /// 100,000 positions to about 5 MB), and the region was lost at the next start; its status
    /// file, which repeats the request, was called unreadable past 4 MiB (attack round 13).
    func testStoredRequestsAndStatusesLargerThanARequestFileReadBack() throws {
        let root = try TestScratch.folder("big-stored")
        var request = RegionRequest(id: "big", source: .tiles(["http://h.example/{z}/{x}/{y}.png"]),
                                    bounds: GeoBounds(west: 0, south: 0, east: 1, north: 1), minZoom: 0, maxZoom: 1)
        request.contextJSON = JSONKind.serialize(String(repeating: "\u{2028}", count: 900_000)) // 2.7 MB of UTF-8
        let files = RegionFiles(dir: root.path + "/regions/big")
        try files.create(request: request)
        XCTAssertGreaterThan(Files.size(root.path + "/regions/big/request.json") ?? 0, RequestValidator.maxFileSize)
        XCTAssertEqual(try files.loadRequest(), request)
        let layout = SpoolLayout(root: root.path + "/spool")
        try layout.create()
        let writer = StatusWriter(layout: layout)
        try writer.write(RegionStatus(id: "big", state: .completed, progress: RegionProgress(), error: nil,
                                      request: JSONValue(request.redactedJSONObject), context: JSONValue(request.context)))
        XCTAssertGreaterThan(Files.size(layout.statusJSON("big")) ?? 0, 4 << 20)
        XCTAssertEqual(writer.read(id: "big")?.context, JSONValue(request.context))
    }
}
