// The store the daemon and the commands use (`TileStore`), on either backend: objects in the
// `Repository` (packs and index), region files beside them (`RegionFiles` on a local folder,
// `S3RegionFiles` in a bucket), and gc and verify written once, over the backend.
import Foundation
import Glibc
import TileSpoolCore

/// What S3 region files need of the store: where it is and a retrying S3 client.
protocol S3Access: AnyObject, Sendable {
    var location: String { get }
    func retrying<T>(_ body: (S3Client) throws -> T) throws -> T
}

extension S3Backend: S3Access {}

/// A `TileStore` over a `Backend`: objects packed (`Repository`), regions' files beside them.
public final class PackedStore: TileStore, @unchecked Sendable {
    public let repository: Repository
    public var backend: any Backend { repository.backend }
    /// The root folder of a local backend, else nil.
    let localRoot: String?

    /// Opens the store on `backend`, packs being written in `scratch` (for a local backend its
    /// `tmp/` folder, on the same filesystem, so a sealed pack moves into place by a rename).
    /// - Throws: the backend's error when the index cannot be read.
    public init(backend: any Backend, scratch: String) throws {
        repository = try Repository(backend: backend, scratch: scratch)
        localRoot = (backend as? LocalBackend)?.root
        if let root = localRoot { try Files.makeDirectories(root + "/regions") }
    }

    /// The store at a local folder (created when missing): scratch in `<root>/tmp`.
    public convenience init(root: String) throws {
        let backend = try LocalBackend(root: root)
        try self.init(backend: backend, scratch: root + "/tmp")
    }

    public var location: String { backend.location }
    public var isShared: Bool { backend.isShared }
    public var lockPath: String? { localRoot.map { $0 + "/daemon.lock" } }

    @discardableResult
    public func put(_ data: Data) throws -> (sha256: String, isNew: Bool) { try repository.put(data) }
    public var writesQueued: Int { repository.writesQueued }
    public var writesDone: Int { repository.writesDone }
    /// The open pack's bytes are written by its own write queue (`PackWriter`): the loop is woken
    /// once those the journal waits for are in the file.
    public var writesWakeFD: Int32 { repository.writesWakeFD }
    public func wakeWhenDone(through ticket: Int) { repository.wakeWhenDone(through: ticket) }
    /// Each loop turn: the open pack's buffer goes to its write queue, without waiting.
    public func resetWake() { repository.resetWake() }
    public func sync() throws { try repository.sync() }
    public func writeFailure(among sha256s: [String]) -> Error? { repository.writeFailure(among: sha256s) }
    public func read(_ sha256: String, limit: Int) throws -> Data { try repository.read(sha256, limit: limit) }
    public func contains(_ sha256: String) -> Bool { repository.contains(sha256) }
    public func isIntact(_ sha256: String) -> Bool { (try? read(sha256, limit: 1 << 30)).map { SHA256.hex($0) == sha256 } ?? false }
    /// Packed objects have no file of their own (a site export copies their bytes).
    public func localPath(_ sha256: String) -> String? { nil }
    public func objectLocation(_ sha256: String) -> ObjectLocation? { repository.location(sha256) }
    public func objectLocations(_ sha256s: [String]) -> [ObjectLocation?] { repository.locations(sha256s) }
    public func readObjects(_ sha256s: [String], at known: [ObjectLocation?]?, limit: Int, _ body: (Int, Data) throws -> Void) throws {
        try repository.readObjects(sha256s, at: known, limit: limit, body)
    }
    @discardableResult
    public func copyObject(_ sha256: String, at location: ObjectLocation?, to fd: Int32, path: String, limit: Int) throws -> Int {
        try repository.copyObject(sha256, at: location, to: fd, path: path, limit: limit)
    }

    public func regionIDs() throws -> [String] {
        if let root = localRoot { return Files.list(root + "/regions") }
        return Set(try backend.list(prefix: "regions/").compactMap { $0.name.split(separator: "/").dropFirst().first.map(String.init) }).sorted()
    }

    public func region(_ id: String) -> any RegionStorage {
        if let root = localRoot { return RegionFiles(dir: root + "/regions/" + id) }
        return S3RegionFiles(store: backend as! S3Backend, id: id)
    }

    public func regionExists(_ id: String) -> Bool {
        if let root = localRoot { return Files.entryType(root + "/regions/" + id) == .directory }
        return (try? backend.list(prefix: "regions/\(id)/"))?.isEmpty == false
    }

    public func recoverLeftovers() { repository.recoverLeftovers() }
    public func refreshIndex() throws { try repository.refreshIndex() }
    public func reloadIndex() throws { try repository.reloadIndexes() }
    public func renewLease(_ id: String, text: String) throws { try repository.renewLease(id, text: text) }
    public func dropLease(_ id: String) throws { try repository.dropLease(id) }
    public func freshLeases(now: Double) throws -> [(name: String, age: Double)] { try repository.freshLeases(now: now) }

    public var maxBytes: Int? {
        get { repository.maxBytes }
        set { repository.maxBytes = newValue }
    }
    public var usage: (objects: Int, bytes: Int)? { repository.usage }
    public var added: (objects: Int, bytes: Int) { repository.added }
    public func measureUsage() -> (objects: Int, bytes: Int)? { repository.measure() }
    public func setUsage(_ measured: (objects: Int, bytes: Int), addedAtStart: (objects: Int, bytes: Int)) {
        repository.setUsage(measured, addedAtStart: addedAtStart)
    }
    public func recountBeforeNextRefusal() { repository.recountBeforeNextRefusal() }
    public func networkProbeURL(for error: Error) -> String? { backend.unreachableProbeURL(for: error) }

    /// gc over the whole store (`Repository.collectGarbage`: packs, loose objects, leftovers),
    /// and in a bucket the manifest segments a compaction made obsolete. `grace` and `now` are
    /// in seconds (`now` since 1970; the present unless a test moves the clock on).
    /// - Returns: what was removed and kept. - Throws: the backend's error.
    public func collectGarbage(grace: Double, referenced: () throws -> Set<String>) throws -> GCReport {
        try collectGarbage(grace: grace, now: Date().timeIntervalSince1970, referenced: referenced)
    }
    public func collectGarbage(grace: Double, now: Double, referenced: () throws -> Set<String>) throws -> GCReport {
        let holders = Set([lockPath].compactMap { $0.flatMap { SpoolLock.holder(path: $0) } })
        var report = try repository.collectGarbage(grace: grace, now: now, lockHolders: holders, referenced: referenced)
        if !(backend is LocalBackend) { report.segmentsRemoved = try S3RegionFiles.removeObsoleteSegments(backend, grace: grace, now: now) }
        return report
    }

    public func checkObjects(repair: Bool, referenced: (() throws -> Set<String>)?) throws -> ObjectCheck {
        try repository.checkObjects(repair: repair, referenced: referenced)
    }
}
