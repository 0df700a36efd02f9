import base64
import inspect
import json
import logging
import os
import pickle
import socket
import sys
import tempfile
import threading
import time
import traceback
import unittest
import urllib.parse
from datetime import datetime, timedelta, timezone
from unittest import mock

import axsched
from axsched import (
    AxError,
    Backoff,
    BadRequest,
    Client,
    Conflict,
    NoLeader,
    NotFound,
    NotReady,
    PayloadTooLarge,
    QueueFull,
    RawJSON,
    State,
    StorageUnavailable,
    SubmitRequest,
    Unavailable,
)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for stub_sidecar
from stub_sidecar import NOW, StubSidecar, error_body  # noqa: E402

IDS = {
    "order|42": "order%7C42",
    "a@b": "a%40b",
    "A/B": "A%2FB",
    "\u00fc\u65e5\u672c": "%C3%BC%E6%97%A5%E6%9C%AC",
    "sp ace?#%": "sp%20ace%3F%23%25",
}


class ClientTestCase(unittest.TestCase):
    def setUp(self):
        self.stub = StubSidecar().start()
        self.addCleanup(self.stub.stop)
        self.client = Client(self.stub.path, timeout=5)
        self.addCleanup(self.client.close)
        self.sleeps = []
        self.client._sleep = self.sleeps.append


class ConfigTest(unittest.TestCase):
    def test_socket_path_sources(self):
        with mock.patch.dict(os.environ, {"AX_SOCKET": "/run/ax/ax.sock"}):
            self.assertEqual(Client().socket_path, "/run/ax/ax.sock")
            self.assertEqual(Client("/other.sock").socket_path, "/other.sock")
        with mock.patch.dict(os.environ, {"AX_SOCKET": "unix:///run/ax/ax.sock"}):
            self.assertEqual(Client().socket_path, "/run/ax/ax.sock")
        with mock.patch.dict(os.environ, {}, clear=True):
            self.assertEqual(Client().socket_path, "./ax.sock")
            self.assertEqual(Client().timeout, 10.0)
        self.assertEqual(Client("unix:///x.sock").socket_path, "/x.sock")

    def test_bad_timeout(self):
        with self.assertRaises(ValueError):
            Client("/x.sock", timeout=0)


class SubmitTest(ClientTestCase):
    def test_submit_sends_every_field_and_parses_the_task(self):
        run_at = datetime(2026, 1, 2, 16, 0, 0, 500000, tzinfo=timezone.utc)
        task = self.client.submit(
            "order.timeout",
            {"order_id": 42, "note": "\u00fc"},
            id="order|42",
            run_at=run_at,
            priority=0,
            timeout=timedelta(seconds=45),
            max_attempts=7,
            overwrite=True,
        )
        req = self.stub.requests[-1]
        self.assertEqual((req.method, req.path), ("POST", "/v1/tasks"))
        self.assertEqual(req.headers["Content-Type"], "application/json")
        self.assertEqual(
            req.json(),
            {
                "id": "order|42",
                "handler": "order.timeout",
                "payload": {"order_id": 42, "note": "\u00fc"},
                "run_at": "2026-01-02T16:00:00.5Z",
                "priority": 0,
                "timeout": "45s",
                "max_attempts": 7,
                "overwrite": True,
            },
        )
        self.assertIn(b'"payload":{"order_id":42,"note":"\xc3\xbc"}', req.body)  # compact UTF-8
        self.assertIsInstance(task, axsched.Task)
        self.assertEqual(task.id, "order|42")
        self.assertEqual(task.handler, "order.timeout")
        self.assertIs(task.state, State.WAITING)
        self.assertEqual(task.state, "WAITING")
        self.assertFalse(task.terminal)
        self.assertEqual(task.priority, 0)
        self.assertEqual(task.max_attempts, 7)
        self.assertEqual(task.timeout, timedelta(seconds=45))
        self.assertEqual(task.run_at, run_at)
        self.assertEqual(task.created_at, datetime(2026, 1, 2, 15, 4, 5, 123000, tzinfo=timezone.utc))
        self.assertEqual(task.next_run_at.tzinfo, timezone.utc)
        self.assertIsNone(task.finished_at)
        self.assertEqual(task.payload, {"order_id": 42, "note": "\u00fc"})

    def test_minimal_submit_omits_defaults(self):
        task = self.client.submit("h")
        self.assertEqual(self.stub.requests[-1].json(), {"handler": "h"})
        self.assertEqual(task.id, "gen-1")
        self.assertIsNone(task.payload)

    def test_delay_formats(self):
        for delay, want in ((1.5, "1.5s"), (timedelta(milliseconds=250), "250ms"), (1800, "30m0s")):
            with self.subTest(delay=delay):
                self.client.submit("h", delay=delay)
                self.assertEqual(self.stub.requests[-1].json()["delay"], want)

    def test_payload_round_trip(self):
        payloads = [{"a": [1, 2.5, None, True]}, "text \u00fc", 0, [], {"nested": {"k": "\u65e5\u672c"}}]
        for i, p in enumerate(payloads):
            with self.subTest(payload=p):
                self.client.submit("h", p, id=f"p{i}")
                self.assertEqual(self.client.get(f"p{i}").payload, p)

    def test_bytes_payload_round_trip(self):
        data = bytes(range(256))
        task = self.client.submit("h", payload_bytes=data, id="bin")
        self.assertEqual(self.stub.requests[-1].json()["payload_base64"], base64.b64encode(data).decode())
        self.assertEqual(task.payload, data)
        self.assertEqual(self.client.get("bin").payload, data)

    def test_raw_json_is_sent_byte_for_byte(self):
        self.client.submit("h", RawJSON('{ "b" : 1,  "a":2 }'))
        self.assertTrue(self.stub.requests[-1].body.endswith(b'"payload":{ "b" : 1,  "a":2 }}'))
        with self.assertRaises(BadRequest):
            RawJSON("{nope")

    def test_client_side_validation(self):
        cases = [
            dict(handler=""),
            dict(handler="h", payload={"a": 1}, payload_bytes=b"x"),
            dict(handler="h", payload=b"raw bytes"),
            dict(handler="h", delay=1, run_at=datetime.now(timezone.utc)),
            dict(handler="h", id=""),
            dict(handler="h", payload={"bad": object()}),
        ]
        for kw in cases:
            with self.subTest(kw=kw), self.assertRaises(BadRequest) as cm:
                self.client.submit(**kw)
            self.assertIsNone(cm.exception.status)
            self.assertEqual(cm.exception.code, "bad_request")
            self.assertIsInstance(cm.exception, ValueError)
        with self.assertRaises(ValueError):
            self.client.submit("h", run_at=datetime(2026, 1, 2))  # naive
        with self.assertRaises(TypeError):
            self.client.submit("h", delay="5s")
        self.assertEqual(self.stub.requests, [])

    def test_lone_surrogates_are_bad_requests(self):
        # Not valid UTF-8: refused before sending, naming the field, not a
        # raw UnicodeEncodeError from the encoder.
        for kw, field in [
            (dict(handler="h", id="a\ud800b"), "id"),
            (dict(handler="h\udc00"), "handler"),
            (dict(handler="h", payload={"k": "\ud800"}), "payload"),
            (dict(handler="h", labels={"k": "\ud800"}), "labels"),
        ]:
            with self.subTest(kw=kw), self.assertRaises(BadRequest) as cm:
                self.client.submit(**kw)
            self.assertTrue(str(cm.exception).startswith(f"ax: {field}: not valid UTF-8"), str(cm.exception))
        for call in (self.client.get, self.client.cancel):
            with self.subTest(call=call.__name__), self.assertRaises(BadRequest) as cm:
                call("a\ud800")
            self.assertIn("task id: not valid UTF-8", str(cm.exception))
        self.assertEqual(self.stub.requests, [])

    def test_idempotent_and_conflict(self):
        first = self.client.submit("h", {"a": 1}, id="k")
        again = self.client.submit("h", {"a": 1}, id="k")
        self.assertEqual(first.id, again.id)
        with self.assertRaises(Conflict) as cm:
            self.client.submit("h", {"a": 2}, id="k")
        e = cm.exception
        self.assertEqual((e.status, e.code), (409, "conflict"))
        self.assertIn("another spec", e.message)
        self.client.submit("h", {"a": 2}, id="k", overwrite=True)


