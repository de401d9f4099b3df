// zlib (https://zlib.net/manual.html): zlib (RFC 1950) and gzip (RFC 1952) streams for exports.
#ifndef TILESPOOL_CZLIB_SHIM_H
#define TILESPOOL_CZLIB_SHIM_H
#include <zlib.h>

// deflateInit2 and inflateInit2 are macros that pass the version and struct size: wrap them.
static inline int tilespool_deflate_init2(z_streamp s, int level, int windowBits) {
    return deflateInit2(s, level, Z_DEFLATED, windowBits, 8, Z_DEFAULT_STRATEGY);
}
static inline int tilespool_inflate_init2(z_streamp s, int windowBits) { return inflateInit2(s, windowBits); }
#endif
