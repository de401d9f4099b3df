import Foundation
import Glibc
import TileSpoolCore

/// The files of one region under `<store>/regions/<id>/`:
/// - `request.json`: the accepted request, defaults filled in (credentials kept: it is needed to resume);
/// - `plan.json`: the exact `ResourcePlan`, written once every TileJSON is resolved;
/// - `manifest.tsv`: one `ManifestLine` per completed resource, appended in batches after the
///   objects they name are durable;
/// - `journal.tsv`: the same lines for objects written since the last sync, appended at once and
///   never synced. After `kill -9` the page cache still holds them, so a restart promotes the ones
///   whose objects hash to their names instead of fetching them again (docs/durability.md);
/// - `refresh/`: while a refresh is under way, its own `plan.json`, `manifest.tsv` and
///   `journal.tsv` (the same formats) and `refresh.json` (`RefreshScope.jsonObject`); the files
///   above stay untouched until `commitRefresh` swaps the new manifest in (docs/refresh.md).
///
/// The folder is reached by descriptor, never by its path: `<store>/regions` and the region's
/// folder (and `refresh/` in it) are opened with O_NOFOLLOW, one component at a time, and every
/// file is named under `/proc/self/fd/<fd>/` of the folder so opened. A symlink planted at
/// `<store>/regions/<id>` (or at `refresh`) is never followed: `openFolder` throws ELOOP
/// (`RegionFiles.refusal` words it), every read finds nothing and every write fails.
public final class RegionFiles: @unchecked Sendable {
    /// The folder's path, for messages and for `remove` (which removes a symlink there as a link).
    public let dir: String
    /// Where the folder lives: `<store>/regions` by path (opened without following a symlink
    /// there), or the region whose `refresh/` this is (`parent`).
    private enum Container { case path(String), refresh }
    private let container: Container
    /// The region whose `refresh/` this is: held weakly, as the region holds its refresh's files
    /// (a cycle kept both, with their open folders, for ever: attack round 26, two descriptors
    /// leaked per refresh and one per request dropped again).
    private weak var parent: RegionFiles?
    private let name: String
    private var handle: Directory?
    /// Handles replaced (their folder was removed): kept open until this object goes, so that a
    /// path made from one (`/proc/self/fd/<fd>/...`) in another thread never names a reused fd.
    private var retired: [Directory] = []
    private let handleLock = NSLock()

    /// The base of every path this object acts on: `/proc/self/fd/<fd>` of the folder opened by
    /// descriptor (`openFolder`), or a path that names nothing when it cannot be opened (missing,
    /// or a symlink TileSpool did not make).
    private var base: String {
        guard let d = try? openFolder() else { return "/proc/self/fd/-1" }
        return "/proc/self/fd/\(d.fd)"
    }
    public var requestPath: String { base + "/request.json" }
    public var planPath: String { base + "/plan.json" }
    public var manifestPath: String { base + "/manifest.tsv" }
    public var journalPath: String { base + "/journal.tsv" }
    private var manifestFD: Int32 = -1
    private var journalFD: Int32 = -1

    /// The files of the region folder `dir` (`<store>/regions/<id>`); nothing is opened yet.
    public init(dir: String) {
        self.dir = dir
        let (parent, name) = Files.split(dir)
        container = .path(parent); self.name = name
    }
    private init(refreshOf region: RegionFiles) {
        dir = region.dir + "/refresh"
        container = .refresh; parent = region; name = "refresh"
    }
    deinit { closeManifest() }

    /// The region's folder, opened by descriptor without following a symlink at it or at its
    /// container (`<store>/regions`, or the region for `refresh/`); kept open, and opened again
    /// once the folder it holds has been removed (a region deleted and made again).
    /// - Throws: `SystemError`: ENOENT when it does not exist, ELOOP (or ENOTDIR) for a symlink.
    public func openFolder() throws(SystemError) -> Directory {
        handleLock.lock(); defer { handleLock.unlock() }
        if let h = handle, h.isLinked { return h }
        if let h = handle { retired.append(h); handle = nil }
        let parent: Directory
        switch container {
        case .path(let p): parent = try Directory(path: p, followFinal: false)
        case .refresh:
            guard let region = self.parent else { throw SystemError("open", dir, errno: ENOENT) }
            parent = try region.openFolder()
        }
        let d = try parent.subdirectory(name)
        handle = d
        return d
    }

