// A region's files in an S3-compatible object store (issue 12; docs/s3.md); the objects are the
// repository's packs (Repository.swift, PackedStore.swift):
//
//     PREFIX/objects/<first 2 hex digits>/<64 hex digits>     each object's SHA-256 is its name
//     PREFIX/regions/<id>/request.json, plan.json, failed.tsv
//     PREFIX/regions/<id>/manifest/<10-digit number>.tsv       the manifest, one immutable segment
//                                                              per commit batch, in number order
//     PREFIX/regions/<id>/manifest/<10-digit N>.all.tsv        segments 0...N in one object, byte
//                                                              for byte (written once a region is
//                                                              completed; see ManifestSegments)
//
// `put` hashes on the caller's thread and queues the upload for a small pool of worker threads
// (one S3 client each), so uploads run concurrently with the downloads; `sync` waits for the
// uploads queued before it, so a manifest segment is written only after the PUTs of the objects it
// names succeeded. Objects are written with `If-None-Match: *` and their SHA-256 declared in
// `x-amz-content-sha256` (the server checks it).
import Foundation
import TileSpoolCore

/// A few S3 clients shared by threads: each call takes one (or makes one) and gives it back.
final class S3ClientPool: @unchecked Sendable {
    let config: S3Config
    private let lock = NSLock()
    private var free: [S3Client] = []
    init(config: S3Config) { self.config = config }

    /// Runs `body` with a client no other thread uses meanwhile.
    func with<T>(_ body: (S3Client) throws -> T) rethrows -> T {
        lock.lock()
        let client = free.popLast() ?? S3Client(config: config)
        lock.unlock()
        defer { lock.lock(); free.append(client); lock.unlock() }
        return try body(client)
    }
}

extension S3RegionFiles {
    /// gc's part for manifests kept in segments: removes the segments a compacted object holds
    /// once that object is older than `grace` seconds (`ManifestSegments`); a region's manifest
    /// only, not a refresh's (one level deeper).
    /// - Returns: how many were removed.
    /// - Throws: the backend's error.
    static func removeObsoleteSegments(_ backend: any Backend, grace: Double, now: Double) throws -> Int {
        var byRegion: [Substring: [S3Object]] = [:]
        for f in try backend.list(prefix: "regions/") {
            let parts = f.name.split(separator: "/", omittingEmptySubsequences: false)
            guard parts.count == 4, parts[2] == "manifest" else { continue }
            byRegion[f.name.dropLast(parts[3].count), default: []].append(S3Object(key: f.name, size: f.size, lastModified: f.modified))
        }
        var removed = 0
        for (_, objects) in byRegion {
            let layout = ManifestSegments(listing: objects)
            guard let at = layout.compactedAt, now - at >= grace else { continue }
            for o in layout.obsolete { try backend.remove(o.key); removed += 1 }
        }
        return removed
    }
}

/// How a listing of `regions/<id>/manifest/` is read (pure: keys in, keys out).
///
/// Segment `<N>.tsv` holds the lines of one commit; a compacted object `<N>.all.tsv` holds the
/// bytes of segments 0...N concatenated in number order. Readers take the newest compacted object
/// and the segments numbered above it; the segments it covers (and older compacted objects) are
/// obsolete: never read again, and removed by `gc` once the compacted object is older than the
/// grace period, so a reader that listed before the compaction still finds every segment it
/// listed. The next segment's number is one above every number listed.
public struct ManifestSegments: Sendable, Equatable {
    /// The objects to read, in order.
    public var read: [S3Object] = []
    /// The objects covered by the newest compacted one.
    public var obsolete: [S3Object] = []
    /// The newest compacted object's Last-Modified (seconds since 1970), if there is one.
    public var compactedAt: Double?
    /// The number the next segment gets.
    public var next = 0

    /// The largest segment number a key holds (10 digits).
    public static let maxNumber = 9_999_999_999

    /// `n` (0 ... `maxNumber`) as a key writes it: 10 decimal digits, zero-padded (in 64 bits:
    /// `%010d` is 32).
    public static func number(_ n: Int) -> String {
        let digits = String(n)
        return String(repeating: "0", count: max(0, 10 - digits.count)) + digits
    }

