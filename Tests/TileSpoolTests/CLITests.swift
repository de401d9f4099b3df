import Foundation
import Glibc
@testable import TileSpoolIO
import XCTest

/// The command line as a shell script uses it: status text and JSON, control commands, plan,
/// --help, and options before or after arguments.
final class CLITests: FaultServerSpoolTestCase {
    /// Region `t` of `/ok/` tiles over z0-`maxZoom`, downloaded to `completed`, the daemon stopped.
    func completedRegion(maxZoom: Int) throws {
        try fx.start()
        try fx.drop("t.json", server.tilesRequest(["/ok/t/{z}/{x}/{y}.png"], id: "t", maxZoom: maxZoom))
        try fx.waitForState("t", "completed")
        fx.stop()
    }

    /// Attack round 36: `verify` run beside the daemon (from cron) reported the daemon's open
    /// pack (`tmp/<pid>-<tag>-<n>.partial`) as a temp file left over, a fault: exit 1 on a sound
    /// store. A file whose process still runs is in flight: verify beside a download reports no
    /// fault; once the daemon is killed (kill -9), its open pack is left over and named.
    func testVerifyBesideARunningDownloadNamesNoFileInFlight() throws {
        // A long sync interval keeps the open pack open (a sync seals it) while verify runs.
        try fx.start(["--sync-interval", "30"])
        try fx.drop("v.json", server.tilesRequest(["/slow/30/v/{z}/{x}/{y}.png"], id: "v", maxZoom: 5))
        try waitUntil("the daemon has an open pack", timeout: 60) {
            ((try? FileManager.default.contentsOfDirectory(atPath: self.fx.store + "/tmp")) ?? []).contains { $0.hasSuffix(".partial") }
        }
        var (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(fx.state("v"), "downloading", "verify ran beside the download")
        XCTAssertFalse(out.contains("temp file left over"), out)
        XCTAssertTrue(out.contains(" 0 faults"), out)
        XCTAssertEqual(rc, 0, out)
        fx.kill9()
        (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("temp file left over: tmp/") && out.contains(".partial"), out)
    }

    /// Attack round 37: which temp files `verify` calls in flight. A planted name with the pid of
    /// a live process that is not TileSpool (pid 1) hid the file, and a symlink named so was
    /// never reported; a daemon in another PID namespace (a container: its pid, as the held
    /// `daemon.lock` records it, names no process here) had its open pack named. Now the holder
    /// of a held lock, by the pid in the lock file, is in flight; another process only when it
    /// runs TileSpool; and what is not a regular file in tmp/ is foreign, whatever its name.
    func testVerifyTellsFilesInFlightFromFilesLeftOver() throws {
        try completedRegion(maxZoom: 2)
        let tmp = fx.store + "/tmp", lock = fx.store + "/daemon.lock"
        XCTAssertTrue(FileManager.default.createFile(atPath: tmp + "/1-abc-1.partial", contents: Data(count: 100)))
        XCTAssertTrue(FileManager.default.createFile(atPath: tmp + "/999999-ns-1.partial", contents: Data(count: 100)))
        let link = "\(getpid())-l-1.partial"
        XCTAssertEqual(symlink("/etc/hostname", tmp + "/" + link), 0)
        // The store's lock held by a process whose pid, as it wrote it, is 999999.
        try Data("999999\n".utf8).write(to: URL(fileURLWithPath: lock))
        let holder = Process() // one process that holds the lock and ends with it (no child keeps it)
        holder.executableURL = URL(fileURLWithPath: "/bin/bash")
        holder.arguments = ["-c", "exec 9<>\"$0\" && flock -x 9 && exec sleep 60", lock]
        try holder.run()
        defer { if holder.isRunning { holder.terminate(); holder.waitUntilExit() } }
        try waitUntil("the lock is held", timeout: 10) { (try? SpoolLock.isHeld(path: lock)) == true }
        var (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("temp file left over: tmp/1-abc-1.partial"), out)
        XCTAssertTrue(out.contains("entry TileSpool did not make (left alone; remove it by hand): tmp/\(link) (symlink)"), out)
        XCTAssertFalse(out.contains("999999-ns-1.partial"), "the lock holder's open pack is in flight: \(out)")
        XCTAssertTrue(out.contains(" 2 faults"), out)
        holder.terminate()
        holder.waitUntilExit()
        (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertTrue(out.contains("temp file left over: tmp/999999-ns-1.partial"), out)
        XCTAssertTrue(out.contains(" 3 faults"), out)
        // gc never follows nor removes the symlink (foreign), whatever its age.
        (rc, out) = try fx.cli(["gc", "--grace", "0", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertEqual(Files.entryType(tmp + "/" + link), .symlink)
        XCTAssertFalse(FileManager.default.fileExists(atPath: tmp + "/1-abc-1.partial"), "left over and past the grace period: removed")
    }

    /// A status file with counts and rates no daemon writes (damaged, or planted): `status`
    /// never traps (a review of 2026-12-07: a negative bar, `Int(1e300)`). A huge count or rate
    /// is drawn; a negative count makes the file unreadable, and a negative rate or ETA is `-`.
    func testStatusDrawsAStatusFileWithNumbersOutOfRange() throws {
        try completedRegion(maxZoom: 1)
        let path = fx.spool + "/status/t.json"
        for (completed, rate) in [(-1, 1e300), (Int.max, -1e300)] {
            var doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any])
            var progress = try XCTUnwrap(doc["progress"] as? [String: Any])
            progress["resourcesCompleted"] = completed
            doc["progress"] = progress
            doc["state"] = "downloading"
            doc["bytesPerSecond"] = rate
            doc["etaSeconds"] = rate
            try JSONSerialization.data(withJSONObject: doc).write(to: URL(fileURLWithPath: path))
            let (rc, out) = try fx.cli(["status", "--spool", fx.spool, "--store", fx.store])
            XCTAssertEqual(rc, 0, out)
            if completed < 0 {
                XCTAssertTrue(out.contains("t  status file not readable (status/t.json: damaged, cut short or edited by hand)"), out)
                continue
            }
            XCTAssertTrue(out.contains("t  downloading  [####################] 100.0%") && out.contains("resources 9223372036854775807/"), out)
            XCTAssertTrue(out.contains("ETA -"), out)
        }
        // A huge rate and ETA: at most 10^15 s, in 64 bits (`%d` printed -1395096463h46m40s:
        // attack round 42).
        var doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any])
        doc["bytesPerSecond"] = 1e300
        doc["tilesPerSecond"] = 1e300
        doc["etaSeconds"] = 1e300
        try JSONSerialization.data(withJSONObject: doc).write(to: URL(fileURLWithPath: path))
        let (rc, out) = try fx.cli(["status", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.contains("ETA 277777777777h46m40s"), out)
        XCTAssertTrue(out.contains(" 1e+300 tiles/s "), out) // not 301 digits (attack round 49)
    }

    /// A completed region whose status file is damaged (a negative count: unreadable) is read
    /// from the store at the next start as `queued`, says so in events.jsonl (attack round 49:
    /// its events went on at `downloading`), and completes from its manifest without asking a
    /// tile again; its status is whole again.
    func testARegionWhoseStatusIsDamagedIsQueuedAgainAndAsksNothing() throws {
        try completedRegion(maxZoom: 2)
        let asked = server.allHits().count
        let path = fx.spool + "/status/t.json"
        var doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any])
        var progress = try XCTUnwrap(doc["progress"] as? [String: Any])
        progress["tilesCompleted"] = -1
        doc["progress"] = progress
        try JSONSerialization.data(withJSONObject: doc).write(to: URL(fileURLWithPath: path))
        let before = fx.eventStates("t").count
        try fx.start()
        try waitUntil("the region completed again", timeout: 30) { fx.eventStates("t").count >= before + 3 }
        XCTAssertEqual(Array(fx.eventStates("t").dropFirst(before)), ["queued", "downloading", "completed"])
        // The event is appended before the status files are written (contract.md): they follow.
        try fx.waitForState("t", "completed", timeout: 10)
        XCTAssertEqual(fx.progress("t")["tilesCompleted"], 21)
        XCTAssertEqual(server.allHits().count, asked, "no tile asked again")
    }

    /// A `submit` killed between writing its request and renaming it leaves a dotfile in
    /// requests/ that the daemon never reads: gc removes it once its process is gone, and leaves
    /// a live process's and the user's own dotfiles alone.
    func testGCRemovesTheTempFileOfASubmitThatIsGone() throws {
        try fx.start() // makes the spool and the store
        fx.stop()
        let requests = fx.spool + "/requests"
        let gone = Process()
        gone.executableURL = URL(fileURLWithPath: "/bin/true")
        try gone.run()
        gone.waitUntilExit()
        let pid = gone.processIdentifier
        // Attack round 41: names that look like temp names but that submit never gives (not
        // `<region id>.json`, a pid with a sign or a leading zero, a date for a pid, a line feed)
        // are the user's, whatever process their number names.
        let dead = ".tmp-a.json-\(pid)-3", live = ".tmp-b.json-\(getpid())-4"
        let users = [".a.json.swp", ".tmp-notes", ".tmp-backup-20261207-1", ".tmp-europe.geojson-\(pid)-1", ".tmp-foo.json-+\(pid)-1",
                     ".tmp-foo.json-0\(pid)-1", ".tmp-bad id.json-\(pid)-1", ".tmp-a\nb.json-\(pid)-6", ".tmp-.json-\(pid)-1", ".tmp--\(pid)-1"]
        for name in [dead, live] + users { XCTAssertTrue(FileManager.default.createFile(atPath: requests + "/" + name, contents: Data("{}".utf8))) }
        // A minute old, as gc asks (a younger one may be a submit in another PID namespace).
        let young = ".tmp-y.json-\(pid)-9"
        XCTAssertTrue(FileManager.default.createFile(atPath: requests + "/" + young, contents: Data("{}".utf8)))
        for name in [dead, live] + users {
            try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-120)], ofItemAtPath: requests + "/" + name)
        }
        XCTAssertEqual(mkfifo(requests + "/.tmp-c.json-\(pid)-5", 0o600), 0)
        let (rc, out) = try fx.cli(["gc", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.contains("removed 1 temp file"), out)
        XCTAssertEqual(Set(try FileManager.default.contentsOfDirectory(atPath: requests)),
                       Set([live, young, ".tmp-c.json-\(pid)-5"] + users))
    }

    /// Attack round 37: a plain file, a symlink or a dotfile in regions/ stopped verify (`open
    /// .../regions/evil: ENOTDIR`) before it reported anything, a missing object included. Each
    /// such entry is named (`region not checked: regions/<name>: ...`), a fault, and the other
    /// regions are checked all the same.
    func testVerifyNamesARegionItCannotCheckAndGoesOn() throws {
        try completedRegion(maxZoom: 2)
        let regions = fx.store + "/regions"
        XCTAssertTrue(FileManager.default.createFile(atPath: regions + "/plainfile", contents: Data("hi\n".utf8)))
        XCTAssertTrue(FileManager.default.createFile(atPath: regions + "/.DS_Store", contents: Data()))
        XCTAssertEqual(symlink(fx.root.path, regions + "/evil"), 0)
        // Attack round 38: folders under names the daemon never gives a region, which it skips.
        for name in [".hidden", "bad name", "nl\nx"] { try FileManager.default.createDirectory(atPath: regions + "/" + name, withIntermediateDirectories: false) }
        let gone = try XCTUnwrap(fx.manifest("t").first { $0.kind == "tile" && $0.sha != "-" })
        XCTAssertEqual(try runTool("/usr/bin/python3", [SpoolFixture.storeReader, "drop", fx.store, gone.sha]).0, 0)
        let (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 1, out)
        for name in ["plainfile", ".DS_Store", "evil"] { XCTAssertTrue(out.contains("region not checked: regions/\(name): "), out) }
        for name in [".hidden", "bad name", "nl\\u{A}x"] { XCTAssertTrue(out.contains("region not checked: regions/\(name): not a region id (the daemon skips it)"), out) }
        // Attack round 40: a line feed in a planted name adds no line (a fake summary, say).
        XCTAssertFalse(out.split(separator: "\n").contains { $0.hasPrefix("x: ") }, out)
        XCTAssertTrue(out.contains("missing object: t: \(gone.key)"), out)
        XCTAssertTrue(out.contains("1 manifests"), "region t was checked: \(out)")
        // gc passes over what is neither a region id nor a folder (attack round 39: a .DS_Store
        // stopped every gc); a region id it cannot open (the symlink, the plain file) still stops it.
        var (grc, gout) = try fx.cli(["gc", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(grc, 1, gout)
        XCTAssertTrue(gout.contains("regions/evil is not a region folder (a symlink, which gc never follows, or a file), so gc stops and removes nothing; remove it"), gout)
        XCTAssertFalse(gout.contains(".DS_Store"), gout)
        try FileManager.default.removeItem(atPath: regions + "/evil")
        try FileManager.default.removeItem(atPath: regions + "/plainfile")
        (grc, gout) = try fx.cli(["gc", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(grc, 0, gout)
    }

    func testControlAndStatusWithOptionsOnEitherSideOfTheID() throws {
        try fx.start()
        try fx.drop("c.json", server.tilesRequest(["/slow/30/cli/{z}/{x}/{y}.png"], id: "c", maxZoom: 4))
        try fx.waitForState("c", "downloading")
        // Options after the ID.
        var (rc, out) = try fx.cli(["pause", "c", "--spool", fx.spool])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.contains("pause requested for c"), out)
        try fx.waitForState("c", "pausedUser")
        XCTAssertFalse(FileManager.default.fileExists(atPath: fx.spool + "/control/c.pause"))
        // Options before the ID; the text shows state, bar, counts.
        (rc, out) = try fx.cli(["status", "--spool", fx.spool, "c"])
        XCTAssertEqual(rc, 0, out)
        let done = fx.progress("c")["resourcesCompleted"] ?? -1
        XCTAssertTrue(out.hasPrefix("c  pausedUser  ["), out)
        XCTAssertTrue(out.contains("resources \(done)/341"), out)
        XCTAssertTrue(out.contains("tiles \(done)/341"), out)
        // --name=value form.
        (rc, out) = try fx.cli(["resume", "--spool=\(fx.spool)", "c"])
        XCTAssertEqual(rc, 0, out)
        try fx.waitForState("c", "completed")
        (rc, out) = try fx.cli(["status", "c", "--json", "--spool", fx.spool])
        XCTAssertEqual(rc, 0, out)
        let o = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: Any])
        XCTAssertEqual(o["state"] as? String, "completed")
        XCTAssertEqual((o["progress"] as? [String: Any])?["tilesCompleted"] as? Int, 341)
        // Every region, as a JSON array.
        (rc, out) = try fx.cli(["status", "--json", "--spool", fx.spool])
        XCTAssertEqual((try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [Any])?.count, 1)
        // An unknown id: exit 1.
        (rc, out) = try fx.cli(["status", "nobody", "--spool", fx.spool])
        XCTAssertEqual(rc, 1, out)
    }

    /// Issue 29: a control command for an id the spool does not know, or on a spool no daemon
    /// runs on, says so and exits 1 with nothing dropped (it used to print "requested" and exit 0).
    func testControlRefusesAnUnknownIDAndASpoolWithoutDaemon() throws {
        try fx.start()
        try fx.drop("k.json", server.tilesRequest(["/ok/k/{z}/{x}/{y}.png"], id: "k"))
        try fx.drop("refused.json", ["id": "refused", "tiles": "not an array"])
        try fx.waitForState("k", "completed")
        try fx.waitForState("refused", "failed")
        let actions = ["pause", "resume", "cancel", "delete", "refresh"]
        for action in actions {
            let (rc, out) = try fx.cli([action, "nobody", "--spool", fx.spool])
            XCTAssertEqual(rc, 1, out)
            XCTAssertEqual(out, "tilespool: no region 'nobody' in \(fx.spool) (no status/nobody.json): nothing sent\n")
        }
        // A refused request has only a status: only delete applies.
        var (rc, out) = try fx.cli(["pause", "refused", "--spool", fx.spool])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.hasPrefix("tilespool: 'refused' is only the status of a refused request (invalidRequest: "), out)
        XCTAssertEqual(fx.names(in: fx.spool + "/control"), [])
        XCTAssertEqual(fx.names(in: fx.rejectedDir), ["refused.json", "refused.json.error"])
        (rc, out) = try fx.cli(["delete", "refused", "--wait", "--spool", fx.spool])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.hasSuffix("refused: deleted\n"), out)
        XCTAssertNil(fx.state("refused"))
        XCTAssertEqual(fx.stop(), 0)
        for action in actions where action != "delete" {
            (rc, out) = try fx.cli([action, "k", "--spool", fx.spool])
            XCTAssertEqual(rc, 1, out)
            XCTAssertEqual(out, "tilespool: no daemon is running on \(fx.spool) (its lock \(fx.spool)/daemon.lock is not held): nothing sent. "
                           + "Start one with 'tilespool run', or drop control/k.\(action) yourself to have it applied when one starts\n")
        }
        XCTAssertEqual(fx.names(in: fx.spool + "/control"), [])
        XCTAssertEqual(fx.state("k"), "completed")
        (rc, out) = try fx.cli(["pause", "k", "--timeout", "5", "--spool", fx.spool])
        XCTAssertEqual(rc, 2, out)
        XCTAssertTrue(out.contains("--timeout goes with --wait"), out)
        // delete without a daemon deletes the region itself, as prune does (attack round 54: a
        // `get` stopped half way left a region nothing but a hand-made control file cleared).
        (rc, out) = try fx.cli(["delete", "k", "--wait", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertEqual(out, "deleted k\n")
        XCTAssertNil(fx.state("k"))
        XCTAssertFalse(fx.entryExists(fx.store + "/regions/k"))
        XCTAssertEqual(fx.eventStates("k").last, "deleted")
        XCTAssertEqual(fx.names(in: fx.spool + "/control"), [])
    }

    /// Issue 29: `--wait` prints the daemon's answer, read in events.jsonl (here rotated after
    /// almost every line), and its exit status says what became of the action: 0 applied, 3
    /// ignored, 4 a refresh that failed, 5 no answer in time.
    func testWaitPrintsTheAnswerWithAnExitStatusForEachOutcome() throws {
        try fx.start(["--events-max-bytes", "300", "--events-keep", "3", "--max-retries", "0"])
        try fx.drop("w.json", server.tilesRequest(["/slow/30/w/{z}/{x}/{y}.png"], id: "w", maxZoom: 4))
        try fx.waitForState("w", "downloading")
        func run(_ args: [String]) throws -> (Int32, String) { try fx.cli(args + ["--wait", "--spool", fx.spool]) }
        var (rc, out) = try run(["pause", "w"])
        XCTAssertEqual(rc, 0, out)
        XCTAssertEqual(out, "pause requested for w (\(fx.spool)/control/w.pause)\nw: pausedUser\n")
        XCTAssertEqual(fx.state("w"), "pausedUser", "the state is written when --wait returns")
        (rc, out) = try run(["pause", "w"])
        XCTAssertEqual(rc, 3, out)
        XCTAssertTrue(out.hasSuffix("tilespool: pause ignored: pause applies to queued or downloading regions, not pausedUser (w stays pausedUser)\n"), out)
        (rc, out) = try run(["resume", "w"])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.hasSuffix("w: queued\n"), out)
        try fx.waitForState("w", "completed")
        (rc, out) = try run(["refresh", "w"])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.hasSuffix("w: refresh started\nw: refresh finished: 341 checked, 0 changed, 341 unchanged\n"), out)
        XCTAssertTrue(FileManager.default.fileExists(atPath: fx.spool + "/events.jsonl.3"), "events.jsonl was rotated meanwhile")
        // A daemon that does not answer in time (stopped by SIGSTOP): exit 5, and the file waits.
        let pid = try XCTUnwrap(fx.daemon?.processIdentifier)
        XCTAssertEqual(kill(pid, SIGSTOP), 0)
        (rc, out) = try fx.cli(["cancel", "w", "--wait", "--timeout", "0.5", "--spool", fx.spool])
        XCTAssertEqual(kill(pid, SIGCONT), 0)
        XCTAssertEqual(rc, 5, out)
        XCTAssertTrue(out.hasSuffix("tilespool: no answer from the daemon within 0.5 s (control/w.cancel is still waiting); it may still act on it\n"), out)
        try waitUntil("the daemon took the cancel", timeout: 10) { fx.names(in: fx.spool + "/control").isEmpty }
        // A refresh that fails (the server is gone, no retries): exit 4 with the error.
        server.stop()
        (rc, out) = try run(["refresh", "w"])
        XCTAssertEqual(rc, 4, out)
        XCTAssertTrue(out.contains("w: refresh started\n") && out.contains("tilespool: w: refresh failed: networkError: "), out)
        XCTAssertEqual(fx.state("w"), "completed")
        // A status the daemon has no region for (copied by hand, its id made its own name: a
        // status whose id is not its file's name is no status): it refuses the control file.
        var ghost = try XCTUnwrap(fx.status("w"))
        ghost["id"] = "ghost"
        try JSONSerialization.data(withJSONObject: ghost).write(to: URL(fileURLWithPath: fx.spool + "/status/ghost.json"))
        (rc, out) = try run(["pause", "ghost"])
        XCTAssertEqual(rc, 3, out)
        XCTAssertTrue(out.hasSuffix("tilespool: the daemon refused control/ghost.pause: no region with id 'ghost'\n"), out)
        (rc, out) = try run(["delete", "w"])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.hasSuffix("w: deleted\n"), out)
        XCTAssertNil(fx.state("w"))
    }

    /// `plan` reads a request as `submit` does: `-` is standard input, and a file over 1 MiB is
    /// refused in the daemon's words (`invalidRequest`), not as `read FILE: EFBIG` (attack round 12).
    func testPlanReadsStandardInputAndRefusesABigFileAsTheDaemonDoes() throws {
        let dir = try TestScratch.folder("plan-read")
        let big = dir.appendingPathComponent("big.json")
        try Data(repeating: 0x20, count: 1_048_577).write(to: big) // 1 MiB and a byte
        var (rc, out) = try runTool(SpoolFixture.binary, ["plan", big.path])
        XCTAssertEqual(rc, 1, out)
        XCTAssertEqual(out, "tilespool: invalidRequest: the request file is larger than 1048576 bytes\n")
        let request = dir.appendingPathComponent("in.json")
        try Data(#"{"id":"s","tiles":["http://127.0.0.1:9/{z}/{x}/{y}.png"],"bounds":[0,0,1,1],"minZoom":0,"maxZoom":2}"#.utf8).write(to: request)
        (rc, out) = try runTool("/bin/sh", ["-c", "exec \"$0\" plan - < \"$1\"", SpoolFixture.binary, request.path])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.hasPrefix("plan for s: 3 resources, 3 tiles"), out)
    }

    /// A daemon that stops while an action waits for its answer: `--wait` says so and exits 5
    /// within about a second, not after its whole `--timeout` (600 s by default; attack round 10).
    func testWaitEndsWhenTheDaemonStops() throws {
        try fx.start()
        try fx.drop("w.json", server.tilesRequest(["/slow/30/w/{z}/{x}/{y}.png"], id: "w", maxZoom: 4))
        try fx.waitForState("w", "downloading")
        let daemon = try XCTUnwrap(fx.daemon)
        XCTAssertEqual(kill(daemon.processIdentifier, SIGSTOP), 0) // holds its lock, answers nothing
        let p = Process()
        p.executableURL = URL(fileURLWithPath: SpoolFixture.binary)
        p.arguments = ["pause", "w", "--wait", "--timeout", "60", "--spool", fx.spool]
        let pipe = Pipe()
        p.standardOutput = pipe
        p.standardError = pipe
        try p.run()
        try waitUntil("the pause is dropped", timeout: 10) { FileManager.default.fileExists(atPath: fx.spool + "/control/w.pause") }
        XCTAssertEqual(kill(daemon.processIdentifier, SIGKILL), 0)
        // Well before its --timeout of 60 s (which the old code waited out).
        try waitUntil("pause --wait returns", timeout: 20) { !p.isRunning }
        let out = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        XCTAssertEqual(p.terminationStatus, 5, out)
        XCTAssertTrue(out.contains("tilespool: the daemon stopped before answering (control/w.pause waits for its next start)"), out)
    }

    /// Issue 29: docs/refresh.md's shell loop that waits for a refresh returns (the recipe it
    /// replaces, `tail -F | jq | head -n1 &` then `wait $!`, never did), run as written from the
    /// page on a spool named `spool` with a region `monaco`.
    func testTheRefreshWaitShellLoopInTheDocsReturns() throws {
        let page = try String(contentsOf: MapData.packageRoot.appendingPathComponent("docs/refresh.md"), encoding: .utf8)
        let blocks = page.components(separatedBy: "```sh\n").dropFirst().map { $0.components(separatedBy: "```")[0] }
        let loop = try XCTUnwrap(blocks.first { $0.contains("tail -c +$((before + 1))") }, "the shell loop is in docs/refresh.md")
        try fx.start()
        try fx.drop("monaco.json", server.tilesRequest(["/ok/monaco/{z}/{x}/{y}.png"], id: "monaco", maxZoom: 2))
        try fx.waitForState("monaco", "completed")
        func runLoop() throws -> String {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/bin/bash")
            p.arguments = ["-c", loop]
            p.currentDirectoryURL = fx.root
            let pipe = Pipe()
            p.standardOutput = pipe
            p.standardError = pipe
            try p.run()
            var returned = false
            defer { if !returned { p.terminate() } }
            try waitUntil("the documented loop returns", timeout: 60) { !p.isRunning }
            returned = true
            XCTAssertEqual(p.terminationStatus, 0)
            return String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        }
        var out = try runLoop()
        XCTAssertTrue(out.hasPrefix("finished\n"), out)
        XCTAssertTrue(out.contains("\"resourcesChecked\": 21"), out)
        // A refresh that does not apply (the region is paused) answers too.
        try fx.drop("monaco.json", server.tilesRequest(["/slow/200/monaco/{z}/{x}/{y}.png"], id: "monaco", maxZoom: 3))
        try fx.waitForState("monaco", "downloading")
        let (rc, text) = try fx.cli(["pause", "monaco", "--wait", "--spool", fx.spool])
        XCTAssertEqual(rc, 0, text)
        out = try runLoop()
        XCTAssertTrue(out.hasPrefix("ignored: refresh applies to completed regions, not pausedUser\n"), out)
    }

    func testEveryCommandExplainsItselfAndRefusesUnknownOptions() throws {
        for command in ["run", "status", "pause", "resume", "cancel", "delete", "gc", "verify", "plan", "submit", "get"] {
            let (rc, out) = try fx.cli([command, "--help"])
            XCTAssertEqual(rc, 0, out)
            XCTAssertTrue(out.hasPrefix("usage: tilespool \(command)"), out)
            XCTAssertTrue(out.contains("--spool"), "\(command) --help names --spool")
            let (rc2, out2) = try fx.cli([command, "--no-such-option"])
            XCTAssertEqual(rc2, 2, out2)
            XCTAssertTrue(out2.contains("unknown option --no-such-option"), out2)
        }
        let (rc, out) = try fx.cli(["--help"])
        XCTAssertEqual(rc, 0)
        for command in ["run", "status", "gc", "verify", "plan", "submit", "get"] { XCTAssertTrue(out.contains("  \(command)"), command) }
        XCTAssertEqual(try fx.cli(["frobnicate"]).0, 2)
    }
}

