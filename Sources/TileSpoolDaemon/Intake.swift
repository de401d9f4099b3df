// The watch-folder intake: files in requests/ and control/ become accepted regions and user
// actions. Inotify events are hints; periodic rescans find what they miss. A refused file goes
// to rejected/ beside a reason; a valid request becomes a queued region; a control file becomes
// an action applied through the state machine.
import Foundation
import Glibc
import TileSpoolCore
import TileSpoolIO

extension Daemon {
    /// Handles every file in `folders`, oldest first across them (so arrival order follows the
    /// files' age: a request and a control file of one id dropped while no daemon ran act in
    /// the order they were dropped), leaving regular files modified in the last
    /// `options.settleTime` seconds for their close event or the next rescan.
    func rescan(_ folders: String...) {
        let dated = folders.flatMap { folder in datedEntries(folder).map { (folder, $0.0, $0.1) } }
        for (folder, name, _) in dated.sorted(by: { ($0.2, $0.1) < ($1.2, $1.1) }) { handleFile(folder: folder, name: name) }
    }

    /// An entry's modification time in nanoseconds since 1970 (the order files are taken in),
    /// saturating: a time past 2262 or before 1677 (a `touch -d 2300-01-01`, a bogus mtime kept by
    /// `cp -p`) counts as the last or first nanosecond an Int holds, never an overflow (a file
    /// dropped so crashed the daemon at every rescan, 2026-12-07).
    static func mtime(_ st: stat) -> Int {
        let (ns, over) = Int(st.st_mtim.tv_sec).multipliedReportingOverflow(by: 1_000_000_000)
        if over { return st.st_mtim.tv_sec < 0 ? Int.min : Int.max }
        let (sum, past) = ns.addingReportingOverflow(Int(st.st_mtim.tv_nsec))
        return past ? Int.max : sum
    }

    /// The files of `folder` to handle, with their mtimes (ns); misnamed requests are refused here.
    private func datedEntries(_ folder: String) -> [(String, Int)] {
        let now = Date().timeIntervalSince1970
        let names = Files.list(folder).filter { !$0.hasPrefix(".") && isForThisRun($0) }
        var misnamed: [String] = []
        let dated = names.compactMap { name -> (String, Int)? in
            var st = stat()
            guard lstat(folder + "/" + name, &st) == 0 else { return nil }
            let mtime = Daemon.mtime(st)
            // Left unmodified a while; a time more than a minute ahead (a `touch -d 2300-01-01`)
            // is no write under way either, and would otherwise never settle.
            let t = Double(mtime) / 1e9
            let settled = now - t >= options.settleTime || t > now + 60
            if (st.st_mode & S_IFMT) == S_IFREG {
                switch Files.isOpenForWriting(folder + "/" + name) {
                case true?: return nil
                case false?: break
                case nil: if !settled { return nil }
                }
                // A request file not named *.json is refused only here, settled (closed and left
                // unmodified a while), never on its close event: foo.json.tmp may become foo.json.
                if folder == layout.requests && !name.hasSuffix(".json") {
                    if settled { misnamed.append(name) }
                    return nil
                }
            }
            return (name, mtime)
        }
        for name in misnamed { reject(path: folder + "/" + name, name: name, reason: Daemon.misnamedRequest(name)) }
        return dated
    }

    /// The reason a settled regular file in `requests/` whose name does not end in `.json` is moved
    /// to `rejected/` (names are case-sensitive: `X.JSON` and `a.geojson` are not requests).
    static func misnamedRequest(_ name: String) -> String {
        "invalidRequest: request files must end in .json (lower case), and '\(name)' does not; rename it to <id>.json to have it read (write a dotfile, then mv)"
    }

    /// False for a file of another region when the daemon runs for one (`onlyRegion`): it is
    /// left where it is, for the daemon of the spool.
    func isForThisRun(_ name: String) -> Bool {
        guard let only = options.onlyRegion else { return true }
        return name == only + ".json" || name.hasPrefix(only + ".") && RegionAction(rawValue: String(name.dropFirst(only.count + 1))) != nil
    }

