// An S3 client over libcurl's easy interface, for the object-store backend of issue 12: SigV4
// signing by libcurl itself (`CURLOPT_AWS_SIGV4`, libcurl 7.75+), the body's SHA-256 sent as
// `x-amz-content-sha256` (libcurl 7.88 does not send it, and the server then checks every upload
// against it), conditional PUT with `If-None-Match: *` (412 = the key exists: dedup across hosts
// without a read first). Facts: ../shared/notes/s3-ceph.md; API: the Amazon S3 API reference
// (PutObject, GetObject, HeadObject, ListObjectsV2). Synchronous; one client per thread.
import CCurl
import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif
import TileSpoolCore

/// Where and how to reach an S3-compatible store. Credentials are never logged or written.
public struct S3Config: Sendable {
    /// The endpoint, e.g. `http://127.0.0.1:7480` or `https://s3.eu-west-1.amazonaws.com`; no trailing slash.
    public var endpoint: String
    public var bucket: String
    /// Key prefix inside the bucket (no leading or trailing slash; may be empty).
    public var prefix: String
    /// The SigV4 region (`AWS_REGION`, default `us-east-1`).
    public var region: String
    public var accessKeyID: String
    public var secretAccessKey: String
    /// `AWS_SESSION_TOKEN`, sent as `x-amz-security-token`.
    public var sessionToken: String?
    /// Path-style URLs (`endpoint/bucket/key`) instead of virtual-hosted ones (`bucket.endpoint/key`).
    public var pathStyle: Bool

    public init(endpoint: String, bucket: String, prefix: String = "", region: String = "us-east-1",
                accessKeyID: String, secretAccessKey: String, sessionToken: String? = nil, pathStyle: Bool = true) {
        self.endpoint = endpoint.hasSuffix("/") ? String(endpoint.dropLast()) : endpoint
        self.bucket = bucket
        self.prefix = prefix.trimmingCharacters(in: CharacterSet(charactersIn: "/"))
        self.region = region; self.accessKeyID = accessKeyID; self.secretAccessKey = secretAccessKey
        self.sessionToken = sessionToken; self.pathStyle = pathStyle
    }

    /// The credentials as `Redaction.Secrets` (the access key id, the secret key and the session
    /// token), to be replaced in anything a store's answer quotes.
    public var secrets: Redaction.Secrets {
        Redaction.Secrets(values: [accessKeyID, secretAccessKey] + (sessionToken.map { [$0] } ?? []))
    }

    /// Parses `s3://BUCKET[/PREFIX]` and takes the endpoint and credentials the way AWS tools do:
    /// `endpoint` (else `AWS_ENDPOINT_URL`), `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_SESSION_TOKEN`, `AWS_REGION` (default `us-east-1`).
    /// - Throws: `S3Error` naming what is missing or malformed (a bucket or prefix segment `.` or
    ///   `..` included).
    public static func from(url: String, endpoint: String?, environment: [String: String], pathStyle: Bool = true) throws(S3Error) -> S3Config {
        guard url.hasPrefix("s3://") else { throw S3Error(message: "a store in S3 is named s3://BUCKET[/PREFIX], not \(url)") }
        let rest = url.dropFirst(5)
        let bucket = String(rest.prefix { $0 != "/" })
        guard !bucket.isEmpty else { throw S3Error(message: "\(url): no bucket name") }
        let prefix = String(rest.dropFirst(bucket.count))
        // An S3 key is literal, but HTTP clients (libcurl among them) resolve `.` and `..` in a
        // URL's path (RFC 3986 section 5.2.4): such a bucket or prefix would write under other
        // keys than it lists, or into another bucket (attack round 53: `s3://tiles/./p1` got past
        // the duplicate check of `s3://tiles/p1` and overwrote its region).
        if ([bucket] + prefix.split(separator: "/").map(String.init)).contains(where: { $0 == "." || $0 == ".." }) {
            throw S3Error(message: "\(url): a bucket or prefix segment '.' or '..' is refused (URLs resolve it, so the keys would not be where they are listed); name the prefix without it")
        }
        guard let ep = endpoint ?? environment["AWS_ENDPOINT_URL"], ep.hasPrefix("http://") || ep.hasPrefix("https://") else {
            throw S3Error(message: "no S3 endpoint: give --s3-endpoint URL or set AWS_ENDPOINT_URL (http:// or https://)")
        }
        guard let key = environment["AWS_ACCESS_KEY_ID"], !key.isEmpty,
              let secret = environment["AWS_SECRET_ACCESS_KEY"], !secret.isEmpty else {
            throw S3Error(message: "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
        }
        return S3Config(endpoint: ep, bucket: bucket, prefix: prefix, region: environment["AWS_REGION"] ?? "us-east-1",
                        accessKeyID: key, secretAccessKey: secret, sessionToken: environment["AWS_SESSION_TOKEN"], pathStyle: pathStyle)
    }
}

/// An S3 request that did not succeed: the HTTP status (0 when no answer came), the S3 error code
/// from the XML body (`SignatureDoesNotMatch`, `NoSuchBucket`, `XAmzContentSHA256Mismatch`, ...)
/// and a message for people. Never contains the secret.
public struct S3Error: Error, Sendable, CustomStringConvertible {
    public var status = 0
    public var code = ""
    public var message: String
    public var description: String { status > 0 ? "S3 \(status) \(code): \(message)" : "S3: \(message)" }
    /// True when retrying cannot help: the credentials, the bucket or the request are wrong.
    public var isPermanent: Bool { status == 400 || status == 401 || status == 403 || status == 404 }
}

/// One object of a listing: its key (without the config's prefix), size in bytes and
/// `LastModified` (seconds since 1970).
public struct S3Object: Sendable, Equatable {
    /// The largest size a listing reports (S3's largest object, 5 TiB, in bytes).
    public static let maxSize = 5 << 40

