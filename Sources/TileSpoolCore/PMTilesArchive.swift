import Foundation

// Reading PMTiles v3 archives as a tile source (issue 31), pure: bytes in, values out. The
// encoder the exports use is in Export.swift (`PMTiles`); this extension is its reader and the
// planner of range requests over a remote archive.
// Reference: protomaps/PMTiles `spec/v3/spec.md` (header, section 3; directories, section 4;
// TileId, section 4.1; compression enums, section 3.3).

extension PMTiles {
    /// The prefix of a PMTiles source URL (`pmtiles://https://host/x.pmtiles`), as MapLibre's
    /// `pmtiles` protocol and the Protomaps styles write it.
    public static let sourceScheme = "pmtiles://"

    /// The archive URL inside a `pmtiles://URL` source (any case of the prefix), or nil when
    /// `s` does not start with `pmtiles://`. The inner URL is not checked here
    /// (`RequestValidator.urlProblem` is, by the callers).
    public static func innerURL(_ s: String) -> String? {
        guard s.utf8.count > sourceScheme.utf8.count, s.prefix(sourceScheme.count).lowercased() == sourceScheme else { return nil }
        return String(s.dropFirst(sourceScheme.count))
    }

    /// The http(s) URL of the PMTiles archive a `tiles` entry or style source names, or nil when
    /// it names none: `pmtiles://URL` gives URL; an `http://` or `https://` URL whose path
    /// (before `?` or `#`) ends in `.pmtiles` (any case) and has no `{` token is itself the archive.
    public static func archiveURL(_ s: String) -> String? {
        if let inner = innerURL(s) { return inner }
        let lower = s.lowercased()
        guard lower.hasPrefix("http://") || lower.hasPrefix("https://"), !s.contains("{") else { return nil }
        let path = lower.prefix { $0 != "?" && $0 != "#" }
        return path.hasSuffix(".pmtiles") ? s : nil
    }

    /// Why an archive's bytes cannot be read: a message for the user (the version of an
    /// archive that is not v3, a header or directory that is cut short or damaged).
    public struct ArchiveError: Error, Sendable, Equatable, CustomStringConvertible {
        /// What is wrong, for the user.
        public var message: String
        /// An error saying `message`.
        public init(_ message: String) { self.message = message }
        /// `message`.
        public var description: String { message }
    }

    /// Size of the v3 header in bytes (spec section 3).
    public static let headerSize = 127

    /// The most entries one directory may hold (go-pmtiles writes leaves of a few thousand): a
    /// directory of more is refused as damaged, so a small archive cannot make a plan read
    /// millions of entries (a gzip leaf of 60 MB inflates from 58 KB).
    public static let maxDirectoryEntries = 1_000_000

    /// How deep leaf directories may nest before an archive is refused as damaged (the spec's
    /// writers use at most one level of leaves; go-pmtiles reads at most 4 levels deep).
    public static let maxDirectoryDepth = 4

    /// Decodes the fixed 127-byte v3 header (spec section 3; integers little-endian, bounds and
    /// center as int32 degrees x 10^7).
    /// - Parameter bytes: at least the archive's first 127 bytes (more are ignored).
    /// - Returns: the header. A tile compression of 0 (unknown) is read as `none`.
    /// - Throws: `ArchiveError` when the bytes do not start with `PMTiles` (a v1/v2 archive starts
    ///   `PM` and a 16-bit version: the message names that version), when the version byte is not
    ///   3, when fewer than 127 bytes are given, or when a compression is brotli (3) or zstd (4)
    ///   or unknown, which this reader does not decode.
    public static func readHeader(_ bytes: [UInt8]) throws(ArchiveError) -> Header {
        let magic = Array("PMTiles".utf8)
        if bytes.count >= 2, bytes[0] == 0x50, bytes[1] == 0x4D, !(bytes.count >= 7 && Array(bytes[0..<7]) == magic) {
            // Spec v1 and v2: "PM", then the version as a little-endian uint16.
            if bytes.count >= 4 {
                let v = Int(bytes[2]) | Int(bytes[3]) << 8
                throw ArchiveError("the archive is PMTiles version \(v); only version 3 is supported (convert it with `pmtiles convert`)")
            }
        }
        guard bytes.count >= 8, Array(bytes[0..<7]) == magic else {
            throw ArchiveError("not a PMTiles archive: it does not start with 'PMTiles'")
        }
        guard bytes[7] == 3 else {
            throw ArchiveError("the archive is PMTiles version \(bytes[7]); only version 3 is supported")
        }
        guard bytes.count >= headerSize else {
            throw ArchiveError("the PMTiles header is cut short: \(bytes.count) of \(headerSize) bytes")
        }
        func u64(_ at: Int) -> UInt64 {
            var v: UInt64 = 0
            for i in 0..<8 { v |= UInt64(bytes[at + i]) << (8 * UInt64(i)) }
            return v
        }
        func deg(_ at: Int) -> Double {
            var v: UInt32 = 0
            for i in 0..<4 { v |= UInt32(bytes[at + i]) << (8 * UInt32(i)) }
            return Double(Int32(bitPattern: v)) / 10_000_000
        }
        func compression(_ b: UInt8, _ what: String, unknownIsNone: Bool) throws(ArchiveError) -> Compression {
            switch b {
            case 0 where unknownIsNone: return .none
            case 1: return .none
            case 2: return .gzip
            case 3: throw ArchiveError("the archive's \(what) compression is brotli, which is not supported (only none and gzip)")
            case 4: throw ArchiveError("the archive's \(what) compression is zstd, which is not supported (only none and gzip)")
            default: throw ArchiveError("the archive's \(what) compression is unknown (\(b)); only none and gzip are supported")
            }
        }
        var h = Header()
        h.rootOffset = u64(8); h.rootLength = u64(16)
        h.metadataOffset = u64(24); h.metadataLength = u64(32)
        h.leafOffset = u64(40); h.leafLength = u64(48)
        h.dataOffset = u64(56); h.dataLength = u64(64)
        h.addressedTiles = u64(72); h.tileEntries = u64(80); h.tileContents = u64(88)
        h.clustered = bytes[96] == 1
        h.internalCompression = try compression(bytes[97], "directory", unknownIsNone: false)
        h.tileCompression = try compression(bytes[98], "tile", unknownIsNone: true)
        h.tileType = bytes[99]
        h.minZoom = bytes[100]; h.maxZoom = bytes[101]
        h.minLon = deg(102); h.minLat = deg(106); h.maxLon = deg(110); h.maxLat = deg(114)
        h.centerZoom = bytes[118]
        h.centerLon = deg(119); h.centerLat = deg(123)
        guard h.minZoom <= h.maxZoom, Int(h.maxZoom) <= TileRect.zoomRange.upperBound else {
            throw ArchiveError("the PMTiles header's zooms \(h.minZoom)...\(h.maxZoom) are not usable")
        }
        return h
    }

