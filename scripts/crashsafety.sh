#!/usr/bin/env bash
# kill -9 `tokentool serve` during sustained issuance, restart it, check the ledger; ROUNDS times
# (default 10). See scripts/crash_safety.py for what is checked. Usage: scripts/crashsafety.sh [ROUNDS] [CLIENTS]
set -euo pipefail
cd "$(dirname "$0")/.."
swift build -c release --product tokentool >/dev/null
exec python3 scripts/crash_safety.py --tokentool .build/release/tokentool --rounds "${1:-10}" --clients "${2:-8}"