/// `tilespool plan`: exact counts from the style and TileJSON alone, nothing written.
final class PlanCommandTests: XCTestCase {
    /// plan refuses what the daemon refuses, with the same code: a policy host (lifted by
    /// --allow-host) and a plan over maxTiles or --max-tiles (printed, then refused).
    func testPlanRefusesWhatTheDaemonRefuses() throws {
        let fx = try SpoolFixture()
        let file = fx.root.appendingPathComponent("osm.json")
        func write(_ o: [String: Any]) throws { try JSONSerialization.data(withJSONObject: o).write(to: file) }
        try write(["tiles": ["https://{s}.tile.openstreetmap.org/{z}/{x}/{y}.png"], "bounds": [7.4, 43.7, 7.5, 43.8], "minZoom": 0, "maxZoom": 3])
        var (rc, out) = try fx.cli(["plan", file.path])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("policyRefused") && out.contains("https://operations.osmfoundation.org/policies/tiles/"), out)
        // `{s}` takes a, b and c (issue 29: not only `a`): allowing `a` alone leaves b refused.
        (rc, out) = try fx.cli(["plan", file.path, "--allow-host", "a.tile.openstreetmap.org"])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("policyRefused: b.tile.openstreetmap.org"), out)
        (rc, out) = try fx.cli(["plan", file.path] + ["a", "b", "c"].flatMap { ["--allow-host", "\($0).tile.openstreetmap.org"] })
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.contains("plan for osm: 4 resources, 4 tiles"), out)
        try write(["tiles": ["https://tiles.example.org/{z}/{x}/{y}.png"], "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 3, "maxTiles": 50])
        (rc, out) = try fx.cli(["plan", file.path])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("plan for osm: 85 resources, 85 tiles") && out.contains("tileLimitExceeded") && out.contains("maxTiles (50)"), out)
        (rc, out) = try fx.cli(["plan", "--max-tiles", "20", file.path, "--json"])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("--max-tiles (20)"), out)
    }

    func testPlanOfBrightOverMonacoFetchesOnlyTheStyleAndTileJSON() throws {
        let nginx = try NginxServer(root: try MapData.require())
        defer { nginx.stop() }
        let fx = try SpoolFixture()
        let request = fx.root.appendingPathComponent("monaco.json")
        try JSONSerialization.data(withJSONObject: ["style": nginx.baseURL + "/styles/bright/style.local-template.json",
                                                    "bounds": [7.409205, 43.72335, 7.448637, 43.75169], "minZoom": 0, "maxZoom": 14])
            .write(to: request)
        var (rc, out) = try fx.cli(["plan", request.path, "--json"])
        XCTAssertEqual(rc, 0, out)
        let o = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: Any])
        XCTAssertEqual(o["resources"] as? Int, 419)
        XCTAssertEqual(o["tiles"] as? Int, 23)
        XCTAssertEqual((o["byKind"] as? [String: Int])?["glyphs"], 390)
        let zooms = ((o["bySource"] as? [String: Any])?["openmaptiles"] as? [String: Any])?["byZoom"] as? [String: Int]
        XCTAssertEqual(zooms?["14"], 6)
        XCTAssertEqual(zooms?["13"], 4)
        (rc, out) = try fx.cli(["--spool", fx.spool, "plan", request.path])
        XCTAssertEqual(rc, 2, "a command comes first: \(out)")
        (rc, out) = try fx.cli(["plan", "--spool", fx.spool, request.path])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.contains("plan for monaco: 419 resources, 23 tiles"), out)
        XCTAssertTrue(out.contains("    z14: 6"), out)
        try waitUntil("access log", timeout: 10) { nginx.accessLog().count >= 4 }
        XCTAssertEqual(Set(nginx.accessLog().map(\.path)), ["/styles/bright/style.local-template.json", "/tiles/monaco.tilejson.json"])
        XCTAssertFalse(FileManager.default.fileExists(atPath: fx.store), "plan writes nothing")
    }
}

