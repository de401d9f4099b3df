// A region's download: resuming from the plan and manifest, planning once the style and every
// TileJSON are known, what to fetch next, and what each HTTP result does (store, retry, pause
// for the network, fail). "What happens to a 304" and every other answer is in `handle`.
import Foundation
import Glibc
import TileSpoolCore
import TileSpoolIO

extension Daemon {
    /// Starts (or resumes) a queued region: reads its plan and manifest back, so nothing already
    /// recorded is fetched again and progress starts from the stored counts. A refresh works the
    /// same way on the files in `refresh/`, with the pack's manifest lines as `previous`.
    func start(_ r: Region) {
        // Packs cut short or removed since are not relied on, and objects other daemons on a
        // bucket stored by now are found, not stored again.
        do { try store.refreshIndex() } catch {
            Log.warning("cannot read the store's index again (\(error)); objects stored since by other daemons may be stored again", region: r.id)
        }
        let d = Download(files: r.refreshing ? r.files.refreshStorage : r.files)
        var previousReadError: Error?
        if r.refreshing {
            var previous: [String: ManifestLine] = [:]
            r.files.readManifest { previous["\($0.kind.rawValue)\t\($0.key)"] = $0 }
            // The pack's manifest not read in full: a refresh would ask everything unconditionally.
            previousReadError = r.files.readFailure
            d.previous = previous
            d.scope = r.files.refreshUnderWay() ?? .all
        }
        r.download = d
        r.error = nil
        if case .style(let url) = r.request.source { d.styleURL = url }
        var lines: [ManifestLine] = []
        var journalError: Error?
        var savedPlan = d.files.loadPlan()
        var readError = previousReadError ?? d.files.readFailure // a store that did not answer: what was read is incomplete
        var overLimit: RegionError?
        var archivesPending = false
        if savedPlan == nil, case .tiles(let templates) = r.request.source {
            // A tiles plan needs no document: made again (plan.json lost to a power cut, say),
            // here on the loop, so that the progress the status shows is recounted with it (a
            // rare path: the plan is saved when the request is taken). With a PMTiles archive,
            // its directories are read first, off the loop (`readArchives`); the plan is made
            // when they are in (`makePlan`).
            if let archives = readArchives(r, d, style: nil) {
                do throws(RegionError) {
                    let plan = try Planner.plan(request: r.request, templates: templates, archives: archives, limits: tileLimits(r.request))
                    try? d.files.savePlan(plan)
                    savedPlan = plan
                } catch {
                    overLimit = error
                }
            } else {
                archivesPending = true
            }
        }
        // A plan over the limits (`--max-tiles` lowered since, or a count that overflows) is not
        // read back: its bitmap alone could exhaust memory. The region fails below.
        overLimit = overLimit ?? savedPlan.flatMap { tileLimitError(r.request, $0) }
        if overLimit != nil {
            savedPlan = nil
        } else if let plan = savedPlan {
            d.plan = plan
            r.progress = recount(plan, d.files, d)
            journalError = recoverJournal(r, d, plan)
        } else {
            d.files.readManifest(cutPartialLine: true) { lines.append($0) }
            var p = RegionProgress()
            // Each document once (a style fetched again after a crash has two lines): the recount
            // once the plan exists must not come out lower.
            var seen = Set<String>()
            for l in lines where (l.kind == .style || l.kind == .source) && seen.insert("\(l.kind.rawValue)\t\(l.key)").inserted {
                count(l, d, into: &p)
            }
            p.resourcesExpected = max(p.resourcesExpected, 1) // at least the style
            r.progress = p
        }
        readError = readError ?? d.files.readFailure
        switch RegionStateMachine.apply(.start, to: r.state, refreshing: r.refreshing) {
        case .to(let next): setState(r, next)
        default: return
        }
        if let e = readError ?? journalError { storageFailed(r, e, commitPending: false); return }
        if let e = overLimit { fail(r, e); return }
        if d.plan == nil && !archivesPending { resumePrePlan(r, d, lines: lines) }
        if let plan = d.plan, r.state == .downloading {
            if let e = tileLimitError(r.request, plan) { fail(r, e); return }
            finishIfDone(r, d)
        }
    }

    /// Before the plan exists: works out which of the style and TileJSON documents are still
    /// needed, using the copies already in the store.
    func resumePrePlan(_ r: Region, _ d: Download, lines: [ManifestLine]) {
        for l in lines {
            guard let sha = l.sha256, let data = try? store.read(sha, limit: 64 << 20) else { continue }
            if l.kind == .style, d.style == nil {
                d.style = try? StyleDocument(data: data, baseURL: d.styleURL)
            }
        }
        guard let style = d.style else { d.needed = [.style]; r.progress.resourcesExpected = max(r.progress.resourcesExpected, 1); return }
        if let e = TileUsagePolicy.refusal(style: style, allowedHosts: options.allowedHosts) { refuseLate(r, e); return }
        let urls = Planner.tileJSONURLs(style)
        for l in lines where l.kind == .source {
            guard let sha = l.sha256, let data = try? store.read(sha, limit: 64 << 20),
                  let u = urls.first(where: { $0.source == l.key }) else { continue }
            d.tileJSONs[l.key] = try? TileJSON(data: data, baseURL: u.url)
        }
        d.needed = urls.filter { d.tileJSONs[$0.source] == nil }.map { .tileJSON($0.source) }
        r.progress.resourcesExpected = max(r.progress.resourcesExpected, 1 + urls.count)
        if d.needed.isEmpty { makePlan(r, d) }
    }

