// One tile source of a region as PMTiles v3 (protomaps/PMTiles `spec/v3/spec.md`): header and root
// directory in the first 16 KiB, then tile data, metadata and leaf directories (the spec lets every
// section but the header move; readers follow the header's offsets); clustered (tile data in TileId order), one copy of each distinct body, run lengths for consecutive identical
// tiles, gzip directories and metadata, leaf directories when the root would not fit in 16 KiB.
//
// Memory stays flat in the number of tiles: (TileId, body) pairs are sorted in runs of 262,144 on
// disk and merged; entries go to a temp file; directories are built from that file. What grows is
// one small record per distinct body (its SHA-256, offset and length). Bodies are read in pack
// order within windows of the data section (at most 2 MiB or 65,536 bodies, prepared on two
// threads while this one writes the windows before: `PreparePipeline`), then written in
// TileId order: the archive is the same bytes as when they were read one by one in TileId order.
import Foundation
import Glibc
import TileSpoolCore
import TileSpoolIO

enum PMTilesExport {
    /// Records sorted in memory at once before spilling a run to disk.
    static let runSize = 1 << 18
    /// The stored bytes of a window of the data section (besides one body): a window of bodies
    /// is read in pack order, then written in TileId order; three are under way at most. 2 MiB
    /// keeps an export of 507,130 bodies of 3 KB at the memory it had with one window of 8 MiB
    /// at a time (165 MiB peak), where three windows of 8 MiB took 195 MiB, at the same speed.
    static let dataWindowBytes = 2 << 20

    /// A fixed-size record file of (UInt64, UInt64) pairs, read or written in blocks of
    /// `blockWords` words (64 KiB by default: one block per sorted run stays in memory while merging).
    final class Records {
        let path: String
        let blockWords: Int
        private var fd: Int32
        private var buf: [UInt64] = []
        private var pos = 0
        private(set) var count = 0

        init(path: String, write: Bool, blockWords: Int = 1 << 13) throws {
            self.path = path
            self.blockWords = blockWords
            fd = Glibc.open(path, write ? (O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC) : (O_RDONLY | O_CLOEXEC), 0o600)
            guard fd >= 0 else { throw ExportError("cannot open \(path): \(SystemError("open", path).errnoDescription)") }
        }
        deinit { Glibc.close(fd) }

        func put(_ a: UInt64, _ b: UInt64) throws {
            buf.append(a); buf.append(b)
            count += 1
            if buf.count >= blockWords { try flush() }
        }

        func flush() throws {
            guard !buf.isEmpty else { return }
            do { try buf.withUnsafeBytes { try Files.writeAll(fd, $0, path: path) } } catch { throw ExportError("cannot write \(path): \(error)") }
            buf.removeAll(keepingCapacity: true)
        }

        /// The next pair, or nil at the end.
        func next() throws -> (UInt64, UInt64)? {
            if pos + 1 >= buf.count {
                buf = [UInt64](repeating: 0, count: blockWords)
                let n = buf.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
                if n < 0 { throw ExportError("cannot read \(path): \(SystemError("read", path).errnoDescription)") }
                buf.removeSubrange((n / 8)...)
                pos = 0
                if buf.count < 2 { return nil }
            }
            defer { pos += 2 }
            return (buf[pos], buf[pos + 1])
        }
    }

    /// The low bits of a sorted pair's second word that hold the body index; above them, the
    /// part's rank (0 for the newest part), so that among pairs of one TileId the newest sorts first.
    static let bodyBits: UInt64 = 40
    static let bodyMask: UInt64 = (1 << 40) - 1

