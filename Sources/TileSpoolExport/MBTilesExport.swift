// One tile source of a region as MBTiles 1.3 (mapbox/mbtiles-spec `1.3/spec.md`): `metadata`,
// TMS rows, each distinct body stored once (the `map` + `images` layout behind a `tiles` view,
// which the spec allows), `PRAGMA application_id = 0x4d504258`, vector tiles gzip-compressed.
import Foundation
import TileSpoolCore
import TileSpoolIO

enum MBTilesExport {
    static let schema = """
    CREATE TABLE metadata (name TEXT NOT NULL, value TEXT);
    CREATE UNIQUE INDEX metadata_name ON metadata (name);
    CREATE TABLE images (tile_id TEXT NOT NULL PRIMARY KEY, tile_data BLOB NOT NULL);
    CREATE TABLE map (zoom_level INTEGER NOT NULL, tile_column INTEGER NOT NULL, tile_row INTEGER NOT NULL, tile_id TEXT NOT NULL);
    CREATE UNIQUE INDEX map_index ON map (zoom_level, tile_column, tile_row);
    CREATE VIEW tiles AS
      SELECT map.zoom_level AS zoom_level, map.tile_column AS tile_column, map.tile_row AS tile_row, images.tile_data AS tile_data
      FROM map JOIN images ON images.tile_id = map.tile_id;
    """

    /// A tile body as MBTiles and PMTiles readers expect it: vector tiles gzip-compressed, images
    /// as they are. A body stored as a gzip file is kept as it is, once it is known to inflate
    /// within `pack.maxDecodedBytes` (`RegionPack.checkInflates`).
    /// - Parameters:
    ///   - stored: the object's bytes as read (`RegionPack.forEachBodyInPackOrder`, `PreparePipeline`).
    ///   - key: the resource named in an error, made only then (once per body otherwise).
    /// - Throws: `ExportError` for a gzip file that does not inflate within the limit.
    static func tileBytes(_ pack: RegionPack, _ stored: Data, _ sha: String, key: @autoclosure () -> String, format: TileFormat) throws -> [UInt8] {
        let stored = [UInt8](stored)
        try pack.checkInflates(stored, sha, for: key())
        guard format == .pbf, !isGzip(stored) else { return stored }
        do { return try Zlib.compress(stored, .gzip) } catch { throw ExportError("gzip: \(error)") }
    }

    /// Writes the tiles of `parts` (one region's tile set, or several regions' sets of the same
    /// source, `Exporter.sameSource`) as one MBTiles file. `parts` go oldest first: where two hold
    /// the same z/x/y, the later one's answer is kept (its bytes, or no row when it recorded an
    /// empty tile). Each distinct body is stored once.
    /// - Returns: the result, `tiles` the rows of `map` at the end.
    /// - Throws: `ExportError` for a SQLite error or a pack that does not match its plan.
    static func write(_ parts: [(pack: RegionPack, set: TileSet)], format: TileFormat, to path: String, progress: Exporter.Progress?) throws -> ExportResult {
        let newest = parts[parts.count - 1]
        let meta = try newest.pack.sourceMetadata(newest.set.source)
        do {
            let db = try SQLiteDatabase(path: path)
            defer { db.close() }
            try db.exec("PRAGMA journal_mode = DELETE; PRAGMA synchronous = OFF; PRAGMA application_id = 1297105496;") // 0x4d504258 "MPBX"
            try db.exec("BEGIN;")
            try db.exec(schema)
            let put = try db.prepare("INSERT INTO metadata (name, value) VALUES (?, ?)")
            for (k, v) in metadata(parts, format, meta) { put.bind(1, k); put.bind(2, v); try put.run() }

            let has = try db.prepare("SELECT 1 FROM images WHERE tile_id = ?")
            let image = try db.prepare("INSERT INTO images (tile_id, tile_data) VALUES (?, ?)")
            let map = try db.prepare("INSERT OR REPLACE INTO map (zoom_level, tile_column, tile_row, tile_id) VALUES (?, ?, ?, ?)")
            let unmap = try db.prepare("DELETE FROM map WHERE zoom_level = ? AND tile_column = ? AND tile_row = ?")
            var done = 0
            let total = parts.reduce(0) { SaturatingCount.add($0, $1.set.count) }
            for (pack, set) in parts {
                // Each distinct body of a window read once and gzip-compressed on two other
                // threads while this one writes the rows of the ones before (real vector tiles
                // cost gzip more than SQLite its rows: docs/benchmarks.md).
                try pack.forEachBodyInPackOrder(of: set.source, workers: 2, prepare: { sha, key, data in
                    try tileBytes(pack, data, sha, key: key, format: format)
                }, empty: { (t, _) in
                    done += 1
                    if done % 4096 == 0 { try progress?(done, total) }
                    // Empty tiles (404/204) have no row: an MBTiles reader answers "no tile" for them
                    // (and an older region's row for the tile goes: the newer answer wins).
                    if parts.count > 1 { unmap.bind(1, t.z); unmap.bind(2, t.x); unmap.bind(3, t.tmsY); try unmap.run() }
                }) { sha, bytes, tiles in
                    has.bind(1, sha)
                    let present = try has.step()
                    has.reset()
                    if !present {
                        image.bind(1, sha)
                        image.bind(2, blob: bytes)
                        try image.run()
                    }
                    for (t, _) in tiles {
                        done += 1
                        if done % 4096 == 0 { try progress?(done, total) }
                        map.bind(1, t.z); map.bind(2, t.x); map.bind(3, t.tmsY); map.bind(4, sha)
                        try map.run()
                    }
                }
            }
            // Bodies only an older region's replaced tiles used.
            if parts.count > 1 { try db.exec("DELETE FROM images WHERE tile_id NOT IN (SELECT tile_id FROM map);") }
            let count = try db.prepare("SELECT count(*) FROM map")
            _ = try count.step()
            let tiles = Int(count.int64(0))
            count.reset()
            try db.exec("COMMIT;")
            db.close()
            try progress?(done, total)
            return ExportResult(format: .mbtiles, source: newest.set.source, path: path, bytes: Files.size(path) ?? 0, tiles: tiles, sha256: nil)
        } catch let e as ExportError {
            throw e
        } catch {
            throw ExportError("MBTiles \(path): \(error)")
        }
    }