class RecurringAndRoutingTest(ClientTestCase):
    def test_submit_sends_the_recurring_and_routing_fields_and_parses_them_back(self):
        until = datetime(2027, 1, 1, 1, 0, 0, tzinfo=timezone(timedelta(hours=1)))
        task = self.client.submit(
            "report.build",
            id="r1",
            every=timedelta(minutes=5),
            repeats=3,
            until=until,
            backoff=Backoff(initial=2, max=30, multiplier=2, jitter=0.2),
            route_key="customer-7",
            labels={"tenant": "acme", "k\u00fc": "v\u00fc"},
        )
        self.assertEqual(
            self.stub.requests[-1].json(),
            {
                "id": "r1",
                "handler": "report.build",
                "every": "5m0s",
                "repeats": 3,
                "until": "2027-01-01T00:00:00Z",
                "backoff": {"initial": "2s", "max": "30s", "multiplier": 2, "jitter": 0.2},
                "route_key": "customer-7",
                "labels": {"tenant": "acme", "k\u00fc": "v\u00fc"},
            },
        )
        self.assertIn(b'"backoff":{"initial":"2s","max":"30s","multiplier":2,"jitter":0.2}', self.stub.requests[-1].body)
        self.assertEqual(task.every, timedelta(minutes=5))
        self.assertTrue(task.recurring)
        self.assertEqual((task.repeats, task.until), (3, until))
        self.assertEqual(task.until.tzinfo, timezone.utc)
        self.assertIsNone(task.cron)
        self.assertEqual(task.backoff, Backoff(timedelta(seconds=2), timedelta(seconds=30), 2.0, 0.2))
        self.assertEqual((task.route_key, task.labels), ("customer-7", {"tenant": "acme", "k\u00fc": "v\u00fc"}))
        self.assertEqual((task.run, task.snoozes), (1, 0))
        self.assertEqual(self.client.get("r1"), task)

    def test_cron_and_timezone(self):
        task = self.client.submit("nightly", cron="0 2 * * *", timezone="Europe/Berlin", delay=1.5)
        self.assertEqual(
            self.stub.requests[-1].json(),
            {"handler": "nightly", "cron": "0 2 * * *", "timezone": "Europe/Berlin", "delay": "1.5s"},
        )
        self.assertEqual((task.cron, task.timezone, task.every, task.recurring), ("0 2 * * *", "Europe/Berlin", None, True))

    def test_durations_and_partial_backoff(self):
        for kw, want in (
            (dict(every=1), {"every": "1s"}),
            (dict(every=90.5), {"every": "1m30.5s"}),
            (dict(every=timedelta(hours=1), repeats=0), {"every": "1h0m0s", "repeats": 0}),
            (dict(backoff=Backoff(jitter=0)), {"backoff": {"jitter": 0}}),
            (dict(backoff={"initial": timedelta(milliseconds=500), "multiplier": 1.5}),
             {"backoff": {"initial": "500ms", "multiplier": 1.5}}),
            (dict(backoff={}), {"backoff": {}}),
            (dict(labels={}), {"labels": {}}),
        ):
            with self.subTest(kw=kw):
                task = self.client.submit("h", **kw)
                self.assertEqual(self.stub.requests[-1].json(), {"handler": "h", **want})
                if "backoff" in kw:  # the view has every field: the defaults filled in
                    self.assertIsInstance(task.backoff.initial, timedelta)
                    self.assertEqual(task.backoff.max, timedelta(seconds=30))

    def test_client_side_validation(self):
        now = datetime.now(timezone.utc)
        bad_request = [
            dict(every=0.999),
            dict(every=timedelta(0)),
            dict(every=-5),
            dict(every=5, cron="* * * * *"),
            dict(every=5, repeats=-1),
            dict(backoff={"initial": 1, "bogus": 2}),
            dict(backoff=Backoff(initial=0)),
            dict(backoff=Backoff(max=-1)),
            dict(backoff=Backoff(initial=10, max=5)),
            dict(backoff=Backoff(multiplier=0.5)),
            dict(backoff=Backoff(jitter=1.5)),
            dict(backoff=Backoff(jitter=-0.1)),
            dict(backoff=Backoff(multiplier=float("nan"))),
        ]
        for kw in bad_request:
            with self.subTest(kw=kw), self.assertRaises(BadRequest) as cm:
                self.client.submit("h", **kw)
            self.assertIsNone(cm.exception.status)
        type_errors = [
            dict(every="5m"),
            dict(cron=5),
            dict(every=5, repeats="3"),
            dict(every=5, repeats=True),
            dict(labels={"a": 1}),
            dict(labels=[("a", "b")]),
            dict(route_key=7),
            dict(backoff=Backoff(initial="2s")),
            dict(backoff=Backoff(multiplier="2")),
            dict(backoff=5),
            dict(every=5, until="2027-01-01T00:00:00Z"),
        ]
        for kw in type_errors:
            with self.subTest(kw=kw), self.assertRaises(TypeError):
                self.client.submit("h", **kw)
        with self.assertRaises(ValueError):
            self.client.submit("h", every=5, until=datetime(2027, 1, 1))  # naive
        self.client.submit("h", every=5, until=now)  # aware: fine
        self.assertEqual(len(self.stub.requests), 1)

    def test_the_sidecar_checks_the_rest(self):
        # timezone, repeats and until without a schedule: the sidecar says so.
        self.stub.enqueue_error(400, "bad_request", "timezone: only with cron", method="POST")
        with self.assertRaises(BadRequest) as cm:
            self.client.submit("h", timezone="UTC")
        self.assertEqual((cm.exception.status, self.stub.requests[-1].json()), (400, {"handler": "h", "timezone": "UTC"}))

    def test_batch_items_take_the_new_fields(self):
        res = self.client.submit_batch(
            [
                {"handler": "h", "every": 60, "backoff": {"initial": 10, "max": 600}, "labels": {"a": "b"}},
                SubmitRequest("h", cron="@daily", timezone="Asia/Tokyo", route_key="k"),
            ]
        )
        self.assertTrue(res.ok)
        items = self.stub.requests[-1].json()["tasks"]
        self.assertEqual(items[0], {"handler": "h", "every": "1m0s", "backoff": {"initial": "10s", "max": "10m0s"},
                                    "labels": {"a": "b"}})
        self.assertEqual(items[1], {"handler": "h", "cron": "@daily", "timezone": "Asia/Tokyo", "route_key": "k"})
        self.assertEqual(res.tasks[0].every, timedelta(minutes=1))
        self.assertEqual(res.tasks[1].timezone, "Asia/Tokyo")
        with self.assertRaises(BadRequest) as cm:
            self.client.submit_batch([{"handler": "h"}, {"handler": "h", "every": 0.5}])
        self.assertIn("item 1: every", str(cm.exception))
        with self.assertRaises(BadRequest) as cm:
            self.client.submit_batch([{"handler": "h", "labels": {"a": 1}}])
        self.assertIn("item 0: labels", str(cm.exception))

    def test_task_view_of_an_older_sidecar(self):
        t = axsched.Task.from_json({"id": "a", "handler": "h", "state": "WAITING"})
        self.assertEqual(
            (t.cron, t.timezone, t.every, t.repeats, t.until, t.run, t.snoozes, t.backoff, t.route_key, t.labels,
             t.backlog_warning, t.backlog, t.recurring),
            (None, None, None, 0, None, 0, 0, None, None, {}, None, None, False),
        )
        with self.assertRaises(ValueError):
            axsched.Task.from_json({"id": "a", "handler": "h", "state": "WAITING", "every": "5 minutes"})
        with self.assertRaises(ValueError):
            axsched.Task.from_json({"id": "a", "handler": "h", "state": "WAITING", "backoff": {"initial": "x"}})

    def test_backoff_default(self):
        self.assertEqual(axsched.BACKOFF_DEFAULT.to_json(), {"initial": "2s", "max": "30s", "multiplier": 2.0, "jitter": 0.2})
        self.assertEqual(Backoff().to_json(), {})
        self.assertEqual(axsched.EVERY_MIN, timedelta(seconds=1))


