#!/usr/bin/env bash
# Smoke test of the remote-test servers themselves (no aprfs involved):
#   tests/tools/hub_fixture.py  — nginx "hub" + nginx "cdn"
#   tests/tools/fault_server.py — our fault-injecting server
# Every behaviour the aprfs remote tests rely on is checked with curl (and aria2c),
# so a broken fixture shows up here rather than as a mysterious client failure.
# Usage: tests/remote/hub_fixture_smoke.sh   (KEEP=1 keeps the work dir)
# Exit status: 0 if every check passed, 1 otherwise.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TOOLS="$(cd "$HERE/../tools" && pwd)"
FIXTURE="$TOOLS/hub_fixture.py"
FAULT="$TOOLS/fault_server.py"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/hub-smoke.XXXXXX")"
CURL=(curl -s --max-time 10)          # every request has a deadline
RATE=524288                           # CDN limit_rate for fixture A (bytes/s)
BIG_SIZE=$((3 * 1024 * 1024))         # ~5 s for one stream; aria2c: 3 x 1 MiB pieces, ~1 s

CHECKS=0
FAILS=0
FAULT_PID=""

# ---------------------------------------------------------------------------------
# Plumbing
# ---------------------------------------------------------------------------------

cleanup() {
  # Always stop what we started, even after a failure or ^C.
  for d in "$WORK/fxa" "$WORK/fxb" "$WORK"/fxc-*; do
    [ -f "$d/state.json" ] && timeout 30 python3 "$FIXTURE" stop "$d" >/dev/null 2>&1
  done
  if [ -n "$FAULT_PID" ]; then
    kill "$FAULT_PID" 2>/dev/null
    wait "$FAULT_PID" 2>/dev/null
  fi
  if [ "${KEEP:-0}" = 1 ]; then echo "work dir kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

die() { echo "FATAL: $*" >&2; exit 1; }

# check DESCRIPTION COMMAND...: runs COMMAND (a test), records pass/fail.
check() {
  local what="$1"; shift
  CHECKS=$((CHECKS + 1))
  if "$@"; then
    echo "ok   $what"
  else
    FAILS=$((FAILS + 1))
    echo "FAIL $what"
  fi
}

eq() {  # eq GOT WANT
  [ "$1" = "$2" ] && return 0
  echo "     got [$1], want [$2]"; return 1
}

# req [curl args...] URL: one request; sets STATUS, RC and files $WORK/h (headers), $WORK/b (body).
req() {
  STATUS=$("${CURL[@]}" -D "$WORK/h" -o "$WORK/b" -w '%{http_code}' "$@")
  RC=$?
}

# reqm HEAD|GET [curl args...] URL: req with an explicit method (HEAD must act like GET).
reqm() {
  local m="$1"; shift
  if [ "$m" = HEAD ]; then req -I "$@"; else req -X GET "$@"; fi
}

# hdr NAME: a header of the last response (last one if redirects were followed).
hdr() {
  tr -d '\r' <"$WORK/h" | awk -v n="$1" '
    /^HTTP\// { v = "" }
    { i = index($0, ":"); if (i && tolower(substr($0, 1, i - 1)) == tolower(n)) v = substr($0, i + 2) }
    END { print v }'
}

sha() { sha256sum "$1" | cut -d' ' -f1; }
jget() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
now() { date +%s.%N; }
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$(now)"; }
fcmp() { python3 -c "import sys; sys.exit(0 if $1 else 1)"; }   # float comparison

# slice FILE START LEN: bytes of a file, for comparing ranges.
slice() { tail -c +$(($2 + 1)) "$1" | head -c "$3"; }

# ---------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------

make_models() {
  python3 "$TOOLS/make_model.py" "$WORK/tiny" --preset tiny --shards 2 >/dev/null \
    || die "make_model.py failed"
  mkdir -p "$WORK/big"
  head -c "$BIG_SIZE" /dev/urandom >"$WORK/big/model.safetensors"
  echo '{"model_type": "big"}' >"$WORK/big/config.json"
  SHARD=model-00001-of-00002.safetensors
  SHARD_FILE="$WORK/tiny/$SHARD"
  SHARD_SIZE=$(stat -c %s "$SHARD_FILE")
  SHARD_SHA=$(sha "$SHARD_FILE")
}

# ---------------------------------------------------------------------------------
# Fixture A: API, resolve, errors, gated, CDN ranges, keep-alive, downloads, rate
# ---------------------------------------------------------------------------------

start_fixture_a() {
  FXA="$WORK/fxa"
  timeout 120 python3 "$FIXTURE" start "$FXA" \
    --repo "org/tiny=$WORK/tiny" --repo "org/big=$WORK/big" \
    --repo "org/gated=$WORK/tiny@dev" --gated org/gated --token hf_smoketoken123 \
    --rate-limit "$RATE" >"$WORK/fxa.json" || die "fixture A did not start"
  EP=$(jget "$WORK/fxa.json" 'd["endpoint"]')
  CDN=$(jget "$WORK/fxa.json" 'd["cdn"]')
  COMMIT=$(jget "$WORK/fxa.json" 'd["repos"]["org/tiny"]["commit"]')
  GCOMMIT=$(jget "$WORK/fxa.json" 'd["repos"]["org/gated"]["commit"]')
  cmp -s "$WORK/fxa.json" "$FXA/fixture.json" || die "fixture.json differs from stdout"
  echo "# fixture A: hub $EP, cdn $CDN"
}

api_json_ok() {  # the revision JSON matches the files on disk (remote-protocol.md §1)
  python3 - "$WORK/b" "$WORK/tiny" "$1" <<'EOF'
import hashlib, json, os, sys
body, model_dir, commit = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
assert body["id"] == "org/tiny" and body["sha"] == commit, body.get("sha")
names = sorted(os.listdir(model_dir))
assert [s["rfilename"] for s in body["siblings"]] == names, body["siblings"]
for s in body["siblings"]:
    data = open(os.path.join(model_dir, s["rfilename"]), "rb").read()
    assert s["size"] == len(data)
    if s["rfilename"].endswith(".safetensors"):
        assert s["lfs"]["sha256"] == hashlib.sha256(data).hexdigest()
        assert s["lfs"]["size"] == len(data) and s["lfs"]["pointerSize"] > 100
        assert len(s["blobId"]) == 40
    else:
        assert "lfs" not in s
        assert s["blobId"] == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
EOF
}

test_api() {
  local rev
  for rev in main "$COMMIT"; do
    req "$EP/api/models/org/tiny/revision/$rev?blobs=true"
    check "api revision/$rev: 200" eq "$STATUS" 200
    check "api revision/$rev: JSON content type" eq "$(hdr content-type)" application/json
    check "api revision/$rev: JSON matches the model" api_json_ok "$COMMIT"
  done
  req -I "$EP/api/models/org/tiny/revision/main?blobs=true"
  check "api HEAD: 200" eq "$STATUS" 200
  req "$EP/api/models/org/nope/revision/main?blobs=true"
  check "api unknown repo: 404" eq "$STATUS" 404
  check "api unknown repo: RepoNotFound" eq "$(hdr x-error-code)" RepoNotFound
  check "api unknown repo: X-Error-Message" test -n "$(hdr x-error-message)"
  req "$EP/api/models/org/tiny/revision/v9?blobs=true"
  check "api unknown revision: 404" eq "$STATUS" 404
  check "api unknown revision: RevisionNotFound" eq "$(hdr x-error-code)" RevisionNotFound
}

test_resolve_lfs() {
  local rev method loc
  for rev in main "$COMMIT"; do
    for method in HEAD GET; do
      reqm $method "$EP/org/tiny/resolve/$rev/$SHARD"
      check "resolve LFS $rev $method: 302" eq "$STATUS" 302
      loc=$(hdr location)
      check "resolve LFS $rev: absolute Location on the CDN" \
        eq "${loc%%/xet-bridge/*}" "$CDN"
      check "resolve LFS $rev: Location has sha256, md5, expires" \
        bash -c '[[ "$1" == *"/$2?"*"md5="* && "$1" == *"expires="* ]]' _ "$loc" "$SHARD_SHA"
      check "resolve LFS $rev: X-Repo-Commit" eq "$(hdr x-repo-commit)" "$COMMIT"
      check "resolve LFS $rev: X-Linked-Etag" eq "$(hdr x-linked-etag)" "\"$SHARD_SHA\""
      check "resolve LFS $rev: X-Linked-Size" eq "$(hdr x-linked-size)" "$SHARD_SIZE"
      check "resolve LFS $rev: ETag" eq "$(hdr etag)" "\"$SHARD_SHA\""
      check "resolve LFS $rev: Content-Length" test -n "$(hdr content-length)"
    done
  done
  LOC="$loc"   # a valid signed URL for the CDN tests
}

test_resolve_small() {
  local blob rev
  blob=$(jget "$WORK/fxa.json" 'd["repos"]["org/tiny"]["files"]["config.json"]["blob"]')
  for rev in main "$COMMIT"; do
    req -I "$EP/org/tiny/resolve/$rev/config.json"
    check "resolve small $rev: 307" eq "$STATUS" 307
    check "resolve small $rev: relative Location" \
      eq "$(hdr location)" "/api/resolve-cache/models/org/tiny/$COMMIT/config.json"
    check "resolve small $rev: X-Repo-Commit" eq "$(hdr x-repo-commit)" "$COMMIT"
    req -L "$EP/org/tiny/resolve/$rev/config.json"
    check "resolve small $rev followed: 200" eq "$STATUS" 200
    check "resolve small $rev followed: same bytes" cmp -s "$WORK/b" "$WORK/tiny/config.json"
    check "resolve small $rev followed: ETag = git blob sha1" eq "$(hdr etag)" "\"$blob\""
    check "resolve small $rev followed: X-Repo-Commit" eq "$(hdr x-repo-commit)" "$COMMIT"
  done
  req -I "$EP/api/resolve-cache/models/org/tiny/$COMMIT/config.json"
  check "resolve-cache HEAD: 200 + ETag" eq "$STATUS $(hdr etag)" "200 \"$blob\""
}

test_resolve_errors() {
  local m
  for m in HEAD GET; do
    reqm $m "$EP/org/tiny/resolve/main/nope.safetensors"
    check "unknown file $m: 404 EntryNotFound" eq "$STATUS $(hdr x-error-code)" "404 EntryNotFound"
    check "unknown file $m: X-Repo-Commit" eq "$(hdr x-repo-commit)" "$COMMIT"
    check "unknown file $m: X-Error-Message" test -n "$(hdr x-error-message)"
    reqm $m "$EP/org/tiny/resolve/v9/$SHARD"
    check "unknown revision $m: 404 RevisionNotFound" \
      eq "$STATUS $(hdr x-error-code)" "404 RevisionNotFound"
    reqm $m "$EP/org/nope/resolve/main/$SHARD"
    check "unknown repo $m: 404 RepoNotFound" eq "$STATUS $(hdr x-error-code)" "404 RepoNotFound"
    check "unknown repo $m: X-Error-Message" test -n "$(hdr x-error-message)"
  done
}

test_gated() {
  local url="$EP/org/gated/resolve/dev/$SHARD" m
  for m in HEAD GET; do
    reqm $m "$url"
    check "gated, no token $m: 401 GatedRepo" eq "$STATUS $(hdr x-error-code)" "401 GatedRepo"
    check "gated, no token: X-Error-Message" test -n "$(hdr x-error-message)"
    reqm $m -H "Authorization: Bearer hf_wrongtoken" "$url"
    check "gated, wrong token $m: 403 GatedRepo" eq "$STATUS $(hdr x-error-code)" "403 GatedRepo"
    reqm $m -H "Authorization: Bearer hf_smoketoken123" "$url"
    check "gated, right token $m: 302" eq "$STATUS $(hdr x-repo-commit)" "302 $GCOMMIT"
  done
  req "$EP/api/models/org/gated/revision/dev"
  check "gated api, no token: 401 GatedRepo" eq "$STATUS $(hdr x-error-code)" "401 GatedRepo"
  req -H "Authorization: Bearer hf_smoketoken123" "$EP/api/models/org/gated/revision/dev"
  check "gated api, right token: 200" eq "$STATUS" 200
  req -H "Authorization: Bearer hf_smoketoken123" "$EP/org/gated/resolve/dev/nope"
  check "gated, right token, unknown file: EntryNotFound" eq "$STATUS $(hdr x-error-code)" "404 EntryNotFound"
  # curl drops Authorization on the cross-host redirect, as the CDN URL is pre-signed.
  req -L -H "Authorization: Bearer hf_smoketoken123" "$url"
  check "gated, right token, followed: file bytes" eq "$(sha "$WORK/b")" "$SHARD_SHA"
}

test_cdn() {
  req -r 0-65535 "$LOC"
  check "cdn range 0-65535: 206" eq "$STATUS" 206
  check "cdn range: Content-Range" eq "$(hdr content-range)" "bytes 0-65535/$SHARD_SIZE"
  check "cdn range: Content-Length" eq "$(hdr content-length)" 65536
  check "cdn range: ETag" eq "$(hdr etag)" "\"$SHARD_SHA\""
  check "cdn range: Accept-Ranges" eq "$(hdr accept-ranges)" bytes
  check "cdn range: bytes" cmp -s "$WORK/b" <(slice "$SHARD_FILE" 0 65536)
  req -r 8-1007 "$LOC"
  check "cdn range 8-1007: bytes" eq "$STATUS $(hdr content-range) $(slice "$SHARD_FILE" 8 1000 | sha256sum | cut -c1-64)" \
    "206 bytes 8-1007/$SHARD_SIZE $(sha "$WORK/b")"
  req -r "$((SHARD_SIZE - 10))-$((SHARD_SIZE + 100))" "$LOC"
  check "cdn range over EOF: clamped" eq "$STATUS $(hdr content-range)" \
    "206 bytes $((SHARD_SIZE - 10))-$((SHARD_SIZE - 1))/$SHARD_SIZE"
  req -r "$SHARD_SIZE-" "$LOC"
  check "cdn range past EOF: 416" eq "$STATUS" 416
  check "cdn 416: Content-Range bytes */size" eq "$(hdr content-range)" "bytes */$SHARD_SIZE"
  req "$LOC"
  check "cdn no range: 200 full file" eq "$STATUS $(sha "$WORK/b")" "200 $SHARD_SHA"
  check "cdn no range: one Accept-Ranges" eq "$(grep -ci '^accept-ranges' "$WORK/h")" 1
  req -I "$LOC"
  check "cdn HEAD: 200 + size" eq "$STATUS $(hdr content-length)" "200 $SHARD_SIZE"
  req -r 0-9 "${LOC%%\?*}"
  check "cdn without signature: 403" eq "$STATUS" 403
  req -r 0-9 "${LOC/md5=/md5=AA}"
  check "cdn with a bad signature: 403" eq "$STATUS" 403
  local other; other=$(jget "$WORK/fxa.json" \
    'd["repos"]["org/tiny"]["files"]["model-00002-of-00002.safetensors"]["sha256"]')
  req -r 0-9 "${LOC/$SHARD_SHA/$other}"
  check "cdn signature of another blob: 403" eq "$STATUS" 403
  local expires; expires=$(sed -n 's/.*expires=\([0-9]*\).*/\1/p' <<<"$LOC")
  req -r 0-9 "${LOC/expires=$expires/expires=$((expires + 1000))}"
  check "cdn with a changed expiry: 403" eq "$STATUS" 403
}

test_keepalive() {
  # Two ranges in one curl run: the second must reuse the connection (num_connects 0).
  local n
  n=$("${CURL[@]}" -o /dev/null -o /dev/null -w '%{num_connects} ' -r 0-9 "$LOC" -r 10-19 "$LOC")
  check "cdn keep-alive: connection reused" eq "$n" "1 0 "
  n=$("${CURL[@]}" -o /dev/null -o /dev/null -w '%{num_connects} ' -I "$EP/org/tiny/resolve/main/$SHARD" \
      -I "$EP/org/tiny/resolve/main/config.json")
  check "hub keep-alive: connection reused" eq "$n" "1 0 "
}

aria2() {  # aria2 DIR NAME URL: parallel download, -x 8 -s 8 (1 MiB pieces)
  timeout 60 aria2c -x 8 -s 8 -k 1M --dir "$1" -o "$2" --allow-overwrite=true \
    --auto-file-renaming=false --file-allocation=none --console-log-level=error \
    --summary-interval=0 --download-result=hide --connect-timeout=5 --timeout=10 \
    --max-tries=2 --check-certificate=false "$3" >"$WORK/aria2.log" 2>&1
}

test_downloads() {
  req -L "$EP/org/tiny/resolve/main/$SHARD"
  check "curl -L full shard: sha256" eq "$(sha "$WORK/b")" "$SHARD_SHA"
  mkdir -p "$WORK/dl"
  check "aria2c -x 8 tiny shard: runs" aria2 "$WORK/dl" tiny "$EP/org/tiny/resolve/main/$SHARD"
  check "aria2c -x 8 tiny shard: sha256" eq "$(sha "$WORK/dl/tiny")" "$SHARD_SHA"

  # Rate limit: one stream is held to ~RATE; aria2c's 3 connections (1 MiB pieces,
  # each more than the 1 s burst nginx allows) are each throttled too, but in parallel.
  local big_sha t0 t_curl t_aria want
  big_sha=$(sha "$WORK/big/model.safetensors")
  t0=$(now)
  "${CURL[@]}" --max-time 30 -L -o "$WORK/dl/big.curl" "$EP/org/big/resolve/main/model.safetensors"
  t_curl=$(elapsed "$t0")
  check "curl big: sha256" eq "$(sha "$WORK/dl/big.curl")" "$big_sha"
  want=$(python3 -c "print(f'{$BIG_SIZE / $RATE:.1f}')")
  echo "#    curl (1 stream): ${t_curl}s for $BIG_SIZE bytes at limit_rate $RATE (~${want}s)"
  # nginx lets one second's worth through at once, so expect (size/rate - 1) .. + slack.
  check "rate limit respected by one stream (>= $want - 1.5 s)" fcmp "$t_curl >= $want - 1.5"
  check "rate limit not far below the limit (<= $want + 3 s)" fcmp "$t_curl <= $want + 3"
  t0=$(now)
  check "aria2c -x 8 -s 8 big: runs" aria2 "$WORK/dl" big "$EP/org/big/resolve/main/model.safetensors"
  t_aria=$(elapsed "$t0")
  echo "#    aria2c -x 8: ${t_aria}s"
  check "aria2c -x 8 big: sha256 = curl's" eq "$(sha "$WORK/dl/big")" "$big_sha"
  check "rate limit applies to each aria2c connection (>= 0.5 s)" fcmp "$t_aria >= 0.5"
  check "rate limit is per connection (aria2c < 0.6 x curl)" fcmp "$t_aria < 0.6 * $t_curl"
}

stop_fixture() {  # stop_fixture DIR JSON: stop, and check the nginx processes are gone
  local dir="$1" json="$2" pid gone=0
  timeout 60 python3 "$FIXTURE" stop "$dir" || { check "stop $dir" false; return; }
  for pid in $(jget "$json" 'd["pids"]["hub"], d["pids"]["cdn"]' | tr -d '(),'); do
    # The master may linger as a zombie if nothing reaps it: that counts as gone.
    if [ -e "/proc/$pid" ] && ! grep -q '^[^)]*) Z' "/proc/$pid/stat" 2>/dev/null; then gone=1; fi
  done
  check "stop: both nginx masters gone" eq "$gone" 0
  if "${CURL[@]}" --max-time 2 -o /dev/null "$(jget "$json" 'd["endpoint"]')/_fixture/generation"; then
    check "stop: hub port closed" false
  else
    check "stop: hub port closed" true
  fi
}

# ---------------------------------------------------------------------------------
# Fixture B: signed URLs expire (--url-ttl 10) and `refresh` re-signs them
# ---------------------------------------------------------------------------------

# Until the signed URLs of a fixture's JSON (from start or refresh) have expired.
wait_expired() {
  local expires
  expires=$(jget "$1" 'd["expires"]')
  while [ "$(date +%s)" -le $((expires + 1)) ]; do sleep 0.5; done
}

test_expiry_and_refresh() {
  local fxb="$WORK/fxb" ep loc1 loc2
  # 10 s: longer than a busy machine takes from signing (at start) to the first request.
  timeout 120 python3 "$FIXTURE" start "$fxb" --repo "org/tiny=$WORK/tiny" --url-ttl 10 \
    >"$WORK/fxb.json" || die "fixture B did not start"
  ep=$(jget "$WORK/fxb.json" 'd["endpoint"]')
  req -I "$ep/org/tiny/resolve/main/$SHARD"
  loc1=$(hdr location)
  req -r 0-9 "$loc1"
  check "ttl 10: fresh signed URL works" eq "$STATUS" 206
  wait_expired "$WORK/fxb.json"
  req -r 0-9 "$loc1"
  check "ttl 10: once expired the signed URL is refused (403)" eq "$STATUS" 403
  req -I "$ep/org/tiny/resolve/main/$SHARD"
  check "ttl 10: before refresh the hub still hands out the old URL" eq "$(hdr location)" "$loc1"
  timeout 60 python3 "$FIXTURE" refresh "$fxb" >"$WORK/fxb2.json"
  check "refresh: exits 0" eq "$?" 0
  req -I "$ep/org/tiny/resolve/main/$SHARD"
  loc2=$(hdr location)
  check "refresh: new Location" test "$loc2" != "$loc1"
  check "refresh: still 302 with X-Linked-Etag" eq "$STATUS $(hdr x-linked-etag)" "302 \"$SHARD_SHA\""
  req -r 0-9 "$loc2"
  check "refresh: new signed URL works" eq "$STATUS $(hdr content-range)" "206 bytes 0-9/$SHARD_SIZE"
  req -r 0-9 "$loc1"
  check "refresh: old signed URL still refused" eq "$STATUS" 403
  check "refresh: same endpoint" eq "$(jget "$WORK/fxb2.json" 'd["endpoint"]')" "$ep"
  stop_fixture "$fxb" "$WORK/fxb.json"
}

# ---------------------------------------------------------------------------------
# Fixture C: --cdn-etag, a mirror or caching proxy with validators of its own
# ---------------------------------------------------------------------------------

test_mirror_modes() {
  local mode dir ep loc etag lm body_ok real mtime
  for mode in nginx weak last-modified none; do
    dir="$WORK/fxc-$mode"
    timeout 120 python3 "$FIXTURE" start "$dir" --repo "org/tiny=$WORK/tiny" --cdn-etag "$mode" \
      >"$WORK/fxc.json" || die "fixture C ($mode) did not start"
    check "cdn-etag $mode: fixture.json says so" eq "$(jget "$WORK/fxc.json" 'd["cdn_etag"]')" "$mode"
    ep=$(jget "$WORK/fxc.json" 'd["endpoint"]')
    req -I "$ep/org/tiny/resolve/main/$SHARD"
    check "cdn-etag $mode: the hub still gives the sha256" eq "$(hdr x-linked-etag)" "\"$SHARD_SHA\""
    loc=$(hdr location)
    req -r 10-19 "$loc"
    etag=$(hdr etag)
    lm=$(hdr last-modified)
    body_ok=$(cmp -s "$WORK/b" <(slice "$SHARD_FILE" 10 10) && echo same)
    check "cdn-etag $mode: 206 with the right bytes" eq "$STATUS $(hdr content-range) $body_ok" \
      "206 bytes 10-19/$SHARD_SIZE same"
    case "$mode" in
      nginx)
        check "cdn-etag nginx: a strong ETag of its own" \
          fcmp "'$etag'.startswith('\"') and '$SHARD_SHA' not in '$etag' and len('$etag') > 2"
        req -r 10-19 -H "If-Range: $etag" "$loc"
        check "cdn-etag nginx: If-Range with its ETag: 206" eq "$STATUS" 206
        check "cdn-etag nginx: the If-Range is logged" \
          eq "$(tail -n 1 "$dir/cdn/access.log" | grep -o 'ifr="[^"]*"')" \
          "ifr=\"$(echo "$etag" | sed 's/"/\\x22/g')\""
        req -r 10-19 -H 'If-Range: "another"' "$loc"
        check "cdn-etag nginx: If-Range with another ETag: the whole file (200)" \
          eq "$STATUS $(stat -c %s "$WORK/b")" "200 $SHARD_SIZE"
        real=$(readlink -f "$SHARD_FILE")
        mtime=$(stat -c %Y "$real")
        touch -d "@$((mtime + 1000))" "$real"
        req -r 10-19 "$loc"
        check "cdn-etag nginx: a new mtime is a new ETag" test "$(hdr etag)" != "$etag"
        touch -d "@$mtime" "$real"
        ;;
      weak)
        check "cdn-etag weak: a weak ETag" fcmp "'$etag'.startswith('W/\"')"
        check "cdn-etag weak: Last-Modified kept" test -n "$lm"
        ;;
      last-modified)
        check "cdn-etag last-modified: no ETag, a Last-Modified" eq "[$etag] $(test -n "$lm" && echo lm)" "[] lm"
        req -r 10-19 -H "If-Range: $lm" "$loc"
        check "cdn-etag last-modified: If-Range with the date: 206" eq "$STATUS" 206
        req -r 10-19 -H "If-Range: Thu, 01 Jan 2004 00:00:00 GMT" "$loc"
        check "cdn-etag last-modified: If-Range with another date: 200" eq "$STATUS" 200
        ;;
      none)
        check "cdn-etag none: neither ETag nor Last-Modified" eq "[$etag] [$lm]" "[] []"
        ;;
    esac
    timeout 60 python3 "$FIXTURE" stop "$dir" >/dev/null 2>&1
  done
}

