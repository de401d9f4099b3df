// The store interface: what the daemon, gc, verify, status and export need of a store, whichever
// backend it is on (a folder or an S3 bucket): `PackedStore` (PackedStore.swift) is the one
// implementation, objects in packs over a `Backend`.
import Foundation
import TileSpoolCore

/// A content-addressed object store plus the per-region files (request, plan, manifest) that say
/// which objects make a region. Objects are named by the SHA-256 of their bytes.
///
/// The durability rule is the same for both backends: `put` may return before the object is
/// durable (the disk store leaves it in the page cache; the S3 store queues the upload), and
/// `sync` returns only once every object `put` before the call is durable (syncfs; the PUT
/// answered 200 or 412). The daemon writes a manifest line naming an object only after a `sync`.
public protocol TileStore: AnyObject, Sendable {
    /// Where the store is, for logs, messages and hooks: a folder path or `s3://BUCKET/PREFIX`
    /// (never credentials).
    var location: String { get }
    /// True when several daemons may write the store at once (S3): a daemon then resumes only the
    /// regions its own spool has a status for. False for the disk store (one daemon, by lock).
    var isShared: Bool { get }
    /// The path of a lock file one daemon holds while it writes the store, or nil (S3: none).
    var lockPath: String? { get }

    /// Stores `data` under its SHA-256 (hex, lower case) unless an object of that name exists.
    /// - Returns: the SHA-256, and whether a new object was (or, for S3, is being) written.
    /// - Throws: `SystemError` "quota" (disk). A write or upload that fails later is answered by
    ///   `writeFailure(among:)` after the next `sync`.
    @discardableResult
    func put(_ data: Data) throws -> (sha256: String, isNew: Bool)
    /// The journal's write tickets: how many objects `put` has handed to the writer thread so far,
    /// the ticket of the last one (1 for the first). Read on the caller's thread. A store whose
    /// region files keep no journal (S3) hands out none: 0.
    var writesQueued: Int { get }
    /// Every write with a ticket up to this has run (the file is in place, though perhaps not yet
    /// durable; the PUT was answered) or failed. Whatever names an object (the journal) waits for
    /// its write, so that a `kill -9` never leaves a line naming an object that was still in memory.
    var writesDone: Int { get }
    /// Readable once the writes through the ticket given to `wakeWhenDone` are done (an eventfd
    /// the daemon's loop polls; `resetWake` empties it).
    var writesWakeFD: Int32 { get }
    /// Makes `writesWakeFD` readable once writes through `ticket` are done (at once if they are).
    func wakeWhenDone(through ticket: Int)
    /// Forgets the ticket waited for and empties `writesWakeFD` (the loop, every turn, before it
    /// looks at `writesDone`; no system call unless a wake came).
    func resetWake()
    /// Waits until every object `put` before this call is written or failed, and makes the
    /// written ones durable (disk: syncfs).
    /// - Throws: `SystemError` when the flush itself fails; nothing may then be recorded.
    func sync() throws
    /// After a `sync`: the failure of the last write of one of `sha256s` (a `SystemError` or an
    /// `S3Error`), or nil when every one of them is stored. A manifest line may name an object
    /// only when this is nil for it.
    func writeFailure(among sha256s: [String]) -> Error?
    /// The bytes of object `sha256` (at most `limit`).
    /// - Throws: `SystemError` or `S3Error` when absent or unreadable.
    func read(_ sha256: String, limit: Int) throws -> Data
    /// True when object `sha256` exists (one stat or one listing request).
    func contains(_ sha256: String) -> Bool
    /// True when object `sha256` exists and its bytes hash to its name.
    func isIntact(_ sha256: String) -> Bool
    /// The path of object `sha256` on the local filesystem, or nil when the store is remote.
    func localPath(_ sha256: String) -> String?
    /// Where object `sha256` lies in a sealed pack, from the index, without reading it; nil for a
    /// loose object, one only in the open pack, or one the store does not hold.
    func objectLocation(_ sha256: String) -> ObjectLocation?
    /// `objectLocation` of each of `sha256s`, found together (one forward read of the index
    /// rather than one read per object); the same count, in the same order.
    func objectLocations(_ sha256s: [String]) -> [ObjectLocation?]
    /// Reads objects `sha256s` in pack order (`ObjectLocation`: pack, then offset), the others
    /// after, calling `body` with each one's index in `sha256s` and its bytes (at most `limit`).
    /// - Throws: as `read`; what `body` throws (the rest is then not read).
    /// `known`: their `objectLocations` when the caller has them (one per name), else nil.
    func readObjects(_ sha256s: [String], at known: [ObjectLocation?]?, limit: Int, _ body: (Int, Data) throws -> Void) throws
    /// Writes object `sha256` (at most `limit` bytes) at the current offset of the open file
    /// `fd` (`path` names it in errors), from `location` when the caller has it (`objectLocation`;
    /// a pack gone since is answered by a look-up): on disk with `copy_file_range(2)` from its pack (the
    /// kernel copies or shares extents), else its bytes.
    /// - Returns: the bytes written.
    /// - Throws: as `read`; `SystemError` when `fd` cannot be written.
    @discardableResult
    func copyObject(_ sha256: String, at location: ObjectLocation?, to fd: Int32, path: String, limit: Int) throws -> Int

