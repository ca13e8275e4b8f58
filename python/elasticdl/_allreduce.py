"""A PyTorch worker's side of elastic AllReduce.

The Go worker's protocol (internal/worker/allreduce.go, ringstate.go),
driven from Python: the master's rendezvous says who is in the ring; the
collectives run in the project's Go ring through a local helper process
(``elasticdl ringd``, see _goring.py), which can abandon a collective
blocked on a dead or frozen peer at once — torch 1.13's gloo cannot.

Every member takes part in every step, with its share of the global batch
or idle with none. A step's buffer holds each parameter's gradient times
the member's records, each buffer (BatchNorm's running statistics) times
them too, a header (records, busy, what the master has, the leave flag)
and each member's tag (whose records). After the sum every member divides
by the step's records and steps its optimizer: the members stay equal. A
step is confirmed once the next one's allreduce succeeds; rank 0 reports
the confirmed steps' tags (the ledger). When a ring re-forms, the members
agree on the most advanced member's state (model, buffers, optimizer, step
count, log) by broadcast, keep the records it holds and redo the others.
"""

import io
import sys
import threading
import time

import grpc
import numpy as np
import torch

from . import _ringbook as rb
from ._courier import Courier
from ._goring import RingBroken
from ._ps import tensor
from ._proto import master_pb2 as mpb
from ._rpc import ElasticDLError
from .data import DataError
from .job import loss_value

# Bounds every collective wait; must exceed the members' skew between
# steps (an evaluation task runs between two steps). The Go worker's.
RING_TIMEOUT = 10.0
POLL_INTERVAL = 0.1
REPORT_INTERVAL = 0.2
IDLE_WAIT = 0.2
STATS_INTERVAL = 1.0


class LetGo(Exception):
    """The master let this worker go (scale down) at a step boundary."""


def _scaled_into(dst, src, scale):
    """dst, the ring's host memory, = src * scale, src on any device: on a
    GPU scaled there and copied once (out= cannot cross devices)."""
    if src.device.type == "cpu":
        torch.mul(src, scale, out=dst)
    else:
        dst.copy_(src.mul(scale))


