package ax_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ax "github.com/axsched/ax/clients/go"
)

// serve runs one callback through ex and returns the recorder.
func serve(ex *ax.Executor, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	ex.ServeHTTP(rec, r)
	return rec
}

func Test_Executor_MiddlewareOrder(t *testing.T) {
	var mu sync.Mutex
	var trace []string
	log := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		trace = append(trace, s)
	}
	mw := func(name string) ax.Middleware {
		return func(next ax.Handler) ax.Handler {
			return ax.HandlerFunc(func(ctx context.Context, d *ax.Delivery) error {
				log(name + ">")
				err := next.Handle(ctx, d)
				log("<" + name)
				return err
			})
		}
	}
	ex := ax.NewExecutor()
	ex.HandleFunc("h", func(ctx context.Context, d *ax.Delivery) error { log("h"); return nil }) // before Use
	ex.Use(mw("a"), mw("b"))
	ex.Use(mw("c"))
	ex.HandleFunc(ax.FallbackHandler, func(ctx context.Context, d *ax.Delivery) error { log("*"); return errors.New("boom") })

	if rec := serve(ex, callback("h", nil)); rec.Code != 200 {
		t.Fatalf("h: %d %s", rec.Code, rec.Body)
	}
	if got := strings.Join(trace, " "); got != "a> b> c> h <c <b <a" {
		t.Fatalf("order %q", got)
	}
	trace = nil
	if rec := serve(ex, callback("other", nil)); rec.Code != 500 {
		t.Fatalf("fallback: %d", rec.Code)
	}
	if got := strings.Join(trace, " "); got != "a> b> c> * <c <b <a" {
		t.Fatalf("fallback order %q", got)
	}
	// Unknown handlers do not reach the middleware.
	trace = nil
	ex2 := ax.NewExecutor()
	ex2.Use(mw("a"))
	if rec := serve(ex2, callback("nope", nil)); rec.Code != 404 || len(trace) != 0 {
		t.Fatalf("unknown: %d, %v", rec.Code, trace)
	}

	// Middleware can change the result: every error becomes permanent.
	ex3 := ax.NewExecutor()
	ex3.Use(func(next ax.Handler) ax.Handler {
		return ax.HandlerFunc(func(ctx context.Context, d *ax.Delivery) error {
			return ax.Permanent(next.Handle(ctx, d))
		})
	})
	ex3.HandleFunc("h", func(ctx context.Context, d *ax.Delivery) error { return errors.New("bad input") })
	if rec := serve(ex3, callback("h", nil)); rec.Code != 422 {
		t.Fatalf("rewritten result: %d", rec.Code)
	}

	// A panic in middleware fails the attempt; a nil Handler from middleware too.
	ex4 := ax.NewExecutor()
	ex4.Use(func(next ax.Handler) ax.Handler {
		return ax.HandlerFunc(func(ctx context.Context, d *ax.Delivery) error { panic("mw") })
	})
	ex4.HandleFunc("h", func(ctx context.Context, d *ax.Delivery) error { return nil })
	if rec := serve(ex4, callback("h", nil)); rec.Code != 500 || !strings.Contains(rec.Body.String(), "panic") {
		t.Fatalf("panicking middleware: %d %s", rec.Code, rec.Body)
	}
	ex5 := ax.NewExecutor()
	ex5.Use(func(ax.Handler) ax.Handler { return nil })
	ex5.HandleFunc("h", func(ctx context.Context, d *ax.Delivery) error { return nil })
	if rec := serve(ex5, callback("h", nil)); rec.Code != 500 || !strings.Contains(rec.Body.String(), "nil Handler") {
		t.Fatalf("nil handler from middleware: %d %s", rec.Code, rec.Body)
	}

	defer func() {
		if recover() == nil {
			t.Fatal("Use(nil) did not panic")
		}
	}()
	ex.Use(nil)
}

