#!/usr/bin/env bash
# Adds N process nodes to the rig started by up.sh, each with CPU cores and
# MEM memory (Kubernetes quantities): one procnode (virtual-kubelet v1.13.0
# provider, hack/k8s-rig/procnode/) per node, which runs the containers of
# pods bound to it as local processes (see procnode/README.md).
#
#   hack/k8s-rig/procnodes.sh 2 4 8Gi     # procnode-0..1, 4 CPU, 8Gi each
#   hack/k8s-rig/procnodes.sh --stop      # stop them (down.sh does this)
#   hack/k8s-rig/procnodes.sh --stop-prefix P  # stop only P-0..P-N and delete their Nodes
#   hack/k8s-rig/procnodes.sh --build     # only build; prints the binary
#
# Nodes carry the label elasticdl.io/process-node=true (and type=procnode);
# target them with `nodeSelector: {elasticdl.io/process-node: "true"}`.
# Each node's pods get IPs of their own from a /24 of 127.64.0.0/10 that the
# node keeps for the life of the rig (procnode --pod-cidr; the whole of
# 127/8 reaches lo, nothing to set up).
# Env: K8S_RIG_STATE, K8S_RIG_PROCNODE_PREFIX (procnode),
# K8S_RIG_PROCNODE_MAX_PODS (110, at most 253), K8S_RIG_PROCNODE_IMAGE_MAP
# (comma-separated IMAGE=PATH, e.g. elasticdl:latest=$PWD/bin/elasticdl),
# K8S_RIG_PROCNODE_POD_IPS (per-pod, or shared: every pod's IP is 127.0.0.1),
# K8S_RIG_PROCNODE_ARGS (extra procnode flags, word-split), K8S_RIG_CACHE,
# K8S_RIG_PROCNODE_BIN (use this binary instead of building).
set -euo pipefail
shopt -s extglob
K8S_RIG_ME=procnodes.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
S=$K8S_RIG_STATE

usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

# pod_cidr NODE prints the node's pod CIDR: the k-th node ever started on
# this rig gets 127.(64 + k/256).(k%256).0/24, recorded in
# $S/procnode-pod-cidrs ("NODE k" lines) so that a node started again keeps
# its range. A flock makes concurrent callers take distinct ranges.
pod_cidr() {
  local name=$1 f="$S/procnode-pod-cidrs"
  (
    flock 9
    touch "$f"
    k=$(awk -v n="$name" '$1 == n { print $2; exit }' "$f")
    if [[ -z "$k" ]]; then
      k=$(wc -l <"$f")
      ((k < 64 * 256)) || rig_die "no pod CIDR left for $name: $k nodes have had one (rm $f on a rig without process nodes)"
      echo "$name $k" >>"$f"
    fi
    echo "127.$((64 + k / 256)).$((k % 256)).0/24"
  ) 9>"$S/procnode-pod-cidrs.lock"
}

# ---- build (cached like build.sh: key = go version + the module's files) -----------------
build_procnode() {
  if [[ -n "${K8S_RIG_PROCNODE_BIN:-}" ]]; then echo "$K8S_RIG_PROCNODE_BIN"; return; fi
  local src="$K8S_RIG_DIR/procnode" root=${K8S_RIG_CACHE:-$HOME/.cache/elasticdl-k8s-rig} key out tmp t
  command -v go >/dev/null || rig_die "go not found in PATH"
  key=$(
    cd "$src"
    {
      go version
      for f in go.mod go.sum $(ls *.go | grep -v '_test\.go$'); do printf '== %s\n' "$f"; cat "$f"; done
    } | sha256sum | cut -c1-16
  )
  out="$root/procnode-$key"
  if [[ "${K8S_RIG_FORCE:-}" != 1 && -x "$out/procnode" ]]; then echo "$out/procnode"; return; fi
  mkdir -p "$root"
  exec 8>"$root/procnode-$key.lock"
  flock 8
  if [[ "${K8S_RIG_FORCE:-}" != 1 && -x "$out/procnode" ]]; then echo "$out/procnode"; return; fi
  tmp=$(mktemp -d "$root/.build-procnode-$key.XXXXXX")
  t=$SECONDS
  rig_log "building procnode into $out (~1 min with a warm Go build cache, ~4 min cold)"
  if ! (cd "$src" && CGO_ENABLED=0 go build -trimpath -buildvcs=false -mod=readonly -ldflags "-s -w" -o "$tmp/procnode" .); then
    rm -rf "$tmp"; rig_die "procnode build failed"
  fi
  rm -rf "$out"
  mv "$tmp" "$out"
  rig_log "built procnode in $((SECONDS - t)) s"
  echo "$out/procnode"
}

