package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/internal/freeport"
)

// clusterConfig is what ClusterOptions set.
type clusterConfig struct {
	size            int
	bootstrapExpect int // 0: size
	executorsOn     map[int]bool
	noExecutors     bool
	logLevel        string
	extraArgs       []string
	nodeArgs        map[int][]string
	peerProxies     bool
	deferred        map[int]bool
	idPrefix        string // "": "n"
}

// ClusterOption configures NewCluster.
type ClusterOption func(*clusterConfig)

// WithSize sets the number of nodes (default 3). A cluster of one is
// started with --bootstrap-expect 1 and no --join.
func WithSize(n int) ClusterOption { return func(c *clusterConfig) { c.size = n } }

// WithIDPrefix names the nodes prefix1, prefix2, … instead of n1, n2, …
// (two clusters of one test with ids of their own).
func WithIDPrefix(prefix string) ClusterOption {
	return func(c *clusterConfig) { c.idPrefix = prefix }
}

// WithBootstrapExpect overrides --bootstrap-expect (default: the size).
func WithBootstrapExpect(n int) ClusterOption {
	return func(c *clusterConfig) { c.bootstrapExpect = n }
}

// WithExecutorsOn gives only the nodes with these indexes (0-based) an
// executor. By default every node has one, for every handler ("*").
func WithExecutorsOn(idx ...int) ClusterOption {
	return func(c *clusterConfig) {
		c.executorsOn = map[int]bool{}
		for _, i := range idx {
			c.executorsOn[i] = true
		}
		c.noExecutors = len(idx) == 0
	}
}

// WithLogLevel sets --log-level (default: $AX_E2E_LOG_LEVEL, else info).
func WithLogLevel(l string) ClusterOption { return func(c *clusterConfig) { c.logLevel = l } }

// WithArgs appends arguments to every node's command line.
func WithArgs(args ...string) ClusterOption {
	return func(c *clusterConfig) { c.extraArgs = append(c.extraArgs, args...) }
}

// WithNodeArgs appends arguments to the command line of the node with
// this index (0-based) only, after WithArgs's.
func WithNodeArgs(idx int, args ...string) ClusterOption {
	return func(c *clusterConfig) {
		if c.nodeArgs == nil {
			c.nodeArgs = map[int][]string{}
		}
		c.nodeArgs[idx] = append(c.nodeArgs[idx], args...)
	}
}

// WithPeerProxies routes every link between two nodes, per direction,
// through a FaultProxy (one for Raft, one for the peer API), with the
// hidden --peer-route flag and --join addresses of the proxies; the
// test cuts and heals links through Cluster.Net.
func WithPeerProxies() ClusterOption { return func(c *clusterConfig) { c.peerProxies = true } }

// WithDeferredStart leaves the nodes with these indexes (0-based)
// unstarted: the test starts them later (a node that joins late).
func WithDeferredStart(idx ...int) ClusterOption {
	return func(c *clusterConfig) {
		c.deferred = map[int]bool{}
		for _, i := range idx {
			c.deferred[i] = true
		}
	}
}

// Node is one member of a Cluster: its process, addresses, API client and
// (when it has one) its executor.
type Node struct {
	*Process
	ID       string
	Index    int
	Socket   string
	DataDir  string
	RaftAddr string
	PeerAddr string
	Client   *Client
	Exec     *Executor // nil when the node has no executor
}

// Cluster is a set of ax processes that form one Raft group.
type Cluster struct {
	t        testing.TB
	Nodes    []*Node
	Recorder *Recorder // shared by every node's executor
	// Net holds the proxies of every link (WithPeerProxies); nil without.
	Net *FaultNet
}