    /// Reads an unsigned LEB128 varint at `pos`, advancing it.
    /// - Throws: `ArchiveError` when the bytes end inside the varint or it is longer than 10 bytes.
    public static func readVarint(_ bytes: [UInt8], _ pos: inout Int) throws(ArchiveError) -> UInt64 {
        var v: UInt64 = 0, shift: UInt64 = 0
        while true {
            guard pos < bytes.count else { throw ArchiveError("a PMTiles directory is cut short inside a varint") }
            let b = bytes[pos]; pos += 1
            guard shift < 64 else { throw ArchiveError("a PMTiles directory has a varint longer than 64 bits") }
            v |= UInt64(b & 0x7F) << shift
            if b < 0x80 { return v }
            shift += 7
        }
    }

    /// Decodes a directory after internal decompression (spec section 4.2): the entry count,
    /// then the TileIds as deltas, the run lengths, the lengths, and the offsets (0 = right
    /// after the previous entry's body, else offset + 1), each a column of varints.
    /// The inverse of `serializeDirectory`.
    /// - Throws: `ArchiveError` when the bytes are cut short, the count could not fit in the
    ///   bytes (each entry takes at least 4), TileIds do not increase, a length is 0 or above
    ///   2^32 - 1, or a run length is above 2^32 - 1, or bytes are left over.
    public static func readDirectory(_ bytes: [UInt8]) throws(ArchiveError) -> [Entry] {
        var pos = 0
        let n = try readVarint(bytes, &pos)
        guard n <= UInt64(bytes.count / 4) else {
            throw ArchiveError("a PMTiles directory claims \(n) entries in \(bytes.count) bytes")
        }
        guard n <= UInt64(maxDirectoryEntries) else {
            throw ArchiveError("a PMTiles directory claims \(n) entries, more than the \(maxDirectoryEntries) TileSpool reads in one directory")
        }
        let count = Int(n)
        var ids = [UInt64](repeating: 0, count: count)
        var last: UInt64 = 0
        for i in 0..<count {
            let d = try readVarint(bytes, &pos)
            let (id, over) = last.addingReportingOverflow(d)
            guard !over, i == 0 || d > 0 else { throw ArchiveError("a PMTiles directory's TileIds do not increase (entry \(i))") }
            ids[i] = id; last = id
        }
        var runs = [UInt32](repeating: 0, count: count)
        for i in 0..<count {
            let r = try readVarint(bytes, &pos)
            guard r <= UInt64(UInt32.max) else { throw ArchiveError("a PMTiles directory's run length \(r) is too large (entry \(i))") }
            runs[i] = UInt32(r)
        }
        var lengths = [UInt32](repeating: 0, count: count)
        for i in 0..<count {
            let l = try readVarint(bytes, &pos)
            guard l > 0, l <= UInt64(UInt32.max) else { throw ArchiveError("a PMTiles directory's length \(l) is not usable (entry \(i))") }
            lengths[i] = UInt32(l)
        }
        var out: [Entry] = []
        out.reserveCapacity(count)
        for i in 0..<count {
            let o = try readVarint(bytes, &pos)
            let offset: UInt64
            if o == 0 {
                guard i > 0 else { throw ArchiveError("a PMTiles directory's first offset is relative") }
                let (next, over) = out[i - 1].offset.addingReportingOverflow(UInt64(out[i - 1].length))
                guard !over else { throw ArchiveError("a PMTiles directory's offsets pass 2^64 (entry \(i))") }
                offset = next
            } else {
                offset = o - 1
            }
            out.append(Entry(tileID: ids[i], offset: offset, length: lengths[i], runLength: runs[i]))
        }
        guard pos == bytes.count else { throw ArchiveError("a PMTiles directory has \(bytes.count - pos) bytes left over") }
        return out
    }

    /// The tile z/x/y of a TileId (spec section 4.1): the inverse of `tileID(_:)`.
    /// - Returns: nil when `id` lies beyond zoom `TileRect.zoomRange.upperBound`.
    public static func tile(ofID id: UInt64) -> TileID? {
        var acc: UInt64 = 0
        for z in TileRect.zoomRange {
            let n = UInt64(1) << (2 * UInt64(z))
            if id < acc + n {
                var t = id - acc
                var x: UInt64 = 0, y: UInt64 = 0
                var s: UInt64 = 1
                let size = UInt64(1) << UInt64(z)
                while s < size {
                    let rx = 1 & (t / 2)
                    let ry = 1 & (t ^ rx)
                    if ry == 0 {
                        if rx == 1 { x = s - 1 - x; y = s - 1 - y }
                        swap(&x, &y)
                    }
                    x += s * rx; y += s * ry
                    t /= 4
                    s *= 2
                }
                return TileID(z: z, x: Int(x), y: Int(y))
            }
            acc += n
        }
        return nil
    }

