#!/usr/bin/env bash
# Remote read benchmark (issue #3): a 1.08 GB, 4-shard model served by the fake Hub (two real
# nginx on loopback: hub + CDN with a per-connection rate limit, like a CDN's per-stream
# throughput), downloaded several ways in one run:
#   1. curl, one stream per shard (what a plain downloader gets)
#   2. aria2c -x 8 -s 8 (the classic parallel downloader)
#   3. a cold sequential read of bench-1g.apr through an aprfs mount (8 connections)
#   4. `aprfs prefetch` of the model into empty caches (fetch, verify, publish)
# plus the time from `aprfs mount` to the first byte of the .apr. Nothing here drops the page
# cache (the shards are sparse files: nginx serves their holes without reading a disk).
# Usage: bench/remote.sh
#   env: APRFS=binary WORK=/var/tmp/aprfs-bench-remote RATE=bytes/s CONNECTIONS=8
#        APRFS_B=binary  a second aprfs measured in the same run (A/B: each round runs aria2c,
#                        then A and B in alternating order, so both see the same machine)
#        RUNS=1          rounds of steps 2 and 3 (medians are reported)
#        CURL=1          0 skips step 1 (one minute)
#        SNDBUF=0        the CDN's socket send buffer; 65536 makes the rate limit one per
#                        connection (by default nginx lets each request's first MBs through at
#                        full speed, which favours many small requests over a few large ones)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
APRFS=${APRFS:-$ROOT/build/fs/aprfs}
APRFS_B=${APRFS_B:-}
WORK=${WORK:-/var/tmp/aprfs-bench-remote}
RATE=${RATE:-20000000}
CONNECTIONS=${CONNECTIONS:-8}
RUNS=${RUNS:-1}
CURL=${CURL:-1}
SNDBUF=${SNDBUF:-0}
TOOLS=$ROOT/tests/tools
MODEL=$WORK/models/bench-1g
MP=$WORK/mnt
REPO=bench/bench-1g
PID=""

source "$ROOT/bench/lib.sh"
cleanup() {
  if mountpoint -q "$MP"; then "$APRFS" umount "$MP" || umount -l "$MP"; fi
  if [ -n "$PID" ]; then wait "$PID" 2>/dev/null || true; fi
  python3 "$TOOLS/hub_fixture.py" stop "$WORK/hub" >/dev/null 2>&1 || true
}
trap cleanup EXIT

mkdir -p "$WORK" "$MP"
if [ ! -f "$MODEL/model.safetensors.index.json" ]; then
  python3 "$TOOLS/make_model.py" "$MODEL" --preset bench-1g --sparse >/dev/null
fi
python3 "$TOOLS/hub_fixture.py" stop "$WORK/hub" >/dev/null 2>&1 || true
rm -rf "$WORK/hub"
python3 "$TOOLS/hub_fixture.py" start "$WORK/hub" --repo "$REPO=$MODEL" --rate-limit "$RATE" \
  --cdn-sndbuf "$SNDBUF" --hash-cache "$WORK/hashes.json" >"$WORK/fixture.json"
EP=$(python3 -c "import json; print(json.load(open('$WORK/fixture.json'))['endpoint'])")
SHARDS=$(cd "$MODEL" && ls model-*.safetensors)
BYTES=$(cd "$MODEL" && stat -c %s $SHARDS | paste -sd+ | bc)

# 1. curl, one stream per shard.
CURL_S=""
if [ "$CURL" != 0 ]; then
  t0=$(now)
  for s in $SHARDS; do curl -sfL -o /dev/null "$EP/$REPO/resolve/main/$s"; done
  t1=$(now)
  CURL_S=$(elapsed "$t0" "$t1")
fi

# 2. aria2c, 8 connections per shard.
aria() {
  rm -rf "$WORK/aria"
  local t0 t1
  t0=$(now)
  for s in $SHARDS; do
    aria2c -q -x 8 -s 8 -k 1M --file-allocation=none --allow-overwrite=true -d "$WORK/aria" \
      "$EP/$REPO/resolve/main/$s"
  done
  t1=$(now)
  rm -rf "$WORK/aria"
  elapsed "$t0" "$t1"
}

