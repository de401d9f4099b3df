import CCrypto
import CLinux
import Foundation
import Glibc
import TileSpoolCore

/// SHA-256 through OpenSSL's libcrypto (FIPS 180-4; `EVP_Digest`,
/// https://www.openssl.org/docs/man3.0/man3/EVP_Digest.html).
public enum SHA256 {
    /// The digest, fetched from the default provider once (`EVP_MD_fetch`): `EVP_sha256()` would
    /// make every call look it up again (OpenSSL 3's implicit fetch, 0.2 us of the 3 us a 4.6 KB
    /// tile takes). Shared by all threads (an `EVP_MD` is immutable).
    nonisolated(unsafe) static let digest: OpaquePointer? = EVP_MD_fetch(nil, "SHA256", nil) ?? EVP_sha256()

    /// The SHA-256 of `bytes` as 64 lower-case hex digits.
    public static func hex(_ bytes: UnsafeRawBufferPointer) -> String {
        // Once per tile: the digest on the stack, the hex written straight into the string.
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 32) { md in
            md.initialize(repeating: 0)
            var len: UInt32 = 0
            _ = EVP_Digest(bytes.baseAddress, bytes.count, md.baseAddress, &len, digest, nil)
            return hexString(UnsafeBufferPointer(md))
        }
    }

    /// The SHA-256 of `data` as hex.
    public static func hex(_ data: Data) -> String { data.withUnsafeBytes { hex($0) } }

    /// The SHA-256 of a file's bytes, read in 1 MiB blocks; nil when it cannot be read.
    public static func hex(file path: String) -> String? {
        guard let ctx = EVP_MD_CTX_new() else { return nil }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestInit_ex(ctx, digest, nil) == 1 else { return nil }
        let fd = Glibc.open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { Glibc.close(fd) }
        let buf = UnsafeMutableRawPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buf.deallocate() }
        while true {
            let n = Glibc.read(fd, buf, 1 << 20)
            if n < 0 { if errno == EINTR { continue }; return nil }
            if n == 0 { break }
            EVP_DigestUpdate(ctx, buf, n)
        }
        var md = [UInt8](repeating: 0, count: 32)
        var len: UInt32 = 0
        EVP_DigestFinal_ex(ctx, &md, &len)
        return md.withUnsafeBufferPointer { hexString($0) }
    }

    /// `md` (a 32-byte digest) as 64 lower-case hex digits.
    static func hexString(_ md: UnsafeBufferPointer<UInt8>) -> String {
        String(unsafeUninitializedCapacity: 2 * md.count) { out in
            func digit(_ v: UInt8) -> UInt8 { v < 10 ? 0x30 + v : 0x57 + v } // 0-9, a-f
            for (i, b) in md.enumerated() { out[2 * i] = digit(b >> 4); out[2 * i + 1] = digit(b & 15) }
            return 2 * md.count
        }
    }
}

