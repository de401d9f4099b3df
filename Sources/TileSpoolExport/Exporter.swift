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
    /// The version of the pack exported (`RegionPack.version`).
    public var pack: String?

    /// `{"format", "source"?, "path", "bytes", "tiles", "sha256"}`.
    public var jsonObject: [String: Any] {
        var o: [String: Any] = ["format": format.rawValue, "path": path, "bytes": bytes, "tiles": tiles,
                                "sha256": sha256 ?? NSNull()]
        if let source { o["source"] = source }
        if let pack { o["pack"] = pack }
        return o
    }
}

/// The folders an export must stay out of: the spool and the store (a site export with
/// `--force` over either would delete it), except the spool's own `exports/` folder.
public struct ExportGuard: Sendable {
    /// Folders an output may not be, contain, or lie inside (missing ones are skipped).
    public var protected: [String]
    /// The one folder inside them where outputs may go (`<spool>/exports`); it must be a real
    /// folder, not a symlink.
    public var exportsFolder: String?
    /// True when the output must go in `exportsFolder` (the daemon's exports).
    public var onlyInExportsFolder = false
    public init(protected: [String], exportsFolder: String?, onlyInExportsFolder: Bool = false) {
        self.protected = protected; self.exportsFolder = exportsFolder; self.onlyInExportsFolder = onlyInExportsFolder
    }
    /// No folder protected (tests, or an export with no spool or store on this host).
    public static let none = ExportGuard(protected: [], exportsFolder: nil)
    /// The guard of a spool and a disk store (an S3 store, `s3://...`, is not a path).
    public static func spool(_ spool: String, store: String) -> ExportGuard {
        ExportGuard(protected: [spool] + (store.hasPrefix("s3://") ? [] : [store]), exportsFolder: spool + "/exports")
    }
}

/// Exports a completed region to one of the `ExportFormat`s.
public enum Exporter {
    /// Called with (tiles written, tiles planned) every few thousand tiles.
    public typealias Progress = (Int, Int) throws -> Void

    /// The default limit on a decoded body, the daemon's `--max-object-size` default
    /// (`HTTPOptions.maxObjectSize`, 32 MiB): what `RegionPack.maxDecodedBytes` starts at.
    public static let defaultMaxObjectSize = HTTPOptions().maxObjectSize

    /// The file in a site folder that says TileSpool made it: only a folder holding it is ever
    /// replaced by another site export (`--force`, or the daemon's exports).
    public static let siteMarker = ".tilespool-site"

    /// Writes `pack` as `spec` to `output`.
    ///
    /// The path is used as given (made absolute against the working folder, never resolved):
    /// its folder is opened once, and everything after that is done relative to that descriptor
    /// (`Directory`). The export is written in a private work folder beside the output
    /// (`.<name>.tmp-<pid>-<n>`, mode 0700), checked against the plan, made durable, then moved
    /// into place with one `renameat2`: RENAME_NOREPLACE when nothing is there; over a regular
    /// file (files) or, for a site, swapped with the old folder (RENAME_EXCHANGE) when that
    /// folder carries `siteMarker`. Nothing else is ever replaced: not a symlink (never
    /// followed), not a folder we did not make, not another kind of file.
    /// - Parameters:
    ///   - output: the file (or, for `site`, folder) to create; its folder must exist.
    ///   - force: replace an existing `output` (else it is refused).
    ///   - guard: folders the output must stay out of (`ExportGuard.spool`).
    ///   - maxObjectSize: the most bytes a body stored as a gzip file (a server that sent gzip
    ///     bytes without Content-Encoding) may inflate to, as `--max-object-size` bounds a decoded
    ///     body at download (`RegionPack.maxDecodedBytes`); a body past it fails the export.
    /// - Returns: what was written; `pack` is the pack's version (`RegionPack.version`).
    /// - Throws: `ExportError` for a refused output, a region the format cannot hold, a pack
    ///   that does not match its plan, an object that vanished, a SQLite or file error. Nothing is
    ///   left at `output` then (an old export stays as it was), and the work folder is removed.
    /// Checks that an export of `format` may be written at `output`, as `export` does before it
    /// writes anything (a caller with a long job before the export, `tilespool get`, asks first):
    /// a file or folder name, in a folder that exists (opened once, by descriptor), outside the
    /// guarded folders, and nothing there that may not be replaced (a symlink, a folder we did
    /// not make, an existing file without `force`).
    /// - Returns: the opened folder, its path, the name in it, the absolute path.
    /// - Throws: `ExportError` saying why not.
    @discardableResult
    public static func checkOutput(_ output: String, format: ExportFormat, force: Bool, guard protection: ExportGuard) throws(ExportError)
        -> (parent: Directory, parentPath: String, name: String, path: String) {
        let path = absolute(output)
        let (parentPath, name) = Files.split(path)
        guard Directory.isEntryName(name) else { throw ExportError("\(path) cannot be an export's name (give a file or folder name)") }
        let parent: Directory
        do { parent = try Directory(path: parentPath) } catch {
            throw ExportError(error.errno == ENOENT ? "the folder \(parentPath) does not exist" : "cannot open the folder \(parentPath): \(error.errnoDescription)")
        }
        try check(parent: parent, parentPath: parentPath, name: name, path: path, guard: protection)
        try checkReplaceable(parent, name, path: path, format: format, force: force)
        return (parent, parentPath, name, path)
    }

