// Where the store's files live: a narrow interface of named immutable files (after restic's
// `Backend`), with one implementation on a local folder and one in an S3 bucket. Everything above
// it (packs, the index, manifests, gc, verify) is written once, against this protocol, and never
// knows which backend it has.
import CLinux
import Foundation
import Glibc
import TileSpoolCore

/// One file of a backend: its name (relative, `/`-separated, e.g. `packs/ab/<64 hex>.pack`), size
/// in bytes and modification time in seconds since 1970.
public struct BackendFile: Sendable, Equatable {
    public var name: String
    public var size: Int
    public var modified: Double
    public init(name: String, size: Int, modified: Double) { self.name = name; self.size = size; self.modified = modified }
}

/// Named immutable files. Names are relative paths of lower-case letters, digits, `.`, `_`, `-` and
/// `/`, with no empty, `.` or `..` segment (`BackendName.isValid`). Errors are the backend's own:
/// `SystemError` on disk (with its errno; `isStorageFailure` for a full disk), `S3Error` in a bucket.
public protocol Backend: AnyObject, Sendable {
    /// Where the files are, for messages: a folder path or `s3://BUCKET/PREFIX` (no credentials).
    var location: String { get }
    /// True when several daemons may write it at once (S3); a disk store is one daemon's (by lock).
    var isShared: Bool { get }
    /// Saves `data` as `name`, atomically (a reader sees no file or all of it) and durably (it
    /// survives a power cut once this returns). With `ifAbsent`, nothing is written when `name`
    /// exists.
    /// - Returns: true when written; false when `ifAbsent` found the name taken.
    @discardableResult
    func save(_ name: String, _ data: Data, ifAbsent: Bool) throws -> Bool
    /// Saves the local file at `path` as `name`, as `save` does; the file is consumed (moved into
    /// place on disk, uploaded then removed in a bucket). For packs, which are written to a local
    /// file as they grow.
    @discardableResult
    func save(_ name: String, fromFile path: String, ifAbsent: Bool) throws -> Bool
    /// The bytes of `name` (within `range` when given), or nil when there is no such file.
    /// - Throws: the backend's error; `SystemError` EIO when the file does not hold `range` whole.
    func load(_ name: String, range: Range<Int>?) throws -> Data?
    /// The file `name`, or nil when there is none.
    func stat(_ name: String) throws -> BackendFile?
    /// Every file whose name starts with `prefix` (a folder prefix ends in `/`), in no order.
    func list(prefix: String) throws -> [BackendFile]
    /// Removes `name`; no error when it is absent.
    func remove(_ name: String) throws
    /// Temp files that saves cut short left under `prefix` (see the extension's default).
    func leftovers(prefix: String) throws -> [BackendFile]
    /// Entries under `prefix` that no save makes, as `name (kind)`: on disk a symlink, FIFO,
    /// socket or device, or a folder whose name starts with `.`. Never read, followed or removed;
    /// `verify` names them. None by default: a bucket holds only objects.
    func foreignEntries(prefix: String) throws -> [String]
    /// The probe URL when `error` says the backend cannot be reached (S3 down: the region waits as
    /// `pausedNetwork`), else nil.
    func unreachableProbeURL(for error: Error) -> String?
    /// Calls `body` with each of `ranges` of file `name` (its index in `ranges` and its bytes), in
    /// the order given: an export reads a pack's objects in offset order. The default loads each
    /// range (`load(_:range:)`, one request each in a bucket); a local backend opens the file once.
    /// - Returns: false when there is no such file (`body` not called).
    /// - Throws: the backend's error (a range past the end: `SystemError` EIO, on disk and in a
    ///   bucket); what `body` throws.
    func loadRanges(_ name: String, _ ranges: [Range<Int>], _ body: (Int, Data) throws -> Void) throws -> Bool
    /// Writes bytes `range` of file `name` at the current offset of the open file `fd` (`path`
    /// names it in errors). The default loads the range and writes it; a local backend uses
    /// `copy_file_range(2)` (the kernel copies, or shares extents where the filesystem can).
    /// - Returns: false when there is no such file (nothing written).
    /// - Throws: the backend's error; `SystemError` when `fd` cannot be written.
    func copy(_ name: String, range: Range<Int>, to fd: Int32, path: String) throws -> Bool
}

