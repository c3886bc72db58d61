#!/usr/bin/env bash
# The read-path benchmark suite (issues #5 and #11), in one run: every ratio is measured against
# a baseline taken in the same run. Run as root (it drops the page cache and mounts). Sections:
#   seq       sequential read (cat) of the .apr through the mount vs the shards directly,
#             shards cold and hot, and a second read of the .apr (kernel cache kept)
#   pagecache the page cache one full read of the .apr from cold fills: shard pages + .apr
#             pages, counted per file with the tracepoint filemap:mm_filemap_add_to_page_cache
#   fio       random reads bs=4k and bs=1m, $FIO_JOBS jobs, on the .apr vs on the shards: cold
#             (at most half the model read, $FIO_RUNTIME s at most) and with the shards hot
#             and the .apr's pages cold (a fresh mount; $FIO_RUNTIME s)
#   loader    bench/mmap_loader --copy: mmap, copy every tensor out in index order; cold, shards
#             hot on a fresh mount, a second load (kernel cache kept); 1 and 4 processes
#   profile   perf record -a of the first read and of the loader (shards hot, fresh mount): the
#             top symbols of what is left, per process, into the results
#   convert   "convert then load" (bench/convert_merge + loader on the merged file) vs
#             "mount then load"; the merged file must be byte-identical to the mounted .apr
#   deepseek  plan build of a DeepSeek-V3-shaped model (163 sparse shards, 91,991 tensors)
# and the daemon's RSS, sampled every 0.2 s during all of it (max per section).
# The model (generated once, kept in $WORK): Llama-2-7B shapes, BF16 with F32 norms and lm_head,
# random bytes (so a cold read really reads the disk), ~0.79 GB + 0.40 GB per layer.
#
# Usage: sudo bench/all.sh
# Env: APRFS=build/fs/aprfs (the binary under test; A/B = one run per binary)
#      BENCH_TOOLS=build/bench (mmap_loader, convert_merge)  WORK=/var/tmp/aprfs-bench5
#      MODEL_GB=6 MODEL_SHARDS=5  RUNS=3 (repeats of the seq section; medians reported)
#      FIO_RUNTIME=20 FIO_JOBS=4  DS_LAYERS=62 DS_SHARDS=163 DS_RUNS=3
#      SECTIONS="seq pagecache fio loader profile convert deepseek"  RESULTS=$WORK/results-<date>.txt
#      DROP_CACHES=1 (0: never drop the page cache, for a shared machine; "cold" is then warm)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
APRFS=$(realpath -m "${APRFS:-$ROOT/build/fs/aprfs}")
BENCH_TOOLS=${BENCH_TOOLS:-$ROOT/build/bench}
WORK=${WORK:-/var/tmp/aprfs-bench5}
MODEL_GB=${MODEL_GB:-6}
MODEL_SHARDS=${MODEL_SHARDS:-5}
RUNS=${RUNS:-3}
FIO_RUNTIME=${FIO_RUNTIME:-20}
FIO_JOBS=${FIO_JOBS:-4}
DS_LAYERS=${DS_LAYERS:-62}
DS_SHARDS=${DS_SHARDS:-163}
DS_RUNS=${DS_RUNS:-3}
SECTIONS=${SECTIONS:-seq pagecache fio loader profile convert deepseek}
DROP_CACHES=${DROP_CACHES:-1}
STAMP=$(date +%Y%m%d-%H%M%S)
RESULTS=${RESULTS:-$WORK/results-$STAMP.txt}
TABLE=${RESULTS%.txt}.md
MAKE_MODEL=$ROOT/tests/tools/make_model.py
LOADER=$BENCH_TOOLS/mmap_loader
CONVERT=$BENCH_TOOLS/convert_merge
MP=$WORK/mnt
LOG=$WORK/aprfs.log
RSS_LOG=$WORK/rss.log
MERGED=$WORK/merged.apr
PID=""
SAMPLER=""
MOUNTED_TRACEFS=""

