import Foundation

/// The request and bandwidth limits of a polite client, as values (docs/contract.md, "Rate
/// limits"):
/// - per host, across every region of the daemon: at most `perHost` requests per second
///   (`--max-requests-per-second-per-host`); by default only remote hosts are limited, loopback is not;
/// - per region and host: at most the request's `maxRequestsPerSecond`;
/// - all hosts together: at most `bytesPerSecond` bytes of bodies per second (`--max-bytes-per-second`).
///
/// Request limits are token buckets of depth one (Leaky bucket as a meter, RFC 2697's single rate
/// with a committed burst of one request): requests to one host start at least `1 / rate` seconds
/// apart, so any one-second window holds at most `floor(rate) + 1` of them. The byte limit is a
/// bucket of one second's worth of bytes, debited when a body arrives: new requests wait while it
/// is empty, so the rate averaged over a few seconds stays at the limit (transfers already under
/// way can overshoot it by their own size). Pure: time is passed in (seconds, any monotonic origin).
public struct RateLimiter: Sendable {
    /// The daemon's per-host limit in requests per second; nil: none.
    public var perHost: Double?
    /// True when `perHost` applies to loopback hosts as well (the option was given); false for the
    /// default, which spares `localhost`, `127.0.0.0/8` and `::1`.
    public var perHostAppliesToLoopback: Bool
    /// The daemon-wide limit on body bytes per second; nil: none.
    public var bytesPerSecond: Double?

    /// The per-host limit used when `--max-requests-per-second-per-host` is not given, for remote hosts.
    public static let defaultPerHost = 10.0

    /// Earliest start time of the next request per bucket key (a host, or `region\u{0}host`).
    private var nextStart: [String: Double] = [:]
    /// Bytes that may still be received now (at most one second's worth); negative: in debt.
    private var byteAllowance = 0.0
    private var byteTime: Double?

    public init(perHost: Double? = RateLimiter.defaultPerHost, perHostAppliesToLoopback: Bool = false, bytesPerSecond: Double? = nil) {
        self.perHost = perHost; self.perHostAppliesToLoopback = perHostAppliesToLoopback; self.bytesPerSecond = bytesPerSecond
    }

    /// True when no limit can apply to a request to `host` without a region limit (the fast path).
    public func isUnlimited(host: Substring) -> Bool {
        bytesPerSecond == nil && hostLimit(host) == nil
    }

    /// The per-host limit that applies to `host` (requests per second), nil when none does.
    private func hostLimit(_ host: Substring) -> Double? {
        (perHost != nil && (perHostAppliesToLoopback || !RateLimiter.isLoopback(host))) ? perHost : nil
    }

    /// The bucket keys of `host` and of region `region` at `host`.
    private static func keys(_ host: Substring, _ region: String) -> (host: String, region: String) {
        (String(host), region + "\u{0}" + host)
    }

    /// Asks to start one request to `host` for region `region`, whose own limit is `regionLimit`
    /// requests per second (nil: none), at time `now` (seconds).
    /// - Returns: 0 when the request may start now (the buckets are debited), else the seconds to
    ///   wait before asking again (nothing is debited).
    public mutating func admit(host: Substring, region: String, regionLimit: Double?, now: Double) -> Double {
        var wait = 0.0
        let key = RateLimiter.keys(host, region)
        if hostLimit(host) != nil, let t = nextStart[key.host] { wait = max(wait, t - now) }
        if regionLimit != nil, let t = nextStart[key.region] { wait = max(wait, t - now) }
        if let rate = bytesPerSecond {
            refill(rate, now)
            if byteAllowance < 0 { wait = max(wait, -byteAllowance / rate) }
        }
        guard wait <= 0 else { return wait }
        charge(host: host, region: region, regionLimit: regionLimit, now: now)
        return 0
    }

    /// The least time in seconds between two requests to `host` of a region whose own limit is
    /// `regionLimit` under the request limits (not the byte limit); 0 when none applies. For
    /// requests paced away from the limiter (a PMTiles archive's directories, read off the loop).
    public func interval(host: Substring, regionLimit: Double?) -> Double {
        max(hostLimit(host).map { 1 / $0 } ?? 0, regionLimit.map { 1 / $0 } ?? 0)
    }

    /// Counts a request to `host` for region `region` that started at `at` (seconds, the same
    /// clock as `now`) without asking, paced by itself (`interval`): the next request waits its
    /// turn from then, as if it had been admitted then.
    public mutating func record(host: Substring, region: String, regionLimit: Double?, at: Double) {
        let key = RateLimiter.keys(host, region)
        if let rate = hostLimit(host) { nextStart[key.host] = max(nextStart[key.host] ?? 0, at + 1 / rate) }
        if let rate = regionLimit { nextStart[key.region] = max(nextStart[key.region] ?? 0, at + 1 / rate) }
    }

    /// Counts one request to `host` for region `region` at `now` without asking (`admit`'s
    /// debit): a bucket already in debt goes further into it, so the requests after it wait that
    /// much longer. For a request that waits its turn elsewhere (the first directory request of
    /// a PMTiles archive, which waits off the loop: `Daemon.startArchiveReads`).
    public mutating func charge(host: Substring, region: String, regionLimit: Double?, now: Double) {
        let key = RateLimiter.keys(host, region)
        if let rate = hostLimit(host) { nextStart[key.host] = max(now, nextStart[key.host] ?? now) + 1 / rate }
        if let rate = regionLimit { nextStart[key.region] = max(now, nextStart[key.region] ?? now) + 1 / rate }
    }