/// Issue 29: errors read as `tilespool: CODE: message` and transfer failures as words, never as
/// Swift's dump of a value (`RegionError(code: ...)`, `network("...")`).
final class CLIErrorTextTests: FaultServerSpoolTestCase {
    func testPlanPrintsCodeAndMessageNotASwiftDump() throws {
        try server.register("plan-bad-style", json: #"{"version": 8, "sources": 3, "layers": []}"#)
        let file = fx.root.appendingPathComponent("bad.json")
        try JSONSerialization.data(withJSONObject: ["style": server.url("/json/plan-bad-style"), "bounds": [0, 0, 1, 1], "minZoom": 0, "maxZoom": 1])
            .write(to: file)
        var (rc, out) = try fx.cli(["plan", file.path])
        XCTAssertEqual(rc, 1, out)
        XCTAssertEqual(out, "tilespool: invalidStyle: style: 'sources' must be an object\n")
        // A server that cannot be reached (nothing listens on port 9 of loopback).
        try JSONSerialization.data(withJSONObject: ["style": "http://127.0.0.1:9/style.json", "bounds": [0, 0, 1, 1], "minZoom": 0, "maxZoom": 1])
            .write(to: file)
        (rc, out) = try fx.cli(["plan", file.path])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.hasPrefix("tilespool: cannot fetch http://127.0.0.1:9/style.json: network error: "), out)
        XCTAssertFalse(out.contains("network(") || out.contains("\\'"), out)
    }
}