    /// One tile of a region found in an archive: where its body lies in the archive file.
    public struct ArchiveTile: Sendable, Equatable, Codable {
        /// The tile (XYZ).
        public var tile: TileID
        /// The body's first byte, from the start of the archive file (the header's data offset
        /// plus the entry's offset).
        public var offset: UInt64
        /// The body's length in bytes (as stored: before the header's tile compression is undone).
        public var length: UInt32
        /// A tile at `offset` (bytes from the start of the file), `length` bytes.
        public init(tile: TileID, offset: UInt64, length: UInt32) { self.tile = tile; self.offset = offset; self.length = length }
        private enum CodingKeys: String, CodingKey { case z, x, y, o, l }
        /// Reads `[z, x, y, offset, length]` (the form `encode(to:)` writes), or `{"z", "x", "y",
        /// "o", "l"}`: the forms of plans written before `ArchiveSource` packed its tiles.
        /// - Throws: `DecodingError` for a missing or mistyped field.
        public init(from decoder: Decoder) throws {
            if var a = try? decoder.unkeyedContainer() {
                tile = TileID(z: try a.decode(Int.self), x: try a.decode(Int.self), y: try a.decode(Int.self))
                offset = try a.decode(UInt64.self); length = try a.decode(UInt32.self)
                return
            }
            let c = try decoder.container(keyedBy: CodingKeys.self)
            tile = TileID(z: try c.decode(Int.self, forKey: .z), x: try c.decode(Int.self, forKey: .x), y: try c.decode(Int.self, forKey: .y))
            offset = try c.decode(UInt64.self, forKey: .o); length = try c.decode(UInt32.self, forKey: .l)
        }
        /// Writes `[z, x, y, offset, length]`: five numbers, no keys.
        public func encode(to encoder: Encoder) throws {
            var a = encoder.unkeyedContainer()
            try a.encode(tile.z); try a.encode(tile.x); try a.encode(tile.y)
            try a.encode(offset); try a.encode(length)
        }
    }

    /// What a region takes from an archive: every tile the archive holds in the cover, sorted by
    /// offset (then TileId), with the exact totals.
    public struct ArchivePlan: Sendable, Equatable {
        /// The tiles, sorted by `offset` (tiles of one run-length entry share an offset).
        public var tiles: [ArchiveTile]
        /// Number of tiles (the manifest gets one line per tile).
        public var tileCount: Int { tiles.count }
        /// Sum of every tile's `length`: the bytes the tiles would take fetched one by one.
        public var tileBytes: Int
        /// Bytes of the distinct bodies (a run-length body counted once): the least a download
        /// of these tiles can move.
        public var bodyBytes: Int
        /// Leaf directories read to find the tiles (offset and length in the leaf section).
        public var leavesRead: [Entry]
    }

    /// Refuses a region whose tiles at an archive's zooms and within its bounds (`rects`, and
    /// `shape` when given) outnumber `limits` (the request's `maxTiles`, the daemon's
    /// `--max-tiles`) or `RegionShape.maxPlanIndexSpace`: `tileIDs` lists them, 8 bytes each,
    /// before the directories say which the archive holds. A world archive to z15 asked for the
    /// world (1.4 billion tiles, 11 GB) crashed `plan` and the daemon. Returns `tileLimitExceeded`
    /// naming the source, or nil.
    public static func regionLimitError(rects: [TileRect], shape: RegionShape?, limits: RequestValidator.TileLimits,
                                        source: String) -> RegionError? {
        var spanned = 0
        for r in rects { spanned = SaturatingCount.add(spanned, r.count) }
        var count = spanned, stopped = false
        if let shape, spanned <= RegionShape.maxPlanIndexSpace {
            // Counted only until past the limit (`RegionShape.counts`).
            (_, count, stopped) = shape.counts(in: rects, stoppingAbove: limitCount(limits))
        }
        return limitError(count: count, atLeast: stopped, rects: rects, limits: limits, source: source)
    }

    /// The most tiles a region may take from an archive: `limits.stopsAt` or
    /// `RegionShape.maxPlanIndexSpace`, the lower.
    static func limitCount(_ limits: RequestValidator.TileLimits) -> Int { min(limits.stopsAt, RegionShape.maxPlanIndexSpace) }

    /// `atLeast`: `count` counts the tiles before counting stopped, past the limit.
    static func limitError(count: Int, atLeast: Bool = false, rects: [TileRect], limits: RequestValidator.TileLimits, source: String) -> RegionError? {
        let limit = limitCount(limits)
        guard count > limit else { return nil }
        let which = limit == limits.maxTiles ? "the request's maxTiles (\(limit))"
            : limit == limits.daemonMaxTiles ? "the daemon's --max-tiles (\(limit))" : "\(limit), the most TileSpool lists"
        let zooms = rects.isEmpty ? "" : " (zooms \(rects.map(\.z).min()!) to \(rects.map(\.z).max()!))"
        return RegionError(code: .tileLimitExceeded, message: "source '\(source)': the region holds \(count == Int.max ? "more than \(Int.max - 1)" : atLeast ? "at least \(count)" : String(count)) tiles at the PMTiles archive's zooms within its bounds\(zooms), more than \(which); its tiles are listed before the directories say which the archive holds: narrow the bounds or the zooms, or split the region")
    }

    /// `regionLimitError` over a corridor or parts: the tiles the set's areas plan (`TileSet.count`
    /// of a set made with `TileSet(source:template:rects:areas:rectAreas:)`), after the
    /// rectangles' index space is checked against `RegionShape.maxPlanIndexSpace`.
    public static func regionLimitError(areaSet set: TileSet, limits: RequestValidator.TileLimits, source: String) -> RegionError? {
        if set.indexCount > RegionShape.maxPlanIndexSpace {
            return regionLimitError(rects: set.rects, shape: nil, limits: limits, source: source)
        }
        return limitError(count: set.count, rects: set.rects, limits: limits, source: source)
    }