/// The content-addressed object store (layout documented in docs/contract.md):
///
///     <store>/objects/<first 2 hex digits>/<64 hex digits>   each file's SHA-256 is its name
///     <store>/tmp/                                           gc's set-aside objects; objects being
///                                                            written (unnamed, O_TMPFILE), or named
///                                                            temp files where the filesystem has no
///                                                            O_TMPFILE
///     <store>/regions/<id>/                                  request.json, plan.json, manifest.tsv
///
/// `put` is the one path through which bytes enter `objects/`: hash, skip when present, then (on
/// the store's writer thread, or the caller's when that one is busy) an unnamed file made in
/// `tmp/`, written and then linked under its name in `objects/ab/`. Durability is batched:
/// `sync()` waits for the writes queued before it, then flushes the whole filesystem (`syncfs`),
/// and the caller records objects in a manifest only after that (see docs/durability.md).
public final class ObjectStore: @unchecked Sendable {
    public let root: String
    public var objectsDir: String { root + "/objects" }
    public var tmpDir: String { root + "/tmp" }
    public var regionsDir: String { root + "/regions" }
    /// Objects and bytes in `objects/` as far as this process knows: the last `measure` given to
    /// `setUsage` plus what `put` added since (counting objects still queued for the writer
    /// thread, less those it found already there); nil until `setUsage` is called.
    public var usage: (objects: Int, bytes: Int)? {
        counters.lock(); let (base, atBase) = (usageBase, unwrittenAtBase); counters.unlock()
        guard let u = base else { return nil }
        let e = writes.unwritten
        return (u.objects - (e.objects - atBase.objects), u.bytes - (e.bytes - atBase.bytes))
    }
    /// `usage` before subtracting what the writer thread found already there since `setUsage`.
    private var usageBase: (objects: Int, bytes: Int)?
    private var unwrittenAtBase: (objects: Int, bytes: Int) = (0, 0)
    /// Objects and bytes `put` has written since this store was opened (not those still queued
    /// for the writer thread, nor those it found already there).
    public var added: (objects: Int, bytes: Int) {
        let (q, e) = writes.counts
        counters.lock(); let total = queuedTotal; counters.unlock()
        return (total.objects - q.objects - e.objects, total.bytes - q.bytes - e.bytes)
    }
    /// Objects and bytes `put` has handed to the writer thread, or written itself, since this
    /// store was opened.
    private var queuedTotal: (objects: Int, bytes: Int) = (0, 0)
    /// Guards `queuedTotal`, `usageBase` and `unwrittenAtBase`: `put` runs on the event loop and,
    /// with `writeHere`, on a download lane's thread at the same time.
    private let counters = NSLock()
    /// Writes handed to the writer thread so far.
    private var jobsQueued = 0
    /// The ticket of the last write handed to the writer thread (`TileStore.writesQueued`; an
    /// object `put` wrote itself is written when `put` returns).
    public var writesQueued: Int { jobsQueued }
    /// Writes with a ticket up to this have run (`TileStore.writesDone`).
    public var writesDone: Int { writes.doneCount }
    /// `TileStore.writesWakeFD`: the writer thread's `WriteWake`.
    public var writesWakeFD: Int32 { writes.wake.fd }
    /// `TileStore.wakeWhenDone(through:)`.
    public func wakeWhenDone(through ticket: Int) { writes.wakeWhenDone(through: ticket) }
    /// `TileStore.resetWake()`.
    public func resetWake() { writes.resetWake() }
    /// The store quota (`--max-store-bytes`): `put` refuses a new object that would take `usage`
    /// past it. Only enforced once `usage` is known.
    public var maxBytes: Int?
    /// At most this many objects (and `maxQueuedBytes` of their bodies) wait for the writer
    /// thread; beyond it `put` writes the object itself, on the caller's thread, while the writer
    /// works on its own. Answers come to the event loop in bursts (a loop turn collects several),
    /// so a short queue overflows even while the writer keeps up on average: with 4, the loop wrote
    /// about a third of the objects itself, beside the writer, and a download took 8% more CPU than
    /// with 64 (docs/benchmarks.md, issue 13 ninth pass). On a slow or busy disk (ext4 may take
    /// 300 us to allocate an inode after mass deletions) the two write side by side, and nothing
    /// piles up in memory beyond the limits, where a `kill -9` would lose it (the journal names
    /// only written objects: what was in memory is fetched again).
    public var maxQueuedWrites = ObjectStore.defaultMaxQueuedWrites
    /// `maxQueuedWrites` by default: bodies a kill -9 can lose before they are written.
    public static let defaultMaxQueuedWrites = 64
    /// At most this many bytes of bodies wait for the writer thread (one body of any size is
    /// always queued when none waits): bounds the memory of the queue, and what a kill -9 can lose,
    /// when the bodies are large.
    public var maxQueuedBytes = ObjectStore.defaultMaxQueuedBytes
    /// `maxQueuedBytes` by default: 4 MiB.
    public static let defaultMaxQueuedBytes = 4 << 20
    /// The writes `put` hands to the writer thread, and what became of them.
    let writes: ObjectWriter