    /// The box and tile zooms the metadata of `parts` state: the union of each part's
    /// `RegionPack.exportBounds` (`GeoBounds.union`) and of its `exportZooms`.
    static func extent(_ parts: [(pack: RegionPack, set: TileSet)]) -> (GeoBounds, ClosedRange<Int>?) {
        // A region with no planned tile in the subset exports none and states nothing: clipped to
        // a box it does not meet, its box would be the whole world (attack round 34: a subset
        // across the antimeridian then stated a centre on the other side of the world).
        let meeting = parts.filter { $0.pack.plannedTilesInSubset($0.set) > 0 }
        let parts = meeting.isEmpty ? parts : meeting
        let b = parts.count == 1 ? parts[0].pack.exportBounds : GeoBounds.union(parts.map(\.pack.exportBounds))
        let zs = parts.compactMap { $0.pack.exportZooms($0.set) }
        guard let lo = zs.map(\.lowerBound).min(), let hi = zs.map(\.upperBound).max() else { return (b, nil) }
        return (b, lo...hi)
    }

    /// The `metadata` rows (MBTiles 1.3, "Metadata"): name, format, bounds, center, minzoom,
    /// maxzoom, attribution, description, type, version, and `json` with `vector_layers`. Bounds
    /// and zooms are those of what is exported (`extent`: a subset's, or several regions' union).
    static func metadata(_ parts: [(pack: RegionPack, set: TileSet)], _ format: TileFormat, _ meta: [String: Any]) -> [(String, String)] {
        let (b, z) = extent(parts)
        let first = parts[0]
        let zooms = z ?? first.pack.request.minZoom...first.pack.request.maxZoom
        let (cx, cy) = center(b)
        let ids = parts.map(\.pack.id).joined(separator: "+")
        let source = parts[parts.count - 1].set.source
        var rows: [(String, String)] = [
            ("name", meta["name"] as? String ?? "\(ids) \(source)"),
            ("format", format.rawValue),
            ("bounds", { let s = stated(b); return [s.west, s.south, s.east, s.north].map(MBTilesExport.decimal).joined(separator: ",") }()),
            ("center", "\(decimal(cx)),\(decimal(cy)),\(zooms.lowerBound + (zooms.upperBound - zooms.lowerBound) / 2)"),
            ("minzoom", String(zooms.lowerBound)),
            ("maxzoom", String(zooms.upperBound)),
            ("type", "baselayer"),
            ("version", "1"),
            ("description", meta["description"] as? String ?? "TileSpool export of region\(parts.count > 1 ? "s" : "") \(parts.map(\.pack.id).joined(separator: ", ")), source \(source)"),
        ]
        if let a = meta["attribution"] as? String { rows.append(("attribution", a)) }
        if format == .pbf {
            let layers = meta["vector_layers"] ?? [Any]()
            rows.append(("json", String(decoding: JSONKind.serialize(["vector_layers": layers]), as: UTF8.self)))
        }
        return rows
    }

    /// The box the formats' metadata state (MBTiles `bounds`, the PMTiles header): `b`, or for a
    /// box across the antimeridian (west > east) the whole world's longitudes, -180...180, as a
    /// subset's (`ExportSubset.clipped`): readers such as MapLibre GL JS take west > east as an
    /// empty box (attack round 11: whole exports stated it, subset exports did not).
    static func stated(_ b: GeoBounds) -> GeoBounds {
        b.west <= b.east ? b : GeoBounds(west: -180, south: b.south, east: 180, north: b.north)
    }

    /// The centre of bounds (crossing the antimeridian when west > east), in degrees.
    static func center(_ b: GeoBounds) -> (Double, Double) {
        var lon = b.west <= b.east ? (b.west + b.east) / 2 : (b.west + b.east + 360) / 2
        if lon > 180 { lon -= 360 }
        return (lon, (b.south + b.north) / 2)
    }

    static func decimal(_ v: Double) -> String {
        var s = String(format: "%.7f", v)
        while s.hasSuffix("0") { s.removeLast() }
        if s.hasSuffix(".") { s.removeLast() }
        return s
    }
}
