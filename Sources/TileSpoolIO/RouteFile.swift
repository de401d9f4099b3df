import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif
import TileSpoolCore

/// Reads the files people have — GPX tracks and routes, GeoJSON — into the GeoJSON values a
/// request embeds (`corridor.line`, `geometry`). The one reader for every command that takes
/// `--corridor FILE` or `--geometry FILE` (`plan`, and `submit`/`get`): the CLI embeds what it
/// returns in the request, so the daemon never opens a path named in a request.
///
/// Pure apart from its XML parser: bytes in, a value out. The format is told from the first
/// byte after any UTF-8 byte order mark and white space: `<` is GPX, `{` is GeoJSON.
public enum RouteFile {
    /// An `xsd:decimal` as GPX 1.1 gives `lat` and `lon` (XML Schema Part 2, section 3.2.3):
    /// an optional sign, digits with an optional fraction, surrounding white space collapsed;
    /// nil for anything else (Swift's `Double` would also take `0x10`, `1e2`, `inf` or `nan`).
    static func decimal(_ text: String) -> Double? {
        let t = text.trimmingCharacters(in: .whitespacesAndNewlines)
        var digits = 0, dots = 0
        for (i, c) in t.unicodeScalars.enumerated() {
            switch c {
            case "+", "-": if i != 0 { return nil }
            case ".": dots += 1; if dots > 1 { return nil }
            case "0"..."9": digits += 1
            default: return nil
            }
        }
        return digits > 0 ? Double(t) : nil
    }

    /// Why a file cannot be used: a message naming what is wrong in it.
    public struct Failure: Error, CustomStringConvertible, Sendable {
        public var description: String
        init(_ d: String) { description = d }
    }

    /// The lines of a GPX or GeoJSON file, for a corridor.
    /// - GPX 1.1 (and 1.0): each track segment (`trk/trkseg/trkpt`) and each route
    ///   (`rte/rtept`) is a line, in file order; `lat`/`lon` attributes in degrees (WGS 84);
    ///   waypoints (`wpt`) and every other element are ignored. A segment or route of one point
    ///   is left out.
    /// - GeoJSON: a LineString or MultiLineString, or a Feature/FeatureCollection/GeometryCollection
    ///   of them (`Corridor.parseLines`).
    /// - Returns: `{"type": "MultiLineString", "coordinates": [[[lon, lat], ...], ...]}`, coordinates
    ///   rounded to 7 decimals (about 1 cm), ready to embed as `corridor.line`.
    /// - Throws: `Failure` for a file that is neither, malformed XML or JSON, or has no line.
    public static func line(from data: Data) throws -> [String: Any] {
        let lines: [[[Double]]]
        switch try kind(data) {
        case .gpx:
            lines = try gpxLines(data).filter { $0.count >= 2 }
            if lines.isEmpty { throw Failure("the GPX file has no track segment or route of two points or more") }
        case .geojson:
            switch Corridor.parseLines(try json(data)) {
            case .success(let l): lines = l
            case .failure(let e): throw Failure("the GeoJSON file: \(e.message)")
            }
        }
        return ["type": "MultiLineString", "coordinates": lines.map { $0.map { $0.map(rounded) } }]
    }

    /// The area of a GeoJSON or GPX file, for a `geometry` region.
    /// - GeoJSON: a Polygon or MultiPolygon, or a Feature/FeatureCollection/GeometryCollection
    ///   of them (`RegionShape.parse`), returned as given.
    /// - GPX: each track segment and route of at least 3 points is the outline of a polygon
    ///   (closed if its last point is not its first), returned as a MultiPolygon.
    /// - Throws: `Failure` naming what is wrong.
    public static func geometry(from data: Data) throws -> [String: Any] {
        switch try kind(data) {
        case .gpx:
            var polygons: [[[[Double]]]] = []
            for var l in try gpxLines(data) where l.count >= 3 {
                if l.first! != l.last! { l.append(l[0]) }
                polygons.append([l.map { $0.map(rounded) }])
            }
            if polygons.isEmpty { throw Failure("the GPX file has no track segment or route of three points or more to use as an outline") }
            let g: [String: Any] = ["type": "MultiPolygon", "coordinates": polygons]
            if case .failure(let e) = RegionShape.parse(g) { throw Failure("the GPX outline: \(e.message)") }
            return g
        case .geojson:
            let v = try json(data)
            if case .failure(let e) = RegionShape.parse(v) { throw Failure("the GeoJSON file: \(e.message)") }
            guard let o = v as? [String: Any] else { throw Failure("the GeoJSON file must hold an object") }
            return o
        }
    }

