#!/usr/bin/env bash
# The Kubernetes end-to-end suite (test/e2e, issue 4 item 4): builds elasticdl
# and the test control plane (hack/k8s-rig, cached under
# ~/.cache/elasticdl-k8s-rig: ~12 min cold, instant warm), starts a rig of its
# own (own state dir, ports 22379/22380/26443/26457/26459, jobs' master and PS
# ports from 28000; ELASTICDL_E2E_PORT_BASE=N moves them all to N+...), runs
# the tests on process nodes, and stops the rig. When a test
# fails, the rig's state dir (component logs, every pod's log) is kept and
# named at the end of the output. Flags are passed to `go test`, e.g.
#   hack/e2e.sh -run TestK8sPreemption
set -euo pipefail
cd "$(dirname "$0")/.."
hack/deps.sh --pytorch
echo "== e2e on the Kubernetes test rig (test/e2e)"
ELASTICDL_E2E=1 exec go test -count=1 -v -timeout 40m ./test/e2e "$@"
