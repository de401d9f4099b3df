// SQLite 3 (https://sqlite.org/c3ref/intro.html), for the MBTiles and MapLibre offline exports.
#ifndef TILESPOOL_CSQLITE_SHIM_H
#define TILESPOOL_CSQLITE_SHIM_H
#include <sqlite3.h>

// SQLITE_TRANSIENT is a cast macro, which Swift does not import: binds copy their bytes through it.
static inline sqlite3_destructor_type tilespool_sqlite_transient(void) { return SQLITE_TRANSIENT; }
#endif
