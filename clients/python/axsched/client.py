"""The client of the ax sidecar's socket API (HTTP/1.1 + JSON over a Unix
socket)."""

from __future__ import annotations

import errno
import functools
import http.client
import json
import logging
import os
import re
import socket
import threading
import time
import urllib.parse
from datetime import datetime
from types import CodeType
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union, cast

from ._wire import Duration, format_duration, format_time, parse_retry_after
from .errors import (
    ERROR_CODES,
    AxError,
    BadRequest,
    MethodNotAllowed,
    NoLeader,
    NotFound,
    NotReady,
    QueueFull,
    Unavailable,
    error_from_response,
)
from .task import Backoff, BatchResult, ClusterInfo, HandlerInfo, PurgeResult, State, SubmitRequest, Task, TaskPage, _encode_payload, utf8_json

__all__ = [
    "HEADER_BACKLOG_WARNING",
    "SOCKET_ENV",
    "SOCKET_PATH_DEFAULT",
    "TIMEOUT_DEFAULT",
    "RESULT_SUCCESS",
    "RESULT_FAILED",
    "RESULT_PERMANENT",
    "Client",
]

#: The environment variable that names the sidecar's socket when
#: ``socket_path`` is not given.
SOCKET_ENV = "AX_SOCKET"
#: The socket used when ``socket_path`` is not given and ``AX_SOCKET`` is
#: unset: ``ax.sock`` in the working directory.
SOCKET_PATH_DEFAULT = "./ax.sock"
#: Seconds one socket operation of a request may take (connect, send, each
#: read), when ``timeout`` is not given.
TIMEOUT_DEFAULT = 10.0

#: Outcomes of an attempt for :meth:`Client.report_result`.
RESULT_SUCCESS = "success"
#: The attempt failed; the task is retried with backoff until its attempts
#: are exhausted.
RESULT_FAILED = "failed"
#: The attempt failed for good; the task becomes FAILED without retry.
RESULT_PERMANENT = "permanent"
_RESULTS = (RESULT_SUCCESS, RESULT_FAILED, RESULT_PERMANENT)

#: The header of a submit's answer that warns of a backlog at 80 % of its
#: bound or more: ``"depth/limit"`` (:attr:`Task.backlog_warning`).
HEADER_BACKLOG_WARNING = "Ax-Backlog-Warning"
#: The ``Prefer`` request header (RFC 7240) of ``submit_batch(...,
#: minimal=True)``: answer each created or existing task with its id and
#: state only. A sidecar that honours it answers ``Preference-Applied:
#: return=minimal``; an older one ignores it and sends full views.
_PREFER_MINIMAL = "return=minimal"

log = logging.getLogger("axsched")

_USER_AGENT = "axsched-python"
_RESPONSE_MAX_BYTES = 16 << 20  # a task view carries at most a 1 MiB payload, base64-encoded
_IDLE_MAX = 16  # idle connections kept
_IDLE_MAX_AGE = 30.0  # seconds; the sidecar closes idle connections after 2 minutes
_TASKS = "/v1/tasks"


