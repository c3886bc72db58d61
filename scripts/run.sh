#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: installs what aprfs needs, builds the aprfs binary
# (not the tests: scripts/test.sh builds them, in the same build/), and mounts your models (the
# Hugging Face cache, plus a small example model) at MOUNTPOINT (default ~/models).
set -euo pipefail
cd "$(dirname "$0")/.."
MOUNTPOINT=${1:-$HOME/models}

./scripts/install-deps.sh
TARGETS=aprfs ./scripts/build.sh -DBUILD_TESTING=OFF

# A tiny llama-shaped model, so there is something to see even with an empty HF cache.
EXAMPLES=build/example-models
if [ ! -f "$EXAMPLES/example/model.safetensors.index.json" ]; then
  python3 tests/tools/make_model.py "$EXAMPLES/example" --preset tiny --shards 2 >/dev/null
fi

# A mountpoint left dead by a killed daemon cannot even be stat'ed; `aprfs mount` replaces it.
mkdir -p "$MOUNTPOINT" 2>/dev/null || true
if mountpoint -q "$MOUNTPOINT"; then build/fs/aprfs umount "$MOUNTPOINT"; fi
build/fs/aprfs mount "$MOUNTPOINT" --source "$EXAMPLES" --log-file build/aprfs.log
echo
echo "aprfs is serving $MOUNTPOINT (log: build/aprfs.log):"
ls -l "$MOUNTPOINT"
echo
echo "Try:  build/fs/aprfs inspect $MOUNTPOINT/example.apr"
echo "      build/fs/aprfs ls --source $EXAMPLES"
echo "Stop: build/fs/aprfs umount $MOUNTPOINT"
