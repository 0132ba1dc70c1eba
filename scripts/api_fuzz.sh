#!/usr/bin/env bash
# API fuzzing of `tokentool serve` from its OpenAPI document (docs/openapi.json) with schemathesis
# (PyPI). Starts the server on embedded defaults in a temporary directory (the OS picks the port),
# runs every documented operation with generated requests, schema-conforming (positive) and
# schema-violating (negative), in schemathesis' examples, coverage and fuzzing phases, and checks
# each answer: no 5xx; status, content type, headers and body as documented; a schema-violating
# request refused with a 4xx (except OCSP, which answers malformed requests in-band). Hooks give
# part of the generated requests the dev provider and app and a token that is valid, or signed
# with the dev secret over generated claims and headers, or a valid one with a byte changed; a real
# CSR for /v1/certificates; a real OCSP request, or a mutation of it, for /v1/ocsp. So the fuzzing
# reaches token verification, the claim rules, issuance, the ledger and the OCSP responder, not
# only the request parser. The server must also survive and exit 0 on SIGTERM at the end.
#
# Usage: scripts/api_fuzz.sh [TOKENTOOL_BINARY] [MAX_EXAMPLES]
#   TOKENTOOL_BINARY  default .build/debug/tokentool (not built here)
#   MAX_EXAMPLES      test cases per operation in the fuzzing phase (--max-examples), default 50
# Environment (all optional):
#   API_FUZZ_MAX_TIME    seconds of budget for schemathesis (--max-time); fuzzing then repeats
#                        until it is spent, so the run takes about that long
#   API_FUZZ_TIMEOUT     hard wall-clock limit of the schemathesis run, default MAX_TIME+300 or 900
#   API_FUZZ_WORKERS     concurrent schemathesis workers, default 1
#   API_FUZZ_SEED        seed for a reproducible run (schemathesis prints the one it used)
#   API_FUZZ_REPORT_DIR  keep schemathesis' JUnit and NDJSON reports and the server's log there
#   API_FUZZ_ST_ARGS     more `st run` options, word-split (e.g. "--checks all", which overrides
#                        the configured checks)
# Needs python3 (schemathesis is installed with pip when missing); openssl for the OCSP request.
# Prints schemathesis' report, then the test cases per operation and what came back.
# Exits 0 when schemathesis finds nothing and the server survives and exits 0 on SIGTERM;
# non-zero otherwise.
set -euo pipefail