    /// A listing's `<Size>` text as bytes: decimal digits only (else 0), at most `maxSize`, so a
    /// size from the endpoint is never a sign or a number whose sums overflow (a review of
    /// 2026-12-07: Int.min trapped the index's sizing at every load).
    public static func size(listed text: String) -> Int {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return 0 }
        let digits = text.drop { $0 == "0" }
        return digits.count > 13 ? maxSize : min(Int(digits) ?? 0, maxSize)
    }
    public var key: String
    public var size: Int
    public var lastModified: Double
}

/// What a conditional PUT did.
public enum S3PutOutcome: Sendable, Equatable {
    /// The object was written.
    case created
    /// The key already existed (412 to `If-None-Match: *`): nothing was written.
    case alreadyExists
}

/// Synchronous S3 operations on one bucket and prefix. Not thread-safe: one client per thread.
public final class S3Client: @unchecked Sendable {
    public let config: S3Config
    private let easy: UnsafeMutableRawPointer
    /// Seconds allowed for one request (connect included).
    public var timeout: Double = 30

    public init(config: S3Config) {
        curl_global_init(Int(CURL_GLOBAL_DEFAULT))
        self.config = config
        easy = curl_easy_init()!
    }
    deinit { curl_easy_cleanup(easy) }

    /// The URL of `key` (under the prefix), or of the bucket with a query when `key` is nil.
    func url(_ key: String?, query: String = "") -> String {
        var path = ""
        if let key { path = "/" + S3Client.encodePath((config.prefix.isEmpty ? "" : config.prefix + "/") + key) }
        if config.pathStyle { return "\(config.endpoint)/\(config.bucket)\(path.isEmpty ? "/" : path)\(query)" }
        let scheme = config.endpoint.hasPrefix("https://") ? "https://" : "http://"
        return scheme + config.bucket + "." + config.endpoint.dropFirst(scheme.count) + (path.isEmpty ? "/" : path) + query
    }

    /// Percent-encodes a key for the URL path (RFC 3986 unreserved and `/` kept), as SigV4's
    /// canonical URI expects.
    static func encodePath(_ s: String) -> String {
        var out = ""
        for b in s.utf8 {
            switch b {
            case 0x41...0x5A, 0x61...0x7A, 0x30...0x39, 0x2D, 0x2E, 0x5F, 0x7E, 0x2F: out.unicodeScalars.append(UnicodeScalar(b))
            default: out += String(format: "%%%02X", b)
            }
        }
        return out
    }

