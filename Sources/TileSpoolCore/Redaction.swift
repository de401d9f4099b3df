import Foundation

/// Hides credentials before text reaches a status file, an event, a log line, a manifest or
/// `failed.tsv`. The server still receives the real request; only what people read is redacted.
///
/// Two rules, one mechanism (`redact` for URLs, `redactEmbedded` for any other text):
/// - credentials the way a URL carries them: `user:password@`, and the value of a query or
///   fragment parameter whose name looks like a credential (`isSecret`);
/// - the request's own secrets wherever they appear (`Secrets`): its header values and the
///   credential values of its URLs, for text a server sent back (a body's first bytes, a
///   Content-Type, a Location), which may quote them in any form.
public enum Redaction {
    /// Parameter names (normalised: `normalizedName`) that carry credentials.
    static let exactNames: Set<String> = [
        "key", "api_key", "apikey", "access_token", "token", "sig", "signature", "secret", "password", "passwd", "auth",
        "client_secret", "x-amz-signature", "x-amz-credential", "x-amz-security-token", "session",
        "jwt", "authorization", "credential", "credentials", "sessionid", "session_id",
        "accesskey", "appkey", "authkey", "clientkey", "secretkey", "privatekey", "licensekey", "subscriptionkey",
        "awsaccesskeyid", "app_code",
    ]

    /// Endings of parameter names (normalised) that carry credentials.
    static let secretSuffixes = ["token", "_key", "-key", ".key", "secret", "signature", "credential", "credentials"]

    /// The shortest value of a `code` parameter taken for a credential (an OAuth 2.0
    /// authorization code, RFC 6749 section 4.1.2, is a long random string); a shorter `code`
    /// (a language, country or EPSG code: `code=de`) is an ordinary parameter.
    public static let minimumCodeLength = 16

    /// A parameter name as a server may read it, for `isSecret`: percent-decoded (when it
    /// decodes), `+` and white space trimmed at both ends (`%20key`, `key%20`), the last part of a nested name
    /// taken (`key[]` is `key`, `params[key]` is `key`, `auth[token]` is `token`), lower-cased. Also whether it ends in `Key` after a
    /// lower-case letter or digit (camelCase: `accessKey`, `mapboxKey`), seen before lower-casing.
    static func normalizedName<S: StringProtocol>(_ raw: S) -> (name: String, camelKey: Bool) {
        // Once per parameter of every tile URL: plain lower-case names go through untouched.
        if raw.utf8.allSatisfy({ ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x5F || $0 == 0x2D || $0 == 0x2E }) {
            return (String(raw), false)
        }
        var n = String(raw)
        if n.utf8.contains(UInt8(ascii: "%")) { n = n.removingPercentEncoding ?? n }
        n = n.trimmingCharacters(in: CharacterSet.whitespacesAndNewlines.union(CharacterSet(charactersIn: "+")))
        // PHP-style nesting names its last part: `key[]` is `key`, `params[key]` is `key`.
        if n.contains("[") || n.contains("]") { n = n.split(whereSeparator: { $0 == "[" || $0 == "]" }).last.map(String.init) ?? "" }
        var camel = false
        if n.hasSuffix("Key"), let before = n.dropLast(3).last, before.isLowercase || before.isNumber { camel = true }
        return (n.lowercased(), camel)
    }

    /// True when a parameter of this name looks like a credential: after `normalizedName`, one
    /// of `exactNames`, or ending in `token`, `_key`, `-key`, `.key`, `secret`, `signature`,
    /// `credential(s)`, or containing `password`, or a camelCase name ending in `Key`.
    /// `code` is judged by its value too: `isSecret(name:value:)`.
    public static func isSecret<S: StringProtocol>(_ name: S) -> Bool {
        let (n, camel) = normalizedName(name)
        return camel || exactNames.contains(n) || secretSuffixes.contains(where: { n.hasSuffix($0) }) || n.contains("password")
    }

    /// `isSecret(name)`, or a `code` parameter whose value has at least `minimumCodeLength`
    /// characters (an OAuth authorization code).
    public static func isSecret<S: StringProtocol, V: StringProtocol>(name: S, value: V) -> Bool {
        if isSecret(name) { return true }
        return value.utf8.count >= minimumCodeLength && normalizedName(name).name == "code"
    }