    /// Opens (creating when needed) the store at `root`.
    /// - Throws: `SystemError` when the folders cannot be made.
    public init(root: String) throws(SystemError) {
        self.root = root
        try Files.makeDirectories(root + "/objects")
        try Files.makeDirectories(root + "/tmp")
        try Files.makeDirectories(root + "/regions")
        writes = try ObjectWriter(objectsDir: root + "/objects", tmpDir: root + "/tmp")
    }

    /// The path of the object named `sha256`.
    public func objectPath(_ sha256: String) -> String {
        "\(objectsDir)/\(sha256.prefix(2))/\(sha256)"
    }

    /// True when the object exists.
    public func contains(_ sha256: String) -> Bool { Files.entryType(objectPath(sha256)) == .regular }

    /// Stores `data` under its SHA-256 unless an object of that name exists. The file is written by
    /// the store's writer thread, so the caller's thread (the event loop) goes on downloading
    /// meanwhile; `sync()` waits for it. An object that is present has its mtime refreshed (so that
    /// a concurrent `gc` sees it as young, docs/gc.md) instead of being written again: at once,
    /// when recent puts often found their object there (then `put` asks the filesystem first), or
    /// by the writer thread, whose link into place fails on an existing name (while nearly every
    /// object is new, as in a first download, asking first would cost a lookup per tile for
    /// nothing).
    /// - Returns: the hex SHA-256 and whether the object is being written (false: it was there;
    ///   true can still end in "was there", counted in `usage` and `added` once known).
    /// - Throws: `SystemError` "quota" (`EDQUOT`) when a new object would take the store past
    ///   `maxBytes` (an object that exists is looked up first then, and never refused). A failed
    ///   write (ENOSPC and friends: `isStorageFailure`) is answered by `writeFailure(among:)` after
    ///   the next `sync()`; no file then exists under the final name.
    @discardableResult
    public func put(_ data: Data) throws(SystemError) -> (sha256: String, isNew: Bool) { try put(data, writeHere: false) }

    /// `put`, and with `writeHere` the object is written on the caller's thread before the call
    /// returns, never handed to the writer thread (a download lane's thread, which writes what it
    /// downloads: `DownloadLane`). Safe on any thread, beside `put` on another.
    /// - Throws: as `put`.
    @discardableResult
    public func put(_ data: Data, writeHere: Bool) throws(SystemError) -> (sha256: String, isNew: Bool) {
        let sha = SHA256.hex(data)
        let probed = writes.probeFirst
        if probed {
            let present = writes.touch(sha)
            writes.noteOutcome(present: present)
            if present { return (sha, false) }
        }
        if let m = maxBytes, let u = usage, u.bytes + data.count > m {
            if !probed && writes.touch(sha) { writes.noteOutcome(present: true); return (sha, false) }
            // The count may be stale (a gc freed space since it was taken): count again before
            // refusing, at most once every `quotaRecountInterval` seconds.
            guard recountForQuota(), let fresh = usage, fresh.bytes + data.count <= m else {
                throw SystemError("quota", objectsDir, errno: EDQUOT)
            }
        }
        // Counted before the write, as the writer's outcome (`unwritten`) may come first.
        counters.lock()
        queuedTotal.objects += 1; queuedTotal.bytes += data.count
        if let u = usageBase { usageBase = (u.objects + 1, u.bytes + data.count) }
        counters.unlock()
        if !writeHere && writes.submit(sha: sha, body: data, probed: probed, limit: maxQueuedWrites, byteLimit: maxQueuedBytes) {
            jobsQueued += 1
        } else {
            writes.writeHere(sha: sha, body: data, probed: probed)
        }
        return (sha, true)
    }

    /// Sets `usage` from a `measure` that started when `added` was `addedAtStart`: what `put`
    /// wrote since then, and what waits for the writer thread now, is added on top (an object
    /// written during the scan may be counted twice until the next measure: the usage errs on the
    /// high side, never under the quota).
    public func setUsage(_ measured: (objects: Int, bytes: Int), addedAtStart: (objects: Int, bytes: Int)) {
        counters.lock(); defer { counters.unlock() }
        let (q, e) = writes.counts
        let now = (queuedTotal.objects - q.objects - e.objects, queuedTotal.bytes - q.bytes - e.bytes)
        unwrittenAtBase = e
        usageBase = (measured.objects + now.0 - addedAtStart.objects + q.objects,
                     measured.bytes + now.1 - addedAtStart.bytes + q.bytes)
        lastCount = ObjectStore.monotonic()
    }