    /// The TileIds of the tiles a corridor or parts set plans (each once), sorted; the caller has
    /// checked the count first (`regionLimitError(areaSet:)`).
    public static func tileIDs(areaSet set: TileSet) -> [UInt64] {
        let cover = TileSetCover(set)
        var ids: [UInt64] = []
        for (k, r) in set.rects.enumerated() {
            for y in r.minY...r.maxY {
                for c in cover.planned(rect: k, y: y) { for x in c { ids.append(tileID(TileID(z: r.z, x: x, y: y))) } }
            }
        }
        ids.sort()
        var out: [UInt64] = []
        out.reserveCapacity(ids.count)
        for id in ids where out.last != id { out.append(id) }
        return out
    }

    /// The TileIds of the tiles in `rects` (and within `shape`, when given), sorted. 8 bytes per
    /// tile: the caller has checked the count first (`regionLimitError`).
    public static func tileIDs(rects: [TileRect], shape: RegionShape?) -> [UInt64] {
        var ids: [UInt64] = []
        for r in rects {
            if let shape {
                let rings = shape.indexed(z: r.z)
                for y in r.minY...r.maxY {
                    for c in shape.columns(z: r.z, y: y, rings: rings) {
                        let lo = max(c.lowerBound, r.minX), hi = min(c.upperBound, r.maxX)
                        if lo <= hi { for x in lo...hi { ids.append(tileID(TileID(z: r.z, x: x, y: y))) } }
                    }
                }
            } else {
                for y in r.minY...r.maxY { for x in r.minX...r.maxX { ids.append(tileID(TileID(z: r.z, x: x, y: y))) } }
            }
        }
        ids.sort()
        // Two rectangles of one zoom never overlap (WebMercator.cover), but dedup costs nothing.
        var out: [UInt64] = []
        out.reserveCapacity(ids.count)
        for id in ids where out.last != id { out.append(id) }
        return out
    }

    /// The tile rectangles of a region in an archive: `bounds` at zooms `minZoom...maxZoom`
    /// clipped by the header's zooms and bounds, as a TileJSON's `minzoom`, `maxzoom` and
    /// `bounds` are honoured (`Planner.plan`).
    public static func cover(_ bounds: GeoBounds, minZoom: Int, maxZoom: Int, header: Header) -> [TileRect] {
        let lo = max(minZoom, Int(header.minZoom)), hi = min(maxZoom, Int(header.maxZoom))
        let region = Planner.rects(bounds, lo, hi)
        let hb = GeoBounds(west: header.minLon, south: header.minLat, east: header.maxLon, north: header.maxLat)
        guard hb.west < hb.east, hb.south < hb.north else { return region }
        return Planner.intersect(region, Planner.rects(hb, lo, hi))
    }

    /// Plans a region over an archive: walks the root directory and the leaves that meet the
    /// wanted tiles (only those), and lists every wanted tile the archive holds.
    /// - Parameters:
    ///   - header: the archive's header (`readHeader`).
    ///   - root: the root directory's entries (`readDirectory` after internal decompression).
    ///   - wanted: the region's TileIds, sorted (`tileIDs`).
    ///   - leaf: the entries of a leaf directory (a root or leaf entry with run length 0: its
    ///     offset and length are in the leaf section). Called once per leaf that meets `wanted`.
    /// - Throws: `ArchiveError` for leaves nested deeper than `maxDirectoryDepth`; what `leaf` throws.
    public static func plan(header: Header, root: [Entry], wanted: [UInt64],
                            leaf: (Entry) throws -> [Entry]) throws -> ArchivePlan {
        var tiles: [ArchiveTile] = []
        var leaves: [Entry] = []
        func lowerBound(_ v: UInt64) -> Int {
            var lo = 0, hi = wanted.count
            while lo < hi { let m = (lo + hi) / 2; if wanted[m] < v { lo = m + 1 } else { hi = m } }
            return lo
        }
        // Every entry of a directory lies in the TileId range its parent entry gives (from the
        // parent's TileId to the next entry's), and a run ends before the next entry starts
        // (spec section 4.2: entries sorted, each TileId covered once): otherwise one tile would
        // be counted twice (two root entries naming one leaf), and the plan would not be exact.
        func walk(_ entries: [Entry], _ depth: Int, _ start: UInt64, _ limit: UInt64) throws {
            for (i, e) in entries.enumerated() {
                let next = i + 1 < entries.count ? entries[i + 1].tileID : limit
                guard e.tileID >= start, e.tileID < limit else {
                    throw ArchiveError("a PMTiles leaf directory holds TileId \(e.tileID), outside the range \(start)..<\(limit) its parent entry gives")
                }
                if e.runLength > 0 && e.tileID &+ UInt64(e.runLength) > next {
                    throw ArchiveError("a PMTiles directory's entries overlap: TileId \(e.tileID) with run length \(e.runLength) reaches past the next entry's TileId \(next)")
                }
                if e.runLength == 0 {
                    let k = lowerBound(e.tileID)
                    guard k < wanted.count, wanted[k] < next else { continue }
                    guard depth < maxDirectoryDepth else {
                        throw ArchiveError("the archive's leaf directories nest deeper than \(maxDirectoryDepth) levels")
                    }
                    leaves.append(e)
                    try walk(try leaf(e), depth + 1, e.tileID, next)
                } else {
                    // A body beyond the tile data section (the header's data length) cannot be
                    // fetched: damage found now, not as a 416 mid-download (attack round 6). A
                    // header without a data length (0) is not checked.
                    let (bodyEnd, over) = e.offset.addingReportingOverflow(UInt64(e.length))
                    if header.dataLength > 0 && (over || bodyEnd > header.dataLength) {
                        throw ArchiveError("a PMTiles directory entry (TileId \(e.tileID)) names bytes \(e.offset)..<\(e.offset &+ UInt64(e.length)) of the tile data, which holds \(header.dataLength) bytes")
                    }
                    // A body's bytes in the file end before 2^63, as a stored plan's must
                    // (`ArchiveSource.damage`): an offset near 2^64 crashed `plan` and the daemon
                    // (arithmetic overflow, 2026-12-07), which the range arithmetic never meets now.
                    let (at, past) = header.dataOffset.addingReportingOverflow(e.offset)
                    guard !past, at <= UInt64(Int64.max) - UInt64(e.length) else {
                        throw ArchiveError("a PMTiles directory entry (TileId \(e.tileID)) names a body at data offset \(header.dataOffset) + \(e.offset), past 2^63 bytes: no file is that large")
                    }
                    let end = e.tileID &+ UInt64(e.runLength)
                    var k = lowerBound(e.tileID)
                    while k < wanted.count && wanted[k] < end {
                        if let t = tile(ofID: wanted[k]) {
                            tiles.append(ArchiveTile(tile: t, offset: at, length: e.length))
                        }
                        k += 1
                    }
                }
            }
        }
        try walk(root, 0, 0, UInt64.max)
        tiles.sort { ($0.offset, tileID($0.tile)) < ($1.offset, tileID($1.tile)) }
        var tileBytes = 0, bodyBytes = 0
        var lastOffset: UInt64?
        for t in tiles {
            tileBytes += Int(t.length)
            if t.offset != lastOffset { bodyBytes += Int(t.length); lastOffset = t.offset }
        }
        return ArchivePlan(tiles: tiles, tileBytes: tileBytes, bodyBytes: bodyBytes, leavesRead: leaves)
    }

