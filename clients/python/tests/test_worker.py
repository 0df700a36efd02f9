import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from datetime import datetime, timezone

import axsched
from axsched import Async, Delivery, Permanent, Snooze, Worker
from axsched.client import _UnixHTTPConnection

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for stub_sidecar
from stub_sidecar import StubSidecar  # noqa: E402

PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def call(sock, headers=None, body=b"", method="POST", path="/ax/v1/execute"):
    """One HTTP request to the worker, as the sidecar sends it."""
    conn = _UnixHTTPConnection(sock, timeout=5)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read().decode("utf-8")
    finally:
        conn.close()


def callback_headers(task_id="t1", handler="ok", attempt="1", run="1", deadline="2026-11-30T11:25:00.250Z"):
    h = {
        "Ax-Task-Id": task_id.encode("utf-8"),  # raw UTF-8 bytes, as Go's net/http sends them
        "Ax-Handler": handler.encode("utf-8"),
        "Ax-Attempt": attempt,
        "Ax-Run": run,
        "Content-Type": "application/octet-stream",
    }
    if deadline:
        h["Ax-Deadline"] = deadline
    return h


def wait_for(cond, what, timeout=3.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


class WorkerTestCase(unittest.TestCase):
    def setUp(self):
        self.stub = StubSidecar().start()
        self.addCleanup(self.stub.stop)
        self.dir = tempfile.mkdtemp(prefix="axworker-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.sock = os.path.join(self.dir, "w.sock")

    def worker(self, **kw):
        kw.setdefault("socket_path", self.stub.path)
        kw.setdefault("listen", self.sock)
        kw.setdefault("name", "w1")
        w = Worker(**kw)
        self.addCleanup(w.stop)
        return w


class AnswersTest(WorkerTestCase):
    def setUp(self):
        super().setUp()
        self.seen = []
        w = self.w = self.worker(max_threads=4)

        @w.handler("ok")
        def ok(d):
            self.seen.append(d)

        @w.handler("permanent")
        def permanent(d):
            raise Permanent("order 42 does not exist")

        @w.handler("permanent.returned")
        def permanent_returned(d):
            return Permanent("bad payload")

        @w.handler("snooze")
        def snooze(d):
            raise Snooze(2.5)

        @w.handler("boom")
        def boom(d):
            raise RuntimeError("database unreachable")

        @w.handler("async")
        def async_(d):
            self.seen.append(d)
            return Async()

        @w.handler("async.raised")
        def async_raised(d):
            raise Async()

        w.start()

    def test_status_per_handler_behaviour(self):
        cases = [
            ("ok", 200, None),  # None: no result, an empty body
            ("permanent", 422, "order 42 does not exist"),
            ("permanent.returned", 422, "bad payload"),
            ("snooze", 503, "snoozed for 2.5s"),
            ("boom", 500, "RuntimeError: database unreachable"),
            ("async", 202, "accepted; will report later"),
            ("async.raised", 202, "accepted; will report later"),
            ("unknown.handler", 404, "no handler registered for 'unknown.handler'"),
        ]
        with self.assertLogs("axsched.worker", "INFO") as logs:
            for handler, status, text in cases:
                with self.subTest(handler=handler):
                    got_status, headers, body = call(self.sock, callback_headers(handler=handler), b"{}")
                    self.assertEqual((got_status, body), (status, "" if text is None else text + "\n"))
                    self.assertEqual(headers.get("retry-after"), "3" if handler == "snooze" else None)
        out = "\n".join(logs.output)
        self.assertIn("handler 'boom' failed on task 't1' attempt 1: database unreachable", out)
        self.assertIn("no handler for 'unknown.handler'", out)

    def test_delivery_fields_and_utf8_ids(self):
        tid = "order|42 \u00fc\u65e5\u672c@A/B"
        status, _, _ = call(
            self.sock,
            callback_headers(task_id=tid, handler="ok", attempt="3", run="2"),
            b'{"order_id":42}',
        )
        self.assertEqual(status, 200)
        d = self.seen[-1]
        self.assertIsInstance(d, Delivery)
        self.assertEqual((d.task_id, d.handler, d.attempt, d.run), (tid, "ok", 3, 2))
        self.assertEqual(d.deadline, datetime(2026, 11, 30, 11, 25, 0, 250000, tzinfo=timezone.utc))
        self.assertEqual(d.payload, b'{"order_id":42}')
        self.assertEqual(d.json(), {"order_id": 42})
        self.assertLess(d.time_left(), 365 * 86400)

    def test_binary_and_empty_payloads(self):
        call(self.sock, callback_headers(deadline=None), bytes(range(256)))
        self.assertEqual(self.seen[-1].payload, bytes(range(256)))
        self.assertIsNone(self.seen[-1].deadline)
        call(self.sock, callback_headers())
        self.assertEqual(self.seen[-1].payload, b"")
        self.assertIsNone(self.seen[-1].json())

    def test_chunked_body(self):
        c = socket.socket(socket.AF_UNIX)
        c.connect(self.sock)
        c.sendall(
            b"POST /ax/v1/execute HTTP/1.1\r\nHost: x\r\nAx-Task-Id: c\r\nAx-Handler: ok\r\nAx-Attempt: 1\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
        )
        data = b""
        while True:
            chunk = c.recv(4096)
            if not chunk:
                break
            data += chunk
        c.close()
        self.assertTrue(data.startswith(b"HTTP/1.0 200"), data)
        self.assertEqual(self.seen[-1].payload, b"abcde")

    def test_malformed_callbacks(self):
        cases = [
            ({"Ax-Handler": "ok"}, "POST", "/ax/v1/execute", 400),
            ({"Ax-Task-Id": "t"}, "POST", "/ax/v1/execute", 400),
            (callback_headers(attempt="one"), "POST", "/ax/v1/execute", 400),
            (callback_headers(deadline="tomorrow"), "POST", "/ax/v1/execute", 400),
            (callback_headers(), "GET", "/ax/v1/execute", 405),
            (callback_headers(), "POST", "/other", 404),
        ]
        for headers, method, path, status in cases:
            with self.subTest(headers=headers, method=method, path=path):
                got, hdrs, _ = call(self.sock, headers, method=method, path=path)
                self.assertEqual(got, status)
                if status == 405:
                    self.assertEqual(hdrs["allow"], "POST")
        self.assertEqual(self.seen, [])

    def test_heartbeat_and_async_report(self):
        self.stub.put_task(id="a|1", state="RUNNING", attempts=1)
        status, _, _ = call(self.sock, callback_headers(task_id="a|1", handler="async"))
        self.assertEqual(status, 202)
        d = self.seen[-1]
        d.heartbeat()
        d.report("permanent", "gave up")
        self.assertEqual(
            [f"{r.method} {r.path}" for r in self.stub.requests[-2:]],
            ["POST /v1/tasks/a%7C1/heartbeat", "POST /v1/tasks/a%7C1/result"],
        )
        self.assertEqual(self.stub.requests[-1].json(), {"attempt": 1, "status": "permanent", "error": "gave up"})
        self.assertEqual(self.stub.tasks["a|1"]["state"], "FAILED")
        self.w.client.report_result("a|1", 1, axsched.RESULT_SUCCESS)

    def test_registration(self):
        reg = [r for r in self.stub.requests if r.method == "POST" and r.path == "/v1/executors"]
        self.assertEqual(len(reg), 1)
        self.assertEqual(
            reg[0].json(),
            {
                "name": "w1",
                "handlers": sorted(["ok", "permanent", "permanent.returned", "snooze", "boom", "async", "async.raised"]),
                "url": "unix://" + os.path.abspath(self.sock),
                "max_concurrency": 4,
            },
        )
        self.assertTrue(self.w.registered)
        self.assertEqual(self.w.url, "unix://" + os.path.abspath(self.sock))


class LifecycleTest(WorkerTestCase):
    def test_stop_unregisters_first_then_stops_accepting_and_finishes_in_flight(self):
        w = self.worker()
        entered, release = threading.Event(), threading.Event()

        @w.handler("slow")
        def slow(d):
            entered.set()
            release.wait(5)

        w.handle("ok", lambda d: None)
        w.start()
        result = {}

        def on_request(req):
            # While the sidecar handles the unregistration, attempts it sent
            # before are still on their way: the worker must still take them.
            if req.method == "DELETE":
                result["during_unregister"] = call(self.sock, callback_headers(handler="ok"))[0]

        self.stub.on_request = on_request
        t = threading.Thread(target=lambda: result.setdefault("answer", call(self.sock, callback_headers(handler="slow"))))
        t.start()
        self.assertTrue(entered.wait(5))
        stopper = threading.Thread(target=lambda: result.setdefault("stop", w.stop(timeout=5)))
        stopper.start()

        def refused():
            try:
                call(self.sock, callback_headers(handler="ok"))
            except (ConnectionError, FileNotFoundError):
                # refused; or reset / broken pipe when the connection was
                # made just before the listener closed
                return True
            return False

        wait_for(refused, "the worker to stop accepting")
        self.assertEqual(self.stub.paths()[-1], "DELETE /v1/executors/w1", "unregistered before it stops accepting")
        self.assertEqual(result.get("during_unregister"), 200)
        self.assertFalse(w.registered)
        self.assertTrue(os.path.exists(self.sock), "the socket file stays until in-flight callbacks finish")
        release.set()
        t.join(5)
        stopper.join(5)
        self.assertEqual(result["answer"][0], 200)
        self.assertIs(result["stop"], True)
        self.assertFalse(os.path.exists(self.sock))
        self.assertTrue(w.stop())  # again: nothing to do

    def test_stop_with_the_sidecar_gone_still_stops(self):
        w = self.worker()
        w.handle("ok", lambda d: None)
        w.start()
        self.assertTrue(w.registered)
        self.stub.stop()
        with self.assertLogs("axsched.worker", "WARNING") as logs:
            self.assertTrue(w.stop(timeout=5))
        self.assertIn("unregister: ax: cannot reach sidecar at", "\n".join(logs.output))
        self.assertFalse(os.path.exists(self.sock))

    def test_context_manager_and_restart(self):
        w = self.worker()
        w.handle("ok", lambda d: None)
        with w:
            self.assertEqual(call(self.sock, callback_headers())[0], 200)
        self.assertFalse(os.path.exists(self.sock))
        w.start()
        self.assertEqual(call(self.sock, callback_headers())[0], 200)
        w.stop()
        self.assertEqual(self.stub.paths().count("POST /v1/executors"), 2)

    def test_thread_pool_bounds_concurrency(self):
        w = self.worker(max_threads=2)
        lock = threading.Lock()
        state = {"now": 0, "max": 0}
        release = threading.Event()

        @w.handler("slow")
        def slow(d):
            with lock:
                state["now"] += 1
                state["max"] = max(state["max"], state["now"])
            release.wait(5)
            with lock:
                state["now"] -= 1

        w.start()
        answers = []
        threads = [threading.Thread(target=lambda: answers.append(call(self.sock, callback_headers(handler="slow"))[0])) for _ in range(3)]
        for t in threads:
            t.start()
        wait_for(lambda: state["now"] == 2, "two handlers running")
        time.sleep(0.05)  # the third must not start while two run
        self.assertEqual(state["now"], 2)
        release.set()
        for t in threads:
            t.join(5)
        self.assertEqual((answers, state["max"]), ([200, 200, 200], 2))

    def test_patterns_route_like_the_sidecar(self):
        w = self.worker()
        got = []
        w.handle("*", lambda d: got.append(("*", d.handler)))
        w.handle("order.*", lambda d: got.append(("order.*", d.handler)))
        w.handle("order.pay.*", lambda d: got.append(("order.pay.*", d.handler)))
        w.handle("order.timeout", lambda d: Permanent("exact"))
        w.start()
        self.assertEqual(call(self.sock, callback_headers(handler="any.thing"))[0], 200)
        self.assertEqual(call(self.sock, callback_headers(handler="order.timeout"))[0], 422)
        self.assertEqual(call(self.sock, callback_headers(handler="order.ship"))[0], 200)
        self.assertEqual(call(self.sock, callback_headers(handler="order.pay.refund"))[0], 200)
        self.assertEqual(got, [("*", "any.thing"), ("order.*", "order.ship"), ("order.pay.*", "order.pay.refund")])
        self.assertEqual(self.stub.executors["w1"]["handlers"], ["*", "order.*", "order.pay.*", "order.timeout"])

    def test_handler_registration_rules(self):
        w = self.worker()
        with self.assertRaises(ValueError):
            w.start()  # no handlers
        fn = lambda d: None  # noqa: E731
        self.assertIs(w.handler("x")(fn), fn)
        with self.assertRaises(ValueError):
            w.handle("x", fn)
        with self.assertRaises(ValueError):
            w.handle("", fn)
        with self.assertRaises(ValueError):
            w.handle("a*b", fn)
        with self.assertRaises(ValueError):
            Worker(listen=self.sock, max_threads=0)
        for bad in ("", "py/w 1", "a b", "..", "x" * 129):
            with self.subTest(name=bad), self.assertRaises(ValueError):
                Worker(listen=self.sock, name=bad)
        Worker(listen=self.sock, name="billing-worker:1.v2_a")
        self.assertEqual(w.handlers, ["x"])

    def test_default_name_is_stable(self):
        a = Worker(socket_path=self.stub.path, listen=self.sock)
        b = Worker(socket_path=self.stub.path, listen="unix://" + self.sock)
        self.assertEqual(a.name, b.name)
        self.assertRegex(a.name, r"^w-[0-9a-f]{6}$")
        for listen in ("my worker (1).sock", "..sock", "\u65e5\u672c.sock", ".hidden", "a" * 200 + ".sock"):
            with self.subTest(listen=listen):
                name = Worker(socket_path=self.stub.path, listen=os.path.join(self.dir, listen)).name
                self.assertRegex(name, r"^[A-Za-z0-9._:-]{1,128}$")
                self.assertNotIn(name, (".", ".."))

    def test_sidecar_without_executor_api_warns(self):
        self.stub.executors_enabled = False
        w = self.worker()
        w.handle("ok", lambda d: None)
        with self.assertLogs("axsched.worker", "WARNING") as logs:
            w.start()
        self.assertIn("--executor 'ok=unix://" + os.path.abspath(self.sock) + "'", "\n".join(logs.output))
        self.assertFalse(w.registered)
        self.assertEqual(call(self.sock, callback_headers())[0], 200)
        w.stop()
        self.assertNotIn("DELETE", " ".join(self.stub.paths()))

    def test_registers_in_background_when_the_sidecar_comes_up_later(self):
        path = os.path.join(self.dir, "late.sock")
        w = self.worker(socket_path=path)
        w._register_retry_first = 0.005
        w.handle("ok", lambda d: None)
        with self.assertLogs("axsched.worker", "WARNING") as logs:
            w.start()
        self.assertIn(f"cannot reach sidecar at {path}", "\n".join(logs.output))
        late = StubSidecar(path).start()
        self.addCleanup(late.stop)
        wait_for(lambda: w.registered, "the registration")
        self.assertEqual(late.paths(), ["POST /v1/executors"])
        w.stop()
        self.assertEqual(late.paths()[-1], "DELETE /v1/executors/w1")

    def test_registration_refused_stops_the_worker(self):
        self.stub.enqueue_error(400, "bad_request", "handlers: unknown", path="/v1/executors")
        w = self.worker()
        w.handle("ok", lambda d: None)
        with self.assertRaises(axsched.BadRequest):
            w.start()
        self.assertFalse(os.path.exists(self.sock))

    def test_stale_socket_is_replaced_but_a_live_one_is_not(self):
        s = socket.socket(socket.AF_UNIX)
        s.bind(self.sock)
        s.close()  # left behind by a dead process
        w = self.worker()
        w.handle("ok", lambda d: None)
        w.start()
        self.assertEqual(call(self.sock, callback_headers())[0], 200)
        other = Worker(socket_path=self.stub.path, listen=self.sock, name="w2")
        other.handle("ok", lambda d: None)
        with self.assertRaises(OSError) as cm:
            other.start()
        self.assertIn("in use", str(cm.exception))
        w.stop()
        with open(self.sock, "w") as f:
            f.write("not a socket")
        with self.assertRaises(OSError):
            w.start()

    def test_run_stops_cleanly_on_sigterm(self):
        ready_file = os.path.join(self.dir, "ready")
        script = f"""
import logging, sys, axsched
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
w = axsched.Worker(socket_path={self.stub.path!r}, listen={self.sock!r}, name="sig")

@w.handler("order.timeout")
def handle(d):
    pass

w.run()
print("clean exit")
"""
        env = dict(os.environ, PYTHONPATH=PKG_DIR)
        proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        try:
            wait_for(lambda: "POST /v1/executors" in self.stub.paths() or proc.poll() is not None, "the worker to register", 10)
            self.assertIsNone(proc.poll(), proc.stderr.read() if proc.poll() is not None else "")
            self.assertEqual(call(self.sock, callback_headers(handler="order.timeout"))[0], 200)
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
        self.assertEqual(proc.returncode, 0, err.decode())
        self.assertIn(b"clean exit", out)
        self.assertIn(b"SIGTERM, shutting down", err)
        self.assertFalse(os.path.exists(self.sock))
        self.assertEqual(self.stub.paths()[-1], "DELETE /v1/executors/sig")


class ExceptionsTest(unittest.TestCase):
    def test_snooze_retry_after(self):
        from datetime import timedelta

        for seconds, want in ((0, 1), (0.2, 1), (1, 1), (1.01, 2), (timedelta(minutes=1), 60), (float("inf"), 1)):
            with self.subTest(seconds=seconds):
                self.assertEqual(Snooze(seconds).retry_after, want)

    def test_delivery_without_client(self):
        d = Delivery("t", "h", 1, 1, None, b"x")
        with self.assertRaises(RuntimeError):
            d.heartbeat()
        with self.assertRaises(ValueError):
            d.json()


if __name__ == "__main__":
    unittest.main()
