import Foundation
import Glibc
import XCTest
@testable import TileSpoolCore
@testable import TileSpoolIO

/// The store and region files at the I/O edge (issue 30: one suite for both backends). Each
/// test gets a fresh store (`StoreSite`): a temp folder here, a bucket prefix in `StoreOnS3Tests`.
/// `StoreTests` reaches the store's files only through the backend, so it runs on both;
/// `LocalStoreTests` holds what only a folder has (a folder in the way, mtimes, symlinks, FIFOs),
/// `Digest`, and the spool's region files.
class StoreTestCase: XCTestCase {
    var site: StoreSite!
    /// The store's folder, for the tests of the local backend only.
    var dir: String { site.root! }
    /// A fresh, empty store for one test (or one case of a test).
    func makeSite() throws -> StoreSite {
        try StoreSite(root: FileManager.default.temporaryDirectory.appendingPathComponent("store-\(UUID().uuidString)").path)
    }
    override func setUpWithError() throws { site = try makeSite() }
    override func tearDown() { if let root = site?.root { try? FileManager.default.removeItem(atPath: root) } }

    /// The repository opened anew, and the independent reader's listing and verdict of it.
    func open() throws -> PackedStore { try site.open() }
    func readerList(file: StaticString = #filePath, line: UInt = #line) throws -> [String: Int] { try site.readerList(file: file, line: line) }
    func readerVerify() throws -> String { try site.readerVerify() }
    /// A store holding `n` bodies tagged `tag` in one sealed pack, the bodies and their names.
    func sealedStore(_ n: Int, _ tag: String) throws -> (store: PackedStore, bodies: [Data], names: [String]) {
        let store = try open()
        let bs = bodies(n, tag)
        for b in bs { try store.put(b) }
        try store.sync()
        return (store, bs, bs.map { SHA256.hex($0) })
    }
    /// A store opened anew reads every one of `names` as `bodies`, verify finds no fault, and
    /// neither does the independent reader.
    func assertEveryObjectReadsBack(_ names: [String], _ bodies: [Data], file: StaticString = #filePath, line: UInt = #line) throws {
        let store = try open()
        for (n, b) in zip(names, bodies) { XCTAssertEqual(try store.read(n, limit: 1 << 20), b, file: file, line: line) }
        XCTAssertEqual(try store.repository.checkObjects(repair: false).bad, [], file: file, line: line)
        XCTAssertEqual(try readerVerify(), "", file: file, line: line)
    }
    func bodies(_ n: Int, _ tag: String = "") -> [Data] {
        (0..<n).map { Data("body \(tag) \($0) ".utf8) + Data(repeating: UInt8($0 & 0xFF), count: 100 + $0 * 7) }
    }

}

/// The store's promises through its backend only, on a local folder; `StoreOnS3Tests` runs
/// each of them again in a bucket.
class StoreTests: StoreTestCase {
    /// Objects are named by their SHA-256, stored once however often put, found only after a
    /// sync (in the open pack before), and the independent reader finds them with their sizes.
    func testPutNamesObjectsByTheirSHA256AndStoresEachOnce() throws {
        let store = try open()
        let bs = bodies(20)
        var names: [String] = []
        for b in bs + bs {
            let (sha, isNew) = try store.put(b)
            XCTAssertEqual(sha, sha256Hex(b))
            if !names.contains(sha) { XCTAssertTrue(isNew); names.append(sha) } else { XCTAssertFalse(isNew) }
        }
        XCTAssertEqual(try readerList(), [:], "nothing sealed before the sync")
        XCTAssertEqual(try store.read(names[3], limit: 1 << 20), bs[3], "read from the open pack")
        try store.sync()
        XCTAssertEqual(try readerList(), Dictionary(uniqueKeysWithValues: bs.map { (sha256Hex($0), $0.count) }))
        XCTAssertEqual(try readerVerify(), "")
        for (b, sha) in zip(bs, names) { XCTAssertEqual(try store.read(sha, limit: 1 << 20), b) }
        // Put again after the sync: found (its pack is young), nothing new.
        XCTAssertFalse(try store.put(bs[0]).isNew)
        try store.sync()
        XCTAssertEqual(try site.packs().count, 1)
        // A store opened anew finds them through the index.
        let again = try open()
        XCTAssertTrue(again.contains(names[7]))
        XCTAssertEqual(try again.read(names[7], limit: 1 << 20), bs[7])
        XCTAssertFalse(again.contains(String(repeating: "0", count: 64)))
    }

