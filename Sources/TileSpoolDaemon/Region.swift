// What the daemon knows of each region: its request, state and progress (`Region`), and while it
// downloads, what is fetched, in flight, waiting for a retry or waiting to be committed
// (`Download`).
import Foundation
import TileSpoolCore
import TileSpoolIO

/// What one transfer fetches for a region: a plan index, or a document needed before the plan.
enum WorkItem: Hashable {
    /// Plan index (the plan exists).
    case index(Int)
    /// The style document (before the plan).
    case style
    /// A source's TileJSON (before the plan).
    case tileJSON(String)
    /// A range request of a PMTiles archive: its position in `Download.archiveRanges`.
    case range(Int)

    /// True for `range`.
    var isRange: Bool { if case .range = self { true } else { false } }
}

/// A transfer under way: the item and what `Daemon.describe` said of it, worked out once when it
/// is issued (a plan look-up and a URL per tile, not one per step).
struct Fetch {
    let item: WorkItem
    let url: String
    let kind: ResourceKind
    let key: String
    /// True when the request carried a conditional header: only then is a 304 an answer.
    var conditional = false
}

/// A region the daemon knows: its request, state, progress and, while downloading, its executor.
final class Region {
    let id: String
    var request: RegionRequest { didSet { cachedSecrets = nil; cachedStatusRequest = nil } }
    /// The status's `request`, `context` and `area` (`Daemon.statusValue`), worked out once per
    /// request: the status is written every second while downloading and for each region at
    /// each metrics write, and the request seldom changes.
    private var cachedStatusRequest: (request: JSONValue, context: JSONValue, area: JSONValue)?
    var statusRequest: (request: JSONValue, context: JSONValue, area: JSONValue) {
        if let c = cachedStatusRequest { return c }
        let c = (JSONValue(request.redactedJSONObject), JSONValue(request.context), JSONValue(RegionArea.jsonObject(request)))
        cachedStatusRequest = c
        return c
    }
    /// `request.secrets`, once worked out (forgotten when `request` changes).
    private var cachedSecrets: Redaction.Secrets?
    /// The request's secrets (`RegionRequest.secrets`), worked out once per request: consulted
    /// for every tile (ETags, URLs shown), where they are usually empty.
    var secrets: Redaction.Secrets {
        if let s = cachedSecrets { return s }
        let s = request.secrets
        cachedSecrets = s
        return s
    }
    var state: RegionState
    var progress = RegionProgress()
    var error: RegionError?
    let files: any RegionStorage
    /// Arrival order (for the queue).
    var arrival: Int
    var download: Download?
    /// Status needs rewriting; when it was last written (monotonic seconds).
    var statusDirty = false
    var lastStatusWrite = 0.0
    /// While `pausedNetwork`: the URL to probe, when, and the current probe gap.
    var probeURL: String?
    /// The URL to probe is a PMTiles archive: the probe asks for its first byte only.
    var probeArchive = false
    var nextProbe = 0.0
    var probeGap = 1.0
    var probing = false
    /// The `exports` entries of the status (see `RegionStatus.exports`); nil when none were asked.
    var exports: [[String: Any]]?
    /// Which run of `Daemon.startExports` the entries of `exports` belong to.
    var exportGeneration = 0
    /// The refresh under way, nil when none is (its files are in `files.refreshDir`; the pack in
    /// use is untouched until `swapRefresh`). The one value holding a refresh's data.
    var refresh: RefreshRun?
    /// A refresh is under way: the state machine's refresh phase (`RegionStateMachine`).
    var refreshing: Bool { refresh != nil }
    /// When a refresh was last started (monotonic seconds), so that a scheduled refresh that failed
    /// is not started again before its interval has passed once more.
    var lastRefreshStart: Double?
    /// Progress samples of the current download (rates and ETA in the status).
    var rates = RateWindow()
    /// See `RegionStatus.startedAt`, `completedAt`, `stateChangedAt`, `uniqueBytes`.
    var startedAt: Date?
    var completedAt: Date?
    var stateChangedAt: Date?
    var uniqueBytes: Int?
    /// See `RegionStatus.warnings`: the request's own (`RegionWarning.of`), a replaced pack, and
    /// after completion the sources whose every tile was empty.
    var warnings: [RegionWarning] = []
    /// Made from a request for an id that had no region, and no state change announced yet: the
    /// first one (`queued`) has no previous state (the hook's `TILESPOOL_PREVIOUS_STATE` is empty).
    var isNew = false

    init(id: String, request: RegionRequest, state: RegionState, files: any RegionStorage, arrival: Int) {
        self.id = id; self.request = request; self.state = state; self.files = files; self.arrival = arrival
    }
}

