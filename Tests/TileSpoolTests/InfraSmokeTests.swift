// Smoke tests of the test servers themselves (Support/NginxServer.swift, Support/FaultServer.swift),
// so that a failure elsewhere is not blamed on the harness.
import Foundation
import XCTest
@testable import TileSpoolCore
@testable import TileSpoolIO

final class InfraSmokeTests: XCTestCase {
    // MARK: nginx over ../shared/mapdata

    func testNginxServesJSONWithBaseReplaced() throws {
        let mapdata = try MapData.require()
        let server = try NginxServer(root: mapdata)
        for path in ["styles/bright/style.local-template.json", "tiles/monaco.tilejson.json"] {
            let response = try Loopback.get(port: server.port, path: "/" + path)
            XCTAssertEqual(response.status, 200, path)
            XCTAssertEqual(response.header("Content-Type"), "application/json", path)
            let onDisk = try String(contentsOf: mapdata.appendingPathComponent(path), encoding: .utf8)
            XCTAssertTrue(onDisk.contains("__BASE__"), path)
            let expected = onDisk.replacingOccurrences(of: "__BASE__", with: server.baseURL)
            XCTAssertEqual(String(decoding: response.body, as: UTF8.self), expected, path)
        }
        let style = try Loopback.get(port: server.port, path: "/styles/bright/style.local-template.json")
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: style.body) as? [String: Any])
        XCTAssertEqual(object["sprite"] as? String, server.baseURL + "/sprites/osm-bright/sprite")
        XCTAssertEqual(object["glyphs"] as? String, server.baseURL + "/fonts/{fontstack}/{range}.pbf")
    }

    func testNginxServesTilesGlyphsAndImagesAsStored() throws {
        let mapdata = try MapData.require()
        let server = try NginxServer(root: mapdata)

        let tilePath = "/tiles/monaco/14/8529/5975.pbf"
        let tile = try Loopback.get(port: server.port, path: tilePath, headers: ["Accept-Encoding": "gzip"])
        XCTAssertEqual(tile.status, 200)
        XCTAssertEqual(tile.header("Content-Encoding"), "gzip")
        XCTAssertEqual(tile.header("Content-Type"), "application/x-protobuf")
        let tileOnDisk = try Data(contentsOf: mapdata.appendingPathComponent(String(tilePath.dropFirst())))
        XCTAssertEqual(tile.body, tileOnDisk)
        XCTAssertEqual(Array(tile.body.prefix(2)), [0x1f, 0x8b])

        let sea = try Loopback.get(port: server.port, path: "/tiles/monaco/14/8530/5975.pbf")
        XCTAssertEqual(sea.status, 404)
        XCTAssertNil(sea.header("Content-Encoding"))

        let glyphs = try Loopback.get(port: server.port, path: "/fonts/KlokanTech%20Noto%20Sans%20Bold/0-255.pbf")
        XCTAssertEqual(glyphs.status, 200)
        XCTAssertNil(glyphs.header("Content-Encoding"))
        XCTAssertEqual(glyphs.header("Content-Type"), "application/x-protobuf")
        XCTAssertEqual(glyphs.body, try Data(contentsOf: mapdata.appendingPathComponent("fonts/KlokanTech Noto Sans Bold/0-255.pbf")))

        let vector = try Loopback.get(port: server.port, path: "/vector/taipei/0/0/0.pbf")
        XCTAssertEqual(vector.status, 200)
        XCTAssertNil(vector.header("Content-Encoding"), "vector/ holds uncompressed MVT")

        let png = try Loopback.get(port: server.port, path: "/raster/osm_carto/0/0/0.png")
        XCTAssertEqual(png.status, 200)
        XCTAssertEqual(png.header("Content-Type"), "image/png")

        let webp = try Loopback.get(port: server.port, path: "/raster/usgs_whitney/8/43/100.webp")
        XCTAssertEqual(webp.status, 200)
        XCTAssertEqual(webp.header("Content-Type"), "image/webp")

        try waitUntil("nginx logged the 6 requests") { server.accessLog().count == 6 }
        XCTAssertEqual(server.requestCount(path: tilePath), 1)
        XCTAssertEqual(server.accessLog().first, .init(uri: tilePath, path: tilePath, status: 200, bytes: tileOnDisk.count))
        XCTAssertEqual(server.accessLog()[1].status, 404)
        XCTAssertEqual(server.requestCount(path: "/fonts/KlokanTech%20Noto%20Sans%20Bold/0-255.pbf"), 1)
        XCTAssertEqual(server.bytesSent(), server.accessLog().reduce(0) { $0 + $1.bytes })
        XCTAssertGreaterThan(server.bytesSent(), tileOnDisk.count + glyphs.body.count)

        server.stop()
        XCTAssertFalse(server.isRunning)
        XCTAssertFalse(Loopback.canConnect(port: server.port))
    }

    func testNginxExtraLocations() throws {
        let server = try NginxServer(root: try MapData.require(),
                                     extraLocations: "location /teapot/ { return 418; }")
        XCTAssertEqual(try Loopback.get(port: server.port, path: "/teapot/1.png").status, 418)
        XCTAssertEqual(try Loopback.get(port: server.port, path: "/tiles/monaco/0/0/0.pbf").status, 200)
    }

    // MARK: fault server

    /// The validators and expiry a response carries, looked up by name in libcurl's header list:
    /// names in any case, no ETag when two are sent (which names the body cannot be told; attack
    /// round 28), max-age over Expires, an HTTP date.
    func testResponseHeadersGiveContentTypeValidatorsAndExpiry() throws {
        let server = try FaultServer()
        defer { server.stop() }
        let client = HTTPClient(options: HTTPOptions())
        let base = "http://127.0.0.1:\(server.port)"
        let before = Int64(Date().timeIntervalSince1970)
        let results = client.fetchAll([base + "/cached/1/2/3.png", base + "/expires/1/2/3.png"])
        let after = Int64(Date().timeIntervalSince1970) + 1
        let cached = results[0], expires = results[1]
        XCTAssertEqual(cached.status, 200)
        XCTAssertEqual(cached.contentType, "image/png")
        XCTAssertNil(cached.freshness.etag, "two ETag headers are no validator")
        XCTAssertEqual(cached.freshness.lastModified, 1_735_689_600, "Wed, 01 Jan 2025 00:00:00 GMT")
        let e = try XCTUnwrap(cached.freshness.expires)
        XCTAssertTrue((before + 60...after + 60).contains(e), "max-age=60 wins over Expires: \(e)")
        XCTAssertEqual(expires.freshness.expires, 1_767_225_600, "Thu, 01 Jan 2026 00:00:00 GMT")
        XCTAssertNil(expires.freshness.etag)
        XCTAssertNil(expires.freshness.lastModified)
        // Two Last-Modified fields (any case) are no Last-Modified either (attack round 29: the
        // first date was kept); one is read in any case.
        try server.registerReply("twolm", headers: [("Last-Modified", "Wed, 01 Jan 2025 00:00:00 GMT"), ("last-modified", "Thu, 02 Jan 2025 00:00:00 GMT")], body: "x")
        try server.registerReply("onelm", headers: [("last-MODIFIED", "Wed, 01 Jan 2025 00:00:00 GMT")], body: "x")
        let lm = client.fetchAll([base + "/reply/twolm/1.png", base + "/reply/onelm/1.png"])
        XCTAssertEqual(lm.map(\.status), [200, 200])
        XCTAssertNil(lm[0].freshness.lastModified)
        XCTAssertEqual(lm[1].freshness.lastModified, 1_735_689_600)
    }

    /// Cache-Control's lifetime (RFC 9111 section 5.2.2): no-cache and no-store win wherever they
    /// stand, else the last max-age (quoted or not); a value that is not delta-seconds (`-5`,
    /// `soon`) is stale at once (section 4.2.1); nothing else sets it. (The clamping of huge
    /// values: `ServerNumberTests`.)
    func testCacheControlLifetime() {
        XCTAssertEqual(CacheLifetime.maxAge("max-age=60"), 60)
        XCTAssertEqual(CacheLifetime.maxAge("public, Max-Age=\"3600\""), 3600)
        XCTAssertEqual(CacheLifetime.maxAge("max-age=60, no-cache"), 0)
        XCTAssertEqual(CacheLifetime.maxAge("no-store, max-age=60"), 0)
        XCTAssertEqual(CacheLifetime.maxAge("max-age=10,max-age=20"), 20)
        XCTAssertEqual(CacheLifetime.maxAge("max-age=-5"), 0)
        XCTAssertNil(CacheLifetime.maxAge("public, s-maxage=60"))
        XCTAssertEqual(CacheLifetime.maxAge("max-age=soon"), 0)
        XCTAssertNil(CacheLifetime.maxAge(nil))
    }

    func testFaultServerFlakyThenRestartOnSamePort() throws {
        let server = try FaultServer()
        let path = "/flaky/1/3/4/5.png"
        XCTAssertEqual(try Loopback.get(port: server.port, path: path).status, 503)
        let second = try Loopback.get(port: server.port, path: path)
        XCTAssertEqual(second.status, 200)
        XCTAssertEqual(second.body, FaultServer.okBody(path))
        XCTAssertEqual(second.header("Content-Length"), String(FaultServer.okBody(path).count))
        XCTAssertEqual(server.hits(path), 2)

        let port = server.port
        server.stop()
        XCTAssertFalse(server.isRunning)
        XCTAssertFalse(Loopback.canConnect(port: port))
        XCTAssertThrowsError(try Loopback.get(port: port, path: "/ok/1"))

        try server.restart()
        XCTAssertEqual(server.port, port)
        XCTAssertEqual(try Loopback.get(port: port, path: path).status, 200, "hit counts survive a restart")
        XCTAssertEqual(server.hits(path), 3)
    }

    func testFaultServerBehaviours() throws {
        let server = try FaultServer()
        let port = server.port
        XCTAssertEqual(try Loopback.get(port: port, path: "/ok/0/0/0.pbf").body, FaultServer.okBody("/ok/0/0/0.pbf"))
        XCTAssertEqual(try Loopback.get(port: port, path: "/empty/1").status, 204)
        XCTAssertEqual(try Loopback.get(port: port, path: "/missing/1").status, 404)
        XCTAssertEqual(try Loopback.get(port: port, path: "/error500/1").status, 500)
        let limited = try Loopback.get(port: port, path: "/ratelimit/1/a")
        XCTAssertEqual(limited.status, 429)
        XCTAssertEqual(limited.header("Retry-After"), "1")
        XCTAssertEqual(try Loopback.get(port: port, path: "/ratelimit/1/a").status, 200)
        let dated = try Loopback.get(port: port, path: "/ratelimitdate/1/a")
        XCTAssertEqual(dated.status, 429)
        XCTAssertTrue(dated.header("Retry-After")?.hasSuffix(" GMT") ?? false)
        let redirect = try Loopback.get(port: port, path: "/redirect/1/2/3.png?key=k")
        XCTAssertEqual(redirect.status, 302)
        XCTAssertEqual(redirect.header("Location"), "/ok/1/2/3.png?key=k")
        XCTAssertEqual(try Loopback.get(port: port, path: "/redirectfile/1").header("Location"), "file:///etc/passwd")
        XCTAssertEqual(try Loopback.get(port: port, path: "/badgzip/1").header("Content-Encoding"), "gzip")
        XCTAssertThrowsError(try Loopback.get(port: port, path: "/reset/1"))
        let short = try Loopback.get(port: port, path: "/short/1")
        XCTAssertEqual(short.header("Content-Length"), "1000")
        XCTAssertEqual(short.body.count, 500)
        XCTAssertThrowsError(try Loopback.get(port: port, path: "/hang/1", timeout: 0.3))

        // Documents: registered from Swift or over HTTP, served with __BASE__ filled in.
        try server.register("tiles.json", json: #"{"tiles":["__BASE__/ok/{z}/{x}/{y}.pbf"]}"#)
        XCTAssertEqual(String(decoding: try Loopback.get(port: port, path: "/json/tiles.json").body, as: UTF8.self),
                       #"{"tiles":["\#(server.baseURL)/ok/{z}/{x}/{y}.pbf"]}"#)
        let posted = try Loopback.request(port: port, method: "POST", path: "/_register/style.json",
                                          body: Data(#"{"sources":"__BASE__/json/tiles.json"}"#.utf8))
        XCTAssertEqual(posted.status, 201)
        let style = try Loopback.get(port: port, path: "/json/style.json")
        XCTAssertEqual(style.header("Content-Type"), "application/json")
        XCTAssertEqual(String(decoding: style.body, as: UTF8.self), #"{"sources":"\#(server.baseURL)/json/tiles.json"}"#)
        XCTAssertEqual(try Loopback.get(port: port, path: "/json/absent").status, 404)
        XCTAssertEqual(String(decoding: try Loopback.get(port: port, path: "/_hits?path=/ratelimit/1/a").body, as: UTF8.self), "2")
    }

    func testFaultServerHugeBodyIsPredictable() throws {
        let server = try FaultServer()
        let path = "/huge/9/9/9.bin"
        let response = try Loopback.get(port: server.port, path: path, timeout: 60)
        XCTAssertEqual(response.header("Content-Length"), String(FaultServer.hugeSize))
        XCTAssertEqual(response.body.count, FaultServer.hugeSize)
        XCTAssertTrue(response.body == FaultServer.hugeBody(path))
    }

    func testWaitUntilNamesWhatTimedOut() {
        XCTAssertThrowsError(try waitUntil("pigs fly", timeout: 0.05) { false }) { error in
            XCTAssertTrue("\(error)".contains("pigs fly"), "\(error)")
        }
    }
}
