// PMTiles archive sources in the daemon (issue 31): the archive's directories read when the plan
// is made, then the tiles fetched as coalesced range requests, each cut into tiles off the loop
// (`RangeCutJob`, on `Daemon.cutQueue`) that enter the store and the manifest exactly as a tile
// fetched alone does (`store.put`, `addPending`).
import Foundation
import TileSpoolCore
import TileSpoolIO
import TileSpoolExport

/// One range request of a download: bytes `start..<end` of a tile set's archive, and the tiles
/// (plan index, where the body lies) it holds.
struct ArchiveRange {
    let set: Int
    let start: UInt64
    let end: UInt64
    let tiles: [(index: Int, tile: PMTiles.ArchiveTile)]
    /// Bytes asked (`end - start`).
    var length: UInt64 { end - start }

    /// This range cut in two where its first tiles (sorted by offset) end within byte `limit` of
    /// the archive: those tiles, and every tile sharing an offset (one body, a run) with the last
    /// of them, then the others; nil when no tile or every tile ends within it. With
    /// `keepingFirst`, the first tile is kept however long (a range is never emptied).
    func split(within limit: UInt64, keepingFirst: Bool) -> (kept: ArchiveRange, rest: ArchiveRange)? {
        func tileEnd(_ k: Int) -> UInt64 { tiles[k].tile.offset + UInt64(tiles[k].tile.length) }
        var k = keepingFirst ? min(1, tiles.count) : 0
        while k < tiles.count && tileEnd(k) <= limit { k += 1 }
        while k > 0 && k < tiles.count && tiles[k].tile.offset == tiles[k - 1].tile.offset { k += 1 }
        guard k > 0, k < tiles.count else { return nil }
        let keptEnd = (0..<k).map(tileEnd).max() ?? end
        return (ArchiveRange(set: set, start: start, end: keptEnd, tiles: Array(tiles[..<k])),
                ArchiveRange(set: set, start: tiles[k].tile.offset, end: end, tiles: Array(tiles[k...])))
    }
}

/// A plan made off the loop (`Daemon.makePlan`: a style's, or a `tiles` request's with PMTiles
/// archives) for region `id`'s download `token`
/// (`Download.serial`).
struct PlanResult: Sendable {
    let id: String
    let token: Int
    let result: Result<ResourcePlan, RegionError>
    /// Its download stopped while it was made (`Download.planCancel`): the result, whatever it
    /// is, is dropped.
    let cancelled: Bool
}

/// A read of a region's PMTiles directories, finished off the loop (`Daemon.startArchiveReads`):
/// the region, the read's token (`Download.serial` of the download it was for: a download
/// stopped since is not planned from it), and the readings by source or the error.
struct ArchiveReadResult: Sendable {
    let id: String
    let token: Int
    let result: Result<[String: PMTilesRemote.Reading], RegionError>
    /// When the last request to each host started (`Daemon.now()`), for the limiter.
    let lastStarts: [String: Double]
    /// The body bytes the reads received, whole: an answer that ignored Range and the answers of
    /// failed attempts included (for the byte limit).
    let received: Int
}

extension Daemon {
    /// The tile sets of every PMTiles archive `r`'s plan needs, by source: `[:]` when it needs
    /// none; nil while their directories are being read (header, root, the leaves that meet the
    /// region: `startArchiveReads`, off the loop, so a slow archive server stalls no other
    /// region); when the read ends, `collectArchiveReads` plans the region again and this returns
    /// what was read. Read once per download start (a resume keeps the plan, and reads nothing).
    func readArchives(_ r: Region, _ d: Download, style: StyleDocument?) -> [String: TileSet]? {
        guard !Planner.archiveSources(request: r.request, style: style).isEmpty else { return [:] }
        if let sets = d.archiveSets { return sets }
        if !d.archivesReading {
            d.archivesReading = true
            // A read started for an earlier download of the region (stopped since) is let finish
            // first: `collectArchiveReads` then starts this one's.
            if !archiveReadsRunning.contains(r.id) { startArchiveReads(r, d, style: style) }
        }
        return nil
    }

