#!/usr/bin/python3
"""TileSpool benchmarks (GitHub issue 5). Run through `make bench` or `bash bench/run.sh`.

Phases (positional arguments; default: throughput real scale export refresh s3 pickup distinct pmtiles):
  throughput  TileSpool vs curl --parallel vs mapproxy-seed on a synthetic XYZ pyramid served by nginx
  real        the bright style over Liechtenstein z0-14 from ../shared/mapdata
  scale       a ~1,000,000-tile request against a 204 location; `tilespool plan` on ~10,000,000 tiles
  s3          TileSpool into a real Ceph RGW (Tests/Support/ceph.sh) vs curl --parallel --aws-sigv4 uploading the same bodies
  pickup      latency from a request's rename into requests/ to its status/<id>.state
  distinct    the scale region as two regions of a million distinct ~3 KB bodies (issue 30), BENCH_OLD_BIN beside
  pmtiles     the pyramid as one PMTiles archive, downloaded with range requests, beside curl
  profile     callgrind and perf on the daemon, throughput case (not in the default set)
  report [FILE]  print the Markdown tables of a results.json again

Environment: TILESPOOL_BIN (the release binary; run.sh sets it), TILESPOOL_MAPDATA (default
../shared/mapdata), BENCH_QUICK=1 (small sizes, one run each, for development), BENCH_RUNS=N,
BENCH_KEEP=1 (keep the run folders), BENCH_WORKDIR (where the run folders go, default bench/out),
BENCH_SETTLE (seconds, default 360: see wait_for_quiet_fs), BENCH_PROFILE_MAXZ (callgrind's max
zoom, default 13), BENCH_BASELINE_BIN (a second tilespool binary in the throughput alternation),
BENCH_NO_MAPPROXY=1 (throughput without mapproxy-seed). Python 3 standard library only. Results: docs/benchmarks.md.
"""
import gzip
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(HERE, "data")
OUTROOT = os.path.join(HERE, "out")
BIN = os.environ.get("TILESPOOL_BIN") or os.path.join(ROOT, ".build-bench/release/tilespool")
MAPDATA = os.path.abspath(os.environ.get("TILESPOOL_MAPDATA") or os.path.join(ROOT, "../shared/mapdata"))
QUICK = os.environ.get("BENCH_QUICK") == "1"
KEEP = os.environ.get("BENCH_KEEP") == "1"
RUNS = int(os.environ.get("BENCH_RUNS") or (1 if QUICK else 3))
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

# BENCH_BASELINE_BIN: another tilespool binary timed in the same alternation ("TileSpool-baseline");
# BENCH_NO_MAPPROXY=1 leaves mapproxy-seed out of the timed runs (both for A/B checks of a change).
BASELINE_BIN = os.environ.get("BENCH_BASELINE_BIN")
NO_MAPPROXY = os.environ.get("BENCH_NO_MAPPROXY") == "1"

# Parallel requests for every downloader.
N = 8
# Throughput: z8-14 around Liechtenstein, 20,984 tiles (the pyramid always has z8-14; BENCH_QUICK
# downloads z8-12 of it, 1,410 tiles).
TP_BOUNDS = [8.15, 46.27, 10.95, 48.06]
TP_MINZ, PYR_MAXZ = 8, 14
TP_MAXZ = 12 if QUICK else 14
PYRAMID_SEED = 20240505
# Real tile sizes drawn for the pyramid's bodies: the vector tiles and three raster sets.
SIZE_POOL_DIRS = ["tiles/liechtenstein", "raster/osm_carto", "raster/stamen_toner", "raster/node_mbtiles_plain_1"]
# Real data: the bright style over the Liechtenstein TileJSON's bounds, z0-14.
REAL_BOUNDS = [9.4717, 47.0484, 9.6357, 47.2706]
# Scale: 1,013,063 tiles (z8-17) answered 204; the plan case 10,096,310 tiles (z8-18).
SCALE_BOUNDS, SCALE_MINZ, SCALE_MAXZ = [6.9, 46.3, 9.9, 47.6], 8, (14 if QUICK else 17)
# The distinct phase (issue 30): the scale region again, as two regions (west and east halves), each
# tile a distinct body from nginx's /distinct/ location: a line naming its URI, then one of
# DISTINCT_POOL_SIZE real vector tiles (uncompressed MVT from ../shared/mapdata, those nearest
# DISTINCT_NEAR_BYTES), chosen by the row's last digit; about 3 KB, as real tiles compress.
DISTINCT_POOL_MBTILES = "tiles/liechtenstein.mbtiles"
DISTINCT_POOL_SIZE, DISTINCT_NEAR_BYTES = 10, 3000
DISTINCT_WEST = [6.9, 46.3, 8.4, 47.6]
DISTINCT_EAST = [8.4, 46.3, 9.9, 47.6]
# An earlier TileSpool (one file per object, before packs) to compare with: BENCH_OLD_BIN.
OLD_BIN = os.environ.get("BENCH_OLD_BIN")
PLAN_BOUNDS, PLAN_MINZ, PLAN_MAXZ = [5.9, 45.75, 10.55, 47.85], 8, 18
PICKUP_COUNT = 20 if QUICK else 200
# mapproxy's lock folders (tmpfs when there is one).
LOCK_ROOT = os.path.join("/dev/shm" if os.path.isdir("/dev/shm") else "/tmp", "tilespool-bench-locks")
# After deleting many files, wait this long before timing anything (see wait_for_quiet_fs).
SETTLE_SECONDS = float(os.environ.get("BENCH_SETTLE", "360"))
CLEANUP_STAMP = os.path.join(OUTROOT, ".cleanup-stamp")
# Where the run folders (spools, stores, curl's and mapproxy's outputs) go: bench/out by default;
# BENCH_WORKDIR=/dev/shm/x puts them on tmpfs, to see the downloaders without the filesystem.
WORKDIR = os.path.abspath(os.environ.get("BENCH_WORKDIR") or OUTROOT)


def fs_type(path):
    out = subprocess.run(["stat", "-f", "-c", "%T", path], capture_output=True, text=True)
    return out.stdout.strip()


# results.md/json, or results-tmpfs.md/json when the run folders are on tmpfs.
RESULTS = "results"
PICKUP_BOUNDS = [9.52, 47.14, 9.5201, 47.1401]  # one tile at z14


def log(msg):
    sys.stderr.write(time.strftime("%H:%M:%S ") + msg + "\n")
    sys.stderr.flush()


class BenchError(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# Tile math: the same formulas as Sources/TileSpoolCore/TileMath.swift (WebMercator.cover):
# x from floor((lon+180)/360*2^z) to ceil(...)-1, y likewise, half-open, clamped.

def tile_x(lon, z):
    return (lon + 180.0) / 360.0 * float(1 << z)


def tile_y(lat, z):
    m = 85.0511287798066
    lat = min(max(lat, -m), m)
    phi = lat * math.pi / 180.0
    return (1.0 - math.log(math.tan(phi) + 1.0 / math.cos(phi)) / math.pi) / 2.0 * float(1 << z)


def cover(bounds, z):
    """(minX, minY, maxX, maxY) inclusive at zoom z; bounds do not cross the antimeridian."""
    w, s, e, n = bounds
    assert w < e
    size = 1 << z
    clamp = lambda v: min(max(v, 0), size - 1)
    yt, yb = tile_y(n, z), tile_y(s, z)
    y0 = clamp(math.floor(yt))
    y1 = clamp(max(math.ceil(yb) - 1, math.floor(yt)))
    x0f, x1f = tile_x(w, z), tile_x(e, z)
    x0 = clamp(math.floor(x0f))
    x1 = clamp(max(math.ceil(x1f) - 1, math.floor(x0f)))
    return x0, y0, x1, y1


def rects(bounds, minz, maxz):
    return {z: cover(bounds, z) for z in range(minz, maxz + 1)}


def rect_count(r):
    return (r[2] - r[0] + 1) * (r[3] - r[1] + 1)


def tiles_of(rs):
    """Every tile in TileSpool's plan order: by zoom, then row-major."""
    for z in sorted(rs):
        x0, y0, x1, y1 = rs[z]
        for y in range(y0, y1 + 1):
            for x in range(x0, x1 + 1):
                yield z, x, y


def merc(lon, lat):
    r = 6378137.0
    return r * math.radians(lon), r * math.log(math.tan(math.pi / 4 + math.radians(lat) / 2))


# ---------------------------------------------------------------------------------------------
# Processes

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=10.0, proc=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise BenchError("process exited before listening on %d" % port)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.02)
    raise BenchError("nothing listens on port %d after %.0f s" % (port, timeout))


def proc_cpu(pid):
    """(user, sys) seconds of a live process, from /proc/<pid>/stat."""
    with open("/proc/%d/stat" % pid) as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[11]) / CLK_TCK, int(rest[12]) / CLK_TCK


def proc_status_kb(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def tree_rss_kb(root):
    """Sum of VmRSS over `root` and its descendants (scans /proc; no children files here)."""
    parents = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                parents[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            pass
    tree, frontier = {root}, [root]
    while frontier:
        p = frontier.pop()
        for c, pp in parents.items():
            if pp == p and c not in tree:
                tree.add(c)
                frontier.append(c)
    total = 0
    for p in tree:
        try:
            with open("/proc/%d/statm" % p) as f:
                total += int(f.read().split()[1]) * PAGE // 1024
        except OSError:
            pass
    return total


NGINX_PID = None


def cpu_snapshot():
    """(machine-wide busy CPU seconds from /proc/stat, nginx's CPU seconds)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    busy = (sum(v[:8]) - v[3] - v[4]) / CLK_TCK  # all but idle and iowait (guest time is inside user)
    ng = sum(proc_cpu(NGINX_PID)) if NGINX_PID else 0.0
    return busy, ng


def others_cpu(before, after, own_cpu):
    """CPU seconds the rest of the machine used during a run: busy time minus the downloader's
    and nginx's (other agents' builds and tests; the bench's own polling is in here too)."""
    return (after[0] - before[0]) - (after[1] - before[1]) - own_cpu, after[1] - before[1]


def run_measured(cmd, cwd, out_path, sample_tree=False, env=None):
    """Runs cmd to its end. Returns wall, user, sys (the process and its reaped children, from
    wait4), maxrss_kb (largest single process) and tree_kb (sampled sum over the process tree)."""
    out = open(out_path, "wb")
    snap0 = cpu_snapshot()
    e0 = time.time()
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env)
    res = {}

    def reap():
        _, st, ru = os.wait4(p.pid, 0)
        res["t1"] = time.perf_counter()
        res["e1"] = time.time()
        res["status"], res["ru"] = st, ru

    th = threading.Thread(target=reap)
    th.start()
    tree = 0
    while th.is_alive():
        if sample_tree:
            try:
                tree = max(tree, tree_rss_kb(p.pid))
            except OSError:
                pass
        th.join(0.1)
    snap1 = cpu_snapshot()
    p.returncode = os.waitstatus_to_exitcode(res["status"])
    out.close()
    ru = res["ru"]
    other, ng = others_cpu(snap0, snap1, ru.ru_utime + ru.ru_stime)
    if p.returncode != 0:
        raise BenchError("%s exited with %d; output in %s" % (cmd[0], p.returncode, out_path))
    return {"wall": res["t1"] - t0, "user": ru.ru_utime, "sys": ru.ru_stime, "cpu": ru.ru_utime + ru.ru_stime,
            "rss_kb": ru.ru_maxrss, "tree_kb": max(tree, ru.ru_maxrss), "epoch": (e0, res["e1"]),
            "other_cpu": other, "nginx_cpu": ng}


# ---------------------------------------------------------------------------------------------
# nginx: one process (master_process off), keep-alive on, access log only under /log/.

class Nginx:
    def __init__(self, workdir, pyramid):
        self.dir = os.path.join(workdir, "nginx")
        os.makedirs(self.dir, exist_ok=True)
        self.port = free_port()       # the pyramid, /log/ and /empty/
        self.port_real = free_port()  # ../shared/mapdata as a tile server
        self.access_log = os.path.join(self.dir, "access.log")
        d = self.dir
        conf = """
daemon off;
master_process off;
worker_processes 1;
pid "{d}/nginx.pid";
error_log "{d}/error.log" warn;
events {{ worker_connections 4096; }}
http {{
    types {{
        application/json        json;
        application/x-protobuf  pbf mvt;
        image/png               png;
        image/webp              webp;
        image/jpeg              jpg jpeg;
    }}
    default_type application/octet-stream;
    log_format bench '$request_uri $status $body_bytes_sent $msec';
    access_log off;
    client_body_temp_path "{d}/client_body_temp";
    proxy_temp_path "{d}/proxy_temp";
    fastcgi_temp_path "{d}/fastcgi_temp";
    uwsgi_temp_path "{d}/uwsgi_temp";
    scgi_temp_path "{d}/scgi_temp";
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 75s;
    keepalive_requests 1000000;
    server_tokens off;
    log_not_found off;
    gzip off;
    server {{
        listen 127.0.0.1:{port};
        root "{pyr}";
        location / {{ }}
        location /log/ {{
            alias "{pyr}/";
            access_log "{d}/access.log" bench;
        }}
        location /empty/ {{ return 204; }}
        location ~ "^/distinct/\\d+/\\d+/\\d*(\\d)\\.pbf$" {{
            default_type application/x-protobuf;
            addition_types *;
            add_before_body /distinct-name/;
            alias "{pool}/$1.pbf";
        }}
        location /distinct-name/ {{
            internal;
            return 200 "tile $request_uri\\n";
        }}
    }}
    server {{
        listen 127.0.0.1:{port_real};
        root "{mapdata}";
        access_log "{d}/real.log" bench;
        location = /styles/bright/liechtenstein.json {{
            alias "{mapdata}/styles/bright/style.local-template.json";
            default_type application/json;
            sub_filter_types application/json;
            sub_filter_once off;
            sub_filter "__BASE__" "http://127.0.0.1:$server_port";
            sub_filter "/tiles/monaco.tilejson.json" "/tiles/liechtenstein.tilejson.json";
        }}
        location ~ \\.json$ {{
            sub_filter '__BASE__' 'http://127.0.0.1:$server_port';
            sub_filter_once off;
            sub_filter_types application/json;
        }}
        location ~ ^/tiles/.*\\.pbf$ {{
            add_header Content-Encoding gzip;
        }}
    }}
}}
""".format(d=d, port=self.port, port_real=self.port_real, pyr=pyramid, mapdata=MAPDATA, pool=ensure_distinct_pool())
        self.conf = os.path.join(d, "nginx.conf")
        with open(self.conf, "w") as f:
            f.write(conf)
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        self.proc = subprocess.Popen([nginx, "-p", d + "/", "-c", self.conf, "-e", d + "/error.log"],
                                     stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "stderr.log"), "wb"))
        wait_port(self.port, proc=self.proc)
        wait_port(self.port_real, proc=self.proc)

    @property
    def base(self):
        return "http://127.0.0.1:%d" % self.port

    @property
    def base_real(self):
        return "http://127.0.0.1:%d" % self.port_real

    def clear_log(self, name="access.log"):
        open(os.path.join(self.dir, name), "w").close()

    def log_entries(self, name="access.log"):
        time.sleep(0.3)  # nginx writes a line when it has finished a request
        try:
            with open(os.path.join(self.dir, name)) as f:
                return [l.split(" ") for l in f.read().splitlines() if l]
        except FileNotFoundError:
            return []

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ---------------------------------------------------------------------------------------------
# The TileSpool daemon