    /// Builds the exact plan once the style and every TileJSON are known, or a `tiles` request's
    /// once its PMTiles archives are read, off the loop (`planQueue`); `collectPlans` takes it and
    /// goes on (`planned`). Until then the download asks nothing more, as while its archives are
    /// read.
    func makePlan(_ r: Region, _ d: Download) {
        guard !d.planning, d.plan == nil else { return }
        let style = d.style
        if case .style = r.request.source, style == nil { return }
        // PMTiles sources: their directories are read off the loop first; this runs again when
        // they are in (`collectArchiveReads`).
        guard let archives = readArchives(r, d, style: style) else { return }
        d.planning = true
        Log.info("making the plan", region: r.id, state: r.state.rawValue)
        let request = r.request, styleURL = d.styleURL, tileJSONs = d.tileJSONs, limits = tileLimits(r.request)
        let id = r.id, token = d.serial, mailbox = planMailbox, writer = self.writer, cancel = d.planCancel
        planQueue.async {
            // A plan whose download stopped before its turn is not begun.
            let result = cancel.isCancelled ? .failure(PlanCancellation.error) : Result { () throws(RegionError) in
                if case .tiles(let templates) = request.source {
                    try Planner.plan(request: request, templates: templates, archives: archives, limits: limits, cancel: cancel)
                } else {
                    // A style request gets here only with its style (the guard above).
                    try Planner.plan(request: request, styleURL: styleURL, style: style!, tileJSONs: tileJSONs, archives: archives,
                                     limits: limits, cancel: cancel)
                }
            }
            mailbox.post(PlanResult(id: id, token: token, result: result, cancelled: cancel.isCancelled))
            writer.wake()
        }
    }

    /// Takes the plans made off the loop (`makePlan`) and goes on with their regions. A plan made
    /// for a download stopped since (paused, cancelled, deleted, replaced) is dropped: its next
    /// start plans again.
    func collectPlans() {
        for made in planMailbox.take() {
            if made.cancelled {
                Log.info("the plan of a stopped download was cancelled", region: made.id)
                continue
            }
            guard let r = regions[made.id], let d = r.download, d.serial == made.token, d.planning, r.state == .downloading else { continue }
            d.planning = false
            switch made.result {
            case .failure(let error):
                if r.request.isTiles || error.code != .tileLimitExceeded && error.code != .policyRefused { fail(r, error); continue }
                refuseLate(r, error) // a shape over the planning budget: refused like a bad request
            case .success(let plan):
                planned(r, d, plan)
            }
        }
    }

    /// A plan is made (`collectPlans`): checked against the tile usage policies and the tile
    /// limit, saved, and counted from what the manifest (and for a `tiles` request, whose plan is
    /// made here only as the download starts, the journal) holds. A style's refusal is written
    /// to rejected/ (`refuseLate`); a `tiles` request's was checked on arrival, so it just fails.
    func planned(_ r: Region, _ d: Download, _ plan: ResourcePlan) {
        // A style's tile servers, sprites, glyphs and data are known only now: one on a listed
        // host is refused before anything is asked of it.
        let policy = TileUsagePolicy.refusal(plan: plan, allowedHosts: options.allowedHosts)
        if let e = policy ?? tileLimitError(r.request, plan) { if r.request.isTiles { fail(r, e) } else { refuseLate(r, e) }; return }
        do { try d.files.savePlan(plan) } catch { storageFailed(r, error); return }
        d.plan = plan
        r.progress = recount(plan, d.files, d)
        if r.request.isTiles, let e = recoverJournal(r, d, plan) { storageFailed(r, e, commitPending: false); return }
        r.statusDirty = true
        Log.info("planned \(plan.count) resources (\(plan.tileCount) tiles)", region: r.id, state: r.state.rawValue, [("resources", plan.count), ("tiles", plan.tileCount)])
        finishIfDone(r, d)
    }

    /// Fails `r` with `e`, known only once its style or plan is (a tile usage policy, the tile
    /// limit): the request is refused like a bad file, as a copy of the accepted request in
    /// rejected/ with the reason beside it (the region stays, so a resume can retry it).
    func refuseLate(_ r: Region, _ e: RegionError) {
        let e = shown(e, r) // a policy refusal names a URL from the style
        if let data = try? r.files.requestData() {
            let rejected = try? Directory(path: layout.rejected, followFinal: false)
            _ = try? rejected?.writeAtomically(data, to: "\(r.id).json")
            _ = try? rejected?.writeAtomically(Data(TerminalText.safe("\(e.code.rawValue): \(e.message)\n").utf8), to: "\(r.id).json.error")
        }
        fail(r, e)
    }

    /// The error when `plan` has more tiles than `request`'s `maxTiles` or the daemon's
    /// `--max-tiles` allow (naming the limit that applies), or nil. A `tiles` request over the
    /// limit is refused on arrival (`decide`); a style's plan is known only in `makePlan`,
    /// and a region resumed after `--max-tiles` was lowered is checked again in `start`.
    func tileLimitError(_ request: RegionRequest, _ plan: ResourcePlan) -> RegionError? {
        RequestValidator.tileLimitError(tiles: plan.tileCount, maxTiles: request.maxTiles, daemonMaxTiles: options.maxTiles)
    }