# ---------------------------------------------------------------------------------
# fault_server.py
# ---------------------------------------------------------------------------------

start_fault_server() {
  python3 "$FAULT" "$SHARD_FILE" --small "$WORK/tiny/config.json" --stall-max 10 \
    --plan '["status:503:3", "ok"]' --ready-file "$WORK/fault.json" \
    >"$WORK/fault.out" 2>"$WORK/fault.err" &
  FAULT_PID=$!
  local _
  for _ in $(seq 100); do       # 10 s deadline
    [ -s "$WORK/fault.json" ] && break
    kill -0 "$FAULT_PID" 2>/dev/null || die "fault_server exited: $(cat "$WORK/fault.err")"
    sleep 0.1
  done
  [ -s "$WORK/fault.json" ] || die "fault_server did not start"
  FURL=$(jget "$WORK/fault.json" 'd["url"]')
  FEP=$(jget "$WORK/fault.json" 'd["endpoint"]')
  FCTL="${FURL%/file}"
  check "fault: stdout line = ready file" cmp -s "$WORK/fault.out" "$WORK/fault.json"
  echo "# fault server: data $FURL, hub $FEP"
}

plan() {  # plan JSON: replace the data plan
  "${CURL[@]}" -o /dev/null -f -X POST --data "$1" "$FCTL/_plan" || die "POST /_plan $1 failed"
}

