package sidecartest_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
	"github.com/axsched/ax/sidecar"
	"github.com/axsched/ax/sidecar/sidecartest"
)

// webhook is a fake dead-run alert receiver on a Unix socket: it records
// every POST and answers with status() (200 by default).
type webhook struct {
	path string
	mu   sync.Mutex
	got  []alertPost
	fail int // answer 500 to this many more posts
}

type alertPost struct {
	path                string
	id, taskID, handler string
	run, ctype          string
	alert               axapi.Alert
	answered            int
}

func newWebhook(t *testing.T) *webhook {
	t.Helper()
	w := &webhook{path: filepath.Join(t.TempDir(), "hook.sock")}
	ln, err := net.Listen("unix", w.path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		p := alertPost{path: r.URL.Path, id: r.Header.Get(axapi.HeaderAlertID), taskID: r.Header.Get(axapi.HeaderTaskID),
			handler: r.Header.Get(axapi.HeaderHandler), run: r.Header.Get(axapi.HeaderRun), ctype: r.Header.Get("Content-Type")}
		if err := json.Unmarshal(b, &p.alert); err != nil {
			t.Errorf("alert body %s: %v", b, err)
		}
		w.mu.Lock()
		p.answered = http.StatusOK
		if w.fail > 0 {
			w.fail--
			p.answered = http.StatusInternalServerError
		}
		w.got = append(w.got, p)
		w.mu.Unlock()
		rw.WriteHeader(p.answered)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return w
}

func (w *webhook) url() string { return "unix://" + w.path }

func (w *webhook) setFail(n int) {
	w.mu.Lock()
	w.fail = n
	w.mu.Unlock()
}

func (w *webhook) posts() []alertPost {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]alertPost(nil), w.got...)
}

// delivered returns the posts answered 200, by alert id.
func (w *webhook) delivered() map[string][]alertPost {
	out := map[string][]alertPost{}
	for _, p := range w.posts() {
		if p.answered == http.StatusOK {
			out[p.id] = append(out[p.id], p)
		}
	}
	return out
}

func withWebhook(w *webhook) func(int, *sidecar.Config) {
	return func(_ int, cfg *sidecar.Config) { cfg.OnDeadURL = w.url() }
}

// TestDeadRunAlert: a run that ends DEAD (its two attempts answered 500)
// and one that ends FAILED (400) are each POSTed once to the webhook,
// with the alert id, task and run headers, the task and the run record;
// a run that succeeds is not; once delivered no alert is pending on any
// node and none is sent again.
func TestDeadRunAlert(t *testing.T) {
	w := newWebhook(t)
	c := sidecartest.New(t, sidecartest.Options{Nodes: 3, Config: withWebhook(w)})
	c.Respond(func(call sidecartest.Call) sidecartest.Reply {
		switch call.TaskID {
		case "dead":
			return sidecartest.Reply{Status: 500, Body: []byte("boom")}
		case "failed":
			return sidecartest.Reply{Status: 400, Body: []byte("bad input")}
		}
		return sidecartest.Reply{}
	})
	l := c.WaitLeader()
	submitJSON(t, c, l, `{"id":"dead","handler":"mail","max_attempts":2,"backoff":{"initial":"100ms","jitter":0}}`)
	submitJSON(t, c, l, `{"id":"failed","handler":"mail"}`)
	submitJSON(t, c, l, `{"id":"ok","handler":"mail"}`)
	c.AdvanceUntil("both alerts delivered", 50*time.Millisecond, func() bool { return len(w.delivered()) == 2 })
	for i := range c.Nodes() {
		c.Eventually("no alert pending", func() bool { return c.Metrics(i)["ax_alerts_pending"] == 0 })
	}
	// More time: nothing is sent again.
	c.Advance(3 * time.Minute)
	c.Submit(l, sidecartest.Spec("sentinel", "mail"))
	c.AdvanceUntil("sentinel done", 50*time.Millisecond, func() bool {
		tk, err := c.Task(l, "sentinel")
		return err == nil && tk.State == "SUCCESS"
	})
	posts := w.posts()
	if len(posts) != 2 {
		t.Fatalf("%d posts, want 2: %+v", len(posts), posts)
	}
	byID := w.delivered()
	d, f := byID["dead/1"], byID["failed/1"]
	if len(d) != 1 || len(f) != 1 {
		t.Fatalf("alerts by id: %v", byID)
	}
	p := d[0]
	if p.path != axapi.AlertPath || p.ctype != "application/json" || p.taskID != "dead" || p.handler != "mail" || p.run != "1" {
		t.Errorf("dead alert request: %+v", p)
	}
	a := p.alert
	if a.ID != "dead/1" || a.TaskID != "dead" || a.State != "DEAD" || a.Run != 1 || a.FinishedAt.IsZero() ||
		a.Task == nil || a.Task.State != "DEAD" || a.RunRecord == nil || a.RunRecord.State != "DEAD" || len(a.RunRecord.Attempts) != 2 ||
		a.RunRecord.Attempts[1].HTTPStatus != 500 {
		t.Errorf("dead alert body: %+v task %+v run %+v", a, a.Task, a.RunRecord)
	}
	if a := f[0].alert; a.State != "FAILED" || a.RunRecord == nil || a.RunRecord.State != "FAILED" || a.Error == "" {
		t.Errorf("failed alert body: %+v", a)
	}
	if m := c.Metrics(c.WaitLeader()); m[`ax_alerts_sent_total{outcome="delivered"}`] != 2 {
		t.Errorf("delivered metric %v", m[`ax_alerts_sent_total{outcome="delivered"}`])
	}
}

