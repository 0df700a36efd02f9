package ax_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ax "github.com/axsched/ax/clients/go"
)

// callback builds a callback request as the sidecar sends it.
func callback(handler string, payload []byte) *http.Request {
	r := httptest.NewRequest(http.MethodPost, ax.ExecutePath, bytes.NewReader(payload))
	r.Header.Set(ax.HeaderTaskID, "order|42")
	r.Header.Set(ax.HeaderHandler, handler)
	r.Header.Set(ax.HeaderAttempt, "2")
	r.Header.Set(ax.HeaderRun, "1")
	r.Header.Set(ax.HeaderDeadline, time.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano))
	return r
}

func Test_Executor_StatusMapping(t *testing.T) {
	ex := ax.NewExecutor()
	ex.HandleFunc("ok", func(ctx context.Context, d *ax.Delivery) error { return nil })
	ex.HandleFunc("permanent", func(ctx context.Context, d *ax.Delivery) error {
		return ax.Permanent(errors.New("order 42 does not exist"))
	})
	ex.HandleFunc("permanent.wrapped", func(ctx context.Context, d *ax.Delivery) error {
		return fmt.Errorf("close order: %w", ax.Permanent(errors.New("bad payload")))
	})
	ex.HandleFunc("snooze", func(ctx context.Context, d *ax.Delivery) error { return ax.Snooze(1500 * time.Millisecond) })
	ex.HandleFunc("snooze.zero", func(ctx context.Context, d *ax.Delivery) error { return ax.Snooze(0) })
	ex.HandleFunc("snooze.wrapped", func(ctx context.Context, d *ax.Delivery) error {
		return fmt.Errorf("db busy: %w", ax.Snooze(10*time.Second))
	})
	ex.HandleFunc("fail", func(ctx context.Context, d *ax.Delivery) error { return errors.New("database is down") })
	ex.HandleFunc("panic", func(ctx context.Context, d *ax.Delivery) error { panic("nil map") })
	ex.Handle("typed", ax.HandlerFunc(func(ctx context.Context, d *ax.Delivery) error { return nil }))

	cases := []struct {
		name       string
		req        *http.Request
		status     int
		body       string // prefix
		retryAfter string
	}{
		{"ok", callback("ok", nil), 200, "", ""},
		{"typed", callback("typed", nil), 200, "", ""},
		{"permanent", callback("permanent", nil), 422, "order 42 does not exist", ""},
		{"permanent.wrapped", callback("permanent.wrapped", nil), 422, "close order: bad payload", ""},
		{"snooze", callback("snooze", nil), 503, "snoozed for 1.5s", "2"},
		{"snooze.zero", callback("snooze.zero", nil), 503, "snoozed for 0s", "1"},
		{"snooze.wrapped", callback("snooze.wrapped", nil), 503, "db busy: snoozed for 10s", "10"},
		{"fail", callback("fail", nil), 500, "database is down", ""},
		{"panic", callback("panic", nil), 500, `panic in handler "panic": nil map`, ""},
		{"unknown", callback("nobody", nil), 404, `no handler registered for "nobody"`, ""},
		{"get", httptest.NewRequest(http.MethodGet, ax.ExecutePath, nil), 405, "method not allowed", ""},
		{"no task id", func() *http.Request { r := callback("ok", nil); r.Header.Del(ax.HeaderTaskID); return r }(), 400, "missing Ax-Task-Id", ""},
		{"bad attempt", func() *http.Request { r := callback("ok", nil); r.Header.Set(ax.HeaderAttempt, "two"); return r }(), 400, `bad Ax-Attempt header "two"`, ""},
		{"bad deadline", func() *http.Request { r := callback("ok", nil); r.Header.Set(ax.HeaderDeadline, "tomorrow"); return r }(), 400, `bad Ax-Deadline header`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			ex.ServeHTTP(rec, tc.req)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d (body %q)", rec.Code, tc.status, rec.Body)
			}
			if !strings.HasPrefix(rec.Body.String(), tc.body) {
				t.Fatalf("body %q, want prefix %q", rec.Body, tc.body)
			}
			if got := rec.Header().Get("Retry-After"); got != tc.retryAfter {
				t.Fatalf("Retry-After %q, want %q", got, tc.retryAfter)
			}
		})
	}

	// The fallback handler takes the names nobody registered.
	ex.HandleFunc(ax.FallbackHandler, func(ctx context.Context, d *ax.Delivery) error {
		return ax.Permanent(fmt.Errorf("fallback got %s", d.Handler))
	})
	rec := httptest.NewRecorder()
	ex.ServeHTTP(rec, callback("nobody", nil))
	if rec.Code != 422 || rec.Body.String() != "fallback got nobody\n" {
		t.Fatalf("fallback: %d %q", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	ex.ServeHTTP(rec, callback("ok", nil))
	if rec.Code != 200 {
		t.Fatalf("named handler must win over fallback: %d", rec.Code)
	}
}

func Test_Executor_Delivery(t *testing.T) {
	payload := make([]byte, 0, 3*256)
	for i := range 3 * 256 {
		payload = append(payload, byte(i))
	}
	deadline := time.Now().Add(42 * time.Second).Truncate(time.Millisecond).UTC()

	ex := ax.NewExecutor()
	var got *ax.Delivery
	var ctxDeadline time.Time
	var hasDeadline bool
	ex.HandleFunc("order.timeout", func(ctx context.Context, d *ax.Delivery) error {
		got = d
		ctxDeadline, hasDeadline = ctx.Deadline()
		return nil
	})
	r := httptest.NewRequest(http.MethodPost, ax.ExecutePath, bytes.NewReader(payload))
	r.Header.Set(ax.HeaderTaskID, "über|42/@x")
	r.Header.Set(ax.HeaderHandler, "order.timeout")
	r.Header.Set(ax.HeaderAttempt, "3")
	r.Header.Set(ax.HeaderRun, "7")
	r.Header.Set(ax.HeaderDeadline, deadline.Format(time.RFC3339Nano))
	rec := httptest.NewRecorder()
	ex.ServeHTTP(rec, r)
	if rec.Code != 200 {
		t.Fatalf("status %d %q", rec.Code, rec.Body)
	}
	if got.TaskID != "über|42/@x" || got.Handler != "order.timeout" || got.Attempt != 3 || got.Run != 7 || !got.Deadline.Equal(deadline) {
		t.Fatalf("delivery %+v", got)
	}
	if !bytes.Equal(got.Payload, payload) {
		t.Fatal("payload changed")
	}
	if !hasDeadline || !ctxDeadline.Equal(deadline) {
		t.Fatalf("context deadline %v (%v), want %v", ctxDeadline, hasDeadline, deadline)
	}

	// Without Ax-Deadline, no deadline is added.
	r = callback("order.timeout", nil)
	r.Header.Del(ax.HeaderDeadline)
	ex.ServeHTTP(httptest.NewRecorder(), r)
	if hasDeadline || !got.Deadline.IsZero() {
		t.Fatalf("deadline without header: %v", ctxDeadline)
	}
}

func Test_Executor_DeadlineCancelsHandler(t *testing.T) {
	ex := ax.NewExecutor()
	ex.HandleFunc("slow", func(ctx context.Context, d *ax.Delivery) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Second):
			return nil
		}
	})
	r := callback("slow", nil)
	r.Header.Set(ax.HeaderDeadline, time.Now().Add(50*time.Millisecond).Format(time.RFC3339Nano))
	rec := httptest.NewRecorder()
	start := time.Now()
	ex.ServeHTTP(rec, r)
	if rec.Code != 500 || rec.Body.String() != "context deadline exceeded\n" || time.Since(start) > 5*time.Second {
		t.Fatalf("%d %q after %v", rec.Code, rec.Body, time.Since(start))
	}
}

