// zlib (https://zlib.net/manual.html) for the exports: zlib streams (RFC 1950) for MapLibre's
// `compressed = 1`, gzip members (RFC 1952) for MBTiles/PMTiles vector tiles and PMTiles
// directories, and inflating gzip bodies that a server sent without Content-Encoding.
import CZlib
import Foundation

/// A body that zlib could not inflate or deflate.
public struct ZlibError: Error, Sendable, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}

public enum Zlib {
    /// The container deflate output is wrapped in.
    public enum Wrapper: Sendable {
        /// RFC 1950 (`78 9c ...`): what MapLibre Native's `util::decompress` reads.
        case zlib
        /// RFC 1952 (`1f 8b ...`), with mtime 0 so the same input gives the same bytes.
        case gzip
        var windowBits: Int32 { self == .zlib ? 15 : 31 }
    }

    /// Deflates `bytes` at level 6.
    /// - Throws: `ZlibError` when zlib fails (out of memory).
    public static func compress(_ bytes: [UInt8], _ wrapper: Wrapper) throws(ZlibError) -> [UInt8] {
        var s = z_stream()
        guard tilespool_deflate_init2(&s, 6, wrapper.windowBits) == Z_OK else { throw ZlibError(message: "deflateInit2 failed") }
        defer { deflateEnd(&s) }
        let bound = Int(deflateBound(&s, uLong(bytes.count))) + 32
        var out = [UInt8](repeating: 0, count: bound)
        var produced = 0
        var rc: Int32 = Z_OK
        bytes.withUnsafeBufferPointer { inBuf in
            out.withUnsafeMutableBufferPointer { outBuf in
                s.next_in = UnsafeMutablePointer(mutating: inBuf.baseAddress)
                s.avail_in = uInt(inBuf.count)
                s.next_out = outBuf.baseAddress
                s.avail_out = uInt(outBuf.count)
                rc = deflate(&s, Z_FINISH)
                produced = outBuf.count - Int(s.avail_out)
            }
        }
        guard rc == Z_STREAM_END else { throw ZlibError(message: "deflate failed (\(rc))") }
        out.removeSubrange(produced...)
        return out
    }

    /// Inflates a gzip or zlib stream (the header tells which), at most `limit` bytes out.
    /// - Throws: `ZlibError` for a damaged or truncated stream, or output over `limit`.
    public static func inflate(_ bytes: [UInt8], limit: Int = 1 << 30) throws(ZlibError) -> [UInt8] {
        var s = z_stream()
        guard tilespool_inflate_init2(&s, 47) == Z_OK else { throw ZlibError(message: "inflateInit2 failed") } // 32+15: auto
        defer { inflateEnd(&s) }
        var out: [UInt8] = []
        out.reserveCapacity(min(limit, max(4096, bytes.count * 4)))
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        var rc: Int32 = Z_OK
        try bytes.withUnsafeBufferPointer { (inBuf) throws(ZlibError) in
            s.next_in = UnsafeMutablePointer(mutating: inBuf.baseAddress)
            s.avail_in = uInt(inBuf.count)
            repeat {
                let n: Int = chunk.withUnsafeMutableBufferPointer { c in
                    s.next_out = c.baseAddress
                    s.avail_out = uInt(c.count)
                    rc = CZlib.inflate(&s, Z_NO_FLUSH)
                    return c.count - Int(s.avail_out)
                }
                if rc != Z_OK && rc != Z_STREAM_END { throw ZlibError(message: "not a valid gzip/zlib stream (inflate \(rc))") }
                out.append(contentsOf: chunk[0..<n])
                if out.count > limit { throw ZlibError(message: "inflates to more than \(limit) bytes") }
                if rc == Z_OK && n == 0 && s.avail_in == 0 { throw ZlibError(message: "truncated gzip/zlib stream") }
            } while rc != Z_STREAM_END
        }
        return out
    }
}