    /// The ids of the regions in the store (unsorted).
    /// - Throws: `S3Error` when the listing fails (the disk store never throws).
    func regionIDs() throws -> [String]
    /// The files of region `id` (which may not exist yet).
    func region(_ id: String) -> any RegionStorage
    /// True when region `id` has files in the store.
    func regionExists(_ id: String) -> Bool

    /// Removes what an earlier run of the daemon left half done (disk: temp files, objects an
    /// interrupted gc set aside). Called once when a daemon opens the store.
    func recoverLeftovers()
    /// Before a region starts (`Repository.refreshIndex`): the packs' sizes listed again, so that
    /// a pack cut short or removed since is not relied on, and on a store several daemons write
    /// (S3) the objects the others stored since, so that the region stores none of them again.
    /// - Throws: the store's error.
    func refreshIndex() throws
    /// For a reader beside a running daemon (`verify`): every index file listed again and the
    /// new ones opened, so that objects of packs sealed since the store was opened are found.
    /// - Throws: the store's error when the index cannot be listed.
    func reloadIndex() throws
    /// A store several daemons write (S3): the lease `id` (`Repository.newLeaseID`), saved at its
    /// start and every `Repository.leaseRenewal` seconds, removed when it stops; `text` says who
    /// holds it. A gc with a short grace period and a repair refuse to run while a lease is fresh
    /// (`freshLeases`). Nothing on a disk store (the daemon's lock file does it).
    /// - Throws: the store's error.
    func renewLease(_ id: String, text: String) throws
    func dropLease(_ id: String) throws
    /// The leases saved within `Repository.leaseStaleAfter` seconds of `now` (seconds since 1970),
    /// by name (`locks/<id>.lock`) with their age in seconds. - Throws: the store's error.
    func freshLeases(now: Double) throws -> [(name: String, age: Double)]
    /// The store quota (`--max-store-bytes`); enforced by the disk store only.
    var maxBytes: Int? { get set }
    /// Objects and bytes in the store as far as this process knows, nil when not measured.
    var usage: (objects: Int, bytes: Int)? { get }
    /// Objects and bytes this process has put since it opened the store.
    var added: (objects: Int, bytes: Int) { get }
    /// Space may have been freed (a user resumes a region that hit the quota, after a gc): the
    /// next refusal for the quota counts the store again first (disk; nothing on S3).
    func recountBeforeNextRefusal()
    /// Counts the objects and their bytes (a full listing: safe on any thread); nil when the
    /// backend does not measure (S3).
    func measureUsage() -> (objects: Int, bytes: Int)?
    /// Sets `usage` from a `measureUsage` that started when `added` was `addedAtStart`.
    func setUsage(_ measured: (objects: Int, bytes: Int), addedAtStart: (objects: Int, bytes: Int))

