"""A job's trained model as a PyTorch state_dict, for use without the job.

A PyTorch job's parameters live on its parameter servers, which write
them to ``OUTPUT/model/version-N/variables-i-of-n.ckpt`` (one file per
shard, a ``Checkpoint`` message each). ``state_dict(model, dir)`` reads the
newest complete version into the shape of the user's own module:

    model = DeepFM(...)
    model.load_state_dict(torch.load("model.pt"))

Dense parameters go under their own names. An :class:`elasticdl.Embedding`
gets its table (the ids the job trained and their rows) as its module's
extra state; looked up without a job, an id the table lacks reads zeros,
as in the job's predict and evaluate jobs (their PS answer such an id with
zeros) and in the ONNX export, so the exported model predicts as
``elasticdl predict`` does. Buffers (BatchNorm's
running statistics) are the module's own: parameter servers do not keep
them.

The script itself exports: run it with ``ELASTICDL_EXPORT=model.pt`` and
``ELASTICDL_EXPORT_CHECKPOINT=OUTPUT/model`` (``elasticdl export
--worker_command`` sets both) and :func:`elasticdl.connect` returns an
:class:`Exporter`, whose ``register(model)`` writes the file; its
``batches()`` yields nothing, so the training loop ends at once.
"""

import os
import re

import numpy as np
import torch

from ._proto import pserver_pb2 as pb
from ._rpc import ElasticDLError

__all__ = ["state_dict", "read_checkpoint", "Exporter", "ExportError"]

_VERSION = re.compile(r"^version-(0|[1-9][0-9]*)$")
_FILE = re.compile(r"^variables-(0|[1-9][0-9]*)-of-([1-9][0-9]*)\.ckpt$")


class ExportError(ElasticDLError):
    """The checkpoint is missing, incomplete or of another model."""


def _complete_versions(root):
    try:
        names = os.listdir(root)
    except OSError as e:
        raise ExportError("checkpoint %s: %s" % (root, e.strerror or e)) from None
    out = []
    for name in names:
        m = _VERSION.match(name)
        if not m:
            continue
        files = {}
        for f in os.listdir(os.path.join(root, name)):
            fm = _FILE.match(f)
            if fm:
                files.setdefault(int(fm.group(2)), {})[int(fm.group(1))] = os.path.join(root, name, f)
        for n, shards in files.items():
            if len(shards) == n:  # every shard's file: a complete version
                out.append((int(m.group(1)), [shards[i] for i in range(n)]))
    return sorted(out)


