// A region as a MapLibre Native offline database, the file `addContentsOfURL` (iOS) and
// `mergeOfflineRegions` (Android) import. Schema version 6 as in maplibre-native
// `platform/default/include/mbgl/storage/offline_schema.sql` (before the `encoding` column), one
// region row, every resource under the exact URL MapLibre requests, journal_mode DELETE.
import Foundation
import TileSpoolCore
import TileSpoolIO

enum MapLibreExport {
    /// The version-6 schema: tables and indexes in MapLibre's column order (its merge SQL copies
    /// rows positionally).
    static let schema = """
    CREATE TABLE resources (
      id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
      url TEXT NOT NULL,
      kind INTEGER NOT NULL,
      expires INTEGER,
      modified INTEGER,
      etag TEXT,
      data BLOB,
      compressed INTEGER NOT NULL DEFAULT 0,
      accessed INTEGER NOT NULL,
      must_revalidate INTEGER NOT NULL DEFAULT 0,
      UNIQUE (url)
    );
    CREATE TABLE tiles (
      id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
      url_template TEXT NOT NULL,
      pixel_ratio INTEGER NOT NULL,
      z INTEGER NOT NULL,
      x INTEGER NOT NULL,
      y INTEGER NOT NULL,
      expires INTEGER,
      modified INTEGER,
      etag TEXT,
      data BLOB,
      compressed INTEGER NOT NULL DEFAULT 0,
      accessed INTEGER NOT NULL,
      must_revalidate INTEGER NOT NULL DEFAULT 0,
      UNIQUE (url_template, pixel_ratio, z, x, y)
    );
    CREATE TABLE regions (
      id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
      definition TEXT NOT NULL,
      description BLOB
    );
    CREATE TABLE region_resources (
      region_id INTEGER NOT NULL REFERENCES regions(id) ON DELETE CASCADE,
      resource_id INTEGER NOT NULL REFERENCES resources(id),
      UNIQUE (region_id, resource_id)
    );
    CREATE TABLE region_tiles (
      region_id INTEGER NOT NULL REFERENCES regions(id) ON DELETE CASCADE,
      tile_id INTEGER NOT NULL REFERENCES tiles(id),
      UNIQUE (region_id, tile_id)
    );
    CREATE INDEX resources_accessed ON resources (accessed);
    CREATE INDEX tiles_accessed ON tiles (accessed);
    CREATE INDEX region_resources_resource_id ON region_resources (resource_id);
    CREATE INDEX region_tiles_tile_id ON region_tiles (tile_id);
    """

    /// A body as MapLibre stores it: decoded, then zlib-compressed (`compressed = 1`) only where
    /// that is smaller. Returns the blob and the flag.
    static func blob(_ decoded: [UInt8]) throws -> ([UInt8], Int) {
        guard decoded.count > 64 else { return (decoded, 0) }
        let z: [UInt8]
        do { z = try Zlib.compress(decoded, .zlib) } catch { throw ExportError("zlib: \(error)") }
        return z.count < decoded.count ? (z, 1) : (decoded, 0)
    }

    /// `blob` of object `sha`. A body stored as a gzip file (a server that sent gzip bytes without
    /// Content-Encoding) is inflated chunk by chunk straight into the zlib stream, at most
    /// `pack.maxDecodedBytes`, so only compressed bytes are held; in the rare case the plain bytes
    /// are the smaller, they are inflated again (fewer than the compressed ones, already held).
    /// - Throws: `ExportError` when the object is unreadable, damaged or inflates past the limit.
    static func blob(_ pack: RegionPack, _ sha: String, _ key: String) throws -> ([UInt8], Int) {
        try blob(pack, stored: try pack.storedBody(sha, for: key), sha, key)
    }

    /// `blob` of object `sha` whose bytes, as read, are `raw` (`RegionPack.forEachBodyInPackOrder`, `PreparePipeline`).
    static func blob(_ pack: RegionPack, stored raw: [UInt8], _ sha: String, _ key: String) throws -> ([UInt8], Int) {
        guard isGzip(raw) else { return try blob(raw) }
        let z: Zlib.Deflater
        do { z = try Zlib.Deflater(.zlib) } catch { throw ExportError("zlib: \(error)") }
        let plain: Int
        do { plain = try Zlib.inflate(raw, limit: pack.maxDecodedBytes) { chunk in try z.append(chunk); return true } } catch {
            throw pack.inflateError(error, sha, key)
        }
        let compressed: [UInt8]
        do { compressed = try z.finish() } catch { throw ExportError("zlib: \(error)") }
        if plain > 64 && compressed.count < plain { return (compressed, 1) }
        return (try pack.decodedBody(sha, for: key), 0)
    }