    /// Writes `body` under `key`. With `ifNoneMatch`, only when the key does not exist yet.
    /// - Returns: `.created`, or `.alreadyExists` for a 412.
    /// - Throws: `S3Error` for any other answer or no answer.
    /// `declaredSHA256` replaces the body's own hash in `x-amz-content-sha256` (tests use it to send
    /// a body that does not match, as one damaged in flight would).
    @discardableResult
    public func put(_ key: String, _ body: Data, ifNoneMatch: Bool = false, declaredSHA256: String? = nil) throws(S3Error) -> S3PutOutcome {
        let r = try perform("PUT", url(key), body: body, headers: ifNoneMatch ? ["If-None-Match: *"] : [], contentSHA256: declaredSHA256)
        if r.status == 412 && ifNoneMatch { return .alreadyExists }
        guard (200...299).contains(r.status) else { throw refusal(r) }
        return .created
    }

    /// Writes the bytes of the open regular file `fd` (`size` bytes from offset 0, whose SHA-256 is
    /// `sha256`, hex) under `key`, streamed from the file through a 1 MiB buffer (libcurl's
    /// `CURLOPT_UPLOAD` with a read callback): a pack of tens of MiB is never held in memory.
    /// With `ifNoneMatch`, only when the key does not exist yet. libcurl sends `Expect:
    /// 100-continue` with such a body (one round trip before the bytes; S3 answers 100).
    /// - Returns: `.created`, or `.alreadyExists` for a 412.
    /// - Throws: `S3Error` for any other answer, no answer, or a file that cannot be read.
    @discardableResult
    public func put(_ key: String, fd: Int32, size: Int, sha256: String, ifNoneMatch: Bool = false) throws(S3Error) -> S3PutOutcome {
        let source = UploadSource(fd: fd, size: size)
        let r: Response
        do {
            r = try perform("PUT", url(key), body: nil, headers: ifNoneMatch ? ["If-None-Match: *"] : [], contentSHA256: sha256, upload: source)
        } catch {
            // The read callback aborted the transfer: its reason, not libcurl's "aborted by an application callback".
            if let e = source.readError { throw S3Error(message: quoted("\(key): cannot read the file to upload: \(e)")) }
            throw error
        }
        if r.status == 412 && ifNoneMatch { return .alreadyExists }
        guard (200...299).contains(r.status) else { throw refusal(r) }
        return .created
    }

    /// The object under `key`, or nil when there is none (404).
    /// - Throws: `S3Error` for any other failure.
    public func get(_ key: String) throws(S3Error) -> Data? {
        let r = try perform("GET", url(key), body: nil, headers: [])
        if r.status == 404 { return nil }
        guard r.status == 200 else { throw refusal(r) }
        return r.body
    }

    /// Bytes `range` of the object under `key` (`Range: bytes=a-b`, RFC 9110 section 14), or nil
    /// when there is no such object (404).
    /// - Throws: `S3Error` for any other failure, or an answer that is not those bytes (a 200
    ///   with the whole object is cut to the range; a 416 or a shorter body is an error).
    public func get(_ key: String, range: Range<Int>) throws(S3Error) -> Data? {
        guard !range.isEmpty else { return Data() }
        let r = try perform("GET", url(key), body: nil, headers: ["Range: bytes=\(range.lowerBound)-\(range.upperBound - 1)"])
        if r.status == 404 { return nil }
        if r.status == 200 && r.body.count >= range.upperBound { return r.body.subdata(in: range) }
        guard r.status == 206 else { throw refusal(r) }
        guard r.body.count == range.count else {
            throw S3Error(status: r.status, message: "\(key): asked for \(range.count) bytes at \(range.lowerBound), received \(r.body.count)")
        }
        return r.body
    }

    /// Removes `key` (S3 answers 204 whether or not it existed).
    /// - Throws: `S3Error` when the server refuses.
    public func delete(_ key: String) throws(S3Error) {
        let r = try perform("DELETE", url(key), body: nil, headers: [])
        guard (200...299).contains(r.status) || r.status == 404 else { throw refusal(r) }
    }

    /// Every object whose key starts with `prefix` (under the config's prefix), following
    /// continuation tokens (ListObjectsV2, 1,000 keys a page).
    /// - Throws: `S3Error` when a page is refused or cannot be parsed.
    public func list(prefix: String) throws(S3Error) -> [S3Object] {
        let full = (config.prefix.isEmpty ? "" : config.prefix + "/") + prefix
        var objects: [S3Object] = []
        var token: String?
        repeat {
            // Parameters in SigV4's canonical (sorted) order: libcurl 7.88 signs the query as given.
            var q = "?"
            if let token { q += "continuation-token=" + S3Client.encodeQuery(token) + "&" }
            q += "list-type=2&prefix=" + S3Client.encodeQuery(full)
            let r = try perform("GET", url(nil, query: q), body: nil, headers: [])
            guard r.status == 200 else { throw refusal(r) }
            let page = ListingParser(data: r.body, strip: config.prefix.isEmpty ? "" : config.prefix + "/")
            guard page.ok else { throw S3Error(status: r.status, message: "cannot parse the ListObjectsV2 answer") }
            objects += page.objects
            token = page.truncated ? page.nextToken : nil
        } while token != nil
        return objects
    }

