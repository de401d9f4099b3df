import Foundation

/// A source of a MapLibre/Mapbox GL style, reduced to what an offline download needs.
/// Reference: MapLibre Style Spec, "Sources" (https://maplibre.org/maplibre-style-spec/sources/).
public struct StyleSource: Sendable, Equatable {
    public enum SourceType: String, Sendable { case vector, raster, rasterDEM = "raster-dem", geojson, image, video, other }
    public var name: String
    public var type: SourceType
    /// The TileJSON URL (`url`) of a tiled source, resolved against the style URL.
    public var tileJSONURL: String?
    /// Inline tile templates (`tiles`), resolved against the style URL.
    public var tiles: [String]?
    /// The source's tile size in pixels: 512 for vector sources (MapLibre's rule), else `tileSize` or 512.
    public var tileSize: Int
    public var minZoom: Int
    public var maxZoom: Int
    public var tms: Bool
    /// A geojson source's `data` URL or an image source's `url`, resolved.
    public var dataURL: String?
    /// A PMTiles source's archive (`"url": "pmtiles://https://host/x.pmtiles"`, issue 31): the
    /// archive's http(s) URL, resolved against the style URL; nil for other sources.
    public var archiveURL: String? = nil

    /// True for the tiled source types (vector, raster, raster-dem).
    public var isTiled: Bool { type == .vector || type == .raster || type == .rasterDEM }
}

/// A parsed style: its sources, sprite URLs, glyph template and the fontstacks its layers use.
public struct StyleDocument: Sendable, Equatable {
    /// The most sources a style may have.
    public static let maxSources = 1_000
    /// The most layers a style may have.
    public static let maxLayers = 20_000
    /// The most fontstacks a style's layers may name (each costs 130 or 256 glyph ranges; real
    /// styles name a few dozen).
    public static let maxFontstacks = 1_000
    /// The most sprites a style may list (each costs 4 files).
    public static let maxSprites = 1_000
    /// The most bytes the URLs and keys of a style's own resources (style, TileJSON, sprites,
    /// glyph ranges, data) may take in a plan: 32 MiB. Glyph ranges multiply a fontstack's name
    /// by 130 or 256, so 1,000 fontstacks of 8,000 characters grew the daemon past 9 GB, and the
    /// plan with them (attack round 42); real styles take a few hundred KiB.
    public static let maxResourceBytes = 32 << 20

    public var sources: [StyleSource]
    /// Sprite base URLs with their ids (`""` for a single sprite string): clients append `.json`,
    /// `.png`, `@2x.json`, `@2x.png` (Style Spec, "Sprite").
    public var sprites: [(id: String, url: String)]
    /// The `glyphs` template with `{fontstack}` and `{range}`, resolved; nil when absent.
    public var glyphs: String?
    /// Every fontstack (list of font names) named by a symbol layer's `text-font`, sorted.
    public var fontstacks: [[String]]

    public static func == (a: StyleDocument, b: StyleDocument) -> Bool {
        a.sources == b.sources && a.glyphs == b.glyphs && a.fontstacks == b.fontstacks
            && a.sprites.map(\.id) == b.sprites.map(\.id) && a.sprites.map(\.url) == b.sprites.map(\.url)
    }

    /// MapLibre's default `text-font` when a symbol layer with `text-field` names none.
    public static let defaultFontstack = ["Open Sans Regular", "Arial Unicode MS Regular"]

