import Foundation
import CLinux
import Glibc
import TileSpoolCore

/// What `tilespool gc` did.
public struct GCReport: Sendable {
    public var objectsRemoved = 0
    public var bytesFreed = 0
    public var tempFilesRemoved = 0
    public var objectsKept = 0
    /// Of `objectsKept`: objects no manifest references that were kept only because they are
    /// younger than the grace period (a later gc frees them), and their bytes.
    public var youngUnreferenced = 0
    public var youngUnreferencedBytes = 0
    /// S3: manifest segments removed because a compacted object older than the grace period
    /// holds their lines (`ManifestSegments`); always 0 on disk.
    public var segmentsRemoved = 0
}

/// What `tilespool verify` found.
public struct VerifyReport: Sendable {
    public var objectsChecked = 0
    public var badObjects: [String] = []
    public var manifestsChecked = 0
    public var linesChecked = 0
    /// "region: key -> sha" for manifest lines whose object is absent.
    public var missingObjects: [String] = []
    public var tempFiles: [String] = []
    /// Packs no index file lists (`ObjectCheck.unindexedPacks`): reported, not counted as faults.
    public var unindexedPacks: [String] = []
    /// Entries in the store's folders TileSpool never makes (`ObjectCheck.foreignEntries`): faults.
    public var foreignEntries: [String] = []
    /// Regions whose status counts disagree with their manifest.
    public var countMismatches: [String] = []
    /// "regions/<id>: error" for regions that could not be checked (not a folder, unreadable, a
    /// repair's rewrite that failed): faults; the other regions are checked all the same.
    public var uncheckedRegions: [String] = []
    public var quarantined = 0
    /// Packs indexed again from their own records (sound, but listed wrongly by the index).
    public var reindexed = 0
    public var regionsMarked: [String] = []
    /// Regions whose refresh swap, cut short, `verify --repair` finished before checking.
    public var refreshesFinished: [String] = []
    /// "region: why" for completed regions whose `plan.json` is missing, not a plan, or damaged
    /// (`ResourcePlan.damage`): the daemon does not believe such a region complete.
    public var unreadablePlans: [String] = []
    /// "id: why" for regions whose status names its request (in any state but `failed` with
    /// `storeDamaged`, which says so already) and of which the store holds no files (attack round
    /// 53: verify said 0 faults for a completed region removed from the store; round 59: for a
    /// paused one whose delete was cut short between its files and its status).
    public var missingRegions: [String] = []
    /// "id: why" for regions of a store no other daemon writes whose folder holds no
    /// `request.json` and no delete of theirs is under way: faults (the daemon marks such a region
    /// `failed`, `storeDamaged`, at its next start; attack round 58: a delete by `tilespool delete`
    /// without a daemon, killed half way, left one that verify passed).
    public var regionsWithoutRequest: [String] = []
    /// "id: why" for regions whose delete by the daemon is under way or was cut short (its taken
    /// control file, `SpoolLayout.takenControl`, is still there): the daemon finishes it at its next
    /// start. Not faults.
    public var deletesUnderWay: [String] = []
    /// With `--repair` on a store other daemons write: "id: why" for regions of other spools whose
    /// manifests name damaged or missing objects, left for their own spool's repair.
    public var othersToRepair: [String] = []
    public var faults: Int {
        badObjects.count + missingObjects.count + tempFiles.count + foreignEntries.count + countMismatches.count + unreadablePlans.count
            + uncheckedRegions.count + missingRegions.count + regionsWithoutRequest.count
    }
}

/// An entry of `<store>/regions/` that gc cannot read as a region (`StoreMaintenance.referenced`),
/// with what to do about it.
public struct RegionEntryError: Error, Sendable, CustomStringConvertible {
    public var description: String
}

