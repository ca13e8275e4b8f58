"""The AllReduce member's task intake (elasticdl._allreduce._next_records)
against a fake master: what it trains, idles on, and reports."""

import os
import sys
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from elasticdl import _allreduce  # noqa: E402
from elasticdl import _ringbook as rb  # noqa: E402
from elasticdl._courier import Courier  # noqa: E402
from elasticdl._proto import master_pb2 as mpb  # noqa: E402
from elasticdl.data import Records  # noqa: E402


class FakeJob:
    """The parts of elasticdl.Job that _next_records uses."""

    worker_id = 3

    def __init__(self, task, n):
        self.task, self.n, self.reports, self.asked = task, n, [], []

    def _get_task(self, req):
        self.asked.append(list(req.held_tasks))
        return mpb.GetTaskResponse(action=mpb.GetTaskResponse.TASK, task=self.task)

    def _send_report(self, req):
        self.reports.append(req)

    def _master(self, fn, req, what):
        return fn(req)

    def _read_task(self, task, read, report):
        return Records([[float(i)] for i in range(self.n)], list(range(self.n)))


class FakeMember:
    steps = 7

    def __init__(self):
        self.book, self.fetch, self.courier = rb.StepBook(), None, Courier()

    def post(self, fn, *args):
        return self.courier.post(fn, *args)


class NextRecords(unittest.TestCase):
    def test_new_task_is_trained_from_what_the_ledger_has(self):
        job, m = FakeJob(mpb.Task(id=5, type=mpb.TRAINING, done=10), 40), FakeMember()
        rt = _allreduce._next_records(job, m, None)
        self.assertEqual((rt.task.id, rt.next, rt.total()), (5, 10, 40))
        self.assertEqual(m.book.tasks, [rt])
        self.assertEqual(job.reports, [])

    def test_task_the_ledger_has_whole_is_reported_not_trained(self):
        # Its last holder was lost after its steps were applied: an empty
        # batch would reach the user's loop (a NaN loss) if it were taken.
        job, m = FakeJob(mpb.Task(id=5, type=mpb.TRAINING, done=40), 40), FakeMember()
        self.assertIsNone(_allreduce._next_records(job, m, None))
        m.courier.flush()
        self.assertTrue(m.book.empty())
        self.assertEqual([(r.task_id, r.records, r.model_version) for r in job.reports], [(5, 0, 7)])

    def test_asks_with_the_tasks_it_holds(self):
        job, m = FakeJob(mpb.Task(id=6, type=mpb.TRAINING), 40), FakeMember()
        held = rb.RingTask(mpb.Task(id=2), list(range(4)), mpb.ReportTaskResultRequest(task_id=2))
        held.next = 4  # all taken, not yet confirmed
        m.book.add(held)
        _allreduce._next_records(job, m, None)
        self.assertEqual(job.asked, [[2]])

    def test_unreadable_task_is_reported_with_its_error(self):
        job, m = FakeJob(mpb.Task(id=5, type=mpb.TRAINING, done=50), 40), FakeMember()
        self.assertIsNone(_allreduce._next_records(job, m, None))
        m.courier.flush()
        self.assertEqual(len(job.reports), 1)
        self.assertIn("50 records done by earlier holders, only 40 readable", job.reports[0].error)

    def test_a_prefetched_task_is_taken_once_the_book_has_no_records(self):
        job, m = FakeJob(mpb.Task(id=6, type=mpb.TRAINING), 40), FakeMember()
        held = rb.RingTask(mpb.Task(id=2), list(range(4)), mpb.ReportTaskResultRequest(task_id=2))
        held.next = 4
        m.book.add(held)
        _allreduce.prefetch(job, m, None)
        self.assertIsNotNone(m.fetch)
        rt = _allreduce._next_records(job, m, None)
        self.assertEqual((rt.task.id, job.asked, m.fetch), (6, [[2]], None))
        self.assertEqual([t.task.id for t in m.book.tasks], [2, 6])
        # The book is busy now (two tasks): no fetch until one is confirmed.
        rt.next = rt.total()
        self.assertIsNone(_allreduce._next_records(job, m, None))
        self.assertEqual(job.asked, [[2]])

    def test_a_failed_fetch_stops_the_worker(self):
        job, m = FakeJob(mpb.Task(id=6, type=mpb.TRAINING), 40), FakeMember()
        job._get_task = lambda req: mpb.GetTaskResponse(action=99)
        with self.assertRaisesRegex(Exception, "unknown action 99"):
            _allreduce._next_records(job, m, None)


