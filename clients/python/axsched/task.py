"""Tasks, submit requests and cluster information, as the client sees them."""

from __future__ import annotations

import base64
import binascii
import enum
import json
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union, cast

from ._wire import Duration, duration_to_ns, format_duration, format_time, parse_duration, parse_time
from .errors import AxError, BadRequest

__all__ = [
    "PRIORITY_HIGHEST",
    "PRIORITY_DEFAULT",
    "PRIORITY_LOWEST",
    "TASK_TIMEOUT_DEFAULT",
    "MAX_ATTEMPTS_DEFAULT",
    "PAYLOAD_MAX_BYTES",
    "EVERY_MIN",
    "BACKOFF_DEFAULT",
    "State",
    "RawJSON",
    "Backoff",
    "SubmitRequest",
    "Task",
    "TaskPage",
    "BatchResult",
    "ClusterInfo",
    "Member",
    "StorageStatus",
]

#: The highest priority: picked first.
PRIORITY_HIGHEST = 0
#: The priority of a task submitted without one.
PRIORITY_DEFAULT = 2
#: The lowest priority; such tasks still progress (weighted round robin
#: with ageing).
PRIORITY_LOWEST = 4
#: How long one attempt may run when ``timeout`` is not given (30 seconds).
TASK_TIMEOUT_DEFAULT = timedelta(seconds=30)
#: Attempts (first one included) before a task is ``DEAD``, when
#: ``max_attempts`` is not given.
MAX_ATTEMPTS_DEFAULT = 4
#: The sidecar's default limit on a payload: 1 MiB.
PAYLOAD_MAX_BYTES = 1 << 20
#: The shortest interval of an ``every`` schedule: one second.
EVERY_MIN = timedelta(seconds=1)


class State(str, enum.Enum):
    """The state of a task, upper case on the wire. A ``State`` compares
    equal to its string (``State.WAITING == "WAITING"``).

    A task goes WAITING → RUNNING → SUCCESS, back to WAITING for a retry
    (with backoff), or ends DEAD (attempts exhausted), FAILED (the executor
    said not to retry) or CANCELLED.
    """

    #: Scheduled and not yet assigned to an executor: not due yet, or
    #: waiting for a retry or for executor capacity.
    WAITING = "WAITING"
    #: An attempt is assigned to an executor.
    RUNNING = "RUNNING"
    #: An executor answered 2xx (or reported success).
    SUCCESS = "SUCCESS"
    #: Every attempt failed; kept for inspection and :meth:`Client.retry`.
    DEAD = "DEAD"
    #: An executor answered with a permanent failure (a 4xx other than 429).
    FAILED = "FAILED"
    #: Cancelled with :meth:`Client.cancel`.
    CANCELLED = "CANCELLED"

    def __str__(self) -> str:
        return self.value

    @property
    def terminal(self) -> bool:
        """True for SUCCESS, DEAD, FAILED and CANCELLED: the task will not
        run again unless it is re-run by hand."""
        return self in _TERMINAL


_TERMINAL = frozenset({State.SUCCESS, State.DEAD, State.FAILED, State.CANCELLED})


def _state(value: Any) -> Union[State, str]:
    try:
        return State(value)
    except ValueError:
        return str(value)  # a state of a newer sidecar: kept as sent


class RawJSON:
    """A payload that is already encoded JSON, sent byte for byte (after a
    validity check) instead of being encoded with :func:`json.dumps`::

        client.submit("report.build", RawJSON('{"day": "2026-01-02"}'))
    """

    __slots__ = ("data",)

    def __init__(self, data: Union[str, bytes]) -> None:
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        try:
            json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise BadRequest(f"RawJSON: not valid JSON: {e}") from None
        self.data = raw

    def __repr__(self) -> str:
        return f"RawJSON({self.data!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RawJSON) and other.data == self.data

    def __hash__(self) -> int:
        return hash(self.data)


