#!/usr/bin/env bash
# Issuance over HTTP against issuance in the library, in one run (issue 18):
#  1. tokenbench's peerca.issuance.2core row (library: token verify, CSR check, certificate,
#     durable SQLite ledger; 64 in flight, both cores) for SECONDS;
#  2. a release `tokentool serve --port 0` on embedded defaults, loaded with POST /v1/certificates
#     by wrk from a second process on loopback (2 threads, CONNECTIONS connections) for SECONDS,
#     cycling through BODIES distinct requests (each its own HS256 token — own sub and jti — and
#     its own P-256 CSR, made with PyJWT and cryptography before the timing);
#  3. requests/s, p50, p99, errors; the server's and wrk's CPU per request (/proc, getrusage), the
#     server's by thread (/proc/PID/task: Swift's pool, NIO's event loops, GRDB's queues),
#     the ledger's commits and certificates per commit (/metrics); HTTP rate / library 2-core rate;
#     the host's steal time during the run (/proc/stat);
#  4. two floors, each for the same time and connections: wrk on GET /healthz (no body, no work), and
#     on POST /v1/certificates with this run's bodies naming a provider the server does not have
#     (each body read and its JSON parsed, then a 400); their server and wrk CPU per request, the
#     ratio an issuance would reach if HTTP added only that floor to the library's CPU per
#     certificate, and what this run's requests add beyond the POST floor and the library.
# wrk runs on the same 2 cores as the server: it takes CPU the server would otherwise have.
# Usage: scripts/issuance_load.sh [SECONDS] [CONNECTIONS] [BODIES]   (defaults 10 s, 32, 256)
# PERF_SECONDS=N (N < SECONDS - 1): also record the whole machine with perf for N seconds of the HTTP
# run and print where the CPU went, by thread group and kind (scripts/perf_attribution.py).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-10}"
connections="${2:-32}"
bodies="${3:-256}"
command -v wrk >/dev/null || { echo "issuance_load: apt-get install wrk (scripts/bootstrap.sh)" >&2; exit 2; }
[ -z "${PERF_SECONDS:-}" ] || command -v perf >/dev/null || { echo "issuance_load: PERF_SECONDS needs perf (apt-get install linux-perf)" >&2; exit 2; }
python3 -c 'import jwt, cryptography' 2>/dev/null || { echo "issuance_load: needs PyJWT and cryptography (scripts/bootstrap.sh)" >&2; exit 2; }
build=$(swift build -c release --product tokentool 2>&1) || { echo "$build" >&2; exit 1; }
build=$(swift build -c release --product tokenbench 2>&1) || { echo "$build" >&2; exit 1; }
bin="$PWD/.build/release"
work=$(mktemp -d)
source scripts/serve_lib.sh  # removes $work, and stops the server, at exit
echo "issuance_load: $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg), ${seconds} s per side, $connections connections"

# 1. The library, right before.
library=$("$bin/tokenbench" --issuance --filter 'peerca.issuance.2core$' --seconds "$seconds" --reps 1 | grep '^peerca.issuance.2core')
echo "$library"
library_rate=$(echo "$library" | awk '{print $2}')
library_cpu=$(echo "$library" | grep -o 'CPU [0-9.]* µs/cert' | awk '{print $2}' || true)  # empty when the row printed none

# 2. The server, and the requests.
start_serve "$bin/tokentool"  # sets $server and $port (the OS picked it)
python3 - "$work/tokentool-state/dev-hs256.secret" "$bodies" "$work/bodies.lua" <<'PY'
import json, sys, time, uuid
import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
secret = open(sys.argv[1], "rb").read()
count = int(sys.argv[2])
now = int(time.time())
with open(sys.argv[3], "w") as out:
    out.write("return {\n")
    for i in range(count):
        token = jwt.encode({"iss": "tokentool-dev", "sub": f"load-{i}", "name": f"Load {i}", "iat": now, "exp": now + 3600,
                            "jti": str(uuid.uuid4())}, secret, algorithm="HS256")
        key = ec.generate_private_key(ec.SECP256R1())
        csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([])).sign(key, hashes.SHA256())
        body = json.dumps({"provider": "dev", "token": token, "csr": csr.public_bytes(serialization.Encoding.PEM).decode()})
        out.write("[==[" + body + "]==],\n")
    out.write("}\n")
