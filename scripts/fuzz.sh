#!/usr/bin/env bash
# Builds TokenKit's libFuzzer targets (Fuzz/) with -sanitize=fuzzer,address and runs each for
# SECONDS (default 60), seeded from TestVectors. Findings (crash-*, leak-*, timeout-*) land in
# fuzz-out/<target>/; turn each into a regression test. Each run appends a line to
# fuzz-out/runs.tsv (date, target, wall s, CPU s, executions, new units, exit status, findings);
# `scripts/fuzz.sh --totals` sums it per target (the CPU hours the README reports).
# FUZZ_IDLE=1 runs the fuzzers in a session of their own whose scheduling group has nice 19, so
# they take only the CPU nothing else wants: with the kernel's autogroups (sched_autogroup_enabled),
# `nice -n 19` counts only inside one's own session's group and a fuzzer still got a full core's
# share against a build or benchmark in another session.
# FUZZ_TIMEOUT (default 10) is libFuzzer's -timeout: the wall-clock seconds one input may take. A
# fuzzer paused by SIGSTOP (to keep a benchmark's CPUs quiet) counts the pause against it, so
# raise it for runs that will be paused.
# Usage: [FUZZ_NO_BUILD=1] [FUZZ_IDLE=1] [FUZZ_TIMEOUT=S] scripts/fuzz.sh [SECONDS] [TARGET…]
#        scripts/fuzz.sh --totals        CPU hours, executions and failed runs per target (fuzz-out/runs.tsv)
#        scripts/fuzz.sh --save-corpus   minimized corpora into Fuzz/Corpus/<target>.tar.xz
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${FUZZ_IDLE:-0}" = 1 ]; then
    if [ "${FUZZ_IDLE_GROUP:-}" != "$$" ] && [ -w /proc/self/autogroup ]; then
        # A new session (and so a new autogroup) just for this script; --wait keeps the caller waiting.
        FUZZ_IDLE_GROUP=pending exec setsid --wait bash -c 'export FUZZ_IDLE_GROUP=$$; echo 19 > /proc/self/autogroup; exec "$0" "$@"' "$PWD/scripts/fuzz.sh" "$@"
    fi
