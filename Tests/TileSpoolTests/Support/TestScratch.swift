// Temp folders of tests, removed when the test that made them ends.
import Foundation
import TileSpoolCore
import TileSpoolIO
import XCTest

/// The one place that makes and removes the tests' temp folders.
///
/// XCTest on Linux never releases test-case instances, so a fixture kept in a test-case property
/// is not deinitialised after its test and a `deinit` that removes its folder runs only when the
/// process exits (usually never: the process just ends). Every folder made here is removed when
/// the test during which it was made finishes (XCTest's `testCaseDidFinish`, after `tearDown`),
/// after the cleanups registered with it (stopping a daemon or a server that writes there) run.
/// A folder shared by a whole class (`keepUntilEnd`) is removed when the test bundle finishes.
/// Folders a test made unreadable or unwritable are made writable again first. With
/// `TILESPOOL_KEEP_TMP=1` in the environment nothing is removed (to look at a failed test's files).
final class TestScratch: NSObject, XCTestObservation, @unchecked Sendable {
    private struct Entry { let path: String; let cleanup: (() -> Void)? }

    private static let shared: TestScratch = {
        let s = TestScratch()
        XCTestObservationCenter.shared.addTestObserver(s)
        return s
    }()

    private let lock = NSLock()
    private var perTest: [Entry] = []
    private var atEnd: [Entry] = []

    /// A fresh, empty folder `<temp>/<prefix>-<UUID>` (absolute path), removed when the current
    /// test ends; `cleanup` runs just before (stop what still writes into it).
    /// - Throws: the error of `FileManager.createDirectory`.
    static func folder(_ prefix: String, cleanup: (() -> Void)? = nil) throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        let s = shared
        s.lock.lock()
        s.perTest.append(Entry(path: url.path, cleanup: cleanup))
        s.lock.unlock()
        return url
    }

    /// Keeps a folder made by `folder` (and its cleanup) until the test bundle ends: for
    /// fixtures shared by the tests of a class.
    static func keepUntilEnd(_ url: URL) {
        let s = shared
        s.lock.lock()
        if let i = s.perTest.firstIndex(where: { $0.path == url.path }) { s.atEnd.append(s.perTest.remove(at: i)) }
        s.lock.unlock()
    }

    func testCaseDidFinish(_ testCase: XCTestCase) { drain(all: false) }
    func testBundleDidFinish(_ testBundle: Bundle) { drain(all: true) }

    private func drain(all: Bool) {
        lock.lock()
        var entries = perTest
        perTest = []
        if all { entries += atEnd; atEnd = [] }
        lock.unlock()
        let keep = ProcessInfo.processInfo.environment["TILESPOOL_KEEP_TMP"] == "1"
        for e in entries.reversed() {
            e.cleanup?()
            if !keep { TestScratch.remove(e.path) }
        }
    }

    /// Removes a tree, first giving back the owner's permissions a test may have taken away.
    static func remove(_ path: String) {
        if (try? FileManager.default.removeItem(atPath: path)) != nil { return }
        let chmod = Process()
        chmod.executableURL = URL(fileURLWithPath: "/bin/chmod")
        chmod.arguments = ["-R", "u+rwX", path]
        if (try? chmod.run()) != nil { chmod.waitUntilExit() }
        try? FileManager.default.removeItem(atPath: path)
    }
}

/// A weak reference, for a cleanup registered with `TestScratch.folder` before the `init` of the
/// object it stops has ended.
final class WeakBox<T: AnyObject>: @unchecked Sendable { weak var value: T? }

extension SpoolFixture {
    /// A completed region `id` of a `tiles` request over `bounds`, zooms 0...`maxZoom`, written
    /// straight into the store (no download): three bodies of about 2 KB in runs of equal tiles,
    /// and every fourth run empty; its status says `completed`. For exports of many tiles.
    /// - Returns: the number of tiles.
    func makeSyntheticRegion(_ id: String, maxZoom: Int, bounds: GeoBounds) throws -> Int {
        let store = try PackedStore(root: self.store)
        let bodies = try (0..<3).map { i in try store.put(Data("body \(i) ".utf8 + Data(repeating: UInt8(i), count: 2000))).sha256 }
        try store.sync()
        let request = RegionRequest(id: id, source: .tiles(["http://127.0.0.1:9/{z}/{x}/{y}.png"]), bounds: bounds, minZoom: 0, maxZoom: maxZoom)
        let files = RegionFiles(dir: self.store + "/regions/" + id)
        try files.create(request: request)
        let plan = try Planner.plan(request: request, templates: ["http://127.0.0.1:9/{z}/{x}/{y}.png"])
        try files.savePlan(plan)
        var batch: [ManifestLine] = []
        var n = 0
        for set in plan.tileSets {
            for rect in set.rects {
                for i in 0..<rect.count {
                    let t = rect.tile(at: i)
                    let b = (t.x / 7 + t.y / 5) % 4 // runs of equal tiles, and some empty ones
                    batch.append(ManifestLine(kind: .tile, sha256: b == 3 ? nil : bodies[b], bytes: b == 3 ? 0 : 2007,
                                              key: ManifestLine.tileKey(source: set.source, t), url: "-"))
                    n += 1
                    if batch.count == 65536 { try files.appendToManifest(batch); batch.removeAll() }
                }
            }
        }
        try files.appendToManifest(batch)
        try Files.makeDirectories(spool + "/status")
        try Files.writeAtomically(Data("completed\n".utf8), to: spool + "/status/\(id).state")
        let st = RegionStatus(id: id, state: .completed, progress: RegionProgress(), error: nil, request: nil, context: .null)
        try StatusWriter(layout: SpoolLayout(root: spool)).write(st)
        return n
    }
}