source "$(dirname "$0")/lib.sh"
spread() { [ $# -gt 1 ] || return 0; printf ' (runs %s–%s)' "$(fmt "$(printf '%s\n' "$@" | sort -g | head -1)")" "$(fmt "$(printf '%s\n' "$@" | sort -g | tail -1)")"; }
# The value of key=... in a line of key=value words.
kv() { local word; for word in $2; do [[ $word == "$1="* ]] && { echo "${word#*=}"; return; }; done; die "no $1 in: $2"; }
record() { echo "$1=$2" >> "$RESULTS"; }  # quiet: all.sh prints its own table
# DROP_CACHES=0 on a machine shared with others: "cold" then means whatever the cache holds.
drop_caches() { [ "$DROP_CACHES" = 0 ] && return 0; sync; echo 3 > /proc/sys/vm/drop_caches; }
cached_kb() { awk '/^Cached:/ {print $2}' /proc/meminfo; }
mbs() { calc "$1 / $2 / 1000000"; }  # bytes, seconds -> MB/s
resident_bytes() { fincore -b -n -o RES "$@" | awk '{s += $1} END {printf "%.0f\n", s}'; }

# cat of the files (as a user copies a model: cat picks its buffer from st_blksize); prints the
# seconds.
read_seq() {
  local t0
  t0=$(now)
  cat "$@" > /dev/null
  calc "$(now) - $t0"
}

# --- The daemon, and its RSS sampled under the current label --------------------------------
# The label the RSS samples go under; the load average at its start goes to the results (the
# machine is shared: a busy neighbour shows there).
set_label() { echo "$1" > "$WORK/label"; record "load.$1" "\"$(cut -d' ' -f1-3 /proc/loadavg)\""; }
sample_rss() {  # builtins only: it runs 5 times a second
  local pid=$1 key value rest rss="" hwm="" label
  [ -r "/proc/$pid/status" ] || return 0
  { while read -r key value rest; do
      case $key in VmRSS:) rss=$value ;; VmHWM:) hwm=$value ;; esac
    done < "/proc/$pid/status"; } 2>/dev/null || return 0
  { read -r label < "$WORK/label"; } 2>/dev/null || label=none
  [ -n "$rss" ] && echo "$label $rss $hwm" >> "$RSS_LOG"
  return 0
}
rss_sampler() {
  local pid
  while :; do
    if { read -r pid < "$WORK/daemon.pid"; } 2>/dev/null; then sample_rss "$pid"; fi
    sleep 0.2
  done
}
start_daemon() {  # $1: the --source folder; a fresh daemon, so the .apr's pages start cold
  "$APRFS" mount "$MP" -f --no-hf-cache --source "$1" --log-file "$LOG" &
  PID=$!
  echo "$PID" > "$WORK/daemon.pid"
  for _ in $(seq 1 2000); do
    mountpoint -q "$MP" && return 0
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.005
  done
  die "the mount did not come up; see $LOG"
}
stop_daemon() {
  if [ -n "$PID" ]; then sample_rss "$PID"; fi  # VmHWM covers the daemon's whole life
  rm -f "$WORK/daemon.pid"
  if mountpoint -q "$MP" 2>/dev/null; then "$APRFS" umount "$MP" || umount -l "$MP"; fi
  if [ -n "$PID" ]; then wait "$PID" 2>/dev/null || true; PID=""; fi
}
cleanup() {
  if [ -n "$SAMPLER" ]; then kill "$SAMPLER" 2>/dev/null || true; wait "$SAMPLER" 2>/dev/null || true; fi
  stop_daemon
  rm -f "$MERGED" "$WORK/pagecache.data"
  if [ -n "$MOUNTED_TRACEFS" ]; then umount /sys/kernel/tracing || true; fi
}

# --- Checks and the models --------------------------------------------------------------------
[ "$(id -u)" -eq 0 ] || die "run as root: it drops the page cache (sudo bench/all.sh)"
needed=(fincore bc python3 dd cmp mountpoint findmnt)
has_section fio && needed+=(fio)
has_section pagecache && needed+=(perf)
has_section profile && needed+=(perf)
for tool in "${needed[@]}"; do
  command -v "$tool" >/dev/null || die "$tool is missing (scripts/install-deps.sh installs it)"
done
[ -x "$APRFS" ] || die "no aprfs binary at $APRFS (build it, or set APRFS=)"
for tool in "$LOADER" "$CONVERT"; do
  [ -x "$tool" ] || die "no $tool (cmake --build build --target mmap_loader convert_merge, or set BENCH_TOOLS=)"
done
mkdir -p "$WORK" "$MP"
mountpoint -q "$MP" 2>/dev/null && die "$MP is already mounted (an earlier run still going?)"
trap cleanup EXIT
# perf finds tracepoints through tracefs.
if has_section pagecache && [ ! -d /sys/kernel/tracing/events ]; then
  mount -t tracefs nodev /sys/kernel/tracing || die "cannot mount tracefs (needed by perf for the page cache count)"
  MOUNTED_TRACEFS=1
fi
trap 'exit 130' INT TERM

