"""The parameter-server client: dense parameters by name hash, embedding
rows by id, one shard each; the Go workers' routing (internal/ps/shard)."""

import time

import grpc
import numpy as np

from ._proto import pserver_pb2 as pb
from ._rpc import ElasticDLError, channel, methods, retry_unavailable


def shard_of(name, num_shards):
    """The shard of a dense parameter: FNV-1a 32 of its name mod shards."""
    h = 2166136261
    for b in name.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h % num_shards


def tensor(name, array):
    """A float32 array as a wire Tensor (raw little-endian bytes)."""
    a = np.ascontiguousarray(array, dtype="<f4")
    return pb.Tensor(name=name, dims=list(a.shape), content=a.tobytes())


class _Shard:
    def __init__(self, index, addr):
        self.index, self.addr = index, addr
        self.channel = channel(addr, "ps")
        self.__dict__.update(methods(self.channel, "elasticdl.pserver.Pserver", {
            "push_model": ("PushModel", pb.Model, pb.PushModelResponse),
            "pull_dense": ("PullDenseParameters", pb.PullDenseParametersRequest, pb.PullDenseParametersResponse),
            "push_gradients": ("PushGradients", pb.PushGradientsRequest, pb.PushGradientsResponse),
            "pull_embeddings": ("PullEmbeddingVectors", pb.PullEmbeddingVectorsRequest, pb.PullEmbeddingVectorsResponse),
            "get_applied": ("GetApplied", pb.GetAppliedRequest, pb.GetAppliedResponse),
        }))
        # version: of the values this worker holds (-1: unknown, pull all);
        # have: they came from (or initialized) the shard, so they may
        # re-initialize it after a relaunch; rejected: the last push was
        # declined (sync SGD, stale).
        self.version, self.have, self.rejected = -1, False, False