    /// Parses a style document fetched from `baseURL`.
    /// - Throws: `RegionError` with code `invalidStyle` naming what is wrong.
    public init(data: Data, baseURL: String) throws(RegionError) {
        func bad(_ m: String) -> RegionError { RegionError(code: .invalidStyle, message: "style: " + m, url: baseURL) }
        let parsed: Any
        do { parsed = try JSONKind.parse(data, maxDepth: 128) } catch { throw bad("the style is \(error.message)") }
        guard let o = parsed as? [String: Any] else { throw bad("must be a JSON object, not a JSON \(JSONKind.name(parsed))") }
        if let v = o["version"], JSONKind.integer(v) != 8 { throw bad("version must be 8") }
        guard let srcs = o["sources"] as? [String: Any] else { throw bad("'sources' must be an object") }
        if srcs.count > StyleDocument.maxSources { throw bad("\(srcs.count) sources; at most \(StyleDocument.maxSources)") }
        let layers = o["layers"] as? [Any] ?? []
        if layers.count > StyleDocument.maxLayers { throw bad("\(layers.count) layers; at most \(StyleDocument.maxLayers)") }

        func resolve(_ s: String, field: String) throws(RegionError) -> String {
            guard let r = URLResolver.resolve(s, against: baseURL) else { throw bad("\(field): '\(Redaction.redact(s))' is not a usable URL") }
            if let p = RequestValidator.urlProblem(r.replacingOccurrences(of: "{", with: "").replacingOccurrences(of: "}", with: "")) {
                throw bad("\(field): '\(Redaction.redact(r))' \(p)")
            }
            return r
        }

        var sources: [StyleSource] = []
        for name in srcs.keys.sorted() {
            guard let s = srcs[name] as? [String: Any] else { throw bad("source '\(name)' must be an object") }
            let typeName = s["type"] as? String ?? ""
            let type = StyleSource.SourceType(rawValue: typeName) ?? .other
            var src = StyleSource(name: name, type: type, tileJSONURL: nil, tiles: nil, tileSize: 512,
                                  minZoom: 0, maxZoom: 22, tms: false, dataURL: nil)
            if src.isTiled {
                if let u = s["url"] as? String {
                    if let inner = PMTiles.innerURL(u) {
                        src.archiveURL = try resolve(inner, field: "sources.\(name).url")
                    } else {
                        src.tileJSONURL = try resolve(u, field: "sources.\(name).url")
                    }
                }
                if let t = s["tiles"] as? [Any] {
                    var templates: [String] = []
                    for case let str as String in t {
                        let r = try resolve(str, field: "sources.\(name).tiles")
                        if let p = TileURLTemplate.problem(r) { throw bad("sources.\(name).tiles: '\(Redaction.redact(r))' \(p)") }
                        templates.append(r)
                    }
                    src.tiles = templates
                }
                if src.tileJSONURL == nil && src.archiveURL == nil && (src.tiles ?? []).isEmpty {
                    throw bad("source '\(name)' has neither 'url' nor 'tiles'")
                }
                // A tileSize that is not a number (`"256"`) or not whole (`100.5`) was read as the
                // default 512: half the zooms of a 256 px source. MapLibre's style validation
                // refuses it too (style spec: `tileSize` is a number).
                if type != .vector, let v = s["tileSize"], !(v is NSNull) {
                    guard let ts = JSONKind.integer(v) else { throw bad("source '\(name)': tileSize must be a whole number of pixels (64, 128, 256, 512, 1024 or 2048), not \(v is NSNumber && !JSONKind.isBool(v) ? "\(v)" : JSONKind.aName(v))") }
                    guard [64, 128, 256, 512, 1024, 2048].contains(ts) else { throw bad("source '\(name)': tileSize \(ts) is not a power of two in 64...2048") }
                    src.tileSize = ts
                }
                for (key, v) in [("minzoom", s["minzoom"]), ("maxzoom", s["maxzoom"])] {
                    guard let v else { continue }
                    guard let z = JSONKind.integer(v), (0...30).contains(z) else { throw bad("source '\(name)': \(key) must be an integer in 0...30") }
                    if key == "minzoom" { src.minZoom = z } else { src.maxZoom = z }
                }
                if src.minZoom > src.maxZoom { throw bad("source '\(name)': minzoom \(src.minZoom) is greater than maxzoom \(src.maxZoom)") }
                src.tms = (s["scheme"] as? String) == "tms"
            } else if type == .geojson, let d = s["data"] as? String {
                src.dataURL = try resolve(d, field: "sources.\(name).data")
            } else if type == .image, let u = s["url"] as? String {
                src.dataURL = try resolve(u, field: "sources.\(name).url")
            }
            sources.append(src)
        }

        var sprites: [(String, String)] = []
        if let s = o["sprite"] as? String {
            sprites.append(("", try resolve(s, field: "sprite")))
        } else if let arr = o["sprite"] as? [Any] {
            if arr.count > StyleDocument.maxSprites { throw bad("\(arr.count) sprites; at most \(StyleDocument.maxSprites)") }
            for case let e as [String: Any] in arr {
                guard let id = e["id"] as? String, let u = e["url"] as? String else { throw bad("sprite entries need 'id' and 'url'") }
                sprites.append((id, try resolve(u, field: "sprite[\(id)]")))
            }
        }
        var glyphs: String?
        if let g = o["glyphs"] as? String { glyphs = try resolve(g, field: "glyphs") }

        var stacks = Set<[String]>()
        for case let layer as [String: Any] in layers where (layer["type"] as? String) == "symbol" {
            let layout = layer["layout"] as? [String: Any] ?? [:]
            if let tf = layout["text-font"] {
                StyleDocument.collectFontstacks(tf, into: &stacks)
            } else if layout["text-field"] != nil {
                stacks.insert(StyleDocument.defaultFontstack)
            }
            if stacks.count > StyleDocument.maxFontstacks {
                throw bad("the layers name more than \(StyleDocument.maxFontstacks) fontstacks in 'text-font'")
            }
        }
        self.sources = sources
        self.sprites = sprites
        self.glyphs = glyphs
        self.fontstacks = stacks.sorted { $0.joined(separator: ",") < $1.joined(separator: ",") }
    }

