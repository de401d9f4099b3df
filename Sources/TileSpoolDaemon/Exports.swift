// The exports a request names (`exports`), written when its region completes: one at a time on a
// background queue, so the event loop keeps downloading meanwhile; results come back through a
// mailbox the loop empties each turn. An export failure never un-completes the region: it is
// reported in the status's `exports` entry and in events.jsonl.
import Foundation
import TileSpoolCore
import TileSpoolExport
import TileSpoolIO

/// Results of background exports, handed to the event loop.
final class ExportMailbox: @unchecked Sendable {
    private let lock = NSLock()
    private var results: [(id: String, generation: Int, index: Int, entry: [String: Any])] = []
    func post(_ id: String, _ generation: Int, _ index: Int, _ entry: [String: Any]) {
        lock.lock(); results.append((id, generation, index, entry)); lock.unlock()
    }
    func take() -> [(id: String, generation: Int, index: Int, entry: [String: Any])] {
        lock.lock(); defer { lock.unlock() }
        let r = results
        results.removeAll()
        return r
    }
}

extension Daemon {
    /// Makes the region's exports match its pack (`ExportReconcile`): entries of exports no longer
    /// requested leave the status; every export that is missing, failed, cut short, or written
    /// from another version of the pack is queued; the rest stay as they are. Called when a
    /// region completes, after a refresh ends (swapped or not), and at start for every completed
    /// region. Nothing happens for a region that is not `completed`.
    func reconcileExports(_ r: Region) {
        guard r.state == .completed, !r.refreshing else { return }
        let specs = r.request.exports
        if specs.isEmpty {
            if r.exports != nil { r.exports = nil; writeStatus(r) }
            return
        }
        let version = r.files.packVersion()
        let due = ExportReconcile.due(specs: specs, entries: r.exports, packVersion: version) { e in
            guard let path = e.path else { return false }
            if e.spec.format == .site {
                return Files.entryType(path) == .directory && Files.entryType(path + "/" + Exporter.siteMarker) == .regular
            }
            return Files.entryType(path) == .regular
        }
        let known = (r.exports ?? []).compactMap { o in ExportReconcile.Entry(o).map { ($0.spec, o) } }
        let aligned: [[String: Any]] = specs.map { spec in known.first { $0.0 == spec }?.1 ?? spec.jsonObject.merging(["spec": spec.jsonObject]) { a, _ in a } }
        let indices = due.indices.filter { due[$0] }
        if indices.isEmpty {
            // Only entries of exports no longer asked for (or a reordering) to drop.
            if (r.exports ?? []).count != aligned.count { r.exports = aligned; writeStatus(r) }
            return
        }
        startExports(r, indices: indices, aligned: aligned)
    }

    /// After a refresh that changed nothing in the pack (same objects under the same keys): the
    /// exports written from the pack before the swap are as good as new ones, so their entries
    /// take the new version instead of being written again.
    func carryExportsOver(_ r: Region, from old: String?) {
        guard let old, let new = r.files.packVersion(), var list = r.exports else { return }
        for i in list.indices where list[i]["state"] as? String == "written" && list[i]["pack"] as? String == old {
            list[i]["pack"] = new
        }
        r.exports = list
    }

    /// Marks the exports at `indices` of the request's `exports` as `writing` and queues them;
    /// `aligned` holds the status entries of every export, in the request's order.
    func startExports(_ r: Region, indices: [Int], aligned: [[String: Any]]) {
        exportGeneration += 1
        let generation = exportGeneration
        r.exportGeneration = generation
        let specs = r.request.exports
        var entries = aligned
        for i in indices {
            var o = specs[i].jsonObject
            o["spec"] = specs[i].jsonObject
            o["state"] = "writing"
            o["path"] = Exporter.spoolOutput(spool: layout.root, id: r.id, spec: specs[i])
            entries[i] = o
        }
        r.exports = entries
        writeStatus(r)
        let id = r.id, store = self.store, spool = layout.root, mailbox = exportMailbox
        let protection = ExportGuard(protected: [spool] + (StoreSpec.isS3(options.store) ? [] : [options.store]),
                                     exportsFolder: layout.exports, onlyInExportsFolder: true)
        let jobs = indices.map { ($0, specs[$0]) }
        let maxObjectSize = options.http.maxObjectSize
        exportQueue.async {
            for (i, spec) in jobs {
                var entry = spec.jsonObject
                entry["spec"] = spec.jsonObject // what the request asked; `source` below is what was exported
                let started = Date()
                do {
                    let pack = try RegionPack(store: store, id: id)
                    let result = try Exporter.export(pack, spec, to: Exporter.spoolOutput(spool: spool, id: id, spec: spec),
                                                     force: true, guard: protection, maxObjectSize: maxObjectSize)
                    for (k, v) in result.jsonObject { entry[k] = v }
                    entry["state"] = "written"
                } catch {
                    entry["state"] = "failed"
                    entry["path"] = Exporter.spoolOutput(spool: spool, id: id, spec: spec)
                    entry["error"] = ["code": "exportFailed", "message": "\(error)"]
                }
                entry["seconds"] = (Date().timeIntervalSince(started) * 1000).rounded() / 1000
                mailbox.post(id, generation, i, entry)
            }
        }
    }

    /// Records finished exports in their regions' status and in events.jsonl.
    func collectExports() {
        for (id, generation, index, entry) in exportMailbox.take() {
            // A region deleted or replaced meanwhile: its result is stale.
            guard let r = regions[id], r.exportGeneration == generation, var list = r.exports, index < list.count else { continue }
            list[index] = entry
            r.exports = list
            let failed = entry["state"] as? String == "failed"
            let what = "\(entry["format"] ?? "?") export \(failed ? "failed" : "written")"
            status.event(StatusEvent(id: id, state: r.state.rawValue, export: JSONValue(entry)))
            writeStatus(r)
            if failed {
                Log.error("\(what): \((entry["error"] as? [String: Any])?["message"] ?? "")", region: id, state: r.state.rawValue)
            } else {
                Log.info("\(what) to \(entry["path"] ?? "") (\(entry["tiles"] ?? 0) tiles, \(entry["bytes"] ?? 0) bytes)", region: id, state: r.state.rawValue)
            }
        }
    }
}
