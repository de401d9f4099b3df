// The pieces of the repository below its protocol: a pack being written (`PackWriter`), an index
// file opened for look-ups (`IndexFile`) and the Bloom filter in front of them (`DigestBloom`).
// Formats: `PackFormat`, `IndexFormat` (TileSpoolCore), docs/store.md.
import CLinux
import Foundation
import Glibc
import TileSpoolCore

/// A pack being written to a local file (`<scratch>/<pid>-<n>.partial`): records are appended
/// to a 1 MiB buffer; each full buffer is handed to the pack's own serial write queue, which
/// writes the bytes, so the appending thread (the daemon's loop) does not wait for its `write`s.
/// The pack's name is the SHA-256 of its magic, record headers and end (`PackFormat`), kept as
/// records are appended (36 bytes each): no pass over the bodies, which the caller has hashed
/// already to name them, and sealing costs a footer and an fsync. At most `buffersInFlight`
/// buffers wait for the queue (memory stays bounded when the disk is slower than the network).
/// Its file operations are serialised by its own lock (the loop appends, the writer thread
/// seals, a reader may read a record meanwhile); a write that fails is thrown by the next
/// `append`, `read` or `finish`.
/// The name of a "TSPACK02" pack (docs/store.md, "Pack files"), taken as the pack is read or
/// written: the SHA-256 of its magic, then each record's 36-byte header in order, then its
/// 16-byte end; the bodies are left out (each header holds its body's SHA-256). The one place
/// the rule is written: `PackWriter` feeds it as records are appended, `Repository.packDigest(of:)`
/// from a whole pack's bytes.
final class PackName {
    private let stream = SHA256.Stream()
    /// Starts with the magic of the packs written now (`PackFormat.magic`).
    init() { PackFormat.magic.withUnsafeBytes { stream.update($0) } }
    /// Adds a record's header (`PackFormat.headerSize` bytes).
    func record(header: UnsafeRawBufferPointer) { stream.update(header) }
    /// Adds the end (`PackFormat.footerSize` bytes) and gives the name.
    func finish(end: UnsafeRawBufferPointer) -> Digest {
        stream.update(end)
        return Digest(bytes: stream.finish())
    }
}

final class PackWriter: @unchecked Sendable {
    private let io = NSLock()
    let path: String
    private let fd: Int32
    private var buffer: [UInt8] = []
    /// The pack's name over the record headers appended so far; under `io`.
    private let name = PackName()
    private let writes = DispatchQueue(label: "tilespool.pack-writes")
    static let buffersInFlight = 3
    private let slots = DispatchSemaphore(value: PackWriter.buffersInFlight)
    /// Guards `writtenBytes`, `writeError` and the wake, which the write queue sets and reads.
    private let progress = NSLock()
    private var writtenBytes = 0
    private var writeError: SystemError?
    /// An eventfd to make readable once `writtenBytes` reaches a position (`wake(_:whenWritten:)`).
    private var wakeAt: (wake: WakeEvent, position: Int)?
    /// Bytes handed to `append` (records and the magic), whether or not written yet.
    private(set) var appended: Int
    /// Bytes written to the file (in the page cache).
    var written: Int { progress.lock(); defer { progress.unlock() }; return writtenBytes }
    private(set) var entries: [PackFormat.Entry] = []
    /// Where each digest's record is in `entries`.
    private(set) var positions: [Digest: Int] = [:]
    /// Bytes of bodies held.
    private(set) var bodyBytes = 0
    /// What the repository counted for this pack in its usage before it is sealed (bytes).
    var estimate = 0
    /// When the writer was made (seconds since 1970): the pack's `created` time.
    let created = UInt64(Date().timeIntervalSince1970)

    /// Makes `<dir>/<name>` (which must not exist).
    /// - Throws: `SystemError`.
    init(dir: Directory, name: String) throws(SystemError) {
        path = dir.display(name)
        fd = try dir.createFile(name, mode: 0o666, readable: true)
        buffer.reserveCapacity(1 << 20)
        buffer += PackFormat.magic
        appended = PackFormat.magic.count
    }

