import Foundation

/// One line of a region manifest, `store/regions/<id>/manifest.tsv`: five tab-separated columns
///
///     kind <TAB> sha256 <TAB> bytes <TAB> key <TAB> url
///
/// `kind` is a `ResourceKind`; `sha256` is 64 lower-case hex digits, or `-` for an empty tile (404
/// or 204) and for a sprite or glyph range the server did not have; `bytes` is the stored body's
/// size; `key` is `style`, a source name, `sprite@2x.png`, `<fontstack>/<range>` or
/// `<source>/<z>/<x>/<y>` (XYZ); `url` is the URL fetched, credentials redacted. Lines starting
/// with `#` are comments. Format documented in docs/contract.md.
public struct ManifestLine: Sendable, Equatable {
    public var kind: ResourceKind
    /// The object's SHA-256 in hex, or nil for an empty or missing resource.
    public var sha256: String?
    public var bytes: Int
    public var key: String
    public var url: String

    public init(kind: ResourceKind, sha256: String?, bytes: Int, key: String, url: String) {
        self.kind = kind; self.sha256 = sha256; self.bytes = bytes; self.key = key; self.url = url
    }

    /// The first line of every manifest.
    public static let header = "# tilespool manifest v1: kind\tsha256\tbytes\tkey\turl\n"

    /// The line's text, newline included.
    public var text: String {
        "\(kind.rawValue)\t\(sha256 ?? "-")\t\(bytes)\t\(key)\t\(ManifestLine.sanitizeKey(Redaction.redact(url)))\n"
    }

    /// Parses one line (without its newline); nil for comments, blank or malformed lines.
    public init?(_ line: Substring) {
        if line.isEmpty || line.hasPrefix("#") { return nil }
        let f = line.split(separator: "\t", omittingEmptySubsequences: false)
        guard f.count == 5, let kind = ResourceKind(rawValue: String(f[0])), let bytes = Int(f[2]), bytes >= 0 else { return nil }
        let sha = String(f[1])
        if sha != "-" { guard sha.utf8.count == 64, sha.utf8.allSatisfy(isHexDigit) else { return nil } }
        self.init(kind: kind, sha256: sha == "-" ? nil : sha, bytes: bytes, key: String(f[3]), url: String(f[4]))
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
