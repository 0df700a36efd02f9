"""The Worker listens with a backlog of at least its max_threads: a burst of
max_threads connections at once (what the sidecar opens at its
max_concurrency) finds room in the accept queue, never EAGAIN."""

import errno
import os
import shutil
import socket
import sys
import tempfile
import threading
import unittest

from axsched import Worker

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for stub_sidecar
from stub_sidecar import StubSidecar  # noqa: E402


class BacklogTest(unittest.TestCase):
    def setUp(self):
        self.stub = StubSidecar().start()
        self.addCleanup(self.stub.stop)
        self.dir = tempfile.mkdtemp(prefix="axbacklog-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.sock = os.path.join(self.dir, "w.sock")

    def test_backlog_at_least_max_threads(self):
        for n in (1, 100, 5000):
            w = Worker(socket_path=self.stub.path, listen=self.sock, name="w1", max_threads=n)
            self.assertGreaterEqual(w.backlog, n)

    def test_burst_of_max_threads_connects(self):
        n = 100
        release = threading.Event()
        w = Worker(socket_path=self.stub.path, listen=self.sock, name="w1", max_threads=n)
        self.addCleanup(w.stop)
        self.addCleanup(release.set)

        @w.handler("h")
        def h(d):
            release.wait(10)

        w.start()
        self.assertGreaterEqual(w._server.request_queue_size, n)
        # n non-blocking connects in a tight loop: far faster than the
        # server's accept loop, so they rely on the accept queue. With
        # socketserver's default backlog of 5, most fail with EAGAIN.
        socks, refused = [], 0
        try:
            for _ in range(n):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.setblocking(False)
                socks.append(s)
                try:
                    s.connect(self.sock)
                except BlockingIOError as e:
                    self.assertEqual(e.errno, errno.EAGAIN)
                    refused += 1
        finally:
            for s in socks:
                s.close()
        self.assertEqual(refused, 0, f"{refused} of {n} connects found the accept queue full")


if __name__ == "__main__":
    unittest.main()
