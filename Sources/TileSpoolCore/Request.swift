import Foundation

/// The machine-readable error codes written to `error.code` in status files (see docs/contract.md).
public enum ErrorCode: String, Sendable, Codable {
    /// The request file is not a valid request (JSON, fields, types, ranges, URLs).
    case invalidRequest
    /// The plan has more tiles than the request's `maxTiles` or the daemon's `--max-tiles`.
    case tileLimitExceeded
    /// A request with this id is already queued or downloading.
    case duplicateId
    /// The style document is not a usable MapLibre/Mapbox GL style.
    case invalidStyle
    /// A source's TileJSON is not usable.
    case invalidTileJSON
    /// A server answered with an HTTP status that is not retried, or retries ran out.
    case httpError
    /// Every tile of the region was empty (an empty status such as 404 or 204, or an empty
    /// body): most often a wrong tile URL template. A request with `"allowEmpty": true` completes.
    case allTilesEmpty
    /// A response was malformed in transit (a body truncated, undecodable or too large, response
    /// headers over libcurl's limit), or a tile body is not a tile.
    case badResponse
    /// The network failed (connection refused, timeout, DNS) and retries ran out.
    case networkError
    /// Writing to the store failed (ENOSPC, EDQUOT, EROFS, EIO, ...).
    case storageError
    /// The region's files in the store are damaged (found by `verify --repair`).
    case storeDamaged
    /// A URL's host publishes a tile usage policy that forbids bulk downloading
    /// (`TileUsagePolicy`); the daemon's `--allow-host` lifts it.
    case policyRefused
    /// A PMTiles source (issue 31) is not a usable archive: not PMTiles, a version other than 3,
    /// a header or directory damaged, a compression not supported. The message names the source.
    case invalidArchive
    /// A PMTiles archive changed while the region was planned or downloaded (a range request
    /// answered 412, or the archive's ETag / Last-Modified moved): the region fails rather than
    /// mix two versions of the archive. The message names the source; a new request plans again.
    case archiveChanged
}

/// An error that ends up in a status file as `{"code", "message", "url"?, "httpStatus"?}`.
extension RegionError {
    /// A plan of no tile at all (only a PMTiles archive source can give one: its header's bounds
    /// and zooms, or its directories, leave none in the region): `allTilesEmpty` unless the
    /// request says `allowEmpty`. The daemon fails such a region; `plan`, `submit` and `get`
    /// refuse it.
    public static let emptyPlan = RegionError(code: .allTilesEmpty, message: "the plan holds no tile: the sources hold none in the region's bounds and zooms (a PMTiles archive's header bounds and zooms, or its directories, leave none); if that is expected, add \"allowEmpty\": true to the request")
}

public struct RegionError: Error, Sendable, Equatable {
    public var code: ErrorCode
    public var message: String
    /// The URL involved, with credentials redacted (see `Redaction`).
    public var url: String?
    public var httpStatus: Int?
    public init(code: ErrorCode, message: String, url: String? = nil, httpStatus: Int? = nil) {
        self.code = code; self.message = message
        self.url = url.map(Redaction.redact); self.httpStatus = httpStatus
    }
}

extension RegionError: CustomStringConvertible {
    /// `CODE: message`, as in `rejected/<name>.error` and as `tilespool` prints it after
    /// `tilespool: ` (e.g. `invalidStyle: style: 'sources' must be an object`). The URL and HTTP
    /// status stay in the status's `error` object.
    public var description: String { "\(code.rawValue): \(message)" }
}

/// What a request downloads: a MapLibre/Mapbox GL style (and everything it references), or raw
/// tile URL templates.
public enum MapSource: Sendable, Equatable {
    /// URL of a style JSON (MapLibre Style Spec, https://maplibre.org/maplibre-style-spec/).
    case style(String)
    /// Tile URL templates with `{z}`, `{x}`, `{y}` (or `{-y}`, `{quadkey}`); each template is
    /// downloaded in full over the region.
    case tiles([String])
}

