// Issue 30, done means: kill -9 at 20 random moments during a repack, and a full disk during one.
import Foundation
import Glibc
import XCTest
@testable import TileSpoolCore
@testable import TileSpoolIO

/// `tilespool gc` repacking a store (a region referencing every second object, so each pack is
/// half dead), killed at 20 moments spread over its run, each time on a fresh copy of the same
/// store: after each kill the independent reader finds every pack intact and every referenced
/// object in one, and `verify` reports no missing or bad object; a gc run to the end afterwards
/// leaves `verify` clean (the killed gc's temp pack removed) and gives back at least 90% of the
/// dead bytes.
final class RepackCrashTests: XCTestCase {
    var root: String!
    override func setUpWithError() throws {
        root = FileManager.default.temporaryDirectory.appendingPathComponent("repack-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: root + "/spool", withIntermediateDirectories: true)
    }
    override func tearDown() { if ProcessInfo.processInfo.environment["TILESPOOL_KEEP_TMP"] == nil { try? FileManager.default.removeItem(atPath: root) } }

    /// 2,000 distinct bodies of 2-8 KiB (pseudo-random bytes), in 5 packs; region `keep`
    /// references the even ones. Returns the referenced SHA-256s and the live and dead payload.
    func makeStore(_ path: String, count: Int = 2000, sizes: (base: Int, spread: Int) = (2048, 6144), packEvery: Int = 400) throws -> (live: Set<String>, liveBytes: Int, deadBytes: Int) {
        let store = try PackedStore(root: path)
        var live = Set<String>(), liveBytes = 0, deadBytes = 0
        var lines: [ManifestLine] = []
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        for i in 0..<count {
            var body = Data(count: sizes.base + (i * 3077) % sizes.spread)
            body.withUnsafeMutableBytes { raw in
                for k in 0..<raw.count {
                    state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                    raw[k] = UInt8(truncatingIfNeeded: state >> 56)
                }
            }
            let (sha, _) = try store.put(body)
            if i % 2 == 0 {
                live.insert(sha); liveBytes += body.count
                lines.append(ManifestLine(kind: .tile, sha256: sha, bytes: body.count, key: "t/12/\(i)/0", url: "http://x/12/\(i)/0"))
            } else {
                deadBytes += body.count
            }
            if i % packEvery == packEvery - 1 { try store.sync() }
        }
        try FileManager.default.createDirectory(atPath: path + "/regions/keep", withIntermediateDirectories: true)
        try store.region("keep").appendToManifest(lines)
        return (live, liveBytes, deadBytes)
    }

    func packBytes(_ store: String) -> Int {
        var total = 0
        let e = FileManager.default.enumerator(atPath: store + "/packs")
        while let name = e?.nextObject() as? String {
            guard name.hasSuffix(".pack") else { continue }
            total += ((try? FileManager.default.attributesOfItem(atPath: store + "/packs/" + name))?[.size] as? Int) ?? 0
        }
        return total
    }

    func tilespool(_ args: [String]) throws -> (Int32, String) { try runTool(SpoolFixture.binary, args) }

    func testKill9AtTwentyMomentsOfARepackLosesNothing() throws {
        let original = root + "/original"
        let (live, liveBytes, deadBytes) = try makeStore(original)
        let before = packBytes(original)
        XCTAssertGreaterThanOrEqual(before, liveBytes + deadBytes)

        // How long one whole gc takes here (on copies; the fastest of three, so that a slow first
        // run does not spread the kills past the end of the later ones), to spread the kills over it.
        var whole = Double.infinity
        for k in 0..<3 {
            try FileManager.default.copyItem(atPath: original, toPath: root + "/timed\(k)")
            let t0 = Date()
            let (rc0, out0) = try tilespool(["gc", "--grace", "0", "--store", root + "/timed\(k)", "--spool", root + "/spool"])
            whole = min(whole, Date().timeIntervalSince(t0))
            XCTAssertEqual(rc0, 0, out0)
            XCTAssertTrue(out0.contains("removed 1000 objects"), out0)
            try FileManager.default.removeItem(atPath: root + "/timed\(k)")
        }

        var interrupted = 0, tempLeft = 0
        for round in 0..<20 {
            let store = root + "/round\(round)"
            // A moment in the round's twentieth of the whole run (the kill itself is the event).
            // A gc that ended before its kill (runs vary) is run again on a fresh copy, killed at
            // half that moment, up to three times: the rounds stay spread over the whole run.
            var at = whole * (Double(round) + Double.random(in: 0..<1)) / 20
            for _ in 0..<3 {
                if FileManager.default.fileExists(atPath: store) { try FileManager.default.removeItem(atPath: store) }
                try FileManager.default.copyItem(atPath: original, toPath: store)
                let p = Process()
                p.executableURL = URL(fileURLWithPath: SpoolFixture.binary)
                p.arguments = ["gc", "--grace", "0", "--store", store, "--spool", root + "/spool"]
                p.standardOutput = FileHandle.nullDevice
                p.standardError = FileHandle.nullDevice
                try p.run()
                usleep(useconds_t(at * 1_000_000))
                kill(p.processIdentifier, SIGKILL)
                p.waitUntilExit()
                if p.terminationReason == .uncaughtSignal { interrupted += 1; break }
                at /= 2
            }

            // Every pack intact and every referenced object in one, by the independent reader.
            let (vrc, vout) = try runTool("/usr/bin/python3", [SpoolFixture.storeReader, "verify", store])
            XCTAssertEqual(vrc, 0, "round \(round) (kill at \(at) s): \(vout)")
            let (lrc, lout) = try runTool("/usr/bin/python3", [SpoolFixture.storeReader, "list", store])
            XCTAssertEqual(lrc, 0, lout)
            let listed = Set(lout.split(separator: "\n").map { String($0.split(separator: " ")[0]) })
            XCTAssertEqual(live.subtracting(listed), [], "round \(round): referenced objects lost")
            // TileSpool's own verify: nothing missing or bad (a temp pack of the killed gc may be left).
            let (_, tout) = try tilespool(["verify", "--store", store, "--spool", root + "/spool"])
            XCTAssertFalse(tout.contains("missing object") || tout.contains("bad object") || tout.contains("count mismatch"), "round \(round): \(tout)")
            XCTAssertTrue(tout.contains("1 manifests, 1000 lines checked"), tout)
            // gc with the default grace period (as from cron) removes the killed gc's temp pack at once.
            let (drc, dout) = try tilespool(["gc", "--store", store, "--spool", root + "/spool"])
            XCTAssertEqual(drc, 0, dout)
            let (_, cleaned) = try tilespool(["verify", "--store", store, "--spool", root + "/spool"])
            XCTAssertFalse(cleaned.contains("temp file left over"), "round \(round): \(cleaned)")
            if tout.contains("temp file left over") { tempLeft += 1 }

            // A gc run to the end: verify clean, the dead bytes given back.
            let (grc, gout) = try tilespool(["gc", "--grace", "0", "--store", store, "--spool", root + "/spool"])
            XCTAssertEqual(grc, 0, gout)
            let (crc, cout) = try tilespool(["verify", "--store", store, "--spool", root + "/spool"])
            XCTAssertEqual(crc, 0, "round \(round): \(cout)")
            XCTAssertTrue(cout.contains("; 0 faults"), cout)
            let after = packBytes(store)
            XCTAssertGreaterThanOrEqual(before - after, deadBytes * 9 / 10, "round \(round): freed \(before - after) of \(deadBytes) dead bytes")
            let (rrc, rout) = try runTool("/usr/bin/python3", [SpoolFixture.storeReader, "list", store])
            XCTAssertEqual(rrc, 0, rout)
            XCTAssertEqual(Set(rout.split(separator: "\n").map { String($0.split(separator: " ")[0]) }), live, "round \(round): exactly the referenced objects are left")
            try FileManager.default.removeItem(atPath: store)
        }
        // The kills land inside the run (a round whose gc ended first was run again, earlier).
        XCTAssertGreaterThanOrEqual(interrupted, 18, "kills that interrupted gc")
        print("repack kill -9: gc took \(whole) s whole; \(interrupted) of 20 kills interrupted it, \(tempLeft) left a temp pack")
    }

    func run(_ args: [String]) -> Int32 { runStatus(args) }

    /// A full disk during a repack: the store on a tmpfs with 1 MiB to spare, so gc's new pack
    /// (about 5 MB of live objects) does not fit. gc fails with an error naming the full disk;
    /// the store stays readable (every pack intact, every referenced object in one, no missing or
    /// bad object, its temp pack not left behind), and once there is room a gc finishes the job.
    func testAFullDiskDuringARepackLeavesTheStoreReadable() throws {
        guard geteuid() == 0 else {
            print("SKIPPED: RepackCrashTests.testAFullDiskDuringARepackLeavesTheStoreReadable: mounting a small tmpfs needs root")
            throw XCTSkip("mounting a tmpfs needs root")
        }
        let original = root + "/original"
        let (live, _, deadBytes) = try makeStore(original)
        // And one pack of objects nothing references: removing it needs no new bytes.
        let extra = try PackedStore(root: original)
        let deadPackBefore = packFiles(original)
        for i in 0..<200 { try extra.put(Data("unreferenced \(i) ".utf8) + Data(repeating: UInt8(i & 0xFF), count: 3000)) }
        try extra.sync()
        let deadPack = try XCTUnwrap(packFiles(original).subtracting(deadPackBefore).first)
        var used = 0
        let e = FileManager.default.enumerator(atPath: original)
        while let name = e?.nextObject() as? String {
            let a = try FileManager.default.attributesOfItem(atPath: original + "/" + name)
            if a[.type] as? FileAttributeType == .typeRegular { used += ((a[.size] as? Int) ?? 0 + 4095) / 4096 * 4096 + 4096 }
        }
        let mount = root + "/small"
        try FileManager.default.createDirectory(atPath: mount, withIntermediateDirectories: true)
        XCTAssertEqual(run(["/bin/mount", "-t", "tmpfs", "-o", "size=\(used / 1024 + 1024)k", "tmpfs", mount]), 0)
        defer { _ = run(["/bin/umount", "-l", mount]) }
        let store = mount + "/store"
        try FileManager.default.copyItem(atPath: original, toPath: store)
        let before = packBytes(store)

        // The repack cannot be written; the pack of unreferenced objects goes all the same (attack
        // round 15: a full store could not be freed by gc).
        let (grc, gout) = try tilespool(["gc", "--grace", "0", "--store", store, "--spool", root + "/spool"])
        XCTAssertEqual(grc, 0, gout)
        XCTAssertTrue(gout.contains("the disk is full") && gout.contains("removed 200 objects"), gout)
        XCTAssertFalse(FileManager.default.fileExists(atPath: store + "/" + deadPack), "the dead pack is removed")
        XCTAssertEqual(packFiles(store), packFiles(original).subtracting([deadPack]), "the packs to repack stay")
        let (vrc, vout) = try runTool("/usr/bin/python3", [SpoolFixture.storeReader, "verify", store])
        XCTAssertEqual(vrc, 0, vout)
        let (_, lout) = try runTool("/usr/bin/python3", [SpoolFixture.storeReader, "list", store])
        XCTAssertEqual(live.subtracting(Set(lout.split(separator: "\n").map { String($0.split(separator: " ")[0]) })), [], "referenced objects lost")
        let (trc, tout) = try tilespool(["verify", "--store", store, "--spool", root + "/spool"])
        XCTAssertEqual(trc, 0, "verify after the failed gc: \(tout)")
        XCTAssertTrue(tout.contains("1 manifests, 1000 lines checked; 0 faults"), tout)

        // Room again: the next gc repacks.
        XCTAssertEqual(run(["/bin/mount", "-o", "remount,size=64m", mount]), 0)
        let (grc2, gout2) = try tilespool(["gc", "--grace", "0", "--store", store, "--spool", root + "/spool"])
        XCTAssertEqual(grc2, 0, gout2)
        XCTAssertGreaterThanOrEqual(before - packBytes(store), deadBytes * 9 / 10, gout2)
        let (crc, cout) = try tilespool(["verify", "--store", store, "--spool", root + "/spool"])
        XCTAssertEqual(crc, 0, cout)
    }

    /// The packs under `store/packs`, by path relative to the store.
    func packFiles(_ store: String) -> Set<String> {
        let e = FileManager.default.enumerator(atPath: store + "/packs")
        var out = Set<String>()
        while let name = e?.nextObject() as? String { if name.hasSuffix(".pack") { out.insert("packs/" + name) } }
        return out
    }

    /// Attack round 5 (critical): a gc killed after saving its new pack but before its index file,
    /// run again with --grace 0, wrote the very same pack (the same live objects in the same order,
    /// so the same name) and then removed it as one of the packs it replaced: every object lost.
    /// The state is made here exactly: two small packs, half dead; the new pack of a finished gc
    /// copied, without an index, into the store as it was before. All three are small, so all are
    /// repacked, into a pack identical to the copied one in whatever order they are read. The
    /// second gc keeps it; nothing referenced is lost.
    func testAGCRunAgainOverItsOwnSavedPackKeepsIt() throws {
        let original = root + "/original"
        let (live, _, _) = try makeStore(original, count: 400, sizes: (512, 1024), packEvery: 200)
        let before = packFiles(original)
        try FileManager.default.copyItem(atPath: original, toPath: root + "/first")
        let (rc1, out1) = try tilespool(["gc", "--grace", "0", "--store", root + "/first", "--spool", root + "/spool"])
        XCTAssertEqual(rc1, 0, out1)
        let made = packFiles(root + "/first").subtracting(before)
        XCTAssertFalse(made.isEmpty, "the first gc repacked")
        for rel in made {
            try FileManager.default.createDirectory(atPath: (original + "/" + rel as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try FileManager.default.copyItem(atPath: root + "/first/" + rel, toPath: original + "/" + rel)
        }
        let (rc2, out2) = try tilespool(["gc", "--grace", "0", "--store", original, "--spool", root + "/spool"])
        XCTAssertEqual(rc2, 0, out2)
        XCTAssertEqual(packFiles(original), made, "the saved pack stays; the old ones go")
        let (lrc, lout) = try runTool("/usr/bin/python3", [SpoolFixture.storeReader, "list", original])
        XCTAssertEqual(lrc, 0, lout)
        XCTAssertEqual(Set(lout.split(separator: "\n").map { String($0.split(separator: " ")[0]) }), live)
        let (vrc, vout) = try tilespool(["verify", "--store", original, "--spool", root + "/spool"])
        XCTAssertEqual(vrc, 0, vout)
        XCTAssertTrue(vout.contains("200 lines checked; 0 faults"), vout)
    }

    /// Attack round 5 (critical): with a pack file gone but an index file still listing its
    /// objects, verify reported 0 faults (it took the index's word). It reports each missing
    /// object now, exits 1, and --repair marks the region for re-download.
    func testVerifyFindsObjectsWhosePackIsGoneThoughTheIndexListsThem() throws {
        let store = root + "/store"
        let (live, _, _) = try makeStore(store)
        let packs = packFiles(store).sorted()
        XCTAssertEqual(packs.count, 5)
        // The objects of the first pack that the region references, by the independent reader.
        let (_, lout) = try runTool("/usr/bin/python3", [SpoolFixture.storeReader, "list", store])
        let gonePack = String((packs[0] as NSString).lastPathComponent.dropLast(5))
        let lost = Set(lout.split(separator: "\n").map { $0.split(separator: " ") }.filter { String($0[2]) == gonePack }.map { String($0[0]) }).intersection(live)
        XCTAssertFalse(lost.isEmpty)
        try FileManager.default.removeItem(atPath: store + "/" + packs[0])
        let (vrc, vout) = try tilespool(["verify", "--store", store, "--spool", root + "/spool"])
        XCTAssertEqual(vrc, 1, vout)
        let missing = Set(vout.split(separator: "\n").filter { $0.hasPrefix("missing object: ") }.compactMap { $0.split(separator: " ").last.map(String.init) })
        XCTAssertEqual(missing, lost, vout)
        XCTAssertTrue(vout.contains("; \(lost.count) faults"), vout)
    }

    /// Attack round 5: a save killed between writing a pack or index file and renaming it into
    /// place left `.tmp-<name>-<pid>-<n>` in the store's folders, never reported nor removed (a
    /// pack's is up to 64 MiB). verify reports such files; gc settles them at once when their
    /// process is gone (a whole pack saved under its name, anything else removed), and keeps a
    /// live process's young one (a save in flight).
    func testTempFilesOfSavesCutShortAreReportedAndRemoved() throws {
        let store = root + "/store"
        _ = try makeStore(store, count: 40, sizes: (512, 512), packEvery: 40)
        let gone = Process()
        gone.executableURL = URL(fileURLWithPath: "/bin/true")
        try gone.run()
        gone.waitUntilExit()
        let dead = gone.processIdentifier, alive = getpid()
        let planted = ["packs/ab/.tmp-\(String(repeating: "a", count: 64)).pack-\(dead)-1", "index/.tmp-\(String(repeating: "b", count: 64)).idx-\(dead)-2"]
        let live = "index/.tmp-\(String(repeating: "c", count: 64)).idx-\(alive)-3"
        try FileManager.default.createDirectory(atPath: store + "/packs/ab", withIntermediateDirectories: true)
        for rel in planted + [live] { try Data(count: 4096).write(to: URL(fileURLWithPath: store + "/" + rel)) }
        // A whole pack still under its temp name (the kill came between its write and its rename):
        // its objects are referenced; gc saves it under its name rather than removing it.
        let pack = try XCTUnwrap(packFiles(store).first)
        let packName = (pack as NSString).lastPathComponent
        let packTemp = "packs/.tmp-\(packName)-\(dead)-4"
        try FileManager.default.moveItem(atPath: store + "/" + pack, toPath: store + "/" + packTemp)
        let (vrc, vout) = try tilespool(["verify", "--store", store, "--spool", root + "/spool"])
        XCTAssertEqual(vrc, 1, vout)
        for rel in planted + [live, packTemp] { XCTAssertTrue(vout.contains("temp file left over: \(rel)"), vout) }
        XCTAssertTrue(vout.contains("missing object: "), "the pack under its temp name is not found: \(vout)")
        let (grc, gout) = try tilespool(["gc", "--store", store, "--spool", root + "/spool"])
        XCTAssertEqual(grc, 0, gout)
        XCTAssertTrue(gout.contains("removed 3 temp files"), gout)
        for rel in planted + [packTemp] { XCTAssertFalse(FileManager.default.fileExists(atPath: store + "/" + rel), rel) }
        XCTAssertTrue(FileManager.default.fileExists(atPath: store + "/" + pack), "the whole pack is saved under its name")
        XCTAssertTrue(FileManager.default.fileExists(atPath: store + "/" + live), "a live process's young temp file stays")
        try FileManager.default.removeItem(atPath: store + "/" + live)
        let (crc, cout) = try tilespool(["verify", "--store", store, "--spool", root + "/spool"])
        XCTAssertEqual(crc, 0, cout)
    }
}
