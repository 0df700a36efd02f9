package ax_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	ax "github.com/axsched/ax/clients/go"
)

func Test_Client_Retry(t *testing.T) {
	f := startFakeSidecar(t)
	c := newClient(t, f)
	ctx := testContext(t)

	if _, err := c.Submit(ctx, ax.SubmitRequest{ID: "order|42", Handler: "h"}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Retry(ctx, "order|42")
	if !errors.Is(err, ax.ErrConflict) {
		t.Fatalf("retry of a WAITING task: %v, want ErrConflict", err)
	}
	f.SetState("order|42", "DEAD")
	task, err := c.Retry(ctx, "order|42")
	if err != nil {
		t.Fatal(err)
	}
	if task.ID != "order|42" || task.State != ax.StateWaiting {
		t.Fatalf("retried task %+v", task)
	}
	req := f.LastRequest()
	if req.Method != "POST" || req.RequestURI != "/v1/tasks/order%7C42/retry" || string(req.Body) != "{}" {
		t.Fatalf("request %s %s %q", req.Method, req.RequestURI, req.Body)
	}
	if _, err := c.Retry(ctx, "nope"); !errors.Is(err, ax.ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
	if _, err := c.Retry(ctx, ""); !errors.Is(err, ax.ErrInvalid) {
		t.Fatalf("empty id: %v", err)
	}
}

func Test_Client_RegisterExecutor(t *testing.T) {
	f := startFakeSidecar(t)
	c := newClient(t, f)
	ctx := testContext(t)

	reg := ax.ExecutorRegistration{
		Name: "orders:v2", Handlers: []string{"order.timeout", "order.*"}, URL: "unix:///run/app.sock",
		MaxConcurrency: 4, Timeout: 90 * time.Second,
	}
	if err := c.RegisterExecutor(ctx, reg); err != nil {
		t.Fatal(err)
	}
	got := mustJSON(t, f.Executor("orders:v2"))
	want := map[string]any{"name": "orders:v2", "handlers": []any{"order.timeout", "order.*"},
		"url": "unix:///run/app.sock", "max_concurrency": float64(4), "timeout": "1m30s"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("registration %v, want %v", got, want)
	}
	if err := c.RegisterExecutor(ctx, reg); err != nil { // again: replaces
		t.Fatal(err)
	}
	if err := c.UnregisterExecutor(ctx, "orders:v2"); err != nil {
		t.Fatal(err)
	}
	if req := f.LastRequest(); req.Method != "DELETE" || req.RequestURI != "/v1/executors/orders:v2" {
		t.Fatalf("request %s %s", req.Method, req.RequestURI)
	}
	if err := c.UnregisterExecutor(ctx, "orders:v2"); !errors.Is(err, ax.ErrNotFound) {
		t.Fatalf("unregister twice: %v", err)
	}

	// Refused before sending.
	n := len(f.Requests())
	for _, name := range []string{"", "a b", "py/w", ".", "..", strings.Repeat("x", 129), "café"} {
		err := c.RegisterExecutor(ctx, ax.ExecutorRegistration{Name: name, Handlers: []string{"h"}, URL: "unix:///a"})
		if !errors.Is(err, ax.ErrInvalid) {
			t.Errorf("name %q: %v, want ErrInvalid", name, err)
		}
		if err := c.UnregisterExecutor(ctx, name); !errors.Is(err, ax.ErrInvalid) {
			t.Errorf("unregister %q: %v, want ErrInvalid", name, err)
		}
	}
	if err := c.RegisterExecutor(ctx, ax.ExecutorRegistration{Name: "x"}); !errors.Is(err, ax.ErrInvalid) {
		t.Errorf("no handlers: %v", err)
	}
	if len(f.Requests()) != n {
		t.Fatal("invalid registrations were sent")
	}
	err := c.RegisterExecutor(ctx, ax.ExecutorRegistration{Name: "x", Handlers: []string{"h"}})
	if !errors.Is(err, ax.ErrInvalid) || !strings.Contains(err.Error(), "url: required") {
		t.Fatalf("the sidecar's refusal: %v", err)
	}
}
