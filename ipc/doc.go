// Package ipc is the application-facing edge of ax: the JSON API that
// applications call on their sidecar's Unix socket, its error model, and the
// callback client that delivers attempts to executors.
//
// ipc knows nothing of Raft or storage. Everything the handlers need from a
// node is the Backend interface (backend.go), which the sidecar implements and
// tests fake. ipc never imports raft or raftfsm.
//
// # The API
//
// A Server (NewServer, then ServeUnix or Serve, then Shutdown) answers
// HTTP/1.1 with JSON bodies:
//
//	GET    /v1/tasks                  list: ?handler=&state=&limit=&cursor=; 200
//	                                  {"tasks":[...],"next_cursor":"..."}, next_cursor
//	                                  absent on the last page
//	POST   /v1/tasks                  submit; 201 + task when created, 200 + the existing
//	                                  task when the same id comes with the same spec,
//	                                  409 conflict when the spec differs (unless overwrite)
//	POST   /v1/tasks/batch            submit 1 to BatchMaxTasks tasks; 200 {"results":[...]}
//	GET    /v1/tasks/{id}             the task
//	DELETE /v1/tasks/{id}             cancel; 200 + the task in its new state
//	POST   /v1/tasks/{id}/retry       re-run a DEAD or FAILED task; 200 + the task
//	POST   /v1/tasks/{id}/heartbeat   {"attempt":N}: extend the running attempt's deadline
//	POST   /v1/tasks/{id}/result      {"attempt":N,"status":"success"|"failed"|"permanent",
//	                                  "error":"..."}: outcome of an attempt answered 202
//	GET    /v1/executors              {"executors":[...]}: this node's executors
//	POST   /v1/executors              register (201) or replace by name (200) an executor
//	DELETE /v1/executors/{name}       remove an executor; 204
//	GET    /v1/cluster                ClusterInfo: members, leader, Raft state, indexes
//	DELETE /v1/cluster/members/{id}   204: remove a (dead) node from the Raft configuration
//	GET    /healthz                   200 {"status":"ok"} while the server runs
//	GET    /readyz                    200 {"status":"ready"}, or 503 not_ready (Backend.Ready)
//	GET    /metrics                   Prometheus text format (ServerOptions.Metrics)
//
// Every GET route answers HEAD too. A method the path does not have gets 405
// with an Allow header. The table is the variable routes (routes.go);
// openapi.yaml describes the same routes with their bodies, and a test keeps
// the three in step.
//
// Task ids are opaque UTF-8 strings ("order|42", "a@b", "A/B", "ü日本"), at
// most IDMaxBytes, without control characters. Clients URL-escape them in
// paths ("/v1/tasks/A%2FB"); the server routes on the raw request path and
// unescapes the id segment, so an escaped slash stays inside the id, and a
// task named "batch" is still GET /v1/tasks/batch (only POST goes to the
// batch route). Executor names are 1 to ExecutorNameMaxBytes characters among
// A-Z a-z 0-9 . _ : - (see ValidateExecutorName). A query string is ignored
// except by GET /v1/tasks, which refuses parameters it does not know.
//
// The submit body is decoded by DecodeSubmit, which documents every field,
// its default and its bounds. payload is any JSON value, kept byte for byte
// and delivered as the callback body; payload_base64 carries binary. The
// task view (Task.MarshalJSON) gives the payload back the way it came:
// "payload" as raw JSON, or "payload_base64". Recurring tasks take cron
// (+ timezone) or every, with repeats and until; backoff overrides the
// retry backoff; route_key and labels are kept with the task. An unknown
// field is refused with 400.
//
// POST /v1/tasks/batch takes {"tasks": [<submit body>, ...]}; every item is
// decoded as by DecodeSubmit, and one invalid item refuses the whole batch
// with a message naming it ("tasks[3]: handler: required"). Otherwise the
// answer is 200 with one result per item, in order: {"status": 201, "task":
// {...}} (created), {"status": 200, "task": {...}} (existing, same spec) or
// {"status": 409, "error": {"code": "conflict", "message": "..."}}. An error
// of the batch as a whole (no_leader, queue_full) is the usual error reply.
// The other bodies are decoded by DecodeHeartbeat, DecodeAttemptResult and
// DecodeExecutor (ValidateExecutor), which document their fields.
//
// Every request runs with a context that ends after
// ServerOptions.RequestTimeout (30s by default); request bodies are bounded by
// ServerOptions.MaxRequestBodyBytes (a PayloadMaxBytes payload in base64 plus
// slack). Requests are logged at debug level without payloads. The socket is
// created with mode 0660.
//
// # Errors
//
// Every error reply has Content-Type application/json and the body
//
//	{"error": {"code": "not_found", "message": "task \"x\": not found"}}
//
// with one of these codes:
//
//	code                status  sentinel             meaning
//	bad_request         400     ErrInvalid           invalid field, unknown field, bad id
//	invalid_json        400     ErrInvalidJSON       the body is not a JSON object
//	not_found           404     ErrNotFound          unknown task, executor or path
//	method_not_allowed  405     ErrMethodNotAllowed  see the Allow header
//	conflict            409     ErrConflict          same id, different spec; retry of a task that is not
//	                                                 DEAD or FAILED; heartbeat or result of a stale attempt
//	payload_too_large   413     ErrTooLarge          payload over PayloadMaxBytes, or body too large
//	queue_full          429     ErrQueueFull         a bound was hit; Retry-After says when to retry
//	no_leader           503     ErrNoLeader          no Raft leader; Retry-After: 1
//	not_ready           503     ErrNotReady          the node is not ready, or the request timed out
//	storage_unavailable 503     ErrStorageUnavailable  writes only: the node's disk cannot take writes;
//	                                                 Retry-After: 5 (a Backend that is a WriteGuard)
//	internal            500     ErrInternal          anything else; detail only in the server log
//
// ErrorCodes lists the codes; the client libraries mirror them. A Backend
// returns errors that wrap a sentinel, either with fmt.Errorf("task %q: %w",
// id, ErrNotFound) or with Errorf(ErrNotFound, "task %q", id); errors.Is
// matches an *Error against a sentinel by code. MapError turns any error into
// the reply's status, code, message and Retry-After; it is the only place that
// decides. A Backend call that outlives the request timeout answers 503
// not_ready with Retry-After: 1, whose message warns that a submit may still
// take effect (retry with the same id).
//
// # Callbacks
//
// A Caller delivers one attempt with Execute: it POSTs the payload, byte for
// byte, to the executor's base URL + "/ax/v1/execute". Base URLs are
// unix:///abs/path.sock or http://127.0.0.1:PORT (loopback only; see
// ParseExecutorURL). Request headers:
//
//	Content-Type: application/octet-stream
//	Ax-Task-Id:   the task id (raw UTF-8 bytes; HTTP trims spaces at its ends)
//	Ax-Handler:   the handler
//	Ax-Attempt:   attempt number within the run, from 1
//	Ax-Run:       run number of the task, from 1
//	Ax-Deadline:  when the sidecar gives up, RFC 3339 UTC with milliseconds
//
// The executor's answer decides the Outcome:
//
//	2xx except 202          OutcomeSuccess    done
//	202                     OutcomeAccepted   the executor reports later via /v1/tasks/{id}/result
//	429, 503                OutcomeBusy       not a failed attempt; Retry-After honoured, limiter backs off
//	other 4xx               OutcomePermanent  FAILED, no retry
//	5xx, other, conn. error OutcomeRetryable  failed attempt, retried with backoff
//	deadline reached        OutcomeTimeout    failed attempt; the request is aborted
//	ctx cancelled           OutcomeCancelled  the request is aborted (task cancelled, node stopping)
//
// Outcome.Error holds "http 500: <first 200 characters of the body>",
// "timeout after 30s" or the connection error, ready for Task.LastError.
// The executor must treat the task id and attempt as a de-duplication key:
// delivery is at least once.
package ipc
