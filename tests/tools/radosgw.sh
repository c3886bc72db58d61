#!/usr/bin/env bash
# A throwaway one-node Ceph cluster with an S3 gateway on loopback, for the S3 tests: one monitor,
# one memstore OSD (data in RAM), cephx off, radosgw (beast) on 127.0.0.1:PORT, and over TLS on
# 127.0.0.1:PORT+41 with a certificate of a throwaway CA (DIR/tls/ca.pem).
# Needs: apt-get install --no-install-recommends ceph-mon ceph-osd radosgw (and curl, openssl).
#
# Usage: radosgw.sh start DIR [PORT]   PORT defaults to 7480. Ports used: PORT (S3), PORT+1 and
#                                      PORT+2 (monitor v2, v1), PORT+3..PORT+40 (OSD), PORT+41
#                                      (S3 over TLS). Creates the users tester (TESTACCESSKEY /
#                                      TESTSECRETKEY123) and other (OTHERACCESSKEY /
#                                      OTHERSECRETKEY456); prints "endpoint http://127.0.0.1:PORT"
#                                      and "tls_endpoint https://127.0.0.1:PORT+41 DIR/tls/ca.pem"
#                                      once the gateway answers.
#        radosgw.sh stop DIR           stops radosgw, the OSD, the monitor (in that order);
#                                      idempotent.
#        radosgw.sh stop-gateway DIR   stops radosgw only (monitor, OSD and data stay)
#        radosgw.sh start-gateway DIR  starts it again; returns once it answers
#        radosgw.sh pause-gateway DIR  freezes radosgw (SIGSTOP): connections are accepted by the
#                                      kernel, requests never answered (a hung store)
#        radosgw.sh resume-gateway DIR lets it go on (SIGCONT)
#
# Everything (ceph.conf, logs, pid files, admin sockets, monitor store) lives under DIR, which
# `start` creates (it must not hold a running cluster). Environment: RGW_MEMSTORE_BYTES (the
# OSD's RAM store, default 1 GiB), RGW_START_TIMEOUT (seconds, default 120), RGW_OWNER_PID (when
# set, a detached watcher stops the cluster within a second or two of that process dying).
# Daemons run under `nice -n 10`. On failure: a message and the relevant log's tail on stderr,
# exit status 1, and whatever was started is stopped again.
set -euo pipefail