    /// The process that owns export work folder `name` (`.<name>.tmp-<pid>-<n>`, as `export`
    /// makes them), or nil when `name` is not such a folder's name.
    public static func workFolderOwner(_ name: String) -> pid_t? {
        guard name.hasPrefix("."), let mark = name.range(of: ".tmp-", options: .backwards), mark.lowerBound > name.startIndex else { return nil }
        let parts = name[mark.upperBound...].split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 2, parts.allSatisfy({ !$0.isEmpty && $0.utf8.allSatisfy { $0 >= 0x30 && $0 <= 0x39 } }),
              let pid = pid_t(parts[0]), pid > 0, Int(parts[1]) != nil else { return nil }
        return pid
    }

    /// True when work folder `name` was left by an export whose process is gone: its name is a
    /// work folder's (`workFolderOwner`), its owner is not this process, and `kill(pid, 0)` says
    /// no such process (ESRCH). A live owner's folder (a CLI export running beside a daemon), or
    /// one whose owner cannot be told, is not abandoned.
    public static func isAbandonedWorkFolder(_ name: String) -> Bool {
        guard let pid = workFolderOwner(name) else { return false }
        return LeftBehind.ownerIsGone(pid)
    }

    /// Removes the abandoned work folders (`isAbandonedWorkFolder`) among the entries of `parent`
    /// starting with `prefix`: folders only (`Directory.removeTree`, no symlink followed). The one
    /// rule for the CLI (before an export, the folders of that output's name) and the daemon (at a
    /// start, every work folder in `<spool>/exports/`).
    /// - Returns: the names removed.
    @discardableResult
    public static func removeAbandonedWorkFolders(in parent: Directory, prefix: String = ".") -> [String] {
        var removed: [String] = []
        for entry in parent.list() where entry.hasPrefix(prefix) && parent.entryType(entry) == .directory && isAbandonedWorkFolder(entry) {
            if parent.removeTree(entry) { removed.append(entry) }
        }
        return removed
    }

    public static func export(_ pack: RegionPack, _ spec: ExportSpec, to output: String, force: Bool = false,
                              guard protection: ExportGuard = .none, maxObjectSize: Int = Exporter.defaultMaxObjectSize,
                              subset: ExportSubset? = nil, progress: Progress? = nil) throws(ExportError) -> ExportResult {
        try export([pack], spec, to: output, force: force, guard: protection, maxObjectSize: maxObjectSize, subset: subset, progress: progress)
    }

