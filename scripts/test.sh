#!/usr/bin/env bash
# Installs the dependencies, builds, and runs every test: unit, real FUSE mounts, the fake Hub,
# the service integration; then the suite again under ASan + UBSan, and its concurrency tests
# under TSan; then each libFuzzer target of format/ for FUZZ_SECONDS (default 60).
# A test run is mostly waiting for mounts, servers and daemons: while one runs, the next build
# (ASan during the suite, TSan during the ASan run, the fuzz targets during the TSan run) takes
# the idle CPU at the lowest priority (nice 19), so the tests keep theirs. The fuzzers run last,
# alone: they need both cores.
set -euo pipefail
cd "$(dirname "$0")/.."
LOGS=$(mktemp -d /tmp/aprfs-test.XXXXXX)
status=0
say_took() {  # CI's budget is spent here: each step says how long it took
  echo "== $1: $2 s (total $((SECONDS / 60)) min $((SECONDS % 60)) s)"
}
step() {  # runs a step; a failed one fails the run at the end (the other steps still run, so
          # that one run shows every failure)
  local started=$SECONDS
  "$@" || { echo "== FAILED: $*"; status=1; }
  say_took "$*" $((SECONDS - started))
}
background() {  # NAME COMMAND...: starts a step at the lowest priority, its output in a file
  local name=$1
  shift
  # In a process group of its own (its id in NAME.pgid), for join's renice.
  ( started=$SECONDS
    code=0
    setsid --wait bash -c 'echo $$ >"$0"; exec nice -n 19 "$@"' "$LOGS/$name.pgid" "$@" \
      >"$LOGS/$name.log" 2>&1 || code=$?
    echo "$code $((SECONDS - started))" >"$LOGS/$name.done" ) &
  echo "$!" >"$LOGS/$name.pid"
}
join() {  # NAME: waits for a background step, shows its output and how long it took
  local name=$1 started=$SECONDS code took
  # Waited for, it is the only work left: back to our priority (root may lower niceness; on a
  # shared machine a nice-19 build would otherwise starve behind everyone else's).
  if [ -s "$LOGS/$name.pgid" ]; then
    renice -n "$(nice)" -g "$(cat "$LOGS/$name.pgid")" >/dev/null 2>&1 || true
  fi
  wait "$(cat "$LOGS/$name.pid")" || true
  read -r code took <"$LOGS/$name.done"
  cat "$LOGS/$name.log"
  [ "$code" = 0 ] || { echo "== FAILED: $name"; status=1; }
  echo "== $name: $took s in the background, $((SECONDS - started)) s waited for" \
    "(total $((SECONDS / 60)) min $((SECONDS % 60)) s)"
}

step ./scripts/install-deps.sh --all
step ./scripts/install-node-tools.sh
# A build that fails leaves nothing to test.
step ./scripts/build.sh -DBUILD_TESTING=ON -DAPRFS_BENCH=ON
[ $status = 0 ] || exit 1
background asan-build ./scripts/sanitize.sh --build-only address
# Two tests at a time: most of a test's time is waiting for mounts, servers and daemons.
step ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure --timeout 600 \
  -j "${TEST_JOBS:-2}" "$@"
join asan-build
background tsan-build ./scripts/sanitize.sh --build-only thread
step ./scripts/sanitize.sh --test-only address
join tsan-build
background fuzz-build ./scripts/fuzz.sh --build-only
step ./scripts/sanitize.sh --test-only thread
join fuzz-build
step env FUZZ_SECONDS="${FUZZ_SECONDS:-60}" ./scripts/fuzz.sh --run-only
exit $status