class CourierOrder(unittest.TestCase):
    def test_calls_run_in_order_and_a_failure_is_raised_once(self):
        c = Courier()
        self.addCleanup(c.close)
        seen, gate = [], threading.Event()
        c.post(gate.wait, 5)
        for i in range(5):
            c.post(seen.append, i)

        def fail():
            raise RuntimeError("master refused")
        c.post(fail)
        c.post(seen.append, 5)
        self.assertEqual(seen, [])  # nothing passes the first call
        gate.set()
        with self.assertRaisesRegex(RuntimeError, "master refused"):
            c.flush()
        self.assertEqual(seen, [0, 1, 2, 3, 4, 5])  # the failure did not drop what followed
        c.check()  # raised once
        c.flush()


class Register(unittest.TestCase):
    """What register refuses, each with one clear error, before anything
    starts (no helper process, no call to the master)."""

    def job(self, strategy="AllreduceStrategy", optimizer="", ps=()):
        import elasticdl
        j = elasticdl.Job("127.0.0.1:1", 0, list(ps), strategy=strategy, optimizer=optimizer)
        self.addCleanup(j.close)
        return j

    def test_refusals(self):
        import torch
        import elasticdl
        lin = torch.nn.Linear(2, 2)
        emb = torch.nn.ModuleList([elasticdl.Embedding(4, "t")])
        for name, call, want in [
            ("no optimizer", lambda: self.job().register(lin), "no optimizer"),
            ("not a torch optimizer", lambda: self.job().register(lin, optimizer="adam"), "want a torch.optim.Optimizer"),
            ("embedding", lambda: self.job(optimizer="sgd").register(emb), "live on parameter servers"),
            ("not a module", lambda: self.job(optimizer="sgd").register(lambda x: x), "want a torch.nn.Module"),
            ("optimizer with PS", lambda: self.job("ParameterServerStrategy", ps=["127.0.0.1:1"]).register(
                lin, optimizer=torch.optim.SGD(lin.parameters(), lr=0.1)), "optimizer= is for AllreduceStrategy"),
            ("strategy", lambda: self.job("Horovod"), "strategy: want"),
        ]:
            with self.subTest(name), self.assertRaisesRegex(elasticdl.ElasticDLError, want):
                call()


class Optimizers(unittest.TestCase):
    def test_job_optimizer_as_torch(self):
        import torch
        from elasticdl import _optim
        p = [torch.nn.Parameter(torch.zeros(2))]
        for spec, cls, want in [
            ("sgd:learning_rate=0.1", torch.optim.SGD, {"lr": 0.1, "momentum": 0.0, "nesterov": False}),
            ("momentum:lr=0.2,nesterov=true", torch.optim.SGD, {"lr": 0.2, "momentum": 0.9, "nesterov": True}),
            ("adam:learning_rate=0.001,beta_2=0.99,amsgrad=true", torch.optim.Adam,
             {"lr": 0.001, "betas": (0.9, 0.99), "eps": 1e-7, "amsgrad": True}),
            ("adagrad", torch.optim.Adagrad, {"lr": 0.001, "initial_accumulator_value": 0.1}),
        ]:
            opt, decay = _optim.build(spec, p)
            self.assertIsInstance(opt, cls, spec)
            for k, v in want.items():
                self.assertEqual(opt.param_groups[0][k], v, (spec, k))
            self.assertEqual(decay, 0.0)
        self.assertEqual(_optim.build("sgd:decay=0.5", p)[1], 0.5)

    def test_bad_specs(self):
        from elasticdl import ElasticDLError, _optim
        for spec, want in [("rmsprop", "unknown optimizer 'rmsprop'"), ("adam:momentum=0.9", "unknown argument 'momentum=0.9'"),
                           ("sgd:lr", "unknown argument 'lr'")]:
            with self.subTest(spec), self.assertRaisesRegex(ElasticDLError, want):
                _optim.build(spec, [])


if __name__ == "__main__":
    unittest.main()