extension Backend {
    /// The whole file `name`, or nil when absent.
    public func load(_ name: String) throws -> Data? { try load(name, range: nil) }
    /// Temp files that saves cut short left under `prefix` (a kill between writing a file and
    /// renaming it into place): `name` is the temp file's path relative to the backend. None by
    /// default: a bucket's PUT leaves nothing half made.
    public func leftovers(prefix: String) throws -> [BackendFile] { [] }
    /// Whether the walks of the store's folders enter folder `name`: not a dot-folder (ours are
    /// files; one is foreign) and not one named like a pack or index file (attack round 16).
    static func isWalkable(_ name: String) -> Bool { !name.hasPrefix(".") && !name.hasSuffix(".pack") && !name.hasSuffix(".idx") }

    public func foreignEntries(prefix: String) throws -> [String] { [] }

    public func loadRanges(_ name: String, _ ranges: [Range<Int>], _ body: (Int, Data) throws -> Void) throws -> Bool {
        for (i, r) in ranges.enumerated() {
            guard let d = try load(name, range: r) else { return false }
            try body(i, d)
        }
        return true
    }

    public func copy(_ name: String, range: Range<Int>, to fd: Int32, path: String) throws -> Bool {
        guard let d = try load(name, range: range) else { return false }
        try Files.writeAll(fd, d, path: path)
        return true
    }
}

/// Whether the process that left a file is gone: the one test behind every "a temp file of a
/// process that no longer exists" rule (save temps, repack packs, export work folders).
public enum LeftBehind {
    /// True when process `pid` does not exist (kill(2) with signal 0 answers ESRCH) and is not
    /// this one. Files checked so are local to this host, so the pid is of this host; a pid used
    /// again by another process only keeps its file until a grace period.
    public static func ownerIsGone(_ pid: pid_t) -> Bool {
        guard pid > 0, pid != getpid() else { return false }
        return kill(pid, 0) != 0 && errno == ESRCH
    }

    /// Whether a file whose name carries `pid` is being written now, for `verify`'s report of
    /// files left over (never for removing anything: that is `ownerIsGone`'s, which keeps any
    /// live process's file): `pid` holds one of the daemon's locks (`lockHolders`, the pids
    /// `SpoolLock.holder` read from `daemon.lock` files that are held: a lock is seen across PID
    /// namespaces, so a daemon in a container counts), or is a process of this PID namespace
    /// that runs TileSpool (`/proc/<pid>/comm` starts with `tilespool`). So a live process that
    /// is not TileSpool (a pid used again after a reboot, pid 1 in a planted name) does not hide
    /// a file a killed daemon left (attack round 37).
    public static func inFlight(_ pid: pid_t, lockHolders: Set<pid_t>) -> Bool {
        guard pid > 0 else { return false }
        if lockHolders.contains(pid) || pid == getpid() { return true }
        guard let comm = try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8) else { return false }
        return comm.hasPrefix("tilespool")
    }
}

