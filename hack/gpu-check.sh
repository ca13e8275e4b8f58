#!/usr/bin/env bash
# hack/gpu-check.sh: trains the PyTorch example on this machine's GPU, with
# parameter servers and with elastic AllReduce (two ring members sharing the
# one GPU, their collectives staged through host memory), and prints each
# job's accuracy, its exactly-once ledger and steps/s, beside the same loop
# without the SDK on the same GPU. Without a GPU (or a torch that sees none)
# it says so and exits 0: the test suite never needs one.
#
#   hack/gpu-check.sh            # ELASTICDL_BINARY=path skips the build
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-/usr/bin/python3}
data=${DATA:-/usr/share/datasets/fashion-mnist}

if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu-check: no nvidia-smi: no GPU here, skipped"; exit 0
fi
if ! "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu-check: $py's torch sees no CUDA device (a CPU-only build?): skipped"; exit 0
fi
if [ ! -e "$data/train-images-idx3-ubyte.gz" ]; then
  echo "gpu-check: no Fashion-MNIST under $data (DATA=...): skipped"; exit 0
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'

bin=${ELASTICDL_BINARY:-}
if [ -z "$bin" ]; then
  bin=$(mktemp -d)/elasticdl
  go build -o "$bin" ./cmd/elasticdl
fi
export ELASTICDL_BINARY=$bin PYTHONPATH=$PWD/python ELASTICDL_DEVICE=cuda
out=$(mktemp -d)

job() { # name, flags...
  local name=$1; shift
  "$bin" train --worker_command="$py examples/pytorch/train.py" --optimizer=adam:learning_rate=0.001 \
    --training_data="$data/train-images-idx3-ubyte.gz" --validation_data="$data/t10k-images-idx3-ubyte.gz" \
    --num_epochs=1 --log_interval=0 --output="$out/$name" "$@" >"$out/$name.log" 2>&1 || {
    echo "gpu-check: $name job failed:"; tail -30 "$out/$name.log"; exit 1; }
  "$py" - "$out/$name/job_summary.json" "$name" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
e = s["epochs"][0]
steps = s["model_version"] / max(s["training_seconds"], 1e-9)
print("%-10s accuracy %.4f  records %d trained %d twice %d missed %d  %.1f steps/s  %.0f records/s"
      % (sys.argv[2], s["eval"]["accuracy"], e["records"], e["records_trained"], e["records_trained_twice"],
         e["records_missed"], steps, s["records_per_second"]))
EOF
}

job ps --num_workers=1 --num_ps_pods=1
job allreduce --distribution_strategy=AllreduceStrategy --num_workers=2

# The same loop without the SDK: minibatches of 64, Adam, on the GPU.
"$py" - "$data" <<'EOF'
import os, sys, time
import torch, torch.nn.functional as F
sys.path.insert(0, "examples/pytorch")
from train import CNN
from elasticdl import data
recs = data.open_source(os.path.join(sys.argv[1], "train-images-idx3-ubyte.gz")).read(0, 64 * 520)
model = CNN().cuda()
opt = torch.optim.Adam(model.parameters(), lr=0.001)
for i in range(520):
    if i == 20:
        torch.cuda.synchronize(); start = time.perf_counter()
    x = torch.from_numpy(recs.x[64 * i:64 * (i + 1)]).cuda()
    y = torch.from_numpy(recs.y[64 * i:64 * (i + 1)]).cuda()
    opt.zero_grad(); F.cross_entropy(model(x), y).backward(); opt.step()
torch.cuda.synchronize()
print("plain      %.1f steps/s (the loop without the SDK, batch 64)" % (500 / (time.perf_counter() - start)))
EOF
echo "gpu-check: logs and summaries under $out"
