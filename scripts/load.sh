#!/usr/bin/env bash
# Load test of `tokentool serve` from a second process on loopback, with wrk (Debian's package):
# POST /v1/auth (the webhook: parse, HS256 verify, claims, JSON answer) and POST /v1/certificates
# (verify, CSR check, P-256 signature, durable SQLite insert). Prints requests/s, p50 and p99.
# Usage: scripts/load.sh [SECONDS] [CONNECTIONS]   (defaults 10 s, 32 connections, 2 wrk threads)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-10}"
connections="${2:-32}"
command -v wrk >/dev/null || { echo "load: apt-get install wrk" >&2; exit 2; }
swift build -c release --product tokentool >/dev/null
tool="$PWD/.build/release/tokentool"
work=$(mktemp -d)
source scripts/serve_lib.sh
start_serve "$tool"  # sets $server, $port (the OS picked it) and $token
"$tool" csr --out "$work/device.key" > "$work/device.csr"
csr=$(python3 -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read()))' "$work/device.csr")

for endpoint in auth certificates; do
    if [ "$endpoint" = auth ]; then
        body="{\"appID\":\"dev\",\"provider\":\"dev\",\"token\":\"$token\"}"
    else
        body="{\"provider\":\"dev\",\"token\":\"$token\",\"csr\":$csr}"
    fi
    printf 'return {\n[==[%s]==],\n}\n' "$body" > "$work/$endpoint.bodies.lua"
    wrk_script "$work/$endpoint.bodies.lua" "$work/$endpoint.lua"
    wrk -t2 -c"$connections" -d"${seconds}s" --latency -s "$work/$endpoint.lua" "http://127.0.0.1:$port/v1/$endpoint" | grep '^RESULT' \
        | sed "s/^RESULT /RESULT $endpoint /"
done
echo "ledger: $(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("select count(*) from certificates").fetchone()[0])' "$work/tokentool-state/ledger.sqlite") certificates recorded"