    deinit { Glibc.close(fd) } // a queued write holds `self`: none is left by now

    /// Appends the record of `body` (named `digest`); handed to the write queue once the buffer
    /// is full.
    /// - Throws: `SystemError` when a write failed (the pack is then unusable).
    func append(_ digest: Digest, _ body: UnsafeRawBufferPointer) throws(SystemError) {
        io.lock(); defer { io.unlock() }
        try throwIfFailed()
        positions[digest] = entries.count
        entries.append(PackFormat.Entry(digest: digest, offset: UInt64(appended), length: UInt32(body.count)))
        let header = PackFormat.header(digest, length: body.count)
        header.withUnsafeBytes { name.record(header: $0) }
        buffer += header
        buffer.append(contentsOf: body)
        appended += PackFormat.headerSize + body.count
        bodyBytes += body.count
        if buffer.count >= 1 << 20 { handOff() }
    }

    private func throwIfFailed() throws(SystemError) {
        progress.lock(); let e = writeError; progress.unlock()
        if let e { throw e }
    }

    /// Queues the buffer's bytes for writing (blocks while `buffersInFlight` are queued).
    private func handOff() {
        guard !buffer.isEmpty else { return }
        let chunk = buffer
        buffer = []
        buffer.reserveCapacity(1 << 20)
        slots.wait()
        writes.async { [self] in
            defer { slots.signal() }
            progress.lock(); let failed = writeError != nil; progress.unlock()
            guard !failed else { return }
            chunk.withUnsafeBytes { raw in
                do throws(SystemError) {
                    try Files.writeAll(fd, raw, path: path)
                    progress.lock(); writtenBytes += raw.count
                } catch {
                    progress.lock(); writeError = error // a failure wakes too: the next put or sync throws it
                }
                if let w = wakeAt, writtenBytes >= w.position || writeError != nil { wakeAt = nil; w.wake.signal() }
                progress.unlock()
            }
        }
    }

    /// Queues what the buffer holds without waiting for it to be written (`wake` tells when).
    func handOffBuffer() {
        io.lock(); defer { io.unlock() }
        handOff()
    }

    /// Signals `wake` once the bytes up to `position` (from the file's start) are written, or a
    /// write failed: at once if so already. Replaces the wake set before.
    func wake(_ wake: WakeEvent, whenWritten position: Int) {
        progress.lock(); defer { progress.unlock() }
        if writtenBytes >= position || writeError != nil { wakeAt = nil; wake.signal() } else { wakeAt = (wake, position) }
    }

    /// Forgets the wake set by `wake`.
    func forgetWake() { progress.lock(); wakeAt = nil; progress.unlock() }


    private func flushLocked() throws(SystemError) {
        handOff()
        writes.sync {}
        try throwIfFailed()
    }

    /// The body of a record of this pack, read back from the file (flushed first).
    func read(_ digest: Digest) throws(SystemError) -> Data? {
        io.lock(); defer { io.unlock() }
        guard let i = positions[digest] else { return nil }
        try flushLocked()
        let e = entries[i]
        var data = Data(count: Int(e.length))
        let n = data.withUnsafeMutableBytes { pread(fd, $0.baseAddress, Int(e.length), off_t(e.body.lowerBound)) }
        guard n == Int(e.length) else { throw SystemError("read", path, errno: n < 0 ? CLinux.tilespool_errno() : EIO) }
        return data
    }

    /// Writes the end, flushes and fsyncs the file.
    /// - Returns: the pack's name: the SHA-256 of its bytes without the bodies (`PackFormat`).
    /// - Throws: `SystemError`.
    func finish() throws(SystemError) -> Digest {
        io.lock(); defer { io.unlock() }
        let footer = PackFormat.footer(count: entries.count)
        buffer += footer
        appended += PackFormat.footerSize
        try flushLocked()
        try Files.fsync(fd, path: path)
        return footer.withUnsafeBytes { name.finish(end: $0) }
    }
}

