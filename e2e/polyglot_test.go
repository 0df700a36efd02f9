package e2e

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/axsched/ax/e2e/harness"

	ax "github.com/axsched/ax/clients/go"
)

// TestPolyglot runs both clients against one three-node cluster with no
// --executor flags, in both directions at once:
//
//   - a Python app (testdata/polyglot.py app) schedules tasks through
//     follower A's socket; a Go executor (ax.NewExecutor in this process,
//     on a Unix socket, registered with follower B by POST /v1/executors)
//     runs them;
//   - a Go app (the Go client on follower B) schedules tasks; a Python
//     axsched.Worker (testdata/polyglot.py worker, registered with follower
//     A) runs them.
//
// In each direction: a task succeeds with its payload byte for byte; a
// waiting task is cancelled and never called back; a task whose handler
// fails (500) becomes DEAD after max_attempts 2, is re-run with retry once
// the handler is healed, and succeeds; and at every step the other
// language's client reads the same task with the same fields. Then both
// clients meet a wrong socket path, a 429 and a dead sidecar, and the
// Python worker stops on SIGTERM, unregistering itself first.
func TestPolyglot(t *testing.T) {
	harness.SkipShort(t)
	// Not parallel: its two scenarios are parallel subtests sharing one
	// 2-minute context, and beside other parallel tests they waited for a
	// free slot past it (seen in a -parallel 3 run).
	py := harness.RequirePython(t)
	script := harness.RepoDir(t, "e2e", "testdata", "polyglot.py")

	c := harness.NewCluster(t, harness.WithExecutorsOn())
	c.WaitReady()
	fol := c.Followers()
	nodeA, nodeB := fol[0], fol[1]
	sockDir := filepath.Dir(nodeA.Socket)
	t.Logf("leader %s; Python app and Python worker on %s, Go app and Go executor on %s", c.Leader().ID, nodeA.ID, nodeB.ID)

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	// The Go executor, registered with node B.
	goCalls := newCallLog()
	var goHealed atomic.Bool
	goSock := filepath.Join(sockDir, "go-exec.sock")
	ex := ax.NewExecutor()
	record := func(d *ax.Delivery) {
		goCalls.add(execCall{TaskID: d.TaskID, Handler: d.Handler, Attempt: d.Attempt, Run: d.Run,
			HasDeadline: !d.Deadline.IsZero(), Payload: append([]byte(nil), d.Payload...)})
	}
	ex.HandleFunc("poly.go.ok", func(ctx context.Context, d *ax.Delivery) error {
		record(d)
		return nil
	})
	ex.HandleFunc("poly.go.flaky", func(ctx context.Context, d *ax.Delivery) error {
		record(d)
		if !goHealed.Load() {
			return fmt.Errorf("flaky: not healed yet (attempt %d)", d.Attempt)
		}
		return nil
	})
	serveErr := make(chan error, 1)
	go func() { serveErr <- ex.ListenAndServeUnix(goSock) }()
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		ex.Shutdown(sctx)
	})
	goClient := ax.New(ax.Config{SocketPath: nodeB.Socket})
	t.Cleanup(goClient.CloseIdleConnections)
	reg := ax.ExecutorRegistration{Name: "go-exec", Handlers: []string{"poly.go.*"}, URL: "unix://" + goSock}
	if err := goClient.RegisterExecutor(ctx, reg); err != nil {
		t.Fatalf("register the Go executor with %s: %v", nodeB.ID, err)
	}

	// The Python worker, registering itself with node A, and the Python app
	// on node A.
	healFile := filepath.Join(t.TempDir(), "py-healed")
	pyCalls := newCallLog()
	worker := startPyWorker(t, py, script, pyCalls, "worker", "--socket", nodeA.Socket,
		"--listen", filepath.Join(sockDir, "py-worker.sock"), "--name", "py-worker", "--heal-file", healFile)
	select {
	case <-worker.ready:
	case <-worker.exited:
		t.Fatalf("the Python worker exited before it registered; its log:\n%s", worker.logs())
	case <-time.After(30 * time.Second):
		t.Fatalf("the Python worker did not register within 30s; its log:\n%s", worker.logs())
	}
	pyApp := startPyApp(t, py, script, nodeA.Socket)
	goApp := &goAppClient{c: goClient}

	t.Run("scenarios", func(t *testing.T) {
		t.Run("python-app/go-executor", func(t *testing.T) {
			t.Parallel()
			polyglotScenario(t, ctx, pyApp, goApp, "poly.go", goCalls, func() { goHealed.Store(true) })
		})
		t.Run("go-app/python-worker", func(t *testing.T) {
			t.Parallel()
			polyglotScenario(t, ctx, goApp, pyApp, "poly.py", pyCalls, func() {
				if err := os.WriteFile(healFile, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			})
		})
	})
	for _, call := range goCalls.all() {
		if !strings.HasPrefix(call.Handler, "poly.go.") {
			t.Errorf("the Go executor was called for %q (task %q)", call.Handler, call.TaskID)
		}
	}
	for _, call := range pyCalls.all() {
		if !strings.HasPrefix(call.Handler, "poly.py.") {
			t.Errorf("the Python worker was called for %q (task %q)", call.Handler, call.TaskID)
		}
	}

	t.Run("python-worker-stops-on-sigterm", func(t *testing.T) {
		if err := worker.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-worker.exited:
		case <-time.After(15 * time.Second):
			t.Fatalf("the Python worker did not exit within 15s of SIGTERM; its log:\n%s", worker.logs())
		}
		if err := worker.waitErr; err != nil {
			t.Fatalf("the Python worker exited with %v; its log:\n%s", err, worker.logs())
		}
		if !harness.IsClosed(worker.stopped) {
			t.Errorf("the Python worker did not report a clean stop; its log:\n%s", worker.logs())
		}
		if names := executorNames(t, nodeA); names["py-worker"] {
			t.Errorf("py-worker is still registered on %s after it stopped: %v", nodeA.ID, names)
		}
		if err := goClient.UnregisterExecutor(ctx, "go-exec"); err != nil {
			t.Fatalf("unregister the Go executor: %v", err)
		}
		if names := executorNames(t, nodeB); names["go-exec"] {
			t.Errorf("go-exec is still registered on %s: %v", nodeB.ID, names)
		}
	})

	t.Run("errors", func(t *testing.T) {
		polyglotErrors(t, ctx, pyApp, sockDir, nodeB)
	})
	if err := ex.Shutdown(ctx); err != nil {
		t.Errorf("Go executor shutdown: %v", err)
	}
	if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Go executor: ListenAndServeUnix returned %v, want http.ErrServerClosed", err)
	}
	if _, err := os.Stat(goSock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the Go executor's socket file is still there after Shutdown: %v", err)
	}
}

