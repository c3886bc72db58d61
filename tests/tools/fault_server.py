#!/usr/bin/env python3
"""A fault-injecting HTTP/1.1 server for aprfs's remote-read tests (stdlib only).

It serves ONE file's bytes at /file (Range support, keep-alive, ETag = "<sha256>"),
and misbehaves on purpose, following a plan: one mode per data request (GET or HEAD
on /file), in order, then --then (default `ok`) forever.

Modes:
  ok                   normal answer (206 for a range, 200 without one, 416 past EOF)
  status:CODE[:SECS]   answer CODE (e.g. 503, 429) with a small body, Retry-After: SECS
  stall | stall:headers  send the normal headers, then nothing (until the client leaves
                       or --stall-max seconds, then close)
  stall:none           send nothing at all (same limits)
  close                close the connection without answering
  cut                  headers, half the body, then an abortive close (RST)
  short                headers, all of the body but its last byte, then a clean close
  wrong_range          206 whose Content-Range (and bytes) are for another offset (+1 or
                       -1); when the range is the whole file, the right bytes but a
                       wrong total size
  ignore_range         200 with the full body, whatever the Range
  change               from this request on (sticky until /_reset), different bytes
                       (every byte XOR 0xFF) and a different ETag (their sha256)
  truncate             from this request on (sticky until /_reset), the file is cut to
                       half its size: ranges past the new end get 416, Content-Range totals
                       and the ETag are those of the first half
  slow:BYTES_PER_SEC   normal answer, body paced to that rate

Control (on both ports): POST /_plan with a JSON list (replaces the data plan) or an
object {"plan": [...], "hub_plan": [...], "then": MODE}; POST /_reset (plans, stats and
`change` back to the start; a request answered across a reset is counted in neither);
GET /_stats (JSON counts, per-request log, ranges served, and max_in_flight: the most data
requests answered at the same time since the reset).

Hub mode: a second port answers like the Hub for one repo (--repo, default fault/model)
whose only LFS file (--path, default the file's name) is this file, plus optional small
files (--small FILE, repeatable): GET /api/models/REPO[/revision/REV], HEAD/GET
/REPO/resolve/REV/PATH (302 to /file on the data port with X-Repo-Commit,
X-Linked-Etag, X-Linked-Size, ETag; 307 to /api/resolve-cache/... for small files),
404 with X-Error-Code RepoNotFound / RevisionNotFound / EntryNotFound. REV is `main` or
the commit. Hub requests follow their own plan (--hub-plan; modes ok, status, stall,
stall:none, close).

  fault_server.py FILE [--port 0] [--hub-port 0] [--plan JSON] [--hub-plan JSON]
                  [--then MODE] [--repo ORG/NAME] [--path NAME] [--small FILE ...]
                  [--stall-max SECONDS] [--ready-file PATH]

Prints one JSON line when ready: {"url": "http://127.0.0.1:PORT/file", "endpoint":
"http://127.0.0.1:HUBPORT", "repo", "path", "commit", "size", "sha256", ...}.
"""

import argparse
import hashlib
import http.server
import json
import os
import re
import select
import signal
import socket
import socketserver
import struct
import sys
import threading
import time
import urllib.parse

CHUNK = 64 * 1024
LOG_LIMIT = 10000
XOR_TABLE = bytes(b ^ 0xFF for b in range(256))
DATA_MODES = ("ok", "status", "stall", "close", "cut", "short", "wrong_range",
              "ignore_range", "change", "truncate", "slow")
HUB_MODES = ("ok", "status", "stall", "close")


def parse_mode(text, allowed):
    """'status:503:2' -> ('status', ['503', '2']); validates the arguments."""
    if not isinstance(text, str):
        raise ValueError(f"mode must be a string: {text!r}")
    name, *args = text.split(":")
    if name not in allowed:
        raise ValueError(f"unknown mode {text!r} (allowed: {', '.join(allowed)})")
    if name == "status" and not (1 <= len(args) <= 2 and all(a.isdigit() for a in args)):
        raise ValueError(f"bad {text!r}: status:CODE[:RETRY_AFTER]")
    if name == "slow" and not (len(args) == 1 and args[0].isdigit() and int(args[0]) > 0):
        raise ValueError(f"bad {text!r}: slow:BYTES_PER_SEC")
    if name == "stall" and args not in ([], ["headers"], ["none"]):
        raise ValueError(f"bad {text!r}: stall, stall:headers or stall:none")
    if name not in ("status", "slow", "stall") and args:
        raise ValueError(f"mode {name} takes no argument")
    return name, args


