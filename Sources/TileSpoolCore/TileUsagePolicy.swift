import Foundation

/// Tile servers whose published usage policy forbids bulk downloading, and the check that refuses
/// them (error code `policyRefused`) unless the daemon was started with `--allow-host HOST` (for
/// people who run or license the server). This file is the whole list; docs/contract.md repeats it.
public enum TileUsagePolicy {
    /// One policy: the hosts it covers (lower-case, exact) and where it is published.
    public struct Entry: Sendable {
        public var hosts: [String]
        public var policyURL: String
        /// What the policy says, in a few words, for the message.
        public var summary: String
    }

    /// The hosts refused, with their policies.
    public static let entries: [Entry] = [
        // "Bulk downloading is strongly discouraged ... downloading significant areas of tiles at
        // zoom levels 17 and higher for offline or later usage is forbidden without prior
        // consultation" (OSMF Tile Usage Policy).
        Entry(hosts: ["tile.openstreetmap.org", "a.tile.openstreetmap.org", "b.tile.openstreetmap.org", "c.tile.openstreetmap.org"],
              policyURL: "https://operations.osmfoundation.org/policies/tiles/",
              summary: "the OpenStreetMap Foundation's tile usage policy forbids bulk downloading for offline use"),
        // Wikimedia's map tiles are for Wikimedia projects (Maps Terms of Use).
        Entry(hosts: ["maps.wikimedia.org"],
              policyURL: "https://foundation.wikimedia.org/wiki/Policy:Maps_Terms_of_Use",
              summary: "the Wikimedia Maps terms of use do not allow bulk downloading by third parties"),
    ]

    /// The host of `url` (a URL or tile template), lower-case, without user info, port or a final
    /// dot; a `{s}`-style placeholder label counts as `a` (so `{s}.tile.openstreetmap.org` is
    /// `a.tile.openstreetmap.org`). Nil when there is no `scheme://host`.
    public static func host(of url: String) -> String? {
        guard let start = url.range(of: "://")?.upperBound else { return nil }
        var authority = url[start...].prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        var host = String(authority)
        if host.hasPrefix("[") { return nil } // an IPv6 literal: in no list
        if let colon = host.lastIndex(of: ":") { host = String(host[..<colon]) }
        host = host.replacingOccurrences(of: #"\{[^}]*\}"#, with: "a", options: .regularExpression).lowercased()
        while host.hasSuffix(".") { host.removeLast() }
        return host.isEmpty ? nil : host
    }

    /// The `policyRefused` error for the first of `urls` whose host is listed and not in
    /// `allowedHosts` (lower-case), or nil. The message names the host, quotes the policy URL and
    /// says how to lift the refusal.
    public static func refusal(urls: [String], allowedHosts: Set<String>) -> RegionError? {
        for url in urls {
            guard let host = host(of: url), !allowedHosts.contains(host),
                  let e = entries.first(where: { $0.hosts.contains(host) }) else { continue }
            return RegionError(code: .policyRefused,
                               message: "\(host): \(e.summary) (\(e.policyURL)); use another tile server or your own, or start the daemon with --allow-host \(host) if you run or license this server",
                               url: url)
        }
        return nil
    }
}
