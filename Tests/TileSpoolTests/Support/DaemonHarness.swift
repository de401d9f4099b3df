import Foundation
import XCTest

/// A spool and store in a fresh temp folder, and the real `tilespool` binary run on them as a child
/// process, the way an operator runs it. Everything is read back from the files a shell script
/// would read: `status/<id>.state`, `status/<id>.json`, `events.jsonl`, the manifest, the objects.
final class SpoolFixture: @unchecked Sendable {
    let root: URL
    var spool: String { root.appendingPathComponent("spool").path }
    var store: String { root.appendingPathComponent("store").path }
    private(set) var daemon: Process?
    private var logHandle: FileHandle?
    var logPath: String { root.appendingPathComponent("daemon.log").path }
    /// Variables added to the environment of the daemon and of `cli` (the S3 credentials, say).
    var environment: [String: String] = [:]

    /// The built `tilespool` executable, next to the test bundle.
    static var binary: String {
        if let env = ProcessInfo.processInfo.environment["TILESPOOL_BIN"] { return env }
        let bundle = Bundle(for: SpoolFixture.self).bundleURL
        for dir in [bundle, bundle.deletingLastPathComponent()] {
            let candidate = dir.appendingPathComponent("tilespool").path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return bundle.appendingPathComponent("tilespool").path
    }

    init(storeInside: String? = nil) throws {
        let box = WeakBox<SpoolFixture>()
        root = try TestScratch.folder("tilespool-test") { box.value?.killDaemon() }
        try FileManager.default.createDirectory(atPath: root.appendingPathComponent("spool").path, withIntermediateDirectories: true)
        box.value = self
    }

    /// Kept until the test bundle ends (a fixture shared by the tests of a class), not removed
    /// when the current test ends.
    func keepAcrossTests() { TestScratch.keepUntilEnd(root) }

    private func killDaemon() {
        if let d = daemon, d.isRunning { kill(d.processIdentifier, SIGKILL); d.waitUntilExit() }
    }

    deinit { killDaemon() }

    /// Starts `tilespool run --spool S --store T` plus `extra` options; log lines go to `logPath`.
    /// Options for tests: short retry delays so that faults resolve within seconds. With
    /// `ignoringInterrupts`, the daemon starts with SIGINT and SIGQUIT ignored, as a shell
    /// script's `tilespool run &` starts it (`/bin/sh` sets them ignored, then execs it: the
    /// process keeps its pid).
    func start(_ extra: [String] = [], ignoringInterrupts: Bool = false, ignoringHangup: Bool = false) throws {
        let p = Process()
        let arguments = ["run", "--spool", spool, "--store", store, "--retry-delay", "0.1"] + extra
        if ignoringInterrupts || ignoringHangup {
            // As a shell starts a background job (INT, QUIT), or as `nohup` does (HUP).
            let traps = (ignoringInterrupts ? ["INT", "QUIT"] : []) + (ignoringHangup ? ["HUP"] : [])
            p.executableURL = URL(fileURLWithPath: "/bin/sh")
            p.arguments = ["-c", "trap '' \(traps.joined(separator: " ")); exec \"$0\" \"$@\"", SpoolFixture.binary] + arguments
        } else {
            p.executableURL = URL(fileURLWithPath: SpoolFixture.binary)
            p.arguments = arguments
        }
        if !environment.isEmpty { p.environment = ProcessInfo.processInfo.environment.merging(environment) { _, b in b } }
        if !FileManager.default.fileExists(atPath: logPath) { XCTAssertTrue(FileManager.default.createFile(atPath: logPath, contents: nil)) }
        let h = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        // This start's own "watching" line, not an earlier run's: only the log past here counts.
        let offset = Int(h.seekToEndOfFile())
        p.standardError = h
        p.standardOutput = h
        try p.run()
        daemon = p
        logHandle = h
        try waitUntil("the daemon takes its lock", timeout: 10) {
            let text = FileManager.default.contents(atPath: logPath).map { String(decoding: $0.dropFirst(offset), as: UTF8.self) } ?? ""
            return text.contains("watching") || !p.isRunning
        }
        XCTAssertTrue(p.isRunning, "daemon exited at start: \(log())")
    }

    /// Stops the daemon with `signal` (SIGTERM unless said) and waits; its exit status. One still
    /// running after 60 s fails the test and is killed (SIGKILL: status -1).
    @discardableResult
    func stop(signal: Int32 = SIGTERM) -> Int32 {
        guard let d = daemon else { return -1 }
        if d.isRunning { kill(d.processIdentifier, signal) }
        let deadline = Date().addingTimeInterval(60)
        while d.isRunning && Date() < deadline { usleep(10_000) }
        if d.isRunning {
            XCTFail("the daemon did not stop on signal \(signal): \(log().suffix(2000))")
            kill(d.processIdentifier, SIGKILL)
            d.waitUntilExit()
            daemon = nil
            return -1
        }
        d.waitUntilExit()
        daemon = nil
        return d.terminationStatus
    }

    /// SIGKILL (kill -9), and wait for it to be gone.
    func kill9() {
        guard let d = daemon else { return }
        if d.isRunning { kill(d.processIdentifier, SIGKILL) }
        d.waitUntilExit()
        daemon = nil
    }

    func log() -> String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Drops a request the documented safe way: write a dotfile in requests/, then rename it.
    func drop(_ name: String, _ json: Any) throws {
        let data = try JSONSerialization.data(withJSONObject: json, options: [.sortedKeys])
        try dropRaw(name, data)
    }

    func dropRaw(_ name: String, _ data: Data) throws {
        let dir = spool + "/requests"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let tmp = dir + "/.tmp-" + UUID().uuidString
        try data.write(to: URL(fileURLWithPath: tmp))
        XCTAssertEqual(rename(tmp, dir + "/" + name), 0)
    }

    /// Drops `control/<id>.<action>` (empty file, dotfile then rename).
    func control(_ id: String, _ action: String) throws {
        let dir = spool + "/control"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let tmp = dir + "/.tmp-" + UUID().uuidString
        XCTAssertTrue(FileManager.default.createFile(atPath: tmp, contents: Data()))
        XCTAssertEqual(rename(tmp, dir + "/\(id).\(action)"), 0)
    }

    /// The word in `status/<id>.state` (without the newline), or nil.
    func state(_ id: String) -> String? {
        guard let s = try? String(contentsOfFile: "\(spool)/status/\(id).state", encoding: .utf8) else { return nil }
        return s.hasSuffix("\n") ? String(s.dropLast()) : "<no newline>" + s
    }

    /// `status/<id>.json` as a dictionary.
    func status(_ id: String) -> [String: Any]? {
        guard let d = FileManager.default.contents(atPath: "\(spool)/status/\(id).json") else { return nil }
        return (try? JSONSerialization.jsonObject(with: d)) as? [String: Any]
    }

    func progress(_ id: String) -> [String: Int] {
        var out: [String: Int] = [:]
        for (k, v) in (status(id)?["progress"] as? [String: Any]) ?? [:] { if let n = v as? NSNumber { out[k] = n.intValue } }
        return out
    }

    /// Resumes `id` and waits until it is `completed`, appending every `tilesCompleted` seen on
    /// the way to `seen` (for "progress never goes backwards").
    /// - Throws: when the control file cannot be written or the region does not complete in time.
    func resumeUntilCompleted(_ id: String, seen: inout [Int], timeout: TimeInterval = 60) throws {
        try control(id, "resume")
        try waitUntil("\(id) completes", timeout: timeout) {
            seen.append(progress(id)["tilesCompleted"] ?? 0)
            return state(id) == "completed"
        }
    }

    func errorCode(_ id: String) -> String? { (status(id)?["error"] as? [String: Any])?["code"] as? String }
    func errorMessage(_ id: String) -> String? { (status(id)?["error"] as? [String: Any])?["message"] as? String }

    /// Waits until `<id>.state` says `state` (failing early, with the log, when the daemon died).
    func waitForState(_ id: String, _ state: String, timeout: TimeInterval = 60) throws {
        try waitUntil("\(id) reaches \(state) (now \(self.state(id) ?? "none"))", timeout: timeout) {
            if let d = daemon, !d.isRunning { XCTFail("daemon exited: \(log().suffix(3000))"); return true }
            return self.state(id) == state
        }
        XCTAssertEqual(self.state(id), state, "log: \(log().suffix(3000))")
    }

    /// The lines of `events.jsonl`, parsed.
    func events(_ id: String? = nil) -> [[String: Any]] {
        guard let text = try? String(contentsOfFile: spool + "/events.jsonl", encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
        }.filter { id == nil || ($0["id"] as? String) == id }
    }

    /// The states in events.jsonl for `id`, in order.
    func eventStates(_ id: String) -> [String] { events(id).compactMap { $0["state"] as? String } }

    struct Line {
        let kind, sha, key, url: String; let bytes: Int

        /// The complete lines of manifest text (comments skipped). A last line without its
        /// newline is one the daemon is still appending and is left out; a line of fewer than
        /// five fields comes back with kind "malformed: LINE", so that a test fails on it
        /// rather than the test process trapping on a missing field.
        static func parse(_ text: String) -> [Line] {
            var lines = text.split(separator: "\n", omittingEmptySubsequences: false)
            lines.removeLast()  // "" after the last newline, or a line still being written
            return lines.filter { !$0.isEmpty && !$0.hasPrefix("#") }.map { l in
                let f = l.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
                guard f.count >= 5 else { return Line(kind: "malformed: \(l)", sha: "", key: "", url: "", bytes: -1) }
                return Line(kind: f[0], sha: f[1], key: f[3], url: f[4], bytes: Int(f[2]) ?? -1)
            }
        }
    }

    /// The region's manifest lines (comments skipped; see `Line.parse`).
    func manifest(_ id: String) -> [Line] {
        guard let text = try? String(contentsOfFile: "\(store)/regions/\(id)/manifest.tsv", encoding: .utf8) else { return [] }
        return Line.parse(text)
    }

    /// Lines in the region's journal (objects written since the last sync).
    func journalCount(_ id: String) -> Int {
        guard let text = try? String(contentsOfFile: "\(store)/regions/\(id)/journal.tsv", encoding: .utf8) else { return 0 }
        return text.split(separator: "\n").count
    }

    /// Where an object of an earlier version's store lies (loose, `objects/ab/<sha256>`).
    func loosePath(_ sha: String) -> String { "\(store)/objects/\(sha.prefix(2))/\(sha)" }

    /// `Tests/Support/store_reader.py`: a reader of the store written from docs/store.md alone.
    static var storeReader: String { MapData.packageRoot.appendingPathComponent("Tests/Support/store_reader.py").path }

    /// Every object in the store, as the independent reader lists it: SHA-256 -> (size, where:
    /// a pack's name or "loose").
    func storeObjects() -> [String: (size: Int, place: String)] {
        guard let (rc, out) = try? runTool("/usr/bin/python3", [SpoolFixture.storeReader, "list", store]), rc == 0 else { return [:] }
        var o: [String: (Int, String)] = [:]
        for l in out.split(separator: "\n") {
            let f = l.split(separator: " ")
            if f.count == 3, let n = Int(f[1]) { o[String(f[0])] = (n, String(f[2])) }
        }
        return o
    }

    /// Bytes of the store's object files: packs, index files and loose objects (what the quota
    /// and `tilespool_store_bytes` count).
    func storeFileBytes() -> Int {
        var total = 0
        for dir in ["packs", "index", "objects"] {
            let e = FileManager.default.enumerator(atPath: store + "/" + dir)
            while let rel = e?.nextObject() as? String {
                let p = store + "/" + dir + "/" + rel
                var st = stat()
                if lstat(p, &st) == 0 && (st.st_mode & S_IFMT) == S_IFREG { total += Int(st.st_size) }
            }
        }
        return total
    }

    /// Every object name in the store (independent reader).
    func objects() -> [String] { Array(storeObjects().keys) }

    /// The bytes of object `sha` as the independent reader finds them, or nil.
    func objectData(_ sha: String) -> Data? {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        p.arguments = [SpoolFixture.storeReader, "cat", store, sha]
        let pipe = Pipe()
        p.standardOutput = pipe
        p.standardError = FileHandle.nullDevice
        guard (try? p.run()) != nil else { return nil }
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return p.terminationStatus == 0 ? data : nil
    }

    /// Objects `shas` as the independent reader finds them, in one run of it (`objectData` runs
    /// it once per object): sha -> bytes; absent ones are left out.
    func objectsData(_ shas: [String]) -> [String: Data] {
        guard let out = try? TestScratch.folder("extract") else { return [:] }
        guard let (rc, _) = try? runTool("/usr/bin/python3", [SpoolFixture.storeReader, "extract", store, out.path] + Array(Set(shas))), rc == 0 else { return [:] }
        var found: [String: Data] = [:]
        for sha in Set(shas) { found[sha] = FileManager.default.contents(atPath: out.path + "/" + sha) }
        return found
    }

    /// The independent reader's verdict on the whole store: "" when every pack, index file and
    /// loose object checks out, else its faults.
    func storeFaults() -> String {
        guard let (rc, out) = try? runTool("/usr/bin/python3", [SpoolFixture.storeReader, "verify", store]) else { return "reader did not run" }
        return rc == 0 ? "" : out
    }

    /// Checks what a user checks after a download: every manifest line's object is in the store
    /// (the independent reader finds it, with the recorded size, and every pack checks out: each
    /// body hashes to its name); status counts equal the manifest's.
    func assertStoreMatchesManifest(_ id: String, file: StaticString = #filePath, line: UInt = #line) {
        let lines = manifest(id)
        XCTAssertFalse(lines.isEmpty, "empty manifest", file: file, line: line)
        XCTAssertEqual(storeFaults(), "", file: file, line: line)
        let held = storeObjects()
        for l in lines where l.sha != "-" && l.sha != "!" {
            XCTAssertEqual(held[l.sha]?.size, l.bytes, "object of \(l.key) is missing or of another size", file: file, line: line)
        }
        let p = progress(id)
        XCTAssertEqual(p["resourcesCompleted"], lines.count, file: file, line: line)
        XCTAssertEqual(p["resourcesExpected"], lines.count, file: file, line: line)
        XCTAssertEqual(p["tilesCompleted"], lines.filter { $0.kind == "tile" }.count, file: file, line: line)
        XCTAssertEqual(p["bytesCompleted"], lines.reduce(0) { $0 + $1.bytes }, file: file, line: line)
        XCTAssertEqual(p["tileBytesCompleted"], lines.filter { $0.kind == "tile" }.reduce(0) { $0 + $1.bytes }, file: file, line: line)
    }

    /// Runs `tilespool ARGS` to completion; returns (exit status, stdout + stderr).
    @discardableResult
    func cli(_ args: [String]) throws -> (Int32, String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: SpoolFixture.binary)
        p.arguments = args
        if !environment.isEmpty { p.environment = ProcessInfo.processInfo.environment.merging(environment) { _, b in b } }
        let pipe = Pipe()
        p.standardOutput = pipe
        p.standardError = pipe
        try p.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return (p.terminationStatus, String(decoding: data, as: UTF8.self))
    }
}