    enum Kind { case gpx, geojson }

    static func kind(_ data: Data) throws -> Kind {
        var bytes = data[...]
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes = bytes.dropFirst(3) }
        guard let first = bytes.first(where: { ![0x20, 0x09, 0x0A, 0x0D].contains($0) }) else { throw Failure("the file is empty") }
        switch first {
        case UInt8(ascii: "<"): return .gpx
        case UInt8(ascii: "{"): return .geojson
        default: throw Failure("the file is neither GPX (XML, starting with '<') nor GeoJSON (a JSON object, starting with '{')")
        }
    }

    static func json(_ data: Data) throws -> Any {
        do { return try JSONKind.parse(data) } catch { throw Failure("the GeoJSON file is \(error.message)") }
    }

    static func rounded(_ v: Double) -> Double { (v * 1e7).rounded() / 1e7 }

    /// The track segments and routes of a GPX document, as `[lon, lat]` lines in file order.
    static func gpxLines(_ data: Data) throws -> [[[Double]]] {
        let reader = GPXReader()
        let parser = XMLParser(data: data)
        parser.shouldProcessNamespaces = true
        parser.shouldResolveExternalEntities = false
        parser.delegate = reader
        let ok = parser.parse()
        if let f = reader.failure { throw f }
        guard ok, parser.parserError == nil, reader.xmlError == nil, reader.depth == 0 else {
            throw Failure("the GPX file is not well-formed XML (line \(parser.lineNumber), column \(parser.columnNumber)): \((reader.xmlError ?? parser.parserError).map { "\($0)" } ?? "unclosed elements")")
        }
        guard reader.sawGPX else { throw Failure("the XML file is not GPX: its root element is not <gpx>") }
        return reader.lines
    }

    /// An `XMLParser` delegate collecting `trkseg/trkpt` and `rte/rtept` points.
    final class GPXReader: NSObject, XMLParserDelegate {
        var lines: [[[Double]]] = []
        var current: [[Double]]?
        var failure: Failure?
        var sawGPX = false
        var depth = 0
        var xmlError: Error?

        func parser(_ parser: XMLParser, parseErrorOccurred error: Error) { xmlError = xmlError ?? error }

        func parser(_ parser: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?, attributes: [String: String] = [:]) {
            depth += 1
            let local = name.split(separator: ":").last.map(String.init) ?? name
            if depth == 1 { sawGPX = local == "gpx" }
            switch local {
            case "trkseg", "rte": current = []
            case "trkpt", "rtept":
                guard current != nil else { return }
                guard let la = attributes["lat"], let lo = attributes["lon"], let lat = RouteFile.decimal(la),
                      let lon = RouteFile.decimal(lo), lat.isFinite, lon.isFinite,
                      (-90...90).contains(lat), (-180...180).contains(lon) else {
                    failure = failure ?? Failure("the GPX file's <\(local)> at line \(parser.lineNumber) needs lat (-90...90) and lon (-180...180) attributes in degrees")
                    parser.abortParsing()
                    return
                }
                current!.append([lon, lat])
            default: break
            }
        }

        func parser(_ parser: XMLParser, didEndElement name: String, namespaceURI: String?, qualifiedName: String?) {
            depth -= 1
            let local = name.split(separator: ":").last.map(String.init) ?? name
            if (local == "trkseg" || local == "rte"), let c = current {
                lines.append(c)
                current = nil
            }
        }
    }
}