/// An eventfd another thread makes readable (`signal`), and a flag so that emptying it
/// (`reset`, once per turn of the daemon's loop) costs a system call only when a wake came.
final class WakeEvent: @unchecked Sendable {
    /// Non-blocking, close-on-exec; -1 when no eventfd could be made (the loop then polls nothing
    /// for it and finds the writes done at its next turn, within a second).
    let fd: Int32 = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
    private let lock = NSLock()
    private var signalled = false

    func signal() {
        lock.lock(); defer { lock.unlock() }
        guard !signalled else { return }
        signalled = true
        var one: UInt64 = 1
        _ = Glibc.write(fd, &one, 8)
    }

    func reset() {
        lock.lock(); defer { lock.unlock() }
        guard signalled else { return }
        signalled = false
        var n: UInt64 = 0
        _ = Glibc.read(fd, &n, 8)
    }
}

/// An index file opened for look-ups: its fan-out and pack table in memory, one sample of every
/// `sampleEvery` entries (the first 16 bytes of its digest), and the entries themselves read with
/// `pread` a window at a time: a look-up is a binary search in memory and one read of at most
/// `sampleEvery` entries. Memory: about 16 bytes per `sampleEvery` objects.
final class IndexFile: @unchecked Sendable {
    static let sampleEvery = 128
    /// The file's name in the backend (`index/<64 hex>.idx`) and its digest.
    let name: String
    let digest: Digest
    let path: String
    private let fd: Int32
    let fanout: [UInt32]
    let packs: [IndexFormat.Pack]
    let entriesOffset: Int
    var count: Int { Int(fanout[255]) }
    /// The file's size in bytes (header, pack table, entries and the trailing SHA-256).
    var fileSize: Int { IndexFormat.entriesOffset(packs: packs.count) + count * IndexFormat.entrySize + 32 }
    private let samples: [(UInt64, UInt64)]

    /// Opens the index file at local `path`, checks it (its name is the SHA-256 of its bytes
    /// but the last 32, which hold that digest too), and samples it. `each` is called with every
    /// entry (for the Bloom filter).
    /// - Throws: `SystemError`, or EINVAL for a file that is not a valid index.
    init(name: String, digest: Digest, path: String, each: (IndexFormat.Entry, IndexFormat.Pack) -> Void) throws(SystemError) {
        self.name = name; self.digest = digest; self.path = path
        let f = try Files.open(path, O_RDONLY | O_NOFOLLOW)
        do throws(SystemError) {
            let p = try IndexFile.parse(fd: f, path: path, digest: digest, each: each)
            fd = f; fanout = p.fanout; packs = p.packs; entriesOffset = p.entriesOffset; samples = p.samples
        } catch {
            Glibc.close(f)
            throw error
        }
    }