def sha256_of(fd, size, transform=None):
    h = hashlib.sha256()
    for off in range(0, size, 8 << 20):
        block = os.pread(fd, min(8 << 20, size - off), off)
        h.update(block.translate(transform) if transform else block)
    return h.hexdigest()


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256, size):
    return (f"version https://git-lfs.github.com/spec/v1\n"
            f"oid sha256:{sha256}\nsize {size}\n").encode()


class State:
    """Everything the handlers share: the file, the plans, the counters."""

    def __init__(self, args):
        self.lock = threading.Lock()
        self.fd = os.open(args.file, os.O_RDONLY)
        self.size = os.fstat(self.fd).st_size
        self.sha256 = sha256_of(self.fd, self.size)
        self._changed_sha256 = None
        self._truncated_sha256 = None
        self.stall_max = args.stall_max
        self.repo = args.repo
        self.path = args.path or os.path.basename(args.file)
        self.small = {}
        for p in args.small:
            with open(p, "rb") as f:
                data = f.read()
            self.small[os.path.basename(p)] = (data, git_blob_sha1(data))
        h = hashlib.sha1(f"fault-server\0{self.repo}\0{self.path} {self.sha256}".encode())
        for name in sorted(self.small):
            h.update(f"\0{name} {self.small[name][1]}".encode())
        self.commit = h.hexdigest()
        self.initial = {"plan": json.loads(args.plan), "hub_plan": json.loads(args.hub_plan),
                        "then": args.then}
        self.data_url = self.endpoint = None
        self.in_flight = 0                     # data requests being answered (kept by reset)
        # A request answered across a reset is recorded in neither: its client may have had its
        # last byte (and asked for the reset) before the handler got to record it.
        self.epoch = 0
        self.request_epoch = threading.local()  # the epoch the handler's request began in
        self.reset()
        self.set_plan(self.initial)

    def reset(self):
        with self.lock:
            self.epoch += 1
            self.plan, self.hub_plan, self.then = [], [], "ok"
            self.changed = False
            self.truncated = False
            self.stats = {"requests": 0, "hub_requests": 0, "control_requests": 0,
                          "connections": 0, "bytes_sent": 0, "modes": {},
                          "statuses": {}, "ranges": [], "log": [],
                          "max_in_flight": self.in_flight}

    def set_plan(self, obj):
        """A list replaces the data plan; an object may set plan, hub_plan and then."""
        if isinstance(obj, list):
            obj = {"plan": obj}
        if not isinstance(obj, dict):
            raise ValueError("plan must be a JSON list or object")
        plan = obj.get("plan")
        hub_plan = obj.get("hub_plan")
        then = obj.get("then")
        for m in plan or []:
            parse_mode(m, DATA_MODES)
        for m in hub_plan or []:
            parse_mode(m, HUB_MODES)
        if then is not None:
            parse_mode(then, DATA_MODES)
        with self.lock:
            if plan is not None:
                self.plan = list(plan)
            if hub_plan is not None:
                self.hub_plan = list(hub_plan)
            if then is not None:
                self.then = then

    def next_mode(self, hub):
        """Pops the mode for this request (under the lock: concurrent requests each
        get their own entry, in arrival order)."""
        with self.lock:
            self.request_epoch.value = self.epoch
            if hub:
                self.stats["hub_requests"] += 1
                text = self.hub_plan.pop(0) if self.hub_plan else "ok"
                n = self.stats["hub_requests"]
            else:
                self.stats["requests"] += 1
                text = self.plan.pop(0) if self.plan else self.then
                if text == "change":
                    self.changed = True
                if text == "truncate":
                    self.truncated = True
                n = self.stats["requests"]
            self.stats["modes"][text] = self.stats["modes"].get(text, 0) + 1
            return n, text, self.changed, self.truncated

    def enter(self):
        with self.lock:
            self.in_flight += 1
            self.stats["max_in_flight"] = max(self.stats["max_in_flight"], self.in_flight)

    def leave(self):
        with self.lock:
            self.in_flight -= 1

    def record(self, entry, sent=0, served=None):
        with self.lock:
            if getattr(self.request_epoch, "value", self.epoch) != self.epoch:
                return
            s = self.stats
            s["bytes_sent"] += sent
            key = str(entry.get("status"))
            s["statuses"][key] = s["statuses"].get(key, 0) + 1
            if served is not None and len(s["ranges"]) < LOG_LIMIT:
                s["ranges"].append(list(served))
            if len(s["log"]) < LOG_LIMIT:
                s["log"].append(entry)

    def changed_sha256(self):
        with self.lock:
            if self._changed_sha256 is None:
                self._changed_sha256 = sha256_of(self.fd, self.size, XOR_TABLE)
            return self._changed_sha256

    def truncated_sha256(self):
        with self.lock:
            if self._truncated_sha256 is None:
                self._truncated_sha256 = sha256_of(self.fd, self.size // 2)
            return self._truncated_sha256

    def read(self, offset, length, changed):
        data = os.pread(self.fd, length, offset)
        return data.translate(XOR_TABLE) if changed else data

    def snapshot(self):
        with self.lock:
            out = json.loads(json.dumps(self.stats))
            out["plan_left"], out["hub_plan_left"] = list(self.plan), list(self.hub_plan)
            out["then"], out["changed"] = self.then, self.changed
            out["truncated"] = self.truncated
            return out


def parse_range(header, size):
    """Returns (start, end) inclusive, 'unsatisfiable', or None (no/ignored range).
    Multi-range and malformed headers are ignored (full 200), like nginx max_ranges 1."""
    if not header:
        return None
    m = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", header)
    if not m or (m.group(1) == "" and m.group(2) == ""):
        return None
    if m.group(1) == "":                       # suffix: last N bytes
        n = int(m.group(2))
        if n == 0:
            return "unsatisfiable"
        return (max(0, size - n), size - 1) if size else "unsatisfiable"
    start = int(m.group(1))
    end = int(m.group(2)) if m.group(2) else size - 1
    if start >= size:
        return "unsatisfiable"
    if end < start:
        return None
    return start, min(end, size - 1)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"      # keep-alive by default
    server_version = "fault_server/1"

    def log_message(self, fmt, *args):  # quiet: /_stats is the log
        pass

    def setup(self):
        super().setup()
        with self.server.state.lock:
            self.server.state.stats["connections"] += 1
            self.conn_id = self.server.state.stats["connections"]

    # ---- plumbing --------------------------------------------------------------------

    @property
    def st(self):
        return self.server.state

    def send_simple(self, code, body=b"", headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        if body:
            self.send_header("Content-Type", "text/plain")
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def send_json(self, obj, code=200, headers=()):
        body = (json.dumps(obj, indent=1) + "\n").encode()
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def hold(self):
        """Stall: keep the connection open, send nothing, until the client goes away
        or stall_max passes; then close."""
        self.wfile.flush()
        deadline = time.monotonic() + self.st.stall_max
        sock = self.connection
        while time.monotonic() < deadline:
            r, _, _ = select.select([sock], [], [], min(0.2, max(0, deadline - time.monotonic())))
            if r:
                try:
                    if not sock.recv(65536):
                        break                  # client closed
                except OSError:
                    break
        self.close_connection = True

    def abort(self):
        """Abortive close (RST) after the kernel has sent what we wrote."""
        self.wfile.flush()
        sock = self.connection
        deadline = time.monotonic() + 1.0
        try:
            import fcntl
            import termios
            while time.monotonic() < deadline:
                unsent = struct.unpack("i", fcntl.ioctl(sock, termios.TIOCOUTQ, b"\0" * 4))[0]
                if unsent == 0:
                    break
                time.sleep(0.005)
        except (ImportError, OSError):
            pass
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        # Close here (rfile holds a reference to the socket): socketserver would
        # shutdown(SHUT_WR) first, which sends a FIN before the RST.
        self.close_connection = True
        self.rfile.close()
        sock.close()

    def drop(self):
        """Close without an answer (`close` mode)."""
        self.close_connection = True

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    # ---- routing ---------------------------------------------------------------------

    def do_GET(self):
        self.route()

    def do_HEAD(self):
        self.route()

    def do_POST(self):
        self.route()

    def route(self):
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        if path.startswith("/_"):
            return self.control(path)
        if self.command == "POST":
            return self.send_simple(405, b"method not allowed\n")
        if path == "/file":
            self.st.enter()
            try:
                return self.data()
            finally:
                self.st.leave()
        return self.hub(path)

    def control(self, path):
        with self.st.lock:
            self.st.stats["control_requests"] += 1
        try:
            if path == "/_stats" and self.command in ("GET", "HEAD"):
                return self.send_json(self.st.snapshot())
            if path == "/_plan" and self.command == "POST":
                self.st.set_plan(json.loads(self.read_body() or b"[]"))
                return self.send_json(self.st.snapshot())
            if path == "/_reset" and self.command == "POST":
                self.read_body()
                self.st.reset()
                return self.send_json(self.st.snapshot())
        except ValueError as e:
            return self.send_simple(400, f"{e}\n".encode())
        self.send_simple(404, b"unknown control route\n")

    # ---- data ------------------------------------------------------------------------

    def data(self):
        st = self.st
        n, text, changed, truncated = st.next_mode(hub=False)
        name, args = parse_mode(text, DATA_MODES)
        rng_header = self.headers.get("Range")
        entry = {"n": n, "conn": self.conn_id, "method": self.command, "range": rng_header,
                 "mode": text, "status": None}
        etag = st.changed_sha256() if changed else st.sha256
        size = st.size
        if truncated:                          # the first half, as it is (not with change)
            etag, size = st.truncated_sha256(), st.size // 2

        if name == "close":
            entry["status"] = "closed"
            st.record(entry)
            return self.drop()
        if name == "stall" and args == ["none"]:
            entry["status"] = "stalled"
            st.record(entry)
            return self.hold()
        if name == "status":
            code = int(args[0])
            headers = [("Retry-After", args[1])] if len(args) > 1 else []
            entry["status"] = code
            st.record(entry)
            return self.send_simple(code, f"injected status {code}\n".encode(), headers)

        rng = parse_range(rng_header, size)
        if name == "ignore_range":
            rng = None
        if rng == "unsatisfiable":
            entry["status"] = 416
            st.record(entry)
            return self.send_simple(416, b"range not satisfiable\n",
                                    [("Content-Range", f"bytes */{size}")])

        # What we claim (status, Content-Range) and which bytes we send.
        total = size
        if rng is None:
            code, start, end = 200, 0, size - 1
        else:
            code, (start, end) = 206, rng
        if name == "wrong_range":
            code = 206
            length = end - start + 1
            if end + 1 < size:
                start, end = start + 1, end + 1
            elif start > 0:
                start, end = start - 1, end - 1
            else:
                total = size + 1               # whole file: lie about the total instead
            assert length == end - start + 1
        length = end - start + 1 if size else 0
        self.send_response(code)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{etag}"')
        if code == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{total}")
        self.end_headers()
        entry["status"] = code
        if name == "stall":
            entry["status"] = f"{code}+stalled"
            st.record(entry)
            return self.hold()
        if self.command == "HEAD":
            st.record(entry)
            return

        send = length
        if name == "cut":
            send = length // 2
        elif name == "short":
            send = max(0, length - 1)
        rate = int(args[0]) if name == "slow" else 0
        sent = self.send_bytes(start, send, changed, rate)
        entry["sent"] = sent
        st.record(entry, sent, (start, start + sent - 1) if sent else None)
        if name == "cut":
            self.abort()
        elif name == "short" or sent < send:
            self.wfile.flush()
            self.close_connection = True

    def send_bytes(self, start, count, changed, rate):
        """Writes count bytes from offset start, paced to `rate` bytes/s if set."""
        sent = 0
        step = CHUNK if not rate else max(1, min(CHUNK, rate // 20))
        t0 = time.monotonic()
        try:
            while sent < count:
                n = min(step, count - sent)
                self.wfile.write(self.st.read(start + sent, n, changed))
                sent += n
                if rate:
                    self.wfile.flush()
                    ahead = sent / rate - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
            self.wfile.flush()
        except OSError:                        # client went away
            self.close_connection = True
        return sent

    # ---- hub -------------------------------------------------------------------------

    def hub_error(self, code, error_code, message, commit=None):
        headers = [("X-Error-Code", error_code), ("X-Error-Message", message)]
        if commit:
            headers.append(("X-Repo-Commit", commit))
        self.send_simple(code, (message + "\n").encode(), headers)

    def hub(self, path):
        st = self.st
        n, text, *_ = st.next_mode(hub=True)
        name, args = parse_mode(text, HUB_MODES)
        entry = {"n": n, "conn": self.conn_id, "method": self.command, "path": path,
                 "mode": text, "status": None, "hub": True}
        if name == "close":
            entry["status"] = "closed"
            st.record(entry)
            return self.drop()
        if name == "stall":
            entry["status"] = "stalled"
            st.record(entry)
            return self.hold()
        if name == "status":
            code = int(args[0])
            entry["status"] = code
            st.record(entry)
            headers = [("Retry-After", args[1])] if len(args) > 1 else []
            return self.send_simple(code, f"injected status {code}\n".encode(), headers)
        entry["status"] = self.hub_answer(path)
        st.record(entry)

    def hub_answer(self, path):
        """The Hub's routes for our one repo; returns the status sent."""
        st = self.st
        repo, commit = st.repo, st.commit
        revs = ("main", commit)
        api = f"/api/models/{repo}"
        if path == api or path.startswith(api + "/revision/"):
            rev = path[len(api + "/revision/"):] if path != api else "main"
            if rev not in revs:
                self.hub_error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
                return 404
            self.send_json(self.api_json(), headers=[("X-Repo-Commit", commit)])
            return 200
        cache = f"/api/resolve-cache/models/{repo}/{commit}/"
        if path.startswith(cache):
            item = st.small.get(path[len(cache):])
            if item is None:
                self.hub_error(404, "EntryNotFound", "Entry not found", commit)
                return 404
            data, sha1 = item
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("ETag", f'"{sha1}"')
            self.send_header("X-Repo-Commit", commit)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            return 200
        prefix = f"/{repo}/resolve/"
        if not path.startswith(prefix):
            self.hub_error(404, "RepoNotFound", "Repository not found")
            return 404
        rev, _, file = path[len(prefix):].partition("/")
        if rev not in revs:
            self.hub_error(404, "RevisionNotFound", "Invalid rev id")
            return 404
        if file == st.path:
            self.send_simple(302, b"Found. Redirecting\n", [
                ("Location", st.data_url), ("X-Repo-Commit", commit),
                ("X-Linked-Etag", f'"{st.sha256}"'), ("X-Linked-Size", str(st.size)),
                ("ETag", f'"{st.sha256}"'), ("Accept-Ranges", "bytes")])
            return 302
        if file in st.small:
            target = cache + urllib.parse.quote(file)
            self.send_simple(307, b"Temporary Redirect\n", [
                ("Location", target), ("X-Repo-Commit", commit), ("Accept-Ranges", "bytes")])
            return 307
        self.hub_error(404, "EntryNotFound", "Entry not found", commit)
        return 404

    def api_json(self):
        st = self.st
        pointer = lfs_pointer(st.sha256, st.size)
        siblings = [{"rfilename": st.path, "size": st.size, "blobId": git_blob_sha1(pointer),
                     "lfs": {"sha256": st.sha256, "size": st.size,
                             "pointerSize": len(pointer)}}]
        for name, (data, sha1) in sorted(st.small.items()):
            siblings.append({"rfilename": name, "size": len(data), "blobId": sha1})
        siblings.sort(key=lambda s: s["rfilename"])
        return {"id": st.repo, "modelId": st.repo, "sha": st.commit, "private": False,
                "gated": False, "siblings": siblings}


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True          # stalled handlers never block exit
    allow_reuse_address = True
    request_queue_size = 128


def main():
    ap = argparse.ArgumentParser(description="fault-injecting HTTP server (see module doc)")
    ap.add_argument("file")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="data port (0 = ephemeral)")
    ap.add_argument("--hub-port", type=int, default=0, help="hub port (0 = ephemeral)")
    ap.add_argument("--plan", default="[]", help="JSON list of data-request modes")
    ap.add_argument("--hub-plan", default="[]", help="JSON list of hub-request modes")
    ap.add_argument("--then", default="ok", help="mode once the plan is used up")
    ap.add_argument("--repo", default="fault/model")
    ap.add_argument("--path", help="the file's name in the repo (default: its basename)")
    ap.add_argument("--small", action="append", default=[], metavar="FILE",
                    help="a small (git) file of the repo, served by name")
    ap.add_argument("--stall-max", type=float, default=30.0,
                    help="seconds a stalled answer is held at most")
    ap.add_argument("--ready-file", help="also write the start-up JSON here")
    args = ap.parse_args()

    try:
        state = State(args)
    except (OSError, ValueError) as e:
        print(f"fault_server: {e}", file=sys.stderr)
        sys.exit(2)
    data = Server((args.host, args.port), Handler)
    hub = Server((args.host, args.hub_port), Handler)
    data.state = hub.state = state
    state.data_url = f"http://{args.host}:{data.server_address[1]}/file"
    state.endpoint = f"http://{args.host}:{hub.server_address[1]}"

    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    info = {"url": state.data_url, "endpoint": state.endpoint, "repo": state.repo,
            "path": state.path, "commit": state.commit, "size": state.size,
            "sha256": state.sha256, "pid": os.getpid(),
            "small": {k: {"size": len(v[0]), "blob": v[1]} for k, v in state.small.items()}}
    line = json.dumps(info)
    if args.ready_file:
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(line + "\n")
        os.replace(tmp, args.ready_file)
    print(line, flush=True)
    try:
        data.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