    /// `message` with the descriptor paths of this folder and of its `refresh/`
    /// (`/proc/self/fd/<fd>`, which name nothing to a reader) written as `dir` and `refreshDir`.
    public func shown(_ message: String) -> String {
        guard message.contains("/proc/self/fd/") else { return message }
        var text = message
        handleLock.lock()
        let mine = handle.map { "/proc/self/fd/\($0.fd)" }
        let refresh = refreshFilesIfMade // read under the lock: the writer thread may make it
        handleLock.unlock()
        if let r = refresh?.shownBase { text = Self.replacing(r, by: refreshDir, in: text) }
        if let mine { text = Self.replacing(mine, by: dir, in: text) }
        return text
    }
    /// `base` of the folder now open, nil when none is.
    private var shownBase: String? {
        handleLock.lock(); defer { handleLock.unlock() }
        return handle.map { "/proc/self/fd/\($0.fd)" }
    }
    /// `text` with `prefix` replaced by `by` where it is a whole path prefix (followed by `/` or
    /// the end of a word), so that fd 1 does not match inside fd 12.
    private static func replacing(_ prefix: String, by: String, in text: String) -> String {
        var out = ""
        var rest = Substring(text)
        while let r = rest.range(of: prefix) {
            let next = rest[r.upperBound...].first
            out += rest[..<r.lowerBound]
            out += (next == nil || next == "/" || next == " " || next == ":") ? by : prefix
            rest = rest[r.upperBound...]
        }
        return out + rest
    }

    /// What a daemon says of a region folder `openFolder` refused: a symlink (or anything but a
    /// folder) at `<store>/regions/<id>`, which TileSpool did not make and never follows.
    public static func refusal(_ id: String, _ error: SystemError) -> String {
        "store/regions/\(id) is not a folder TileSpool made (\(error.errnoDescription)): a symlink there is never followed; region skipped, nothing read or written there (remove it, then drop the request again)"
    }

    // MARK: - Refresh

    /// The folder of a refresh under way, `<dir>/refresh` (for messages).
    public var refreshDir: String { dir + "/refresh" }
    /// The files a refresh writes (plan, manifest, journal), in `refreshDir`.
    public var refreshFiles: RegionFiles {
        handleLock.lock(); defer { handleLock.unlock() }
        if let f = refreshFilesIfMade { return f }
        let f = RegionFiles(refreshOf: self)
        refreshFilesIfMade = f
        return f
    }
    private var refreshFilesIfMade: RegionFiles?
    private var refreshInfoPath: String { refreshFiles.base + "/refresh.json" }
    /// Written once the refreshed manifest is complete, before the swap: the swap is then finished
    /// by the next start whatever happens (roll forward).
    private var refreshCommitPath: String { refreshFiles.base + "/commit" }

    /// Starts a refresh: a swap left unfinished is finished first (`RefreshSwap`), then a fresh
    /// `refresh/` folder with `refresh.json` (fsynced).
    /// - Parameter scope: which resources the refresh asks about again.
    /// - Throws: `SystemError` when the folder or file cannot be written, or the unfinished swap
    ///   cannot be finished.
    public func beginRefresh(scope: RefreshScope) throws {
        _ = try finishInterruptedRefreshCommit()
        refreshFiles.closeManifest()
        let folder = try openFolder()
        folder.removeTree("refresh")
        do throws(SystemError) {
            try folder.makeDirectory("refresh")
            try Files.writeAtomically(JSONKind.serialize(scope.jsonObject), to: refreshInfoPath, sync: true)
            try folder.sync()
        } catch {
            folder.removeTree("refresh") // no half-made refresh/ left (a full disk, say)
            throw error
        }
    }

    /// The scope of the refresh under way, or nil when there is none.
    public func refreshUnderWay() -> RefreshScope? {
        guard let data = try? Files.readRegularFile(refreshInfoPath, limit: 4096) else { return nil }
        return RefreshScope(jsonObject: ((try? JSONKind.parse(data)) as? [String: Any]) ?? [:])
    }

    /// Replaces the region's manifest (and its plan, when the refresh planned differently) by the
    /// refresh's, then removes `refresh/` (`RefreshSwap.commit`: the manifest in one `rename`, the
    /// commit point; a crash or a failure after it is finished at the next start).
    /// - Throws: `SystemError` when the mark cannot be written or the manifest renamed (the old
    ///   pack then stays).
    public func commitRefresh() throws {
        refreshFiles.closeManifest()
        closeManifest()
        try RefreshSwap.commit(self)
    }