usage() {
  sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

[ $# -ge 2 ] || usage
COMMAND=$1
# One spelling of DIR (absolute, no trailing slash): daemons are found by their ceph.conf path.
DIR=$(realpath -m -- "$2")
CONF="$DIR/ceph.conf"
RUN="$DIR/run"
LOG="$DIR/log"
RGW_NAME=client.rgw.gw
NICE=(nice -n 10)
START_TIMEOUT=${RGW_START_TIMEOUT:-120}
STOP_GRACE=10 # seconds between SIGTERM and SIGKILL

log_tail() { # log_tail NAME: the last lines of DIR/log/NAME.log, on stderr
  local file="$LOG/$1.log"
  if [ -s "$file" ]; then
    echo "--- tail of $file ---" >&2
    tail -n 30 "$file" >&2
  fi
}

# The pids of daemon $1 (ceph-mon, ceph-osd, radosgw) started with this DIR's ceph.conf. Matched
# on the command line, so a stale pid file or a reused pid can never make us kill a stranger.
daemon_pids() {
  local name=$1 proc
  local -a argv
  for proc in /proc/[0-9]*; do
    mapfile -d '' -t argv 2>/dev/null <"$proc/cmdline" || continue
    [ ${#argv[@]} -ge 3 ] || continue
    if [ "${argv[0]##*/}" = "$name" ] && [ "${argv[1]}" = -c ] && [ "${argv[2]}" = "$CONF" ]; then
      echo "${proc#/proc/}"
    fi
  done
}

# /proc/PID/stat's fields after "(comm)": state, ppid, ... (field 3 onwards); fails when gone.
proc_stat() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  echo "${stat##*) }"
}

# True while pid $1 exists and is not a zombie (init may be slow to reap, or not reap at all).
alive() {
  local stat
  stat=$(proc_stat "$1") || return 1
  [ "${stat:0:1}" != Z ] && [ "${stat:0:1}" != X ]
}

# The start time of pid $1 (field 22), to tell it from a later process with the same pid.
start_time() {
  local -a fields
  read -r -a fields <<<"$(proc_stat "$1")" || return 1
  echo "${fields[19]:-}"
}

# stop_daemon NAME CEPH_NAME: SIGTERM, up to STOP_GRACE s to exit, then SIGKILL and up to 5 s
# more; then its pid file and admin socket are removed (a fast shutdown leaves them).
stop_daemon() {
  local name=$1 ceph_name=$2 pid deadline
  local -a pids
  mapfile -t pids < <(daemon_pids "$name")
  if [ ${#pids[@]} -eq 0 ]; then
    rm -f "$RUN/$ceph_name.pid" "$RUN/$ceph_name.asok"
    return 0
  fi
  kill -TERM "${pids[@]}" 2>/dev/null || true
  kill -CONT "${pids[@]}" 2>/dev/null || true  # a paused one handles the SIGTERM once resumed
  deadline=$((SECONDS + STOP_GRACE))
  for pid in "${pids[@]}"; do
    while alive "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
  done
  for pid in "${pids[@]}"; do
    if alive "$pid"; then
      echo "radosgw.sh: $name (pid $pid) ignored SIGTERM for ${STOP_GRACE} s: SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  deadline=$((SECONDS + 5))
  for pid in "${pids[@]}"; do
    while alive "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
    if alive "$pid"; then
      echo "radosgw.sh: $name (pid $pid) still alive after SIGKILL" >&2
      return 1
    fi
  done
  rm -f "$RUN/$ceph_name.pid" "$RUN/$ceph_name.asok"
}

stop_watcher() {
  local pid
  pid=$(cat "$RUN/watcher.pid" 2>/dev/null) || return 0
  # Never the watcher itself (it execs `stop` when its owner dies), never a reused pid.
  if [ "$pid" != $$ ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null |
    grep -qF "radosgw.sh watch $DIR "; then
    kill -TERM "$pid" 2>/dev/null || true
  fi
  rm -f "$RUN/watcher.pid"
}

stop_all() {
  local status=0
  stop_watcher
  stop_daemon radosgw "$RGW_NAME" || status=1
  stop_daemon ceph-osd osd.0 || status=1
  stop_daemon ceph-mon mon.a || status=1
  return $status
}

die() { # die MESSAGE: the message, nothing stopped
  echo "radosgw.sh: $1" >&2
  exit 1
}

fail() { # fail MESSAGE [LOG NAME...]: the message, those logs' tails, what we started stopped
  local message=$1 name
  shift
  echo "radosgw.sh: $message" >&2
  for name in "$@"; do log_tail "$name"; done
  if [ "$COMMAND" = start ]; then stop_all || true; else stop_daemon radosgw "$RGW_NAME" || true; fi
  exit 1
}

remaining() { # seconds left before DEADLINE, at least 1 (`timeout 0` would mean no timeout)
  local left=$((DEADLINE - SECONDS))
  echo $((left > 0 ? left : 1))
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

gateway_port() { sed -n 's/^rgw frontends = beast endpoint=127\.0\.0\.1:\([0-9]*\) .*$/\1/p' "$CONF"; }

# Polls until radosgw answers an anonymous GET / (any HTTP status), or fails.
wait_for_gateway() {
  local port code
  port=$(gateway_port)
  while :; do
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$port/") || true
    [ "$code" != 000 ] && [ -n "$code" ] && return 0
    [ -n "$(daemon_pids radosgw)" ] ||
      fail "radosgw exited before answering on port $port" "$RGW_NAME"
    [ $SECONDS -lt "$DEADLINE" ] ||
      fail "radosgw did not answer on port $port within ${START_TIMEOUT} s" "$RGW_NAME" osd.0 mon.a
    sleep 0.1
  done
}

start_gateway() {
  [ -z "$(daemon_pids radosgw)" ] || die "radosgw already runs for $DIR"
  ! port_busy "$(gateway_port)" || die "port $(gateway_port) is in use"
  "${NICE[@]}" radosgw -c "$CONF" -n "$RGW_NAME" >>"$LOG/radosgw.out" 2>&1 ||
    fail "radosgw did not start" "$RGW_NAME"
  wait_for_gateway
}

create_user() { # create_user UID ACCESS SECRET
  timeout "$(remaining)" radosgw-admin -c "$CONF" user create --uid="$1" --display-name="$1" \
    --access-key="$2" --secret-key="$3" >/dev/null 2>"$LOG/radosgw-admin.err" ||
    fail "radosgw-admin user create --uid=$1 failed: $(cat "$LOG/radosgw-admin.err")"
}

# A CA of its own and a certificate it signed for 127.0.0.1 (EC keys: quick to make), in DIR/tls.
make_tls() {
  local tls=$DIR/tls
  rm -rf "$tls"
  mkdir -p "$tls"
  {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 7 \
      -subj "/CN=aprfs test CA" -keyout "$tls/ca.key" -out "$tls/ca.pem" &&
      openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -subj "/CN=127.0.0.1" -keyout "$tls/server.key" -out "$tls/server.csr" &&
      printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n' \
        >"$tls/server.ext" &&
      openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" \
        -CAcreateserial -days 7 -extfile "$tls/server.ext" -out "$tls/server.pem"
  } >"$LOG/openssl.out" 2>&1 || fail "openssl could not make the test certificates: $(cat "$LOG/openssl.out")"
}

write_conf() {
  local port=$1 fsid=$2 bytes=$3
  cat >"$CONF" <<EOF
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$((port + 1)),v1:127.0.0.1:$((port + 2))]
public addr = 127.0.0.1
ms bind port min = $((port + 3))
ms bind port max = $((port + 40))
ms bind retry delay = 1
auth cluster required = none
auth service required = none
auth client required = none
keyring = /dev/null
run dir = $RUN
pid file = $RUN/\$name.pid
log file = $LOG/\$name.log
log to stderr = false
err to stderr = false
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
mon data avail warn = 1
mon data avail crit = 0
# Paxos batches map changes for 1 s by default: every pool radosgw creates would cost a second.
paxos propose interval = 0.05

[mon]
mon data = $DIR/mon.\$id
admin socket = $RUN/\$name.asok

[osd]
osd data = $DIR/osd.\$id
admin socket = $RUN/\$name.asok
osd objectstore = memstore
memstore device bytes = $bytes
osd memory target = 536870912
osd op num shards = 1
osd op num threads per shard = 2

[client]
# radosgw asks for ms_mon_client_mode = secure by default, impossible with auth none: it hangs.
ms mon client mode = crc secure

[$RGW_NAME]
admin socket = $RUN/\$name.asok
rgw frontends = beast endpoint=127.0.0.1:$port ssl_endpoint=127.0.0.1:$((port + 41)) ssl_certificate=$DIR/tls/server.pem ssl_private_key=$DIR/tls/server.key
rgw thread pool size = 16
EOF
}

cmd_start() {
  local port=${1:-7480} bytes=${RGW_MEMSTORE_BYTES:-1073741824} fsid osd_uuid osd_id p
  if ! [[ "$port" =~ ^[0-9]+$ ]] || [ "$port" -lt 1 ] || [ "$port" -gt 65495 ]; then
    die "bad port '$port'"
  fi
  [[ "$bytes" =~ ^[0-9]+$ ]] || die "bad RGW_MEMSTORE_BYTES '$bytes'"
  local tool
  for tool in ceph-mon ceph-osd radosgw radosgw-admin monmaptool ceph uuidgen curl openssl; do
    command -v "$tool" >/dev/null ||
      die "$tool not found (apt-get install --no-install-recommends ceph-mon ceph-osd radosgw curl openssl)"
  done
  if [ -n "$(daemon_pids ceph-mon)$(daemon_pids ceph-osd)$(daemon_pids radosgw)" ]; then
    die "a cluster already runs in $DIR"
  fi
  for p in "$port" $((port + 1)) $((port + 2)) $((port + 41)); do
    ! port_busy "$p" || die "port $p is in use"
  done
  DEADLINE=$((SECONDS + START_TIMEOUT))
  rm -rf "$CONF" "$RUN" "$LOG" "$DIR/mon.a" "$DIR/osd.0" "$DIR/monmap"
  mkdir -p "$RUN" "$LOG" "$DIR/mon.a" "$DIR/osd.0"
  fsid=$(uuidgen)
  make_tls
  write_conf "$port" "$fsid" "$bytes"

  monmaptool --create --fsid "$fsid" \
    --addv a "[v2:127.0.0.1:$((port + 1)),v1:127.0.0.1:$((port + 2))]" "$DIR/monmap" \
    >"$LOG/monmaptool.out" 2>&1 || fail "monmaptool failed: $(cat "$LOG/monmaptool.out")"
  "${NICE[@]}" ceph-mon -c "$CONF" -i a --mkfs --monmap "$DIR/monmap" >>"$LOG/ceph-mon.out" 2>&1 ||
    fail "ceph-mon --mkfs failed: $(cat "$LOG/ceph-mon.out")" mon.a
  "${NICE[@]}" ceph-mon -c "$CONF" -i a >>"$LOG/ceph-mon.out" 2>&1 ||
    fail "ceph-mon did not start: $(cat "$LOG/ceph-mon.out")" mon.a

  if [ -n "${RGW_OWNER_PID:-}" ]; then
    setsid "$0" watch "$DIR" "$RGW_OWNER_PID" </dev/null >/dev/null 2>&1 &
    echo $! >"$RUN/watcher.pid"
  fi

  # Asks the monitor for an OSD id (the first call also waits for the monitor to be up).
  osd_uuid=$(uuidgen)
  osd_id=$(timeout "$(remaining)" ceph -c "$CONF" --connect-timeout "$(remaining)" \
    osd new "$osd_uuid" 2>"$LOG/ceph-cli.err") ||
    fail "ceph osd new failed: $(cat "$LOG/ceph-cli.err")" mon.a
  [ "$osd_id" = 0 ] || fail "the monitor gave OSD id '$osd_id', expected 0"
  "${NICE[@]}" ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$osd_uuid" >>"$LOG/ceph-osd.out" 2>&1 ||
    fail "ceph-osd --mkfs failed: $(tail -n 20 "$LOG/ceph-osd.out")" osd.0
  "${NICE[@]}" ceph-osd -c "$CONF" -i 0 >>"$LOG/ceph-osd.out" 2>&1 ||
    fail "ceph-osd did not start: $(tail -n 20 "$LOG/ceph-osd.out")" osd.0

  start_gateway
  create_user tester TESTACCESSKEY TESTSECRETKEY123
  create_user other OTHERACCESSKEY OTHERSECRETKEY456
  echo "endpoint http://127.0.0.1:$port"
  echo "tls_endpoint https://127.0.0.1:$((port + 41)) $DIR/tls/ca.pem"
}

# The detached watcher: stops the cluster once RGW_OWNER_PID is gone (or is another process).
cmd_watch() {
  local owner=$1 started
  started=$(start_time "$owner") || started=gone
  while [ -e "$CONF" ] && alive "$owner" && [ "$(start_time "$owner")" = "$started" ]; do
    sleep 1
  done
  [ -e "$CONF" ] || exit 0
  echo "radosgw.sh: owner $owner is gone, stopping the cluster in $DIR" >>"$LOG/watcher.log"
  stop_all >>"$LOG/watcher.log" 2>&1
}

case "$COMMAND" in
  start)
    [ $# -le 3 ] || usage
    cmd_start "${3:-}"
    ;;
  stop)
    [ $# -eq 2 ] || usage
    stop_all
    ;;
  stop-gateway)
    [ $# -eq 2 ] || usage
    stop_daemon radosgw "$RGW_NAME"
    ;;
  start-gateway)
    [ $# -eq 2 ] || usage
    [ -f "$CONF" ] || die "no cluster in $DIR (start it first)"
    [ -n "$(daemon_pids ceph-osd)" ] || die "the OSD of $DIR is not running"
    DEADLINE=$((SECONDS + START_TIMEOUT))
    start_gateway
    ;;
  pause-gateway | resume-gateway)
    [ $# -eq 2 ] || usage
    mapfile -t pids < <(daemon_pids radosgw)
    [ ${#pids[@]} -gt 0 ] || die "the radosgw of $DIR is not running"
    if [ "$COMMAND" = pause-gateway ]; then kill -STOP "${pids[@]}"; else kill -CONT "${pids[@]}"; fi
    ;;
  watch)
    [ $# -eq 3 ] || usage
    cmd_watch "$3"
    ;;
  *) usage ;;
esac
