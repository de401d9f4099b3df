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
        /// The refresh's manifest holds every resource of its plan.
        var whole = true
        /// The mark is written but its write says it failed (its sync failed).
        var markFailsAfterWrite = false
        var failing: Set<String> = []
        /// The manifest's install happens but its answer is lost (the step throws after it).
        var loseInstallAnswer = false
        var calls: [String] = []
        let regionID = "r"

        func step(_ name: String) throws {
            calls.append(name)
            if failing.contains(name) { failing.remove(name); throw Injected(step: name) }
        }
        func writeCommitMark() throws -> Int {
            if markFailsAfterWrite { calls.append("mark"); mark = 7; throw Injected(step: "markSync") }
            try step("mark"); mark = 7; return 7
        }
        func refreshedManifestIsWhole() throws -> Bool { try step("whole?"); return whole }
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
        var discarded = false
        func discardRefreshedFiles() { calls.append("discard"); discarded = true }
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

    /// Attack round 15: a mark whose write failed after it was in place (its sync) is taken
    /// back and the refresh fails with the pack as it was; an abandon then drops the refresh. When
    /// the mark cannot be taken back, the swap is finished at once and the commit succeeds: never
    /// a refresh reported failed whose pack was swapped by the next abandon.
    func testAMarkWhoseWriteFailedIsTakenBackOrTheSwapFinished() throws {
        let f = Fake()
        f.markFailsAfterWrite = true
        XCTAssertThrowsError(try RefreshSwap.commit(f)) { XCTAssertEqual($0 as? Injected, Injected(step: "markSync")) }
        XCTAssertNil(f.mark)
        XCTAssertFalse(f.manifestInstalled || f.planInstalled)
        RefreshSwap.abandon(f)
        XCTAssertTrue(f.filesRemoved)
        XCTAssertFalse(f.manifestInstalled || f.planInstalled, "the pack as it was")

        let stuck = Fake()
        stuck.markFailsAfterWrite = true
        stuck.failing = ["removeMark"]
        try RefreshSwap.commit(stuck)
        XCTAssertTrue(stuck.manifestInstalled && stuck.planInstalled && stuck.filesRemoved, "finished at once")
        XCTAssertNil(stuck.mark)

        // Attack round 16: the same, and the clean-up fails too: the manifest is in, so the
        // commit succeeds (never "failed" with its pack swapped); the mark finishes the rest later.
        let messy = Fake()
        messy.markFailsAfterWrite = true
        messy.failing = ["removeMark", "remove"]
        try RefreshSwap.commit(messy)
        XCTAssertTrue(messy.manifestInstalled && messy.planInstalled)
        XCTAssertEqual(messy.mark, 7, "the mark stays for the clean-up")
        XCTAssertTrue(try RefreshSwap.finishInterrupted(messy))
        XCTAssertTrue(messy.filesRemoved)
    }

    /// Attack round 15: a mark found with a refreshed manifest that misses resources of its plan
    /// (planted: the daemon syncs the whole manifest before the mark) is removed, not swapped in;
    /// the refresh stays under way (a start resumes it), and an abandon drops it.
    func testAMarkWithAPartialManifestIsRemovedNotSwappedIn() throws {
        let f = Fake()
        f.mark = 7; f.whole = false
        XCTAssertFalse(try RefreshSwap.finishInterrupted(f))
        XCTAssertNil(f.mark)
        XCTAssertFalse(f.manifestInstalled || f.planInstalled || f.filesRemoved)
        XCTAssertTrue(f.discarded, "what it recorded is dropped: the refresh starts again (round 17)")
        let g = Fake()
        g.mark = 7; g.whole = false
        RefreshSwap.abandon(g)
        XCTAssertTrue(g.filesRemoved)
        XCTAssertFalse(g.manifestInstalled || g.planInstalled)
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

    /// The plan and manifest text of a one-source region over a box at zooms 0...`maxZoom`, every
    /// tile's line naming object `sha` (the manifest holds only the first `lines` tiles if given).
    func planAndManifest(maxZoom: Int, sha: String, lines: Int? = nil) throws -> (plan: Data, manifest: String) {
        let template = "http://127.0.0.1:9/{z}/{x}/{y}.png"
        let request = RegionRequest(id: "r", source: .tiles([template]), bounds: GeoBounds(west: -10, south: -10, east: 10, north: 10), minZoom: 0, maxZoom: maxZoom)
        let plan = try Planner.plan(request: request, templates: [template])
        XCTAssertEqual(plan.tileCount, maxZoom == 0 ? 1 : 5)
        var text = ManifestLine.header
        var n = 0
        for set in plan.tileSets {
            for rect in set.rects {
                for i in 0..<rect.count where n < (lines ?? Int.max) {
                    text += ManifestLine(kind: .tile, sha256: sha, bytes: 1, key: ManifestLine.tileKey(source: set.source, rect.tile(at: i)), url: "-").text
                    n += 1
                }
            }
        }
        return (RegionFiles.planData(plan), text)
    }

    var oldPack: (plan: Data, manifest: String)!
    var newPack: (plan: Data, manifest: String)!

    /// A region on disk with its manifest and plan (zooms 0...0), and a refresh whose manifest
    /// and plan differ (zooms 0...1, every tile another object; `refreshLines`: only that many).
    func regionWithRefresh(refreshLines: Int? = nil) throws -> RegionFiles {
        oldPack = try planAndManifest(maxZoom: 0, sha: String(repeating: "a", count: 64))
        newPack = try planAndManifest(maxZoom: 1, sha: String(repeating: "b", count: 64), lines: refreshLines)
        let files = RegionFiles(dir: dir + "/regions/r")
        try files.create(request: RegionRequest(id: "r", source: .tiles(["http://127.0.0.1:9/{z}/{x}/{y}.png"]),
                                                bounds: GeoBounds(west: 0, south: 0, east: 1, north: 1), minZoom: 0, maxZoom: 0))
        try Data(oldPack.manifest.utf8).write(to: URL(fileURLWithPath: dir + "/regions/r/manifest.tsv"))
        try oldPack.plan.write(to: URL(fileURLWithPath: dir + "/regions/r/plan.json"))
        try files.beginRefresh(scope: .all)
        try Data(newPack.manifest.utf8).write(to: URL(fileURLWithPath: dir + "/regions/r/refresh/manifest.tsv"))
        try newPack.plan.write(to: URL(fileURLWithPath: dir + "/regions/r/refresh/plan.json"))
        return files
    }

    func manifestNow() -> String? { read(dir + "/regions/r/manifest.tsv") }
    func planNow() -> Data? { FileManager.default.contents(atPath: dir + "/regions/r/plan.json") }

    func testOnDiskTheSwapInstallsBothAndRemovesTheRefresh() throws {
        let files = try regionWithRefresh()
        XCTAssertNotNil(files.refreshUnderWay())
        try files.commitRefresh()
        XCTAssertEqual(manifestNow(), newPack.manifest)
        XCTAssertEqual(planNow(), newPack.plan)
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
            XCTAssertEqual(manifestNow(), newPack.manifest, next)
            XCTAssertEqual(planNow(), newPack.plan, next)
            XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/regions/r/refresh/commit"), next)
        }
        // A mark planted beside a manifest that misses resources of the plan: not swapped in
        // at start; the refresh stays under way.
        try? FileManager.default.removeItem(atPath: dir)
        let partial = try regionWithRefresh(refreshLines: 3)
        XCTAssertEqual(try partial.writeCommitMark(), 0)
        XCTAssertFalse(try partial.finishInterruptedRefreshCommit())
        XCTAssertEqual(manifestNow(), oldPack.manifest)
        XCTAssertEqual(planNow(), oldPack.plan)
        XCTAssertNotNil(partial.refreshUnderWay())
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/regions/r/refresh/commit"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/regions/r/refresh/manifest.tsv"), "the refresh starts again")
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/regions/r/refresh/plan.json"))
        // Every planned line and one the plan does not name (attack round 16): not swapped in.
        try? FileManager.default.removeItem(atPath: dir)
        let extra = try regionWithRefresh()
        let stray = ManifestLine(kind: .tile, sha256: String(repeating: "c", count: 64), bytes: 1, key: "tiles0/9/9/9", url: "-").text
        try Data((newPack.manifest + stray).utf8).write(to: URL(fileURLWithPath: dir + "/regions/r/refresh/manifest.tsv"))
        XCTAssertEqual(try extra.writeCommitMark(), 0)
        XCTAssertFalse(try extra.finishInterruptedRefreshCommit())
        XCTAssertEqual(manifestNow(), oldPack.manifest)

        try? FileManager.default.removeItem(atPath: dir)
        let files = try regionWithRefresh()
        files.abandonRefresh()
        XCTAssertEqual(manifestNow(), oldPack.manifest)
        XCTAssertEqual(planNow(), oldPack.plan)
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/regions/r/refresh"))
    }
}
