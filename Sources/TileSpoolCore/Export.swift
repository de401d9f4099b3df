import Foundation

/// The formats a completed region can be exported to (docs/export.md).
public enum ExportFormat: String, Sendable, CaseIterable, Codable {
    /// A MapLibre Native offline database (SQLite, schema version 6), for `addContentsOfURL` /
    /// `mergeOfflineRegions`.
    case maplibre
    /// MBTiles 1.3 (SQLite) of one tile source.
    case mbtiles
    /// PMTiles v3 of one tile source.
    case pmtiles
    /// A folder for a static web server: style, TileJSON, tiles, sprites and glyphs.
    case site

    /// The file name extension of the export written under `<spool>/exports/`: `.db`, `.mbtiles`,
    /// `.pmtiles`, or `.site` for a site folder (none ends another: names stay unambiguous).
    public var fileExtension: String {
        switch self {
        case .maplibre: return ".db"
        case .mbtiles: return ".mbtiles"
        case .pmtiles: return ".pmtiles"
        case .site: return ".site"
        }
    }

    /// True for the formats that hold one tile source (`--source` / `source` picks it).
    public var isSingleSource: Bool { self == .mbtiles || self == .pmtiles }
}

/// One entry of a request's `exports` array: `{"format": "pmtiles", "source": "openmaptiles"}`.
public struct ExportSpec: Sendable, Equatable {
    public var format: ExportFormat
    /// The tile source (style source id, or `tiles0`, `tiles1`, ... for a `tiles` request); nil
    /// means the region's only tile source.
    public var source: String?
    /// `--base-url` of a site export (absolute URLs in the site's style); nil for relative paths.
    public var baseURL: String?
    public init(format: ExportFormat, source: String? = nil, baseURL: String? = nil) {
        self.format = format; self.source = source; self.baseURL = baseURL
    }

    /// The file or folder name under `<spool>/exports/`: `<id><ext>` (`<id>.pmtiles`,
    /// `<id>.site` for a site folder), with the source for a single-source format when one is
    /// named (`<id>+<source>.pmtiles`). No two exports share a name: a region id never holds
    /// `+`, so the id is what comes before the first `+`; no extension ends another, so the
    /// extension is unambiguous too (`<id>.<source>.pmtiles` would be region `t` with source
    /// `tiles0` and region `t.tiles0` alike).
    public func outputName(id: String) -> String {
        if format.isSingleSource, let source { return "\(id)+\(source)\(format.fileExtension)" }
        return id + format.fileExtension
    }

    /// Why `name` cannot name a tile source in an export (it goes into a file name:
    /// `<id>+<source>.<ext>`), or nil: it must be 1 to 200 bytes without `/`, NUL or another
    /// control character, and not `.` or `..`.
    public static func sourceProblem(_ name: String) -> String? {
        guard !name.isEmpty, name.utf8.count <= 200, !name.contains("/"), name != ".", name != "..",
              !name.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }) else {
            return "'\(name.prefix(80))' is not a source name (1 to 200 bytes, no '/' or control character)"
        }
        return nil
    }

    /// Why `url` cannot be a site export's base URL, or nil: it must be an absolute http or https
    /// URL without credentials (they would be written into the published style.json), without a
    /// query or fragment (the site's URLs are made by appending paths), and its path must be
    /// expressible in an nginx `location` (no control characters: `NginxConfig.quoted`).
    public static func baseURLProblem(_ url: String) -> String? {
        if let p = RequestValidator.urlProblem(url) { return "'\(Redaction.redact(url))' \(p)" }
        guard let u = URLComponents(string: url) else { return "is not a valid URL" }
        if u.user != nil || u.password != nil { return "must not hold credentials (user:password@): they would be published in the site's style.json" }
        if u.query != nil || u.fragment != nil { return "must not have a query or a fragment: the site's URLs are made by appending paths to it" }
        do { _ = try NginxConfig.quoted(u.path, variablesExpanded: false) } catch { return "its path cannot be written in an nginx configuration: \(error.message)" }
        return nil
    }

    /// The JSON object written back in requests and status files.
    public var jsonObject: [String: Any] {
        var o: [String: Any] = ["format": format.rawValue]
        if let source { o["source"] = source }
        if let baseURL { o["baseURL"] = baseURL }
        return o
    }

    /// Parses a request's `exports` value.
    /// - Returns: the specs, or an error message naming the index and field at fault.
    public static func parseList(_ v: Any) -> Result<[ExportSpec], ExportSpecError> {
        guard let arr = v as? [Any] else { return .failure(ExportSpecError("exports: must be an array of objects")) }
        if arr.count > 16 { return .failure(ExportSpecError("exports: at most 16 entries, not \(arr.count)")) }
        var out: [ExportSpec] = []
        for (i, e) in arr.enumerated() {
            guard let o = e as? [String: Any] else { return .failure(ExportSpecError("exports[\(i)]: must be an object")) }
            for k in o.keys where !["format", "source", "baseURL"].contains(k) {
                return .failure(ExportSpecError("exports[\(i)]: unknown field '\(k)' (known: format, source, baseURL)"))
            }
            let names = ExportFormat.allCases.map(\.rawValue).joined(separator: ", ")
            guard let f = o["format"] as? String, let format = ExportFormat(rawValue: f) else {
                return .failure(ExportSpecError("exports[\(i)].format: must be one of \(names)"))
            }
            var spec = ExportSpec(format: format)
            // `null` is the default, as for every field of a request (source: the only one;
            // baseURL: none).
            if let s = o["source"], !(s is NSNull) {
                guard let s = s as? String, ExportSpec.sourceProblem(s) == nil else {
                    return .failure(ExportSpecError("exports[\(i)].source: must be a source name (a non-empty string without '/' or control characters)"))
                }
                spec.source = s
            }
            if let b = o["baseURL"], !(b is NSNull) {
                guard let b = b as? String else { return .failure(ExportSpecError("exports[\(i)].baseURL: must be an absolute http or https URL")) }
                if let p = ExportSpec.baseURLProblem(b) { return .failure(ExportSpecError("exports[\(i)].baseURL: \(p)")) }
                spec.baseURL = b
            }
            if out.contains(where: { $0.outputName(id: "x") == spec.outputName(id: "x") }) {
                return .failure(ExportSpecError("exports[\(i)]: the same export is named twice"))
            }
            out.append(spec)
        }
        return .success(out)
    }
}

