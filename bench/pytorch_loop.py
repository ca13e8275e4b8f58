"""One PyTorch training loop, timed with and without the elasticdl SDK.

    python3 bench/pytorch_loop.py --model=cnn --steps=300      # plain: torch.optim.Adam in-process
    ELASTICDL_BENCH_OUT=f elasticdl train --worker_command='python3 bench/pytorch_loop.py --model=cnn' ...

Both read Fashion-MNIST with the SDK's reader, minibatches of 64, Adam
(lr 0.001), one thread. Plain: forward, backward, optimizer step. Under
the SDK: the same forward and backward, then job.step (push the gradients,
the PS applies Adam) and the next batch's pull. The first 20 steps are
warm-up; the rest are timed. Prints (or writes to $ELASTICDL_BENCH_OUT) a
JSON line {"steps": N, "seconds": S}.
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


def report(steps, seconds):
    line = json.dumps({"steps": steps, "seconds": seconds})
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


def with_sdk(model):
    job = elasticdl.connect()
    job.register(model)
    n, start = 0, None
    for batch in job.batches():
        if n == WARMUP:
            start = time.perf_counter()
        loss = F.cross_entropy(model(batch.x), batch.y)
        loss.backward()
        job.step(loss)
        n += 1
    # The last step's time ends at its push; the job's end is not timed.
    report(n - WARMUP, time.perf_counter() - start)


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
