package ax

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/axsched/ax/clients/go/axapi"
)

// BatchMaxTasks is the most tasks one SubmitBatch may carry.
const BatchMaxTasks = axapi.BatchMaxTasks

// BatchResult is the outcome of one task of a SubmitBatch, at the same index
// as its SubmitRequest.
type BatchResult struct {
	// Task is the task as stored: new (Created) or the existing one with the
	// same id and spec. Nil when Err is set.
	Task *Task
	// Created is true when the task was created, false when a task with the
	// same id and spec existed already (or on error).
	Created bool
	// Status is the HTTP status of the item: 201 (created), 200 (existed),
	// or the error's status (409 for a conflict).
	Status int
	// Err is the item's error, an *APIError: it matches ErrConflict when a
	// task with the same id exists with a different spec and Overwrite is not
	// set. The other items are unaffected.
	Err error
}

// BatchOption changes how SubmitBatch asks and what it returns.
type BatchOption func(*batchOptions)

type batchOptions struct{ minimal bool }

// MinimalResults asks the sidecar for minimal results (Prefer:
// return=minimal, RFC 7240): each created or existing item's Task then
// has only ID and State set, the other fields zero; Created, Status and
// Err are as without it. A bulk load that only needs to know each item was
// accepted saves the sidecar building and encoding a full view per task
// (0.5–1 µs of its ~9 µs a task in a stream of 1 000-task batches) and
// the client decoding it (with encoding/json, most of its CPU per batch).
// A sidecar that predates it answers full views, returned as usual.
func MinimalResults() BatchOption { return func(o *batchOptions) { o.minimal = true } }

// SubmitBatch submits many tasks in one request and one Raft round trip,
// which is much faster than as many Submit calls. Results are in the order
// of reqs, one per task; each item is idempotent by id like Submit.
//
// The error is for the batch as a whole: nothing is submitted when one
// request is invalid (ErrInvalid naming the item: "tasks[3]: ..."), when
// there are more than BatchMaxTasks, or when the sidecar refuses the batch
// (ErrQueueFull, ErrNoLeader after a few retries, ErrTooLarge,
// ErrUnavailable). Otherwise, look at each BatchResult.Err: an item can fail
// (ErrConflict) while the others are submitted.
//
// An empty reqs returns no results and sends nothing. When the sidecar sent
// an Ax-Backlog-Warning with the answer, it is copied to the BacklogWarning
// of every returned task. Options: MinimalResults.
func (c *Client) SubmitBatch(ctx context.Context, reqs []SubmitRequest, opts ...BatchOption) ([]BatchResult, error) {
	var o batchOptions
	for _, opt := range opts {
		opt(&o)
	}
	if len(reqs) == 0 {
		return []BatchResult{}, nil
	}
	if len(reqs) > BatchMaxTasks {
		return nil, fmt.Errorf("%w: %d tasks in one batch, the limit is %d", ErrInvalid, len(reqs), BatchMaxTasks)
	}
	var body bytes.Buffer
	body.WriteString(`{"tasks":[`)
	for i, req := range reqs {
		if req.Handler == "" {
			return nil, fmt.Errorf("%w: tasks[%d]: handler: required", ErrInvalid, i)
		}
		item, err := encodeSubmit(withTrace(ctx, req))
		if err != nil {
			return nil, batchItemError(i, err)
		}
		if i > 0 {
			body.WriteByte(',')
		}
		body.Write(item)
	}
	body.WriteString(`]}`)

	var w axapi.BatchResponse
	if o.minimal {
		ctx = withPrefer(ctx, axapi.PreferReturnMinimal)
	}
	hdr, err := c.doHeader(ctx, http.MethodPost, "/v1/tasks/batch", body.Bytes(), &w)
	if err != nil {
		return nil, err
	}
	if len(w.Results) != len(reqs) {
		return nil, fmt.Errorf("ax: POST /v1/tasks/batch: %d results for %d tasks", len(w.Results), len(reqs))
	}
	warning := hdr.Get(HeaderBacklogWarning)
	out := make([]BatchResult, len(reqs))
	for i, r := range w.Results {
		out[i].Status = r.Status
		switch {
		case r.Error != nil || r.Status/100 != 2:
			e := &APIError{Status: r.Status}
			if r.Error != nil {
				fillAPIError(e, r.Error)
			}
			out[i].Err = e
		case r.Task == nil:
			return nil, fmt.Errorf("ax: POST /v1/tasks/batch: result %d has status %d and no task", i, r.Status)
		default:
			t, err := taskFromWire(r.Task)
			if err != nil {
				return nil, err
			}
			t.BacklogWarning = warning
			out[i].Task, out[i].Created = t, r.Status == http.StatusCreated
		}
	}
	return out, nil
}

// preferKey is the context key of the Prefer header roundTrip sends.
type preferKey struct{}

// withPrefer returns ctx with the Prefer header value v for the requests
// made with it.
func withPrefer(ctx context.Context, v string) context.Context {
	return context.WithValue(ctx, preferKey{}, v)
}

// batchItemError names the item in an error of encodeSubmit.
func batchItemError(i int, err error) error {
	if errors.Is(err, ErrInvalid) {
		msg := strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": ")
		return fmt.Errorf("%w: tasks[%d]: %s", ErrInvalid, i, msg)
	}
	return fmt.Errorf("ax: tasks[%d]: %w", i, err)
}
