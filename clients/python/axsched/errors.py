"""Exceptions raised by :mod:`axsched`.

Every error the sidecar answers becomes an :class:`AxError` subclass chosen
by the ``code`` of the error body (``{"error": {"code", "message"}}``), or by
the HTTP status when the body carries no code the client knows. Every
exception has ``status`` (HTTP status, ``None`` when the error happened in
the client), ``code``, ``message`` and ``retry_after`` (seconds from the
``Retry-After`` header, ``None`` when absent)::

    try:
        client.submit("order.timeout", {"order_id": 42}, id="order|42")
    except axsched.QueueFull as e:
        time.sleep(e.retry_after or 1)
    except axsched.Conflict:
        ...  # same id, different spec
    except axsched.Unavailable as e:
        print(e)  # ax: cannot reach sidecar at ./ax.sock: [Errno 2] No such file or directory

The codes mirror the error table of the API (``clients/go/axapi/codes.go``,
which the sidecar serves); a test fails when the two lists drift apart.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Mapping, Optional, Tuple, Type

__all__ = [
    "AxError",
    "BadRequest",
    "InvalidJSON",
    "NotFound",
    "HandlerNotFound",
    "MethodNotAllowed",
    "Conflict",
    "TaskFinished",
    "PayloadTooLarge",
    "QueueFull",
    "NoLeader",
    "NotReady",
    "StorageUnavailable",
    "InternalError",
    "Unavailable",
    "ERROR_CODES",
    "error_from_response",
]

#: How many characters of a non-JSON error body are kept as the message.
_ERROR_BODY_MAX_MESSAGE = 512


class AxError(Exception):
    """Base class of every error of this package.

    Attributes:
        message: the human-readable explanation (the sidecar's
            ``error.message``).
        status: the HTTP status code (404, 409, 429, 503, ...), or ``None``
            when the error was detected by the client before anything was
            sent, or when no answer arrived (:class:`Unavailable`).
        code: the machine-readable error code (``"not_found"``, ...), or
            ``None`` when the answer carried none.
        retry_after: seconds to wait before trying again, from the
            ``Retry-After`` header (sent with 429 and 503), else ``None``.
    """

    #: The API error code of this class (``None`` for the base class).
    default_code: Optional[str] = None
    #: The HTTP status the sidecar sends with ``default_code``.
    default_status: Optional[int] = None

    def __init__(
        self,
        message: str,
        *,
        status: Optional[int] = None,
        code: Optional[str] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code if code is not None else self.default_code
        self.retry_after = retry_after

    def __str__(self) -> str:
        """One line: ``ax: <message> (<code>, http <status>[, retry after <n>s])``."""
        if self.status is None:
            if self.code is None:
                return f"ax: {self.message}"
            return f"ax: {self.message} ({self.code})"
        after = f", retry after {self.retry_after:g}s" if self.retry_after is not None else ""
        return f"ax: {self.message} ({self.code or 'no code'}, http {self.status}{after})"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(message={self.message!r}, status={self.status!r}, "
            f"code={self.code!r}, retry_after={self.retry_after!r})"
        )

    def __reduce__(self) -> Tuple[Any, ...]:
        return (_rebuild, (type(self), self.message), dict(self.__dict__))


def _rebuild(cls: Type[AxError], message: str) -> AxError:
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    return err


class BadRequest(AxError, ValueError):
    """The request is invalid: code ``bad_request``, HTTP 400 (a missing
    handler, a negative delay, an unknown field; the message names the
    field). Also raised by the client, with ``status=None``, for a call that
    cannot be valid (an empty task id, both ``payload`` and
    ``payload_bytes``). It is a :class:`ValueError` too."""

    default_code = "bad_request"
    default_status = 400


class InvalidJSON(BadRequest):
    """The request body was not valid JSON: code ``invalid_json``, HTTP 400.
    The client always sends valid JSON, so this points at a bug."""

    default_code = "invalid_json"


class InvalidTraceparent(BadRequest):
    """A submit's ``traceparent`` is not a valid W3C traceparent: code
    ``invalid_traceparent``, HTTP 400."""

    default_code = "invalid_traceparent"


class InvalidTracestate(BadRequest):
    """A submit's ``tracestate`` is not a valid W3C tracestate (or came
    without a ``traceparent``): code ``invalid_tracestate``, HTTP 400."""

    default_code = "invalid_tracestate"


class InvalidShards(BadRequest):
    """A submit's ``shards`` is invalid (not an object, a field of the wrong
    type, both or neither of ``count`` and ``ask``, a bound outside
    1..1024): code ``invalid_shards``, HTTP 400."""

    default_code = "invalid_shards"


class NotFound(AxError):
    """The task (or executor, or route) does not exist: code ``not_found``,
    HTTP 404. A sidecar too old to have a route also answers 404; the
    message then says "no route for ..."."""

    default_code = "not_found"
    default_status = 404


class HandlerNotFound(NotFound):
    """A pause or resume named a handler that has no task, no executor and
    no pause (a typo, most likely): code ``handler_not_found``, HTTP 404.
    It is a :class:`NotFound` too."""

    default_code = "handler_not_found"


class MethodNotAllowed(AxError):
    """The route exists but not for this method: code ``method_not_allowed``,
    HTTP 405. Seen when the sidecar is older than the client."""

    default_code = "method_not_allowed"
    default_status = 405


class Conflict(AxError):
    """A task with the same id exists with a different spec and
    ``overwrite`` was not set; or a heartbeat or result named an attempt
    that is not the current one: code ``conflict``, HTTP 409."""

    default_code = "conflict"
    default_status = 409


class TaskFinished(Conflict):
    """A pause named a finished task (``SUCCESS``, ``DEAD``, ``FAILED`` or
    ``CANCELLED``): it has no run to pause. Code ``task_finished``, HTTP
    409; it is a :class:`Conflict` too."""

    default_code = "task_finished"


class PayloadTooLarge(AxError):
    """The payload or request body is over the sidecar's limit (1 MiB of
    payload by default): code ``payload_too_large``, HTTP 413."""

    default_code = "payload_too_large"
    default_status = 413


class QueueFull(AxError):
    """The sidecar applies backpressure: code ``queue_full``, HTTP 429. Wait
    ``retry_after`` seconds (defaults to 1 when the header is missing) and
    try again; the client never retries these by itself.

    Attributes:
        depth: the handler's backlog when the submit was refused (due runs
            not yet delivered), from the error body's ``error.depth``;
            ``None`` when the sidecar did not send it.
        limit: the backlog's bound (the sidecar's ``--backlog-limit``),
            from ``error.limit``; ``None`` when not sent.

    A successful submit warns earlier, from 80 % of the bound, in
    ``Task.backlog_warning``.
    """

    default_code = "queue_full"
    default_status = 429
    depth: Optional[int] = None
    limit: Optional[int] = None

    def __init__(
        self,
        message: str,
        *,
        status: Optional[int] = None,
        code: Optional[str] = None,
        retry_after: Optional[float] = None,
        depth: Optional[int] = None,
        limit: Optional[int] = None,
    ) -> None:
        super().__init__(message, status=status, code=code, retry_after=retry_after)
        self.depth = depth
        self.limit = limit

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(message={self.message!r}, status={self.status!r}, "
            f"code={self.code!r}, retry_after={self.retry_after!r}, depth={self.depth!r}, limit={self.limit!r})"
        )


class NoLeader(AxError):
    """The cluster has no Raft leader (an election is running, or quorum is
    lost): code ``no_leader``, HTTP 503. The client retries these a few
    times, honouring ``retry_after``, before raising."""

    default_code = "no_leader"
    default_status = 503


class NotReady(AxError):
    """The sidecar is up but cannot serve yet (starting, catching up,
    shutting down), or the request ran out of time inside the sidecar: code
    ``not_ready``, HTTP 503. Raised by :meth:`Client.ready` when the sidecar
    is not ready."""

    default_code = "not_ready"
    default_status = 503


class StorageUnavailable(AxError):
    """The sidecar's disk does not take writes (full, or failing): code
    ``storage_unavailable``, HTTP 503, with ``retry_after`` (5 s). Reads
    still work; nothing stored was changed. Writes succeed again once the
    disk has room; the client does not retry these by itself."""

    default_code = "storage_unavailable"
    default_status = 503


class InternalError(AxError):
    """The sidecar failed unexpectedly: code ``internal``, HTTP 500. The
    detail is in the sidecar's log."""

    default_code = "internal"
    default_status = 500


