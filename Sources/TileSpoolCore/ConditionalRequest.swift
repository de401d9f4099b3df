// Which conditional header a GET carries, from what the manifest kept of the last response. Every
// transfer goes through `ConditionalRequest.headers(for:)` (HTTPClient.start does it), so the
// first download, a resume and a refresh follow the same rule.

/// The conditional request headers of a GET (RFC 9110 section 13.1), as a value.
public enum ConditionalRequest {
    /// The conditional header(s) to send for a resource whose stored response had `validators`
    /// (a manifest line's `Freshness`), as (name, value) pairs:
    /// - with an ETag: `If-None-Match` with it, alone. RFC 9110 section 13.1.3: a client must
    ///   not rely on `If-Modified-Since` when it can send `If-None-Match`, and a server ignores
    ///   it when both come (section 13.2.2) - so an unchanged `Last-Modified` can never make a
    ///   changed body look current;
    /// - with no ETag but a `Last-Modified` time: `If-Modified-Since` with that time as an
    ///   IMF-fixdate (RFC 9110 section 5.6.7);
    /// - otherwise (nil, no validator, or values that cannot be sent): none, a plain GET.
    ///
    /// An ETag that is not an entity-tag (`isEntityTag`: `*`, an unquoted word, anything holding
    /// CR, LF or NUL, which would split the request; a manifest written before this rule may
    /// hold one) counts as absent; so does a `Last-Modified` outside years 1970-9999. Only a 304
    /// answer means "not modified": a 200 always carries the new body.
    public static func headers(for validators: Freshness?) -> [(String, String)] {
        guard let v = validators else { return [] }
        if let etag = v.etag, isEntityTag(etag) {
            return [("If-None-Match", etag)]
        }
        if let lm = v.lastModified, let date = imfFixdate(lm) {
            return [("If-Modified-Since", date)]
        }
        return []
    }

    /// The longest ETag kept and sent back, in bytes.
    public static let maximumEntityTagLength = 1024

    /// True when `text` is one entity-tag as RFC 9110 section 8.8.3 defines it, and so may be
    /// sent back as `If-None-Match`: `[W/]"..."`, the weak prefix `W/` in upper case, between
    /// the double quotes only `etagc` bytes (`!` and `#` to `~`; the standard's obs-text, bytes
    /// 0x80-0xFF, is left out: it would not survive the manifest's text), at most
    /// `maximumEntityTagLength` bytes. Not an entity-tag: `*` (If-None-Match's "any", which
    /// every server answers 304 to), `v1` (unquoted), `"a"b"`, `w/"x"`, white space around it.
    public static func isEntityTag(_ text: String) -> Bool {
        var u = Substring(text).utf8
        guard u.count <= maximumEntityTagLength else { return false }
        if u.starts(with: "W/".utf8) { u = u.dropFirst(2) }
        guard u.count >= 2, u.first == 0x22, u.last == 0x22 else { return false }
        return u.dropFirst().dropLast().allSatisfy { $0 == 0x21 || ($0 >= 0x23 && $0 <= 0x7E) }
    }

    /// The HTTP date `text` in seconds since 1970, given `parsed`, what a lenient parser
    /// (libcurl's `curl_getdate`) made of it: nil when the parser failed (negative), when the date
    /// is outside 1970-9999 (`imfFixdate`), or when `text` names another year than the one
    /// parsed. Every token of `text` (split at spaces and commas) of three or more digits, signed
    /// or not, is a year and must be the parsed year as written: `Mon, 01 Jan 0001 00:00:00 GMT`
    /// (Go's zero time, which servers send) was read as 2001, `Fri, 31 Dec -9999 ...` as 9999;
    /// both are invalid dates, so absent (RFC 9110 section 5.6.7: a recipient ignores a date it
    /// cannot parse). The two-digit year of the obsolete RFC 850 form is left to the parser.
    public static func checkedHTTPDate(_ text: String, parsed: Int64) -> Int64? {
        guard parsed >= 0, let fixdate = imfFixdate(parsed) else { return nil }
        let year = fixdate.split(separator: " ")[3]
        for token in text.split(whereSeparator: { $0 == " " || $0 == "," || $0 == "\t" }) {
            let digits = token.drop(while: { $0 == "+" || $0 == "-" })
            guard digits.count >= 3, digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { continue }
            if token != year { return nil }
        }
        return parsed
    }

    /// `secondsSince1970` (UTC) as an IMF-fixdate, the preferred HTTP date format (RFC 9110
    /// section 5.6.7), e.g. 784111777 -> `Sun, 06 Nov 1994 08:49:37 GMT`. Nil outside
    /// 1970-01-01 ... 9999-12-31 (the format has four year digits; HTTP dates before 1970 are
    /// not kept).
    public static func imfFixdate(_ secondsSince1970: Int64) -> String? {
        guard secondsSince1970 >= 0, secondsSince1970 < 253_402_300_800 else { return nil }
        let days = secondsSince1970 / 86_400, secs = secondsSince1970 % 86_400
        // Civil date from a day count (Howard Hinnant's `civil_from_days`, proleptic Gregorian).
        let z = days + 719_468
        let era = z / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yoe + era * 400 + (month <= 2 ? 1 : 0)
        let weekdays = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"] // 1970-01-01 was a Thursday
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func two(_ n: Int64) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(weekdays[Int(days % 7)]), \(two(day)) \(months[Int(month - 1)]) \(year) "
            + "\(two(secs / 3600)):\(two(secs / 60 % 60)):\(two(secs % 60)) GMT"
    }
}