    /// Collects the fontstacks a `text-font` value can produce: a plain array of names, or the
    /// literal arrays inside an expression (`["literal", [...]]`, `step`, `match`, ...).
    static func collectFontstacks(_ v: Any, into stacks: inout Set<[String]>) {
        guard let arr = v as? [Any], !arr.isEmpty else { return }
        if let op = arr.first as? String, op == "literal", arr.count == 2, let names = arr[1] as? [String], !names.isEmpty {
            stacks.insert(names); return
        }
        if let names = arr as? [String], !StyleDocument.expressionOperators.contains(names[0]) {
            stacks.insert(names); return
        }
        // An expression: only its literal arrays are fontstacks.
        for case let e as [Any] in arr.dropFirst() { collectLiterals(e, into: &stacks) }
    }

    static func collectLiterals(_ arr: [Any], into stacks: inout Set<[String]>) {
        if let op = arr.first as? String, op == "literal", arr.count == 2, let names = arr[1] as? [String], !names.isEmpty {
            stacks.insert(names); return
        }
        for case let e as [Any] in arr { collectLiterals(e, into: &stacks) }
    }

    static let expressionOperators: Set<String> = ["literal", "step", "match", "case", "coalesce", "interpolate",
                                                   "get", "to-string", "concat", "let", "var", "array", "format", "zoom"]
}

/// The parts of a TileJSON document an offline download needs.
/// Reference: TileJSON 3.0.0 (https://github.com/mapbox/tilejson-spec/tree/master/3.0.0).
public struct TileJSON: Sendable, Equatable {
    /// Tile URL templates, resolved against the TileJSON's own URL.
    public var tiles: [String]
    public var minZoom: Int
    public var maxZoom: Int
    public var tms: Bool
    /// The TileJSON's `bounds` (`[west, south, east, north]` in degrees; TileJSON 3.0.0 section
    /// 3.3): tiles outside are not planned, as MapLibre does not request them. Nil when absent or
    /// the whole world; an unusable value (not 4 finite numbers in range, south >= north) is ignored.
    public var bounds: GeoBounds?

    /// Parses a TileJSON document fetched from `baseURL`.
    /// - Throws: `RegionError` with code `invalidTileJSON`.
    public init(data: Data, baseURL: String) throws(RegionError) {
        func bad(_ m: String) -> RegionError { RegionError(code: .invalidTileJSON, message: "TileJSON: " + m, url: baseURL) }
        let parsed: Any
        do { parsed = try JSONKind.parse(data) } catch { throw bad("the document is \(error.message)") }
        guard let o = parsed as? [String: Any] else { throw bad("must be a JSON object") }
        guard let t = o["tiles"] as? [Any], !t.isEmpty else { throw bad("'tiles' must be a non-empty array of URL templates") }
        var tiles: [String] = []
        for case let s as String in t {
            guard let r = URLResolver.resolve(s, against: baseURL) else { throw bad("tiles: '\(Redaction.redact(s))' is not a usable URL") }
            if let p = TileURLTemplate.problem(r) { throw bad("tiles: '\(Redaction.redact(r))' \(p)") }
            tiles.append(r)
        }
        guard !tiles.isEmpty else { throw bad("'tiles' has no string template") }
        func zoom(_ k: String, _ d: Int) throws(RegionError) -> Int {
            guard let v = o[k] else { return d }
            guard let z = JSONKind.integer(v), (0...30).contains(z) else { throw bad("\(k) must be an integer in 0...30, not \(v)") }
            return z
        }
        minZoom = try zoom("minzoom", 0)
        maxZoom = try zoom("maxzoom", 30)
        if minZoom > maxZoom { throw bad("minzoom \(minZoom) is greater than maxzoom \(maxZoom)") }
        self.tiles = tiles
        tms = (o["scheme"] as? String) == "tms"
        if let b = o["bounds"] as? [Any], b.count == 4 {
            let n = b.compactMap(JSONKind.number)
            if n.count == 4, n.allSatisfy(\.isFinite), (-180...180).contains(n[0]), (-180...180).contains(n[2]),
               (-90...90).contains(n[1]), (-90...90).contains(n[3]), n[1] < n[3], n[0] != n[2],
               !(n[0] <= -180 && n[2] >= 180 && n[1] <= -WebMercator.maxLatitude && n[3] >= WebMercator.maxLatitude) {
                bounds = GeoBounds(west: n[0], south: n[1], east: n[2], north: n[3])
            }
        }
    }
}

