import CLinux
import Foundation
import Glibc

/// A failed system call: which operation, on which path, and the errno.
public struct SystemError: Error, Sendable, CustomStringConvertible {
    public var operation: String
    public var path: String
    public var errno: Int32
    public init(_ operation: String, _ path: String, errno: Int32 = CLinux.tilespool_errno()) {
        self.operation = operation; self.path = path; self.errno = errno
    }
    /// The errno's symbolic name and text, e.g. `ENOSPC (No space left on device)`.
    public var errnoDescription: String {
        let names: [Int32: String] = [ENOSPC: "ENOSPC", EDQUOT: "EDQUOT", EROFS: "EROFS", EIO: "EIO", ENOENT: "ENOENT",
                                      EACCES: "EACCES", EEXIST: "EEXIST", ELOOP: "ELOOP", EISDIR: "EISDIR", EMFILE: "EMFILE",
                                      ENOTDIR: "ENOTDIR", EPERM: "EPERM", EFBIG: "EFBIG", ENXIO: "ENXIO", EAGAIN: "EAGAIN"]
        return "\(names[errno] ?? "errno \(errno)") (\(String(cString: strerror(errno))))"
    }
    public var description: String { "\(operation) \(path): \(errnoDescription)" }
    /// True for the errors that mean the disk cannot take more data (ENOSPC, EDQUOT, EROFS, EIO, EFBIG):
    /// the region goes to `failedStorage` instead of retrying.
    public var isStorageFailure: Bool { [ENOSPC, EDQUOT, EROFS, EIO, EFBIG].contains(errno) }
}

/// Thin wrappers over the POSIX file calls the daemon uses, throwing `SystemError` (in the manner of
/// apple/swift-system). EINTR is retried here, in one place, for every call.
public enum Files {
    /// Calls `body` until it does not fail with EINTR.
    @inline(__always)
    static func retrying<T: BinaryInteger>(_ body: () -> T) -> T {
        while true {
            let r = body()
            if r == -1 && CLinux.tilespool_errno() == EINTR { continue }
            return r
        }
    }

    /// Opens `path` and returns the fd. The corresponding C function is `open`.
    public static func open(_ path: String, _ flags: Int32, mode: Int32 = 0o666) throws(SystemError) -> Int32 {
        let fd = retrying { CLinux.tilespool_open(path, flags | O_CLOEXEC, mode) }
        if fd < 0 { throw SystemError("open", path) }
        return fd
    }

    /// Opens the regular file at `path` (`open` with `flags`, plus O_NOFOLLOW and O_NONBLOCK):
    /// a symlink (ELOOP), a FIFO or anything else but a regular file (EINVAL) is refused, and
    /// never waited on: a FIFO planted where a manifest or journal is expected opened without
    /// O_NONBLOCK blocked gc, verify and the daemon for ever. O_NONBLOCK does nothing to a
    /// regular file's reads and writes.
    /// - Throws: `SystemError` "open" (the errno), or "open" with EINVAL for a file that is not
    ///   regular.
    public static func openRegular(_ path: String, _ flags: Int32, mode: Int32 = 0o666) throws(SystemError) -> Int32 {
        let fd = try open(path, flags | O_NOFOLLOW | O_NONBLOCK, mode: mode)
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else {
            let e = SystemError("open", path, errno: EINVAL)
            Glibc.close(fd)
            throw e
        }
        return fd
    }

