// A misbehaving HTTP server for tests: Tests/Support/faultserver.py run as a child process.
import Foundation

/// `Tests/Support/faultserver.py` on 127.0.0.1: an HTTP/1.1 keep-alive server whose URL path
/// picks a behaviour. PATH below is the request path without its query string; the segments
/// after the first one or two are free (use them as the tile part, e.g. `/ok/3/4/5.png`).
///
/// | path | answer |
/// |---|---|
/// | `/ok/...` | 200, body `okBody(PATH)` = `"tile " + PATH` (after the PNG/JPEG/WebP signature for those extensions), Content-Length set |
/// | `/cached/...` | 200 like `/ok` with `etag` twice ("v1" first), `Last-Modified` 2025-01-01, `CACHE-CONTROL: public, Max-Age=60`, `Expires` 2026-01-01 |
/// | `/expires/...` | 200 like `/ok` with `Expires` 2026-01-01 and no Cache-Control |
/// | `/empty/...` | 204, no body |
/// | `/liar304/...` | 200 like `/ok` (no validators) the first time, then 304 to every request, conditional or not |
/// | `/partial/...` | 206 with `Content-Range: bytes 0-6/1000` and the first 7 bytes of `/ok`'s body |
/// | `/missing/...` | 404 |
/// | `/flaky/N/...` | the first N requests for this PATH 503, then like `/ok` |
/// | `/ratelimit/N/...` | the first N 429 with `Retry-After: 1`, then like `/ok` |
/// | `/ratelimitdate/N/...` | the same with `Retry-After` an HTTP date 1-2 s ahead |
/// | `/error500/...` | always 500 |
/// | `/html/...` | 200, `text/html`, an HTML login page |
/// | `/text/...` | 200, `text/plain`, "quota exceeded for this key" |
/// | `/notpng/...` | 200, `image/png`, a GIF body (wrong signature) |
/// | `/empty200/...` | 200 with an empty body |
/// | `/status/CODE/...` | CODE, body "status CODE" |
/// | `/retryafter/S/N/...` | the first N 429 with `Retry-After: S`, then like `/ok` |
/// | `/reset/...` | Content-Length 1000, 100 bytes, then a TCP reset |
/// | `/short/...` | Content-Length 1000, 500 bytes, then a clean close |
/// | `/slowbody/...` | Content-Length 1000000, then 1 byte every 2 s (120 s cap) |
/// | `/hang/...` | never answers (until the client closes; 120 s cap) |
/// | `/huge/...` | 200, `hugeBody(PATH)`: 64 MiB |
/// | `/badgzip/...` | 200 with `Content-Encoding: gzip` and a body that is not gzip |
/// | `/gzipped/KIB/...` | 200 without Content-Encoding, the body a gzip file of `gzippedBody(PATH, kib: KIB)` (a body that is itself gzip) |
/// | `/redirectloop/...` | 302 to itself |
/// | `/redirectfile/...` | 302 to `file:///etc/passwd` |
/// | `/redirect/REST` | 302 to `/ok/REST` (query kept) |
/// | `/redirectto/SCHEME/HOSTPORT/REST` | 302 to `SCHEME://HOSTPORT/REST` (query kept): another server, origin or host |
/// | `/json/NAME` | the document registered as NAME, `__BASE__` replaced by `baseURL`; else 404 |
/// | `/changing/N/...` | request k of PATH sees version v = min(k, N): 200 with `okBody(PATH) + " v<v>"`, ETag `"v<v>"`, and always `Last-Modified` 2025-01-01; 304 when `If-None-Match` names `"v<v>"`, or (sent without If-None-Match) when `If-Modified-Since` is not before 2025-01-01 |
/// | `/lastmodified/...` | like `/ok` with `Last-Modified` 2025-01-01 and no ETag; 304 when `If-Modified-Since` is not before it |
/// | `/changingjson/N/NAME` | the same for the document registered as NAME, `__BASE__` and `__VERSION__` (v) replaced |
/// | `/reply/NAME/...` | the reply registered with `registerReply(NAME, ...)`: its status, headers and body whatever was asked; in header values and the body `__BASE__` is `baseURL`, `__HEADER:Name__` the request's header Name, `__QUERY:name__` its query parameter (decoded): a server that echoes what it was sent |
///
/// Control endpoints (not counted): `POST /_register/NAME` (body = document),
/// `GET /_hits?path=PATH` (decimal count), `GET /_hits` (JSON object path -> count).
///
/// Hit counts and registered documents live in `stateDirectory`, so they survive `stop()` and
/// `restart()`: a restarted server is "the same server come back" on the same port, and a
/// `/flaky/N/` path that already failed N times answers 200 after the restart.
///
/// The python process ends with this one (it exits when its stdin pipe closes). XCTest on Linux
/// never releases test-case instances: call `stop()` in `tearDown` for servers kept in properties.
final class FaultServer: @unchecked Sendable {
    /// Bytes in a `/huge/` body: 64 MiB.
    static let hugeSize = 64 * 1024 * 1024