/// Garbage collection and verification of a store, either backend. Both only read manifests; gc
/// removes objects no manifest references, with a protocol that is safe beside running daemons
/// (docs/gc.md; the backend's part is `TileStore.collectGarbage`): an object younger than the
/// grace period is never a candidate, and a daemon refreshes the age of an object it re-uses.
public enum StoreMaintenance {
    /// Every object name referenced by any region's manifest or journal, and by those of a
    /// refresh under way (`regions/<id>/refresh/`), so both the pack in use and the one being made
    /// are kept. The refresh's files are read first: a refresh that swaps its manifest in meanwhile
    /// is then read in full either way.
    /// - Throws: the store's error when a region cannot be listed or read completely (gc must
    ///   then remove nothing).
    static func referenced(_ store: any TileStore) throws -> Set<String> {
        var refs = Set<String>()
        for id in try store.regionIDs() {
            // An entry that is neither a region id nor a folder (a `.DS_Store`, an editor's swap
            // file) holds no manifest: passed over (attack round 39: one stopped every gc). A
            // folder, or a region id that cannot be opened (a symlink), still stops gc.
            if !RequestValidator.isValidID(id) && !store.regionExists(id) { continue }
            // What cannot be opened as a folder says so, and what to do (attack round 40: the
            // message was `open .../regions/x: ENOTDIR` alone).
            // The entry named is the one that failed: the region's folder, or its `refresh`
            // (attack round 41: a symlink at regions/<id>/refresh was blamed on regions/<id>).
            func explained(_ e: Error, refresh: Bool) -> Error {
                guard let s = e as? SystemError, s.errno == ENOTDIR || s.errno == ELOOP else { return e }
                if refresh {
                    return RegionEntryError(description: "\(s): regions/\(TerminalText.inline(id))/refresh is not a folder (a symlink, which gc never follows, or a file), so gc stops and removes nothing; remove it (no refresh of \(TerminalText.inline(id)) is under way without its folder), then run gc again")
                }
                return RegionEntryError(description: "\(s): regions/\(TerminalText.inline(id)) is not a region folder (a symlink, which gc never follows, or a file), so gc stops and removes nothing; remove it, or put the region's folder itself there, then run gc again")
            }
            let region = store.region(id)
            for files in region.refreshStorage === region ? [region] : [region.refreshStorage, region] {
                let refresh = files !== region && store.regionExists(id)
                // Lines read twice are one reference: a read cut short is simply taken again.
                let failure = readAgainWhileListedKeysGo {
                    files.readManifest { line in if let s = line.sha256 { refs.insert(s) } }
                    if let e = files.readFailure { return e }
                    files.readJournal { line in if let s = line.sha256 { refs.insert(s) } }
                    return files.readFailure
                }
                if let e = failure { throw explained(e, refresh: refresh) }
            }
        }
        return refs
    }

    /// Whether region `id`'s status moves from `was` (another state or `updatedAt`) within
    /// `seconds`, read every 20 ms.
    static func statusChanges(_ status: StatusWriter, id: String, from was: RegionStatus, within seconds: Double) -> Bool {
        let end = Date().addingTimeInterval(seconds)
        repeat {
            let now = status.read(id: id)
            if now?.state != was.state || now?.updatedAt != was.updatedAt { return true }
            usleep(20_000)
        } while Date() < end
        return false
    }

    /// The `storeDamaged` message of a region whose `request.json` is missing or invalid (the
    /// daemon's start and `verify --repair` mark such a region with it).
    public static func requestMissing(_ id: String) -> String {
        "store/regions/\(id)/request.json is missing or invalid; drop the request again, or delete the region"
    }

    /// Runs `read` (which returns its failure, nil when it read everything) again while it fails
    /// on a key that a listing named and that was gone when it was fetched (`S3Error` 404: in a
    /// bucket, a refresh swapped in removes the refresh's segments, a delete the region's keys;
    /// the next read lists again), at most `attempts` times in all. Attack rounds 56-57: a
    /// default-grace gc beside a daemon refreshing every few seconds stopped on a refresh segment
    /// the swap had removed (exit 1, nothing removed), 2 of 43 runs.
    /// - Returns: the last failure, nil when a read was whole.
    static func readAgainWhileListedKeysGo(attempts: Int = 5, _ read: () -> Error?) -> Error? {
        var failure: Error?
        for _ in 0..<max(1, attempts) {
            failure = read()
            guard let e = failure as? S3Error, e.status == 404 else { return failure }
        }
        return failure
    }

    /// `uniqueBytes(store:)` of the disk store at `storeRoot`.
    public static func uniqueBytes(storeRoot: String) -> [String: Int] {
        guard let store = try? PackedStore(root: storeRoot) else { return [:] }
        return uniqueBytes(store: store)
    }

