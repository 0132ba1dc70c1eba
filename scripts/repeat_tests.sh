#!/usr/bin/env bash
# Runs the test suite N times in a row (default 10) and counts the runs that failed, to show that no
# test is flaky. Builds once first; each run's output goes to $LOGDIR/run-K.log (default a temporary
# directory), and a failed run's failing tests are listed.
# Usage: scripts/repeat_tests.sh [N] [extra swift test arguments…]
set -uo pipefail
cd "$(dirname "$0")/.."
runs="${1:-10}"
shift || true
logs="${LOGDIR:-$(mktemp -d)}"
swift build --build-tests >/dev/null || { echo "repeat_tests: the build failed" >&2; exit 2; }
failed=0
start=$(date +%s)
for k in $(seq "$runs"); do
    t0=$(date +%s)
    if swift test --skip-build "$@" >"$logs/run-$k.log" 2>&1; then
        echo "run $k: passed ($(( $(date +%s) - t0 )) s)"
    else
        failed=$((failed + 1))
        echo "run $k: FAILED ($(( $(date +%s) - t0 )) s), log $logs/run-$k.log"
        grep -E "✘|error:|failed" "$logs/run-$k.log" | head -20 | sed 's/^/    /'
    fi
done
echo "repeat_tests: $runs runs in $(( $(date +%s) - start )) s, logs in $logs"
echo "$((runs - failed)) passed, $failed failed"
[ "$failed" -eq 0 ]
