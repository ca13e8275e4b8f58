"""The pure parts of the SDK's AllReduce member (elasticdl._ringbook):
the Go worker's encodings and book, case for case (internal/worker's
stepbook_test.go and ringstate_test.go)."""

import os
import random
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from elasticdl import _ringbook as rb  # noqa: E402
from elasticdl._proto import master_pb2 as mpb  # noqa: E402


# internal/worker/balance_test.go's splitCases: (total, rates, floors, parts).
SPLIT_CASES = [
    (96, [100, 100, 35], [3, 3, 3], [41, 41, 14]),
    (93, [100, 0, 35], [3, 3, 3], [69, 0, 24]),
    (269, [28, 931], [13, 13], [13, 256]),
    (100, [1, 1, 1], [3, 3, 3], [34, 33, 33]),
    (10, [1000, 1, 1], [3, 3, 3], [4, 3, 3]),
    (7, [5, 5, 5, 5], [2, 2, 2, 2], [2, 2, 2, 2]),
    (96, [0, 0, 50], [3, 3, 3], [0, 0, 96]),
    (300, [333.5, 333.25, 100.125], [10, 10, 10], [131, 130, 39]),
]


def task(tid, n, done=0):
    t = mpb.Task(id=tid, done=done)
    return rb.RingTask(t, list(range(n)), mpb.ReportTaskResultRequest(task_id=tid))