    /// True when a refresh's swap was cut short (its commit mark exists): the swap is finished.
    /// - Throws: `SystemError` when a rename fails.
    public func finishInterruptedRefreshCommit() throws -> Bool { try RefreshSwap.finishInterrupted(self) }

    /// Drops a refresh under way and its files; the region's own files are left as they were
    /// (a swap whose commit mark is written is finished instead, `RefreshSwap.abandon`).
    public func abandonRefresh() {
        refreshFiles.closeManifest()
        RefreshSwap.abandon(self)
    }

    /// Creates the folder (by descriptor: a symlink at `<store>/regions/<id>` is refused, ELOOP,
    /// never written through) and writes the request (fsynced). `exclusive`: only when no
    /// `request.json` is there (`RENAME_NOREPLACE`).
    /// - Returns: false when `exclusive` found a request stored (nothing written).
    @discardableResult
    public func create(request: RegionRequest, exclusive: Bool) throws(SystemError) -> Bool {
        guard case .path(let parent) = container else { throw SystemError("mkdir", dir, errno: EINVAL) }
        try Files.makeDirectories(parent)
        handleLock.lock()
        // The folder held open is kept while it is there (retiring it each time left one more
        // descriptor on the same folder per request dropped again: attack round 26).
        if let h = handle, !h.isLinked { retired.append(h); handle = nil }
        if handle == nil {
            do throws(SystemError) {
                handle = try Directory(path: parent, followFinal: false).subdirectory(name, create: true)
            } catch { handleLock.unlock(); throw error }
        }
        handleLock.unlock()
        return try Files.writeAtomically(JSONKind.serialize(request.jsonObject, pretty: true), to: requestPath, sync: true, replace: !exclusive)
    }

    /// Reads the stored request back.
    /// - Throws: `SystemError` when unreadable, `RegionError` when the file is not a valid request.
    public func loadRequest() throws -> RegionRequest {
        let data = try Files.readRegularFile(requestPath, limit: RequestValidator.maxStoredSize)
        return try RequestValidator.validate(data, fileName: (dir as NSString).lastPathComponent + ".json", maxSize: RequestValidator.maxStoredSize, rowBudget: false)
    }

    /// Writes the plan (fsynced, atomically).
    public func savePlan(_ plan: ResourcePlan) throws(SystemError) {
        try Files.writeAtomically(RegionFiles.planData(plan), to: planPath, sync: true)
    }

