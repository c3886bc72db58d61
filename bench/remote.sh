#!/usr/bin/env bash
# Remote read benchmark (issue #3): a 1.08 GB, 4-shard model served by the fake Hub (two real
# nginx on loopback: hub + CDN with a per-connection rate limit, like a CDN's per-stream
# throughput), downloaded three ways in one run:
#   1. curl, one stream per shard (what a plain downloader gets)
#   2. aria2c -x 8 -s 8 (the classic parallel downloader)
#   3. a cold sequential read of bench-1g.apr through an aprfs mount (8 connections)
#   4. `aprfs prefetch` of the model into empty caches (fetch, verify, publish)
# plus the time from `aprfs mount` to the first byte of the .apr.
# Usage: bench/remote.sh   (env: APRFS=binary WORK=/var/tmp/aprfs-bench-remote RATE=bytes/s)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
APRFS=${APRFS:-$ROOT/build/fs/aprfs}
WORK=${WORK:-/var/tmp/aprfs-bench-remote}
RATE=${RATE:-20000000}
CONNECTIONS=${CONNECTIONS:-8}
TOOLS=$ROOT/tests/tools
MODEL=$WORK/models/bench-1g
MP=$WORK/mnt
REPO=bench/bench-1g
PID=""

now() { date +%s.%N; }
elapsed() { echo "$2 - $1" | bc; }
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
  --hash-cache "$WORK/hashes.json" >"$WORK/fixture.json"
EP=$(python3 -c "import json; print(json.load(open('$WORK/fixture.json'))['endpoint'])")
SHARDS=$(cd "$MODEL" && ls model-*.safetensors)
BYTES=$(cd "$MODEL" && stat -c %s $SHARDS | paste -sd+ | bc)

# 1. curl, one stream per shard.
t0=$(now)
for s in $SHARDS; do curl -sfL -o /dev/null "$EP/$REPO/resolve/main/$s"; done
t1=$(now)
CURL_S=$(elapsed "$t0" "$t1")

# 2. aria2c, 8 connections per shard.
rm -rf "$WORK/aria"
t0=$(now)
for s in $SHARDS; do
  aria2c -q -x 8 -s 8 -k 1M --file-allocation=none --allow-overwrite=true -d "$WORK/aria" \
    "$EP/$REPO/resolve/main/$s"
done
t1=$(now)
ARIA_S=$(elapsed "$t0" "$t1")
rm -rf "$WORK/aria"

# 3. aprfs, cold: empty chunk cache and HF cache.
rm -rf "$WORK/cache" "$WORK/hf"
mkdir -p "$WORK/hf"
t0=$(now)
HF_ENDPOINT=$EP "$APRFS" mount "$MP" -f --repo "$REPO" --cache-dir "$WORK/cache" \
  --hf-cache "$WORK/hf" --max-connections "$CONNECTIONS" --log-file "$WORK/aprfs.log" &
PID=$!
for _ in $(seq 1 2000); do mountpoint -q "$MP" && break; sleep 0.005; done
head -c 1 "$MP/bench-1g.apr" >/dev/null
t1=$(now)
FIRST_S=$(elapsed "$t0" "$t1")
APR_BYTES=$(stat -c %s "$MP/bench-1g.apr")
t0=$(now)
dd if="$MP/bench-1g.apr" of=/dev/null bs=1M status=none
t1=$(now)
APRFS_S=$(elapsed "$t0" "$t1")

# 4. aprfs prefetch, cold: the whole model into fresh caches, verified and published.
"$APRFS" umount "$MP"
wait "$PID" 2>/dev/null || true
PID=""
rm -rf "$WORK/cache" "$WORK/hf"
mkdir -p "$WORK/hf"
t0=$(now)
HF_ENDPOINT=$EP "$APRFS" prefetch "$REPO" --cache-dir "$WORK/cache" --hf-cache "$WORK/hf" \
  --max-connections "$CONNECTIONS" >/dev/null 2>"$WORK/prefetch.log"
t1=$(now)
PREFETCH_S=$(elapsed "$t0" "$t1")

mbs() { echo "scale=1; $1 / $2 / 1000000" | bc; }
CURL_MBS=$(mbs "$BYTES" "$CURL_S")
ARIA_MBS=$(mbs "$BYTES" "$ARIA_S")
APRFS_MBS=$(mbs "$APR_BYTES" "$APRFS_S")
PREFETCH_MBS=$(mbs "$BYTES" "$PREFETCH_S")
cat <<REPORT
remote benchmark: $BYTES shard bytes, CDN limit $RATE bytes/s per connection, aprfs $CONNECTIONS connections
| measure | value |
|---|---|
| curl, one stream per shard | ${CURL_S} s, ${CURL_MBS} MB/s |
| aria2c -x 8 -s 8 | ${ARIA_S} s, ${ARIA_MBS} MB/s |
| aprfs: mount to first byte of the .apr | ${FIRST_S} s |
| aprfs: cold sequential read of the .apr (dd bs=1M) | ${APRFS_S} s, ${APRFS_MBS} MB/s |
| ratio aprfs / aria2c | $(echo "scale=2; $APRFS_MBS / $ARIA_MBS" | bc) |
| ratio aprfs / curl | $(echo "scale=2; $APRFS_MBS / $CURL_MBS" | bc) |
| aprfs prefetch, cold (fetch + sha256 + publish) | ${PREFETCH_S} s, ${PREFETCH_MBS} MB/s |
| ratio prefetch / aria2c | $(echo "scale=2; $PREFETCH_MBS / $ARIA_MBS" | bc) |
REPORT
