import Foundation
import Glibc
import XCTest

/// Issue 4, "The watch folder": inotify events are hints. Files present at start-up are picked up,
/// a flood of requests is accepted exactly once each (also when the kernel's event queue
/// overflows and events are lost), a file is read only once it is complete (closed after writing,
/// or renamed/moved in), dotfiles are left alone, and names not ending in `.json` go to rejected/
/// once settled (issue 29).
final class WatchFolderTests: FaultServerSpoolTestCase {
    /// A 1-tile request (z0 of the world) against `/ok/<tag>/...`.
    func request(_ tag: String, id: String? = nil) -> [String: Any] { server.tilesRequest(["/ok/\(tag)/{z}/{x}/{y}.png"], id: id) }

    /// The states `events.jsonl` shows for every id, in order.
    func statesByID() -> [String: [String]] {
        var out: [String: [String]] = [:]
        for e in fx.events() { if let id = e["id"] as? String, let s = e["state"] as? String { out[id, default: []].append(s) } }
        return out
    }

    func testFilesPresentBeforeTheDaemonStartsArePickedUp() throws {
        try fx.makeFolder(fx.requestsDir)
        try fx.writeInPlace("early-a.json", jsonData(request("early-a")))
        try fx.drop("early-b.json", request("early-b"))
        try fx.writeInPlace("named whatever.json", jsonData(request("early-c", id: "early-c")))
        try fx.writeInPlace("early-bad.json", Data("{".utf8))
        try fx.writeInPlace(".early-hidden.json", jsonData(request("early-hidden")))
        try fx.start(["--sync-interval", "0.1"])
        for id in ["early-a", "early-b", "early-c"] {
            try fx.waitForState(id, "completed", timeout: 20)
            try fx.waitForEvent(id, "completed")
            XCTAssertEqual(fx.eventStates(id), ["queued", "downloading", "completed"], id)
            fx.assertStoreMatchesManifest(id)
        }
        try fx.waitForState("early-bad", "failed", timeout: 10)
        XCTAssertEqual(fx.errorCode("early-bad"), "invalidRequest")
        XCTAssertTrue(fx.inRejected("early-bad.json"))
        XCTAssertEqual(fx.names(in: fx.requestsDir).sorted(), [".early-hidden.json"], "only the dotfile stays")
        XCTAssertNil(fx.state("early-hidden"))
    }

    /// Drops `count` 1-tile requests as fast as renames go (each written as a dotfile first).
    func prepare(_ ids: [String]) throws {
        for id in ids {
            // Empty tiles (204) keep the flood cheap; allowEmpty lets such a region complete.
            var r = server.tilesRequest(["/empty/flood/{z}/{x}/{y}.png"], id: nil)
            r["allowEmpty"] = true
            try jsonData(r).write(to: URL(fileURLWithPath: fx.requestsDir + "/.prep-" + id))
        }
    }

    func moveIn(_ ids: [String]) {
        for id in ids { XCTAssertEqual(rename(fx.requestsDir + "/.prep-" + id, fx.requestsDir + "/\(id).json"), 0) }
    }

    /// Every id queued exactly once and completed exactly once, with nothing rejected or left over.
    func assertEachAcceptedOnce(_ ids: [String], file: StaticString = #filePath, line: UInt = #line) throws {
        try waitUntil("all \(ids.count) complete", timeout: 90, poll: 0.2, file: file, line: line) {
            if let d = fx.daemon, !d.isRunning { XCTFail("daemon exited: \(fx.log().suffix(2000))"); return true }
            return fx.events().filter { ($0["state"] as? String) == "completed" }.count >= ids.count
        }
        let states = statesByID()
        for id in ids {
            let s = states[id] ?? []
            XCTAssertEqual(s.filter { $0 == "queued" }.count, 1, "\(id) queued \(s)", file: file, line: line)
            XCTAssertEqual(s.last, "completed", "\(id): \(s)", file: file, line: line)
        }
        XCTAssertEqual(Set(states.keys), Set(ids), "events for ids never dropped", file: file, line: line)
        let notCompleted = ids.filter { fx.state($0) != "completed" }
        XCTAssertEqual(notCompleted, [], "status files", file: file, line: line)
        XCTAssertEqual(fx.names(in: fx.requestsDir).filter { !$0.hasPrefix(".") }, [], "left in requests/", file: file, line: line)
        XCTAssertEqual(fx.names(in: fx.rejectedDir), [], "rejected", file: file, line: line)
        XCTAssertEqual(server.hits("/empty/flood/0/0/0.png"), ids.count, "each request's tile fetched once", file: file, line: line)
    }

