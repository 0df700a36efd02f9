"""The executor side: a :class:`Worker` serves the sidecar's callbacks
(``POST /ax/v1/execute``) on a Unix socket and runs your handlers."""

from __future__ import annotations

import concurrent.futures
import errno
import hashlib
import http.server
import json
import logging
import math
import os
import re
import selectors
import signal
import socket
import socketserver
import stat
import threading
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, TypeVar, Union

from ._wire import decode_header_value, parse_time
from .client import RESULT_SUCCESS, Client, executor_name_problem
from .errors import AxError, MethodNotAllowed, NotFound, Unavailable

__all__ = [
    "EXECUTE_PATH",
    "HEADER_TASK_ID",
    "HEADER_HANDLER",
    "HEADER_ATTEMPT",
    "HEADER_RUN",
    "HEADER_DEADLINE",
    "HEADER_SHARD_INDEX",
    "HEADER_SHARD_TOTAL",
    "SHARDS_PATH",
    "FALLBACK_HANDLER",
    "Delivery",
    "Snooze",
    "Permanent",
    "Async",
    "Worker",
]

log = logging.getLogger("axsched.worker")

#: The path the sidecar posts callbacks to, on the executor's base URL.
EXECUTE_PATH = "/ax/v1/execute"
#: Callback headers set by the sidecar.
HEADER_TASK_ID = "Ax-Task-Id"
HEADER_HANDLER = "Ax-Handler"
HEADER_ATTEMPT = "Ax-Attempt"
HEADER_RUN = "Ax-Run"
HEADER_DEADLINE = "Ax-Deadline"
#: On a sharded task's callbacks: the shard's index within its run (from 0)
#: and the number of shards of the run.
HEADER_SHARD_INDEX = "Ax-Shard-Index"
HEADER_SHARD_TOTAL = "Ax-Shard-Total"
#: The path, on the executor's base URL, where the sidecar asks how many
#: shards a run of a task with ``"shards": {"ask": true}`` gets (see
#: ``Worker.handle(..., shard_count=fn)``).
SHARDS_PATH = "/ax/v1/shards"
#: W3C Trace Context headers of a callback.
HEADER_TRACEPARENT = "traceparent"
HEADER_TRACESTATE = "tracestate"
#: The handler name that receives deliveries of every handler registered
#: under no other name.
FALLBACK_HANDLER = "*"

_BODY_MAX_BYTES = 16 << 20  # the sidecar sends at most a 1 MiB payload
_REGISTER_BACKOFF_MAX = 10.0  # seconds between registration attempts, at most


class Snooze(Exception):
    """Raise (or return) ``Snooze(seconds)`` from a handler when the worker
    is busy or a resource it needs is temporarily missing: the worker
    answers 503 with ``Retry-After`` set to ``seconds`` rounded up to whole
    seconds (at least 1). The attempt is delivered again later and is not
    counted as a failed attempt.

    Args:
        seconds: how long to wait, in seconds or as a timedelta. Defaults
            to 1.
    """

    def __init__(self, seconds: Union[float, timedelta] = 1.0) -> None:
        if isinstance(seconds, timedelta):
            seconds = seconds.total_seconds()
        self.seconds = float(seconds)
        super().__init__(f"snoozed for {self.seconds:g}s")

    @property
    def retry_after(self) -> int:
        """The Retry-After header sent: whole seconds, rounded up, >= 1."""
        return max(1, math.ceil(self.seconds)) if math.isfinite(self.seconds) else 1


class Permanent(Exception):
    """Raise (or return) ``Permanent("why")`` from a handler for a task that
    can never succeed (bad payload, the order no longer exists): the worker
    answers 422 and the sidecar marks the task FAILED without further
    attempts. The message is recorded as the task's last error."""

    def __init__(self, message: str = "permanent failure") -> None:
        self.message = str(message)
        super().__init__(self.message)


class Async(Exception):
    """Return (or raise) ``Async()`` from a handler that finishes the work
    later, elsewhere: the worker answers 202 and the attempt stays running
    until someone calls ``worker.client.report_result(task_id, attempt,
    ...)`` (or :meth:`Delivery.report`) before the attempt's deadline;
    :meth:`Delivery.heartbeat` extends the deadline."""

    def __init__(self, message: str = "will report later") -> None:
        super().__init__(message)


