import Foundation

/// Checks that a 2xx body is a tile before it enters the store. Pure: bytes and headers in, a
/// description of what was received out.
///
/// A body is not a tile when it is an HTML page (a router login, a captive portal, an error page
/// served with 200: `Content-Type: text/html`, or a body starting `<!doctype html` / `<html`), when
/// its `Content-Type` is `text/*`, or when the template's file extension names a raster format
/// (`.png`, `.jpg`/`.jpeg`, `.webp`) and the body does not start with that format's signature
/// (PNG: `89 50 4E 47 0D 0A 1A 0A`, ISO/IEC 15948 section 5.2; JPEG: `FF D8 FF`, ITU T.81 annex B;
/// WebP: `RIFF....WEBP`, RFC 9649 section 2.5). Vector tiles (`.pbf`, `.mvt`) have no signature
/// (they may be gzip-compressed protobuf), so only the first two rules apply to them.
public enum TileBody {
    /// The raster format a tile URL's path extension names, or nil (vector, unknown, none).
    /// - Parameter url: a tile URL or template; the query and fragment are ignored.
    public static func expectedFormat(url: String) -> String? {
        // Once per tile: a scan over the URL's bytes, no Substring or lower-casing (the answer is
        // one of three).
        var url = url
        return url.withUTF8 { u -> String? in
            var end = u.count
            if let q = u.firstIndex(where: { $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") }) { end = q }
            guard let dot = u[..<end].lastIndex(of: UInt8(ascii: ".")) else { return nil }
            let start = dot + 1, count = end - start
            guard count >= 3 && count <= 4, !u[start..<end].contains(UInt8(ascii: "/")) else { return nil }
            func isExt(_ name: StaticString) -> Bool {
                guard count == name.utf8CodeUnitCount else { return false }
                for i in 0..<count where (u[start + i] | 0x20) != name.utf8Start[i] { return false }
                return true
            }
            if isExt("png") { return "PNG" }
            if isExt("jpg") || isExt("jpeg") { return "JPEG" }
            if isExt("webp") { return "WebP" }
            return nil
        }
    }

    /// Why `body` is not a tile, naming what was received (Content-Type, size, the first bytes),
    /// or nil when it may be stored. An empty body is never a problem: it is an empty tile.
    /// What the message quotes of the server's answer has `secrets` replaced (and credentials in
    /// URL form redacted, `Redaction.redactEmbedded`) before it is cut to length, so no part of a
    /// secret the server echoed survives.
    /// - Parameters:
    ///   - url: the URL asked (its extension gives the expected format).
    ///   - contentType: the response's `Content-Type`, if any.
    ///   - body: the body after content decoding.
    ///   - secrets: the request's secrets (`RegionRequest.secrets` with the URL's); evaluated
    ///     only for a body that is refused.
    public static func problem(url: String, contentType: String?, body: Data,
                               secrets: @autoclosure () -> Redaction.Secrets = Redaction.Secrets.none) -> String? {
        if body.isEmpty { return nil }
        // Once per tile: the common answer (a real tile) is decided on bytes in place, and the
        // message is built only for a body that is refused.
        let kind = contentType.map(mediaKind) ?? .other
        func received() -> String {
            let s = secrets()
            return "received \(body.count) bytes"
                + (contentType.map { " of Content-Type '\(TerminalText.safe(String(Redaction.redactEmbedded($0, secrets: s).prefix(80))))'" } ?? "")
                + " starting \(preview(body, secrets: s))"
        }
        if kind == .html || looksLikeHTML(body) {
            return "the body is an HTML page, not a tile: \(received())"
        }
        if kind == .text, let contentType {
            // Quoted as sent (case kept): a secret the server echoed in it is found and replaced
            // as the request has it, which lower-casing first would have hidden from the search.
            return "the body is text (\(Redaction.redactEmbedded(bareMediaType(contentType, lowercased: false), secrets: secrets()))), not a tile: \(received())"
        }
        if let format = expectedFormat(url: url), !hasSignature(body, format) {
            return "the body is not a \(format) image (its first bytes are not the \(format) signature): \(received())"
        }
        return nil
    }

    /// What a `Content-Type` says of a body, as `problem` sorts it.
    enum MediaKind { case html, text, other }

    /// Where the media type lies in a `Content-Type`'s bytes: before any parameter (`;`), white
    /// space (space, tab) trimmed at both ends.
    static func mediaTypeBounds(_ b: UnsafeBufferPointer<UInt8>) -> Range<Int> {
        var start = 0, end = b.firstIndex(of: UInt8(ascii: ";")) ?? b.count
        while start < end && (b[start] == 0x20 || b[start] == 0x09) { start += 1 }
        while end > start && (b[end - 1] == 0x20 || b[end - 1] == 0x09) { end -= 1 }
        return start..<end
    }

    /// ASCII upper-case letters in lower case, other bytes as they are.
    static func lowerASCII(_ c: UInt8) -> UInt8 { c >= 0x41 && c <= 0x5A ? c | 0x20 : c }

    /// The media type of `contentType` (`mediaTypeBounds`, ASCII letters compared without case):
    /// `text/html` and `application/xhtml+xml` are HTML, any other `text/*` is text. A scan over
    /// the header's bytes: no string is made.
    static func mediaKind(_ contentType: String) -> MediaKind {
        var contentType = contentType
        return contentType.withUTF8 { b -> MediaKind in
            let type = mediaTypeBounds(b)
            func starts(with name: StaticString, exactly: Bool) -> Bool {
                let n = name.utf8CodeUnitCount
                guard exactly ? type.count == n : type.count >= n else { return false }
                for i in 0..<n where lowerASCII(b[type.lowerBound + i]) != name.utf8Start[i] { return false }
                return true
            }
            if starts(with: "text/html", exactly: true) || starts(with: "application/xhtml+xml", exactly: true) { return .html }
            return starts(with: "text/", exactly: false) ? .text : .other
        }
    }

    /// The media type of `contentType` (`mediaTypeBounds`), in lower case (ASCII) unless
    /// `lowercased` is false. A message quotes it as sent (`lowercased: false`), so that the
    /// request's secrets are searched for in the text as the server wrote it.
    static func bareMediaType(_ contentType: String, lowercased: Bool = true) -> String {
        var contentType = contentType
        return contentType.withUTF8 { b in
            let bytes = b[mediaTypeBounds(b)]
            return String(decoding: lowercased ? bytes.map(lowerASCII) : Array(bytes), as: UTF8.self)
        }
    }

    /// True when `body` starts with the signature of `format` ("PNG", "JPEG" or "WebP").
    public static func hasSignature(_ body: Data, _ format: String) -> Bool {
        body.withUnsafeBytes { b in
            func starts(_ signature: [UInt8], at offset: Int = 0) -> Bool {
                b.count >= offset + signature.count && signature.indices.allSatisfy { b[offset + $0] == signature[$0] }
            }
            switch format {
            case "PNG": return starts([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
            case "JPEG": return starts([0xFF, 0xD8, 0xFF])
            case "WebP": return starts([0x52, 0x49, 0x46, 0x46]) && starts([0x57, 0x45, 0x42, 0x50], at: 8) // RIFF, WEBP
            default: return true
            }
        }
    }

    /// True when the body, after any UTF-8 byte order mark and white space, starts with
    /// `<!doctype html` or `<html` (ASCII case-insensitive).
    static func looksLikeHTML(_ body: Data) -> Bool {
        // Only a body starting (after a BOM or white space) with "<" can be HTML.
        let first = body.withUnsafeBytes { b in
            b.first { $0 != 0x20 && $0 != 0x09 && $0 != 0x0A && $0 != 0x0D && $0 != 0xEF && $0 != 0xBB && $0 != 0xBF }
        }
        guard first == UInt8(ascii: "<") else { return false }
        var b = [UInt8](body.prefix(64))
        if b.starts(with: [0xEF, 0xBB, 0xBF]) { b.removeFirst(3) }
        while let f = b.first, f == 0x20 || f == 0x09 || f == 0x0A || f == 0x0D { b.removeFirst() }
        let head = String(decoding: b, as: UTF8.self).lowercased()
        return head.hasPrefix("<!doctype html") || head.hasPrefix("<html")
    }

    /// How many characters of a body a message quotes.
    static let previewLength = 24

    /// The first bytes of `body` for a message: printable ASCII quoted (its first
    /// `previewLength` characters, `...` when there is more), else the first 8 bytes in
    /// hexadecimal. A server may echo the URL asked or the request's headers: the quoted text
    /// is redacted (`Redaction.redactEmbedded` with `secrets`) before it is cut, over enough of
    /// the body to hold any secret starting in the part shown; the hexadecimal form stops before
    /// the first secret that starts in its 8 bytes (`REDACTED` follows).
    static func preview(_ body: Data, secrets: Redaction.Secrets = .none) -> String {
        let b = [UInt8](body.prefix(previewLength))
        guard b.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else {
            var hex = [UInt8](b.prefix(8)), cut = false
            let head = [UInt8](body.prefix(8 + (secrets.values.first?.utf8.count ?? 0)))
            for v in secrets.values.map({ Array($0.utf8) }) {
                for start in 0..<min(hex.count, head.count) where head.count - start >= v.count && head[start..<(start + v.count)].elementsEqual(v) {
                    if start < hex.count { hex = Array(hex[..<start]); cut = true }
                    break
                }
            }
            return "0x" + hex.map { String(format: "%02x", $0) }.joined() + (cut ? " REDACTED" : "")
        }
        let longest = secrets.values.first?.utf8.count ?? 0
        let window = body.prefix(previewLength + longest + 256).prefix { $0 >= 0x20 && $0 < 0x7F }
        let text = Redaction.redactEmbedded(String(decoding: window, as: UTF8.self), secrets: secrets)
        let more = text.count > previewLength || body.count > window.count
        return "'" + String(text.prefix(previewLength)) + (more ? "...'" : "'")
    }
}