/// The temp names a local save uses (`Directory.tempName`: `.tmp-<name>-<pid>-<n>`).
public enum SaveTempName {
    /// The name being saved and the process saving it, from temp file `name` (its last path
    /// segment), or nil when it is not one.
    /// Strict, as `Directory.tempName` writes them (attack round 41: `+999999`, `0999999`, a
    /// date in place of the pid, or a name holding a line feed passed as temp names, so gc
    /// removed user files named so): the pid and the counter are decimal digits without a sign
    /// or a leading zero, the pid at most 10 digits, and the name is not empty and holds no
    /// control character.
    public static func parse(_ name: String) -> (target: String, pid: pid_t)? {
        let last = name.split(separator: "/").last.map(String.init) ?? name
        guard last.hasPrefix(".tmp-") else { return nil }
        let parts = last.dropFirst(5).split(separator: "-", omittingEmptySubsequences: false)
        func decimal(_ s: Substring, digits: Int) -> Bool {
            !s.isEmpty && s.count <= digits && s.utf8.allSatisfy { $0 >= 0x30 && $0 <= 0x39 } && (s == "0" || s.first != "0")
        }
        guard parts.count >= 3, decimal(parts[parts.count - 2], digits: 10), decimal(parts[parts.count - 1], digits: 19),
              let pid = pid_t(parts[parts.count - 2]), pid > 0, Int(parts[parts.count - 1]) != nil else { return nil }
        let target = parts.dropLast(2).joined(separator: "-")
        guard !target.isEmpty, !target.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else { return nil }
        return (target, pid)
    }

    /// True when temp file `name` belongs to a process that is gone (`LeftBehind.ownerIsGone`).
    public static func isOrphaned(_ name: String) -> Bool {
        guard let pid = parse(name)?.pid else { return false }
        return LeftBehind.ownerIsGone(pid)
    }
}

/// The names a backend takes (see `Backend`).
public enum BackendName {
    /// True when `name` is a relative path of letters, digits, `.`, `_`, `-`, with `/` between
    /// non-empty segments that are not `.` or `..`, at most 1024 bytes.
    public static func isValid(_ name: String) -> Bool {
        guard !name.isEmpty, name.utf8.count <= 1024, !name.hasPrefix("/") else { return false }
        for seg in name.split(separator: "/", omittingEmptySubsequences: false) {
            guard !seg.isEmpty, seg != ".", seg != "..", seg.utf8.allSatisfy({
                ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2E || $0 == 0x5F || $0 == 0x2D
                    || ($0 >= 0x41 && $0 <= 0x5A)
            }) else { return false }
        }
        return true
    }
}

/// A backend on a local folder: `name` is the file `<root>/<name>`. Saving follows restic's local
/// backend: a temp file made in the same folder (O_EXCL), written, fsynced, closed, renamed into
/// place (RENAME_NOREPLACE for `ifAbsent`), then the folder fsynced. Folders are opened by
/// descriptor one segment at a time, never through a symlink (`Directory`).
public final class LocalBackend: Backend, @unchecked Sendable {
    public let root: String
    public var location: String { root }
    public var isShared: Bool { false }

    /// The backend at `root`, which is created when missing.
    /// - Throws: `SystemError` when it cannot be made or opened.
    public init(root: String) throws(SystemError) {
        self.root = root
        try Files.makeDirectories(root)
        _ = try Directory(path: root)
    }

    /// The folder holding `name` and the file's own name; with `create`, missing folders are made.
    private func folder(of name: String, create: Bool) throws(SystemError) -> (Directory, String) {
        guard BackendName.isValid(name) else { throw SystemError("open", root + "/" + name, errno: EINVAL) }
        var segments = name.split(separator: "/").map(String.init)
        let file = segments.removeLast()
        var dir = try Directory(path: root)
        for s in segments { dir = try dir.subdirectory(s, create: create) }
        return (dir, file)
    }

    /// Folders already opened for reading (`packs/ab`, ...), by their path under the root: a read
    /// of an object (an export reads one per tile) then costs an `openat`, `fstat`, `pread` and
    /// `close` instead of a walk from the root, one `openat` per segment, each time. Only folder
    /// descriptors are kept (a file's space is never held by them); at most `maxOpenFolders`.
    private var openFolders: [String: Directory] = [:]
    private let foldersLock = NSLock()
    static let maxOpenFolders = 128

