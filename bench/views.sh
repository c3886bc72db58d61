#!/usr/bin/env bash
# Issue #10's figures for computed views; every ratio is measured against a baseline of the
# same run. Run as root (it drops the page cache and mounts). Sections:
#   encode    build/bench/encode_bench: one core's throughput of each encoder, scalar vs SIMD
#   read      a >= 1 GB model of random BF16 weights (so a cold read really reads the disk):
#             full sequential read (dd bs=1M) of NAME.apr, NAME.q4k.apr and NAME.f16.apr on a
#             fresh mount each time: shards hot (the view computed, its cache filling; and with
#             --no-view-cache), cold (page cache dropped, empty computed cache), and from the
#             computed cache (page cache dropped, cache filled by an earlier run)
#   deepseek  a DeepSeek-V3-shaped FP8 model (163 sparse shards, F8_E4M3 + weight_scale_inv):
#             mount to the first byte of NAME.apr and of NAME.q4k.apr, and the daemon's VmHWM
#
# Usage: sudo bench/views.sh
# Env: APRFS=build/fs/aprfs  BENCH_TOOLS=build/bench  WORK=/var/tmp/aprfs-bench10
#      MODEL=bench-1g (a make_model.py preset)  RUNS=3 (medians)  DS_LAYERS=62 DS_SHARDS=163
#      SECTIONS="encode read deepseek"  RESULTS=$WORK/results-<date>.txt
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
APRFS=$(realpath -m "${APRFS:-$ROOT/build/fs/aprfs}")
BENCH_TOOLS=${BENCH_TOOLS:-$ROOT/build/bench}
WORK=${WORK:-/var/tmp/aprfs-bench10}
MODEL=${MODEL:-bench-1g}
RUNS=${RUNS:-3}
DS_LAYERS=${DS_LAYERS:-62}
DS_SHARDS=${DS_SHARDS:-163}
SECTIONS=${SECTIONS:-encode read deepseek}
RESULTS=${RESULTS:-$WORK/results-$(date +%Y%m%d-%H%M%S).txt}
MAKE_MODEL=$ROOT/tests/tools/make_model.py
MP=$WORK/mnt
LOG=$WORK/aprfs.log
PID=""

source "$(dirname "$0")/lib.sh"
read_seconds() { local t0; t0=$(now); dd if="$1" of=/dev/null bs=1M status=none; calc "$(now) - $t0"; }

mount_models() {  # mount_models SOURCE_DIR [aprfs options...]
  local source=$1; shift
  mkdir -p "$MP"
  "$APRFS" mount "$MP" --no-hf-cache --source "$source" --log-file "$LOG" "$@" \
    || die "mount failed; see $LOG"
  PID=$(pgrep -f "aprfs mount $MP " | head -1)
}
unmount() { "$APRFS" umount "$MP" >/dev/null 2>&1 || umount -l "$MP" 2>/dev/null || true; PID=""; }
trap unmount EXIT

[ "$(id -u)" = 0 ] || die "run as root (drops the page cache, mounts)"
[ -x "$APRFS" ] || die "no aprfs binary at $APRFS (build first)"
mkdir -p "$WORK"
echo "# bench/views.sh $(date -Is) $(git -C "$ROOT" rev-parse --short HEAD) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$RESULTS"

# --- encode -----------------------------------------------------------------------------------
if has_section encode; then
  [ -x "$BENCH_TOOLS/encode_bench" ] || die "no $BENCH_TOOLS/encode_bench (cmake --build build --target encode_bench)"
  "$BENCH_TOOLS/encode_bench" | tee -a "$RESULTS"
fi

