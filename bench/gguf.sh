#!/usr/bin/env bash
# Issue #12's figures for the GGUF views; every ratio is against a baseline of the same run.
# Run as root (drops the page cache, mounts). Needs scripts/install-node-tools.sh.
#   load   a >= 1 GB model of random BF16 weights (bench-1g: LLaMA-shaped, 32000 tokens): a
#          node-llama-cpp load (llama.cpp maps the file with MAP_POPULATE: every byte is read)
#          of NAME.gguf through the mount, against the same load of the same bytes copied to
#          disk. Hot: shards and copy in the page cache, a fresh mount each time; cold: caches
#          dropped before each load; second: the hot mount loaded again (its pages kept).
#          Alternating, RUNS times each; medians.
#   first  mount to the first byte of NAME.gguf (its whole header: KVs, vocabulary, tensor infos)
#
# Usage: sudo bench/gguf.sh
# Env: APRFS=build/fs/aprfs  WORK=/var/tmp/aprfs-bench12  MODEL=bench-1g  RUNS=3
#      SECTIONS="first load"  RESULTS=$WORK/results-<date>.txt
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
APRFS=$(realpath -m "${APRFS:-$ROOT/build/fs/aprfs}")
WORK=${WORK:-/var/tmp/aprfs-bench12}
MODEL=${MODEL:-bench-1g}
RUNS=${RUNS:-3}
SECTIONS=${SECTIONS:-first load}
RESULTS=${RESULTS:-$WORK/results-$(date +%Y%m%d-%H%M%S).txt}
MP=$WORK/mnt
LOG=$WORK/aprfs.log

source "$(dirname "$0")/lib.sh"
mount_models() {
  mkdir -p "$MP"
  "$APRFS" mount "$MP" --no-hf-cache --source "$WORK/models" --log-file "$LOG" \
    || die "mount failed; see $LOG"
}
unmount() { "$APRFS" umount "$MP" >/dev/null 2>&1 || umount -l "$MP" 2>/dev/null || true; }
trap unmount EXIT
load_seconds() { node "$ROOT/bench/gguf_load.mjs" "$1"; }

[ "$(id -u)" = 0 ] || die "run as root (drops the page cache, mounts)"
[ -x "$APRFS" ] || die "no aprfs binary at $APRFS (build first)"
[ -e "$ROOT/tests/tools/node_modules/node-llama-cpp" ] || die "run scripts/install-node-tools.sh first"
mkdir -p "$WORK"
echo "# bench/gguf.sh $(date -Is) $(git -C "$ROOT" rev-parse --short HEAD) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$RESULTS"
if [ ! -e "$WORK/models/m/config.json" ]; then
  python3 "$ROOT/tests/tools/make_model.py" --preset "$MODEL" "$WORK/models/m" >/dev/null
fi
unmount

if has_section first; then
  times=()
  for _ in $(seq "$RUNS"); do
    t0=$(now)
    mount_models
    head -c 1 "$MP/m.gguf" >/dev/null
    times+=("$(calc "$(now) - $t0")")
    unmount
  done
  record first_byte_s "$(median "${times[@]}")"
fi

if has_section load; then
  mount_models
  copy=$WORK/m.gguf
  [ -e "$copy" ] && cmp -s "$copy" "$MP/m.gguf" || cp "$MP/m.gguf" "$copy"
  record gguf_bytes "$(stat -c %s "$copy")"
  unmount
  second_times=()
  for temp in hot cold; do
    mount_times=() disk_times=()
    for _ in $(seq "$RUNS"); do
      [ $temp = hot ] && cat "$WORK"/models/m/*.safetensors "$copy" >/dev/null
      [ $temp = cold ] && drop_caches
      disk_times+=("$(load_seconds "$copy")")
      mount_models
      [ $temp = cold ] && drop_caches
      mount_times+=("$(load_seconds "$MP/m.gguf")")
      # The same mount again: the kernel kept the file's pages.
      [ $temp = hot ] && second_times+=("$(load_seconds "$MP/m.gguf")")
      unmount
    done
    disk=$(median "${disk_times[@]}") mounted=$(median "${mount_times[@]}")
    record "load_${temp}_disk_s" "$disk (${disk_times[*]})"
    record "load_${temp}_mount_s" "$mounted (${mount_times[*]})"
    record "load_${temp}_mount_over_disk" "$(calc "$mounted / $disk")"
    if [ $temp = hot ]; then
      second=$(median "${second_times[@]}")
      record load_second_mount_s "$second (${second_times[*]})"
      record load_second_mount_over_disk "$(calc "$second / $disk")"
    fi
  done
fi
echo "results in $RESULTS"
