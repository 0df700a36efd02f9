package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	ax "github.com/axsched/ax/clients/go"
)

const leaderMetrics = `# HELP ax_raft_entry_commands Commands group-committed in each Raft entry.
# TYPE ax_raft_entry_commands histogram
ax_raft_entry_commands_bucket{le="1"} 3
ax_raft_entry_commands_bucket{le="+Inf"} 10
ax_raft_entry_commands_sum 250
ax_raft_entry_commands_count 10
ax_raft_leader 1
ax_raft_log_writes_total 4
ax_raft_log_entries_written_total 10
process_cpu_seconds_total 1.25
`

const followerMetrics = `ax_raft_entry_commands_sum 0
ax_raft_entry_commands_count 0
ax_raft_leader 0
ax_raft_log_writes_total 7
`

func TestParseRaftCounters(t *testing.T) {
	c, ok := parseRaftCounters([]byte(leaderMetrics))
	if !ok || c != (raftCounters{entries: 10, commands: 250, leaderLogWrites: 4, logWrites: 4, cpuSeconds: 1.25}) {
		t.Errorf("leader: %+v, %v", c, ok)
	}
	f, ok := parseRaftCounters([]byte(followerMetrics))
	if !ok || f != (raftCounters{logWrites: 7}) {
		t.Errorf("follower: %+v, %v", f, ok)
	}
	if _, ok := parseRaftCounters([]byte("ax_raft_leader 1\nax_other_total 3\n")); ok {
		t.Error("metrics without the counters parsed as ok")
	}
	before := raftCounters{entries: 2, commands: 50, leaderLogWrites: 1, logWrites: 3}
	r := raftOf(raftCounters{entries: 10, commands: 250, leaderLogWrites: 4, logWrites: 11}.sub(before))
	if r == nil || r.Entries != 8 || r.CommandsPerEntry != 25 || r.LeaderFsyncsPerEntry != 3.0/8 || r.LogWrites != 8 {
		t.Errorf("raftOf: %+v", r)
	}
	if raftOf(raftCounters{logWrites: 5}) != nil {
		t.Error("raftOf without entries (the leader was not read) is not nil")
	}
	d := raftCounters{cpuSeconds: 3.5}.sub(raftCounters{cpuSeconds: 1.25})
	if got := cpuPerTask(d.cpuSeconds, 45000); got != 50 {
		t.Errorf("cpuPerTask(%v s, 45000) = %v µs, want 50", d.cpuSeconds, got)
	}
	if cpuPerTask(0, 10) != 0 || cpuPerTask(1, 0) != 0 || cpuPerTask(0.19, 10) != 0 {
		t.Error("cpuPerTask without tasks or with under 200 ms of CPU is not 0")
	}
}

