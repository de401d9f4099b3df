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
/// size (`0 ... PackFormat.maxBody`: a larger value is damage and the line is refused, so sums of
/// `bytes` cannot overflow); `key` is `style`, a source name, `sprite@2x.png`, `<fontstack>/<range>` or
/// `<source>/<z>/<x>/<y>` (XYZ); `url` is the URL fetched, credentials redacted. The last four are the
/// response's `Freshness`: the ETag as sent, then three times in seconds since 1970 (`-` when
/// unknown; the fetch time with three decimals, milliseconds), within `timeRange`. Lines written before TileSpool kept validators have only the first five columns and
/// are read with an unknown freshness. Lines starting with `#` are comments. Format documented in
/// docs/contract.md ("The manifest").
public struct ManifestLine: Sendable, Equatable {
    public var kind: ResourceKind
    /// The object's SHA-256 in hex, or nil for an empty or missing resource.
    public var sha256: String?
    /// The stored body's size in bytes, `0 ... PackFormat.maxBody` for a parsed line.
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

    /// The times a parsed line may hold (`lastModified`, `expires`, `fetched`), in seconds since
    /// 1970: 1970-01-01 to 9999-12-31T23:59:59Z, the last second an HTTP date can name. A line with
    /// a time outside is refused as damaged, so every time read converts to `Int64` without trapping.
    public static let timeRange: ClosedRange<Int64> = 0...253_402_300_799

    /// The first line of every manifest.
    public static let header = "# tilespool manifest v2: kind\tsha256\tbytes\tkey\turl\tetag\tlastModified\texpires\tfetched\n"

    /// The line's text, newline included.
    public var text: String {
        var b: [UInt8] = []
        b.reserveCapacity(192)
        appendText(to: &b)
        return String(decoding: b, as: UTF8.self)
    }

    /// Appends the line's text (`text`, newline included) as UTF-8 to `out`: the form the daemon
    /// uses once per resource (journal and manifest), with no intermediate strings.
    public func appendText(to out: inout [UInt8]) {
        let tab: UInt8 = 0x09, dash = UInt8(ascii: "-")
        ManifestLine.appendUTF8(kind.rawValue, to: &out); out.append(tab)
        if failed { out.append(UInt8(ascii: "!")) } else if let sha256 { ManifestLine.appendUTF8(sha256, to: &out) } else { out.append(dash) }
        out.append(tab)
        ManifestLine.appendDecimal(Int64(bytes), to: &out); out.append(tab)
        ManifestLine.appendUTF8(key, to: &out); out.append(tab)
        ManifestLine.appendUTF8(TSV.field(Redaction.redact(url)), to: &out); out.append(tab)
        let f = freshness
        if let etag = f.etag { ManifestLine.appendUTF8(TSV.field(etag), to: &out) } else { out.append(dash) }
        out.append(tab)
        if let t = f.lastModified { ManifestLine.appendDecimal(t, to: &out) } else { out.append(dash) }
        out.append(tab)
        if let t = f.expires { ManifestLine.appendDecimal(t, to: &out) } else { out.append(dash) }
        out.append(tab)
        if let t = f.fetched, t.isFinite, t >= 0, t < 9e15 { // beyond: not a time (and no Int64 of ms)
            // Seconds with three decimals (`1764655031.042`).
            let ms = Int64((t * 1000).rounded())
            ManifestLine.appendDecimal(ms / 1000, to: &out)
            let frac = ms % 1000
            out.append(UInt8(ascii: "."))
            out.append(UInt8(48 + frac / 100)); out.append(UInt8(48 + frac / 10 % 10)); out.append(UInt8(48 + frac % 10))
        } else {
            out.append(dash)
        }
        out.append(0x0A)
    }

    /// Appends `v` in decimal ASCII digits (a leading `-` when negative). Up to 15 digits the
    /// `String` stays inline (Swift's small strings): no allocation.
    static func appendDecimal(_ v: Int64, to out: inout [UInt8]) { appendUTF8(String(v), to: &out) }

    /// Appends the UTF-8 bytes of `s` in one copy (appending `s.utf8` goes byte by byte).
    static func appendUTF8(_ s: String, to out: inout [UInt8]) {
        var s = s
        s.withUTF8 { out.append(contentsOf: $0) }
    }

    /// `t` rounded to whole milliseconds, as the manifest writes it.
    public static func roundedToMilliseconds(_ t: Double) -> Double { (t * 1000).rounded() / 1000 }

    /// Parses one line (without its newline): five or nine columns; nil for comments, blank or
    /// malformed lines.
    public init?(_ line: Substring) {
        var line = line
        guard let parsed = line.withUTF8({ ManifestLine(utf8: $0) }) else { return nil }
        self = parsed
    }