class PSClient:
    """Talks to every PS shard of the job; not thread-safe (one trainer)."""

    def __init__(self, addrs, timeout=60.0):
        if not addrs:
            raise ElasticDLError("no parameter-server addresses: the job has none (ELASTICDL_PS_ADDRS is empty)")
        self.addrs = list(addrs)
        self.shards = [_Shard(i, a) for i, a in enumerate(addrs)]
        self.timeout = timeout
        self.params = {}   # name -> numpy view of the torch parameter (values)
        self.tables = []   # EmbeddingTableInfo
        self._dims = {}

    def close(self):
        for s in self.shards:
            s.channel.close()

    def _call(self, shard, fn, req, what, timeout=None):
        try:
            return retry_unavailable(lambda: fn(req), timeout or self.timeout,
                                     "PS shard %d (%s): %s" % (shard.index, shard.addr, what))
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.UNAVAILABLE:
                shard.version = -1
            raise

    def version(self):
        return max(s.version for s in self.shards)

    def groups(self):
        g = [[] for _ in self.shards]
        for name in self.params:
            g[shard_of(name, len(self.shards))].append(name)
        return g

    def register(self, params, tables, timeout=None):
        """params: name -> float32 numpy array sharing memory with the
        model; tables: (name, dim, initializer) of the embedding tables.
        A shard unreachable for timeout (default: the client's) raises
        Unavailable."""
        self.params = params
        self.tables = [pb.EmbeddingTableInfo(name=n, dim=d, initializer=i) for n, d, i in tables]
        self._dims = {n: d for n, d, _ in tables}
        for s, names in zip(self.shards, self.groups()):
            self._push_model(s, names, 0, reinit=False, timeout=timeout)

    def _push_model(self, s, names, version, reinit, timeout=None):
        req = pb.Model(version=version, dense_parameters=[tensor(n, self.params[n]) for n in names],
                       embedding_table_infos=self.tables, reinit=reinit)
        resp = self._call(s, s.push_model, req, "push model", timeout)
        if resp.accepted:
            s.version, s.have = resp.version, True
        return resp.accepted

    def _reinit(self, s, names, attempts):
        if attempts[0] > 0:
            time.sleep(min(0.05 * 2 ** attempts[0], 1.0))
        if attempts[0] > 200:
            raise ElasticDLError("PS shard %d (%s): still uninitialized after re-initializing it" % (s.index, s.addr))
        attempts[0] += 1
        if not self._push_model(s, names, max(s.version, 0), reinit=True):
            s.version = -1  # another worker's values got there first

    def _wait_for_init(self, s, attempts):
        attempts[0] += 1
        if attempts[0] * 0.1 > self.timeout:
            raise ElasticDLError("PS shard %d (%s): no worker re-initialized it in %.0fs" % (s.index, s.addr, self.timeout))
        time.sleep(0.1)

    def pull(self):
        """Fills every parameter in place with the shard's values; shards
        whose version this worker holds send nothing."""
        for s, names in zip(self.shards, self.groups()):
            if names:
                self._pull_shard(s, names)

    def _pull_shard(self, s, names):
        attempts, waited = [0], 0.0
        while True:
            resp = self._call(s, s.pull_dense, pb.PullDenseParametersRequest(version=s.version), "pull")
            if not resp.initialized:
                if s.have:
                    self._reinit(s, names, attempts)
                    continue
                if waited > self.timeout:
                    raise ElasticDLError("PS shard %d (%s): no worker pushed the model in %.0fs" % (s.index, s.addr, waited))
                time.sleep(0.1)
                waited += 0.1
                continue
            got = resp.dense_parameters
            if not got and resp.version == s.version:
                return
            self._adopt(s, names, got, resp.version)
            return

    def _adopt(self, s, names, got, version):
        """Writes the tensors a shard sent (all of its parameters) into the
        model's, in place, and records their version."""
        want = set(names)
        if {t.name for t in got} != want or len(got) != len(want):
            extra = sorted({t.name for t in got} - want)
            missing = sorted(want - {t.name for t in got})
            raise ElasticDLError(
                "PS shard %d (%s) holds other parameters than this model: %s%s (a checkpoint of another model, or "
                "workers of different models in one job)" % (s.index, s.addr,
                "unknown to the model: %s" % extra if extra else "",
                (" " if extra else "") + ("missing: %s" % missing if missing else "")))
        for t in got:
            dst = self.params[t.name]
            if tuple(t.dims) != dst.shape:
                raise ElasticDLError("PS shard %d (%s): parameter %r has shape %s there, %s in this model"
                                     % (s.index, s.addr, t.name, list(t.dims), list(dst.shape)))
            dst[...] = np.frombuffer(t.content, dtype="<f4").reshape(dst.shape)
        s.version, s.have = version, True

    def pull_embeddings(self, table, ids):
        """Rows of ids (distinct, int64 >= 0) of table: float32 [len, dim]."""
        dim = self._dims.get(table)
        if dim is None:
            raise ElasticDLError("embedding table %r is not registered (register the model first)" % table)
        n = len(self.shards)
        out = np.empty((len(ids), dim), dtype=np.float32)
        if len(ids) == 0:
            return out
        if ids.min() < 0:
            raise ElasticDLError("embedding table %r: negative id %d" % (table, ids.min()))
        where = ids % n
        for s in self.shards:
            mask = where == s.index
            if not mask.any():
                continue
            sub = ids[mask]
            attempts = [0]
            while True:
                try:
                    resp = self._call(s, s.pull_embeddings, pb.PullEmbeddingVectorsRequest(name=table, ids=sub.tolist()), "pull embeddings")
                    break
                except grpc.RpcError as e:
                    if e.code() != grpc.StatusCode.FAILED_PRECONDITION:
                        raise
                    # An empty, relaunched shard: this worker restores it
                    # when it holds the shard's values (or the shard has no
                    # dense parameters); otherwise another worker will.
                    names = self.groups()[s.index]
                    if s.have or not names:
                        self._reinit(s, names, attempts)
                    else:
                        self._wait_for_init(s, attempts)
            out[mask] = np.frombuffer(resp.rows.content, dtype="<f4").reshape(len(sub), dim)
        return out

    def push(self, worker_id, grads, sparse, key, only_rejected=False, leave_out=None, want_params=False):
        """Pushes one minibatch: grads (name -> array) to their shards,
        sparse (table -> (ids, rows)) by id, keyed so that a shard applies
        it once. With want_params (async SGD) each shard answers with its
        parameters after the push, written into the model: the next step
        needs no pull. Returns (accepted, duplicate, fresh), fresh when
        every shard with parameters sent them."""
        n = len(self.shards)
        groups = self.groups()
        accepted, duplicate, fresh = True, False, want_params
        for s, names in zip(self.shards, groups):
            if leave_out is not None and leave_out(s.index) or only_rejected and not s.rejected:
                fresh = fresh and not names  # not asked: pull it
                continue
            slices = []
            for table, (ids, rows) in sparse.items():
                mask = ids % n == s.index
                if mask.any():
                    slices.append(pb.IndexedSlices(values=tensor(table, rows[mask]), ids=ids[mask].tolist()))
            grad_tensors = [tensor(name, grads[name]) for name in names]
            attempts = [0]
            while True:
                req = pb.PushGradientsRequest(worker_id=worker_id, version=s.version, gradients=grad_tensors,
                                              embedding_gradients=slices, minibatch=key, return_parameters=want_params)
                try:
                    resp = self._call(s, s.push_gradients, req, "push gradients")
                    break
                except grpc.RpcError as e:
                    # An empty, relaunched shard: restore it from this
                    # worker's values (what the gradients were computed on).
                    if e.code() != grpc.StatusCode.FAILED_PRECONDITION or not (s.have or not names):
                        raise
                    self._reinit(s, names, attempts)
            s.rejected = not resp.accepted
            accepted = accepted and resp.accepted
            duplicate = duplicate or resp.duplicate
            if want_params and names:
                if resp.dense_parameters:
                    self._adopt(s, names, resp.dense_parameters, resp.version)
                else:
                    fresh = False
        return accepted, duplicate, fresh

    def applied(self, task_id):
        """Per shard, the [start, end) minibatch index spans of task_id it holds."""
        out = []
        for s in self.shards:
            resp = self._call(s, s.get_applied, pb.GetAppliedRequest(task_ids=[task_id]), "get applied minibatches")
            spans = []
            for a in resp.applied:
                if a.task_id == task_id:
                    spans = list(a.spans)
            out.append(spans)
        return out


def holds(spans, index):
    return any(spans[i] <= index < spans[i + 1] for i in range(0, len(spans) - 1, 2))
