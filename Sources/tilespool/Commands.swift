import Foundation
import Glibc
import TileSpoolCore
import TileSpoolIO

let statusHelp = """
usage: tilespool status [ID] [--json] [--watch [--interval SECONDS]] [--spool DIR] [--store DIR]

Prints every region (or one) from the status files: state, a progress bar, resource and tile
counts, bytes, and while downloading the rate (tiles/s, bytes/s over the last seconds) and the
ETA; then the error. --json prints the status objects as a JSON array (or one object).
--watch redraws the display every --interval seconds (default 1) until no region is queued,
downloading or pausedNetwork, then exits 0: on a terminal in place (two ANSI escapes: cursor
home, clear to the end of the screen); into a pipe or a file, one frame after another with an
empty line between them and no escapes.
Exit status 1 when ID has no status.
"""

/// The states the daemon moves on from by itself: `status --watch` waits while any region is in one.
let movingStates: Set<RegionState> = [.queued, .downloading, .pausedNetwork]

func commandStatus(_ argv: [String]) throws -> Int32 {
    let a = try Arguments(argv, flags: commonFlags.union(["--json", "--watch"]), valued: commonValued.union(["--interval"]))
    if a.flags.contains("--help") { out(statusHelp); return 0 }
    guard a.positionals.count <= 1 else { throw UsageError("status takes at most one ID") }
    if a.flags.contains("--json") && a.flags.contains("--watch") { throw UsageError("--watch and --json do not go together") }
    let interval = max(0.1, try a.seconds("--interval", default: 1))
    try (try Locations(a)).requireSpool()
    let writer = StatusWriter(layout: (try Locations(a)).layout)
    /// The statuses to show (nil: `status ID` found none), and the lines naming status files
    /// that cannot be read (only when listing every region).
    func load() -> (list: [RegionStatus], unreadable: String)? {
        if let id = a.positionals.first {
            guard RequestValidator.isValidID(id), let st = writer.read(id: id) else { return nil }
            return ([st], "")
        }
        let all = writer.scan()
        return (all.statuses, all.unreadable.map { "\n\($0)  status file not readable (status/\($0).json: damaged, cut short or edited by hand)" }.joined())
    }
    /// Why `status ID` found nothing: no such region, or a status file it cannot read.
    func missing(_ id: String) -> String {
        RequestValidator.isValidID(id) && Files.entryType(writer.layout.statusJSON(id)) != .missing
            ? "region '\(id)': status/\(id).json is not a status tilespool can read (damaged, cut short or edited by hand)"
            : "no region '\(id)'"
    }
    if a.flags.contains("--watch") {
        // On a terminal each frame replaces the last; into a pipe or a file, frames follow one
        // another, an empty line between two, with no escape sequence.
        let terminal = isatty(1) == 1
        var first = true
        while true {
            guard let (list, unreadable) = load() else { err("tilespool: \(missing(a.positionals[0]))"); return 1 }
            // Home, clear to the end of the screen, then the display.
            let lead = terminal ? "\u{1B}[H\u{1B}[J" : first ? "" : "\n"
            first = false
            FileHandle.standardOutput.write(Data((lead + TerminalText.safe(statusText(list) + unreadable) + "\n").utf8))
            if !list.contains(where: { movingStates.contains($0.state) }) { return 0 }
            Thread.sleep(forTimeInterval: interval) // any --interval (usleep's argument is 32 bits)
        }
    }
    guard let (list, unreadable) = load() else { err("tilespool: \(missing(a.positionals[0]))"); return 1 }
    if a.flags.contains("--json") {
        // One status as an object, all of them as an array; unreadable files said on standard error.
        for line in unreadable.split(separator: "\n") { err("tilespool: " + line) }
        let doc = a.positionals.isEmpty ? StatusCoding.statusList(list) : StatusCoding.statusFile(list[0]).dropLast()
        outJSON(doc)
        return 0
    }
    out(statusText(list) + unreadable)
    return 0
}