    /// One HTTP range request of a download: bytes `start..<end` of the archive, holding the
    /// bodies of `tiles` (indices into the sorted `ArchivePlan.tiles`).
    public struct RangeRequest: Sendable, Equatable {
        /// First byte (inclusive) from the start of the archive.
        public var start: UInt64
        /// End (exclusive).
        public var end: UInt64
        /// Indices of the tiles whose bodies lie in the range (a contiguous slice of the plan).
        public var tiles: Range<Int>
        /// Bytes in the range that belong to no wanted body (gaps accepted to save a request).
        public var gapBytes: UInt64
        /// A range of bytes `start..<end` holding the bodies of `tiles`, `gapBytes` of it between them.
        public init(start: UInt64, end: UInt64, tiles: Range<Int>, gapBytes: UInt64) {
            self.start = start; self.end = end; self.tiles = tiles; self.gapBytes = gapBytes
        }
        /// The `Range` header's value (RFC 9110 section 14.1.2): `bytes=start-last`.
        public var header: String { "bytes=\(start)-\(end - 1)" }
        /// Length of the range in bytes.
        public var length: UInt64 { end - start }
    }

    /// The raster format a header's tile type names (PMTiles v3 spec, section 3.1: 2 PNG, 3 JPEG,
    /// 4 WebP), as `TileBody.hasSignature` names it; nil for MVT, AVIF and unknown types (no
    /// signature checked).
    public static func rasterFormat(tileType: UInt8) -> String? {
        switch tileType {
        case 2: return "PNG"
        case 3: return "JPEG"
        case 4: return "WebP"
        default: return nil
        }
    }

    /// Largest gap between two wanted bodies that one range request spans (bytes): 1 MiB. The
    /// gaps spanned are bounded in total too (`defaultMaxWaste`), so this only keeps one gap from
    /// taking a range's whole share.
    public static let defaultMaxGap: UInt64 = 1 << 20
    /// Largest range a request asks for (bytes), unless one body alone is larger: 2 MiB, so a
    /// failed or retried range loses little and the daemon's memory stays bounded (it holds at
    /// most three such bodies, `Daemon.maxRangeBytesHeld`), while at the polite default of 10
    /// requests a second per host ranges still carry 20 MiB/s (4 MiB ranges held RSS near 90 MiB).
    public static let defaultMaxRange: UInt64 = 2 << 20
    /// The seconds of transfer a range request is sized for, once the region's rate is measured
    /// (`rangeTarget`): 2.
    public static let rangeSeconds = 2.0
    /// The largest range asked before any range of the region has been answered (bytes): 1 MiB,
    /// so a small archive is still one request, and the first ranges asked of a slow server
    /// (as many as the budget holds, six when the region is alone) take half as long as 2 MiB
    /// ones would.
    public static let rangeBeforeRate: UInt64 = 1 << 20
    /// The smallest range asked for a slow link (bytes): 64 KiB.
    public static let smallestRange: UInt64 = 64 << 10

    /// How long a range request may be (bytes) for a region whose range requests carried
    /// `rate` bytes a second each (nil: none answered yet): `rangeSeconds` of it, between
    /// `smallestRange` and `maxRange`; `rangeBeforeRate` (at most `maxRange`) before any answer.
    /// Ranges that take seconds at most keep a slow server from holding the daemon's range
    /// budget long (attack round 27: three 2 MiB ranges at 100 KB/s held it for 20 s while a
    /// region from a fast server waited) and lose little when cut. Pure.
    public static func rangeTarget(rate: Double?, maxRange: UInt64) -> UInt64 {
        guard let rate, rate.isFinite, rate > 0 else { return min(rangeBeforeRate, maxRange) }
        let bytes = rate * rangeSeconds
        let wanted = bytes >= Double(maxRange) ? maxRange : UInt64(max(0, bytes))
        return min(maxRange, max(smallestRange, wanted))
    }

    /// The most bytes between wanted bodies that the ranges may span in all, as a fraction of the
    /// distinct wanted bytes: 0.1, so the bytes asked are at most 1.1 times the tile bytes.
    public static let defaultMaxWaste = 0.1

