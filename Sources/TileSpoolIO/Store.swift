import CCrypto
import CLinux
import Foundation
import Glibc
import TileSpoolCore

/// SHA-256 through OpenSSL's libcrypto (FIPS 180-4; `EVP_Digest`,
/// https://www.openssl.org/docs/man3.0/man3/EVP_Digest.html).
public enum SHA256 {
    /// The SHA-256 of `bytes` as 64 lower-case hex digits.
    public static func hex(_ bytes: UnsafeRawBufferPointer) -> String {
        var md = [UInt8](repeating: 0, count: 32)
        var len: UInt32 = 0
        _ = EVP_Digest(bytes.baseAddress, bytes.count, &md, &len, EVP_sha256(), nil)
        return hexString(md)
    }

    /// The SHA-256 of `data` as hex.
    public static func hex(_ data: Data) -> String { data.withUnsafeBytes { hex($0) } }

    /// The SHA-256 of a file's bytes, read in 1 MiB blocks; nil when it cannot be read.
    public static func hex(file path: String) -> String? {
        guard let ctx = EVP_MD_CTX_new() else { return nil }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestInit_ex(ctx, EVP_sha256(), nil) == 1 else { return nil }
        let fd = Glibc.open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { Glibc.close(fd) }
        let buf = UnsafeMutableRawPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buf.deallocate() }
        while true {
            let n = Glibc.read(fd, buf, 1 << 20)
            if n < 0 { if errno == EINTR { continue }; return nil }
            if n == 0 { break }
            EVP_DigestUpdate(ctx, buf, n)
        }
        var md = [UInt8](repeating: 0, count: 32)
        var len: UInt32 = 0
        EVP_DigestFinal_ex(ctx, &md, &len)
        return hexString(md)
    }

    static let digits = Array("0123456789abcdef".utf8)
    static func hexString(_ md: [UInt8]) -> String {
        var out = [UInt8](repeating: 0, count: 64)
        for (i, b) in md.enumerated() { out[2 * i] = digits[Int(b >> 4)]; out[2 * i + 1] = digits[Int(b & 15)] }
        return String(decoding: out, as: UTF8.self)
    }
}

/// The content-addressed object store (layout documented in docs/contract.md):
///
///     <store>/objects/<first 2 hex digits>/<64 hex digits>   each file's SHA-256 is its name
///     <store>/tmp/                                           temp files on their way in
///     <store>/regions/<id>/                                  request.json, plan.json, manifest.tsv
///
/// `put` is the one path through which bytes enter `objects/`: hash, skip when present, write a temp
/// file under `tmp/`, rename into place. Durability is batched: `sync()` flushes the whole filesystem
/// (`syncfs`) and the object folders renamed into since the last call, and the caller records objects
/// in a manifest only after that (see docs/durability.md).
public final class ObjectStore: @unchecked Sendable {
    public let root: String
    public var objectsDir: String { root + "/objects" }
    public var tmpDir: String { root + "/tmp" }
    public var regionsDir: String { root + "/regions" }
    private var tmpCounter = 0
    private var knownFolders = Set<String>()
    /// Objects and bytes in `objects/` as far as this process knows: the last `measure` given to
    /// `setUsage` plus what `put` added since; nil until `setUsage` is called.
    public private(set) var usage: (objects: Int, bytes: Int)?
    /// Objects and bytes `put` has written since this store was opened.
    public private(set) var added: (objects: Int, bytes: Int) = (0, 0)
    /// The store quota (`--max-store-bytes`): `put` refuses a new object that would take `usage`
    /// past it. Only enforced once `usage` is known.
    public var maxBytes: Int?

    /// Opens (creating when needed) the store at `root`.
    /// - Throws: `SystemError` when the folders cannot be made.
    public init(root: String) throws(SystemError) {
        self.root = root
        try Files.makeDirectories(root + "/objects")
        try Files.makeDirectories(root + "/tmp")
        try Files.makeDirectories(root + "/regions")
    }

    /// The path of the object named `sha256`.
    public func objectPath(_ sha256: String) -> String {
        "\(objectsDir)/\(sha256.prefix(2))/\(sha256)"
    }

    /// True when the object exists.
    public func contains(_ sha256: String) -> Bool { Files.entryType(objectPath(sha256)) == .regular }