    /// The body of `/ok/...`, and of `/flaky/`, `/ratelimit/`, `/ratelimitdate/` once they
    /// answer 200: `"tile " + path` (path = request path without query, as sent).
    /// `/redirect/REST` ends at `/ok/REST`, so its body is `okBody("/ok/REST")`.
    /// After the format's signature when the path ends in `.png`, `.jpg`, `.jpeg` or `.webp`.
    static func okBody(_ path: String) -> Data {
        let ext = (path as NSString).pathExtension.lowercased()
        let sig: [UInt8] = ext == "png" ? [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
            : ext == "jpg" || ext == "jpeg" ? [0xFF, 0xD8, 0xFF]
            : ext == "webp" ? Array("RIFF".utf8) + [0, 0, 0, 0] + Array("WEBP".utf8) : []
        return Data(sig) + Data("tile \(path)".utf8)
    }

    /// What the gzip file `/gzipped/KIB/...` holds: `okBody(path)` followed by zero bytes up to
    /// `kib` KiB (a body that inflates to `kib` KiB from a few bytes per KiB).
    static func gzippedBody(_ path: String, kib: Int) -> Data {
        var d = okBody(path)
        if d.count < kib * 1024 { d.append(Data(count: kib * 1024 - d.count)) }
        return d
    }

    /// The 64 MiB body of `/huge/...`: `okBody(path) + "\n"` repeated, cut at `hugeSize` bytes.
    static func hugeBody(_ path: String) -> Data {
        var data = okBody(path) + Data("\n".utf8)
        // Doubling keeps the pattern: data is whole units, so any prefix of it continues it.
        while data.count < hugeSize { data.append(data.prefix(min(data.count, hugeSize - data.count))) }
        return data
    }

    /// The folder holding `hits.log` (one request path per line), `json/<name>` documents and
    /// the server's stderr (`server.log`). Removed on `deinit`.
    let stateDirectory: URL
    /// The TCP port on 127.0.0.1; the same after `restart()`.
    private(set) var port: Int = 0
    /// `http://127.0.0.1:PORT`, no trailing slash.
    var baseURL: String { "http://127.0.0.1:\(port)" }

    private let python: String
    private let script: URL
    private let lock = NSLock()
    private var process: Process?
    private var stdinPipe: Pipe?
    private var stdoutPipe: Pipe?

    /// Starts the server on a free port chosen by the kernel; returns once it listens.
    /// python3: `$TILESPOOL_PYTHON`, else /usr/bin/python3, else the first in `$PATH`.
    /// - Throws: `SupportError` when python3 is missing or the server does not start in 10 s.
    init() throws {
        let box = WeakBox<FaultServer>()
        stateDirectory = try TestScratch.folder("tilespool-fault") { box.value?.stop() }
        // Debian's python3 first (installed by `make deps`; no pyenv shim start-up cost).
        guard let python = ChildProcess.find("python3", override: "TILESPOOL_PYTHON",
                                             preferred: ["/usr/bin/python3"]) else {
            throw SupportError("python3 not found (run `make deps`)")
        }
        self.python = python
        script = MapData.packageRoot.appendingPathComponent("Tests/Support/faultserver.py")
        port = try launch(port: 0)
        box.value = self
    }

    /// Kept until the test bundle ends (a server shared by the tests of a class).
    func keepAcrossTests() { TestScratch.keepUntilEnd(stateDirectory) }

    deinit { stop() }

    /// `baseURL + path`; `path` starts with "/".
    func url(_ path: String) -> String { baseURL + path }

    /// True while the server process runs.
    var isRunning: Bool {
        lock.lock(); defer { lock.unlock() }
        return process?.isRunning ?? false
    }

    /// Stops the server (SIGTERM, then waits; SIGKILL after 5 s). Idempotent. Connections in
    /// progress are cut. State stays in `stateDirectory`.
    func stop() {
        lock.lock()
        let process = self.process, input = stdinPipe, output = stdoutPipe
        self.process = nil
        stdinPipe = nil
        stdoutPipe = nil
        lock.unlock()
        if let process { ChildProcess.terminate(process) }
        try? input?.fileHandleForWriting.close()
        try? output?.fileHandleForReading.close()
    }

    /// Starts the server again on the same `port` after `stop()`, retrying for up to 10 s while
    /// the port is still busy. Throws when it is already running or does not come back.
    func restart() throws {
        guard !isRunning else { throw SupportError("FaultServer.restart(): still running; stop() first") }
        let deadline = Date().addingTimeInterval(10)
        while true {
            do {
                _ = try launch(port: port)
                return
            } catch let error as PortBusy {
                if Date() >= deadline { throw SupportError("restart on port \(port): \(error.log)") }
                Thread.sleep(forTimeInterval: 0.05)
            }
        }
    }

    /// How many requests for `path` (request path without query, e.g. "/flaky/2/1/2/3.png")
    /// the server has received, over all its runs. A request is counted before it is answered.
    func hits(_ path: String) -> Int { allHits()[path] ?? 0 }

    /// Every counted path with its number of requests.
    func allHits() -> [String: Int] {
        guard let data = try? Data(contentsOf: stateDirectory.appendingPathComponent("hits.log")) else { return [:] }
        var counts: [String: Int] = [:]
        for line in String(decoding: data, as: UTF8.self).split(separator: "\n") {
            counts[String(line), default: 0] += 1
        }
        return counts
    }

    /// When each request for `path` came (seconds since 1970, as the server read its headers),
    /// in the order they came.
    func requestTimes(_ path: String) -> [Double] {
        guard let data = try? Data(contentsOf: stateDirectory.appendingPathComponent("requests.log")) else { return [] }
        return String(decoding: data, as: UTF8.self).split(separator: "\n").compactMap { line in
            guard let o = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                  o["path"] as? String == path, let t = o["time"] as? Double else { return nil }
            return t
        }
    }

    /// Every counted request in arrival order: its path and request headers (names as sent),
    /// from the server's `requests.log`.
    func requests() -> [(path: String, headers: [String: String])] {
        guard let data = try? Data(contentsOf: stateDirectory.appendingPathComponent("requests.log")) else { return [] }
        return String(decoding: data, as: UTF8.self).split(separator: "\n").compactMap { line in
            guard let o = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                  let p = o["path"] as? String else { return nil }
            return (p, o["headers"] as? [String: String] ?? [:])
        }
    }

    /// Registers `document` to be served at `/json/<name>` (with `__BASE__` replaced by
    /// `baseURL`), like `POST /_register/<name>` but without HTTP; works while stopped too.
    /// `name`: letters, digits, `.`, `_`, `-`, not starting with `.`.
    func register(_ name: String, json document: String) throws {
        let folder = stateDirectory.appendingPathComponent("json", isDirectory: true)
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        try Data(document.utf8).write(to: folder.appendingPathComponent(name), options: .atomic)
    }

    /// Registers `data` as document `name` as it is (no `__BASE__` replacement when served by
    /// `/pmtiles/MODE/N/<name>`, which serves it with byte ranges); works while stopped too.
    func registerFile(_ name: String, data: Data) throws {
        let folder = stateDirectory.appendingPathComponent("json", isDirectory: true)
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        try data.write(to: folder.appendingPathComponent(name), options: .atomic)
    }

    /// Registers the reply served at `/reply/<name>/...` (any path below it, any query): `status`,
    /// then `headers` in order (values may be of any length: `("X-Big", 200 KB)` makes a header
    /// libcurl refuses), then `body` with its Content-Length; Content-Type
    /// `application/octet-stream` unless `headers` names one. In the header values and the body,
    /// `__BASE__` becomes `baseURL`, `__HEADER:Name__` the value of the request's header Name and
    /// `__QUERY:name__` the first value of its query parameter `name`, percent-decoded (empty
    /// when absent). Works while stopped too. `name`: as for `register`.
    func registerReply(_ name: String, status: Int = 200, headers: [(String, String)] = [], body: String = "") throws {
        let doc: [String: Any] = ["status": status, "headers": headers.map { [$0.0, $0.1] }, "body": body]
        try register(name, json: String(decoding: try JSONSerialization.data(withJSONObject: doc), as: UTF8.self))
    }

    // MARK: - private

    private struct PortBusy: Error { let log: String }

    /// Runs the script on `port` (0 = any) and returns the port it printed on its first line.
    private func launch(port requested: Int) throws -> Int {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        // stop() ends the server with SIGTERM before closing its stdin, so stdin EOF means this
        // process died: the server then removes the state folder itself.
        process.arguments = [script.path, "--port", String(requested), "--state-dir", stateDirectory.path,
                             "--remove-state-on-eof"]
        let input = Pipe(), output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        let logURL = stateDirectory.appendingPathComponent("server.log")
        if !FileManager.default.fileExists(atPath: logURL.path) {
            _ = FileManager.default.createFile(atPath: logURL.path, contents: nil)
        }
        let log = try FileHandle(forWritingTo: logURL)
        log.seekToEndOfFile()
        process.standardError = log
        try process.run()
        try? log.close()

        let line = readLine(output.fileHandleForReading.fileDescriptor, timeout: 10)
        guard let line, let port = Int(line.trimmingCharacters(in: .whitespaces)) else {
            ChildProcess.terminate(process)
            try? input.fileHandleForWriting.close()
            try? output.fileHandleForReading.close()
            let why = ChildProcess.tail(of: logURL)
            if !process.isRunning && process.terminationStatus == 3 { throw PortBusy(log: why) }
            throw SupportError("faultserver.py did not start (first line \(line.debugDescription)): \(why)")
        }
        lock.lock()
        self.process = process
        stdinPipe = input
        stdoutPipe = output
        lock.unlock()
        return port
    }

    /// One line from `fd` (without "\n"), or nil at EOF or after `timeout` seconds.
    private func readLine(_ fd: Int32, timeout: TimeInterval) -> String? {
        let deadline = Date().addingTimeInterval(timeout)
        var bytes: [UInt8] = []
        var byte: UInt8 = 0
        while true {
            let left = deadline.timeIntervalSinceNow
            guard left > 0 else { return nil }
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, Int32(min(left, 1) * 1000) + 1)
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0 else { if ready < 0 { return nil }; continue }
            let n = read(fd, &byte, 1)
            if n < 0 && errno == EINTR { continue }
            guard n == 1 else { return nil }
            if byte == UInt8(ascii: "\n") { return String(decoding: bytes, as: UTF8.self) }
            bytes.append(byte)
        }
    }
}
