package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	ax "github.com/axsched/ax/clients/go"
	"github.com/axsched/ax/clients/go/axapi"
	"github.com/axsched/ax/e2e/harness"
)

// shardsView reads the "shards" of task id's view on n.
func shardsView(t *testing.T, n *harness.Node, id string) (state string, sh axapi.ShardsView, err error) {
	t.Helper()
	resp, err := n.Client.Do(harness.ReqCtx(t), "GET", axapi.TaskPath(id), nil)
	if err != nil {
		return "", sh, err
	}
	var v struct {
		State  string            `json:"state"`
		Shards *axapi.ShardsView `json:"shards"`
	}
	if err := json.Unmarshal(resp.Body, &v); err != nil || v.Shards == nil {
		return "", sh, fmt.Errorf("view %s: %v", resp.Body, err)
	}
	return v.State, *v.Shards, nil
}

// TestShards_CountAndAsk, on 3 nodes with the real binary and executor
// (e2e.shards: shard index 1 fails its first two attempts; the count
// question is answered 5):
//   - "shards": {"count": 8}: callbacks of 8 shards, indexes 0-7 with
//     total 8, on more than one node; the run SUCCESS though shard 1
//     failed twice, with its 3 attempts in that shard's history, and the
//     parent's run naming its 8 shards;
//   - "shards": {"ask": true, "max": 10}: one POST /ax/v1/shards with the
//     payload, then 5 shards, SUCCESS.
func TestShards_CountAndAsk(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	c := harness.NewCluster(t, harness.WithSize(3))
	c.WaitReady()
	leader := c.Leader()
	submit := func(body string) {
		t.Helper()
		if resp, err := leader.Client.Submit(harness.ReqCtx(t), []byte(body)); err != nil || resp.Status != 201 {
			t.Fatalf("submit %s: %v %v", body, resp, err)
		}
	}
	submit(fmt.Sprintf(`{"id":"sharded","handler":%q,"payload":{"job":1},"shards":{"count":8},"max_attempts":3,"backoff":{"initial":"200ms","jitter":0}}`, harness.HandlerShards))
	submit(fmt.Sprintf(`{"id":"asked","handler":%q,"payload":{"job":2},"shards":{"ask":true,"max":10}}`, harness.HandlerShards))
	for _, w := range []struct {
		id    string
		total int
	}{{"sharded", 8}, {"asked", harness.ShardsAnswer}} {
		harness.WaitFor(t, 60*time.Second, 50*time.Millisecond, w.id+" SUCCESS", func() error {
			state, sh, err := shardsView(t, leader, w.id)
			if err != nil {
				return err
			}
			if state != "SUCCESS" || sh.Total != w.total || sh.Succeeded != w.total {
				return fmt.Errorf("%s: %s %+v", w.id, state, sh)
			}
			return nil
		})
	}

	rec := c.Recorder
	nodes := map[string]int{}
	for i := 0; i < 8; i++ {
		id := axapi.ShardID("sharded", 1, i)
		var ok []harness.Call
		for _, call := range rec.Calls(id) {
			if call.Header.Get("Ax-Shard-Index") != strconv.Itoa(i) || call.Header.Get("Ax-Shard-Total") != "8" || string(call.Body) != `{"job":1}` {
				t.Errorf("shard %d: callback with index %q total %q body %s", i, call.Header.Get("Ax-Shard-Index"), call.Header.Get("Ax-Shard-Total"), call.Body)
			}
			if !call.Cancelled {
				ok = append(ok, call)
			}
		}
		want := 1
		if i == 1 {
			want = 3 // two 500s, then 200
		}
		if len(ok) != want {
			t.Errorf("shard %d: %d callbacks answered, want %d", i, len(ok), want)
		}
		for _, call := range ok {
			nodes[call.Node]++
		}
	}
	if len(nodes) < 2 {
		t.Errorf("8 shards' callbacks all on %v: not spread over the nodes", nodes)
	}
	t.Logf("shard callbacks by node: %v", nodes)
	if calls := rec.Calls("sharded"); len(calls) != 0 {
		t.Errorf("count mode called the parent itself: %d calls", len(calls))
	}
	harness.WaitFor(t, 30*time.Second, 50*time.Millisecond, "histories on the leader", func() error {
		runs, err := runsOn(t, leader, axapi.ShardID("sharded", 1, 1))
		if err != nil {
			return err
		}
		if len(runs) != 1 || runs[0].State != "SUCCESS" || len(runs[0].Attempts) != 3 ||
			runs[0].Attempts[0].HTTPStatus != 500 || runs[0].Attempts[1].HTTPStatus != 500 || runs[0].Attempts[2].HTTPStatus != 200 {
			return fmt.Errorf("shard 1's runs: %+v", runs)
		}
		runs, err = runsOn(t, leader, "sharded")
		if err != nil {
			return err
		}
		if len(runs) != 1 || runs[0].State != "SUCCESS" || runs[0].Shards != 8 || len(runs[0].ShardIDs) != 8 || runs[0].ShardsSucceeded != 8 {
			return fmt.Errorf("parent's runs: %+v", runs)
		}
		return nil
	})

	asks := rec.Calls("asked")
	if len(asks) != 1 || asks[0].Path != axapi.ShardsPath || string(asks[0].Body) != `{"job":2}` || asks[0].Header.Get("Ax-Shard-Total") != "" {
		t.Fatalf("ask calls: %+v", asks)
	}
	for i := 0; i < harness.ShardsAnswer; i++ {
		calls := rec.Calls(axapi.ShardID("asked", 1, i))
		if len(calls) == 0 || calls[0].Header.Get("Ax-Shard-Total") != strconv.Itoa(harness.ShardsAnswer) {
			t.Errorf("asked shard %d: %+v", i, calls)
		}
	}
	if calls := rec.Calls(axapi.ShardID("asked", 1, harness.ShardsAnswer)); len(calls) != 0 {
		t.Errorf("a sixth shard was called")
	}
}