class Encodings(unittest.TestCase):
    def test_tags_round_trip_beyond_24_bits(self):
        buf = np.zeros(3 * rb.TAG_LEN, np.float32)
        parts = [(0, 5, 0, 64), (7, (1 << 30) + 12345, 100, 164)]
        rb.put_tag(buf, 0, parts[0])
        rb.put_tag(buf, 2 * rb.TAG_LEN, parts[1])  # member 1 idle: its slot stays 0
        self.assertEqual(rb.decode_tags(buf), parts)

    def test_log_round_trip(self):
        log = [(1, 3, [(0, 1, 0, 32), (2, 9, 32, 64)]), ((1 << 25) + 7, 1 << 26, []), (9, 4, [(1, 2, 0, 1)])]
        arr = rb.encode_log(log)
        self.assertEqual(arr.dtype, np.float32)
        self.assertEqual(rb.decode_log(arr), log)
        self.assertEqual(rb.decode_log(rb.encode_log([])), [])

    def test_prune_keeps_recent_steps(self):
        log = [(s, 1, []) for s in range(1, 8)]
        self.assertEqual([s for s, _, _ in rb.prune_log(log, 5)], [5, 6, 7])
        self.assertEqual([s for s, _, _ in rb.prune_log(log, 2)], [3, 4, 5, 6, 7])
        self.assertEqual(rb.prune_log(log[:2], 9), log[:2])

    def test_step_share(self):
        for global_batch, mb, size, want in [(0, 64, 3, [64, 64, 64]), (192, 64, 3, [64, 64, 64]), (192, 64, 2, [96, 96]),
                                             (100, 64, 3, [34, 33, 33]), (2, 64, 3, [1, 1, 1])]:
            self.assertEqual([rb.step_share(global_batch, mb, r, size) for r in range(size)], want, (global_batch, size))

    def test_balanced_share_is_go_balanced_share(self):
        # internal/worker/balance_test.go's TestBalancedShare, case for case.
        for name, g, mb, rank, size, rates, want in [
                ("not balancing", 0, 64, 2, 3, None, 64),
                ("no rates yet", 0, 64, 0, 3, [], 64),
                ("idle member", 0, 64, 1, 3, [100, 0, 100], 64),
                ("equal members", 0, 64, 2, 3, [100, 100, 100], 64),
                ("the slow member takes less", 0, 64, 2, 3, [100, 100, 35], 22),
                ("the fast ones keep a minibatch", 0, 64, 0, 3, [100, 100, 35], 64),
                ("the fastest sets the scale", 0, 64, 1, 3, [50, 100, 100], 64),
                ("never below the floor", 0, 64, 2, 3, [1000, 1000, 1], 6),
                ("never below two records (BatchNorm)", 0, 4, 2, 3, [1000, 1000, 1], 2),
                ("one record when the equal share is one", 0, 1, 2, 3, [1000, 1000, 1], 1),
                ("global, equal rates", 96, 64, 0, 3, [100, 100, 100], 32),
                ("global, the slow member's part", 96, 64, 2, 3, [100, 100, 35], 14),
                ("global, a fast member's part", 96, 64, 0, 3, [100, 100, 35], 41),
                ("global, an idle member's part goes to the busy ones", 96, 64, 0, 3, [100, 0, 35], 69),
                ("global, the idle member comes back with its floor", 96, 64, 1, 3, [100, 0, 35], 3),
                ("not balancing, global, every member busy", 96, 64, 1, 3, [100, 100, 100], 32),
                ("not balancing, global, an idle member's part goes to the busy ones", 96, 64, 2, 3, [100, 0, 100], 46),
                ("not balancing, global, the lower busy rank takes the remainder", 96, 64, 0, 3, [100, 0, 100], 47),
                ("not balancing, global, alone with records", 96, 64, 1, 3, [0, 100, 0], 90),
                ("not balancing, global, the idle member comes back with its floor", 96, 64, 1, 3, [100, 0, 100], 3),
                ("not balancing, global, every member idle", 96, 64, 1, 3, [0, 0, 0], 32),
                ("not balancing, global, the remainder to the lowest busy rank", 101, 64, 1, 3, [0, 100, 100], 49),
                ("rates of another ring's size", 0, 64, 2, 3, [100, 35], 64)]:
            balancing = rates is not None and not name.startswith("not balancing")
            got = rb.balanced_share(g, mb, rank, size, [100, 100, 35] if rates is None else rates, balancing)
            self.assertEqual(got, want, name)

    def test_split_by_rate_is_go_split_by_rate(self):
        # internal/worker/balance_test.go's TestSplitByRate, case for case.
        for total, rates, floors, want in SPLIT_CASES:
            self.assertEqual(rb.split_by_rate(total, rates, floors), want, (total, rates, floors))

    def test_balanced_shares_keep_the_global_batch(self):
        # balance_test.go's TestBalancedSharesKeepTheGlobalBatch.
        rng = random.Random(34)
        for _ in range(5000):
            size, global_batch = rng.randint(1, 6), rng.randint(1, 300)
            rates = [float(rng.randint(1, 1000)) if rng.randint(0, 2) else 0.0 for _ in range(size)]
            for balancing in (False, True):
                total = sum(rb.balanced_share(global_batch, 64, r, size, rates, balancing) for r in range(size))
                want = max(global_batch, size)
                if global_batch >= size:
                    self.assertEqual(total, want, (global_batch, rates, balancing))
                else:
                    self.assertLessEqual(total, want, (global_batch, rates, balancing))

    def test_next_balance_is_go_balance_next(self):
        # internal/worker/balance_test.go's TestBalanceNext, case for case.
        slow, noisy, even = [100, 100, 35], [100, 100, 75], [100, 100, 90]
        off = (False, 0)
        for name, start, rates, want in [
                ("no rates", off, [], off), ("even members", off, even, off),
                ("noise above 0.7 is not slow", off, noisy, off), ("a slow step counts", off, slow, (False, 1)),
                ("two in a row", (False, 1), slow, (False, 2)), ("the third turns shares on", (False, 2), slow, (True, 0)),
                ("a step back in the band resets the count", (False, 2), noisy, off),
                ("on, still slow", (True, 0), slow, (True, 0)),
                ("on, below 0.85 stays on", (True, 0), [100, 100, 80], (True, 0)),
                ("on, back within 0.85 counts", (True, 0), [100, 100, 90], (True, 1)),
                ("on, back within 0.85 twice", (True, 1), [100, 100, 90], (True, 2)),
                ("on, the third step within 0.85 turns shares off", (True, 2), [100, 100, 90], off),
                ("on, a slow step again resets the count", (True, 2), slow, (True, 0)),
                ("one busy member: nothing to balance", (True, 0), [100, 0, 0], off),
                ("none busy", (False, 2), [0, 0, 0], off)]:
            self.assertEqual(rb.next_balance(start, rates), want, name)

    def test_observe_rate(self):
        self.assertEqual(rb.observe_rate(0.0, 0, 1.0), 0.0)
        self.assertEqual(rb.observe_rate(0.0, 100, 0.0), 0.0)
        self.assertEqual(rb.observe_rate(0.0, 100, 1.0), 100.0)
        self.assertAlmostEqual(rb.observe_rate(100.0, 200, 1.0), 1 / (0.7 / 100 + 0.3 / 200))
        rate = 0.0  # bursts, as TestRateMeter: near 200, not 556
        for i in range(200):
            rate = rb.observe_rate(rate, 10, 0.09 if i % 2 else 0.01)
        self.assertTrue(150 < rate < 270, rate)

    def test_checksum_is_go_wire_checksum(self):
        # internal/wire.Checksum of EncodeTensor("conv1.weight", [2], {1, 2})
        # and EncodeTensor("fc.bias", [1, 1], {-3.5}), printed by Go.
        ts = [("conv1.weight", (2,), np.array([1, 2], np.float32).tobytes()),
              ("fc.bias", (1, 1), np.array([-3.5], np.float32).tobytes())]
        self.assertEqual(rb.checksum(ts), 2175859311111393935)


