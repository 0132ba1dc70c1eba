#!/usr/bin/env bash
# Issuance as the ledger grows (issue 18): tokenbench --ledger-growth against an SQLite ledger in a
# temporary directory, or against a throw-away PostgreSQL server on loopback (scripts/pgtest.sh),
# removed afterwards. At each size: certificates/s, p50/p99, tokenbench's RSS, the ledger's size.
# SQLite then measures PAIRS pairs alternately — a new empty ledger, the largest filled one — and
# prints each pair's ratio and their median (the sweep measures each size once, minutes apart).
# Usage: scripts/ledger_growth.sh sqlite|postgres [SIZES] [SECONDS] [REPS] [PAIRS]
#        (defaults 0,1M,10M, 5 s, 3 repetitions, 3 pairs; the fill refuses sizes the disk cannot hold)
set -euo pipefail
cd "$(dirname "$0")/.."
store="${1:?usage: scripts/ledger_growth.sh sqlite|postgres [SIZES] [SECONDS] [REPS] [PAIRS]}"
sizes="${2:-0,1M,10M}"
seconds="${3:-5}"
reps="${4:-3}"
pairs="${5:-3}"
build=$(swift build -c release --product tokenbench 2>&1) || { echo "$build" >&2; exit 1; }
bench="$PWD/.build/release/tokenbench"
echo "ledger_growth: $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg), $(df -h --output=avail "${TMPDIR:-/tmp}" | tail -1 | tr -d ' ') free in ${TMPDIR:-/tmp}"
case "$store" in
sqlite)
    "$bench" --ledger-growth "$sizes" --ledger-store sqlite --seconds "$seconds" --reps "$reps" --growth-pairs "$pairs"
    ;;
postgres)
    pg=$(mktemp -d)
    trap 'scripts/pgtest.sh stop "$pg"' EXIT
    url=$(scripts/pgtest.sh start "$pg")
    echo "ledger_growth: PostgreSQL $(psql "$url" -Atc 'SHOW server_version') on loopback, shared_buffers $(psql "$url" -Atc 'SHOW shared_buffers'), synchronous_commit $(psql "$url" -Atc 'SHOW synchronous_commit')"
    "$bench" --ledger-growth "$sizes" --ledger-store "$url" --seconds "$seconds" --reps "$reps"
    ;;
*)
    echo "usage: scripts/ledger_growth.sh sqlite|postgres [SIZES] [SECONDS] [REPS] [PAIRS]" >&2
    exit 2
    ;;
esac