class Delivery:
    """One attempt of a task, delivered to a handler.

    Delivery is at least once: a node or network failure mid-attempt can
    deliver the same run again. ``task_id`` with ``run`` and ``attempt``
    (and ``shard_index``, for a sharded task) identifies an attempt, so
    handlers can de-duplicate.

    Attributes:
        task_id: the id of the task (any UTF-8 string).
        handler: the handler name the task was submitted with.
        attempt: numbers the attempts of this run, from 1.
        run: numbers the runs of the task, from 1.
        deadline: when the sidecar stops waiting for this attempt (aware,
            UTC), or ``None`` when it sent none. Past it, the sidecar drops
            the request and counts a timeout, but Python cannot stop the
            handler's thread: long handlers should watch
            :meth:`time_left` (or call :meth:`heartbeat`).
        payload: the payload, byte for byte (``b""`` without payload).
        traceparent: the callback's W3C ``traceparent``: the task's trace
            id and flags and a parent id of this attempt's own (the same
            when the attempt is delivered again); pass it on (to a tracer,
            or as ``Client.submit(traceparent=...)`` of follow-up tasks).
            ``None`` from a sidecar older than trace context.
        tracestate: the ``tracestate`` the task was submitted with, or
            ``None``.
        shard_index: for a task submitted with ``shards``, this callback's
            shard, from 0 to ``shard_total - 1`` (the ``Ax-Shard-Index``
            header); each shard of a run has its own attempts. ``None`` for
            a task without shards (and in a ``shard_count`` function).
        shard_total: the number of shards of the run (``Ax-Shard-Total``),
            or ``None``. A callback with only one of the two headers, or a
            value that is not an integer in range, is answered 400 (a
            permanent failure).
    """

    __slots__ = (
        "task_id", "handler", "attempt", "run", "deadline", "payload", "traceparent", "tracestate",
        "shard_index", "shard_total", "_client",
    )

    def __init__(
        self,
        task_id: str,
        handler: str,
        attempt: int,
        run: int,
        deadline: Optional[datetime],
        payload: bytes,
        client: Optional[Client] = None,
        traceparent: Optional[str] = None,
        tracestate: Optional[str] = None,
        shard_index: Optional[int] = None,
        shard_total: Optional[int] = None,
    ) -> None:
        self.task_id = task_id
        self.handler = handler
        self.attempt = attempt
        self.run = run
        self.deadline = deadline
        self.payload = payload
        self.traceparent = traceparent
        self.tracestate = tracestate
        self.shard_index = shard_index
        self.shard_total = shard_total
        self._client = client

    def __repr__(self) -> str:
        shard = "" if self.shard_total is None else f", shard={self.shard_index}/{self.shard_total}"
        return (
            f"Delivery(task_id={self.task_id!r}, handler={self.handler!r}, attempt={self.attempt}, "
            f"run={self.run}{shard}, deadline={self.deadline!r}, payload={len(self.payload)} bytes)"
        )

    @property
    def trace_id(self) -> Optional[str]:
        """The trace id of :attr:`traceparent` (32 hex digits), or
        ``None``: for log lines."""
        parts = (self.traceparent or "").split("-")
        if len(parts) < 4 or len(parts[1]) != 32:
            return None
        return parts[1]

    def json(self) -> Any:
        """The payload decoded as JSON (``None`` for an empty payload).
        Raises ``ValueError`` when it is not JSON; raise
        :class:`Permanent` from the handler in that case."""
        if not self.payload:
            return None
        return json.loads(self.payload.decode("utf-8"))

    def time_left(self) -> Optional[float]:
        """Seconds until the deadline (negative once past), or ``None``."""
        if self.deadline is None:
            return None
        return (self.deadline - datetime.now(timezone.utc)).total_seconds()

    @property
    def client(self) -> Client:
        """The client of the worker that received this delivery."""
        if self._client is None:
            raise RuntimeError("this Delivery has no client")
        return self._client

    def heartbeat(self) -> None:
        """Extend this attempt's deadline (``POST /v1/tasks/{id}/heartbeat``).
        Raises :class:`~axsched.Conflict` when the attempt is stale: stop
        working on it."""
        self.client.heartbeat(self.task_id, self.attempt)

    def report(self, status: str = RESULT_SUCCESS, error: Optional[str] = None, result: Any = None) -> None:
        """Report the outcome of this attempt after the handler returned
        :class:`Async`: ``"success"``, ``"failed"`` (retried) or
        ``"permanent"``; ``error`` is recorded as the task's last error;
        ``result`` (JSON-encodable, with success) is the run's result."""
        self.client.report_result(self.task_id, self.attempt, status, error, result=result)