class _UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTPConnection to a Unix socket; the Host header says ``ax``."""

    def __init__(self, path: str, timeout: Optional[float]) -> None:
        super().__init__("ax", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            deadline = None if self.timeout is None else time.monotonic() + self.timeout
            pause = 0.001
            while True:
                try:
                    sock.connect(self.socket_path)
                    break
                except BlockingIOError:
                    # EAGAIN: the listen backlog is full (a busy sidecar).
                    # A Unix socket with a timeout fails at once instead of
                    # waiting, so wait here, up to the timeout.
                    if deadline is not None and time.monotonic() + pause > deadline:
                        raise socket.timeout("connect timed out: the sidecar's listen backlog is full") from None
                    time.sleep(pause)
                    pause = min(pause * 2, 0.05)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


_F = TypeVar("_F", bound=Callable[..., Any])


def _renamed(code: CodeType, name: str, qualname: str) -> CodeType:
    """``code`` under another name, which tracebacks show ("in submit")."""
    code = code.replace(co_name=name)
    if hasattr(code, "co_qualname"):  # Python 3.11+
        code = code.replace(co_qualname=qualname)  # type: ignore[call-arg]
    return code


def _public(fn: _F) -> _F:
    """Decorate a public method so that an :class:`AxError` (or the
    ``TimeoutError`` of :meth:`Client.wait`) it raises leaves with a
    traceback of two entries: the caller's line, then one line of this
    module shown as ``in <method>`` (the wrapper's code object carries the
    method's name). The frames of the HTTP exchange are dropped; the
    low-level exception of an :class:`Unavailable` stays reachable as
    ``e.cause``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (AxError, TimeoutError) as error:
            # Drop the client's frames: the traceback restarts here.
            error.__traceback__ = None
            raise error

    wrapper.__code__ = _renamed(wrapper.__code__, fn.__name__, fn.__qualname__)
    return cast(_F, wrapper)


class _Stale(Exception):
    """A reused keep-alive connection turned out to be closed."""


def _quote_id(what: str, id: str) -> str:
    try:
        return urllib.parse.quote(id, safe="")
    except UnicodeEncodeError:
        raise BadRequest(f"{what} id: not valid UTF-8 (a lone surrogate)") from None


def _task_path(id: str, suffix: str = "") -> str:
    if not isinstance(id, str) or not id:
        raise BadRequest("task id must be a non-empty string")
    return f"{_TASKS}/{_quote_id('task', id)}{suffix}"


def _flow_path(id: str) -> str:
    if not isinstance(id, str) or not id:
        raise BadRequest("flow id must be a non-empty string")
    return "/v1/flows/" + _quote_id("flow", id)


#: Executor names the sidecar accepts: 1 to 128 characters of
#: ``A-Z a-z 0-9 . _ : -``, but not ``.`` or ``..``.
_EXECUTOR_NAME = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def executor_name_problem(name: Any) -> Optional[str]:
    """Return why ``name`` is not an executor name the sidecar accepts, or
    ``None`` when it is one."""
    if not isinstance(name, str) or not name:
        return "executor name must be a non-empty string"
    if not _EXECUTOR_NAME.fullmatch(name) or name in (".", ".."):
        return f"executor name {name!r}: use 1 to 128 characters of A-Z a-z 0-9 . _ : - (not . or ..)"
    return None


def _check_executor_name(name: Any) -> str:
    problem = executor_name_problem(name)
    if problem is not None:
        raise BadRequest(problem)
    return name


def _check_attempt(attempt: int) -> int:
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise BadRequest(f"attempt must be an int >= 1, got {attempt!r}")
    return attempt


class Client:
    """Talks to the local ax sidecar over its Unix socket.

    A Client is safe to share between threads; create one per process and
    reuse it: it keeps up to 16 idle connections open. Nothing is connected
    until the first call (use :meth:`ready` or :meth:`wait_ready` to check
    the sidecar at start-up). Use it as a context manager, or call
    :meth:`close`, to close idle connections early.

    Args:
        socket_path: the path of the sidecar's Unix socket; a ``unix://``
            prefix is accepted. Defaults to ``$AX_SOCKET``, else
            ``./ax.sock``.
        timeout: seconds each socket operation of a request may take
            (connecting, sending, each read); ``None`` waits forever.
            Defaults to 10.0.

    Every call raises an :class:`~axsched.AxError` subclass on failure:
    :class:`~axsched.Unavailable` when the sidecar cannot be reached, and
    the exception of the error code otherwise (:class:`~axsched.NotFound`,
    :class:`~axsched.Conflict`, :class:`~axsched.QueueFull`, ...). Answers
    ``503 no_leader`` are retried up to 3 times (waits of 0.1 s, 0.2 s,
    0.4 s, or the ``Retry-After`` when longer, up to 5 s) before
    :class:`~axsched.NoLeader` is raised; nothing else is retried.
    """

    #: Retries after the first try of an answer ``no_leader``.
    no_leader_retries: int = 3
    #: The first wait before retrying ``no_leader``, in seconds; doubled
    #: after each retry. The ``Retry-After`` header wins when longer.
    no_leader_backoff: float = 0.1
    #: A ``Retry-After`` longer than this (seconds) is not waited for: the
    #: :class:`~axsched.NoLeader` error is raised at once.
    no_leader_max_wait: float = 5.0

    def __init__(self, socket_path: Optional[str] = None, timeout: Optional[float] = TIMEOUT_DEFAULT) -> None:
        path = socket_path or os.environ.get(SOCKET_ENV, "")
        if path.startswith("unix://"):
            path = path[len("unix://") :]
        self._socket_path = path or SOCKET_PATH_DEFAULT
        if timeout is not None and (isinstance(timeout, bool) or timeout <= 0):
            raise ValueError(f"timeout must be a positive number of seconds or None, got {timeout!r}")
        self._timeout = timeout
        self._idle: List[Tuple[_UnixHTTPConnection, float]] = []
        self._lock = threading.Lock()
        # The clock and the sleep of wait and wait_ready (tests replace both).
        self._sleep: Callable[[float], None] = time.sleep
        self._monotonic: Callable[[], float] = time.monotonic
        self._batch_supported = True

    @property
    def socket_path(self) -> str:
        """The path of the sidecar's socket this client talks to."""
        return self._socket_path

    @property
    def timeout(self) -> Optional[float]:
        """Seconds each socket operation of a request may take."""
        return self._timeout

    def __repr__(self) -> str:
        return f"Client(socket_path={self._socket_path!r}, timeout={self._timeout!r})"

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close the idle connections. The client stays usable."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn, _ in idle:
            conn.close()

    # ----------------------------------------------------------------- tasks

    @_public
    def submit(
        self,
        handler: str,
        payload: Any = None,
        *,
        id: Optional[str] = None,
        payload_bytes: Optional[bytes] = None,
        delay: Optional[Duration] = None,
        run_at: Optional[datetime] = None,
        priority: Optional[int] = None,
        timeout: Optional[Duration] = None,
        max_attempts: Optional[int] = None,
        overwrite: bool = False,
        every: Optional[Duration] = None,
        cron: Optional[str] = None,
        timezone: Optional[str] = None,
        repeats: Optional[int] = None,
        until: Optional[datetime] = None,
        backoff: Optional[Union[Backoff, Mapping[str, Any]]] = None,
        route_key: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
        retention: Optional[Duration] = None,
        traceparent: Optional[str] = None,
        tracestate: Optional[str] = None,
        shards: Optional[Mapping[str, Any]] = None,
    ) -> Task:
        """Submit a task and return it as stored. Returns once the task is
        durable on a quorum of the cluster.

        Args:
            handler: the handler that runs the task (``"order.timeout"``).
            payload: any JSON-encodable value (or a :class:`RawJSON`),
                delivered to the executor as the callback body. Defaults to
                no payload.
            id: the idempotency key; any non-empty string. Submitting the
                same id and spec again returns the existing task (whatever
                its state); another spec raises :class:`Conflict` unless
                ``overwrite``. Defaults to an id generated by the sidecar.
            payload_bytes: a binary payload instead of ``payload``.
            delay: run after this long: a timedelta or seconds (``1.5``).
            run_at: run at this aware datetime, never earlier. At most one
                of ``delay`` and ``run_at``; neither means "now".
            priority: 0 (highest) to 4 (lowest). Defaults to 2.
            timeout: bounds one attempt: a timedelta or seconds. Defaults
                to 30 seconds.
            max_attempts: attempts before the task is DEAD. Defaults to 4.
            overwrite: replace an existing task with the same id. Defaults
                to ``False``.
            every: run the task again and again at this interval (a
                timedelta or seconds, at least 1 s), without drift. Without
                ``delay`` or ``run_at`` the first run is one interval after
                the submit. Not with ``cron``.
            cron: run the task on this cron schedule (``"0 2 * * *"``, 6
                fields with seconds, or ``"@daily"``), evaluated in
                ``timezone`` (an IANA name, default UTC; only with
                ``cron``).
            repeats: stop a recurring task after this many runs (0: no
                limit). Only with ``cron`` or ``every``.
            until: no run of a recurring task after this aware datetime.
                Only with ``cron`` or ``every``.
            backoff: the retry backoff of failed attempts, a
                :class:`Backoff` or a dict with its keys (``{"initial": 10,
                "max": 600}``); unset fields keep the sidecar's default.
            route_key: route the task's attempts by consistent hashing (the
                tasks of one key go to the same node).
            labels: ``str`` to ``str`` pairs kept with the task (at most 32).
            retention: how long the task is kept once finished, then purged
                (a timedelta or seconds, not negative); ``None`` keeps the
                sidecar's ``--retention`` / ``--retention-dead``.
            traceparent, tracestate: the W3C trace context of the task
                (for example the ``traceparent`` header of the request being
                served, or ``Delivery.traceparent`` in a handler): every
                callback carries its trace id. Defaults to none (the
                sidecar then derives a trace id from the task id).
            shards: run each run as shard tasks: ``{"count": 8}`` (1 to
                1024), or ``{"ask": True, "max": 64}`` to ask the executor
                how many (see :class:`SubmitRequest`). Invalid:
                :class:`InvalidShards`.

        The returned task's ``backlog_warning`` is set (``"depth/limit"``)
        when the handler's backlog is at 80 % of its bound or more.

        Raises:
            BadRequest: the request is invalid (the message names the field).
            Conflict, PayloadTooLarge, QueueFull (with ``depth`` and
            ``limit``), NoLeader, Unavailable.
        """
        req = SubmitRequest(
            handler=handler,
            payload=payload,
            id=id,
            payload_bytes=payload_bytes,
            delay=delay,
            run_at=run_at,
            priority=priority,
            timeout=timeout,
            max_attempts=max_attempts,
            overwrite=overwrite,
            every=every,
            cron=cron,
            timezone=timezone,
            repeats=repeats,
            until=until,
            backoff=backoff,
            route_key=route_key,
            labels=labels,
            retention=retention,
            traceparent=traceparent,
            tracestate=tracestate,
            shards=shards,
        )
        return self._submit(req)

    def _submit(self, req: SubmitRequest) -> Task:
        body = req.encode()
        _, headers, data = self._request("POST", _TASKS, body, replayable=req.id is not None)
        task = self._decode_task("POST", _TASKS, data)
        task.backlog_warning = headers.get(HEADER_BACKLOG_WARNING) or None
        return task

    @_public
    def submit_batch(
        self, requests: Iterable[Union[SubmitRequest, Mapping[str, Any]]], *, minimal: bool = False
    ) -> BatchResult:
        """Submit many tasks in one request (one Raft round trip).

        Each item is a :class:`SubmitRequest` or a mapping with the keyword
        arguments of :meth:`submit` (``{"handler": "x", "delay": 5}``,
        ``{"handler": "x", "every": 60, "backoff": {"initial": 10}}``). The
        result has one entry per item, in order: the stored task, or the
        error of that item (:class:`Conflict`, :class:`BadRequest`, ...).
        When the sidecar sent an ``Ax-Backlog-Warning`` with the answer, it
        is copied to the ``backlog_warning`` of every returned task.

        With ``minimal=True`` the request carries ``Prefer: return=minimal``
        (RFC 7240): the sidecar answers each created or existing task with
        its id and state only, and skips encoding the full views (as the
        client skips decoding them); for bulk loads that only need to know
        that each item was accepted. Each ``tasks[i]`` is then a
        :class:`Task` of which only ``id`` and ``state`` are meaningful:
        the other attributes are the class's defaults, not the task's
        (``handler`` is ``""``, ``created_at`` is ``None``, ``priority`` 2 and
        ``max_attempts`` 4 whatever was submitted; read the task with
        :meth:`get` for them); ``backlog_warning`` is set as
        without it, and failed items are reported the same way. A sidecar
        older than the preference ignores it and answers full views: they
        are then returned as full tasks.

        A sidecar without ``POST /v1/tasks/batch`` (it answers 404 or 405)
        is sent one submit per task instead; the client remembers that.
        That fallback returns full tasks (the answers of the single
        submits), ``minimal`` or not.

        Raises:
            BadRequest: an item is invalid, as found by the client before
                sending or by the sidecar (its message names ``tasks[i]``);
                nothing is submitted then.
            QueueFull, NoLeader, NotReady, Unavailable, PayloadTooLarge
                (the whole body): the batch as a whole failed. With the
                one-by-one fallback, the items before the failing one are
                submitted (submitting again is safe for items with an id).
        """
        reqs: List[SubmitRequest] = []
        for i, item in enumerate(requests):
            try:
                reqs.append(item if isinstance(item, SubmitRequest) else SubmitRequest.from_mapping(item))
            except (BadRequest, TypeError) as e:
                msg = e.message if isinstance(e, BadRequest) else str(e)
                raise BadRequest(f"submit_batch: item {i}: {msg}") from None
        bodies: List[bytes] = []
        for i, r in enumerate(reqs):
            try:
                bodies.append(r.encode())
            except (BadRequest, TypeError, ValueError) as e:
                msg = e.message if isinstance(e, BadRequest) else str(e)
                raise BadRequest(f"submit_batch: item {i}: {msg}") from None
        if not reqs:
            return BatchResult(tasks=[], errors=[])
        if self._batch_supported:
            body = b'{"tasks":[' + b",".join(bodies) + b"]}"
            path = _TASKS + "/batch"
            try:
                _, headers, data = self._request(
                    "POST",
                    path,
                    body,
                    replayable=all(r.id is not None for r in reqs),
                    headers={"Prefer": _PREFER_MINIMAL} if minimal else None,
                )
            except (NotFound, MethodNotAllowed):
                self._batch_supported = False
            else:
                try:
                    doc = json.loads(data.decode("utf-8"))
                except (UnicodeDecodeError, ValueError) as e:
                    raise AxError(f"POST {path}: cannot decode answer: {e}") from None
                return _batch_result(doc, len(reqs), headers.get(HEADER_BACKLOG_WARNING) or None)
        tasks: List[Optional[Task]] = []
        errors: List[Optional[AxError]] = []
        for r in reqs:
            try:
                tasks.append(self._submit(r))
                errors.append(None)
            except (Unavailable, NoLeader, NotReady, QueueFull):
                # The sidecar is gone, has no leader or is full: the
                # remaining items would fail the same way.
                raise
            except AxError as e:
                tasks.append(None)
                errors.append(e)
        return BatchResult(tasks=tasks, errors=errors)

    @_public
    def get(self, id: str) -> Task:
        """Return the task with this id: its state, attempts, next run and
        last error. Raises :class:`NotFound` for an unknown id."""
        return self._task("GET", _task_path(id))

    @_public
    def cancel(self, id: str) -> Task:
        """Cancel the task and return it in its new state. A waiting task
        becomes CANCELLED at once; for a running task the sidecar also aborts
        the executor's callback request. A terminal task is returned
        unchanged. Raises :class:`NotFound` for an unknown id."""
        return self._task("DELETE", _task_path(id), replayable=True)

    @_public
    def purge(self, id: str) -> None:
        """Delete a finished task (SUCCESS, CANCELLED, DEAD, FAILED) now,
        instead of waiting for its retention. Raises :class:`Conflict` for
        a task that is not finished (cancel it first) and :class:`NotFound`
        for an unknown id."""
        self._json("DELETE", _task_path(id) + "?purge=true", replayable=True)

    @_public
    def purge_tasks(
        self,
        *,
        handler: Optional[str] = None,
        state: Optional[Union[State, str]] = None,
        finished_before: Optional[datetime] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> PurgeResult:
        """Delete up to ``limit`` (default 1000, at most 10000) finished
        tasks of ``handler`` in ``state`` (SUCCESS, CANCELLED, DEAD or
        FAILED; default any) that finished before ``finished_before`` (an
        aware datetime; default now). Returns a :class:`PurgeResult`, the
        pair ``(purged, more)`` with ``next_cursor``: call again, with
        ``cursor=next_cursor``, while ``more`` is true (a call may delete
        nothing and still say ``more``: it read its bound of tasks the
        filters left)::

            r = client.purge_tasks(state=State.CANCELLED)
            while r.more:
                r = client.purge_tasks(state=State.CANCELLED, cursor=r.next_cursor)

        Raises :class:`BadRequest` for invalid filters and for a cursor the
        sidecar did not make or made for another ``handler`` or ``state``."""
        body: Dict[str, Any] = {}
        if handler is not None:
            body["handler"] = handler
        if state is not None:
            body["state"] = str(state.value if isinstance(state, State) else state)
        if finished_before is not None:
            body["finished_before"] = format_time(finished_before, "finished_before")
        if limit is not None:
            body["limit"] = limit
        if cursor:
            body["cursor"] = str(cursor)
        doc = self._json("POST", _TASKS + "/purge", json.dumps(body).encode("utf-8"), replayable=True)
        if not isinstance(doc, Mapping):
            raise AxError(f"POST {_TASKS}/purge: unexpected answer {doc!r:.200}")
        return PurgeResult(int(doc.get("purged", 0)), bool(doc.get("more", False)), doc.get("next_cursor") or None)

    @_public
    def retry(self, id: str) -> Task:
        """Re-run a DEAD or FAILED task and return it (WAITING again, with a
        fresh attempt budget). Raises :class:`NotFound` for an unknown id and
        :class:`Conflict` when the task is not DEAD or FAILED."""
        path = _task_path(id, "/retry")
        _, _, data = self._request("POST", path, b"{}")
        if not data.strip():
            return self.get(id)
        return self._decode_task("POST", path, data)

    @_public
    def pause_task(self, id: str) -> Task:
        """Pause one task's runs (its next run, retries, a recurring task's
        slots) until :meth:`resume_task`; an attempt already running is not
        interrupted. Returns the task (``paused`` set). Idempotent. Raises
        :class:`NotFound` for an unknown id and :class:`TaskFinished` (a
        :class:`Conflict`) for a finished task."""
        return self._set_task_paused(id, "/pause")

    @_public
    def resume_task(self, id: str) -> Task:
        """Resume a paused task and return it: a run that waited fires now,
        a recurring task that missed slots runs once and then keeps its
        schedule. Resuming a task that is not paused changes nothing.
        Raises :class:`NotFound` for an unknown id."""
        return self._set_task_paused(id, "/resume")

    def _set_task_paused(self, id: str, suffix: str) -> Task:
        path = _task_path(id, suffix)
        _, _, data = self._request("POST", path, b"{}", replayable=True)
        return self._decode_task("POST", path, data)

    @_public
    def pause_handler(self, handler: str) -> None:
        """Pause every run of ``handler`` across the cluster until
        :meth:`resume_handler`: due runs wait (``waiting_reason``
        ``paused``), attempts already running are not interrupted, submits
        are still accepted. Idempotent. Raises :class:`HandlerNotFound` (a
        :class:`NotFound`) for a handler with no task, no executor and no
        pause."""
        self._set_handler_paused(handler, "/pause")

    @_public
    def resume_handler(self, handler: str) -> None:
        """Resume a paused handler: the runs that waited fire now. Resuming
        a handler that is not paused changes nothing. Raises
        :class:`HandlerNotFound` as :meth:`pause_handler` does."""
        self._set_handler_paused(handler, "/resume")

    def _set_handler_paused(self, handler: str, suffix: str) -> None:
        if not isinstance(handler, str) or not handler:
            raise BadRequest("handler must be a non-empty string")
        self._request("POST", "/v1/handlers/" + urllib.parse.quote(handler, safe="") + suffix, b"{}", replayable=True)

    @_public
    def runs(self, id: str, limit: Optional[int] = None, cursor: Optional[str] = None) -> Dict[str, Any]:
        """One page of the task's run history, newest first
        (``GET /v1/tasks/{id}/runs``): ``{"runs": [...], "next_cursor": ...}``
        as the API sends it — each run with ``run``, ``trace_id``, ``state``,
        ``due_at``, ``fired_at``, ``started_at``, ``finished_at``,
        ``lateness`` (where the time went, in ms), ``attempts`` (node,
        ``span_id``, executor, outcome, ``http_status``, ``error``) and its
        ``result``. ``limit``: 1 to 100,
        default 20; ``cursor``: the previous page's ``next_cursor``. The
        sidecar keeps its ``--history-runs`` newest runs (default 100).
        Raises :class:`NotFound` for an unknown id."""
        q = {}
        if limit is not None:
            if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 100:
                raise BadRequest(f"limit must be an integer from 1 to 100, got {limit!r}")
            q["limit"] = str(limit)
        if cursor:
            q["cursor"] = str(cursor)
        path = _task_path(id, "/runs")
        if q:
            path += "?" + urllib.parse.urlencode(q)
        doc = self._json("GET", path)
        if not isinstance(doc, Mapping) or not isinstance(doc.get("runs"), list):
            raise AxError(f"GET {path}: unexpected answer: {str(doc)[:200]}")
        return dict(doc)

    @_public
    def run(self, id: str, run: int) -> Dict[str, Any]:
        """Run number ``run`` of the task (``Ax-Run``, ``Delivery.run``) with
        its attempts and result, as the API sends it (see :meth:`runs`).
        Raises :class:`NotFound` for an unknown task or a run not on
        record."""
        if not isinstance(run, int) or isinstance(run, bool) or run < 1:
            raise BadRequest(f"run must be an integer from 1, got {run!r}")
        path = _task_path(id, f"/runs/{run}")
        doc = self._json("GET", path)
        if not isinstance(doc, Mapping) or "run" not in doc:
            raise AxError(f"GET {path}: unexpected answer: {str(doc)[:200]}")
        return dict(doc)

    @_public
    def submit_flow(self, flow: Mapping[str, Any]) -> Dict[str, Any]:
        """Submit a flow (``POST /v1/flows``): ``flow`` is the request body,
        ``{"id": ..., "stages": [{"name", "handler", "depends_on", "payload",
        "on_failure", and the task fields}], "delay"/"run_at", "every" or
        "cron" (with "timezone"), "traceparent"/"tracestate"}`` (the trace
        context every stage task carries).
        Returns the flow as the API sends it (``state``, ``run``,
        ``stages`` with each stage's ``state`` and ``task_id``). The same id
        and spec again returns the stored flow; another spec raises
        :class:`Conflict`. A cycle, an unknown dependency, duplicate names,
        more than 1000 stages or a bad stage field raise
        :class:`BadRequest` naming the problem. A stage with dependencies
        receives ``{"payload": ..., "upstream": {"<stage>": {"state",
        "result"}}}`` as its callback body (``"result_omitted": true``
        instead of the results when they would not fit in a stored task,
        64 MiB: read them from the upstream stage's runs). A stage's ``payload`` is encoded
        as :meth:`submit` encodes one (a :class:`RawJSON` byte for byte);
        a binary one goes in ``payload_base64``. A value JSON cannot encode
        (bytes, a set) raises :class:`BadRequest` naming it."""
        if not isinstance(flow, Mapping) or not flow.get("id"):
            raise BadRequest("flow must be a mapping with a non-empty id")
        return self._flow_doc("POST", "/v1/flows", _encode_flow(flow))

    @_public
    def flow(self, id: str) -> Dict[str, Any]:
        """The flow ``id`` and every stage's state (``GET /v1/flows/{id}``).
        Raises :class:`NotFound` for an unknown id."""
        return self._flow_doc("GET", _flow_path(id))

    @_public
    def cancel_flow(self, id: str) -> Dict[str, Any]:
        """Cancel the flow ``id`` (``DELETE /v1/flows/{id}``): its pending,
        waiting and running stages become CANCELLED. Returns the flow."""
        return self._flow_doc("DELETE", _flow_path(id))

    @_public
    def purge_flow(self, id: str) -> None:
        """Delete a finished flow (SUCCESS, FAILED, CANCELLED) now
        (``DELETE /v1/flows/{id}?purge=true``), instead of waiting for its
        retention; its stage tasks are left to the task retention. Raises
        :class:`Conflict` for a flow that has not ended (cancel it first)
        and :class:`NotFound` for an unknown id."""
        self._json("DELETE", _flow_path(id) + "?purge=true", replayable=True)

    @_public
    def flows(self, limit: Optional[int] = None, cursor: Optional[str] = None) -> Dict[str, Any]:
        """One page of flows in id order (``GET /v1/flows``):
        ``{"flows": [...], "next_cursor": ...}``. ``limit``: 1 to 1000,
        default 100; ``cursor``: the previous page's ``next_cursor``."""
        q = {}
        if limit is not None:
            if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 1000:
                raise BadRequest(f"limit must be an integer from 1 to 1000, got {limit!r}")
            q["limit"] = str(limit)
        if cursor:
            q["cursor"] = str(cursor)
        path = "/v1/flows"
        if q:
            path += "?" + urllib.parse.urlencode(q)
        doc = self._json("GET", path)
        if not isinstance(doc, Mapping) or not isinstance(doc.get("flows"), list):
            raise AxError(f"GET {path}: unexpected answer: {str(doc)[:200]}")
        return dict(doc)

    def _flow_doc(self, method: str, path: str, body: Optional[bytes] = None) -> Dict[str, Any]:
        doc = self._json(method, path, body, replayable=True)
        if not isinstance(doc, Mapping) or "stages" not in doc:
            raise AxError(f"{method} {path}: unexpected answer: {str(doc)[:200]}")
        return dict(doc)

    @_public
    def handlers(self) -> List[HandlerInfo]:
        """Every handler that has tasks, an executor named for it or a
        pause (``GET /v1/handlers``), sorted by name: backlog, parked runs
        by reason, pause flag, circuit state, task counts by state and
        executors (:class:`HandlerExecutor`; its ``max_concurrency`` is
        ``None`` for an executor registered without one: the node's
        default)."""
        doc = self._json("GET", "/v1/handlers")
        items = doc.get("handlers") if isinstance(doc, Mapping) else None
        if not isinstance(items, list):
            raise AxError(f"GET /v1/handlers: unexpected answer: {str(doc)[:200]}")
        try:
            return [HandlerInfo.from_json(h) for h in items]
        except (TypeError, ValueError) as e:
            raise AxError(f"GET /v1/handlers: cannot decode answer: {e}") from None

    def list(
        self,
        handler: Optional[str] = None,
        state: Optional[Union[State, str]] = None,
        limit: Optional[int] = None,
        *,
        page_size: Optional[int] = None,
    ) -> Iterator[Task]:
        """Iterate over tasks, fetching pages from the sidecar as needed.

        Args:
            handler: only tasks of this handler. Defaults to all.
            state: only tasks in this state (``State.DEAD`` or ``"DEAD"``).
                Defaults to all.
            limit: stop after this many tasks. Defaults to no limit.
            page_size: tasks asked per request. Defaults to ``limit`` when
                that is smaller, else the sidecar's default.

        The requests are sent while iterating, so errors are raised by the
        loop, not by this call. Use :meth:`list_page` to page by hand.
        """
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise BadRequest(f"limit must be an int >= 0, got {limit!r}")
        size = page_size
        if limit is not None and (size is None or limit < size):
            size = limit
        return self._iterate(handler, state, limit, size)

    def _iterate(
        self, handler: Optional[str], state: Optional[Union[State, str]], limit: Optional[int], size: Optional[int]
    ) -> Iterator[Task]:
        if limit == 0:
            return
        count = 0
        cursor: Optional[str] = None
        seen_cursors = set()
        while True:
            try:
                page = self.list_page(handler=handler, state=state, limit=size, cursor=cursor)
            except AxError as error:
                # Drop the client's frames: the traceback restarts here.
                error.__traceback__ = None
                raise error
            for t in page.tasks:
                yield t
                count += 1
                if limit is not None and count >= limit:
                    return
            if not page.next_cursor or page.next_cursor in seen_cursors:
                return
            seen_cursors.add(page.next_cursor)
            cursor = page.next_cursor

    # An error while iterating shows as raised "in list", like the errors of
    # the methods decorated with _public.
    _iterate.__code__ = _renamed(_iterate.__code__, "list", "Client.list")

    @_public
    def list_page(
        self,
        handler: Optional[str] = None,
        state: Optional[Union[State, str]] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> TaskPage:
        """Fetch one page of ``GET /v1/tasks``.

        Args:
            handler, state: filters, as for :meth:`list`.
            limit: the most tasks in the page. Defaults to the sidecar's
                page size.
            cursor: the ``next_cursor`` of the previous page; ``None`` for
                the first page.
        """
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise BadRequest(f"limit must be an int >= 1, got {limit!r}")
        params: List[Tuple[str, str]] = []
        if handler is not None:
            params.append(("handler", handler))
        if state is not None:
            params.append(("state", str(state.value if isinstance(state, State) else state)))
        if limit is not None:
            params.append(("limit", str(limit)))
        if cursor:
            params.append(("cursor", cursor))
        path = _TASKS + ("?" + urllib.parse.urlencode(params, quote_via=urllib.parse.quote) if params else "")
        doc = self._json("GET", path)
        if not isinstance(doc, Mapping) or not isinstance(doc.get("tasks", []), list):
            raise AxError(f"GET {path}: unexpected answer: {str(doc)[:200]}")
        try:
            tasks = [Task.from_json(t) for t in doc.get("tasks") or []]
        except ValueError as e:
            raise AxError(f"GET {path}: cannot decode answer: {e}") from None
        return TaskPage(tasks=tasks, next_cursor=doc.get("next_cursor") or None)

    # ------------------------------------------------------------- executors

    @_public
    def heartbeat(self, id: str, attempt: int) -> Optional[Task]:
        """Extend the deadline of a running attempt (``attempt`` is the
        ``Ax-Attempt`` of the callback) and return the task (``None`` if the
        sidecar answered without a body). Raises :class:`Conflict` when the
        attempt is not the current one (stale: it timed out and was given to
        another executor, or the task was cancelled), :class:`NotFound` for
        an unknown task."""
        path = _task_path(id, "/heartbeat")
        body = json.dumps({"attempt": _check_attempt(attempt)}).encode()
        _, _, data = self._request("POST", path, body, replayable=True)
        return self._maybe_task("POST", path, data)

    @_public
    def report_result(
        self, id: str, attempt: int, status: str = RESULT_SUCCESS, error: Optional[str] = None, *, result: Any = None
    ) -> Optional[Task]:
        """Report the outcome of an attempt whose callback answered 202
        (:class:`~axsched.Async`).

        Args:
            id: the task id.
            attempt: the ``Ax-Attempt`` of the callback.
            status: ``"success"`` (:data:`RESULT_SUCCESS`), ``"failed"``
                (retried with backoff) or ``"permanent"`` (FAILED, never
                retried). Defaults to ``"success"``.
            error: what went wrong, recorded as the task's last error.
            result: with success, the run's result: any JSON-encodable
                value (at most 64 KiB encoded), shown by :meth:`run`.

        Returns the task in its new state (``None`` if the sidecar answered
        without a body). A report naming an old attempt is ignored or
        answered with :class:`Conflict`; reporting twice is safe.
        """
        if status not in _RESULTS:
            raise BadRequest(f"status must be one of {', '.join(_RESULTS)}, got {status!r}")
        doc: Dict[str, Any] = {"attempt": _check_attempt(attempt), "status": status}
        if error:
            doc["error"] = str(error)
        if result is not None:
            doc["result"] = result
        path = _task_path(id, "/result")
        body = utf8_json(doc)
        _, _, data = self._request("POST", path, body, replayable=True)
        return self._maybe_task("POST", path, data)

    @_public
    def register_executor(
        self,
        name: str,
        handlers: Sequence[str],
        url: str,
        *,
        min_concurrency: Optional[int] = None,
        max_concurrency: Optional[int] = None,
        timeout: Optional[Duration] = None,
    ) -> Dict[str, Any]:
        """Register an executor on the local node: the sidecar will call
        ``url`` for tasks of ``handlers``. Registering the same name again
        replaces the registration.

        Args:
            name: a name for the executor, unique on the node: 1 to 128 of
                ``A-Z a-z 0-9 . _ : -``.
            handlers: handler patterns: a name (``"order.timeout"``), a
                prefix ending in ``*`` (``"order.*"``), or ``"*"`` for every
                handler.
            url: ``unix:///abs/path.sock`` or ``http://127.0.0.1:PORT``.
            min_concurrency, max_concurrency: bounds of the callbacks at
                once (the sidecar adapts between them). Default to the
                sidecar's.
            timeout: bounds a callback, a timedelta or seconds. Defaults to
                each task's timeout.

        Returns the sidecar's answer (a JSON object, possibly empty).
        Raises :class:`NotFound` from a sidecar without this API (older
        versions take executors only from ``--executor`` flags).
        """
        _check_executor_name(name)
        if isinstance(handlers, str):
            raise BadRequest("handlers must be a list of handler names, not a string")
        doc: Dict[str, Any] = {"name": name, "handlers": list(handlers), "url": url}
        if min_concurrency is not None:
            doc["min_concurrency"] = min_concurrency
        if max_concurrency is not None:
            doc["max_concurrency"] = max_concurrency
        if timeout is not None:
            doc["timeout"] = format_duration(timeout, "timeout")
        body = utf8_json(doc)
        out = self._json("POST", "/v1/executors", body, replayable=True, allow_empty=True)
        return dict(out) if isinstance(out, Mapping) else {}

    @_public
    def executors(self) -> List[Dict[str, Any]]:
        """The executors registered on the local node (``GET /v1/executors``),
        as JSON objects (``name``, ``handlers``, ``url``, ...), as the API
        sends them: ``min_concurrency`` and ``max_concurrency`` are absent
        for an executor registered without them (the node's default
        applies), as ``timeout`` is."""
        doc = self._json("GET", "/v1/executors")
        items = doc.get("executors") if isinstance(doc, Mapping) else None
        if not isinstance(items, list):
            raise AxError(f"GET /v1/executors: unexpected answer: {str(doc)[:200]}")
        return [dict(e) for e in items if isinstance(e, Mapping)]

    @_public
    def unregister_executor(self, name: str) -> None:
        """Remove the executor registered under ``name`` from the local node.
        Raises :class:`NotFound` when there is none."""
        _check_executor_name(name)
        self._request("DELETE", "/v1/executors/" + urllib.parse.quote(name, safe=""), replayable=True)

    # --------------------------------------------------------------- cluster

    @_public
    def cluster(self) -> ClusterInfo:
        """Describe the Raft group as the local sidecar sees it: members,
        leader, term and indexes."""
        doc = self._json("GET", "/v1/cluster")
        if not isinstance(doc, Mapping):
            raise AxError(f"GET /v1/cluster: unexpected answer: {str(doc)[:200]}")
        try:
            return ClusterInfo.from_json(doc)
        except (TypeError, ValueError) as e:
            raise AxError(f"GET /v1/cluster: cannot decode answer: {e}") from None

    @_public
    def ready(self) -> None:
        """Return when the sidecar is ready to serve (a leader is known and
        the local state has caught up). Raises :class:`NotReady` when the
        sidecar answered but is not ready, :class:`Unavailable` when it did
        not answer. Does not retry: see :meth:`wait_ready`."""
        try:
            self._request("GET", "/readyz", retry_no_leader=False)
        except NoLeader as e:  # not ready, whatever the reason
            raise NotReady(e.message, status=e.status, retry_after=e.retry_after) from None

    @_public
    def wait_ready(self, timeout: float = 30.0, interval: float = 0.1) -> None:
        """Poll :meth:`ready` every ``interval`` seconds (default 0.1) until
        the sidecar is ready, for at most ``timeout`` seconds (default 30),
        then raise the last :class:`NotReady` or :class:`Unavailable`. For
        start-up, when the sidecar may not have created its socket yet:
        while the socket is missing it logs so once, at INFO on the
        ``axsched`` logger."""
        deadline = self._monotonic() + timeout
        logged = False
        while True:
            try:
                self.ready()
                return
            except (NotReady, Unavailable) as e:
                if self._monotonic() + interval > deadline:
                    raise
                if not logged and isinstance(e, Unavailable) and e.errno == errno.ENOENT:
                    log.info(
                        "waiting up to %gs for the sidecar: its socket %s does not exist yet", timeout, self._socket_path
                    )
                    logged = True
            self._sleep(interval)

    @_public
    def wait(self, id: str, timeout: Optional[float] = None, poll: float = 0.1) -> Task:
        """Poll :meth:`get` every ``poll`` seconds (default 0.1) until the
        task is terminal (SUCCESS, DEAD, FAILED or CANCELLED) and return it.

        Args:
            id: the task id.
            timeout: give up after this many seconds; ``None`` (the default)
                waits for ever.
            poll: seconds between two reads of the task.

        Raises ``TimeoutError`` when ``timeout`` passes first; its ``task``
        attribute is the task as last read. A recurring task is terminal
        only after its last run (``repeats``, ``until``) or a cancel. The
        errors of :meth:`get` (:class:`NotFound`, :class:`Unavailable`, ...)
        are raised as they come.
        """
        if timeout is not None and (isinstance(timeout, bool) or not timeout >= 0):
            raise ValueError(f"timeout must be a number of seconds >= 0 or None, got {timeout!r}")
        if isinstance(poll, bool) or not poll > 0:
            raise ValueError(f"poll must be a positive number of seconds, got {poll!r}")
        deadline = None if timeout is None else self._monotonic() + timeout
        while True:
            task = self.get(id)
            if task.terminal:
                return task
            pause = poll
            if deadline is not None:
                left = deadline - self._monotonic()
                if left <= 0:
                    err = TimeoutError(f"task {id!r} is still {task.state} after {timeout:g}s")
                    err.task = task  # type: ignore[attr-defined]
                    raise err
                pause = min(poll, left)
            self._sleep(pause)

    @_public
    def health(self) -> None:
        """Return when the sidecar process answers ``GET /healthz``
        (liveness only); raise :class:`Unavailable` otherwise."""
        self._request("GET", "/healthz", retry_no_leader=False)

    # ------------------------------------------------------------- transport

    def _task(self, method: str, path: str, body: Optional[bytes] = None, replayable: bool = False) -> Task:
        _, _, data = self._request(method, path, body, replayable=replayable)
        return self._decode_task(method, path, data)

    def _maybe_task(self, method: str, path: str, data: bytes) -> Optional[Task]:
        """The task in an answer, or None for an answer that is not one."""
        try:
            doc = json.loads(data.decode("utf-8")) if data.strip() else None
        except (UnicodeDecodeError, ValueError):
            return None
        if isinstance(doc, Mapping) and isinstance(doc.get("id"), str):
            return self._decode_task(method, path, data)
        return None

    @staticmethod
    def _decode_task(method: str, path: str, data: bytes) -> Task:
        try:
            return Task.from_json(json.loads(data.decode("utf-8")))
        except (UnicodeDecodeError, ValueError) as e:
            raise AxError(f"{method} {path}: cannot decode answer: {e}") from None

    def _json(
        self,
        method: str,
        path: str,
        body: Optional[bytes] = None,
        *,
        replayable: bool = False,
        allow_empty: bool = False,
    ) -> Any:
        _, _, data = self._request(method, path, body, replayable=replayable)
        if allow_empty and not data.strip():
            return None
        try:
            return json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise AxError(f"{method} {path}: cannot decode answer: {e}") from None

    def _request(
        self,
        method: str,
        path: str,
        body: Optional[bytes] = None,
        *,
        replayable: bool = False,
        retry_no_leader: bool = True,
        headers: Optional[Mapping[str, str]] = None,
    ) -> Tuple[int, http.client.HTTPMessage, bytes]:
        """Send one API call, retrying ``no_leader`` answers; return status,
        headers and body of a 2xx answer, raise for anything else.
        ``headers`` are sent in addition to the client's own (``Accept``,
        ``User-Agent``, ``Content-Type``)."""
        backoff = self.no_leader_backoff
        retry = 0
        while True:
            try:
                return self._request_once(method, path, body, replayable, headers)
            except NoLeader as e:
                if not retry_no_leader or retry >= self.no_leader_retries:
                    raise
                wait = max(e.retry_after or 0.0, backoff)
                if wait > self.no_leader_max_wait:
                    raise
            self._sleep(wait)
            backoff *= 2
            retry += 1

    def _request_once(
        self,
        method: str,
        path: str,
        body: Optional[bytes],
        replayable: bool,
        extra_headers: Optional[Mapping[str, str]] = None,
    ) -> Tuple[int, http.client.HTTPMessage, bytes]:
        headers = {"Accept": "application/json", "User-Agent": _USER_AGENT}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if extra_headers:
            headers.update(extra_headers)
        conn, reused = self._get_conn()
        try:
            try:
                status, msg, data, will_close = self._exchange(conn, reused, method, path, body, headers, replayable)
            except _Stale:
                conn.close()
                conn, reused = self._new_conn(), False
                status, msg, data, will_close = self._exchange(conn, reused, method, path, body, headers, replayable)
        except BaseException:
            conn.close()
            raise
        if will_close:
            conn.close()
        else:
            self._put_conn(conn)
        if 200 <= status < 300:
            return status, msg, data
        raise error_from_response(status, data, parse_retry_after(msg.get("Retry-After")))

    def _exchange(
        self,
        conn: _UnixHTTPConnection,
        reused: bool,
        method: str,
        path: str,
        body: Optional[bytes],
        headers: Dict[str, str],
        replayable: bool,
    ) -> Tuple[int, http.client.HTTPMessage, bytes, bool]:
        if conn.sock is None:
            try:
                conn.connect()
            except (socket.timeout, TimeoutError) as e:
                raise self._unavailable(f"cannot reach sidecar at {self._socket_path}: connect timed out", e, False)
            except OSError as e:
                raise self._unavailable(f"cannot reach sidecar at {self._socket_path}: {e}", e, False)
        try:
            conn.request(method, path, body=body, headers=headers)
        except (BrokenPipeError, ConnectionResetError) as e:
            # On a Unix socket, writing to a connection the sidecar closed
            # fails at once: nothing was sent, a fresh connection is safe.
            if reused:
                raise _Stale() from None
            early = self._early_answer(conn)
            if early is not None:
                return early
            raise self._unavailable(f"lost connection to sidecar at {self._socket_path}: {e}", e, True)
        except (socket.timeout, TimeoutError) as e:
            raise self._timeout_error(e)
        except OSError as e:
            raise self._unavailable(f"lost connection to sidecar at {self._socket_path}: {e}", e, True)
        try:
            resp = conn.getresponse()
            data = resp.read(_RESPONSE_MAX_BYTES + 1)
        except (socket.timeout, TimeoutError) as e:
            raise self._timeout_error(e)
        except (http.client.RemoteDisconnected, ConnectionResetError) as e:
            if reused and replayable:
                raise _Stale() from None
            raise self._unavailable(self._lost(e), e, True)
        except (OSError, http.client.HTTPException) as e:
            raise self._unavailable(self._lost(e), e, True)
        if len(data) > _RESPONSE_MAX_BYTES:
            raise AxError(f"{method} {path}: answer over {_RESPONSE_MAX_BYTES} bytes", status=resp.status)
        return resp.status, resp.msg, data, bool(resp.will_close)

    def _early_answer(
        self, conn: _UnixHTTPConnection
    ) -> Optional[Tuple[int, http.client.HTTPMessage, bytes, bool]]:
        """The answer the sidecar sent before closing a connection whose
        request it did not read whole (413 payload_too_large for a body over
        its limit), or None when there is none to read."""
        try:
            resp = conn.getresponse()
            data = resp.read(_RESPONSE_MAX_BYTES + 1)
        except (OSError, http.client.HTTPException):
            return None
        if len(data) > _RESPONSE_MAX_BYTES:
            return None
        return resp.status, resp.msg, data, True

    def _lost(self, e: BaseException) -> str:
        detail = str(e) or type(e).__name__
        if isinstance(e, http.client.RemoteDisconnected):
            detail = "the sidecar closed the connection without answering"
        return f"lost connection to sidecar at {self._socket_path}: {detail}"

    def _timeout_error(self, e: BaseException) -> Unavailable:
        return self._unavailable(
            f"no answer from sidecar at {self._socket_path} within {self._timeout:g}s"
            if self._timeout is not None
            else f"no answer from sidecar at {self._socket_path}",
            e,
            True,
        )

    def _unavailable(self, message: str, cause: BaseException, sent: bool) -> Unavailable:
        err = Unavailable(message, socket_path=self._socket_path, cause=cause, request_sent=sent)
        # Keep tracebacks to our one line: the cause is reachable as err.cause.
        err.__suppress_context__ = True
        return err

    def _new_conn(self) -> _UnixHTTPConnection:
        return _UnixHTTPConnection(self._socket_path, self._timeout)

    def _get_conn(self) -> Tuple[_UnixHTTPConnection, bool]:
        now = time.monotonic()
        stale: List[_UnixHTTPConnection] = []
        found: Optional[_UnixHTTPConnection] = None
        with self._lock:
            while self._idle:
                conn, since = self._idle.pop()
                if now - since > _IDLE_MAX_AGE:
                    stale.append(conn)
                    continue
                found = conn
                break
        for conn in stale:
            conn.close()
        if found is not None:
            return found, True
        return self._new_conn(), False

    def _put_conn(self, conn: _UnixHTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < _IDLE_MAX:
                self._idle.append((conn, time.monotonic()))
                return
        conn.close()


def _batch_error(item: Mapping[str, Any]) -> AxError:
    """The error of one failed batch item: ``{"status": 409, "error":
    {"code", "message"}}``."""
    detail = item.get("error") if isinstance(item.get("error"), Mapping) else {}
    status = item.get("status")
    if isinstance(status, bool) or not isinstance(status, int):
        status = _status_of(detail.get("code"))
    body = json.dumps({"error": {"code": detail.get("code", ""), "message": detail.get("message", ""),
                                 "depth": detail.get("depth"), "limit": detail.get("limit")}})
    return error_from_response(status, body.encode())


def _batch_result(doc: Any, n: int, backlog_warning: Optional[str] = None) -> BatchResult:
    """Read the answer of ``POST /v1/tasks/batch``: ``{"results": [...]}``
    with one result per request, in order, either
    ``{"status": 201 or 200, "task": {...}}`` or
    ``{"status": 409, "error": {"code", "message"}}``. A task is the full
    view, or only ``{"id", "state"}`` when the sidecar applied
    ``Prefer: return=minimal`` (:meth:`Task.from_json` leaves the rest at
    the defaults). ``backlog_warning`` (the answer's header) is copied to
    every task."""
    results = doc.get("results") if isinstance(doc, Mapping) else None
    if not isinstance(results, list):
        raise AxError(f"POST /v1/tasks/batch: unexpected answer: {str(doc)[:200]}")
    if len(results) != n:
        raise AxError(f"POST /v1/tasks/batch: {len(results)} results for {n} tasks")
    tasks: List[Optional[Task]] = []
    errors: List[Optional[AxError]] = []
    try:
        for r in results:
            if not isinstance(r, Mapping):
                r = {}
            if isinstance(r.get("task"), Mapping):
                task = Task.from_json(r["task"])
                task.backlog_warning = backlog_warning
                tasks.append(task)
                errors.append(None)
            elif isinstance(r.get("error"), Mapping):
                tasks.append(None)
                errors.append(_batch_error(r))
            else:
                tasks.append(None)
                errors.append(AxError(f"POST /v1/tasks/batch: a result with neither task nor error: {str(r)[:200]}"))
    except ValueError as e:
        raise AxError(f"POST /v1/tasks/batch: cannot decode answer: {e}") from None
    return BatchResult(tasks=tasks, errors=errors)


def _status_of(code: Any) -> int:
    """The HTTP status the sidecar sends with an error code (500 if unknown)."""
    if isinstance(code, str) and code in ERROR_CODES:
        return ERROR_CODES[code].default_status or 500
    return 500


def _encode_flow(flow: Mapping[str, Any]) -> bytes:
    """The JSON body of a flow submit: each stage's ``payload`` encoded as
    a task's (:func:`_encode_payload`: a RawJSON byte for byte, bytes
    refused) and spliced in; any other value JSON cannot encode raises
    :class:`BadRequest` naming its field."""
    doc = {k: v for k, v in flow.items() if k != "stages"}
    stages = flow.get("stages")
    parts = []
    if isinstance(stages, (list, tuple)):
        for i, st in enumerate(stages):
            if not isinstance(st, Mapping):
                parts.append(_json_field(f"stages[{i}]", st))
                continue
            rest = _json_field(f"stages[{i}]", {k: v for k, v in st.items() if k != "payload"})
            if "payload" in st and st["payload"] is not None:
                where = f"stages[{i}] ({st.get('name', '?')})"
                if isinstance(st["payload"], (bytes, bytearray, memoryview)):
                    # A stage has no payload_bytes= (submit's hint): its
                    # binary payload is the stage's "payload_base64".
                    raise BadRequest(
                        f"{where}: payload is bytes; put binary data in the stage's \"payload_base64\" "
                        "(base64 text), or already encoded JSON as RawJSON(...)"
                    )
                try:
                    payload = _encode_payload(st["payload"])
                except BadRequest as e:
                    raise BadRequest(f"{where}: {e.message}") from None
                rest = (rest[:-1] + b"," if rest != b"{}" else b"{") + b'"payload":' + payload + b"}"
            parts.append(rest)
    elif "stages" in flow:
        doc["stages"] = stages  # not a list: the sidecar names the problem
    body = _json_field("flow", doc)
    if not isinstance(stages, (list, tuple)):
        return body
    joined = b'"stages":[' + b",".join(parts) + b"]"
    return (body[:-1] + b"," if body != b"{}" else b"{") + joined + b"}"


def _json_field(name: str, value: Any) -> bytes:
    """value as compact JSON in UTF-8, or :class:`BadRequest` naming name."""
    if isinstance(value, Mapping):
        try:
            return utf8_json(value, compact=True)
        except (TypeError, ValueError) as e:
            raise BadRequest(f"{name}: cannot encode as JSON: {e}") from None
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except (TypeError, ValueError, UnicodeEncodeError) as e:
        raise BadRequest(f"{name}: cannot encode as JSON: {e}") from None