/// Issue 29: `--wait` reads events.jsonl from the point it was dropped at, across rotations.
final class EventsFollowerTests: XCTestCase {
    func testFollowsAppendsAndRotationsInOrder() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("events-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/events.jsonl"
        func append(_ file: String, _ n: Int) throws {
            let h = FileHandle(forWritingAtPath: file) ?? { FileManager.default.createFile(atPath: file, contents: nil); return FileHandle(forWritingAtPath: file)! }()
            h.seekToEndOfFile()
            h.write(Data("{\"n\":\(n)}\n".utf8))
            try h.close()
        }
        func ns(_ events: [[String: Any]]) -> [Int] { events.compactMap { $0["n"] as? Int } }
        let early = EventsFollower(path: path) // no file yet: read from its start once made
        try append(path, 0)
        let f = EventsFollower(path: path)     // from the end: line 0 is before it
        XCTAssertEqual(ns(early.poll()), [0])
        XCTAssertEqual(ns(f.poll()), [])
        try append(path, 1)
        // Two rotations between two polls, as the daemon does them (events-keep 3).
        XCTAssertEqual(rename(path, path + ".1"), 0)
        try append(path, 2)
        XCTAssertEqual(rename(path + ".1", path + ".2"), 0)
        XCTAssertEqual(rename(path, path + ".1"), 0)
        try append(path, 3)
        // A half-written line waits for its newline.
        let h = FileHandle(forWritingAtPath: path)!
        h.seekToEndOfFile()
        h.write(Data("{\"n\":".utf8))
        XCTAssertEqual(ns(f.poll()), [1, 2, 3])
        h.write(Data("4}\n".utf8))
        try h.close()
        XCTAssertEqual(ns(f.poll()), [4])
        XCTAssertEqual(ns(early.poll()), [1, 2, 3, 4])

        // Attack round 2: the daemon rotates again while a poll is between opening the new file
        // and listing the rotated ones (--events-max-bytes small, --wait missed its answer).
        try append(path, 5)
        XCTAssertEqual(rename(path + ".2", path + ".3"), 0)
        XCTAssertEqual(rename(path + ".1", path + ".2"), 0)
        XCTAssertEqual(rename(path, path + ".1"), 0)
        try append(path, 6)             // the file the next poll opens as the newest
        var rotations = 0 // once: the poll reads on after it and would meet the hook again
        f.beforeListingRotated = {
            rotations += 1
            guard rotations == 1 else { return }
            try? FileManager.default.removeItem(atPath: path + ".3")
            _ = rename(path + ".2", path + ".3")
            _ = rename(path + ".1", path + ".2")
            _ = rename(path, path + ".1")
            try? append(path, 7)
        }
        XCTAssertEqual(ns(f.poll()), [5, 6, 7])
        XCTAssertGreaterThanOrEqual(rotations, 1)
        f.beforeListingRotated = nil
        try append(path, 8)
        XCTAssertEqual(ns(f.poll()), [8])
    }
}

