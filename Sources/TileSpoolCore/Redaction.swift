import Foundation

/// Hides credentials carried in URL query strings before a URL reaches a status file, an event or
/// a log line. The server still receives the real URL; only what users read is redacted.
public enum Redaction {
    /// Query parameter names (lower-cased) that carry credentials.
    static let exactNames: Set<String> = ["key", "api_key", "apikey", "access_token", "token", "sig",
                                          "signature", "secret", "password", "passwd", "auth", "client_secret",
                                          "x-amz-signature", "x-amz-credential", "x-amz-security-token", "session"]

    /// True when a query parameter of this name looks like a credential: one of `exactNames`,
    /// or a name ending in `token`, `_key`, `-key` (`subscription-key`, `api-key`), `secret` or
    /// `signature`, or containing `password`.
    public static func isSecret(_ name: String) -> Bool {
        let n = name.lowercased()
        return exactNames.contains(n) || n.hasSuffix("token") || n.hasSuffix("_key") || n.hasSuffix("-key") || n.hasSuffix("secret")
            || n.hasSuffix("signature") || n.contains("password")
    }

    /// `text` (any text: a message, an HTML attribution, a body's first bytes) with every
    /// credential it carries the way a URL does replaced by `REDACTED`: the value after
    /// `?name=`, `&name=` or `;name=` for a secret `name` (`isSecret`), up to the next `&`, `;`,
    /// `#`, quote, `<`, `>` or white space, and the `user:password` of `scheme://user:password@`.
    public static func redactEmbedded(_ text: String) -> String {
        if !text.utf8Contains(where: { $0 == UInt8(ascii: "=") || $0 == UInt8(ascii: "@") }) { return text }
        let u = Array(text.utf8)
        var out: [UInt8] = []
        out.reserveCapacity(u.count)
        let stops: Set<UInt8> = Set("&;#\"'<> \t\r\n".utf8)
        let nameChars: (UInt8) -> Bool = { b in (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x5F || b == 0x2D || b == 0x2E || b == 0x25 }
        var i = 0
        while i < u.count {
            let b = u[i]
            out.append(b)
            i += 1
            if b == UInt8(ascii: "?") || b == UInt8(ascii: "&") || b == UInt8(ascii: ";") {
                var j = i
                while j < u.count && nameChars(u[j]) { j += 1 }
                if j < u.count, u[j] == UInt8(ascii: "="), j > i {
                    let name = String(decoding: u[i..<j], as: UTF8.self)
                    if isSecret(name.removingPercentEncoding ?? name) {
                        out += u[i...j]
                        var k = j + 1
                        while k < u.count && !stops.contains(u[k]) { k += 1 }
                        out += Array("REDACTED".utf8)
                        i = k
                    }
                }
            } else if b == UInt8(ascii: "/"), out.count >= 3, out[out.count - 3] == UInt8(ascii: ":"), out[out.count - 2] == UInt8(ascii: "/") {
                // scheme://user:password@host: the authority up to '@', when one comes before '/', '?', '#' or a stop.
                var k = i
                while k < u.count && u[k] != UInt8(ascii: "@") && u[k] != UInt8(ascii: "/") && u[k] != UInt8(ascii: "?") && u[k] != UInt8(ascii: "#") && !stops.contains(u[k]) { k += 1 }
                if k < u.count && u[k] == UInt8(ascii: "@") && k > i {
                    out += Array("REDACTED@".utf8)
                    i = k + 1
                }
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// A parsed JSON value (`JSONSerialization`/`JSONKind.parse` types: dictionaries, arrays,
    /// strings, numbers) with every string, at any depth, passed through `redactEmbedded`; keys
    /// and other values unchanged. The one redaction of the JSON an export publishes: the site's
    /// `style.json` and TileJSON, the metadata of mbtiles and pmtiles (docs/export.md).
    public static func redactedJSON(_ value: Any) -> Any {
        switch value {
        case let s as String: return redactEmbedded(s)
        case let a as [Any]: return a.map(redactedJSON)
        case let o as [String: Any]: return o.mapValues(redactedJSON)
        default: return value
        }
    }

    /// `url` with the value of every credential-like query parameter replaced by `REDACTED`, and any
    /// `user:password@` removed. Works on templates too (it does not parse `{z}`-style placeholders).
    public static func redact(_ url: String) -> String {
        // Fast path (once per tile): nothing to hide without a query string or a user part.
        if !url.utf8Contains(where: { $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "@") }) { return url }
        var s = url
        // user:password@host
        if let schemeEnd = s.range(of: "://") {
            let afterScheme = s[schemeEnd.upperBound...]
            let authorityEnd = afterScheme.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? s.endIndex
            if let at = s[schemeEnd.upperBound..<authorityEnd].lastIndex(of: "@") {
                s.replaceSubrange(schemeEnd.upperBound...at, with: "REDACTED@")
            }
        }
        guard let q = s.firstIndex(of: "?") else { return s }
        let fragmentStart = s[q...].firstIndex(of: "#") ?? s.endIndex
        let query = s[s.index(after: q)..<fragmentStart]
        // Parameters are separated by `&`, or `;` (HTML 4's alternative, which some servers take).
        var out = String(s[...q])
        var part = Substring(), first = true
        func flush() {
            if let eq = part.firstIndex(of: "="), isSecret(String(part[..<eq]).removingPercentEncoding ?? String(part[..<eq])) {
                out += part[..<eq] + "=REDACTED"
            } else {
                out += part
            }
        }
        var start = query.startIndex
        for idx in query.indices where query[idx] == "&" || query[idx] == ";" {
            part = query[start..<idx]; flush(); out.append(query[idx]); start = query.index(after: idx)
            first = false
        }
        _ = first
        part = query[start...]; flush()
        return out + String(s[fragmentStart...])
    }
}

extension String {
    /// True when one of the string's UTF-8 bytes satisfies `predicate`: a plain loop over the
    /// bytes where the string is stored contiguously (every native Swift string), which costs a
    /// fraction of iterating `utf8` (these scans run for every tile).
    @inlinable func utf8Contains(where predicate: (UInt8) -> Bool) -> Bool {
        if let found = utf8.withContiguousStorageIfAvailable({ $0.contains(where: predicate) }) { return found }
        return utf8.contains(where: predicate)
    }
}
