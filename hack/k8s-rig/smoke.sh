#!/usr/bin/env bash
# End-to-end check of a running rig (up.sh): readyz, RBAC, ServiceAccounts and
# tokens, a Deployment Running on kwok nodes, ownerReference garbage
# collection, namespace deletion, and PriorityClass preemption. Uses its own
# namespace and its own kwok node (kwok-smoke-0, 2 CPU), removed at the end.
#
#   eval "$(hack/k8s-rig/up.sh)" && hack/k8s-rig/smoke.sh && hack/k8s-rig/down.sh
set -euo pipefail
K8S_RIG_ME=smoke.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ns=rig-smoke
node=kwok-smoke-0
k() { rig_kubectl "$@"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
ok() { printf 'ok   %s\n' "$*"; }
fail() { printf 'FAIL %s\n' "$*"; exit 1; }
# until_ok SECONDS COMMAND...: poll every 0.05 s.
until_ok() {
  local end; end=$(awk -v t="$1" -v n="$(now)" 'BEGIN { printf "%.3f", n + t }'); shift
  until "$@" >/dev/null 2>&1; do
    awk -v e="$end" -v n="$(now)" 'BEGIN { exit !(n > e) }' && return 1
    sleep 0.05
  done
}
phase() { [[ "$(k -n $ns get pod "$1" -o jsonpath='{.status.phase}')" == "$2" ]]; }
gone() { ! k -n $ns get pod "$1" >/dev/null 2>&1; }
no_pods() { [[ -z "$(k -n $ns get pods -l "$1" -o name)" ]]; }

[[ "$(k get --raw /readyz)" == ok ]] && ok "/readyz" || fail "/readyz"
[[ "$(k version -o json | grep -c '"gitVersion": "v1.35.4"')" == 2 ]] && ok "server and kubectl v1.35.4" || fail "version"

k delete namespace $ns --ignore-not-found --wait=true >/dev/null
k create namespace $ns >/dev/null
t=$(now)
until_ok 20 k -n $ns get serviceaccount default || fail "default ServiceAccount in $ns not created"
ok "ServiceAccount $ns/default created by kube-controller-manager ($(since "$t") s)"
until_ok 20 k -n $ns get configmap kube-root-ca.crt || fail "kube-root-ca.crt not published"
ok "ConfigMap $ns/kube-root-ca.crt published"
k -n $ns create token default --duration 10m | grep -q '^ey' && ok "TokenRequest: kubectl create token" || fail "create token"
[[ "$(k auth can-i create pods -n $ns --as system:serviceaccount:$ns:default)" == no ]] \
  && ok "RBAC: default ServiceAccount may not create pods" || fail "RBAC allows too much"

K8S_RIG_KWOK_PREFIX=kwok-smoke "$K8S_RIG_DIR/kwok-nodes.sh" 1 2 4Gi
ok "kwok node $node Ready (2 CPU, 4Gi)"

# ---- Deployment + garbage collection ---------------------------------------------------
t=$(now)
k apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: $ns}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      nodeSelector: {kubernetes.io/hostname: $node}
      containers:
      - {name: c, image: fake, resources: {requests: {cpu: 100m, memory: 64Mi}}}
EOF
k -n $ns rollout status deploy/web --timeout=60s >/dev/null || fail "Deployment web not available"
ok "Deployment web: 3/3 pods Running on $node ($(since "$t") s)"
pod=$(k -n $ns get pods -l app=web -o jsonpath='{.items[0].metadata.name}')
k -n $ns get pod "$pod" -o jsonpath='{.spec.volumes[*].projected.sources[*].serviceAccountToken.path}' | grep -q token \
  && ok "ServiceAccount admission: projected token volume in $pod" || fail "no projected SA token in $pod"
t=$(now)
k -n $ns delete deploy web --wait=false >/dev/null
no_rs() { [[ -z "$(k -n $ns get replicasets -l app=web -o name)" ]]; }
until_ok 30 no_rs || fail "ReplicaSet of deleted Deployment not garbage-collected"
until_ok 30 no_pods app=web || fail "pods of deleted Deployment not garbage-collected"
ok "ownerReference GC: ReplicaSet and pods of deleted Deployment gone ($(since "$t") s)"

# As ElasticDL does it: workers and a ConfigMap owned by the master pod.
k -n $ns run master --image fake --restart Never --overrides "{\"spec\":{\"nodeSelector\":{\"kubernetes.io/hostname\":\"$node\"}}}" >/dev/null
until_ok 30 phase master Running || fail "master pod not Running"
uid=$(k -n $ns get pod master -o jsonpath='{.metadata.uid}')
owner="ownerReferences: [{apiVersion: v1, kind: Pod, name: master, uid: $uid, blockOwnerDeletion: true}]"
k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: worker-0, namespace: $ns, labels: {job: smoke}, $owner}
spec:
  nodeSelector: {kubernetes.io/hostname: $node}
  containers: [{name: c, image: fake}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: job-config, namespace: $ns, $owner}
data: {a: b}
EOF
until_ok 30 phase worker-0 Running || fail "worker-0 not Running"
t=$(now)
k -n $ns delete pod master --wait=false >/dev/null
cm_gone() { ! k -n $ns get configmap job-config >/dev/null 2>&1; }
until_ok 30 gone worker-0 || fail "worker-0 not garbage-collected after its owner was deleted"
until_ok 30 cm_gone || fail "ConfigMap not garbage-collected after its owner was deleted"
ok "ownerReference GC: worker pod and ConfigMap owned by master pod gone ($(since "$t") s)"

# ---- PriorityClass preemption --------------------------------------------------------------
k apply -f - >/dev/null <<EOF
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: rig-smoke-low}
value: 100
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: rig-smoke-high}
value: 1000
EOF
pod_yaml() { # name priorityClass
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: $ns}
spec:
  priorityClassName: $2
  nodeSelector: {kubernetes.io/hostname: $node}
  terminationGracePeriodSeconds: 0
  containers:
  - {name: c, image: fake, resources: {requests: {cpu: 1500m}}}
EOF
}
pod_yaml low rig-smoke-low | k apply -f - >/dev/null
until_ok 30 phase low Running || fail "low-priority pod not Running"
[[ "$(k -n $ns get pod low -o jsonpath='{.spec.priority}')" == 100 ]] \
  && ok "low pod Running, spec.priority=100 (Priority admission)" || fail "priority not resolved"
t=$(now)
pod_yaml high rig-smoke-high | k apply -f - >/dev/null
until_ok 30 phase high Running || {
  k -n $ns get pods -o wide; k -n $ns get events --sort-by=.lastTimestamp | tail -n 20; fail "high-priority pod not Running"
}
ok "high pod Running $(since "$t") s after create (node has room for only one)"
until_ok 30 gone low || fail "preempted pod low still exists"
ok "low pod preempted and deleted"
k -n $ns get events --field-selector involvedObject.name=low -o jsonpath='{range .items[*]}{.reason}{" "}{.message}{"\n"}{end}' \
  | grep -m1 -i preempt | sed 's/^/     event: /' || true

# ---- cleanup -------------------------------------------------------------------------------
t=$(now)
k delete namespace $ns --wait=true --timeout=60s >/dev/null || fail "namespace $ns not deleted"
ok "namespace $ns deleted ($(since "$t") s)"
k delete priorityclass rig-smoke-low rig-smoke-high >/dev/null
k delete node $node >/dev/null
echo "smoke: all checks passed"