    /// The tile URL template a PMTiles archive source's tiles are stored under (issue 31):
    /// MapLibre Native's offline database does not cache range requests, so the exported style
    /// points the source at `<archive URL>/{z}/{x}/{y}.<ext>` (before any query), a template only
    /// this pack answers; nil for a source that is not an archive.
    static func archiveTemplate(_ pack: RegionPack, _ set: TileSet) throws -> String? {
        guard let archive = set.archive else { return nil }
        let ext = try pack.tileFormat(of: set).rawValue
        let url = archive.url
        let cut = url.firstIndex { $0 == "?" || $0 == "#" } ?? url.endIndex
        return String(url[..<cut]) + "/{z}/{x}/{y}.\(ext)" + url[cut...]
    }

    /// The style with every PMTiles source (`"url": "pmtiles://..."`) pointing at the tiles the
    /// pack holds: `tiles` set to `archiveTemplate`, `url` removed, `minzoom`/`maxzoom` those
    /// of the tiles; nil when the style has no archive source (stored as it was fetched).
    static func archiveStyle(_ pack: RegionPack, _ sha: String) throws -> [UInt8]? {
        let archives = pack.plan.tileSets.filter { $0.archive != nil }
        guard !archives.isEmpty, var style = try pack.jsonDocument(.style, "style"),
              var sources = style["sources"] as? [String: Any] else { return nil }
        for set in archives {
            guard let name = sources.keys.first(where: { ManifestLine.sanitizeKey($0) == set.source }),
                  var s = sources[name] as? [String: Any], let template = try archiveTemplate(pack, set) else { continue }
            s.removeValue(forKey: "url")
            s["tiles"] = [template]
            if let z = RegionPack.zoomRange(set) { s["minzoom"] = z.lowerBound; s["maxzoom"] = z.upperBound }
            sources[name] = s
        }
        style["sources"] = sources
        return [UInt8](JSONKind.serialize(style))
    }

    /// The request the region definition is written from: the pack's, or for a subset export
    /// one with the subset's box (clipped to the region's, `RegionPack.exportBounds`, and no
    /// geometry) and its zooms intersected with the request's (`min_zoom`/`max_zoom` are map
    /// zooms; the subset's are tile zooms, which for 512 px vector tiles are the same, while at
    /// map zoom z a 256 px raster source loads tile zoom z + 1 (`WebMercator.coveringZoom`): the
    /// definition is then the closest MapLibre can say).
    static func definitionRequest(_ pack: RegionPack) -> RegionRequest {
        guard let subset = pack.subset else { return pack.request }
        var r = pack.request
        r.bounds = pack.exportBounds
        r.shape = nil
        r.minZoom = max(r.minZoom, subset.zooms.lowerBound)
        r.maxZoom = max(r.minZoom, min(r.maxZoom, subset.zooms.upperBound))
        return r
    }

