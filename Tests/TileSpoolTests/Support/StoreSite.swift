// Where a store test's repository lives (issue 30: one suite for both backends): a local folder,
// or a prefix of a bucket on a real Ceph RADOS Gateway. The tests reach the store's files only
// through the backend (list, load, save, remove), so the same steps run on both; the independent
// reader (Tests/Support/store_reader.py) reads a local copy of a bucket's files.
import Foundation
import XCTest
@testable import TileSpoolIO

final class StoreSite {
    /// The store's files.
    let backend: any Backend
    /// The local folder of the open pack and other scratch files (`<root>/tmp` on disk).
    let scratch: String
    /// The store's folder on disk; nil in a bucket.
    let root: String?
    /// `--store ...` (and `--s3-endpoint ...`) for the CLI, and the environment it needs.
    let storeArguments: [String]
    let environment: [String: String]
    private let openStore: () throws -> PackedStore
    private let rgw: CephRGW?

    /// A store in the folder `root` (which need not exist yet), opened as the CLI opens it.
    init(root: String) throws {
        self.root = root
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        backend = try LocalBackend(root: root)
        scratch = root + "/tmp"
        storeArguments = ["--store", root]
        environment = [:]
        openStore = { try PackedStore(root: root) }
        rgw = nil
    }

    /// A store under a fresh prefix of the test bucket of `rgw`, scratch files in a temp folder.
    init(rgw: CephRGW, label: String) throws {
        let config = rgw.config(prefix: "\(label)-\(UUID().uuidString.prefix(8))")
        root = nil
        backend = S3Backend(config: config)
        let scratch = try TestScratch.folder("s3-scratch-\(label)").path
        self.scratch = scratch
        storeArguments = ["--store", "s3://\(CephRGW.bucket)/\(config.prefix)", "--s3-endpoint", rgw.endpoint]
        environment = ["AWS_ACCESS_KEY_ID": CephRGW.accessKey, "AWS_SECRET_ACCESS_KEY": CephRGW.secretKey, "AWS_ENDPOINT_URL": ""]
        openStore = { try PackedStore(backend: S3Backend(config: config), scratch: scratch) }
        self.rgw = rgw
    }

    /// A copy of the whole store as a new store named `label`: the folder copied beside this
    /// one, or every file of the prefix saved under a fresh prefix of the same bucket.
    func copied(as label: String) throws -> StoreSite {
        if let root {
            let to = (root as NSString).deletingLastPathComponent + "/" + label
            try FileManager.default.copyItem(atPath: root, toPath: to)
            return try StoreSite(root: to)
        }
        let copy = try StoreSite(rgw: try XCTUnwrap(rgw), label: label)
        for f in try backend.list(prefix: "") { try copy.replace(f.name, try load(f.name)) }
        return copy
    }

    /// Removes the store: its folder, or every file under its prefix.
    func removeAll() throws {
        if let root { try FileManager.default.removeItem(atPath: root); return }
        for f in try backend.list(prefix: "") { try backend.remove(f.name) }
    }

    /// The store opened anew, as a restart of the daemon or a CLI command opens it.
    func open() throws -> PackedStore { try openStore() }

    /// The names of the store's files under `prefix` (`packs/`, `index/`, ...), sorted.
    func names(_ prefix: String) throws -> [String] { try backend.list(prefix: prefix).map(\.name).sorted() }
    /// The names of the packs (`packs/<64 hex>.pack`).
    func packs() throws -> [String] { try names("packs/").filter { $0.hasSuffix(".pack") } }

    /// The bytes of the file `name`; a test failure when there is none.
    func load(_ name: String, file: StaticString = #filePath, line: UInt = #line) throws -> Data {
        try XCTUnwrap(try backend.load(name, range: nil), "no file \(name)", file: file, line: line)
    }
    /// `name` made to hold `data`, whether or not it exists.
    func replace(_ name: String, _ data: Data) throws { try backend.save(name, data, ifAbsent: false) }
    /// The bytes of `name` changed by `change`.
    func damage(_ name: String, _ change: (inout [UInt8]) -> Void) throws {
        var raw = [UInt8](try load(name))
        change(&raw)
        try replace(name, Data(raw))
    }
    func remove(_ name: String) throws { try backend.remove(name) }

