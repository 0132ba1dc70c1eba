#!/usr/bin/env bash
# Issue 58's figures beside their peers, in one run, on this machine (wrk from a second process on
# loopback, 2 threads, CONNECTIONS connections, SECONDS each):
#  1. HTTP certificate issuance: cfssl 1.2 (Debian's golang-cfssl: `cfssl serve` with a P-256 CA
#     and its SQLite certdb, POST /api/v1/cfssl/sign) against a release `tokentool serve` on
#     embedded defaults (POST /v1/certificates). Each request carries its own P-256 CSR (and, for
#     tokentool, its own HS256 token: own sub and jti), BODIES of them made before the timing.
#     Both record every certificate in SQLite before answering. Prints each side's requests/s,
#     p50, p99, errors, and tokentool / cfssl.
#  2. The webhook: `tokentool serve`'s POST /v1/auth (Ditto's request, a fresh token each) against
#     a bare Hummingbird 2 route that reads the same body and answers a short JSON
#     (Benchmarks/bareroute), and the ratio.
# Needs root for apt-get (golang-cfssl, wrk) where they are missing; says so and skips cfssl when
# it cannot install it. Usage: scripts/peer_load.sh [SECONDS] [CONNECTIONS] [BODIES]   (10 s, 32, 256)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-10}"
connections="${2:-32}"
bodies="${3:-256}"
install() { [ "$(id -u)" -eq 0 ] && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1; }
command -v wrk >/dev/null || install wrk || { echo "peer_load: needs wrk (apt-get install wrk)" >&2; exit 2; }
command -v cfssl >/dev/null || install golang-cfssl || echo "peer_load: cfssl is not installed and cannot be (apt-get install golang-cfssl): its row is skipped" >&2
python3 -c 'import jwt, cryptography' 2>/dev/null || { echo "peer_load: needs PyJWT and cryptography (scripts/bootstrap.sh)" >&2; exit 2; }
build=$(swift build -c release --product tokentool 2>&1) || { echo "$build" >&2; exit 1; }
build=$(swift build -c release --product bareroute 2>&1) || { echo "$build" >&2; exit 1; }
bin="$PWD/.build/release"
work=$(mktemp -d)
cfssl_pid="" bare_pid=""
source scripts/serve_lib.sh  # removes $work, and stops serve, at exit
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; [ -n "$cfssl_pid" ] && kill "$cfssl_pid" 2>/dev/null; [ -n "$bare_pid" ] && kill "$bare_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
echo "peer_load: $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg), ${seconds} s per side, $connections connections"

load() {  # load NAME SCRIPT URL: a 1 s warm-up, then the timed run; prints "NAME: RESULT…"
    wrk -t2 -c"$connections" -d1s -s "$2" "$3" >/dev/null
    local result
    result=$(wrk -t2 -c"$connections" -d"${seconds}s" --latency -s "$2" "$3" | grep '^RESULT')
    echo "$1: ${result#RESULT }"
}
rate() { echo "$1" | awk '{for (i = 1; i <= NF; i++) if ($i == "requests/s") print $(i + 1)}'; }

# tokentool serve (release, embedded defaults) and its requests.
start_serve "$bin/tokentool"
python3 - "$work/tokentool-state/dev-hs256.secret" "$bodies" "$work" <<'PY'
import json, sys, time, uuid
import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
secret, count, work = open(sys.argv[1], "rb").read(), int(sys.argv[2]), sys.argv[3]
now = int(time.time())
files = {name: open(f"{work}/{name}.lua", "w") for name in ("issue", "cfssl", "auth")}
for out in files.values():
    out.write("return {\n")
for i in range(count):
    def token():
        return jwt.encode({"iss": "tokentool-dev", "sub": f"load-{i}", "name": f"Load {i}", "iat": now, "exp": now + 3600,
                           "jti": str(uuid.uuid4())}, secret, algorithm="HS256")
    key = ec.generate_private_key(ec.SECP256R1())
    csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, f"device-{i}")])).sign(key, hashes.SHA256())
    pem = csr.public_bytes(serialization.Encoding.PEM).decode()
    files["issue"].write("[==[" + json.dumps({"provider": "dev", "token": token(), "csr": pem}) + "]==],\n")
    files["cfssl"].write("[==[" + json.dumps({"certificate_request": pem}) + "]==],\n")
    files["auth"].write("[==[" + json.dumps({"appID": "dev", "version": 1, "provider": "dev", "token": token()}) + "]==],\n")
