// Issue 30: exports read, hash and prepare (gzip) objects on other threads while the caller writes
// (`RegionPack.prepareInPackOrder`). Every object reaches the caller once with its own bytes, in
// pack order with one worker; a failure on either side stops the workers, and none outlives the call.
import Foundation
import Glibc
import XCTest
@testable import TileSpoolCore
@testable import TileSpoolExport
@testable import TileSpoolIO

final class ExportPipelineTests: XCTestCase {
    /// `n` distinct bodies of 1 to 40 KiB, put in a local store (a scratch folder the test's end
    /// removes) in packs of three syncs.
    func filledStore(_ n: Int) throws -> (PackedStore, [Data], [String]) {
        let store = try PackedStore(root: try TestScratch.folder("pipeline").path + "/store")
        var bodies: [Data] = []
        for i in 0..<n {
            let b = Data("object \(i) ".utf8) + Data(repeating: UInt8(i & 0xFF), count: 1024 * (1 + (i * 7) % 40))
            bodies.append(b)
            try store.put(b)
            if i % (n / 3) == 0 { try store.sync() }
        }
        try store.sync()
        return (store, bodies, bodies.map { SHA256.hex($0) })
    }

    /// Threads of this process (`/proc/self/task`), to see that none is left behind.
    func threadCount() -> Int { (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count) ?? -1 }

    /// Waits (with a deadline, no fixed sleep) until the process has at most `count` threads.
    func waitForThreads(atMost count: Int, file: StaticString = #filePath, line: UInt = #line) {
        let deadline = Date().addingTimeInterval(10)
        while threadCount() > count && Date() < deadline { usleep(2000) }
        XCTAssertLessThanOrEqual(threadCount(), count, "a worker outlived the call", file: file, line: line)
    }

    /// Every name given (one given three times) reaches `body` once per time given, with the value
    /// `prepare` made of its own bytes (their SHA-256 and length), with one worker and with two;
    /// with one, in pack order (the order `readObjects` reads). More bytes than `handoffBytes`
    /// pass through (the queue is bounded, not the total).
    func testEveryObjectIsPreparedOnceAndReachesTheCaller() throws {
        let (store, bodies, names) = try filledStore(1200)
        XCTAssertGreaterThan(bodies.reduce(0) { $0 + $1.count }, RegionPack.handoffBytes)
        var rng = SeededRandom(seed: 3)
        let asked = (names + [names[5], names[5]]).shuffled(using: &rng)
        var packOrder: [Int] = []
        try store.readObjects(asked, at: nil, limit: 1 << 20) { k, _ in packOrder.append(k) }
        let before = threadCount()
        for workers in [1, 2] {
            var got: [Int] = []
            try RegionPack.prepareInPackOrder(store, asked, at: nil, workers: workers, prepare: { k, data in
                (SHA256.hex(data), data.count, k)
            }) { k, value in
                XCTAssertEqual(value.0, asked[k])
                XCTAssertEqual(value.2, k)
                XCTAssertEqual(value.1, bodies[names.firstIndex(of: asked[k])!].count)
                got.append(k)
            }
            XCTAssertEqual(got.sorted(), Array(0..<asked.count), "\(workers) workers")
            if workers == 1 { XCTAssertEqual(got, packOrder, "one worker: pack order") }
            waitForThreads(atMost: before)
        }
    }

    /// A value taken by `body` is released once `body` is done with it: the queue does not keep
    /// taken values (a body of megabytes each) until it is compacted.
    func testTakenValuesAreNotHeldByTheQueue() throws {
        let (store, _, names) = try filledStore(300)
        final class Box: @unchecked Sendable { let bytes: Data; init(_ d: Data) { bytes = d } }
        weak var previous: Box?
        var checked = 0
        try RegionPack.prepareInPackOrder(store, names, at: nil, workers: 1, prepare: { _, data in Box(data) }) { _, box in
            if checked > 0 || previous != nil { XCTAssertNil(previous, "the value taken before is still held") }
            previous = box
            checked += 1
        }
        XCTAssertEqual(checked, names.count)
    }