PY
wrk_script "$work/bodies.lua" "$work/certificates.lua"
# The same requests naming a provider the server does not have, for the request floor (step 4).
sed 's/"provider": "dev"/"provider": "none"/' "$work/bodies.lua" > "$work/refused_bodies.lua"
sed "s|$work/bodies.lua|$work/refused_bodies.lua|" "$work/certificates.lua" > "$work/refused.lua"
url="http://127.0.0.1:$port/v1/certificates"
wrk -t2 -c"$connections" -d1s -s "$work/certificates.lua" "$url" >/dev/null  # warm-up
# The timed run, with what it cost: the server's CPU (/proc/PID/stat, utime + stime), wrk's
# (getrusage of the child once it has exited), the ledger's commits (the server's /metrics).
PERF_DATA="$work/perf.data" python3 - "$server" "$port" "$library_rate" "$library_cpu" "$seconds" "$connections" "$bodies" "$work" <<'PY'
import os, re, resource, subprocess, sys, time, urllib.request
server, port, library_rate, library_cpu, run_seconds, connections, bodies, work = sys.argv[1:9]
library_rate, metrics = float(library_rate), f"http://127.0.0.1:{port}/metrics"
def wrk(duration, path, script=None):
    # wrk's command line for every load of this script: 2 threads, the run's connections, latency percentiles.
    return (["wrk", "-t2", f"-c{connections}", f"-d{duration}", "--latency"] + (["-s", f"{work}/{script}"] if script else [])
            + [f"http://127.0.0.1:{port}{path}"])
