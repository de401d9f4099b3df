// Child processes without a shell: the daemon's --on-state-change hook.
import CLinux
import Foundation
import Glibc

/// Runs an executable without a shell (posix_spawn), in its own process group, with stdin from
/// /dev/null, stdout and stderr into an unlinked temp file, no inherited descriptor above 2, the
/// default signal mask and dispositions; kills the group (SIGTERM, SIGKILL 2 s later) after
/// `timeout` seconds. Blocks the calling thread: call it from a background queue.
public enum Spawn {
    /// What a run did.
    public struct Result: Sendable {
        /// `ok` (exit 0), `failed` (other exit status or a signal), `timeout` (killed), `error` (not started).
        public var outcome = "error"
        public var exitStatus: Int?
        public var signal: Int?
        public var seconds = 0.0
        /// Standard output and error together, the last 4 KiB at most, trimmed.
        public var output = ""
        /// Why it did not start.
        public var error: String?
    }

    /// Runs `path` with `arguments` and exactly `environment`; see the type's documentation.
    public static func run(path: String, arguments: [String], environment: [String: String], timeout: Double) -> Result {
        var result = Result()
        let started = Date()
        let tmpPath = NSTemporaryDirectory() + "/tilespool-hook-\(getpid())-\(UUID().uuidString)"
        let out = Glibc.open(tmpPath, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        if out >= 0 { unlink(tmpPath) }
        defer { if out >= 0 { Glibc.close(out) } }

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        if out >= 0 {
            posix_spawn_file_actions_adddup2(&actions, out, 1)
            posix_spawn_file_actions_adddup2(&actions, out, 2)
        } else {
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
            posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        }
        withUnsafeMutablePointer(to: &actions) { _ = tilespool_spawn_closefrom(UnsafeMutableRawPointer($0), 3) }
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        defer { posix_spawnattr_destroy(&attr) }
        var mask = sigset_t()
        sigemptyset(&mask)
        posix_spawnattr_setsigmask(&attr, &mask)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for s in [SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD, SIGQUIT] { sigaddset(&defaults, s) }
        posix_spawnattr_setsigdefault(&attr, &defaults)
        posix_spawnattr_setpgroup(&attr, 0)
        posix_spawnattr_setflags(&attr, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP))

        let argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = environment.sorted { $0.key < $1.key }.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for p in argv { free(p) }; for p in envp { free(p) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, path, &actions, &attr, argv, envp)
        guard rc == 0 else {
            result.error = "posix_spawn \(path): \(String(cString: strerror(rc)))"
            result.seconds = Date().timeIntervalSince(started)
            return result
        }
        var status: Int32 = 0
        let deadline = Date().addingTimeInterval(timeout)
        var finished = false
        while Date() < deadline {
            let w = waitpid(pid, &status, WNOHANG)
            if w == pid { finished = true; break }
            if w < 0 && errno != EINTR { break }
            usleep(10_000)
        }
        if !finished {
            result.outcome = "timeout"
            kill(-pid, SIGTERM)
            let grace = Date().addingTimeInterval(2)
            while Date() < grace, waitpid(pid, &status, WNOHANG) == 0 { usleep(10_000) }
            kill(-pid, SIGKILL)
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        }
        if status & 0x7f == 0 {
            result.exitStatus = Int((status >> 8) & 0xff)
        } else {
            result.signal = Int(status & 0x7f)
        }
        if finished { result.outcome = result.exitStatus == 0 ? "ok" : "failed" }
        result.seconds = Date().timeIntervalSince(started)
        if out >= 0 {
            var st = stat()
            fstat(out, &st)
            let size = Int(st.st_size), keep = min(size, 4096)
            var buf = [UInt8](repeating: 0, count: keep)
            let n = buf.withUnsafeMutableBytes { pread(out, $0.baseAddress, keep, off_t(size - keep)) }
            result.output = String(decoding: buf.prefix(max(0, n)), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        }
        return result
    }
}
