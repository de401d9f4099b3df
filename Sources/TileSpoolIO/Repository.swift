// The store, written once over a `Backend` (issue 30; docs/store.md): objects appended to packs,
// a store-wide index of where each object is, and the recorder's order "object durable, then
// index, then manifest line".
//
//     packs/<64 hex>.pack           objects, packed (`PackFormat`); named by a SHA-256 (`packDigest(of:)`)
//     index/<64 hex>.idx            where objects are (`IndexFormat`); named by its own SHA-256
//     objects/<2 hex>/<64 hex>      loose objects of earlier versions: read as they are; gc packs them
//     regions/<id>/...              the regions' files (request, plan, manifest, refresh)
//
// `put` appends a new body's record to the open pack, a local file in the scratch folder, on the
// caller's thread (the event loop; 1 MiB writes). `sync` seals it: the end written, fsynced, saved
// into the backend (a rename on disk, a PUT in a bucket), then its index file saved: only then may
// a manifest line name its objects. After a kill -9 the open pack, still in the page cache, is
// read back at the next start: every whole record whose body hashes to its name is kept.
import Foundation
import Glibc
import TileSpoolCore

/// The objects of a store: packs and the index over a backend.
public final class Repository: @unchecked Sendable {
    public let backend: any Backend
    /// A local folder for packs being written and (for a remote backend) copies of index files.
    public let scratch: String
    /// A new object is written again, rather than found, when its only copies are in packs older
    /// than this (seconds): so a pack old enough for gc to remove (its grace period, at least
    /// twice this) is never one a download has just decided to rely on (docs/store.md, gc).
    public static let reuseAge = 1800.0
    /// A pack is sealed at the next `sync` anyway, and at once when it passes this size (bytes).
    public static let targetPackSize = 64 << 20
    /// Index files of up to this many entries are all of the smallest size tier (merged together).
    public static let smallIndexEntries = 4096

    private let lock = NSLock()
    private var open: PackWriter?
    private var packCounter = 0
    /// Packs being sealed: still found by look-ups while they are saved.
    private var sealing: [PackWriter] = []
    private var indexes: [IndexFile] = []
    private var bloom = DigestBloom(capacity: 1 << 16)
    /// The size in bytes of each pack the backend listed when the index was last read (and of
    /// each pack this process saved since): `put` re-uses a copy only in a pack known to hold
    /// its record whole, so that a pack cut short or removed is not relied on (attack round 20:
    /// a new region reused the objects of a pack cut short and ended `completed` over them).
    private var packSizes: [Digest: Int] = [:]
    /// Objects whose last write failed (their pack could not be saved), with the failure.
    private var failures: [Digest: Error] = [:]
    /// A name for a new open pack no earlier run used: `<pid>-<random>-<n>.partial` (a pid comes
    /// back after a restart; the random part does not).
    private func partialName() -> String { "\(getpid())-\(runTag)-\(packCounter).partial" }
    private let runTag = String(UInt64.random(in: 0...UInt64.max), radix: 36)
    /// Journal tickets: record bytes appended to open packs since the store was opened.
    private var appendedTotal = 0
    private var scratchDir: Directory
    /// Index files copied from a remote backend.
    private var cacheDir: Directory?
    /// What this process added to the store since it opened it: objects put, bytes of the pack
    /// and index files it saved (exact), and the bytes the packs being written will take
    /// (records, and for each object its index entry and each pack its fixed parts: an estimate,
    /// replaced by the exact sizes once sealed). `usage` is the last count plus what was added since.
    private var addedObjects = 0
    private var savedBytes = 0
    private var pendingBytes = 0
    /// Per index entry, and per pack and its index file (magic, end, header, fan-out, digest).
    static let entryOverhead = PackFormat.headerSize + IndexFormat.entrySize
    static let packOverhead = PackFormat.magic.count + PackFormat.footerSize + IndexFormat.packTableOffset + 4 + 40 + 32
    private var usageBase: (objects: Int, bytes: Int)?
    private var addedAtBase = (objects: 0, bytes: 0)
    private var lastCount: Double?
    /// The quota: `put` refuses a new object that would take `usage` past it.
    public var maxBytes: Int?
    /// The shortest time between two counts of the store that a refusal for the quota makes
    /// (seconds): a count lists every pack.
    public static let quotaRecountInterval = 2.0

    /// True once the index files were read (at the first use: a bucket that cannot be reached
    /// does not keep a daemon from starting; the first put or read says why instead).
    private var loaded = false

    /// Opens the repository on `backend`, with `scratch` (created when missing) for packs being
    /// written. Nothing is read from the backend until it is used.
    /// - Throws: `SystemError` when the scratch folder cannot be made.
    public init(backend: any Backend, scratch: String) throws {
        self.backend = backend
        self.scratch = scratch
        try Files.makeDirectories(scratch)
        scratchDir = try Directory(path: scratch, followFinal: false)
        if !(backend is LocalBackend) { cacheDir = try scratchDir.subdirectory("index-cache", create: true) }
    }

    /// Reads the index files when they have not been read yet.
    /// - Throws: the backend's error (tried again at the next call).
    func ensureLoaded() throws {
        lock.lock(); let done = loaded; lock.unlock()
        if !done { try reloadIndexes() }
    }

    // MARK: - The index

    /// The backend name of a pack and of an index file.
    public static func packName(_ d: Digest) -> String { "packs/\(d.hex).pack" }
    public static func indexName(_ d: Digest) -> String { "index/\(d.hex).idx" }
    /// The loose object of earlier versions.
    public static func looseName(_ sha: String) -> String { "objects/\(sha.prefix(2))/\(sha)" }