    /// `tilespool ARGS --store ...` (with the bucket's credentials in its environment), with a
    /// spool in a temp folder unless ARGS name one (a bucket store keeps scratch files in the
    /// spool: never the working directory's `./spool`).
    func tilespool(_ args: [String]) throws -> (Int32, String) {
        let spool = args.contains("--spool") ? [] : ["--spool", try TestScratch.folder("site-spool").path]
        return try runTool(SpoolFixture.binary, args + storeArguments + spool, env: environment)
    }

    /// The independent reader's `list` (SHA-256 to size) and `verify` output ("" when it finds
    /// nothing wrong), over the folder, or over a local copy of the bucket's files.
    func readerList(file: StaticString = #filePath, line: UInt = #line) throws -> [String: Int] {
        let (rc, out) = try runTool("/usr/bin/python3", [SpoolFixture.storeReader, "list", try localCopy()])
        XCTAssertEqual(rc, 0, out, file: file, line: line)
        var o: [String: Int] = [:]
        for l in out.split(separator: "\n") { let f = l.split(separator: " "); o[String(f[0])] = Int(f[1]) }
        return o
    }
    func readerVerify() throws -> String {
        let (rc, out) = try runTool("/usr/bin/python3", [SpoolFixture.storeReader, "verify", try localCopy()])
        return rc == 0 ? "" : out
    }

    /// The store's folder; for a bucket, a fresh folder holding a copy of each of its files
    /// (packs, index files, loose objects) under the same names.
    func localCopy() throws -> String {
        if let root { return root }
        let copy = try TestScratch.folder("s3-copy").path
        for prefix in ["packs/", "index/", "objects/"] {
            for f in try backend.list(prefix: prefix) {
                let path = copy + "/" + f.name
                try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
                try load(f.name).write(to: URL(fileURLWithPath: path))
            }
        }
        return copy
    }

    /// Bytes of the store's object files (packs, index files, loose objects): what the quota and
    /// `tilespool_store_bytes` count.
    func fileBytes() throws -> Int {
        try ["packs/", "index/", "objects/"].reduce(0) { total, prefix in total + (try backend.list(prefix: prefix).reduce(0) { $0 + $1.size }) }
    }

    /// Region `id`'s manifest lines as stored: `regions/<id>/manifest.tsv` in a folder; in a
    /// bucket, its segments joined (`StoreSite.joinedSegments`). Read from the files, not through
    /// the store's reader.
    func manifest(_ id: String) throws -> [SpoolFixture.Line] {
        if let root {
            return SpoolFixture.Line.parse(String(decoding: FileManager.default.contents(atPath: "\(root)/regions/\(id)/manifest.tsv") ?? Data(), as: UTF8.self))
        }
        let keys = try backend.list(prefix: "regions/\(id)/manifest/").map(\.name)
        return SpoolFixture.Line.parse(try StoreSite.joinedSegments(keys) { try load($0) }.text)
    }

    /// A bucket region's manifest from the keys of its `manifest/` folder (docs/s3.md, object
    /// layout): the newest compacted object `<N>.all.tsv` if there is one, then the segments
    /// numbered above N, in order, concatenated; and how many objects that took.
    static func joinedSegments(_ keys: [String], load: (String) throws -> Data) throws -> (text: String, segments: Int) {
        let all = keys.sorted()
        let number = { (k: String) in Int(k.split(separator: "/").last!.prefix(10))! }
        var picked = all.filter { !$0.hasSuffix(".all.tsv") }
        if let compacted = all.filter({ $0.hasSuffix(".all.tsv") }).max(by: { number($0) < number($1) }) {
            picked = [compacted] + picked.filter { number($0) > number(compacted) }
        }
        return (try picked.map { String(decoding: try load($0), as: UTF8.self) }.joined(), picked.count)
    }

    /// A local copy of the file `name` (for readers that take a path, such as `IndexFile`).
    func localPath(_ name: String) throws -> String {
        if let root { return root + "/" + name }
        let path = try TestScratch.folder("s3-file").path + "/" + (name as NSString).lastPathComponent
        try load(name).write(to: URL(fileURLWithPath: path))
        return path
    }
}
