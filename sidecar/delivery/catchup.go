package delivery

import (
	"context"
	"errors"
	"time"

	"github.com/axsched/ax/raftfsm"
)

// catchUpTarget reports whether an attempt whose state is as of Raft index
// index (0: read from an installed snapshot, as of the applied index)
// starts while this node is behind the leader, and the index it must
// then have applied before its callback (0: the leader's next known
// commit index). A node that has not heard the leader's commit index yet
// (it just started) counts as behind. The leader itself never waits.
func (d *Delivery) catchUpTarget(index uint64) (behind bool, to uint64) {
	if d.catchUp == nil || d.catchUp.IsLeader() {
		return false, 0
	}
	if index == 0 {
		index = d.catchUp.AppliedIndex()
	}
	lc, _ := d.catchUp.LeaderCommit()
	if lc != 0 && index >= lc {
		return false, 0
	}
	return true, lc
}

// stillHere holds attempt r of task t, whose Fire applied while this node
// was behind the leader, until the node has applied the leader's commit
// index known then (or, when none was known, the first one it learns),
// and reports whether the task is still running here in that attempt. A
// node that replays the log (restarted, or back under its old id with an
// empty data dir) applies the Fires of attempts an earlier life of it ran
// and reported; the Complete that ended them follows in the log, and
// their callback would call the executor a second time. An attempt whose
// lease ends first is not delivered either: the leader's lease timer
// retries it. ctx ending (an abort) or the node draining (handed back)
// also ends the wait with false.
func (d *Delivery) stillHere(ctx context.Context, t *raftfsm.Task, r *attemptRun) bool {
	var leaseEnd <-chan time.Time
	if t.LeaseMs > 0 {
		timer := d.clock.NewTimer(time.UnixMilli(t.LeaseMs).Sub(d.clock.Now()))
		defer timer.Stop()
		leaseEnd = timer.C()
	}
	wait := r.waitCtx(ctx)
	target := r.catchUpTo
	for {
		lc, lcCh := d.catchUp.LeaderCommit()
		if target == 0 {
			target = lc
		}
		appliedCh := d.catchUp.AppliedCh()
		if target != 0 && d.catchUp.AppliedIndex() >= target {
			break
		}
		select {
		case <-lcCh:
		case <-appliedCh:
		case <-leaseEnd:
			d.skipReplayed(t, "its lease ended before this node caught up with the leader")
			return false
		case <-wait.Done():
			if ctx.Err() == nil {
				d.handBack(t, r) // draining, or its circuit opened here: not started, hand it back
			}
			return false
		}
	}
	cur, err := d.store.Task(t.ID)
	if err != nil && !errors.Is(err, raftfsm.ErrNotFound) {
		d.log.Warn().Err(err).Str("task_id", t.ID).Msg("reading a task after catching up failed; delivering its attempt")
		return true
	}
	if cur == nil || cur.State != raftfsm.StateRunning || cur.Node != d.cfg.NodeID || !r.is(cur) {
		d.skipReplayed(t, "the attempt had ended before this node caught up with the leader (a Fire replayed from the log)")
		return false
	}
	return true
}

// skipReplayed logs and counts an attempt not delivered by stillHere.
func (d *Delivery) skipReplayed(t *raftfsm.Task, why string) {
	d.log.Debug().Str("task_id", t.ID).Func(traceField(t)).Int("attempt", t.Attempts).Msg("not delivering an attempt: " + why)
	if d.m != nil && d.m.StaleFires != nil {
		d.m.StaleFires.Inc()
	}
}
