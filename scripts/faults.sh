#!/usr/bin/env bash
# Fault tests for `tokentool serve` (issue 58, item 2): a full disk, a ledger that fills its disk,
# and EIO from the ledger's writes and syncs, under load; every certificate answered 200 must be in
# the ledger after a restart, and issuance must work again without one. See scripts/faults.py.
#
# Usage: sudo scripts/faults.sh [--runs N] [--tokentool PATH] [--scenario disk-full|ledger-growth|io-errors|all] [--cpus LIST]
#   --runs N         runs of each scenario (default 10)
#   --tokentool PATH the binary to test (default .build/debug/tokentool; not built here)
#   --scenario S     one scenario, or all (default)
#   --cpus LIST      pin the test and its servers to these CPUs (taskset -c LIST), e.g. --cpus 1
#   other options go to scripts/faults.py (--disk-mb 24, --growth-mb 16, --hold 8, --inject-seconds 5,
#   --inject-fdatasync 3+5, --inject-pwrite 20+40, --recover-within 20, --stable 4, --clients 8, ...)
# Needs root (mount -t tmpfs; strace -p) and strace (apt-get install strace); a scenario that
# cannot run says `faults: SKIP <scenario>: <reason>` and is not counted. Runs at nice 10.
# Exit status 1 when a run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=10
tool=.build/debug/tokentool
scenario=all
cpus=""
extra=()
usage="usage: sudo scripts/faults.sh [--runs N] [--tokentool PATH] [--scenario disk-full|ledger-growth|io-errors|all] [--cpus LIST]"
while [ $# -gt 0 ]; do
    case "$1" in
    --runs) runs="${2:?$usage}"; shift 2 ;;
    --tokentool) tool="${2:?$usage}"; shift 2 ;;
    --scenario) scenario="${2:?$usage}"; shift 2 ;;
    --cpus) cpus="${2:?$usage}"; shift 2 ;;
    -h | --help) echo "$usage"; exit 0 ;;
    --*) extra+=("$1" "${2:?$usage}"); shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
    esac
done
case "$scenario" in disk-full | ledger-growth | io-errors | all) ;; *) echo "$usage" >&2; exit 2 ;; esac
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "faults: --runs must be a positive number" >&2; exit 2; }
if [ ! -x "$tool" ]; then
    echo "faults: no tokentool binary at $tool: build it first (swift build --product tokentool, which makes .build/debug/tokentool), or pass --tokentool PATH" >&2
    exit 2
fi
command -v openssl >/dev/null || { echo "faults: openssl is needed (apt-get install openssl)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "faults: python3 is needed (apt-get install python3)" >&2; exit 2; }
if [ "$(id -u)" != 0 ]; then
    echo "faults: not root: the scenarios need mount -t tmpfs and strace -p; run it with sudo (they are skipped otherwise)"
fi
if ! command -v strace >/dev/null && { [ "$scenario" = all ] || [ "$scenario" = io-errors ]; }; then
    echo "faults: strace is missing: apt-get install strace (io-errors is skipped without it)"
fi

# The runs' temp dirs (and their tmpfs mounts) live under $work. Should the Python script itself be
# killed, this unmounts what it left mounted and kills the servers whose process groups it recorded.
work=$(mktemp -d "${TMPDIR:-/tmp}/tokentool-faults.XXXXXX")
cleanup() {
    local pgid_file pgid point
    for pgid_file in "$work"/*/server-*.pgid; do
        [ -e "$pgid_file" ] || continue
        pgid=${pgid_file##*/server-}
        pgid=${pgid%.pgid}
        # Only a group that is still a tokentool server.
        if [ -r "/proc/$pgid/cmdline" ] && tr '\0' ' ' <"/proc/$pgid/cmdline" | grep -q "serve --state"; then
            kill -KILL -- "-$pgid" 2>/dev/null || true
        fi
    done
    # Deepest first.
    while read -r point; do
        umount "$point" 2>/dev/null || umount -l "$point" 2>/dev/null || true
    done < <(awk -v w="$work/" 'index($2, w) == 1 { print $2 }' /proc/mounts | sort -r)
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

pin=()
[ -n "$cpus" ] && pin=(taskset -c "$cpus")
status=0
nice -n 10 "${pin[@]}" python3 scripts/faults.py --tokentool "$tool" --runs "$runs" --scenario "$scenario" --workdir "$work" "${extra[@]}" || status=$?
exit "$status"