    /// The shortest time between two recounts of the store that a refusal for the quota makes
    /// (`put`): 2 seconds. A recount lists every object (about a second per million).
    public static let quotaRecountInterval = 2.0
    /// When `usage` was last set from a count (monotonic seconds), or nil.
    private var lastCount: Double?

    /// `TileStore.recountBeforeNextRefusal`: the next refusal for the quota counts the store
    /// again, however recent the last count.
    public func recountBeforeNextRefusal() { counters.lock(); lastCount = nil; counters.unlock() }

    /// Counts the store again (`measure`) when the last count is older than
    /// `quotaRecountInterval`, and sets `usage` from it; true when it did.
    private func recountForQuota() -> Bool {
        let now = ObjectStore.monotonic()
        counters.lock(); let last = lastCount; counters.unlock()
        if let last, now - last < ObjectStore.quotaRecountInterval { return false }
        let start = added
        setUsage(ObjectStore.measure(root: root), addedAtStart: start)
        return true
    }

    static func monotonic() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    /// Counts the object files under `<root>/objects/` and sums their sizes (`lstat` each; one
    /// pass over the folder, safe on any thread).
    public static func measure(root: String) -> (objects: Int, bytes: Int) {
        var objects = 0, bytes = 0
        let dir = root + "/objects"
        for sub in Files.list(dir) {
            for name in Files.list(dir + "/" + sub) {
                guard let n = Files.size(dir + "/" + sub + "/" + name) else { continue }
                objects += 1; bytes += n
            }
        }
        return (objects, bytes)
    }

    /// Makes every object `put` before the call durable: waits for the writer thread to have
    /// written them, then `syncfs` on the store's filesystem (file data and the links into object
    /// folders). Cost is one call per batch, not per object. Safe on any thread. An object whose
    /// write failed is not there: ask `writeFailure(among:)` before recording it.
    /// - Throws: `SystemError` when `syncfs` fails.
    public func sync() throws(SystemError) {
        writes.waitForQueued()
        try Files.syncFilesystem(root)
    }

    /// The failure of the last write of one of `sha256s` (objects `put` before the last `sync`),
    /// or nil when each was written or was there already. Safe on any thread.
    public func writeFailure(among sha256s: [String]) -> Error? { writes.failure(among: sha256s) }

    /// Puts back objects that an interrupted `gc` had moved aside (`tmp/gc-<sha256>`), and removes
    /// the aside copy where the object exists again.
    public func restoreObjectsSetAside() {
        for name in Files.list(tmpDir) where name.hasPrefix("gc-") {
            let sha = String(name.dropFirst(3))
            guard sha.utf8.count == 64, sha.utf8.allSatisfy(isHexDigit) else { continue }
            if contains(sha) { Files.remove(tmpDir + "/" + name); continue }
            // Put back only what is that object: anything in tmp/ under its name is checked.
            guard SHA256.hex(file: tmpDir + "/" + name) == sha else { Files.remove(tmpDir + "/" + name); continue }
            try? Files.makeDirectories("\(objectsDir)/\(sha.prefix(2))")
            Glibc.rename(tmpDir + "/" + name, objectPath(sha))
        }
    }

    /// Reads an object's bytes (at most `limit`).
    public func read(_ sha256: String, limit: Int = 64 << 20) throws(SystemError) -> Data {
        try Files.readRegularFile(objectPath(sha256), limit: limit)
    }

    /// The folder of region `id`.
    public func regionDir(_ id: String) -> String { "\(regionsDir)/\(id)" }
}

