// The one entry point of every export: checks, a temp file or folder beside the output, the format's
// writer, fsync, then one rename into place, so a reader never sees half an export.
import CCrypto
import CLinux
import Foundation
import Glibc
import TileSpoolCore
import TileSpoolIO

/// What an export wrote, as reported by `tilespool export` and in a status's `exports` array.
public struct ExportResult: Sendable, Equatable {
    public var format: ExportFormat
    public var source: String?
    /// The output's absolute path.
    public var path: String
    /// Bytes written: the file's size, or for a site the sum of its files' sizes (hard links counted).
    public var bytes: Int
    /// Tiles in the export (empty tiles included where the format records them).
    public var tiles: Int
    /// The SHA-256 of the file, in hex; nil for a site (a folder).
    public var sha256: String?

    /// `{"format", "source"?, "path", "bytes", "tiles", "sha256"}`.
    public var jsonObject: [String: Any] {
        var o: [String: Any] = ["format": format.rawValue, "path": path, "bytes": bytes, "tiles": tiles,
                                "sha256": sha256 ?? NSNull()]
        if let source { o["source"] = source }
        return o
    }
}

/// Exports a completed region to one of the `ExportFormat`s.
public enum Exporter {
    /// Called with (tiles written, tiles planned) every few thousand tiles.
    public typealias Progress = (Int, Int) -> Void

    /// Writes `pack` as `spec` to `output`.
    /// - Parameters:
    ///   - output: the file (or, for `site`, folder) to create; its parent folder must exist.
    ///   - force: replace an existing `output` (else it is refused).
    /// - Returns: what was written.
    /// - Throws: `ExportError` for a refused output, a region the format cannot hold, an object
    ///   that vanished, a SQLite or file error. Nothing is left at `output` then, and the temp
    ///   file or folder is removed.
    public static func export(_ pack: RegionPack, _ spec: ExportSpec, to output: String, force: Bool = false,
                              progress: Progress? = nil) throws(ExportError) -> ExportResult {
        let path = absolute(output)
        let parent = (path as NSString).deletingLastPathComponent
        let name = (path as NSString).lastPathComponent
        guard Files.entryType(parent) == .directory else { throw ExportError("the folder \(parent) does not exist") }
        let existing = Files.entryType(path)
        if existing != .missing && !force { throw ExportError("\(path) exists (use --force to replace it)") }
        if existing != .missing && (spec.format == .site) != (existing == .directory) {
            throw ExportError("\(path) exists and is a \(existing == .directory ? "folder" : "file"); a \(spec.format.rawValue) export is a \(spec.format == .site ? "folder" : "file")")
        }
        if case .tiles = pack.request.source, spec.format == .maplibre {
            throw ExportError("region '\(pack.id)' is a tiles request: the maplibre format needs a style (a MapLibre region names a style URL)")
        }
        let temp = "\(parent)/.\(name).tmp-\(getpid())"
        Files.removeTree(temp)
        var result: ExportResult
        do {
            switch spec.format {
            case .maplibre:
                result = try MapLibreExport.write(pack, to: temp, progress: progress)
            case .mbtiles:
                result = try MBTilesExport.write(pack, source: spec.source, to: temp, progress: progress)
            case .pmtiles:
                result = try PMTilesExport.write(pack, source: spec.source, to: temp, progress: progress)
            case .site:
                result = try SiteExport.write(pack, baseURL: spec.baseURL, finalPath: path, to: temp, progress: progress)
            }
            try syncTree(temp)
            if spec.format != .site { result.sha256 = SHA256.hex(file: temp) }
            try place(temp, at: path, folder: spec.format == .site)
        } catch {
            Files.removeTree(temp)
            throw (error as? ExportError) ?? ExportError("\(spec.format.rawValue) export of '\(pack.id)': \(error)")
        }
        result.path = path
        return result
    }

    /// The default output path of `spec` under `<spool>/exports/`.
    public static func spoolOutput(spool: String, id: String, spec: ExportSpec) -> String {
        absolute("\(spool)/exports/\(spec.outputName(id: id))")
    }

    static func absolute(_ p: String) -> String {
        if p.hasPrefix("/") { return (p as NSString).standardizingPath }
        return ((FileManager.default.currentDirectoryPath + "/" + p) as NSString).standardizingPath
    }

