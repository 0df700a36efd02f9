package delivery

import (
	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/load"
)

// ExecutorLoad is one executor of this node as the node's load report
// tells the leader (load.ExecutorLoad).
type ExecutorLoad = load.ExecutorLoad

// Capacity lists this node's executors with their limits, load and
// availability, from their slots' limiters and d.down (for the load
// report, and read directly by the leader for its own node).
func (d *Delivery) Capacity() []ExecutorLoad {
	d.mu.Lock()
	if d.self == nil {
		rec, err := d.store.Node(d.cfg.NodeID)
		if err != nil {
			d.mu.Unlock()
			return nil
		}
		d.self = rec
	}
	xs := d.self.Executors
	if len(xs) == 0 {
		d.mu.Unlock()
		return nil
	}
	out := make([]ExecutorLoad, len(xs))
	slots := make([]*slot, len(xs))
	now := d.clock.Now()
	for i := range xs {
		key := xs[i].Name + "|" + xs[i].URL
		out[i] = ExecutorLoad{Name: xs[i].Name, Handlers: xs[i].Handlers}
		slots[i] = d.slots[key]
		// An overloaded executor (there, but not taking connections) is
		// not down: its limit was cut and its attempts wait here for the
		// next probe, so the leader goes on giving it what that limit
		// holds. Only an absent one makes the leader park its runs.
		if st, ok := d.down[key]; ok && !st.overloaded && now.Before(st.until) {
			out[i].DownUntilMs = st.until.UnixMilli()
		}
	}
	d.mu.Unlock()
	for i, s := range slots {
		if s != nil {
			out[i].Limit, out[i].InFlight, out[i].Queued = s.lim.Limit(), s.lim.InFlight(), s.ready.Len()
		}
	}
	return out
}

// observe tells the limiter the backlog: the attempts queued here plus
// the runs of its handlers the leader holds back for want of room here
// (the leader hands a node only what its executors hold, so without them
// the limiter's Little's-law target would size for a queue of
// max_concurrency and ramp up slowly under a large backlog).
func (s *slot) observe(queued int) {
	s.lim.Observe(queued + int(s.parked.Load()))
}

// SetParked records, from the leader's answer to a load report, this
// node's share of each handler's runs parked as executor_busy (handler →
// runs), and gives each executor's slot the sum over its handlers.
func (d *Delivery) SetParked(byHandler map[string]int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.self == nil {
		rec, err := d.store.Node(d.cfg.NodeID)
		if err != nil {
			return
		}
		d.self = rec
	}
	for i := range d.self.Executors {
		x := &d.self.Executors[i]
		s := d.slots[x.Name+"|"+x.URL]
		if s == nil {
			continue
		}
		sum := 0
		for h, n := range byHandler {
			if x.Runs(h) {
				sum += n
			}
		}
		s.parked.Store(int64(sum))
	}
}

// LimitOf returns the current concurrency limit of executor x on this
// node, 0 when nothing was delivered to it yet (or d is nil: no delivery).
func (d *Delivery) LimitOf(x *raftfsm.Executor) int {
	if d == nil {
		return 0
	}
	d.mu.Lock()
	s := d.slots[x.Name+"|"+x.URL]
	d.mu.Unlock()
	if s == nil {
		return 0
	}
	return s.lim.Limit()
}
