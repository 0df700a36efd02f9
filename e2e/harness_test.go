package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var axBinFlag = flag.String("ax-bin", "", "path of a prebuilt ax binary; empty: build github.com/axsched/ax/cmd/ax once")

// axBin is the binary every Process runs, set by TestMain.
var axBin string

// Timeouts of the harness. Each carries its unit in its value.
const (
	// readyTimeout bounds WaitReady after a cluster starts.
	readyTimeout = 30 * time.Second
	// leaderTimeout bounds WaitForNewLeader.
	leaderTimeout = 20 * time.Second
	// stopTimeout is how long Stop waits after SIGTERM before it kills.
	stopTimeout = 20 * time.Second
	// pollInterval is how often the pollers look again.
	pollInterval = 50 * time.Millisecond
	// logDumpMaxBytes bounds how much of one process's log is dumped on
	// failure (the tail is kept).
	logDumpMaxBytes = 256 << 10
	// unixPathMax is the size of sun_path on Linux, NUL included.
	unixPathMax = 108
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		return m.Run() // every test skips itself
	}
	if *axBinFlag != "" {
		abs, err := filepath.Abs(*axBinFlag)
		if err == nil {
			_, err = os.Stat(abs)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "e2e: -ax-bin %q: %v\n", *axBinFlag, err)
			return 2
		}
		axBin = abs
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "ax-e2e-bin")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 2
	}
	defer os.RemoveAll(dir)
	axBin = filepath.Join(dir, "ax")
	start := time.Now()
	cmd := exec.Command(goTool(), "build", "-o", axBin, "github.com/axsched/ax/cmd/ax")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: building ax: %v\n", err)
		return 2
	}
	fmt.Fprintf(os.Stderr, "e2e: built %s in %s\n", axBin, time.Since(start).Round(time.Millisecond))
	return m.Run()
}

// goTool returns the go command of the toolchain running the tests.
func goTool() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// skipShort skips the calling test under -short: every test here starts
// processes.
func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("e2e: starts real ax processes; skipped with -short")
	}
}

// ---------------------------------------------------------------------------
// Process

// Process is one ax process. Its stdout and stderr go to one log file (kept
// across restarts) in the test's temporary directory. Methods are safe for
// concurrent use.
type Process struct {
	Name    string
	bin     string
	args    []string
	logPath string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when the current run has exited
	exitErr error
}

// NewProcess returns a Process that runs bin with args, logging to logPath.
// It is not started.
func NewProcess(name, bin, logPath string, args ...string) *Process {
	return &Process{Name: name, bin: bin, args: args, logPath: logPath}
}

// Start starts the process. Starting a running process is an error.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !isClosed(p.done) {
		return fmt.Errorf("%s: already running (pid %d)", p.Name, p.cmd.Process.Pid)
	}
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "=== e2e %s: start %s %s\n", time.Now().Format(time.RFC3339Nano), p.bin, strings.Join(p.args, " "))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("%s: start: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.exitErr = cmd, done, nil
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(f, "=== e2e %s: exited: %v\n", time.Now().Format(time.RFC3339Nano), err)
		f.Close()
		p.mu.Lock()
		if p.cmd == cmd {
			p.exitErr = err
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Running reports whether the process is running.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !isClosed(p.done)
}

// Exited returns a channel closed when the current run exits (nil if never
// started).
func (p *Process) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// ExitErr returns how the last run ended (nil for exit status 0).
func (p *Process) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

func (p *Process) signal(sig os.Signal) (chan struct{}, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || isClosed(p.done) {
		return nil, nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return p.done, err
	}
	return p.done, nil
}

// Stop sends SIGTERM and waits for the process to exit; after stopTimeout
// it kills it and reports an error. It returns the process's exit error
// (nil for a clean exit). Stopping a stopped process does nothing.
func (p *Process) Stop() error {
	done, err := p.signal(syscall.SIGTERM)
	if done == nil {
		return err
	}
	select {
	case <-done:
		return p.ExitErr()
	case <-time.After(stopTimeout):
		_ = p.Kill()
		return fmt.Errorf("%s: did not exit within %s of SIGTERM; killed", p.Name, stopTimeout)
	}
}

// Kill sends SIGKILL and waits for the process to exit.
func (p *Process) Kill() error {
	done, err := p.signal(syscall.SIGKILL)
	if done != nil {
		<-done
	}
	return err
}

// Pause stops the process with SIGSTOP (it keeps its sockets but answers
// nothing) until Resume.
func (p *Process) Pause() error {
	_, err := p.signal(syscall.SIGSTOP)
	return err
}

// Resume continues a paused process (SIGCONT).
func (p *Process) Resume() error {
	_, err := p.signal(syscall.SIGCONT)
	return err
}

// Restart stops the process (SIGTERM) and starts it again with the same
// arguments.
func (p *Process) Restart() error {
	if err := p.Stop(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return err
		}
	}
	return p.Start()
}