    func handleFile(folder: String, name: String) {
        if name.hasPrefix(".") || !isForThisRun(name) { return }
        let path = folder + "/" + name
        guard Files.entryType(path) != .missing else { return }
        if folder == layout.requests { handleRequest(path: path, name: name) } else { handleControl(path: path, name: name) }
    }

    /// Moves a refused file to `rejected/` and writes `rejected/<name>.error`.
    /// Moves a refused file to `rejected/` and writes `rejected/<name>.error`. Both folders are
    /// opened without following a symlink (one swapped in for `rejected/` while the daemon runs
    /// gets nothing: the file is removed instead), and the move is one `renameat2` between them.
    func reject(path: String, name: String, reason: String) {
        Log.error("rejected \(name): \(reason)", [("file", name)])
        let stored = SpoolLayout.rejectedName(name)
        let (folder, entry) = Files.split(path)
        guard let from = try? Directory(path: folder, followFinal: false),
              let rejected = try? Directory(path: layout.rejected, followFinal: false) else {
            Log.error("cannot open \(layout.rejected) (a symlink is never followed): \(name) is removed, not kept", [("file", name)])
            Files.remove(path)
            return
        }
        rejected.removeTree(stored)
        if (try? from.rename(entry, to: rejected, stored)) == nil { from.removeTree(entry) }
        let note = stored == name ? "" : "(the file was named \(name.debugDescription))\n"
        // A text file scripts print: no control character a request's field names carried.
        _ = try? rejected.writeAtomically(Data(TerminalText.safe(reason + "\n" + note).utf8), to: stored + ".error")
    }

    /// Reads and validates a request file, then takes it (`take`) or refuses it. A `tiles`
    /// request's plan is made first, off the loop (`planOnArrival`): one over the tile limit is
    /// refused like any bad request. One request is planned at a time: a request file met while
    /// one is, and a control file of its id, are held (`hold`) and handled once it is decided, in
    /// the order they were met, so that requests and control files act in the order they came.
    func handleRequest(path: String, name: String) {
        guard name.hasSuffix(".json") else { return }
        guard arriving == nil else { hold(layout.requests, name); return }
        var raw: Data?
        let request: RegionRequest
        do {
            // Before the read: a file replaced while its plan is made is read again (`collectArrivals`).
            let file = FileVersion(path: path)
            guard let file, file.type == .regular else {
                throw RegionError(code: .invalidRequest, message: "the request is not a regular file (symlinks, FIFOs and folders are refused)")
            }
            let data: Data
            do { data = try Files.readRegularFile(path, limit: RequestValidator.maxFileSize) } catch {
                throw RegionError(code: .invalidRequest, message: error.errno == EFBIG
                    ? "the request file is larger than \(RequestValidator.maxFileSize) bytes"
                    : "cannot read the request: \(error.errnoDescription)")
            }
            raw = data
            request = try RequestValidator.validate(data, fileName: name)
            let named: [String]
            switch request.source { case .style(let u): named = [u]; case .tiles(let t): named = t }
            if let e = TileUsagePolicy.refusal(urls: named, subdomains: request.subdomains, allowedHosts: options.allowedHosts) { throw e }
            // A tiles request's plan is known now. (Not with a PMTiles archive: its plan needs the
            // archive's directories, read when the region starts; the limit is checked then.)
            // A different request for a region under way is refused at once, as it stands now
            // (attack round 50: one decided after its plan replaced the pack of a region that had
            // completed meanwhile).
            if case .tiles(let templates) = request.source, !templates.contains(where: { PMTiles.archiveURL($0) != nil }),
               duplicateReason(request) == nil {
                // A plain `bounds` plan is a few rectangles a zoom, made here at once (2,000
                // requests dropped together are taken in one rescan); a shape's, a corridor's or
                // parts' count takes seconds near the budgets, so it is made off the loop.
                if request.shape != nil || request.areaParts != nil {
                    planOnArrival(Arrival(path: path, name: name, raw: data, request: request, file: file), templates: templates)
                } else {
                    decide(request, Result { () throws(RegionError) in try Planner.plan(request: request, templates: templates, limits: tileLimits(request)) },
                           path: path, name: name, raw: data)
                }
                return
            }
        } catch let e as RegionError {
            refuse(path: path, name: name, raw: raw, e)
            return
        } catch {
            reject(path: path, name: name, reason: "\(error)")
            return
        }
        take(request, plan: nil, path: path, name: name)
    }

