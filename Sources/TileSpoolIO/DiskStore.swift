// The local-disk store (`ObjectStore`, `RegionFiles`) as a `TileStore`: each requirement is the
// disk operation that already existed, so the disk path pays nothing for the interface but one
// dynamic call.
import Foundation
import Glibc
import TileSpoolCore

extension ObjectStore: TileStore {
    public var location: String { root }
    public var isShared: Bool { false }
    public var lockPath: String? { root + "/daemon.lock" }

    public func isIntact(_ sha256: String) -> Bool { SHA256.hex(file: objectPath(sha256)) == sha256 }
    public func localPath(_ sha256: String) -> String? { objectPath(sha256) }

    public func regionIDs() -> [String] { Files.list(regionsDir) }
    public func region(_ id: String) -> any RegionStorage { RegionFiles(dir: regionDir(id)) }
    public func regionExists(_ id: String) -> Bool { Files.entryType(regionDir(id)) == .directory }

    /// Puts back objects an interrupted gc set aside and removes the temp files of an earlier run
    /// (no other process writes `tmp/`).
    public func recoverLeftovers() {
        restoreObjectsSetAside()
        for name in Files.list(tmpDir) where !name.hasPrefix("gc-") { Files.remove(tmpDir + "/" + name) }
    }

    public func measureUsage() -> (objects: Int, bytes: Int)? { ObjectStore.measure(root: root) }

    public func networkProbeURL(for error: Error) -> String? { nil }

    /// gc on disk (docs/gc.md): an object younger than the grace period is never a candidate, the
    /// daemon refreshes the mtime of an object it re-uses (`put`), and a candidate is first renamed
    /// into `tmp/` and its mtime checked again before it is unlinked (put back if the daemon
    /// touched it meanwhile).
    public func collectGarbage(grace: Double, referenced: () throws -> Set<String>) throws -> GCReport {
        var report = GCReport()
        let now = Date().timeIntervalSince1970
        // 0. Objects an interrupted gc left aside go back first (they may be referenced again).
        restoreObjectsSetAside()
        // 1. Candidates: objects old enough, listed before the manifests are read.
        var candidates: [String] = [], young: [String] = []
        for dir in Files.list(objectsDir).sorted() {
            let folder = objectsDir + "/" + dir
            for name in Files.list(folder) {
                guard let m = StoreMaintenance.mtime(folder + "/" + name) else { continue }
                if now - m >= grace { candidates.append(name) } else { report.objectsKept += 1; young.append(name) }
            }
        }
        // 2. What the manifests reference now.
        let refs = try referenced()
        for name in young where !refs.contains(name) {
            report.youngUnreferenced += 1
            report.youngUnreferencedBytes += Files.size(objectPath(name)) ?? 0
        }
        // 3. Remove the rest, re-checking each after moving it aside.
        for name in candidates {
            if refs.contains(name) { report.objectsKept += 1; continue }
            let path = objectPath(name)
            let aside = tmpDir + "/gc-" + name
            guard Glibc.rename(path, aside) == 0 else { continue }
            guard let m = StoreMaintenance.mtime(aside) else { continue } // a restarting daemon put it back
            if now - m < grace {
                Glibc.rename(aside, path) // the daemon re-used it meanwhile
                report.objectsKept += 1
                continue
            }
            report.bytesFreed += Files.size(aside) ?? 0
            Files.remove(aside)
            report.objectsRemoved += 1
        }
        for name in Files.list(tmpDir) where !name.hasPrefix("gc-") {
            let p = tmpDir + "/" + name
            if let m = StoreMaintenance.mtime(p), now - m >= grace { Files.remove(p); report.tempFilesRemoved += 1 }
        }
        return report
    }

    /// Re-hashes every object file; with `repair`, bad ones move to `<store>/quarantine/`.
    public func checkObjects(repair: Bool) throws -> ObjectCheck {
        var c = ObjectCheck()
        for dir in Files.list(objectsDir).sorted() {
            let folder = objectsDir + "/" + dir
            for name in Files.list(folder).sorted() {
                c.checked += 1
                let hash = SHA256.hex(file: folder + "/" + name)
                if hash != name || !name.hasPrefix(dir) {
                    c.bad.append("\(dir)/\(name)")
                    c.badNames.insert(name)
                    if repair, let store = try? Directory(path: root),
                       let quarantine = try? store.subdirectory("quarantine", create: true),
                       let from = try? Directory(path: folder, followFinal: false) {
                        // quarantine/ never through a symlink, and never over a file already there.
                        var target = name, n = 1
                        while quarantine.entryType(target) != .missing { n += 1; target = "\(name).\(n)" }
                        if (try? from.rename(name, to: quarantine, target, mode: .noReplace)) != nil { c.quarantined += 1 }
                    }
                }
            }
        }
        for name in Files.list(tmpDir) { c.tempFiles.append("tmp/" + name) }
        return c
    }
}

extension RegionFiles: RegionStorage {
    public var location: String { dir }
    public var readFailure: Error? { nil }
    public var refreshStorage: any RegionStorage { refreshFiles }

    public func requestData() throws -> Data { try Files.readRegularFile(requestPath, limit: RequestValidator.maxFileSize) }

    /// Writes the manifest anew with `lines` (atomically, fsynced).
    public func replaceManifest(_ lines: [ManifestLine]) throws {
        closeManifest()
        var text = ManifestLine.header
        for l in lines { text += l.text }
        try Files.writeAtomically(Data(text.utf8), to: manifestPath, sync: true)
    }

    public func manifestModified() -> Double? { StoreMaintenance.mtime(manifestPath) }

    /// The manifest is one file already.
    public func compactManifest() throws -> Int { 0 }

    public func remove() { closeManifest(); Files.removeTree(dir) }

    public func saveFailedList(_ text: String?) throws {
        let path = dir + "/failed.tsv"
        guard let text else { Files.remove(path); return }
        try Files.writeAtomically(Data(text.utf8), to: path)
    }
}
