# Shared settings and helpers for up.sh, down.sh, kwok-nodes.sh, smoke.sh.
# Sourced, not run. Every setting can be overridden from the environment.

K8S_RIG_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Where a running rig keeps everything: PKI, kubeconfigs, etcd data, logs, PIDs.
K8S_RIG_STATE=${K8S_RIG_STATE:-${TMPDIR:-/tmp}/elasticdl-k8s}

# All on 127.0.0.1. Chosen away from the well-known ports (2379/2380, 6443,
# 10257, 10259) so a rig does not collide with a real cluster on the machine;
# run a second rig by setting K8S_RIG_STATE and these.
K8S_RIG_ETCD_PORT=${K8S_RIG_ETCD_PORT:-12379}
K8S_RIG_ETCD_PEER_PORT=${K8S_RIG_ETCD_PEER_PORT:-12380}
K8S_RIG_API_PORT=${K8S_RIG_API_PORT:-16443}
K8S_RIG_KCM_PORT=${K8S_RIG_KCM_PORT:-16457}
K8S_RIG_SCHED_PORT=${K8S_RIG_SCHED_PORT:-16459}

# Service network: the first address is the `kubernetes` Service's ClusterIP and
# is in the apiserver serving certificate.
K8S_RIG_SERVICE_CIDR=${K8S_RIG_SERVICE_CIDR:-10.96.0.0/16}
K8S_RIG_SERVICE_IP=${K8S_RIG_SERVICE_IP:-10.96.0.1}

# Seconds to wait for the control plane to become ready.
K8S_RIG_TIMEOUT=${K8S_RIG_TIMEOUT:-90}

# Components in start order; down.sh stops them in reverse (kwok first).
K8S_RIG_COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

rig_log() { printf '%s: %s\n' "${K8S_RIG_ME:-k8s-rig}" "$*" >&2; }
rig_die() { rig_log "ERROR: $*"; exit 1; }

# Print the last lines of a component's log to stderr.
rig_tail_log() {
  local name=$1 f="$K8S_RIG_STATE/logs/$1.log"
  if [[ -s "$f" ]]; then
    printf -- '---- last 40 lines of %s ----\n' "$f" >&2
    tail -n 40 "$f" >&2
    printf -- '---- end of %s ----\n' "$name" >&2
  else
    rig_log "$name: no log output ($f)"
  fi
}

# The PID of a component if it is running and is ours: its command line must
# mention the state dir (every component is started with a path in it), so a
# recycled PID of someone else's process is never signalled.
rig_pid() {
  local f="$K8S_RIG_STATE/pids/$1.pid" pid
  [[ -f "$f" ]] || return 1
  pid=$(<"$f")
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  # Right after the fork the command line is still the shell's (or briefly
  # unreadable): give a just-started component a moment before deciding.
  local try ok=
  for try in 1 2 3 4 5 6 7 8 9 10; do
    [[ -r "/proc/$pid/cmdline" ]] || return 1
    # (the process may exit between the test and the read: quiet redirect)
    if { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -qF -- "$K8S_RIG_STATE/"; then ok=1; break; fi
    sleep 0.1
  done
  [[ -n "$ok" ]] || return 1
  # A zombie (exited, not yet reaped) is not running.
  [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]] || return 1
  echo "$pid"
}

rig_running() { rig_pid "$1" >/dev/null; }

# Any of our components alive?
rig_any_running() {
  local c
  for c in "${K8S_RIG_COMPONENTS[@]}"; do rig_running "$c" && return 0; done
  return 1
}

# Start a component detached in its own session (so it outlives the calling
# shell and a Ctrl-C there), stdout+stderr to logs/NAME.log, PID to pids/NAME.pid.
rig_start() {
  local name=$1; shift
  mkdir -p "$K8S_RIG_STATE/logs" "$K8S_RIG_STATE/pids"
  setsid "$@" >>"$K8S_RIG_STATE/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$K8S_RIG_STATE/pids/$name.pid"
}

# Stop a component: SIGTERM, wait up to $2 s (default 10), then SIGKILL.
rig_stop() {
  local name=$1 grace=${2:-10} pid i
  pid=$(rig_pid "$name") || { rm -f "$K8S_RIG_STATE/pids/$name.pid"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < grace * 10; i++)); do
    rig_running "$name" || break
    sleep 0.1
  done
  if rig_running "$name"; then
    rig_log "$name (pid $pid) did not exit after SIGTERM in ${grace}s; SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do rig_running "$name" || break; sleep 0.1; done
  fi
  rm -f "$K8S_RIG_STATE/pids/$name.pid"
}

# Is something listening on 127.0.0.1:PORT (or on all addresses)?
rig_port_busy() {
  ss -Htln "( sport = :$1 )" 2>/dev/null | grep -q .
}

# The bin dir of the running rig (recorded by up.sh).
rig_bin() {
  [[ -f "$K8S_RIG_STATE/bin-dir" ]] || rig_die "no rig in $K8S_RIG_STATE (run hack/k8s-rig/up.sh first)"
  cat "$K8S_RIG_STATE/bin-dir"
}

rig_kubectl() {
  "$(rig_bin)/kubectl" --kubeconfig "$K8S_RIG_STATE/admin.kubeconfig" "$@"
}
