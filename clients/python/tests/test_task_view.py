"""Task.from_json: the waiting reason, as the sidecar sends it (schema Task
of ipc/openapi.yaml; axapi.Task in Go)."""

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
        self.assertEqual((t.waiting_reason, t.paused), ("paused", True))
        self.answer(state="SUCCESS")
        self.assertIsNone(self.client.get("A/B").waiting_reason)
        self.answer(waiting_since="soon")
        with self.assertRaises(axsched.AxError) as cm:
            self.client.get("A/B")
        self.assertIn("waiting_since", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