    /// The number of a segment or compacted object's key (`.../0000000042.tsv` or
    /// `.../0000000042.all.tsv`), and whether it is compacted; nil for any other key.
    /// The number is up to 10 decimal digits, as the keys are written, without a sign (a review
    /// of 2026-12-07: a planted `9223372036854775807.tsv` made `next` overflow at every read).
    public static func parse(_ key: String) -> (number: Int, compacted: Bool)? {
        let name = key.split(separator: "/").last ?? ""
        func number(_ s: Substring) -> Int? {
            guard !s.isEmpty, s.count <= 10, s.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
            return Int(s)
        }
        if name.hasSuffix(".all.tsv"), let n = number(name.dropLast(8)) { return (n, true) }
        if name.hasSuffix(".tsv"), let n = number(name.dropLast(4)) { return (n, false) }
        return nil
    }

    /// The reading of one listing (any order).
    public init(listing: [S3Object]) {
        var segments: [(Int, S3Object)] = []
        var compacted: [(Int, S3Object)] = []
        for o in listing {
            guard let (n, isAll) = ManifestSegments.parse(o.key) else { continue }
            if isAll { compacted.append((n, o)) } else { segments.append((n, o)) }
            next = max(next, n + 1)
        }
        segments.sort { $0.0 < $1.0 }
        compacted.sort { $0.0 < $1.0 }
        guard let (through, base) = compacted.last else { read = segments.map(\.1); return }
        read = [base] + segments.filter { $0.0 > through }.map(\.1)
        obsolete = compacted.dropLast().map(\.1) + segments.filter { $0.0 <= through }.map(\.1)
        compactedAt = base.lastModified
    }
}

/// A region's files in the bucket: `regions/<id>/request.json`, `plan.json`, `failed.tsv`, and the
/// manifest as numbered immutable segments `regions/<id>/manifest/<0000000000>.tsv` (the first
/// starts with the manifest header; concatenated in number order they are the disk store's
/// `manifest.tsv`). A segment is written with `If-None-Match: *`: a 412 means another daemon
/// writes the same region, and the append fails instead of overwriting (docs/s3.md). No journal:
/// an upload is durable once answered, and objects uploaded but not yet recorded are fetched
/// again after a crash (their PUT then answers 412). A refresh works in `regions/<id>/refresh/`.
public final class S3RegionFiles: RegionStorage, @unchecked Sendable {
    let store: any S3Access
    public let id: String
    /// `regions/<id>/`, or `regions/<id>/refresh/` for the files of a refresh under way.
    private let base: String
    private var nextSegment: Int?
    public private(set) var readFailure: Error?

    convenience init(store: any S3Access, id: String) { self.init(store: store, id: id, base: "regions/\(id)/") }
    private init(store: any S3Access, id: String, base: String) { self.store = store; self.id = id; self.base = base }
    private var isRefresh: Bool { base.hasSuffix("/refresh/") }

    public var location: String { "\(store.location)/\(base)" }

    /// One request, retried while a retry can help (`S3ObjectStore.retrying`).
    @discardableResult
    private func client<T>(_ body: (S3Client) throws -> T) throws -> T { try store.retrying(body) }

    /// Keys in a bucket are never links: always usable.
    public func refusal(id: String) -> String? { nil }

    @discardableResult
    public func create(request: RegionRequest, exclusive: Bool) throws -> Bool {
        if exclusive {
            // `regions/<id>/owner`, a token of this call's own, written with `If-None-Match: *`:
            // of daemons creating the same new id at once, exactly one wins, even for requests of
            // the same bytes (attack rounds 53 and 56: with request.json as the claim, two
            // identical requests both won). A PUT retried after its answer was lost finds its
            // own token: still this one's.
            let token = Data((UUID().uuidString.lowercased() + "\n").utf8)
            let outcome = try client { c in try c.put(base + "owner", token, ifNoneMatch: true) }
            if outcome != .created, (try? client { c in try c.get(base + "owner") }) != token { return false }
        }
        let data = JSONKind.serialize(request.jsonObject, pretty: true)
        try client { c in try c.put(base + "request.json", data) }
        return true
    }

    public func requestData() throws -> Data {
        guard let d = try client({ c in try c.get(base + "request.json") }) else {
            throw S3Error(status: 404, code: "NoSuchKey", message: "\(location)request.json does not exist")
        }
        return d
    }