/// The lines `tilespool status` prints for `list` (no trailing newline).
func statusText(_ list: [RegionStatus]) -> String {
    if list.isEmpty { return "no regions" }
    var lines: [String] = []
    for st in list {
        let p = st.progress
        // A status file is read as it is: a count out of range (a damaged or planted file) draws
        // an empty or full bar, never a negative one (a review of 2026-12-07: a trap).
        let fraction = p.resourcesExpected > 0 ? max(0, min(1, Double(p.resourcesCompleted) / Double(p.resourcesExpected))) : 0
        let width = 20
        let filled = min(width, Int(fraction * Double(width)))
        let bar = "[" + String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled) + "]"
        var line = "\(st.id)  \(st.state.rawValue)\(st.refreshing ? " (refreshing)" : "")  \(bar) \(String(format: "%5.1f%%", fraction * 100))"
        if st.state == .downloading {
            line += "  " + (st.tilesPerSecond.map { String(format: $0 < 1e9 ? "%.1f tiles/s" : "%.3g tiles/s", $0) } ?? "- tiles/s")
            line += "  " + (st.bytesPerSecond.map { formatBytes(displayCount($0)) + "/s" } ?? "- B/s")
            line += "  ETA " + (st.etaSeconds.map { formatDuration($0) } ?? "-")
        }
        line += "  resources \(p.resourcesCompleted)/\(p.resourcesExpected)\(p.resourcesExpectedIsPrecise ? "" : "+")"
        line += "  tiles \(p.tilesCompleted)/\(p.tilesExpected)  \(formatBytes(p.bytesCompleted))"
        if let u = st.uniqueBytes { line += " (\(formatBytes(u)) unique)" }
        if p.tilesEmpty > 0 { line += "  empty \(p.tilesEmpty)" }
        if p.tilesFailed > 0 { line += "  failed \(p.tilesFailed)" }
        if p.resourcesMissing > 0 { line += "  missing \(p.resourcesMissing)" }
        if p.resourcesChecked > 0 { line += "  refresh: \(p.resourcesChanged) changed, \(p.resourcesUnchanged) unchanged" }
        if let e = st.error { line += "\n    error: \(e.code.rawValue): \(e.message)" }
        for w in st.warnings { line += "\n    warning: \(w.code): \(w.message)" }
        lines.append(line)
    }
    return lines.joined(separator: "\n")
}

/// `value` as an Int for display: 0 for NaN or below 0, at most 10^15 (a rate or an ETA read from
/// a status file, which may be damaged: `Int(1e300)` traps).
func displayCount(_ value: Double) -> Int { value.isFinite ? Int(max(0, min(value.rounded(.up), 1e15))) : 0 }

/// `65` -> `1m05s`, `3700` -> `1h01m40s`, `12` -> `12s`.
func formatDuration(_ seconds: Double) -> String {
    let t = displayCount(seconds)
    let h = t / 3600, m = t / 60 % 60, s = t % 60
    // Interpolated, not `%d` (32 bits: attack round 42 saw "ETA -1395096463h46m40s" for 10^15 s).
    func two(_ v: Int) -> String { v < 10 ? "0\(v)" : "\(v)" }
    if h > 0 { return "\(h)h\(two(m))m\(two(s))s" }
    if m > 0 { return "\(m)m\(two(s))s" }
    return "\(s)s"
}

func formatBytes(_ n: Int) -> String {
    if n < 1024 { return "\(n) B" }
    let units = ["KiB", "MiB", "GiB", "TiB"]
    var v = Double(n) / 1024, i = 0
    while v >= 1024 && i < units.count - 1 { v /= 1024; i += 1 }
    return String(format: "%.1f %@", v, units[i])
}

func commandGC(_ argv: [String]) throws -> Int32 {
    let a = try Arguments(argv, flags: commonFlags, valued: commonValued.union(["--grace"]))
    if a.flags.contains("--help") {
        out("""
        usage: tilespool gc [--grace SECONDS] [--spool DIR] [--store DIR]

        Removes every object that no region's manifest references, and temp files left behind, then
        prints what it freed. Safe to run from cron while the daemon downloads: objects younger than
        the grace period (default 3600 s) are kept, and so is any object the daemon re-uses meanwhile.
        A second line counts the unreferenced objects kept only for being younger than the grace
        period (right after a delete, usually all of its objects): a later gc frees them, or
        --grace 0 while no daemon runs. A grace period below 3600 s needs the daemon stopped (gc
        takes its lock, exit status 1 while it runs); on an S3 store, every daemon that writes the
        bucket, from any spool or host (exit status 1 while one's lease is fresh).
        """)
        return 0
    }
    if !a.positionals.isEmpty { throw UsageError("gc takes no arguments") }
    let loc = try Locations(a)
    let grace = try a.seconds("--grace", default: 3600)
    try loc.requireStore()
    // Below twice the age of the copies a download re-uses, gc could remove a pack a running
    // download has just decided to rely on (docs/gc.md): only with the daemon stopped, and its
    // locks held so that none starts meanwhile.
    var locks: [SpoolLock] = []
    if grace < 2 * Repository.reuseAge {
        switch try daemonLocks(loc) {
        case .held(let l): locks = l
        case .busy(let path):
            err("tilespool: gc --grace below \(Int(2 * Repository.reuseAge)) s needs the daemon stopped (lock \(path) is held): a running download may rely on packs that young. The default grace period is safe beside it.")
            return 1
        }
    }
    defer { _ = locks }
    let store = try loc.openStore()
    let mark = try GCMark.take(store, doing: "gc --grace below \(Int(2 * Repository.reuseAge)) s", when: grace < 2 * Repository.reuseAge)
    defer { mark.drop() }
    let r = try StoreMaintenance.gc(store: store, spool: loc.layout, grace: grace)
    out("gc: removed \(r.objectsRemoved) objects, freed \(r.bytesFreed) bytes (\(formatBytes(r.bytesFreed))), removed \(r.tempFilesRemoved) temp files, kept \(r.objectsKept) objects"
        + (r.segmentsRemoved > 0 ? ", removed \(r.segmentsRemoved) compacted manifest segments" : ""))
    if r.youngUnreferenced > 0 {
        let g = grace == grace.rounded() && grace < 1e15 ? String(Int(grace)) : String(grace)
        out("gc: kept \(r.youngUnreferenced) unreferenced objects (\(r.youngUnreferencedBytes) bytes, \(formatBytes(r.youngUnreferencedBytes))) younger than the grace period (\(g) s): a later gc frees them; --grace 0 when no daemon runs")
    }
    return 0
}

