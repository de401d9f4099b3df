// A thin wrapper over SQLite's C API (https://sqlite.org/c3ref/intro.html): one connection, prepared
// statements, typed binds, errors thrown with SQLite's own message. Only what the exports need.
import CSQLite
import Foundation

/// A failed SQLite call: what was being done and SQLite's message (`sqlite3_errmsg`).
public struct SQLiteError: Error, Sendable, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}

/// One SQLite connection (`sqlite3_open_v2`), used from one thread.
final class SQLiteDatabase {
    private var db: OpaquePointer?
    let path: String

    /// Opens or creates the database file at `path`.
    /// - Throws: `SQLiteError` when it cannot be opened.
    init(path: String) throws(SQLiteError) {
        self.path = path
        let rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nil)
        if rc != SQLITE_OK {
            let m = db.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite3_close_v2(db)
            db = nil
            throw SQLiteError(message: "cannot open \(path): \(m)")
        }
    }

    deinit { close() }

    /// Closes the connection (idempotent). The corresponding C function is `sqlite3_close_v2`:
    /// with statements not yet finalized (they go when their objects do) the connection closes
    /// once the last one is; `sqlite3_close` would return SQLITE_BUSY and leave it open for
    /// ever (attack round 26: a daemon kept a descriptor on each MBTiles file it had exported,
    /// on a deleted one too, whose space was then never given back).
    func close() {
        if let db { sqlite3_close_v2(db) }
        db = nil
    }

    /// Runs one or more statements without results. The corresponding C function is `sqlite3_exec`.
    func exec(_ sql: String) throws(SQLiteError) {
        var msg: UnsafeMutablePointer<CChar>?
        if sqlite3_exec(db, sql, nil, nil, &msg) != SQLITE_OK {
            let m = msg.map { String(cString: $0) } ?? "error"
            sqlite3_free(msg)
            throw SQLiteError(message: "\(path): \(m)")
        }
    }

    /// Compiles one statement. The corresponding C function is `sqlite3_prepare_v2`.
    func prepare(_ sql: String) throws(SQLiteError) -> SQLiteStatement {
        var stmt: OpaquePointer?
        if sqlite3_prepare_v2(db, sql, -1, &stmt, nil) != SQLITE_OK {
            throw SQLiteError(message: "\(path): \(String(cString: sqlite3_errmsg(db)))")
        }
        return SQLiteStatement(stmt: stmt!, db: self)
    }

    var errorMessage: String { db.map { String(cString: sqlite3_errmsg($0)) } ?? "closed" }
}

/// A prepared statement: bind by 1-based index, `step`, read columns, `reset` for the next row.
final class SQLiteStatement {
    private let stmt: OpaquePointer
    private let db: SQLiteDatabase
    init(stmt: OpaquePointer, db: SQLiteDatabase) { self.stmt = stmt; self.db = db }
    deinit { sqlite3_finalize(stmt) }

    func bind(_ i: Int32, _ v: Int64) { sqlite3_bind_int64(stmt, i, v) }
    func bind(_ i: Int32, _ v: Int) { sqlite3_bind_int64(stmt, i, Int64(v)) }
    func bind(_ i: Int32, _ v: String?) {
        guard let v else { sqlite3_bind_null(stmt, i); return }
        sqlite3_bind_text(stmt, i, v, -1, tilespool_sqlite_transient())
    }
    /// Binds a BLOB (copied); nil binds NULL.
    func bind(_ i: Int32, blob: [UInt8]?) {
        guard let blob else { sqlite3_bind_null(stmt, i); return }
        blob.withUnsafeBytes { raw in
            // A zero-length blob needs a non-NULL pointer to stay a blob rather than NULL.
            _ = sqlite3_bind_blob64(stmt, i, raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1), sqlite3_uint64(raw.count),
                                    tilespool_sqlite_transient())
        }
    }

    /// Steps once: true when a row is ready, false when done.
    /// - Throws: `SQLiteError` on any other result (a constraint, a full disk: SQLITE_FULL).
    @discardableResult
    func step() throws(SQLiteError) -> Bool {
        let rc = sqlite3_step(stmt)
        if rc == SQLITE_ROW { return true }
        if rc == SQLITE_DONE { return false }
        throw SQLiteError(message: "\(db.path): \(db.errorMessage)")
    }

    /// Steps to the end, then resets and clears the binds for the next use.
    func run() throws(SQLiteError) {
        defer { reset() }
        while try step() {}
    }

    func reset() { sqlite3_reset(stmt); sqlite3_clear_bindings(stmt) }
    func int64(_ col: Int32) -> Int64 { sqlite3_column_int64(stmt, col) }
}