// unixHTTPClient returns an HTTP client whose connections go to socket.
func unixHTTPClient(socket string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}
}

func Test_Executor_ListenAndServeUnix(t *testing.T) {
	dir := shortTempDir(t)
	socket := filepath.Join(dir, "app.sock")

	// A stale socket from a crashed process is replaced.
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()

	ex := ax.NewExecutor()
	started := make(chan struct{})
	ex.HandleFunc("echo", func(ctx context.Context, d *ax.Delivery) error {
		close(started)
		<-ctx.Done() // aborted by the caller below
		return ctx.Err()
	})
	ex.HandleFunc("bytes", func(ctx context.Context, d *ax.Delivery) error {
		if len(d.Payload) != 1<<20 {
			return fmt.Errorf("got %d bytes", len(d.Payload))
		}
		for i, b := range d.Payload {
			if b != byte(i*7) {
				return fmt.Errorf("byte %d changed", i)
			}
		}
		return nil
	})
	served := make(chan error, 1)
	go func() { served <- ex.ListenAndServeUnix(socket) }()

	hc := unixHTTPClient(socket)
	defer hc.CloseIdleConnections()
	post := func(ctx context.Context, handler string, body []byte) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://app"+ax.ExecutePath, bytes.NewReader(body))
		req.Header.Set(ax.HeaderTaskID, "t1")
		req.Header.Set(ax.HeaderHandler, handler)
		return hc.Do(req)
	}
	var resp *http.Response
	for i := 0; ; i++ { // wait for the listener
		resp, err = post(t.Context(), "bytes", nil)
		if err == nil || i == 100 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	resp, err = post(t.Context(), "bytes", big)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("1 MiB payload: %d %s", resp.StatusCode, body)
	}

	// Other paths are not callbacks.
	resp, err = hc.Post("http://app/other", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("other path: %d", resp.StatusCode)
	}

	// The sidecar aborting the request (task cancelled) cancels the handler.
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		resp, err := post(ctx, "echo", nil)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-started
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("aborted request: %v", err)
	}

	// A second executor on the same socket is refused.
	if err := ax.NewExecutor().ListenAndServeUnix(socket); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("socket in use: %v", err)
	}

	shutdownCtx, cancelShutdown := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancelShutdown()
	if err := ex.Shutdown(shutdownCtx); err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("ListenAndServeUnix returned %v", err)
	}
	if _, err := os.Lstat(socket); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}

	// A regular file is never removed.
	if err := os.WriteFile(socket, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ax.NewExecutor().ListenAndServeUnix(socket); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("regular file: %v", err)
	}
	if b, _ := os.ReadFile(socket); string(b) != "data" {
		t.Fatal("regular file changed")
	}
}

