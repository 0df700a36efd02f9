package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// Retention defaults (sidecar.Config's Retention, RetentionDead and
// PurgeInterval).
const (
	// RetentionDefault is how long SUCCESS and CANCELLED tasks are kept
	// after they finished.
	RetentionDefault = 24 * time.Hour
	// RetentionDeadDefault is how long DEAD and FAILED tasks are kept
	// after they finished (longer: someone may want to look or retry).
	RetentionDeadDefault = 168 * time.Hour
	// PurgeIntervalDefault is how often the leader purges the tasks whose
	// retention ended.
	PurgeIntervalDefault = time.Minute
)

const (
	// purgeEntriesPerCycle bounds the Raft entries of one purge cycle;
	// each holds at most Config.MaxBatchCommands task ids, so a cycle
	// purges at most 256 × 512 = 131 072 tasks by default.
	purgeEntriesPerCycle = 256
	// purgeProposeTimeout bounds the wait for one purge entry.
	purgeProposeTimeout = 30 * time.Second
	// reclaimInterval is how often every node reclaims badger's disk
	// space (value-log GC and, after deletes, LSM compaction).
	reclaimInterval = 5 * time.Minute
	// reclaimAfterDeletes: a node that deleted this many tasks since its
	// last reclaim reclaims at its next purge tick, and compacts when they
	// are a quarter of its store or more (see reclaim).
	reclaimAfterDeletes = 10_000
	// valueLogGCRatio is the share of a value-log file that must be
	// garbage for badger to rewrite it.
	valueLogGCRatio = 0.5
	// valueLogGCMaxRounds bounds the files one reclaim rewrites.
	valueLogGCMaxRounds = 64
)

// Retention is the purge loop: while this node leads, every PurgeInterval
// it proposes CmdPurge entries for the finished tasks whose retention
// ended, found by seeking the FSM's finished index (never a scan of all
// tasks). On every node it also reclaims badger's disk space after deletes
// and every reclaimInterval. The FSM checks each purged task again (still
// terminal, same epoch and finish time), so a purge read from a stale view
// deletes nothing that moved on.
type Retention struct {
	clock engine.Clock
	fsm   *raftfsm.FSM
	db    *badger.DB
	log   zerolog.Logger
	// keep and keepDead are Config.Retention and Config.RetentionDead
	// (0: that class is kept forever); batch the ids per entry.
	keep, keepDead, interval time.Duration
	batch                    int
	// leading reports whether this node leads and has applied every
	// entry of earlier terms; propose commits commands through the
	// leader.
	leading func() bool
	propose func(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error)
	// compact frees the LSM space of deleted keys (db.Flatten; a test
	// hook).
	compact func() error

	purged *prometheus.CounterVec // reason: retention, api

	// deleted counts the tasks this node's store deleted (purge events,
	// whoever proposed them); lastReclaim and deletedReclaim are the time
	// and that count at the last reclaim.
	deleted        atomic.Int64
	lastReclaim    time.Time
	deletedReclaim int64
	// pending counts the deletes since the last compaction; minDeletes
	// is the least that makes one (reclaimAfterDeletes).
	pending, minDeletes int64
	flattenAgain        bool // the last reclaim compacted after deletes: compact at the next one too
}

// RetentionConfig is what the purge loop needs. DB, FSM, Proposer,
// Leading and Clock are required.
type RetentionConfig struct {
	// Keep and KeepDead are how long SUCCESS/CANCELLED and DEAD/FAILED
	// tasks are kept after they finished (0: that class is kept forever;
	// a task's own retention overrides both).
	Keep, KeepDead time.Duration
	// Interval is how often the purge loop ticks.
	Interval time.Duration
	// Batch is the most task ids of one purge entry (MaxBatchCommands).
	Batch int
	// DB is the node's badger store (disk reclaim).
	DB *badger.DB
	// FSM is read for the finished index and the task counts.
	FSM *raftfsm.FSM
	// Leading reports whether this node leads and has applied every
	// entry of earlier terms.
	Leading func() bool
	// Proposer commits the purges (through the leader: the API's purges
	// run on followers too).
	Proposer Proposer
	// Compact frees the LSM space of deleted keys; nil: DB.Flatten(1).
	Compact func() error
	Log     zerolog.Logger
	Clock   engine.Clock
}