class Daemon:
    def __init__(self, spool, store, args=(), wrapper=(), ready_timeout=30.0, binary=None, env=None):
        os.makedirs(spool, exist_ok=True)
        self.spool, self.store = spool, store
        self.log_path = os.path.join(os.path.dirname(spool), "daemon.log")
        self.log = open(self.log_path, "wb")
        cmd = list(wrapper) + [binary or BIN, "run", "--spool", spool, "--store", store] + list(args)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.pid = self.proc.pid
        deadline = time.monotonic() + ready_timeout
        while True:
            with open(self.log_path, "rb") as f:
                if b"watching " in f.read():  # the daemon's first log line (logfmt or json)
                    break
            if self.proc.poll() is not None:
                raise BenchError("the daemon exited at start; see %s" % self.log_path)
            if time.monotonic() > deadline:
                self.stop()
                raise BenchError("the daemon did not start; see %s" % self.log_path)
            time.sleep(0.01)

    def cpu(self):
        return proc_cpu(self.pid)

    def hwm_kb(self):
        return proc_status_kb(self.pid, "VmHWM")

    def rss_kb(self):
        return proc_status_kb(self.pid, "VmRSS")

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


def drop(spool, rid, request):
    """Writes requests/.<id>.json, then renames it to requests/<id>.json. Returns the time
    (perf_counter) taken just before the rename."""
    req = os.path.join(spool, "requests")
    tmp = os.path.join(req, "." + rid + ".json")
    with open(tmp, "w") as f:
        json.dump(request, f)
    t = time.perf_counter()
    os.rename(tmp, os.path.join(req, rid + ".json"))
    return t


def read_state(spool, rid):
    try:
        with open(os.path.join(spool, "status", rid + ".state")) as f:
            return f.read().strip()
    except FileNotFoundError:
        return None


def wait_state(spool, rid, target="completed", poll=0.002, timeout=600.0, on_poll=None):
    deadline = time.perf_counter() + timeout
    while True:
        s = read_state(spool, rid)
        now = time.perf_counter()
        if s == target:
            return now
        if s in ("failed", "failedStorage", "cancelled", "pausedNetwork"):
            status = open(os.path.join(spool, "status", rid + ".json")).read()
            raise BenchError("region %s is %s: %s" % (rid, s, status))
        if now > deadline:
            raise BenchError("region %s not %s after %.0f s (state %s)" % (rid, target, timeout, s))
        if on_poll:
            on_poll()
        time.sleep(poll)


def summarize_manifest(lines_iter):
    """Summary of manifest lines (kind sha256 bytes key url ...): line count, lines per kind,
    distinct objects and their bytes, missing resources, distinct (kind, key) pairs."""
    kinds, shas, total_bytes, lines, missing, keys = {}, set(), 0, 0, 0, set()
    for line in lines_iter:
        if not line.strip() or line.startswith("#"):
            continue
        kind, sha, nbytes, key, _url = line.rstrip("\n").split("\t", 4)
        lines += 1
        keys.add((kind, key))
        kinds[kind] = kinds.get(kind, 0) + 1
        if sha == "-":
            missing += 1
        else:
            shas.add(sha)
            total_bytes += int(nbytes)
    return {"lines": lines, "kinds": kinds, "objects": len(shas), "bytes": total_bytes,
            "missing": missing, "distinct_keys": len(keys)}


def read_manifest(store, rid):
    """Summary of <store>/regions/<id>/manifest.tsv (summarize_manifest)."""
    with open(os.path.join(store, "regions", rid, "manifest.tsv")) as f:
        return summarize_manifest(f)


def count_files(root, suffix=""):
    n, size = 0, 0
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            if f.endswith(suffix):
                n += 1
                size += os.lstat(os.path.join(dirpath, f)).st_size
    return n, size


def disk_usage(root):
    """Disk cost of a tree: bytes allocated (st_blocks * 512, directories included), payload bytes
    (st_size of regular files), regular files, directories (each an inode)."""
    blocks, size, files, dirs = 0, 0, 0, 0
    for dirpath, dnames, fnames in os.walk(root):
        st = os.lstat(dirpath)
        blocks += st.st_blocks * 512
        dirs += 1
        for f in fnames:
            st = os.lstat(os.path.join(dirpath, f))
            blocks += st.st_blocks * 512
            size += st.st_size
            files += 1
    return {"disk_bytes": blocks, "file_bytes": size, "files": files, "dirs": dirs}


