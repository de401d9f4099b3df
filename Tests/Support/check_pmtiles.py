#!/usr/bin/env python3
"""Reads a PMTiles archive with the PyPI `pmtiles` reader (protomaps' own) and compares every tile
with the file a tile server served from SERVED_DIR/{z}/{x}/{y}.EXT (gzip bodies decoded on both
sides). Prints one JSON object: the header's counts, zooms, compression and type, the metadata
keys, the number of tiles read, and the tiles that differ or are absent from SERVED_DIR.

usage: check_pmtiles.py ARCHIVE SERVED_DIR EXT [--sample N]
  --sample N  only look up N tiles spread over the archive with Reader.get (for huge archives)
exit: 0 when read (the caller judges the numbers), 2 on usage errors."""
import gzip, json, os, sys
from pmtiles.reader import Reader, MmapSource, all_tiles

def decoded(b):
    return gzip.decompress(b) if b[:2] == b"\x1f\x8b" else b

def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr); return 2
    archive, served, ext = sys.argv[1:4]
    with open(archive, "rb") as f:
        r = Reader(MmapSource(f))
        h = r.header()
        out = {k: (v.value if hasattr(v, "value") else v) for k, v in h.items()
               if k in ("addressed_tiles_count", "tile_entries_count", "tile_contents_count", "min_zoom", "max_zoom",
                        "tile_compression", "internal_compression", "tile_type", "clustered", "root_length", "leaf_directory_length")}
        out["metadata_keys"] = sorted(r.metadata().keys())
        out["vector_layers"] = len(r.metadata().get("vector_layers", []))
        read = 0; differ = []
        for (z, x, y), data in all_tiles(r.get_bytes):
            read += 1
            path = os.path.join(served, str(z), str(x), f"{y}.{ext}")
            if not os.path.exists(path):
                differ.append(f"{z}/{x}/{y} not served"); continue
            if decoded(data) != decoded(open(path, "rb").read()):
                differ.append(f"{z}/{x}/{y}")
        out["tiles_read"] = read
        out["differ"] = differ[:20]
        out["differ_count"] = len(differ)
    print(json.dumps(out))
    return 0

sys.exit(main())