/// The store's writer thread and its queue (`ObjectStore.put` hands it the bodies): jobs run one
/// at a time, in the order queued. A failed write is kept by object name until a later write of
/// the same object succeeds, so that every batch naming it learns of it (not only the first sync
/// after it). The thread starts with the first job and ends after 5 s without work.
final class ObjectWriter: @unchecked Sendable {
    let objectsDir: String
    let tmpDir: String
    /// `objects/` and `tmp/`, held open (O_PATH): every per-object call names its file relative to
    /// them (`ab/<sha256>`, `<pid>-<n>.tmp`) instead of walking the store's whole path each time.
    private let objectsFD: Int32
    private let tmpFD: Int32
    private let cond = NSCondition()
    /// The jobs, in order; `probed` when `put` looked for the object first and found none. (A body
    /// queued twice is written twice: the second link finds the name taken.)
    private var queue: [(seq: Int, sha: String, body: Data, probed: Bool)] = []
    private var head = 0
    private var nextSeq = 0
    /// Every job with a smaller sequence number has run.
    private var doneThrough = 0
    /// The objects whose last write failed (and has not succeeded since), with the failure.
    private var failures: [String: SystemError] = [:]
    private var threadRunning = false
    private var pendingCount = (objects: 0, bytes: 0)
    /// Objects and bytes queued or being written.
    var pending: (objects: Int, bytes: Int) { cond.lock(); defer { cond.unlock() }; return pendingCount }
    /// How many queued writes have run (written, found there, or failed), in queue order.
    var doneCount: Int { cond.lock(); defer { cond.unlock() }; return doneThrough }
    /// Wakes the event loop once the writes it waits for have run.
    let wake: WriteWake
    /// Makes `wake` readable once writes through `ticket` have run.
    func wakeWhenDone(through ticket: Int) {
        cond.lock(); defer { cond.unlock() }
        wake.arm(ticket, done: doneThrough)
    }
    /// `WriteWake.reset` under the lock.
    func resetWake() { cond.lock(); wake.reset(); cond.unlock() }
    private var unwrittenCount = (objects: 0, bytes: 0)
    /// Objects and bytes handed to the writer (or written by `put` itself) that were not written:
    /// found already there, or failed.
    var unwritten: (objects: Int, bytes: Int) { cond.lock(); defer { cond.unlock() }; return unwrittenCount }
    /// `pending` and `unwritten`, read together.
    var counts: (pending: (objects: Int, bytes: Int), unwritten: (objects: Int, bytes: Int)) {
        cond.lock(); defer { cond.unlock() }; return (pendingCount, unwrittenCount)
    }
    /// The share of recent puts whose object was already there: a mean over about the last 32
    /// outcomes, each weighing 1/32 (exponentially weighted).
    private var presentShare = 0.0
    /// Where the filesystem has no O_TMPFILE, writes rename over an existing name: `put` must ask.
    private var mustProbe = false
    /// Whether `put` should look for the object before queueing it: when more than 1 in 16 recent
    /// puts found it there. Looking costs one failed lookup (utimensat) per new object; not looking
    /// costs a write of the body, dropped at once, per object already there (about ten times as
    /// much in CPU, and disk bandwidth besides), so the switch sits a little below the break-even
    /// of about 1 in 10. Deduplication is the same either way.
    var probeFirst: Bool { cond.lock(); defer { cond.unlock() }; return mustProbe || presentShare > 1.0 / 16 }
    /// Counts one put's outcome in `presentShare`.
    func noteOutcome(present: Bool) {
        cond.lock(); defer { cond.unlock() }
        noteLocked(present: present)
    }
    private func noteLocked(present: Bool) { presentShare += ((present ? 1 : 0) - presentShare) / 32 }
    /// The temp file counter of `writeRenaming` (under `cond`).
    private var tmpCounter = 0

    /// - Throws: `SystemError` when the two folders cannot be opened.
    init(objectsDir: String, tmpDir: String) throws(SystemError) {
        self.objectsDir = objectsDir
        self.tmpDir = tmpDir
        objectsFD = try Files.open(objectsDir, O_PATH | O_DIRECTORY)
        do { tmpFD = try Files.open(tmpDir, O_PATH | O_DIRECTORY) } catch { Glibc.close(objectsFD); throw error }
        wake = WriteWake()
    }

