package ax_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	ax "github.com/axsched/ax/clients/go"
)

// exampleSidecar starts a fake sidecar on a temporary socket for the
// examples; a real application talks to the ax sidecar next to it.
func exampleSidecar() (socket string, stop func()) {
	dir, err := os.MkdirTemp("", "ax-example")
	if err != nil {
		log.Fatal(err)
	}
	f, err := newFakeSidecar(dir)
	if err != nil {
		log.Fatal(err)
	}
	return f.Socket, func() { f.Close(); os.RemoveAll(dir) }
}

// Submit a delayed task, look it up and cancel it.
func Example() {
	socket, stop := exampleSidecar()
	defer stop()
	ctx := context.Background()

	client := ax.New(ax.Config{SocketPath: socket})
	task, err := client.Submit(ctx, ax.SubmitRequest{
		ID:      "order|42", // idempotency key: submitting it again returns this task
		Handler: "order.timeout",
		Payload: map[string]any{"order_id": 42},
		Delay:   30 * time.Minute,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.ID, task.State, task.Handler, string(task.Payload))
	fmt.Println("due in", task.NextRunAt.Sub(task.CreatedAt), "priority", task.Priority, "attempts", task.MaxAttempts, "timeout", task.Timeout)

	task, err = client.Get(ctx, "order|42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.State)

	task, err = client.Cancel(ctx, "order|42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.State, task.State.Terminal())

	// Output:
	// order|42 WAITING order.timeout {"order_id":42}
	// due in 30m0s priority 2 attempts 4 timeout 30s
	// WAITING
	// CANCELLED true
}

// Tell error kinds apart with errors.Is, and read the details with errors.As.
func Example_errors() {
	socket, stop := exampleSidecar()
	defer stop()
	ctx := context.Background()
	client := ax.New(ax.Config{SocketPath: socket})

	_, err := client.Get(ctx, "no-such-task")
	fmt.Println(errors.Is(err, ax.ErrNotFound))

	client.Submit(ctx, ax.SubmitRequest{ID: "report", Handler: "report.build", Delay: time.Hour})
	_, err = client.Submit(ctx, ax.SubmitRequest{ID: "report", Handler: "report.build", Delay: 2 * time.Hour})
	var apiErr *ax.APIError
	if errors.Is(err, ax.ErrConflict) && errors.As(err, &apiErr) {
		fmt.Println(apiErr.Status, apiErr.Code)
	}

	stop() // the sidecar goes away
	_, err = client.Get(ctx, "report")
	fmt.Println(errors.Is(err, ax.ErrUnavailable))

	// Output:
	// true
	// 409 conflict
	// true
}

// An Executor answers the sidecar's callbacks. Here a callback is simulated
// with httptest; an application runs ListenAndServeUnix instead.
func ExampleExecutor() {
	ex := ax.NewExecutor()
	// HandleResult: the returned value is the run's result (ax runs ID RUN);
	// HandleFunc registers a handler without one.
	ex.HandleResult("order.timeout", func(ctx context.Context, d *ax.Delivery) (any, error) {
		var p struct {
			OrderID int `json:"order_id"`
		}
		if err := json.Unmarshal(d.Payload, &p); err != nil {
			return nil, ax.Permanent(fmt.Errorf("bad payload: %w", err)) // FAILED, no retry
		}
		fmt.Printf("closing order %d (task %s, attempt %d)\n", p.OrderID, d.TaskID, d.Attempt)
		return map[string]int{"closed": p.OrderID}, nil // SUCCESS, with a result
	})

	for _, payload := range []string{`{"order_id":42}`, `not json`} {
		req := httptest.NewRequest(http.MethodPost, ax.ExecutePath, strings.NewReader(payload))
		req.Header.Set(ax.HeaderTaskID, "order|42")
		req.Header.Set(ax.HeaderHandler, "order.timeout")
		req.Header.Set(ax.HeaderAttempt, "1")
		rec := httptest.NewRecorder()
		ex.ServeHTTP(rec, req)
		fmt.Println(rec.Code, strings.TrimSpace(rec.Body.String()))
	}

	// Output:
	// closing order 42 (task order|42, attempt 1)
	// 200 {"closed":42}
	// 422 bad payload: invalid character 'o' in literal null (expecting 'u')
}

// Snooze tells the sidecar the executor is busy: the attempt comes back later
// and does not count as a failure.
func ExampleSnooze() {
	ex := ax.NewExecutor()
	ex.HandleFunc("report.build", func(ctx context.Context, d *ax.Delivery) error {
		return ax.Snooze(30 * time.Second)
	})
	req := httptest.NewRequest(http.MethodPost, ax.ExecutePath, nil)
	req.Header.Set(ax.HeaderTaskID, "report")
	req.Header.Set(ax.HeaderHandler, "report.build")
	rec := httptest.NewRecorder()
	ex.ServeHTTP(rec, req)
	fmt.Println(rec.Code, rec.Header().Get("Retry-After"))
	// Output: 503 30
}
