import CLinux
import Glibc
import TileSpoolExport

/// SIGINT, SIGTERM, SIGHUP and SIGQUIT during an export (`tilespool export`, and `get` once its download is done):
/// a handler notes the signal and nothing else (a signal handler may only store to a plain
/// global); the export checks `received` between tiles (its progress callback) and throws, so it
/// ends as any failed export does: its work folder removed, the output path as it was.
enum StopSignal {
    /// Installs the handler for SIGINT, SIGTERM, SIGHUP (a terminal closed: attack round 16
    /// found its work folder left) and SIGQUIT (else the Swift runtime's crash report, and the
    /// export went on), and unblocks them (one the daemon's code left
    /// blocked and pending is delivered now). SIGHUP that came ignored (`nohup`) stays ignored.
    static func install() {
        stopSignal = 0
        signal(SIGINT, stopHandler)
        signal(SIGTERM, stopHandler)
        if tilespool_signal_is_ignored(SIGHUP) == 0 { signal(SIGHUP, stopHandler) }
        signal(SIGQUIT, stopHandler)
        var set = sigset_t()
        sigemptyset(&set); sigaddset(&set, SIGINT); sigaddset(&set, SIGTERM); sigaddset(&set, SIGHUP); sigaddset(&set, SIGQUIT)
        sigprocmask(SIG_UNBLOCK, &set, nil)
    }

    /// The signal received since `install`, 0 while none was.
    static var received: Int32 { stopSignal }

    /// Throws when a signal was received (the export's progress callback, between tiles).
    /// - Throws: `ExportError` "stopped by signal N".
    static func throwIfReceived() throws {
        if stopSignal != 0 { throw ExportError("stopped by signal \(stopSignal)") }
    }

    /// After an export returned: a signal that came once PATH was replaced does not undo it
    /// (attack round 17: exit 130 said "as it was"); a note says the export is written.
    static func noteIfReceivedAfterWriting(_ path: String) {
        if stopSignal != 0 { err("tilespool: a stop signal came after the export was written; \(path) is the new export") }
    }
}

nonisolated(unsafe) private var stopSignal: Int32 = 0

private func stopHandler(_ sig: Int32) { stopSignal = sig }