/// Resolves a possibly relative URL (or URL template) against the document it came from. Works on
/// text so that template braces survive; the base must be an absolute http(s) URL.
public enum URLResolver {
    public static func resolve(_ ref: String, against base: String) -> String? {
        let lower = ref.lowercased()
        if let colon = lower.firstIndex(of: ":"), lower[..<colon].allSatisfy({ $0.isLetter || $0 == "+" || $0 == "-" || $0 == "." }),
           !lower[..<colon].isEmpty {
            return ref // absolute, any scheme (the caller checks the scheme)
        }
        guard let schemeEnd = base.range(of: "://") else { return nil }
        let afterScheme = base[schemeEnd.upperBound...]
        let pathStart = afterScheme.firstIndex(of: "/") ?? base.endIndex
        let origin = String(base[..<pathStart])
        if ref.hasPrefix("//") { return String(base[..<schemeEnd.lowerBound]) + ":" + ref }
        if ref.hasPrefix("/") { return origin + ref }
        var path = String(base[pathStart...])
        if let q = path.firstIndex(where: { $0 == "?" || $0 == "#" }) { path = String(path[..<q]) }
        let dir = path.lastIndex(of: "/").map { String(path[...$0]) } ?? "/"
        return origin + dir + ref
    }
}

/// Builds a region's `ResourcePlan` from its request and the documents fetched so far. Pure.
public enum Planner {
    /// The URL of one sprite file: `suffix` (`.json`, `.png`, `@2x.json`, `@2x.png`) goes at the
    /// end of the base URL's path, before any query or fragment, as MapLibre does
    /// (maplibre-native `Resource::spriteJSON`/`spriteImage`, maplibre-gl-js `normalizeSpriteURL`):
    /// `https://h/sprite?key=K` -> `https://h/sprite@2x.png?key=K`.
    public static func spriteURL(_ base: String, _ suffix: String) -> String {
        guard let cut = base.firstIndex(where: { $0 == "?" || $0 == "#" }) else { return base + suffix }
        return String(base[..<cut]) + suffix + String(base[cut...])
    }