    /// The bytes of `plan.json` (sorted keys, slashes unescaped), as every backend stores it.
    public static func planData(_ plan: ResourcePlan) -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(plan)) ?? Data()
    }

    /// The stored plan, or nil when none was written yet.
    public func loadPlan() -> ResourcePlan? {
        guard let data = try? Files.readRegularFile(planPath, limit: 64 << 20) else { return nil }
        return try? JSONDecoder().decode(ResourcePlan.self, from: data)
    }

    /// Calls `body` for every complete line of the manifest, in order. A last line without its
    /// newline (a write cut by a crash) is ignored; with `cutPartialLine` (only the daemon, which is
    /// the only writer, before it appends) it is also cut off the file, so appends stay aligned.
    /// Readers beside a running daemon (gc, verify) must leave the file alone.
    public func readManifest(cutPartialLine: Bool = false, _ body: (ManifestLine) -> Void) {
        handleLock.lock(); linesFailure = nil; handleLock.unlock()
        readLines(manifestPath, cut: cutPartialLine, body)
    }

    /// Why the last `readManifest` or `readJournal` since a `readManifest` read less than the
    /// file holds (part of `readFailure`).
    private var linesFailure: SystemError?
    private func noteReadFailure(_ e: SystemError) {
        handleLock.lock(); if linesFailure == nil { linesFailure = e }; handleLock.unlock()
    }

    /// Calls `body` for every complete line of the journal (see the type's documentation).
    public func readJournal(cutPartialLine: Bool = false, _ body: (ManifestLine) -> Void) {
        readLines(journalPath, cut: cutPartialLine, body)
    }

    /// Streams `path` in 1 MiB blocks (memory stays flat however long the manifest is), calling
    /// `body` for each complete line; cuts off a trailing partial line.
    /// A file that exists but is not a regular file (a symlink, a folder, a FIFO) or cannot be
    /// read is a `readFailure`: gc must not take it for an empty manifest.
    private func readLines(_ path: String, cut: Bool, _ body: (ManifestLine) -> Void) {
        let fd: Int32
        do throws(SystemError) { fd = try Files.openRegular(path, O_RDONLY) } catch {
            if error.errno != ENOENT { noteReadFailure(error) }
            return
        }
        defer { close(fd) }
        var failed: SystemError?
        let consumed = RegionFiles.scanLines(read: { buf, n in
            while true {
                let r = read(fd, buf, n)
                if r < 0 && errno == EINTR { continue }
                if r < 0 { failed = SystemError("read", path) }
                return r
            }
        }, body)
        if let failed { noteReadFailure(failed); return }
        if cut, let consumed, truncate(path, off_t(consumed)) != 0 {
            Log.error("cannot cut the partial last line of \(path): \(SystemError("truncate", path).errnoDescription)")
        }
    }

    /// Splits what `read` returns (up to `n` bytes into the buffer each call; 0 at the end, < 0 on
    /// an error) into manifest lines, calling `body` for each complete one, in 1 MiB blocks.
    /// - Returns: the bytes up to and including the last newline when a partial line follows it
    ///   (what a cut keeps), else nil.
    /// - Throws: what `body` throws, or `SystemError` "read" when `read` fails.
    static func scanLines(read: (UnsafeMutablePointer<UInt8>, Int) -> Int, skippingTiles: Bool = false, _ body: (ManifestLine) throws -> Void) rethrows -> Int? {
        // "tile\t": a line of kind tile, passed over unparsed with `skippingTiles`.
        func isTile(_ l: UnsafeBufferPointer<UInt8>) -> Bool {
            l.count > 5 && l[0] == 0x74 && l[1] == 0x69 && l[2] == 0x6C && l[3] == 0x65 && l[4] == 0x09
        }
        let blockSize = 1 << 20
        var carry: [UInt8] = []
        var offset = 0          // bytes of the file consumed up to the last newline
        let buf = UnsafeMutablePointer<UInt8>.allocate(capacity: blockSize)
        defer { buf.deallocate() }
        while true {
            let n = read(buf, blockSize)
            if n <= 0 { break }
            var start = 0
            for i in 0..<n where buf[i] == 0x0A {
                offset += carry.count + (i - start) + 1 // in bytes, before any decoding
                let line: ManifestLine?
                if carry.isEmpty {
                    let raw = UnsafeBufferPointer(start: buf + start, count: i - start)
                    line = skippingTiles && isTile(raw) ? nil : ManifestLine(utf8: raw)
                } else {
                    carry.append(contentsOf: UnsafeBufferPointer(start: buf + start, count: i - start))
                    line = carry.withUnsafeBufferPointer { skippingTiles && isTile($0) ? nil : ManifestLine(utf8: $0) }
                    carry.removeAll(keepingCapacity: true)
                }
                if let line { try body(line) }
                start = i + 1
            }
            carry.append(contentsOf: UnsafeBufferPointer(start: buf + start, count: n - start))
        }
        return carry.isEmpty ? nil : offset
    }

    /// The manifest as it is now (`RegionStorage.manifestSnapshot`): the file held open, read up
    /// to its present size; a swap or an append afterwards is not seen.
    /// - Throws: `SystemError` when there is no manifest or it cannot be opened.
    public func manifestSnapshot() throws -> any ManifestSnapshot { try FileManifestSnapshot(path: manifestPath) }

    /// Appends lines to the manifest and fdatasyncs it. Call only after the objects the lines name
    /// are durable (`TileStore.sync`).
    public func appendToManifest(_ lines: [ManifestLine]) throws(SystemError) {
        var text = ""
        text.reserveCapacity(lines.count * 120)
        for l in lines { text += l.text }
        try appendToManifest(text: Array(text.utf8))
    }

    /// Appends already rendered lines (`ManifestLine.text`, in order) to the manifest and
    /// fdatasyncs it; the form the daemon's writer thread uses (docs/durability.md). Call only after
    /// the objects the lines name are durable (`TileStore.sync`), and from one thread at a time.
    /// - Throws: `SystemError` from open, write or fdatasync.
    public func appendToManifest(text bytes: [UInt8]) throws(SystemError) {
        guard !bytes.isEmpty else { return }
        if manifestFD < 0 {
            let existed = Files.entryType(manifestPath) == .regular
            manifestFD = try Files.openRegular(manifestPath, O_WRONLY | O_CREAT | O_APPEND, mode: 0o666)
            if !existed {
                try Files.appendWhole(manifestFD, Data(ManifestLine.header.utf8), path: manifestPath)
            }
        }
        let r: Result<Void, SystemError> = bytes.withUnsafeBytes { raw in
            do throws(SystemError) { try Files.appendWhole(manifestFD, raw, path: manifestPath); return .success(()) } catch { return .failure(error) }
        }
        try r.get()
        if fdatasync(manifestFD) != 0 { throw SystemError("fdatasync", manifestPath) }
    }

    /// Appends already rendered lines to the journal without syncing, whole or not at all.
    /// - Throws: `SystemError` from open or write.
    public func appendToJournal(text bytes: ArraySlice<UInt8>) throws(SystemError) {
        guard !bytes.isEmpty else { return }
        if journalFD < 0 { journalFD = try Files.openRegular(journalPath, O_WRONLY | O_CREAT | O_APPEND, mode: 0o666) }
        let r: Result<Void, SystemError> = bytes.withUnsafeBytes { raw in
            do throws(SystemError) { try Files.appendWhole(journalFD, raw, path: journalPath); return .success(()) } catch { return .failure(error) }
        }
        try r.get()
    }

    /// Replaces the journal's content by `bytes` (lines still waiting for a commit) once the lines
    /// before them are in the manifest: empties it when `bytes` is empty, else writes
    /// `journal.tsv.tmp` and renames it over `journal.tsv`, so a kill -9 at any moment leaves
    /// either journal whole (lines of the old one already in the manifest are skipped at
    /// recovery). Nothing is synced. When the new file cannot be written the old journal stays
    /// (longer, still correct) and the error is logged.
    public func replaceJournal(with bytes: ArraySlice<UInt8>) {
        if bytes.isEmpty { clearJournal(); return }
        let tmp = journalPath + ".tmp"
        do throws(SystemError) {
            let fd = try Files.open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, mode: 0o666)
            let r: Result<Void, SystemError> = bytes.withUnsafeBytes { raw in
                do throws(SystemError) { try Files.writeAll(fd, raw, path: tmp); return .success(()) } catch { return .failure(error) }
            }
            if case .failure(let e) = r { close(fd); throw e }
            if close(fd) != 0 { throw SystemError("close", tmp) }
            try Files.rename(tmp, journalPath)
        } catch {
            unlink(tmp)
            Log.error("cannot rewrite \(journalPath) (it keeps lines already in the manifest): \(error)")
            return
        }
        if journalFD >= 0 { close(journalFD); journalFD = -1 } // it names the replaced file
    }

    /// Appends lines to the journal without syncing, whole or not at all.
    public func appendToJournal(_ lines: [ManifestLine]) throws(SystemError) {
        guard !lines.isEmpty else { return }
        if journalFD < 0 { journalFD = try Files.openRegular(journalPath, O_WRONLY | O_CREAT | O_APPEND, mode: 0o666) }
        var text = ""
        for l in lines { text += l.text }
        try Files.appendWhole(journalFD, Data(text.utf8), path: journalPath)
    }

    /// Empties the journal once its lines are in the manifest.
    public func clearJournal() {
        if journalFD >= 0 { ftruncate(journalFD, 0) } else if Files.entryType(journalPath) == .regular { truncate(journalPath, 0) }
    }

    /// Closes the manifest's and journal's file descriptors (they reopen on the next append).
    public func closeManifest() {
        if manifestFD >= 0 { close(manifestFD); manifestFD = -1 }
        if journalFD >= 0 { close(journalFD); journalFD = -1 }
    }

    /// Prepares the files for the same download with new credentials (a rotated token): the
    /// manifest is kept, so what is recorded is not fetched again, while the plan (whose URLs hold
    /// the old credentials), the journal and any refresh under way go. With `dropDocuments` (a
    /// style request) the style and TileJSON lines leave the manifest too (rewritten atomically
    /// and fsynced), so those documents, which give the other URLs, are fetched again with the
    /// new credentials.
    /// - Throws: `SystemError` when the manifest cannot be rewritten (it is then left as it was).
    public func keepForNewCredentials(dropDocuments: Bool) throws(SystemError) {
        abandonRefresh()
        closeManifest()
        Files.remove(journalPath)
        Files.remove(journalPath + ".tmp")
        Files.remove(planPath)
        guard dropDocuments else { return }
        var text = ManifestLine.header
        readManifest(cutPartialLine: true) { line in
            if line.kind != .style && line.kind != .source { text += line.text }
        }
        try Files.writeAtomically(Data(text.utf8), to: manifestPath, sync: true)
    }

    /// Removes the manifest and plan (a fresh download of the same id), and any refresh under way.
    public func resetDownload() {
        abandonRefresh()
        closeManifest()
        Files.remove(manifestPath)
        Files.remove(journalPath)
        Files.remove(journalPath + ".tmp")
        Files.remove(planPath)
    }
}

