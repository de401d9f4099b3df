import Foundation
import Glibc
import TileSpoolCore

/// What `tilespool gc` did.
public struct GCReport: Sendable {
    public var objectsRemoved = 0
    public var bytesFreed = 0
    public var tempFilesRemoved = 0
    public var objectsKept = 0
}

/// What `tilespool verify` found.
public struct VerifyReport: Sendable {
    public var objectsChecked = 0
    public var badObjects: [String] = []
    public var manifestsChecked = 0
    public var linesChecked = 0
    /// "region: key -> sha" for manifest lines whose object is absent.
    public var missingObjects: [String] = []
    public var tempFiles: [String] = []
    /// Regions whose status counts disagree with their manifest.
    public var countMismatches: [String] = []
    public var quarantined = 0
    public var regionsMarked: [String] = []
    public var faults: Int { badObjects.count + missingObjects.count + tempFiles.count + countMismatches.count }
}

/// Garbage collection and verification of the store. Both only read manifests; gc removes objects
/// no manifest references, with a protocol that is safe beside a running daemon (docs/gc.md):
/// an object younger than the grace period is never a candidate, the daemon refreshes the mtime of
/// an object it re-uses (`ObjectStore.put`), and a candidate is first renamed into `tmp/` and its
/// mtime checked again before it is unlinked (restored if the daemon touched it meanwhile).
public enum StoreMaintenance {
    /// Every object name referenced by any region's manifest or journal, and by those of a
    /// refresh under way (`regions/<id>/refresh/`), so both the pack in use and the one being made
    /// are kept. The refresh's files are read first: a refresh that swaps its manifest in meanwhile
    /// is then read in full either way.
    static func referenced(_ store: ObjectStore) -> Set<String> {
        var refs = Set<String>()
        for id in Files.list(store.regionsDir) {
            let region = RegionFiles(dir: store.regionDir(id))
            for files in [region.refreshFiles, region] {
                files.readManifest { line in if let s = line.sha256 { refs.insert(s) } }
                files.readJournal { line in if let s = line.sha256 { refs.insert(s) } }
            }
        }
        return refs
    }

    /// For each region under `<store>/regions/`, the bytes of the objects that its manifest
    /// references and no other region's manifest does (an object counts once per region however
    /// many of its lines name it). Reads the manifests only, never the objects: one pass over every
    /// manifest, memory about 40 bytes per distinct object. Safe on any thread beside the daemon.
    public static func uniqueBytes(storeRoot: String) -> [String: Int] {
        var owner: [UInt64: (region: Int32, bytes: Int, shared: Bool)] = [:]
        let ids = Files.list(storeRoot + "/regions").sorted()
        for (n, id) in ids.enumerated() {
            let region = Int32(n)
            RegionFiles(dir: storeRoot + "/regions/" + id).readManifest { line in
                guard let sha = line.sha256, let key = UInt64(sha.prefix(16), radix: 16) else { return }
                if let o = owner[key] {
                    if o.region != region && !o.shared { owner[key] = (o.region, o.bytes, true) }
                } else {
                    owner[key] = (region, line.bytes, false)
                }
            }
        }
        var out: [String: Int] = [:]
        for id in ids { out[id] = 0 }
        for o in owner.values where !o.shared { out[ids[Int(o.region)], default: 0] += o.bytes }
        return out
    }

    static func mtime(_ path: String) -> Double? {
        var st = stat()
        guard lstat(path, &st) == 0 else { return nil }
        return Double(st.st_mtim.tv_sec) + Double(st.st_mtim.tv_nsec) / 1e9
    }

    /// Removes unreferenced objects older than `grace` seconds and temp files older than `grace`.
    public static func gc(store: ObjectStore, spool: SpoolLayout?, grace: Double) -> GCReport {
        var report = GCReport()
        let now = Date().timeIntervalSince1970
        // 0. Objects an interrupted gc left aside go back first (they may be referenced again).
        store.restoreObjectsSetAside()
        // 1. Candidates: objects old enough, listed before the manifests are read.
        var candidates: [String] = []
        for dir in Files.list(store.objectsDir).sorted() {
            let folder = store.objectsDir + "/" + dir
            for name in Files.list(folder) {
                guard let m = mtime(folder + "/" + name) else { continue }
                if now - m >= grace { candidates.append(name) } else { report.objectsKept += 1 }
            }
        }
        // 2. What the manifests reference now.
        let refs = referenced(store)
        // 3. Remove the rest, re-checking each after moving it aside.
        for name in candidates {
            if refs.contains(name) { report.objectsKept += 1; continue }
            let path = store.objectPath(name)
            let aside = store.tmpDir + "/gc-" + name
            guard Glibc.rename(path, aside) == 0 else { continue }
            guard let m = mtime(aside) else { continue } // a restarting daemon put it back
            if now - m < grace {
                Glibc.rename(aside, path) // the daemon re-used it meanwhile
                report.objectsKept += 1
                continue
            }
            report.bytesFreed += Files.size(aside) ?? 0
            Files.remove(aside)
            report.objectsRemoved += 1
        }
        for name in Files.list(store.tmpDir) where !name.hasPrefix("gc-") {
            let p = store.tmpDir + "/" + name
            if let m = mtime(p), now - m >= grace { Files.remove(p); report.tempFilesRemoved += 1 }
        }
        if let spool {
            for name in Files.list(spool.status) where name.hasPrefix(".tmp-") {
                let p = spool.status + "/" + name
                if let m = mtime(p), now - m >= grace { Files.remove(p); report.tempFilesRemoved += 1 }
            }
        }
        return report
    }