    /// The plan of a style request once the style and every TileJSON are known, in MapLibre Native's
    /// order (`offline_download.cpp`): style, TileJSON, sprites, glyphs, source data, then tiles per
    /// source (sources sorted by name) and zoom.
    /// - Parameters:
    ///   - styleURL: the style's URL; `style` its parsed document.
    ///   - tileJSONs: the parsed TileJSON of every source that has a `url`, by source name.
    /// - Returns: the plan; its count is exact (saturating at `Int.max`: check it against the
    ///   tile limits, `RequestValidator.tileLimitError`, before anything is sized by it).
    /// - Throws: `RegionError` `tileLimitExceeded` when the request has a shape and the plan's
    ///   bounding rectangles span more than `RegionShape.maxPlanIndexSpace` tiles (checked before
    ///   the shape's tiles are counted, row by row); `invalidStyle` when the URLs and keys of the
    ///   style's own resources would take more than `StyleDocument.maxResourceBytes`.
    ///   - archives: the tile set of every PMTiles source (`archiveSources`), by source name,
    ///     made from its directories (`TileSet.init(source:archive:rects:shape:)` over
    ///     `archiveRects`). A PMTiles source missing here is left out of the plan.
    ///   - limits: the tile limits the plan will be held to; with them, a shape's tiles are
    ///     counted only until the plan passes them (`sets(_:shape:limits:)`).
    ///   - cancel: looked at while tiles are counted; once cancelled, the plan stops and throws
    ///     `PlanCancellation.error`.
    public static func plan(request: RegionRequest, styleURL: String, style: StyleDocument,
                            tileJSONs: [String: TileJSON], archives: [String: TileSet] = [:],
                            limits: RequestValidator.TileLimits? = nil, cancel: PlanCancellation? = nil) throws(RegionError) -> ResourcePlan {
        var resources = [PlannedResource(kind: .style, key: "style", url: styleURL)]
        var resourceBytes = styleURL.utf8.count
        /// Counts `n` resources of about `bytes` each (URL and key) against
        /// `StyleDocument.maxResourceBytes`, before they are made.
        func budget(_ n: Int, _ bytes: Int) throws(RegionError) {
            resourceBytes = SaturatingCount.add(resourceBytes, n.multipliedReportingOverflow(by: bytes).overflow ? Int.max : n * bytes)
            guard resourceBytes <= StyleDocument.maxResourceBytes else {
                throw RegionError(code: .invalidStyle, message: "style: its sprites, glyph ranges and other resources would take more than \(StyleDocument.maxResourceBytes >> 20) MiB of URLs (\(style.fontstacks.count) fontstacks, \(style.sprites.count) sprites); real styles take a few hundred KiB", url: styleURL)
            }
        }
        for src in style.sources where src.tileJSONURL != nil {
            try budget(1, src.tileJSONURL!.utf8.count + src.name.utf8.count)
            resources.append(PlannedResource(kind: .source, key: src.name, url: src.tileJSONURL!))
        }
        for sprite in style.sprites {
            try budget(4, sprite.url.utf8.count + 8 + sprite.id.utf8.count + 15) // URL and key suffixes: at most 8 and 15 bytes
            let prefix = sprite.id.isEmpty ? "" : sprite.id + ":"
            for suffix in [".json", ".png", "@2x.json", "@2x.png"] {
                resources.append(PlannedResource(kind: .sprite, key: prefix + "sprite" + suffix, url: spriteURL(sprite.url, suffix)))
            }
        }
        if let glyphs = style.glyphs {
            let fontstackTokens = glyphs.components(separatedBy: "{fontstack}").count - 1
            for stack in style.fontstacks {
                let joined = stack.joined(separator: ",")
                let encoded = percentEncode(joined)
                let starts = GlyphRanges.starts(includeIdeographs: request.includeIdeographs)
                // One URL's size (they differ only by the range's few digits) times the ranges,
                // counted before any is made (a template may name {fontstack} many times).
                let (grown, over) = encoded.utf8.count.multipliedReportingOverflow(by: fontstackTokens)
                let one = over ? Int.max : SaturatingCount.add(glyphs.utf8.count + joined.utf8.count + 24, grown) // a range's name twice, at most 11 bytes each
                try budget(starts.count, one)
                for start in starts {
                    let range = GlyphRanges.name(start)
                    let url = glyphs.replacingOccurrences(of: "{fontstack}", with: encoded)
                        .replacingOccurrences(of: "{range}", with: range)
                    resources.append(PlannedResource(kind: .glyphs, key: "\(joined)/\(range)", url: url))
                }
            }
        }
        for src in style.sources {
            if let d = src.dataURL {
                try budget(1, d.utf8.count + src.name.utf8.count)
                resources.append(PlannedResource(kind: .data, key: src.name, url: d))
            }
        }
        var planned: [(source: String, template: TileURLTemplate, rects: [TileRect], archive: TileSet?)] = []
        var areaPlanned: [(source: String, template: TileURLTemplate, rects: [TileRect], areas: [TileArea], rectAreas: [RectArea])] = []
        var archiveSets: [TileSet] = [] // over parts: in style order among the other sets below
        let ratio = ratioToken(request.pixelRatio)
        for src in style.sources where src.isTiled {
            if src.archiveURL != nil {
                // An archive's set is made from its directories (`PMTilesRemote`), over the
                // request's bounds or its parts alike.
                if let set = archives[src.name] {
                    if request.areaParts != nil { archiveSets.append(set) } else { planned.append((src.name, set.template, set.rects, set)) }
                }
                continue
            }
            var template: String?, minZ = src.minZoom, maxZ = src.maxZoom, tms = src.tms
            var sourceBounds: GeoBounds?
            if let tj = tileJSONs[src.name] {
                template = tj.tiles.first; minZ = tj.minZoom; maxZ = tj.maxZoom; tms = tj.tms
                sourceBounds = tj.bounds
            } else {
                template = src.tiles?.first
            }
            guard let template else { continue }
            let rounds = src.type == .raster
            if let parts = request.areaParts {
                let a = areaRects(parts, zooms: { part in
                    let lo = max(WebMercator.coveringZoom(part.minZoom, tileSize: src.tileSize, rounds: rounds), minZ, 0)
                    let hi = min(WebMercator.coveringZoom(part.maxZoom, tileSize: src.tileSize, rounds: rounds), maxZ)
                    return lo <= hi ? lo...hi : nil
                }, sourceBounds: sourceBounds)
                areaPlanned.append((src.name, TileURLTemplate(template, tms: tms, ratio: ratio), a.rects, a.areas, a.rectAreas))
                continue
            }
            let lo = max(WebMercator.coveringZoom(request.minZoom, tileSize: src.tileSize, rounds: rounds), minZ, 0)
            let hi = min(WebMercator.coveringZoom(request.maxZoom, tileSize: src.tileSize, rounds: rounds), maxZ)
            var covered = rects(request.bounds, lo, hi)
            if let sb = sourceBounds { covered = intersect(covered, rects(sb, lo, hi)) }
            planned.append((src.name, TileURLTemplate(template, tms: tms, ratio: ratio), covered, nil))
        }
        try checkShapeBudget(request, planned.map(\.rects), sources: "the style's \(planned.count) tile sources at the zooms each loads")
        var sets = try sets(planned, shape: request.shape, limits: limits, cancel: cancel)
        if request.areaParts != nil {
            try checkAreaBudget(areaPlanned.map(\.rects), sources: "the style's \(areaPlanned.count) tile sources at the zooms each loads")
            try checkPlanWork(areaPlanned.map { ($0.rects, $0.areas, $0.rectAreas) }, sources: "the style's \(areaPlanned.count) tile sources at the zooms each loads")
            var bySource: [String: TileSet] = [:]
            for a in areaPlanned {
                let set = TileSet(source: a.source, template: a.template, rects: a.rects, areas: a.areas, rectAreas: a.rectAreas, cancel: cancel)
                if cancel?.isCancelled == true { throw PlanCancellation.error }
                bySource[set.source] = set
            }
            for set in archiveSets { bySource[set.source] = set }
            sets = style.sources.filter(\.isTiled).compactMap { bySource[ManifestLine.sanitizeKey($0.name)] }
        }
        // One resource per manifest key: fontstacks "A,B" and ["A", "B"], or two sprites of one id,
        // name the same file.
        var seen = Set<String>()
        resources = resources.filter { seen.insert("\($0.kind.rawValue)\t\($0.key)").inserted }
        return ResourcePlan(resources: resources, tileSets: sets)
    }