/// The mark of a short-grace gc or a repair on a store several daemons write (S3), where this
/// host's locks cannot see a daemon on another spool or host (docs/s3.md, Concurrency): the mark
/// `locks/gc-<host>-<pid>-<32 hex>.lock` is saved first, then the store's other leases are listed; any fresh
/// one (a daemon's, or another gc's mark) refuses the command and removes the mark. A daemon
/// saves its lease first and then looks for marks, so one of the two always sees the other.
final class GCMark {
    private let store: any TileStore
    /// The mark's lease id; nil when none was saved (not `needed`, or a store only one daemon writes).
    private let id: String?
    private init(store: any TileStore, id: String?) { self.store = store; self.id = id }

    /// Takes the mark for `doing` when `needed` and the store is shared (else a mark that saved
    /// nothing: this host's locks do it).
    /// - Throws: `CommandFailure` (exit status 1) when another lease is fresh, naming it; the
    ///   store's error when the mark cannot be saved or the leases listed.
    static func take(_ store: any TileStore, doing: String, when needed: Bool) throws -> GCMark {
        guard needed, store.isShared else { return GCMark(store: store, id: nil) }
        let id = Repository.newLeaseID(kind: "gc")
        try store.renewLease(id, text: Repository.leaseText("tilespool \(doing)"))
        let mark = GCMark(store: store, id: id)
        let others = try store.freshLeases(now: Date().timeIntervalSince1970).filter { $0.name != Repository.leaseName(id) }
        guard let first = others.first else { return mark }
        mark.drop()
        throw CommandFailure("\(doing) needs every daemon that writes this store stopped, and no other gc or repair running: \(others.count) lease\(others.count == 1 ? "" : "s") saved in the last \(Int(Repository.leaseStaleAfter)) s (\(first.name), saved \(Int(first.age)) s ago). A daemon removes its lease when it stops; one killed leaves it, stale \(Int(Repository.leaseStaleAfter / 60)) minutes after its last save. The default grace period is safe beside running daemons.")
    }

    /// Removes the mark (a failure is reported: daemons wait until it is stale).
    func drop() {
        guard let id else { return }
        do { try store.dropLease(id) } catch { err("tilespool: cannot remove this command's mark \(Repository.leaseName(id)) from the store (\(error)): daemons start no region until it is stale (\(Int(Repository.leaseStaleAfter / 60)) minutes)") }
    }
}

/// The daemon's locks (the spool's, and a local store's when it is another file), taken without
/// waiting, for a command that needs no daemon running and none starting meanwhile.
enum DaemonLocks {
    /// Every lock taken; held until the array is released.
    case held([SpoolLock])
    /// A daemon holds the lock at this path.
    case busy(String)
}

/// Takes the daemon's locks for `loc` (`DaemonLocks`).
/// - Throws: `SystemError` when a lock file cannot be opened or locked for another reason.
func daemonLocks(_ loc: Locations) throws -> DaemonLocks {
    var locks: [SpoolLock] = []
    for path in [loc.layout.lock] + (loc.isS3 ? [] : [loc.store + "/daemon.lock"]) {
        if locks.contains(where: { SpoolLock.sameFile($0.path, path) }) { continue } // --spool X --store X
        guard let l = try takeLock(path) else { return .busy(path) }
        locks.append(l)
    }
    return .held(locks)
}

