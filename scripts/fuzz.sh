#!/usr/bin/env bash
# Builds TokenKit's libFuzzer targets (Fuzz/) with -sanitize=fuzzer,address and runs each for
# SECONDS (default 60), seeded from TestVectors. Findings (crash-*, leak-*, timeout-*) land in
# fuzz-out/<target>/; turn each into a regression test. Usage: scripts/fuzz.sh [SECONDS] [TARGET…]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(FuzzToken FuzzJWK FuzzKeyFile FuzzCSR FuzzWebhook)

# SwiftPM hands the Swift frontend -sanitize=fuzzer without the coverage it implies (seen with Swift
# 6.3.1: the objects had AddressSanitizer but no __sanitizer_cov calls, and libFuzzer ran blind), so
# the coverage is asked for explicitly.
swift build --package-path Fuzz -c release --build-path .build-fuzz \
    --sanitize=fuzzer --sanitize=address -Xswiftc -parse-as-library -Xswiftc -sanitize-coverage=edge,trace-cmp >/dev/null

seed() {  # seed DIR FILE…: one file per input line or whole file
    local dir=$1; shift
    mkdir -p "$dir"
    local n=0
    for f in "$@"; do cp "$f" "$dir/seed-$n"; n=$((n + 1)); done
}
work=fuzz-out
mkdir -p "$work"
# FuzzToken: first byte 0 = a token as is, 1 = "header\npayload" to be signed.
mkdir -p "$work/FuzzToken/corpus"
i=0
head -20 TestVectors/peers/rs256_tokens.txt | while read -r t; do printf '\0%s' "$t" > "$work/FuzzToken/corpus/tok-$i"; i=$((i + 1)); done
cut -f4 TestVectors/peers/cases.tsv | while read -r t; do printf '\0%s' "$t" > "$work/FuzzToken/corpus/case-$RANDOM"; done
printf '\1{"alg":"HS256","typ":"JWT"}\n{"iss":"i","sub":"s","exp":1700000100,"iat":1699999999,"aud":["a","b"],"x":[1,2.5e3,null,true]}' > "$work/FuzzToken/corpus/signed-0"
printf '\1{"alg":"HS256","crit":["b64"],"b64":false}\n{"sub":"\\u00e9"}' > "$work/FuzzToken/corpus/signed-1"
seed "$work/FuzzJWK/corpus" TestVectors/jose/latchset/*.jwk TestVectors/jose/latchset/*.jwkset
seed "$work/FuzzKeyFile/corpus" TestVectors/peers/*.pem
seed "$work/FuzzCSR/corpus" TestVectors/x509/pyca-requests/* TestVectors/x509/limbo-assets/*.csr
# FuzzWebhook: first byte even = /v1/auth, odd = /v1/certificates; @T = a valid token, @C = a valid CSR.
mkdir -p "$work/FuzzWebhook/corpus"
printf '\0{"appID":"dev","provider":"dev","token":"@T"}' > "$work/FuzzWebhook/corpus/auth-ok"
printf '\0{"databaseID":"dev","provider":"dev","token":"@T","x":[1,-2.5e300,{"a":null}]}' > "$work/FuzzWebhook/corpus/auth-extra"
printf '\0{"appID":"other","provider":"pda","token":"a.b.c"}' > "$work/FuzzWebhook/corpus/auth-bad"
printf '\1{"provider":"dev","token":"@T","csr":"@C"}' > "$work/FuzzWebhook/corpus/cert-ok"
printf '\1{"provider":"dev","token":"@T","csr":"@C","validitySeconds":-1e999}' > "$work/FuzzWebhook/corpus/cert-validity"
printf '\1{"provider":"dev","token":"@T","csr":"-----BEGIN CERTIFICATE REQUEST-----\\nMIIB\\n-----END CERTIFICATE REQUEST-----"}' > "$work/FuzzWebhook/corpus/cert-bad"

# Swift's backtracer would symbolicate the huge sanitizer binary for minutes after a crash.
export SWIFT_BACKTRACE=enable=no
for target in "${targets[@]}"; do
    mkdir -p "$work/$target/findings"
    echo "== $target: ${seconds}s"
    (cd "$work/$target/findings" && "../../../.build-fuzz/release/$target" ../corpus \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 2>&1 | tail -12)
done
