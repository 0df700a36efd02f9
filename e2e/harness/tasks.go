package harness

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// CheckHeaders checks a callback's method, path and Ax-* headers.
func CheckHeaders(c Call, id, handler string, attempt int, timeout time.Duration) []string {
	var p []string
	if c.Method != http.MethodPost || c.Path != executePath {
		p = append(p, fmt.Sprintf("%s %s, want POST %s", c.Method, c.Path, executePath))
	}
	if c.TaskID != id {
		p = append(p, fmt.Sprintf("Ax-Task-Id %q, want %q", c.TaskID, id))
	}
	if c.Handler != handler {
		p = append(p, fmt.Sprintf("Ax-Handler %q, want %q", c.Handler, handler))
	}
	if c.Attempt != fmt.Sprint(attempt) {
		p = append(p, fmt.Sprintf("Ax-Attempt %q, want %d", c.Attempt, attempt))
	}
	if c.Run != "1" {
		p = append(p, fmt.Sprintf("Ax-Run %q, want 1", c.Run))
	}
	dl, err := time.Parse(time.RFC3339Nano, c.Deadline)
	switch {
	case err != nil:
		p = append(p, fmt.Sprintf("Ax-Deadline %q: %v", c.Deadline, err))
	case !dl.After(c.At):
		p = append(p, fmt.Sprintf("Ax-Deadline %s is not after the receive time %s", c.Deadline, c.At.Format(time.RFC3339Nano)))
	case dl.After(c.At.Add(timeout + time.Second)):
		p = append(p, fmt.Sprintf("Ax-Deadline %s is more than timeout %s after the receive time %s", c.Deadline, timeout, c.At.Format(time.RFC3339Nano)))
	}
	return p
}

// StateTimeout bounds the wait for a task to reach a state.
const StateTimeout = 20 * time.Second

// ReqCtx returns a context for one request: 10 s, cancelled at the end of
// the test.
func ReqCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// MustSubmit submits r through n and fails unless the status is want; it
// returns the task of the reply.
func MustSubmit(t testing.TB, n *Node, r SubmitRequest, want int) Task {
	t.Helper()
	resp, err := n.Client.Submit(ReqCtx(t), r.Body())
	if err != nil {
		t.Fatalf("submit %q via %s: %v", r.ID, n.ID, err)
	}
	if resp.Status != want {
		t.Fatalf("submit %q via %s: want %d, got %s", r.ID, n.ID, want, resp)
	}
	task, err := resp.Task()
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// WaitState polls GET on n until the task is in state and returns it.
func WaitState(t testing.TB, n *Node, id, state string) Task {
	t.Helper()
	var task Task
	WaitFor(t, StateTimeout, 50*time.Millisecond, fmt.Sprintf("task %q to be %s on %s", id, state, n.ID), func() error {
		var err error
		task, err = n.Client.GetTask(ReqCtx(t), id)
		if err != nil {
			return err
		}
		if task.State != state {
			return fmt.Errorf("state %s (attempts %d, last_error %q)", task.State, task.Attempts, task.LastError)
		}
		return nil
	})
	return task
}

// WantError checks an error reply: status, a JSON body with the code and a
// non-empty message.
func WantError(t testing.TB, resp *Response, status int, code string) APIError {
	t.Helper()
	if resp.Status != status {
		t.Errorf("want %d %s, got %s", status, code, resp)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("error reply Content-Type %q, want application/json", ct)
	}
	e, err := resp.APIError()
	if err != nil {
		t.Errorf("%v", err)
		return e
	}
	if e.Error.Code != code {
		t.Errorf("error code %q, want %q (reply %s)", e.Error.Code, code, resp)
	}
	if strings.TrimSpace(e.Error.Message) == "" {
		t.Errorf("error reply without a message: %s", resp)
	}
	return e
}

// SubmitRaw submits a JSON body through n and fails unless the status is
// want.
func SubmitRaw(t testing.TB, n *Node, body string, want int) Task {
	t.Helper()
	resp, err := n.Client.Submit(ReqCtx(t), []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != want {
		t.Fatalf("submit %s: want %d, got %s", body, want, resp)
	}
	task, err := resp.Task()
	if err != nil {
		t.Fatal(err)
	}
	return task
}
