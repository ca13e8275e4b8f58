#!/usr/bin/env bash
# Installs onnxruntime-node, the runtime the ONNX export tests run models
# in (internal/export, test/local TestExportONNX), into a cache that
# outlives the clone: ~/.cache/elasticdl-npm (or $ELASTICDL_NPM_DIR), once
# per pinned version. --ignore-scripts: its install script downloads
# extra (CUDA) binaries from elsewhere; the CPU ones ship in the package.
# Prints the cache directory.
#   hack/onnxruntime.sh
set -euo pipefail
version=1.30.0
dir="${ELASTICDL_NPM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/elasticdl-npm}"
pkg="$dir/node_modules/onnxruntime-node/package.json"
if [ -f "$pkg" ] && grep -q "\"version\": \"$version\"" "$pkg"; then
  echo "$dir"
  exit 0
fi
command -v npm >/dev/null || { echo "missing npm: apt-get install nodejs npm" >&2; exit 1; }
mkdir -p "$dir"
echo "installing onnxruntime-node@$version into $dir ..." >&2
npm install --ignore-scripts --no-audit --no-fund --prefix "$dir" "onnxruntime-node@$version" >&2
echo "$dir"
