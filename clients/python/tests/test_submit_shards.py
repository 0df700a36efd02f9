"""Shards in submits and task views (no sidecar needed)."""

import json
import unittest

import axsched
from axsched.task import SubmitRequest, Task


class ShardsTest(unittest.TestCase):
    def test_submit_encodes_shards(self):
        for shards, want in [
            ({"count": 8}, {"count": 8}),
            ({"ask": True, "max": 5}, {"ask": True, "max": 5}),
            ({"count": 0}, {"count": 0}),  # the sidecar refuses it: InvalidShards
        ]:
            body = json.loads(SubmitRequest(handler="h", shards=shards).encode())
            self.assertEqual(body["shards"], want)
        self.assertNotIn("shards", json.loads(SubmitRequest(handler="h").encode()))

    def test_submit_refuses_bad_shapes(self):
        with self.assertRaises(axsched.BadRequest):
            SubmitRequest(handler="h", shards={"size": 2}).encode()
        with self.assertRaises(TypeError):
            SubmitRequest(handler="h", shards=8).encode()
        with self.assertRaises(TypeError):
            SubmitRequest(handler="h", shards={"ask": "yes"}).encode()

    def test_task_view(self):
        t = Task.from_json({"id": "p", "handler": "h", "state": "RUNNING",
                            "shards": {"count": 8, "total": 8, "succeeded": 3, "failed": 0, "running": 5}})
        self.assertEqual(t.shards["running"], 5)
        self.assertIsNone(t.shard_index)
        s = Task.from_json({"id": "shard/p/1/0", "handler": "h", "state": "SUCCESS", "shard_index": 0, "shard_total": 8})
        self.assertEqual((s.shard_index, s.shard_total), (0, 8))

    def test_invalid_shards_error(self):
        err = axsched.errors.error_from_response(400, b'{"error":{"code":"invalid_shards","message":"shards: give count or ask"}}')
        self.assertIsInstance(err, axsched.InvalidShards)
        self.assertIsInstance(err, axsched.BadRequest)


if __name__ == "__main__":
    unittest.main()
