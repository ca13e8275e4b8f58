#!/usr/bin/python3
"""Times torch.distributed's gloo allreduce across processes over loopback.

The counterpart of bench/collective_test.go's TestCollectiveMember (run side
by side by bench/collective_vs_gloo.sh): --members processes (this script
re-executed with --rank), rendezvous at tcp://127.0.0.1:--port, gloo on the
loopback interface; each allreduces a float32 tensor of --mib MiB --warmup
times untimed, then a barrier, then --iters times, each timed on its own.
Rank 0 prints one line:

  RESULT impl=gloo members=N mib=M iters=K median_s=.. best_s=.. mean_s=.. alg_MBps=.. bus_MBps=..

alg = buffer bytes / median time of one allreduce; bus = alg * 2(n-1)/n;
user_s_op and sys_s_op: rank 0's CPU seconds per allreduce (all threads).
Needs torch (Debian: python3-torch, for /usr/bin/python3).
"""

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time


def member(args):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(args.threads)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{args.port}",
        rank=args.rank,
        world_size=args.members,
    )
    n = args.mib << 20 >> 2
    # 1/members everywhere: the sums stay near 1 however many ops run.
    x = torch.full((n,), 1.0 / args.members, dtype=torch.float32)
    for _ in range(args.warmup):
        dist.all_reduce(x)
    dist.barrier()
    times = []
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(args.iters):
        t0 = time.perf_counter()
        dist.all_reduce(x)
        times.append(time.perf_counter() - t0)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    dist.barrier()
    dist.destroy_process_group()
    if args.rank != 0:
        return
    med = statistics.median(times)
    alg = (args.mib << 20) / med / 1e6
    bus = alg * 2 * (args.members - 1) / args.members
    print(
        f"RESULT impl=gloo members={args.members} mib={args.mib} iters={args.iters} "
        f"median_s={med:.6f} best_s={min(times):.6f} mean_s={sum(times) / len(times):.6f} "
        f"alg_MBps={alg:.1f} bus_MBps={bus:.1f} "
        f"user_s_op={(r1.ru_utime - r0.ru_utime) / args.iters:.6f} "
        f"sys_s_op={(r1.ru_stime - r0.ru_stime) / args.iters:.6f} torch={torch.__version__} "
        f"threads={torch.get_num_threads()}",
        flush=True,
    )


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--members", type=int, default=2)
    p.add_argument("--mib", type=int, default=16)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--port", type=int, default=29511)
    p.add_argument("--threads", type=int, default=1,
                   help="torch.set_num_threads per process (0: leave torch's default)")
    p.add_argument("--rank", type=int, default=-1,
                   help="internal: run as this member (default: launch all members)")
    args = p.parse_args()
    if args.threads == 0:
        import torch
        args.threads = torch.get_num_threads()
    if args.rank >= 0:
        member(args)
        return
    env = dict(os.environ, GLOO_SOCKET_IFNAME=os.environ.get("GLOO_SOCKET_IFNAME", "lo"))
    base = [sys.executable, os.path.abspath(__file__)] + [
        f"--{k}={getattr(args, k)}" for k in ("members", "mib", "iters", "warmup", "port", "threads")
    ]
    procs = [subprocess.Popen(base + [f"--rank={r}"], env=env) for r in range(args.members)]
    rc = 0
    for pr in procs:
        rc |= pr.wait()
    sys.exit(rc)


if __name__ == "__main__":
    main()
