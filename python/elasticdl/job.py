"""A worker of an elasticdl job, for a PyTorch training loop.

The master hands out tasks (record ranges); :meth:`Job.batches` turns the
training tasks into minibatches, pulling fresh parameters from the
parameter servers before each one, and :meth:`Job.step` pushes the
minibatch's gradients. Evaluation and prediction tasks are run inside the
iterator with the registered model in eval mode. Every minibatch is named
(task, index), so a parameter server applies it once however often it is
pushed: a task redone after its worker died trains each record once.
"""

import math
import os
import shutil
import sys
import threading

import grpc
import numpy as np
import torch

from . import data as datamod
from ._proto import master_pb2 as mpb
from ._proto import pserver_pb2 as ppb
from ._ps import PSClient, holds
from ._rpc import ElasticDLError, Unavailable, channel, methods, retry_unavailable

PS_STRATEGY = "ParameterServerStrategy"
ALLREDUCE_STRATEGY = "AllreduceStrategy"
# Buckets of the score histogram of two-class models (data.AUCBuckets).
AUC_BUCKETS = 10000
# Redos of one minibatch whose gradients sync SGD rejected as stale.
MAX_REJECTED = 100

# How long register() waits for a PS shard before leaving the registration
# to the first task (whose answer names the job's current PS layout).
REGISTER_PATIENCE = 5.0


class Batch:
    """One training minibatch: x (float32 [n, *shape]), y (int64 [n]),
    ids (int64 [n, fields], categorical ids; None without), and where it
    comes from (task, epoch, index within the task)."""

    __slots__ = ("x", "y", "ids", "task_id", "epoch", "index")

    def __init__(self, x, y, ids, task_id, epoch, index):
        self.x, self.y, self.ids = x, y, ids
        self.task_id, self.epoch, self.index = task_id, epoch, index

    def __len__(self):
        return len(self.y)


def parse_model_params(text):
    """--model_params ('a=1; b=x') as a dict of strings."""
    out = {}
    for item in (text or "").split(";"):
        item = item.strip()
        if not item:
            continue
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise ElasticDLError("--model_params: %r is not key=value" % item)
        out[k.strip()] = v.strip()
    return out


def connect(master_addr=None, worker_id=None, ps_addrs=None, timeout=60.0):
    """The job this process is a worker of, from the environment the master
    starts it with (ELASTICDL_MASTER_ADDR, ELASTICDL_WORKER_ID,
    ELASTICDL_PS_ADDRS, ...); arguments override the environment."""
    env = os.environ
    if env.get("ELASTICDL_EXPORT"):  # elasticdl export --worker_command: the script exports, not trains
        from .export import Exporter
        return Exporter(env["ELASTICDL_EXPORT"], env.get("ELASTICDL_EXPORT_CHECKPOINT", ""),
                        parse_model_params(env.get("ELASTICDL_MODEL_PARAMS", "")), seed=int(env.get("ELASTICDL_SEED", "0")),
                        fmt=env.get("ELASTICDL_EXPORT_FORMAT", ""), data=env.get("ELASTICDL_EXPORT_DATA", ""))
    master_addr = master_addr or env.get("ELASTICDL_MASTER_ADDR")
    if not master_addr:
        raise ElasticDLError(
            "no master: ELASTICDL_MASTER_ADDR is not set. This script is a worker of an elasticdl job; run it with "
            "`elasticdl train --worker_command='python3 %s' --optimizer=... --training_data=...`"
            % os.path.basename(sys.argv[0] if sys.argv and sys.argv[0] else "train.py"))
    if worker_id is None:
        try:
            worker_id = int(env.get("ELASTICDL_WORKER_ID", ""))
        except ValueError:
            raise ElasticDLError("ELASTICDL_WORKER_ID=%r: want the worker's integer ID" % env.get("ELASTICDL_WORKER_ID")) from None
    if ps_addrs is None:
        ps_addrs = [a for a in env.get("ELASTICDL_PS_ADDRS", "").split(",") if a]
    return Job(master_addr, worker_id, ps_addrs,
               minibatch_size=int(env.get("ELASTICDL_MINIBATCH_SIZE", "64")),
               seed=int(env.get("ELASTICDL_SEED", "0")),
               optimizer=env.get("ELASTICDL_OPTIMIZER", ""),
               model_params=parse_model_params(env.get("ELASTICDL_MODEL_PARAMS", "")),
               job_name=env.get("ELASTICDL_JOB_NAME", ""),
               use_async=env.get("ELASTICDL_USE_ASYNC", "true") == "true",
               strategy=env.get("ELASTICDL_STRATEGY") or PS_STRATEGY,
               collective_addr=env.get("ELASTICDL_COLLECTIVE_ADDR") or "127.0.0.1:0",
               global_batch_size=int(env.get("ELASTICDL_GLOBAL_BATCH_SIZE") or "0"),
               timeout=timeout)