/// A problem with a request's `exports` field (a message naming the field).
public struct ExportSpecError: Error, Sendable, Equatable {
    public var message: String
    public init(_ m: String) { message = m }
}

/// The encoding of a tile body, from its first bytes.
public enum TileFormat: String, Sendable {
    /// Mapbox Vector Tile (protobuf), possibly gzip-compressed.
    case pbf
    case png
    case jpg
    case webp

    /// The format of `bytes`: PNG, JPEG and WebP by their magic numbers, anything else is taken as
    /// a vector tile (gzip or raw protobuf). Reference: PNG spec 5.2, JFIF SOI marker, RIFF/WEBP.
    public static func sniff(_ bytes: [UInt8]) -> TileFormat {
        if bytes.starts(with: [0x89, 0x50, 0x4E, 0x47]) { return .png }
        if bytes.starts(with: [0xFF, 0xD8, 0xFF]) { return .jpg }
        if bytes.count >= 12 && bytes.starts(with: [0x52, 0x49, 0x46, 0x46]) && Array(bytes[8..<12]) == [0x57, 0x45, 0x42, 0x50] {
            return .webp
        }
        return .pbf
    }

    /// The MIME type a web server should send.
    public var contentType: String {
        switch self {
        case .pbf: return "application/x-protobuf"
        case .png: return "image/png"
        case .jpg: return "image/jpeg"
        case .webp: return "image/webp"
        }
    }
}

/// True when `bytes` start with the gzip magic number `1f 8b` (RFC 1952, 2.3.1).
public func isGzip<C: Collection>(_ bytes: C) -> Bool where C.Element == UInt8 {
    var it = bytes.makeIterator()
    return it.next() == 0x1F && it.next() == 0x8B
}

/// What MapLibre Native's offline database needs to know of a region, as pure functions.
/// References: maplibre-native `platform/default/include/mbgl/storage/offline_schema.sql`,
/// `platform/default/src/mbgl/storage/offline.cpp` (`encodeOfflineRegionDefinition`),
/// `src/mbgl/storage/resource.cpp` (`Resource::tile`, kinds).
public enum MapLibreOffline {
    /// `PRAGMA user_version` of the schema written (accepted by every MapLibre Native release).
    public static let schemaVersion = 6
    /// `expires` written on every row: 9999-12-31T23:59:59Z in seconds, so clients never revalidate.
    public static let farFutureExpires: Int64 = 253_402_300_799

