package sidecartest_test

import (
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/sidecartest"
)

// shardCalls returns the callbacks of task parent's shards of run 1, by
// shard index.
func shardCalls(c *sidecartest.Cluster, parent string) map[int][]sidecartest.Call {
	out := map[int][]sidecartest.Call{}
	for _, call := range c.AllCalls() {
		if _, run, i, ok := raftfsm.ParseShardID(call.TaskID); ok && run == 1 && call.TaskID == raftfsm.ShardID(parent, 1, i) {
			out[i] = append(out[i], call)
		}
	}
	return out
}

// count 8 on 3 nodes: 8 shard callbacks, indexes 0-7 with total 8, on
// more than one node; the parent is RUNNING with no node while they run,
// then SUCCESS; its run names its 8 shards.
func TestShardsCount(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Nodes: 3})
	release := make(chan struct{})
	c.Respond(func(call sidecartest.Call) sidecartest.Reply {
		if call.ShardTotal > 0 {
			return sidecartest.Reply{Hold: release}
		}
		return sidecartest.Reply{}
	})
	v := submitJSON(t, c, 0, `{"id":"p","handler":"h","payload":{"n":1},"shards":{"count":8}}`)
	if v.Shards == nil || v.Shards.Count != 8 {
		t.Fatalf("submitted view: %+v", v.Shards)
	}
	c.Eventually("8 shard callbacks in flight", func() bool { return len(shardCalls(c, "p")) == 8 })
	p := c.WaitTask(0, "p", "parent waiting for its shards", func(v ipc.Task) bool { return v.Shards != nil && v.Shards.Running == 8 })
	if p.State != "RUNNING" || p.Node != "" || p.Shards.Total != 8 {
		t.Fatalf("parent while its shards run: %+v %+v", p, p.Shards)
	}
	close(release)
	c.WaitState(0, "p", "SUCCESS")
	calls := shardCalls(c, "p")
	nodes := map[string]bool{}
	for i := 0; i < 8; i++ {
		cs := calls[i]
		if len(cs) != 1 || cs[0].ShardIndex != i || cs[0].ShardTotal != 8 || string(cs[0].Payload) != `{"n":1}` || cs[0].Path != axapi.ExecutePath {
			t.Fatalf("shard %d calls: %+v", i, cs)
		}
		nodes[cs[0].Node] = true
	}
	if len(nodes) < 2 {
		t.Errorf("8 shards all on %v: not spread", nodes)
	}
	for _, call := range c.CallsFor("p") {
		t.Errorf("the parent itself was called in count mode: %+v", call)
	}
	var runs []ipc.Run
	c.Eventually("p's run SUCCESS", func() bool {
		runs = runsOf(t, c, 0, "p")
		return len(runs) == 1 && runs[0].State == "SUCCESS"
	})
	if len(runs) != 1 || runs[0].State != "SUCCESS" || runs[0].Shards != 8 || runs[0].ShardsSucceeded != 8 || len(runs[0].ShardIDs) != 8 ||
		runs[0].ShardIDs[7] != raftfsm.ShardID("p", 1, 7) {
		t.Fatalf("parent runs %+v", runs)
	}
	s, err := c.Task(0, raftfsm.ShardID("p", 1, 3))
	if err != nil || s.ShardIndex == nil || *s.ShardIndex != 3 || s.ShardTotal != 8 || s.State != "SUCCESS" {
		t.Fatalf("shard 3 view %+v %v", s, err)
	}
}

// ask mode: the executor first answers a bad count (a failed attempt,
// retried with the backoff), then 5: 5 shards run.
func TestShardsAsk(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Nodes: 3})
	var mu sync.Mutex
	asks := 0
	c.Respond(func(call sidecartest.Call) sidecartest.Reply {
		if call.Path != axapi.ShardsPath {
			return sidecartest.Reply{}
		}
		mu.Lock()
		defer mu.Unlock()
		asks++
		if asks == 1 {
			return sidecartest.Reply{Body: []byte(`{"count":0}`)}
		}
		return sidecartest.Reply{Body: []byte(`{"count":5}`)}
	})
	submitJSON(t, c, 0, `{"id":"a","handler":"h","payload":{"job":"x"},"shards":{"ask":true,"max":10},"backoff":{"initial":"1s","jitter":0}}`)
	c.AdvanceUntil("parent a SUCCESS", 200*time.Millisecond, func() bool {
		v, err := c.Task(0, "a")
		return err == nil && v.State == "SUCCESS"
	})
	ask := c.CallsFor("a")
	sort.Slice(ask, func(i, j int) bool { return ask[i].Attempt < ask[j].Attempt })
	if len(ask) != 2 || ask[0].Path != axapi.ShardsPath || string(ask[0].Payload) != `{"job":"x"}` || ask[0].ShardTotal != 0 || ask[1].Attempt != 2 {
		t.Fatalf("ask calls %+v", ask)
	}
	calls := shardCalls(c, "a")
	var idx []int
	for i, cs := range calls {
		if len(cs) != 1 || cs[0].ShardTotal != 5 {
			t.Fatalf("shard %d: %+v", i, cs)
		}
		idx = append(idx, i)
	}
	sort.Ints(idx)
	if len(idx) != 5 || idx[0] != 0 || idx[4] != 4 {
		t.Fatalf("shard indexes %v", idx)
	}
	var runs []ipc.Run
	c.Eventually("a's run SUCCESS", func() bool {
		runs = runsOf(t, c, 0, "a")
		return len(runs) == 1 && runs[0].State == "SUCCESS"
	})
	if runs[0].Shards != 5 || len(runs[0].Attempts) != 2 || runs[0].Attempts[0].Outcome != "retryable" {
		t.Fatalf("runs %+v", runs)
	}
}