    /// The tile limits `request`'s plan is held to (`tileLimitError`), for the planner to stop
    /// counting a shape's tiles once past them.
    func tileLimits(_ request: RegionRequest) -> RequestValidator.TileLimits {
        RequestValidator.TileLimits(maxTiles: request.maxTiles, daemonMaxTiles: options.maxTiles)
    }

    /// Issues requests for a downloading region up to its limit.
    func fill(_ r: Region, _ d: Download, now: Double) {
        guard now >= d.holdUntil else { return }
        if d.holdUntil > 0 { d.holdUntil = 0; r.statusDirty = true } // `throttledUntil` leaves the status
        d.rateWaitUntil = 0 // set again below if a rate limit holds a request back
        // Retries that are due.
        if !d.retries.isEmpty {
            var keep: [(due: Double, item: WorkItem)] = []
            for x in d.retries {
                if !(x.due <= now && d.inFlight.count < options.maxRequestsPerRegion && issue(r, d, x.item, now: now)) { keep.append(x) }
            }
            d.retries = keep
        }
        guard let plan = d.plan else {
            while d.inFlight.count < options.maxRequestsPerRegion, let item = d.needed.first {
                d.needed.removeFirst()
                if keepIfFresh(r, d, item) { guard r.download === d else { return }; continue }
                guard issue(r, d, item, now: now) else { d.needed.insert(item, at: 0); break }
            }
            return
        }
        if d.archiveRanges == nil && plan.tileSets.contains(where: { $0.archive != nil }) {
            buildArchiveRanges(r, d, plan)
            guard r.download === d, r.state == .downloading else { return }
        }
        defer { fillRanges(r, d, plan, now: now) }
        let indexSpace = plan.indexSpace // a sum over every rectangle: once, not per index
        while d.inFlight.count < options.maxRequestsPerRegion && d.cursor < indexSpace {
            let i = d.cursor
            if let span = d.archiveSpans.first(where: { $0.contains(i) }) { d.cursor = span.upperBound; continue }
            if d.done[i] { d.cursor += 1; continue }
            let unplanned = d.unplannedRun(i, plan)
            if unplanned > 0 { d.cursor += unplanned; continue }
            if d.keepsSomeLines && keepIfFresh(r, d, .index(i)) { d.cursor += 1; continue }
            // Phases run in order: no tile before every other resource is finished.
            if i >= plan.resources.count && (d.nonTileInFlight > 0 || d.retries.contains(where: { if case .index(let j) = $0.item { return j < plan.resources.count }; return false })) {
                break
            }
            guard issue(r, d, .index(i), now: now) else { break }
            d.cursor += 1
        }
    }

    /// What a work item fetches and how the manifest names it, from one look-up in the plan.
    func describe(_ item: WorkItem, _ d: Download) -> (url: String, kind: ResourceKind, key: String) {
        switch item {
        case .style: return (d.styleURL, .style, "style")
        case .tileJSON(let name):
            return (d.style?.sources.first { $0.name == name }?.tileJSONURL ?? "", .source, ManifestLine.sanitizeKey(name))
        case .range(let n):
            let range = d.archiveRanges![n]
            return (d.plan!.tileSets[range.set].archive?.url ?? "", .tile, "range \(range.start)-\(range.end - 1)")
        case .index(let i):
            switch d.plan!.item(at: i) {
            case .resource(let res): return (res.url, res.kind, res.key)
            case .tile(let s, let t):
                let set = d.plan!.tileSets[s]
                return (set.template.url(for: t), .tile, ManifestLine.tileKey(source: set.source, t))
            }
        }
    }

    /// During a refresh that keeps some lines: records the pack's line for `item` again without
    /// asking the server when it is not due (`Refresh.isDue`). True when it did.
    func keepIfFresh(_ r: Region, _ d: Download, _ item: WorkItem) -> Bool {
        guard d.keepsSomeLines, let scope = d.scope else { return false }
        let (url, kind, key) = describe(item, d)
        guard let prev = d.previousLine(kind, key), !Refresh.isDue(prev, scope: scope, now: Date().timeIntervalSince1970) else { return false }
        if case .index = item {
            addPending(d, item, prev)
        } else {
            // A style or TileJSON document: parsed from the stored copy, as after a 304.
            guard let sha = prev.sha256, let body = try? store.read(sha, limit: 64 << 20) else { return false }
            received(r, d, item, prev, url: url, body: body)
        }
        return true
    }

    /// Starts the transfer of `item`: a conditional GET during a refresh when the pack's line has
    /// validators (which header: `ConditionalRequest.headers(for:)`, applied by `HTTPClient.start`
    /// on either download loop). False when a rate limit holds it back: nothing started, and
    /// `d.rateWaitUntil` says when to ask again.
    func issue(_ r: Region, _ d: Download, _ item: WorkItem, now: Double) -> Bool {
        if case .range(let n) = item { return issueRange(r, d, n, now: now) }
        let (url, kind, key) = describe(item, d)
        if !admitted(r, d, url: url, now: now) { return false }
        d.lastIssued = now
        let tag = nextTag; nextTag += 1
        let conditional = d.previousLine(kind, key)?.freshness
        d.inFlight[tag] = Fetch(item: item, url: url, kind: kind, key: key,
                                conditional: !ConditionalRequest.headers(for: conditional).isEmpty)
        if kind != .tile { d.nonTileInFlight += 1 }
        transfers[tag] = (r.id, item)
        http.start(url: url, tag: tag, validators: conditional, headers: r.request.headerList)
        return true
    }