    static func write(_ pack: RegionPack, to path: String, progress: Exporter.Progress?) throws -> ExportResult {
        guard case .style(let styleURL) = pack.request.source else {
            throw ExportError("region '\(pack.id)' is a tiles request: the maplibre format needs a style")
        }
        try pack.requireResources()
        do {
            let db = try SQLiteDatabase(path: path)
            defer { db.close() }
            try db.exec("PRAGMA journal_mode = DELETE; PRAGMA synchronous = OFF; PRAGMA user_version = \(MapLibreOffline.schemaVersion);")
            try db.exec("BEGIN;")
            try db.exec(schema)
            let region = try db.prepare("INSERT INTO regions (definition, description) VALUES (?, ?)")
            region.bind(1, MapLibreOffline.definition(styleURL: styleURL, request: definitionRequest(pack)))
            region.bind(2, blob: pack.request.contextJSON.map { [UInt8]($0) })
            try region.run()
            let regionID: Int64 = 1

            let now = Int64(Date().timeIntervalSince1970)
            let modified = pack.downloadedAt
            // Image sources' pictures are kind 7; everything else from `data` is a GeoJSON (kind 2).
            var imageSources = Set<String>()
            for (name, v) in ((try pack.jsonDocument(.style, "style"))?["sources"] as? [String: Any]) ?? [:] {
                if (v as? [String: Any])?["type"] as? String == "image" { imageSources.insert(name) }
            }
            let res = try db.prepare("""
                INSERT INTO resources (url, kind, expires, modified, etag, data, compressed, accessed, must_revalidate)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0)
                ON CONFLICT (url) DO UPDATE SET data = excluded.data, compressed = excluded.compressed
                RETURNING id
                """)
            let linkRes = try db.prepare("INSERT OR IGNORE INTO region_resources (region_id, resource_id) VALUES (?, ?)")
            for r in pack.plan.resources {
                // A resource the server did not have (404 sprite or glyph range) is a row with NULL data.
                guard let line = pack.line(r.kind, r.key) else { continue }
                var data: [UInt8]?, compressed = 0
                if let sha = line.sha256 {
                    if r.kind == .style, let rewritten = try archiveStyle(pack, sha) {
                        (data, compressed) = try blob(rewritten)
                    } else {
                        (data, compressed) = try blob(pack, sha, r.key)
                    }
                }
                res.bind(1, r.url)
                res.bind(2, MapLibreOffline.kind(of: r, imageSources: imageSources))
                res.bind(3, MapLibreOffline.farFutureExpires)
                // When this resource was fetched (or last revalidated) and its ETag, where known.
                res.bind(4, MapLibreOffline.seconds(line.freshness.fetched) ?? modified)
                res.bind(5, line.freshness.etag)
                res.bind(6, blob: data)
                res.bind(7, compressed)
                res.bind(8, now)
                guard try res.step() else { throw SQLiteError(message: "no id returned for \(Redaction.redact(r.url))") }
                let id = res.int64(0)
                res.reset()
                linkRes.bind(1, regionID); linkRes.bind(2, id)
                try linkRes.run()
            }

            let tile = try db.prepare("""
                INSERT INTO tiles (url_template, pixel_ratio, z, x, y, expires, modified, etag, data, compressed, accessed, must_revalidate)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)
                ON CONFLICT (url_template, pixel_ratio, z, x, y) DO UPDATE SET data = excluded.data, compressed = excluded.compressed
                RETURNING id
                """)
            let linkTile = try db.prepare("INSERT OR IGNORE INTO region_tiles (region_id, tile_id) VALUES (?, ?)")
            let total = pack.plan.tileCount
            var done = 0
            for set in pack.plan.tileSets {
                let template = try archiveTemplate(pack, set) ?? set.template.template
                let ratio = MapLibreOffline.tilePixelRatio(template: template, pixelRatio: pack.request.pixelRatio)
                let tms = set.template.tms
                // A tile row; `data` nil for an empty tile (404/204): MapLibre then knows it has none.
                func row(_ t: TileID, _ line: ManifestLine, _ data: [UInt8]?, _ compressed: Int) throws {
                    tile.bind(1, template); tile.bind(2, ratio)
                    tile.bind(3, t.z); tile.bind(4, t.x); tile.bind(5, MapLibreOffline.tileRowY(t, tms: tms))
                    tile.bind(6, MapLibreOffline.farFutureExpires); tile.bind(7, MapLibreOffline.seconds(line.freshness.fetched) ?? modified)
                    tile.bind(8, line.freshness.etag)
                    tile.bind(9, blob: data); tile.bind(10, compressed); tile.bind(11, now)
                    guard try tile.step() else { throw SQLiteError(message: "no id returned for tile \(t)") }
                    let id = tile.int64(0)
                    tile.reset()
                    linkTile.bind(1, regionID); linkTile.bind(2, id)
                    try linkTile.run()
                    done += 1
                    if done % 4096 == 0 { try progress?(done, total) }
                }
                // Each distinct body of a window read and zlib-compressed once, on two other threads.
                try pack.forEachBodyInPackOrder(of: set.source, workers: 2, prepare: { sha, key, data in
                    try blob(pack, stored: [UInt8](data), sha, key)
                }, empty: { t, line in try row(t, line, nil, 0) }) { _, blob, tiles in
                    for (t, line) in tiles { try row(t, line, blob.0, blob.1) }
                }
            }
            try db.exec("COMMIT;")
            db.close()
            try progress?(done, total)
            return ExportResult(format: .maplibre, source: nil, path: path, bytes: Files.size(path) ?? 0, tiles: done, sha256: nil)
        } catch let e as ExportError {
            throw e
        } catch {
            throw ExportError("MapLibre database \(path): \(error)")
        }
    }
}
