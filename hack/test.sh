#!/usr/bin/env bash
# README command 2: the whole test suite, as CI runs it. Each phase prints
# its time ("== phase: N s"), and go test each package's, so that CI's log
# says where the time goes (docs/development.md keeps the table).
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
ts=$SECONDS
phase() { echo "== $1 took $((SECONDS - ts)) s (total $((SECONDS - t0)) s)"; ts=$SECONDS; }
hack/deps.sh --pytorch
# deps.sh installed PyTorch: its tests must run, not skip.
export ELASTICDL_REQUIRE_PYTORCH=1
# ... and Chromium: the web pages' tests must run, not skip.
export ELASTICDL_REQUIRE_BROWSER=1
# ... and python3-onnx and onnxruntime-node: the ONNX export checks too.
export ELASTICDL_REQUIRE_ONNX=1
# PostgreSQL and MariaDB for the SQL tests (hack/db.sh, which installs them
# when missing): servers already running are used and left running, others
# are started and stopped at the end. Their tests must run, not skip.
db_was_up=false
hack/db.sh env >/dev/null 2>&1 && db_was_up=true
db_down() { $db_was_up || hack/db.sh down >/dev/null 2>&1 || true; }
trap db_down EXIT
db_env="$(hack/db.sh up)" # not eval "$(...)": set -e would miss its failure
eval "$db_env"
export ELASTICDL_REQUIRE_DB=1
phase "dependencies"
# The rig's binaries (hack/k8s-rig/build.sh: instant when cached, 12-15 min
# cold) and its process node (procnodes.sh --build, and the compile of its
# tests: 4 min cold) and the S3 server (hack/s3/build.sh: SeaweedFS, 8-16
# min cold) build at the lowest priority beside the unit tests, on
# the CPU they leave idle; e2e waits for them. A failed build fails the run
# there. Its own session, so that one kill stops go build too; Linux
# schedules a session as one autogroup, fair against the others whatever the
# nice of its processes, so the group's own nice is lowered as well.
rig_log=$(mktemp -t elasticdl-rig-build.XXXXXX)
setsid nice -n 19 bash -c '
  echo 19 >/proc/self/autogroup 2>/dev/null || true
  set -e
  hack/k8s-rig/build.sh
  hack/k8s-rig/procnodes.sh --build
  hack/s3/build.sh
  cd hack/k8s-rig/procnode && go vet ./... && go test -count=1 -run "^$" ./... >/dev/null' >"$rig_log" 2>&1 &
rig_pid=$!
# The object-storage tests' S3 server, likewise (hack/s3.sh): started after
# its build, stopped at the end unless it was running before.
s3_was_up=false
hack/s3.sh env >/dev/null 2>&1 && s3_was_up=true
s3_down() { $s3_was_up || hack/s3.sh down >/dev/null 2>&1 || true; }
trap 'kill -- -$rig_pid 2>/dev/null || true; db_down; s3_down' EXIT
echo "== gofmt"
bad=$(gofmt -l $(git ls-files '*.go' | grep -v '\.pb\.go$') 2>/dev/null || true)
if [ -n "$bad" ]; then echo "gofmt would change: $bad"; exit 1; fi
echo "== size rules (hack/housecheck)"
go run ./hack/housecheck
echo "== go vet"
go vet ./...
go vet -tags openblas ./nn/... ./model/...
phase "gofmt, size rules, go vet"
echo "== unit and integration tests (race detector)"
# Through hack/testreport: each package's line, a failed test's whole
# output, and the slowest tests at the end (where the time goes). 45m:
# test/local alone took 30 min on 2026-11-28 (its PyTorch tests ~940 s
# of it, under CI's load), and go test's timeout is per package.
report_bin=$(mktemp -t elasticdl-testreport.XXXXXX)
go build -o "$report_bin" ./hack/testreport
# TestCrashConsistency runs once, in the object-storage phase, with its
# checkpoints on S3 (the harder backend; the local one is every other
# checkpoint test's).
go test -race -count=1 -timeout 45m -json -skip '^TestCrashConsistency$' ./... | "$report_bin" -slowest 40
rm -f "$report_bin"
phase "unit and integration tests (race detector)"
echo "== the job core's simulations, without the race detector (one goroutine each: nothing to race)"
go test -count=1 -timeout 10m -run '^(TestSimulatedJobs|TestRingRendezvousRandomized)$' ./internal/master/job
phase "simulations"
echo "== the rig's binaries and process node (built beside the unit tests)"
if ! wait $rig_pid; then
  echo "building the rig failed:"; cat "$rig_log"; exit 1
fi
grep -E '^(build|procnodes)\.sh:' "$rig_log" || true
rm -f "$rig_log"
phase "waiting for the rig's binaries"
echo "== object storage: the S3 tests against a real S3 server (hack/s3.sh, SeaweedFS)"
s3_env="$(hack/s3.sh up)" # not eval "$(...)": set -e would miss its failure
eval "$s3_env"
ELASTICDL_REQUIRE_S3=1 go test -race -count=1 -timeout 10m ./internal/storage/... ./internal/ps/checkpoint/...
ELASTICDL_REQUIRE_S3=1 go test -race -count=1 -timeout 10m -run 'OnS3' ./data
ELASTICDL_REQUIRE_S3=1 go test -count=1 -timeout 15m -run '^(TestCrashConsistency|TestS3.*)$' ./test/local
phase "object storage"
echo "== the rig's process node (hack/k8s-rig/procnode, a module of its own)"
(cd hack/k8s-rig/procnode && go vet ./... && go test -count=1 ./...)
phase "process node"
echo "== OpenBLAS build"
go test -tags openblas -count=1 -timeout 10m ./nn/... ./model/...
phase "OpenBLAS build"
echo "== e2e: Kubernetes backend on a real control plane (hack/e2e.sh)"
# TestK8sObjectStorage uses the object-storage phase's S3 server, still up.
ELASTICDL_REQUIRE_S3=1 hack/e2e.sh
phase "e2e"
