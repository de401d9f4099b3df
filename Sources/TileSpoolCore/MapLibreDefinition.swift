import Foundation

/// The offline region definition MapLibre Native stores in its `regions.definition` column,
/// accepted as a request file (an import form; our own field names stay canonical):
///
///     {"style_url": "https://…/style.json", "bounds": [south, west, north, east],
///      "min_zoom": 12.0, "max_zoom": 14.0, "pixel_ratio": 2.0, "include_ideographs": false}
///
/// or with `"geometry": {GeoJSON geometry}` instead of `bounds`. Reference: maplibre-native
/// `platform/default/src/mbgl/storage/offline.cpp` (`encodeOfflineRegionDefinition`,
/// `decodeOfflineRegionDefinition`) and the comment on `regions` in `offline_schema.sql`.
/// Translated as MapLibre reads it: `bounds` in latitude-first order; `min_zoom` floored and
/// `max_zoom` ceiled (MapLibre's tile cover loads the floor, or for raster the nearest, of a
/// fractional zoom, so the integer range is never smaller than what MapLibre would load); an
/// absent `max_zoom` (MapLibre's "up to each source's maxzoom") becomes zoom 24 and is accepted only
/// with `maxTiles` to bound it; an absent `include_ideographs` is true, an absent `pixel_ratio` 1.
/// Our own fields (`id`, `context`, `maxTiles`, `exports`, `headers`, ...) may sit beside them.
public enum MapLibreRegionDefinition {
    /// MapLibre's field names; a request with any of them is read as a definition.
    static let fields = ["style_url", "bounds", "geometry", "min_zoom", "max_zoom", "pixel_ratio", "include_ideographs"]
    /// Canonical fields that say the same as a definition field and so may not sit beside one.
    static let replaced = ["style": "style_url", "tiles": "style_url", "minZoom": "min_zoom", "maxZoom": "max_zoom",
                           "pixelRatio": "pixel_ratio", "includeIdeographs": "include_ideographs"]

    /// True when the request object uses MapLibre's field names (`style_url`, `min_zoom`,
    /// `max_zoom`, `pixel_ratio` or `include_ideographs`).
    public static func isDefinition(_ o: [String: Any]) -> Bool {
        ["style_url", "min_zoom", "max_zoom", "pixel_ratio", "include_ideographs"].contains { o[$0] != nil }
    }

    /// The request object with the definition's fields replaced by ours (`style`, `bounds` as
    /// `[west, south, east, north]`, `minZoom`, `maxZoom`, `pixelRatio`, `includeIdeographs`);
    /// the other fields are kept for `RequestValidator` to check.
    /// - Throws: `RegionError` (`invalidRequest`) naming the MapLibre field that is wrong.
    public static func canonical(_ o: [String: Any]) throws(RegionError) -> [String: Any] {
        func bad(_ message: String) -> RegionError { RegionError(code: .invalidRequest, message: message) }
        for (ours, theirs) in replaced.sorted(by: { $0.key < $1.key }) where o[ours] != nil {
            throw bad("\(ours): this request is a MapLibre offline region definition (it has \(theirs)); give \(theirs) instead, not both forms")
        }
        var out = o
        for k in fields { out.removeValue(forKey: k) }
        guard let sv = o["style_url"] else { throw bad("style_url: missing; a MapLibre offline region definition names its style URL") }
        guard let style = sv as? String else { throw bad("style_url: must be a string URL, not a \(JSONKind.name(sv))") }
        out["style"] = style
        if let g = o["geometry"] {
            if o["bounds"] != nil { throw bad("bounds and geometry: give exactly one of them, not both") }
            out["geometry"] = g
        } else if let bv = o["bounds"] {
            guard let b = bv as? [Any], b.count == 4, b.allSatisfy({ JSONKind.number($0) != nil }) else {
                throw bad("bounds: a MapLibre definition's bounds are 4 numbers [south, west, north, east] in degrees")
            }
            out["bounds"] = [b[1], b[0], b[3], b[2]]
        } else {
            throw bad("bounds: missing; a MapLibre definition gives bounds [south, west, north, east] or a geometry")
        }
        func zoom(_ key: String) throws(RegionError) -> Double? {
            guard let v = o[key] else { return nil }
            guard let z = JSONKind.number(v), z.isFinite, z >= 0 else { throw bad("\(key): must be a number of at least 0") }
            return z
        }
        guard let minZoom = try zoom("min_zoom") else { throw bad("min_zoom: missing; give the lowest zoom, e.g. 0") }
        guard minZoom <= Double(RequestValidator.maxZoomLevel) else {
            throw bad("min_zoom (\(minZoom)) must be at most \(RequestValidator.maxZoomLevel), the highest zoom downloaded")
        }
        let lo = Int(floor(minZoom))
        let hi: Int
        if let maxZoom = try zoom("max_zoom") {
            guard maxZoom >= minZoom else { throw bad("max_zoom (\(maxZoom)) is less than min_zoom (\(minZoom))") }
            hi = Int(ceil(min(maxZoom, Double(RequestValidator.maxZoomLevel))))
        } else {
            guard let m = o["maxTiles"], !(m is NSNull) else {
                throw bad("max_zoom: missing, which in MapLibre means each source's highest zoom; give max_zoom, or maxTiles to bound the download")
            }
            hi = RequestValidator.maxZoomLevel
        }
        out["minZoom"] = NSNumber(value: lo)
        out["maxZoom"] = NSNumber(value: hi)
        if let v = o["pixel_ratio"] {
            guard JSONKind.number(v) != nil else { throw bad("pixel_ratio: must be a number, not a \(JSONKind.name(v))") }
            out["pixelRatio"] = v
        }
        if let v = o["include_ideographs"] {
            guard JSONKind.isBool(v) else { throw bad("include_ideographs: must be true or false, not a \(JSONKind.name(v))") }
            out["includeIdeographs"] = v
        } else {
            out["includeIdeographs"] = NSNumber(value: true)
        }
        return out
    }
}
