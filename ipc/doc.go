// Package ipc is the application-facing edge of ax: the JSON API that
// applications call on their sidecar's Unix socket and its error model. The
// callback client that delivers attempts to executors is
// sidecar/delivery/callback.
//
// The JSON types, limits and error codes of the API are the wire contract
// of package axapi (github.com/axsched/ax/clients/go/axapi), which the Go
// client and the command line use too; contract.go names the types ipc's
// Backend uses (Task, ExecutorSpec, HandlerInfo, ClusterInfo, ...). ipc adds
// what only the server does: the routes, the strict decoding and validation
// of requests (DecodeSubmit and its siblings), and the Error sentinels built
// from axapi's error table.
//
// ipc knows nothing of Raft or storage. Everything the handlers need from a
// node is the Backend interface (backend.go), which the sidecar implements and
// tests fake. ipc never imports raft; of raftfsm it uses only the
// attempt outcome (raftfsm.Outcome, the one outcome type of ax), in the
// callback client.
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
//	POST   /v1/tasks/batch            submit 1 to axapi.BatchMaxTasks tasks; 200 {"results":[...]}
//	POST   /v1/tasks/purge            {"handler","state","finished_before","limit","cursor"}:
//	                                  delete finished tasks now; 200 {"purged":n,"more":bool,
//	                                  "next_cursor"}, next_cursor the next request's cursor
//	GET    /v1/tasks/{id}             the task (with its newest run's result)
//	GET    /v1/tasks/{id}/runs        its run history, newest first (?limit=&cursor=)
//	GET    /v1/tasks/{id}/runs/{run}  one run with its attempts and result
//	DELETE /v1/tasks/{id}             cancel; 200 + the task in its new state
//	                                  (?purge=true: delete a finished task; 200 {"purged":1})
//	POST   /v1/tasks/{id}/retry       re-run a DEAD or FAILED task; 200 + the task
//	POST   /v1/tasks/{id}/heartbeat   {"attempt":N}: extend the running attempt's deadline
//	POST   /v1/tasks/{id}/result      {"attempt":N,"status":"success"|"failed"|"permanent",
//	                                  "error":"..."}: outcome of an attempt answered 202
//	POST   /v1/tasks/{id}/pause       pause the task's runs (a running attempt goes on); 200 + the task
//	POST   /v1/tasks/{id}/resume      resume it; 200 + the task
//	GET    /v1/flows                  {"flows":[...],"next_cursor"}: flows in id order (limit, cursor)
//	POST   /v1/flows                  submit a flow (stages with depends_on); 201, or 200 when it exists
//	GET    /v1/flows/{id}             the flow and its stages' states
//	DELETE /v1/flows/{id}             cancel the flow's pending, waiting and running stages; 200 + the flow
//	                                  (?purge=true: delete a finished flow; 200 {"purged":1})
//	GET    /v1/handlers               {"handlers":[...]}: backlog, parked runs, pause, circuit, executors
//	POST   /v1/handlers/{name}/pause  pause every run of a handler; 200 {"name","paused":true}
//	POST   /v1/handlers/{name}/resume resume them; 200 {"name","paused":false}
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
// most axapi.IDMaxBytes, without control characters. Clients URL-escape them in
// paths ("/v1/tasks/A%2FB"); the server routes on the raw request path and
// unescapes the id segment, so an escaped slash stays inside the id, and a
// task named "batch" is still GET /v1/tasks/batch (only POST goes to the
// batch route). Executor names are 1 to axapi.ExecutorNameMaxBytes characters among
// A-Z a-z 0-9 . _ : - (see ValidateExecutorName). The routes that take
// query parameters (GET /v1/tasks, /v1/tasks/{id} and its runs, /v1/flows,
// DELETE of a task or a flow) refuse one they do not know or given twice;
// GET of one run or one flow, GET /v1/handlers and POST /v1/tasks/purge
// refuse any; and all of them a malformed query string, a percent escape
// without two hex digits or a parameter without a name (query.go). Every
// other route refuses any query string before it acts (readsQuery, in
// routes.go), but the probes and /metrics, which ignore theirs.
//
// The submit body is decoded by DecodeSubmit, which documents every field,
// its default and its bounds. payload is any JSON value, kept byte for byte
// and delivered as the callback body; payload_base64 carries binary. The
// task view (Task.MarshalJSON) gives the payload back the way it came:
// "payload" as raw JSON, or "payload_base64". Recurring tasks take cron
// (+ timezone) or every, with repeats and until; backoff overrides the
// retry backoff; route_key and labels are kept with the task. An unknown
// field is refused with 400 bad_request; an object with the same key twice
// (field names compared without regard to case, as encoding/json matches
// them; label keys exactly) with 400 invalid_json, in every body, except
// inside a payload or a result, which are the app's JSON as sent. A body
// that is not valid UTF-8 anywhere, a payload or a result included, is 400
// invalid_json giving the byte (checkUTF8; binary goes in payload_base64),
// after the decoder's own checks: "id: not valid UTF-8" still names its
// field.
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
// slack). A new connection must send its first request, and every request
// its headers, within ServerOptions.HeaderTimeout (10s; a connection that
// sent nothing is closed without an answer), its body within ReadTimeout
// (30s); at most MaxConns (16 384) connections are served at once.
// Requests are logged at debug level without payloads, and neither logs
// nor error answers quote a request's bytes. The socket is created with
// mode 0660.
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
//	invalid_json        400     ErrInvalidJSON       the body is not a JSON object, has a key twice or
//	                                                 is not valid UTF-8
//	not_found           404     ErrNotFound          unknown task, executor or path
//	handler_not_found   404     ErrHandlerNotFound   pause or resume of a handler with no task, executor or pause
//	method_not_allowed  405     ErrMethodNotAllowed  see the Allow header
//	conflict            409     ErrConflict          same id, different spec; retry of a task that is not
//	                                                 DEAD or FAILED; heartbeat or result of a stale attempt
//	task_finished       409     ErrTaskFinished      pause of a finished task
//	payload_too_large   413     ErrTooLarge          payload over PayloadMaxBytes, or body too large
//	queue_full          429     ErrQueueFull         a bound was hit; Retry-After says when to retry
//	no_leader           503     ErrNoLeader          no Raft leader; Retry-After: 1
//	not_ready           503     ErrNotReady          the node is not ready, or the request timed out
//	storage_unavailable 503     ErrStorageUnavailable  writes only: the node's disk cannot take writes;
//	                                                 Retry-After: 5 (a Backend that is a WriteGuard;
//	                                                 a FreeingWriteGuard still takes cancels and purges)
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
package ipc
