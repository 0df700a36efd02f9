/*
Package ax is the Go client of ax, a task scheduler that runs as a sidecar
next to each application process. The application submits tasks to its local
sidecar over a Unix socket; the sidecars of a cluster replicate them with Raft
and, when a task is due, call an executor of the application back over HTTP.

The package has two halves: a Client that submits (one by one or in
batches), looks up, lists, cancels and re-runs tasks (and registers
executors with the sidecar), and an Executor that receives the callbacks and
runs Handlers through Middleware. It uses the standard library and, for
trace context, the OpenTelemetry trace API (go.opentelemetry.io/otel/trace:
see WithTraceContext and Delivery.SpanContext).

	import ax "github.com/axsched/ax/clients/go"

# Submitting tasks

Create one Client per process. With a zero Config it uses the socket named by
the AX_SOCKET environment variable, or ./ax.sock:

	client := ax.New(ax.Config{})
	if err := client.Ready(ctx); err != nil {
		log.Fatal(err) // e.g. "ax: cannot reach sidecar at ./ax.sock: connect: no such file or directory"
	}

	task, err := client.Submit(ctx, ax.SubmitRequest{
		ID:      "order-timeout|42", // idempotency key; empty lets the sidecar pick one
		Handler: "order.timeout",
		Payload: map[string]any{"order_id": 42},
		Delay:   30 * time.Minute,
	})

Submit returns once the task is durable on a quorum of the cluster. Submitting
the same ID with the same spec again returns the existing task, so a caller
that is unsure whether a submit went through (a timeout, a crash) can simply
submit again. The payload is any value encoding/json can marshal, a
json.RawMessage sent byte for byte, or binary data in PayloadBytes. Zero
fields take the sidecar's defaults: priority 2 (PriorityDefault), timeout 30s
per attempt, 4 attempts, and a retry backoff from 2s to 30s
(BackoffDefault).

# Recurring tasks, backoff and routing

A task with Cron (in Timezone) or Every runs once per slot; each run has its
own attempts and shows as Delivery.Run in the executor. Repeats and Until
end it:

	client.Submit(ctx, ax.SubmitRequest{
		ID:       "report|nightly",
		Handler:  "report.build",
		Cron:     "0 2 * * *",
		Timezone: "Europe/Berlin",
		Until:    time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC),
		Backoff:  &ax.Backoff{Initial: 10 * time.Second, Max: 10 * time.Minute}, // zero fields keep the default
		RouteKey: "tenant-7", // the tasks of a key go to one node
		Labels:   map[string]string{"team": "billing"},
	})

# Batches

SubmitBatch submits up to BatchMaxTasks tasks in one request and one Raft
round trip. Each item succeeds or fails on its own (BatchResult.Err, for
example ErrConflict); the returned error is for the batch as a whole:

	results, err := client.SubmitBatch(ctx, reqs)
	if err != nil {
		return err // invalid item, queue full, sidecar down: nothing submitted
	}
	for i, r := range results {
		if r.Err != nil {
			log.Printf("task %s: %v", reqs[i].ID, r.Err)
		}
	}

# Looking up and cancelling tasks

	task, err := client.Get(ctx, "order-timeout|42")
	fmt.Println(task.State, task.Attempts, task.LastError)

	task, err = client.Cancel(ctx, "order-timeout|42") // task.State == ax.StateCancelled

	task, err = client.Retry(ctx, "order-timeout|42") // a DEAD or FAILED task runs again

Task ids are opaque strings: any UTF-8, including "/", "|" and "@". The
client escapes them in request paths.

# Listing tasks

List is an iterator (Go 1.23 range-over-func) that fetches pages lazily;
ListPage fetches one page for those who carry the cursor themselves:

	for task, err := range client.List(ctx, ax.ListOptions{Handler: "order.timeout", State: ax.StateDead}) {
		if err != nil {
			return err
		}
		fmt.Println(task.ID, task.LastError)
	}

	page, err := client.ListPage(ctx, ax.ListOptions{PageSize: 50}, cursor) // "" first, then page.NextCursor

# Run history and results

Runs returns a task's runs, newest first (the sidecar keeps its
--history-runs newest, default 100): each with its attempts (node,
executor, outcome, HTTP status, error), where its lateness went, and its
result. Run returns one:

	page, err := client.Runs(ctx, "report|daily", &ax.RunsOptions{Limit: 10}) // nil: the default page
	run, err := client.Run(ctx, "report|daily", page.Runs[0].Run)
	fmt.Println(run.State, string(run.Result), run.Lateness.QueueMs)

A handler registered with Executor.HandleResult returns the run's result
(any value, sent as JSON, at most 64 KiB kept); SetResult sets it from any
handler; Client.ReportSuccess carries one after Async.

# Running an executor

An Executor maps handler names to Handlers. It answers the sidecar's callback
(POST /ax/v1/execute) with the status that tells the sidecar what to do:

	ex := ax.NewExecutor()
	ex.HandleFunc("order.timeout", func(ctx context.Context, d *ax.Delivery) error {
		var p struct{ OrderID int `json:"order_id"` }
		if err := json.Unmarshal(d.Payload, &p); err != nil {
			return ax.Permanent(err) // FAILED at once, never retried
		}
		if overloaded() {
			return ax.Snooze(5 * time.Second) // try again later; not a failed attempt
		}
		return closeOrderIfUnpaid(ctx, p.OrderID) // nil: SUCCESS; an error: retried with backoff
	})
	go ex.ListenAndServeUnix("/run/app/app.sock")
	defer ex.Shutdown(context.Background())

Tell the local sidecar where the executor listens, by the socket's absolute
path, and take the registration back before shutting the executor down, so
that the leader stops sending attempts to it first:

	reg := ax.ExecutorRegistration{Name: "orders", Handlers: []string{"order.timeout"}, URL: "unix:///run/app/app.sock"}
	if err := client.RegisterExecutor(ctx, reg); err != nil {
		log.Fatal(err)
	}
	defer client.UnregisterExecutor(context.Background(), "orders")

or give the sidecar the same in its configuration:

	ax dev --executor 'order.timeout=unix:///run/app/app.sock'

An Executor is also an http.Handler, so it can be mounted at ExecutePath on a
server the application already runs; Serve takes any listener, for example
loopback TCP (register it as http://127.0.0.1:PORT).

The context given to a handler ends at the attempt's deadline (the task's
timeout), and earlier if the task is cancelled. Delivery is at least once:
after a node or network failure mid-attempt the same run may be delivered
again, so handlers should be idempotent or de-duplicate on
Delivery.TaskID, Delivery.Run and Delivery.Attempt.

# Middleware, context, heartbeats and async results

Use wraps every handler in Middleware (func(Handler) Handler); the first one
given is the outermost. DeliveryFromContext returns the running attempt (task
id, handler, attempt, run, deadline) to code that only has the context.

A handler whose work outlives the callback returns Async(): the executor
answers 202, and the work reports its outcome later with Report. While it
runs, Heartbeat keeps the attempt's lease alive (call it more often than the
task's timeout). Both reach the sidecar through the Executor's Client, given
with WithClient, and work from the handler's context or one derived from it:

	ex := ax.NewExecutor(ax.WithClient(client))
	ex.Use(logging, metrics)
	ex.HandleFunc("video.encode", func(ctx context.Context, d *ax.Delivery) error {
		bg := context.WithoutCancel(ctx) // outlives the callback, keeps the attempt
		go func() {
			err := encode(bg, d.Payload, func() { ax.Heartbeat(bg) }) // heartbeat from the progress callback
			ax.Report(bg, err) // nil: success; ax.Permanent(err): FAILED; other: retried
		}()
		return ax.Async()
	})

Client.Heartbeat and Client.ReportResult do the same for work that runs in
another process, given the task id and attempt. A heartbeat or report for an
attempt that is no longer running (timed out, cancelled) fails with
ErrConflict.

Shutdown is graceful: it stops accepting callbacks (new ones are answered
"busy", so the sidecar tries again later without counting a failure), waits
for running handlers, and cancels them if its context ends first.

# Sharded tasks

A task submitted with "shards" runs each run as several callbacks, one per
shard, each with its own attempts: Delivery.ShardIndex (from 0) of
Delivery.ShardTotal (0 for a task without shards). With "shards":
{"ask": true} the sidecar first asks the executor how many shards a run
gets (POST ShardsPath, answered {"count": n}); register the handler with
WithShardCount to answer:

	ex.HandleFunc("reindex", func(ctx context.Context, d *ax.Delivery) error {
		return reindexPart(ctx, d.Payload, d.ShardIndex, d.ShardTotal)
	}, ax.WithShardCount(func(ctx context.Context, d *ax.Delivery) (int, error) {
		return countParts(ctx, d.Payload) // >= 1
	}))

Without WithShardCount the ask is answered 501; an error, a panic or a
count below 1, 500: the sidecar retries the ask like an attempt. A callback
with malformed shard headers is answered 400. An Executor mounted on
another server needs ShardsPath routed to it as well as ExecutePath.

# Errors

Errors returned by a Client match sentinel errors with errors.Is:

	_, err := client.Get(ctx, id)
	switch {
	case errors.Is(err, ax.ErrNotFound):
		// no such task
	case errors.Is(err, ax.ErrUnavailable):
		// the sidecar did not answer (socket missing, sidecar down)
	case err != nil:
		return err
	}

The sentinels are ErrNotFound, ErrConflict (same id, different spec; a
stale attempt), ErrInvalid (a request the sidecar rejects; the message names
the field), ErrTooLarge, ErrQueueFull (backpressure), ErrNoLeader (no Raft
leader), ErrNotReady and ErrUnavailable (no answer at all). Every answer of
the sidecar with an error status is an *APIError, which carries the HTTP
status, the error code, the message, the Retry-After delay and, for a full
backlog, its depth and limit:

	var apiErr *ax.APIError
	if errors.As(err, &apiErr) && errors.Is(err, ax.ErrQueueFull) {
		log.Printf("backlog %d/%d", apiErr.Depth, apiErr.Limit)
		time.Sleep(apiErr.RetryAfter)
	}

Before the backlog is full, from 80 % of its bound, a successful Submit or
SubmitBatch says so in Task.BacklogWarning ("812/1000"; Task.Backlog parses
it), so producers can slow down early.

The client retries "no leader" answers a few times with backoff, honouring
Retry-After and the context, because an election normally ends within a
second or two; it does not retry anything else. A cancelled or expired
context is returned wrapped, so errors.Is(err, context.DeadlineExceeded)
works.

# The wire contract and raw calls

The JSON of the socket API is written once, in the sub-package axapi
(github.com/axsched/ax/clients/go/axapi): the task view, the submit body,
batches, list pages, executors, handlers, purge, the error body, the
limits (axapi.PayloadMaxBytes, axapi.BatchMaxTasks, ...) and the error
table (axapi.ErrorTable). The sidecar's server and the ax command line use
the same types, so this client cannot drift from them; its own Code
constants, ClusterInfo, Member, HandlerInfo, PurgeResult and State are
axapi's. Client.Call sends one request as given and returns the answer as
received, for code that works with the JSON itself:

	r, err := client.Call(ctx, http.MethodGet, axapi.TaskPath("order|42"), nil)
	if err != nil {
		return err // an *APIError (r holds the answer), or no answer
	}
	var task axapi.Task
	err = task.UnmarshalJSON(r.Body)
*/
package ax
