// A real tile server for tests: nginx serving ../shared/mapdata on 127.0.0.1, plus the helpers
// that find the map data and poll for conditions.
import Foundation
import XCTest

/// nginx serving a map-data folder on 127.0.0.1 the way a real tile server does.
///
/// - `.json` files: `application/json`, every `__BASE__` replaced by `baseURL`
///   (`http://127.0.0.1:PORT`), so styles and TileJSON point back at this server.
/// - `/tiles/**.pbf`: the stored gzip bytes with `Content-Encoding: gzip`,
///   `Content-Type: application/x-protobuf`.
/// - every other `.pbf` (`/fonts/<fontstack>/<range>.pbf` glyphs, and `/vector/...`, whose files
///   are uncompressed MVT): plain `application/x-protobuf`, no Content-Encoding.
/// - `.png` `image/png`, `.webp` `image/webp`, `.jpg` `image/jpeg`; missing files 404.
/// - keep-alive on (`keepalive_requests 100000`); URLs are percent-decoded, so
///   `/fonts/KlokanTech%20Noto%20Sans%20Bold/0-255.pbf` finds the folder with spaces.
///
/// nginx runs in the foreground (`daemon off; master_process off;`: one process) under a small
/// `bash` wrapper that also ends it when this test process dies. Its config, pid file, logs and
/// temp paths live in `directory`, a `TestScratch` folder removed when the test ends (nginx
/// stopped first), or by the wrapper when this process dies.
///
/// XCTest on Linux never releases test-case instances: a server kept in a test-case property
/// is not deinitialised after its test. Call `stop()` in `tearDown` (or keep servers in locals).
final class NginxServer: @unchecked Sendable {
    /// One line of the access log: one request nginx finished.
    struct AccessEntry: Sendable, Equatable {
        /// The request URI as sent: percent-encoded, with the query string if any.
        let uri: String
        /// `uri` without its query string.
        let path: String
        /// The HTTP status code sent.
        let status: Int
        /// Body bytes sent (`$body_bytes_sent`: headers not counted; for gzip tiles, the stored bytes).
        let bytes: Int
    }

    /// The folder served as the document root (absolute).
    let root: URL
    /// The temp folder holding nginx.conf, nginx.pid, error.log, access.log and temp paths.
    let directory: URL
    /// The TCP port nginx listens on, on 127.0.0.1.
    private(set) var port: Int = 0
    /// `http://127.0.0.1:PORT`, no trailing slash.
    var baseURL: String { "http://127.0.0.1:\(port)" }

    private let lock = NSLock()
    private var process: Process?
    private var stdinPipe: Pipe?
    private let token = UUID().uuidString

    /// Starts nginx serving `mapdata` and returns once it answers HTTP on its port.
    /// - Parameter extraLocations: raw nginx config text inserted at the top of the `server`
    ///   block (whose `root` is `mapdata`), before the built-in `.json` and `/tiles/*.pbf` regex
    ///   locations, so that its own regex locations take precedence over them.
    /// - Throws: `SupportError` when nginx cannot be found or does not answer within 10 s
    ///   (after up to 5 attempts on fresh ports when the chosen port was taken).
    init(root mapdata: URL, extraLocations: String = "") throws {
        root = mapdata.standardizedFileURL
        let box = WeakBox<NginxServer>()
        directory = try TestScratch.folder("tilespool-nginx") { box.value?.stop() }
        guard let nginx = ChildProcess.find("nginx", override: "TILESPOOL_NGINX",
                                            fallbacks: ["/usr/sbin/nginx", "/usr/local/sbin/nginx"]) else {
            throw SupportError("nginx not found in PATH or /usr/sbin (run `make deps`)")
        }
        box.value = self
        var lastFailure = ""
        for attempt in 1...5 {
            let port = try Loopback.freePort()
            switch try launch(nginx: nginx, port: port, extraLocations: extraLocations) {
            case .ready:
                return
            case .portTaken(let why):
                lastFailure = "attempt \(attempt) on port \(port): \(why)"
            case .failed(let why):
                throw SupportError("nginx did not start on port \(port): \(why)")
            }
        }
        throw SupportError("nginx did not start after 5 ports: \(lastFailure)")
    }

    deinit { stop() }

    /// `baseURL + path`; `path` starts with "/" and is already percent-encoded.
    func url(_ path: String) -> String { baseURL + path }

