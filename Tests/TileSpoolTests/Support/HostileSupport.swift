// Helpers shared by BadRequestTests, FaultyServerTests and WatchFolderTests (issue 4): what a user
// checks in the spool after handing the daemon something hostile.
import Foundation
import Glibc
import XCTest

extension SpoolFixture {
    var requestsDir: String { spool + "/requests" }
    var rejectedDir: String { spool + "/rejected" }

    /// True when a directory entry exists at `path` (lstat: a dangling symlink exists too).
    func entryExists(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0
    }

    func inRequests(_ name: String) -> Bool { entryExists(requestsDir + "/" + name) }
    func inRejected(_ name: String) -> Bool { entryExists(rejectedDir + "/" + name) }

    /// The text of `rejected/<name>.error`, or nil.
    func rejectionText(_ name: String) -> String? {
        try? String(contentsOfFile: rejectedDir + "/" + name + ".error", encoding: .utf8)
    }

    /// Names in a folder of the spool (empty when missing).
    func names(in dir: String) -> [String] { (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? [] }

    /// `error` of `status/<id>.json`.
    func errorObject(_ id: String) -> [String: Any]? { status(id)?["error"] as? [String: Any] }

    /// Files left in the store's temp folder.
    func storeTempFiles() -> [String] { names(in: store + "/tmp") }

    /// Waits until the last line of `events.jsonl` for `id` says `state` (the daemon writes the
    /// status files first, then appends the event).
    func waitForEvent(_ id: String, _ state: String, timeout: TimeInterval = 10,
                      file: StaticString = #filePath, line: UInt = #line) throws {
        try waitUntil("events.jsonl shows \(id) \(state)", timeout: timeout, file: file, line: line) { eventStates(id).last == state }
    }

    /// Every line of the daemon's log is one logfmt entry, `time=<RFC 3339> level=... msg=...`:
    /// control characters in file names or ids cannot cut an entry or forge one.
    func assertLogLinesAreEntries(file: StaticString = #filePath, line: UInt = #line) {
        let digits = Set("0123456789")
        for l in log().split(separator: "\n", omittingEmptySubsequences: false).dropLast() {
            let t = Array(l.dropFirst(5).prefix(20))
            let ok = l.hasPrefix("time=") && t.count == 20 && t.enumerated().allSatisfy { i, c in
                switch i { case 4, 7: c == "-"; case 10: c == "T"; case 13, 16: c == ":"; case 19: c == "Z"; default: digits.contains(c) }
            } && l.dropFirst(25).hasPrefix(" level=") && l.contains(" msg=")
            XCTAssertTrue(ok, "not a log entry: \(l.debugDescription)", file: file, line: line)
        }
    }

    /// Creates `dir` (and parents) when missing.
    func makeFolder(_ dir: String) throws {
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    }

    /// Writes `data` into `requests/<name>` in place: open, write, close (no rename).
    func writeInPlace(_ name: String, _ data: Data) throws {
        try makeFolder(requestsDir)
        let fd = open(requestsDir + "/" + name, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { throw SupportError("open \(name): errno \(errno)") }
        defer { close(fd) }
        try writeAll(fd, data)
    }

    /// Every object in the store is whole: its bytes hash to its name (sha256sum), it is one of
    /// `allowed` (the hashes of bodies the server sent whole), and no temp file is left over.
    func assertOnlyWholeBodiesStored(_ allowed: Set<String>, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(storeFaults(), "", "an object does not hash to its name", file: file, line: line)
        for name in objects() {
            XCTAssertTrue(allowed.contains(name), "object \(name) is not a body the server sent whole: \(String(decoding: (objectData(name) ?? Data()).prefix(80), as: UTF8.self))", file: file, line: line)
        }
        XCTAssertEqual(storeTempFiles(), [], "temp files left in the store", file: file, line: line)
    }

    /// The status counts equal the manifest's (for any state, not only completed).
    func assertCountsMatchManifest(_ id: String, file: StaticString = #filePath, line: UInt = #line) {
        let lines = manifest(id)
        let p = progress(id)
        XCTAssertEqual(p["resourcesCompleted"] ?? 0, lines.count, "resourcesCompleted of \(id)", file: file, line: line)
        XCTAssertEqual(p["tilesCompleted"] ?? 0, lines.filter { $0.kind == "tile" }.count, "tilesCompleted of \(id)", file: file, line: line)
        XCTAssertEqual(p["bytesCompleted"] ?? 0, lines.reduce(0) { $0 + $1.bytes }, "bytesCompleted of \(id)", file: file, line: line)
        let held = storeObjects()
        for l in lines where l.sha != "-" && l.sha != "!" {
            XCTAssertNotNil(held[l.sha], "object of \(l.key) missing", file: file, line: line)
        }
    }
}

/// Writes all of `data` to `fd`.
func writeAll(_ fd: Int32, _ data: Data) throws {
    try data.withUnsafeBytes { (buf: UnsafeRawBufferPointer) in
        var off = 0
        while off < buf.count {
            let n = write(fd, buf.baseAddress! + off, buf.count - off)
            if n < 0 { if errno == EINTR { continue }; throw SupportError("write: errno \(errno)") }
            off += n
        }
    }
}

/// JSON text of `object` (sorted keys, slashes not escaped).
func jsonData(_ object: Any) -> Data {
    (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes, .fragmentsAllowed])) ?? Data()
}

extension FaultServer {
    /// A `tiles` request for the templates `paths` (server paths with `{z}/{x}/{y}`) over the world
    /// at zooms `minZoom...maxZoom` (1 tile at z0, 5 over z0-1, 21 over z0-2).
    func tilesRequest(_ paths: [String], id: String? = nil, minZoom: Int = 0, maxZoom: Int = 0) -> [String: Any] {
        var o: [String: Any] = ["tiles": paths.map { url($0) }, "bounds": [-180, -85, 180, 85],
                                "minZoom": minZoom, "maxZoom": maxZoom]
        if let id { o["id"] = id }
        return o
    }

    /// The paths of the tiles of `template` (a server path with `{z}/{x}/{y}`) over the world at z0...maxZoom.
    static func worldPaths(_ template: String, maxZoom: Int) -> [String] {
        var out: [String] = []
        for z in 0...maxZoom {
            for x in 0..<(1 << z) {
                for y in 0..<(1 << z) {
                    out.append(template.replacingOccurrences(of: "{z}", with: "\(z)").replacingOccurrences(of: "{x}", with: "\(x)")
                        .replacingOccurrences(of: "{y}", with: "\(y)"))
                }
            }
        }
        return out
    }
}