# ---- stop: procnodes, then any pod process group a killed procnode left behind -----------
# With a prefix P, only the nodes named P-<number> (and their leftovers).
stop_all() {
  local prefix=${1:-} f c pid dir pg p node
  [[ -d "$S/pids" ]] || return 0
  for f in "$S"/pids/procnode-*.pid; do
    [[ -e "$f" ]] || continue
    c=$(basename "$f" .pid)
    if [[ -n "$prefix" && "${c#procnode-}" != "$prefix"-+([0-9]) ]]; then continue; fi
    if pid=$(rig_pid "$c"); then rig_log "stopping $c (pid $pid)"; fi
    rig_stop "$c" "${K8S_RIG_GRACE:-10}"
  done
  # procnode removes NAME.pgid when a container's process exits; a file left
  # means procnode died without cleaning up. Only processes whose environment
  # names that pod dir (PROCNODE_POD_DIR) are killed.
  for f in "$S"/procnodes/*/pods/*/*.pgid; do
    [[ -e "$f" ]] || continue
    dir=$(dirname "$f")
    if [[ -n "$prefix" ]]; then
      node=${dir#"$S"/procnodes/}; node=${node%%/*}
      [[ "$node" == "$prefix"-+([0-9]) ]] || continue
    fi
    pg=$(<"$f")
    [[ "$pg" =~ ^[0-9]+$ ]] || continue
    for p in $(ps -eo pid=,pgid= | awk -v g="$pg" '$2 == g { print $1 }'); do
      if { tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | grep -qxF "PROCNODE_POD_DIR=$dir"; then
        rig_log "killing leftover pod process $p (group $pg, $dir)"
        kill -KILL "$p" 2>/dev/null || true
      fi
    done
    rm -f "$f"
  done
}

# Stop the procnodes P-<number> and delete their Node objects (pods bound to
# them are left to the caller: delete them first if they should end cleanly).
stop_prefix() {
  local prefix=$1 nodes=() f c
  [[ -n "$prefix" ]] || rig_die "--stop-prefix needs a prefix"
  for f in "$S"/pids/procnode-"$prefix"-*.pid; do
    [[ -e "$f" ]] || continue
    c=$(basename "$f" .pid); c=${c#procnode-}
    [[ "$c" == "$prefix"-+([0-9]) ]] && nodes+=("$c")
  done
  stop_all "$prefix"
  if ((${#nodes[@]} > 0)) && rig_running kube-apiserver; then
    rig_kubectl delete node --ignore-not-found --wait=false "${nodes[@]}" >&2 || true
  fi
}

case "${1:-}" in
  --stop) stop_all; exit 0 ;;
  --stop-prefix) [[ $# -eq 2 ]] || usage; stop_prefix "$2"; exit 0 ;;
  --build) build_procnode; exit 0 ;;
  -h|--help|'') usage ;;
esac
[[ $# -eq 3 ]] || usage
n=$1 cpu=$2 mem=$3
[[ "$n" =~ ^[0-9]+$ ]] || rig_die "N must be a number, got '$n'"
prefix=${K8S_RIG_PROCNODE_PREFIX:-procnode}
max_pods=${K8S_RIG_PROCNODE_MAX_PODS:-110}
BIN=$(rig_bin)
rig_running kube-apiserver || rig_die "kube-apiserver of $S is not running (hack/k8s-rig/up.sh)"
PN=$(build_procnode)
t0=$(date +%s.%N)
elapsed() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

extra=()
if [[ -n "${K8S_RIG_PROCNODE_IMAGE_MAP:-}" ]]; then
  IFS=, read -ra maps <<<"$K8S_RIG_PROCNODE_IMAGE_MAP"
  for m in "${maps[@]}"; do [[ -n "$m" ]] && extra+=(--image-map "$m"); done
fi
# shellcheck disable=SC2206
[[ -n "${K8S_RIG_PROCNODE_ARGS:-}" ]] && extra+=(${K8S_RIG_PROCNODE_ARGS})

names=()
for ((i = 0; i < n; i++)); do
  name=$prefix-$i
  c=procnode-$name
  names+=("$name")
  if rig_running "$c"; then
    rig_log "$c is already running (pid $(rig_pid "$c")); left as it is"
    continue
  fi
  root="$S/procnodes/$name"
  mkdir -p "$root"
  ips=()
  case "${K8S_RIG_PROCNODE_POD_IPS:-per-pod}" in
    per-pod) cidr=$(pod_cidr "$name") || exit 1; ips=(--pod-cidr "$cidr") ;;
    shared) ;;
    *) rig_die "K8S_RIG_PROCNODE_POD_IPS=${K8S_RIG_PROCNODE_POD_IPS}: want per-pod or shared" ;;
  esac
  # --root-dir names the state dir, so rig_pid/down.sh recognise the process.
  rig_start "$c" "$PN" \
    --kubeconfig "$S/admin.kubeconfig" \
    --name "$name" --cpu "$cpu" --memory "$mem" --pods "$max_pods" \
    --root-dir "$root" \
    --client-ca "$S/pki/ca.crt" \
    "${ips[@]}" "${extra[@]}"
done

# Wait for every node to exist and be Ready.
deadline=$((SECONDS + 60))
for name in "${names[@]}"; do
  while :; do
    if ! rig_running "procnode-$name"; then
      rig_tail_log "procnode-$name"
      rig_die "procnode-$name exited"
    fi
    st=$(rig_kubectl get node "$name" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)
    [[ "$st" == True ]] && break
    ((SECONDS < deadline)) || { rig_tail_log "procnode-$name"; rig_die "node $name not Ready in 60 s"; }
    sleep 0.2
  done
done
((n > 0)) && rig_log "$n process node(s) ${prefix}-0..$((n - 1)) Ready with cpu=$cpu memory=$mem in $(elapsed) s; logs $S/logs/procnode-*.log, pods under $S/procnodes/"
exit 0
