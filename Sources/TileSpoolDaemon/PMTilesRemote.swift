// Reading a remote PMTiles archive's header and directories over HTTP range requests, to plan a
// region over it (issue 31). The decoding and the planning are the pure core's (`PMTiles` in
// TileSpoolCore); this file only fetches bytes, through `HTTPClient` (libcurl), and inflates
// directories with the zlib wrapper of TileSpoolExport.
import Foundation
import TileSpoolCore
import TileSpoolIO
import TileSpoolExport

/// Plans a region's tiles over a remote PMTiles v3 archive: one range request for the header
/// and root directory (the spec keeps both in the first 16 KiB), one per leaf directory that
/// meets the region, none for any other. Synchronous (for `tilespool plan` and the daemon's
/// planning step, a handful of requests).
public enum PMTilesRemote {
    /// What reading an archive cost and found.
    public struct Reading: Sendable {
        /// The tile set to plan (`TileSet.archive` set, counts exact).
        public var set: TileSet
        /// The archive's header.
        public var header: PMTiles.Header
        /// Range requests made (header and root, leaves).
        public var requests: Int
        /// Bytes received for the header and the directories.
        public var directoryBytes: Int
        /// When the archive is the version `previous` was planned from (same URL, same ETag, or
        /// Last-Modified without one, same rectangles: `set` is `previous`, and no leaf directory
        /// was read), the freshness of the answer that found it so, which revalidates the tile
        /// lines kept as a 304 revalidates a tile's line; nil otherwise.
        public var revalidation: Freshness?
        /// True when the archive is unchanged (`revalidation` is set).
        public var unchanged: Bool { revalidation != nil }
        /// The whole archive, when a server that ignores Range sent it (a 200, at most
        /// `--max-object-size` bytes) for a directory read, with that answer's freshness: the
        /// download cuts the tiles from it rather than asking for the file again.
        public var wholeFile: (bytes: Data, freshness: Freshness)?
    }

    /// Bytes asked first: the header and, in any archive written to the spec, the root directory.
    public static let firstRange = 16_384
    /// Largest directory inflated (bytes after decompression): 64 MiB, far above the spec's
    /// writers (a leaf holds a few thousand entries of a few bytes each).
    public static let maxDirectory = 64 << 20

    /// How many times a header or directory read whose transfer failed on the way (`.network`,
    /// `.badResponse`: reset, timed out, cut short) is asked again before the failure stands.
    public static let readRetries = 2

