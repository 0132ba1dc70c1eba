"""What the test servers (keyserver.py, openweb_server.py) share: a server that writes a line to a
file for every connection it accepts, before the TLS handshake — so a test can count the
connections a client made, including those whose handshake it refused."""
from http.server import ThreadingHTTPServer


class AcceptLoggingServer(ThreadingHTTPServer):
    daemon_threads = True
    # Set by the script: the file to append to (None: no log), and the lock its writers share.
    accept_log = None
    accept_lock = None

    def get_request(self):
        accepted = super().get_request()
        if self.accept_log:
            with self.accept_lock, open(self.accept_log, "a") as log:
                log.write("accepted\n")
        return accepted
