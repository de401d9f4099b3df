// Issue 30: the repository (packs, index, reads, verify, repair, gc) is written once over
// `Backend`; this suite checks what it promises on the local folder and on a real Ceph RADOS
// Gateway alike, damaging packs only through the backend (so the same steps run on both).
import Foundation
import TileSpoolCore
@testable import TileSpoolIO
import XCTest

/// The promises of the store over `backend` (an empty one), a store opened anew by `open` at
/// each step (what a restart of the daemon or a CLI command sees).
func checkRepositoryConformance(_ backend: any Backend, open: () throws -> PackedStore,
                                file: StaticString = #filePath, line: UInt = #line) throws {
    let bodies = (0..<40).map { Data("conformance body \($0) ".utf8) + Data(repeating: UInt8($0), count: 200 + 37 * $0) }
    let names = bodies.map { SHA256.hex($0) }
    // Put: named by SHA-256, stored once, readable from the open pack before the sync.
    var store = try open()
    for (b, n) in zip(bodies, names) {
        let first = try store.put(b)
        XCTAssertEqual(first.sha256, n, file: file, line: line)
        XCTAssertTrue(first.isNew, file: file, line: line)
        XCTAssertFalse(try store.put(b).isNew, "a second put of the same bytes", file: file, line: line)
    }
    XCTAssertEqual(try store.read(names[7], limit: 1 << 20), bodies[7], file: file, line: line)
    try store.sync()
    let packs = try backend.list(prefix: "packs/").filter { $0.name.hasSuffix(".pack") }
    XCTAssertEqual(packs.count, 1, "40 small objects: one pack", file: file, line: line)
    XCTAssertFalse(try backend.list(prefix: "index/").isEmpty, file: file, line: line)
    // Every pack is named by the SHA-256 of its bytes without the bodies (docs/store.md).
    for p in packs {
        XCTAssertEqual(try backend.load(p.name).flatMap(formatPackName), String(p.name.split(separator: "/").last!.dropLast(5)), file: file, line: line)
    }

    // Read back by a store opened anew: one at a time, located, and in pack order.
    store = try open()
    for (b, n) in zip(bodies, names) { XCTAssertEqual(try store.read(n, limit: 1 << 20), b, file: file, line: line) }
    let locations = store.objectLocations(names)
    XCTAssertEqual(locations.compactMap { $0 }.count, names.count, file: file, line: line)
    var got: [Int: Data] = [:]
    try store.readObjects(names, at: locations, limit: 1 << 20) { i, d in got[i] = d }
    XCTAssertEqual(got.count, names.count, file: file, line: line)
    for (i, b) in bodies.enumerated() { XCTAssertEqual(got[i], b, "object \(i)", file: file, line: line) }

    // A flipped byte in one object's body, written through the backend: that object is never
    // handed on, the others are; verify names it; the repair keeps the others and quarantines it.
    let packName = packs[0].name
    var raw = [UInt8](try XCTUnwrap(try backend.load(packName), file: file, line: line))
    let hit = try XCTUnwrap(locations[5], file: file, line: line)
    raw[hit.offset + 3] ^= 0xFF
    XCTAssertTrue(try backend.save(packName, Data(raw), ifAbsent: false), file: file, line: line)
    store = try open()
    XCTAssertThrowsError(try store.read(names[5], limit: 1 << 20), "a damaged body is refused", file: file, line: line)
    XCTAssertEqual(try store.read(names[6], limit: 1 << 20), bodies[6], file: file, line: line)
    let found = try store.repository.checkObjects(repair: false)
    XCTAssertTrue(found.bad.contains { $0.contains(names[5]) }, "\(found.bad)", file: file, line: line)
    let repair = try store.repository.checkObjects(repair: true)
    XCTAssertEqual(repair.quarantined, 1, file: file, line: line)
    store = try open()
    XCTAssertFalse(store.contains(names[5]), file: file, line: line)
    for (i, (b, n)) in zip(bodies, names).enumerated() where i != 5 { XCTAssertEqual(try store.read(n, limit: 1 << 20), b, file: file, line: line) }
    XCTAssertEqual(try store.repository.checkObjects(repair: false).bad, [], file: file, line: line)
    XCTAssertFalse(try backend.list(prefix: "quarantine/").isEmpty, file: file, line: line)

    // Only the pack's end damaged (its footer's reserved bytes): the repair makes the very pack
    // again under its name and keeps every object.
    let whole = try backend.list(prefix: "packs/").filter { $0.name.hasSuffix(".pack") }
    XCTAssertEqual(whole.count, 1, file: file, line: line)
    let good = try XCTUnwrap(try backend.load(whole[0].name), file: file, line: line)
    var end = [UInt8](good)
    end[end.count - 1] ^= 0x5A
    XCTAssertTrue(try backend.save(whole[0].name, Data(end), ifAbsent: false), file: file, line: line)
    store = try open()
    XCTAssertEqual(try store.repository.checkObjects(repair: true).quarantined, 1, file: file, line: line)
    XCTAssertEqual(try backend.load(whole[0].name), good, "the pack is whole again", file: file, line: line)
    store = try open()
    for (i, (b, n)) in zip(bodies, names).enumerated() where i != 5 { XCTAssertEqual(try store.read(n, limit: 1 << 20), b, file: file, line: line) }

    // gc with no grace: the objects no manifest references are removed, the others kept, and
    // the packs left hash to their names.
    let kept = Set(names.enumerated().filter { $0.offset % 2 == 0 && $0.offset != 5 }.map(\.element))
    store = try open()
    let report = try store.repository.collectGarbage(grace: 0) { kept }
    XCTAssertEqual(report.objectsRemoved, names.count - 1 - kept.count, file: file, line: line)
    store = try open()
    for (b, n) in zip(bodies, names) {
        if kept.contains(n) { XCTAssertEqual(try store.read(n, limit: 1 << 20), b, file: file, line: line) } else { XCTAssertFalse(store.contains(n), file: file, line: line) }
    }
    for p in try backend.list(prefix: "packs/") where p.name.hasSuffix(".pack") {
        XCTAssertEqual(try backend.load(p.name).flatMap(formatPackName), String(p.name.split(separator: "/").last!.dropLast(5)), file: file, line: line)
    }
    XCTAssertEqual(try store.repository.checkObjects(repair: false).bad, [], file: file, line: line)

    // A region created exclusively (a new id in a store other daemons write): of two creations
    // of one id, by two stores opened apart, the second finds the first's request and writes
    // nothing (attack round 53: the second one's request had replaced the first one's).
    func request(_ maxZoom: Int) -> RegionRequest {
        RegionRequest(id: "claimed", source: .tiles(["http://127.0.0.1:9/{z}/{x}/{y}.png"]),
                      bounds: GeoBounds(west: 0, south: 0, east: 1, north: 1), minZoom: 0, maxZoom: maxZoom)
    }
    XCTAssertTrue(try open().region("claimed").create(request: request(1), exclusive: true), file: file, line: line)
    XCTAssertFalse(try open().region("claimed").create(request: request(1), exclusive: true), "the same request, by another: taken", file: file, line: line)
    XCTAssertFalse(try open().region("claimed").create(request: request(2), exclusive: true), file: file, line: line)
    XCTAssertEqual(try open().region("claimed").loadRequest().maxZoom, 1, "the first one's request stays", file: file, line: line)
    try open().region("claimed").create(request: request(3))
    XCTAssertEqual(try open().region("claimed").loadRequest().maxZoom, 3, "a plain create replaces it", file: file, line: line)
}

