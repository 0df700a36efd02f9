"""The Python side of the polyglot e2e test (e2e/polyglot_test.go), written
against the axsched package as an application would use it. Run with
PYTHONPATH=clients/python.

    polyglot.py app --socket S
        A Python application that schedules and inspects tasks: it reads one
        JSON request per line on stdin ({"op": "submit"|"get"|"cancel"|
        "retry", ...}) and answers one JSON line on stdout, with the task as
        a normalized view (times and durations in microseconds) or the
        error (its class, the one-line message, status and retry_after).
        A request may name another "socket" than the default.

    polyglot.py worker --socket S --listen L --name N --heal-file F
        A Python executor: an axsched.Worker that registers itself with
        the sidecar at S and runs "poly.py.ok" (succeeds) and
        "poly.py.flaky" (raises, so 500 and a retry, until the file F
        exists). It prints one JSON line per delivery on stdout, and
        {"event": "ready"} once registered; SIGTERM stops it cleanly.
"""

import argparse
import base64
import json
import logging
import os
import sys
import threading
from datetime import datetime, timedelta, timezone

import axsched

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
US = timedelta(microseconds=1)

_out_lock = threading.Lock()


def emit(doc):
    line = json.dumps(doc, ensure_ascii=False)
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def micros(v):
    if v is None:
        return 0
    if isinstance(v, timedelta):
        return v // US
    return (v - EPOCH) // US


def view(t):
    payload = t.payload
    if isinstance(payload, bytes):
        payload = {"$base64": base64.b64encode(payload).decode()}
    return {
        "id": t.id,
        "handler": t.handler,
        "state": str(t.state),
        "priority": t.priority,
        "attempts": t.attempts,
        "max_attempts": t.max_attempts,
        "timeout_us": micros(t.timeout),
        "delay_us": micros(t.delay),
        "run_at_us": micros(t.run_at),
        "next_run_at_us": micros(t.next_run_at),
        "created_at_us": micros(t.created_at),
        "updated_at_us": micros(t.updated_at),
        "finished_at_us": micros(t.finished_at),
        "last_error": t.last_error or "",
        "node": t.node or "",
        "payload": payload,
    }


def error_doc(e):
    return {
        "type": type(e).__name__,
        "str": str(e),
        "status": e.status,
        "code": e.code,
        "retry_after": e.retry_after,
    }


def app(args):
    clients = {}

    def client(path):
        path = path or args.socket
        if path not in clients:
            clients[path] = axsched.Client(path, timeout=10)
        return clients[path]

    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        op = req["op"]
        c = client(req.get("socket"))
        try:
            if op == "submit":
                kw = dict(req["args"])
                handler = kw.pop("handler")
                payload = kw.pop("payload", None)
                t = c.submit(handler, payload, **kw)
            elif op == "get":
                t = c.get(req["id"])
            elif op == "cancel":
                t = c.cancel(req["id"])
            elif op == "retry":
                t = c.retry(req["id"])
            else:
                raise ValueError(f"unknown op {op!r}")
        except axsched.AxError as e:
            emit({"ok": False, "error": error_doc(e)})
            continue
        emit({"ok": True, "task": view(t)})


def worker(args):
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    w = axsched.Worker(socket_path=args.socket, listen=args.listen, name=args.name, max_threads=4)

    def record(d):
        emit({
            "event": "delivery",
            "task_id": d.task_id,
            "handler": d.handler,
            "attempt": d.attempt,
            "run": d.run,
            "has_deadline": d.deadline is not None,
            "payload": base64.b64encode(d.payload).decode(),
        })

    @w.handler("poly.py.ok")
    def ok(d: axsched.Delivery) -> None:
        record(d)

    @w.handler("poly.py.flaky")
    def flaky(d: axsched.Delivery) -> None:
        record(d)
        if not os.path.exists(args.heal_file):
            raise RuntimeError(f"flaky: not healed yet (attempt {d.attempt})")

    def announce():
        while not w.registered:
            if stopped.wait(0.01):
                return
        emit({"event": "ready", "name": w.name, "url": w.url})

    stopped = threading.Event()
    w.client.wait_ready(timeout=30)
    threading.Thread(target=announce, daemon=True).start()
    try:
        w.run()  # start, register, serve until SIGTERM, then stop cleanly
    finally:
        stopped.set()
    emit({"event": "stopped"})


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="mode", required=True)
    a = sub.add_parser("app")
    a.add_argument("--socket", required=True)
    wk = sub.add_parser("worker")
    wk.add_argument("--socket", required=True)
    wk.add_argument("--listen", required=True)
    wk.add_argument("--name", required=True)
    wk.add_argument("--heal-file", required=True)
    args = p.parse_args()
    app(args) if args.mode == "app" else worker(args)


if __name__ == "__main__":
    main()