/// Issue 29: README's examples call `tilespool`; from a fresh clone it is not on PATH. The README
/// says how to put it there before its first example, and doing what it says works.
final class ReadmeTests: XCTestCase {
    func testReadmePutsTilespoolOnPATHBeforeItsFirstExample() throws {
        let readme = try String(contentsOf: MapData.packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let lines = readme.components(separatedBy: "\n")
        let firstExample = try XCTUnwrap(lines.firstIndex { $0.hasPrefix("tilespool ") && !$0.hasPrefix("tilespool --version") })
        let setup = try XCTUnwrap(lines.firstIndex { $0.hasPrefix("export PATH=") }, "README says how to put tilespool on PATH")
        XCTAssertLessThan(setup, firstExample, "before the first example: \(lines[firstExample])")
        // Run as written, from the package folder, in a shell whose PATH has no tilespool.
        let line = lines[setup].components(separatedBy: "#")[0]
        let (rc, out) = try runTool("/bin/bash", ["-c", line + "\ncommand -v tilespool && tilespool --version"],
                                    env: ["PATH": "/usr/bin:/bin"], cwd: MapData.packageRoot.path)
        XCTAssertEqual(rc, 0, out)
        let found = out.components(separatedBy: "\n")[0]
        XCTAssertEqual(URL(fileURLWithPath: found).resolvingSymlinksInPath().path,
                       URL(fileURLWithPath: SpoolFixture.binary).resolvingSymlinksInPath().path, out)
        XCTAssertTrue(out.contains("tilespool 0.1.0"), out)
    }
}

/// The contract and the code in step: the options `tilespool run --help` lists are the rows of
/// contract.md's "Options of `run`" table, no more, no fewer (the table once listed
/// `--download-threads`, removed from the code long before).
final class ContractInStepTests: XCTestCase {
    func testRunOptionsInTheContractAreTheOnesRunAccepts() throws {
        let contract = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/contract.md")
        let text = try String(contentsOf: contract, encoding: .utf8)
        let start = try XCTUnwrap(text.range(of: "Options of `run`:"))
        var documented = Set<String>()
        var inTable = false
        for line in text[start.upperBound...].split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("|") { inTable = true } else if inTable { break } else { continue }
            guard line.hasPrefix("| `--"), let name = line.dropFirst(3).split(whereSeparator: { $0 == " " || $0 == "`" }).first else { continue }
            documented.insert(String(name))
        }
        let (rc, help) = try runTool(SpoolFixture.binary, ["run", "--help"])
        XCTAssertEqual(rc, 0, help)
        let common: Set<String> = ["--spool", "--store", "--s3-endpoint", "--s3-addressing"] // contract.md's table of every command's options
        let listed = Set(help.split(separator: "\n").filter { $0.hasPrefix("  --") }
            .compactMap { $0.split(separator: " ").first.map(String.init) }).subtracting(common)
        XCTAssertGreaterThan(listed.count, 20)
        XCTAssertEqual(listed.subtracting(documented).sorted(), [], "in run --help, not in contract.md")
        XCTAssertEqual(documented.subtracting(listed).sorted(), [], "in contract.md, not in run --help")
    }
}