    /// Reads the archive at `url` and plans `request` over it. A request whose transfer fails
    /// on the way is asked again up to `readRetries` times (0.5 s, then 1 s later).
    /// - Parameters:
    ///   - source: the tile set's name (`tiles0`, or the style's source id), named in errors.
    ///   - styleSource: the style's source, for a style request (its zooms and tile size).
    ///   - http: the client to use; `headers` the request's own headers.
    /// - Throws: `RegionError`: `invalidArchive` for an archive that cannot be read (not PMTiles,
    ///   version other than 3, damaged directories), `archiveChanged` when its validator moved
    ///   between two of these requests (412), `httpError`/`networkError`/`badResponse` for a
    ///   failed request, `policyRefused` for a redirect to a listed host, `badResponse` for a
    ///   region holding a tile longer than the client's `maxObjectSize`.
    ///   - previous: the tile set of the same source in the plan of the pack in use (a refresh):
    ///     when the archive is still that version, it is returned as it is after one request.
    ///   - pace: called before each request with the archive's URL, and returns once the request
    ///     may start (the daemon's rate limits); after it, `received` with the body's bytes.
    public static func read(url: String, source: String, request: RegionRequest, styleSource: StyleSource?,
                            http: HTTPClient, headers: [(String, String)], maxTiles: Int, previous: TileSet? = nil,
                            pace: (String) -> Void = { _ in }, received: (Int) -> Void = { _ in }) throws(RegionError) -> Reading {
        let secrets = request.secrets.adding(url: url)
        func shown(_ text: String) -> String { Redaction.redactEmbedded(text, secrets: secrets) }
        var requests = 0, directoryBytes = 0
        var pinned = Freshness()
        /// Pins the archive's version at its first answer. One without an ETag or Last-Modified
        /// cannot be pinned: a change mid-download could not be told from the archive, and tiles
        /// of two versions would be mixed (attack round 5), so such an archive is refused.
        func pin(_ f: Freshness) throws(RegionError) {
            guard !pinned.hasValidator else { return }
            guard f.hasValidator else {
                throw RegionError(code: .invalidArchive, message: "source '\(source)': the server sends the PMTiles archive without a valid ETag (one quoted entity-tag, RFC 9110 section 8.8.3) or a Last-Modified, so a change while its tiles are fetched could not be told; TileSpool needs one of them to keep one version of the archive", url: url)
            }
            pinned = f
        }
        /// Waits 0.5 s times `attempt` before a directory read is asked again, or less when the
        /// read is abandoned meanwhile (`HTTPClient.abandon`).
        func backOff(_ attempt: Int) {
            let until = Date().addingTimeInterval(0.5 * Double(attempt))
            while Date() < until && !http.isAbandoned { usleep(20_000) }
        }
        /// Bytes `start..<end` of the archive, conditional on the pinned version once known.
        /// With `exact` (a directory, whose place the header or the root gives), an answer
        /// shorter than asked is an error naming that (attack round 18: it was read as a
        /// directory that does not inflate); without (the first read, which may pass the end of
        /// a small archive), the bytes there are.
        /// The whole file, once a server that ignores Range sent it (a 200): the next reads are
        /// cut from it rather than asked (attack round 38: every leaf directory's read brought
        /// the whole archive again, 135 times a 1.7 MB archive with 131 leaves).
        var whole: [UInt8]?
        var wholeAnswer: (bytes: Data, freshness: Freshness)?
        func range(_ start: UInt64, _ end: UInt64, exact: Bool = true) throws(RegionError) -> [UInt8] {
            // A place the header or a directory gives past 2^63 bytes (no file is that large)
            // is damage, before any Int conversion of it (a review of 2026-12-07: a root at
            // 2^63 served by a server that ignores Range trapped in `cut`).
            guard start <= end, end <= UInt64(Int64.max) else {
                throw invalid(PMTiles.ArchiveError("the archive places a directory or its metadata at bytes \(start)-\(end), past 2^63"))
            }
            if let whole { return try cut(whole, start, end, exact: exact) }
            // The range and the version asked go to every hop of a redirect (the request's own
            // headers only to the first origin).
            let asked = [("Range", "bytes=\(start)-\(end - 1)")] + pinHeaders(pinned)
            var r: TransferResult
            var attempt = 0
            asking: while true {
                pace(url)
                r = http.fetchAll([url], headers: headers, everyHop: asked)[0]
                requests += 1
                received(r.body.count)
                // A transfer that failed on the way (the connection dropped mid-answer, reset,
                // timed out) is asked again, as a tile is, at most `readRetries` times, after
                // 0.5 s, then 1 s (attack round 35: one dropped answer failed the region).
                guard let f = r.failure, attempt < readRetries, !http.isAbandoned else { break }
                switch f {
                case .network, .badResponse:
                    attempt += 1
                    backOff(attempt)
                default:
                    break asking
                }
            }
            if case .policyRefused(let why)? = r.failure {
                throw RegionError(code: .policyRefused, message: "source '\(source)': \(shown(why))", url: url)
            }
            if r.status == 200, let limit = r.cutAtLimit { throw AnswerDecision.wholeArchiveTooLarge(source: source, url: url, limit: limit) }
            if let f = r.failure {
                var code = ErrorCode.networkError
                switch f { case .badResponse: code = .badResponse; case .refused: code = .httpError; default: break }
                throw RegionError(code: code, message: "source '\(source)': cannot read the PMTiles archive: \(shown(String(describing: f)))", url: url)
            }
            if r.status == 412 || (pinned.hasValidator && changed(pinned, r.freshness)) {
                throw RegionError(code: .archiveChanged, message: "source '\(source)': the PMTiles archive changed while it was being read; plan again", url: url, httpStatus: r.status)
            }
            let body = [UInt8](r.body)
            switch r.status {
            case 206:
                // A range past the end of a short archive comes back shorter: the bytes there are.
                guard body.count <= Int(end - start) else {
                    throw RegionError(code: .badResponse, message: "source '\(source)': a range of \(end - start) bytes came back with \(body.count)", url: url, httpStatus: 206)
                }
                if exact && body.count < Int(end - start) {
                    throw RegionError(code: .badResponse, message: "source '\(source)': a range of \(end - start) bytes (a PMTiles directory) came back with only \(body.count)", url: url, httpStatus: 206)
                }
                // The bytes must be the ones asked, not a shifted window of the same length.
                guard ContentRange.holds(r.contentRange, start: start, count: body.count) else {
                    throw RegionError(code: .badResponse, message: "source '\(source)': a range request for bytes \(start)-\(end - 1) came back as \(r.contentRange.map { "Content-Range: \(shown(String($0.prefix(100))))" } ?? "a 206 without Content-Range"): not the bytes asked", url: url, httpStatus: 206)
                }
                try pin(r.freshness)
                return body
            case 200:
                // The server ignored Range and sent the whole file (bounded by the client's
                // largest body): the bytes asked are cut out of it, and so are the next reads'.
                try pin(r.freshness)
                whole = body
                wholeAnswer = (r.body, r.freshness)
                return try cut(body, start, end, exact: exact)
            default:
                throw RegionError(code: .httpError, message: "source '\(source)': HTTP \(r.status) for the PMTiles archive", url: url, httpStatus: r.status)
            }
        }
        /// Bytes `start..<end` of the whole file `file` (`range`'s, for a 200).
        func cut(_ file: [UInt8], _ start: UInt64, _ end: UInt64, exact: Bool) throws(RegionError) -> [UInt8] {
            if exact && file.count < Int(end) {
                throw RegionError(code: .invalidArchive, message: "source '\(source)': the PMTiles archive is \(file.count) bytes, shorter than its directory at bytes \(start)-\(end - 1)", url: url, httpStatus: 200)
            }
            guard Int(start) <= file.count else { return [] }
            return Array(file[Int(start)..<min(file.count, Int(end))])
        }
        func invalid(_ e: PMTiles.ArchiveError) -> RegionError {
            RegionError(code: .invalidArchive, message: "source '\(source)': \(e.message)", url: url)
        }
        func directory(_ bytes: [UInt8], _ header: PMTiles.Header) throws(RegionError) -> [PMTiles.Entry] {
            var raw = bytes
            if header.internalCompression == .gzip {
                do { raw = try Zlib.inflate(bytes, limit: maxDirectory) } catch {
                    throw RegionError(code: .invalidArchive, message: "source '\(source)': a PMTiles directory does not inflate: \(error)", url: url)
                }
            }
            do { return try PMTiles.readDirectory(raw) } catch { throw invalid(error) }
        }

        let first = try range(0, UInt64(firstRange), exact: false)
        directoryBytes += first.count
        let header: PMTiles.Header
        do { header = try PMTiles.readHeader(first) } catch { throw invalid(error) }
        var rootBytes: [UInt8]
        // The header's numbers are the server's: a sum past 2^64 is damage, never a trap
        // (2026-12-07: rootOffset 2^64 - 1 crashed `plan` and the daemon).
        let (rootEnd, rootPast) = header.rootOffset.addingReportingOverflow(header.rootLength)
        guard !rootPast else { throw invalid(PMTiles.ArchiveError("the root directory's place (\(header.rootOffset) + \(header.rootLength) bytes) passes 2^64")) }
        if rootEnd <= UInt64(first.count) {
            rootBytes = Array(first[Int(header.rootOffset)..<Int(rootEnd)])
        } else {
            guard header.rootLength <= UInt64(maxDirectory) else { throw invalid(PMTiles.ArchiveError("the root directory is \(header.rootLength) bytes")) }
            rootBytes = try range(header.rootOffset, rootEnd)
            directoryBytes += rootBytes.count
        }
        // A box or a geometry: rectangles (and the shape); a corridor or parts: rectangles and areas.
        let areas = Planner.archiveAreas(request: request, source: styleSource, header: header)
        let rects = areas?.rects ?? Planner.archiveRects(request: request, source: styleSource, header: header)
        // The metadata (name, attribution, vector_layers, ...: what exports publish as a
        // TileJSON's; attack round 26 found them dropped), when it lies in the first bytes read,
        // as the spec's writers lay archives out (nil: none, or not there).
        let (metaEnd, past) = header.metadataOffset.addingReportingOverflow(header.metadataLength)
        let metadataWanted = header.metadataLength > 0 && header.metadataLength <= UInt64(PMTiles.maxMetadata) && !past
        func exported(_ stored: [UInt8]) -> String? {
            PMTiles.exportedMetadata(header.internalCompression == .gzip ? ((try? Zlib.inflate(stored, limit: PMTiles.maxMetadata)) ?? []) : stored)
        }
        let firstMetadata = metadataWanted && metaEnd <= UInt64(first.count)
            ? exported(Array(first[Int(header.metadataOffset)..<Int(metaEnd)])) : nil
        if var previous, let old = previous.archive, old.url == url, previous.rects == rects,
           previous.areas == areas?.areas, previous.rectAreas == areas?.rectAreas,
           (old.etag != nil && old.etag == pinned.etag)
            || (old.etag == nil && pinned.etag == nil && old.lastModified != nil && old.lastModified == pinned.lastModified) {
            // A plan made before archives' metadata was read (2026-12-07) gains it here, when
            // the first bytes hold it: no request more.
            if old.metadata == nil, let firstMetadata { previous.archive?.metadata = firstMetadata }
            return Reading(set: previous, header: header, requests: requests, directoryBytes: directoryBytes, revalidation: pinned)
        }
        let wanted: [UInt64]
        let limits = RequestValidator.TileLimits(maxTiles: request.maxTiles, daemonMaxTiles: maxTiles)
        if let areas {
            // The rectangles' index space first: a set over areas counts its tiles row by row.
            if rects.reduce(0, { SaturatingCount.add($0, $1.count) }) > RegionShape.maxPlanIndexSpace,
               let e = PMTiles.regionLimitError(rects: rects, shape: nil, limits: limits, source: source) {
                throw e
            }
            let areaSet = TileSet(source: source, template: TileURLTemplate(PMTiles.sourceScheme + url), rects: rects,
                                  areas: areas.areas, rectAreas: areas.rectAreas)
            if let e = PMTiles.regionLimitError(areaSet: areaSet, limits: limits, source: source) { throw e }
            wanted = PMTiles.tileIDs(areaSet: areaSet)
        } else {
            if let e = PMTiles.regionLimitError(rects: rects, shape: request.shape, limits: limits, source: source) {
                throw e
            }
            wanted = PMTiles.tileIDs(rects: rects, shape: request.shape)
        }
        let root = try directory(rootBytes, header)
        // The metadata: in the first bytes read, else one more range.
        var metadata = firstMetadata
        if metadataWanted, metaEnd > UInt64(first.count), first.count >= firstRange {
            // Never a failure of the plan (attack round 27: metadata placed past the end failed
            // the region with a 416, called a directory); a changed archive or a lost network is
            // met again at the next request. Past the end of an archive shorter than the first
            // read: none.
            let stored = (try? range(header.metadataOffset, metaEnd)) ?? []
            directoryBytes += stored.count
            metadata = exported(stored)
        }
        let plan: PMTiles.ArchivePlan
        do {
            plan = try PMTiles.plan(header: header, root: root, wanted: wanted) { (e) throws(RegionError) in
                guard e.length <= UInt32(maxDirectory) else { throw invalid(PMTiles.ArchiveError("a leaf directory is \(e.length) bytes")) }
                let (start, past) = header.leafOffset.addingReportingOverflow(e.offset)
                let (end, endPast) = start.addingReportingOverflow(UInt64(e.length))
                guard !past, !endPast else {
                    throw invalid(PMTiles.ArchiveError("a leaf directory's place (\(header.leafOffset) + \(e.offset), \(e.length) bytes) passes 2^64"))
                }
                // A leaf within the first bytes read (a small archive's directories lie together
                // at its start, as the spec's writers lay them out) is cut from them, not asked.
                if end <= UInt64(first.count) { return try directory(Array(first[Int(start)..<Int(end)]), header) }
                let bytes = try range(start, end)
                directoryBytes += bytes.count
                return try directory(bytes, header)
            }
        } catch let e as RegionError {
            throw e
        } catch let e as PMTiles.ArchiveError {
            throw invalid(e)
        } catch {
            throw RegionError(code: .invalidArchive, message: "source '\(source)': \(error)", url: url)
        }
        // A body over --max-object-size would be cut off by the client and retried until the
        // region failed mid-download (attack round 6): refused at plan, naming the tile.
        if let e = tooLarge(plan.tiles, source: source, url: url, limit: http.maxObjectSize) { throw e }
        let archive = ArchiveSource(url: url, etag: pinned.etag, lastModified: pinned.lastModified, header: header, plan: plan, metadata: metadata)
        let set = areas.map { TileSet(source: source, archive: archive, rects: rects, areas: $0.areas, rectAreas: $0.rectAreas) }
            ?? TileSet(source: source, archive: archive, rects: rects, shape: request.shape)
        return Reading(set: set, header: header, requests: requests, directoryBytes: directoryBytes, wholeFile: wholeAnswer)
    }