    /// For each region of the store, the bytes of the objects that its manifest references and
    /// no other region's manifest does (an object counts once per region however many of its
    /// lines name it). Reads the manifests only, never the objects: one pass over every manifest,
    /// in memory bounded whatever the number of objects (`UniqueBytesCount`). Safe on any thread
    /// beside the daemon.
    /// - Parameter runRecords: records sorted in memory before they spill to a scratch file
    ///   (tests make it small to exercise the merge).
    public static func uniqueBytes(store: any TileStore, runRecords: Int = UniqueBytesCount.defaultRunRecords) -> [String: Int] {
        let ids = ((try? store.regionIDs()) ?? []).sorted()
        var count = UniqueBytesCount(regions: ids.count, runRecords: runRecords)
        for (n, id) in ids.enumerated() {
            store.region(id).readManifest { line in
                guard let sha = line.sha256, let key = UInt64(sha.prefix(16), radix: 16) else { return }
                count.add(key: key, region: n, bytes: line.bytes)
            }
        }
        let bytes = count.finish()
        var out: [String: Int] = [:]
        for (n, id) in ids.enumerated() { out[id] = bytes[n] }
        return out
    }

    static func mtime(_ path: String) -> Double? {
        var st = stat()
        guard lstat(path, &st) == 0 else { return nil }
        return Double(st.st_mtim.tv_sec) + Double(st.st_mtim.tv_nsec) / 1e9
    }

    /// Removes unreferenced objects older than `grace` seconds and temp files older than `grace`
    /// (the store's, and the spool's status temp files), and the temp files of a `submit` that
    /// is gone once a minute old (`requests/.tmp-<id>.json-<pid>-<n>`).
    /// - Throws: the store's error when it cannot be listed or a manifest cannot be read.
    public static func gc(store: any TileStore, spool: SpoolLayout?, grace: Double) throws -> GCReport {
        var report = try store.collectGarbage(grace: grace) { try referenced(store) }
        let now = Date().timeIntervalSince1970
        if let spool {
            for name in Files.list(spool.status) where name.hasPrefix(".tmp-") {
                let p = spool.status + "/" + name
                if let m = mtime(p), now - m >= grace { Files.remove(p); report.tempFilesRemoved += 1 }
            }
            // A `submit` killed before its rename leaves `requests/.tmp-<id>.json-<pid>-<n>`,
            // which the daemon never reads (a dotfile): removed once its process is gone and it is
            // a minute old (a submit in another PID namespace, which kill(2) does not see here,
            // renames its file within seconds). Other dotfiles there (an editor's) are the user's;
            // so is anything but a regular file.
            if let requests = try? Directory(path: spool.requests, followFinal: false) {
                // Only `.tmp-<id>.json-<pid>-<n>` with a region id, as `submit` names them
                // (attack round 41: any `.tmp-<x>-<number>-<n>` went, a user's backups among them).
                for name in requests.list() where SaveTempName.isOrphaned(name) {
                    guard let target = SaveTempName.parse(name)?.target, RequestValidator.id(fromFileName: target) != nil,
                          let st = requests.status(name), (st.st_mode & S_IFMT) == S_IFREG,
                          now - Double(st.st_mtim.tv_sec) >= 60 else { continue }
                    if requests.remove(name) { report.tempFilesRemoved += 1 }
                }
            }
        }
        return report
    }

    /// The lines of one manifest (a region's, or its refresh's) whose objects are intact and
    /// present (`kept`), and the others (`dropped`), reported in `report.missingObjects` (a line
    /// naming an object that is present but bad is counted in `badObjects` already).
    /// - Throws: the store's error when the manifest cannot be read to its end.
    static func checkManifest(_ files: any RegionStorage, id: String, label: String, store: any TileStore, objects: ObjectCheck,
                              report: inout VerifyReport) throws -> (kept: [ManifestLine], dropped: [ManifestLine], lines: Int) {
        var lines: [ManifestLine] = [], absent: [Int] = []
        let bad = objects.badNames
        files.readManifest { line in
            report.linesChecked += 1
            // Not found by the scan of every pack and loose object: present only if it can be read
            // and hashes to its name now (a pack sealed beside a running daemon since the scan). An
            // index entry alone is not enough: it may name a pack that is gone.
            if let s = line.sha256, !bad.contains(s), objects.present?.contains(s) != true, !store.isIntact(s) { absent.append(lines.count) }
            lines.append(line)
        }
        if let e = files.readFailure { throw e }
        // Beside a running daemon, a line may name an object of a pack sealed (and indexed) since
        // this store was opened: the index files are read again once, and those objects looked
        // up anew (attack round 54: verify from cron beside two downloads named 97 objects
        // missing that were there).
        if !absent.isEmpty {
            try store.reloadIndex()
            absent = absent.filter { i in !store.isIntact(lines[i].sha256!) }
        }
        var kept: [ManifestLine] = [], dropped: [ManifestLine] = []
        var next = absent.makeIterator(), gone = next.next()
        for (i, line) in lines.enumerated() {
            if let s = line.sha256, bad.contains(s) || i == gone {
                if i == gone { report.missingObjects.append("\(label): \(line.key) -> \(s)"); gone = next.next() }
                dropped.append(line)
            } else {
                kept.append(line)
            }
        }
        return (kept, dropped, lines.count)
    }

