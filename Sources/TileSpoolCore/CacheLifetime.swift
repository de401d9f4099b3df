// When a response stops being fresh, from the numbers a server sends (`Cache-Control: max-age`,
// `Age`, `Expires`). Every one of them is the server's to choose, so none may trap: delta-seconds
// are clamped as RFC 9111 says, and the sums saturate. The HTTP client reads the headers (libcurl's
// header API) and parses the dates (libcurl's `curl_getdate`); the rules are here.

/// Freshness lifetime rules (RFC 9111 sections 1.2.2, 4.2, 5.1, 5.2.2.1, 5.3), as pure values.
public enum CacheLifetime {
    /// The largest number of seconds a delta-seconds value is taken to say: 2^31 (about 68
    /// years). RFC 9111 section 1.2.2: a value greater than the greatest integer a cache can
    /// represent, or one whose calculations overflow, is taken as 2147483648 (2^31).
    public static let maximumDeltaSeconds: Int64 = 2_147_483_648

    /// A `delta-seconds` value (RFC 9111 section 1.2.2: `1*DIGIT`, non-negative), at most
    /// `maximumDeltaSeconds`: more digits than any integer holds count as that maximum.
    /// - Parameter text: the value as received (no white space, no sign).
    /// - Returns: the seconds, or nil when `text` is not one or more ASCII digits (`-5`, `+9`,
    ///   `1.5`, empty).
    public static func deltaSeconds<S: StringProtocol>(_ text: S) -> Int64? {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        var n: Int64 = 0
        for b in text.utf8 {
            n = n * 10 + Int64(b - 0x30)
            if n >= maximumDeltaSeconds { return maximumDeltaSeconds } // no more digits can lower it
        }
        return n
    }

    /// What `Cache-Control` says of a response's lifetime, in seconds from when it was received:
    /// 0 when it has `no-cache` or `no-store` (wherever they stand); else the last `max-age`,
    /// as `deltaSeconds` (the quoted form `max-age="60"` accepted, RFC 9111 section 5.2), or 0
    /// when its value is not delta-seconds (RFC 9111 section 4.2.1: invalid freshness
    /// information makes the response stale); nil when it has none of these (or is absent).
    /// Directive names are matched without case.
    /// - Returns: seconds in `0...maximumDeltaSeconds`, or nil.
    public static func maxAge(_ cacheControl: String?) -> Int64? {
        guard let cc = cacheControl?.lowercased() else { return nil }
        var age: Int64?
        for directive in cc.split(separator: ",") {
            let d = directive.trimmingCharacters(in: .whitespaces)
            if d == "no-cache" || d == "no-store" { return 0 }
            if d.hasPrefix("max-age=") {
                var value = Substring(d.dropFirst(8))
                if value.count >= 2 && value.hasPrefix("\"") && value.hasSuffix("\"") { value = value.dropFirst().dropLast() }
                age = deltaSeconds(value) ?? 0
            }
        }
        return age
    }

    /// The `Age` header's value (RFC 9111 section 5.1) in seconds, clamped as `deltaSeconds`
    /// (white space around it ignored); nil when absent or not delta-seconds.
    public static func age(_ field: String?) -> Int64? {
        guard let field else { return nil }
        return deltaSeconds(field.trimmingCharacters(in: .whitespaces))
    }

    /// When a response received at `fetched` stops being fresh, in seconds since 1970:
    /// `fetched + maxAge - age` when `Cache-Control` gave a lifetime (never before `fetched`: a
    /// response already older than its lifetime expires at once); else `expires` (the
    /// `Expires` header, already a time); else nil. `maxAge` and `age` are clamped to
    /// `0...maximumDeltaSeconds` and the sum saturates, so no value a server sends can overflow.
    /// - Parameters:
    ///   - fetched: when the response arrived, seconds since 1970.
    ///   - maxAge: `maxAge(_:)` of its `Cache-Control`, or nil.
    ///   - age: `age(_:)` of its `Age` header, or nil (counts as 0).
    ///   - expires: its `Expires` header as seconds since 1970, or nil (RFC 9111 section 5.3:
    ///     ignored when `Cache-Control` gives a lifetime).
    public static func expiry(fetched: Int64, maxAge: Int64?, age: Int64?, expires: Int64?) -> Int64? {
        guard let maxAge else { return expires }
        let lifetime = min(max(maxAge, 0), maximumDeltaSeconds)
        let current = min(max(age ?? 0, 0), maximumDeltaSeconds)
        let left = max(0, lifetime - current)
        let (sum, overflow) = fetched.addingReportingOverflow(left)
        return overflow ? Int64.max : sum
    }
}