    /// The metadata keys an export publishes, as a TileJSON's (TileJSON 3.0.0; PMTiles spec v3,
    /// section 4 names the same for vector archives).
    public static let exportedMetadataKeys = ["name", "attribution", "description", "version", "vector_layers"]
    /// The largest JSON metadata read at plan (bytes, as stored and once inflated): 1 MiB.
    /// Larger metadata (tile statistics of a planet) is left unread; the plan goes on without it.
    public static let maxMetadata = 1 << 20

    /// The `exportedMetadataKeys` of an archive's JSON metadata (the bytes after its internal
    /// compression is undone) that have TileJSON's types (strings; `vector_layers` an array of
    /// objects), as one JSON object's text with sorted keys; nil when the bytes are not a JSON
    /// object or hold none of those. Pure; never throws: metadata that cannot be read only
    /// leaves the exports without it.
    public static func exportedMetadata(_ json: [UInt8]) -> String? {
        guard json.count <= maxMetadata, let object = try? JSONKind.parse(Data(json)) as? [String: Any] else { return nil }
        var kept: [String: Any] = [:]
        for k in exportedMetadataKeys {
            // Values of another type (attack round 27: `"name": 5`, `"vector_layers": "nope"`)
            // would make the exports' TileJSON invalid: left out.
            if k == "vector_layers" {
                if let layers = object[k] as? [Any], layers.allSatisfy({ $0 is [String: Any] }) { kept[k] = layers }
            } else if let text = object[k] as? String {
                kept[k] = text
            }
        }
        guard !kept.isEmpty else { return nil }
        return String(decoding: JSONKind.serialize(kept), as: UTF8.self)
    }

    /// Groups sorted tiles into range requests, as few as the bounds allow. Bodies that touch or
    /// overlap (run lengths share one) join first, each group up to `maxRange`; then the gaps
    /// between groups are spanned smallest first (which merges the most ranges for the bytes
    /// spent) while each is at most `maxGap`, the merged range stays within `maxRange`, and the
    /// gaps spanned total at most `maxWaste` times the distinct wanted bytes. So the bytes asked
    /// are at most (1 + maxWaste) times the distinct body bytes (`ArchivePlan.bodyBytes`).
    /// Pure; O(n log n) in the number of tiles.
    /// - Parameter tiles: sorted by offset (`ArchivePlan.tiles`).
    /// - Returns: ranges in offset order; together their `tiles` cover `0..<tiles.count` once.
    public static func coalesce(_ tiles: [ArchiveTile], maxGap: UInt64 = defaultMaxGap,
                                maxRange: UInt64 = defaultMaxRange, maxWaste: Double = defaultMaxWaste) -> [RangeRequest] {
        guard !tiles.isEmpty else { return [] }
        // 1. Runs of touching or overlapping bodies.
        var runs: [(start: UInt64, end: UInt64, first: Int)] = []
        var start = tiles[0].offset, end = tiles[0].offset + UInt64(tiles[0].length), first = 0
        for i in 1..<tiles.count {
            let t = tiles[i]
            let tEnd = t.offset + UInt64(t.length)
            if t.offset <= end && (tEnd <= end || tEnd - start <= maxRange) {
                end = max(end, tEnd)
                continue
            }
            runs.append((start, end, first))
            start = t.offset; end = tEnd; first = i
        }
        runs.append((start, end, first))
        var useful: UInt64 = 0
        for r in runs { useful += r.end - r.start } // runs overlap only where a body was split by maxRange
        var budget = UInt64(Double(useful) * maxWaste)
        // 2. Gaps between runs, smallest first. Merging gap i joins run i's group with run i+1's
        //    (always the first of its group: only its own left gap could have merged it).
        var groupOf = Array(0..<runs.count)      // union-find towards the group's first run
        var groupLast = Array(0..<runs.count)    // for a group's first run: its last run
        var groupGap = [UInt64](repeating: 0, count: runs.count)
        func find(_ i: Int) -> Int {
            var r = i
            while groupOf[r] != r { r = groupOf[r] }
            var j = i
            while groupOf[j] != r { let n = groupOf[j]; groupOf[j] = r; j = n }
            return r
        }
        let gaps = (0..<max(0, runs.count - 1)).map { i in (i, runs[i + 1].start > runs[i].end ? runs[i + 1].start - runs[i].end : 0) }
        for (i, g) in gaps.sorted(by: { ($0.1, $0.0) < ($1.1, $1.0) }) {
            if g > maxGap || g > budget { break }
            let a = find(i), b = i + 1
            guard runs[groupLast[b]].end - runs[a].start <= maxRange else { continue }
            groupOf[b] = a
            groupLast[a] = groupLast[b]
            groupGap[a] += groupGap[b] + g
            budget -= g
        }
        // 3. The groups in order.
        var out: [RangeRequest] = []
        var i = 0
        while i < runs.count {
            let last = groupLast[i]
            let next = last + 1 < runs.count ? runs[last + 1].first : tiles.count
            out.append(RangeRequest(start: runs[i].start, end: runs[last].end, tiles: runs[i].first..<next, gapBytes: groupGap[i]))
            i = last + 1
        }
        return out
    }
}