    /// The tile sets `spec` exports from `packs` (each pack's `RegionPack.tileSet(spec.source)`),
    /// oldest first: ordered by `RegionPack.manifestTime` (when the pack's manifest was last
    /// written: its last download or refresh), ties in the order given. Several packs must hold the same tile source
    /// (`sameSourceProblem`).
    /// - Throws: `ExportError` for a missing or ambiguous source, or different sources.
    public static func parts(_ packs: [RegionPack], source: String?) throws(ExportError) -> [(pack: RegionPack, set: TileSet)] {
        var list: [(pack: RegionPack, set: TileSet, order: Int)] = []
        for (i, p) in packs.enumerated() { list.append((p, try p.tileSet(source), i)) }
        if list.count > 1, let problem = sameSourceProblem(list.map { ($0.pack.id, $0.set) }) { throw ExportError(problem) }
        list.sort { ($0.pack.manifestTime, $0.order) < ($1.pack.manifestTime, $1.order) }
        return list.map { ($0.pack, $0.set) }
    }

    /// Why tile sets of several regions cannot go in one file, or nil when they hold the same
    /// source. "The same source" means the same resolved tile URL template (`TileURLTemplate`
    /// equality: the template string as tiles were fetched from it, after a style's TileJSON was
    /// read, its `{-y}`/`scheme: tms` flag, its `{ratio}` and its subdomains): two regions fetched
    /// their tiles from the same URLs, so a z/x/y means the same tile in both. Source names,
    /// request ids and areas may differ; a different query string (an API key) is another source.
    public static func sameSourceProblem(_ sets: [(id: String, set: TileSet)]) -> String? {
        guard let first = sets.first else { return nil }
        for other in sets.dropFirst() where other.set.template != first.set.template {
            return "regions '\(first.id)' and '\(other.id)' have different tile sources ('\(Redaction.redact(first.set.template.template))'\(first.set.template.tms ? " tms" : "") and '\(Redaction.redact(other.set.template.template))'\(other.set.template.tms ? " tms" : "")): only regions fetched from the same tile URL template go in one file"
        }
        return nil
    }

