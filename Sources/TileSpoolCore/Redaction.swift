import Foundation

/// Hides credentials carried in URL query strings before a URL reaches a status file, an event or
/// a log line. The server still receives the real URL; only what users read is redacted.
public enum Redaction {
    /// Query parameter names (lower-cased) that carry credentials.
    static let exactNames: Set<String> = ["key", "api_key", "apikey", "access_token", "token", "sig",
                                          "signature", "secret", "password", "passwd", "auth", "client_secret",
                                          "x-amz-signature", "x-amz-credential", "x-amz-security-token", "session"]

    /// True when a query parameter of this name looks like a credential.
    public static func isSecret(_ name: String) -> Bool {
        let n = name.lowercased()
        return exactNames.contains(n) || n.hasSuffix("token") || n.hasSuffix("_key") || n.hasSuffix("secret")
            || n.hasSuffix("signature") || n.contains("password")
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
        let parts = query.split(separator: "&", omittingEmptySubsequences: false).map { part -> String in
            guard let eq = part.firstIndex(of: "=") else { return String(part) }
            let name = String(part[..<eq]).removingPercentEncoding ?? String(part[..<eq])
            return isSecret(name) ? part[..<eq] + "=REDACTED" : String(part)
        }
        return String(s[...q]) + parts.joined(separator: "&") + String(s[fragmentStart...])
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