def tilespool_plan(request, workdir, name):
    path = os.path.join(workdir, name + ".json")
    with open(path, "w") as f:
        json.dump(request, f)
    # --max-tiles: plan refuses what the daemon would refuse (default 10,000,000 tiles); the scale
    # phase plans more on purpose.
    out = subprocess.run([BIN, "plan", path, "--json", "--max-tiles", "100000000"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def check_plan_counts(plan, rs):
    by_zoom = plan["bySource"]["tiles0"]["byZoom"]
    mine = {str(z): rect_count(r) for z, r in rs.items()}
    if by_zoom != mine:
        raise BenchError("tilespool plan's per-zoom counts %s differ from bench.py's %s" % (by_zoom, mine))
    return plan["tiles"]


# ---------------------------------------------------------------------------------------------
# The synthetic pyramid

def size_pool():
    sizes = []
    pat = re.compile(r"/\d+/\d+/\d+\.(pbf|png|webp|jpg)$")
    for d in SIZE_POOL_DIRS:
        for dirpath, _dirs, files in os.walk(os.path.join(MAPDATA, d)):
            for f in files:
                p = os.path.join(dirpath, f)
                if pat.search(p):
                    sizes.append(os.path.getsize(p))
    if not sizes:
        raise BenchError("no tiles found under %s (TILESPOOL_MAPDATA)" % MAPDATA)
    return sorted(sizes)


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def ensure_distinct_pool():
    """DISTINCT_POOL_SIZE real vector tiles as uncompressed MVT files 0.pbf, 1.pbf, ... in
    DATA/distinct-pool-<size>-<bytes> (the tiles of DISTINCT_POOL_MBTILES nearest
    DISTINCT_NEAR_BYTES long: a folder per choice, so that changing one makes a new pool); the
    folder's path."""
    pool = os.path.join(DATA, "distinct-pool-%d-%d" % (DISTINCT_POOL_SIZE, DISTINCT_NEAR_BYTES))
    if os.path.exists(os.path.join(pool, "%d.pbf" % (DISTINCT_POOL_SIZE - 1))):
        return pool
    os.makedirs(pool, exist_ok=True)
    tiles = []
    db = sqlite3.connect("file:%s?mode=ro" % os.path.join(MAPDATA, DISTINCT_POOL_MBTILES), uri=True)
    for z, x, y, data in db.execute("SELECT zoom_level, tile_column, tile_row, tile_data FROM tiles"):
        data = bytes(data)
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        tiles.append((abs(len(data) - DISTINCT_NEAR_BYTES), z, x, y, data))
    db.close()
    if len(tiles) < DISTINCT_POOL_SIZE:
        raise BenchError("%s has %d tiles, fewer than %d" % (DISTINCT_POOL_MBTILES, len(tiles), DISTINCT_POOL_SIZE))
    for i, t in enumerate(sorted(tiles)[:DISTINCT_POOL_SIZE]):
        with open(os.path.join(pool, "%d.pbf" % i), "wb") as f:
            f.write(t[4])
    return pool


def ensure_pyramid():
    pyr = os.path.join(DATA, "pyramid")
    stamp_path = os.path.join(DATA, "pyramid.json")
    params = {"bounds": TP_BOUNDS, "minZoom": TP_MINZ, "maxZoom": PYR_MAXZ, "seed": PYRAMID_SEED,
              "sizePool": SIZE_POOL_DIRS, "version": 2}
    if os.path.exists(stamp_path):
        with open(stamp_path) as f:
            stamp = json.load(f)
        if stamp.get("params") == params:
            return pyr, stamp
    log("generating the pyramid in %s" % pyr)
    if os.path.exists(pyr):
        shutil.rmtree(pyr)
    pool = size_pool()
    rng = random.Random(PYRAMID_SEED)
    sizes = []
    rs = rects(TP_BOUNDS, TP_MINZ, PYR_MAXZ)
    made_dirs = set()
    for z, x, y in tiles_of(rs):
        size = rng.choice(pool)
        d = os.path.join(pyr, str(z), str(x))
        if d not in made_dirs:
            os.makedirs(d, exist_ok=True)
            made_dirs.add(d)
        # The PNG signature (the daemon refuses a .png body without it, TileBody.swift), then 8
        # bytes of the tile's own coordinates: bodies stay distinct even when short.
        body = PNG_SIGNATURE + (z << 48 | x << 24 | y).to_bytes(8, "big") + rng.randbytes(max(size - 16, 0))
        with open(os.path.join(d, "%d.png" % y), "wb") as f:
            f.write(body[:max(size, 16)])
        sizes.append(max(size, 16))
    stamp = {"params": params, "tiles": len(sizes), "bytes": sum(sizes), "meanBytes": statistics.mean(sizes),
             "medianBytes": statistics.median(sizes), "maxBytes": max(sizes), "poolTiles": len(pool),
             "byZoom": {str(z): rect_count(r) for z, r in rs.items()}}
    with open(stamp_path, "w") as f:
        json.dump(stamp, f, indent=1)
    return pyr, stamp


# ---------------------------------------------------------------------------------------------
# Phase 1: throughput

MAPPROXY_YAML = """
services:
  demo:
sources:
  bench_src:
    type: tile
    url: {base}/%(z)s/%(x)s/%(y)s.png
    grid: bench_grid
caches:
  bench_cache:
    grids: [bench_grid]
    sources: [bench_src]
    format: image/png
    request_format: image/png
    meta_size: [1, 1]
    meta_buffer: 0
    minimize_meta_requests: false
    bulk_meta_tiles: false
    link_single_color_images: false
    upscale_tiles: 0
    downscale_tiles: 0
    cache:
      type: file
      directory_layout: tms
      directory: {out}/cache
grids:
  bench_grid:
    base: GLOBAL_WEBMERCATOR
    origin: nw
globals:
  cache:
    base_dir: {out}/cache_data
    lock_dir: {locks}/locks
    tile_lock_dir: {locks}/tile_locks
"""

SEED_YAML = """
seeds:
  bench:
    caches: [bench_cache]
    coverages: [bench_cov]
    levels:
      from: {minz}
      to: {maxz}
coverages:
  bench_cov:
    bbox: [{minx:.3f}, {miny:.3f}, {maxx:.3f}, {maxy:.3f}]
    srs: 'EPSG:3857'
"""


def mapproxy_files(run_dir, base, bounds, minz, maxz):
    """mapproxy.yaml and seed.yaml for one run: the same bounds as the TileSpool request, in
    EPSG:3857 (not on tile edges, so every level's tiles are the half-open cover)."""
    os.makedirs(run_dir, exist_ok=True)
    w, s, e, n = bounds
    minx, miny = merc(w, s)
    maxx, maxy = merc(e, n)
    mp = os.path.join(run_dir, "mapproxy.yaml")
    seed = os.path.join(run_dir, "seed.yaml")
    # mapproxy creates and deletes one lock file per tile. On an ext4 without a journal (this
    # machine's root) every deleted inode slows file creation for 60-300 s (ext4's
    # recently_deleted()), which would tax the next downloader: the locks go to tmpfs.
    locks = os.path.join(LOCK_ROOT, os.path.basename(os.path.dirname(run_dir)) + "-" + os.path.basename(run_dir))
    with open(mp, "w") as f:
        f.write(MAPPROXY_YAML.format(base=base, out=run_dir, locks=locks))
    with open(seed, "w") as f:
        f.write(SEED_YAML.format(minz=minz, maxz=maxz, minx=minx, miny=miny, maxx=maxx, maxy=maxy))
    return mp, seed


def mapproxy_cmd(mp, seed, extra=()):
    # Debian's mapproxy runs under /usr/bin/python3 (another python3 on PATH may not import it).
    return ["/usr/bin/python3", "/usr/bin/mapproxy-seed", "-f", mp, "-s", seed, "-c", str(N), "--seed", "ALL"] + list(extra)


def write_curl_config(path, base, rs, remote_time=False):
    with open(path, "w") as f:
        f.write("create-dirs\n" + ("remote-time\n" if remote_time else ""))
        for z, x, y in tiles_of(rs):
            f.write('url = "%s/%d/%d/%d.png"\noutput = "%d/%d/%d.png"\n' % (base, z, x, y, z, x, y))


def run_tilespool_tiles(run_dir, base, bounds, minz, maxz, expect, args=(), timeout=600.0, rss_timeline=False, objects=None, binary=None,
                        store=None, env=None, manifest=None, server_counters=None):
    """One timed download (drop to `completed`). By default into <run_dir>/store; with `store`
    (e.g. s3://BUCKET), `env` for the daemon, `manifest` (a function returning read_manifest's
    summary) and `server_counters` (a function returning counters of the store's server, by name,
    e.g. its processes' CPU seconds; sampled before the drop and after `completed`, the
    differences returned as "server")."""
    spool = os.path.join(run_dir, "spool")
    on_disk = store is None
    store = store or os.path.join(run_dir, "store")
    d = Daemon(spool, store, args, binary=binary, env=env)
    try:
        req = {"tiles": [base + "/{z}/{x}/{y}.png"], "bounds": bounds, "minZoom": minz, "maxZoom": maxz}
        if base.endswith("/empty"):
            req["allowEmpty"] = True  # every tile a 204 on purpose (a region of only empty tiles fails otherwise)
        os.sync()
        srv0 = server_counters() if server_counters else {}
        snap0 = cpu_snapshot()
        u0, s0 = d.cpu()
        timeline = []
        last = [0.0]

        def sample():
            now = time.perf_counter()
            if now - last[0] >= 1.0:
                last[0] = now
                timeline.append((now, d.rss_kb()))

        e0 = time.time()
        t0 = drop(spool, "bench", req)
        t1 = wait_state(spool, "bench", "completed", timeout=timeout, on_poll=sample if rss_timeline else None)
        e1 = time.time()
        u1, s1 = d.cpu()
        snap1 = cpu_snapshot()
        srv1 = server_counters() if server_counters else {}
        hwm = d.hwm_kb()
    finally:
        rc = d.stop()
    if rc != 0:
        raise BenchError("the daemon exited with %s; see %s" % (rc, d.log_path))
    m = manifest() if manifest else read_manifest(store, "bench")
    if m["lines"] != expect or m["distinct_keys"] != expect:
        raise BenchError("TileSpool manifest has %d lines (%d distinct), expected %d" % (m["lines"], m["distinct_keys"], expect))
    if objects is not None and m["objects"] != objects:
        raise BenchError("TileSpool manifest names %d objects, expected %d distinct bodies" % (m["objects"], objects))
    wall = t1 - t0
    other, ng = others_cpu(snap0, snap1, (u1 - u0) + (s1 - s0))
    disk = None
    if on_disk:
        disk = disk_usage(store)
        disk["payload"] = m["bytes"]
    srv = {k: srv1[k] - srv0[k] for k in srv0}
    return {"disk": disk, "server": srv, "wall": wall, "user": u1 - u0, "sys": s1 - s0, "cpu": (u1 - u0) + (s1 - s0), "rss_kb": hwm,
            "other_cpu": other, "nginx_cpu": ng,
            "tree_kb": hwm, "manifest": m, "timeline": [(t - t0, kb) for t, kb in timeline], "epoch": (e0, e1)}


def run_curl(run_dir, cfg, expect):
    os.makedirs(run_dir, exist_ok=True)
    os.sync()
    r = run_measured(["curl", "--parallel", "--parallel-max", str(N), "--parallel-immediate", "--silent", "-K", cfg],
                     cwd=run_dir, out_path=run_dir + ".log")
    n, payload = count_files(run_dir, ".png")
    if n != expect:
        raise BenchError("curl wrote %d files, expected %d (%s)" % (n, expect, run_dir))
    r["disk"] = disk_usage(run_dir)
    r["disk"]["payload"] = payload
    return r


def run_mapproxy(run_dir, base, bounds, minz, maxz, expect):
    mp, seed = mapproxy_files(run_dir, base, bounds, minz, maxz)
    os.sync()
    r = run_measured(mapproxy_cmd(mp, seed, ["-q"]), cwd=run_dir, out_path=os.path.join(run_dir, "seed.log"), sample_tree=True)
    n, payload = count_files(os.path.join(run_dir, "cache"), ".png")
    if n != expect:
        raise BenchError("mapproxy-seed wrote %d tiles, expected %d (%s)" % (n, expect, run_dir))
    r["disk"] = disk_usage(os.path.join(run_dir, "cache"))
    r["disk"]["payload"] = payload
    return r


def mapproxy_dry_count(run_dir, base, bounds, minz, maxz):
    mp, seed = mapproxy_files(run_dir, base, bounds, minz, maxz)
    out = subprocess.run(mapproxy_cmd(mp, seed, ["-n"]), capture_output=True, text=True, cwd=run_dir)
    text = out.stdout + out.stderr
    m = re.findall(r"(\d+) tiles", text)  # mapproxy-seed -n: "[...] 100.00% ... (N tiles)"
    return int(m[-1]) if m else None, text


def phase_throughput(out, nginx, results):
    pyr, stamp = ensure_pyramid()
    rs = rects(TP_BOUNDS, TP_MINZ, TP_MAXZ)
    expect = sum(rect_count(r) for r in rs.values())
    base = nginx.base
    plan = tilespool_plan({"id": "tp", "tiles": [base + "/{z}/{x}/{y}.png"], "bounds": TP_BOUNDS,
                           "minZoom": TP_MINZ, "maxZoom": TP_MAXZ}, out, "tp-plan")
    if check_plan_counts(plan, rs) != expect:
        raise BenchError("plan tile count mismatch")
    log("throughput: %d tiles z%d-%d, tilespool plan agrees per zoom" % (expect, TP_MINZ, TP_MAXZ))
    cfg = os.path.join(out, "curl.cfg")
    write_curl_config(cfg, base, rs)
    cfg_log = os.path.join(out, "curl-log.cfg")
    write_curl_config(cfg_log, base + "/log", rs)

    # Check runs (not timed; they also warm nginx and the page cache): every downloader fetches
    # every tile exactly once, per nginx's access log.
    dry, text = mapproxy_dry_count(os.path.join(out, "tp-mapproxy-dry"), base, TP_BOUNDS, TP_MINZ, TP_MAXZ)
    if dry != expect:
        raise BenchError("mapproxy-seed -n counts %s tiles, expected %d:\n%s" % (dry, expect, text[-2000:]))
    checks = {}
    for name, fn in [("TileSpool", lambda d: run_tilespool_tiles(d, base + "/log", TP_BOUNDS, TP_MINZ, TP_MAXZ, expect, tilespool_args(), objects=expect)),
                     ("curl", lambda d: run_curl(d, cfg_log, expect)),
                     ("mapproxy-seed", lambda d: run_mapproxy(d, base + "/log", TP_BOUNDS, TP_MINZ, TP_MAXZ, expect))][:2 if NO_MAPPROXY else 3]:
        nginx.clear_log()
        r = fn(os.path.join(out, "tp-check-" + name))
        entries = nginx.log_entries()
        uris = [e[0] for e in entries]
        ok = [e for e in entries if len(e) >= 2 and e[1] == "200"]
        # When nginx served the first and the last tile, from the start (drop or exec) and to the end.
        stamps = sorted(float(e[3]) for e in entries if len(e) >= 4)
        e0, e1 = r["epoch"]
        checks[name] = {"requests": len(uris), "distinct": len(set(uris)), "ok": len(ok), "wall": r["wall"],
                        "first": stamps[0] - e0, "last": stamps[-1] - e0, "tail": e1 - stamps[-1]}
        log("check %-13s requests %d, distinct %d, 200s %d (tiles %d); wall %.2f s: first tile served at %.3f s, last at %.3f s, end %.3f s after it" % (
            name, len(uris), len(set(uris)), len(ok), expect, r["wall"], stamps[0] - e0, stamps[-1] - e0, e1 - stamps[-1]))
        if len(set(uris)) != expect or len(ok) < expect:
            raise BenchError("%s check run: nginx saw %d distinct URIs, %d 200s; expected %d" % (name, len(set(uris)), len(ok), expect))

    runs = {"TileSpool": [], "curl": [], "mapproxy-seed": []}
    if BASELINE_BIN:  # A/B of a change: a second TileSpool binary, in the same alternation
        runs = {"TileSpool": [], "TileSpool-baseline": [], "curl": [], "mapproxy-seed": []}
    if NO_MAPPROXY:
        del runs["mapproxy-seed"]
    for i in range(RUNS):
        for name in runs:
            d = os.path.join(out, "tp-%s-%d" % (name, i))
            if name.startswith("TileSpool"):
                r = run_tilespool_tiles(d, base, TP_BOUNDS, TP_MINZ, TP_MAXZ, expect, tilespool_args(), objects=expect,
                                        binary=BASELINE_BIN if name == "TileSpool-baseline" else None)
            elif name == "curl":
                r = run_curl(d, cfg, expect)
            else:
                r = run_mapproxy(d, base, TP_BOUNDS, TP_MINZ, TP_MAXZ, expect)
            r["tiles_s"] = expect / r["wall"]
            runs[name].append(r)
            dk = r.get("disk")
            log("run %d %-13s wall %.2f s  %6.0f tiles/s  cpu %.2f s (user %.2f sys %.2f)  rss %.1f MiB  tree %.1f MiB  nginx %.2f s  others %.2f s%s" % (
                i + 1, name, r["wall"], r["tiles_s"], r["cpu"], r["user"], r["sys"], r["rss_kb"] / 1024, r["tree_kb"] / 1024,
                r["nginx_cpu"], r["other_cpu"],
                "  disk/payload %.2f  inodes/tile %.3f" % (dk["disk_bytes"] / dk["payload"], (dk["files"] + dk["dirs"]) / expect) if dk else ""))
    results["throughput"] = {"tiles": expect, "zooms": [TP_MINZ, TP_MAXZ], "bounds": TP_BOUNDS, "pyramid": stamp,
                             "checks": checks, "runs": {k: [strip(r) for r in v] for k, v in runs.items()}}


def tilespool_args():
    return ["--max-requests-per-region", str(N), "--max-connections-per-host", str(N)]


def strip(r):
    return {k: v for k, v in r.items() if k not in ("timeline",)}


# ---------------------------------------------------------------------------------------------
# Phase 2: real data

def phase_real(out, nginx, results):
    style = nginx.base_real + "/styles/bright/liechtenstein.json"
    req = {"style": style, "bounds": REAL_BOUNDS, "minZoom": 0, "maxZoom": 14}
    plan = tilespool_plan(dict(req, id="real"), out, "real-plan")
    expect = plan["resources"]
    log("real: bright over Liechtenstein z0-14, plan %d resources (%s)" % (expect, plan["byKind"]))
    runs = []
    for i in range(RUNS):
        run_dir = os.path.join(out, "real-%d" % i)
        spool, store = os.path.join(run_dir, "spool"), os.path.join(run_dir, "store")
        d = Daemon(spool, store, tilespool_args())
        try:
            nginx.clear_log("real.log")
            os.sync()
            u0, s0 = d.cpu()
            e0 = time.time()
            t0 = drop(spool, "real", req)
            t1 = wait_state(spool, "real", "completed", timeout=300)
            u1, s1 = d.cpu()
            hwm = d.hwm_kb()
        finally:
            d.stop()
        entries = nginx.log_entries("real.log")
        stamps = sorted(float(e[3]) for e in entries if len(e) >= 4)
        m = read_manifest(store, "real")
        if m["lines"] != expect:
            raise BenchError("real: manifest has %d lines, plan %d" % (m["lines"], expect))
        files, size = count_files(os.path.join(store, "packs"))  # pack files (objects are packed)
        r = {"wall": t1 - t0, "cpu": (u1 - u0) + (s1 - s0), "rss_kb": hwm, "manifest": m,
             "object_files": files, "object_bytes": size, "requests": len(entries),
             "last_served": stamps[-1] - e0 if stamps else None}
        r["resources_s"] = m["lines"] / r["wall"]
        runs.append(r)
        log("real run %d: wall %.2f s, %d resources (%.0f/s), %d pack files (%.1f MB), manifest bytes %.1f MB, missing %d; "
            "nginx: %d requests, the last served %.3f s after the drop" % (
            i + 1, r["wall"], m["lines"], r["resources_s"], files, size / 1e6, m["bytes"] / 1e6, m["missing"],
            len(entries), r["last_served"] or -1))
    results["real"] = {"plan": plan, "runs": runs}


# ---------------------------------------------------------------------------------------------
# Phase 3: scale

def time_v(cmd):
    """Runs cmd under /usr/bin/time -v: wall (measured here, finer than time's 10 ms), user, sys, peak RSS."""
    t0 = time.perf_counter()
    out = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True)
    t1 = time.perf_counter()
    if out.returncode != 0:
        raise BenchError("%s failed: %s" % (cmd, out.stderr[-2000:]))
    def field(name):
        m = re.search(re.escape(name) + r": (.*)", out.stderr)
        return m.group(1).strip() if m else None
    return {"wall": t1 - t0, "user": float(field("User time (seconds)")), "sys": float(field("System time (seconds)")),
            "rss_kb": int(field("Maximum resident set size (kbytes)")), "stdout": out.stdout}


def phase_scale(out, nginx, results):
    base = nginx.base + "/empty"
    rs = rects(SCALE_BOUNDS, SCALE_MINZ, SCALE_MAXZ)
    expect = sum(rect_count(r) for r in rs.values())
    plan = tilespool_plan({"id": "scale", "tiles": [base + "/{z}/{x}/{y}.png"], "bounds": SCALE_BOUNDS,
                           "minZoom": SCALE_MINZ, "maxZoom": SCALE_MAXZ}, out, "scale-plan")
    check_plan_counts(plan, rs)
    log("scale: %d tiles z%d-%d answered 204" % (expect, SCALE_MINZ, SCALE_MAXZ))
    r = run_tilespool_tiles(os.path.join(out, "scale"), base, SCALE_BOUNDS, SCALE_MINZ, SCALE_MAXZ, expect,
                            tilespool_args() + ["--max-tiles", "2000000"], timeout=3600, rss_timeline=True)
    r["tiles_s"] = expect / r["wall"]
    log("scale: wall %.1f s, %.0f tiles/s, cpu %.1f s, peak RSS %.1f MiB, nginx %.1f s, others %.1f s" % (
        r["wall"], r["tiles_s"], r["cpu"], r["rss_kb"] / 1024, r["nginx_cpu"], r["other_cpu"]))
    # The plan command on ~10M tiles.
    preq = {"id": "plan10m", "tiles": [base + "/{z}/{x}/{y}.png"], "bounds": PLAN_BOUNDS,
            "minZoom": PLAN_MINZ, "maxZoom": PLAN_MAXZ}
    path = os.path.join(out, "plan10m.json")
    with open(path, "w") as f:
        json.dump(preq, f)
    prs = rects(PLAN_BOUNDS, PLAN_MINZ, PLAN_MAXZ)
    pexpect = sum(rect_count(x) for x in prs.values())
    pruns = []
    for _ in range(RUNS):
        p = time_v([BIN, "plan", path, "--json", "--max-tiles", "100000000"])
        doc = json.loads(p.pop("stdout"))
        check_plan_counts(doc, prs)
        if doc["tiles"] != pexpect:
            raise BenchError("plan10m: %d tiles, expected %d" % (doc["tiles"], pexpect))
        pruns.append(p)
        log("plan %d tiles: wall %.3f s, peak RSS %.1f MiB" % (pexpect, p["wall"], p["rss_kb"] / 1024))
    results["scale"] = {"tiles": expect, "zooms": [SCALE_MINZ, SCALE_MAXZ], "bounds": SCALE_BOUNDS, "run": r,
                        "plan": {"tiles": pexpect, "zooms": [PLAN_MINZ, PLAN_MAXZ], "bounds": PLAN_BOUNDS, "runs": pruns}}

# ---------------------------------------------------------------------------------------------
# Phase: a PMTiles archive as a source (issue 31)

PMTILES_WRITER = r"""
import os, sys
from pmtiles.tile import zxy_to_tileid, TileType, Compression
from pmtiles.writer import Writer
pyr, path, w, s, e, n = sys.argv[1], sys.argv[2], *map(float, sys.argv[3:7])
tiles = []
for z in os.listdir(pyr):
    if not z.isdigit():
        continue
    for x in os.listdir(os.path.join(pyr, z)):
        for name in os.listdir(os.path.join(pyr, z, x)):
            y = name.split(".")[0]
            tiles.append((zxy_to_tileid(int(z), int(x), int(y)), os.path.join(pyr, z, x, name)))
tiles.sort()
with open(path, "wb") as f:
    wr = Writer(f)
    for tid, p in tiles:
        with open(p, "rb") as t:
            wr.write_tile(tid, t.read())
    wr.finalize({"tile_type": TileType.PNG, "tile_compression": Compression.NONE,
                 "min_lon_e7": int(w * 1e7), "min_lat_e7": int(s * 1e7), "max_lon_e7": int(e * 1e7), "max_lat_e7": int(n * 1e7),
                 "center_zoom": 8, "center_lon_e7": 0, "center_lat_e7": 0}, {"name": "bench pyramid"})
print(len(tiles))
"""


def phase_pmtiles(out, nginx, results):
    """Issue 31's wall-time targets: the throughput pyramid (TP_BOUNDS, z8-PYR_MAXZ) as one
    PMTiles archive, written by the PyPI pmtiles writer, downloaded by TileSpool with range
    requests; beside curl fetching as many bytes as one file, and curl fetching the same tiles
    one request each (8 in parallel), from the same nginx; RUNS runs each, alternating, medians.
    The polite figure (one request per tile at the default 10 requests a second per remote host)
    is computed, not run."""
    pyr, stamp = ensure_pyramid()
    archive = os.path.join(pyr, "bench.pmtiles")
    py = os.path.join(ROOT, ".build/py/bin/python")
    if not os.path.exists(archive):
        subprocess.run([py, "-c", PMTILES_WRITER, pyr, archive] + [str(v) for v in TP_BOUNDS], check=True, stdout=subprocess.DEVNULL)
    url = nginx.base + "/log/bench.pmtiles"
    rs = rects(TP_BOUNDS, TP_MINZ, PYR_MAXZ)
    expect = sum(rect_count(r) for r in rs.values())
    cfg = os.path.join(out, "pmtiles-curl-tiles.cfg")
    write_curl_config(cfg, nginx.base, rs)
    runs = {"TileSpool": [], "curl bytes": [], "curl per tile": []}
    for k in range(RUNS):
        run_dir = os.path.join(out, "pmtiles-%d" % k)
        spool, store = os.path.join(run_dir, "spool"), os.path.join(run_dir, "store")
        nginx.clear_log()
        d = Daemon(spool, store, tilespool_args())
        try:
            t0 = drop(spool, "pm", {"tiles": ["pmtiles://" + url], "bounds": TP_BOUNDS, "minZoom": TP_MINZ, "maxZoom": PYR_MAXZ})
            wait_state(spool, "pm", "completed", timeout=600)
            wall = time.perf_counter() - t0
        finally:
            d.stop()
        m = read_manifest(store, "pm")
        if m["lines"] != expect:
            raise BenchError("pmtiles: the manifest has %d lines, expected %d" % (m["lines"], expect))
        asked = [e for e in nginx.log_entries() if e[0].startswith("/log/bench.pmtiles")]
        got = sum(int(e[2]) for e in asked)
        with open(os.path.join(spool, "status", "pm.json")) as f:
            tile_bytes = json.load(f)["progress"].get("tileBytesExpected", 0)
        runs["TileSpool"].append({"wall": wall, "requests": len(asked), "bytes": got, "tile_bytes": tile_bytes})
        log("pmtiles: TileSpool %d tiles in %.3f s, %d requests (%d bytes, %.4fx the tile bytes)" % (expect, wall, len(asked), got, got / max(1, tile_bytes)))
        # curl: as many bytes as TileSpool asked, as one file, from the same nginx.
        t0 = time.perf_counter()
        subprocess.run(["curl", "-s", "-r", "0-%d" % (got - 1), "-o", os.path.join(run_dir, "bytes.bin"), url], check=True)
        runs["curl bytes"].append({"wall": time.perf_counter() - t0, "bytes": got})
        # The same, made durable as TileSpool makes a tile durable before it counts it: curl, then
        # fsync of the file (coreutils `sync FILE`). A reference beside the target, not the target.
        t0 = time.perf_counter()
        durable = os.path.join(run_dir, "bytes-synced.bin")
        subprocess.run(["curl", "-s", "-r", "0-%d" % (got - 1), "-o", durable, url], check=True)
        subprocess.run(["sync", durable], check=True)
        runs.setdefault("curl bytes + fsync", []).append({"wall": time.perf_counter() - t0, "bytes": got})
        r = run_curl(os.path.join(run_dir, "tiles"), cfg, expect)
        runs["curl per tile"].append({"wall": r["wall"]})
        log("pmtiles: curl %d bytes as one file %.3f s (%.3f s with its fsync); curl %d tiles one request each %.3f s" % (
            got, runs["curl bytes"][-1]["wall"], runs["curl bytes + fsync"][-1]["wall"], expect, r["wall"]))
        shutil.rmtree(run_dir, ignore_errors=True)
    results["pmtiles"] = {"tiles": expect, "runs": runs, "polite_seconds": expect / 10.0}

# ---------------------------------------------------------------------------------------------
# Phase: a million distinct bodies (issue 30)

def distinct_objects(store, rids):
    """{sha256: (bytes, set of region ids)} over the regions' manifests."""
    objs = {}
    for rid in rids:
        with open(os.path.join(store, "regions", rid, "manifest.tsv")) as f:
            for line in f:
                if line.startswith("#") or not line.strip():
                    continue
                _kind, sha, nbytes, _rest = line.split("\t", 3)
                if sha == "-":
                    continue
                if sha in objs:
                    objs[sha][1].add(rid)
                else:
                    objs[sha] = (int(nbytes), {rid})
    return objs


def distinct_run(run_dir, nginx, binary, full):
    """Downloads the west and east halves of the scale region from /distinct/ (every tile its own
    body) with `binary` into a disk store, then: disk use and inodes against the payload; the
    exports of the west region to MBTiles and PMTiles; with `full` also `verify`, and the east
    region deleted and `gc --grace 0` (bytes given back against the east-only objects' bytes)."""
    spool, store = os.path.join(run_dir, "spool"), os.path.join(run_dir, "store")
    base = nginx.base + "/distinct"
    reqs = {rid: {"tiles": [base + "/{z}/{x}/{y}.pbf"], "bounds": b, "minZoom": SCALE_MINZ, "maxZoom": SCALE_MAXZ}
            for rid, b in (("west", DISTINCT_WEST), ("east", DISTINCT_EAST))}
    d = Daemon(spool, store, tilespool_args() + ["--max-tiles", "2000000"], binary=binary)
    try:
        os.sync()
        u0, s0 = d.cpu()
        t0 = time.perf_counter()
        for rid, req in reqs.items():
            drop(spool, rid, req)
        for rid in reqs:
            wait_state(spool, rid, "completed", timeout=7200)
        t1 = time.perf_counter()
        u1, s1 = d.cpu()
        hwm = d.hwm_kb()
    finally:
        rc = d.stop()
    if rc != 0:
        raise BenchError("the daemon exited with %s; see %s" % (rc, d.log_path))
    objs = distinct_objects(store, reqs)
    tiles = sum(read_manifest(store, rid)["lines"] for rid in reqs)
    payload = sum(b for b, _ in objs.values())
    r = {"tiles": tiles, "objects": len(objs), "payload": payload, "wall": t1 - t0, "cpu": (u1 - u0) + (s1 - s0),
         "rss_kb": hwm, "disk": disk_usage(store)}
    log("distinct (%s): %d tiles, %d objects, %.2f GB payload in %.1f s (%.0f tiles/s), cpu %.1f s, RSS %.1f MiB; store %.2f GB on disk (%.3fx), %d files, %d folders" % (
        os.path.basename(binary), tiles, len(objs), payload / 1e9, r["wall"], tiles / r["wall"], r["cpu"], hwm / 1024,
        r["disk"]["disk_bytes"] / 1e9, r["disk"]["disk_bytes"] / payload, r["disk"]["files"], r["disk"]["dirs"]))
    common = ["--spool", spool, "--store", store]
    if full:
        v = time_v([binary, "verify"] + common)
        v["stdout"] = v["stdout"].strip().splitlines()[-1:]
        r["verify"] = v
        log("distinct: verify %.1f s (%s)" % (v["wall"], v["stdout"]))
    r["exports"] = {}
    for fmt in ("mbtiles", "pmtiles"):
        e = time_v([binary, "export", "west", "--format", fmt, "--output", os.path.join(run_dir, "west." + fmt), "--json"] + common)
        doc = json.loads(e.pop("stdout"))
        e["tiles"] = doc.get("tiles")
        r["exports"][fmt] = e
        os.remove(os.path.join(run_dir, "west." + fmt))
        log("distinct: export west as %s: %d tiles in %.1f s, peak RSS %.1f MiB" % (fmt, e["tiles"], e["wall"], e["rss_kb"] / 1024))
    if full:
        east_only = sum(b for b, rs in objs.values() if rs == {"east"})
        d = Daemon(spool, store, tilespool_args(), binary=binary)
        try:
            os.makedirs(os.path.join(spool, "control"), exist_ok=True)
            with open(os.path.join(spool, "control", ".east.delete"), "w"):
                pass
            os.rename(os.path.join(spool, "control", ".east.delete"), os.path.join(spool, "control", "east.delete"))
            deadline = time.monotonic() + 600
            while os.path.exists(os.path.join(spool, "status", "east.json")):
                if time.monotonic() > deadline:
                    raise BenchError("east not deleted after 600 s")
                time.sleep(0.05)
        finally:
            d.stop()
        before = disk_usage(store)["disk_bytes"]
        g = time_v([binary, "gc", "--grace", "0"] + common)
        g["stdout"] = g["stdout"].strip()
        after = disk_usage(store)["disk_bytes"]
        r["gc"] = {"run": g, "east_only_bytes": east_only, "freed": before - after, "disk_after": after}
        log("distinct: gc after deleting east: %.1f s, freed %.2f GB of the %.2f GB only east held (%.1f%%)" % (
            g["wall"], (before - after) / 1e9, east_only / 1e9, 100.0 * (before - after) / max(1, east_only)))
    return r


def phase_distinct(out, nginx, results):
    rs = rects(SCALE_BOUNDS, SCALE_MINZ, SCALE_MAXZ)
    log("distinct: the scale region (%d tiles) as two regions of distinct bodies" % sum(rect_count(r) for r in rs.values()))
    res = {"zooms": [SCALE_MINZ, SCALE_MAXZ], "west": DISTINCT_WEST, "east": DISTINCT_EAST,
           "TileSpool": distinct_run(os.path.join(out, "distinct"), nginx, BIN, True)}
    if not KEEP:
        shutil.rmtree(os.path.join(out, "distinct"), ignore_errors=True)
    if OLD_BIN:
        res["earlier TileSpool"] = distinct_run(os.path.join(out, "distinct-old"), nginx, OLD_BIN, False)
        res["earlier_bin"] = OLD_BIN
        if not KEEP:
            shutil.rmtree(os.path.join(out, "distinct-old"), ignore_errors=True)
    results["distinct"] = res

# ---------------------------------------------------------------------------------------------
# Phase 5: export (issue 8)

def phase_export(out, nginx, results):
    """Downloads the throughput pyramid with TileSpool, then times `tilespool export` in each format
    beside the peers that make the same files from the same tiles: mb-util importing the XYZ tree
    into MBTiles, and pmtiles-convert turning that MBTiles into PMTiles. Then the 1M-tile region of
    the scale phase (all 204: empty tiles), when that phase ran in this bench."""
    pyr, _ = ensure_pyramid()
    rs = rects(TP_BOUNDS, TP_MINZ, TP_MAXZ)
    expect = sum(rect_count(r) for r in rs.values())
    run_dir = os.path.join(out, "export")
    run_tilespool_tiles(run_dir, nginx.base, TP_BOUNDS, TP_MINZ, TP_MAXZ, expect, tilespool_args())
    spool, store = os.path.join(run_dir, "spool"), os.path.join(run_dir, "store")
    venv = os.path.join(ROOT, ".build", "py", "bin")
    # The same tiles as an XYZ tree (hard links into the pyramid) for mb-util.
    tree = os.path.join(run_dir, "tree")
    for z, x, y in tiles_of(rs):
        d = os.path.join(tree, str(z), str(x))
        os.makedirs(d, exist_ok=True)
        os.link(os.path.join(pyr, str(z), str(x), "%d.png" % y), os.path.join(d, "%d.png" % y))
    # mb-util copies metadata.json into the MBTiles (pmtiles-convert needs its `format`).
    with open(os.path.join(tree, "metadata.json"), "w") as f:
        json.dump({"name": "bench", "format": "png", "minzoom": TP_MINZ, "maxzoom": TP_MAXZ,
                   "bounds": ",".join(str(v) for v in TP_BOUNDS)}, f)
    res = {"tiles": expect, "formats": {}, "peers": {}}
    for fmt in ("mbtiles", "pmtiles", "maplibre_na", "site"):
        if fmt == "maplibre_na":
            continue  # a tiles request has no style: maplibre needs one (the real-data test covers it)
        runs = []
        for i in range(RUNS):
            path = os.path.join(run_dir, "bench-%d.%s" % (i, fmt))
            r = time_v([BIN, "export", "bench", "--format", fmt, "--output", path, "--spool", spool, "--store", store, "--json"])
            doc = json.loads(r.pop("stdout"))
            if doc["tiles"] != expect:
                raise BenchError("export %s wrote %d tiles, expected %d" % (fmt, doc["tiles"], expect))
            r["bytes"] = doc["bytes"]
            runs.append(r)
        res["formats"][fmt] = {"runs": runs, "tiles_s": expect / med([r["wall"] for r in runs])}
        log("export %s: %.0f tiles/s, peak RSS %.1f MiB" % (fmt, res["formats"][fmt]["tiles_s"], med([r["rss_kb"] for r in runs]) / 1024))
    mb, pm = [], []
    for i in range(RUNS):
        target = os.path.join(run_dir, "peer-%d.mbtiles" % i)
        mb.append(time_v([os.path.join(venv, "mb-util"), "--image_format=png", "--scheme=xyz", tree, target]))
        pm.append(time_v([os.path.join(venv, "pmtiles-convert"), target, os.path.join(run_dir, "peer-%d.pmtiles" % i)]))
    for name, runs in (("mb-util", mb), ("pmtiles-convert", pm)):
        for r in runs:
            r.pop("stdout", None)
        res["peers"][name] = {"runs": runs, "tiles_s": expect / med([r["wall"] for r in runs])}
        log("%s: %.0f tiles/s" % (name, res["peers"][name]["tiles_s"]))
    scale_dir = os.path.join(out, "scale")
    if os.path.isdir(os.path.join(scale_dir, "store")):
        big = {}
        for fmt in ("mbtiles", "pmtiles", "site"):
            r = time_v([BIN, "export", "bench", "--format", fmt, "--output", os.path.join(scale_dir, "scale." + fmt),
                        "--spool", os.path.join(scale_dir, "spool"), "--store", os.path.join(scale_dir, "store"), "--json"])
            r.pop("stdout")
            big[fmt] = r
            log("export of the %d-tile scale region as %s: %.1f s, peak RSS %.1f MiB" % (
                results["scale"]["tiles"], fmt, r["wall"], r["rss_kb"] / 1024))
        res["scale"] = {"tiles": results["scale"]["tiles"], "formats": big}
    results["export"] = res


# ---------------------------------------------------------------------------------------------
# Phase 4: pick-up latency

def refresh_events(spool, rid, what):
    """How many `refresh` events `what` (started, finished, failed) events.jsonl has for rid."""
    n = 0
    try:
        with open(os.path.join(spool, "events.jsonl")) as f:
            for line in f:
                o = json.loads(line)
                n += o.get("id") == rid and o.get("refresh") == what
    except FileNotFoundError:
        pass
    return n


def write_curl_refresh_config(path, base, rs):
    """curl's way to refresh the same tree: one group per URL (`next`) so that each has its own
    `time-cond` (If-Modified-Since the file's mtime, which `remote-time` set to the server's
    Last-Modified at download: nginx answers 304 only to that exact time); a 304 leaves the file alone."""
    with open(path, "w") as f:
        for i, (z, x, y) in enumerate(tiles_of(rs)):
            f.write('%surl = "%s/%d/%d/%d.png"\noutput = "%d/%d/%d.png"\ntime-cond = "%d/%d/%d.png"\n' % (
                "next\n" if i else "", base, z, x, y, z, x, y, z, x, y))


def phase_refresh(out, nginx, results):
    """Issue 9: refresh of an unchanged region (every answer 304) beside its full download, and
    beside curl --parallel with -z (If-Modified-Since per file) on the same URLs, same run."""
    pyr, stamp = ensure_pyramid()
    rs = rects(TP_BOUNDS, TP_MINZ, TP_MAXZ)
    expect = sum(rect_count(r) for r in rs.values())
    base = nginx.base + "/log"
    run_dir = os.path.join(out, "refresh")
    os.makedirs(run_dir)
    spool, store = os.path.join(run_dir, "spool"), os.path.join(run_dir, "store")
    cfg = os.path.join(run_dir, "curl.cfg")
    write_curl_config(cfg, base, rs, remote_time=True)
    cfg_cond = os.path.join(run_dir, "curl-refresh.cfg")
    write_curl_refresh_config(cfg_cond, base, rs)
    curl_dir = os.path.join(run_dir, "curl")
    runs = {"TileSpool download": [], "TileSpool refresh": [], "curl download": [], "curl -z refresh": []}

    def statuses():
        return [e[1] for e in nginx.log_entries() if len(e) >= 2]

    d = Daemon(spool, store, tilespool_args())
    try:
        nginx.clear_log()
        u0, s0 = d.cpu()
        t0 = drop(spool, "bench", {"tiles": [base + "/{z}/{x}/{y}.png"], "bounds": TP_BOUNDS, "minZoom": TP_MINZ, "maxZoom": TP_MAXZ})
        t1 = wait_state(spool, "bench", "completed")
        u1, s1 = d.cpu()
        runs["TileSpool download"].append({"wall": t1 - t0, "cpu": (u1 - u0) + (s1 - s0), "tiles_s": expect / (t1 - t0)})
        st = statuses()
        if st.count("200") != expect:
            raise BenchError("refresh phase: the download saw %d 200s, expected %d" % (st.count("200"), expect))
        log("refresh: TileSpool download %.2f s (%.0f tiles/s)" % (t1 - t0, expect / (t1 - t0)))
        for i in range(RUNS):
            # TileSpool: drop the control file, wait for the refresh's finished event.
            nginx.clear_log()
            u0, s0 = d.cpu()
            t0 = time.perf_counter()
            ctl = os.path.join(spool, "control")
            with open(os.path.join(ctl, ".bench.refresh"), "w"):
                pass
            os.rename(os.path.join(ctl, ".bench.refresh"), os.path.join(ctl, "bench.refresh"))
            deadline = time.time() + 600
            while refresh_events(spool, "bench", "finished") < i + 1:
                if refresh_events(spool, "bench", "failed"):
                    raise BenchError("the refresh failed; see %s" % d.log_path)
                if time.time() > deadline:
                    raise BenchError("the refresh did not finish in 600 s")
                time.sleep(0.002)
            t1 = time.perf_counter()
            u1, s1 = d.cpu()
            st = statuses()
            if st.count("304") != expect or len(st) != expect:
                raise BenchError("TileSpool refresh: nginx saw %d requests, %d 304s; expected %d 304s" % (len(st), st.count("304"), expect))
            r = {"wall": t1 - t0, "cpu": (u1 - u0) + (s1 - s0), "tiles_s": expect / (t1 - t0)}
            runs["TileSpool refresh"].append(r)
            log("run %d TileSpool refresh  wall %.2f s  %6.0f tiles/s  cpu %.2f s (all %d answers 304)" % (i + 1, r["wall"], r["tiles_s"], r["cpu"], expect))
            # curl: the first run downloads the tree, then each run refreshes it with -z.
            if i == 0:
                nginx.clear_log()
                r = run_curl(curl_dir, cfg, expect)
                r["tiles_s"] = expect / r["wall"]
                runs["curl download"].append(r)
            nginx.clear_log()
            r = run_measured(["curl", "--parallel", "--parallel-max", str(N), "--parallel-immediate", "--silent", "-K", cfg_cond],
                             cwd=curl_dir, out_path=curl_dir + "-refresh.log")
            st = statuses()
            if st.count("304") != expect:
                raise BenchError("curl -z refresh: nginx saw %d requests, %d 304s; expected %d" % (len(st), st.count("304"), expect))
            r["tiles_s"] = expect / r["wall"]
            runs["curl -z refresh"].append(r)
            log("run %d curl -z refresh    wall %.2f s  %6.0f tiles/s  cpu %.2f s" % (i + 1, r["wall"], r["tiles_s"], r["cpu"]))
    finally:
        rc = d.stop()
    if rc != 0:
        raise BenchError("the daemon exited with %s; see %s" % (rc, d.log_path))
    results["refresh"] = {"tiles": expect, "runs": {k: [strip(r) for r in v] for k, v in runs.items()}}


# ---------------------------------------------------------------------------------------------
# Phase: s3 (issue 12). TileSpool downloading from nginx into a real Ceph RADOS Gateway
# (Tests/Support/ceph.sh: one mon, one memstore OSD, radosgw) beside `curl --parallel --aws-sigv4`
# uploading the same bodies from the pyramid to the same RGW, alternating, a fresh bucket per run.

# z8-13 (5,375 tiles): memstore keeps every object in RAM (~38 KB of OSD memory per object,
# ../shared/notes/s3-ceph.md), and the runs leave 2 x RUNS buckets of them.
S3_MAXZ = 12 if QUICK else 13
S3_KEY, S3_SECRET = "TESTKEY", "TESTSECRET"  # the user Tests/Support/ceph.sh creates
SIGV4 = "aws:amz:us-east-1:s3"
EMPTY_SHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
S3_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


class CephRGW:
    """A single-node Ceph RGW started by the project's Tests/Support/ceph.sh in <workdir>/ceph on
    fresh ports, stopped by pid (ceph.sh down). Requests through the curl CLI with SigV4."""
    NAMES = {"radosgw": "client.rgw.x", "ceph-osd": "osd.0", "ceph-mon": "mon.a"}

    def __init__(self, workdir):
        self.dir = os.path.join(workdir, "ceph")
        self.port = free_port()
        env = dict(os.environ, D=self.dir, RGW_PORT=str(self.port), MON_PORT=str(free_port()),
                   MEMSTORE_BYTES=str(16 << 30))
        log("s3: starting Ceph RGW (Tests/Support/ceph.sh) in %s" % self.dir)
        t0 = time.perf_counter()
        out = subprocess.run(["bash", os.path.join(ROOT, "Tests/Support/ceph.sh"), "up"], env=env,
                             stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if out.returncode != 0:
            self.stop()
            raise BenchError("ceph.sh up exited %d:\n%s" % (out.returncode, (out.stdout + out.stderr)[-3000:]))
        log("s3: RGW on 127.0.0.1:%d after %.1f s" % (self.port, time.perf_counter() - t0))
        self.pids = {}
        for name, daemon in self.NAMES.items():
            with open(os.path.join(self.dir, "run", daemon + ".pid")) as f:
                self.pids[name] = int(f.read().strip())

    @property
    def endpoint(self):
        return "http://127.0.0.1:%d" % self.port

    def counters(self):
        """"cpu <process>": CPU seconds (user + sys) of radosgw, the OSD and the mon; "rgw <name>":
        radosgw's request counters (`ceph daemon client.rgw.x perf dump`: req, failed_req, put, get)."""
        c = {"cpu " + name: sum(proc_cpu(pid)) for name, pid in self.pids.items()}
        out = subprocess.run(["ceph", "-c", os.path.join(self.dir, "ceph.conf"), "daemon", "client.rgw.x", "perf", "dump"],
                             capture_output=True, text=True)
        rgw = json.loads(out.stdout).get("rgw", {}) if out.returncode == 0 else {}
        for k in ("req", "failed_req", "put", "get"):
            c["rgw " + k] = rgw.get(k, 0)
        return c

    def curl(self, method, path, sha=EMPTY_SHA, check=True):
        out = subprocess.run(["curl", "-s", "-X", method, "--aws-sigv4", SIGV4, "--user", S3_KEY + ":" + S3_SECRET,
                              "-H", "x-amz-content-sha256: " + sha, "-w", "\n%{http_code}", self.endpoint + path],
                             capture_output=True)
        body, _, code = out.stdout.rpartition(b"\n")
        if check and not code.startswith(b"2"):
            raise BenchError("RGW %s %s: HTTP %s %s" % (method, path, code.decode(), body[:300].decode(errors="replace")))
        return body

    def make_bucket(self, bucket):
        self.curl("PUT", "/" + bucket)

    def list(self, bucket, prefix):
        """{key: size} of the bucket's objects under `prefix` (ListObjectsV2, every page)."""
        import urllib.parse
        import xml.etree.ElementTree as ET
        keys, token = {}, None
        while True:
            q = ("continuation-token=%s&" % urllib.parse.quote(token, safe="") if token else "") + \
                "list-type=2&prefix=" + urllib.parse.quote(prefix, safe="")
            root = ET.fromstring(self.curl("GET", "/%s?%s" % (bucket, q)))
            for c in root.iter(S3_NS + "Contents"):
                keys[c.find(S3_NS + "Key").text] = int(c.find(S3_NS + "Size").text)
            if root.findtext(S3_NS + "IsTruncated") != "true":
                return keys
            token = root.findtext(S3_NS + "NextContinuationToken")

    def manifest(self, bucket, rid):
        """read_manifest's summary of a region's manifest in the bucket (docs/s3.md, object layout:
        the newest compacted <N>.all.tsv if any, then the segments numbered above N, in order)."""
        keys = sorted(self.list(bucket, "regions/%s/manifest/" % rid))
        number = lambda k: int(k.rsplit("/", 1)[-1][:10])
        compacted = [k for k in keys if k.endswith(".all.tsv")]
        read = [k for k in keys if not k.endswith(".all.tsv")]
        if compacted:
            newest = max(compacted, key=number)
            read = [newest] + [k for k in read if number(k) > number(newest)]
        def lines():
            for seg in read:
                yield from self.curl("GET", "/%s/%s" % (bucket, seg)).decode().splitlines()
        return summarize_manifest(lines())

    def stop(self):
        subprocess.run(["bash", os.path.join(ROOT, "Tests/Support/ceph.sh"), "down"], env=dict(os.environ, D=self.dir),
                       stdin=subprocess.DEVNULL, capture_output=True)


def pyramid_bodies(pyr, rs):
    """[(z/x/y.png path, sha256, size)] of the pyramid's tiles in `rs`, in plan order."""
    import hashlib
    out = []
    for z, x, y in tiles_of(rs):
        path = os.path.join(pyr, str(z), str(x), "%d.png" % y)
        with open(path, "rb") as f:
            body = f.read()
        out.append((path, hashlib.sha256(body).hexdigest(), len(body)))
    return out


def write_curl_s3_config(path, endpoint, bucket, bodies):
    """One operation per body (`next` between them, so each has its own headers): a PUT of the
    file to objects/ab/<sha256> with SigV4, the body's SHA-256 and If-None-Match: *, as TileSpool
    sends them; the status of each transfer on its own line (-w)."""
    with open(path, "w") as f:
        for i, (file, sha, _size) in enumerate(bodies):
            if i:
                f.write("next\n")
            f.write('url = "%s/%s/objects/%s/%s"\nupload-file = "%s"\nheader = "x-amz-content-sha256: %s"\n'
                    'header = "If-None-Match: *"\nheader = "Content-Type: application/octet-stream"\n'
                    'aws-sigv4 = "%s"\nuser = "%s:%s"\nwrite-out = "%%{http_code}\\n"\nsilent\noutput = "/dev/null"\n' % (
                        endpoint, bucket, sha[:2], sha, file, sha, SIGV4, S3_KEY, S3_SECRET))


def run_curl_s3(run_dir, rgw, bucket, bodies):
    os.makedirs(run_dir, exist_ok=True)
    rgw.make_bucket(bucket)
    cfg = os.path.join(run_dir, "curl-s3.cfg")
    write_curl_s3_config(cfg, rgw.endpoint, bucket, bodies)
    os.sync()
    srv0 = rgw.counters()
    r = run_measured(["curl", "--parallel", "--parallel-max", str(N), "--parallel-immediate", "--silent", "-K", cfg],
                     cwd=run_dir, out_path=run_dir + ".log")
    srv1 = rgw.counters()
    r["server"] = {k: srv1[k] - srv0[k] for k in srv0}
    with open(run_dir + ".log") as f:
        codes = f.read().split()
    stored = rgw.list(bucket, "objects/")
    want = {"objects/%s/%s" % (sha[:2], sha): size for _f, sha, size in bodies}
    if codes.count("200") != len(bodies) or stored != want:
        raise BenchError("curl into %s: %d of %d PUTs answered 200 (%s), %d of %d objects in the bucket with their sizes" % (
            bucket, codes.count("200"), len(bodies), ", ".join(sorted(set(codes))), sum(stored.get(k) == v for k, v in want.items()), len(want)))
    r["disk"] = None
    return r


def run_tilespool_s3(run_dir, rgw, bucket, base, rs, bodies):
    rgw.make_bucket(bucket)
    env = dict(os.environ, AWS_ACCESS_KEY_ID=S3_KEY, AWS_SECRET_ACCESS_KEY=S3_SECRET, AWS_ENDPOINT_URL="")
    expect = len(bodies)
    r = run_tilespool_tiles(run_dir, base, TP_BOUNDS, TP_MINZ, max(rs), expect,
                            tilespool_args() + ["--s3-endpoint", rgw.endpoint], objects=expect,
                            store="s3://" + bucket, env=env, manifest=lambda: rgw.manifest(bucket, "bench"), server_counters=rgw.counters)
    # Objects are in packs (docs/store.md): the manifest names every body once (checked above,
    # objects=expect), and `tilespool verify` reads every pack back and hashes every object.
    v = subprocess.run([BIN, "verify", "--spool", os.path.join(run_dir, "spool"), "--store", "s3://" + bucket,
                        "--s3-endpoint", rgw.endpoint], env=env, capture_output=True, text=True)
    if v.returncode != 0:
        raise BenchError("TileSpool into %s: verify failed: %s" % (bucket, (v.stdout + v.stderr)[-2000:]))
    packs = rgw.list(bucket, "packs/")
    r["packs"] = {"files": len(packs), "bytes": sum(packs.values())}
    return r


def phase_s3(out, nginx, results):
    missing = [t for t in ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "monmaptool", "ceph") if not shutil.which(t)]
    if missing:
        raise BenchError("s3: %s not found (run make deps: Debian's radosgw ceph-mon ceph-osd ceph-common)" % ", ".join(missing))
    pyr, stamp = ensure_pyramid()
    rs = rects(TP_BOUNDS, TP_MINZ, S3_MAXZ)
    bodies = pyramid_bodies(pyr, rs)
    expect = len(bodies)
    rgw = CephRGW(out)
    try:
        # Check runs (not timed; they also warm RGW): z8-12 through nginx's logging location, every
        # tile fetched once; both sides leave exactly the bodies' objects in their bucket.
        small = rects(TP_BOUNDS, TP_MINZ, min(12, S3_MAXZ))
        sbodies = pyramid_bodies(pyr, small)
        nginx.clear_log()
        run_tilespool_s3(os.path.join(out, "s3-check-TileSpool"), rgw, "check-tilespool", nginx.base + "/log", small, sbodies)
        uris = [e[0] for e in nginx.log_entries()]
        if len(uris) != len(sbodies) or len(set(uris)) != len(sbodies):
            raise BenchError("s3 check run: nginx saw %d requests for %d distinct tiles, expected %d" % (len(uris), len(set(uris)), len(sbodies)))
        run_curl_s3(os.path.join(out, "s3-check-curl"), rgw, "check-curl", sbodies)
        log("s3: check runs of %d tiles: each tile fetched once by TileSpool, its bucket verified (every pack read back and hashed); curl's bucket holds exactly the %d objects" % (len(sbodies), len(sbodies)))
        log("s3: %d tiles z%d-%d (%.1f MB), %d alternating runs each" % (expect, TP_MINZ, S3_MAXZ, sum(b[2] for b in bodies) / 1e6, RUNS))
        runs = {"TileSpool": [], "curl": []}
        for i in range(RUNS):
            for name in runs:
                d = os.path.join(out, "s3-%s-%d" % (name, i))
                bucket = "run%d-%s" % (i, name.lower())
                if name == "TileSpool":
                    r = run_tilespool_s3(d, rgw, bucket, nginx.base, rs, bodies)
                else:
                    r = run_curl_s3(d, rgw, bucket, bodies)
                r["tiles_s"] = expect / r["wall"]
                r["rgw_cpu"] = sum(v for k, v in r["server"].items() if k.startswith("cpu "))
                r["rgw_ops"] = {k[4:]: v for k, v in r["server"].items() if k.startswith("rgw ")}
                runs[name].append(r)
                log("s3 run %d %-9s wall %.2f s  %6.0f tiles/s  cpu %.2f s (user %.2f sys %.2f)  rss %.1f MiB  rgw+osd+mon %.2f s (%s)  rgw requests %s  nginx %.2f s  others %.2f s" % (
                    i + 1, name, r["wall"], r["tiles_s"], r["cpu"], r["user"], r["sys"], r["rss_kb"] / 1024, r["rgw_cpu"],
                    " ".join("%s %.2f" % (k[4:], v) for k, v in sorted(r["server"].items()) if k.startswith("cpu ")),
                    " ".join("%s %d" % kv for kv in sorted(r["rgw_ops"].items())), r["nginx_cpu"], r["other_cpu"] - r["rgw_cpu"]))
        rss = {k: proc_status_kb(p, "VmRSS") for k, p in rgw.pids.items()}
        # Issue 30's "at most 2 PUTs per 1,000 tiles" on a region larger than the timed one (whose
        # size curl's one PUT per tile bounds): the whole pyramid into its own bucket, RGW's put
        # counter from before the daemon starts to after it has stopped (its lease, request,
        # plan, packs, index files, manifest segments and compaction all counted).
        whole = rects(TP_BOUNDS, TP_MINZ, PYR_MAXZ)
        wbodies = pyramid_bodies(pyr, whole)
        c0 = rgw.counters()
        run_tilespool_s3(os.path.join(out, "s3-puts"), rgw, "puts-tilespool", nginx.base, whole, wbodies)
        c1 = rgw.counters()
        puts = {"tiles": len(wbodies), "put": c1["rgw put"] - c0["rgw put"], "req": c1["rgw req"] - c0["rgw req"]}
        log("s3: the whole pyramid (%d tiles) into a bucket: %d PUTs (%.2f per 1,000 tiles), %d requests in all (verify's included)" % (
            puts["tiles"], puts["put"], puts["put"] * 1000.0 / puts["tiles"], puts["req"]))
        if not KEEP:
            shutil.rmtree(os.path.join(out, "s3-puts"), ignore_errors=True)
    finally:
        rgw.stop()
    results["s3"] = {"tiles": expect, "zooms": [TP_MINZ, S3_MAXZ], "bounds": TP_BOUNDS, "bytes": sum(b[2] for b in bodies),
                     "server_rss_kb": rss, "runs": {k: [strip(r) for r in v] for k, v in runs.items()}, "puts": puts}


def pickup_series(spool, req, prefix, count):
    """Drops `count` one-tile requests one at a time, 10 ms apart; returns latencies (s) from just
    before each rename to its status/<id>.state existing, and the states first seen."""
    lat, states = [], {}
    for i in range(count):
        rid = "%s%04d" % (prefix, i)
        state = os.path.join(spool, "status", rid + ".state")
        tmp = os.path.join(spool, "requests", "." + rid + ".json")
        with open(tmp, "w") as f:
            json.dump(req, f)
        t0 = time.perf_counter()
        os.rename(tmp, os.path.join(spool, "requests", rid + ".json"))
        deadline = t0 + 10
        while not os.path.exists(state):
            if time.perf_counter() > deadline:
                raise BenchError("pickup: no status for %s after 10 s" % rid)
            time.sleep(0.00005)
        lat.append(time.perf_counter() - t0)
        s = read_state(spool, rid)
        states[s] = states.get(s, 0) + 1
        time.sleep(0.01)
    return lat, states


def latency_summary(lat, states):
    ms = sorted(x * 1000 for x in lat)
    return {"count": len(ms), "median_ms": statistics.median(ms), "p90_ms": ms[int(0.9 * (len(ms) - 1))],
            "max_ms": ms[-1], "min_ms": ms[0], "first_states": states}


def phase_pickup(out, nginx, results):
    req = {"tiles": [nginx.base + "/empty/{z}/{x}/{y}.png"], "bounds": PICKUP_BOUNDS, "minZoom": 14, "maxZoom": 14,
           "allowEmpty": True}
    # An idle daemon (apart from the one-tile regions it is given).
    spool = os.path.join(out, "pickup", "spool")
    d = Daemon(spool, os.path.join(out, "pickup", "store"), tilespool_args())
    try:
        os.sync()
        idle = latency_summary(*pickup_series(spool, req, "p", PICKUP_COUNT))
        hwm = d.hwm_kb()
    finally:
        d.stop()
    log("pickup (idle daemon): %d requests, median %.2f ms, p90 %.2f ms, worst %.2f ms (states seen first: %s)" % (
        idle["count"], idle["median_ms"], idle["p90_ms"], idle["max_ms"], idle["first_states"]))
    # A fresh daemon busy downloading a big region (every tile 204, as fast as it can).
    spool = os.path.join(out, "pickup-busy", "spool")
    d = Daemon(spool, os.path.join(out, "pickup-busy", "store"), tilespool_args() + ["--max-tiles", "2000000"])
    try:
        big = {"tiles": [nginx.base + "/empty/{z}/{x}/{y}.png"], "bounds": SCALE_BOUNDS, "minZoom": SCALE_MINZ, "allowEmpty": True,
               "maxZoom": SCALE_MAXZ - 1}
        os.sync()
        drop(spool, "busy", big)
        wait_state(spool, "busy", "downloading", timeout=60)
        time.sleep(0.5)
        busy = latency_summary(*pickup_series(spool, req, "b", PICKUP_COUNT // 2))
        busy["big_region_state_after"] = read_state(spool, "busy")
    finally:
        d.stop()
    log("pickup (busy daemon): %d requests, median %.2f ms, p90 %.2f ms, worst %.2f ms; big region %s afterwards" % (
        busy["count"], busy["median_ms"], busy["p90_ms"], busy["max_ms"], busy["big_region_state_after"]))
    results["pickup"] = dict(idle, rss_kb=hwm, busy=busy)


# ---------------------------------------------------------------------------------------------
# Profile: the daemon on the throughput case, once under callgrind (instructions, user space,
# z8-13 of the pyramid: 5,375 tiles) and once under `perf record -e cpu-clock` (native samples,
# kernel included when readable, z8-14). Writes bench/out/profile.md.

def demangle(text):
    try:
        return subprocess.run(["swift", "demangle", "--simplified"], input=text, capture_output=True, text=True).stdout or text
    except OSError:
        return text


def profile_run(out, nginx, name, maxz, wrapper, ready_timeout):
    run_dir = os.path.join(out, "profile-" + name)
    spool, store = os.path.join(run_dir, "spool"), os.path.join(run_dir, "store")
    rs = rects(TP_BOUNDS, TP_MINZ, maxz)
    expect = sum(rect_count(r) for r in rs.values())
    d = Daemon(spool, store, tilespool_args(), wrapper=wrapper, ready_timeout=ready_timeout)
    try:
        req = {"tiles": [nginx.base + "/{z}/{x}/{y}.png"], "bounds": TP_BOUNDS, "minZoom": TP_MINZ, "maxZoom": maxz}
        os.sync()
        t0 = drop(spool, "bench", req)
        t1 = wait_state(spool, "bench", "completed", timeout=1800)
    finally:
        d.stop(timeout=300)
    m = read_manifest(store, "bench")
    if m["lines"] != expect:
        raise BenchError("profile %s: %d manifest lines, expected %d" % (name, m["lines"], expect))
    log("profile %s: %d tiles in %.1f s" % (name, expect, t1 - t0))
    return expect, t1 - t0


def phase_profile(out, nginx, results):
    ensure_pyramid()
    sections = []
    cg = os.path.join(OUTROOT, "callgrind.out")
    maxz = int(os.environ.get("BENCH_PROFILE_MAXZ") or 13)
    n, wall = profile_run(out, nginx, "callgrind", maxz, ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + cg], 120)
    for incl in ("no", "yes"):
        text = subprocess.run(["callgrind_annotate", "--inclusive=" + incl, cg], capture_output=True, text=True).stdout
        text = demangle(text)
        rows = [l for l in text.splitlines() if re.match(r"^\s*[\d,]+ \(\s*[\d.]+%\)", l)]
        sections.append("## callgrind, %s cost (%d tiles z%d-%d; instructions in user space)\n\n```\n%s\n```\n" % (
            "inclusive" if incl == "yes" else "self", n, TP_MINZ, maxz, "\n".join(r[:230] for r in rows[:40])))
    if shutil.which("perf"):
        pd = os.path.join(OUTROOT, "perf.data")
        try:
            n, wall = profile_run(out, nginx, "perf", PYR_MAXZ, ["perf", "record", "-e", "cpu-clock", "-F", "4000", "-g", "-o", pd, "--"], 30)
            for sort, title in (("dso", "self, by library"), ("dso,symbol", "self, by symbol")):
                text = subprocess.run(["perf", "report", "-i", pd, "--stdio", "--no-children", "--sort", sort, "-g", "none",
                                       "--percent-limit", "0.4"], capture_output=True, text=True).stdout
                text = demangle(text)
                rows = [l for l in text.splitlines() if l.strip() and not l.startswith("#")]
                sections.append("## perf record -e cpu-clock, %s (%d tiles z%d-%d, native, kernel included)\n\n```\n%s\n```\n" % (
                    title, n, TP_MINZ, PYR_MAXZ, "\n".join(r[:230] for r in rows[:45])))
            text = subprocess.run(["perf", "report", "-i", pd, "--stdio", "--children", "--sort", "symbol", "-g", "none",
                                   "--percent-limit", "3"], capture_output=True, text=True).stdout
            rows = [l for l in demangle(text).splitlines() if l.strip() and not l.startswith("#")]
            sections.append("## perf, inclusive (children)\n\n```\n%s\n```\n" % "\n".join(r[:230] for r in rows[:45]))
        except (BenchError, subprocess.CalledProcessError) as e:
            log("perf profile skipped: %s" % e)
    path = os.path.join(OUTROOT, "profile.md")
    with open(path, "w") as f:
        f.write("\n".join(sections))
    log("profile written to %s" % path)
    results["profile"] = {"callgrind": cg, "report": path}


# ---------------------------------------------------------------------------------------------
# Report

def med(xs):
    return statistics.median(xs)


def machine():
    def sh(cmd):
        try:
            return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
        except OSError:
            return ""
    cpu = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-").strip()
    fs = sh("df -T %s | awk 'NR==2 {print $2\" on \"$7}'" % WORKDIR)
    mnt = sh("findmnt -no OPTIONS -T %s" % WORKDIR)
    return {"workdir": os.path.relpath(WORKDIR, ROOT) if WORKDIR.startswith(ROOT) else WORKDIR, "nproc": sh("nproc"), "cpu": cpu, "kernel": sh("uname -r"), "fs": fs, "mount": mnt,
            "mem": sh("awk '/MemTotal/ {printf \"%.1f GiB\", $2/1048576}' /proc/meminfo"),
            "os": sh(". /etc/os-release && echo $PRETTY_NAME"),
            "swift": sh("swift --version 2>&1 | head -1"), "nginx": sh("nginx -v 2>&1"),
            "curl": sh("curl --version | head -1 | cut -d' ' -f1-2"),
            "mapproxy": sh("dpkg-query -W -f '${Version}' mapproxy"),
            "load_start": sh("cut -d' ' -f1-3 /proc/loadavg")}


def pair_ratios(runs_a, runs_b, key):
    """The spread of an A/B: for each alternating pair (run i of both), run_a[key] / run_b[key],
    lowest to highest, as "0.95, 1.02, ..."."""
    return ", ".join("%.2f" % x for x in sorted(a[key] / b[key] for a, b in zip(runs_a, runs_b)))


def report(results, mach):
    L = []
    L.append("Machine: %s cores (`nproc`), %s, %s RAM, %s, kernel %s; run folders (%s) on %s (%s)." % (
        mach["nproc"], mach["cpu"], mach["mem"], mach["os"], mach["kernel"], mach.get("workdir", "bench/out"), mach["fs"], mach["mount"]))
    L.append("Software: %s; %s; %s; mapproxy %s. Load average at start: %s; at end: %s." % (
        mach["swift"], mach["nginx"], mach["curl"], mach["mapproxy"], mach["load_start"], mach.get("load_end", "?")))
    L.append("")
    tp = results.get("throughput")
    if tp:
        st = tp["pyramid"]
        L.append("### Throughput: %s tiles (z%d-%d, bounds %s), %d parallel requests, %d alternating runs each, medians" % (
            f"{tp['tiles']:,}", tp["zooms"][0], tp["zooms"][1], tp["bounds"], N, RUNS))
        L.append("")
        L.append("Bodies: distinct random bytes, sizes drawn from %d real tiles in ../shared/mapdata (%s): mean %.1f KB, "
                 "median %.1f KB, max %.1f KB over the z8-14 pyramid. nginx: 1 process, keep-alive, access log off." % (
                     st["poolTiles"], ", ".join(SIZE_POOL_DIRS), st["meanBytes"] / 1000, st["medianBytes"] / 1000, st["maxBytes"] / 1000))
        L.append("")
        L.append("| downloader | wall s | tiles/s | CPU s: user + sys | CPU us/tile | peak RSS MiB |")
        L.append("|---|---:|---:|---:|---:|---:|")
        meds = {}
        for name, runs in tp["runs"].items():
            w = med([r["wall"] for r in runs])
            ts = med([r["tiles_s"] for r in runs])
            cpu = med([r["cpu"] for r in runs])
            user = med([r["user"] for r in runs])
            sys_ = med([r["sys"] for r in runs])
            rss = med([r["rss_kb"] for r in runs]) / 1024
            tree = med([r["tree_kb"] for r in runs]) / 1024
            meds[name] = {"wall": w, "tiles_s": ts, "cpu": cpu, "rss": rss}
            rss_txt = "%.1f" % rss if name != "mapproxy-seed" else "%.1f largest process, %.0f tree" % (rss, tree)
            label = {"TileSpool": "TileSpool daemon (`--max-requests-per-region 8 --max-connections-per-host 8`), drop to `completed`",
                     "TileSpool-baseline": "TileSpool, baseline binary (`BENCH_BASELINE_BIN`), same options",
                     "curl": "`curl --parallel --parallel-max 8 --parallel-immediate -K cfg` (one file per tile)",
                     "mapproxy-seed": "`mapproxy-seed -c 8` (file cache, one fetch per tile)"}[name]
            L.append("| %s | %.2f | %s | %.2f: %.2f + %.2f | %.0f | %s |" % (label, w, f"{ts:,.0f}", cpu, user, sys_, cpu / tp["tiles"] * 1e6, rss_txt))
        L.append("")
        L.append("(Each column is a median over the runs on its own, so CPU s is not always user + sys of one run.)")
        L.append("")
        t, c = meds["TileSpool"], meds["curl"]
        spread = "pairs %s" % pair_ratios(tp["runs"]["TileSpool"], tp["runs"]["curl"], "tiles_s")
        if "mapproxy-seed" in meds:
            m = meds["mapproxy-seed"]
            L.append("Ratios of median tiles/s: TileSpool/curl = **%.2f** (target >= 1.0; %s), TileSpool/mapproxy-seed = **%.1f** (target >= 5); "
                     "curl/mapproxy-seed = %.1f." % (t["tiles_s"] / c["tiles_s"], spread, t["tiles_s"] / m["tiles_s"], c["tiles_s"] / m["tiles_s"]))
        else:
            L.append("Ratio of median tiles/s: TileSpool/curl = **%.2f** (target >= 1.0; %s)." % (t["tiles_s"] / c["tiles_s"], spread))
        # The CPU target (issue 13: TileSpool's CPU per tile <= curl's), with its spread the same way.
        L.append("")
        L.append("Ratio of median CPU per tile: TileSpool/curl = **%.2f** (target <= 1.0; pairs %s)." % (
            t["cpu"] / c["cpu"], pair_ratios(tp["runs"]["TileSpool"], tp["runs"]["curl"], "cpu")))
        if "TileSpool-baseline" in meds:
            b = meds["TileSpool-baseline"]
            L.append("")
            L.append("TileSpool/baseline = **%.2f** (pairs %s); baseline/curl = %.2f." % (
                t["tiles_s"] / b["tiles_s"], pair_ratios(tp["runs"]["TileSpool"], tp["runs"]["TileSpool-baseline"], "tiles_s"),
                b["tiles_s"] / c["tiles_s"]))
        L.append("")
        if all(r.get("disk") for runs in tp["runs"].values() for r in runs):
            L.append("Disk cost of what each downloader leaves (medians): allocated bytes (st_blocks x 512, folders included) "
                     "per payload byte (the tiles' bodies), and inodes (files + folders) per tile. TileSpool: the whole "
                     "store (objects, region files); curl and mapproxy-seed: their output tree.")
            L.append("")
            L.append("| downloader | payload MB | on disk MB | disk / payload | files | folders | inodes per tile |")
            L.append("|---|---:|---:|---:|---:|---:|---:|")
            for name, runs in tp["runs"].items():
                dk = [r["disk"] for r in runs]
                L.append("| %s | %.1f | %.1f | %.2f | %s | %s | %.3f |" % (
                    name, med([d["payload"] for d in dk]) / 1e6, med([d["disk_bytes"] for d in dk]) / 1e6,
                    med([d["disk_bytes"] / d["payload"] for d in dk]), f"{med([d['files'] for d in dk]):,.0f}",
                    f"{med([d['dirs'] for d in dk]):,.0f}", med([(d["files"] + d["dirs"]) / tp["tiles"] for d in dk])))
            L.append("")
        L.append("Every run, in order (wall s / tiles/s / CPU s / nginx CPU s / CPU s used by the rest of the machine "
                 "during the run, i.e. other processes: a measure of the noise):")
        L.append("")
        for name, runs in tp["runs"].items():
            L.append("- %s: %s" % (name, "; ".join("%.2f / %s / %.2f / %.2f / %.2f" % (
                r["wall"], f"{r['tiles_s']:,.0f}", r["cpu"], r["nginx_cpu"], r["other_cpu"]) for r in runs)))
        L.append("")
        ch = tp["checks"]
        L.append("Check runs (through a logging nginx location, not timed): %s." % "; ".join(
            "%s %d requests for %d distinct tiles, the last served %.2f s after the start, the end %.2f s after that" % (
                k, v["requests"], v["distinct"], v["last"], v["tail"]) for k, v in ch.items()))
        L.append("")
    re_ = results.get("real")
    if re_:
        runs = re_["runs"]
        r = sorted(runs, key=lambda x: x["wall"])[len(runs) // 2]
        m = r["manifest"]
        L.append("### Real data: bright style over Liechtenstein z0-14 (../shared/mapdata), %d runs, median" % len(runs))
        L.append("")
        L.append("| wall s | resources/s | resources (manifest lines) | by kind | bytes (manifest) | objects | dedup (lines with a body / objects) | CPU s | peak RSS MiB |")
        L.append("|---:|---:|---:|---|---:|---:|---:|---:|---:|")
        kinds = ", ".join("%s %d" % kv for kv in sorted(m["kinds"].items()))
        with_body = m["lines"] - m["missing"]
        L.append("| %.2f | %s | %d (%d missing: 404) | %s | %s | %d | %.3f | %.2f | %.1f |" % (
            med([x["wall"] for x in runs]), f"{med([x['resources_s'] for x in runs]):,.0f}", m["lines"], m["missing"], kinds,
            f"{m['bytes']:,}", m["objects"], with_body / max(m["objects"], 1), med([x["cpu"] for x in runs]),
            med([x["rss_kb"] for x in runs]) / 1024))
        L.append("")
        L.append("Walls of the runs: %s s; nginx served the last resource %s s after the drop (%s requests); the rest "
                 "of each wall is TileSpool's work after the last response (sync, manifest, status)." % (
                     ", ".join("%.2f" % x["wall"] for x in runs), ", ".join("%.2f" % (x["last_served"] or -1) for x in runs),
                     ", ".join(str(x["requests"]) for x in runs)))
        L.append("")
    sc = results.get("scale")
    if sc:
        r = sc["run"]
        L.append("### Scale")
        L.append("")
        L.append("| case | tiles | wall s | tiles/s | CPU s | peak RSS MiB |")
        L.append("|---|---:|---:|---:|---:|---:|")
        L.append("| daemon, `tiles` request z%d-%d (bounds %s), every tile 204, `--max-tiles 2000000` | %s | %.1f | %s | %.1f | **%.1f** (target <= 64) |" % (
            sc["zooms"][0], sc["zooms"][1], sc["bounds"], f"{sc['tiles']:,}", r["wall"], f"{r['tiles_s']:,.0f}", r["cpu"], r["rss_kb"] / 1024))
        p = sc["plan"]
        runs = p["runs"]
        L.append("| `tilespool plan --json`, z%d-%d (bounds %s), `/usr/bin/time -v`, median of %d | %s | %.3f | - | %.3f | %.1f |" % (
            p["zooms"][0], p["zooms"][1], p["bounds"], len(runs), f"{p['tiles']:,}", med([x["wall"] for x in runs]),
            med([x["user"] + x["sys"] for x in runs]), med([x["rss_kb"] for x in runs]) / 1024))
        L.append("")
        tl = r.get("timeline") or []
        if tl:
            step = max(1, len(tl) // 8)
            L.append("Daemon RSS during the 1M-tile run (s after the drop: MiB): %s." % ", ".join(
                "%.0f: %.1f" % (t, kb / 1024) for t, kb in tl[::step]))
            L.append("")
    rf = results.get("refresh")
    if rf:
        L.append("### Refresh of an unchanged region: %s tiles, every answer 304, %d runs, medians" % (f"{rf['tiles']:,}", RUNS))
        L.append("")
        L.append("| | wall s | tiles/s | CPU s |")
        L.append("|---|---|---|---|")
        for name, rr in rf["runs"].items():
            if rr:
                L.append("| %s | %.2f | %s | %.2f |" % (name, med([r["wall"] for r in rr]), f"{med([r['tiles_s'] for r in rr]):,.0f}", med([r["cpu"] for r in rr])))
        tr, cr = rf["runs"]["TileSpool refresh"], rf["runs"]["curl -z refresh"]
        if tr and cr:
            L.append("")
            L.append("TileSpool refresh / curl -z refresh: %.2f (tiles/s, medians); TileSpool refresh / its own download: %.2f." % (
                med([r["tiles_s"] for r in tr]) / med([r["tiles_s"] for r in cr]),
                med([r["tiles_s"] for r in tr]) / rf["runs"]["TileSpool download"][0]["tiles_s"]))
        L.append("")
    ex = results.get("export")
    if ex:
        L.append("### Export: the %s-tile throughput pyramid, %d runs each, medians" % (f"{ex['tiles']:,}", RUNS))
        L.append("")
        L.append("| what | tiles/s | peak RSS MiB | output bytes |")
        L.append("|---|---:|---:|---:|")
        for fmt, x in ex["formats"].items():
            L.append("| tilespool export --format %s | %.0f | %.1f | %s |" % (
                fmt, x["tiles_s"], med([r["rss_kb"] for r in x["runs"]]) / 1024, f"{x['runs'][0]['bytes']:,}"))
        for name, x in ex["peers"].items():
            L.append("| %s | %.0f | %.1f | |" % (name + (" (XYZ tree -> MBTiles)" if name == "mb-util" else " (MBTiles -> PMTiles)"),
                                                x["tiles_s"], med([r["rss_kb"] for r in x["runs"]]) / 1024))
        L.append("")
        L.append("Ratios: MBTiles export / mb-util **%.1f**; PMTiles export / pmtiles-convert **%.1f** (target: > 1 for both)." % (
            ex["formats"]["mbtiles"]["tiles_s"] / ex["peers"]["mb-util"]["tiles_s"],
            ex["formats"]["pmtiles"]["tiles_s"] / ex["peers"]["pmtiles-convert"]["tiles_s"]))
        if ex.get("scale"):
            L.append("")
            L.append("The %s-tile scale region (every tile empty): " % f"{ex['scale']['tiles']:,}" + "; ".join(
                "%s %.1f s (%.0f tiles/s), peak RSS %.1f MiB" % (f, r["wall"], ex["scale"]["tiles"] / r["wall"], r["rss_kb"] / 1024)
                for f, r in ex["scale"]["formats"].items()) + ".")
        L.append("")
    s3 = results.get("s3")
    if s3:
        L.append("### S3: %s tiles (z%d-%d of the throughput pyramid, %.1f MB) into Ceph RGW, %d parallel requests, %d alternating runs each, medians" % (
            f"{s3['tiles']:,}", s3["zooms"][0], s3["zooms"][1], s3["bytes"] / 1e6, N, RUNS))
        L.append("")
        L.append("One Ceph RADOS Gateway from Debian's packages on this machine (Tests/Support/ceph.sh: one mon, one memstore OSD, "
                 "radosgw with beast, `auth none`), a fresh bucket per run. TileSpool downloads each tile from nginx and uploads it "
                 "(`--store s3://BUCKET`, 8 upload threads, `If-None-Match: *`, SigV4 with the body's SHA-256), from the drop to "
                 "`completed` (every upload answered, the manifest's segments written). curl only uploads: the same bodies, "
                 "read from the pyramid's files, PUT to `objects/ab/<sha256>` with the same headers; hashing the bodies and "
                 "writing its config file is curl's setup, not timed. curl 7.88 also sends `Expect: 100-continue` with each body (an `Expect:` "
                 "header to drop it is signed but not sent, and RGW answers 403), TileSpool does not. RGW CPU: radosgw + ceph-osd + ceph-mon during the run "
                 "(the same objects for both sides).")
        L.append("")
        L.append("| uploader | wall s | tiles/s | CPU s: user + sys | CPU us/tile | RGW CPU s | RGW CPU us/tile | peak RSS MiB |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        meds = {}
        for name, runs in s3["runs"].items():
            meds[name] = {k: med([r[k] for r in runs]) for k in ("wall", "tiles_s", "cpu", "user", "sys", "rgw_cpu", "rss_kb")}
            m = meds[name]
            label = {"TileSpool": "TileSpool daemon (`--max-requests-per-region 8 --max-connections-per-host 8 --store s3://BUCKET`), nginx -> RGW, drop to `completed`",
                     "curl": "`curl --parallel --parallel-max 8 --parallel-immediate -K cfg` (`--aws-sigv4`, `--upload-file` per body)"}[name]
            L.append("| %s | %.2f | %s | %.2f: %.2f + %.2f | %.0f | %.2f | %.0f | %.1f |" % (
                label, m["wall"], f"{m['tiles_s']:,.0f}", m["cpu"], m["user"], m["sys"], m["cpu"] / s3["tiles"] * 1e6,
                m["rgw_cpu"], m["rgw_cpu"] / s3["tiles"] * 1e6, m["rss_kb"] / 1024))
        L.append("")
        t, c = meds["TileSpool"], meds["curl"]
        L.append("Ratio of median tiles/s: TileSpool/curl = **%.2f** (target >= 1.0; pairs %s); CPU per tile TileSpool/curl = %.2f "
                 "(TileSpool's includes the download from nginx)." % (t["tiles_s"] / c["tiles_s"], pair_ratios(s3["runs"]["TileSpool"], s3["runs"]["curl"], "tiles_s"), t["cpu"] / c["cpu"]))
        L.append("")
        ops = {name: runs[0].get("rgw_ops") or {} for name, runs in s3["runs"].items()}
        L.append("Requests RGW counted during each side's first run (`perf dump`: req, of which put / get / failed): %s." % "; ".join(
            "%s %s (%s / %s / %s)" % (name, f"{o.get('req', 0):,}", f"{o.get('put', 0):,}", f"{o.get('get', 0):,}", f"{o.get('failed_req', 0):,}")
            for name, o in ops.items()))
        if s3.get("puts"):
            p = s3["puts"]
            L.append("")
            L.append("The whole pyramid (%s tiles) into its own bucket, from the daemon's start to its stop: %s PUTs, **%.2f per 1,000 tiles** (target <= 2); %s requests in all, `verify`'s included." % (
                f"{p['tiles']:,}", f"{p['put']:,}", p["put"] * 1000.0 / p["tiles"], f"{p['req']:,}"))
        L.append("")
        L.append("Every run, in order (wall s / tiles/s / CPU s / RGW CPU s / nginx CPU s / CPU s of the rest of the machine, i.e. the noise):")
        L.append("")
        for name, runs in s3["runs"].items():
            L.append("- %s: %s" % (name, "; ".join("%.2f / %s / %.2f / %.2f / %.2f / %.2f" % (
                r["wall"], f"{r['tiles_s']:,.0f}", r["cpu"], r["rgw_cpu"], r["nginx_cpu"], r["other_cpu"] - r["rgw_cpu"]) for r in runs)))
        L.append("")
    pu = results.get("pickup")
    if pu:
        L.append("### Pick-up latency")
        L.append("")
        L.append("One-tile `tiles` requests (204 location) dropped one at a time, 10 ms apart, each timed from just before "
                 "the `rename` into `requests/` to `status/<id>.state` existing (polled every ~50 us); the busy case runs "
                 "while the daemon downloads a region of 204 tiles as fast as it can.")
        L.append("")
        L.append("| daemon | requests | median ms | p90 ms | worst ms | best ms | state first seen |")
        L.append("|---|---:|---:|---:|---:|---:|---|")
        for label, x in (("idle", pu), ("busy (a big region downloading; it was `%s` afterwards)" % pu["busy"]["big_region_state_after"], pu["busy"])):
            L.append("| %s | %d | %s | %.2f | %.2f | %.2f | %s |" % (
                label, x["count"], ("**%.2f** (target < 10)" if x is pu else "%.2f") % x["median_ms"], x["p90_ms"], x["max_ms"],
                x["min_ms"], ", ".join("%s %d" % kv for kv in sorted(x["first_states"].items()))))
        L.append("")
    dt = results.get("distinct")
    if dt:
        L.append("### A million distinct bodies (issue 30): the scale region as two regions, every tile its own ~3 KB body (a line naming it, then a real vector tile)")
        L.append("")
        L.append("West %s and east %s, z%d-%d, downloaded together into a disk store; the payload is the distinct objects' bytes. "
                 "An earlier TileSpool (one file per object, before packs: `%s`) does the same when `BENCH_OLD_BIN` is set." % (
                     dt["west"], dt["east"], dt["zooms"][0], dt["zooms"][1], dt.get("earlier_bin", "not run")))
        L.append("")
        L.append("| store | tiles | objects | tiles/s | CPU s | RSS MiB | disk / payload | files (inodes) | folders | export west MBTiles s | PMTiles s |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name in ("TileSpool", "earlier TileSpool"):
            x = dt.get(name)
            if not x:
                continue
            L.append("| %s | %s | %s | %s | %.1f | %.1f | %.3f | %s | %s | %.1f | %.1f |" % (
                name, f"{x['tiles']:,}", f"{x['objects']:,}", f"{x['tiles'] / x['wall']:,.0f}", x["cpu"], x["rss_kb"] / 1024,
                x["disk"]["disk_bytes"] / x["payload"], f"{x['disk']['files']:,}", f"{x['disk']['dirs']:,}",
                x["exports"]["mbtiles"]["wall"], x["exports"]["pmtiles"]["wall"]))
        L.append("")
        x = dt["TileSpool"]
        if "verify" in x:
            L.append("`verify` of the %s objects: %.1f s (%s)." % (f"{x['objects']:,}", x["verify"]["wall"], "; ".join(x["verify"]["stdout"])))
        if "gc" in x:
            g = x["gc"]
            L.append("`gc --grace 0` after deleting east: %.1f s, gave back %s bytes of the %s only east held (**%.1f%%**, target >= 90%%)." % (
                g["run"]["wall"], f"{g['freed']:,}", f"{g['east_only_bytes']:,}", 100.0 * g["freed"] / max(1, g["east_only_bytes"])))
        o = dt.get("earlier TileSpool")
        if o:
            L.append("Export speed-up over the earlier store: MBTiles **%.2fx**, PMTiles **%.2fx** (target >= 2x)." % (
                o["exports"]["mbtiles"]["wall"] / x["exports"]["mbtiles"]["wall"], o["exports"]["pmtiles"]["wall"] / x["exports"]["pmtiles"]["wall"]))
        L.append("")
    pm = results.get("pmtiles")
    if pm:
        ts, cb, ct = pm["runs"]["TileSpool"], pm["runs"]["curl bytes"], pm["runs"]["curl per tile"]
        t, b, c = med([x["wall"] for x in ts]), med([x["wall"] for x in cb]), med([x["wall"] for x in ct])
        L.append("### A PMTiles archive as a source (issue 31): the throughput pyramid as one archive, %s tiles" % f"{pm['tiles']:,}")
        L.append("")
        L.append("| what | wall s (median of %d) | requests | bytes |" % len(ts))
        L.append("|---|---:|---:|---:|")
        L.append("| TileSpool, `pmtiles://` source, drop to `completed` | %.3f | %d | %s (%.4fx the tile bytes) |" % (
            t, ts[0]["requests"], f"{ts[0]['bytes']:,}", ts[0]["bytes"] / max(1, ts[0]["tile_bytes"])))
        L.append("| curl, the same bytes as one file | %.3f | 1 | %s |" % (b, f"{cb[0]['bytes']:,}"))
        cs = pm["runs"].get("curl bytes + fsync")
        if cs:
            L.append("| curl, the same bytes as one file, then `sync FILE` (durable, as TileSpool's tiles are) | %.3f | 1 | %s |" % (
                med([x["wall"] for x in cs]), f"{cs[0]['bytes']:,}"))
        L.append("| curl, the same tiles one request each (8 in parallel) | %.3f | %s | |" % (c, f"{pm['tiles']:,}"))
        L.append("")
        L.append("TileSpool / curl of the same bytes: **%.2fx** the wall time (target <= 1.2x); one request per tile is %.1fx slower "
                 "here on loopback, and %.0fx slower at the polite default of 10 requests a second per remote host (%.0f s, computed; target >= 20x)." % (
                     t / b, c / t, pm["polite_seconds"] / t, pm["polite_seconds"]))
        if cs:
            L.append("Beside curl's copy made durable (fsynced) too: %.2fx (a reference for the cost of durability; the target is against curl alone)." % (
                t / med([x["wall"] for x in cs])))
        L.append("")
    return "\n".join(L)


def main(argv):
    if argv[:1] == ["report"]:  # re-render a results.json: bench.py report [FILE]
        with open(argv[1] if len(argv) > 1 else os.path.join(OUTROOT, "results.json")) as f:
            doc = json.load(f)
        global RUNS
        RUNS = doc.get("runs", RUNS)
        print(report(doc["results"], doc["machine"]))
        return
    phases = argv or ["throughput", "real", "scale", "export", "refresh", "s3", "pickup", "distinct", "pmtiles"]
    for p in phases:
        if p not in ("throughput", "real", "scale", "export", "refresh", "s3", "pickup", "distinct", "pmtiles", "profile"):
            raise SystemExit("unknown phase %s" % p)
    if not os.access(BIN, os.X_OK):
        raise SystemExit("no tilespool binary at %s (set TILESPOOL_BIN or run bench/run.sh)" % BIN)
    os.makedirs(OUTROOT, exist_ok=True)
    os.makedirs(WORKDIR, exist_ok=True)
    global RESULTS
    on_tmpfs = fs_type(WORKDIR) == "tmpfs"
    if on_tmpfs:
        RESULTS = "results-tmpfs"
    stale = [n for n in os.listdir(WORKDIR) if n.startswith("run-")]
    if stale:
        log("note: leftover folders in bench/out (%s) are removed at the end, not now (ext4 discard)" % ", ".join(stale))
    out = os.path.join(WORKDIR, "run-" + time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(out)
    if not on_tmpfs:
        wait_for_quiet_fs()
    mach = machine()
    pyr, _ = ensure_pyramid() if (set(phases) & {"throughput", "profile", "export", "refresh", "s3", "pmtiles"}) else (os.path.join(DATA, "pyramid"), None)
    os.makedirs(pyr, exist_ok=True)
    nginx = Nginx(out, pyr)
    global NGINX_PID
    NGINX_PID = nginx.proc.pid
    results = {}
    t_start = time.perf_counter()
    try:
        for p in phases:
            globals()["phase_" + p](out, nginx, results)
    finally:
        nginx.stop()
        mach["load_end"] = open("/proc/loadavg").read().split()[:3]
        mach["load_end"] = " ".join(mach["load_end"])
        with open(os.path.join(OUTROOT, RESULTS + ".json" if phases != ["profile"] else "profile.json"), "w") as f:
            json.dump({"machine": mach, "results": results, "quick": QUICK, "runs": RUNS}, f, indent=1, default=str)
    text = report(results, mach)
    if phases == ["profile"]:
        return cleanup()
    with open(os.path.join(OUTROOT, RESULTS + ".md"), "w") as f:
        f.write(text + "\n")
    print(text)
    log("total %.0f s; results in bench/out/%s.md and %s.json" % (time.perf_counter() - t_start, RESULTS, RESULTS))
    cleanup()


def cleanup():
    shutil.rmtree(LOCK_ROOT, ignore_errors=True)
    if not KEEP:
        log("removing the run folders in %s" % WORKDIR)
        for n in os.listdir(WORKDIR):
            if n.startswith("run-"):
                shutil.rmtree(os.path.join(WORKDIR, n), ignore_errors=True)
        if fs_type(WORKDIR) != "tmpfs":
            with open(CLEANUP_STAMP, "w") as f:
                f.write("%f\n" % time.time())


def wait_for_quiet_fs():
    """The bench folder's ext4 has no journal here. Without a journal, ext4 does not reuse an inode
    deleted in the last 60 s (360 s while its inode-table block is dirty, which allocating next to
    it makes it): creating files walks past them (recently_deleted(), find_inode_bit()) and costs
    several times more system time. The previous bench's cleanup deletes ~150,000 files, so wait
    until BENCH_SETTLE seconds (360) have passed since it. Deletions by other processes cannot be
    seen; the per-run "others" CPU column shows their load."""
    try:
        with open(CLEANUP_STAMP) as f:
            ago = time.time() - float(f.read().strip())
    except (OSError, ValueError):
        return
    if ago < SETTLE_SECONDS and not QUICK:
        log("the previous bench deleted its files %.0f s ago: waiting %.0f s for ext4 to settle (BENCH_SETTLE=0 skips)" % (
            ago, SETTLE_SECONDS - ago))
        time.sleep(SETTLE_SECONDS - ago)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except BenchError as e:
        log("FAILED: %s" % e)
        sys.exit(1)