    /// Stops transfer `tag`.
    func cancelTransfer(_ tag: Int) { http.cancel(tag: tag) }

    /// True when the rate limits let a request to `url` start now (the limiter is debited);
    /// false sets `d.rateWaitUntil` to when to ask again.
    func admitted(_ r: Region, _ d: Download, url: String, now: Double) -> Bool {
        let host = RateLimiter.host(of: url)
        let regionLimit = r.request.maxRequestsPerSecond
        if regionLimit == nil {
            if host == lastHost.host { if lastHost.unlimited { return true } } else {
                lastHost = (host, limiter.isUnlimited(host: host))
                if lastHost.unlimited { return true }
            }
        }
        let wait = limiter.admit(host: host, region: r.id, regionLimit: regionLimit, now: now)
        if wait > 0 { d.rateWaitUntil = now + wait; return false }
        return true
    }

    /// Stops a region's transfers; by default objects already written enter the manifest first.
    /// With `keepReceived` (a pause, the daemon stopping, the network lost: the region will go
    /// on), the whole tiles its range requests had received are stored and recorded with them
    /// (`keepRangesReceived`).
    func stopDownload(_ r: Region, commitPending: Bool = true, keepReceived: Bool = false) {
        // A directory read under way gives up at once (its answer is for this download, which
        // stops): a server stalling it no longer holds the next start until --low-speed-time.
        archiveReadClients[r.id]?.abandon()
        r.download?.planCancel.cancel() // a plan being made for it stops (`makePlan`)
        finishCommit() // no batch at the writer still appends to this region's files
        if r.probing {
            for (tag, v) in transfers where v.0 == r.id && v.1 == nil { cancelTransfer(tag); transfers.removeValue(forKey: tag) }
            r.probing = false
        }
        guard let d = r.download else { return }
        if keepReceived && commitPending { keepRangesReceived(r, d) }
        for tag in d.inFlight.keys { cancelTransfer(tag); transfers.removeValue(forKey: tag) }
        d.inFlight.removeAll()
        // Answers being cut are still held until their cut comes back (`rangeBytesHeld`).
        if let ranges = d.archiveRanges {
            for n in d.rangesCutting { strayCuts[StrayCut(region: r.id, serial: d.serial, range: n)] = max(ranges[n].length, d.wholeCuts[n] ?? 0) }
        }
        if commitPending {
            commitAndWait()
        } else {
            pendingCount -= d.pending.count
            d.pending.removeAll()
            d.pendingText.removeAll()
            d.pendingEnds.removeAll()
            d.journaled = 0
            d.journaledLines = 0
        }
        r.download = nil
        d.files.closeManifest()
        limiter.forgetPast(now: Daemon.now())
    }

    /// One answer to a transfer: the facts gathered (`AnswerFacts`), the decision made by the
    /// pure `AnswerDecision.decide` (every answer class: AnswerDecisionTests), and applied here:
    /// store and record, retry (holding the region for a `Retry-After`), revalidate a 304, fail
    /// the tile or the region, pause for the network. A probe's answer goes to `probeAnswered`;
    /// a PMTiles range request's to `handleRange` (`AnswerDecision.decideRange`).
    func handle(_ res: TransferResult) {
        countRequest(res)
        // A range request's bytes were counted when it was issued (`issueRange`: its size is known).
        if limiter.bytesPerSecond != nil, transfers[res.tag]?.1?.isRange != true {
            limiter.received(bytes: res.body.count, now: Daemon.now())
        }
        guard let (id, item) = transfers.removeValue(forKey: res.tag), let r = regions[id] else { return }
        guard let item else { probeAnswered(r, res); return }
        guard let d = r.download, let fetch = d.inFlight.removeValue(forKey: res.tag) else { return }
        let (url, kind, key) = (fetch.url, fetch.kind, fetch.key)
        if kind != .tile { d.nonTileInFlight -= 1 }
        if case .range(let n) = item { handleRange(r, d, res, fetch, n); return }

        // Only a 304 keeps the previous line: looked up for it alone (a string key per look-up).
        let prev = res.notModified ? d.previousLine(kind, key) : nil
        let facts = AnswerFacts(url: url, secrets: r.secrets, kind: kind, failure: res.failure.map(AnswerFacts.Failure.init),
                                status: res.status, body: res.body, contentType: res.contentType, retryAfter: res.retryAfter,
                                notModified: res.notModified, conditional: fetch.conditional, hasPreviousLine: prev != nil,
                                emptyStatuses: r.request.emptyStatuses)
        switch AnswerDecision.decide(facts) {
        case .fail(let f):
            failed(r, d, item, fetch, f)
        case .retry(let x):
            if let log = x.log { Log.error(log, region: r.id, state: r.state.rawValue, url: shown(url, r)) }
            if let hold = x.holdFor {
                d.holdUntil = max(d.holdUntil, Daemon.now() + hold)
                r.statusDirty = true // the status shows `throttledUntil`
            }
            retry(r, d, item, after: x.after, exhausted: { self.failed(r, d, item, fetch, x.exhausted) })
        case .revalidated:
            // The pack's object is current; only its validators and fetch time change.
            guard let prev else { return } // `decide` revalidates only with a previous line
            d.attempts.removeValue(forKey: item)
            var line = Refresh.revalidated(prev, url: r.secrets.replaced(in: url), response: res.freshness)
            if let etag = line.freshness.etag, quotesSecret(etag, r) { line.freshness.etag = nil }
            if case .index = item {
                addPending(d, item, line)
                return
            }
            guard let sha = prev.sha256, let body = try? store.read(sha, limit: 64 << 20) else {
                fail(r, RegionError(code: .storeDamaged, message: "the stored copy of \(shown(url, r)) is missing: run tilespool verify", url: shown(url, r)))
                return
            }
            received(r, d, item, line, url: url, body: body)
        case .record(let what):
            d.attempts.removeValue(forKey: item)
            var sha: String?
            if what == .body {
                do { sha = try store.put(res.body).sha256 } catch { storageFailed(r, error); return }
            }
            var freshness = res.freshness
            if let etag = freshness.etag, quotesSecret(etag, r) { freshness.etag = nil }
            let line = ManifestLine(kind: kind, sha256: sha, bytes: sha == nil ? 0 : res.body.count, key: key, url: r.secrets.replaced(in: url),
                                    freshness: freshness)
            if case .index = item {
                addPending(d, item, line)
                return
            }
            received(r, d, item, line, url: url, body: res.body)
        }
    }

