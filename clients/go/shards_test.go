package ax_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ax "github.com/axsched/ax/clients/go"
)

// shardAsk builds a shard-count ask as the sidecar sends it: a callback's
// headers and the payload, posted to ShardsPath.
func shardAsk(handler string, payload []byte) *http.Request {
	r := callback(handler, payload)
	r.URL.Path = ax.ShardsPath
	r.RequestURI = ax.ShardsPath
	return r
}

// errorBody decodes an {"error": {"code", "message"}} answer.
func errorBody(t *testing.T, rec *httptest.ResponseRecorder) (code, message string) {
	t.Helper()
	var b struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json (body %q)", ct, rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil {
		t.Fatalf("error body %q: %v", rec.Body, err)
	}
	return b.Error.Code, b.Error.Message
}

func Test_Executor_ShardHeaders(t *testing.T) {
	ex := ax.NewExecutor()
	var got *ax.Delivery
	ex.HandleFunc("h", func(ctx context.Context, d *ax.Delivery) error {
		got = d
		if fromCtx, _ := ax.DeliveryFromContext(ctx); fromCtx.ShardIndex != d.ShardIndex || fromCtx.ShardTotal != d.ShardTotal {
			t.Errorf("context delivery shard %d/%d", fromCtx.ShardIndex, fromCtx.ShardTotal)
		}
		return nil
	})

	r := callback("h", nil)
	r.Header.Set(ax.HeaderShardIndex, "2")
	r.Header.Set(ax.HeaderShardTotal, "5")
	if rec := serve(ex, r); rec.Code != 200 {
		t.Fatalf("status %d %q", rec.Code, rec.Body)
	}
	if got.ShardIndex != 2 || got.ShardTotal != 5 {
		t.Fatalf("shard %d/%d, want 2/5", got.ShardIndex, got.ShardTotal)
	}

	r = callback("h", nil)
	r.Header.Set(ax.HeaderShardIndex, "0")
	r.Header.Set(ax.HeaderShardTotal, "1")
	if rec := serve(ex, r); rec.Code != 200 || got.ShardIndex != 0 || got.ShardTotal != 1 {
		t.Fatalf("status %d, shard %d/%d, want 0/1", rec.Code, got.ShardIndex, got.ShardTotal)
	}

	// Unsharded: neither header, both fields 0.
	if rec := serve(ex, callback("h", nil)); rec.Code != 200 || got.ShardIndex != 0 || got.ShardTotal != 0 {
		t.Fatalf("status %d, unsharded shard %d/%d, want 0/0", rec.Code, got.ShardIndex, got.ShardTotal)
	}
}

func Test_Executor_ShardHeaders_Bad(t *testing.T) {
	ex := ax.NewExecutor()
	var calls atomic.Int32
	ex.HandleFunc("h", func(ctx context.Context, d *ax.Delivery) error { calls.Add(1); return nil })

	cases := []struct {
		name, index, total string // "" leaves the header out
		body               string
	}{
		{"index only", "1", "", "Ax-Shard-Index header without Ax-Shard-Total"},
		{"total only", "", "3", "Ax-Shard-Total header without Ax-Shard-Index"},
		{"total zero", "0", "0", `bad Ax-Shard-Total header "0": want an integer >= 1`},
		{"total not a number", "0", "three", `bad Ax-Shard-Total header "three"`},
		{"total negative", "0", "-2", `bad Ax-Shard-Total header "-2"`},
		{"index not a number", "x", "3", `bad Ax-Shard-Index header "x": want an integer from 0 to 2 (Ax-Shard-Total is 3)`},
		{"index negative", "-1", "3", `bad Ax-Shard-Index header "-1"`},
		{"index = total", "3", "3", `bad Ax-Shard-Index header "3": want an integer from 0 to 2`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := callback("h", nil)
			if tc.index != "" {
				r.Header.Set(ax.HeaderShardIndex, tc.index)
			}
			if tc.total != "" {
				r.Header.Set(ax.HeaderShardTotal, tc.total)
			}
			rec := serve(ex, r)
			if rec.Code != 400 || !strings.HasPrefix(rec.Body.String(), tc.body) {
				t.Fatalf("status %d body %q, want 400 %q", rec.Code, rec.Body, tc.body)
			}
		})
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("handler ran %d times on malformed callbacks", n)
	}
}