Handler = Callable[[Delivery], Any]
#: ``shard_count(delivery) -> int``: see ``Worker.handle``.
ShardCount = Callable[[Delivery], int]
F = TypeVar("F", bound=Handler)


def _default_name(abs_listen: str) -> str:
    stem = os.path.splitext(os.path.basename(abs_listen))[0]
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-.")[:64] or "worker"
    return f"{stem}-{hashlib.sha1(abs_listen.encode('utf-8')).hexdigest()[:6]}"


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """A ThreadingMixIn server whose requests run on a bounded thread pool
    instead of one new thread each."""

    daemon_threads = True

    def __init__(self, path: str, handler_class: type, pool: concurrent.futures.ThreadPoolExecutor, backlog: int = 5) -> None:
        self.pool = pool
        # The listen(2) backlog (socketserver's default is 5): the sidecar
        # opens up to max_threads connections at once, and a connect that
        # finds the accept queue full fails with EAGAIN.
        self.request_queue_size = backlog
        self.inflight: Set[concurrent.futures.Future] = set()
        self.inflight_lock = threading.Lock()
        super().__init__(path, handler_class)

    def process_request(self, request: Any, client_address: Any) -> None:
        fut = self.pool.submit(self.process_request_thread, request, client_address)
        with self.inflight_lock:
            self.inflight.add(fut)
        fut.add_done_callback(self._done)

    def _done(self, fut: concurrent.futures.Future) -> None:
        with self.inflight_lock:
            self.inflight.discard(fut)


class _CallbackHandler(http.server.BaseHTTPRequestHandler):
    """Serves one callback. HTTP/1.0: one request per connection, so an idle
    keep-alive connection never holds a pool thread."""

    protocol_version = "HTTP/1.0"
    timeout = 60  # seconds per socket operation: a silent connection does not hold a thread forever
    server_version = "axsched-worker"
    sys_version = ""
    worker: "Worker"  # set on the subclass made by Worker.start

    def address_string(self) -> str:  # client_address is "" on a Unix socket
        return "unix"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("worker: " + format, *args)

    def _reply(self, status: int, text: Union[str, bytes], headers: Optional[Dict[str, str]] = None) -> None:
        # bytes are a result (JSON, sent as it is; empty: no result).
        ctype = "application/json" if isinstance(text, bytes) else "text/plain; charset=utf-8"
        body = text if isinstance(text, bytes) else (text + "\n").encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            log.debug("worker: the sidecar left before the answer (status %d)", status)

    def _reply_error(self, status: int, code: str, message: str, headers: Optional[Dict[str, str]] = None) -> None:
        # The error body of the shard-count answers: {"error": {"code", "message"}}.
        body = json.dumps({"error": {"code": code, "message": message}}, ensure_ascii=False) + "\n"
        self._reply(status, body.encode("utf-8"), headers)

    def _not_allowed(self) -> None:
        if self.path.split("?", 1)[0] == SHARDS_PATH:
            self._reply_error(405, "method_not_allowed", "method not allowed: use POST", {"Allow": "POST"})
            return
        self._reply(405, "method not allowed: use POST", {"Allow": "POST"})

    do_GET = do_HEAD = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == SHARDS_PATH:
            self._shards()
            return
        if path != EXECUTE_PATH:
            self._reply(404, f"no such path {path!r}; the sidecar calls {EXECUTE_PATH}")
            return
        try:
            d = self._delivery()
        except _BadCallback as e:
            self._reply(e.status, str(e))
            return
        status, text, headers = self.worker._dispatch(d)
        self._reply(status, text, headers)

    def _shards(self) -> None:
        """Answer a shard-count ask: 200 ``{"count": n}``, or an error body."""
        try:
            d = self._delivery()
        except _BadCallback as e:
            self._reply_error(e.status, "payload_too_large" if e.status == 413 else "bad_request", str(e))
            return
        status, code, message, count = self.worker._count_shards(d)
        if status == 200:
            self._reply(200, json.dumps({"count": count}).encode("utf-8"))
        else:
            self._reply_error(status, code, message)

    def _delivery(self) -> Delivery:
        h = self.headers
        task_id = decode_header_value(h.get(HEADER_TASK_ID))
        handler = decode_header_value(h.get(HEADER_HANDLER))
        if not task_id:
            raise _BadCallback(400, f"missing {HEADER_TASK_ID} header")
        if not handler:
            raise _BadCallback(400, f"missing {HEADER_HANDLER} header")
        attempt = _int_header(h.get(HEADER_ATTEMPT), HEADER_ATTEMPT)
        run = _int_header(h.get(HEADER_RUN), HEADER_RUN)
        deadline = None
        raw_deadline = h.get(HEADER_DEADLINE)
        if raw_deadline:
            try:
                deadline = parse_time(raw_deadline.strip())
            except ValueError:
                raise _BadCallback(400, f"bad {HEADER_DEADLINE} header {raw_deadline!r}: want RFC 3339") from None
        shard_index, shard_total = _shard_headers(h.get(HEADER_SHARD_INDEX), h.get(HEADER_SHARD_TOTAL))
        payload = self._body()
        traceparent = (h.get(HEADER_TRACEPARENT) or "").strip() or None
        states = [v.strip() for v in (h.get_all(HEADER_TRACESTATE) or []) if v.strip()]
        return Delivery(
            task_id, handler, attempt, run, deadline, payload, self.worker.client,
            traceparent=traceparent, tracestate=",".join(states) or None,
            shard_index=shard_index, shard_total=shard_total,
        )

    def _body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks: List[bytes] = []
            total = 0
            while True:
                line = self.rfile.readline(1024)
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise _BadCallback(400, "malformed chunked body") from None
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                total += size
                if total > _BODY_MAX_BYTES:
                    raise _BadCallback(413, f"payload over {_BODY_MAX_BYTES} bytes")
                chunks.append(self.rfile.read(size))
                self.rfile.readline(1024)
        length = self.headers.get("Content-Length")
        if not length:
            return b""
        try:
            n = int(length)
        except ValueError:
            raise _BadCallback(400, f"bad Content-Length {length!r}") from None
        if n < 0:
            raise _BadCallback(400, f"bad Content-Length {length!r}")
        if n > _BODY_MAX_BYTES:
            raise _BadCallback(413, f"payload over {_BODY_MAX_BYTES} bytes")
        data = self.rfile.read(n)
        if len(data) != n:
            raise _BadCallback(400, "payload shorter than its Content-Length")
        return data


