#!/usr/bin/env bash
# Installs the dependencies, builds, and runs every test: unit, real FUSE mounts, the fake Hub,
# the service integration; then each libFuzzer target of format/ for FUZZ_SECONDS (default 60);
# then the suite again under ASan + UBSan, and its concurrency tests under TSan.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
(cd "${BUILD_DIR:-build}" && ctest --output-on-failure --timeout 600 "$@")
FUZZ_SECONDS=${FUZZ_SECONDS:-60} ./scripts/fuzz.sh
./scripts/sanitize.sh