    /// Starts the read of `r`'s archives on `archiveQueue`, with an HTTP client of its own. Its
    /// requests keep the request limits by themselves: the first waits for the region's and the
    /// host's turn (taken from the limiter now), each next one starts at least
    /// `RateLimiter.interval` after the one before it to the same host; `collectArchiveReads`
    /// records the last one's start with the limiter (`RateLimiter.record`: the range requests
    /// wait their turn from it) and counts the bytes against the byte limit.
    func startArchiveReads(_ r: Region, _ d: Download, style: StyleDocument?) {
        d.archivesReading = true
        archiveReadsRunning.insert(r.id)
        // Read already by `tilespool get`'s check, for this very request: taken as read.
        if let read = archivesRead, !r.refreshing,
           read.serves(id: r.id, request: r.request, sources: Planner.archiveSources(request: r.request, style: style),
                       maxTiles: options.maxTiles, maxObjectSize: options.http.maxObjectSize) {
            archivesRead = nil
            archiveMailbox.post(ArchiveReadResult(id: r.id, token: d.serial, result: .success(read.readings), lastStarts: [:],
                                                  received: read.readings.values.reduce(0) { $0 + $1.directoryBytes }))
            writer.wake()
            return
        }
        var httpOptions = options.http
        httpOptions.allowedHosts.formUnion(options.allowedHosts)
        let request = r.request, id = r.id, key = d.serial, limits = limiter
        // A refresh: an archive still at the version the pack was planned from costs one request.
        let previous = r.refreshing ? r.files.loadPlan() : nil
        let first = Planner.archiveSources(request: request, style: style).first.map { RateLimiter.host(of: $0.url) } ?? ""
        let firstWait = max(0, limiter.admit(host: first, region: id, regionLimit: request.maxRequestsPerSecond, now: Daemon.now()))
        if firstWait > 0 { limiter.charge(host: first, region: id, regionLimit: request.maxRequestsPerSecond, now: Daemon.now()) }
        let mailbox = archiveMailbox, writer = self.writer, maxTiles = options.maxTiles
        let client = HTTPClient(options: httpOptions)
        archiveReadClients[id] = client
        archiveQueue.async {
            var last: [Substring: Double] = [:]
            var counted = false
            var received = 0
            func pace(_ url: String) {
                let host = RateLimiter.host(of: url)
                let gap = limits.interval(host: host, regionLimit: request.maxRequestsPerSecond)
                let until = counted ? (last[host].map { $0 + gap } ?? 0) : Daemon.now() + firstWait
                counted = true
                while case let left = until - Daemon.now(), left > 0, !client.isAbandoned { usleep(useconds_t(min(left, 0.1) * 1_000_000) + 1) }
                last[host] = Daemon.now()
            }
            let result = Result { () throws(RegionError) in
                try PMTilesRemote.readAll(request: request, style: style, http: client, headers: request.headerList, maxTiles: maxTiles,
                                          previous: previous, pace: pace, received: { received += $0 })
            }
            mailbox.post(ArchiveReadResult(id: id, token: key, result: result,
                                           lastStarts: Dictionary(uniqueKeysWithValues: last.map { (String($0.key), $0.value) }),
                                           received: received))
            writer.wake()
        }
    }

    /// Takes the directory reads that have ended (`startArchiveReads`) and plans their regions
    /// (`makePlan`). A region whose download
    /// stopped meanwhile (paused, cancelled, deleted) is left alone: its next start reads again.
    /// A server that did not answer puts the region in `pausedNetwork`; another error fails it
    /// (a style's refused by a tile usage policy: refused as a bad request is).
    func collectArchiveReads() {
        for read in archiveMailbox.take() {
            archiveReadsRunning.remove(read.id)
            archiveReadClients.removeValue(forKey: read.id)
            // Every byte received counts against the byte limit, the read's outcome whatever
            // (attack round 37: a directory read answered 200 with the whole archive counted as
            // the 16 KiB it used, and the ranges went at once, 2.2 times the limit).
            if limiter.bytesPerSecond != nil { limiter.received(bytes: read.received, now: Daemon.now()) }
            guard let r = regions[read.id], let d = r.download, r.state == .downloading else { continue }
            guard d.serial == read.token else {
                // For a download stopped since; the one now waiting reads anew (a refresh or a
                // resume may plan from another version).
                if d.archivesReading && d.archiveSets == nil { startArchiveReads(r, d, style: d.style) }
                continue
            }
            d.archivesReading = false
            let style = d.style
            // The next requests to those hosts wait their turn from the last directory request.
            for (host, at) in read.lastStarts {
                limiter.record(host: Substring(host), region: r.id, regionLimit: r.request.maxRequestsPerSecond, at: at)
            }
            switch read.result {
            case .failure(let e):
                if e.code == .networkError {
                    networkLost(r, url: archiveURL(r, style: style, shown: e.url), why: e.message, archive: true)
                } else if style != nil && (e.code == .tileLimitExceeded || e.code == .policyRefused) {
                    refuseLate(r, e)
                } else {
                    fail(r, e)
                }
            case .success(let readings):
                d.unchangedArchives = [:]
                for (name, reading) in readings {
                    guard var answer = reading.revalidation else { continue }
                    if answer.fetched == nil { answer.fetched = ManifestLine.roundedToMilliseconds(Date().timeIntervalSince1970) }
                    d.unchangedArchives[ManifestLine.sanitizeKey(name)] = answer
                }
                for (name, reading) in readings {
                    Log.info("read PMTiles archive of source '\(name)': \(reading.set.count) tiles, \(reading.set.tileBytes ?? 0) tile bytes, \(reading.requests) requests for \(reading.directoryBytes) bytes of header and directories", region: r.id, state: r.state.rawValue)
                }
                d.archiveSets = readings.mapValues(\.set)
                d.wholeArchives = [:]
                for (name, reading) in readings where !reading.unchanged {
                    if let w = reading.wholeFile { d.wholeArchives[ManifestLine.sanitizeKey(name)] = w }
                }
                makePlan(r, d)
            }
        }
    }

    /// The URL of the archive an error names (`shown`: its redacted form), to probe while the
    /// region waits for the network; the first archive when none matches.
    func archiveURL(_ r: Region, style: StyleDocument?, shown: String?) -> String {
        let urls = Planner.archiveSources(request: r.request, style: style).map(\.url)
        return urls.first { Redaction.redact($0) == shown } ?? urls.first ?? ""
    }

    /// The plan index where each tile set's indices begin.
    static func setBases(_ plan: ResourcePlan) -> [Int] {
        var bases: [Int] = []
        var base = plan.resources.count
        for set in plan.tileSets { bases.append(base); base += set.indexCount }
        return bases
    }

