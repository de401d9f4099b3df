// The scheduler: which regions hold a download slot (at most --max-active-regions, in arrival
// order), and which regions the event loop looks at (`live`). Probes of pausedNetwork regions
// are started here too, when due.
import Foundation
import Glibc
import TileSpoolCore
import TileSpoolIO

extension Daemon {
    func schedule() {
        let now = Daemon.now()
        var active = live.values.filter { $0.state == .downloading }.count
        if active < options.maxActiveRegions && leaseAllowsDownloads {
            for r in live.values.filter({ $0.state == .queued }).sorted(by: { $0.arrival < $1.arrival }) {
                guard active < options.maxActiveRegions else { break }
                start(r)
                if r.state == .downloading { active += 1 }
            }
        }
        // The region that started a request least recently goes first, so regions sharing a
        // rate-limited host take its turns alternately instead of one starving the others.
        // The range budget is offered in the same order, in turns (`RangeBudget`).
        let downloading = live.values.compactMap { r in r.state == .downloading ? r.download.map { (r, $0) } : nil }
        rangeBudget = nil
        defer { rangeBudget = nil }
        for (r, d) in downloading.sorted(by: { $0.1.lastIssued < $1.1.lastIssued }) where r.download === d && r.state == .downloading {
            fill(r, d, now: now)
        }
        for r in Array(live.values) {
            if r.state == .pausedNetwork, !r.probing, let url = r.probeURL, now >= r.nextProbe {
                r.probing = true
                let tag = nextTag; nextTag += 1
                transfers[tag] = (r.id, nil)
                // A probe is a request of the region like any other: with its headers. Any answer
                // will do, so its body is cut at `Daemon.probeBodyLimit`, and an archive's probe
                // asks for one byte (before, it fetched the archive up to --max-object-size: 32
                // MiB of a metered link at each recovery).
                http.start(url: url, tag: tag, headers: r.request.headerList,
                           everyHop: r.probeArchive ? [("Range", "bytes=0-0")] : [], limit: Daemon.probeBodyLimit)
            }
        }
    }

    /// Keeps `live` in step with a region's state (call after any state change or removal).
    func updateLive(_ r: Region) {
        let isLive = regions[r.id] === r && (r.state == .queued || r.state == .downloading || r.state == .pausedNetwork
            || r.statusDirty || r.download != nil)
        if isLive { live[r.id] = r } else { live.removeValue(forKey: r.id) }
    }

    func nextTimeout() -> Double {
        let now = Daemon.now()
        var t = min(1.0, max(0, lastRescan + options.rescanInterval - now))
        // While a batch is at the writer, its eventfd wakes the loop.
        if pendingCount > 0 && commitInFlight == nil { t = min(t, max(0, firstPendingAt + options.syncInterval - now)) }
        for r in live.values {
            if let d = r.download {
                for x in d.retries { t = min(t, max(0, x.due - now)) }
                if d.holdUntil > now { t = min(t, d.holdUntil - now) }
                // Even when just past: the last fill was held back and must run again.
                if d.rateWaitUntil > 0 && d.holdUntil <= now { t = min(t, max(0, d.rateWaitUntil - now)) }
            }
            if r.state == .pausedNetwork && !r.probing { t = min(t, max(0, r.nextProbe - now)) }
            if r.statusDirty { t = min(t, max(0, r.lastStatusWrite + options.statusInterval - now)) }
        }
        return t
    }
}

extension Daemon {
    /// Starts the refreshes that are due (called at each periodic rescan, every few seconds): a
    /// completed region whose `refreshAfter` (else `--refresh-interval`) has passed since its
    /// manifest was last written, and since its last refresh started, is refreshed with that
    /// interval as `maxAge`. Cron users can drop `<id>.refresh` instead (docs/refresh.md). Not
    /// a region whose new request is being planned (`arriving`): the request is decided against
    /// the state it was read in (attack round 51: a refresh begun during the plan refused it as
    /// `duplicateId`).
    func scheduleRefreshes() {
        let now = Date().timeIntervalSince1970
        for r in regions.values where r.state == .completed && !r.refreshing && r.id != arriving?.request.id {
            guard let interval = r.request.refreshAfter.map(Double.init) ?? options.refreshInterval else { continue }
            // A file's mtime comes from the kernel's coarse clock, up to a tick (1-10 ms) behind
            // the clock that stamped each line's fetch time: waiting 20 ms more makes every line
            // at least `interval` old when the refresh asks (`Refresh.isDue`).
            guard let modified = r.files.manifestModified(), now - modified >= interval + 0.02 else { continue }
            if let last = r.lastRefreshStart, Daemon.now() - last < interval { continue }
            Log.info("refresh due (every \(Int(interval)) s)", region: r.id, state: r.state.rawValue)
            apply(.refresh, to: r, maxAge: interval)
        }
    }
}