    /// What `prepare` throws reaches the caller at that object (the ones before were taken);
    /// what `body` throws stops the workers; a name the store does not hold ends the call with
    /// `StoreReadFailure` (ENOENT). After each, no worker is left.
    func testFailuresStopTheWorkersAndReachTheCaller() throws {
        let (store, _, names) = try filledStore(600)
        struct Boom: Error, Equatable { var at: Int }
        let before = threadCount()
        for workers in [1, 2] {
            var taken = 0
            XCTAssertThrowsError(try RegionPack.prepareInPackOrder(store, names, at: nil, workers: workers, prepare: { k, data in
                if k == 300 { throw Boom(at: k) }
                return data.count
            }) { _, _ in taken += 1 }) { XCTAssertEqual($0 as? Boom, Boom(at: 300)) }
            XCTAssertLessThan(taken, names.count)
            waitForThreads(atMost: before)

            taken = 0
            XCTAssertThrowsError(try RegionPack.prepareInPackOrder(store, names, at: nil, workers: workers, prepare: { _, d in d.count }) { k, _ in
                taken += 1
                if taken == 10 { throw Boom(at: k) }
            }) { XCTAssertNotNil($0 as? Boom) }
            XCTAssertEqual(taken, 10)
            waitForThreads(atMost: before)

            let absent = SHA256.hex(Data("not stored".utf8))
            XCTAssertThrowsError(try RegionPack.prepareInPackOrder(store, names + [absent], at: nil, workers: workers, prepare: { _, d in d.count }) { _, _ in }) {
                let failure = ($0 as? RegionPack.StoreReadFailure)?.error as? SystemError
                XCTAssertEqual(failure?.errno, ENOENT, "\($0)")
            }
            waitForThreads(atMost: before)
        }
    }

    /// Attack round 14: SIGTERM or SIGINT during `tilespool export` stops it between tiles with
    /// exit status 130: its work folder beside PATH is removed and PATH is not made (the folder
    /// was left behind, gigabytes for a large export). The export is held with SIGSTOP as soon as
    /// its work folder appears, sent the signal, then let go, so that it is mid-export for sure.
    func testASignalStopsAnExportAndRemovesItsWorkFolder() throws {
        let fx = try SpoolFixture()
        defer { try? FileManager.default.removeItem(at: fx.root) }
        let tiles = try fx.makeSyntheticRegion("world", maxZoom: 8, bounds: GeoBounds(west: -180, south: -85, east: 180, north: 85))
        XCTAssertEqual(tiles, 87_381)
        let outDir = fx.root.appendingPathComponent("out").path
        try FileManager.default.createDirectory(atPath: outDir, withIntermediateDirectories: true)
        for (format, sig) in [("mbtiles", SIGTERM), ("pmtiles", SIGINT), ("mbtiles", SIGHUP), ("pmtiles", SIGQUIT)] {
            let output = outDir + "/world.\(format)"
            let p = Process()
            p.executableURL = URL(fileURLWithPath: SpoolFixture.binary)
            p.arguments = ["export", "world", "--format", format, "--output", output, "--spool", fx.spool, "--store", fx.store]
            let errPipe = Pipe()
            p.standardError = errPipe
            p.standardOutput = FileHandle.nullDevice
            try p.run()
            let deadline = Date().addingTimeInterval(60)
            var work: String?
            while work == nil && p.isRunning && Date() < deadline {
                work = (try? FileManager.default.contentsOfDirectory(atPath: outDir))?.first { $0.hasPrefix(".world.\(format).tmp-") }
                if work == nil { usleep(500) }
            }
            XCTAssertNotNil(work, "\(format): the work folder appeared while the export ran")
            kill(p.processIdentifier, SIGSTOP)
            kill(p.processIdentifier, sig)
            kill(p.processIdentifier, SIGCONT)
            let text = String(decoding: errPipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            p.waitUntilExit()
            XCTAssertEqual(p.terminationStatus, 130, "\(format): \(text)")
            XCTAssertEqual(p.terminationReason, .exit, format)
            XCTAssertTrue(text.contains("tilespool: stopped before the export was written; \(output) is as it was"), text)
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: outDir), [], "\(format): no work folder, no output")
        }
    }
}