    /// The range requests still to make for `d`'s archive tile sets: the tiles not yet recorded
    /// (`d.done`), coalesced (`PMTiles.coalesce`), each range at most `--max-object-size` bytes
    /// (the client's limit on any body) unless one tile alone is longer. Made once per start of
    /// the download, so a resume asks only for what is missing. A missing tile longer than
    /// `--max-object-size` (a stored plan resumed by a daemon started with a lower limit) fails
    /// the region as at plan (`PMTilesRemote.tooLarge`).
    func buildArchiveRanges(_ r: Region, _ d: Download, _ plan: ResourcePlan) {
        var ranges: [ArchiveRange] = []
        d.archiveSpans = []
        let bases = Daemon.setBases(plan)
        for (s, set) in plan.tileSets.enumerated() {
            guard let archive = set.archive else { continue }
            d.archiveSpans.append(bases[s]..<(bases[s] + set.indexCount))
            var missing: [(index: Int, tile: PMTiles.ArchiveTile)] = []
            let where_ = ArchiveTileIndex(set)
            for t in archive.tiles {
                guard let j = where_.index(of: t.tile) else { continue }
                let i = bases[s] + j
                guard !d.done[i] else { continue }
                // A refresh of an unchanged archive: no tile is asked. The one request that found
                // the archive unchanged revalidated its tiles as a 304 revalidates a tile
                // (`Refresh.revalidated`: its validators, expiry and fetch time where it sent
                // them), so the refresh counts them checked and unchanged, not kept unasked.
                if let answer = d.unchangedArchives[set.source], let prev = d.previousLine(.tile, ManifestLine.tileKey(source: set.source, t.tile)), !prev.failed {
                    addPending(d, .index(i), Refresh.revalidated(prev, url: prev.url, response: answer))
                    continue
                }
                missing.append((i, t))
            }
            let limit = options.http.maxObjectSize
            if let e = PMTilesRemote.tooLarge(missing.map(\.tile), source: set.source, url: shown(archive.url, r), limit: limit) {
                fail(r, e)
                return
            }
            // Under a byte limit, a range is at most one second's worth of bytes (its bytes are
            // counted when it is issued, so the limit holds request by request).
            var maxRange = limiter.bytesPerSecond.map { max(UInt64(16 << 10), min(PMTiles.defaultMaxRange, UInt64($0))) } ?? PMTiles.defaultMaxRange
            maxRange = min(maxRange, UInt64(max(1, limit)))
            for range in PMTiles.coalesce(missing.map(\.tile), maxRange: maxRange) {
                ranges.append(ArchiveRange(set: s, start: range.start, end: range.end, tiles: Array(missing[range.tiles])))
            }
        }
        d.archiveRanges = ranges
        d.rangeCursor = 0
        // A whole archive whose tiles are all done (or revalidated) is not held for nothing.
        let asked = Set(ranges.map { plan.tileSets[$0.set].source })
        d.wholeArchives = d.wholeArchives.filter { asked.contains($0.key) }
    }

    /// Issues the range requests of archive tile sets, after every other resource is finished
    /// (phases run in order); stops at the region's request limit or when a rate limit holds one back.
    func fillRanges(_ r: Region, _ d: Download, _ plan: ResourcePlan, now: Double) {
        guard d.archiveRanges != nil else { return }
        while d.inFlight.count + d.rangesCutting.count < options.maxRequestsPerRegion && d.rangeCursor < d.archiveRanges!.count {
            if d.nonTileInFlight > 0 || d.cursor < plan.resources.count { return }
            if d.wholeArchives[plan.tileSets[d.archiveRanges![d.rangeCursor].set].source] != nil {
                cutFromWholeFile(r, d, plan)
                continue
            }
            splitRange(d, d.rangeCursor)
            // The daemon's range bodies held (asked, or being cut) stay within
            // `maxRangeBytesHeld`, taken by the regions in turns; one range is always allowed
            // when none is held, however large.
            let size = d.archiveRanges![d.rangeCursor].length
            var budget = rangeBudget ?? RangeBudget(limit: Daemon.maxRangeBytesHeld, held: rangeBytesHeld(), regions: regionsAskingForRanges())
            defer { rangeBudget = budget }
            guard budget.mayAsk(size, own: rangeBytesHeld(by: d)), issueRange(r, d, d.rangeCursor, now: now) else { return }
            budget.take(size)
            d.rangeCursor += 1
        }
    }

    /// Cuts the tiles of the ranges from `rangeCursor` on, of its archive, out of the whole file
    /// a server that ignores Range sent to the directory reads (`Download.wholeArchives`), as
    /// `handleRange` cuts them from a range's whole answer: those ranges are never asked, so
    /// such a server sends the archive once for the plan and the download together (before,
    /// once more for each range under way). The file is dropped here; ranges it does not hold
    /// (it is shorter than the directories say) are asked as usual.
    func cutFromWholeFile(_ r: Region, _ d: Download, _ plan: ResourcePlan) {
        let n = d.rangeCursor, set = d.archiveRanges![n].set
        guard let whole = d.wholeArchives.removeValue(forKey: plan.tileSets[set].source) else { return }
        let tiles = takeRanges(d, set: set, within: whole.bytes.count)
        guard !tiles.isEmpty else { return }
        Log.info("the server ignored Range: \(tiles.count) tiles cut from the whole archive the plan's read brought, none asked again",
                 region: r.id, state: r.state.rawValue, url: shown(plan.tileSets[set].archive!.url, r))
        d.rangesCutting.insert(n)
        d.wholeCuts[n] = UInt64(whole.bytes.count)
        cut(cutJob(r, d, n, tiles, whole.freshness, start: 0), whole.bytes)
    }

