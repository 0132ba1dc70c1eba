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
# The timed run, with what it cost: the server's CPU (/proc/PID/stat, utime + stime), wrk's
# (getrusage of the child once it has exited), the ledger's commits (the server's /metrics).
python3 - "$server" "http://127.0.0.1:$port/metrics" "$library_rate" "$connections" "$bodies" \
    wrk -t2 -c"$connections" -d"${seconds}s" --latency -s "$work/certificates.lua" "$url" <<'PY'
import os, re, resource, subprocess, sys, urllib.request
server, metrics, library_rate, connections, bodies, wrk = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6:]
def cpu_seconds():
    fields = open(f"/proc/{server}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
def commits():
    # The ledger's transactions and certificates, and the CA's signatures from presigned nonces and whole.
    text = urllib.request.urlopen(metrics, timeout=5).read().decode()
    names = ("tokenserver_ledger_commits", "tokenserver_ledger_committed_certificates", "tokenserver_ca_presigned_signatures", "tokenserver_ca_whole_signatures")
    values = dict(re.findall(r"^(" + "|".join(names) + r") ([0-9.e+]+)$", text, re.M))
    return [float(values.get(name, 0)) for name in names]
commits_before, server_before = commits(), cpu_seconds()
output = subprocess.run(wrk, stdout=subprocess.PIPE, text=True, check=True).stdout
server_cpu, commits_after = cpu_seconds() - server_before, commits()
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
result = next(line for line in output.splitlines() if line.startswith("RESULT "))
print(f"http POST /v1/certificates ({connections} connections, wrk -t2, {bodies} distinct requests): {result[len('RESULT '):]}")
fields = result.split()
rate, requests, errors = float(fields[2]), int(fields[8]), int(fields[10])
print(f"CPU per request: server {server_cpu / requests * 1e6:.0f} µs, wrk {(usage.ru_utime + usage.ru_stime) / requests * 1e6:.0f} µs")
batches, certificates = commits_after[0] - commits_before[0], commits_after[1] - commits_before[1]
print(f"ledger commits: {batches:.0f}, {certificates / max(batches, 1):.1f} certificates each")
presigned, whole = commits_after[2] - commits_before[2], commits_after[3] - commits_before[3]
print(f"signed with a presigned nonce: {100 * presigned / max(presigned + whole, 1):.0f}%")
print(f"http / library 2-core: {rate:.0f} / {library_rate:.0f} = {rate / library_rate:.3f}")
if errors:
    sys.exit(f"issuance_load: {errors} errors")
PY
echo "ledger: $(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("select count(*) from certificates").fetchone()[0])' "$work/tokentool-state/ledger.sqlite") certificates recorded (warm-up included)"
