#!/usr/bin/env python3
"""Writes a PMTiles v3 archive with the PyPI `pmtiles` writer (protomaps' own), for tests of
PMTiles sources (issue 31): every tile of zooms 0..MAXZOOM, gzip-compressed MVT-typed bodies of
pseudo-random bytes (seeded), runs of identical tiles (one body, many tiles: run-length entries),
and enough entries that the root directory needs leaf directories. Then, with the `pmtiles`
reader as the independent witness, reports what a region over it holds.

usage: make_pmtiles.py write ARCHIVE MAXZOOM SEED
         prints {"tiles", "entries", "contents", "leaf_directory_length", "root_length"}
       make_pmtiles.py dense ARCHIVE WEST SOUTH EAST NORTH MINZOOM MAXZOOM SEED [MAXBYTES [NOTPNG [MINBYTES]]]
         every tile of the box at those zooms, uncompressed PNG-typed bodies of MINBYTES-MAXBYTES
         (default 500-8000) pseudo-random bytes after the PNG signature (a dense raster area), or
         with NOTPNG k (0: none), every k-th tile (in tile ID order) after a GIF signature instead;
         prints the same as write
       make_pmtiles.py region ARCHIVE WEST SOUTH EAST NORTH MINZOOM MAXZOOM
         prints {"tiles": n, "tile_bytes": sum of stored lengths, "sha256": {"z/x/y": hex of the
         body with the tile compression undone}} for the tiles of the bounding box (Web Mercator
         cover, OSM slippy-map formulas) the archive holds, and "undecodable": ["z/x/y", ...]
         for those whose gzip body does not decompress (a damaged archive), if any, and
         "notpng": ["z/x/y", ...] for those of a PNG-typed archive that lack the PNG signature
exit: 0 when done, 2 on usage errors."""
import gzip, hashlib, json, math, random, sys, zlib
from pmtiles.tile import zxy_to_tileid, TileType, Compression
from pmtiles.writer import Writer
from pmtiles.reader import Reader, MmapSource, all_tiles


def write(path, maxzoom, seed):
    rng = random.Random(seed)
    tiles = []
    for z in range(maxzoom + 1):
        for x in range(1 << z):
            for y in range(1 << z):
                tiles.append((zxy_to_tileid(z, x, y), z, x, y))
    tiles.sort()
    ocean = gzip.compress(b"ocean" * 20, mtime=0)
    with open(path, "wb") as f:
        w = Writer(f)
        run = 0
        for tid, z, x, y in tiles:
            if run == 0 and rng.random() < 0.05:
                run = rng.randint(2, 40)
            if run > 0:
                run -= 1
                w.write_tile(tid, ocean)
            else:
                body = bytes(rng.getrandbits(8) for _ in range(rng.randint(20, 400)))
                w.write_tile(tid, gzip.compress(body, mtime=0))
        w.finalize({"tile_type": TileType.MVT, "tile_compression": Compression.GZIP,
                    "min_lon_e7": -1800000000, "min_lat_e7": -850000000,
                    "max_lon_e7": 1800000000, "max_lat_e7": 850000000,
                    "center_zoom": 0, "center_lon_e7": 0, "center_lat_e7": 0},
                   {"name": "make_pmtiles.py", "attribution": "make_pmtiles.py test data",
                    "vector_layers": [{"id": "noise", "fields": {"seed": "Number"}}], "tilestats": {"layerCount": 1}})
    with open(path, "rb") as f:
        h = Reader(MmapSource(f)).header()
    print(json.dumps({"tiles": h["addressed_tiles_count"], "entries": h["tile_entries_count"],
                      "contents": h["tile_contents_count"], "root_length": h["root_length"],
                      "leaf_directory_length": h["leaf_directory_length"]}))


def dense(path, w, s, e, n, minz, maxz, seed, maxbytes=8000, notpng=0, minbytes=500):
    rng = random.Random(seed)
    tiles = sorted((zxy_to_tileid(z, x, y), z, x, y) for z in range(minz, maxz + 1) for x, y in cover(w, s, e, n, z))
    with open(path, "wb") as f:
        wr = Writer(f)
        for k, (tid, z, x, y) in enumerate(tiles):
            signature = b"GIF89a\x00\x00" if notpng and k % notpng == notpng - 1 else b"\x89PNG\r\n\x1a\n"
            wr.write_tile(tid, signature + rng.randbytes(rng.randint(minbytes, maxbytes)))
        wr.finalize({"tile_type": TileType.PNG, "tile_compression": Compression.NONE,
                     "min_lon_e7": int(w * 1e7), "min_lat_e7": int(s * 1e7), "max_lon_e7": int(e * 1e7), "max_lat_e7": int(n * 1e7),
                     "center_zoom": minz, "center_lon_e7": 0, "center_lat_e7": 0}, {"name": "make_pmtiles.py dense"})
    with open(path, "rb") as f:
        h = Reader(MmapSource(f)).header()
    print(json.dumps({"tiles": h["addressed_tiles_count"], "entries": h["tile_entries_count"],
                      "contents": h["tile_contents_count"], "root_length": h["root_length"],
                      "leaf_directory_length": h["leaf_directory_length"]}))


def cover(w, s, e, n, z):
    count = 1 << z
    def tx(lon): return min(count - 1, max(0, int(math.floor((lon + 180) / 360 * count))))
    def ty(lat):
        r = math.radians(lat)
        return min(count - 1, max(0, int(math.floor((1 - math.log(math.tan(r) + 1 / math.cos(r)) / math.pi) / 2 * count))))
    for x in range(tx(w), tx(e) + 1):
        for y in range(ty(n), ty(s) + 1):
            yield x, y


def region(path, w, s, e, n, minz, maxz):
    out = {"tiles": 0, "tile_bytes": 0, "sha256": {}}
    wanted = {(z, x, y) for z in range(minz, maxz + 1) for x, y in cover(w, s, e, n, z)}
    with open(path, "rb") as f:
        source = MmapSource(f)
        header = Reader(source).header()
        gz = header["tile_compression"] == Compression.GZIP
        png = header["tile_type"] == TileType.PNG
        # The reader's own walk of every tile (one pass over the directories), kept to the region.
        for (z, x, y), data in all_tiles(source):
            if (z, x, y) not in wanted:
                continue
            out["tiles"] += 1
            out["tile_bytes"] += len(data)
            try:
                body = gzip.decompress(data) if gz else bytes(data)
            except (OSError, EOFError, zlib.error):
                out.setdefault("undecodable", []).append(f"{z}/{x}/{y}")
                continue
            out["sha256"][f"{z}/{x}/{y}"] = hashlib.sha256(body).hexdigest()
            if png and not body.startswith(b"\x89PNG\r\n\x1a\n"):
                out.setdefault("notpng", []).append(f"{z}/{x}/{y}")
    print(json.dumps(out))


def main():
    a = sys.argv[1:]
    if len(a) == 4 and a[0] == "write":
        write(a[1], int(a[2]), int(a[3])); return 0
    if len(a) in (9, 10, 11, 12) and a[0] == "dense":
        dense(a[1], *map(float, a[2:6]), int(a[6]), int(a[7]), int(a[8]), *map(int, a[9:])); return 0
    if len(a) == 8 and a[0] == "region":
        region(a[1], *map(float, a[2:6]), int(a[6]), int(a[7])); return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
