"""The PyTorch example's training loop under torchrun: DDP over gloo.

    python3 -m torch.distributed.run --nproc_per_node=2 --standalone \\
        bench/torchrun_ddp.py --model=cnn --steps=1400

What an AllReduce job of pytorch_loop.py workers is measured against
(bench/pytorch_allreduce_test.go): each rank builds the same model
(pytorch_loop.py's), one thread, wrapped in DistributedDataParallel over a
gloo process group; it reads Fashion-MNIST with the SDK's reader and takes
its own 64 records of each 128-record global batch; Adam, lr 0.001. The
first 20 steps are warm-up; rank 0 prints (or appends to
$ELASTICDL_BENCH_OUT) {"steps": N, "seconds": S} like pytorch_loop.py.

With $ELASTICDL_BENCH_STEPS set, every rank appends a line per step to that
file, "UNIX_TIME PID RESTART RANK STEP" (RESTART: torchrun's restart
count): the recovery benchmark kills ranks and times the restarted group's
first step from them.
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_loop import IMAGES, WARMUP, build, report, step_log  # noqa: E402  (the same model and data)
from elasticdl import data  # noqa: E402

SHARE = 64  # each rank's records of a step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="cnn", choices=["cnn", "mlp"])
    ap.add_argument("--steps", type=int, default=1000)
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    model = DistributedDataParallel(build(args.model))
    opt = torch.optim.Adam(model.parameters(), lr=0.001)
    recs = data.open_source(IMAGES).read(0, 60000)
    per_step = SHARE * size
    batches = len(recs.x) // per_step
    log = step_log()
    start = None
    for i in range(args.steps + WARMUP):
        if i == WARMUP:
            start = time.perf_counter()
        lo = (i % batches) * per_step + rank * SHARE
        x, y = torch.from_numpy(recs.x[lo:lo + SHARE]), torch.from_numpy(recs.y[lo:lo + SHARE])
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()  # DDP's allreduce overlaps the backward
        opt.step()
        if log:
            log.write("%.6f %d %d %d %d\n" % (time.time(), os.getpid(), restart, rank, i + 1))
    seconds = time.perf_counter() - start
    if rank == 0:
        report(args.steps, seconds, ranks=size)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
