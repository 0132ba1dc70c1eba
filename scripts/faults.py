#!/usr/bin/env python3
"""Fault tests for `tokentool serve` (issue 58, item 2): nothing acknowledged is lost, and the
service recovers from a failing ledger without a restart.

Each run starts `tokentool serve --state DIR --port 0` on a fresh state directory (its own temp
dir; a tmpfs mounted for it where the scenario needs one), loads it from 127.0.0.1 with client
threads issuing certificates (POST /v1/certificates, a fresh token — unique sub and jti — and a
CSR from a pool made before the load) and reader threads alternating GET /v1/crl and POST
/v1/ocsp, and injects one fault:

  disk-full      state on a 24 MB tmpfs; after 3 s of load a filler file takes every free byte
                 (written until ENOSPC, topped up while held), is held 8 s, then removed.
  ledger-growth  state on a small tmpfs; a ballast file takes all of it but 3 MB, the ledger's
                 own growth fills the rest while the load runs (until refusals appear, at most
                 60 s), refusals go on 2 s, then the ballast is removed.
  io-errors      state in a plain temp dir; after 3 s of load `strace -f -p PID` attaches to the
                 server for 5 s injecting EIO into some fdatasync/fsync and pwrite64 calls (the
                 calls SQLite makes for the database, its WAL and -shm; the sockets use
                 write/writev/sendmsg/read, which are never touched), then is stopped with SIGINT
                 (it detaches; the server goes on untraced). strace counts `when=` per thread, so
                 each thread that writes the ledger fails its 3rd, 8th, 13th... fdatasync and its
                 20th, 60th, 100th... pwrite64. The per-file counts of traced and injected calls
                 are printed (strace -ff -y output).

The load goes on after the fault. A run passes when:
  - issuance answers 200 again within 20 s of the fault's end (space freed, strace detached)
    and keeps doing so for 4 s: every issuance started after the first of those 200s gets 200
    (the time to recover is printed);
  - every answer during the whole run is 200, or 503 with error code `ledger_unavailable` and a
    Retry-After header (connection errors are counted apart; they fail the run only if the
    server died);
  - the server exits 0 within 30 s of SIGTERM (else it is killed, and the run fails);
  - restarted on the same state — the tmpfs as the run left it, filler or ballast removed — it
    starts and answers /healthz; SQLite's integrity_check says ok and every certificate a client
    was answered 200 with is in the ledger (SELECT serial, der FROM certificates, opened
    read-only while it runs) byte for byte; a fresh issuance gets 200. When the ledger's WAL
    has taken the space again (less than 4 MB free), the fresh issuance is left to a second
    restart after the tmpfs is grown by 64 MB (mount -o remount,size=; the files do not change).
    A server that cannot restart fails the run, and the ledger is then read without it.

Usage (as root: it mounts tmpfs and uses strace; scripts/faults.sh wraps it):
  faults.py --tokentool PATH [--runs N] [--scenario disk-full|ledger-growth|io-errors|all]
A scenario that cannot run here (not root, mount -t tmpfs refused, strace missing or unable to
attach or inject) prints `faults: SKIP <scenario>: <reason>` and counts as neither passed nor
failed. Exit status: 1 when a run failed, else 0. Python 3 standard library and openssl only.
"""
import argparse, base64, errno, hashlib, hmac, http.client, json, os, random, re, shutil, signal, sqlite3
import subprocess, sys, tempfile, threading, time, uuid

SCENARIOS = ["disk-full", "ledger-growth", "io-errors"]
MiB = 1 << 20

parser = argparse.ArgumentParser(description="Fault tests for tokentool serve (see the module docstring).")
parser.add_argument("--tokentool", required=True, help="the tokentool binary (not built here)")
parser.add_argument("--runs", type=int, default=10, help="runs of each scenario (default 10)")
parser.add_argument("--scenario", choices=SCENARIOS + ["all"], default="all")
parser.add_argument("--clients", type=int, default=8, help="threads issuing certificates (default 8)")
parser.add_argument("--readers", type=int, default=2, help="threads reading the CRL and OCSP (default 2)")
parser.add_argument("--disk-mb", type=int, default=24, help="disk-full: the tmpfs's size (default 24)")
parser.add_argument("--hold", type=float, default=8, help="disk-full: seconds the filler is held (default 8)")
parser.add_argument("--growth-mb", type=int, default=16, help="ledger-growth: the tmpfs's size (default 16)")
parser.add_argument("--growth-free-mb", type=float, default=3, help="ledger-growth: MB the ballast leaves free (default 3)")
parser.add_argument("--inject-seconds", type=float, default=5, help="io-errors: seconds strace stays attached (default 5)")
parser.add_argument("--inject-fdatasync", default="3+5", help="io-errors: strace when= for fdatasync/fsync (default 3+5)")
parser.add_argument("--inject-pwrite", default="20+40", help="io-errors: strace when= for pwrite64 (default 20+40)")
parser.add_argument("--recover-within", type=float, default=20, help="seconds allowed to recover (default 20)")
parser.add_argument("--stable", type=float, default=4, help="seconds of only 200s that count as recovered (default 4)")
parser.add_argument("--workdir", help="where the runs' temp dirs go (default: the system's temp dir)")
parser.add_argument("--keep-failed", default=None, help="copy a failed run's log and state under this dir (default: a new temp dir)")
args = parser.parse_args()