# Llama-2-7B layers are 404,783,104 bytes; embedding + F32 lm_head + norm 786,448,384.
LAYERS=$(python3 -c "print(max(1, round(($MODEL_GB * 1e9 - 786448384) / 404783104)))")
NAME=dense-${LAYERS}l-${MODEL_SHARDS}s
MODELS=$WORK/models
MODEL=$MODELS/$NAME
if [ ! -f "$MODEL/model.safetensors.index.json" ]; then
  echo "generating $MODEL ($LAYERS layers, $MODEL_SHARDS shards, random bytes: ~1 min per 6 GB) ..."
  rm -rf "$MODEL"
  python3 "$MAKE_MODEL" "$MODEL" --preset bench-dense --layers "$LAYERS" --shards "$MODEL_SHARDS" >/dev/null
fi
SHARDS=("$MODEL"/model-*.safetensors)
SHARD_BYTES=$(stat -c %s "${SHARDS[@]}" | paste -sd+ | bc)
APR=$MP/$NAME.apr

DS_NAME=deepseek-v3-${DS_LAYERS}l-${DS_SHARDS}s
ds_model() {  # $1: fp8 dtype; sparse, so 688 GB of shards cost ~30 MB of disk
  local dir=$WORK/ds-$1/$DS_NAME
  if [ ! -f "$dir/model.safetensors.index.json" ]; then
    rm -rf "$dir"
    python3 "$MAKE_MODEL" "$dir" --preset deepseek-v3 --layers "$DS_LAYERS" --shards "$DS_SHARDS" \
      --fp8-dtype "$1" --sparse >/dev/null
  fi
}
if has_section deepseek; then
  ds_model F8_E4M3
  ds_model U8
  DS_TENSORS=$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["weight_map"]))' \
    "$WORK/ds-U8/$DS_NAME/model.safetensors.index.json")
fi

: > "$RESULTS"
: > "$RSS_LOG"
set_label setup
rss_sampler &
SAMPLER=$!
{
  echo "date=$(date -Iseconds)"
  echo "aprfs=$APRFS"
  echo "aprfs_version=$("$APRFS" --version 2>/dev/null | head -1)"
  echo "commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "kernel=$(uname -r)"
  echo "cpu=$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo) x $(nproc)"
  echo "ram_kb=$(awk '/MemTotal/ {print $2}' /proc/meminfo)"
  echo "fs=$(findmnt -n -o FSTYPE,SOURCE -T "$WORK" | xargs)"
  echo "model=$MODEL shards=${#SHARDS[@]} shard_bytes=$SHARD_BYTES layers=$LAYERS"
} >> "$RESULTS"

# --- seq: sequential reads ------------------------------------------------------------------
# Hot states are set up right before they are measured: this VM pages out page-cache pages left
# untouched for ~30 s (DAMON, kdamond), so "hot" does not last.
if has_section seq; then
  declare -a R_COLD R_HOT R_SECOND R_DIRECT_COLD R_DIRECT_HOT R_APR_COLD R_APR_HOT R_APR_SECOND
  for run in $(seq 1 "$RUNS"); do
    echo "seq run $run/$RUNS ..."
    set_label seq
    # Cold: which one reads first alternates, so neither always finds the disk (or the host
    # under this VM) warmed by the other.
    if [ $((run % 2)) -eq 1 ]; then drop_caches; direct_cold=$(read_seq "${SHARDS[@]}"); fi
    start_daemon "$MODELS"
    apr_bytes=$(stat -c %s "$APR")  # builds the plan
    drop_caches
    apr_cold=$(read_seq "$APR")
    stop_daemon
    if [ $((run % 2)) -eq 0 ]; then drop_caches; direct_cold=$(read_seq "${SHARDS[@]}"); fi
    # Shards hot: the direct baseline, then a fresh mount (its .apr pages cold) read twice.
    read_seq "${SHARDS[@]}" >/dev/null
    direct_hot=$(read_seq "${SHARDS[@]}")
    start_daemon "$MODELS"
    stat "$APR" >/dev/null
    apr_hot=$(read_seq "$APR")
    apr_second=$(read_seq "$APR")
    stop_daemon

    R_DIRECT_COLD+=("$(mbs "$SHARD_BYTES" "$direct_cold")")
    R_DIRECT_HOT+=("$(mbs "$SHARD_BYTES" "$direct_hot")")
    R_APR_COLD+=("$(mbs "$apr_bytes" "$apr_cold")")
    R_APR_HOT+=("$(mbs "$apr_bytes" "$apr_hot")")
    R_APR_SECOND+=("$(mbs "$apr_bytes" "$apr_second")")
    R_COLD+=("$(calc "${R_APR_COLD[-1]} / ${R_DIRECT_COLD[-1]}")")
    R_HOT+=("$(calc "${R_APR_HOT[-1]} / ${R_DIRECT_HOT[-1]}")")
    R_SECOND+=("$(calc "${R_APR_SECOND[-1]} / ${R_DIRECT_HOT[-1]}")")
    {
      echo "seq.$run.direct_cold_s=$direct_cold"
      echo "seq.$run.direct_hot_s=$direct_hot"
      echo "seq.$run.apr_cold_s=$apr_cold"
      echo "seq.$run.apr_hot_first_s=$apr_hot"
      echo "seq.$run.apr_second_s=$apr_second"
      echo "seq.$run.apr_bytes=$apr_bytes"
    } >> "$RESULTS"
  done
  SEQ_DIRECT_COLD=$(median "${R_DIRECT_COLD[@]}"); SEQ_DIRECT_HOT=$(median "${R_DIRECT_HOT[@]}")
  SEQ_APR_COLD=$(median "${R_APR_COLD[@]}"); SEQ_APR_HOT=$(median "${R_APR_HOT[@]}")
  SEQ_APR_SECOND=$(median "${R_APR_SECOND[@]}")
  SEQ_R_COLD=$(median "${R_COLD[@]}"); SEQ_R_HOT=$(median "${R_HOT[@]}")
  SEQ_R_SECOND=$(median "${R_SECOND[@]}")
  record seq.ratio_cold_runs "${R_COLD[*]}"
  record seq.ratio_hot_first_runs "${R_HOT[*]}"
  record seq.ratio_second_runs "${R_SECOND[*]}"
