#!/usr/bin/env bash
# README command 1: install what is missing, build, and run an elastic
# training job of fashion_mnist.cnn with 2 workers and 1 PS on local
# processes. Extra arguments are passed to `elasticdl train` (they win).
set -euo pipefail
cd "$(dirname "$0")/.."
hack/deps.sh
make --no-print-directory build
data=/usr/share/datasets/fashion-mnist
exec bin/elasticdl train \
  --model_def=fashion_mnist.cnn \
  --training_data=$data/train-images-idx3-ubyte.gz \
  --validation_data=$data/t10k-images-idx3-ubyte.gz \
  --num_workers=2 --num_ps_pods=1 --num_epochs=2 \
  --output=out/ "$@"