// TestDeadRunAlertRetried: a webhook that fails three times gets the
// alert again after a backoff on the node's clock, until it takes it;
// every send carries the same alert id.
func TestDeadRunAlertRetried(t *testing.T) {
	w := newWebhook(t)
	w.setFail(3)
	c := sidecartest.New(t, sidecartest.Options{Config: withWebhook(w)})
	c.Respond(func(sidecartest.Call) sidecartest.Reply { return sidecartest.Reply{Status: 500} })
	submitJSON(t, c, 0, `{"id":"d","handler":"h","max_attempts":1}`)
	c.AdvanceUntil("alert delivered", 100*time.Millisecond, func() bool { return len(w.delivered()) == 1 })
	posts := w.posts()
	if len(posts) != 4 {
		t.Fatalf("%d posts, want 4 (3 failed, 1 taken): %+v", len(posts), posts)
	}
	for _, p := range posts {
		if p.id != "d/1" {
			t.Errorf("post with id %q", p.id)
		}
	}
	c.Eventually("nothing pending", func() bool { return c.Metrics(0)["ax_alerts_pending"] == 0 })
	if m := c.Metrics(0); m[`ax_alerts_sent_total{outcome="failed"}`] != 3 || m[`ax_alerts_sent_total{outcome="delivered"}`] != 1 {
		t.Errorf("sent metrics failed %v delivered %v", m[`ax_alerts_sent_total{outcome="failed"}`], m[`ax_alerts_sent_total{outcome="delivered"}`])
	}
}

// TestDeadRunAlertLeaderChange: an alert pending when its leader is cut
// off (the webhook was down) is stored on every node, and the new leader
// delivers it.
func TestDeadRunAlertLeaderChange(t *testing.T) {
	w := newWebhook(t)
	w.setFail(1 << 30)
	c := sidecartest.New(t, sidecartest.Options{Nodes: 3, Config: withWebhook(w)})
	c.Respond(func(sidecartest.Call) sidecartest.Reply { return sidecartest.Reply{Status: 500} })
	old := c.WaitLeader()
	submitJSON(t, c, old, `{"id":"d","handler":"h","max_attempts":1}`)
	c.AdvanceUntil("a failed send", 50*time.Millisecond, func() bool { return len(w.posts()) > 0 })
	for i := range c.Nodes() {
		c.Eventually("the alert pending on every node", func() bool { return c.Metrics(i)["ax_alerts_pending"] == 1 })
	}
	c.Partition(old)
	l := c.WaitLeader()
	if l == old {
		t.Fatal("the partitioned node still leads")
	}
	w.setFail(0)
	c.AdvanceUntil("the new leader delivers", 100*time.Millisecond, func() bool { return len(w.delivered()["d/1"]) > 0 })
	c.Eventually("nothing pending on the new leader", func() bool { return c.Metrics(l)["ax_alerts_pending"] == 0 })
	c.Heal(old)
	c.Eventually("nothing pending on the old leader", func() bool { return c.Metrics(old)["ax_alerts_pending"] == 0 })
	for _, p := range w.posts() {
		if p.id != "d/1" {
			t.Errorf("post with id %q", p.id)
		}
	}
}
