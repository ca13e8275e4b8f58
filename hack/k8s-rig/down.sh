#!/usr/bin/env bash
# Stops the rig started by up.sh (and kwok from kwok-nodes.sh): SIGTERM, then
# SIGKILL after a grace period, in reverse start order; then removes the state
# dir. Only processes whose PID file is in the state dir and whose command line
# names the state dir are signalled.
#
# Env: K8S_RIG_STATE, K8S_RIG_KEEP_STATE=1 (keep the state dir, e.g. to upload
# the logs from CI), K8S_RIG_GRACE (seconds before SIGKILL, default 10).
set -euo pipefail
K8S_RIG_ME=down.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

S=$K8S_RIG_STATE
if [[ ! -e "$S" ]]; then
  rig_log "nothing to stop: $S does not exist"
  exit 0
fi
# Process nodes (procnodes.sh) first, with any pod processes they left behind.
"$K8S_RIG_DIR/procnodes.sh" --stop
for ((i = ${#K8S_RIG_COMPONENTS[@]} - 1; i >= 0; i--)); do
  c=${K8S_RIG_COMPONENTS[i]}
  if pid=$(rig_pid "$c"); then
    rig_log "stopping $c (pid $pid)"
    rig_stop "$c" "${K8S_RIG_GRACE:-10}"
  fi
done
if rig_any_running; then
  rig_die "some components are still running; state dir $S kept"
fi
if [[ "${K8S_RIG_KEEP_STATE:-}" == 1 ]]; then
  rm -rf "$S/pids"
  rig_log "stopped; state dir kept: $S"
else
  rm -rf "$S"
  rig_log "stopped; removed $S"
fi