    /// `folder(of:create: false)` through `openFolders`. `cached` says whether the folder came
    /// from there (a folder replaced since is then looked up afresh by the caller).
    private func readFolder(of name: String) throws(SystemError) -> (dir: Directory, file: String, cached: Bool) {
        guard let slash = name.lastIndex(of: "/") else { let (d, f) = try folder(of: name, create: false); return (d, f, false) }
        let path = String(name[..<slash]), file = String(name[name.index(after: slash)...])
        foldersLock.lock()
        let hit = openFolders[path]
        foldersLock.unlock()
        if let hit, BackendName.isValid(name) { return (hit, file, true) }
        let (dir, f) = try folder(of: name, create: false)
        foldersLock.lock()
        if openFolders.count >= LocalBackend.maxOpenFolders { openFolders.removeAll() }
        openFolders[path] = dir
        foldersLock.unlock()
        return (dir, f, false)
    }

    /// Forgets the opened folder of `name` (it was not found there: the folder may have been
    /// replaced).
    private func forgetFolder(of name: String) {
        guard let slash = name.lastIndex(of: "/") else { return }
        foldersLock.lock()
        openFolders.removeValue(forKey: String(name[..<slash]))
        foldersLock.unlock()
    }

    @discardableResult
    public func save(_ name: String, _ data: Data, ifAbsent: Bool) throws -> Bool {
        let (dir, file) = try folder(of: name, create: true)
        let tmp = Directory.tempName(for: file)
        let fd = try dir.createFile(tmp, mode: 0o666)
        do throws(SystemError) {
            try Files.writeAll(fd, data, path: dir.display(tmp))
            try Files.fsync(fd, path: dir.display(tmp))
        } catch {
            Glibc.close(fd); dir.remove(tmp); throw error
        }
        Glibc.close(fd)
        return try place(dir, tmp, file, ifAbsent: ifAbsent)
    }

    @discardableResult
    public func save(_ name: String, fromFile path: String, ifAbsent: Bool) throws -> Bool {
        let (dir, file) = try folder(of: name, create: true)
        let fd = try Files.open(path, O_RDONLY | O_NOFOLLOW)
        defer { Glibc.close(fd) }
        try Files.fsync(fd, path: path)
        let (srcFolder, srcName) = Files.split(path)
        let src = try Directory(path: srcFolder)
        // The file moves into place: it is on the backend's filesystem (the store's tmp/).
        let tmp = Directory.tempName(for: file)
        try src.rename(srcName, to: dir, tmp, mode: .noReplace)
        return try place(dir, tmp, file, ifAbsent: ifAbsent)
    }

    /// Renames the written temp file into place and makes the folder entry durable.
    private func place(_ dir: Directory, _ tmp: String, _ file: String, ifAbsent: Bool) throws -> Bool {
        do {
            try dir.rename(tmp, to: dir, file, mode: ifAbsent ? .noReplace : .replace)
        } catch {
            dir.remove(tmp)
            if ifAbsent && error.errno == EEXIST { return false }
            throw error
        }
        try dir.sync()
        return true
    }

    /// Opens file `name` for reading (by descriptor, no symlink followed: `Directory.openForReading`)
    /// and gives its descriptor, size and display path; nil when there is no such file. The caller
    /// closes the descriptor.
    private func openForReading(_ name: String) throws(SystemError) -> (fd: Int32, size: Int, display: String)? {
        var (dir, file, cached): (Directory, String, Bool)
        do { (dir, file, cached) = try readFolder(of: name) } catch {
            if error.errno == ENOENT { return nil }
            throw error
        }
        var fd: Int32 = -1
        while fd < 0 {
            do { fd = try dir.openForReading(file) } catch {
                guard error.errno == ENOENT else { throw error }
                // Not in a folder opened earlier: look again from the root (the folder may be new).
                guard cached else { return nil }
                forgetFolder(of: name)
                do { (dir, file, cached) = try readFolder(of: name) } catch {
                    if error.errno == ENOENT { return nil }
                    throw error
                }
            }
        }
        var st = Glibc.stat()
        guard fstat(fd, &st) == 0 else { let e = SystemError("fstat", dir.display(file)); Glibc.close(fd); throw e }
        return (fd, Int(st.st_size), dir.display(file))
    }