def cpu_seconds():
    fields = open(f"/proc/{server}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
# The server's threads grouped by what they run, as perf_attribution.py groups perf's samples.
sys.path.insert(0, "scripts")
from perf_attribution import group_of
def thread_seconds():
    # CPU seconds of each of the server's threads, by thread ID, and each thread's group.
    seconds = {}
    for tid in os.listdir(f"/proc/{server}/task"):
        try:
            stat = open(f"/proc/{server}/task/{tid}/stat").read()
        except OSError:
            continue  # the thread ended meanwhile
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        group = group_of(name)
        seconds[tid] = (group, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
    return seconds
def commits():
    # The ledger's transactions and the certificates in them.
    text = urllib.request.urlopen(metrics, timeout=5).read().decode()
    names = ("tokenserver_ledger_commits", "tokenserver_ledger_committed_certificates")
    values = dict(re.findall(r"^(" + "|".join(names) + r") ([0-9.e+]+)$", text, re.M))
    return [float(values.get(name, 0)) for name in names]
def steal_seconds():
    # The host's steal time over all CPUs (/proc/stat's eighth "cpu" field): CPU the host gave elsewhere.
    return int(open("/proc/stat").readline().split()[8]) / os.sysconf("SC_CLK_TCK")
commits_before, server_before, threads_before, steal_before = commits(), cpu_seconds(), thread_seconds(), steal_seconds()
# PERF_SECONDS=N: a system-wide perf recording of N seconds from the second second of the run on
# (call graphs by DWARF, 499 samples/s per CPU; it slows the run), attributed afterwards.
perf_seconds = float(os.environ.get("PERF_SECONDS") or 0)
load = subprocess.Popen(wrk(f"{run_seconds}s", "/v1/certificates", "certificates.lua"), stdout=subprocess.PIPE, text=True)
perf_usage = 0.0
if perf_seconds:
    time.sleep(1)
    subprocess.run(["perf", "record", "-a", "-e", "cpu-clock", "-F", "499", "--call-graph", "dwarf,16384", "-o", os.environ["PERF_DATA"],
                    "--", "sleep", str(perf_seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    during = resource.getrusage(resource.RUSAGE_CHILDREN)  # perf's own CPU, kept out of wrk's
    perf_usage = during.ru_utime + during.ru_stime
output = load.communicate()[0]
if load.returncode != 0:
    sys.exit(f"issuance_load: wrk failed ({load.returncode})")
server_cpu, threads_after, commits_after = cpu_seconds() - server_before, thread_seconds(), commits()
steal = steal_seconds() - steal_before
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
result = next(line for line in output.splitlines() if line.startswith("RESULT "))
print(f"http POST /v1/certificates ({connections} connections, wrk -t2, {bodies} distinct requests): {result[len('RESULT '):]}")
fields = result.split()
rate, requests, errors = float(fields[2]), int(fields[8]), int(fields[10])
if requests == 0:
    sys.exit("issuance_load: wrk completed no request")
print(f"CPU per request: server {server_cpu / requests * 1e6:.0f} µs, wrk {(usage.ru_utime + usage.ru_stime - perf_usage) / requests * 1e6:.0f} µs")
by_group = {}
for tid, (group, seconds) in threads_after.items():
    by_group[group] = by_group.get(group, 0.0) + seconds - threads_before.get(tid, (group, 0.0))[1]
print("server CPU per request by thread: " + ", ".join(
    f"{group} {seconds / requests * 1e6:.0f} µs" for group, seconds in sorted(by_group.items(), key=lambda item: -item[1]) if seconds > 0))
batches, certificates = commits_after[0] - commits_before[0], commits_after[1] - commits_before[1]
print(f"ledger commits: {batches:.0f}, {certificates / max(batches, 1):.1f} certificates each")
print(f"http / library 2-core: {rate:.0f} / {library_rate:.0f} = {rate / library_rate:.3f}")
print(f"host steal time during the run: {steal:.2f} s (of {(os.cpu_count() or 1) * float(run_seconds):.0f} CPU-seconds)")
issue_server, issue_wrk = server_cpu / requests * 1e6, (usage.ru_utime + usage.ru_stime - perf_usage) / requests * 1e6
if perf_seconds:
    print(f"where the CPU went during {perf_seconds:g} s of the run (perf, µs per request at this run's rate; scripts/perf_attribution.py):", flush=True)
    script = subprocess.run(["perf", "script", "-i", os.environ["PERF_DATA"], "-F", "comm,tid,ip,sym,dso"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True)
    subprocess.run([sys.executable, "scripts/perf_attribution.py", "--units", str(rate * perf_seconds), "--frequency", "499", "--top", "6"],
                   input=script.stdout, check=True)
if errors:
    sys.exit(f"issuance_load: {errors} errors")
# 4. The floors: what a request costs this server and wrk when the route does nothing (GET /healthz),
# and when it reads this run's request bodies, parses their JSON and refuses them before any work
# (POST /v1/certificates naming a provider the server does not have: 400 unknown_provider), same
# connections and time; and the ratio an issuance would reach if HTTP added only that.
def floor(label, path, script=None):
    # Runs wrk for a warm-up second and then for the run's time; returns the server's and wrk's CPU µs a request.
    # With a script (refused.lua): every request must be refused.
    refused = script is not None
    subprocess.run(wrk("1s", path, script), stdout=subprocess.DEVNULL, check=True)
    before_usage, before = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_seconds()
    output = subprocess.run(wrk(f"{run_seconds}s", path, script), stdout=subprocess.PIPE, text=True, check=True).stdout
    server_seconds, usage = cpu_seconds() - before, resource.getrusage(resource.RUSAGE_CHILDREN)
    found = re.search(r"(\d+) requests in", output)
    count = int(found.group(1)) if found else 0
    if refused:  # every request answered, each with a non-2xx status (the Lua's RESULT line counts them)
        result = re.search(r"^RESULT .* errors (\d+)$", output, re.M)
        failed = "Socket errors" in output or not result or int(result.group(1)) != count
    else:
        failed = "Socket errors" in output or "Non-2xx" in output
    if count == 0 or failed:
        sys.exit(f"issuance_load: the floor run ({label}) failed:\n" + output)
    floor_server = server_seconds / count * 1e6
    floor_wrk = (usage.ru_utime + usage.ru_stime - before_usage.ru_utime - before_usage.ru_stime) / count * 1e6
    print(f"floor, {label} ({connections} connections, wrk -t2): {count / float(run_seconds):.0f} requests/s, server {floor_server:.0f} µs, wrk {floor_wrk:.0f} µs a request")
    return floor_server, floor_wrk
floors = [floor("GET /healthz", "/healthz"),
          floor("POST /v1/certificates, the run's bodies naming an unknown provider (read, parsed, refused: 400)", "/v1/certificates", "refused.lua")]
if library_cpu:
    library = float(library_cpu)
    for (floor_server, floor_wrk), name in zip(floors, ("GET", "refused POST")):
        print(f"  an issuance costing the library's {library:.0f} µs a certificate plus the {name} floor: "
              f"{library / (library + floor_server + floor_wrk):.3f} of the library's rate at the same busy share")
    floor_server, floor_wrk = floors[1]
    extra = issue_server + issue_wrk - library - floor_server - floor_wrk
    print(f"  this run's issuance request: server {issue_server:.0f} + wrk {issue_wrk:.0f} µs = library {library:.0f} + refused POST floor {floor_server + floor_wrk:.0f} "
          f"+ {extra:.0f} µs more (a larger reply, smaller ledger batches, hops to the ledger's writer and back"
          + ("; perf's own overhead too, with PERF_SECONDS)" if perf_seconds else ")"))
PY
echo "ledger: $(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("select count(*) from certificates").fetchone()[0])' "$work/tokentool-state/ledger.sqlite") certificates recorded (warm-up included)"