// NewRetention returns the purge loop (Run starts it).
func NewRetention(c RetentionConfig) *Retention {
	r := &Retention{
		clock: c.Clock, fsm: c.FSM, db: c.DB, log: c.Log,
		keep: c.Keep, keepDead: c.KeepDead, interval: c.Interval, batch: c.Batch,
		leading: c.Leading, propose: c.Proposer.Propose, compact: c.Compact,
	}
	r.init()
	return r
}

func (r *Retention) init() {
	r.purged = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ax_tasks_purged_total",
		Help: "Finished tasks deleted by purges this node proposed: reason retention (the leader's purge loop) or api (DELETE ?purge=true, POST /v1/tasks/purge).",
	}, []string{"reason"})
	r.purged.WithLabelValues(PurgeReasonRetention)
	r.purged.WithLabelValues(PurgeReasonAPI)
	if r.compact == nil {
		r.compact = func() error { return r.db.Flatten(1) }
	}
	r.lastReclaim = r.clock.Now()
	if r.minDeletes == 0 {
		r.minDeletes = reclaimAfterDeletes
	}
}

// OnEvent counts the tasks an applied purge deleted.
func (r *Retention) OnEvent(ev *raftfsm.Event) {
	if ev.Type == raftfsm.CmdPurge && ev.Task != nil {
		r.deleted.Add(1)
	}
}

// Collectors returns the loop's collectors (the node registers them).
func (r *Retention) Collectors() []prometheus.Collector { return []prometheus.Collector{r.purged} }

// Run ticks every interval until ctx ends.
func (r *Retention) Run(ctx context.Context) {
	t := r.clock.NewTimer(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		r.tick(ctx)
		t.Reset(r.interval)
	}
}

// tick is one round of the loop: a purge cycle on the leader, then a
// reclaim on any node when enough was deleted or reclaimInterval passed.
func (r *Retention) tick(ctx context.Context) {
	if r.leading() {
		start := r.clock.Now()
		n, err := r.cycle(ctx, start)
		if err != nil && ctx.Err() == nil {
			r.log.Warn().Err(err).Int("purged", n).Msg("purge cycle stopped")
		} else if n > 0 {
			r.log.Info().Int("purged", n).Dur("took", r.clock.Now().Sub(start)).Msg("purged finished tasks past their retention")
		}
		n, err = r.flowCycle(ctx, start)
		if err != nil && ctx.Err() == nil {
			r.log.Warn().Err(err).Int("purged", n).Msg("flow purge cycle stopped")
		} else if n > 0 {
			r.log.Info().Int("purged", n).Msg("purged finished flows past their retention")
		}
	}
	if now := r.clock.Now(); now.Sub(r.lastReclaim) >= reclaimInterval || r.deleted.Load()-r.deletedReclaim >= r.minDeletes {
		r.reclaim()
	}
}

// cycle purges, in entries of at most batch ids and at most
// purgeEntriesPerCycle entries, the tasks whose retention ended at now. It
// returns how many were deleted.
func (r *Retention) cycle(ctx context.Context, now time.Time) (int, error) {
	nowMs := now.UnixMilli()
	total := 0
	var cur raftfsm.PurgeCursor // each read resumes after the last: the purged entries' deleted keys are not walked again
	for range purgeEntriesPerCycle {
		fts, err := r.fsm.Expired(nowMs, r.keep, r.keepDead, r.batch, &cur)
		if err != nil || len(fts) == 0 {
			return total, err
		}
		k, err := r.Purge(ctx, fts, PurgeReasonRetention)
		total += k
		if err != nil {
			return total, err
		}
		if len(fts) < r.batch {
			// All expired ones are read. (A batch none of which moved,
			// each changed since it was read, does not stop the cycle:
			// the cursor is past it, and the next cycle looks again.)
			return total, nil
		}
	}
	return total, nil
}

// flowCycle purges, in entries of at most batch flows and at most
// purgeEntriesPerCycle entries, the finished flows whose retention ended at
// now (the task flags: SUCCESS and CANCELLED flows after keep, FAILED ones
// after keepDead; raftfsm.FSM.ExpiredFlows). It returns how many were
// deleted.
func (r *Retention) flowCycle(ctx context.Context, now time.Time) (int, error) {
	total := 0
	var cur raftfsm.PurgeCursor
	for range purgeEntriesPerCycle {
		fls, err := r.fsm.ExpiredFlows(now.UnixMilli(), r.keep, r.keepDead, r.batch, &cur)
		if err != nil || len(fls) == 0 {
			return total, err
		}
		k, err := r.PurgeFlows(ctx, fls)
		total += k
		if err != nil || len(fls) < r.batch {
			return total, err // as in cycle, a batch none of which moved does not end it
		}
	}
	return total, nil
}

