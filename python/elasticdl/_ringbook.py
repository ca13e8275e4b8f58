"""The pure parts of an AllReduce ring member, with no I/O: the step
buffer's tags, the log of applied steps and its encoding, a member's share
of a step, its book of records, and the model's checksum.

A port of the Go worker's (internal/worker: stepbook.go, ringstate.go,
allreduce.go's stepShare); the encodings are the same, so that the master
reads a Python ring's reports as a Go ring's. Every integer that travels
in a float32 is below 2**24 (ids and counts in two 24-bit halves), so the
ring's sum carries it exactly.
"""

import math
import struct

import numpy as np

# One member's tag in a step's buffer: worker+1 (0: none), the task ID in
# two 24-bit halves, and the records [start,end) of the task.
TAG_LEN = 5
# What a step's buffer holds between the gradients and the tags: the
# records, the busy flag, (rank 0's) the last step the master has in two
# 24-bit halves, and the leave flag.
STEP_HEADER = 5
# A logged step's fields before its tags: step and ring version (each in
# two halves) and the count of parts.
LOG_HEADER = 5
# How many of its last steps' tags a log keeps even once reported.
RECENT_STEPS = 3

_LOW = 0xFFFFFF


def split24(n):
    """n as two float32-exact halves (low, high)."""
    return float(n & _LOW), float(n >> 24)


def join24(lo, hi):
    return int(lo) | int(hi) << 24


def put_tag(dst, off, part):
    """Writes part (worker, task, start, end) as a tag at dst[off:]."""
    worker, task, start, end = part
    dst[off] = worker + 1
    dst[off + 1], dst[off + 2] = split24(task)
    dst[off + 3], dst[off + 4] = start, end


def decode_tags(tags):
    """The parts (worker, task, start, end) of a step's tags."""
    out = []
    for i in range(0, len(tags) - TAG_LEN + 1, TAG_LEN):
        t = tags[i:i + TAG_LEN]
        if t[0] == 0:
            continue
        out.append((int(t[0]) - 1, join24(t[1], t[2]), int(t[3]), int(t[4])))
    return out


def encode_log(log):
    """A log of (step, version, parts) as float32s."""
    out = []
    for step, version, parts in log:
        out.extend(split24(step) + split24(version) + (float(len(parts)),))
        for p in parts:
            tag = [0.0] * TAG_LEN
            put_tag(tag, 0, p)
            out.extend(tag)
    return np.asarray(out, dtype=np.float32)


def decode_log(arr):
    out, i = [], 0
    while len(arr) - i >= LOG_HEADER:
        n = int(arr[i + 4])
        out.append((join24(arr[i], arr[i + 1]), join24(arr[i + 2], arr[i + 3]),
                    decode_tags(arr[i + LOG_HEADER:i + LOG_HEADER + n * TAG_LEN])))
        i += LOG_HEADER + n * TAG_LEN
    return out


def prune_log(log, reported):
    """log without the steps the master has, but the last RECENT_STEPS."""
    i = 0
    while i < len(log) - RECENT_STEPS and log[i][0] <= reported:
        i += 1
    return log[i:]


def step_share(global_batch, minibatch, rank, size):
    """The records rank takes in a step of a ring of size members: its part
    of the global batch (the remainder to the lowest ranks), so that a step
    means the same batch at any ring size; a minibatch without one."""
    if global_batch <= 0:
        return minibatch
    n = global_batch // size + (1 if rank < global_batch % size else 0)
    return max(n, 1)


# Step shares by rate (the Go worker's internal/worker/balance.go, the same
# numbers): a member that computes slower takes less of each step.
RATE_EMA = 0.3
BALANCE_BELOW, BALANCE_WITHIN, BALANCE_STEPS = 0.7, 0.85, 3
MIN_SHARE_FRACTION = 0.1
# The fewest records a member trains in a step when more are there: a
# model with BatchNorm cannot train on one.
MIN_STEP_RECORDS = 2