    /// The plan of a `tiles` request: each template over the region at the request's zoom levels
    /// (tile zooms, no covering-zoom shift). Sources are named `tiles0`, `tiles1`, ...
    /// - Throws: `RegionError` `tileLimitExceeded` as the style form does.
    /// - Parameter archives: the tile set of each entry that is a PMTiles archive
    ///   (`archiveSources`), by source name (`tiles0`, ...), made from its directories.
    /// - Throws: `RegionError` `invalidRequest` when an entry is a PMTiles archive missing from
    ///   `archives` (its directories were not read).
    /// - Parameter limits: as for a style's plan.
    /// - Parameter cancel: as for a style's plan: looked at between rows and rectangles.
    /// - Throws: `PlanCancellation.error` once `cancel` is cancelled.
    public static func plan(request: RegionRequest, templates: [String], archives: [String: TileSet] = [:],
                            limits: RequestValidator.TileLimits? = nil, cancel: PlanCancellation? = nil) throws(RegionError) -> ResourcePlan {
        if cancel?.isCancelled == true { throw PlanCancellation.error }
        let ratio = ratioToken(request.pixelRatio)
        if let parts = request.areaParts {
            let plain = templates.filter { PMTiles.archiveURL($0) == nil }
            let a = areaRects(parts, zooms: { $0.minZoom...$0.maxZoom }, sourceBounds: nil)
            try checkAreaBudget(Array(repeating: a.rects, count: plain.count), sources: "the \(plain.count) templates")
            try checkPlanWork([(a.rects, a.areas, a.rectAreas)], sources: "the request's zooms")
            // Every template plans the same tiles: count once, copy the counts. An archive's set
            // is made from its directories (`PMTilesRemote`).
            var first: TileSet?
            var sets: [TileSet] = []
            for (i, t) in templates.enumerated() {
                if PMTiles.archiveURL(t) != nil { sets.append(try archiveSet(archives, i, t)); continue }
                var set = first ?? TileSet(source: "tiles\(i)", template: TileURLTemplate(t, ratio: ratio, subdomains: request.subdomains),
                                           rects: a.rects, areas: a.areas, rectAreas: a.rectAreas, cancel: cancel)
                if cancel?.isCancelled == true { throw PlanCancellation.error }
                first = first ?? set
                set.source = "tiles\(i)"
                set.template = TileURLTemplate(t, ratio: ratio, subdomains: request.subdomains)
                sets.append(set)
            }
            return ResourcePlan(resources: [], tileSets: sets)
        }
        let covered = rects(request.bounds, request.minZoom, request.maxZoom)
        try checkShapeBudget(request, Array(repeating: covered, count: templates.count), sources: "the \(templates.count) templates")
        var planned: [(source: String, template: TileURLTemplate, rects: [TileRect], archive: TileSet?)] = []
        for (i, t) in templates.enumerated() {
            if PMTiles.archiveURL(t) != nil { let a = try archiveSet(archives, i, t); planned.append((a.source, a.template, a.rects, a)); continue }
            planned.append(("tiles\(i)", TileURLTemplate(t, ratio: ratio, subdomains: request.subdomains), covered, nil))
        }
        return ResourcePlan(resources: [], tileSets: try sets(planned, shape: request.shape, limits: limits, cancel: cancel))
    }

