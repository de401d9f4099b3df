// A completed region read back from the store for an export: its request, its plan, its manifest
// and the objects the manifest names. Read-only: safe beside a running daemon and `gc` (an object
// that vanishes mid-export is an error, never a silently short export).
import Foundation
import Glibc
import TileSpoolCore
import TileSpoolIO

/// Why an export could not be written. The message names the region, file or object at fault.
public struct ExportError: Error, Sendable, CustomStringConvertible {
    public var message: String
    public init(_ m: String) { message = m }
    public var description: String { message }
}

/// A region's pack as stored: its request, plan and manifest (`<store>/regions/<id>/`) and the
/// objects, in either backend (`TileStore`).
public final class RegionPack: @unchecked Sendable {
    public let id: String
    public let store: any TileStore
    public let request: RegionRequest
    public let plan: ResourcePlan
    let files: any RegionStorage
    /// The manifest as it was when the pack was opened: every read of the export goes to this
    /// version, so a refresh's swap or an append meanwhile never mixes two packs.
    let manifest: any ManifestSnapshot
    /// Names the version of the pack read (`ManifestSnapshot.version`): a status records it with
    /// each export, so a later swap is known to make the export stale.
    public var version: String { manifest.version }
    /// Manifest lines of every resource that is not a tile, by `kind<TAB>key` (a few thousand at most).
    let resources: [String: ManifestLine]
    /// The manifest's modification time in seconds since 1970: when the last object was recorded.
    public let downloadedAt: Int64
    /// The same time with its fraction (the file's mtime in nanoseconds where the store keeps
    /// them): what orders regions exported together, the newest winning (`Exporter.parts`).
    public let manifestTime: Double

    /// Reads the region's request, plan and non-tile manifest lines from `store`, and holds its
    /// manifest as it is now (`RegionStorage.manifestSnapshot`).
    /// - Throws: `ExportError` when the region or one of its files is missing or unreadable.
    public init(store: any TileStore, id: String) throws(ExportError) {
        guard RequestValidator.isValidID(id) else { throw ExportError("'\(TerminalText.inline(id))' is not a valid region id") }
        self.id = id
        self.store = store
        files = store.region(id)
        guard store.regionExists(id) else { throw ExportError("no region '\(id)' in the store \(store.location)") }
        do { request = try files.loadRequest() } catch {
            throw ExportError("region '\(id)': cannot read its request.json in \(files.location): \(error)")
        }
        guard let plan = files.loadPlan() else {
            throw ExportError("region '\(id)': no plan in \(files.location)" + (files.readFailure.map { " (\($0))" } ?? ""))
        }
        self.plan = plan
        do { manifest = try files.manifestSnapshot() } catch {
            throw ExportError("region '\(id)': cannot read its manifest in \(files.location) (\(error)); nothing was exported")
        }
        var res: [String: ManifestLine] = [:]
        do {
            try manifest.forEachLine(skippingTiles: true) { line in
                if line.kind != .tile { res["\(line.kind.rawValue)\t\(line.key)"] = line }
            }
        } catch {
            throw ExportError("region '\(id)': cannot read its manifest in \(files.location): \(error)")
        }
        resources = res
        manifestTime = files.manifestModified() ?? Date().timeIntervalSince1970
        downloadedAt = Int64(manifestTime)
    }

    /// Checks that every non-tile resource of the plan has its manifest line (with a body, or
    /// recorded as missing: a 404 sprite or glyph range), as the formats that carry the style
    /// (maplibre, site) need.
    /// - Throws: `ExportError` naming how many are absent and the first one.
    func requireResources() throws(ExportError) {
        let absent = plan.resources.filter { line($0.kind, $0.key) == nil }
        guard let first = absent.first else { return }
        throw ExportError("region '\(id)': its manifest lacks \(absent.count) of the \(plan.resources.count) resources its plan names other than tiles (first: \(first.kind.rawValue) '\(first.key)'); the pack is incomplete or was replaced while it was read: nothing was exported")
    }

    /// The manifest line of a non-tile resource, or nil when it was not recorded.
    func line(_ kind: ResourceKind, _ key: String) -> ManifestLine? { resources["\(kind.rawValue)\t\(key)"] }