    /// Reads bytes `r` of the open file `fd` of `size` bytes.
    private static func pread(_ fd: Int32, size: Int, _ r: Range<Int>, display: String) throws(SystemError) -> Data {
        // A range past the file's end: the file is shorter than its index says (cut short).
        guard r.lowerBound >= 0, r.upperBound <= size else { throw SystemError("read \(r.count) bytes at \(r.lowerBound) of \(size)", display, errno: EIO) }
        var data = Data(count: r.count)
        var done = 0
        while done < r.count {
            let n = data.withUnsafeMutableBytes { buf in Files.retrying { Glibc.pread(fd, buf.baseAddress! + done, r.count - done, off_t(r.lowerBound + done)) } }
            if n < 0 { throw SystemError("read", display) }
            if n == 0 { throw SystemError("read", display, errno: EIO) } // cut meanwhile
            done += n
        }
        return data
    }

    public func load(_ name: String, range: Range<Int>?) throws -> Data? {
        guard let (fd, size, display) = try openForReading(name) else { return nil }
        defer { Glibc.close(fd) }
        return try LocalBackend.pread(fd, size: size, range ?? 0..<size, display: display)
    }

    /// The file is opened once and each range read with `pread` (`Backend.loadRanges`).
    public func loadRanges(_ name: String, _ ranges: [Range<Int>], _ body: (Int, Data) throws -> Void) throws -> Bool {
        guard let (fd, size, display) = try openForReading(name) else { return false }
        defer { Glibc.close(fd) }
        for (i, r) in ranges.enumerated() { try body(i, try LocalBackend.pread(fd, size: size, r, display: display)) }
        return true
    }

    /// `copy_file_range(2)` from the file at the range's offset to `fd`'s current offset: the
    /// kernel copies, or shares extents (a reflink on Btrfs, XFS, bcachefs; a server-side copy on
    /// NFS 4.2). Where it cannot (EXDEV, ENOSYS, EINVAL, EOPNOTSUPP: another filesystem on an old
    /// kernel, a filesystem without it) the rest is read and written (`Backend.copy`).
    public func copy(_ name: String, range: Range<Int>, to fd: Int32, path: String) throws -> Bool {
        guard let (src, size, display) = try openForReading(name) else { return false }
        defer { Glibc.close(src) }
        guard range.lowerBound >= 0, range.upperBound <= size else { throw SystemError("read", display, errno: EINVAL) }
        var at = Int64(range.lowerBound)
        let end = Int64(range.upperBound)
        while at < end {
            let n = CLinux.tilespool_copy_file_range_from(src, &at, fd, Int(end - at))
            if n > 0 { continue }
            if n == 0 { throw SystemError("read", display, errno: EIO) } // cut meanwhile
            let e = errno
            if e == EINTR { continue }
            if e == EXDEV || e == ENOSYS || e == EINVAL || e == EOPNOTSUPP { break } // plain copy below
            throw SystemError("copy_file_range", path, errno: e)
        }
        if at < end {
            let rest = try LocalBackend.pread(src, size: size, Int(at)..<Int(end), display: display)
            try Files.writeAll(fd, rest, path: path)
        }
        return true
    }

    public func stat(_ name: String) throws -> BackendFile? {
        guard let (dir, file) = try? folder(of: name, create: false), let st = dir.status(file),
              (st.st_mode & S_IFMT) == S_IFREG else { return nil }
        return BackendFile(name: name, size: Int(st.st_size), modified: Double(st.st_mtim.tv_sec) + Double(st.st_mtim.tv_nsec) / 1e9)
    }

