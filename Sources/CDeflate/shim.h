// libdeflate (https://github.com/ebiggers/libdeflate, Debian's libdeflate-dev): whole-buffer
// DEFLATE (RFC 1951) in zlib (RFC 1950) and gzip (RFC 1952) wrappers, for the exports' tiles.
#ifndef TILESPOOL_CDEFLATE_SHIM_H
#define TILESPOOL_CDEFLATE_SHIM_H
#include <libdeflate.h>
#endif
