// Issue 29, what an attack from the outside found after the first round of fixes (a helper with
// only the docs and the binary): each test reproduces one finding through the binary, or pins the
// pure rule that fixes it.
import Foundation
import Glibc
import TileSpoolCore
import TileSpoolIO
import XCTest

final class TrustAttackTests: FaultServerSpoolTestCase {
    /// A percent-encoded host (`tile%2eopenstreetmap%2eorg`, which libcurl decodes) is refused like
    /// the plain one, in a request and by `plan`.
    func testAPercentEncodedPolicyHostIsRefused() throws {
        XCTAssertNotNil(TileUsagePolicy.refusal(urls: ["http://tile%2eopenstreetmap%2eorg:9001/{z}/{x}/{y}.png"], allowedHosts: []))
        XCTAssertNotNil(TileUsagePolicy.refusal(urls: ["https://TILE%2EOPENSTREETMAP.org/{z}/{x}/{y}.png"], allowedHosts: []))
        try fx.start()
        try fx.drop("osm.json", ["tiles": ["http://tile%2eopenstreetmap%2eorg/{z}/{x}/{y}.png"], "bounds": [0, 0, 1, 1], "minZoom": 0, "maxZoom": 0])
        try fx.waitForState("osm", "failed")
        XCTAssertEqual(fx.errorCode("osm"), "policyRefused")
    }

    /// A refresh whose plain GET (nothing stored to be conditional on) is answered 304 does not
    /// count the resource unchanged: the server lies, the refresh is abandoned, the pack stays.
    func testA304ToAnUnconditionalRefreshRequestIsNotBelieved() throws {
        try fx.start()
        try fx.drop("liar.json", server.tilesRequest(["/liar304/l/{z}/{x}/{y}.png"], id: "liar"))
        try fx.waitForState("liar", "completed")
        let before = fx.manifest("liar").map { "\($0.sha) \($0.url)" }
        let (rc, out) = try fx.cli(["refresh", "liar", "--wait", "--spool", fx.spool])
        XCTAssertNotEqual(rc, 0, out)
        XCTAssertEqual(fx.state("liar"), "completed")
        XCTAssertTrue((fx.errorMessage("liar") ?? "").contains("Not Modified to a request that was not conditional"), fx.errorMessage("liar") ?? "")
        XCTAssertEqual(fx.progress("liar")["resourcesUnchanged"], 0)
        XCTAssertEqual(fx.manifest("liar").map { "\($0.sha) \($0.url)" }, before)
    }

    /// A 206 to a request for the whole body is never stored as the tile.
    func testA206IsNotATile() throws {
        try fx.start(["--max-retries", "1"])
        // A vector tile: no image signature to catch the cut body.
        try fx.drop("part.json", server.tilesRequest(["/partial/p/{z}/{x}/{y}.pbf"], id: "part"))
        try fx.waitForState("part", "failed")
        XCTAssertEqual(fx.errorCode("part"), "badResponse")
        XCTAssertEqual(fx.objects(), [])
    }