func Test_Executor_ShardAsk(t *testing.T) {
	ex := ax.NewExecutor()
	var handled atomic.Int32
	var seen *ax.Delivery
	var ctxDeadline time.Time
	var fromCtx bool
	ex.HandleFunc("reindex", func(ctx context.Context, d *ax.Delivery) error { handled.Add(1); return nil },
		ax.WithShardCount(func(ctx context.Context, d *ax.Delivery) (int, error) {
			seen = d
			ctxDeadline, _ = ctx.Deadline()
			_, fromCtx = ax.DeliveryFromContext(ctx)
			var p struct{ Rows int }
			if err := json.Unmarshal(d.Payload, &p); err != nil {
				return 0, err
			}
			return p.Rows / 1000, nil
		}))

	r := shardAsk("reindex", []byte(`{"rows":7042}`))
	deadline := time.Now().Add(time.Minute).Truncate(time.Millisecond).UTC()
	r.Header.Set(ax.HeaderDeadline, deadline.Format(time.RFC3339Nano))
	rec := serve(ex, r)
	if rec.Code != 200 {
		t.Fatalf("status %d %q", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	var answer map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil || len(answer) != 1 || answer["count"] != 7.0 {
		t.Fatalf("answer %q (%v), want {\"count\":7}", rec.Body, err)
	}
	if seen.TaskID != "order|42" || seen.Handler != "reindex" || seen.Attempt != 2 || seen.Run != 1 ||
		string(seen.Payload) != `{"rows":7042}` || seen.ShardTotal != 0 {
		t.Fatalf("ask delivery %+v", seen)
	}
	if !ctxDeadline.Equal(deadline) || !fromCtx {
		t.Fatalf("ask context: deadline %v (want %v), delivery in context %v", ctxDeadline, deadline, fromCtx)
	}
	if n := handled.Load(); n != 0 {
		t.Fatalf("the ask ran the handler %d times", n)
	}

	// Mounted under a prefix, the path still ends in ShardsPath.
	r = shardAsk("reindex", []byte(`{"rows":1000}`))
	r.URL.Path = "/app" + ax.ShardsPath
	if rec := serve(ex, r); rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != `{"count":1}` {
		t.Fatalf("under a prefix: %d %q", rec.Code, rec.Body)
	}
}

func Test_Executor_ShardAsk_Errors(t *testing.T) {
	ex := ax.NewExecutor()
	nop := func(ctx context.Context, d *ax.Delivery) error { return nil }
	count := func(n int, err error) ax.HandlerOption {
		return ax.WithShardCount(func(ctx context.Context, d *ax.Delivery) (int, error) { return n, err })
	}
	ex.HandleFunc("plain", nop)
	ex.HandleFunc("fails", nop, count(0, errors.New("catalog is down")))
	ex.HandleFunc("zero", nop, count(0, nil))
	ex.HandleFunc("negative", nop, count(-3, nil))
	ex.HandleResult("result", func(ctx context.Context, d *ax.Delivery) (any, error) { return nil, nil }, count(4, nil))
	ex.Handle("typed", ax.HandlerFunc(nop), count(5, nil))
	ex.HandleFunc("panics", nop, ax.WithShardCount(func(ctx context.Context, d *ax.Delivery) (int, error) {
		panic("nil map")
	}))

	cases := []struct {
		name    string
		req     *http.Request
		status  int
		code    string
		message string // prefix
	}{
		{"result", shardAsk("result", nil), 200, "", ""},
		{"typed", shardAsk("typed", nil), 200, "", ""},
		{"unknown handler", shardAsk("nobody", nil), 404, "handler_not_found", `no handler registered for "nobody"`},
		{"no counter", shardAsk("plain", nil), 501, "shard_count_unsupported", `handler "plain" cannot count shards: register it with ax.WithShardCount`},
		{"counter error", shardAsk("fails", nil), 500, "shard_count_failed", "catalog is down"},
		{"count zero", shardAsk("zero", nil), 500, "shard_count_failed", `shard count of handler "zero" is 0, want at least 1`},
		{"count negative", shardAsk("negative", nil), 500, "shard_count_failed", `shard count of handler "negative" is -3, want at least 1`},
		{"panic", shardAsk("panics", nil), 500, "shard_count_failed", `panic in shard count of handler "panics": nil map`},
		{"no task id", func() *http.Request { r := shardAsk("typed", nil); r.Header.Del(ax.HeaderTaskID); return r }(), 400, "bad_request", "missing Ax-Task-Id header"},
		{"bad run", func() *http.Request { r := shardAsk("typed", nil); r.Header.Set(ax.HeaderRun, "one"); return r }(), 400, "bad_request", `bad Ax-Run header "one"`},
		{"get", httptest.NewRequest(http.MethodGet, ax.ShardsPath, nil), 405, "method_not_allowed", "method not allowed: use POST"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := serve(ex, tc.req)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d (body %q)", rec.Code, tc.status, rec.Body)
			}
			if tc.status == 200 {
				return
			}
			code, msg := errorBody(t, rec)
			if code != tc.code || !strings.HasPrefix(msg, tc.message) {
				t.Fatalf("error %s %q, want %s %q", code, msg, tc.code, tc.message)
			}
			if tc.status == 405 && rec.Header().Get("Allow") != http.MethodPost {
				t.Fatalf("Allow %q", rec.Header().Get("Allow"))
			}
		})
	}
}

