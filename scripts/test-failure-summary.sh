#!/usr/bin/env bash
# Printed by `make test` after a failed run, so that the last lines of its output (all a CI page may
# show) say what failed: the test cases that failed, for each test process that died (a crash ends
# XCTest without a summary) the test it was running, the crash's message and first frames.
# Usage: scripts/test-failure-summary.sh LOG
# LOG is the whole output; when LOG.d/ holds one log per test class (scripts/test-parallel.sh),
# each class's log is read on its own.
log="$1"
[ -r "$log" ] || exit 0
echo "---- make test failed; summary of $log ----"
grep -E "^Test Case '.*' failed" "$log" | sed 's/^/failed: /' | tail -n 20
if [ -d "$log.d" ]; then pieces=("$log.d"/*.log); else pieces=("$log"); fi
for piece in "${pieces[@]}"; do
    [ -r "$piece" ] || continue
    last=$(grep -E "^Test Case '.*' (started|passed|failed)" "$piece" | tail -n 1)
    case "$last" in
        *started*) ;;
        *) continue ;;
    esac
    echo "running when the test process ended: ${last#Test Case }"
    grep -E "Fatal error|Precondition failed|Assertion failed|Program crashed|crashed:|unexpected signal" "$piece" | head -n 6
    # The crashed thread's frames in our own code (the Swift backtracer's format:
    # "  3 [ra] 0x... SYMBOL + 32 in MODULE at FILE:LINE:COLUMN").
    grep -E "^ *[0-9]+ .* in TileSpool[A-Za-z.]* at " "$piece" | head -n 8 | cut -c1-300
done
grep -E "Executed [0-9]+ tests" "$log" | tail -n 1