    /// A time in seconds (a manifest line's `fetched`) as whole seconds for the database, nil when
    /// unknown or not a whole number of seconds an `Int64` holds (never a trap: `Int64(exactly:)`).
    public static func seconds(_ t: Double?) -> Int64? {
        guard let t, t.isFinite else { return nil }
        return Int64(exactly: t.rounded(.down))
    }

    /// The `resources.kind` of a planned resource: 1 style, 2 source (TileJSON, GeoJSON data),
    /// 4 glyphs, 5 sprite image, 6 sprite JSON, 7 image (an image source's picture).
    public static func kind(of r: PlannedResource, imageSources: Set<String>) -> Int {
        switch r.kind {
        case .style: return 1
        case .source: return 2
        case .glyphs: return 4
        case .sprite: return r.key.hasSuffix(".png") ? 5 : 6
        case .data: return imageSources.contains(r.key) ? 7 : 2
        case .tile: return 3
        }
    }

    /// The `tiles.pixel_ratio` MapLibre uses for a template: 2 when it has `{ratio}` and the
    /// ratio is above 1, else 1 (`Resource::tile`).
    public static func tilePixelRatio(template: String, pixelRatio: Double) -> Int {
        template.contains("{ratio}") && pixelRatio > 1 ? 2 : 1
    }

    /// The `tiles.y` MapLibre stores for XYZ tile `t`: the TMS row for a `scheme: tms` source.
    public static func tileRowY(_ t: TileID, tms: Bool) -> Int { tms ? t.tmsY : t.y }

    /// The region definition JSON exactly as MapLibre writes it: `style_url`, `bounds`
    /// `[south, west, north, east]` (or `geometry`), `min_zoom`, `max_zoom`, `pixel_ratio`,
    /// `include_ideographs`. Every number is written with a fraction (`14.0`): MapLibre refuses
    /// integer literals there ("Malformed offline region definition").
    public static func definition(styleURL: String, request: RegionRequest) -> String {
        var s = "{\"style_url\":" + jsonString(styleURL)
        if let shape = request.shape {
            let polys = shape.polygons.map { poly in
                "[" + poly.map { ring in
                    "[" + ring.map { p in "[" + p.map(number).joined(separator: ",") + "]" }.joined(separator: ",") + "]"
                }.joined(separator: ",") + "]"
            }
            s += ",\"geometry\":{\"type\":\"MultiPolygon\",\"coordinates\":[" + polys.joined(separator: ",") + "]}"
        } else {
            let b = request.bounds
            s += ",\"bounds\":[" + [b.south, b.west, b.north, b.east].map(number).joined(separator: ",") + "]"
        }
        s += ",\"min_zoom\":" + number(Double(request.minZoom)) + ",\"max_zoom\":" + number(Double(request.maxZoom))
        s += ",\"pixel_ratio\":" + number(request.pixelRatio)
        s += ",\"include_ideographs\":" + (request.includeIdeographs ? "true" : "false") + "}"
        return s
    }

    /// A JSON number that always has a fraction or an exponent: `14.0`, `7.4246`, `1e-05`.
    public static func number(_ v: Double) -> String {
        guard v.isFinite else { return "0.0" }
        if v == v.rounded() && abs(v) < 1e15 { return String(Int64(v)) + ".0" }
        let d = "\(v)"
        return d.contains(".") || d.contains("e") ? d : d + ".0"
    }

    static func jsonString(_ s: String) -> String {
        String(decoding: JSONKind.serialize(s), as: UTF8.self)
    }
}

/// PMTiles v3 encoding, pure. Reference: protomaps/PMTiles `spec/v3/spec.md` (header, 3;
/// directories, 4; TileId, 4.1).
public enum PMTiles {
    /// A directory entry: a run of `runLength` tiles from `tileID` sharing one body at `offset`
    /// (bytes from the start of the tile data section), `length` bytes; `runLength` 0 points to a
    /// leaf directory (offset and length in the leaf section).
    public struct Entry: Sendable, Equatable {
        public var tileID: UInt64
        public var offset: UInt64
        public var length: UInt32
        public var runLength: UInt32
        public init(tileID: UInt64, offset: UInt64, length: UInt32, runLength: UInt32) {
            self.tileID = tileID; self.offset = offset; self.length = length; self.runLength = runLength
        }
    }

    /// Compression enum of the header: 1 none, 2 gzip.
    public enum Compression: UInt8, Sendable { case none = 1, gzip = 2 }

    /// Tile type enum of the header: 1 MVT, 2 PNG, 3 JPEG, 4 WebP.
    public static func tileType(_ f: TileFormat) -> UInt8 {
        switch f { case .pbf: return 1; case .png: return 2; case .jpg: return 3; case .webp: return 4 }
    }