    /// The tiles of the ranges not yet asked from `rangeCursor` on, of tile set `set`, that lie
    /// within the first `length` bytes of the archive (a whole file a server that ignores Range
    /// sent), the cursor moved past them: they are cut from that file, never asked.
    func takeRanges(_ d: Download, set: Int, within length: Int) -> [(index: Int, tile: PMTiles.ArchiveTile)] {
        var tiles: [(index: Int, tile: PMTiles.ArchiveTile)] = []
        while let ranges = d.archiveRanges, d.rangeCursor < ranges.count, ranges[d.rangeCursor].set == set,
              ranges[d.rangeCursor].end <= UInt64(length) {
            tiles += ranges[d.rangeCursor].tiles
            d.rangeCursor += 1
        }
        return tiles
    }

    /// Runs `job` over `body` on `cutQueue` (cut, decoded, hashed, stored), so the loop goes on
    /// receiving meanwhile; `collectRangeCuts` records the tiles.
    func cut(_ job: RangeCutJob, _ body: Data) {
        let store = self.store, mailbox = cutMailbox, writer = self.writer
        cutQueue.async {
            mailbox.post(job.run(body, store: store))
            writer.wake()
        }
    }

    /// Cuts range `n` (not yet asked) to `PMTiles.rangeTarget` for the download's measured
    /// rate (`ArchiveRange.split`, the first tile kept however long): the kept part stays at
    /// `n`, the rest becomes range `n + 1`. Only ranges from `rangeCursor` on are moved, and
    /// none of those is asked or referred to yet.
    func splitRange(_ d: Download, _ n: Int) {
        let range = d.archiveRanges![n]
        let target = PMTiles.rangeTarget(rate: d.rangeRate, maxRange: PMTiles.defaultMaxRange)
        guard range.length > target, let (kept, rest) = range.split(within: range.start + target, keepingFirst: true) else { return }
        d.archiveRanges![n] = kept
        d.archiveRanges!.insert(rest, at: n + 1)
    }

    /// The most bytes of range bodies the daemon holds at once, over every region: ranges asked
    /// and not yet answered, and answers not yet cut and stored (`Download.rangesCutting`):
    /// 6 MiB, three ranges of `PMTiles.defaultMaxRange`, taken by the regions in turns
    /// (`RangeBudget`, made once per scheduler pass). On the bench's 95.7 MB archive this kept
    /// the daemon's peak RSS at 57-65 MiB (84-99 MiB with eight 4 MiB ranges) at the same speed
    /// within the noise (docs/benchmarks.md).
    static let maxRangeBytesHeld: UInt64 = 6 << 20

    /// The bytes of range bodies held now (`maxRangeBytesHeld`), over the regions with a
    /// download (all in `live`), and the answers of stopped downloads still being cut
    /// (`strayCuts`).
    func rangeBytesHeld() -> UInt64 {
        live.values.reduce(strayCuts.values.reduce(0, +)) { sum, r in sum + (r.download.map { rangeBytesHeld(by: $0) } ?? 0) }
    }

    /// The bytes of range bodies download `d` holds: its ranges asked and not yet answered, and
    /// its answers being cut.
    func rangeBytesHeld(by d: Download) -> UInt64 {
        guard let ranges = d.archiveRanges else { return 0 }
        var held: UInt64 = 0
        for n in d.rangesCutting { held += max(ranges[n].length, d.wholeCuts[n] ?? 0) }
        for f in d.inFlight.values { if case .range(let n) = f.item { held += ranges[n].length } }
        return held
    }

    /// How many downloading regions ask for ranges: with ranges left to ask, or held (for the
    /// share of `RangeBudget`).
    func regionsAskingForRanges() -> Int {
        live.values.filter { r in
            guard r.state == .downloading, let d = r.download, let ranges = d.archiveRanges else { return false }
            return d.rangeCursor < ranges.count || !d.rangesCutting.isEmpty || d.inFlight.values.contains { $0.item.isRange }
        }.count
    }

    /// Starts range request `n` of `d.archiveRanges`: one request for the rate limits, carrying
    /// the archive's pinned version (`PMTilesRemote.pinHeaders`). False when a rate limit holds it.
    func issueRange(_ r: Region, _ d: Download, _ n: Int, now: Double) -> Bool {
        let range = d.archiveRanges![n]
        guard let archive = d.plan?.tileSets[range.set].archive else { return true }
        let url = archive.url
        if !admitted(r, d, url: url, now: now) { return false }
        // Its size is known: counted against the byte limit now, so that the requests after it
        // wait while the bucket is in debt (counted when the answer came, every range of a
        // region started at once: attack round 8 saw 35 times the limit).
        if limiter.bytesPerSecond != nil { limiter.received(bytes: Int(range.length), now: now) }
        d.lastIssued = now
        d.rangeAskedAt[n] = now
        let tag = nextTag; nextTag += 1
        let item = WorkItem.range(n)
        d.inFlight[tag] = Fetch(item: item, url: url, kind: .tile, key: "range \(range.start)-\(range.end - 1)", conditional: false)
        transfers[tag] = (r.id, item)
        let pinned = Freshness(etag: archive.etag, lastModified: archive.lastModified)
        http.start(url: url, tag: tag, validators: nil, headers: r.request.headerList,
                   everyHop: [("Range", "bytes=\(range.start)-\(range.end - 1)")] + PMTilesRemote.pinHeaders(pinned),
                   expectedSize: Int(range.length))
        return true
    }

