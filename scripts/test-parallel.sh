#!/usr/bin/env bash
# Runs the XCTest suite as several test processes at once, one test class per process, so that
# the suite's waits (daemons, servers, Ceph starting) overlap on the 2-core machines: what
# `make test` runs. Every class still runs whole in one process, so a class's setUp/tearDown
# (one Ceph RGW per S3 class) is as under `swift test`.
#
# Usage: scripts/test-parallel.sh BUNDLE LOG [WORKERS]
#   BUNDLE   the built test executable (.build/debug/TileSpoolPackageTests.xctest)
#   LOG      where the whole output goes (each class's output in one piece, in the order the
#            classes finished); the per-class logs are kept in LOG.d/
#   WORKERS  test processes at once (default $TILESPOOL_TEST_WORKERS, else 4)
# Classes start longest first (Tests/class-order.txt lists the slow ones; the rest follow by name),
# so that the run does not end on one long class. The last line printed is the summary:
#   Executed N tests, with F failures in S seconds (W test processes, C classes)
# and the exit status is 1 when a test failed, a class's process died, or a listed class did not run.
set -uo pipefail
bundle="$1"; log="$2"; workers="${3:-${TILESPOOL_TEST_WORKERS:-4}}"
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$log.d"
rm -rf "$dir"; mkdir -p "$dir"; : > "$log"
start=$(date +%s.%N)

mapfile -t all < <("$bundle" --list-tests 2>/dev/null | sed -n 's|^\([A-Za-z0-9_]*\.[A-Za-z0-9_]*\)/.*|\1|p' | sort -u)
if [ "${#all[@]}" -eq 0 ]; then echo "test-parallel: $bundle lists no tests" | tee -a "$log"; exit 1; fi
# Slow classes first, in the order listed; then every other class by name.
ordered=()
if [ -r "$root/Tests/class-order.txt" ]; then
    while read -r c _; do
        [ -n "$c" ] && [[ "$c" != \#* ]] || continue
        for a in "${all[@]}"; do [ "$a" = "TileSpoolTests.$c" ] && ordered+=("$a"); done
    done < "$root/Tests/class-order.txt"
fi
for a in "${all[@]}"; do
    seen=0; for o in "${ordered[@]}"; do [ "$o" = "$a" ] && { seen=1; break; }; done
    [ $seen = 1 ] || ordered+=("$a")
done

run_one() {
    local cls="$1" out="$dir/$1.log"
    "$bundle" "$cls" > "$out" 2>&1
    echo "$?" > "$dir/$cls.rc"
    # One class's output in one piece, whichever worker finishes first.
    { flock 9; cat "$out"; cat "$out" >> "$log"; } 9> "$dir/.lock"
}
export -f run_one; export bundle dir log
printf '%s\n' "${ordered[@]}" | xargs -d '\n' -P "$workers" -I{} bash -c 'run_one "$1"' _ {}

tests=0; failures=0; bad=()
for cls in "${ordered[@]}"; do
    f="$dir/$cls.log"
    line=$(grep -E "^Test Suite '${cls#*.}' (passed|failed)" -A1 "$f" 2>/dev/null | grep -E "Executed [0-9]+ tests?" | tail -n 1)
    rc=$(cat "$dir/$cls.rc" 2>/dev/null || echo missing)
    if [ -z "$line" ]; then bad+=("$cls (exit status $rc, no summary: the process died)"); continue; fi
    n=$(sed -E 's/.*Executed ([0-9]+) tests?.*/\1/' <<<"$line")
    # "with N failures", also after "with M tests skipped and" (a class whose setUp threw).
    f_=$(grep -oE '[0-9]+ failures?' <<<"$line" | grep -oE '^[0-9]+' || echo 1)
    tests=$((tests + n)); failures=$((failures + f_))
    [ "$rc" = 0 ] || [ "$f_" -gt 0 ] || bad+=("$cls (exit status $rc)")
done
secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
{
    for b in "${bad[@]}"; do echo "test-parallel: class did not finish cleanly: $b"; done
    printf 'Executed %d tests, with %d failures in %s seconds (%d test processes at once, %d classes)\n' \
        "$tests" "$failures" "$secs" "$workers" "${#ordered[@]}"
} | tee -a "$log"
[ "$failures" -eq 0 ] && [ "${#bad[@]}" -eq 0 ]
