"""The SDK against a real Go parameter server and a scripted master.

Run by test/local's TestPythonSDK (go test), which builds elasticdl and
sets ELASTICDL_BINARY; by hand:

    ELASTICDL_BINARY=bin/elasticdl PYTHONPATH=python python3 -m unittest discover -s python/tests -v
"""

import concurrent.futures
import math
import os
import socket
import subprocess
import tempfile
import threading
import time
import unittest
from unittest import mock

import grpc
import numpy as np
import torch

import elasticdl
from elasticdl import data
from elasticdl._proto import master_pb2 as mpb
from elasticdl._ps import PSClient, shard_of


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PS:
    """An `elasticdl ps` process: one shard of a fresh model."""

    def __init__(self, optimizer="sgd:learning_rate=0.1", index=0, shards=1, extra=()):
        binary = os.environ.get("ELASTICDL_BINARY")
        if not binary:
            raise unittest.SkipTest("ELASTICDL_BINARY is not set (go test ./test/local -run TestPythonSDK sets it)")
        self.addr = "127.0.0.1:%d" % free_port()
        self.proc = subprocess.Popen([binary, "ps", "--ps_id=%d" % index, "--num_ps_pods=%d" % shards,
                                      "--addr=" + self.addr, "--optimizer=" + optimizer] + list(extra),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", int(self.addr.rsplit(":", 1)[1])), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("elasticdl ps did not start serving on " + self.addr)
                time.sleep(0.05)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


class Master:
    """A scripted master: hands out tasks in order, then DONE; records reports."""

    def __init__(self, tasks, refuse=None):
        self.tasks = list(tasks)
        self.reports, self.metrics = [], []
        self.refuse = refuse  # a report refused with INVALID_ARGUMENT and this message
        self.server = grpc.server(concurrent.futures.ThreadPoolExecutor(4))
        h = lambda fn, req, resp: grpc.unary_unary_rpc_method_handler(
            fn, request_deserializer=req.FromString, response_serializer=resp.SerializeToString)
        self.server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("elasticdl.master.Master", {
            "GetTask": h(self.get_task, mpb.GetTaskRequest, mpb.GetTaskResponse),
            "ReportTaskResult": h(self.report, mpb.ReportTaskResultRequest, mpb.ReportTaskResultResponse),
            "ReportEvaluationMetrics": h(lambda r, c: (self.metrics.append(r), mpb.ReportEvaluationMetricsResponse())[1],
                                         mpb.ReportEvaluationMetricsRequest, mpb.ReportEvaluationMetricsResponse),
            "Heartbeat": h(lambda r, c: mpb.HeartbeatResponse(), mpb.HeartbeatRequest, mpb.HeartbeatResponse),
        })])
        self.addr = "127.0.0.1:%d" % self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def report(self, req, ctx):
        if self.refuse:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, self.refuse)
        self.reports.append(req)
        return mpb.ReportTaskResultResponse()

    def get_task(self, req, ctx):
        if not self.tasks:
            return mpb.GetTaskResponse(action=mpb.GetTaskResponse.DONE)
        return mpb.GetTaskResponse(action=mpb.GetTaskResponse.TASK, task=self.tasks.pop(0))

    def stop(self):
        self.server.stop(0)


def training_task(task_id, name, start, end, epoch=1):
    return mpb.Task(id=task_id, type=mpb.TRAINING, epoch=epoch, shard=mpb.Shard(name=name, start=start, end=end))


def write_csv(rows):
    f = tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False)
    for r in rows:
        f.write(",".join(str(v) for v in r) + "\n")
    f.close()
    return f.name


class Linear(torch.nn.Module):
    def __init__(self, n_in=3, n_out=2, name="fc"):
        super().__init__()
        setattr(self, name, torch.nn.Linear(n_in, n_out))
        self.name = name

    def forward(self, x):
        return getattr(self, self.name)(x)


