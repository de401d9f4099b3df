// Issue 29, "close the classes": a randomized run of many operations, hostile ones among them,
// against a daemon whose store sits on a small filesystem (so that it fills up), with a sentinel
// tree outside the spool and store (files, folders, and symlinks into it planted where TileSpool
// writes). Afterwards, whatever the run did: the sentinel tree is byte for byte as before,
// `verify` is clean, every export the daemon reports written equals a fresh export of its region's
// pack, and no credential given in a request appears in any file TileSpool wrote.
//
// The run is seeded: TILESPOOL_ADVERSARIAL_SEED=N repeats one (the seed is printed).
import Foundation
import Glibc
import XCTest

/// SplitMix64: a small seeded generator, so a failing run can be repeated exactly.
struct SeededRandom: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

final class AdversarialTests: XCTestCase {
    var nginx: NginxServer!
    var fx: SpoolFixture!
    var mounted = false

    override func setUpWithError() throws {
        nginx = try NginxServer(root: try MapData.require())
        fx = try SpoolFixture()
    }

    override func tearDown() {
        fx?.kill9()
        nginx?.stop()
        if mounted { _ = try? runTool("/bin/umount", ["-l", fx.store]) }
    }

    func testARandomizedHostileRunLeavesEverythingOutsideAlone() throws {
        let seed = ProcessInfo.processInfo.environment["TILESPOOL_ADVERSARIAL_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 1...UInt64(UInt32.max))
        print("AdversarialTests seed: \(seed) (TILESPOOL_ADVERSARIAL_SEED=\(seed) repeats this run)")
        var rng = SeededRandom(seed: seed)
        let root = fx.root.path
        let secretHeader = "SEKRET-HDR-\(seed)", secretToken = "SEKRETTOKEN\(seed)"

        // The store on a 1 MiB filesystem (root only): the run fills it now and then.
        try FileManager.default.createDirectory(atPath: fx.store, withIntermediateDirectories: true)
        if geteuid() == 0 {
            let (rc, out) = try runTool("/bin/mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", fx.store])
            XCTAssertEqual(rc, 0, out)
            mounted = rc == 0
        } else {
            print("AdversarialTests: not root, the store is not on a small filesystem (no full disk in this run)")
        }

        // The sentinel tree, and its checksums.
        let sentinel = root + "/sentinel"
        try FileManager.default.createDirectory(atPath: sentinel + "/folder/deeper", withIntermediateDirectories: true)
        for (i, p) in ["precious.txt", "folder/a.bin", "folder/deeper/b.bin", "x.mbtiles"].enumerated() {
            try Data((0..<(100 + i * 37)).map { UInt8(($0 * 31 + i) & 0xFF) }).write(to: URL(fileURLWithPath: sentinel + "/" + p))
        }
        XCTAssertEqual(symlink(sentinel + "/precious.txt", sentinel + "/folder/link-to-file"), 0)
        XCTAssertEqual(symlink(sentinel + "/folder", sentinel + "/link-to-folder"), 0)
        let before = treeSums(sentinel)

        try fx.start(["--max-retries", "1", "--retry-delay", "0.05"])
        let layout = (requests: fx.spool + "/requests", control: fx.spool + "/control", exports: fx.spool + "/exports", rejected: fx.spool + "/rejected")
        // Hazards planted where TileSpool writes: symlinks named like exports, a folder dropped as
        // a request holding a symlink out, a control file that is a symlink, a rejected entry
        // with a link out.
        func plant() {
            // Only r0's and r1's names: r2's and r3's exports get written, to be compared below.
            for id in ["r0", "r1"] {
                _ = symlink(sentinel + "/precious.txt", layout.exports + "/\(id).mbtiles")
                _ = symlink(sentinel + "/folder", layout.exports + "/\(id).site")
                _ = symlink(sentinel + "/x.mbtiles", layout.exports + "/\(id).pmtiles")
            }
            try? FileManager.default.createDirectory(atPath: layout.rejected + "/trap", withIntermediateDirectories: true)
            _ = symlink(sentinel, layout.rejected + "/trap/out")
            _ = symlink(sentinel + "/precious.txt", layout.control + "/r9.delete")
        }
        plant()
        let trap = layout.requests + "/.trap-\(seed)"
        try FileManager.default.createDirectory(atPath: trap, withIntermediateDirectories: true)
        _ = symlink(sentinel + "/folder", trap + "/link")
        XCTAssertEqual(rename(trap, layout.requests + "/trap.json"), 0)

        let datasets = ["stamen_toner", "osm_carto"]
        let hostileBases = ["http://127.0.0.1:1/a/%20%7B%20alias%20/etc/%3B%20%7D/", "https://maps.example.org/x%22y/", "http://h/%24var/"]
        func request(_ id: String) -> [String: Any] {
            let set = datasets[Int.random(in: 0..<datasets.count, using: &rng)]
            let lo = Int.random(in: 0...2, using: &rng), hi = Int.random(in: lo...3, using: &rng)
            var exports: [[String: Any]] = []
            if Bool.random(using: &rng) { exports.append(["format": "mbtiles"]) }
            if Bool.random(using: &rng) { exports.append(["format": "pmtiles", "source": "tiles0"]) }
            if Bool.random(using: &rng) { exports.append(["format": "site", "baseURL": hostileBases[Int.random(in: 0..<hostileBases.count, using: &rng)]]) }
            return ["id": id, "tiles": [nginx.baseURL + "/raster/\(set)/{z}/{x}/{y}.png?token=\(secretToken)"],
                    "bounds": [-180, -85, 180, 85], "minZoom": lo, "maxZoom": hi,
                    "headers": ["X-Api-Key": secretHeader], "exports": exports]
        }
        let ids = ["r0", "r1", "r2", "r3"]
        var ops: [String] = []
        for step in 0..<60 {
            let id = ids[Int.random(in: 0..<ids.count, using: &rng)]
            let op = Int.random(in: 0..<12, using: &rng)
            switch op {
            case 0, 1, 2:
                ops.append("drop \(id)")
                try fx.drop("\(id).json", request(id))
            case 3:
                // The same request again (a refresh), or another of the same id (a replacement).
                ops.append("re-drop \(id)")
                if let r = (fx.status(id)?["request"] as? [String: Any]), r["tiles"] != nil {
                    try fx.drop("\(id).json", request(id))
                }
            case 4:
                let choice = Int.random(in: 0..<6, using: &rng)
                let out: (String, String) = [
                    (sentinel + "/folder/link-to-file", "mbtiles"), (sentinel + "/link-to-folder", "site"), (sentinel, "site"),
                    (fx.store + "/objects", "site"), (fx.spool + "/status/\(id).json", "mbtiles"), (root + "/out-\(step).pmtiles", "pmtiles"),
                ][choice]
                ops.append("export \(id) \(out.1) -> \(out.0)")
                _ = try fx.cli(["export", id, "--format", out.1, "--output", out.0, "--force", "--spool", fx.spool, "--store", fx.store])
            case 5:
                let action = ["refresh", "pause", "resume", "cancel", "delete"][Int.random(in: 0..<5, using: &rng)]
                ops.append("\(action) \(id)")
                _ = try fx.cli([action, id, "--spool", fx.spool])
            case 6:
                ops.append("prune")
                _ = try fx.cli(["prune", "--state", "failed,cancelled,failedStorage", "--older-than", "0s", "--rejected-older-than", "0s",
                                "--spool", fx.spool, "--store", fx.store])
            case 7:
                ops.append("gc")
                _ = try fx.cli(["gc", "--spool", fx.spool, "--store", fx.store])
            case 8:
                ops.append("kill -9, restart")
                fx.kill9()
                try fx.start(["--max-retries", "1", "--retry-delay", "0.05"])
            case 9:
                ops.append("plant")
                plant()
            case 10:
                // Stopped: a gc that frees everything unreferenced, then a verify --repair.
                ops.append("stop, gc --grace 0, verify --repair, start")
                XCTAssertEqual(fx.stop(), 0)
                _ = try fx.cli(["gc", "--grace", "0", "--spool", fx.spool, "--store", fx.store])
                _ = try fx.cli(["verify", "--repair", "--spool", fx.spool, "--store", fx.store])
                try fx.start(["--max-retries", "1", "--retry-delay", "0.05"])
            default:
                ops.append("resume \(id)")
                _ = try fx.cli(["resume", id, "--spool", fx.spool])
            }
            // Now and then, a moment for the daemon to get somewhere.
            if Int.random(in: 0..<3, using: &rng) == 0 {
                try waitUntil("the daemon is idle", timeout: 30) { !ids.contains { ["queued", "downloading"].contains(fx.state($0) ?? "") } }
            }
        }
        // Quiet: nothing moving, every export settled.
        try waitUntil("every region and export settles", timeout: 60) {
            ids.allSatisfy { id in
                guard let st = fx.status(id) else { return true }
                let state = st["state"] as? String ?? ""
                if ["queued", "downloading"].contains(state) { return false }
                return ((st["exports"] as? [[String: Any]]) ?? []).allSatisfy { $0["state"] as? String != "writing" }
            }
        }
        XCTAssertEqual(fx.stop(), 0)
        let context = "seed \(seed); operations: \(ops.joined(separator: "; "))"

        // 1. The sentinel tree is as it was.
        XCTAssertEqual(treeSums(sentinel), before, "the sentinel tree changed; \(context)")
        // 2. verify is clean.
        let (vrc, vout) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(vrc, 0, "verify: \(vout); \(context)")
        if vrc != 0 {
            // What happened to the regions, for the one reading the failure.
            for e in fx.events() { print("event:", String(decoding: (try? JSONSerialization.data(withJSONObject: e, options: [.sortedKeys])) ?? Data(), as: UTF8.self)) }
            print("log:", fx.log().suffix(6000))
        }
        // 3. Every export reported written equals a fresh export of its pack.
        let fresh = root + "/fresh"
        try FileManager.default.createDirectory(atPath: fresh, withIntermediateDirectories: true)
        var compared = 0
        for id in ids {
            guard let st = fx.status(id), st["state"] as? String == "completed" else { continue }
            for e in (st["exports"] as? [[String: Any]]) ?? [] where e["state"] as? String == "written" {
                let spec = e["spec"] as? [String: Any] ?? [:]
                let format = spec["format"] as? String ?? "?"
                let path = e["path"] as? String ?? ""
                let again = fresh + "/\(id)-\(compared).\(format)"
                var args = ["export", id, "--format", format, "--output", again, "--spool", fx.spool, "--store", fx.store]
                if let s = spec["source"] as? String { args += ["--source", s] }
                if let b = spec["baseURL"] as? String { args += ["--base-url", b] }
                let (rc, out) = try fx.cli(args)
                XCTAssertEqual(rc, 0, "fresh export of \(id) \(format): \(out); \(context)")
                if format == "site" {
                    // nginx.conf names the folder it lives in: everything else must be equal.
                    var a = treeSums(path), b = treeSums(again)
                    a["nginx.conf"] = nil; b["nginx.conf"] = nil
                    XCTAssertEqual(a, b, "\(id) site; \(context)")
                } else {
                    XCTAssertEqual(sha256sum([path])[path], sha256sum([again])[again], "\(id) \(format) at \(path); \(context)")
                }
                compared += 1
            }
        }
        print("AdversarialTests: \(ops.count) operations, \(compared) exports compared with fresh ones; \(fx.events().filter { $0["state"] as? String == "failedStorage" }.count) times failedStorage; states: \(ids.map { "\($0) \(fx.state($0) ?? "-")" }.joined(separator: ", "))")
        // 4. No credential in any file TileSpool wrote: the spool (but the users' own request files
        // moved to rejected/), the store (but request.json and plan.json, which keep them to
        // resume: docs/contract.md), exports, the log.
        var leaks: [String] = []
        for dir in [fx.spool, fx.store] {
            let e = FileManager.default.enumerator(atPath: dir)
            while let rel = e?.nextObject() as? String {
                let path = dir + "/" + rel
                if rel.hasPrefix("rejected/") && rel.hasSuffix(".json") || rel.hasPrefix("requests/") || rel.hasSuffix("/request.json") || rel.hasSuffix("/plan.json") { continue }
                if rel.hasPrefix("objects/") { continue } // tile bodies as served
                var st = stat()
                guard lstat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG,
                      let data = FileManager.default.contents(atPath: path) else { continue }
                let text = String(decoding: data, as: UTF8.self)
                if text.contains(secretHeader) || text.contains(secretToken) { leaks.append(rel) }
            }
        }
        let log = fx.log()
        if log.contains(secretHeader) || log.contains(secretToken) { leaks.append("daemon log") }
        XCTAssertEqual(leaks, [], "credentials written to these files; \(context)")
    }

    /// Every entry under `dir` (lstat, not following symlinks): file -> SHA-256, symlink -> its
    /// target, folder -> "dir".
    func treeSums(_ dir: String) -> [String: String] {
        var out: [String: String] = [:]
        let e = FileManager.default.enumerator(atPath: dir)
        while let rel = e?.nextObject() as? String {
            var st = stat()
            guard lstat(dir + "/" + rel, &st) == 0 else { continue }
            switch st.st_mode & S_IFMT {
            case S_IFREG: out[rel] = sha256Hex(FileManager.default.contents(atPath: dir + "/" + rel) ?? Data())
            case S_IFLNK: out[rel] = "-> " + ((try? FileManager.default.destinationOfSymbolicLink(atPath: dir + "/" + rel)) ?? "?")
            case S_IFDIR: out[rel] = "dir"
            default: out[rel] = "other"
            }
        }
        return out
    }
}