func TestMeasureSyncRate(t *testing.T) {
	dir := t.TempDir()
	sr, err := measureSyncRate(context.Background(), dir, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if sr.Writes < 1 || sr.PerSecond <= 0 || sr.BlockBytes != 4096 || sr.Dir != dir {
		t.Errorf("%+v", sr)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the probe left %d files", len(ents))
	}
	if _, err := measureSyncRate(context.Background(), dir+"/missing", time.Millisecond); err == nil {
		t.Error("no error for a missing directory")
	}
}

func TestMeasureHostSpeed(t *testing.T) {
	hs, err := measureHostSpeed(context.Background(), 40*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	// A SHA-256 of 4 KiB takes microseconds, not nanoseconds or seconds;
	// a round trip through the kernel and the poller takes longer.
	if hs.HashMicros < 0.1 || hs.HashMicros > 10_000 || hs.SyscallNanos < 1 || hs.SyscallNanos > 1_000_000 ||
		hs.RoundTripMicros < 0.1 || hs.RoundTripMicros > 1_000_000 {
		t.Errorf("%+v", hs)
	}
	// However short the probe, each figure gets a sample.
	if hs, err := measureHostSpeed(context.Background(), time.Nanosecond); err != nil || hs.HashMicros <= 0 || hs.SyscallNanos <= 0 || hs.RoundTripMicros <= 0 {
		t.Errorf("a 1 ns probe: %+v, %v; want a sample of each", hs, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := measureHostSpeed(ctx, time.Second); err == nil {
		t.Error("a cancelled probe measured something")
	}
}

// TestThroughputReportShape: the JSON keeps the fields of before (mode,
// clients, tasks_per_s, request_latency…) and adds the disk's sync rate,
// the ratio to it and the Raft figures; the text names them.
func TestThroughputReportShape(t *testing.T) {
	rep := &ThroughputReport{Workload: "throughput", Target: "1 node",
		DiskSync: &SyncRate{Dir: "/d", Writes: 4000, Elapsed: Millis(time.Second), PerSecond: 4000, BlockBytes: 4096},
		Host:     &HostSpeed{HashMicros: 9.5, SyscallNanos: 591, RoundTripMicros: 21.25},
		Phases: []ThroughputPhase{
			{Mode: "single", Clients: 1, Requests: 1000, Tasks: 1000, TaskRate: 1000, ReqRate: 1000, VsSync: 0.25,
				Raft: &ThroughputRaft{Entries: 1000, CommandsPerEntry: 1, LeaderFsyncsPerEntry: 1, LogWrites: 1000}},
			{Mode: "batch 1000", Clients: 16, Requests: 10, Tasks: 10000, TaskRate: 20000, ReqRate: 20, VsSync: 5},
		},
		Notes: []string{"no Raft figures (commands per entry, fsyncs per entry): x"}}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"mode":"single"`, `"clients":1`, `"tasks_per_s":1000`, `"requests_per_s":1000`, `"request_latency":{`,
		`"elapsed_ms":`, `"errors":0`, `"tasks_per_synced_write":0.25`, `"raft":{"entries":1000,"commands_per_entry":1,"leader_fsyncs_per_entry":1,"log_writes_all_nodes":1000}`,
		`"disk_sync":{"dir":"/d","writes":4000,"elapsed_ms":1000,"writes_per_s":4000,"block_bytes":4096}`,
		`"host":{"sha256_4k_us":9.5,"syscall_ns":591,"pipe_round_trip_us":21.25}`} {
		if !bytes.Contains(b, []byte(k)) {
			t.Errorf("JSON lacks %s:\n%s", k, b)
		}
	}
	if bytes.Count(b, []byte(`"raft":`)) != 1 {
		t.Errorf("a phase without Raft figures has a raft field:\n%s", b)
	}
	var out bytes.Buffer
	rep.Print(&out)
	s := out.String()
	for _, k := range []string{"disk: 4000/s synced 4096-byte writes", "÷ sync rate", "cmds/entry", "fsyncs/entry", "0.25", "5.00", "no Raft figures",
		"host: SHA-256 of 4 KiB 9.5 µs; a system call 591 ns; one byte's round trip between two goroutines over pipes 21.2 µs"} {
		if !strings.Contains(s, k) {
			t.Errorf("text lacks %q:\n%s", k, s)
		}
	}
}

// fakeClusterNode serves GET /v1/cluster as node id of a cluster of
// members, on a Unix socket; it returns a client for it.
func fakeClusterNode(t *testing.T, id string, members int) *ax.Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), id+".sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var ms []string
	for i := range members {
		ms = append(ms, fmt.Sprintf(`{"id":"n%d","raft_addr":"r%d","suffrage":"Voter"}`, i+1, i+1))
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"node_id":%q,"state":"Follower","members":[%s]}`, id, strings.Join(ms, ","))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ax.New(ax.Config{SocketPath: sock})
}

// The nodes' CPU per task is given only when the sockets reach every
// member: two sockets of one node, or one of three, do not.
func TestNodesReached(t *testing.T) {
	ctx := context.Background()
	n1, n2, n3 := fakeClusterNode(t, "n1", 3), fakeClusterNode(t, "n2", 3), fakeClusterNode(t, "n3", 3)
	for _, tc := range []struct {
		clients          []*ax.Client
		reached, members int
	}{
		{[]*ax.Client{n1, n2, n3}, 3, 3},
		{[]*ax.Client{n2}, 1, 3},
		{[]*ax.Client{n1, n1, n2}, 2, 3},
		{[]*ax.Client{fakeClusterNode(t, "alone", 1)}, 1, 1},
	} {
		reached, members, err := nodesReached(ctx, tc.clients)
		if err != nil || reached != tc.reached || members != tc.members {
			t.Errorf("%d clients: reached %d of %d (%v), want %d of %d", len(tc.clients), reached, members, err, tc.reached, tc.members)
		}
	}
	if _, _, err := nodesReached(ctx, []*ax.Client{ax.New(ax.Config{SocketPath: filepath.Join(t.TempDir(), "none.sock")})}); err == nil {
		t.Error("no node behind the socket: no error")
	}
}

func TestThroughputPhases(t *testing.T) {
	for _, tc := range []struct {
		callers []int
		batch   int
		want    []throughputPhase
	}{
		{[]int{1, 8, 16}, 1000, []throughputPhase{{1, 1}, {8, 1}, {16, 1}, {16, 1000}}},
		{[]int{16, 4}, 10, []throughputPhase{{16, 1}, {4, 1}, {16, 10}}},
		// A batch of one would repeat the single submits of the most callers.
		{[]int{1, 16}, 1, []throughputPhase{{1, 1}, {16, 1}}},
	} {
		if got := throughputPhases(tc.callers, tc.batch); !slices.Equal(got, tc.want) {
			t.Errorf("throughputPhases(%v, %d) = %v, want %v", tc.callers, tc.batch, got, tc.want)
		}
	}
}
