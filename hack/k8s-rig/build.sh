#!/usr/bin/env bash
# Builds the test control plane's binaries (etcd 3.6.5, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl v1.35.4, kwok v0.8.0) from
# Go modules into a content-addressed cache directory:
#
#   ${K8S_RIG_CACHE:-$HOME/.cache/elasticdl-k8s-rig}/<key>/bin
#
# key = sha256 of `go version`, this script and everything under build/ that
# decides the output (go.mod, go.sum, *.go of both modules). If that directory
# already holds every binary, nothing is built. The last line on stdout is the
# bin directory; progress goes to stderr. Usage:
#
#   BIN=$(hack/k8s-rig/build.sh | tail -n1)
#
# Env: K8S_RIG_CACHE (cache root), K8S_RIG_FORCE=1 (rebuild even if cached).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build_dir="$here/build"
cache_root=${K8S_RIG_CACHE:-$HOME/.cache/elasticdl-k8s-rig}

K8S_VERSION=v1.35.4
BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok)

log() { printf 'build.sh: %s\n' "$*" >&2; }

command -v go >/dev/null || { log "go not found in PATH"; exit 1; }

# The key covers the inputs in a fixed order, each file named, so renaming or
# moving a file changes it too.
key=$(
  cd "$here"
  {
    go version
    for f in build.sh build/go.mod build/go.sum build/*.go build/etcd/*.go \
             build/kwok/go.mod build/kwok/go.sum build/kwok/*.go; do
      printf '== %s\n' "$f"
      cat "$f"
    done
  } | sha256sum | cut -c1-16
)
out="$cache_root/$key"
bin="$out/bin"

have_all() {
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$1/$b" ]] || return 1; done
}

if [[ "${K8S_RIG_FORCE:-}" != 1 ]] && have_all "$bin"; then
  log "cached: $bin"
  echo "$bin"
  exit 0
fi

mkdir -p "$cache_root"
# One build per key at a time: a second caller waits, then finds the cache.
exec 9>"$cache_root/$key.lock"
if ! flock -n 9; then
  log "another build of $key is running; waiting for it"
  flock 9
  if [[ "${K8S_RIG_FORCE:-}" != 1 ]] && have_all "$bin"; then
    log "cached: $bin"
    echo "$bin"
    exit 0
  fi
fi

tmp=$(mktemp -d "$cache_root/.build-$key.XXXXXX")
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT

export CGO_ENABLED=0
# -mod=readonly: go.sum must already be complete (run `go mod tidy` in
# build/ or build/kwok/ after changing a go.mod).
flags=(-trimpath -buildvcs=false -mod=readonly)

# Version stamps, as the Kubernetes release build sets them (see
# k8s.io/component-base/version/base.go and k8s.io/client-go/pkg/version/base.go).
# Without them the binaries say v0.0.0-master and kubectl/kwok version checks
# and the apiserver's /version look wrong.
major=${K8S_VERSION#v}; major=${major%%.*}
minor=${K8S_VERSION#v}; minor=${minor#*.}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done

start=$SECONDS
log "building into $bin (key $key); a cold build takes ~12-15 min on 2 cores"

t=$SECONDS
(
  cd "$build_dir"
  go mod download
  go build "${flags[@]}" -ldflags "$ldflags" -o "$tmp/" \
    ./etcd \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl
)
log "etcd + kubernetes binaries: $((SECONDS - t)) s"

# kwok is a separate module: it needs k8s.io/* v0.36, the control plane is
# pinned to v0.35.4 (see build/kwok/tools.go).
t=$SECONDS
(
  cd "$build_dir/kwok"
  go mod download
  go build "${flags[@]}" -ldflags "-s -w" -o "$tmp/" sigs.k8s.io/kwok/cmd/kwok
)
log "kwok: $((SECONDS - t)) s"

have_all "$tmp" || { log "missing binaries in $tmp"; ls -l "$tmp" >&2; exit 1; }

# Publish atomically: readers see either no bin dir or a complete one.
mkdir -p "$out"
rm -rf "$bin.old"
[[ -d "$bin" ]] && mv "$bin" "$bin.old"
mv "$tmp" "$bin"
rm -rf "$bin.old"
trap - EXIT

log "done in $((SECONDS - start)) s: $(du -sh "$bin" | cut -f1) in $bin"
echo "$bin"