    /// A request is one PUT: never half written.
    public func requestBeingWritten(lockHolders: Set<pid_t>) -> Bool { false }

    public func loadRequest() throws -> RegionRequest {
        try RequestValidator.validate(try requestData(), fileName: id + ".json", maxSize: RequestValidator.maxStoredSize, rowBudget: false)
    }

    public func savePlan(_ plan: ResourcePlan) throws {
        let data = RegionFiles.planData(plan)
        try client { c in try c.put(base + "plan.json", data) }
    }

    public func loadPlan() -> ResourcePlan? {
        do {
            guard let data = try client({ c in try c.get(base + "plan.json") }) else { return nil }
            return try? JSONDecoder().decode(ResourcePlan.self, from: data)
        } catch {
            readFailure = error
            return nil
        }
    }

    /// The largest manifest `compactManifest` joins (bytes).
    public static let maxCompactedBytes = 64 << 20

    /// Every segment and compacted object of the manifest (`ManifestSegments`).
    private func listing() throws -> [S3Object] {
        try client { c in try c.list(prefix: base + "manifest/") }.filter { ManifestSegments.parse($0.key) != nil }
    }

    private func layout() throws -> ManifestSegments { ManifestSegments(listing: try listing()) }

    /// Reads the manifest's objects in order (`ManifestSegments.read`). An object is whole or
    /// absent (S3 writes an object at once), so `cutPartialLine` has nothing to cut. One listed
    /// but gone when read (removed meanwhile by a `delete`, a repair, or a gc with a grace period
    /// shorter than the read) is a `readFailure`: what was read is incomplete.
    public func readManifest(cutPartialLine: Bool, _ body: (ManifestLine) -> Void) {
        readFailure = nil
        do {
            let layout = try layout()
            for s in layout.read {
                let data = try getListed(s)
                for line in String(decoding: data, as: UTF8.self).split(separator: "\n") {
                    if let l = ManifestLine(line) { body(l) }
                }
            }
            if nextSegment == nil { nextSegment = layout.next }
        } catch {
            readFailure = error
        }
    }

    /// The objects of the manifest listed now (`RegionStorage.manifestSnapshot`): reads GET those
    /// keys, which are never rewritten; one removed meanwhile (a gc after a compaction older than
    /// its grace period, a delete) makes the read fail instead of coming out short.
    /// - Throws: `S3Error` when the listing fails or there is no manifest.
    public func manifestSnapshot() throws -> any ManifestSnapshot {
        let read = try layout().read
        guard let last = read.last else {
            throw S3Error(status: 404, code: "NoSuchKey", message: "\(location)manifest/ has no objects")
        }
        // A compaction joins segments 0...N into N.all.tsv: the same lines, the same number.
        let number = ManifestSegments.parse(last.key)?.number ?? -1
        return S3ManifestSnapshot(objects: read, version: "s3:\(number)", get: { [self] o in try getListed(o) })
    }

    /// Writes the manifest's segments as one object (`<N>.all.tsv`, the bytes of segments 0...N
    /// in order, `If-None-Match: *`), so that reading a completed region costs one GET instead of
    /// one per commit. Nothing is deleted: `gc` removes the covered segments once the compacted
    /// object is older than its grace period (`ManifestSegments`).
    /// - Returns: the number of objects that were joined (0 when there was nothing to join).
    /// - Throws: `S3Error` from the listing, a GET or the PUT; the manifest is then as it was.
    @discardableResult
    public func compactManifest() throws -> Int {
        let layout = try layout()
        guard layout.read.count > 1, let last = layout.read.last, let (n, _) = ManifestSegments.parse(last.key) else { return 0 }
        // The joined bytes are held in memory: a manifest above this stays in pieces (about
        // 400,000 resources), read as before.
        guard layout.read.reduce(0, { SaturatingCount.add($0, $1.size) }) <= S3RegionFiles.maxCompactedBytes else { return 0 }
        try putCompacted(number: n, try joined(layout.read)) // 412: made already, from the same segments
        return layout.read.count
    }

    /// The bytes of `objects`, concatenated in order.
    /// - Throws: `S3Error` from a GET, also for one listed but gone (the manifest changed meanwhile).
    private func joined(_ objects: [S3Object]) throws -> Data {
        var out = Data()
        for o in objects { out.append(try getListed(o)) }
        return out
    }

