import Foundation
import TileSpoolCore

/// The steps of a refresh's swap as one backend takes them (`RegionFiles` on disk,
/// `S3RegionFiles` in a bucket); the order they are taken in, and what a failure or a crash
/// between two of them leaves, is `RefreshSwap`'s alone (docs/refresh.md, docs/s3.md).
///
/// A `slot` names where the refreshed manifest goes: on S3 the number of the compacted object
/// `manifest/<slot>.all.tsv` (above every key listed when the mark was written); on disk 0 (the
/// manifest is renamed over `manifest.tsv`).
protocol RefreshSwapSteps: AnyObject {
    /// Writes the commit mark, durably, and returns its slot.
    func writeCommitMark() throws -> Int
    /// The slot of the commit mark, nil when there is none.
    /// - Throws: when the mark cannot be read, or is not a mark.
    func commitMark() throws -> Int?
    /// Removes the commit mark.
    func removeCommitMark() throws
    /// Whether the refreshed manifest is the region's now (`installRefreshedManifest` done).
    func refreshedManifestInstalled(slot: Int) throws -> Bool
    /// Whether the refresh has a manifest to install.
    func refreshHasManifest() throws -> Bool
    /// Whether the refresh's manifest holds a line for every resource of the plan it goes with
    /// (the refresh's plan, else the region's), and none for anything else. One implementation
    /// for both stores (below).
    /// - Throws: when the manifest or plan cannot be read.
    func refreshedManifestIsWhole() throws -> Bool
    /// Makes the refreshed manifest the region's in one step readers see whole (a rename, one
    /// PUT); nothing when it is already. Repeatable.
    func installRefreshedManifest(slot: Int) throws
    /// Replaces the region's plan by the refresh's when the refresh has one that differs. Repeatable.
    func installRefreshedPlan() throws
    /// Removes the refresh's files, its scope and the commit mark last.
    func removeRefreshFiles() throws
    /// Removes what the refresh recorded (its plan, manifest and journal), keeping its scope: the
    /// refresh starts again from its first resource.
    func discardRefreshedFiles()
    /// The region's id, for the log.
    var regionID: String { get }
}

/// The steps both stores take alike, through `RegionStorage` (the refresh's files are
/// `refreshStorage`).
extension RefreshSwapSteps where Self: RegionStorage {
    func refreshedManifestIsWhole() throws -> Bool {
        let refresh = refreshStorage
        guard let plan = refresh.loadPlan() ?? loadPlan() else {
            if let e = refresh.readFailure ?? readFailure { throw e } // a bucket that did not answer: nothing decided
            return false
        }
        let whole = RefreshSwap.holdsEveryResource(plan) { body in refresh.readManifest(cutPartialLine: false, body) }
        if let e = refresh.readFailure { throw e }
        return whole
    }

    func discardRefreshedFiles() { refreshStorage.resetDownload() }
}

/// A refresh's swap, written once for both backends (issue 30), rolled forward from its commit
/// mark:
/// 1. the mark is written (durably);
/// 2. the refreshed manifest is installed: the commit point. If 1 or 2 fails and 2 did not
///    happen, the mark is taken back and the error thrown: the pack is as it was;
/// 3. the refreshed plan replaces the region's if it differs;
/// 4. the refresh's files go, the mark last.
/// A crash anywhere after 1, or a failure after 2, leaves the mark: the next start, the next
/// refresh and any abandon finish steps 2-4 (`finishInterrupted`) instead of dropping the refresh,
/// so a region keeps a refreshed plan with its old manifest, or the reverse, only until then;
/// a mark is finished from only when the refreshed manifest holds every resource of its plan.
enum RefreshSwap {
    /// Steps 1-4. Once the manifest is in, a failure of 3 or 4 is logged, not thrown: the refresh
    /// has happened, and the mark left behind finishes it later.
    /// - Throws: the error of step 1 or 2 when the manifest was not installed: the mark is taken
    ///   back and the pack is as it was. When the mark cannot be taken back (attack round 15: the
    ///   mark's sync failed after it was in place, and the next abandon swapped the pack while the
    ///   refresh was reported failed), the swap is finished now instead and nothing is thrown; the
    ///   error is thrown only if that fails too (the mark then finishes it at the next start).
    static func commit(_ steps: some RefreshSwapSteps) throws {
        var slot: Int?
        do {
            slot = try steps.writeCommitMark()
            try steps.installRefreshedManifest(slot: slot!)
        } catch {
            // An install whose answer was lost (a PUT that landed), or whose last step failed
            // after it (the folder's sync), is a swap that happened; the failure is logged
            // (attack round 17: a failed sync there went unsaid).
            if let slot, (try? steps.refreshedManifestInstalled(slot: slot)) == true {
                Log.error("the refreshed manifest is in, but its install reported: \(error)", region: steps.regionID)
                finishLogged(steps, slot: slot)
                return
            }
            if (try? steps.removeCommitMark()) != nil { throw error }
            // The mark stays: finish the swap now. Once the manifest is in, the refresh has
            // happened even if the rest fails (attack round 16: a clean-up that failed here made
            // it "failed" with its pack swapped); the mark finishes the rest later.
            do { if try finishInterrupted(steps) { return } } catch {
                if let markSlot = (try? steps.commitMark()) ?? nil, (try? steps.refreshedManifestInstalled(slot: markSlot)) == true {
                    Log.error("the refreshed manifest is in; the rest of the swap is finished at the next start: \(error)", region: steps.regionID)
                    return
                }
            }
            throw error
        }
        finishLogged(steps, slot: slot!)
    }

