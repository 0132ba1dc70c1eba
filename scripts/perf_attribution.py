#!/usr/bin/env python3
"""Where the CPU goes, from `perf script` output (issue 18's "what bounds it").

Reads the text of `perf script -F comm,tid,ip,sym,dso` (a recording made with call graphs:
`perf record -e cpu-clock --call-graph dwarf …`, or `-g`) on standard input and prints, for each
group of threads (Swift's concurrency pool, NIO's event loops, libdispatch's queues — GRDB's
writer and readers —, wrk, the rest):

- its share of the samples, split by what the sampled instruction was: crypto (BoringSSL's and
  OpenSSL's elliptic-curve, bignum and hash code), program code (the rest of the program's own:
  ours and our packages', Swift or C), the Swift
  runtime (retain/release, allocation, concurrency, libdispatch), the kernel, SQLite, libc;
- for everything that is not crypto, the Swift module of the nearest caller with a Swift name
  (so a `malloc` called by PeerCA counts for PeerCA), and the functions that cost the most.

Shares become microseconds when the caller says what one unit of work cost in all
(`--total-us`, e.g. a tokenbench row's `cpu_us`; samples are spread in proportion), or how many
units the recording covered (`--units` with `--frequency`, the `perf record -F` value: each sample
is then 1/frequency s of CPU).

Usage:
  perf script -i perf.data -F comm,tid,ip,sym,dso | scripts/perf_attribution.py --total-us 192
  perf script -i perf.data -F comm,tid,ip,sym,dso | scripts/perf_attribution.py --units 29360 --frequency 2000
"""
import argparse
import collections
import re
import sys

CRYPTO = re.compile(r"nistz|beeu|CCryptoBoringSSL|sha256|sha512|bn_|BN_|ecp_|ec_GFp|ECDSA|EC_|ossl_|OPENSSL_|aes_hw|gcm_")
RUNTIME = ("libswiftCore.so", "libswift_Concurrency.so", "libdispatch.so", "libswiftDispatch.so", "libBlocksRuntime.so")
# Threads by what they run, from their names (cut to 15 characters by the kernel): Swift's
# concurrency pool ("com.apple.root.default-qos"), NIO's event loops, libdispatch's overcommit
# threads (GRDB's writer and reader queues).
# scripts/issuance_load.sh groups the server's per-thread CPU with the same function.
GROUPS = (
    ("Swift pool", lambda name: name.endswith("default-qos")),
    ("NIO event loops", lambda name: name.startswith("NIO-")),
    ("dispatch queues (GRDB writer and readers)", lambda name: name.endswith("overcommit")),
    ("wrk", lambda name: name == "wrk"),
    ("idle", lambda name: name == "swapper"),
)


def group_of(comm):
    return next((label for label, matches in GROUPS if matches(comm)), "other")


def swift_module(symbol):
    """The module of a mangled Swift symbol (`$s6PeerCA…` → PeerCA), or None."""
    match = re.match(r"\$s(\d+)([A-Za-z_][A-Za-z_0-9]*)", symbol)
    if not match:
        return None
    module = match.group(2)[: int(match.group(1))]
    return None if module in ("s", "ss", "Swift") else module


def kind_of(symbol, dso):
    if CRYPTO.search(symbol) or dso.startswith("libcrypto"):
        return "crypto"
    if dso == "[kernel.kallsyms]":
        return "kernel"
    if dso in RUNTIME:
        return "Swift runtime"
    if dso.startswith(("libc.", "libc-", "ld-linux", "libm.")):
        return "libc"
    if "sqlite" in dso:
        return "SQLite"
    return "program code"


def samples(lines):
    """Each sample as (comm, [(symbol, dso), …]) from the leaf outwards."""
    comm, frames = None, []
    for line in lines:
        if not line.strip():
            continue
        if not line[0].isspace():
            if comm is not None:
                yield comm, frames
            comm, frames = line.split()[0], []
            continue
        parts = line.strip().split(None, 1)
        if len(parts) == 2:
            match = re.match(r"(.*) \((.*)\)$", parts[1])
            if match:
                frames.append((match.group(1), match.group(2).rsplit("/", 1)[-1]))
    if comm is not None:
        yield comm, frames