// The counter is the one of the handler a callback would reach: the exact
// name wins over FallbackHandler, counter or not.
func Test_Executor_ShardAsk_Fallback(t *testing.T) {
	ex := ax.NewExecutor()
	nop := func(ctx context.Context, d *ax.Delivery) error { return nil }
	ex.HandleFunc(ax.FallbackHandler, nop, ax.WithShardCount(func(ctx context.Context, d *ax.Delivery) (int, error) { return 3, nil }))
	ex.HandleFunc("named", nop)

	if rec := serve(ex, shardAsk("anything", nil)); rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != `{"count":3}` {
		t.Fatalf("fallback: %d %q", rec.Code, rec.Body)
	}
	if rec := serve(ex, shardAsk("named", nil)); rec.Code != 501 {
		t.Fatalf("named handler without a counter: %d %q, want 501", rec.Code, rec.Body)
	}
}

// NewExecutor's own server routes ShardsPath to the asks and ExecutePath to
// the callbacks; other paths are not found.
func Test_Executor_ShardAsk_Served(t *testing.T) {
	socket := filepath.Join(shortTempDir(t), "app.sock")
	ex := ax.NewExecutor()
	var handled atomic.Int32
	ex.HandleFunc("h", func(ctx context.Context, d *ax.Delivery) error { handled.Add(1); return nil },
		ax.WithShardCount(func(ctx context.Context, d *ax.Delivery) (int, error) { return 8, nil }))
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- ex.Serve(l) }()
	hc := unixHTTPClient(socket)
	defer hc.CloseIdleConnections()

	post := func(path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://executor"+path, strings.NewReader("{}"))
		req.Header.Set(ax.HeaderTaskID, "t")
		req.Header.Set(ax.HeaderHandler, "h")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		buf.ReadFrom(resp.Body)
		return resp.StatusCode, strings.TrimSpace(buf.String())
	}
	if status, body := post(ax.ShardsPath); status != 200 || body != `{"count":8}` {
		t.Fatalf("ask: %d %q", status, body)
	}
	if n := handled.Load(); n != 0 {
		t.Fatalf("the ask ran the handler %d times", n)
	}
	if status, _ := post(ax.ExecutePath); status != 200 || handled.Load() != 1 {
		t.Fatalf("callback: %d, handler ran %d times", status, handled.Load())
	}
	if status, _ := post("/ax/v1/other"); status != 404 {
		t.Fatalf("other path: %d, want 404", status)
	}

	if err := ex.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatal(err)
	}
	// Once Shutdown has begun, an ask (through ServeHTTP) is busy.
	rec := serve(ex, shardAsk("h", nil))
	if code, _ := errorBody(t, rec); rec.Code != 503 || rec.Header().Get("Retry-After") != "1" || code != "shutting_down" {
		t.Fatalf("after Shutdown: %d Retry-After %q code %s", rec.Code, rec.Header().Get("Retry-After"), code)
	}
}

func Test_WithShardCount_Panics(t *testing.T) {
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
	mustPanic("nil counter", func() { ax.WithShardCount(nil) })
	mustPanic("nil option", func() { ex.HandleFunc("h", nop, nil) })
	// A refused registration registers nothing.
	if rec := serve(ex, callback("h", nil)); rec.Code != 404 {
		t.Fatalf("handler registered despite the panic: %d", rec.Code)
	}
}
