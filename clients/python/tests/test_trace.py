"""Trace context: submit sends traceparent/tracestate, tasks show their
trace id, and the Worker hands a callback's trace context to handlers."""

import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))

import axsched  # noqa: E402
from axsched import Client, SubmitRequest, Worker  # noqa: E402
from stub_sidecar import StubSidecar  # noqa: E402
from test_worker import call, callback_headers  # noqa: E402

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class SubmitTraceTest(unittest.TestCase):
    def setUp(self):
        self.stub = StubSidecar().start()
        self.addCleanup(self.stub.stop)
        self.client = Client(self.stub.path)
        self.addCleanup(self.client.close)

    def test_submit_sends_the_trace_context(self):
        task = self.client.submit("h", id="a", traceparent=TP, tracestate="rojo=1")
        self.assertEqual(self.stub.requests[-1].json(), {"id": "a", "handler": "h", "traceparent": TP, "tracestate": "rojo=1"})
        self.assertEqual((task.traceparent, task.tracestate), (TP, "rojo=1"))

    def test_without_trace_context_nothing_is_sent(self):
        self.client.submit("h", id="b")
        self.assertNotIn("traceparent", self.stub.requests[-1].json())

    def test_batch_items_carry_their_own(self):
        self.client.submit_batch([SubmitRequest("h", id="c", traceparent=TP), {"handler": "h", "id": "d", "tracestate": "x=1", "traceparent": TP}])
        items = self.stub.requests[-1].json()["tasks"]
        self.assertEqual([(i.get("traceparent"), i.get("tracestate")) for i in items], [(TP, None), (TP, "x=1")])

    def test_task_view_fields(self):
        t = axsched.Task.from_json({"id": "a", "trace_id": TP[3:35], "traceparent": TP})
        self.assertEqual((t.trace_id, t.traceparent, t.tracestate), (TP[3:35], TP, None))
        self.assertIsNone(axsched.Task.from_json({"id": "old"}).trace_id)

    def test_error_codes(self):
        self.stub.enqueue_error(400, "invalid_traceparent", "traceparent: bad")
        with self.assertRaises(axsched.InvalidTraceparent) as cm:
            self.client.submit("h", traceparent="bad")
        self.assertIsInstance(cm.exception, axsched.BadRequest)
        self.stub.enqueue_error(400, "invalid_tracestate", "tracestate: bad")
        with self.assertRaises(axsched.InvalidTracestate):
            self.client.submit("h", traceparent=TP, tracestate="Bad")


class WorkerTraceTest(unittest.TestCase):
    def setUp(self):
        self.stub = StubSidecar().start()
        self.addCleanup(self.stub.stop)
        self.dir = tempfile.mkdtemp(prefix="axtrace-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.sock = os.path.join(self.dir, "w.sock")
        self.seen = []
        w = Worker(socket_path=self.stub.path, listen=self.sock, name="w1")
        self.addCleanup(w.stop)

        @w.handler("ok")
        def ok(d):
            self.seen.append(d)

        w.start()

    def test_handler_gets_the_trace_context(self):
        h = callback_headers()
        h["traceparent"] = TP
        h["tracestate"] = "rojo=1"
        status, _, _ = call(self.sock, h, b"")
        self.assertEqual(status, 200)
        d = self.seen[-1]
        self.assertEqual((d.traceparent, d.tracestate, d.trace_id), (TP, "rojo=1", TP[3:35]))

    def test_without_trace_context(self):
        status, _, _ = call(self.sock, callback_headers(), b"")
        self.assertEqual(status, 200)
        d = self.seen[-1]
        self.assertEqual((d.traceparent, d.tracestate, d.trace_id), (None, None, None))


if __name__ == "__main__":
    unittest.main()