    /// Decides on a `tiles` request once its plan is made (on the loop for `bounds`, else
    /// `collectArrivals`): refused when planning failed or the plan is over the tile limit (moved
    /// to rejected/), else taken with its plan (`take`).
    func decide(_ request: RegionRequest, _ plan: Result<ResourcePlan, RegionError>, path: String, name: String, raw: Data) {
        switch plan {
        case .failure(let e): refuse(path: path, name: name, raw: raw, e)
        case .success(let plan):
            if let e = tileLimitError(request, plan) { refuse(path: path, name: name, raw: raw, e) } else { take(request, plan: plan, path: path, name: name) }
        }
    }

    /// Makes the plan of a `tiles` request off the loop (`planQueue`, as a style's): a corridor
    /// or shape near the planning budgets takes seconds, during which downloads, control files of
    /// other regions and SIGTERM go on. `collectArrivals` takes the result.
    func planOnArrival(_ a: Arrival, templates: [String]) {
        arriving = a
        Log.info("making the plan of \(a.name)", region: a.request.id, [("file", a.name)])
        let limits = tileLimits(a.request)
        // `a` is held by `arriving` until its plan is collected, so its identifier is not reused before.
        let request = a.request, cancel = a.cancel, mailbox = arrivalMailbox, writer = self.writer, id = ObjectIdentifier(a)
        planQueue.async {
            let result = Result { () throws(RegionError) in
                try Planner.plan(request: request, templates: templates, limits: limits, cancel: cancel)
            }
            mailbox.post(ArrivalPlan(arrival: id, result: result, cancelled: cancel.isCancelled))
            writer.wake()
        }
    }

    /// Takes the plan of the request being planned (`planOnArrival`): the request is refused
    /// over the tile limit, else taken (`take`); a file changed or removed meanwhile is read
    /// again or forgotten. Then the files held meanwhile are handled (`takeHeldFiles`).
    func collectArrivals() {
        for made in arrivalMailbox.take() {
            guard let a = arriving, ObjectIdentifier(a) == made.arrival else { continue }
            arriving = nil
            if made.cancelled && !a.changed { continue } // the daemon stops: the file stays
            let now = FileVersion(path: a.path)
            if now == nil {
                Log.info("\(a.name) was removed while its plan was made: nothing taken", [("file", a.name)])
            } else if now != a.file || a.changed {
                Log.info("\(a.name) changed while its plan was made: read again", [("file", a.name)])
                hold(layout.requests, a.name) // where its change was met, if it was
            } else {
                decide(a.request, made.result, path: a.path, name: a.name, raw: a.raw)
            }
            takeHeldFiles()
        }
    }

    /// Handles the files held while a request was planned (`hold`), in the order they were met
    /// (a rescan orders by mtime, then name: `X.delete` before `X.json` dropped in the same clock
    /// tick, attack round 50), until one of them is a request planned off the loop: the rest
    /// stay held, in order, for its decision.
    func takeHeldFiles() {
        var taken = 0
        while arriving == nil, taken < heldFiles.count {
            let f = heldFiles[taken]
            taken += 1
            heldNames.remove(f.folder + "/" + f.name)
            if let id = f.id { heldIDs[id]! -= 1; if heldIDs[id] == 0 { heldIDs.removeValue(forKey: id) } }
            handleFile(folder: f.folder, name: f.name)
        }
        heldFiles.removeFirst(taken)
    }

