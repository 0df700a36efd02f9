"""Task.from_json: the waiting reason and the newest run's result, as the
sidecar sends them (schema Task of ipc/openapi.yaml; axapi.Task in Go)."""

import json
import os
import sys
import unittest
from datetime import datetime, timezone

import axsched
from axsched import Client, Task

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for stub_sidecar
from stub_sidecar import NOW, StubSidecar  # noqa: E402

BASE = {"id": "a", "handler": "h", "state": "WAITING", "timeout": "30s", "run": 1, "created_at": NOW, "updated_at": NOW}


def view(**fields):
    return {**BASE, **fields}


class WaitingReasonTest(unittest.TestCase):
    def test_present(self):
        t = Task.from_json(view(waiting_reason="circuit_open", waiting_since="2026-01-02T15:04:05.5Z",
                                waiting_until="2026-01-02T16:04:05+01:00"))
        self.assertEqual(t.waiting_reason, "circuit_open")
        self.assertEqual(t.waiting_since, datetime(2026, 1, 2, 15, 4, 5, 500000, tzinfo=timezone.utc))
        self.assertEqual(t.waiting_until, datetime(2026, 1, 2, 15, 4, 5, tzinfo=timezone.utc))
        self.assertIs(t.waiting_until.tzinfo, timezone.utc)
        t = Task.from_json(view(waiting_reason="paused", waiting_since=NOW))
        self.assertEqual((t.waiting_reason, t.waiting_until), ("paused", None))
        self.assertIsNotNone(t.waiting_since)
        # A reason of a newer sidecar is kept as sent.
        self.assertEqual(Task.from_json(view(waiting_reason="moon_phase")).waiting_reason, "moon_phase")

    def test_absent(self):
        for d in (BASE, {"id": "a", "handler": "h", "state": "WAITING"},
                  view(waiting_reason=None, waiting_since=None, waiting_until=None),
                  view(waiting_reason="", waiting_since="", waiting_until="")):
            with self.subTest(d=d):
                t = Task.from_json(d)
                self.assertEqual((t.waiting_reason, t.waiting_since, t.waiting_until), (None, None, None))

    def test_malformed(self):
        for bad in ({"waiting_reason": 3}, {"waiting_reason": ["paused"]}, {"waiting_since": "yesterday"},
                    {"waiting_until": 1767366245}, {"waiting_since": "2026-01-02 15:04"}):
            with self.subTest(bad=bad), self.assertRaises(ValueError) as cm:
                Task.from_json(view(**bad))
            self.assertIn(next(iter(bad)), str(cm.exception))


class LastRunResultTest(unittest.TestCase):
    def test_json_result(self):
        for result in ({"rows": 3, "text": "\u00e9"}, [1, 2], "done", 7, True):
            with self.subTest(result=result):
                t = Task.from_json(view(state="SUCCESS", last_run=2, result=result))
                self.assertEqual((t.last_run, t.result, t.result_truncated), (2, result, False))

    def test_binary_and_truncated_result(self):
        t = Task.from_json(view(state="SUCCESS", last_run=1, result_base64="AP8="))
        self.assertEqual((t.last_run, t.result, t.result_truncated), (1, b"\x00\xff", False))
        t = Task.from_json(view(state="SUCCESS", last_run=4, result_base64="eyJhIjog", result_truncated=True))
        self.assertEqual((t.last_run, t.result, t.result_truncated), (4, b'{"a": ', True))
        self.assertEqual(Task.from_json(view(result_base64="")).result, b"")

    def test_absent(self):
        for d in (BASE, {"id": "a", "handler": "h", "state": "WAITING"},
                  view(last_run=None, result=None, result_base64=None, result_truncated=None)):
            with self.subTest(d=d):
                t = Task.from_json(d)
                self.assertEqual((t.last_run, t.result, t.result_truncated), (0, None, False))
        # A run on record without a result (it failed, or answered an empty body).
        t = Task.from_json(view(state="DEAD", last_run=1))
        self.assertEqual((t.last_run, t.result, t.result_truncated), (1, None, False))

    def test_malformed(self):
        for bad in ({"last_run": "2"}, {"last_run": 2.5}, {"last_run": True}, {"result_base64": "not base64!"},
                    {"result_base64": 12}, {"result_truncated": "yes"}, {"result_truncated": 1}):
            with self.subTest(bad=bad), self.assertRaises(ValueError) as cm:
                Task.from_json(view(**bad))
            self.assertIn(next(iter(bad)), str(cm.exception))


class GetTest(unittest.TestCase):
    """The fields reach the Task of Client.get; a malformed one is an
    AxError naming the request, as for the other fields."""

    def setUp(self):
        self.stub = StubSidecar().start()
        self.addCleanup(self.stub.stop)
        self.client = Client(self.stub.path, timeout=5)
        self.addCleanup(self.client.close)

    def answer(self, **fields):
        self.stub.enqueue(200, json.dumps(view(id="A/B", **fields)).encode(), {"Content-Type": "application/json"},
                          method="GET", path="/v1/tasks/A%2FB")

    def test_get(self):
        self.answer(waiting_reason="paused", waiting_since=NOW, paused=True)
        t = self.client.get("A/B")
        self.assertEqual((t.waiting_reason, t.paused, t.last_run, t.result), ("paused", True, 0, None))
        self.answer(state="SUCCESS", last_run=1, result={"ok": True})
        t = self.client.get("A/B")
        self.assertEqual((t.waiting_reason, t.last_run, t.result), (None, 1, {"ok": True}))
        self.answer(last_run="one")
        with self.assertRaises(axsched.AxError) as cm:
            self.client.get("A/B")
        self.assertIn("last_run", str(cm.exception))
        self.answer(waiting_since="soon")
        with self.assertRaises(axsched.AxError) as cm:
            self.client.get("A/B")
        self.assertIn("waiting_since", str(cm.exception))

    def test_wrong_types_of_older_fields(self):
        # int({}) raised a raw TypeError out of get: now the documented
        # ValueError of from_json, an AxError naming the request from get.
        for bad in ({"priority": {}}, {"attempts": [1]}, {"repeats": [1]}, {"shard_index": []}):
            with self.subTest(bad=bad):
                with self.assertRaises(ValueError) as cm:
                    Task.from_json(view(**bad))
                self.assertIn("task 'a'", str(cm.exception))
                self.answer(**bad)
                with self.assertRaises(axsched.AxError) as cm:
                    self.client.get("A/B")
                self.assertIn("GET /v1/tasks/A%2FB: cannot decode answer", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
