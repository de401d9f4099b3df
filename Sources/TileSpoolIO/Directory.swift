// Every path TileSpool writes or deletes outside the store's own files (exports, site folders,
// rejected/, prune, the store's region folders) goes through `Directory`: a folder held open by
// descriptor, whose operations name one entry at a time relative to it (`openat`, `mkdirat`,
// `renameat2`, `unlinkat`, `linkat`, `fstatat`), never follow a symlink in the entry they name,
// and never replace or remove what they were not told to (docs/contract.md, "Paths we write").
// A folder that an attacker can write may change under us between two calls; descriptors make
// each call act on the folder we opened, and O_NOFOLLOW / AT_SYMLINK_NOFOLLOW make a planted
// symlink an error instead of a way out.
import CLinux
import Foundation
import Glibc

/// A folder held open by descriptor (`O_DIRECTORY`). Operations take one entry name (no `/`,
/// not `.` or `..`), act relative to the descriptor, and never follow a symlink at that entry.
/// The corresponding C functions are `openat`, `mkdirat`, `renameat2`, `unlinkat`, `linkat`,
/// `fstatat` and `fdopendir`.
public final class Directory: @unchecked Sendable {
    /// The open descriptor (closed when this object goes).
    public let fd: Int32
    /// The path the folder was opened by, for messages only: never used to act on it.
    public let path: String

    private init(fd: Int32, path: String) { self.fd = fd; self.path = path }
    deinit { Glibc.close(fd) }

    /// Opens the folder at `path`.
    /// - Parameters:
    ///   - path: a folder path; its leading components are resolved as given (a user's own
    ///     symlinks there are followed).
    ///   - followFinal: false refuses a symlink as the last component (ELOOP): use it for the
    ///     spool's and store's own folders, which we made.
    /// - Throws: `SystemError` (ENOENT, ENOTDIR, ELOOP, EACCES, ...).
    public convenience init(path: String, followFinal: Bool = true) throws(SystemError) {
        let flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | (followFinal ? 0 : O_NOFOLLOW)
        let fd = Files.retrying { CLinux.tilespool_open(path, flags, 0) }
        if fd < 0 { throw SystemError("open", path) }
        self.init(fd: fd, path: path)
    }

    /// A path other programs (SQLite, a writer that takes paths) can use to reach entry `name`
    /// of this very folder, whatever happens to `path` meanwhile: `/proc/self/fd/<fd>/<name>`.
    public func procPath(_ name: String) -> String { "/proc/self/fd/\(fd)/\(name)" }

    /// `path` joined with `name`, for messages.
    public func display(_ name: String) -> String { path.hasSuffix("/") ? path + name : path + "/" + name }

    /// True when `name` can name one entry: not empty, not `.` or `..`, no `/` or NUL, at most
    /// 255 bytes (NAME_MAX).
    public static func isEntryName(_ name: String) -> Bool {
        let u = name.utf8
        return !u.isEmpty && u.count <= 255 && name != "." && name != ".." && !u.contains(0x2F) && !u.contains(0)
    }

    private func check(_ name: String, _ op: String) throws(SystemError) {
        if !Directory.isEntryName(name) { throw SystemError(op, display(name), errno: EINVAL) }
    }

    /// The entry `name` as `lstat` sees it (no symlink followed), or nil when absent.
    public func status(_ name: String) -> stat? {
        guard Directory.isEntryName(name) else { return nil }
        var st = stat()
        return fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? st : nil
    }

    /// What entry `name` is, without following a symlink.
    public func entryType(_ name: String) -> Files.EntryType {
        guard let st = status(name) else { return .missing }
        return Files.EntryType(mode: st.st_mode)
    }

