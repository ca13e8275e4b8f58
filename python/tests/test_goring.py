"""GoRing against real `elasticdl ringd` helpers: two ring members in one process.

Run by test/local's TestPythonSDK (go test), which builds elasticdl and
sets ELASTICDL_BINARY; by hand:

    ELASTICDL_BINARY=bin/elasticdl PYTHONPATH=python python3 -m unittest python.tests.test_goring -v
"""

import concurrent.futures
import os
import threading
import time
import unittest

import numpy as np

from elasticdl._goring import GoRing, RingBroken, RingdError, RingdExited

BINARY = os.environ.get("ELASTICDL_BINARY")

# Far above anything these tests wait for: a superseded member must be
# freed long before it.
RING_TIMEOUT_S = 60

# A hang guard on every wait, not an expected duration.
GUARD_S = 30


@unittest.skipUnless(BINARY, "ELASTICDL_BINARY (a built elasticdl binary) is not set")
class GoRingTest(unittest.TestCase):
    def setUp(self):
        # One thread per member: form and the collectives block. Shut down
        # last (cleanups run in reverse), once closing the helpers has
        # freed any thread a failed test left blocked.
        self.pool = concurrent.futures.ThreadPoolExecutor(2)
        self.addCleanup(self.pool.shutdown)
        self.rings = []
        for _ in range(2):
            ring = GoRing(BINARY)
            self.addCleanup(ring.close)
            self.rings.append(ring)
        self.peers = [r.addr for r in self.rings]

    def on_both(self, fn):
        """Runs fn(rank, ring) for both members at once; returns their results."""
        futures = [self.pool.submit(fn, r, ring) for r, ring in enumerate(self.rings)]
        return [f.result(timeout=GUARD_S) for f in futures]

    def form(self, version, worker_ids=None):
        self.on_both(lambda r, ring: ring.form(version, r, self.peers, RING_TIMEOUT_S, worker_ids=worker_ids))

    def test_collectives(self):
        self.form(1)
        n = 3000
        bufs = [ring.buffer(n) for ring in self.rings]
        for r, buf in enumerate(bufs):
            buf[:] = np.arange(n, dtype=np.float32) + 1000 * r
        self.on_both(lambda r, ring: ring.allreduce(1, 0, n))
        want = 2 * np.arange(n, dtype=np.float32) + 1000
        for buf in bufs:
            np.testing.assert_array_equal(buf, want)

        for r, buf in enumerate(bufs):
            buf[:] = -r - np.arange(n, dtype=np.float32)
        self.on_both(lambda r, ring: ring.broadcast(1, 1, 0, n))
        for buf in bufs:
            np.testing.assert_array_equal(buf, -1 - np.arange(n, dtype=np.float32))

        # Growing maps the memory anew; the data must follow.
        big = 600_000  # 2.4 MB, past the first 1 MiB mapping
        bufs = [ring.buffer(big) for ring in self.rings]
        for r, buf in enumerate(bufs):
            buf[:] = r + 1
        self.on_both(lambda r, ring: ring.allreduce(1, 0, big))
        for buf in bufs:
            self.assertTrue(np.all(buf == 3), "allreduce after growing the buffer")

        for ring in self.rings:
            ops, sent, busy = ring.stats()
            self.assertEqual(ops, 3)
            self.assertGreater(sent, 4 * big // 2)
            self.assertGreater(busy, 0)

    def test_supersede_frees_blocked_member(self):
        self.form(1)
        ring = self.rings[0]
        ring.buffer(1000)[:] = 1
        entering = threading.Event()

        def blocked():
            entering.set()
            start = time.monotonic()
            with self.assertRaises(RingBroken) as cm:
                ring.allreduce(1, 0, 1000)  # rank 1 never enters it
            return time.monotonic() - start, str(cm.exception)

        fut = self.pool.submit(blocked)
        self.assertTrue(entering.wait(GUARD_S))
        # The helper cannot be observed from here; give the request time
        # to arrive, then check that it is indeed blocked.
        time.sleep(0.3)
        self.assertFalse(fut.done(), "allreduce returned without its peer")
        # The poller's thread, in a worker.
        poller = threading.Thread(target=ring.supersede, args=(2, True))
        poller.start()
        took, msg = fut.result(timeout=GUARD_S)
        poller.join(GUARD_S)
        self.assertIn("superseded by version 2", msg)
        self.assertLess(took, RING_TIMEOUT_S / 4)

        self.form(2, worker_ids=[0, 1])  # FORM with the members' IDs (checked with TLS only)
        bufs = [r.buffer(1000) for r in self.rings]
        for r, buf in enumerate(bufs):
            buf[:] = r + 1
        self.on_both(lambda r, ring: ring.allreduce(2, 0, 1000))
        for buf in bufs:
            self.assertTrue(np.all(buf == 3))

    def test_errors(self):
        ring = self.rings[0]
        ring.buffer(10)
        with self.assertRaises(RingBroken):
            ring.allreduce(1, 0, 10)  # no ring formed
        with self.assertRaisesRegex(RingdError, "outside the mapping"):
            ring.allreduce(1, 1 << 40, 10)
        with self.assertRaisesRegex(RingdError, "no peers"):
            ring.form(1, 0, [], 1)
        ring.leave()  # still serving

    def test_close_and_exit(self):
        ring = self.rings[0]
        self.assertEqual(ring.close(), 0)
        other = self.rings[1]
        other._proc.kill()
        with self.assertRaisesRegex(RingdExited, "exited with code -9"):
            other.leave()


if __name__ == "__main__":
    unittest.main()
