import Foundation

/// The kind of a downloaded resource: the first column of a manifest line.
public enum ResourceKind: String, Sendable, Codable, CaseIterable {
    /// The style JSON.
    case style
    /// A source's TileJSON.
    case source
    /// A sprite sheet's `.json` or `.png`, at @1x or @2x.
    case sprite
    /// One 256-code-point glyph range of one fontstack (a PBF).
    case glyphs
    /// A geojson source's `data` URL or an image source's `url`.
    case data
    /// A tile of a tiled source.
    case tile

    /// True for resources whose 404 is recorded as missing instead of failing the region.
    public var missingIsAllowed: Bool { self == .sprite || self == .glyphs }
}

/// One resource that is not a tile: what to fetch and how it is named in the manifest.
public struct PlannedResource: Sendable, Equatable, Codable {
    public var kind: ResourceKind
    /// The manifest key: `style`, a source name, `sprite@2x.png`, `<fontstack>/<range>`, ...
    public var key: String
    /// The absolute URL to request.
    public var url: String
    public init(kind: ResourceKind, key: String, url: String) {
        self.kind = kind; self.key = ManifestLine.sanitizeKey(key); self.url = url
    }
}

/// The tiles of one source over the region: a URL template and a rectangle per zoom (two at
/// zooms where the region crosses the antimeridian). For a GeoJSON region, `shape` limits the
/// rectangles to the tiles it covers; `rectCounts` holds how many that is in each rectangle.
public struct TileSet: Sendable, Equatable, Codable {
    /// The source name (the style's source id, or `tiles0`, `tiles1`, ... for a `tiles` request).
    public var source: String
    public var template: TileURLTemplate
    public var rects: [TileRect]
    public var shape: RegionShape?
    /// Planned tiles per rectangle (the rectangle's size without a shape).
    public var rectCounts: [Int]
    /// A PMTiles archive source (issue 31): the archive, its pinned version and exactly the tiles
    /// the region takes from it (`rectCounts` count those); nil for a tile URL template.
    public var archive: ArchiveSource? = nil
    /// The exact bytes of the tiles (`ArchiveSource.tileBytes`), known for an archive; nil otherwise.
    public var tileBytes: Int? { archive?.tileBytes }
    public init(source: String, template: TileURLTemplate, rects: [TileRect], shape: RegionShape? = nil) {
        self.source = ManifestLine.sanitizeKey(source); self.template = template; self.rects = rects
        self.shape = shape
        rectCounts = rects.map { r in shape.map { $0.count(in: r) } ?? r.count }
    }
    /// Number of tiles planned in the set (`Int.max` when it overflows: `SaturatingCount`).
    public var count: Int { SaturatingCount.sum(rectCounts) }
    /// Number of plan indices the set spans (its rectangles' sizes; more than `count` with a
    /// shape), saturating at `Int.max`.
    public var indexCount: Int { rects.reduce(0) { SaturatingCount.add($0, $1.count) } }
}

/// Everything a region downloads, as a value: the non-tile resources in phase order, then the
/// tile sets. Each resource has an index in `0..<count` (resources first, then each tile set's
/// rectangles in row-major order), so progress can be tracked in a bitmap of `count` bits and no
/// list of tiles is ever held in memory. Written to `store/regions/<id>/plan.json` once exact.
public struct ResourcePlan: Sendable, Equatable, Codable {
    public var resources: [PlannedResource]
    public var tileSets: [TileSet]

    public init(resources: [PlannedResource], tileSets: [TileSet]) {
        self.resources = resources; self.tileSets = tileSets
    }

    private enum CodingKeys: String, CodingKey { case resources, tileSets }