tokentool = os.path.abspath(args.tokentool)
if not (os.path.isfile(tokentool) and os.access(tokentool, os.X_OK)):
    sys.exit(f"faults: no tokentool binary at {tokentool}: build it first (swift build --product tokentool), or pass --tokentool PATH")
base = tempfile.mkdtemp(prefix="tokentool-faults-", dir=args.workdir)


def say(line):
    print(line, flush=True)


# SIGTERM (and SIGHUP) end the script like Ctrl-C: the finally blocks stop the servers and unmount.
def _terminate(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


signal.signal(signal.SIGTERM, _terminate)
signal.signal(signal.SIGHUP, _terminate)


# ---------------------------------------------------------------------------------------------
# What this machine allows: tmpfs mounts, strace attaching and injecting.

def probe_mount():
    """None when a tmpfs can be mounted and unmounted here, else why not."""
    if os.geteuid() != 0:
        return "not root (mounting a tmpfs needs root: run it with sudo)"
    point = tempfile.mkdtemp(prefix="probe-", dir=base)
    try:
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", point], capture_output=True, text=True, timeout=30)
        if result.returncode != 0:
            return f"mount -t tmpfs failed: {(result.stderr or result.stdout).strip()}"
        subprocess.run(["umount", point], capture_output=True, timeout=30)
        return None
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"mount -t tmpfs failed: {error}"
    finally:
        try:
            os.rmdir(point)
        except OSError:
            pass


PROBE_CHILD = r"""
import os, sys, tempfile
fd, path = tempfile.mkstemp()
os.unlink(path)
sys.stdout.write("ready\n"); sys.stdout.flush()
for line in sys.stdin:
    try:
        os.pwrite(fd, b"x", 0); os.fdatasync(fd); sys.stdout.write("ok\n")
    except OSError as e:
        sys.stdout.write(f"errno {e.errno}\n")
    sys.stdout.flush()
"""


def probe_strace():
    """None when strace is there and can attach to a running process and inject EIO, else why not."""
    if shutil.which("strace") is None:
        return "strace is not installed (apt-get install strace)"
    child = subprocess.Popen([sys.executable, "-c", PROBE_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    tracer = None
    try:
        if child.stdout.readline().strip() != "ready":
            return "the probe process did not start"
        log = os.path.join(base, "strace-probe.err")
        with open(log, "w") as err:
            tracer = subprocess.Popen(["strace", "-f", "-qq", "-o", "/dev/null", "-p", str(child.pid), "-e", "trace=fdatasync",
                                       "-e", "inject=fdatasync:error=EIO"], stdout=subprocess.DEVNULL, stderr=err)
        for _ in range(50):  # strace -p returns once attached; give it up to 5 s
            if tracer.poll() is not None:
                break
            with open("/proc/%d/status" % child.pid) as f:
                if re.search(r"^TracerPid:\s*[1-9]", f.read(), re.M):
                    break
            time.sleep(0.1)
        if tracer.poll() is not None:
            text = open(log).read().strip()
            if "Operation not permitted" in text or "EPERM" in text:
                return f"strace cannot attach (ptrace not permitted): {text[:200]}"
            return f"strace -e inject= failed (unsupported?): {text[:200]}"
        child.stdin.write("go\n")
        child.stdin.flush()
        answer = child.stdout.readline().strip()
        if answer != f"errno {errno.EIO}":
            return f"strace attached but did not inject EIO into fdatasync (the probe got {answer!r})"
        return None
    except OSError as error:
        return f"strace probe failed: {error}"
    finally:
        if tracer is not None and tracer.poll() is None:
            tracer.send_signal(signal.SIGINT)
            try:
                tracer.wait(timeout=10)
            except subprocess.TimeoutExpired:
                tracer.kill()
                tracer.wait()
        child.kill()
        child.wait()


# ---------------------------------------------------------------------------------------------
# Tokens, CSRs, certificates.

def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


TOKEN_HEADER = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())


def fresh_token(secret, prefix):
    """A dev-provider token of its own: a new sub and jti for every request."""
    now = int(time.time())
    ident = uuid.uuid4().hex
    payload = b64url(json.dumps({"iss": "tokentool-dev", "sub": f"{prefix}-{ident[:12]}", "jti": ident, "iat": now,
                                 "exp": now + 3600}).encode())
    signature = hmac.new(secret, f"{TOKEN_HEADER}.{payload}".encode(), hashlib.sha256).digest()
    return f"{TOKEN_HEADER}.{payload}.{b64url(signature)}"


def make_csr_pool(count):
    directory = os.path.join(base, "csrs")
    os.makedirs(directory, exist_ok=True)
    pool = []
    for i in range(count):
        out = subprocess.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                              "-keyout", os.path.join(directory, f"device{i}.key"), "-subj", f"/CN=device{i}"],
                             capture_output=True, check=True, timeout=60)
        pool.append(out.stdout.decode())
    return pool