    /// 2,000 requests dropped at once into a running daemon: each accepted exactly once.
    func testTwoThousandRequestsDroppedAtOnceAreEachAcceptedOnce() throws {
        try fx.start(["--max-active-regions", "200", "--sync-interval", "0.05"])
        let ids = (0..<2000).map { String(format: "flood-%04d", $0) }
        try prepare(ids)
        moveIn(ids)
        try assertEachAcceptedOnce(ids)
        let p = fx.progress("flood-1999")
        XCTAssertEqual(p["tilesCompleted"], 1)
        XCTAssertEqual(fx.manifest("flood-1999").map(\.sha), ["-"], "a 204 is an empty tile")
    }

    /// The kernel queue holds `max_queued_events` (16,384) events; past that they are lost and the
    /// daemon gets IN_Q_OVERFLOW. The daemon is frozen (SIGSTOP, as a busy or swapped-out daemon
    /// would be) while 1,000 requests arrive, then more other events than the queue holds, then
    /// 1,000 more requests whose events are lost: the rescan after the overflow must find them, and
    /// nothing is accepted twice.
    func testRequestsWhoseEventsAreLostToAQueueOverflowAreFoundByARescan() throws {
        try fx.start(["--max-active-regions", "200", "--sync-interval", "0.05"])
        let first = (0..<1000).map { String(format: "ovf-a-%04d", $0) }
        let second = (0..<1000).map { String(format: "ovf-b-%04d", $0) }
        try prepare(first + second)
        let noise = [fx.requestsDir + "/.noise-0", fx.requestsDir + "/.noise-1"]
        for n in noise { _ = FileManager.default.createFile(atPath: n, contents: nil) }
        let pid = try XCTUnwrap(fx.daemon?.processIdentifier)
        XCTAssertEqual(kill(pid, SIGSTOP), 0)
        var continued = false
        defer { if !continued { kill(pid, SIGCONT) } }
        moveIn(first)
        // More close-after-write events than the queue holds, on two dotfiles, alternating so the
        // kernel cannot merge them.
        let queueSize = Int((try? String(contentsOfFile: "/proc/sys/fs/inotify/max_queued_events", encoding: .utf8))?
            .trimmingCharacters(in: .whitespacesAndNewlines) ?? "") ?? 16_384
        for i in 0..<(queueSize + 1000) {
            let fd = open(noise[i & 1], O_WRONLY)
            close(fd)
        }
        moveIn(second)
        XCTAssertEqual(kill(pid, SIGCONT), 0)
        continued = true
        try assertEachAcceptedOnce(first + second)
        XCTAssertTrue(fx.log().contains("inotify queue overflowed"), "the queue did overflow (else this test proves less)")
    }

    /// A file written slowly in place (half, pause, rest, close) is read only after close.
    func testFileWrittenSlowlyInPlaceIsReadOnlyAfterClose() throws {
        try fx.start(["--sync-interval", "0.1"])
        let data = jsonData(request("slow"))
        let half = data.count / 2
        let fd = open(fx.requestsDir + "/slow.json", O_WRONLY | O_CREAT | O_EXCL, 0o644)
        XCTAssertGreaterThanOrEqual(fd, 0)
        try writeAll(fd, data.prefix(half))
        // The pause, part of the scenario: the daemon meanwhile handles another request, start to end.
        let pauseEnds = Date().addingTimeInterval(1.0)
        try fx.drop("meanwhile.json", request("meanwhile"))
        try fx.waitForState("meanwhile", "completed", timeout: 20)
        while Date() < pauseEnds {
            XCTAssertTrue(fx.inRequests("slow.json"), "the half-written file was taken")
            XCTAssertNil(fx.state("slow"), "the half-written file was read")
            Thread.sleep(forTimeInterval: 0.05)
        }
        try writeAll(fd, data.suffix(from: half))
        close(fd)
        try fx.waitForState("slow", "completed", timeout: 20)
        try fx.waitForEvent("slow", "completed")
        XCTAssertEqual(fx.eventStates("slow"), ["queued", "downloading", "completed"], "never a failed invalidRequest")
        XCTAssertFalse(fx.inRejected("slow.json"))
        fx.assertStoreMatchesManifest("slow")
    }