fi

# --- pagecache: what one full read from cold adds to the page cache ---------------------------
# Counted with the tracepoint filemap:mm_filemap_add_to_page_cache per file (device + inode), so
# the pages DAMON pages out again during the read still count; fincore gives what is left at
# the end. The baseline is the same count for a direct read of the shards.
declare -A ADDED FOLIOS
trace_page_adds() {  # files... -- command... ; sets ADDED[file]=bytes, FOLIOS[file], TRACE_LOST
  local files=() filter="" f ma mi ino dev key bytes
  local -A file_of=()
  while [ "$1" != -- ]; do files+=("$1"); shift; done
  shift
  for f in "${files[@]}"; do
    read -r ma mi ino <<< "$(stat -L -c '%Hd %Ld %i' "$f")"
    filter+="${filter:+ || }(s_dev == $(( ma << 20 | mi )) && i_ino == $ino)"
    file_of["$ma:$mi $(printf %x "$ino")"]=$f
    ADDED[$f]=0
    FOLIOS[$f]=0
  done
  perf record -q -a -m 4096 -o "$WORK/pagecache.data" -e filemap:mm_filemap_add_to_page_cache \
    --filter "$filter" -- "$@"
  while read -r dev ino bytes folios; do
    key="$dev $ino"
    if [ -n "${file_of[$key]:-}" ]; then ADDED[${file_of[$key]}]=$bytes; FOLIOS[${file_of[$key]}]=$folios; fi
  done < <(perf script -i "$WORK/pagecache.data" -F trace 2>/dev/null |
           awk '{split($NF, o, "="); k = $2 " " $4; b[k] += 4096 * 2 ^ o[2]; n[k]++}
                END {for (k in b) printf "%s %.0f %d\n", k, b[k], n[k]}')
  TRACE_LOST=$(perf report -i "$WORK/pagecache.data" --stats 2>/dev/null |
               awk '/LOST_SAMPLES events:/ {n = $3} END {print n + 0}')
  rm -f "$WORK/pagecache.data"
}
sum_added() { local f total=0; for f in "$@"; do total=$((total + ADDED[$f])); done; echo "$total"; }
kib_per() { if [ "$2" -gt 0 ]; then fmt "$(calc "$1 / $2 / 1024")" 0; else echo "?"; fi; }
sum_folios() { local f total=0; for f in "$@"; do total=$((total + FOLIOS[$f])); done; echo "$total"; }
if has_section pagecache; then
  echo "page cache ..."
  set_label pagecache
  drop_caches
  trace_page_adds "${SHARDS[@]}" -- sh -c 'for f; do dd if="$f" of=/dev/null bs=1M status=none; done' sh "${SHARDS[@]}"
  direct_added=$(sum_added "${SHARDS[@]}")
  direct_lost=$TRACE_LOST
  start_daemon "$MODELS"
  stat "$APR" >/dev/null
  drop_caches
  trace_page_adds "${SHARDS[@]}" "$APR" -- dd if="$APR" of=/dev/null bs=1M status=none
  shard_res=$(resident_bytes "${SHARDS[@]}")
  apr_res=$(resident_bytes "$APR")
  stop_daemon
  shard_added=$(sum_added "${SHARDS[@]}")
  shard_folios=$(sum_folios "${SHARDS[@]}")
  apr_added=${ADDED[$APR]}
  apr_folios=${FOLIOS[$APR]}
  PAGES_RATIO=$(calc "($shard_added + $apr_added) / $SHARD_BYTES")
  PAGES_DIRECT=$(calc "$direct_added / $SHARD_BYTES")
  PAGES_RESIDENT=$(calc "($shard_res + $apr_res) / $SHARD_BYTES")
  {
    echo "pagecache.direct_added_bytes=$direct_added"; echo "pagecache.direct_trace_lost=$direct_lost"
    echo "pagecache.shard_added_bytes=$shard_added"; echo "pagecache.apr_added_bytes=$apr_added"
    echo "pagecache.trace_lost=$TRACE_LOST"
    # Folios added: their mean size shows whether the page cache used large folios.
    echo "pagecache.shard_folios=$shard_folios"; echo "pagecache.apr_folios=$apr_folios"
    echo "pagecache.shard_resident_at_end_bytes=$shard_res"; echo "pagecache.apr_resident_at_end_bytes=$apr_res"
    echo "pagecache.ratio=$PAGES_RATIO"; echo "pagecache.resident_ratio=$PAGES_RESIDENT"
  } >> "$RESULTS"
fi

# --- fio: random reads, cold and with the shards hot ---------------------------------------
# Cold runs stop after half the model (each job reading a different random 1/(2 x jobs)), so
# most reads miss the page cache; hot runs go on for $FIO_RUNTIME s.
fio_run() {  # $1 label, $2 bs, $3 filename(s) joined by ':', $4 cold|hot -> "iops bytes_per_s"
  local out=$WORK/fio-$1.json limit=(--time_based)
  [ "$4" = cold ] && limit=(--io_size=$((SHARD_BYTES / 2 / FIO_JOBS)))
  fio --name="$1" --filename="$3" --rw=randread --bs="$2" --numjobs="$FIO_JOBS" "${limit[@]}" \
    --runtime="$FIO_RUNTIME" --ioengine=psync --invalidate=0 --readonly \
    --group_reporting --output-format=json --output="$out" >/dev/null
  python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))["jobs"][0]["read"]; print(r["iops"], r["bw_bytes"])' "$out"
}
if has_section fio; then
  SHARD_LIST=$(IFS=:; echo "${SHARDS[*]}")
  for bs in 4k 1m; do
    for state in cold hot; do
      echo "fio $bs $state ..."
      set_label "fio-$bs-$state"
      # cold: nothing cached; hot: the shards cached, the .apr's own pages cold (fresh mount).
      if [ $state = cold ]; then drop_caches; else read_seq "${SHARDS[@]}" >/dev/null; fi
      start_daemon "$MODELS"
      stat "$APR" >/dev/null
      read -r apr_iops apr_bw <<< "$(fio_run "apr-$bs-$state" "$bs" "$APR" $state)"
      stop_daemon
      if [ $state = cold ]; then drop_caches; else read_seq "${SHARDS[@]}" >/dev/null; fi
      read -r dir_iops dir_bw <<< "$(fio_run "shards-$bs-$state" "$bs" "$SHARD_LIST" $state)"
      {
        echo "fio.$bs.$state.apr_iops=$apr_iops"; echo "fio.$bs.$state.apr_bw_bytes=$apr_bw"
        echo "fio.$bs.$state.shards_iops=$dir_iops"; echo "fio.$bs.$state.shards_bw_bytes=$dir_bw"
      } >> "$RESULTS"
      declare "FIO_${bs}_${state}=$apr_iops $apr_bw $dir_iops $dir_bw"
    done
  done
