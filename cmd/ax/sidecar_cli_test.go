package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/internal/freeport"

	"github.com/rs/zerolog"

	ax "github.com/axsched/ax/clients/go"
	"github.com/axsched/ax/sidecar"
)

// startNode starts a real one-node sidecar in-process, on free ports, and
// returns its socket once it is ready.
func startNode(t testing.TB) string {
	t.Helper()
	sock, _ := startNodeN(t)
	return sock
}

// startNodeN is startNode, and returns the node too.
func startNodeN(t testing.TB) (string, *sidecar.Node) {
	t.Helper()
	dir, err := os.MkdirTemp("", "axcli")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	addrs, err := freeport.Addrs(2)
	if err != nil {
		t.Fatal(err)
	}
	cfg := sidecar.Config{
		NodeID: "t1", DataDir: filepath.Join(dir, "data"), Socket: filepath.Join(dir, "ax.sock"),
		RaftAddr: addrs[0], PeerAddr: addrs[1],
	}
	n, err := sidecar.Start(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	c := ax.New(ax.Config{SocketPath: cfg.Socket, Timeout: time.Second})
	deadline := time.Now().Add(30 * time.Second)
	for c.Ready(context.Background()) != nil {
		if time.Now().After(deadline) {
			t.Fatal("node not ready after 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cfg.Socket, n
}

// TestCLIAgainstARealSidecar drives every task command and `cluster
// status` against a real node.
func TestCLIAgainstARealSidecar(t *testing.T) {
	sock := startNode(t)
	ax := func(args ...string) (string, string, int) {
		t.Helper()
		return runAx(t, append(args, "--socket", sock)...)
	}

	out, errOut, code := ax("submit", "order.timeout", "--id", "order|42", "--delay", "1h", "--payload", `{"order_id": 42}`)
	if code != 0 || !strings.HasPrefix(out, "submitted order|42: WAITING, runs ") || !strings.Contains(out, "(in 1h0m)") {
		t.Fatalf("submit: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// The same spec again is fine; another spec is a conflict.
	if out, errOut, code = ax("submit", "order.timeout", "--id", "order|42", "--delay", "1h", "--payload", `{"order_id": 42}`); code != 0 || out != "task order|42 already exists with the same spec (WAITING)\n" {
		t.Errorf("idempotent submit: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, errOut, code = ax("submit", "order.timeout", "--id", "order|42", "--delay", "2h"); code != 1 || !strings.Contains(errOut, "--overwrite") {
		t.Errorf("conflicting submit: exit %d, stderr %q", code, errOut)
	}
	for i := range 3 {
		if _, errOut, code := ax("submit", "report.build", "--id", fmt.Sprintf("r%d", i), "--run-at", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)); code != 0 {
			t.Fatalf("submit r%d: exit %d, stderr %q", i, code, errOut)
		}
	}

	out, _, code = ax("get", "order|42")
	if code != 0 || field(out, "State") != "WAITING" || field(out, "Payload") != `{"order_id": 42}` {
		t.Errorf("get: exit %d\n%s", code, out)
	}
	out, _, code = ax("get", "order|42", "--json")
	var task map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &task) != nil || task["id"] != "order|42" || task["handler"] != "order.timeout" {
		t.Errorf("get --json: exit %d\n%s", code, out)
	}

	// A recurring task with every field the API takes: --json shows them
	// all, and so does the text view.
	out, errOut, code = ax("submit", "poll", "--id", "p", "--every", "5m", "--repeats", "3", "--until", "2030-01-01T00:00:00Z",
		"--label", "team=ops", "--label", "環境=本番", "--route-key", "tenant-7", "--backoff-initial", "1s", "--backoff-max", "1m",
		"--backoff-multiplier", "3", "--backoff-jitter", "0", "--json")
	if code != 0 {
		t.Fatalf("submit --every: exit %d, stderr %q", code, errOut)
	}
	if err := json.Unmarshal([]byte(out), &task); err != nil {
		t.Fatalf("submit --json: %v\n%s", err, out)
	}
	for k, want := range map[string]any{"every": "5m0s", "repeats": float64(3), "until": "2030-01-01T00:00:00Z", "route_key": "tenant-7", "run": float64(1), "snoozes": float64(0)} {
		if task[k] != want {
			t.Errorf("submit --json: %s is %v, want %v\n%s", k, task[k], want, out)
		}
	}
	if b, _ := task["backoff"].(map[string]any); b["initial"] != "1s" || b["multiplier"] != float64(3) || b["jitter"] != float64(0) {
		t.Errorf("submit --json: backoff %v", task["backoff"])
	}
	if l, _ := task["labels"].(map[string]any); l["環境"] != "本番" {
		t.Errorf("submit --json: labels %v", task["labels"])
	}
	out, _, _ = ax("get", "p", "--consistency", "strong")
	for k, want := range map[string]string{"Every": "5m0s", "Repeats": "3 runs", "Run": "1", "Route key": "tenant-7",
		"Labels": "team=ops, 環境=本番", "Backoff": "1s, ×3 per retry, at most 1m0s, jitter ±0%"} {
		if got := field(out, k); got != want {
			t.Errorf("get: %s %q, want %q\n%s", k, got, want, out)
		}
	}
	if got := field(out, "Next run"); !strings.Contains(got, "Z (in ") {
		t.Errorf("get: Next run %q is not UTC", got)
	}
	if out, _, code = ax("cancel", "p"); code != 0 || out != "cancelled p\n" {
		t.Errorf("cancel p: exit %d, stdout %q", code, out)
	}
	if out, _, code = ax("cancel", "p"); code != 0 || out != "p was already CANCELLED; nothing to cancel\n" {
		t.Errorf("cancel p again: exit %d, stdout %q", code, out)
	}
	if _, errOut, code = ax("submit", "h", "--payload", `"`+strings.Repeat("x", 1<<20)+`"`); code != 2 || errOut != "ax: payload is 1048578 bytes; the limit is 1 MiB\n" {
		t.Errorf("payload over 1 MiB: exit %d, stderr %q", code, errOut)
	}

	out, _, code = ax("list", "--handler", "report.build")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 4 || !strings.HasPrefix(lines[1], "r0 ") {
		t.Errorf("list --handler: exit %d\n%s", code, out)
	}
	out, errOut, code = ax("list", "--limit", "2")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 3 || !strings.Contains(errOut, "showing the first 2") {
		t.Errorf("list --limit 2: exit %d\n%s\nstderr %q", code, out, errOut)
	}

	if out, errOut, code = ax("cancel", "r1"); code != 0 || out != "cancelled r1\n" {
		t.Errorf("cancel: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, _, _ = ax("list", "--state", "cancelled", "--json")
	if !strings.Contains(out, `"id": "r1"`) || strings.Contains(out, `"id": "r0"`) {
		t.Errorf("list --state cancelled:\n%s", out)
	}
	if _, errOut, code = ax("retry", "r0"); code != 1 || !strings.Contains(errOut, "r0") {
		t.Errorf("retry of a WAITING task: exit %d, stderr %q", code, errOut)
	}
	if _, errOut, code = ax("get", "missing"); code != 1 || errOut != "ax: task \"missing\" not found\n" {
		t.Errorf("get missing: exit %d, stderr %q", code, errOut)
	}

	out, _, code = ax("cluster", "status")
	if code != 0 || !strings.Contains(out, "node:           t1 (leader)") || !strings.Contains(out, "t1 *  leader  Voter") {
		t.Errorf("cluster status: exit %d\n%s", code, out)
	}
}
