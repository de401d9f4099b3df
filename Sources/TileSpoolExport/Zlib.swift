// zlib (https://zlib.net/manual.html) for the exports: zlib streams (RFC 1950) for MapLibre's
// `compressed = 1`, gzip members (RFC 1952) for MBTiles/PMTiles vector tiles and PMTiles
// directories, and inflating gzip bodies that a server sent without Content-Encoding. Whole
// buffers are compressed by libdeflate, which writes the same formats faster; streams stay zlib.
import CDeflate
import CZlib
import Foundation

/// A body that zlib could not inflate or deflate.
public struct ZlibError: Error, Sendable, CustomStringConvertible {
    public var message: String
    /// The output limit a stream would have passed (`Zlib.inflate`), nil for other faults.
    public var exceededLimit: Int?
    public init(message: String, exceededLimit: Int? = nil) { self.message = message; self.exceededLimit = exceededLimit }
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

    /// Deflates `bytes` at level 6 in one call of libdeflate (whole buffers: 2.2 times zlib's
    /// speed on real vector tiles and 0.5% smaller, docs/benchmarks.md). Each call
    /// borrows a compressor from a small pool, so threads compress at once without allocating one
    /// (hundreds of KiB) per tile.
    /// - Throws: `ZlibError` when libdeflate cannot allocate a compressor.
    public static func compress(_ bytes: [UInt8], _ wrapper: Wrapper) throws(ZlibError) -> [UInt8] {
        guard let c = Compressors.shared.take() else { throw ZlibError(message: "libdeflate: out of memory") }
        defer { Compressors.shared.give(c) }
        let out = bytes.withUnsafeBufferPointer { inBuf in
            let bound = wrapper == .gzip ? libdeflate_gzip_compress_bound(c, inBuf.count) : libdeflate_zlib_compress_bound(c, inBuf.count)
            return [UInt8](unsafeUninitializedCapacity: bound) { outBuf, count in
                // Within the bound libdeflate cannot run out of room (libdeflate.h); 0 would mean it did.
                count = wrapper == .gzip
                    ? libdeflate_gzip_compress(c, inBuf.baseAddress, inBuf.count, outBuf.baseAddress, bound)
                    : libdeflate_zlib_compress(c, inBuf.baseAddress, inBuf.count, outBuf.baseAddress, bound)
                precondition(count > 0, "libdeflate wrote nothing within its own bound")
            }
        }
        // The buffer is the input's size or more; exports hold thousands of compressed bodies
        // at once (`PreparePipeline`), so one much smaller is copied to its own size.
        return out.count * 2 < out.capacity ? Array(out[...]) : out
    }

    /// libdeflate compressors at level 6, kept for reuse: one per thread compressing at once at
    /// most, so the pool never holds more than the export's worker threads did at one time.
    private final class Compressors: @unchecked Sendable {
        static let shared = Compressors()
        private let lock = NSLock()
        private var idle: [OpaquePointer] = []

        func take() -> OpaquePointer? {
            lock.lock()
            let c = idle.popLast()
            lock.unlock()
            return c ?? libdeflate_alloc_compressor(6)
        }

        func give(_ c: OpaquePointer) {
            lock.lock()
            idle.append(c)
            lock.unlock()
        }
    }