    /// Keeps a file of `folder` met while a request is planned (`arriving`) for after its
    /// decision (`takeHeldFiles`), each once, in the order first met. A request file's id (its
    /// `id` field, else its file name) is noted, so that a control file of that id waits for it
    /// too, whatever the file is named (attack round 51: `k2.json` holding id `k`, then `k.pause`).
    func hold(_ folder: String, _ name: String) {
        // The file being planned changed: its plan is of a request that is no longer there, so
        // it stops now (a shape's count takes seconds) and the file is read again after.
        if folder == layout.requests, let a = arriving, a.name == name, FileVersion(path: a.path) != a.file {
            a.changed = true
            a.cancel.cancel()
        }
        guard heldNames.insert(folder + "/" + name).inserted else { return }
        var id: String?
        if folder == layout.requests {
            let data = try? Files.readRegularFile(folder + "/" + name, limit: RequestValidator.maxFileSize)
            id = RequestValidator.statusID(data, fileName: name)
            if let id { heldIDs[id, default: 0] += 1 }
        }
        heldFiles.append((folder, name, id))
    }

    /// True when a control file of region `id` must wait: that region's request is being planned,
    /// or waits behind the one that is (held, or its file `<id>.json` is in requests/).
    func controlWaits(id: String) -> Bool {
        guard let a = arriving else { return false }
        return a.request.id == id || heldIDs[id] != nil || Files.entryType(layout.requests + "/" + id + ".json") != .missing
    }

    /// Refuses a request file with `e`: moved to rejected/, with status files `failed` under the
    /// id it names, unless a region of that id exists (a bad request must not touch it).
    func refuse(path: String, name: String, raw: Data?, _ e: RegionError) {
        if let id = RequestValidator.statusID(raw, fileName: name), regions[id] == nil {
            status.record(RegionStatus(id: id, state: .failed, progress: RegionProgress(), error: e, request: nil, context: .null))
        }
        reject(path: path, name: name, reason: "\(e.code.rawValue): \(e.message)")
    }

    /// The reason `request` is refused as `duplicateId`: its region is under way (not finished, or
    /// refreshing) and the request is not the same download with new credentials; nil otherwise.
    func duplicateReason(_ request: RegionRequest) -> String? {
        guard let existing = regions[request.id], !existing.state.isTerminal else { return nil }
        if !existing.refreshing && existing.request.differsOnlyInCredentials(from: request) { return nil }
        let what = existing.refreshing ? "\(existing.state.rawValue) (a refresh is under way: wait for it, or cancel it to keep the pack as it was)"
            : "\(existing.state.rawValue); cancel or delete it first"
        return "duplicateId: region '\(request.id)' is \(what)"
    }

    /// Takes a valid request (`plan`: a `tiles` request's, nil for a style): a refresh of the
    /// completed region it downloads again, new credentials for a region, a duplicate of a region
    /// under way (refused), or a new region (`accept`).
    func take(_ request: RegionRequest, plan tilesPlan: ResourcePlan?, path: String, name: String) {
        if let existing = regions[request.id], existing.state == .completed, !existing.refreshing,
           existing.request.downloadsTheSame(as: request) {
            // The same download again: a refresh (conditional requests), not a second full download.
            if !NSDictionary(dictionary: existing.request.jsonObject).isEqual(to: request.jsonObject) {
                do { try existing.files.create(request: request) } catch {
                    reject(path: path, name: name, reason: "storageError: cannot write the region's request: \(error)")
                    return
                }
                existing.request = request
            }
            Files.remove(path)
            Log.info("\(name) asks for what the region has: refreshing it", region: request.id, [("file", name)])
            apply(.refresh, to: existing)
            return
        }
        if let existing = regions[request.id], !existing.refreshing, existing.request.differsOnlyInCredentials(from: request) {
            // The same download with new credentials (a rotated token): what the region has is kept.
            Log.info("\(name) changes only credentials: keeping what the region has", region: request.id, [("file", name)])
            accept(request, plan: tilesPlan, path: path, name: name, keepingManifest: true)
            return
        }
        if let reason = duplicateReason(request) {
            reject(path: path, name: name, reason: reason)
            return
        }
        if store.isShared, regions[request.id] == nil, status.read(id: request.id)?.namesItsRequest != true, store.regionExists(request.id) {
            reject(path: path, name: name, reason: "duplicateId: region '\(request.id)' exists in the store \(store.location) and this spool did not take it (no status here names its request): it is another daemon's (region ids must be distinct between daemons, docs/s3.md#concurrency)")
            return
        }
        accept(request, plan: tilesPlan, path: path, name: name)
    }

