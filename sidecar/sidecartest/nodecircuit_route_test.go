package sidecartest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
	"github.com/axsched/ax/sidecar"
	"github.com/axsched/ax/sidecar/sidecartest"
)

// Three nodes, round-robin routing, and the executor of one follower
// takes every callback and never answers while the other two answer at
// once. One time-out on it per round, between the other nodes'
// successes: its own circuit opens on its fifth, the leader's never
// does (each success resets its count). From then on the leader routes
// the handler's runs to the other two nodes only (the node's load report
// carries its open circuit): every new run succeeds there at once, none
// is called on or handed back by the bad node, long before its 30 s
// cool-down ends. Before, a third of the runs went on going to the bad
// node, each handed back due at the end of its cool-down.
func TestNodeCircuitRoutesRunsToTheOtherNodes(t *testing.T) {
	const coolDown = 30 * time.Second
	c := sidecartest.New(t, sidecartest.Options{Nodes: 3, Config: func(_ int, cfg *sidecar.Config) {
		cfg.BreakerFailures, cfg.BreakerCoolDown = 5, coolDown
		cfg.Routing = "round_robin"
	}})
	l := c.Leader()
	bad := (l + 1) % c.Nodes()
	never := make(chan struct{})
	ex := c.Executor(bad)
	ex.Respond(func(sidecartest.Call) sidecartest.Reply { return sidecartest.Reply{Hold: never} })
	const handBackKey = `ax_attempts_total{handler="h",outcome="circuit_open"}`
	handedBack := func() float64 { return c.Metrics(bad)[handBackKey] }
	n := 0
	submit := func(k int) []string {
		var ids []string
		for range k {
			s := sidecartest.Spec(fmt.Sprintf("rt-%03d", n), "h")
			s.Timeout, s.MaxAttempts = time.Second, 1
			c.Submit(l, s)
			ids = append(ids, s.ID)
			n++
		}
		return ids
	}
	state := func(id string) (string, string) {
		tk, err := c.Task(l, id)
		if err != nil {
			t.Fatalf("task %s: %v", id, err)
		}
		return tk.State, tk.Node
	}
	count := func(ids []string, st string) (k int) {
		for _, id := range ids {
			if s, _ := state(id); s == st {
				k++
			}
		}
		return k
	}

	// Five rounds of three runs, one per node: two successes, and one
	// call on the bad node, cut at its time-out.
	for round := 1; round <= 5; round++ {
		ids := submit(3)
		c.Eventually(fmt.Sprintf("round %d: two successes and the bad node's call in flight", round), func() bool {
			return count(ids, axapi.StateSuccess) == 2 && ex.InFlight() == 1
		})
		c.Advance(time.Second)
		c.Eventually(fmt.Sprintf("round %d: the bad node's call timed out", round), func() bool {
			return count(ids, axapi.StateDead) == 1 && ex.InFlight() == 0
		})
	}
	opened := c.Now()
	calls := len(ex.Calls())
	if calls != 5 {
		t.Fatalf("%d calls on the bad node, want 5 (one per round)", calls)
	}

	// The leader learns of the circuit with the node's next load report
	// (every 300 ms): until then a run routed there is handed back. A
	// batch of three runs (round robin: one per node while the bad node
	// is a candidate) that all succeed shows it is no longer one.
	clean := false
	for batch := 0; batch < 20 && !clean; batch++ {
		c.Advance(150 * time.Millisecond)
		before := handedBack()
		ids := submit(3)
		c.Eventually(fmt.Sprintf("batch %d: each run succeeded or was handed back", batch), func() bool {
			return float64(count(ids, axapi.StateSuccess))+handedBack()-before == 3
		})
		clean = handedBack() == before
	}
	if !clean {
		t.Fatalf("every batch of three had a run handed back by the bad node (%v in all): the leader kept routing to the node whose circuit is open", handedBack())
	}

	// From now on every run goes to the other two nodes and succeeds
	// there, without the cool-down passing.
	back := handedBack()
	ids := submit(30)
	c.Eventually("30 more runs succeeded", func() bool { return count(ids, axapi.StateSuccess) == 30 })
	for _, id := range ids {
		if _, node := state(id); node == c.Node(bad).ID() {
			t.Fatalf("%s ran on the bad node %s", id, node)
		}
	}
	if got := len(ex.Calls()); got != calls {
		t.Fatalf("%d calls on the bad node after its circuit opened, want none", got-calls)
	}
	if got := handedBack(); got != back {
		t.Fatalf("%v runs handed back by the bad node, want none", got-back)
	}
	if waited := c.Now().Sub(opened); waited >= coolDown {
		t.Fatalf("the runs took %v of fake time after the circuit opened, want less than the %v cool-down", waited, coolDown)
	}
	m := c.Metrics(l)
	if m[`ax_circuit_open{handler="h",state="open"}`] != 0 || m[`ax_circuit_open{handler="h",state="half-open"}`] != 0 {
		t.Fatalf("the leader's circuit opened (%v): the test wants it closed", m)
	}
}