/// A manifest file held open (`RegionFiles.manifestSnapshot`): every read goes through the same
/// descriptor with `pread`, up to the size it had when opened, so a refresh's swap (a rename over
/// the path) or an append in between changes nothing of what is read.
final class FileManifestSnapshot: ManifestSnapshot, @unchecked Sendable {
    let path: String
    private let fd: Int32
    private let size: Int
    let version: String

    init(path: String) throws(SystemError) {
        self.path = path
        fd = try Files.openRegular(path, O_RDONLY)
        var st = stat()
        guard fstat(fd, &st) == 0 else { let e = SystemError("fstat", path); close(fd); throw e }
        guard (st.st_mode & S_IFMT) == S_IFREG else { close(fd); throw SystemError("read", path, errno: EINVAL) }
        size = Int(st.st_size)
        version = "file:\(st.st_dev):\(st.st_ino):\(st.st_size):\(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec)"
    }
    deinit { close(fd) }

    func forEachLine(skippingTiles: Bool, _ body: (ManifestLine) throws -> Void) throws {
        var offset = 0
        var failure: SystemError?
        _ = try RegionFiles.scanLines(read: { buf, n in
            let want = min(n, size - offset)
            guard want > 0 else { return 0 }
            while true {
                let r = pread(fd, buf, want, off_t(offset))
                if r < 0 && errno == EINTR { continue }
                if r < 0 { failure = SystemError("read", path); return -1 }
                offset += r
                return r
            }
        }, skippingTiles: skippingTiles, body)
        if let failure { throw failure }
        if offset < size { throw SystemError("read", path, errno: EIO) } // shorter than it was: cut meanwhile
    }
}