class BacklogTest(ClientTestCase):
    def test_backlog_warning_of_a_submit(self):
        task = self.client.submit("h")
        self.assertIsNone(task.backlog_warning)
        self.assertIsNone(task.backlog)
        self.stub.backlog_warning = "850/1000"
        task = self.client.submit("h", id="w")
        self.assertEqual((task.backlog_warning, task.backlog), ("850/1000", (850, 1000)))
        self.assertEqual(task, self.client.get("w"))  # not part of the task's state
        self.assertIsNone(self.client.get("w").backlog_warning)
        res = self.client.submit_batch([{"handler": "h"}, {"handler": "h", "id": "w"}])
        self.assertEqual([t.backlog for t in res.tasks], [(850, 1000), (850, 1000)])
        for bad in ("", "850", "a/b", "1/2/3"):
            with self.subTest(warning=bad):
                self.assertIsNone(axsched.Task("a", "h", State.WAITING, backlog_warning=bad).backlog)

    def test_queue_full_has_depth_and_limit(self):
        message = 'backlog of handler "order.timeout" is full: 5 due runs waiting for executors, the bound is 5; retry later'
        body = json.dumps({"error": {"code": "queue_full", "message": message, "depth": 5, "limit": 5}}).encode()
        self.stub.enqueue(429, body, {"Retry-After": "1"}, method="POST")
        with self.assertRaises(QueueFull) as cm:
            self.client.submit("order.timeout")
        e = cm.exception
        self.assertEqual((e.status, e.code, e.retry_after, e.depth, e.limit), (429, "queue_full", 1.0, 5, 5))
        self.assertEqual(str(e), f"ax: {message} (queue_full, http 429, retry after 1s)")
        self.assertIn("depth=5, limit=5", repr(e))
        e2 = pickle.loads(pickle.dumps(e))
        self.assertEqual((type(e2), e2.depth, e2.limit, e2.retry_after), (QueueFull, 5, 5, 1.0))
        # the whole batch refused
        self.stub.enqueue(429, body, {"Retry-After": "2"}, path="/v1/tasks/batch")
        with self.assertRaises(QueueFull) as cm:
            self.client.submit_batch([{"handler": "order.timeout"}])
        self.assertEqual((cm.exception.depth, cm.exception.limit, cm.exception.retry_after), (5, 5, 2.0))
        # one item refused
        results = {"results": [{"status": 429, "error": {"code": "queue_full", "message": "full", "depth": 7, "limit": 7}}]}
        self.stub.enqueue(200, json.dumps(results).encode(), path="/v1/tasks/batch")
        res = self.client.submit_batch([{"handler": "order.timeout"}])
        self.assertEqual((type(res.errors[0]), res.errors[0].depth, res.errors[0].limit), (QueueFull, 7, 7))

    def test_queue_full_without_depth(self):
        self.stub.enqueue_error(429, "queue_full", "full", method="POST")
        with self.assertRaises(QueueFull) as cm:
            self.client.submit("h")
        self.assertEqual((cm.exception.depth, cm.exception.limit, cm.exception.retry_after), (None, None, None))
        self.assertEqual((QueueFull("x").depth, QueueFull("x", depth=3, limit=4).limit), (None, 4))


class WaitTest(ClientTestCase):
    def finish_after(self, tid, gets, state="SUCCESS"):
        """Make task tid terminal once it has been read ``gets`` times."""
        seen = []

        def hook(req):
            if req.method == "GET" and req.path == "/v1/tasks/" + urllib.parse.quote(tid, safe=""):
                seen.append(req)
                if len(seen) == gets:
                    self.stub.tasks[tid].update(state=state, finished_at=NOW)

        self.stub.on_request = hook

    def test_returns_the_terminal_task(self):
        self.stub.put_task(id="order|42", state="RUNNING")
        self.finish_after("order|42", 3)
        task = self.client.wait("order|42")
        self.assertEqual((task.id, task.state, task.terminal), ("order|42", State.SUCCESS, True))
        self.assertEqual(self.stub.paths(), ["GET /v1/tasks/order%7C42"] * 3)
        self.assertEqual(self.sleeps, [0.1, 0.1])
        # already terminal: one read, no sleep
        self.assertEqual(self.client.wait("order|42", timeout=0).state, State.SUCCESS)
        self.assertEqual(len(self.sleeps), 2)
        for state in ("DEAD", "FAILED", "CANCELLED"):
            with self.subTest(state=state):
                self.stub.put_task(id=state.lower(), state=state)
                self.assertEqual(self.client.wait(state.lower(), poll=1).state, state)

    def test_times_out(self):
        # A fake clock that only sleeps move: the polls are counted
        # exactly, whatever the host's load.
        now = [100.0]
        slept = []

        def sleep(s):
            slept.append(s)
            now[0] += s

        self.client._sleep, self.client._monotonic = sleep, lambda: now[0]
        self.stub.put_task(id="later", state="WAITING", next_run_at=NOW)
        try:
            self.client.wait("later", timeout=0.2, poll=0.05)
        except TimeoutError as exc:
            e = exc
        else:
            self.fail("no TimeoutError")
        self.assertAlmostEqual(now[0] - 100.0, 0.2)
        self.assertTrue(all(0 < s <= 0.05 for s in slept), slept)
        self.assertEqual(str(e), "task 'later' is still WAITING after 0.2s")
        self.assertEqual((e.task.id, e.task.state), ("later", State.WAITING))
        # A read at 0, 0.05, 0.1, 0.15 and 0.2 s (the last one after the
        # deadline, or just before it by a rounding of the sums).
        self.assertIn(len(self.stub.requests), (5, 6))
        self.assertEqual(len(self.stub.requests), len(slept) + 1)
        self.assertEqual([f.name for f in traceback.extract_tb(e.__traceback__)], ["test_times_out", "wait"])

    def test_errors_and_arguments(self):
        with self.assertRaises(NotFound):
            self.client.wait("nope")
        for kw in (dict(poll=0), dict(poll=-1), dict(timeout=-1), dict(poll=True)):
            with self.subTest(kw=kw), self.assertRaises(ValueError):
                self.client.wait("x", **kw)
        self.assertEqual(self.stub.paths(), ["GET /v1/tasks/nope"])