    /// `text` (any text: a message, an HTML attribution, a body's first bytes, a Content-Type, a
    /// Location) with every secret of `secrets` replaced by `REDACTED` wherever it appears
    /// (`Secrets.replaced(in:)`), then every credential it carries the way a URL does: the value
    /// after `?name=`, `&name=`, `;name=` or `#name=` for a secret `name` (`isSecret(name:value:)`),
    /// up to the next `&`, `;`, `#`, quote, `<`, `>` or white space, and the `user:password` of
    /// `scheme://user:password@`.
    public static func redactEmbedded(_ text: String, secrets: Secrets = .none) -> String {
        let text = secrets.replaced(in: text)
        if !text.utf8Contains(where: { $0 == UInt8(ascii: "=") || $0 == UInt8(ascii: "@") }) { return text }
        let u = Array(text.utf8)
        var out: [UInt8] = []
        out.reserveCapacity(u.count)
        let stops: Set<UInt8> = Set("&;#\"'<> \t\r\n".utf8)
        let starts: Set<UInt8> = Set("?&;#".utf8)
        let nameChars: (UInt8) -> Bool = { b in
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A)
                || b == 0x5F || b == 0x2D || b == 0x2E || b == 0x25 || b == 0x5B || b == 0x5D || b == 0x2B
        }
        var i = 0
        while i < u.count {
            let b = u[i]
            out.append(b)
            i += 1
            if starts.contains(b) {
                var j = i
                while j < u.count && nameChars(u[j]) { j += 1 }
                if j < u.count, u[j] == UInt8(ascii: "="), j > i {
                    var k = j + 1
                    while k < u.count && !stops.contains(u[k]) { k += 1 }
                    if isSecret(name: String(decoding: u[i..<j], as: UTF8.self), value: String(decoding: u[(j + 1)..<k], as: UTF8.self)) {
                        out += u[i...j]
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

    /// `url` with any `user:password@` replaced by `REDACTED@`, and the value of every
    /// credential-like parameter (`isSecret(name:value:)`) of its query and of its fragment
    /// (`#access_token=...`, which OAuth's implicit flow uses) replaced by `REDACTED`; parameters
    /// are separated by `&` or `;`. Works on templates too (it does not parse `{z}`-style
    /// placeholders).
    public static func redact(_ url: String) -> String {
        // A PMTiles source (`pmtiles://https://user:pw@host/...`): the inner URL is redacted.
        if let inner = PMTiles.innerURL(url) { return String(url.prefix(PMTiles.sourceScheme.count)) + redact(inner) }
        // Fast path (once per tile): nothing to hide without a query, a fragment or a user part.
        if !url.utf8Contains(where: { $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "@") || $0 == UInt8(ascii: "#") }) { return url }
        // Fast path (once per tile of a PMTiles archive, `…/x.pmtiles#z/x/y`): a fragment with
        // no `name=value` pair is kept as it is, and only the part before it is redacted (the
        // authority and the query end at the first `#`, so the result is the same).
        let u = url.utf8
        if let hash = u.firstIndex(of: UInt8(ascii: "#")), !u[hash...].contains(UInt8(ascii: "=")) {
            return redact(String(url[..<hash])) + String(url[hash...])
        }
        var s = url
        // user:password@host
        if let schemeEnd = s.range(of: "://") {
            let afterScheme = s[schemeEnd.upperBound...]
            let authorityEnd = afterScheme.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? s.endIndex
            if let at = s[schemeEnd.upperBound..<authorityEnd].lastIndex(of: "@") {
                s.replaceSubrange(schemeEnd.upperBound...at, with: "REDACTED@")
            }
        }
        let hash = s.firstIndex(of: "#")
        let q = s[..<(hash ?? s.endIndex)].firstIndex(of: "?")
        guard q != nil || hash != nil else { return s }
        var out = String(s[..<(q ?? hash!)])
        if let q {
            out += "?" + redactParameters(s[s.index(after: q)..<(hash ?? s.endIndex)])
        }
        if let hash {
            out += "#" + redactParameters(s[s.index(after: hash)...])
        }
        return out
    }

    /// `url` as shown to people (a message, an event, a log line, the manifest, `failed.tsv`):
    /// every one of `secrets` replaced by `REDACTED` wherever it appears (`Secrets.replaced(in:)`:
    /// a URL taken from a style or TileJSON may carry a request header's value or a key in its
    /// path as well as in its query), then `redact(_:)`. With no secrets (the usual case) this is
    /// `redact(_:)`.
    public static func redact(_ url: String, secrets: Secrets) -> String {
        redact(secrets.replaced(in: url))
    }

    /// `name=value` pairs separated by `&` or `;` (HTML 4's alternative, which some servers
    /// take; also `?`, for a fragment such as `#x?token=T`), with the value of each secret one
    /// (`isSecret(name:value:)`) replaced by `REDACTED`.
    static func redactParameters(_ parameters: Substring) -> String {
        if !parameters.contains("=") { return String(parameters) }
        var out = ""
        var start = parameters.startIndex
        func flush(_ part: Substring) {
            if let eq = part.firstIndex(of: "="), isSecret(name: part[..<eq], value: part[part.index(after: eq)...]) {
                out += part[..<eq] + "=REDACTED"
            } else {
                out += part
            }
        }
        for idx in parameters.indices where parameters[idx] == "&" || parameters[idx] == ";" || parameters[idx] == "?" {
            flush(parameters[start..<idx])
            out.append(parameters[idx])
            start = parameters.index(after: idx)
        }
        flush(parameters[start...])
        return out
    }

    /// The secret values of one request, to be replaced wherever they appear in text a server
    /// sent back (it may echo a header or a key in a body, a Content-Type or a Location, in any
    /// form): each value, its percent-decoded form and its percent-encoded forms (`%20` and `+`
    /// for a space; their hex digits match in either case, `replaced(in:)`), at least
    /// `minimumLength` bytes long (shorter values cannot be told from ordinary text, and
    /// replacing them would garble every message).
    public struct Secrets: Sendable, Equatable {
        /// The texts replaced, longest first, each once.
        public private(set) var values: [String] = []
        /// The shortest secret searched for, in UTF-8 bytes.
        public static let minimumLength = 4
        /// No secrets: `replaced(in:)` returns its text as it is.
        public static let none = Secrets()

        /// No secrets (`none`).
        public init() {}

        /// Secrets made of `values` (S3 credentials, say) and their forms.
        public init(values: [String]) { add(values) }

        /// The secrets of a request: the value of every header it sends (`headerValues`) but
        /// those of `publicHeaders`, and the credentials of its URLs (`urlValues`: style URL or
        /// tile templates).
        public init(headers: [(String, String)], urls: [String]) {
            let secret = headers.filter { !Secrets.publicHeaders.contains($0.0.lowercased()) }
            add(secret.flatMap { Secrets.headerValues($0.1) } + urls.flatMap(Secrets.urlValues))
        }

        /// Request headers (lower-case names) whose values are not credentials: what a browser
        /// sends anyway (`Referer` and `Origin` name the site, often the tile server's own
        /// origin; replacing them would write `REDACTED` into every URL shown), content
        /// negotiation and caching. Every other header value counts as a secret.
        public static let publicHeaders: Set<String> = [
            "referer", "origin", "user-agent", "accept", "accept-language", "accept-encoding", "cache-control", "pragma", "dnt",
        ]

        /// These secrets and the credentials of `url` (`urlValues`), e.g. the URL of the
        /// transfer a message is about.
        public func adding(url: String) -> Secrets {
            var s = self
            s.add(Secrets.urlValues(url))
            return s
        }

        /// True when there is nothing to replace.
        public var isEmpty: Bool { values.isEmpty }

        private mutating func add(_ raw: [String]) {
            var all = values
            for v in raw {
                var forms = [v]
                if let decoded = v.removingPercentEncoding, decoded != v { forms.append(decoded) }
                if let encoded = v.addingPercentEncoding(withAllowedCharacters: Secrets.unreserved), encoded != v {
                    forms.append(encoded)
                    if v.contains(" ") { forms.append(encoded.replacingOccurrences(of: "%20", with: "+")) }
                }
                for f in forms where f.utf8.count >= Secrets.minimumLength && !all.contains(f) { all.append(f) }
            }
            values = all.sorted { $0.utf8.count > $1.utf8.count }
        }

        /// RFC 3986's unreserved characters: what percent-encoding leaves as it is.
        static let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

        /// What of a header value is secret: the whole value; for a value of the form
        /// `scheme credentials` (`Authorization: Bearer T`), the credentials alone; for `Basic`,
        /// also the decoded `user:password` (RFC 7617) and each of its two parts.
        public static func headerValues(_ value: String) -> [String] {
            var out = [value]
            let v = value.trimmingCharacters(in: .whitespaces)
            guard let space = v.firstIndex(of: " ") else { return out }
            let scheme = v[..<space], credentials = v[space...].trimmingCharacters(in: .whitespaces)
            out.append(credentials)
            if scheme.lowercased() == "basic", let data = Data(base64Encoded: credentials),
               let pair = String(data: data, encoding: .utf8) {
                out.append(pair)
                if let colon = pair.firstIndex(of: ":") { out += [String(pair[..<colon]), String(pair[pair.index(after: colon)...])] }
            }
            return out
        }

        /// The credentials a URL carries: its user info (`user:password`, and each part), and
        /// the value of each secret parameter (`isSecret(name:value:)`) of its query and fragment.
        public static func urlValues(_ url: String) -> [String] {
            if let inner = PMTiles.innerURL(url) { return urlValues(inner) }
            var out: [String] = []
            if let schemeEnd = url.range(of: "://") {
                let authority = url[schemeEnd.upperBound...].prefix { $0 != "/" && $0 != "?" && $0 != "#" }
                if let at = authority.lastIndex(of: "@") {
                    let info = authority[..<at]
                    out.append(String(info))
                    if let colon = info.firstIndex(of: ":") { out += [String(info[..<colon]), String(info[info.index(after: colon)...])] }
                }
            }
            guard let q = url.firstIndex(where: { $0 == "?" || $0 == "#" }) else { return out }
            for part in url[url.index(after: q)...].split(whereSeparator: { $0 == "&" || $0 == ";" || $0 == "#" || $0 == "?" }) {
                guard let eq = part.firstIndex(of: "=") else { continue }
                let value = part[part.index(after: eq)...]
                if isSecret(name: part[..<eq], value: value) { out.append(String(value)) }
            }
            return out
        }

        /// For each of `values` (same order), the positions of the hex digits of its
        /// percent-encodings (`%2F`: the `2` and the `F`), where `replaced(in:)` takes either
        /// case of a letter (RFC 3986 section 2.1: `%2f` and `%2F` are the same octet).
        private static func hexPositions(_ v: [UInt8]) -> [Bool] {
            var hex = [Bool](repeating: false, count: v.count)
            func isHex(_ b: UInt8) -> Bool { (b >= 0x30 && b <= 0x39) || (b | 0x20 >= 0x61 && b | 0x20 <= 0x66) }
            var k = 0
            while k + 2 < v.count {
                if v[k] == UInt8(ascii: "%"), isHex(v[k + 1]), isHex(v[k + 2]) { hex[k + 1] = true; hex[k + 2] = true; k += 3 } else { k += 1 }
            }
            return hex
        }

        /// True when `u` at `i` holds `v`: byte for byte, except that a hex digit of a
        /// percent-encoding in `v` (`hex`) matches in either case.
        private static func matches(_ u: [UInt8], at i: Int, _ v: [UInt8], hex: [Bool]) -> Bool {
            guard u.count - i >= v.count else { return false }
            for k in 0..<v.count where u[i + k] != v[k] {
                guard hex[k], u[i + k] | 0x20 == v[k] | 0x20, v[k] | 0x20 >= 0x61, v[k] | 0x20 <= 0x66 else { return false }
            }
            return true
        }

        /// `text` with every occurrence of one of `values` (the longest that matches at each
        /// place) replaced by `REDACTED`, byte for byte, except that the hex digits of a
        /// percent-encoding match in either case (`%2f` for `%2F`).
        public func replaced(in text: String) -> String {
            guard !values.isEmpty, !text.isEmpty else { return text }
            let u = Array(text.utf8)
            let vs = values.map { Array($0.utf8) }
            let hexes = vs.map(Secrets.hexPositions)
            var out: [UInt8] = []
            out.reserveCapacity(u.count)
            var i = 0, changed = false
            scan: while i < u.count {
                for (n, v) in vs.enumerated() where v[0] == u[i] && Secrets.matches(u, at: i, v, hex: hexes[n]) {
                    out += Array("REDACTED".utf8)
                    i += v.count
                    changed = true
                    continue scan
                }
                out.append(u[i])
                i += 1
            }
            return changed ? String(decoding: out, as: UTF8.self) : text
        }
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