SELF_TEST_INPUT = """\
oot.default-qos 101
\t    7f01 __ecp_nistz256_mul_montx (/bin/tokentool)
\t    7f02 $s6PeerCA12ValidatedCSRV8fastPath (/bin/tokentool)

oot.default-qos 101
\t    7f03 swift_retain (/usr/lib/swift/linux/libswiftCore.so)
\t    7f04 $sSa6appendyyxnF (/bin/tokentool)
\t    7f05 $s8TokenKit10JSONParserV11parseObject (/bin/tokentool)

-qos.overcommit 102
\t    7f06 0x00000000000b7b8c (/usr/lib/x86_64-linux-gnu/libsqlite3.so.0.8.6)
\t    7f07 sqlite3_step (/usr/lib/x86_64-linux-gnu/libsqlite3.so.0.8.6)
\t    7f08 $s4GRDB9StatementC15executeAllSteps (/bin/tokentool)

-qos.overcommit 102
\t    7f09 iowrite16 ([kernel.kallsyms])
\t    7f0a $s4GRDB9StatementC15executeAllSteps (/bin/tokentool)

swapper 0
\t    7f0b pv_native_safe_halt ([kernel.kallsyms])
"""


def self_test():
    """Checks the attribution on a small made-up `perf script` text (CI runs it)."""
    import io
    import contextlib
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        report(io.StringIO(SELF_TEST_INPUT), total_us=40.0, units=None, frequency=None, top=5)
    text = out.getvalue()
    expected = [
        "perf_attribution: 5 samples, 40.0 µs outside idle",
        "Swift pool: 20.0 µs (crypto 10.0 µs, Swift runtime 10.0 µs)",
        "  outside crypto, by the nearest Swift caller's module: TokenKit 10.0 µs",
        "dispatch queues (GRDB writer and readers): 20.0 µs (SQLite 10.0 µs, kernel 10.0 µs)",
        "  outside crypto, by the nearest Swift caller's module: GRDB 20.0 µs",
        "idle: 10.0 µs (kernel 10.0 µs)",
    ]
    missing = [line for line in expected if line not in text.splitlines()]
    if missing:
        sys.exit("perf_attribution self-test failed; missing:\n" + "\n".join(missing) + "\n--- output:\n" + text)
    print("perf_attribution: self-test passed")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--total-us", type=float, help="CPU µs of one unit of work, all threads: shares become µs")
    parser.add_argument("--units", type=float, help="units of work in the recording (with --frequency)")
    parser.add_argument("--frequency", type=float, help="perf record -F (samples per second per CPU)")
    parser.add_argument("--top", type=int, default=12, help="functions to list per group (default 12)")
    parser.add_argument("--self-test", action="store_true", help="check the attribution on a made-up input and exit")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return
    report(sys.stdin, total_us=args.total_us, units=args.units, frequency=args.frequency, top=args.top)


def report(lines, total_us, units, frequency, top):
    """Prints the attribution of the `perf script` text in `lines` (see the module's text)."""
    kinds = collections.Counter()  # (group, kind) → samples
    modules = collections.Counter()  # (group, module) → samples, outside crypto
    functions = collections.Counter()  # (group, kind, caller) → samples, outside crypto
    count = 0
    for comm, frames in samples(lines):
        if not frames:
            continue
        count += 1
        group = group_of(comm)
        symbol, dso = frames[0]
        kind = kind_of(symbol, dso)
        kinds[(group, kind)] += 1
        if kind == "crypto":
            continue
        caller = next((s for s, _ in frames if swift_module(s)), None)
        module = swift_module(caller) if caller else ("SQLite" if kind == "SQLite" else "?")
        modules[(group, module)] += 1
        functions[(group, kind, caller or symbol)] += 1
    if count == 0:
        sys.exit("perf_attribution: no samples on standard input (perf script -F comm,tid,ip,sym,dso)")

    busy = count - sum(n for (g, _), n in kinds.items() if g == "idle")
    if total_us:
        scale, unit = total_us / busy, "µs"
    elif units and frequency:
        scale, unit = 1e6 / frequency / units, "µs"
    else:
        scale, unit = 100.0 / count, "%"

    def amount(n):
        return f"{n * scale:.1f} {unit}"

    totals = collections.Counter()
    for (group, _), n in kinds.items():
        totals[group] += n
    print(f"perf_attribution: {count} samples" + (f", {amount(busy)} outside idle" if unit == "µs" else ""))
    for group, n in totals.most_common():
        split = ", ".join(f"{kind} {amount(k)}" for (g, kind), k in kinds.most_common() if g == group)
        print(f"{group}: {amount(n)} ({split})")
        if group == "idle":
            continue
        outside = ", ".join(f"{module} {amount(m)}" for (g, module), m in modules.most_common() if g == group and m * scale >= 0.1)
        if outside:
            print(f"  outside crypto, by the nearest Swift caller's module: {outside}")
        listed = [(kind, caller, f) for (g, kind, caller), f in functions.most_common() if g == group][:top]
        for kind, caller, f in listed:
            name = re.sub(r"^\$s\d+", "", caller)[:90]
            print(f"    {amount(f):>10}  {kind:13s} {name}")


if __name__ == "__main__":
    main()
