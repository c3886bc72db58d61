#!/usr/bin/env bash
# Installs the dependencies, builds, and runs every test: unit, real FUSE mounts, the fake Hub,
# the service integration; then each libFuzzer target of format/ for FUZZ_SECONDS (default 60);
# then the suite again under ASan + UBSan, and its concurrency tests under TSan.
set -euo pipefail
cd "$(dirname "$0")/.."
step() {  # runs a step and says how long it took: CI's budget is spent here
  local started=$SECONDS
  "$@"
  echo "== ${*}: $((SECONDS - started)) s (total $((SECONDS / 60)) min $((SECONDS % 60)) s)"
}
step ./scripts/install-deps.sh
step ./scripts/build.sh
# Two tests at a time: most of a test's time is waiting for mounts, servers and daemons.
step ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure --timeout 600 -j "${TEST_JOBS:-2}" "$@"
step env FUZZ_SECONDS="${FUZZ_SECONDS:-60}" ./scripts/fuzz.sh
step ./scripts/sanitize.sh