    /// The part of the region to export (`--bounds`, `--min-zoom`, `--max-zoom`), or nil for all
    /// of it. `forEachTile` hands only its tiles on (and still checks the whole pack against the
    /// plan); the metadata writers state `exportBounds` and `exportZooms`.
    public var subset: ExportSubset?

    /// The box an export's metadata states: the region's (a geometry's `outline`, which crosses
    /// the antimeridian when the shape does, else the request's `bounds`), or the subset's
    /// clipped to it (`ExportSubset.clipped`).
    public var exportBounds: GeoBounds {
        let region = request.parts == nil && request.corridor == nil ? request.shape?.outline ?? request.bounds : request.bounds
        return subset.map { $0.clipped(to: region) } ?? region
    }

    /// The tile zooms an export of `set` states: the zooms the set plans, intersected with the
    /// subset's; nil when they do not meet.
    func exportZooms(_ set: TileSet) -> ClosedRange<Int>? {
        guard let z = RegionPack.zoomRange(set) else { return nil }
        guard let s = subset?.zooms else { return z }
        let lo = max(z.lowerBound, s.lowerBound), hi = min(z.upperBound, s.upperBound)
        return lo <= hi ? lo...hi : nil
    }

    /// The number of tiles of `set` the plan names that lie in the subset (all of them without
    /// one), counted from the plan's rows (`TileSetCover.plannedColumns`), without reading the manifest.
    public func plannedTilesInSubset(_ set: TileSet) -> Int {
        guard let subset else { return set.count }
        let cover = TileSetCover(set)
        var n = 0
        for (k, r) in set.rects.enumerated() {
            guard let boxes = subset.cover[r.z] else { continue }
            for b in boxes {
                let y0 = max(r.minY, b.minY), y1 = min(r.maxY, b.maxY)
                guard y0 <= y1 else { continue }
                for y in y0...y1 {
                    n += TileColumns.count(TileColumns.clip(cover.plannedColumns(rect: k, y: y), b.minX, b.maxX))
                }
            }
        }
        return n
    }

    /// Refuses a subset that holds none of the planned tiles of `sets` (outside the region, or
    /// at zooms it does not plan).
    /// - Throws: `ExportError` naming the region's box and zooms.
    public func requireSubsetTiles(_ sets: [TileSet]) throws(ExportError) {
        guard let subset else { return }
        if sets.contains(where: { plannedTilesInSubset($0) > 0 }) { return }
        let b = request.bounds, s = subset.bounds
        let zs = sets.compactMap(RegionPack.zoomRange)
        let zooms = zs.isEmpty ? "none" : "\(zs.map(\.lowerBound).min()!)-\(zs.map(\.upperBound).max()!)"
        throw ExportError("the subset --bounds \(s.west),\(s.south),\(s.east),\(s.north) at zooms \(subset.zooms.lowerBound)-\(subset.zooms.upperBound) holds no tile of region '\(id)' (its box \(b.west),\(b.south),\(b.east),\(b.north), tile zooms \(zooms)): nothing was exported")
    }

    /// The names of the region's tile sources, in plan order.
    public var sourceNames: [String] { plan.tileSets.map(\.source) }

    /// The tile set an export of one source uses: `name`, or when nil the only source with planned
    /// tiles (a source whose zooms miss the request's plans none and is no choice), else the only one.
    /// - Throws: `ExportError` naming the sources to choose from.
    public func tileSet(_ name: String?) throws(ExportError) -> TileSet {
        let names = sourceNames.joined(separator: ", ")
        if let name {
            guard let s = plan.tileSets.first(where: { $0.source == name }) else {
                throw ExportError("region '\(id)' has no tile source '\(name)' (its sources: \(names.isEmpty ? "none" : names))")
            }
            return s
        }
        let planned = plan.tileSets.filter { $0.count > 0 }
        if planned.count == 1 { return planned[0] }
        guard plan.tileSets.count == 1 else {
            if plan.tileSets.isEmpty { throw ExportError("region '\(id)' has no tile source") }
            let choices = planned.isEmpty ? plan.tileSets : planned
            throw ExportError("region '\(id)' has \(choices.count) tile sources\(choices.count < plan.tileSets.count ? " with tiles" : "") (\(choices.map(\.source).joined(separator: ", "))): choose one with --source")
        }
        return plan.tileSets[0]
    }