    /// The URL to probe while the store cannot be reached: non-nil when `error` is a network
    /// failure of this store (the region then pauses as `pausedNetwork`, not `failed`).
    func networkProbeURL(for error: Error) -> String?

    /// What gc does on this backend: removes objects no manifest in `referenced` names that are
    /// older than `grace` seconds (mtime or Last-Modified), and stale temp files (docs/gc.md).
    /// `referenced` is called after the candidates are listed.
    /// - Throws: `S3Error` when the bucket cannot be listed (nothing is removed then).
    func collectGarbage(grace: Double, referenced: () throws -> Set<String>) throws -> GCReport
    /// Re-hashes every object; with `repair`, bad ones are moved away (disk: `quarantine/`) or
    /// deleted (S3). `referenced` (the objects the regions name, as gc's mark gives them) is
    /// called only when a damaged pack holds records neither a walk nor the index places: those
    /// objects are looked for in it by name (nil: none is).
    /// - Throws: `S3Error` when the bucket cannot be listed; what `referenced` throws.
    func checkObjects(repair: Bool, referenced: (() throws -> Set<String>)?) throws -> ObjectCheck
}

/// What `TileStore.checkObjects` found.
public struct ObjectCheck: Sendable {
    public var checked = 0
    /// Objects whose bytes do not hash to their name, as `ab/<sha256>`.
    public var bad: [String] = []
    public var badNames = Set<String>()
    /// The names of the good objects, when the backend collects them (S3, where asking for one
    /// object costs a request); nil for the disk store (a `stat` per manifest line is cheaper
    /// than holding every name).
    public var present: Set<String>?
    public var quarantined = 0
    /// Packs found whole and sound but listed wrongly by the index, indexed again from their own
    /// records by `verify --repair` (kept, not quarantined).
    public var reindexed = 0
    /// Leftover temp files, as paths relative to the store.
    public var tempFiles: [String] = []
    /// Packs no index file lists (`packs/<sha256>.pack`), found by a plain verify: their objects
    /// are sound but `cat` and exports cannot find them until gc, `verify --repair` or a daemon
    /// start indexes them. Not damage: a running daemon's newest pack is one for a moment, and a
    /// gc cut short by a full disk leaves some.
    public var unindexedPacks: [String] = []
    /// Entries in the store's folders that TileSpool never makes (`Backend.foreignEntries`:
    /// a symlink, FIFO, socket, device or dot-folder), as `name (kind)`: left alone, reported.
    public var foreignEntries: [String] = []
    public init() {}
}