def _array(t):
    if t.dtype == pb.BFLOAT16:
        a = (np.frombuffer(t.content, "<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        a = np.frombuffer(t.content, "<f4")
    return a.reshape(list(t.dims)).copy()


def read_checkpoint(root, version=None):
    """The newest complete version under root (or the one given): (version,
    dense {name: array}, tables {name: (info, ids, rows)})."""
    versions = _complete_versions(root)
    if version is not None:
        versions = [v for v in versions if v[0] == version]
    if not versions:
        raise ExportError("checkpoint %s: no complete version%s (want version-N/variables-i-of-n.ckpt, all n)"
                          % (root, "" if version is None else " %d" % version))
    v, paths = versions[-1]
    dense, tables = {}, {}
    for p in paths:
        c = pb.Checkpoint()
        try:
            with open(p, "rb") as f:
                c.ParseFromString(f.read())
        except Exception as e:  # a torn or foreign file
            raise ExportError("checkpoint %s: %s" % (p, e)) from None
        for t in c.dense_parameters:
            dense[t.name] = _array(t)
        for e in c.embedding_tables:
            info, ids = e.info, np.asarray(e.ids, np.int64)
            rows = _array(e.values).reshape(len(ids), info.dim) if len(ids) else np.zeros((0, info.dim), np.float32)
            if info.name in tables:
                _, i0, r0 = tables[info.name]
                ids, rows = np.concatenate([i0, ids]), np.concatenate([r0, rows])
            tables[info.name] = (info, ids, rows)
    return v, dense, tables


def state_dict(model, root, version=None):
    """model's state_dict with the job's trained values from checkpoint
    directory root: what ``model.load_state_dict`` takes."""
    from .embedding import Embedding
    _, dense, tables = read_checkpoint(root, version)
    state = model.state_dict()
    for name, p in model.named_parameters():
        a = dense.get(name)
        if a is None:
            raise ExportError("checkpoint %s holds no parameter %r: a checkpoint of another model? (it has %s)"
                              % (root, name, ", ".join(sorted(dense)[:12]) or "none"))
        if tuple(a.shape) != tuple(p.shape):
            raise ExportError("checkpoint %s: parameter %r is %s, the model's %s: a checkpoint of another model?"
                              % (root, name, list(a.shape), list(p.shape)))
        state[name] = torch.from_numpy(a).to(p.dtype)
    for path, m in model.named_modules():
        if not isinstance(m, Embedding):
            continue
        info, ids, rows = tables.get(m.table, (None, np.zeros(0, np.int64), np.zeros((0, m.dim), np.float32)))
        if info is not None and info.dim != m.dim:
            raise ExportError("checkpoint %s: table %r has dim %d, the model's %d" % (root, m.table, info.dim, m.dim))
        state[(path + "." if path else "") + "_extra_state"] = {
            "table": m.table, "dim": m.dim, "ids": torch.from_numpy(ids), "values": torch.from_numpy(rows)}
    return state


class Exporter:
    """What elasticdl.connect() returns under ELASTICDL_EXPORT: the job's
    settings, and a register() that writes the model's state."""

    def __init__(self, output, checkpoint, model_params, seed=0, minibatch_size=64, fmt="pytorch", data=""):
        self.output, self.checkpoint, self.format, self.data = output, checkpoint, fmt or "pytorch", data
        self.model_params, self.seed, self.minibatch_size = model_params, seed, minibatch_size
        self.device = torch.device("cpu")
        self.worker_id = -1

    def register(self, model, optimizer=None, forward=None):
        state = state_dict(model, self.checkpoint)
        model.load_state_dict(state)  # checks that the module takes it
        tmp = self.output + ".tmp"
        try:
            if self.format == "onnx":
                _onnx(model, forward, self.data, tmp)
            else:
                torch.save(state, tmp)
            os.replace(tmp, self.output)
        except (OSError, RuntimeError) as e:  # torch raises RuntimeError for a missing directory
            raise ExportError("export to %s: %s" % (self.output, getattr(e, "strerror", None) or e)) from None
        print("elasticdl: exported %d tensors of %s to %s (%s)" % (len(state), self.checkpoint, self.output, self.format), flush=True)

    def batches(self, reader=None):
        return iter(())

    def step(self, loss=None):
        raise ElasticDLError("step: an export runs no training")


class _Served(torch.nn.Module):
    """The model as the SDK runs it in evaluation, with the outputs the Go
    models' ONNX files have: logits and their softmax."""

    def __init__(self, model, forward):
        super().__init__()
        self.model, self.fwd = model, forward

    def forward(self, x, ids=None):
        if self.fwd is not None:
            from types import SimpleNamespace
            logits = self.fwd(self.model, SimpleNamespace(x=x, ids=ids))
        else:
            logits = self.model(x) if ids is None else self.model(x, ids)
        return logits, torch.softmax(logits, 1)


def _onnx(model, forward, source, path):
    """model as ONNX (opset 17, torch.onnx's tracer), its input's shape
    from one record of source: inputs features (or dense and ids), outputs
    logits and probabilities, as elasticdl export names the Go models'."""
    from . import data as datamod
    from .embedding import Embedding
    tables = [m for m in model.modules() if isinstance(m, Embedding)]
    if not source:
        raise ExportError("ONNX of a PyTorch model: give a data source of its input (--data) for the input's shape")
    r = datamod.open_source(source).read(0, 1)
    x = torch.from_numpy(r.x)
    args, names = (x,), ["features"]
    if r.ids is not None:
        args, names = (x, torch.from_numpy(r.ids)), ["dense", "ids"]
    model.eval()
    axes = {n: {0: "batch"} for n in names + ["logits", "probabilities"]}
    # An elasticdl.Embedding's lookup is ai.onnx.ml's LabelEncoder (its
    # version 2 maps int64 to int64).
    opsets = {"ai.onnx.ml": 2} if tables else None
    # The tracer's state_dict takes tensors only: the tables' extra state
    # (a dict) is left out while it runs; the lookup writes them itself.
    saved = Embedding.get_extra_state
    Embedding.get_extra_state = torch.nn.Module.get_extra_state
    try:
        with torch.no_grad():
            torch.onnx.export(_Served(model, forward), args, path, input_names=names,
                              output_names=["logits", "probabilities"], dynamic_axes=axes, opset_version=17,
                              custom_opsets=opsets)
    finally:
        Embedding.get_extra_state = saved