fi

# --- loader: mmap + copy every tensor out in index order ------------------------------------
# LOADED="apr_line|shards_line". cold: nothing cached; hot: the shards cached, a fresh mount (the
# .apr's pages cold); second: the .apr loaded once on this mount before (kernel cache kept),
# against the shards loaded a second time.
loader_pair() {  # $1 label, $2 procs, $3 state (cold|hot|second)
  local apr_line dir_line
  set_label "$1"
  if [ "$3" = cold ]; then drop_caches; else read_seq "${SHARDS[@]}" >/dev/null; fi
  start_daemon "$MODELS"
  stat "$APR" >/dev/null
  [ "$3" = second ] && "$LOADER" --copy --apr "$APR" >/dev/null
  apr_line=$("$LOADER" --copy --procs "$2" --apr "$APR")
  stop_daemon
  if [ "$3" = cold ]; then drop_caches; else read_seq "${SHARDS[@]}" >/dev/null; fi
  [ "$3" = second ] && "$LOADER" --copy --safetensors "${SHARDS[@]}" >/dev/null
  dir_line=$("$LOADER" --copy --procs "$2" --safetensors "${SHARDS[@]}")
  [ "$(kv checksum "$apr_line")" = "$(kv checksum "$dir_line")" ] ||
    die "loader: the .apr and the shards gave different checksums: $apr_line / $dir_line"
  record "loader.$1.apr" "\"$apr_line\""
  record "loader.$1.shards" "\"$dir_line\""
  LOADED="$apr_line|$dir_line"
}
if has_section loader; then
  echo "loader ..."
  loader_pair loader-1-hot 1 hot; LOADER_1_HOT=$LOADED
  loader_pair loader-1-second 1 second; LOADER_1_SECOND=$LOADED
  loader_pair loader-1-cold 1 cold; LOADER_1_COLD=$LOADED
  loader_pair loader-4-hot 4 hot; LOADER_4_HOT=$LOADED
  loader_pair loader-4-cold 4 cold; LOADER_4_COLD=$LOADED