    /// Writes the tiles of `parts` (one region's tile set, or several regions' sets of the same
    /// source, `Exporter.sameSource`) as one PMTiles archive. `parts` go oldest first: where two
    /// hold the same z/x/y, the later one's answer is kept (its bytes, or no entry when it recorded
    /// an empty tile).
    /// - Throws: `ExportError` for a file error or a pack that does not match its plan.
    static func write(_ parts: [(pack: RegionPack, set: TileSet)], format: TileFormat, to path: String, progress: Exporter.Progress?) throws -> ExportResult {
        let newest = parts[parts.count - 1]
        let meta = try newest.pack.sourceMetadata(newest.set.source)
        let work = path + ".work"
        try? FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        defer { Files.removeTree(work) }

        // 1. (TileId, rank << 40 | body index) pairs, sorted in runs; an empty tile has body index
        //    `bodyMask`.
        var bodies: [String] = []           // body index -> SHA-256
        var bodyPack: [Int] = []            // body index -> the part whose pack reads it
        var bodyIndex: [Digest: Int] = [:]  // by the body's name (a line's sha256 is 64 hex digits: `ManifestLine`)
        var run: [(UInt64, UInt64)] = []
        run.reserveCapacity(runSize)
        var runs: [Records] = []
        func spill() throws {
            run.sort { $0 < $1 }
            let r = try Records(path: "\(work)/run\(runs.count)", write: true)
            for (a, b) in run { try r.put(a, b) }
            try r.flush()
            runs.append(try Records(path: r.path, write: false))
            run.removeAll(keepingCapacity: true)
        }
        var seen = 0
        let total = parts.reduce(0) { SaturatingCount.add($0, $1.set.count) }
        for (p, (pack, set)) in parts.enumerated() {
            let rank = UInt64(parts.count - 1 - p) << bodyBits
            try pack.forEachTile(of: set.source) { (t, line) throws in
                seen += 1
                if seen % 65536 == 0 { try progress?(0, total) } // nothing written yet: a caller's stop check
                // Empty tiles (404/204) are left out of the archive: a PMTiles reader answers "no
                // tile" for them. They are sorted all the same, so a newer empty answer wins.
                let b: Int
                if let sha = line.sha256 {
                    guard let digest = Digest(hex: sha) else { throw ExportError("region '\(pack.id)': '\(line.key)' names the object '\(sha)', which is not a SHA-256") }
                    if let i = bodyIndex[digest] { b = i } else { b = bodies.count; bodyIndex[digest] = b; bodies.append(sha); bodyPack.append(p) }
                } else {
                    b = Int(bodyMask)
                }
                run.append((PMTiles.tileID(t), rank | UInt64(b)))
                if run.count >= runSize { try spill() }
            }
        }
        bodyIndex = [:]
        if !runs.isEmpty && !run.isEmpty { try spill() }
        run.sort { $0 < $1 }
        var inMemory = run.makeIterator()

        // 2. Merge in TileId order: write each body once, in the order first used (clustered), and
        //    collapse consecutive identical tiles into runs.
        // The archive itself: the first 16 KiB are kept for the header and root directory
        // (written last, in place); tile data follows at once, so ~all bytes are written once;
        // then the metadata and the leaf directories (sections may be in any order, spec 2).
        let out = try OutputFile(path: path)
        try out.write([UInt8](repeating: 0, count: PMTiles.rootLimit))
        let dataStart = out.written
        let data = out
        let entries = try Records(path: "\(work)/entries", write: true)
        var offsets = [UInt64](repeating: UInt64.max, count: bodies.count)
        var lengths = [UInt32](repeating: 0, count: bodies.count)
        var heads: [(UInt64, UInt64)?] = []
        for r in runs { heads.append(try r.next()) }
        func nextPair() throws -> (UInt64, UInt64)? {
            if runs.isEmpty { return inMemory.next() }
            var best = -1
            for (i, h) in heads.enumerated() { if let h, best < 0 || h < heads[best]! { best = i } }
            guard best >= 0 else { return nil }
            let pair = heads[best]
            heads[best] = try runs[best].next()
            return pair
        }
        var pending: PMTiles.Entry?
        var addressed: UInt64 = 0, entryCount: UInt64 = 0, contents: UInt64 = 0
        var lastID: UInt64?
        var written = 0
        var minZ = Int.max, maxZ = 0
        func emit(_ e: PMTiles.Entry) throws {
            // An entry is two records: (TileId, offset), (length << 32 | run length, 0).
            try entries.put(e.tileID, e.offset)
            try entries.put((UInt64(e.length) << 32) | UInt64(e.runLength), 0)
            addressed += UInt64(e.runLength)
            entryCount += 1
        }
        // 2a. The merged sequence (TileId, body index), one pair per addressed tile, goes to a
        //     file; the bodies are listed in the order first used (the clustered order of the data
        //     section).
        let sequence = try Records(path: "\(work)/sequence", write: true)
        var firstUse: [Int] = []
        var firstTile: [UInt64] = [] // the TileId of each body's first use: the tile named in an error
        var used = [Bool](repeating: false, count: bodies.count)
        while let (id, b) = try nextPair() {
            if id == lastID { continue } // the same tile from an older part: the newest sorts first
            lastID = id
            written += 1
            if written % 4096 == 0 { try progress?(written, total) }
            if b & bodyMask == bodyMask { continue } // empty
            let body = Int(b & bodyMask)
            try sequence.put(id, UInt64(body))
            if !used[body] { used[body] = true; firstUse.append(body); firstTile.append(id) }
        }
        used = []
        try sequence.flush()

        // 2b. The bodies, in windows of that order: each window read in pack order (sequential
        //     reads), hashed and gzip-compressed on two other threads (`PreparePipeline`, which
        //     prepares the next windows while this thread writes one), held in memory (about
        //     `dataWindowBytes`, or `RegionPack.packOrderWindow` bodies), then written in first-use
        //     order: the archive's bytes are those of reading in TileId order.
        // The bodies' locations, looked up together (`objectLocations`) for the next
        // `packOrderWindow` bodies at a time: a window is cut at `dataWindowBytes`, and read
        // from the locations found.
        var located = BodyLocations(count: firstUse.count) { range in
            var out = [ObjectLocation?](repeating: nil, count: range.count)
            var byPart: [Int: [Int]] = [:]
            for k in range { byPart[bodyPack[firstUse[k]], default: []].append(k - range.lowerBound) }
            for (p, ks) in byPart {
                let found = parts[p].pack.store.objectLocations(ks.map { bodies[firstUse[range.lowerBound + $0]] })
                for (j, l) in found.enumerated() { out[ks[j]] = l }
            }
            return out
        }
        // A window is one batch per part whose pack reads some of its bodies (one for one
        // region); its bodies are written once its last batch is taken.
        var held: [[UInt8]?] = []
        let pipeline = PreparePipeline<[UInt8], (window: [Int], slots: [Int], last: Bool)>(workers: 2, ahead: 3)
        defer { pipeline.stop() }
        func take(_ tag: (window: [Int], slots: [Int], last: Bool), _ values: [[UInt8]]) throws {
            if held.isEmpty { held = [[UInt8]?](repeating: nil, count: tag.window.count) }
            for (j, bytes) in values.enumerated() { held[tag.slots[j]] = bytes }
            guard tag.last else { return }
            for (k, body) in tag.window.enumerated() {
                let bytes = held[k]!
                held[k] = nil
                guard !bytes.isEmpty else { continue } // a 0-byte body cannot be addressed (spec: lengths are nonzero)
                offsets[body] = data.written - dataStart
                lengths[body] = UInt32(bytes.count)
                try data.write(bytes)
                contents += 1
            }
            held = []
            try progress?(written, total) // the counts of 2a again: a caller's stop check between windows
        }
        var w = 0
        while w < firstUse.count {
            var end = w, bytesInWindow = 0
            while end < firstUse.count && end - w < RegionPack.packOrderWindow && (end == w || bytesInWindow < dataWindowBytes) {
                bytesInWindow += try located.location(at: end)?.length ?? 0
                end += 1
            }
            let window = Array(firstUse[w..<end])
            var byPart: [Int: [Int]] = [:]
            for (k, body) in window.enumerated() { byPart[bodyPack[body], default: []].append(k) }
            let groups = byPart.keys.sorted()
            for p in groups {
                let ks = byPart[p]!, part = parts[p]
                let shas = ks.map { bodies[window[$0]] }
                let known = try ks.map { try located.location(at: w + $0) }
                let pack = part.pack, source = part.set.source
                // Errors name the body's first tile, as the other formats name theirs (the key is
                // made only for an error).
                let firstIDs = ks.map { firstTile[w + $0] }
                do {
                    try pipeline.submit(ObjectBatch(store: pack.store, sha256s: shas, locations: known) { j, data in
                        try MBTilesExport.tileBytes(pack, data, shas[j], key: PMTiles.tile(ofID: firstIDs[j]).map { ManifestLine.tileKey(source: source, $0) }
                                                        ?? "\(source) body \(shas[j])", format: format)
                    }, tag: (window, ks, p == groups.last), take)
                } catch {
                    throw RegionPack.exportError(error, regions: parts.map(\.pack.id))
                }
            }
            w = end
        }
        do { try pipeline.finish(take) } catch { throw RegionPack.exportError(error, regions: parts.map(\.pack.id)) }
        firstUse = []
        firstTile = []

        // 2c. The entries, from the sequence: run lengths for consecutive identical tiles.
        let replay = try Records(path: sequence.path, write: false)
        while let (id, b) = try replay.next() {
            let body = Int(b)
            if offsets[body] == UInt64.max { continue } // a 0-byte body: no entry
            let z = zoom(of: id)
            minZ = min(minZ, z); maxZ = max(maxZ, z)
            if var p = pending, p.tileID + UInt64(p.runLength) == id, p.offset == offsets[body] {
                p.runLength += 1
                pending = p
            } else {
                if let p = pending { try emit(p) }
                pending = PMTiles.Entry(tileID: id, offset: offsets[body], length: lengths[body], runLength: 1)
            }
        }
        if let p = pending { try emit(p) }
        try entries.flush()
        try data.flush()

        // 3. Directories: the root alone when it fits, else leaves of `leafSize` entries.
        let internalGzip: ([UInt8]) throws -> [UInt8] = { (b) throws in
            do { return try Zlib.compress(b, .gzip) } catch { throw ExportError("gzip: \(error)") }
        }
        func readEntries(_ body: ([PMTiles.Entry]) throws -> Void, chunk: Int) throws {
            let r = try Records(path: entries.path, write: false)
            var list: [PMTiles.Entry] = []
            while let (id, offset) = try r.next() {
                guard let (packed, _) = try r.next() else { break }
                list.append(PMTiles.Entry(tileID: id, offset: offset, length: UInt32(packed >> 32), runLength: UInt32(packed & 0xFFFF_FFFF)))
                if list.count == chunk { try body(list); list.removeAll(keepingCapacity: true) }
            }
            if !list.isEmpty { try body(list) }
        }
        let metadata = try internalGzip([UInt8](JSONKind.serialize(metadataJSON(parts, meta))))
        var root: [UInt8] = []
        var leaves: OutputFile?
        if entryCount <= 16_384 {
            var all: [PMTiles.Entry] = []
            try readEntries({ all += $0 }, chunk: 16_384)
            root = try internalGzip(PMTiles.serializeDirectory(all))
        }
        if root.isEmpty || 127 + root.count > PMTiles.rootLimit {
            var leafSize = 4096
            while true {
                let file = try OutputFile(path: "\(work)/leaves")
                var rootEntries: [PMTiles.Entry] = []
                try readEntries({ (chunk) throws in
                    let leaf = try internalGzip(PMTiles.serializeDirectory(chunk))
                    rootEntries.append(PMTiles.Entry(tileID: chunk[0].tileID, offset: file.written, length: UInt32(leaf.count), runLength: 0))
                    try file.write(leaf)
                }, chunk: leafSize)
                try file.flush()
                root = try internalGzip(PMTiles.serializeDirectory(rootEntries))
                if 127 + root.count <= PMTiles.rootLimit { leaves = file; break }
                leafSize *= 2
            }
        }

        // 4. Metadata and leaves after the tile data; then header and root in the first 16 KiB.
        var h = PMTiles.Header()
        h.rootOffset = 127
        h.dataOffset = dataStart
        h.dataLength = out.written - dataStart
        h.rootLength = UInt64(root.count)
        h.metadataOffset = out.written
        h.metadataLength = UInt64(metadata.count)
        h.leafOffset = h.metadataOffset + h.metadataLength
        h.leafLength = leaves?.written ?? 0
        h.addressedTiles = addressed
        h.tileEntries = entryCount
        h.tileContents = contents
        h.clustered = true
        h.internalCompression = .gzip
        h.tileCompression = format == .pbf ? .gzip : .none
        h.tileType = PMTiles.tileType(format)
        let (b, z) = MBTilesExport.extent(parts)
        let zooms = z ?? 0...0
        h.minZoom = UInt8(minZ == Int.max ? zooms.lowerBound : minZ)
        h.maxZoom = UInt8(minZ == Int.max ? zooms.upperBound : maxZ)
        let s = MBTilesExport.stated(b)
        h.minLon = s.west; h.minLat = s.south; h.maxLon = s.east; h.maxLat = s.north
        let (cx, cy) = MBTilesExport.center(b)
        h.centerLon = cx; h.centerLat = cy
        h.centerZoom = UInt8((Int(h.minZoom) + Int(h.maxZoom)) / 2)
        try out.write(metadata)
        if let leaves { try out.append(fileAt: leaves.path) }
        try out.flush()
        try out.write(h.bytes + root, at: 0)
        try progress?(written, total)
        return ExportResult(format: .pmtiles, source: newest.set.source, path: path, bytes: Int(out.written), tiles: Int(addressed), sha256: nil)
    }