    /// Decodes a plan (`plan.json`) and checks it (`damage`): a plan whose rectangles or counts
    /// could not have been planned is unreadable (a `DecodingError`), exactly as one that is not
    /// JSON, so that no value in the file can trap or exhaust memory.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        resources = try c.decode([PlannedResource].self, forKey: .resources)
        tileSets = try c.decode([TileSet].self, forKey: .tileSets)
        if let why = damage {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "plan.json is damaged: \(why)"))
        }
    }

    /// Why the plan could not have been planned, nil when it could: every rectangle within its
    /// zoom's tiles (`TileRect.isValid`), one count per rectangle, each `0 ... rect.count`.
    public var damage: String? {
        for set in tileSets {
            if set.rectCounts.count != set.rects.count {
                return "tile set '\(set.source)' has \(set.rects.count) rectangles but \(set.rectCounts.count) counts"
            }
            for (r, n) in zip(set.rects, set.rectCounts) {
                guard r.isValid else {
                    return "tile set '\(set.source)': rectangle z\(r.z) x \(r.minX)...\(r.maxX), y \(r.minY)...\(r.maxY) is outside its zoom's tiles (zooms \(TileRect.zoomRange))"
                }
                guard n >= 0, n <= r.count else { return "tile set '\(set.source)': count \(n) for a rectangle of \(r.count) tiles" }
            }
        }
        return nil
    }

    /// Number of tiles planned. Saturates at `Int.max` (`SaturatingCount`): a plan can name more
    /// tiles than an `Int` holds, and any tile limit refuses that count. Check it against the
    /// limits (`RequestValidator.tileLimitError`) before using `count` or `indexSpace` to size
    /// anything.
    public var tileCount: Int { tileSets.reduce(0) { SaturatingCount.add($0, $1.count) } }
    /// The exact bytes of the tiles when every tile set is a PMTiles archive (`TileSet.tileBytes`),
    /// nil when any tile set's bytes are unknown before download (or there are none).
    public var tileBytes: Int? {
        guard !tileSets.isEmpty else { return nil }
        var total = 0
        for s in tileSets { guard let b = s.tileBytes else { return nil }; total += b }
        return total
    }
    /// Number of resources planned, tiles included (saturating at `Int.max`).
    public var count: Int { SaturatingCount.add(resources.count, tileCount) }
    /// Number of plan indices: `count`, plus the tiles of rectangles a GeoJSON shape leaves out
    /// (saturating at `Int.max`).
    public var indexSpace: Int { tileSets.reduce(resources.count) { SaturatingCount.add($0, $1.indexCount) } }

    /// What lives at a plan index.
    public enum Item: Sendable, Equatable {
        case resource(PlannedResource)
        /// A tile: the tile set's position in `tileSets` and the tile.
        case tile(set: Int, TileID)
    }

    /// The resource at `index` (`0..<indexSpace`; with a shape, some tiles there are not planned:
    /// see `TileSet.shape`).
    public func item(at index: Int) -> Item {
        if index < resources.count { return .resource(resources[index]) }
        var i = index - resources.count
        for (s, set) in tileSets.enumerated() {
            for rect in set.rects {
                if i < rect.count { return .tile(set: s, rect.tile(at: i)) }
                i -= rect.count
            }
        }
        preconditionFailure("plan index \(index) out of range 0..<\(count)")
    }

    /// The plan index of a manifest entry (kind and key), or nil when the plan has no such resource.
    public func index(kind: ResourceKind, key: String) -> Int? {
        if kind != .tile {
            return resources.firstIndex { $0.kind == kind && $0.key == key }
        }
        guard let (source, tile) = ManifestLine.parseTileKey(key) else { return nil }
        var base = resources.count
        for set in tileSets {
            if set.source == source {
                for rect in set.rects {
                    if let i = rect.index(of: tile) { return base + i }
                    base += rect.count
                }
                return nil
            }
            base += set.indexCount
        }
        return nil
    }

    /// Tile counts per source and zoom, for `tilespool plan` (each saturating at `Int.max`).
    public func tileCountsByZoom() -> [(source: String, z: Int, tiles: Int)] {
        var out: [(String, Int, Int)] = []
        for set in tileSets {
            var byZoom: [Int: Int] = [:]
            for (r, n) in zip(set.rects, set.rectCounts) { byZoom[r.z] = SaturatingCount.add(byZoom[r.z] ?? 0, n) }
            for z in byZoom.keys.sorted() { out.append((set.source, z, byZoom[z]!)) }
        }
        return out
    }
}

/// A tile URL template (MapLibre/TileJSON conventions): `{z}`, `{x}`, `{y}`, `{-y}` (TMS row),
/// `{quadkey}`, `{prefix}`, `{ratio}`, `{bbox-epsg-3857}` and `{s}` (a subdomain, as Leaflet's
/// `L.TileLayer`: `subdomains[|x + y| % count]`, so a tile always comes from the same one). Reference: TileJSON 3.0.0 `tiles`,
/// maplibre-native `src/mbgl/storage/resource.cpp` (`Resource::tile`).
public struct TileURLTemplate: Sendable, Equatable, Codable {
    public var template: String { didSet { parts = TileURLTemplate.parse(template) } }
    /// True when the source's TileJSON says `"scheme": "tms"`: `{y}` is then the TMS row.
    public var tms: Bool
    /// What `{ratio}` becomes: `""` or `"@2x"`.
    public var ratio: String
    /// What `{s}` becomes (the request's `subdomains`, default `["a", "b", "c"]`).
    public var subdomains: [String]
    /// The default `subdomains`, Leaflet's.
    public static let defaultSubdomains = ["a", "b", "c"]
    /// The template split once into literal text and tokens, so a URL is built by appending.
    private var parts: [Part]

