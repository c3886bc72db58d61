#!/usr/bin/env python3
"""A fake Hugging Face Hub made of two real nginx processes on 127.0.0.1.

  "hub": the API routes (/api/models/...), /ORG/NAME/resolve/REV/PATH and
         /api/resolve-cache/..., with the Hub's status codes and headers.
  "cdn": the LFS/Xet bridge: file bytes by sha256, Range support, signed URLs
         (nginx secure_link: md5 + expires), optional per-connection limit_rate.
         With --cdn-etag it plays a Hub mirror or caching proxy that gives its own
         validators instead of the sha256 ETag of the Hub's CDN.

The contract it honours is /work/notes/remote-protocol.md (see tests/tools/REMOTE.md).
Standard library only; nginx does all the serving, this script only writes
files and configs and manages the two processes.

  hub_fixture.py start STATE_DIR --repo ORG/NAME=MODEL_DIR[@BRANCH] [--repo ...]
                 [--gated ORG/NAME ... --token hf_xxx] [--gated-metadata-public]
                 [--rate-limit BYTES_PER_SEC] [--url-ttl SECONDS] [--hash-cache FILE]
                 [--cdn-etag sha256|nginx|weak|last-modified|none] [--cdn-sndbuf BYTES]
  hub_fixture.py refresh STATE_DIR     # new signed-URL expiries, nginx reload
  hub_fixture.py stop STATE_DIR        # stop both nginx, wait until gone

`start` prints (and writes to STATE_DIR/fixture.json) a JSON description:
{"endpoint", "cdn", "repos": {"ORG/NAME": {"commit", "branch", "gated", "files":
{path: {"size", "sha256", "blob", "etag", "lfs"}}}}, ...}
"""

import argparse
import base64
import concurrent.futures
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

NGINX = os.environ.get("APRFS_NGINX", "/usr/sbin/nginx")
CDN_PREFIX = "/xet-bridge/"          # CDN data path: CDN_PREFIX + sha256
ORIGIN_PREFIX = "/_origin/"          # behind the CDN path in the proxied --cdn-etag modes
# What the CDN gives as validators of a file (the Hub's CDN: ETag = "<sha256>"; a mirror or
# caching proxy: its own). nginx: its default strong ETag "<mtime hex>-<size hex>"; weak: that
# ETag marked W/ (as a proxy that may change the encoding does); last-modified: no ETag, only
# Last-Modified; none: neither. Every mode but `none` keeps Last-Modified (the file's mtime).
CDN_ETAG_MODES = ("sha256", "nginx", "weak", "last-modified", "none")
START_DEADLINE = 20.0                # seconds for nginx to come up
STOP_DEADLINE = 10.0                 # seconds for nginx to go away (then SIGKILL)
REPO_ID_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
BRANCH_RE = re.compile(r"^[A-Za-z0-9_.-]+$")  # one path segment: no quoting needed
TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]+$")
# File names end up inside nginx config strings and URLs; keep to a safe set
# (covers everything make_model.py and real model repos use).
PATH_RE = re.compile(r"^[A-Za-z0-9_.+=,@-]+(/[A-Za-z0-9_.+=,@-]+)*$")


def die(msg):
    print(f"hub_fixture: {msg}", file=sys.stderr)
    sys.exit(1)


# --------------------------------------------------------------------------------------
# Repository scanning and hashing
# --------------------------------------------------------------------------------------

def is_lfs(path):
    """The Hub stores *.safetensors in LFS; everything else is a regular git file."""
    return path.endswith(".safetensors")


def lfs_pointer(sha256, size):
    """The exact git-lfs pointer text; its git blob sha1 is the sibling's blobId."""
    return (f"version https://git-lfs.github.com/spec/v1\n"
            f"oid sha256:{sha256}\nsize {size}\n").encode()


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def data_segments(fd, size):
    """(offset, length, is_data) covering the file; holes of sparse files are
    reported so they can be hashed as zeros without reading them (much faster)."""
    off = 0
    while off < size:
        try:
            data = os.lseek(fd, off, os.SEEK_DATA)
        except OSError as e:
            if e.errno != errno.ENXIO:   # no SEEK_DATA support: read everything
                yield off, size - off, True
                return
            data = size                  # ENXIO: only a hole is left
        if data > off:
            yield off, data - off, False
        if data >= size:
            return
        try:
            hole = min(os.lseek(fd, data, os.SEEK_HOLE), size)
        except OSError:
            hole = size
        yield data, hole - data, True
        off = hole


