package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	ax "github.com/axsched/ax/clients/go"
	"github.com/axsched/ax/internal/freeport"
)

// Timeouts of the clusters the bench starts. Each carries its unit.
const (
	readyTimeout   = 60 * time.Second
	stopTimeout    = 15 * time.Second
	readyPoll      = 50 * time.Millisecond
	logTailBytes   = 4 << 10
	nodeLogDefault = "warn"
)

// clusterConfig describes the nodes to start.
type clusterConfig struct {
	Binary      string   // the ax binary; nodes run `Binary sidecar ...`
	Nodes       int      // 1 or more
	Dir         string   // sockets, data and logs go here
	ExecutorURL string   // every node gets --executor '*=ExecutorURL' (empty: none)
	Args        []string // extra arguments for every node
	LogLevel    string   // --log-level of the nodes
}

// node is one `ax sidecar` child process.
type node struct {
	ID, Socket, DataDir, RaftAddr, PeerAddr, LogPath string

	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// cluster is a set of nodes the bench started; stop them with stop.
type cluster struct {
	cfg   clusterConfig
	nodes []*node
}

// startCluster starts cfg.Nodes sidecars that form one Raft group on
// 127.0.0.1 with free ports, and waits until every one is ready.
func startCluster(ctx context.Context, cfg clusterConfig) (*cluster, error) {
	if cfg.LogLevel == "" {
		cfg.LogLevel = nodeLogDefault
	}
	ports, err := freePorts(2 * cfg.Nodes)
	if err != nil {
		return nil, err
	}
	c := &cluster{cfg: cfg}
	for i := 0; i < cfg.Nodes; i++ {
		id := fmt.Sprintf("n%d", i+1)
		c.nodes = append(c.nodes, &node{
			ID:       id,
			Socket:   filepath.Join(cfg.Dir, id+".sock"),
			DataDir:  filepath.Join(cfg.Dir, id),
			LogPath:  filepath.Join(cfg.Dir, id+".log"),
			RaftAddr: fmt.Sprintf("127.0.0.1:%d", ports[2*i]),
			PeerAddr: fmt.Sprintf("127.0.0.1:%d", ports[2*i+1]),
		})
	}
	for _, n := range c.nodes {
		args := []string{"sidecar",
			"--node-id", n.ID, "--data-dir", n.DataDir, "--socket", n.Socket,
			"--raft-addr", n.RaftAddr, "--peer-addr", n.PeerAddr,
			"--bootstrap-expect", fmt.Sprint(cfg.Nodes),
			"--log-format", "json", "--log-level", cfg.LogLevel,
		}
		if cfg.Nodes > 1 {
			var join []string
			for _, o := range c.nodes {
				if o != n {
					join = append(join, o.PeerAddr)
				}
			}
			args = append(args, "--join", strings.Join(join, ","))
		}
		if cfg.ExecutorURL != "" {
			args = append(args, "--executor", "*="+cfg.ExecutorURL)
		}
		args = append(args, cfg.Args...)
		if err := n.start(cfg.Binary, args); err != nil {
			c.stop()
			return nil, err
		}
	}
	if err := c.waitReady(ctx); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

func (n *node) start(bin string, args []string) error {
	f, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start node %s (%s sidecar): %w", n.ID, bin, err)
	}
	n.cmd, n.done = cmd, make(chan struct{})
	go func() {
		n.err = cmd.Wait()
		f.Close()
		close(n.done)
	}()
	return nil
}

func (n *node) exited() bool {
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}

// lastLog returns the node's log path and its last line, shortened, for
// one-line errors.
func (n *node) lastLog() string {
	b, err := os.ReadFile(n.LogPath)
	if err != nil {
		return "log: " + n.LogPath
	}
	if len(b) > logTailBytes {
		b = b[len(b)-logTailBytes:]
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if len(last) > 300 {
		last = last[:300] + "..."
	}
	if last == "" {
		return "log: " + n.LogPath + " (empty)"
	}
	return fmt.Sprintf("log: %s, last line: %s", n.LogPath, last)
}

// waitReady polls GET /readyz on every node.
func (c *cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for _, n := range c.nodes {
		cl := ax.New(ax.Config{SocketPath: n.Socket, Timeout: time.Second})
		for {
			if n.exited() {
				return fmt.Errorf("node %s exited while starting (%v); %s", n.ID, n.err, n.lastLog())
			}
			err := cl.Ready(ctx)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				if errors.Is(ctx.Err(), context.DeadlineExceeded) {
					return fmt.Errorf("node %s not ready after %s: %v; %s", n.ID, readyTimeout, err, n.lastLog())
				}
				return ctx.Err()
			}
			time.Sleep(readyPoll)
		}
		cl.CloseIdleConnections()
	}
	return nil
}

// sockets returns the nodes' API sockets.
func (c *cluster) sockets() []string {
	var s []string
	for _, n := range c.nodes {
		s = append(s, n.Socket)
	}
	return s
}

// checkAlive returns an error naming a node that exited.
func (c *cluster) checkAlive() error {
	for _, n := range c.nodes {
		if n.exited() {
			return fmt.Errorf("node %s exited during the run (%v); %s", n.ID, n.err, n.lastLog())
		}
	}
	return nil
}

// stop sends SIGTERM to every node and waits; a node still running after
// stopTimeout is killed.
func (c *cluster) stop() {
	for _, n := range c.nodes {
		if n.cmd != nil && !n.exited() {
			_ = n.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(stopTimeout)
	for _, n := range c.nodes {
		if n.cmd == nil {
			continue
		}
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-n.done:
		case <-t.C:
			_ = n.cmd.Process.Kill()
			<-n.done
		}
		t.Stop()
	}
}

// freePorts returns n distinct free TCP ports on 127.0.0.1, below the
// kernel's ephemeral range (see internal/freeport).
func freePorts(n int) ([]int, error) {
	ports, err := freeport.Ports(n)
	if err != nil {
		return nil, fmt.Errorf("pick a free port: %w", err)
	}
	return ports, nil
}
