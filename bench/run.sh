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
echo "== issue 13: one-thread steps against PyTorch, 1-worker jobs against bare compute, the whole cnn job against PyTorch, the master with 1,000 workers"
GOMAXPROCS=1 OPENBLAS_NUM_THREADS=1 go test -tags openblas ./bench -run '^$' -bench KernelsVsTorch -benchtime 3s -count 2
OPENBLAS_NUM_THREADS=1 go test -tags openblas ./bench -run '^$' -bench 'JobOverhead' -benchtime 1x
OPENBLAS_NUM_THREADS=1 go test -tags openblas ./bench -run '^$' -bench WholeJobVsTorch -benchtime 1x -count 2
go test ./bench -run '^$' -bench MasterScale -benchtime 1x -v
echo "== PyTorch workers: a training loop with the SDK against the same loop without it"
go test ./bench -run '^$' -bench PyTorchWorker -benchtime 1x -count 3
echo "== collective: ring allreduce against torch.distributed gloo, 2 and 3 processes, 1/16/64 MiB"
if /usr/bin/python3 -c 'import torch.distributed' 2>/dev/null; then
	bench/collective_vs_gloo.sh
else
	echo "skipped: /usr/bin/python3 has no torch (Debian: apt-get install python3-torch)"
fi