    /// The journal's tickets: a put hands out the next one; each loop turn (`resetWake`) hands
    /// the open pack's buffer to its write queue, and `writesWakeFD` becomes readable once the
    /// tickets waited for are written to the pack's file.
    func testWriteTicketsAreDoneOnceTheOpenPackIsWrittenAndTheLoopIsWoken() throws {
        let store = try open()
        XCTAssertEqual(store.writesQueued, 0)
        try store.put(Data("one".utf8))
        let t = store.writesQueued
        XCTAssertGreaterThan(t, 0)
        XCTAssertGreaterThanOrEqual(store.writesWakeFD, 0)
        store.resetWake()
        XCTAssertTrue(waitForWrites(store, through: t), "woken once written")
        XCTAssertEqual(store.writesDone, t)
        // The bytes are in the pack's file (what a kill -9 keeps).
        let partial = try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: site.scratch).first { $0.hasSuffix(".partial") })
        let size = try XCTUnwrap(try FileManager.default.attributesOfItem(atPath: site.scratch + "/" + partial)[.size] as? Int)
        XCTAssertEqual(size, PackFormat.magic.count + t)
        // A reset empties the wake; a ticket already done wakes at once.
        store.resetWake()
        XCTAssertTrue(waitForWrites(store, through: t))
    }

    /// `wakeWhenDone(through:)`, then waits (at most 10 s) for `writesWakeFD`: true when woken.
    private func waitForWrites(_ store: PackedStore, through ticket: Int) -> Bool {
        store.wakeWhenDone(through: ticket)
        var p = pollfd(fd: store.writesWakeFD, events: Int16(POLLIN), revents: 0)
        return poll(&p, 1, 10_000) == 1
    }

    /// The quota refuses new objects only, and counts the store again before refusing.
    func testQuotaRefusesNewObjectsOnly() throws {
        let store = try open()
        let old = Data(repeating: 1, count: 1000)
        try store.put(old)
        try store.sync()
        store.setUsage(try XCTUnwrap(store.measureUsage()), addedAtStart: store.added)
        // Room for a small object and its share of a new pack and index file, not for a large one.
        store.maxBytes = (store.usage?.bytes ?? 0) + 100 + Repository.entryOverhead + Repository.packOverhead + 50
        XCTAssertFalse(try store.put(old).isNew, "an object the store holds is never refused")
        XCTAssertThrowsError(try store.put(Data(repeating: 2, count: 1000))) { e in
            XCTAssertEqual((e as? SystemError)?.errno, EDQUOT)
        }
        XCTAssertTrue(try store.put(Data(repeating: 3, count: 100)).isNew)
    }

    /// A daemon's store over its quota takes new objects again once a gc beside it (another
    /// process, with its grace period) has removed old unreferenced packs: the count is taken
    /// again, not trusted from before the gc. And the daemon's next index merge brings back no
    /// entry of a pack gc removed (it merged the index files it knew, which gc had replaced).
    func testQuotaIsCountedAgainAfterAGCBesideIt() throws {
        let daemon = try open()
        let old = bodies(40, "old")
        for b in old { try daemon.put(b) }
        try daemon.sync()
        daemon.setUsage(try XCTUnwrap(daemon.measureUsage()), addedAtStart: daemon.added)
        daemon.maxBytes = (daemon.usage?.bytes ?? 0) + 10
        let new = bodies(3, "new")
        XCTAssertThrowsError(try daemon.put(new[0])) { e in XCTAssertEqual((e as? SystemError)?.errno, EDQUOT) }
        // Two hours on, no region references the old objects; gc from cron removes them (its
        // clock moved on: a bucket's modification times cannot be set back).
        let report = try open().collectGarbage(grace: 3600, now: Date().timeIntervalSince1970 + 7200) { [] }
        XCTAssertEqual(report.objectsRemoved, old.count)
        daemon.recountBeforeNextRefusal() // as `resume` does
        // One pack each: with the old pack's index file the lowest tier then holds four, merged.
        for b in new { XCTAssertTrue(try daemon.put(b).isNew); try daemon.sync() }
        XCTAssertEqual(Set(try readerList().keys), Set(new.map(sha256Hex)))
        XCTAssertEqual(try readerVerify(), "")
        for b in new { XCTAssertEqual(try daemon.read(sha256Hex(b), limit: 1 << 20), b) }
        XCTAssertFalse(daemon.contains(sha256Hex(old[0])))
    }

    /// kill -9 with objects in the open pack (written to its file, never sealed): the next
    /// start reads them back, whole and intact, into a pack; a torn last record is left out.
    func testAnOpenPackLeftByAKillIsReadBack() throws {
        let bs = bodies(30, "k")
        do {
            let store = try open()
            for b in bs { try store.put(b) }
            store.resetWake() // handed to the open pack's write queue, as each loop turn does
            XCTAssertTrue(waitForWrites(store, through: store.writesQueued), "written to the file")
        }
        // The open pack as a kill left it, with a record cut short at its end.
        let partial = try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: site.scratch).first { $0.hasSuffix(".partial") })
        let h = try XCTUnwrap(FileHandle(forWritingAtPath: site.scratch + "/" + partial))
        h.seekToEndOfFile()
        h.write(Data(repeating: 0xAB, count: 30)) // a header and a few bytes of a body
        try h.close()
        let store = try open()
        store.recoverLeftovers()
        for b in bs { XCTAssertEqual(try store.read(sha256Hex(b), limit: 1 << 20), b) }
        XCTAssertEqual(try readerList().count, bs.count)
        XCTAssertEqual(try readerVerify(), "")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: site.scratch).filter { $0.hasSuffix(".partial") }, [])
    }

    /// An open pack left by a stop holds the only copy of objects the index lists in a pack that
    /// is gone (removed, or never saved whole): the next start keeps them from the open pack.
    /// Before, an index entry alone counted as held, and the open pack was removed with them
    /// (attack round 30).
    func testAnOpenPackLeftByAKillIsKeptWhenTheIndexNamesAGonePack() throws {
        let (_, bs, names) = try sealedStore(20, "gone")
        let pack = try XCTUnwrap(try site.packs().first)
        // The same records as a daemon's open pack a kill left (no end yet), and the pack gone.
        let records = try site.load(pack).dropLast(PackFormat.footerSize)
        try FileManager.default.createDirectory(atPath: site.scratch, withIntermediateDirectories: true)
        try Data(records).write(to: URL(fileURLWithPath: site.scratch + "/999999-abc-1.partial"))
        try site.remove(pack)
        let store = try open()
        store.recoverLeftovers()
        try assertEveryObjectReadsBack(names, bs)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: site.scratch).filter { $0.hasSuffix(".partial") }, [])
    }

    /// A pack saved without its index file (a crash between the two saves) is indexed at the
    /// next start; small index files are merged (whenever four fall in one size tier), every
    /// object still found.
    func testPacksWithoutAnIndexAreIndexedAndIndexFilesAreMerged() throws {
        let store = try open()
        var all: [Data] = []
        for round in 0..<12 {
            let bs = bodies(5, "r\(round)")
            for b in bs { try store.put(b) }
            try store.sync()
            all += bs
            // 12 packs of 5 objects, all in the lowest tier: merged at 4, then the merged file and
            // 3 more at 7 and at 10; 2 left unmerged after the 12th.
            let expected = [1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3][round]
            XCTAssertEqual(try site.names("index/").count, expected, "after pack \(round + 1)")
        }
        for b in all { XCTAssertEqual(try store.read(sha256Hex(b), limit: 1 << 20), b) }
        for f in try site.names("index/") { try site.remove(f) }
        let again = try open()
        XCTAssertFalse(again.contains(sha256Hex(all[0])))
        again.recoverLeftovers()
        for b in all { XCTAssertEqual(try again.read(sha256Hex(b), limit: 1 << 20), b) }
        XCTAssertEqual(try readerVerify(), "")
    }

    /// The streamed merge of index files (a k-way merge written to a file as it goes, so memory
    /// does not grow with the entries) writes the very bytes the in-memory way does: the pack
    /// table in file order, every entry, sorted by SHA-256.
    func testStreamedIndexMergeWritesTheSameBytesAsTheInMemoryOne() throws {
        let store = try open()
        var all: [Data] = []
        for round in 0..<3 {
            let bs = bodies(700 + round * 311, "m\(round)")
            for b in bs { try store.put(b) }
            try store.sync()
            all += bs
        }
        let names = try site.names("index/")
        XCTAssertEqual(names.count, 3)
        let files = try names.map { n -> IndexFile in
            let digest = try XCTUnwrap(Digest(hex: String((n as NSString).lastPathComponent.dropLast(4))))
            return try IndexFile(name: n, digest: digest, path: try site.localPath(n)) { _, _ in }
        }
        var packs: [IndexFormat.Pack] = [], number: [Digest: UInt32] = [:], entries: [IndexFormat.Entry] = []
        for f in files {
            try f.forEach { e in
                let p = f.packs[Int(e.pack)]
                let k: UInt32
                if let x = number[p.digest] { k = x } else { k = UInt32(packs.count); number[p.digest] = k; packs.append(p) }
                entries.append(IndexFormat.Entry(digest: e.digest, pack: k, offset: e.offset, length: e.length))
            }
        }
        var expected = IndexFormat.body(packs: packs, entries: entries)
        expected += SHA256.bytes(expected.withUnsafeBytes { $0 })
        let merged = try store.repository.saveMergedIndex(files)
        XCTAssertEqual([UInt8](try site.load(merged.name)), expected, "the merged index file as saved")
        XCTAssertEqual(merged.count, all.count)
        XCTAssertEqual(try readerVerify(), "")
    }

    /// Locations found together (`objectLocations`: sorted names merged with each index file read
    /// forwards) are those found one at a time, for every name: objects in three index files,
    /// names given twice, absent names and a name that is not hex; and `IndexFile`'s batch
    /// look-up gives each digest the entries its single look-up gives, for a dense set (every
    /// entry), a sparse one (every 300th), digests it does not hold and digests given twice
    /// (the dense sets through the merge, `IndexFile.merge`).
    func testBatchLocationsAgreeWithOneAtATime() throws {
        let store = try open()
        var all: [Data] = []
        for (round, n) in [3000, 517, 40].enumerated() {
            let bs = bodies(n, "l\(round)")
            for b in bs { try store.put(b) }
            try store.sync()
            all += bs
        }
        XCTAssertEqual(try site.names("index/").count, 3)
        // Names by our SHA-256 (sha256Hex runs sha256sum once per call: too slow for 3,557 names;
        // the names themselves are checked against sha256sum by the other tests).
        let stored = all.map { SHA256.hex($0) }
        let absent = (0..<50).map { SHA256.hex(Data("absent \($0)".utf8)) }
        var names = stored + absent + [stored[5], stored[3100], "not hex", String(repeating: "0", count: 64)]
        var rng = SeededRandom(seed: 7)
        names.shuffle(using: &rng)
        let together = store.objectLocations(names)
        XCTAssertEqual(together.count, names.count)
        XCTAssertEqual(together, names.map { store.objectLocation($0) })
        XCTAssertEqual(together.filter { $0 != nil }.count, stored.count + 2, "every stored name found, the absent ones not")
        // Read back through the locations found together: the bytes of each name.
        var seen = 0
        let byName = Dictionary(zip(stored, all), uniquingKeysWith: { a, _ in a })
        let wanted = names.filter { byName[$0] != nil }
        try store.readObjects(wanted, at: together.filter { $0 != nil }, limit: 1 << 20) { k, data in
            XCTAssertEqual(data, byName[wanted[k]])
            seen += 1
        }
        XCTAssertEqual(seen, stored.count + 2)

        for name in try site.names("index/") {
            let digest = try XCTUnwrap(Digest(hex: String((name as NSString).lastPathComponent.dropLast(4))))
            let file = try IndexFile(name: name, digest: digest, path: try site.localPath(name)) { _, _ in }
            var held: [Digest] = []
            try file.forEach { held.append($0.digest) }
            let missing = absent.compactMap { Digest(hex: $0) }, heldSet = Set(held)
            let sets = [held, stride(from: 0, to: held.count, by: 300).map { held[$0] }, (held + missing).sorted(), missing.sorted(),
                        (held + held.prefix(20) + missing).sorted(), (stride(from: 0, to: held.count, by: 17).map { held[$0] } + missing.prefix(3)).sorted()]
            // Both ways of `lookup(sorted:)` are taken: the sparse one (a sample search per digest)
            // by the every-300th set of the 3,000-entry file, the merge by the others.
            if held.count == 3000 { XCTAssertLessThan(sets[1].count, held.count / IndexFile.denseRatio) }
            for set in sets {
                var got = [[IndexFormat.Entry]](repeating: [], count: set.count)
                file.lookup(sorted: set) { k, e in got[k].append(e) }
                XCTAssertEqual(got, set.map { file.lookup($0) }, "\(name): \(set.count) digests")
                XCTAssertEqual(got.filter { !$0.isEmpty }.count, set.filter { heldSet.contains($0) }.count)
            }
        }
    }

    /// Attack round 7: a body that does not hash to its name (a byte flipped in its pack) is
    /// never handed on: `read`, `readObjects` (what exports read through) and `copyObject` (the
    /// site export) say the object is damaged (EIO) instead of giving the wrong bytes; the other
    /// objects of the pack read as before.
    func testDamagedBodyIsNeverHandedOn() throws {
        let (store, bs, names) = try sealedStore(30, "d")
        let victim = try XCTUnwrap(store.objectLocation(names[7]))
        try site.damage("packs/\(victim.pack).pack") { $0[victim.offset + 3] ^= 0xFF }
        let again = try open()
        XCTAssertThrowsError(try again.read(names[7], limit: 1 << 20)) { XCTAssertEqual(($0 as? SystemError)?.errno, EIO, "\($0)") }
        XCTAssertEqual(try again.read(names[8], limit: 1 << 20), bs[8])
        var delivered: [Int: Data] = [:]
        XCTAssertThrowsError(try again.readObjects(names, at: nil, limit: 1 << 20) { k, d in delivered[k] = d }) {
            XCTAssertEqual(($0 as? SystemError)?.errno, EIO, "\($0)")
        }
        for (k, d) in delivered { XCTAssertEqual(d, bs[k], "object \(k) handed on with other bytes") }
        XCTAssertNil(delivered[7])
        let out = try TestScratch.folder("damaged-copy").path + "/copy"
        let ofd = Glibc.open(out, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        defer { close(ofd); unlink(out) }
        XCTAssertThrowsError(try again.copyObject(names[7], at: victim, to: ofd, path: out, limit: 1 << 20))
        XCTAssertEqual(try again.copyObject(names[8], at: nil, to: ofd, path: out, limit: 1 << 20), bs[8].count)
    }

    /// Attack round 7: index entries naming a pack that is gone, newer than the real copy's (a gc
    /// overtaking an index merge leaves such entries; docs/store.md: "the object is looked for
    /// elsewhere"), hid the real copy: `cat` and exports said the object was not held. Every
    /// read now passes over a copy whose pack is gone for the next one.
    func testEntriesNamingAGonePackDoNotHideTheRealCopy() throws {
        let (store, bs, names) = try sealedStore(40, "g")
        let locations = store.objectLocations(names).map { $0! }
        // A second index file listing every object in a pack that does not exist, created later.
        let ghost = try XCTUnwrap(Digest(hex: String(repeating: "e", count: 64)))
        let entries = zip(names, locations).map { n, l in
            IndexFormat.Entry(digest: Digest(hex: n)!, pack: 0, offset: UInt64(l.offset - PackFormat.headerSize), length: UInt32(l.length))
        }.sorted { $0.digest < $1.digest }
        _ = try store.repository.saveIndexFile(packs: [IndexFormat.Pack(digest: ghost, created: UInt64(Date().timeIntervalSince1970) + 1000)], entries: entries)
        let again = try open()
        XCTAssertEqual(again.objectLocation(names[0])?.pack, ghost.hex, "the ghost pack's entry is the newest")
        for (n, b) in zip(names, bs) { XCTAssertEqual(try again.read(n, limit: 1 << 20), b) }
        var got: [Int: Data] = [:]
        try again.readObjects(names, at: nil, limit: 1 << 20) { k, d in got[k] = d }
        XCTAssertEqual(got.count, bs.count)
        for (k, d) in got { XCTAssertEqual(d, bs[k]) }
    }

    /// Attack round 14: a newer copy whose pack cannot be read (cut short, a symlink, or an entry
    /// whose length is over the limit) no longer hides the real copy: `read`, `readObjects` (what
    /// exports read through) and `copyObject` (the site) give the right bytes, each object once;
    /// with only the unreadable copy, the error is that copy's. (A symlink only on disk.)
    func testAnUnreadableNewerCopyDoesNotHideTheRealOne() throws {
        for damage in site.root == nil ? ["cut", "length"] : ["cut", "symlink", "length"] {
            if let root = site.root { try? FileManager.default.removeItem(atPath: root) }
            site = try makeSite()
            let (store, bs, names) = try sealedStore(30, "u\(damage)")
            let locations = store.objectLocations(names).map { $0! }
            let real = "packs/\(locations[0].pack).pack"
            // A second pack: a copy of the real one under another name, listed by a newer index file.
            let other = try XCTUnwrap(Digest(hex: String(repeating: "d", count: 64)))
            let otherName = "packs/\(other.hex).pack"
            let packBytes = try site.load(real)
            switch damage {
            case "cut": try site.replace(otherName, packBytes.prefix(packBytes.count / 3))
            case "symlink": try FileManager.default.createSymbolicLink(atPath: dir + "/" + otherName, withDestinationPath: dir + "/" + real)
            default: try site.replace(otherName, packBytes)
            }
            let entries = zip(names, locations).map { n, l in
                IndexFormat.Entry(digest: Digest(hex: n)!, pack: 0, offset: UInt64(l.offset - PackFormat.headerSize),
                                  length: damage == "length" ? UInt32.max : UInt32(l.length))
            }.sorted { $0.digest < $1.digest }
            _ = try store.repository.saveIndexFile(packs: [IndexFormat.Pack(digest: other, created: UInt64(Date().timeIntervalSince1970) + 1000)], entries: entries)
            let again = try open()
            XCTAssertEqual(again.objectLocation(names[29])?.pack, other.hex, "\(damage): the newer entry is the one looked up first")
            for (n, b) in zip(names, bs) { XCTAssertEqual(try again.read(n, limit: 1 << 20), b, damage) }
            var got: [Int: Data] = [:]
            try again.readObjects(names, at: nil, limit: 1 << 20) { k, d in
                XCTAssertNil(got[k], "\(damage): object \(k) handed on twice")
                got[k] = d
            }
            XCTAssertEqual(got.count, bs.count, damage)
            for (k, d) in got { XCTAssertEqual(d, bs[k], damage) }
            let out = try TestScratch.folder("unreadable-copy").path + "/copy.bin"
            FileManager.default.createFile(atPath: out, contents: nil)
            let fd = Glibc.open(out, O_WRONLY)
            for n in names { try again.copyObject(n, at: nil, to: fd, path: out, limit: 1 << 20) }
            Glibc.close(fd)
            XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: out)), bs.reduce(Data(), +), damage)
            // Without the real pack, the unreadable copy's own error (not "not held").
            try site.remove(real)
            if damage == "cut" {
                let alone = try open()
                XCTAssertThrowsError(try alone.read(names[29], limit: 1 << 20)) { XCTAssertEqual(($0 as? SystemError)?.errno, EIO, "\($0)") }
                // `tilespool cat` says so too (attack round 16: it said the store does not hold it).
                let (rc, text) = try site.tilespool(["cat", names[29]])
                XCTAssertEqual(rc, 1, text)
                XCTAssertTrue(text.contains("object \(names[29]) cannot be read (") && text.contains("EIO"), text)
            }
        }
    }

    /// Attack round 20: a pack cut short (or removed) while its index file still listed its
    /// objects was relied on by `put`: a new region re-used them and ended `completed` over
    /// bytes that could not be read. A copy is re-used only when its pack, as listed when the
    /// index was read or refreshed (`refreshIndex`, at each region's start), holds the record
    /// whole: the objects past the cut are written again, those before it are not; every object
    /// reads back; and with the pack removed, every object is written again.
    func testAPackCutShortOrRemovedIsNotReliedOnByPut() throws {
        let (store, bs, names) = try sealedStore(30, "cut")
        let pack = try XCTUnwrap(try site.packs().first)
        let locations = store.objectLocations(names).map { $0! }
        // Inside record 15, past room for a pack's end after record 14 (a record counts as held
        // whole when the pack's end could follow it).
        let cut = locations[15].offset - PackFormat.headerSize + PackFormat.footerSize + 4
        try site.damage(pack) { $0 = Array($0[0..<cut]) }
        try store.refreshIndex() // as a region's start does
        for (i, b) in bs.enumerated() {
            XCTAssertEqual(try store.put(b).isNew, i >= 15, "object \(i): \(i >= 15 ? "past" : "before") the cut")
        }
        try store.sync()
        let again = try open()
        for (n, b) in zip(names, bs) { XCTAssertEqual(try again.read(n, limit: 1 << 20), b) }
        // The pack removed: nothing of it is relied on, by a store opened anew either.
        try site.remove(pack)
        let fresh = try open()
        XCTAssertEqual(try bs.prefix(15).filter { try fresh.put($0).isNew }.count, 15)
    }

    /// A plain verify of a pack cut short names the pack and, as not there, exactly the entries
    /// past the cut; the records before it hash to their names where the index says and are
    /// present (attack round 20: every entry was named, those before the cut too). The repair
    /// then keeps those and loses only the rest.
    func testVerifyOfAPackCutShortNamesOnlyTheEntriesPastTheCut() throws {
        let (store, bs, names) = try sealedStore(20, "vcut")
        let pack = try XCTUnwrap(try site.packs().first)
        let locations = store.objectLocations(names).map { $0! }
        try site.damage(pack) { $0 = Array($0[0..<(locations[12].offset + 5)]) } // inside record 12's body
        let check = try open().repository.checkObjects(repair: false)
        let notThere = check.bad.filter { $0.contains("not there") }
        XCTAssertEqual(Set(notThere.compactMap { line in names.firstIndex { line.contains($0) } }), Set(12..<20), "\(check.bad)")
        XCTAssertEqual(notThere.count, 8)
        XCTAssertTrue(check.bad.contains("\(pack): not a whole pack"), "\(check.bad)")
        XCTAssertEqual(check.present, Set(names.prefix(12)))
        _ = try open().repository.checkObjects(repair: true)
        let repaired = try open()
        for (i, (n, b)) in zip(names, bs).enumerated() {
            if i < 12 { XCTAssertEqual(try repaired.read(n, limit: 1 << 20), b) } else { XCTAssertFalse(repaired.contains(n)) }
        }
    }

    /// Attack round 7: `verify --repair` on a store whose pack is whole but whose index gives
    /// wrong offsets (valid, checksummed, wrong) rescued the objects into a new pack, then wrote
    /// an index without that pack: every object read as missing. Now each reads back, and a
    /// second check finds nothing wrong.
    func testRepairOfAWrongIndexKeepsEveryObject() throws {
        let (store, bs, names) = try sealedStore(60, "w")
        let locations = store.objectLocations(names).map { $0! }
        let pack = try XCTUnwrap(Digest(hex: locations[0].pack))
        // The index anew, each entry given its neighbour's offset and length.
        let shifted = (0..<names.count).map { i -> IndexFormat.Entry in
            let l = locations[(i + 1) % names.count]
            return IndexFormat.Entry(digest: Digest(hex: names[i])!, pack: 0, offset: UInt64(l.offset - PackFormat.headerSize), length: UInt32(l.length))
        }.sorted { $0.digest < $1.digest }
        for f in try site.names("index/") { try site.remove(f) }
        _ = try store.repository.saveIndexFile(packs: [IndexFormat.Pack(digest: pack, created: UInt64(Date().timeIntervalSince1970))], entries: shifted)
        let damaged = try open()
        XCTAssertThrowsError(try damaged.read(names[0], limit: 1 << 20), "the index names other bytes")
        let check = try damaged.repository.checkObjects(repair: true)
        XCTAssertFalse(check.bad.isEmpty)
        try assertEveryObjectReadsBack(names, bs)
    }

    /// A pack whose records are all sound but whose end is damaged (a byte of the footer's
    /// reserved field) is not whole; its rewrite by `verify --repair` is the very pack, byte
    /// for byte, under that same name. The
    /// damaged file was moved to quarantine after the save found the name taken, and every object
    /// of the pack was lost. Now the rewrite replaces the damaged file, whose copy is in quarantine.
    func testRepairOfADamagedPackEndKeepsEveryObject() throws {
        let (_, bs, names) = try sealedStore(30, "end")
        let packs = try site.packs()
        XCTAssertEqual(packs.count, 1)
        let good = try site.load(packs[0])
        var raw = [UInt8](good)
        raw[raw.count - 1] ^= 0x5A
        try site.replace(packs[0], Data(raw))
        let damaged = try open()
        let check = try damaged.repository.checkObjects(repair: true)
        XCTAssertEqual(check.bad, ["\(packs[0]): not a whole pack"])
        XCTAssertEqual(check.quarantined, 1)
        XCTAssertEqual(try site.load(packs[0]), good, "the pack is whole again under its name")
        XCTAssertEqual(try site.load("quarantine/" + (packs[0] as NSString).lastPathComponent), Data(raw), "the damaged bytes are kept in quarantine")
        try assertEveryObjectReadsBack(names, bs)
    }

    /// A pack is named by the SHA-256 of its bytes without the bodies (magic "TSPACK02", each
    /// record's 36-byte header, the end: docs/store.md, "Pack files"), so sealing it costs no
    /// second pass over bodies hashed already; packs an earlier version wrote ("TSPACK01",
    /// named by their whole bytes) are read, verified, indexed and repacked as they are. In
    /// either, a byte no record holds (the end's reserved field) is damage that verify names.
    func testPacksOfBothNamingsAreReadVerifiedAndRepacked() throws {
        let (_, bs, names) = try sealedStore(25, "naming")
        let packs = try site.packs()
        XCTAssertEqual(packs.count, 1)
        let data = try site.load(packs[0])
        XCTAssertEqual(Array(data.prefix(8)), Array("TSPACK02".utf8))
        // The name computed here from the format alone.
        XCTAssertEqual(packs[0], "packs/\(try XCTUnwrap(formatPackName(data))).pack")
        XCTAssertNotEqual(packs[0], "packs/\(sha256Hex(data)).pack")

        // The same records as an earlier version wrote them, with no index file (a store of
        // that version is indexed at start; here by --repair, which the daemon's start shares).
        var old = data
        old.replaceSubrange(0..<8, with: Array("TSPACK01".utf8))
        let oldName = "packs/\(sha256Hex(old)).pack"
        try site.remove(packs[0])
        for f in try site.names("index/") { try site.remove(f) }
        try site.replace(oldName, old)
        let check = try open().repository.checkObjects(repair: true)
        XCTAssertEqual(check.bad, [])
        XCTAssertEqual(check.reindexed, 1)
        XCTAssertEqual(try site.packs(), [oldName])
        try assertEveryObjectReadsBack(names, bs)

        // A pack's bytes under a name they do not give, and damage no record holds (the end's
        // reserved field), are named by verify and by the independent reader.
        func assertNamesAreChecked(_ name: String, file: StaticString = #filePath, line: UInt = #line) throws {
            let other = "packs/" + String(repeating: "e", count: 64) + ".pack"
            try site.replace(other, try site.load(name))
            XCTAssertEqual(try open().repository.checkObjects(repair: false).bad, ["\(other): its bytes do not hash to its name"], file: file, line: line)
            XCTAssertTrue(try readerVerify().contains("its bytes do not hash to its name"), file: file, line: line)
            try site.remove(other)
            try site.damage(name) { $0[$0.count - 1] ^= 0x5A }
            XCTAssertEqual(try open().repository.checkObjects(repair: false).bad, ["\(name): not a whole pack"], file: file, line: line)
            XCTAssertTrue(try readerVerify().contains("reserved field"), file: file, line: line)
            try site.damage(name) { $0[$0.count - 1] ^= 0x5A }
        }
        try assertNamesAreChecked(oldName)

        // gc repacks the old pack (two thirds of it dead) into a "TSPACK02" one.
        let store = try open()
        let keep = Set(names.prefix(8))
        let report = try store.collectGarbage(grace: 0, referenced: { keep })
        XCTAssertEqual(report.objectsRemoved, 17)
        let after = try site.packs()
        XCTAssertEqual(after.count, 1)
        XCTAssertNotEqual(after, [oldName])
        XCTAssertEqual(Array(try site.load(after[0]).prefix(8)), Array("TSPACK02".utf8))
        try assertNamesAreChecked(after[0])
        try assertEveryObjectReadsBack(Array(names.prefix(8)), Array(bs.prefix(8)))
    }

    /// Attack round 30. (1) Bytes slipped between a pack's last record and its end leave every
    /// record where a rewrite puts it, so the rewrite by `verify --repair` has the damaged pack's
    /// name ("TSPACK02": the name of its headers): it replaces the damaged file, whose bytes go
    /// to quarantine (before, the save found the name taken, the damaged pack went to quarantine
    /// and every object with it). (2) An end whose record count is not the records', or whose
    /// reserved field is not 0, is damage even under the name those bytes give (it passed as a
    /// sound pack); gc leaves such a pack as it is rather than failing on it.
    func testPacksWithStrayBytesOrAFalseEndAreDamageAndRepairKeepsTheirObjects() throws {
        let cases: [(String, ([UInt8]) -> [UInt8])] = [
            ("stray bytes before the end", { Array($0.dropLast(16)) + [UInt8](repeating: 0x4A, count: 40) + Array($0.suffix(16)) }),
            ("an empty record with a wrong name before the end", { Array($0.dropLast(16)) + [UInt8](repeating: 0xAB, count: 32) + [0, 0, 0, 0] + Array($0.suffix(16)) }),
            ("a count three more", { var b = $0; b[b.count - 8] &+= 3; return b }),
            ("a reserved field of 7", { var b = $0; b[b.count - 4] = 7; return b }),
        ]
        for (what, forge) in cases {
            site = try makeSite()
            defer { if let root = site.root { try? FileManager.default.removeItem(atPath: root) } }
            let (_, bs, names) = try sealedStore(30, "forged")
            let pack = try XCTUnwrap(try site.packs().first)
            let forged = forge([UInt8](try site.load(pack)))
            // Named as the rule names those bytes when it can (a forger's rename), else kept.
            let name = formatPackName(Data(forged)).map { "packs/\($0).pack" } ?? pack
            try site.remove(pack)
            try site.replace(name, Data(forged))
            let plain = try open().repository.checkObjects(repair: false)
            XCTAssertTrue(plain.bad.contains("\(name): not a whole pack"), "\(what): \(plain.bad)")
            XCTAssertFalse(try readerVerify().isEmpty, what)
            // gc beside it: the pack stays, nothing fails.
            XCTAssertNoThrow(try open().collectGarbage(grace: 0, referenced: { Set(names.prefix(5)) }), what)
            let repaired = try open().repository.checkObjects(repair: true)
            XCTAssertEqual(repaired.quarantined, 1, what)
            XCTAssertEqual(try site.load("quarantine/" + (name as NSString).lastPathComponent), Data(forged), "\(what): the damaged bytes kept in quarantine")
            try assertEveryObjectReadsBack(Array(names.prefix(5)), Array(bs.prefix(5)))
            for p in try site.packs() { XCTAssertNotEqual(try site.load(p), Data(forged), what) }
        }
    }

    /// Attack round 31: a flipped bit in one record's length field, in a pack no index lists (a
    /// crash between a pack's save and its index's leaves one; so does a damaged index file): a
    /// walk of the records loses its place there, and the repair lost every record after it.
    /// They are found again by looking past that point for the records of the objects the
    /// regions name, so only the record whose own header is damaged is lost, and its region is
    /// marked by verify (gc.md).
    func testRepairFindsTheRecordsAfterADamagedLengthInAPackNoIndexLists() throws {
        let (_, bs, names) = try sealedStore(30, "len")
        let pack = try XCTUnwrap(try site.packs().first)
        var raw = [UInt8](try site.load(pack))
        raw[try XCTUnwrap(packRecords(raw))[10].start + 32] ^= 0x10 // record 10's length
        try site.replace(pack, Data(raw))
        for f in try site.names("index/") { try site.remove(f) }
        let check = try open().repository.checkObjects(repair: true, referenced: { Set(names) })
        XCTAssertTrue(check.bad.contains("\(pack): not a whole pack"), "\(check.bad)")
        let kept = (0..<30).filter { $0 != 10 }
        try assertEveryObjectReadsBack(kept.map { names[$0] }, kept.map { bs[$0] })
        XCTAssertFalse(try open().contains(names[10]), "its header is damaged: lost")
    }

    /// Attack round 32: with the objects the regions name (verify passes gc's mark), the records
    /// of a damaged pack no index lists are looked for by name at every offset, so no sound
    /// record is lost for its neighbours' damage: not those a damaged length that still points
    /// inside the pack jumps over (the search began where the walk stopped, past them), nor one
    /// just before a second damaged header (a chained search passed it over). Only the records
    /// whose own headers are damaged are lost.
    func testRepairByNameKeepsEveryRecordWhoseOwnBytesAreSound() throws {
        for (what, damaged, delta) in [("a length that points inside the pack", [3], 512), ("two damaged headers", [1, 5], 16)] {
            site = try makeSite()
            defer { if let root = site.root { try? FileManager.default.removeItem(atPath: root) } }
            let (_, bs, names) = try sealedStore(30, "name")
            let pack = try XCTUnwrap(try site.packs().first)
            var raw = [UInt8](try site.load(pack))
            let starts = try XCTUnwrap(packRecords(raw)).map(\.start)
            for k in damaged {
                let l = Int(raw[starts[k] + 32]) | Int(raw[starts[k] + 33]) << 8
                XCTAssertLessThan(starts[k] + 36 + l + delta, raw.count, "\(what): the damaged length still points inside the pack")
                raw[starts[k] + 32] = UInt8((l + delta) & 0xFF); raw[starts[k] + 33] = UInt8((l + delta) >> 8)
            }
            try site.replace(pack, Data(raw))
            for f in try site.names("index/") { try site.remove(f) }
            let check = try open().repository.checkObjects(repair: true, referenced: { Set(names) })
            XCTAssertTrue(check.bad.contains("\(pack): not a whole pack"), "\(what): \(check.bad)")
            let kept = (0..<30).filter { !damaged.contains($0) }
            try assertEveryObjectReadsBack(kept.map { names[$0] }, kept.map { bs[$0] })
            for k in damaged { XCTAssertFalse(try open().contains(names[k]), "\(what): record \(k)'s header is damaged: lost") }
        }
    }

    /// A gc killed after saving its new pack leaves each object it copied in two packs (and a
    /// store of an earlier version may hold an object loose as well). The next gc counts each
    /// object once ("kept N objects" is the number of distinct objects, not of copies: it said 27
    /// here) and keeps exactly the referenced ones.
    func testGCAfterAnInterruptedGCCountsEachObjectOnce() throws {
        let (store, bs, names) = try sealedStore(20, "dup")
        // What the killed gc left: a second pack holding objects 0-11 again (made the way gc makes
        // its packs, with its own index file), and object 3 also as a loose file of an earlier version.
        let writer = GCPackWriter(repository: store.repository)
        for i in 0..<12 { try writer.append(Digest(hex: names[i])!, bs[i]) }
        XCTAssertEqual(try writer.finish().count, 1)
        let loose = "objects/\(names[3].prefix(2))/\(names[3])"
        try site.replace(loose, bs[3])
        let before = try open()
        XCTAssertEqual(try site.packs().count, 2)
        // Objects 15-19 are no longer referenced.
        let kept = Set(names.prefix(15))
        let report = try before.repository.collectGarbage(grace: 0) { kept }
        XCTAssertEqual(report.objectsKept, 15, "each object once")
        XCTAssertEqual(report.objectsRemoved, 5)
        let after = try open()
        for (i, (n, b)) in zip(names, bs).enumerated() {
            if i < 15 { XCTAssertEqual(try after.read(n, limit: 1 << 20), b) } else { XCTAssertFalse(after.contains(n)) }
        }
        XCTAssertEqual(try readerList().count, 15, "the independent reader finds the 15")
        XCTAssertNil(try site.backend.stat(loose), "the loose copy is removed")
    }

    /// Attack round 7: a pack no index file lists (its index removed) could not be read by `cat`
    /// or exports, and `verify --repair` left it so. The repair indexes it from its records.
    func testRepairIndexesAPackNoIndexLists() throws {
        let (_, bs, _) = try sealedStore(25, "u")
        for f in try site.names("index/") { try site.remove(f) }
        let unlisted = try open()
        XCTAssertThrowsError(try unlisted.read(SHA256.hex(bs[0]), limit: 1 << 20))
        // A plain verify names it (not as damage: its objects are sound).
        let plain = try unlisted.repository.checkObjects(repair: false)
        XCTAssertEqual(plain.bad, [])
        XCTAssertEqual(plain.unindexedPacks, try site.packs())
        let check = try unlisted.repository.checkObjects(repair: true)
        XCTAssertEqual(check.reindexed, 1)
        XCTAssertEqual(check.bad, [])
        let repaired = try open()
        for b in bs { XCTAssertEqual(try repaired.read(SHA256.hex(b), limit: 1 << 20), b) }
        XCTAssertEqual(try repaired.repository.checkObjects(repair: false).unindexedPacks, [])
    }

    /// An index file whose entries give offsets no pack can have (2^64 - 1, crafted, with a
    /// valid trailer and name) trapped `cat` and `export`. It is damage now: refused when read,
    /// so the pack it listed is indexed again and every object is found where it is.
    func testAnIndexEntryWithAnImpossibleOffsetIsDamageNotATrap() throws {
        let store = try open()
        let bs = bodies(6, "idx")
        for b in bs { try store.put(b) }
        try store.sync()
        let names = try site.names("index/")
        XCTAssertEqual(names.count, 1)
        var raw = [UInt8](try site.load(names[0]))
        let packs = Int(raw[IndexFormat.packTableOffset]) | Int(raw[IndexFormat.packTableOffset + 1]) << 8
        let first = IndexFormat.entriesOffset(packs: packs)
        let count = (raw.count - 32 - first) / IndexFormat.entrySize
        XCTAssertEqual(count, 6)
        for i in 0..<count { for k in 0..<8 { raw[first + i * IndexFormat.entrySize + 36 + k] = 0xFF } }
        let body = Array(raw[0..<(raw.count - 32)])
        let hex = Array(sha256Hex(Data(body)).utf8)
        let trailer = stride(from: 0, to: 64, by: 2).map { UInt8(String(decoding: hex[$0..<($0 + 2)], as: UTF8.self), radix: 16)! }
        raw = body + trailer
        try site.remove(names[0])
        try site.replace("index/" + sha256Hex(Data(body)) + ".idx", Data(raw))
        let again = try open()
        again.recoverLeftovers() // the pack no valid index lists is indexed again
        for b in bs { XCTAssertEqual(try again.read(sha256Hex(b), limit: 1 << 20), b) }
        let (rc, out) = try site.tilespool(["cat", sha256Hex(bs[0])])
        XCTAssertEqual(rc, 0, out)
    }

    /// An object whose index entry names a pack that is gone is not "absent": `read` throws EIO
    /// naming the pack, and `cat` says so (attack round 16: it said the store does not hold it).
    func testAnObjectWhosePackIsGoneIsReportedAsMissingPackNotAbsent() throws {
        let store = try open()
        let bs = bodies(3, "gone")
        for b in bs { try store.put(b) }
        try store.sync()
        let packs = try site.packs()
        XCTAssertEqual(packs.count, 1)
        try site.remove(packs[0])
        let again = try open()
        XCTAssertThrowsError(try again.read(sha256Hex(bs[0]), limit: 1 << 20)) { error in
            XCTAssertEqual((error as? SystemError)?.errno, EIO, "\(error)")
            XCTAssertTrue("\(error)".contains("\(packs[0]), which is missing"), "\(error)")
        }
        let (rc, out) = try site.tilespool(["cat", sha256Hex(bs[0])])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("which is missing"), out)
        XCTAssertFalse(out.contains("does not hold"), out)
        // An object the store never held is still "does not hold".
        let (rc2, out2) = try site.tilespool(["cat", sha256Hex(Data("never stored".utf8))])
        XCTAssertEqual(rc2, 1, out2)
        XCTAssertTrue(out2.contains("does not hold object"), out2)
    }

    /// Objects of an earlier version (loose, `objects/ab/<sha>`) are read as they are, and gc
    /// moves the referenced ones into packs.
    func testLooseObjectsAreReadAndGCPacksThem() throws {
        let b = Data("an object from before packs".utf8), sha = sha256Hex(b)
        let loose = "objects/\(sha.prefix(2))/\(sha)"
        try site.replace(loose, b)
        let store = try open()
        XCTAssertTrue(store.contains(sha))
        XCTAssertEqual(try store.read(sha, limit: 100), b)
        let report = try store.collectGarbage(grace: 0) { [sha] }
        XCTAssertEqual(report.objectsRemoved, 0)
        XCTAssertNil(try site.backend.stat(loose), "the loose object is moved into a pack")
        XCTAssertEqual(try readerList()[sha], b.count)
        XCTAssertEqual(try store.read(sha, limit: 100), b)
    }
}