    deinit { Glibc.close(objectsFD); Glibc.close(tmpFD) }

    /// The object's name relative to `objects/`.
    private static func relative(_ sha: String) -> String { "\(sha.prefix(2))/\(sha)" }

    /// Refreshes the mtime of object `sha` when it exists (so that gc sees it as young); false when
    /// it does not (yet) exist. The corresponding C function is `utimensat`.
    func touch(_ sha: String) -> Bool { utimensat(objectsFD, ObjectWriter.relative(sha), nil, 0) == 0 }

    /// Queues a write unless `limit` writes are queued or running, or the bodies queued or being
    /// written would pass `byteLimit` bytes with this one (unless none is); false then (the caller
    /// writes it with `writeHere`).
    func submit(sha: String, body: Data, probed: Bool, limit: Int, byteLimit: Int) -> Bool {
        cond.lock()
        defer { cond.unlock() }
        if nextSeq - doneThrough >= limit || pendingCount.bytes > 0 && pendingCount.bytes + body.count > byteLimit { return false }
        queue.append((nextSeq, sha, body, probed))
        pendingCount.objects += 1; pendingCount.bytes += body.count
        nextSeq += 1
        if !threadRunning {
            threadRunning = true
            let t = Thread { [self] in run() }
            t.name = "tilespool.objects"
            t.start()
        }
        cond.broadcast()
        return true
    }

    /// Writes an object on the caller's thread (the writer thread was busy), with the same
    /// outcome bookkeeping as the writer's.
    func writeHere(sha: String, body: Data, probed: Bool) {
        let (wasThere, failure) = attempt(sha, body)
        cond.lock()
        record(sha: sha, bytes: body.count, probed: probed, wasThere: wasThere, failure: failure)
        cond.unlock()
    }

    /// One write: whether the object was there already, or the failure. A write that fails (a
    /// full disk) for an object that exists is no failure: the object is there (refreshed).
    private func attempt(_ sha: String, _ body: Data) -> (wasThere: Bool, failure: SystemError?) {
        let r: Result<Bool, SystemError> = body.withUnsafeBytes { raw in
            do throws(SystemError) { return .success(try write(sha, raw)) } catch { return .failure(error) }
        }
        switch r {
        case .success(let linked): return (!linked, nil)
        case .failure(let e): return touch(sha) ? (true, nil) : (false, e)
        }
    }

    /// Counts a write's outcome (lock held): in `presentShare` when `put` did not look first, in
    /// `unwritten` when the object was there or the write failed, in `failures` by object.
    private func record(sha: String, bytes: Int, probed: Bool, wasThere: Bool, failure: SystemError?) {
        if !probed { noteLocked(present: wasThere) }
        if wasThere || failure != nil { unwrittenCount.objects += 1; unwrittenCount.bytes += bytes }
        if let failure { failures[sha] = failure } else if !failures.isEmpty { failures.removeValue(forKey: sha) }
    }

    /// Waits until every write queued before the call has run.
    func waitForQueued() {
        cond.lock()
        let target = nextSeq
        while doneThrough < target { cond.wait() }
        cond.unlock()
    }

    /// The failure of one of `names` whose last write failed, or nil when all were written.
    func failure(among names: [String]) -> SystemError? {
        cond.lock(); defer { cond.unlock() }
        if failures.isEmpty { return nil }
        for n in names { if let f = failures[n] { return f } }
        return nil
    }

    private func run() {
        cond.lock()
        while true {
            if head >= queue.count {
                queue.removeAll(keepingCapacity: true); head = 0
                if !cond.wait(until: Date(timeIntervalSinceNow: 5)) && head >= queue.count {
                    threadRunning = false
                    cond.unlock()
                    return
                }
                continue
            }
            let job = queue[head]
            queue[head].body = Data()
            head += 1
            cond.unlock()
            let (wasThere, failure) = attempt(job.sha, job.body)
            cond.lock()
            record(sha: job.sha, bytes: job.body.count, probed: job.probed, wasThere: wasThere, failure: failure)
            doneThrough = job.seq + 1
            wake.reached(doneThrough)
            pendingCount.objects -= 1; pendingCount.bytes -= job.body.count
            cond.broadcast()
        }
    }