    /// Reads and checks an index file (see `init`).
    private static func parse(fd: Int32, path: String, digest: Digest, each: (IndexFormat.Entry, IndexFormat.Pack) -> Void) throws(SystemError)
        -> (fanout: [UInt32], packs: [IndexFormat.Pack], entriesOffset: Int, samples: [(UInt64, UInt64)]) {
        var st = Glibc.stat()
        guard fstat(fd, &st) == 0 else { throw SystemError("fstat", path) }
        let size = Int(st.st_size)
        let bad = SystemError("read index", path, errno: EINVAL)
        guard size >= IndexFormat.packTableOffset + 4 + 32 else { throw bad }
        var head = [UInt8](repeating: 0, count: IndexFormat.packTableOffset + 4)
        guard pread(fd, &head, head.count, 0) == head.count, let fanout = IndexFormat.fanout(head) else { throw bad }
        let packCount = head.withUnsafeBytes { Int(LE.get($0, IndexFormat.packTableOffset, as: UInt32.self)) }
        guard packCount < 1 << 24 else { throw bad }
        var table = [UInt8](repeating: 0, count: packCount * 40)
        guard pread(fd, &table, table.count, off_t(IndexFormat.packTableOffset + 4)) == table.count,
              let packs = IndexFormat.packs(table, count: packCount) else { throw bad }
        let entriesOffset = IndexFormat.entriesOffset(packs: packCount)
        let count = Int(fanout[255])
        guard size == entriesOffset + count * IndexFormat.entrySize + 32 else { throw bad }
        // One pass: the digest of the whole (it must be the name), the samples, `each`.
        let check = SHA256.Stream()
        head.withUnsafeBytes { check.update($0) }
        table.withUnsafeBytes { check.update($0) }
        let perBlock = 8192
        var block = [UInt8](repeating: 0, count: perBlock * IndexFormat.entrySize)
        var i = 0
        var samples: [(UInt64, UInt64)] = []
        samples.reserveCapacity(count / IndexFile.sampleEvery + 1)
        var previous: Digest?
        var ordered = true
        while i < count {
            let n = min(perBlock, count - i)
            let want = n * IndexFormat.entrySize
            guard pread(fd, &block, want, off_t(entriesOffset + i * IndexFormat.entrySize)) == want else { throw bad }
            block.withUnsafeBytes { raw in
                check.update(UnsafeRawBufferPointer(rebasing: raw[0..<want]))
                for k in 0..<n {
                    let e = IndexFormat.entry(raw, k)
                    if let p = previous, e.digest < p { ordered = false }
                    previous = e.digest
                    if (i + k) % IndexFile.sampleEvery == 0 { samples.append((e.digest.a, e.digest.b)) }
                    if IndexFormat.plausible(e, packs: packs.count) { each(e, packs[Int(e.pack)]) } else { ordered = false }
                }
            }
            i += n
        }
        var tail = [UInt8](repeating: 0, count: 32)
        guard ordered, pread(fd, &tail, 32, off_t(size - 32)) == 32, check.finish() == tail, Digest(bytes: tail) == digest else { throw bad }
        return (fanout, packs, entriesOffset, samples)
    }

    deinit { Glibc.close(fd) }

    /// The entries `[lo, hi)` of this file among which `digest` must lie if present: its fan-out
    /// slot narrowed by the samples (sample s is entry s * sampleEvery), at most `sampleEvery`
    /// entries; empty when it cannot be here.
    private func candidates(_ digest: Digest) -> Range<Int> {
        let b = digest.firstByte
        var lo = b == 0 ? 0 : Int(fanout[b - 1]), hi = Int(fanout[b])
        guard lo < hi else { return lo..<lo }
        // From the last sample below the key (entries before it are smaller) to the first
        // sample above it.
        let key = (digest.a, digest.b), every = IndexFile.sampleEvery
        var l = 0, h = samples.count
        while l < h { let m = (l + h) / 2; if samples[m] < key { l = m + 1 } else { h = m } }
        if l > 0 { lo = max(lo, (l - 1) * every) }
        h = samples.count
        while l < h { let m = (l + h) / 2; if samples[m] <= key { l = m + 1 } else { h = m } }
        if l < samples.count { hi = min(hi, l * every) }
        return lo..<max(lo, hi)
    }

    /// Calls `found` with every entry of `digest` among entries `range` of `raw`, a block that
    /// holds entries `first...` of the file.
    private static func scan(_ raw: UnsafeRawBufferPointer, first: Int, _ range: Range<Int>, _ digest: Digest,
                             _ found: (IndexFormat.Entry) -> Void) {
        var l = range.lowerBound - first, h = range.upperBound - first
        while l < h { let m = (l + h) / 2; if IndexFormat.digest(raw, m) < digest { l = m + 1 } else { h = m } }
        let end = range.upperBound - first
        while l < end, IndexFormat.digest(raw, l) == digest { found(IndexFormat.entry(raw, l)); l += 1 }
    }

