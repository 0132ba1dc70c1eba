#!/usr/bin/env bash
# Installs what building and testing tokentool needs on Debian 12 (Swift itself must already be
# installed): OpenSSL 3, libjwt and SQLite headers (SQLite: the PeerCA ledger, via GRDB), the
# PostgreSQL server (the tests start a throw-away one on loopback: scripts/pgtest.sh), wrk (load test), pkg-config, valgrind (leak check), the openssl binary (interoperability
# tests), strace (scripts/faults.sh injects I/O errors with it), and Python 3 with PyJWT (interoperability tests). Safe to run again: it installs only
# what is missing. Run as root or with sudo available.
set -euo pipefail

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

missing=()
for pkg in libssl-dev libjwt-dev libsqlite3-dev postgresql pkg-config openssl python3 valgrind wrk strace; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "bootstrap: installing ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! python3 -c 'import jwt, cryptography' >/dev/null 2>&1; then
    echo "bootstrap: installing PyJWT"
    python3 -m pip install --quiet pyjwt cryptography 2>/dev/null \
        || python3 -m pip install --quiet --break-system-packages pyjwt cryptography 2>/dev/null \
        || as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-jwt python3-cryptography >/dev/null
fi
python3 -c 'import jwt, cryptography' || { echo "bootstrap: PyJWT could not be installed" >&2; exit 1; }
if ! python3 -c 'import openapi_spec_validator, openapi_schema_validator' >/dev/null 2>&1; then
    echo "bootstrap: installing openapi-spec-validator (the OpenAPI contract test)"
    python3 -m pip install --quiet openapi-spec-validator openapi-schema-validator 2>/dev/null \
        || python3 -m pip install --quiet --break-system-packages openapi-spec-validator openapi-schema-validator
fi
pkg-config --exists openssl libjwt || { echo "bootstrap: pkg-config cannot find openssl/libjwt" >&2; exit 1; }
echo "bootstrap: ready (OpenSSL $(pkg-config --modversion openssl), libjwt $(pkg-config --modversion libjwt), PyJWT $(python3 -c 'import jwt; print(jwt.__version__)'))"