test_fault_modes() {
  local t0 t
  req -r 100-1099 "$FURL"
  check "fault status:503:3: 503 + Retry-After" eq "$STATUS $(hdr retry-after)" "503 3"
  req -r 100-1099 "$FURL"
  check "fault ok: 206 + Content-Range" eq "$STATUS $(hdr content-range)" "206 bytes 100-1099/$SHARD_SIZE"
  check "fault ok: bytes" cmp -s "$WORK/b" <(slice "$SHARD_FILE" 100 1000)
  check "fault ok: ETag sha256 + Accept-Ranges" eq "$(hdr etag) $(hdr accept-ranges)" "\"$SHARD_SHA\" bytes"
  req -r "$SHARD_SIZE-" "$FURL"
  check "fault past EOF: 416 bytes */size" eq "$STATUS $(hdr content-range)" "416 bytes */$SHARD_SIZE"
  req "$FURL"
  check "fault no range: 200 full" eq "$STATUS $(sha "$WORK/b")" "200 $SHARD_SHA"

  plan '["stall"]'
  t0=$(now); req --max-time 1 -r 0-9999 "$FURL"; t=$(elapsed "$t0")
  check "fault stall: headers then timeout (curl 28)" eq "$RC $STATUS" "28 206"
  check "fault stall: client deadline honoured" fcmp "$t < 3"
  plan '["stall:none"]'
  req --max-time 1 -r 0-9999 "$FURL"
  check "fault stall:none: no answer (curl 28, 000)" eq "$RC $STATUS" "28 000"
  plan '["close"]'
  req -r 0-9999 "$FURL"
  check "fault close: empty reply (curl 52)" eq "$RC" 52
  plan '["cut"]'
  req -r 0-39999 "$FURL"
  check "fault cut: transfer fails" test "$RC" -ne 0
  check "fault cut: at most half the body" test "$(stat -c %s "$WORK/b")" -le 20000
  plan '["short"]'
  req -r 0-39999 "$FURL"
  check "fault short: partial file (curl 18), 1 byte short" eq "$RC $(stat -c %s "$WORK/b")" "18 39999"
  plan '["wrong_range"]'
  req -r 1000-1999 "$FURL"
  check "fault wrong_range: 206 for another offset" eq "$STATUS $(hdr content-range)" \
    "206 bytes 1001-2000/$SHARD_SIZE"
  plan '["ignore_range"]'
  req -r 1000-1999 "$FURL"
  check "fault ignore_range: 200 full body" eq "$STATUS $(stat -c %s "$WORK/b")" "200 $SHARD_SIZE"
  plan '["slow:20000"]'
  t0=$(now); req -r 0-39999 "$FURL"; t=$(elapsed "$t0")
  check "fault slow:20000: 40000 bytes take >= 1.5 s" fcmp "$t >= 1.5"
  check "fault slow: bytes intact" cmp -s "$WORK/b" <(slice "$SHARD_FILE" 0 40000)

  plan '["ok", "change"]'
  req -r 0-999 "$FURL"
  check "fault change: before, original ETag" eq "$(hdr etag)" "\"$SHARD_SHA\""
  req -r 0-999 "$FURL"
  local etag2; etag2=$(hdr etag)
  check "fault change: different ETag" test "$etag2" != "\"$SHARD_SHA\""
  check "fault change: different bytes" bash -c '! cmp -s "$1" <(tail -c +1 "$2" | head -c 1000)' _ \
    "$WORK/b" "$SHARD_FILE"
  req -r 0-999 "$FURL"
  check "fault change: sticky" eq "$(hdr etag)" "$etag2"
  req "$FURL"
  check "fault change: ETag = sha256 of the changed body" eq "\"$(sha "$WORK/b")\"" "$etag2"

  "${CURL[@]}" -o "$WORK/stats.json" "$FCTL/_stats"
  check "fault stats: requests counted" eq "$(jget "$WORK/stats.json" 'd["requests"]')" 16
  check "fault stats: modes counted" eq \
    "$(jget "$WORK/stats.json" '(d["modes"]["ok"], d["modes"]["cut"], d["modes"]["change"])')" "(6, 1, 1)"
  check "fault stats: ranges served" eq "$(jget "$WORK/stats.json" 'd["ranges"][0]')" "[100, 1099]"
  "${CURL[@]}" -o /dev/null -X POST "$FCTL/_reset"
  req -r 0-999 "$FURL"
  check "fault reset: original content again" eq "$(hdr etag)" "\"$SHARD_SHA\""
  local half=$((SHARD_SIZE / 2))
  plan '["truncate"]'
  req -r 0-999 "$FURL"
  check "fault truncate: totals of the first half" eq "$STATUS $(hdr content-range)" \
    "206 bytes 0-999/$half"
  check "fault truncate: bytes intact" cmp -s "$WORK/b" <(slice "$SHARD_FILE" 0 1000)
  check "fault truncate: ETag = sha256 of the first half" eq "$(hdr etag)" \
    "\"$(head -c "$half" "$SHARD_FILE" | sha256sum | cut -d' ' -f1)\""
  req -r "$half-" "$FURL"
  check "fault truncate: sticky, 416 past the new end" eq "$STATUS $(hdr content-range)" \
    "416 bytes */$half"
  "${CURL[@]}" -o /dev/null -X POST "$FCTL/_reset"
  req -X POST --data '["bogus"]' "$FCTL/_plan"
  check "fault: bad plan refused (400)" eq "$STATUS" 400
}

