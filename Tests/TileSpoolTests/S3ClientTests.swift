import Foundation
import XCTest
@testable import TileSpoolIO

/// Issue 12, first piece: the S3 client against a real Ceph RADOS Gateway (started once for the
/// class, stopped by pid at its end): SigV4 by libcurl, the body's SHA-256 checked by the server,
/// conditional PUT for dedup across writers, clear errors for a wrong secret or no server.
final class S3ClientTests: CephTestCase {

    func prefix() -> String { "t-\(UUID().uuidString.prefix(8))" }

    func testPutGetListDelete() throws {
        let s3 = S3Client(config: try server().config(prefix: prefix()))
        let body = Data("a tile body \(UUID())".utf8)
        let sha = SHA256.hex(body)
        let key = "objects/\(sha.prefix(2))/\(sha)"
        XCTAssertEqual(try s3.put(key, body, ifNoneMatch: true), .created)
        XCTAssertEqual(try s3.put(key, body, ifNoneMatch: true), .alreadyExists, "412: already stored, nothing written")
        XCTAssertEqual(try s3.get(key), body)
        XCTAssertNil(try s3.get("objects/00/missing"))
        try s3.put("regions/a/manifest.0001.tsv", Data("x\n".utf8))
        let listed = try s3.list(prefix: "objects/")
        XCTAssertEqual(listed.map(\.key), [key])
        XCTAssertEqual(listed.first?.size, body.count)
        XCTAssertLessThan(abs((listed.first?.lastModified ?? 0) - Date().timeIntervalSince1970), 300)
        XCTAssertEqual(try s3.list(prefix: "").count, 2)
        try s3.delete(key)
        XCTAssertNil(try s3.get(key))
    }

    /// `touch` (a copy onto itself) makes an existing object young again by its Last-Modified,
    /// keeping its bytes: what a daemon does when its PUT finds the object there (412), so that
    /// gc's grace period protects an object about to be recorded again.
    func testTouchRefreshesLastModifiedAndKeepsTheBytes() throws {
        let s3 = S3Client(config: try server().config(prefix: prefix()))
        let body = Data("old object \(UUID())".utf8)
        try s3.put("objects/old", body)
        try waitUntil("the object is 1.5 s old", timeout: 10, poll: 0.1) {
            Date().timeIntervalSince1970 - (try s3.list(prefix: "objects/old").first?.lastModified ?? .infinity) >= 1.5
        }
        try s3.touch("objects/old")
        let age = Date().timeIntervalSince1970 - (try XCTUnwrap(try s3.list(prefix: "objects/old").first).lastModified)
        XCTAssertLessThan(age, 1.2)
        XCTAssertEqual(try s3.get("objects/old"), body)
        XCTAssertThrowsError(try s3.touch("objects/absent")) { XCTAssertEqual(($0 as? S3Error)?.status, 404, "\($0)") }
    }

    /// `listFolders` gives the next path segment of the keys under a prefix, each once.
    func testListFoldersGivesEachRegionOnce() throws {
        let s3 = S3Client(config: try server().config(prefix: prefix()))
        for k in ["regions/a/request.json", "regions/a/manifest/0000000000.tsv", "regions/b-2/plan.json", "objects/ab/x"] {
            try s3.put(k, Data("x".utf8))
        }
        XCTAssertEqual(try s3.listFolders(prefix: "regions/").sorted(), ["a", "b-2"])
    }

    /// A listing longer than one page (1,000 keys) is followed to its end.
    func testListFollowsContinuationTokens() throws {
        let s3 = S3Client(config: try server().config(prefix: prefix()))
        for i in 0..<1005 { try s3.put(String(format: "k/%05d", i), Data([UInt8(i & 0xff)])) }
        let keys = try s3.list(prefix: "k/").map(\.key)
        XCTAssertEqual(keys.count, 1005)
        XCTAssertEqual(Set(keys).count, 1005)
    }

