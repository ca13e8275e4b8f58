#!/usr/bin/env bash
# hack/gpu-check.sh: trains the PyTorch example on this machine's GPU, with
# parameter servers and with elastic AllReduce (two ring members sharing the
# one GPU, their collectives staged through host memory), and prints each
# job's accuracy, its exactly-once ledger and steps/s, beside the same loop
# without the SDK on the same GPU. A third job, three ring members on the GPU,
# has one killed (-9) mid-epoch: the survivors must go on in their own
# processes and the epoch stay exact. Without a GPU (or a torch that sees
# none) it says so and exits 0: the test suite never needs one.
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
out=${OUTDIR:-$(mktemp -d)}

run() { # name, flags...: the job, in the foreground
  local name=$1; shift
  "$bin" train --worker_command="$py examples/pytorch/train.py" --optimizer=adam:learning_rate=0.002 \
    --training_data="$data/train-images-idx3-ubyte.gz" --validation_data="$data/t10k-images-idx3-ubyte.gz" \
    --num_epochs=1 --output="$out/$name" "$@" >"$out/$name.log" 2>&1
}
fail() { echo "gpu-check: $1 job failed:"; tail -30 "$out/$1.log"; exit 1; }
report() { # name: accuracy, ledger, steps/s, and for a ring its changes
  "$py" - "$out/$1/job_summary.json" "$1" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
e = s["epochs"][0]
steps = s["model_version"] / max(s["training_seconds"], 1e-9)
print("%-14s accuracy %.4f  records %d trained %d twice %d missed %d  %.1f steps/s  %.0f records/s"
      % (sys.argv[2], s["eval"]["accuracy"], e["records"], e["records_trained"], e["records_trained_twice"],
         e["records_missed"], steps, s["records_per_second"]))
w, r = s["workers"], s.get("ring") or {}
if r.get("recoveries"):
    print("%-14s workers launched %d lost %d; ring versions %d; to the next step after %s"
          % ("", w["launched"], w["lost"], r["versions"],
             ", ".join("%s: %.2f s" % (x["cause"][:48], x["seconds"]) for x in r["recoveries"])))
EOF
}
job() { run "$@" --log_interval=0 || fail "$1"; report "$1"; }
records_done() { grep -o 'records_done=[0-9]*' "$1" | tail -1 | cut -d= -f2; }
workers() { pgrep -f "^[^ ]*python[0-9.]* examples/pytorch/train.py" | sort -n | tr '\n' ' '; }

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

# Three members on the GPU, one killed (-9) once the ring has trained a
# while; the two others must still be the same processes 6,000 records on.
run allreduce-kill --distribution_strategy=AllreduceStrategy --num_workers=3 --log_interval=1s &
pid=$!
until [ "$(records_done "$out/allreduce-kill.log")" -ge 6000 ] 2>/dev/null && [ "$(workers | wc -w)" -eq 3 ]; do
  kill -0 $pid 2>/dev/null || fail allreduce-kill
  sleep 0.2
done
read -r victim a b <<<"$(workers)"
kill -9 "$victim"
at=$(records_done "$out/allreduce-kill.log")
until [ "$(records_done "$out/allreduce-kill.log")" -ge $((at + 6000)) ]; do
  kill -0 $pid 2>/dev/null || break
  sleep 0.2
done
kill -0 "$a" 2>/dev/null && kill -0 "$b" 2>/dev/null && echo "allreduce-kill killed $victim at $at records; survivors $a $b kept" ||
  { echo "gpu-check: a survivor of the kill is gone (killed $victim; $a $b)"; exit 1; }
wait $pid || fail allreduce-kill
report allreduce-kill
echo "gpu-check: logs and summaries under $out"