// TestShards_GoExecutorAsk: the Go client end to end on 3 nodes without
// executor flags: one ax.Executor (WithShardCount answering 3) registered
// with every node, a task submitted with ax.Shards{Ask: true, Max: 10}:
// the executor is asked once, then called for shards 0, 1 and 2 of 3
// (Delivery.ShardIndex, ShardTotal), and the task ends SUCCESS.
func TestShards_GoExecutorAsk(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	c := harness.NewCluster(t, harness.WithExecutorsOn())
	c.WaitReady()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	var mu sync.Mutex
	asks, got := 0, map[int]int{} // shard index -> total seen
	ex := ax.NewExecutor()
	ex.HandleFunc("gosh.reindex", func(ctx context.Context, d *ax.Delivery) error {
		mu.Lock()
		got[d.ShardIndex] = d.ShardTotal
		mu.Unlock()
		return nil
	}, ax.WithShardCount(func(ctx context.Context, d *ax.Delivery) (int, error) {
		mu.Lock()
		asks++
		mu.Unlock()
		return 3, nil
	}))
	sock := filepath.Join(filepath.Dir(c.Nodes[0].Socket), "gosh.sock")
	go ex.ListenAndServeUnix(sock)
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		ex.Shutdown(sctx)
	})
	for _, n := range c.Nodes {
		cl := ax.New(ax.Config{SocketPath: n.Socket})
		defer cl.CloseIdleConnections()
		reg := ax.ExecutorRegistration{Name: "gosh", Handlers: []string{"gosh.*"}, URL: "unix://" + sock}
		harness.WaitFor(t, 20*time.Second, 50*time.Millisecond, "register with "+n.ID, func() error { return cl.RegisterExecutor(ctx, reg) })
	}
	cl := ax.New(ax.Config{SocketPath: c.Leader().Socket})
	defer cl.CloseIdleConnections()
	sub, err := cl.Submit(ctx, ax.SubmitRequest{ID: "gosh-1", Handler: "gosh.reindex", Payload: map[string]int{"table": 7}, Shards: &ax.Shards{Ask: true, Max: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if sub.Shards == nil || !sub.Shards.Ask || sub.Shards.Max != 10 {
		t.Fatalf("submitted task's shards: %+v", sub.Shards)
	}
	harness.WaitFor(t, 45*time.Second, 50*time.Millisecond, "gosh-1 SUCCESS", func() error {
		tk, err := cl.Get(ctx, "gosh-1")
		if err != nil {
			return err
		}
		if tk.State != ax.StateSuccess {
			return fmt.Errorf("state %s, shards %+v", tk.State, tk.Shards)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if asks != 1 || len(got) != 3 || got[0] != 3 || got[1] != 3 || got[2] != 3 {
		t.Fatalf("asks %d, shards seen %v", asks, got)
	}
	tk, err := cl.Get(ctx, axapi.ShardID("gosh-1", 1, 2))
	if err != nil || tk.ShardIndex != 2 || tk.ShardTotal != 3 {
		t.Fatalf("shard 2's view %+v %v", tk, err)
	}
}