    /// Applies a failure `decide` chose, now or once retries ran out: the region fails, the
    /// resource fails (`failTile`: within `maxFailedTiles` for a tile), or the region pauses
    /// for the network, probing the URL asked.
    func failed(_ r: Region, _ d: Download, _ item: WorkItem, _ fetch: Fetch, _ f: AnswerDecision.Failure) {
        switch f {
        case .region(let e): fail(r, e)
        case .resource(let e): failTile(r, d, item, fetch, e)
        case .networkLost(let why): networkLost(r, url: fetch.url, why: why)
        }
    }

    /// A tile's last attempt failed with `e`: within the request's `maxFailedTiles` the tile is
    /// recorded as failed (manifest sha256 `!`, counted in `tilesFailed`) and the region goes on;
    /// otherwise (not a tile, no budget, or the budget used up) the region fails with `e`, the
    /// message then naming the budget, and `failed.tsv` lists the tiles that failed.
    func failTile(_ r: Region, _ d: Download, _ item: WorkItem, _ fetch: Fetch, _ e: RegionError) {
        let budget = r.request.maxFailedTiles
        guard fetch.kind == .tile, case .index = item, budget > 0 else { fail(r, e); return }
        // Counted ones, plus those waiting for a commit or in the batch at the writer thread.
        let atWriter = commitInFlight?.owners.first { $0.1 === d }?.2.filter { $0.line.failed }.count ?? 0
        let failedSoFar = r.progress.tilesFailed + d.pending.filter { $0.line.failed }.count + atWriter
        if failedSoFar >= budget {
            var over = e
            // A refresh that fails this way is abandoned (the pack stays as it was): no failed.tsv.
            over.message = AnswerDecision.overBudgetMessage(e.message, failed: failedSoFar, budget: budget, refreshing: r.refreshing)
            // failed.tsv is written before the status says `failed` (a script reads it then): the
            // download is stopped first, which records the failed tiles still waiting.
            if !r.refreshing { stopDownload(r, keepReceived: true); writeFailedList(r, d) }
            fail(r, over)
            return
        }
        d.attempts.removeValue(forKey: item)
        var line = ManifestLine(kind: .tile, sha256: nil, bytes: 0, key: fetch.key, url: r.secrets.replaced(in: fetch.url))
        line.failed = true
        d.failureReasons[fetch.key] = "\(e.code.rawValue): \(e.message)"
        Log.error("\(r.id): tile \(fetch.key) failed (\(failedSoFar + 1) of at most \(budget)): \(e.message)")
        addPending(d, item, line)
    }

    /// Writes `<store>/regions/<id>/failed.tsv` from the manifest `d` wrote: one line per tile
    /// recorded as failed, `key <TAB> url <TAB> error` (URL redacted; error `code: message`, or
    /// `-` when it failed before a daemon restart), after a `#` header; removed when none failed.
    func writeFailedList(_ r: Region, _ d: Download) { writeFailedList(r, files: d.files, reasons: d.failureReasons) }

    /// `writeFailedList` from the manifest in `files`, with the reasons known by key.
    func writeFailedList(_ r: Region, files: any RegionStorage, reasons: [String: String]) {
        var text = ""
        // The progress counts failed tiles: with none, no need to read the whole manifest again.
        if r.progress.tilesFailed > 0 { files.readManifest { l in
            guard l.failed else { return }
            text += [l.key, shown(l.url, r), reasons[l.key] ?? "-"].map(TSV.field).joined(separator: "\t") + "\n"
        } }
        do { try r.files.saveFailedList(text.isEmpty ? nil : "# key\turl\terror\n" + text) } catch {
            Log.error("\(r.id): cannot write failed.tsv: \(error)")
        }
    }

