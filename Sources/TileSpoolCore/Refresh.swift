// Refresh decisions as values: which recorded resources to ask the server about again, what a 304
// records, and how a refreshed line compares with the one it replaces. The daemon applies them
// (RegionDownload.swift); docs/refresh.md describes the whole refresh.

/// What a refresh did with one resource of the new plan, derived from the line it replaces and
/// the line it records.
public enum RefreshOutcome: Sendable, Equatable {
    /// Not asked: younger than the refresh's `--max-age` (the previous line is recorded again).
    case kept
    /// Asked, and the server answered 304 Not Modified or sent the same bytes.
    case unchanged
    /// Asked, and the body is new: other bytes, now empty or missing, or a resource the previous
    /// plan did not have.
    case changed
}

/// The pure rules of a refresh.
public enum Refresh {
    /// True when `line` must be checked with the server: always without `maxAge`; with it, when the
    /// resource was fetched `maxAge` seconds ago or longer, when its own expiry (`Cache-Control:
    /// max-age`, `Expires`) has passed, or when its fetch time is unknown (a five-column line).
    /// - Parameters: `maxAge` in seconds; `now` in seconds since 1970.
    /// A failed tile (`ManifestLine.failed`) is always due; with `maxAge` = `onlyFailed`, only
    /// failed tiles are.
    public static func isDue(_ line: ManifestLine, maxAge: Double?, now: Int64) -> Bool {
        guard let maxAge else { return true }
        if line.failed || maxAge >= onlyFailed { return line.failed }
        guard let fetched = line.freshness.fetched else { return true }
        if let expires = line.freshness.expires, expires <= now { return true }
        return Double(now) - fetched >= maxAge
    }

    /// The `maxAge` of the pass that a `resume` of a region completed with failed tiles starts:
    /// it asks again exactly the tiles recorded as failed and keeps every other line.
    public static let onlyFailed = 1e15

    /// The line a 304 Not Modified records: the previous object and size, the URL asked now, and
    /// the validators and expiry of the 304 where it sent them (RFC 9111 section 4.3.4: a 304
    /// updates the stored response's headers), else the previous ones; `fetched` is the 304's.
    public static func revalidated(_ previous: ManifestLine, url: String, response: Freshness) -> ManifestLine {
        var line = previous
        line.url = url
        line.freshness = Freshness(etag: response.etag ?? previous.freshness.etag,
                                   lastModified: response.lastModified ?? previous.freshness.lastModified,
                                   expires: response.expires ?? previous.freshness.expires,
                                   fetched: response.fetched ?? previous.freshness.fetched)
        return line
    }

    /// How `current` (recorded by the refresh) compares with `previous` (the pack's line for the
    /// same kind and key, nil when the previous plan did not have the resource).
    public static func outcome(previous: ManifestLine?, current: ManifestLine) -> RefreshOutcome {
        guard let previous else { return .changed }
        if previous.sha256 != current.sha256 { return .changed }
        if let f = previous.freshness.fetched, f == current.freshness.fetched { return .kept }
        return .unchanged
    }
}
