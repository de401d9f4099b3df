import Foundation

/// A tile of the Web Mercator (EPSG:3857) tile pyramid in XYZ numbering: `x` grows eastwards from
/// the antimeridian, `y` grows southwards from the north edge (85.0511° N), both in `0..<2^z`.
/// Reference: OSM wiki "Slippy map tilenames"; TMS rows are `2^z - 1 - y`.
public struct TileID: Hashable, Sendable, Comparable, CustomStringConvertible {
    public var z: Int
    public var x: Int
    public var y: Int
    public init(z: Int, x: Int, y: Int) { self.z = z; self.x = x; self.y = y }

    /// The TMS row of this tile (`2^z - 1 - y`), as used by MBTiles and `{-y}` templates.
    public var tmsY: Int { (1 << z) - 1 - y }

    /// The Bing Maps quadkey of this tile (one base-4 digit per zoom level; empty at z0).
    /// Reference: https://learn.microsoft.com/bingmaps/articles/bing-maps-tile-system
    public var quadkey: String {
        var digits = [Character]()
        digits.reserveCapacity(z)
        for level in stride(from: z, to: 0, by: -1) {
            let mask = 1 << (level - 1)
            var d = 0
            if x & mask != 0 { d += 1 }
            if y & mask != 0 { d += 2 }
            digits.append(Character(String(d)))
        }
        return String(digits)
    }

    public var description: String { "\(z)/\(x)/\(y)" }

    public static func < (a: TileID, b: TileID) -> Bool {
        (a.z, a.y, a.x) < (b.z, b.y, b.x)
    }
}

/// An inclusive rectangle of tiles at one zoom: columns `minX...maxX`, rows `minY...maxY` (XYZ).
public struct TileRect: Hashable, Sendable, Codable {
    public var z: Int
    public var minX: Int
    public var minY: Int
    public var maxX: Int
    public var maxY: Int
    public init(z: Int, minX: Int, minY: Int, maxX: Int, maxY: Int) {
        self.z = z; self.minX = minX; self.minY = minY; self.maxX = maxX; self.maxY = maxY
    }
    /// The zooms a plan reaches (map zoom 24 with 64 px tiles asks tile zoom 26; 30 leaves room).
    public static let zoomRange = 0...30
    /// True when `z` is in `zoomRange` and the rectangle lies within that zoom's tiles
    /// (`0 ..< 2^z` both ways) with `min <= max`: what every planned rectangle is, and what a
    /// rectangle read from `plan.json` must be before `width`, `count` or `tile(at:)` are used.
    public var isValid: Bool {
        guard TileRect.zoomRange.contains(z) else { return false }
        let n = 1 << z
        return minX >= 0 && minX <= maxX && maxX < n && minY >= 0 && minY <= maxY && maxY < n
    }
    public var width: Int { maxX - minX + 1 }
    public var height: Int { maxY - minY + 1 }
    /// Number of tiles in the rectangle; `Int.max` when that does not fit an `Int` (never at the
    /// zooms a plan reaches, 0...30: at most 2^60).
    public var count: Int { SaturatingCount.multiply(width, height) }
    /// The tile at row-major position `i` (`0..<count`).
    public func tile(at i: Int) -> TileID { TileID(z: z, x: minX + i % width, y: minY + i / width) }
    /// The row-major position of `t`, or nil when `t` lies outside.
    public func index(of t: TileID) -> Int? {
        guard t.z == z, t.x >= minX, t.x <= maxX, t.y >= minY, t.y <= maxY else { return nil }
        return (t.y - minY) * width + (t.x - minX)
    }
}

/// Tile counts that stop at `Int.max` (2^63 - 1) instead of trapping on overflow. A plan may name
/// more tiles than an `Int` holds (1,000 sources of 64 px tiles, each loading zoom 27 at map zoom
/// 24, name about 2.4e19): its count is then `Int.max`, which every tile limit refuses
/// (`RequestValidator.tileLimitError`). Counts are never negative.
public enum SaturatingCount {
    /// `a + b`, or `Int.max` when the sum overflows.
    @inlinable public static func add(_ a: Int, _ b: Int) -> Int {
        let (r, o) = a.addingReportingOverflow(b)
        return o ? Int.max : r
    }
    /// `a * b`, or `Int.max` when the product overflows.
    @inlinable public static func multiply(_ a: Int, _ b: Int) -> Int {
        let (r, o) = a.multipliedReportingOverflow(by: b)
        return o ? Int.max : r
    }
    /// The sum of `counts`, `Int.max` once it overflows.
    @inlinable public static func sum<S: Sequence>(_ counts: S) -> Int where S.Element == Int {
        counts.reduce(0, add)
    }
}