    /// Stores `bytes` under their SHA-256 unless an object of that name exists.
    /// - Returns: the hex SHA-256 and whether a new file was written.
    /// - Throws: `SystemError` from open/write/rename (ENOSPC and friends: `isStorageFailure`). On a
    ///   throw no file exists under the final name and the temp file is removed.
    @discardableResult
    public func put(_ bytes: UnsafeRawBufferPointer) throws(SystemError) -> (sha256: String, isNew: Bool) {
        let sha = SHA256.hex(bytes)
        let final = objectPath(sha)
        // Present already: refresh its mtime so a concurrent `gc` sees it as young (docs/gc.md).
        if utimensat(AT_FDCWD, final, nil, 0) == 0 { return (sha, false) }
        if let m = maxBytes, let u = usage, u.bytes + bytes.count > m {
            throw SystemError("quota", objectsDir, errno: EDQUOT)
        }
        let folder = "\(objectsDir)/\(sha.prefix(2))"
        if !knownFolders.contains(folder) {
            try Files.makeDirectories(folder)
            knownFolders.insert(folder)
        }
        tmpCounter += 1
        let tmp = "\(tmpDir)/\(getpid())-\(tmpCounter).tmp"
        let fd = try Files.open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode: 0o666)
        do throws(SystemError) {
            try Files.writeAll(fd, bytes, path: tmp)
        } catch {
            Glibc.close(fd); unlink(tmp); throw error
        }
        if Glibc.close(fd) != 0 { let e = SystemError("close", tmp); unlink(tmp); throw e }
        do throws(SystemError) { try Files.rename(tmp, final) } catch { unlink(tmp); throw error }
        added.objects += 1; added.bytes += bytes.count
        if let u = usage { usage = (u.objects + 1, u.bytes + bytes.count) }
        return (sha, true)
    }

    /// Sets `usage` from a `measure` that started when `added` was `addedAtStart`: what `put`
    /// wrote since then is added on top (an object written during the scan may be counted twice
    /// until the next measure: the usage errs on the high side, never under the quota).
    public func setUsage(_ measured: (objects: Int, bytes: Int), addedAtStart: (objects: Int, bytes: Int)) {
        usage = (measured.objects + added.objects - addedAtStart.objects, measured.bytes + added.bytes - addedAtStart.bytes)
    }

    /// Counts the object files under `<root>/objects/` and sums their sizes (`lstat` each; one
    /// pass over the folder, safe on any thread).
    public static func measure(root: String) -> (objects: Int, bytes: Int) {
        var objects = 0, bytes = 0
        let dir = root + "/objects"
        for sub in Files.list(dir) {
            for name in Files.list(dir + "/" + sub) {
                guard let n = Files.size(dir + "/" + sub + "/" + name) else { continue }
                objects += 1; bytes += n
            }
        }
        return (objects, bytes)
    }

    /// Stores `data`; see `put(_:)` for the UnsafeRawBufferPointer form.
    @discardableResult
    public func put(_ data: Data) throws(SystemError) -> (sha256: String, isNew: Bool) {
        let r: Result<(sha256: String, isNew: Bool), SystemError> = data.withUnsafeBytes { raw in
            do throws(SystemError) { return .success(try put(raw)) } catch { return .failure(error) }
        }
        return try r.get()
    }

    /// Makes every object written so far durable: `syncfs` on the store's filesystem (file data and
    /// the renames into object folders). Cost is one call per batch, not per object.
    public func sync() throws(SystemError) {
        try Files.syncFilesystem(root)
    }

    /// Puts back objects that an interrupted `gc` had moved aside (`tmp/gc-<sha256>`), and removes
    /// the aside copy where the object exists again.
    public func restoreObjectsSetAside() {
        for name in Files.list(tmpDir) where name.hasPrefix("gc-") {
            let sha = String(name.dropFirst(3))
            guard sha.utf8.count == 64, sha.utf8.allSatisfy(isHexDigit) else { continue }
            if contains(sha) { Files.remove(tmpDir + "/" + name); continue }
            try? Files.makeDirectories("\(objectsDir)/\(sha.prefix(2))")
            Glibc.rename(tmpDir + "/" + name, objectPath(sha))
        }
    }

    /// Reads an object's bytes (at most `limit`).
    public func read(_ sha256: String, limit: Int = 64 << 20) throws(SystemError) -> Data {
        try Files.readRegularFile(objectPath(sha256), limit: limit)
    }

    /// The folder of region `id`.
    public func regionDir(_ id: String) -> String { "\(regionsDir)/\(id)" }
}
