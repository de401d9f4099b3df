#!/usr/bin/env bash
# TileSpool benchmarks (issue 5): throughput against curl and mapproxy-seed, real map data,
# scale (1M-tile region, 10M-tile plan) and pick-up latency. `make bench` runs this after
# `make deps` and a release build in .build-bench; results go to bench/out/results.md (a
# Markdown table for docs/benchmarks.md) and bench/out/results.json.
#
#   bash bench/run.sh                      every default phase (throughput real scale export refresh s3 pickup distinct pmtiles)
#   bash bench/run.sh s3                   TileSpool into a real Ceph RGW beside curl --aws-sigv4 (needs make deps: Ceph)
#   bash bench/run.sh pmtiles              the pyramid as one PMTiles archive: range requests beside curl (issue 31)
#   bash bench/run.sh throughput pickup    some phases
#   bash bench/run.sh profile              callgrind and perf on the daemon (bench/out/profile.md)
#   BENCH_QUICK=1 bash bench/run.sh        small sizes, one run each (development)
#
# Environment: TILESPOOL_BIN (skip the build and use this binary), BENCH_SCRATCH (scratch path
# of the release build, default .build-bench), TILESPOOL_MAPDATA, BENCH_RUNS, BENCH_KEEP=1 (keep
# the run folders), BENCH_WORKDIR (where the run folders go; a tmpfs path writes results-tmpfs.*),
# BENCH_SETTLE (seconds to wait after a previous bench's cleanup, default 360; see bench.py),
# BENCH_BASELINE_BIN (a second tilespool binary timed in the same alternation, for A/B checks),
# BENCH_NO_MAPPROXY=1 (leave mapproxy-seed out of the throughput runs).
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in nginx curl mapproxy-seed /usr/bin/time .build/py/bin/mb-util .build/py/bin/pmtiles-convert; do
    command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || { echo "bench: $tool not found (run make deps)" >&2; exit 1; }
done

if [ -z "${TILESPOOL_BIN:-}" ]; then
    scratch="${BENCH_SCRATCH:-.build-bench}"
    swift build -c release --scratch-path "$scratch" >&2
    TILESPOOL_BIN="$(swift build -c release --scratch-path "$scratch" --show-bin-path)/tilespool"
fi
export TILESPOOL_BIN
export PATH="$PATH:/usr/sbin"

# Debian's python3 runs the helpers (mapproxy is installed for it; only the standard library is used).
exec /usr/bin/python3 bench/bench.py "$@"
