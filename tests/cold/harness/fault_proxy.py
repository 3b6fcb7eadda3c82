#!/usr/bin/python3
"""A fault-injecting HTTP/1.1 proxy for the cold tier's S3 tests (python3 stdlib only).

  fault_proxy.py --listen-port-file F --upstream http://127.0.0.1:PORT --fault-rate R
                 --seed S --log L [--faults 500,503,slowdown,reset,stall,truncate]
                 [--stall-seconds N] [--outage-file O] [--fault-methods PUT,DELETE]

Listens on 127.0.0.1 (a free port, written to F once listening) and forwards every request to
the upstream unchanged: method, path and query byte for byte, every end-to-end header including
Authorization and Host. Host must reach the server as the client sent it, because SigV4 signs
it and the client signed for the proxy's host:port; rgw verifies against the Host it receives.

With probability R (one seeded RNG, drawn once per request in arrival order, so the same
request sequence gets the same faults) a request gets one fault, picked uniformly from --faults:
  500       InternalError XML, HTTP 500; not forwarded
  503       ServiceUnavailable XML, HTTP 503; not forwarded
  slowdown  SlowDown XML, HTTP 503 (what S3 sends to throttle); not forwarded
  429       SlowDown XML, HTTP 429 (some S3 servers throttle so); not forwarded
  403       AccessDenied XML, HTTP 403 (a permanent error; not in the default list); not forwarded
  reset     the connection is closed with a TCP RST (SO_LINGER 0), no response; not forwarded
  stall     the request is read, then nothing is sent for --stall-seconds (default 30), then
            the connection is closed; not forwarded
  truncate  forwarded; the response is sent with its full Content-Length but only half its
            body (for an empty body, Content-Length 1 and no byte; for HEAD, 204 and 304, which
            have no body, nothing at all: the client sees an empty reply), then the connection
            is closed. The upstream did act on it: a PUT is stored, a DELETE done, although the
            client sees a failed transfer.
--fault-methods limits faults to requests with those methods (the others are always forwarded,
the RNG still drawn): e.g. uploads fail while listings work.
An outage: while the file O exists, every request (whatever the rate) gets fault "outage": the
connection is reset as for "reset", not forwarded; the RNG is still drawn, so removing O
restores the seeded sequence. A test creates O to start an outage and removes it to end it.
"Not forwarded" means the upstream never saw the request: after such a fault, a PUT did not
happen. The request body is always read first (the proxy answers Expect: 100-continue itself
with 100 Continue, before the fault is drawn), so the connection stays usable after the HTTP
error faults; reset, stall and truncate end it.

One JSON line per request is appended to L and flushed:
  {"seq": N, "method": "PUT", "path": "/bucket/key?query", "fault": null or a name above,
   "forwarded": true|false, "status": the status sent to the client or null}
"status" is null for reset and stall; for truncate it is the upstream's status. When the
upstream cannot be reached the client gets 502 and the line has "forwarded": false and an
"error" field; so does a request with a chunked body (not supported: S3 clients send
Content-Length), which gets 501. SIGTERM (or SIGINT) stops the proxy and exits 0.
"""
import argparse
import http.client
import http.server
import json
import os
import random
import signal
import socket
import struct
import sys
import threading
import urllib.parse
from xml.sax.saxutils import escape as xml_escape

ALL_FAULTS = ("500", "503", "slowdown", "429", "403", "reset", "stall", "truncate")
# Hop-by-hop headers (RFC 9110 7.6.1) are the proxy's own business on each side. Expect is
# answered here (100 Continue) but still forwarded: libcurl signs it when the client sets it
# explicitly (SignedHeaders=expect;host;...), so dropping it would break the signature. The
# upstream's own 100 Continue is skipped by http.client.
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authenticate",
              "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade"}
ERRORS = {  # fault -> (status, reason, S3 error code, message)
    "500": (500, "Internal Server Error", "InternalError",
            "We encountered an internal error. Please try again."),
    "503": (503, "Service Unavailable", "ServiceUnavailable", "Please reduce your request rate."),
    "slowdown": (503, "Slow Down", "SlowDown", "Please reduce your request rate."),
    "429": (429, "Too Many Requests", "SlowDown", "Please reduce your request rate."),
    "403": (403, "Forbidden", "AccessDenied", "Access Denied"),  # permanent: never retried
}
CHUNK = 1 << 20