    /// Calls `body` with every tile line of `source` in the manifest (in the subset, when one is
    /// set), in manifest order, once per planned tile (later lines of a tile already met, e.g. recorded twice around a crash, are
    /// skipped). Then checks that every tile the plan names for `source` was met: a manifest that
    /// is missing, cut short or holds another plan's tiles fails the export instead of writing a
    /// short one.
    /// - Throws: the first error `body` throws (the rest of the manifest is then skipped), or
    ///   `ExportError` when the manifest could not be read to its end or misses planned tiles.
    func forEachTile(of source: String, _ body: (TileID, ManifestLine) throws -> Void) throws {
        guard let set = plan.tileSets.first(where: { $0.source == source }) else {
            throw ExportError("region '\(id)' has no tile source '\(source)'")
        }
        var seen = Bitmap(count: plan.indexSpace)
        var met = 0, unplanned = 0
        var failure: Error?
        let cover = PlanCover(plan)
        do {
            try manifest.forEachLine { line in
                guard failure == nil, line.kind == .tile, let (s, t) = ManifestLine.parseTileKey(line.key), s == source else { return }
                guard let i = plan.index(source: s, tile: t, cover: cover) else { unplanned += 1; return }
                guard seen.insert(i) else { return }
                met += 1
                if let subset, !subset.contains(t) { return }
                do { try body(t, line) } catch { failure = error }
            }
        } catch {
            throw ExportError("region '\(id)': cannot read its manifest in \(files.location): \(error)")
        }
        if let failure { throw failure }
        // Tiles the plan does not name are as wrong as planned ones missing: the manifest is not
        // this plan's (attack round 15: between a refresh's manifest and plan, a larger new
        // manifest with the old plan exported the old plan's tiles only, exit 0).
        if met != set.count || unplanned > 0 {
            throw ExportError("region '\(id)': its manifest holds \(met) of the \(set.count) tiles its plan names for source '\(source)'\(unplanned > 0 ? " (and \(unplanned) tiles the plan does not name)" : ""); the pack is incomplete or was replaced while it was read (check 'tilespool status \(id)' and 'tilespool verify'): nothing was exported")
        }
    }

    /// How many tile lines the pack-order readers take from the manifest at a time
    /// (`forEachTileWindow`): each window is sorted by where its objects lie and read in that
    /// order. Memory per window: a line and a location per tile (about 200 bytes), not the bodies.
    public static let packOrderWindow = 65_536

    /// `forEachTile` in windows of `window` tiles (the last one shorter), in manifest order.
    /// - Throws: as `forEachTile`.
    func forEachTileWindow(of source: String, window: Int = RegionPack.packOrderWindow,
                           _ body: ([(TileID, ManifestLine)]) throws -> Void) throws {
        var w: [(TileID, ManifestLine)] = []
        w.reserveCapacity(min(window, 1 << 16))
        try forEachTile(of: source) { (t, line) in
            w.append((t, line))
            if w.count >= window { try body(w); w.removeAll(keepingCapacity: true) }
        }
        if !w.isEmpty { try body(w) }
    }

    /// An error of `TileStore.readObjects` met by a `PreparePipeline` worker.
    struct StoreReadFailure: Error { var error: Error }

    /// The export's error for `StoreReadFailure` (an object that cannot be read), naming the
    /// regions read (`ids`); any other error as it is.
    static func exportError(_ error: Error, regions ids: [String]) -> Error {
        guard let failure = error as? StoreReadFailure else { return error }
        let why = (failure.error as? SystemError).map { "\($0.operation) \($0.path): \($0.errnoDescription)" } ?? "\(failure.error)"
        let which = ids.count == 1 ? "region '\(ids[0])'" : "one of the regions \(ids.map { "'\($0)'" }.joined(separator: ", "))"
        return ExportError("\(which): an object cannot be read (\(why)); was the region deleted or the store damaged? Run 'tilespool verify'")
    }