    /// An editor's save: a probe file, a swap file, a temp file written in full, then renamed over
    /// the request's name.
    func testEditorStyleWriteTempFileThenRename() throws {
        try fx.start(["--sync-interval", "0.1"])
        // vim probes that it may write with a file named 4913, then removes it.
        _ = FileManager.default.createFile(atPath: fx.requestsDir + "/4913", contents: nil)
        unlink(fx.requestsDir + "/4913")
        try fx.writeInPlace(".edited.json.swp", Data("swap file junk".utf8))
        try fx.writeInPlace("edited.json.tmp", Data())
        // The temp file is written in several writes, like an editor flushing its buffer.
        let fd = open(fx.requestsDir + "/edited.json.tmp", O_WRONLY | O_TRUNC)
        let data = jsonData(request("edited"))
        for chunk in stride(from: 0, to: data.count, by: 16) { try writeAll(fd, data[chunk..<min(chunk + 16, data.count)]) }
        close(fd)
        XCTAssertEqual(rename(fx.requestsDir + "/edited.json.tmp", fx.requestsDir + "/edited.json"), 0)
        unlink(fx.requestsDir + "/.edited.json.swp")
        try fx.waitForState("edited", "completed", timeout: 20)
        try fx.waitForEvent("edited", "completed")
        XCTAssertEqual(fx.eventStates("edited"), ["queued", "downloading", "completed"])
        XCTAssertEqual(fx.names(in: fx.rejectedDir), [])
        XCTAssertEqual(fx.names(in: fx.requestsDir), [])
        fx.assertStoreMatchesManifest("edited")
    }

    /// A request written in full elsewhere on the same filesystem, then moved in with `mv`.
    func testRequestMovedInFromAnotherFolder() throws {
        try fx.start(["--sync-interval", "0.1"])
        let outbox = fx.root.path + "/outbox"
        try fx.makeFolder(outbox)
        // Written slowly there: the daemon does not watch that folder, so it sees only the move.
        let fd = open(outbox + "/moved.json", O_WRONLY | O_CREAT, 0o644)
        try writeAll(fd, jsonData(request("moved")))
        close(fd)
        let inSpool = fx.spool + "/drafts"
        try fx.makeFolder(inSpool)
        try jsonData(request("moved2")).write(to: URL(fileURLWithPath: inSpool + "/moved2.json"))
        XCTAssertEqual(rename(outbox + "/moved.json", fx.requestsDir + "/moved.json"), 0)
        XCTAssertEqual(rename(inSpool + "/moved2.json", fx.requestsDir + "/moved2.json"), 0)
        for id in ["moved", "moved2"] {
            try fx.waitForState(id, "completed", timeout: 20)
            try fx.waitForEvent(id, "completed")
            XCTAssertEqual(fx.eventStates(id), ["queued", "downloading", "completed"])
            fx.assertStoreMatchesManifest(id)
        }
    }