/// A validated region request: the content of `spool/requests/<name>.json` with defaults filled in.
public struct RegionRequest: Sendable, Equatable {
    /// The region id: `[A-Za-z0-9][A-Za-z0-9._-]{0,127}`.
    public var id: String
    public var source: MapSource
    /// True for a `tiles` request (raw tile URL templates or PMTiles archives), false for a style.
    public var isTiles: Bool { if case .tiles = source { return true }; return false }
    /// The region in degrees, `west`/`south`/`east`/`north`; `west > east` crosses the antimeridian.
    /// For a GeoJSON region, the shape's bounding box.
    public var bounds: GeoBounds
    /// The GeoJSON region (`geometry`), or nil for a `bounds` region.
    public var shape: RegionShape?
    /// The corridor region (`corridor`), or nil. `bounds` is then the corridor's bounding box.
    public var corridor: Corridor?
    /// The per-zoom parts (`parts`), or nil. `bounds` is then the bounding box of their union and
    /// `minZoom`/`maxZoom` the lowest and highest of their zooms.
    public var parts: [RegionPart]?
    /// The areas the planner plans with ownership (each tile once, in order): the parts, or the
    /// corridor with the request's zooms as one part; nil for a `bounds` or `geometry` request.
    public var areaParts: [RegionPart]? {
        if let parts { return parts }
        if let corridor { return [RegionPart(area: .corridor(corridor), minZoom: minZoom, maxZoom: maxZoom)] }
        return nil
    }
    /// Map zoom range, `0 <= minZoom <= maxZoom <= 24`.
    public var minZoom: Int
    public var maxZoom: Int
    /// Device pixel ratio (`{ratio}` in templates becomes `@2x` above 1, as in MapLibre). Default 1.
    public var pixelRatio: Double
    /// Download the CJK ideograph and Hangul glyph ranges too. Default false.
    public var includeIdeographs: Bool
    /// The most tiles this request may plan; nil means the daemon's limit alone.
    public var maxTiles: Int?
    /// The `context` value serialised as JSON, echoed verbatim in the status; nil when absent.
    public var contextJSON: Data?
    /// Exports the daemon writes to `<spool>/exports/` when the region completes (`exports`).
    public var exports: [ExportSpec] = []
    /// Seconds after which a completed region is refreshed by itself (`refreshAfter`); nil: only
    /// the daemon's `--refresh-interval`, or a user's `refresh`.
    public var refreshAfter: Int?
    /// HTTP statuses that mean "no tile here" for a tile (`emptyStatuses`), recorded as an empty
    /// tile like a 204; default `[204, 404]`. A 2xx with an empty body is always an empty tile.
    public var emptyStatuses: [Int] = RegionRequest.defaultEmptyStatuses
    /// Extra request headers sent with every request of the region (`headers`), e.g. `Referer`,
    /// `Authorization`. Values are credentials: `redactedJSONObject` shows them as `REDACTED`.
    public var headers: [String: String] = [:]
    /// Tiles that may fail (outlive their retries, or get a status that is not retried) before the
    /// region fails (`maxFailedTiles`); each is recorded as failed and the region goes on. 0: the
    /// first failed tile fails the region.
    public var maxFailedTiles = 0
    /// What `{s}` in a `tiles` template becomes (`subdomains`), spread by tile as Leaflet does;
    /// default `["a", "b", "c"]`. Tiles are keyed by z/x/y, so a pack does not depend on it.
    public var subdomains = TileURLTemplate.defaultSubdomains
    /// True when a region whose every tile is empty may complete (`allowEmpty`); by default it
    /// fails with `allTilesEmpty` (a wrong template answers 404 everywhere).
    public var allowEmpty = false
    /// The most requests per second this region sends to any one host (`maxRequestsPerSecond`),
    /// on top of the daemon's `--max-requests-per-second-per-host`; nil: only the daemon's limit.
    public var maxRequestsPerSecond: Double?
    /// `headers` as (name, value) pairs sorted by name, as sent.
    public var headerList: [(String, String)] { headers.sorted { $0.key < $1.key }.map { ($0.key, $0.value) } }
    /// What of this request is secret, to be replaced in any text a server sends back before it
    /// is quoted (`Redaction.redactEmbedded(_:secrets:)`): every `headers` value and the
    /// credentials of its `style` URL or `tiles` templates. Worked out on each call (only
    /// messages about failures need it).
    public var secrets: Redaction.Secrets {
        let urls: [String]
        switch source { case .style(let u): urls = [u]; case .tiles(let t): urls = t }
        return Redaction.Secrets(headers: headerList, urls: urls)
    }
    /// The default of `emptyStatuses`.
    public static let defaultEmptyStatuses = [204, 404]