    /// Sends SIGTERM and waits for nginx to exit (SIGKILL after 5 s). Idempotent. The temp folder
    /// and its logs stay until `deinit`, so `accessLog()` still works after `stop()`.
    func stop() {
        lock.lock()
        let process = self.process, pipe = stdinPipe
        self.process = nil
        stdinPipe = nil
        lock.unlock()
        if let process { ChildProcess.terminate(process) }
        try? pipe?.fileHandleForWriting.close()
    }

    /// True while the nginx process is running.
    var isRunning: Bool {
        lock.lock(); defer { lock.unlock() }
        return process?.isRunning ?? false
    }

    /// Every request logged so far, oldest first. nginx writes a line when a request is
    /// finished, which can be a moment after the client has read the whole response: to assert
    /// on counts right after a download, poll with `waitUntil`.
    func accessLog() -> [AccessEntry] {
        guard let data = try? Data(contentsOf: accessLogURL) else { return [] }
        var lines = String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
        lines.removeLast()  // "" after the last "\n", or a line still being written
        return lines.compactMap { line in
            // "$request_uri $status $body_bytes_sent": split from the right, the URI is the rest.
            let fields = line.split(separator: " ", omittingEmptySubsequences: false)
            guard fields.count >= 3, let status = Int(fields[fields.count - 2]),
                  let bytes = Int(fields[fields.count - 1]) else { return nil }
            let uri = fields.dropLast(2).joined(separator: " ")
            let path = uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? uri
            return AccessEntry(uri: uri, path: path, status: status, bytes: bytes)
        }
    }

    /// One request with the conditional headers it carried (empty when absent).
    struct ConditionalEntry: Sendable, Equatable {
        let status: Int
        let ifNoneMatch: String
        let ifModifiedSince: String
        /// The request URI as sent (percent-encoded, with its query).
        let uri: String
        /// True when the request carried `If-None-Match` or `If-Modified-Since`.
        var isConditional: Bool { !ifNoneMatch.isEmpty || !ifModifiedSince.isEmpty }
    }

    /// Every request logged so far with its `If-None-Match` and `If-Modified-Since` headers, oldest
    /// first (nginx logs an absent header as `-`, given here as "").
    func conditionalLog() -> [ConditionalEntry] {
        tabSeparatedLog("conditional.log").compactMap { f in
            guard let status = Int(f[0]) else { return nil }
            return ConditionalEntry(status: status, ifNoneMatch: f[1] == "-" ? "" : f[1],
                                    ifModifiedSince: f[2] == "-" ? "" : f[2], uri: f[3])
        }
    }

    /// One request with when nginx read it and finished it (seconds since the epoch, millisecond
    /// resolution: `$msec - $request_time` and `$msec`) and the body bytes it sent.
    struct TimedEntry: Sendable, Equatable {
        let start: Double
        let end: Double
        let bytes: Int
        /// The request URI as sent (percent-encoded, with its query).
        let uri: String
    }

    /// Every request logged so far with its times, oldest first (in the order they finished).
    func timingLog() -> [TimedEntry] {
        tabSeparatedLog("timing.log").compactMap { f in
            guard let end = Double(f[0]), let took = Double(f[1]), let bytes = Int(f[2]) else { return nil }
            return TimedEntry(start: end - took, end: end, bytes: bytes, uri: f[3])
        }
    }

    /// The complete lines of one of our four-field, tab-separated logs (the URI last, so it may
    /// hold anything), split into their fields; a line still being written is left out.
    private func tabSeparatedLog(_ name: String) -> [[String]] {
        guard let data = try? Data(contentsOf: directory.appendingPathComponent(name)) else { return [] }
        var lines = String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
        lines.removeLast()
        return lines.map { $0.split(separator: "\t", maxSplits: 3, omittingEmptySubsequences: false).map(String.init) }
            .filter { $0.count == 4 }
    }

    /// Total body bytes sent, over every logged request.
    func bytesSent() -> Int { accessLog().reduce(0) { $0 + $1.bytes } }

    /// How many logged requests were for `path`: compared with the URI without its query string,
    /// or with the whole URI when `path` contains "?". Percent-encoded, as sent by the client.
    func requestCount(path: String) -> Int {
        let whole = path.contains("?")
        return accessLog().filter { (whole ? $0.uri : $0.path) == path }.count
    }

    /// The text of nginx's error log (warnings and errors), for diagnostics.
    func errorLog() -> String { ChildProcess.tail(of: errorLogURL, limit: 1 << 20) }

    // MARK: - private