    /// Re-hashes every object and checks every manifest, temp folder and completed region's counts.
    /// With `repair`, bad objects move to `<store>/quarantine/` (S3: are deleted), the manifest
    /// lines that used bad or missing objects are dropped, and those regions become `failed` with
    /// code `storeDamaged`, so that `resume` fetches exactly what is missing. A refresh under way
    /// (`regions/<id>/refresh/`) is checked too: its bad lines are dropped (it fetches them again),
    /// or, when the pack itself was damaged, the refresh is abandoned; journal lines naming a bad
    /// object are dropped; a refresh swap cut short is finished first. Nothing else is deleted.
    /// Only regions with a status in `status`'s spool have their counts checked.
    /// - Throws: the store's error when it cannot be listed.
    public static func verify(store: any TileStore, status: StatusWriter, repair: Bool) throws -> VerifyReport {
        var report = VerifyReport()
        let objects = try store.checkObjects(repair: repair, referenced: { try referenced(store) })
        report.objectsChecked = objects.checked
        report.badObjects = objects.bad
        report.quarantined = objects.quarantined
        report.reindexed = objects.reindexed
        report.unindexedPacks = objects.unindexedPacks
        report.foreignEntries = objects.foreignEntries
        // Temp files of a process still writing them (the daemon's open pack, a status being
        // written, a save or a gc under way) are in flight, not left over (attack rounds 36 and
        // 37: `verify` from cron beside the daemon named its open pack, a fault).
        func lockHolders() -> Set<pid_t> { Set([status.layout.lock, store.lockPath].compactMap { $0.flatMap { SpoolLock.holder(path: $0) } }) }
        let holders = lockHolders()
        func inFlight(_ name: String) -> Bool {
            let last = String(name.split(separator: "/").last ?? "")
            guard let pid = name.hasPrefix("tmp/") ? Repository.scratchOwner(last) : SaveTempName.parse(last)?.pid else { return false }
            return LeftBehind.inFlight(pid, lockHolders: holders)
        }
        report.tempFiles = objects.tempFiles.filter { !inFlight($0) }
        for name in Files.list(status.layout.status) where name.hasPrefix(".tmp-") && !inFlight("status/" + name) {
            report.tempFiles.append("status/" + name)
        }

        // A delete of region `id` the daemon took (under way, or cut short): named as not finished,
        // which the daemon's next start does; true when so.
        func deleteTaken(_ id: String) -> Bool {
            guard status.layout.deleteTaken(id: id) else { return false }
            report.deletesUnderWay.append("\(id): a delete under way or cut short (control/\(SpoolLayout.takenPrefix)\(id).delete); the daemon finishes it at its next start")
            return true
        }
        // `--repair` marks `st` `failed` (`storeDamaged`, `why`), out of any refresh, its counts
        // those of `kept` when given (what the store holds of it).
        func markDamaged(_ st: RegionStatus, _ why: String, recountedTo kept: [ManifestLine]?) {
            var st = st
            st.state = .failed
            st.refreshing = false
            st.error = RegionError(code: .storeDamaged, message: why)
            if let kept { st.progress = st.progress.recounted(kept) }
            st.updatedAt = Date()
            status.record(st, note: "verify --repair")
        }

        let ids = try store.regionIDs()
        for id in ids.sorted() {
            // A region that cannot be checked (a file or a symlink planted in regions/, a folder
            // that cannot be read, a manifest that cannot be rewritten) is named and verify goes
            // on with the others (attack round 37: one plain file there stopped verify before it
            // reported anything, a truncated pack included).
            do {
                // A name the daemon never gives a region (a dot-folder, one with a space): it
                // skips such a folder, so its manifest counts for nothing (attack round 38).
                guard RequestValidator.isValidID(id) else {
                    report.uncheckedRegions.append("regions/\(id): not a region id (the daemon skips it)")
                    continue
                }
                let files = store.region(id)
                // A folder without its request (below): its plan and counts are not checked.
                let withoutRequest = !store.isShared && (try? files.requestData()) == nil
                // A refresh's swap cut short is finished first, as the daemon's next start would
                // (only with --repair: the daemon is stopped then, and verify alone changes nothing).
                if repair, (try? files.finishInterruptedRefreshCommit()) == true {
                    report.refreshesFinished.append(id)
                }
                // The status as it was before the manifest was read: a region that completes (or
                // whose refresh is swapped in) while verify reads it is not a count mismatch (attack
                // round 56: three regions completing during verify's run on S3 were).
                let before = status.read(id: id)
                let own = try checkManifest(files, id: id, label: id, store: store, objects: objects, report: &report)
                report.manifestsChecked += 1
                let st = status.read(id: id)
                // In a store other daemons write, a repair rewrites only the regions this spool
                // took (its status names the request): another spool's is left to that spool's own
                // repair, which marks its status too (attack round 56: a repair from one spool
                // shortened another's manifest under a status still saying completed).
                let ours = !store.isShared || st?.namesItsRequest == true
                var mismatch = false
                var planFault: String?, countFault: String?
                if let st, st.state == .completed, !withoutRequest, repair || (before?.state == .completed && before?.updatedAt == st.updatedAt) {
                    let plan = files.loadPlan()
                    let planned = plan?.count
                    if plan == nil && files.readFailure == nil {
                        planFault = "\(id): plan.json is missing or unreadable (not a plan, or a value out of range); the daemon downloads the region again"
                    }
                    if st.progress.resourcesCompleted != own.lines || (planned != nil && planned != own.lines) {
                        mismatch = true
                        countFault = "\(id): status says \(st.progress.resourcesCompleted) resources, manifest has \(own.lines)" + (planned.map { ", plan has \($0)" } ?? "")
                    }
                }
                // A delete that began beside verify while it read the region (it removes
                // request.json first, then the rest): its files going is no damage (attack round
                // 59: a count mismatch and an unreadable plan for a region the daemon was deleting).
                let deletedMeanwhile = !withoutRequest && !repair && !store.isShared && (try? files.requestData()) == nil
                // Beside a running daemon a region's files can change a moment before its status
                // does: a new request replacing a completed pack empties its manifest and plan,
                // then writes `queued` (attack round 61: 14 of 4,447 runs named such a region). A
                // count or plan fault seen while a daemon holds the locks is looked at again once
                // the status has had time to follow; one whose status stays is reported.
                // The locks are read again: a daemon started since verify did may have made it
                // (attack round 62: a restart during a verify run, 1 of 1,548 runs).
                let replacedMeanwhile = !deletedMeanwhile && !repair && (planFault != nil || countFault != nil) && !lockHolders().isEmpty
                    && before.map { statusChanges(status, id: id, from: $0, within: 2) } == true
                if deletedMeanwhile || replacedMeanwhile { mismatch = false } else {
                    if let planFault { report.unreadablePlans.append(planFault) }
                    if let countFault { report.countMismatches.append(countFault) }
                }
                // The pack a refresh under way is making: a later swap installs it, so a line naming a
                // damaged or missing object there is as bad as one in the pack in use.
                let refresh = files.refreshStorage
                var refreshDropped = 0
                let refreshUnderWay = refresh !== files && files.refreshUnderWay() != nil
                // A `refresh` entry that is not a folder (a symlink, never followed; a file) is
                // no refresh under way, but gc stops on it: named here too (attack round 41).
                if refresh !== files, !refreshUnderWay {
                    refresh.readManifest { _ in }
                    if let e = refresh.readFailure as? SystemError, e.errno == ENOTDIR || e.errno == ELOOP {
                        report.uncheckedRegions.append("regions/\(id)/refresh: not a folder (a symlink, which is never followed, or a file); remove it: no refresh is under way without its folder")
                    }
                }
                if refreshUnderWay {
                    let checked: (kept: [ManifestLine], dropped: [ManifestLine], lines: Int)?
                    do { checked = try checkManifest(refresh, id: id, label: id + " (refresh)", store: store, objects: objects, report: &report) } catch {
                        // Beside a daemon, a refresh swapped in (or ended) while it was read: its
                        // files go with it, which is no damage (attack rounds 56 and 57: `region
                        // not checked: ... refresh/manifest/... was listed but is gone` on S3, the
                        // swap under way). Its pack is not in use yet: the next verify reads it.
                        guard !repair else { throw error }
                        checked = nil
                    }
                    if let r = checked {
                        report.manifestsChecked += 1
                        refreshDropped = r.dropped.count
                        if repair && ours && !r.dropped.isEmpty {
                            // The refresh fetches them again when it goes on (they are no longer recorded).
                            try refresh.replaceManifest(r.kept)
                        }
                    }
                }
                if repair {
                    // Journal lines naming a bad object: a restart re-hashes them anyway (and skips
                    // them); they are dropped here so that nothing recorded names a quarantined object.
                    for f in refresh === files ? [files] : [files, refresh] {
                        var text: [UInt8] = [], dropped = 0
                        f.readJournal { line in
                            if let s = line.sha256, objects.badNames.contains(s) { dropped += 1 } else { text += Array(line.text.utf8) }
                        }
                        if dropped > 0 { f.replaceJournal(with: text[...]) }
                    }
                }
                if repair && !ours && (!own.dropped.isEmpty || refreshDropped > 0) {
                    report.othersToRepair.append("\(id): \(own.dropped.count + refreshDropped) manifest lines name damaged or missing objects; run verify --repair from the spool whose region it is")
                } else if repair && (!own.dropped.isEmpty || mismatch) {
                    // The status first, then the manifest: a repair killed in between leaves a
                    // region marked failed whose manifest still names what it dropped (missing
                    // objects now: a second repair drops them), never a `completed` status over a
                    // shorter manifest. The counts are the kept lines' (the same however often this
                    // runs); a region `completed` with fewer lines than its plan is marked too.
                    if let st {
                        markDamaged(st, own.dropped.isEmpty
                            ? "its manifest holds \(own.lines) resources, not the \(st.progress.resourcesExpected) planned; resume fetches the rest"
                            : "\(own.dropped.count) resources were damaged or missing in the store; resume fetches them again", recountedTo: own.kept)
                    }
                    // A rewrite that fails stops verify with its error (exit 1): the manifest still
                    // names what was dropped, and a second repair retries.
                    if !own.dropped.isEmpty { try files.replaceManifest(own.kept) }
                    // The region is failed now: a refresh under way would swap in a pack over a
                    // manifest that is being fetched again; it goes (resume downloads what is missing).
                    if refresh !== files { files.abandonRefresh() }
                    report.regionsMarked.append(id)
                } else if repair && refreshDropped > 0 {
                    report.regionsMarked.append(id + " (refresh)")
                }
                // A region without its request (on disk; in a bucket, one being deleted): a delete
                // the daemon took is finished by it; any other is named. Looked at again last,
                // after the region was read, and only while it is still listed (a delete beside
                // verify removes the folder) and no TileSpool process is writing its request (a
                // region being created: its folder comes a moment before its request; attack
                // round 60: 2 of 358 verify runs beside a daemon taking requests named one).
                if withoutRequest || deletedMeanwhile, (try? files.requestData()) == nil, (try? store.regionIDs())?.contains(id) == true,
                   !files.requestBeingWritten(lockHolders: holders) {
                    if !deleteTaken(id) {
                        report.regionsWithoutRequest.append("\(id): store/regions/\(id)/request.json is missing (a delete cut short?); the daemon skips the region and marks it failed: delete it (tilespool delete \(id)), or drop its request again")
                        if repair, let now = status.read(id: id), !now.isMarkedStoreDamaged {
                            markDamaged(now, requestMissing(id), recountedTo: nil)
                            report.regionsMarked.append(id)
                        }
                    }
                }
            } catch {
                // Deleted beside verify while it was read: not damage. On disk the folder goes from
                // the listing; in a bucket its keys go one by one, `request.json` first. An entry
                // still listed, such as a file or a symlink in regions/, is named below.
                if !repair, (try? store.regionIDs())?.contains(id) != true
                    || (store.isShared && (try? store.region(id).requestData()) == nil) { continue }
                report.uncheckedRegions.append("regions/\(id): \(error)")
            }
        }
        // A region the spool took (its status names its request), gone from the store: its pack is
        // lost, or a delete was cut short between the files and the status (attack round 59: a
        // `pausedUser` status stayed, for nothing). One marked already (`failed`, `storeDamaged`)
        // has said so. Read again once the store says it has none: a `delete` beside verify
        // removes the files, then the status; one the daemon took is finished by it.
        let listed = Set(ids)
        for st in status.readAll() where st.namesItsRequest && !listed.contains(st.id) && !st.isMarkedStoreDamaged {
            guard !store.regionExists(st.id), let now = status.read(id: st.id), now.state == st.state, !deleteTaken(st.id) else { continue }
            report.missingRegions.append("\(st.id): the status says \(st.state.rawValue), and the store \(store.location) holds no files of this region; drop its request again, or delete it")
            if repair {
                // What the store holds of it: nothing.
                markDamaged(now, "the store holds no files of this region: drop its request again, or delete it", recountedTo: [])
                report.regionsMarked.append(st.id)
            }
        }
        return report
    }
}

