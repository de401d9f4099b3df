// Issue 30: a refresh's swap is written once (`RefreshSwap`) over each backend's steps. Driven
// here through a recording fake (every step can fail, an install's answer can be lost) and on
// disk (`RegionFiles`): the manifest is the commit point, a failure before it leaves the pack as
// it was, and after it (or a crash anywhere after the mark) the swap is finished, never dropped.
import Foundation
import XCTest
@testable import TileSpoolCore
@testable import TileSpoolIO

final class RefreshSwapTests: XCTestCase {
    struct Injected: Error, Equatable { var step: String }

    /// A region's swap state as three facts (mark, manifest installed, plan installed, files
    /// removed), each step recorded and able to fail once.
    final class Fake: RefreshSwapSteps {
        var mark: Int?
        var manifestInstalled = false, planInstalled = false, filesRemoved = false
        var hasManifest = true
        var failing: Set<String> = []
        /// The manifest's install happens but its answer is lost (the step throws after it).
        var loseInstallAnswer = false
        var calls: [String] = []
        let regionID = "r"

        func step(_ name: String) throws {
            calls.append(name)
            if failing.contains(name) { failing.remove(name); throw Injected(step: name) }
        }
        func writeCommitMark() throws -> Int { try step("mark"); mark = 7; return 7 }
        func commitMark() throws -> Int? { try step("readMark"); return mark }
        func removeCommitMark() throws { try step("removeMark"); mark = nil }
        func refreshedManifestInstalled(slot: Int) throws -> Bool { try step("installed?"); return manifestInstalled }
        func refreshHasManifest() throws -> Bool { try step("has?"); return hasManifest && !manifestInstalled }
        func installRefreshedManifest(slot: Int) throws {
            XCTAssertEqual(slot, 7, "the mark's slot")
            if loseInstallAnswer { loseInstallAnswer = false; calls.append("manifest"); manifestInstalled = true; throw Injected(step: "answer") }
            try step("manifest"); manifestInstalled = true
        }
        func installRefreshedPlan() throws { try step("plan"); planInstalled = true }
        func removeRefreshFiles() throws { try step("remove"); filesRemoved = true; mark = nil }
    }

    func testCommitInstallsTheManifestFirstThenThePlanThenCleansUp() throws {
        let f = Fake()
        try RefreshSwap.commit(f)
        XCTAssertEqual(f.calls, ["mark", "manifest", "plan", "remove"])
        XCTAssertTrue(f.manifestInstalled && f.planInstalled && f.filesRemoved)
        XCTAssertNil(f.mark)
    }

    /// A failure before the commit point (the mark, or the manifest's install) is thrown, the mark
    /// is taken back, and nothing of the refresh is in: the pack as it was.
    func testAFailureBeforeTheManifestIsInLeavesThePackAsItWas() {
        for failing in ["mark", "manifest"] {
            let f = Fake()
            f.failing = [failing]
            XCTAssertThrowsError(try RefreshSwap.commit(f)) { XCTAssertEqual($0 as? Injected, Injected(step: failing)) }
            XCTAssertFalse(f.manifestInstalled, failing)
            XCTAssertFalse(f.planInstalled, "never a new plan with the old manifest (\(failing))")
            XCTAssertNil(f.mark, failing)
            // Abandoning then drops the refresh's files, the pack untouched.
            RefreshSwap.abandon(f)
            XCTAssertTrue(f.filesRemoved, failing)
            XCTAssertFalse(f.manifestInstalled || f.planInstalled, failing)
        }
    }

    /// An install that happened but whose answer was lost (a PUT that landed) is the swap: the
    /// commit goes on and does not throw.
    func testAnInstallWhoseAnswerWasLostIsASwap() throws {
        let f = Fake()
        f.loseInstallAnswer = true
        try RefreshSwap.commit(f)
        XCTAssertTrue(f.manifestInstalled && f.planInstalled && f.filesRemoved)
    }

    /// Once the manifest is in, a failure of the plan or the clean-up is not thrown (the refresh
    /// happened) and leaves the mark; whatever comes next (a start, an abandon, the next refresh
    /// through `finishInterrupted`) finishes the swap instead of dropping it.
    func testAFailureAfterTheManifestIsFinishedLaterNeverUndone() throws {
        for failing in ["plan", "remove"] {
            for next in ["start", "abandon"] {
                let f = Fake()
                f.failing = [failing]
                try RefreshSwap.commit(f)
                XCTAssertTrue(f.manifestInstalled, failing)
                XCTAssertEqual(f.mark, 7, "the mark stays (\(failing))")
                XCTAssertFalse(f.filesRemoved, failing)
                if next == "start" { XCTAssertTrue(try RefreshSwap.finishInterrupted(f)) } else { RefreshSwap.abandon(f) }
                XCTAssertTrue(f.manifestInstalled && f.planInstalled && f.filesRemoved, "\(failing), then \(next)")
                XCTAssertNil(f.mark)
            }
        }
    }

