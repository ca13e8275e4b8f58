#!/usr/bin/env bash
# Runs the benchmarks recorded in bench/RESULTS.md. Single-thread figures pin
# GOMAXPROCS and OpenBLAS to one thread.
set -euo pipefail
cd "$(dirname "$0")/.."
lscpu | grep -E 'Model name|^CPU\(s\)' || true
echo "== training step, batch 64, one thread (openblas, then default gonum)"
GOMAXPROCS=1 OPENBLAS_NUM_THREADS=1 go test -tags openblas -run '^$' -bench TrainStep -benchtime 3s ./model/zoo/
GOMAXPROCS=1 go test -run '^$' -bench TrainStep -benchtime 3s ./model/zoo/
echo "== local job, 1 epoch of Fashion-MNIST, 1 PS, 1 and 2 workers"
go test ./bench -run '^$' -bench LocalJob -benchtime 1x -count 2
echo "== machine ceilings: memory copy, loopback TCP"
go test ./bench -run '^$' -bench Ceiling -benchtime 2s
echo "== parameter server push+pull of a 4 MiB model"
go test -run '^$' -bench PushPull -benchtime 3s ./internal/ps/client
echo "== PS embedding tables: lookup, update, memory per row"
go test ./bench -run '^$' -bench 'EmbeddingPull|EmbeddingPush|EmbeddingApplyServer' -benchtime 3s
go test ./bench -run '^$' -bench EmbeddingMemory -benchtime 1x
echo "== task dispatcher, data reader"
go test -run '^$' -bench GetReport ./internal/master/task
go test -run '^$' -bench IDXRead -benchtime 2s -cpu 1 ./data
