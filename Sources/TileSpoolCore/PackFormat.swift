// The store's two binary formats, pure: pack files (objects appended one after the other, with a
// trailer listing them) and index files (every object of some packs, sorted by SHA-256, with a
// fan-out table), after git's packfile and .idx and restic's pack header. docs/store.md describes
// both byte by byte, for readers we did not write.
import Foundation

/// A 32-byte SHA-256 digest held in four words: compared, sorted and hashed without allocating.
public struct Digest: Hashable, Comparable, Sendable {
    public var a: UInt64, b: UInt64, c: UInt64, d: UInt64

    /// Hashes the first 64 bits only: a SHA-256's bits are uniform, so they spread a
    /// dictionary's keys as well as all 256 would (equality still compares all of them).
    public func hash(into hasher: inout Hasher) { hasher.combine(a) }

    /// The digest of 64 hex digits (either case); nil for anything else.
    public init?(hex: String) {
        // A native string's UTF-8 is contiguous (`withUTF8`): four words of 16 digits each,
        // read from the buffer without a switch per digit (exports parse a name per tile).
        var text = hex
        let parsed = text.withUTF8 { u -> (UInt64, UInt64, UInt64, UInt64)? in
            guard u.count == 64 else { return nil }
            var bad: UInt8 = 0
            func word(_ at: Int) -> UInt64 {
                var x: UInt64 = 0
                for i in at..<(at + 16) {
                    let c = u[i]
                    let digit = c &- 0x30, letter = (c | 0x20) &- 0x61 // '0'...'9'; 'a'...'f' either case
                    let v: UInt8 = digit < 10 ? digit : (letter < 6 ? letter &+ 10 : 0xFF)
                    bad |= v & 0xF0
                    x = x << 4 | UInt64(v & 0x0F)
                }
                return x
            }
            let w = (word(0), word(16), word(32), word(48))
            return bad == 0 ? w : nil
        }
        guard let parsed else { return nil }
        (a, b, c, d) = parsed
    }

    /// The digest of 32 bytes, most significant first (fewer bytes: the missing ones are 0).
    public init<C: Collection>(bytes: C) where C.Element == UInt8 {
        let fast: Digest?? = bytes.withContiguousStorageIfAvailable { buffer -> Digest? in
            buffer.count >= 32 ? Digest(raw: UnsafeRawBufferPointer(buffer), at: 0) : nil
        }
        if let f = fast ?? nil { self = f; return }
        var words = (UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        for (i, byte) in bytes.prefix(32).enumerated() {
            switch i >> 3 {
            case 0: words.0 = words.0 << 8 | UInt64(byte)
            case 1: words.1 = words.1 << 8 | UInt64(byte)
            case 2: words.2 = words.2 << 8 | UInt64(byte)
            default: words.3 = words.3 << 8 | UInt64(byte)
            }
        }
        (a, b, c, d) = words
    }

    /// The digest whose 32 bytes (most significant first) start at byte `offset` of `raw`
    /// (which must hold them): four unaligned big-endian loads, no allocation.
    @inlinable
    public init(raw: UnsafeRawBufferPointer, at offset: Int) {
        a = UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
        b = UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self))
        c = UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: offset + 16, as: UInt64.self))
        d = UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: offset + 24, as: UInt64.self))
    }

    /// The 32 bytes, most significant first.
    public var bytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(32)
        for w in [a, b, c, d] { for s in stride(from: 56, through: 0, by: -8) { out.append(UInt8((w >> UInt64(s)) & 0xFF)) } }
        return out
    }

    /// 64 lower-case hex digits.
    public var hex: String {
        String(unsafeUninitializedCapacity: 64) { out in
            var i = 0
            for w in [a, b, c, d] {
                for s in stride(from: 60, through: 0, by: -4) {
                    let v = UInt8((w >> UInt64(s)) & 0xF)
                    out[i] = v < 10 ? 0x30 + v : 0x57 + v
                    i += 1
                }
            }
            return 64
        }
    }

    /// The first byte (the fan-out slot).
    public var firstByte: Int { Int(a >> 56) }

    public static func < (l: Digest, r: Digest) -> Bool {
        if l.a != r.a { return l.a < r.a }
        if l.b != r.b { return l.b < r.b }
        if l.c != r.c { return l.c < r.c }
        return l.d < r.d
    }
}

/// Little-endian integers in byte arrays (the formats are little-endian throughout).
public enum LE {
    /// Appends `v`'s bytes, least significant first.
    public static func put<T: FixedWidthInteger>(_ v: T, _ out: inout [UInt8]) {
        var x = v.littleEndian
        withUnsafeBytes(of: &x) { out.append(contentsOf: $0) }
    }
    /// The integer whose bytes start at `at`.
    public static func get<T: FixedWidthInteger>(_ bytes: UnsafeRawBufferPointer, _ at: Int, as: T.Type) -> T {
        precondition(at >= 0 && at + MemoryLayout<T>.size <= bytes.count, "LE.get out of bounds")
        return T(littleEndian: bytes.loadUnaligned(fromByteOffset: at, as: T.self))
    }
}