    /// Opens subfolder `name` without following a symlink there (ELOOP, or ENOTDIR for a
    /// symlink on some kernels); with `create`, makes it first when missing (mode 0777 & ~umask).
    /// - Throws: `SystemError`.
    public func subdirectory(_ name: String, create: Bool = false) throws(SystemError) -> Directory {
        try check(name, "open")
        if create && mkdirat(fd, name, 0o777) != 0 && CLinux.tilespool_errno() != EEXIST {
            throw SystemError("mkdir", display(name))
        }
        let sub = Files.retrying { CLinux.tilespool_openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0) }
        if sub < 0 { throw SystemError("open", display(name)) }
        return Directory(fd: sub, path: display(name))
    }

    /// Makes subfolder `name`; fails when anything exists there (EEXIST).
    /// - Throws: `SystemError`.
    public func makeDirectory(_ name: String, mode: mode_t = 0o777) throws(SystemError) {
        try check(name, "mkdir")
        if mkdirat(fd, name, mode) != 0 { throw SystemError("mkdir", display(name)) }
    }

    /// Creates regular file `name`, which must not exist (O_EXCL: never a symlink's target, never
    /// someone else's file), and returns its descriptor: write-only, or read-write with `readable`.
    /// - Throws: `SystemError` (EEXIST when anything is there).
    public func createFile(_ name: String, mode: Int32 = 0o666, readable: Bool = false) throws(SystemError) -> Int32 {
        try check(name, "open")
        let access = readable ? O_RDWR : O_WRONLY
        let f = Files.retrying { CLinux.tilespool_openat(fd, name, access | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode) }
        if f < 0 { throw SystemError("open", display(name)) }
        return f
    }

    /// Opens regular file `name` for reading without following a symlink there.
    /// - Throws: `SystemError`.
    public func openForReading(_ name: String) throws(SystemError) -> Int32 {
        try check(name, "open")
        let f = Files.retrying { CLinux.tilespool_openat(fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0) }
        if f < 0 { throw SystemError("open", display(name)) }
        return f
    }

    /// Writes `data` as file `name` atomically: a new temp file `.tmp-<name>-<pid>-<n>` made
    /// here with O_EXCL (never a planted link's target), written, optionally fsynced, then renamed
    /// over `name`. The rename replaces the entry itself, never what a symlink there points to
    /// (a folder there makes it fail: EISDIR). For names this folder's owner gives out (status
    /// files); exports, which replace only what they made, check first (`Exporter`). With
    /// `replace` false the rename is `RENAME_NOREPLACE`: nothing is written when `name` exists.
    /// - Returns: false when `replace` is false and `name` existed (the temp file is removed).
    /// - Throws: `SystemError`; the temp file is removed then.
    @discardableResult
    public func writeAtomically(_ data: Data, to name: String, sync: Bool = false, replace: Bool = true) throws(SystemError) -> Bool {
        try check(name, "write")
        let tmp = Directory.tempName(for: name)
        let f = try createFile(tmp)
        do throws(SystemError) {
            try Files.writeAll(f, data, path: display(tmp))
            if sync { try Files.fsync(f, path: display(tmp)) }
        } catch {
            Glibc.close(f); unlinkat(fd, tmp, 0); throw error
        }
        Glibc.close(f)
        do throws(SystemError) { try rename(tmp, to: self, name, mode: replace ? .replace : .noReplace) } catch {
            unlinkat(fd, tmp, 0)
            if !replace && error.errno == EEXIST { return false }
            throw error
        }
        return true
    }

    /// A temp name for `name` in this folder, unique to this process and call: `.tmp-<name
    /// (shortened)>-<pid>-<counter>`.
    public static func tempName(for name: String) -> String {
        let n = Directory.counter.next()
        var base = name
        while base.utf8.count > 180 { base.removeLast() }
        return ".tmp-\(base)-\(getpid())-\(n)"
    }
    private static let counter = Counter()
    /// A process-wide counter for unique temp names (thread-safe).
    public final class Counter: @unchecked Sendable {
        private let lock = NSLock()
        private var n = 0
        public init() {}
        /// The next number: 1, 2, 3, ...
        public func next() -> Int { lock.lock(); defer { lock.unlock() }; n += 1; return n }
    }

    /// How `rename` treats an entry at the new name.
    public enum RenameMode: Sendable {
        /// Replace what is there (rename(2)'s own rule: a file replaces a file, a folder an empty folder).
        case replace
        /// Fail with EEXIST when anything is there (RENAME_NOREPLACE).
        case noReplace
        /// Swap the two entries atomically (RENAME_EXCHANGE): both must exist.
        case exchange
    }

    /// Renames entry `name` of this folder to `newName` in `target` (the same filesystem).
    /// The corresponding C function is `renameat2`.
    /// - Throws: `SystemError`.
    public func rename(_ name: String, to target: Directory, _ newName: String, mode: RenameMode = .replace) throws(SystemError) {
        try check(name, "rename"); try check(newName, "rename")
        let flags: UInt32
        switch mode {
        case .replace: flags = 0
        case .noReplace: flags = CLinux.tilespool_rename_noreplace()
        case .exchange: flags = CLinux.tilespool_rename_exchange()
        }
        if CLinux.tilespool_renameat2(fd, name, target.fd, newName, flags) != 0 {
            throw SystemError("rename", target.display(newName))
        }
    }

    /// Makes a hard link `newName` here to entry `name` of `source` (never following a symlink).
    /// The corresponding C function is `linkat`.
    /// - Throws: `SystemError` (EXDEV across filesystems, EEXIST, ...).
    public func link(_ name: String, from source: Directory, as newName: String) throws(SystemError) {
        try check(newName, "link")
        if linkat(source.fd, name, fd, newName, 0) != 0 { throw SystemError("link", display(newName)) }
    }

    /// Removes entry `name` when it is not a folder (a file, a symlink itself, ...); true when removed.
    @discardableResult
    public func remove(_ name: String) -> Bool {
        guard Directory.isEntryName(name) else { return false }
        return unlinkat(fd, name, 0) == 0
    }

    /// The most folders `removeTree` descends into, one inside the other (each level holds a
    /// descriptor); deeper ones are left in place.
    public static let maxTreeDepth = 128

    /// Removes entry `name` and, for a folder, everything in it: each folder is opened with
    /// O_NOFOLLOW relative to its parent's descriptor and emptied with `unlinkat`, so a symlink
    /// met anywhere is removed as a link and never followed, and a folder swapped for a symlink
    /// between two calls is never entered. True when `name` is gone afterwards.
    @discardableResult
    public func removeTree(_ name: String) -> Bool {
        removeTree(name, depth: 0)
        return status(name) == nil
    }

    private func removeTree(_ name: String, depth: Int) {
        guard let st = status(name) else { return }
        guard (st.st_mode & S_IFMT) == S_IFDIR else { unlinkat(fd, name, 0); return }
        if depth < Directory.maxTreeDepth {
            let sub = Files.retrying { CLinux.tilespool_openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0) }
            if sub >= 0 {
                let d = Directory(fd: sub, path: display(name))
                for entry in d.list() { d.removeTree(entry, depth: depth + 1) }
            }
        }
        unlinkat(fd, name, AT_REMOVEDIR)
    }

    /// The names in this folder (no `.` and `..`), unsorted; empty when it cannot be read.
    public func list() -> [String] {
        let dup = Glibc.dup(fd)
        guard dup >= 0 else { return [] }
        guard let d = fdopendir(dup) else { Glibc.close(dup); return [] }
        defer { closedir(d) }
        rewinddir(d)
        var names: [String] = []
        while let e = readdir(d) {
            let name = withUnsafePointer(to: e.pointee.d_name) { p in
                p.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// Makes this folder's entries (renames, new and removed names) durable.
    /// - Throws: `SystemError`.
    public func sync() throws(SystemError) {
        if Files.retrying({ Glibc.fsync(fd) }) != 0 { throw SystemError("fsync", path) }
    }

    /// False once the folder held open has been removed (no link left to it).
    public var isLinked: Bool {
        var st = stat()
        return fstat(fd, &st) == 0 && st.st_nlink > 0
    }

    /// The folder above this one (`..` opened relative to the descriptor): itself at the root.
    /// - Throws: `SystemError`.
    public func parentFolder() throws(SystemError) -> Directory {
        let up = Files.retrying { CLinux.tilespool_openat(fd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0) }
        if up < 0 { throw SystemError("open", display("..")) }
        return Directory(fd: up, path: display(".."))
    }

    /// The (device, inode) of this folder and of every folder above it up to the root, walked by
    /// descriptor (`..`), this one first; at most `limit` of them. Whatever path reached a
    /// folder (a symlink, a bind mount, another mount of it), these identities name it.
    public func ancestry(limit: Int = 4096) -> [FolderID] {
        var out = [FolderID(identity)]
        var current = self
        while out.count < limit, let up = try? current.parentFolder() {
            let id = FolderID(up.identity)
            if id == out.last { break } // the root is its own parent
            out.append(id)
            current = up
        }
        return out
    }

    /// The (device, inode) of this folder.
    public var identity: (dev: UInt64, ino: UInt64) {
        var st = stat()
        fstat(fd, &st)
        return (UInt64(st.st_dev), UInt64(st.st_ino))
    }
}

/// A folder's identity: its device and inode, the same by whatever path it is reached.
public struct FolderID: Hashable, Sendable {
    public var dev: UInt64
    public var ino: UInt64
    public init(_ id: (dev: UInt64, ino: UInt64)) { dev = id.dev; ino = id.ino }
    /// The identity in an `lstat`/`fstat` result.
    public init(_ st: stat) { dev = UInt64(st.st_dev); ino = UInt64(st.st_ino) }
}

/// A file's identity and version as `lstat` gives them (a symlink is not followed): device,
/// inode, type, size in bytes and modification time (seconds and nanoseconds since 1970). Two
/// equal values are the same file, unchanged as far as `lstat` can tell; a file replaced by a
/// rename, rewritten or touched since gives another.
public struct FileVersion: Equatable, Sendable {
    public let dev: UInt64
    public let ino: UInt64
    public let mode: UInt32
    public let size: Int64
    public let mtimeSeconds: Int
    public let mtimeNanoseconds: Int

    /// The entry at `path` now; nil when there is none (or it cannot be `lstat`ed).
    public init?(path: String) {
        var st = stat()
        guard lstat(path, &st) == 0 else { return nil }
        dev = UInt64(st.st_dev); ino = UInt64(st.st_ino); mode = st.st_mode; size = Int64(st.st_size)
        mtimeSeconds = Int(st.st_mtim.tv_sec); mtimeNanoseconds = Int(st.st_mtim.tv_nsec)
    }

    /// The entry's type (a regular file, a folder, a symlink, other).
    public var type: Files.EntryType { Files.EntryType(mode: mode) }
}

extension Files.EntryType {
    /// The type of an `st_mode`.
    public init(mode: mode_t) {
        switch mode & S_IFMT {
        case S_IFREG: self = .regular
        case S_IFDIR: self = .directory
        case S_IFLNK: self = .symlink
        default: self = .other
        }
    }
}
