#!/usr/bin/env bash
# Starts a real Kubernetes control plane on 127.0.0.1 for tests: etcd 3.6.5,
# kube-apiserver (TLS, Node+RBAC authorization), kube-controller-manager and
# kube-scheduler v1.35.4, built by build.sh. No nodes: add fake ones with
# kwok-nodes.sh. Everything lives in the state dir ($K8S_RIG_STATE, default
# ${TMPDIR:-/tmp}/elasticdl-k8s); down.sh stops it and removes that dir.
#
#   eval "$(hack/k8s-rig/up.sh)"      # prints: export KUBECONFIG=<state>/admin.kubeconfig
#
# Env: K8S_RIG_STATE, K8S_RIG_BIN (use these binaries instead of build.sh),
# the port variables in lib.sh, K8S_RIG_TIMEOUT (seconds to wait, default 90).
set -euo pipefail
K8S_RIG_ME=up.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

S=$K8S_RIG_STATE
t0=$(date +%s.%N)
elapsed() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# ---- refuse to start twice ---------------------------------------------------
if rig_any_running; then
  running=()
  for c in "${K8S_RIG_COMPONENTS[@]}"; do rig_running "$c" && running+=("$c:$(rig_pid "$c")"); done
  rig_die "a rig is already running in $S (${running[*]}). Use it (export KUBECONFIG=$S/admin.kubeconfig) or stop it with hack/k8s-rig/down.sh first."
fi
if [[ -e "$S" ]]; then
  rig_log "removing stale state dir $S (no component of it is running)"
  rm -rf "$S"
fi
for p in "$K8S_RIG_ETCD_PORT" "$K8S_RIG_ETCD_PEER_PORT" "$K8S_RIG_API_PORT" "$K8S_RIG_KCM_PORT" "$K8S_RIG_SCHED_PORT"; do
  if rig_port_busy "$p"; then
    rig_die "port $p is already in use (by another rig or program: ss -tlnp 'sport = :$p'). Set K8S_RIG_*_PORT (see lib.sh) to run a second rig."
  fi
done

# ---- binaries -------------------------------------------------------------------
if [[ -n "${K8S_RIG_BIN:-}" ]]; then
  BIN=$K8S_RIG_BIN
else
  BIN=$("$K8S_RIG_DIR/build.sh" | tail -n1)
fi
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok; do
  [[ -x "$BIN/$b" ]] || rig_die "$BIN/$b missing (run hack/k8s-rig/build.sh)"
done

mkdir -p "$S"/{pki,logs,pids}
chmod 700 "$S"
echo "$BIN" >"$S/bin-dir"
ln -sfn "$BIN" "$S/bin"