    /// A style or TileJSON document arrived (or was found current in the store during a refresh):
    /// parsed, recorded at once, and the plan made once every document is in.
    /// `url` is the URL asked (credentials kept: relative URLs in the document resolve against it).
    func received(_ r: Region, _ d: Download, _ item: WorkItem, _ line: ManifestLine, url: String, body: Data) {
        switch item {
        case .style:
            do { d.style = try StyleDocument(data: body, baseURL: url) } catch { fail(r, quoted(error, r, url: url)); return }
            // Its TileJSON documents are fetched next: one on a listed host is refused first.
            if let e = TileUsagePolicy.refusal(style: d.style!, allowedHosts: options.allowedHosts) { refuseLate(r, e); return }
            d.needed = Planner.tileJSONURLs(d.style!).map { .tileJSON($0.source) }
            commitNow(r, d, item, line)
            guard r.download === d else { return } // the commit failed the region
            r.progress.resourcesExpected = max(r.progress.resourcesExpected, 1 + d.needed.count)
            if d.needed.isEmpty { makePlan(r, d) }
        case .tileJSON(let name):
            do { d.tileJSONs[name] = try TileJSON(data: body, baseURL: url) } catch { fail(r, quoted(error, r, url: url)); return }
            commitNow(r, d, item, line)
            guard r.download === d else { return }
            if d.inFlight.isEmpty && d.needed.isEmpty && d.retries.isEmpty { makePlan(r, d) }
        case .index, .range:
            break
        }
    }

    /// `text`, which comes from a server's answer about `url` or quotes one (a body's first
    /// bytes, a Content-Type, a Location, a style's own words), as it may be quoted in a status,
    /// an event, a log line or failed.tsv: the request's secrets and those of `url` replaced
    /// wherever they appear, credentials in URL form redacted (`Redaction.redactEmbedded`).
    func quoted(_ text: String, _ r: Region, url: String) -> String {
        Redaction.redactEmbedded(text, secrets: r.secrets.adding(url: url))
    }

    /// `url` (one the plan fetches: from the request, a style or a TileJSON) as a message, an
    /// event, a log line or `failed.tsv` shows it: the request's secrets replaced wherever they
    /// appear (a server may echo them into the URLs of the documents it sends) and credentials
    /// in URL form redacted (`Redaction.redact(_:secrets:)`). The manifest's URL column records
    /// `r.secrets.replaced(in: url)`, which its writer then redacts. Only the text shown: the
    /// server is asked the URL as it is.
    func shown(_ url: String, _ r: Region) -> String {
        Redaction.redact(url, secrets: r.secrets)
    }

    /// `e` with the request's secrets replaced in its message and its URL: what `fail` and
    /// `refuseLate` record, whatever built the error (a tile usage policy names a URL from the
    /// style as it is). Free when the request has no secrets.
    func shown(_ e: RegionError, _ r: Region) -> RegionError {
        let secrets = r.secrets
        if secrets.isEmpty { return e }
        var e = e
        e.message = secrets.replaced(in: e.message)
        e.url = e.url.map { secrets.replaced(in: $0) }
        return e
    }

    /// True when `text` (an ETag the server sent) quotes one of the request's secrets
    /// (`Region.secrets`, in any of their forms) or carries a credential in URL form
    /// (`Redaction.redactEmbedded` would change it): such an ETag is not kept, since the manifest
    /// would show it, and the resource is recorded as having none. Cheap when there are no
    /// secrets (the usual case) and the ETag has no `=` or `@`.
    func quotesSecret(_ text: String, _ r: Region) -> Bool {
        Redaction.redactEmbedded(text, secrets: r.secrets) != text
    }

    /// `e` with its message and URL `quoted`.
    func quoted(_ e: RegionError, _ r: Region, url: String) -> RegionError {
        var e = e
        e.message = quoted(e.message, r, url: url)
        e.url = e.url.map { quoted($0, r, url: url) }
        return e
    }

    /// The longest `Retry-After` honoured, in seconds (1 hour); a longer one is cut to it
    /// (`HTTPClient` reports at most this already, an overflowing number as this).
    static let maxRetryAfter = RetryAfter.maximum

    /// The most body bytes a probe of a `pausedNetwork` region takes (64 KiB): any answer says
    /// the server is back, so a longer body is cut there (an answer all the same).
    static let probeBodyLimit = 64 << 10

    /// Schedules another attempt with capped exponential backoff (or the server's Retry-After), or
    /// calls `exhausted` when the attempts are used up.
    func retry(_ r: Region, _ d: Download, _ item: WorkItem, after: Double?, exhausted: () -> Void) {
        let n = (d.attempts[item] ?? 0) + 1
        d.attempts[item] = n
        if n > options.maxRetries { exhausted(); return }
        ops.retries += 1
        let backoff = min(options.retryDelay * pow(2, Double(n - 1)), options.maxRetryDelay)
        let delay = max(after.map { min($0, Daemon.maxRetryAfter) } ?? 0, backoff * Double.random(in: 0.75...1.0))
        d.retries.append((Daemon.now() + delay, item))
    }

    /// The server of `url` does not answer: the region becomes `pausedNetwork` and probes `url`
    /// with a growing gap until it answers (`archive`: `url` is a PMTiles archive, whose probe
    /// asks for one byte). Objects already written enter the manifest first when `commitPending`
    /// (not when the store itself is what does not answer).
    func networkLost(_ r: Region, url: String, why: String, commitPending: Bool = true, archive: Bool = false) {
        stopDownload(r, commitPending: commitPending, keepReceived: true)
        r.error = RegionError(code: .networkError, message: "\(why) (\(shown(url, r)))", url: shown(url, r))
        let next: RegionState
        switch RegionStateMachine.apply(.networkLost, to: r.state, refreshing: r.refreshing) {
        case .to(let s): next = s
        case .abandonRefresh: abandonRefresh(r, "failed"); return
        default: return
        }
        r.probeURL = url
        r.probeArchive = archive
        r.probeGap = max(0.5, min(options.retryDelay, options.maxProbeInterval))
        r.nextProbe = Daemon.now() + r.probeGap
        setState(r, next)
    }