    /// The tile sets of a request of one area (bounds or a top-level geometry), one per entry of
    /// `planned` (an archive's set as made from its directories). A shape's tiles are counted
    /// once per distinct list of rectangles (templates of one request share theirs) and, with
    /// `limits`, only until the sets counted so far pass `limits.stopsAt`.
    /// - Throws: `RegionError` `tileLimitExceeded` ("at least N tiles (counting stopped there)")
    ///   when they do: a thin shape 140 degrees tall to z24 counted 18.5 million tiles for 15 s
    ///   before it was refused for the default limit of 1,000,000.
    static func sets(_ planned: [(source: String, template: TileURLTemplate, rects: [TileRect], archive: TileSet?)],
                     shape: RegionShape?, limits: RequestValidator.TileLimits?, cancel: PlanCancellation? = nil) throws(RegionError) -> [TileSet] {
        var sets: [TileSet] = [], counted = 0
        var known: [(rects: [TileRect], counts: [Int])] = []
        for (i, p) in planned.enumerated() {
            if let a = p.archive { sets.append(a); counted = SaturatingCount.add(counted, a.count); continue }
            let counts: [Int]
            if let shape {
                if let k = known.first(where: { $0.rects == p.rects }) { counts = k.counts } else {
                    // This count stands for every later set of the same rectangles too (attack
                    // round 48: two templates were refused as "at least" one's tiles): counting
                    // stops once the copies together pass what is left of the limit.
                    let copies = planned[i...].filter { $0.archive == nil && $0.rects == p.rects }.count
                    let stop = limits.map { max($0.stopsAt - counted, 0) / copies } ?? Int.max
                    let c = shape.counts(in: p.rects, stoppingAbove: stop, cancel: cancel)
                    if cancel?.isCancelled == true { throw PlanCancellation.error }
                    if c.stopped, let limits {
                        throw limits.stoppedError(tiles: SaturatingCount.add(counted, SaturatingCount.multiply(c.total, copies)))
                    }
                    counts = c.counts
                    known.append((p.rects, counts))
                }
            } else {
                counts = p.rects.map(\.count)
            }
            let set = TileSet(source: p.source, template: p.template, rects: p.rects, shape: shape, rectCounts: counts)
            counted = SaturatingCount.add(counted, set.count)
            sets.append(set)
        }
        return sets
    }

    /// The PMTiles archives a plan needs read first (issue 31): source name, the archive's http(s)
    /// URL, and for a style the source (its zooms and tile size shape the cover).
    public static func archiveSources(request: RegionRequest, style: StyleDocument?) -> [(source: String, url: String, styleSource: StyleSource?)] {
        switch request.source {
        case .tiles(let templates):
            return templates.enumerated().compactMap { i, t in PMTiles.archiveURL(t).map { ("tiles\(i)", $0, nil) } }
        case .style:
            return (style?.sources ?? []).compactMap { s in s.isTiled ? s.archiveURL.map { (s.name, $0, s) } : nil }
        }
    }

    /// The tile rectangles a region takes from an archive: the request's zooms (for a style
    /// source, the zooms its tiles are loaded at, as for any source: `coveringZoom`, and the
    /// source's own `minzoom`/`maxzoom`), clipped by the header's zooms and bounds (`PMTiles.cover`).
    public static func archiveRects(request: RegionRequest, source: StyleSource?, header: PMTiles.Header) -> [TileRect] {
        var lo = request.minZoom, hi = request.maxZoom
        if let src = source {
            let rounds = src.type == .raster
            lo = max(WebMercator.coveringZoom(request.minZoom, tileSize: src.tileSize, rounds: rounds), src.minZoom, 0)
            hi = min(WebMercator.coveringZoom(request.maxZoom, tileSize: src.tileSize, rounds: rounds), src.maxZoom)
        }
        guard lo <= hi else { return [] }
        return PMTiles.cover(request.bounds, minZoom: lo, maxZoom: hi, header: header)
    }

