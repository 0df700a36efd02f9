// Package callback is the HTTP client of the callback, the request that
// delivers one attempt of a task to its executor, and the contract of that
// request (path, headers, how an answer is classified into an Outcome).
//
// It imports the standard library, golang.org/x/sys, the wire contract
// (clients/go/axapi), raftfsm (the outcome kinds) and engine (the Clock
// interface); ax packages import it (sidecar/delivery to deliver, ipc and
// sidecar to check an executor URL with ParseExecutorURL), never the other
// way round. It measures time on the wall clock: its connection time-outs
// are on real connections, and its durations are those of real round
// trips. The one exception is a callback's deadline, which follows
// CallerOptions.Clock when that is set (a test's fake clock, so that a
// callback times out when the test moves its clock past the deadline).
//
// The callback's client is its own (conn.go): an HTTP/1.1 POST written and
// read on the caller's goroutine over a pool of kept-alive connections per
// executor, the answer parsed by net/http's http.ReadResponse; alerts
// (PostAlert) go through a net/http Client.
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
//	2xx except 202          raftfsm.OutcomeSuccess    done
//	202                     raftfsm.OutcomeAccepted   the executor reports later via /v1/tasks/{id}/result
//	429, 503                raftfsm.OutcomeBusy       not a failed attempt; Retry-After honoured, limiter backs off
//	other 4xx               raftfsm.OutcomePermanent  FAILED, no retry
//	5xx, other, conn. error raftfsm.OutcomeRetryable  failed attempt, retried with backoff
//	deadline reached        raftfsm.OutcomeTimeout    failed attempt; the request is aborted
//	ctx cancelled           raftfsm.OutcomeCancelled  the request is aborted (task cancelled, node stopping)
//	request not given to it raftfsm.OutcomeUnavailable not an attempt (see below)
//
// A connection error counts as a failed attempt only once a byte of the
// request was written to the executor's connection (and, over TCP,
// acknowledged by its kernel): before that the callback certainly did not
// run, and the outcome is raftfsm.OutcomeUnavailable, with Outcome.Overloaded for
// an executor that is there but did not take the connection (EAGAIN, a
// connect not done within DialTimeout, a reset before sending, a TCP
// request unacknowledged for UnackedTimeout) and without it for one that
// is absent (refused, no socket file). An overloaded connect is retried
// with 1–20 ms pauses within DialTimeout first (see dialRetrying).
//
// Outcome.Error holds "http 500: <first 200 characters of the body>",
// "timeout after 30s" or the connection error, ready for Task.LastError.
// The executor must treat the task id and attempt as a de-duplication key:
// delivery is at least once.
package callback