def observe_rate(rate, records, seconds):
    """A member's compute rate (records/s) after a step of records in
    seconds (0: none yet): the inverse of its smoothed seconds per record,
    as the Go worker's rateMeter (a member held in bursts must not look
    faster than it computes in a step's time)."""
    if records <= 0 or seconds <= 0:
        return rate
    spr = seconds / records
    return 1 / spr if rate == 0 else 1 / ((1 - RATE_EMA) / rate + RATE_EMA * spr)


def spread(rates):
    """The slowest busy member's rate over the fastest's (1: none busy)."""
    busy = [r for r in rates if r > 0]
    return min(busy) / max(busy) if busy else 1.0


def next_balance(state, rates):
    """The balance state (on, streak) after a step whose members' rates
    were rates: on after BALANCE_STEPS steps in a row below BALANCE_BELOW,
    off again after BALANCE_STEPS steps in a row within BALANCE_WITHIN, at
    once with fewer than two busy members (the Go worker's balance.next)."""
    on, streak = state
    if sum(1 for r in rates if r > 0) < 2:
        return (False, 0)
    s = spread(rates)
    if on:
        if s < BALANCE_WITHIN:
            return (True, 0)
        if streak + 1 >= BALANCE_STEPS:
            return (False, 0)
        return (True, streak + 1)
    if s >= BALANCE_BELOW:
        return (False, 0)
    if streak + 1 >= BALANCE_STEPS:
        return (True, 0)
    return (False, streak + 1)


def balanced_share(global_batch, minibatch, rank, size, rates, balancing):
    """step_share, or while balancing a share in proportion to rank's rate:
    a minibatch scaled by its rate over the fastest's, or the global batch
    split by rate. With a global batch the members idle in the last step
    (rate 0) leave their part to the busy ones: a member alone with a job's
    last records must not train them in steps of its share; one back from
    idle takes its floor, which the busy ones leave it, so that a step never
    exceeds the global batch (the Go worker's balancedShare)."""
    equal = step_share(global_batch, minibatch, rank, size)
    if len(rates) != size or rank >= size:
        return equal
    if global_batch <= 0:
        if not balancing or rates[rank] <= 0:
            return equal
        return max(share_floor(equal), _round(minibatch * float(rates[rank]) / max(rates)))
    if not any(r > 0 for r in rates):
        return equal
    if rates[rank] <= 0:
        return share_floor(equal)
    floors = [share_floor(step_share(global_batch, minibatch, r, size)) for r in range(size)]
    busy = [r for r, v in enumerate(rates) if v > 0]
    left = max(global_batch - sum(f for r, f in enumerate(floors) if rates[r] <= 0), len(busy))
    if not balancing:
        return step_share(left, minibatch, busy.index(rank), len(busy))
    return split_by_rate(left, rates, floors)[rank]


def share_floor(equal):
    """The fewest records a member whose equal share is equal takes."""
    return max(min(MIN_STEP_RECORDS, equal), int(MIN_SHARE_FRACTION * equal))


def split_by_rate(total, rates, floors):
    """total records split among the members with a rate in proportion to
    it, each at least its floor, adding up to total: the Go worker's
    splitByRate, the same arithmetic in the same order."""
    n = len(rates)
    fixed = [False] * n
    while True:
        free = total - sum(floors[r] for r in range(n) if fixed[r])
        wsum = 0.0
        for r in range(n):
            if not fixed[r] and rates[r] > 0:
                wsum += float(rates[r])
        changed = False
        for r in range(n):
            if not fixed[r] and rates[r] > 0 and float(free) * float(rates[r]) / wsum < floors[r]:
                fixed[r] = changed = True
        if not changed:
            break
    parts, frac, left = [0] * n, [0.0] * n, free
    for r in range(n):
        if fixed[r]:
            parts[r] = floors[r]
        elif rates[r] > 0:
            raw = float(free) * float(rates[r]) / wsum
            parts[r] = math.floor(raw)
            frac[r] = raw - parts[r]
            left -= parts[r]
    while left > 0:
        best = -1
        for r in range(n):
            if not fixed[r] and rates[r] > 0 and (best < 0 or frac[r] > frac[best]):
                best = r
        if best < 0:
            break
        parts[best] += 1
        frac[best] = -1.0
        left -= 1
    return parts