// polyglotScenario runs the common script in one direction: app schedules
// tasks of handlers prefix+".ok" and prefix+".flaky" that the executor
// recording into calls runs; observer is the other language's client; heal
// makes the flaky handler succeed.
func polyglotScenario(t *testing.T, ctx context.Context, app, observer appClient, prefix string, calls *callLog, heal func()) {
	tag := app.Lang() + "-app"

	// Success, with an id that needs escaping and a payload that must
	// arrive byte for byte.
	okID := tag + "|order 42 ü/@ok"
	payload := json.RawMessage(`{"order_id":42,"note":"ü <&>"}`)
	sub, err := app.Submit(ctx, submitArgs{ID: okID, Handler: prefix + ".ok", Payload: payload})
	if err != nil {
		t.Fatalf("%s: submit: %v", app.Lang(), err)
	}
	if sub.ID != okID || sub.State != "WAITING" || sub.Handler != prefix+".ok" || sub.Priority != 2 ||
		sub.MaxAttempts != 4 || sub.Attempts != 0 || sub.TimeoutUs != 30e6 || sub.CreatedAtUs == 0 || sub.NextRunAtUs == 0 {
		t.Errorf("%s: submitted task %+v", app.Lang(), sub)
	}
	if !reflect.DeepEqual(sub.Payload, decodeJSON(t, payload)) {
		t.Errorf("%s: submitted payload %#v, want %s", app.Lang(), sub.Payload, payload)
	}
	done := pollState(t, ctx, app, okID, "SUCCESS")
	if done.Attempts != 1 || done.FinishedAtUs == 0 || done.LastError != "" {
		t.Errorf("%s: succeeded task %+v", app.Lang(), done)
	}
	got := calls.wait(t, ctx, okID, 1)
	if c := got[0]; c.Handler != prefix+".ok" || c.Attempt != 1 || c.Run != 1 || !c.HasDeadline || string(c.Payload) != string(payload) {
		t.Errorf("callback %+v, payload %q; want attempt 1, run 1, a deadline and payload %s", c, c.Payload, payload)
	}
	sameView(t, ctx, app, observer, okID)

	// Cancel a waiting task: CANCELLED for both clients, never called
	// back (checked at the end, after its due time).
	cancelID := tag + "|cancel"
	cancelDelay := 2 * time.Second
	cancelDue := time.Now().Add(cancelDelay)
	if sub, err = app.Submit(ctx, submitArgs{ID: cancelID, Handler: prefix + ".ok", Delay: cancelDelay}); err != nil {
		t.Fatalf("%s: submit: %v", app.Lang(), err)
	}
	if sub.State != "WAITING" || sub.DelayUs != cancelDelay.Microseconds() {
		t.Errorf("%s: submitted task %+v", app.Lang(), sub)
	}
	cancelled, err := app.Cancel(ctx, cancelID)
	if err != nil {
		t.Fatalf("%s: cancel: %v", app.Lang(), err)
	}
	if cancelled.State != "CANCELLED" || cancelled.FinishedAtUs == 0 {
		t.Errorf("%s: cancelled task %+v", app.Lang(), cancelled)
	}
	sameView(t, ctx, app, observer, cancelID)

	// A handler that fails (500) until healed: DEAD after 2 attempts;
	// retry once healed, then SUCCESS.
	flakyID := tag + "|flaky"
	flakyPayload := json.RawMessage(`{"order_id":7}`)
	if _, err = app.Submit(ctx, submitArgs{ID: flakyID, Handler: prefix + ".flaky", Payload: flakyPayload, MaxAttempts: 2}); err != nil {
		t.Fatalf("%s: submit: %v", app.Lang(), err)
	}
	dead := pollState(t, ctx, app, flakyID, "DEAD")
	if dead.Attempts != 2 || dead.MaxAttempts != 2 || !strings.Contains(dead.LastError, "not healed yet") || dead.FinishedAtUs == 0 {
		t.Errorf("%s: dead task %+v", app.Lang(), dead)
	}
	if got := calls.wait(t, ctx, flakyID, 2); len(got) != 2 || got[0].Attempt != 1 || got[1].Attempt != 2 {
		t.Errorf("callbacks of the flaky task: %+v", got)
	}
	sameView(t, ctx, app, observer, flakyID)

	_, err = app.Retry(ctx, okID)
	if errKind(err) != "conflict" {
		t.Errorf("%s: retry of a SUCCESS task: %v, want a conflict", app.Lang(), err)
	}
	_, err = observer.Get(ctx, tag+"|no such task")
	if errKind(err) != "not_found" {
		t.Errorf("%s: get of an unknown task: %v, want not found", observer.Lang(), err)
	}

	heal()
	again, err := app.Retry(ctx, flakyID)
	if err != nil {
		t.Fatalf("%s: retry: %v", app.Lang(), err)
	}
	if again.State != "WAITING" || again.Attempts != 0 || again.FinishedAtUs != 0 || again.MaxAttempts != 2 {
		t.Errorf("%s: retried task %+v", app.Lang(), again)
	}
	done = pollState(t, ctx, app, flakyID, "SUCCESS")
	if done.Attempts != 1 {
		t.Errorf("%s: retried task succeeded with %+v", app.Lang(), done)
	}
	got = calls.wait(t, ctx, flakyID, 3)
	// Attempts count from 1 again after a retry. (The run number does
	// not change: the sidecar sends Ax-Run: 1 for every run, so the
	// documented de-duplication key (task id, run, attempt) of this
	// callback equals the first one's.)
	if c := got[2]; c.Attempt != 1 || string(c.Payload) != string(flakyPayload) {
		t.Errorf("callback after the retry %+v", c)
	}
	sameView(t, ctx, app, observer, flakyID)

	// The cancelled task: past its due time, still not called back.
	time.Sleep(time.Until(cancelDue.Add(time.Second)))
	if n := len(calls.get(cancelID)); n != 0 {
		t.Errorf("the cancelled task was called back %d times", n)
	}
	if v, err := observer.Get(ctx, cancelID); err != nil || v.State != "CANCELLED" {
		t.Errorf("%s: cancelled task after its due time: %+v, %v", observer.Lang(), v, err)
	}
}

