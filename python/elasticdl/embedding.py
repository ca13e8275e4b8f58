"""Embedding tables on the parameter servers, as a torch module."""

import numpy as np
import torch

from ._rpc import ElasticDLError


class Embedding(torch.nn.Module):
    """Like torch.nn.Embedding, but the table lives on the job's parameter
    servers, sharded by id (id mod shards), and has no fixed size: any
    int64 id >= 0 has a row, created from initializer on first use.
    forward(ids) of any shape returns [*ids.shape, dim]; only the rows of
    the minibatch's distinct ids travel, and step() pushes their gradient
    rows. Several modules may share one table (same name and dim).

    initializer: "uniform:LO,HI" (default uniform:-0.05,0.05),
    "normal:MEAN,STDDEV", "zeros" or "constant:V"; a row's initial values
    depend only on (table, id), so every shard and every run agree."""

    def __init__(self, dim, table, initializer=""):
        super().__init__()
        if int(dim) < 1:
            raise ElasticDLError("Embedding %r: dim must be at least 1, got %r" % (table, dim))
        if not table:
            raise ElasticDLError("Embedding: give the table a name")
        self.dim, self.table, self.initializer = int(dim), table, initializer
        self._job = None
        self._local = None  # (sorted ids, their rows): an exported table, for use without a job
        self._lookups = []  # (distinct ids, their rows as a leaf tensor) of this step

    def forward(self, ids):
        if self._job is None and self._local is None:
            raise ElasticDLError("Embedding %r: register the model with the job first (job.register(model)), or load "
                                 "an exported model's state (model.load_state_dict)" % self.table)
        if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.int64, torch.int32):
            raise ElasticDLError("Embedding %r: want an int64 tensor of ids, got %s" % (
                self.table, ids.dtype if isinstance(ids, torch.Tensor) else type(ids).__name__))
        flat = ids.reshape(-1).to(torch.int64).numpy()
        uniq, inverse = np.unique(flat, return_inverse=True)
        if self._job is None:
            if torch.onnx.is_in_onnx_export():
                return _Lookup.apply(ids.to(torch.int64), self)
            return torch.from_numpy(self._lookup(uniq)[inverse]).reshape(*ids.shape, self.dim)
        rows = torch.from_numpy(self._job.ps.pull_embeddings(self.table, uniq))
        if torch.is_grad_enabled() and self.training:
            rows.requires_grad_(True)
            self._lookups.append((uniq, rows))
        return rows[torch.from_numpy(inverse)].reshape(*ids.shape, self.dim)

    def _lookup(self, uniq):
        """Rows of sorted distinct ids from the exported table; an id it
        lacks (never trained) reads zeros, as in the job's predict and
        evaluate jobs and the ONNX export (docs/design-export.md)."""
        ids, values = self._local
        pos = np.minimum(np.searchsorted(ids, uniq), max(len(ids) - 1, 0))
        found = (ids[pos] == uniq) if len(ids) else np.zeros(len(uniq), bool)
        rows = np.zeros((len(uniq), self.dim), np.float32)
        rows[found] = values[pos[found]]
        return rows

    def get_extra_state(self):
        # The table in a state_dict: elasticdl.export writes it; a job's own
        # model holds none (its rows live on the PS).
        if self._local is None:
            return {"table": self.table, "dim": self.dim}
        return {"table": self.table, "dim": self.dim, "ids": torch.from_numpy(self._local[0]),
                "values": torch.from_numpy(self._local[1])}

    def set_extra_state(self, state):
        if state.get("table") != self.table or int(state.get("dim", -1)) != self.dim:
            raise ElasticDLError("Embedding %r (dim %d): the state is of table %r, dim %r" % (
                self.table, self.dim, state.get("table"), state.get("dim")))
        if "ids" in state:
            ids = np.asarray(state["ids"], np.int64)
            order = np.argsort(ids, kind="stable")
            self._local = (ids[order], np.asarray(state["values"], np.float32).reshape(len(ids), self.dim)[order])

    def extra_repr(self):
        return "table=%r, dim=%d" % (self.table, self.dim)



class _Lookup(torch.autograd.Function):
    """An exported table's lookup as torch.onnx writes it: ai.onnx.ml's
    LabelEncoder maps each id to its row's index (an id the table lacks to
    the zeros row after the last), then Gather takes the rows, as elasticdl
    export writes the Go recommenders' hashed ids."""

    @staticmethod
    def forward(ctx, ids, emb):
        uniq, inverse = np.unique(ids.reshape(-1).numpy(), return_inverse=True)
        return torch.from_numpy(emb._lookup(uniq)[inverse]).reshape(*ids.shape, emb.dim)

    @staticmethod
    def symbolic(g, ids, emb):
        keys, values = emb._local
        index = g.op("ai.onnx.ml::LabelEncoder", ids, keys_int64s_i=[int(k) for k in keys],
                     values_int64s_i=list(range(len(keys))), default_int64_i=len(keys))
        index.setType(ids.type())  # int64 of the ids' shape: torch.onnx cannot infer an ai.onnx.ml op's
        table = np.concatenate([values, np.zeros((1, emb.dim), np.float32)])
        return g.op("Gather", g.op("Constant", value_t=torch.from_numpy(table)), index, axis_i=0)