    /// The bytes of an object a listing gave.
    /// - Throws: `S3Error` from the GET, also when it is gone (the manifest changed meanwhile).
    private func getListed(_ o: S3Object) throws -> Data {
        guard let data = try client({ c in try c.get(o.key) }) else {
            throw S3Error(status: 404, code: "NoSuchKey", message: "\(store.location)/\(o.key) was listed but is gone: the manifest changed while it was read; read it again")
        }
        return data
    }

    /// Whether `key` exists, by a listing of that exact key (no body is sent, however large).
    private func exists(_ key: String) throws -> Bool {
        try client { c in try c.list(prefix: key) }.contains { $0.key == key }
    }

    public func readJournal(cutPartialLine: Bool, _ body: (ManifestLine) -> Void) {}

    public func appendToManifest(_ lines: [ManifestLine]) throws {
        var text = ""
        for l in lines { text += l.text }
        try appendToManifest(text: Array(text.utf8))
    }

    /// Writes the lines as the next segment (`If-None-Match: *`).
    /// - Throws: `S3Error`; status 412 with code `SegmentExists` when another writer took the number.
    public func appendToManifest(text bytes: [UInt8]) throws {
        guard !bytes.isEmpty else { return }
        if nextSegment == nil { nextSegment = try layout().next }
        let n = nextSegment!
        // Keys hold 10 digits (`ManifestSegments.parse`): a listing at 9999999999 (planted; no
        // manifest has that many segments) stops appends rather than write keys never read.
        guard n <= ManifestSegments.maxNumber else {
            throw S3Error(message: "\(store.location)/\(base)manifest/ has a segment numbered \(n - 1): no segment can follow it; remove the keys that are not this region's")
        }
        let data = Data(((n == 0 ? ManifestLine.header : "")).utf8) + Data(bytes)
        let key = base + "manifest/" + ManifestSegments.number(n) + ".tsv"
        var outcome = try client { c in try c.put(key, data, ifNoneMatch: true) }
        // A retried PUT whose first attempt was written but not answered finds its own segment.
        if outcome == .alreadyExists, (try? client { c in try c.get(key) }) == data { outcome = .created }
        guard outcome == .created else {
            nextSegment = nil
            throw S3Error(status: 412, code: "SegmentExists",
                          message: "\(store.location)/\(key) was written by someone else: another daemon is writing region '\(id)' (a region belongs to one daemon at a time, docs/s3.md)")
        }
        nextSegment = n + 1
    }

    /// Replaces the manifest by `lines` in one PUT (a compacted object numbered above every key):
    /// a reader sees the old manifest or the new one, never a part (docs/s3.md).
    public func replaceManifest(_ lines: [ManifestLine]) throws {
        var text = ManifestLine.header
        for l in lines { text += l.text }
        let number = try layout().next
        try putCompacted(number: number, Data(text.utf8))
        nextSegment = number + 1
    }

    /// Writes `manifest/<number>.all.tsv` (`If-None-Match: *`; a 412 means an earlier try of the
    /// same swap wrote it). With `number` above every key listed, this one PUT replaces the whole
    /// manifest for every reader (`ManifestSegments`): the swap of a repair, a credentials
    /// change and a refresh. The keys it supersedes go with `gc` after the grace period.
    private func putCompacted(number: Int, _ data: Data) throws {
        _ = try client { c in try c.put(compactedKey(number), data, ifNoneMatch: true) }
    }

    public func manifestModified() -> Double? { (try? layout())?.read.map(\.lastModified).max() }

    public func appendToJournal(text bytes: ArraySlice<UInt8>) throws {}
    public func replaceJournal(with bytes: ArraySlice<UInt8>) {}
    public func clearJournal() {}
    public func closeManifest() {}

    public func resetDownload() {
        abandonRefresh()
        nextSegment = nil
        for s in (try? listing()) ?? [] { try? client { c in try c.delete(s.key) } }
        try? client { c in try c.delete(base + "plan.json") }
        try? client { c in try c.delete(base + "failed.tsv") }
    }