/// The unique-bytes count of `StoreMaintenance.uniqueBytes` in bounded memory, as sort(1) counts
/// what does not fit: (object, region, bytes) records are sorted in runs of `runRecords` (24 bytes
/// each; 3 MiB at the default), each run past the first spilled to an unnamed scratch file
/// (O_TMPFILE in `$TMPDIR`, else /tmp: nothing to clean after a crash), then the runs are merged
/// in object order. An object is named by the first 64 bits of its SHA-256 (a false merge of two
/// objects among 10 million has a chance of about 3 in a million, and only moves a count).
/// Memory: the run, plus 48 KiB per spilled run while merging (about 80 runs for 10 million
/// objects). Where no scratch file can be made, the runs stay in memory (the count is then
/// right, the memory not bounded).
public struct UniqueBytesCount {
    /// Records sorted in memory before a run spills.
    public static let defaultRunRecords = 1 << 17
    private struct Record { var key: UInt64; var bytes: Int; var region: Int32 }
    private let runRecords: Int
    private var run: [Record] = []
    private var spilled: [(offset: Int, count: Int)] = []
    private var inMemory: [[Record]] = []
    private var fd: Int32 = -1
    private var fileSize = 0
    private var total: [Int]

    /// A count over `regions` regions (numbered from 0).
    public init(regions: Int, runRecords: Int = UniqueBytesCount.defaultRunRecords) {
        self.runRecords = max(2, runRecords)
        total = [Int](repeating: 0, count: regions)
        run.reserveCapacity(min(self.runRecords, 1 << 12))
    }