    func probeAnswered(_ r: Region, _ res: TransferResult) {
        r.probing = false
        guard r.state == .pausedNetwork else { return }
        if case .network = res.failure {
            r.probeGap = max(0.5, min(r.probeGap * 2, options.maxProbeInterval))
            r.nextProbe = Daemon.now() + r.probeGap
            return
        }
        r.error = nil
        r.probeURL = nil
        switch RegionStateMachine.apply(.networkBack, to: r.state) {
        case .to(let next): setState(r, next, note: "server answers again")
        default: break
        }
    }

    /// A write to the store or the region's files failed: ENOSPC, EDQUOT, EROFS, EIO and EFBIG make
    /// the region `failedStorage` (resume once space is freed); any other error makes it `failed`
    /// with code `storageError`. Objects already written enter the manifest first when
    /// `commitPending` (not when the sync itself failed).
    func storageFailed(_ r: Region, _ error: Error, commitPending: Bool = true) {
        guard r.state == .downloading else { return }
        if let probe = store.networkProbeURL(for: error) {
            // The store does not answer (S3): the region waits as for a tile server that went away.
            networkLost(r, url: probe, why: "the store \(store.location) does not answer: \(error)", commitPending: commitPending)
            return
        }
        let sys = error as? SystemError
        stopDownload(r, commitPending: commitPending)
        r.error = RegionError(code: .storageError, message: r.files.shown(sys?.description ?? "\(error)"))
        if let sys, sys.operation == "quota", let q = store.maxBytes {
            r.error = RegionError(code: .storageError, message: "store quota reached: the next object would take the store past --max-store-bytes \(q) (the store holds \(store.usage?.bytes ?? 0) bytes); free space (delete regions, then gc) or raise the quota, then resume")
        }
        switch RegionStateMachine.apply(sys?.isStorageFailure == true ? .storageFailed : .fail, to: r.state, refreshing: r.refreshing) {
        case .abandonRefresh: abandonRefresh(r, "failed")
        case .to(let next): setState(r, next)
        default: break
        }
    }

    func finishIfDone(_ r: Region, _ d: Download) {
        guard let plan = d.plan, r.state == .downloading, d.inFlight.isEmpty, d.rangesCutting.isEmpty, d.pending.isEmpty, d.committing == 0, d.retries.isEmpty else { return }
        guard r.progress.resourcesCompleted >= plan.count else { return }
        // No tile with content at all: most often a wrong template (404 everywhere), never a
        // `completed` of 0 bytes unless the request says so (`allowEmpty`).
        let p = r.progress
        // (Empty or failed within maxFailedTiles alike: a template that answers 403 or a login
        // page everywhere, with a large budget, is as wrong as one that answers 404.)
        if plan.tileCount == 0 && !r.request.allowEmpty {
            // Only a PMTiles archive can plan no tile at all (its header's bounds or zooms, or
            // its directories, leave none in the region): a pack of nothing is not `completed`.
            fail(r, RegionError.emptyPlan)
            return
        }
        if plan.tileCount > 0 && p.tilesCompleted - p.tilesEmpty - p.tilesFailed <= 0 && !r.request.allowEmpty {
            let sample = plan.tileSets.first.map { set -> String in
                let t = set.rects.first.map { $0.tile(at: 0) }
                return t.map { " (e.g. \(shown(set.template.url(for: $0), r)))" } ?? ""
            } ?? ""
            let why = p.tilesFailed == 0 ? "was empty (\(r.request.emptyStatuses.map(String.init).joined(separator: ", ")) or an empty body)"
                : "was empty or failed (\(p.tilesEmpty) empty, \(p.tilesFailed) failed within maxFailedTiles; each failure and why in failed.tsv, the first: \(d.failureReasons.values.sorted().first.map { String($0.prefix(300)) } ?? "-"))"
            // The failed tiles are listed, as for a region completed with failures (attack
            // round 25: a region whose every range was refused said only "empty").
            if p.tilesFailed > 0 { writeFailedList(r, d) }
            fail(r, RegionError(code: .allTilesEmpty,
                                message: "no tile has content: every one of the \(plan.tileCount) tiles \(why)\(sample): check the tile URL template; if the area really has no tiles, add \"allowEmpty\": true to the request"))
            return
        }
        r.warnings.removeAll { $0.code == RegionWarning.sourceEmpty }
        for set in plan.tileSets where set.count > 0 && d.tilesWithContent[set.source, default: 0] == 0 {
            r.warnings.append(RegionWarning(code: RegionWarning.sourceEmpty,
                                            message: "source '\(set.source)': none of its \(set.count) tiles has content (each was empty: \(r.request.emptyStatuses.map(String.init).joined(separator: ", ")) or an empty body; or failed within maxFailedTiles)"))
        }
        r.download = nil
        d.files.closeManifest()
        let next: RegionState
        switch RegionStateMachine.apply(.finish, to: r.state, refreshing: r.refreshing) {
        case .to(let s): next = s
        case .swapRefresh: finishRefresh(r, d); return
        default: return
        }
        writeFailedList(r, d)
        setState(r, next)
        if next == .completed { compactionsWanted.append((r.id, r.files)) }
        ops.uniqueWanted = true
        if next == .completed { reconcileExports(r) }
    }