class SDKTest(unittest.TestCase):
    def setUp(self):
        self.cleanup = []
        # 20 records of 3 features, labels 0/1.
        self.csv = write_csv([[i, i % 3, -i, i % 2] for i in range(20)])
        self.addCleanup(os.unlink, self.csv)

    def tearDown(self):
        for c in reversed(self.cleanup):
            c()

    def job(self, tasks, ps=None, minibatch_size=4, refuse=None, **kw):
        if ps is None:
            ps = PS()
            self.cleanup.append(ps.stop)
        m = Master(tasks, refuse=refuse)
        self.cleanup.append(m.stop)
        j = elasticdl.Job(m.addr, 0, [ps.addr], minibatch_size=minibatch_size, timeout=10, **kw)
        self.cleanup.append(j.close)
        return j, m, ps

    def train(self, j, model):
        for b in j.batches():
            loss = torch.nn.functional.cross_entropy(model(b.x), b.y)
            loss.backward()
            j.step(loss)

    def test_trains_and_reports(self):
        j, m, ps = self.job([training_task(1, self.csv, 0, 12), training_task(2, self.csv, 12, 20)])
        model = Linear()
        j.register(model)
        before = model.fc.weight.detach().clone()
        self.train(j, model)
        self.assertEqual([(r.task_id, r.records, r.steps, r.error) for r in m.reports], [(1, 12, 3, ""), (2, 8, 2, "")])
        # Five pushes, each answered with the parameters after it (async):
        # the model holds version 5, the PS's values, with no pull since.
        self.assertEqual(m.reports[-1].model_version, 5)
        self.assertFalse(torch.equal(before, model.fc.weight.detach()), "the model did not change")
        view = PSClient([ps.addr], timeout=10)
        self.cleanup.append(view.close)
        mine = {n: p.detach().numpy() for n, p in model.named_parameters()}
        view.register({n: np.zeros_like(a) for n, a in mine.items()}, [])  # ignored: the PS holds a model
        view.pull()
        for n, a in mine.items():
            np.testing.assert_array_equal(view.params[n], a, err_msg=n)

    def test_refused_report_is_a_clear_error(self):
        # The master refuses a report that cannot fit the job (a predict
        # job's --num_classes against what the model outputs): the worker
        # stops with the master's reason rather than a raw gRPC error.
        why = "prediction of task 1 has 2 classes per record, the job's --num_classes is 10"
        j, m, _ = self.job([training_task(1, self.csv, 0, 4)], refuse=why)
        model = Linear()
        j.register(model)
        with self.assertRaises(elasticdl.ElasticDLError) as cm:
            self.train(j, model)
        self.assertIn("the master refused the report of task 1: " + why, str(cm.exception))
        self.assertEqual(m.reports, [])

    def test_redone_task_trains_no_minibatch_twice(self):
        # The same task twice (its first worker "died" after pushing):
        # the PS applies each minibatch once.
        ps = PS()
        self.cleanup.append(ps.stop)
        j, m, _ = self.job([training_task(7, self.csv, 0, 12), training_task(7, self.csv, 0, 12)], ps=ps)
        model = Linear()
        j.register(model)
        self.train(j, model)
        self.assertEqual([r.records for r in m.reports], [12, 12])
        j.ps.pull()
        self.assertEqual(j.ps.version(), 3, "3 minibatches, applied once each")

    def test_sync_sgd_redoes_a_stale_minibatch(self):
        # Sync SGD, no staleness allowed: worker A pulls version 0, worker
        # B trains a minibatch (version 1), then A's push, computed on
        # version 0, is rejected; the iterator yields A's minibatch again
        # after a fresh pull, and its second push is applied.
        ps = PS(extra=["--use_async=false", "--grads_to_wait=1", "--sync_version_tolerance=0"])
        self.cleanup.append(ps.stop)
        a, ma, _ = self.job([training_task(1, self.csv, 0, 4)], ps=ps)
        b, mb, _ = self.job([training_task(2, self.csv, 4, 8)], ps=ps)
        model_a, model_b = Linear(), Linear()
        a.register(model_a)
        b.register(model_b)
        it = iter(a.batches())
        first = next(it)
        self.train(b, model_b)
        loss = torch.nn.functional.cross_entropy(model_a(first.x), first.y)
        loss.backward()
        self.assertFalse(a.step(loss), "a push computed on a stale model is rejected")
        again = next(it)
        self.assertEqual((again.task_id, again.index), (first.task_id, first.index))
        self.assertTrue(torch.equal(again.x, first.x))
        loss = torch.nn.functional.cross_entropy(model_a(again.x), again.y)
        loss.backward()
        self.assertTrue(a.step(loss))
        self.assertEqual(list(it), [])
        self.assertEqual((a.rejected, ma.reports[0].records, ma.reports[0].steps), (1, 4, 1))
        a.ps.pull()
        self.assertEqual(a.ps.version(), 2)

    def test_no_master(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("ELASTICDL_")}
        old = os.environ.copy()
        os.environ.clear()
        os.environ.update(env)
        try:
            with self.assertRaisesRegex(elasticdl.ElasticDLError, "ELASTICDL_MASTER_ADDR is not set.*--worker_command"):
                elasticdl.connect()
            os.environ["ELASTICDL_MASTER_ADDR"] = "127.0.0.1:1"
            os.environ["ELASTICDL_WORKER_ID"] = "x"
            with self.assertRaisesRegex(elasticdl.ElasticDLError, "ELASTICDL_WORKER_ID='x'"):
                elasticdl.connect()
        finally:
            os.environ.clear()
            os.environ.update(old)

    def test_master_gone(self):
        ps = PS()
        self.cleanup.append(ps.stop)
        j = elasticdl.Job("127.0.0.1:%d" % free_port(), 0, [ps.addr], timeout=1)
        self.cleanup.append(j.close)
        j.register(Linear())
        with self.assertRaisesRegex(elasticdl.ElasticDLError, "master .*get task: unavailable for 1s"):
            next(iter(j.batches()))

    def test_bad_registration(self):
        j, _, _ = self.job([])
        with self.assertRaisesRegex(elasticdl.ElasticDLError, "register the model first"):
            next(iter(j.batches()))
        with self.assertRaisesRegex(elasticdl.ElasticDLError, "want a torch.nn.Module, got dict"):
            j.register({})
        with self.assertRaisesRegex(elasticdl.ElasticDLError, "'fc.weight' is torch.float64"):
            j.register(Linear().double())
        with self.assertRaisesRegex(elasticdl.ElasticDLError, "step: no batch to step"):
            j.step()
        j.register(Linear())
        with self.assertRaisesRegex(elasticdl.ElasticDLError, "a model is registered already"):
            j.register(Linear())

    def test_other_model_on_the_ps(self):
        ps = PS()
        self.cleanup.append(ps.stop)
        first, _, _ = self.job([], ps=ps)
        first.register(Linear(3, 2))
        shapes, _, _ = self.job([], ps=ps)
        shapes.register(Linear(3, 5))
        with self.assertRaisesRegex(elasticdl.ElasticDLError, r"'fc.bias' has shape \[2\] there, \[5\] in this model"):
            shapes.ps.pull()
        names, _, _ = self.job([], ps=ps)
        names.register(Linear(3, 2, name="head"))
        with self.assertRaisesRegex(elasticdl.ElasticDLError, r"unknown to the model: \['fc.bias', 'fc.weight'\]"):
            names.ps.pull()

    def test_step_forgotten(self):
        j, _, _ = self.job([training_task(1, self.csv, 0, 12)])
        j.register(Linear())
        with self.assertRaisesRegex(elasticdl.ElasticDLError, r"call job.step\(loss\) once for every batch"):
            for b in j.batches():
                pass

    def test_nan_loss_fails_the_task(self):
        j, m, _ = self.job([training_task(1, self.csv, 0, 12), training_task(2, self.csv, 12, 20)])
        model = Linear()
        j.register(model)
        for b in j.batches():
            loss = torch.nn.functional.cross_entropy(model(b.x), b.y)
            loss.backward()
            j.step(loss * float("nan") if b.task_id == 1 else loss)
        self.assertRegex(m.reports[0].error, "loss is nan on minibatch 0 of task 1")
        self.assertEqual((m.reports[1].error, m.reports[1].records), ("", 8))

    def test_bad_data_fails_the_task(self):
        bad = write_csv([[1, 2, 3, 0], [1, "x", 3, 1], [1, 2, 3, 1], [1, 2, 3, 0]])
        self.addCleanup(os.unlink, bad)
        j, m, _ = self.job([training_task(1, bad, 0, 4), training_task(2, "/no/such/file.csv", 0, 4),
                            training_task(3, self.csv, 0, 4)])
        model = Linear()
        j.register(model)

        def reader(name, start, end):
            if name == self.csv:
                return "not records"
            return data.open_source(name).read(start, end)
        # Bad data fails its task (the master retries it elsewhere, or
        # fails the job); a reader that breaks the SDK's contract is a bug
        # of the worker: it stops.
        with self.assertRaisesRegex(elasticdl.ElasticDLError, "reader returned str, want elasticdl.data.Records"):
            self.train_with(j, model, reader)
        corrupt, missing = m.reports
        self.assertEqual((corrupt.error, corrupt.records, corrupt.corrupt_records), ("", 3, 1))
        self.assertRegex(corrupt.first_corrupt_error, "record 1: could not convert string to float: 'x'")
        self.assertRegex(missing.error, "/no/such/file.csv: No such file or directory")

    def train_with(self, j, model, reader):
        for b in j.batches(reader=reader):
            loss = torch.nn.functional.cross_entropy(model(b.x), b.y)
            loss.backward()
            j.step(loss)

    def test_embedding(self):
        class Emb(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = elasticdl.Embedding(4, "ids")
                self.fc = torch.nn.Linear(4, 2)

            def forward(self, x, ids):
                return self.fc(self.emb(ids).sum(1))

        with self.assertRaisesRegex(elasticdl.ElasticDLError, "Embedding 'ids': register the model"):
            Emb()(None, torch.zeros(2, 3, dtype=torch.int64))
        schema = write_csv([["a%d" % (i % 5), "b%d" % (i % 3), i % 2] for i in range(16)])
        self.addCleanup(os.unlink, schema)
        uri = "csv://" + schema + "?schema=c{1..2}:hash(100),y:label"
        ps = [PS(index=i, shards=2) for i in range(2)]
        for p in ps:
            self.cleanup.append(p.stop)
        m = Master([training_task(1, uri, 0, 16),
                    mpb.Task(id=2, type=mpb.EVALUATION, shard=mpb.Shard(name=uri, start=0, end=16))])
        self.cleanup.append(m.stop)
        j = elasticdl.Job(m.addr, 0, [p.addr for p in ps], minibatch_size=4, timeout=10)
        self.cleanup.append(j.close)
        model = Emb()
        j.register(model)
        with self.assertRaisesRegex(elasticdl.ElasticDLError, "want an int64 tensor of ids, got torch.float32"):
            model.emb(torch.zeros(2))
        rows_before = j.ps.pull_embeddings("ids", np.arange(200, dtype=np.int64)).copy()
        for b in j.batches():
            self.assertEqual(tuple(b.ids.shape), (4, 2))
            loss = torch.nn.functional.cross_entropy(model(b.x, b.ids), b.y)
            loss.backward()
            j.step(loss)
        rows_after = j.ps.pull_embeddings("ids", np.arange(200, dtype=np.int64))
        changed = set(np.nonzero((rows_before != rows_after).any(1))[0].tolist())
        used = set(data.open_source(uri).read(0, 16).ids.reshape(-1).tolist())
        self.assertEqual(changed, used, "exactly the rows of the ids trained were updated")
        self.assertEqual(len(m.metrics), 1)
        self.assertEqual(m.metrics[0].records, 16)
        self.assertEqual(sum(m.metrics[0].score_histogram.positive), 8, "a two-class model's AUC histogram")

    def test_device(self):
        from elasticdl.job import pick_device
        cuda = torch.cuda.is_available()
        for env, want in [
            ("", "cuda:0" if cuda else "cpu"),
            ("cpu", "cpu"),
            ("gpu:0", "ELASTICDL_DEVICE='gpu:0': "),
            ("cuda:zero", "ELASTICDL_DEVICE='cuda:zero': "),
            ("cuda", "cuda" if cuda else "ELASTICDL_DEVICE='cuda': torch sees no CUDA device"),
        ]:
            with self.subTest(env=env), mock.patch.dict(os.environ, {"ELASTICDL_DEVICE": env}):
                if want.startswith("ELASTICDL_DEVICE"):
                    with self.assertRaises(elasticdl.ElasticDLError) as cm:
                        pick_device()
                    self.assertTrue(str(cm.exception).startswith(want), cm.exception)
                else:
                    self.assertEqual(str(pick_device()), want)

    def test_model_params(self):
        self.assertEqual(elasticdl.job.parse_model_params(" a=1; b = x ;"), {"a": "1", "b": "x"})
        with self.assertRaisesRegex(elasticdl.ElasticDLError, "'oops' is not key=value"):
            elasticdl.job.parse_model_params("a=1; oops")

    def test_readers(self):
        with self.assertRaisesRegex(data.DataError, "unsupported data format"):
            data.open_source("/tmp/x.orc")
        with self.assertRaisesRegex(data.DataError, "elasticdl data export"):
            data.open_source("synthetic-ctr://?records=10")
        with self.assertRaisesRegex(data.DataError, r"records \[0, 21\) are out of range \(it has 20\)"):
            data.open_source(self.csv).read(0, 21)
        with self.assertRaisesRegex(data.DataError, "exactly one label column"):
            data.open_source("csv://" + self.csv + "?schema=a:num,b:num,c:num,d:num")

    @unittest.skipUnless(os.environ.get("ELASTICDL_BINARY"), "ELASTICDL_BINARY (a built elasticdl binary) is not set")
    def test_go_source_errors(self):
        # The Go reader's own error, one line, and no helper left running.
        with self.assertRaisesRegex(data.DataError, r"^datasource sqlite:///nonexistent/x\.db\?label=y&snapshot=s: snapshot=s: not a snapshot's name"):
            data.open_source("sqlite:///nonexistent/x.db?label=y&snapshot=s")
        with self.assertRaisesRegex(data.DataError, r"^stat /nonexistent/x\.parquet: no such file"):
            data.open_source("/nonexistent/x.parquet")
        with mock.patch.dict(os.environ, {"ELASTICDL_BINARY": "", "PATH": ""}):
            with self.assertRaisesRegex(data.DataError, "ELASTICDL_BINARY is unset"):
                data.open_source("postgres://u@h:1/db?label=y&snapshot=s")
            with self.assertRaisesRegex(data.DataError, "ELASTICDL_BINARY is unset"):
                data.open_source("parquet:///data/train?schema=y:label,x:num")

    def test_shard_of_matches_go(self):
        # internal/ps/shard's FNV-1a 32 test vectors.
        self.assertEqual([shard_of(n, 1 << 32) for n in ("", "a", "foobar")], [0x811c9dc5, 0xe40c292c, 0xbf9cf968])


if __name__ == "__main__":
    unittest.main()
