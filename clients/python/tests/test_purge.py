import json
import os
import sys
import unittest
from datetime import datetime, timedelta, timezone

from axsched import BadRequest, Client, Conflict, NotFound, State, SubmitRequest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for stub_sidecar
from stub_sidecar import StubSidecar  # noqa: E402

JSON = {"Content-Type": "application/json"}


class PurgeTest(unittest.TestCase):
    def setUp(self):
        self.stub = StubSidecar().start()
        self.addCleanup(self.stub.stop)
        self.client = Client(self.stub.path, timeout=5)
        self.addCleanup(self.client.close)

    def test_purge_one(self):
        self.stub.enqueue(200, b'{"purged":1}', JSON, method="DELETE", path="/v1/tasks/order%7C42")
        self.assertIsNone(self.client.purge("order|42"))
        self.assertEqual(self.stub.paths()[-1], "DELETE /v1/tasks/order%7C42?purge=true")
        self.stub.enqueue_error(409, "conflict", 'purge: task "w" is WAITING', method="DELETE")
        with self.assertRaises(Conflict):
            self.client.purge("w")
        self.stub.enqueue_error(404, "not_found", 'task "ghost" not found', method="DELETE")
        with self.assertRaises(NotFound):
            self.client.purge("ghost")

    def test_purge_tasks(self):
        self.stub.enqueue(200, b'{"purged":7,"more":true,"next_cursor":"cy8x"}', JSON, method="POST", path="/v1/tasks/purge")
        before = datetime(2026, 12, 1, 10, 0, 0, tzinfo=timezone(timedelta(hours=1)))
        got = self.client.purge_tasks(handler="h", state=State.DEAD, finished_before=before, limit=50)
        self.assertEqual(got, (7, True))
        purged, more = got
        self.assertEqual((purged, more, got.purged, got.more, got.next_cursor), (7, True, 7, True, "cy8x"))
        req = self.stub.requests[-1]
        self.assertEqual(f"{req.method} {req.path}", "POST /v1/tasks/purge")
        self.assertEqual(req.json(), {"handler": "h", "state": "DEAD", "finished_before": "2026-12-01T09:00:00Z", "limit": 50})
        self.stub.enqueue(200, b'{"purged":0,"more":false}', JSON, method="POST", path="/v1/tasks/purge")
        got = self.client.purge_tasks(state="DEAD", cursor="cy8x")
        self.assertEqual((got, got.next_cursor), ((0, False), None))
        self.assertEqual(self.stub.requests[-1].json(), {"state": "DEAD", "cursor": "cy8x"})
        self.stub.enqueue(200, b'{"purged":0,"more":false}', JSON, method="POST", path="/v1/tasks/purge")
        self.assertEqual(self.client.purge_tasks(), (0, False))
        self.assertEqual(self.stub.requests[-1].json(), {})
        self.stub.enqueue_error(400, "bad_request", "limit: must be between 1 and 10000, got 0", method="POST")
        with self.assertRaises(BadRequest):
            self.client.purge_tasks(limit=0)

    def test_submit_retention(self):
        task = self.client.submit("h", id="r", retention=timedelta(hours=1))
        self.assertEqual(self.stub.requests[-1].json()["retention"], "1h0m0s")
        self.assertEqual(json.loads(SubmitRequest("h", retention=90).encode())["retention"], "1m30s")
        self.assertEqual(task.id, "r")
        with self.assertRaises(BadRequest):
            SubmitRequest("h", retention=-1).encode()

    def test_task_retention(self):
        from axsched import Task
        t = Task.from_json({"id": "x", "handler": "h", "state": "SUCCESS", "retention": "1h0m0s"})
        self.assertEqual(t.retention, timedelta(hours=1))
        self.assertIsNone(Task.from_json({"id": "x", "handler": "h", "state": "SUCCESS"}).retention)


if __name__ == "__main__":
    unittest.main()