/// Attack round 8's damage, each on a fresh store from `fresh(name)` (a backend and how to open
/// a store on it): `verify --repair` keeps every object some sound copy still holds, and a
/// store opened afterwards reads each of them, byte for byte, with nothing left to repair.
/// - a flipped body byte in a pack while a second pack holds a sound copy of that object;
/// - a flipped bit in the first record's length field, or in the pack's end magic (a walk of
///   the records reaches none of them: they are found where the index says);
/// - the pack cut in half (the records before the cut are kept);
/// - a flipped byte in an index file (not used; its pack indexed again, with the same bytes);
/// - a junk file named like a pack (quarantined; it stopped every repair and gc before);
/// - an index file and its pack both damaged (the damaged index's entries place the records).
func checkRepairRescues(_ fresh: (String) throws -> (backend: any Backend, open: () throws -> PackedStore),
                        file: StaticString = #filePath, line: UInt = #line) throws {
    let bodies = (0..<30).map { Data("rescue body \($0) ".utf8) + Data(repeating: UInt8($0 &* 7), count: 300 + 41 * $0) }
    let names = bodies.map { SHA256.hex($0) }
    func packName(_ b: any Backend) throws -> String { try XCTUnwrap(try b.list(prefix: "packs/").first { $0.name.hasSuffix(".pack") }?.name, file: file, line: line) }
    func damage(_ b: any Backend, _ name: String, _ change: (inout [UInt8]) -> Void) throws {
        var raw = [UInt8](try XCTUnwrap(try b.load(name), file: file, line: line))
        change(&raw)
        try b.save(name, Data(raw), ifAbsent: false)
    }
    let cases: [(String, Set<Int>, (any Backend, PackedStore) throws -> Void)] = [
        ("second-copy", [], { b, s in
            let p = try packName(b)
            // A second pack with sound copies of objects 0-2 (as a gc killed after its save leaves).
            let writer = GCPackWriter(repository: s.repository)
            for i in 0..<3 { try writer.append(Digest(hex: names[i])!, bodies[i]) }
            _ = try writer.finish()
            let at = try XCTUnwrap(s.objectLocation(names[0]), file: file, line: line)
            XCTAssertEqual(at.pack, String(p.dropFirst("packs/".count).dropLast(5)), file: file, line: line)
            try damage(b, p) { $0[at.offset + 1] ^= 0xFF }
        }),
        ("length-field", [], { b, _ in try damage(b, try packName(b)) { $0[PackFormat.magic.count + 32] ^= 0x01 } }),
        ("end-magic", [], { b, _ in try damage(b, try packName(b)) { $0[$0.count - PackFormat.footerSize] ^= 0x01 } }),
        ("cut-in-half", Set(15..<30), { b, s in
            let p = try packName(b)
            let cut = try XCTUnwrap(s.objectLocation(names[15]), file: file, line: line).offset - PackFormat.headerSize + 10
            try damage(b, p) { $0 = Array($0[0..<cut]) }
        }),
        ("index-byte", [], { b, _ in
            let idx = try XCTUnwrap(try b.list(prefix: "index/").first { $0.name.hasSuffix(".idx") }?.name, file: file, line: line)
            try damage(b, idx) { $0[1100] ^= 0x01 }
        }),
        ("junk-pack", [], { b, _ in try b.save("packs/" + String(repeating: "a", count: 64) + ".pack", Data("TSPACK01garbage".utf8), ifAbsent: true) }),
        // Round 9: the index file (its trailer) and the pack (the first record's length) both
        // damaged: what the damaged index still says places the records the walk cannot reach.
        ("index-and-pack", [], { b, _ in
            let idx = try XCTUnwrap(try b.list(prefix: "index/").first { $0.name.hasSuffix(".idx") }?.name, file: file, line: line)
            try damage(b, idx) { $0[$0.count - 1] ^= 0x01 }
            try damage(b, try packName(b)) { $0[PackFormat.magic.count + 32] ^= 0x01 }
        }),
    ]
    for (label, lost, hurt) in cases {
        let (backend, open) = try fresh(label)
        let store = try open()
        for b in bodies { try store.put(b) }
        try store.sync()
        try hurt(backend, store)
        let damaged = try open()
        XCTAssertFalse(try damaged.repository.checkObjects(repair: false).bad.isEmpty, "\(label): verify sees the damage", file: file, line: line)
        _ = try damaged.repository.checkObjects(repair: true)
        let repaired = try open()
        for (i, (n, b)) in zip(names, bodies).enumerated() {
            if lost.contains(i) {
                XCTAssertFalse(repaired.contains(n), "\(label): object \(i) had no sound copy", file: file, line: line)
            } else {
                XCTAssertEqual(try? repaired.read(n, limit: 1 << 20), b, "\(label): object \(i)", file: file, line: line)
            }
        }
        XCTAssertEqual(try repaired.repository.checkObjects(repair: false).bad, [], "\(label): clean after one repair", file: file, line: line)
    }
}

