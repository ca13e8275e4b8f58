"""The Go collective ring, driven from Python through an ``elasticdl ringd`` helper.

The helper (internal/ringd) runs the Go ring in its own process, because a
collective blocked on a frozen peer must be cancellable and torch's gloo
cannot abort one: ``supersede`` (from the poller's thread) makes a blocked
``allreduce`` raise ``RingBroken`` at once. Tensors live in shared memory (a
memfd both processes map): ``buffer(n)`` is a float32 view of it, and
collectives name element ranges of it. Requests go over two Unix socket
pairs; internal/ringd/doc.go describes the frames.

    ring = GoRing(os.environ["ELASTICDL_BINARY"])
    peers = ...                       # every member's ring.addr, from the master
    ring.form(version, rank, peers, timeout_s=10)
    flat = ring.buffer(n)             # torch.from_numpy(flat) shares it
    flat[:] = grads
    ring.allreduce(version, 0, n)     # flat is now the sum over members
"""

import mmap
import os
import socket
import struct
import subprocess
import threading

import numpy as np

_HELLO, _MAP, _FORM, _ALLREDUCE, _BROADCAST, _LEAVE, _STATS, _SUPERSEDE = range(1, 9)
_OK, _ERROR, _BROKEN = 0, 1, 2

_MIN_BYTES = 1 << 20  # the first mapping; it then at least doubles


class RingBroken(Exception):
    """The ring failed, or was closed or superseded: form the next version."""


class RingdError(RuntimeError):
    """The helper refused a request (a bad request or a local failure)."""


class RingdExited(RuntimeError):
    """The helper process is gone; the message names its exit code."""


class GoRing:
    """One worker's ``elasticdl ringd`` helper.

    The data methods (form, allreduce, broadcast, buffer, leave, stats) are
    called from one thread and block; ``supersede`` may be called from
    another thread at any time.
    """

    def __init__(self, binary, listen="127.0.0.1:0", env=None):
        self._memfd = os.memfd_create("elasticdl-ring")
        self._mm = None
        self._size = 0
        self._stale = []  # outgrown mappings still exported by views
        self._ctl_lock = threading.Lock()
        self._proc = None
        self._data, data_child = socket.socketpair()
        self._ctl, ctl_child = socket.socketpair()
        try:
            fds = (data_child.fileno(), ctl_child.fileno(), self._memfd)
            self._proc = subprocess.Popen(
                [binary, "ringd", "--listen", listen, "--data_fd", str(fds[0]),
                 "--ctl_fd", str(fds[1]), "--mem_fd", str(fds[2])],
                pass_fds=fds, env=env, stdin=subprocess.DEVNULL)
        except BaseException:
            self._release()
            raise
        finally:
            data_child.close()
            ctl_child.close()
        try:
            self.addr = self._call(self._data, struct.pack("<B", _HELLO)).decode()
        except BaseException:
            self.close()
            raise

    def buffer(self, n):
        """A float32 numpy view of the first ``n`` elements of the shared memory.

        When ``n`` exceeds the mapping, the memory grows (geometrically) and
        is mapped anew: views returned before a growth must not be used after
        it (they see memory the collectives no longer use).
        """
        need = 4 * n
        if need > self._size:
            size = max(need, 2 * self._size, _MIN_BYTES)
            size = -(-size // mmap.PAGESIZE) * mmap.PAGESIZE
            os.ftruncate(self._memfd, size)
            mm = mmap.mmap(self._memfd, size)
            try:
                self._call(self._data, struct.pack("<BQ", _MAP, size))
            except BaseException:
                mm.close()
                raise
            self._retire(self._mm)
            self._mm, self._size = mm, size
        if self._mm is None:
            return np.zeros(0, dtype=np.float32)
        return np.frombuffer(self._mm, dtype=np.float32, count=n)

    def form(self, version, rank, peers, timeout_s, worker_ids=None):
        """Forms ring ``version`` as ``rank`` of ``peers`` (every member's addr,
        in ring order); closes the live ring first. ``worker_ids``, the peers'
        worker IDs, let a TLS ring check who each neighbour is. Raises
        RingBroken."""
        body = struct.pack("<BqIII", _FORM, version, rank, max(1, round(timeout_s * 1000)), len(peers))
        for p in peers:
            b = p.encode()
            body += struct.pack("<H", len(b)) + b
        if worker_ids is not None:
            body += struct.pack("<%dI" % len(worker_ids), *worker_ids)
        self._call(self._data, body)

    def allreduce(self, version, offset, count):
        """Sums elements [offset, offset+count) of the buffer over the ring's
        members, in place. Raises RingBroken."""
        self._call(self._data, struct.pack("<BqQQ", _ALLREDUCE, version, offset, count))

    def broadcast(self, version, root, offset, count):
        """Copies rank ``root``'s elements [offset, offset+count) to every
        member. Raises RingBroken."""
        self._call(self._data, struct.pack("<BqIQQ", _BROADCAST, version, root, offset, count))

    def leave(self):
        """Closes the live ring, if any (leaving at a step boundary)."""
        self._call(self._data, struct.pack("<B", _LEAVE))

    def stats(self):
        """(collectives, bytes sent, seconds busy) over every ring so far."""
        ops, sent, busy_ns = struct.unpack("<qqq", self._call(self._data, struct.pack("<B", _STATS)))
        return ops, sent, busy_ns / 1e9

    def supersede(self, version, close_live):
        """Cancels forming any version older than ``version`` and, with
        ``close_live``, closes an older live ring, so a collective blocked on
        it raises RingBroken at once. Thread-safe."""
        with self._ctl_lock:
            self._call(self._ctl, struct.pack("<BqB", _SUPERSEDE, version, 1 if close_live else 0))

    def close(self):
        """Stops the helper (killed if it has not exited within 5 s) and
        frees the shared memory; returns its exit code."""
        if self._proc is None:
            return None
        if self._memfd < 0:  # closed already
            return self._proc.returncode
        for s in (self._data, self._ctl):
            try:
                # shutdown, not just close: a forked child may hold a copy.
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._release()
        return self._proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _release(self):
        self._data.close()
        self._ctl.close()
        for mm in self._stale + [self._mm]:
            self._retire(mm)
        self._mm, self._size = None, 0
        if self._memfd >= 0:
            os.close(self._memfd)
            self._memfd = -1

    def _retire(self, mm):
        if mm is None:
            return
        try:
            mm.close()
        except BufferError:  # views of it still exist: they keep it
            if mm not in self._stale:
                self._stale.append(mm)

    def _call(self, sock, body):
        try:
            sock.sendall(struct.pack("<I", len(body)) + body)
            (n,) = struct.unpack("<I", self._recv(sock, 4))
            resp = self._recv(sock, n)
        except OSError as e:
            raise self._exited(e) from e
        if not resp:
            raise RingdError("elasticdl ringd: empty response")
        status, payload = resp[0], resp[1:]
        if status == _OK:
            return payload
        msg = payload.decode(errors="replace")
        if status == _BROKEN:
            raise RingBroken(msg)
        raise RingdError(msg)

    def _recv(self, sock, n):
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = sock.recv_into(view[got:])
            if k == 0:
                raise self._exited(None)
            got += k
        return bytes(buf)

    def _exited(self, cause):
        try:
            code = self._proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return RingdExited(f"elasticdl ringd (pid {self._proc.pid}) closed its socket but is still running ({cause})")
        return RingdExited(f"elasticdl ringd exited with code {code}")