    /// The fixed 127-byte header.
    public struct Header: Sendable, Equatable {
        public var rootOffset: UInt64 = 127, rootLength: UInt64 = 0
        public var metadataOffset: UInt64 = 0, metadataLength: UInt64 = 0
        public var leafOffset: UInt64 = 0, leafLength: UInt64 = 0
        public var dataOffset: UInt64 = 0, dataLength: UInt64 = 0
        public var addressedTiles: UInt64 = 0, tileEntries: UInt64 = 0, tileContents: UInt64 = 0
        public var clustered = true
        public var internalCompression = Compression.gzip
        public var tileCompression = Compression.none
        public var tileType: UInt8 = 0
        public var minZoom: UInt8 = 0, maxZoom: UInt8 = 0
        /// Bounds and center in degrees (stored as int32 degrees x 10^7).
        public var minLon = -180.0, minLat = -85.0, maxLon = 180.0, maxLat = 85.0
        public var centerZoom: UInt8 = 0
        public var centerLon = 0.0, centerLat = 0.0
        public init() {}

        /// The header's 127 little-endian bytes.
        public var bytes: [UInt8] {
            var b = Array("PMTiles".utf8) + [3]
            func u64(_ v: UInt64) { for i in 0..<8 { b.append(UInt8((v >> (8 * UInt64(i))) & 0xFF)) } }
            func i32deg(_ d: Double) {
                let v = UInt32(bitPattern: Int32(max(-2_147_483_648, min(2_147_483_647, (d * 10_000_000).rounded()))))
                for i in 0..<4 { b.append(UInt8((v >> (8 * UInt32(i))) & 0xFF)) }
            }
            for v in [rootOffset, rootLength, metadataOffset, metadataLength, leafOffset, leafLength, dataOffset, dataLength,
                      addressedTiles, tileEntries, tileContents] { u64(v) }
            b += [clustered ? 1 : 0, internalCompression.rawValue, tileCompression.rawValue, tileType, minZoom, maxZoom]
            i32deg(minLon); i32deg(minLat); i32deg(maxLon); i32deg(maxLat)
            b.append(centerZoom)
            i32deg(centerLon); i32deg(centerLat)
            return b
        }
    }

    /// The TileId of tile z/x/y: the tiles of all lower zooms, `(4^z - 1) / 3`, plus the position
    /// of (x, y) on the Hilbert curve of zoom z.
    public static func tileID(_ t: TileID) -> UInt64 {
        var acc: UInt64 = ((UInt64(1) << (2 * UInt64(t.z))) - 1) / 3
        var x = UInt64(t.x), y = UInt64(t.y)
        var a = t.z - 1
        while a >= 0 {
            let s = UInt64(1) << UInt64(a)
            let rx: UInt64 = (x & s) != 0 ? 1 : 0
            let ry: UInt64 = (y & s) != 0 ? 1 : 0
            acc += ((3 * rx) ^ ry) * s * s
            // Rotate the quadrant (the Hilbert curve's reflection step).
            if ry == 0 {
                if rx == 1 { x = s - 1 - (x & (s - 1)); y = s - 1 - (y & (s - 1)) } else { x &= s - 1; y &= s - 1 }
                swap(&x, &y)
            } else {
                x &= s - 1; y &= s - 1
            }
            a -= 1
        }
        return acc
    }

    /// Appends `v` as an unsigned LEB128 varint.
    public static func appendVarint(_ v: UInt64, to out: inout [UInt8]) {
        var v = v
        while v >= 0x80 { out.append(UInt8(v & 0x7F) | 0x80); v >>= 7 }
        out.append(UInt8(v))
    }

    /// A directory's bytes before internal compression: the entry count, then the delta-coded
    /// TileIds, run lengths, lengths and offsets (0 = right after the previous entry, else
    /// offset + 1), each as varints in columns. `entries` must be sorted by TileId.
    public static func serializeDirectory(_ entries: [Entry]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(entries.count * 6 + 8)
        appendVarint(UInt64(entries.count), to: &out)
        var last: UInt64 = 0
        for e in entries { appendVarint(e.tileID - last, to: &out); last = e.tileID }
        for e in entries { appendVarint(UInt64(e.runLength), to: &out) }
        for e in entries { appendVarint(UInt64(e.length), to: &out) }
        for (i, e) in entries.enumerated() {
            if i > 0 && e.offset == entries[i - 1].offset + UInt64(entries[i - 1].length) {
                appendVarint(0, to: &out)
            } else {
                appendVarint(e.offset + 1, to: &out)
            }
        }
        return out
    }