fi

# --- profile: where the time goes, shards hot, fresh mount ------------------------------------
profile_top() {  # $1 label, command... -> the top symbols per process into the results
  local label=$1 data=$WORK/profile-$1.data
  shift
  perf record -q -a -g -o "$data" -- "$@" >/dev/null 2>&1
  perf report -i "$data" --no-children --sort comm,sym -g none --percent-limit 1 2>/dev/null |
    awk '/%/ {$1 = $1; print}' | head -25 |
    while read -r line; do record "profile.$label" "\"$line\""; done
  rm -f "$data"
}
if has_section profile; then
  echo "profile ..."
  set_label profile
  read_seq "${SHARDS[@]}" >/dev/null
  start_daemon "$MODELS"
  stat "$APR" >/dev/null
  profile_top first-read cat "$APR"
  stop_daemon
  read_seq "${SHARDS[@]}" >/dev/null
  start_daemon "$MODELS"
  stat "$APR" >/dev/null
  profile_top loader-hot "$LOADER" --copy --apr "$APR"
  stop_daemon
fi

# --- convert then load vs mount then load -------------------------------------------------------
if has_section convert; then
  echo "convert then load ..."
  set_label convert
  rm -f "$MERGED"
  drop_caches
  t0=$(now)
  convert_line=$("$CONVERT" "$MODEL" "$MERGED")
  conv_s=$(calc "$(now) - $t0")
  conv_load=$("$LOADER" --apr "$MERGED")  # its pages as the converter left them (cached)
  conv_total=$(calc "$(now) - $t0")
  conv_first=$(calc "$conv_s + $(kv first_tensor_s "$conv_load")")
  extra_disk=$(du -B1 "$MERGED" | cut -f1)

  set_label mount-load
  drop_caches
  t0=$(now)
  start_daemon "$MODELS"
  up_s=$(calc "$(now) - $t0")
  mount_load=$("$LOADER" --apr "$APR")
  mount_total=$(calc "$(now) - $t0")
  mount_first=$(calc "$up_s + $(kv first_tensor_s "$mount_load")")
  [ "$(kv checksum "$conv_load")" = "$(kv checksum "$mount_load")" ] ||
    die "convert: the merged file and the mount gave different checksums"
  cmp "$MERGED" "$APR" || die "convert: $MERGED differs from $APR"
  stop_daemon
  rm -f "$MERGED"
  {
    echo "convert.merge=\"$convert_line\""
    echo "convert.merge_s=$conv_s"; echo "convert.load=\"$conv_load\""
    echo "convert.first_tensor_s=$conv_first"; echo "convert.total_s=$conv_total"
    echo "convert.extra_disk_bytes=$extra_disk"
    echo "mount.up_s=$up_s"; echo "mount.load=\"$mount_load\""
    echo "mount.first_tensor_s=$mount_first"; echo "mount.total_s=$mount_total"
    echo "convert.cmp=identical"
  } >> "$RESULTS"
fi