    // MARK: - Refresh

    /// Starts a refresh of a completed region (the state machine's `beginRefresh`): `refresh/` is
    /// made, and the region is queued with `r.refresh` set; `start` then downloads into `refresh/`
    /// with conditional requests.
    /// - Parameter scope: which resources are asked about again.
    func beginRefresh(_ r: Region, scope: RefreshScope, note: String) {
        do { try r.files.beginRefresh(scope: scope) } catch {
            Log.error("cannot start a refresh: \(error)", region: r.id)
            r.error = RegionError(code: .storageError, message: "cannot start a refresh: \(error)")
            setState(r, .completed, note: note, event: StatusEvent(refresh: "failed"), packUnchanged: true)
            return
        }
        r.refresh = RefreshRun(progressBefore: r.progress)
        r.error = nil
        r.lastRefreshStart = Daemon.now()
        setState(r, .queued, note: note, event: StatusEvent(refresh: "started", maxAge: scope.maxAge, failedTiles: scope == .failedTiles ? true : nil))
    }

    /// The refresh's manifest is complete: it replaces the pack's in one rename, the region is
    /// `completed` again, and the request's exports are written again when anything changed.
    func finishRefresh(_ r: Region, _ d: Download) {
        writeStatus(r) // the final counts, for a swap cut short and finished by the next start
        let versionBefore = r.files.packVersion()
        do { try r.files.commitRefresh() } catch {
            r.error = RegionError(code: .storageError, message: "cannot swap the refreshed manifest in: \(error)")
            abandonRefresh(r, "failed")
            return
        }
        r.refresh = nil
        writeFailedList(r, files: r.files, reasons: d.failureReasons)
        let p = r.progress
        // Resources that left the plan change the pack too.
        let changed = p.resourcesChanged > 0 || p.resourcesCompleted != (d.previous?.count ?? 0)
        setState(r, .completed, note: "refresh finished", event: .refreshFinished(p))
        // Exports follow the pack: rewritten when it changed; when it did not, the ones written
        // from it stay (their entries take the new version); missing ones (an export the re-drop
        // added) are written either way.
        if !changed { carryExportsOver(r, from: versionBefore) }
        reconcileExports(r)
    }

    /// Ends a refresh that will not complete (failed or cancelled): its files are dropped, the
    /// pack's progress is read back, and the region is `completed` again with `r.error` (nil for a
    /// cancel) in its status. The pack in use was never touched.
    func abandonRefresh(_ r: Region, _ why: String) {
        stopDownload(r, commitPending: false)
        r.files.abandonRefresh()
        // The counts as they were (the last refresh's tallies included); after a restart, read back.
        r.progress = r.refresh?.progressBefore ?? packProgress(r)
        r.refresh = nil
        setState(r, .completed, note: "refresh \(why)", event: StatusEvent(refresh: why), packUnchanged: true)
        reconcileExports(r) // a re-drop that added an export gets it even when its refresh fails
    }

    /// The progress of the region's pack as recorded (plan and manifest), for a completed region.
    func packProgress(_ r: Region) -> RegionProgress {
        guard let plan = r.files.loadPlan() else { return r.progress }
        return recount(plan, r.files, nil)
    }

    /// The progress of `plan` as the manifest in `files` records it: the plan's expected counts,
    /// and each planned resource counted once (a line for a resource the plan no longer has, or
    /// a second line for one, is skipped). The one recount: on `start`, once `makePlan` made the
    /// plan, and for a pack (`packProgress`).
    /// - Parameter d: the download the manifest belongs to, or nil for a pack read back: its
    ///   `done` bitmap becomes the resources counted, its `tilesWithContent` is counted afresh,
    ///   a partial last line is cut (a crash mid-append), and during a refresh each line is
    ///   tallied against the pack's (`count`).
    func recount(_ plan: ResourcePlan, _ files: any RegionStorage, _ d: Download?) -> RegionProgress {
        var p = RegionProgress()
        p.resourcesExpected = plan.count
        p.tilesExpected = plan.tileCount
        p.tileBytesExpected = plan.tileBytes
        p.resourcesExpectedIsPrecise = true
        var done = Bitmap(count: plan.indexSpace)
        let cover = d.map { $0.cover(plan) } ?? PlanCover(plan)
        d?.tilesWithContent = [:]
        files.readManifest(cutPartialLine: d != nil) { line in
            guard let i = plan.index(kind: line.kind, key: line.key, cover: cover), !done[i] else { return }
            done[i] = true
            count(line, d, into: &p)
        }
        d?.done = done
        return p
    }
}

extension AnswerFacts.Failure {
    /// The HTTP client's failure as the pure decision sees it (same case, same text).
    init(_ f: TransferFailure) {
        switch f {
        case .network(let t): self = .network(t)
        case .badResponse(let t): self = .badResponse(t)
        case .refused(let t): self = .refused(t)
        case .policyRefused(let t): self = .policyRefused(t)
        }
    }
}