    /// A server's text reaches `tilespool status` escaped: no escape sequence drives the terminal,
    /// and a body echoing the URL asked shows its key redacted.
    func testServerTextReachesTheTerminalEscapedAndRedacted() throws {
        XCTAssertEqual(TerminalText.safe("a\u{1B}]0;PWN\u{07}b\nc\td\u{9B}"), "a\\u{1B}]0;PWN\\u{7}b\nc\td\\u{9B}")
        // Attack round 3: bidirectional overrides (a Content-Type reversing the text after it)
        // and line separators, in the terminal and in the log.
        XCTAssertEqual(TerminalText.safe("text/\u{202E}gnp\u{2066}x\u{2028}y\u{200F}é"), "text/\\u{202E}gnp\\u{2066}x\\u{2028}y\\u{200F}é")
        XCTAssertEqual(LogFmt.value("a\u{202E}b\u{9B}c"), "\"a\\u202eb\\u009bc\"")
        XCTAssertEqual(LogFmt.value("é"), "é")
        try fx.start(["--max-retries", "0"])
        try fx.drop("txt.json", server.tilesRequest(["/text/t/{z}/{x}/{y}.png?key=REFLECTED"], id: "txt"))
        try fx.waitForState("txt", "failed")
        // The status itself, rewritten with an escape sequence in its message, as a hostile
        // Content-Type would put there.
        var st = try XCTUnwrap(fx.status("txt"))
        var e = try XCTUnwrap(st["error"] as? [String: Any])
        e["message"] = "text/x\u{1B}]0;PWNED\u{07}\u{1B}[2J"
        st["error"] = e
        try JSONSerialization.data(withJSONObject: st).write(to: URL(fileURLWithPath: fx.spool + "/status/txt.json"))
        let (rc, out) = try fx.cli(["status", "txt", "--spool", fx.spool])
        XCTAssertEqual(rc, 0, out)
        XCTAssertFalse(out.unicodeScalars.contains { $0.value == 0x1B || $0.value == 0x07 }, out.debugDescription)
        XCTAssertTrue(out.contains("\\u{1B}]0;PWNED"), out)
        XCTAssertEqual(Redaction.redactEmbedded("'/0/0/0.png?key=REFLECTED'"), "'/0/0/0.png?key=REDACTED'")
        XCTAssertEqual(Redaction.redactEmbedded(#"<a href="https://h/x?a=1&subscription-key=S1;token=T2">x</a> https://u:p@h/"#),
                       #"<a href="https://h/x?a=1&subscription-key=REDACTED;token=REDACTED">x</a> https://REDACTED@h/"#)
        XCTAssertEqual(Redaction.redact("https://h/t?layer=a;api-key=K&x=1"), "https://h/t?layer=a;api-key=REDACTED&x=1")
    }

    /// Attack round 2: a request's field name carrying escape sequences is quoted in
    /// `rejected/<name>.error` with the control characters written as `\u{XX}` (a script that
    /// cats the file to a terminal is not driven by them).
    func testRejectedErrorFilesCarryNoControlCharacters() throws {
        try fx.start()
        try fx.dropRaw("esc.json", Data(#"{"id":"esc","tiles":["http://127.0.0.1:1/{z}/{x}/{y}.png"],"bounds":[0,0,1,1],"maxZoom":1,"\u001b]0;owned\u0007\u009b31m":1}"#.utf8))
        let path = fx.spool + "/rejected/esc.json.error"
        try waitUntil("esc.json is refused") { FileManager.default.fileExists(atPath: path) }
        let bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        XCTAssertFalse(bytes.contains(0x1B) || bytes.contains(0x07), String(decoding: bytes, as: UTF8.self))
        XCTAssertFalse(String(decoding: bytes, as: UTF8.self).unicodeScalars.contains { $0.value == 0x9B })
        XCTAssertTrue(String(decoding: bytes, as: UTF8.self).contains(#"unknown field '\u{1B}]0;owned\u{7}\u{9B}31m'"#), String(decoding: bytes, as: UTF8.self))
    }

    /// A request and a control file whose modification times lie past 2262 or before 1677 (a
    /// `touch -d 2300-01-01`, a bogus mtime kept by `cp -p`): their times in nanoseconds do not
    /// fit an Int, which trapped the daemon at every rescan (a review of 2026-12-07). Both are
    /// taken, by the daemon's first scan, and the daemon goes on.
    func testFilesWithModificationTimesOutsideAnIntOfNanosecondsAreTaken() throws {
        let requests = fx.spool + "/requests", tmp = fx.spool + "/.far"
        try FileManager.default.createDirectory(atPath: requests, withIntermediateDirectories: true)
        for (name, year) in [("future.json", 2300.0), ("past.json", -400.0)] {
            let id = String(name.dropLast(5))
            try JSONSerialization.data(withJSONObject: server.tilesRequest(["/ok/t/{z}/{x}/{y}.png"], id: id, maxZoom: 1)).write(to: URL(fileURLWithPath: tmp))
            let seconds = (year - 1970) * 365.2425 * 86400
            var times = [timespec(tv_sec: Int(seconds), tv_nsec: 0), timespec(tv_sec: Int(seconds), tv_nsec: 0)]
            XCTAssertEqual(utimensat(AT_FDCWD, tmp, &times, 0), 0, "the filesystem takes the time")
            XCTAssertEqual(rename(tmp, requests + "/" + name), 0)
        }
        try fx.start() // found by the scan at start, not by an inotify event
        try fx.waitForState("future", "completed")
        try fx.waitForState("past", "completed")
        XCTAssertEqual(fx.daemon?.isRunning, true, fx.log().suffix(2000).description)
    }

    /// `status/` or `rejected/` swapped for a symlink while the daemon runs: nothing lands in the
    /// folder the link points to.
    func testSpoolFoldersSwappedForSymlinksAreNotFollowed() throws {
        try fx.start()
        let outside = fx.root.appendingPathComponent("outside").path
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        for folder in ["status", "rejected"] {
            XCTAssertEqual(rename(fx.spool + "/" + folder, fx.spool + "/" + folder + ".real"), 0)
            XCTAssertEqual(symlink(outside, fx.spool + "/" + folder), 0)
        }
        try fx.dropRaw("bad.json", Data("{,}".utf8))
        try fx.drop("good.json", server.tilesRequest(["/ok/g/{z}/{x}/{y}.png"], id: "good"))
        try waitUntil("the daemon handled both files") { !fx.inRequests("bad.json") && !fx.inRequests("good.json") && server.hits("/ok/g/0/0/0.png") == 1 }
        try waitUntil("the daemon logged its refusals") { fx.log().contains("cannot open") || fx.log().contains("cannot write status") }
        XCTAssertEqual(fx.names(in: outside), [])
    }

    /// `verify --repair` never moves a bad object through a `quarantine` symlink; gc puts back an
    /// object it set aside only when its bytes are that object.
    func testQuarantineAndGCSetAsideAreChecked() throws {
        try fx.start()
        try fx.drop("q.json", server.tilesRequest(["/ok/q/{z}/{x}/{y}.png"], id: "q", maxZoom: 1))
        try fx.waitForState("q", "completed")
        XCTAssertEqual(fx.stop(), 0)
        let outside = fx.root.appendingPathComponent("outside").path
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        XCTAssertEqual(symlink(outside, fx.store + "/quarantine"), 0)
        let sha = try XCTUnwrap(fx.manifest("q").first { $0.sha != "-" }?.sha)
        try Data("IMPORTANT".utf8).write(to: URL(fileURLWithPath: outside + "/" + sha))
        XCTAssertEqual(try runTool("/usr/bin/python3", [SpoolFixture.storeReader, "corrupt", fx.store, sha]).0, 0)
        let (rc, out) = try fx.cli(["verify", "--repair", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 1, out)
        XCTAssertEqual(try String(contentsOfFile: outside + "/" + sha, encoding: .utf8), "IMPORTANT")
        XCTAssertEqual(fx.names(in: outside), [sha])

        // gc: something else under tmp/gc-<sha> is not taken for the object.
        let other = String(repeating: "ab", count: 32)
        try Data("EVIL".utf8).write(to: URL(fileURLWithPath: fx.store + "/tmp/gc-" + other))
        _ = try fx.cli(["gc", "--spool", fx.spool, "--store", fx.store])
        XCTAssertNil(fx.storeObjects()[other])
    }

    /// `export --source` is a source name, never a path.
    func testExportSourceIsNotAPath() throws {
        try fx.start()
        try fx.drop("s.json", server.tilesRequest(["/ok/s/{z}/{x}/{y}.png"], id: "s"))
        try fx.waitForState("s", "completed")
        let (rc, out) = try fx.cli(["export", "s", "--format", "pmtiles", "--source", "../../x", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 2, out)
    }

    /// An ETag that cannot be sent back byte for byte (empty, a TAB, non-ASCII) is not kept.
    func testOnlyStorableETagsAreKept() {
        XCTAssertNil(HTTPClient.storableETag(""))
        XCTAssertNil(HTTPClient.storableETag("\r"))
        XCTAssertNil(HTTPClient.storableETag("\"a\tb\""))
        XCTAssertNil(HTTPClient.storableETag("\"é\""))
        XCTAssertEqual(HTTPClient.storableETag(" W/\"v1\" "), "W/\"v1\"")
    }
}