class Member:
    """This worker's ring state. The job's main thread drives it; one
    poller thread watches the ring's version."""

    def __init__(self, job, model, optimizer, ring, global_batch):
        self.job, self.model, self.opt, self.ring = job, model, optimizer, ring
        self.global_batch = global_batch
        self.params = [p for p in model.parameters()]
        self.buffers = [b for b in model.buffers()]
        self.n_grads = sum(p.numel() for p in self.params) + sum(b.numel() for b in self.buffers)
        # A model wholly on one GPU crosses to the ring's host memory in one
        # copy each way a step: a copy per tensor costs a sync each.
        devs = {t.device for t in self.params + self.buffers}
        self.gpu = devs.pop() if len(devs) == 1 and next(iter(devs)).type != "cpu" else None
        # The initial model (the restore point of a ring none of whose
        # members holds a state): a member may hold a trained one later.
        self.initial = io.BytesIO()
        torch.save({"model": model.state_dict(), "optim": optimizer.state_dict()}, self.initial)
        self.lr0 = [g["lr"] for g in optimizer.param_groups]
        self.decay = 0.0
        self.version, self.rank, self.size = 0, -1, 0
        self.steps, self.lineage, self.ring_lineage = 0, 0, 0
        self.book, self.log, self.reported = rb.StepBook(), [], 0
        self.last_report, self.last_stats, self.leave_flag = 0.0, 0.0, False
        # This member's compute rate, the members' of the last step, and
        # whether shares go by them (_ringbook.balanced_share).
        self.rate, self.rates, self.balance, self.began = 0.0, [], (False, 0), 0.0
        self.master_done = {}
        self.latest = (0, False)  # newest (version, planned) the poller saw
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.stats = (0, 0, 0.0)
        # The master's calls off the step's path (see _courier.py).
        self.courier = Courier()
        self.fetch = None       # the next task's fetch in flight (a Future), or None
        self._queued = 0        # rank 0: the last step handed to the courier
        self._acked = 0         # rank 0: the last step the master acknowledged
        self._ack_failed = False
        self._poller = threading.Thread(target=self._poll, daemon=True, name="elasticdl-ring-poller")
        self._poller.start()

    def close(self):
        self._stop.set()
        self.courier.close()
        self.ring.close()

    def post(self, fn, *args):
        return self.courier.post(fn, *args)

    def flush(self):
        self.courier.flush()

    def check(self):
        self.courier.check()

    # -- the poller ------------------------------------------------------------

    def _poll(self):
        sent = 0
        while not self._stop.wait(POLL_INTERVAL):
            try:
                resp = self.job._ring_status(mpb.RingStatusRequest(worker_id=self.job.worker_id), timeout=5)
            except grpc.RpcError:
                continue
            with self._lock:
                if resp.version > self.latest[0] or (resp.version == self.latest[0] and not resp.planned):
                    self.latest = (resp.version, resp.planned)
            if resp.version > sent:
                # An unplanned change frees a member blocked on a lost peer
                # at once; any change gives up a ring still forming.
                sent = resp.version
                try:
                    self.ring.supersede(resp.version, not resp.planned)
                except Exception:  # the helper is gone: the main thread says why
                    return

    # -- the ring --------------------------------------------------------------

    def live(self):
        return self.size > 0

    def before_step(self):
        """At a step boundary: leave a superseded ring (at once, or with the
        others after the next step for a planned change)."""
        with self._lock:
            version, planned = self.latest
        if self.live() and version > self.version:
            if planned:
                self.leave_flag = True
            else:
                self.leave()

    def leave(self):
        self.flush()  # the ring's reports reach the master before this worker checks in again
        self.ring.leave()
        self.size, self.rank, self.leave_flag = 0, -1, False

    def join(self):
        """Checks in until a ring with this worker forms, forms it and agrees
        the state. Returns False when the job's tasks are done."""
        job = self.job
        while True:
            try:
                resp = job._join_ring(mpb.JoinRingRequest(worker_id=job.worker_id, addr=self.ring.addr), timeout=30)
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.FAILED_PRECONDITION:
                    return False
                if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise ElasticDLError("join ring: %s" % e.details()) from None
                resp = mpb.RingResponse(wait_ms=200)
            if resp.leave:
                raise LetGo()
            if not resp.formed:
                if job._stop.wait(resp.wait_ms / 1000.0):
                    return False
                continue
            peers = [m.addr for m in resp.members]
            ranks = [i for i, m in enumerate(resp.members) if m.worker_id == job.worker_id]
            if not ranks:
                continue  # formed without this worker: check in again
            try:
                self.ring.form(resp.version, ranks[0], peers, RING_TIMEOUT,
                               worker_ids=[m.worker_id for m in resp.members])
                self.version, self.rank, self.size = resp.version, ranks[0], len(peers)
                self.leave_flag, self.last_report = False, 0.0
                self.rates, self.balance = [], (False, 0)
                self.ring_lineage = resp.lineage
                self.master_done = {h.task_id: h.done for h in resp.held}
                with self._lock:
                    if resp.version >= self.latest[0]:
                        self.latest = (resp.version, False)
                self.sync_state()
                print("elasticdl: worker %d: in ring version %d, rank %d of %d, %d steps"
                      % (job.worker_id, resp.version, self.rank, self.size, self.steps), file=sys.stderr, flush=True)
                return True
            except RingBroken as e:
                err = e
                if self.live():
                    self.leave()
            with self._lock:
                newest = self.latest[0]
            if newest > resp.version:
                continue  # superseded, not broken: check in for the newer version
            print("elasticdl: worker %d: forming ring version %d failed: %s" % (job.worker_id, resp.version, err),
                  file=sys.stderr, flush=True)
            self.report_broken(resp.version, str(err))

    def report_broken(self, version, err):
        try:
            self.job._ring_broken(mpb.ReportRingBrokenRequest(worker_id=self.job.worker_id, version=version, error=err),
                                  timeout=10)
        except grpc.RpcError:
            pass

    def broken(self, err):
        """The live ring failed: tell the master and drop it."""
        version = self.version
        print("elasticdl: worker %d: ring version %d broken: %s" % (self.job.worker_id, version, err),
              file=sys.stderr, flush=True)
        self.leave()
        self.report_broken(version, str(err))

    # -- one state -------------------------------------------------------------

    def sync_state(self):
        """Every member takes the state of the one with the most steps (the
        lowest rank among equals): model and buffers, optimizer, step count
        and log. It keeps its records that state holds; rank 0 reports the
        state's log and settles the ring."""
        stale = self.lineage != self.ring_lineage
        mine = 0 if stale else self.steps + 1
        counts = self.ring.buffer(2 * self.size)
        counts[:] = 0
        counts[2 * self.rank:2 * self.rank + 2] = rb.split24(mine)
        self.ring.allreduce(self.version, 0, len(counts))
        totals = [rb.join24(counts[2 * i], counts[2 * i + 1]) for i in range(self.size)]
        most = max(totals)
        root = totals.index(most)
        if stale:
            self.book.reset()
            self.log = []
            self.reported = self._queued = self._acked = 0  # step numbers of a lost lineage
            self.job._current = 0
        blob = b""
        if self.rank == root:
            if most == 0:
                self._load_initial()
            out = io.BytesIO()
            torch.save({"model": self.model.state_dict(), "optim": self.opt.state_dict(), "steps": self.steps,
                        "log": self.log}, out)
            blob = out.getvalue()
        head = self.ring.buffer(2)
        head[:] = rb.split24(len(blob))
        self.ring.broadcast(self.version, root, 0, 2)
        n = rb.join24(head[0], head[1])
        words = (n + 3) // 4
        buf = self.ring.buffer(words)
        if self.rank == root:
            buf.view(np.uint8)[:n] = np.frombuffer(blob, np.uint8)
        self.ring.broadcast(self.version, root, 0, words)
        if self.rank != root:
            # A pickle from a ring peer: trusted as the ring's members are
            # (torch 1.13's weights_only loader refuses the optimizer's
            # floats); authenticating peers is the job's TLS's to do.
            st = torch.load(io.BytesIO(buf.view(np.uint8)[:n].tobytes()), map_location=self.job.device, weights_only=False)
            self.model.load_state_dict(st["model"])
            self.opt.load_state_dict(st["optim"])
            self.steps, self.log = st["steps"], st["log"]
        self.lineage = self.ring_lineage
        self._settle_records()
        self.confirm(self.steps)
        if self.rank == 0:
            self.report_applied(self.steps, wait=True)  # before the settle
            try:
                self.job._settle_ring(mpb.SettleRingRequest(worker_id=self.job.worker_id, version=self.version),
                                      timeout=10)
            except grpc.RpcError:
                pass

    def _load_initial(self):
        self.initial.seek(0)
        st = torch.load(self.initial, map_location=self.job.device, weights_only=False)
        self.model.load_state_dict(st["model"])
        self.opt.load_state_dict(st["optim"])
        self.steps = 0

    def _settle_records(self):
        me = self.job.worker_id
        held = {(w, t, s, e) for _, _, parts in self.log for (w, t, s, e) in parts}
        self.book.settle(lambda rt, s, e: (me, rt.task.id, s, e) in held or self.master_done.get(rt.task.id, 0) >= e)

    # -- steps -----------------------------------------------------------------

    def share(self):
        return rb.balanced_share(self.global_batch, self.job.minibatch_size, self.rank, self.size, self.rates,
                                 self.balance[0])

    def _note_rates(self, buf, at):
        was = self.balance[0]
        self.rates = [float(r) for r in buf[at:at + self.size]]
        self.balance = rb.next_balance(self.balance, self.rates)
        if self.balance[0] != was:
            print("elasticdl: worker %d: step shares by the members' rates: %s, %d records (rates %s)"
                  % (self.job.worker_id, "on" if self.balance[0] else "off", self.share(),
                     " ".join("%.0f" % r for r in self.rates)), file=sys.stderr, flush=True)

    def step(self, part=None, loss_sum=0.0):
        """One step: part (task, start, end) is this member's records, whose
        gradients (of loss.backward()) are in the parameters; None: idle.
        Returns whether every member leaves the ring after it (a planned
        change). Raises RingBroken: the step was not applied."""
        rates_at = self.n_grads + rb.STEP_HEADER + self.size * rb.TAG_LEN
        n, buf = self.n_grads, self.ring.buffer(rates_at + self.size)  # +size: each member's rate
        flat = torch.from_numpy(buf)
        buf[n:] = 0
        if part is None:
            buf[:n] = 0
        else:
            records = part[2] - part[1]
            # Its compute: from the batch handed to the program to here.
            self.rate = rb.observe_rate(self.rate, records, time.monotonic() - self.began)
            buf[rates_at + self.rank] = self.rate
            self._gather(flat, float(records))
            buf[n], buf[n + 1] = records, 1
            rb.put_tag(buf, n + rb.STEP_HEADER + self.rank * rb.TAG_LEN, (self.job.worker_id,) + tuple(part))
        if self.leave_flag:
            buf[n + 4] = 1
        if self.rank == 0:
            self.reported = max(self.reported, self._acked)
            buf[n + 2], buf[n + 3] = rb.split24(self.reported)
        self.ring.allreduce(self.version, 0, len(buf))
        self._note_rates(buf, rates_at)
        total, busy, boundary = float(buf[n]), buf[n + 1], buf[n + 4] > 0
        self.reported = max(self.reported, rb.join24(buf[n + 2], buf[n + 3]))
        if total > 0:
            self._apply(flat, total)
            self.log.append((self.steps, self.version, rb.decode_tags(buf[n + rb.STEP_HEADER:rates_at])))
        self.log = rb.prune_log(self.log, self.reported)
        previous = self.steps - (1 if total > 0 else 0)
        self.confirm(previous)
        now = time.monotonic()
        if self.rank == 0 and now - self.last_report >= REPORT_INTERVAL:
            self.report_applied(previous)
        if now - self.last_stats >= STATS_INTERVAL:
            self.stats, self.last_stats = self.ring.stats(), now  # for the heartbeat
        if busy == 0 and not boundary:
            self.job._stop.wait(IDLE_WAIT)  # no member had records: wait for work
        return boundary

    def _gather(self, flat, records):
        if self.gpu is not None:
            parts = [torch.zeros(p.numel(), device=self.gpu) if p.grad is None else p.grad.reshape(-1).float()
                     for p in self.params] + [b.reshape(-1).float() for b in self.buffers]
            flat[:self.n_grads].copy_(torch.cat(parts).mul_(records))
            return
        k = 0
        for p in self.params:
            g = flat[k:k + p.numel()]
            if p.grad is None:
                g.zero_()
            else:
                _scaled_into(g, p.grad.reshape(-1), records)
            k += p.numel()
        for b in self.buffers:
            _scaled_into(flat[k:k + b.numel()], b.reshape(-1), records)
            k += b.numel()

    def _apply(self, flat, total):
        if self.gpu is not None:
            flat = flat[:self.n_grads].to(self.gpu)  # the sums, on the model's GPU
        flat[:self.n_grads].div_(total)  # one pass over the ring's memory (or its copy)
        k = 0
        for p in self.params:
            # On the CPU a view of the ring's memory, dropped after the
            # optimizer's step: the memory is rewritten (or remapped) next.
            # On a GPU a view of the sums' copy there.
            p.grad = flat[k:k + p.numel()].view(p.shape).to(p.device)
            k += p.numel()
        for b in self.buffers:
            v = flat[k:k + b.numel()].view(b.shape)
            b.copy_(v if b.is_floating_point() else v.round())
            k += b.numel()
        if self.decay:
            for g, lr in zip(self.opt.param_groups, self.lr0):
                g["lr"] = lr / (1 + self.decay * self.steps)
        self.opt.step()
        for p in self.params:
            p.grad = None
        self.steps += 1

    def confirm(self, up_to):
        """Counts this member's records of the steps up to up_to as trained
        and reports the tasks whose records are all confirmed."""
        for rt in self.book.confirm(up_to):
            rt.report.model_version = self.steps
            self.post(self.job._send_report, rt.report)
        if self.book.empty():
            self.job._current = 0

    def report_applied(self, up_to, wait=False):
        """Queues a report of the logged steps up to up_to the master lacks
        (rank 0's duty; reports are idempotent); wait: until it is sent."""
        if self._ack_failed:  # resend what the failed report held
            self._queued, self._ack_failed = self.reported, False
        req = mpb.ReportAppliedRequest(worker_id=self.job.worker_id, lineage=self.lineage)
        last = self._queued = max(self._queued, self.reported)
        for step, version, parts in self.log:
            if step <= last or step > up_to:
                continue
            st = req.steps.add(step=step, ring_version=version)
            for w, t, s, e in parts:
                st.parts.add(worker_id=w, task_id=t, start=s, end=e)
            self._queued = step
        self.last_report = time.monotonic()
        if req.steps:
            self.post(self._send_applied, req, self._queued)
        if wait:
            self.flush()
            self.reported = max(self.reported, self._acked)

    def _send_applied(self, req, last):  # on the courier
        try:
            self.job._report_applied(req, timeout=10)
        except grpc.RpcError as e:
            print("elasticdl: worker %d: report applied steps: %s" % (self.job.worker_id, e.details()),
                  file=sys.stderr, flush=True)
            self._ack_failed = True
            return
        self._acked = max(self._acked, last)

    def upload(self):
        """Hands the master this member's parameters at the end."""
        if self.lineage == 0 or self.steps == 0:
            return  # never trained in a ring: nothing worth saving
        self.report_applied(self.steps, wait=True)
        req = mpb.UploadModelRequest(worker_id=self.job.worker_id, version=self.steps)
        for name, p in self.model.named_parameters():
            req.dense_parameters.append(tensor(name, p.detach().cpu().numpy()))  # from the device
        req.checksum = rb.checksum([(t.name, t.dims, t.content) for t in req.dense_parameters])
        try:
            self.job._upload_model(req, timeout=60)
        except grpc.RpcError as e:
            if e.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND):
                return  # another member's is taken
            raise ElasticDLError("upload model: %s" % e.details()) from None
        print("elasticdl: worker %d: model uploaded, %d steps, checksum %016x" % (self.job.worker_id, self.steps, req.checksum),
              file=sys.stderr, flush=True)