    private var accessLogURL: URL { directory.appendingPathComponent("access.log") }
    private var errorLogURL: URL { directory.appendingPathComponent("error.log") }
    private var configURL: URL { directory.appendingPathComponent("nginx.conf") }

    private enum LaunchResult { case ready, portTaken(String), failed(String) }

    /// Runs nginx, then polls (TCP connect, then a GET of a private ping URL answering this
    /// instance's token) until it answers, it exits, or 10 s pass.
    private func launch(nginx: String, port: Int, extraLocations: String) throws -> LaunchResult {
        try configuration(port: port, extraLocations: extraLocations)
            .write(to: configURL, atomically: true, encoding: .utf8)
        try Data().write(to: errorLogURL)

        // bash runs nginx in the background and waits for it; SIGTERM to bash is passed on to
        // nginx. A watcher subshell reads bash's stdin (a pipe from this process); EOF there
        // means this process died (stop() kills the watcher before closing the pipe), so the
        // watcher then ends nginx and removes the temp folder: a crashed run leaves nothing.
        // The children get no file descriptors above 2: Foundation's Process watches a socket
        // inherited by the child to see it exit, and a grandchild holding it would hide the exit.
        // (No redirection on that loop: bash would keep stderr in a spare descriptor during it,
        // which the loop closes, and nginx would start with no stderr; see ceph.sh.)
        let script = #"""
            close_fds() {
                local f
                for f in /proc/$BASHPID/fd/*; do
                    f=${f##*/}
                    case $f in 0|1|2|*[!0-9]*) continue ;; esac
                    eval "exec $f>&-"
                done
            }
            exec 3<&0
            ( close_fds; exec "$1" -p "$2" -c "$3" -e "$4" ) </dev/null &
            n=$!
            trap 'kill -TERM $n 2>/dev/null' TERM INT HUP
            ( close_fds; cat >/dev/null; trap '' TERM; kill -TERM $n 2>/dev/null
              while kill -0 $n 2>/dev/null; do sleep 0.1; done; rm -rf "$2" ) <&3 &
            w=$!
            exec 3<&-
            rc=0
            while :; do wait $n; rc=$?; kill -0 $n 2>/dev/null || break; done
            kill $w 2>/dev/null
            exit $rc
            """#
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        process.arguments = ["-c", script, "nginx-wrapper", nginx, directory.path + "/",
                             configURL.path, errorLogURL.path]
        let pipe = Pipe()
        process.standardInput = pipe
        let output = directory.appendingPathComponent("stdout.log")
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        let outputHandle = try FileHandle(forWritingTo: output)
        process.standardOutput = outputHandle
        process.standardError = outputHandle
        try process.run()
        try? outputHandle.close()

        let deadline = Date().addingTimeInterval(10)
        var result = LaunchResult.failed("no answer within 10 s")
        while Date() < deadline {
            if !process.isRunning {
                let log = ChildProcess.tail(of: errorLogURL) + ChildProcess.tail(of: output)
                result = log.contains("Address already in use") ? .portTaken(log) : .failed(log)
                break
            }
            if Loopback.canConnect(port: port) {
                let ping = try? Loopback.get(port: port, path: "/__nginxserver/ping", timeout: 5)
                if ping.map({ String(decoding: $0.body, as: UTF8.self) }) == token {
                    lock.lock()
                    self.process = process
                    stdinPipe = pipe
                    self.port = port
                    lock.unlock()
                    return .ready
                }
                result = .portTaken("another server answers on port \(port)")
                break
            }
            Thread.sleep(forTimeInterval: 0.01)
        }
        ChildProcess.terminate(process)
        try? pipe.fileHandleForWriting.close()
        return result
    }

    /// nginx.conf for `port`: every path inside `directory`.
    private func configuration(port: Int, extraLocations: String) -> String {
        let dir = directory.path
        let base = "http://127.0.0.1:\(port)"
        return """
            # Written by Tests/TileSpoolTests/Support/NginxServer.swift for one test server.
            daemon off;
            master_process off;
            worker_processes 1;
            pid "\(dir)/nginx.pid";
            error_log "\(dir)/error.log" warn;
            events { worker_connections 1024; }
            http {
                types {
                    application/json        json;
                    application/x-protobuf  pbf mvt;
                    image/png               png;
                    image/webp              webp;
                    image/jpeg              jpg jpeg;
                    text/plain              txt md tsv;
                }
                default_type application/octet-stream;
                log_format tilespool '$request_uri $status $body_bytes_sent';
                access_log "\(dir)/access.log" tilespool;
                log_format conditional '$status\t$http_if_none_match\t$http_if_modified_since\t$request_uri';
                access_log "\(dir)/conditional.log" conditional;
                log_format timing '$msec\t$request_time\t$body_bytes_sent\t$request_uri';
                access_log "\(dir)/timing.log" timing;
                client_body_temp_path "\(dir)/client_body_temp";
                proxy_temp_path "\(dir)/proxy_temp";
                fastcgi_temp_path "\(dir)/fastcgi_temp";
                uwsgi_temp_path "\(dir)/uwsgi_temp";
                scgi_temp_path "\(dir)/scgi_temp";
                sendfile on;
                tcp_nopush on;
                tcp_nodelay on;
                keepalive_timeout 75s;
                keepalive_requests 100000;
                server_tokens off;
                log_not_found off;
                gzip off;
                server {
                    listen 127.0.0.1:\(port);
                    server_name localhost;
                    root "\(root.path)";
            \(extraLocations)
                    location = /__nginxserver/ping {
                        access_log off;
                        default_type text/plain;
                        return 200 "\(token)";
                    }
                    location ~ \\.json$ {
                        sub_filter '__BASE__' '\(base)';
                        sub_filter_once off;
                        sub_filter_types application/json;
                    }
                    location ~ ^/tiles/.*\\.pbf$ {
                        add_header Content-Encoding gzip;
                    }
                }
            }

            """
    }
}

/// Where the real map data for tests is: `../shared/mapdata` beside the package root (read-only;
/// see its README.md), or the folder in environment variable `TILESPOOL_MAPDATA`.
enum MapData {
    /// The package root, derived from this file's path
    /// (`<root>/Tests/TileSpoolTests/Support/NginxServer.swift`).
    static let packageRoot: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    /// The map-data folder, whether or not it exists.
    static var directory: URL {
        if let path = ProcessInfo.processInfo.environment["TILESPOOL_MAPDATA"], !path.isEmpty {
            return URL(fileURLWithPath: path, isDirectory: true).standardizedFileURL
        }
        return packageRoot.appendingPathComponent("../shared/mapdata", isDirectory: true).standardizedFileURL
    }

    /// True when `directory` is an existing folder.
    static var isAvailable: Bool {
        var isDirectory: ObjCBool = false
        return FileManager.default.fileExists(atPath: directory.path, isDirectory: &isDirectory)
            && isDirectory.boolValue
    }

    /// The map-data folder, for a test that needs it. When it is missing: prints
    /// `SKIPPED: <test>: ../shared/mapdata not found` on its own stdout line and throws `XCTSkip`;
    /// but with environment `TILESPOOL_REQUIRE_MAPDATA=1` (CI) it records an XCTFail at the
    /// caller's line and throws a `SupportError`, so the test fails.
    static func require(_ test: String = #function,
                        file: StaticString = #filePath, line: UInt = #line) throws -> URL {
        if isAvailable { return directory }
        let reason = "\(test): ../shared/mapdata not found (looked at \(directory.path))"
        if ProcessInfo.processInfo.environment["TILESPOOL_REQUIRE_MAPDATA"] == "1" {
            let message = "\(reason); TILESPOOL_REQUIRE_MAPDATA=1 makes this a failure"
            XCTFail(message, file: file, line: line)
            throw SupportError(message)
        }
        print("SKIPPED: \(reason)")  // XCTest prints with print() too: same buffer, whole lines
        throw XCTSkip(reason)
    }
}

/// Polls `condition` every `poll` seconds until it returns true; throws a `SupportError` naming
/// `what` (and the caller's file:line) when `timeout` seconds pass first. Errors thrown by
/// `condition` propagate at once. For waiting on effects in other processes and threads,
/// instead of fixed sleeps.
func waitUntil(_ what: String, timeout: TimeInterval = 30, poll: TimeInterval = 0.02,
               file: StaticString = #filePath, line: UInt = #line,
               _ condition: () throws -> Bool) throws {
    let deadline = Date().addingTimeInterval(timeout)
    while true {
        if try condition() { return }
        if Date() >= deadline {
            let place = "\(URL(fileURLWithPath: "\(file)").lastPathComponent):\(line)"
            throw SupportError("timed out after \(timeout) s waiting until \(what) (\(place))")
        }
        Thread.sleep(forTimeInterval: poll)
    }
}
