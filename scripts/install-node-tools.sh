#!/usr/bin/env bash
# Installs the tests' pinned Node.js packages (tests/tools/package-lock.json): node-llama-cpp
# and its prebuilt CPU build of llama.cpp, which the GGUF view tests load models with, and
# @huggingface/gguf, which they parse the views with. No compiler and no download at install
# (NODE_LLAMA_CPP_SKIP_DOWNLOAD, no install scripts).
# Kept in a cache keyed by the lockfile and linked as tests/tools/node_modules, so a fresh
# clone on the same machine downloads nothing. Needs Node.js >= 20 and npm. `npm install` with
# the lockfile rather than `npm ci`: ci refuses a lockfile that lacks the other platforms'
# optional builds, which this one leaves out (the versions and hashes stay the lockfile's).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "install-node-tools: Node.js >= 20 and npm are needed (the GGUF tests run llama.cpp" \
       "through node-llama-cpp); Debian 12's nodejs is 18: use NodeSource's or the official build" >&2
  exit 1
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  echo "install-node-tools: Node.js $(node --version) is too old: node-llama-cpp needs >= 20" >&2
  exit 1
fi
key=$(sha256sum tests/tools/package-lock.json | cut -c1-16)
cache="${APRFS_NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/aprfs/node-tools}/$key"
if [ ! -e "$cache/complete" ]; then
  mkdir -p "$(dirname "$cache")"
  work=$(mktemp -d "$cache.XXXXXX")
  cp tests/tools/package.json tests/tools/package-lock.json "$work/"
  ( cd "$work" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --omit=optional --ignore-scripts \
      --no-audit --no-fund --loglevel=error )
  touch "$work/complete"
  rm -rf "$cache"
  mv "$work" "$cache"
fi
ln -sfn "$cache/node_modules" tests/tools/node_modules
echo "install-node-tools: node-llama-cpp $(node -p "require('$cache/node_modules/node-llama-cpp/package.json').version") in $cache"
