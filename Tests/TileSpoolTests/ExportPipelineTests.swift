// Issue 30: exports read, hash and prepare (gzip) objects on other threads while the caller writes
// (`PreparePipeline`). Every object reaches the caller once with its own bytes, batches in the
// order submitted; a failure on either side stops the workers, and none outlives the call.
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

    /// Runs `names` through a `PreparePipeline` in batches of `size`, `prepare` making each
    /// object's value, and hands `body` each batch's tag (its first name's index) and values.
    func runPipeline<T: Sendable>(_ store: PackedStore, _ names: [String], batch size: Int, workers: Int, ahead: Int,
                                  prepare: @escaping @Sendable (Int, Data) throws -> T,
                                  _ body: (Int, [T]) throws -> Void) throws {
        let pipeline = PreparePipeline<T, Int>(workers: workers, ahead: ahead)
        defer { pipeline.stop() }
        for start in stride(from: 0, to: names.count, by: size) {
            let shas = Array(names[start..<min(names.count, start + size)])
            try pipeline.submit(ObjectBatch(store: store, sha256s: shas, locations: nil) { k, data in try prepare(start + k, data) }, tag: start, body)
        }
        try pipeline.finish(body)
    }

    /// Every name given (one given three times) reaches `body` once per time given, with the value
    /// `prepare` made of its own bytes (their SHA-256 and length), batches in the order
    /// submitted and each batch's values in its order of names, with one worker and with two,
    /// however many batches are under way at once; then no worker is left.
    func testEveryObjectIsPreparedOnceAndReachesTheCallerInOrder() throws {
        let (store, bodies, names) = try filledStore(1200)
        var rng = SeededRandom(seed: 3)
        let asked = (names + [names[5], names[5]]).shuffled(using: &rng)
        let before = threadCount()
        for (workers, ahead, size) in [(1, 1, 100), (2, 3, 37), (2, 8, 1), (3, 2, 500)] {
            var got: [Int] = []
            try runPipeline(store, asked, batch: size, workers: workers, ahead: ahead, prepare: { k, data in
                (SHA256.hex(data), data.count, k)
            }) { start, values in
                XCTAssertEqual(start, got.count, "batches come in the order submitted")
                for (j, value) in values.enumerated() {
                    XCTAssertEqual(value.2, start + j)
                    XCTAssertEqual(value.0, asked[start + j])
                    XCTAssertEqual(value.1, bodies[names.firstIndex(of: asked[start + j])!].count)
                    got.append(value.2)
                }
            }
            XCTAssertEqual(got, Array(0..<asked.count), "\(workers) workers, \(ahead) ahead, batches of \(size)")
            waitForThreads(atMost: before)
        }
    }

    /// The batches of `forEachBodyInPackOrder`: cut at `batchBytes` (a body over it alone) and
    /// at `packOrderWindow` objects, in the order given, every object once.
    func testBatchesAreCutByBytesAndCount() {
        let big = RegionPack.batchBytes
        let lengths = [big / 2, big / 2, 1, big + 5, 10, 20]
        let cut = RegionPack.batches([0, 1, 2, 3, 4, 5], length: { lengths[$0] })
        XCTAssertEqual(cut.map(Array.init), [[0, 1], [2], [3], [4, 5]])
        let many = Array(0..<(RegionPack.packOrderWindow * 2 + 3))
        let counted = RegionPack.batches(many, length: { _ in 1 })
        XCTAssertEqual(counted.map(\.count), [RegionPack.packOrderWindow, RegionPack.packOrderWindow, 3])
        XCTAssertEqual(counted.flatMap(Array.init), many)
        XCTAssertEqual(RegionPack.batches([], length: { _ in 1 }).count, 0)
    }

    /// A batch's values are released once `body` is done with them: the pipeline does not keep
    /// the values of batches taken (bodies of megabytes each).
    func testTakenValuesAreNotHeldByThePipeline() throws {
        let (store, _, names) = try filledStore(300)
        final class Box: @unchecked Sendable { let bytes: Data; init(_ d: Data) { bytes = d } }
        weak var previous: Box?
        var checked = 0
        try runPipeline(store, names, batch: 10, workers: 1, ahead: 2, prepare: { _, data in Box(data) }) { _, boxes in
            if checked > 0 { XCTAssertNil(previous, "a value of the batch taken before is still held") }
            previous = boxes.last
            checked += boxes.count
        }
        XCTAssertEqual(checked, names.count)
    }

    /// What `prepare` throws reaches the caller at its batch (the batches before were taken);
    /// what `body` throws stops the workers; a name the store does not hold ends the call with
    /// `StoreReadFailure` (ENOENT). After each, no worker is left.
    func testFailuresStopTheWorkersAndReachTheCaller() throws {
        let (store, _, names) = try filledStore(600)
        struct Boom: Error, Equatable { var at: Int }
        let before = threadCount()
        for workers in [1, 2] {
            var taken = 0
            XCTAssertThrowsError(try runPipeline(store, names, batch: 50, workers: workers, ahead: 3, prepare: { k, data in
                if k == 300 { throw Boom(at: k) }
                return data.count
            }) { _, values in taken += values.count }) { XCTAssertEqual($0 as? Boom, Boom(at: 300)) }
            XCTAssertEqual(taken, 300, "the six batches before the one that failed")
            waitForThreads(atMost: before)

            taken = 0
            XCTAssertThrowsError(try runPipeline(store, names, batch: 50, workers: workers, ahead: 3, prepare: { _, d in d.count }) { start, _ in
                taken += 1
                if taken == 3 { throw Boom(at: start) }
            }) { XCTAssertEqual($0 as? Boom, Boom(at: 100)) }
            XCTAssertEqual(taken, 3)
            waitForThreads(atMost: before)

            let absent = SHA256.hex(Data("not stored".utf8))
            XCTAssertThrowsError(try runPipeline(store, names + [absent], batch: 50, workers: workers, ahead: 3, prepare: { _, d in d.count }) { _, _ in }) {
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
