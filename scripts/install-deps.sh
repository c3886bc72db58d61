#!/usr/bin/env bash
# Installs every Debian 12 package aprfs needs to build, run, test and benchmark. The service
# tests use mount(8), setpriv and useradd, systemd-analyze (no running systemd needed) and groff;
# bench/all.sh uses fio and perf.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends \
  build-essential cmake pkg-config ca-certificates \
  libfuse3-dev fuse3 \
  nlohmann-json3-dev libcli11-dev libspdlog-dev \
  libcurl4-openssl-dev libssl-dev zlib1g-dev libisal-dev libboost-dev \
  libgtest-dev \
  python3 \
  nginx-light aria2 curl \
  mount util-linux bsdutils passwd systemd groff-base \
  attr \
  clang libclang-rt-14-dev \
  fio linux-perf