def _round(x):
    """Go's math.Round: halves away from zero (Python's round is to even)."""
    return int(x + 0.5)


def checksum(tensors):
    """FNV-1a 64 of (name, dims as u64 LE, content) of each tensor, in
    order: the Go side's wire.Checksum, which the master recomputes."""
    h = 0xcbf29ce484222325
    prime, mask = 0x100000001b3, (1 << 64) - 1
    for name, dims, content in tensors:
        for b in name.encode() + b"".join(struct.pack("<Q", d & mask) for d in dims) + content:
            h = ((h ^ b) * prime) & mask
    return h


class RingTask:
    """A training task being trained in steps: its (shuffled) records, the
    next record to take and the confirmed ones (both counted from the
    task's start), and its report."""

    __slots__ = ("task", "recs", "next", "confirmed", "report")

    def __init__(self, task, recs, report):
        self.task, self.recs, self.report = task, recs, report
        self.next = self.confirmed = task.done

    def total(self):
        return len(self.recs)


class StepBook:
    """A member's account of its own records: the tasks it holds, which
    records went into which unconfirmed step, and which are confirmed."""

    def __init__(self):
        self.tasks = []
        self.records = []  # [task, start, end, step, loss]

    def add(self, rt):
        self.tasks.append(rt)

    def pending(self):
        """A task with records left to take, or None."""
        for rt in self.tasks:
            if rt.next < rt.total():
                return rt
        return None

    def take(self, rt, n, step):
        """Puts up to n next records of rt into step: returns [start, end).
        A rest shorter than MIN_STEP_RECORDS goes with them (shares by rate
        cut tasks at any record; a step of one fails a BatchNorm model)."""
        start, end = rt.next, min(rt.next + n, rt.total())
        if 0 < rt.total() - end < MIN_STEP_RECORDS:
            end = rt.total()
        rt.next = end
        self.records.append([rt, start, end, step, 0.0])
        return start, end

    def set_loss(self, loss_sum):
        self.records[-1][4] = loss_sum

    def untake(self):
        """Gives the last records taken back (their step did not run)."""
        rt, start = self.records.pop()[:2]
        rt.next = min(rt.next, start)

    def confirm(self, up_to):
        """Counts the records of every step up to up_to as trained; returns
        the tasks now trained in full, which the book drops."""
        keep = []
        for r in self.records:
            rt, start, end, step, loss = r
            if step > up_to:
                keep.append(r)
                continue
            rt.confirmed = end
            rt.report.records += end - start
            rt.report.loss_sum += loss
            rt.report.steps += 1
        self.records = keep
        complete = [rt for rt in self.tasks if rt.confirmed == rt.total()]
        self.tasks = [rt for rt in self.tasks if rt.confirmed != rt.total()]
        return complete

    def settle(self, held):
        """After a ring agreed a state: keeps the records it holds (held(rt,
        start, end)) as if confirmed, and gives the others back."""
        keep = []
        for r in self.records:
            rt, start, end = r[:3]
            if held(rt, start, end):
                r[3] = 0  # in the agreed state: the next confirm counts it
                keep.append(r)
            elif start < rt.next:
                rt.next = start
        self.records = keep

    def reset(self):
        self.tasks, self.records = [], []

    def empty(self):
        return not self.tasks

    def busy(self):
        """Enough work waits for confirmation that no task should be fetched."""
        return len(self.tasks) > 1