/// Every test of `StoreTests` in a bucket of a real Ceph RADOS Gateway (one for the class): the
/// same steps, the same expected values.
final class StoreOnS3Tests: StoreTests {
    override class func setUp() { CephServers.start(for: self) }
    override class func tearDown() { CephServers.stop(for: self) }
    override func makeSite() throws -> StoreSite {
        try StoreSite(rgw: CephServers.server(for: type(of: self), test: name, file: #filePath, line: #line), label: "store")
    }

    // SwiftPM's test discovery on Linux lists a class (with every test it inherits) only when the
    // class declares a test of its own: this one.
    /// A sealed pack and its index file are in the bucket, under the store's prefix, and the
    /// scratch folder keeps no copy of the pack.
    func testSealedPacksAreInTheBucketNotInScratch() throws {
        let (_, bs, names) = try sealedStore(12, "bucket")
        let packs = try site.packs()
        XCTAssertEqual(packs.count, 1)
        XCTAssertEqual(try site.names("index/").count, 1)
        // The pack's magic, each record (its SHA-256 and length, then the body), and the footer.
        XCTAssertEqual(try site.load(packs[0]).count, PackFormat.magic.count + bs.reduce(0) { $0 + PackFormat.headerSize + $1.count } + PackFormat.footerSize)
        XCTAssertEqual(Set(try site.readerList().keys), Set(names))
        let left = try FileManager.default.subpathsOfDirectory(atPath: site.scratch).filter { $0.hasSuffix(".pack") || $0.hasSuffix(".partial") }
        XCTAssertEqual(left, [], "no pack kept in scratch")
    }
}

/// The local backend's own cases (a folder in the way, mtimes, symlinks, FIFOs and folders
/// among the store's files), `Digest`, and the spool's region files.
final class LocalStoreTests: StoreTestCase {
    /// A pack that cannot be saved (its folder is a file here) fails the sync, and its objects
    /// are reported failed until written again; the next put writes them again.
    func testFailedSyncIsReportedForItsObjectsUntilWritten() throws {
        let store = try open()
        let b = Data("will fail".utf8)
        let sha = try store.put(b).sha256
        XCTAssertTrue(FileManager.default.createFile(atPath: dir + "/packs", contents: Data("in the way".utf8)))
        XCTAssertThrowsError(try store.sync())
        XCTAssertNotNil(store.writeFailure(among: [sha]))
        try FileManager.default.removeItem(atPath: dir + "/packs")
        XCTAssertTrue(try store.put(b).isNew, "written again")
        try store.sync()
        XCTAssertNil(store.writeFailure(among: [sha]))
        XCTAssertEqual(try store.read(sha, limit: 100), b)
    }

    /// Attack round 15: a pack is old for gc only when both its `created` (in the index: what a
    /// daemon's reuse rule trusts) and its file's mtime are older than the grace period. A pack
    /// with an old mtime (a restore, a skewed clock) but a fresh `created` stays; backdated as a
    /// whole (created and mtime) its unreferenced objects go.
    func testGCTakesAPackAsOldOnlyWhenCreatedAndModifiedBothAre() throws {
        let store = try open()
        let bs = bodies(20, "age")
        for b in bs { try store.put(b) }
        try store.sync()
        let threeHoursAgo = Date().addingTimeInterval(-3 * 3600)
        for name in try FileManager.default.contentsOfDirectory(atPath: dir + "/packs") {
            try FileManager.default.setAttributes([.modificationDate: threeHoursAgo], ofItemAtPath: dir + "/packs/" + name)
        }
        XCTAssertEqual(try open().collectGarbage(grace: 3600) { [] }.objectsRemoved, 0, "created seconds ago: young")
        XCTAssertEqual(Set(try readerList().keys), Set(bs.map(sha256Hex)))
        XCTAssertEqual(try runTool("/usr/bin/python3", [SpoolFixture.storeReader, "backdate", dir, "10800"]).0, 0)
        XCTAssertEqual(try open().collectGarbage(grace: 3600) { [] }.objectsRemoved, bs.count)
    }

    /// `Digest(hex:)` reads 64 hex digits of either case, and only those: each byte that is not
    /// a hex digit (the neighbours of the digit and letter ranges, non-ASCII), at any place, and
    /// any other length give nil; a digest's `hex` reads back as itself.
    func testDigestReadsSixtyFourHexDigitsAndNothingElse() throws {
        let name = SHA256.hex(Data("digest".utf8))
        let d = try XCTUnwrap(Digest(hex: name))
        XCTAssertEqual(d.hex, name)
        XCTAssertEqual(Digest(hex: name.uppercased()), d)
        XCTAssertEqual(Digest(bytes: Data("digest".utf8).withUnsafeBytes { SHA256.bytes($0) }), d)
        XCTAssertEqual(Digest(hex: String(repeating: "f", count: 64))?.a, UInt64.max)
        XCTAssertEqual(Digest(hex: "0123456789abcdefABCDEF" + String(repeating: "0", count: 42))?.a, 0x0123_4567_89ab_cdef)
        for bad in ["/", ":", "@", "G", "`", "g", " ", "\0", "\u{7F}", "é"] {
            for at in [0, 15, 16, 31, 40, 63] {
                var chars = Array(name)
                chars[at] = Character(bad)
                XCTAssertNil(Digest(hex: String(chars)), "\(bad) at \(at)")
            }
        }
        for text in ["", String(name.dropLast()), name + "0", String(name.dropLast(2)) + "é"] { XCTAssertNil(Digest(hex: text), text) }
        // A string whose UTF-8 is not contiguous (bridged from NSString) reads the same.
        XCTAssertEqual(Digest(hex: NSString(string: name) as String), d)
    }

    /// Entries TileSpool never makes in the store's folders (attack round 6: a symlink, a FIFO,
    /// a folder named like a temp file; round 9: files under names it never gives, such as a
    /// pack copied to `.bak`) are named by verify as faults and left alone, by the repair and by
    /// gc too; what a symlink points at is never touched.
    func testForeignEntriesAreReportedAndLeftAlone() throws {
        let (store, bs, names) = try sealedStore(10, "foreign")
        let pack = try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: dir + "/packs").first { $0.hasSuffix(".pack") })
        let outside = try TestScratch.folder("foreign-target").path + "/target"
        try Data("keep".utf8).write(to: URL(fileURLWithPath: outside))
        XCTAssertEqual(symlink(outside, dir + "/packs/.tmp-evil"), 0)
        XCTAssertEqual(symlink(outside, dir + "/packs/" + String(repeating: "a", count: 64) + ".pack"), 0)
        XCTAssertEqual(mkfifo(dir + "/index/.tmp-fifo", 0o600), 0)
        try FileManager.default.createDirectory(atPath: dir + "/objects/.tmp-dir", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: dir + "/packs/" + String(repeating: "b", count: 64) + ".pack", withIntermediateDirectories: true)
        // Regular files under names TileSpool never gives (attack round 9: a pack renamed .bak).
        try FileManager.default.copyItem(atPath: dir + "/packs/" + pack, toPath: dir + "/packs/" + pack + ".bak")
        try Data("notes".utf8).write(to: URL(fileURLWithPath: dir + "/index/notes.txt"))
        let expected = ["index/.tmp-fifo (FIFO)", "index/notes.txt (a file whose name TileSpool never gives)", "objects/.tmp-dir (folder)",
                        "packs/" + pack + ".bak (a file whose name TileSpool never gives)",
                        "packs/.tmp-evil (symlink)", "packs/" + String(repeating: "a", count: 64) + ".pack (symlink)",
                        "packs/" + String(repeating: "b", count: 64) + ".pack (folder)"].sorted()
        XCTAssertEqual(try store.repository.checkObjects(repair: false).foreignEntries, expected)
        XCTAssertEqual(try store.repository.checkObjects(repair: true).foreignEntries, expected, "the repair leaves them")
        _ = try store.repository.collectGarbage(grace: 0) { Set(names) }
        XCTAssertEqual(try open().repository.checkObjects(repair: false).foreignEntries, expected, "gc leaves them")
        XCTAssertEqual(try String(contentsOfFile: outside, encoding: .utf8), "keep")
        let reopened = try open()
        for (n, b) in zip(names, bs) { XCTAssertEqual(try reopened.read(n, limit: 1 << 20), b) }
    }