    /// How `write` gives a finished file its name; it steps down on the first refusal and stays there.
    enum Naming {
        /// O_TMPFILE in `tmp/`, then linkat(2) with AT_EMPTY_PATH (needs Linux 6.10+ or
        /// CAP_DAC_READ_SEARCH).
        case emptyPath
        /// O_TMPFILE, then linkat(2) of `/proc/self/fd/N` with AT_SYMLINK_FOLLOW (any user, needs /proc).
        case procPath
        /// A named temp file in `tmp/` renamed into place (filesystems without O_TMPFILE).
        case rename
    }
    /// Read and changed under `cond` (the writer thread and `writeHere` both write).
    private var namingState = Naming.emptyPath
    /// Starts the writes at a given step (tests of the fallbacks; the store starts at `emptyPath`).
    func startNaming(at step: Naming) {
        cond.lock(); namingState = step; mustProbe = step == .rename; cond.unlock()
    }
    private var naming: Naming {
        get { cond.lock(); defer { cond.unlock() }; return namingState }
        set { cond.lock(); namingState = newValue; cond.unlock() }
    }

    /// One object's write (the writer thread's part of `ObjectStore.put`): an unnamed file made in
    /// `tmp/` (open(2) O_TMPFILE), written, then linked under its name in `objects/ab/`
    /// (linkat(2)), so that the name appears only with all the bytes and a crash leaves nothing
    /// behind (an unnamed file has no name to leave). The file is made in the one `tmp/` folder
    /// rather than in its object's folder because ext4 allocates a file's inode near its folder's:
    /// one folder keeps consecutive objects in one inode table, 256 hash folders spread them over
    /// as many (docs/benchmarks.md, issue 13 sixth pass: 6-15% less wall time on ext4). A name that
    /// exists already (`put` did not look first, or another writer made it) is kept and its mtime
    /// refreshed; should it vanish in between (gc set it aside), the link is tried again. A missing
    /// object folder is made and the link tried again. Where the filesystem has no O_TMPFILE, a
    /// temp file in `tmp/` renamed into place (and `put` is told to look first from then on). One
    /// directory entry is made per object either way; the caller's `syncfs` makes data and names
    /// durable.
    /// - Returns: true when this call gave the object its name, false when it was there.
    /// - Throws: `SystemError` from mkdir/open/write/link/rename/close; then no file exists under
    ///   the final name (unless another writer made it) and nothing is left in `tmp/`.
    func write(_ sha: String, _ bytes: UnsafeRawBufferPointer) throws(SystemError) -> Bool {
        var mode = naming
        if mode == .rename { try writeRenaming(sha, bytes); return true }
        var fd = CLinux.tilespool_open_tmpfile(tmpFD, ".", 0o666)
        var openedIn = tmpDir
        if fd < 0, case let e = CLinux.tilespool_errno(), e != EOPNOTSUPP && e != EISDIR && e != EINVAL {
            // `tmp/` was removed under the running daemon (the kernel answers ENOENT or EPERM for
            // a removed folder): the object's own folder will do.
            let folder = String(sha.prefix(2))
            openedIn = objectsDir + "/" + folder
            fd = CLinux.tilespool_open_tmpfile(objectsFD, folder, 0o666)
            if fd < 0 && CLinux.tilespool_errno() == ENOENT {
                try makeFolder(folder)
                fd = CLinux.tilespool_open_tmpfile(objectsFD, folder, 0o666)
            }
        }
        if fd < 0 {
            let e = CLinux.tilespool_errno()
            if e == EOPNOTSUPP || e == EISDIR || e == EINVAL {
                cond.lock(); namingState = .rename; mustProbe = true; cond.unlock()
                try writeRenaming(sha, bytes)
                return true
            }
            throw SystemError("open", openedIn + " (O_TMPFILE)")
        }
        let name = ObjectWriter.relative(sha)
        do throws(SystemError) {
            try Files.writeAll(fd, bytes, path: name) // the full path is made only for an error
        } catch {
            Glibc.close(fd); throw SystemError(error.operation, objectsDir + "/" + name, errno: error.errno)
        }
        var attempts = 0
        var madeFolder = false
        while true {
            let linked = mode == .emptyPath
                ? linkat(fd, "", objectsFD, name, AT_EMPTY_PATH) == 0
                : linkat(AT_FDCWD, "/proc/self/fd/\(fd)", objectsFD, name, AT_SYMLINK_FOLLOW) == 0
            if linked { break }
            let e = SystemError("link", objectsDir + "/" + name)
            if e.errno == ENOENT && !madeFolder {
                // The object's folder may not exist yet (with AT_EMPTY_PATH, ENOENT is also what a
                // kernel answers a user it does not allow: the retry tells the two apart).
                do throws(SystemError) { try makeFolder(String(sha.prefix(2))) } catch { Glibc.close(fd); throw error }
                madeFolder = true
                continue
            }
            if mode == .emptyPath && (e.errno == ENOENT || e.errno == EPERM) {
                // No /proc either (a chroot): temp files renamed into place from now on.
                if access("/proc/self/fd", F_OK) != 0 {
                    Glibc.close(fd)
                    cond.lock(); namingState = .rename; mustProbe = true; cond.unlock()
                    try writeRenaming(sha, bytes)
                    return true
                }
                mode = .procPath; naming = .procPath
                continue
            }
            attempts += 1
            if e.errno == EEXIST {
                if touch(sha) { Glibc.close(fd); return false }
                if attempts < 3 { continue }
            }
            Glibc.close(fd)
            throw e
        }
        // A close that fails after the link (EIO from a network filesystem) is reported; the name
        // stays (another writer may have found it and counted on it), and the next syncfs, which
        // reports the same write error, keeps any line naming it out of the manifests.
        if Glibc.close(fd) != 0 { throw SystemError("close", objectsDir + "/" + name) }
        return true
    }