/// A pack file: objects one after the other, each behind a small header.
///
///     offset 0      "TSPACK02" (8 bytes; "TSPACK01" in packs written before 2026-12-07)
///     offset 8      records, one per object, in the order written:
///                     SHA-256 of the body (32 bytes), body length (u32 LE), the body
///     last 16       "TSPACKND" (8 bytes), record count (u32 LE), reserved (u32 LE, 0)
///
/// A pack being written has no end yet; one cut short by a crash is read up to its last whole
/// record (each record carries its object's name, so every body can be checked). A pack is named
/// (`packs/<64 hex>.pack`) by a SHA-256 its magic decides (docs/store.md, "Pack files"):
/// "TSPACK02", of its bytes with every body left out (the magic, each record's 36-byte header,
/// the end), which with each body's own SHA-256 in its header names every byte, as git's pack
/// names come from their objects' names, without a second pass over the bodies; "TSPACK01", of
/// its whole bytes.
public enum PackFormat {
    /// The magic of the packs written now: named by the SHA-256 of their bytes without the bodies.
    public static let magic = Array("TSPACK02".utf8)
    /// The magic of packs written before 2026-12-07, read as they are: named by the SHA-256 of
    /// their whole bytes.
    public static let wholeNamedMagic = Array("TSPACK01".utf8)
    /// True when the first 8 of `bytes` are either magic.
    public static func isMagic<C: Collection>(_ bytes: C) -> Bool where C.Element == UInt8 {
        let head = Array(bytes.prefix(8))
        return head == magic || head == wholeNamedMagic
    }
    public static let endMagic = Array("TSPACKND".utf8)
    /// Bytes of a record's header: the SHA-256 and the length.
    public static let headerSize = 36
    /// Bytes of the end: magic, count, reserved.
    public static let footerSize = 16
    /// The largest body a record holds (u32 length).
    public static let maxBody = Int(UInt32.max)
    /// The largest offset of a record an index may give (2^48 bytes, 256 TiB: far beyond any
    /// pack written, and small enough that offset + header + body never overflows an `Int`).
    /// An index entry past it is damage (`IndexFormat.plausible`).
    public static let maxOffset: UInt64 = 1 << 48

    /// One object of a pack: where its record starts and its body's length.
    public struct Entry: Sendable, Equatable {
        public var digest: Digest
        /// From the start of the pack file, where the record (its header) starts.
        public var offset: UInt64
        public var length: UInt32
        public init(digest: Digest, offset: UInt64, length: UInt32) { self.digest = digest; self.offset = offset; self.length = length }
        /// Where the body starts and ends in the pack. An offset past `PackFormat.maxOffset`
        /// (never written; index files giving one are refused as damaged) is read as that
        /// offset, so that no value traps.
        public var body: Range<Int> {
            let start = Int(min(offset, PackFormat.maxOffset)) + PackFormat.headerSize
            return start..<(start + Int(length))
        }
    }

    /// A record's header for a body of `length` bytes named `digest`.
    public static func header(_ digest: Digest, length: Int) -> [UInt8] {
        var out = digest.bytes
        LE.put(UInt32(length), &out)
        return out
    }

    /// The end of a pack of `count` records.
    public static func footer(count: Int) -> [UInt8] {
        var out = endMagic
        LE.put(UInt32(count), &out)
        LE.put(UInt32(0), &out)
        return out
    }

    /// The (digest, length) of a record header's 36 bytes.
    public static func parseHeader(_ bytes: UnsafeRawBufferPointer) -> (Digest, Int) {
        (Digest(bytes: bytes[0..<32]), Int(LE.get(bytes, 32, as: UInt32.self)))
    }

    /// The record count an end gives, or nil when `footer` is not a pack's end.
    public static func count(footer: [UInt8]) -> Int? {
        guard footer.count == footerSize, Array(footer[0..<8]) == endMagic else { return nil }
        return footer.withUnsafeBytes { Int(LE.get($0, 8, as: UInt32.self)) }
    }
}

/// An index file: where objects are, for some packs, sorted by SHA-256.
///
///     offset 0          "TSIDX001" (8 bytes)
///     offset 8          fan-out: 256 × u32 LE, entry i = number of objects whose first byte ≤ i
///     offset 1032       pack count P (u32 LE), then P × (pack SHA-256, 32 bytes; created, u64 LE
///                       seconds since 1970)
///     then              N entries, sorted by SHA-256 (N = fan-out[255]): SHA-256 (32 bytes),
///                       pack number (u32 LE, into the pack table), offset of the record in the
///                       pack (u64 LE), body length (u32 LE)                  48 bytes each
///     last 32           SHA-256 of every byte before it
///
/// An index file is named by that last SHA-256 (`index/<64 hex>.idx`). The same object may be
/// listed by several index files (and packs); a reader takes any copy, the newest pack first.
public enum IndexFormat {
    public static let magic = Array("TSIDX001".utf8)
    public static let entrySize = 48
    public static let fanoutOffset = 8
    public static let packTableOffset = 8 + 256 * 4