    public func list(prefix: String) throws -> [BackendFile] {
        // The deepest folder the prefix names completely, then a walk below it (by descriptor).
        var segments = prefix.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        let partial = segments.removeLast() // "" when the prefix ends in "/"
        var dir = try Directory(path: root)
        var base = ""
        for s in segments {
            guard Directory.isEntryName(s) else { return [] }
            guard let sub = try? dir.subdirectory(s) else { return [] }
            dir = sub
            base += s + "/"
        }
        var out: [BackendFile] = []
        func walk(_ d: Directory, _ rel: String, depth: Int) {
            guard depth < 8 else { return }
            for name in d.list() where !name.hasPrefix(".") {
                guard let st = d.status(name) else { continue }
                switch st.st_mode & S_IFMT {
                case S_IFREG:
                    out.append(BackendFile(name: rel + name, size: Int(st.st_size),
                                           modified: Double(st.st_mtim.tv_sec) + Double(st.st_mtim.tv_nsec) / 1e9))
                case S_IFDIR where LocalBackend.isWalkable(name):
                    if let sub = try? d.subdirectory(name) { walk(sub, rel + name + "/", depth: depth + 1) }
                default:
                    break // a symlink or anything else: not a file of the backend
                }
            }
        }
        for name in dir.list() where !name.hasPrefix(".") && name.hasPrefix(partial) {
            guard let st = dir.status(name) else { continue }
            if (st.st_mode & S_IFMT) == S_IFREG {
                out.append(BackendFile(name: base + name, size: Int(st.st_size),
                                       modified: Double(st.st_mtim.tv_sec) + Double(st.st_mtim.tv_nsec) / 1e9))
            } else if (st.st_mode & S_IFMT) == S_IFDIR, let sub = try? dir.subdirectory(name) {
                walk(sub, base + name + "/", depth: 1)
            }
        }
        return out
    }

    public func leftovers(prefix: String) throws -> [BackendFile] {
        guard Directory.isEntryName(String(prefix.split(separator: "/").first ?? "")) else { return [] }
        var out: [BackendFile] = []
        guard let top = try? Directory(path: root).subdirectory(String(prefix.split(separator: "/").first!)) else { return [] }
        func walk(_ d: Directory, _ rel: String, depth: Int) {
            guard depth < 8 else { return }
            for name in d.list() {
                guard let st = d.status(name) else { continue }
                switch st.st_mode & S_IFMT {
                case S_IFREG where name.hasPrefix(".tmp-"):
                    out.append(BackendFile(name: rel + name, size: Int(st.st_size),
                                           modified: Double(st.st_mtim.tv_sec) + Double(st.st_mtim.tv_nsec) / 1e9))
                case S_IFDIR where LocalBackend.isWalkable(name):
                    if let sub = try? d.subdirectory(name) { walk(sub, rel + name + "/", depth: depth + 1) }
                default:
                    break
                }
            }
        }
        walk(top, String(prefix.split(separator: "/").first!) + "/", depth: 1)
        return out
    }

    /// Whether the walks of the store's folders enter folder `name`: not a dot-folder (ours are
    /// files; one is foreign) and not one named like a pack or index file (attack round 16).
    static func isWalkable(_ name: String) -> Bool { !name.hasPrefix(".") && !name.hasSuffix(".pack") && !name.hasSuffix(".idx") }

    public func foreignEntries(prefix: String) throws -> [String] {
        let topName = String(prefix.split(separator: "/").first ?? "")
        guard Directory.isEntryName(topName), let top = try? Directory(path: root).subdirectory(topName) else { return [] }
        var out: [String] = []
        func walk(_ d: Directory, _ rel: String, depth: Int) {
            guard depth < 8 else { return }
            for name in d.list() {
                guard let st = d.status(name) else { continue }
                switch st.st_mode & S_IFMT {
                case S_IFREG: break
                // A folder under a file's name (attack round 16: `packs/<sha256>.pack` made a
                // folder, listed by an index, passed verify): reported, and not walked.
                case S_IFDIR where !name.hasPrefix(".") && !LocalBackend.isWalkable(name): out.append(rel + name + " (folder)")
                case S_IFDIR where LocalBackend.isWalkable(name):
                    if let sub = try? d.subdirectory(name) { walk(sub, rel + name + "/", depth: depth + 1) }
                case S_IFDIR: out.append(rel + name + " (folder)")
                case S_IFLNK: out.append(rel + name + " (symlink)")
                case S_IFIFO: out.append(rel + name + " (FIFO)")
                case S_IFSOCK: out.append(rel + name + " (socket)")
                default: out.append(rel + name + " (device)")
                }
            }
        }
        walk(top, topName + "/", depth: 1)
        return out.sorted()
    }