extension RegionFiles: RegionStorage {
    public func refusal(id: String) -> String? {
        do { _ = try openFolder(); return nil } catch { return RegionFiles.refusal(id, error) }
    }
    public var location: String { dir }
    /// Why the folder cannot be read, when it exists but cannot be opened (a symlink there,
    /// ELOOP; anything but a folder; EACCES, EMFILE): what was read from it is not the region's.
    /// nil when it opens, or does not exist (ENOENT: nothing to read). Also why the last
    /// `readManifest` (and `readJournal` after it) read less than the file: a manifest or
    /// journal that is not a regular file (a symlink, a folder, a FIFO) or a failed read.
    public var readFailure: Error? {
        do { _ = try openFolder() } catch { return error.errno == ENOENT ? nil : error }
        handleLock.lock(); defer { handleLock.unlock() }
        return linesFailure
    }
    public var refreshStorage: any RegionStorage { refreshFiles }

    public func requestData() throws -> Data { try Files.readRegularFile(requestPath, limit: RequestValidator.maxFileSize) }
    public func requestBeingWritten(lockHolders: Set<pid_t>) -> Bool {
        guard let folder = try? openFolder() else { return false }
        let now = Date().timeIntervalSince1970
        return folder.list().contains { name in
            guard let t = SaveTempName.parse(name), t.target == "request.json",
                  let st = folder.status(name), now - Double(st.st_mtim.tv_sec) < RegionFiles.requestWriteSeconds else { return false }
            return LeftBehind.inFlight(t.pid, lockHolders: lockHolders)
        }
    }

    /// How long a request's temp file counts as being written (`requestBeingWritten`), in
    /// seconds: writing one takes milliseconds; an older one, even of a live process, is left over
    /// (attack round 62: a stray one named after the daemon's pid hid a fault for as long as the
    /// daemon ran).
    static let requestWriteSeconds: Double = 10

    /// Writes the manifest anew with `lines` (atomically, fsynced).
    public func replaceManifest(_ lines: [ManifestLine]) throws {
        closeManifest()
        var text = ManifestLine.header
        for l in lines { text += l.text }
        try Files.writeAtomically(Data(text.utf8), to: manifestPath, sync: true)
    }

