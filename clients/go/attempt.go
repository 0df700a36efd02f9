package ax

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/axsched/ax/clients/go/axapi"
)

// ResultStatus is the outcome of an attempt reported with
// Client.ReportResult.
type ResultStatus string

// Attempt outcomes of Client.ReportResult.
const (
	// ResultSuccess: the attempt succeeded; the run is done (SUCCESS, or the
	// next slot of a recurring task).
	ResultSuccess ResultStatus = axapi.ResultSuccess
	// ResultFailed: a failed attempt, retried with backoff until the
	// attempts are exhausted (then DEAD).
	ResultFailed ResultStatus = axapi.ResultFailed
	// ResultPermanent: a permanent failure; the task becomes FAILED without
	// further attempts.
	ResultPermanent ResultStatus = axapi.ResultPermanent
)

// ResultErrorMaxBytes bounds the error text of ReportResult; a longer text
// is cut.
const ResultErrorMaxBytes = axapi.ResultErrorMaxBytes

// Heartbeat extends the lease of a running attempt: the sidecar keeps
// waiting for its result until now plus the task's timeout (and a grace),
// instead of counting it as timed out. id and attempt are the Delivery's
// TaskID and Attempt.
//
// Heartbeats matter for an attempt answered with Async, whose work goes on
// after the callback returned: send one more often than the task's timeout
// until ReportResult. (They do not lengthen a callback the executor is still
// answering: the sidecar ends that one at its Ax-Deadline.) Inside a
// handler, the package-level Heartbeat(ctx) finds id and attempt itself.
//
// An attempt that is no longer the task's running attempt (it timed out,
// was cancelled, or was reported) gives an error matching ErrConflict: stop
// working on it. An unknown id gives ErrNotFound.
func (c *Client) Heartbeat(ctx context.Context, id string, attempt int) (*Task, error) {
	if err := checkAttemptRef(id, attempt); err != nil {
		return nil, err
	}
	body, _ := json.Marshal(axapi.Heartbeat{Attempt: attempt})
	var w axapi.Task
	if err := c.do(ctx, http.MethodPost, taskPath(id)+"/heartbeat", body, &w); err != nil {
		return nil, err
	}
	return taskFromWire(&w)
}

// ReportResult reports the outcome of an attempt the executor answered with
// Async (HTTP 202), and returns the task in its new state. errText, only
// with ResultFailed or ResultPermanent, becomes the task's LastError; it is
// cut to ResultErrorMaxBytes and made valid UTF-8. Inside a handler, or with
// a context derived from one, the package-level Report(ctx, err) finds id
// and attempt itself.
//
// Reporting an attempt that is not the task's running attempt (it timed
// out, was cancelled, or was already reported) gives an error matching
// ErrConflict; an unknown id gives ErrNotFound.
func (c *Client) ReportResult(ctx context.Context, id string, attempt int, status ResultStatus, errText string) (*Task, error) {
	return c.report(ctx, id, attempt, status, errText, nil)
}

// ReportSuccess reports that an attempt answered with Async succeeded,
// with result (encoded as JSON; nil for none) as the run's result (see
// SetResult): ReportResult with ResultSuccess and a result. A result over
// axapi.ResultMaxBytes (64 KiB) encoded gives an error matching
// ErrInvalid.
func (c *Client) ReportSuccess(ctx context.Context, id string, attempt int, result any) (*Task, error) {
	var raw json.RawMessage
	if result != nil {
		b, err := json.Marshal(result)
		if err != nil {
			return nil, fmt.Errorf("%w: ReportSuccess: encode result: %v", ErrInvalid, err)
		}
		if len(b) > axapi.ResultMaxBytes {
			return nil, fmt.Errorf("%w: ReportSuccess: result of %d bytes, the limit is %d", ErrInvalid, len(b), axapi.ResultMaxBytes)
		}
		raw = b
	}
	return c.report(ctx, id, attempt, ResultSuccess, "", raw)
}

func (c *Client) report(ctx context.Context, id string, attempt int, status ResultStatus, errText string, result json.RawMessage) (*Task, error) {
	if err := checkAttemptRef(id, attempt); err != nil {
		return nil, err
	}
	switch status {
	case ResultSuccess:
		if errText != "" {
			return nil, fmt.Errorf("%w: ReportResult: an error text only goes with %q or %q", ErrInvalid, ResultFailed, ResultPermanent)
		}
	case ResultFailed, ResultPermanent:
	default:
		return nil, fmt.Errorf("%w: ReportResult: status must be %q, %q or %q, got %q", ErrInvalid, ResultSuccess, ResultFailed, ResultPermanent, status)
	}
	body, err := json.Marshal(axapi.AttemptResult{Attempt: attempt, Status: string(status), Error: cutUTF8(errText, ResultErrorMaxBytes), Result: result})
	if err != nil {
		return nil, fmt.Errorf("ax: encode result: %w", err)
	}
	var w axapi.Task
	if err := c.do(ctx, http.MethodPost, taskPath(id)+"/result", body, &w); err != nil {
		return nil, err
	}
	return taskFromWire(&w)
}

func checkAttemptRef(id string, attempt int) error {
	if id == "" {
		return fmt.Errorf("%w: empty task id", ErrInvalid)
	}
	if attempt < 1 {
		return fmt.Errorf("%w: attempt must be >= 1 (the Delivery's Attempt), got %d", ErrInvalid, attempt)
	}
	return nil
}

// cutUTF8 returns s as valid UTF-8 of at most n bytes, cut at a rune
// boundary.
func cutUTF8(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 {
		r, size := utf8.DecodeLastRuneInString(s)
		if r != utf8.RuneError || size > 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}