    /// The error for the longest of `tiles` when it is longer than `limit` (`--max-object-size`,
    /// bytes), nil when none is: the client would cut such a body off and retry it until the region
    /// failed mid-download (attack round 6). Checked at plan, and again when a stored plan is
    /// resumed by a daemon started with a lower limit.
    static func tooLarge(_ tiles: [PMTiles.ArchiveTile], source: String, url: String, limit: Int) -> RegionError? {
        guard let big = tiles.max(by: { $0.length < $1.length }), Int(big.length) > limit else { return nil }
        return RegionError(code: .badResponse, message: "source '\(source)': tile \(big.tile.z)/\(big.tile.x)/\(big.tile.y) is \(big.length) bytes in the archive, more than --max-object-size (\(limit) bytes); raise it to download this region", url: url)
    }

    /// The precondition a range request carries to stay on the pinned version (RFC 9110 section
    /// 13.1): `If-Match` with a strong ETag (a change answers 412), else `If-Unmodified-Since`
    /// with the Last-Modified time (likewise); none when neither is known.
    public static func pinHeaders(_ pinned: Freshness) -> [(String, String)] {
        if let etag = pinned.etag, ConditionalRequest.isEntityTag(etag), !etag.hasPrefix("W/") { return [("If-Match", etag)] }
        if let lm = pinned.lastModified, let date = ConditionalRequest.imfFixdate(lm) { return [("If-Unmodified-Since", date)] }
        return []
    }