    /// Makes a region of a valid request: its files in the store, state `queued`. `plan` is the
    /// exact plan of a `tiles` request (nil for a style, planned once its TileJSON is in). With
    /// `keepingManifest` (only new credentials), the manifest stays and only the rest is fetched.
    func accept(_ request: RegionRequest, plan: ResourcePlan?, path: String, name: String, keepingManifest: Bool = false) {
        let files = store.region(request.id)
        let old = regions[request.id]
        if let old { stopDownload(old) }
        arrivals += 1
        // The state it replaces is the previous one of the next state change (none for a new id).
        let r = Region(id: request.id, request: request, state: old?.state ?? .queued, files: files, arrival: arrivals)
        r.isNew = old == nil
        r.warnings = RegionWarning.of(request)
        // A completed pack replaced by another download of the same id: said loudly (a status
        // warning, the event, a log warning), as it is gone once the new download starts.
        var replaced: PackReplaced?
        if let old, old.state == .completed || old.refreshing, !keepingManifest {
            let when = old.completedAt.map { " (completed \(Timestamp.iso8601($0)))" } ?? ""
            r.warnings.append(RegionWarning(code: RegionWarning.packReplaced,
                                            message: "this request replaced the completed pack of region '\(request.id)'\(when) with another download; to keep a pack, give the new request another id"))
            replaced = PackReplaced(state: old.state, completedAt: old.completedAt,
                                    resources: old.progress.resourcesCompleted, bytes: old.progress.bytesCompleted)
            Log.warning("\(name) replaces the completed pack of region \(request.id)", region: request.id, state: old.state.rawValue, [("file", name)])
        }
        // A new id in a store other daemons write (S3): its request is written only where none
        // is, before anything else of the region is touched. Of two daemons taking one new id at
        // once, the one that finds it written refuses its request as `duplicateId` and changes
        // nothing in the store (attack round 53: the second one's request.json and plan.json had
        // replaced the first one's, whose region then completed with the other's plan).
        let claiming = store.isShared && old == nil && status.read(id: request.id)?.namesItsRequest != true
        // Whether this daemon's files of the region may be removed on a failure below: not when
        // a claim failed without an answer (what is there may be another daemon's).
        var ownsFiles = !claiming
        do {
            if claiming {
                guard try files.create(request: request, exclusive: true) else {
                    reject(path: path, name: name, reason: "duplicateId: region '\(request.id)' was created in the store \(store.location) by another daemon as this one took it (region ids must be distinct between daemons, docs/s3.md#concurrency)")
                    return
                }
                ownsFiles = true
            }
            if keepingManifest {
                var isStyle = false
                if case .style = request.source { isStyle = true }
                try files.keepForNewCredentials(dropDocuments: isStyle)
            } else {
                files.resetDownload()
            }
            if !claiming { try files.create(request: request) }
            if let plan { try files.savePlan(plan) }
        } catch {
            // No region without its files: the request is refused like a bad one (drop it again
            // once the store can be written), and nothing half made stays in the store.
            let e = RegionError(code: .storageError, message: "cannot write the region's files: \(error)")
            if keepingManifest {
                // The pack stays: the region fails with the new request, and a resume tries again.
                regions[r.id] = r
                r.error = e
                Files.remove(path)
                setState(r, .failed)
                return
            }
            if regions.removeValue(forKey: request.id) != nil { live.removeValue(forKey: request.id) }
            if ownsFiles { files.remove() }
            // Refused like a bad request, its status names no request: the region was never made.
            // In a store other daemons write, one naming it would make the id's region this
            // spool's, though it holds no files of it (another daemon may take the id); on disk,
            // `verify` would name it a missing region (CI run of 28fba7e, the randomized hostile run).
            status.record(RegionStatus(id: request.id, state: .failed, progress: RegionProgress(), error: e,
                                       request: nil, context: JSONValue(request.context)))
            reject(path: path, name: name, reason: "\(e.code.rawValue): \(e.message)")
            return
        }
        regions[r.id] = r
        if let plan {
            r.progress.resourcesExpected = plan.count
            r.progress.tilesExpected = plan.tileCount
            r.progress.resourcesExpectedIsPrecise = true
        }
        Log.info("accepted \(name)", region: r.id, [("file", name)])
        for w in r.warnings where w.code != RegionWarning.packReplaced { Log.warning(w.message, region: r.id, [("code", w.code)]) }
        setState(r, .queued, event: StatusEvent(replaced: replaced, warnings: r.warnings.isEmpty ? nil : r.warnings))
        // Only once the status says `queued`: a kill -9 before leaves the file to be read again.
        Files.remove(path)
    }