    public init(id: String, source: MapSource, bounds: GeoBounds, minZoom: Int, maxZoom: Int,
                pixelRatio: Double = 1, includeIdeographs: Bool = false, maxTiles: Int? = nil,
                contextJSON: Data? = nil, shape: RegionShape? = nil) {
        self.id = id; self.source = source; self.bounds = bounds; self.shape = shape; self.minZoom = minZoom
        self.maxZoom = maxZoom; self.pixelRatio = pixelRatio; self.includeIdeographs = includeIdeographs
        self.maxTiles = maxTiles; self.contextJSON = contextJSON
    }

    /// Fields that change what is reported, done afterwards or how fast, not what is fetched.
    public static let notFetchedFields = RequestField.all.filter { !$0.changesWhatIsFetched }.map(\.name)

    /// True when `other` downloads exactly what this request downloads: every field equal except
    /// `context`, `exports`, `refreshAfter` and `maxRequestsPerSecond`. A re-dropped request for
    /// which this holds refreshes the region instead of downloading it again (docs/refresh.md).
    public func downloadsTheSame(as other: RegionRequest) -> Bool {
        func fetched(_ r: RegionRequest) -> NSDictionary {
            var o = r.jsonObject
            for k in RegionRequest.notFetchedFields { o.removeValue(forKey: k) }
            return o as NSDictionary
        }
        return fetched(self).isEqual(fetched(other))
    }

    /// True when `other` downloads the same resources as this request but with other
    /// credentials: the two differ (`downloadsTheSame` is false) only in what `redactedJSONObject`
    /// hides, i.e. secret query parameters and user:password of URLs (`Redaction`) and `headers`
    /// values. Manifest keys name tiles by source and z/x/y, never by URL, so the region keeps
    /// what it has and fetches only the rest (docs/contract.md, "Dropping a request again").
    public func differsOnlyInCredentials(from other: RegionRequest) -> Bool {
        func seen(_ r: RegionRequest) -> NSDictionary {
            var o = r.redactedJSONObject
            for k in RegionRequest.notFetchedFields { o.removeValue(forKey: k) }
            return o as NSDictionary
        }
        return !downloadsTheSame(as: other) && seen(self).isEqual(seen(other))
    }

    /// The `context` value as a JSON object for embedding (NSNull when absent).
    public var context: Any {
        guard let contextJSON, let v = try? JSONSerialization.jsonObject(with: contextJSON, options: [.fragmentsAllowed]) else { return NSNull() }
        return v
    }

    /// The request with defaults filled in, as written to `store/regions/<id>/request.json` and
    /// to the `request` field of `<id>.json`. URLs keep their query strings here; use
    /// `redactedJSONObject` for anything a user may read.
    public var jsonObject: [String: Any] {
        var o: [String: Any] = ["id": id, "minZoom": minZoom, "maxZoom": maxZoom]
        switch source {
        case .style(let url): o["style"] = url
        case .tiles(let templates): o["tiles"] = templates
        }
        for field in RequestField.all { field.write(self, &o) }
        if let parts {
            o["parts"] = parts.map(\.jsonObject)
            o.removeValue(forKey: "minZoom"); o.removeValue(forKey: "maxZoom")
        } else if let corridor {
            o["corridor"] = corridor.jsonObject
        } else if let shape {
            o["geometry"] = ["type": "MultiPolygon", "coordinates": shape.polygons]
        } else {
            o["bounds"] = [bounds.west, bounds.south, bounds.east, bounds.north]
        }
        return o
    }