    /// Header plus root directory must fit in the first 16,384 bytes (spec 2).
    public static let rootLimit = 16_384
}

/// Which of a region's exports must be (re)written: a region's exports are a function of its
/// pack, so after a download, a refresh's swap, a request that adds an export, or a restart
/// after any of them was cut short, every export that is missing or stale is written again, and
/// only those (docs/export.md, "From the spool"). Pure: the caller says whether an output exists.
public enum ExportReconcile {
    /// One export entry of a status (`RegionStatus.exports`), read back.
    public struct Entry: Sendable, Equatable {
        public var spec: ExportSpec
        /// `writing`, `written` or `failed`.
        public var state: String
        /// The pack version it was written from (`ExportResult.pack`), if written.
        public var pack: String?
        public var path: String?
        /// Reads an entry written by the daemon; nil when it is not one. The request's own entry
        /// is its `spec` object (`source` at the top is the source exported, which the request
        /// may leave to the default); an entry without `spec` is read from its top-level fields.
        public init?(_ o: [String: Any]) {
            let s = o["spec"] as? [String: Any] ?? o
            guard let f = s["format"] as? String, let format = ExportFormat(rawValue: f) else { return nil }
            spec = ExportSpec(format: format, source: s["source"] as? String, baseURL: s["baseURL"] as? String)
            state = o["state"] as? String ?? ""
            pack = o["pack"] as? String
            path = o["path"] as? String
        }
    }

    /// For each of `specs` (the request's `exports`, in order), true when it must be written:
    /// no entry in `entries` has the same format, source and base URL; or that entry is not
    /// `written`, or was written from another pack version than `packVersion` (or from an
    /// unknown one), or `outputExists` says its output is gone.
    /// - Parameters:
    ///   - entries: the status's `exports` entries (any order; nil when none were written).
    ///   - packVersion: the pack's version now (`RegionStorage.packVersion`); nil: unknown, all due.
    ///   - outputExists: whether an entry's output is in place (its `path` and spec).
    public static func due(specs: [ExportSpec], entries: [[String: Any]]?, packVersion: String?,
                           outputExists: (Entry) -> Bool) -> [Bool] {
        let known = (entries ?? []).compactMap(Entry.init)
        return specs.map { spec in
            guard let e = known.first(where: { $0.spec == spec }) else { return true }
            guard e.state == "written", let v = packVersion, e.pack == v else { return true }
            return !outputExists(e)
        }
    }
}

/// The part of a region an export writes when asked for less than the whole
/// (`tilespool export ID --bounds W,S,E,N --min-zoom A --max-zoom B`, docs/export.md): the tiles of
/// the pack at a tile zoom in `zooms` that meet `bounds`. "Meet" is MapLibre's half-open cover
/// (`WebMercator.cover`): a tile is in when its square shares interior with the box, so a box edge
/// on a tile edge does not pull in the neighbour. Documents (style, sprites, glyphs, TileJSON) are
/// not subset. Pure.
public struct ExportSubset: Sendable, Equatable {
    /// The box asked for, in degrees; `west > east` crosses the antimeridian.
    public var bounds: GeoBounds
    /// Tile zooms (the `z` of `z/x/y`), inclusive.
    public var zooms: ClosedRange<Int>
    /// Per zoom of `zooms`, the rectangles of tiles meeting `bounds` (one, or two across the antimeridian).
    public let cover: [Int: [TileRect]]

    /// - Precondition: `zooms` within `TileRect.zoomRange`.
    public init(bounds: GeoBounds, zooms: ClosedRange<Int>) {
        self.bounds = bounds
        self.zooms = zooms
        var c: [Int: [TileRect]] = [:]
        for z in zooms { c[z] = WebMercator.cover(bounds, z: z) }
        cover = c
    }

    /// True when tile `t` is in the subset.
    public func contains(_ t: TileID) -> Bool {
        guard let rects = cover[t.z] else { return false }
        return rects.contains { t.x >= $0.minX && t.x <= $0.maxX && t.y >= $0.minY && t.y <= $0.maxY }
    }