class _BadCallback(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _shard_headers(index: Optional[str], total: Optional[str]) -> Tuple[Optional[int], Optional[int]]:
    """Ax-Shard-Index and Ax-Shard-Total: both absent (None, None), or an
    index from 0 to total - 1 and a total of at least 1."""
    iv, tv = (index or "").strip(), (total or "").strip()
    if not iv and not tv:
        return None, None
    if not iv:
        raise _BadCallback(400, f"{HEADER_SHARD_TOTAL} header without {HEADER_SHARD_INDEX}")
    if not tv:
        raise _BadCallback(400, f"{HEADER_SHARD_INDEX} header without {HEADER_SHARD_TOTAL}")
    if not (tv.isascii() and tv.isdigit()) or int(tv) < 1:
        raise _BadCallback(400, f"bad {HEADER_SHARD_TOTAL} header {total!r}: want an integer >= 1")
    n = int(tv)
    if not (iv.isascii() and iv.isdigit()) or int(iv) >= n:
        raise _BadCallback(
            400,
            f"bad {HEADER_SHARD_INDEX} header {index!r}: want an integer from 0 to {n - 1} ({HEADER_SHARD_TOTAL} is {n})",
        )
    return int(iv), n


def _int_header(value: Optional[str], name: str) -> int:
    if value is None or not value.strip():
        return 0
    v = value.strip()
    if not v.isdigit():
        raise _BadCallback(400, f"bad {name} header {value!r}: want a non-negative integer")
    return int(v)


# _SIGNAL_POLL is how often Worker.run looks whether a signal came (seconds).
_SIGNAL_POLL = 0.1


class Worker:
    """Serves handlers for the sidecar's callbacks on a Unix socket.

    ::

        worker = axsched.Worker(listen="./worker.sock")

        @worker.handler("order.timeout")
        def order_timeout(d: axsched.Delivery) -> None:
            close_order_if_unpaid(d.json()["order_id"])

        worker.run()  # registers with the sidecar, serves until SIGTERM/SIGINT

    A handler takes a :class:`Delivery`. What it does decides the answer:

    * returns (anything but :class:`Async`): 200, the task is SUCCESS; a
      value other than ``None`` is the run's result, sent JSON-encoded as
      the answer's body and stored by the sidecar (``client.run(id, n)``;
      at most 64 KiB kept, a longer one is cut and flagged);
    * raises or returns :class:`Permanent`: 422, the task is FAILED, never
      retried;
    * raises or returns :class:`Snooze`: 503 with ``Retry-After``, tried
      again later, not counted as a failed attempt;
    * returns or raises :class:`Async`: 202, report later with
      :meth:`Delivery.report` or ``worker.client.report_result``;
    * raises anything else: 500 with the exception's message, a failed
      attempt, retried with backoff until attempts run out (then DEAD).

    A callback for a handler registered under no name (and no ``"*"``)
    gets 404: a permanent failure. Handlers run on a pool of
    ``max_threads`` threads, so they must be thread-safe.

    A task submitted with ``shards`` runs as several callbacks per run, one
    per shard (:attr:`Delivery.shard_index` of :attr:`Delivery.shard_total`);
    with ``"shards": {"ask": true}`` the sidecar first asks the worker how
    many (``POST /ax/v1/shards``), which the handler's ``shard_count``
    function answers (see :meth:`handle`).

    Args:
        socket_path: the sidecar's socket, for registration, heartbeats and
            results. Defaults to ``$AX_SOCKET``, else ``./ax.sock``.
        listen: the Unix socket this worker serves on. Defaults to
            ``./worker.sock`` (made absolute when the Worker is created).
        name: the executor name registered with the sidecar. Defaults to the
            socket file's stem and a hash of its absolute path
            (``worker-1a2b3c``), stable across restarts.
        max_threads: handlers running at once; also the ``max_concurrency``
            registered with the sidecar. Defaults to 8.
        client: the :class:`Client` to use instead of making one for
            ``socket_path``.
        register: register with the sidecar (``POST /v1/executors``) in
            :meth:`start` and unregister in :meth:`stop`. Set ``False`` when
            the sidecar is started with ``--executor HANDLER=unix://...``.
            Defaults to ``True``.
    """

    #: Seconds before the first retry of a registration the sidecar did not
    #: answer; doubled after each try, up to 10.
    _register_retry_first = 0.5

    def __init__(
        self,
        socket_path: Optional[str] = None,
        listen: str = "./worker.sock",
        name: Optional[str] = None,
        max_threads: int = 8,
        *,
        client: Optional[Client] = None,
        register: bool = True,
    ) -> None:
        if isinstance(max_threads, bool) or not isinstance(max_threads, int) or max_threads < 1:
            raise ValueError(f"max_threads must be an int >= 1, got {max_threads!r}")
        if listen.startswith("unix://"):
            listen = listen[len("unix://") :]
        self.client: Client = client if client is not None else Client(socket_path)
        self.listen_path: str = os.path.abspath(listen)
        self.name: str = name if name is not None else _default_name(self.listen_path)
        problem = executor_name_problem(self.name)
        if problem is not None:
            raise ValueError(problem)
        self.max_threads = max_threads
        # At least max_threads: every callback the sidecar may send at once
        # (its max_concurrency) waits in the accept queue, not refused.
        self.backlog = max(max_threads, socket.SOMAXCONN)
        self.register = register
        self._handlers: Dict[str, Handler] = {}
        self._shard_counts: Dict[str, ShardCount] = {}  # by the names of _handlers, guarded by _lock
        self._lock = threading.Lock()
        self._server: Optional[_Server] = None
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._thread: Optional[threading.Thread] = None
        self._wake: Optional[Tuple[int, int]] = None
        self._registered = False
        # Set when a stop is asked for (stop(), SIGTERM/SIGINT in run()):
        # ends run()'s wait and the background registration.
        self._stopping = threading.Event()
        self._stopped = threading.Event()  # set while not serving
        self._stopped.set()
        self._register_thread: Optional[threading.Thread] = None

    def __repr__(self) -> str:
        return f"Worker(name={self.name!r}, url={self.url!r}, handlers={sorted(self._handlers)!r})"

    @property
    def url(self) -> str:
        """The URL the sidecar calls: ``unix://`` and the absolute socket path."""
        return "unix://" + self.listen_path

    @property
    def handlers(self) -> List[str]:
        """The registered handler names, sorted."""
        with self._lock:
            return sorted(self._handlers)

    @property
    def registered(self) -> bool:
        """Whether the sidecar accepted this worker's registration."""
        return self._registered

    # ------------------------------------------------------------- handlers

    def handle(self, name: str, fn: Handler, *, shard_count: Optional[ShardCount] = None) -> None:
        """Register ``fn(delivery)`` for the handler ``name``: a handler
        name (``"order.timeout"``), a prefix pattern ending in ``*``
        (``"order.*"``) or ``"*"`` for every handler. A delivery goes to the
        exact name first, then the longest matching prefix, then ``"*"``, as
        the sidecar routes. Raises ``ValueError`` for an empty, malformed or
        already registered name.

        ``shard_count(delivery) -> int`` answers the sidecar's question of
        how many shards a run of a task submitted with ``"shards": {"ask":
        true}`` gets (``POST /ax/v1/shards``, answered 200 ``{"count": n}``);
        the run is then delivered as ``n`` callbacks with ``shard_index`` 0
        to ``n - 1`` and ``shard_total`` ``n`` (``n`` is bounded by the
        task's ``max``). Its delivery is the ask's: task id, handler,
        run, attempt (the ask's own), deadline and payload, no shard. It
        must return an ``int`` >= 1; anything else, or an exception, answers
        500, a failed attempt the sidecar retries. A handler registered
        without one answers such an ask 501 (code
        ``shard_count_unsupported``); an unknown handler 404
        (``handler_not_found``). Tasks with a fixed ``"shards": {"count":
        N}`` need none."""
        if not isinstance(name, str) or not name:
            raise ValueError("handler name must be a non-empty string")
        if "*" in name[:-1]:
            raise ValueError(f'handler {name!r}: "*" may only stand alone or end the pattern, as in "order.*"')
        if not callable(fn):
            raise TypeError(f"handler {name!r}: {fn!r} is not callable")
        if shard_count is not None and not callable(shard_count):
            raise TypeError(f"handler {name!r}: shard_count {shard_count!r} is not callable")
        with self._lock:
            if name in self._handlers:
                raise ValueError(f"handler {name!r} registered twice")
            self._handlers[name] = fn
            if shard_count is not None:
                self._shard_counts[name] = shard_count

    def handler(self, name: str, *, shard_count: Optional[ShardCount] = None) -> Callable[[F], F]:
        """Decorator form of :meth:`handle`::

            @worker.handler("order.timeout")
            def order_timeout(d): ...

            @worker.handler("reindex", shard_count=lambda d: max(1, d.json()["rows"] // 1000))
            def reindex(d): ...  # d.shard_index of d.shard_total
        """

        def decorate(fn: F) -> F:
            self.handle(name, fn, shard_count=shard_count)
            return fn

        return decorate

    def _pattern(self, name: str) -> Optional[str]:
        """The registered name or pattern that name routes to: exact, then
        longest prefix pattern, then "*"; None when none. Holds no lock."""
        if name in self._handlers:
            return name
        best: Optional[str] = None
        for pattern in self._handlers:
            if pattern.endswith("*") and len(pattern) > len(best or "") and name.startswith(pattern[:-1]):
                best = pattern
        return best

    def _lookup(self, name: str) -> Optional[Handler]:
        """The handler for name: exact, then longest prefix pattern, then "*"."""
        with self._lock:
            pattern = self._pattern(name)
            return None if pattern is None else self._handlers[pattern]

    def _count_shards(self, d: Delivery) -> Tuple[int, str, str, int]:
        """Answer a shard-count ask for d: (status, error code, message,
        count); count only with status 200."""
        with self._lock:
            pattern = self._pattern(d.handler)
            fn = None if pattern is None else self._shard_counts.get(pattern)
        if pattern is None:
            log.warning("worker %s: shard count asked for %r (task %r), which has no handler", self.name, d.handler, d.task_id)
            return 404, "handler_not_found", f"no handler registered for {d.handler!r}", 0
        if fn is None:
            return 501, "shard_count_unsupported", (
                f"handler {d.handler!r} cannot count shards: register it with shard_count=fn"
            ), 0
        try:
            n = fn(d)
        except Exception as e:  # a failed attempt of the ask
            log.warning(
                "worker %s: shard count of handler %r failed on task %r: %s",
                self.name, d.handler, d.task_id, e, exc_info=True,
            )
            return 500, "shard_count_failed", f"{type(e).__name__}: {e}", 0
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            return 500, "shard_count_failed", f"shard count of handler {d.handler!r} is {n!r}, want an int >= 1", 0
        return 200, "", "", n

    def _dispatch(self, d: Delivery) -> Tuple[int, Union[str, bytes], Optional[Dict[str, str]]]:
        """Run the handler of d; return status, text (bytes: the result's
        JSON) and extra headers."""
        fn = self._lookup(d.handler)
        if fn is None:
            log.warning("worker %s: no handler for %r (task %r)", self.name, d.handler, d.task_id)
            return 404, f"no handler registered for {d.handler!r}", None
        try:
            result = fn(d)
        except (Snooze, Permanent, Async) as e:
            result = e
        except Exception as e:  # a failed attempt
            log.warning(
                "worker %s: handler %r failed on task %r attempt %d: %s",
                self.name, d.handler, d.task_id, d.attempt, e, exc_info=True,
            )
            return 500, f"{type(e).__name__}: {e}", None
        if isinstance(result, Snooze):
            return 503, str(result), {"Retry-After": str(result.retry_after)}
        if isinstance(result, Permanent):
            log.info("worker %s: task %r failed permanently: %s", self.name, d.task_id, result.message)
            return 422, result.message, None
        if isinstance(result, Async) or (isinstance(result, type) and issubclass(result, Async)):
            return 202, "accepted; will report later", None
        if result is None:
            return 200, b"", None
        try:
            body = json.dumps(result, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        except (TypeError, ValueError) as e:  # a failed attempt: the result cannot be kept
            log.warning("worker %s: handler %r returned a result that is not JSON: %s", self.name, d.handler, e)
            return 500, f"result is not JSON-serializable: {e}", None
        return 200, body, None

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Listen on the socket, serve callbacks in the background and
        register with the sidecar; return at once.

        A stale socket file left by a dead process is removed first; a
        socket another process listens on, or a file that is not a socket,
        raises ``OSError``. Registration: a sidecar without the executor API
        (404) logs a warning (start the sidecar with ``--executor``); a
        sidecar that cannot be reached logs a warning and is retried in the
        background until it answers; any other error stops the worker and is
        raised.
        """
        with self._lock:
            if self._server is not None:
                raise RuntimeError("worker already started")
            if not self._handlers:
                raise ValueError("no handlers registered: use @worker.handler(name) first")
            _remove_stale_socket(self.listen_path)
            handler_class = type("_Handler", (_CallbackHandler,), {"worker": self})
            pool = concurrent.futures.ThreadPoolExecutor(self.max_threads, thread_name_prefix=f"axsched-{self.name}")
            try:
                server = _Server(self.listen_path, handler_class, pool, self.backlog)
            except BaseException:
                pool.shutdown(wait=False)
                raise
            self._pool, self._server = pool, server
            self._wake = os.pipe()
            self._stopped.clear()
            self._thread = threading.Thread(target=self._serve, name=f"axsched-{self.name}-accept", daemon=True)
            self._thread.start()
        log.info("worker %s: listening on %s for %s", self.name, self.url, ", ".join(self.handlers))
        if self.register:
            try:
                self._register(first=True)
            except BaseException:
                self.stop()
                raise

    def _serve(self) -> None:
        server, wake = self._server, self._wake
        assert server is not None and wake is not None
        with selectors.DefaultSelector() as sel:
            sel.register(server.socket, selectors.EVENT_READ, "accept")
            sel.register(wake[0], selectors.EVENT_READ, "wake")
            while True:  # until stop() writes to the wake pipe
                for key, _ in sel.select():
                    if key.data == "wake":
                        return
                    server._handle_request_noblock()  # accept, then process_request

    def _register(self, first: bool) -> bool:
        """Register once; True when done (or never possible)."""
        try:
            self.client.register_executor(self.name, self.handlers, self.url, max_concurrency=self.max_threads)
        except (NotFound, MethodNotAllowed) as e:
            names = [FALLBACK_HANDLER] if FALLBACK_HANDLER in self.handlers else self.handlers
            flags = " ".join(f"--executor '{n}={self.url}'" for n in names)
            log.warning(
                "worker %s: the sidecar at %s cannot register executors (POST /v1/executors: %s, http %s); "
                "callbacks arrive only if the sidecar was started with %s",
                self.name, self.client.socket_path, e.message, e.status, flags,
            )
            return True
        except Unavailable as e:
            if first:
                log.warning("worker %s: %s; registering again in the background", self.name, e)
                self._register_thread = threading.Thread(
                    target=self._register_loop, name=f"axsched-{self.name}-register", daemon=True
                )
                self._register_thread.start()
            return False
        self._registered = True
        log.info("worker %s: registered with the sidecar at %s", self.name, self.client.socket_path)
        return True

    def _register_loop(self) -> None:
        wait = self._register_retry_first
        while not self._stopping.wait(wait):
            try:
                if self._register(first=False):
                    return
            except AxError as e:
                log.error("worker %s: registration refused: %s", self.name, e)
                return
            wait = min(wait * 2, _REGISTER_BACKOFF_MAX)

    def stop(self, timeout: Optional[float] = 30.0) -> bool:
        """Stop cleanly, in this order:

        1. unregister from the sidecar (``DELETE /v1/executors/{name}``), so
           that the leader stops sending new attempts here, while callbacks
           already on their way are still accepted and run;
        2. stop accepting callbacks;
        3. wait up to ``timeout`` seconds (default 30; ``None`` waits
           forever) for the running handlers to finish;
        4. remove the socket file.

        Returns ``False`` when handlers were still running at the timeout
        (their answers may be lost). Safe to call more than once, and from
        another thread than :meth:`run`'s."""
        with self._lock:
            server, pool, thread, wake = self._server, self._pool, self._thread, self._wake
            self._server = self._pool = self._thread = self._wake = None
        if server is None or pool is None:
            return True
        self._stopping.set()  # ends run()'s wait and the background registration
        if self._register_thread is not None:
            self._register_thread.join()
            self._register_thread = None
        if self._registered:
            try:
                self.client.unregister_executor(self.name)
                log.info("worker %s: unregistered from the sidecar at %s", self.name, self.client.socket_path)
            except NotFound:
                pass
            except AxError as e:
                log.warning("worker %s: unregister: %s", self.name, e)
            self._registered = False
        assert wake is not None
        os.write(wake[1], b"x")
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        server.server_close()  # no new connections from here on
        with server.inflight_lock:
            pending = set(server.inflight)
        done, not_done = concurrent.futures.wait(pending, timeout=timeout)
        pool.shutdown(wait=not not_done)
        if not_done:
            log.warning("worker %s: %d callback(s) still running after %ss", self.name, len(not_done), timeout)
        for fd in wake:
            os.close(fd)
        try:
            os.unlink(self.listen_path)
        except FileNotFoundError:
            pass
        self.client.close()  # idle connections only; the client stays usable
        self._stopping.clear()  # ready for another start()
        self._stopped.set()
        log.info("worker %s: stopped", self.name)
        return not not_done

    def run(self) -> None:
        """Start, then block until SIGTERM or SIGINT (or :meth:`stop` from
        another thread), then stop cleanly (see :meth:`stop`). A second
        signal during the shutdown gets the default behaviour (for SIGINT,
        ``KeyboardInterrupt``). Signal handlers are installed only when
        called from the main thread."""
        installed: Dict[int, Any] = {}
        signalled: List[int] = []  # the signals received (on_signal)
        if threading.current_thread() is threading.main_thread():
            def on_signal(signum: int, frame: Any) -> None:
                # Only a list append here: the handler runs on the main
                # thread between two bytecodes, and Event.set() would take
                # the Event's lock, which the interrupted wait below may hold
                # at that instant (a deadlock). The loop sees it within
                # _SIGNAL_POLL.
                signalled.append(signum)
                for s, prev in installed.items():
                    signal.signal(s, prev)

            for s in (signal.SIGTERM, signal.SIGINT):
                installed[s] = signal.signal(s, on_signal)
        try:
            self.start()
            while not signalled and not self._stopping.wait(_SIGNAL_POLL):
                pass
            if signalled:
                log.info("worker %s: %s, shutting down", self.name, signal.Signals(signalled[0]).name)
        finally:
            for s, prev in installed.items():
                signal.signal(s, prev)
            self.stop()
            self._stopped.wait()  # when stop() was called from another thread

    def __enter__(self) -> "Worker":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _remove_stale_socket(path: str) -> None:
    """Remove a socket file nobody listens on; refuse to touch a socket in
    use or a file that is not a socket."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise OSError(errno.EEXIST, f"ax worker: {path} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except ConnectionRefusedError:
        pass
    except FileNotFoundError:
        return
    else:
        raise OSError(errno.EADDRINUSE, f"ax worker: socket {path} is in use by another process")
    finally:
        probe.close()
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
