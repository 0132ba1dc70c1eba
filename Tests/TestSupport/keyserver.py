#!/usr/bin/env python3
"""A real HTTP(S) server on loopback for the PDAKeys tests.

It serves whatever routes.json (re-read on every request) says, and appends one line per request
to the log file *when the request arrives*, before any delay, so tests can count what the server
actually received.

routes.json: {"<host>/<path>" or "/<path>": {
    "status": 200, "headers": {"Cache-Control": "max-age=600"}, "body": "text",
    "repeat": 1,        # body repeated this many times (huge responses)
    "chunked": false,   # send without Content-Length, in chunks
    "delay": 0.0,       # seconds to wait before answering
    "trickle": 0.0      # seconds to wait between 1 KiB pieces of the body
}}
Unknown paths get 404. Prints "PORT <n>" on standard output once listening on 127.0.0.1.
"""
import argparse, json, os, signal, socket, ssl, sys, threading, time
from http.server import BaseHTTPRequestHandler
from accept_log import AcceptLoggingServer

parser = argparse.ArgumentParser()
parser.add_argument("--routes", required=True)
parser.add_argument("--log", required=True)
parser.add_argument("--cert")
parser.add_argument("--key")
parser.add_argument("--connections", help="a file that gets a line for every connection accepted (before its TLS handshake)")
args = parser.parse_args()
log_lock = threading.Lock()
AcceptLoggingServer.accept_log, AcceptLoggingServer.accept_lock = args.connections, log_lock


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        host = (self.headers.get("Host") or "").split(":")[0]
        with log_lock, open(args.log, "a") as log:
            log.write(f"{self.command} {host}{self.path} accept={self.headers.get('Accept')}\n")
            log.flush()
        try:
            with open(args.routes) as f:
                routes = json.load(f)
        except (OSError, ValueError):
            routes = {}
        route = routes.get(host + self.path) or routes.get(self.path)
        if route is None:
            route = {"status": 404, "body": "not found"}
        time.sleep(route.get("delay", 0))
        body = (route.get("body", "") * route.get("repeat", 1)).encode()
        self.send_response(route.get("status", 200))
        for name, value in route.get("headers", {}).items():
            self.send_header(name, value)
        chunked = route.get("chunked", False)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        trickle = route.get("trickle", 0)
        try:
            for start in range(0, len(body), 1024):
                piece = body[start:start + 1024]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
                self.wfile.flush()
                if trickle:
                    time.sleep(trickle)
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True


    def do_POST(self):
        # The body is read and dropped; the route answers as for a GET.
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.do_GET()


# What a client that gives up on us causes: the tests do that on purpose (a client that does not
# trust the certificate and aborts the handshake, a timeout that closes the connection mid-body).
EXPECTED_ERRORS = (ConnectionError, ssl.SSLError, socket.timeout)


class Server(AcceptLoggingServer):
    request_queue_size = 1024

    def handle_error(self, request, client_address):
        # Called inside the except block that caught the handler's exception. Anything that is not
        # a client going away still gets socketserver's "Exception occurred ... Traceback" report.
        if isinstance(sys.exc_info()[1], EXPECTED_ERRORS):
            return
        super().handle_error(request, client_address)


server = Server(("127.0.0.1", 0), Handler)
if args.cert:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)


print(f"PORT {server.server_address[1]}", flush=True)
# The parent's signal mask is inherited: make sure SIGTERM still ends us.
signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM, signal.SIGINT])
signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
# Exit when the test process closes our standard input (it died or finished).
threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
server.serve_forever()
