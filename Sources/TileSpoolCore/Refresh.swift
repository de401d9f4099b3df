// Refresh decisions as values: which recorded resources to ask the server about again, what a 304
// records, and how a refreshed line compares with the one it replaces. The daemon applies them
// (RegionDownload.swift); docs/refresh.md describes the whole refresh.
import Foundation

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

/// Which recorded resources a refresh asks the server about again.
public enum RefreshScope: Sendable, Equatable {
    /// Every resource (`tilespool refresh ID`).
    case all
    /// Resources fetched at least this many seconds ago, or expired by their own headers
    /// (`--max-age`, `--refresh-interval`, `refreshAfter`).
    case olderThan(Double)
    /// Only the tiles recorded as failed (`maxFailedTiles`): the pass a `resume` of a region
    /// completed with failed tiles starts; every other line is kept.
    case failedTiles

    /// The `maxAge` in seconds of `olderThan`, else nil.
    public var maxAge: Double? { if case .olderThan(let s) = self { return s }; return nil }

    /// The scope as written in `refresh/refresh.json`: `{"maxAge": SECONDS or null}`, plus
    /// `"failedTiles": true` for `failedTiles`.
    public var jsonObject: [String: Any] {
        var o: [String: Any] = ["maxAge": maxAge.map { $0 as Any } ?? NSNull()]
        if self == .failedTiles { o["failedTiles"] = true }
        return o
    }

    /// Reads `jsonObject` back (a missing or null `maxAge` is `all`).
    public init(jsonObject o: [String: Any]) {
        if o["failedTiles"] as? Bool == true { self = .failedTiles; return }
        if let v = o["maxAge"], !(v is NSNull), let s = JSONKind.number(v) { self = .olderThan(s); return }
        self = .all
    }
}

/// The pure rules of a refresh.
public enum Refresh {
    /// True when `line` must be checked with the server: always without `maxAge`; with it, when the
    /// resource was fetched `maxAge` seconds ago or longer, when its own expiry (`Cache-Control:
    /// max-age`, `Expires`) has passed, or when its fetch time is unknown (a five-column line).
    /// - Parameters: `maxAge` in seconds; `now` in seconds since 1970, with its fraction (a
    ///   whole-second `now` made a resource fetched late in a second look up to 1 s younger than
    ///   it is, and a refresh due at exactly `maxAge` left it unasked).
    /// A failed tile (`ManifestLine.failed`) is always due; in scope `failedTiles`, only failed
    /// tiles are.
    public static func isDue(_ line: ManifestLine, scope: RefreshScope, now: Double) -> Bool {
        let maxAge: Double
        switch scope {
        case .all: return true
        case .failedTiles: return line.failed
        case .olderThan(let s): maxAge = s
        }
        if line.failed { return true }
        guard let fetched = line.freshness.fetched else { return true }
        if let expires = line.freshness.expires, Double(expires) <= now { return true }
        return now - fetched >= maxAge
    }

    /// `isDue` with `maxAge` in seconds (nil: every resource).
    public static func isDue(_ line: ManifestLine, maxAge: Double?, now: Double) -> Bool {
        isDue(line, scope: maxAge.map { .olderThan($0) } ?? .all, now: now)
    }

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
