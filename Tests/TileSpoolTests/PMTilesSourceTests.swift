import Foundation
import XCTest
@testable import TileSpoolCore
@testable import TileSpoolExport
import TileSpoolDaemon

/// Runs `Tests/Support/make_pmtiles.py ARGS` (the PyPI `pmtiles` writer and reader, the
/// independent witness) and returns the JSON it prints; a run that fails fails the test.
func makePMTiles(_ args: [String], file: StaticString = #filePath, line: UInt = #line) throws -> [String: Any] {
    let (rc, out) = try runTool(ExportTools.python, [ExportTools.support + "/make_pmtiles.py"] + args)
    XCTAssertEqual(rc, 0, out, file: file, line: line)
    return try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: Any], file: file, line: line)
}

/// PMTiles archives as sources (issue 31): the pure reader (header, directories, TileIds), the
/// planner over the root and leaf directories, and the range coalescer; then the real archives
/// in ../shared/mapdata/pmtiles read through them, every body cut out compared byte for byte with
/// the identical tiles in mapdata/raster.
final class PMTilesSourceTests: XCTestCase {
    /// The metadata exports publish: TileJSON's keys with TileJSON's types, nothing else; nil for
    /// bytes that are not a JSON object or hold none of them (attack round 27: a number as the
    /// name and a string as vector_layers reached the PMTiles and site exports).
    func testExportedMetadataKeepsTileJSONsKeysAndTypes() {
        func kept(_ text: String) -> [String: Any]? {
            PMTiles.exportedMetadata(Array(text.utf8)).flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        }
        let good = kept(#"{"name":"n","attribution":"<a href='x'>OSM</a>","description":"d","version":"1.0","vector_layers":[{"id":"water","fields":{}}],"tilestats":{"a":1},"format":"pbf"}"#)
        XCTAssertEqual(good.map { Set($0.keys) }, ["name", "attribution", "description", "version", "vector_layers"])
        XCTAssertEqual((good?["vector_layers"] as? [[String: Any]])?.first?["id"] as? String, "water")
        let typed = kept(#"{"name":5,"attribution":{"a":1},"description":null,"version":[1],"vector_layers":"nope"}"#)
        XCTAssertNil(typed, "no value of TileJSON's type")
        XCTAssertEqual(kept(#"{"name":"n","vector_layers":[1,2]}"#).map { Set($0.keys) }, ["name"])
        XCTAssertNil(kept("[1,2]"))
        XCTAssertNil(kept("not json"))
        XCTAssertNil(PMTiles.exportedMetadata([UInt8](repeating: 0x20, count: PMTiles.maxMetadata + 1)))
    }

    // MARK: TileIds

    /// `tile(ofID:)` inverts `tileID(_:)` for every tile of zooms 0-6 and a few deep ones, and
    /// TileIds are dense: zoom z's ids are exactly `(4^z - 1)/3 ..< (4^(z+1) - 1)/3`.
    func testTileIDRoundTrip() {
        for z in 0...6 {
            var ids = Set<UInt64>()
            let n = 1 << z
            for x in 0..<n {
                for y in 0..<n {
                    let t = TileID(z: z, x: x, y: y)
                    let id = PMTiles.tileID(t)
                    XCTAssertEqual(PMTiles.tile(ofID: id), t)
                    ids.insert(id)
                }
            }
            let first = ((UInt64(1) << (2 * UInt64(z))) - 1) / 3
            XCTAssertEqual(ids, Set(first..<(first + UInt64(n * n))), "zoom \(z)")
        }
        for t in [TileID(z: 12, x: 3423, y: 1763), TileID(z: 20, x: 1_000_000, y: 3), TileID(z: 26, x: (1 << 26) - 1, y: 12345)] {
            XCTAssertEqual(PMTiles.tile(ofID: PMTiles.tileID(t)), t)
        }
        XCTAssertEqual(PMTiles.tile(ofID: 19_078_479), TileID(z: 12, x: 3423, y: 1763)) // the spec's example
    }

    /// A plan's archive tile is written as `[z, x, y, offset, length]`, and the keyed form of
    /// plans written before (`{"z", "x", "y", "o", "l"}`) still reads; anything else throws.
    func testArchiveTilesInAPlanAreFiveNumbersAndTheKeyedFormStillReads() throws {
        let t = PMTiles.ArchiveTile(tile: TileID(z: 14, x: 8612, y: 5792), offset: 5_000_000_123, length: 4321)
        XCTAssertEqual(String(decoding: try JSONEncoder().encode(t), as: UTF8.self), "[14,8612,5792,5000000123,4321]")
        XCTAssertEqual(try JSONDecoder().decode(PMTiles.ArchiveTile.self, from: Data("[14,8612,5792,5000000123,4321]".utf8)), t)
        XCTAssertEqual(try JSONDecoder().decode(PMTiles.ArchiveTile.self, from: Data(#"{"z":14,"x":8612,"y":5792,"o":5000000123,"l":4321}"#.utf8)), t)
        XCTAssertThrowsError(try JSONDecoder().decode(PMTiles.ArchiveTile.self, from: Data("[14,8612,5792]".utf8)))
        XCTAssertThrowsError(try JSONDecoder().decode(PMTiles.ArchiveTile.self, from: Data(#"{"z":14,"x":8612}"#.utf8)))
    }

    /// A plan's archive tiles are one base64 string of 21-byte records (`ArchiveSource`), which
    /// reads back equal; a plan written before, with an array of tiles, still reads; a packed
    /// string that is not whole records, or names a tile that could not have been planned, throws.
    func testArchiveTilesInAPlanArePackedAndTheArrayFormStillReads() throws {
        let tiles = [PMTiles.ArchiveTile(tile: TileID(z: 30, x: (1 << 30) - 1, y: 7), offset: 127, length: UInt32.max),
                     PMTiles.ArchiveTile(tile: TileID(z: 14, x: 8612, y: 5792), offset: 5_000_000_123, length: 4321)]
        var header = PMTiles.Header()
        header.tileCompression = .gzip
        header.tileType = 1
        let source = ArchiveSource(url: "https://example.org/a.pmtiles", etag: "\"v1\"", lastModified: 1_700_000_000, header: header,
                                   plan: PMTiles.ArchivePlan(tiles: tiles, tileBytes: 4321 + Int(UInt32.max), bodyBytes: 4321 + Int(UInt32.max), leavesRead: []))
        let json = try JSONSerialization.jsonObject(with: try JSONEncoder().encode(source)) as! [String: Any]
        let packed = try XCTUnwrap(json["tiles"] as? String)
        XCTAssertEqual(Data(base64Encoded: packed)?.count, 2 * 21)
        XCTAssertEqual(try JSONDecoder().decode(ArchiveSource.self, from: try JSONEncoder().encode(source)), source)
        var old = json
        old["tiles"] = [["z": 30, "x": (1 << 30) - 1, "y": 7, "o": 127, "l": Int(UInt32.max)], [14, 8612, 5792, 5_000_000_123, 4321]]
        XCTAssertEqual(try JSONDecoder().decode(ArchiveSource.self, from: try JSONSerialization.data(withJSONObject: old)), source)
        func record(z: UInt8, x: UInt32, y: UInt32, offset: UInt64, length: UInt32) -> Data {
            ArchiveSource.pack([PMTiles.ArchiveTile(tile: TileID(z: Int(z), x: Int(x), y: Int(y)), offset: offset, length: length)])
        }
        // Cut short; zoom 31; a column and a row outside zoom 3; a body whose end passes 2^63 - 1
        // (and UInt64 for its end: the coalescer's sum trapped on such a plan).
        for bad in [Data(base64Encoded: packed)!.dropLast(), Data([31] + [UInt8](repeating: 0, count: 20)),
                    record(z: 3, x: 8, y: 0, offset: 0, length: 1), record(z: 3, x: 0, y: 8, offset: 0, length: 1),
                    record(z: 3, x: 0, y: 0, offset: UInt64(Int64.max), length: 1), record(z: 3, x: 0, y: 0, offset: UInt64.max, length: 2)] {
            var damaged = json
            damaged["tiles"] = bad.base64EncodedString()
            XCTAssertThrowsError(try JSONDecoder().decode(ArchiveSource.self, from: try JSONSerialization.data(withJSONObject: damaged)))
        }
    }

    /// Archive fields that could not have been planned make the plan unreadable, as a rectangle
    /// outside its zoom does (contract.md), never a crash or a region downloading for ever
    /// (attack round 22: tiles out of offset order trapped on the cut queue; an empty or
    /// duplicated tile list left the region `downloading`, or `completed` with a manifest export
    /// refused): tiles not sorted by offset, a tile listed twice, a compression other than none or
    /// gzip, `tileBytes` not the sum of the lengths, `bodyBytes` above it, a tile list that the
    /// rectangles' counts do not match or that no rectangle plans, a tile set listed twice, and a
    /// `pmtiles://` set without its archive.
    func testArchiveFieldsThatCouldNotHaveBeenPlannedMakeThePlanUnreadable() throws {
        let a = PMTiles.ArchiveTile(tile: TileID(z: 1, x: 0, y: 0), offset: 100, length: 10)
        let b = PMTiles.ArchiveTile(tile: TileID(z: 1, x: 1, y: 0), offset: 110, length: 20)
        var header = PMTiles.Header()
        header.tileCompression = .gzip
        func source(_ tiles: [PMTiles.ArchiveTile]) -> ArchiveSource {
            let bytes = tiles.reduce(0) { $0 + Int($1.length) }
            return ArchiveSource(url: "https://example.org/a.pmtiles", etag: "\"v\"", lastModified: nil, header: header,
                                 plan: PMTiles.ArchivePlan(tiles: tiles, tileBytes: bytes, bodyBytes: bytes, leavesRead: []))
        }
        func plan(_ archive: ArchiveSource) -> ResourcePlan {
            ResourcePlan(resources: [], tileSets: [TileSet(source: "t", archive: archive, rects: [TileRect(z: 1, minX: 0, minY: 0, maxX: 1, maxY: 1)], shape: nil)])
        }
        func decodes(_ p: ResourcePlan, sets change: (inout [[String: Any]]) -> Void) throws -> Bool {
            var doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: try JSONEncoder().encode(p)) as? [String: Any])
            var sets = try XCTUnwrap(doc["tileSets"] as? [[String: Any]])
            change(&sets)
            doc["tileSets"] = sets
            return (try? JSONDecoder().decode(ResourcePlan.self, from: try JSONSerialization.data(withJSONObject: doc))) != nil
        }
        func reads(_ p: ResourcePlan, _ change: @escaping (inout [String: Any]) -> Void = { _ in }) throws -> Bool {
            try decodes(p) { sets in
                var archive = sets[0]["archive"] as! [String: Any]
                change(&archive)
                sets[0]["archive"] = archive
            }
        }
        let good = plan(source([a, b]))
        XCTAssertEqual(good.tileSets[0].rectCounts, [2])
        XCTAssertTrue(try reads(good))
        XCTAssertFalse(try reads(good) { $0["tiles"] = ArchiveSource.pack([b, a]).base64EncodedString() }, "not sorted by offset")
        XCTAssertFalse(try reads(good) { $0["tiles"] = ArchiveSource.pack([a, PMTiles.ArchiveTile(tile: a.tile, offset: 110, length: 20)]).base64EncodedString() }, "listed twice")
        XCTAssertFalse(try reads(good) { $0["tileCompression"] = 9 })
        XCTAssertFalse(try reads(good) { $0["tileBytes"] = -5 })
        XCTAssertFalse(try reads(good) { $0["tileBytes"] = 31 })
        XCTAssertFalse(try reads(good) { $0["bodyBytes"] = 31 })
        XCTAssertFalse(try reads(good) { $0["tiles"] = ""; $0["tileBytes"] = 0; $0["bodyBytes"] = 0 }, "no tile where the rectangle counts two")
        // A tile moved to another of the rectangle's tiles keeps the counts: that plan is sound.
        XCTAssertTrue(try reads(good) { $0["tiles"] = ArchiveSource.pack([a, PMTiles.ArchiveTile(tile: TileID(z: 1, x: 1, y: 1), offset: 110, length: 20)]).base64EncodedString() })
        // Round 23: the rectangles removed, the tiles left (no rectangle plans them); the tile set
        // listed twice under one source; the archive removed from a `pmtiles://` set.
        XCTAssertFalse(try decodes(good) { $0[0]["rects"] = [Any](); $0[0]["rectCounts"] = [Any]() })
        XCTAssertFalse(try decodes(good) { $0.append($0[0]) })
        XCTAssertFalse(try decodes(good) { $0[0]["archive"] = nil })
        XCTAssertTrue(try decodes(good) { _ in }, "the untouched plan through the same path")
    }

    // MARK: Header

    func testHeaderRoundTripsAndOtherVersionsAreRefusedByName() throws {
        var h = PMTiles.Header()
        h.rootLength = 300; h.metadataOffset = 427; h.metadataLength = 20; h.leafOffset = 447; h.leafLength = 99
        h.dataOffset = 546; h.dataLength = 123_456; h.addressedTiles = 85; h.tileEntries = 80; h.tileContents = 79
        h.tileCompression = .gzip; h.tileType = 1; h.minZoom = 2; h.maxZoom = 14
        h.minLon = 7.4; h.minLat = 43.7; h.maxLon = 7.5; h.maxLat = 43.8; h.centerZoom = 9; h.centerLon = 7.45; h.centerLat = 43.75
        let back = try PMTiles.readHeader(h.bytes + [1, 2, 3])
        XCTAssertEqual(back, h)

        func refusal(_ bytes: [UInt8]) -> String? {
            do { _ = try PMTiles.readHeader(bytes); return nil } catch { return error.message }
        }
        XCTAssertEqual(refusal(Array("PM".utf8) + [1, 0] + [UInt8](repeating: 0, count: 200)),
                       "the archive is PMTiles version 1; only version 3 is supported (convert it with `pmtiles convert`)")
        XCTAssertTrue(refusal(Array("PM".utf8) + [2, 0] + [UInt8](repeating: 0, count: 200))?.contains("version 2") == true)
        var v4 = h.bytes; v4[7] = 4
        XCTAssertEqual(refusal(v4), "the archive is PMTiles version 4; only version 3 is supported")
        XCTAssertTrue(refusal(Array(h.bytes[0..<100]))?.contains("cut short: 100 of 127") == true)
        XCTAssertTrue(refusal(Array("<html>".utf8))?.contains("not a PMTiles archive") == true)
        var brotli = h.bytes; brotli[98] = 3
        XCTAssertTrue(refusal(brotli)?.contains("brotli") == true)

        // The real v1 archives in mapdata are refused naming their version.
        if MapData.isAvailable {
            for name in ["osm_carto.v1.pmtiles", "tpe_sample.v1.pmtiles"] {
                let data = try Data(contentsOf: MapData.directory.appendingPathComponent("pmtiles/\(name)"))
                XCTAssertEqual(refusal([UInt8](data.prefix(127))),
                               "the archive is PMTiles version 1; only version 3 is supported (convert it with `pmtiles convert`)", name)
            }
        }
    }

    // MARK: Directories

    func testDirectoryRoundTripWithRunLengthsAndRelativeOffsets() throws {
        let entries = [
            PMTiles.Entry(tileID: 0, offset: 0, length: 10, runLength: 1),
            PMTiles.Entry(tileID: 1, offset: 10, length: 20, runLength: 3),   // relative (0 in the offsets column)
            PMTiles.Entry(tileID: 4, offset: 0, length: 10, runLength: 1),    // the first body again
            PMTiles.Entry(tileID: 5, offset: 1_000_000, length: 70_000, runLength: 1_000),
            PMTiles.Entry(tileID: 90_000, offset: 77, length: 5, runLength: 0), // a leaf pointer
        ]
        let bytes = PMTiles.serializeDirectory(entries)
        XCTAssertEqual(try PMTiles.readDirectory(bytes), entries)
        XCTAssertEqual(try PMTiles.readDirectory(PMTiles.serializeDirectory([])), [])

        func refusal(_ bytes: [UInt8]) -> String? {
            do { _ = try PMTiles.readDirectory(bytes); return nil } catch { return error.message }
        }
        XCTAssertNotNil(refusal(Array(bytes.dropLast())), "cut short")
        XCTAssertNotNil(refusal(bytes + [0]), "bytes left over")
        XCTAssertNotNil(refusal([0xFF, 0xFF, 0xFF, 0x0F]), "a count that cannot fit")
        // TileIds not increasing (a zero delta after the first), a zero length.
        XCTAssertNotNil(refusal([2, 5, 0, 1, 1, 3, 3, 1, 0]))
        XCTAssertNotNil(refusal([1, 5, 1, 0, 1]))
        // A relative offset whose sum passes 2^64 is damage, not a trap (2026-12-07).
        var far: [UInt8] = [], v = UInt64.max - 4 // offset 2^64 - 6, stored plus one
        while v >= 0x80 { far.append(UInt8(v & 0x7F) | 0x80); v >>= 7 }
        far.append(UInt8(v))
        XCTAssertEqual(refusal([2, 0, 1, 1, 1, 10, 10] + far + [0]), "a PMTiles directory's offsets pass 2^64 (entry 1)")
    }

    // MARK: Planner

    /// A hand-built archive layout: root directory with two tile entries and two leaf pointers
    /// (gzip-compressed as writers do), leaves holding runs. The planner reads only the leaf
    /// that meets the region and lists exactly the wanted tiles the archive holds.
    /// Attack round 5: directories whose entries overlap (a run reaching into the next entry),
    /// two root entries naming one leaf, or a leaf holding TileIds outside its parent's range made
    /// the plan count tiles twice (680 planned where 85 exist): each is refused as damaged now,
    /// and a directory claiming more than `maxDirectoryEntries` entries is refused before it is read.
    func testOverlappingEntriesAndSharedLeavesAreRefused() throws {
        var h = PMTiles.Header()
        h.dataOffset = 1000; h.leafOffset = 5000; h.minZoom = 0; h.maxZoom = 3
        let all = PMTiles.tileIDs(rects: [TileRect(z: 0, minX: 0, minY: 0, maxX: 0, maxY: 0), TileRect(z: 1, minX: 0, minY: 0, maxX: 1, maxY: 1),
                                          TileRect(z: 2, minX: 0, minY: 0, maxX: 3, maxY: 3), TileRect(z: 3, minX: 0, minY: 0, maxX: 7, maxY: 7)], shape: nil)
        func message(_ root: [PMTiles.Entry], leaves: [UInt64: [PMTiles.Entry]] = [:]) -> String? {
            do {
                _ = try PMTiles.plan(header: h, root: root, wanted: all) { e in leaves[e.offset] ?? [] }
                return nil
            } catch { return "\(error)" }
        }
        // Tile 1 with a run of 3 (ids 1, 2, 3) and then tile 2 again.
        XCTAssertTrue(message([.init(tileID: 1, offset: 0, length: 10, runLength: 3), .init(tileID: 2, offset: 10, length: 10, runLength: 1)])?
            .contains("entries overlap: TileId 1 with run length 3 reaches past the next entry's TileId 2") == true)
        // Two root entries naming the same leaf (ids 5..<21 and 21..<85): its entries lie outside the second's range.
        let leaf: [PMTiles.Entry] = [.init(tileID: 5, offset: 0, length: 10, runLength: 16)]
        XCTAssertTrue(message([.init(tileID: 5, offset: 0, length: 30, runLength: 0), .init(tileID: 21, offset: 0, length: 30, runLength: 0)],
                              leaves: [0: leaf])?.contains("holds TileId 5, outside the range 21..<") == true)
        // A leaf holding a TileId below its parent's.
        XCTAssertTrue(message([.init(tileID: 0, offset: 0, length: 10, runLength: 1), .init(tileID: 6, offset: 0, length: 30, runLength: 0)],
                              leaves: [0: leaf])?.contains("holds TileId 5, outside the range 6..<") == true)
        // Attack round 6: a body beyond the tile data section the header gives.
        var sized = h
        sized.dataLength = 15
        do {
            _ = try PMTiles.plan(header: sized, root: [.init(tileID: 0, offset: 10, length: 10, runLength: 1)], wanted: all) { _ in [] }
            XCTFail("a body beyond the tile data was planned")
        } catch {
            XCTAssertTrue("\(error)".contains("names bytes 10..<20 of the tile data, which holds 15 bytes"), "\(error)")
        }
        XCTAssertEqual(try PMTiles.plan(header: sized, root: [.init(tileID: 0, offset: 5, length: 10, runLength: 1)], wanted: all) { _ in [] }.tiles.count, 1)
        // The same leaf under one entry only is fine: 16 tiles, each once.
        let ok = try PMTiles.plan(header: h, root: [.init(tileID: 5, offset: 0, length: 30, runLength: 0)], wanted: all) { _ in leaf }
        XCTAssertEqual(ok.tiles.count, 16)
        XCTAssertEqual(Set(ok.tiles.map(\.tile)).count, 16)
        // An entry count above the limit, with bytes enough for it.
        var big: [UInt8] = []
        var n = UInt64(PMTiles.maxDirectoryEntries + 1)
        while n >= 0x80 { big.append(UInt8(n & 0x7F) | 0x80); n >>= 7 }
        big.append(UInt8(n))
        big += [UInt8](repeating: 1, count: (PMTiles.maxDirectoryEntries + 1) * 4)
        XCTAssertThrowsError(try PMTiles.readDirectory(big)) { e in
            XCTAssertTrue("\(e)".contains("more than the \(PMTiles.maxDirectoryEntries) TileSpool reads in one directory"), "\(e)")
        }
    }

    func testPlannerReadsOnlyTheLeavesThatMeetTheRegionAndExpandsRuns() throws {
        // z0 and z1 tiles in the root; z2 tiles in leaf A (ids 5..<21); z3 in leaf B (ids 21..<85).
        let leafA: [PMTiles.Entry] = [
            .init(tileID: 5, offset: 300, length: 50, runLength: 4),   // ids 5,6,7,8 share one body
            .init(tileID: 12, offset: 350, length: 60, runLength: 1),
            .init(tileID: 13, offset: 410, length: 70, runLength: 1),
        ]
        let leafB: [PMTiles.Entry] = [.init(tileID: 21, offset: 480, length: 10, runLength: 64)]
        let gz = { (e: [PMTiles.Entry]) in try Zlib.compress(PMTiles.serializeDirectory(e), .gzip) }
        let a = try gz(leafA), b = try gz(leafB)
        let root: [PMTiles.Entry] = [
            .init(tileID: 0, offset: 0, length: 100, runLength: 1),
            .init(tileID: 1, offset: 100, length: 200, runLength: 1),   // z1 0/0 only
            .init(tileID: 5, offset: 0, length: UInt32(a.count), runLength: 0),
            .init(tileID: 21, offset: UInt64(a.count), length: UInt32(b.count), runLength: 0),
        ]
        let rootBytes = try gz(root)
        var h = PMTiles.Header()
        h.dataOffset = 1000; h.leafOffset = 5000; h.minZoom = 0; h.maxZoom = 3
        let leafSection = a + b
        var asked: [PMTiles.Entry] = []
        func leaf(_ e: PMTiles.Entry) throws -> [PMTiles.Entry] {
            asked.append(e)
            let bytes = Array(leafSection[Int(e.offset)..<Int(e.offset) + Int(e.length)])
            return try PMTiles.readDirectory(try Zlib.inflate(bytes, limit: 1 << 20))
        }
        let rootEntries = try PMTiles.readDirectory(try Zlib.inflate(rootBytes, limit: 1 << 20))
        XCTAssertEqual(rootEntries, root)

        // The north-west quarter of the world at z0-2: z0 0/0/0, z1 0/0 (held), z2 the 4 tiles
        // x,y in 0...1 (ids 5,6,7,8: one run), leaf B (z3) never read.
        let rects = [TileRect(z: 0, minX: 0, minY: 0, maxX: 0, maxY: 0), TileRect(z: 1, minX: 0, minY: 0, maxX: 0, maxY: 0),
                     TileRect(z: 2, minX: 0, minY: 0, maxX: 1, maxY: 1)]
        let wanted = PMTiles.tileIDs(rects: rects, shape: nil)
        XCTAssertEqual(wanted, [0, 1, 5, 6, 7, 8])
        let plan = try PMTiles.plan(header: h, root: rootEntries, wanted: wanted, leaf: leaf)
        XCTAssertEqual(asked, [root[2]], "only leaf A meets the region")
        XCTAssertEqual(plan.leavesRead, [root[2]])
        XCTAssertEqual(plan.tileCount, 6)
        XCTAssertEqual(plan.tiles.map(\.tile), [TileID(z: 0, x: 0, y: 0), TileID(z: 1, x: 0, y: 0),
                                                 TileID(z: 2, x: 0, y: 0), TileID(z: 2, x: 1, y: 0), TileID(z: 2, x: 1, y: 1), TileID(z: 2, x: 0, y: 1)])
        XCTAssertEqual(plan.tiles.map(\.offset), [1000, 1100, 1300, 1300, 1300, 1300])
        XCTAssertEqual(plan.tileBytes, 100 + 200 + 4 * 50)
        XCTAssertEqual(plan.bodyBytes, 100 + 200 + 50)

        // z1 1/1 is not in the archive; z3 tiles come from leaf B's run; the z2 tile of id 10 (in
        // leaf A's range but in no entry) is not held.
        asked = []
        let unheld = try XCTUnwrap(PMTiles.tile(ofID: 10))
        let w2 = PMTiles.tileIDs(rects: [TileRect(z: 1, minX: 1, minY: 1, maxX: 1, maxY: 1),
                                         TileRect(z: 2, minX: unheld.x, minY: unheld.y, maxX: unheld.x, maxY: unheld.y),
                                         TileRect(z: 3, minX: 0, minY: 0, maxX: 7, maxY: 7)], shape: nil)
        let p2 = try PMTiles.plan(header: h, root: rootEntries, wanted: w2, leaf: leaf)
        XCTAssertEqual(asked, [root[2], root[3]])
        XCTAssertEqual(p2.tileCount, 64)
        XCTAssertEqual(Set(p2.tiles.map(\.tile)), Set((0..<64).map { TileID(z: 3, x: $0 % 8, y: $0 / 8) }))
        XCTAssertEqual(p2.tileBytes, 640)
        XCTAssertEqual(p2.bodyBytes, 10)
        XCTAssertEqual(PMTiles.coalesce(p2.tiles), [PMTiles.RangeRequest(start: 1480, end: 1490, tiles: 0..<64, gapBytes: 0)])
    }

    /// `tiles` entries and style sources naming archives are accepted (both forms); a corridor or
    /// parts request with an archive is refused naming the source (not supported yet), before
    /// any archive is read.
    func testArchiveSourceFormsAndTheirRefusals() throws {
        XCTAssertEqual(PMTiles.archiveURL("pmtiles://https://h.example/x.pmtiles"), "https://h.example/x.pmtiles")
        XCTAssertEqual(PMTiles.archiveURL("PMTiles://http://h.example/x"), "http://h.example/x")
        XCTAssertEqual(PMTiles.archiveURL("https://h.example/a/x.PMTILES?key=1"), "https://h.example/a/x.PMTILES?key=1")
        XCTAssertNil(PMTiles.archiveURL("https://h.example/{z}/{x}/{y}.pmtiles"))
        XCTAssertNil(PMTiles.archiveURL("https://h.example/x.pmtiles.png"))
        XCTAssertEqual(Redaction.redact("pmtiles://https://u:secret@h.example/x.pmtiles?token=abc"),
                       "pmtiles://https://REDACTED@h.example/x.pmtiles?token=REDACTED")
        XCTAssertEqual(TileUsagePolicy.host(of: "pmtiles://https://tile.openstreetmap.org/x.pmtiles"), "tile.openstreetmap.org")
        // Over parts too, an archive entry is planned from its directories: without them, refused.
        let parts: [String: Any] = ["id": "p", "tiles": ["pmtiles://https://h.example/x.pmtiles"],
                                    "parts": [["bounds": [7.4, 43.7, 7.5, 43.8], "minZoom": 0, "maxZoom": 3]]]
        let request = try RequestValidator.validate(try JSONSerialization.data(withJSONObject: parts), fileName: "p.json")
        XCTAssertThrowsError(try Planner.plan(request: request, templates: ["pmtiles://https://h.example/x.pmtiles"])) { e in
            XCTAssertEqual((e as? RegionError)?.code, .invalidRequest)
            XCTAssertTrue((e as? RegionError)?.message.contains("must be read before the plan is made") == true, "\(e)")
        }
    }

    /// The tiles a region spans at an archive's zooms are counted before they are listed: over
    /// the request's maxTiles, the daemon's --max-tiles or the most TileSpool lists, the region is
    /// refused naming the limit; within them, not. A shape counts only the tiles it meets.
    func testARegionSpanningMoreTilesThanTheLimitIsRefusedBeforeItsTilesAreListed() throws {
        let world = Planner.rects(GeoBounds(west: -180, south: -85, east: 180, north: 85), 0, 20)
        let e = try XCTUnwrap(PMTiles.regionLimitError(rects: world, shape: nil, limits: .init(maxTiles: nil, daemonMaxTiles: 1_000_000), source: "tiles0"))
        XCTAssertEqual(e.code, .tileLimitExceeded)
        XCTAssertTrue(e.message.contains("more than the daemon's --max-tiles (1000000)"), e.message)
        let huge = try XCTUnwrap(PMTiles.regionLimitError(rects: world, shape: nil, limits: .init(maxTiles: nil, daemonMaxTiles: Int.max), source: "tiles0"))
        XCTAssertTrue(huge.message.contains("more than 200000000, the most TileSpool lists"), huge.message)
        let small = Planner.rects(GeoBounds(west: 7, south: 43, east: 8, north: 44), 0, 14)
        let n = small.reduce(0) { $0 + $1.count }
        XCTAssertNil(PMTiles.regionLimitError(rects: small, shape: nil, limits: .init(maxTiles: n, daemonMaxTiles: 1_000_000), source: "tiles0"))
        let own = try XCTUnwrap(PMTiles.regionLimitError(rects: small, shape: nil, limits: .init(maxTiles: n - 1, daemonMaxTiles: 1_000_000), source: "s"))
        XCTAssertTrue(own.message.contains("more than the request's maxTiles (\(n - 1))"), own.message)
        // A thin triangle inside the box meets fewer tiles than the box holds: within a limit the box would pass.
        let triangle = RegionShape(polygons: [[[[7.0, 43.0], [8.0, 43.0], [7.0, 43.1], [7.0, 43.0]]]])
        XCTAssertNil(PMTiles.regionLimitError(rects: small, shape: triangle, limits: .init(maxTiles: n / 2, daemonMaxTiles: 1_000_000), source: "s"))
    }

    /// Attack round 11: boxes that do not cross the antimeridian never make a union that does
    /// (two gaps as wide: the one across the antimeridian is left out), and the box a whole
    /// MBTiles or PMTiles export states has west < east, as a subset's does.
    func testUnionsAndStatedExportBoxesDoNotCrossTheAntimeridianNeedlessly() {
        let parts = [GeoBounds(west: -30, south: -30, east: 40, north: 40), GeoBounds(west: 10, south: 10, east: 120, north: 70),
                     GeoBounds(west: -170, south: -80, east: -100, north: -50), GeoBounds(west: 5, south: 5, east: 30, north: 30)]
        XCTAssertEqual(GeoBounds.union(parts), GeoBounds(west: -170, south: -80, east: 120, north: 70))
        // A real crossing still crosses (the narrower reading).
        XCTAssertEqual(GeoBounds.union([GeoBounds(west: 170, south: 0, east: 175, north: 1), GeoBounds(west: -175, south: 0, east: -170, north: 1)]),
                       GeoBounds(west: 170, south: 0, east: -170, north: 1))
        XCTAssertEqual(MBTilesExport.stated(GeoBounds(west: 170, south: 10, east: -170, north: 20)), GeoBounds(west: -180, south: 10, east: 180, north: 20))
        XCTAssertEqual(MBTilesExport.stated(GeoBounds(west: 1, south: 2, east: 3, north: 4)), GeoBounds(west: 1, south: 2, east: 3, north: 4))
        let (lon, _) = MBTilesExport.center(GeoBounds(west: 170, south: 10, east: -170, north: 20))
        XCTAssertEqual(lon, 180, accuracy: 1e-9, "the centre is still the crossing box's")
        // A geometry across the antimeridian (170...190, split at 180): its bounds are the whole
        // width (the tile limit's box), its outline the crossing box exports state (round 12).
        let polygon: [String: Any] = ["type": "Polygon", "coordinates": [[[170, -10], [190, -10], [190, 10], [170, 10], [170, -10]]]]
        guard case .success(let shape) = RegionShape.parse(polygon) else { return XCTFail("the polygon parses") }
        XCTAssertEqual(shape.bounds.west, -180); XCTAssertEqual(shape.bounds.east, 180)
        XCTAssertEqual(shape.outline, GeoBounds(west: 170, south: -10, east: -170, north: 10))
        XCTAssertEqual(MBTilesExport.center(shape.outline).0, 180, accuracy: 1e-9)
    }

    /// The header's bounds and zooms clip the region as a TileJSON's do.
    func testCoverIsClippedByTheHeadersBoundsAndZooms() {
        var h = PMTiles.Header()
        h.minZoom = 8; h.maxZoom = 10
        h.minLon = 0; h.minLat = 0; h.maxLon = 10; h.maxLat = 10
        let world = GeoBounds(west: -20, south: -5, east: 5, north: 5)
        let rects = PMTiles.cover(world, minZoom: 0, maxZoom: 14, header: h)
        XCTAssertEqual(Set(rects.map(\.z)), [8, 9, 10])
        let clipped = GeoBounds(west: 0, south: 0, east: 5, north: 5)
        XCTAssertEqual(rects, Planner.rects(clipped, 8, 10))
    }

    // MARK: Coalescer

    func testCoalescerMergesSmallGapsWithinTheBoundsAndCapsRanges() {
        func t(_ offset: UInt64, _ length: UInt32, _ x: Int) -> PMTiles.ArchiveTile {
            PMTiles.ArchiveTile(tile: TileID(z: 10, x: x, y: 0), offset: offset, length: length)
        }
        // Contiguous bodies: one range.
        let contiguous = (0..<100).map { t(UInt64($0) * 1000, 1000, $0) }
        XCTAssertEqual(PMTiles.coalesce(contiguous), [.init(start: 0, end: 100_000, tiles: 0..<100, gapBytes: 0)])
        XCTAssertEqual(PMTiles.coalesce(contiguous).first?.header, "bytes=0-99999")
        // A gap of 5% of the wanted bytes is spanned; a second one that would take the gaps past
        // a tenth of the wanted bytes is not.
        let gapped = [t(0, 100_000, 0), t(105_000, 100_000, 1), t(205_000 + 65_537, 100_000, 2)]
        XCTAssertEqual(PMTiles.coalesce(gapped), [.init(start: 0, end: 205_000, tiles: 0..<2, gapBytes: 5000),
                                                  .init(start: 270_537, end: 370_537, tiles: 2..<3, gapBytes: 0)])
        // A gap over a tenth of the wanted bytes is not spanned, however small.
        XCTAssertEqual(PMTiles.coalesce([t(0, 100_000, 0), t(100_000 + 2_000_000, 100_000_000, 1)]).count, 2, "a gap over maxGap")
        let sparse = [t(0, 1000, 0), t(1201, 1000, 1)]
        XCTAssertEqual(PMTiles.coalesce(sparse).count, 2)
        let dense = [t(0, 1000, 0), t(1150, 1000, 1)]
        XCTAssertEqual(PMTiles.coalesce(dense).count, 1)
        // Ranges are capped (a single larger body is its own range).
        let big = (0..<10).map { t(UInt64($0) << 20, 1 << 20, $0) } + [t(10 << 20, 9 << 20, 10)]
        let ranges = PMTiles.coalesce(big)
        XCTAssertEqual(ranges.map(\.tiles), [0..<2, 2..<4, 4..<6, 6..<8, 8..<10, 10..<11], "2 MiB ranges by default")
        XCTAssertTrue(ranges.dropLast().allSatisfy { $0.length <= PMTiles.defaultMaxRange })
        XCTAssertEqual(PMTiles.coalesce(big, maxRange: 4 << 20).map(\.tiles), [0..<4, 4..<8, 8..<10, 10..<11])
        // Whatever the layout: every tile in exactly one range that holds its body, and the
        // bytes asked at most 1.1x the distinct bodies.
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<50 {
            var tiles: [PMTiles.ArchiveTile] = []
            var at: UInt64 = 0
            for i in 0..<300 {
                if Bool.random(using: &rng) || tiles.isEmpty { at += UInt64.random(in: 0...80_000, using: &rng) } else { at = tiles.last!.offset + UInt64(tiles.last!.length) }
                let len = UInt32.random(in: 1...60_000, using: &rng)
                tiles.append(t(at, len, i))
                if Int.random(in: 0..<10, using: &rng) == 0 { tiles.append(t(at, len, 1000 + i)) } // a run-length twin
            }
            let rs = PMTiles.coalesce(tiles)
            XCTAssertEqual(rs.flatMap { Array($0.tiles) }, Array(0..<tiles.count))
            for r in rs { for i in r.tiles { XCTAssertTrue(r.start <= tiles[i].offset && tiles[i].offset + UInt64(tiles[i].length) <= r.end) } }
            var distinct = 0, last: UInt64?
            for x in tiles where x.offset != last { distinct += Int(x.length); last = x.offset }
            let asked = rs.reduce(0) { $0 + Int($1.length) }
            XCTAssertLessThanOrEqual(Double(asked), 1.1 * Double(distinct))
        }
    }

    // MARK: The real archives, read through the planner (no network)

    /// Every tile of the two v3 archives in mapdata, planned over the whole world at every
    /// zoom, cut out of the file by offset and length, is byte-identical to the same z/x/y in
    /// mapdata/raster; the counts and bytes are those the notes give.
    func testRealArchivesPlanExactlyAndCutBodiesMatchTheRasterFiles() throws {
        let mapdata = try MapData.require()
        for (name, raster, ext, tiles, bytes) in [
            ("stamen_toner(raster)CC-BY+ODbL_z3.pmtiles", "stamen_toner", "png", 85, 720_035),
            ("usgs-mt-whitney-8-15-webp-512.pmtiles", "usgs_whitney", "webp", 50, 1_964_030),
        ] {
            let file = [UInt8](try Data(contentsOf: mapdata.appendingPathComponent("pmtiles/\(name)")))
            let h = try PMTiles.readHeader(file)
            XCTAssertEqual(h.internalCompression, .gzip)
            func directory(_ offset: UInt64, _ length: UInt64) throws -> [PMTiles.Entry] {
                let raw = Array(file[Int(offset)..<Int(offset + length)])
                return try PMTiles.readDirectory(try Zlib.inflate(raw, limit: 1 << 26))
            }
            let root = try directory(h.rootOffset, h.rootLength)
            let world = GeoBounds(west: -180, south: -85.05, east: 180, north: 85.05)
            let rects = PMTiles.cover(world, minZoom: 0, maxZoom: 22, header: h)
            let plan = try PMTiles.plan(header: h, root: root, wanted: PMTiles.tileIDs(rects: rects, shape: nil)) { e in
                try directory(h.leafOffset + e.offset, UInt64(e.length))
            }
            XCTAssertEqual(plan.tileCount, tiles, name)
            XCTAssertEqual(plan.tileBytes, bytes, name)
            XCTAssertEqual(UInt64(plan.tileCount), h.addressedTiles, name)
            for t in plan.tiles {
                let body = Data(file[Int(t.offset)..<Int(t.offset) + Int(t.length)])
                let path = mapdata.appendingPathComponent("raster/\(raster)/\(t.tile.z)/\(t.tile.x)/\(t.tile.y).\(ext)")
                XCTAssertEqual(body, try Data(contentsOf: path), "\(name) \(t.tile)")
            }
            let ranges = PMTiles.coalesce(plan.tiles)
            let asked = ranges.reduce(0) { $0 + Int($1.length) }
            print("MEASURED: \(name): \(plan.tileCount) tiles, \(plan.tileBytes) tile bytes, \(plan.bodyBytes) distinct, \(ranges.count) range requests, \(asked) bytes asked")
            XCTAssertLessThanOrEqual(Double(asked), 1.1 * Double(plan.bodyBytes))
        }
    }
}

/// `tilespool plan` over PMTiles sources served by nginx (range requests): the exact tile count
/// and tile bytes, known from the header and directories alone, with the independent `pmtiles`
/// reader as the witness; requests counted in nginx's access log.
final class PMTilesPlanTests: XCTestCase {
    static let whitney = "/pmtiles/usgs-mt-whitney-8-15-webp-512.pmtiles"
    static let stamen = "/pmtiles/stamen_toner%28raster%29CC-BY%2BODbL_z3.pmtiles"

    func plan(_ fx: SpoolFixture, _ request: [String: Any], json: Bool = true) throws -> (Int32, String, [String: Any]?) {
        let file = fx.root.appendingPathComponent("pm.json")
        try JSONSerialization.data(withJSONObject: request).write(to: file)
        let (rc, out) = try fx.cli(["plan", file.path] + (json ? ["--json"] : []))
        let doc = json ? (try? JSONSerialization.jsonObject(with: Data(out.utf8))) as? [String: Any] : nil
        return (rc, out, doc)
    }

    /// Both source forms of a `tiles` entry (`pmtiles://http://...` and an http URL ending in
    /// `.pmtiles`) plan the real archives exactly (the notes' counts and bytes) from one request
    /// each: the header and root directory lie in the first 16 KiB.
    func testPlanOfRealArchivesIsExactFromOneRequest() throws {
        let mapdata = try MapData.require()
        let nginx = try NginxServer(root: mapdata)
        defer { nginx.stop() }
        let fx = try SpoolFixture()
        var (rc, out, doc) = try plan(fx, ["id": "whitney", "tiles": ["pmtiles://" + nginx.url(Self.whitney)],
                                           "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 15])
        XCTAssertEqual(rc, 0, out)
        XCTAssertEqual(doc?["tiles"] as? Int, 50, out)
        XCTAssertEqual(doc?["tileBytes"] as? Int, 1_964_030, out)
        let src = (doc?["bySource"] as? [String: Any])?["tiles0"] as? [String: Any]
        XCTAssertEqual(src?["tileBytes"] as? Int, 1_964_030, out)
        XCTAssertEqual((src?["byZoom"] as? [String: Int])?.keys.sorted(), ["10", "11", "12", "13", "14", "15", "8", "9"], out)
        XCTAssertEqual(nginx.accessLog().filter { $0.path == Self.whitney }.map(\.status), [206])
        // Attack round 6: zooms the archive does not hold plan no tile; plan refuses what the
        // daemon would fail (allTilesEmpty) instead of printing 0 tiles and exiting 0.
        let (erc, eout, _) = try plan(fx, ["id": "none", "tiles": ["pmtiles://" + nginx.url(Self.whitney)],
                                           "bounds": [-180, -85, 180, 85], "minZoom": 2, "maxZoom": 4])
        XCTAssertEqual(erc, 1, eout)
        XCTAssertTrue(eout.contains("allTilesEmpty: the plan holds no tile"), eout)

        // z0-2 of the stamen archive (1 + 4 + 16 tiles), as an http URL ending in .pmtiles.
        (rc, out, doc) = try plan(fx, ["id": "stamen", "tiles": [nginx.url(Self.stamen)],
                                       "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 2])
        XCTAssertEqual(rc, 0, out)
        XCTAssertEqual(doc?["tiles"] as? Int, 21, out)
        var expected = 0
        for z in 0...2 { for x in 0..<(1 << z) { for y in 0..<(1 << z) {
            expected += try Data(contentsOf: mapdata.appendingPathComponent("raster/stamen_toner/\(z)/\(x)/\(y).png")).count
        } } }
        XCTAssertEqual(doc?["tileBytes"] as? Int, expected, out)
        (rc, out, _) = try plan(fx, ["id": "stamen", "tiles": [nginx.url(Self.stamen)],
                                     "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 2], json: false)
        XCTAssertTrue(out.contains("plan for stamen: 21 resources, 21 tiles, \(expected) tile bytes"), out)
    }

    /// A style whose vector and raster sources are `pmtiles://` URLs (one relative to the style):
    /// `plan` reads no TileJSON, and gives each archive source's exact tiles and bytes.
    func testPlanOfAStyleWithPMTilesSources() throws {
        let mapdata = try MapData.require()
        let dir = try TestScratch.folder("pmtiles-style")
        let nginx = try NginxServer(root: mapdata, extraLocations: "location ^~ /gen/ { alias \(dir.path)/; }")
        defer { nginx.stop() }
        let style: [String: Any] = ["version": 8, "sources": [
            "toner": ["type": "raster", "tileSize": 256, "url": "pmtiles://" + nginx.url(PMTilesPlanTests.stamen)],
            "whitney": ["type": "raster", "tileSize": 512, "url": "pmtiles://../pmtiles/usgs-mt-whitney-8-15-webp-512.pmtiles"]],
            "layers": [["id": "t", "type": "raster", "source": "toner"], ["id": "w", "type": "raster", "source": "whitney"]]]
        try JSONSerialization.data(withJSONObject: style).write(to: dir.appendingPathComponent("style.json"))
        let fx = try SpoolFixture()
        let (rc, out, doc) = try plan(fx, ["id": "s", "style": nginx.url("/gen/style.json"), "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 2])
        XCTAssertEqual(rc, 0, out)
        let by = doc?["bySource"] as? [String: [String: Any]]
        // toner: 256 px tiles load one zoom deeper: z1-3 of the archive (4 + 16 + 64 tiles).
        XCTAssertEqual(by?["toner"]?["tiles"] as? Int, 84, out)
        // whitney: the archive's zooms are 8-15; the request's z0-2 load none of them.
        XCTAssertEqual(by?["whitney"]?["tiles"] as? Int, 0, out)
        var expected = 0
        for z in 1...3 { for x in 0..<(1 << z) { for y in 0..<(1 << z) {
            expected += try Data(contentsOf: mapdata.appendingPathComponent("raster/stamen_toner/\(z)/\(x)/\(y).png")).count
        } } }
        XCTAssertEqual(by?["toner"]?["tileBytes"] as? Int, expected, out)
        XCTAssertEqual(doc?["tileBytes"] as? Int, expected, out)
        XCTAssertEqual(nginx.accessLog().filter { $0.path.hasSuffix(".json") }.map(\.path), ["/gen/style.json"], "no TileJSON")
        XCTAssertEqual(nginx.accessLog().filter { $0.path.hasSuffix(".pmtiles") }.count, 2, "one request per archive")
    }

    /// A v1 archive is refused naming its version; a URL that is not http(s) inside pmtiles://
    /// is refused as any URL is; credentials in the inner URL are redacted in the message.
    func testOtherVersionsAndBadInnerURLsAreRefused() throws {
        let mapdata = try MapData.require()
        let nginx = try NginxServer(root: mapdata)
        defer { nginx.stop() }
        let fx = try SpoolFixture()
        var (rc, out, _) = try plan(fx, ["id": "v1", "tiles": ["pmtiles://" + nginx.url("/pmtiles/osm_carto.v1.pmtiles")],
                                         "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 2], json: false)
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("invalidArchive: source 'tiles0': the archive is PMTiles version 1; only version 3 is supported"), out)
        (rc, out, _) = try plan(fx, ["id": "ftp", "tiles": ["pmtiles://ftp://example.org/x.pmtiles"],
                                     "bounds": [0, 0, 1, 1], "minZoom": 0, "maxZoom": 2], json: false)
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("invalidRequest") && out.contains("uses the scheme 'ftp'"), out)
        (rc, out, _) = try plan(fx, ["id": "cred", "tiles": ["pmtiles://https://user:hunter2@bad host/x.pmtiles"],
                                     "bounds": [0, 0, 1, 1], "minZoom": 0, "maxZoom": 2], json: false)
        XCTAssertEqual(rc, 1, out)
        XCTAssertFalse(out.contains("hunter2"), out)
        XCTAssertTrue(out.contains("pmtiles://https://REDACTED@"), out)
    }

    /// The plan of `box` at `minZoom...maxZoom` over the gzip-directory archive at `path`, read
    /// from the file here (the directories the daemon should ask for: `leavesRead`), and its header.
    static func localPlan(_ path: String, _ box: GeoBounds, minZoom: Int, maxZoom: Int) throws -> (PMTiles.Header, PMTiles.ArchivePlan) {
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        let h = try PMTiles.readHeader(bytes)
        func directory(_ o: UInt64, _ l: UInt64) throws -> [PMTiles.Entry] {
            try PMTiles.readDirectory(try Zlib.inflate(Array(bytes[Int(o)..<Int(o + l)]), limit: 1 << 26))
        }
        let plan = try PMTiles.plan(header: h, root: try directory(h.rootOffset, h.rootLength),
                                    wanted: PMTiles.tileIDs(rects: PMTiles.cover(box, minZoom: minZoom, maxZoom: maxZoom, header: h), shape: nil)) {
            try directory(h.leafOffset + $0.offset, UInt64($0.length))
        }
        return (h, plan)
    }

    /// Writes the z0-7 archive of `make_pmtiles.py write` (seed 42) at `path` and checks that it
    /// has leaf directories; what the script printed (`tiles`, `entries`, `leaf_directory_length`...).
    static func writeArchiveWithLeaves(_ path: String, file: StaticString = #filePath, line: UInt = #line) throws -> [String: Any] {
        try ExportTools.require([ExportTools.python])
        let made = try makePMTiles(["write", path, "7", "42"], file: file, line: line)
        XCTAssertGreaterThan(made["leaf_directory_length"] as? Int ?? 0, 0, "the archive has leaves", file: file, line: line)
        return made
    }

    /// An archive written by the PyPI `pmtiles` writer, with leaf directories, run-length
    /// entries and gzip tiles: the plan's count and bytes are the reader's, and only the leaf
    /// directories that meet the region are read (counted in nginx's log).
    func testPlanOfAWrittenArchiveWithLeavesReadsOnlyTheLeavesThatMeetTheRegion() throws {
        let mapdata = try MapData.require()
        let dir = try TestScratch.folder("pmtiles-gen")
        let archive = dir.appendingPathComponent("gen.pmtiles").path
        let made = try PMTilesPlanTests.writeArchiveWithLeaves(archive)
        XCTAssertLessThan(made["entries"] as? Int ?? 0, made["tiles"] as? Int ?? 0, "the archive has run lengths")
        let witness = try makePMTiles(["region", archive, "1.3", "2.7", "37.1", "41.9", "0", "7"])

        let nginx = try NginxServer(root: mapdata, extraLocations: "location ^~ /gen/ { alias \(dir.path)/; }")
        defer { nginx.stop() }
        let fx = try SpoolFixture()
        let (prc, pout, doc) = try plan(fx, ["id": "gen", "tiles": ["pmtiles://" + nginx.url("/gen/gen.pmtiles")],
                                             "bounds": [1.3, 2.7, 37.1, 41.9], "minZoom": 0, "maxZoom": 7])
        XCTAssertEqual(prc, 0, pout)
        XCTAssertEqual(doc?["tiles"] as? Int, witness["tiles"] as? Int, pout)
        XCTAssertEqual(doc?["tileBytes"] as? Int, witness["tile_bytes"] as? Int, pout)
        // One request for the header and root, one per leaf that meets the region: fewer than
        // the archive's leaves (4096 entries each).
        let leaves = ((made["entries"] as? Int ?? 0) + 4095) / 4096
        let asked = nginx.accessLog().filter { $0.path == "/gen/gen.pmtiles" }
        XCTAssertTrue(asked.allSatisfy { $0.status == 206 }, "\(asked)")
        XCTAssertGreaterThanOrEqual(asked.count, 2, "\(asked)")
        XCTAssertLessThan(asked.count, 1 + leaves, "\(asked)")
        // Exactly: the first 16 KiB, then each leaf that meets the region and does not lie
        // wholly within them (one that does is cut from those bytes, not asked again).
        let (h, local) = try PMTilesPlanTests.localPlan(archive, GeoBounds(west: 1.3, south: 2.7, east: 37.1, north: 41.9), minZoom: 0, maxZoom: 7)
        let within = local.leavesRead.filter { h.leafOffset + $0.offset + UInt64($0.length) <= UInt64(PMTilesRemote.firstRange) }
        XCTAssertGreaterThan(within.count, 0, "a leaf lies within the first 16 KiB: \(local.leavesRead)")
        XCTAssertEqual(asked.count, 1 + local.leavesRead.count - within.count, "\(asked)")
        print("MEASURED: plan of \(witness["tiles"] ?? 0) tiles over an archive of \(leaves) leaves: \(asked.count) requests, \(asked.reduce(0) { $0 + $1.bytes }) bytes")
    }
}

/// A daemon beside nginx serving mapdata and, under `/gen/` (as fast as it goes), `/slow/`
/// (1 MB/s a connection) and `/slower/` (300 KB/s), the archives a test writes into `generated`:
/// the setting of the PMTiles download and export tests.
class PMTilesServedTestCase: XCTestCase {
    var mapdata: URL!
    var nginx: NginxServer!
    var fx: SpoolFixture!
    var generated: URL!

    override func setUpWithError() throws {
        mapdata = try MapData.require()
        generated = try TestScratch.folder("pmtiles-served")
        nginx = try NginxServer(root: mapdata, extraLocations: """
            location ^~ /gen/ { alias \(generated.path)/; }
            location ^~ /slow/ { alias \(generated.path)/; limit_rate 1m; }
            location ^~ /slower/ { alias \(generated.path)/; limit_rate 300k; }
            """)
        fx = try SpoolFixture()
        try fx.start()
    }

    override func tearDown() {
        fx?.stop()
        nginx?.stop()
    }

    /// The requests nginx logged for `path`.
    func archiveRequests(_ path: String) -> [NginxServer.AccessEntry] { nginx.accessLog().filter { $0.path == path } }
}

/// The daemon downloading PMTiles sources from nginx: tiles cut from coalesced range requests,
/// every stored tile compared with an independent witness (the identical files in mapdata/raster,
/// or the `pmtiles` reader for an archive the test writes), requests counted in nginx's log.
final class PMTilesDownloadTests: PMTilesServedTestCase {

    /// Writes the dense archive (`make_pmtiles.py dense`, z10-15), downloads `box` of it as region
    /// `id` from nginx's location `from` (`/gen/`, or `/slow/` at 1 MB/s a connection), and
    /// checks every tile against the `pmtiles` reader's bytes.
    func downloadDenseBox(_ box: [String], id: String, from location: String) throws {
        try ExportTools.require([ExportTools.python])
        let archive = generated.appendingPathComponent("dense.pmtiles").path
        _ = try makePMTiles(["dense", archive, "13.0", "52.3", "13.8", "52.7", "10", "15", "5"])
        let expected = try XCTUnwrap(try makePMTiles(["region", archive] + box + ["10", "15"])["sha256"] as? [String: String])
        try fx.drop("\(id).json", ["id": id, "tiles": ["pmtiles://" + nginx.url(location + "dense.pmtiles")],
                                    "bounds": box.map { Double($0)! }, "minZoom": 10, "maxZoom": 15])
        try fx.waitForState(id, "completed", timeout: 120)
        XCTAssertEqual(tileObjects(id), expected)
    }

    /// The SHA-256 of each tile `id`'s manifest records, by "z/x/y" (the source left out).
    func tileObjects(_ id: String) -> [String: String] {
        var got: [String: String] = [:]
        for t in fx.manifest(id) where t.kind == "tile" { got[String(t.key.split(separator: "/").dropFirst().joined(separator: "/"))] = t.sha }
        return got
    }

    /// The most `weight` (1: requests; `bytes`: body bytes) of `ranges` under way at one moment
    /// of `from..<until`, from nginx's timing log (ends sort before starts at the same time).
    static func mostAtOnce(_ ranges: [NginxServer.TimedEntry], from: Double = -.infinity, until: Double = .infinity,
                           weight: (NginxServer.TimedEntry) -> Int = { _ in 1 }) -> Int {
        var events: [(time: Double, change: Int)] = []
        for r in ranges where r.end > from && r.start < until {
            events.append((max(r.start, from), weight(r)))
            events.append((min(r.end, until), -weight(r)))
        }
        events.sort { x, y in x.time < y.time || (x.time == y.time && x.change < y.change) }
        var now = 0, most = 0
        for e in events { now += e.change; most = max(most, now) }
        return most
    }

    /// Writes the whole dense archive, drops region `a` over it from nginx's location `slow`
    /// and, once a's first range is cut, region `b` from `/gen/` (no limit), and waits until b
    /// completes. Returns the `pmtiles` reader's tiles of the box and a's tiles completed then.
    func dropSlowThenFast(_ slow: String) throws -> (want: [String: String], aWhenBCompleted: Int) {
        try ExportTools.require([ExportTools.python])
        let dense = generated.appendingPathComponent("dense.pmtiles").path
        let box = ["13.0", "52.3", "13.8", "52.7"]
        _ = try makePMTiles(["dense", dense] + box + ["10", "15", "5"])
        let want = try XCTUnwrap(try makePMTiles(["region", dense] + box + ["10", "15"])["sha256"] as? [String: String])
        try fx.drop("a.json", ["id": "a", "tiles": ["pmtiles://" + nginx.url(slow + "dense.pmtiles")],
                               "bounds": box.map { Double($0)! }, "minZoom": 10, "maxZoom": 15])
        try waitUntil("a's first ranges are cut", timeout: 60) { (self.fx.progress("a")["tilesCompleted"] ?? 0) > 0 }
        try fx.drop("b.json", ["id": "b", "tiles": ["pmtiles://" + nginx.url("/gen/dense.pmtiles")],
                               "bounds": box.map { Double($0)! }, "minZoom": 10, "maxZoom": 15])
        try fx.waitForState("b", "completed", timeout: 120)
        return (want, fx.progress("a")["tilesCompleted"] ?? 0)
    }

    /// A store quota reached while ranges are being cut (each cut in two halves at once,
    /// `RangeCutJob.run`): the region goes `failedStorage`, every tile its manifest records is the
    /// `pmtiles` reader's, the store verifies clean; resumed without the quota, it completes with
    /// every tile the reader's.
    func testAQuotaReachedWhileRangesAreCutFailsStorageAndTheResumeCompletes() throws {
        try ExportTools.require([ExportTools.python])
        let archive = generated.appendingPathComponent("dense.pmtiles").path
        let box = ["13.0", "52.3", "13.8", "52.7"]
        _ = try makePMTiles(["dense", archive] + box + ["10", "15", "5"])
        let want = try XCTUnwrap(try makePMTiles(["region", archive] + box + ["10", "15"])["sha256"] as? [String: String])
        let size = try XCTUnwrap(try FileManager.default.attributesOfItem(atPath: archive)[.size] as? Int)
        fx.stop()
        try fx.start(["--max-store-bytes", String(size / 2)])
        try fx.drop("q.json", ["id": "q", "tiles": ["pmtiles://" + nginx.url("/gen/dense.pmtiles")],
                               "bounds": box.map { Double($0)! }, "minZoom": 10, "maxZoom": 15])
        try fx.waitForState("q", "failedStorage", timeout: 120)
        XCTAssertTrue(fx.errorMessage("q")?.contains("--max-store-bytes \(size / 2)") ?? false, fx.errorMessage("q") ?? "")
        let stored = tileObjects("q")
        XCTAssertGreaterThan(stored.count, 0, "stopped part-way")
        XCTAssertLessThan(stored.count, want.count)
        XCTAssertEqual(stored.filter { want[$0.key] != $0.value }.count, 0, "every tile recorded is the reader's")
        XCTAssertEqual(fx.progress("q")["tilesCompleted"], stored.count)
        fx.stop()
        var (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        try fx.start()
        try fx.control("q", "resume")
        try fx.waitForState("q", "completed", timeout: 120)
        XCTAssertEqual(tileObjects("q"), want)
        fx.stop()
        (rc, out) = try fx.cli(["verify", "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
    }

    /// The daemon holds at most 6 MiB of range bodies at once (`Daemon.maxRangeBytesHeld`: three
    /// 2 MiB ranges asked or being cut), whatever `--max-requests-per-region` allows: served at
    /// 1 MB/s a connection (nginx sends the first second's worth at once, so a range of more than
    /// 1 MB takes a second or more), the ranges of half the dense archive never overlap more than
    /// three at a time in nginx's own timing, and every tile matches the `pmtiles` reader. Before
    /// the budget, as many overlapped as the request limit allowed (eight).
    func testRangeBodiesHeldStayWithinTheDaemonsBudget() throws {
        try downloadDenseBox(["13.0", "52.3", "13.4", "52.7"], id: "slow", from: "/slow/")
        // The header request, then the ranges (this archive has no leaves).
        let ranges = nginx.timingLog().filter { $0.uri == "/slow/dense.pmtiles" }.dropFirst()
        XCTAssertGreaterThanOrEqual(ranges.count, 5)
        XCTAssertTrue(ranges.allSatisfy { $0.bytes <= Int(PMTiles.defaultMaxRange) }, "ranges of 2 MiB at most")
        XCTAssertGreaterThanOrEqual(ranges.filter { $0.end - $0.start >= 0.5 }.count, 4, "ranges over 1 MB take a second or so")
        let most = Self.mostAtOnce(Array(ranges))
        print("MEASURED: \(ranges.count) ranges at 1 MB/s a connection, at most \(most) at once")
        XCTAssertLessThanOrEqual(most, 3)
        XCTAssertGreaterThanOrEqual(most, 2, "more than one range at a time")
    }

    /// Two PMTiles regions share the daemon's range budget in turns (`RangeBudget`): a region
    /// whose one tile is a 5 MB body (a range that fits only when at most 1 MiB is held) gets its
    /// range while a region of the whole dense archive at 1 MB/s a connection still has most of
    /// its ranges to ask, instead of after all of them (before, each freed slot went to the first
    /// region whose range fitted, so the big body waited until the other region had asked its
    /// last range). Both regions' tiles match the `pmtiles` reader.
    func testAnArchiveOfLargeTilesGetsItsTurnBesideOneOfSmallRanges() throws {
        try ExportTools.require([ExportTools.python])
        let dense = generated.appendingPathComponent("dense.pmtiles").path
        let big = generated.appendingPathComponent("big.pmtiles").path
        let box = ["13.0", "52.3", "13.8", "52.7"], spot = ["13.40", "52.50", "13.4001", "52.5001"]
        _ = try makePMTiles(["dense", dense] + box + ["10", "15", "5"])
        _ = try makePMTiles(["dense", big] + spot + ["15", "15", "6", "5000000", "0", "5000000"])
        let wantDense = try XCTUnwrap(try makePMTiles(["region", dense] + box + ["10", "15"])["sha256"] as? [String: String])
        let wantBig = try XCTUnwrap(try makePMTiles(["region", big] + spot + ["15", "15"])["sha256"] as? [String: String])
        XCTAssertEqual(wantBig.count, 1)
        try fx.drop("many.json", ["id": "many", "tiles": ["pmtiles://" + nginx.url("/slow/dense.pmtiles")],
                                  "bounds": box.map { Double($0)! }, "minZoom": 10, "maxZoom": 15])
        try waitUntil("the first range of many is cut", timeout: 60) { (self.fx.progress("many")["tilesCompleted"] ?? 0) > 0 }
        try fx.drop("big.json", ["id": "big", "tiles": ["pmtiles://" + nginx.url("/gen/big.pmtiles")],
                                 "bounds": spot.map { Double($0)! }, "minZoom": 15, "maxZoom": 15])
        try fx.waitForState("big", "completed", timeout: 120)
        try fx.waitForState("many", "completed", timeout: 120)
        for (id, want) in [("many", wantDense), ("big", wantBig)] { XCTAssertEqual(tileObjects(id), want, id) }
        let log = nginx.timingLog()
        let bigRange = try XCTUnwrap(log.filter { $0.uri == "/gen/big.pmtiles" }.max { $0.bytes < $1.bytes })
        XCTAssertGreaterThanOrEqual(bigRange.bytes, 5_000_000)
        let denseRanges = log.filter { $0.uri == "/slow/dense.pmtiles" }.dropFirst()
        let after = denseRanges.filter { $0.start > bigRange.start }.count
        print("MEASURED: \(denseRanges.count) ranges of the dense archive, \(after) asked after the 5 MB range")
        XCTAssertGreaterThanOrEqual(denseRanges.count, 10)
        // Measured: 4-7 of 13 with turns (3 of 18 with ranges sized to the rate); 0 without
        // (the 5 MB range fitted only once the other region had no range left to ask).
        XCTAssertGreaterThanOrEqual(after, 1, "the large range waited until the other region's ranges were all asked")
    }

    /// A PMTiles region from a server sending 1 MB/s a connection beside one from a fast
    /// server: the fast one completes while the slow one is still downloading, and the slow one
    /// holds at most its share (3 MiB, half the budget) and one range more meanwhile (attack
    /// round 26 saw a region at 200 KB/s hold all three ranges for 7 s while another made no
    /// progress). When this test was written, before ranges were sized to the server's rate,
    /// it failed without the share (the fast region waited until the slow one had every tile);
    /// with rate-sized ranges the turns alone keep the fast one going here, and the share rule
    /// is covered by `ImportAndLimitTests.testRangeBudgetIsTakenInTurns`. Every tile of both
    /// matches the `pmtiles` reader.
    func testASlowRegionDoesNotHoldUpAFastOne() throws {
        let (want, aWhenBCompleted) = try dropSlowThenFast("/slow/")
        try fx.waitForState("a", "completed", timeout: 120)
        for id in ["a", "b"] { XCTAssertEqual(tileObjects(id), want, id) }
        let log = nginx.timingLog()
        let a = log.filter { $0.uri == "/slow/dense.pmtiles" }.dropFirst(), b = log.filter { $0.uri == "/gen/dense.pmtiles" }.dropFirst()
        // While b asks for ranges: from its first range to its last.
        let from = try XCTUnwrap(b.map(\.start).min()), until = try XCTUnwrap(b.map(\.end).max())
        let most = Self.mostAtOnce(Array(a), from: from, until: until, weight: \.bytes)
        print("MEASURED: b's \(b.count) ranges in \(String(format: "%.2f", until - from)) s beside a at 1 MB/s, a holding at most \(most) bytes of ranges; a had \(aWhenBCompleted) of \(want.count) tiles when b completed")
        XCTAssertLessThanOrEqual(most, 5 << 20, "a, slow, holds at most its share (3 MiB) and one range more")
        XCTAssertLessThan(aWhenBCompleted, want.count, "b, fast, did not wait for a to finish")
    }

    /// Ranges are sized to the rate a region's server gives (`PMTiles.rangeTarget`: two seconds'
    /// worth, 1 MiB before any answer): from a server sending 300 KB/s a connection, no range of
    /// the dense archive is over 1 MiB (2 MiB before), so the budget it holds frees every few
    /// seconds, and a region from a fast server dropped meanwhile completes, every tile right,
    /// while the slow one is still downloading (attack round 27: one waited 17 s behind three
    /// 2 MiB ranges at 100 KB/s).
    func testRangesAreSizedToTheServersRate() throws {
        let (want, _) = try dropSlowThenFast("/slower/")
        XCTAssertEqual(fx.state("a"), "downloading", "a, slow, is still downloading")
        XCTAssertEqual(tileObjects("b"), want)
        try waitUntil("a has asked a range sized to its rate", timeout: 60) {
            self.nginx.timingLog().filter { $0.uri == "/slower/dense.pmtiles" }.count >= 6
        }
        try fx.control("a", "cancel")
        try fx.waitForState("a", "cancelled")
        let asked = nginx.timingLog().filter { $0.uri == "/slower/dense.pmtiles" }.dropFirst()
        let sizes = asked.map(\.bytes)
        print("MEASURED: ranges from a server at 300 KB/s a connection: \(sizes) bytes")
        XCTAssertLessThanOrEqual(sizes.max() ?? .max, 1 << 20, "no range over 1 MiB")
        XCTAssertTrue(sizes.contains { $0 < 800_000 && $0 >= 65_536 }, "ranges sized down to a few seconds' worth")
    }

    /// Metadata the header places past the archive's end (far past, or running past it) is
    /// passed over: the region is planned and completes with every tile (attack round 27: the
    /// plan failed with the 416 or the short answer, called a directory).
    func testMetadataPastTheArchivesEndIsPassedOver() throws {
        var bytes = try Data(contentsOf: mapdata.appendingPathComponent("pmtiles/stamen_toner(raster)CC-BY+ODbL_z3.pmtiles"))
        func put(_ value: UInt64, at offset: Int) { withUnsafeBytes(of: value.littleEndian) { bytes.replaceSubrange(offset..<(offset + 8), with: $0) } }
        for (name, offset, length) in [("far", UInt64(1_000_000_000), UInt64(35)), ("over", UInt64(bytes.count - 10), UInt64(100_000))] {
            put(offset, at: 24)
            put(length, at: 32)
            try bytes.write(to: generated.appendingPathComponent("\(name).pmtiles"))
            try fx.drop("\(name).json", ["id": name, "tiles": ["pmtiles://" + nginx.url("/gen/\(name).pmtiles")],
                                         "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
            try fx.waitForState(name, "completed")
            XCTAssertEqual(fx.manifest(name).filter { $0.kind == "tile" }.count, 85, name)
        }
    }

    /// The stamen archive over the world z0-3 as a `tiles` entry: 85 tiles, each stored object
    /// byte-identical to mapdata/raster/stamen_toner/z/x/y.png; the plan's exact bytes in the
    /// status before and after; one request for the directories and one range for the tiles.
    func testTilesEntryDownloadsEveryTileByteForByteInTwoRequests() throws {
        try fx.drop("toner.json", ["id": "toner", "tiles": ["pmtiles://" + nginx.url(PMTilesPlanTests.stamen)],
                                   "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
        try fx.waitForState("toner", "completed")
        fx.assertStoreMatchesManifest("toner")
        let tiles = fx.manifest("toner").filter { $0.kind == "tile" }
        XCTAssertEqual(tiles.count, 85)
        let held = fx.objectsData(tiles.map(\.sha))
        for t in tiles {
            let zxy = t.key.split(separator: "/").dropFirst().joined(separator: "/")
            let file = mapdata.appendingPathComponent("raster/stamen_toner/\(zxy).png")
            XCTAssertEqual(held[t.sha], try Data(contentsOf: file), t.key)
        }
        let p = fx.progress("toner")
        XCTAssertEqual(p["tilesExpected"], 85)
        XCTAssertEqual(p["tileBytesExpected"], 720_035)
        XCTAssertEqual(p["tileBytesCompleted"], 720_035)
        let asked = archiveRequests("/pmtiles/stamen_toner%28raster%29CC-BY%2BODbL_z3.pmtiles")
        XCTAssertEqual(asked.map(\.status), [206, 206])
        let wire = asked.reduce(0) { $0 + $1.bytes }
        print("MEASURED: stamen z0-3: 85 tiles, 720035 tile bytes, \(asked.count) requests, \(wire) bytes over the wire")
    }

    /// A corridor over an archive (issue 31's gap): the stamen archive and the same tiles as XYZ
    /// files (mapdata/raster/stamen_toner) as two `tiles` entries of one corridor request. The
    /// archive's tiles are exactly the template's (the corridor cover, checked against brute force
    /// in `CorridorTests`), byte for byte, fetched in range requests; the plan's exact bytes known.
    func testACorridorOverAnArchiveTakesTheTilesOfTheSameCorridorOverTemplates() throws {
        let line: [String: Any] = ["type": "LineString", "coordinates": [[-10.0, 40.0], [30.0, 55.0], [100.0, 20.0]]]
        try fx.drop("route.json", ["id": "route", "tiles": ["pmtiles://" + nginx.url(PMTilesPlanTests.stamen),
                                                            nginx.url("/raster/stamen_toner/{z}/{x}/{y}.png")],
                                   "corridor": ["line": line, "bufferMeters": 100_000], "minZoom": 0, "maxZoom": 3])
        try fx.waitForState("route", "completed")
        fx.assertStoreMatchesManifest("route")
        let tiles = fx.manifest("route").filter { $0.kind == "tile" }
        func keys(_ source: String) -> [String: String] {
            Dictionary(uniqueKeysWithValues: tiles.filter { $0.key.hasPrefix(source + "/") }.map { (String($0.key.dropFirst(source.count + 1)), $0.sha) })
        }
        let archive = keys("tiles0"), template = keys("tiles1")
        XCTAssertGreaterThan(template.count, 10)
        XCTAssertLessThan(template.count, 85, "a corridor, not the world")
        XCTAssertEqual(archive, template, "the same tiles with the same bytes")
        let asked = archiveRequests("/pmtiles/stamen_toner%28raster%29CC-BY%2BODbL_z3.pmtiles")
        // Neighbours in the archive share a range (the header and root, then the ranges).
        XCTAssertLessThan(asked.count, 1 + archive.count, "range requests, not one per tile")
        XCTAssertEqual(asked.filter { $0.status != 206 }.count, 0)
        print("MEASURED: corridor over stamen z0-3: \(archive.count) tiles in \(asked.count) requests")
        XCTAssertNotNil(fx.progress("route")["tileBytesCompleted"])
    }

    /// Parts over an archive: two boxes at their own zooms take exactly the tiles the `pmtiles`
    /// reader finds in each box at its zooms (the union, each once), byte for byte.
    func testPartsOverAnArchiveTakeWhatTheReaderFindsInEachPart() throws {
        let archivePath = mapdata.appendingPathComponent("pmtiles/stamen_toner(raster)CC-BY+ODbL_z3.pmtiles").path
        let parts: [(box: [Double], minZoom: Int, maxZoom: Int)] = [([-10, 35, 30, 60], 0, 3), ([100, -40, 155, -10], 2, 3)]
        var expected: [String: String] = [:]
        for part in parts {
            let doc = try makePMTiles(["region", archivePath] + part.box.map { String($0) } + [String(part.minZoom), String(part.maxZoom)])
            for (k, v) in try XCTUnwrap(doc["sha256"] as? [String: String]) { expected[k] = v }
        }
        try fx.drop("two.json", ["id": "two", "tiles": ["pmtiles://" + nginx.url(PMTilesPlanTests.stamen)],
                                 "parts": parts.map { ["bounds": $0.box, "minZoom": $0.minZoom, "maxZoom": $0.maxZoom] as [String: Any] }])
        try fx.waitForState("two", "completed")
        fx.assertStoreMatchesManifest("two")
        let got = Dictionary(uniqueKeysWithValues: fx.manifest("two").filter { $0.kind == "tile" }.map { (String($0.key.dropFirst("tiles0/".count)), $0.sha) })
        XCTAssertEqual(got, expected)
        XCTAssertEqual(fx.progress("two")["tilesExpected"], expected.count)
    }

    /// The directory request counts for the rate limits as a range request does: with the
    /// request's `maxRequestsPerSecond: 4`, nginx sees the header-and-root request and the tiles'
    /// range request start at least 1/4 s apart (before, the directories were read unpaced and
    /// the first range followed at once).
    func testDirectoryRequestsAreHeldByTheRateLimit() throws {
        try fx.drop("toner.json", ["id": "toner", "tiles": ["pmtiles://" + nginx.url(PMTilesPlanTests.stamen)], "maxRequestsPerSecond": 4,
                                   "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
        try fx.waitForState("toner", "completed")
        XCTAssertEqual(fx.manifest("toner").filter { $0.kind == "tile" }.count, 85)
        let uri = "/pmtiles/stamen_toner%28raster%29CC-BY%2BODbL_z3.pmtiles"
        try waitUntil("nginx logged both requests", timeout: 20) { nginx.timingLog().filter { $0.uri == uri }.count >= 2 }
        let starts = nginx.timingLog().filter { $0.uri == uri }.map(\.start).sorted()
        XCTAssertEqual(starts.count, 2, "the directories and one range")
        XCTAssertGreaterThanOrEqual(starts[1] - starts[0], 0.24, "the range followed the directory request within \(starts[1] - starts[0]) s")
    }

    /// Attack round 8: `--max-bytes-per-second` did not hold for range requests (every range of a
    /// region started at once: 35 times the limit). A range is now at most one second's worth of
    /// bytes and counted when it is issued: the 720,035 tile bytes of stamen z0-3 at 200,000
    /// bytes a second come in ranges of at most 200,000 bytes, and the last starts no sooner than
    /// (bytes - 2 s worth) / rate after the first (one second's allowance, one range in debt).
    func testByteLimitHoldsForRangeRequests() throws {
        fx.stop()
        try fx.start(["--max-bytes-per-second", "200000"])
        try fx.drop("bytes.json", ["id": "bytes", "tiles": ["pmtiles://" + nginx.url(PMTilesPlanTests.stamen)],
                                   "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
        try fx.waitForState("bytes", "completed", timeout: 60)
        XCTAssertEqual(fx.manifest("bytes").filter { $0.kind == "tile" }.count, 85)
        let uri = "/pmtiles/stamen_toner%28raster%29CC-BY%2BODbL_z3.pmtiles"
        let asked = archiveRequests(uri)
        let ranges = Array(asked.dropFirst())
        XCTAssertGreaterThanOrEqual(ranges.count, 4, "720,035 bytes in ranges of at most 200,000")
        XCTAssertTrue(ranges.allSatisfy { $0.bytes <= 200_000 }, "\(ranges.map(\.bytes))")
        try waitUntil("nginx timed every request", timeout: 20) { nginx.timingLog().filter { $0.uri == uri }.count >= asked.count }
        let starts = nginx.timingLog().filter { $0.uri == uri }.map(\.start).sorted().dropFirst()
        let bytes = Double(ranges.reduce(0) { $0 + $1.bytes })
        XCTAssertGreaterThanOrEqual(starts.last! - starts.first!, (bytes - 400_000) / 200_000 - 0.05, "\(ranges.count) ranges of \(Int(bytes)) bytes")
    }

    /// The directory requests are read off the daemon's loop and keep the request limits by
    /// themselves, and the range requests wait their turn from the last of them: an archive with
    /// two leaves at 1.5 requests a second, every request of the region (header, leaves, ranges)
    /// starts at least 1 / 1.5 s after the one before it.
    func testDirectoryAndRangeRequestsKeepTheRegionsRate() throws {
        try ExportTools.require([ExportTools.python])
        let archive = generated.appendingPathComponent("paced.pmtiles").path
        _ = try makePMTiles(["write", archive, "7", "7"])
        try fx.drop("paced.json", ["id": "paced", "tiles": [nginx.url("/gen/paced.pmtiles")], "maxRequestsPerSecond": 1.5,
                                   "bounds": [1.3, 2.7, 37.1, 41.9], "minZoom": 0, "maxZoom": 7])
        try fx.waitForState("paced", "completed", timeout: 60)
        let n = archiveRequests("/gen/paced.pmtiles").count
        try waitUntil("nginx timed every request", timeout: 20) { nginx.timingLog().filter { $0.uri == "/gen/paced.pmtiles" }.count >= n }
        let starts = nginx.timingLog().filter { $0.uri == "/gen/paced.pmtiles" }.map(\.start).sorted()
        XCTAssertGreaterThan(starts.count, 4, "the header, two leaves and the ranges")
        // nginx stamps a request once it has read it: the first on a new connection (the header's;
        // the first range's, on the loop's own client) can be stamped late on a loaded machine (15
        // ms seen with 4 test processes beside), which shortens the next gap as nginx sees it.
        // Unpaced, the requests would come within milliseconds of each other.
        for k in 1..<starts.count {
            XCTAssertGreaterThanOrEqual(starts[k] - starts[k - 1], 1 / 1.5 - 0.05, "request \(k) of \(starts.count) came before its turn")
        }
        print("MEASURED: paced archive: \(starts.count) requests over \(String(format: "%.2f", starts.last! - starts[0])) s")
    }

    /// An archive written by the `pmtiles` writer (leaf directories, run-length entries, gzip
    /// tiles): every tile the reader finds in the region is stored once decoded, with the reader's
    /// SHA-256; a few range requests for hundreds of tiles.
    func testWrittenArchiveWithLeavesRunsAndGzipMatchesTheReader() throws {
        try ExportTools.require([ExportTools.python])
        let archive = generated.appendingPathComponent("gen.pmtiles").path
        _ = try makePMTiles(["write", archive, "7", "7"])
        let witness = try makePMTiles(["region", archive, "1.3", "2.7", "37.1", "41.9", "0", "7"])
        let expected = try XCTUnwrap(witness["sha256"] as? [String: String])
        try fx.drop("gen.json", ["id": "gen", "tiles": [nginx.url("/gen/gen.pmtiles")],
                                 "bounds": [1.3, 2.7, 37.1, 41.9], "minZoom": 0, "maxZoom": 7])
        try fx.waitForState("gen", "completed")
        fx.assertStoreMatchesManifest("gen")
        let tiles = fx.manifest("gen").filter { $0.kind == "tile" }
        XCTAssertEqual(tiles.count, expected.count)
        var got: [String: String] = [:]
        for t in tiles { got[String(t.key.split(separator: "/").dropFirst().joined(separator: "/"))] = t.sha }
        XCTAssertEqual(got, expected)
        XCTAssertEqual(fx.progress("gen")["tileBytesExpected"], witness["tile_bytes"] as? Int)
        let asked = archiveRequests("/gen/gen.pmtiles")
        XCTAssertTrue(asked.allSatisfy { $0.status == 206 }, "\(asked)")
        let wire = asked.reduce(0) { $0 + $1.bytes }
        print("MEASURED: written archive: \(tiles.count) tiles, \(witness["tile_bytes"] ?? 0) tile bytes, \(asked.count) requests (directories included), \(wire) bytes over the wire")
        // The first three requests read the header and root and the two leaves that meet the
        // region (PMTilesPlanTests); the rest are the tiles' ranges, whose bytes are within the
        // coalescer's bound: at most 1.1 times the tile bytes.
        XCTAssertEqual(asked.prefix(3).map(\.bytes).first, PMTilesRemote.firstRange)
        let rangeBytes = asked.dropFirst(3).reduce(0) { $0 + $1.bytes }
        XCTAssertLessThanOrEqual(Double(rangeBytes), 1.1 * Double(witness["tile_bytes"] as? Int ?? 0))
        XCTAssertLessThan(asked.count - 3, tiles.count / 10, "fewer than one range per 10 tiles, in a sparse region over 8 zooms")
    }

    /// Gzip tiles that do not inflate, in an archive the `pmtiles` writer wrote (64 bytes zeroed
    /// in the middle of its tile data): with the default `maxFailedTiles` of 0 the region fails
    /// naming one (`badResponse`); with a budget, exactly the tiles the reader cannot decompress
    /// fail, each under its own name in `failed.tsv`, and every other tile of their ranges is
    /// stored as the reader has it (attack round 22: the first bad body failed the rest of its
    /// range, 285 good tiles of 311, all under its message). A region over the undamaged archive,
    /// downloading beside them, completes. The tiles are cut off the event loop (`RangeCutJob`).
    func testTilesThatDoNotInflateFailAloneAndNotTheirNeighbours() throws {
        try ExportTools.require([ExportTools.python])
        let good = generated.appendingPathComponent("good.pmtiles").path
        let bad = generated.appendingPathComponent("bad.pmtiles").path
        _ = try makePMTiles(["write", good, "6", "11"])
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: good)))
        let header = try PMTiles.readHeader(Array(bytes[0..<PMTiles.headerSize]))
        let middle = Int(header.dataOffset + header.dataLength / 2)
        for k in middle..<(middle + 64) { bytes[k] = 0 }
        try Data(bytes).write(to: URL(fileURLWithPath: bad))
        func witness(_ path: String) throws -> (sha256: [String: String], undecodable: Set<String>) {
            let doc = try makePMTiles(["region", path, "-180", "-85", "180", "85", "0", "6"])
            return (try XCTUnwrap(doc["sha256"] as? [String: String]), Set(doc["undecodable"] as? [String] ?? []))
        }
        let expected = try witness(good).sha256
        let damaged = try witness(bad)
        XCTAssertFalse(damaged.undecodable.isEmpty, "the zeroes hit a gzip body")
        XCTAssertLessThan(damaged.undecodable.count, 40, "64 bytes spoil one body or two (and the tiles of their runs)")
        func request(_ id: String, _ file: String, budget: Int) -> [String: Any] {
            ["id": id, "tiles": ["pmtiles://" + nginx.url("/gen/\(file).pmtiles")], "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 6,
             "maxFailedTiles": budget]
        }
        try fx.drop("good.json", request("good", "good", budget: 0))
        try fx.drop("bad.json", request("bad", "bad", budget: 0))
        try fx.drop("budget.json", request("budget", "bad", budget: 1000))
        try fx.waitForState("bad", "failed")
        XCTAssertEqual(fx.errorCode("bad"), "badResponse")
        XCTAssertTrue(fx.errorMessage("bad")?.contains("does not inflate") == true, fx.errorMessage("bad") ?? "")
        for id in ["good", "budget"] {
            try fx.waitForState(id, "completed")
            fx.assertStoreMatchesManifest(id)
        }
        func stored(_ id: String) -> [String: String] {
            var got: [String: String] = [:]
            for t in fx.manifest(id) where t.kind == "tile" && t.sha.count == 64 { got[String(t.key.split(separator: "/").dropFirst().joined(separator: "/"))] = t.sha }
            return got
        }
        XCTAssertEqual(stored("good"), expected)
        let got = stored("budget")
        let differing = Set(got.keys).union(damaged.sha256.keys).filter { got[$0] != damaged.sha256[$0] }
        XCTAssertEqual(got.count, damaged.sha256.count)
        XCTAssertEqual(differing.sorted(), [], "every tile the reader decompresses, as it has it (these differ: stored \(differing.prefix(5).map { "\($0)=\(got[$0] ?? "none")" }), reader \(differing.prefix(5).map { "\($0)=\(damaged.sha256[$0] ?? "none")" }))")
        let failed = try String(contentsOfFile: "\(fx.store)/regions/budget/failed.tsv", encoding: .utf8).split(separator: "\n")
            .filter { !$0.hasPrefix("#") }.map { $0.split(separator: "\t").map(String.init) }
        XCTAssertEqual(Set(failed.map { String($0[0].split(separator: "/").dropFirst().joined(separator: "/")) }), damaged.undecodable)
        for f in failed {
            let zxy = f[0].split(separator: "/").dropFirst().joined(separator: "/")
            XCTAssertTrue(f.last!.contains("tile \(zxy) of ") && f.last!.contains("does not inflate"), "each under its own name: \(f)")
        }
        XCTAssertEqual(fx.progress("budget")["tilesFailed"], damaged.undecodable.count)
    }

    /// An archive whose header says PNG holds tiles that are not PNG (every 7th starts with a GIF
    /// signature): those fail alone, each under its own name in `failed.tsv`, as an HTTP tile of
    /// a `.png` template does; every other tile is stored as the `pmtiles` reader reads it.
    func testArchiveTilesNotOfTheHeadersFormatFailAlone() throws {
        try ExportTools.require([ExportTools.python])
        let archive = generated.appendingPathComponent("mixed.pmtiles").path
        _ = try makePMTiles(["dense", archive, "13.0", "52.3", "13.8", "52.7", "10", "13", "5", "8000", "7"])
        let box = ["13.0", "52.3", "13.8", "52.7"]
        let witness = try makePMTiles(["region", archive] + box + ["10", "13"])
        let expected = try XCTUnwrap(witness["sha256"] as? [String: String])
        let notPNG = Set(try XCTUnwrap(witness["notpng"] as? [String]))
        XCTAssertGreaterThan(notPNG.count, 10)
        try fx.drop("mixed.json", ["id": "mixed", "tiles": ["pmtiles://" + nginx.url("/gen/mixed.pmtiles")],
                                   "bounds": box.map { Double($0)! }, "minZoom": 10, "maxZoom": 13, "maxFailedTiles": 10_000])
        try fx.waitForState("mixed", "completed")
        var got: [String: String] = [:]
        for t in fx.manifest("mixed") where t.kind == "tile" && t.sha.count == 64 { got[String(t.key.split(separator: "/").dropFirst().joined(separator: "/"))] = t.sha }
        XCTAssertEqual(got, expected.filter { !notPNG.contains($0.key) })
        let failed = try String(contentsOfFile: "\(fx.store)/regions/mixed/failed.tsv", encoding: .utf8).split(separator: "\n")
            .filter { !$0.hasPrefix("#") }.map { $0.split(separator: "\t").map(String.init) }
        XCTAssertEqual(Set(failed.map { String($0[0].split(separator: "/").dropFirst().joined(separator: "/")) }), notPNG)
        XCTAssertTrue(failed.allSatisfy { $0.last!.contains("is not a PNG image as the archive's header says") }, "\(failed.first ?? [])")
        XCTAssertEqual(fx.progress("mixed")["tilesFailed"], notPNG.count)
    }

    /// A dense raster area (an archive written by the `pmtiles` writer over a box around Berlin,
    /// z10-15; the region is 56% of its area, so tiles outside it interleave along the Hilbert
    /// curve): every tile matches the reader; at most 1.1 times the tile bytes over the wire, and
    /// at most one range request per 100 tiles (go-pmtiles' published Berlin figure is one per 62;
    /// measured here: one per 157, the issue's target of one per 200 is not met on this layout).
    func testDenseRegionNeedsFewRequestsAndLittleExtraBytes() throws {
        try ExportTools.require([ExportTools.python])
        let archive = generated.appendingPathComponent("dense.pmtiles").path
        _ = try makePMTiles(["dense", archive, "13.0", "52.3", "13.8", "52.7", "10", "15", "5"])
        let box = ["13.1", "52.35", "13.7", "52.65"]
        let witness = try makePMTiles(["region", archive] + box + ["10", "15"])
        let expected = try XCTUnwrap(witness["sha256"] as? [String: String])
        let tileBytes = try XCTUnwrap(witness["tile_bytes"] as? Int)
        // The directory requests the plan makes: the first 16 KiB, then each leaf that meets the region.
        let (_, local) = try PMTilesPlanTests.localPlan(archive, GeoBounds(west: 13.1, south: 52.35, east: 13.7, north: 52.65), minZoom: 10, maxZoom: 15)
        let directoryRequests = 1 + local.leavesRead.count

        let started = Date()
        try fx.drop("dense.json", ["id": "dense", "tiles": ["pmtiles://" + nginx.url("/gen/dense.pmtiles")],
                                   "bounds": box.map { Double($0)! }, "minZoom": 10, "maxZoom": 15])
        try fx.waitForState("dense", "completed", timeout: 120)
        let seconds = Date().timeIntervalSince(started)
        var got: [String: String] = [:]
        for t in fx.manifest("dense") where t.kind == "tile" { got[String(t.key.split(separator: "/").dropFirst().joined(separator: "/"))] = t.sha }
        XCTAssertEqual(got.count, expected.count)
        XCTAssertEqual(got, expected)
        XCTAssertEqual(fx.progress("dense")["tileBytesExpected"], tileBytes)
        let asked = archiveRequests("/gen/dense.pmtiles")
        let ranges = asked.dropFirst(directoryRequests)
        let rangeBytes = ranges.reduce(0) { $0 + $1.bytes }
        print("MEASURED: dense region: \(expected.count) tiles, \(tileBytes) tile bytes; \(directoryRequests) directory requests (\(asked.prefix(directoryRequests).reduce(0) { $0 + $1.bytes }) bytes), \(ranges.count) range requests (\(rangeBytes) bytes, \(String(format: "%.4f", Double(rangeBytes) / Double(tileBytes)))x the tile bytes); drop to completed \(String(format: "%.2f", seconds)) s")
        XCTAssertLessThanOrEqual(ranges.count * 100, max(expected.count, 100), "at most one range per 100 tiles")
        // Measured, not asserted (a shared machine): the ranges' span in nginx's timing log, and
        // curl fetching as many bytes as one file from the same nginx.
        let timed = nginx.timingLog().filter { $0.uri == "/gen/dense.pmtiles" }.dropFirst(directoryRequests)
        if let first = timed.map(\.start).min(), let last = timed.map(\.end).max(), FileManager.default.isExecutableFile(atPath: "/usr/bin/curl") {
            let t0 = Date()
            let (crc, _) = try runTool("/usr/bin/curl", ["-s", "-o", "/dev/null", "-r", "0-\(rangeBytes - 1)", nginx.url("/gen/dense.pmtiles")])
            let curl = Date().timeIntervalSince(t0)
            XCTAssertEqual(crc, 0)
            let plan = (try? FileManager.default.attributesOfItem(atPath: fx.store + "/regions/dense/plan.json")[.size] as? Int) ?? -1
            print("MEASURED: dense region: range requests span \(String(format: "%.3f", last - first)) s in nginx's log; curl of \(rangeBytes) bytes (process start included) \(String(format: "%.3f", curl)) s; plan.json \(plan) bytes")
        }
        XCTAssertLessThanOrEqual(Double(rangeBytes), 1.1 * Double(tileBytes))

        // The whole archive's box (a dense region: no tile between two wanted ones is
        // unwanted): the issue's target of at most one range request per 200 tiles holds, and the
        // bytes stay within 1.1 times the tiles'.
        let full = ["13.0", "52.3", "13.8", "52.7"]
        let all = try makePMTiles(["region", archive] + full + ["10", "15"])
        let allExpected = try XCTUnwrap(all["sha256"] as? [String: String]), allBytes = try XCTUnwrap(all["tile_bytes"] as? Int)
        let before = archiveRequests("/gen/dense.pmtiles").count
        try fx.drop("full.json", ["id": "full", "tiles": ["pmtiles://" + nginx.url("/gen/dense.pmtiles")],
                                  "bounds": full.map { Double($0)! }, "minZoom": 10, "maxZoom": 15])
        try fx.waitForState("full", "completed", timeout: 120)
        var gotAll: [String: String] = [:]
        for t in fx.manifest("full") where t.kind == "tile" { gotAll[String(t.key.split(separator: "/").dropFirst().joined(separator: "/"))] = t.sha }
        XCTAssertEqual(gotAll, allExpected)
        // Its own header request, then its ranges (leaves: none in this archive beyond the root).
        let fullRanges = archiveRequests("/gen/dense.pmtiles").dropFirst(before + 1)
        let fullBytes = fullRanges.reduce(0) { $0 + $1.bytes }
        print("MEASURED: whole archive: \(allExpected.count) tiles, \(allBytes) tile bytes; \(fullRanges.count) range requests (\(fullBytes) bytes, \(String(format: "%.4f", Double(fullBytes) / Double(allBytes)))x)")
        XCTAssertLessThanOrEqual(fullRanges.count * 200, max(allExpected.count, 200), "at most one range per 200 tiles in a dense region")
        XCTAssertLessThanOrEqual(Double(fullBytes), 1.1 * Double(allBytes))
    }

    /// Ranges are cut to `--max-object-size` (the client's limit on any body): with a limit of
    /// 300,000 bytes, below the 2 MiB a range may otherwise take, every tile of the dense archive
    /// is stored as the `pmtiles` reader reads it and no range asked is longer than the limit.
    /// Before, each range over the limit was cut off by the client and its tiles failed.
    func testRangesStayWithinMaxObjectSize() throws {
        fx.stop()
        try fx.start(["--max-object-size", "300000"])
        try downloadDenseBox(["13.0", "52.3", "13.4", "52.5"], id: "capped", from: "/gen/")
        let ranges = archiveRequests("/gen/dense.pmtiles").dropFirst()
        XCTAssertGreaterThan(ranges.count, 5)
        XCTAssertEqual(ranges.map(\.status).filter { $0 != 206 }, [])
        XCTAssertLessThanOrEqual(ranges.map(\.bytes).max() ?? 0, 300_000)
        XCTAssertGreaterThan(ranges.map(\.bytes).max() ?? 0, 200_000, "ranges still join many tiles")
    }

    /// A stored plan resumed by a daemon started with a lower `--max-object-size` than one of its
    /// missing tiles: the region fails as at plan (`badResponse`, the tile and the limit named),
    /// and no range is asked by the new daemon. Before, the range holding that tile was cut off by
    /// the client and the region failed with a transfer error.
    func testAResumedPlanWithATileOverALowerMaxObjectSizeFailsAsAtPlan() throws {
        try ExportTools.require([ExportTools.python])
        let archive = generated.appendingPathComponent("big.pmtiles").path
        _ = try makePMTiles(["dense", archive, "13.0", "52.3", "13.8", "52.7", "10", "14", "5", "40000"])
        // About 50 MB served at 1 MB/s a connection: still downloading when the daemon stops.
        try fx.drop("big.json", ["id": "big", "tiles": ["pmtiles://" + nginx.url("/slow/big.pmtiles")],
                                 "bounds": [13.0, 52.3, 13.8, 52.7], "minZoom": 10, "maxZoom": 14])
        try waitUntil("a first tile of big stored", timeout: 60) { self.fx.manifest("big").contains { $0.kind == "tile" } }
        fx.stop()
        let stored = fx.manifest("big").filter { $0.kind == "tile" }.count
        XCTAssertEqual(fx.state("big"), "queued", "a download stopped by the daemon's stop is queued again")
        let before = archiveRequests("/slow/big.pmtiles").count
        try fx.start(["--max-object-size", "20000"])
        try fx.waitForState("big", "failed")
        let error = try XCTUnwrap(fx.status("big")?["error"] as? [String: Any])
        XCTAssertEqual(error["code"] as? String, "badResponse")
        let message = error["message"] as? String ?? ""
        XCTAssertTrue(message.contains("more than --max-object-size (20000 bytes)"), message)
        XCTAssertEqual(archiveRequests("/slow/big.pmtiles").count, before, "no range asked by the new daemon")
        XCTAssertEqual(fx.manifest("big").filter { $0.kind == "tile" }.count, stored, "what was stored stays")
    }

    /// A tile longer than `--max-object-size` (the client would cut it off and retry until the
    /// region failed mid-download) is refused at plan: the region fails with `badResponse`
    /// naming the tile and the limit, before any range request; `tilespool plan` says the same.
    func testATileOverMaxObjectSizeIsRefusedAtPlan() throws {
        fx.stop()
        // The first request asks 16 KiB (header and root): the limit stays above it.
        try fx.start(["--max-object-size", "20000"])
        let archive = generated.appendingPathComponent("big.pmtiles").path
        _ = try makePMTiles(["dense", archive, "13.0", "52.3", "13.8", "52.7", "10", "11", "5", "40000"])
        try fx.drop("big.json", ["id": "big", "tiles": ["pmtiles://" + nginx.url("/gen/big.pmtiles")],
                                 "bounds": [13.0, 52.3, 13.8, 52.7], "minZoom": 10, "maxZoom": 11])
        try fx.waitForState("big", "failed")
        let error = try XCTUnwrap(fx.status("big")?["error"] as? [String: Any])
        XCTAssertEqual(error["code"] as? String, "badResponse")
        let message = error["message"] as? String ?? ""
        XCTAssertTrue(message.contains("more than --max-object-size (20000 bytes)"), message)
        XCTAssertEqual(archiveRequests("/gen/big.pmtiles").count, 1, "the header and root only: no range asked")
        XCTAssertEqual(fx.manifest("big").filter { $0.kind == "tile" }.count, 0)
    }

    /// An archive whose header says the world at zooms 0 to 20, asked for the world: the region
    /// spans 1.46 trillion tiles, which were listed (8 bytes each) before the directories were
    /// read, and the daemon died allocating 8.8 GB. Now the region fails with `tileLimitExceeded`
    /// naming the source and the limit, after one request, and the daemon goes on with the next.
    func testAWorldArchiveOverTheTileLimitFailsTheRegionNotTheDaemon() throws {
        let small = generated.appendingPathComponent("small.pmtiles").path
        _ = try makePMTiles(["write", small, "2", "7"])
        // The same archive with a header that claims zooms up to 20 over the whole world (the
        // header's max zoom is byte 101, its bounds bytes 102-117: PMTiles v3 spec, section 3).
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: small)))
        bytes[101] = 20
        for (i, v) in [Int32(-1_800_000_000), -850_000_000, 1_800_000_000, 850_000_000].enumerated() {
            withUnsafeBytes(of: v.littleEndian) { for (j, b) in $0.enumerated() { bytes[102 + 4 * i + j] = b } }
        }
        try Data(bytes).write(to: generated.appendingPathComponent("world.pmtiles"))
        try fx.drop("world.json", ["id": "world", "tiles": ["pmtiles://" + nginx.url("/gen/world.pmtiles")],
                                   "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 20])
        try fx.waitForState("world", "failed")
        XCTAssertEqual(fx.errorCode("world"), "tileLimitExceeded")
        let message = fx.errorMessage("world") ?? ""
        XCTAssertTrue(message.contains("source 'tiles0'") && message.contains("more than the daemon's --max-tiles (1000000)"), message)
        XCTAssertEqual(archiveRequests("/gen/world.pmtiles").count, 1, "the header and root only")
        // The daemon is still there: the next region completes (the archive's own z0-2: 21 tiles).
        try fx.drop("next.json", ["id": "next", "tiles": ["pmtiles://" + nginx.url("/gen/small.pmtiles")],
                                  "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 2])
        try fx.waitForState("next", "completed")
        XCTAssertEqual(fx.manifest("next").filter { $0.kind == "tile" }.count, 21)
    }

    /// Refresh: an archive still at the version the pack was planned from costs one request
    /// (the header and root) and keeps every tile; a changed one (new ETag) is planned again
    /// and its ranges asked.
    func testRefreshOfAnUnchangedArchiveCostsOneRequest() throws {
        let file = generated.appendingPathComponent("stamen.pmtiles")
        try FileManager.default.copyItem(at: mapdata.appendingPathComponent("pmtiles/stamen_toner(raster)CC-BY+ODbL_z3.pmtiles"), to: file)
        try fx.drop("r.json", ["id": "r", "tiles": ["pmtiles://" + nginx.url("/gen/stamen.pmtiles")],
                               "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
        try fx.waitForState("r", "completed")
        let tiles = fx.manifest("r").filter { $0.kind == "tile" }.map { "\($0.key) \($0.sha)" }.sorted()
        XCTAssertEqual(tiles.count, 85)
        XCTAssertEqual(archiveRequests("/gen/stamen.pmtiles").count, 2)
        func refresh(_ n: Int) throws {
            let (rc, out) = try fx.cli(["refresh", "r", "--spool", fx.spool])
            XCTAssertEqual(rc, 0, out)
            try waitUntil("refresh \(n) finished", timeout: 60) {
                fx.events("r").filter { $0["refresh"] as? String == "finished" }.count >= n
                    && (fx.status("r")?["refreshing"] as? Bool) == false && fx.state("r") == "completed"
            }
        }
        /// The `fetched` field (the ninth) of each tile line.
        func fetchedTimes() throws -> [Double] {
            let text = try String(contentsOfFile: fx.store + "/regions/r/manifest.tsv", encoding: .utf8)
            var out: [Double] = []
            for line in text.split(separator: "\n") {
                let f = line.split(separator: "\t", omittingEmptySubsequences: false)
                if f.count == 9 && f[0] == "tile" { out.append(Double(f[8]) ?? -1) }
            }
            return out
        }
        let fetchedBefore = try XCTUnwrap(try fetchedTimes().max())
        try refresh(1)
        XCTAssertEqual(archiveRequests("/gen/stamen.pmtiles").count, 3, "one request: the header and root, found unchanged")
        XCTAssertEqual(fx.manifest("r").filter { $0.kind == "tile" }.map { "\($0.key) \($0.sha)" }.sorted(), tiles)
        // That one request revalidated every tile, as a 304 revalidates one: the refresh counts
        // them checked and unchanged (it said "0 checked" before), and each line's fetch time is
        // the answer's.
        XCTAssertEqual([fx.progress("r")["resourcesChecked"], fx.progress("r")["resourcesUnchanged"], fx.progress("r")["resourcesChanged"]], [85, 85, 0])
        XCTAssertEqual(fx.events("r").last { $0["refresh"] as? String == "finished" }?["resourcesUnchanged"] as? Int, 85)
        let fetchedAfter = try fetchedTimes()
        XCTAssertEqual(fetchedAfter.count, 85)
        XCTAssertTrue(fetchedAfter.allSatisfy { $0 > fetchedBefore }, "\(fetchedAfter.min() ?? 0) <= \(fetchedBefore)")
        // The same bytes under a new modification time: nginx's ETag changes.
        try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(100)], ofItemAtPath: file.path)
        try refresh(2)
        XCTAssertEqual(archiveRequests("/gen/stamen.pmtiles").count, 5, "planned again (one request) and its one range asked")
        XCTAssertEqual(fx.manifest("r").filter { $0.kind == "tile" }.map { "\($0.key) \($0.sha)" }.sorted(), tiles)
        XCTAssertEqual([fx.progress("r")["resourcesChecked"], fx.progress("r")["resourcesUnchanged"], fx.progress("r")["resourcesChanged"]], [85, 85, 0],
                       "the same bytes under a new version: asked again, unchanged")
        fx.assertStoreMatchesManifest("r")
    }

    /// Offsets near 2^64 in an archive's header or directories (2026-12-07: a root directory at
    /// offset 2^64 - 1 crashed `plan` and the daemon, arithmetic overflow): each region fails
    /// with `invalidArchive` naming the damage, and the daemon goes on to complete the next one.
    func testOffsetsNear2To64FailTheRegionNotTheDaemon() throws {
        func varint(_ v: UInt64) -> [UInt8] {
            var v = v, out: [UInt8] = []
            while v >= 0x80 { out.append(UInt8(v & 0x7F) | 0x80); v >>= 7 }
            return out + [UInt8(v)]
        }
        func archive(_ name: String, _ edit: (inout PMTiles.Header) -> Void, root: [UInt8]) throws {
            var h = PMTiles.Header()
            h.internalCompression = .none; h.tileCompression = .none; h.tileType = 2; h.maxZoom = 2
            h.rootLength = UInt64(root.count); h.leafOffset = 1000; h.dataOffset = 2000
            edit(&h)
            try Data(h.bytes + root + [UInt8](repeating: 0, count: 3000)).write(to: generated.appendingPathComponent(name))
        }
        let near = UInt64.max - 5
        let tile = PMTiles.serializeDirectory([.init(tileID: 0, offset: 0, length: 10, runLength: 1)])
        try archive("rootpast.pmtiles", { $0.rootOffset = UInt64.max }, root: tile)
        try archive("leafpast.pmtiles", { _ in }, root: PMTiles.serializeDirectory([.init(tileID: 0, offset: near, length: 20, runLength: 0)]))
        try archive("bodypast.pmtiles", { $0.dataLength = 0 }, root: PMTiles.serializeDirectory([.init(tileID: 0, offset: near, length: 10, runLength: 1)]))
        // Two entries, the second's offset relative (0): the first's end passes 2^64.
        try archive("relpast.pmtiles", { _ in }, root: [2] + [0, 1] + [1, 1] + [10, 10] + varint(near + 1) + [0])
        let cases = ["rootpast": "the root directory's place", "leafpast": "a leaf directory's place",
                     "bodypast": "past 2^63 bytes", "relpast": "offsets pass 2^64"]
        for (name, _) in cases {
            try fx.drop("\(name).json", ["id": name, "tiles": ["pmtiles://" + nginx.url("/gen/\(name).pmtiles")],
                                          "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 2])
        }
        for (name, text) in cases {
            try fx.waitForState(name, "failed")
            XCTAssertEqual(fx.errorCode(name), "invalidArchive", name)
            XCTAssertTrue(fx.errorMessage(name)?.contains(text) == true, "\(name): \(fx.errorMessage(name) ?? "")")
        }
        try fx.drop("ok.json", ["id": "ok", "tiles": ["pmtiles://" + nginx.url("/pmtiles/stamen_toner(raster)CC-BY+ODbL_z3.pmtiles")],
                                "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 1])
        try fx.waitForState("ok", "completed")
        XCTAssertEqual(fx.manifest("ok").filter { $0.kind == "tile" }.count, 5)
        // `plan` says the same, without a trap.
        let request = generated.appendingPathComponent("p.json")
        try JSONSerialization.data(withJSONObject: ["id": "p", "tiles": ["pmtiles://" + nginx.url("/gen/rootpast.pmtiles")],
                                                    "bounds": [0, 0, 1, 1], "minZoom": 0, "maxZoom": 2]).write(to: request)
        let (rc, out) = try fx.cli(["plan", request.path, "--spool", fx.spool])
        XCTAssertEqual(rc, 1, out)
        XCTAssertTrue(out.contains("invalidArchive") && out.contains("the root directory's place"), out)
    }

    /// A v1 archive fails the region with `invalidArchive` naming the version and the source.
    func testVersion1ArchiveFailsTheRegion() throws {
        try fx.drop("v1.json", ["id": "v1", "tiles": ["pmtiles://" + nginx.url("/pmtiles/tpe_sample.v1.pmtiles")],
                                "bounds": [121, 24, 122, 26], "minZoom": 0, "maxZoom": 5])
        try fx.waitForState("v1", "failed")
        XCTAssertEqual(fx.errorCode("v1"), "invalidArchive")
        XCTAssertTrue(fx.errorMessage("v1")?.contains("source 'tiles0': the archive is PMTiles version 1") == true, fx.errorMessage("v1") ?? "")
        XCTAssertEqual(archiveRequests("/pmtiles/tpe_sample.v1.pmtiles").count, 1)
    }

    /// A style whose raster source is `pmtiles://...` (the Whitney archive): its tiles are those
    /// of mapdata/raster/usgs_whitney byte for byte.
    func testStyleSourceURLDownloadsTheArchivesTiles() throws {
        let style: [String: Any] = ["version": 8, "sources": ["whitney": ["type": "raster", "tileSize": 512,
                                                                          "url": "pmtiles://" + nginx.url(PMTilesPlanTests.whitney)]],
                                    "layers": [["id": "w", "type": "raster", "source": "whitney"]]]
        try JSONSerialization.data(withJSONObject: style).write(to: generated.appendingPathComponent("style.json"))
        try fx.drop("w.json", ["id": "whitney", "style": nginx.url("/gen/style.json"),
                               "bounds": [-118.32, 36.56, -118.26, 36.59], "minZoom": 8, "maxZoom": 16])
        try fx.waitForState("whitney", "completed")
        fx.assertStoreMatchesManifest("whitney")
        let tiles = fx.manifest("whitney").filter { $0.kind == "tile" }
        XCTAssertGreaterThan(tiles.count, 0)
        XCTAssertEqual(fx.progress("whitney")["tilesExpected"], tiles.count)
        let held = fx.objectsData(tiles.map(\.sha))
        for t in tiles {
            let zxy = t.key.split(separator: "/").dropFirst().joined(separator: "/")
            XCTAssertEqual(held[t.sha], try Data(contentsOf: mapdata.appendingPathComponent("raster/usgs_whitney/\(zxy).webp")), t.key)
        }
        XCTAssertEqual(fx.progress("whitney")["tileBytesExpected"], fx.progress("whitney")["tileBytesCompleted"])
    }
}

extension PMTilesDownloadTests {
    /// A style request over parts whose raster source is a PMTiles archive (the Whitney archive),
    /// beside a source of the same raster as XYZ files: each part at its own zooms, the archive's
    /// tiles are exactly the template's tiles with content, byte for byte.
    func testPartsOfAStyleWithAnArchiveSourceTakeTheTemplatesTiles() throws {
        let style: [String: Any] = ["version": 8, "sources": [
            "whitney": ["type": "raster", "tileSize": 512, "url": "pmtiles://" + nginx.url(PMTilesPlanTests.whitney)],
            "files": ["type": "raster", "tileSize": 512, "minzoom": 8, "maxzoom": 15,
                      "tiles": [nginx.url("/raster/usgs_whitney/{z}/{x}/{y}.webp")]]],
                                    "layers": [["id": "w", "type": "raster", "source": "whitney"], ["id": "f", "type": "raster", "source": "files"]]]
        try JSONSerialization.data(withJSONObject: style).write(to: generated.appendingPathComponent("style.json"))
        try fx.drop("p.json", ["id": "p", "style": nginx.url("/gen/style.json"),
                               "parts": [["bounds": [-118.31, 36.565, -118.29, 36.58], "minZoom": 8, "maxZoom": 13],
                                         ["bounds": [-118.30, 36.57, -118.27, 36.59], "minZoom": 13, "maxZoom": 16]]])
        try fx.waitForState("p", "completed")
        fx.assertStoreMatchesManifest("p")
        let tiles = fx.manifest("p").filter { $0.kind == "tile" && $0.sha.count == 64 } // with content: an empty tile has no sha256
        func keys(_ source: String) -> [String: String] {
            Dictionary(uniqueKeysWithValues: tiles.filter { $0.key.hasPrefix(source + "/") }.map { (String($0.key.dropFirst(source.count + 1)), $0.sha) })
        }
        XCTAssertGreaterThan(keys("whitney").count, 5)
        XCTAssertEqual(keys("whitney"), keys("files"))
        XCTAssertEqual(Set(keys("whitney").keys.map { $0.split(separator: "/")[0] }).count, 8, "zooms 8 to 15 (covering zooms of 512 px tiles)")
    }
}

/// Exports of a region whose style source is a PMTiles archive: PMTiles and MBTiles as for any
/// tile source; for `maplibre` and `site` the style points the source at a tile URL template of
/// tiles the pack holds (MapLibre Native's offline database does not cache range requests).
final class PMTilesExportTests: PMTilesServedTestCase {
    override func setUpWithError() throws {
        try ExportTools.require([ExportTools.python])
        try super.setUpWithError()
    }

    func testExportsOfAnArchiveSourceHoldEveryTile() throws {
        let archiveURL = nginx.url(PMTilesPlanTests.whitney)
        let style: [String: Any] = ["version": 8, "sources": ["whitney": ["type": "raster", "tileSize": 512, "url": "pmtiles://" + archiveURL]],
                                    "layers": [["id": "w", "type": "raster", "source": "whitney"]]]
        try JSONSerialization.data(withJSONObject: style).write(to: generated.appendingPathComponent("style.json"))
        try fx.drop("w.json", ["id": "whitney", "style": nginx.url("/gen/style.json"),
                               "bounds": [-118.32, 36.56, -118.26, 36.59], "minZoom": 8, "maxZoom": 16,
                               "exports": [["format": "pmtiles"], ["format": "mbtiles"], ["format": "maplibre"], ["format": "site"]]])
        try fx.waitForState("whitney", "completed")
        try waitUntil("four export results", timeout: 60) {
            ((fx.status("whitney")?["exports"] as? [[String: Any]]) ?? []).filter { ($0["state"] as? String) != "writing" }.count == 4
        }
        let list = try XCTUnwrap(fx.status("whitney")?["exports"] as? [[String: Any]])
        XCTAssertEqual(list.map { $0["state"] as? String }, ["written", "written", "written", "written"], "\(list)")
        let n = fx.manifest("whitney").filter { $0.kind == "tile" }.count
        XCTAssertGreaterThan(n, 0)
        func path(_ i: Int) throws -> String { try XCTUnwrap(list[i]["path"] as? String) }

        // PMTiles: the reader finds every tile, each identical to mapdata/raster/usgs_whitney.
        var (rc, out) = try runTool(ExportTools.python, [ExportTools.support + "/check_pmtiles.py", try path(0), mapdata.path + "/raster/usgs_whitney", "webp"])
        XCTAssertEqual(rc, 0, out)
        let pm = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: Any])
        XCTAssertEqual(pm["tiles_read"] as? Int, n, out)
        XCTAssertEqual(pm["differ_count"] as? Int, 0, out)
        // MBTiles: every tile.
        XCTAssertEqual(try sqlite(try path(1), "SELECT count(*) FROM tiles"), "\(n)")
        // MapLibre: the stored style's source is a template of the pack's tiles, and the tiles
        // table holds every tile under exactly that template.
        let template = archiveURL + "/{z}/{x}/{y}.webp"
        let script = """
            import json, sqlite3, sys, zlib
            db = sqlite3.connect(sys.argv[1])
            data, compressed = db.execute("SELECT data, compressed FROM resources WHERE kind = 1").fetchone()
            style = json.loads(zlib.decompress(data) if compressed else data)
            rows = db.execute("SELECT url_template, count(*) FROM tiles GROUP BY url_template").fetchall()
            print(json.dumps({"source": style["sources"]["whitney"], "templates": dict(rows)}))
            """
        (rc, out) = try runTool(ExportTools.python, ["-c", script, try path(2)])
        XCTAssertEqual(rc, 0, out)
        let ml = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: Any])
        XCTAssertEqual((ml["source"] as? [String: Any])?["tiles"] as? [String], [template], out)
        XCTAssertNil((ml["source"] as? [String: Any])?["url"], out)
        XCTAssertEqual(ml["templates"] as? [String: Int], [template: n], out)
        // Site: the style points at the site's TileJSON, whose template names the site's files.
        let site = try path(3)
        let siteStyle = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: site + "/style.json"))) as? [String: Any])
        let src = try XCTUnwrap((siteStyle["sources"] as? [String: Any])?["whitney"] as? [String: Any])
        XCTAssertEqual(src["url"] as? String, "sources/whitney.json")
        let files = (FileManager.default.enumerator(atPath: site + "/tiles/whitney")?.allObjects as? [String] ?? []).filter { $0.hasSuffix(".webp") }
        XCTAssertEqual(files.count, n)
        for f in files {
            XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: site + "/tiles/whitney/" + f)),
                           try Data(contentsOf: mapdata.appendingPathComponent("raster/usgs_whitney/" + f)), f)
        }
    }
}

extension PMTilesExportTests {
    /// A vector archive's own metadata is what its exports publish (attack round 26: a PMTiles
    /// source has no TileJSON, and its `vector_layers` and `attribution` were dropped, so GDAL
    /// listed no layer): the MBTiles `json` and `attribution` rows (read by sqlite3), the
    /// PMTiles export's metadata (read by the `pmtiles` reader) and the site's TileJSON hold the
    /// `vector_layers`, `attribution` and `name` that the `pmtiles` reader finds in the archive.
    func testExportsOfAVectorArchiveKeepItsLayersAndAttribution() throws {
        let archive = generated.appendingPathComponent("vec.pmtiles").path
        _ = try makePMTiles(["write", archive, "3", "9"])
        let read = "import json, sys\nfrom pmtiles.reader import Reader, MmapSource\nprint(json.dumps(Reader(MmapSource(open(sys.argv[1], 'rb'))).metadata()))"
        func metadata(_ path: String) throws -> [String: Any] {
            let (rc, out) = try runTool(ExportTools.python, ["-c", read, path])
            XCTAssertEqual(rc, 0, out)
            return try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: Any], out)
        }
        let want = try metadata(archive)
        let layers = try XCTUnwrap(want["vector_layers"] as? [[String: Any]])
        let attribution = try XCTUnwrap(want["attribution"] as? String)
        XCTAssertEqual(layers.first?["id"] as? String, "noise")
        try fx.drop("v.json", ["id": "vec", "tiles": ["pmtiles://" + nginx.url("/gen/vec.pmtiles")],
                               "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 2,
                               "exports": [["format": "mbtiles"], ["format": "pmtiles"], ["format": "site"]]])
        try fx.waitForState("vec", "completed")
        try waitUntil("three export results", timeout: 60) {
            ((fx.status("vec")?["exports"] as? [[String: Any]]) ?? []).filter { ($0["state"] as? String) != "writing" }.count == 3
        }
        let list = try XCTUnwrap(fx.status("vec")?["exports"] as? [[String: Any]])
        XCTAssertEqual(list.map { $0["state"] as? String }, ["written", "written", "written"], "\(list)")
        let paths = try list.map { try XCTUnwrap($0["path"] as? String) }
        func sameLayers(_ got: Any?, _ what: String) {
            XCTAssertEqual((got as? [[String: Any]]).map { JSONKind.serialize($0) }, JSONKind.serialize(layers), what)
        }
        // MBTiles (spec 1.3: vector_layers in the `json` row).
        let json = try sqlite(paths[0], "SELECT value FROM metadata WHERE name = 'json'")
        sameLayers((try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])?["vector_layers"], "mbtiles json: \(json)")
        XCTAssertEqual(try sqlite(paths[0], "SELECT value FROM metadata WHERE name = 'attribution'"), attribution)
        // PMTiles.
        let pm = try metadata(paths[1])
        sameLayers(pm["vector_layers"], "pmtiles metadata: \(pm)")
        XCTAssertEqual(pm["attribution"] as? String, attribution, "\(pm)")
        // The site's TileJSON.
        let tileJSON = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: paths[2] + "/sources/tiles0.json"))) as? [String: Any])
        sameLayers(tileJSON["vector_layers"], "site TileJSON: \(tileJSON)")
        XCTAssertEqual(tileJSON["attribution"] as? String, attribution)
    }

    /// A pack planned before archives' metadata was read (its plan has none) gains it at a
    /// refresh that finds the archive unchanged, from the bytes that one request read (no
    /// request more): its next MBTiles export has the archive's attribution (sqlite3).
    func testAnUnchangedRefreshGivesAnOldPlanTheArchivesMetadata() throws {
        let archive = generated.appendingPathComponent("meta.pmtiles").path
        _ = try makePMTiles(["write", archive, "3", "9"])
        try fx.drop("m.json", ["id": "meta", "tiles": ["pmtiles://" + nginx.url("/gen/meta.pmtiles")],
                               "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 2])
        try fx.waitForState("meta", "completed")
        let planPath = "\(fx.store)/regions/meta/plan.json"
        func planMetadata() throws -> String? {
            let plan = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: planPath))) as? [String: Any])
            let sets = try XCTUnwrap(plan["tileSets"] as? [[String: Any]], "\(plan.keys)")
            return (sets.first?["archive"] as? [String: Any])?["metadata"] as? String
        }
        let metadata = try XCTUnwrap(try planMetadata())
        XCTAssertTrue(metadata.contains("attribution"), metadata)
        // The plan as a daemon before 2026-12-07 wrote it: no metadata.
        XCTAssertEqual(fx.stop(), 0)
        var plan = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: planPath))) as? [String: Any])
        var sets = try XCTUnwrap(plan["tileSets"] as? [[String: Any]])
        var source = try XCTUnwrap(sets[0]["archive"] as? [String: Any])
        source.removeValue(forKey: "metadata")
        sets[0]["archive"] = source
        plan["tileSets"] = sets
        try JSONSerialization.data(withJSONObject: plan).write(to: URL(fileURLWithPath: planPath))
        XCTAssertNil(try planMetadata())
        try fx.start()
        let before = archiveRequests("/gen/meta.pmtiles").count
        let (rc, out) = try fx.cli(["refresh", "meta", "--spool", fx.spool])
        XCTAssertEqual(rc, 0, out)
        try waitUntil("the refresh finished", timeout: 60) {
            fx.events("meta").contains { $0["refresh"] as? String == "finished" }
                && (fx.status("meta")?["refreshing"] as? Bool) == false && fx.state("meta") == "completed"
        }
        XCTAssertEqual(archiveRequests("/gen/meta.pmtiles").count, before + 1, "one request: the header and root, found unchanged")
        XCTAssertEqual(try planMetadata(), metadata)
        let output = fx.root.appendingPathComponent("meta.mbtiles").path
        let (erc, eout) = try fx.cli(["export", "meta", "--format", "mbtiles", "--output", output, "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(erc, 0, eout)
        let attribution = try XCTUnwrap((try JSONSerialization.jsonObject(with: Data(metadata.utf8)) as? [String: Any])?["attribution"] as? String)
        XCTAssertEqual(try sqlite(output, "SELECT value FROM metadata WHERE name = 'attribution'"), attribution)
    }
}

/// PMTiles sources against a server that misbehaves (Tests/Support/faultserver.py, `/pmtiles/`):
/// an archive that changes mid-download, Range ignored, a truncated range, a 416.
final class PMTilesFaultTests: XCTestCase {
    var mapdata: URL!
    var server: FaultServer!
    var fx: SpoolFixture!
    let stamenFile = "pmtiles/stamen_toner(raster)CC-BY+ODbL_z3.pmtiles"

    override func setUpWithError() throws {
        mapdata = try MapData.require()
        server = try FaultServer()
        try server.registerFile("stamen.pmtiles", data: try Data(contentsOf: mapdata.appendingPathComponent(stamenFile)))
        fx = try SpoolFixture()
        try fx.start()
    }

    override func tearDown() {
        fx?.stop()
        server?.stop()
    }

    /// A server that ignores Range, with an archive whose header places its root directory or
    /// its leaves at 2^63 (a review of 2026-12-07: the whole file's bytes were cut at
    /// `Int(2^63)`, a trap that ended the daemon): the region fails with `invalidArchive`
    /// naming the place; metadata placed there is passed over, as metadata past the end is.
    func testPlacesPast2To63FromAServerIgnoringRangeFailTheRegionNotTheDaemon() throws {
        let root = PMTiles.serializeDirectory([.init(tileID: 0, offset: 0, length: 10, runLength: 1)])
        let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0] // the PNG signature: the one tile's 10 bytes
        func archive(_ edit: (inout PMTiles.Header) -> Void, root: [UInt8]) -> Data {
            var h = PMTiles.Header()
            h.internalCompression = .none; h.tileType = 2; h.maxZoom = 2
            h.rootLength = UInt64(root.count); h.leafOffset = 1000; h.dataOffset = 20_000; h.dataLength = 10
            edit(&h)
            let head = h.bytes + root
            return Data(head + [UInt8](repeating: 0, count: 20_000 - head.count) + png)
        }
        let at63 = UInt64(1) << 63
        try server.registerFile("root63.pmtiles", data: archive({ $0.rootOffset = at63; $0.rootLength = 16 }, root: root))
        try server.registerFile("leaf63.pmtiles", data: archive({ $0.leafOffset = at63 }, root: PMTiles.serializeDirectory([.init(tileID: 0, offset: 0, length: 20, runLength: 0)])))
        try server.registerFile("meta63.pmtiles", data: archive({ $0.metadataOffset = at63; $0.metadataLength = 100 }, root: root))
        for name in ["root63", "leaf63", "meta63"] {
            try fx.drop("\(name).json", ["id": name, "tiles": ["pmtiles://" + server.url("/pmtiles/norange/0/\(name).pmtiles")],
                                          "bounds": [-180, -85, 180, 85], "minZoom": 0, "maxZoom": 0])
        }
        for name in ["root63", "leaf63"] {
            try fx.waitForState(name, "failed")
            XCTAssertEqual(fx.errorCode(name), "invalidArchive", name)
            XCTAssertTrue(fx.errorMessage(name)?.contains("past 2^63") == true, "\(name): \(fx.errorMessage(name) ?? "")")
        }
        try waitUntil("meta63 ends", timeout: 60) { ["completed", "failed"].contains(fx.state("meta63") ?? "") }
        XCTAssertEqual(fx.state("meta63"), "completed", fx.errorMessage("meta63") ?? "")
        XCTAssertEqual(fx.objectsData(fx.manifest("meta63").map(\.sha)).values.first, Data(png))
    }

    /// Attack round 8: an archive server that answers the directory requests slowly stalled the
    /// whole daemon (they were read on its loop): another region's pause waited for them. They
    /// are read off the loop now: the other region is paused while the archive's header request
    /// is still unanswered (3 s late), and the archive's region is planned and completed after.
    func testASlowArchiveServerStallsNoOtherRegion() throws {
        try fx.drop("busy.json", server.tilesRequest(["/slow/30/busy/{z}/{x}/{y}.png"], id: "busy", maxZoom: 4))
        try fx.waitForState("busy", "downloading")
        let slow = "/pmtiles/slow/1/stamen.pmtiles"
        try fx.drop("late.json", ["id": "late", "tiles": ["pmtiles://" + server.url(slow)],
                                  "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
        try waitUntil("the archive's header is asked", timeout: 20) { server.hits(slow) >= 1 }
        try fx.control("busy", "pause")
        try fx.waitForState("busy", "pausedUser", timeout: 20)
        XCTAssertEqual(server.hits(slow), 1, "the header's answer is not in yet: the pause did not wait for it")
        XCTAssertEqual(fx.progress("late")["tilesExpected"] ?? 0, 0, "not planned yet")
        try fx.waitForState("late", "completed", timeout: 30)
        XCTAssertEqual(fx.manifest("late").filter { $0.kind == "tile" }.count, 85)
    }

    /// Attack round 9: each resume of a region whose directory read was still under way started
    /// another read (40 pause-resume cycles on a hanging server: 40 connections and 43 threads).
    /// At most one read runs per region, and a pause gives up the one under way: three cycles,
    /// each while a header read is 3 s late, then a read answered at once; the archive is asked
    /// for its header once per start (four in all), then for its one range.
    func testPauseAndResumeDuringADirectoryReadStartNoOtherRead() throws {
        let slow = "/pmtiles/slow/3/stamen.pmtiles" // the first three requests answered 3 s late
        try fx.drop("cycle.json", ["id": "cycle", "tiles": ["pmtiles://" + server.url(slow)],
                                   "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
        for k in 1...3 {
            try waitUntil("header read \(k) is asked", timeout: 20) { server.hits(slow) >= k }
            XCTAssertEqual(server.hits(slow), k, "one read per start")
            try fx.control("cycle", "pause")
            try fx.waitForState("cycle", "pausedUser", timeout: 20)
            try fx.control("cycle", "resume")
            try waitUntil("cycle resumed", timeout: 20) { ["downloading", "completed"].contains(fx.state("cycle") ?? "") }
        }
        try fx.waitForState("cycle", "completed", timeout: 30)
        XCTAssertEqual(fx.manifest("cycle").filter { $0.kind == "tile" }.count, 85)
        XCTAssertEqual(server.hits(slow), 5, "four header reads (three given up by the pauses) and one range, whatever the cycles")
    }

    /// Attack round 5: an archive served with no ETag and no Last-Modified cannot be pinned (a
    /// server that swapped it mid-download gave a pack of two versions' bytes): the region fails
    /// with `invalidArchive`, saying why, before any tile is fetched.
    func testAnArchiveWithoutValidatorsIsRefused() throws {
        try fx.drop("noval.json", ["id": "noval", "tiles": ["pmtiles://" + server.url("/pmtiles/noval/0/stamen.pmtiles")],
                                   "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
        try fx.waitForState("noval", "failed")
        let error = fx.status("noval")?["error"] as? [String: Any]
        XCTAssertEqual(error?["code"] as? String, "invalidArchive")
        XCTAssertTrue((error?["message"] as? String)?.contains("without a valid ETag (one quoted entity-tag, RFC 9110 section 8.8.3) or a Last-Modified") == true, "\(String(describing: error))")
        XCTAssertEqual(fx.manifest("noval").filter { $0.kind == "tile" }.count, 0)
        XCTAssertEqual(server.hits("/pmtiles/noval/0/stamen.pmtiles"), 1, "only the header was asked")
    }

    /// Attack round 5: zooms the archive's header does not hold plan no tile at all; the region
    /// used to end `completed` with no manifest, every export of it failing. It fails now
    /// (`allTilesEmpty`, saying the plan holds no tile), before anything but the header is asked.
    func testARegionOutsideTheArchivesZoomsFails() throws {
        try fx.drop("none.json", ["id": "none", "tiles": ["pmtiles://" + server.url("/pmtiles/ranged/0/stamen.pmtiles")],
                                  "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 5, "maxZoom": 6])
        try fx.waitForState("none", "failed")
        let error = fx.status("none")?["error"] as? [String: Any]
        XCTAssertEqual(error?["code"] as? String, "allTilesEmpty")
        XCTAssertTrue((error?["message"] as? String)?.contains("the plan holds no tile") == true, "\(String(describing: error))")
        XCTAssertEqual((fx.status("none")?["progress"] as? [String: Any])?["tilesExpected"] as? Int, 0)
        XCTAssertEqual(server.hits("/pmtiles/ranged/0/stamen.pmtiles"), 1, "only the header was asked")
    }

    /// Downloads the stamen archive (world z0-3, 85 tiles) from `path` and checks every stored
    /// tile against mapdata/raster.
    func downloadStamen(_ id: String, _ path: String) throws {
        try fx.drop("\(id).json", ["id": id, "tiles": ["pmtiles://" + server.url(path)],
                                   "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
        try fx.waitForState(id, "completed")
        fx.assertStoreMatchesManifest(id)
        XCTAssertEqual(try stamenTiles(id).count, 85)
    }

    /// The tiles region `id`'s manifest records, each checked against mapdata/raster's file.
    @discardableResult
    func stamenTiles(_ id: String, file: StaticString = #filePath, line: UInt = #line) throws -> [SpoolFixture.Line] {
        let tiles = fx.manifest(id).filter { $0.kind == "tile" }
        try assertStamenBodies(tiles, file: file, line: line)
        return tiles
    }

    /// Each of `tiles` (manifest lines of the stamen archive's tiles, each with an object) holds
    /// the bytes of mapdata/raster's file for its z/x/y.
    func assertStamenBodies(_ tiles: [SpoolFixture.Line], file: StaticString = #filePath, line: UInt = #line) throws {
        let held = fx.objectsData(tiles.map(\.sha))
        for t in tiles {
            let zxy = t.key.split(separator: "/").dropFirst().joined(separator: "/")
            XCTAssertEqual(held[t.sha], try Data(contentsOf: mapdata.appendingPathComponent("raster/stamen_toner/\(zxy).png")), t.key, file: file, line: line)
        }
    }

    /// An archive URL that redirects to another host (GitHub release assets, presigned S3 and
    /// CDN links do): the range and the pinned version go to every hop, so the new host answers
    /// each request with the bytes asked, not the whole file (attack round 28: every range
    /// came back as the whole archive, ten times its bytes over the wire).
    func testARedirectToAnotherHostKeepsTheRangeAndTheVersion() throws {
        let target = "/pmtiles/ranged/0/stamen.pmtiles"
        try downloadStamen("redirected", "/redirectto/http/localhost:\(server.port)\(target)")
        let asked = server.requests().filter { $0.path == target }
        XCTAssertEqual(asked.count, 2, "the plan's request and one range")
        XCTAssertTrue(asked.allSatisfy { $0.headers["Range"]?.hasPrefix("bytes=") == true }, "\(asked.map(\.headers))")
        XCTAssertEqual(asked.last?.headers["If-Match"], "\"v1\"")
    }

    /// `tilespool get` from a server that ignores Range: its check's read brings the whole
    /// archive, handed to its daemon, which cuts the tiles from it (the file is not kept twice,
    /// by the check and the daemon's options): one request in all, and the MBTiles holds the
    /// archive's 85 tiles.
    func testGetFromAServerIgnoringRangeAsksTheArchiveOnce() throws {
        fx.stop() // get runs its own daemon on the spool
        try server.registerFile("stamen4.pmtiles", data: try Data(contentsOf: mapdata.appendingPathComponent(stamenFile)))
        let path = "/pmtiles/norange/0/stamen4.pmtiles"
        let request = fx.root.appendingPathComponent("getnr.json")
        try JSONSerialization.data(withJSONObject: ["id": "getnr", "tiles": ["pmtiles://" + server.url(path)],
                                                    "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3] as [String: Any]).write(to: request)
        let output = fx.root.appendingPathComponent("getnr.mbtiles").path
        let (rc, out) = try fx.cli(["get", request.path, "--output", output, "--spool", fx.spool, "--store", fx.store])
        XCTAssertEqual(rc, 0, out)
        XCTAssertTrue(out.contains("\(output): mbtiles (source tiles0), 85 tiles"), out)
        XCTAssertEqual(server.hits(path), 1, "the check's read brought the file; no range was asked")
        XCTAssertEqual(try stamenTiles("getnr").count, 85)
    }

    /// A server that ignores Range (200 with the whole file, to the plan's request and the
    /// tiles' alike): the tiles are cut out of it; the whole file is never stored. The file
    /// the plan's request brought gives the tiles: it is sent once (before 2026-12-07, once
    /// more for the tiles' range).
    func testServerIgnoringRangeIsCutNotStoredWhole() throws {
        let path = "/pmtiles/norange/0/stamen.pmtiles"
        try downloadStamen("norange", path)
        let size = try Data(contentsOf: mapdata.appendingPathComponent(stamenFile)).count
        XCTAssertEqual(fx.objects().count, 80, "one object per distinct tile body")
        XCTAssertFalse(fx.storeObjects().values.contains { $0.size == size }, "the whole archive is not an object")
        XCTAssertEqual(server.hits(path), 1, "the plan's request brought the file; no range was asked")
        XCTAssertTrue(fx.log().contains("the server ignored Range: 85 tiles cut from the whole archive the plan's read brought"), fx.log())
        // The whole file over the largest body accepted: the region fails, its message saying
        // that the server ignored Range (attack round 38: "body larger than 70000 bytes" alone).
        fx.stop()
        try fx.start(["--max-object-size", "70000"])
        try server.registerFile("stamen2.pmtiles", data: try Data(contentsOf: mapdata.appendingPathComponent(stamenFile)))
        try fx.drop("toolarge.json", ["id": "toolarge", "tiles": ["pmtiles://" + server.url("/pmtiles/norange/0/stamen2.pmtiles")],
                                      "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
        try fx.waitForState("toolarge", "failed", timeout: 30)
        XCTAssertEqual(fx.errorCode("toolarge"), "badResponse")
        XCTAssertTrue(fx.errorMessage("toolarge")?.contains("the server ignored Range and sent the whole PMTiles archive, which is larger than the largest body accepted (70000 bytes, --max-object-size)") == true,
                      fx.errorMessage("toolarge") ?? "")
        // The same for the tile ranges of a server that honours Range for the directories only:
        // the region fails at the first such answer, its ranges not asked again (attack round 39:
        // each was retried, about 60 whole files of 10 MB before the region failed).
        let later = "/pmtiles/laternorange/1/stamen2.pmtiles"
        try fx.drop("later.json", ["id": "later", "tiles": ["pmtiles://" + server.url(later)],
                                   "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
        try fx.waitForState("later", "failed", timeout: 30)
        XCTAssertEqual(fx.errorCode("later"), "badResponse")
        XCTAssertTrue(fx.errorMessage("later")?.contains("the server ignored Range and sent the whole PMTiles archive") == true, fx.errorMessage("later") ?? "")
        // The plan's request, then at most the ranges asked at once (8 a region), none again.
        XCTAssertLessThanOrEqual(server.hits(later), 9)
        print("MEASURED: a Range-ignoring server over --max-object-size: \(server.hits(later)) requests before the region failed")
    }

    /// A leaf directory answered with half its bytes: the region fails naming the short answer
    /// (attack round 18: it said the directory does not inflate, a damaged archive).
    func testAShortAnswerForADirectoryIsNamed() throws {
        let dir = try TestScratch.folder("pmtiles-short-dir")
        let archive = dir.appendingPathComponent("gen.pmtiles").path
        _ = try PMTilesPlanTests.writeArchiveWithLeaves(archive)
        try server.registerFile("gen.pmtiles", data: try Data(contentsOf: URL(fileURLWithPath: archive)))
        // Request 1 (the header and root) whole; requests 2-3 (leaves) cut to half.
        let path = "/pmtiles/truncated/1/gen.pmtiles"
        try fx.drop("short.json", ["id": "short", "tiles": ["pmtiles://" + server.url(path)],
                                   "bounds": [1.3, 2.7, 37.1, 41.9], "minZoom": 0, "maxZoom": 7])
        try fx.waitForState("short", "failed")
        let error = try XCTUnwrap(fx.status("short")?["error"] as? [String: Any])
        XCTAssertEqual(error["code"] as? String, "badResponse", "\(error)")
        XCTAssertTrue((error["message"] as? String ?? "").contains("(a PMTiles directory) came back with only"), "\(error)")
        XCTAssertEqual(server.hits(path), 2, "the header's request and the first leaf's")
    }

    /// An archive cut short on the server (its directories whole, its last tiles' bytes gone):
    /// the tiles whose bytes came are stored, and each tile past the end fails at once with
    /// `badResponse` (within `maxFailedTiles`), never asked again (the bytes past the end were
    /// asked 6 times before). Cut where no tile of the last range is whole, the range's short 206
    /// says so; cut where some are, they are kept and the rest of the range gets a 416.
    func testAnArchiveShorterThanItsDirectoriesFailsTheMissingTilesAtOnce() throws {
        let whole = try Data(contentsOf: mapdata.appendingPathComponent(stamenFile))
        // 681,987: where a tile's bytes begin in this archive (716,052 bytes), after whole tiles of the last range.
        for (n, (length, status)) in [(whole.count * 9 / 10, 206), (681_987, 416)].enumerated() {
            try server.registerFile("cut\(n).pmtiles", data: whole.prefix(length))
            let path = "/pmtiles/ranged/0/cut\(n).pmtiles"
            try fx.drop("cut\(n).json", ["id": "cut\(n)", "tiles": ["pmtiles://" + server.url(path)], "maxFailedTiles": 85,
                                          "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
            try fx.waitForState("cut\(n)", "completed")
            let tiles = fx.manifest("cut\(n)").filter { $0.kind == "tile" }
            XCTAssertEqual(tiles.count, 85)
            let failed = tiles.filter { $0.sha == "!" }, stored = tiles.filter { $0.sha != "!" && $0.sha != "-" }
            XCTAssertGreaterThan(failed.count, 0)
            XCTAssertGreaterThan(stored.count, 0)
            XCTAssertEqual(fx.progress("cut\(n)")["tilesFailed"], failed.count)
            try assertStamenBodies(stored)
            let list = try String(contentsOfFile: fx.store + "/regions/cut\(n)/failed.tsv", encoding: .utf8)
            XCTAssertTrue(list.contains("HTTP \(status) ") && list.contains("the archive holds \(length) bytes") && list.contains("shorter than they say"),
                          String(list.prefix(600)))
            // The plan's request, the one range (cut short at the archive's end: its whole tiles
            // kept), and the rest of it once (a short 206 again, or a 416).
            XCTAssertEqual(server.hits(path), 3)
        }
    }

    /// The same when the tiles past the end are more than `maxFailedTiles`: the region fails, and
    /// keeps the whole tiles that came before the end, for its resume (attack round 51: they were
    /// being cut when the failures failed the region, and were lost in 5 runs of 6).
    func testTheWholeTilesBeforeTheEndAreKeptWhenTheFailuresFailTheRegion() throws {
        let whole = try Data(contentsOf: mapdata.appendingPathComponent(stamenFile))
        try server.registerFile("cut.pmtiles", data: whole.prefix(400_000)) // 37 tiles whole, 48 past the end
        let path = "/pmtiles/ranged/0/cut.pmtiles"
        try fx.drop("cut.json", ["id": "cut", "tiles": ["pmtiles://" + server.url(path)], "maxFailedTiles": 47,
                                 "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
        try fx.waitForState("cut", "failed")
        XCTAssertEqual(fx.errorCode("cut"), "badResponse")
        XCTAssertTrue((fx.errorMessage("cut") ?? "").contains("more than the request's maxFailedTiles (47)"), fx.errorMessage("cut") ?? "")
        let tiles = fx.manifest("cut").filter { $0.kind == "tile" }
        let stored = tiles.filter { $0.sha != "!" && $0.sha != "-" }
        XCTAssertEqual(stored.count, 37)
        XCTAssertEqual(tiles.filter { $0.sha == "!" }.count, 47)
        try assertStamenBodies(stored)
        XCTAssertEqual(fx.progress("cut")["tilesCompleted"], 37 + 47)
    }

    /// A range answered with half its bytes (twice), or 416 (twice): retried as a tile is, then
    /// complete, every tile right.
    func testTruncatedRangeAnd416AreRetried() throws {
        try downloadStamenAfterTwoFaults("truncated", "two short answers")
        try downloadStamenAfterTwoFaults("416", "two 416")
    }

    /// `downloadStamen` from the fault server's `/pmtiles/MODE/1/` (the plan's request answered
    /// right, the next two as MODE says): the server sees the plan's request, two faulty
    /// answers and one right.
    func downloadStamenAfterTwoFaults(_ mode: String, _ faults: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let path = "/pmtiles/\(mode)/1/stamen.pmtiles"
        try downloadStamen("m" + mode, path)
        XCTAssertEqual(server.hits(path), 4, "the plan's request, \(faults), one right", file: file, line: line)
    }

    /// A 206 of the length asked but for other bytes (a proxy that shifts the range by one; its
    /// Content-Range says so), or without a Content-Range: retried, never cut into tiles, then
    /// complete with every tile right (attack round 24: all 296 tiles of such a region were stored
    /// shifted and the region completed). The same answer to a directory read fails the region
    /// naming it.
    func testARangeAnswerForOtherBytesIsNotCut() throws {
        try downloadStamenAfterTwoFaults("shifted", "two shifted answers")
        try downloadStamenAfterTwoFaults("nocr", "two without Content-Range")
        // Two Content-Range fields, the bytes asked first, then the shifted bytes the body holds
        // (attack round 25: the first was read alone, and shifted tiles were stored).
        try downloadStamenAfterTwoFaults("twocr", "two answers with two Content-Range fields")
        // Every range refused, within maxFailedTiles: the region fails (no tile has content), its
        // message names failed.tsv and the cause, and failed.tsv lists every tile.
        try fx.drop("allshift.json", ["id": "allshift", "tiles": ["pmtiles://" + server.url("/pmtiles/shiftedall/1/stamen.pmtiles")],
                                      "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3, "maxFailedTiles": 1000])
        try fx.waitForState("allshift", "failed")
        XCTAssertEqual(fx.errorCode("allshift"), "allTilesEmpty")
        let why = fx.errorMessage("allshift") ?? ""
        XCTAssertTrue(why.contains("85 failed within maxFailedTiles; each failure and why in failed.tsv") && why.contains("not the bytes asked"), why)
        let failed = try String(contentsOfFile: "\(fx.store)/regions/allshift/failed.tsv", encoding: .utf8).split(separator: "\n").filter { !$0.hasPrefix("#") }
        XCTAssertEqual(failed.count, 85)
        XCTAssertTrue(failed.allSatisfy { $0.contains("not the bytes asked") }, "\(failed.first ?? "")")
        XCTAssertEqual(fx.manifest("allshift").filter { $0.kind == "tile" && $0.sha.count == 64 }.count, 0, "no tile stored")
        try fx.drop("dirshift.json", ["id": "dirshift", "tiles": ["pmtiles://" + server.url("/pmtiles/shifted/0/stamen.pmtiles")],
                                      "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
        try fx.waitForState("dirshift", "failed")
        let error = try XCTUnwrap(fx.status("dirshift")?["error"] as? [String: Any])
        XCTAssertEqual(error["code"] as? String, "badResponse")
        let message = error["message"] as? String ?? ""
        XCTAssertTrue(message.contains("came back as Content-Range: bytes 1-16384/") && message.contains("not the bytes asked"), message)
        XCTAssertEqual(fx.manifest("dirshift").filter { $0.kind == "tile" }.count, 0)
    }

    /// A server or proxy that cuts every answer after 50,000 bytes (its headers announcing the
    /// bytes asked), and one that caps every range at 50,000 bytes (its Content-Range saying
    /// so): the stamen archive's 85 tiles, 720,035 bytes in one range, still complete byte for
    /// byte, each answer's whole tiles kept and the rest asked again as a range of its own.
    /// Before, the range was retried whole and every attempt was cut again: the region failed.
    func testRangesCutShortKeepTheirWholeTiles() throws {
        for mode in ["cutoff", "capped"] {
            let path = "/pmtiles/\(mode)/1/stamen.pmtiles"
            try downloadStamen(mode, path)
            // The plan's request, then ranges of at most 50,000 bytes each for 720,035 bytes.
            let hits = server.hits(path)
            print("MEASURED: \(mode): \(hits - 1) range requests for 720035 tile bytes cut at 50000")
            XCTAssertGreaterThanOrEqual(hits - 1, 15, mode)
            XCTAssertLessThanOrEqual(hits - 1, 40, mode)
            XCTAssertTrue(fx.log().contains("cut short after"), mode)
        }
    }

    /// A range stalled mid-answer (its first 50,000 of 720,035 bytes received) when the region
    /// is paused, and when the daemon is stopped: the tiles wholly within those bytes are stored
    /// and recorded then, byte for byte, and the resume asks none of them again. Before, the
    /// received bytes were dropped with the transfer and the resume asked the whole range again
    /// (at 10 KB/s a pause lost up to ten minutes of download).
    func testAPauseOrStopKeepsTheWholeTilesOfARangeUnderWay() throws {
        let plan = try stamenPlan()
        try server.registerFile("stamen2.pmtiles", data: try Data(contentsOf: mapdata.appendingPathComponent(stamenFile)))
        for (how, name) in [("pause", "stamen.pmtiles"), ("stop", "stamen2.pmtiles")] {
            let id = "stall\(how)"
            let path = "/pmtiles/stall/1/\(name)" // the plan's request, then the range that stalls
            try fx.drop("\(id).json", ["id": id, "tiles": ["pmtiles://" + server.url(path)],
                                        "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
            try waitUntil("the range has stalled after 50,000 bytes", timeout: 60) { server.hits("/stalled" + path) == 1 }
            if how == "pause" {
                try fx.control(id, "pause")
                try fx.waitForState(id, "pausedUser")
            } else {
                XCTAssertEqual(fx.stop(), 0)
            }
            // The range asked, and the tiles wholly within its first 50,000 bytes.
            let asked = server.requests().filter { $0.path == path }
            XCTAssertEqual(asked.count, 2)
            let first = try XCTUnwrap(asked.last?.headers["Range"].flatMap { UInt64($0.dropFirst("bytes=".count).split(separator: "-")[0]) })
            let within = Set(plan.tiles.filter { $0.offset >= first && $0.offset + UInt64($0.length) <= first + 50_000 }.map { "\($0.tile.z)/\($0.tile.x)/\($0.tile.y)" })
            XCTAssertGreaterThan(within.count, 0)
            XCTAssertLessThan(within.count, 85)
            let kept = try stamenTiles(id)
            XCTAssertEqual(Set(kept.map { String($0.key.split(separator: "/").dropFirst().joined(separator: "/")) }), within, how)
            XCTAssertTrue(fx.log().contains("stopped after 50000 of"), how)
            print("MEASURED: \(how): \(kept.count) of 85 tiles kept from the 50,000 bytes received of a stalled range")
            if how == "pause" { try fx.control(id, "resume") } else { try fx.start() }
            try fx.waitForState(id, "completed")
            fx.assertStoreMatchesManifest(id)
            XCTAssertEqual(try stamenTiles(id).count, 85)
            // The ranges asked after it hold none of the tiles kept.
            for req in server.requests().filter({ $0.path == path }).dropFirst(2) {
                let ends = try XCTUnwrap(req.headers["Range"]).dropFirst("bytes=".count).split(separator: "-").compactMap { UInt64($0) }
                XCTAssertEqual(ends.count, 2)
                for t in plan.tiles where t.offset >= ends[0] && t.offset + UInt64(t.length) - 1 <= ends[1] {
                    XCTAssertFalse(within.contains("\(t.tile.z)/\(t.tile.x)/\(t.tile.y)"), "tile \(t.tile) kept at the \(how) and asked again")
                }
            }
        }
    }

    /// The plan of the whole stamen archive (85 tiles), read here with the daemon's own
    /// directory reader (the tiles' offsets and lengths in the archive).
    func stamenPlan() throws -> PMTiles.ArchivePlan {
        let archive = [UInt8](try Data(contentsOf: mapdata.appendingPathComponent(stamenFile)))
        let h = try PMTiles.readHeader(archive)
        func directory(_ o: UInt64, _ l: UInt64) throws -> [PMTiles.Entry] {
            try PMTiles.readDirectory(try Zlib.inflate(Array(archive[Int(o)..<Int(o + l)]), limit: 1 << 26))
        }
        let plan = try PMTiles.plan(header: h, root: try directory(h.rootOffset, h.rootLength),
                                    wanted: PMTiles.tileIDs(rects: PMTiles.cover(GeoBounds(west: -180, south: -85.0511, east: 180, north: 85.0511), minZoom: 0, maxZoom: 3, header: h), shape: nil)) {
            try directory(h.leafOffset + $0.offset, UInt64($0.length))
        }
        XCTAssertEqual(plan.tileCount, 85)
        return plan
    }

    /// The network lost while a range is under way: one range stalls after its first 50,000
    /// bytes while the server closes every other connection unanswered; once their retry is
    /// spent the region pauses for the network (`pausedNetwork`), and the tiles wholly within
    /// the stalled range's bytes are stored and recorded then, byte for byte, as a pause keeps
    /// them. The probes ask for one byte of the archive (`Range: bytes=0-0`), not the archive
    /// (before, each recovery fetched it up to --max-object-size). When the server answers again
    /// the region completes without asking any kept tile again. Ranges are at most 100,000
    /// bytes here (`--max-object-size`), so several are under way at once.
    func testANetworkLostKeepsTheWholeTilesOfTheRangesUnderWay() throws {
        let plan = try stamenPlan()
        let limit: UInt64 = 100_000
        let ranges = PMTiles.coalesce(plan.tiles, maxRange: limit)
        // Whichever range the server gets second is the one that stalls: each asks more than
        // the 50,000 bytes the stall sends.
        XCTAssertGreaterThanOrEqual(ranges.count, 3)
        XCTAssertTrue(ranges.allSatisfy { $0.end - $0.start > 50_000 }, "\(ranges.map { $0.end - $0.start })")
        fx.stop()
        try fx.start(["--max-object-size", "\(limit)", "--max-retries", "1"])
        try server.register("stamen.pmtiles.gone", json: "1")
        let path = "/pmtiles/stallgone/1/stamen.pmtiles"
        try fx.drop("gone.json", ["id": "gone", "tiles": ["pmtiles://" + server.url(path)],
                                  "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
        try fx.waitForState("gone", "pausedNetwork", timeout: 60)
        XCTAssertEqual(server.hits("/stalled" + path), 1)
        XCTAssertEqual(fx.errorCode("gone"), "networkError")
        XCTAssertTrue(fx.log().contains("stopped after 50000 of"))
        // The tiles kept are those wholly within the first 50,000 bytes of a range asked.
        let kept = Set(try stamenTiles("gone").map { String($0.key.split(separator: "/").dropFirst().joined(separator: "/")) })
        XCTAssertGreaterThan(kept.count, 0)
        XCTAssertLessThan(kept.count, 85)
        XCTAssertEqual(fx.storeFaults(), "")
        XCTAssertEqual(fx.progress("gone")["tilesCompleted"], kept.count, "the status counts the tiles kept")
        let firsts = server.requests().filter { $0.path == path }.compactMap { $0.headers["Range"].flatMap { UInt64($0.dropFirst("bytes=".count).split(separator: "-")[0]) } }
        let withins = firsts.map { first in
            Set(plan.tiles.filter { $0.offset >= first && $0.offset + UInt64($0.length) <= first + 50_000 }.map { "\($0.tile.z)/\($0.tile.x)/\($0.tile.y)" })
        }
        XCTAssertTrue(withins.contains(kept), "\(kept.sorted()) is no range's first 50,000 bytes")
        print("MEASURED: network lost: \(kept.count) of 85 tiles kept from the 50,000 bytes received of a stalled range")
        // A probe while the server is still gone asks for one byte.
        let asked = server.requests().filter { $0.path == path }.count
        try waitUntil("a probe", timeout: 30) { server.requests().filter { $0.path == path }.count > asked }
        XCTAssertEqual(server.requests().filter { $0.path == path }.last?.headers["Range"], "bytes=0-0")
        try server.register("stamen.pmtiles.gone", json: "0")
        let healed = server.requests().filter { $0.path == path }.count
        try fx.waitForState("gone", "completed", timeout: 60)
        XCTAssertEqual(try stamenTiles("gone").count, 85)
        fx.assertStoreMatchesManifest("gone")
        for req in server.requests().filter({ $0.path == path }).dropFirst(healed) {
            let ends = try XCTUnwrap(req.headers["Range"]).dropFirst("bytes=".count).split(separator: "-").compactMap { UInt64($0) }
            XCTAssertEqual(ends.count, 2)
            for t in plan.tiles where t.offset >= ends[0] && t.offset + UInt64(t.length) - 1 <= ends[1] {
                XCTAssertFalse(kept.contains("\(t.tile.z)/\(t.tile.x)/\(t.tile.y)"), "tile \(t.tile) kept at the network loss and asked again")
            }
        }
    }

    /// Attack rounds 36 and 37, under `--max-bytes-per-second 250000`: every byte a server that
    /// ignores Range sends counts against the limit, the bytes of the whole file beyond those
    /// asked included, whether a directory read or a range brought it. Three archives of one
    /// request: A from a server that ignores Range (the plan's read brings the file, and its
    /// tiles are cut from it: one request), B and C from servers that honour Range for the
    /// directories only (their first range brings the whole file; its other ranges, of at most
    /// 250,000 bytes at this limit, are never asked). B's range waits until A's whole file is
    /// paid for (round 37: the plan's reads counted as the 16 KiB they used, and the first range
    /// went at once); C's waits until B's whole answer is (round 36: 21 times the limit, the
    /// whole archive for each range). Every tile is right.
    func testAServerIgnoringRangeKeepsTheByteLimit() throws {
        fx.stop()
        let limit = 250_000.0, file = 720_035.0
        try fx.start(["--max-bytes-per-second", "\(Int(limit))"])
        for name in ["stamen2", "stamen3"] {
            try server.registerFile("\(name).pmtiles", data: try Data(contentsOf: mapdata.appendingPathComponent(stamenFile)))
        }
        let (a, b, c) = ("/pmtiles/norange/0/stamen.pmtiles", "/pmtiles/laternorange/1/stamen2.pmtiles", "/pmtiles/laternorange/1/stamen3.pmtiles")
        try fx.drop("limited.json", ["id": "limited", "tiles": [a, b, c].map { "pmtiles://" + server.url($0) },
                                     "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
        try fx.waitForState("limited", "completed", timeout: 90)
        fx.assertStoreMatchesManifest("limited")
        XCTAssertEqual(try stamenTiles("limited").count, 255)
        XCTAssertTrue(fx.log().contains("the server ignored Range: 85 tiles cut from the whole archive the plan's read brought"), fx.log())
        XCTAssertTrue(fx.log().contains("the server ignored Range: 85 tiles cut from its whole answer"), fx.log())
        XCTAssertEqual(server.hits(a), 1, "A: the plan's read only")
        XCTAssertEqual(server.hits(b), 2, "B: the plan's read and one range")
        XCTAssertEqual(server.hits(c), 2, "C: the plan's read and one range")
        let planned = try XCTUnwrap([a, b, c].compactMap { server.requestTimes($0).first }.max())
        let rangeB = try XCTUnwrap(server.requestTimes(b).last), rangeC = try XCTUnwrap(server.requestTimes(c).last)
        XCTAssertGreaterThanOrEqual(rangeB - planned, (file - limit) / limit - 0.1, "B's range came before A's whole file was paid for")
        XCTAssertGreaterThanOrEqual(rangeC - rangeB, (file - limit) / limit - 0.1, "C's range came before B's whole answer was paid for")
        print("MEASURED: Range ignored at \(Int(limit)) B/s: three archives in 5 requests; B's range \(String(format: "%.2f", rangeB - planned)) s after the plans' reads, C's \(String(format: "%.2f", rangeC - rangeB)) s after B's")
    }

    /// Attack round 38: a server that ignores Range sent the whole archive for each directory
    /// read, the header's and every leaf's (135 times a 1.7 MB archive with 131 leaves). The
    /// first whole answer serves the other directory reads: the plan of an archive with leaf
    /// directories costs one request, and its counts are the `pmtiles` reader's.
    func testAServerIgnoringRangeSendsTheArchiveOnceForItsDirectories() throws {
        let dir = try TestScratch.folder("pmtiles-norange-leaves")
        let archive = dir.appendingPathComponent("gen.pmtiles").path
        _ = try PMTilesPlanTests.writeArchiveWithLeaves(archive)
        let witness = try makePMTiles(["region", archive, "-180", "-85.0511", "180", "85.0511", "0", "7"])
        try server.registerFile("gen.pmtiles", data: try Data(contentsOf: URL(fileURLWithPath: archive)))
        let path = "/pmtiles/norange/0/gen.pmtiles"
        let request = fx.root.appendingPathComponent("leaves.json")
        try JSONSerialization.data(withJSONObject: ["id": "leaves", "tiles": ["pmtiles://" + server.url(path)],
                                                    "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 7] as [String: Any]).write(to: request)
        let (rc, out) = try fx.cli(["plan", request.path, "--json"])
        let doc = (try? JSONSerialization.jsonObject(with: Data(out.utf8))) as? [String: Any]
        XCTAssertEqual(rc, 0, out)
        XCTAssertEqual(doc?["tiles"] as? Int, witness["tiles"] as? Int, out)
        XCTAssertEqual(doc?["tileBytes"] as? Int, witness["tile_bytes"] as? Int, out)
        XCTAssertEqual(server.hits(path), 1, "the header's request brought the file; no leaf was asked")
    }

    /// Attack round 35: a connection dropped in the middle of the header's answer failed the
    /// region (`badResponse`, no retry). A directory read whose transfer fails on the way is
    /// asked again, as a tile is: the region completes with its 85 tiles, the header asked twice.
    func testADirectoryReadCutShortIsAskedAgain() throws {
        let path = "/pmtiles/drop/0/stamen.pmtiles" // the first request, the header's, is cut in half
        try fx.drop("dropped.json", ["id": "dropped", "tiles": ["pmtiles://" + server.url(path)],
                                     "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
        try fx.waitForState("dropped", "completed", timeout: 30)
        XCTAssertEqual(try stamenTiles("dropped").count, 85)
        fx.assertStoreMatchesManifest("dropped")
        XCTAssertEqual(server.hits(path), 3, "the header twice (the first cut short), then the one range")
    }

    /// A pause while the archive's header read gets no answer (the server holds the connection):
    /// the read is given up at once (the held connection is closed within seconds, though
    /// `--low-speed-time` is 60 s), and a resume reads the archive again and completes the
    /// region with its 85 tiles. Before, the read held on until `--low-speed-time`, and the
    /// resume waited for it.
    func testAPauseDuringAStalledDirectoryReadGivesItUp() throws {
        fx.stop()
        try fx.start(["--low-speed-time", "60"])
        try server.registerFile("stamen3.pmtiles", data: try Data(contentsOf: mapdata.appendingPathComponent(stamenFile)))
        let path = "/pmtiles/hold/0/stamen3.pmtiles" // the first request, the header's, is held
        try fx.drop("held.json", ["id": "held", "tiles": ["pmtiles://" + server.url(path)],
                                  "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
        try waitUntil("the header read is held", timeout: 30) { server.hits("/held" + path) == 1 }
        XCTAssertEqual(server.hits("/released" + path), 0)
        try fx.control("held", "pause")
        try fx.waitForState("held", "pausedUser")
        try waitUntil("the held read is given up", timeout: 10) { server.hits("/released" + path) == 1 }
        try fx.control("held", "resume")
        try fx.waitForState("held", "completed", timeout: 30)
        XCTAssertEqual(try stamenTiles("held").count, 85)
        fx.assertStoreMatchesManifest("held")
        XCTAssertEqual(server.hits("/held" + path), 1, "only the first request was held")
    }

    /// kill -9 mid-download, then a restart: the ranges asked after the restart hold no tile the
    /// manifest already recorded, and the region completes with every tile the reader finds.
    func testResumeAfterKill9FetchesOnlyWhatIsMissing() throws {
        try ExportTools.require([ExportTools.python])
        let dir = try TestScratch.folder("pmtiles-resume")
        let archive = dir.appendingPathComponent("gen.pmtiles").path
        _ = try makePMTiles(["write", archive, "7", "11"])
        let witness = try makePMTiles(["region", archive, "1.3", "2.7", "37.1", "41.9", "0", "7"])
        let expected = try XCTUnwrap(witness["sha256"] as? [String: String])
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: archive)))
        try server.registerFile("gen.pmtiles", data: Data(bytes))
        // Where each tile lies, read here with the core reader (the daemon's plan is the same).
        let h = try PMTiles.readHeader(bytes)
        func directory(_ o: UInt64, _ l: UInt64) throws -> [PMTiles.Entry] {
            try PMTiles.readDirectory(try Zlib.inflate(Array(bytes[Int(o)..<Int(o + l)]), limit: 1 << 26))
        }
        let bounds = GeoBounds(west: 1.3, south: 2.7, east: 37.1, north: 41.9)
        let plan = try PMTiles.plan(header: h, root: try directory(h.rootOffset, h.rootLength),
                                    wanted: PMTiles.tileIDs(rects: PMTiles.cover(bounds, minZoom: 0, maxZoom: 7, header: h), shape: nil)) {
            try directory(h.leafOffset + $0.offset, UInt64($0.length))
        }
        XCTAssertEqual(plan.tileCount, expected.count)

        let path = "/pmtiles/ranged/0/gen.pmtiles"
        try fx.drop("gen.json", ["id": "gen", "tiles": ["pmtiles://" + server.url(path)], "maxRequestsPerSecond": 4,
                                 "bounds": [1.3, 2.7, 37.1, 41.9], "minZoom": 0, "maxZoom": 7])
        try waitUntil("some tiles are recorded", timeout: 60) { (fx.progress("gen")["tilesCompleted"] ?? 0) > 0 }
        fx.kill9()
        let recorded = Set(fx.manifest("gen").filter { $0.kind == "tile" }.map { String($0.key.split(separator: "/").dropFirst().joined(separator: "/")) })
        XCTAssertGreaterThan(recorded.count, 0)
        XCTAssertLessThan(recorded.count, expected.count, "killed mid-download")
        let before = server.requests().filter { $0.path == path }.count
        try fx.start()
        try fx.waitForState("gen", "completed", timeout: 120)
        fx.assertStoreMatchesManifest("gen")
        var got: [String: String] = [:]
        for t in fx.manifest("gen") where t.kind == "tile" { got[String(t.key.split(separator: "/").dropFirst().joined(separator: "/"))] = t.sha }
        XCTAssertEqual(got, expected)
        // The ranges asked after the restart: none holds a tile recorded before it.
        let after = server.requests().filter { $0.path == path }.dropFirst(before)
        XCTAssertFalse(after.isEmpty)
        for req in after {
            let range = try XCTUnwrap(req.headers["Range"])
            let ends = range.dropFirst("bytes=".count).split(separator: "-").compactMap { UInt64($0) }
            XCTAssertEqual(ends.count, 2, range)
            for t in plan.tiles where t.offset >= ends[0] && t.offset + UInt64(t.length) - 1 <= ends[1] {
                let key = "\(t.tile.z)/\(t.tile.x)/\(t.tile.y)"
                let shared = plan.tiles.contains { $0.offset == t.offset && !recorded.contains("\($0.tile.z)/\($0.tile.x)/\($0.tile.y)") }
                XCTAssertTrue(!recorded.contains(key) || shared, "tile \(key), recorded before the kill, asked again in \(range)")
            }
        }
        print("MEASURED: resume: \(recorded.count) of \(expected.count) tiles recorded before kill -9, \(before) requests before, \(after.count) after")
    }

    /// The archive's server does not answer when the directories are to be read: the region
    /// waits in `pausedNetwork` like any download, and is planned and completed once it answers.
    func testUnreachableArchiveServerPausesForTheNetwork() throws {
        let path = "/pmtiles/ranged/0/stamen.pmtiles"
        server.stop()
        try fx.drop("down.json", ["id": "down", "tiles": ["pmtiles://" + server.url(path)],
                                  "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
        try fx.waitForState("down", "pausedNetwork")
        XCTAssertEqual(fx.errorCode("down"), "networkError")
        try server.restart()
        try fx.waitForState("down", "completed")
        XCTAssertEqual(fx.manifest("down").filter { $0.kind == "tile" }.count, 85)
        fx.assertStoreMatchesManifest("down")
    }

    /// The archive's ETag changes after the plan's request: every range request carried
    /// `If-Match` with the ETag pinned at plan time, the server answers 412, and the region
    /// fails with `archiveChanged` naming the source; no tile of the new version is stored.
    func testArchiveChangedMidDownloadFailsTheRegion() throws {
        let path = "/pmtiles/changed/1/stamen.pmtiles"
        try fx.drop("changed.json", ["id": "changed", "tiles": ["pmtiles://" + server.url(path)],
                                     "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
        try fx.waitForState("changed", "failed")
        XCTAssertEqual(fx.errorCode("changed"), "archiveChanged")
        XCTAssertTrue(fx.errorMessage("changed")?.contains("source 'tiles0'") == true, fx.errorMessage("changed") ?? "")
        XCTAssertEqual(fx.manifest("changed").filter { $0.kind == "tile" }.count, 0)
        let asked = server.requests().filter { $0.path == path }
        XCTAssertEqual(asked.count, 2)
        XCTAssertNil(asked[0].headers["If-Match"], "the plan's request pins the version")
        XCTAssertEqual(asked[1].headers["If-Match"], "\"v1\"")
        XCTAssertEqual(asked[1].headers["Range"]?.hasPrefix("bytes="), true)
    }

    /// A range answered without the pinned ETag by a server that ignores If-Match (a proxy that
    /// strips validators), or answered by a new version (ETag "v2") cut short: the version of
    /// the bytes cannot be told, or is another, so the region fails with `archiveChanged` at
    /// that answer, and no tile of it is stored (attack round 27: the first kind completed with
    /// every tile of the new archive, or a mix of both; the second was retried as a network
    /// fault and failed as `badResponse`).
    func testAnAnswerWithoutThePinnedVersionFailsTheRegion() throws {
        // And two ETag fields, the pinned one first (attack round 28: the first was read alone),
        // or, with no ETag, two Last-Modified (round 29: the joined text parsed as the first).
        for mode in ["stripped", "cutchanged", "twoetags", "twolm"] {
            let path = "/pmtiles/\(mode)/1/stamen.pmtiles"
            try fx.drop("\(mode).json", ["id": mode, "tiles": ["pmtiles://" + server.url(path)],
                                         "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
            try fx.waitForState(mode, "failed")
            XCTAssertEqual(fx.errorCode(mode), "archiveChanged", fx.errorMessage(mode) ?? "")
            XCTAssertEqual(fx.manifest(mode).filter { $0.kind == "tile" }.count, 0, mode)
            XCTAssertEqual(server.hits(path), 2, "\(mode): the plan's request, then one range, not retried")
        }
        // Two Last-Modified from the first answer on: no version to pin, the archive is refused.
        try fx.drop("twolm0.json", ["id": "twolm0", "tiles": ["pmtiles://" + server.url("/pmtiles/twolm/0/stamen.pmtiles")],
                                    "bounds": [-180, -85.0511, 180, 85.0511], "minZoom": 0, "maxZoom": 3])
        try fx.waitForState("twolm0", "failed")
        XCTAssertEqual(fx.errorCode("twolm0"), "invalidArchive", fx.errorMessage("twolm0") ?? "")
    }
}