    /// `jsonObject` with credentials in URLs redacted and every `headers` value replaced by
    /// `REDACTED`, for status files.
    public var redactedJSONObject: [String: Any] {
        var o = jsonObject
        switch source {
        case .style(let url): o["style"] = Redaction.redact(url)
        case .tiles(let templates): o["tiles"] = templates.map(Redaction.redact)
        }
        if !headers.isEmpty { o["headers"] = headers.mapValues { _ in "REDACTED" } }
        return o
    }
}

/// Validation of request files. Pure: takes bytes and a file name, returns a request or an error.
public enum RequestValidator {
    /// The largest request file read, in bytes (1 MiB). Larger files are refused unread.
    public static let maxFileSize = 1 << 20
    /// The largest stored copy of a request read back (`<store>/regions/<id>/request.json`, the
    /// request with its defaults, pretty-printed): 64 MiB. A request of 1 MiB grows there (a
    /// geometry of 100,000 positions to about 5 MB), and the region was lost at the next start
    /// (attack round 13). The same bound holds for the status files, which repeat the request.
    public static let maxStoredSize = 64 << 20
    /// The largest zoom level a request may name.
    public static let maxZoomLevel = 24

    /// Every field a request file may hold (docs/contract.md's request table, checked by
    /// `StatusModelTests.testRequestFieldsAreTheContractsFields`); any other is refused by name.
    public static let knownFields: Set<String> = Set(["id", "style", "tiles", "bounds", "geometry", "corridor", "parts", "minZoom", "maxZoom"]
                                                        + RequestField.all.map(\.name))

    /// Header names a request's `headers` may not set: libcurl and the daemon set them
    /// (framing, conditional requests, content decoding, a PMTiles archive's range requests and
    /// the version they are pinned to: attack round 39 saw a user's `If-Match` answered 412 and
    /// read as the archive changing). Lower-case.
    static let reservedHeaders: Set<String> = ["host", "content-length", "transfer-encoding", "connection",
                                               "if-none-match", "if-modified-since", "accept-encoding", "te", "upgrade",
                                               "range", "if-range", "if-match", "if-unmodified-since"]

