// A region as a folder any static web server can serve (docs/export.md, "site"):
//
//     style.json                          the style, every URL pointing into the site
//     sources/<source>.json               a TileJSON 3.0.0 per tile source
//     tiles/<source>/<z>/<x>/<y>.<ext>    copies of the objects (copy_file_range from their packs, which cannot be linked)
//     sprites/<id>{,@2x}.{json,png}       the sprites (`sprite` for a single sprite)
//     fonts/<fontstack>/<start>-<end>.pbf the glyph ranges
//     data/<source>.<ext>                 GeoJSON data and image-source pictures
//     nginx.conf                          a location block that serves the folder
//     .tilespool-site                     the marker: TileSpool made this folder (`Exporter.siteMarker`)
import Foundation
import Glibc
import TileSpoolCore
import TileSpoolIO

enum SiteExport {
    /// Refuses a path component a hostile style could use to leave the folder.
    static func safe(_ name: String, _ what: String) throws -> String {
        guard !name.isEmpty, name != ".", name != "..", !name.contains("/"), !name.hasPrefix("."),
              !name.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }), name.utf8.count <= 200 else {
            throw ExportError("\(what) '\(TerminalText.safe(String(name.prefix(80))))' cannot be a file name in a site export (no '/', control character or leading '.')")
        }
        return name
    }

    /// A file name as one segment of a URL path: what a web server decodes back to the name
    /// (`%` as `%25`, a space as `%20`, `?` and `#` escaped). File names of sources, tiles, sprites
    /// and data are manifest keys, in which a source named `a%09b` is `a%2509b`
    /// (`ManifestLine.sanitizeKey`).
    static func urlSegment(_ name: String) -> String {
        name.addingPercentEncoding(withAllowedCharacters: segmentAllowed) ?? name
    }
    static let segmentAllowed: CharacterSet = {
        var c = CharacterSet.urlPathAllowed
        c.remove(charactersIn: "/;")
        return c
    }()

    final class Writer {
        let root: String
        var made = Set<String>()
        var bytes = 0
        init(root: String) { self.root = root }

        func folder(_ rel: String) throws {
            guard !made.contains(rel) else { return }
            do { try Files.makeDirectories(root + "/" + rel) } catch { throw ExportError("cannot create \(root)/\(rel): \(error.errnoDescription)") }
            made.insert(rel)
        }

        func file(_ rel: String, _ bytes: [UInt8]) throws {
            let out = try OutputFile(path: root + "/" + rel)
            try out.write(bytes)
            try out.flush()
            self.bytes += bytes.count
        }

        /// Writes object `sha` decoded at `rel`, a gzip file inflated chunk by chunk
        /// (`RegionPack.writeDecoded`, at most `maxDecodedBytes`).
        func decoded(_ rel: String, pack: RegionPack, sha: String, key: String) throws {
            let out = try OutputFile(path: root + "/" + rel)
            let n = try pack.writeDecoded(sha, for: key, to: out)
            try out.flush()
            bytes += n
        }

        /// Writes object `sha` at `rel` with `TileStore.copyObject` (from `location` when known);
        /// with `decodeGzip`, a body that turns out to be a gzip file is written again decoded
        /// (`decoded`).
        func copy(_ rel: String, pack: RegionPack, sha: String, at location: ObjectLocation?, key: String, decodeGzip: Bool) throws {
            let path = root + "/" + rel
            let fd = Glibc.open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o644)
            guard fd >= 0 else { throw ExportError("cannot create \(path): \(SystemError("open", path).errnoDescription)") }
            var n = 0
            var gzip = false
            do {
                defer { Glibc.close(fd) }
                do { n = try pack.store.copyObject(sha, at: location, to: fd, path: path, limit: 1 << 30) } catch let e as SystemError where e.path == path {
                    throw ExportError("cannot write \(path): \(e.errnoDescription)")
                } catch {
                    throw RegionPack.unreadable(error, sha, key)
                }
                if decodeGzip && n >= 2 {
                    var magic: [UInt8] = [0, 0]
                    gzip = Glibc.pread(fd, &magic, 2, 0) == 2 && isGzip(magic)
                }
            }
            if gzip { try decoded(rel, pack: pack, sha: sha, key: key) } else { bytes += n }
        }

        /// Hard-links object `source` at `rel`; copies it when the store is on another filesystem.
        func link(_ source: String, _ rel: String, pack: RegionPack, sha: String, key: String) throws {
            if Glibc.link(source, root + "/" + rel) == 0 {
                bytes += Files.size(source) ?? 0
                return
            }
            let e = errno
            if e == ENOENT { throw ExportError("object \(sha) of '\(key)' vanished from the store; was the region deleted? Run 'tilespool verify'") }
            guard e == EXDEV || e == EPERM || e == EMLINK else {
                throw ExportError("cannot link \(source) to \(root)/\(rel): \(SystemError("link", source, errno: e).errnoDescription)")
            }
            try file(rel, try pack.storedBody(sha, for: key))
        }
    }

    static func write(_ pack: RegionPack, baseURL: String?, finalPath: String, to dir: String,
                      progress: Exporter.Progress?) throws -> ExportResult {
        try pack.requireResources()
        // `dir` is new, in the exporter's private work folder (reached through /proc/self/fd).
        if Glibc.mkdir(dir, 0o755) != 0 { throw ExportError("cannot create \(dir): \(SystemError("mkdir", dir).errnoDescription)") }
        let w = Writer(root: dir)
        var prefix = baseURL ?? ""
        if !prefix.isEmpty && !prefix.hasSuffix("/") { prefix += "/" }

        // Tiles and a TileJSON per tile source.
        var tileURL: [String: String] = [:]
        var formats: [String: TileFormat] = [:]
        var tiles = 0, done = 0
        let total = pack.plan.tileCount
        for set in pack.plan.tileSets {
            let src = try safe(set.source, "source")
            let format = try pack.tileFormat(of: set)
            formats[set.source] = format
            try w.folder("tiles/\(src)")
            // In manifest order, not pack order: the files are made in the order of their
            // folders (z/x), which the filesystem does far faster than the scattered order of the
            // packs (measured in docs/export.md); each is copied from its pack all the same.
            try pack.forEachTile(of: set.source) { (t, line) throws in
                done += 1
                if done % 4096 == 0 { try progress?(done, total) }
                let rel = "tiles/\(src)/\(t.z)/\(t.x)/\(t.y).\(format.rawValue)"
                guard let sha = line.sha256 else {
                    // An empty vector tile (404/204) is an empty file: clients read it as a tile with
                    // no features instead of asking again. An empty raster tile stays absent.
                    if format == .pbf { try w.folder("tiles/\(src)/\(t.z)/\(t.x)"); try w.file(rel, []); tiles += 1 }
                    return
                }
                try w.folder("tiles/\(src)/\(t.z)/\(t.x)")
                if let object = pack.objectPath(sha) {
                    if format == .pbf && storedAsGzip(object) {
                        try w.decoded(rel, pack: pack, sha: sha, key: line.key) // served decoded, like every other tile here
                    } else {
                        try w.link(object, rel, pack: pack, sha: sha, key: line.key)
                    }
                } else {
                    // Copied from its pack (copy_file_range on a local store: the kernel copies or
                    // shares extents; S3: the bytes are read). A vector tile stored as gzip is then
                    // written again, decoded.
                    try w.copy(rel, pack: pack, sha: sha, at: nil, key: line.key, decodeGzip: format == .pbf)
                }
                tiles += 1
            }
            let url = "\(prefix)tiles/\(urlSegment(src))/{z}/{x}/{y}.\(format.rawValue)"
            tileURL[set.source] = url
            var tj = try pack.sourceMetadata(set.source)
            tj["tilejson"] = "3.0.0"
            tj["tiles"] = [url]
            tj["scheme"] = "xyz"
            if let z = pack.exportZooms(set) ?? RegionPack.zoomRange(set) { tj["minzoom"] = z.lowerBound; tj["maxzoom"] = z.upperBound }
            let b = pack.exportBounds
            tj["bounds"] = [b.west, b.south, b.east, b.north]
            try w.folder("sources")
            try w.file("sources/\(src).json", [UInt8](JSONKind.serialize(Redaction.redactedJSON(tj), pretty: true)))
        }

        // Sprites, glyphs and data, from the plan's resources.
        var spriteBases: [String: String] = [:] // sprite id as its key shows it ("" for a single sprite) -> file base
        var dataFiles: [String: String] = [:]
        for r in pack.plan.resources {
            guard let line = pack.line(r.kind, r.key), let sha = line.sha256 else { continue }
            switch r.kind {
            case .sprite:
                let colon = r.key.firstIndex(of: ":")
                let id = colon.map { String(r.key[..<$0]) } ?? ""
                let file = colon.map { String(r.key[r.key.index(after: $0)...]) } ?? r.key // sprite@2x.png
                let base = id.isEmpty ? "sprite" : try safe(id, "sprite id")
                spriteBases[id] = base
                try w.folder("sprites")
                try w.decoded("sprites/" + base + file.dropFirst("sprite".count), pack: pack, sha: sha, key: r.key)
            case .glyphs:
                guard let slash = r.key.lastIndex(of: "/") else { continue }
                // The folder is the fontstack itself: MapLibre fills `{fontstack}` with the
                // style's name, which the web server decodes back to it. A name with a control
                // character keeps its key (no client asks for it).
                let named = ManifestLine.unescapeKey(String(r.key[..<slash]))
                let stack = try safe(named.utf8.contains(where: { $0 < 0x20 }) ? String(r.key[..<slash]) : named, "fontstack")
                let range = try safe(String(r.key[r.key.index(after: slash)...]), "glyph range")
                try w.folder("fonts/\(stack)")
                try w.decoded("fonts/\(stack)/\(range).pbf", pack: pack, sha: sha, key: r.key)
            case .data:
                let name = try safe(r.key, "source")
                let ext = ((r.url.split(separator: "?").first.map(String.init) ?? r.url) as NSString).pathExtension
                let file = "data/\(name).\(ext.isEmpty || ext.count > 8 ? "json" : ext)"
                try w.folder("data")
                try w.decoded(file, pack: pack, sha: sha, key: r.key)
                dataFiles[r.key] = "data/\(urlSegment(name)).\(ext.isEmpty || ext.count > 8 ? "json" : ext)"
            default: break
            }
        }

        // The style, rewritten.
        var style: [String: Any]
        if let s = try pack.jsonDocument(.style, "style") {
            style = s
        } else {
            // A tiles request: a style with the sources, and a raster layer per raster source.
            var sources: [String: Any] = [:], layers: [Any] = []
            for set in pack.plan.tileSets {
                let vector = formats[set.source] == .pbf
                sources[set.source] = ["type": vector ? "vector" : "raster", "tileSize": 256]
                if !vector { layers.append(["id": set.source, "type": "raster", "source": set.source]) }
            }
            style = ["version": 8, "name": pack.id, "sources": sources, "layers": layers]
        }
        var sources = style["sources"] as? [String: Any] ?? [:]
        for (name, value) in sources {
            guard var s = value as? [String: Any] else { continue }
            // Files are named by the source's manifest key, not the style's name: one escaping, in one place.
            let key = ManifestLine.sanitizeKey(name)
            if tileURL[key] != nil {
                s["url"] = "\(prefix)sources/\(urlSegment(try safe(key, "source"))).json"
                s.removeValue(forKey: "tiles")
            } else if let file = dataFiles[key] {
                if s["type"] as? String == "image" { s["url"] = prefix + file } else { s["data"] = prefix + file }
            }
            sources[name] = s
        }
        style["sources"] = sources
        // Every sprite points into the site; one the server did not have (404: recorded missing)
        // is left out rather than pointing back at the origin, whose URL may carry a key.
        if style["sprite"] is String {
            if let base = spriteBases[""] { style["sprite"] = "\(prefix)sprites/\(urlSegment(base))" } else { style.removeValue(forKey: "sprite") }
        } else if let arr = style["sprite"] as? [Any] {
            style["sprite"] = arr.compactMap { e -> Any? in
                guard var o = e as? [String: Any], let id = o["id"] as? String, let base = spriteBases[ManifestLine.sanitizeKey(id)] else { return nil }
                o["url"] = "\(prefix)sprites/\(urlSegment(base))"
                return o
            }
        }
        if style["glyphs"] != nil { style["glyphs"] = "\(prefix)fonts/{fontstack}/{range}.pbf" }
        // What still points at the origin (a video source's URLs, metadata, attribution links)
        // keeps no credential: the site is published.
        try w.file("style.json", [UInt8](JSONKind.serialize(Redaction.redactedJSON(style), pretty: true)))
        try w.file("nginx.conf", [UInt8](try nginxSnippet(id: pack.id, baseURL: baseURL, path: finalPath).utf8))
        // Says that TileSpool made this folder: only such a folder is replaced by a later export.
        try w.file(Exporter.siteMarker, [UInt8]("TileSpool site export of region \(pack.id)\n".utf8))
        try progress?(done, total)
        return ExportResult(format: .site, source: nil, path: dir, bytes: w.bytes, tiles: tiles, sha256: nil)
    }

    /// True when the object's first bytes are gzip's magic number.
    static func storedAsGzip(_ path: String) -> Bool {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { Glibc.close(fd) }
        var magic: [UInt8] = [0, 0]
        return Glibc.read(fd, &magic, 2) == 2 && isGzip(magic)
    }

    /// An nginx `location` block serving the folder at `path`: under the path of `baseURL`, or
    /// `/<id>/` without one; the right Content-Type per extension, CORS for pages on other origins,
    /// and gzip in transit for JSON and vector tiles (the files themselves are stored decoded).
    /// Both values are written as quoted nginx strings (`NginxConfig.quoted`).
    /// - Throws: `ExportError` when one cannot be written in nginx's syntax (a control character
    ///   in the base URL's path; a `$` in the folder's path, which `alias` would read as a variable).
    static func nginxSnippet(id: String, baseURL: String?, path: String) throws(ExportError) -> String {
        var location = "/\(id)/"
        if let baseURL, let u = URLComponents(string: baseURL) {
            location = u.path.isEmpty ? "/" : u.path
            if !location.hasSuffix("/") { location += "/" }
        }
        let quotedLocation: String, quotedAlias: String
        do {
            quotedLocation = try NginxConfig.quoted(location, variablesExpanded: false)
        } catch { throw ExportError("the base URL's path cannot be written in nginx.conf: \(error.message)") }
        do {
            quotedAlias = try NginxConfig.quoted(path + "/", variablesExpanded: true)
        } catch { throw ExportError("the site folder's path \(NginxConfig.comment(path)) cannot be written in nginx.conf: \(error.message)") }
        return """
        # nginx: serves the TileSpool site export of region '\(id)'. Put this block inside a
        # `server { ... }` and reload nginx. The style is at \(NginxConfig.comment(location))style.json.
        location ^~ \(quotedLocation) {
            alias \(quotedAlias);
            types {
                application/json json;
                application/x-protobuf pbf;
                image/png png;
                image/jpeg jpg;
                image/webp webp;
            }
            default_type application/octet-stream;
            add_header Access-Control-Allow-Origin * always;
            # This file (it names the folder) and the marker are not part of the site.
            location ~ /(nginx\\.conf|\\.tilespool-site)$ { return 404; }
            # Tiles are stored decoded; compress JSON and vector tiles on the way out.
            gzip on;
            gzip_types application/json application/x-protobuf;
        }

        """
    }
}
