// The `Retry-After` header as a value: how long a server asked the client to wait. The HTTP
// client reads the header (libcurl's header API) and parses HTTP dates with libcurl; the rule of
// what the text means, and the cap, are here.
import Foundation

/// `Retry-After` (RFC 9110 section 10.2.3): `delay-seconds` (one or more ASCII digits) or an
/// HTTP-date, parsed and capped.
public enum RetryAfter {
    /// The longest wait honoured, in seconds (1 hour); a longer one is cut to it (the daemon's
    /// `maxRetryAfter`, docs/contract.md "HTTP").
    public static let maximum = 3600.0

    /// The wait `field` asks for, in seconds from `now`, at most `cap`:
    /// - digits only (white space around them ignored): that many seconds; a number too large for
    ///   any integer type (`99999999999999999999`) counts as `cap`, not as nothing;
    /// - otherwise an HTTP-date, parsed by `date`: the seconds from `now` until then.
    ///
    /// - Parameters:
    ///   - field: the header's value as received.
    ///   - now: the current time, seconds since 1970.
    ///   - cap: the longest wait returned, in seconds (`maximum` by default).
    ///   - date: parses an HTTP date to seconds since 1970, nil when it is not one (the HTTP
    ///     client passes libcurl's `curl_getdate`).
    /// - Returns: seconds in `0 < s <= cap`; nil when the field asks for no wait (`0`, a date
    ///   not after `now`) or is neither form (`-5`, `1.5`, text).
    public static func seconds(_ field: String, now: Double, cap: Double = maximum, date: (String) -> Double?) -> Double? {
        let text = field.trimmingCharacters(in: CharacterSet(charactersIn: " \t")) // OWS
        guard !text.isEmpty else { return nil }
        if text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) {
            guard let n = Int64(text) else { return cap } // more digits than any integer holds
            return n > 0 ? min(Double(n), cap) : nil
        }
        guard let when = date(text), when > now else { return nil }
        return min(when - now, cap)
    }
}