    /// A range request's answer: the facts (`RangeAnswerFacts`), the decision made by the pure
    /// `AnswerDecision.decideRange` (every answer class: AnswerDecisionTests), applied here. A
    /// cut: each tile cut out of the bytes asked, its tile compression undone, stored and
    /// recorded. A failure of the range: each of its tiles fails as a tile does (`failTile`), or
    /// the region fails (the archive changed, a refused request) or pauses for the network. A
    /// retry holds the region for a `Retry-After`, as for a tile.
    func handleRange(_ r: Region, _ d: Download, _ res: TransferResult, _ fetch: Fetch, _ n: Int) {
        let range = d.archiveRanges![n]
        // The range's bytes were debited when it was asked; an answer larger than that (a 200
        // with the whole file: the server ignored Range) is debited for the rest, so the next
        // ranges wait (attack round 36: 21 times --max-bytes-per-second, the whole archive for
        // each range).
        if limiter.bytesPerSecond != nil, res.body.count > Int(range.length) {
            limiter.received(bytes: res.body.count - Int(range.length), now: Daemon.now())
        }
        // The rate one range request carries (bytes a second), averaged over the answers.
        if let asked = d.rangeAskedAt.removeValue(forKey: n), res.body.count > 0, res.status == 206 || res.status == 200 {
            let rate = Double(min(res.body.count, Int(range.length))) / max(Daemon.now() - asked, 0.001)
            d.rangeRate = d.rangeRate.map { ($0 + rate) / 2 } ?? rate
        }
        let url = d.plan!.tileSets[range.set].archive!.url
        let item = WorkItem.range(n)
        func failTiles(_ f: AnswerDecision.Failure) { failRangeTiles(r, d, n, range.tiles, f) }
        var body = Data()
        var cutTiles = range.tiles
        var wholeFile = false // `body` is the archive from its first byte
        var decision = AnswerDecision.decideRange(rangeFacts(r, d, res, n))
        if case .salvage(let received, let x) = decision {
            // The tiles wholly within the bytes that came are cut; the rest of the range is a
            // range of its own, asked after the others (so each attempt stores at least one
            // tile, and a range never cut short twice at the same place loops).
            if let (kept, rest) = range.split(within: range.start + UInt64(received), keepingFirst: false) {
                d.archiveRanges!.append(rest)
                Log.info("range \(range.start)-\(range.end - 1) cut short after \(received) of \(range.length) bytes: \(kept.tiles.count) whole tiles kept, the other \(rest.tiles.count) asked again",
                         region: r.id, state: r.state.rawValue, url: shown(url, r))
                cutTiles = kept.tiles
                body = res.body[res.body.startIndex..<(res.body.startIndex + received)]
            } else if let length = ContentRange.completeLength(res.contentRange), length <= range.start + UInt64(received) {
                // No tile whole, and the archive ends where the bytes stop: asking again brings
                // the same (the rest of a range split above gets a 416, decided so too).
                decision = .fail(.resource(AnswerDecision.pastArchiveEnd(status: res.status, shown: shown(url, r), start: range.start, end: range.end, length: length)))
            } else {
                decision = .retry(x)
            }
        }
        switch decision {
        case .salvage: break
        case .fail(let f):
            failTiles(f)
            return
        case .retry(let x):
            if let log = x.log { Log.error(log, region: r.id, state: r.state.rawValue, url: shown(url, r)) }
            if let hold = x.holdFor {
                d.holdUntil = max(d.holdUntil, Daemon.now() + hold)
                r.statusDirty = true // the status shows `throttledUntil`
            }
            retry(r, d, item, after: x.after, exhausted: { failTiles(x.exhausted) })
            return
        case .cut(let from):
            // The bytes asked, a slice of the answer (no copy): of the whole file when the
            // server ignored Range.
            let start = res.body.startIndex + from
            body = res.body[start..<(start + Int(range.length))]
            if res.status == 200 {
                // The server ignored Range and sent the file (from its first byte): the ranges
                // of this archive not yet asked whose bytes it holds are cut from it too, and
                // never asked, so such a server costs the file once, not once a range.
                let more = takeRanges(d, set: range.set, within: res.body.count)
                if !more.isEmpty {
                    Log.info("the server ignored Range: \(range.tiles.count + more.count) tiles cut from its whole answer, \(more.count) of them of ranges not asked",
                             region: r.id, state: r.state.rawValue, url: shown(url, r))
                    cutTiles += more
                    body = res.body
                    wholeFile = true
                }
            }
        }
        d.attempts.removeValue(forKey: item)
        // Cut, decoded, hashed and stored on `cutQueue`, so the loop goes on receiving the other
        // ranges meanwhile; `collectRangeCuts` records the tiles. The range keeps its request
        // slot until then (`fillRanges`).
        d.rangesCutting.insert(n)
        cut(cutJob(r, d, n, cutTiles, res.freshness, start: wholeFile ? 0 : nil), body)
    }