for out in files.values():
    out.write("}\n")
    out.close()
PY
for name in issue cfssl auth; do wrk_script "$work/$name.lua" "$work/$name.wrk.lua"; done

# 1. Issuance: cfssl, then tokentool.
if command -v cfssl >/dev/null; then
    mkdir -p "$work/cfssl"
    (
        cd "$work/cfssl"
        echo '{"CN": "peer_load CA", "key": {"algo": "ecdsa", "size": 256}}' | cfssl gencert -initca - 2>/dev/null | cfssljson -bare ca
        echo '{"signing": {"default": {"expiry": "1h", "usages": ["digital signature", "server auth", "client auth"]}}}' > config.json
        python3 - <<'PY'
import sqlite3
db = sqlite3.connect("certs.db")
# cfssl's certdb table (its columns as cfssl 1.2 writes them).
db.executescript("""
CREATE TABLE certificates (serial_number blob NOT NULL, authority_key_identifier blob NOT NULL, ca_label blob,
  status blob NOT NULL, reason int, expiry timestamp, revoked_at timestamp, pem blob NOT NULL,
  PRIMARY KEY (serial_number, authority_key_identifier));
CREATE TABLE ocsp_responses (serial_number blob NOT NULL, authority_key_identifier blob NOT NULL, body blob NOT NULL,
  expiry timestamp, PRIMARY KEY (serial_number, authority_key_identifier));
""")
db.close()
PY
        echo "{\"driver\": \"sqlite3\", \"data_source\": \"$work/cfssl/certs.db\"}" > db.json
    )
    cfssl_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    (cd "$work/cfssl" && exec cfssl serve -address 127.0.0.1 -port "$cfssl_port" -ca ca.pem -ca-key ca-key.pem -config config.json \
        -db-config db.json -loglevel 5 > "$work/cfssl/serve.log" 2>&1) &
    cfssl_pid=$!
    for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$cfssl_port/api/v1/cfssl/info" -d '{}' && break; sleep 0.1; done
    cfssl_result=$(load "cfssl 1.2 POST /api/v1/cfssl/sign" "$work/cfssl.wrk.lua" "http://127.0.0.1:$cfssl_port/api/v1/cfssl/sign")
    echo "$cfssl_result"
    recorded=$(python3 -c "import sqlite3; print(sqlite3.connect('$work/cfssl/certs.db').execute('SELECT count(*) FROM certificates').fetchone()[0])")
    echo "  cfssl's certdb holds $recorded certificates"
    kill "$cfssl_pid"; wait "$cfssl_pid" 2>/dev/null || true; cfssl_pid=""
fi
issue_result=$(load "tokentool POST /v1/certificates" "$work/issue.wrk.lua" "http://127.0.0.1:$port/v1/certificates")
echo "$issue_result"
if [ -n "${cfssl_result:-}" ]; then
    python3 -c "print(f'issuance: tokentool / cfssl = {$(rate "$issue_result") / max($(rate "$cfssl_result"), 1):.1f}')"
fi

# 2. The webhook against a bare Hummingbird route.
auth_result=$(load "tokentool POST /v1/auth" "$work/auth.wrk.lua" "http://127.0.0.1:$port/v1/auth")
echo "$auth_result"
("$bin/bareroute" > "$work/bare.log" 2>&1) &
bare_pid=$!
for _ in $(seq 100); do grep -q "listening on" "$work/bare.log" 2>/dev/null && break; sleep 0.1; done
bare_port=$(grep -o 'listening on [0-9]*' "$work/bare.log" | grep -o '[0-9]*$')
bare_result=$(load "bare Hummingbird route POST /v1/auth" "$work/auth.wrk.lua" "http://127.0.0.1:$bare_port/v1/auth")
echo "$bare_result"
python3 -c "print(f'webhook: tokentool / bare Hummingbird route = {$(rate "$auth_result") / max($(rate "$bare_result"), 1):.3f}')"
