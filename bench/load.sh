#!/usr/bin/env bash
# Soak run of the load test (issue #5): 16 threads and 2 mmap processes read random ranges of a
# 6-shard, 48 MiB mounted model for SECONDS_TOTAL seconds (default 600; CI runs 60), every byte
# compared.
# A fresh random seed each run unless SEED is given; the test prints it, so a failure reproduces
# with SEED=<it>.
# Usage: bench/load.sh   (env: SECONDS_TOTAL=600 SEED=... BUILD_DIR=build; needs root and /dev/fuse)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
SEED=${SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
APRFS_LOAD_SECONDS=${SECONDS_TOTAL:-600} APRFS_LOAD_SEED=$SEED \
  "$BUILD_DIR/tests/aprfs_fuse_tests" \
  --gtest_filter='LoadTest.SixteenReadersAndMappersAtRandomRangesGetExactBytes'
