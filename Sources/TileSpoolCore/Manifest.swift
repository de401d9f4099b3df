import Foundation

/// What an HTTP response said about its own freshness and how to revalidate it (RFC 9111 section 4.2
/// and RFC 9110 section 8.8), kept with each manifest line for `refresh`. Times in seconds since 1970.
public struct Freshness: Sendable, Equatable {
    /// The `ETag` header as sent (quotes and any `W/` kept), for `If-None-Match`.
    public var etag: String?
    /// The `Last-Modified` header as a time, for `If-Modified-Since`.
    public var lastModified: Int64?
    /// When the response stops being fresh: the fetch time plus `Cache-Control: max-age`, else the
    /// `Expires` header; the fetch time itself for `no-cache`/`no-store`; nil when the server said nothing.
    public var expires: Int64?
    /// When the response was received, in seconds with millisecond precision (so that a line kept
    /// unasked by a refresh, which keeps this value, is told apart from one asked again).
    public var fetched: Double?
    public init(etag: String? = nil, lastModified: Int64? = nil, expires: Int64? = nil, fetched: Double? = nil) {
        self.etag = etag; self.lastModified = lastModified; self.expires = expires; self.fetched = fetched
    }
    /// True when a conditional request can be made (a validator is known).
    public var hasValidator: Bool { etag != nil || lastModified != nil }
}

/// One line of a region manifest, `store/regions/<id>/manifest.tsv`: nine tab-separated columns
///
///     kind <TAB> sha256 <TAB> bytes <TAB> key <TAB> url <TAB> etag <TAB> lastModified <TAB> expires <TAB> fetched
///
/// `kind` is a `ResourceKind`; `sha256` is 64 lower-case hex digits, or `-` for an empty tile (404
/// or 204) and for a sprite or glyph range the server did not have, or `!` for a tile that failed
/// within the request's `maxFailedTiles` budget (read like an empty tile); `bytes` is the stored body's
/// size; `key` is `style`, a source name, `sprite@2x.png`, `<fontstack>/<range>` or
/// `<source>/<z>/<x>/<y>` (XYZ); `url` is the URL fetched, credentials redacted. The last four are the
/// response's `Freshness`: the ETag as sent, then three times in seconds since 1970 (`-` when
/// unknown; the fetch time with three decimals, milliseconds). Lines written before TileSpool kept validators have only the first five columns and
/// are read with an unknown freshness. Lines starting with `#` are comments. Format documented in
/// docs/contract.md ("The manifest").
public struct ManifestLine: Sendable, Equatable {
    public var kind: ResourceKind
    /// The object's SHA-256 in hex, or nil for an empty or missing resource.
    public var sha256: String?
    public var bytes: Int
    public var key: String
    public var url: String
    /// Validators and expiry of the response (all nil for a line of the five-column format).
    public var freshness: Freshness
    /// A tile that outlived its retries within the request's `maxFailedTiles` (sha256 column `!`;
    /// `sha256` is nil and `bytes` 0, so every reader takes it for an empty tile).
    public var failed = false

    public init(kind: ResourceKind, sha256: String?, bytes: Int, key: String, url: String, freshness: Freshness = Freshness()) {
        self.kind = kind; self.sha256 = sha256; self.bytes = bytes; self.key = key; self.url = url
        self.freshness = freshness
    }

    /// The first line of every manifest.
    public static let header = "# tilespool manifest v2: kind\tsha256\tbytes\tkey\turl\tetag\tlastModified\texpires\tfetched\n"

    /// The line's text, newline included.
    public var text: String {
        let f = freshness
        let etag = f.etag.map(ManifestLine.sanitizeKey) ?? "-"
        return "\(kind.rawValue)\t\(failed ? "!" : sha256 ?? "-")\t\(bytes)\t\(key)\t\(ManifestLine.sanitizeKey(Redaction.redact(url)))\t\(etag)\t\(ManifestLine.column(f.lastModified))\t\(ManifestLine.column(f.expires))\t\(ManifestLine.milliseconds(f.fetched))\n"
    }

    static func column(_ t: Int64?) -> String { t.map { String($0) } ?? "-" }

    /// Seconds with three decimals (`1764655031.042`), or `-`.
    static func milliseconds(_ t: Double?) -> String {
        guard let t, t.isFinite, t >= 0 else { return "-" }
        let ms = Int64((t * 1000).rounded())
        let frac = String(ms % 1000)
        return "\(ms / 1000)." + String(repeating: "0", count: 3 - frac.count) + frac
    }

    /// `t` rounded to whole milliseconds, as the manifest writes it.
    public static func roundedToMilliseconds(_ t: Double) -> Double { (t * 1000).rounded() / 1000 }

    /// Parses one line (without its newline): five or nine columns; nil for comments, blank or
    /// malformed lines.
    public init?(_ line: Substring) {
        if line.isEmpty || line.hasPrefix("#") { return nil }
        // Split on the tab byte: a Character-wise split costs grapheme breaking on every byte.
        let f = line.utf8.split(separator: 0x09, omittingEmptySubsequences: false).map { Substring($0) }
        guard f.count == 5 || f.count == 9, let kind = ResourceKind(rawValue: String(f[0])), let bytes = Int(f[2]), bytes >= 0 else { return nil }
        let sha = String(f[1])
        if sha != "-" && sha != "!" { guard sha.utf8.count == 64, sha.utf8.allSatisfy(isHexDigit) else { return nil } }
        var fresh = Freshness()
        if f.count == 9 {
            func time(_ s: Substring) -> Int64?? { s == "-" ? .some(nil) : Int64(s).map { .some($0) } }
            guard let lm = time(f[6]), let ex = time(f[7]) else { return nil }
            let fe: Double? = f[8] == "-" ? nil : Double(f[8])
            guard f[8] == "-" || fe?.isFinite == true else { return nil }
            fresh = Freshness(etag: f[5] == "-" ? nil : String(f[5]), lastModified: lm, expires: ex, fetched: fe)
        }
        self.init(kind: kind, sha256: sha == "-" || sha == "!" ? nil : sha, bytes: bytes, key: String(f[3]), url: String(f[4]), freshness: fresh)
        failed = sha == "!"
    }

    /// Replaces the characters that would break the line format (tab, CR, LF) by percent escapes.
    public static func sanitizeKey(_ s: String) -> String {
        guard s.utf8.contains(where: { $0 == 0x09 || $0 == 0x0A || $0 == 0x0D }) else { return s }
        return s.replacingOccurrences(of: "\t", with: "%09").replacingOccurrences(of: "\n", with: "%0A")
            .replacingOccurrences(of: "\r", with: "%0D")
    }

    /// The manifest key of a tile: `<source>/<z>/<x>/<y>`.
    public static func tileKey(source: String, _ t: TileID) -> String { "\(source)/\(t.z)/\(t.x)/\(t.y)" }

    /// Splits a tile key into source and tile; nil when malformed.
    public static func parseTileKey(_ key: String) -> (String, TileID)? {
        let parts = key.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count >= 4, let z = Int(parts[parts.count - 3]), let x = Int(parts[parts.count - 2]),
              let y = Int(parts[parts.count - 1]) else { return nil }
        return (parts.dropLast(3).joined(separator: "/"), TileID(z: z, x: x, y: y))
    }
}

/// True for the ASCII bytes 0-9 and a-f (lower-case hex, as object names use).
@inlinable public func isHexDigit(_ b: UInt8) -> Bool { (b >= 0x30 && b <= 0x39) || (b >= 0x61 && b <= 0x66) }