    /// Records `bytes` of body received at `now` against the byte limit.
    public mutating func received(bytes: Int, now: Double) {
        guard let rate = bytesPerSecond else { return }
        refill(rate, now)
        byteAllowance -= Double(bytes)
    }

    /// Forgets every bucket whose turn has come by `now` (one that has is the same as none), so
    /// the table does not grow with every region: called when a region stops. A bucket still in
    /// debt (a request charged, a low `maxRequestsPerSecond`) is kept, so a pause and resume
    /// cannot skip its wait (attack round 8: each pause-resume bought one more request at once).
    public mutating func forgetPast(now: Double) {
        nextStart = nextStart.filter { $0.value > now }
    }

    private mutating func refill(_ rate: Double, _ now: Double) {
        if let t = byteTime { byteAllowance = min(rate, byteAllowance + (now - t) * rate) } else { byteAllowance = rate }
        byteTime = now
    }

    /// The host of an absolute URL, lower-cased by the caller when needed: the bytes between
    /// `://` (after any `user@`) and the next `/`, `?` or `#`, without the port. Cheap: no URL parsing.
    public static func host(of url: String) -> Substring {
        // One pass over the UTF-8 bytes (called once per request); the offsets found are ASCII
        // positions, so they are also valid String indices.
        var url = url
        let (from, to) = url.withUTF8 { u -> (Int, Int) in
            let n = u.count
            var i = 0
            // After "://": the authority runs to the next "/", "?" or "#".
            while i < n, u[i] != UInt8(ascii: ":") { i += 1 }
            guard i + 2 < n, u[i + 1] == UInt8(ascii: "/"), u[i + 2] == UInt8(ascii: "/") else { return (0, 0) }
            var start = i + 3, end = start
            while end < n, u[end] != UInt8(ascii: "/"), u[end] != UInt8(ascii: "?"), u[end] != UInt8(ascii: "#") {
                if u[end] == UInt8(ascii: "@") { start = end + 1 }
                end += 1
            }
            var j = start
            if j < end, u[j] == UInt8(ascii: "[") {
                while j < end, u[j] != UInt8(ascii: "]") { j += 1 }
                return (start, j < end ? j + 1 : end)
            }
            while j < end, u[j] != UInt8(ascii: ":") { j += 1 }
            return (start, j)
        }
        let u = url.utf8
        return url[u.index(u.startIndex, offsetBy: from)..<u.index(u.startIndex, offsetBy: to)]
    }

    /// True for `localhost`, an IPv4 address in 127.0.0.0/8 and `[::1]`.
    public static func isLoopback(_ host: Substring) -> Bool {
        let h = host.lowercased()
        let octets = h.split(separator: ".", omittingEmptySubsequences: false)
        return h == "localhost" || h.hasSuffix(".localhost") || h == "[::1]" || h == "::1"
            || (octets.count == 4 && octets[0] == "127" && octets.allSatisfy { UInt8($0) != nil })
    }
}

/// The daemon's budget of range bodies held at once (bytes; ranges of PMTiles archives asked and
/// not yet answered, and answers not yet cut and stored), shared by the downloading regions in
/// turns: one pass of the scheduler offers it to the regions in order (least recently served
/// first), and once one region's next range does not fit, no region after it in that pass may
/// take the room that frees up, so a region whose ranges are large is not passed over for ever
/// by one whose smaller ranges keep the budget nearly full. A region asks for no more once it
/// holds its share (`limit` over the regions asking for ranges), so a region whose server is
/// slow does not end up holding the whole budget while a faster one waits. One range
/// is always allowed when none is held, however large, so the budget never deadlocks. Pure: the
/// bytes held are passed in.
public struct RangeBudget: Sendable {
    /// The most bytes of range bodies held at once (`Daemon.maxRangeBytesHeld`).
    public let limit: UInt64
    /// Bytes held now, including the ranges taken in this pass.
    public private(set) var held: UInt64
    /// What one region may hold before it asks for no more range: `limit` over the regions
    /// asking for ranges.
    public let share: UInt64
    /// True once a region's range did not fit in this pass: later regions wait their turn.
    public private(set) var aRegionWaits = false

    /// - Parameters:
    ///   - limit: the most bytes held at once.
    ///   - held: the bytes held when the pass begins.
    ///   - regions: how many regions ask for ranges (hold some, or have some left to ask).
    public init(limit: UInt64, held: UInt64, regions: Int = 1) {
        self.limit = limit
        self.held = held
        share = limit / UInt64(max(1, regions))
    }

    /// True when a range of `size` bytes may be asked now. False when it does not fit, when a
    /// region before this one in the pass is waiting for room (a range that does not fit marks
    /// its region as waiting), or when the region already holds `own` bytes, its `share` or
    /// more (that region only: the others may take the room). So a region holds at most its
    /// share plus one range, and the budget is used whole. Call `take` once the range is asked.
    /// - Parameter own: the bytes of range bodies the asking region holds now.
    public mutating func mayAsk(_ size: UInt64, own: UInt64 = 0) -> Bool {
        if aRegionWaits { return false }
        if own > 0 && own >= share { return false }
        if held > 0 && held + size > limit { aRegionWaits = true; return false }
        return true
    }

    /// Counts a range of `size` bytes as held (after `mayAsk` allowed it and the range was asked).
    public mutating func take(_ size: UInt64) { held += size }
}