    /// True when `now` may name another version than `pinned`: the pinned ETag is not the
    /// answer's, or with no ETag pinned, the pinned Last-Modified is not the answer's. An answer
    /// without the pinned validator counts as a change: it cannot be told to be the same
    /// version (attack round 27: a proxy that stripped ETag and ignored If-Match had tiles of a
    /// new archive stored in a region planned over the old one). False when nothing was pinned.
    public static func changed(_ pinned: Freshness, _ now: Freshness) -> Bool {
        if let a = pinned.etag { return now.etag != a }
        if let a = pinned.lastModified { return now.lastModified != a }
        return false
    }

    /// Reads every archive a plan needs (`Planner.archiveSources`), by source name.
    /// - Parameters:
    ///   - previous: the plan of the pack in use, for a refresh (`read`'s `previous`).
    ///   - pace, received: the rate limits' hooks (`read`'s).
    public static func readAll(request: RegionRequest, style: StyleDocument?, http: HTTPClient,
                               headers: [(String, String)], maxTiles: Int, previous: ResourcePlan? = nil,
                               pace: (String) -> Void = { _ in }, received: (Int) -> Void = { _ in }) throws(RegionError) -> [String: Reading] {
        var out: [String: Reading] = [:]
        for a in Planner.archiveSources(request: request, style: style) {
            let old = previous?.tileSets.first { $0.source == ManifestLine.sanitizeKey(a.source) && $0.archive != nil }
            out[a.source] = try read(url: a.url, source: a.source, request: request, styleSource: a.styleSource, http: http, headers: headers,
                                     maxTiles: maxTiles, previous: old, pace: pace, received: received)
        }
        return out
    }
}
