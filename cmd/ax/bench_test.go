package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/axsched/ax/bench"
	"github.com/axsched/ax/internal/axapi"
)

// benchEnv makes the bench's nodes run this test binary as `ax sidecar`
// (see TestMain).
func benchEnv(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts ax nodes; skipped with -short")
	}
	t.Setenv("AX_TEST_MAIN", "1")
}

func TestBenchDelayedOneNode(t *testing.T) {
	benchEnv(t)
	out, errOut, code := runAx(t, "bench", "delayed", "--count", "200", "--spread", "1s-2s", "--nodes", "1", "--json")
	if code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	var r struct {
		Count, Submitted, Early, Expired, Missing, Duplicates int
		CalledBack                                            int `json:"called_back"`
		Pass                                                  bool
		Lateness                                              struct {
			Count int     `json:"count"`
			P99   float64 `json:"p99_ms"`
			Max   float64 `json:"max_ms"`
		}
		Makespan float64 `json:"makespan_ms"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, out)
	}
	if !r.Pass || r.Count != 200 || r.Submitted != 200 || r.CalledBack != 200 || r.Early != 0 || r.Missing != 0 || r.Lateness.Count != 200 {
		t.Errorf("report %+v\n%s", r, out)
	}
	if r.Makespan < 1000 || r.Lateness.Max < 0 || r.Lateness.P99 > r.Lateness.Max {
		t.Errorf("implausible report %+v", r)
	}
	if strings.Contains(errOut, "\r") {
		t.Errorf("a progress bar was drawn although stderr is not a terminal: %q", errOut)
	}
}

func TestBenchBurstAndThroughputSmall(t *testing.T) {
	benchEnv(t)
	out, errOut, code := runAx(t, "bench", "burst", "--count", "300", "--work", "5ms", "--limits", "4,32")
	if code != 0 {
		t.Fatalf("burst: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	for _, want := range []string{"fixed 4 ", "fixed 32 ", "TODO adaptive"} {
		if !strings.Contains(out, want) {
			t.Errorf("burst report lacks %q:\n%s", want, out)
		}
	}
	out, errOut, code = runAx(t, "bench", "throughput", "--clients", "2", "--duration", "500ms", "--batch", "10", "--json")
	if code != 0 {
		t.Fatalf("throughput: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	var r struct {
		Phases []struct {
			Mode   string  `json:"mode"`
			Tasks  int     `json:"tasks"`
			Rate   float64 `json:"tasks_per_s"`
			Errors int     `json:"errors"`
		} `json:"phases"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Phases) != 2 {
		t.Fatalf("throughput report: %v\n%s", err, out)
	}
	for _, p := range r.Phases {
		if p.Tasks == 0 || p.Rate <= 0 || p.Errors != 0 {
			t.Errorf("phase %+v", p)
		}
	}
	if r.Phases[1].Mode != "batch 10" || r.Phases[1].Tasks%10 != 0 {
		t.Errorf("batched phase %+v", r.Phases[1])
	}
}

func TestBenchDelayedAgainstARunningNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node; skipped with -short")
	}
	sock := startNode(t)
	execSock := strings.TrimSuffix(sock, "ax.sock") + "bench-exec.sock"
	out, errOut, code := runAx(t, "bench", "delayed", "--socket", sock, "--executor-listen", "unix://"+execSock,
		"--count", "100", "--spread", "200ms-600ms", "--batch", "30")
	if code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	for _, want := range []string{"running cluster via " + sock, "called back  100 of 100: 0 missing", "PASS"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	out, _, _ = runAx(t, "list", "--socket", sock, "--handler", "ax-bench.delayed", "--state", "success", "--limit", "0", "--json")
	if n := strings.Count(out, `"id":`); n != 100 {
		t.Errorf("%d SUCCESS tasks of the bench on the node, want 100", n)
	}
	// The bench removed its executor registration again.
	body, _, err := axapi.New(sock, 0).Do(context.Background(), "GET", "/v1/executors", nil)
	if err != nil || strings.Contains(string(body), bench.ExecutorName) {
		t.Errorf("executors after the bench: %s (%v)", body, err)
	}
}