    /// The facts of answer `res` to range request `n` for `AnswerDecision.decideRange`: the
    /// version it names against the one pinned (a transfer that failed before its headers were
    /// read has none to compare), its ETag and `Content-Range` unless they quote a secret.
    func rangeFacts(_ r: Region, _ d: Download, _ res: TransferResult, _ n: Int) -> RangeAnswerFacts {
        let range = d.archiveRanges![n]
        let set = d.plan!.tileSets[range.set]
        let archive = set.archive!
        let pinned = Freshness(etag: archive.etag, lastModified: archive.lastModified)
        return RangeAnswerFacts(
            answer: AnswerFacts(url: archive.url, secrets: r.secrets, kind: .tile, failure: res.failure.map(AnswerFacts.Failure.init),
                                status: res.status, body: res.body, retryAfter: res.retryAfter),
            start: range.start, end: range.end, source: set.source,
            versionChanged: res.headersRead && PMTilesRemote.changed(pinned, res.freshness),
            etag: res.freshness.etag.flatMap { quotesSecret($0, r) ? nil : $0 },
            contentRange: res.contentRange.map { quotesSecret($0, r) ? "(a value quoting a secret)" : $0 },
            cutAtLimit: res.cutAtLimit)
    }

    /// The job that cuts `tiles` of range `n` (those not done yet) out of an answer whose
    /// validators are `freshness` (an ETag quoting a secret left out of the lines), and whose
    /// first byte is the range's first, or archive byte `start` when given (0: the whole file).
    func cutJob(_ r: Region, _ d: Download, _ n: Int, _ tiles: [(index: Int, tile: PMTiles.ArchiveTile)], _ freshness: Freshness, start: UInt64? = nil) -> RangeCutJob {
        let range = d.archiveRanges![n]
        let archive = d.plan!.tileSets[range.set].archive!
        var freshness = freshness
        if let etag = freshness.etag, quotesSecret(etag, r) { freshness.etag = nil }
        return RangeCutJob(id: r.id, token: d.serial, range: n, start: start ?? range.start, tiles: tiles.filter { !d.done[$0.index] },
                           source: d.plan!.tileSets[range.set].source, archiveURL: archive.url, secrets: r.secrets,
                           freshness: freshness, gzip: archive.tileCompression == PMTiles.Compression.gzip.rawValue,
                           limit: options.http.maxObjectSize, format: PMTiles.rasterFormat(tileType: archive.tileType))
    }

    /// Keeps what the ranges of a download being stopped (a pause, the daemon stopping, the
    /// network lost) had received, so that a resume asks only for the tiles still missing rather
    /// than for whole ranges again (round 27: a pause dropped up to `maxRangeBytesHeld`, 6 MiB,
    /// of bytes received: ten minutes at 10 KB/s). Each range being received is cancelled
    /// (`HTTPClient.cancelKeepingReceived`) and, when what came is a 206 of the pinned version
    /// for the first bytes asked (`AnswerDecision.decideRange`'s `salvage`), its whole tiles are
    /// cut here, on the loop; the ranges being cut on `cutQueue` are waited for. Their stored
    /// tiles are added to the lines `stopDownload` commits; failures are left for the resume.
    /// Removes the ranges it cancelled from `d.inFlight` and `transfers`.
    func keepRangesReceived(_ r: Region, _ d: Download) {
        guard d.archiveRanges != nil, d.plan != nil else { return }
        var cuts: [RangeCut] = []
        if d.inFlight.values.contains(where: { if case .range = $0.item { return true } else { return false } }) {
            http.receiveArrived() // what the kernel holds already (the pause may come in the same turn)
        }
        for (tag, fetch) in d.inFlight {
            guard case .range(let n) = fetch.item, var res = http.cancelKeepingReceived(tag: tag) else { continue }
            d.inFlight.removeValue(forKey: tag)
            transfers.removeValue(forKey: tag)
            let range = d.archiveRanges![n]
            // Every byte asked came (the answer was complete, not yet reported): cut as a whole
            // answer is, its Content-Range checked the same way.
            if res.headersRead, res.status == 206, res.body.count == Int(range.length) { res.failure = nil }
            var tiles = range.tiles
            var received = res.body.count
            switch AnswerDecision.decideRange(rangeFacts(r, d, res, n)) {
            case .cut(let from) where res.status == 206 && from == 0:
                break
            case .salvage(let bytes, _):
                guard let (kept, _) = range.split(within: range.start + UInt64(bytes), keepingFirst: false) else { continue }
                tiles = kept.tiles
                received = bytes
            default:
                continue
            }
            let body = res.body[res.body.startIndex..<(res.body.startIndex + received)]
            cuts.append(cutJob(r, d, n, tiles, res.freshness).run(body, store: store))
            Log.info("range \(range.start)-\(range.end - 1) stopped after \(received) of \(range.length) bytes: \(tiles.count) whole tiles kept",
                     region: r.id, state: r.state.rawValue, url: shown(d.plan!.tileSets[range.set].archive!.url, r))
        }
        if !d.rangesCutting.isEmpty {
            cutQueue.sync {}
            for cut in cutMailbox.take() {
                if cut.id == r.id && cut.token == d.serial { cuts.append(cut); d.rangesCutting.remove(cut.range) } else { cutMailbox.post(cut) }
            }
        }
        for cut in cuts { recordCut(r, d, cut, storedOnly: true) }
    }