/// Where each record of a pack's bytes starts and its body's length, walked by the format
/// (docs/store.md, "Pack files": from offset 8, 36-byte headers, up to the 16-byte end), not by
/// the store's code; nil when the records do not end exactly at the end.
func packRecords(_ raw: [UInt8]) -> [(start: Int, length: Int)]? {
    guard raw.count >= 24 else { return nil }
    var out: [(start: Int, length: Int)] = []
    var pos = 8
    while pos < raw.count - 16 {
        guard pos + 36 <= raw.count - 16 else { return nil }
        let length = Int(raw[pos + 32]) | Int(raw[pos + 33]) << 8 | Int(raw[pos + 34]) << 16 | Int(raw[pos + 35]) << 24
        out.append((pos, length))
        pos += 36 + length
    }
    return pos == raw.count - 16 ? out : nil
}

/// The name docs/store.md ("Pack files") gives the bytes of a "TSPACK02" pack: the SHA-256 of its
/// 8-byte magic, each record's 36-byte header in order and its 16-byte end, computed here from
/// the format (not by the store's code); nil for bytes that are not such a pack.
func formatPackName(_ data: Data) -> String? {
    let raw = [UInt8](data)
    guard raw.count >= 24, Array(raw[0..<8]) == Array("TSPACK02".utf8), let records = packRecords(raw) else { return nil }
    var named = Array(raw[0..<8])
    for r in records { named += raw[r.start..<(r.start + 36)] }
    named += raw[(raw.count - 16)...]
    return SHA256.hex(Data(named))
}