    /// The zoom of a TileId: the z with (4^z - 1)/3 <= id < (4^(z+1) - 1)/3.
    static func zoom(of id: UInt64) -> Int {
        var z = 0
        var acc: UInt64 = 0
        while z < 31 {
            let next = acc + (UInt64(1) << UInt64(2 * z))
            if id < next { return z }
            acc = next
            z += 1
        }
        return z
    }

    /// The JSON metadata: name, description, attribution, type, format, and `vector_layers` for MVT
    /// (TileJSON 3.0.0 as the PMTiles spec asks).
    static func metadataJSON(_ parts: [(pack: RegionPack, set: TileSet)], _ meta: [String: Any]) -> [String: Any] {
        var o: [String: Any] = meta
        let ids = parts.map(\.pack.id)
        let source = parts[parts.count - 1].set.source
        if o["name"] == nil { o["name"] = "\(ids.joined(separator: "+")) \(source)" }
        if o["description"] == nil { o["description"] = "TileSpool export of region\(ids.count > 1 ? "s" : "") \(ids.joined(separator: ", ")), source \(source)" }
        o["type"] = "baselayer"
        return o
    }
}

/// The locations of a list of bodies, looked up `RegionPack.packOrderWindow` at a time as they
/// are asked for in order (`PMTilesExport`'s windows): one batch of look-ups per chunk, not one
/// per body; nil for a body not in a sealed pack (read by name).
private struct BodyLocations {
    let count: Int
    let lookUp: (Range<Int>) throws -> [ObjectLocation?]
    private var chunk: Range<Int> = 0..<0
    private var found: [ObjectLocation?] = []

    init(count: Int, lookUp: @escaping (Range<Int>) throws -> [ObjectLocation?]) { self.count = count; self.lookUp = lookUp }

    /// The location of body `i` (asked for in increasing order, or within the current chunk).
    mutating func location(at i: Int) throws -> ObjectLocation? {
        if !chunk.contains(i) {
            chunk = i..<min(count, i + RegionPack.packOrderWindow)
            found = try lookUp(chunk)
        }
        return found[i - chunk.lowerBound]
    }
}