    /// Fails `tiles` (of range `n`) as `f` says: each as a tile fails (`failTile`), or the whole
    /// region (`fail`, or `networkLost`).
    func failRangeTiles(_ r: Region, _ d: Download, _ n: Int, _ tiles: [(index: Int, tile: PMTiles.ArchiveTile)], _ f: AnswerDecision.Failure) {
        let range = d.archiveRanges![n]
        let set = d.plan!.tileSets[range.set]
        let archive = set.archive!
        let e: RegionError
        switch f {
        case .region(let x): fail(r, x); return
        case .networkLost(let why): networkLost(r, url: archive.url, why: why, archive: true); return
        case .resource(let x): e = x
        }
        for (i, t) in tiles {
            guard r.download === d, r.state == .downloading else { return }
            let key = ManifestLine.tileKey(source: set.source, t.tile)
            failTile(r, d, .index(i), Fetch(item: .index(i), url: tileURL(archive, t.tile), kind: .tile, key: key, conditional: false), e)
        }
    }

    /// Records the ranges cut on `cutQueue` (`handleRange`), tile by tile in order: a stored
    /// tile's manifest line, or a tile's own failure (`failTile`: it does not inflate, or lies
    /// outside the range); then a store that could not write fails the region as a storage
    /// failure. A result for a download stopped since is dropped (its objects stay unreferenced
    /// until gc; the next start asks for those tiles again).
    func collectRangeCuts() {
        for cut in cutMailbox.take() {
            guard let r = regions[cut.id], let d = r.download, d.serial == cut.token else {
                strayCuts.removeValue(forKey: StrayCut(region: cut.id, serial: cut.token, range: cut.range))
                continue
            }
            d.rangesCutting.remove(cut.range)
            d.wholeCuts.removeValue(forKey: cut.range)
            guard r.state == .downloading else { continue }
            recordCut(r, d, cut, storedOnly: false)
            if let error = cut.storageError, r.download === d { storageFailed(r, error) }
            finishIfDone(r, d)
        }
    }

    /// Records the outcomes of `cut`, tile by tile in order: a stored tile's manifest line
    /// (`addPending`), a tile's own failure (`failTile`) unless `storedOnly` (a download being
    /// stopped, `keepRangesReceived`: the resume asks those again).
    func recordCut(_ r: Region, _ d: Download, _ cut: RangeCut, storedOnly: Bool) {
        guard let plan = d.plan, let ranges = d.archiveRanges, cut.range < ranges.count else { return }
        let range = ranges[cut.range]
        let set = plan.tileSets[range.set]
        guard let archive = set.archive else { return }
        // Every object of the cut was put before the cut came back: one ticket for its lines.
        let ticket = store.writesQueued
        for (k, outcome) in cut.outcomes.enumerated() {
            guard r.download === d, storedOnly || r.state == .downloading else { break }
            let t = cut.tiles[k]
            guard !d.done[t.index] else { continue }
            switch outcome {
            case .stored(let line, let text):
                addPending(d, .index(t.index), line, text: cut.lineText[text], ticket: ticket)
            case .failed(let why):
                guard !storedOnly else { continue }
                let url = shown(archive.url, r)
                let e = RegionError(code: .badResponse, message: "tile \(t.tile.tile) of \(url) \(why)", url: url)
                failRangeTiles(r, d, cut.range, [t], .resource(e))
            }
        }
    }

    /// The URL a tile of an archive is recorded under in the manifest: the archive's URL with
    /// the tile as its fragment (`https://host/x.pmtiles#z/x/y`), which names the archive and
    /// the tile and is never sent.
    func tileURL(_ archive: ArchiveSource, _ t: TileID) -> String { Daemon.tileURL(archive.url, t) }
    static func tileURL(_ archiveURL: String, _ t: TileID) -> String { "\(archiveURL)#\(t.z)/\(t.x)/\(t.y)" }
}

/// A range answer being cut for a download stopped since (`Daemon.strayCuts`).
struct StrayCut: Hashable {
    let region: String
    let serial: Int
    let range: Int
}

/// A range answer to cut into tiles off the loop (`Daemon.handleRange`): the region and its
/// download's `serial`, the range's number and first byte (offset in the archive), the tiles
/// still missing in it (plan index, directory entry), the answer's validators for their lines,
/// whether the archive's tiles are gzip-compressed, and the largest tile accepted (bytes).
struct RangeCutJob: Sendable {
    let id: String
    let token: Int
    let range: Int
    let start: UInt64
    let tiles: [(index: Int, tile: PMTiles.ArchiveTile)]
    /// The tile set's source name, the archive's URL and the request's secrets, for the tiles'
    /// manifest lines (key, URL with the tile as fragment, `Secrets.replaced`), made here, off the
    /// loop.
    let source: String
    let archiveURL: String
    let secrets: Redaction.Secrets
    let freshness: Freshness
    let gzip: Bool
    let limit: Int
    /// The raster format the archive's header names (`PMTiles.rasterFormat`), whose signature
    /// each tile must start with, as an HTTP tile's body must (`TileBody`); nil for vector tiles.
    let format: String?