def pem_to_der(pem):
    """The first certificate (the leaf) of a PEM chain, as DER."""
    body = re.search(r"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", pem, re.S).group(1)
    return base64.b64decode("".join(body.split()))


def ocsp_status(der):
    """OCSPResponse.responseStatus (0 successful, 3 tryLater, ...) or None when unreadable."""
    try:
        if der[0] != 0x30:
            return None
        i = 2 if der[1] < 0x80 else 2 + (der[1] & 0x7F)
        return der[i + 2] if der[i] == 0x0A and der[i + 1] == 1 else None
    except IndexError:
        return None


# ---------------------------------------------------------------------------------------------
# One server: start, stop, and what it logs.

class Server:
    def __init__(self, state, log_path, pid_dir):
        self.state, self.log_path, self.pid_dir = state, log_path, pid_dir
        self.process = None
        self.port = None

    def start(self, timeout=60):
        """Starts serve on a port the OS picks, reads the port from its "listening on" line, and
        waits until it answers /healthz. Returns None, or why it did not start."""
        self.port = None
        log = open(self.log_path, "ab")
        offset = log.tell()
        self.process = subprocess.Popen([tokentool, "serve", "--state", self.state, "--port", "0"], stdout=log, stderr=log,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        # Lets the wrapper (scripts/faults.sh) kill the group should this script itself be killed.
        open(os.path.join(self.pid_dir, f"server-{self.process.pid}.pgid"), "w").close()
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                return f"the server exited with {self.process.returncode} on start"
            if self.port is None:
                with open(self.log_path, "rb") as f:
                    f.seek(offset)
                    found = re.search(rb"listening on https?://[^:]+:(\d+)", f.read())
                if not found:
                    time.sleep(0.05)
                    continue
                self.port = int(found.group(1))
            try:
                if self.request("GET", "/healthz", timeout=2)[0] == 200:
                    return None
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(0.05)
        return f"the server did not answer /healthz within {timeout} s"

    def request(self, method, path, body=None, headers=None, timeout=30):
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            connection.request(method, path, body, headers or {})
            response = connection.getresponse()
            return response.status, response.read(), response
        finally:
            connection.close()

    def alive(self):
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout=30):
        """SIGTERM; (exit status, note). Killed (-9, the group) when it has not exited in `timeout` s."""
        if self.process is None:
            return None, "not started"
        note = ""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                note = f"no exit within {timeout} s of SIGTERM: killed with SIGKILL"
                self.kill()
        self.kill()  # anything left in its process group
        return self.process.returncode, note

    def kill(self):
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.unlink(os.path.join(self.pid_dir, f"server-{self.process.pid}.pgid"))
        except OSError:
            pass

    def log_tail(self, lines=8):
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log_path) - 16384))
                text = f.read().decode(errors="replace").splitlines()
        except OSError:
            return []
        return text[-lines:]


# ---------------------------------------------------------------------------------------------
# The load: client threads issuing certificates, reader threads fetching the CRL and OCSP.

class Answer:
    __slots__ = ("kind", "start", "end", "status", "code", "retry_after", "body", "error")

    def __init__(self, kind, start, end, status=None, code=None, retry_after=None, body=b"", error=None):
        self.kind, self.start, self.end, self.status = kind, start, end, status
        self.code, self.retry_after, self.body, self.error = code, retry_after, body, error

    @property
    def acceptable(self):
        """200, or 503 ledger_unavailable with a Retry-After header."""
        if self.status == 200:
            return True
        return self.status == 503 and self.code == "ledger_unavailable" and bool(self.retry_after)


def error_code(body):
    try:
        return json.loads(body)["error"]["code"]
    except Exception:
        return None