    /// Steps 3-4 after the manifest is in: a failure is logged (the mark stays for later).
    private static func finishLogged(_ steps: some RefreshSwapSteps, slot: Int) {
        do { try finish(steps, slot: slot, manifestInstalled: true) } catch {
            Log.error("the refreshed manifest is in; the rest of the swap is finished at the next start: \(error)", region: steps.regionID)
        }
    }

    /// Finishes a swap cut short (a commit mark is there): true when one was finished. A mark
    /// whose swap cannot have happened and must not (the manifest not installed, and the refresh
    /// has none, or one that misses resources of its plan: never made by the daemon, which syncs
    /// the whole manifest before the mark; attack round 15 planted them and a complete pack was
    /// replaced by a part) is removed instead (logged): false, the pack as it was, and the
    /// refresh, still under way, goes on or is dropped.
    /// - Throws: the error of the step that failed (the mark stays for the next try).
    static func finishInterrupted(_ steps: some RefreshSwapSteps) throws -> Bool {
        guard let slot = try steps.commitMark() else { return false }
        if try !steps.refreshedManifestInstalled(slot: slot) {
            guard try steps.refreshHasManifest(), try steps.refreshedManifestIsWhole() else {
                Log.error("a refresh's commit mark without a whole manifest to swap in: removed, the pack stays as it was, and the refresh starts again", region: steps.regionID)
                try steps.removeCommitMark()
                // What it recorded is not to be trusted (attack round 17: resumed from it, the
                // refresh swapped in the same stray lines): it starts again from scratch.
                steps.discardRefreshedFiles()
                return false
            }
        }
        try finish(steps, slot: slot)
        return true
    }

    /// Drops a refresh under way and its files, the pack as it was; while a commit mark is there
    /// the swap is finished instead (the refresh happened), unless the mark cannot be finished
    /// from (`finishInterrupted` false: then the files go too). When the mark cannot be read, or
    /// finishing fails, nothing is dropped: the next start looks again.
    static func abandon(_ steps: some RefreshSwapSteps) {
        switch Result(catching: { try steps.commitMark() }) {
        case .success(nil): removeLogged(steps)
        case .success: if (try? finishInterrupted(steps)) == false { removeLogged(steps) }
        case .failure: break
        }
    }

    /// `removeRefreshFiles`, a failure logged: the files left are a refresh under way for the
    /// next start, which resumes it.
    private static func removeLogged(_ steps: some RefreshSwapSteps) {
        do { try steps.removeRefreshFiles() } catch {
            Log.error("cannot remove the refresh's files (\(error)): the next start finds the refresh still under way and goes on with it", region: steps.regionID)
        }
    }

    /// True when `lines` (given through `read`) hold a line, with a body or recorded as failed,
    /// for every resource `plan` names (`ResourcePlan.index`), and none for anything else (attack
    /// round 16: a tile the plan does not name was rolled forward, and every export failed): the
    /// test a manifest passes before it replaces a pack's by a roll-forward.
    static func holdsEveryResource(_ plan: ResourcePlan, _ read: ((ManifestLine) -> Void) throws -> Void) rethrows -> Bool {
        let indexSpace = plan.indexSpace
        guard indexSpace < 1 << 31 else { return false }
        var seen = Bitmap(count: indexSpace)
        var met = 0, unplanned = 0
        let cover = PlanCover(plan)
        try read { line in
            guard let i = plan.index(kind: line.kind, key: line.key, cover: cover), i >= 0, i < indexSpace else { unplanned += 1; return }
            if seen.insert(i) { met += 1 }
        }
        return met == plan.count && unplanned == 0
    }

    /// Steps 2-4, each repeatable (2 skipped when it was just taken).
    private static func finish(_ steps: some RefreshSwapSteps, slot: Int, manifestInstalled: Bool = false) throws {
        if !manifestInstalled { try steps.installRefreshedManifest(slot: slot) }
        try steps.installRefreshedPlan()
        try steps.removeRefreshFiles()
    }
}