    func handleControl(path: String, name: String) {
        guard let dot = name.lastIndex(of: ".") else {
            reject(path: path, name: name, reason: "a control file is named <id>.<action> (pause, resume, cancel, delete, refresh)")
            return
        }
        let id = String(name[..<dot])
        guard let action = RegionAction(rawValue: String(name[name.index(after: dot)...])) else {
            reject(path: path, name: name, reason: "unknown action '\(name[name.index(after: dot)...])'; use pause, resume, cancel, delete or refresh")
            return
        }
        guard Files.entryType(path) == .regular else {
            reject(path: path, name: name, reason: "the control file is not a regular file")
            return
        }
        // Never a path of the store or spool (`.`, `..`): only what a request's id may be.
        guard RequestValidator.isValidID(id) else {
            reject(path: path, name: name, reason: "no region with id '\(id)' (not a valid region id)")
            return
        }
        if controlWaits(id: id) { hold(layout.control, name); return } // handled once the request is decided
        guard let r = regions[id] else {
            // In a shared store (S3) a region this spool has no status for is another daemon's.
            let st = status.read(id: id)
            if action == .delete, st != nil || (!store.isShared && store.regionExists(id)) {
                let done = take(name, path)
                // In a shared store only a region this spool took is removed: the region of a
                // refused request's id there is another daemon's (attack round 53).
                if !store.isShared || st?.namesItsRequest == true { store.region(id).remove() }
                status.remove(id: id)
                status.event(StatusEvent(id: id, state: "deleted", action: "delete"))
                Log.info("deleted (status only)", region: id, state: "deleted")
                runHook(id: id, state: "deleted", previous: nil)
                ops.uniqueWanted = true
                Files.remove(done) // only once done, as below
                return
            }
            reject(path: path, name: name, reason: "no region with id '\(id)'")
            return
        }
        var maxAge: Double?
        if action == .refresh {
            switch Daemon.refreshMaxAge(path) {
            case .success(let m): maxAge = m
            case .failure(let e):
                reject(path: path, name: name, reason: e.message)
                return
            }
        }
        // Taken (renamed to a dotfile the watcher ignores), applied, then removed: a kill -9
        // before the action's effect is on disk leaves the taken file, and the next start applies
        // it before reading any request (`applyTakenControls`: attack round 17 lost a refresh
        // removed just before a kill; round 18 saw a delete left in `control/` by a kill remove
        // a new region of the same id requested after it).
        let done = take(name, path)
        apply(action, to: r, maxAge: maxAge)
        Files.remove(done)
    }

