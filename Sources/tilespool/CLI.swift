import Foundation
import Glibc
import TileSpoolCore
import TileSpoolDaemon
import TileSpoolIO

/// Command-line arguments split into options and positional arguments. Options may come before or
/// after positional arguments; `--name value` and `--name=value` are both accepted; `--` ends options.
struct Arguments {
    var options: [String: String] = [:]
    /// Every value of each valued option, in order (for repeatable options such as `--allow-host`).
    var allValues: [String: [String]] = [:]
    var flags: Set<String> = []
    var positionals: [String] = []

    /// Parses `args` given which option names are boolean flags and which take a value.
    /// - Throws: `UsageError` for an unknown option or a missing value.
    init(_ args: [String], flags known: Set<String>, valued: Set<String>) throws {
        var i = 0
        var onlyPositionals = false
        while i < args.count {
            let a = args[i]
            i += 1
            if onlyPositionals || !a.hasPrefix("-") || a == "-" { positionals.append(a); continue }
            if a == "--" { onlyPositionals = true; continue }
            var name = a, value: String?
            if let eq = a.firstIndex(of: "=") { name = String(a[..<eq]); value = String(a[a.index(after: eq)...]) }
            if name == "-h" { name = "--help" }
            if known.contains(name) {
                if value != nil { throw UsageError("\(name) takes no value") }
                flags.insert(name)
            } else if valued.contains(name) {
                if value == nil {
                    guard i < args.count else { throw UsageError("\(name) needs a value") }
                    value = args[i]; i += 1
                }
                options[name] = value
                allValues[name, default: []].append(value!)
            } else {
                throw UsageError("unknown option \(a)")
            }
        }
    }

    func int(_ name: String, default d: Int, range: ClosedRange<Int> = 0...Int.max) throws -> Int {
        guard let s = options[name] else { return d }
        guard let v = Int(s), range.contains(v) else { throw UsageError("\(name) must be an integer in \(range.lowerBound)...\(range.upperBound)") }
        return v
    }

    /// The value of option `name` as a number of seconds, or `d` when it is not given.
    /// - Parameter maximum: the largest value accepted (for a time handed to libcurl as an
    ///   integer of milliseconds: a larger one would not convert); nil: any finite number.
    /// - Throws: `UsageError` (exit status 2) for anything but a finite number from 0 to `maximum`.
    func seconds(_ name: String, default d: Double, minimum: Double = 0, maximum: Double? = nil) throws -> Double {
        guard options[name] != nil else { return d }
        guard let v = try? number(name), v >= minimum, v <= (maximum ?? .greatestFiniteMagnitude) else {
            throw UsageError(maximum.map { "\(name) must be a number of seconds from \(String(format: "%g", minimum)) to \(String(format: "%g", $0))" } ?? "\(name) must be a number of seconds")
        }
        return v
    }

    /// The value of option `name` as a finite decimal number of at least 0 (`1`, `0.5`, `2e3`).
    /// - Throws: `UsageError` when it is not given or is anything else (`Double` alone would also
    ///   read hexadecimal, `0x10`, and `inf`: attack round 9).
    func number(_ name: String) throws -> Double {
        guard let s = options[name] else { throw UsageError("\(name) needs a value") }
        let decimal = !s.isEmpty && s.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2E || $0 == 0x65 || $0 == 0x45 || $0 == 0x2B || $0 == 0x2D }
        guard decimal, let v = Double(s), v >= 0, v.isFinite else { throw UsageError("\(name) must be a number") }
        return v
    }
}

/// A mistake in the command line: printed with a hint to use --help; exit status 2.
struct UsageError: Error { var message: String; init(_ m: String) { message = m } }