/// The state of a region's download while it is `downloading`.
final class Download {
    /// Where this download's plan, manifest and journal are: the region's own files (a download or
    /// resume).
    let files: any RegionStorage
    init(files: any RegionStorage) {
        self.files = files
        Download.made += 1
        serial = Download.made
    }
    /// This download's number, unique in the process: a result from off the loop (a directory
    /// read, a range cut) carries it, and one for a download stopped since is dropped (a number,
    /// since the address of a download freed meanwhile may be a new one's).
    let serial: Int
    /// Downloads made so far (the loop makes them all).
    nonisolated(unsafe) private static var made = 0
    /// For a refresh: the pack's manifest lines by `kind<TAB>key` (what each resource was, and its
    /// validators), and the refresh's scope. Both nil for a download.
    var previous: [String: ManifestLine]?
    var scope: RefreshScope?
    /// True when the refresh keeps some lines without asking (`olderThan`, `failedTiles`).
    var keepsSomeLines: Bool { scope != nil && scope != .all }
    /// The pack's line for a resource, during a refresh.
    func previousLine(_ kind: ResourceKind, _ key: String) -> ManifestLine? { previous?["\(kind.rawValue)\t\(key)"] }
    var plan: ResourcePlan? { didSet { planCover = nil } }
    var done = Bitmap(count: 0)
    /// Next plan index to consider.
    var cursor = 0
    /// The range requests of the plan's PMTiles archive sets still to make (`buildArchiveRanges`),
    /// nil until built; the next to issue; the plan indices of the archive sets (which the
    /// cursor skips: their tiles come by range).
    var archiveRanges: [ArchiveRange]?
    var rangeCursor = 0
    /// The ranges (indices in `archiveRanges`) whose answers are on `Daemon.cutQueue`, not yet
    /// collected: each holds a request slot (`fillRanges`) and its bytes count in
    /// `Daemon.maxRangeBytesHeld` until collected.
    var rangesCutting: Set<Int> = []
    /// When each range under way was asked (`Daemon.now()`), by index in `archiveRanges`.
    var rangeAskedAt: [Int: Double] = [:]
    /// The bytes a second one range request of this download carried, measured on the ranges
    /// answered so far (`PMTiles.rangeTarget`); nil before the first answer.
    var rangeRate: Double?
    var archiveSpans: [Range<Int>] = []
    /// Archive tile sets found unchanged since the pack's plan (a refresh), by source, with the
    /// freshness of the answer that found them so: their lines are kept, revalidated by it.
    var unchangedArchives: [String: Freshness] = [:]
    /// The tile sets of the PMTiles archives the plan needs, by source, once their directories
    /// are read (`collectArchiveReads`); nil before. `archivesReading`: a read is under way.
    var archiveSets: [String: TileSet]?
    /// Whole archives a server that ignores Range sent to the directory reads, by source
    /// (`PMTilesRemote.Reading.wholeFile`): their tiles are cut from them, not asked
    /// (`cutFromWholeFile`); each is dropped once used.
    var wholeArchives: [String: (bytes: Data, freshness: Freshness)] = [:]
    /// The bytes of the whole archive each range being cut from one holds (by range), counted
    /// instead of the range's own length in `rangeBytesHeld`.
    var wholeCuts: [Int: UInt64] = [:]
    var archivesReading = false
    /// The plan is being made off the loop (`makePlan`, `collectPlans`).
    var planning = false
    /// Cancelled when the download stops (`stopDownload`), so that a plan being made for it
    /// stops too instead of holding the plan queue.
    let planCancel = PlanCancellation()
    /// Transfers under way: tag -> item.
    var inFlight: [Int: Fetch] = [:]
    var nonTileInFlight = 0
    /// Items waiting to be retried: (due time, item).
    var retries: [(due: Double, item: WorkItem)] = []
    var attempts: [WorkItem: Int] = [:]
    /// Objects written to the store, waiting for the next commit to enter the manifest.
    var pending: [(item: WorkItem, line: ManifestLine)] = []
    /// The lines of `pending`, rendered once (`ManifestLine.text`), for the journal and the manifest.
    var pendingText: [UInt8] = []
    /// Bytes of `pendingText` already appended to the journal (the rest goes at the end of a loop
    /// iteration, once the store has written the objects the lines name).
    var journaled = 0
    /// Per line of `pendingText`, in order: where it ends (a byte offset) and the store's write
    /// ticket it waits for (`TileStore.writesQueued` after its `put`; ascending).
    var pendingEnds: [(end: Int, ticket: Int)] = []
    /// Lines of `pendingEnds` already in the journal.
    var journaledLines = 0
    /// Lines of this download in the batch at the writer thread (not yet in `pending`, not yet counted).
    var committing = 0
    /// Tiles with content (a body) recorded so far, by source: a source without any at the end
    /// gets a `sourceEmpty` warning.
    var tilesWithContent: [String: Int] = [:]
    /// Why each tile recorded as failed (`maxFailedTiles`) failed, by manifest key, for failed.tsv.
    var failureReasons: [String: String] = [:]
    /// No new request before this time (a server's Retry-After).
    var holdUntil = 0.0
    /// When the last `fill` was held back by a rate limit (`RateLimiter`), the time to run it
    /// again; 0 when it was not. Not shown in the status.
    var rateWaitUntil = 0.0
    /// When this download last started a request (`Daemon.now()`), for the scheduler's turns.
    var lastIssued = 0.0
    /// The covered columns of the last tile row looked at (GeoJSON regions), by set, zoom and row.
    var rowCache: (set: Int, z: Int, y: Int, columns: [ClosedRange<Int>])?
    /// The shape's rings projected at the zoom of `rowCache` (projected once per zoom).
    var ringCache: (set: Int, z: Int, rings: ProjectedRings)?