    public func remove(_ name: String) throws {
        guard let (dir, file) = try? folder(of: name, create: false) else { return }
        if unlinkat(dir.fd, file, 0) != 0 && errno != ENOENT { throw SystemError("unlink", dir.display(file)) }
    }

    public func unreachableProbeURL(for error: Error) -> String? { nil }
}

/// A backend in an S3 bucket under a prefix: `name` is the key `<prefix>/<name>`. Saves are PUTs
/// (`If-None-Match: *` for `ifAbsent`, whose 412 means taken), loads GETs (with `Range`), stats
/// one-key listings, lists ListObjectsV2, removes DELETEs. A PUT is durable once answered.
/// Requests that a retry can cure (no answer, 5xx, 429) are tried again a few times.
public final class S3Backend: Backend, @unchecked Sendable {
    public let config: S3Config
    let clients: S3ClientPool
    public var location: String { "s3://\(config.bucket)" + (config.prefix.isEmpty ? "" : "/" + config.prefix) }
    public var isShared: Bool { true }
    /// Attempts per request when a retry can help.
    public var attempts = 4

    public init(config: S3Config) {
        self.config = config
        clients = S3ClientPool(config: config)
    }

    /// `body` with a client, tried again after 0.2 s, 0.5 s, 1 s... while the error is one a retry
    /// can cure (`isRetryable`).
    func retrying<T>(_ body: (S3Client) throws -> T) throws -> T {
        var attempt = 0
        while true {
            do { return try clients.with(body) } catch let e as S3Error {
                attempt += 1
                guard attempt < attempts, S3Backend.isRetryable(e) else { throw e }
                S3Backend.backOff(attempt)
            }
        }
    }

    /// Sleeps before attempt `attempt + 1`: 0.2 s, 0.5 s, 1.25 s, ... at most 2 s.
    static func backOff(_ attempt: Int) {
        usleep(useconds_t(min(2.0, 0.2 * pow(2.5, Double(attempt - 1))) * 1_000_000))
    }

    /// True for a failure a retry can cure: no answer, 5xx, 429, or a body the server found
    /// damaged (`XAmzContentSHA256Mismatch`, `BadDigest`).
    static func isRetryable(_ e: S3Error) -> Bool {
        e.status == 0 || e.status >= 500 || e.status == 429 || e.code == "XAmzContentSHA256Mismatch" || e.code == "BadDigest"
            || e.code == "RequestTimeout"
    }

    @discardableResult
    public func save(_ name: String, _ data: Data, ifAbsent: Bool) throws -> Bool {
        guard BackendName.isValid(name) else { throw S3Error(status: 400, message: "invalid name \(name)") }
        var outcome = try retrying { c in try c.put(name, data, ifNoneMatch: ifAbsent) }
        // A retried PUT whose first try was written but not answered finds its own bytes.
        if outcome == .alreadyExists, ifAbsent, (try? retrying { c in try c.get(name) }) == data { outcome = .created }
        return outcome == .created
    }

    @discardableResult
    public func save(_ name: String, fromFile path: String, ifAbsent: Bool) throws -> Bool {
        guard BackendName.isValid(name) else { throw S3Error(status: 400, message: "invalid name \(name)") }
        // Streamed from the file (a pack is tens of MiB): hashed once for x-amz-content-sha256,
        // then read again as libcurl sends it. Neither pass holds more than 1 MiB.
        let fd = try Files.openRegular(path, O_RDONLY | O_CLOEXEC)
        defer { Glibc.close(fd) }
        var st = Glibc.stat()
        guard fstat(fd, &st) == 0 else { throw SystemError("fstat", path) }
        let size = Int(st.st_size)
        guard let sha256 = SHA256.hex(fd: fd, path: path) else { throw SystemError("read", path) }
        var outcome = try retrying { c in try c.put(name, fd: fd, size: size, sha256: sha256, ifNoneMatch: ifAbsent) }
        // A retried PUT whose first try was written but not answered finds its own bytes.
        if outcome == .alreadyExists, ifAbsent, (try? storedSHA256(name, size: size)) == sha256 { outcome = .created }
        Files.remove(path)
        return outcome == .created
    }