/// A tile set's PMTiles archive (issue 31): where it is, the version pinned when it was planned,
/// and the tiles the region takes from it. Part of `plan.json` (`TileSet.archive`).
public struct ArchiveSource: Sendable, Equatable, Codable {
    /// The archive's http(s) URL (the inner URL of `pmtiles://URL`).
    public var url: String
    /// The archive's `ETag` when planned (sent as `If-Range`/`If-Match` with every range), if any.
    public var etag: String?
    /// The archive's `Last-Modified` when planned (Unix seconds), used when there is no ETag.
    public var lastModified: Int64?
    /// The header's tile compression (`PMTiles.Compression` raw value: 1 none, 2 gzip).
    public var tileCompression: UInt8
    /// The header's tile type (1 MVT, 2 PNG, 3 JPEG, 4 WebP, 0 unknown).
    public var tileType: UInt8
    /// The tiles, sorted by offset (`PMTiles.ArchivePlan.tiles`).
    public var tiles: [PMTiles.ArchiveTile]
    /// Sum of the tiles' lengths in bytes (`PMTiles.ArchivePlan.tileBytes`).
    public var tileBytes: Int
    /// Bytes of the distinct bodies (`PMTiles.ArchivePlan.bodyBytes`).
    public var bodyBytes: Int
    /// The TileJSON-like keys of the archive's JSON metadata (spec v3, section 4: `name`,
    /// `attribution`, `description`, `version`, `vector_layers`, as `PMTiles.exportedMetadata`
    /// keeps them), as one JSON object's text; nil when the archive has none (or none readable).
    /// Exports publish them as they publish a TileJSON's (`RegionPack.sourceMetadata`).
    public var metadata: String?
    /// The archive at `url` (http/https), pinned at `etag` / `lastModified` (the validators of
    /// the answer its header came in), with the tiles `plan` found, the header's tile encoding
    /// and the kept keys of its metadata (`metadata`).
    public init(url: String, etag: String?, lastModified: Int64?, header: PMTiles.Header, plan: PMTiles.ArchivePlan, metadata: String? = nil) {
        self.url = url; self.etag = etag; self.lastModified = lastModified
        tileCompression = header.tileCompression.rawValue; tileType = header.tileType
        tiles = plan.tiles; tileBytes = plan.tileBytes; bodyBytes = plan.bodyBytes
        self.metadata = metadata
    }

    private enum CodingKeys: String, CodingKey { case url, etag, lastModified, tileCompression, tileType, tiles, tileBytes, bodyBytes, metadata }

    /// Bytes of one tile in the packed form of `tiles`: z (1), x (4), y (4), offset (8) and
    /// length (4), little-endian.
    static let packedTileSize = 21

    /// Reads the fields as `encode(to:)` writes them; `tiles` is the packed string, or an array of
    /// `ArchiveTile`s (plans written before the packed form).
    /// - Throws: `DecodingError` for a missing or mistyped field, a packed string that is not
    ///   base64 or not whole records, or a tile that could not have been planned: a zoom above
    ///   30, a column or row outside its zoom's tiles, or a body past 2^63 - 1 bytes (such a
    ///   plan is unreadable, as contract.md says of `plan.json`, not a crash).
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        url = try c.decode(String.self, forKey: .url)
        etag = try c.decodeIfPresent(String.self, forKey: .etag)
        lastModified = try c.decodeIfPresent(Int64.self, forKey: .lastModified)
        tileCompression = try c.decode(UInt8.self, forKey: .tileCompression)
        tileType = try c.decode(UInt8.self, forKey: .tileType)
        tileBytes = try c.decode(Int.self, forKey: .tileBytes)
        bodyBytes = try c.decode(Int.self, forKey: .bodyBytes)
        metadata = try c.decodeIfPresent(String.self, forKey: .metadata)
        if let packed = try? c.decode(String.self, forKey: .tiles) {
            guard let raw = Data(base64Encoded: packed), let t = ArchiveSource.unpack([UInt8](raw)) else {
                throw DecodingError.dataCorruptedError(forKey: .tiles, in: c, debugDescription: "the packed tiles are not whole records of a zoom 0...30")
            }
            tiles = t
        } else {
            tiles = try c.decode([PMTiles.ArchiveTile].self, forKey: .tiles)
        }
        if let why = damage {
            throw DecodingError.dataCorruptedError(forKey: .tiles, in: c, debugDescription: why)
        }
    }

    /// Why these fields could not have been planned, nil when they could: a tile compression
    /// other than none (1) or gzip (2); a tile at a zoom above 30, a column or row outside its
    /// zoom's tiles, or a body past 2^63 - 1 bytes; tiles not sorted by offset or a tile listed
    /// twice (the range requests are cut in offset order); `tileBytes` not the sum of the
    /// lengths, or `bodyBytes` outside `0 ... tileBytes`. Attack round 22: such plans crashed the
    /// daemon (an offset near 2^64; offsets out of order, on the cut queue), or left a region
    /// downloading for ever.
    public var damage: String? {
        guard PMTiles.Compression(rawValue: tileCompression) != nil else { return "tile compression \(tileCompression) is neither none (1) nor gzip (2)" }
        let limit = UInt64(Int64.max)
        var previous: UInt64 = 0, sum: UInt64 = 0
        var ids: [UInt64] = []
        ids.reserveCapacity(tiles.count)
        for t in tiles {
            guard (0...30).contains(t.tile.z), (0..<(1 << t.tile.z)).contains(t.tile.x), (0..<(1 << t.tile.z)).contains(t.tile.y),
                  t.offset <= limit - UInt64(t.length) else {
                return "archive tile \(t.tile) at \(t.offset), \(t.length) bytes, could not have been planned"
            }
            guard t.offset >= previous else { return "archive tile \(t.tile) at \(t.offset) comes after one at \(previous): not sorted by offset" }
            previous = t.offset
            sum += UInt64(t.length) // at most 2^32 tiles of at most 2^32 - 1 bytes: no overflow
            ids.append(PMTiles.tileID(t.tile))
        }
        ids.sort()
        for k in ids.indices.dropFirst() where ids[k] == ids[k - 1] { return "archive tile \(PMTiles.tile(ofID: ids[k]).map { "\($0)" } ?? "\(ids[k])") is listed twice" }
        guard sum == UInt64(max(0, tileBytes)), tileBytes >= 0 else { return "tileBytes \(tileBytes) is not the sum of the tiles' lengths (\(sum))" }
        guard bodyBytes >= 0, bodyBytes <= tileBytes else { return "bodyBytes \(bodyBytes) is outside 0...\(tileBytes)" }
        return nil
    }

    /// Writes every field under its name, and `tiles` packed: one base64 string (RFC 4648,
    /// section 4) of `packedTileSize`-byte records. Keyed or unkeyed per tile, `JSONEncoder`
    /// took about 30 ms for the bench's 20,984-tile archive, on the loop before the first range
    /// request (5% of the download's CPU samples).
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(url, forKey: .url)
        try c.encodeIfPresent(etag, forKey: .etag)
        try c.encodeIfPresent(lastModified, forKey: .lastModified)
        try c.encode(tileCompression, forKey: .tileCompression)
        try c.encode(tileType, forKey: .tileType)
        try c.encode(ArchiveSource.pack(tiles).base64EncodedString(), forKey: .tiles)
        try c.encode(tileBytes, forKey: .tileBytes)
        try c.encodeIfPresent(metadata, forKey: .metadata)
        try c.encode(bodyBytes, forKey: .bodyBytes)
    }

    /// The packed records of `tiles` (`packedTileSize` bytes each, little-endian).
    static func pack(_ tiles: [PMTiles.ArchiveTile]) -> Data {
        var out = [UInt8]()
        out.reserveCapacity(tiles.count * packedTileSize)
        func put<T: FixedWidthInteger>(_ v: T) { withUnsafeBytes(of: v.littleEndian) { out.append(contentsOf: $0) } }
        for t in tiles {
            out.append(UInt8(truncatingIfNeeded: t.tile.z))
            put(UInt32(truncatingIfNeeded: t.tile.x)); put(UInt32(truncatingIfNeeded: t.tile.y))
            put(t.offset); put(t.length)
        }
        return Data(out)
    }

    /// The tiles of packed records; nil when `raw` is not whole records or a zoom is above 30
    /// (`init(from:)` checks the rest).
    static func unpack(_ raw: [UInt8]) -> [PMTiles.ArchiveTile]? {
        guard raw.count % packedTileSize == 0 else { return nil }
        func get<T: FixedWidthInteger>(_ at: Int, _: T.Type) -> T {
            var v: T = 0
            for k in 0..<MemoryLayout<T>.size { v |= T(raw[at + k]) << (8 * k) }
            return v
        }
        var tiles: [PMTiles.ArchiveTile] = []
        tiles.reserveCapacity(raw.count / packedTileSize)
        var at = 0
        while at < raw.count {
            let z = Int(raw[at])
            guard z <= 30 else { return nil }
            tiles.append(PMTiles.ArchiveTile(tile: TileID(z: z, x: Int(get(at + 1, UInt32.self)), y: Int(get(at + 5, UInt32.self))),
                                             offset: get(at + 9, UInt64.self), length: get(at + 17, UInt32.self)))
            at += packedTileSize
        }
        return tiles
    }
}