/// Relative paths of one component that do not exist yet (attack round 61: `tilespool run --spool
/// S4 --store U` crashed, exit 132, in Foundation's `deletingLastPathComponent`, and left its
/// lock behind).
final class RelativePathTests: XCTestCase {
    func testRunMakesARelativeStoreAndSpoolOfOneComponent() throws {
        let cwd = try TestScratch.folder("relative-store")
        let p = Process()
        p.executableURL = URL(fileURLWithPath: SpoolFixture.binary)
        p.arguments = ["run", "--spool", "S", "--store", "U", "--metrics-file", "m.prom"]
        p.currentDirectoryURL = cwd
        let log = cwd.appendingPathComponent("daemon.log")
        FileManager.default.createFile(atPath: log.path, contents: nil)
        let handle = try FileHandle(forWritingTo: log)
        p.standardOutput = handle
        p.standardError = handle
        try p.run()
        defer { if p.isRunning { kill(p.processIdentifier, SIGKILL); p.waitUntilExit() } }
        try waitUntil("the daemon watches S", timeout: 30) {
            !p.isRunning || ((try? String(contentsOf: log, encoding: .utf8)) ?? "").contains("watching ")
        }
        XCTAssertTrue(p.isRunning, (try? String(contentsOf: log, encoding: .utf8)) ?? "")
        kill(p.processIdentifier, SIGTERM)
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 0, (try? String(contentsOf: log, encoding: .utf8)) ?? "")
        for folder in ["S/requests", "S/status", "U/regions"] {
            XCTAssertTrue(FileManager.default.fileExists(atPath: cwd.appendingPathComponent(folder).path), folder)
        }
    }
}