    enum Part: Sendable, Equatable { case text(String), z, x, y, tmsY, quadkey, prefix, ratio, bbox, subdomain }
    enum CodingKeys: String, CodingKey { case template, tms, ratio, subdomains }

    public init(_ template: String, tms: Bool = false, ratio: String = "", subdomains: [String] = TileURLTemplate.defaultSubdomains) {
        self.template = template; self.tms = tms; self.ratio = ratio
        self.subdomains = subdomains.isEmpty ? TileURLTemplate.defaultSubdomains : subdomains
        parts = TileURLTemplate.parse(template)
    }

    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(try c.decode(String.self, forKey: .template), tms: try c.decode(Bool.self, forKey: .tms),
                  ratio: try c.decode(String.self, forKey: .ratio),
                  subdomains: try c.decodeIfPresent([String].self, forKey: .subdomains) ?? TileURLTemplate.defaultSubdomains)
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(template, forKey: .template); try c.encode(tms, forKey: .tms); try c.encode(ratio, forKey: .ratio)
        if parts.contains(.subdomain) { try c.encode(subdomains, forKey: .subdomains) }
    }

    static let tokens: [(String, Part)] = [("{z}", .z), ("{x}", .x), ("{y}", .y), ("{-y}", .tmsY), ("{quadkey}", .quadkey),
                                           ("{prefix}", .prefix), ("{ratio}", .ratio), ("{bbox-epsg-3857}", .bbox), ("{s}", .subdomain)]

    static func parse(_ template: String) -> [Part] {
        var parts: [Part] = []
        var literal = Substring()
        var rest = Substring(template)
        outer: while let c = rest.first {
            if c == "{" {
                for (token, part) in tokens where rest.hasPrefix(token) {
                    if !literal.isEmpty { parts.append(.text(String(literal))); literal = "" }
                    parts.append(part)
                    rest = rest.dropFirst(token.count)
                    continue outer
                }
            }
            literal = literal.isEmpty ? rest.prefix(1) : template[literal.startIndex..<rest.index(after: rest.startIndex)]
            rest = rest.dropFirst()
        }
        if !literal.isEmpty { parts.append(.text(String(literal))) }
        return parts
    }

    /// Why `template` cannot be used (a message), or nil when it is fine.
    public static func problem(_ template: String) -> String? {
        let hasXY = template.contains("{x}") && (template.contains("{y}") || template.contains("{-y}"))
        guard (template.contains("{z}") && hasXY) || template.contains("{quadkey}") || template.contains("{bbox-epsg-3857}") else {
            return "must contain {z}, {x} and {y} (or {-y}, {quadkey}, {bbox-epsg-3857})"
        }
        let sample = TileURLTemplate(template).url(for: TileID(z: 1, x: 0, y: 1))
        return RequestValidator.urlProblem(sample)
    }

    /// The URL of tile `t`.
    public func url(for t: TileID) -> String {
        var s = ""
        s.reserveCapacity(template.utf8.count + 16)
        for p in parts {
            switch p {
            case .text(let x): s += x
            case .z: s += String(t.z)
            case .x: s += String(t.x)
            case .y: s += String(tms ? t.tmsY : t.y)
            case .tmsY: s += String(t.tmsY)
            case .quadkey: s += t.quadkey
            case .prefix: s += String(t.x % 16, radix: 16) + String(t.y % 16, radix: 16)
            case .ratio: s += ratio
            case .bbox: let b = WebMercator.bbox3857(t); s += "\(b.0),\(b.1),\(b.2),\(b.3)"
            case .subdomain: s += subdomains[abs(t.x + t.y) % subdomains.count]
            }
        }
        return s
    }
}

/// The glyph ranges MapLibre requests for a fontstack: 256 ranges of 256 code points each.
public enum GlyphRanges {
    /// Start code points of every range, `0, 256, ..., 65280`; without ideographs, the 126 ranges
    /// starting in CJK Unified Ideographs (U+4E00-U+9FFF) or Hangul Syllables (U+AC00-U+D7AF) are
    /// left out, leaving 130. Reference: maplibre-native `src/mbgl/util/i18n.cpp`
    /// (`allowsFixedWidthGlyphGeneration`) and `offline_download.cpp`.
    public static func starts(includeIdeographs: Bool) -> [Int] {
        stride(from: 0, to: 65536, by: 256).filter { start in
            includeIdeographs || !((0x4E00...0x9FFF).contains(start) || (0xAC00...0xD7AF).contains(start))
        }
    }

    /// The `{range}` token for a range starting at `start`: `"0-255"`.
    public static func name(_ start: Int) -> String { "\(start)-\(start + 255)" }
}