class Load:
    def __init__(self, server, secret, csrs, ocsp_request, prefix):
        self.server, self.secret, self.csrs, self.ocsp_request, self.prefix = server, secret, csrs, ocsp_request, prefix
        self.answers = []  # Answer, appended by the threads (list.append is atomic)
        self.received = {}  # serial -> leaf DER, for every 200 read in full
        self.malformed = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = []

    def start(self, clients, readers):
        self.threads = [threading.Thread(target=self.issuer, daemon=True) for _ in range(clients)]
        self.threads += [threading.Thread(target=self.reader, args=(i,), daemon=True) for i in range(readers)]
        for thread in self.threads:
            thread.start()

    def stop(self):
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=45)  # a request's own timeout is 30 s
        return [t for t in self.threads if t.is_alive()]

    def issue_once(self, connection=None, record=True):
        """One issuance; (Answer, connection to reuse or None)."""
        body = json.dumps({"provider": "dev", "token": fresh_token(self.secret, self.prefix), "csr": random.choice(self.csrs)})
        start = time.time()
        try:
            if connection is None:
                connection = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=30)
            connection.request("POST", "/v1/certificates", body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as error:
            if connection is not None:
                connection.close()
            answer = Answer("issue", start, time.time(), error=f"{type(error).__name__}: {error}")
            if record:
                self.answers.append(answer)
            return answer, None
        answer = Answer("issue", start, time.time(), response.status, error_code(data) if response.status != 200 else None,
                        response.getheader("Retry-After"), data[:300])
        if response.status == 200:
            try:
                reply = json.loads(data)
                with self.lock:
                    self.received[reply["serial"].lower()] = pem_to_der(reply["certificate"])
            except Exception as error:
                self.malformed.append(f"{error}: {data[:200]!r}")
        if record:
            self.answers.append(answer)
        if response.getheader("Connection", "").lower() == "close" or response.will_close:
            connection.close()
            connection = None
        return answer, connection

    def issuer(self):
        connection = None
        while not self.stopping.is_set():
            answer, connection = self.issue_once(connection)
            if answer.status is None or answer.status != 200:
                time.sleep(0.02)  # a refused or failed request: do not spin
        if connection is not None:
            connection.close()

    def reader(self, index):
        connection = None
        turn = index
        while not self.stopping.is_set():
            crl = turn % 2 == 0 or self.ocsp_request is None
            turn += 1
            start = time.time()
            kind = "crl" if crl else "ocsp"
            try:
                if connection is None:
                    connection = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=30)
                if crl:
                    connection.request("GET", "/v1/crl")
                else:
                    connection.request("POST", "/v1/ocsp", self.ocsp_request, {"Content-Type": "application/ocsp-request"})
                response = connection.getresponse()
                data = response.read()
                code = None
                if response.status != 200:
                    code = error_code(data)
                elif not crl:
                    status = ocsp_status(data)
                    code = None if status == 0 else f"ocsp-status-{status}"
                self.answers.append(Answer(kind, start, time.time(), response.status, code, response.getheader("Retry-After"),
                                           data[:300] if response.status != 200 else b""))
                if response.will_close:
                    connection.close()
                    connection = None
            except (OSError, http.client.HTTPException) as error:
                if connection is not None:
                    connection.close()
                connection = None
                self.answers.append(Answer(kind, start, time.time(), error=f"{type(error).__name__}: {error}"))
                time.sleep(0.05)
            time.sleep(0.02)
        if connection is not None:
            connection.close()


# ---------------------------------------------------------------------------------------------
# Faults.

def free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(fd, limit):
    """Appends to fd until the file system says ENOSPC (or `limit` bytes); the bytes written."""
    written = 0
    for size in (MiB, 64 * 1024, 4096, 512):
        chunk = b"\xa5" * size
        while written < limit:
            try:
                n = os.write(fd, chunk)
            except OSError as error:
                if error.errno == errno.ENOSPC:
                    break
                raise
            written += n
            if n < size:
                break
    return written


class Tmpfs:
    """A tmpfs mounted on `point` for one run; unmounted by close() (also lazily, if busy)."""

    def __init__(self, point, megabytes):
        self.point = point
        self.megabytes = megabytes
        self.mounted = False
        os.makedirs(point, exist_ok=True)
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}m,mode=0700", "tmpfs", point],
                                capture_output=True, text=True, timeout=30)
        if result.returncode != 0:
            raise RuntimeError(f"mount -t tmpfs failed: {(result.stderr or result.stdout).strip()}")
        self.mounted = True

    def grow(self, megabytes):
        """None, or why the tmpfs could not be resized (mount -o remount,size=)."""
        result = subprocess.run(["mount", "-o", f"remount,size={megabytes}m", self.point], capture_output=True, text=True, timeout=30)
        if result.returncode != 0:
            return (result.stderr or result.stdout).strip()
        self.megabytes = megabytes
        return None

    def close(self):
        if not self.mounted:
            return
        for attempt in range(10):
            if subprocess.run(["umount", self.point], capture_output=True, timeout=30).returncode == 0:
                self.mounted = False
                return
            time.sleep(0.5)
        subprocess.run(["umount", "-l", self.point], capture_output=True, timeout=30)
        self.mounted = False


# ---------------------------------------------------------------------------------------------
# One run.