    /// The SHA-256 (hex) of the object `name`, read in ranges of 8 MiB, or nil when its size is not
    /// `size` or it is gone.
    private func storedSHA256(_ name: String, size: Int) throws -> String? {
        let hash = SHA256.Stream()
        var at = 0
        while at < size {
            let end = min(size, at + (8 << 20))
            guard let part = try load(name, range: at..<end), part.count == end - at else { return nil }
            part.withUnsafeBytes { hash.update($0) }
            at = end
        }
        guard let stat = try stat(name), stat.size == size else { return nil }
        return hash.finish().withUnsafeBufferPointer { SHA256.hexString($0) }
    }

    /// A range the object does not hold whole (a 416, or a 206 shorter than asked) means the
    /// file is shorter than its index says: `SystemError` EIO, as a local read past the end.
    public func load(_ name: String, range: Range<Int>?) throws -> Data? {
        guard let range else { return try retrying { c in try c.get(name) } }
        do {
            return try retrying { c in try c.get(name, range: range) }
        } catch let e as S3Error where e.status == 416 || e.status == 206 {
            throw SystemError("read \(range.count) bytes at \(range.lowerBound) (\(e))", location + "/" + name, errno: EIO)
        }
    }

    /// Ranges no more than `coalesceGap` bytes apart, in ascending order, are fetched together
    /// by one ranged GET of at most `coalesceBytes` (an export reading a pack's objects in offset
    /// order then costs a request per few MiB, not one per object); the bytes between are
    /// dropped. Ranges out of order or far apart are fetched one by one.
    public func loadRanges(_ name: String, _ ranges: [Range<Int>], _ body: (Int, Data) throws -> Void) throws -> Bool {
        var i = 0
        while i < ranges.count {
            var j = i + 1
            while j < ranges.count, ranges[j].lowerBound >= ranges[j - 1].upperBound,
                  ranges[j].lowerBound - ranges[j - 1].upperBound <= S3Backend.coalesceGap,
                  ranges[j].upperBound - ranges[i].lowerBound <= S3Backend.coalesceBytes { j += 1 }
            let span = ranges[i].lowerBound..<ranges[j - 1].upperBound
            guard let d = try load(name, range: span) else { return false }
            guard d.count == span.count else { throw SystemError("read \(span.count) bytes at \(span.lowerBound), received \(d.count)", location + "/" + name, errno: EIO) }
            for k in i..<j {
                let r = ranges[k]
                try body(k, d.subdata(in: (d.startIndex + r.lowerBound - span.lowerBound)..<(d.startIndex + r.upperBound - span.lowerBound)))
            }
            i = j
        }
        return true
    }
    static let coalesceGap = 64 << 10
    static let coalesceBytes = 8 << 20

    public func stat(_ name: String) throws -> BackendFile? {
        try retrying { c in try c.list(prefix: name) }.first { $0.key == name }.map { BackendFile(name: $0.key, size: $0.size, modified: $0.lastModified) }
    }

    public func list(prefix: String) throws -> [BackendFile] {
        try retrying { c in try c.list(prefix: prefix) }.map { BackendFile(name: $0.key, size: $0.size, modified: $0.lastModified) }
    }

    public func remove(_ name: String) throws {
        try retrying { c in try c.delete(name) }
    }

    public func unreachableProbeURL(for error: Error) -> String? {
        guard let e = error as? S3Error, e.status == 0 || e.status >= 500 else { return nil }
        return config.endpoint
    }
}