    /// At most this many bytes of stored bodies (by the index's lengths) go in one batch of
    /// `forEachBodyInPackOrder` (one body always may, whatever its size); a body without a
    /// known length (loose, or in the open pack) counts as `unknownLength`. Measured on an
    /// MBTiles export of 507,130 bodies of 3 KB: batches of 8 MiB took 190 MiB at peak, of
    /// 1 MiB 107 MiB, at the same speed.
    static let batchBytes = 1 << 20
    /// What a body whose length the index does not give counts for in a batch.
    static let unknownLength = 64 << 10

    /// Cuts `count` objects, taken in the order `order` gives (indices into the caller's list),
    /// into runs of at most `RegionPack.batchBytes` by `length` (at least one object each) and
    /// `RegionPack.packOrderWindow` objects.
    static func batches(_ order: [Int], length: (Int) -> Int) -> [ArraySlice<Int>] {
        var out: [ArraySlice<Int>] = []
        var start = 0, bytes = 0
        for (n, k) in order.enumerated() {
            let l = length(k)
            if n > start && (bytes + l > batchBytes || n - start >= packOrderWindow) {
                out.append(order[start..<n])
                start = n
                bytes = 0
            }
            bytes += l
        }
        if start < order.count { out.append(order[start...]) }
        return out
    }

    /// `forEachTile` in windows (`forEachTileWindow`), each window's distinct objects read once,
    /// in pack order, and prepared on `workers` other threads (`PreparePipeline`, batches of at
    /// most `batchBytes`) while this thread writes the ones before, across windows: `empty`
    /// gets each tile without a body (recorded empty), in manifest order, then `body` each
    /// object's name, its prepared value and the window's tiles that have it (a window's bodies
    /// come after its empty tiles; `body` may get a window's bodies after the next window's
    /// empty tiles). `prepare` gets an object's name, the key of its first tile in the window
    /// (for messages) and its bytes, which hash to its name. For formats that store each
    /// distinct body once (mbtiles, maplibre).
    /// - Throws: as `forEachTile`; what `prepare` or `body` throws; `ExportError` naming the
    ///   region when an object cannot be read.
    func forEachBodyInPackOrder<T: Sendable>(of source: String, window: Int = RegionPack.packOrderWindow, workers: Int = 1,
                                             prepare: @escaping @Sendable (_ sha256: String, _ key: String, Data) throws -> T,
                                             empty: (TileID, ManifestLine) throws -> Void,
                                             _ body: (String, T, [(TileID, ManifestLine)]) throws -> Void) throws {
        let pipeline = PreparePipeline<T, (names: [String], tiles: [[(TileID, ManifestLine)]])>(workers: workers, ahead: workers + 1)
        defer { pipeline.stop() }
        func take(_ tag: (names: [String], tiles: [[(TileID, ManifestLine)]]), _ values: [T]) throws {
            for (j, value) in values.enumerated() { try body(tag.names[j], value, tag.tiles[j]) }
        }
        do {
            try forEachTileWindow(of: source, window: window) { w in
                var names: [String] = [], firsts: [Int] = [] // each object once, and its first tile in the window
                var tilesOf: [String: [Int]] = [:]
                for (i, (t, line)) in w.enumerated() {
                    guard let s = line.sha256 else { try empty(t, line); continue }
                    if tilesOf[s]?.append(i) == nil { tilesOf[s] = [i]; names.append(s); firsts.append(i) }
                }
                let known = store.objectLocations(names)
                // Pack order; objects the index does not place (loose, in the open pack) last.
                let order = names.indices.sorted { a, b in
                    guard let la = known[a] else { return false }
                    guard let lb = known[b] else { return true }
                    return la < lb
                }
                for batch in RegionPack.batches(order, length: { known[$0]?.length ?? RegionPack.unknownLength }) {
                    let shas = batch.map { names[$0] }, keys = batch.map { w[firsts[$0]].1.key }
                    try pipeline.submit(ObjectBatch(store: store, sha256s: shas, locations: batch.map { known[$0] }) { k, data in
                        try prepare(shas[k], keys[k], data)
                    }, tag: (shas, shas.map { s in tilesOf[s]!.map { w[$0] } }), take)
                }
            }
            try pipeline.finish(take)
        } catch {
            throw RegionPack.exportError(error, regions: [id])
        }
    }