    /// Makes the object folder `objects/<folder>/` (an existing one is fine): called when a write
    /// into it finds none (256 times in a store's life, and again if something removed it).
    /// - Throws: `SystemError` "mkdir".
    private func makeFolder(_ folder: String) throws(SystemError) {
        if mkdirat(objectsFD, folder, 0o777) != 0 && CLinux.tilespool_errno() != EEXIST {
            throw SystemError("mkdir", objectsDir + "/" + folder)
        }
    }

    /// `write` where the filesystem has no O_TMPFILE: temp file in `tmp/`, write, close, rename
    /// into place.
    private func writeRenaming(_ sha: String, _ bytes: UnsafeRawBufferPointer) throws(SystemError) {
        cond.lock(); tmpCounter += 1; let n = tmpCounter; cond.unlock()
        let tmp = "\(getpid())-\(n).tmp"
        let fd = CLinux.tilespool_openat(tmpFD, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o666)
        if fd < 0 { throw SystemError("open", tmpDir + "/" + tmp) }
        do throws(SystemError) {
            try Files.writeAll(fd, bytes, path: tmpDir + "/" + tmp)
        } catch {
            Glibc.close(fd); unlinkat(tmpFD, tmp, 0); throw error
        }
        if Glibc.close(fd) != 0 { let e = SystemError("close", tmpDir + "/" + tmp); unlinkat(tmpFD, tmp, 0); throw e }
        let name = ObjectWriter.relative(sha)
        var renamed = renameat(tmpFD, tmp, objectsFD, name) == 0
        if !renamed && CLinux.tilespool_errno() == ENOENT {
            do throws(SystemError) { try makeFolder(String(sha.prefix(2))) } catch { unlinkat(tmpFD, tmp, 0); throw error }
            renamed = renameat(tmpFD, tmp, objectsFD, name) == 0
        }
        if !renamed {
            let e = SystemError("rename", objectsDir + "/" + name)
            unlinkat(tmpFD, tmp, 0)
            throw e
        }
    }
}