// NewCluster starts a cluster (it does not wait for it: see WaitReady).
// Sockets go to a short directory (Unix socket paths are limited to 107
// bytes), data and logs to t.TempDir(). t.Cleanup kills every process and
// stops the executors; when the test failed, it dumps every node's log.
func NewCluster(t testing.TB, opts ...ClusterOption) *Cluster {
	t.Helper()
	cfg := clusterConfig{size: 3, logLevel: os.Getenv("AX_E2E_LOG_LEVEL")}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.logLevel == "" {
		cfg.logLevel = "info"
	}
	if cfg.bootstrapExpect == 0 {
		cfg.bootstrapExpect = cfg.size
	}
	dataRoot := t.TempDir()
	sockRoot := ShortDir(t, dataRoot)
	ports := FreePorts(t, 2*cfg.size)

	c := &Cluster{t: t, Recorder: NewRecorder()}
	for i := 0; i < cfg.size; i++ {
		prefix := cfg.idPrefix
		if prefix == "" {
			prefix = "n"
		}
		id := fmt.Sprintf("%s%d", prefix, i+1)
		n := &Node{
			ID: id, Index: i,
			Socket:   filepath.Join(sockRoot, id+".sock"),
			DataDir:  filepath.Join(dataRoot, id),
			RaftAddr: fmt.Sprintf("127.0.0.1:%d", ports[2*i]),
			PeerAddr: fmt.Sprintf("127.0.0.1:%d", ports[2*i+1]),
		}
		n.Client = NewClient(n.Socket)
		if !cfg.noExecutors && (cfg.executorsOn == nil || cfg.executorsOn[i]) {
			n.Exec = StartExecutor(t, id, filepath.Join(sockRoot, id+"-app.sock"), c.Recorder)
		}
		c.Nodes = append(c.Nodes, n)
	}
	if cfg.peerProxies {
		c.Net = newFaultNet()
		for _, from := range c.Nodes {
			for _, to := range c.Nodes {
				if from != to {
					c.Net.add(t, from, to)
				}
			}
		}
	}
	for _, n := range c.Nodes {
		args := []string{"sidecar",
			"--node-id", n.ID, "--data-dir", n.DataDir, "--socket", n.Socket,
			"--raft-addr", n.RaftAddr, "--peer-addr", n.PeerAddr,
			"--bootstrap-expect", fmt.Sprint(cfg.bootstrapExpect),
			"--log-format", "json", "--log-level", cfg.logLevel,
		}
		var join []string
		for _, o := range c.Nodes {
			if o == n {
				continue
			}
			if c.Net != nil {
				l := c.Net.links[[2]string{n.ID, o.ID}]
				join = append(join, l.peer.Addr)
				args = append(args, "--peer-route", fmt.Sprintf("%s=%s,%s", o.ID, l.raft.Addr, l.peer.Addr))
			} else {
				join = append(join, o.PeerAddr)
			}
		}
		if cfg.size > 1 {
			args = append(args, "--join", strings.Join(join, ","))
		}
		if n.Exec != nil {
			args = append(args, "--executor", "*=unix://"+n.Exec.Socket)
		}
		args = append(args, cfg.extraArgs...)
		args = append(args, cfg.nodeArgs[n.Index]...)
		n.Process = NewProcess(n.ID, AxBin, filepath.Join(dataRoot, n.ID+".log"), args...)
	}

	t.Cleanup(func() {
		for _, n := range c.Nodes {
			_ = n.Kill()
		}
		for _, n := range c.Nodes {
			n.Client.Close()
		}
		if t.Failed() {
			for _, n := range c.Nodes {
				t.Logf("----- log of %s (%s) -----\n%s", n.ID, n.logPath, Tail(n.Logs(), LogDumpMaxBytes))
			}
			keepLogs(t, c.Nodes)
		}
	})
	for _, n := range c.Nodes {
		if cfg.deferred[n.Index] {
			continue
		}
		if err := n.Start(); err != nil {
			t.Fatalf("start %s: %v", n.ID, err)
		}
	}
	return c
}

// Tail returns the last max bytes of s, from a line start.
func Tail(s string, max int) string {
	if len(s) <= max {
		return s
	}
	s = s[len(s)-max:]
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return "(... earlier lines cut ...)\n" + s
}