    /// The path of object `sha256` on the local filesystem, nil when the store is remote (S3).
    func objectPath(_ sha256: String) -> String? { store.localPath(sha256) }

    /// The export's error for an object that cannot be read.
    static func unreadable(_ error: Error, _ sha256: String, _ key: String) -> ExportError {
        let why = (error as? SystemError)?.errnoDescription ?? "\(error)"
        return ExportError("object \(sha256) of '\(key)' cannot be read (\(why)); was the region deleted or the store damaged? Run 'tilespool verify'")
    }

    /// The stored bytes of an object, as downloaded (after HTTP content decoding).
    /// - Throws: `ExportError` when the object is gone or unreadable (naming the resource).
    func storedBody(_ sha256: String, for key: String) throws(ExportError) -> [UInt8] {
        do {
            return [UInt8](try store.read(sha256, limit: 1 << 30))
        } catch {
            throw RegionPack.unreadable(error, sha256, key)
        }
    }

    /// The most bytes a body stored as a gzip file (a server that sent gzip bytes without
    /// `Content-Encoding`) may inflate to: the limit on a decoded body, `--max-object-size`
    /// (`Exporter.export` sets it). Past it the export fails (`inflateError`).
    public var maxDecodedBytes = Exporter.defaultMaxObjectSize

    /// The export's error for a gzip body that cannot be inflated: over `maxDecodedBytes`, or damaged.
    func inflateError(_ error: Error, _ sha256: String, _ key: String) -> ExportError {
        if let e = error as? ZlibError, let limit = e.exceededLimit {
            return ExportError("'\(key)' (object \(sha256)) is stored as a gzip file (its server sent gzip bytes without Content-Encoding) that inflates to more than \(limit) bytes, the limit on a decoded body (--max-object-size): nothing was exported")
        }
        if let e = error as? ExportError { return e }
        return ExportError("object \(sha256) of '\(key)' is gzip but \(error)")
    }

    /// The decoded bytes of an object, in memory: a body stored as a gzip file is inflated, at
    /// most `maxDecodedBytes`. For documents (style, TileJSON); bodies that go to a file or a
    /// database row are streamed (`writeDecoded`, `MapLibreExport.blob`).
    /// - Throws: `ExportError` when unreadable, not a valid gzip stream, or over the limit.
    func decodedBody(_ sha256: String, for key: String) throws(ExportError) -> [UInt8] {
        let raw = try storedBody(sha256, for: key)
        guard isGzip(raw) else { return raw }
        do { return try Zlib.inflate(raw, limit: maxDecodedBytes) } catch { throw inflateError(error, sha256, key) }
    }

    /// Writes the decoded bytes of an object to `out`, inflating a gzip file chunk by chunk (at
    /// most `maxDecodedBytes`): memory does not grow with the inflated size.
    /// - Returns: the bytes written.
    /// - Throws: `ExportError` when unreadable, damaged, over the limit, or not writable.
    @discardableResult
    func writeDecoded(_ sha256: String, for key: String, to out: OutputFile) throws(ExportError) -> Int {
        let raw = try storedBody(sha256, for: key)
        guard isGzip(raw) else { try out.write(raw); return raw.count }
        do {
            return try Zlib.inflate(raw, limit: maxDecodedBytes) { chunk in try out.write(chunk); return true }
        } catch {
            throw inflateError(error, sha256, key)
        }
    }

    /// The first `count` decoded bytes of an object (to sniff a format): a gzip file is inflated
    /// only that far.
    /// - Throws: `ExportError` when unreadable or damaged.
    func decodedPrefix(_ sha256: String, for key: String, count: Int) throws(ExportError) -> [UInt8] {
        let raw = try storedBody(sha256, for: key)
        guard isGzip(raw) else { return Array(raw.prefix(count)) }
        var head: [UInt8] = []
        do {
            try Zlib.inflate(raw, limit: maxDecodedBytes) { chunk in
                head.append(contentsOf: chunk.prefix(count - head.count))
                return head.count < count
            }
        } catch {
            throw inflateError(error, sha256, key)
        }
        return head
    }

