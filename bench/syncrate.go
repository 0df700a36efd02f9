package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	ax "github.com/axsched/ax/clients/go"
)

// syncBlock is the size of one synced write of the disk probe.
const syncBlock = 4096

// SyncRate is the machine's synced-write rate, measured by the bench: the
// file system's ceiling for one writer that waits for each write to be
// durable (what `dd bs=4k oflag=dsync` measures).
type SyncRate struct {
	// Dir is the directory the probe file was written in (removed after).
	Dir string `json:"dir"`
	// Writes is the number of 4 KiB write+fdatasync pairs done.
	Writes int `json:"writes"`
	// Elapsed is how long they took.
	Elapsed Millis `json:"elapsed_ms"`
	// PerSecond is Writes ÷ Elapsed.
	PerSecond float64 `json:"writes_per_s"`
	// BlockBytes is the size of each write (4096).
	BlockBytes int `json:"block_bytes"`
}

// measureSyncRate writes 4 KiB blocks to a new file in dir, each followed
// by f.Sync (fdatasync-like: the data and the size reach the disk), for
// about d, and returns the rate. The file is removed. It stops early, with
// what it measured, when ctx is done.
func measureSyncRate(ctx context.Context, dir string, d time.Duration) (*SyncRate, error) {
	f, err := os.CreateTemp(dir, "axb-sync-*")
	if err != nil {
		return nil, fmt.Errorf("disk sync probe: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	block := bytes.Repeat([]byte{0xa5}, syncBlock)
	start := time.Now()
	n := 0
	for time.Since(start) < d && ctx.Err() == nil {
		if _, err := f.Write(block); err != nil {
			return nil, fmt.Errorf("disk sync probe: %w", err)
		}
		if err := f.Sync(); err != nil {
			return nil, fmt.Errorf("disk sync probe: %w", err)
		}
		n++
	}
	el := time.Since(start)
	return &SyncRate{Dir: dir, Writes: n, Elapsed: Millis(el), PerSecond: rate(n, el), BlockBytes: syncBlock}, nil
}

// raftCounters are the node metrics the throughput report derives commands
// per entry and fsyncs per entry from, summed over the nodes read.
type raftCounters struct {
	// entries and commands proposed as leader (ax_raft_entry_commands
	// histogram: _count and _sum).
	entries, commands float64
	// leaderLogWrites is ax_raft_log_writes_total of the nodes that lead
	// (ax_raft_leader 1): one WAL append and fsync each.
	leaderLogWrites float64
	// logWrites is ax_raft_log_writes_total of every node.
	logWrites float64
	// cpuSeconds is process_cpu_seconds_total (the nodes' user + system
	// CPU, in seconds) of every node.
	cpuSeconds float64
}

// sub returns c - o.
func (c raftCounters) sub(o raftCounters) raftCounters {
	return raftCounters{entries: c.entries - o.entries, commands: c.commands - o.commands,
		leaderLogWrites: c.leaderLogWrites - o.leaderLogWrites, logWrites: c.logWrites - o.logWrites,
		cpuSeconds: c.cpuSeconds - o.cpuSeconds}
}

// parseRaftCounters reads the counters from one node's Prometheus text
// exposition. ok is false when the node exposes neither the entry
// histogram nor the log write counter (an older node).
func parseRaftCounters(text []byte) (c raftCounters, ok bool) {
	var leader, writes float64
	var seen int
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, val, found := strings.Cut(line, " ")
		if !found || strings.ContainsRune(name, '{') {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(val)[0], 64)
		if err != nil {
			continue
		}
		switch name {
		case "ax_raft_entry_commands_count":
			c.entries = v
			seen++
		case "ax_raft_entry_commands_sum":
			c.commands = v
		case "ax_raft_log_writes_total":
			writes = v
			seen++
		case "ax_raft_leader":
			leader = v
		case "process_cpu_seconds_total":
			c.cpuSeconds = v
		}
	}
	c.logWrites = writes
	if leader == 1 {
		c.leaderLogWrites = writes
	}
	return c, seen == 2
}

// readRaftCounters reads GET /metrics of every client's node and sums
// their counters. It returns an error when a node cannot be read or does
// not expose the counters.
func readRaftCounters(ctx context.Context, clients []*ax.Client) (raftCounters, error) {
	var sum raftCounters
	for _, c := range clients {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := c.Call(cctx, "GET", "/metrics", nil)
		cancel()
		if err != nil {
			return sum, fmt.Errorf("GET /metrics on %s: %w", c.Socket(), err)
		}
		rc, ok := parseRaftCounters(r.Body)
		if !ok {
			return sum, fmt.Errorf("GET /metrics on %s: no ax_raft_entry_commands or ax_raft_log_writes_total", c.Socket())
		}
		sum.entries += rc.entries
		sum.commands += rc.commands
		sum.leaderLogWrites += rc.leaderLogWrites
		sum.logWrites += rc.logWrites
		sum.cpuSeconds += rc.cpuSeconds
	}
	return sum, nil
}

// nodesReached returns how many distinct nodes clients reach and how
// many members the cluster has (the most any of them lists).
func nodesReached(ctx context.Context, clients []*ax.Client) (reached, members int, err error) {
	ids := map[string]bool{}
	for _, c := range clients {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := c.Cluster(cctx)
		cancel()
		if err != nil {
			return 0, 0, fmt.Errorf("GET /v1/cluster on %s: %w", c.Socket(), err)
		}
		ids[info.NodeID] = true
		members = max(members, len(info.Members))
	}
	return len(ids), members, nil
}