/// Where the spool and the store are, from `--spool DIR` (default `./spool`) and `--store DIR`
/// or `--store s3://BUCKET[/PREFIX]` (default `<spool>/store`), with `--s3-endpoint URL` and
/// `--s3-addressing path|virtual` for an S3 store. Every subcommand takes them, the same way.
struct Locations {
    var spool: String
    var store: String
    var s3Endpoint: String?
    var s3PathStyle = true
    init(_ a: Arguments) throws {
        spool = a.options["--spool"] ?? "./spool"
        store = a.options["--store"] ?? (spool + "/store")
        s3Endpoint = a.options["--s3-endpoint"]
        if let s = a.options["--s3-addressing"] {
            guard s == "path" || s == "virtual" else { throw UsageError("--s3-addressing must be path or virtual") }
            s3PathStyle = s == "path"
        }
        if s3Endpoint != nil && !StoreSpec.isS3(store) { throw UsageError("--s3-endpoint goes with --store s3://BUCKET[/PREFIX]") }
    }
    var isS3: Bool { StoreSpec.isS3(store) }

    /// Opens the store (the disk store, or S3 with the endpoint and the credentials of the
    /// environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION).
    /// - Throws: `CommandFailure` naming what is missing.
    func openStore() throws -> any TileStore {
        do { return try StoreSpec.open(store, endpoint: s3Endpoint, pathStyle: s3PathStyle, scratch: spool + "/scratch") } catch let e as S3Error {
            throw CommandFailure(e.message)
        }
    }
    var layout: SpoolLayout { SpoolLayout(root: spool) }

    /// Fails (exit 1) unless the spool exists: a mistyped --spool must not look like an empty one.
    func requireSpool() throws {
        guard Files.entryType(spool + "/status") == .directory || Files.entryType(spool + "/requests") == .directory else {
            throw CommandFailure("no spool at \(spool) (no status/ or requests/ folder; is --spool right?)")
        }
    }

    /// Fails (exit 1) unless the store exists.
    func requireStore() throws {
        if isS3 { return } // the first request tells (a clear S3 error naming the bucket)
        guard StoreSpec.looksLikeStore(store) else {
            throw CommandFailure("no store at \(store) (no regions/, packs/ or objects/ folder; is --store right?)")
        }
    }
}

let commonValued: Set<String> = ["--spool", "--store", "--s3-endpoint", "--s3-addressing"]
let commonFlags: Set<String> = ["--help"]

/// Prints a line on standard output (`out`) or error (`err`). Part of what commands print comes
/// from servers and styles: control characters are written escaped (`TerminalText.safe`), so no
/// answer can drive the terminal.
func out(_ s: String) { FileHandle.standardOutput.write(Data((TerminalText.safe(s) + "\n").utf8)) }
func err(_ s: String) { FileHandle.standardError.write(Data((TerminalText.safe(s) + "\n").utf8)) }
/// Prints a JSON document on standard output: valid JSON, with what a terminal would act on
/// written as JSON escapes (`TerminalText.safeJSON`), not as `out`'s Swift-style escapes.
func outJSON(_ json: Data) { FileHandle.standardOutput.write(Data((TerminalText.safeJSON(String(decoding: json, as: UTF8.self)) + "\n").utf8)) }

let mainHelp = """
usage: tilespool <command> [options] [arguments]

TileSpool downloads map regions for offline use into a content-addressed store, driven by a
watch folder. Drop a request JSON into <spool>/requests/ (or 'tilespool submit') and read
<spool>/status/<id>.state; or do it all in one command with 'tilespool get'.

commands:
  run                      run the daemon in the foreground on the spool
  status [ID] [--json]     print every region (or one) with state, progress, rate, ETA and error
                           (--watch: redraw every second until no region is still moving)
  pause ID                 pause a queued or downloading region
  resume ID                resume a paused, failed or cancelled region
  cancel ID                cancel a region (its data stays until delete)
  delete ID                stop a region and remove its status and manifest
  refresh ID [--max-age S] re-check a completed region with conditional requests
                           (these five ask the running daemon; --wait waits for its answer)
  gc                       remove objects no region references (safe beside a running daemon)
  prune                    delete finished regions when asked (--older-than, --state), and old
                           rejected files
  verify [--repair]        re-hash every object and check every manifest
  plan REQUEST.json        print what a request would download, without downloading it
                           (--estimate: its bytes as an interval, from a small sample)
  submit REQUEST.json      check a request as plan does and write it into requests/ atomically
                           (--wait: follow it to its end; exit status says how it ended)
  get REQUEST.json --output PATH
                           the whole job in the foreground, no daemon needed: plan, download
                           (Ctrl-C, then the same command, goes on), export (.mbtiles, .pmtiles,
                           .db, or a folder for site)
  export ID --format F     write a completed region as maplibre, mbtiles, pmtiles or a site
                           (--bounds, --min-zoom, --max-zoom: a part; ID1 ID2 ...: one file)
  cat SHA256               write one object of the store to standard output (docs/store.md)

options every command takes:
  --spool DIR              the spool folder (default ./spool)
  --store DIR              the store folder (default <spool>/store), or
  --store s3://BUCKET[/PREFIX]  an S3-compatible object store (docs/s3.md), with
  --s3-endpoint URL        its endpoint (else AWS_ENDPOINT_URL); credentials from
                           AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION
  --s3-addressing path|virtual  path-style URLs (default) or virtual-hosted ones
  -h, --help               help for the command

Options may come before or after arguments. Documentation: docs/ in the source tree.
"""

