// Small shared pieces of the test servers: loopback sockets, a raw HTTP/1.0 GET, child processes.
import Foundation

/// An error raised by the test-support code itself (servers that do not start, timeouts, ...).
/// `description` is the whole message, written to be read in a test failure.
struct SupportError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// One HTTP response read off the wire by `Loopback.get`, byte for byte: the body is exactly
/// what the server sent (no Content-Encoding decoding, no de-chunking: HTTP/1.0 requests get
/// no chunked bodies).
struct RawHTTPResponse: Sendable {
    /// The status code, e.g. 200.
    let status: Int
    /// Header fields in the order received; names as sent.
    let headers: [(name: String, value: String)]
    /// The body bytes as received until the server closed the connection.
    let body: Data

    /// The first value of header `name` (case-insensitive), or nil.
    func header(_ name: String) -> String? {
        headers.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
    }
}

/// Raw IPv4 TCP helpers for 127.0.0.1, used to pick ports, to wait for servers and to fetch a
/// URL without any client library in the way.
enum Loopback {
    /// A TCP port on 127.0.0.1 that was free a moment ago: a socket is bound to port 0, the port
    /// the kernel chose is read back, and the socket is closed. Another process can take the port
    /// before the caller binds it, so callers retry on "address in use".
    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw SupportError("socket(): errno \(errno)") }
        defer { close(fd) }
        var address = loopbackAddress(port: 0)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0 else { throw SupportError("bind(127.0.0.1:0): errno \(errno)") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else { throw SupportError("getsockname(): errno \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// True when 127.0.0.1:`port` accepts a TCP connection right now (the connection is closed
    /// again at once).
    static func canConnect(port: Int) -> Bool {
        guard let fd = try? connect(port: port, timeout: 1) else { return false }
        close(fd)
        return true
    }

    /// GET `path` (already percent-encoded, with any query) from 127.0.0.1:`port` as HTTP/1.0,
    /// reading until the server closes the connection. Throws when the connection fails, is
    /// reset, or `timeout` seconds pass before the response is complete.
    static func get(port: Int, path: String, headers: [String: String] = [:],
                    timeout: TimeInterval = 10) throws -> RawHTTPResponse {
        try request(port: port, method: "GET", path: path, headers: headers, timeout: timeout)
    }

    /// Like `get`, with any method and an optional request body (sent with Content-Length).
    static func request(port: Int, method: String, path: String, headers: [String: String] = [:],
                        body: Data? = nil, timeout: TimeInterval = 10) throws -> RawHTTPResponse {
        let fd = try connect(port: port, timeout: timeout)
        defer { close(fd) }
        var head = "\(method) \(path) HTTP/1.0\r\nHost: 127.0.0.1:\(port)\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if let body { head += "Content-Length: \(body.count)\r\n" }
        head += "\r\n"
        let bytes = Array(head.utf8) + Array(body ?? Data())
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw SupportError("send to 127.0.0.1:\(port): errno \(errno)") }
            sent += n
        }
        let deadline = Date().addingTimeInterval(timeout)
        var received = Data()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            guard Date() < deadline else { throw SupportError("\(method) \(path): no complete answer in \(timeout) s") }
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n > 0 { received.append(contentsOf: buffer[0..<n]); continue }
            if n == 0 { break }
            if errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK { continue }
            throw SupportError("\(method) \(path): recv errno \(errno) after \(received.count) bytes")
        }
        return try parse(received, path: path)
    }

    // MARK: - private

    private static func loopbackAddress(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        return address
    }

    /// A connected blocking socket with send/receive timeouts of `timeout` seconds.
    private static func connect(port: Int, timeout: TimeInterval) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SupportError("socket(): errno \(errno)") }
        var tv = timeval(tv_sec: Int(timeout), tv_usec: Int((timeout - timeout.rounded(.down)) * 1_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var address = loopbackAddress(port: port)
        let rc = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Foundation.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard rc == 0 else {
            let code = errno
            close(fd)
            throw SupportError("connect(127.0.0.1:\(port)): errno \(code)")
        }
        return fd
    }

    private static func parse(_ data: Data, path: String) throws -> RawHTTPResponse {
        let separator = Data("\r\n\r\n".utf8)
        guard let end = data.range(of: separator) else {
            throw SupportError("GET \(path): no complete header in \(data.count) bytes")
        }
        let head = String(decoding: data[data.startIndex..<end.lowerBound], as: UTF8.self)
        var lines = head.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else {
            throw SupportError("GET \(path): bad status line in \(head)")
        }
        let headers = lines.compactMap { line -> (name: String, value: String)? in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
        }
        return RawHTTPResponse(status: status, headers: headers, body: Data(data[end.upperBound...]))
    }
}

/// Helpers for the servers' child processes.
enum ChildProcess {
    /// The first executable among: the path in environment variable `override` (when set),
    /// each of `preferred`, `name` in each `$PATH` directory, then each of `fallbacks`.
    static func find(_ name: String, override: String, preferred: [String] = [],
                     fallbacks: [String] = []) -> String? {
        let environment = ProcessInfo.processInfo.environment
        if let path = environment[override], !path.isEmpty { return path }
        let dirs = (environment["PATH"] ?? "").split(separator: ":").map(String.init)
        let candidates = preferred + dirs.map { "\($0)/\(name)" } + fallbacks
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// Sends SIGTERM and polls for the exit for up to `grace` seconds; then sends SIGKILL and
    /// polls up to 5 s more. Never blocks longer than that (no `waitUntilExit()`, which would
    /// hang for good if a grandchild kept Foundation's exit-watch socket open).
    static func terminate(_ process: Process, grace: TimeInterval = 5) {
        guard process.isRunning else { return }
        process.terminate()
        if waitForExit(process, timeout: grace) { return }
        kill(process.processIdentifier, SIGKILL)
        _ = waitForExit(process, timeout: 5)
    }

    /// Polls `process.isRunning` every 5 ms for up to `timeout` seconds; true once it exited.
    static func waitForExit(_ process: Process, timeout: TimeInterval) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning {
            if Date() >= deadline { return false }
            Thread.sleep(forTimeInterval: 0.005)
        }
        return true
    }

    /// The last `limit` bytes of a text file (for error messages), or "" when unreadable.
    static func tail(of url: URL, limit: Int = 2000) -> String {
        guard let data = try? Data(contentsOf: url) else { return "" }
        return String(decoding: data.suffix(limit), as: UTF8.self)
    }
}

/// Runs `args[0]` with the rest as arguments (no shell), output not captured; its exit status,
/// or -1 when it cannot be started (tests that mount and unmount a small tmpfs).
func runStatus(_ args: [String]) -> Int32 {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: args[0])
    p.arguments = Array(args.dropFirst())
    do { try p.run() } catch { return -1 }
    p.waitUntilExit()
    return p.terminationStatus
}
