#!/usr/bin/env python3
"""Loopback HTTP server that misbehaves on purpose, for TileSpool's tests.

Started by Tests/TileSpoolTests/Support/FaultServer.swift (or by hand):

    python3 faultserver.py --port 0 --state-dir DIR

It binds 127.0.0.1:PORT (0 = pick a free port), prints the chosen port number alone on
its first stdout line, and then writes nothing more to stdout. It exits when its stdin
reaches end-of-file (the parent went away; with --remove-state-on-eof it then deletes the
state directory), on SIGTERM/SIGINT, or after --max-seconds.

State lives in --state-dir so that a stopped server restarted on the same port comes back
with the same memory:
    DIR/hits.log     one line per counted request: the URL path (no query), appended and
                     flushed *before* the response is sent
    DIR/requests.log one JSON line per counted request: {"path", "headers": {name: value}}
    DIR/json/<name>  documents registered with POST /_register/<name>

Behaviour by URL path (PATH below is the raw request path without its query string; any
trailing segments such as /3/4/5.png are part of the tile URL). Bodies are deterministic:
    /ok/...              200, body b"tile " + PATH, Content-Length set (after the PNG/JPEG/WebP
                         signature when PATH ends in .png, .jpg, .jpeg, .webp)
    /empty/...           204, no body
    /missing/...         404
    /flaky/N/...         first N requests for this exact PATH answer 503, then like /ok
    /ratelimit/N/...     first N answer 429 with "Retry-After: 1", then like /ok
    /ratelimitdate/N/... same, with Retry-After an HTTP date 1-2 s in the future
    /error500/...        always 500
    /html/...            200, text/html, an HTML login page
    /text/...            200, text/plain, "quota exceeded for this key"
    /notpng/...          200, image/png, a GIF body (wrong signature)
    /empty200/...        200 with an empty body
    /status/CODE/...     CODE with body "status CODE"
    /retryafter/S/N/...  first N answer 429 with "Retry-After: S", then like /ok
    /reset/...           Content-Length 1000, 100 body bytes, then a TCP reset (SO_LINGER 0)
    /short/...           Content-Length 1000, 500 body bytes, then a clean close
    /slowbody/...        Content-Length 1000000, then 1 byte every 2 s (until the client
                         disconnects, or 120 s)
    /hang/...            reads the request and never answers (until the client
                         disconnects, or 120 s)
    /huge/...            200 with a 64 MiB body: (b"tile " + PATH + b"\\n") repeated,
                         cut at exactly 64 MiB
    /badgzip/...         200, "Content-Encoding: gzip", body that is not gzip
    /gzipped/KIB/...     200 WITHOUT Content-Encoding, body = a gzip file (RFC 1952, mtime 0,
                         level 9) of ok_body(PATH) followed by zero bytes up to KIB KiB: a body
                         that is itself gzip, as an object store serving .pbf.gz files sends it
    /redirectloop/...    302 to itself
    /redirectfile/...    302 to file:///etc/passwd
    /redirect/REST       302 to /ok/REST (query kept)
    /redirectto/SCHEME/HOSTPORT/REST
                         302 to SCHEME://HOSTPORT/REST (query kept): another server, origin or
                         host, e.g. /redirectto/http/localhost:PORT/ok/1/2/3.png
    /json/<name>         the registered document, with every "__BASE__" replaced by
                         http://127.0.0.1:PORT; 404 when not registered
    /changing/N/...      a resource whose body and ETag change while Last-Modified does not:
                         request k of PATH sees version v = min(k, N), body b"tile " + PATH
                         + b" v<v>" (after the signature, as /ok), ETag "v<v>", Last-Modified
                         always Wed, 01 Jan 2025 00:00:00 GMT. Conditional requests are judged
                         as RFC 9110 section 13.2.2 says: If-None-Match (when sent, alone) is
                         304 when it names "v<v>"; else If-Modified-Since is 304 when not before
                         Last-Modified (always, here: the trap of a client that sends both)
    /changingjson/N/<name>  the same for a registered document: every "__BASE__" replaced as
                         for /json/ and every "__VERSION__" by v
    /pmtiles/MODE/N/<name>  the registered document <name> (bytes: a PMTiles archive, see
                         FaultServer.registerFile) served with byte ranges (RFC 9110 section 14:
                         `Range: bytes=a-b` answers 206 with Content-Range), ETag "v1", and
                         If-Match judged (412 when it names another ETag). Request k of PATH:
                         MODE ranged: always as above;
                         MODE changed: from k > N on the archive is a new version, ETag "v2"
                         (same bytes), so a client pinning "v1" gets 412;
                         MODE norange: Range ignored, 200 with the whole file, always;
                         MODE laternorange: as ranged for k <= N, as norange for k > N (a
                         server that honours Range for the directories only);
                         MODE truncated: for N < k <= N+2 a 206 with only the first half of the
                         bytes asked (a consistent Content-Range and Content-Length);
                         MODE 416: for N < k <= N+2 a 416 (Content-Range bytes */LENGTH);
                         MODE shifted: for N < k <= N+2 a 206 of the length asked but for the
                         bytes one further on, or one back at the end of the file (its
                         Content-Range says so);
                         MODE nocr: for N < k <= N+2 a 206 of the bytes asked without Content-Range;
                         MODE shiftedall: as shifted, for every k > N;
                         MODE twocr: for N < k <= N+2 a 206 with two Content-Range fields, the
                         bytes asked first, then the shifted bytes that the body holds;
                         MODE noval: as ranged, without an ETag (no validator at all);
                         MODE cutoff: for every k > N, a 206 announcing the bytes asked
                         (Content-Range and Content-Length) that sends at most the first
                         50,000 of them, then closes the connection (a proxy or a link
                         that cuts long answers);
                         MODE capped: for every k > N, a 206 of at most the first 50,000 bytes
                         asked, its Content-Range saying so (a server that caps ranges);
                         MODE stripped: for every k > N, If-Match ignored and no ETag sent (a
                         proxy that strips validators);
                         MODE cutchanged: for every k > N, ETag "v2" with If-Match ignored, and
                         the answer cut as in cutoff (a new version, cut short);
                         MODE twoetags: for every k > N, two ETag fields, "v1" then "v2", with
                         If-Match ignored (a proxy that adds its own);
                         MODE twolm: no ETag and Last-Modified Wed, 01 Jan 2025 00:00:00 GMT; for
                         every k > N two Last-Modified fields, that one then a later one, with
                         If-Unmodified-Since ignored;
                         MODE slow: as ranged, each request k <= N answered 3 s late
                         MODE drop: request k = N+1 gets a 206 announcing the bytes asked, of
                         which only the first half comes before the connection closes (a link
                         that drops mid-answer); every other request as ranged;
                         MODE hold: request k = N+1 gets no answer at all: counts a hit of
                         /held<path>, holds the connection until the client closes it (60 s
                         at most), then counts a hit of /released<path>; every other request
                         as ranged (a server that stalls before answering);
                         MODE stall: request k = N+1, when it asks more than 50,000 bytes, a
                         206 announcing the bytes asked that sends the first 50,000, waits
                         until the client's kernel has them all (nothing left in this side's
                         send queue, SIOCOUTQ), counts a hit of /stalled<path>, then holds
                         the connection open until the client closes it (60 s at most);
                         every other request as ranged (a link that stalls mid-range)
                         MODE stallgone: request k = N+1 as in stall; every request k > N+1,
                         while the document <name>.gone holds "1", closes the connection
                         without an answer (a server gone, while a range it was sending
                         hangs); as ranged once <name>.gone holds anything else
    /lastmodified/...    like /ok with Last-Modified Wed, 01 Jan 2025 00:00:00 GMT and no ETag;
                         304 when If-Modified-Since is not before it
    /reply/<name>/...    the reply registered as <name> (a JSON document
                         {"status": 200, "headers": [[NAME, VALUE], ...], "body": TEXT}, all
                         optional), whatever was asked: the status, the headers in order, and the
                         body with Content-Length (Content-Type application/octet-stream unless
                         the headers name one). In header values and the body, "__BASE__" becomes
                         http://127.0.0.1:PORT, "__HEADER:Name__" the value of the request's
                         header Name and "__QUERY:name__" the first value of its query parameter
                         name, percent-decoded ("" when absent): a server that echoes what it was
                         sent. 404 when not registered
Control endpoints (not counted as hits):
    POST /_register/<name>   body = document; 201
    GET  /_hits?path=PATH    the hit count of PATH as a decimal number
    GET  /_hits              all hit counts as a JSON object {path: count}
"""

