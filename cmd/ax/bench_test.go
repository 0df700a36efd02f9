package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/axsched/ax/bench"
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
	if strings.Contains(errOut, "data and logs in") {
		t.Errorf("stderr names the data directory the bench removes: %q", errOut)
	}
}

func TestBenchBurstAndThroughputSmall(t *testing.T) {
	benchEnv(t)
	out, errOut, code := runAx(t, "bench", "burst", "--count", "300", "--work", "5ms", "--limits", "4,32,adaptive")
	if code != 0 {
		t.Fatalf("burst: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	if strings.Contains(out, "TODO") {
		t.Errorf("burst report still has a TODO:\n%s", out)
	}
	for _, want := range []string{"fixed 4 ", "fixed 32 ", "adaptive ", "--delivery-min-concurrency 4 --delivery-concurrency 200", "where the time went"} {
		if !strings.Contains(out, want) {
			t.Errorf("burst report lacks %q:\n%s", want, out)
		}
	}
	// A fixed limit is min = max: the node never runs more at once, and its
	// limit gauge reads it.
	trace := t.TempDir() + "/trace.csv"
	out, errOut, code = runAx(t, "bench", "burst", "--count", "200", "--work", "20ms", "--limits", "4,adaptive", "--json", "--trace", trace)
	if code != 0 {
		t.Fatalf("burst --json: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	var br struct {
		Runs []struct {
			Limit      string `json:"limit"`
			Received   int    `json:"called_back"`
			PeakFlight int    `json:"peak_in_flight"`
			Limiter    *struct {
				Peak    int     `json:"peak_limit"`
				Samples int     `json:"samples"`
				Mean    float64 `json:"mean_callback_ms"`
			} `json:"limiter"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(out), &br); err != nil || len(br.Runs) != 2 {
		t.Fatalf("burst report: %v\n%s", err, out)
	}
	for _, run := range br.Runs {
		if run.Received != 200 || run.Limiter == nil || run.Limiter.Samples == 0 || run.Limiter.Mean < 20 {
			t.Errorf("run %+v (limiter %+v)", run, run.Limiter)
			continue
		}
		if run.Limit == "4" && (run.PeakFlight > 4 || run.Limiter.Peak != 4) {
			t.Errorf("fixed 4: peak in flight %d, peak limit %d; want at most 4 and 4", run.PeakFlight, run.Limiter.Peak)
		}
		if run.Limit == "adaptive" && (run.Limiter.Peak < 4 || run.Limiter.Peak > 200) {
			t.Errorf("adaptive: peak limit %d, want within [4, 200]", run.Limiter.Peak)
		}
	}
	if b, err := os.ReadFile(trace); err != nil || !strings.HasPrefix(string(b), "run,at_ms,limit,in_flight,queue\n4,") || !strings.Contains(string(b), "\nadaptive,") {
		t.Errorf("trace file: %v\n%.300s", err, b)
	}
	goTrace := t.TempDir() + "/bench.trace"
	out, errOut, code = runAx(t, "bench", "throughput", "--callers", "1,2", "--duration", "500ms", "--batch", "10", "--sync-probe", "100ms",
		"--processing", "300", "--workers", "8", "--json", "--go-trace", goTrace)
	if code != 0 {
		t.Fatalf("throughput: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	if b, err := os.ReadFile(goTrace); err != nil || !strings.HasPrefix(string(b), "go 1.") {
		t.Errorf("--go-trace file: %v, starts %.12q; want a Go runtime trace", err, b)
	}
	var r struct {
		Phases []struct {
			Mode    string  `json:"mode"`
			Answer  string  `json:"batch_answer"`
			Clients int     `json:"clients"`
			Tasks   int     `json:"tasks"`
			Rate    float64 `json:"tasks_per_s"`
			VsSync  float64 `json:"tasks_per_synced_write"`
			Errors  int     `json:"errors"`
			Client  float64 `json:"client_cpu_us_per_request"`
			Node    float64 `json:"node_cpu_us_per_task"`
			NodeCPU float64 `json:"node_cpu_s"`
			Raft    *struct {
				Entries          int     `json:"entries"`
				CommandsPerEntry float64 `json:"commands_per_entry"`
				FsyncsPerEntry   float64 `json:"leader_fsyncs_per_entry"`
				LogWrites        int     `json:"log_writes_all_nodes"`
			} `json:"raft"`
		} `json:"phases"`
		DiskSync *struct {
			Writes    int     `json:"writes"`
			PerSecond float64 `json:"writes_per_s"`
			Block     int     `json:"block_bytes"`
		} `json:"disk_sync"`
		Processing *struct {
			Tasks      int     `json:"tasks"`
			Workers    int     `json:"workers"`
			Submitted  int     `json:"submitted"`
			CalledBack int     `json:"called_back"`
			Completed  int     `json:"completed"`
			Missing    int     `json:"missing"`
			Rate       float64 `json:"tasks_per_s"`
			CbRate     float64 `json:"callbacks_per_s"`
			Elapsed    float64 `json:"elapsed_ms"`
			Lateness   struct {
				Count int     `json:"count"`
				P50   float64 `json:"p50_ms"`
				P99   float64 `json:"p99_ms"`
			} `json:"lateness"`
			Raft *struct {
				Entries          int     `json:"entries"`
				CommandsPerEntry float64 `json:"commands_per_entry"`
				FsyncsPerEntry   float64 `json:"leader_fsyncs_per_entry"`
			} `json:"raft"`
			Errors   int  `json:"errors"`
			TimedOut bool `json:"timed_out"`
		} `json:"processing"`
		Notes []string `json:"notes"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Phases) != 3 {
		t.Fatalf("throughput report: %v\n%s", err, out)
	}
	if r.DiskSync == nil || r.DiskSync.Writes < 1 || r.DiskSync.PerSecond <= 0 || r.DiskSync.Block != 4096 {
		t.Errorf("disk_sync %+v", r.DiskSync)
	}
	if a := r.Phases[2].Answer; a != "minimal" || r.Phases[0].Answer != "" {
		t.Errorf("batch_answer %q (one-task phase %q), want minimal (and none)", a, r.Phases[0].Answer)
	}
	for i, p := range r.Phases {
		// The nodes' CPU per task is given from 200 ms of their CPU on: a
		// 500 ms phase on a loaded machine may use less.
		if p.Tasks == 0 || p.Rate <= 0 || p.Errors != 0 || p.VsSync <= 0 || (runtime.GOOS == "linux" && (p.Client <= 0 || p.NodeCPU <= 0 || (p.NodeCPU >= 0.2) != (p.Node > 0))) {
			t.Errorf("phase %+v", p)
		}
		// Every phase proposed entries on the one node, which leads and
		// writes its log; a single submit is one command.
		if p.Raft == nil || p.Raft.Entries < 1 || p.Raft.CommandsPerEntry < 1 || p.Raft.FsyncsPerEntry <= 0 || p.Raft.LogWrites < 1 {
			t.Errorf("phase %d raft %+v (notes %q)", i, p.Raft, r.Notes)
		}
	}
	// The processing phase: every task called back once and completed; the
	// fires and completions are proposed (two commands per task at least,
	// one per entry at most), and its figures are not empty.
	if p := r.Processing; p == nil {
		t.Errorf("no processing phase:\n%s", out)
	} else {
		if p.Tasks != 300 || p.Workers != 8 || p.Submitted != 300 || p.CalledBack != 300 || p.Completed != 300 ||
			p.Missing != 0 || p.Errors != 0 || p.TimedOut || p.Rate <= 0 || p.CbRate <= 0 || p.Elapsed <= 0 || p.Lateness.Count != 300 {
			t.Errorf("processing %+v", p)
		}
		if p.Raft == nil || p.Raft.Entries < 1 || p.Raft.CommandsPerEntry < 1 || p.Raft.FsyncsPerEntry <= 0 {
			t.Errorf("processing raft %+v", p.Raft)
		} else if cmds := float64(p.Raft.Entries) * p.Raft.CommandsPerEntry; cmds < 600 {
			t.Errorf("processing proposed %.0f commands, want at least 600 (a fire and a completion per task)", cmds)
		}
	}
	if r.Phases[0].Mode != "single" || r.Phases[0].Clients != 1 || r.Phases[1].Clients != 2 {
		t.Errorf("one-task phases %+v", r.Phases[:2])
	}
	r.Phases = r.Phases[1:]
	if r.Phases[1].Clients != 2 {
		t.Errorf("the batched phase runs with %d callers, want the largest (2)", r.Phases[1].Clients)
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
	body, _, err := newCaller(sock, 0).Do(context.Background(), "GET", "/v1/executors", nil)
	if err != nil || strings.Contains(string(body), bench.ExecutorName) {
		t.Errorf("executors after the bench: %s (%v)", body, err)
	}
}

// TestBenchThroughputAgainstARunningNodeCancelsItsTasks checks that the
// bench leaves no WAITING tasks behind on a running cluster, unless
// --keep-tasks.
func TestBenchThroughputAgainstARunningNodeCancelsItsTasks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node; skipped with -short")
	}
	sock := startNode(t)
	execSock := strings.TrimSuffix(sock, "ax.sock") + "bench-exec.sock"
	args := []string{"bench", "throughput", "--socket", sock, "--executor-listen", "unix://" + execSock,
		"--clients", "2", "--duration", "300ms", "--batch", "10", "--processing", "0"}
	out, errOut, code := runAx(t, args...)
	if code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	if !strings.Contains(errOut, "still WAITING") || !strings.Contains(out, "cancelled (--keep-tasks: left WAITING)") {
		t.Errorf("the bench does not say it cancelled its tasks:\nstdout %s\nstderr %s", out, errOut)
	}
	if strings.Contains(errOut, "data and logs in") {
		t.Errorf("stderr names a data directory:\n%s", errOut)
	}
	out, _, _ = runAx(t, "list", "--socket", sock, "--handler", "ax-bench.throughput", "--state", "waiting", "--limit", "0", "--json")
	if n := strings.Count(out, `"id":`); n != 0 {
		t.Errorf("%d WAITING tasks of the bench left on the node", n)
	}
	out, _, _ = runAx(t, "list", "--socket", sock, "--handler", "ax-bench.throughput", "--state", "cancelled", "--limit", "1", "--json")
	if n := strings.Count(out, `"id":`); n != 1 {
		t.Errorf("no CANCELLED task of the bench on the node")
	}

	out, errOut, code = runAx(t, append(args, "--keep-tasks")...)
	if code != 0 {
		t.Fatalf("--keep-tasks: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	out, _, _ = runAx(t, "list", "--socket", sock, "--handler", "ax-bench.throughput", "--state", "waiting", "--limit", "1", "--json")
	if n := strings.Count(out, `"id":`); n != 1 {
		t.Errorf("--keep-tasks: the bench's tasks are not WAITING")
	}
}

// TestBenchThroughputFlags: --callers takes a list of positive numbers,
// --clients is its old spelling and not both; bad values are usage errors
// before any node starts.
func TestBenchThroughputFlags(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
	}{
		{"1,8,16", []int{1, 8, 16}}, {" 4 ", []int{4}}, {"2, 3", []int{2, 3}},
	} {
		got, err := parseCallers(tc.in)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("parseCallers(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, args := range [][]string{
		{"--callers", "0"}, {"--callers", "1,x"}, {"--callers", ""}, {"--callers", "1,,2"}, {"--callers", "-1"},
		{"--clients", "2", "--callers", "3"}, {"--clients", "0"},
		{"--batch", "1001"}, {"--batch", "0"}, {"--duration", "0s"}, {"--sync-probe", "-1s"},
		{"--processing", "-1"}, {"--workers", "0"}, {"--workers", "10001"},
	} {
		out, errOut, code := runAx(t, append([]string{"bench", "throughput"}, args...)...)
		if code != exitUsage || errOut == "" || strings.Contains(errOut, "ready in") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want a usage error before any node starts", args, code, out, errOut)
		}
		// The error names the flag and its value (both flags, when given
		// together).
		if flag, val := args[len(args)-2], args[len(args)-1]; len(args) == 2 && (!strings.Contains(errOut, flag) || !strings.Contains(errOut, val)) {
			t.Errorf("%v: stderr %q does not name %s and %q", args, errOut, flag, val)
		}
	}
}