fi
if [ "${1:-}" = "--save-corpus" ]; then
    # Minimizes each target's corpus (libFuzzer -merge=1: the fewest inputs with the same
    # coverage) into Fuzz/Corpus/<target>.tar.xz, which later runs (and other machines) start
    # from. Needs the binaries built (a run of this script builds them).
    mkdir -p Fuzz/Corpus
    for dir in fuzz-out/*/corpus; do
        [ -d "$dir" ] || continue
        target=$(basename "$(dirname "$dir")")
        binary="$PWD/.build-fuzz/release/$target"
        [ -x "$binary" ] || { echo "$target: not built; run scripts/fuzz.sh first" >&2; continue; }
        min=$(mktemp -d)
        (cd "$(dirname "$dir")" && SWIFT_BACKTRACE=enable=no "$binary" -merge=1 -timeout=60 -rss_limit_mb=2048 "$min" corpus > merge.log 2>&1) \
            || { echo "$target: merge failed (fuzz-out/$target/merge.log)" >&2; rm -rf "$min"; continue; }
        tar -C "$min" -cJf "Fuzz/Corpus/$target.tar.xz" .
        echo "$target: $(ls "$dir" | wc -l) inputs -> $(ls "$min" | wc -l) kept, $(du -k "Fuzz/Corpus/$target.tar.xz" | cut -f1) KiB"
        rm -rf "$min"
    done
    exit 0
fi
if [ "${1:-}" = "--totals" ]; then
    [ -f fuzz-out/runs.tsv ] || { echo "no runs recorded in fuzz-out/runs.tsv" >&2; exit 1; }
    awk -F'\t' '{ wall[$2] += $3; cpu[$2] += $4; ex[$2] += $5; nu[$2] += $6; runs[$2]++; if ($7 != 0 || $8 != 0) bad[$2]++ }
        END { printf "%-12s %5s %10s %10s %14s %10s %s\n", "target", "runs", "wall_h", "cpu_h", "executions", "new_units", "failed_runs";
              for (t in runs) printf "%-12s %5d %10.2f %10.2f %14d %10d %d\n", t, runs[t], wall[t] / 3600, cpu[t] / 3600, ex[t], nu[t], bad[t] }' fuzz-out/runs.tsv
    exit 0
fi
seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(FuzzToken FuzzJWK FuzzKeyFile FuzzCSR FuzzWebhook)

# SwiftPM hands the Swift frontend -sanitize=fuzzer without the coverage it implies (seen with Swift
# 6.3.1: the objects had AddressSanitizer but no __sanitizer_cov calls, and libFuzzer ran blind), so
# the coverage is asked for explicitly.
# FUZZ_NO_BUILD=1 runs the binaries as built (long runs while the sources change); the
# instrumentation check below still applies.
if [ "${FUZZ_NO_BUILD:-0}" != 1 ]; then
    # SwiftPM keeps the build plan of the parent package (a path dependency of Fuzz/) when a source
    # file is added to it, and the build then fails to find the new file's types (seen with a new
    # file in Sources/PeerCA). A source file missing from the plan drops the plan, not the objects.
    for module in TokenKit PeerCA; do
        list=".build-fuzz/release/$module.build/sources"
        [ -f "$list" ] || continue
        if find "Sources/$module" -name '*.swift' | while read -r f; do grep -qF "$PWD/$f" "$list" || { echo "$f"; break; }; done | grep -q .; then
            rm -f .build-fuzz/release.yaml .build-fuzz/plugin-tools.yaml .build-fuzz/release/description.json .build-fuzz/release/plugin-tools-description.json
        fi
    done
    swift build --package-path Fuzz -c release --build-path .build-fuzz \
        --sanitize=fuzzer --sanitize=address -Xswiftc -parse-as-library -Xswiftc -sanitize=fuzzer >/dev/null
fi

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

# Corpora kept from earlier runs (--save-corpus), so coverage carries over from machine to machine.
# Inputs are named by their SHA-1, so one already there is the same input: it is kept (this also
# lets two runs of different targets start at once).
for target in "${targets[@]}"; do
    archive="Fuzz/Corpus/$target.tar.xz"
    [ -f "$archive" ] || continue
    mkdir -p "$work/$target/corpus"
    tar -C "$work/$target/corpus" --skip-old-files -xJf "$archive"
done

# Past findings (Fuzz/Regressions/<target>/), fixed since: part of every corpus, so each run's
# first pass replays them.
for target in "${targets[@]}"; do
    dir="Fuzz/Regressions/$target"
    [ -d "$dir" ] || continue
    mkdir -p "$work/$target/corpus"
    cp "$dir"/* "$work/$target/corpus/"
done

# Swift's backtracer would symbolicate the huge sanitizer binary for minutes after a crash.
export SWIFT_BACKTRACE=enable=no
for target in "${targets[@]}"; do
    mkdir -p "$work/$target/findings"
    binary="$PWD/.build-fuzz/release/$target"
    # Instrumented or not: a binary whose Swift code lacks coverage runs blind (libFuzzer then
    # warns "Is the code instrumented for coverage?"), and one built with the old trace-pc-guard
    # coverage refuses to start. Either stops here rather than count as fuzzing.
    check=$(cd "$work/$target/findings" && "$binary" ../corpus -runs=2000 2>&1 || true)
    if grep -q "ERROR: \(AddressSanitizer\|LeakSanitizer\|libFuzzer\)" <<<"$check"; then
        echo "$target: the corpus (with Fuzz/Regressions) fails before fuzzing starts; the finding is in $work/$target/findings:" >&2
        grep -m3 "ERROR\|SUMMARY" <<<"$check" >&2 || true
        exit 1
    fi
    if ! grep -q "cov: [0-9]" <<<"$check" || grep -q "instrumented for coverage\|no longer supported" <<<"$check"; then
        echo "$target: not instrumented for coverage; rebuild (rm -rf .build-fuzz):" >&2
        grep -m3 "WARNING\|ERROR\|no longer" <<<"$check" >&2 || true
        exit 1
    fi
    echo "== $target: ${seconds}s"
    log="$PWD/$work/$target/last-run.log"
    status=0
    (cd "$work/$target/findings" && /usr/bin/time -f "cpu_seconds %U %S wall_seconds %e" "$binary" ../corpus \
        -max_total_time="$seconds" -timeout="${FUZZ_TIMEOUT:-10}" -rss_limit_mb=2048 -print_final_stats=1 > "$log" 2>&1) || status=$?
    tail -12 "$log"
    cpu=$(awk '/^cpu_seconds/ { printf "%.0f", $2 + $3 }' "$log")
    wall=$(awk '/^cpu_seconds/ { printf "%.0f", $5 }' "$log")
    executions=$(awk '/^stat::number_of_executed_units/ { print $2 }' "$log")
    units=$(awk '/^stat::new_units_added/ { print $2 }' "$log")
    findings=$(find "$work/$target/findings" -maxdepth 1 \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$target" "${wall:-0}" "${cpu:-0}" "${executions:-0}" "${units:-0}" "$status" "$findings" >> "$work/runs.tsv"
done