// PurgeFlows proposes one CmdPurge of the finished flows fls (as read:
// raftfsm.Flow.FlowTarget) and returns how many it deleted.
func (r *Retention) PurgeFlows(ctx context.Context, fls []raftfsm.PurgeTask) (int, error) {
	pctx, cancel := context.WithTimeout(ctx, purgeProposeTimeout)
	defer cancel()
	res, err := r.propose(pctx, []raftfsm.Command{{Type: raftfsm.CmdPurge, Purge: &raftfsm.Purge{Flows: fls}}})
	if err != nil {
		return 0, err
	}
	if len(res) != 1 {
		return 0, fmt.Errorf("purge flows: %d results for one command", len(res))
	}
	return res[0].PurgedFlowCount(), nil
}

// Purge reasons: the label of ax_tasks_purged_total.
const (
	// PurgeReasonRetention: the leader's purge loop.
	PurgeReasonRetention = "retention"
	// PurgeReasonAPI: DELETE ?purge=true, POST /v1/tasks/purge.
	PurgeReasonAPI = "api"
)

// Purge proposes one CmdPurge of fts and counts what it deleted.
func (r *Retention) Purge(ctx context.Context, fts []raftfsm.FinishedTask, reason string) (int, error) {
	ts := make([]raftfsm.PurgeTask, len(fts))
	for i, ft := range fts {
		ts[i] = ft.Target()
	}
	pctx, cancel := context.WithTimeout(ctx, purgeProposeTimeout)
	defer cancel()
	res, err := r.propose(pctx, []raftfsm.Command{{Type: raftfsm.CmdPurge, Purge: &raftfsm.Purge{Tasks: ts}}})
	if err != nil {
		return 0, err
	}
	if len(res) != 1 {
		return 0, fmt.Errorf("purge: %d results for one command", len(res))
	}
	k := res[0].PurgedCount()
	r.purged.WithLabelValues(reason).Add(float64(k))
	return k, nil
}

// reclaim gives the disk space of deleted tasks back. Task records are
// small enough to live in badger's LSM tables (its value threshold is
// 1 MiB, so only near-1 MiB payloads go to the value log), and a deleted
// key keeps its space until a compaction into the last level drops it with
// its tombstone. Badger's own compactions get there in time; after many
// deletes — at least minDeletes, and a quarter of the store or more (the
// deletes of a steady retention are a small share, and compacting a big
// store for them every few minutes would cost more than it frees) — reclaim
// compacts the whole tree (db.Flatten), at once and once more at the next
// reclaim: the tombstones still in the memtable at the first pass reach the
// tables only when it flushes. (Flatten compacts only a tree with more than
// one level in use: a small store whose data and tombstones share one level
// keeps them until badger's own compactions.) Then it runs value-log GC
// until badger finds nothing to rewrite. (Measured: README "Retention and
// purge".)
func (r *Retention) reclaim() {
	total := r.deleted.Load()
	r.pending += total - r.deletedReclaim
	r.lastReclaim, r.deletedReclaim = r.clock.Now(), total
	live := r.fsm.TotalTasks()
	big := r.pending >= r.minDeletes && r.pending*4 >= live+r.pending
	if big || r.flattenAgain {
		deleted := r.pending
		r.flattenAgain = big
		if big {
			r.pending = 0
		}
		start := r.clock.Now()
		if err := r.compact(); err != nil {
			r.log.Warn().Err(err).Msg("badger compaction after purges failed")
		} else {
			r.log.Info().Dur("took", r.clock.Now().Sub(start)).Int64("deleted", deleted).Int64("tasks", live).Msg("badger compacted after purges")
		}
	}
	for range valueLogGCMaxRounds {
		err := r.db.RunValueLogGC(valueLogGCRatio)
		if err == nil {
			continue
		}
		if !errors.Is(err, badger.ErrNoRewrite) && !errors.Is(err, badger.ErrRejected) {
			r.log.Warn().Err(err).Msg("badger value-log GC failed")
		}
		return
	}
}
