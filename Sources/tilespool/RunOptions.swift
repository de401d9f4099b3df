import Foundation
import Glibc
import TileSpoolCore
import TileSpoolDaemon
import TileSpoolIO

/// One option of `tilespool run` (and of `get`, for the download options it shares): its name,
/// the value it takes, its lines in `run --help`, and what it sets in `DaemonOptions`. The one
/// place a run option is declared: the parser's option names, `run --help` and the parse all come
/// from `RunOption.all`; docs/contract.md's command-line table is checked against `run --help`
/// (`ContractInStepTests`).
struct RunOption {
    /// `--name`.
    let name: String
    /// What the value is called in the help (`N`, `SECONDS`, `BYTES`, `PATH`, ...).
    let value: String
    /// The help text, one string per line, without indentation.
    let help: [String]
    /// Reads the option from `a` (when given, or its default) into `o`.
    /// - Throws: `UsageError` for a value out of range.
    let apply: @Sendable (Arguments, inout DaemonOptions) throws -> Void

    init(_ name: String, _ value: String, _ help: [String], apply: @escaping @Sendable (Arguments, inout DaemonOptions) throws -> Void) {
        self.name = name; self.value = value; self.help = help; self.apply = apply
    }

    /// An option `Locations` reads (the spool, the store and its S3 settings), listed for the help.
    static func location(_ name: String, _ value: String, _ help: String) -> RunOption {
        RunOption(name, value, [help]) { _, _ in }
    }

    /// Column of the help text in `run --help`.
    static let helpColumn = 34

    /// The option's lines of `run --help`: `  --name VALUE` padded to `helpColumn`, the text, and
    /// further lines indented to it; a name too long for the column gets the text on the next line.
    var helpText: String {
        let head = "  \(name) \(value)"
        let indent = String(repeating: " ", count: RunOption.helpColumn)
        var lines: [String]
        if head.count < RunOption.helpColumn {
            lines = [head + String(repeating: " ", count: RunOption.helpColumn - head.count) + help[0]]
        } else {
            lines = [head, indent + help[0]]
        }
        lines += help.dropFirst().map { indent + $0 }
        return lines.joined(separator: "\n")
    }

    /// Applies every option of `options` given in `a` to `o`, in the table's order.
    /// - Throws: `UsageError` for the first value out of range.
    static func apply(_ options: [RunOption], _ a: Arguments, to o: inout DaemonOptions) throws {
        for option in options { try option.apply(a, &o) }
    }

    /// The options of the table named `names`, in the table's order (for `get`, which shares some).
    static func named(_ names: Set<String>) -> [RunOption] { all.filter { names.contains($0.name) } }