tool="${1:-.build/debug/tokentool}"
max_examples="${2:-50}"
# Resolve the binary against the caller's directory before moving to the repository root.
case "$tool" in
    /*) ;;
    *) if [ -n "${1:-}" ]; then tool="$PWD/$tool"; fi ;;
esac
cd "$(dirname "$0")/.."
root="$PWD"
case "$tool" in /*) ;; *) tool="$root/$tool" ;; esac
[ -x "$tool" ] || { echo "api_fuzz: no executable $tool (build it: swift build --product tokentool)" >&2; exit 2; }
[[ "$max_examples" =~ ^[1-9][0-9]*$ ]] || { echo "api_fuzz: MAX_EXAMPLES must be a positive integer" >&2; exit 2; }
max_time="${API_FUZZ_MAX_TIME:-}"
hard_limit="${API_FUZZ_TIMEOUT:-$(( ${max_time:-600} + 300 ))}"
workers="${API_FUZZ_WORKERS:-1}"

if ! python3 -c 'import schemathesis' 2>/dev/null; then
    python3 -m pip install --quiet "schemathesis==4.32.5" 2>/dev/null \
        || python3 -m pip install --quiet --break-system-packages "schemathesis==4.32.5"
fi
version=$(python3 -c 'from importlib.metadata import version; print(version("schemathesis"))')

work=$(mktemp -d)
server=""
fuzzer=""
stop_server() {
    # SIGTERM, then wait: the server finishes what is in flight and exits.
    [ -n "$server" ] || return 0
    local status=0
    kill -TERM "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || status=$?
    server=""
    return "$status"
}
cleanup() {
    if [ -n "$fuzzer" ]; then  # interrupted: stop schemathesis (timeout passes the signal on)
        kill -INT "$fuzzer" 2>/dev/null || true
        wait "$fuzzer" 2>/dev/null || true
    fi
    stop_server || true
    if [ -n "${API_FUZZ_REPORT_DIR:-}" ]; then
        mkdir -p "$API_FUZZ_REPORT_DIR"
        cp -r "$work/report/." "$API_FUZZ_REPORT_DIR/" 2>/dev/null || true
        cp "$work/serve.out" "$work/serve.err" "$API_FUZZ_REPORT_DIR/" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

(cd "$work" && exec "$tool" serve --port 0 --state "$work/state" > "$work/serve.out" 2> "$work/serve.err") &
server=$!
for _ in $(seq 600); do
    grep -q '"token":"' "$work/serve.out" 2>/dev/null && break
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
done
if ! grep -q '"token":"' "$work/serve.out"; then
    echo "api_fuzz: the server did not start:" >&2
    cat "$work/serve.out" "$work/serve.err" >&2
    exit 1
fi
# The port the OS picked, from "tokentool serve: listening on http://127.0.0.1:PORT (...)".
port=$(sed -n 's|^tokentool serve: listening on http://127\.0\.0\.1:\([0-9][0-9]*\).*|\1|p' "$work/serve.out" | head -1)
[ -n "$port" ] || { echo "api_fuzz: no listening line in:" >&2; cat "$work/serve.out" >&2; exit 1; }
token=$(grep -o '"token":"[^"]*"' "$work/serve.out" | head -1 | cut -d'"' -f4)
"$tool" csr --out "$work/device.key" > "$work/device.csr"
# A real OCSP request (for a certificate this server issues now), when openssl is there.
python3 scripts/issue_leaf.py "http://127.0.0.1:$port" "$token" "$work/device.csr" "$work"
if command -v openssl >/dev/null; then
    openssl ocsp -issuer "$work/issuer.pem" -cert "$work/leaf.pem" -no_nonce -reqout "$work/ocsp.der" >/dev/null
fi

cat > "$work/hooks.py" <<'PY'
"""Schemathesis hooks for scripts/api_fuzz.sh. Part of the generated requests get the dev provider
and app, and a token that is valid, or signed with the dev secret over generated claims and
headers, or a valid one with a byte changed; certificates also get a real CSR, OCSP a real request
or a mutation of it. So the fuzzing reaches token verification, claim rules, issuance, the ledger
and the OCSP responder, not only the request parser."""
import base64
import copy
import hashlib
import hmac
import json
import os
import time

import schemathesis
from hypothesis import strategies as st

TOKEN = os.environ["API_FUZZ_TOKEN"]
with open(os.environ["API_FUZZ_SECRET"], "rb") as file:
    SECRET = file.read()
with open(os.environ["API_FUZZ_CSR"]) as file:
    CSR = file.read()
OCSP = open(os.environ["API_FUZZ_OCSP"], "rb").read() if os.path.exists(os.environ["API_FUZZ_OCSP"]) else None
VALID = {
    "/v1/auth": {"appID": "dev", "provider": "dev", "token": TOKEN},
    "/v1/certificates": {"provider": "dev", "token": TOKEN, "csr": CSR},
}
IDENTITY = ("appID", "databaseID", "provider")

# The body of POST /v1/ocsp is DER, sent as it is.
schemathesis.serializer.alias("application/ocsp-request", "application/octet-stream")


@schemathesis.hook
def before_load_schema(context, raw_schema):
    """Adds a valid request as an explicit example of each token-taking operation (examples phase)."""
    for path, value in VALID.items():
        media = raw_schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        media["examples"] = {"dev": {"value": copy.deepcopy(value)}}


def _b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _signed(parts):
    """An HS256 JWS with the dev secret over a generated header and claims."""
    header, claims, ascii_only = parts
    signing_input = _b64(json.dumps(header, ensure_ascii=ascii_only).encode()) + "." + _b64(
        json.dumps(claims, ensure_ascii=ascii_only).encode())
    return signing_input + "." + _b64(hmac.new(SECRET, signing_input.encode(), hashlib.sha256).digest())


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=6)
_now = int(time.time())
_date = st.one_of(st.integers(_now - 7200, _now + 7200), st.integers(-(2**70), 2**70),
                  st.floats(allow_nan=False, allow_infinity=False), _json)
_claims = st.fixed_dictionaries({}, optional={
    "iss": st.just("tokentool-dev") | _json, "sub": st.text(max_size=40) | _json, "exp": _date, "nbf": _date,
    "iat": _date, "jti": st.text(max_size=40) | _json, "name": st.text(max_size=40) | _json, "aud": _json,
}).flatmap(lambda claims: st.dictionaries(st.text(max_size=10), _json, max_size=3).map(lambda extra: {**extra, **claims}))
_header = st.just({"alg": "HS256", "typ": "JWT"}) | st.fixed_dictionaries(
    {"alg": st.sampled_from(["HS256", "none", "RS256", "HS384", "hs256"]) | _json},
    optional={"typ": st.sampled_from(["JWT", "at+jwt"]) | _json, "kid": _json, "crit": _json, "b64": _json})
SIGNED = st.tuples(_header, _claims, st.booleans()).map(_signed)


def _mutated(value):
    """The value (str or bytes) with one element changed, or cut short."""
    alphabet = st.sampled_from("ABCxyz019-_.=+/ \x00é") if isinstance(value, str) else st.integers(0, 255).map(lambda b: bytes([b]))
    flip = st.tuples(st.integers(0, len(value) - 1), alphabet).map(
        lambda change: value[: change[0]] + change[1] + value[change[0] + 1 :])
    cut = st.integers(0, len(value) - 1).map(lambda length: value[:length])
    return flip | cut


def _with(body, **values):
    """The body with the named fields replaced where the generated value is a string: a value
    generated with another type (or left out) stays, so a negative case stays negative."""
    new = dict(body)
    for name, value in values.items():
        if isinstance(new.get(name), str):
            new[name] = value
    return new


@schemathesis.hook
def flatmap_body(context, body):
    operation = context.operation
    if operation is None:
        return st.just(body)
    if operation.path == "/v1/ocsp" and OCSP is not None:
        return st.just(body) | st.just(OCSP) | _mutated(OCSP)
    if operation.path not in VALID or not isinstance(body, dict):
        return st.just(body)
    dev = {name: "dev" for name in IDENTITY}
    tokens = [st.just(body.get("token")), st.just(TOKEN), SIGNED, _mutated(TOKEN)]
    if operation.path == "/v1/certificates":
        csrs = st.just(body.get("csr")) | st.just(CSR) | _mutated(CSR)
        made = st.tuples(st.one_of(tokens), csrs).map(lambda pair: _with(body, **dev, token=pair[0], csr=pair[1]))
    else:
        made = st.one_of(tokens).map(lambda token: _with(body, **dev, token=token))
    return st.just(body) | made
PY

# The checks: no 5xx; status, content type, headers and body as documented; a schema-violating
# request refused with a 4xx. OCSP reports a malformed request in its own response (RFC 6960 §2.3:
# responseStatus malformedRequest, HTTP 200), so that last check does not apply to POST /v1/ocsp.
cat > "$work/schemathesis.toml" <<'TOML'
[checks]
enabled = false
not_a_server_error.enabled = true
status_code_conformance.enabled = true
content_type_conformance.enabled = true
response_headers_conformance.enabled = true
response_schema_conformance.enabled = true
negative_data_rejection.enabled = true

[[operations]]
include-path = "/v1/ocsp"
checks.negative_data_rejection.enabled = false
TOML

options=(
    --url "http://127.0.0.1:$port"
    --mode all
    --phases "examples,coverage,fuzzing"
    --max-examples "$max_examples"
    --workers "$workers"
    --request-timeout 20
    --generation-database none
    --suppress-health-check "too_slow,filter_too_much"
    --continue-on-failure
    --report "junit,ndjson" --report-dir "$work/report"
    --no-color
)
# Extra schemathesis options, word-split (e.g. API_FUZZ_ST_ARGS="--checks all").
# shellcheck disable=SC2206
[ -z "${API_FUZZ_ST_ARGS:-}" ] || options+=(${API_FUZZ_ST_ARGS})
[ -z "$max_time" ] || options+=(--max-time "$max_time")
[ -z "${API_FUZZ_SEED:-}" ] || options+=(--seed "$API_FUZZ_SEED")

echo "api_fuzz: schemathesis $version, $tool on http://127.0.0.1:$port, $max_examples examples per operation${max_time:+, ${max_time} s budget}"
status=0
# In the background with `wait`, so a SIGTERM or SIGINT to this script is handled at once.
(cd "$work" && API_FUZZ_TOKEN="$token" API_FUZZ_CSR="$work/device.csr" API_FUZZ_OCSP="$work/ocsp.der" \
    API_FUZZ_SECRET="$work/state/dev-hs256.secret" SCHEMATHESIS_HOOKS="$work/hooks.py" \
    exec timeout --signal=INT --kill-after=30 "$hard_limit" \
    python3 -m schemathesis.cli --config-file "$work/schemathesis.toml" run "${options[@]}" "$root/docs/openapi.json") &
fuzzer=$!
wait "$fuzzer" || status=$?
fuzzer=""
if [ "$status" -eq 124 ]; then
    echo "api_fuzz: schemathesis did not finish within $hard_limit s" >&2
fi

# What was sent and what came back, per operation, from schemathesis' NDJSON events.
for ndjson in "$work"/report/ndjson-*.ndjson; do
    [ -f "$ndjson" ] || continue
    python3 - "$root/docs/openapi.json" "$ndjson" <<'PY' || true
import base64, collections, json, sys
spec = json.load(open(sys.argv[1]))
documented = {f"{method.upper()} {path}" for path, item in spec["paths"].items() for method in item}
cases, outcomes = collections.defaultdict(collections.Counter), collections.defaultdict(collections.Counter)
other = collections.Counter()
for line in open(sys.argv[2]):
    event = json.loads(line).get("ScenarioFinished")
    recorder = (event or {}).get("recorder") or {}
    for case_id, case in recorder.get("cases", {}).items():
        value = case["value"]
        operation = f"{value['method']} {value['path']}"
        response = (recorder.get("interactions", {}).get(case_id) or {}).get("response")
        status = response["status_code"] if response else "no answer"
        if operation not in documented:
            other[status] += 1
            continue
        cases[operation][value["meta"]["generation"]["mode"]] += 1
        outcome = str(status)
        if response:
            content = base64.b64decode(response.get("content", {}).get("$base64", "") or b"")
            try:
                body = json.loads(content)
            except ValueError:
                body = None
            if isinstance(body, dict) and "authenticate" in body:
                outcome += " accepted" if body["authenticate"] is True else f" refused {body.get('error', {}).get('code')}"
            elif isinstance(body, dict) and isinstance(body.get("error"), dict):
                outcome += " " + str(body["error"].get("code"))
            elif isinstance(body, dict) and "certificate" in body:
                outcome += " issued"
            elif value["path"] == "/v1/ocsp" and content[:1] == b"\x30":
                outcome += " malformedRequest" if content[4:5] == b"\x01" else (" successful" if len(content) > 5 else " ocsp status " + content[4:5].hex())
        outcomes[operation][outcome] += 1
print("api_fuzz: test cases per operation (positive/negative) and answers:")
for operation in sorted(documented):
    total = sum(cases[operation].values())
    answers = ", ".join(f"{name} x{count}" for name, count in outcomes[operation].most_common())
    print(f"  {operation}: {total} ({cases[operation]['positive']}/{cases[operation]['negative']}): {answers}")
print(f"  undocumented methods on documented paths: {sum(other.values())}: " + ", ".join(f"{k} x{v}" for k, v in other.most_common()))
print(f"api_fuzz: {len([o for o in documented if cases[o]])}/{len(documented)} operations, {sum(sum(c.values()) for c in cases.values())} test cases on them")
PY
done

# A server that died under the fuzzing is a failure even if every answer before it was right.
if ! kill -0 "$server" 2>/dev/null; then
    wait "$server" 2>/dev/null && code=0 || code=$?
    server=""
    echo "api_fuzz: the server died during the run (exit $code):" >&2
    tail -20 "$work/serve.err" >&2
    exit 1
fi
if ! stop_server; then
    echo "api_fuzz: the server did not exit cleanly on SIGTERM" >&2
    tail -20 "$work/serve.err" >&2
    status=1
fi
if [ "$status" -ne 0 ]; then
    echo "api_fuzz: FAILED (schemathesis exit $status)" >&2
    exit 1
fi
echo "api_fuzz: passed"