    /// Keeps the manifest (rewritten without the style and TileJSON lines when `dropDocuments`)
    /// and drops the plan.
    public func keepForNewCredentials(dropDocuments: Bool) throws {
        abandonRefresh()
        nextSegment = nil
        if dropDocuments {
            var kept: [ManifestLine] = []
            readManifest(cutPartialLine: false) { line in if line.kind != .style && line.kind != .source { kept.append(line) } }
            if let e = readFailure { throw e }
            try replaceManifest(kept)
        }
        try client { c in try c.delete(base + "plan.json") }
    }

    /// Removes every key of the region: `request.json` first (a region without its request is one
    /// being deleted, which `verify` beside it passes over), `owner` last (while a delete runs the
    /// id stays taken, `regionExists` and a claim's `owner`, so that no daemon takes it and has
    /// its new keys removed by the rest of the delete).
    public func remove() {
        nextSegment = nil
        let keys = ((try? client { c in try c.list(prefix: base) }) ?? []).map(\.key)
        func rank(_ k: String) -> Int { k == base + "owner" ? 2 : k == base + "request.json" ? 0 : 1 }
        for k in keys.sorted(by: { (rank($0), $0) < (rank($1), $1) }) {
            try? client { c in try c.delete(k) }
        }
    }

    public func saveFailedList(_ text: String?) throws {
        guard let text else { try client { c in try c.delete(base + "failed.tsv") }; return }
        try client { c in try c.put(base + "failed.tsv", Data(text.utf8)) }
    }

    // MARK: - Refresh (docs/refresh.md, docs/s3.md)
    //
    // A refresh writes its plan and manifest segments under `regions/<id>/refresh/`, beside
    // `refresh.json` (its scope); the pack's own files are not touched meanwhile. The swap is one
    // PUT: the refreshed manifest, whole, as the compacted object `manifest/<M>.all.tsv` with M
    // above every number listed, which readers take over every older segment (ManifestSegments).
    // `refresh/commit.json` (naming M) is written first, so a crash during the swap is finished
    // by the next start (roll forward), as on disk.

    /// The files of a refresh under way (the refresh's own storage has none).
    private lazy var refreshFiles = S3RegionFiles(store: store, id: id, base: base + "refresh/")
    public var refreshStorage: any RegionStorage { isRefresh ? self : refreshFiles }
    private var refreshInfoKey: String { base + "refresh/refresh.json" }
    private var refreshCommitKey: String { base + "refresh/commit.json" }

    /// Starts a refresh: a swap left unfinished is finished first, any earlier refresh's files go,
    /// then `refresh/refresh.json` is written.
    /// - Throws: `S3Error` from the requests.
    public func beginRefresh(scope: RefreshScope) throws {
        _ = try finishInterruptedRefreshCommit()
        try deleteRefreshFiles()
        try client { c in try c.put(refreshInfoKey, JSONKind.serialize(scope.jsonObject)) }
    }

    /// The scope of the refresh under way; nil when there is none (or the bucket did not answer:
    /// nothing is dropped then, the next start asks again).
    public func refreshUnderWay() -> RefreshScope? {
        guard let data = try? client({ c in try c.get(refreshInfoKey) }),
              let o = (try? JSONKind.parse(data)) as? [String: Any] else { return nil }
        return RefreshScope(jsonObject: o)
    }

    /// Swaps the refreshed manifest (and plan, when it differs) in, then removes `refresh/`
    /// (`RefreshSwap.commit`: the manifest's PUT is the commit point).
    /// - Throws: `S3Error` when the swap did not happen: the commit mark could not be written, or
    ///   the new manifest's PUT failed (the mark is then taken back, and the pack is as it was).
    ///   Once the manifest is in, the rest (plan, clean-up) is not an error here: what fails is
    ///   finished by the next start or the next refresh (the mark stays).
    public func commitRefresh() throws { try RefreshSwap.commit(self) }

    /// True when a refresh's swap was cut short (`refresh/commit.json` exists): it is finished.
    /// - Throws: `S3Error` from the requests of the swap.
    /// A mark whose swap cannot have happened (no new manifest, no refreshed segments left to make
    /// it from) is removed instead: false, the pack as it was.
    public func finishInterruptedRefreshCommit() throws -> Bool { try RefreshSwap.finishInterrupted(self) }

    private func compactedKey(_ number: Int) -> String { base + "manifest/" + ManifestSegments.number(number) + ".all.tsv" }