extension TileSet {
    /// The tile set of a PMTiles archive: the region's rectangles at the zooms the archive
    /// holds, counting only the tiles `archive` lists (so `count` is exact), and the archive.
    /// - Parameters:
    ///   - rects: the cover (`PMTiles.cover`), the rectangles the tiles were planned from.
    public init(source: String, archive: ArchiveSource, rects: [TileRect], shape: RegionShape?) {
        // Counted from the archive's tiles below, not over the shape (a full count thrown away).
        self.init(source: source, template: TileURLTemplate(PMTiles.sourceScheme + archive.url), rects: rects, shape: shape, rectCounts: [])
        self.archive = archive
        countArchiveTiles()
    }

    /// An archive's tile set over a corridor or parts (`Planner.archiveAreas`): rectangle k
    /// holds the archive's tiles that it plans (`TileSetCover.owner`).
    public init(source: String, archive: ArchiveSource, rects: [TileRect], areas: [TileArea], rectAreas: [RectArea]) {
        self.source = ManifestLine.sanitizeKey(source)
        self.template = TileURLTemplate(PMTiles.sourceScheme + archive.url)
        self.rects = rects; self.areas = areas; self.rectAreas = rectAreas
        self.rectCounts = []
        self.archive = archive
        countArchiveTiles()
    }

    /// `rectCounts`: per rectangle, the archive's tiles it holds (`rectPosition`).
    private mutating func countArchiveTiles() {
        guard let archive else { return }
        var counts = [Int](repeating: 0, count: rects.count)
        let owners = ArchiveTileIndex(self)
        for t in archive.tiles { if let k = owners.rect(of: t.tile) { counts[k] += 1 } }
        rectCounts = counts
    }
}

/// Where an archive's tile lies in its tile set's plan indices: the rectangle that plans it (the
/// first of its zoom holding it, or over a corridor or parts the first whose area meets it:
/// `TileSetCover.owner`) and its row-major position there. Not thread-safe; one per user.
public final class ArchiveTileIndex {
    let set: TileSet
    let cover: TileSetCover?
    /// Per rectangle, the plan index offset of its first tile within the set.
    let offsets: [Int]

    public init(_ set: TileSet) {
        self.set = set
        cover = set.areas != nil ? TileSetCover(set) : nil
        var o: [Int] = [], n = 0
        for r in set.rects { o.append(n); n = SaturatingCount.add(n, r.count) }
        offsets = o
    }

    /// The rectangle that plans `t`, or nil when none does.
    public func rect(of t: TileID) -> Int? {
        if let cover { return cover.owner(of: t) }
        return set.rects.firstIndex { $0.z == t.z && $0.index(of: t) != nil }
    }

    /// `t`'s index within the set (add the set's base for the plan index), or nil when no
    /// rectangle plans it.
    public func index(of t: TileID) -> Int? {
        guard let k = rect(of: t), let i = set.rects[k].index(of: t) else { return nil }
        return offsets[k] + i
    }
}