# --- read -------------------------------------------------------------------------------------
if has_section read; then
  models=$WORK/models
  if [ ! -d "$models/$MODEL" ]; then
    python3 "$MAKE_MODEL" "$models/$MODEL" --preset "$MODEL" >/dev/null
  fi
  shards=("$models/$MODEL"/*.safetensors)
  warm() { cat "${shards[@]}" >/dev/null; }
  declare -A T
  for run in $(seq 1 "$RUNS"); do
    echo "read: run $run of $RUNS"
    rm -rf "$WORK/cache"
    # Shards hot: the plain file, then each view computed (its computed cache filling).
    for view in apr q4k f16; do
      name=$MODEL.apr; [ "$view" = apr ] || name=$MODEL.$view.apr
      warm; mount_models "$models" --cache-dir "$WORK/cache"
      T[hot.$view]+="$(read_seconds "$MP/$name") "; unmount
    done
    for view in q4k f16; do  # the same without a computed cache
      warm; mount_models "$models" --no-view-cache --cache-dir "$WORK/nocache"
      T[hot_nocache.$view]+="$(read_seconds "$MP/$MODEL.$view.apr") "; unmount
    done
    # From the computed cache filled above, and cold: nothing in the page cache. The file is
    # looked up (planned) before the caches are dropped: these figures are bytes per second of
    # the read itself (a view's lookup costs ~0.1 s once per mount, cold; see deepseek below).
    for view in q4k f16; do
      mount_models "$models" --cache-dir "$WORK/cache"; stat "$MP/$MODEL.$view.apr" >/dev/null
      drop_caches; T[cache_cold.$view]+="$(read_seconds "$MP/$MODEL.$view.apr") "; unmount
    done
    # Cold: page cache dropped, the plain file and the views computed from cold shards.
    mount_models "$models" --cache-dir "$WORK/cache"; stat "$MP/$MODEL.apr" >/dev/null
    drop_caches; T[cold.apr]+="$(read_seconds "$MP/$MODEL.apr") "; unmount
    rm -rf "$WORK/cache"
    mount_models "$models" --cache-dir "$WORK/cache"; stat "$MP/$MODEL.q4k.apr" >/dev/null
    drop_caches; T[cold.q4k]+="$(read_seconds "$MP/$MODEL.q4k.apr") "; unmount
  done
  mount_models "$models" --cache-dir "$WORK/cache"
  size_apr=$(stat -c %s "$MP/$MODEL.apr"); size_q4k=$(stat -c %s "$MP/$MODEL.q4k.apr")
  size_f16=$(stat -c %s "$MP/$MODEL.f16.apr"); unmount
  record read.bytes "apr=$size_apr q4k=$size_q4k f16=$size_f16"
  for key in "${!T[@]}"; do
    # shellcheck disable=SC2086
    record "read.$key.seconds" "$(median ${T[$key]}) (runs: ${T[$key]% })"
  done
  m() { median ${T[$1]}; }  # shellcheck disable=SC2086
  record read.ratio.q4k_hot_vs_apr_hot "$(calc "$(m hot.q4k) / $(m hot.apr)") (goal <= 2)"
  record read.ratio.f16_hot_vs_apr_hot "$(calc "$(m hot.f16) / $(m hot.apr)")"
  record read.ratio.q4k_hot_nocache_vs_apr_hot "$(calc "$(m hot_nocache.q4k) / $(m hot.apr)")"
  record read.rate.apr_cold_MBps "$(calc "$size_apr / $(m cold.apr) / 1000000")"
  record read.rate.q4k_from_cache_cold_MBps "$(calc "$size_q4k / $(m cache_cold.q4k) / 1000000") (goal >= apr cold)"
  record read.rate.f16_from_cache_cold_MBps "$(calc "$size_f16 / $(m cache_cold.f16) / 1000000")"
  record read.ratio.q4k_cold_vs_apr_cold "$(calc "$(m cold.q4k) / $(m cold.apr)")"
fi

# --- deepseek ---------------------------------------------------------------------------------
if has_section deepseek; then
  ds=$WORK/ds/deepseek-v3-fp8
  if [ ! -f "$ds/model.safetensors.index.json" ]; then
    python3 "$MAKE_MODEL" "$ds" --preset deepseek-v3 --layers "$DS_LAYERS" --shards "$DS_SHARDS" --sparse >/dev/null
  fi
  first_times=() q4k_times=() hwm=()
  for run in $(seq 1 "$RUNS"); do
    mount_models "$(dirname "$ds")" --cache-dir "$WORK/ds-cache"
    t0=$(now); head -c 1 "$MP/deepseek-v3-fp8.apr" >/dev/null || die "the FP8 model was not mounted; see $LOG"
    first_times+=("$(calc "$(now) - $t0")")
    plain_hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$PID/status")
    t0=$(now); head -c 1 "$MP/deepseek-v3-fp8.q4k.apr" >/dev/null || die "no q4k view; see $LOG"
    q4k_times+=("$(calc "$(now) - $t0")")
    hwm+=("$plain_hwm/$(awk '/^VmHWM/ {print $2}' "/proc/$PID/status")")
    unmount
  done
  record deepseek.apr_first_byte_seconds "$(median "${first_times[@]}") (runs: ${first_times[*]})"
  record deepseek.q4k_first_byte_seconds "$(median "${q4k_times[@]}") (runs: ${q4k_times[*]})"
  record deepseek.vmhwm_kb_after_apr/after_q4k "${hwm[*]}"
fi
echo "results: $RESULTS"