@dataclass(frozen=True)
class Backoff:
    """The retry backoff of a task's failed attempts: the n-th retry of a
    run waits ``initial × multiplier^(n-1)``, at most ``max``, spread by
    ± ``jitter`` (a fraction: 0.2 is ±20 %).

    In a submit (``backoff=``), a field left ``None`` keeps the sidecar's
    default for that field (:data:`BACKOFF_DEFAULT`: initial 2 s, max 30 s,
    multiplier 2, jitter 0.2), and ``jitter=0`` asks for none::

        client.submit("mail.send", payload, backoff=Backoff(initial=10, max=timedelta(minutes=10)))

    A mapping with these keys is accepted too (``{"initial": 2, "jitter":
    0}``). On the wire the durations are Go durations:
    ``Backoff(2, 30, 2, 0.2)`` is sent as
    ``{"initial":"2s","max":"30s","multiplier":2,"jitter":0.2}``.

    In a :class:`Task`, every field is the value in force, the durations as
    :class:`datetime.timedelta`.

    Attributes:
        initial: the wait before the first retry, > 0: a timedelta or
            seconds.
        max: bounds every wait, >= ``initial``: a timedelta or seconds.
        multiplier: grows the wait after each retry, >= 1.
        jitter: the random spread, from 0 to 1.
    """

    initial: Optional[Duration] = None
    max: Optional[Duration] = None
    multiplier: Optional[float] = None
    jitter: Optional[float] = None

    def to_json(self) -> Dict[str, Any]:
        """The ``backoff`` object of a submit: only the fields that are set.
        Raises :class:`BadRequest` for a value the sidecar would refuse,
        ``TypeError`` for a badly typed one."""
        out: Dict[str, Any] = {}
        initial = max_ = None
        if self.initial is not None:
            initial = duration_to_ns(self.initial, "backoff.initial")
            if initial <= 0:
                raise BadRequest(f"backoff.initial: must be > 0, got {format_duration(self.initial)}")
            out["initial"] = format_duration(self.initial, "backoff.initial")
        if self.max is not None:
            max_ = duration_to_ns(self.max, "backoff.max")
            if max_ <= 0:
                raise BadRequest(f"backoff.max: must be > 0, got {format_duration(self.max)}")
            out["max"] = format_duration(self.max, "backoff.max")
        if initial is not None and max_ is not None and max_ < initial:
            raise BadRequest(f"backoff.max: must be >= backoff.initial ({out['initial']}), got {out['max']}")
        if self.multiplier is not None:
            m = _number("backoff.multiplier", self.multiplier)
            if not m >= 1:
                raise BadRequest(f"backoff.multiplier: must be >= 1, got {m!r}")
            out["multiplier"] = m
        if self.jitter is not None:
            j = _number("backoff.jitter", self.jitter)
            if not 0 <= j <= 1:
                raise BadRequest(f"backoff.jitter: must be from 0 to 1, got {j!r}")
            out["jitter"] = j
        return out

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> "Backoff":
        """A Backoff from a mapping with the keys ``initial``, ``max``,
        ``multiplier`` and ``jitter`` (each optional). Unknown keys raise
        :class:`BadRequest`."""
        if not isinstance(m, Mapping):
            raise TypeError(f"backoff: want an axsched.Backoff or a mapping, got {type(m).__name__}")
        unknown = sorted(str(k) for k in m if k not in _BACKOFF_KEYS)
        if unknown:
            raise BadRequest(f"backoff: unknown key(s) {', '.join(unknown)}; known: {', '.join(_BACKOFF_KEYS)}")
        return cls(**m)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Backoff":
        """Read the ``backoff`` of a task view (Go durations). Raises
        ``ValueError`` for a malformed one."""
        try:
            return cls(
                initial=parse_duration(d["initial"]) if d.get("initial") is not None else None,
                max=parse_duration(d["max"]) if d.get("max") is not None else None,
                multiplier=float(d["multiplier"]) if d.get("multiplier") is not None else None,
                jitter=float(d["jitter"]) if d.get("jitter") is not None else None,
            )
        except (TypeError, ValueError) as e:
            raise ValueError(f"backoff: {e}") from None


_BACKOFF_KEYS = ("initial", "max", "multiplier", "jitter")

#: The backoff the sidecar applies to a task submitted without ``backoff``,
#: and the value of each field a :class:`Backoff` leaves ``None``. For
#: reference: changing it changes nothing on the sidecar.
BACKOFF_DEFAULT = Backoff(initial=timedelta(seconds=2), max=timedelta(seconds=30), multiplier=2.0, jitter=0.2)


def _number(field_name: str, v: Any) -> Union[int, float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{field_name}: want a number, got {type(v).__name__}")
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        raise BadRequest(f"{field_name}: must be a finite number, got {v!r}")
    return v


def _backoff(value: Union[Backoff, Mapping[str, Any]]) -> Backoff:
    return value if isinstance(value, Backoff) else Backoff.from_mapping(value)


def _shards(v: Mapping[str, Any]) -> Dict[str, Any]:
    """The ``shards`` object of a submit: its known keys with their types
    checked; the sidecar checks the rules (:class:`InvalidShards`)."""
    if not isinstance(v, Mapping):
        raise TypeError(f"shards: want a mapping like {{'count': 8}}, got {type(v).__name__}")
    unknown = set(v) - {"count", "ask", "max"}
    if unknown:
        raise BadRequest(f"shards: unknown keys {sorted(unknown)}; known: count, ask, max")
    out: Dict[str, Any] = {}
    if v.get("count") is not None:
        out["count"] = _int("shards.count", v["count"])
    if v.get("ask") is not None:
        if not isinstance(v["ask"], bool):
            raise TypeError(f"shards.ask: want a bool, got {type(v['ask']).__name__}")
        out["ask"] = v["ask"]
    if v.get("max") is not None:
        out["max"] = _int("shards.max", v["max"])
    return out


def _labels(value: Any) -> Dict[str, str]:
    if not isinstance(value, Mapping):
        raise TypeError(f"labels: want a dict of str to str, got {type(value).__name__}")
    out: Dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"labels: want str keys and values, got {k!r}: {v!r}")
        out[k] = v
    return out


