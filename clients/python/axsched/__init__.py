"""axsched: the Python client of ax, the task scheduler that runs as a
sidecar next to your application.

Two parts, standard library only (Python 3.9+):

* :class:`Client` submits, lists, inspects, cancels and re-runs tasks
  through the local sidecar's Unix socket (``$AX_SOCKET``, else
  ``./ax.sock``)::

      client = axsched.Client()
      task = client.submit("order.timeout", {"order_id": 42}, id="order|42", delay=30 * 60)

* :class:`Worker` serves the sidecar's callbacks on a Unix socket of its own
  and runs your handlers on a thread pool::

      worker = axsched.Worker(listen="./worker.sock")

      @worker.handler("order.timeout")
      def order_timeout(d: axsched.Delivery) -> None:
          close_order_if_unpaid(d.json()["order_id"])

      worker.run()

Errors are :class:`AxError` subclasses, one per error code of the socket API
(:class:`NotFound`, :class:`Conflict`, :class:`QueueFull` with
``retry_after``, :class:`NoLeader`, ...), plus :class:`Unavailable` when the
sidecar cannot be reached.

Delivery is at least once, never before the due time: every callback carries
the task id and attempt so handlers can de-duplicate.
"""

import logging

from ._wire import format_duration, parse_duration
from .client import (
    HEADER_BACKLOG_WARNING,
    RESULT_FAILED,
    RESULT_PERMANENT,
    RESULT_SUCCESS,
    SOCKET_ENV,
    SOCKET_PATH_DEFAULT,
    TIMEOUT_DEFAULT,
    Client,
)
from .errors import (
    ERROR_CODES,
    AxError,
    BadRequest,
    Conflict,
    HandlerNotFound,
    InternalError,
    InvalidJSON,
    InvalidTraceparent,
    InvalidShards,
    InvalidTracestate,
    MethodNotAllowed,
    NoLeader,
    NotFound,
    NotReady,
    PayloadTooLarge,
    QueueFull,
    StorageUnavailable,
    TaskFinished,
    Unavailable,
)
from .task import (
    BACKOFF_DEFAULT,
    EVERY_MIN,
    MAX_ATTEMPTS_DEFAULT,
    PAYLOAD_MAX_BYTES,
    PRIORITY_DEFAULT,
    PRIORITY_HIGHEST,
    PRIORITY_LOWEST,
    TASK_TIMEOUT_DEFAULT,
    Backoff,
    BatchResult,
    ClusterInfo,
    HandlerExecutor,
    HandlerInfo,
    Member,
    PurgeResult,
    RawJSON,
    State,
    StorageStatus,
    SubmitRequest,
    Task,
    TaskPage,
)
from .worker import (
    EXECUTE_PATH,
    FALLBACK_HANDLER,
    HEADER_ATTEMPT,
    HEADER_DEADLINE,
    HEADER_HANDLER,
    HEADER_RUN,
    HEADER_SHARD_INDEX,
    HEADER_SHARD_TOTAL,
    HEADER_TASK_ID,
    SHARDS_PATH,
    Async,
    Delivery,
    Permanent,
    Snooze,
    Worker,
)

__version__ = "0.1.0"

# A library logs to "axsched" (and "axsched.worker") and leaves the output to
# the application: configure logging (logging.basicConfig(level=logging.INFO))
# to see the worker's messages.
logging.getLogger("axsched").addHandler(logging.NullHandler())

__all__ = [
    # client
    "Client",
    "SOCKET_ENV",
    "SOCKET_PATH_DEFAULT",
    "TIMEOUT_DEFAULT",
    "RESULT_SUCCESS",
    "RESULT_FAILED",
    "RESULT_PERMANENT",
    "HEADER_BACKLOG_WARNING",
    # tasks
    "Task",
    "State",
    "SubmitRequest",
    "Backoff",
    "RawJSON",
    "TaskPage",
    "BatchResult",
    "PurgeResult",
    "ClusterInfo",
    "Member",
    "StorageStatus",
    "HandlerInfo",
    "HandlerExecutor",
    "PRIORITY_HIGHEST",
    "PRIORITY_DEFAULT",
    "PRIORITY_LOWEST",
    "TASK_TIMEOUT_DEFAULT",
    "MAX_ATTEMPTS_DEFAULT",
    "PAYLOAD_MAX_BYTES",
    "EVERY_MIN",
    "BACKOFF_DEFAULT",
    # errors
    "AxError",
    "BadRequest",
    "InvalidJSON",
    "InvalidTraceparent",
    "InvalidTracestate",
    "InvalidShards",
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
    # worker
    "Worker",
    "Delivery",
    "Snooze",
    "Permanent",
    "Async",
    "EXECUTE_PATH",
    "FALLBACK_HANDLER",
    "HEADER_TASK_ID",
    "HEADER_HANDLER",
    "HEADER_ATTEMPT",
    "HEADER_RUN",
    "HEADER_DEADLINE",
    "HEADER_SHARD_INDEX",
    "HEADER_SHARD_TOTAL",
    "SHARDS_PATH",
    # durations
    "format_duration",
    "parse_duration",
]