# --- deepseek: plan build of a DeepSeek-V3-shaped model ---------------------------------------
if has_section deepseek; then
  echo "deepseek plan build ..."
  # The real dtypes first: F8_E4M3 has no APR v2 code, so the model may be refused.
  set_label ds-fp8
  drop_caches
  t0=$(now)
  start_daemon "$WORK/ds-F8_E4M3"
  if head -c 1 "$MP/$DS_NAME.apr" >/dev/null 2>&1; then DS_FP8="mounted"; else DS_FP8="refused"; fi
  ds_fp8_s=$(calc "$(now) - $t0")
  ds_fp8_error=$(grep -o "not shown: .*" "$LOG" | tail -1 | cut -c1-300)
  stop_daemon
  record ds.fp8.result "$DS_FP8"
  record ds.fp8.seconds "$ds_fp8_s"
  record ds.fp8.error "\"$ds_fp8_error\""
  # The same model with its FP8 weights as U8 (same sizes): the plan build at full scale.
  declare -a DS_TIMES DS_HWM DS_RSS
  for run in $(seq 1 "$DS_RUNS"); do
    set_label ds-plan
    drop_caches
    t0=$(now)
    start_daemon "$WORK/ds-U8"
    head -c 1 "$MP/$DS_NAME.apr" >/dev/null || die "the U8 DeepSeek-V3 model was not mounted; see $LOG"
    DS_TIMES+=("$(calc "$(now) - $t0")")
    DS_HWM+=("$(awk '/^VmHWM/ {print $2}' "/proc/$PID/status")")
    DS_RSS+=("$(awk '/^VmRSS/ {print $2}' "/proc/$PID/status")")
    ds_size=$(stat -c %s "$MP/$DS_NAME.apr")
    stop_daemon
  done
  DS_TIME=$(median "${DS_TIMES[@]}")
  DS_HWM_MAX=$(printf '%s\n' "${DS_HWM[@]}" | sort -n | tail -1)
  DS_RSS_MAX=$(printf '%s\n' "${DS_RSS[@]}" | sort -n | tail -1)
  {
    echo "ds.plan.seconds_runs=${DS_TIMES[*]}"; echo "ds.plan.vmhwm_kb_runs=${DS_HWM[*]}"
    echo "ds.plan.vmrss_after_kb_runs=${DS_RSS[*]}"; echo "ds.apr_bytes=$ds_size"
  } >> "$RESULTS"
fi

kill "$SAMPLER" 2>/dev/null || true
wait "$SAMPLER" 2>/dev/null || true
SAMPLER=""