    /// Checks that a body stored as a gzip file inflates, within `maxDecodedBytes`, without
    /// keeping what it inflates to: the formats that carry gzip tiles as they are (mbtiles,
    /// pmtiles) hand no client a body over the limit or a damaged one.
    /// - Throws: `ExportError` as `decodedBody`.
    func checkInflates(_ raw: [UInt8], _ sha256: String, for key: @autoclosure () -> String) throws(ExportError) {
        guard isGzip(raw) else { return }
        do { try Zlib.inflate(raw, limit: maxDecodedBytes) { _ in true } } catch { throw inflateError(error, sha256, key()) }
    }

    /// A stored JSON document (style or TileJSON) as an object; nil when not recorded.
    func jsonDocument(_ kind: ResourceKind, _ key: String) throws(ExportError) -> [String: Any]? {
        guard let l = line(kind, key), let sha = l.sha256 else { return nil }
        let bytes = try decodedBody(sha, for: key)
        return (try? JSONKind.parse(Data(bytes), maxDepth: 128)) as? [String: Any]
    }

    /// The style's source object whose manifest key is `key` (`ManifestLine.sanitizeKey` of its
    /// name), when the region is a style request.
    func styleSource(_ key: String) throws(ExportError) -> [String: Any]? {
        let sources = (try jsonDocument(.style, "style"))?["sources"] as? [String: Any]
        return sources?.first { ManifestLine.sanitizeKey($0.key) == key }?.value as? [String: Any]
    }

    /// What a tile source holds: from the style (`type: vector`), else from the template's file
    /// extension (`.pbf`/`.mvt`, `.png`, `.jpg`/`.jpeg`, `.webp`), else from its first stored tile.
    func tileFormat(of set: TileSet) throws -> TileFormat {
        // A PMTiles archive source says what its tiles are (spec v3 section 3.3: 1 MVT, 2 PNG, 3 JPEG, 4 WebP).
        switch set.archive?.tileType { case 1: return .pbf; case 2: return .png; case 3: return .jpg; case 4: return .webp; default: break }
        if let type = (try styleSource(set.source))?["type"] as? String {
            if type == "vector" { return .pbf }
        }
        let path = set.template.template.split(separator: "?").first.map(String.init) ?? ""
        switch (path as NSString).pathExtension.lowercased() {
        case "pbf", "mvt": return .pbf
        case "png": return .png
        case "jpg", "jpeg": return .jpg
        case "webp": return .webp
        default: break
        }
        var found: TileFormat?
        struct Stop: Error {}
        try forEachTile(of: set.source) { (_, line) in
            guard found == nil, let sha = line.sha256 else { return }
            found = TileFormat.sniff(try decodedPrefix(sha, for: line.key, count: 16))
        }
        return found ?? .pbf
    }

    /// The TileJSON-like facts of a source for metadata: name, attribution, description,
    /// vector_layers (from the stored TileJSON; else the style's inline source, over the keys a
    /// PMTiles archive's metadata gives, `ArchiveSource.metadata`), with every string redacted
    /// (`Redaction.redactedJSON`): exports publish them (mbtiles and pmtiles metadata, the
    /// site's TileJSON).
    /// `key` is the source's manifest key (`TileSet.source`).
    func sourceMetadata(_ key: String) throws(ExportError) -> [String: Any] {
        var doc = (try jsonDocument(.source, key)) ?? [:]
        if doc.isEmpty {
            if let text = plan.tileSets.first(where: { $0.source == key })?.archive?.metadata,
               let archive = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] {
                doc = archive
            }
            if let inline = try styleSource(key) { for (k, v) in inline { doc[k] = v } }
        }
        var out: [String: Any] = [:]
        for k in ["name", "attribution", "description", "vector_layers", "version"] { if let v = doc[k] { out[k] = v } }
        return Redaction.redactedJSON(out) as? [String: Any] ?? [:]
    }

    /// The zoom levels a tile set spans.
    static func zoomRange(_ set: TileSet) -> ClosedRange<Int>? {
        guard let lo = set.rects.map(\.z).min(), let hi = set.rects.map(\.z).max() else { return nil }
        return lo...hi
    }
}