    /// A mark found at start: without its manifest installed and with none to install, it is
    /// removed and nothing swapped (false); with one, the swap is finished (true); none: false.
    /// A mark that cannot be read makes an abandon drop nothing.
    func testAMarkFoundAtStart() throws {
        let none = Fake()
        XCTAssertFalse(try RefreshSwap.finishInterrupted(none))
        XCTAssertEqual(none.calls, ["readMark"])

        let orphan = Fake()
        orphan.mark = 7; orphan.hasManifest = false
        XCTAssertFalse(try RefreshSwap.finishInterrupted(orphan))
        XCTAssertNil(orphan.mark)
        XCTAssertFalse(orphan.manifestInstalled || orphan.planInstalled)

        let cut = Fake()
        cut.mark = 7
        XCTAssertTrue(try RefreshSwap.finishInterrupted(cut))
        XCTAssertTrue(cut.manifestInstalled && cut.planInstalled && cut.filesRemoved)

        let unreadable = Fake()
        unreadable.mark = 7; unreadable.failing = ["readMark"]
        RefreshSwap.abandon(unreadable)
        XCTAssertEqual(unreadable.calls, ["readMark"])
        XCTAssertFalse(unreadable.filesRemoved || unreadable.manifestInstalled)
    }

    // MARK: - On disk

    var dir: String!
    override func setUpWithError() throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("swap-\(UUID().uuidString)").path
    }
    override func tearDown() { if let dir { try? FileManager.default.removeItem(atPath: dir) } }

    func read(_ path: String) -> String? { try? String(contentsOfFile: path, encoding: .utf8) }

    /// A region on disk with its manifest and plan, and a refresh whose manifest and plan differ.
    func regionWithRefresh() throws -> RegionFiles {
        let files = RegionFiles(dir: dir + "/regions/r")
        try files.create(request: RegionRequest(id: "r", source: .tiles(["http://127.0.0.1:9/{z}/{x}/{y}.png"]),
                                                bounds: GeoBounds(west: 0, south: 0, east: 1, north: 1), minZoom: 0, maxZoom: 0))
        try Data("old manifest\n".utf8).write(to: URL(fileURLWithPath: dir + "/regions/r/manifest.tsv"))
        try Data("old plan".utf8).write(to: URL(fileURLWithPath: dir + "/regions/r/plan.json"))
        try files.beginRefresh(scope: .all)
        try Data("new manifest\n".utf8).write(to: URL(fileURLWithPath: dir + "/regions/r/refresh/manifest.tsv"))
        try Data("new plan".utf8).write(to: URL(fileURLWithPath: dir + "/regions/r/refresh/plan.json"))
        return files
    }

    func testOnDiskTheSwapInstallsBothAndRemovesTheRefresh() throws {
        let files = try regionWithRefresh()
        XCTAssertNotNil(files.refreshUnderWay())
        try files.commitRefresh()
        XCTAssertEqual(read(dir + "/regions/r/manifest.tsv"), "new manifest\n")
        XCTAssertEqual(read(dir + "/regions/r/plan.json"), "new plan")
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/regions/r/refresh"))
        XCTAssertNil(files.refreshUnderWay())
    }

    /// The state a crash right after the mark leaves (the mark and the refresh's files): an
    /// abandon, a new refresh and a start each finish the swap; without the mark an abandon drops
    /// the refresh and the pack stays as it was.
    func testOnDiskAMarkIsRolledForwardByAbandonStartAndTheNextRefresh() throws {
        for next in ["abandon", "start", "begin"] {
            try? FileManager.default.removeItem(atPath: dir)
            let files = try regionWithRefresh()
            XCTAssertEqual(try files.writeCommitMark(), 0)
            switch next {
            case "abandon": files.abandonRefresh()
            case "start": XCTAssertTrue(try files.finishInterruptedRefreshCommit())
            default: try files.beginRefresh(scope: .all)
            }
            XCTAssertEqual(read(dir + "/regions/r/manifest.tsv"), "new manifest\n", next)
            XCTAssertEqual(read(dir + "/regions/r/plan.json"), "new plan", next)
            XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/regions/r/refresh/commit"), next)
        }
        try? FileManager.default.removeItem(atPath: dir)
        let files = try regionWithRefresh()
        files.abandonRefresh()
        XCTAssertEqual(read(dir + "/regions/r/manifest.tsv"), "old manifest\n")
        XCTAssertEqual(read(dir + "/regions/r/plan.json"), "old plan")
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/regions/r/refresh"))
    }
}
