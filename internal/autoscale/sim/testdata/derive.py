#!/usr/bin/env python3
"""Derives jobs.csv and models.csv from adaptdl's osdi21-artifact simulator
data (see README.md). Usage: derive.py ADAPTDL_SIMULATOR_DIR OUT_DIR.
Standard library only; our own code, reading their CSVs."""
import csv, glob, math, os, sys

MAX_EPOCHS = {"bert": 2, "cifar10": 100, "ncf": 10, "imagenet": 90,
              "deepspeech2": 80, "yolov3": 50}
MAX_LOCAL = {"yolov3": 8}
SIZES = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def interp(points, x):
    """Linear interpolation of (x, (step, sync)) points, clamped at the ends."""
    points = sorted(points)
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            t = (x - x0) / (x1 - x0)
            return tuple(a + t * (b - a) for a, b in zip(y0, y1))
    return points[-1][1]


def step_time(model, placements, scal, n, local):
    pl = []
    left = n
    while left > 0:
        pl.append(min(left, 4))
        left -= pl[-1]
    pid = "".join(map(str, min(pl[i:] + pl[:i] for i in range(len(pl)))))
    pts = [(int(r["local_bsz"]), (float(r["step_time"]), float(r["sync_time"])))
           for r in placements if r["placement"] == pid]
    if not pts:
        pts = [(int(r["local_bsz"]), (float(r["step_time"]), float(r["sync_time"])))
               for r in scal if int(r["num_replicas"]) == n and int(r["num_nodes"]) == len(pl)]
    if not pts:
        return None
    max_local = MAX_LOCAL.get(model, max(int(r["local_bsz"]) for r in placements))
    accum = math.ceil(local / max_local - 1e-8) - 1
    atomic = math.ceil(local / (accum + 1) - 1e-8)
    step, sync = interp(pts, atomic)
    return step + accum * (step - sync)


def main(src, out):
    jobs = []
    for path in sorted(glob.glob(os.path.join(src, "workloads", "workload-*.csv"))):
        w = os.path.basename(path)[len("workload-"):-len(".csv")]
        for r in rows(path):
            jobs.append([w, r["name"], r["time"], r["application"], r["num_replicas"], r["batch_size"]])
    with open(os.path.join(out, "jobs.csv"), "w", newline="") as f:
        csv.writer(f).writerows([["workload", "name", "time", "model", "workers", "batch"]] + jobs)
    models = []
    for m, b in sorted({(j[3], int(j[5])) for j in jobs}):
        d = os.path.join(src, "traces", m)
        placements, scal = rows(os.path.join(d, "placements.csv")), rows(os.path.join(d, "scalability.csv"))
        it = int(rows(os.path.join(d, "validation-%d.csv" % b))[MAX_EPOCHS[m] - 1]["iteration"])
        min_local = min(int(r["local_bsz"]) for r in placements)
        for n in SIZES:
            if b / n < min_local:
                break
            st = step_time(m, placements, scal, n, math.ceil(b / n - 1e-8))
            if st is not None:
                models.append([m, b, b * it, n, "%.2f" % (b / st)])
    with open(os.path.join(out, "models.csv"), "w", newline="") as f:
        csv.writer(f).writerows([["model", "batch", "records", "workers", "records_per_s"]] + models)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
