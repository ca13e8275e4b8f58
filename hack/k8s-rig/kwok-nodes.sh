#!/usr/bin/env bash
# Adds N simulated nodes to the rig started by up.sh, each with CPU cores and
# MEM memory (Kubernetes quantities: 4, 500m, 8Gi), and starts kwok (once) to
# run them: kwok marks the nodes Ready, renews their Leases, and moves pods
# bound to them to Running (and deletes them when they are deleted, at once).
# Pods never run anything; they complete only if owned by a Job.
#
#   hack/k8s-rig/kwok-nodes.sh 4 8 16Gi     # kwok-node-0..3, 8 CPU, 16Gi each
#
# Node names are PREFIX-0..N-1 (K8S_RIG_KWOK_PREFIX, default kwok-node); run it
# again with another prefix to add nodes of another size, or with the same
# prefix to change capacity. Nodes carry the label type=kwok and the
# annotation kwok.x-k8s.io/node=fake, and kwok manages only nodes with that
# annotation (so other nodes, e.g. a later process-running provider, are left
# alone). Env: K8S_RIG_STATE, K8S_RIG_KWOK_PREFIX, K8S_RIG_KWOK_MAX_PODS (110).
set -euo pipefail
K8S_RIG_ME=kwok-nodes.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $# -eq 3 ]] || { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
n=$1 cpu=$2 mem=$3
[[ "$n" =~ ^[0-9]+$ ]] || rig_die "N must be a number, got '$n'"
prefix=${K8S_RIG_KWOK_PREFIX:-kwok-node}
max_pods=${K8S_RIG_KWOK_MAX_PODS:-110}
S=$K8S_RIG_STATE
BIN=$(rig_bin)
rig_running kube-apiserver || rig_die "kube-apiserver of $S is not running (hack/k8s-rig/up.sh)"
t0=$(date +%s.%N)
elapsed() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# ---- kwok ---------------------------------------------------------------------------
# v0.8.0 has no built-in behaviour: without Stage definitions it refuses to
# start ("no stages found"). kwok/*.yaml are the upstream "fast" stages
# (kustomize/stage/fast in sigs.k8s.io/kwok v0.8.0: node-initialize,
# node-heartbeat-with-lease, pod-ready, pod-complete, pod-delete). --config is
# given explicitly so ~/.kwok/kwok.yaml is never read.
if ! rig_running kwok; then
  cfg=()
  for f in "$K8S_RIG_DIR"/kwok/*.yaml; do cfg+=(--config "$f"); done
  rig_start kwok "$BIN/kwok" \
    --kubeconfig "$S/admin.kubeconfig" \
    "${cfg[@]}" \
    --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --node-lease-duration-seconds 40 \
    --cidr 10.244.0.1/16
  sleep 0.5
  if ! rig_running kwok; then rig_tail_log kwok; rig_die "kwok exited at start"; fi
  rig_log "kwok started (pid $(rig_pid kwok)), log $S/logs/kwok.log"
fi

# ---- nodes -----------------------------------------------------------------------------
# Status is accepted on Node create (as a kubelet registers); on re-runs the
# status subresource is patched so a changed capacity takes effect.
names=()
manifest=
# Each node gets its own InternalIP (pods' hostIP), 10.243.X.Y from a hash of
# its name, so nodes from several runs/prefixes rarely share one.
node_ip() { local h; h=$(printf '%s' "$1" | cksum | cut -d' ' -f1); echo "10.243.$((h / 254 % 256)).$((h % 254 + 1))"; }
for ((i = 0; i < n; i++)); do
  name=$prefix-$i
  names+=("node/$name")
  manifest+="---
apiVersion: v1
kind: Node
metadata:
  name: $name
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: \"0\"
  labels:
    type: kwok
    kubernetes.io/hostname: $name
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
status:
  phase: Running
  addresses:
  - {type: InternalIP, address: $(node_ip "$name")}
  - {type: Hostname, address: $name}
  allocatable: {cpu: \"$cpu\", memory: \"$mem\", pods: \"$max_pods\"}
  capacity: {cpu: \"$cpu\", memory: \"$mem\", pods: \"$max_pods\"}
  nodeInfo:
    architecture: amd64
    operatingSystem: linux
    kubeletVersion: fake
"
done
((n > 0)) || { rig_log "no nodes requested"; exit 0; }
printf '%s' "$manifest" | rig_kubectl apply -f - >&2
status_patch="{\"status\":{\"allocatable\":{\"cpu\":\"$cpu\",\"memory\":\"$mem\",\"pods\":\"$max_pods\"},\"capacity\":{\"cpu\":\"$cpu\",\"memory\":\"$mem\",\"pods\":\"$max_pods\"}}}"
for nm in "${names[@]}"; do
  rig_kubectl patch "$nm" --subresource=status --type=merge -p "$status_patch" >/dev/null
done
if ! rig_kubectl wait --for=condition=Ready "${names[@]}" --timeout=60s >/dev/null; then
  rig_tail_log kwok
  rig_die "nodes did not become Ready in 60 s"
fi
rig_log "$n node(s) ${prefix}-0..$((n - 1)) Ready with cpu=$cpu memory=$mem in $(elapsed) s"