def batches(job, read):
    """Job.batches under AllReduce: this member's records of each step, as
    one Batch; evaluation and prediction tasks and idle steps run inside."""
    m = job._member
    while not job._check():
        m.check()
        m.before_step()
        if not m.live() and not m.join():
            break
        rt = _next_records(job, m, read)
        if rt is _DONE:
            break
        if rt is None:
            _idle_step(m)
            continue
        start, end = m.book.take(rt, m.share(), m.steps + 1)
        job._current = rt.task.id
        if m.fetch is None and rt.next >= rt.total() and len(m.book.tasks) == 1:
            prefetch(job, m, read)  # its last records: the next task's fetch overlaps this step
        saved = [b.detach().clone() for b in m.buffers]  # the forward updates them
        for p in m.params:
            p.grad = None
        job._pending = [(rt.task.id, start, end), None]
        m.began = time.monotonic()
        yield job._batch(rt.recs, start, end, rt.task, m.steps + 1)
        if job._check():
            return
        outcome, job._pending = job._pending[1], None
        if outcome is None:
            raise ElasticDLError("call job.step(loss) once for every batch, after loss.backward()")
        if isinstance(outcome, RingBroken):
            with torch.no_grad():
                for b, s in zip(m.buffers, saved):
                    b.copy_(s)
            m.broken(outcome)
        elif outcome:
            m.leave()  # a planned change: every member leaves after this step