class Book(unittest.TestCase):
    def test_take_confirm_reports_whole_tasks(self):
        b, a = rb.StepBook(), task(1, 10)
        b.add(a)
        self.assertIs(b.pending(), a)
        self.assertEqual(b.take(a, 4, 1), (0, 4))
        b.set_loss(2.0)
        self.assertEqual(b.take(a, 4, 2), (4, 8))
        self.assertEqual(b.take(a, 4, 3), (8, 10))
        self.assertIsNone(b.pending())
        self.assertEqual(b.confirm(2), [])
        self.assertEqual((a.confirmed, a.report.records, a.report.steps, a.report.loss_sum), (8, 8, 2, 2.0))
        self.assertEqual(b.confirm(3), [a])
        self.assertTrue(b.empty())

    def test_no_tail_of_one_record(self):
        # Shares by rate cut tasks anywhere: a last record alone would be a
        # step BatchNorm cannot train (Go: TestStepBookNoTailOfOne).
        b, a = rb.StepBook(), task(1, 10)
        b.add(a)
        self.assertEqual(b.take(a, 4, 1), (0, 4))
        self.assertEqual(b.take(a, 5, 2), (4, 10))
        self.assertIsNone(b.pending())
        c = task(2, 10)
        b.add(c)
        self.assertEqual(b.take(c, 8, 3), (0, 8))  # two left: a step of their own

    def test_resumes_after_done(self):
        b, a = rb.StepBook(), task(1, 10, done=6)
        b.add(a)
        self.assertEqual(b.take(a, 8, 1), (6, 10))
        self.assertEqual(b.confirm(1), [a])
        self.assertEqual(a.report.records, 4)

    def test_settle_keeps_held_and_redoes_the_rest(self):
        b, a, c = rb.StepBook(), task(1, 12), task(2, 12)
        b.add(a)
        b.add(c)
        self.assertTrue(b.busy())
        b.take(a, 4, 1)   # held by the agreed state
        b.take(a, 4, 2)   # lost with the ring
        b.take(c, 4, 3)   # lost
        b.settle(lambda rt, s, e: rt is a and e == 4)
        self.assertEqual((a.next, c.next), (4, 0))
        self.assertEqual(b.confirm(0), [])  # the held records count at the next confirm
        self.assertEqual((a.confirmed, a.report.records), (4, 4))

    def test_untake(self):
        b, a = rb.StepBook(), task(1, 10)
        b.add(a)
        b.take(a, 4, 1)
        b.untake()
        self.assertEqual((a.next, b.records), (0, []))

    def test_reset(self):
        b, a = rb.StepBook(), task(1, 10)
        b.add(a)
        b.take(a, 4, 1)
        b.reset()
        self.assertTrue(b.empty())
        self.assertIsNone(b.pending())


if __name__ == "__main__":
    unittest.main()
