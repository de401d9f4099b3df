// A second download loop on a thread of its own: its own libcurl multi handle, the transfers the
// daemon's event loop hands it, and the tiles among their answers hashed and written to the store
// on this thread, so the two cores both download and write without a hand-over per object. The
// event loop keeps every decision (what to fetch, retries, manifests, states): it gets each
// result back, with `storedSHA256` set when the lane stored the body.
import CLinux
import Foundation
import Glibc
import TileSpoolCore

/// Which answers a lane stores itself: a tile's 2xx with a non-empty body that is not one of the
/// request's `emptyStatuses` and that `TileBody.problem` accepts, exactly the answers the event
/// loop's `handle` would store (any other answer goes back untouched and is judged there).
public struct LaneStorePolicy: Sendable {
    /// The request's `emptyStatuses` (HTTP statuses meaning "empty tile").
    public var emptyStatuses: [Int]
    public init(emptyStatuses: [Int]) { self.emptyStatuses = emptyStatuses }

    /// True when `r` (the answer to a GET of `url`) is to be stored.
    public func stores(_ r: TransferResult, url: String) -> Bool {
        r.failure == nil && !r.notModified && (200...299).contains(r.status) && !r.body.isEmpty
            && !emptyStatuses.contains(r.status)
            && TileBody.problem(url: url, contentType: r.contentType, body: r.body) == nil
    }
}

/// A download loop on its own thread (see the file comment). The event loop calls `start`,
/// `cancel`, `flush` (once a turn, before it waits), `collect` (when `fd` is readable or on any
/// turn) and `stop`; only `fd` is read by poll. Jobs and results cross in two locked lists, with
/// one wake per batch each way: `curl_multi_wakeup` when jobs arrive for an idle lane, the eventfd
/// `fd` when results arrive while none wait to be collected.
public final class DownloadLane: @unchecked Sendable {
    /// One transfer handed to the lane.
    struct Job {
        var tag: Int
        var url: String
        var validators: Freshness?
        var headers: [(String, String)]
        var policy: LaneStorePolicy?
    }
    /// Readable (eventfd, non-blocking) while results wait for `collect`.
    public let fd: Int32
    private let http: HTTPClient
    private let store: ObjectStore
    private let lock = NSLock()
    /// Under `lock`: jobs and cancels for the lane's thread, results for the loop.
    private var inbox: [Job] = []
    private var cancels: [Int] = []
    private var outbox: [TransferResult] = []
    private var stopping = false
    private var signaled = false
    /// The event loop's side: jobs and cancels gathered during a turn, sent by `flush`, and the
    /// tags handed over whose result has not come back.
    private var outgoing: [Job] = []
    private var outgoingCancels: [Int] = []
    private var tags = Set<Int>()
    private var thread: Thread?
    private let done = DispatchSemaphore(value: 0)

    /// Transfers handed to the lane and not yet collected or cancelled (the event loop's count).
    public var inFlight: Int { tags.count }

    /// Starts the lane's thread. `options` are its own multi handle's (the caller gives each lane
    /// its share of the connection limits); objects go into `store` through `put(_:writeHere:)`.
    /// - Throws: `SystemError` "eventfd" when no eventfd can be made.
    public init(options: HTTPOptions, store: ObjectStore) throws(SystemError) {
        fd = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        if fd < 0 { throw SystemError("eventfd", "") }
        http = HTTPClient(options: options)
        self.store = store
        let t = Thread { [self] in run() }
        t.name = "tilespool.lane"
        thread = t
        t.start()
    }

    deinit { Glibc.close(fd) }

    /// Hands a GET of `url` to the lane (sent at the next `flush`); `policy` nil: the body is
    /// never stored by the lane. Arguments as `HTTPClient.start`.
    public func start(url: String, tag: Int, validators: Freshness?, headers: [(String, String)], policy: LaneStorePolicy?) {
        outgoing.append(Job(tag: tag, url: url, validators: validators, headers: headers, policy: policy))
        tags.insert(tag)
    }

    /// True when `tag` was handed to the lane and its result has not been collected.
    public func owns(_ tag: Int) -> Bool { tags.contains(tag) }

    /// Stops a transfer handed to the lane; no result is reported for it (one that was already
    /// on its way back is dropped by `collect`). Its body may still have been stored: an object
    /// no manifest names, which gc removes.
    public func cancel(tag: Int) {
        guard tags.remove(tag) != nil else { return }
        outgoingCancels.append(tag)
    }

    /// Sends the jobs and cancels of this turn to the lane's thread, waking it once.
    public func flush() {
        guard !outgoing.isEmpty || !outgoingCancels.isEmpty else { return }
        lock.lock()
        inbox.append(contentsOf: outgoing)
        cancels.append(contentsOf: outgoingCancels)
        lock.unlock()
        outgoing.removeAll(keepingCapacity: true)
        outgoingCancels.removeAll(keepingCapacity: true)
        http.wakeup()
    }

    /// The results that came back since the last call (cancelled transfers left out).
    public func collect() -> [TransferResult] {
        lock.lock()
        if signaled {
            // Read before taking the list: a result posted after this read signals again.
            signaled = false
            var v: UInt64 = 0
            _ = read(fd, &v, 8)
        }
        let got = outbox
        outbox.removeAll(keepingCapacity: true)
        lock.unlock()
        if got.isEmpty { return got }
        var results: [TransferResult] = []
        results.reserveCapacity(got.count)
        for r in got where tags.remove(r.tag) != nil { results.append(r) }
        return results
    }

    /// Ends the lane's thread (its transfers are dropped) and waits for it.
    public func stop() {
        lock.lock(); stopping = true; lock.unlock()
        http.wakeup()
        done.wait()
        tags.removeAll()
    }

    /// The lane's thread: starts what arrives, waits on its multi handle, stores the answers its
    /// policy accepts and posts every result back.
    private func run() {
        var policies: [Int: (url: String, policy: LaneStorePolicy)] = [:]
        var finished: [TransferResult] = []
        while true {
            lock.lock()
            if stopping { lock.unlock(); break }
            let jobs = inbox, stops = cancels
            inbox.removeAll(keepingCapacity: true)
            cancels.removeAll(keepingCapacity: true)
            lock.unlock()
            for j in jobs {
                if let p = j.policy { policies[j.tag] = (j.url, p) }
                http.start(url: j.url, tag: j.tag, validators: j.validators, headers: j.headers)
            }
            for tag in stops { http.cancel(tag: tag); policies.removeValue(forKey: tag) }
            http.wait(timeout: 1, fds: [])
            for var r in http.collect() {
                if let (url, policy) = policies.removeValue(forKey: r.tag), policy.stores(r, url: url) {
                    do { r.storedSHA256 = try store.put(r.body, writeHere: true).sha256 } catch { r.storeFailure = error }
                }
                finished.append(r)
            }
            guard !finished.isEmpty else { continue }
            lock.lock()
            outbox.append(contentsOf: finished)
            if !signaled {
                // Under the lock, so that `collect` never reads the eventfd before this write.
                signaled = true
                var one: UInt64 = 1
                _ = write(fd, &one, 8)
            }
            lock.unlock()
            finished.removeAll(keepingCapacity: true)
        }
        done.signal()
    }
}
