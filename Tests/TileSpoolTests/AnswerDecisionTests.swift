import Foundation
import XCTest
@testable import TileSpoolCore

/// `AnswerDecision.decide` over every class of answer a region's whole-body request can get:
/// pure, no network, no disk. The messages asserted are the ones the daemon shows (status,
/// events, failed.tsv), byte for byte.
final class AnswerDecisionTests: XCTestCase {
    static let tileURL = "https://tiles.example/t/3/4/5.png"
    static let png = Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13])

    /// A tile answer with `status` and a PNG body unless said otherwise.
    func tile(_ status: Int, body: Data = AnswerDecisionTests.png, url: String = AnswerDecisionTests.tileURL,
              contentType: String? = "image/png", retryAfter: Double? = nil, emptyStatuses: [Int] = [204, 404],
              secrets: Redaction.Secrets = .none) -> AnswerFacts {
        AnswerFacts(url: url, secrets: secrets, kind: .tile, status: status, body: body, contentType: contentType,
                    retryAfter: retryAfter, emptyStatuses: emptyStatuses)
    }

    func decide(_ a: AnswerFacts) -> AnswerDecision { AnswerDecision.decide(a) }

    func httpError(_ s: Int, _ url: String = AnswerDecisionTests.tileURL) -> RegionError {
        RegionError(code: .httpError, message: "HTTP \(s) from \(url)", url: url, httpStatus: s)
    }

    // MARK: - Recorded answers

    func testTwoHundredWithATileBodyIsStored() {
        XCTAssertEqual(decide(tile(200)), .record(.body))
        // No extension to check (a vector tile): any non-HTML, non-text body is stored.
        XCTAssertEqual(decide(tile(200, body: Data([0x1f, 0x8b, 1, 2]), url: "https://t.example/1/2/3.pbf", contentType: "application/x-protobuf")),
                       .record(.body))
    }

    func testTwoHundredWithNoBodyIsAnEmptyTile() {
        XCTAssertEqual(decide(tile(200, body: Data())), .record(.emptyTile))
        // Even when 200 is not among the empty statuses: a 2xx with no body is an empty tile.
        XCTAssertEqual(decide(tile(200, body: Data(), emptyStatuses: [])), .record(.emptyTile))
    }

    func testNoContentIsAnEmptyTile() {
        XCTAssertEqual(decide(tile(204, body: Data())), .record(.emptyTile))
        XCTAssertEqual(decide(tile(204, body: Data(), emptyStatuses: [])), .record(.emptyTile), "a 2xx without body, listed or not")
    }

    func testEmptyStatusesAreEmptyTilesOnlyWhenListed() {
        XCTAssertEqual(decide(tile(404, body: Data("not here".utf8))), .record(.emptyTile), "404 is an empty status by default")
        XCTAssertEqual(decide(tile(404, emptyStatuses: [204])), .fail(.resource(httpError(404))), "404 not listed: the tile fails")
        XCTAssertEqual(decide(tile(403, emptyStatuses: [204, 403])), .record(.emptyTile), "any status the request lists")
        // Empty statuses are about tiles: a style's 404 is not an empty style.
        let style = AnswerFacts(url: "https://s.example/style.json", kind: .style, status: 404)
        XCTAssertEqual(decide(style), .fail(.resource(httpError(404, "https://s.example/style.json"))))
    }

    func testNotFoundIsMissingForSpritesAndGlyphsOnly() {
        for kind in [ResourceKind.sprite, .glyphs] {
            let a = AnswerFacts(url: "https://s.example/x", kind: kind, status: 404, emptyStatuses: [])
            XCTAssertEqual(decide(a), .record(.missing), "\(kind)")
            // Only 404: a 410 for a sprite fails it like any other 4xx.
            var gone = a; gone.status = 410
            XCTAssertEqual(decide(gone), .fail(.resource(httpError(410, "https://s.example/x"))), "\(kind)")
        }
        for kind in [ResourceKind.style, .source, .data] {
            let a = AnswerFacts(url: "https://s.example/x", kind: kind, status: 404)
            XCTAssertEqual(decide(a), .fail(.resource(httpError(404, "https://s.example/x"))), "\(kind)")
        }
    }

    func testDocumentsAreStoredWhateverTheirBody() {
        // TileBody is about tiles: a style is JSON (checked when parsed), an empty 200 is stored as is.
        let json = AnswerFacts(url: "https://s.example/style.json", kind: .style, status: 200, body: Data("{}".utf8), contentType: "text/plain")
        XCTAssertEqual(decide(json), .record(.body))
        let empty = AnswerFacts(url: "https://s.example/style.json", kind: .style, status: 200)
        XCTAssertEqual(decide(empty), .record(.body))
        let sprite = AnswerFacts(url: "https://s.example/sprite.png", kind: .sprite, status: 204)
        XCTAssertEqual(decide(sprite), .record(.body))
    }

    // MARK: - Other statuses

    func testOtherClientErrorsFailTheResource() {
        for s in [400, 401, 403, 410, 418, 451] {
            XCTAssertEqual(decide(tile(s)), .fail(.resource(httpError(s))), "\(s)")
        }
        // A 3xx that reached us (a redirect not followed) is no 2xx either.
        XCTAssertEqual(decide(tile(302)), .fail(.resource(httpError(302))))
    }

    func testPartialContentToAWholeBodyRequestIsRetriedThenABadResponse() {
        let d = decide(tile(206))
        XCTAssertEqual(d, .retry(.init(exhausted: .resource(RegionError(
            code: .badResponse, message: "HTTP 206 Partial Content to a request for the whole body, from \(Self.tileURL)",
            url: Self.tileURL, httpStatus: 206)))))
    }

    func testServerErrorsAreRetriedWithoutHold() {
        for s in [500, 502, 503, 504, 599] {
            XCTAssertEqual(decide(tile(s)), .retry(.init(after: nil, holdFor: nil, exhausted: .resource(httpError(s)))), "\(s)")
        }
    }

    func testTooManyRequestsWithAndWithoutRetryAfter() {
        XCTAssertEqual(decide(tile(429)), .retry(.init(exhausted: .resource(httpError(429)))))
        XCTAssertEqual(decide(tile(429, retryAfter: 7)), .retry(.init(after: 7, holdFor: 7, exhausted: .resource(httpError(429)))))
        // 503 with Retry-After holds the region too.
        XCTAssertEqual(decide(tile(503, retryAfter: 2.5)), .retry(.init(after: 2.5, holdFor: 2.5, exhausted: .resource(httpError(503)))))
        // Longer than the maximum: the hold is cut to it (the retry's delay is cut by the daemon's backoff).
        XCTAssertEqual(decide(tile(429, retryAfter: 10 * 3600)),
                       .retry(.init(after: 10 * 3600, holdFor: RetryAfter.maximum, exhausted: .resource(httpError(429)))))
        // Retry-After on a 404 (an empty tile) or a 403 holds nothing.
        XCTAssertEqual(decide(tile(404, retryAfter: 30)), .record(.emptyTile))
        XCTAssertEqual(decide(tile(403, retryAfter: 30)), .fail(.resource(httpError(403))))
    }

    // MARK: - 304

    func testNotModifiedToAConditionalRequestWithAPreviousLineIsRevalidated() {
        var a = tile(304, body: Data())
        a.notModified = true
        a.conditional = true
        a.hasPreviousLine = true
        XCTAssertEqual(decide(a), .revalidated)
        // For a document too (the daemon reads its stored copy).
        let style = AnswerFacts(url: "https://s.example/style.json", kind: .style, status: 304, notModified: true, conditional: true, hasPreviousLine: true)
        XCTAssertEqual(decide(style), .revalidated)
    }

    func testNotModifiedToAPlainRequestIsALieThatFailsTheRegion() {
        let lie = RegionError(code: .httpError, message: "HTTP 304 Not Modified to a request that was not conditional, from \(Self.tileURL)",
                              url: Self.tileURL, httpStatus: 304)
        var a = tile(304, body: Data())
        a.notModified = true
        // A download (no previous line, nothing conditional): whatever the empty statuses say.
        XCTAssertEqual(decide(a), .fail(.region(lie)))
        a.emptyStatuses = [304]
        XCTAssertEqual(decide(a), .fail(.region(lie)), "a 304 is never an empty tile")
        // A refresh that asked unconditionally (the pack's line had no validators).
        a.hasPreviousLine = true
        XCTAssertEqual(decide(a), .fail(.region(lie)))
        // Conditional, but the previous line is gone: nothing to keep.
        a.hasPreviousLine = false
        a.conditional = true
        XCTAssertEqual(decide(a), .fail(.region(lie)))
    }

    // MARK: - Bodies that are not tiles

    func testAnHTMLPageWithTwoHundredIsRetriedThenABadResponse() {
        let html = Data("<!DOCTYPE html><html><body>Please log in</body></html>".utf8)
        let d = decide(tile(200, body: html, contentType: "text/html; charset=utf-8"))
        guard case .retry(let x) = d, case .resource(let e) = x.exhausted else { return XCTFail("\(d)") }
        XCTAssertNil(x.after)
        XCTAssertNil(x.holdFor)
        XCTAssertEqual(e.code, .badResponse)
        XCTAssertEqual(e.httpStatus, 200)
        XCTAssertEqual(e.url, Self.tileURL)
        let why = "the body is an HTML page, not a tile: received \(html.count) bytes of Content-Type 'text/html; charset=utf-8' starting "
        XCTAssertTrue(e.message.hasPrefix("HTTP 200 from \(Self.tileURL): \(why)"), e.message)
        XCTAssertEqual(x.log.map { "HTTP 200 from \(Self.tileURL): " + $0.dropFirst("HTTP 200: ".count) }, e.message)
    }

    func testAWrongImageSignatureOrTextIsNotStored() {
        let jpeg = Data([0xFF, 0xD8, 0xFF, 0xE0, 1, 2])
        guard case .retry(let x) = decide(tile(200, body: jpeg, contentType: "image/png")), case .resource(let e) = x.exhausted else {
            return XCTFail("a JPEG under a .png URL is stored")
        }
        XCTAssertTrue(e.message.hasPrefix("HTTP 200 from \(Self.tileURL): the body is not a PNG image (its first bytes are not the PNG signature): received 6 bytes"), e.message)
        guard case .retry(let t) = decide(tile(200, body: Data("quota exceeded".utf8), url: "https://t.example/1/2/3.pbf", contentType: "text/plain")),
              case .resource(let te) = t.exhausted else { return XCTFail("a text body is stored") }
        XCTAssertTrue(te.message.hasPrefix("HTTP 200 from https://t.example/1/2/3.pbf: the body is text (text/plain), not a tile"), te.message)
        // The same HTML answered with an empty status is an empty tile: the body is not looked at.
        XCTAssertEqual(decide(tile(404, body: Data("<html>no</html>".utf8), contentType: "text/html")), .record(.emptyTile))
    }

    // MARK: - No HTTP answer

    func testNetworkFailureIsRetriedThenTheRegionWaitsForTheNetwork() {
        var a = tile(0)
        a.failure = .network("Couldn't connect to server")
        XCTAssertEqual(decide(a), .retry(.init(exhausted: .networkLost(why: "Couldn't connect to server"))))
    }

    func testBadResponseIsRetriedThenTheResourceFails() {
        var a = tile(200)
        a.failure = .badResponse("transfer closed with 10 bytes remaining to read")
        XCTAssertEqual(decide(a), .retry(.init(exhausted: .resource(RegionError(
            code: .badResponse, message: "transfer closed with 10 bytes remaining to read (\(Self.tileURL))", url: Self.tileURL)),
            log: "bad response: transfer closed with 10 bytes remaining to read")))
    }

    func testRefusedAndPolicyRefusedFailTheRegionAtOnce() {
        var a = tile(0)
        a.failure = .refused("redirect to ftp://x.example/ refused: only http and https")
        XCTAssertEqual(decide(a), .fail(.region(RegionError(
            code: .httpError, message: "redirect to ftp://x.example/ refused: only http and https (\(Self.tileURL))", url: Self.tileURL))))
        a.failure = .policyRefused("tile.openstreetmap.org forbids bulk downloading")
        XCTAssertEqual(decide(a), .fail(.region(RegionError(
            code: .policyRefused, message: "tile.openstreetmap.org forbids bulk downloading (redirected from \(Self.tileURL))", url: Self.tileURL))))
    }

    /// A failure wins over whatever status the client left (the other fields are not read).
    func testAFailureIsDecidedBeforeTheStatus() {
        var a = tile(200)
        a.failure = .network("reset")
        a.notModified = true
        XCTAssertEqual(decide(a), .retry(.init(exhausted: .networkLost(why: "reset"))))
    }

    // MARK: - Secrets

    func testMessagesShowNoSecret() {
        let secrets = Redaction.Secrets(values: ["hunter2-secret"])
        let url = "https://tiles.example/hunter2-secret/1/2/3.png?key=abc123"
        let shown = "https://tiles.example/REDACTED/1/2/3.png?key=REDACTED"
        XCTAssertEqual(decide(tile(500, url: url, secrets: secrets)),
                       .retry(.init(exhausted: .resource(RegionError(code: .httpError, message: "HTTP 500 from \(shown)", url: shown, httpStatus: 500)))))
        // The server's words quoting the secret and the URL's key.
        var a = tile(0, url: url, secrets: secrets)
        a.failure = .refused("Location: https://evil.example/?key=abc123&h=hunter2-secret")
        guard case .fail(.region(let e)) = decide(a) else { return XCTFail() }
        XCTAssertFalse(e.message.contains("hunter2-secret"), e.message)
        XCTAssertFalse(e.message.contains("abc123"), e.message)
        XCTAssertTrue(e.message.hasSuffix(" (\(shown))"), e.message)
        // A body that is not a tile and echoes the secret.
        let html = Data("<html>hello hunter2-secret</html>".utf8)
        guard case .retry(let x) = decide(tile(200, body: html, url: url, contentType: "text/html", secrets: secrets)),
              case .resource(let be) = x.exhausted else { return XCTFail() }
        XCTAssertFalse(be.message.contains("hunter2-secret"), be.message)
        XCTAssertTrue(be.message.hasPrefix("HTTP 200 from \(shown): the body is an HTML page"), be.message)
    }

    // MARK: - maxFailedTiles

    func testOverBudgetMessageNamesTheBudgetAndWhatBecameOfThePack() {
        XCTAssertEqual(AnswerDecision.overBudgetMessage("HTTP 403 from u", failed: 3, budget: 3, refreshing: false),
                       "HTTP 403 from u; 4 tiles failed, more than the request's maxFailedTiles (3); see failed.tsv")
        XCTAssertEqual(AnswerDecision.overBudgetMessage("HTTP 403 from u", failed: 3, budget: 3, refreshing: true),
                       "HTTP 403 from u; 4 tiles failed, more than the request's maxFailedTiles (3): the refresh was abandoned and the pack is unchanged")
    }

    // MARK: - PMTiles range requests (`decideRange`)

    static let archiveURL = "https://tiles.example/world.pmtiles?key=K7SECRET"
    static let archiveShown = "https://tiles.example/world.pmtiles?key=REDACTED"

    /// An answer to the range request for bytes 1000..<1100 of the archive.
    func range(_ status: Int, bytes: Int = 100, failure: AnswerFacts.Failure? = nil, retryAfter: Double? = nil,
               changed: Bool = false, etag: String? = nil, contentRange: String? = "bytes 1000-1099/5000", cutAtLimit: Int? = nil) -> RangeDecision {
        let a = AnswerFacts(url: AnswerDecisionTests.archiveURL, kind: .tile, failure: failure, status: status,
                            body: Data(repeating: 7, count: bytes), retryAfter: retryAfter)
        return AnswerDecision.decideRange(RangeAnswerFacts(answer: a, start: 1000, end: 1100, source: "basemap", versionChanged: changed, etag: etag,
                                                           contentRange: contentRange, cutAtLimit: cutAtLimit))
    }

    /// A 200 cut at the largest body accepted (the server ignored Range; the archive is over
    /// --max-object-size) fails the region at once: asking again brings the whole file again
    /// (attack round 39). A 206 cut at the limit is not: its whole tiles are kept, the rest asked again.
    func testAWholeArchiveOverTheLimitFailsTheRegion() {
        let shown = AnswerDecisionTests.archiveShown
        XCTAssertEqual(range(200, bytes: 900, failure: .badResponse("body larger than 900 bytes"), cutAtLimit: 900),
                       .fail(.region(RegionError(code: .badResponse, message: "source 'basemap': the server ignored Range and sent the whole PMTiles archive, which is larger than the largest body accepted (900 bytes, --max-object-size); raise it, or serve the archive from a server that honours Range", url: shown, httpStatus: 200))))
        XCTAssertEqual(range(206, bytes: 90, failure: .badResponse("body larger than 90 bytes"), cutAtLimit: 90),
                       range(206, bytes: 90, failure: .badResponse("body larger than 90 bytes")), "a 206 cut at the limit is decided as before")
    }

    /// A 206 whose Content-Range is not the bytes asked (shifted, another length, absent, not a
    /// byte range) is retried, never cut (attack round 24); the field's grammar is RFC 9110's.
    func testA206ForOtherBytesIsRetriedNotCut() {
        let shown = AnswerDecisionTests.archiveShown
        XCTAssertEqual(range(206, contentRange: "bytes 1000-1099/*"), .cut(from: 0))
        XCTAssertEqual(range(206, contentRange: "BYTES  1000-1099/1100"), .cut(from: 0))
        for field in ["bytes 1001-1100/5000", "bytes 1000-1100/5000", "bytes 999-1098/5000", "bytes */5000", "bytes 1000-1099/1099",
                      "bytes 1000-1099", "items 1000-1099/5000", "bytes -1000-1099/5000", "bytes 1000-0x44/5000", "bytes 1099-1000/5000", ""] {
            XCTAssertEqual(range(206, contentRange: field), .retry(.init(exhausted: .resource(rangeError(
                .badResponse, "HTTP 206 from \(shown) for bytes 1000-1099 says it holds Content-Range: \(field): not the bytes asked", 206)))), field)
        }
        XCTAssertEqual(range(206, contentRange: nil), .retry(.init(exhausted: .resource(rangeError(
            .badResponse, "HTTP 206 from \(shown) for bytes 1000-1099 says it holds no Content-Range: not the bytes asked", 206)))))
        XCTAssertEqual(ContentRange.parse("bytes 0-0/1"), 0...0)
        XCTAssertEqual(ContentRange.parse("bytes 5-18446744073709551614/*"), 5...18_446_744_073_709_551_614)
        XCTAssertNil(ContentRange.parse("bytes 5-18446744073709551616/*"), "past UInt64")
        XCTAssertFalse(ContentRange.holds("bytes 0-0/1", start: 0, count: 0))
    }

    func rangeError(_ code: ErrorCode, _ message: String, _ s: Int?) -> RegionError {
        RegionError(code: code, message: message, url: AnswerDecisionTests.archiveShown, httpStatus: s)
    }

    /// A 206 for the bytes asked that was cut short (the connection dropped, a timeout) keeps the
    /// bytes that came, as does a 206 of fewer bytes from the first whose Content-Range says
    /// so; a cut-short answer of another version, for other bytes, or with nothing in it is
    /// retried whole.
    func testAnswersCutShortKeepTheirBytes() {
        let shown = AnswerDecisionTests.archiveShown
        for failure in [AnswerFacts.Failure.network("Transferred a partial file"), .network("transfer timeout: not finished within 300 s")] {
            // Retried whole when the bytes cannot be told to be the first asked.
            let whole = range(206, bytes: 40, failure: failure, contentRange: "bytes 1001-1100/5000")
            guard case .retry(let x) = whole else { return XCTFail("\(whole)") }
            XCTAssertEqual(range(206, bytes: 40, failure: failure), .salvage(received: 40, retry: x), "\(failure)")
            XCTAssertEqual(range(206, bytes: 40, failure: failure, contentRange: nil), .retry(x))
            XCTAssertEqual(range(206, bytes: 0, failure: failure), .retry(x), "nothing came")
            XCTAssertEqual(range(200, bytes: 40, failure: failure), .retry(x), "not a range answer")
            // Another version's bytes are never kept: the region fails as for a whole answer.
            guard case .fail(.region(let e)) = range(206, bytes: 40, failure: failure, changed: true) else { return XCTFail("\(failure)") }
            XCTAssertEqual(e.code, .archiveChanged)
        }
        // Fewer bytes than asked, from the first, as the Content-Range says (a server that caps ranges).
        let short = AnswerDecision.Retry(exhausted: .resource(rangeError(.badResponse, "HTTP 206 with 60 of the 100 bytes asked (bytes 1000-1099) from \(shown)", 206)))
        XCTAssertEqual(range(206, bytes: 60, contentRange: "bytes 1000-1059/5000"), .salvage(received: 60, retry: short))
        XCTAssertEqual(range(206, bytes: 60, contentRange: "bytes 1040-1099/5000"), .retry(short), "the last bytes asked, not the first")
        XCTAssertEqual(range(206, bytes: 60), .retry(short), "a Content-Range of all the bytes asked over 60 of them")
    }

    func testRangeWithEveryByteAskedIsCut() {
        XCTAssertEqual(range(206), .cut(from: 0))
        // The server ignored Range and sent the file: the bytes asked are cut out of it.
        XCTAssertEqual(range(200, bytes: 5000), .cut(from: 1000))
        XCTAssertEqual(range(200, bytes: 1100), .cut(from: 1000), "a file that ends where the range does")
    }

    func testShortOrLongAnswersAreRetriedThenEachTileFails() {
        let shown = AnswerDecisionTests.archiveShown
        XCTAssertEqual(range(206, bytes: 60), .retry(.init(exhausted: .resource(rangeError(
            .badResponse, "HTTP 206 with 60 of the 100 bytes asked (bytes 1000-1099) from \(shown)", 206)))))
        XCTAssertEqual(range(206, bytes: 101), .retry(.init(exhausted: .resource(rangeError(
            .badResponse, "HTTP 206 with 101 of the 100 bytes asked (bytes 1000-1099) from \(shown)", 206)))))
        XCTAssertEqual(range(200, bytes: 1099), .retry(.init(exhausted: .resource(rangeError(
            .badResponse, "HTTP 200 with 1099 bytes to a range request for bytes 1000-1099 from \(shown): the server ignored Range and the file is cut short", 200)))))
    }

    func testAChangedArchiveFailsTheRegion() {
        let message = "source 'basemap': the PMTiles archive \(AnswerDecisionTests.archiveShown) changed since the region was planned (HTTP %d%@); no tile of the new version was stored: drop the request again to plan over the new archive"
        XCTAssertEqual(range(412, bytes: 0), .fail(.region(rangeError(.archiveChanged, String(format: message, 412, ""), 412))))
        XCTAssertEqual(range(206, changed: true, etag: "\"v2\""), .fail(.region(rangeError(.archiveChanged, String(format: message, 206, ", ETag \"v2\""), 206))))
        XCTAssertEqual(range(200, bytes: 5000, changed: true), .fail(.region(rangeError(.archiveChanged, String(format: message, 200, ""), 200))))
        // A validator is compared only on a success: a 503 of a changed archive is retried.
        if case .retry = range(503, bytes: 0, changed: true) {} else { XCTFail("a 503 is retried") }
    }

    func testTooManyRequestsServerErrorsAnd416AreRetried() {
        let shown = AnswerDecisionTests.archiveShown
        XCTAssertEqual(range(429, bytes: 0, retryAfter: 30), .retry(.init(after: 30, holdFor: 30, exhausted: .resource(rangeError(
            .httpError, "HTTP 429 from \(shown) for bytes 1000-1099", 429)))))
        XCTAssertEqual(range(503, bytes: 0, retryAfter: 99_999), .retry(.init(after: 99_999, holdFor: RetryAfter.maximum, exhausted: .resource(rangeError(
            .httpError, "HTTP 503 from \(shown) for bytes 1000-1099", 503)))))
        // 416: backoff alone, even with a Retry-After, and the region is not held.
        XCTAssertEqual(range(416, bytes: 0, retryAfter: 30), .retry(.init(exhausted: .resource(rangeError(
            .httpError, "HTTP 416 from \(shown) for bytes 1000-1099", 416)))))
        // An archive whose length is past the range's start (or not given) may answer it later.
        for field in ["bytes */1001", "bytes */*", "bytes */x", "bytes 0-1/1001"] {
            XCTAssertEqual(range(416, bytes: 0, contentRange: field), .retry(.init(exhausted: .resource(rangeError(
                .httpError, "HTTP 416 from \(shown) for bytes 1000-1099", 416)))), field)
        }
    }

    /// A 416 whose Content-Range puts the archive's end at or before the range's first byte fails
    /// the range's tiles at once: the archive is shorter than its directories say, and asking
    /// again brings the same (it was asked 6 times before).
    func testA416ForBytesPastTheArchivesEndFailsEachTileAtOnce() {
        for field in ["bytes */1000", "bytes */0", "Bytes */999"] {
            XCTAssertEqual(range(416, bytes: 0, contentRange: field), .fail(.resource(rangeError(
                .badResponse, "HTTP 416 from \(AnswerDecisionTests.archiveShown) for bytes 1000-1099: the archive holds \(ContentRange.completeLength(field)!) bytes, and its directories put tiles beyond its end: it is shorter than they say (cut short on the server), or it changed since the region was planned", 416))), field)
        }
        XCTAssertEqual(ContentRange.completeLength("bytes 5-9/5000"), 5000)
        XCTAssertNil(ContentRange.completeLength("bytes */"))
        XCTAssertNil(ContentRange.completeLength(nil))
    }

    func testOtherStatusesFailEachTile() {
        for s in [403, 404, 410, 301] {
            XCTAssertEqual(range(s, bytes: 0), .fail(.resource(rangeError(.httpError, "HTTP \(s) from \(AnswerDecisionTests.archiveShown) for bytes 1000-1099", s))), "\(s)")
        }
    }

    func testRangeTransferFailuresAreDecidedAsForATile() {
        let shown = AnswerDecisionTests.archiveShown
        XCTAssertEqual(range(0, failure: .network("Connection refused")), .retry(.init(exhausted: .networkLost(why: "Connection refused"))))
        XCTAssertEqual(range(0, failure: .refused("scheme 'ftp' is not allowed")), .fail(.region(RegionError(
            code: .httpError, message: "scheme 'ftp' is not allowed (\(shown))", url: shown))))
        XCTAssertEqual(range(0, failure: .policyRefused("tile.openstreetmap.org forbids bulk downloading")), .fail(.region(RegionError(
            code: .policyRefused, message: "tile.openstreetmap.org forbids bulk downloading (redirected from \(shown))", url: shown))))
        // The server's words never show the key.
        XCTAssertEqual(range(0, failure: .badResponse("body cut short after K7SECRET")), .retry(.init(exhausted: .resource(RegionError(
            code: .badResponse, message: "body cut short after REDACTED (\(shown))", url: shown)), log: "bad response: body cut short after REDACTED")))
    }
}