func Test_Executor_ContextAccessors(t *testing.T) {
	if d, ok := ax.DeliveryFromContext(context.Background()); ok || d != nil {
		t.Fatal("a background context has no delivery")
	}
	deadline := time.Now().Add(time.Minute).UTC().Truncate(time.Millisecond)
	var got *ax.Delivery
	var ctxDeadline time.Time
	var fromMiddleware, detached bool
	ex := ax.NewExecutor()
	ex.Use(func(next ax.Handler) ax.Handler {
		return ax.HandlerFunc(func(ctx context.Context, d *ax.Delivery) error {
			md, ok := ax.DeliveryFromContext(ctx)
			fromMiddleware = ok && md == d
			return next.Handle(ctx, d)
		})
	})
	ex.HandleFunc("order.timeout", func(ctx context.Context, d *ax.Delivery) error {
		cd, ok := ax.DeliveryFromContext(ctx)
		if !ok || cd != d {
			return errors.New("no delivery in ctx")
		}
		got = cd
		ctxDeadline, _ = ctx.Deadline()
		dd, ok := ax.DeliveryFromContext(context.WithoutCancel(ctx))
		detached = ok && dd == d
		return nil
	})
	r := callback("order.timeout", []byte(`{"order_id":42}`))
	r.Header.Set(ax.HeaderDeadline, deadline.Format(time.RFC3339Nano))
	r.Header.Set(ax.HeaderRun, "3")
	r.Header.Set(ax.HeaderTraceParent, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if rec := serve(ex, r); rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if got == nil || got.TaskID != "order|42" || got.Handler != "order.timeout" || got.Attempt != 2 || got.Run != 3 ||
		!got.Deadline.Equal(deadline) || string(got.Payload) != `{"order_id":42}` ||
		got.TraceParent != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Fatalf("delivery %+v", got)
	}
	if !ctxDeadline.Equal(deadline) {
		t.Fatalf("ctx deadline %v, want %v", ctxDeadline, deadline)
	}
	if !fromMiddleware || !detached {
		t.Fatalf("middleware saw the delivery: %v; WithoutCancel keeps it: %v", fromMiddleware, detached)
	}
}

func Test_Executor_HeartbeatFromHandler(t *testing.T) {
	f := startFakeSidecar(t)
	c := newClient(t, f)
	ctx := testContext(t)
	if _, err := c.Submit(ctx, ax.SubmitRequest{ID: "order|42", Handler: "slow"}); err != nil {
		t.Fatal(err)
	}
	f.SetRunning("order|42", 2) // callback() delivers attempt 2 of order|42

	ex := ax.NewExecutor(ax.WithClient(c))
	beats := 0
	ex.HandleFunc("slow", func(ctx context.Context, d *ax.Delivery) error {
		for range 3 {
			if err := ax.Heartbeat(ctx); err != nil {
				return err
			}
			beats++
		}
		return nil
	})
	if rec := serve(ex, callback("slow", nil)); rec.Code != 200 || beats != 3 {
		t.Fatalf("%d %s, %d beats", rec.Code, rec.Body, beats)
	}
	if r := f.LastRequest(); r.Method != "POST" || r.RequestURI != "/v1/tasks/order%7C42/heartbeat" || string(r.Body) != `{"attempt":2}` {
		t.Fatalf("sent %s %s %s", r.Method, r.RequestURI, r.Body)
	}

	// A stale attempt: the handler gets ErrConflict.
	var hbErr error
	ex2 := ax.NewExecutor(ax.WithClient(c))
	ex2.HandleFunc("slow", func(ctx context.Context, d *ax.Delivery) error {
		hbErr = ax.Heartbeat(ctx)
		return nil
	})
	r := callback("slow", nil)
	r.Header.Set(ax.HeaderAttempt, "1")
	serve(ex2, r)
	if !errors.Is(hbErr, ax.ErrConflict) {
		t.Fatalf("stale attempt: %v", hbErr)
	}

	// Without a Client: a clear error, and nothing sent.
	before := len(f.Requests())
	ex3 := ax.NewExecutor()
	ex3.HandleFunc("slow", func(ctx context.Context, d *ax.Delivery) error {
		hbErr = ax.Heartbeat(ctx)
		return nil
	})
	serve(ex3, callback("slow", nil))
	if !errors.Is(hbErr, ax.ErrInvalid) || !strings.Contains(hbErr.Error(), "ax.WithClient") {
		t.Fatalf("no client: %v", hbErr)
	}
	// Outside a handler.
	if err := ax.Heartbeat(ctx); !errors.Is(err, ax.ErrInvalid) || !strings.Contains(err.Error(), "not the context of a handler") {
		t.Fatalf("outside a handler: %v", err)
	}
	if err := ax.Report(ctx, nil); !errors.Is(err, ax.ErrInvalid) {
		t.Fatalf("Report outside a handler: %v", err)
	}
	if n := len(f.Requests()) - before; n != 0 {
		t.Fatalf("%d requests sent", n)
	}
}