// One shard fails twice and then succeeds: the run is SUCCESS and that
// shard's history has its 3 attempts. Another task's shard fails for
// good: its run is DEAD, after the other shards finished.
func TestShardRetriesAndDead(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Nodes: 3})
	var mu sync.Mutex
	seen := map[string]int{}
	flaky, dead := raftfsm.ShardID("r", 1, 2), raftfsm.ShardID("d", 1, 1)
	c.Respond(func(call sidecartest.Call) sidecartest.Reply {
		mu.Lock()
		defer mu.Unlock()
		seen[call.TaskID]++
		switch {
		case call.TaskID == flaky && seen[call.TaskID] <= 2:
			return sidecartest.Reply{Status: 500}
		case call.TaskID == dead:
			return sidecartest.Reply{Status: 500}
		}
		return sidecartest.Reply{}
	})
	submitJSON(t, c, 0, `{"id":"r","handler":"h","shards":{"count":4},"max_attempts":3,"backoff":{"initial":"1s","jitter":0}}`)
	submitJSON(t, c, 0, `{"id":"d","handler":"h","shards":{"count":3},"max_attempts":2,"backoff":{"initial":"1s","jitter":0}}`)
	c.AdvanceUntil("both parents ended", 200*time.Millisecond, func() bool {
		r, err1 := c.Task(0, "r")
		d, err2 := c.Task(0, "d")
		return err1 == nil && err2 == nil && r.State == "SUCCESS" && d.State == "DEAD"
	})
	// Node 0 may read the tasks from the leader while it catches up:
	// its own history follows.
	var runs []ipc.Run
	c.Eventually("the flaky shard's run on record", func() bool {
		runs = runsOf(t, c, 0, flaky)
		return len(runs) == 1 && runs[0].State == "SUCCESS"
	})
	if len(runs[0].Attempts) != 3 || runs[0].Attempts[0].Outcome != "retryable" || runs[0].Attempts[2].Outcome != "success" {
		t.Fatalf("flaky shard's runs %+v", runs)
	}
	d, _ := c.Task(0, "d")
	if d.Shards.Succeeded != 2 || d.Shards.Failed != 1 || d.LastError == "" {
		t.Fatalf("dead parent %+v %+v", d, d.Shards)
	}
	for i := 0; i < 3; i++ {
		s, _ := c.Task(0, raftfsm.ShardID("d", 1, i))
		if want := map[bool]string{true: "DEAD", false: "SUCCESS"}[i == 1]; s.State != want {
			t.Fatalf("shard %d of d: %s, want %s", i, s.State, want)
		}
	}
	c.Eventually("d's run DEAD with 1 failed shard", func() bool {
		runs := runsOf(t, c, 0, "d")
		return len(runs) == 1 && runs[0].State == "DEAD" && runs[0].ShardsFailed == 1
	})
}

// Cancelling the parent cancels its shards that have not ended.
func TestShardsCancel(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Nodes: 1})
	release := make(chan struct{})
	defer close(release)
	c.Respond(func(call sidecartest.Call) sidecartest.Reply { return sidecartest.Reply{Hold: release} })
	submitJSON(t, c, 0, `{"id":"x","handler":"h","shards":{"count":3}}`)
	c.Eventually("3 shards called", func() bool { return len(shardCalls(c, "x")) == 3 })
	if resp := c.HTTP(0, "DELETE", "/v1/tasks/x", nil); resp.Status != 200 {
		t.Fatalf("cancel: %d %s", resp.Status, resp.Body)
	}
	for i := 0; i < 3; i++ {
		c.WaitState(0, raftfsm.ShardID("x", 1, i), "CANCELLED")
	}
	c.WaitState(0, "x", "CANCELLED")
}