    /// Eight writers put the same new key at once with If-None-Match: exactly one writes it.
    func testConcurrentConditionalPutsHaveOneWinner() throws {
        let config = try server().config(prefix: prefix())
        let body = Data("shared \(UUID())".utf8)
        final class Outcomes: @unchecked Sendable { let lock = NSLock(); var list: [String] = [] }
        let outcomes = Outcomes()
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            let s3 = S3Client(config: config)
            let o = (try? s3.put("objects/same", body, ifNoneMatch: true)).map { "\($0)" } ?? "error"
            outcomes.lock.lock(); outcomes.list.append(o); outcomes.lock.unlock()
        }
        let all = outcomes.list
        XCTAssertEqual(all.filter { $0 == "created" }.count, 1, "\(all)")
        XCTAssertEqual(all.filter { $0 == "alreadyExists" }.count, 7, "\(all)")
    }

    /// A wrong secret is a permanent 403 naming the signature, at once, without the secret in it.
    func testWrongSecretIsAClearPermanentError() throws {
        let s3 = S3Client(config: try server().config(prefix: prefix(), secret: "WRONG-SECRET-VALUE"))
        let t0 = Date()
        XCTAssertThrowsError(try s3.put("objects/x", Data("x".utf8))) { e in
            let e = e as? S3Error
            XCTAssertEqual(e?.status, 403)
            XCTAssertEqual(e?.code, "SignatureDoesNotMatch")
            XCTAssertEqual(e?.isPermanent, true)
            XCTAssertFalse("\(e.map { "\($0)" } ?? "")".contains("WRONG-SECRET-VALUE"))
        }
        XCTAssertLessThan(Date().timeIntervalSince(t0), 10)
    }

    /// A body that does not match its declared SHA-256 (damaged in flight) is refused by the
    /// server and nothing is stored.
    func testBodyNotMatchingItsHashIsRefused() throws {
        let s3 = S3Client(config: try server().config(prefix: prefix()))
        let body = Data("the real bytes".utf8)
        XCTAssertThrowsError(try s3.put("objects/damaged", body, declaredSHA256: SHA256.hex(Data("other bytes".utf8)))) { e in
            XCTAssertEqual((e as? S3Error)?.code, "XAmzContentSHA256Mismatch", "\(e)")
        }
        XCTAssertNil(try s3.get("objects/damaged"))
    }

    /// No server on the endpoint: an error with no HTTP status (a network failure, worth retrying).
    func testUnreachableEndpointIsANetworkError() throws {
        let port = try Loopback.freePort()
        let s3 = S3Client(config: S3Config(endpoint: "http://127.0.0.1:\(port)", bucket: "tiles", accessKeyID: "k", secretAccessKey: "s"))
        s3.timeout = 5
        XCTAssertThrowsError(try s3.get("x")) { e in
            XCTAssertEqual((e as? S3Error)?.status, 0)
            XCTAssertEqual((e as? S3Error)?.isPermanent, false)
        }
    }

    /// How a manifest folder's listing is read (no server): segments alone in number order; the
    /// newest compacted object and the segments above it, the rest obsolete; the next number
    /// above everything listed; other keys ignored.
    func testManifestSegmentsLayout() {
        func o(_ name: String, _ t: Double = 0) -> S3Object { S3Object(key: "regions/r/manifest/" + name, size: 1, lastModified: t) }
        let plain = ManifestSegments(listing: [o("0000000002.tsv"), o("0000000000.tsv"), o("0000000001.tsv"), o("notes.txt")])
        XCTAssertEqual(plain.read.map(\.key), ["0000000000.tsv", "0000000001.tsv", "0000000002.tsv"].map { "regions/r/manifest/" + $0 })
        XCTAssertEqual(plain.obsolete, [])
        XCTAssertNil(plain.compactedAt)
        XCTAssertEqual(plain.next, 3)
        let compacted = ManifestSegments(listing: [o("0000000000.tsv"), o("0000000001.tsv"), o("0000000001.all.tsv", 50),
                                                   o("0000000002.tsv"), o("0000000000.all.tsv", 40), o("0000000003.tsv")])
        XCTAssertEqual(compacted.read.map(\.key), ["0000000001.all.tsv", "0000000002.tsv", "0000000003.tsv"].map { "regions/r/manifest/" + $0 })
        XCTAssertEqual(Set(compacted.obsolete.map(\.key)), Set(["0000000000.tsv", "0000000001.tsv", "0000000000.all.tsv"].map { "regions/r/manifest/" + $0 }))
        XCTAssertEqual(compacted.compactedAt, 50)
        XCTAssertEqual(compacted.next, 4)
        // After gc removed the covered segments, a new segment follows the compacted object's number.
        XCTAssertEqual(ManifestSegments(listing: [o("0000000007.all.tsv")]).next, 8)
        XCTAssertEqual(ManifestSegments(listing: []).next, 0)
        // A planted key whose number no segment has (past 10 digits, a sign) is another key:
        // `next` overflowed on Int.max (a review of 2026-12-07).
        for name in ["9223372036854775807.tsv", "+0000000005.tsv", "99999999999.all.tsv", "-1.tsv", ".tsv"] {
            XCTAssertNil(ManifestSegments.parse("regions/r/manifest/" + name), name)
        }
        XCTAssertEqual(ManifestSegments(listing: [o("0000000001.tsv"), o("9223372036854775807.tsv")]).next, 2)
        // Listed sizes: digits only, at most 5 TiB (Int.min and Int.max trapped the index's sizing).
        XCTAssertEqual(["123", "000123", "0", "", "-9223372036854775808", "+5", "1e3", "9223372036854775807", "99999999999999999999"].map(S3Object.size(listed:)),
                       [123, 123, 0, 0, 0, 0, 0, S3Object.maxSize, S3Object.maxSize])
        // Keys are written in 64 bits: `%010d` printed 2^31 as -2147483648.
        XCTAssertEqual([0, 42, 2_147_483_648, 9_999_999_999].map(ManifestSegments.number), ["0000000000", "0000000042", "2147483648", "9999999999"])
    }

    func testConfigFromURLAndEnvironment() throws {
        let env = ["AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK", "AWS_ENDPOINT_URL": "http://h:1/", "AWS_REGION": "eu-west-1"]
        let c = try S3Config.from(url: "s3://bucket/some/prefix/", endpoint: nil, environment: env)
        XCTAssertEqual([c.bucket, c.prefix, c.endpoint, c.region], ["bucket", "some/prefix", "http://h:1", "eu-west-1"])
        XCTAssertEqual(S3Client(config: c).url("objects/ab/x y"), "http://h:1/bucket/some/prefix/objects/ab/x%20y")
        var vhost = c
        vhost.pathStyle = false
        XCTAssertEqual(S3Client(config: vhost).url("k"), "http://bucket.h:1/some/prefix/k")
        XCTAssertEqual(try S3Config.from(url: "s3://b", endpoint: "https://e", environment: env).endpoint, "https://e")
        XCTAssertThrowsError(try S3Config.from(url: "s3://b", endpoint: nil, environment: [:]))
        XCTAssertThrowsError(try S3Config.from(url: "b/p", endpoint: nil, environment: env))
        XCTAssertThrowsError(try S3Config.from(url: "s3://b", endpoint: nil, environment: ["AWS_ENDPOINT_URL": "http://h"]))
        // Dot segments, which URLs resolve (attack round 53: `s3://tiles/./p1` wrote into p1 but
        // listed `./p1`, and `s3://tiles/../p8` wrote into bucket p8): refused, naming the URL.
        for url in ["s3://tiles/./p1", "s3://tiles/../p8", "s3://tiles/p1/..", "s3://tiles/a/./b", "s3://../p", "s3://./p"] {
            XCTAssertThrowsError(try S3Config.from(url: url, endpoint: nil, environment: env), url) { e in
                XCTAssertTrue("\(e)".contains(url) && "\(e)".contains("'.' or '..'"), "\(e)")
            }
        }
        XCTAssertEqual(try S3Config.from(url: "s3://tiles/.p1/a..b/...", endpoint: nil, environment: env).prefix, ".p1/a..b/...")
    }
}
