// Pure pieces of running TileSpool as a service (issue 11): download rates over a moving window
// and the ETA they give, durations as operators write them (`7d`), the Prometheus text exposition
// format, and logfmt (`key=value`) log lines. Values in, values out.
import Foundation

/// Download rates over a moving window of progress samples (monotonic seconds, counts).
///
/// The daemon adds a sample each time it writes a downloading region's status (at most once a
/// second, at least every 5 seconds). The rate is the difference between the newest
/// sample and the newest one at least `span` seconds older (or the oldest kept), divided by the
/// time between them: a moving window, so a rate follows the last `span` seconds, not the average
/// since the start, and the ETA does not sit at 99 % after a slow start.
public struct RateWindow: Sendable, Equatable {
    /// One sample: monotonic time (s) and the progress counts then.
    public struct Sample: Sendable, Equatable {
        public var time: Double
        public var resources: Int
        public var tiles: Int
        public var bytes: Int
    }
    /// Rates in units per second.
    public struct Rates: Sendable, Equatable {
        public var resourcesPerSecond: Double
        public var tilesPerSecond: Double
        public var bytesPerSecond: Double
    }
    /// Length of the window in seconds.
    public let span: Double
    /// No rate until the samples cover at least this many seconds.
    public let minimumSpan: Double
    public private(set) var samples: [Sample] = []

    public init(span: Double = 10, minimumSpan: Double = 2) { self.span = span; self.minimumSpan = minimumSpan }

    /// Forgets every sample (a download starts or resumes: time paused is not counted).
    public mutating func reset() { samples.removeAll() }

    /// Adds a sample; drops the ones no longer needed (all but the newest sample at least `span`
    /// seconds older than this one). A time earlier than the last sample's is ignored.
    public mutating func add(time: Double, progress p: RegionProgress) {
        if let last = samples.last, time < last.time { return }
        samples.append(Sample(time: time, resources: p.resourcesCompleted, tiles: p.tilesCompleted, bytes: p.bytesCompleted))
        while samples.count > 2 && samples[1].time <= time - span { samples.removeFirst() }
    }

    /// The rates over the window, or nil while it covers less than `minimumSpan` seconds.
    public var rates: Rates? {
        guard let first = samples.first, let last = samples.last, last.time - first.time >= minimumSpan else { return nil }
        let dt = last.time - first.time
        return Rates(resourcesPerSecond: Double(max(0, last.resources - first.resources)) / dt,
                     tilesPerSecond: Double(max(0, last.tiles - first.tiles)) / dt,
                     bytesPerSecond: Double(max(0, last.bytes - first.bytes)) / dt)
    }

    /// Seconds until every expected resource is in, at the current rate: nil until it is
    /// meaningful, i.e. while the plan is not exact (`resourcesExpectedIsPrecise` false), while
    /// there is no rate yet, or while nothing moved in the window (rate 0). Rounded up to a second.
    public static func eta(_ p: RegionProgress, _ rates: Rates?) -> Double? {
        guard p.resourcesExpectedIsPrecise, let rates, rates.resourcesPerSecond > 0 else { return nil }
        let left = max(0, p.resourcesExpected - p.resourcesCompleted)
        return (Double(left) / rates.resourcesPerSecond).rounded(.up)
    }
}

/// Durations as operators write them: a number with an optional unit, `s` (default), `m`, `h`,
/// `d` or `w`, e.g. `90`, `90s`, `15m`, `12h`, `7d`, `2w`; decimals allowed (`1.5h`).
public enum DurationText {
    /// The duration in seconds, or nil when `text` is not one (negative, empty, unknown unit).
    public static func seconds(_ text: String) -> Double? {
        let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800]
        var number = Substring(text)
        var factor = 1.0
        if let u = text.last, let f = units[u] { number = number.dropLast(); factor = f }
        guard !number.isEmpty, number.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }),
              let v = Double(number), v.isFinite, v >= 0 else { return nil }
        return v * factor
    }
}

/// Metric families in the Prometheus text exposition format, version 0.0.4
/// (https://prometheus.io/docs/instrumenting/exposition_formats/#text-based-format): for each
/// family a `# HELP` and a `# TYPE` line, then one `name{label="value",...} number` line per sample.
public struct PrometheusText: Sendable {
    /// `counter` or `gauge`.
    public enum Kind: String, Sendable { case counter, gauge }
    private(set) public var text = ""
    public init() {}

    /// Appends one family. Label values are escaped (`\\`, `\"`, `\n`); numbers are written in
    /// the shortest form that reads back the same (integers without a fraction).
    public mutating func family(_ name: String, _ kind: Kind, _ help: String, _ samples: [([(String, String)], Double)]) {
        text += "# HELP \(name) \(help.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\n", with: "\\n"))\n"
        text += "# TYPE \(name) \(kind.rawValue)\n"
        for (labels, value) in samples {
            text += name
            if !labels.isEmpty {
                text += "{" + labels.map { "\($0.0)=\"\(PrometheusText.escape($0.1))\"" }.joined(separator: ",") + "}"
            }
            text += " " + PrometheusText.number(value) + "\n"
        }
    }

    /// One family with a single unlabelled sample.
    public mutating func family(_ name: String, _ kind: Kind, _ help: String, _ value: Double) {
        family(name, kind, help, [([], value)])
    }

    static func escape(_ s: String) -> String {
        var out = ""
        for c in s.unicodeScalars {
            switch c {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.unicodeScalars.append(c)
            }
        }
        return out
    }

    static func number(_ v: Double) -> String {
        if v.isNaN { return "NaN" }
        if v.isInfinite { return v > 0 ? "+Inf" : "-Inf" }
        if v == v.rounded() && abs(v) < 1e15 { return String(Int64(v)) }
        return String(v)
    }
}

/// logfmt: `key=value` pairs separated by spaces, one entry per line (the format journald users
/// and tools such as `lnav` or Grafana Loki's `logfmt` parser read). A value is written bare when
/// it is non-empty and has no space, `"`, `=`, `\` or control character; otherwise in double
/// quotes with `\\`, `\"`, `\n`, `\r`, `\t` and `\u00XX` escapes. So an entry is always one line
/// and a value can never forge another key.
public enum LogFmt {
    /// The entry for `fields`, in their order, without the newline.
    public static func line(_ fields: [(String, String)]) -> String {
        fields.map { "\($0.0)=\(value($0.1))" }.joined(separator: " ")
    }

    /// `s` as a logfmt value (bare or quoted).
    public static func value(_ s: String) -> String {
        let needsQuotes = s.isEmpty || s.unicodeScalars.contains {
            $0 == " " || $0 == "\"" || $0 == "=" || $0 == "\\" || $0.value < 0x20 || $0.value == 0x7F || TerminalText.isInvisibleControl($0)
        }
        guard needsQuotes else { return s }
        var out = "\""
        for u in s.unicodeScalars {
            switch u {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if u.value < 0x20 || u.value == 0x7F || TerminalText.isInvisibleControl(u) {
                    out += String(format: "\\u%04x", u.value)
                } else {
                    out.unicodeScalars.append(u)
                }
            }
        }
        return out + "\""
    }
}