    /// Re-hashes every object and checks every manifest, temp folder and completed region's counts.
    /// With `repair`, bad objects move to `<store>/quarantine/`, the manifest lines that used bad or
    /// missing objects are dropped, and those regions become `failed` with code `storeDamaged`, so
    /// that `resume` fetches exactly what is missing. Nothing else is deleted.
    public static func verify(store: ObjectStore, status: StatusWriter, repair: Bool) -> VerifyReport {
        var report = VerifyReport()
        var bad = Set<String>()
        for dir in Files.list(store.objectsDir).sorted() {
            let folder = store.objectsDir + "/" + dir
            for name in Files.list(folder).sorted() {
                report.objectsChecked += 1
                let hash = SHA256.hex(file: folder + "/" + name)
                if hash != name || !name.hasPrefix(dir) {
                    report.badObjects.append("\(dir)/\(name)")
                    bad.insert(name)
                    if repair {
                        try? Files.makeDirectories(store.root + "/quarantine")
                        if Glibc.rename(folder + "/" + name, store.root + "/quarantine/" + name) == 0 { report.quarantined += 1 }
                    }
                }
            }
        }
        for name in Files.list(store.tmpDir) { report.tempFiles.append("tmp/" + name) }
        for name in Files.list(status.layout.status) where name.hasPrefix(".tmp-") { report.tempFiles.append("status/" + name) }

        for id in Files.list(store.regionsDir).sorted() {
            let files = RegionFiles(dir: store.regionDir(id))
            report.manifestsChecked += 1
            var kept: [ManifestLine] = []
            var dropped = 0
            var droppedTiles = 0, droppedBytes = 0, droppedTileBytes = 0
            var lines = 0
            files.readManifest { line in
                lines += 1
                report.linesChecked += 1
                if let s = line.sha256, bad.contains(s) || !store.contains(s) {
                    if !bad.contains(s) { report.missingObjects.append("\(id): \(line.key) -> \(s)") }
                    dropped += 1
                    droppedBytes += line.bytes
                    if line.kind == .tile { droppedTiles += 1; droppedTileBytes += line.bytes }
                } else {
                    kept.append(line)
                }
            }
            let st = status.read(id: id)
            if let st, st.state == .completed {
                let planned = files.loadPlan()?.count
                if st.progress.resourcesCompleted != lines || (planned != nil && planned != lines) {
                    report.countMismatches.append("\(id): status says \(st.progress.resourcesCompleted) resources, manifest has \(lines)" + (planned.map { ", plan has \($0)" } ?? ""))
                }
            }
            if repair && dropped > 0 {
                var text = ManifestLine.header
                for l in kept { text += l.text }
                try? Files.writeAtomically(Data(text.utf8), to: files.manifestPath, sync: true)
                if var st {
                    st.state = .failed
                    st.error = RegionError(code: .storeDamaged, message: "\(dropped) resources were damaged or missing in the store; resume fetches them again")
                    st.progress.resourcesCompleted = max(0, st.progress.resourcesCompleted - dropped)
                    st.progress.tilesCompleted = max(0, st.progress.tilesCompleted - droppedTiles)
                    st.progress.bytesCompleted = max(0, st.progress.bytesCompleted - droppedBytes)
                    st.progress.tileBytesCompleted = max(0, st.progress.tileBytesCompleted - droppedTileBytes)
                    st.updatedAt = Date()
                    try? status.write(st)
                    status.event(id: id, state: st.state.rawValue, error: st.error, extra: ["note": "verify --repair"])
                }
                report.regionsMarked.append(id)
            }
        }
        return report
    }
}