    /// The tile set of `tiles[i]`, the PMTiles archive `template`, made from its directories.
    /// - Throws: `RegionError` `invalidRequest` when its directories were not read (`archives`).
    static func archiveSet(_ archives: [String: TileSet], _ i: Int, _ template: String) throws(RegionError) -> TileSet {
        guard let set = archives["tiles\(i)"] else {
            throw RegionError(code: .invalidRequest, message: "tiles[\(i)]: the PMTiles archive '\(Redaction.redact(template))' must be read before the plan is made")
        }
        return set
    }

    /// The rectangles and areas of an archive over a corridor or parts request (`areaRects`):
    /// each part at its zooms (a style source: its covering zooms and its own), clipped by the
    /// header's zooms and bounds as `archiveRects` clips a box; nil for a request of one area.
    public static func archiveAreas(request: RegionRequest, source: StyleSource?, header: PMTiles.Header)
        -> (rects: [TileRect], areas: [TileArea], rectAreas: [RectArea])? {
        guard let parts = request.areaParts else { return nil }
        let hb = GeoBounds(west: header.minLon, south: header.minLat, east: header.maxLon, north: header.maxLat)
        return areaRects(parts, zooms: { part in
            var lo = part.minZoom, hi = part.maxZoom
            if let src = source {
                let rounds = src.type == .raster
                lo = max(WebMercator.coveringZoom(part.minZoom, tileSize: src.tileSize, rounds: rounds), src.minZoom, 0)
                hi = min(WebMercator.coveringZoom(part.maxZoom, tileSize: src.tileSize, rounds: rounds), src.maxZoom)
            }
            lo = max(lo, Int(header.minZoom)); hi = min(hi, Int(header.maxZoom))
            return lo <= hi ? lo...hi : nil
        }, sourceBounds: hb.west < hb.east && hb.south < hb.north ? hb : nil)
    }

    /// Refuses a plan with a shape whose rectangles (one list per tile source) span more than
    /// `RegionShape.maxPlanIndexSpace` tiles, before any is counted against the shape.
    static func checkShapeBudget(_ request: RegionRequest, _ rectangles: [[TileRect]], sources: String) throws(RegionError) {
        guard request.shape != nil else { return }
        let spanned = SaturatingCount.sum(rectangles.lazy.flatMap { $0 }.map(\.count))
        guard spanned > RegionShape.maxPlanIndexSpace else { return }
        throw RegionError(code: .tileLimitExceeded, message: "geometry: its bounding box, over \(sources), spans \(spanned == Int.max ? "more than \(Int.max - 1)" : String(spanned)) tiles, more than \(RegionShape.maxPlanIndexSpace); split the region into smaller requests")
    }

    /// The TileJSON URLs a style needs resolved before the plan is exact, by source name.
    public static func tileJSONURLs(_ style: StyleDocument) -> [(source: String, url: String)] {
        style.sources.compactMap { s in s.tileJSONURL.map { (s.name, $0) } }
    }

    /// The tiles in both `a` and `b` (rectangles of one zoom each; those of `b` do not overlap
    /// one another, as `WebMercator.cover` makes them), as rectangles.
    static func intersect(_ a: [TileRect], _ b: [TileRect]) -> [TileRect] {
        var out: [TileRect] = []
        for r in a {
            for s in b where s.z == r.z {
                let i = TileRect(z: r.z, minX: max(r.minX, s.minX), minY: max(r.minY, s.minY), maxX: min(r.maxX, s.maxX), maxY: min(r.maxY, s.maxY))
                if i.minX <= i.maxX && i.minY <= i.maxY { out.append(i) }
            }
        }
        return out
    }

    static func rects(_ bounds: GeoBounds, _ lo: Int, _ hi: Int) -> [TileRect] {
        guard lo <= hi else { return [] }
        return (lo...hi).flatMap { WebMercator.cover(bounds, z: $0) }
    }

    /// What `{ratio}` becomes in tile URLs: `@2x` for any pixel ratio above 1, else `""`
    /// (MapLibre Native `Resource::tile`).
    public static func ratioToken(_ pixelRatio: Double) -> String { pixelRatio > 1 ? "@2x" : "" }

    /// Percent-encodes everything but RFC 3986's unreserved characters with lower-case hex
    /// (`%2c`, `%20`), byte for byte as MapLibre Native's `util::percentEncode` does for
    /// `{fontstack}`: the offline database is keyed by the exact URL.
    public static func percentEncode(_ s: String) -> String {
        var out = ""
        for b in s.utf8 {
            let c = Character(UnicodeScalar(b))
            if (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || "-_.~".contains(c) {
                out.append(c)
            } else {
                out += String(format: "%%%02x", b)
            }
        }
        return out
    }
}
