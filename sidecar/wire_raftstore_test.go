package sidecar

import (
	"math"
	"testing"
	"time"
)

// How a node bounds its entries in flight and gathers, by how it was
// started: a node alone keeps one entry of submits in flight and gathers
// (its fires and completions unbounded), or bounds nothing with the
// gather off; a node of a cluster keeps one entry of any kind in flight
// and gathers. Alone, an entry must hold four submits to plan a gather
// (ProposerConfig.GatherMinSubmits), in a cluster two.
func TestGroupCommitBoundsByHowTheNodeStarted(t *testing.T) {
	for _, tc := range []struct {
		name        string
		expect      int
		join        []string
		gather      time.Duration
		inflight    int
		submitsOnly bool
		minSubmits  int
	}{
		{"alone", 1, nil, 2 * time.Millisecond, 1, true, 4},
		{"alone, gather off", 1, nil, 0, math.MaxInt32, false, 2},
		{"cluster", 3, []string{"a:1", "b:1"}, 2 * time.Millisecond, 1, false, 2},
		{"joining", 1, []string{"a:1"}, 2 * time.Millisecond, 1, false, 2},
	} {
		n := &Node{cfg: Config{BootstrapExpect: tc.expect, Join: tc.join, GatherWait: tc.gather}}
		c := newGroupCommit(n).Config()
		if c.MaxInflightEntries != tc.inflight || c.BoundSubmitsOnly != tc.submitsOnly || c.GatherWait != tc.gather || c.GatherMinSubmits != tc.minSubmits {
			t.Errorf("%s: entries in flight %d, submits only %v, gather %v from %d submits; want %d, %v, %v, %d", tc.name,
				c.MaxInflightEntries, c.BoundSubmitsOnly, c.GatherWait, c.GatherMinSubmits, tc.inflight, tc.submitsOnly, tc.gather, tc.minSubmits)
		}
	}
}