    /// One object's place.
    public struct Entry: Sendable, Equatable {
        public var digest: Digest
        public var pack: UInt32
        public var offset: UInt64
        public var length: UInt32
        public init(digest: Digest, pack: UInt32, offset: UInt64, length: UInt32) {
            self.digest = digest; self.pack = pack; self.offset = offset; self.length = length
        }
    }

    /// One pack of the pack table.
    public struct Pack: Sendable, Equatable {
        public var digest: Digest
        /// When the pack was written (seconds since 1970).
        public var created: UInt64
        public init(digest: Digest, created: UInt64) { self.digest = digest; self.created = created }
    }

    /// True when `e` can name a record of a pack: it starts after the pack's magic and no
    /// further than `PackFormat.maxOffset`, and it names a pack of the table (`packs` of them).
    /// An index file with any other entry is damaged (a crafted offset of 2^64 - 1 trapped
    /// `cat` and `export`).
    public static func plausible(_ e: Entry, packs: Int) -> Bool {
        e.offset >= UInt64(PackFormat.magic.count) && e.offset <= PackFormat.maxOffset && Int(e.pack) < packs
    }

    /// Where the entries start, for `packs` packs.
    public static func entriesOffset(packs: Int) -> Int { packTableOffset + 4 + packs * 40 }

    /// The file's bytes for `packs` and `entries` (sorted here; the digest trailer not included:
    /// the writer appends the SHA-256 of the returned bytes).
    public static func body(packs: [Pack], entries: [Entry]) -> [UInt8] {
        let sorted = entries.sorted { $0.digest < $1.digest }
        var out: [UInt8] = magic
        out.reserveCapacity(entriesOffset(packs: packs.count) + sorted.count * entrySize + 32)
        var fanout = [UInt32](repeating: 0, count: 256)
        for e in sorted { fanout[e.digest.firstByte] += 1 }
        var acc: UInt32 = 0
        for i in 0..<256 { acc += fanout[i]; LE.put(acc, &out) }
        LE.put(UInt32(packs.count), &out)
        for p in packs { out += p.digest.bytes; LE.put(p.created, &out) }
        for e in sorted { appendEntry(e, to: &out) }
        return out
    }

    /// Appends one entry's 48 bytes.
    public static func appendEntry(_ e: Entry, to out: inout [UInt8]) {
        out += e.digest.bytes
        LE.put(e.pack, &out)
        LE.put(e.offset, &out)
        LE.put(e.length, &out)
    }

    /// The fan-out table of an index file's first `packTableOffset` bytes; nil when not one.
    public static func fanout(_ head: [UInt8]) -> [UInt32]? {
        guard head.count >= packTableOffset, Array(head[0..<8]) == magic else { return nil }
        return head.withUnsafeBytes { raw in (0..<256).map { LE.get(raw, fanoutOffset + 4 * $0, as: UInt32.self) } }
    }

    /// The pack table (`count` packs) from its bytes (after the count).
    public static func packs(_ bytes: [UInt8], count: Int) -> [Pack]? {
        guard bytes.count == count * 40 else { return nil }
        return bytes.withUnsafeBytes { raw in
            (0..<count).map { i in Pack(digest: Digest(bytes: raw[(i * 40)..<(i * 40 + 32)]), created: LE.get(raw, i * 40 + 32, as: UInt64.self)) }
        }
    }

    /// Entry `i` of consecutive entry bytes.
    public static func entry(_ raw: UnsafeRawBufferPointer, _ i: Int) -> Entry {
        let base = i * entrySize
        return Entry(digest: Digest(raw: raw, at: base), pack: LE.get(raw, base + 32, as: UInt32.self),
                     offset: LE.get(raw, base + 36, as: UInt64.self), length: LE.get(raw, base + 44, as: UInt32.self))
    }

    /// The digest of entry `i` of a block of entries (without the rest of the entry).
    public static func digest(_ raw: UnsafeRawBufferPointer, _ i: Int) -> Digest { Digest(raw: raw, at: i * entrySize) }

    /// What a damaged index file still says: its entries read without any check but that each
    /// lies whole within `bytes` and names a pack of its table, with that pack's digest (an
    /// empty list when the magic or the pack table is gone). Hints only: `verify --repair`
    /// uses one only when the bytes it points at hash to its name.
    public static func hints(_ bytes: [UInt8]) -> [(pack: Digest, entry: Entry)] {
        guard bytes.count >= packTableOffset + 4, Array(bytes[0..<8]) == magic else { return [] }
        let count = bytes.withUnsafeBytes { Int(LE.get($0, packTableOffset, as: UInt32.self)) }
        let first = entriesOffset(packs: min(count, 1 << 20))
        guard count < 1 << 20, bytes.count >= first,
              let table = packs(Array(bytes[(packTableOffset + 4)..<first]), count: count) else { return [] }
        return bytes.withUnsafeBytes { raw in
            (0..<((raw.count - first) / entrySize)).compactMap { i in
                let e = entry(UnsafeRawBufferPointer(rebasing: raw[first...]), i)
                return Int(e.pack) < table.count ? (table[Int(e.pack)].digest, e) : nil
            }
        }
    }
}