/// The files of one region in a store: the request, the plan, the manifest (written in batches
/// after the objects it names are durable), the journal (disk only), a refresh's files, and the
/// list of failed tiles. `RegionFiles` (disk) and `S3RegionFiles` implement it.
public protocol RegionStorage: AnyObject, Sendable {
    /// Where the files are, for messages: a folder or `s3://BUCKET/PREFIX/regions/<id>/`.
    var location: String { get }
    /// `message` (an error's text) as people read it: paths by which the files were reached
    /// written as the region's folder (a folder store reaches them by descriptor,
    /// `/proc/self/fd/<fd>/...`); unchanged when there is nothing to write back.
    func shown(_ message: String) -> String
    /// Why these are not files of a region TileSpool can use, worded for the log and the status
    /// (on disk: a symlink, or anything but a folder, at `regions/<id>`, never followed); nil
    /// when they are (always in a bucket). `id` is the region's, named in the message.
    func refusal(id: String) -> String?
    /// Creates the region and writes its request (durably). `exclusive`: only where no request
    /// is stored (a new id on a store other daemons write: of two daemons creating one id at once,
    /// exactly one gets true; disk, `RENAME_NOREPLACE`; S3, `If-None-Match: *`).
    /// - Returns: false when `exclusive` found a request stored; nothing was written.
    @discardableResult
    func create(request: RegionRequest, exclusive: Bool) throws -> Bool
    /// The stored request. - Throws: when absent, unreadable or not a valid request.
    func loadRequest() throws -> RegionRequest
    /// The stored request's bytes, as written.
    func requestData() throws -> Data
    /// True while a TileSpool process is writing the request of a region being created (on disk
    /// its folder is made a moment before `request.json` is renamed into it: a temp file
    /// `.tmp-request.json-<pid>-<n>` of a live TileSpool process, `LeftBehind.inFlight` with
    /// `lockHolders`); false on S3, where the request is one PUT. For `verify` beside a daemon.
    func requestBeingWritten(lockHolders: Set<pid_t>) -> Bool
    /// Writes the plan (durably).
    func savePlan(_ plan: ResourcePlan) throws
    /// The stored plan, nil when none was written (or it cannot be read: see `readFailure`).
    func loadPlan() -> ResourcePlan?
    /// Calls `body` for every complete line of the manifest, in order (see `RegionFiles`).
    func readManifest(cutPartialLine: Bool, _ body: (ManifestLine) -> Void)
    /// The manifest as it is now, to be read (several times, in order) without seeing a later
    /// append or swap: what an export reads, so that it is one version of the pack.
    /// - Throws: the store's error when there is no manifest or it cannot be listed or opened.
    func manifestSnapshot() throws -> any ManifestSnapshot
    /// Calls `body` for every complete line of the journal (nothing on a backend without one).
    func readJournal(cutPartialLine: Bool, _ body: (ManifestLine) -> Void)
    /// Set when the last `readManifest` or `loadPlan` could not read the store (a network
    /// failure): what it returned is incomplete. Always nil on disk.
    var readFailure: Error? { get }
    /// Records `lines` durably after the manifest's other lines.
    func appendToManifest(_ lines: [ManifestLine]) throws
    /// Records rendered lines (`ManifestLine.text`, in order) durably after the manifest's others.
    func appendToManifest(text bytes: [UInt8]) throws
    /// Replaces the whole manifest by `lines` (verify --repair, with the daemon stopped).
    func replaceManifest(_ lines: [ManifestLine]) throws
    /// When the manifest was last written, seconds since 1970; nil when there is none.
    func manifestModified() -> Double?
    /// Journal operations (see `RegionFiles`); no-ops where every `sync` is final (S3).
    func appendToJournal(text bytes: ArraySlice<UInt8>) throws
    func replaceJournal(with bytes: ArraySlice<UInt8>)
    func clearJournal()
    /// Releases open handles (reopened on the next append).
    func closeManifest()
    /// Joins a manifest kept in pieces into one (S3: the segments of every commit into one
    /// object, `ManifestSegments`); nothing on disk, where the manifest is one file.
    /// - Returns: how many pieces were joined (0: nothing to do).
    /// - Throws: the store's error; the manifest is then as it was.
    @discardableResult
    func compactManifest() throws -> Int
    /// Removes the manifest, journal and plan (a fresh download of the same id).
    func resetDownload()
    /// A request that changes only credentials: keeps the manifest's lines (without the style and
    /// TileJSON documents' when `dropDocuments`), drops the journal, plan and any refresh.
    func keepForNewCredentials(dropDocuments: Bool) throws
    /// Removes every file of the region.
    func remove()
    /// Writes the list of failed tiles (`failed.tsv`), or removes it when `text` is nil.
    func saveFailedList(_ text: String?) throws

    /// Refresh (docs/refresh.md); see `RegionFiles` and, for S3, `S3RegionFiles`.
    var refreshStorage: any RegionStorage { get }
    func beginRefresh(scope: RefreshScope) throws
    func refreshUnderWay() -> RefreshScope?
    func commitRefresh() throws
    func finishInterruptedRefreshCommit() throws -> Bool
    func abandonRefresh()
}

/// One version of a region's manifest (`RegionStorage.manifestSnapshot`).
public protocol ManifestSnapshot: AnyObject, Sendable {
    /// Names this version of the pack: it differs after any append, swap or rewrite of the
    /// manifest (disk: the file's device, inode, size and mtime; S3: the newest object read).
    var version: String { get }
    /// Calls `body` for every complete line, in order, as they were when the snapshot was taken;
    /// with `skippingTiles`, lines of kind `tile` are passed over unparsed (a reader of the
    /// other resources does not pay for a million tile lines).
    /// - Throws: what `body` throws; the store's error when a part can no longer be read.
    func forEachLine(skippingTiles: Bool, _ body: (ManifestLine) throws -> Void) throws
}