    /// The entries of `digest` in this file (usually one; the same object may sit in two packs):
    /// a binary search in memory, then one `pread` of at most `sampleEvery` entries.
    func lookup(_ digest: Digest) -> [IndexFormat.Entry] {
        let r = candidates(digest)
        guard !r.isEmpty else { return [] }
        var window = [UInt8](repeating: 0, count: r.count * IndexFormat.entrySize)
        guard pread(fd, &window, window.count, off_t(entriesOffset + r.lowerBound * IndexFormat.entrySize)) == window.count else { return [] }
        var out: [IndexFormat.Entry] = []
        window.withUnsafeBytes { IndexFile.scan($0, first: r.lowerBound, r, digest) { out.append($0) } }
        return out
    }

    /// Entries read per `pread` at most by `lookup(sorted:)` (8,192 entries: 384 KiB).
    static let batchBlock = 8192

    /// The entries of many digests, given in ascending order (equal ones allowed): `found(k, e)`
    /// for each entry `e` of `digests[k]`. The file is read forwards in blocks that each cover
    /// the following digests' candidate entries while they lie near each other (at most
    /// `sampleEvery` entries apart) and fit in `batchBlock` entries, so a dense set reads the
    /// file once, sequentially, and a sparse one reads what `lookup` would (a merge join of two sorted lists; git's multi-pack-index look-ups and
    /// restic's index are read the same way).
    func lookup(sorted digests: [Digest], _ found: (Int, IndexFormat.Entry) -> Void) {
        if digests.count >= count / IndexFile.denseRatio { merge(sorted: digests, found); return }
        var block: [UInt8] = []
        var blockRange = 0..<0
        var k = 0
        while k < digests.count {
            let r = candidates(digests[k])
            if r.isEmpty { k += 1; continue }
            if r.lowerBound < blockRange.lowerBound || r.upperBound > blockRange.upperBound {
                // A new block from here, stretched over the next digests' candidates while it fits.
                var end = r.upperBound
                var j = k + 1
                while j < digests.count {
                    let next = candidates(digests[j])
                    if !next.isEmpty {
                        // Only over near neighbours: a sparse set reads what `lookup` would.
                        if next.upperBound - r.lowerBound > IndexFile.batchBlock || next.lowerBound > end + IndexFile.sampleEvery { break }
                        end = max(end, next.upperBound)
                    }
                    j += 1
                }
                let n = end - r.lowerBound
                if block.count < n * IndexFormat.entrySize { block = [UInt8](repeating: 0, count: n * IndexFormat.entrySize) }
                let want = n * IndexFormat.entrySize
                guard pread(fd, &block, want, off_t(entriesOffset + r.lowerBound * IndexFormat.entrySize)) == want else {
                    blockRange = 0..<0; k += 1; continue
                }
                blockRange = r.lowerBound..<end
            }
            block.withUnsafeBytes { IndexFile.scan($0, first: blockRange.lowerBound, r, digests[k]) { found(k, $0) } }
            k += 1
        }
    }

    /// `lookup(sorted:)` reads the whole file and merges when it is given at least one digest
    /// per this many entries: each of its `sampleEvery`-entry stretches would be read anyway.
    static let denseRatio = 64

    /// `lookup(sorted:)` for a set dense in this file: the entries are read forwards in blocks
    /// of `batchBlock` and merged with `digests` (for each entry, the first digest not below it
    /// is found by galloping forwards from the last one: O(entries x log(digests / entries)),
    /// with no search of the samples per digest, which an export's look-up of 65,536 digests in
    /// every index file spent 16% of its time on). An entry that cannot be read ends the merge:
    /// the digests not found are read one by one by the caller, as for any not located.
    private func merge(sorted digests: [Digest], _ found: (Int, IndexFormat.Entry) -> Void) {
        guard !digests.isEmpty else { return }
        var block = [UInt8](repeating: 0, count: min(count, IndexFile.batchBlock) * IndexFormat.entrySize)
        var start = 0, k = 0
        while start < count && k < digests.count {
            let n = min(IndexFile.batchBlock, count - start)
            let want = n * IndexFormat.entrySize
            guard pread(fd, &block, want, off_t(entriesOffset + start * IndexFormat.entrySize)) == want else { return }
            block.withUnsafeBytes { raw in
                var m = 0
                while m < n && k < digests.count {
                    let d = IndexFormat.digest(raw, m)
                    if digests[k] < d {
                        // Gallop: the first k with digests[k] >= d.
                        var step = 1, hi = k + 1
                        while hi < digests.count && digests[hi] < d { k = hi; step <<= 1; hi = k + step }
                        hi = min(hi, digests.count)
                        var lo = k + 1
                        while lo < hi { let mid = (lo + hi) / 2; if digests[mid] < d { lo = mid + 1 } else { hi = mid } }
                        k = lo
                    }
                    var j = k
                    while j < digests.count && digests[j] == d { found(j, IndexFormat.entry(raw, m)); j += 1 }
                    m += 1
                }
            }
            start += n
        }
    }

