#!/usr/bin/env python3
"""A stand-in for OpenWeb's SSO backend on loopback HTTPS, for the TokenServer OpenWeb tests.

OpenWeb's service cannot run here, so this follows its documented contract (the OpenWeb SSO seed,
seeds/004_8ddc6bc761da8684.txt, step 4, and OpenWeb's published examples of the call):

    GET /api/sso/v1/register-user?code_a=…&access_token=…&primary_key=…&user_name=…
    → 200, the body is codeB (text)

Each parameter must be present exactly once and non-empty (else 400); access_token must equal the
content of --token-file (else 403). codeB is derived from code_a and primary_key, so a test can tell
which request it answers. Every request is logged when it arrives (before any delay), one JSON
object a line: {"method", "path", "query": {name: [values]}, "accept", "codeB" (when one was made)}.

--mode-file (JSON, re-read on every request) changes the behaviour:
    {"mode": "normal"}            the contract above
    {"mode": "json"}              answers {"code_b": codeB} instead of the text
    {"mode": "slow", "delay": 5}  waits, then the contract
    {"mode": "redirect"}          302 to /sso/v1/elsewhere (which would answer a codeB)
    {"mode": "echo"}              500 whose body echoes the request line (access token included)
    {"mode": "empty"}             200 with an empty body
    {"mode": "huge"}              200 with a 64 KiB body
Prints "PORT <n>" once listening on 127.0.0.1 (port chosen by the OS); exits when its standard
input closes.
"""
import argparse, hashlib, json, os, signal, socket, ssl, sys, threading, time
from http.server import BaseHTTPRequestHandler
from accept_log import AcceptLoggingServer
from urllib.parse import parse_qs, urlsplit

parser = argparse.ArgumentParser()
parser.add_argument("--cert", required=True)
parser.add_argument("--key", required=True)
parser.add_argument("--token-file", required=True)
parser.add_argument("--log", required=True)
parser.add_argument("--connections", help="a file that gets a line for every connection accepted (before its TLS handshake)")
parser.add_argument("--mode-file", required=True)
args = parser.parse_args()
log_lock = threading.Lock()
AcceptLoggingServer.accept_log, AcceptLoggingServer.accept_lock = args.connections, log_lock
REQUIRED = ("code_a", "access_token", "primary_key", "user_name")


def code_b(code_a, primary_key):
    return "cb_" + hashlib.sha256(f"{code_a}\n{primary_key}".encode()).hexdigest()[:40]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def answer(self, status, body, content_type="text/plain", headers=None):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True

    def log(self, entry):
        with log_lock, open(args.log, "a") as log:
            log.write(json.dumps(entry) + "\n")

    def do_GET(self):
        url = urlsplit(self.path)
        # OpenWeb's API base is https://www.spot.im/api: the routes are under /api.
        path = url.path[len("/api"):] if url.path.startswith("/api/") else url.path
        query = parse_qs(url.query, keep_blank_values=True)
        try:
            with open(args.mode_file) as f:
                mode = json.load(f)
        except (OSError, ValueError):
            mode = {}
        kind = mode.get("mode", "normal")
        expected_token = open(args.token_file).read().strip()
        made = None
        if path == "/sso/v1/register-user" and all(len(query.get(n, [])) == 1 and query[n][0] for n in REQUIRED) \
                and query["access_token"][0] == expected_token:
            made = code_b(query["code_a"][0], query["primary_key"][0])
        self.log({"method": "GET", "path": url.path, "query": query, "accept": self.headers.get("Accept"),
                  "codeB": made if kind in ("normal", "json", "slow") else None})
        if path == "/sso/v1/elsewhere":
            return self.answer(200, "cb_from_the_redirect_target")
        if path != "/sso/v1/register-user":
            return self.answer(404, json.dumps({"success": False, "message": "not found"}), "application/json")
        if kind == "slow":
            time.sleep(mode.get("delay", 5))
        elif kind == "redirect":
            return self.answer(302, "", headers={"Location": f"https://localhost:{self.server.server_address[1]}/api/sso/v1/elsewhere"})
        elif kind == "echo":
            return self.answer(500, f"internal error while handling GET {self.path} (token {expected_token})")
        elif kind == "empty":
            return self.answer(200, "")
        elif kind == "huge":
            return self.answer(200, "x" * 65536)
        for name in REQUIRED:
            if len(query.get(name, [])) != 1 or not query[name][0]:
                return self.answer(400, json.dumps({"success": False, "message": f"missing {name}"}), "application/json")
        if query["access_token"][0] != expected_token:
            return self.answer(403, json.dumps({"success": False, "message": "invalid access token"}), "application/json")
        if kind == "json":
            return self.answer(200, json.dumps({"code_b": made}), "application/json")
        return self.answer(200, made)


EXPECTED_ERRORS = (ConnectionError, ssl.SSLError, socket.timeout)


class Server(AcceptLoggingServer):
    def handle_error(self, request, client_address):
        # Clients that give up (a test's timeout, an untrusted certificate) are expected.
        if isinstance(sys.exc_info()[1], EXPECTED_ERRORS):
            return
        super().handle_error(request, client_address)


server = Server(("127.0.0.1", 0), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(args.cert, args.key)
server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
print(f"PORT {server.server_address[1]}", flush=True)
signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM, signal.SIGINT])
signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
server.serve_forever()