// polyglotErrors checks that both clients explain, in one line, a socket
// path where nothing is, a 429 with Retry-After and a killed sidecar.
func polyglotErrors(t *testing.T, ctx context.Context, pyApp *pyAppClient, sockDir string, victim *harness.Node) {
	oneLine := func(what, msg string) {
		t.Helper()
		if strings.ContainsAny(msg, "\n\r") || !strings.HasPrefix(msg, "ax: ") {
			t.Errorf("%s: %q is not one line starting with \"ax: \"", what, msg)
		}
	}
	check := func(what, socket, wantKind, wantGo, wantPy string) (goErr, pyErr error) {
		t.Helper()
		goErr = func() error {
			c := ax.New(ax.Config{SocketPath: socket})
			defer c.CloseIdleConnections()
			_, err := c.Submit(ctx, ax.SubmitRequest{ID: "poly-err", Handler: "poly.go.ok"})
			return err
		}()
		_, pyErr = pyApp.SubmitAt(ctx, socket, submitArgs{ID: "poly-err", Handler: "poly.go.ok"})
		for _, e := range []struct {
			lang string
			err  error
			want string
		}{{"go", goErr, wantGo}, {"python", pyErr, wantPy}} {
			if e.err == nil {
				t.Errorf("%s, %s client: no error", what, e.lang)
				continue
			}
			if errKind(e.err) != wantKind || e.err.Error() != e.want {
				t.Errorf("%s, %s client: %s error %q\nwant %s error %q", what, e.lang, errKind(e.err), e.err, wantKind, e.want)
			}
			oneLine(what+", "+e.lang, e.err.Error())
			t.Logf("%s, %s client: %v", what, e.lang, e.err)
		}
		return goErr, pyErr
	}

	missing := filepath.Join(sockDir, "no-such.sock")
	check("wrong socket path", missing, "unavailable",
		"ax: cannot reach sidecar at "+missing+": connect: no such file or directory",
		"ax: cannot reach sidecar at "+missing+": [Errno 2] No such file or directory")

	// The sidecar never sheds load with 429 yet (no queue bound is
	// enforced), so a stand-in answers exactly what ipc.ErrQueueFull sends.
	full := filepath.Join(sockDir, "full.sock")
	ln, err := net.Listen("unix", full)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"error":{"code":"queue_full","message":"backlog of \"poly.go.ok\" is full"}}`+"\n")
	})}
	go srv.Serve(ln)
	defer srv.Close()
	goErr, pyErr := check("429", full, "queue_full",
		`ax: backlog of "poly.go.ok" is full (queue_full, http 429, retry after 3s)`,
		`ax: backlog of "poly.go.ok" is full (queue_full, http 429, retry after 3s)`)
	var apiErr *ax.APIError
	if !errors.As(goErr, &apiErr) || apiErr.RetryAfter != 3*time.Second {
		t.Errorf("429, go client: RetryAfter of %#v, want 3s", goErr)
	}
	var pe *pyError
	if !errors.As(pyErr, &pe) || pe.RetryAfter == nil || *pe.RetryAfter != 3 {
		t.Errorf("429, python client: retry_after of %#v, want 3.0", pyErr)
	}

	// A sidecar killed with SIGKILL leaves its socket file behind.
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	check("sidecar down", victim.Socket, "unavailable",
		"ax: cannot reach sidecar at "+victim.Socket+": connect: connection refused",
		"ax: cannot reach sidecar at "+victim.Socket+": [Errno 111] Connection refused")
}

// ---------------------------------------------------------------------------
// Both clients behind one interface, with tasks as one normalized view

// taskView is a task as both clients read it, normalized so that the two
// can be compared: times and durations in microseconds (0 for none), the
// payload as decoded JSON, or {"$base64": ...} for a binary one.
type taskView struct {
	ID           string `json:"id"`
	Handler      string `json:"handler"`
	State        string `json:"state"`
	Priority     int    `json:"priority"`
	Attempts     int    `json:"attempts"`
	MaxAttempts  int    `json:"max_attempts"`
	TimeoutUs    int64  `json:"timeout_us"`
	DelayUs      int64  `json:"delay_us"`
	RunAtUs      int64  `json:"run_at_us"`
	NextRunAtUs  int64  `json:"next_run_at_us"`
	CreatedAtUs  int64  `json:"created_at_us"`
	UpdatedAtUs  int64  `json:"updated_at_us"`
	FinishedAtUs int64  `json:"finished_at_us"`
	LastError    string `json:"last_error"`
	Node         string `json:"node"`
	Payload      any    `json:"payload"`
}

// submitArgs is what the scenarios submit.
type submitArgs struct {
	ID          string
	Handler     string
	Payload     json.RawMessage // compact JSON; nil for none
	Delay       time.Duration
	MaxAttempts int
}

// appClient is an application's client of its sidecar, in either language.
type appClient interface {
	Lang() string
	Submit(ctx context.Context, a submitArgs) (taskView, error)
	Get(ctx context.Context, id string) (taskView, error)
	Cancel(ctx context.Context, id string) (taskView, error)
	Retry(ctx context.Context, id string) (taskView, error)
}

// errKind names the kind of a client error the same way for both
// languages: "not_found", "conflict", "queue_full", "unavailable", ...
func errKind(err error) string {
	if err == nil {
		return ""
	}
	var pe *pyError
	if errors.As(err, &pe) {
		return pe.Kind()
	}
	for _, k := range []struct {
		err  error
		kind string
	}{
		{ax.ErrNotFound, "not_found"}, {ax.ErrConflict, "conflict"}, {ax.ErrQueueFull, "queue_full"},
		{ax.ErrUnavailable, "unavailable"}, {ax.ErrNoLeader, "no_leader"}, {ax.ErrNotReady, "not_ready"},
		{ax.ErrInvalid, "invalid"}, {ax.ErrTooLarge, "too_large"},
	} {
		if errors.Is(err, k.err) {
			return k.kind
		}
	}
	return "other"
}

// goAppClient is the Go client.
type goAppClient struct{ c *ax.Client }

func (g *goAppClient) Lang() string { return "go" }

func (g *goAppClient) Submit(ctx context.Context, a submitArgs) (taskView, error) {
	req := ax.SubmitRequest{ID: a.ID, Handler: a.Handler, Delay: a.Delay, MaxAttempts: a.MaxAttempts}
	if a.Payload != nil {
		req.Payload = a.Payload
	}
	return goView(g.c.Submit(ctx, req))
}

func (g *goAppClient) Get(ctx context.Context, id string) (taskView, error) {
	return goView(g.c.Get(ctx, id))
}

func (g *goAppClient) Cancel(ctx context.Context, id string) (taskView, error) {
	return goView(g.c.Cancel(ctx, id))
}

func (g *goAppClient) Retry(ctx context.Context, id string) (taskView, error) {
	return goView(g.c.Retry(ctx, id))
}

func goView(t *ax.Task, err error) (taskView, error) {
	if err != nil {
		return taskView{}, err
	}
	us := func(tm time.Time) int64 {
		if tm.IsZero() {
			return 0
		}
		return tm.UnixMicro()
	}
	v := taskView{
		ID: t.ID, Handler: t.Handler, State: string(t.State), Priority: t.Priority,
		Attempts: t.Attempts, MaxAttempts: t.MaxAttempts,
		TimeoutUs: t.Timeout.Microseconds(), DelayUs: t.Delay.Microseconds(),
		RunAtUs: us(t.RunAt), NextRunAtUs: us(t.NextRunAt), CreatedAtUs: us(t.CreatedAt),
		UpdatedAtUs: us(t.UpdatedAt), FinishedAtUs: us(t.FinishedAt),
		LastError: t.LastError, Node: t.Node,
	}
	switch {
	case t.PayloadBytes != nil:
		v.Payload = map[string]any{"$base64": base64.StdEncoding.EncodeToString(t.PayloadBytes)}
	case t.Payload != nil:
		if err := json.Unmarshal(t.Payload, &v.Payload); err != nil {
			return v, fmt.Errorf("go client: task %q: payload %q: %w", t.ID, t.Payload, err)
		}
	}
	return v, nil
}

// pyAppClient drives testdata/polyglot.py app: one JSON request per line on
// its stdin, one JSON answer per line on its stdout.
type pyAppClient struct {
	mu      sync.Mutex // one request at a time
	stdin   io.WriteCloser
	lines   chan string
	logPath string
}

// pyError is an exception raised by the Python client.
type pyError struct {
	Type       string   `json:"type"` // the exception class: NotFound, Conflict, QueueFull, Unavailable, ...
	Str        string   `json:"str"`  // str(e)
	Status     *int     `json:"status"`
	Code       *string  `json:"code"`
	RetryAfter *float64 `json:"retry_after"`
}

func (e *pyError) Error() string { return e.Str }

// Kind maps the exception class to errKind's names.
func (e *pyError) Kind() string {
	switch e.Type {
	case "NotFound":
		return "not_found"
	case "Conflict":
		return "conflict"
	case "QueueFull":
		return "queue_full"
	case "Unavailable":
		return "unavailable"
	case "NoLeader":
		return "no_leader"
	case "NotReady":
		return "not_ready"
	case "BadRequest", "InvalidJSON":
		return "invalid"
	case "PayloadTooLarge":
		return "too_large"
	}
	return "other"
}

func startPyApp(t *testing.T, py, script, socket string) *pyAppClient {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "py-app.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, script, "app", "--socket", socket)
	cmd.Env = harness.PythonEnv(t)
	cmd.Stderr = logf
	cmd.SysProcAttr = harness.ProcAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the Python app: %v", err)
	}
	p := &pyAppClient{stdin: stdin, lines: make(chan string, 1), logPath: logPath}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		stdin.Close() // the app ends at EOF
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("----- stderr of the Python app -----\n%s", b)
		}
	})
	return p
}

func (p *pyAppClient) Lang() string { return "python" }

// call sends one request and decodes the answer's task.
func (p *pyAppClient) call(ctx context.Context, req map[string]any) (taskView, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := json.Marshal(req)
	if err != nil {
		return taskView{}, err
	}
	if _, err := p.stdin.Write(append(b, '\n')); err != nil {
		return taskView{}, fmt.Errorf("python app: write request: %w", err)
	}
	var line string
	select {
	case l, ok := <-p.lines:
		if !ok {
			log, _ := os.ReadFile(p.logPath)
			return taskView{}, fmt.Errorf("python app exited; its stderr:\n%s", log)
		}
		line = l
	case <-time.After(30 * time.Second):
		return taskView{}, fmt.Errorf("python app: no answer to %s within 30s", b)
	case <-ctx.Done():
		return taskView{}, ctx.Err()
	}
	var ans struct {
		OK    bool     `json:"ok"`
		Task  taskView `json:"task"`
		Error *pyError `json:"error"`
	}
	if err := json.Unmarshal([]byte(line), &ans); err != nil {
		return taskView{}, fmt.Errorf("python app: answer %q: %w", line, err)
	}
	if !ans.OK {
		if ans.Error == nil {
			return taskView{}, fmt.Errorf("python app: answer %q", line)
		}
		return taskView{}, ans.Error
	}
	return ans.Task, nil
}

func (p *pyAppClient) submitReq(a submitArgs) map[string]any {
	args := map[string]any{"handler": a.Handler}
	if a.ID != "" {
		args["id"] = a.ID
	}
	if a.Payload != nil {
		args["payload"] = a.Payload
	}
	if a.Delay != 0 {
		args["delay"] = a.Delay.Seconds()
	}
	if a.MaxAttempts != 0 {
		args["max_attempts"] = a.MaxAttempts
	}
	return map[string]any{"op": "submit", "args": args}
}

func (p *pyAppClient) Submit(ctx context.Context, a submitArgs) (taskView, error) {
	return p.call(ctx, p.submitReq(a))
}

// SubmitAt submits through another socket than the app's.
func (p *pyAppClient) SubmitAt(ctx context.Context, socket string, a submitArgs) (taskView, error) {
	req := p.submitReq(a)
	req["socket"] = socket
	return p.call(ctx, req)
}

func (p *pyAppClient) Get(ctx context.Context, id string) (taskView, error) {
	return p.call(ctx, map[string]any{"op": "get", "id": id})
}

func (p *pyAppClient) Cancel(ctx context.Context, id string) (taskView, error) {
	return p.call(ctx, map[string]any{"op": "cancel", "id": id})
}

func (p *pyAppClient) Retry(ctx context.Context, id string) (taskView, error) {
	return p.call(ctx, map[string]any{"op": "retry", "id": id})
}

// ---------------------------------------------------------------------------
// Executors' callbacks

// execCall is one callback as an executor (Go or Python) received it.
type execCall struct {
	TaskID      string `json:"task_id"`
	Handler     string `json:"handler"`
	Attempt     int    `json:"attempt"`
	Run         int    `json:"run"`
	HasDeadline bool   `json:"has_deadline"`
	Payload     []byte `json:"payload"` // base64 in the Python worker's JSON
}

// callLog keeps the callbacks of one executor.
type callLog struct {
	mu      sync.Mutex
	calls   []execCall
	changed chan struct{}
}

func newCallLog() *callLog { return &callLog{changed: make(chan struct{})} }

func (l *callLog) add(c execCall) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, c)
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *callLog) all() []execCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]execCall(nil), l.calls...)
}

func (l *callLog) get(id string) []execCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []execCall
	for _, c := range l.calls {
		if c.TaskID == id {
			out = append(out, c)
		}
	}
	return out
}

// wait returns the callbacks of id once there are at least n.
func (l *callLog) wait(t *testing.T, ctx context.Context, id string, n int) []execCall {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		l.mu.Lock()
		ch := l.changed
		l.mu.Unlock()
		if got := l.get(id); len(got) >= n {
			return got
		}
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("task %q: %d callbacks after 20s, want %d", id, len(l.get(id)), n)
		case <-ctx.Done():
			t.Fatalf("task %q: %v", id, ctx.Err())
		}
	}
}

// pyWorker is testdata/polyglot.py worker: its stdout carries one JSON
// event per line (ready, delivery, stopped).
type pyWorker struct {
	cmd     *exec.Cmd
	ready   chan struct{}
	stopped chan struct{}
	exited  chan struct{}
	waitErr error // set before exited is closed
	logPath string
}

func startPyWorker(t *testing.T, py, script string, calls *callLog, args ...string) *pyWorker {
	t.Helper()
	w := &pyWorker{ready: make(chan struct{}), stopped: make(chan struct{}), exited: make(chan struct{}),
		logPath: filepath.Join(t.TempDir(), "py-worker.log")}
	logf, err := os.Create(w.logPath)
	if err != nil {
		t.Fatal(err)
	}
	w.cmd = exec.Command(py, append([]string{script}, args...)...)
	w.cmd.Env = harness.PythonEnv(t)
	w.cmd.Stderr = logf
	w.cmd.SysProcAttr = harness.ProcAttr()
	stdout, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatalf("start the Python worker: %v", err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var ev struct {
				Event string `json:"event"`
				execCall
			}
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				fmt.Fprintf(logf, "e2e: bad event line %q: %v\n", sc.Text(), err)
				continue
			}
			switch ev.Event {
			case "ready":
				close(w.ready)
			case "stopped":
				close(w.stopped)
			case "delivery":
				calls.add(ev.execCall)
			}
		}
		w.waitErr = w.cmd.Wait()
		close(w.exited)
	}()
	t.Cleanup(func() {
		if !harness.IsClosed(w.exited) {
			w.cmd.Process.Kill()
			<-w.exited
		}
		logf.Close()
		if t.Failed() {
			t.Logf("----- stderr of the Python worker -----\n%s", w.logs())
		}
	})
	return w
}

func (w *pyWorker) logs() string {
	b, err := os.ReadFile(w.logPath)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// ---------------------------------------------------------------------------
// Helpers

// pollState reads the task through c until it is in state want.
func pollState(t *testing.T, ctx context.Context, c appClient, id, want string) taskView {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last taskView
	var lastErr error
	for time.Now().Before(deadline) && ctx.Err() == nil {
		last, lastErr = c.Get(ctx, id)
		if lastErr == nil && last.State == want {
			return last
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s client: task %q not %s after 30s: %+v, %v", c.Lang(), id, want, last, lastErr)
	return last
}

// sameView checks that both clients read the same task (they may ask
// different nodes, so it waits a little for them to agree).
func sameView(t *testing.T, ctx context.Context, a, b appClient, id string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		va, errA := a.Get(ctx, id)
		vb, errB := b.Get(ctx, id)
		if errA == nil && errB == nil && reflect.DeepEqual(va, vb) {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Errorf("task %q read differently:\n%-6s %+v %v\n%-6s %+v %v", id, a.Lang(), va, errA, b.Lang(), vb, errB)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func decodeJSON(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// executorNames returns the names of the executors registered on n.
func executorNames(t *testing.T, n *harness.Node) map[string]bool {
	t.Helper()
	resp, err := n.Client.Do(harness.ReqCtx(t), "GET", "/v1/executors", nil)
	if err != nil || resp.Status != http.StatusOK {
		t.Fatalf("GET /v1/executors on %s: %v %v", n.ID, resp, err)
	}
	var body struct {
		Executors []struct {
			Name string `json:"name"`
		} `json:"executors"`
	}
	if err := json.Unmarshal(resp.Body, &body); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, e := range body.Executors {
		names[e.Name] = true
	}
	return names
}