    /// Cuts each tile out of `body` (bytes `start...` of the archive), inflates it when the
    /// archive says gzip, and stores it (`TileStore.put`, thread-safe); tiles of one run-length
    /// entry (the same offset) are cut, decoded and stored once. A tile that does not inflate, or
    /// lies outside the bytes asked (a damaged plan), is that tile's failure alone (attack round
    /// 22: one damaged body failed the rest of its range, all under its message); a store that
    /// cannot write stops the cut.
    func run(_ body: Data, store: any TileStore) -> RangeCut {
        // Two halves at once (a run-length entry kept in one), on two cores: hashing, the most of
        // a cut's work, goes on beside the store's appends (`TileStore.put` is thread-safe).
        var half = tiles.count / 2
        while half > 0 && half < tiles.count && tiles[half].tile.offset == tiles[half - 1].tile.offset { half += 1 }
        let parts = tiles.count >= RangeCutJob.splitAt && half < tiles.count ? [0..<half, half..<tiles.count] : [0..<tiles.count]
        let results = CutParts(count: parts.count)
        DispatchQueue.concurrentPerform(iterations: parts.count) { p in
            results.set(p, cutTiles(parts[p], from: body, store: store))
        }
        var outcomes: [RangeCut.Outcome] = []
        outcomes.reserveCapacity(tiles.count)
        var stop: Error?
        var lineText: [UInt8] = []
        // The outcomes are the first tiles', in order: past a store error, none. A later half's
        // lines follow the earlier half's text.
        for r in results.all() where stop == nil {
            let base = lineText.count
            for o in r.outcomes {
                if case .stored(let line, let text) = o {
                    outcomes.append(.stored(line: line, text: (text.lowerBound + base)..<(text.upperBound + base)))
                } else {
                    outcomes.append(o)
                }
            }
            lineText += r.text
            stop = r.stop
        }
        return RangeCut(id: id, token: token, range: range, tiles: tiles, freshness: freshness, outcomes: outcomes, lineText: lineText, storageError: stop)
    }

    /// The fewest tiles a range's cut is split in two for (`run`).
    static let splitAt = 64

    /// The outcomes of `tiles[part]`, in order, stopped by a store error: a stored tile's
    /// manifest line, rendered (`ManifestLine.appendText`) into `text` (its range there).
    private func cutTiles(_ part: Range<Int>, from body: Data, store: any TileStore) -> CutParts.Part {
        var outcomes: [RangeCut.Outcome] = []
        outcomes.reserveCapacity(part.count)
        var text: [UInt8] = []
        text.reserveCapacity(part.count * 200)
        var last: (offset: UInt64, cut: Cut)?
        for k in part {
            let t = tiles[k].tile
            let c: Cut
            if let l = last, l.offset == t.offset { c = l.cut } else {
                do { c = try cut(t, from: body, store: store) } catch { return (outcomes, text, error) }
                last = (t.offset, c)
            }
            switch c {
            case .stored(let sha256, let bytes):
                let line = ManifestLine(kind: .tile, sha256: sha256, bytes: bytes, key: ManifestLine.tileKey(source: source, t.tile),
                                        url: secrets.replaced(in: Daemon.tileURL(archiveURL, t.tile)), freshness: freshness)
                let from = text.count
                line.appendText(to: &text)
                outcomes.append(.stored(line: line, text: from..<text.count))
            case .failed(let why):
                outcomes.append(.failed(why))
            }
        }
        return (outcomes, text, nil)
    }

    /// One body cut: stored (hex SHA-256, bytes), or why not.
    private enum Cut { case stored(sha256: String, bytes: Int), failed(String) }

    /// Tile `t` cut out of `body`, inflated if need be and stored: `.stored`, or `.failed` with
    /// why (outside the bytes asked, does not inflate).
    /// - Throws: what `TileStore.put` throws.
    private func cut(_ t: PMTiles.ArchiveTile, from body: Data, store: any TileStore) throws -> Cut {
        let n = UInt64(body.count)
        guard t.offset >= start, t.offset - start <= n, UInt64(t.length) <= n - (t.offset - start) else {
            return .failed("lies outside the range asked (bytes \(t.offset) to \(t.offset &+ UInt64(t.length)), range \(start) to \(start &+ n))")
        }
        let from = body.startIndex + Int(t.offset - start)
        var tile = body[from..<(from + Int(t.length))]
        if gzip {
            do { tile = Data(try Zlib.inflate([UInt8](tile), limit: limit)) } catch { return .failed("does not inflate: \(error)") }
        }
        if let format, !TileBody.hasSignature(tile, format) {
            return .failed("is not a \(format) image as the archive's header says (its first bytes are not the \(format) signature)")
        }
        return .stored(sha256: try store.put(tile).sha256, bytes: tile.count)
    }
}

/// The halves of a cut (`RangeCutJob.run`), each set once from its own thread.
private final class CutParts: @unchecked Sendable {
    typealias Part = (outcomes: [RangeCut.Outcome], text: [UInt8], stop: Error?)
    private let lock = NSLock()
    private var parts: [Part]
    init(count: Int) { parts = Array(repeating: ([], [], nil), count: count) }
    func set(_ p: Int, _ part: Part) { lock.lock(); parts[p] = part; lock.unlock() }
    func all() -> [Part] { lock.lock(); defer { lock.unlock() }; return parts }
}

/// What `RangeCutJob.run` did: each tile's outcome, in order (fewer than `tiles` when a store
/// error stopped it: `storageError`).
struct RangeCut: @unchecked Sendable {
    /// A stored tile's manifest line and where its text is in `lineText`; or why the tile failed.
    enum Outcome { case stored(line: ManifestLine, text: Range<Int>), failed(String) }
    let id: String
    let token: Int
    let range: Int
    let tiles: [(index: Int, tile: PMTiles.ArchiveTile)]
    let freshness: Freshness
    let outcomes: [Outcome]
    /// The stored tiles' lines rendered (`ManifestLine.appendText`), in order.
    let lineText: [UInt8]
    let storageError: Error?
}