    /// Every option of `tilespool run`, in the order of `run --help`.
    static let all: [RunOption] = [
        location("--spool", "DIR", "spool folder (default ./spool)"),
        location("--store", "DIR", "store folder (default <spool>/store), or s3://BUCKET[/PREFIX]"),
        location("--s3-endpoint", "URL", "the S3 endpoint (else AWS_ENDPOINT_URL; docs/s3.md)"),
        location("--s3-addressing", "path|virtual", "S3 path-style URLs (default) or virtual-hosted ones"),
        RunOption("--max-active-regions", "N", ["regions downloading at once (default 2)"]) { a, o in
            o.maxActiveRegions = try a.int("--max-active-regions", default: o.maxActiveRegions, range: 1...1000)
        },
        RunOption("--max-requests-per-region", "N", ["requests in flight per region (default 8)"]) { a, o in
            o.maxRequestsPerRegion = try a.int("--max-requests-per-region", default: o.maxRequestsPerRegion, range: 1...1000)
        },
        RunOption("--max-connections", "N", ["connections open at once, all hosts (default 16)"]) { a, o in
            o.http.maxConnections = try a.int("--max-connections", default: o.http.maxConnections, range: 1...10000)
        },
        RunOption("--max-connections-per-host", "N", ["connections to one host (default 8)"]) { a, o in
            o.http.maxConnectionsPerHost = try a.int("--max-connections-per-host", default: o.http.maxConnectionsPerHost, range: 1...10000)
        },
        RunOption("--max-tiles", "N", ["largest plan accepted, in tiles (default 1000000)"]) { a, o in
            o.maxTiles = try a.int("--max-tiles", default: o.maxTiles, range: 0...Int.max)
        },
        RunOption("--max-object-size", "BYTES", ["largest body accepted, after decoding (default 33554432, 32 MiB);",
                                                 "also what a gzip-file body may inflate to in request exports"]) { a, o in
            o.http.maxObjectSize = try a.int("--max-object-size", default: o.http.maxObjectSize, range: 1...(1 << 34))
        },
        RunOption("--max-retries", "N", ["retries of a transient failure (default 5)"]) { a, o in
            o.maxRetries = try a.int("--max-retries", default: o.maxRetries, range: 0...100)
        },
        RunOption("--retry-delay", "SECONDS", ["first retry delay, doubling up to 30 s (default 1; at most 3600)"]) { a, o in
            o.retryDelay = try a.seconds("--retry-delay", default: o.retryDelay, maximum: 3600)
        },
        RunOption("--max-probe-interval", "SECONDS", ["longest gap between probes while pausedNetwork (default 60;",
                                                        "0.5 to 86400)"]) { a, o in
            o.maxProbeInterval = try a.seconds("--max-probe-interval", default: o.maxProbeInterval, minimum: 0.5, maximum: 86400)
        },
        // libcurl takes the three timeouts as integers (milliseconds or seconds): a day at most,
        // so none can fail to convert (9.3e18 once crashed the daemon at its first transfer).
        RunOption("--connect-timeout", "SECONDS", ["time allowed to connect (default 10; at most 86400;",
                                                   "0: libcurl's own, 300)"]) { a, o in
            o.http.connectTimeout = try a.seconds("--connect-timeout", default: o.http.connectTimeout, maximum: HTTPOptions.maximumTimeout)
        },
        RunOption("--low-speed-time", "SECONDS", ["abort a transfer below 1 byte/s for this long (default 30;",
                                                  "at most 86400; 0: no low-speed limit)"]) { a, o in
            o.http.lowSpeedTime = Int(try a.seconds("--low-speed-time", default: Double(o.http.lowSpeedTime), maximum: HTTPOptions.maximumTimeout).rounded(.up))
        },
        RunOption("--transfer-timeout", "SECONDS", ["abort a transfer (redirects included) not finished after this",
                                                    "long, retried like a network timeout (default 300; at most",
                                                    "86400; 0: none)"]) { a, o in
            o.http.transferTimeout = try a.seconds("--transfer-timeout", default: o.http.transferTimeout, maximum: HTTPOptions.maximumTimeout)
        },
        RunOption("--sync-interval", "SECONDS", ["how often downloaded objects are synced and recorded (default 1;",
                                                   "0.01 to 3600)"]) { a, o in
            o.syncInterval = try a.seconds("--sync-interval", default: o.syncInterval, minimum: 0.01, maximum: 3600)
        },
        RunOption("--rescan-interval", "SECONDS", ["how often requests/ and control/ are rescanned for what no",
                                                   "inotify event announced (default 5; 0.1 to 3600)"]) { a, o in
            // One message for every value out of range (below 0.1: a rescan every turn of the loop).
            guard let rescan = try? a.seconds("--rescan-interval", default: o.rescanInterval, maximum: 3600), rescan >= 0.1 else {
                throw UsageError("--rescan-interval must be a number of seconds from 0.1 to 3600")
            }
            o.rescanInterval = rescan
        },
        RunOption("--settle-time", "SECONDS", ["how long a file a rescan finds must go unmodified when no read",
                                               "lease can tell that a writer has closed it (default 3; at most 3600)"]) { a, o in
            o.settleTime = try a.seconds("--settle-time", default: o.settleTime, maximum: 3600)
        },
        RunOption("--refresh-interval", "SECONDS", ["refresh every completed region this long after its last",
                                                    "download or refresh, checking resources at least that old",
                                                    "(default: never; 1 to 315360000; a request's refreshAfter wins)"]) { a, o in
            // At least a second: 0 refreshed every completed region at every rescan (attack round 10).
            if a.options["--refresh-interval"] != nil { o.refreshInterval = try a.seconds("--refresh-interval", default: 0, minimum: 1, maximum: 315_360_000) }
        },
        RunOption("--log-format", "logfmt|json", ["log entries as key=value pairs (default) or JSON objects, one per line"]) { a, _ in
            if let f = a.options["--log-format"] {
                guard let format = Log.Format(rawValue: f) else { throw UsageError("--log-format must be logfmt or json") }
                Log.format = format
            }
        },
        RunOption("--metrics-file", "PATH", ["write Prometheus metrics to PATH (atomically) for node_exporter's",
                                             "textfile collector"]) { a, o in
            guard let m = a.options["--metrics-file"] else { return }
            let folder = Files.split(m).parent
            guard !m.isEmpty, Files.entryType(folder) == .directory else {
                throw UsageError("--metrics-file: the folder of \(m) does not exist")
            }
            o.metricsFile = m
        },
        RunOption("--metrics-interval", "SECONDS", ["how often the metrics file is written (default 5; 0.1 to 86400)"]) { a, o in
            o.metricsInterval = try a.seconds("--metrics-interval", default: o.metricsInterval, minimum: 0.1, maximum: 86400)
        },
        RunOption("--on-state-change", "PATH", ["run the executable PATH (no shell) on every state change with",
                                                "arguments ID STATE STATUS-PATH and TILESPOOL_* variables"]) { a, o in
            guard let h = a.options["--on-state-change"] else { return }
            guard h.contains("/") else { throw UsageError("--on-state-change needs a path to an executable (no PATH search, no shell)") }
            guard access(h, X_OK) == 0, Files.entryType(h) != .directory else { throw UsageError("--on-state-change: \(h) is not an executable file") }
            o.onStateChange = h
        },
        RunOption("--hook-timeout", "SECONDS", ["kill a hook still running after this long (default 30; 0.1 to 86400)"]) { a, o in
            o.hookTimeout = try a.seconds("--hook-timeout", default: o.hookTimeout, minimum: 0.1, maximum: 86400)
        },
        RunOption("--max-store-bytes", "BYTES", ["store quota: a download that would pass it goes failedStorage"]) { a, o in
            if a.options["--max-store-bytes"] != nil { o.maxStoreBytes = try a.int("--max-store-bytes", default: 0, range: 1...Int.max) }
        },
        RunOption("--events-max-bytes", "BYTES", ["rotate events.jsonl before it passes this size (default 67108864,",
                                                  "64 MiB; 0 never rotates)"]) { a, o in
            o.eventsMaxBytes = try a.int("--events-max-bytes", default: o.eventsMaxBytes)
        },
        RunOption("--events-keep", "N", ["rotated files kept, events.jsonl.1 ... events.jsonl.N (default 5)"]) { a, o in
            o.eventsKeep = try a.int("--events-keep", default: o.eventsKeep, range: 0...1000)
        },
        RunOption("--user-agent", "TEXT", ["the User-Agent sent (default \"TileSpool/VERSION (+PROJECT URL)\")"]) { a, o in
            guard let ua = a.options["--user-agent"] else { return }
            guard !ua.isEmpty, ua.utf8.count <= 512, !ua.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }) else {
                throw UsageError("--user-agent must be 1 to 512 printable characters")
            }
            o.http.userAgent = ua
        },
        RunOption("--max-requests-per-second-per-host", "N", ["requests started per second to one host, all regions together",
                                                              "(default 10 for remote hosts, none for loopback; given, it",
                                                              "applies to every host; 0.01 to 100000, 0: no limit)"]) { a, o in
            guard a.options["--max-requests-per-second-per-host"] != nil else { return }
            // Given: it applies to every host, loopback included; 0 lifts the default limit.
            guard let n = try? a.number("--max-requests-per-second-per-host"), n == 0 || (0.01...100_000).contains(n) else {
                throw UsageError("--max-requests-per-second-per-host must be a number of requests per second from 0.01 to 100000 (0: no limit)")
            }
            o.rateLimits.perHost = n > 0 ? n : nil
            o.rateLimits.perHostAppliesToLoopback = true
        },
        RunOption("--max-bytes-per-second", "BYTES", ["bodies received per second, all hosts together (default: no limit)"]) { a, o in
            if a.options["--max-bytes-per-second"] != nil {
                o.rateLimits.bytesPerSecond = Double(try a.int("--max-bytes-per-second", default: 0, range: 1024...Int.max))
            }
        },
        RunOption("--allow-host", "HOST", ["accept HOST although its tile usage policy forbids bulk",
                                           "downloading (you run or license it); repeatable"]) { a, o in
            for h in a.allValues["--allow-host"] ?? [] {
                let host = h.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "."))
                // A DNS name (RFC 1123): letters, digits, '-' and '.', at most 253 characters.
                guard !host.isEmpty, host.utf8.count <= 253,
                      host.utf8.allSatisfy({ ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D || $0 == 0x2E }) else {
                    throw UsageError("--allow-host takes a host name such as tile.openstreetmap.org, not '\(h)'")
                }
                o.allowedHosts.insert(host)
            }
        },
    ]
}