def hash_file(real, size, git):
    """sha256 of a file, plus its git blob sha1 if `git` (regular git files only:
    an LFS file's blobId is the sha1 of its pointer). hashlib releases the GIL on
    large updates, so several files hash in parallel threads."""
    h256 = hashlib.sha256()
    h1 = hashlib.sha1(b"blob %d\0" % size) if git else None
    step = 16 << 20
    buf = bytearray(step)
    view = memoryview(buf)
    zeros = memoryview(bytes(step))
    fd = os.open(real, os.O_RDONLY)
    try:
        for off, length, is_data in data_segments(fd, size):
            end = off + length
            while off < end:
                n = min(step, end - off)
                if is_data:
                    n = os.preadv(fd, [view[:n]], off)
                    if n == 0:
                        raise OSError(f"{real}: file shrank while hashing")
                    chunk = view[:n]
                else:
                    chunk = zeros[:n]
                h256.update(chunk)
                if h1:
                    h1.update(chunk)
                off += n
    finally:
        os.close(fd)
    return h256.hexdigest(), h1.hexdigest() if h1 else None


class HashCache:
    """Hashes of files, optionally cached on disk by (path, size, mtime): a big
    sparse model (phi4: 29 GB) takes ~20-40 s to hash."""

    def __init__(self, path):
        self.path = path
        self.data = {}
        if path and os.path.exists(path):
            try:
                with open(path) as f:
                    self.data = json.load(f)
            except (OSError, ValueError):
                self.data = {}

    def lookup(self, real, st, git):
        e = self.data.get(real)
        if (e and e["size"] == st.st_size and e["mtime_ns"] == st.st_mtime_ns
                and (e["git_sha1"] or not git)):
            return e["sha256"], e["git_sha1"]
        return None

    def hash_all(self, jobs):
        """jobs: list of (real, stat, git). Hashes the misses in parallel."""
        todo = [j for j in jobs if self.lookup(*j) is None]
        workers = max(1, min(len(todo), os.cpu_count() or 1))
        with concurrent.futures.ThreadPoolExecutor(workers) as ex:
            done = list(ex.map(lambda j: hash_file(j[0], j[1].st_size, j[2]), todo))
        for (real, st, _), (sha256, git_sha1) in zip(todo, done):
            self.data[real] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns,
                               "sha256": sha256, "git_sha1": git_sha1}
        return [self.lookup(*j) for j in jobs]

    def save(self):
        if self.path:
            tmp = self.path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(self.data, f)
            os.replace(tmp, self.path)