    public func manifestModified() -> Double? { StoreMaintenance.mtime(manifestPath) }

    /// The manifest is one file already.
    public func compactManifest() throws -> Int { 0 }

    /// Removes the region's folder and everything in it (by descriptor, `Files.removeTree`),
    /// `request.json` first: a delete cut short (kill -9) leaves a folder without its request,
    /// which `verify` names and the daemon's start does not take for a region (attack round 59:
    /// removed last, it left a region that verify passed and a resume downloaded again).
    /// Anything else at `dir` (a symlink planted there) was not made by TileSpool and is left.
    public func remove() {
        closeManifest()
        handleLock.lock()
        if let h = handle { retired.append(h); handle = nil }
        // The refresh's files hold these (their folder is opened through this one's) and these
        // hold them: let go, so that both, with their open folders, go once the caller lets go
        // of this object (attack round 24: one descriptor leaked per deleted region).
        let refresh = refreshFilesIfMade
        refreshFilesIfMade = nil
        handleLock.unlock()
        refresh?.closeManifest()
        guard Files.entryType(dir) == .directory, let folder = try? Directory(path: dir, followFinal: false) else { return }
        folder.remove("request.json")
        Files.removeTree(dir)
    }

    public func saveFailedList(_ text: String?) throws {
        let path = base + "/failed.tsv"
        guard let text else { Files.remove(path); return }
        try Files.writeAtomically(Data(text.utf8), to: path)
    }
}

/// The swap's steps on disk (`RefreshSwap`): the mark is the empty file `refresh/commit`; the
/// manifest and plan are renamed from `refresh/` over the region's (slot 0).
extension RegionFiles: RefreshSwapSteps {
    var regionID: String { name }

    func writeCommitMark() throws -> Int {
        try Files.writeAtomically(Data(), to: refreshCommitPath, sync: true)
        try refreshFiles.openFolder().sync()
        return 0
    }

    func commitMark() throws -> Int? { Files.entryType(refreshCommitPath) == .regular ? 0 : nil }

    func removeCommitMark() throws {
        let folder = try refreshFiles.openFolder()
        guard folder.remove("commit") || folder.status("commit") == nil else { throw SystemError("unlink", refreshDir + "/commit") }
        try folder.sync()
    }

    /// The refresh's manifest has been renamed away (or never was).
    func refreshedManifestInstalled(slot: Int) throws -> Bool { Files.entryType(refreshFiles.manifestPath) != .regular }

    func refreshHasManifest() throws -> Bool { Files.entryType(refreshFiles.manifestPath) == .regular }

    func installRefreshedManifest(slot: Int) throws {
        if Files.entryType(refreshFiles.manifestPath) == .regular { try Files.rename(refreshFiles.manifestPath, manifestPath) }
        try openFolder().sync()
    }

    func installRefreshedPlan() throws {
        let newPlan = refreshFiles.planPath
        guard Files.entryType(newPlan) == .regular else { return }
        let same = (try? Files.readRegularFile(newPlan, limit: 64 << 20)) == (try? Files.readRegularFile(planPath, limit: 64 << 20))
        guard !same else { return }
        try Files.rename(newPlan, planPath)
        try openFolder().sync()
    }

    /// Everything in `refresh/` but the scope and the mark, then the scope, the mark and the
    /// folder: a crash meanwhile never leaves a scope without its mark (a refresh that would
    /// start again).
    func removeRefreshFiles() throws {
        refreshFiles.closeManifest()
        let folder: Directory
        switch Result(catching: { () throws(SystemError) in try openFolder() }) {
        case .success(let d): folder = d
        case .failure(let e) where e.errno == ENOENT: return // no region folder (a region just accepted): no refresh to remove
        case .failure(let e): throw e
        }
        if let r = try? refreshFiles.openFolder() {
            for entry in r.list() where entry != "refresh.json" && entry != "commit" { r.removeTree(entry) }
            r.remove("refresh.json")
            r.remove("commit")
        }
        guard folder.removeTree("refresh") else { throw SystemError("rmdir", refreshDir, errno: ENOTEMPTY) }
        // The next refresh makes its folder and files anew: these go, with the descriptor of
        // the folder just removed (kept, it was retired and one more stayed open per refresh).
        handleLock.lock()
        refreshFilesIfMade = nil
        handleLock.unlock()
    }
}