func Test_Executor_Serve_TCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ex := ax.NewExecutor()
	ex.HandleFunc("h", func(ctx context.Context, d *ax.Delivery) error { return ax.Snooze(3 * time.Second) })
	served := make(chan error, 1)
	go func() { served <- ex.Serve(l) }()

	req, _ := http.NewRequest(http.MethodPost, "http://"+l.Addr().String()+ax.ExecutePath, strings.NewReader("{}"))
	req.Header.Set(ax.HeaderTaskID, "t")
	req.Header.Set(ax.HeaderHandler, "h")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "3" {
		t.Fatalf("%d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	http.DefaultClient.CloseIdleConnections()
	if err := ex.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatal(err)
	}
}

func Test_Executor_MountedOnMux(t *testing.T) {
	ex := ax.NewExecutor()
	ex.HandleFunc("h", func(ctx context.Context, d *ax.Delivery) error { return nil })
	mux := http.NewServeMux()
	mux.Handle(ax.ExecutePath, ex)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	req, _ := http.NewRequest(http.MethodPost, srv.URL+ax.ExecutePath, nil)
	req.Header.Set(ax.HeaderTaskID, "t")
	req.Header.Set(ax.HeaderHandler, "h")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
}

func Test_Executor_RegistrationPanics(t *testing.T) {
	mustPanic := func(name string, fn func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s: no panic", name)
			}
		}()
		fn()
	}
	ex := ax.NewExecutor()
	nop := func(ctx context.Context, d *ax.Delivery) error { return nil }
	ex.HandleFunc("h", nop)
	mustPanic("duplicate", func() { ex.HandleFunc("h", nop) })
	mustPanic("empty name", func() { ex.HandleFunc("", nop) })
	mustPanic("nil func", func() { ex.HandleFunc("x", nil) })
	mustPanic("nil handler", func() { ex.Handle("y", nil) })
}

func Test_Permanent_Nil(t *testing.T) {
	if ax.Permanent(nil) != nil {
		t.Fatal("Permanent(nil) != nil")
	}
	base := errors.New("base")
	if err := ax.Permanent(base); !errors.Is(err, base) || err.Error() != "base" {
		t.Fatalf("%v", err)
	}
	if got := strconv.Quote(ax.Snooze(2 * time.Second).Error()); got != `"snoozed for 2s"` {
		t.Fatal(got)
	}
}
