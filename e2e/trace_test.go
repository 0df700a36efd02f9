package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	ax "github.com/axsched/ax/clients/go"
	"github.com/axsched/ax/clients/go/axapi"
	"github.com/axsched/ax/e2e/harness"
)

// traceExecutorPy is a plain Python standard-library HTTP executor on
// loopback TCP: it prints its port, then one JSON line per callback (task
// id, attempt, traceparent, tracestate), and fails a task's first attempt.
const traceExecutorPy = `
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        attempt = int(self.headers.get("Ax-Attempt"))
        print(json.dumps({"task_id": self.headers.get("Ax-Task-Id"), "attempt": attempt,
                          "traceparent": self.headers.get("traceparent"), "tracestate": self.headers.get("tracestate")}), flush=True)
        self.send_response(500 if attempt < 2 else 200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print("PORT %d" % srv.server_address[1], flush=True)
srv.serve_forever()
`

// traceCall is one callback's trace context as an executor saw it.
type traceCall struct {
	TaskID      string `json:"task_id"`
	Attempt     int    `json:"attempt"`
	TraceParent string `json:"traceparent"`
	TraceState  string `json:"tracestate"`
	// CtxTraceID is the trace id of the span context in the Go handler's
	// context ("" for the Python executor).
	CtxTraceID string `json:"-"`
}

