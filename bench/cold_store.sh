#!/usr/bin/env bash
# Cold sequential read of a remote model's .apr served from its complete chunk store (no HF
# cache, the store's pages dropped before each read), binary A vs binary B, alternating 3 times.
# Usage: bench/cold_store.sh A_BINARY B_BINARY   (the bench-1g model of bench/remote.sh)
set -euo pipefail
A=$(realpath "$1"); B=$(realpath "$2")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TOOLS=$ROOT/tests/tools
W=/var/tmp/aprfs-store-ab; mkdir -p $W/mnt
MODEL=$W/models/bench-1g
if [ ! -f "$MODEL/model.safetensors.index.json" ]; then
  python3 "$TOOLS/make_model.py" "$MODEL" --preset bench-1g --sparse >/dev/null
fi
python3 $TOOLS/hub_fixture.py stop $W/hub >/dev/null 2>&1 || true
rm -rf $W/hub
python3 $TOOLS/hub_fixture.py start $W/hub --repo "bench/bench-1g=$MODEL" --hash-cache $W/hashes.json > $W/fixture.json
EP=$(python3 -c "import json; print(json.load(open('$W/fixture.json'))['endpoint'])")
run() {  # binary
  HF_ENDPOINT=$EP $1 mount $W/mnt --repo bench/bench-1g --no-hf-cache --cache-dir $W/cache --log-file $W/log &
  for i in $(seq 100); do mountpoint -q $W/mnt && break; sleep 0.1; done
  local f=$W/mnt/bench-1g.apr
  [ -e "$f" ] || f=$(find $W/mnt -name 'bench-1g.apr' | head -1)
  python3 - $W/cache <<'PY'
import os, sys
for root, _, files in os.walk(sys.argv[1]):
    for n in files:
        fd = os.open(os.path.join(root, n), os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)
PY
  local t0=$(date +%s.%N)
  dd if=$f of=/dev/null bs=1M 2>/dev/null
  local t1=$(date +%s.%N)
  echo "$1: $(echo "scale=1; $(stat -c %s $f) / ($t1 - $t0) / 1000000" | bc) MB/s"
  $1 umount $W/mnt; wait
}
run $A >/dev/null   # fills the chunk store
for i in 1 2 3; do run $A; run $B; done
python3 $TOOLS/hub_fixture.py stop $W/hub >/dev/null
