#!/usr/bin/env bash
# phi-4-shaped benchmark (issue #2): a generated model with microsoft/phi-4's shape (6 shards,
# 243 BF16 tensors, 29.3 GB as sparse files, so it costs no disk), measured through the mount:
#   - time from `aprfs mount` to the first byte of phi-4.apr, phi-4.gguf and
#     phi-4.Q4_K_M.gguf (median of $RUNS fresh mounts each)
#   - sequential read throughput of phi-4.apr against reading the 6 shards directly, one run,
#     page cache dropped before each (needs root for drop_caches and the readahead knob)
#   - the same with the shard already in the page cache (where the mount's own cost shows)
#   - the daemon's peak RSS (VmHWM) over the whole run
# Usage: bench/phi4.sh            (env: APRFS=binary WORK=/var/tmp/aprfs-bench RUNS=5 BS=1M)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
APRFS=${APRFS:-$ROOT/build/fs/aprfs}
WORK=${WORK:-/var/tmp/aprfs-bench}
RUNS=${RUNS:-5}
BS=${BS:-1M}
MODELS=$WORK/models
MP=$WORK/mnt
LOG=$WORK/aprfs.log
PID=""

source "$ROOT/bench/lib.sh"
stop_daemon() {
  if mountpoint -q "$MP"; then "$APRFS" umount "$MP" || umount -l "$MP"; fi
  if [ -n "$PID" ]; then wait "$PID" 2>/dev/null || true; PID=""; fi
}
start_daemon() {
  "$APRFS" mount "$MP" -f --no-hf-cache --source "$MODELS" --log-file "$LOG" &
  PID=$!
  for _ in $(seq 1 2000); do mountpoint -q "$MP" && return 0; sleep 0.005; done
  echo "mount did not come up; see $LOG" >&2; exit 1
}
trap stop_daemon EXIT

mkdir -p "$MODELS" "$MP"
if [ ! -f "$MODELS/phi-4/tokenizer_config.json" ]; then  # (older runs made no GGUF-able model)
  echo "generating the phi-4-shaped sparse model in $MODELS/phi-4 ..."
  python3 "$ROOT/tests/tools/make_model.py" "$MODELS/phi-4" --preset phi4 --sparse >/dev/null
fi
SHARDS=("$MODELS"/phi-4/model-*.safetensors)
SHARD_BYTES=$(stat -c %s "${SHARDS[@]}" | paste -sd+ | bc)
stop_daemon

# 1. Mount to first byte: a fresh daemon each time, cold page cache; of the .apr, and of the
# GGUF views (planned from the same headers plus config.json and tokenizer.json).
first_byte() {  # FILE -> FIRST (the median over $RUNS fresh mounts) and FIRST_RUNS
  local runs=() t0 t1
  for _ in $(seq 1 "$RUNS"); do
    drop_caches
    t0=$(now)
    start_daemon
    head -c 1 "$MP/$1" >/dev/null
    t1=$(now)
    runs+=("$(elapsed "$t0" "$t1")")
    stop_daemon
  done
  FIRST_RUNS="${runs[*]}"
  FIRST=$(median "${runs[@]}")
}
first_byte phi-4.apr; FIRST_APR=$FIRST; FIRST_APR_RUNS=$FIRST_RUNS
first_byte phi-4.gguf; FIRST_GGUF=$FIRST; FIRST_GGUF_RUNS=$FIRST_RUNS
first_byte phi-4.Q4_K_M.gguf; FIRST_Q4KM=$FIRST; FIRST_Q4KM_RUNS=$FIRST_RUNS

# 2. Sequential throughput, the shards directly then the .apr through the mount, same run.
drop_caches
t0=$(now)
for f in "${SHARDS[@]}"; do dd if="$f" of=/dev/null bs="$BS" status=none; done
t1=$(now)
DIRECT_S=$(elapsed "$t0" "$t1")

start_daemon
APR_BYTES=$(stat -c %s "$MP/phi-4.apr")
drop_caches
t0=$(now)
dd if="$MP/phi-4.apr" of=/dev/null bs="$BS" status=none
t1=$(now)
MOUNT_S=$(elapsed "$t0" "$t1")
RSS_KB=$(awk '/VmHWM/ {print $2}' "/proc/$PID/status")
"$APRFS" inspect "$MP/phi-4.apr" --quick >/dev/null
stop_daemon

# 3. The same with the shard hot in the page cache, where the mount's own cost shows: shard 1
# directly (its pages cached), then the .apr's first HOT_MIB MiB (all from shard 1) through a
# fresh mount, so the .apr pages are cold but the shard's are not.
HOT_MIB=${HOT_MIB:-4600}
drop_caches  # a page cache full of the previous pass would make the .apr's pages cost reclaim
dd if="${SHARDS[0]}" of=/dev/null bs=1M status=none
t0=$(now)
dd if="${SHARDS[0]}" of=/dev/null bs=1M count="$HOT_MIB" status=none
t1=$(now)
HOT_DIRECT_S=$(elapsed "$t0" "$t1")
start_daemon
t0=$(now)
dd if="$MP/phi-4.apr" of=/dev/null bs=1M count="$HOT_MIB" status=none
t1=$(now)
HOT_MOUNT_S=$(elapsed "$t0" "$t1")
stop_daemon

DIRECT_MBS=$(echo "scale=1; $SHARD_BYTES / $DIRECT_S / 1000000" | bc)
MOUNT_MBS=$(echo "scale=1; $APR_BYTES / $MOUNT_S / 1000000" | bc)
RATIO=$(echo "scale=2; $MOUNT_MBS / $DIRECT_MBS" | bc)
HOT_BYTES=$((HOT_MIB * 1048576))
HOT_DIRECT_MBS=$(echo "scale=1; $HOT_BYTES / $HOT_DIRECT_S / 1000000" | bc)
HOT_MOUNT_MBS=$(echo "scale=1; $HOT_BYTES / $HOT_MOUNT_S / 1000000" | bc)
HOT_RATIO=$(echo "scale=2; $HOT_MOUNT_MBS / $HOT_DIRECT_MBS" | bc)
cat <<REPORT
phi-4-shaped model: ${#SHARDS[@]} shards, $SHARD_BYTES shard bytes, .apr $APR_BYTES bytes
| measure | value |
|---|---|
| mount to first byte of phi-4.apr (median of $RUNS) | ${FIRST_APR} s (runs: ${FIRST_APR_RUNS}) |
| mount to first byte of phi-4.gguf | ${FIRST_GGUF} s (runs: ${FIRST_GGUF_RUNS}) |
| mount to first byte of phi-4.Q4_K_M.gguf | ${FIRST_Q4KM} s (runs: ${FIRST_Q4KM_RUNS}) |
| shards read directly (dd bs=$BS) | ${DIRECT_S} s, ${DIRECT_MBS} MB/s |
| phi-4.apr through the mount (dd bs=$BS) | ${MOUNT_S} s, ${MOUNT_MBS} MB/s |
| throughput ratio mount / direct | ${RATIO} |
| hot shard, ${HOT_MIB} MiB directly | ${HOT_DIRECT_S} s, ${HOT_DIRECT_MBS} MB/s |
| hot shard, ${HOT_MIB} MiB of phi-4.apr through the mount | ${HOT_MOUNT_S} s, ${HOT_MOUNT_MBS} MB/s |
| hot ratio mount / direct | ${HOT_RATIO} |
| daemon peak RSS (VmHWM) | $((RSS_KB / 1024)) MiB |
REPORT
