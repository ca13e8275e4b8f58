#!/usr/bin/env bash
# Builds SeaweedFS's `weed` (its S3 gateway is the tests' S3 server) from the
# Go module proxy into a content-addressed cache directory, as
# hack/k8s-rig/build.sh does for the control plane:
#
#   ${S3_CACHE:-$HOME/.cache/elasticdl-s3-build}/<key>/bin/weed
#
# key = sha256 of `go version`, this script and build/go.{mod,sum}. The last
# line on stdout is the bin directory; progress goes to stderr.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${S3_CACHE:-$HOME/.cache/elasticdl-s3-build}
log() { printf 'build.sh: %s\n' "$*" >&2; }
command -v go >/dev/null || { log "go not found in PATH"; exit 1; }
key=$(
  cd "$here"
  { go version; for f in build.sh build/go.mod build/go.sum; do printf '== %s\n' "$f"; cat "$f"; done; } | sha256sum | cut -c1-16
)
bin="$cache_root/$key/bin"
if [[ -x "$bin/weed" ]]; then
  log "cached: $bin"
  echo "$bin"
  exit 0
fi
mkdir -p "$cache_root"
# One build per key at a time: a second caller waits, then finds the cache.
exec 9>"$cache_root/$key.lock"
flock 9
if [[ -x "$bin/weed" ]]; then
  echo "$bin"
  exit 0
fi
tmp=$(mktemp -d "$cache_root/.build-$key.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
log "building weed into $bin (key $key); cold, ~10 min on 2 cores"
t=$SECONDS
(
  cd "$here/build"
  go mod download
  go build -buildvcs=false -mod=readonly -ldflags "-s -w" -o "$tmp/weed" github.com/seaweedfs/seaweedfs/weed
)
log "weed: $((SECONDS - t)) s"
mkdir -p "$cache_root/$key"
rm -rf "$bin"
mv "$tmp" "$bin"
trap - EXIT
echo "$bin"
