#!/usr/bin/env bash
# Installs the Debian 12 packages aprfs needs to build and run (scripts/run.sh); with --all, also
# those of the tests and benchmarks (scripts/test.sh): GoogleTest; nginx, aria2 and curl for the
# fake Hub; a Ceph monitor, OSD and radosgw for the S3 server of the S3 tests
# (tests/tools/radosgw.sh); mount(8), setpriv and useradd, systemd-analyze (no running systemd
# needed) and groff for the service tests; getfattr; Clang and its runtimes for fuzzing; fio and
# perf for bench/all.sh. Idempotent: when every package is installed already, it changes nothing
# (and skips `apt-get update`). With --bench: the baselines bench/s3.sh compares against
# (rclone, awscli), which no test needs.
# Usage: scripts/install-deps.sh [--all|--bench]
set -euo pipefail
MAIN=(
  build-essential cmake ninja-build pkg-config ca-certificates
  libfuse3-dev fuse3
  nlohmann-json3-dev libcli11-dev libspdlog-dev
  libcurl4-openssl-dev libssl-dev zlib1g-dev libisal-dev libboost-dev libpugixml-dev
  python3
)
EXTRAS=(
  libgtest-dev openssl
  nginx-light aria2 curl
  ceph-mon ceph-osd radosgw
  mount util-linux bsdutils passwd systemd groff-base
  attr
  clang libclang-rt-14-dev
  fio linux-perf
)
BENCH=(rclone awscli bc)
case "${1:-}" in
  "") PACKAGES=("${MAIN[@]}") ;;
  --all) PACKAGES=("${MAIN[@]}" "${EXTRAS[@]}") ;;
  --bench) PACKAGES=("${BENCH[@]}") ;;
  *) echo "usage: $0 [--all|--bench]" >&2; exit 2 ;;
esac

missing=()
for package in "${PACKAGES[@]}"; do
  if [ "$(dpkg-query -W -f='${db:Status-Status}' "$package" 2>/dev/null)" != installed ]; then
    missing+=("$package")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages are installed"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
