#!/usr/bin/env bash
# Issue #13's figures: a model in an S3 bucket of a real Ceph radosgw on loopback
# (tests/tools/radosgw.sh), every ratio against baselines of the same run.
#   first  time to first byte: `aprfs mount` + the first byte of NAME.apr, against the first
#          byte of the first shard by `rclone cat` and by `aws s3api get-object --range`.
#   read   cold sequential read of NAME.apr through a fresh mount (empty chunk cache, page cache
#          dropped; the chunks go to the cache on disk, as in use), against `rclone copy` (its
#          default multi-thread streams) and `aws s3 cp --recursive` (Debian's awscli) of the
#          same objects to a folder on the same disk. Alternating, RUNS times each; medians.
#   nodes  N mounts with separate caches (N nodes) and 2 mounts sharing one cache (one node) read
#          the whole file at once; radosgw's own counter of bytes sent (perf dump rgw.get_b) says
#          how many copies the store served.
#
# Usage: sudo bench/s3.sh   (installs the baselines first when missing: scripts/install-deps.sh --bench)
# Env: APRFS=build/fs/aprfs  WORK=/var/tmp/aprfs-bench13  MODEL=bench-1g  RUNS=3  NODES=4
#      SECTIONS="first read nodes"  RESULTS=$WORK/results-<date>.txt  PORT=7680
#      MOUNT_ARGS="--max-connections 16" (more options of every mount)
#      BASELINE=/path/to/another/aprfs (read: that build too, in the same rounds: an A/B)
#      TOOLS="rclone aws" (read: the baselines to run)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
APRFS=$(realpath -m "${APRFS:-$ROOT/build/fs/aprfs}")
WORK=${WORK:-/var/tmp/aprfs-bench13}
MODEL=${MODEL:-bench-1g}
RUNS=${RUNS:-3}
NODES=${NODES:-4}
PORT=${PORT:-7680}
SECTIONS=${SECTIONS:-first read nodes}
RESULTS=${RESULTS:-$WORK/results-$(date +%Y%m%d-%H%M%S).txt}
BASELINE=${BASELINE:+$(realpath -m "$BASELINE")}
TOOLS=${TOOLS:-rclone aws}
RGW=$WORK/rgw
BUCKET=bench
ENDPOINT=http://127.0.0.1:$PORT
# The machine's CA bundle settings do not apply to a loopback http endpoint (and rclone fails
# on an AWS_CA_BUNDLE it cannot load into its transport).
unset AWS_CA_BUNDLE
AWS=/usr/bin/aws  # Debian's awscli, not one a Python environment puts first in PATH
export AWS_ACCESS_KEY_ID=TESTACCESSKEY AWS_SECRET_ACCESS_KEY=TESTSECRETKEY123 AWS_REGION=us-east-1
export RCLONE_CONFIG_RGW_TYPE=s3 RCLONE_CONFIG_RGW_PROVIDER=Ceph RCLONE_CONFIG_RGW_ENDPOINT=$ENDPOINT
export RCLONE_CONFIG_RGW_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID
export RCLONE_CONFIG_RGW_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY

source "$(dirname "$0")/lib.sh"
mounts=()
mount_at() {  # MOUNTPOINT CACHE_DIR [APRFS]
  mkdir -p "$1"
  "${3:-$APRFS}" mount "$1" --no-hf-cache --source "s3://$BUCKET/models" --s3-endpoint "$ENDPOINT" \
    --cache-dir "$2" --log-file "$WORK/aprfs.log" ${MOUNT_ARGS:-} || die "mount failed; see $WORK/aprfs.log"
  mounts+=("$1")
}
unmount_all() {
  for mp in "${mounts[@]}"; do "$APRFS" umount "$mp" >/dev/null 2>&1 || umount -l "$mp" 2>/dev/null || true; done
  mounts=()
}
cleanup() { unmount_all; "$ROOT/tests/tools/radosgw.sh" stop "$RGW" >/dev/null 2>&1 || true; }
trap cleanup EXIT
# CPU seconds the daemon serving MOUNTPOINT has used (user + system).
daemon_cpu_s() {
  local pid
  pid=$(pgrep -n -f "aprfs mount $1 ") || { echo 0; return; }
  awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$pid/stat"
}
bytes_sent() {  # radosgw's count of object bytes it sent
  ceph --admin-daemon "$RGW/run/client.rgw.gw.asok" perf dump |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["rgw"]["get_b"])'
}

