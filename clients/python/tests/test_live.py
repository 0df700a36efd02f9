"""End-to-end tests against a real sidecar: ``ax dev`` started from the
binary named by $AX_BIN (skipped when unset). From the repository root:

    go build -o bin/ax ./cmd/ax
    cd clients/python && AX_BIN=../../bin/ax python3 -m unittest discover -s tests -v
"""

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import axsched
from axsched import Client, Permanent, State, Worker

AX_BIN = os.environ.get("AX_BIN")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@unittest.skipUnless(AX_BIN, "set AX_BIN to an ax binary to run the tests against a live sidecar")
class LiveSidecarTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="axlive-")
        cls.sock = os.path.join(cls.dir, "ax.sock")
        cls.worker_sock = os.path.join(cls.dir, "worker.sock")
        cls.log = open(os.path.join(cls.dir, "ax.log"), "wb")
        cls.proc = subprocess.Popen(
            [
                os.path.abspath(AX_BIN), "dev",
                "--socket", cls.sock,
                "--data-dir", os.path.join(cls.dir, "data"),
                "--raft-addr", f"127.0.0.1:{free_port()}",
                "--peer-addr", f"127.0.0.1:{free_port()}",
                "--executor", f"*=unix://{cls.worker_sock}",
            ],
            stdout=cls.log,
            stderr=subprocess.STDOUT,
            cwd=cls.dir,
        )
        cls.client = Client(cls.sock)
        try:
            cls.client.wait_ready(timeout=30)
        except Exception:
            cls.tearDownClass()
            raise
        cls.deliveries = {}
        cls.delivered = threading.Condition()
        cls.worker = Worker(socket_path=cls.sock, listen=cls.worker_sock, name="live")

        def record(d):
            with cls.delivered:
                cls.deliveries.setdefault(d.task_id, []).append(d)
                cls.delivered.notify_all()

        @cls.worker.handler("order.timeout")
        def order_timeout(d):
            record(d)

        @cls.worker.handler("always.permanent")
        def always_permanent(d):
            record(d)
            raise Permanent("order does not exist")

        cls.worker.start()

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "worker", None) is not None:
            cls.worker.stop(timeout=5)
        cls.client.close()
        cls.proc.terminate()
        try:
            cls.proc.wait(10)
        except subprocess.TimeoutExpired:
            cls.proc.kill()
            cls.proc.wait()
        cls.log.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def wait_terminal(self, tid, timeout=10.0):
        deadline = time.monotonic() + timeout
        while True:
            t = self.client.get(tid)
            if t.terminal or time.monotonic() > deadline:
                return t
            time.sleep(0.02)

    def test_submit_callback_success(self):
        tid = "order|42 \u00fc\u65e5\u672c@A/B"
        t = self.client.submit("order.timeout", {"order_id": 42}, id=tid, delay=0.2)
        self.assertEqual((t.id, t.state, t.delay.total_seconds()), (tid, State.WAITING, 0.2))
        self.assertEqual(self.client.submit("order.timeout", {"order_id": 42}, id=tid, delay=0.2).id, tid)
        with self.assertRaises(axsched.Conflict):
            self.client.submit("order.timeout", {"order_id": 43}, id=tid)
        final = self.wait_terminal(tid)
        self.assertEqual((final.state, final.attempts), (State.SUCCESS, 1))
        d = self.deliveries[tid][0]
        self.assertEqual((d.handler, d.attempt, d.run, d.json()), ("order.timeout", 1, 1, {"order_id": 42}))
        self.assertIsNotNone(d.deadline)

    def test_permanent_failure(self):
        t = self.client.submit("always.permanent", payload_bytes=b"\x00\xff")
        final = self.wait_terminal(t.id)
        self.assertEqual(final.state, State.FAILED)
        self.assertIn("order does not exist", final.last_error)
        self.assertEqual(final.payload, b"\x00\xff")
        self.assertEqual(self.deliveries[t.id][0].payload, b"\x00\xff")

    def test_cancel_and_errors(self):
        t = self.client.submit("order.timeout", id="later", delay=3600)
        self.assertEqual(self.client.cancel("later").state, State.CANCELLED)
        self.assertEqual(self.client.get(t.id).state, State.CANCELLED)
        with self.assertRaises(axsched.NotFound):
            self.client.get("no such task")
        with self.assertRaises(axsched.BadRequest) as cm:
            self.client.submit("order.timeout", priority=9)
        self.assertEqual(cm.exception.status, 400)
        self.assertIn("priority", cm.exception.message)

    def test_batch(self):
        self.client.submit("order.timeout", {"n": 1}, id="batch-dup", delay=3600)
        res = self.client.submit_batch(
            [{"handler": "order.timeout", "delay": 3600}, {"handler": "order.timeout", "id": "batch-dup", "payload": 2}]
        )
        self.assertEqual(res.tasks[0].state, State.WAITING)
        self.assertIsNone(res.tasks[1])
        self.assertIsInstance(res.errors[1], axsched.Conflict)

    def test_retry_and_list(self):
        t = self.client.submit("always.permanent", {"n": 1})
        self.assertEqual(self.wait_terminal(t.id).state, State.FAILED)
        try:
            again = self.client.retry(t.id)
        except (axsched.NotFound, axsched.MethodNotAllowed) as e:
            if "no route" in e.message or "not allowed" in e.message:
                self.skipTest(f"this sidecar has no retry route: {e}")
            raise
        self.assertEqual(again.state, State.WAITING)
        ids = [x.id for x in self.client.list(handler="always.permanent", page_size=1)]
        self.assertIn(t.id, ids)
        self.assertTrue(self.worker.registered)

    def test_worker_registered_through_the_api(self):
        # A second worker that the sidecar knows only from its own
        # registration (POST /v1/executors): an exact handler name wins over
        # the --executor "*" flag, so its tasks go there.
        got = []
        w = Worker(socket_path=self.sock, listen=os.path.join(self.dir, "registered.sock"))
        w.handle("live.registered", lambda d: got.append(d.task_id))
        w.start()
        try:
            self.assertTrue(w.registered)
            names = {e["name"]: e for e in self.client.executors()}
            self.assertIn(w.name, names)
            self.assertEqual(names[w.name]["url"], w.url)
            t = self.client.submit("live.registered", {"n": 1})
            self.assertEqual(self.wait_terminal(t.id).state, State.SUCCESS)
            self.assertEqual(got, [t.id])
        finally:
            w.stop(timeout=5)
        self.assertNotIn(w.name, {e["name"] for e in self.client.executors()})

    def test_cluster_and_ready(self):
        self.client.ready()
        info = self.client.cluster()
        self.assertEqual(info.leader, info.node_id)
        self.assertEqual(len(info.members), 1)


if __name__ == "__main__":
    unittest.main()
