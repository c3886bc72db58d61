#!/usr/bin/env bash
# Configures and builds aprfs into build/ (or $BUILD_DIR): every target, or only $TARGETS
# (e.g. TARGETS=aprfs). Extra arguments go to the configure step (e.g. -DBUILD_TESTING=OFF).
# Ninja when it is installed (the generator of an existing build folder is kept).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
command -v ninja >/dev/null && export CMAKE_GENERATOR=${CMAKE_GENERATOR:-Ninja}
targets=()
for target in ${TARGETS:-}; do targets+=(--target "$target"); done
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} "$@"
cmake --build "$BUILD_DIR" -j "$(nproc)" "${targets[@]}"