    /// The plan's cover (`cover`, `locator`), made once per plan.
    var planCover: PlanCover?
    /// `planCover` for `plan`, made when the plan has corridor or parts sets; nil otherwise.
    func cover(_ plan: ResourcePlan) -> PlanCover? {
        guard plan.tileSets.contains(where: { $0.areas != nil }) else { return nil }
        return locator(plan)
    }

    /// `planCover` for any plan: where a tile index lies (`PlanCover.locate`, a binary search).
    func locator(_ plan: ResourcePlan) -> PlanCover {
        if let c = planCover { return c }
        let c = PlanCover(plan)
        planCover = c
        return c
    }

    /// How many tile indices from `i` on are known to be left out of their rectangle (0 when `i`
    /// is planned): by a corridor or parts, `i` alone; by a GeoJSON shape, in a row past its last
    /// column the rest of the row, between two of its columns up to the next, and in rows no ring
    /// reaches (`ProjectedRings.rowSpans`) up to the next row one does, within the rectangle. So
    /// the download's cursor crosses a shape's empty rows and columns in a step each, not one per
    /// index (two specks 140 degrees apart at z24: a rectangle of 25 million indices).
    func unplannedRun(_ i: Int, _ plan: ResourcePlan) -> Int {
        if let c = cover(plan), !c.isPlannedInAreas(i) { return 1 }
        guard i >= plan.resources.count, plan.tileSets.contains(where: { $0.shape != nil }),
              let (s, k, t) = locator(plan).locate(i), let shape = plan.tileSets[s].shape else { return 0 }
        let rect = plan.tileSets[s].rects[k]
        let restOfRow = rect.maxX - t.x + 1
        let columns: [ClosedRange<Int>]
        if let c = rowCache, c.set == s, c.z == t.z, c.y == t.y { columns = c.columns } else {
            if ringCache?.set != s || ringCache?.z != t.z { ringCache = (s, t.z, shape.indexed(z: t.z)) }
            let rings = ringCache!.rings
            if !rings.rowSpans.contains(where: { $0.contains(t.y) }) {
                let next = min(rings.rowSpans.first(where: { $0.lowerBound > t.y })?.lowerBound ?? Int.max, rect.maxY + 1)
                return restOfRow + (next - t.y - 1) * rect.width
            }
            columns = shape.columns(z: t.z, y: t.y, rings: rings)
            rowCache = (s, t.z, t.y, columns)
        }
        if columns.contains(where: { $0.contains(t.x) }) { return 0 }
        if let next = columns.first(where: { $0.lowerBound > t.x }), next.lowerBound <= rect.maxX { return next.lowerBound - t.x }
        return restOfRow
    }

    /// Before the plan: the style and the TileJSON documents fetched so far.
    var style: StyleDocument?
    var styleURL = ""
    var tileJSONs: [String: TileJSON] = [:]
    var needed: [WorkItem] = []
}

/// A refresh under way of a completed region (docs/refresh.md), held by `Region.refresh`.
struct RefreshRun {
    /// The pack's progress when the refresh started (the last refresh's tallies included), put
    /// back when the refresh is abandoned; nil for a refresh taken up again after a restart, when
    /// the pack's progress is read back from its plan and manifest instead.
    var progressBefore: RegionProgress?
}
