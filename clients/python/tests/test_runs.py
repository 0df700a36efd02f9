"""Run history (client.runs, client.run) and handler results."""

import json
import os
import shutil
import tempfile
import unittest

from axsched import BadRequest, Client, NotFound, Worker

from stub_sidecar import StubSidecar
from test_worker import call, callback_headers

RUN2 = {
    "run": 2, "state": "SUCCESS", "due_at": "2026-12-04T03:00:00Z", "fired_at": "2026-12-04T03:00:00Z",
    "lateness": {"total_ms": 4.5, "parked_ms": 0, "commit_ms": 3, "queue_ms": 1, "connect_ms": 0.5},
    "attempts": [
        {"attempt": 1, "node": "n1", "fired_at": "2026-12-04T03:00:00Z", "outcome": "retryable", "http_status": 500, "error": "http 500: boom"},
        {"attempt": 2, "node": "n2", "fired_at": "2026-12-04T03:00:02Z", "outcome": "success", "http_status": 200},
    ],
    "result": {"rows": 3},
}


class RunsTest(unittest.TestCase):
    def setUp(self):
        self.stub = StubSidecar().start()
        self.addCleanup(self.stub.stop)
        self.client = Client(self.stub.path)
        self.addCleanup(self.client.close)

    def test_runs_page_and_one_run(self):
        page = {"runs": [RUN2], "next_cursor": "r2"}
        self.stub.enqueue(200, json.dumps(page).encode(), {"Content-Type": "application/json"}, path="/v1/tasks/a%7Cb/runs")
        got = self.client.runs("a|b", limit=5, cursor="r9")
        self.assertEqual(got["runs"][0]["attempts"][0]["http_status"], 500)
        self.assertEqual(got["next_cursor"], "r2")
        self.stub.enqueue(200, json.dumps(RUN2).encode(), {"Content-Type": "application/json"}, path="/v1/tasks/a%7Cb/runs/2")
        self.assertEqual(self.client.run("a|b", 2)["result"], {"rows": 3})
        self.stub.enqueue_error(404, "not_found", 'run 9 of task "a|b" not found', path="/v1/tasks/a%7Cb/runs/9")
        with self.assertRaises(NotFound):
            self.client.run("a|b", 9)
        self.assertEqual(self.stub.paths()[-3:], [
            "GET /v1/tasks/a%7Cb/runs?limit=5&cursor=r9", "GET /v1/tasks/a%7Cb/runs/2", "GET /v1/tasks/a%7Cb/runs/9",
        ])

    def test_bad_arguments_are_refused_before_sending(self):
        for kw in ({"limit": 0}, {"limit": 101}, {"limit": True}):
            with self.subTest(kw=kw), self.assertRaises(BadRequest):
                self.client.runs("a", **kw)
        with self.assertRaises(BadRequest):
            self.client.run("a", 0)
        self.assertEqual(self.stub.paths(), [])

    def test_report_result_carries_a_result(self):
        self.stub.put_task(id="t", state="RUNNING", attempts=1)
        self.client.report_result("t", 1, result={"ok": True})
        self.assertEqual(self.stub.requests[-1].json(), {"attempt": 1, "status": "success", "result": {"ok": True}})


class WorkerResultTest(unittest.TestCase):
    def setUp(self):
        self.stub = StubSidecar().start()
        self.addCleanup(self.stub.stop)
        self.dir = tempfile.mkdtemp(prefix="axw")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.sock = os.path.join(self.dir, "w.sock")
        w = Worker(socket_path=self.stub.path, listen=self.sock, name="w1")
        self.addCleanup(w.stop)
        w.handle("sum", lambda d: {"sum": 3, "text": "é"})
        w.handle("none", lambda d: None)
        w.handle("bad", lambda d: object())
        w.start()

    def test_the_return_value_is_the_result(self):
        status, headers, body = call(self.sock, callback_headers(handler="sum"), b"{}")
        self.assertEqual((status, headers["content-type"], json.loads(body)), (200, "application/json", {"sum": 3, "text": "é"}))
        status, _, body = call(self.sock, callback_headers(handler="none"), b"{}")
        self.assertEqual((status, body), (200, ""))
        with self.assertLogs("axsched.worker", "WARNING"):
            status, _, body = call(self.sock, callback_headers(handler="bad"), b"{}")
        self.assertEqual(status, 500)
        self.assertIn("not JSON-serializable", body)


if __name__ == "__main__":
    unittest.main()