# --- The table -----------------------------------------------------------------------------
MB() { calc "$1 * 1024 / 1000000" | xargs printf "%.1f"; }  # kB -> MB
goal_mark() { if [ "$(echo "$1" | bc)" -eq 1 ]; then echo "met"; else echo "**not met**"; fi; }
{
  echo "| measure | aprfs | baseline | ratio | goal |"
  echo "|---|---|---|---|---|"
  if has_section seq; then
    echo "| sequential read, shards cold (.apr via mount / shards direct, cat; median of $RUNS) | $(fmt "$SEQ_APR_COLD" 0) MB/s | $(fmt "$SEQ_DIRECT_COLD" 0) MB/s | $(fmt "$SEQ_R_COLD")$(spread "${R_COLD[@]}") | — |"
    echo "| sequential first read of the .apr, shards hot / shards direct hot | $(fmt "$SEQ_APR_HOT" 0) MB/s | $(fmt "$SEQ_DIRECT_HOT" 0) MB/s | $(fmt "$SEQ_R_HOT")$(spread "${R_HOT[@]}") | ≥ 0.7: $(goal_mark "$SEQ_R_HOT >= 0.7") |"
    echo "| second read of the .apr (kernel cache kept) / shards direct hot | $(fmt "$SEQ_APR_SECOND" 0) MB/s | $(fmt "$SEQ_DIRECT_HOT" 0) MB/s | $(fmt "$SEQ_R_SECOND")$(spread "${R_SECOND[@]}") | ≥ 0.9: $(goal_mark "$SEQ_R_SECOND >= 0.9") |"
  fi
  if has_section pagecache; then
    echo "| page cache added by one full read from cold, (shard + .apr pages) / model size (resident at the end: $(fmt "$PAGES_RESIDENT") x; mean folio: .apr $(kib_per "$apr_added" "$apr_folios") KiB, shards $(kib_per "$shard_added" "$shard_folios") KiB) | $(fmt "$PAGES_RATIO") x | $(fmt "$PAGES_DIRECT") x (shards read directly) | $(fmt "$PAGES_RATIO") | ≤ 1.1: $(goal_mark "$PAGES_RATIO <= 1.1") |"
  fi
  if has_section fio; then
    for bs in 4k 1m; do
      for state in cold hot; do
        var="FIO_${bs}_${state}"
        read -r ai ab di db <<< "${!var}"
        what="cold"; [ $state = hot ] && what="shards hot, .apr cold"
        if [ $bs = 4k ]; then
          echo "| fio randread 4k, $FIO_JOBS jobs, $what | $(fmt "$ai" 0) IOPS | $(fmt "$di" 0) IOPS | $(fmt "$(calc "$ai / $di")") | — |"
        else
          echo "| fio randread 1m, $FIO_JOBS jobs, $what | $(fmt "$(calc "$ab / 1000000")" 0) MB/s | $(fmt "$(calc "$db / 1000000")" 0) MB/s | $(fmt "$(calc "$ab / $db")") | — |"
        fi
      done
    done
  fi
  if has_section loader; then
    for v in "LOADER_1_HOT:1 process, shards hot, fresh mount:0.5" "LOADER_1_SECOND:1 process, second load (kernel cache kept):0.9" \
             "LOADER_1_COLD:1 process, cold:0.7" "LOADER_4_HOT:4 processes, shards hot, fresh mount:" "LOADER_4_COLD:4 processes, cold:"; do
      name=${v%%:*}; rest=${v#*:}; what=${rest%:*}; goal=${rest##*:}
      line=${!name}; a=${line%%|*}; d=${line#*|}
      ratio=$(calc "$(kv wall_s "$d") / $(kv wall_s "$a")")
      mark="—"; [ -n "$goal" ] && mark="≥ $goal: $(goal_mark "$ratio >= $goal")"
      echo "| mmap loader copying every tensor out in index order, $what (wall; MB/s per process) | $(kv wall_s "$a") s, $(kv mbs "$a") MB/s | $(kv wall_s "$d") s, $(kv mbs "$d") MB/s | $(fmt "$ratio") | $mark |"
    done
    # Four processes mapping one file lose nothing against one: their per-process speed ratio to
    # the shards' against the single process's.
    r1=$(calc "$(kv wall_s "${LOADER_1_HOT#*|}") / $(kv wall_s "${LOADER_1_HOT%%|*}")")
    r4=$(calc "$(kv wall_s "${LOADER_4_HOT#*|}") / $(kv wall_s "${LOADER_4_HOT%%|*}")")
    echo "| 4 processes against 1, shards hot, fresh mount: (4-process ratio) / (1-process ratio) | $(fmt "$r4") | $(fmt "$r1") | $(fmt "$(calc "$r4 / $r1")") | ≥ 0.95: $(goal_mark "$r4 / $r1 >= 0.95") |"
  fi
  if has_section convert; then
    echo "| time to first tensor: mount then load / convert then load (cold start) | $(fmt "$mount_first" 2) s | $(fmt "$conv_first" 2) s | $(fmt "$(calc "$conv_first / $mount_first")") | — |"
    echo "| total time: mount then load / convert then load | $(fmt "$mount_total" 2) s | $(fmt "$conv_total" 2) s | $(fmt "$(calc "$conv_total / $mount_total")") | — |"
    echo "| extra disk used | 0 bytes | $extra_disk bytes | — | — |"
  fi
  if has_section deepseek; then
    echo "| DeepSeek-V3 shape, real dtypes (F8_E4M3): mount + first byte of the .apr | $DS_FP8 after $(fmt "$ds_fp8_s" 2) s | — | — | — |"
    echo "| DeepSeek-V3 shape (FP8 as U8), $DS_SHARDS shards, $DS_TENSORS tensors: mount to first byte (plan build, median of $DS_RUNS, cold) | $(fmt "$DS_TIME" 2) s | — | — | — |"
    echo "| DeepSeek-V3 plan build: daemon VmHWM / VmRSS after | $(MB "$DS_HWM_MAX") MB / $(MB "$DS_RSS_MAX") MB | — | — | < 64 MB: $(goal_mark "$DS_HWM_MAX * 1024 < 64000000") |"
  fi
  awk '$1 != "setup" {if ($2 > rss[$1]) rss[$1] = $2; if ($3 > hwm[$1]) hwm[$1] = $3; if (!($1 in seen)) {seen[$1] = 1; order[++n] = $1}}
       END {for (i = 1; i <= n; i++) print order[i], rss[order[i]], hwm[order[i]]}' "$RSS_LOG" |
    while read -r label rss hwm; do
      record "rss.$label.max_vmrss_kb" "$rss"; record "rss.$label.max_vmhwm_kb" "$hwm"
      echo "| daemon RSS during $label: max VmRSS sampled / VmHWM | $(MB "$rss") MB / $(MB "$hwm") MB | — | — | < 64 MB: $(goal_mark "$hwm * 1024 < 64000000") |"
    done
} > "$TABLE"
cat "$TABLE"
echo
echo "raw numbers: $RESULTS; table: $TABLE"