/// A test case with a fault-injecting server and a fresh spool for each test (started by the test
/// with `fx.start(...)`), both stopped after it.
class FaultServerSpoolTestCase: XCTestCase {
    var server: FaultServer!
    var fx: SpoolFixture!

    override func setUpWithError() throws {
        server = try FaultServer()
        fx = try SpoolFixture()
    }

    override func tearDown() {
        fx?.stop()
        server?.stop()
    }
}

/// SHA-256 of `data` with the system's `sha256sum` (an implementation independent of ours).
func sha256Hex(_ data: Data) -> String {
    let tmp = FileManager.default.temporaryDirectory.appendingPathComponent("sha-\(UUID().uuidString)")
    try? data.write(to: tmp)
    defer { try? FileManager.default.removeItem(at: tmp) }
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/usr/bin/sha256sum")
    p.arguments = [tmp.path]
    let pipe = Pipe()
    p.standardOutput = pipe
    try? p.run()
    let out = pipe.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    return String(String(decoding: out, as: UTF8.self).prefix(64))
}

/// Size of a file in bytes, or -1.
func Files_size(_ path: String) -> Int {
    ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.intValue ?? -1
}

/// SHA-256 of many files with one run of the system's `sha256sum` (independent of our code):
/// path -> hex digest; missing files are absent from the result.
func sha256sum(_ paths: [String]) -> [String: String] {
    var out: [String: String] = [:]
    for chunk in stride(from: 0, to: paths.count, by: 500).map({ Array(paths[$0..<min($0 + 500, paths.count)]) }) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/sha256sum")
        p.arguments = chunk
        let pipe = Pipe()
        p.standardOutput = pipe
        p.standardError = FileHandle.nullDevice
        try? p.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        for line in String(decoding: data, as: UTF8.self).split(separator: "\n") where line.count > 66 {
            out[String(line.dropFirst(66))] = String(line.prefix(64))
        }
    }
    return out
}