    /// True when `id` matches `[A-Za-z0-9][A-Za-z0-9._-]{0,127}` (so it is also a safe file name).
    public static func isValidID(_ id: String) -> Bool {
        let bytes = Array(id.utf8)
        guard (1...128).contains(bytes.count) else { return false }
        func alnum(_ b: UInt8) -> Bool {
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A)
        }
        guard alnum(bytes[0]) else { return false }
        return bytes.allSatisfy { alnum($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "-") }
    }

    /// The region id a request file name gives (`monaco.json` -> `monaco`), or nil when the name
    /// does not end in `.json` or the rest is not a valid id.
    public static func id(fromFileName name: String) -> String? {
        guard name.hasSuffix(".json"), !name.hasPrefix(".") else { return nil }
        let base = String(name.dropLast(5))
        return isValidID(base) ? base : nil
    }

    /// The id a refused request file's status is written under: its `id` field when that is a
    /// valid id, else the id its file name gives; nil when neither gives one.
    public static func statusID(_ data: Data?, fileName: String) -> String? {
        if let data, data.count <= maxFileSize, let o = (try? JSONKind.parse(data, uniqueKeys: true)) as? [String: Any],
           let s = o["id"] as? String, isValidID(s) {
            return s
        }
        return id(fromFileName: fileName)
    }

    /// The `tileLimitExceeded` error for a plan of `tiles` tiles, naming the limit that applies
    /// (the request's `maxTiles` or the daemon's `--max-tiles`), or nil when the plan is within both.
    /// `tiles` is a saturated count (`ResourcePlan.tileCount`): `Int.max` means at least that
    /// many, and is always refused (the message says "at least 9223372036854775807 tiles").
    /// `counted`: `tiles` are those counted before counting stopped past the limit
    /// (`TileLimits.stopsAt`): "at least N tiles (counting stopped there)".
    public static func tileLimitError(tiles: Int, maxTiles: Int?, daemonMaxTiles: Int, countStopped: Bool = false) -> RegionError? {
        let has = tiles == Int.max ? "at least \(tiles) tiles (more than can be counted)"
            : countStopped ? "at least \(tiles) tiles (counting stopped there)" : "\(tiles) tiles"
        if let m = maxTiles, m <= daemonMaxTiles, tiles > m || tiles == Int.max {
            return RegionError(code: .tileLimitExceeded, message: "maxTiles: the plan has \(has), more than the request's maxTiles (\(m))")
        }
        if tiles > daemonMaxTiles || tiles == Int.max {
            return RegionError(code: .tileLimitExceeded, message: "the plan has \(has), more than the daemon's --max-tiles (\(daemonMaxTiles))")
        }
        return nil
    }

    /// The tile limits a plan is held to, for the planner to stop counting a shape's tiles once
    /// they are passed (`Planner.plan`).
    public struct TileLimits: Sendable, Equatable {
        /// The request's `maxTiles`, if any.
        public var maxTiles: Int?
        /// The daemon's `--max-tiles` (`tilespool plan`'s).
        public var daemonMaxTiles: Int
        public init(maxTiles: Int?, daemonMaxTiles: Int) { self.maxTiles = maxTiles; self.daemonMaxTiles = daemonMaxTiles }
        /// The most tiles a plan may have: the lower of the two.
        public var stopsAt: Int { min(maxTiles ?? Int.max, daemonMaxTiles) }
        /// `tileLimitError` for `tiles` counted before counting stopped (more than `stopsAt`).
        public func stoppedError(tiles: Int) -> RegionError {
            tileLimitError(tiles: tiles, maxTiles: maxTiles, daemonMaxTiles: daemonMaxTiles, countStopped: true)
                ?? RegionError(code: .tileLimitExceeded, message: "the plan has at least \(tiles) tiles")
        }
    }

    /// Checks that `url` is an absolute http or https URL with a host libcurl can use
    /// (`hostProblem`). Returns an error message or nil. The one check of every URL a request
    /// names (and of a style's URLs), so `tilespool plan` and the daemon refuse the same ones.
    public static func urlProblem(_ url: String) -> String? {
        // White space and control characters are not URL characters (RFC 3986 section 2); the
        // URL parser here would take some, libcurl later refuses them ("bad/illegal format").
        if url.unicodeScalars.contains(where: { $0.value <= 0x20 || $0.value == 0x7F }) {
            return "holds a space or a control character (write it percent-encoded: %20)"
        }
        if let r = url.range(of: "://"), ["http", "https"].contains(url[..<r.lowerBound].lowercased()), let p = hostProblem(url) {
            return p
        }
        guard let u = URL(string: url), let scheme = u.scheme?.lowercased() else {
            return "is not a valid absolute URL"
        }
        guard scheme == "http" || scheme == "https" else {
            return "uses the scheme '\(scheme)'; only http and https are allowed"
        }
        guard let host = u.host, !host.isEmpty else { return "has no host" }
        return nil
    }

    /// Why the host of `url` (`scheme://[user@]host[:port]/...`) is not one libcurl can use, or
    /// nil (also when there is no host: `urlProblem` says so). Percent-decoded (libcurl decodes
    /// it), a host name must be ASCII letters, digits, `-`, `.` and `_`, an IP literal `[...]`
    /// hex digits, `:`, `.` and a zone after `%`. Refused: a non-ASCII name (fullwidth
    /// `ｔｉｌｅ.openstreetmap.org`, ideographic full stops `tile。openstreetmap。org`; an
    /// internationalised name must be written in its ASCII form, `xn--...`), an encoded NUL or
    /// any other character (`tile.openstreetmap.org%00`), an encoding that does not decode. Such
    /// hosts used to pass `plan` and fail the download at its first transfer ("bad/illegal format").
    public static func hostProblem(_ url: String) -> String? {
        guard let start = url.range(of: "://")?.upperBound else { return nil }
        var authority = url[start...].prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        var host = authority
        var port: Substring?
        let literal = host.hasPrefix("[")
        if literal {
            // [IPv6] or [IPv6%25zone], then an optional port.
            guard let close = host.firstIndex(of: "]") else { return unusableHost(host) }
            let after = host[host.index(after: close)...]
            if !after.isEmpty {
                guard after.first == ":" else { return unusableHost(authority) }
                port = after.dropFirst()
            }
            host = host[host.index(after: host.startIndex)..<close]
            // The address itself (before a zone): hex digits, ':' and '.' (an IPv4 tail) only, so
            // that a name inside the brackets ([::ffff:tile.openstreetmap.org]) is not passed on.
            let address = host.prefix { $0 != "%" }
            guard !address.isEmpty, address.unicodeScalars.allSatisfy({ $0.properties.isASCIIHexDigit || $0 == ":" || $0 == "." }) else {
                return unusableHost(host)
            }
        } else if let colon = host.lastIndex(of: ":") {
            port = host[host.index(after: colon)...]
            host = host[..<colon]
        }
        // A port is empty (the scheme's) or a number from 0 to 65535 (RFC 3986 section 3.2.3).
        if let port, !port.isEmpty, !(port.count <= 5 && port.allSatisfy({ $0.isASCII && $0.isNumber }) && Int(port)! <= 65535) {
            return "has the port '\(TerminalText.safe(String(port)))', which cannot be used: a port is a number from 0 to 65535"
        }
        if host.isEmpty { return nil }
        let allowed: (Unicode.Scalar) -> Bool = { c in
            (c.value >= 0x61 && c.value <= 0x7A) || (c.value >= 0x41 && c.value <= 0x5A) || (c.value >= 0x30 && c.value <= 0x39)
                || c == "-" || c == "." || c == "_" || (literal && (c == ":" || c == "%"))
        }
        let decoded = host.contains("%") ? String(host).removingPercentEncoding : String(host)
        if let decoded, decoded.unicodeScalars.allSatisfy(allowed) { return nil }
        return unusableHost(host)
    }

    /// `hostProblem`'s message for `host` as written.
    static func unusableHost(_ host: Substring) -> String {
        "has the host '\(TerminalText.safe(String(host)))', which cannot be used: a host name is ASCII letters, digits, '-', '.' and '_' (percent-encoded or not), an IP address or [IPv6 address]; write an internationalised name in its ASCII form (xn--...)"
    }

    /// Validates a request file.
    /// - Parameters:
    ///   - data: the file's bytes (at most `maxFileSize`).
    ///   - fileName: the name in `requests/`, which gives the default id.
    /// - Returns: the request with defaults filled in.
    /// - Throws: `RegionError` with code `invalidRequest` and a message naming the field.
    ///   - maxSize: the largest `data` taken: `maxFileSize` for a request file, `maxStoredSize`
    ///     for the stored copy the daemon wrote.
    ///   - rowBudget: false for the stored copy of a request accepted before: the planning
    ///     budget of corridors and parts (tile rows, `RegionShape.maxPlanRows`; stations times
    ///     zooms, `RegionShape.maxPlanStationZooms`; 2026-12-07) is held against requests taken
    ///     from then on, not against regions a restart reads back.
    public static func validate(_ data: Data, fileName: String, maxSize: Int = maxFileSize, rowBudget: Bool = true) throws(RegionError) -> RegionRequest {
        func bad(_ message: String) -> RegionError { RegionError(code: .invalidRequest, message: message) }
        if data.count > maxSize { throw bad("the request file is larger than \(maxSize) bytes") }
        let parsed: Any
        do { parsed = try JSONKind.parse(data, uniqueKeys: true) } catch { throw bad("the request is \(error.message)") }
        guard var o = parsed as? [String: Any] else {
            throw bad("the request must be a JSON object, not a JSON \(JSONKind.name(parsed))")
        }
        if MapLibreRegionDefinition.isDefinition(o) { o = try MapLibreRegionDefinition.canonical(o) }
        let unknown = Set(o.keys).subtracting(knownFields).sorted()
        if !unknown.isEmpty {
            throw bad("unknown field\(unknown.count > 1 ? "s" : "") \(unknown.map { "'\(TerminalText.inline($0))'" }.joined(separator: ", ")); known fields are \(knownFields.sorted().joined(separator: ", "))")
        }

        // id
        var id: String
        if let v = o["id"] {
            guard let s = v as? String, !JSONKind.isBool(v) else { throw bad("id: must be a string, not a \(JSONKind.name(v))") }
            guard isValidID(s) else { throw bad("id: '\(s.prefix(80))' must match [A-Za-z0-9][A-Za-z0-9._-]{0,127}") }
            id = s
        } else if let fromName = self.id(fromFileName: fileName) {
            id = fromName
        } else {
            throw bad(fileName == "-" ? "id: a request on standard input has no file name to take its id from: give it an \"id\""
                                      : "id: the file name does not give a valid id and the request has none")
        }

        // style or tiles
        let source: MapSource
        switch (o["style"], o["tiles"]) {
        case (nil, nil): throw bad("style or tiles: the request must name a style URL or tile URL templates")
        case (.some, .some): throw bad("style and tiles: give exactly one of them, not both")
        case (let v?, nil):
            guard let s = v as? String else { throw bad("style: must be a string URL, not a \(JSONKind.name(v))") }
            if let p = urlProblem(s) { throw bad("style: '\(Redaction.redact(s))' \(p)") }
            source = .style(s)
        case (nil, let v?):
            guard let arr = v as? [Any] else { throw bad("tiles: must be an array of URL templates, not a \(JSONKind.name(v))") }
            guard !arr.isEmpty else { throw bad("tiles: must name at least one URL template") }
            guard arr.count <= 16 else { throw bad("tiles: at most 16 templates") }
            var templates: [String] = []
            for (i, t) in arr.enumerated() {
                guard let s = t as? String else { throw bad("tiles[\(i)]: must be a string, not a \(JSONKind.name(t))") }
                if let archive = PMTiles.archiveURL(s) {
                    // A PMTiles archive (issue 31): its http(s) URL passes the checks any URL does.
                    if let p = urlProblem(archive) { throw bad("tiles[\(i)]: '\(Redaction.redact(s))': the archive's URL \(p)") }
                } else if let p = TileURLTemplate.problem(s) { throw bad("tiles[\(i)]: '\(Redaction.redact(s))' \(p)") }
                templates.append(s)
            }
            source = .tiles(templates)
        }

        // bounds, geometry, corridor or parts
        let given = ["bounds", "geometry", "corridor", "parts"].filter { o[$0] != nil }
        if given.count > 1 { throw bad("\(given.joined(separator: " and ")): give exactly one of bounds, geometry, corridor and parts") }
        var shape: RegionShape?
        var corridor: Corridor?
        var parts: [RegionPart]?
        let bounds: GeoBounds
        let minZoom: Int, maxZoom: Int
        if let pv = o["parts"] {
            let mixed = ["minZoom", "maxZoom"].filter { o[$0] != nil }
            if !mixed.isEmpty { throw bad("parts: \(mixed.joined(separator: " and ")) cannot be given beside parts; each part has its own minZoom and maxZoom") }
            let list = try RegionPart.parseList(pv, rowBudget: rowBudget)
            parts = list
            bounds = GeoBounds.union(list.map(\.bounds))
            minZoom = list.map(\.minZoom).min()!
            maxZoom = list.map(\.maxZoom).max()!
        } else {
            if let gv = o["geometry"] {
                switch RegionShape.parse(gv) {
                case .success(let s): shape = s
                case .failure(let e): throw bad("geometry: \(e.message)")
                }
            }
            if let cv = o["corridor"] {
                switch Corridor.parse(cv) {
                case .success(let c): corridor = c
                case .failure(let e): throw bad("corridor: \(e.message)")
                }
            }
            if let shape { bounds = shape.bounds } else if let corridor { bounds = corridor.bounds } else { bounds = try validateBounds(o["bounds"]) }
            let zooms = try RegionPart.zooms(o, prefix: "")
            minZoom = zooms.lowerBound; maxZoom = zooms.upperBound
            if shape != nil {
                try RegionPart.checkBoundingTiles(.shape(shape!), zooms, name: "geometry", work: rowBudget ? RegionPart.PlanWork(countsRows: false) : nil)
            }
            if let corridor { try RegionPart.checkBoundingTiles(.corridor(corridor), zooms, name: "corridor", work: rowBudget ? RegionPart.PlanWork() : nil) }
        }

        var request = RegionRequest(id: id, source: source, bounds: bounds, minZoom: minZoom, maxZoom: maxZoom, shape: shape)
        request.corridor = corridor
        request.parts = parts
        // The other fields, each as its `RequestField` reads it, in the table's order.
        for field in RequestField.all {
            guard let v = o[field.name], !(v is NSNull) else { continue } // null: the default
            try field.read(v, &request)
        }
        return request
    }

    /// Validates `bounds`: `[west, south, east, north]` in degrees.
    /// - Throws: `RegionError` (`invalidRequest`) naming what is wrong.
    static func validateBounds(_ bv: Any?) throws(RegionError) -> GeoBounds {
        func bad(_ message: String) -> RegionError { RegionError(code: .invalidRequest, message: message) }
        guard let bv else { throw bad("bounds: missing; give [west, south, east, north] in degrees, or a GeoJSON geometry") }
        guard let barr = bv as? [Any], barr.count == 4 else {
            throw bad("bounds: must be an array of 4 numbers [west, south, east, north] in degrees")
        }
        var b: [Double] = []
        for (i, v) in barr.enumerated() {
            guard let d = JSONKind.number(v), d.isFinite else {
                throw bad("bounds[\(i)]: must be a finite number, not a \(JSONKind.name(v))")
            }
            b.append(d)
        }
        let bounds = GeoBounds(west: b[0], south: b[1], east: b[2], north: b[3])
        for (name, v) in [("west", bounds.west), ("east", bounds.east)] where !(-180...180).contains(v) {
            throw bad("bounds: \(name) (\(v)) must be within -180...180 degrees")
        }
        for (name, v) in [("south", bounds.south), ("north", bounds.north)] where !(-90...90).contains(v) {
            throw bad("bounds: \(name) (\(v)) must be within -90...90 degrees")
        }
        if bounds.south >= bounds.north {
            throw bad("bounds: south (\(bounds.south)) must be less than north (\(bounds.north))")
        }
        // 180 and -180 are one meridian: [180, s, -180, n] is as empty as [10, s, 10, n].
        if bounds.west == bounds.east || (bounds.west == 180 && bounds.east == -180) {
            throw bad("bounds: west and east are equal (\(bounds.west)); the box has no area")
        }
        if bounds.north <= -WebMercator.maxLatitude || bounds.south >= WebMercator.maxLatitude {
            throw bad("bounds: the box lies outside Web Mercator's latitudes (±85.0511 degrees)")
        }
        return bounds
    }
}
