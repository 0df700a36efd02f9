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
from datetime import datetime, timedelta, timezone

import axsched
from axsched import Backoff, Client, Permanent, State, Worker

AX_BIN = os.environ.get("AX_BIN")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sidecar:
    """``ax dev`` in a temporary directory, with extra flags."""

    def __init__(self, *flags):
        self.dir = tempfile.mkdtemp(prefix="axlive-")
        self.sock = os.path.join(self.dir, "ax.sock")
        self.log = open(os.path.join(self.dir, "ax.log"), "wb")
        self.proc = subprocess.Popen(
            [
                os.path.abspath(AX_BIN), "dev",
                "--socket", self.sock,
                "--data-dir", os.path.join(self.dir, "data"),
                "--raft-addr", f"127.0.0.1:{free_port()}",
                "--peer-addr", f"127.0.0.1:{free_port()}",
                *flags,
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=self.dir,
        )
        self.client = Client(self.sock)
        try:
            self.client.wait_ready(timeout=30)
        except Exception:
            self.stop()
            raise

    def stop(self):
        self.client.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@unittest.skipUnless(AX_BIN, "set AX_BIN to an ax binary to run the tests against a live sidecar")
class LiveSidecarTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.worker = None
        cls.dir = tempfile.mkdtemp(prefix="axlive-w-")
        cls.worker_sock = os.path.join(cls.dir, "worker.sock")
        cls.sidecar = Sidecar("--executor", f"*=unix://{cls.worker_sock}")
        cls.sock = cls.sidecar.sock
        cls.client = cls.sidecar.client
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

        @cls.worker.handler("live.every")
        def every(d):
            record(d)

        @cls.worker.handler("live.result")
        def result(d):
            record(d)
            return {"sum": sum(d.json()), "text": "\u00e9"}

        cls.worker.start()

    @classmethod
    def tearDownClass(cls):
        if cls.worker is not None:
            cls.worker.stop(timeout=5)
        cls.sidecar.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def wait_terminal(self, tid, timeout=10.0):
        return self.client.wait(tid, timeout=timeout, poll=0.02)

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

    def test_flow(self):
        flow = {"id": "live-flow", "stages": [
            {"name": "a", "handler": "order.timeout", "payload": {"n": 1}},
            {"name": "b", "handler": "order.timeout", "depends_on": ["a"], "payload": {"n": 2}},
        ]}
        self.assertEqual(self.client.submit_flow(flow)["id"], "live-flow")
        deadline = time.monotonic() + 10
        while self.client.flow("live-flow")["state"] != "SUCCESS":
            self.assertLess(time.monotonic(), deadline, self.client.flow("live-flow"))
            time.sleep(0.02)
        b = self.deliveries["flow/live-flow/1/b"][0].json()
        self.assertEqual(b["payload"], {"n": 2})
        self.assertEqual(b["upstream"]["a"]["state"], "SUCCESS")
        self.assertEqual([f["id"] for f in self.client.flows()["flows"]], ["live-flow"])

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

    def test_purge_tasks_with_cursor(self):
        # 5 cancelled tasks of a handler of this test's own, 2 a call: the
        # calls go on with each answer's cursor until more is false.
        for i in range(5):
            self.client.submit("purge.cursor", id=f"pc-{i}", delay=3600)
            self.client.cancel(f"pc-{i}")
        total, calls, cursor = 0, 0, None
        while True:
            r = self.client.purge_tasks(handler="purge.cursor", state=State.CANCELLED, limit=2, cursor=cursor)
            total, calls = total + r.purged, calls + 1
            if not r.more:
                break
            self.assertTrue(r.next_cursor)
            cursor = r.next_cursor
        self.assertEqual((total, calls), (5, 3))
        with self.assertRaises(axsched.NotFound):
            self.client.get("pc-4")
        with self.assertRaises(axsched.BadRequest) as cm:
            self.client.purge_tasks(cursor="not-a-cursor")
        self.assertIn("cursor", cm.exception.message)

    def test_batch(self):
        self.client.submit("order.timeout", {"n": 1}, id="batch-dup", delay=3600)
        res = self.client.submit_batch(
            [{"handler": "order.timeout", "delay": 3600}, {"handler": "order.timeout", "id": "batch-dup", "payload": 2}]
        )
        self.assertEqual(res.tasks[0].state, State.WAITING)
        self.assertIsNone(res.tasks[1])
        self.assertIsInstance(res.errors[1], axsched.Conflict)

    def test_batch_minimal(self):
        # The real sidecar honours Prefer: return=minimal: ids and states
        # only, errors as usual, and the tasks stored in full.
        self.client.submit("order.timeout", {"n": 1}, id="batch-min-dup", delay=3600)
        res = self.client.submit_batch(
            [
                {"handler": "order.timeout", "id": "batch-min-new", "delay": 3600, "priority": 1},
                {"handler": "order.timeout", "id": "batch-min-dup", "payload": {"n": 1}, "delay": 3600},
                {"handler": "order.timeout", "id": "batch-min-dup", "payload": 2},
            ],
            minimal=True,
        )
        self.assertEqual([t.id if t else None for t in res.tasks], ["batch-min-new", "batch-min-dup", None])
        self.assertEqual(res.tasks[0].state, State.WAITING)
        self.assertEqual(res.tasks[0].handler, "")  # not in a minimal answer
        self.assertIsNone(res.tasks[0].created_at)
        self.assertIsInstance(res.errors[2], axsched.Conflict)
        stored = self.client.get("batch-min-new")
        self.assertEqual((stored.handler, stored.priority), ("order.timeout", 1))

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

    def test_pause_and_resume(self):
        # A paused handler's task is not delivered until the resume; the
        # handler list shows it paused with its run parked.
        self.client.pause_handler("order.timeout")
        try:
            t = self.client.submit("order.timeout", {"order_id": 9}, id="live-paused")
            deadline = time.monotonic() + 10
            while True:
                h = {x.name: x for x in self.client.handlers()}["order.timeout"]
                if h.parked.get("paused") == 1 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            self.assertTrue(h.paused)
            self.assertEqual(h.parked.get("paused"), 1, h)
            got = self.client.get(t.id)
            self.assertEqual((got.state, got.waiting_reason, got.waiting_until), (State.WAITING, "paused", None))
            self.assertLessEqual(got.created_at, got.waiting_since)
            self.assertLessEqual(got.waiting_since, datetime.now(timezone.utc))
            listed = {x.id: x for x in self.client.list(handler="order.timeout", state="WAITING")}
            self.assertEqual(listed[t.id].waiting_reason, "paused")
            self.assertNotIn(t.id, self.deliveries)
        finally:
            self.client.resume_handler("order.timeout")
        done = self.wait_terminal(t.id)
        self.assertEqual((done.state, done.waiting_reason, done.waiting_since), (State.SUCCESS, None, None))
        self.assertEqual(len(self.deliveries[t.id]), 1)
        # One task paused and resumed; bad input.
        later = self.client.submit("order.timeout", id="live-paused-task", delay=3600)
        self.assertTrue(self.client.pause_task(later.id).paused)
        self.assertFalse(self.client.resume_task(later.id).paused)
        self.client.cancel(later.id)
        with self.assertRaises(axsched.TaskFinished):
            self.client.pause_task(later.id)
        with self.assertRaises(axsched.NotFound):
            self.client.pause_task("no such task")

    def test_wait(self):
        t = self.client.submit("order.timeout", {"order_id": 7}, delay=0.1)
        done = self.client.wait(t.id, timeout=10)
        self.assertEqual((done.id, done.state, done.terminal, done.run), (t.id, State.SUCCESS, True, 1))
        later = self.client.submit("order.timeout", delay=3600)
        with self.assertRaises(TimeoutError) as cm:
            self.client.wait(later.id, timeout=0.2)
        self.assertEqual(cm.exception.task.state, State.WAITING)
        self.assertEqual(self.client.cancel(later.id).state, State.CANCELLED)
        self.assertEqual(self.client.wait(later.id, timeout=0).state, State.CANCELLED)

    def test_result_of_the_last_run(self):
        # A Worker handler's return value is the run's result, which
        # client.get shows with the run's number.
        t = self.client.submit("live.result", [1, 2])
        self.assertEqual((t.last_run, t.result, t.result_truncated), (0, None, False))
        done = self.wait_terminal(t.id)
        self.assertEqual(done.state, State.SUCCESS)
        self.assertEqual((done.last_run, done.result, done.result_truncated), (1, {"sum": 3, "text": "\u00e9"}, False))
        self.assertEqual(self.client.run(t.id, done.last_run)["result"], done.result)
        # A handler that returns None answers an empty body: no result.
        t = self.client.submit("order.timeout", {"order_id": 8})
        done = self.wait_terminal(t.id)
        self.assertEqual((done.state, done.last_run, done.result), (State.SUCCESS, 1, None))

    def test_every_runs_first_one_interval_after_the_submit(self):
        # What the README says: no delay and no run_at means the first run is
        # one interval after the submit (the sidecar's first slot), not now;
        # a delay of 0 counts as none.
        for kw in ({}, {"delay": 0}):
            with self.subTest(**kw):
                t = self.client.submit("live.every", every=2, **kw)
                self.assertEqual((t.every, t.recurring, t.run, t.snoozes), (timedelta(seconds=2), True, 1, 0))
                first = (t.next_run_at - t.created_at).total_seconds()
                self.assertAlmostEqual(first, 2.0, delta=0.1)
                self.client.cancel(t.id)
        # a delay or a run_at sets the first run
        t = self.client.submit("live.every", every=10, delay=0.5)
        self.assertAlmostEqual((t.next_run_at - t.created_at).total_seconds(), 0.5, delta=0.1)
        self.client.cancel(t.id)
        now = datetime.now(timezone.utc)
        t = self.client.submit("live.every", every=10, run_at=now)
        self.assertLess(abs((t.next_run_at - now).total_seconds()), 0.01)
        self.client.cancel(t.id)

    def test_every_with_repeats_runs_each_slot(self):
        t = self.client.submit("live.every", {"n": 1}, every=1, repeats=2, delay=0.05)
        done = self.client.wait(t.id, timeout=15)
        self.assertEqual((done.state, done.run, done.repeats), (State.SUCCESS, 2, 2))
        self.assertEqual([d.run for d in self.deliveries[t.id]], [1, 2])

    def test_recurring_and_routing_fields_round_trip(self):
        until = datetime(2030, 1, 1, tzinfo=timezone.utc)
        kw = dict(
            cron="0 2 * * *",
            timezone="Europe/Berlin",
            repeats=3,
            until=until,
            backoff=Backoff(initial=1, max=timedelta(minutes=1), multiplier=3, jitter=0),
            route_key="customer-7",
            labels={"tenant": "acme", "k\u00fc": "\u65e5\u672c"},
        )
        t = self.client.submit("live.cron", id="cron-1", **kw)
        got = self.client.get("cron-1")
        for task in (t, got):
            self.assertEqual((task.cron, task.timezone, task.repeats, task.until), ("0 2 * * *", "Europe/Berlin", 3, until))
            self.assertEqual(task.backoff, Backoff(timedelta(seconds=1), timedelta(minutes=1), 3.0, 0.0))
            self.assertEqual((task.route_key, task.labels), ("customer-7", {"tenant": "acme", "k\u00fc": "\u65e5\u672c"}))
            self.assertTrue(task.recurring)
            self.assertIsNone(task.every)
        self.assertEqual(t.next_run_at.minute, 0)
        # the same spec again is the same task; another one conflicts
        self.assertEqual(self.client.submit("live.cron", id="cron-1", **kw).id, "cron-1")
        with self.assertRaises(axsched.Conflict):
            self.client.submit("live.cron", id="cron-1", **{**kw, "labels": {"tenant": "other"}})
        self.client.cancel("cron-1")
        # a partial backoff keeps the other defaults
        t = self.client.submit("live.cron", delay=3600, backoff={"jitter": 0})
        self.assertEqual(t.backoff, Backoff(timedelta(seconds=2), timedelta(seconds=30), 2.0, 0.0))
        self.client.cancel(t.id)
        # what only the sidecar checks
        for bad, field in ((dict(timezone="UTC"), "timezone"), (dict(repeats=2), "repeats"),
                           (dict(cron="not a cron"), "cron"), (dict(cron="@daily", timezone="Mars/Olympus"), "timezone")):
            with self.subTest(**bad), self.assertRaises(axsched.BadRequest) as cm:
                self.client.submit("live.cron", **bad)
            self.assertEqual((cm.exception.status, cm.exception.code), (400, "bad_request"))
            self.assertIn(field, cm.exception.message)

    def test_crashed_app_registration_is_skipped(self):
        # A registration whose app died without unregistering (nobody
        # listens at its URL) is skipped for the next executor of the
        # handler, within the same attempt.
        self.client.register_executor("crashed-app", ["live.crashed"], "unix://" + os.path.join(self.dir, "gone.sock"))
        self.addCleanup(self.client.unregister_executor, "crashed-app")
        got = []
        w = Worker(socket_path=self.sock, listen=os.path.join(self.dir, "alive.sock"))
        w.handle("live.crashed", lambda d: got.append(d.task_id))
        w.start()
        self.addCleanup(w.stop, 5)
        names = [e["name"] for e in self.client.executors()]
        self.assertLess(names.index("crashed-app"), names.index(w.name))  # tried first
        t = self.client.submit("live.crashed")
        done = self.client.wait(t.id, timeout=10)
        self.assertEqual((done.state, done.attempts), (State.SUCCESS, 1))
        self.assertEqual(got, [t.id])

    def test_cluster_and_ready(self):
        self.client.ready()
        info = self.client.cluster()
        self.assertEqual(info.leader, info.node_id)
        self.assertEqual(len(info.members), 1)
        # The leader's view of its members (itself: reachable and healthy),
        # and autopilot's figures.
        m = info.members[0]
        self.assertEqual((m.role, m.status, m.reachable, m.last_contact_ms, m.healthy), ("leader", "leader", True, 0, True))
        self.assertGreaterEqual(info.voters_target, 1)
        self.assertEqual((info.failure_tolerance, info.storage), (0, None))



@unittest.skipUnless(AX_BIN, "set AX_BIN to an ax binary to run the tests against a live sidecar")
class LiveBacklogTest(unittest.TestCase):
    """A sidecar with --backlog-limit 5 and no executor: due runs pile up."""

    LIMIT = 5

    @classmethod
    def setUpClass(cls):
        cls.sidecar = Sidecar("--backlog-limit", str(cls.LIMIT))
        cls.client = cls.sidecar.client

    @classmethod
    def tearDownClass(cls):
        cls.sidecar.stop()

    def test_warning_then_queue_full(self):
        warnings = []
        for _ in range(4 * self.LIMIT):
            try:
                t = self.client.submit("bp.full")
            except axsched.QueueFull as exc:
                e = exc
                break
            if t.backlog_warning is not None:
                warnings.append(t.backlog)
        else:
            self.fail(f"no QueueFull after {4 * self.LIMIT} submits")
        # From 80 % of the bound a successful submit warns.
        self.assertTrue(warnings, "no Ax-Backlog-Warning before the 429")
        self.assertTrue(all(limit == self.LIMIT and depth >= 0.8 * limit for depth, limit in warnings), warnings)
        self.assertEqual((e.status, e.code, e.limit), (429, "queue_full", self.LIMIT))
        self.assertGreaterEqual(e.depth, self.LIMIT)
        self.assertGreaterEqual(e.retry_after, 1)
        self.assertTrue(str(e).endswith(f" (queue_full, http 429, retry after {e.retry_after:g}s)"), str(e))
        # A batch for the full handler is refused as a whole.
        with self.assertRaises(axsched.QueueFull) as cm:
            self.client.submit_batch([{"handler": "bp.full"}, {"handler": "bp.other"}])
        self.assertEqual((cm.exception.status, cm.exception.limit), (429, self.LIMIT))
        # The bound is on due runs: a task due later is still taken.
        self.assertEqual(self.client.submit("bp.full", delay=3600).state, State.WAITING)


if __name__ == "__main__":
    unittest.main()
