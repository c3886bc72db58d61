#!/usr/bin/env bash
# Installs the dependencies, builds, and runs every test: unit, real FUSE mounts, the fake Hub,
# the service integration; then each libFuzzer target of format/ for FUZZ_SECONDS (default 60);
# then the suite again under ASan + UBSan, and its concurrency tests under TSan.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
# Two tests at a time: most of a test's time is waiting for mounts, servers and daemons.
(cd "${BUILD_DIR:-build}" && ctest --output-on-failure --timeout 600 -j "${TEST_JOBS:-2}" "$@")
FUZZ_SECONDS=${FUZZ_SECONDS:-60} ./scripts/fuzz.sh
./scripts/sanitize.sh