    /// Writes all of `bytes` to `fd`. The corresponding C function is `write`.
    public static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: String) throws(SystemError) {
        var off = 0
        while off < bytes.count {
            let n = retrying { Glibc.write(fd, bytes.baseAddress! + off, bytes.count - off) }
            if n < 0 { throw SystemError("write", path) }
            off += n
        }
    }

    /// Appends all of `bytes` to `fd` (opened with O_APPEND, one writer) or none of it: when a
    /// write fails part way (ENOSPC, EDQUOT, EIO), the file is cut back to its size before, so a
    /// line-per-record file (manifest, journal, events.jsonl) never keeps half a line that the
    /// next append would glue onto. The corresponding C functions are `lseek`, `write`, `ftruncate`.
    /// - Throws: `SystemError` from the write (the cut-back is best effort).
    public static func appendWhole(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: String) throws(SystemError) {
        let before = lseek(fd, 0, SEEK_END)
        do { try writeAll(fd, bytes, path: path) } catch {
            if before >= 0 { _ = retrying { Glibc.ftruncate(fd, before) } }
            throw error
        }
    }

    /// `appendWhole` for `Data`.
    public static func appendWhole(_ fd: Int32, _ data: Data, path: String) throws(SystemError) {
        let r: Result<Void, SystemError> = data.withUnsafeBytes { raw in
            do throws(SystemError) { try appendWhole(fd, raw, path: path); return .success(()) } catch { return .failure(error) }
        }
        try r.get()
    }

    /// Writes all of `data` to `fd`.
    public static func writeAll(_ fd: Int32, _ data: Data, path: String) throws(SystemError) {
        let r: Result<Void, SystemError> = data.withUnsafeBytes { raw in
            do throws(SystemError) { try writeAll(fd, raw, path: path); return .success(()) } catch { return .failure(error) }
        }
        try r.get()
    }

    /// Flushes `fd`'s data to the disk. The corresponding C function is `fsync`.
    public static func fsync(_ fd: Int32, path: String) throws(SystemError) {
        if retrying({ Glibc.fsync(fd) }) != 0 { throw SystemError("fsync", path) }
    }

    /// Renames `from` to `to` (atomic within one filesystem). The corresponding C function is `rename`.
    public static func rename(_ from: String, _ to: String) throws(SystemError) {
        if Glibc.rename(from, to) != 0 { throw SystemError("rename", to) }
    }

    /// Creates `path` and its missing parents with mode 0777 & ~umask; succeeds when it exists.
    public static func makeDirectories(_ path: String) throws(SystemError) {
        var st = stat()
        if lstat(path, &st) == 0 {
            if (st.st_mode & S_IFMT) == S_IFDIR { return }
            throw SystemError("mkdir", path, errno: ENOTDIR)
        }
        // `split`, not NSString's `deletingLastPathComponent`, which crashed the daemon on a
        // relative path of one component that does not exist (`--store U`: attack round 61).
        let parent = split(path).parent
        if parent != path { try makeDirectories(parent) }
        if mkdir(path, 0o777) != 0 && CLinux.tilespool_errno() != EEXIST { throw SystemError("mkdir", path) }
    }

    /// Writes `data` to `path` atomically: a new temp file in the same folder (made with O_EXCL,
    /// so never a planted link's target), written, optionally fsynced, then renamed over `path`.
    /// Readers see the old file or the new one, never a mix (`Directory.writeAtomically`: a
    /// symlink at `path` is replaced, never followed). With `replace` false nothing is written
    /// when `path` exists (`RENAME_NOREPLACE`).
    /// - Returns: false when `replace` is false and `path` existed.
    @discardableResult
    public static func writeAtomically(_ data: Data, to path: String, sync: Bool = false, replace: Bool = true) throws(SystemError) -> Bool {
        let (parent, name) = split(path)
        return try Directory(path: parent).writeAtomically(data, to: name, sync: sync, replace: replace)
    }

    /// `path` as (parent folder, last component), trailing slashes ignored: `a/b/c` -> (`a/b`, `c`),
    /// `c` -> (`.`, `c`), `/c` -> (`/`, `c`).
    public static func split(_ path: String) -> (parent: String, name: String) {
        var p = Substring(path)
        while p.count > 1 && p.hasSuffix("/") { p = p.dropLast() }
        guard let slash = p.lastIndex(of: "/") else { return (".", String(p)) }
        let parent = p[..<slash]
        return (parent.isEmpty ? "/" : String(parent), String(p[p.index(after: slash)...]))
    }

    /// Appends `data` to `path` (creating it) with O_APPEND, whole or not at all (`appendWhole`).
    /// With `onNewLine`, a file whose last byte is not a newline (a line cut short, or written by
    /// hand without its end) gets one first, so `data` starts a line of its own.
    public static func append(_ data: Data, to path: String, sync: Bool = false, onNewLine: Bool = false) throws(SystemError) {
        let fd = try openRegular(path, O_RDWR | O_CREAT | O_APPEND, mode: 0o666)
        defer { Glibc.close(fd) }
        var data = data
        if onNewLine {
            var st = stat()
            var last: UInt8 = 0x0A
            if fstat(fd, &st) == 0, st.st_size > 0, pread(fd, &last, 1, st.st_size - 1) == 1, last != 0x0A { data.insert(0x0A, at: 0) }
        }
        try appendWhole(fd, data, path: path)
        if sync { try fsync(fd, path: path) }
    }

    /// What a directory entry is, without following symlinks.
    public enum EntryType: Sendable { case regular, directory, symlink, other, missing }

    /// The type of `path` (lstat).
    public static func entryType(_ path: String) -> EntryType {
        var st = stat()
        guard lstat(path, &st) == 0 else { return .missing }
        switch st.st_mode & S_IFMT {
        case S_IFREG: return .regular
        case S_IFDIR: return .directory
        case S_IFLNK: return .symlink
        default: return .other
        }
    }

    /// Whether a writer still holds the regular file `path` open: true, false, or nil when the
    /// system cannot tell (see `tilespool_is_open_for_writing` in the CLinux shim).
    public static func isOpenForWriting(_ path: String) -> Bool? {
        switch CLinux.tilespool_is_open_for_writing(path) {
        case 1: return true
        case 0: return false
        default: return nil
        }
    }

    /// Size in bytes of the file at `path`, or nil.
    public static func size(_ path: String) -> Int? {
        var st = stat()
        guard lstat(path, &st) == 0 else { return nil }
        return Int(st.st_size)
    }

    /// Reads a regular file of at most `limit` bytes without following a symlink and without
    /// blocking on a FIFO. Throws `SystemError` (ELOOP for a symlink, EFBIG when larger than `limit`,
    /// EINVAL... for a FIFO or device).
    public static func readRegularFile(_ path: String, limit: Int) throws(SystemError) -> Data {
        let fd = try openRegular(path, O_RDONLY)
        defer { Glibc.close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw SystemError("fstat", path) }
        guard Int(st.st_size) <= limit else { throw SystemError("read", path, errno: EFBIG) }
        var data = Data(count: Int(st.st_size) + 1)
        var total = 0
        while true {
            if total == data.count {
                if data.count > limit { throw SystemError("read", path, errno: EFBIG) }
                data.count = min(data.count * 2, limit + 1)
            }
            let n = data.withUnsafeMutableBytes { buf in retrying { Glibc.read(fd, buf.baseAddress! + total, buf.count - total) } }
            if n < 0 { throw SystemError("read", path) }
            if n == 0 { break }
            total += n
            if total > limit { throw SystemError("read", path, errno: EFBIG) }
        }
        data.count = total
        return data
    }

    /// The names in a directory (no `.` and `..`), unsorted; empty when it cannot be read or is
    /// a symlink (never followed).
    public static func list(_ path: String) -> [String] {
        (try? Directory(path: path, followFinal: false))?.list() ?? []
    }

    /// Removes a file; true when it existed.
    @discardableResult
    public static func remove(_ path: String) -> Bool { unlink(path) == 0 }

    /// Removes `path` and, for a folder, everything in it, walking by descriptor without
    /// following any symlink (`Directory.removeTree`); a symlink at `path` itself is removed as a
    /// link. The leading components of `path` are resolved as given.
    public static func removeTree(_ path: String) {
        let (parent, name) = split(path)
        guard Directory.isEntryName(name), let dir = try? Directory(path: parent) else { return }
        dir.removeTree(name)
    }

    /// Makes the entries of directory `path` (renames, new and removed names) durable. The
    /// corresponding C function is `fsync` on the directory.
    public static func syncDirectory(_ path: String) throws(SystemError) {
        let fd = try open(path, O_RDONLY | O_DIRECTORY)
        defer { Glibc.close(fd) }
        try fsync(fd, path: path)
    }

    /// Flushes every file of the filesystem holding `path` to disk. The corresponding C function is `syncfs`.
    public static func syncFilesystem(_ path: String) throws(SystemError) {
        let fd = try open(path, O_RDONLY | O_DIRECTORY)
        defer { Glibc.close(fd) }
        if CLinux.tilespool_syncfs(fd) != 0 { throw SystemError("syncfs", path) }
    }
}