class Run:
    def __init__(self, scenario, number, csrs):
        self.scenario, self.number, self.csrs = scenario, number, csrs
        self.work = tempfile.mkdtemp(prefix=f"{scenario}-{number}-", dir=base)
        self.failures = []
        self.notes = []
        self.tmpfs = None
        self.strace = None
        self.server = None
        self.load = None
        self.fault_start = self.fault_end = None
        self.recovery = None  # seconds from the fault's end to the first 200 of the stable stretch
        self.lost = 0
        self.unverified = 0
        self.injected = None

    def fail(self, message):
        self.failures.append(message)

    def disk_note(self, when):
        """Notes the sizes of the ledger's files and the free space (whether the WAL or the filler filled the disk)."""
        sizes = []
        for suffix in ("", "-wal"):
            try:
                sizes.append(f"ledger.sqlite{suffix} {os.path.getsize(os.path.join(self.state, 'ledger.sqlite' + suffix)) / MiB:.1f} MB")
            except OSError:
                pass
        free = f", {free_bytes(self.tmpfs.point) / MiB:.1f} MB free" if self.tmpfs else ""
        self.notes.append(f"{when}: {', '.join(sizes)}{free}")

    # -- the steps every scenario shares

    def state_on_tmpfs(self, megabytes):
        self.tmpfs = Tmpfs(os.path.join(self.work, "mnt"), megabytes)
        return os.path.join(self.tmpfs.point, "state")

    def start(self, state):
        self.state = state
        self.server = Server(state, os.path.join(self.work, "serve.log"), base)
        problem = self.server.start()
        if problem:
            raise RunAbort(problem)
        with open(os.path.join(state, "dev-hs256.secret"), "rb") as f:
            self.secret = f.read()
        self.load = Load(self.server, self.secret, self.csrs, None, f"faults-{self.scenario}-{self.number}")
        # One certificate before the load, for the OCSP requests the readers send.
        answer, connection = self.load.issue_once(record=False)
        if connection is not None:
            connection.close()
        if answer.status != 200:
            raise RunAbort(f"the first issuance was answered {answer.status} {answer.error or answer.body[:200]!r}")
        self.load.ocsp_request = self.make_ocsp_request()

    def make_ocsp_request(self):
        with self.load.lock:
            der = next(iter(self.load.received.values()))
        leaf = os.path.join(self.work, "leaf.der")
        with open(leaf, "wb") as f:
            f.write(der)
        request = os.path.join(self.work, "ocsp-request.der")
        try:
            subprocess.run(["openssl", "x509", "-inform", "DER", "-in", leaf, "-out", leaf + ".pem"], check=True, capture_output=True, timeout=30)
            subprocess.run(["openssl", "ocsp", "-issuer", os.path.join(self.state, "ca", "issuer.pem"), "-cert", leaf + ".pem", "-no_nonce",
                            "-reqout", request], check=True, capture_output=True, timeout=30)
            with open(request, "rb") as f:
                return f.read()
        except (subprocess.SubprocessError, OSError) as error:
            self.notes.append(f"no OCSP request ({error}); the readers fetch the CRL only")
            return None

    def watch_until(self, deadline, condition=lambda: False):
        """Sleeps until `deadline` or `condition()`, watching that the server lives."""
        while time.time() < deadline:
            if not self.server.alive():
                raise ServerDied()
            if condition():
                return True
            time.sleep(0.1)
        return False

    def await_recovery(self):
        """After the fault's end: issuance must answer 200 again within --recover-within seconds and
        keep doing so for --stable seconds (every issuance started after the first such 200 gets 200)."""
        end = self.fault_end
        deadline = end + args.recover_within + args.stable
        while time.time() < deadline:
            if not self.server.alive():
                raise ServerDied()
            after = [a for a in list(self.load.answers) if a.kind == "issue" and a.start >= end]
            last_bad = max([a.start for a in after if a.status != 200], default=end)
            good = [a for a in after if a.status == 200 and a.start > last_bad]
            if good:
                first = min(a.end for a in good)
                if first - end <= args.recover_within and time.time() - first >= args.stable and len(good) >= 5:
                    self.recovery = first - end
                    return
            time.sleep(0.1)
        after = [a for a in list(self.load.answers) if a.kind == "issue" and a.start >= end]
        statuses = summarize(after)
        self.fail(f"no recovery: issuance did not answer only 200 for {args.stable:.0f} s within {args.recover_within:.0f} s of the "
                  f"fault's end (answers since: {statuses or 'none'}); {timeline(after, end)}"
                  + (f"; tmpfs free now {free_bytes(self.tmpfs.point) / MiB:.1f} MB" if self.tmpfs else ""))

    def stop_and_check(self):
        died = not self.server.alive()
        if died:
            self.fail(f"the server exited with {self.server.process.returncode} during the run")
            self.server.kill()
        else:
            status, note = self.server.stop()
            if note:
                self.notes.append(note)
            if status != 0:
                self.fail(f"SIGTERM: the server ended with {status}{' (' + note + ')' if note else ''}")
        # Restart on the same state, as the run left it (the filler or ballast removed), and check
        # the ledger. Under load the ledger's WAL may itself have taken the space again (a build
        # that checkpointed every 8,192 certificates grew it by ≈ 13 KB a certificate and filled
        # 24 MB in ~4 s): a restart on a full disk is what the issue's report did, so it comes first.
        free = free_bytes(self.tmpfs.point) if self.tmpfs else None
        if self.tmpfs:
            self.notes.append(f"tmpfs free after the run: {free / MiB:.1f} MB")
        problem = self.server.start()
        if problem:
            where = f" on the tmpfs as the run left it ({free / MiB:.1f} MB free)" if self.tmpfs else ""
            self.fail(f"restart{where}: {problem}; log: {' | '.join(self.server.log_tail(2))}")
            self.server.kill()
            integrity = self.check_ledger("the server could not restart: the ledger read without it")
        else:
            integrity = self.check_ledger(None)
            full = self.tmpfs is not None and free_bytes(self.tmpfs.point) < 4 * MiB
            if not full:
                self.fresh_issuance()
            status, note = self.server.stop()
            if status != 0:
                self.fail(f"SIGTERM after the check: the server ended with {status} {note}")
            if not full:
                self.recheck_integrity(integrity)
                return
        if self.tmpfs is None:
            return
        # Little space left: the tmpfs is grown (nothing in the files changes) and the server started
        # again, for the fresh issuance and a second look at the ledger.
        grown = self.tmpfs.grow(self.tmpfs.megabytes + 64)
        if grown is not None:
            self.fail(f"could not grow the tmpfs for a second restart: {grown}")
            return
        self.notes.append(f"tmpfs grown to {self.tmpfs.megabytes} MB for a second restart")
        problem = self.server.start()
        if problem:
            self.fail(f"second restart, with space: {problem}; log: {' | '.join(self.server.log_tail(2))}")
            return
        if integrity is None:
            integrity = self.check_ledger("read again after the second restart")
        self.fresh_issuance()
        status, note = self.server.stop()
        if status != 0:
            self.fail(f"SIGTERM after the second restart: the server ended with {status} {note}")
        self.recheck_integrity(integrity)

    def fresh_issuance(self):
        answer, connection = self.load.issue_once(record=False)
        if connection is not None:
            connection.close()
        if answer.status != 200:
            self.fail(f"after the restart, a fresh issuance was answered {answer.status} {answer.error or answer.body[:200]!r}")

    def recheck_integrity(self, integrity):
        if integrity not in ("ok", None):  # again, the server stopped: a lasting fault, or one a reader saw while it ran?
            again = self.integrity()
            self.notes.append(f"integrity_check with the server stopped: {' / '.join(again.splitlines())[:200]}")

    def integrity(self):
        try:
            db = sqlite3.connect(f"file:{os.path.join(self.state, 'ledger.sqlite')}?mode=ro", uri=True, timeout=30)
            try:
                return db.execute("PRAGMA integrity_check").fetchone()[0]
            finally:
                db.close()
        except sqlite3.Error as error:
            return f"unreadable: {error}"

    def check_ledger(self, how):
        """Every certificate answered 200 in the ledger byte for byte, and integrity_check; the
        integrity_check's answer (None when the ledger could not be read)."""
        if how:
            self.notes.append(how)
        ledger = os.path.join(self.state, "ledger.sqlite")
        with self.load.lock:
            received = dict(self.load.received)
        try:
            db = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True, timeout=30)
            try:
                integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
                rows = {serial.lower(): bytes(der) for serial, der in db.execute("SELECT serial, der FROM certificates")}
            finally:
                db.close()
        except sqlite3.Error as error:
            self.unverified = len(received)
            self.fail(f"the ledger cannot be read ({error}): {len(received)} certificates answered 200 unverified")
            return None
        self.unverified = 0
        if integrity != "ok":
            self.fail(f"integrity_check{'' if how else ' (the restarted server running)'}: {' / '.join(integrity.splitlines())[:300]}")
            snapshot = os.path.join(self.work, "ledger-at-check")
            os.makedirs(snapshot, exist_ok=True)
            for suffix in ("", "-wal", "-shm"):
                try:
                    shutil.copy2(ledger + suffix, snapshot)
                except OSError:
                    pass
        missing = sorted(s for s in received if s not in rows)
        different = sorted(s for s in received if s in rows and rows[s] != received[s])
        self.lost = len(missing) + len(different)
        if missing:
            self.fail(f"{len(missing)} of {len(received)} certificates answered 200 are not in the ledger, e.g. {missing[:3]}")
        if different:
            self.fail(f"{len(different)} ledger rows differ from the certificate the client received, e.g. {different[:3]}")
        return integrity

    def judge_answers(self):
        answers = list(self.load.answers)
        bad = [a for a in answers if a.status is not None and not a.acceptable]
        if bad:
            kinds = summarize(bad)
            examples = "; ".join(f"{a.kind} {a.status} retry-after={a.retry_after!r} {a.body[:160]!r}" for a in bad[:3])
            self.fail(f"{len(bad)} answers other than 200 or 503 ledger_unavailable with Retry-After ({kinds}), e.g. {examples}")
        if self.load.malformed:
            self.fail(f"{len(self.load.malformed)} 200 answers could not be read, e.g. {self.load.malformed[0]}")
        retry_values = sorted({a.retry_after for a in answers if a.status == 503 and a.retry_after})
        if retry_values:
            self.notes.append(f"Retry-After values: {', '.join(retry_values[:5])}")

    # -- the scenarios

    def disk_full(self):
        self.start(self.state_on_tmpfs(args.disk_mb))
        self.load.start(args.clients, args.readers)
        self.watch_until(time.time() + 3)
        self.disk_note("before the filler")
        filler_path = os.path.join(self.tmpfs.point, "filler")
        fd = os.open(filler_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            self.fault_start = time.time()
            filled = fill(fd, args.disk_mb * MiB)
            self.notes.append(f"filler took {filled / MiB:.1f} MB")
            hold_end = self.fault_start + args.hold
            while time.time() < hold_end:  # keep it full: take what the server frees
                self.watch_until(min(hold_end, time.time() + 0.2))
                fill(fd, args.disk_mb * MiB)
        finally:
            os.close(fd)
            os.unlink(filler_path)
        self.fault_end = time.time()
        self.disk_note("filler removed")

    def ledger_growth(self):
        self.start(self.state_on_tmpfs(args.growth_mb))
        ballast_path = os.path.join(self.tmpfs.point, "ballast")
        fd = os.open(ballast_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            size = max(0, free_bytes(self.tmpfs.point) - int(args.growth_free_mb * MiB))
            written = fill(fd, size)
            self.notes.append(f"ballast {written / MiB:.1f} MB, {free_bytes(self.tmpfs.point) / MiB:.1f} MB left")
        finally:
            os.close(fd)
        self.fault_start = time.time()
        try:
            self.load.start(args.clients, args.readers)
            refused = lambda: any(a.kind == "issue" and a.status is not None and a.status != 200 for a in list(self.load.answers))
            if self.watch_until(time.time() + 60, refused):
                self.watch_until(time.time() + 2)
            else:
                self.fail("the fault was not reached: no refusal within 60 s of a nearly full disk")
        finally:
            self.disk_note("ballast removed")
            os.unlink(ballast_path)
        self.fault_end = time.time()

    def io_errors(self):
        state = os.path.join(self.work, "state")
        self.start(state)
        self.load.start(args.clients, args.readers)
        self.watch_until(time.time() + 3)
        prefix = os.path.join(self.work, "strace")
        command = ["strace", "-f", "-ff", "-y", "-qq", "-o", prefix, "-p", str(self.server.process.pid),
                   "-e", "trace=pwrite64,write,fdatasync,fsync",
                   "-e", f"inject=fdatasync,fsync:error=EIO:when={args.inject_fdatasync}",
                   "-e", f"inject=pwrite64:error=EIO:when={args.inject_pwrite}"]
        self.strace_command = " ".join(command)
        with open(os.path.join(self.work, "strace.err"), "wb") as err:
            self.strace = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        self.fault_start = time.time()
        try:
            self.watch_until(self.fault_start + args.inject_seconds)
        finally:
            self.stop_strace()
            self.fault_end = time.time()
            self.injected, summary = strace_summary(prefix)
            self.notes.append(f"strace: {summary}")
        if not self.injected:
            self.fail("the fault was not injected: strace shows no (INJECTED) call")

    def stop_strace(self):
        if self.strace is None or self.strace.poll() is not None:
            return
        self.strace.send_signal(signal.SIGINT)  # detaches; the server goes on untraced
        try:
            self.strace.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.strace.kill()
            self.strace.wait()
            self.notes.append("strace did not detach within 15 s of SIGINT: killed")

    # -- the whole run

    def execute(self):
        started = time.time()
        try:
            {"disk-full": self.disk_full, "ledger-growth": self.ledger_growth, "io-errors": self.io_errors}[self.scenario]()
            self.await_recovery()
        except ServerDied:
            self.fault_end = self.fault_end or time.time()
        except RunAbort as abort:
            self.fail(str(abort))
        finally:
            self.stop_strace()
            if self.load is not None:
                stuck = self.load.stop()
                if stuck:
                    self.notes.append(f"{len(stuck)} load threads did not end")
        try:
            if self.load is not None and self.server is not None and self.server.process is not None:
                self.judge_answers()
                self.stop_and_check()
        finally:
            if self.server is not None:
                self.server.kill()
        self.seconds = time.time() - started
        return self.report()

    def cleanup(self):
        """Stops what is left, unmounts, removes the work dir (a failed run's log and state are copied first)."""
        self.stop_strace()
        if self.load is not None:
            self.load.stopping.set()
        if self.server is not None:
            self.server.kill()
        if self.failures:
            keep = args.keep_failed or os.path.join(tempfile.gettempdir(), "tokentool-faults-failed")
            target = os.path.join(keep, f"{time.strftime('%Y%m%dT%H%M%S')}-{self.scenario}-{self.number}")
            try:
                os.makedirs(keep, exist_ok=True)
                shutil.copytree(self.work, target, symlinks=True, ignore=shutil.ignore_patterns("strace.*"))
                say(f"  kept: {target}")
            except (OSError, shutil.Error) as error:
                say(f"  could not keep the run's files: {error}")
        if self.tmpfs is not None:
            self.tmpfs.close()
        shutil.rmtree(self.work, ignore_errors=True)

    def report(self):
        answers = list(self.load.answers) if self.load else []
        issued = sum(1 for a in answers if a.kind == "issue" and a.status == 200)
        refusals = summarize([a for a in answers if a.status is not None and a.status != 200])
        during = [a for a in answers if self.fault_start and a.kind == "issue" and self.fault_start <= a.start <= (self.fault_end or 1e18)]
        errors = sum(1 for a in answers if a.status is None)
        reads = sum(1 for a in answers if a.kind in ("crl", "ocsp") and a.status == 200)
        try_later = sum(1 for a in answers if a.kind == "ocsp" and a.status == 200 and a.code)
        if try_later:
            reads = f"{reads} ({try_later} OCSP answers not 'successful', e.g. tryLater)"
        recovery = f"recovered in {self.recovery:.1f} s" if self.recovery is not None else "not recovered"
        line = (f"{self.scenario} run {self.number}: {issued} certificates (200), {reads} CRL/OCSP reads (200); "
                f"refusals: {refusals or 'none'}; during the fault: {summarize(during) or 'no answers'}; connection errors {errors}; "
                f"lost {self.lost}{f' ({self.unverified} unverified)' if self.unverified else ''}; {recovery}; "
                + ("ok" if not self.failures else "FAILED"))
        say(line)
        for note in self.notes:
            say(f"  note: {note}")
        for failure in self.failures:
            say(f"  FAIL: {failure}")
        if self.failures and self.server is not None:
            for log_line in self.server.log_tail(6):
                say(f"  log: {log_line[:300]}")
        return not self.failures


class RunAbort(Exception):
    pass


class ServerDied(Exception):
    pass


def summarize(answers):
    """'200 ×5, 503 ledger_unavailable ×3, connection error ×1'."""
    counts = {}
    for a in answers:
        key = "connection error" if a.status is None else f"{a.status}{' ' + a.code if a.code else ''}"
        if a.kind != "issue":
            key = f"{a.kind} {key}"
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{key} ×{n}" for key, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def timeline(answers, origin, seconds=24):
    """'by second since the fault's end (200s/others): 0-1 s 0/31, 1-2 s 12/3, ...'."""
    slots = {}
    for a in answers:
        slot = int(a.start - origin)
        if 0 <= slot < seconds:
            good, other = slots.get(slot, (0, 0))
            slots[slot] = (good + 1, other) if a.status == 200 else (good, other + 1)
    return "by second since the fault's end (200s/others): " + ", ".join(f"{k}s {g}/{o}" for k, (g, o) in sorted(slots.items()))


def strace_summary(prefix):
    """(injected calls, 'syscall file: calls (injected)' for the ledger's files) from strace -ff -y output."""
    calls, injected = {}, {}
    directory, stem = os.path.split(prefix)
    for name in os.listdir(directory):
        if not name.startswith(os.path.basename(stem) + "."):
            continue
        with open(os.path.join(directory, name), errors="replace") as f:
            for line in f:
                found = re.match(r"(?:<\.\.\. )?(\w+)\((?:\d+<([^>]*)>)?", line)
                if not found:
                    continue
                syscall, path = found.group(1), found.group(2) or "?"
                if not path.startswith("/"):
                    path = path.split(":")[0]  # socket:[N], TCP:[...], pipe:[N]
                else:
                    path = os.path.basename(path)
                key = f"{syscall} {path}"
                calls[key] = calls.get(key, 0) + 1
                if "(INJECTED)" in line:
                    injected[key] = injected.get(key, 0) + 1
    total = sum(injected.values())
    parts = [f"{key} {n}" + (f" ({injected[key]} injected)" if key in injected else "") for key, n in
             sorted(calls.items(), key=lambda kv: -kv[1]) if not key.startswith("write ")]
    writes = sum(n for key, n in calls.items() if key.startswith("write "))
    return total, f"{total} injected; " + ", ".join(parts[:8]) + f"; write (sockets, logs) {writes}"


# ---------------------------------------------------------------------------------------------

def main():
    chosen = SCENARIOS if args.scenario == "all" else [args.scenario]
    skipped = {}
    mount_problem = probe_mount() if ("disk-full" in chosen or "ledger-growth" in chosen) else None
    for scenario in ("disk-full", "ledger-growth"):
        if scenario in chosen and mount_problem:
            skipped[scenario] = mount_problem
    if "io-errors" in chosen:
        if os.geteuid() != 0:
            skipped["io-errors"] = "not root (strace -p on the server needs root: run it with sudo)"
        else:
            problem = probe_strace()
            if problem:
                skipped["io-errors"] = problem
    for scenario in chosen:
        if scenario in skipped:
            say(f"faults: SKIP {scenario}: {skipped[scenario]}")
    to_run = [s for s in chosen if s not in skipped]
    passed = failed = 0
    results = {}
    if to_run:
        say(f"faults: {tokentool}; {args.runs} runs of {', '.join(to_run)}; {args.clients} issuing clients, {args.readers} readers; "
            f"load average {open('/proc/loadavg').read().split()[0]}")
        csrs = make_csr_pool(64)
    try:
        for scenario in to_run:
            results[scenario] = {"ok": 0, "lost": 0, "unverified": 0, "recovered": 0, "runs": 0, "recoveries": []}
            for number in range(1, args.runs + 1):
                run = Run(scenario, number, csrs)
                try:
                    ok = run.execute()
                finally:
                    run.cleanup()
                result = results[scenario]
                result["runs"] += 1
                result["ok"] += ok
                result["lost"] += run.lost
                result["unverified"] += run.unverified
                if run.recovery is not None:
                    result["recovered"] += 1
                    result["recoveries"].append(run.recovery)
                passed += ok
                failed += not ok
    except KeyboardInterrupt as interrupt:
        say(f"faults: interrupted ({interrupt}); stopped the servers and unmounted")
        failed += 1
    finally:
        shutil.rmtree(base, ignore_errors=True)
    for scenario, r in results.items():
        slowest = f", slowest recovery {max(r['recoveries']):.1f} s" if r["recoveries"] else ""
        unverified = f" ({r['unverified']} unverified: ledger unreadable)" if r["unverified"] else ""
        say(f"{scenario}: {r['ok']}/{r['runs']} runs ok, {r['lost']} certificates lost{unverified}, {r['recovered']} recoveries{slowest}")
    say(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


main()
