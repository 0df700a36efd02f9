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
	// HeaderShardIndex is the shard's index within its run, from 0, on
	// every attempt of a sharded task's shard (absent for unsharded tasks).
	HeaderShardIndex = "Ax-Shard-Index"
	// HeaderShardTotal is the number of shards of the run, on every attempt
	// of a sharded task's shard (absent for unsharded tasks).
	HeaderShardTotal = "Ax-Shard-Total"
)

// ShardsPath is the path on an executor's base URL where the sidecar asks
// how many shards a run of a task with "shards": {"ask": true} gets: a POST
// with the callback's headers and the task's payload as body, answered 200
// with {"count": n}, n >= 1.
const ShardsPath = "/ax/v1/shards"

// DeadlineFormat is the layout of the Ax-Deadline header: RFC 3339 in UTC
// with milliseconds (a parser of time.RFC3339Nano reads it).
const DeadlineFormat = "2006-01-02T15:04:05.000Z07:00"