    /// Writes `packs` as `spec` to `output`, as `export(_:_:to:...)` writes one: several packs
    /// only for mbtiles and pmtiles, all of the same tile source (`parts`); their union, each
    /// z/x/y once, the newest pack's answer where they overlap. With `subset`, only its tiles
    /// (`ExportSubset`), and the metadata states its box and zooms.
    /// - Throws: `ExportError` as the one-pack export, and for several packs in another format,
    ///   different sources, or a subset that holds no planned tile (`RegionPack.requireSubsetTiles`).
    public static func export(_ packs: [RegionPack], _ spec: ExportSpec, to output: String, force: Bool = false,
                              guard protection: ExportGuard = .none, maxObjectSize: Int = Exporter.defaultMaxObjectSize,
                              subset: ExportSubset? = nil, progress: Progress? = nil) throws(ExportError) -> ExportResult {
        guard let pack = packs.first else { throw ExportError("no region to export") }
        if packs.count > 1 && !spec.format.isSingleSource {
            throw ExportError("several regions go in one file only as mbtiles or pmtiles (one tile source); a \(spec.format.rawValue) export takes one region")
        }
        for p in packs { p.maxDecodedBytes = maxObjectSize; p.subset = subset }
        // The counts the writer last gave, said again just before PATH changes (`place`).
        var last = (done: 0, total: 0)
        let progress: Progress? = progress.map { report in { done, total in last = (done, total); try report(done, total) } }
        let (parent, parentPath, name, path) = try checkOutput(output, format: spec.format, force: force, guard: protection)
        if case .tiles = pack.request.source, spec.format == .maplibre {
            throw ExportError("region '\(pack.id)' is a tiles request: the maplibre format needs a style (a MapLibre region names a style URL)")
        }
        var tileParts: [(pack: RegionPack, set: TileSet)] = []
        var format = TileFormat.pbf
        if spec.format.isSingleSource {
            tileParts = try parts(packs, source: spec.source)
            if subset != nil {
                var holds = false
                for part in tileParts where part.pack.plannedTilesInSubset(part.set) > 0 { holds = true }
                if !holds { try tileParts[0].pack.requireSubsetTiles([tileParts[0].set]) }
            }
            do {
                let formats = try tileParts.map { try $0.pack.tileFormat(of: $0.set) }
                if let f = formats.first(where: { $0 != formats[0] }) {
                    throw ExportError("the regions' tiles are of different formats (\(formats[0].rawValue), \(f.rawValue)): not one source")
                }
                format = formats[0]
            } catch let e as ExportError { throw e } catch { throw ExportError("\(error)") }
        } else if subset != nil {
            try pack.requireSubsetTiles(pack.plan.tileSets)
        }
        var base = name
        while base.utf8.count > 160 { base.removeLast() }
        // Work folders an export of this name left when it was killed (its process is gone).
        removeAbandonedWorkFolders(in: parent, prefix: ".\(base).tmp-")
        let workName = ".\(base).tmp-\(getpid())-\(workCounter.next())"
        let work: Directory
        do throws(SystemError) {
            try parent.makeDirectory(workName, mode: 0o700)
            work = try parent.subdirectory(workName)
        } catch {
            throw ExportError("cannot make a work folder in \(parentPath): \(error.errnoDescription)")
        }
        defer { parent.removeTree(workName) }
        // Writers take paths: this one reaches the work folder through its descriptor.
        let temp = work.procPath("out")
        var result: ExportResult
        do {
            switch spec.format {
            case .maplibre:
                result = try MapLibreExport.write(pack, to: temp, progress: progress)
            case .mbtiles:
                result = try MBTilesExport.write(tileParts, format: format, to: temp, progress: progress)
            case .pmtiles:
                result = try PMTilesExport.write(tileParts, format: format, to: temp, progress: progress)
            case .site:
                result = try SiteExport.write(pack, baseURL: spec.baseURL, finalPath: path, to: temp, progress: progress)
            }
            try syncTree(temp)
            if spec.format != .site { result.sha256 = SHA256.hex(file: temp) }
            // The caller's last word before PATH changes (its stop check: a signal during the
            // sync leaves PATH as it was; attack round 16 found it replaced).
            try progress?(last.done, last.total)
            try place(work, "out", in: parent, name, path: path, format: spec.format, force: force)
        } catch {
            let message = (error as? ExportError)?.message ?? "\(spec.format.rawValue) export of '\(pack.id)': \(error)"
            // Messages name the output, not the descriptor path the writers were given; a file
            // of a writer's own work folder (PMTiles' sorted runs) is named as such (attack round
            // 34: a full disk's message named `PATH.work/run0`, a file that never existed).
            var text = message
            if let re = try? NSRegularExpression(pattern: NSRegularExpression.escapedPattern(for: temp + ".work/") + "([^:/]+)") {
                text = re.stringByReplacingMatches(in: text, range: NSRange(text.startIndex..., in: text),
                                                   withTemplate: "$1 in the work folder beside " + NSRegularExpression.escapedTemplate(for: path))
            }
            throw ExportError(text.replacingOccurrences(of: temp, with: path))
        }
        result.path = path
        result.pack = pack.version
        return result
    }

    private static let workCounter = Directory.Counter()

    /// The default output path of `spec` under `<spool>/exports/`.
    public static func spoolOutput(spool: String, id: String, spec: ExportSpec) -> String {
        absolute("\(spool)/exports/\(spec.outputName(id: id))")
    }

    /// `p` made absolute against the working folder, lexically: `.` components and repeated
    /// slashes dropped; `..` and symlinks left for the kernel (resolving them here could lead
    /// somewhere else than the path the user gave).
    static func absolute(_ p: String) -> String {
        let full = p.hasPrefix("/") ? p : FileManager.default.currentDirectoryPath + "/" + p
        let parts = full.split(separator: "/", omittingEmptySubsequences: true).filter { $0 != "." }
        return "/" + parts.joined(separator: "/")
    }