    /// The "folders" right under `prefix` (under the config's prefix): the distinct next path
    /// segments of the keys, without the trailing `/` (ListObjectsV2 with `delimiter=/`).
    /// - Throws: `S3Error` when a page is refused or cannot be parsed.
    public func listFolders(prefix: String) throws(S3Error) -> [String] {
        let strip = (config.prefix.isEmpty ? "" : config.prefix + "/") + prefix
        var folders: [String] = []
        var token: String?
        repeat {
            var q = "?"
            if let token { q += "continuation-token=" + S3Client.encodeQuery(token) + "&" }
            q += "delimiter=%2F&list-type=2&prefix=" + S3Client.encodeQuery(strip)
            let r = try perform("GET", url(nil, query: q), body: nil, headers: [])
            guard r.status == 200 else { throw refusal(r) }
            let page = ListingParser(data: r.body, strip: strip)
            guard page.ok else { throw S3Error(status: r.status, message: "cannot parse the ListObjectsV2 answer") }
            folders += page.commonPrefixes.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 }
            token = page.truncated ? page.nextToken : nil
        } while token != nil
        return folders
    }

    /// Sets the `LastModified` of an existing object to now without sending its bytes: a copy onto
    /// itself (`x-amz-copy-source` = the object, `x-amz-metadata-directive: REPLACE`, which S3
    /// requires for a copy onto the same key). gc's grace period then protects an object a
    /// daemon re-uses (docs/gc.md).
    /// - Throws: `S3Error` when the server refuses (404 when the object is gone).
    public func touch(_ key: String) throws(S3Error) {
        let source = "/" + config.bucket + "/" + S3Client.encodePath((config.prefix.isEmpty ? "" : config.prefix + "/") + key)
        let r = try perform("PUT", url(key), body: Data(), headers: ["x-amz-copy-source: \(source)", "x-amz-metadata-directive: REPLACE"])
        guard (200...299).contains(r.status) else { throw refusal(r) }
    }

    static func encodeQuery(_ s: String) -> String {
        encodePath(s).replacingOccurrences(of: "/", with: "%2F")
    }

    private struct Response { var status: Int; var body: Data }

    /// One signed request. The body's SHA-256 (or that of no body) goes in `x-amz-content-sha256`,
    /// which libcurl then signs with the other `x-amz-*` headers.
    /// `upload`, when given, is the body instead of `body` (a PUT streamed from a file).
    private func perform(_ method: String, _ url: String, body: Data?, headers extra: [String], contentSHA256: String? = nil,
                         upload: UploadSource? = nil) throws(S3Error) -> Response {
        curl_easy_reset(easy)
        let sink = BodySink()
        tilespool_easy_setopt_string(easy, CURLOPT_URL, url)
        tilespool_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, method)
        tilespool_easy_setopt_string(easy, CURLOPT_PROTOCOLS_STR, "http,https")
        tilespool_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1)
        tilespool_easy_setopt_long(easy, CURLOPT_TCP_NODELAY, 1)
        tilespool_easy_setopt_long(easy, CURLOPT_TIMEOUT_MS, Int(timeout * 1000))
        tilespool_easy_setopt_long(easy, CURLOPT_CONNECTTIMEOUT_MS, Int(min(timeout, 10) * 1000))
        tilespool_easy_setopt_string(easy, CURLOPT_AWS_SIGV4, "aws:amz:\(config.region):s3")
        tilespool_easy_setopt_string(easy, CURLOPT_USERNAME, config.accessKeyID)
        tilespool_easy_setopt_string(easy, CURLOPT_PASSWORD, config.secretAccessKey)
        tilespool_easy_setopt_write_cb(easy, CURLOPT_WRITEFUNCTION, s3WriteBody)
        tilespool_easy_setopt_pointer(easy, CURLOPT_WRITEDATA, Unmanaged.passUnretained(sink).toOpaque())
        if method == "HEAD" { tilespool_easy_setopt_long(easy, CURLOPT_NOBODY, 1) }
        var list: UnsafeMutablePointer<curl_slist>?
        defer { if let list { curl_slist_free_all(list) } }
        let hash = contentSHA256 ?? SHA256.hex(body ?? Data())
        // Every header given here is signed by libcurl, so none may be a removal (`Expect:`), which
        // would be signed but not sent. (A PUT from memory sends no `Expect: 100-continue` below 1 MiB.)
        for h in ["x-amz-content-sha256: \(hash)"] + (body == nil && upload == nil ? [] : ["Content-Type: application/octet-stream"]) + extra
            + (config.sessionToken.map { ["x-amz-security-token: \($0)"] } ?? []) {
            list = curl_slist_append(list, h)
        }
        tilespool_easy_setopt_slist(easy, CURLOPT_HTTPHEADER, list)
        if let body {
            tilespool_easy_setopt_off(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count))
            body.withUnsafeBytes { raw in
                _ = tilespool_easy_setopt_pointer(easy, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!))
            }
        }
        if let upload {
            tilespool_easy_setopt_long(easy, CURLOPT_UPLOAD, 1)
            tilespool_easy_setopt_off(easy, CURLOPT_INFILESIZE_LARGE, curl_off_t(upload.size))
            tilespool_easy_setopt_read_cb(easy, CURLOPT_READFUNCTION, s3ReadUpload)
            tilespool_easy_setopt_pointer(easy, CURLOPT_READDATA, Unmanaged.passUnretained(upload).toOpaque())
            tilespool_easy_setopt_seek_cb(easy, CURLOPT_SEEKFUNCTION, s3SeekUpload)
            tilespool_easy_setopt_pointer(easy, CURLOPT_SEEKDATA, Unmanaged.passUnretained(upload).toOpaque())
        }
        let code = withExtendedLifetime(upload) { curl_easy_perform(easy) }
        guard code == CURLE_OK else {
            throw S3Error(message: quoted("\(String(cString: curl_easy_strerror(code))) (\(config.endpoint))"))
        }
        var status = 0
        tilespool_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
        return Response(status: status, body: sink.data)
    }

    /// The error of a refused request: S3's `<Error><Code>` and `<Message>` when the body has them,
    /// each with the credentials replaced (`quoted`: a server may echo the session token).
    private func refusal(_ r: Response) -> S3Error {
        let p = ErrorParser(data: r.body)
        return S3Error(status: r.status, code: quoted(p.code), message: p.message.isEmpty ? "HTTP \(r.status)" : quoted(p.message))
    }

    /// `text` from the server (or naming the endpoint) as an `S3Error` may quote it: the access
    /// key id, the secret key and the session token replaced by `REDACTED` wherever they appear
    /// (`S3Config.secrets`), and credentials in URL form redacted (`Redaction.redactEmbedded`).
    func quoted(_ text: String) -> String { Redaction.redactEmbedded(text, secrets: secrets) }

    /// `config.secrets`, worked out once.
    private lazy var secrets = config.secrets
}