    /// Counts one manifest line of region `region` naming object `key` (its SHA-256's first 64
    /// bits) of `bytes` bytes.
    public mutating func add(key: UInt64, region: Int, bytes: Int) {
        run.append(Record(key: key, bytes: bytes, region: Int32(truncatingIfNeeded: region)))
        if run.count >= runRecords { spill() }
    }

    /// Sorts the run by object then region and keeps one record per (object, region).
    private mutating func sortRun() {
        run.sort { ($0.key, $0.region) < ($1.key, $1.region) }
        var w = 0
        for r in 0..<run.count where w == 0 || run[r].key != run[w - 1].key || run[r].region != run[w - 1].region {
            run[w] = run[r]; w += 1
        }
        run.removeSubrange(w...)
    }

    private mutating func spill() {
        sortRun()
        defer { run.removeAll(keepingCapacity: true) }
        if fd < 0 && inMemory.isEmpty { fd = UniqueBytesCount.openScratch() }
        if fd >= 0 {
            let want = run.count * MemoryLayout<Record>.stride
            let fd = fd
            let wrote: Bool = run.withUnsafeBytes { raw in
                do { try Files.writeAll(fd, raw, path: "unique-bytes scratch file"); return true } catch { return false }
            }
            if wrote { spilled.append((fileSize, run.count)); fileSize += want; return }
            // A full scratch disk: the runs written stay there and this one is kept in memory
            // (the next tries the file again, past what a write cut short left: never read).
            fileSize = Int(lseek(fd, 0, SEEK_END))
        }
        inMemory.append(run)
    }

