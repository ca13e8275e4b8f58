"""The AllReduce member's task intake (elasticdl._allreduce._next_records)
against a fake master: what it trains, idles on, and reports."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from elasticdl import _allreduce  # noqa: E402
from elasticdl import _ringbook as rb  # noqa: E402
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
        self.book = rb.StepBook()


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
        self.assertEqual(len(job.reports), 1)
        self.assertIn("50 records done by earlier holders, only 40 readable", job.reports[0].error)


if __name__ == "__main__":
    unittest.main()


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