# 3. aprfs BINARY, cold: empty chunk cache and HF cache. Prints "first-byte-s read-s apr-bytes".
cold_read() {
  local bin=$1 t0 t1 first bytes
  rm -rf "$WORK/cache" "$WORK/hf"
  mkdir -p "$WORK/hf"
  t0=$(now)
  HF_ENDPOINT=$EP "$bin" mount "$MP" -f --repo "$REPO" --cache-dir "$WORK/cache" \
    --hf-cache "$WORK/hf" --max-connections "$CONNECTIONS" --log-file "$WORK/aprfs.log" &
  PID=$!
  for _ in $(seq 1 2000); do mountpoint -q "$MP" && break; sleep 0.005; done
  head -c 1 "$MP/bench-1g.apr" >/dev/null
  t1=$(now)
  first=$(elapsed "$t0" "$t1")
  bytes=$(stat -c %s "$MP/bench-1g.apr")
  t0=$(now)
  dd if="$MP/bench-1g.apr" of=/dev/null bs=1M status=none
  t1=$(now)
  "$bin" umount "$MP"
  wait "$PID" 2>/dev/null || true
  PID=""
  echo "$first $(elapsed "$t0" "$t1") $bytes"
}

# 4. aprfs prefetch, cold: the whole model into fresh caches, verified and published.
prefetch() {
  local bin=$1 t0 t1
  rm -rf "$WORK/cache" "$WORK/hf"
  mkdir -p "$WORK/hf"
  t0=$(now)
  HF_ENDPOINT=$EP "$bin" prefetch "$REPO" --cache-dir "$WORK/cache" --hf-cache "$WORK/hf" \
    --max-connections "$CONNECTIONS" >/dev/null 2>"$WORK/prefetch.log"
  t1=$(now)
  elapsed "$t0" "$t1"
}

SIDES=(A)
declare -A BIN=([A]=$APRFS)
if [ -n "$APRFS_B" ]; then SIDES=(A B); BIN[B]=$APRFS_B; fi
ARIA=()
declare -A FIRST READ
for run in $(seq 1 "$RUNS"); do
  ARIA+=("$(aria)")
  order=("${SIDES[@]}")
  if [ $((run % 2)) = 0 ]; then order=($(printf '%s\n' "${SIDES[@]}" | tac)); fi
  for side in "${order[@]}"; do
    read -r f r APR_BYTES < <(cold_read "${BIN[$side]}")
    FIRST[$side]="${FIRST[$side]:-} $f"
    READ[$side]="${READ[$side]:-} $r"
    echo "# round $run: aria2c ${ARIA[-1]} s, aprfs $side ${BIN[$side]}: first byte $f s, read $r s" >&2
  done
done
ARIA_S=$(median "${ARIA[@]}")
ARIA_MBS=$(mbs "$BYTES" "$ARIA_S")

buffer="the kernel's"
[ "$SNDBUF" = 0 ] || buffer="$SNDBUF bytes"
echo "remote benchmark: $BYTES shard bytes, CDN limit $RATE bytes/s per connection (send" \
  "buffer: $buffer), aprfs $CONNECTIONS connections, $RUNS round(s), medians"
echo "| measure | value |"
echo "|---|---|"
if [ -n "$CURL_S" ]; then
  echo "| curl, one stream per shard | ${CURL_S} s, $(mbs "$BYTES" "$CURL_S") MB/s |"
fi
echo "| aria2c -x 8 -s 8 | ${ARIA_S} s, ${ARIA_MBS} MB/s (rounds: ${ARIA[*]}) |"
for side in "${SIDES[@]}"; do
  # shellcheck disable=SC2086
  first=$(median ${FIRST[$side]})
  # shellcheck disable=SC2086
  read_s=$(median ${READ[$side]})
  aprfs_mbs=$(mbs "$APR_BYTES" "$read_s")
  echo "| aprfs $side (${BIN[$side]}): mount to first byte of the .apr | ${first} s |"
  echo "| aprfs $side: cold sequential read of the .apr (dd bs=1M) | ${read_s} s, ${aprfs_mbs} MB/s (rounds:${READ[$side]}) |"
  echo "| ratio aprfs $side / aria2c | $(echo "scale=2; $aprfs_mbs / $ARIA_MBS" | bc) |"
  if [ -n "$CURL_S" ]; then
    echo "| ratio aprfs $side / curl | $(echo "scale=2; $aprfs_mbs / $(mbs "$BYTES" "$CURL_S")" | bc) |"
  fi
done
for side in "${SIDES[@]}"; do
  p=$(prefetch "${BIN[$side]}")
  echo "| aprfs $side prefetch, cold (fetch + sha256 + publish) | ${p} s, $(mbs "$BYTES" "$p") MB/s |"
  echo "| ratio prefetch $side / aria2c | $(echo "scale=2; $(mbs "$BYTES" "$p") / $ARIA_MBS" | bc) |"
done