class Unavailable(AxError):
    """No answer from the sidecar: the socket does not exist, nobody listens
    on it, the connection broke, or no answer came within the client's
    timeout. ``str(e)`` is one line naming the socket, such as
    ``ax: cannot reach sidecar at ./ax.sock: [Errno 2] No such file or directory``.

    Attributes:
        socket_path: the socket the client tried.
        cause: the underlying exception (an ``OSError`` or an
            ``http.client.HTTPException``). It is kept here rather than
            chained, so that a traceback ends with this one line.
        request_sent: ``False`` when the connection could not be opened (the
            request certainly did nothing); ``True`` when it broke later (a
            submit may or may not have been applied: submitting again with
            the same id is safe).
        errno: ``cause.errno`` when the cause is an ``OSError``, else ``None``.
    """

    def __init__(
        self,
        message: str,
        *,
        socket_path: str = "",
        cause: Optional[BaseException] = None,
        request_sent: bool = False,
    ) -> None:
        super().__init__(message)
        self.socket_path = socket_path
        self.cause = cause
        self.request_sent = request_sent

    @property
    def errno(self) -> Optional[int]:
        return getattr(self.cause, "errno", None)


# Tracebacks and reprs name the classes as the package exports them
# (axsched.Unavailable, not axsched.errors.Unavailable).
for _cls in (AxError, BadRequest, InvalidJSON, InvalidTraceparent, InvalidTracestate, InvalidShards, NotFound, HandlerNotFound, MethodNotAllowed, Conflict,
             TaskFinished, PayloadTooLarge, QueueFull, NoLeader, NotReady, StorageUnavailable, InternalError, Unavailable):
    _cls.__module__ = "axsched"
