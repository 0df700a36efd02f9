"""Flows: client.submit_flow, flow, flows, cancel_flow."""

import json
import unittest

from axsched import BadRequest, Client, Conflict, NotFound, RawJSON

from stub_sidecar import StubSidecar

FLOW = {
    "id": "etl", "state": "RUNNING", "run": 1, "run_due_at": "2026-12-04T03:00:00Z",
    "stages": [
        {"name": "A", "handler": "pull", "depends_on": [], "on_failure": "cancel", "state": "SUCCESS", "task_id": "flow/etl/1/A"},
        {"name": "B", "handler": "clean", "depends_on": ["A"], "on_failure": "continue", "state": "RUNNING", "task_id": "flow/etl/1/B"},
    ],
    "succeeded_runs": 0, "failed_runs": 0, "created_at": "2026-12-04T03:00:00Z", "updated_at": "2026-12-04T03:00:01Z",
}
JSON = {"Content-Type": "application/json"}


class FlowsTest(unittest.TestCase):
    def setUp(self):
        self.stub = StubSidecar().start()
        self.addCleanup(self.stub.stop)
        self.client = Client(self.stub.path)
        self.addCleanup(self.client.close)

    def test_submit_get_list_cancel(self):
        spec = {"id": "etl", "every": "1h", "stages": [
            {"name": "A", "handler": "pull"},
            {"name": "B", "handler": "clean", "depends_on": ["A"], "on_failure": "continue"},
        ]}
        self.stub.enqueue(201, json.dumps(FLOW).encode(), JSON, path="/v1/flows")
        got = self.client.submit_flow(spec)
        self.assertEqual(got["stages"][1]["state"], "RUNNING")
        self.assertEqual(self.stub.requests[-1].json(), spec)
        self.stub.enqueue(200, json.dumps(FLOW).encode(), JSON, path="/v1/flows/a%2Fb")
        self.assertEqual(self.client.flow("a/b")["id"], "etl")
        self.stub.enqueue(200, json.dumps({"flows": [FLOW], "next_cursor": "etl"}).encode(), JSON, path="/v1/flows")
        page = self.client.flows(limit=5, cursor="a")
        self.assertEqual(page["next_cursor"], "etl")
        done = dict(FLOW, state="CANCELLED")
        self.stub.enqueue(200, json.dumps(done).encode(), JSON, path="/v1/flows/etl")
        self.assertEqual(self.client.cancel_flow("etl")["state"], "CANCELLED")
        self.assertEqual(self.stub.paths()[-4:], [
            "POST /v1/flows", "GET /v1/flows/a%2Fb", "GET /v1/flows?limit=5&cursor=a", "DELETE /v1/flows/etl",
        ])

    def test_purge_flow(self):
        self.stub.enqueue(200, b'{"purged":1}', JSON, method="DELETE", path="/v1/flows/a%2Fb")
        self.assertIsNone(self.client.purge_flow("a/b"))
        self.assertEqual(self.stub.paths()[-1], "DELETE /v1/flows/a%2Fb?purge=true")
        self.stub.enqueue_error(409, "conflict", 'purge: flow "r" is WAITING', method="DELETE")
        with self.assertRaises(Conflict):
            self.client.purge_flow("r")
        with self.assertRaises(BadRequest):
            self.client.purge_flow("")

    def test_errors(self):
        self.stub.enqueue_error(400, "bad_request", "stages: dependency cycle: A -> B -> A", path="/v1/flows")
        with self.assertRaises(BadRequest) as cm:
            self.client.submit_flow({"id": "f", "stages": []})
        self.assertIn("A -> B -> A", str(cm.exception))
        self.stub.enqueue_error(409, "conflict", 'flow "f" exists with a different spec', path="/v1/flows")
        with self.assertRaises(Conflict):
            self.client.submit_flow({"id": "f", "stages": []})
        self.stub.enqueue_error(404, "not_found", 'flow "x" not found', path="/v1/flows/x")
        with self.assertRaises(NotFound):
            self.client.flow("x")

    def test_stage_payloads(self):
        # A RawJSON stage payload goes byte for byte; others as JSON.
        self.stub.enqueue(201, json.dumps(FLOW).encode(), JSON, path="/v1/flows")
        self.client.submit_flow({"id": "etl", "stages": [
            {"name": "A", "handler": "pull", "payload": RawJSON('{ "html": "<b>" }')},
            {"name": "B", "handler": "clean", "depends_on": ["A"], "payload": {"n": 1}},
            {"name": "C", "handler": "store", "depends_on": ["B"]},
        ]})
        body = self.stub.requests[-1].body
        self.assertIn(b'"payload":{ "html": "<b>" }', body)
        self.assertEqual(json.loads(body)["stages"][1]["payload"], {"n": 1})
        self.assertNotIn("payload", json.loads(body)["stages"][2])
        # Bytes, or a value JSON cannot encode: BadRequest naming the
        # stage, and nothing sent.
        n = len(self.stub.paths())
        for bad in (b"\x00\x01", {1, 2}):
            with self.assertRaises(BadRequest) as cm:
                self.client.submit_flow({"id": "f", "stages": [{"name": "A", "handler": "h", "payload": bad}]})
            self.assertIn("stages[0]", str(cm.exception))
        with self.assertRaises(BadRequest):
            self.client.submit_flow({"id": "f", "labels": {1, 2}, "stages": []})
        self.assertEqual(len(self.stub.paths()), n)

    def test_stage_payload_errors(self):
        # The stage is named once, the error's own prefix and code are not
        # repeated inside it, and bytes point to the stage's
        # payload_base64 (a stage has no payload_bytes=).
        with self.assertRaises(BadRequest) as cm:
            self.client.submit_flow({"id": "f", "stages": [{"name": "A", "handler": "h", "payload": b"\x00"}]})
        msg = str(cm.exception)
        self.assertEqual(msg.count("ax: "), 1, msg)
        self.assertEqual(msg.count("bad_request"), 1, msg)
        self.assertIn("payload_base64", msg)
        self.assertNotIn("payload_bytes=", msg)
        with self.assertRaises(BadRequest) as cm:
            self.client.submit_flow({"id": "f", "stages": [{"name": "A", "handler": "h", "payload": {1, 2}}]})
        msg = str(cm.exception)
        self.assertTrue(msg.startswith("ax: stages[0] (A): payload: cannot encode as JSON"), msg)
        self.assertEqual(msg.count("bad_request"), 1, msg)
        self.assertEqual(self.stub.paths(), [])

    def test_bad_arguments_are_refused_before_sending(self):
        for bad in (lambda: self.client.submit_flow({}), lambda: self.client.flow(""),
                    lambda: self.client.cancel_flow(""), lambda: self.client.flows(limit=0)):
            with self.assertRaises(BadRequest):
                bad()
        self.assertEqual(self.stub.paths(), [])


if __name__ == "__main__":
    unittest.main()