/// `tilespool run --help`: the options' lines come from `RunOption.all`.
let runHelp = """
usage: tilespool run [--spool DIR] [--store DIR] [options]

Runs the daemon in the foreground. Log lines go to standard error; SIGINT, SIGTERM, SIGQUIT or
SIGHUP (unless it comes ignored, as `nohup` leaves it) stop it cleanly after writing every status (downloads in progress become `queued` and resume on restart).
Only one daemon may run on a spool (the lock file <spool>/daemon.lock).

options:
\(RunOption.all.map(\.helpText).joined(separator: "\n"))

See docs/operations.md for metrics, hooks, systemd units and retention.
"""

/// Runs the command line; returns the exit status.
func runCLI(_ argv: [String]) -> Int32 {
    var args = Array(argv.dropFirst())
    guard let command = args.first else { err(mainHelp); return 2 }
    args.removeFirst()
    do {
        switch command {
        case "-h", "--help", "help": out(mainHelp); return 0
        case "--version", "version": out("tilespool \(TileSpoolVersion.string)"); return 0
        case "run": return try commandRun(args)
        case "status": return try commandStatus(args)
        case "pause", "resume", "cancel", "delete", "refresh": return try commandControl(command, args)
        case "gc": return try commandGC(args)
        case "prune": return try commandPrune(args)
        case "verify": return try commandVerify(args)
        case "plan": return try commandPlan(args)
        case "submit": return try commandSubmit(args)
        case "get": return try commandGet(args)
        case "export": return try commandExport(args)
        case "cat": return try commandCat(args)
        default: throw UsageError("unknown command '\(command)'")
        }
    } catch let e as UsageError {
        let known = ["run", "status", "pause", "resume", "cancel", "delete", "refresh", "gc", "prune", "verify", "plan", "submit", "get", "export", "cat"].contains(command)
        err("tilespool: \(e.message)\ntry 'tilespool \(known ? command + " " : "")--help'")
        return 2
    } catch let e as RegionError {
        err("tilespool: \(e.code.rawValue): \(e.message)")
        return 1
    } catch {
        err("tilespool: \(error)")
        return 1
    }
}

func commandRun(_ argv: [String]) throws -> Int32 {
    let a = try Arguments(argv, flags: commonFlags, valued: commonValued.union(RunOption.all.map(\.name)))
    if a.flags.contains("--help") { out(runHelp); return 0 }
    if !a.positionals.isEmpty { throw UsageError("run takes no arguments") }
    let loc = try Locations(a)
    var o = DaemonOptions(spool: loc.spool, store: loc.store)
    o.s3Endpoint = loc.s3Endpoint
    o.s3PathStyle = loc.s3PathStyle
    if loc.isS3 { _ = try loc.openStore() } // a malformed URL or missing credentials: said now, exit 1
    try RunOption.apply(RunOption.all, a, to: &o)
    let daemon: Daemon
    do { daemon = try Daemon(options: o) } catch let e as SystemError where e.operation == "flock" {
        err("tilespool: another daemon is already running on this spool or store (lock \(e.path) is held)")
        return 1
    }
    daemon.run()
    return 0
}