final class BodySink { var data = Data() }

/// The body of a streamed upload: `size` bytes of an open file, read from `offset` (`pread`, so
/// the file's own offset is never moved). `readError` is set when a read fails or the file ends
/// early; the upload is then aborted.
final class UploadSource {
    let fd: Int32
    let size: Int
    var offset = 0
    var readError: String?
    init(fd: Int32, size: Int) { self.fd = fd; self.size = size }
}

private func s3ReadUpload(_ buffer: UnsafeMutablePointer<CChar>?, _ size: Int, _ nitems: Int, _ user: UnsafeMutableRawPointer?) -> Int {
    guard let user, let buffer else { return Int(CURL_READFUNC_ABORT) }
    let source = Unmanaged<UploadSource>.fromOpaque(user).takeUnretainedValue()
    let want = min(size * nitems, source.size - source.offset)
    if want <= 0 { return 0 }
    var n: Int
    repeat { n = pread(source.fd, buffer, want, off_t(source.offset)) } while n < 0 && errno == EINTR
    if n <= 0 {
        source.readError = n < 0 ? String(cString: strerror(errno)) : "the file ended at \(source.offset) of \(source.size) bytes"
        return Int(CURL_READFUNC_ABORT)
    }
    source.offset += n
    return n
}

/// Rewinds the upload when libcurl sends the body again (a reused connection found closed).
private func s3SeekUpload(_ user: UnsafeMutableRawPointer?, _ offset: curl_off_t, _ origin: Int32) -> Int32 {
    guard let user, origin == SEEK_SET, offset >= 0 else { return CURL_SEEKFUNC_CANTSEEK }
    let source = Unmanaged<UploadSource>.fromOpaque(user).takeUnretainedValue()
    guard Int(offset) <= source.size else { return CURL_SEEKFUNC_FAIL }
    source.offset = Int(offset)
    return CURL_SEEKFUNC_OK
}