func commandVerify(_ argv: [String]) throws -> Int32 {
    let a = try Arguments(argv, flags: commonFlags.union(["--repair"]), valued: commonValued)
    if a.flags.contains("--help") {
        out("""
        usage: tilespool verify [--repair] [--spool DIR] [--store DIR]

        Re-hashes every object and checks that it matches its name, that every manifest line names an
        object that exists (or is an empty tile), that no temp file is left over, and that each
        completed region's counts match its manifest. Exit status 1 on any fault.
        --repair (with the daemon stopped) moves bad objects to <store>/quarantine/, drops the manifest
        lines that used them, and marks those regions failed (storeDamaged): 'resume' fetches only
        what is missing. Nothing else is deleted.
        """)
        return 0
    }
    if !a.positionals.isEmpty { throw UsageError("verify takes no arguments") }
    let loc = try Locations(a)
    let repair = a.flags.contains("--repair")
    try loc.requireStore()
    var locks: [SpoolLock] = []
    if repair {
        switch try daemonLocks(loc) {
        case .held(let l): locks = l
        case .busy(let path):
            err("tilespool: verify --repair needs the daemon stopped (lock \(path) is held)")
            return 1
        }
    }
    defer { _ = locks }
    let store = try loc.openStore()
    let mark = try GCMark.take(store, doing: "verify --repair", when: repair)
    defer { mark.drop() }
    let r = try StoreMaintenance.verify(store: store, status: StatusWriter(layout: loc.layout), repair: repair)
    for b in r.badObjects { out("bad object (content does not hash to its name): \(b)") }
    for id in r.refreshesFinished { out("finished the refresh swap of \(id) that was cut short") }
    for m in r.missingObjects { out("missing object: \(m)") }
    // One line each, whatever the names hold (a line feed in a planted name adds no line: attack round 40).
    for t in r.tempFiles { out("temp file left over: \(TerminalText.inline(t))") }
    for e in r.foreignEntries { out("entry TileSpool did not make (left alone; remove it by hand): \(TerminalText.inline(e))") }
    for p in r.unindexedPacks {
        out("pack no index lists (sound; cat and exports find its objects once gc, verify --repair or a daemon start indexes it): \(p)")
    }
    for c in r.countMismatches { out("count mismatch: \(c)") }
    for p in r.unreadablePlans { out("unreadable plan: \(p)") }
    for m in r.missingRegions { out("missing region: \(m)") }
    for m in r.regionsWithoutRequest { out("region without its request: \(m)") }
    for m in r.deletesUnderWay { out("delete not finished (not a fault): \(m)") }
    for o in r.othersToRepair { out("another spool's region, left for its repair: \(o)") }
    for u in r.uncheckedRegions { out("region not checked: \(TerminalText.inline(u))") }
    if repair { out("repair: quarantined \(r.quarantined) files (damaged packs and loose objects, in quarantine/); packs indexed again: \(r.reindexed); regions marked for re-download: \(r.regionsMarked.isEmpty ? "none" : r.regionsMarked.joined(separator: ", "))") }
    out("verify: \(r.objectsChecked) objects, \(r.manifestsChecked) manifests, \(r.linesChecked) lines checked; \(r.faults) faults")
    return r.faults == 0 ? 0 : 1
}

func commandCat(_ argv: [String]) throws -> Int32 {
    let a = try Arguments(argv, flags: commonFlags, valued: commonValued)
    if a.flags.contains("--help") {
        out("""
        usage: tilespool cat SHA256 [--spool DIR] [--store DIR]

        Writes the object named SHA256 (64 hex digits) to standard output, byte for byte, wherever
        it lies in the store (a pack, or a loose file of an earlier version); its bytes are checked
        against the name first. Exit status 1 when the store does not hold it (or it is damaged).
        The store's formats: docs/store.md.
        """)
        return 0
    }
    guard a.positionals.count == 1, let sha = a.positionals.first else { throw UsageError("cat takes one SHA-256") }
    guard sha.utf8.count == 64, sha.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }) else {
        throw UsageError("'\(TerminalText.inline(String(sha.prefix(80))))' is not a SHA-256 (64 lower-case hex digits)")
    }
    let loc = try Locations(a)
    try loc.requireStore()
    let store = try loc.openStore()
    let data: Data
    do { data = try store.read(sha, limit: 1 << 34) } catch {
        // Absent is "does not hold"; any other error (every copy unreadable or damaged) says what.
        if (error as? SystemError)?.errno == ENOENT { throw CommandFailure("the store \(store.location) does not hold object \(sha)") }
        throw CommandFailure("object \(sha) cannot be read (\(error)): run 'tilespool verify'")
    }
    guard SHA256.hex(data) == sha else { throw CommandFailure("object \(sha) is damaged (its bytes do not hash to its name): run 'tilespool verify'") }
    FileHandle.standardOutput.write(data)
    return 0
}
