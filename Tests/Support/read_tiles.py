#!/usr/bin/env python3
"""Reads every tile of an MBTiles file (Python's sqlite3 module, the `tiles` table or view) or a
PMTiles archive (the PyPI `pmtiles` reader, protomaps' own) and compares each with the file a tile
server served from SERVED_DIR/{z}/{x}/{y}.EXT (gzip bodies decoded on both sides). Prints one JSON
object:
  tiles       the z/x/y (XYZ rows) read, sorted, once each
  duplicates  how many z/x/y were read more than once
  differ      the tiles whose bytes differ from the served file (or were not served), at most 20
  differ_count
  sha256      {"z/x/y": sha256 of the decoded bytes} of every tile read
  meta        MBTiles: the metadata table; PMTiles: the header's zooms, bounds and center (degrees)
usage: read_tiles.py ARCHIVE SERVED_DIR EXT   (exit 0 when read; the caller judges the numbers)"""
import gzip, hashlib, json, os, sqlite3, sys

def decoded(b):
    return gzip.decompress(b) if b[:2] == b"\x1f\x8b" else b

def mbtiles(path):
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    meta = dict(db.execute("SELECT name, value FROM metadata"))
    tiles = []
    for z, x, row, data in db.execute("SELECT zoom_level, tile_column, tile_row, tile_data FROM tiles"):
        tiles.append(((z, x, (1 << z) - 1 - row), bytes(data)))
    return tiles, meta

def pmtiles(path):
    from pmtiles.reader import Reader, MmapSource, all_tiles
    f = open(path, "rb")
    r = Reader(MmapSource(f))
    h = r.header()
    meta = {"min_zoom": h["min_zoom"], "max_zoom": h["max_zoom"],
            "bounds": [h["min_lon_e7"] / 1e7, h["min_lat_e7"] / 1e7, h["max_lon_e7"] / 1e7, h["max_lat_e7"] / 1e7],
            "center": [h["center_lon_e7"] / 1e7, h["center_lat_e7"] / 1e7, h["center_zoom"]],
            "addressed_tiles_count": h["addressed_tiles_count"], "metadata": r.metadata()}
    return [((z, x, y), data) for (z, x, y), data in all_tiles(r.get_bytes)], meta

def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr); return 2
    archive, served, ext = sys.argv[1:4]
    tiles, meta = (pmtiles if archive.endswith(".pmtiles") else mbtiles)(archive)
    seen = {}
    dup = 0
    differ = []
    for (z, x, y), data in tiles:
        key = f"{z}/{x}/{y}"
        if key in seen: dup += 1
        body = decoded(data)
        seen[key] = hashlib.sha256(body).hexdigest()
        path = os.path.join(served, str(z), str(x), f"{y}.{ext}")
        if not os.path.exists(path):
            differ.append(f"{key} not served"); continue
        if body != decoded(open(path, "rb").read()):
            differ.append(key)
    print(json.dumps({"tiles": sorted(seen), "duplicates": dup, "differ": differ[:20], "differ_count": len(differ),
                      "sha256": seen, "meta": meta}))
    return 0

sys.exit(main())