    /// Renames control file `name` (at `path`) to its taken name; the path to remove once its
    /// action is applied (`path` itself when the rename fails).
    private func take(_ name: String, _ path: String) -> String {
        guard let d = try? Directory(path: layout.control, followFinal: false), (try? d.rename(name, to: d, Daemon.takenPrefix + name)) != nil else { return path }
        return layout.control + "/" + Daemon.takenPrefix + name
    }

    /// The name a control file is given while its action is applied (`handleControl`).
    static let takenPrefix = SpoolLayout.takenPrefix

    /// At start, before requests and control files are read: the control files a stopped daemon
    /// had taken but perhaps not applied (`.tilespool-taken-<id>.<action>`) are applied first, in
    /// the order they were dropped (their mtimes), so an action dropped before a request of the
    /// same id acts before it. A `delete` whose region is gone (it was applied) is removed, logged;
    /// any other that names no region, or whose name no control file could have had (a dotfile,
    /// an invalid id), is not one TileSpool took: it goes to `rejected/` (as
    /// `tilespool-taken-<name>`, no leading dot) with the reason, never deleted.
    func applyTakenControls() {
        let control = layout.control
        let taken = Files.list(control).filter { $0.hasPrefix(Daemon.takenPrefix) && isForThisRun(String($0.dropFirst(Daemon.takenPrefix.count))) }
        func mtime(_ name: String) -> Int {
            var st = stat()
            return lstat(control + "/" + name, &st) == 0 ? Daemon.mtime(st) : 0
        }
        for (name, _) in taken.map({ ($0, mtime($0)) }).sorted(by: { ($0.1, $0.0) < ($1.1, $1.0) }) {
            let original = String(name.dropFirst(Daemon.takenPrefix.count))
            let id = original.lastIndex(of: ".").map { String(original[..<$0]) } ?? original
            guard !original.hasPrefix("."), RequestValidator.isValidID(id) else {
                reject(path: control + "/" + name, name: String(name.dropFirst()), reason: "\(name) is no control file TileSpool took (its name holds no valid region id)")
                continue
            }
            guard regions[id] != nil || status.read(id: id) != nil || (!store.isShared && store.regionExists(id)) else {
                if original.hasSuffix(".delete") {
                    Log.info("\(original), taken before the daemon stopped, names region '\(id)', which is gone: the delete was applied; removed", [("file", original)])
                    Files.remove(control + "/" + name)
                } else {
                    reject(path: control + "/" + name, name: String(name.dropFirst()), reason: "\(name) names region '\(id)', which does not exist: TileSpool takes a control file only for a region it has, so it did not make this one")
                }
                continue
            }
            // A file of the same name dropped since is the newer word: the taken one goes.
            guard let dir = try? Directory(path: control, followFinal: false), (try? dir.rename(name, to: dir, original, mode: .noReplace)) != nil else {
                Files.remove(control + "/" + name)
                continue
            }
            Log.info("applying \(original) again: it was taken before the daemon stopped", [("file", original)])
            handleControl(path: control + "/" + original, name: original)
        }
    }

