import CLinux
import Foundation
import Glibc

/// Watches folders with inotify(7) for files that are complete: closed after writing
/// (`IN_CLOSE_WRITE`) or moved in (`IN_MOVED_TO`), and for entries made in place that are not
/// regular files (`IN_CREATE` of a symlink, FIFO or folder, which never see a close-after-write;
/// the owner refuses them). Events are hints only: the owner rescans a
/// folder at start-up, after `IN_Q_OVERFLOW`, and when a watch is lost (`IN_IGNORED`).
/// `fd` is non-blocking and pollable, so it fits an event loop.
public final class FolderWatcher: @unchecked Sendable {
    /// What `drain` found.
    public enum Event: Sendable, Equatable {
        /// A file named `name` is complete in `folder`.
        case file(folder: String, name: String)
        /// Events were lost or a watch was re-added: rescan `folder` (nil: every folder).
        case rescan(folder: String?)
    }

    /// The inotify file descriptor (readable when events are queued).
    public let fd: Int32
    private var folders: [Int32: String] = [:]
    private var wanted: [String] = []
    private let mask = UInt32(IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE) | UInt32(IN_ONLYDIR)

    /// - Throws: `SystemError` from `inotify_init1`.
    public init() throws(SystemError) {
        fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        if fd < 0 { throw SystemError("inotify_init1", "-") }
    }
    deinit { close(fd) }

    /// Starts watching `folder`. The corresponding C function is `inotify_add_watch`.
    public func watch(_ folder: String) throws(SystemError) {
        if !wanted.contains(folder) { wanted.append(folder) }
        let wd = inotify_add_watch(fd, folder, mask)
        if wd < 0 { throw SystemError("inotify_add_watch", folder) }
        folders[wd] = folder
    }

    /// Watches again every folder whose watch was lost (the folder was removed and made again).
    public func ensureWatches() {
        let watched = Set(folders.values)
        for folder in wanted where !watched.contains(folder) { try? watch(folder) }
    }

    /// Reads every queued event without blocking.
    public func drain() -> [Event] {
        var events: [Event] = []
        let size = 64 * 1024
        let buf = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 8)
        defer { buf.deallocate() }
        while true {
            let n = read(fd, buf, size)
            if n <= 0 { break }
            var off = 0
            while off < n {
                let ev = buf.load(fromByteOffset: off, as: inotify_event.self)
                let header = MemoryLayout<inotify_event>.size
                if ev.mask & UInt32(IN_Q_OVERFLOW) != 0 {
                    Log.info("inotify queue overflowed: rescanning the watched folders")
                    events.append(.rescan(folder: nil))
                } else if ev.mask & UInt32(IN_IGNORED) != 0 {
                    if let folder = folders.removeValue(forKey: ev.wd) {
                        try? watch(folder)
                        events.append(.rescan(folder: folder))
                    }
                } else if ev.len > 0, let folder = folders[ev.wd] {
                    let namePtr = (buf + off + header).assumingMemoryBound(to: CChar.self)
                    let name = String(cString: namePtr)
                    // A regular file just created is being written: wait for its IN_CLOSE_WRITE.
                    let created = ev.mask & UInt32(IN_CREATE) != 0 && ev.mask & UInt32(IN_ISDIR) == 0
                    if !created || Files.entryType(folder + "/" + name) != .regular {
                        events.append(.file(folder: folder, name: name))
                    }
                }
                off += header + Int(ev.len)
            }
        }
        return events
    }
}

/// SIGINT, SIGTERM, SIGQUIT and SIGHUP delivered as a readable fd (signalfd(2)) instead of an
/// asynchronous handler, so the event loop stops between two steps (SIGQUIT as nginx takes it, a
/// clean stop: left to the Swift runtime it printed a crash report and the daemon went on; SIGHUP,
/// a terminal closed, killed `run` and `get` without their clean stop: attack round 54). Also
/// ignores SIGPIPE.
public final class SignalFD: @unchecked Sendable {
    public let fd: Int32

    /// Blocks SIGINT, SIGTERM, SIGQUIT and SIGHUP for the process and opens a signalfd for them.
    /// SIGHUP only when it is not ignored at start: `nohup tilespool run` keeps running when its
    /// terminal closes (a blocked signal stays pending on Linux even when ignored, so blocking it
    /// would stop the daemon `nohup` was asked to keep).
    /// - Throws: `SystemError` from `signalfd`.
    public init() throws(SystemError) {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGINT)
        sigaddset(&set, SIGTERM)
        sigaddset(&set, SIGQUIT)
        if CLinux.tilespool_signal_is_ignored(SIGHUP) == 0 { sigaddset(&set, SIGHUP) }
        sigprocmask(SIG_BLOCK, &set, nil)
        signal(SIGPIPE, SIG_IGN)
        fd = signalfd(-1, &set, Int32(SFD_NONBLOCK | SFD_CLOEXEC))
        if fd < 0 { throw SystemError("signalfd", "-") }
    }
    deinit { close(fd) }

    /// The signal numbers received since the last call (empty when none).
    public func drain() -> [Int32] {
        var out: [Int32] = []
        var info = signalfd_siginfo()
        while read(fd, &info, MemoryLayout<signalfd_siginfo>.size) == MemoryLayout<signalfd_siginfo>.size {
            out.append(Int32(info.ssi_signo))
        }
        return out
    }
}

/// An exclusive `flock(2)` on a lock file: one daemon per spool.
public final class SpoolLock: @unchecked Sendable {
    private let fd: Int32
    public let path: String

    /// Takes the lock without waiting.
    /// - Throws: `SystemError` with EWOULDBLOCK when another process holds it.
    public init(path: String) throws(SystemError) {
        self.path = path
        fd = try Files.open(path, O_RDWR | O_CREAT | O_NOFOLLOW, mode: 0o666)
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let e = SystemError("flock", path)
            close(fd)
            throw e
        }
        let pid = Data("\(getpid())\n".utf8)
        ftruncate(fd, 0)
        _ = pid.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }
    deinit { close(fd) }
}