/// A geographic bounding box in degrees (WGS 84): `west`, `south`, `east`, `north`.
/// `west > east` means the box crosses the antimeridian.
public struct GeoBounds: Hashable, Sendable {
    public var west: Double
    public var south: Double
    public var east: Double
    public var north: Double
    public init(west: Double, south: Double, east: Double, north: Double) {
        self.west = west; self.south = south; self.east = east; self.north = north
    }
}

/// Web Mercator tile arithmetic. Formulas: OSM wiki "Slippy map tilenames" (lon/lat to tile numbers);
/// the latitude limit is atan(sinh(π)) = 85.0511287798° (EPSG:3857's square world).
public enum WebMercator {
    /// The largest latitude Web Mercator can show, in degrees.
    public static let maxLatitude = 85.0511287798066

    /// Fractional tile column of longitude `lon` (degrees) at zoom `z`.
    public static func tileX(lon: Double, z: Int) -> Double {
        (lon + 180.0) / 360.0 * Double(1 << z)
    }

    /// Fractional tile row of latitude `lat` (degrees, clamped to ±85.0511) at zoom `z`.
    public static func tileY(lat: Double, z: Int) -> Double {
        let clamped = min(max(lat, -maxLatitude), maxLatitude)
        let phi = clamped * .pi / 180.0
        return (1.0 - log(tan(phi) + 1.0 / cos(phi)) / .pi) / 2.0 * Double(1 << z)
    }

    /// The tiles at zoom `z` that cover `bounds`, as one rectangle (or two when the box crosses the
    /// antimeridian). A box edge lying exactly on a tile edge does not pull in the neighbouring tile
    /// (half-open cover, as MapLibre Native's `util::tileCount`). Latitudes are clamped to ±85.0511°.
    public static func cover(_ bounds: GeoBounds, z: Int) -> [TileRect] {
        let n = 1 << z
        let yTop = tileY(lat: bounds.north, z: z)
        let yBottom = tileY(lat: bounds.south, z: z)
        let minY = clampTile(Int(floor(yTop)), n)
        let maxY = clampTile(max(Int(ceil(yBottom)) - 1, Int(floor(yTop))), n)
        func columns(_ w: Double, _ e: Double) -> (Int, Int) {
            let x0 = tileX(lon: w, z: z)
            let x1 = tileX(lon: e, z: z)
            let lo = clampTile(Int(floor(x0)), n)
            let hi = clampTile(max(Int(ceil(x1)) - 1, Int(floor(x0))), n)
            return (lo, hi)
        }
        if bounds.west <= bounds.east {
            let (lo, hi) = columns(bounds.west, bounds.east)
            return [TileRect(z: z, minX: lo, minY: minY, maxX: hi, maxY: maxY)]
        }
        let (lo1, hi1) = columns(bounds.west, 180)
        let (lo2, hi2) = columns(-180, bounds.east)
        if hi2 >= lo1 { // the two halves meet: the whole row
            return [TileRect(z: z, minX: 0, minY: minY, maxX: n - 1, maxY: maxY)]
        }
        return [TileRect(z: z, minX: lo2, minY: minY, maxX: hi2, maxY: maxY),
                TileRect(z: z, minX: lo1, minY: minY, maxX: hi1, maxY: maxY)]
    }

    private static func clampTile(_ v: Int, _ n: Int) -> Int { min(max(v, 0), n - 1) }

    /// The Web Mercator bounding box of a tile in metres, `[minX, minY, maxX, maxY]`, for `{bbox-epsg-3857}`.
    public static func bbox3857(_ t: TileID) -> (Double, Double, Double, Double) {
        let size = 2 * 20037508.342789244 / Double(1 << t.z)
        let minX = -20037508.342789244 + Double(t.x) * size
        let maxY = 20037508.342789244 - Double(t.y) * size
        return (minX, maxY - size, minX + size, maxY)
    }

    /// MapLibre's covering-zoom rule: the tile zoom a source of `tileSize` pixels loads when the map
    /// shows zoom `zoom`. Tiles count as 512 px for vector sources; raster sources round, other
    /// sources floor. Reference: maplibre-native `src/mbgl/util/tile_cover.cpp`, `coveringZoomLevel`.
    public static func coveringZoom(_ zoom: Int, tileSize: Int, rounds: Bool) -> Int {
        let z = Double(zoom) + log2(512.0 / Double(tileSize))
        return Int(rounds ? z.rounded() : floor(z))
    }
}