    /// The `maxAge` a refresh control file asks for: empty content (all resources), or a JSON
    /// object `{"maxAge": SECONDS}` (a number >= 0, or null), as `tilespool refresh --max-age` writes.
    static func refreshMaxAge(_ path: String) -> Result<Double?, RegionError> {
        let bad = RegionError(code: .invalidRequest, message: "a refresh control file is empty or holds {\"maxAge\": SECONDS} (a number >= 0)")
        guard let data = try? Files.readRegularFile(path, limit: 4096) else { return .failure(bad) }
        if data.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) { return .success(nil) }
        let parsed: Any
        do { parsed = try JSONKind.parse(data, uniqueKeys: true) } catch {
            return .failure(RegionError(code: .invalidRequest, message: "the refresh control file is \(error.message); it is empty or holds {\"maxAge\": SECONDS}"))
        }
        guard let o = parsed as? [String: Any], Set(o.keys).isSubset(of: ["maxAge"]) else { return .failure(bad) }
        guard let v = o["maxAge"], !(v is NSNull) else { return .success(nil) }
        guard let n = JSONKind.number(v), n >= 0, n.isFinite else { return .failure(bad) }
        return .success(n)
    }

    /// Applies a user action through the state machine.
    /// `maxAge` (seconds) goes with a `refresh`: only resources fetched that long ago are checked.
    func apply(_ action: RegionAction, to r: Region, maxAge: Double? = nil) {
        finishCommit() // the region's state after the batch at the writer, not before
        if action == .resume, r.state == .completed, !r.refreshing, r.progress.tilesFailed > 0 {
            // A region completed with failed tiles (maxFailedTiles): a pass that asks exactly those again.
            beginRefresh(r, scope: .failedTiles, note: "resume: retrying \(r.progress.tilesFailed) failed tiles")
            return
        }
        switch RegionStateMachine.apply(action, to: r.state, refreshing: r.refreshing) {
        case .ignored(let why):
            Log.info("\(action.rawValue) ignored: \(why)", region: r.id, state: r.state.rawValue, [("action", action.rawValue)])
            status.event(StatusEvent(id: r.id, state: r.state.rawValue, error: r.error, action: action.rawValue, ignored: why))
        case .delete:
            stopDownload(r, commitPending: false)
            regions.removeValue(forKey: r.id)
            live.removeValue(forKey: r.id)
            r.files.remove()
            status.remove(id: r.id)
            status.event(StatusEvent(id: r.id, state: "deleted", action: "delete"))
            Log.info("deleted", region: r.id, state: "deleted")
            runHook(id: r.id, state: "deleted", previous: r.state.rawValue)
            ops.uniqueWanted = true
        case .beginRefresh:
            beginRefresh(r, scope: maxAge.map { .olderThan($0) } ?? .all, note: action.rawValue)
        case .abandonRefresh:
            r.error = nil
            abandonRefresh(r, "cancelled")
        case .swapRefresh:
            break // only an event (`finish`) swaps a refresh in
        case .to(let next):
            stopDownload(r, keepReceived: true)
            // Space was freed, or so the user says: the quota's count of the store is taken again.
            if action == .resume && r.state == .failedStorage { store.recountBeforeNextRefusal() }
            if next == .queued { r.error = nil; r.probeURL = nil }
            setState(r, next, note: action.rawValue)
        }
    }
}

/// A `tiles` request read and valid, whose plan is being made off the loop before it is taken
/// or refused (`Daemon.planOnArrival`, `collectArrivals`).
final class Arrival {
    /// The request file's path in requests/ and its name.
    let path: String
    let name: String
    /// The file's bytes as read, and the request they hold.
    let raw: Data
    let request: RegionRequest
    /// The file as it was when read: one changed since is read again.
    let file: FileVersion
    /// Stops the plan when the daemon stops (the file stays for the next start), or when the
    /// file changes (`changed`: it is read again).
    let cancel = PlanCancellation()
    /// The file changed (or went) while its plan was made, and the plan was cancelled for it.
    var changed = false

    init(path: String, name: String, raw: Data, request: RegionRequest, file: FileVersion) {
        self.path = path; self.name = name; self.raw = raw; self.request = request; self.file = file
    }
}

/// The plan made for an `Arrival` (`Daemon.planOnArrival`), posted from the plan queue.
struct ArrivalPlan: Sendable {
    /// Which arrival it is for (`ObjectIdentifier` of the `Arrival`).
    let arrival: ObjectIdentifier
    let result: Result<ResourcePlan, RegionError>
    /// The daemon stopped while it was made: dropped.
    let cancelled: Bool
}