class Proxy(http.server.ThreadingHTTPServer):
    daemon_threads = True  # a stalled or idle keep-alive connection must not block exit
    allow_reuse_address = True

    def __init__(self, args):
        super().__init__(("127.0.0.1", 0), Handler)
        up = urllib.parse.urlsplit(args.upstream)
        if up.scheme != "http" or not up.hostname:
            raise SystemExit(f"fault_proxy: --upstream must be http://HOST:PORT, not {args.upstream}")
        self.up_host, self.up_port = up.hostname, up.port or 80
        self.rate, self.faults, self.stall_seconds = args.fault_rate, args.faults, args.stall_seconds
        self.outage_file = args.outage_file
        self.fault_methods = set(m.strip().upper() for m in args.fault_methods.split(",") if m.strip())
        self.rng = random.Random(args.seed)
        self.lock = threading.Lock()
        self.seq = 0
        self.log = open(args.log, "a", buffering=1)
        self.stopping = threading.Event()  # wakes stalled handlers at shutdown

    def draw(self, method):
        """The next request's number and fault (None for none), in arrival order."""
        with self.lock:
            self.seq += 1
            # Always draw both numbers, so the sequence does not depend on earlier outcomes.
            hit, pick = self.rng.random(), self.rng.randrange(len(self.faults))
            if self.outage_file and os.path.exists(self.outage_file):
                return self.seq, "outage"
            if self.fault_methods and method.upper() not in self.fault_methods:
                return self.seq, None
            return self.seq, (self.faults[pick] if hit < self.rate else None)

    def record(self, entry):
        line = json.dumps(entry)
        with self.lock:
            if self.log.closed:  # a handler finishing after shutdown
                return
            self.log.write(line + "\n")
            self.log.flush()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, and 100-continue handling by the base class
    entry = None  # the request being answered, until its log line is written

    def log_message(self, fmt, *args):  # the JSON log is the record; keep stderr quiet
        pass

    # Every method takes the same path; S3 uses GET, HEAD, PUT, POST and DELETE.
    def __getattr__(self, name):
        if name.startswith("do_"):
            return self.proxy_request
        raise AttributeError(name)

    def read_body(self):
        if self.headers.get("Transfer-Encoding"):  # S3 clients send Content-Length; not needed
            raise ValueError("chunked request bodies are not supported")
        n = int(self.headers.get("Content-Length") or 0)
        chunks = []
        while n > 0:
            c = self.rfile.read(min(n, CHUNK))
            if not c:
                raise ConnectionError("client closed the connection inside the request body")
            chunks.append(c)
            n -= len(c)
        return b"".join(chunks)

    def proxy_request(self):
        srv = self.server
        seq, fault = srv.draw(self.command)
        entry = {"seq": seq, "method": self.command, "path": self.path, "fault": fault,
                 "forwarded": False, "status": None}
        self.entry = entry
        try:
            try:
                body = self.read_body()
            except ValueError as e:
                entry["error"], entry["fault"] = str(e), None  # no fault was applied
                self.close_connection = True
                entry["status"] = self.send_error_xml(501, "Not Implemented", "NotImplemented", str(e), seq)
                return
            if fault in ERRORS:
                entry["status"] = self.send_error_xml(*ERRORS[fault], seq)
            elif fault in ("reset", "outage"):
                self.reset()
            elif fault == "stall":
                srv.stopping.wait(srv.stall_seconds)
                self.close_connection = True
            else:
                self.forward(body, entry, truncate=(fault == "truncate"))
        finally:
            self.record_once()

    # The line is written before the answer leaves, so a client that has its answer can count on
    # the request being in the log (a test counts requests right after a call returns).
    def record_once(self):
        if self.entry is not None:
            self.server.record(self.entry)
            self.entry = None

    def send_error_xml(self, status, reason, code, message, seq):
        xml = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
               f"<Message>{xml_escape(message)}</Message><RequestId>fault-proxy-{seq}</RequestId></Error>")
        body = b"" if self.command == "HEAD" else xml.encode()
        head = [f"HTTP/1.1 {status} {reason}", "Content-Type: application/xml",
                f"Content-Length: {len(body)}"]
        if self.entry is not None:
            self.entry["status"] = status  # logged with the head, below
        self.write_head(head)
        self.wfile.write(body)
        return status

    def write_head(self, lines):
        self.record_once()
        if self.close_connection:
            lines = lines + ["Connection: close"]
        self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    def reset(self):
        # SO_LINGER 0 makes close() send RST instead of FIN. The socket only really closes when
        # rfile (a makefile of it) is closed too; and it must be closed here, before the server's
        # shutdown_request(), whose shutdown(SHUT_WR) would send a FIN first.
        self.close_connection = True
        self.record_once()
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.rfile.close()
        self.connection.close()

    def forward(self, body, entry, truncate):
        srv = self.server
        # A new upstream connection per request: no stale keep-alive connection whose failure
        # would leave it unclear whether the upstream saw the request. Loopback makes it cheap.
        up = http.client.HTTPConnection(srv.up_host, srv.up_port, timeout=300)
        try:
            up.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() not in HOP_BY_HOP:
                    up.putheader(name, value)  # Host included, as the client signed it
            up.endheaders()
            if body:
                up.send(body)
            entry["forwarded"] = True
            resp = up.getresponse()
            rbody = resp.read()
            status, reason, rheaders = resp.status, resp.reason, resp.getheaders()
        except (OSError, http.client.HTTPException) as e:
            entry["error"] = f"upstream: {e!r}"
            self.close_connection = True
            entry["status"] = self.send_error_xml(502, "Bad Gateway", "BadGateway", str(e), entry["seq"])
            return
        finally:
            up.close()

        no_body = self.command == "HEAD" or status in (204, 304) or status < 200
        head = [f"HTTP/1.1 {status} {reason}"]
        for name, value in rheaders:
            n = name.lower()
            if n in HOP_BY_HOP or (n == "content-length" and not no_body):
                continue
            head.append(f"{name}: {value}")
        entry["status"] = status
        if not truncate:
            if not no_body:
                head.append(f"Content-Length: {len(rbody)}")
            self.write_head(head)
            self.wfile.write(rbody)
            return
        self.close_connection = True
        if not no_body:  # (a cut header block alone is not an error to libcurl: send nothing)
            head.append(f"Content-Length: {max(len(rbody), 1)}")
            self.write_head(head)
            self.wfile.write(rbody[: len(rbody) // 2])

    def handle_one_request(self):
        try:
            super().handle_one_request()
        except (ConnectionError, socket.timeout, ValueError, OSError):
            # The client went away (or the socket was reset on purpose): end this connection.
            self.close_connection = True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen-port-file", required=True)
    ap.add_argument("--upstream", required=True, help="http://HOST:PORT")
    ap.add_argument("--fault-rate", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log", required=True)
    ap.add_argument("--faults", default="500,503,slowdown,reset,stall,truncate")
    ap.add_argument("--stall-seconds", type=float, default=30.0)
    ap.add_argument("--outage-file", default="", help="while this file exists, reset every request")
    ap.add_argument("--fault-methods", default="", help="only these methods get faults (default: all)")
    args = ap.parse_args()
    args.faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    bad = [f for f in args.faults if f not in ALL_FAULTS]
    if bad or not args.faults:
        ap.error(f"--faults: unknown {bad}; choose from {','.join(ALL_FAULTS)}")
    if not 0.0 <= args.fault_rate <= 1.0:
        ap.error("--fault-rate must be within [0, 1]")

    srv = Proxy(args)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    t.start()
    # Written after bind+listen (in the constructor), atomically, so a reader that sees the
    # file can connect.
    tmp = args.listen_port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{srv.server_address[1]}\n")
    os.replace(tmp, args.listen_port_file)

    while not stop.wait(0.5):  # a timed wait, so the signal handler surely gets to run
        pass
    srv.stopping.set()
    srv.shutdown()
    srv.server_close()
    with srv.lock:
        srv.log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
