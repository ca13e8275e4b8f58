"""One thread for a worker's calls to the master that need not block it.

A ring's members step in lockstep, so one member's blocking call to the
master stalls all of them. The courier sends task reports, rank 0's
applied steps and the next task's fetch from one thread, in the order they
were posted: a task's report always reaches the master before a later
GetTask that no longer lists the task as held.
"""

import threading
from concurrent.futures import ThreadPoolExecutor


class Courier:
    def __init__(self, name="elasticdl-master"):
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._err = None
        self._lock = threading.Lock()

    def post(self, fn, *args):
        """Runs fn(*args) after everything posted before; returns its
        Future. A failure is also kept for check (the caller of a
        report does not wait on it)."""
        fut = self._pool.submit(fn, *args)
        fut.add_done_callback(self._noted)
        return fut

    def _noted(self, fut):
        if fut.cancelled() or fut.exception() is None:
            return
        with self._lock:
            if self._err is None:
                self._err = fut.exception()

    def flush(self):
        """Waits for everything posted so far; raises the first failure."""
        self._pool.submit(lambda: None).result()
        self.check()

    def check(self):
        """Raises the first failure of a posted call not raised yet."""
        with self._lock:
            err, self._err = self._err, None
        if err is not None:
            raise err

    def close(self):
        """Drops what is queued; a call in flight finishes on its own."""
        self._pool.shutdown(wait=False, cancel_futures=True)