def scan_model_dir(model_dir, cache):
    """Every regular file under model_dir (symlinks followed, so an HF cache snapshot
    folder works too), with size, hashes and the Hub's blobId."""
    found = []
    for root, dirs, names in os.walk(model_dir, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if name.startswith("."):
                continue
            full = os.path.join(root, name)
            rel = os.path.relpath(full, model_dir).replace(os.sep, "/")
            if not os.path.isfile(full):
                continue
            if not PATH_RE.match(rel):
                die(f"unsupported file name {rel!r} in {model_dir}")
            real = os.path.realpath(full)
            found.append((rel, real, os.stat(real)))
    if not found:
        die(f"no files in {model_dir}")
    hashes = cache.hash_all([(real, st, not is_lfs(rel)) for rel, real, st in found])
    files = {}
    for (rel, real, st), (sha256, git_sha1) in zip(found, hashes):
        entry = {"size": st.st_size, "sha256": sha256, "lfs": is_lfs(rel), "real": real}
        if entry["lfs"]:
            pointer = lfs_pointer(sha256, st.st_size)
            entry["blob"] = git_blob_sha1(pointer)
            entry["pointer_size"] = len(pointer)
            entry["etag"] = sha256
        else:
            entry["blob"] = git_sha1
            entry["etag"] = git_sha1
        files[rel] = entry
    return files


def make_commit(repo_id, branch, files):
    """Deterministic 40-hex commit: same repo id + branch + content -> same commit."""
    h = hashlib.sha1(f"aprfs-hub-fixture\0{repo_id}\0{branch}\0".encode())
    for path in sorted(files):
        h.update(f"{path} {files[path]['etag']} {files[path]['size']}\n".encode())
    return h.hexdigest()


def api_json(repo_id, repo):
    """Body of /api/models/ORG/NAME/revision/REV?blobs=true (remote-protocol.md §1)."""
    siblings = []
    for path in sorted(repo["files"]):
        f = repo["files"][path]
        s = {"rfilename": path, "size": f["size"], "blobId": f["blob"]}
        if f["lfs"]:
            s["lfs"] = {"sha256": f["sha256"], "size": f["size"],
                        "pointerSize": f["pointer_size"]}
        siblings.append(s)
    return {"_id": repo["commit"][:24], "id": repo_id, "modelId": repo_id,
            "sha": repo["commit"], "private": False,
            "gated": "manual" if repo["gated"] else False,
            "disabled": False, "tags": [], "siblings": siblings}


# --------------------------------------------------------------------------------------
# nginx configuration
# --------------------------------------------------------------------------------------

def q(s, newline=False):
    """A double-quoted nginx config string (optionally ending in a \\n escape)."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + ("\\n" if newline else "") + '"'


def signed_location(state, sha256, expires):
    """Absolute CDN URL for a blob; matches the CDN's secure_link_md5 expression."""
    uri = CDN_PREFIX + sha256
    digest = hashlib.md5(f"{expires}{uri} {state['secret']}".encode()).digest()
    md5 = base64.urlsafe_b64encode(digest).decode().rstrip("=")
    return f"http://127.0.0.1:{state['cdn_port']}{uri}?expires={expires}&md5={md5}"


def temp_path_directives(prefix):
    """Temp dirs inside the state dir, so nginx never needs /var/lib/nginx (non-root)."""
    try:
        v = subprocess.run([NGINX, "-V"], capture_output=True, text=True, timeout=10).stderr
    except (OSError, subprocess.TimeoutExpired):
        v = ""
    out = [f"client_body_temp_path {q(prefix + '/tmp/body')};"]
    for mod in ("proxy", "fastcgi", "uwsgi", "scgi"):
        if f"--without-http_{mod}_module" not in v:
            out.append(f"{mod}_temp_path {q(prefix + '/tmp/' + mod)};")
    return "\n    ".join(out)


def main_config(prefix, port, server_body, http_extra="", listen_extra=""):
    """Common nginx.conf skeleton: everything (pid, logs, temp) inside `prefix`."""
    user = "user root;" if os.geteuid() == 0 else ""  # as root nginx would drop to nobody
    return f"""# generated by hub_fixture.py; do not edit
{user}
daemon on;
master_process on;
worker_processes 2;
pid {q(prefix + '/nginx.pid')};
error_log {q(prefix + '/error.log')} info;
events {{ worker_connections 1024; }}
http {{
    {temp_path_directives(prefix)}
    # $connection/$connection_requests let tests check keep-alive reuse; ifr is the If-Range
    # the client sent ("-": none; nginx writes a double quote as \\x22).
    log_format fixture '$remote_addr [$time_local] "$request" $status $body_bytes_sent '
                       'range="$http_range" conn=$connection req=$connection_requests '
                       'rt=$request_time ifr="$http_if_range"';
    access_log {q(prefix + '/access.log')} fixture;
    types {{ }}
    default_type application/octet-stream;
    sendfile on;
    tcp_nodelay on;
    keepalive_timeout 75s;
    keepalive_requests 100000;
    server_tokens off;
    {http_extra}
    server {{
        listen 127.0.0.1:{port}{listen_extra};
        server_name _;
{server_body}
    }}
}}
"""


def error_return(status, code, message, commit=None, indent=12):
    """add_header lines + return, for a Hub error answer (headers also on HEAD)."""
    pad = " " * indent
    lines = []
    if code:
        lines.append(f"add_header X-Error-Code {code} always;")
    lines.append(f"add_header X-Error-Message {q(message)} always;")
    if commit:
        lines.append(f"add_header X-Repo-Commit {commit} always;")
    lines.append(f"return {status} {q(message, newline=True)};")
    return "".join(pad + l + "\n" for l in lines)


def gate(repo):
    """nginx `if`s that refuse a gated repo without the right bearer token."""
    if not repo["gated"]:
        return ""
    pad = " " * 12
    msg401 = ("Access to model is restricted. You must have access to it and be "
              "authenticated to access it. Please log in.")
    msg403 = ("Access to model is restricted and you are not in the authorized list. "
              "Visit the repository page to ask for access.")
    return (f"{pad}if ($fixture_auth = none) {{\n"
            f"{error_return(401, 'GatedRepo', msg401, indent=16)}{pad}}}\n"
            f"{pad}if ($fixture_auth = bad) {{\n"
            f"{error_return(403, 'GatedRepo', msg403, indent=16)}{pad}}}\n")


def location(match, body, exact=True):
    kind = "= " if exact else ""
    return f"        location {kind}{q(match)} {{\n{body}        }}\n"


def hub_repo_locations(state, repo_id, repo, expires):
    """All hub locations of one repo. Exact matches win, then the longest prefix,
    which gives EntryNotFound < RevisionNotFound < RepoNotFound fall-backs."""
    hub = state["dir"] + "/hub"
    commit = repo["commit"]
    g = gate(repo)
    out = []
    api_file = f"{hub}/api/{repo_id.replace('/', '--')}.json"
    # The real Hub shows a gated repo's metadata to anyone; by default we gate it too.
    api_gate = "" if state["gated_metadata_public"] else g
    api_body = (api_gate + "            types { } default_type application/json;\n"
                f"            add_header X-Repo-Commit {commit} always;\n"
                f"            alias {q(api_file)};\n")
    for rev in ("", "/revision/" + repo["branch"], "/revision/" + commit):
        out.append(location(f"/api/models/{repo_id}{rev}", api_body))
    out.append(location(f"/api/models/{repo_id}/revision/", api_gate + error_return(
        404, "RevisionNotFound", f"Invalid rev id for {repo_id}"), exact=False))
    out.append(location(f"/api/models/{repo_id}/", error_return(
        404, None, "Route not implemented by hub_fixture"), exact=False))

    for rev in (repo["branch"], commit):
        for path, f in sorted(repo["files"].items()):
            hdr = (f"            add_header X-Repo-Commit {commit} always;\n"
                   "            add_header Accept-Ranges bytes always;\n")
            if f["lfs"]:
                body = (g + hdr +
                        f"            add_header X-Linked-Etag '\"{f['sha256']}\"' always;\n"
                        f"            add_header X-Linked-Size {f['size']} always;\n"
                        f"            add_header ETag '\"{f['sha256']}\"' always;\n"
                        f"            return 302 {q(signed_location(state, f['sha256'], expires))};\n")
            else:
                target = (f"/api/resolve-cache/models/{repo_id}/{commit}/"
                          + urllib.parse.quote(path, safe="/"))
                body = g + hdr + f"            return 307 {q(target)};\n"
            out.append(location(f"/{repo_id}/resolve/{rev}/{path}", body))
        out.append(location(f"/{repo_id}/resolve/{rev}/", g + error_return(
            404, "EntryNotFound", "Entry not found", commit=commit), exact=False))
    out.append(location(f"/{repo_id}/resolve/", g + error_return(
        404, "RevisionNotFound", "Invalid rev id"), exact=False))

    for path, f in sorted(repo["files"].items()):
        if f["lfs"]:
            continue
        body = (g + "            etag off;\n"
                f"            add_header ETag '\"{f['blob']}\"';\n"
                f"            add_header X-Repo-Commit {commit};\n"
                f"            alias {q(hub + '/files/' + f['blob'])};\n")
        out.append(location(f"/api/resolve-cache/models/{repo_id}/{commit}/{path}", body))
    out.append(location(f"/api/resolve-cache/models/{repo_id}/", g + error_return(
        404, "EntryNotFound", "Entry not found", commit=commit), exact=False))
    return "".join(out)


def hub_config(state, expires):
    prefix = state["dir"] + "/hub"
    repos = state["repos"]
    body = [location("/_fixture/generation",
                     f"            return 200 \"{state['generation']}\\n\";\n")]
    for repo_id in sorted(repos):
        body.append(f"        # ---- repo {repo_id}\n")
        body.append(hub_repo_locations(state, repo_id, repos[repo_id], expires))
    repo_not_found = error_return(404, "RepoNotFound", "Repository not found")
    body.append(location("/api/models/", repo_not_found, exact=False))
    body.append(location("/api/resolve-cache/", repo_not_found, exact=False))
    body.append(location("/", repo_not_found, exact=False))
    # Tokens are checked case-sensitively (regex), like the real Hub.
    token = state.get("token") or ""
    http_extra = ("map $http_authorization $fixture_auth {\n"
                  "        default bad;\n"
                  "        \"\" none;\n" +
                  (f"        \"~^Bearer {token}$\" ok;\n" if token else "") +
                  "    }\n"
                  # The Hub's relative 307 to /api/resolve-cache must stay relative.
                  "    absolute_redirect off;")
    return main_config(prefix, state["hub_port"], "".join(body), http_extra)


def cdn_config(state):
    prefix = state["dir"] + "/cdn"
    rate = state.get("rate_limit") or 0
    mode = state.get("cdn_etag") or "sha256"
    body = location("/_fixture/generation",
                    f"            return 200 \"{state['generation']}\\n\";\n")
    signed = f"""            # nginx secure_link: md5 = base64url(md5(expires + uri + " " + secret)).
            secure_link $arg_md5,$arg_expires;
            secure_link_md5 "$secure_link_expires$uri {state['secret']}";
            if ($secure_link = "") {{ return 403 "invalid or missing signature\\n"; }}
            if ($secure_link = "0") {{ return 403 "signature expired\\n"; }}
            add_header Accept-Ranges $fixture_accept_ranges;
            limit_rate {rate};     # per connection; 0 = unlimited
"""
    serve = f"""            max_ranges 1;          # multi-range requests get the full 200, like CloudFront
"""
    if mode in ("sha256", "nginx", "last-modified"):
        validators = {"sha256": "            etag off;\n            add_header ETag \"\\\"$sha\\\"\";\n",
                      "nginx": "",  # nginx's own ETag
                      "last-modified": "            etag off;\n"}[mode]
        body += f"""        location ~ "^{CDN_PREFIX}(?<sha>[0-9a-f]{{64}})$" {{
{signed}            root {q(prefix + '/data')};
{validators}{serve}        }}
"""
    else:
        # A proxy in front of an origin (this same nginx): the answer's validators are rewritten
        # on the way (nginx cannot drop Last-Modified or weaken an ETag of a static file).
        rewrite = ("            proxy_hide_header ETag;\n"
                   "            add_header ETag \"W/$upstream_http_etag\";\n" if mode == "weak" else
                   "            proxy_hide_header ETag;\n"
                   "            proxy_hide_header Last-Modified;\n")
        body += f"""        location ~ "^{CDN_PREFIX}(?<sha>[0-9a-f]{{64}})$" {{
{signed}            proxy_pass http://127.0.0.1:{state['cdn_port']}{ORIGIN_PREFIX}$sha;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
{rewrite}        }}
        location ~ "^{ORIGIN_PREFIX}(?<sha>[0-9a-f]{{64}})$" {{
            access_log off;
            alias {q(prefix + '/data' + CDN_PREFIX + '$sha')};
{serve}        }}
"""
    body += """        location / { return 404 "not found\\n"; }
"""
    # nginx adds Accept-Ranges itself to a full 200 but not to a 206: add it there only.
    http_extra = ("map $http_range $fixture_accept_ranges "
                  "{ default \"\"; \"~^bytes=[0-9]*-[0-9]*$\" bytes; }")
    # A small send buffer makes limit_rate a limit per connection: with the kernel's default
    # (MBs on loopback) every request first gets a buffer's worth at full speed, so many small
    # requests beat a few large ones.
    sndbuf = state.get("cdn_sndbuf") or 0
    return main_config(prefix, state["cdn_port"], body, http_extra,
                       f" sndbuf={sndbuf}" if sndbuf else "")


# --------------------------------------------------------------------------------------
# Process management
# --------------------------------------------------------------------------------------

def free_port():
    """An ephemeral port that was free a moment ago (nginx cannot report port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_alive(pid):
    """True if pid exists and is not a zombie (PID 1 here may not reap daemons)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def group_members(pgid):
    """Live processes of a process group (the nginx master is a session leader)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[2]) == pgid and fields[0] not in "ZX":
            pids.append(int(d))
    return pids


def is_our_nginx(pid, conf):
    """Guards against a recycled pid. nginx rewrites its title to one string
    ("nginx: master process /usr/sbin/nginx -p ... -c CONF ..."), so match substrings."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
    except OSError:
        return False
    return cmd.startswith(b"nginx") and (b" " + conf.encode()) in cmd.replace(b"\0", b" ")


def is_nginx_worker(pid):
    """An nginx process, or one exiting: its cmdline reads empty from the moment it lets go of
    its memory until it is a zombie, and it is not gone yet."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
    except OSError:
        return False
    return cmd.startswith(b"nginx: ") or cmd == b""


def nginx_group(pgid):
    """Live nginx processes (master and workers) of the master's process group."""
    return [p for p in group_members(pgid) if is_nginx_worker(p)]


def read_pid(prefix):
    try:
        with open(prefix + "/nginx.pid") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def start_nginx(prefix, write_conf):
    """Write the config for a fresh port, start nginx (it daemonizes after binding,
    so a bind failure is its exit status), retry on a port race. Returns (port, pid)."""
    conf = prefix + "/nginx.conf"
    for attempt in range(5):
        port = free_port()
        with open(conf, "w") as f:
            f.write(write_conf(port))
        try:
            r = subprocess.run([NGINX, "-p", prefix, "-c", conf, "-e", prefix + "/error.log"],
                               capture_output=True, text=True, timeout=START_DEADLINE,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            die(f"nginx did not start within {START_DEADLINE}s ({prefix})")
        if r.returncode == 0:
            break
        if "Address already in use" not in r.stderr:
            die(f"nginx failed to start ({prefix}):\n{r.stderr}")
    else:
        die("could not find a free port for nginx")
    deadline = time.monotonic() + START_DEADLINE
    while time.monotonic() < deadline:
        pid = read_pid(prefix)
        if pid and proc_alive(pid):
            return port, pid
        time.sleep(0.05)
    die(f"nginx wrote no pid file ({prefix})")


def fetch_generation(port):
    url = f"http://127.0.0.1:{port}/_fixture/generation"
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return int(r.read().decode().strip())
    except (OSError, ValueError, urllib.error.URLError):
        return None


def wait_generation(port, generation, what):
    """Wait until the server answers with the given config generation (start, reload)."""
    deadline = time.monotonic() + START_DEADLINE
    while time.monotonic() < deadline:
        if fetch_generation(port) == generation:
            return
        time.sleep(0.05)
    die(f"{what} on port {port} did not answer generation {generation} "
        f"within {START_DEADLINE}s")


def stop_nginx(prefix):
    """SIGTERM (fast shutdown) the master, then SIGKILL the whole group if needed."""
    pid = read_pid(prefix)
    if pid is None:
        return
    conf = prefix + "/nginx.conf"
    if proc_alive(pid):
        if not is_our_nginx(pid, conf):
            return  # pid recycled by something else: not ours to kill
        os.kill(pid, signal.SIGTERM)
    elif not nginx_group(pid):
        return
    for sig in (None, signal.SIGKILL):
        if sig is not None:
            for p in nginx_group(pid):
                try:
                    os.kill(p, sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + STOP_DEADLINE
        while time.monotonic() < deadline:
            if not nginx_group(pid):
                return
            time.sleep(0.05)
    die(f"nginx {pid} ({prefix}) did not stop")


# --------------------------------------------------------------------------------------
# State and commands
# --------------------------------------------------------------------------------------

def state_path(state_dir):
    return os.path.join(state_dir, "state.json")


def load_state(state_dir):
    try:
        with open(state_path(state_dir)) as f:
            return json.load(f)
    except OSError:
        die(f"no fixture state in {state_dir} (was `start` run?)")


def save_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def public_info(state):
    repos = {}
    for repo_id, repo in state["repos"].items():
        files = {p: {k: f[k] for k in ("size", "sha256", "blob", "etag", "lfs")}
                 for p, f in repo["files"].items()}
        repos[repo_id] = {"commit": repo["commit"], "branch": repo["branch"],
                          "gated": repo["gated"], "model_dir": repo["model_dir"],
                          "files": files}
    info = {"endpoint": f"http://127.0.0.1:{state['hub_port']}",
            "cdn": f"http://127.0.0.1:{state['cdn_port']}",
            "state_dir": state["dir"], "url_ttl": state["url_ttl"],
            "rate_limit": state["rate_limit"], "expires": state["expires"],
            "cdn_etag": state.get("cdn_etag") or "sha256",
            "cdn_sndbuf": state.get("cdn_sndbuf") or 0,
            "pids": {"hub": state["hub_pid"], "cdn": state["cdn_pid"]},
            "repos": repos}
    if state.get("token"):
        info["token"] = state["token"]
    return info


def parse_repo_arg(arg):
    m = re.match(r"^([^=]+)=(.+?)(?:@([^@/]+))?$", arg)
    if not m:
        die(f"bad --repo {arg!r}: expected ORG/NAME=MODEL_DIR[@BRANCH]")
    repo_id, model_dir, branch = m.group(1), m.group(2), m.group(3) or "main"
    if not REPO_ID_RE.match(repo_id) or "--" in repo_id:
        die(f"bad repo id {repo_id!r}")
    if not BRANCH_RE.match(branch) or re.fullmatch(r"[0-9a-f]{40}", branch):
        die(f"bad branch {branch!r} (one path segment, not a commit)")
    if not os.path.isdir(model_dir):
        die(f"not a directory: {model_dir}")
    return repo_id, os.path.abspath(model_dir), branch


def link_files(state):
    """CDN data by sha256 and hub small files by git sha1, as symlinks to the models."""
    data = state["dir"] + "/cdn/data" + CDN_PREFIX.rstrip("/")
    files = state["dir"] + "/hub/files"
    api = state["dir"] + "/hub/api"
    for d in (data, files, api):
        os.makedirs(d, exist_ok=True)
    for repo_id, repo in state["repos"].items():
        for f in repo["files"].values():
            dest = f"{data}/{f['sha256']}" if f["lfs"] else f"{files}/{f['blob']}"
            if not os.path.lexists(dest):
                os.symlink(f["real"], dest)
        save_json(f"{api}/{repo_id.replace('/', '--')}.json", api_json(repo_id, repo))


def cmd_start(args):
    state_dir = os.path.abspath(args.state_dir)
    os.makedirs(state_dir, exist_ok=True)
    if os.path.exists(state_path(state_dir)):
        old = load_state(state_dir)
        for name in ("hub", "cdn"):
            pid = read_pid(f"{state_dir}/{name}")
            if pid and proc_alive(pid) and is_our_nginx(pid, f"{state_dir}/{name}/nginx.conf"):
                die(f"fixture already running in {state_dir}; run `stop` first")
        del old
    if args.token and not TOKEN_RE.match(args.token):
        die("bad --token (letters, digits, _ and - only)")
    if args.gated and not args.token:
        die("--gated needs --token")
    cache = HashCache(args.hash_cache)
    repos = {}
    for arg in args.repo:
        repo_id, model_dir, branch = parse_repo_arg(arg)
        if repo_id in repos:
            die(f"repo {repo_id} given twice")
        files = scan_model_dir(model_dir, cache)
        repos[repo_id] = {"model_dir": model_dir, "branch": branch, "files": files,
                          "commit": make_commit(repo_id, branch, files), "gated": False}
    cache.save()
    for g in args.gated:
        if g not in repos:
            die(f"--gated {g}: not a --repo")
        repos[g]["gated"] = True

    state = {"dir": state_dir, "repos": repos, "secret": secrets.token_hex(16),
             "token": args.token, "gated_metadata_public": args.gated_metadata_public,
             "rate_limit": args.rate_limit, "url_ttl": args.url_ttl, "generation": 1,
             "cdn_etag": args.cdn_etag, "cdn_sndbuf": args.cdn_sndbuf,
             "hub_port": None, "cdn_port": None}
    for name in ("hub", "cdn"):
        shutil.rmtree(f"{state_dir}/{name}", ignore_errors=True)
        os.makedirs(f"{state_dir}/{name}/tmp")
    link_files(state)

    # The CDN first: the hub's redirects need its port.
    def cdn_conf(port):
        state["cdn_port"] = port
        return cdn_config(state)
    state["cdn_port"], state["cdn_pid"] = start_nginx(state_dir + "/cdn", cdn_conf)
    try:
        state["expires"] = int(time.time()) + state["url_ttl"]

        def hub_conf(port):
            state["hub_port"] = port
            return hub_config(state, state["expires"])
        state["hub_port"], state["hub_pid"] = start_nginx(state_dir + "/hub", hub_conf)
        save_json(state_path(state_dir), state)
        wait_generation(state["cdn_port"], 1, "cdn nginx")
        wait_generation(state["hub_port"], 1, "hub nginx")
    except SystemExit:
        stop_nginx(state_dir + "/hub")
        stop_nginx(state_dir + "/cdn")
        raise
    info = public_info(state)
    save_json(state_dir + "/fixture.json", info)
    print(json.dumps(info, indent=1, sort_keys=True))


def cmd_refresh(args):
    """Fresh expiries in every hub Location; nginx reload; wait until it is live."""
    state_dir = os.path.abspath(args.state_dir)
    state = load_state(state_dir)
    pid = read_pid(state_dir + "/hub")
    if not pid or not proc_alive(pid):
        die("hub nginx is not running")
    state["generation"] += 1
    state["expires"] = int(time.time()) + state["url_ttl"]
    with open(state_dir + "/hub/nginx.conf", "w") as f:
        f.write(hub_config(state, state["expires"]))
    old_workers = [p for p in nginx_group(pid) if p != pid]
    os.kill(pid, signal.SIGHUP)
    wait_generation(state["hub_port"], state["generation"], "reloaded hub nginx")
    # Old workers finish their connections and may still accept one for a moment: the reload
    # is done only when they are gone, or the next request can get an old answer.
    deadline = time.monotonic() + START_DEADLINE
    while any(proc_alive(p) and is_nginx_worker(p) for p in old_workers):
        if time.monotonic() > deadline:
            die("old hub nginx workers did not exit after the reload")
        time.sleep(0.05)
    save_json(state_path(state_dir), state)
    info = public_info(state)
    save_json(state_dir + "/fixture.json", info)
    print(json.dumps(info, indent=1, sort_keys=True))


def cmd_stop(args):
    state_dir = os.path.abspath(args.state_dir)
    for name in ("hub", "cdn"):
        stop_nginx(f"{state_dir}/{name}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start", help="lay out and start hub + cdn nginx")
    s.add_argument("state_dir")
    s.add_argument("--repo", action="append", required=True,
                   metavar="ORG/NAME=MODEL_DIR[@BRANCH]")
    s.add_argument("--gated", action="append", default=[], metavar="ORG/NAME",
                   help="needs `Authorization: Bearer TOKEN` (401/403 GatedRepo otherwise)")
    s.add_argument("--token", help="the token that has access to the gated repos")
    s.add_argument("--gated-metadata-public", action="store_true",
                   help="let /api/models answer 200 for gated repos (as the real Hub)")
    s.add_argument("--rate-limit", type=int, default=0, metavar="BYTES_PER_SEC",
                   help="nginx limit_rate per CDN connection (0 = none)")
    s.add_argument("--url-ttl", type=int, default=3600, metavar="SECONDS",
                   help="validity of signed CDN URLs, from start/refresh")
    s.add_argument("--cdn-etag", choices=CDN_ETAG_MODES, default="sha256",
                   help="the CDN's validators: the Hub's (ETag = sha256) or a mirror's own")
    s.add_argument("--cdn-sndbuf", type=int, default=0, metavar="BYTES",
                   help="the CDN's socket send buffer (0 = the kernel's): with --rate-limit, "
                        "a small one (64K) limits each connection, not each request")
    s.add_argument("--hash-cache", metavar="FILE",
                   help="JSON cache of file hashes (by path, size, mtime)")
    s.set_defaults(func=cmd_start)
    r = sub.add_parser("refresh", help="re-sign CDN Locations with fresh expiries")
    r.add_argument("state_dir")
    r.set_defaults(func=cmd_refresh)
    t = sub.add_parser("stop", help="stop both nginx processes")
    t.add_argument("state_dir")
    t.set_defaults(func=cmd_stop)
    args = ap.parse_args()
    if not os.access(NGINX, os.X_OK):
        die(f"{NGINX} not found (install nginx-light; or set APRFS_NGINX)")
    args.func(args)


if __name__ == "__main__":
    main()