    /// Parses one line given as UTF-8 bytes (without its newline), as `init?(_: Substring)`. Once
    /// per line whenever a manifest is read (restart, gc, verify, export, unique bytes): a single
    /// pass over the bytes, strings made only for the columns kept.
    public init?(utf8 b: UnsafeBufferPointer<UInt8>) {
        if b.isEmpty || b[0] == UInt8(ascii: "#") { return nil }
        var i = 0
        // The next column: the bytes up to the next tab or the end; nil past the end.
        func column() -> Range<Int>? {
            guard i <= b.count else { return nil }
            let start = i
            while i < b.count && b[i] != 0x09 { i += 1 }
            defer { i += 1 }
            return start..<i
        }
        func string(_ r: Range<Int>) -> String { String(decoding: UnsafeBufferPointer(rebasing: b[r]), as: UTF8.self) }
        func isDash(_ r: Range<Int>) -> Bool { r.count == 1 && b[r.lowerBound] == UInt8(ascii: "-") }
        // A decimal integer with an optional sign; nil on overflow (a short column: an inline string).
        func integer(_ r: Range<Int>) -> Int64? { Int64(string(r)) }
        guard let c0 = column(), let c1 = column(), let c2 = column(), let c3 = column(), let c4 = column(),
              let kind = ResourceKind(rawValue: string(c0)), let bytes = integer(c2), bytes >= 0,
              bytes <= Int64(PackFormat.maxBody) else { return nil } // no body a pack holds is larger (u32)
        let failed = c1.count == 1 && b[c1.lowerBound] == UInt8(ascii: "!")
        var sha: String?
        if !failed && !isDash(c1) {
            guard c1.count == 64, b[c1].allSatisfy(isHexDigit) else { return nil }
            sha = string(c1)
        }
        var fresh = Freshness()
        if i <= b.count {
            guard let c5 = column(), let c6 = column(), let c7 = column(), let c8 = column(), i > b.count else { return nil }
            // A time outside `timeRange` is damage: the line is refused like any bad number.
            func time(_ r: Range<Int>) -> Int64?? {
                if isDash(r) { return .some(nil) }
                guard let v = integer(r), ManifestLine.timeRange.contains(v) else { return nil }
                return .some(v)
            }
            guard let lm = time(c6), let ex = time(c7) else { return nil }
            var fetched: Double?
            if !isDash(c8) {
                guard let v = Double(string(c8)), v.isFinite, v >= 0, v <= Double(ManifestLine.timeRange.upperBound) else { return nil }
                fetched = v
            }
            fresh = Freshness(etag: isDash(c5) ? nil : string(c5), lastModified: lm, expires: ex, fetched: fetched)
        }
        self.init(kind: kind, sha256: sha, bytes: Int(bytes), key: string(c3), url: string(c4), freshness: fresh)
        self.failed = failed
    }

    /// A name as a manifest key writes it (a source name, a fontstack, a sprite id): `%` as
    /// `%25`, then TAB, LF and CR as `%09`, `%0A`, `%0D`. Injective, so two names never share a
    /// key (`a<TAB>b` is `a%09b`, `a%09b` is `a%2509b`); a name without those four characters is
    /// its own key. Keys are made once, from the style's names (`PlannedResource`, `TileSet`);
    /// never escape a key again.
    public static func sanitizeKey(_ s: String) -> String {
        guard s.utf8Contains(where: { $0 == 0x25 || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D }) else { return s }
        return TSV.field(s.replacingOccurrences(of: "%", with: "%25"))
    }

    /// The name a key part was made from: the inverse of `sanitizeKey` (`%25`, `%09`, `%0A`,
    /// `%0D` read back as `%`, TAB, LF, CR; any other `%` is kept as it is).
    public static func unescapeKey(_ key: String) -> String {
        guard key.utf8Contains(where: { $0 == 0x25 }) else { return key }
        var out = [UInt8](), bytes = Array(key.utf8), i = 0
        out.reserveCapacity(bytes.count)
        while i < bytes.count {
            if bytes[i] == 0x25, i + 2 < bytes.count {
                let pair = (bytes[i + 1], bytes[i + 2])
                let decoded: UInt8? = switch pair {
                case (0x32, 0x35): 0x25
                case (0x30, 0x39): 0x09
                case (0x30, 0x41): 0x0A
                case (0x30, 0x44): 0x0D
                default: nil
                }
                if let decoded { out.append(decoded); i += 3; continue }
            }
            out.append(bytes[i]); i += 1
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The manifest key of a tile: `<source>/<z>/<x>/<y>`.
    public static func tileKey(source: String, _ t: TileID) -> String { "\(source)/\(t.z)/\(t.x)/\(t.y)" }

    /// Splits a tile key into source and tile; nil when malformed.
    /// The source is everything before the third `/` from the end (it may hold `/` itself); z, x
    /// and y are written as `tileKey` writes them: decimal digits, no sign, no leading zero, at
    /// most 10 (attack round 14: `+0`, `-0` and `00` were read as 0). Found by one backward scan,
    /// no array of parts (once per manifest line of every export and gc).
    public static func parseTileKey(_ key: String) -> (String, TileID)? {
        let u = key.utf8
        var cuts: [String.Index] = []
        var i = u.endIndex
        while cuts.count < 3 && i > u.startIndex {
            u.formIndex(before: &i)
            if u[i] == UInt8(ascii: "/") { cuts.append(i) }
        }
        guard cuts.count == 3 else { return nil }
        func number(_ from: String.Index, _ to: String.Index) -> Int? {
            let digits = u[u.index(after: from)..<to]
            guard !digits.isEmpty, digits.count <= 10, digits.count == 1 || digits.first != UInt8(ascii: "0") else { return nil }
            var v = 0
            for d in digits {
                guard d >= UInt8(ascii: "0"), d <= UInt8(ascii: "9") else { return nil }
                v = v * 10 + Int(d - UInt8(ascii: "0"))
            }
            return v
        }
        // A tile of zoom 0...30 within its zoom, as no other key names one (a review of
        // 2026-12-07: a planted `src/63/0/0` line trapped `plan --estimate`, `1 << 63`).
        guard let z = number(cuts[2], cuts[1]), let x = number(cuts[1], cuts[0]), let y = number(cuts[0], u.endIndex),
              z <= 30, x < 1 << z, y < 1 << z else { return nil }
        return (String(key[..<cuts[2]]), TileID(z: z, x: x, y: y))
    }
}

/// True for the ASCII bytes 0-9 and a-f (lower-case hex, as object names use).
@inlinable public func isHexDigit(_ b: UInt8) -> Bool { (b >= 0x30 && b <= 0x39) || (b >= 0x61 && b <= 0x66) }
