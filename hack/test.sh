#!/usr/bin/env bash
# README command 2: the whole test suite, as CI runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
hack/deps.sh --pytorch
# deps.sh installed PyTorch: its tests must run, not skip.
export ELASTICDL_REQUIRE_PYTORCH=1
echo "== gofmt"
bad=$(gofmt -l $(git ls-files '*.go' | grep -v '\.pb\.go$') 2>/dev/null || true)
if [ -n "$bad" ]; then echo "gofmt would change: $bad"; exit 1; fi
echo "== go vet"
go vet ./...
go vet -tags openblas ./nn/... ./model/...
echo "== unit and integration tests (race detector)"
go test -race -count=1 -timeout 30m ./...
echo "== OpenBLAS build"
go test -tags openblas -count=1 -timeout 10m ./nn/... ./model/...
echo "== e2e: Kubernetes backend on a real control plane (hack/e2e.sh)"
hack/e2e.sh