test_fault_hub() {
  local fcommit; fcommit=$(jget "$WORK/fault.json" 'd["commit"]')
  req -I "$FEP/fault/model/resolve/main/$SHARD"
  check "fault hub resolve: 302 to the data port" eq "$STATUS $(hdr location)" "302 $FURL"
  check "fault hub resolve: Hub headers" eq \
    "$(hdr x-repo-commit) $(hdr x-linked-etag) $(hdr x-linked-size) $(hdr etag)" \
    "$fcommit \"$SHARD_SHA\" $SHARD_SIZE \"$SHARD_SHA\""
  req "$FEP/api/models/fault/model/revision/main?blobs=true"
  check "fault hub api: 200 + sha" eq "$STATUS $(jget "$WORK/b" 'd["sha"]')" "200 $fcommit"
  check "fault hub api: siblings" eq "$(jget "$WORK/b" '[s["rfilename"] for s in d["siblings"]]')" \
    "['config.json', '$SHARD']"
  req -L "$FEP/fault/model/resolve/$fcommit/config.json"
  check "fault hub small file: 200 bytes via resolve-cache" eq "$STATUS $(hdr x-repo-commit)" "200 $fcommit"
  check "fault hub small file: bytes" cmp -s "$WORK/b" "$WORK/tiny/config.json"
  req -L "$FEP/fault/model/resolve/main/$SHARD"
  check "fault hub LFS followed: whole file" eq "$(sha "$WORK/b")" "$SHARD_SHA"
  req -I "$FEP/fault/model/resolve/main/nope"
  check "fault hub unknown file: EntryNotFound" eq "$STATUS $(hdr x-error-code)" "404 EntryNotFound"
  req -I "$FEP/fault/model/resolve/v9/$SHARD"
  check "fault hub unknown revision" eq "$STATUS $(hdr x-error-code)" "404 RevisionNotFound"
  req -I "$FEP/other/model/resolve/main/$SHARD"
  check "fault hub unknown repo" eq "$STATUS $(hdr x-error-code)" "404 RepoNotFound"
  plan '{"hub_plan": ["status:500"]}'
  req -I "$FEP/fault/model/resolve/main/$SHARD"
  check "fault hub plan: status:500" eq "$STATUS" 500
  req -I "$FEP/fault/model/resolve/main/$SHARD"
  check "fault hub plan: then ok" eq "$STATUS" 302
  mkdir -p "$WORK/dl"
  check "fault hub: aria2c -x 8 download runs" aria2 "$WORK/dl" fault "$FEP/fault/model/resolve/main/$SHARD"
  check "fault hub: aria2c sha256" eq "$(sha "$WORK/dl/fault")" "$SHARD_SHA"
}

# ---------------------------------------------------------------------------------

main() {
  local tool
  for tool in /usr/sbin/nginx curl aria2c python3; do
    command -v "$tool" >/dev/null || die "$tool not installed (scripts/install-deps.sh)"
  done
  make_models
  start_fixture_a
  test_api
  test_resolve_lfs
  test_resolve_small
  test_resolve_errors
  test_gated
  test_cdn
  test_keepalive
  test_downloads
  stop_fixture "$WORK/fxa" "$WORK/fxa.json"
  test_expiry_and_refresh
  test_mirror_modes
  start_fault_server
  test_fault_modes
  test_fault_hub
  echo "# $CHECKS checks, $FAILS failed"
  [ "$FAILS" -eq 0 ]
}

main "$@"
