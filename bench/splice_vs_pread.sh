#!/usr/bin/env bash
# Read path experiment (issue #2): the same 4.6 GiB of phi-4.apr through the mount, its shard
# hot in the page cache, served by pread() into a buffer (+ incremental footer CRC) or by
# splicing the shard's pages into /dev/fuse (FUSE_BUF_IS_FD; no CRC possible). Alternating
# runs, fresh mount each (so the .apr pages are cold). Needs the build of the commit that
# carried the APRFS_SPLICE switch (see bench/README.md).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
APRFS=${APRFS:-$ROOT/build/fs/aprfs}
WORK=${WORK:-/var/tmp/aprfs-bench}
RUNS=${RUNS:-5}
MP=$WORK/mnt
SHARD=$WORK/models/phi-4/model-00001-of-00006.safetensors
[ -f "$SHARD" ] || { echo "run bench/phi4.sh first (it generates the model)"; exit 1; }
mkdir -p "$MP"
dd if="$SHARD" of=/dev/null bs=1M status=none  # shard pages hot
for run in $(seq 1 "$RUNS"); do
  for mode in pread splice; do
    if [ $mode = splice ]; then export APRFS_SPLICE=1; else unset APRFS_SPLICE; fi
    "$APRFS" mount "$MP" --no-hf-cache --source "$WORK/models"
    s=$(date +%s.%N)
    dd if="$MP/phi-4.apr" of=/dev/null bs=1M count=4600 status=none
    e=$(date +%s.%N)
    echo "$run $mode $(echo "$e - $s" | bc)"
    "$APRFS" umount "$MP"
  done
done | awk '{print; t[$2]=t[$2] " " $3} END {for (m in t) print m ":" t[m]}'