// Logs returns everything the process wrote so far, across restarts.
func (p *Process) Logs() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", p.logPath, err)
	}
	return string(b)
}

// ---------------------------------------------------------------------------
// Cluster

// clusterConfig is what ClusterOptions set.
type clusterConfig struct {
	size            int
	bootstrapExpect int // 0: size
	executorsOn     map[int]bool
	noExecutors     bool
	logLevel        string
	extraArgs       []string
	peerProxies     bool
	deferred        map[int]bool
}

// ClusterOption configures NewCluster.
type ClusterOption func(*clusterConfig)

// WithSize sets the number of nodes (default 3). A cluster of one is
// started with --bootstrap-expect 1 and no --join.
func WithSize(n int) ClusterOption { return func(c *clusterConfig) { c.size = n } }

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
	t        *testing.T
	Nodes    []*Node
	Recorder *Recorder // shared by every node's executor
	// Net holds the proxies of every link (WithPeerProxies); nil without.
	Net *FaultNet
}

// NewCluster starts a cluster (it does not wait for it: see WaitReady).
// Sockets go to a short directory (Unix socket paths are limited to 107
// bytes), data and logs to t.TempDir(). t.Cleanup kills every process and
// stops the executors; when the test failed, it dumps every node's log.
func NewCluster(t *testing.T, opts ...ClusterOption) *Cluster {
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
	sockRoot := shortDir(t, dataRoot)
	ports := freePorts(t, 2*cfg.size)

	c := &Cluster{t: t, Recorder: NewRecorder()}
	for i := 0; i < cfg.size; i++ {
		id := fmt.Sprintf("n%d", i+1)
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
		n.Process = NewProcess(n.ID, axBin, filepath.Join(dataRoot, n.ID+".log"), args...)
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
				t.Logf("----- log of %s (%s) -----\n%s", n.ID, n.logPath, tail(n.Logs(), logDumpMaxBytes))
			}
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

// tail returns the last max bytes of s, from a line start.
func tail(s string, max int) string {
	if len(s) <= max {
		return s
	}
	s = s[len(s)-max:]
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return "(... earlier lines cut ...)\n" + s
}

// shortDir returns dir when socket paths under it fit in sun_path, else a
// new directory under os.TempDir() removed in t.Cleanup.
func shortDir(t *testing.T, dir string) string {
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

// freePorts returns n distinct free TCP ports on 127.0.0.1: it listens on
// port 0 n times, then closes the listeners.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var lns []net.Listener
	var ports []int
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
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
	c.waitReady(c.Running(), readyTimeout)
}

func (c *Cluster) waitReady(nodes []*Node, timeout time.Duration) {
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
		time.Sleep(pollInterval)
	}
	c.t.Logf("cluster of %d ready in %s", len(nodes), time.Since(start).Round(time.Millisecond))
}

// leaderOf asks every given node for /v1/cluster and returns the node that
// says it is the leader when every answering node names it. It returns nil
// when they do not agree (yet).
func (c *Cluster) leaderOf(nodes []*Node) *Node {
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
// it waits up to leaderTimeout for them to agree.
func (c *Cluster) Leader() *Node {
	c.t.Helper()
	deadline := time.Now().Add(leaderTimeout)
	for {
		if l := c.leaderOf(c.Running()); l != nil {
			return l
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no agreed leader among %d running nodes after %s", len(c.Running()), leaderTimeout)
		}
		time.Sleep(pollInterval)
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
	deadline := time.Now().Add(leaderTimeout)
	for {
		if l := c.leaderOf(c.Running()); l != nil && l != old {
			return l
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no new leader (other than %s) after %s", old.ID, leaderTimeout)
		}
		time.Sleep(pollInterval)
	}
}

// ---------------------------------------------------------------------------
// Polling

// waitFor calls cond every interval until it returns nil or timeout passes,
// then fails the test with cond's last error.
func waitFor(t *testing.T, timeout, interval time.Duration, what string, cond func() error) {
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