// TestTraceContext: a task submitted through the Go client from a context
// carrying a trace context, whose Go executor (ax.Executor) fails twice
// and then succeeds: all three callbacks carry the submitted trace id and
// flags, three distinct parent ids and the tracestate, and the handler's
// context carries the callback's span context. A task submitted with the
// traceparent header, run by a plain Python standard-library executor that
// fails once: both its callbacks carry the trace id. Real processes: a
// three-node cluster, executors registered through the API.
func TestTraceContext(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	c := harness.NewCluster(t, harness.WithExecutorsOn())
	c.WaitReady()
	fol := c.Followers()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()

	var mu sync.Mutex
	var calls []traceCall
	add := func(tc traceCall) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, tc)
	}
	callsOf := func(id string) []traceCall {
		mu.Lock()
		defer mu.Unlock()
		var out []traceCall
		for _, tc := range calls {
			if tc.TaskID == id {
				out = append(out, tc)
			}
		}
		return out
	}

	// The Go executor, registered with the first follower.
	goSock := filepath.Join(filepath.Dir(fol[0].Socket), "trace-go.sock")
	ex := ax.NewExecutor()
	ex.HandleFunc("trace.go", func(ctx context.Context, d *ax.Delivery) error {
		add(traceCall{TaskID: d.TaskID, Attempt: d.Attempt, TraceParent: d.TraceParent, TraceState: d.TraceState,
			CtxTraceID: trace.SpanContextFromContext(ctx).TraceID().String()})
		if d.Attempt < 3 {
			return fmt.Errorf("failing attempt %d on purpose", d.Attempt)
		}
		return nil
	})
	go func() { _ = ex.ListenAndServeUnix(goSock) }()
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		ex.Shutdown(sctx)
	})
	goClient := ax.New(ax.Config{SocketPath: fol[0].Socket})
	t.Cleanup(goClient.CloseIdleConnections)
	harness.WaitFor(t, 10*time.Second, 50*time.Millisecond, "the Go executor's socket", func() error {
		conn, err := net.Dial("unix", goSock)
		if err == nil {
			conn.Close()
		}
		return err
	})
	if err := goClient.RegisterExecutor(ctx, ax.ExecutorRegistration{Name: "trace-go", Handlers: []string{"trace.go"}, URL: "unix://" + goSock}); err != nil {
		t.Fatal(err)
	}

	// The Python executor, registered with the second follower.
	py := harness.RequirePython(t)
	cmd := exec.CommandContext(ctx, py, "-c", traceExecutorPy)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(out)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "PORT ") {
		t.Fatalf("the Python executor did not print its port: %q %s", lines.Text(), stderr.String())
	}
	port := strings.TrimPrefix(lines.Text(), "PORT ")
	go func() {
		for lines.Scan() {
			var tc traceCall
			if json.Unmarshal(lines.Bytes(), &tc) == nil {
				add(tc)
			}
		}
	}()
	pyClient := ax.New(ax.Config{SocketPath: fol[1].Socket})
	t.Cleanup(pyClient.CloseIdleConnections)
	if err := pyClient.RegisterExecutor(ctx, ax.ExecutorRegistration{Name: "trace-py", Handlers: []string{"trace.py"}, URL: "http://127.0.0.1:" + port}); err != nil {
		t.Fatal(err)
	}

	// Go: the trace context comes from the submitting context.
	const tpGo = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	fast := &ax.Backoff{Initial: 200 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: ax.NoJitter}
	task, err := goClient.Submit(ax.WithTraceContext(ctx, tpGo, "rojo=00f067aa0ba902b7"),
		ax.SubmitRequest{ID: "trace|go", Handler: "trace.go", MaxAttempts: 3, Backoff: fast})
	if err != nil {
		t.Fatal(err)
	}
	if task.TraceID != tpGo[3:35] || task.TraceParent != tpGo || task.TraceState != "rojo=00f067aa0ba902b7" {
		t.Fatalf("submitted task: trace id %q traceparent %q tracestate %q", task.TraceID, task.TraceParent, task.TraceState)
	}

	// Python: the trace context comes in the traceparent header of a raw
	// submit on the leader.
	const tpPy = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	if err := submitWithHeader(ctx, c.Leader().Socket, `{"id":"trace|py","handler":"trace.py","max_attempts":2,"backoff":{"initial":"200ms","jitter":0}}`, tpPy); err != nil {
		t.Fatal(err)
	}

	for _, id := range []string{"trace|go", "trace|py"} {
		harness.WaitFor(t, 60*time.Second, 100*time.Millisecond, id+" SUCCESS", func() error {
			tk, err := goClient.Get(ctx, id)
			if err != nil {
				return err
			}
			if tk.State != ax.StateSuccess {
				return fmt.Errorf("state %s, attempts %d, last error %q", tk.State, tk.Attempts, tk.LastError)
			}
			return nil
		})
	}

	check := func(id, submitted, state string, n int, wantCtx bool) {
		got := callsOf(id)
		if len(got) != n {
			t.Fatalf("%s: %d callbacks, want %d: %+v", id, len(got), n, got)
		}
		parents := map[string]bool{}
		for _, tc := range got {
			p, err := axapi.ParseTraceParent(tc.TraceParent)
			if err != nil {
				t.Errorf("%s attempt %d: %v", id, tc.Attempt, err)
				continue
			}
			if tc.TraceParent[:36] != submitted[:36] || tc.TraceParent[52:] != submitted[52:] || tc.TraceState != state {
				t.Errorf("%s attempt %d: traceparent %q tracestate %q, want the trace id and flags of %q and %q", id, tc.Attempt, tc.TraceParent, tc.TraceState, submitted, state)
			}
			if wantCtx && tc.CtxTraceID != submitted[3:35] {
				t.Errorf("%s attempt %d: the handler's context has trace id %q", id, tc.Attempt, tc.CtxTraceID)
			}
			parents[fmt.Sprintf("%x", p.ParentID)] = true
		}
		if len(parents) != n || parents[submitted[36:52]] {
			t.Errorf("%s: parent ids %v: want %d distinct new ones", id, parents, n)
		}
		t.Logf("%s: %d callbacks, trace id %s, parent ids %v", id, n, submitted[3:35], parents)
	}
	check("trace|go", tpGo, "rojo=00f067aa0ba902b7", 3, true)
	check("trace|py", tpPy, "", 2, false)
}

// submitWithHeader sends POST /v1/tasks with body and a traceparent header.
func submitWithHeader(ctx context.Context, socket, body, traceparent string) error {
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, "POST", "http://ax/v1/tasks", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", traceparent)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var tk axapi.Task
	if err := json.NewDecoder(resp.Body).Decode(&tk); err != nil || resp.StatusCode != http.StatusCreated {
		return errors.Join(fmt.Errorf("submit: status %d", resp.StatusCode), err)
	}
	if tk.TraceParent != traceparent || tk.TraceID != traceparent[3:35] {
		return fmt.Errorf("submitted task: traceparent %q trace id %q, want %q", tk.TraceParent, tk.TraceID, traceparent)
	}
	return nil
}