class TaskCallsTest(ClientTestCase):
    def test_id_escaping_for_every_task_call(self):
        for tid, escaped in IDS.items():
            with self.subTest(id=tid):
                self.stub.put_task(id=tid, state="DEAD", attempts=1)
                self.assertEqual(self.client.get(tid).id, tid)
                self.assertEqual(self.client.retry(tid).state, State.WAITING)
                self.assertEqual(self.client.cancel(tid).state, State.CANCELLED)
                self.assertEqual(
                    self.stub.paths()[-3:],
                    [f"GET /v1/tasks/{escaped}", f"POST /v1/tasks/{escaped}/retry", f"DELETE /v1/tasks/{escaped}"],
                )

    def test_get_not_found(self):
        with self.assertRaises(NotFound) as cm:
            self.client.get("nope")
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "not_found"))
        with self.assertRaises(BadRequest):
            self.client.get("")

    def test_retry_of_a_waiting_task_conflicts(self):
        self.stub.put_task(id="w")
        with self.assertRaises(Conflict):
            self.client.retry("w")

    def test_retry_with_empty_answer_gets_the_task(self):
        self.stub.put_task(id="d", state="DEAD")
        self.stub.enqueue(204, method="POST", path="/v1/tasks/d/retry")
        self.assertEqual(self.client.retry("d").id, "d")
        self.assertEqual(self.stub.paths()[-1], "GET /v1/tasks/d")

    def test_heartbeat_and_result(self):
        self.stub.put_task(id="order|42", state="RUNNING", attempts=2)
        self.assertEqual(self.client.heartbeat("order|42", 2).state, State.RUNNING)
        req = self.stub.requests[-1]
        self.assertEqual((req.method, req.path, req.json()), ("POST", "/v1/tasks/order%7C42/heartbeat", {"attempt": 2}))
        with self.assertRaises(Conflict):
            self.client.heartbeat("order|42", 1)
        self.assertEqual(self.client.report_result("order|42", 2, "failed", error="db down \u00fc").state, State.WAITING)
        req = self.stub.requests[-1]
        self.assertEqual(req.path, "/v1/tasks/order%7C42/result")
        self.assertEqual(req.json(), {"attempt": 2, "status": "failed", "error": "db down \u00fc"})
        self.client.report_result("order|42", 2)
        self.assertEqual(self.stub.requests[-1].json(), {"attempt": 2, "status": "success"})
        self.stub.enqueue(204, method="POST")  # an answer without a body
        self.assertIsNone(self.client.report_result("order|42", 2))
        with self.assertRaises(BadRequest):
            self.client.report_result("order|42", 2, "done")
        with self.assertRaises(BadRequest):
            self.client.heartbeat("order|42", 0)

    def test_list_iterates_pages(self):
        for i in range(5):
            self.stub.put_task(id=f"t{i}", handler="a" if i != 2 else "b")
        self.assertEqual([t.id for t in self.client.list()], ["t0", "t1", "t2", "t3", "t4"])
        self.assertEqual(
            self.stub.paths()[-3:],
            ["GET /v1/tasks", "GET /v1/tasks?cursor=2", "GET /v1/tasks?cursor=4"],
        )
        self.assertEqual([t.id for t in self.client.list(handler="a", page_size=3)], ["t0", "t1", "t3", "t4"])
        self.assertEqual(self.stub.paths()[-2:], ["GET /v1/tasks?handler=a&limit=3", "GET /v1/tasks?handler=a&limit=3&cursor=3"])
        self.assertEqual([t.id for t in self.client.list(limit=3)], ["t0", "t1", "t2"])
        self.assertEqual(self.stub.paths()[-1], "GET /v1/tasks?limit=3")
        self.assertEqual(list(self.client.list(limit=0)), [])

    def test_list_filters_are_escaped(self):
        self.stub.put_task(id="x", handler="order timeout/&", state="DEAD")
        got = list(self.client.list(handler="order timeout/&", state=State.DEAD))
        self.assertEqual([t.id for t in got], ["x"])
        self.assertEqual(self.stub.paths()[-1], "GET /v1/tasks?handler=order%20timeout%2F%26&state=DEAD")

    def test_list_page(self):
        for i in range(3):
            self.stub.put_task(id=f"t{i}")
        page = self.client.list_page(limit=2)
        self.assertEqual(([t.id for t in page.tasks], page.next_cursor), (["t0", "t1"], "2"))
        page = self.client.list_page(limit=2, cursor=page.next_cursor)
        self.assertEqual(([t.id for t in page.tasks], page.next_cursor), (["t2"], None))

    def test_list_errors_surface_while_iterating(self):
        it = self.client.list()
        self.stub.enqueue_error(503, "not_ready", "catching up", method="GET", path="/v1/tasks")
        with self.assertRaises(NotReady):
            next(it)


