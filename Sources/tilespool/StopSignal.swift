import Glibc

/// SIGINT, SIGTERM, SIGHUP and SIGQUIT during an export (`tilespool export`, and `get` once its download is done):
/// a handler notes the signal and nothing else (a signal handler may only store to a plain
/// global); the export checks `received` between tiles (its progress callback) and throws, so it
/// ends as any failed export does: its work folder removed, the output path as it was.
enum StopSignal {
    /// Installs the handler for SIGINT, SIGTERM, SIGHUP (a terminal closed: attack round 16
    /// found its work folder left) and SIGQUIT (else the Swift runtime's crash report, and the
    /// export went on), and unblocks them (one the daemon's code left
    /// blocked and pending is delivered now).
    static func install() {
        stopSignal = 0
        signal(SIGINT, stopHandler)
        signal(SIGTERM, stopHandler)
        signal(SIGHUP, stopHandler)
        signal(SIGQUIT, stopHandler)
        var set = sigset_t()
        sigemptyset(&set); sigaddset(&set, SIGINT); sigaddset(&set, SIGTERM); sigaddset(&set, SIGHUP); sigaddset(&set, SIGQUIT)
        sigprocmask(SIG_UNBLOCK, &set, nil)
    }

    /// The signal received since `install`, 0 while none was.
    static var received: Int32 { stopSignal }
}

nonisolated(unsafe) private var stopSignal: Int32 = 0

private func stopHandler(_ sig: Int32) { stopSignal = sig }
