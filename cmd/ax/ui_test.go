package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ax "github.com/axsched/ax/clients/go"
	"github.com/axsched/ax/ui"
)

// TestUI_NonLoopbackNeedsToken: without --ui-token, a --ui-addr (or `ax
// ui --listen`) that is not loopback is refused before anything starts.
func TestUI_NonLoopbackNeedsToken(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	for _, args := range [][]string{
		{"sidecar", "--ui-addr", "0.0.0.0:7480", "--data-dir", data, "--socket", filepath.Join(dir, "ax.sock")},
		{"sidecar", "--ui-addr", ":7480", "--data-dir", data, "--socket", filepath.Join(dir, "ax.sock")},
		{"dev", "--ui-addr", "10.1.2.3:7480", "--data-dir", data, "--socket", filepath.Join(dir, "ax.sock")},
		{"ui", "--listen", "0.0.0.0:7480", "--socket", filepath.Join(dir, "ax.sock")},
	} {
		_, errOut, code := runAx(t, args...)
		if code != exitUsage || !strings.Contains(errOut, "is not a loopback address: give --ui-token") || !strings.Contains(errOut, "--"+map[bool]string{true: "listen", false: "ui-addr"}[args[0] == "ui"]+" ") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("the data dir was created (%v): the node started", err)
	}
	_, errOut, code := runAx(t, "sidecar", "--ui-token", "x", "--data-dir", data)
	if code != exitUsage || !strings.Contains(errOut, "--ui-token needs --ui-addr") {
		t.Errorf("--ui-token alone: exit %d, stderr %q", code, errOut)
	}
	tf := filepath.Join(dir, "empty")
	os.WriteFile(tf, []byte("\n"), 0o600)
	_, errOut, code = runAx(t, "ui", "--listen", "0.0.0.0:7480", "--ui-token-file", tf)
	if code != exitUsage || !strings.Contains(errOut, "is empty") {
		t.Errorf("empty token file: exit %d, stderr %q", code, errOut)
	}
}

// TestUI_TokenGives401: with --ui-token, a request without it is 401, and
// one with it is not (the flag reaches the server).
func TestUI_TokenGives401(t *testing.T) {
	f := uiFlags{addr: "127.0.0.1:0", token: "0123456789abcdef"}
	srv, ln, err := f.listenUI(filepath.Join(t.TempDir(), "ax.sock"), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	for _, c := range []struct {
		auth string
		want int
	}{{"", 401}, {"Bearer wrong", 401}, {"Basic MDEyMzQ1Njc4OWFiY2RlZg==", 401}, {"Bearer 0123456789abcdef", 0}} {
		req := httptest.NewRequest("GET", "http://127.0.0.1/tasks", nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		if c.want == 0 && w.Code == 401 {
			t.Errorf("Authorization %q (the token): 401", c.auth)
		} else if c.want != 0 && w.Code != c.want {
			t.Errorf("Authorization %q: %d, want %d", c.auth, w.Code, c.want)
		}
	}
}

// BenchmarkUI_TaskList100k measures the server time of the dashboard's
// task list on a real node holding 100 000 tasks (one in-process node;
// filling it takes a minute):
//
//	go test -run '^$' -bench UI_TaskList100k -benchtime 50x ./cmd/ax/
func BenchmarkUI_TaskList100k(b *testing.B) {
	socket := startNode(b)
	c := ax.New(ax.Config{SocketPath: socket, Timeout: time.Minute})
	ctx := context.Background()
	const total, batch = 100_000, 1000
	start := time.Now()
	for i := 0; i < total; i += batch {
		reqs := make([]ax.SubmitRequest, batch)
		for j := range reqs {
			n := i + j
			h := "bench.mail"
			if n%100 == 0 {
				h = "bench.sms"
			}
			reqs[j] = ax.SubmitRequest{ID: fmt.Sprintf("order-%06d", n), Handler: h, Delay: 24 * time.Hour, Labels: map[string]string{"shard": fmt.Sprint(n % 50)}}
		}
		res, err := c.SubmitBatch(ctx, reqs)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
	b.Logf("submitted %d tasks in %s", total, time.Since(start).Round(time.Millisecond))
	srv, err := ui.New(ui.Options{Socket: socket, APITimeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, httptest.NewRequest("GET", "http://127.0.0.1/tasks", nil))
	if !strings.Contains(w.Body.String(), `id="total">100000<`) {
		b.Fatalf("the task list does not count 100000 tasks")
	}
	for _, q := range []string{"", "?cursor=b3JkZXItMDUwMDAw", "?handler=bench.sms", "?state=WAITING&limit=200", "?label=shard%3D7", "?prefix=order-0999", "?state=DEAD"} {
		b.Run("tasks"+strings.ReplaceAll(q, "/", "_"), func(b *testing.B) {
			for b.Loop() {
				req := httptest.NewRequest("GET", "http://127.0.0.1/tasks"+q, nil)
				w := httptest.NewRecorder()
				srv.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("GET /tasks%s: %d %s", q, w.Code, w.Body.String())
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/page")
		})
	}
}
