// What a region's status says beside its state when something is probably not what the user
// meant: pure functions from a request (or counts) to warnings, and the area a request covers.
import Foundation

/// A warning in a status (`warnings`: `[{"code", "message"}]`, docs/contract.md): the region goes
/// on, but a person should look. Codes are stable; messages are for people.
public struct RegionWarning: Sendable, Equatable {
    public var code: String
    public var message: String
    public init(code: String, message: String) { self.code = code; self.message = message }

    // Written and read as `{"code", "message"}` (`Codable`, StatusModel.swift).

    /// `bounds` with `west > east`: a box across the antimeridian, as MapLibre reads it, but more
    /// often a west and east given the wrong way round.
    public static let boundsCrossAntimeridian = "boundsCrossAntimeridian"
    /// The request replaced a completed region's pack (same id, another download).
    public static let packReplaced = "packReplaced"
    /// A tile source whose every tile was empty (an empty status or body: 204, 404, ...).
    public static let sourceEmpty = "sourceEmpty"

    /// The warnings a request itself deserves (before anything is fetched): today the
    /// antimeridian one, naming the width of the box the other reading would give.
    public static func of(_ request: RegionRequest) -> [RegionWarning] {
        guard request.shape == nil, request.areaParts == nil else { return [] }
        let b = request.bounds
        guard b.west > b.east else { return [] }
        let across = b.east + 360 - b.west
        return [RegionWarning(code: boundsCrossAntimeridian,
                              message: "bounds: west (\(b.west)) is greater than east (\(b.east)): the box crosses the antimeridian and is \(RegionArea.degrees(across))° wide (\(request.maxZoom > request.minZoom ? "zooms \(request.minZoom)-\(request.maxZoom)" : "zoom \(request.minZoom)")); if you meant the \(RegionArea.degrees(b.west - b.east))° between \(b.east) and \(b.west), give [\(b.east), \(b.south), \(b.west), \(b.north)]")]
    }
}

/// The ground area a region covers, for the status (`area`), so that a box in the wrong place or
/// of the wrong size shows before a single tile is counted.
public enum RegionArea {
    /// The Earth's mean radius in km (IUGG R1), for areas on the sphere.
    public static let earthRadiusKm = 6371.0088

    /// The area of the box in km² on a sphere of `earthRadiusKm`: R² · Δλ · (sin φN − sin φS),
    /// Δλ in radians (across the antimeridian when west > east). Latitudes are not clamped.
    public static func km2(_ b: GeoBounds) -> Double {
        let width = b.west <= b.east ? b.east - b.west : b.east + 360 - b.west
        let rad = Double.pi / 180
        return earthRadiusKm * earthRadiusKm * width * rad * (sin(b.north * rad) - sin(b.south * rad))
    }

    /// The status's `area`: `{"bounds": [w, s, e, n], "widthDegrees", "heightDegrees", "km2",
    /// "crossesAntimeridian", "of": "bounds" | "boundingBox"}` (`boundingBox` for a GeoJSON region:
    /// the box around its shape, not the shape's own area).
    public static func jsonObject(_ request: RegionRequest) -> [String: Any] {
        let b = request.bounds
        let width = b.west <= b.east ? b.east - b.west : b.east + 360 - b.west
        return ["bounds": [b.west, b.south, b.east, b.north], "widthDegrees": rounded(width), "heightDegrees": rounded(b.north - b.south),
                "km2": (km2(b) * 100).rounded() / 100, "crossesAntimeridian": b.west > b.east,
                "of": request.shape == nil && request.areaParts == nil ? "bounds" : "boundingBox"]
    }

    static func rounded(_ v: Double) -> Double { (v * 1e6).rounded() / 1e6 }

    /// `v` in degrees for a message: at most 6 decimals, no trailing zeros.
    public static func degrees(_ v: Double) -> String {
        var s = String(format: "%.6f", v)
        while s.hasSuffix("0") { s.removeLast() }
        if s.hasSuffix(".") { s.removeLast() }
        return s
    }
}