    /// Calls `body` with every entry, in digest order (read in blocks).
    /// Entries `start..<start + n` (at most what is left), read with one `pread`.
    /// - Throws: `SystemError` EIO when the file is cut short.
    func entries(from start: Int, count n: Int) throws -> [IndexFormat.Entry] {
        let k = max(0, min(n, count - start))
        guard k > 0 else { return [] }
        var block = [UInt8](repeating: 0, count: k * IndexFormat.entrySize)
        guard pread(fd, &block, block.count, off_t(entriesOffset + start * IndexFormat.entrySize)) == block.count else {
            throw SystemError("read", path, errno: EIO)
        }
        return block.withUnsafeBytes { raw in (0..<k).map { IndexFormat.entry(raw, $0) } }
    }

    func forEach(_ body: (IndexFormat.Entry) throws -> Void) throws {
        let perBlock = 8192
        var block = [UInt8](repeating: 0, count: perBlock * IndexFormat.entrySize)
        var i = 0
        while i < count {
            let n = min(perBlock, count - i)
            let want = n * IndexFormat.entrySize
            guard pread(fd, &block, want, off_t(entriesOffset + i * IndexFormat.entrySize)) == want else { throw SystemError("read", path, errno: EIO) }
            try block.withUnsafeBytes { raw in for k in 0..<n { try body(IndexFormat.entry(raw, k)) } }
            i += n
        }
    }
}

/// A Bloom filter over digests (Bloom 1970; k bit positions from two of the digest's words, as in
/// Kirsch and Mitzenmacher 2006): "certainly absent" costs no read, which is most puts of a first
/// download. About 10 bits per object, 7 positions: under 1% false positives.
struct DigestBloom {
    private(set) var bits: [UInt64]
    private(set) var capacity: Int
    private(set) var count = 0
    static let k = 7

    /// The largest capacity sized (2^27 entries, 160 MiB of bits): the index files of stores
    /// over 67 million objects size no larger filter (it has more false positives there, each
    /// a lookup in the index), and a planted sparse index file (`truncate -s 16T`) asked for
    /// terabytes (a review of 2026-12-07).
    static let maxCapacity = 1 << 27

    /// A filter for `capacity` objects (at least 65,536, at most `maxCapacity`).
    init(capacity: Int) {
        self.capacity = min(max(capacity, 1 << 16), DigestBloom.maxCapacity)
        bits = [UInt64](repeating: 0, count: (self.capacity * 10 + 63) / 64)
    }

    private func positions(_ d: Digest) -> [Int] {
        let m = UInt64(bits.count * 64)
        return (0..<DigestBloom.k).map { i in Int((d.c &+ UInt64(i) &* (d.d | 1)) % m) }
    }

    mutating func insert(_ d: Digest) {
        for p in positions(d) { bits[p >> 6] |= 1 << UInt64(p & 63) }
        count += 1
    }

    func mayContain(_ d: Digest) -> Bool {
        positions(d).allSatisfy { bits[$0 >> 6] & (1 << UInt64($0 & 63)) != 0 }
    }

    /// True when it holds more than twice what it was sized for (time to rebuild it larger).
    var isOverfull: Bool { count > 2 * capacity }
}
