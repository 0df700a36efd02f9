"""A stub ax sidecar for the tests: the socket API over HTTP/1.1 on a Unix
socket in a temporary directory, served from a thread, with an in-memory
task store. Tests can queue canned answers (``stub.enqueue``) and read every
request received (``stub.requests``)."""

from __future__ import annotations

import base64
import http.server
import json
import os
import shutil
import socket
import socketserver
import tempfile
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

NOW = "2026-01-02T15:04:05.123Z"
BACKOFF_DEFAULT = {"initial": "2s", "max": "30s", "multiplier": 2, "jitter": 0.2}


@dataclass
class Recorded:
    method: str
    path: str  # raw, as sent (still escaped)
    headers: Dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))


@dataclass
class Canned:
    status: int
    body: bytes
    headers: Dict[str, str]
    method: Optional[str]
    path: Optional[str]  # matched against the raw path without query
    times: int


def prefers_minimal(headers: Dict[str, str]) -> bool:
    """Whether a request's ``Prefer`` header (RFC 7240: comma-separated
    preferences, each with optional ``;`` parameters) asks for
    ``return=minimal``."""
    prefer = next((v for k, v in headers.items() if k.lower() == "prefer"), "")
    for pref in prefer.split(","):
        name, _, value = pref.split(";")[0].partition("=")
        if name.strip().lower() == "return" and value.strip().strip('"').lower() == "minimal":
            return True
    return False


def error_body(code: str, message: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": message}}).encode()


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, path: str, handler: type) -> None:
        self.conns: List[socket.socket] = []
        self.conns_lock = threading.Lock()
        super().__init__(path, handler)

    def get_request(self) -> Tuple[socket.socket, Any]:
        conn, addr = super().get_request()
        with self.conns_lock:
            self.conns.append(conn)
        return conn, addr


