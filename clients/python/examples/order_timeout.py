"""Close the order if it is still unpaid: the ax example in Python.

It runs a worker for the handler ``order.timeout`` on a Unix socket (the
worker registers itself with the sidecar), submits one task with a 3 second
delay through the local sidecar, waits for the callback and prints the
task's final state.

Start a sidecar first, in the same directory:

    ax dev

then:

    python3 order_timeout.py            # flags: --socket ./ax.sock --worker-socket ./worker.sock
"""

import argparse
import logging
import os
import sys
import threading

import axsched

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--socket", default=os.environ.get(axsched.SOCKET_ENV, axsched.SOCKET_PATH_DEFAULT),
                    help="the sidecar's Unix socket (default: $AX_SOCKET, else ./ax.sock)")
parser.add_argument("--worker-socket", default="./worker.sock", help="the Unix socket this worker listens on")
parser.add_argument("--delay", type=float, default=3.0, help="seconds before the task is due")
args = parser.parse_args()
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

# 1. The worker: the sidecar calls it back when the task is due.
worker = axsched.Worker(socket_path=args.socket, listen=args.worker_socket)
delivered = threading.Event()


@worker.handler("order.timeout")
def order_timeout(d: axsched.Delivery) -> None:
    try:
        order_id = d.json()["order_id"]
    except (ValueError, KeyError, TypeError) as e:
        raise axsched.Permanent(f"bad payload: {e}")  # 422: FAILED, never retried
    # A real application closes order_id here if it is still unpaid,
    # idempotently: delivery is at least once.
    print(f"callback: task={d.task_id} attempt={d.attempt} run={d.run} deadline={d.deadline} order_id={order_id}")
    delivered.set()  # returning means success (200)


# 2. The client: check the sidecar, start the worker, submit.
client = worker.client
try:
    client.wait_ready(timeout=10)
except axsched.Unavailable as e:
    sys.exit(f"{e}\nstart the sidecar first: ax dev")
worker.start()
try:
    task = client.submit("order.timeout", {"order_id": 42}, delay=args.delay)
    print(f"submitted: id={task.id} state={task.state} next_run_at={task.next_run_at}")

    # 3. Wait for the callback, then for the sidecar to record the outcome.
    if not delivered.wait(args.delay + 60):
        sys.exit(f"no callback; did the worker register (see its log), or is the sidecar started with --executor 'order.timeout={worker.url}'?")
    task = client.wait(task.id, timeout=60)  # until SUCCESS, DEAD, FAILED or CANCELLED
    print(f"final: id={task.id} state={task.state} attempts={task.attempts}/{task.max_attempts} finished_at={task.finished_at}")
finally:
    worker.stop()
