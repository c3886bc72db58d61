#!/usr/bin/env bash
# Builds aprfs and its tests with sanitizers and runs them (after scripts/install-deps.sh):
#   address  ASan + UBSan (build-asan/): the whole suite.
#   thread   TSan (build-tsan/): the unit tests and every test of concurrent readers, fetches,
#            daemons and load, and the S3 mounts.
# The daemons the tests start are sanitized too. Every process writes its reports under
# /tmp/aprfs-<kind>-reports.*/, and any report fails the run, even one from a daemon whose test
# passed (a report at exit, a leak).
# Each build has only what its tests run: the aprfs binary and the test executables (not bench/;
# for TSan, the executables of its tests).
# Usage: scripts/sanitize.sh [--build-only|--test-only] [address|thread]...
#   (default: both kinds, built then tested; extra ctest args in CTEST_ARGS)
set -euo pipefail
cd "$(dirname "$0")/.."
PHASES=(build test)
case "${1:-}" in
  --build-only) PHASES=(build); shift ;;
  --test-only) PHASES=(test); shift ;;
esac
KINDS=("$@")
[ ${#KINDS[@]} -gt 0 ] || KINDS=(address thread)
command -v ninja >/dev/null && export CMAKE_GENERATOR=${CMAKE_GENERATOR:-Ninja}

# Tests where threads or processes meet: what TSan is for.
# (Every S3 mount test: a minute of test time, ~30 s of the run.)
TSAN_TESTS='^(ChunkStore|ChunkCache|ChunkMemory|Fetcher|FooterCrc|ReadAhead|HfCacheWriter|VirtualFile|RemoteConcurrency|RemoteLoad|RemoteMemory|Load|ReplacedShard|S3Mount)'
TSAN_TESTS+='|Concurrent|Racing|Threads|Killed|Sigterm|Lazy'

build_dir() {
  local build=build-${1/address/asan}
  echo "${build/thread/tsan}"
}

build_kind() {
  local kind=$1 build
  build=$(build_dir "$kind")
  local targets=()
  if [ "$kind" = thread ]; then
    targets=(--target aprfs aprfs_unit_tests aprfs_fuse_tests aprfs_remote_tests aprfs_s3_tests)
  fi
  local started=$SECONDS
  echo "== $kind: building $build"
  # -g1: line numbers in reports; no -DNDEBUG: assert() on. -Og for ASan + UBSan, whose checks
  # made -O1 the slowest step of CI (a TU: 17 s at -O1, 12 s at -Og, 7 s unsanitized).
  local optimize=-O1
  if [ "$kind" = address ]; then optimize=-Og; fi
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$optimize -g1" \
    -DAPRFS_SANITIZE="$kind" -DBUILD_TESTING=ON -DAPRFS_BENCH=OFF >/dev/null
  cmake --build "$build" -j "$(nproc)" "${targets[@]}" >/dev/null
  echo "== $kind: built in $((SECONDS - started)) s"
}

test_kind() {
  local kind=$1 build
  build=$(build_dir "$kind")
  # World-writable: the unprivileged tests run the daemon as another user.
  local reports
  reports=$(mktemp -d /tmp/aprfs-$kind-reports.XXXXXX)
  chmod 1777 "$reports"
  local filter=()
  if [ "$kind" = thread ]; then filter=(-R "$TSAN_TESTS"); fi
  echo "== $kind: running the tests in $build"
  # The normal build's test times, if it ran: ctest starts the longest tests first.
  local costs=Testing/Temporary/CTestCostData.txt
  if [ ! -f "$build/$costs" ] && [ -f "${BUILD_DIR:-build}/$costs" ]; then
    mkdir -p "$(dirname "$build/$costs")"
    cp "${BUILD_DIR:-build}/$costs" "$build/$costs"
  fi
  local status=0
  # Sanitized code is 2-10x slower: the load tests run shorter than in the normal build, and
  # two tests run at a time (most of a test's time is waiting for mounts and servers).
  (cd "$build" &&
    APRFS_LOAD_SECONDS=${APRFS_LOAD_SECONDS:-20} \
    ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:abort_on_error=0" \
    UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1" \
    TSAN_OPTIONS="log_path=$reports/tsan:halt_on_error=0:second_deadlock_stack=1" \
    ctest --output-on-failure --timeout 900 -j "${SANITIZE_JOBS:-2}" "${filter[@]}" \
      ${CTEST_ARGS:-}) || status=1
  if compgen -G "$reports/*" >/dev/null; then
    echo "== $kind: sanitizer reports:"
    for report in "$reports"/*; do
      echo "--- $report"
      head -60 "$report"
    done
    status=1
  fi
  return $status
}

status=0
for kind in "${KINDS[@]}"; do
  case $kind in
    address|thread) ;;
    *) echo "unknown sanitizer '$kind' (address or thread)" >&2; exit 2 ;;
  esac
  for phase in "${PHASES[@]}"; do
    if [ "$phase" = build ]; then
      build_kind "$kind"
    else
      test_kind "$kind" || status=1
    fi
  done
done
exit $status