class StubSidecar:
    """Start with ``start()`` (or ``with StubSidecar() as stub``)."""

    def __init__(self, path: Optional[str] = None) -> None:
        self._own_dir = None
        if path is None:
            self._own_dir = tempfile.mkdtemp(prefix="axstub-")
            path = os.path.join(self._own_dir, "ax.sock")
        self.path = path
        self.requests: List[Recorded] = []
        self.tasks: Dict[str, Dict[str, Any]] = {}
        self.order: List[str] = []
        self.executors: Dict[str, Dict[str, Any]] = {}
        self.batch_enabled = True
        # Honour "Prefer: return=minimal" on POST /v1/tasks/batch (False:
        # a sidecar older than the preference, which ignores it).
        self.prefer_minimal_enabled = True
        self.executors_enabled = True
        # Sent as Ax-Backlog-Warning with every successful submit when set.
        self.backlog_warning: Optional[str] = None
        self.canned: List[Canned] = []
        self.lock = threading.Lock()
        self.on_request: Optional[Callable[[Recorded], None]] = None
        self._server: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None
        self._next_id = 0

    # lifecycle
    def start(self) -> "StubSidecar":
        stub = self

        class Handler(_Handler):
            sidecar = stub

        self._server = _Server(self.path, Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self._thread.start()
        return self

    def stop(self, remove_dir: bool = True) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            with self._server.conns_lock:
                for c in self._server.conns:
                    try:
                        c.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    c.close()
            self._server = None
        if os.path.exists(self.path):
            os.unlink(self.path)
        if remove_dir and self._own_dir:
            shutil.rmtree(self._own_dir, ignore_errors=True)

    def __enter__(self) -> "StubSidecar":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # test helpers
    def enqueue(
        self,
        status: int,
        body: bytes = b"",
        headers: Optional[Dict[str, str]] = None,
        *,
        method: Optional[str] = None,
        path: Optional[str] = None,
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` matching requests with this."""
        with self.lock:
            self.canned.append(Canned(status, body, dict(headers or {}), method, path, times))

    def enqueue_error(self, status: int, code: str, message: str = "boom", retry_after: Optional[str] = None, **kw: Any) -> None:
        headers = {"Content-Type": "application/json"}
        if retry_after is not None:
            headers["Retry-After"] = retry_after
        self.enqueue(status, error_body(code, message), headers, **kw)

    def paths(self) -> List[str]:
        return [f"{r.method} {r.path}" for r in self.requests]

    def put_task(self, **fields: Any) -> Dict[str, Any]:
        t = {
            "id": fields.pop("id"),
            "handler": fields.pop("handler", "h"),
            "state": "WAITING",
            "priority": 2,
            "attempts": 0,
            "max_attempts": 4,
            "timeout": "30s",
            "created_at": NOW,
            "updated_at": NOW,
        }
        t.update(fields)
        with self.lock:
            if t["id"] not in self.tasks:
                self.order.append(t["id"])
            self.tasks[t["id"]] = t
        return t

    # the API
    def answer(self, req: Recorded) -> Tuple[int, Dict[str, str], bytes]:
        split = urllib.parse.urlsplit(req.path)
        raw_path = split.path
        with self.lock:
            for c in self.canned:
                if (c.method is None or c.method == req.method) and (c.path is None or c.path == raw_path):
                    c.times -= 1
                    if c.times <= 0:
                        self.canned.remove(c)
                    return c.status, c.headers, c.body
        query = dict(urllib.parse.parse_qsl(split.query))
        m = req.method
        segs = raw_path.split("/")
        if raw_path == "/healthz" and m == "GET":
            return self.ok({"status": "ok"})
        if raw_path == "/readyz" and m == "GET":
            return self.ok({"status": "ready"})
        if raw_path == "/v1/cluster" and m == "GET":
            return self.ok({
                "node_id": "n1", "state": "Leader", "leader": "n1", "term": 3,
                "applied_index": 10, "commit_index": 10,
                "members": [{"id": "n1", "raft_addr": "127.0.0.1:7420", "peer_addr": "127.0.0.1:7421",
                             "suffrage": "Voter", "leader": True}],
            })
        if raw_path == "/v1/tasks" and m == "POST":
            return self.with_warning(self.submit(req.json()))
        if raw_path == "/v1/tasks" and m == "GET":
            return self.list(query)
        if raw_path == "/v1/tasks/batch" and m == "POST" and self.batch_enabled:
            # the shape of ipc's submitBatch: one result per task, in order
            minimal = self.prefer_minimal_enabled and prefers_minimal(req.headers)
            results = []
            for body in req.json()["tasks"]:
                status, _, data = self.submit(body)
                doc = json.loads(data)
                if minimal and status < 300:
                    doc = {"id": doc["id"], "state": doc["state"]}
                results.append({"status": status, **({"error": doc["error"]} if status >= 300 else {"task": doc})})
            status, headers, data = self.with_warning(self.ok({"results": results}))
            if minimal:
                headers = {**headers, "Preference-Applied": "return=minimal"}
            return status, headers, data
        if raw_path == "/v1/executors" and m == "GET" and self.executors_enabled:
            return self.ok({"executors": list(self.executors.values())})
        if raw_path == "/v1/executors" and m == "POST" and self.executors_enabled:
            doc = req.json()
            self.executors[doc["name"]] = doc
            return self.ok(doc, 201)
        if len(segs) == 4 and segs[:3] == ["", "v1", "executors"] and m == "DELETE" and self.executors_enabled:
            name = urllib.parse.unquote(segs[3])
            if self.executors.pop(name, None) is None:
                return self.err(404, "not_found", f"executor {name!r}: not found")
            return 204, {}, b""
        if len(segs) in (4, 5) and segs[:3] == ["", "v1", "tasks"] and segs[3]:
            tid = urllib.parse.unquote(segs[3], errors="strict")
            t = self.tasks.get(tid)
            if t is None:
                return self.err(404, "not_found", f"task {tid!r}: not found")
            if len(segs) == 4 and m == "GET":
                return self.ok(t)
            if len(segs) == 4 and m == "DELETE":
                if t["state"] in ("WAITING", "RUNNING"):
                    t["state"] = "CANCELLED"
                    t["finished_at"] = NOW
                    t.pop("next_run_at", None)
                return self.ok(t)
            if len(segs) == 5 and m == "POST":
                action = segs[4]
                if action == "retry":
                    if t["state"] not in ("DEAD", "FAILED"):
                        return self.err(409, "conflict", f"task {tid!r} is {t['state']}, not DEAD or FAILED")
                    t.update(state="WAITING", attempts=0, next_run_at=NOW)
                    t.pop("finished_at", None)
                    return self.ok(t)
                if action in ("heartbeat", "result"):
                    doc = req.json()
                    if doc.get("attempt") != t.get("attempts"):
                        return self.err(409, "conflict", f"attempt {doc.get('attempt')} is stale")
                    if action == "result":
                        t["state"] = {"success": "SUCCESS", "failed": "WAITING", "permanent": "FAILED"}[doc["status"]]
                        if doc.get("error"):
                            t["last_error"] = doc["error"]
                    return self.ok(t)
        if segs[:3] == ["", "v1", "tasks"] and len(segs) == 4 and m not in ("GET", "DELETE", "HEAD"):
            return self.err(405, "method_not_allowed", f"method {m} not allowed on {raw_path}")
        return self.err(404, "not_found", f"no route for {m} {raw_path}")

    def submit(self, doc: Dict[str, Any]) -> Tuple[int, Dict[str, str], bytes]:
        if not doc.get("handler"):
            return self.err(400, "bad_request", "handler: required")
        tid = doc.get("id")
        if not tid:
            with self.lock:
                self._next_id += 1
                tid = f"gen-{self._next_id}"
        spec = {k: v for k, v in doc.items() if k not in ("id", "overwrite")}
        existing = self.tasks.get(tid)
        if existing is not None and not doc.get("overwrite"):
            if existing["_spec"] == spec:
                return self.ok(self.view(existing), 200)
            return self.err(409, "conflict", f"task {tid!r} exists with another spec")
        t = self.put_task(
            id=tid, handler=doc["handler"], priority=doc.get("priority", 2),
            max_attempts=doc.get("max_attempts", 4), timeout=doc.get("timeout", "30s"),
            next_run_at=NOW, _spec=spec,
        )
        for k in ("delay", "run_at", "payload", "payload_base64", "cron", "timezone", "every", "repeats", "until",
                  "route_key", "labels", "traceparent", "tracestate"):
            if k in doc:
                t[k] = doc[k]
        if "backoff" in doc:  # the view has every field, the defaults filled in
            t["backoff"] = {**BACKOFF_DEFAULT, **doc["backoff"]}
        t.update(run=1, snoozes=0)
        return self.ok(self.view(t), 201)

    def with_warning(self, answer: Tuple[int, Dict[str, str], bytes]) -> Tuple[int, Dict[str, str], bytes]:
        status, headers, body = answer
        if self.backlog_warning is not None and status < 300:
            headers = {**headers, "Ax-Backlog-Warning": self.backlog_warning}
        return status, headers, body

    def list(self, query: Dict[str, str]) -> Tuple[int, Dict[str, str], bytes]:
        ids = [i for i in self.order if i in self.tasks]
        items = [self.tasks[i] for i in ids]
        if "handler" in query:
            items = [t for t in items if t["handler"] == query["handler"]]
        if "state" in query:
            items = [t for t in items if t["state"] == query["state"]]
        start = int(query.get("cursor", "0") or 0)
        limit = int(query.get("limit", "2"))
        page = items[start : start + limit]
        nxt = str(start + limit) if start + limit < len(items) else ""
        return self.ok({"tasks": [self.view(t) for t in page], "next_cursor": nxt})

    @staticmethod
    def view(t: Dict[str, Any]) -> Dict[str, Any]:
        return {k: v for k, v in t.items() if not k.startswith("_")}

    @staticmethod
    def ok(doc: Any, status: int = 200) -> Tuple[int, Dict[str, str], bytes]:
        if isinstance(doc, dict):
            doc = StubSidecar.view(doc)
        return status, {"Content-Type": "application/json"}, json.dumps(doc, ensure_ascii=False).encode("utf-8")

    @staticmethod
    def err(status: int, code: str, message: str, retry_after: Optional[str] = None) -> Tuple[int, Dict[str, str], bytes]:
        headers = {"Content-Type": "application/json"}
        if retry_after:
            headers["Retry-After"] = retry_after
        return status, headers, error_body(code, message)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    sidecar: StubSidecar

    def address_string(self) -> str:
        return "unix"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _serve(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        req = Recorded(self.command, self.path, {k: v for k, v in self.headers.items()}, body)
        stub = self.sidecar
        with stub.lock:
            stub.requests.append(req)
        if stub.on_request is not None:
            stub.on_request(req)
        status, headers, data = stub.answer(req)
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data:
            self.wfile.write(data)

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _serve


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
