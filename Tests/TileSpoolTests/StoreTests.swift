import Foundation
import XCTest
@testable import TileSpoolCore
@testable import TileSpoolIO

/// The store and region files at the I/O edge, on a temp folder.
final class StoreTests: XCTestCase {
    var dir: String!
    override func setUpWithError() throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("store-\(UUID().uuidString)").path
    }
    override func tearDown() { try? FileManager.default.removeItem(atPath: dir) }

    func testPutNamesObjectsByTheirSHA256AndStoresEachOnce() throws {
        let store = try ObjectStore(root: dir)
        let body = Data("hello tiles".utf8)
        let first = try store.put(body)
        XCTAssertTrue(first.isNew)
        XCTAssertEqual(first.sha256, sha256Hex(body))
        try store.sync() // the writer thread has written it (and syncfs flushed it)
        XCTAssertEqual(FileManager.default.contents(atPath: store.objectPath(first.sha256)), body)
        XCTAssertTrue(store.objectPath(first.sha256).hasSuffix("/objects/\(first.sha256.prefix(2))/\(first.sha256)"))
        // The same bytes again (put does not look first while its objects are new: the writer
        // thread finds the name taken) leave one file and count once.
        let again = try store.put(body)
        XCTAssertEqual(again.sha256, first.sha256)
        try store.sync()
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: store.objectsDir + "/" + first.sha256.prefix(2)), [first.sha256])
        XCTAssertEqual(FileManager.default.contents(atPath: store.objectPath(first.sha256)), body)
        XCTAssertEqual(store.added.objects, 1)
        XCTAssertEqual(store.added.bytes, body.count)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir + "/tmp"), [])
        XCTAssertEqual(SHA256.hex(Data()), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    }

    /// A download lane (the second download loop, on its own thread) stores exactly the answers
    /// the event loop would (a tile's 2xx with a tile body) and hands every other answer back
    /// untouched: a 404, an HTML page with 200, a job without a policy; a cancelled job gives
    /// no result. Against nginx serving the real map data.
    func testDownloadLaneStoresTileAnswersItselfAndReturnsTheRest() throws {
        let mapdata = try MapData.require()
        let server = try NginxServer(root: mapdata, extraLocations: """
            location /login/ { default_type text/html; return 200 "<html><body>Please sign in</body></html>"; }
            """)
        let store = try ObjectStore(root: dir)
        let lane = try DownloadLane(options: HTTPOptions(), store: store)
        defer { lane.stop() }
        let policy = LaneStorePolicy(emptyStatuses: [204])
        let tilePath = "vector/taipei/0/0/0.pbf"
        lane.start(url: server.baseURL + "/" + tilePath, tag: 1, validators: nil, headers: [], policy: policy)
        lane.start(url: server.baseURL + "/tiles/monaco/14/8530/5975.pbf", tag: 2, validators: nil, headers: [], policy: policy)
        lane.start(url: server.baseURL + "/login/1/2/3.png", tag: 3, validators: nil, headers: [], policy: policy)
        lane.start(url: server.baseURL + "/raster/osm_carto/0/0/0.png", tag: 4, validators: nil, headers: [], policy: nil)
        lane.flush()
        XCTAssertEqual(lane.inFlight, 4)
        var results: [Int: TransferResult] = [:]
        try waitUntil("the lane answered the four jobs") {
            for r in lane.collect() { results[r.tag] = r }
            return results.count == 4
        }
        XCTAssertEqual(lane.inFlight, 0)

        let tile = try XCTUnwrap(results[1])
        let onDisk = try Data(contentsOf: mapdata.appendingPathComponent(tilePath))
        XCTAssertEqual(tile.status, 200)
        XCTAssertEqual(tile.storedSHA256, sha256Hex(onDisk))
        // Written before the result came back: the object is in place without a sync.
        XCTAssertEqual(FileManager.default.contents(atPath: store.objectPath(sha256Hex(onDisk))), onDisk)
        XCTAssertEqual(results[2]?.status, 404)
        XCTAssertNil(results[2]?.storedSHA256)
        XCTAssertEqual(results[3]?.status, 200)
        XCTAssertNil(results[3]?.storedSHA256, "an HTML page is not a tile")
        XCTAssertEqual(results[4]?.status, 200)
        XCTAssertNil(results[4]?.storedSHA256, "no policy: the event loop judges it")
        XCTAssertGreaterThan(results[4]?.body.count ?? 0, 0)
        try store.sync()
        XCTAssertEqual(store.added.objects, 1)
        XCTAssertEqual(store.added.bytes, onDisk.count)

        // A cancelled job reports nothing, even when its answer was already on its way.
        lane.start(url: server.baseURL + "/" + tilePath, tag: 5, validators: nil, headers: [], policy: policy)
        lane.start(url: server.baseURL + "/tiles/monaco/14/8529/5975.pbf", tag: 6, validators: nil, headers: [], policy: policy)
        lane.flush()
        lane.cancel(tag: 5)
        lane.flush()
        var later: [TransferResult] = []
        try waitUntil("the uncancelled job answered") {
            later += lane.collect()
            return !later.isEmpty
        }
        XCTAssertEqual(later.map(\.tag), [6])
        XCTAssertNotNil(later.first?.storedSHA256)
        XCTAssertEqual(lane.inFlight, 0)
    }

    /// Storing bytes whose object exists refreshes its mtime (gc's grace period counts from it:
    /// docs/gc.md), whether `put` looked first or the writer thread found the name taken; once
    /// most puts find their object there, `put` looks first and answers "was there" at once.
    func testStoringExistingBytesRefreshesTheObjectAndSwitchesToLookingFirst() throws {
        let store = try ObjectStore(root: dir)
        store.setUsage((0, 0), addedAtStart: store.added)
        let bodies = (0..<4).map { Data("sea tile \($0)".utf8) }
        for b in bodies { XCTAssertTrue(try store.put(b).isNew) }
        try store.sync()
        let old = Date().addingTimeInterval(-7200)
        func age(_ b: Data) throws -> TimeInterval {
            let attrs = try FileManager.default.attributesOfItem(atPath: store.objectPath(sha256Hex(b)))
            return Date().timeIntervalSince(try XCTUnwrap(attrs[.modificationDate] as? Date))
        }
        for b in bodies { try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: store.objectPath(sha256Hex(b))) }
        XCTAssertGreaterThan(try age(bodies[0]), 7000)
        // Not looked up first: the writer thread refreshes it.
        XCTAssertTrue(try store.put(bodies[0]).isNew)
        try store.sync()
        XCTAssertLessThan(try age(bodies[0]), 600)
        // Puts that keep finding their object there make put look first.
        var answeredAtOnce = 0
        for _ in 0..<40 {
            if try !store.put(bodies[1]).isNew { answeredAtOnce += 1 }
            try store.sync()
        }
        XCTAssertGreaterThan(answeredAtOnce, 20)
        XCTAssertLessThan(try age(bodies[1]), 600)
        XCTAssertFalse(try store.put(bodies[2]).isNew, "looked up first, found, and refreshed at once")
        XCTAssertLessThan(try age(bodies[2]), 600)
        XCTAssertGreaterThan(try age(bodies[3]), 7000, "an object not stored again keeps its age")
        try store.sync()
        XCTAssertEqual(store.added.objects, 4, "each object written once")
        XCTAssertEqual(store.usage?.objects, 4)
        XCTAssertEqual(store.usage?.bytes, bodies.map(\.count).reduce(0, +))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir + "/tmp"), [])
    }

    /// A write that fails on the writer thread is answered for its object by every later batch
    /// (not only by the first sync after it), never for another object, and is forgotten once a
    /// later write of the same object succeeds.
    func testFailedWriteIsReportedForItsObjectUntilItIsWritten() throws {
        let store = try ObjectStore(root: dir)
        let bad = Data("a body whose folder is a file".utf8), good = Data("another body".utf8)
        let badSHA = sha256Hex(bad), goodSHA = sha256Hex(good)
        XCTAssertNotEqual(badSHA.prefix(2), goodSHA.prefix(2))
        // objects/<ab> is a regular file: making the object's file in it fails (ENOTDIR).
        let folder = store.objectsDir + "/" + badSHA.prefix(2)
        XCTAssertTrue(FileManager.default.createFile(atPath: folder, contents: Data()))
        XCTAssertTrue(try store.put(bad).isNew)
        XCTAssertTrue(try store.put(good).isNew)
        try store.sync()
        let failure = try XCTUnwrap(store.writeFailure(among: [badSHA]) as? SystemError)
        XCTAssertEqual(failure.errno, ENOTDIR)
        XCTAssertNil(store.writeFailure(among: [goodSHA]))
        XCTAssertEqual(FileManager.default.contents(atPath: store.objectPath(goodSHA)), good)
        try store.sync() // a second batch still learns of it
        XCTAssertNotNil(store.writeFailure(among: [goodSHA, badSHA]))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir + "/tmp"), [], "the temp file is removed")
        // Once the folder can be made, the same body written again clears it.
        try FileManager.default.removeItem(atPath: folder)
        XCTAssertTrue(try store.put(bad).isNew)
        try store.sync()
        XCTAssertNil(store.writeFailure(among: [badSHA]))
        XCTAssertEqual(FileManager.default.contents(atPath: store.objectPath(badSHA)), bad)
    }

    /// With no room at the writer thread, `put` writes objects itself: each is in place when it
    /// returns, and a failure is answered by `writeFailure(among:)` like the writer's.
    func testPutWritesObjectsItselfWhenTheWriterThreadIsBusy() throws {
        let store = try ObjectStore(root: dir)
        store.maxQueuedWrites = 0
        let bodies = (0..<50).map { Data("tile \($0)".utf8) }
        for b in bodies {
            XCTAssertTrue(try store.put(b).isNew)
            XCTAssertEqual(FileManager.default.contents(atPath: store.objectPath(sha256Hex(b))), b, "written before put returns")
        }
        XCTAssertEqual(store.writesQueued, 0, "nothing went to the writer thread")
        XCTAssertEqual(store.added.objects, 50)
        let bad = Data("a body whose folder is a file".utf8), badSHA = sha256Hex(bad)
        XCTAssertTrue(FileManager.default.createFile(atPath: store.objectsDir + "/" + badSHA.prefix(2), contents: Data()))
        XCTAssertTrue(try store.put(bad).isNew)
        try store.sync()
        XCTAssertEqual((store.writeFailure(among: [badSHA]) as? SystemError)?.errno, ENOTDIR)
        XCTAssertNil(store.writeFailure(among: bodies.map(sha256Hex)))
        XCTAssertEqual(store.added.objects, 50, "the failed object is not counted")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir + "/tmp"), [])
    }

    /// The writer's queue is bounded in bytes as well as in objects. With `maxQueuedBytes` 0, a body
    /// is queued only when none waits (so one large body still goes to the writer); with
    /// `maxQueuedWrites` 2, at most two wait. Every other `put` writes its object itself before it
    /// returns, and every object ends up stored once.
    func testQueuedBodiesStayWithinTheByteAndObjectLimits() throws {
        // (maxQueuedWrites, maxQueuedBytes, bodies that may wait at once)
        for (objects, bytes, most) in [(ObjectStore.defaultMaxQueuedWrites, 0, 1), (2, ObjectStore.defaultMaxQueuedBytes, 2)] {
            let root = dir + "-\(objects)-\(bytes)"
            defer { try? FileManager.default.removeItem(atPath: root) }
            let store = try ObjectStore(root: root)
            store.maxQueuedWrites = objects
            store.maxQueuedBytes = bytes
            let bodies = (0..<60).map { Data(repeating: UInt8($0), count: 20_000 + $0) }
            var queued = 0
            for b in bodies {
                let before = store.writesQueued
                XCTAssertTrue(try store.put(b).isNew)
                let pending = store.writes.pending
                XCTAssertLessThanOrEqual(pending.objects, most, "at most \(most) bodies wait")
                XCTAssertLessThanOrEqual(pending.bytes, most * b.count)
                if store.writesQueued == before {
                    XCTAssertEqual(FileManager.default.contents(atPath: store.objectPath(sha256Hex(b))), b, "written before put returns")
                } else {
                    queued += 1
                }
            }
            XCTAssertGreaterThan(queued, 0, "the first body, at least, went to the writer")
            try store.sync()
            for b in bodies { XCTAssertEqual(FileManager.default.contents(atPath: store.objectPath(sha256Hex(b))), b) }
            XCTAssertEqual(store.added.objects, 60)
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: root + "/tmp"), [])
        }
    }

    /// Write tickets: a put handed to the writer thread is done once `writesDone` reaches its
    /// ticket, and the wake fd turns readable then; `resetWake` empties it.
    func testWriteTicketsAndTheWakeFD() throws {
        let store = try ObjectStore(root: dir)
        XCTAssertEqual(store.writesQueued, 0)
        XCTAssertEqual(store.writesDone, 0)
        func readable() -> Bool {
            var p = pollfd(fd: store.writesWakeFD, events: Int16(POLLIN), revents: 0)
            return poll(&p, 1, 0) == 1
        }
        store.wakeWhenDone(through: 0)
        XCTAssertTrue(readable(), "a ticket already done wakes at once")
        store.resetWake()
        XCTAssertFalse(readable())
        try store.put(Data("one".utf8))
        let ticket = store.writesQueued
        XCTAssertEqual(ticket, 1)
        store.wakeWhenDone(through: ticket)
        try waitUntil("the writer thread wakes the loop", timeout: 10) { readable() }
        XCTAssertGreaterThanOrEqual(store.writesDone, ticket)
        XCTAssertNotNil(FileManager.default.contents(atPath: store.objectPath(sha256Hex(Data("one".utf8)))))
        store.resetWake()
        XCTAssertFalse(readable(), "a wake no one waits for any more does not stay readable")
        // Armed, then forgotten (a commit took the lines): the later write leaves the fd quiet.
        store.wakeWhenDone(through: ticket + 1)
        store.resetWake()
        try store.put(Data("two".utf8))
        try store.sync()
        XCTAssertFalse(readable())
    }

    /// At the quota, bytes whose object exists are stored (they take no room); new bytes are
    /// refused with EDQUOT.
    func testQuotaRefusesNewObjectsOnlyNotExistingOnes() throws {
        let store = try ObjectStore(root: dir)
        let old = Data(repeating: 7, count: 1000)
        try store.put(old)
        try store.sync()
        store.setUsage(ObjectStore.measure(root: dir), addedAtStart: store.added)
        store.maxBytes = 1000
        XCTAssertEqual(store.usage?.bytes, 1000)
        XCTAssertFalse(try store.put(old).isNew, "existing bytes are not refused")
        XCTAssertThrowsError(try store.put(Data(repeating: 8, count: 10))) { e in
            XCTAssertEqual((e as? SystemError)?.errno, EDQUOT)
        }
        try store.sync()
        XCTAssertEqual(store.usage?.bytes, 1000)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: store.objectsDir).count, 1)
    }

    /// The fallbacks for older kernels and other filesystems: `linkat` of `/proc/self/fd/N`
    /// (Linux before 6.10 without CAP_DAC_READ_SEARCH), and a temp file renamed into place
    /// (no O_TMPFILE: NFS, overlayfs before 6.6). Each stores every body once under its hash,
    /// deduplicates, and leaves no temp file.
    func testFallbackWritePathsStoreTheSameObjects() throws {
        for step in [ObjectWriter.Naming.procPath, .rename] {
            let root = dir + "-\(step)"
            defer { try? FileManager.default.removeItem(atPath: root) }
            let store = try ObjectStore(root: root)
            store.writes.startNaming(at: step)
            store.maxQueuedWrites = step == .rename ? 0 : 4 // the loop's own writes, and the writer's
            let bodies = (0..<20).map { Data("fallback \($0)".utf8) }
            for b in bodies + bodies { try store.put(b) }
            try store.sync()
            for b in bodies {
                XCTAssertEqual(FileManager.default.contents(atPath: store.objectPath(sha256Hex(b))), b, "\(step)")
            }
            XCTAssertEqual(ObjectStore.measure(root: root).objects, 20, "\(step)")
            XCTAssertEqual(store.added.objects, 20, "each written once (\(step))")
            XCTAssertNil(store.writeFailure(among: bodies.map(sha256Hex)), "\(step)")
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: root + "/tmp"), [], "\(step)")
        }
    }

    /// Objects are made in `tmp/` and linked into `objects/ab/`: the object folders are made as
    /// needed, and should `tmp/` be removed under a running store (an operator's cleanup), the
    /// writes go on in the objects' own folders instead of failing.
    func testObjectsAreStoredWithAndWithoutTheTmpFolder() throws {
        let store = try ObjectStore(root: dir)
        let before = (0..<10).map { Data("with tmp \($0)".utf8) }
        for b in before { try store.put(b) }
        try store.sync()
        try FileManager.default.removeItem(atPath: store.tmpDir)
        let after = (0..<10).map { Data("without tmp \($0)".utf8) }
        for b in after { try store.put(b) }
        try store.sync()
        for b in before + after {
            XCTAssertEqual(FileManager.default.contents(atPath: store.objectPath(sha256Hex(b))), b)
        }
        XCTAssertNil(store.writeFailure(among: (before + after).map(sha256Hex)))
        XCTAssertEqual(ObjectStore.measure(root: dir).objects, 20)
        XCTAssertEqual(store.added.objects, 20)
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