    /// Inflates a gzip or zlib stream (the header tells which) into memory, at most `limit` bytes.
    /// For documents (a style, a TileJSON); bodies are streamed (`inflate(_:limit:_:)`).
    /// - Throws: `ZlibError` for a damaged or truncated stream, or output over `limit`
    ///   (`exceededLimit` set).
    public static func inflate(_ bytes: [UInt8], limit: Int) throws(ZlibError) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(min(limit, max(4096, bytes.count * 4)))
        do {
            _ = try inflate(bytes, limit: limit) { chunk in out.append(contentsOf: chunk); return true }
        } catch let e as ZlibError {
            throw e
        } catch {
            throw ZlibError(message: "\(error)") // the sink above throws nothing
        }
        return out
    }

    /// Inflates a gzip or zlib stream (the header tells which) chunk by chunk: `sink` gets each
    /// piece of output (at most 64 KiB) as it comes, so memory does not grow with the output.
    /// `sink` returns false to stop early (the rest is not inflated, and not checked).
    /// - Parameter limit: the most bytes of output; the stream is refused as soon as it would
    ///   pass it, before `sink` sees a byte beyond it.
    /// - Returns: the bytes handed to `sink`.
    /// - Throws: `ZlibError` for a damaged or truncated stream or output over `limit`
    ///   (`exceededLimit` set); what `sink` throws.
    @discardableResult
    public static func inflate(_ bytes: [UInt8], limit: Int, _ sink: (UnsafeBufferPointer<UInt8>) throws -> Bool) throws -> Int {
        var s = z_stream()
        guard tilespool_inflate_init2(&s, 47) == Z_OK else { throw ZlibError(message: "inflateInit2 failed") } // 32+15: auto
        defer { inflateEnd(&s) }
        let chunk = UnsafeMutablePointer<UInt8>.allocate(capacity: 1 << 16)
        defer { chunk.deallocate() }
        var total = 0
        var rc: Int32 = Z_OK
        try bytes.withUnsafeBufferPointer { inBuf in
            s.next_in = UnsafeMutablePointer(mutating: inBuf.baseAddress)
            s.avail_in = uInt(inBuf.count)
            repeat {
                s.next_out = chunk
                s.avail_out = uInt(1 << 16)
                rc = CZlib.inflate(&s, Z_NO_FLUSH)
                let n = (1 << 16) - Int(s.avail_out)
                if rc != Z_OK && rc != Z_STREAM_END { throw ZlibError(message: "not a valid gzip/zlib stream (inflate \(rc))") }
                if n > limit - total { throw ZlibError(message: "inflates to more than \(limit) bytes", exceededLimit: limit) }
                total += n
                if n > 0, try !sink(UnsafeBufferPointer(start: chunk, count: n)) { return }
                if rc == Z_OK && n == 0 && s.avail_in == 0 { throw ZlibError(message: "truncated gzip/zlib stream") }
            } while rc != Z_STREAM_END
        }
        return total
    }

    /// A deflate stream fed piece by piece (for a body inflated chunk by chunk): the compressed
    /// bytes grow in memory, the input never is held whole.
    public final class Deflater {
        private let stream: UnsafeMutablePointer<z_stream>
        private var output: [UInt8] = []
        private let chunk = UnsafeMutablePointer<UInt8>.allocate(capacity: 1 << 16)
        private var ended = false

        /// Starts a stream at level 6 in `wrapper`.
        /// - Throws: `ZlibError` when zlib cannot start (out of memory).
        public init(_ wrapper: Wrapper) throws(ZlibError) {
            stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
            stream.initialize(to: z_stream())
            guard tilespool_deflate_init2(stream, 6, wrapper.windowBits) == Z_OK else {
                stream.deallocate(); chunk.deallocate()
                throw ZlibError(message: "deflateInit2 failed")
            }
        }

        deinit {
            deflateEnd(stream)
            stream.deallocate()
            chunk.deallocate()
        }

        /// Bytes of compressed output so far.
        public var compressedCount: Int { output.count }

        /// Compresses `bytes` (appended to the stream).
        /// - Throws: `ZlibError` when zlib fails, or after `finish()`.
        public func append(_ bytes: UnsafeBufferPointer<UInt8>) throws(ZlibError) {
            guard !ended else { throw ZlibError(message: "deflate: stream already finished") }
            try run(bytes, flush: Z_NO_FLUSH)
        }

        /// Ends the stream and returns every compressed byte.
        /// - Throws: `ZlibError` when zlib fails.
        public func finish() throws(ZlibError) -> [UInt8] {
            if !ended { try run(UnsafeBufferPointer(start: nil, count: 0), flush: Z_FINISH); ended = true }
            return output
        }

        private func run(_ bytes: UnsafeBufferPointer<UInt8>, flush: Int32) throws(ZlibError) {
            stream.pointee.next_in = UnsafeMutablePointer(mutating: bytes.baseAddress)
            stream.pointee.avail_in = uInt(bytes.count)
            while true {
                stream.pointee.next_out = chunk
                stream.pointee.avail_out = uInt(1 << 16)
                let rc = deflate(stream, flush)
                guard rc == Z_OK || rc == Z_STREAM_END || rc == Z_BUF_ERROR else { throw ZlibError(message: "deflate failed (\(rc))") }
                output.append(contentsOf: UnsafeBufferPointer(start: chunk, count: (1 << 16) - Int(stream.pointee.avail_out)))
                if flush == Z_FINISH { if rc == Z_STREAM_END { return } else { continue } }
                if stream.pointee.avail_in == 0 && stream.pointee.avail_out != 0 { return }
            }
        }
    }
}