def _str(field_name: str, v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError(f"{field_name}: want a str, got {type(v).__name__}")
    return v


def _encode_payload(payload: Any) -> Optional[bytes]:
    """The JSON bytes of a payload, ``None`` for no payload."""
    if payload is None:
        return None
    if isinstance(payload, RawJSON):
        return payload.data
    if isinstance(payload, (bytes, bytearray, memoryview)):
        raise BadRequest(
            "payload is bytes; pass binary data as payload_bytes=, or already encoded JSON as RawJSON(...)"
        )
    try:
        text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise BadRequest(f"payload: cannot encode as JSON: {e}") from None
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest("payload: not valid UTF-8 (a str holds a lone surrogate)") from None


def utf8_json(doc: Mapping[str, Any], compact: bool = False) -> bytes:
    """doc as JSON in UTF-8. A str in it that holds a lone surrogate
    (``"\\ud800"``: not valid UTF-8, which the sidecar refuses) raises
    :class:`BadRequest` naming its field."""
    separators = (",", ":") if compact else None
    try:
        return json.dumps(doc, ensure_ascii=False, separators=separators).encode("utf-8")
    except UnicodeEncodeError:
        pass
    for name, value in doc.items():
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise BadRequest(f"{name}: not valid UTF-8 (a str holds a lone surrogate)") from None
    raise BadRequest("not valid UTF-8 (a str holds a lone surrogate)")


@dataclass
class SubmitRequest:
    """A task to submit (see :meth:`Client.submit`, whose keyword arguments
    are these fields). Only ``handler`` is required; every ``None`` field
    takes the sidecar's default.

    Attributes:
        handler: the handler that runs the task (``"order.timeout"``).
        payload: any JSON-encodable value, encoded compactly with
            :func:`json.dumps` (``ensure_ascii=False``) and delivered to the
            executor as the callback body; or a :class:`RawJSON`, sent byte
            for byte. ``None`` sends no payload. ``bytes`` are refused: use
            ``payload_bytes``.
        id: the task id and idempotency key: submitting the same id with the
            same spec again returns the existing task; with another spec it
            raises :class:`Conflict` unless ``overwrite`` is set. Any
            non-empty string (``"order|42"``, ``"a@b"``, ``"A/B"``,
            ``"ü"``). ``None`` lets the sidecar generate one.
        payload_bytes: an opaque binary payload, sent as ``payload_base64``
            and delivered byte for byte. At most one of ``payload`` and
            ``payload_bytes``.
        delay: run the task this long after the leader accepts it: a
            :class:`datetime.timedelta` or seconds (``1.5``). At most one of
            ``delay`` and ``run_at``; neither means "run now".
        run_at: run the task at this time, never earlier; an aware
            :class:`datetime.datetime` (naive ones are refused). Kept with
            millisecond precision.
        priority: 0 (highest) to 4 (lowest). Defaults to 2.
        timeout: bounds one attempt: a timedelta or seconds. Defaults to 30
            seconds.
        max_attempts: attempts (first one included) before the task is
            ``DEAD``. Defaults to 4.
        overwrite: replace an existing task with the same id instead of
            raising :class:`Conflict`. Defaults to ``False``.
        every: makes the task recurring at a fixed interval, without drift:
            a timedelta or seconds, at least 1 second. Not with ``cron``.
            Without ``delay`` or ``run_at`` the first run is one interval
            after the submit (a ``delay`` of 0 counts as none).
        cron: makes the task recurring on a cron schedule: 5 fields
            (``"0 2 * * *"``), 6 with seconds, or a descriptor such as
            ``"@daily"``. Not with ``every``. Without ``delay`` or
            ``run_at`` the first run is the schedule's first slot after the
            submit.
        timezone: the IANA time zone of ``cron`` (``"Europe/Berlin"``);
            UTC when ``None``. Only with ``cron``.
        repeats: stop a recurring task after this many runs; 0 or ``None``
            means no limit. Only with ``cron`` or ``every``.
        until: no run of a recurring task after this aware datetime. Only
            with ``cron`` or ``every``.
        backoff: the retry backoff of failed attempts: a :class:`Backoff`
            or a mapping with its keys; ``None`` keeps the sidecar's default
            (:data:`BACKOFF_DEFAULT`).
        route_key: routes the task's attempts by consistent hashing: the
            tasks of one key go to the same node while the membership is
            stable (at most 256 bytes).
        labels: free-form ``str`` to ``str`` pairs kept with the task and
            returned with it (at most 32, each key and value at most 256
            bytes).
        retention: how long the task is kept once it is finished, then
            purged: a timedelta or seconds, not negative. ``None`` (or 0)
            keeps the sidecar's ``--retention`` (SUCCESS, CANCELLED) or
            ``--retention-dead`` (DEAD, FAILED).
        traceparent, tracestate: the W3C trace context of the task
            (``"00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>"``
            and ``"vendor=value,..."``): every callback carries its trace id
            (:attr:`Delivery.traceparent`). ``None``: none. The sidecar
            refuses an invalid one (:class:`InvalidTraceparent`,
            :class:`InvalidTracestate`). They do not make a resubmit a
            different spec.
        shards: run each run as shard tasks spread over the nodes, each
            retried on its own: ``{"count": N}`` (1 to 1024), or
            ``{"ask": True, "max": M}`` to ask the executor (its shard-count
            handler) how many, at most M. The sidecar refuses anything else
            (:class:`InvalidShards`). Shard ``i`` of run ``r`` is the task
            ``shard/<id>/<r>/<i>``; its callbacks carry the index and total
            (:attr:`Delivery.shard_index`). ``None``: not sharded.

    Every recurring run is a run of the same task (``Task.run``, the
    callback's ``Ax-Run``) with its own attempts; the task is terminal only
    after its last run.
    """

    handler: str
    payload: Any = None
    id: Optional[str] = None
    payload_bytes: Optional[bytes] = None
    delay: Optional[Duration] = None
    run_at: Optional[datetime] = None
    priority: Optional[int] = None
    timeout: Optional[Duration] = None
    max_attempts: Optional[int] = None
    overwrite: bool = False
    every: Optional[Duration] = None
    cron: Optional[str] = None
    timezone: Optional[str] = None
    repeats: Optional[int] = None
    until: Optional[datetime] = None
    backoff: Optional[Union[Backoff, Mapping[str, Any]]] = None
    route_key: Optional[str] = None
    labels: Optional[Mapping[str, str]] = None
    retention: Optional[Duration] = None
    traceparent: Optional[str] = None
    tracestate: Optional[str] = None
    shards: Optional[Mapping[str, Any]] = None

    def encode(self) -> bytes:
        """The JSON body of ``POST /v1/tasks`` for this request. Raises
        :class:`BadRequest` (a ``ValueError``) for a request that cannot be
        valid, ``TypeError``/``ValueError`` for badly typed fields."""
        if not isinstance(self.handler, str) or not self.handler:
            raise BadRequest("handler is required (a non-empty string)")
        if self.id is not None and (not isinstance(self.id, str) or not self.id):
            raise BadRequest("id must be a non-empty string, or None to let the sidecar generate one")
        if self.payload is not None and self.payload_bytes is not None:
            raise BadRequest("give at most one of payload and payload_bytes")
        if self.delay is not None and self.run_at is not None:
            raise BadRequest("give at most one of delay and run_at")
        if self.cron is not None and self.every is not None:
            raise BadRequest("give at most one of cron and every")
        body: Dict[str, Any] = {}
        if self.id is not None:
            body["id"] = self.id
        body["handler"] = self.handler
        if self.payload_bytes is not None:
            if not isinstance(self.payload_bytes, (bytes, bytearray, memoryview)):
                raise TypeError(f"payload_bytes: want bytes, got {type(self.payload_bytes).__name__}")
            body["payload_base64"] = base64.b64encode(bytes(self.payload_bytes)).decode("ascii")
        if self.delay is not None:
            body["delay"] = format_duration(self.delay, "delay")
        if self.run_at is not None:
            body["run_at"] = format_time(self.run_at, "run_at")
        if self.priority is not None:
            body["priority"] = _int("priority", self.priority)
        if self.timeout is not None:
            body["timeout"] = format_duration(self.timeout, "timeout")
        if self.max_attempts is not None:
            body["max_attempts"] = _int("max_attempts", self.max_attempts)
        if self.overwrite:
            body["overwrite"] = True
        if self.cron is not None:
            body["cron"] = _str("cron", self.cron)
        if self.timezone is not None:
            body["timezone"] = _str("timezone", self.timezone)
        if self.every is not None:
            if duration_to_ns(self.every, "every") < duration_to_ns(EVERY_MIN):
                raise BadRequest(f"every: must be at least 1s, got {format_duration(self.every, 'every')}")
            body["every"] = format_duration(self.every, "every")
        if self.repeats is not None:
            if _int("repeats", self.repeats) < 0:
                raise BadRequest(f"repeats: must not be negative (0 means no limit), got {self.repeats}")
            body["repeats"] = self.repeats
        if self.until is not None:
            body["until"] = format_time(self.until, "until")
        if self.backoff is not None:
            body["backoff"] = _backoff(self.backoff).to_json()
        if self.route_key is not None:
            body["route_key"] = _str("route_key", self.route_key)
        if self.labels is not None:
            body["labels"] = _labels(self.labels)
        if self.retention is not None:
            if duration_to_ns(self.retention, "retention") < 0:
                raise BadRequest(f"retention: must not be negative, got {format_duration(self.retention, 'retention')}")
            body["retention"] = format_duration(self.retention, "retention")
        if self.traceparent is not None:
            body["traceparent"] = _str("traceparent", self.traceparent)
        if self.tracestate is not None:
            body["tracestate"] = _str("tracestate", self.tracestate)
        if self.shards is not None:
            body["shards"] = _shards(self.shards)
        out = utf8_json(body, compact=True)
        payload = _encode_payload(self.payload)
        if payload is None:
            return out
        # Spliced in as is, so a RawJSON payload keeps its exact bytes.
        return out[:-1] + b',"payload":' + payload + b"}"

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> "SubmitRequest":
        """Build a request from a mapping whose keys are the field names
        (``{"handler": "x", "delay": 5}``). Unknown keys raise
        :class:`BadRequest`."""
        known = cls.__dataclass_fields__  # type: ignore[attr-defined]
        unknown = sorted(str(k) for k in m if k not in known)
        if unknown:
            raise BadRequest(f"unknown field(s) {', '.join(unknown)}; known: {', '.join(known)}")
        if "handler" not in m:
            raise BadRequest("handler is required")
        return cls(**m)  # type: ignore[arg-type]


def _int(field_name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{field_name}: want an int, got {type(v).__name__}")
    return v


@dataclass
class Task:
    """A task as the sidecar reports it.

    Attributes:
        id: the task id.
        handler: the handler name.
        state: a :class:`State` (a string of a newer sidecar stays a ``str``).
        priority: 0 (highest) to 4 (lowest).
        attempts: attempts made so far (busy answers are not counted).
        max_attempts: attempts allowed before the task is ``DEAD``.
        timeout: bounds one attempt.
        delay: the submitted delay, ``None`` when ``run_at`` was used.
        run_at: the submitted due time (UTC), ``None`` when ``delay`` was used.
        next_run_at: when the next attempt is due (UTC); ``None`` while the
            task runs and once it is terminal.
        last_error: describes the last failed attempt (``"http 500: ..."``).
        node: the node running the current attempt, while ``RUNNING``.
        waiting_reason: why a due ``WAITING`` task has not started (the
            leader holds the run until the event that can start it):
            ``"no_executor"`` (no executor for its handler on a live
            node), ``"executor_busy"`` (every executor at its capacity: its
            limit in flight plus a queue of ``max_concurrency``),
            ``"executor_unavailable"`` (its executors unreachable lately,
            tried again at ``waiting_until``), ``"circuit_open"`` (the
            handler's circuit breaker, the leader's or that of every node
            that runs it, until ``waiting_until``, then one probe), ``"handler_limit"`` (the sidecar's ``--handler-limit``
            of running attempts reached), ``"paused"`` (the task or its
            handler is paused: :meth:`Client.pause_task`,
            :meth:`Client.pause_handler`) or ``"previous_run_running"``
            (reserved); a reason of a newer sidecar is kept as sent. A run
            handed back without counting an attempt (its executor
            unavailable, or a 429/503 answer) shows
            ``"executor_unavailable"`` or ``"executor_busy"`` until it is
            due again. ``None`` when the task is not due or not waiting,
            when a follower could not ask the leader (best effort, 300
            ms), and from a sidecar older than waiting reasons. Read it
            from :meth:`Client.get` or :meth:`Client.list`: the answers of
            other calls may lack the leader's reasons.
        waiting_since: when the task began to wait for ``waiting_reason``
            (UTC); ``None`` without a reason.
        waiting_until: when ``waiting_reason`` may end (UTC): the next try
            of ``"executor_unavailable"``, the end of ``"circuit_open"``,
            the due time of a run handed back; ``None`` when not known.
        created_at, updated_at, finished_at: times in UTC (``finished_at`` is
            ``None`` until the task is terminal).
        payload: the decoded JSON value when the payload was submitted as
            JSON, ``bytes`` when it was submitted as ``payload_bytes``,
            ``None`` without payload.
        cron, timezone, every, repeats, until: the recurring schedule as
            submitted (``every`` a timedelta, ``until`` an aware UTC
            datetime); ``None`` (``repeats``: 0) for a one-off task.
        run: the number of the current (or last) run, from 1: the
            callback's ``Ax-Run``. A recurring task starts a run per slot;
            :meth:`Client.retry` starts a new run. 0 when the sidecar does
            not report it.
        snoozes: busy answers (429/503, :class:`Snooze`) so far; they are
            not attempts.
        last_run: the number of the newest run on record (its history:
            :meth:`Client.run`); 0 when there is none, from a sidecar older
            than run history, and on tasks from other calls than
            :meth:`Client.get` and :meth:`Client.wait` (only
            ``GET /v1/tasks/{id}`` sends it).
        result: that run's result: the body of the executor's 2xx answer
            (a :class:`Worker` handler's return value), or the ``result``
            of :meth:`Client.report_result` after :class:`Async`: the
            decoded JSON value when it was JSON, ``bytes`` when it was not
            (sent as ``result_base64``); ``None`` when the run has none
            (not succeeded yet, an empty body) and when ``last_run`` is 0.
        result_truncated: ``True`` when the executor's body was longer
            than 64 KiB and was cut: ``result`` is its first 65536 bytes
            (``bytes``, unless they happen to be valid JSON). ``False``
            otherwise.
        backoff: the task's retry backoff (a :class:`Backoff` of timedeltas)
            when it was submitted with one, ``None`` for the sidecar's
            default.
        route_key, labels: as submitted (``labels`` is ``{}`` without).
        retention: the task's own retention (a timedelta), ``None`` when
            the sidecar's flags decide.
        paused: ``True`` while the task is paused (:meth:`Client.pause_task`):
            its due runs wait until :meth:`Client.resume_task`.
        trace_id: the trace id (32 hex digits) every callback of the task
            carries: the submitted traceparent's, or, without one, the
            first 16 bytes of the SHA-256 of the task id. ``None`` from a
            sidecar older than trace context.
        traceparent, tracestate: the trace context as submitted, ``None``
            without one.
        shards: a sharded task's ``shards`` as the sidecar shows it: as
            submitted (``count``, or ``ask`` and ``max``) and the shards of
            its current or last run (``total``, ``succeeded``, ``failed``,
            ``running``); ``None`` for another task.
        shard_index, shard_total: on a shard task, its index (from 0) and
            the number of shards of its run; ``None`` and 0 otherwise.
        backlog_warning: set on the task returned by :meth:`Client.submit`
            and :meth:`Client.submit_batch` when the sidecar sent an
            ``Ax-Backlog-Warning`` header: the handler's backlog (due runs
            not yet delivered) is at 80 % of its bound or more, as
            ``"depth/limit"`` (``"850/1000"``; :attr:`backlog` parses it).
            Slow down before submits raise :class:`QueueFull`. ``None``
            otherwise, and on tasks from :meth:`Client.get` and the like.
        raw: the task's JSON object as received, for fields this client
            does not know yet.
    """

    id: str
    handler: str
    state: Union[State, str]
    priority: int = PRIORITY_DEFAULT
    attempts: int = 0
    max_attempts: int = MAX_ATTEMPTS_DEFAULT
    timeout: Optional[timedelta] = None
    delay: Optional[timedelta] = None
    run_at: Optional[datetime] = None
    next_run_at: Optional[datetime] = None
    last_error: Optional[str] = None
    node: Optional[str] = None
    created_at: Optional[datetime] = None
    updated_at: Optional[datetime] = None
    finished_at: Optional[datetime] = None
    payload: Any = None
    cron: Optional[str] = None
    timezone: Optional[str] = None
    every: Optional[timedelta] = None
    repeats: int = 0
    until: Optional[datetime] = None
    run: int = 0
    snoozes: int = 0
    backoff: Optional[Backoff] = None
    route_key: Optional[str] = None
    labels: Dict[str, str] = field(default_factory=dict)
    retention: Optional[timedelta] = None
    paused: bool = False
    trace_id: Optional[str] = None
    traceparent: Optional[str] = None
    tracestate: Optional[str] = None
    shards: Optional[Dict[str, Any]] = None
    shard_index: Optional[int] = None
    shard_total: int = 0
    waiting_reason: Optional[str] = None
    waiting_since: Optional[datetime] = None
    waiting_until: Optional[datetime] = None
    last_run: int = 0
    result: Any = None
    result_truncated: bool = False
    backlog_warning: Optional[str] = field(default=None, compare=False)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def terminal(self) -> bool:
        """True once the task is SUCCESS, DEAD, FAILED or CANCELLED."""
        return isinstance(self.state, State) and self.state.terminal

    @property
    def recurring(self) -> bool:
        """True for a task with a ``cron`` or ``every`` schedule."""
        return bool(self.cron) or self.every is not None

    @property
    def backlog(self) -> Optional[Tuple[int, int]]:
        """:attr:`backlog_warning` as ``(depth, limit)``, or ``None`` when
        there is none (or it is malformed)."""
        if not self.backlog_warning:
            return None
        depth, sep, limit = self.backlog_warning.strip().partition("/")
        if not sep or not depth.isdigit() or not limit.isdigit():
            return None
        return int(depth), int(limit)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Task":
        """Build a Task from the sidecar's JSON view. Raises ``ValueError``
        for a malformed view."""
        if not isinstance(d, Mapping) or not isinstance(d.get("id"), str):
            raise ValueError(f"not a task: {d!r:.200}")
        tid = d["id"]

        def when(key: str) -> Optional[datetime]:
            return _time_field(f"task {tid!r}: {key}", d.get(key))

        def dur(key: str) -> Optional[timedelta]:
            v = d.get(key)
            if v in (None, ""):
                return None
            try:
                return parse_duration(v)
            except (TypeError, ValueError):
                raise ValueError(f"task {tid!r}: {key}: invalid duration {v!r}") from None

        def json_or_bytes(key: str) -> Any:
            # key's JSON value, or the bytes of key_base64 when the
            # sidecar sent them so (they were not JSON).
            if d.get(key + "_base64") is not None:
                try:
                    return base64.b64decode(d[key + "_base64"], validate=True)
                except (binascii.Error, ValueError, TypeError) as e:
                    raise ValueError(f"task {tid!r}: {key}_base64: {e}") from None
            return d.get(key)

        payload = json_or_bytes("payload")
        result = json_or_bytes("result")
        waiting_reason = d.get("waiting_reason")
        if waiting_reason is not None and not isinstance(waiting_reason, str):
            raise ValueError(f"task {tid!r}: waiting_reason: want a string, got {waiting_reason!r:.100}")
        last_run = d.get("last_run")
        if last_run is not None and (isinstance(last_run, bool) or not isinstance(last_run, int)):
            raise ValueError(f"task {tid!r}: last_run: want an integer, got {last_run!r:.100}")
        truncated = d.get("result_truncated")
        if truncated is not None and not isinstance(truncated, bool):
            raise ValueError(f"task {tid!r}: result_truncated: want a boolean, got {truncated!r:.100}")
        backoff: Optional[Backoff] = None
        if isinstance(d.get("backoff"), Mapping):
            try:
                backoff = Backoff.from_json(d["backoff"])
            except ValueError as e:
                raise ValueError(f"task {tid!r}: {e}") from None
        labels = d.get("labels")
        try:
            return cls(
                id=tid,
                handler=str(d.get("handler", "")),
                state=_state(d.get("state", "")),
                priority=int(d.get("priority", PRIORITY_DEFAULT)),
                attempts=int(d.get("attempts", 0)),
                max_attempts=int(d.get("max_attempts", MAX_ATTEMPTS_DEFAULT)),
                timeout=dur("timeout"),
                delay=dur("delay"),
                run_at=when("run_at"),
                next_run_at=when("next_run_at"),
                last_error=d.get("last_error") or None,
                node=d.get("node") or None,
                created_at=when("created_at"),
                updated_at=when("updated_at"),
                finished_at=when("finished_at"),
                payload=payload,
                cron=d.get("cron") or None,
                timezone=d.get("timezone") or None,
                every=dur("every"),
                repeats=int(d.get("repeats") or 0),
                until=when("until"),
                run=int(d.get("run") or 0),
                snoozes=int(d.get("snoozes") or 0),
                backoff=backoff,
                route_key=d.get("route_key") or None,
                labels={str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {},
                retention=dur("retention"),
                paused=d.get("paused") is True,
                trace_id=d.get("trace_id") or None,
                traceparent=d.get("traceparent") or None,
                tracestate=d.get("tracestate") or None,
                shards=dict(d["shards"]) if isinstance(d.get("shards"), Mapping) else None,
                shard_index=int(d["shard_index"]) if d.get("shard_index") is not None else None,
                shard_total=int(d.get("shard_total") or 0),
                waiting_reason=waiting_reason or None,
                waiting_since=when("waiting_since"),
                waiting_until=when("waiting_until"),
                last_run=last_run or 0,
                result=result,
                result_truncated=truncated is True,
                raw=dict(d),
            )
        except TypeError as e:  # int({}) and the like: a malformed view, as documented
            raise ValueError(f"task {tid!r}: {e}") from None


@dataclass
class TaskPage:
    """One page of :meth:`Client.list_page`.

    Attributes:
        tasks: the tasks of this page.
        next_cursor: pass it as ``cursor`` to get the next page; ``None``
            on the last page.
    """

    tasks: List[Task]
    next_cursor: Optional[str] = None


class PurgeResult(tuple):
    """The outcome of :meth:`Client.purge_tasks`: a pair ``(purged, more)``
    (so ``purged, more = client.purge_tasks(...)`` works), with the cursor
    to go on with.

    Attributes:
        purged: how many tasks this call deleted.
        more: more tasks may match: call again, with ``cursor=next_cursor``.
        next_cursor: where the next call reads on; ``None`` when ``more``
            is false.
    """

    next_cursor: Optional[str]

    def __new__(cls, purged: int, more: bool, next_cursor: Optional[str] = None) -> "PurgeResult":
        r = super().__new__(cls, (purged, more))
        r.next_cursor = next_cursor
        return r

    @property
    def purged(self) -> int:
        return cast(int, self[0])

    @property
    def more(self) -> bool:
        return cast(bool, self[1])

    def __repr__(self) -> str:
        return f"PurgeResult(purged={self[0]!r}, more={self[1]!r}, next_cursor={self.next_cursor!r})"


@dataclass
class BatchResult:
    """The outcome of :meth:`Client.submit_batch`, one entry per request in
    the order given.

    Attributes:
        tasks: ``tasks[i]`` is the task stored for request ``i``, or
            ``None`` when that request failed.
        errors: ``errors[i]`` is the :class:`AxError` of request ``i``, or
            ``None`` when it succeeded.
    """

    tasks: List[Optional[Task]]
    errors: List[Optional[AxError]]

    @property
    def ok(self) -> bool:
        """True when every request succeeded."""
        return all(e is None for e in self.errors)


@dataclass
class Member:
    """One server of the Raft configuration.

    Attributes:
        id: node id. raft_addr, peer_addr: its addresses.
        suffrage: ``"Voter"`` or ``"Nonvoter"``. leader: whether it leads.
        reachable: the leader heard from it within about a second;
            ``None`` when no leader is known (or from an older sidecar).
        last_contact_ms: milliseconds since the leader last heard from it;
            -1 when it has not since it was elected; ``None`` when no
            leader is known.
        applied_index: its applied Raft index at its last report to the
            leader; 0 when unknown.
        role: its Raft state at its last report: ``"leader"``,
            ``"follower"`` or ``"candidate"``; ``""`` when it has not been
            heard from.
        status: autopilot's: ``"leader"``, ``"voter"``, ``"nonvoter"`` or
            ``"staging"`` (a healthy non-voter that autopilot promotes once
            it has been stable); ``""`` when not known.
        healthy: heard from within 1.5 s and then within 250 entries of
            the leader's commit index (autopilot's rule); ``None`` when not
            known.
        stable_since: when its current healthy streak began (UTC);
            ``None`` while it is unhealthy.

    ``reachable`` and the fields after it are the leader's view (a
    follower asks the leader).
    """

    id: str
    raft_addr: str = ""
    peer_addr: str = ""
    suffrage: str = ""
    leader: bool = False
    reachable: Optional[bool] = None
    last_contact_ms: Optional[int] = None
    applied_index: int = 0
    role: str = ""
    status: str = ""
    healthy: Optional[bool] = None
    stable_since: Optional[datetime] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Member":
        """Read a member of ``GET /v1/cluster``. Raises ``ValueError`` for a
        malformed ``stable_since``."""
        since = d.get("stable_since")
        contact = d.get("last_contact_ms")
        return cls(
            id=str(d.get("id", "")),
            raft_addr=str(d.get("raft_addr", "")),
            peer_addr=str(d.get("peer_addr", "") or ""),
            suffrage=str(d.get("suffrage", "")),
            leader=bool(d.get("leader", False)),
            reachable=d["reachable"] if isinstance(d.get("reachable"), bool) else None,
            last_contact_ms=int(contact) if contact is not None else None,
            applied_index=int(d.get("applied_index") or 0),
            role=str(d.get("role") or ""),
            status=str(d.get("status") or ""),
            healthy=d["healthy"] if isinstance(d.get("healthy"), bool) else None,
            stable_since=_time_field("stable_since", since),
        )


def _time_field(name: str, v: Any) -> Optional[datetime]:
    if v in (None, ""):
        return None
    try:
        return parse_time(v)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: invalid time {v!r}") from None


@dataclass
class StorageStatus:
    """Why a node's storage takes no writes (:attr:`ClusterInfo.storage`).

    Attributes:
        cause: the data dir is below its free-space reserve or not
            writable, a badger write is being retried, or a Raft log write
            failed.
        since: when the node stopped accepting writes (UTC).
    """

    cause: str
    since: Optional[datetime] = None


@dataclass
class ClusterInfo:
    """The Raft group as the local sidecar sees it (``GET /v1/cluster``).

    Attributes:
        node_id: the id of the local node.
        state: the Raft state of the local node: ``Leader``, ``Follower``,
            ``Candidate`` or ``Shutdown``.
        leader: the node id of the leader, ``""`` when none is known.
        term, applied_index, commit_index: Raft counters.
        state_index: the index of the last entry at or below
            ``commit_index`` that the state machine applies (a command or a
            configuration change): what ``applied_index`` reaches once the
            node has caught up. Below ``commit_index`` while the newest
            committed entries are a new leader's no-op or barriers, which
            change nothing; 0 from an older sidecar.
        members: the servers of the configuration.
        storage: set while this node's storage cannot take writes (every
            write raises :class:`StorageUnavailable`; reads still work);
            ``None`` when it is healthy.
        voters_target: the number of voters autopilot keeps (the sidecar's
            ``--voters``); 0 from an older sidecar.
        failure_tolerance: how many more voters may fail before the
            cluster loses its quorum: the reachable voters less a quorum of
            all voters (the leader's view); ``None`` when no leader is
            known.
    """

    node_id: str
    state: str
    leader: str = ""
    term: int = 0
    applied_index: int = 0
    commit_index: int = 0
    state_index: int = 0
    members: List[Member] = field(default_factory=list)
    storage: Optional[StorageStatus] = None
    voters_target: int = 0
    failure_tolerance: Optional[int] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ClusterInfo":
        """Read the answer of ``GET /v1/cluster``. Raises ``ValueError`` for
        a malformed time."""
        storage = d.get("storage")
        tolerance = d.get("failure_tolerance")
        return cls(
            node_id=str(d.get("node_id", "")),
            state=str(d.get("state", "")),
            leader=str(d.get("leader", "") or ""),
            term=int(d.get("term", 0)),
            applied_index=int(d.get("applied_index", 0)),
            commit_index=int(d.get("commit_index", 0)),
            state_index=int(d.get("state_index") or 0),
            members=[Member.from_json(m) for m in d.get("members") or [] if isinstance(m, Mapping)],
            storage=StorageStatus(
                cause=str(storage.get("cause") or ""),
                since=_time_field("storage.since", storage.get("since")),
            )
            if isinstance(storage, Mapping)
            else None,
            voters_target=int(d.get("voters_target") or 0),
            failure_tolerance=int(tolerance) if tolerance is not None else None,
        )

    def lag(self, applied_index: int) -> int:
        """How many entries that change the state a node that has applied up
        to ``applied_index`` still has to apply to reach this node's commit
        index: ``state_index`` (``commit_index`` from an older sidecar, which
        counts a new leader's no-op and barriers too) less ``applied_index``,
        0 when it is at or past it."""
        target = self.state_index or self.commit_index
        return max(target - applied_index, 0)


@dataclass
class HandlerExecutor:
    """An executor of a :class:`HandlerInfo`.

    Attributes:
        node: the node it is registered on.
        name, url: as registered.
        max_concurrency: the bound registered with the executor, or
            ``None`` when it was registered without one: the node's default
            applies (its ``--delivery-concurrency``, 200 unless set). The API
            leaves the field out then; the Go client reads it as 0, its
            zero value for "the node's default". (Earlier versions of this
            client read it as 0 too.)
        limit: the current adaptive concurrency limit, for the executors of
            the sidecar asked and of the leader; 0 for the others.
        circuit_until: set (UTC) while the handler's circuit is open on
            this executor's node (that node's own breaker, or half-open
            with its probe out): when the node takes the handler's
            attempts again; the leader routes them to its other nodes
            meanwhile. Leader's view; ``None`` otherwise.
    """

    node: str
    name: str
    url: str
    max_concurrency: Optional[int] = None
    limit: int = 0
    circuit_until: Optional[datetime] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "HandlerExecutor":
        return cls(
            node=str(d.get("node", "")),
            name=str(d.get("name", "")),
            url=str(d.get("url", "")),
            # Absent (or 0, "0 or absent" on the wire): the node's default.
            max_concurrency=int(d["max_concurrency"]) if d.get("max_concurrency") else None,
            limit=int(d.get("limit") or 0),
            circuit_until=parse_time(d["circuit_until"]) if d.get("circuit_until") else None,
        )


@dataclass
class HandlerInfo:
    """One handler of :meth:`Client.handlers` (``GET /v1/handlers``).

    ``backlog``, ``parked`` and ``circuit`` are the leader's view (the
    local sidecar asks the leader); ``None`` / ``{}`` when no leader
    answered.

    Attributes:
        name: the handler.
        paused: its runs wait until :meth:`Client.resume_handler`.
        backlog: runs due and not yet delivered.
        parked: due runs that wait, by waiting reason (``"paused"``,
            ``"no_executor"``, ...).
        circuit: its circuit breaker, ``"closed"``, ``"open"`` or
            ``"half-open"``; ``circuit_until`` (UTC) while open.
        tasks: stored tasks by state name (``"WAITING"``: 3, ...).
        executors: the executors, on every node, that run it.
    """

    name: str
    paused: bool = False
    backlog: Optional[int] = None
    parked: Dict[str, int] = field(default_factory=dict)
    circuit: Optional[str] = None
    circuit_until: Optional[datetime] = None
    tasks: Dict[str, int] = field(default_factory=dict)
    executors: List[HandlerExecutor] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "HandlerInfo":
        if not isinstance(d, Mapping) or not isinstance(d.get("name"), str):
            raise ValueError(f"not a handler: {d!r:.200}")
        until = d.get("circuit_until")
        backlog = d.get("backlog")
        return cls(
            name=d["name"],
            paused=d.get("paused") is True,
            backlog=int(backlog) if isinstance(backlog, int) and not isinstance(backlog, bool) else None,
            parked={str(k): int(v) for k, v in (d.get("parked") or {}).items()},
            circuit=d.get("circuit") or None,
            circuit_until=parse_time(until) if until else None,
            tasks={str(k): int(v) for k, v in (d.get("tasks") or {}).items()},
            executors=[HandlerExecutor.from_json(x) for x in d.get("executors") or [] if isinstance(x, Mapping)],
        )