    /// `--settle-time`: a misnamed file is rejected only once it has gone that long unmodified.
    /// With 1,000 s, one last modified 100 s ago (the default 3 s would reject it) is still in
    /// requests/ after a rescan has run: a request hard-linked in after it, which only a rescan
    /// finds (no close event), is accepted and completed first.
    func testSettleTimeHoldsBackAMisnamedFile() throws {
        try fx.start(["--sync-interval", "0.1", "--rescan-interval", "0.3", "--settle-time", "1000"])
        try fx.writeInPlace("notes.txt", Data("not a request".utf8))
        try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSinceNow: -100)], ofItemAtPath: fx.requestsDir + "/notes.txt")
        let outside = fx.root.appendingPathComponent("linked.json").path
        try jsonData(request("linked", id: "linked")).write(to: URL(fileURLWithPath: outside))
        XCTAssertEqual(link(outside, fx.requestsDir + "/linked.json"), 0)
        try fx.waitForState("linked", "completed", timeout: 20)
        XCTAssertTrue(fx.inRequests("notes.txt"), "rejected before its settle time")
        XCTAssertFalse(fx.inRejected("notes.txt"))
    }

    /// Dotfiles are left alone, while running and at start-up. A regular file whose name does not
    /// end in `.json` (`X.JSON`, `a.geojson`, `b.json.txt`) is not a request: once settled (closed,
    /// and unmodified for the settle time) a periodic rescan moves it to `rejected/` with the
    /// reason, never its close event; a temp file a writer still holds open stays, and becomes a
    /// request when renamed to `.json`.
    func testDotfilesAreIgnoredAndMisnamedRequestsAreRejectedOnceSettled() throws {
        try fx.start(["--sync-interval", "0.1", "--rescan-interval", "0.5"])
        let misnamed = ["readme.txt", "x.json.bak", "X.JSON", "y.Json", "a.geojson", "b.json.txt", "json", "a.json.tmp", "b.json~", "#c.json#"]
        let dotfiles = [".hidden.json", ".json", ".notes.txt"]
        let content = jsonData(request("misnamed"))
        let hourAgo = Date(timeIntervalSinceNow: -3600)
        // A writer's temp file, complete but still open for writing, unmodified for an hour: its
        // age is set first, so any rescan that refuses the files below saw it that old too.
        let held = open(fx.requestsDir + "/held.json.tmp", O_WRONLY | O_CREAT | O_EXCL, 0o644)
        XCTAssertGreaterThanOrEqual(held, 0)
        try writeAll(held, jsonData(request("held", id: "held")))
        try FileManager.default.setAttributes([.modificationDate: hourAgo], ofItemAtPath: fx.requestsDir + "/held.json.tmp")
        for name in misnamed + dotfiles {
            try fx.writeInPlace(name, content)
            try FileManager.default.setAttributes([.modificationDate: hourAgo], ofItemAtPath: fx.requestsDir + "/" + name)
        }
        try waitUntil("a rescan moved the misnamed files to rejected/", timeout: 20) {
            misnamed.allSatisfy { fx.inRejected($0) && fx.rejectionText($0) != nil }
        }
        for name in misnamed {
            XCTAssertEqual(fx.rejectionText(name), "invalidRequest: request files must end in .json (lower case), and '\(name)' does not; rename it to <id>.json to have it read (write a dotfile, then mv)\n")
            XCTAssertEqual(FileManager.default.contents(atPath: fx.rejectedDir + "/" + name), content, name)
        }
        XCTAssertEqual(Set(fx.names(in: fx.requestsDir)), Set(dotfiles + ["held.json.tmp"]), "dotfiles and the open temp file stay")
        XCTAssertEqual(fx.names(in: fx.spool + "/status").filter { !$0.hasPrefix(".") }, [], "no status for a file that is not a request")
        XCTAssertEqual(server.hits("/ok/misnamed/0/0/0.png"), 0)
        // The writer renames its temp file to its final name, then closes it: a request.
        XCTAssertEqual(rename(fx.requestsDir + "/held.json.tmp", fx.requestsDir + "/held.json"), 0)
        close(held)
        try fx.waitForState("held", "completed", timeout: 20)
        XCTAssertFalse(fx.inRejected("held.json.tmp") || fx.inRejected("held.json"))
        // The start-up scan leaves the dotfiles alone too.
        fx.stop()
        try fx.start(["--sync-interval", "0.1"])
        try fx.drop("barrier.json", request("barrier"))
        try fx.waitForState("barrier", "completed", timeout: 20)
        XCTAssertEqual(Set(fx.names(in: fx.requestsDir)), Set(dotfiles), "after a restart")
        for name in dotfiles { XCTAssertEqual(FileManager.default.contents(atPath: fx.requestsDir + "/" + name), content, name) }
        XCTAssertEqual(server.hits("/ok/misnamed/0/0/0.png"), 0)
    }
}
