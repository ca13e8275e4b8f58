#!/usr/bin/env bash
# The seeds' experiments (docs/experiments.md), full versions, on a test
# control plane of their own (hack/e2e.sh's rig: built and cached like the
# e2e suite's). Each rewrites its section of docs/experiments.md and its
# plot and data under docs/experiments/. Names (comma-separated, default
# all): gang (experiment 1, gang vs elastic), services (experiment 2,
# training beside an online service), convergence (experiment 3, real
# compute on the local backend: no control plane), sharing (experiment 4,
# many jobs sharing a cluster), allreduce (experiment 5, two AllReduce
# jobs on 6 workers' room).
#   hack/experiments.sh            # all
#   hack/experiments.sh gang       # one
# Extra arguments go to `go test` (e.g. -v is on already).
set -euo pipefail
cd "$(dirname "$0")/.."
names="${1:-all}"
[ $# -gt 0 ] && shift
hack/deps.sh
declare -A tests=([gang]=GangVsElastic [services]=BesideServices [sharing]=SharedCluster [allreduce]=AllReduceGang)
run=()
convergence=
if [ "$names" = all ]; then
  run=("${tests[@]}")
  convergence=1
else
  IFS=, read -ra want <<<"$names"
  for n in "${want[@]}"; do
    if [ "$n" = convergence ]; then
      convergence=1
      continue
    fi
    [ -n "${tests[$n]:-}" ] || { echo "unknown experiment $n (known: ${!tests[*]} convergence)" >&2; exit 2; }
    run+=("${tests[$n]}")
  done
fi
if [ -n "$convergence" ]; then
  echo "== experiment convergence (test/local, real compute)"
  ELASTICDL_EXPERIMENT=convergence OPENBLAS_NUM_THREADS=1 \
    go test -tags "$(hack/blas-tags.sh)" -count=1 -v -timeout 60m ./test/local -run '^TestExperimentConvergence$' "$@"
fi
[ ${#run[@]} -gt 0 ] || exit 0
pattern="^TestExperiment($(IFS='|'; echo "${run[*]}"))\$"
echo "== experiments: $names ($pattern)"
# The calibration runs in the test binary: build it with the workers' BLAS,
# one thread, as one worker computes.
ELASTICDL_E2E=1 ELASTICDL_EXPERIMENT="$names" OPENBLAS_NUM_THREADS=1 \
  exec go test -tags "$(hack/blas-tags.sh)" -count=1 -v -timeout 90m ./test/e2e -run "$pattern" "$@"
