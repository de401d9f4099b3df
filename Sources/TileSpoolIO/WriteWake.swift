// The wake-up a store's writer threads give the event loop once the writes it waits for are done:
// the loop journals a line only after its object is written (Durability.swift), and without this it
// would learn of the write only at its next wake for another reason.
import CLinux
import Glibc

/// An eventfd(2) that becomes readable once a store's `writesDone` reaches the ticket the loop
/// asked for (`arm`). The store's writer threads call `reached`; the loop calls `arm` and, every
/// turn, `reset` (a stale wake, one the loop no longer waits for, would otherwise keep the fd
/// readable and the loop spinning). Not thread-safe on its own: the store calls all three with
/// its lock held.
public final class WriteWake: @unchecked Sendable {
    /// Readable (non-blocking eventfd) once the armed ticket is done; -1 when no eventfd could be
    /// made (out of descriptors: poll(2) ignores it, and the loop journals at its next wake).
    public let fd: Int32
    /// The ticket waited for, 0 when none.
    private var waitingFor = 0
    /// True from a signal until `reset` reads the eventfd.
    private var signaled = false

    public init() { fd = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC)) }

    deinit { if fd >= 0 { Glibc.close(fd) } }

    /// Asks for a wake once writes through `ticket` are done; `done` is the store's `writesDone`
    /// now (a ticket already done wakes at once). Call with the store's lock held.
    func arm(_ ticket: Int, done: Int) {
        if ticket <= done { signal(); return }
        waitingFor = max(waitingFor, ticket)
    }

    /// The writes through `done` have run: wakes the loop if it waits for one of them. Call with
    /// the store's lock held.
    func reached(_ done: Int) {
        if waitingFor > 0 && done >= waitingFor { waitingFor = 0; signal() }
    }

    /// Forgets the ticket waited for and empties the eventfd if it was signalled (no system call
    /// otherwise). Call with the store's lock held.
    func reset() {
        waitingFor = 0
        guard signaled else { return }
        signaled = false
        var v: UInt64 = 0
        _ = read(fd, &v, 8)
    }

    private func signal() {
        guard fd >= 0, !signaled else { return }
        signaled = true
        var one: UInt64 = 1
        _ = write(fd, &one, 8)
    }
}
