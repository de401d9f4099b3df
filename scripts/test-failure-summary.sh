#!/usr/bin/env bash
# Printed by `make test` after a failed run, so that the last lines of its output (all a CI page may
# show) say what failed: the test cases that failed, the test that was running when the test process
# died (a crash ends XCTest without a summary), and the crash's message and first frames.
# Usage: scripts/test-failure-summary.sh LOG
log="$1"
[ -r "$log" ] || exit 0
echo "---- make test failed; summary of $log ----"
grep -E "^Test Case '.*' failed" "$log" | sed 's/^/failed: /' | tail -n 20
last=$(grep -E "^Test Case '.*' (started|passed|failed)" "$log" | tail -n 1)
case "$last" in
    *started*) echo "running when the test process ended: ${last#Test Case }" ;;
esac
grep -E "Fatal error|Precondition failed|Assertion failed|Program crashed|crashed:|unexpected signal" "$log" | head -n 6
# The crashed thread's frames in our own code (the Swift backtracer's format:
# "  3 [ra] 0x... SYMBOL + 32 in MODULE at FILE:LINE:COLUMN").
grep -E "^ *[0-9]+ .* in TileSpool[A-Za-z.]* at " "$log" | head -n 8 | cut -c1-300
grep -E "Executed [0-9]+ tests" "$log" | tail -n 1
