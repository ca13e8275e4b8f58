"""What torch 1.13's gloo does when a ring member is lost: the measured
side of the choice between in-process gloo and the Go ring (issue 28).

    /usr/bin/python3 bench/gloo_faults.py            # prints one JSON line per scenario

Three processes form a ProcessGroupGloo (a TCPStore on rank 0, a
PrefixStore per ring version, the ring's 10 s timeout) and allreduce the
example CNN's gradients (421,662 floats) in a loop. Then rank 2 is lost,
and the survivors (ranks 0 and 1) give up the group and form the next
version's, size 2, in the same process:

  kill9          kill -9 of rank 2; a survivor waits on its allreduce.
  stop           SIGSTOP of rank 2 (a frozen member); the same wait.
  stop-abandon   SIGSTOP of rank 2; the survivors wait with async_op and
                 poll, and abandon the op (the group parked, not
                 destroyed) as soon as told (as the SDK's poller tells the
                 Go ring), then form the next group beside it.

For each: the seconds from the fault (or the abandon) to the survivors'
failed op, to their first allreduce in the new group, whether that result
is right, and how long the process then takes to exit (an abandoned
group's op still in flight).
"""

import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

N = 421662  # the example CNN's parameters
TIMEOUT = 10.0  # the ring's deadline (RING_TIMEOUT)


def child(rank, port, mode, flag):
    import torch
    from torch.distributed import PrefixStore, TCPStore
    from torch._C._distributed_c10d import ProcessGroupGloo

    torch.set_num_threads(1)
    store = TCPStore("127.0.0.1", port, 3, rank == 0, datetime.timedelta(seconds=60))

    def group(version, members):
        return ProcessGroupGloo(PrefixStore("v%d" % version, store), members.index(rank), len(members),
                                datetime.timedelta(seconds=TIMEOUT))

    def say(*words):
        print(" ".join(str(w) for w in words), flush=True)

    pg = group(1, [0, 1, 2])
    x = torch.ones(N)
    parked = []
    i = 0
    while True:
        x.fill_(1.0)
        try:
            work = pg.allreduce([x])
            if mode == "stop-abandon":
                while not work.is_completed():
                    if os.path.exists(flag):
                        parked.append((pg, work, x))  # abandoned: never waited on, never destroyed
                        x = torch.ones(N)
                        raise RuntimeError("abandoned")
                    time.sleep(0.0005)
            work.wait()
        except RuntimeError as e:
            say("failed", rank, time.time(), json.dumps(str(e).splitlines()[0][:160]))
            break
        i += 1
        say("step", rank, i, time.time())
    if rank == 2:
        return
    pg2 = group(2, [0, 1])
    x.fill_(float(rank + 1))
    pg2.allreduce([x]).wait()
    say("reformed", rank, time.time(), int(x[0].item() == 3.0 and x[-1].item() == 3.0))
    for _ in range(20):
        pg2.allreduce([x]).wait()
    say("exiting", rank, time.time())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scenario(mode):
    port, flag = free_port(), tempfile.mktemp(prefix="gloo-abandon-")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, __file__, "--child", str(r), str(port), mode, flag],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
             for r in range(3)]
    # Warm up: every rank's 30th step.
    seen = 0
    for line in procs[2].stdout:
        if line.startswith("step") and int(line.split()[2]) >= 30:
            break
    fault = time.time()
    if mode == "kill9":
        procs[2].kill()
    else:
        procs[2].send_signal(signal.SIGSTOP)
    if mode == "stop-abandon":
        open(flag, "w").close()
    out = {"mode": mode}
    for r in (0, 1):
        failed = reformed = ok = exited = None
        for line in procs[r].stdout:
            w = line.split()
            if w[0] == "failed":
                failed, out["error_%d" % r] = float(w[2]) - fault, json.loads(" ".join(w[3:]))
            elif w[0] == "reformed":
                reformed, ok = float(w[2]) - fault, w[3] == "1"
            elif w[0] == "exiting":
                exited = float(w[2])
                break
        try:
            procs[r].wait(timeout=3 * TIMEOUT)
            exit_s = time.time() - exited if exited else None
        except subprocess.TimeoutExpired:
            exit_s = "hung > %.0f s" % (3 * TIMEOUT)
            procs[r].kill()
        out.update({"rank%d_failed_s" % r: failed, "rank%d_next_group_s" % r: reformed,
                    "rank%d_sum_right" % r: ok, "rank%d_exit_s" % r: exit_s})
        seen += 1
    if mode != "kill9":
        procs[2].send_signal(signal.SIGCONT)
        procs[2].kill()
    for p in procs:
        p.wait()
    if os.path.exists(flag):
        os.remove(flag)
    print(json.dumps(out), flush=True)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
        return
    for mode in ("kill9", "stop", "stop-abandon"):
        scenario(mode)


if __name__ == "__main__":
    main()
