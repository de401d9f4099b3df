// Questions about the daemon's lock file that take no lock of their own for longer than a probe:
// is it held (does a daemon run?), and do two lock paths name one file (--spool X --store X)?
import Foundation
import Glibc

extension SpoolLock {
    /// Whether a process holds the lock at `path` (a daemon runs on that spool or store iff its
    /// `daemon.lock` is held; docs/contract.md). Opens the file read-only without creating it and
    /// asks for a shared lock without waiting: refused (EWOULDBLOCK) means held; granted, it is
    /// released at once. The file is never written. The corresponding C function is `flock`.
    /// - Returns: false when the file does not exist (no daemon ever ran there).
    /// - Throws: `SystemError` when the file exists but cannot be opened or locked for another reason.
    public static func isHeld(path: String) throws(SystemError) -> Bool {
        let fd: Int32
        do { fd = try Files.open(path, O_RDONLY | O_NOFOLLOW) } catch {
            if error.errno == ENOENT { return false }
            throw error
        }
        defer { close(fd) }
        if flock(fd, LOCK_SH | LOCK_NB) == 0 { return false }
        let e = SystemError("flock", path)
        if e.errno == EWOULDBLOCK { return true }
        throw e
    }

    /// The pid the holder of the lock at `path` wrote in it (`SpoolLock.init`), when the lock is
    /// held now; nil when it is not held, the file is missing, or holds no pid. A process in
    /// another PID namespace (a container sharing the spool) wrote its pid there as it sees it.
    public static func holder(path: String) -> pid_t? {
        guard (try? isHeld(path: path)) == true, let text = try? Files.readRegularFile(path, limit: 64) else { return nil }
        return pid_t(String(decoding: text, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// True when `a` and `b` name the same existing file (same device and inode, through any
    /// symbolic links in their folders), e.g. the spool's and the store's `daemon.lock` when
    /// `--spool` and `--store` are one folder. A second `flock` of that file from the same process
    /// (another open file description) would fail as if another daemon held it. False when either
    /// is missing. The corresponding C function is `stat`.
    public static func sameFile(_ a: String, _ b: String) -> Bool {
        var sa = stat(), sb = stat()
        guard stat(a, &sa) == 0, stat(b, &sb) == 0 else { return false }
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino
    }
}