[ "$(id -u)" = 0 ] || die "run as root (drops the page cache, mounts)"
[ -x "$APRFS" ] || die "no aprfs binary at $APRFS (build first)"
if ! command -v rclone >/dev/null || ! [ -x "$AWS" ] || ! command -v bc >/dev/null; then
  "$ROOT/scripts/install-deps.sh" --bench >&2 || die "cannot install the baselines (rclone, awscli)"
fi
for tool in rclone "$AWS" ceph radosgw bc; do
  command -v "$tool" >/dev/null || die "$tool missing: scripts/install-deps.sh --all --bench"
done
mkdir -p "$WORK"
echo "# bench/s3.sh $(date -Is) $(git -C "$ROOT" rev-parse --short HEAD) load $(cut -d' ' -f1-3 /proc/loadavg) MOUNT_ARGS=${MOUNT_ARGS:-}" | tee -a "$RESULTS"
if [ ! -e "$WORK/models/m/config.json" ]; then
  python3 "$ROOT/tests/tools/make_model.py" --preset "$MODEL" "$WORK/models/m" >/dev/null
fi
model_bytes=$(cat "$WORK"/models/m/* | wc -c)
record model_bytes "$model_bytes"
RGW_MEMSTORE_BYTES=$((model_bytes * 2 + (1 << 30))) "$ROOT/tests/tools/radosgw.sh" start "$RGW" "$PORT" >/dev/null
"$AWS" --endpoint-url "$ENDPOINT" s3 mb "s3://$BUCKET" >/dev/null
"$AWS" --endpoint-url "$ENDPOINT" s3 cp --recursive --only-show-errors "$WORK/models/m" "s3://$BUCKET/models/m"
first_shard=$(cd "$WORK/models/m" && ls ./*.safetensors | head -1 | cut -c3-)

if has_section first; then
  mount_t=() rclone_t=() aws_t=()
  for run in $(seq "$RUNS"); do
    rm -rf "$WORK/cache"
    t0=$(now)
    mount_at "$WORK/mnt" "$WORK/cache"
    head -c 1 "$WORK/mnt/m.apr" >/dev/null
    mount_t+=("$(calc "$(now) - $t0")")
    unmount_all
    t0=$(now)
    rclone cat --count 1 "rgw:$BUCKET/models/m/$first_shard" >/dev/null
    rclone_t+=("$(calc "$(now) - $t0")")
    t0=$(now)
    "$AWS" --endpoint-url "$ENDPOINT" s3api get-object --bucket "$BUCKET" \
      --key "models/m/$first_shard" --range bytes=0-0 /dev/null >/dev/null
    aws_t+=("$(calc "$(now) - $t0")")
  done
  record first_byte_mount_s "$(median "${mount_t[@]}")"
  record first_byte_rclone_s "$(median "${rclone_t[@]}")"
  record first_byte_aws_s "$(median "${aws_t[@]}")"
fi

if has_section read; then
  mount_t=() mount_cpu=() baseline_t=() baseline_cpu=() rclone_t=() aws_t=()
  # Each tool starts from the same slate: what the previous one wrote (a GB) removed, and the
  # disk idle again (the removal's own work would otherwise land on the next tool's time).
  clean_slate() { rm -rf "$WORK/cache" "$WORK/out"; drop_caches; sleep 1; }
  read_through_mount() {  # TIMES CPU_TIMES [APRFS]: arrays to append to
    clean_slate
    mount_at "$WORK/mnt" "$WORK/cache" "${3:-}"
    drop_caches
    local t0
    t0=$(now)
    cat "$WORK/mnt/m.apr" >/dev/null
    eval "$1+=(\"$(calc "$(now) - $t0")\")"
    eval "$2+=(\"$(daemon_cpu_s "$WORK/mnt")\")"
    apr_bytes=$(stat -c %s "$WORK/mnt/m.apr")
    unmount_all
  }
  for run in $(seq "$RUNS"); do
    read_through_mount mount_t mount_cpu
    if [ -n "$BASELINE" ]; then read_through_mount baseline_t baseline_cpu "$BASELINE"; fi
    if [[ " $TOOLS " == *" rclone "* ]]; then
      clean_slate
      t0=$(now)
      rclone copy "rgw:$BUCKET/models/m" "$WORK/out/rclone"
      rclone_t+=("$(calc "$(now) - $t0")")
      cmp -s "$WORK/out/rclone/$first_shard" "$WORK/models/m/$first_shard" || die "rclone copied other bytes"
    fi
    if [[ " $TOOLS " == *" aws "* ]]; then
      clean_slate
      t0=$(now)
      "$AWS" --endpoint-url "$ENDPOINT" s3 cp --recursive --only-show-errors \
        "s3://$BUCKET/models/m" "$WORK/out/aws"
      aws_t+=("$(calc "$(now) - $t0")")
    fi
  done
  clean_slate
  record read_mount_runs_s "${mount_t[*]}"
  record read_mount_daemon_cpu_s "${mount_cpu[*]}"
  m=$(median "${mount_t[@]}")
  record apr_bytes "$apr_bytes"
  record read_mount_s "$m"
  record read_mount_mb_s "$(calc "$apr_bytes / $m / 1000000")"
  if [ -n "$BASELINE" ]; then
    b=$(median "${baseline_t[@]}")
    record read_baseline_runs_s "${baseline_t[*]}"
    record read_baseline_daemon_cpu_s "${baseline_cpu[*]}"
    record read_baseline_s "$b"
    record speed_vs_baseline "$(calc "$b / $m")"
  fi
  # Above 1: the mount is faster (bytes per second, each over the bytes it moved).
  report_tool() {  # NAME RUN_TIMES...
    local name=$1 t
    shift
    [ $# -gt 0 ] || return 0
    t=$(median "$@")
    record "read_${name}_runs_s" "$*"
    record "read_${name}_s" "$t"
    record "read_${name}_mb_s" "$(calc "$model_bytes / $t / 1000000")"
    record "speed_vs_$name" "$(calc "($apr_bytes / $m) / ($model_bytes / $t)")"
  }
  report_tool rclone "${rclone_t[@]}"
  report_tool aws "${aws_t[@]}"
fi

if has_section nodes; then
  rm -rf "$WORK"/node-*
  before=$(bytes_sent)
  for n in $(seq "$NODES"); do mount_at "$WORK/node-$n/mnt" "$WORK/node-$n/cache"; done
  drop_caches
  for n in $(seq "$NODES"); do cat "$WORK/node-$n/mnt/m.apr" >/dev/null & done
  wait
  unmount_all
  record nodes "$NODES"
  record nodes_copies_served "$(calc "($(bytes_sent) - $before) / $model_bytes")"
  rm -rf "$WORK"/node-*
  before=$(bytes_sent)
  for n in 1 2; do mount_at "$WORK/node-shared/mnt-$n" "$WORK/node-shared/cache"; done
  drop_caches
  for n in 1 2; do cat "$WORK/node-shared/mnt-$n/m.apr" >/dev/null & done
  wait
  unmount_all
  record shared_cache_mounts 2
  record shared_cache_copies_served "$(calc "($(bytes_sent) - $before) / $model_bytes")"
  rm -rf "$WORK"/node-shared
fi