def loss_value(loss):
    """The float of a loss: a tensor that requires grad is detached first
    (float() of it warns in newer torch)."""
    if loss is None:
        return 0.0
    return float(loss.detach()) if isinstance(loss, torch.Tensor) else float(loss)


def pick_device():
    """The device a worker trains on: $ELASTICDL_DEVICE (cpu, cuda, cuda:N),
    else the GPU when torch sees one (the pod's: Kubernetes gives it the
    devices it requested), else the CPU."""
    name = os.environ.get("ELASTICDL_DEVICE", "")
    if name:
        try:
            dev = torch.device(name)
        except RuntimeError as e:
            raise ElasticDLError("ELASTICDL_DEVICE=%r: %s" % (name, e)) from None
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ElasticDLError("ELASTICDL_DEVICE=%r: torch sees no CUDA device" % name)
        return dev
    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")


class Job:
    """This worker's side of a job. Use :func:`connect`. job.device is where
    to put the model (model.to(job.device)); batches arrive there."""

    def __init__(self, master_addr, worker_id, ps_addrs, minibatch_size=64, seed=0, optimizer="",
                 model_params=None, job_name="", use_async=True, timeout=60.0, heartbeat_interval=2.0,
                 strategy=PS_STRATEGY, collective_addr="127.0.0.1:0", global_batch_size=0):
        if minibatch_size < 1:
            raise ElasticDLError("minibatch_size: must be at least 1, got %d" % minibatch_size)
        if strategy not in (PS_STRATEGY, ALLREDUCE_STRATEGY):
            raise ElasticDLError("strategy: want %s or %s, got %r" % (PS_STRATEGY, ALLREDUCE_STRATEGY, strategy))
        self.strategy, self.collective_addr, self.global_batch_size = strategy, collective_addr, global_batch_size
        self.master_addr, self.worker_id = master_addr, worker_id
        self.minibatch_size, self.seed, self.optimizer = minibatch_size, seed, optimizer
        self.model_params, self.job_name, self.use_async = model_params or {}, job_name, use_async
        self.timeout = timeout
        self._channel = channel(master_addr, "master")
        self.__dict__.update(methods(self._channel, "elasticdl.master.Master", {
            "_get_task": ("GetTask", mpb.GetTaskRequest, mpb.GetTaskResponse),
            "_report": ("ReportTaskResult", mpb.ReportTaskResultRequest, mpb.ReportTaskResultResponse),
            "_report_eval": ("ReportEvaluationMetrics", mpb.ReportEvaluationMetricsRequest, mpb.ReportEvaluationMetricsResponse),
            "_heartbeat": ("Heartbeat", mpb.HeartbeatRequest, mpb.HeartbeatResponse),
            "_join_ring": ("JoinRing", mpb.JoinRingRequest, mpb.RingResponse),
            "_ring_status": ("RingStatus", mpb.RingStatusRequest, mpb.RingResponse),
            "_ring_broken": ("ReportRingBroken", mpb.ReportRingBrokenRequest, mpb.RingResponse),
            "_settle_ring": ("SettleRing", mpb.SettleRingRequest, mpb.RingResponse),
            "_report_applied": ("ReportApplied", mpb.ReportAppliedRequest, mpb.ReportAppliedResponse),
            "_upload_model": ("UploadModel", mpb.UploadModelRequest, mpb.UploadModelResponse),
        }))
        self.ps = PSClient(ps_addrs, timeout) if ps_addrs else None
        self.model = None
        self._forward = None
        self._params = {}       # name -> torch Parameter
        self._embeddings = []   # elasticdl.Embedding modules
        self._ps_tables = None  # registered, the PS not told yet: (name, dim, initializer) of its tables
        self._sources = {}
        self._current = 0       # task in progress, for heartbeats
        self._stop = threading.Event()
        self._fatal = None
        self._pending = None    # the minibatch step() pushes
        self._member = None     # AllReduce: this worker's ring state
        self._shadow = False    # the model is on a GPU: pulls land in host copies
        self._arrays = {}       # name -> the host array the PS client fills
        self.device = pick_device()
        self._let_go = False
        self.rejected = 0
        self._hb = threading.Thread(target=self._beat, args=(heartbeat_interval,), daemon=True, name="elasticdl-heartbeat")
        self._hb.start()

    # -- model -------------------------------------------------------------

    def register(self, model, forward=None, optimizer=None):
        """Registers model. With parameter servers its dense parameters go
        to the PS (the first worker's values win: every worker then trains
        the same model), and its :class:`elasticdl.Embedding` layers look
        their rows up there. With AllReduce every worker holds the model and
        optimizer (a torch.optim optimizer over model's parameters, or, by
        default, the job's --optimizer), and the ring starts them all from
        one worker's. forward(model, batch) -> logits runs it on a minibatch
        for evaluation and prediction (default: model(batch.x), or
        model(batch.x, batch.ids) when the data has categorical ids)."""
        from .embedding import Embedding
        if self.model is not None:
            raise ElasticDLError("register: a model is registered already; one model per job")
        if self.strategy == ALLREDUCE_STRATEGY:
            return self._register_ring(model, forward, optimizer)
        if optimizer is not None:
            raise ElasticDLError("register: optimizer= is for AllreduceStrategy; with parameter servers the PS apply "
                                 "the job's --optimizer")
        if self.ps is None:
            raise ElasticDLError("register: this job has no parameter servers (ELASTICDL_PS_ADDRS is empty)")
        if not isinstance(model, torch.nn.Module):
            raise ElasticDLError("register: want a torch.nn.Module, got %s" % type(model).__name__)
        params, arrays = {}, {}
        for name, p in model.named_parameters():
            if p.dtype != torch.float32:
                raise ElasticDLError("register: parameter %r is %s; the parameter servers hold float32" % (name, p.dtype))
            if not p.is_contiguous():
                p.data = p.data.contiguous()
            params[name] = p
            if p.device.type == "cpu":
                arrays[name] = p.data.numpy()  # shares memory: a pull writes the model
            else:
                # On a GPU: pulls land in a host copy, moved to the device
                # before each batch (_to_device).
                self._shadow = True
                arrays[name] = p.detach().cpu().numpy()
        tables = {}
        for mod in model.modules():
            if isinstance(mod, Embedding):
                if mod.table in tables and tables[mod.table][0] != mod.dim:
                    raise ElasticDLError("register: embedding table %r is used with dimensions %d and %d"
                                         % (mod.table, tables[mod.table][0], mod.dim))
                if self._shadow:
                    raise ElasticDLError("register: elasticdl.Embedding %r looks its rows up on the CPU; keep the model "
                                         "on the CPU to use it" % mod.table)
                tables[mod.table] = (mod.dim, mod.initializer)
                mod._job = self
                self._embeddings.append(mod)
        if not params and not tables:
            raise ElasticDLError("register: the model has no parameters and no elasticdl.Embedding")
        self.model, self._params, self._forward, self._arrays = model, params, forward, arrays
        ps_tables = [(n, d, i) for n, (d, i) in sorted(tables.items())]
        try:
            self.ps.register(arrays, ps_tables, timeout=REGISTER_PATIENCE)
        except Unavailable as e:
            # A worker launched while the PS re-shard was given the layout
            # being retired: the first task's answer names the current one.
            print("elasticdl: worker %d: %s; registering with the PS of the first task's layout"
                  % (self.worker_id, e), file=sys.stderr, flush=True)
            self._ps_tables = ps_tables
        self._to_device()

    def _to_device(self):
        """Copies the pulled parameters to a model that lives on a GPU."""
        if self._shadow:
            with torch.no_grad():
                for name, p in self._params.items():
                    p.copy_(torch.from_numpy(self._arrays[name]))

    def _register_ring(self, model, forward, optimizer):
        from . import _allreduce, _optim
        from ._goring import GoRing
        from .embedding import Embedding
        if not isinstance(model, torch.nn.Module):
            raise ElasticDLError("register: want a torch.nn.Module, got %s" % type(model).__name__)
        if any(isinstance(m, Embedding) for m in model.modules()):
            raise ElasticDLError("register: elasticdl.Embedding tables live on parameter servers: "
                                 "use --distribution_strategy=ParameterServerStrategy")
        for name, p in list(model.named_parameters()) + list(model.named_buffers()):
            if p.is_floating_point() and p.dtype != torch.float32:
                raise ElasticDLError("register: %r is %s; the ring sums float32" % (name, p.dtype))
        decay = 0.0
        if optimizer is None:
            if not self.optimizer:
                raise ElasticDLError("register: no optimizer: pass one (job.register(model, optimizer=torch.optim.Adam("
                                     "model.parameters()))) or run the job with --optimizer")
            optimizer, decay = _optim.build(self.optimizer, model.parameters())
        elif not isinstance(optimizer, torch.optim.Optimizer):
            raise ElasticDLError("register: optimizer: want a torch.optim.Optimizer, got %s" % type(optimizer).__name__)
        binary = os.environ.get("ELASTICDL_BINARY") or shutil.which("elasticdl")
        if not binary:
            raise ElasticDLError("register: the elasticdl binary (its ring helper) is not on PATH and ELASTICDL_BINARY is unset")
        ring = GoRing(binary, listen=self.collective_addr)
        self.model, self._forward = model, forward
        self._params = dict(model.named_parameters())
        self._member = _allreduce.Member(self, model, optimizer, ring, self.global_batch_size)
        self._member.decay = decay

    # -- the master --------------------------------------------------------

    def _master(self, fn, req, what):
        return retry_unavailable(lambda: fn(req), self.timeout, "master %s: %s" % (self.master_addr, what))

    def _beat(self, interval):
        while not self._stop.wait(interval):
            req = mpb.HeartbeatRequest(worker_id=self.worker_id, task_id=self._current)
            if self._member is not None:
                req.allreduce_ops, req.allreduce_bytes, req.allreduce_seconds = self._member.stats
            try:
                resp = self._heartbeat(req, timeout=10)
            except grpc.RpcError as e:
                if e.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION):
                    self._fatal = "the master refused this worker's heartbeat: %s" % e.details()
                    self._stop.set()
                continue
            if resp.stop:
                self._let_go = resp.let_go
                self._stop.set()

    def _check(self):
        if self._fatal:
            raise ElasticDLError(self._fatal)
        return self._stop.is_set()

    def close(self):
        """Stops the heartbeat and closes the connections."""
        self._stop.set()
        if self._member is not None:
            self._member.close()
        self._channel.close()
        if self.ps:
            self.ps.close()

    # -- tasks -------------------------------------------------------------

    def batches(self, reader=None):
        """Training minibatches until the master says the job is done.

        reader(name, start, end) -> elasticdl.data.Records reads a task's
        records from a source of the user's own (default: the built-in
        readers, elasticdl.data.open_source). Call :meth:`step` once per
        batch, after loss.backward(); gradients are zeroed before each."""
        if self.model is None:
            raise ElasticDLError("batches: register the model first (job.register(model))")
        read = reader or self._read_builtin
        if self._member is not None:
            yield from self._ring_batches(read)
            return
        try:
            while not self._check():
                resp = self._master(self._get_task, mpb.GetTaskRequest(worker_id=self.worker_id), "get task")
                if resp.action == mpb.GetTaskResponse.DONE:
                    print("elasticdl: worker %d: job done; %d pushes rejected as stale (sync SGD) and redone"
                          % (self.worker_id, self.rejected), file=sys.stderr, flush=True)
                    return
                if resp.action == mpb.GetTaskResponse.WAIT:
                    self._stop.wait(resp.wait_ms / 1000.0)
                    continue
                if resp.action != mpb.GetTaskResponse.TASK:
                    raise ElasticDLError("the master sent unknown action %d" % resp.action)
                self._follow_layout(resp)
                yield from self._run_task(resp.task, read)
                if self._check():
                    return
        finally:
            self._current = 0

    def _read_task(self, task, read, report):
        """The task's records, counting its corrupt ones into report."""
        recs = read(task.shard.name, task.shard.start, task.shard.end)
        if not isinstance(recs, datamod.Records):
            raise ElasticDLError("reader returned %s, want elasticdl.data.Records" % type(recs).__name__)
        report.corrupt_records = len(recs.corrupt)
        if recs.corrupt:
            report.first_corrupt_error = str(recs.corrupt[0][1])
        return recs

    def _run_task(self, task, read):
        """Runs a task and reports it (a generator: a training task yields
        its minibatches)."""
        self._current = task.id
        report = mpb.ReportTaskResultRequest(worker_id=self.worker_id, task_id=task.id)
        try:
            recs = self._read_task(task, read, report)
            if task.type == mpb.TRAINING:
                yield from self._train(task, recs, report)
            elif task.type == mpb.EVALUATION:
                self._evaluate(task, recs, report)
            elif task.type == mpb.PREDICTION:
                self._predict(task, recs, report)
            else:
                raise _TaskError("task type %d is not supported by this worker" % task.type)
        except (_TaskError, datamod.DataError) as e:
            # The task's fault (bad data, NaN loss): the master
            # retries it elsewhere or fails the job.
            report.error = str(e)
            report.ClearField("predictions")
        if self._check():
            return
        report.model_version = self._model_version()
        self._send_report(report)
        self._current = 0

    def _send_report(self, report):
        """Reports a task's result (both strategies)."""
        try:
            self._master(self._report, report, "report task %d" % report.task_id)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.INVALID_ARGUMENT:
                # What this worker sends does not fit the job (e.g.
                # a prediction with another number of classes than
                # --num_classes): retrying cannot help.
                raise ElasticDLError("the master refused the report of task %d: %s" % (report.task_id, e.details())) from None
            if e.code() != grpc.StatusCode.FAILED_PRECONDITION:
                raise
            # The master took the task back (a timeout): its next holder
            # resumes after what the master has (PS: the shards' minibatch
            # keys; AllReduce: the ledger).

    def _model_version(self):
        return self._member.steps if self._member is not None else self.ps.version()

    def _ring_batches(self, read):
        from ._allreduce import LetGo, batches
        try:
            yield from batches(self, read)
        except LetGo:
            print("elasticdl: worker %d: let go by the master (scale down): left the ring at a step boundary"
                  % self.worker_id, file=sys.stderr, flush=True)
            return
        finally:
            self._current = 0
        if not self._let_go and not self._fatal:
            self._member.upload()  # the tasks are done: hand the master the model
        print("elasticdl: worker %d: job done after %d steps" % (self.worker_id, self._member.steps), file=sys.stderr, flush=True)

    def _read_builtin(self, name, start, end):
        src = self._sources.get(name)
        if src is None:
            src = self._sources[name] = datamod.open_source(name)
        return src.read(start, end)

    def _follow_layout(self, resp):
        """Registers the model with the PS of the task's layout, and
        re-connects when the job re-sharded its parameter servers."""
        addrs = list(resp.ps_addrs)
        tables = self._ps_tables
        if tables is None:
            if not addrs or addrs == self.ps.addrs:
                return
            tables = [(t.name, t.dim, t.initializer) for t in self.ps.tables]
        new = self.ps
        if addrs and addrs != self.ps.addrs:
            new = PSClient(addrs, self.timeout)
        new.register(self._arrays, tables)
        if new is not self.ps:
            self.ps.close()
            self.ps = new
        self._ps_tables = None

    def _batch(self, recs, lo, hi, task, index):
        dev = self.device
        ids = None if recs.ids is None else torch.from_numpy(recs.ids[lo:hi]).to(dev)
        task_id, epoch = (task.id, task.epoch) if task is not None else (0, 0)
        return Batch(torch.from_numpy(recs.x[lo:hi]).to(dev), torch.from_numpy(recs.y[lo:hi]).to(dev), ids, task_id, epoch, index)

    def _train(self, task, recs, report):
        # The task's records in a fixed order of its own (id, epoch): the
        # index-th minibatch is the same whoever trains the task.
        order = np.random.RandomState((task.id * 1000003 + task.epoch) % (1 << 32)).permutation(len(recs))
        recs = recs.take(order)
        held = None  # once a shard says it holds a minibatch: what each holds
        # fresh: the last push brought the parameters back (async), so the
        # next batch needs no pull.
        fresh = False
        mbs = self.minibatch_size
        for index, lo in enumerate(range(0, len(recs), mbs)):
            hi = min(lo + mbs, len(recs))
            key = ppb.MinibatchKey(task_id=task.id, index=index)
            leave_out = None
            if held is not None:
                leave_out = lambda shard, index=index: holds(held[shard], index)
                if all(leave_out(i) for i in range(len(held))):
                    report.records += hi - lo  # in the model already
                    continue
            only_rejected = False
            for attempt in range(MAX_REJECTED + 1):
                if not fresh:
                    self.ps.pull()
                self._to_device()
                for p in self._params.values():
                    p.grad = None
                for e in self._embeddings:
                    e._lookups.clear()
                self._pending = [key, leave_out, only_rejected, None]
                yield self._batch(recs, lo, hi, task, index)
                if self._check():
                    return
                if self._pending[3] is None:
                    raise ElasticDLError("call job.step(loss) once for every batch, after loss.backward()")
                result, self._pending = self._pending[3], None
                if isinstance(result, str):
                    raise _TaskError(result)
                accepted, duplicate, fresh, loss = result
                if duplicate and held is None:
                    held = self.ps.applied(task.id)
                if accepted:
                    report.records += hi - lo
                    report.loss_sum += loss
                    report.steps += 1
                    break
                only_rejected = True
                self.rejected += 1
            else:
                raise ElasticDLError("push gradients: rejected %d times in a row (sync SGD)" % (MAX_REJECTED + 1))

    def step(self, loss=None):
        """Pushes the current batch's gradients (of loss.backward()) to the
        parameter servers. loss (a tensor or float) is what the master's
        progress shows; a loss that is not finite fails the task."""
        if self._member is not None:
            from ._allreduce import step
            return step(self, loss)
        if self._pending is None or self._pending[3] is not None:
            raise ElasticDLError("step: no batch to step: call it once for every batch job.batches() yields")
        key, leave_out, only_rejected, _ = self._pending
        value = loss_value(loss)
        if not math.isfinite(value):
            # The task fails (the master retries it, or fails the job):
            # nothing of this minibatch is pushed.
            self._pending[3] = "loss is %s on minibatch %d of task %d" % (value, key.index, key.task_id)
            return False
        grads = {}
        for name, p in self._params.items():
            g = p.grad
            grads[name] = np.zeros(p.shape, np.float32) if g is None else g.detach().cpu().numpy()
        sparse = {}
        for e in self._embeddings:
            for uniq, rows in e._lookups:
                if rows.grad is None:
                    continue
                ids, vals = sparse.get(e.table, ((), ()))
                sparse[e.table] = (list(ids) + [uniq], list(vals) + [rows.grad.numpy()])
        sparse = {t: (np.concatenate(i), np.concatenate(v)) for t, (i, v) in sparse.items()}
        accepted, duplicate, fresh = self.ps.push(self.worker_id, grads, sparse, key, only_rejected, leave_out,
                                                  want_params=self.use_async)
        self._pending[3] = (accepted, duplicate, fresh, value)
        return accepted

    def _infer(self, recs):
        """Yields (logits as a numpy array, lo, hi) over recs's minibatches."""
        if self.ps is not None:
            self.ps.pull()
            self._to_device()
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                for lo in range(0, len(recs), self.minibatch_size):
                    hi = min(lo + self.minibatch_size, len(recs))
                    b = self._batch(recs, lo, hi, None, 0)
                    for e in self._embeddings:
                        e._lookups.clear()
                    if self._forward is not None:
                        logits = self._forward(self.model, b)
                    elif b.ids is None:
                        logits = self.model(b.x)
                    else:
                        logits = self.model(b.x, b.ids)
                    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or logits.shape[0] != hi - lo:
                        raise ElasticDLError("forward: want logits [%d, classes], got %s" % (
                            hi - lo, tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__))
                    yield logits.float().cpu(), lo, hi  # metrics are summed on the host
        finally:
            self.model.train(was_training)

    def _evaluate(self, task, recs, report):
        correct = loss_sum = 0.0
        pos = neg = None
        for logits, lo, hi in self._infer(recs):
            y = torch.from_numpy(recs.y[lo:hi])
            loss_sum += float(torch.nn.functional.cross_entropy(logits, y, reduction="sum"))
            correct += float((logits.argmax(1) == y).sum())
            if logits.shape[1] == 2:
                p1 = torch.softmax(logits, 1)[:, 1].numpy().astype(np.float64)
                b = np.minimum((np.clip(p1, 0, 1) * AUC_BUCKETS).astype(np.int64), AUC_BUCKETS - 1)
                b[~(p1 > 0)] = 0
                lab = recs.y[lo:hi] != 0
                pp, nn_ = np.bincount(b[lab], minlength=AUC_BUCKETS), np.bincount(b[~lab], minlength=AUC_BUCKETS)
                pos = pp if pos is None else pos + pp
                neg = nn_ if neg is None else neg + nn_
            report.records += hi - lo
            report.steps += 1
        report.loss_sum = loss_sum
        req = mpb.ReportEvaluationMetricsRequest(worker_id=self.worker_id, task_id=task.id, model_version=self._model_version(),
                                                 records=report.records, sums={"correct": correct, "loss": loss_sum})
        if pos is not None:
            req.score_histogram.positive.extend(pos.tolist())
            req.score_histogram.negative.extend(neg.tolist())
        self._master(self._report_eval, req, "report evaluation metrics of task %d" % task.id)

    def _predict(self, task, recs, report):
        p = report.predictions
        for logits, lo, hi in self._infer(recs):
            probs = torch.softmax(logits, 1)
            p.num_classes = probs.shape[1]
            p.record_index.extend(recs.index[lo:hi].tolist())
            p.predicted_class.extend(probs.argmax(1).tolist())
            p.probabilities.extend(probs.reshape(-1).tolist())
            report.records += hi - lo
            report.steps += 1


class _TaskError(Exception):
    """A failure of the task's data, not of the worker."""