func Test_Executor_Async(t *testing.T) {
	f := startFakeSidecar(t)
	c := newClient(t, f)
	ctx := testContext(t)

	ex := ax.NewExecutor(ax.WithClient(c))
	done := make(chan error, 1)
	release := make(chan struct{})
	ex.HandleFunc("video.encode", func(ctx context.Context, d *ax.Delivery) error {
		bg := context.WithoutCancel(ctx)
		go func() {
			<-release // the callback has been answered by now
			if err := ax.Heartbeat(bg); err != nil {
				done <- fmt.Errorf("heartbeat: %w", err)
				return
			}
			done <- ax.Report(bg, nil)
		}()
		return ax.Async()
	})
	ex.HandleFunc("video.bad", func(ctx context.Context, d *ax.Delivery) error {
		bg := context.WithoutCancel(ctx)
		go func() { done <- ax.Report(bg, ax.Permanent(errors.New("codec not supported"))) }()
		return fmt.Errorf("later: %w", ax.Async()) // wrapped still counts
	})
	ex.HandleFunc("video.retry", func(ctx context.Context, d *ax.Delivery) error {
		bg := context.WithoutCancel(ctx)
		go func() { done <- ax.Report(bg, errors.New("disk full")) }()
		return ax.Async()
	})

	for _, tc := range []struct {
		handler, id string
		state       ax.State
		lastError   string
		body        string
	}{
		{"video.encode", "v1", ax.StateSuccess, "", `{"attempt":1,"status":"success"}`},
		{"video.bad", "v2", ax.StateFailed, "codec not supported", `{"attempt":1,"status":"permanent","error":"codec not supported"}`},
		{"video.retry", "v3", ax.StateWaiting, "disk full", `{"attempt":1,"status":"failed","error":"disk full"}`},
	} {
		if _, err := c.Submit(ctx, ax.SubmitRequest{ID: tc.id, Handler: tc.handler}); err != nil {
			t.Fatal(err)
		}
		f.SetRunning(tc.id, 1)
		r := callback(tc.handler, nil)
		r.Header.Set(ax.HeaderTaskID, tc.id)
		r.Header.Set(ax.HeaderAttempt, "1")
		rec := serve(ex, r)
		if rec.Code != http.StatusAccepted {
			t.Fatalf("%s: %d %s", tc.handler, rec.Code, rec.Body)
		}
		if tc.handler == "video.encode" {
			close(release)
		}
		if err := <-done; err != nil {
			t.Fatalf("%s: %v", tc.handler, err)
		}
		if got := string(f.LastRequest().Body); got != tc.body {
			t.Fatalf("%s: sent %s, want %s", tc.handler, got, tc.body)
		}
		task, err := c.Get(ctx, tc.id)
		if err != nil || task.State != tc.state || task.LastError != tc.lastError {
			t.Fatalf("%s: %+v, %v", tc.handler, task, err)
		}
	}
}

func Test_Executor_Shutdown_WaitsForHandlers(t *testing.T) {
	socket := filepath.Join(shortTempDir(t), "app.sock")
	ex := ax.NewExecutor()
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	ex.HandleFunc("slow", func(ctx context.Context, d *ax.Delivery) error {
		started <- struct{}{}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	served := make(chan error, 1)
	go func() { served <- ex.ListenAndServeUnix(socket) }()
	hc := unixHTTPClient(socket)
	defer hc.CloseIdleConnections()

	status := make(chan int, 1)
	go func() {
		for i := 0; ; i++ {
			req, _ := http.NewRequest(http.MethodPost, "http://app"+ax.ExecutePath, nil)
			req.Header.Set(ax.HeaderTaskID, "t1")
			req.Header.Set(ax.HeaderHandler, "slow")
			resp, err := hc.Do(req)
			if err != nil && i < 200 {
				time.Sleep(10 * time.Millisecond) // not listening yet
				continue
			}
			if err != nil {
				status <- -1
				return
			}
			resp.Body.Close()
			status <- resp.StatusCode
			return
		}
	}()
	<-started

	shut := make(chan error, 1)
	go func() { shut <- ex.Shutdown(context.Background()) }()
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v while a handler runs", err)
	case <-time.After(150 * time.Millisecond):
	}
	// New callbacks (here through ServeHTTP, as when mounted elsewhere) are
	// answered busy.
	if rec := serve(ex, callback("slow", nil)); rec.Code != 503 || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("callback during shutdown: %d %q", rec.Code, rec.Header().Get("Retry-After"))
	}
	close(release)
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if code := <-status; code != 200 {
		t.Fatalf("in-flight callback answered %d", code)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatal(err)
	}
	if err := ex.Shutdown(context.Background()); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
}

func Test_Executor_Shutdown_Mounted_Deadline(t *testing.T) {
	// Mounted on another server: Shutdown still waits for ServeHTTP calls,
	// and cancels them when its context ends.
	ex := ax.NewExecutor()
	started := make(chan struct{})
	cause := make(chan error, 1)
	ex.HandleFunc("stuck", func(ctx context.Context, d *ax.Delivery) error {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	})
	codes := make(chan int, 1)
	go func() { codes <- serve(ex, callback("stuck", nil)).Code }()
	<-started

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := ex.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v", err)
	}
	if d := time.Since(start); d < 90*time.Millisecond {
		t.Fatalf("Shutdown returned after %v", d)
	}
	if err := <-cause; err == nil || !strings.Contains(err.Error(), "shut down") {
		t.Fatalf("handler's cause: %v", err)
	}
	if code := <-codes; code != 500 {
		t.Fatalf("aborted handler answered %d", code)
	}

	// With nothing in flight, Shutdown returns at once.
	idle := ax.NewExecutor()
	if err := idle.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
}