// ShortDir returns dir when socket paths under it fit in sun_path, else a
// new directory under os.TempDir() removed in t.Cleanup.
func ShortDir(t testing.TB, dir string) string {
	t.Helper()
	if len(dir)+len("/n10-app.sock") < unixPathMax-1 {
		return dir
	}
	d, err := os.MkdirTemp("", "axe")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free a
// moment ago, below the kernel's ephemeral range (see internal/freeport: a
// closed ":0" port can be taken by any outgoing connection before the node
// binds it).
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports, err := freeport.Ports(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// Node returns the node with the given id.
func (c *Cluster) Node(id string) *Node {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	c.t.Fatalf("no node %q", id)
	return nil
}

// Running returns the nodes whose process runs.
func (c *Cluster) Running() []*Node {
	var out []*Node
	for _, n := range c.Nodes {
		if n.Running() {
			out = append(out, n)
		}
	}
	return out
}

// WaitReady waits until GET /readyz answers 200 on every running node.
func (c *Cluster) WaitReady() {
	c.t.Helper()
	c.WaitReadyNodes(c.Running(), ReadyTimeout)
}

// WaitReadyNodes waits until GET /readyz answers 200 on each of nodes,
// failing the test after timeout or when one of them exits.
func (c *Cluster) WaitReadyNodes(nodes []*Node, timeout time.Duration) {
	c.t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	pending := append([]*Node(nil), nodes...)
	lastErr := map[string]string{}
	for len(pending) > 0 {
		var still []*Node
		for _, n := range pending {
			if !n.Running() {
				c.t.Fatalf("%s exited while waiting for readiness: %v", n.ID, n.ExitErr())
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			resp, err := n.Client.Do(ctx, "GET", "/readyz", nil)
			cancel()
			switch {
			case err != nil:
				lastErr[n.ID] = err.Error()
				still = append(still, n)
			case resp.Status != 200:
				lastErr[n.ID] = fmt.Sprintf("%d %s", resp.Status, strings.TrimSpace(string(resp.Body)))
				still = append(still, n)
			}
		}
		pending = still
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, n := range pending {
				c.t.Errorf("%s not ready after %s: %s", n.ID, timeout, lastErr[n.ID])
			}
			c.t.FailNow()
		}
		time.Sleep(PollInterval)
	}
	c.t.Logf("cluster of %d ready in %s", len(nodes), time.Since(start).Round(time.Millisecond))
}

// LeaderOf asks every given node for /v1/cluster and returns the node that
// says it is the leader when every answering node names it. It returns nil
// when they do not agree (yet).
func (c *Cluster) LeaderOf(nodes []*Node) *Node {
	var leaderID string
	var answered int
	for _, n := range nodes {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := n.Client.Cluster(ctx)
		cancel()
		if err != nil {
			continue
		}
		answered++
		if info.Leader == "" || (leaderID != "" && info.Leader != leaderID) {
			return nil
		}
		leaderID = info.Leader
		if info.State == "Leader" && info.NodeID != info.Leader {
			return nil
		}
	}
	if answered != len(nodes) || leaderID == "" {
		return nil
	}
	for _, n := range nodes {
		if n.ID == leaderID {
			return n
		}
	}
	return nil
}

// Leader returns the running node that every running node names as leader;
// it waits up to LeaderTimeout for them to agree.
func (c *Cluster) Leader() *Node {
	c.t.Helper()
	deadline := time.Now().Add(LeaderTimeout)
	for {
		if l := c.LeaderOf(c.Running()); l != nil {
			return l
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no agreed leader among %d running nodes after %s", len(c.Running()), LeaderTimeout)
		}
		time.Sleep(PollInterval)
	}
}

// Followers returns the running nodes other than the leader.
func (c *Cluster) Followers() []*Node {
	c.t.Helper()
	l := c.Leader()
	var out []*Node
	for _, n := range c.Running() {
		if n != l {
			out = append(out, n)
		}
	}
	return out
}

// WaitForNewLeader waits until the running nodes agree on a leader other
// than old and returns it.
func (c *Cluster) WaitForNewLeader(old *Node) *Node {
	c.t.Helper()
	deadline := time.Now().Add(LeaderTimeout)
	for {
		if l := c.LeaderOf(c.Running()); l != nil && l != old {
			return l
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no new leader (other than %s) after %s", old.ID, LeaderTimeout)
		}
		time.Sleep(PollInterval)
	}
}

// WaitFor calls cond every interval until it returns nil or timeout passes,
// then fails the test with cond's last error.
func WaitFor(t testing.TB, timeout, interval time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not done after %s: %v", what, timeout, err)
		}
		time.Sleep(interval)
	}
}

// keepLogs copies the whole log of each node into the directory named by
// AX_E2E_KEEP_LOGS, when set, as TEST-NODE.log (the dump above keeps only
// each log's tail, and the test's temporary directory goes with it).
func keepLogs(t testing.TB, nodes []*Node) {
	dir := os.Getenv("AX_E2E_KEEP_LOGS")
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("AX_E2E_KEEP_LOGS: %v", err)
		return
	}
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	for _, n := range nodes {
		p := filepath.Join(dir, fmt.Sprintf("%s-%s.log", name, n.ID))
		if err := os.WriteFile(p, []byte(n.Logs()), 0o644); err != nil {
			t.Logf("AX_E2E_KEEP_LOGS: %v", err)
			continue
		}
		t.Logf("kept the whole log of %s in %s", n.ID, p)
	}
}