del _cls

#: Every error code the sidecar sends, mapped to its exception class, in the
#: order of the API's error table (``clients/go/axapi/codes.go``).
ERROR_CODES: Dict[str, Type[AxError]] = {
    "bad_request": BadRequest,
    "invalid_json": InvalidJSON,
    "invalid_traceparent": InvalidTraceparent,
    "invalid_tracestate": InvalidTracestate,
    "invalid_shards": InvalidShards,
    "not_found": NotFound,
    "handler_not_found": HandlerNotFound,
    "method_not_allowed": MethodNotAllowed,
    "conflict": Conflict,
    "task_finished": TaskFinished,
    "payload_too_large": PayloadTooLarge,
    "queue_full": QueueFull,
    "no_leader": NoLeader,
    "not_ready": NotReady,
    "storage_unavailable": StorageUnavailable,
    "internal": InternalError,
}

# The fallback when an error answer has no code the client knows (for example
# a plain-text body from something in between); 503 without a code is taken
# as "not ready", never as "no leader", so that it is not retried.
_STATUS_CLASSES: Dict[int, Type[AxError]] = {
    cls.default_status: cls for cls in ERROR_CODES.values() if cls not in (InvalidJSON, InvalidTraceparent, InvalidTracestate, InvalidShards, HandlerNotFound, TaskFinished, NoLeader, StorageUnavailable)
}


def error_from_response(status: int, body: bytes, retry_after: Optional[float] = None) -> AxError:
    """Build the exception for a non-2xx answer of the sidecar: the class of
    the body's ``error.code`` (see :data:`ERROR_CODES`), else of the HTTP
    status, else :class:`AxError`."""
    code: Optional[str] = None
    message: Optional[str] = None
    detail: Mapping[str, Any] = {}
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        doc = None
    if isinstance(doc, Mapping) and isinstance(doc.get("error"), Mapping):
        detail = doc["error"]
        if isinstance(detail.get("code"), str) and detail["code"]:
            code = detail["code"]
        if isinstance(detail.get("message"), str):
            message = detail["message"]
    if message is None:
        text = body.decode("utf-8", "replace").strip()
        if len(text) > _ERROR_BODY_MAX_MESSAGE:
            text = text[:_ERROR_BODY_MAX_MESSAGE] + "..."
        message = text
    if not message:
        from http import HTTPStatus

        try:
            message = HTTPStatus(status).phrase.lower()
        except ValueError:
            message = f"http {status}"
    cls = ERROR_CODES.get(code or "") or _STATUS_CLASSES.get(status) or AxError
    err = cls(message, status=status, retry_after=retry_after)
    # The code as sent: an unknown code is kept so callers can still branch
    # on it, and a missing one stays None.
    err.code = code
    if isinstance(err, QueueFull):
        err.depth = _count(detail.get("depth"))
        err.limit = _count(detail.get("limit"))
    return err


def _count(v: Any) -> Optional[int]:
    """An integer of an error body (``error.depth``), ``None`` if it is not one."""
    if isinstance(v, bool) or not isinstance(v, int):
        return None
    return v
