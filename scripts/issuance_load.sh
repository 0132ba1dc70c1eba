#!/usr/bin/env bash
# Issuance over HTTP against issuance in the library, in one run (issue 18):
#  1. tokenbench's peerca.issuance.2core row (library: token verify, CSR check, certificate,
#     durable SQLite ledger; 64 in flight, both cores) for SECONDS;
#  2. a release `tokentool serve --port 0` on embedded defaults, loaded with POST /v1/certificates
#     by wrk from a second process on loopback (2 threads, CONNECTIONS connections) for SECONDS,
#     cycling through BODIES distinct requests (each its own HS256 token — own sub and jti — and
#     its own P-256 CSR, made with PyJWT and cryptography before the timing);
#  3. requests/s, p50, p99, errors; the server's and wrk's CPU per request (/proc, getrusage),
#     the ledger's commits and certificates per commit (/metrics); HTTP rate / library 2-core rate.
# wrk runs on the same 2 cores as the server: it takes CPU the server would otherwise have.
# Usage: scripts/issuance_load.sh [SECONDS] [CONNECTIONS] [BODIES]   (defaults 10 s, 32, 256)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-10}"
connections="${2:-32}"
bodies="${3:-256}"
command -v wrk >/dev/null || { echo "issuance_load: apt-get install wrk (scripts/bootstrap.sh)" >&2; exit 2; }
python3 -c 'import jwt, cryptography' 2>/dev/null || { echo "issuance_load: needs PyJWT and cryptography (scripts/bootstrap.sh)" >&2; exit 2; }
build=$(swift build -c release --product tokentool 2>&1) || { echo "$build" >&2; exit 1; }
build=$(swift build -c release --product tokenbench 2>&1) || { echo "$build" >&2; exit 1; }
bin="$PWD/.build/release"
work=$(mktemp -d)
server=""
trap '[ -n "$server" ] && { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; }; rm -rf "$work"' EXIT
echo "issuance_load: $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg), ${seconds} s per side, $connections connections"

# 1. The library, right before.
library=$("$bin/tokenbench" --issuance --filter 'peerca.issuance.2core$' --seconds "$seconds" --reps 1 | grep '^peerca.issuance.2core')
echo "$library"
library_rate=$(echo "$library" | awk '{print $2}')

# 2. The server, and the requests.
(cd "$work" && exec "$bin/tokentool" serve --port 0 > "$work/serve.log" 2>&1) &
server=$!
for _ in $(seq 100); do grep -q "curl -s" "$work/serve.log" 2>/dev/null && break; sleep 0.1; done
grep -q "curl -s" "$work/serve.log" || { cat "$work/serve.log"; exit 1; }
port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$work/serve.log" | head -1 | grep -o '[0-9]*$')  # the OS picked it
python3 - "$work/tokentool-state/dev-hs256.secret" "$bodies" "$work/bodies.lua" <<'PY'
import json, sys, time, uuid
import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
secret = open(sys.argv[1], "rb").read()
count = int(sys.argv[2])
now = int(time.time())
with open(sys.argv[3], "w") as out:
    out.write("return {\n")
    for i in range(count):
        token = jwt.encode({"iss": "tokentool-dev", "sub": f"load-{i}", "name": f"Load {i}", "iat": now, "exp": now + 3600,
                            "jti": str(uuid.uuid4())}, secret, algorithm="HS256")
        key = ec.generate_private_key(ec.SECP256R1())
        csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([])).sign(key, hashes.SHA256())
        body = json.dumps({"provider": "dev", "token": token, "csr": csr.public_bytes(serialization.Encoding.PEM).decode()})
        out.write("[==[" + body + "]==],\n")
    out.write("}\n")
PY
cat > "$work/certificates.lua" <<LUA
local bodies = dofile("$work/bodies.lua")
local threads = 0
function setup(thread)
  thread:set("id", threads)
  threads = threads + 1
end
local i = 0
function init(args) i = (id or 0) * 97 end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
function request()
  i = i % #bodies + 1
  return wrk.format(nil, nil, nil, bodies[i])
end
done = function(summary, latency, requests)
  local errors = summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout
  io.write(string.format("RESULT requests/s %.0f p50_ms %.2f p99_ms %.2f requests %d errors %d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000, latency:percentile(99) / 1000, summary.requests, errors))
end
LUA
url="http://127.0.0.1:$port/v1/certificates"
wrk -t2 -c"$connections" -d1s -s "$work/certificates.lua" "$url" >/dev/null  # warm-up
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }  # utime + stime, in clock ticks
commits() { curl -s "http://127.0.0.1:$port/metrics" | awk '/^tokenserver_ledger_commits /{c=$2} /^tokenserver_ledger_committed_certificates /{n=$2} END{print c, n}'; }
read -r commits_before committed_before <<< "$(commits)"
server_before=$(ticks "$server")
# wrk under python, for its CPU time (getrusage of the children once it has exited).
wrk_cpu=$(python3 - "$work/wrk.out" wrk -t2 -c"$connections" -d"${seconds}s" --latency -s "$work/certificates.lua" "$url" <<'PY'
import resource, subprocess, sys
with open(sys.argv[1], "w") as out:
    subprocess.run(sys.argv[2:], stdout=out, check=True)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(usage.ru_utime + usage.ru_stime)
PY
)
server_ticks=$(( $(ticks "$server") - server_before ))
read -r commits_after committed_after <<< "$(commits)"
http=$(grep RESULT "$work/wrk.out")
echo "http POST /v1/certificates ($connections connections, wrk -t2, $bodies distinct requests): ${http#RESULT }"
http_rate=$(echo "$http" | awk '{print $3}')
requests=$(echo "$http" | awk '{print $9}')
python3 -c 'import os, sys; hz = os.sysconf("SC_CLK_TCK"); s, w, n = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]); print(f"CPU per request: server {s / hz / n * 1e6:.0f} µs, wrk {w / n * 1e6:.0f} µs")' "$server_ticks" "$wrk_cpu" "$requests"
python3 -c 'import sys; c0, n0, c1, n1 = (float(a) for a in sys.argv[1:]); print(f"ledger commits: {c1 - c0:.0f}, {(n1 - n0) / max(c1 - c0, 1):.1f} certificates each")' \
  "$commits_before" "$committed_before" "$commits_after" "$committed_after"
errors=$(echo "$http" | awk '{print $11}')
python3 -c 'import sys; h, l = float(sys.argv[1]), float(sys.argv[2]); print(f"http / library 2-core: {h:.0f} / {l:.0f} = {h / l:.3f}")' "$http_rate" "$library_rate"
echo "ledger: $(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("select count(*) from certificates").fetchone()[0])' "$work/tokentool-state/ledger.sqlite") certificates recorded (warm-up included)"
[ "$errors" = 0 ] || { echo "issuance_load: $errors errors" >&2; exit 1; }
