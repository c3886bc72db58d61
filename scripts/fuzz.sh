#!/usr/bin/env bash
# Builds the libFuzzer targets of format/ and of the S3 answers' parser (Clang, ASan + UBSan)
# and runs each for FUZZ_SECONDS (default 60) from the seed corpora of tests/fuzz/corpus. A
# crash leaves its input in $BUILD_DIR/artifacts/ and fails the script; turn it into a
# regression test by copying it to tests/fuzz/regressions/<target>/ (replayed by ctest in the
# normal build).
# Usage: scripts/fuzz.sh [--build-only|--run-only] [TARGET...]
#   (env: FUZZ_SECONDS, BUILD_DIR=build-fuzz)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-fuzz}
SECONDS_EACH=${FUZZ_SECONDS:-60}
BUILD=1 RUN=1
case "${1:-}" in
  --build-only) RUN=0; shift ;;
  --run-only) BUILD=0; shift ;;
esac
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(safetensors_import_fuzz json_inputs_fuzz apr_reader_fuzz s3_xml_fuzz)

if [ $BUILD = 1 ]; then
  command -v ninja >/dev/null && export CMAKE_GENERATOR=${CMAKE_GENERATOR:-Ninja}
  CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -DAPRFS_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${TARGETS[@]}" >/dev/null
fi
[ $RUN = 1 ] || exit 0
mkdir -p "$BUILD_DIR/artifacts"
fuzz_one() {
  local target=$1
  # The seeds are copied: what the fuzzer finds stays out of the repository.
  local corpus="$BUILD_DIR/corpus/$target"
  mkdir -p "$corpus"
  cp -n tests/fuzz/corpus/"$target"/* "$corpus"/ 2>/dev/null || true
  if ! "$BUILD_DIR/tests/fuzz/$target" -max_total_time="$SECONDS_EACH" -max_len=65536 \
      -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$BUILD_DIR/artifacts/$target-" "$corpus" 2>"$BUILD_DIR/$target.log"; then
    echo "FAILED: $target (input in $BUILD_DIR/artifacts/, log $BUILD_DIR/$target.log):"
    grep -E 'ERROR|SUMMARY|runtime error|deadly signal' "$BUILD_DIR/$target.log" | head -20
    return 1
  fi
  echo "fuzzed $target for ${SECONDS_EACH}s:"
  grep -E '^stat::number_of_executed_units|^stat::new_units_added' "$BUILD_DIR/$target.log" \
    | sed 's/^/  /'
}

# The targets run side by side: each still gets its FUZZ_SECONDS, the run takes that once.
echo "fuzzing ${TARGETS[*]} for ${SECONDS_EACH}s"
pids=()
for target in "${TARGETS[@]}"; do
  fuzz_one "$target" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
exit $status