# On any failure from here on: stop what was started, show the logs' tails.
# The state dir stays for inspection; the next up.sh or down.sh removes it.
failed_component=
cleanup_on_error() {
  local rc=$?
  [[ $rc -eq 0 ]] && return
  if [[ -n "$failed_component" ]]; then rig_tail_log "$failed_component"; fi
  for ((i = ${#K8S_RIG_COMPONENTS[@]} - 1; i >= 0; i--)); do rig_stop "${K8S_RIG_COMPONENTS[i]}" 5; done
  rig_log "failed after $(elapsed) s; logs kept in $S/logs (hack/k8s-rig/down.sh removes them)"
  exit "$rc"
}
trap cleanup_on_error EXIT

# ---- PKI (openssl) ----------------------------------------------------------------
# Same layout as kubeadm: a cluster CA for serving and client certs, a separate
# front-proxy CA for the aggregation layer's requestheader authentication, a
# key pair for service-account tokens, and one client identity per
# component (the default RBAC bindings grant system:kube-controller-manager and
# system:kube-scheduler what they need; the admin is in system:masters).
# ECDSA P-256 keys throughout (service-account tokens are ES256): RSA key
# generation took 13 s on a loaded 2-core machine, P-256 takes milliseconds.
pki=$S/pki
ossl() { openssl "$@" 2>>"$S/logs/openssl.log" || { failed_component=openssl; return 1; }; }

new_ca() { # name CN
  ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -sha256 -days 3650 \
    -keyout "$pki/$1.key" -out "$pki/$1.crt" -subj "/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature"
}

new_cert() { # ca name subject extendedKeyUsage [subjectAltName]
  local ca=$1 name=$2 subj=$3 eku=$4 san=${5:-}
  local ext="basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=$eku"
  [[ -n "$san" ]] && ext+="
subjectAltName=$san"
  ossl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -sha256 \
    -keyout "$pki/$name.key" -out "$pki/$name.csr" -subj "$subj"
  ossl x509 -req -sha256 -days 3650 -in "$pki/$name.csr" \
    -CA "$pki/$ca.crt" -CAkey "$pki/$ca.key" -set_serial "0x$(openssl rand -hex 16)" \
    -extfile <(printf '%s\n' "$ext") -out "$pki/$name.crt"
  rm -f "$pki/$name.csr"
}

new_ca ca elasticdl-k8s-rig-ca
new_ca front-proxy-ca elasticdl-k8s-rig-front-proxy-ca
new_cert ca apiserver /CN=kube-apiserver serverAuth \
  "IP:127.0.0.1,IP:$K8S_RIG_SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
new_cert ca apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
new_cert ca admin "/O=system:masters/CN=kubernetes-admin" clientAuth
new_cert ca controller-manager /CN=system:kube-controller-manager clientAuth
new_cert ca scheduler /CN=system:kube-scheduler clientAuth
new_cert front-proxy-ca front-proxy-client /CN=front-proxy-client clientAuth
ossl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/sa.key"
ossl pkey -in "$pki/sa.key" -pubout -out "$pki/sa.pub"
chmod 600 "$pki"/*.key
rig_log "PKI ready in $pki ($(elapsed) s)"

# ---- kubeconfigs (certificates embedded, so a copy works anywhere) -------------
server=https://127.0.0.1:$K8S_RIG_API_PORT
write_kubeconfig() { # file user cert-name
  local b64="base64 -w0"
  cat >"$S/$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: elasticdl-k8s-rig
  cluster:
    server: $server
    certificate-authority-data: $($b64 <"$pki/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $($b64 <"$pki/$3.crt")
    client-key-data: $($b64 <"$pki/$3.key")
contexts:
- name: $2@elasticdl-k8s-rig
  context:
    cluster: elasticdl-k8s-rig
    user: $2
current-context: $2@elasticdl-k8s-rig
EOF
  chmod 600 "$S/$1"
}
write_kubeconfig admin.kubeconfig kubernetes-admin admin
write_kubeconfig controller-manager.kubeconfig system:kube-controller-manager controller-manager
write_kubeconfig scheduler.kubeconfig system:kube-scheduler scheduler

# ---- wait helpers ---------------------------------------------------------------
# wait_for NAME DESCRIPTION COMMAND...: poll COMMAND every 0.2 s until it
# succeeds; fail (with NAME's log tail) if NAME exits or the deadline passes.
deadline=$(($(date +%s) + K8S_RIG_TIMEOUT))
wait_for() {
  local name=$1 what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    if ! rig_running "$name"; then
      failed_component=$name
      rig_die "$name exited while waiting for $what"
    fi
    if (($(date +%s) > deadline)); then
      failed_component=$name
      rig_die "timed out after ${K8S_RIG_TIMEOUT}s waiting for $what"
    fi
    sleep 0.2
  done
  rig_log "$what ($(elapsed) s)"
}
curl_api() { # path
  curl -sf --max-time 5 --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" "$server$1"
}
curl_healthz() { # port: kube-controller-manager and kube-scheduler serve /healthz unauthenticated
  curl -skf --max-time 5 "https://127.0.0.1:$1/healthz"
}

# ---- etcd -------------------------------------------------------------------------
# Plain HTTP, but only on 127.0.0.1. --unsafe-no-fsync: a test cluster's data
# is thrown away, and fsync latency dominates apiserver writes on shared disks.
etcd_url=http://127.0.0.1:$K8S_RIG_ETCD_PORT
rig_start etcd "$BIN/etcd" \
  --name rig \
  --data-dir "$S/etcd" \
  --listen-client-urls "$etcd_url" \
  --advertise-client-urls "$etcd_url" \
  --listen-peer-urls "http://127.0.0.1:$K8S_RIG_ETCD_PEER_PORT" \
  --initial-advertise-peer-urls "http://127.0.0.1:$K8S_RIG_ETCD_PEER_PORT" \
  --initial-cluster "rig=http://127.0.0.1:$K8S_RIG_ETCD_PEER_PORT" \
  --initial-cluster-state new \
  --unsafe-no-fsync \
  --log-level warn
wait_for etcd "etcd healthy on $etcd_url" curl -sf --max-time 2 "$etcd_url/health"

# ---- kube-apiserver -------------------------------------------------------------------
# --endpoint-reconciler-type=none: the default "lease" reconciler would publish
# 127.0.0.1 as the kubernetes Service endpoint, which the apiserver rejects.
# --requestheader-allowed-names: only the front-proxy client may assert
# X-Remote-User (kubeadm's setting; needed if the CAs are ever shared).
# --enable-admission-plugins adds to the default set (which already has
# Priority): Priority resolves priorityClassName, NodeRestriction pairs with the
# Node authorizer.
rig_start kube-apiserver "$BIN/kube-apiserver" \
  --advertise-address 127.0.0.1 \
  --bind-address 127.0.0.1 \
  --secure-port "$K8S_RIG_API_PORT" \
  --etcd-servers "$etcd_url" \
  --tls-cert-file "$pki/apiserver.crt" \
  --tls-private-key-file "$pki/apiserver.key" \
  --client-ca-file "$pki/ca.crt" \
  --authorization-mode Node,RBAC \
  --enable-admission-plugins NodeRestriction,Priority \
  --allow-privileged=true \
  --service-cluster-ip-range "$K8S_RIG_SERVICE_CIDR" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$pki/sa.pub" \
  --service-account-signing-key-file "$pki/sa.key" \
  --endpoint-reconciler-type none \
  --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
  --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
  --kubelet-preferred-address-types InternalIP,Hostname \
  --requestheader-client-ca-file "$pki/front-proxy-ca.crt" \
  --requestheader-allowed-names front-proxy-client \
  --requestheader-username-headers X-Remote-User \
  --requestheader-group-headers X-Remote-Group \
  --requestheader-extra-headers-prefix X-Remote-Extra- \
  --proxy-client-cert-file "$pki/front-proxy-client.crt" \
  --proxy-client-key-file "$pki/front-proxy-client.key" \
  --profiling=false
wait_for kube-apiserver "kube-apiserver /readyz ok on $server" curl_api /readyz

# ---- kube-controller-manager and kube-scheduler --------------------------------------
# --controllers: no node IPAM (no pod CIDRs to hand out) and no cloud.
# --use-service-account-credentials: each controller acts as its own
# ServiceAccount (as in kubeadm clusters), so RBAC is exercised as in production.
# --service-account-private-key-file: legacy token Secrets get signed.
# --flex-volume-plugin-dir: the default, /usr/libexec/kubernetes/kubelet-plugins/
# volume/exec/, is created on the host if missing; keep it in the state dir.
rig_start kube-controller-manager "$BIN/kube-controller-manager" \
  --kubeconfig "$S/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$S/controller-manager.kubeconfig" \
  --authorization-kubeconfig "$S/controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 \
  --secure-port "$K8S_RIG_KCM_PORT" \
  --controllers '*,-nodeipam,-cloud-node-lifecycle' \
  --leader-elect=false \
  --use-service-account-credentials=true \
  --service-account-private-key-file "$pki/sa.key" \
  --root-ca-file "$pki/ca.crt" \
  --cluster-signing-cert-file "$pki/ca.crt" \
  --cluster-signing-key-file "$pki/ca.key" \
  --cluster-name elasticdl-k8s-rig \
  --flex-volume-plugin-dir "$S/kubelet-plugins/volume/exec" \
  --profiling=false
rig_start kube-scheduler "$BIN/kube-scheduler" \
  --kubeconfig "$S/scheduler.kubeconfig" \
  --authentication-kubeconfig "$S/scheduler.kubeconfig" \
  --authorization-kubeconfig "$S/scheduler.kubeconfig" \
  --bind-address 127.0.0.1 \
  --secure-port "$K8S_RIG_SCHED_PORT" \
  --leader-elect=false \
  --profiling=false
wait_for kube-scheduler "kube-scheduler /healthz ok" curl_healthz "$K8S_RIG_SCHED_PORT"
wait_for kube-controller-manager "kube-controller-manager /healthz ok" curl_healthz "$K8S_RIG_KCM_PORT"
wait_for kube-controller-manager "ServiceAccount default/default exists" \
  curl_api /api/v1/namespaces/default/serviceaccounts/default

trap - EXIT
echo "$(elapsed)" >"$S/startup-seconds"
rig_log "up in $(elapsed) s: state $S, logs $S/logs, kubectl $BIN/kubectl"
echo "export KUBECONFIG=$S/admin.kubeconfig"
