import json
from datetime import datetime, timezone
import os
import sys
import unittest

import axsched
from axsched import Client, Conflict, HandlerNotFound, NotFound, TaskFinished

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for stub_sidecar
from stub_sidecar import NOW, StubSidecar  # noqa: E402

JSON = {"Content-Type": "application/json"}


def task(**fields):
    t = {"id": "A/B", "handler": "h", "state": "WAITING", "timeout": "30s", "run": 1,
         "created_at": NOW, "updated_at": NOW}
    t.update(fields)
    return json.dumps(t).encode()


class PauseTest(unittest.TestCase):
    def setUp(self):
        self.stub = StubSidecar().start()
        self.addCleanup(self.stub.stop)
        self.client = Client(self.stub.path, timeout=5)
        self.addCleanup(self.client.close)

    def test_pause_and_resume_task(self):
        self.stub.enqueue(200, task(paused=True), JSON, method="POST", path="/v1/tasks/A%2FB/pause")
        self.stub.enqueue(200, task(), JSON, method="POST", path="/v1/tasks/A%2FB/resume")
        t = self.client.pause_task("A/B")
        self.assertTrue(t.paused)
        self.assertFalse(self.client.resume_task("A/B").paused)
        self.assertEqual(self.stub.paths(), ["POST /v1/tasks/A%2FB/pause", "POST /v1/tasks/A%2FB/resume"])
        self.assertEqual([r.body for r in self.stub.requests], [b"{}", b"{}"])

    def test_pause_handler(self):
        for suffix in ("pause", "resume"):
            self.stub.enqueue(200, json.dumps({"name": "mail/send", "paused": suffix == "pause"}).encode(), JSON,
                              method="POST", path=f"/v1/handlers/mail%2Fsend/{suffix}")
        self.client.pause_handler("mail/send")
        self.client.resume_handler("mail/send")
        self.assertEqual(self.stub.paths(), ["POST /v1/handlers/mail%2Fsend/pause", "POST /v1/handlers/mail%2Fsend/resume"])

    def test_errors(self):
        self.stub.enqueue_error(404, "handler_not_found", 'handler "typo": no task', method="POST", path="/v1/handlers/typo/pause")
        with self.assertRaises(HandlerNotFound) as cm:
            self.client.pause_handler("typo")
        self.assertIsInstance(cm.exception, NotFound)
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "handler_not_found"))
        self.stub.enqueue_error(409, "task_finished", 'task "done" is SUCCESS', method="POST", path="/v1/tasks/done/pause")
        with self.assertRaises(TaskFinished) as cm:
            self.client.pause_task("done")
        self.assertIsInstance(cm.exception, Conflict)
        with self.assertRaises(axsched.BadRequest):
            self.client.pause_handler("")
        with self.assertRaises(axsched.BadRequest):
            self.client.pause_task("")
        # A plain 404 without a code is NotFound, not HandlerNotFound.
        e = axsched.errors.error_from_response(404, b"gone")
        self.assertIs(type(e), NotFound)

    def test_handlers(self):
        body = {"handlers": [
            {"name": "h", "paused": True, "backlog": 3, "parked": {"paused": 3}, "circuit": "open",
             "circuit_until": "2026-01-02T15:04:35Z", "tasks": {"WAITING": 3, "SUCCESS": 1},
             "executors": [{"node": "n1", "name": "w", "url": "unix:///w.sock", "max_concurrency": 8, "limit": 4}]},
            {"name": "other", "paused": False, "parked": {}, "tasks": {}, "executors": []},
        ]}
        self.stub.enqueue(200, json.dumps(body).encode(), JSON, method="GET", path="/v1/handlers")
        hs = self.client.handlers()
        self.assertEqual([h.name for h in hs], ["h", "other"])
        h, o = hs
        self.assertTrue(h.paused)
        self.assertEqual((h.backlog, h.parked, h.circuit, h.tasks), (3, {"paused": 3}, "open", {"WAITING": 3, "SUCCESS": 1}))
        self.assertEqual(h.circuit_until.isoformat(), "2026-01-02T15:04:35+00:00")
        self.assertEqual((h.executors[0].node, h.executors[0].limit, h.executors[0].max_concurrency), ("n1", 4, 8))
        self.assertEqual((o.backlog, o.circuit, o.executors), (None, None, []))

    def test_handlers_executor_default_max_concurrency(self):
        # An executor registered without max_concurrency: the API leaves the
        # field out (the node's default applies); the view says None, as
        # register_executor's max_concurrency=None asks for the default, not 0.
        body = {"handlers": [
            {"name": "h", "paused": False, "parked": {}, "tasks": {},
             "executors": [{"node": "n1", "name": "d", "url": "unix:///d.sock"},
                           {"node": "n2", "name": "z", "url": "unix:///z.sock", "max_concurrency": 0},
                           {"node": "n3", "name": "w", "url": "unix:///w.sock", "max_concurrency": 8}]},
        ]}
        self.stub.enqueue(200, json.dumps(body).encode(), JSON, method="GET", path="/v1/handlers")
        (h,) = self.client.handlers()
        self.assertEqual([x.max_concurrency for x in h.executors], [None, None, 8])
        self.assertEqual([x.limit for x in h.executors], [0, 0, 0])
        self.assertIsNone(axsched.HandlerExecutor(node="n", name="x", url="u").max_concurrency)

    def test_handlers_executor_node_circuit(self):
        # The leader says which nodes have the handler's own circuit open.
        body = {"handlers": [
            {"name": "h", "paused": False, "parked": {}, "tasks": {},
             "executors": [{"node": "n1", "name": "d", "url": "unix:///d.sock"},
                           {"node": "n2", "name": "d", "url": "unix:///d.sock",
                            "circuit_until": "2026-12-07T03:00:30.5Z"}]},
        ]}
        self.stub.enqueue(200, json.dumps(body).encode(), JSON, method="GET", path="/v1/handlers")
        (h,) = self.client.handlers()
        self.assertIsNone(h.executors[0].circuit_until)
        self.assertEqual(h.executors[1].circuit_until,
                         datetime(2026, 12, 7, 3, 0, 30, 500000, tzinfo=timezone.utc))


if __name__ == "__main__":
    unittest.main()
