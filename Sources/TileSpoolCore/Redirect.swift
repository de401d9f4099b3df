// The rules of following a redirect, as values. The HTTP client (TileSpoolIO/HTTPClient.swift)
// follows redirects itself, one hop at a time, and asks these functions at each hop; libcurl
// parses the Location (CURLINFO_REDIRECT_URL) and the URLs (its URL API).

/// The origin of an http(s) URL: scheme, host and port (RFC 6454 section 4; RFC 9110 section
/// 4.3.1). Two URLs are of the same origin when all three are equal, after lower-casing the
/// scheme and host and giving an absent port the scheme's default (80 for http, 443 for https).
public struct HTTPOrigin: Sendable, Equatable, CustomStringConvertible {
    /// Lower-case, e.g. `https`.
    public var scheme: String
    /// Lower-case, as in the URL (a final dot kept: `example.org.` is another origin).
    public var host: String
    public var port: Int

    /// - Parameters: `port` nil: the scheme's default (80 for http, 443 for https, else 0).
    public init(scheme: String, host: String, port: Int?) {
        self.scheme = scheme.lowercased()
        self.host = host.lowercased()
        self.port = port ?? (self.scheme == "https" ? 443 : self.scheme == "http" ? 80 : 0)
    }

    /// `scheme://host:port`.
    public var description: String { "\(scheme)://\(host):\(port)" }
}

/// Which redirects are followed, and which request headers go with the next hop.
public enum Redirect {
    /// The schemes a redirect may lead to; any other fails the transfer (a `file:` Location must
    /// never read a local file).
    public static let followedSchemes: Set<String> = ["http", "https"]

    /// True when the request's own headers (`RegionRequest.headers`: an API key, `Authorization`,
    /// a `Referer`) go with the request to `next`: only while every hop so far stayed on the
    /// origin of the URL first asked. A cross-origin redirect drops them for the rest of the
    /// transfer, even if a later hop comes back, so a credential meant for one server never
    /// reaches another (the rule of the Fetch standard for `Authorization`, applied to every
    /// header the request names; libcurl alone drops only `Authorization` and `Cookie`).
    /// Conditional headers (`If-None-Match`, `If-Modified-Since`) are not request headers in this
    /// sense: they describe the stored copy and go with every hop.
    /// - Parameters:
    ///   - sentSoFar: whether the hop before this one carried them.
    ///   - first: the origin of the URL first asked; nil when it could not be parsed (then they
    ///     are dropped).
    ///   - next: the origin of the redirect's target.
    public static func keepsRequestHeaders(sentSoFar: Bool, first: HTTPOrigin?, next: HTTPOrigin) -> Bool {
        sentSoFar && first == next
    }
}
