#!/usr/bin/env python3
"""kill -9 `tokentool serve` during sustained certificate issuance, restart it, and check the ledger.

Each round: client threads issue certificates (POST /v1/certificates) as fast as the server answers,
and a certificate is revoked through `tokentool ca revoke` now and then, while the server runs;
after a random 1-3 s the server gets SIGKILL. It is started again on the same state, and then:
  - it starts (the ledger opens and migrates cleanly) and SQLite's integrity_check says ok;
  - every certificate a client received is in the ledger, byte for byte the same DER;
  - the ones whose revocation the CLI confirmed are revoked there, all others are not;
  - the server's CRL (GET /v1/crl, read by `openssl crl`) lists exactly the revoked serials;
  - the server's OCSP answer (`openssl ocsp`) for a received certificate matches its status.
A last round ends with SIGTERM instead, under the same load: the server must exit 0, and the same
checks follow. Exit status 0 when every round passes. Usage: crash_safety.py --tokentool PATH [--rounds N]
"""
import argparse, base64, hashlib, hmac, http.client, json, os, random, re, signal, sqlite3
import subprocess, sys, tempfile, threading, time

parser = argparse.ArgumentParser()
parser.add_argument("--tokentool", required=True)
parser.add_argument("--rounds", type=int, default=10)
parser.add_argument("--clients", type=int, default=8)
args = parser.parse_args()
tokentool = os.path.abspath(args.tokentool)
work = tempfile.mkdtemp(prefix="tokentool-crash-")
state = os.path.join(work, "state")
ledger_path = os.path.join(state, "ledger.sqlite")


port = None  # the port of the running server: the OS picks it at each start (--port 0)


def get(path, timeout=10):
    """GET a path of the server; (status, body)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("GET", path)
    response = c.getresponse()
    return response.status, response.read()


def start_server():
    """Starts serve on a port the OS picks, reads the port from its "listening on" line, and waits
    until it answers /healthz."""
    global port
    log_path = os.path.join(work, "serve.log")
    log = open(log_path, "ab")
    offset = log.tell()
    process = subprocess.Popen([tokentool, "serve", "--state", state, "--port", "0"], stdout=log, stderr=log,
                               stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        if process.poll() is not None:
            sys.exit(f"FAIL: the server exited with {process.returncode} on start; see {work}/serve.log")
        with open(log_path, "rb") as f:
            f.seek(offset)
            found = re.search(rb"listening on https?://[^:]+:(\d+)", f.read())
        if not found:
            time.sleep(0.05)
            continue
        port = int(found.group(1))
        try:
            if get("/healthz", timeout=2)[0] == 200:
                return process
        except OSError:
            time.sleep(0.05)
    sys.exit("FAIL: the server did not become healthy in 60 s")


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def dev_token():
    with open(os.path.join(state, "dev-hs256.secret"), "rb") as f:
        secret = f.read()
    now = int(time.time())
    header = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = b64url(json.dumps({"iss": "tokentool-dev", "sub": "crash-test", "iat": now, "exp": now + 86400}).encode())
    signature = hmac.new(secret, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{b64url(signature)}"


def make_csr(i):
    key = os.path.join(work, f"device{i}.key")
    out = subprocess.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                          "-keyout", key, "-subj", f"/CN=device{i}"], capture_output=True, check=True)
    return out.stdout.decode()


def pem_to_der(pem):
    body = re.search(r"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", pem, re.S).group(1)
    return base64.b64decode("".join(body.split()))


received = {}  # serial -> leaf DER, for every 200 a client read in full
received_lock = threading.Lock()
stats = {"ok": 0, "failed": 0}
stop_clients = threading.Event()


def client(token, csrs):
    connection = None
    while not stop_clients.is_set():
        body = json.dumps({"provider": "dev", "token": token, "csr": random.choice(csrs)})
        try:
            if connection is None:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            connection.request("POST", "/v1/certificates", body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            data = response.read()
            if response.status != 200:
                sys.stderr.write(f"unexpected {response.status}: {data[:200]!r}\n")
                with received_lock:
                    stats["failed"] += 1
                continue
            answer = json.loads(data)
            with received_lock:
                received[answer["serial"]] = pem_to_der(answer["certificate"])
                stats["ok"] += 1
        except (OSError, http.client.HTTPException):
            # The server was killed or is starting: not an answer, so nothing was received.
            if connection is not None:
                connection.close()
            connection = None
            time.sleep(0.02)


def revoke(serial):
    result = subprocess.run([tokentool, "ca", "revoke", "--dir", os.path.join(state, "ca"), "--store", "sqlite:" + ledger_path,
                             "--reason", "keyCompromise", serial], capture_output=True, text=True)
    return result.returncode == 0, result.stdout + result.stderr


def check(round_number, revoked):
    failures = []
    db = sqlite3.connect(f"file:{ledger_path}?mode=ro", uri=True)
    integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
    if integrity != "ok":
        failures.append(f"integrity_check: {integrity}")
    rows = {serial: (der, revoked_at) for serial, der, revoked_at in db.execute("SELECT serial, der, revoked_at FROM certificates")}
    db.close()
    with received_lock:
        snapshot = dict(received)
    missing = [s for s in snapshot if s not in rows]
    different = [s for s, der in snapshot.items() if s in rows and bytes(rows[s][0]) != der]
    wrong_status = [s for s in snapshot if s in rows and (rows[s][1] is not None) != (s in revoked)]
    if missing:
        failures.append(f"{len(missing)} received certificates are not in the ledger, e.g. {missing[:3]}")
    if different:
        failures.append(f"{len(different)} ledger rows differ from what the client received")
    if wrong_status:
        failures.append(f"{len(wrong_status)} certificates have the wrong status, e.g. {wrong_status[:3]}")
    # The CRL the restarted server publishes.
    crl = get("/v1/crl")[1]
    crl_path = os.path.join(work, "crl.der")
    with open(crl_path, "wb") as f:
        f.write(crl)
    text = subprocess.run(["openssl", "crl", "-inform", "DER", "-in", crl_path, "-noout", "-text"], capture_output=True, text=True).stdout
    listed = {s.lower().lstrip("0") for s in re.findall(r"Serial Number: ([0-9A-Fa-f]+)", text)}
    if listed != {s.lower().lstrip("0") for s in revoked}:
        failures.append(f"the CRL lists {len(listed)} serials, {len(revoked)} were revoked")
    # OCSP for one received certificate, through openssl against the restarted server.
    if snapshot:
        serial = random.choice(list(snapshot))
        leaf = os.path.join(work, "leaf.der")
        with open(leaf, "wb") as f:
            f.write(snapshot[serial])
        subprocess.run(["openssl", "x509", "-inform", "DER", "-in", leaf, "-out", leaf + ".pem"], check=True)
        roots = get("/v1/ca")[1]
        issuer = os.path.join(state, "ca", "issuer.pem")
        with open(issuer, "rb") as f, open(os.path.join(work, "ca.pem"), "wb") as out:
            out.write(roots + f.read())
        ocsp = subprocess.run(["openssl", "ocsp", "-issuer", issuer, "-cert", leaf + ".pem", "-url", f"http://127.0.0.1:{port}/v1/ocsp",
                               "-CAfile", os.path.join(work, "ca.pem")], capture_output=True, text=True)
        expected = "revoked" if serial in revoked else "good"
        if f": {expected}" not in ocsp.stdout:
            failures.append(f"OCSP for {serial}: expected {expected}, got {ocsp.stdout.strip()} {ocsp.stderr.strip()}")
    print(f"round {round_number}: {len(snapshot)} certificates received, {len(rows)} in the ledger, {len(revoked)} revoked: "
          + ("ok" if not failures else "FAILED"), flush=True)
    for failure in failures:
        print("  " + failure, flush=True)
    return not failures


group_commit = {"commits": 0, "certificates": 0}


def ledger_commits():
    """(transactions, certificates) the running server's ledger has written (GET /metrics), or None."""
    try:
        text = get("/metrics", timeout=5)[1].decode()
    except Exception:
        return None
    values = dict(re.findall(r"^(tokenserver_ledger_commits|tokenserver_ledger_committed_certificates) ([0-9.e+]+)$", text, re.M))
    if len(values) != 2:
        return None
    return int(float(values["tokenserver_ledger_commits"])), int(float(values["tokenserver_ledger_committed_certificates"]))