extension ManifestSnapshot {
    /// `forEachLine(skippingTiles: false, body)`: every line.
    public func forEachLine(_ body: (ManifestLine) throws -> Void) throws { try forEachLine(skippingTiles: false, body) }
}

extension RegionStorage {
    /// Creates the region and writes its request, replacing one stored (`create(request:exclusive:)`).
    public func create(request: RegionRequest) throws { try create(request: request, exclusive: false) }

    /// A cheap check, at start, that a status saying `completed` describes what the store holds:
    /// false when there is no manifest, no plan, or a plan of another size than the status's
    /// `resourcesExpected` (a pack replaced by a new request whose status was never written).
    /// A store that cannot be read (S3 down) counts as holding it (nothing is concluded).
    public func holdsCompletedPack(expected: Int) -> Bool {
        guard let plan = loadPlan() else { return readFailure != nil }
        if plan.count != expected { return false }
        if plan.count == 0 { return true }
        do { _ = try manifestSnapshot() } catch {
            // No manifest at all (ENOENT on disk, 404 on S3); any other failure tells nothing.
            let absent = (error as? SystemError)?.errno == ENOENT || (error as? S3Error)?.status == 404
            return !absent
        }
        return true
    }

    /// The version of the pack's manifest now (`ManifestSnapshot.version`), nil when it has none.
    public func packVersion() -> String? { (try? manifestSnapshot())?.version }

    /// `message` unchanged: only a store that names its files by descriptor has paths to write
    /// back (`RegionFiles.shown`).
    public func shown(_ message: String) -> String { message }

    /// `readManifest` without cutting a partial line (readers beside the daemon).
    public func readManifest(_ body: (ManifestLine) -> Void) { readManifest(cutPartialLine: false, body) }
    /// `readJournal` without cutting a partial line.
    public func readJournal(_ body: (ManifestLine) -> Void) { readJournal(cutPartialLine: false, body) }
}

/// Where `--store` points: a folder, or `s3://BUCKET[/PREFIX]` with the endpoint and credentials
/// the way AWS tools take them (see `S3Config.from`).
public enum StoreSpec {
    /// True when the folder `path` holds a store (its `regions/`, `packs/` or, from earlier
    /// versions, `objects/` folder): a mistyped `--store` must not look like an empty store.
    public static func looksLikeStore(_ path: String) -> Bool {
        ["regions", "packs", "objects"].contains { Files.entryType(path + "/" + $0) == .directory }
    }

    /// True when `store` names an S3 store.
    public static func isS3(_ store: String) -> Bool { store.hasPrefix("s3://") }

    /// Opens the store `store` names: packed objects and region files (`PackedStore`) on the
    /// folder (created when missing), or in the bucket (nothing is sent until it is used).
    /// - Parameters:
    ///   - endpoint: `--s3-endpoint` (else `AWS_ENDPOINT_URL`).
    ///   - pathStyle: path-style URLs (`--s3-addressing path`, the default) or virtual-hosted.
    ///   - scratch: for a bucket, the local folder where packs are written before they are
    ///     uploaded and index files are kept (the daemon's `<spool>/scratch`); a folder store
    ///     uses its own `tmp/`.
    /// - Throws: `S3Error` for a malformed URL or missing endpoint or credentials; `SystemError`
    ///   when the folder cannot be made; the backend's error when the index cannot be read.
    public static func open(_ store: String, endpoint: String?, pathStyle: Bool, scratch: String? = nil,
                            environment: [String: String] = ProcessInfo.processInfo.environment) throws -> any TileStore {
        if isS3(store) {
            let config = try S3Config.from(url: store, endpoint: endpoint, environment: environment, pathStyle: pathStyle)
            let folder = scratch ?? (NSTemporaryDirectory() + "/tilespool-scratch-\(getuid())-\(config.bucket)")
            return try PackedStore(backend: S3Backend(config: config), scratch: folder)
        }
        return try PackedStore(root: store)
    }
}