    func testManifestReadStopsAtAPartialLastLineAndCutsItOff() throws {
        let files = RegionFiles(dir: dir + "/r")
        try Files.makeDirectories(files.dir)
        let sha = String(repeating: "0", count: 64)
        let lines = (0..<3).map { ManifestLine(kind: .tile, sha256: sha, bytes: $0, key: "s/1/0/\($0)", url: "http://h/\($0)") }
        try files.appendToManifest(lines)
        files.closeManifest()
        let whole = try Data(contentsOf: URL(fileURLWithPath: files.manifestPath))
        try (whole + Data("tile\t-\t0\ts/1/1/".utf8)).write(to: URL(fileURLWithPath: files.manifestPath)) // a write cut by a crash
        // A reader beside the daemon (gc, verify) skips the partial line and leaves the file alone.
        var read: [ManifestLine] = []
        files.readManifest { read.append($0) }
        XCTAssertEqual(read, lines)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: files.manifestPath)).count, whole.count + 15)
        // The daemon, the only writer, cuts it off before appending.
        read = []
        files.readManifest(cutPartialLine: true) { read.append($0) }
        XCTAssertEqual(read, lines)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: files.manifestPath)), whole)
    }

    /// A torn line holding bytes that are not UTF-8 is cut at the right byte.
    func testPartialLineWithInvalidUTF8IsCutAtTheRightByte() throws {
        let files = RegionFiles(dir: dir + "/u")
        try Files.makeDirectories(files.dir)
        try files.appendToManifest([ManifestLine(kind: .glyphs, sha256: nil, bytes: 0, key: "F\u{00e9}nt/0-255", url: "http://h/x")])
        files.closeManifest()
        let whole = try Data(contentsOf: URL(fileURLWithPath: files.manifestPath))
        try (whole + Data([0x74, 0xFF, 0xFE, 0x09])).write(to: URL(fileURLWithPath: files.manifestPath))
        files.readManifest(cutPartialLine: true) { _ in }
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: files.manifestPath)), whole)
    }

    func testLongManifestIsStreamed() throws {
        let files = RegionFiles(dir: dir + "/big")
        try Files.makeDirectories(files.dir)
        let lines = (0..<30_000).map { ManifestLine(kind: .tile, sha256: nil, bytes: 0, key: "s/15/\($0)/1", url: "http://h/\($0)") }
        try files.appendToManifest(lines)
        var n = 0
        files.readManifest { l in XCTAssertEqual(l.key, "s/15/\(n)/1"); n += 1 }
        XCTAssertEqual(n, 30_000) // spans several 1 MiB blocks
    }
}