private func s3WriteBody(_ ptr: UnsafeMutablePointer<CChar>?, _ size: Int, _ nmemb: Int, _ user: UnsafeMutableRawPointer?) -> Int {
    guard let user, let ptr else { return 0 }
    let sink = Unmanaged<BodySink>.fromOpaque(user).takeUnretainedValue()
    sink.data.append(UnsafeRawPointer(ptr).assumingMemoryBound(to: UInt8.self), count: size * nmemb)
    return size * nmemb
}

/// Reads S3's XML error document (`<Error><Code>..</Code><Message>..</Message></Error>`).
private final class ErrorParser: NSObject, XMLParserDelegate {
    var code = "", message = ""
    private var text = ""
    init(data: Data) {
        super.init()
        let p = XMLParser(data: data)
        p.delegate = self
        _ = p.parse()
    }
    func parser(_ parser: XMLParser, didStartElement e: String, namespaceURI: String?, qualifiedName: String?, attributes: [String: String] = [:]) { text = "" }
    func parser(_ parser: XMLParser, foundCharacters string: String) { text += string }
    func parser(_ parser: XMLParser, didEndElement e: String, namespaceURI: String?, qualifiedName: String?) {
        if e == "Code" { code = text } else if e == "Message" { message = text }
    }
}

/// Reads one ListObjectsV2 page (`<Contents><Key>, <Size>, <LastModified>`, `<IsTruncated>`,
/// `<NextContinuationToken>`).
private final class ListingParser: NSObject, XMLParserDelegate {
    var objects: [S3Object] = []
    var truncated = false
    var nextToken: String?
    /// `<CommonPrefixes><Prefix>` of a listing with a delimiter, with `strip` removed.
    var commonPrefixes: [String] = []
    var ok = false
    private var inCommonPrefixes = false
    private var text = ""
    private var current: S3Object?
    private let strip: String
    init(data: Data, strip: String) {
        self.strip = strip
        super.init()
        let p = XMLParser(data: data)
        p.delegate = self
        ok = p.parse()
    }
    func parser(_ parser: XMLParser, didStartElement e: String, namespaceURI: String?, qualifiedName: String?, attributes: [String: String] = [:]) {
        text = ""
        if e == "Contents" { current = S3Object(key: "", size: 0, lastModified: 0) }
        if e == "CommonPrefixes" { inCommonPrefixes = true }
    }
    func parser(_ parser: XMLParser, foundCharacters string: String) { text += string }
    func parser(_ parser: XMLParser, didEndElement e: String, namespaceURI: String?, qualifiedName: String?) {
        switch e {
        case "Key": current?.key = text.hasPrefix(strip) ? String(text.dropFirst(strip.count)) : text
        case "Size": current?.size = S3Object.size(listed: text)
        case "LastModified": current?.lastModified = S3Time.parse(text) ?? 0
        case "Contents": if let c = current { objects.append(c) }; current = nil
        case "IsTruncated": truncated = text == "true"
        case "NextContinuationToken": nextToken = text
        case "CommonPrefixes": inCommonPrefixes = false
        case "Prefix" where inCommonPrefixes: commonPrefixes.append(text.hasPrefix(strip) ? String(text.dropFirst(strip.count)) : text)
        default: break
        }
    }
}

/// ISO 8601 times as S3 writes them (`2026-12-02T06:00:00.000Z`).
enum S3Time {
    static func parse(_ s: String) -> Double? {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let d = f.date(from: s) { return d.timeIntervalSince1970 }
        f.formatOptions = [.withInternetDateTime]
        return f.date(from: s)?.timeIntervalSince1970
    }
}
