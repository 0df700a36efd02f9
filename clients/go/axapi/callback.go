package axapi

// The callback: what a sidecar sends an executor for each attempt. The
// sidecar POSTs the task's payload, as submitted, to ExecutePath on the
// executor's base URL, with these headers.
const (
	// ExecutePath is the path of the callback on an executor's base URL.
	ExecutePath = "/ax/v1/execute"

	// HeaderTaskID is the task's id.
	HeaderTaskID = "Ax-Task-Id"
	// HeaderHandler is the task's handler.
	HeaderHandler = "Ax-Handler"
	// HeaderAttempt numbers the attempt within its run, from 1 (the
	// attempt a heartbeat or result names).
	HeaderAttempt = "Ax-Attempt"
	// HeaderRun numbers the run of the task, from 1.
	HeaderRun = "Ax-Run"
	// HeaderDeadline is when the attempt times out, in DeadlineFormat.
	HeaderDeadline = "Ax-Deadline"
	// HeaderTraceParent carries the W3C trace context of the task, when it
	// has one.
	HeaderTraceParent = "traceparent"
)

// DeadlineFormat is the layout of the Ax-Deadline header: RFC 3339 in UTC
// with milliseconds (a parser of time.RFC3339Nano reads it).
const DeadlineFormat = "2006-01-02T15:04:05.000Z07:00"