    /// Refuses an output that is, contains or lies inside a protected folder (the spool, the
    /// store), unless it lies directly in the exports folder; with `onlyInExportsFolder`, refuses
    /// any other place. Folders are compared by device and inode, never by path: the folders
    /// walked up (`..`, by descriptor) from the output's parent as opened, against the protected
    /// folders; so a bind mount or another path to the spool is the spool. The exports folder
    /// must be a real folder: a symlink there is never written through (the daemon's exports,
    /// and a CLI export whose PATH goes through it, the default one included).
    /// - Parameter parentPath: the output's folder as given (made absolute), for the symlink check.
    static func check(parent: Directory, parentPath: String, name: String, path: String, guard g: ExportGuard) throws(ExportError) {
        guard !g.protected.isEmpty || g.onlyInExportsFolder else { return }
        var exportsID: FolderID?
        if let e = g.exportsFolder {
            var st = stat()
            let type: Files.EntryType = lstat(e, &st) == 0 ? Files.EntryType(mode: st.st_mode) : .missing
            if type == .directory {
                exportsID = FolderID(st)
            } else if g.onlyInExportsFolder || (type == .symlink && absolute(parentPath) == absolute(e)) {
                throw ExportError("\(e) is not a folder (a symlink there is never followed): exports are not written")
            }
        }
        let parentID = FolderID(parent.identity)
        if g.onlyInExportsFolder {
            guard let e = g.exportsFolder else { throw ExportError("no exports folder") }
            guard exportsID == parentID else { throw ExportError("\(path) is not in \(e)") }
        }
        let inExports = exportsID != nil && exportsID == parentID
        let ancestry = Set(parent.ancestry())
        // The output itself, when it exists as a folder (a site replaced with --force).
        let outID: FolderID? = parent.status(name).flatMap { ($0.st_mode & S_IFMT) == S_IFDIR ? FolderID($0) : nil }
        for p in g.protected {
            guard let folder = try? Directory(path: p) else { continue } // missing: nothing to protect
            let id = FolderID(folder.identity)
            let above = folder.ancestry()
            guard above.count > 1 else { continue } // the root: everything is inside it
            if (ancestry.contains(id) && !inExports) || outID == id {
                throw ExportError("\(path) lies inside \(p): an export may not be written in the spool or the store (except the spool's exports/ folder)")
            }
            if let outID, above.contains(outID) {
                throw ExportError("\(path) contains \(p): an export may not replace a folder holding the spool or the store")
            }
        }
    }

    /// Refuses what may not be replaced at `name`: anything without `force`; with it, anything
    /// but a regular file (files) or a folder carrying `siteMarker` (a site).
    static func checkReplaceable(_ parent: Directory, _ name: String, path: String, format: ExportFormat, force: Bool) throws(ExportError) {
        let existing = parent.entryType(name)
        guard existing != .missing else { return }
        if !force { throw ExportError("\(path) exists (use --force to replace it)") }
        switch (existing, format == .site) {
        case (.symlink, _):
            throw ExportError("\(path) is a symbolic link: an export never replaces or writes through one")
        case (.regular, false):
            return
        case (.directory, true):
            let marked = (try? parent.subdirectory(name))?.entryType(siteMarker) == .regular
            if !marked { throw ExportError("\(path) is a folder TileSpool did not make (no \(siteMarker) in it): it is not replaced") }
        case (.directory, false):
            throw ExportError("\(path) exists and is a folder; a \(format.rawValue) export is a file")
        case (.regular, true):
            throw ExportError("\(path) exists and is a file; a site export is a folder")
        default:
            throw ExportError("\(path) exists and is not a regular file or folder: it is not replaced")
        }
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

    /// Moves `work/temp` to `parent/name`: RENAME_NOREPLACE when nothing is there, a plain
    /// rename over a regular file, RENAME_EXCHANGE with a marked site folder (the old one then
    /// lies in `work` and goes with it); what is there is checked again just before, then the
    /// parent folder is fsynced.
    static func place(_ work: Directory, _ temp: String, in parent: Directory, _ name: String, path: String,
                      format: ExportFormat, force: Bool) throws(ExportError) {
        for _ in 0..<3 {
            try checkReplaceable(parent, name, path: path, format: format, force: force)
            let existing = parent.entryType(name)
            let mode: Directory.RenameMode = existing == .missing ? .noReplace : (existing == .directory ? .exchange : .replace)
            do {
                try work.rename(temp, to: parent, name, mode: mode)
            } catch {
                // Something appeared or went meanwhile: look again.
                if error.errno == EEXIST || error.errno == ENOENT { continue }
                throw ExportError("cannot move the export into place at \(path): \(error.errnoDescription)")
            }
            try? parent.sync()
            return
        }
        throw ExportError("\(path) keeps changing while the export is moved into place: not written")
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
