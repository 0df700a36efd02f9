// Package axapi is the wire contract of the ax socket API (the sidecar's
// ipc/openapi.yaml), written once: the JSON types of requests and
// answers, the API's limits and defaults, and the table of error codes.
//
// The sidecar's server (package ipc of github.com/axsched/ax), the Go
// client (package ax, the parent of this package) and the ax command line
// all use these types, so a field, a limit or a code cannot drift between
// them. The package itself uses only the standard library; it lives in the
// client's module because that is what applications import; the server's
// module requires it (go.mod's replace and go.work point at ./clients/go).
//
// Applications normally use the typed Client of package ax, whose Task,
// SubmitRequest and Backoff carry time.Duration and time.Time. This package
// is for code that speaks the JSON itself: the server, the command line
// (whose --json prints answers as received), tools and tests.
//
// What is here:
//
//   - Task (the task view of every answer that carries a task) with
//     BackoffView; SubmitRequest with BackoffRequest (POST /v1/tasks and the
//     items of POST /v1/tasks/batch); BatchResponse, ListPage, ExecutorSpec,
//     AttemptResult, Heartbeat, HandlerPause, HandlerInfo, PurgeRequest,
//     PurgeResult, ClusterInfo, and ErrorBody, the body of every error.
//   - The limits (PayloadMaxBytes, IDMaxBytes, BatchMaxTasks, ...) and the
//     defaults the server fills (PriorityDefault, TimeoutDefault, ...).
//   - The error table (ErrorTable, the Code constants): each code with its
//     HTTP status and default Retry-After. The Python client's list
//     (clients/python/axsched/errors.py) is checked against it by a test.
//   - The callback an executor receives: ExecutePath, the Header...
//     constants (Ax-Task-Id, Ax-Attempt, ...) and DeadlineFormat.
//   - ParseRetryAfter, which reads a Retry-After header (seconds or an HTTP
//     date), and TaskPath, the escaped path of a task.
//
// Validation (what a field may hold beyond its type) is the server's
// (ipc.DecodeSubmit and its siblings); clients check only what they must
// before sending, with the limits declared here.
package axapi