def main():
    server = start_server()
    token = dev_token()
    csrs = [make_csr(i) for i in range(4)]
    revoked = set()
    ok = True
    started = time.time()
    # Rounds 1..N end with SIGKILL; one more ends with SIGTERM under the same load, where the
    # server must finish what is in flight and exit 0.
    for round_number in range(1, args.rounds + 2):
        graceful = round_number == args.rounds + 1
        stop_clients.clear()
        threads = [threading.Thread(target=client, args=(token, csrs), daemon=True) for _ in range(args.clients)]
        for t in threads:
            t.start()
        deadline = time.time() + random.uniform(1.0, 3.0)
        while time.time() < deadline:
            time.sleep(0.3)
            with received_lock:
                candidates = [s for s in received if s not in revoked]
            if candidates:
                serial = random.choice(candidates)
                done, output = revoke(serial)
                if done:
                    revoked.add(serial)
                else:
                    print(f"  revoke {serial} failed while serving: {output.strip()}", flush=True)
                    ok = False
        commits = ledger_commits()
        if commits:
            group_commit["commits"] += commits[0]
            group_commit["certificates"] += commits[1]
        if graceful:
            server.send_signal(signal.SIGTERM)
            try:
                status = server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                status = "no exit within 30 s"
            if status != 0:
                print(f"  SIGTERM under load: the server ended with {status}", flush=True)
                ok = False
        else:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        stop_clients.set()
        for t in threads:
            t.join()
        server = start_server()
        ok = check("SIGTERM" if graceful else round_number, revoked) and ok
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=30)
    print(f"{args.rounds} kill -9 rounds and one SIGTERM round in {time.time() - started:.0f} s: {stats['ok']} certificates received, "
          f"{len(revoked)} revoked, {stats['failed']} unexpected answers; " + ("all checks passed" if ok else "FAILED"))
    if group_commit["commits"]:
        print(f"group commit: {group_commit['certificates']} certificates in {group_commit['commits']} ledger transactions before the signals "
              f"({group_commit['certificates'] / group_commit['commits']:.1f} per transaction)")
    if ok:
        subprocess.run(["rm", "-rf", work])
    else:
        print(f"state kept in {work}")
    sys.exit(0 if ok and stats["failed"] == 0 else 1)


main()
