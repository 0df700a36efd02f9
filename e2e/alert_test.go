package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
	"github.com/axsched/ax/e2e/harness"
)

// alertReceiver is a dead-run webhook receiver: testdata/alert_receiver.py
// (Python's http.server) when python3 is present, else a Go one. It keeps
// every POST it got.
type alertReceiver struct {
	url  string
	mu   sync.Mutex
	recs []alertRec
}

type alertRec struct {
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
	Body    axapi.Alert       `json:"body"`
}

func (r *alertReceiver) add(rec alertRec) {
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
}

func (r *alertReceiver) got() []alertRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]alertRec(nil), r.recs...)
}

func startAlertReceiver(t *testing.T) *alertReceiver {
	t.Helper()
	r := &alertReceiver{}
	if py, ok := harness.Python(t); ok {
		ctx, cancel := context.WithCancel(context.Background())
		cmd := exec.CommandContext(ctx, py, harness.RepoDir(t, "e2e", "testdata", "alert_receiver.py"))
		cmd.Env = harness.PythonEnv(t)
		cmd.Stderr = os.Stderr
		harness.InOwnGroup(cmd)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		t.Cleanup(func() { cancel(); <-done })
		port := make(chan string, 1)
		go func() {
			defer close(done)
			sc := bufio.NewScanner(out)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				line := sc.Text()
				if p, ok := strings.CutPrefix(line, "port "); ok {
					port <- p
					continue
				}
				var rec alertRec
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Errorf("receiver line %q: %v", line, err)
					continue
				}
				r.add(rec)
			}
			cmd.Wait()
		}()
		select {
		case p := <-port:
			r.url = "http://127.0.0.1:" + p
		case <-time.After(30 * time.Second):
			t.Fatal("the Python receiver did not start")
		}
		t.Logf("webhook receiver: %s (Python http.server) at %s", py, r.url)
		return r
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		rec := alertRec{Path: req.URL.Path, Headers: map[string]string{}}
		for k := range req.Header {
			rec.Headers[k] = req.Header.Get(k)
		}
		if err := json.Unmarshal(b, &rec.Body); err != nil {
			t.Errorf("alert body %s: %v", b, err)
		}
		r.add(rec)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	r.url = "http://" + ln.Addr().String()
	t.Logf("webhook receiver: Go net/http at %s (no python3)", r.url)
	return r
}

// TestDeadRunWebhook: three nodes with --on-dead-url pointing at a real
// receiver; a task whose executor always answers 500, max_attempts 2,
// goes DEAD, and the receiver gets exactly one POST for it, at
// /ax/v1/alert, with the alert id, task and handler headers and the run
// record of its two attempts; a task that succeeds sends none. Once the
// alert is delivered no node keeps it pending.
func TestDeadRunWebhook(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	recv := startAlertReceiver(t)
	c := harness.NewCluster(t, harness.WithSize(3), harness.WithArgs("--on-dead-url", recv.url))
	c.WaitReady()
	leader := c.Leader()
	for _, body := range []string{
		fmt.Sprintf(`{"id":"dies","handler":%q,"max_attempts":2,"backoff":{"initial":"100ms","jitter":0}}`, harness.HandlerFail),
		fmt.Sprintf(`{"id":"lives","handler":%q}`, harness.HandlerOK),
	} {
		if resp, err := leader.Client.Submit(harness.ReqCtx(t), []byte(body)); err != nil || resp.Status != 201 {
			t.Fatalf("submit %s: %v %v", body, resp, err)
		}
	}
	harness.WaitFor(t, 30*time.Second, 50*time.Millisecond, "the alert", func() error {
		if n := len(recv.got()); n == 0 {
			return fmt.Errorf("no POST yet")
		}
		return nil
	})
	harness.WaitFor(t, 30*time.Second, 100*time.Millisecond, "no alert pending on any node", func() error {
		for _, n := range c.Running() {
			if v := harness.Scrape(t, n)["ax_alerts_pending"]; v != 0 {
				return fmt.Errorf("%s: %v pending", n.ID, v)
			}
		}
		return nil
	})
	tk, err := leader.Client.GetTask(harness.ReqCtx(t), "lives")
	if err != nil || tk.State != "SUCCESS" {
		t.Fatalf("lives: %+v %v", tk, err)
	}
	// Deleted everywhere: the leader's sender, which sends one alert at
	// a time and deletes it before the next, has nothing left to send.
	recs := recv.got()
	if len(recs) != 1 {
		t.Fatalf("%d POSTs, want 1: %+v", len(recs), recs)
	}
	r := recs[0]
	h := func(k string) string {
		for hk, v := range r.Headers {
			if strings.EqualFold(hk, k) {
				return v
			}
		}
		return ""
	}
	if r.Path != axapi.AlertPath || h(axapi.HeaderAlertID) != "dies/1" || h(axapi.HeaderTaskID) != "dies" ||
		h(axapi.HeaderHandler) != harness.HandlerFail || h("Content-Type") != "application/json" {
		t.Errorf("request: path %s headers %v", r.Path, r.Headers)
	}
	a := r.Body
	if a.ID != "dies/1" || a.State != "DEAD" || a.Run != 1 || !strings.Contains(a.Error, "500") || a.Task == nil || a.Task.State != "DEAD" ||
		a.RunRecord == nil || a.RunRecord.State != "DEAD" || len(a.RunRecord.Attempts) != 2 || a.RunRecord.Attempts[0].HTTPStatus != 500 {
		t.Errorf("body: %+v task %+v run %+v", a, a.Task, a.RunRecord)
	}
}
