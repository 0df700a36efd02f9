"""Sharded tasks on the worker side: the Ax-Shard-* callback headers and the
shard-count ask (POST /ax/v1/shards)."""

import json
import os
import sys
import unittest

import axsched
from axsched import Delivery

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for test_worker's helpers
from test_worker import WorkerTestCase, call, callback_headers  # noqa: E402


def shard_headers(index, total, **kw):
    h = callback_headers(**kw)
    if index is not None:
        h["Ax-Shard-Index"] = index
    if total is not None:
        h["Ax-Shard-Total"] = total
    return h


def ask(sock, handler="reindex", body=b"{}", **kw):
    """A shard-count ask as the sidecar sends it: status, headers, decoded body."""
    status, headers, text = call(sock, callback_headers(handler=handler, **kw), body, path=axsched.SHARDS_PATH)
    return status, headers, json.loads(text)


class ShardHeadersTest(WorkerTestCase):
    def setUp(self):
        super().setUp()
        self.seen = []
        w = self.w = self.worker()

        @w.handler("ok")
        def ok(d):
            self.seen.append(d)

        w.start()

    def test_shard_headers_parsed(self):
        status, _, _ = call(self.sock, shard_headers("2", "5", handler="ok"))
        self.assertEqual(status, 200)
        d = self.seen[-1]
        self.assertEqual((d.shard_index, d.shard_total), (2, 5))
        self.assertIn("shard=2/5", repr(d))

        call(self.sock, shard_headers("0", "1", handler="ok"))
        self.assertEqual((self.seen[-1].shard_index, self.seen[-1].shard_total), (0, 1))

    def test_unsharded_is_none(self):
        status, _, _ = call(self.sock, callback_headers(handler="ok"))
        self.assertEqual(status, 200)
        self.assertIsNone(self.seen[-1].shard_index)
        self.assertIsNone(self.seen[-1].shard_total)
        self.assertNotIn("shard=", repr(self.seen[-1]))

    def test_bad_shard_headers(self):
        cases = [
            ("1", None, "Ax-Shard-Index header without Ax-Shard-Total"),
            (None, "3", "Ax-Shard-Total header without Ax-Shard-Index"),
            ("0", "0", "bad Ax-Shard-Total header '0': want an integer >= 1"),
            ("0", "three", "bad Ax-Shard-Total header 'three'"),
            ("0", "-2", "bad Ax-Shard-Total header '-2'"),
            ("x", "3", "bad Ax-Shard-Index header 'x': want an integer from 0 to 2 (Ax-Shard-Total is 3)"),
            ("-1", "3", "bad Ax-Shard-Index header '-1'"),
            ("3", "3", "bad Ax-Shard-Index header '3': want an integer from 0 to 2"),
        ]
        for index, total, message in cases:
            with self.subTest(index=index, total=total):
                status, _, body = call(self.sock, shard_headers(index, total, handler="ok"))
                self.assertEqual(status, 400)
                self.assertTrue(body.startswith(message), body)
        self.assertEqual(self.seen, [])


class ShardAskTest(WorkerTestCase):
    def setUp(self):
        super().setUp()
        self.handled = []
        self.asked = []
        w = self.w = self.worker()

        def count_rows(d):
            self.asked.append(d)
            return d.json()["rows"] // 1000

        @w.handler("reindex", shard_count=count_rows)
        def reindex(d):
            self.handled.append(d)

        w.handle("plain", lambda d: None)
        w.handle("fails", lambda d: None, shard_count=lambda d: 1 // 0)
        w.handle("zero", lambda d: None, shard_count=lambda d: 0)
        w.handle("float", lambda d: None, shard_count=lambda d: 3.0)
        w.handle("bool", lambda d: None, shard_count=lambda d: True)
        w.handle("batch.*", lambda d: None, shard_count=lambda d: 4)
        w.start()

    def test_ask_answered(self):
        status, headers, body = ask(self.sock, body=b'{"rows":7042}', task_id="order|42", attempt="2", run="3")
        self.assertEqual((status, body), (200, {"count": 7}))
        self.assertEqual(headers["content-type"], "application/json")
        d = self.asked[-1]
        self.assertIsInstance(d, Delivery)
        self.assertEqual((d.task_id, d.handler, d.attempt, d.run), ("order|42", "reindex", 2, 3))
        self.assertEqual(d.payload, b'{"rows":7042}')
        self.assertIsNone(d.shard_total)
        self.assertIsNotNone(d.deadline)
        self.assertEqual(self.handled, [], "the ask must not run the handler")

    def test_ask_by_prefix_pattern(self):
        self.assertEqual(ask(self.sock, handler="batch.nightly")[::2], (200, {"count": 4}))

    def test_ask_errors(self):
        cases = [
            ("nobody", 404, "handler_not_found", "no handler registered for 'nobody'"),
            ("plain", 501, "shard_count_unsupported", "handler 'plain' cannot count shards: register it with shard_count=fn"),
            ("fails", 500, "shard_count_failed", "ZeroDivisionError: integer division or modulo by zero"),
            ("zero", 500, "shard_count_failed", "shard count of handler 'zero' is 0, want an int >= 1"),
            ("float", 500, "shard_count_failed", "shard count of handler 'float' is 3.0, want an int >= 1"),
            ("bool", 500, "shard_count_failed", "shard count of handler 'bool' is True, want an int >= 1"),
        ]
        with self.assertLogs("axsched.worker", "WARNING"):
            for handler, status, code, message in cases:
                with self.subTest(handler=handler):
                    got, headers, body = ask(self.sock, handler=handler)
                    self.assertEqual(got, status)
                    self.assertEqual(headers["content-type"], "application/json")
                    self.assertEqual(body, {"error": {"code": code, "message": message}})

    def test_malformed_asks(self):
        status, _, body = call(self.sock, {"Ax-Handler": "reindex"}, path=axsched.SHARDS_PATH)
        self.assertEqual(status, 400)
        self.assertEqual(json.loads(body), {"error": {"code": "bad_request", "message": "missing Ax-Task-Id header"}})

        status, _, body = call(self.sock, callback_headers(handler="reindex", run="one"), path=axsched.SHARDS_PATH)
        self.assertEqual(status, 400)
        self.assertEqual(json.loads(body)["error"]["code"], "bad_request")

        status, headers, body = call(self.sock, callback_headers(handler="reindex"), method="GET", path=axsched.SHARDS_PATH)
        self.assertEqual((status, headers["allow"]), (405, "POST"))
        self.assertEqual(json.loads(body)["error"]["code"], "method_not_allowed")
        self.assertEqual(self.asked, [])


class ShardRegistrationTest(WorkerTestCase):
    def test_shard_count_must_be_callable(self):
        w = self.worker()
        with self.assertRaises(TypeError):
            w.handle("h", lambda d: None, shard_count=3)
        self.assertEqual(w.handlers, [], "a refused registration registers nothing")


if __name__ == "__main__":
    unittest.main()
