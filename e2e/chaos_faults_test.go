package e2e

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/axsched/ax/e2e/harness"
)

// The faults of the chaos test: every chaosKillEvery, SIGKILL one node
// (random, or the leader, or a follower: AX_CHAOS_TARGET), note what was
// in flight on it, and start it again chaosRestartAfter later.

// chaosKill is one SIGKILL of the chaos loop.
type chaosKill struct {
	n         int
	node      string
	wasLeader bool
	at        time.Time
	restarted time.Time
	ready     time.Duration // restart to /readyz 200; 0 if not seen
	// running are the tasks RUNNING on the victim (their attempt names
	// it) between the kill and the restart, read from the surviving
	// leader's store right after the kill and again just before the
	// restart (the leader routes attempts to a dead node until it misses
	// its load reports): the attempts in flight on the killed node.
	running       map[string]bool
	runningAtKill int // how many of running the first read (right after the kill) saw
	runningErr    string
	// execInFlight: callbacks the victim's executor had received and not
	// answered at the kill; execRecent: answered within chaosRecentWindow
	// before the kill (their outcome may not have been committed).
	execInFlight int
	execRecent   int
}

// chaosFaults is the kill loop. run owns every field but ready, which the
// readiness watchers set (under readyMu) until waitRestarted.
type chaosFaults struct {
	c         *harness.Cluster
	clients   map[string]*harness.Client
	target    string     // random, leader or follower
	rng       *rand.Rand // the victim choice
	loadStart time.Time  // the kills' times count from here

	kills   []*chaosKill
	readyWG sync.WaitGroup
	readyMu sync.Mutex
}

// run kills a node every chaosKillEvery after loadStart, while the next
// kill falls before end, then sleeps until end.
func (f *chaosFaults) run(t *testing.T, end time.Time) {
	t.Helper()
	for k := 1; ; k++ {
		at := f.loadStart.Add(time.Duration(k) * chaosKillEvery)
		if !at.Before(end) {
			break
		}
		time.Sleep(time.Until(at))
		f.kill(t, k)
	}
	time.Sleep(time.Until(end))
}

// victim picks the node of the next kill and tells whether it leads.
func (f *chaosFaults) victim() (victim *harness.Node, wasLeader bool) {
	c := f.c
	victim = c.Nodes[f.rng.IntN(len(c.Nodes))]
	leader := c.LeaderOf(c.Running())
	switch f.target {
	case "leader":
		if leader != nil {
			victim = leader
		}
	case "follower":
		for victim == leader {
			victim = c.Nodes[f.rng.IntN(len(c.Nodes))]
		}
	}
	return victim, leader == victim
}

// kill is kill number k: SIGKILL a victim, count what was in flight on it,
// restart it after chaosRestartAfter and watch it become ready.
func (f *chaosFaults) kill(t *testing.T, k int) {
	t.Helper()
	c, clients := f.c, f.clients
	victim, wasLeader := f.victim()
	kill := &chaosKill{n: k, node: victim.ID, wasLeader: wasLeader}
	kill.at = time.Now()
	if err := victim.Kill(); err != nil {
		t.Errorf("kill %d: SIGKILL %s: %v", k, victim.ID, err)
	}
	for _, call := range c.Recorder.All() {
		if call.Node != victim.ID || call.At.After(kill.at) {
			continue
		}
		switch {
		case call.Ended.IsZero() || call.Ended.After(kill.at):
			kill.execInFlight++
		case call.Ended.After(kill.at.Add(-chaosRecentWindow)):
			kill.execRecent++
		}
	}
	// The attempts in flight on the victim: RUNNING tasks that name it,
	// read through the leader of the survivors once they agree on one
	// (their store holds everything the old leader committed); read
	// again just before the restart, since the leader keeps routing
	// attempts to a dead node until it misses its load reports.
	var live []*harness.Node
	for _, n := range c.Nodes {
		if n != victim {
			live = append(live, n)
		}
	}
	restartAt := kill.at.Add(chaosRestartAfter)
	kill.running = map[string]bool{}
	readRunning := func(deadline time.Time) {
		l := harness.AgreedLeader(c, live, time.Until(deadline)-200*time.Millisecond)
		if l == nil {
			kill.runningErr = "the survivors agreed on no leader"
			return
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		running, err := harness.ListTasks(ctx, clients[l.ID], "RUNNING")
		cancel()
		if err != nil {
			kill.runningErr = err.Error()
			return
		}
		for _, task := range running {
			if task.Node == victim.ID {
				kill.running[task.ID] = true
			}
		}
	}
	readRunning(restartAt.Add(-chaosRestartAfter / 2))
	kill.runningAtKill = len(kill.running)
	time.Sleep(time.Until(restartAt.Add(-chaosRestartAfter / 4)))
	readRunning(restartAt)
	time.Sleep(time.Until(restartAt))
	if err := victim.Start(); err != nil {
		t.Errorf("kill %d: restart %s: %v", k, victim.ID, err)
	}
	kill.restarted = time.Now()
	f.kills = append(f.kills, kill)
	t.Logf("kill %d at +%s: %s (leader: %v); restarted after %s; running on it %d at the kill, %d until the restart (err %q), executor in flight %d, answered <1s before %d",
		k, kill.at.Sub(f.loadStart).Round(time.Millisecond), victim.ID, kill.wasLeader,
		kill.restarted.Sub(kill.at).Round(time.Millisecond), kill.runningAtKill, len(kill.running), kill.runningErr, kill.execInFlight, kill.execRecent)
	f.readyWG.Add(1)
	go func(kill *chaosKill, cl *harness.Client) {
		defer f.readyWG.Done()
		d := harness.WaitReadyWithin(cl, chaosKillEvery+chaosRejoinTimeout)
		f.readyMu.Lock()
		kill.ready = d
		f.readyMu.Unlock()
	}(kill, clients[victim.ID])
}

// waitRestarted waits for the readiness watchers of every kill; after it,
// every kill's ready is set.
func (f *chaosFaults) waitRestarted() { f.readyWG.Wait() }
