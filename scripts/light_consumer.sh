#!/usr/bin/env bash
# What a package that only verifies tokens must resolve and build (issue 19, item 5): Package.swift
# guards every external product with a trait, so a consumer that writes `traits: []` resolves no
# package but tokentool, and one that writes `traits: ["PDAKeys"]` none of the server's (GRDB,
# Hummingbird, PostgresNIO, ArgumentParser, Prometheus). One unguarded `.product(…)` in
# Package.swift brings its package back for every consumer: this script fails then (and without the
# traits, SwiftPM refuses `traits: []` on a package that declares none, so it fails too).
#
# It copies this working tree (tracked and new files, uncommitted changes included) into a Git
# repository tagged 1.0.0 and depends on it by file:// URL, as a user's `.package(url:)` would:
#   1. a TokenKit-only consumer: resolves, checks that tokentool is the only package, builds it
#      (TokenKit alone: about 20 s) and runs a sign-and-verify;
#   2. a TokenKit+PDAKeys consumer: resolves, checks the count and that no server package is in it.
# Usage: scripts/light_consumer.sh [--build-pdakeys]   (also build and run consumer 2: minutes)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_pdakeys=0
[ "${1:-}" = "--build-pdakeys" ] && build_pdakeys=1
# TokenKit+PDAKeys: tokentool, async-http-client and the 22 packages it and PDAKeys need.
max_pdakeys=24
server_only=(grdb.swift hummingbird postgres-nio swift-argument-parser swift-prometheus)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

src="$work/tokentool"
mkdir "$src"
(cd "$root" && git ls-files -z --cached --others --exclude-standard \
    | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
    | tar --null -T - -cf -) | tar -xf - -C "$src"
git -C "$src" init -q
git -C "$src" add -A
git -C "$src" -c user.name=light-consumer -c user.email=light-consumer@localhost commit -qm "working tree"
git -C "$src" tag 1.0.0

# consumer DIR TRAITS PRODUCT…: a package with one executable target using those products.
consumer() {
    local dir=$1 traits=$2
    shift 2
    local deps="" imports="" product
    for product in "$@"; do
        deps+=".product(name: \"$product\", package: \"tokentool\"), "
        imports+="import $product"$'\n'
    done
    mkdir -p "$dir/Sources/consumer"
    cat >"$dir/Package.swift" <<EOF
// swift-tools-version:6.1
import PackageDescription

let package = Package(
    name: "consumer",
    dependencies: [.package(url: "file://$src", exact: "1.0.0", traits: $traits)],
    targets: [.executableTarget(name: "consumer", dependencies: [$deps])]
)
EOF
    cat >"$dir/Sources/consumer/main.swift" <<EOF
import Foundation
$imports
let key = try JWTKey.generate(.ec(.p256), kid: "k1")
let now = Int(Date().timeIntervalSince1970)
let token = try JWTSigner(key: key).sign(claims: ["sub": .string("device-42"), "exp": .integer(now + 600)])
print("verified", try JWTVerifier(key: key.publicKey).verify(token).claims.subject ?? "-")
EOF
}

# resolved DIR: the identities of the packages the consumer resolved, one a line.
resolved() {
    (cd "$1" && swift package --manifest-cache local resolve >"$1/resolve.log" 2>&1) \
        || { tail -5 "$1/resolve.log" >&2; echo "light_consumer: resolving $1 failed" >&2; exit 1; }
    sed -n 's/.*"identity" *: *"\([^"]*\)".*/\1/p' "$1/Package.resolved"
}

build_and_run() {
    local started=$SECONDS
    (cd "$1" && swift build --manifest-cache local >"$1/build.log" 2>&1) \
        || { tail -20 "$1/build.log" >&2; echo "light_consumer: building $1 failed" >&2; exit 1; }
    local out
    out=$(cd "$1" && swift run --skip-build consumer 2>&1)
    [ "$out" = "verified device-42" ] || { echo "light_consumer: $1 printed: $out" >&2; exit 1; }
    echo "$(grep -o '^\[[0-9]*/[0-9]*\]' "$1/build.log" | tail -1 | tr -d '[]' | cut -d/ -f2) build steps, $((SECONDS - started)) s"
}

failed=0
consumer "$work/tokenkit" '[]' TokenKit
packages=$(resolved "$work/tokenkit")
if [ "$packages" != "tokentool" ]; then
    echo "light_consumer: a TokenKit-only consumer (traits: []) resolved $(echo "$packages" | wc -l) packages, not tokentool alone:" >&2
    echo "$packages" | tr '\n' ' ' >&2
    echo >&2
    failed=1
else
    echo "light_consumer: TokenKit only (traits: []): 1 package resolved (tokentool); $(build_and_run "$work/tokenkit"), verify ok"
fi

consumer "$work/pdakeys" '["PDAKeys"]' TokenKit PDAKeys
packages=$(resolved "$work/pdakeys")
count=$(echo "$packages" | wc -l)
extra=()
for name in "${server_only[@]}"; do
    echo "$packages" | grep -qx "$name" && extra+=("$name")
done
if [ "$count" -gt "$max_pdakeys" ] || [ ${#extra[@]} -gt 0 ]; then
    echo "light_consumer: a TokenKit+PDAKeys consumer (traits: [\"PDAKeys\"]) resolved $count packages (at most $max_pdakeys expected)${extra[*]:+, server packages among them: ${extra[*]}}" >&2
    failed=1
else
    line="light_consumer: TokenKit+PDAKeys (traits: [\"PDAKeys\"]): $count packages resolved, no server package"
    [ $build_pdakeys -eq 1 ] && line+="; $(build_and_run "$work/pdakeys"), verify ok"
    echo "$line"
fi
exit $failed