class BatchTest(ClientTestCase):
    def test_batch(self):
        self.stub.put_task(id="taken", _spec={"handler": "other"})
        res = self.client.submit_batch(
            [
                {"handler": "h", "id": "b1", "payload": {"n": 1}, "delay": 5},
                SubmitRequest("h", id="taken"),
                SubmitRequest("h", payload_bytes=b"\x00"),
            ]
        )
        req = self.stub.requests[-1]
        self.assertEqual((req.method, req.path), ("POST", "/v1/tasks/batch"))
        self.assertEqual(req.json()["tasks"][0], {"id": "b1", "handler": "h", "delay": "5s", "payload": {"n": 1}})
        self.assertEqual(len(self.stub.requests), 1)
        self.assertFalse(res.ok)
        self.assertEqual(res.tasks[0].id, "b1")
        self.assertIsNone(res.tasks[1])
        self.assertIsInstance(res.errors[1], Conflict)
        self.assertEqual(res.errors[1].status, 409)
        self.assertEqual(res.tasks[2].payload, b"\x00")
        self.assertEqual(res.errors[0], None)

    def test_batch_results_with_other_errors(self):
        body = {"results": [
            {"status": 201, "task": {"id": "a", "handler": "h", "state": "WAITING"}},
            {"status": 429, "error": {"code": "queue_full", "message": "backlog full"}},
        ]}
        self.stub.enqueue(200, json.dumps(body).encode(), path="/v1/tasks/batch")
        res = self.client.submit_batch([{"handler": "h", "id": "a"}, {"handler": "h"}])
        self.assertEqual(res.tasks[0].id, "a")
        self.assertIsInstance(res.errors[1], QueueFull)
        self.assertEqual((res.errors[1].status, res.errors[1].message), (429, "backlog full"))
        self.stub.enqueue(200, json.dumps({"results": []}).encode(), path="/v1/tasks/batch")
        with self.assertRaises(AxError):
            self.client.submit_batch([{"handler": "h"}])

    def test_batch_answer_shape(self):
        # ipc's shape, 200 for an existing task with the same spec
        ok = {"id": "a", "handler": "h", "state": "WAITING", "created_at": NOW, "updated_at": NOW}
        body = {"results": [{"status": 200, "task": ok}, {"status": 400, "error": {"code": "bad_request", "message": "x"}}, {}]}
        self.stub.enqueue(200, json.dumps(body).encode(), path="/v1/tasks/batch")
        res = self.client.submit_batch([{"handler": "h", "id": "a"}, {"handler": "h"}, {"handler": "h"}])
        self.assertEqual(res.tasks[0].id, "a")
        self.assertIsInstance(res.errors[1], BadRequest)
        self.assertEqual((res.errors[1].status, res.errors[1].message), (400, "x"))
        self.assertIsNone(res.tasks[2])
        self.assertIn("neither task nor error", str(res.errors[2]))
        # anything else is not a batch answer
        for other in ({"tasks": [ok], "errors": []}, [], {"results": {}}):
            with self.subTest(answer=other):
                self.stub.enqueue(200, json.dumps(other).encode(), path="/v1/tasks/batch")
                with self.assertRaises(AxError) as cm:
                    self.client.submit_batch([{"handler": "h", "id": "a"}])
                self.assertIn("unexpected answer", str(cm.exception))

    def test_falls_back_to_one_submit_per_task(self):
        for status, code in ((404, "not_found"), (405, "method_not_allowed")):
            with self.subTest(status=status):
                client = Client(self.stub.path)
                self.addCleanup(client.close)
                self.stub.requests.clear()
                self.stub.enqueue_error(status, code, "no route", path="/v1/tasks/batch")
                self.stub.put_task(id="taken", _spec={"handler": "other"})
                res = client.submit_batch([{"handler": "h", "id": f"f{status}"}, {"handler": "h", "id": "taken"}])
                self.assertEqual(
                    self.stub.paths(), ["POST /v1/tasks/batch", "POST /v1/tasks", "POST /v1/tasks"]
                )
                self.assertEqual(res.tasks[0].id, f"f{status}")
                self.assertIsInstance(res.errors[1], Conflict)
                # remembered: the next batch goes straight to one by one
                client.submit_batch([{"handler": "h"}])
                self.assertEqual(self.stub.paths()[-1], "POST /v1/tasks")

    def test_invalid_item_sends_nothing(self):
        with self.assertRaises(BadRequest) as cm:
            self.client.submit_batch([{"handler": "h"}, {"handler": "h", "bogus": 1}])
        self.assertIn("item 1", str(cm.exception))
        with self.assertRaises(BadRequest) as cm:
            self.client.submit_batch([{"handler": "h"}, {"handler": ""}])
        self.assertIn("item 1", str(cm.exception))
        self.assertEqual(self.stub.requests, [])
        self.assertTrue(self.client.submit_batch([]).ok)

    def test_whole_batch_errors_raise(self):
        self.stub.enqueue_error(429, "queue_full", "backlog full", retry_after="3", path="/v1/tasks/batch")
        with self.assertRaises(QueueFull) as cm:
            self.client.submit_batch([{"handler": "h"}])
        self.assertEqual(cm.exception.retry_after, 3.0)

    def prefer(self, req):
        return [v for k, v in req.headers.items() if k.lower() == "prefer"]

    def test_minimal_sends_prefer_and_returns_ids_and_states(self):
        self.stub.put_task(id="running", state="RUNNING", _spec={"handler": "h"})  # the same spec: 200
        self.stub.put_task(id="taken", _spec={"handler": "other"})  # another spec: 409
        self.stub.backlog_warning = "850/1000"
        res = self.client.submit_batch(
            [
                {"handler": "h", "id": "new", "payload": {"n": 1}, "delay": 5},
                SubmitRequest("h", id="running"),
                SubmitRequest("h", id="taken"),
                {"handler": "h"},
            ],
            minimal=True,
        )
        req = self.stub.requests[-1]
        self.assertEqual((req.method, req.path), ("POST", "/v1/tasks/batch"))
        self.assertEqual(self.prefer(req), ["return=minimal"])
        self.assertEqual(len(self.stub.requests), 1)
        self.assertEqual(
            [(t.id, t.state) if t else None for t in res.tasks],
            [("new", State.WAITING), ("running", State.RUNNING), None, ("gen-1", State.WAITING)],
        )
        self.assertEqual([type(e) if e else None for e in res.errors], [None, None, Conflict, None])
        self.assertEqual(res.errors[2].status, 409)
        # only id and state came: the rest is at the defaults
        new = res.tasks[0]
        self.assertEqual(new.raw, {"id": "new", "state": "WAITING"})
        self.assertEqual((new.handler, new.payload, new.delay, new.created_at, new.next_run_at), ("", None, None, None, None))
        self.assertEqual(new.max_attempts, axsched.Task("x", "", State.WAITING).max_attempts)
        self.assertEqual([t.backlog_warning for t in res.tasks if t], ["850/1000"] * 3)
        # the task itself was stored in full
        self.assertEqual(self.client.get("new").payload, {"n": 1})

    def test_no_prefer_header_without_minimal(self):
        for kw in ({}, {"minimal": False}):
            with self.subTest(**kw):
                self.stub.requests.clear()
                res = self.client.submit_batch([{"handler": "h", "id": "full", "payload": {"n": 1}}], **kw)
                req = self.stub.requests[-1]
                self.assertEqual((req.method, req.path), ("POST", "/v1/tasks/batch"))
                self.assertEqual(self.prefer(req), [])
                task = res.tasks[0]
                self.assertEqual((task.id, task.handler, task.payload), ("full", "h", {"n": 1}))
                self.assertEqual(task, self.client.get("full"))

    def test_minimal_against_a_sidecar_that_ignores_it(self):
        self.stub.prefer_minimal_enabled = False  # older: full views, no Preference-Applied
        self.stub.put_task(id="taken", _spec={"handler": "other"})
        res = self.client.submit_batch(
            [{"handler": "h", "id": "old", "payload": {"n": 1}, "delay": 5}, SubmitRequest("h", id="taken")],
            minimal=True,
        )
        req = self.stub.requests[-1]
        self.assertEqual(self.prefer(req), ["return=minimal"])
        task = res.tasks[0]
        self.assertEqual((task.id, task.handler, task.state, task.payload), ("old", "h", State.WAITING, {"n": 1}))
        self.assertEqual(task.delay, timedelta(seconds=5))
        self.assertIsNotNone(task.created_at)
        self.assertEqual(task, self.client.get("old"))
        self.assertIsInstance(res.errors[1], Conflict)

    def test_minimal_falls_back_to_full_single_submits(self):
        self.stub.batch_enabled = False
        res = self.client.submit_batch([{"handler": "h", "id": "one", "payload": {"n": 1}}], minimal=True)
        self.assertEqual(self.stub.paths(), ["POST /v1/tasks/batch", "POST /v1/tasks"])
        self.assertEqual([self.prefer(r) for r in self.stub.requests], [["return=minimal"], []])
        self.assertEqual((res.tasks[0].handler, res.tasks[0].payload), ("h", {"n": 1}))
        self.assertEqual(res.tasks[0], self.client.get("one"))