    /// Parses `--bounds W,S,E,N` (degrees: longitudes in -180...180, latitudes in -90...90,
    /// south < north; west > east crosses the antimeridian).
    /// - Returns: the box, or nil with `problem` set to why not.
    public static func parseBounds(_ text: String) -> (GeoBounds?, problem: String?) {
        let parts = text.split(separator: ",", omittingEmptySubsequences: false).map { Double($0.trimmingCharacters(in: .whitespaces)) }
        guard parts.count == 4, parts.allSatisfy({ $0 != nil && $0!.isFinite }) else {
            return (nil, "must be four numbers W,S,E,N in degrees, not '\(text.prefix(80))'")
        }
        let (w, s, e, n) = (parts[0]!, parts[1]!, parts[2]!, parts[3]!)
        guard (-180...180).contains(w), (-180...180).contains(e) else { return (nil, "longitudes must be within -180...180") }
        guard (-90...90).contains(s), (-90...90).contains(n) else { return (nil, "latitudes must be within -90...90") }
        guard s < n else { return (nil, "south (\(s)) must be less than north (\(n))") }
        // 180 and -180 are one meridian: [180, s, -180, n] has no width either.
        guard w != e, !(w == 180 && e == -180) else { return (nil, "west and east are equal: the box has no width") }
        // Web Mercator ends at ±85.0511°: a box beyond it holds no tile; one reaching past it is
        // cut there (so the metadata states a box of the tiles' world).
        let m = WebMercator.maxLatitude
        guard n > -m, s < m else { return (nil, "the box lies beyond Web Mercator's latitudes (-\(m)...\(m)): it holds no tile") }
        return (GeoBounds(west: w, south: max(s, -m), east: e, north: min(n, m)), nil)
    }

    /// Where the longitude arcs of `a` and `b` (either may cross the antimeridian) meet: its west
    /// and east in -180...180 (west > east when it crosses); when they meet in several pieces,
    /// the smallest arc around all of them (the circle without its widest gap between two
    /// pieces: pieces touching at ±180 are one arc; attack round 13 found the world's box, centre
    /// 0, for a subset meeting a crossing region on both of its sides); nil when they do not meet.
    static func meet(_ a: GeoBounds, _ b: GeoBounds) -> (Double, Double)? {
        func arc(_ g: GeoBounds) -> (Double, Double) { (g.west, g.west <= g.east ? g.east : g.east + 360) }
        let x = arc(a), y = arc(b)
        var pieces: [(Double, Double)] = []
        for shift in [-360.0, 0, 360] {
            let lo = max(x.0, y.0 + shift), hi = min(x.1, y.1 + shift)
            if lo < hi { pieces.append((lo, hi)) }
        }
        guard !pieces.isEmpty else { return nil }
        pieces.sort { $0.0 < $1.0 }
        // The gap after piece k (the last one's wraps round to the first); the widest is left out.
        var cover = (pieces[0].0, pieces[pieces.count - 1].1)
        var widest = pieces[0].0 + 360 - pieces[pieces.count - 1].1
        for k in 0..<(pieces.count - 1) where pieces[k + 1].0 - pieces[k].1 > widest {
            widest = pieces[k + 1].0 - pieces[k].1
            cover = (pieces[k + 1].0, pieces[k].1 + 360)
        }
        func wrap(_ v: Double) -> Double {
            var v = v
            while v > 180 { v -= 360 }
            while v < -180 { v += 360 }
            return v
        }
        return (wrap(cover.0), wrap(cover.1))
    }

    /// The box of a subset export: `bounds` clipped to the region's box `region`. When either
    /// crosses the antimeridian (west > east) the longitudes are where the two arcs meet (a box
    /// that may cross too: its centre is the export's `center`; `meet`), the whole world's,
    /// -180...180, when they do not; the latitudes are clipped. The MBTiles `bounds` and the
    /// PMTiles header state a crossing box as -180...180 (`MBTilesExport.stated`).
    public func clipped(to region: GeoBounds) -> GeoBounds {
        guard bounds.west <= bounds.east, region.west <= region.east else {
            let s = max(bounds.south, region.south), n = min(bounds.north, region.north)
            let (south, north) = s < n ? (s, n) : (bounds.south, bounds.north)
            guard let (w, e) = ExportSubset.meet(bounds, region) else { return GeoBounds(west: -180, south: south, east: 180, north: north) }
            return GeoBounds(west: w, south: south, east: e, north: north)
        }
        let w = max(bounds.west, region.west), e = min(bounds.east, region.east)
        let s = max(bounds.south, region.south), n = min(bounds.north, region.north)
        guard w < e, s < n else { return bounds }
        return GeoBounds(west: w, south: s, east: e, north: n)
    }
}