    /// The pack a backend name `packs/<sha256>.pack` names (also in a folder below `packs/`, as
    /// packs were always read), or nil for any other name: the inverse of `packName`.
    static func packDigest(ofName name: String) -> Digest? {
        guard name.hasPrefix("packs/") else { return nil }
        return digest(ofName: String(name.split(separator: "/").last ?? ""), suffix: ".pack")
    }
    /// The index file a backend name `index/<sha256>.idx` names, or nil (the inverse of `indexName`).
    static func indexDigest(ofName name: String) -> Digest? {
        guard name.hasPrefix("index/") else { return nil }
        return digest(ofName: String(name.dropFirst("index/".count)), suffix: ".idx")
    }
    /// `<sha256><suffix>` (lower-case hex) as a digest, else nil.
    private static func digest(ofName name: String, suffix: String) -> Digest? {
        guard name.hasSuffix(suffix) else { return nil }
        let hex = name.dropLast(suffix.count)
        guard hex.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }) else { return nil }
        return Digest(hex: String(hex))
    }

    /// True for a name this store gives its files in `packs/` and `index/` (`packName`, `indexName`).
    static func isStoreFileName(_ name: String) -> Bool { packDigest(ofName: name) != nil || indexDigest(ofName: name) != nil }

    /// The local path of index file `name` (a copy fetched once for a remote backend).
    private func localIndexPath(_ name: String, digest: Digest) throws -> String {
        if let local = backend as? LocalBackend { return local.root + "/" + name }
        guard let cache = cacheDir else { throw SystemError("open", scratch, errno: EINVAL) }
        let file = digest.hex + ".idx"
        if cache.entryType(file) != .regular {
            guard let data = try backend.load(name) else { throw SystemError("load", name, errno: ENOENT) }
            try cache.writeAtomically(data, to: file)
        }
        return cache.display(file)
    }

    /// Reads the list of index files again and opens the new ones (newest packs first), and
    /// forgets those gone (gc replaced them); the Bloom filter is rebuilt. An index file listed
    /// but gone when read was merged into a new one meanwhile (a daemon merges its small index
    /// files, saving the merged one first): the listing is taken again, up to five times
    /// (attack round 55: `verify` beside a daemon on S3 stopped on such a file, ENOENT).
    /// - Throws: the backend's error when the index cannot be listed.
    public func reloadIndexes() throws {
        for attempt in 1...5 {
            if try reloadIndexesOnce(passingOverGone: attempt == 5) { return }
        }
    }

    /// `reloadIndexes` from one listing: false, nothing changed, when a listed index file was
    /// gone when read, unless `passingOverGone` (then it is left out).
    private func reloadIndexesOnce(passingOverGone: Bool) throws -> Bool {
        lock.lock(); let sizedBefore = Set(packSizes.keys); lock.unlock()
        let listed = try backend.list(prefix: "index/").filter { $0.name.hasSuffix(".idx") }
        let sizes = try listPackSizes()
        var kept: [IndexFile] = []
        let entries = listed.reduce(0) { SaturatingCount.add($0, max(0, ($1.size - 1100) / IndexFormat.entrySize)) }
        var bloom = DigestBloom(capacity: SaturatingCount.add(entries, entries))
        lock.lock(); let known = Dictionary(indexes.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a }); lock.unlock()
        for f in listed {
            guard let digest = Repository.indexDigest(ofName: f.name) else { continue }
            if let old = known[f.name] {
                try old.forEach { bloom.insert($0.digest) }
                kept.append(old)
                continue
            }
            switch openListedIndexFile(f.name, digest, { bloom.insert($0) }) {
            case .opened(let opened): kept.append(opened)
            case .gone: if !passingOverGone { return false }
            case .unreadable: break
            }
        }
        kept.sort(by: Repository.newerPacksFirst)
        lock.lock(); indexes = kept; self.bloom = bloom; takePackSizesLocked(sizes, sizedBefore: sizedBefore); loaded = true; lock.unlock()
        return true
    }

    /// The size of every pack the backend lists, by digest (listed after the index files: a pack
    /// is saved before the index file that lists it).
    private func listPackSizes() throws -> [Digest: Int] {
        Dictionary(try backend.list(prefix: "packs/").compactMap { f in Repository.packDigest(ofName: f.name).map { ($0, f.size) } },
                   uniquingKeysWith: { a, _ in a })
    }

    /// The listed `sizes` replace the known ones (a pack removed is forgotten), but a pack this
    /// process sealed while the listing ran (sized at its seal, not in `sizedBefore`, perhaps not
    /// listed) is kept. Lock held.
    private func takePackSizesLocked(_ sizes: [Digest: Int], sizedBefore: Set<Digest>) {
        var merged = sizes
        for (d, n) in packSizes where !sizedBefore.contains(d) { merged[d] = n }
        packSizes = merged
    }

    /// True when `entry`'s record lies whole in its pack, as last listed (with the pack's end
    /// after it). Lock held.
    private func packHoldsLocked(_ pack: Digest, _ entry: IndexFormat.Entry) -> Bool {
        guard let size = packSizes[pack] else { return false }
        return Int(entry.offset) + PackFormat.headerSize + Int(entry.length) + PackFormat.footerSize <= size
    }

    /// Before a region starts: lists the packs again (their sizes: a pack cut short or removed
    /// since is no longer relied on by `put`) and, on a backend several daemons write (a bucket),
    /// reads the index files saved since the index was read, so that `put` finds the objects other
    /// daemons stored since (and does not store them again). Index files are only added: one gone
    /// from the listing (merged by a gc) is kept, its entries then lead to copies looked for
    /// elsewhere (`read`), and one saved by this process meanwhile is never dropped. Nothing
    /// before the index is first read (that read takes in everything). One or two listings.
    /// - Throws: the backend's error (the index stays as it was).
    public func refreshIndex() throws {
        lock.lock(); let done = loaded; let known = Set(indexes.map(\.name)); let sizedBefore = Set(packSizes.keys); lock.unlock()
        guard done else { return }
        guard backend.isShared else {
            let sizes = try listPackSizes()
            lock.lock(); takePackSizesLocked(sizes, sizedBefore: sizedBefore); lock.unlock()
            return
        }
        var added: [IndexFile] = [], digests: [Digest] = []
        let listed = try backend.list(prefix: "index/")
        let sizes = try listPackSizes()
        for f in listed where f.name.hasSuffix(".idx") && !known.contains(f.name) {
            guard let digest = Repository.indexDigest(ofName: f.name) else { continue }
            // One gone since the listing was merged into a later one, which the next refresh takes.
            if case .opened(let opened) = openListedIndexFile(f.name, digest, { digests.append($0) }) { added.append(opened) }
        }
        lock.lock(); defer { lock.unlock() }
        takePackSizesLocked(sizes, sizedBefore: sizedBefore)
        let now = Set(indexes.map(\.name))
        indexes += added.filter { !now.contains($0.name) }
        indexes.sort(by: Repository.newerPacksFirst)
        for d in digests { bloom.insert(d) }
    }

    /// What became of an index file a listing named (`openListedIndexFile`).
    private enum ListedIndexFile {
        case opened(IndexFile)
        /// Gone since the listing (merged into another, or removed by a gc): not an error.
        case gone
        /// There but unreadable: logged (`verify --repair` finds its objects again).
        case unreadable
    }

    /// Index file `name` (`digest`), as listed: its local copy (a bucket's is loaded into the
    /// cache first) opened, each entry's object given to `each`.
    private func openListedIndexFile(_ name: String, _ digest: Digest, _ each: (Digest) -> Void) -> ListedIndexFile {
        do {
            let path = try localIndexPath(name, digest: digest)
            return .opened(try IndexFile(name: name, digest: digest, path: path) { e, _ in each(e.digest) })
        } catch let e as SystemError where e.errno == ENOENT {
            return .gone
        } catch {
            Log.error("index file \(name) cannot be read (\(error)); its objects are found again by 'tilespool verify --repair'")
            return .unreadable
        }
    }

    /// The order of `indexes`: the index file with the newest pack first.
    private static func newerPacksFirst(_ a: IndexFile, _ b: IndexFile) -> Bool {
        (a.packs.map(\.created).max() ?? 0) > (b.packs.map(\.created).max() ?? 0)
    }

    // MARK: - Leases (a store several daemons write)

    /// How often a daemon saves its lease again, and after how long without a save a lease is
    /// stale (a daemon killed without removing it): seconds.
    public static let leaseRenewal = 300.0, leaseStaleAfter = 1800.0

    /// The name of the lease `id`: `locks/<id>.lock`.
    public static func leaseName(_ id: String) -> String { "locks/\(id).lock" }

    /// What a lease holds, for a person reading the bucket: `what` (who holds it), this host's
    /// name, this process's id and, for a daemon, its spool; one per line.
    public static func leaseText(_ what: String, spool: String? = nil) -> String {
        "\(what)\nhost \(ProcessInfo.processInfo.hostName)\npid \(getpid())\n" + (spool.map { "spool \($0)\n" } ?? "")
    }

    /// A new lease id, `<kind>-<host>-<pid>-<32 hex>`: `kind` is `daemon`, or `gc` for the mark of
    /// a short-grace gc or a repair; `host` is this host's name in lower-case letters, digits and
    /// `-` (at most 40); `pid` this process. A process on the same host can then tell a lease whose
    /// process is gone (`kill -9`) from a live one, and passes over it.
    public static func newLeaseID(kind: String) -> String {
        "\(kind)-\(leaseHost)-\(getpid())-" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
    }

    /// This host's name as lease names carry it: lower-case letters, digits and `-`, at most 40.
    static let leaseHost = String(ProcessInfo.processInfo.hostName.lowercased().map { $0.isASCII && ($0.isLetter || $0.isNumber) ? $0 : "-" }.prefix(40))

    /// True for the lease `locks/<id>.lock` of a process of this host that is gone.
    static func isOrphanedLease(_ name: String) -> Bool {
        guard name.hasPrefix("locks/"), name.hasSuffix(".lock") else { return false }
        let parts = name.dropFirst("locks/".count).dropLast(".lock".count).split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count >= 4, let pid = Int32(parts[parts.count - 2]) else { return false }
        guard parts[1..<(parts.count - 2)].joined(separator: "-") == leaseHost else { return false }
        return LeftBehind.ownerIsGone(pid)
    }

    /// Saves (again) the lease `id` of a daemon writing a shared backend, holding `text` (who holds
    /// it, for a person reading the bucket). Nothing on a folder: the daemon's lock file does it.
    /// - Throws: the backend's error.
    public func renewLease(_ id: String, text: String) throws {
        guard backend.isShared else { return }
        try backend.save(Repository.leaseName(id), Data(text.utf8), ifAbsent: false)
    }

    /// Removes the lease `id` (a daemon that stops). Nothing on a folder.
    /// - Throws: the backend's error.
    public func dropLease(_ id: String) throws {
        guard backend.isShared else { return }
        try backend.remove(Repository.leaseName(id))
    }

    /// The leases of a shared backend saved within `leaseStaleAfter` of `now` (seconds since
    /// 1970), as (name, seconds since its last save): daemons that may be writing it, and gcs or
    /// repairs under way. Those of a process of this host that is gone are passed over (and
    /// removed). None on a folder.
    /// - Throws: the backend's error.
    public func freshLeases(now: Double = Date().timeIntervalSince1970) throws -> [(name: String, age: Double)] {
        guard backend.isShared else { return [] }
        var fresh: [(name: String, age: Double)] = []
        for f in try backend.list(prefix: "locks/") where f.name.hasSuffix(".lock") && now - f.modified < Repository.leaseStaleAfter {
            if Repository.isOrphanedLease(f.name) { try? backend.remove(f.name); continue }
            fresh.append((f.name, max(0, now - f.modified)))
        }
        return fresh.sorted { $0.name < $1.name }
    }

    /// Forgets the local copy of index file `digest` kept for a remote backend (none on disk).
    func dropCachedIndex(_ digest: Digest) { cacheDir?.remove(digest.hex + ".idx") }

    /// Where `digest` is in a sealed pack: the newest copy. Lock held.
    private func lookupLocked(_ digest: Digest) -> (pack: IndexFormat.Pack, entry: IndexFormat.Entry)? {
        candidatesLocked(digest).first
    }

    /// Every copy of `digest` the index files list, newest pack first, ties in index-file order
    /// (`lookupLocked` takes the first): `read` tries the next when a pack is gone or a copy
    /// does not hash to its name. Lock held.
    private func candidatesLocked(_ digest: Digest) -> [(pack: IndexFormat.Pack, entry: IndexFormat.Entry)] {
        guard bloom.mayContain(digest) else { return [] }
        var all: [(pack: IndexFormat.Pack, entry: IndexFormat.Entry)] = []
        for idx in indexes { for e in idx.lookup(digest) { all.append((idx.packs[Int(e.pack)], e)) } }
        return all.enumerated().sorted { ($0.element.pack.created, -$0.offset) > ($1.element.pack.created, -$1.offset) }.map(\.element)
    }

    /// True when `put` may rely on a copy of `digest` already in a sealed pack: one created within
    /// `reuseAge` (gc's grace period spares it) whose pack holds the record whole, as last listed.
    /// Lock held.
    private func reusableLocked(_ digest: Digest) -> Bool {
        let copies = candidatesLocked(digest) // none for a new object: the Bloom filter answers
        guard !copies.isEmpty else { return false }
        let youngerThan = Date().timeIntervalSince1970 - Repository.reuseAge
        return copies.contains { Double($0.pack.created) >= youngerThan && packHoldsLocked($0.pack.digest, $0.entry) }
    }

    /// True when some pack for which `keeps` is true holds `digest`, by the index (gc: a live
    /// object already in a pack that stays is not copied again when its pack is repacked).
    func heldInPack(_ digest: Digest, where keeps: (Digest) -> Bool) -> Bool {
        lock.lock(); defer { lock.unlock() }
        guard bloom.mayContain(digest) else { return false }
        for idx in indexes { for e in idx.lookup(digest) where keeps(idx.packs[Int(e.pack)].digest) { return true } }
        return false
    }

    // MARK: - Writing

    /// Hashes `data` and, unless the store holds it (in a pack younger than `reuseAge`, in the
    /// open pack, or in one being sealed), appends it to the open pack.
    /// - Returns: the hex SHA-256 and whether it was appended.
    /// - Throws: `SystemError` "quota" (EDQUOT) when a new object would pass `maxBytes`;
    ///   `SystemError` when the open pack cannot be written (ENOSPC...).
    @discardableResult
    public func put(_ data: Data) throws -> (sha256: String, isNew: Bool) {
        try ensureLoaded()
        return try data.withUnsafeBytes { raw throws -> (sha256: String, isNew: Bool) in
            let digest = Repository.digest(of: raw)
            let hex = digest.hex
            lock.lock(); defer { lock.unlock() }
            if open?.positions[digest] != nil || sealing.contains(where: { $0.positions[digest] != nil }) { return (hex, false) }
            if reusableLocked(digest) { return (hex, false) }
            let cost = data.count + Repository.entryOverhead + (open == nil ? Repository.packOverhead : 0)
            if let m = maxBytes, let u = usageLocked(), u.bytes + cost > m {
                lock.unlock()
                let recounted = recountForQuota()
                lock.lock()
                guard recounted, let fresh = usageLocked(), fresh.bytes + cost <= m else {
                    throw SystemError("quota", backend.location, errno: EDQUOT)
                }
            }
            if open == nil {
                packCounter += 1
                open = try PackWriter(dir: scratchDir, name: partialName())
            }
            try open!.append(digest, raw)
            appendedTotal += PackFormat.headerSize + raw.count
            addedObjects += 1
            pendingBytes += cost
            open!.estimate += cost
            return (hex, true)
        }
    }

    /// The journal's tickets (`TileStore`): record bytes appended so far, and of those, written to
    /// the open pack's file (in the page cache: a kill -9 keeps them); the rest waits in its buffer.
    public var writesQueued: Int { lock.lock(); defer { lock.unlock() }; return appendedTotal }
    public var writesDone: Int {
        lock.lock(); defer { lock.unlock() }
        guard let o = open else { return appendedTotal }
        return appendedTotal - (o.appended - o.written)
    }

    private let writesWake = WakeEvent()
    /// Readable (eventfd, non-blocking) once the tickets given to `wakeWhenDone` are done.
    public var writesWakeFD: Int32 { writesWake.fd }

    /// Empties `writesWakeFD`, forgets the ticket waited for, and hands the open pack's buffer
    /// to its write queue without waiting (the daemon's loop, every turn: `wakeWhenDone` then
    /// wakes it once the bytes are written).
    public func resetWake() {
        writesWake.reset()
        lock.lock(); defer { lock.unlock() }
        guard let o = open else { return }
        o.forgetWake()
        o.handOffBuffer()
    }

    /// Makes `writesWakeFD` readable once every ticket through `ticket` is done (`writesDone`):
    /// at once if they are. Only the open pack can hold bytes not yet written by then: a pack
    /// being sealed writes everything first.
    public func wakeWhenDone(through ticket: Int) {
        lock.lock(); defer { lock.unlock() }
        guard let o = open else { writesWake.signal(); return }
        // Ticket t is done when `appendedTotal - (o.appended - o.written) >= t`.
        o.wake(writesWake, whenWritten: ticket - appendedTotal + o.appended)
    }

    /// Seals the open pack: its end written and fsynced, saved into the backend, its index file
    /// saved; only then are its objects durable. Safe on any thread (one sync at a time).
    /// - Throws: `SystemError` or the backend's error; the pack's objects are then recorded as
    ///   failed (`writeFailure`), and later puts write them again.
    public func sync() throws {
        lock.lock()
        guard let pack = open, !pack.entries.isEmpty else { lock.unlock(); return }
        open = nil
        sealing.append(pack)
        lock.unlock()
        do {
            try seal(pack)
        } catch {
            lock.lock()
            for e in pack.entries { failures[e.digest] = error }
            sealing.removeAll { $0 === pack }
            pendingBytes -= pack.estimate
            addedObjects -= pack.entries.count
            lock.unlock()
            Files.remove(pack.path)
            throw error
        }
    }

    /// Writes the pack's end, saves it, then its index file, and makes both found.
    private func seal(_ pack: PackWriter) throws {
        let digest = try pack.finish()
        _ = try backend.save(Repository.packName(digest), fromFile: pack.path, ifAbsent: true)
        let created = pack.created
        let entries = pack.entries.map { IndexFormat.Entry(digest: $0.digest, pack: 0, offset: $0.offset, length: $0.length) }
        let idx = try saveIndex(packs: [IndexFormat.Pack(digest: digest, created: created)], entries: entries)
        lock.lock()
        pendingBytes -= pack.estimate
        savedBytes += pack.appended + idx.fileSize
        indexes.insert(idx, at: 0)
        packSizes[digest] = pack.appended + PackFormat.footerSize
        for e in entries { bloom.insert(e.digest); failures.removeValue(forKey: e.digest) }
        sealing.removeAll { $0 === pack }
        let rebuild = bloom.isOverfull
        lock.unlock()
        if rebuild { try reloadIndexes() }
        // The pack and its index are durable: a merge that fails only leaves more index files.
        do { try mergeIndexesIfMany() } catch { Log.error("cannot merge index files: \(error)") }
    }

    /// Writes an index file for `entries` (sorted here), saves it and opens it.
    private func saveIndex(packs: [IndexFormat.Pack], entries: [IndexFormat.Entry]) throws -> IndexFile {
        let (name, digest) = try saveIndexFile(packs: packs, entries: entries)
        return try IndexFile(name: name, digest: digest, path: try localIndexPath(name, digest: digest)) { _, _ in }
    }

    /// Saves an index file for `entries` (sorted here); its backend name and digest. Not opened
    /// here: the caller reads the index again (`reloadIndexes`) or opens it (`saveIndex`).
    @discardableResult
    func saveIndexFile(packs: [IndexFormat.Pack], entries: [IndexFormat.Entry]) throws -> (name: String, digest: Digest) {
        var body = IndexFormat.body(packs: packs, entries: entries)
        let digest = body.withUnsafeBytes { Repository.digest(of: $0) }
        body += digest.bytes
        let name = Repository.indexName(digest)
        let data = Data(body)
        // The name taken: by these very bytes (nothing to do), or by a damaged copy of them (the
        // name is their SHA-256), which these replace: indexing a pack again after its index file
        // was damaged makes the same file (attack round 8: repair then failed on the damaged one).
        if try !backend.save(name, data, ifAbsent: true), try backend.load(name) != data {
            try backend.save(name, data, ifAbsent: false)
        }
        return (name, digest)
    }

    /// Writes one index file listing every entry of `files` (each sorted already), saves it and
    /// opens it. Streamed: the entries are merged from the files in blocks of 4,096 (a k-way
    /// merge by SHA-256) into a local file, hashed as they are written, then saved from that file
    /// (`Backend.save(fromFile:)`), so memory does not grow with the entries (a merge of a million
    /// entries once held them three times over: about 150 MB). Entries listed by several files
    /// are all kept, as `IndexFormat.body` keeps them.
    func saveMergedIndex(_ files: [IndexFile]) throws -> IndexFile {
        // The pack table: every file's packs, each once, in order; each file's numbers mapped.
        var packs: [IndexFormat.Pack] = []
        var number: [Digest: UInt32] = [:]
        let maps: [[UInt32]] = files.map { f in
            f.packs.map { p in
                if let k = number[p.digest] { return k }
                let k = UInt32(packs.count); number[p.digest] = k; packs.append(p); return k
            }
        }
        var out: [UInt8] = IndexFormat.magic
        var acc: UInt32 = 0
        for i in 0..<256 {
            acc += files.reduce(0) { $0 + ($1.fanout[i] - (i == 0 ? 0 : $1.fanout[i - 1])) }
            LE.put(acc, &out)
        }
        LE.put(UInt32(packs.count), &out)
        for p in packs { out += p.digest.bytes; LE.put(p.created, &out) }
        let dir = try Directory(path: scratch, followFinal: false)
        let tmp = "index-merge-\(getpid())-\(UInt64.random(in: 0...UInt64.max)).partial"
        let fd = try dir.createFile(tmp, mode: 0o644, readable: false)
        var closed = false
        defer { if !closed { Glibc.close(fd) }; dir.remove(tmp) }
        let hash = SHA256.Stream()
        func flush() throws {
            guard !out.isEmpty else { return }
            try out.withUnsafeBytes { raw in
                hash.update(raw)
                try Files.writeAll(fd, raw, path: dir.display(tmp))
            }
            out.removeAll(keepingCapacity: true)
        }
        // The k-way merge: a block of each file's entries, the smallest head taken each step.
        let perBlock = 4096
        var blocks = try files.map { try $0.entries(from: 0, count: perBlock) }
        var next = blocks.map(\.count)      // the file entry after the block
        var at = [Int](repeating: 0, count: files.count)
        while true {
            var best = -1
            for k in files.indices where at[k] < blocks[k].count {
                if best < 0 || blocks[k][at[k]].digest < blocks[best][at[best]].digest { best = k }
            }
            guard best >= 0 else { break }
            var e = blocks[best][at[best]]
            e.pack = maps[best][Int(e.pack)]
            IndexFormat.appendEntry(e, to: &out)
            if out.count >= 1 << 20 { try flush() }
            at[best] += 1
            if at[best] == blocks[best].count {
                blocks[best] = try files[best].entries(from: next[best], count: perBlock)
                next[best] += blocks[best].count
                at[best] = 0
            }
        }
        try flush()
        let digest = Digest(bytes: hash.finish())
        out = digest.bytes
        try Files.writeAll(fd, out.withUnsafeBytes { $0 }, path: dir.display(tmp))
        guard fsync(fd) == 0 else { throw SystemError("fsync", dir.display(tmp)) }
        Glibc.close(fd); closed = true
        let name = Repository.indexName(digest)
        _ = try backend.save(name, fromFile: dir.display(tmp), ifAbsent: true)
        return try IndexFile(name: name, digest: digest, path: try localIndexPath(name, digest: digest)) { _, _ in }
    }

    /// `quarantine/<file>` for a store file `name` moved aside by `verify --repair`.
    static func quarantineName(_ name: String) -> String {
        "quarantine/" + (name.split(separator: "/").last.map(String.init) ?? "x")
    }

    /// Saves a pack `w` finished (named `digest`) and an index file for it (gc's and repair's
    /// packs: durable and found before anything they replace is removed). `replace`: a file
    /// already under that name is replaced atomically (a damaged pack whose copy is in quarantine,
    /// `GCPackWriter.replacing`); else it is kept (the same bytes, by name).
    func savePack(digest: Digest, from w: PackWriter, replace: Bool = false) throws {
        _ = try backend.save(Repository.packName(digest), fromFile: w.path, ifAbsent: !replace)
        let entries = w.entries.map { IndexFormat.Entry(digest: $0.digest, pack: 0, offset: $0.offset, length: $0.length) }
        try saveIndexFile(packs: [IndexFormat.Pack(digest: digest, created: w.created)], entries: entries)
    }

    /// The size tier of an index file of `entries` entries: floor(log2(entries)), and the
    /// smallest tier for every file of up to `smallIndexEntries`.
    static func indexTier(_ entries: Int) -> Int {
        let n = max(entries, Repository.smallIndexEntries)
        return Int.bitWidth - 1 - n.leadingZeroBitCount
    }

    /// Index files of one size tier are merged into one when the tier holds this many.
    static let filesPerTierMerged = 4

    /// Merges index files of the same size tier into one, until no tier holds
    /// `filesPerTierMerged` (4): a counter in base 4, so a store of N objects has at most about
    /// 3 (log2(N / 4096) + 1) index files, usually far fewer, and each entry is rewritten about
    /// log4(N / 4096) times over the store's life, not at every save. (Merging at 2 rewrote each
    /// entry twice as often and cost a bucket one more PUT for every second pack saved.)
    ///
    /// A gc (another process, perhaps on another host) replaces index files: merging one it has
    /// just replaced would bring back entries of packs it removed. So the listing is read first
    /// (any index file gone: the index is read again, which forgets them), and again after the
    /// merged file is saved (a source gone meanwhile: the merged file is removed, gc's own index
    /// covers what it kept). A gc that removes sources later still leaves entries of packs it
    /// removed; those are packs older than gc's grace period, which no download relies on, and
    /// the next gc drops them (docs/store.md).
    func mergeIndexesIfMany() throws {
        while true {
            lock.lock(); let current = indexes; lock.unlock()
            let tiers = Dictionary(grouping: current) { Repository.indexTier($0.count) }
            guard let same = tiers.filter({ $0.value.count >= Repository.filesPerTierMerged }).min(by: { $0.key < $1.key })?.value else { return }
            guard try indexFilesExist(same) else { try reloadIndexes(); continue }
            guard try merge(same) else { try reloadIndexes(); return }
        }
    }

    /// Whether every one of `files` is still listed by the backend.
    private func indexFilesExist(_ files: [IndexFile]) throws -> Bool {
        let listed = Set(try backend.list(prefix: "index/").map(\.name))
        return files.allSatisfy { listed.contains($0.name) }
    }

    /// Saves one index file listing every entry of `files` and, if they all still exist then,
    /// uses it in their place and removes them. False when one was gone (the merged file is
    /// removed again: a gc replaced the sources meanwhile).
    func merge(_ files: [IndexFile]) throws -> Bool {
        let merged = try saveMergedIndex(files)
        guard try indexFilesExist(files) else {
            if !files.contains(where: { $0.name == merged.name }) { try? backend.remove(merged.name) }
            return false
        }
        lock.lock()
        indexes.removeAll { old in files.contains { $0 === old } }
        indexes.insert(merged, at: 0)
        savedBytes += merged.fileSize - files.reduce(0) { $0 + $1.fileSize } // usage follows the merge
        lock.unlock()
        for f in files where f.name != merged.name { try? backend.remove(f.name); cacheDir?.remove(f.digest.hex + ".idx") }
        return true
    }

    /// After a `sync`: the failure of one of `sha256s` whose pack could not be saved, or nil.
    public func writeFailure(among sha256s: [String]) -> Error? {
        lock.lock(); defer { lock.unlock() }
        if failures.isEmpty { return nil }
        for s in sha256s { if let d = Digest(hex: s), let f = failures[d] { return f } }
        return nil
    }

    // MARK: - Reading

    /// The bytes of object `sha256`: from the open or a sealing pack, a sealed pack (the index
    /// read again once if no listed copy can be read: gc may have repacked it), or a loose
    /// object. A copy read from a sealed pack or a loose file must hash to the name: one that
    /// does not (damage; an index entry naming the wrong bytes), or whose pack is gone, is
    /// passed over for the next copy the index lists (attack round 7: an entry naming a removed
    /// pack hid the real copy, and exports wrote damaged bytes).
    /// A copy that cannot be read (over `limit`, its pack cut short or not a file, an I/O error)
    /// is passed over too; its error is the one thrown when no copy is right.
    /// - Throws: `SystemError` ENOENT when the store does not hold it; EIO when every copy it
    ///   holds is damaged, or the packs the index names for it are missing; EFBIG over `limit`;
    ///   the backend's error.
    public func read(_ sha256: String, limit: Int) throws -> Data {
        guard let digest = Digest(hex: sha256) else { throw SystemError("read", sha256, errno: EINVAL) }
        try ensureLoaded()
        var damaged = false
        var failure: Error?
        var missingPack: String?
        for attempt in 0..<2 {
            lock.lock()
            if let w = ([open].compactMap { $0 } + sealing).first(where: { $0.positions[digest] != nil }) {
                defer { lock.unlock() }
                if let d = try w.read(digest) { return d }
            }
            let copies = candidatesLocked(digest)
            lock.unlock()
            var gone = false
            missingPack = nil
            for (pack, e) in copies {
                // A copy that cannot be read (over the limit, its pack cut short or a symlink, an
                // I/O error) is passed over for the next; its error is thrown only when no copy
                // is right (attack round 14: a bad copy hid a good one).
                guard Int(e.length) <= limit else { failure = failure ?? SystemError("read", sha256, errno: EFBIG); continue }
                let loaded: Data?
                do { loaded = try backend.load(Repository.packName(pack.digest), range: PackFormat.Entry(digest: e.digest, offset: e.offset, length: e.length).body) } catch {
                    failure = failure ?? error
                    continue
                }
                guard let d = loaded else {
                    gone = true
                    missingPack = missingPack ?? Repository.packName(pack.digest)
                    continue
                }
                if Repository.hashes(d, to: digest) { return d }
                damaged = true
            }
            if gone && attempt == 0 { try reloadIndexes(); continue }
            break
        }
        if let d = try backend.load(Repository.looseName(sha256)) {
            guard d.count <= limit else { throw SystemError("read", sha256, errno: EFBIG) }
            if Repository.hashes(d, to: digest) { return d }
            damaged = true
        }
        if let failure { throw failure }
        if damaged { throw SystemError("read", "object \(sha256) (its bytes do not hash to its name)", errno: EIO) }
        // Indexed, but its pack is gone (removed by hand, a damaged store): not "absent" (attack
        // round 16: `cat` said the store does not hold it); `verify` reports the pack.
        if let missingPack { throw SystemError("read", "object \(sha256) (indexed in \(missingPack), which is missing)", errno: EIO) }
        throw SystemError("read", "object \(sha256)", errno: ENOENT)
    }

    /// The SHA-256 of `bytes`, as a digest.
    static func digest(of bytes: UnsafeRawBufferPointer) -> Digest { Digest(bytes: SHA256.bytes(bytes)) }

    /// True when `data` hashes to `digest` (SHA-256): the one check that bytes are the object
    /// they are named for.
    static func hashes(_ data: Data, to digest: Digest) -> Bool {
        data.withUnsafeBytes { Repository.digest(of: $0) } == digest
    }

    /// The name the bytes of a whole pack give it (docs/store.md, "Pack files"): for a
    /// "TSPACK02" pack the SHA-256 of its magic, every record's 36-byte header and its end (the
    /// bodies left out: each is named by the SHA-256 in its header); for a "TSPACK01" pack the
    /// SHA-256 of its whole bytes. Nil when `data` is not a whole pack.
    static func packDigest(of data: Data) -> Digest? {
        var headers: [Range<Int>] = []
        do {
            try records(data) { _, body in headers.append((body.lowerBound - PackFormat.headerSize)..<body.lowerBound) }
        } catch { return nil }
        return data.withUnsafeBytes { raw -> Digest in
            if raw.prefix(8).elementsEqual(PackFormat.wholeNamedMagic) { return Repository.digest(of: raw) }
            let name = PackName()
            for h in headers { name.record(header: UnsafeRawBufferPointer(rebasing: raw[h])) }
            return name.finish(end: UnsafeRawBufferPointer(rebasing: raw[(raw.count - PackFormat.footerSize)...]))
        }
    }

    /// Where object `sha256` lies in a sealed pack (the copy `read` would use), found in the index
    /// without reading the pack; nil for an object that is loose, only in the open pack, or absent.
    public func location(_ sha256: String) -> ObjectLocation? {
        guard let digest = Digest(hex: sha256), (try? ensureLoaded()) != nil else { return nil }
        lock.lock()
        let found = lookupLocked(digest)
        lock.unlock()
        guard let (pack, e) = found else { return nil }
        let body = PackFormat.Entry(digest: e.digest, offset: e.offset, length: e.length).body
        return ObjectLocation(pack: pack.digest.hex, offset: body.lowerBound, length: body.count)
    }

    /// Where each of objects `sha256s` lies in a sealed pack, as `location` gives it, for many at
    /// once: the names are sorted by digest and merged with each index file read forwards
    /// (`IndexFile.lookup(sorted:)`), instead of one read of the index per object (the export
    /// of a 507,130-object region spent most of its time in those reads). An element is nil
    /// where `location` would be nil. Memory: about 80 bytes per name, plus the result.
    public func locations(_ sha256s: [String]) -> [ObjectLocation?] {
        var out = [ObjectLocation?](repeating: nil, count: sha256s.count)
        guard (try? ensureLoaded()) != nil else { return out }
        lock.lock()
        let current = indexes
        var wanted: [(digest: Digest, at: Int)] = []
        wanted.reserveCapacity(sha256s.count)
        for (i, s) in sha256s.enumerated() {
            if let d = Digest(hex: s), bloom.mayContain(d) { wanted.append((d, i)) }
        }
        lock.unlock()
        wanted.sort { $0.digest < $1.digest }
        let digests = wanted.map(\.digest)
        // The newest pack's copy wins, ties to the first index file, as in `candidatesLocked`.
        var best = [(pack: IndexFormat.Pack, entry: IndexFormat.Entry)?](repeating: nil, count: wanted.count)
        for idx in current {
            idx.lookup(sorted: digests) { k, e in
                let p = idx.packs[Int(e.pack)]
                if let b = best[k], b.pack.created >= p.created { return }
                best[k] = (p, e)
            }
        }
        var names: [Digest: String] = [:]
        for (k, found) in best.enumerated() {
            guard let (p, e) = found else { continue }
            let name: String
            if let n = names[p.digest] { name = n } else { name = p.digest.hex; names[p.digest] = name }
            let body = PackFormat.Entry(digest: e.digest, offset: e.offset, length: e.length).body
            out[wanted[k].at] = ObjectLocation(pack: name, offset: body.lowerBound, length: body.count)
        }
        return out
    }

    /// Reads objects `sha256s` in the order of their locations (pack, then offset: sequential
    /// reads, each pack opened once per run of its objects), then those not in a sealed pack
    /// (`read`), calling `body` with each one's index in `sha256s` and its bytes. A name given
    /// twice is read twice. Memory: one object at a time. `known`: the objects' `locations` when
    /// the caller has them (a pack gone since is answered by a look-up, as for any). Every body
    /// handed on hashes to its name: one that does not is read again by `read` (another copy).
    /// - Throws: as `read` (an object over `limit`: EFBIG; absent: ENOENT); what `body` throws.
    public func readObjects(_ sha256s: [String], at known: [ObjectLocation?]? = nil, limit: Int, _ body: (Int, Data) throws -> Void) throws {
        var located: [(ObjectLocation, Int)] = []
        var rest: [Int] = []
        located.reserveCapacity(sha256s.count)
        precondition(known == nil || known!.count == sha256s.count, "one location per name")
        for (i, l) in (known ?? locations(sha256s)).enumerated() {
            if let l { located.append((l, i)) } else { rest.append(i) }
        }
        located.sort { $0.0 < $1.0 || ($0.0 == $1.0 && $0.1 < $1.1) }
        var start = 0
        while start < located.count {
            var end = start + 1
            while end < located.count && located[end].0.pack == located[start].0.pack { end += 1 }
            // Entries over the limit are left to `read` (another copy may be right; if none is,
            // it says EFBIG).
            let run = located[start..<end].filter { $0.0.length <= limit }
            rest += located[start..<end].filter { $0.0.length > limit }.map(\.1)
            start = end
            guard !run.isEmpty else { continue }
            var delivered = 0
            var bodyFailure: Error?
            do {
                let found = try backend.loadRanges("packs/\(run.first!.0.pack).pack", run.map(\.0.range)) { k, d in
                    let i = run[k].1
                    delivered = k + 1
                    // A body that does not hash to its name is not handed on: `read` looks for
                    // another copy, or says the object is damaged.
                    guard let digest = Digest(hex: sha256s[i]), Repository.hashes(d, to: digest) else { rest.append(i); return }
                    do { try body(i, d) } catch { bodyFailure = error; throw error }
                }
                // The pack went meanwhile (gc repacked it): the objects not read are looked for again.
                if !found { rest.append(contentsOf: run.dropFirst(delivered).map(\.1)) }
            } catch {
                if let bodyFailure { throw bodyFailure }
                // The pack cannot be read here (cut short, a symlink, an entry past its end: attack
                // round 14): the objects not read are looked for by `read`, which tries every copy
                // and says what failed when none is right.
                rest.append(contentsOf: run.dropFirst(delivered).map(\.1))
            }
        }
        for i in rest.sorted() { try body(i, try read(sha256s[i], limit: limit)) }
    }

    /// Writes object `sha256` at the current offset of the open file `fd` (`path` names it in
    /// errors): from its pack (at `known` when the caller has its `location`) with `Backend.copy` (on disk `copy_file_range(2)`, which may share
    /// extents), else its bytes as `read` gives them.
    /// - Returns: the bytes written.
    /// - Throws: as `read`; `SystemError` when `fd` cannot be written.
    @discardableResult
    public func copyObject(_ sha256: String, at known: ObjectLocation? = nil, to fd: Int32, path: String, limit: Int) throws -> Int {
        if let l = known ?? location(sha256), let digest = Digest(hex: sha256) {
            // The bytes are checked against the name first (read from the page cache, then
            // copied by the kernel); a copy that does not hash, or cannot be read, is left to
            // `read` (every copy).
            if l.length <= limit, let d = try? backend.load("packs/\(l.pack).pack", range: l.range), Repository.hashes(d, to: digest),
               try backend.copy("packs/\(l.pack).pack", range: l.range, to: fd, path: path) { return l.length }
        }
        let d = try read(sha256, limit: limit)
        try Files.writeAll(fd, d, path: path)
        return d.count
    }

    /// True when the store holds object `sha256` (a pack, the open one, or a loose file).
    public func contains(_ sha256: String) -> Bool {
        guard let digest = Digest(hex: sha256) else { return false }
        if (try? ensureLoaded()) == nil { return false }
        lock.lock()
        let here = open?.positions[digest] != nil || sealing.contains { $0.positions[digest] != nil } || lookupLocked(digest) != nil
        lock.unlock()
        if here { return true }
        return (try? backend.stat(Repository.looseName(sha256))) != nil
    }

    /// Every object of the index, by digest: (pack, entry); for gc and verify.
    func allEntries(_ body: (IndexFormat.Pack, IndexFormat.Entry) throws -> Void) throws {
        try ensureLoaded()
        lock.lock(); let current = indexes; lock.unlock()
        for idx in current { try idx.forEach { try body(idx.packs[Int($0.pack)], $0) } }
    }

    // MARK: - Usage

    /// Objects and bytes (packs, index files and loose objects) counted by listing the backend.
    public func measure() -> (objects: Int, bytes: Int)? {
        guard (try? ensureLoaded()) != nil, let packs = try? backend.list(prefix: "packs/"), let idx = try? backend.list(prefix: "index/"),
              let loose = try? backend.list(prefix: "objects/") else { return nil }
        lock.lock(); let objects = indexes.reduce(0) { $0 + $1.count }; lock.unlock()
        return (SaturatingCount.add(objects, loose.count), (packs + idx + loose).reduce(0) { SaturatingCount.add($0, $1.size) })
    }

    public var added: (objects: Int, bytes: Int) { lock.lock(); defer { lock.unlock() }; return addedLocked() }
    private func addedLocked() -> (objects: Int, bytes: Int) { (addedObjects, savedBytes + pendingBytes) }

    private func usageLocked() -> (objects: Int, bytes: Int)? {
        guard let b = usageBase else { return nil }
        let a = addedLocked()
        return (b.objects + a.objects - addedAtBase.objects, b.bytes + a.bytes - addedAtBase.bytes)
    }
    public var usage: (objects: Int, bytes: Int)? { lock.lock(); defer { lock.unlock() }; return usageLocked() }

    /// Sets `usage` from a `measure` that started when `added` was `addedAtStart`.
    public func setUsage(_ measured: (objects: Int, bytes: Int), addedAtStart: (objects: Int, bytes: Int)) {
        lock.lock(); defer { lock.unlock() }
        usageBase = measured
        addedAtBase = addedAtStart
        var ts = timespec(); clock_gettime(CLOCK_MONOTONIC, &ts)
        lastCount = Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    /// The next refusal for the quota counts the store again first.
    public func recountBeforeNextRefusal() { lock.lock(); lastCount = nil; lock.unlock() }

    private func recountForQuota() -> Bool {
        var ts = timespec(); clock_gettime(CLOCK_MONOTONIC, &ts)
        let now = Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
        lock.lock(); let last = lastCount; lock.unlock()
        if let last, now - last < Repository.quotaRecountInterval { return false }
        let start = added
        guard let m = measure() else { return false }
        setUsage(m, addedAtStart: start)
        return true
    }

    // MARK: - Recovery

    /// What an earlier run left half done: open packs in the scratch folder (a kill -9) are read
    /// back, every whole record whose body hashes to its name kept, and sealed into a pack; packs
    /// no index file lists (a crash between the two saves) get one. Called once at open by the
    /// daemon (no other process writes the scratch folder).
    public func recoverLeftovers() {
        if (try? ensureLoaded()) == nil { return } // the store cannot be read now: the next start recovers
        for name in scratchDir.list() where name.hasSuffix(".partial") {
            do { try recoverPartial(name) } catch { Log.error("cannot recover the pack \(scratchDir.display(name)): \(error)") }
            scratchDir.remove(name)
        }
        // Temp files of saves a stop cut short (this store's, or another process's gone since): a
        // whole pack is saved under its name, the rest removed (`settleLeftover`).
        for f in (try? storeLeftovers()) ?? [] where SaveTempName.isOrphaned(f.name) {
            do { if try settleLeftover(f) { Log.info("saved the pack \(f.name) a stop left before its rename") } } catch {
                Log.error("cannot settle the temp file \(f.name): \(error)")
            }
        }
        do { try indexUnindexedPacks() } catch { Log.error("cannot index the packs no index lists: \(error)") }
    }

    /// Reads a pack cut short (no end) and seals what it holds whole and intact.
    private func recoverPartial(_ name: String) throws {
        let fd = try scratchDir.openForReading(name)
        defer { Glibc.close(fd) }
        var kept = 0, whole = 0
        try Repository.scanRecords(fd: fd, path: scratchDir.display(name)) { digest, body in
            whole += 1
            lock.lock(); defer { lock.unlock() }
            // Held already: in the open pack, or in a pack the listing has whole (an index entry
            // alone is not enough: attack round 30 removed the pack, the index still listed its
            // objects, and the only copy left, this file, was dropped).
            if open?.positions[digest] != nil || candidatesLocked(digest).contains(where: { packHoldsLocked($0.pack.digest, $0.entry) }) { return }
            if open == nil { packCounter += 1; open = try PackWriter(dir: scratchDir, name: partialName()) }
            try body.withUnsafeBytes { try open!.append(digest, $0) }
            kept += 1
        }
        if kept > 0 {
            try sync()
            Log.info("recovered \(kept) objects of a pack a stop cut short (\(whole) whole records in \(scratchDir.display(name)))")
        } else if whole > 0 {
            Log.info("a pack a stop cut short (\(scratchDir.display(name))) holds \(whole) whole records, every one stored already: removed")
        }
    }

    /// Calls `body` with every whole record of a pack file whose body hashes to its name, in
    /// order, stopping at the end or at the first record cut short or damaged.
    static func scanRecords(fd: Int32, path: String, _ body: (Digest, Data) throws -> Void) throws {
        var magic = [UInt8](repeating: 0, count: PackFormat.magic.count)
        guard pread(fd, &magic, magic.count, 0) == magic.count, PackFormat.isMagic(magic) else { return }
        var st = Glibc.stat()
        guard fstat(fd, &st) == 0 else { throw SystemError("fstat", path) }
        let size = Int(st.st_size)
        var pos = PackFormat.magic.count
        var header = [UInt8](repeating: 0, count: PackFormat.headerSize)
        while pos + PackFormat.headerSize <= size {
            guard pread(fd, &header, header.count, off_t(pos)) == header.count else { return }
            if Array(header[0..<8]) == PackFormat.endMagic && pos + PackFormat.footerSize == size { return }
            let (digest, length) = header.withUnsafeBytes { PackFormat.parseHeader($0) }
            guard pos + PackFormat.headerSize + length <= size else { return }
            var data = Data(count: length)
            let n = data.withUnsafeMutableBytes { pread(fd, $0.baseAddress, length, off_t(pos + PackFormat.headerSize)) }
            guard n == length, Repository.hashes(data, to: digest) else { return }
            try body(digest, data)
            pos += PackFormat.headerSize + length
        }
    }

    /// Writes an index file for every pack that none lists.
    /// - Returns: how many packs were indexed.
    @discardableResult
    func indexUnindexedPacks() throws -> Int {
        var count = 0
        try ensureLoaded()
        lock.lock(); let listed = Set(indexes.flatMap { $0.packs.map(\.digest) }); lock.unlock()
        for f in try backend.list(prefix: "packs/") {
            guard let digest = Repository.packDigest(ofName: f.name), !listed.contains(digest) else { continue }
            guard let data = try backend.load(f.name) else { continue }
            var entries: [IndexFormat.Entry] = []
            var offset = PackFormat.magic.count
            do {
                try Repository.records(data) { digest, range in
                    entries.append(IndexFormat.Entry(digest: digest, pack: 0, offset: UInt64(offset), length: UInt32(range.count)))
                    offset = range.upperBound
                }
            } catch {
                // Not a whole pack: left as it is for verify to report and --repair to rescue
                // what it can (attack round 8: one such file made every repair and gc fail).
                Log.error("\(f.name) is not a whole pack: not indexed; run tilespool verify")
                continue
            }
            let idx = try saveIndex(packs: [IndexFormat.Pack(digest: digest, created: UInt64(f.modified))], entries: entries)
            lock.lock(); indexes.append(idx); for e in entries { bloom.insert(e.digest) }; lock.unlock()
            Log.info("indexed \(entries.count) objects of \(f.name), which no index listed")
            count += 1
        }
        return count
    }

    /// The records of objects `named` in a damaged pack's bytes from byte `start` on, which a
    /// walk cannot reach (a damaged length field makes it lose its place): every offset whose
    /// 32 bytes are one of those digests and whose header's body lies within the bytes and
    /// hashes to it is a record, and the search goes on after it. One set look-up per offset and
    /// a hash only where a name is found, so no record is missed for its neighbours' damage
    /// (round 32: a search for any plausible header began where the walk stopped, past the
    /// records a damaged length jumped over, passed over one just before a second damaged
    /// header, and spent its budget on a flat body's long plausible lengths).
    /// - Returns: (digest, body range) of each record found, in order; each is a whole object.
    static func findRecords(_ pack: Data, from start: Int, named: Set<Digest>) -> [(Digest, Range<Int>)] {
        guard !named.isEmpty else { return [] }
        return pack.withUnsafeBytes { raw in
            var out: [(Digest, Range<Int>)] = []
            let size = raw.count
            let firsts = Set(named.map(\.a))
            var p = max(start, PackFormat.magic.count)
            while p + PackFormat.headerSize <= size {
                let first = UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: p, as: UInt64.self))
                let bodyEnd = p + PackFormat.headerSize + Int(LE.get(raw, p + 32, as: UInt32.self))
                if firsts.contains(first), bodyEnd <= size, case let digest = Digest(raw: raw, at: p), named.contains(digest),
                   Repository.digest(of: UnsafeRawBufferPointer(rebasing: raw[(p + PackFormat.headerSize)..<bodyEnd])) == digest {
                    out.append((digest, (p + PackFormat.headerSize)..<bodyEnd))
                    p = bodyEnd
                } else {
                    p += 1
                }
            }
            return out
        }
    }

    /// Calls `body` with the digest and body range of every record of a pack's bytes, in order
    /// from offset 8, and throws once they are not a whole pack: a magic or end magic not a
    /// pack's (before any record), a record that does not fit (after the records before it), or
    /// an end whose count is not the number of records or whose reserved field is not 0 (after
    /// every record: attack round 30, such an end under the name its bytes give passed as
    /// sound). Callers that must not act on part of a pack check it whole first.
    /// - Throws: `SystemError` EINVAL when the bytes are not a whole pack; what `body` throws.
    static func records(_ pack: Data, _ body: (Digest, Range<Int>) throws -> Void) throws {
        try pack.withUnsafeBytes { raw in
            let bad = SystemError("read pack", "", errno: EINVAL)
            guard raw.count >= PackFormat.magic.count + PackFormat.footerSize, PackFormat.isMagic(raw[0..<8]),
                  let count = PackFormat.count(footer: Array(raw[(raw.count - PackFormat.footerSize)...])) else { throw bad }
            var pos = PackFormat.magic.count, records = 0
            let end = raw.count - PackFormat.footerSize
            while pos < end {
                guard pos + PackFormat.headerSize <= end else { throw bad }
                let (digest, length) = PackFormat.parseHeader(UnsafeRawBufferPointer(rebasing: raw[pos..<(pos + PackFormat.headerSize)]))
                let start = pos + PackFormat.headerSize
                guard start + length <= end else { throw bad }
                try body(digest, start..<(start + length))
                pos = start + length
                records += 1
            }
            guard records == count, LE.get(raw, raw.count - 4, as: UInt32.self) == 0 else { throw bad }
        }
    }
}

/// Where an object lies in a sealed pack (`TileStore.objectLocation`): the pack's name (64
/// lower-case hex digits, `packs/<pack>.pack`: docs/store.md, "Pack files") and the object's
/// body, `length` bytes from byte `offset` of that file (docs/store.md, "Reading an object").
/// Ordered by pack, then offset: the order in which reading a region's objects is sequential.
public struct ObjectLocation: Sendable, Hashable, Comparable {
    /// The pack's name, 64 lower-case hex digits.
    public var pack: String
    /// Where the body starts in the pack file, in bytes (its record's offset + 36).
    public var offset: Int
    /// The body's length in bytes.
    public var length: Int
    public init(pack: String, offset: Int, length: Int) { self.pack = pack; self.offset = offset; self.length = length }
    /// The body's bytes in the pack file.
    public var range: Range<Int> { offset..<(offset + length) }
    public static func < (a: ObjectLocation, b: ObjectLocation) -> Bool { (a.pack, a.offset) < (b.pack, b.offset) }
}