import argparse
import email.utils
import errno
import fcntl
import gzip
import json
import os
import re
import select
import shutil
import signal
import socket
import struct
import sys
import termios
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HUGE_SIZE = 64 * 1024 * 1024          # bytes of the /huge/ body
SLOW_CAP_SECONDS = 120                # longest a /slowbody/ or /hang/ request is held
SLOW_INTERVAL_SECONDS = 2             # one /slowbody/ byte per this many seconds
MAX_REQUESTS_PER_CONNECTION = 100000  # bound on one keep-alive connection's request loop
IDLE_TIMEOUT_SECONDS = 130            # socket timeout of an idle keep-alive connection
NAME_RE = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]*$")

CONTENT_TYPES = {
    ".png": "image/png",
    ".webp": "image/webp",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".pbf": "application/x-protobuf",
    ".mvt": "application/x-protobuf",
    ".json": "application/json",
}


class State:
    """Hit counts and registered documents, kept in the state directory."""

    def __init__(self, directory):
        self.directory = directory
        self.json_dir = os.path.join(directory, "json")
        os.makedirs(self.json_dir, exist_ok=True)
        self.lock = threading.Lock()
        self.counts = {}
        self.hits_path = os.path.join(directory, "hits.log")
        try:
            with open(self.hits_path, "r", encoding="utf-8") as f:
                for line in f:
                    p = line.rstrip("\n")
                    self.counts[p] = self.counts.get(p, 0) + 1
        except FileNotFoundError:
            pass
        self.hits_file = open(self.hits_path, "a", encoding="utf-8")
        self.requests_file = open(os.path.join(directory, "requests.log"), "a", encoding="utf-8")

    def hit(self, path):
        """Records one request for `path`; returns how many there have been, this one included."""
        with self.lock:
            n = self.counts.get(path, 0) + 1
            self.counts[path] = n
            self.hits_file.write(path + "\n")
            self.hits_file.flush()
            return n

    def log_request(self, path, headers):
        """Appends {"path", "headers": {name: value}, "time": seconds since 1970 when its
        headers were read} as one JSON line to requests.log."""
        with self.lock:
            self.requests_file.write(json.dumps({"path": path, "headers": headers, "time": time.time()}, sort_keys=True) + "\n")
            self.requests_file.flush()

    def count(self, path):
        with self.lock:
            return self.counts.get(path, 0)

    def all_counts(self):
        with self.lock:
            return dict(self.counts)

    def register(self, name, body):
        final = os.path.join(self.json_dir, name)
        tmp = final + ".tmp.%d" % threading.get_ident()
        with open(tmp, "wb") as f:
            f.write(body)
        os.replace(tmp, final)

    def document(self, name):
        try:
            with open(os.path.join(self.json_dir, name), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None


SIGNATURES = {
    ".png": b"\x89PNG\r\n\x1a\n",
    ".jpg": b"\xff\xd8\xff",
    ".jpeg": b"\xff\xd8\xff",
    ".webp": b"RIFF\x00\x00\x00\x00WEBP",
}


def ok_body(path):
    """b"tile " + PATH, after the format's signature when PATH ends in .png/.jpg/.jpeg/.webp
    (so the body passes a client's magic-number check)."""
    sig = SIGNATURES.get(os.path.splitext(path)[1].lower(), b"")
    return sig + b"tile " + path.encode("latin-1", "replace")


def content_type_for(path):
    return CONTENT_TYPES.get(os.path.splitext(path)[1].lower(), "application/octet-stream")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    timeout = IDLE_TIMEOUT_SECONDS

    def version_string(self):
        return "faultserver/1"

    # ---- plumbing -------------------------------------------------------------------------

    def handle(self):
        """Like BaseHTTPRequestHandler.handle, with the keep-alive loop bounded."""
        self.close_connection = True
        self.handle_one_request()
        served = 1
        while not self.close_connection and served < MAX_REQUESTS_PER_CONNECTION:
            self.handle_one_request()
            served += 1

    def log_message(self, format, *args):
        if self.server.verbose:
            sys.stderr.write("%s %s\n" % (self.log_date_time_string(), format % args))

    def send_body(self, status, body, content_type="text/plain", headers=()):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_no_body(self, status, headers=()):
        self.send_response(status)
        if status != 204:
            self.send_header("Content-Length", "0")
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()

    def drain_request_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def peer_closed(self, wait_seconds):
        """Waits up to wait_seconds; True when the client has closed its side."""
        try:
            readable, _, _ = select.select([self.connection], [], [], wait_seconds)
            if not readable:
                return False
            return self.connection.recv(4096) == b""
        except OSError:
            return True

    @property
    def base_url(self):
        return "http://127.0.0.1:%d" % self.server.server_address[1]

    # ---- verbs ----------------------------------------------------------------------------

    def do_HEAD(self):
        self.do_GET()

    def do_PUT(self):
        """Like GET (the body is read and dropped): an S3 endpoint for /reply/ answers."""
        self.do_GET()

    def do_DELETE(self):
        self.do_GET()

    def do_POST(self):
        path = urllib.parse.urlsplit(self.path).path
        body = self.drain_request_body()
        if path.startswith("/_register/"):
            name = path[len("/_register/"):]
            if not NAME_RE.match(name):
                return self.send_body(400, b"bad name\n")
            self.server.state.register(name, body)
            return self.send_body(201, b"registered\n")
        self.send_body(405, b"POST only for /_register/\n")

    def do_GET(self):
        parts = urllib.parse.urlsplit(self.path)
        path, query = parts.path, parts.query
        self.drain_request_body()

        if path == "/_hits":
            params = urllib.parse.parse_qs(query)
            if "path" in params:
                n = self.server.state.count(params["path"][0])
                return self.send_body(200, b"%d" % n)
            doc = json.dumps(self.server.state.all_counts(), sort_keys=True).encode()
            return self.send_body(200, doc, "application/json")

        segments = path.split("/")  # "", kind, ...
        kind = segments[1] if len(segments) > 1 else ""
        handler = getattr(self, "fault_" + kind, None) if re.match(r"^[a-z0-9]+$", kind) else None
        if handler is None:
            return self.send_body(404, b"unknown fault path\n")
        self.server.state.log_request(path, {k: v for k, v in self.headers.items()})
        count = self.server.state.hit(path)
        handler(path, query, segments, count)

    # ---- faults ---------------------------------------------------------------------------

    def fault_pmtiles(self, path, query, segments, count):
        try:
            mode, n, name = segments[2], int(segments[3]), segments[4]
        except (IndexError, ValueError):
            return self.send_body(400, b"use /pmtiles/MODE/N/<name>\n")
        data = self.server.state.document(name)
        if data is None:
            return self.send_body(404, b"not registered\n")
        if mode == "slow" and count <= n:
            time.sleep(3)
        if mode == "stallgone" and count > n + 1 and self.server.state.document(name + ".gone") == b"1":
            self.close_connection = True
            return
        if mode == "hold" and count == n + 1:
            # No answer at all: the connection is held until the client closes it (60 s at most).
            self.server.state.hit("/held" + path)
            sock = self.connection
            sock.settimeout(60)
            try:
                sock.recv(1)
            except OSError:
                pass
            self.server.state.hit("/released" + path)
            self.close_connection = True
            return
        etag = '"v2"' if mode in ("changed", "cutchanged") and count > n else '"v1"'
        stripped = mode == "noval" or (mode == "stripped" and count > n)
        validators = [("ETag", etag), ("Accept-Ranges", "bytes")] if not stripped else [("Accept-Ranges", "bytes")]
        if mode == "twoetags" and count > n:
            validators = [("ETag", '"v1"'), ("ETag", '"v2"'), ("Accept-Ranges", "bytes")]
        if mode == "twolm":
            validators = [("Last-Modified", "Wed, 01 Jan 2025 00:00:00 GMT"), ("Accept-Ranges", "bytes")]
            if count > n:
                validators.insert(1, ("Last-Modified", "Thu, 02 Jan 2025 00:00:00 GMT"))
        if_match = self.headers.get("If-Match")
        ignores = mode in ("stripped", "cutchanged", "twoetags") and count > n
        if if_match is not None and if_match != etag and not ignores:
            return self.send_body(412, b"precondition failed\n", headers=validators)
        m = re.match(r"^bytes=(\d+)-(\d+)$", self.headers.get("Range") or "")
        if mode == "norange" or (mode == "laternorange" and count > n) or m is None:
            return self.send_body(200, data, "application/octet-stream", headers=validators)
        a, b = int(m.group(1)), min(int(m.group(2)), len(data) - 1)
        if a >= len(data) or (mode == "416" and n < count <= n + 2):
            return self.send_body(416, b"", headers=[("Content-Range", "bytes */%d" % len(data))] + validators)
        if mode == "truncated" and n < count <= n + 2:
            b = a + max(0, (b - a + 1) // 2 - 1)
        if mode == "capped" and count > n:
            b = min(b, a + 49_999)
        if mode == "drop" and count == n + 1:
            self.send_response(206)
            for name, value in [("Content-Type", "application/octet-stream"), ("Content-Length", str(b - a + 1)),
                                ("Content-Range", "bytes %d-%d/%d" % (a, b, len(data)))] + validators:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data[a:a + (b - a + 1) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        if mode in ("stall", "stallgone") and count == n + 1 and b - a + 1 > 50_000:
            self.send_response(206)
            for name, value in [("Content-Type", "application/octet-stream"), ("Content-Length", str(b - a + 1)),
                                ("Content-Range", "bytes %d-%d/%d" % (a, b, len(data)))] + validators:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data[a:a + 50_000])
            self.wfile.flush()
            sock = self.connection
            deadline = time.time() + 10
            while time.time() < deadline:
                queued = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]
                if queued == 0:
                    break
                time.sleep(0.005)
            self.server.state.hit("/stalled" + path)
            sock.settimeout(60)
            try:
                sock.recv(1)
            except OSError:
                pass
            self.close_connection = True
            return
        if mode in ("cutoff", "cutchanged") and count > n:
            self.send_response(206)
            for name, value in [("Content-Type", "application/octet-stream"), ("Content-Length", str(b - a + 1)),
                                ("Content-Range", "bytes %d-%d/%d" % (a, b, len(data)))] + validators:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data[a:min(b + 1, a + 50_000)])
            self.wfile.flush()
            self.close_connection = True
            return
        faulty = n < count <= n + 2 or (mode == "shiftedall" and count > n)
        asked = ("Content-Range", "bytes %d-%d/%d" % (a, b, len(data)))
        if mode in ("shifted", "shiftedall", "twocr") and faulty:
            a, b = (a + 1, b + 1) if b + 1 < len(data) else (a - 1, b - 1)
        crange = [("Content-Range", "bytes %d-%d/%d" % (a, b, len(data)))]
        if mode == "nocr" and faulty:
            crange = []
        if mode == "twocr" and faulty:
            crange = [asked] + crange
        self.send_body(206, data[a:b + 1], "application/octet-stream", headers=crange + validators)

    def fault_ok(self, path, query, segments, count):
        self.send_body(200, ok_body(path), content_type_for(path))

    def fault_cached(self, path, query, segments, count):
        """/cached/...: 200 like /ok with validators whose header names are not in canonical case:
        `etag` twice ("v1" first), Last-Modified, `CACHE-CONTROL: public, Max-Age=60` and an
        Expires that max-age must override."""
        self.send_body(200, ok_body(path), content_type_for(path), headers=(
            ("etag", '"v1"'), ("ETag", '"v2"'), ("Last-Modified", "Wed, 01 Jan 2025 00:00:00 GMT"),
            ("CACHE-CONTROL", "public, Max-Age=60"), ("Expires", "Thu, 01 Jan 2026 00:00:00 GMT")))

    def fault_expires(self, path, query, segments, count):
        """/expires/...: 200 like /ok with `Expires` and no Cache-Control."""
        self.send_body(200, ok_body(path), content_type_for(path), headers=(
            ("Expires", "Thu, 01 Jan 2026 00:00:00 GMT"),))

    def fault_slow(self, path, query, segments, count):
        """/slow/MS/...: 200 like /ok after MS milliseconds (a slow but healthy server)."""
        ms = self.threshold(segments)
        if ms is None:
            return self.send_body(400, b"use /slow/MS/...\n")
        time.sleep(min(ms, 10000) / 1000.0)
        self.fault_ok(path, query, segments, count)

    def fault_liar304(self, path, query, segments, count):
        """/liar304/...: 200 like /ok (no validators) the first time, then 304 Not Modified to
        every request, conditional or not (a server that lies)."""
        if count <= 1:
            return self.fault_ok(path, query, segments, count)
        self.send_no_body(304)

    def fault_partial(self, path, query, segments, count):
        """/partial/...: 206 with `Content-Range: bytes 0-6/1000` and 7 bytes, whatever was asked."""
        self.send_body(206, ok_body(path)[:7], content_type_for(path), headers=(("Content-Range", "bytes 0-6/1000"),))

    def fault_empty(self, path, query, segments, count):
        self.send_no_body(204)

    def fault_missing(self, path, query, segments, count):
        self.send_body(404, b"missing\n")

    def threshold(self, segments):
        try:
            return int(segments[2])
        except (IndexError, ValueError):
            return None

    def fault_flaky(self, path, query, segments, count):
        n = self.threshold(segments)
        if n is None:
            return self.send_body(400, b"use /flaky/N/...\n")
        if count <= n:
            return self.send_body(503, b"flaky: try again\n")
        self.fault_ok(path, query, segments, count)

    def fault_ratelimit(self, path, query, segments, count):
        n = self.threshold(segments)
        if n is None:
            return self.send_body(400, b"use /ratelimit/N/...\n")
        if count <= n:
            return self.send_body(429, b"slow down\n", headers=[("Retry-After", "1")])
        self.fault_ok(path, query, segments, count)

    def fault_ratelimitdate(self, path, query, segments, count):
        n = self.threshold(segments)
        if n is None:
            return self.send_body(400, b"use /ratelimitdate/N/...\n")
        if count <= n:
            # HTTP dates have 1 s resolution: floor(now + 2) is 1-2 s after now.
            when = email.utils.formatdate(time.time() + 2, usegmt=True)
            return self.send_body(429, b"slow down\n", headers=[("Retry-After", when)])
        self.fault_ok(path, query, segments, count)

    def fault_html(self, path, query, segments, count):
        """/html/...: 200 with an HTML login page (a captive portal), Content-Type text/html."""
        self.send_body(200, b"<!DOCTYPE html>\n<html><head><title>Router login</title></head></html>\n", "text/html; charset=utf-8")

    def fault_text(self, path, query, segments, count):
        """/text/...: 200 with a plain-text error and Content-Type text/plain."""
        self.send_body(200, b"quota exceeded for this key\n", "text/plain")

    def fault_notpng(self, path, query, segments, count):
        """/notpng/...: 200, Content-Type image/png, a body that is a GIF (wrong signature)."""
        self.send_body(200, b"GIF89a" + path.encode("latin-1", "replace"), "image/png")

    def fault_empty200(self, path, query, segments, count):
        """/empty200/...: 200 with Content-Length 0."""
        self.send_body(200, b"", content_type_for(path))

    def fault_status(self, path, query, segments, count):
        """/status/CODE/...: answers CODE with a short text body."""
        code = self.threshold(segments)
        if code is None or not 200 <= code <= 599:
            return self.send_body(400, b"use /status/CODE/...\n")
        self.send_body(code, b"status %d\n" % code)

    def fault_retryafter(self, path, query, segments, count):
        """/retryafter/SECONDS/N/...: the first N requests 429 with "Retry-After: SECONDS"."""
        try:
            seconds, n = int(segments[2]), int(segments[3])
        except (IndexError, ValueError):
            return self.send_body(400, b"use /retryafter/SECONDS/N/...\n")
        if count <= n:
            return self.send_body(429, b"slow down\n", headers=[("Retry-After", str(seconds))])
        self.fault_ok(path, query, segments, count)

    def fault_error500(self, path, query, segments, count):
        self.send_body(500, b"internal error\n")

    def fault_reset(self, path, query, segments, count):
        self.send_response(200)
        self.send_header("Content-Type", content_type_for(path))
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self.wfile.write(b"r" * 100)
        time.sleep(0.05)  # let the partial body reach the client before the reset
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        # close(2) the descriptor now; with linger 0 that sends RST. The socket object is
        # left detached, so the server's own clean-up afterwards finds nothing to close.
        os.close(self.connection.detach())

    def fault_short(self, path, query, segments, count):
        self.send_response(200)
        self.send_header("Content-Type", content_type_for(path))
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self.wfile.write(b"s" * 500)
        self.close_connection = True  # the server then shuts down and closes cleanly (FIN)

    def fault_slowbody(self, path, query, segments, count):
        self.send_response(200)
        self.send_header("Content-Type", content_type_for(path))
        self.send_header("Content-Length", "1000000")
        self.end_headers()
        self.close_connection = True
        deadline = time.monotonic() + SLOW_CAP_SECONDS
        try:
            while time.monotonic() < deadline:
                self.wfile.write(b".")
                if self.peer_closed(SLOW_INTERVAL_SECONDS):
                    return
        except OSError:
            return

    def fault_hang(self, path, query, segments, count):
        self.close_connection = True
        deadline = time.monotonic() + SLOW_CAP_SECONDS
        while time.monotonic() < deadline:
            if self.peer_closed(1.0):
                return

    def fault_huge(self, path, query, segments, count):
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(HUGE_SIZE))
        self.end_headers()
        if self.command == "HEAD":
            return
        unit = ok_body(path) + b"\n"
        chunk = unit * max(1, (1 << 20) // len(unit))  # ~1 MiB, a whole number of units
        left = HUGE_SIZE
        try:
            while left > 0:
                piece = chunk if left >= len(chunk) else chunk[:left]
                self.wfile.write(piece)
                left -= len(piece)
        except OSError:
            self.close_connection = True

    def fault_badgzip(self, path, query, segments, count):
        self.send_body(200, b"this is not gzip: " + path.encode("latin-1", "replace"),
                       content_type_for(path), headers=[("Content-Encoding", "gzip")])

    def fault_gzipped(self, path, query, segments, count):
        kib = self.threshold(segments)
        if kib is None:
            return self.send_body(400, b"/gzipped/KIB/...\n")
        body = ok_body(path)
        body += bytes(max(0, kib * 1024 - len(body)))
        self.send_body(200, gzip.compress(body, compresslevel=9, mtime=0), content_type_for(path))

    def fault_redirectloop(self, path, query, segments, count):
        self.send_no_body(302, headers=[("Location", self.path)])

    def fault_redirectfile(self, path, query, segments, count):
        self.send_no_body(302, headers=[("Location", "file:///etc/passwd")])

    def fault_redirect(self, path, query, segments, count):
        rest = "/".join(segments[2:])
        target = "/ok/" + rest + ("?" + query if query else "")
        self.send_no_body(302, headers=[("Location", target)])

    CHANGING_LAST_MODIFIED = "Wed, 01 Jan 2025 00:00:00 GMT"

    def changing(self, segments, count, body, content_type):
        """Answers version min(count, N) of a /changing/ or /changingjson/ resource (`body` is a
        function of the version): 304 or 200 as the conditional headers decide."""
        n = self.threshold(segments)
        if n is None or n < 1:
            return self.send_body(400, b"use /changing/N/... with N >= 1\n")
        version = min(count, n)
        etag = '"v%d"' % version
        headers = (("ETag", etag), ("Last-Modified", self.CHANGING_LAST_MODIFIED))
        inm = self.headers.get("If-None-Match")
        ims = self.headers.get("If-Modified-Since")
        if inm is not None:
            tags = [t.strip() for t in inm.split(",")]
            fresh = "*" in tags or etag in [t[2:] if t.startswith("W/") else t for t in tags]
        elif ims is not None:
            since = email.utils.parsedate_tz(ims)
            fresh = since is not None and email.utils.mktime_tz(since) >= email.utils.mktime_tz(
                email.utils.parsedate_tz(self.CHANGING_LAST_MODIFIED))
        else:
            fresh = False
        if fresh:
            return self.send_no_body(304, headers=headers)
        doc = body(version)
        if doc is None:
            return self.send_body(404, b"no such document\n")
        self.send_body(200, doc, content_type, headers=headers)

    def fault_lastmodified(self, path, query, segments, count):
        headers = (("Last-Modified", self.CHANGING_LAST_MODIFIED),)
        ims = self.headers.get("If-Modified-Since")
        since = email.utils.parsedate_tz(ims) if ims else None
        if since is not None and email.utils.mktime_tz(since) >= email.utils.mktime_tz(
                email.utils.parsedate_tz(self.CHANGING_LAST_MODIFIED)):
            return self.send_no_body(304, headers=headers)
        self.send_body(200, ok_body(path), content_type_for(path), headers=headers)

    def fault_changing(self, path, query, segments, count):
        self.changing(segments, count, lambda v: ok_body(path) + b" v%d" % v, content_type_for(path))

    def fault_changingjson(self, path, query, segments, count):
        name = "/".join(segments[3:])

        def document(v):
            doc = self.server.state.document(name) if NAME_RE.match(name) else None
            if doc is None:
                return None
            return doc.replace(b"__BASE__", self.base_url.encode()).replace(b"__VERSION__", b"%d" % v)
        self.changing(segments, count, document, "application/json")

    def fault_redirectto(self, path, query, segments, count):
        if len(segments) < 5:
            return self.send_body(400, b"use /redirectto/SCHEME/HOSTPORT/REST\n")
        target = "%s://%s/%s" % (segments[2], segments[3], "/".join(segments[4:]))
        self.send_no_body(302, headers=[("Location", target + ("?" + query if query else ""))])

    def fault_reply(self, path, query, segments, count):
        """/reply/<name>/...: the registered reply <name> (see the module docstring)."""
        name = segments[2] if len(segments) > 2 else ""
        doc = self.server.state.document(name) if NAME_RE.match(name) else None
        if doc is None:
            return self.send_body(404, b"no such reply\n")
        reply = json.loads(doc)
        params = urllib.parse.parse_qs(query, keep_blank_values=True)

        def fill(text):
            text = text.replace("__BASE__", self.base_url)
            text = re.sub(r"__HEADER:([A-Za-z0-9-]+)__", lambda m: self.headers.get(m.group(1), ""), text)
            return re.sub(r"__QUERY:(.+?)__", lambda m: params.get(m.group(1), [""])[0], text)
        headers = [(n, fill(v)) for n, v in reply.get("headers", [])]
        body = fill(reply.get("body", "")).encode("utf-8")
        status = int(reply.get("status", 200))
        if not any(n.lower() == "content-type" for n, _ in headers):
            headers.insert(0, ("Content-Type", "application/octet-stream"))
        self.send_response(status)
        for n, v in headers:
            self.send_header(n, v)
        if status not in (204, 304):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and status not in (204, 304):
            self.wfile.write(body)

    def fault_json(self, path, query, segments, count):
        name = "/".join(segments[2:])
        doc = self.server.state.document(name) if NAME_RE.match(name) else None
        if doc is None:
            return self.send_body(404, b"no such document\n")
        doc = doc.replace(b"__BASE__", self.base_url.encode())
        self.send_body(200, doc, "application/json")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def exit_when_stdin_closes(remove_state_dir):
    try:
        while os.read(0, 65536):
            pass
    except OSError:
        pass
    if remove_state_dir:
        shutil.rmtree(remove_state_dir, ignore_errors=True)
    os._exit(0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--max-seconds", type=float, default=3600,
                        help="exit after this long whatever happens")
    parser.add_argument("--no-stdin-watch", action="store_true",
                        help="do not exit when stdin closes (for running by hand)")
    parser.add_argument("--remove-state-on-eof", action="store_true",
                        help="remove --state-dir when stdin closes (the parent died)")
    parser.add_argument("--verbose", action="store_true", help="log requests to stderr")
    args = parser.parse_args()

    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGINT, lambda *_: os._exit(0))

    try:
        server = Server(("127.0.0.1", args.port), Handler)
    except OSError as e:
        sys.stderr.write("faultserver: cannot listen on 127.0.0.1:%d: %s\n" % (args.port, e))
        sys.exit(3 if e.errno == errno.EADDRINUSE else 2)
    server.state = State(args.state_dir)
    server.verbose = args.verbose

    if not args.no_stdin_watch:
        remove = args.state_dir if args.remove_state_on_eof else None
        threading.Thread(target=exit_when_stdin_closes, args=(remove,), daemon=True).start()
    timer = threading.Timer(args.max_seconds, lambda: os._exit(0))
    timer.daemon = True
    timer.start()

    sys.stdout.write("%d\n" % server.server_address[1])
    sys.stdout.flush()
    server.serve_forever(poll_interval=0.2)


if __name__ == "__main__":
    main()
