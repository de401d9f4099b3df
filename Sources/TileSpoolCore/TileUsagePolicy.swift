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

    /// The host of `url`, lower-case, without user info, port or a final dot; nil when there is
    /// no `scheme://host`. Template tokens are left as written (`{s}.tile.openstreetmap.org`): a
    /// template's hosts are those of its expansions (`hosts(of:)`).
    public static func host(of url: String) -> String? {
        if let inner = PMTiles.innerURL(url) { return host(of: inner) } // a PMTiles source: the archive's host
        guard let start = url.range(of: "://")?.upperBound else { return nil }
        var authority = url[start...].prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        var host = String(authority)
        if host.hasPrefix("[") { return nil } // an IPv6 literal: in no list
        if let colon = host.lastIndex(of: ":") { host = String(host[..<colon]) }
        return normalized(host)
    }

    /// `host` percent-decoded (RFC 3986 section 3.2.2 lets a host name be written `tile%2eexample`,
    /// and libcurl decodes it before resolving), lower-case, without final dots; nil when
    /// nothing is left.
    static func normalized(_ host: String) -> String? {
        var host = (host.removingPercentEncoding ?? host).lowercased()
        while host.hasSuffix(".") { host.removeLast() }
        return host.isEmpty ? nil : host
    }

    /// Every host a tile of `template` can be fetched from, as far as the template says: the host
    /// of each of its `subdomainExpansions` (every value `{s}` takes, `{ratio}` filled in) and,
    /// where a token other than those stands in the host, that host with the tokens deleted too
    /// (`{quadkey}` is empty at zoom 0). Lower-case, without duplicates.
    public static func hosts(of template: TileURLTemplate) -> [String] {
        var out: [String] = []
        for url in template.subdomainExpansions {
            var candidates = [host(of: url)]
            if let h = candidates[0], h.contains("{") {
                candidates.append(normalized(h.replacingOccurrences(of: #"\{[^}]*\}"#, with: "", options: .regularExpression)))
            }
            for case let h? in candidates where !out.contains(h) { out.append(h) }
        }
        return out
    }

    /// The `policyRefused` error for the first of `templates` with a host (`hosts(of:)`, so every
    /// expansion of `{s}` with the template's subdomains) that is listed and not in
    /// `allowedHosts` (lower-case), or nil. The message names the host, quotes the policy URL and
    /// says how to lift the refusal; `url` is the template as given.
    public static func refusal(templates: [TileURLTemplate], allowedHosts: Set<String>) -> RegionError? {
        for template in templates {
            for host in hosts(of: template) {
                if let e = refusal(host: host, url: template.template, allowedHosts: allowedHosts) { return e }
            }
        }
        return nil
    }

    /// `refusal(templates:allowedHosts:)` for URLs or tile templates given as text, `{s}` taking
    /// each of `subdomains` (a request's `subdomains`; Leaflet's `a`, `b`, `c` by default).
    public static func refusal(urls: [String], subdomains: [String] = TileURLTemplate.defaultSubdomains,
                               allowedHosts: Set<String>) -> RegionError? {
        refusal(templates: urls.map { TileURLTemplate($0, subdomains: subdomains) }, allowedHosts: allowedHosts)
    }

    /// The `policyRefused` error for the first URL `plan` fetches on a listed host not in
    /// `allowedHosts`, or nil: its tile templates (`refusal(templates:allowedHosts:)`) and every
    /// other resource (style, TileJSON, sprites, glyphs, GeoJSON or image data), judged by
    /// `refusal(urls:allowedHosts:)` like a request's own URLs. A style's plan is known before
    /// anything but the style and TileJSON is fetched, so nothing is asked of such a host.
    public static func refusal(plan: ResourcePlan, allowedHosts: Set<String>) -> RegionError? {
        if let e = refusal(templates: plan.tileSets.map(\.template), allowedHosts: allowedHosts) { return e }
        // Hundreds of glyph ranges share a host: each host is judged once, by its first URL.
        var seen = Set<String>(), urls: [String] = []
        for r in plan.resources where seen.insert(host(of: r.url) ?? r.url).inserted { urls.append(r.url) }
        return refusal(urls: urls, allowedHosts: allowedHosts)
    }

    /// The `policyRefused` error for the first TileJSON URL of `style` on a listed host not in
    /// `allowedHosts`, or nil (`refusal(urls:allowedHosts:)`): checked as soon as the style is
    /// known, before its TileJSON documents are fetched (the rest of what a style names is
    /// checked with its plan, `refusal(plan:allowedHosts:)`).
    public static func refusal(style: StyleDocument, allowedHosts: Set<String>) -> RegionError? {
        refusal(urls: Planner.tileJSONURLs(style).map(\.url) + style.sources.compactMap(\.archiveURL), allowedHosts: allowedHosts)
    }

    /// The `policyRefused` error when `host` (any case, a final dot ignored: e.g. the host libcurl
    /// parsed from a redirect's target) is listed and not in `allowedHosts`, or nil. `url` is the
    /// URL the error names.
    public static func refusal(host: String, url: String, allowedHosts: Set<String>) -> RegionError? {
        guard let host = normalized(host), !allowedHosts.contains(host),
              let e = entries.first(where: { $0.hosts.contains(host) }) else { return nil }
        return RegionError(code: .policyRefused,
                           message: "\(host): \(e.summary) (\(e.policyURL)); use another tile server or your own, or start the daemon with --allow-host \(host) if you run or license this server",
                           url: url)
    }
}

extension TileURLTemplate {
    /// The template once per value of `{s}`: `{s}` replaced by each of `subdomains` in turn (in
    /// order, duplicates dropped) and `{ratio}` by `ratio`, as `url(for:)` replaces them; every
    /// other token kept as written. One element when there is no `{s}`. Used by the tile usage
    /// policy (`TileUsagePolicy.hosts(of:)`): a template is judged by every host it expands to,
    /// never by a guess (`https://{s}/...` with `subdomains: ["tile.openstreetmap.org"]` is that host).
    public var subdomainExpansions: [String] {
        let parts = TileURLTemplate.parse(template)
        let values = parts.contains(.subdomain) ? subdomains : [""]
        var out: [String] = []
        for value in values {
            var s = ""
            for p in parts {
                switch p {
                case .text(let x): s += x
                case .subdomain: s += value
                case .ratio: s += ratio
                default: s += TileURLTemplate.tokens.first { $0.1 == p }?.0 ?? ""
                }
            }
            if !out.contains(s) { out.append(s) }
        }
        return out
    }
}
