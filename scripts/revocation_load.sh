#!/usr/bin/env bash
# Load test of the revocation endpoints of `tokentool serve` (embedded defaults), from wrk on
# loopback: GET /v1/crl, and POST /v1/ocsp for one issued certificate with a request made by
# `openssl ocsp` without a nonce (a response the CA may give again) and with one (signed each time).
# Anyone may send these requests, so what each costs the server is what a flood costs it. Prints,
# per endpoint, requests/s, p50, p99, the server's CPU per request (/proc/PID/stat before and
# after) and the CRL numbers the ledger has handed out; checks that every answer was a 200 and that
# openssl reads the OCSP answer as "good".
# Usage: scripts/revocation_load.sh [SECONDS] [CONNECTIONS]   (defaults 5 s, 32 connections, 2 wrk threads)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-5}"
connections="${2:-32}"
command -v wrk >/dev/null || { echo "revocation_load: apt-get install wrk" >&2; exit 2; }
build=$(swift build -c release --product tokentool 2>&1) || { echo "$build" >&2; exit 1; }
tool="$PWD/.build/release/tokentool"
work=$(mktemp -d)
source scripts/serve_lib.sh
start_serve "$tool"  # sets $server, $port (the OS picked it) and $token
base="http://127.0.0.1:$port"

# One certificate to ask about: its leaf and issuing certificate from the reply's chain.
"$tool" csr --out "$work/device.key" > "$work/device.csr"
python3 scripts/issue_leaf.py "$base" "$token" "$work/device.csr" "$work"
openssl ocsp -issuer "$work/issuer.pem" -cert "$work/leaf.pem" -no_nonce -reqout "$work/plain.der" >/dev/null 2>&1
openssl ocsp -issuer "$work/issuer.pem" -cert "$work/leaf.pem" -reqout "$work/nonce.der" >/dev/null 2>&1

cpu() { awk '{print $14 + $15}' "/proc/$server/stat"; }  # utime + stime, in clock ticks
ticks=$(getconf CLK_TCK)
echo "revocation_load: $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg), $seconds s per endpoint, $connections connections"
for case in crl ocsp-plain ocsp-nonce; do
    case "$case" in
        crl) path=/v1/crl; request="" ;;
        ocsp-plain) path=/v1/ocsp; request="$work/plain.der" ;;
        ocsp-nonce) path=/v1/ocsp; request="$work/nonce.der" ;;
    esac
    if [ -n "$request" ]; then
        curl -sf -X POST "$base$path" -H 'content-type: application/ocsp-request' --data-binary @"$request" > "$work/answer.der"
        status=$(openssl ocsp -respin "$work/answer.der" -issuer "$work/issuer.pem" -cert "$work/leaf.pem" -noverify -no_nonce 2>&1 | grep -o 'leaf.pem: [a-z]*')
        [ "$status" = "leaf.pem: good" ] || { echo "revocation_load: openssl read the OCSP answer as '$status'" >&2; exit 1; }
    fi
    cat > "$work/$case.lua" <<LUA
local path = "$request"
if path ~= "" then
  local file = io.open(path, "rb"); wrk.body = file:read("*a"); file:close()
  wrk.method = "POST"; wrk.headers["Content-Type"] = "application/ocsp-request"
end
done = function(summary, latency, requests)
  local errors = summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout
  io.write(string.format("RESULT %d %.0f %.2f %.2f %d\n", summary.requests, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, errors))
end
LUA
    before=$(cpu)
    result=$(wrk -t2 -c"$connections" -d"${seconds}s" --latency -s "$work/$case.lua" "$base$path" | grep '^RESULT')
    after=$(cpu)
    read -r _ requests rate p50 p99 errors <<< "$result"
    numbers=$(python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("select coalesce(max(value), 0) from counters where name = ?", ("crl",)).fetchone()[0])' "$work/tokentool-state/ledger.sqlite")
    printf '%-11s requests/s %6s  p50 %6s ms  p99 %6s ms  server %5s µs of CPU a request  errors %s  CRL numbers so far %s\n' \
        "$case" "$rate" "$p50" "$p99" "$(python3 -c "print(round(($after - $before) / $ticks * 1e6 / max($requests, 1)))")" "$errors" "$numbers"
    [ "$errors" = 0 ] || { echo "revocation_load: $errors errors on $path" >&2; exit 1; }
done
