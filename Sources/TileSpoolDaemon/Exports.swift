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
    /// Marks every export of `r` as `writing` and queues them.
    func startExports(_ r: Region) {
        exportGeneration += 1
        let generation = exportGeneration
        r.exportGeneration = generation
        let specs = r.request.exports
        r.exports = specs.map { spec in
            var o = spec.jsonObject
            o["state"] = "writing"
            o["path"] = Exporter.spoolOutput(spool: layout.root, id: r.id, spec: spec)
            return o
        }
        writeStatus(r)
        let id = r.id, store = self.store, spool = layout.root, mailbox = exportMailbox
        exportQueue.async {
            for (i, spec) in specs.enumerated() {
                var entry = spec.jsonObject
                let started = Date()
                do {
                    let pack = try RegionPack(store: store, id: id)
                    let result = try Exporter.export(pack, spec, to: Exporter.spoolOutput(spool: spool, id: id, spec: spec), force: true)
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
            status.event(id: id, state: r.state.rawValue, error: nil, extra: ["export": entry])
            writeStatus(r)
            if failed {
                Log.error("\(what): \((entry["error"] as? [String: Any])?["message"] ?? "")", region: id, state: r.state.rawValue)
            } else {
                Log.info("\(what) to \(entry["path"] ?? "") (\(entry["tiles"] ?? 0) tiles, \(entry["bytes"] ?? 0) bytes)", region: id, state: r.state.rawValue)
            }
        }
    }
}