    /// The refreshed segments, concatenated, as `manifest/<number>.all.tsv`, unless there already.
    /// - Throws: `S3Error`; also when the refresh has no segment (a swap never writes an empty
    ///   manifest for lack of its lines).
    private func putRefreshedManifest(number: Int) throws {
        if try exists(compactedKey(number)) { return }
        let objects = try refreshFiles.layout().read
        guard !objects.isEmpty else {
            throw S3Error(status: 404, code: "NoSuchKey", message: "\(store.location)/\(refreshFiles.base)manifest/ has no segment: nothing to swap in")
        }
        try putCompacted(number: number, try joined(objects))
    }

    /// Drops a refresh under way and its files; the pack's files are left as they were. While a
    /// commit mark is there (`commitRefresh` could not take it back), the swap is finished instead,
    /// as the next start would; if that fails too, every refresh file stays for the next start
    /// (never the mark without the segments it is finished from). `RefreshSwap.abandon`.
    public func abandonRefresh() {
        guard !isRefresh else { return }
        RefreshSwap.abandon(self)
    }

    /// Deletes every key under `refresh/`, the scope and commit mark last.
    private func deleteRefreshFiles() throws {
        refreshFiles.nextSegment = nil
        let keys = try client { c in try c.list(prefix: base + "refresh/") }.map(\.key)
        let last = [refreshInfoKey, refreshCommitKey]
        for k in keys where !last.contains(k) { try client { c in try c.delete(k) } }
        for k in last where keys.contains(k) { try client { c in try c.delete(k) } }
    }
}

/// The objects of an S3 manifest as listed once (`S3RegionFiles.manifestSnapshot`).
final class S3ManifestSnapshot: ManifestSnapshot, @unchecked Sendable {
    let objects: [S3Object]
    let version: String
    private let get: (S3Object) throws -> Data
    init(objects: [S3Object], version: String, get: @escaping (S3Object) throws -> Data) {
        self.objects = objects; self.version = version; self.get = get
    }
    func forEachLine(skippingTiles: Bool, _ body: (ManifestLine) throws -> Void) throws {
        for o in objects {
            let data = try get(o)
            for line in String(decoding: data, as: UTF8.self).split(separator: "\n") {
                if skippingTiles && line.hasPrefix("tile\t") { continue }
                if let l = ManifestLine(line) { try body(l) }
            }
        }
    }
}

/// The swap's steps in a bucket (`RefreshSwap`): the mark is `refresh/commit.json` naming the
/// slot M, the number above every key of `manifest/` when it was written; the manifest is
/// installed as `manifest/<M>.all.tsv` (one PUT, `If-None-Match: *`), which readers take over
/// every older segment (`ManifestSegments`).
extension S3RegionFiles: RefreshSwapSteps {
    var regionID: String { id }

    func writeCommitMark() throws -> Int {
        let through = try layout().next
        try client { c in try c.put(refreshCommitKey, JSONKind.serialize(["manifestNumber": through])) }
        return through
    }

    func commitMark() throws -> Int? {
        guard let data = try client({ c in try c.get(refreshCommitKey) }) else { return nil }
        guard let o = (try? JSONKind.parse(data)) as? [String: Any], let n = (o["manifestNumber"] as? NSNumber)?.intValue, n >= 0, n <= ManifestSegments.maxNumber else {
            throw S3Error(message: "\(store.location)/\(refreshCommitKey) is not a commit mark")
        }
        return n
    }

    func removeCommitMark() throws { try client { c in try c.delete(refreshCommitKey) } }

    func refreshedManifestInstalled(slot: Int) throws -> Bool { try exists(compactedKey(slot)) }

    func refreshHasManifest() throws -> Bool { try !refreshFiles.layout().read.isEmpty }

    func installRefreshedManifest(slot: Int) throws {
        try putRefreshedManifest(number: slot)
        nextSegment = slot + 1
    }

    func installRefreshedPlan() throws {
        if let plan = try client({ c in try c.get(refreshFiles.base + "plan.json") }),
           try client({ c in try c.get(base + "plan.json") }) != plan {
            try client { c in try c.put(base + "plan.json", plan) }
        }
    }

    func removeRefreshFiles() throws { try deleteRefreshFiles() }
}
