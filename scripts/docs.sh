#!/usr/bin/env bash
# Builds the DocC documentation of every library product with swift-docc-plugin, failing on any
# DocC warning (a broken symbol link, an undocumented parameter of a documented function, …).
# The archives land in .build/plugins/Swift-DocC/outputs/<Target>.doccarchive.
# Usage: scripts/docs.sh [TARGET…]   (default: all six libraries)
set -euo pipefail
cd "$(dirname "$0")/.."
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(TokenKit PDAKeys PeerCA PeerCAPostgres TokenServer PeerClient)
for target in "${targets[@]}"; do
    log=$(mktemp)
    if swift package --disable-sandbox generate-documentation --target "$target" --warnings-as-errors >"$log" 2>&1; then
        echo "docs: $target ok"
    else
        cat "$log" >&2
        echo "docs: $target failed" >&2
        rm -f "$log"
        exit 1
    fi
    rm -f "$log"
done
