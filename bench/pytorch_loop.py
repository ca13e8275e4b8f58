"""One PyTorch training loop, timed with and without the elasticdl SDK.

    python3 bench/pytorch_loop.py --model=cnn --steps=300      # plain: torch.optim.Adam in-process
    ELASTICDL_BENCH_OUT=f elasticdl train --worker_command='python3 bench/pytorch_loop.py --model=cnn' ...

Both read Fashion-MNIST with the SDK's reader, minibatches of 64, Adam
(lr 0.001), one thread. Plain: forward, backward, optimizer step. Under
the SDK: the same forward and backward, then job.step: with parameter
servers it pushes the gradients (the PS applies Adam) and the next batch
pulls; with --distribution_strategy=AllreduceStrategy the ring sums the
gradients and every worker steps its own Adam. The first 20 steps are
warm-up; the rest are timed, to the end of the last applied step. Prints
(or appends to $ELASTICDL_BENCH_OUT) a JSON line {"steps": N, "seconds":
S}: one per worker of a job ("worker" is its id; in a ring, steps are the
ring's, each of the global batch, and "batches" this worker's).

With $ELASTICDL_BENCH_STEPS set, a worker also appends a line per applied
step to that file, "UNIX_TIME PID 0 WORKER_ID STEP" (torchrun_ddp.py's
format): the recovery benchmark waits on them.
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples", "pytorch"))
import elasticdl  # noqa: E402
from elasticdl import data  # noqa: E402
from train import CNN  # noqa: E402  (the example's model)

WARMUP = 20
IMAGES = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(784, 256), torch.nn.Linear(256, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def build(name):
    torch.manual_seed(0)
    return {"cnn": CNN, "mlp": MLP}[name]()


def report(steps, seconds, **extra):
    line = json.dumps(dict({"steps": steps, "seconds": seconds}, **extra))
    out = os.environ.get("ELASTICDL_BENCH_OUT")
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")
    print(line)


def plain(model, steps):
    recs = data.open_source(IMAGES).read(0, 64 * (steps + WARMUP))
    opt = torch.optim.Adam(model.parameters(), lr=0.001)
    start = None
    for i in range(steps + WARMUP):
        if i == WARMUP:
            start = time.perf_counter()
        x, y = torch.from_numpy(recs.x[64 * i:64 * (i + 1)]), torch.from_numpy(recs.y[64 * i:64 * (i + 1)])
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    report(steps, time.perf_counter() - start)


def step_log():
    """The per-step event file's writer, or None."""
    path = os.environ.get("ELASTICDL_BENCH_STEPS")
    return open(path, "a", buffering=1) if path else None


def with_sdk(model):
    job = elasticdl.connect()
    job.register(model)
    # In a ring, batch.index is the ring's step it is applied as: a worker
    # idle in a step (no records left in its task) still takes part in it,
    # so the ring's steps, not this worker's batches, are what is timed.
    ring = job.strategy == "AllreduceStrategy"
    log = step_log()
    n, start, end, first, last = 0, None, None, 0, 0
    for batch in job.batches():
        if n == WARMUP and start is None:
            start, first = time.perf_counter(), batch.index - 1
        loss = F.cross_entropy(model(batch.x), batch.y)
        loss.backward()
        if job.step(loss) is False:
            continue  # a ring step not applied: its records come again
        n, end, last = n + 1, time.perf_counter(), batch.index
        if log:
            log.write("%.6f %d 0 %d %d\n" % (time.time(), os.getpid(), job.worker_id, n))
    # Timed to the last applied step: the job's end (the model's upload,
    # the last task's report) is not.
    if start is not None:
        steps = last - first if ring else n - WARMUP
        report(steps, end - start, worker=job.worker_id, batches=n - WARMUP)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="cnn", choices=["cnn", "mlp"])
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = build(args.model)
    if os.environ.get("ELASTICDL_MASTER_ADDR"):
        with_sdk(model)
    else:
        plain(model, args.steps)


if __name__ == "__main__":
    main()