_DONE = object()


def _idle_step(m):
    try:
        if m.step(None):
            m.leave()
    except RingBroken as e:
        m.broken(e)


def step(job, loss):
    """Job.step under AllReduce: the ring's weighted average of the
    gradients, then the optimizer. Returns whether it was applied."""
    if job._pending is None or job._pending[1] is not None:
        raise ElasticDLError("step: no batch to step: call it once for every batch job.batches() yields")
    part = job._pending[0]
    value = loss_value(loss)
    if value != value or value in (float("inf"), float("-inf")):
        raise ElasticDLError("loss is %s on records [%d, %d) of task %d: this worker stops (AllReduce members step "
                             "together, so one member's task cannot fail alone)" % (value, part[1], part[2], part[0]))
    m = job._member
    m.book.set_loss(value * (part[2] - part[1]))
    try:
        job._pending[1] = m.step(part)  # True: a planned change after this step
        return True
    except RingBroken as e:
        job._pending[1] = e
        return False


def _next_records(job, m, read):
    """The task to take this step's records from; None to step idle; _DONE
    when the job's tasks are done. Runs evaluation and prediction tasks."""
    rt = m.book.pending()
    if rt is not None:
        return rt
    if m.fetch is None:
        if m.book.busy():
            return None
        prefetch(job, m, read)
    fut, m.fetch = m.fetch, None
    resp, recs, report, err = fut.result()
    if resp.action == mpb.GetTaskResponse.DONE:
        return _DONE
    if resp.action == mpb.GetTaskResponse.WAIT:
        return None
    task = resp.task
    if task.type != mpb.TRAINING:
        for _ in job._run_task(task, read):  # evaluation and prediction yield nothing
            pass
        return None
    if err is not None:  # the task's data: the master retries it or fails the job
        report.error = err
        m.post(job._send_report, report)
        return None
    if task.done >= len(recs):
        # Every record is in the ledger already (its last holder was lost
        # after its steps were applied, before it reported): nothing to
        # train, only the report.
        report.model_version = m.steps
        m.post(job._send_report, report)
        return None
    order = np.random.RandomState((task.id * 1000003 + task.epoch) % (1 << 32)).permutation(len(recs))
    rt = rb.RingTask(task, recs.take(order), report)
    m.book.add(rt)
    return rt


