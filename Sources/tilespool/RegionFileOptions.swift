import Foundation
import TileSpoolCore
import TileSpoolIO

/// `--geometry FILE` and `--corridor FILE --buffer-meters N`, shared by the commands that take a
/// request (`plan`; `submit` and `get` to come): the file (GPX or GeoJSON, read by `RouteFile`)
/// is embedded in the request as `geometry` or `corridor`, so the daemon never opens a path named
/// in a request.
enum RegionFileOptions {
    /// The option names, for `Arguments(valued:)`.
    static let valued: Set<String> = ["--geometry", "--corridor", "--buffer-meters"]

    /// The help text's lines for these options.
    static let help = """
    --geometry FILE      the region is the polygons of FILE (GeoJSON Polygon/MultiPolygon, or a
                         GPX file whose tracks and routes are outlines), embedded as `geometry`
    --corridor FILE      the region is the ground within --buffer-meters of the line in FILE (a
                         GPX 1.1 file's tracks and routes, or a GeoJSON LineString or
                         MultiLineString), embedded as `corridor`
    --buffer-meters N    the corridor's buffer in metres on either side (with --corridor)
    """

    /// `requestData` with the file of `--geometry` or `--corridor` embedded, or unchanged when
    /// neither is given. The request must not name an area of its own (bounds, geometry,
    /// corridor or parts).
    /// - Throws: `UsageError` for a wrong combination of options; `CommandFailure` for a file
    ///   that cannot be read or used, or a request that is not a JSON object.
    static func embed(_ requestData: Data, _ a: Arguments) throws -> Data {
        let geometry = a.options["--geometry"], corridor = a.options["--corridor"], buffer = a.options["--buffer-meters"]
        if geometry == nil && corridor == nil {
            if buffer != nil { throw UsageError("--buffer-meters goes with --corridor FILE") }
            return requestData
        }
        if geometry != nil && corridor != nil { throw UsageError("give --geometry or --corridor, not both") }
        if corridor != nil && buffer == nil { throw UsageError("--corridor FILE needs --buffer-meters N (metres on either side of the line)") }
        if geometry != nil && buffer != nil { throw UsageError("--buffer-meters goes with --corridor FILE, not --geometry") }
        let parsed: Any
        do { parsed = try JSONKind.parse(requestData, uniqueKeys: true) } catch { throw CommandFailure("the request is \(error.message)") }
        guard var o = parsed as? [String: Any] else {
            throw CommandFailure("the request is not a JSON object; --geometry and --corridor add to a request object")
        }
        let named = ["bounds", "geometry", "corridor", "parts"].filter { o[$0] != nil }
        if !named.isEmpty {
            throw CommandFailure("the request already names its area (\(named.joined(separator: ", "))); remove it to use \(geometry != nil ? "--geometry" : "--corridor")")
        }
        let path = geometry ?? corridor!
        let data = try Files.readRegularFile(path, limit: 64 << 20)
        do {
            if geometry != nil {
                o["geometry"] = try RouteFile.geometry(from: data)
            } else {
                guard let d = Double(buffer!), d.isFinite else { throw UsageError("--buffer-meters must be a number of metres") }
                o["corridor"] = ["line": try RouteFile.line(from: data), "bufferMeters": d] as [String: Any]
            }
        } catch let e as RouteFile.Failure {
            throw CommandFailure("\(path): \(e.description)")
        }
        let out = JSONKind.serialize(o)
        if out.count > RequestValidator.maxFileSize {
            throw CommandFailure("\(path): the request with it embedded is \(out.count) bytes, more than the \(RequestValidator.maxFileSize) a request may have; simplify the \(geometry != nil ? "outline" : "track") to fewer points first")
        }
        return out
    }
}