    /// An unnamed scratch file in `$TMPDIR`, else (unset, or a folder where none can be made)
    /// `/tmp`; -1 when neither can hold one, said once per process at warning level (the count
    /// is then made in memory).
    private static func openScratch() -> Int32 {
        let tmpdir = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 }
        var tried: [String] = []
        for dir in tmpdir == "/tmp" ? ["/tmp"] : [tmpdir, "/tmp"].compactMap({ $0 }) {
            let fd = tilespool_open_scratch(dir)
            if fd >= 0 { return fd }
            tried.append("\(dir) (\(String(cString: strerror(tilespool_errno()))))")
        }
        if scratchWarned.take() {
            Log.warning("cannot make a scratch file for the unique-bytes count in \(tried.joined(separator: " or ")): it is counted in memory, about 24 bytes per manifest line")
        }
        return -1
    }

    /// Set once the warning of `openScratch` has been logged.
    private static let scratchWarned = OnceFlag()

    /// Merges the runs and returns each region's bytes of the objects only it references.
    public mutating func finish() -> [Int] {
        if spilled.isEmpty && inMemory.isEmpty {
            sortRun()
            var only = OnlyOneRegion()
            for r in run { only.next(r.key, r.region, r.bytes, &total) }
            only.end(&total)
            return total
        }
        if !run.isEmpty { spill() }
        run = []
        var heads: [RunReader] = spilled.map { RunReader(fd: fd, offset: $0.offset, count: $0.count) }
        heads += inMemory.map { RunReader(records: $0) }
        inMemory = []
        var only = OnlyOneRegion()
        // A k-way merge: the smallest (object, region) head is taken each step.
        var heap = MinHeap(readers: heads)
        while let r = heap.pop() { only.next(r.key, r.region, r.bytes, &total) }
        only.end(&total)
        if fd >= 0 { Glibc.close(fd); fd = -1 }
        return total
    }

    /// Walks records in object order: an object named by one region only adds its bytes there.
    private struct OnlyOneRegion {
        var key: UInt64 = 0, region: Int32 = -1, bytes = 0, shared = false
        mutating func next(_ k: UInt64, _ r: Int32, _ b: Int, _ total: inout [Int]) {
            if region >= 0 && k == key {
                if r != region { shared = true }
                return
            }
            end(&total)
            key = k; region = r; bytes = b; shared = false
        }
        mutating func end(_ total: inout [Int]) {
            if region >= 0 && !shared && Int(region) < total.count { total[Int(region)] = SaturatingCount.add(total[Int(region)], bytes) }
            region = -1
        }
    }

    /// One sorted run, read in blocks of 2,048 records (from the scratch file, or memory).
    private struct RunReader {
        private let fd: Int32
        private var offset: Int, left: Int
        private var block: [Record]
        private var at = 0
        init(fd: Int32, offset: Int, count: Int) { self.fd = fd; self.offset = offset; left = count; block = [] }
        init(records: [Record]) { fd = -1; offset = 0; left = 0; block = records }
        var head: Record? { at < block.count ? block[at] : nil }
        /// Moves to the next record; false at the end of the run (or a read that failed).
        mutating func advance() -> Bool {
            at += 1
            if at < block.count { return true }
            guard left > 0, fd >= 0 else { return false }
            let n = min(2048, left)
            let size = MemoryLayout<Record>.stride
            var next = [Record](repeating: Record(key: 0, bytes: 0, region: 0), count: n)
            let ok = next.withUnsafeMutableBytes { raw in pread(fd, raw.baseAddress, n * size, off_t(offset)) == n * size }
            guard ok else { left = 0; return false }
            offset += n * size; left -= n
            block = next; at = 0
            return true
        }
        /// Loads the first block; false for an empty run.
        mutating func start() -> Bool {
            if fd < 0 { at = 0; return !block.isEmpty }
            at = -1
            return advance()
        }
    }

    private struct MinHeap {
        var items: [RunReader] = []
        init(readers: [RunReader]) {
            for var r in readers where r.start() { push(r) }
        }
        private static func less(_ a: RunReader, _ b: RunReader) -> Bool {
            let x = a.head!, y = b.head!
            return (x.key, x.region) < (y.key, y.region)
        }
        private mutating func push(_ r: RunReader) {
            items.append(r)
            var i = items.count - 1
            while i > 0 { let p = (i - 1) / 2; if MinHeap.less(items[i], items[p]) { items.swapAt(i, p); i = p } else { break } }
        }
        private mutating func down(_ from: Int) {
            var i = from
            while true {
                let l = 2 * i + 1, r = l + 1
                var m = i
                if l < items.count && MinHeap.less(items[l], items[m]) { m = l }
                if r < items.count && MinHeap.less(items[r], items[m]) { m = r }
                if m == i { return }
                items.swapAt(i, m); i = m
            }
        }
        mutating func pop() -> Record? {
            guard let top = items.first?.head else { return nil }
            if items[0].advance() {
                down(0)
            } else {
                items.swapAt(0, items.count - 1)
                items.removeLast()
                if !items.isEmpty { down(0) }
            }
            return top
        }
    }
}

/// A flag that is taken once: `take()` is true for its first caller only (any thread).
final class OnceFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var taken = false
    func take() -> Bool {
        lock.lock(); defer { lock.unlock() }
        if taken { return false }
        taken = true
        return true
    }
}
