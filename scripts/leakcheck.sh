#!/usr/bin/env bash
# Runs `tokentool demo` (keys generated, tokens signed and verified with both engines, attacks
# refused) under valgrind and fails if any memory is definitely or indirectly lost. "Possibly
# lost" blocks are the Swift runtime's metadata caches, which live for the whole process.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "leakcheck: apt-get install valgrind" >&2; exit 2; }
swift build --product tokentool >/dev/null
log=$(mktemp)
valgrind --leak-check=full --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
    --error-exitcode=9 .build/debug/tokentool demo >"$log" 2>&1 || { cat "$log"; exit 1; }
grep -E "definitely lost|indirectly lost|ERROR SUMMARY" "$log"
rm -f "$log"