class ExecutorCallsTest(ClientTestCase):
    def test_register_and_unregister(self):
        out = self.client.register_executor(
            "py-w:1.a_b", ["order.timeout", "*"], "unix:///abs/w.sock", max_concurrency=4, timeout=timedelta(seconds=20)
        )
        req = self.stub.requests[-1]
        self.assertEqual((req.method, req.path), ("POST", "/v1/executors"))
        want = {"name": "py-w:1.a_b", "handlers": ["order.timeout", "*"], "url": "unix:///abs/w.sock",
                "max_concurrency": 4, "timeout": "20s"}
        self.assertEqual(req.json(), want)
        self.assertEqual(out, want)
        self.assertEqual(self.client.executors(), [want])
        self.client.register_executor("m", ["order.*"], "unix:///abs/m.sock", min_concurrency=1)
        self.assertEqual(self.stub.requests[-1].json()["min_concurrency"], 1)
        self.client.unregister_executor("py-w:1.a_b")
        self.assertEqual(self.stub.paths()[-1], "DELETE /v1/executors/py-w%3A1.a_b")
        with self.assertRaises(NotFound):
            self.client.unregister_executor("py-w:1.a_b")
        with self.assertRaises(BadRequest):
            self.client.register_executor("x", "order.timeout", "unix:///a")

    def test_executor_names_the_sidecar_refuses_are_refused_before_sending(self):
        n = len(self.stub.requests)
        for name in ("", "py/w 1", "a b", ".", "..", "x" * 129, "caf\u00e9", None):
            with self.subTest(name=name):
                with self.assertRaises(BadRequest) as cm:
                    self.client.register_executor(name, ["h"], "unix:///a")
                self.assertIsNone(cm.exception.status)
                with self.assertRaises(BadRequest):
                    self.client.unregister_executor(name)
        self.assertEqual(len(self.stub.requests), n)
        self.client.register_executor("x" * 128, ["h"], "unix:///a")

    def test_register_on_a_sidecar_without_the_route(self):
        self.stub.executors_enabled = False
        with self.assertRaises(NotFound) as cm:
            self.client.register_executor("w", ["h"], "unix:///a")
        self.assertIn("no route", cm.exception.message)


class ClusterTest(ClientTestCase):
    def test_cluster(self):
        info = self.client.cluster()
        self.assertEqual((info.node_id, info.state, info.leader, info.term), ("n1", "Leader", "n1", 3))
        self.assertEqual(info.applied_index, 10)
        self.assertEqual(len(info.members), 1)
        m = info.members[0]
        self.assertEqual((m.id, m.raft_addr, m.peer_addr, m.suffrage, m.leader), ("n1", "127.0.0.1:7420", "127.0.0.1:7421", "Voter", True))
        # An older sidecar's answer: no health, autopilot or storage fields.
        self.assertEqual((info.storage, info.voters_target, info.failure_tolerance), (None, 0, None))
        self.assertEqual((m.reachable, m.last_contact_ms, m.applied_index, m.role, m.status, m.healthy, m.stable_since),
                         (None, None, 0, "", "", None, None))

    def test_cluster_health_and_storage(self):
        members = [
            {"id": "n1", "raft_addr": "10.0.0.1:7420", "suffrage": "Voter", "leader": True, "reachable": True,
             "last_contact_ms": 0, "applied_index": 12, "role": "leader", "status": "leader", "healthy": True,
             "stable_since": "2026-12-05T08:00:56.548Z"},
            {"id": "n2", "raft_addr": "10.0.0.2:7420", "suffrage": "Nonvoter", "leader": False, "reachable": False,
             "last_contact_ms": -1, "healthy": False},
        ]
        doc = {"node_id": "n1", "state": "Leader", "leader": "n1", "term": 2, "applied_index": 12, "commit_index": 12,
               "members": members, "voters_target": 3, "failure_tolerance": 0,
               "storage": {"cause": "data dir below its free-space reserve", "since": "2026-12-05T08:01:00Z"}}
        self.stub.enqueue(200, json.dumps(doc).encode(), {"Content-Type": "application/json"}, path="/v1/cluster")
        info = self.client.cluster()
        self.assertEqual((info.voters_target, info.failure_tolerance), (3, 0))
        self.assertEqual((info.state_index, info.lag(10)), (0, 2))  # an older sidecar: lag to the commit index
        self.assertEqual(info.storage, axsched.StorageStatus("data dir below its free-space reserve",
                                                             datetime(2026, 12, 5, 8, 1, tzinfo=timezone.utc)))
        n1, n2 = info.members
        self.assertEqual((n1.reachable, n1.last_contact_ms, n1.applied_index, n1.role, n1.status, n1.healthy),
                         (True, 0, 12, "leader", "leader", True))
        # A new leader's no-op and barrier at the log's end: committed, never
        # applied, no lag.
        self.stub.enqueue(200, json.dumps(dict(doc, commit_index=14, state_index=12)).encode(),
                          {"Content-Type": "application/json"}, path="/v1/cluster")
        later = self.client.cluster()
        self.assertEqual((later.commit_index, later.state_index, later.lag(12), later.lag(11), later.lag(13)), (14, 12, 0, 1, 0))
        self.assertEqual(n1.stable_since, datetime(2026, 12, 5, 8, 0, 56, 548000, tzinfo=timezone.utc))
        self.assertEqual((n2.reachable, n2.last_contact_ms, n2.applied_index, n2.role, n2.status, n2.healthy, n2.stable_since),
                         (False, -1, 0, "", "", False, None))
        # A malformed time is an AxError naming the field.
        members[0]["stable_since"] = "yesterday"
        self.stub.enqueue(200, json.dumps(doc).encode(), {"Content-Type": "application/json"}, path="/v1/cluster")
        with self.assertRaises(AxError) as cm:
            self.client.cluster()
        self.assertIn("stable_since", str(cm.exception))

    def test_ready_and_health(self):
        self.assertIsNone(self.client.ready())
        self.assertIsNone(self.client.health())
        self.stub.enqueue_error(503, "not_ready", "no leader known", retry_after="1", path="/readyz")
        with self.assertRaises(NotReady) as cm:
            self.client.ready()
        self.assertEqual((cm.exception.status, cm.exception.retry_after), (503, 1.0))
        self.stub.enqueue(503, b"starting", path="/readyz")  # no code: still NotReady
        with self.assertRaises(NotReady):
            self.client.ready()

    def test_wait_ready(self):
        self.stub.enqueue_error(503, "not_ready", "catching up", path="/readyz", times=2)
        self.client.wait_ready(timeout=5, interval=0.01)
        self.assertEqual(self.stub.paths().count("GET /readyz"), 3)
        self.assertEqual(self.sleeps, [0.01, 0.01])