/// gc's read of a region's manifest in a bucket, taken again when a key listed is gone before
/// its GET (a refresh swapped in beside it: attack rounds 56-57), and only then.
final class ManifestReadAgainTests: XCTestCase {
    func testAReadCutShortByAKeyListedAndGoneIsTakenAgainAndAnyOtherFailureStops() {
        let gone = S3Error(status: 404, code: "NoSuchKey", message: "regions/r/refresh/manifest/0000000001.tsv was listed but is gone")
        var reads = 0
        XCTAssertNil(StoreMaintenance.readAgainWhileListedKeysGo { reads += 1; return reads < 3 ? gone : nil })
        XCTAssertEqual(reads, 3, "two reads cut short, the third whole")
        reads = 0
        let always = StoreMaintenance.readAgainWhileListedKeysGo { reads += 1; return gone }
        XCTAssertEqual((always as? S3Error)?.status, 404)
        XCTAssertEqual(reads, 5, "at most five reads")
        reads = 0
        let denied = StoreMaintenance.readAgainWhileListedKeysGo { reads += 1; return S3Error(status: 403, code: "AccessDenied", message: "no") }
        XCTAssertEqual((denied as? S3Error)?.status, 403)
        XCTAssertEqual(reads, 1, "a failure other than a key gone stops at once")
        reads = 0
        let notDir = StoreMaintenance.readAgainWhileListedKeysGo { reads += 1; return SystemError("open", "regions/r/refresh", errno: ENOTDIR) }
        XCTAssertEqual((notDir as? SystemError)?.errno, ENOTDIR)
        XCTAssertEqual(reads, 1)
    }
}