    /// Makes the export durable: fsync of the file, or syncfs for a site folder.
    static func syncTree(_ path: String) throws(ExportError) {
        func syncOne(_ p: String, dir: Bool) throws(ExportError) {
            let fd = Glibc.open(p, (dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW)
            guard fd >= 0 else { throw ExportError("cannot open \(p) to sync it: \(SystemError("open", p).errnoDescription)") }
            defer { Glibc.close(fd) }
            if fsync(fd) != 0 { throw ExportError("fsync \(p): \(SystemError("fsync", p).errnoDescription)") }
        }
        if Files.entryType(path) != .directory { try syncOne(path, dir: false); return }
        // A site: thousands of files and hard links; one syncfs flushes them and their folders.
        do { try Files.syncFilesystem(path) } catch { throw ExportError("cannot sync \(path): \(error.errnoDescription)") }
    }

    /// Renames `temp` to `path` (a file replaces atomically; a folder replaces an old one by moving
    /// it aside first), then fsyncs the parent folder.
    static func place(_ temp: String, at path: String, folder: Bool) throws(ExportError) {
        let parent = (path as NSString).deletingLastPathComponent
        var aside: String?
        if folder && Files.entryType(path) == .directory {
            let a = "\(parent)/.\((path as NSString).lastPathComponent).old-\(getpid())"
            Files.removeTree(a)
            guard Glibc.rename(path, a) == 0 else { throw ExportError("cannot move the old \(path) aside: \(SystemError("rename", path).errnoDescription)") }
            aside = a
        }
        guard Glibc.rename(temp, path) == 0 else {
            let e = SystemError("rename", path)
            if let aside { Glibc.rename(aside, path) }
            throw ExportError("cannot rename the export into place at \(path): \(e.errnoDescription)")
        }
        if let aside { Files.removeTree(aside) }
        let fd = Glibc.open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if fd >= 0 { fsync(fd); Glibc.close(fd) }
    }
}

/// A file written sequentially through a 1 MiB buffer.
final class OutputFile {
    let path: String
    private let fd: Int32
    private var buffer: [UInt8] = []
    private(set) var written: UInt64 = 0

    init(path: String) throws(ExportError) {
        self.path = path
        let fd = Glibc.open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o644)
        guard fd >= 0 else { throw ExportError("cannot create \(path): \(SystemError("open", path).errnoDescription)") }
        self.fd = fd
        buffer.reserveCapacity(1 << 20)
    }

    deinit { Glibc.close(fd) }

    func write<C: Collection>(_ bytes: C) throws(ExportError) where C.Element == UInt8 {
        buffer.append(contentsOf: bytes)
        written += UInt64(bytes.count)
        if buffer.count >= 1 << 20 { try flush() }
    }

    func flush() throws(ExportError) {
        guard !buffer.isEmpty else { return }
        do { try Files.writeAll(fd, Data(buffer), path: path) } catch { throw ExportError("cannot write \(path): \(error.errnoDescription)") }
        buffer.removeAll(keepingCapacity: true)
    }

    /// Writes `bytes` at `offset` (after the buffered bytes are flushed), leaving the end alone.
    /// The corresponding C function is `pwrite`.
    func write(_ bytes: [UInt8], at offset: UInt64) throws(ExportError) {
        try flush()
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.pwrite(fd, $0.baseAddress! + done, $0.count - done, off_t(offset) + off_t(done)) }
            if n < 0 { if errno == EINTR { continue }; throw ExportError("cannot write \(path): \(SystemError("pwrite", path).errnoDescription)") }
            done += n
        }
    }

    /// Appends the whole file at `other`: `copy_file_range(2)` (the kernel copies, or shares
    /// extents where the filesystem can), falling back to 1 MiB reads and writes.
    func append(fileAt other: String) throws(ExportError) {
        try flush()
        let src = Glibc.open(other, O_RDONLY | O_CLOEXEC)
        guard src >= 0 else { throw ExportError("cannot open \(other): \(SystemError("open", other).errnoDescription)") }
        defer { Glibc.close(src) }
        while true {
            let n = CLinux.tilespool_copy_file_range(src, fd, 1 << 30)
            if n > 0 { written += UInt64(n); continue }
            if n == 0 { return }
            if errno == EINTR { continue }
            if errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP { break } // plain copy below
            throw ExportError("cannot copy \(other) into \(path): \(SystemError("copy_file_range", path).errnoDescription)")
        }
        var block = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let n = block.withUnsafeMutableBytes { Glibc.read(src, $0.baseAddress, $0.count) }
            if n < 0 { if errno == EINTR { continue }; throw ExportError("cannot read \(other): \(SystemError("read", other).errnoDescription)") }
            if n == 0 { break }
            try write(block[0..<n])
            try flush()
        }
    }
}