class ErrorMappingTest(ClientTestCase):
    def test_each_code_maps_to_its_exception(self):
        for code, cls in axsched.ERROR_CODES.items():
            if code == "no_leader":
                continue  # retried; see NoLeaderTest
            status = cls.default_status
            with self.subTest(code=code):
                self.stub.enqueue_error(status, code, f"message of {code}", retry_after="7", path="/v1/tasks/x")
                with self.assertRaises(cls) as cm:
                    self.client.get("x")
                e = cm.exception
                self.assertIs(type(e), cls)
                self.assertEqual((e.status, e.code, e.message, e.retry_after), (status, code, f"message of {code}", 7.0))
                self.assertEqual(str(e), f"ax: message of {code} ({code}, http {status}, retry after 7s)")

    def test_queue_full_retry_after_and_no_retry(self):
        self.stub.enqueue_error(429, "queue_full", 'backlog of "h" is full', retry_after="2", method="POST")
        with self.assertRaises(QueueFull) as cm:
            self.client.submit("h")
        self.assertEqual(cm.exception.retry_after, 2.0)
        self.assertEqual(cm.exception.status, 429)
        self.assertEqual(str(cm.exception), 'ax: backlog of "h" is full (queue_full, http 429, retry after 2s)')
        self.assertEqual(len(self.stub.requests), 1)
        self.assertEqual(self.sleeps, [])

    def test_plain_text_and_unknown_codes(self):
        self.stub.enqueue(404, b"404 page not found\n", {"Content-Type": "text/plain"})
        with self.assertRaises(NotFound) as cm:
            self.client.get("x")
        self.assertEqual((cm.exception.code, cm.exception.message), (None, "404 page not found"))
        self.stub.enqueue(418, error_body("teapot", "short and stout"))
        with self.assertRaises(AxError) as cm:
            self.client.get("x")
        self.assertIs(type(cm.exception), AxError)
        self.assertEqual((cm.exception.status, cm.exception.code), (418, "teapot"))
        self.stub.enqueue(502, b"")
        with self.assertRaises(AxError) as cm:
            self.client.get("x")
        self.assertEqual(cm.exception.message, "bad gateway")

    def test_bad_answer(self):
        self.stub.enqueue(200, b"not json")
        with self.assertRaises(AxError) as cm:
            self.client.get("x")
        self.assertIn("cannot decode answer", str(cm.exception))

    def test_exceptions_pickle(self):
        import pickle

        e = pickle.loads(pickle.dumps(QueueFull("full", status=429, retry_after=2.0)))
        self.assertEqual((type(e), e.message, e.status, e.code, e.retry_after), (QueueFull, "full", 429, "queue_full", 2.0))


class NoLeaderTest(ClientTestCase):
    def test_retried_with_backoff_honouring_retry_after(self):
        self.stub.enqueue_error(503, "no_leader", "election", retry_after="0", method="POST", times=1)
        self.stub.enqueue_error(503, "no_leader", "election", retry_after="1", method="POST", times=1)
        task = self.client.submit("h", id="nl")
        self.assertEqual(task.id, "nl")
        self.assertEqual(self.stub.paths(), ["POST /v1/tasks"] * 3)
        self.assertEqual(self.sleeps, [0.1, 1.0])

    def test_gives_up_after_three_retries(self):
        self.stub.enqueue_error(503, "no_leader", "quorum lost", retry_after="1", times=10)
        with self.assertRaises(NoLeader) as cm:
            self.client.get("x")
        e = cm.exception
        self.assertEqual((e.status, e.code, e.message, e.retry_after), (503, "no_leader", "quorum lost", 1.0))
        self.assertEqual(len(self.stub.requests), 4)
        self.assertEqual(self.sleeps, [1.0, 1.0, 1.0])

    def test_long_retry_after_is_not_waited_for(self):
        self.stub.enqueue_error(503, "no_leader", "x", retry_after="60", times=10)
        with self.assertRaises(NoLeader):
            self.client.get("x")
        self.assertEqual((len(self.stub.requests), self.sleeps), (1, []))

    def test_storage_unavailable_is_raised_not_retried(self):
        self.stub.enqueue_error(503, "storage_unavailable", "disk full", retry_after="5", method="POST", times=10)
        with self.assertRaises(StorageUnavailable) as cm:
            self.client.submit("h", id="s")
        e = cm.exception
        self.assertEqual((e.status, e.code, e.message, e.retry_after), (503, "storage_unavailable", "disk full", 5.0))
        self.assertEqual((len(self.stub.requests), self.sleeps), (1, []))

    def test_not_ready_is_not_retried(self):
        self.stub.enqueue_error(503, "not_ready", "x", retry_after="1", times=10)
        with self.assertRaises(NotReady):
            self.client.get("x")
        self.assertEqual(len(self.stub.requests), 1)


class UnavailableTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="axtest-")
        self.addCleanup(lambda: __import__("shutil").rmtree(self.dir, ignore_errors=True))

    def listening(self, name):
        """A Unix socket at name in the test's dir that listens and never
        accepts unless the test does; its path and socket."""
        path = os.path.join(self.dir, name)
        s = socket.socket(socket.AF_UNIX)
        s.bind(path)
        s.listen(1)
        self.addCleanup(s.close)
        return path, s

    def test_missing_socket(self):
        path = os.path.join(self.dir, "ax.sock")
        client = Client(path)
        try:
            client.submit("h", {"a": 1})
        except Unavailable as exc:  # not assertRaises: it drops the traceback
            e = exc
        else:
            self.fail("no Unavailable")
        self.assertEqual(str(e), f"ax: cannot reach sidecar at {path}: [Errno 2] No such file or directory")
        self.assertEqual((e.socket_path, e.errno, e.request_sent, e.status, e.code), (path, 2, False, None, None))
        self.assertIsInstance(e.cause, FileNotFoundError)
        # The traceback shows our one line, not http.client's internals:
        # the test's frame, then one line named after the client method.
        text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        self.assertNotIn("During handling", text)
        self.assertNotIn("http/client.py", text)
        frames = traceback.extract_tb(e.__traceback__)
        self.assertEqual([f.name for f in frames], ["test_missing_socket", "submit"], text)
        self.assertEqual(frames[1].line, "raise error")
        self.assertTrue(text.rstrip().endswith(f"axsched.Unavailable: {e}"), text)

    def test_default_relative_socket_in_message(self):
        old = os.getcwd()
        os.chdir(self.dir)
        self.addCleanup(os.chdir, old)
        with mock.patch.dict(os.environ, {}, clear=True):
            with self.assertRaises(Unavailable) as cm:
                Client().get("x")
        self.assertEqual(str(cm.exception), "ax: cannot reach sidecar at ./ax.sock: [Errno 2] No such file or directory")

    def test_nobody_listening(self):
        path = os.path.join(self.dir, "dead.sock")
        s = socket.socket(socket.AF_UNIX)
        s.bind(path)
        s.close()  # the file stays, nobody listens
        with self.assertRaises(Unavailable) as cm:
            Client(path).get("x")
        self.assertEqual(str(cm.exception), f"ax: cannot reach sidecar at {path}: [Errno 111] Connection refused")

    def test_no_answer_within_timeout(self):
        path, _ = self.listening("mute.sock")
        with self.assertRaises(Unavailable) as cm:
            Client(path, timeout=0.05).get("x")
        self.assertEqual(str(cm.exception), f"ax: no answer from sidecar at {path} within 0.05s")
        self.assertTrue(cm.exception.request_sent)

    def test_connection_closed_without_answer(self):
        path, s = self.listening("rude.sock")

        def rude():
            c, _ = s.accept()
            c.recv(65536)
            c.close()

        t = threading.Thread(target=rude)
        t.start()
        with self.assertRaises(Unavailable) as cm:
            Client(path).submit("h")
        t.join()
        # "the sidecar closed the connection without answering", or a broken
        # pipe when it closed while the request was still being sent.
        self.assertTrue(str(cm.exception).startswith(f"ax: lost connection to sidecar at {path}: "), str(cm.exception))
        self.assertTrue(cm.exception.request_sent)

    def test_early_answer_to_an_oversized_body(self):
        # The sidecar answers 413 after the headers and closes without
        # reading the body: the client's write fails, the answer is read.
        path, s = self.listening("small.sock")

        def refuse():
            c, _ = s.accept()
            head = b""
            while b"\r\n\r\n" not in head:
                head += c.recv(4096)
            body = b'{"error":{"code":"payload_too_large","message":"request body over 1468006 bytes"}}'
            c.sendall(b"HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: "
                      + str(len(body)).encode() + b"\r\n\r\n" + body)
            c.close()

        t = threading.Thread(target=refuse, daemon=True)
        t.start()
        with self.assertRaises(PayloadTooLarge) as cm:
            Client(path).submit("h", payload="x" * (4 << 20))
        t.join()
        self.assertEqual(cm.exception.code, "payload_too_large")
        self.assertEqual(cm.exception.status, 413)

    def capture_logs(self):
        """Records of the "axsched" logger at INFO and above, until cleanup."""
        records = []
        logger = logging.getLogger("axsched")
        handler = logging.Handler(logging.INFO)
        handler.emit = records.append
        old_level = logger.level
        logger.setLevel(logging.INFO)
        logger.addHandler(handler)
        self.addCleanup(logger.setLevel, old_level)
        self.addCleanup(logger.removeHandler, handler)
        return records

    def test_wait_ready_logs_once_while_the_socket_is_missing(self):
        path = os.path.join(self.dir, "ax.sock")
        records = self.capture_logs()
        with self.assertRaises(Unavailable) as cm:
            Client(path).wait_ready(timeout=0.3, interval=0.02)
        self.assertEqual(cm.exception.errno, 2)
        self.assertEqual(len(records), 1, [r.getMessage() for r in records])
        r = records[0]
        self.assertEqual((r.name, r.levelno), ("axsched", logging.INFO))
        self.assertEqual(r.getMessage(), f"waiting up to 0.3s for the sidecar: its socket {path} does not exist yet")

    def test_wait_ready_until_the_socket_appears(self):
        path = os.path.join(self.dir, "ax.sock")
        records = self.capture_logs()
        stub = StubSidecar(path)
        self.addCleanup(stub.stop)
        timer = threading.Timer(0.2, stub.start)
        timer.start()
        self.addCleanup(timer.join)
        start = time.monotonic()
        with Client(path) as client:
            client.wait_ready(timeout=10, interval=0.02)
        self.assertGreaterEqual(time.monotonic() - start, 0.15)
        self.assertEqual(len(records), 1)
        self.assertIn(path, records[0].getMessage())

    def test_wait_ready_does_not_log_when_the_socket_exists(self):
        records = self.capture_logs()
        with StubSidecar() as stub:
            stub.enqueue_error(503, "not_ready", "catching up", path="/readyz", times=2)
            with Client(stub.path) as client:
                client.wait_ready(timeout=5, interval=0.01)
        path = os.path.join(self.dir, "dead.sock")  # a stale socket: refused, not missing
        s = socket.socket(socket.AF_UNIX)
        s.bind(path)
        s.close()
        with self.assertRaises(Unavailable):
            Client(path).wait_ready(timeout=0.1, interval=0.02)
        self.assertEqual(records, [])


class TracebackTest(ClientTestCase):
    """An uncaught error shows the caller's line and one line of the client,
    named after the method, whatever the depth of the failure."""

    def frames(self, call):
        try:
            call()
        except AxError as exc:  # not assertRaises: it drops the traceback
            e = exc
        else:
            self.fail("no AxError")
        text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        frames = traceback.extract_tb(e.__traceback__)
        # this test's frames (frames(), the lambda), then one of the client
        self.assertEqual([f.filename for f in frames], [__file__, __file__, axsched.client.__file__], text)
        self.assertEqual(frames[-1].line, "raise error")
        self.assertNotIn("in _", text)  # no private method of the client
        return frames[-1].name, e

    def test_sidecar_errors(self):
        self.assertEqual(self.frames(lambda: self.client.get("nope"))[0], "get")
        self.stub.enqueue_error(429, "queue_full", "full", retry_after="1", method="POST")
        self.assertEqual(self.frames(lambda: self.client.submit("h"))[0], "submit")
        self.stub.enqueue_error(503, "not_ready", "x", path="/v1/tasks/batch")
        self.assertEqual(self.frames(lambda: self.client.submit_batch([{"handler": "h"}]))[0], "submit_batch")
        self.assertEqual(self.frames(lambda: self.client.wait("nope"))[0], "wait")
        self.stub.enqueue_error(503, "not_ready", "x", path="/readyz", times=100)
        self.client._sleep = time.sleep
        self.assertEqual(self.frames(lambda: self.client.wait_ready(timeout=0.05, interval=0.01))[0], "wait_ready")

    def test_client_side_errors(self):
        name, e = self.frames(lambda: self.client.submit("h", every=0.5))
        self.assertEqual((name, type(e)), ("submit", BadRequest))

    def test_errors_while_listing(self):
        self.stub.enqueue_error(503, "not_ready", "catching up", path="/v1/tasks")
        self.assertEqual(self.frames(lambda: list(self.client.list()))[0], "list")

    def test_methods_keep_their_names_and_signatures(self):
        for name in ("submit", "submit_batch", "get", "cancel", "retry", "list_page", "wait", "wait_ready", "ready"):
            with self.subTest(method=name):
                fn = getattr(Client, name)
                self.assertEqual((fn.__name__, fn.__qualname__, fn.__code__.co_name), (name, f"Client.{name}", name))
                self.assertTrue(fn.__doc__)
        self.assertIn("every", inspect.signature(Client.submit).parameters)
        self.assertEqual(list(inspect.signature(Client.wait).parameters), ["self", "id", "timeout", "poll"])


class ConnectionReuseTest(unittest.TestCase):
    def test_keep_alive_and_sidecar_restart(self):
        stub = StubSidecar().start()
        self.addCleanup(stub.stop)
        client = Client(stub.path)
        self.addCleanup(client.close)
        stub.put_task(id="a")
        accepted = []
        stub.on_request = lambda r: accepted.append(threading.get_ident())
        client.get("a")
        client.get("a")
        self.assertEqual(len(set(accepted)), 1, "the second call should reuse the connection")
        # The sidecar restarts: the idle connection is dead; calls still work.
        stub.stop(remove_dir=False)
        stub2 = StubSidecar(stub.path).start()
        self.addCleanup(stub2.stop)
        stub2.put_task(id="a")
        self.assertEqual(client.get("a").id, "a")
        stub2.put_task(id="b")
        stub.stop(remove_dir=False)
        self.assertEqual(client.submit("h", id="c").id, "c")

    def test_threads_share_a_client(self):
        with StubSidecar() as stub:
            client = Client(stub.path)
            errors = []

            def work(n):
                try:
                    for i in range(20):
                        client.submit("h", {"n": n}, id=f"{n}-{i}")
                except Exception as e:  # pragma: no cover
                    errors.append(e)

            threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            client.close()
            self.assertEqual(errors, [])
            self.assertEqual(len(stub.tasks), 160)


if __name__ == "__main__":
    unittest.main()