def prefetch(job, m, read):
    """Starts fetching this member's next task (and reading its records)
    on the courier; _next_records takes the result."""
    # What this member holds: the master hands out again only a task it
    # thinks held but never got.
    held = [rt.task.id for rt in m.book.tasks]
    m.fetch = m.post(_fetch, job, read, held)


def _fetch(job, read, held):
    """On the courier: GetTask, then a training task's records. Returns
    (response, records, report, the data's error or None)."""
    resp = job._master(job._get_task, mpb.GetTaskRequest(worker_id=job.worker_id, held_tasks=held), "get task")
    if resp.action not in (mpb.GetTaskResponse.DONE, mpb.GetTaskResponse.WAIT, mpb.GetTaskResponse.TASK):
        raise ElasticDLError("the master sent unknown action %d" % resp.action)
    if resp.action != mpb.GetTaskResponse.TASK or resp.task.type != mpb.TRAINING:
        return resp, None, None, None
    task = resp.task
    report = mpb.ReportTaskResultRequest(worker_id=job.worker_id, task_id=task.id)
    try:
        recs = job._read_task(task, read, report)
        if len(recs) < task.done:
            raise ElasticDLError("task %d: %d records done by earlier holders, only %d readable" % (task.id, task.done, len(recs)))
    except (DataError, ElasticDLError, OSError, ValueError) as e:
        return resp, None, report, str(e)
    return resp, recs, report, None
