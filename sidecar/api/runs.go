package api

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"time"
	"unicode/utf8"

	"github.com/axsched/ax/clients/go/axapi"
	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
)

// Runs implements ipc.Backend: a task's run records, newest first, from
// this node's state (any node, after its own forwarded writes:
// readOwnWrites; a follower may lag the leader by the entries others
// wrote that it has not applied yet).
func (b *Backend) Runs(ctx context.Context, id string, q ipc.RunsQuery) (ipc.RunsPage, error) {
	b.readOwnWrites(ctx)
	t, err := b.d.Store.Task(id)
	if err != nil {
		if errors.Is(err, raftfsm.ErrNotFound) {
			return ipc.RunsPage{}, ipc.Errorf(ipc.ErrNotFound, "task %q not found", id)
		}
		return ipc.RunsPage{}, err
	}
	recs, more, err := b.d.Store.Runs(id, q.Before, q.Limit)
	if err != nil {
		return ipc.RunsPage{}, err
	}
	page := ipc.RunsPage{Runs: make([]ipc.Run, 0, len(recs))}
	for i := range recs {
		v := withShardIDs(RunView(t, &recs[i]), id)
		if err := b.shardCountsOf(id, &recs[i], &v); err != nil {
			return ipc.RunsPage{}, err
		}
		page.Runs = append(page.Runs, v)
	}
	if more && len(recs) > 0 {
		page.NextCursor = ipc.RunsCursor(recs[len(recs)-1].Run)
	}
	return page, nil
}

// Run implements ipc.Backend: a local read, like Runs.
func (b *Backend) Run(ctx context.Context, id string, run int) (ipc.Run, error) {
	b.readOwnWrites(ctx)
	r, err := b.d.Store.Run(id, run)
	if errors.Is(err, raftfsm.ErrNotFound) {
		return ipc.Run{}, ipc.Errorf(ipc.ErrNotFound, "run %d of task %q not found", run, id)
	}
	if err != nil {
		return ipc.Run{}, err
	}
	t, err := b.d.Store.Task(id)
	if errors.Is(err, raftfsm.ErrNotFound) {
		return ipc.Run{}, ipc.Errorf(ipc.ErrNotFound, "run %d of task %q not found", run, id) // purged meanwhile
	}
	if err != nil {
		return ipc.Run{}, err
	}
	v := withShardIDs(RunView(t, r), id)
	if err := b.shardCountsOf(id, r, &v); err != nil {
		return ipc.Run{}, err
	}
	return v, nil
}

// shardIDsMax bounds the shard ids a run view lists (Run.ShardIDs); a run
// with more shards gives only their number. It bounds the shard tasks
// read for the counts of a cancelled run too (shardCountsOf).
const shardIDsMax = 64

// shardCountsMissing reports whether r is a run cancelled while its
// shards ran whose record lacks their counts. The FSM writes
// shards_succeeded and shards_failed into a run record only when the last
// shard ends the run (historyShardsEnded); a cancel (of the task, of its
// flow, or an overwrite) closes the record as any cancel does
// (historyCancel), without them, so the run showed "shards": 8 and
// neither count. Storing them in that apply would make a node of this
// version write another record than a node of the previous one for the
// same log entry during a rolling upgrade, so the API derives them at
// read time instead: from the task (cancelledShards), else from the shard
// tasks (shardCountsOf). A cancelled shard counts as failed, as the FSM
// counts it in the task's own view.
func shardCountsMissing(r *raftfsm.RunRecord) bool {
	return r.State == raftfsm.StateCancelled && r.Shards > 0 && r.ShardsSucceeded+r.ShardsFailed < r.Shards
}

// cancelledShards returns how many shards of r succeeded when r is the
// run of t that t's cancel ended while the shards ran: t stores the
// run's counts (cancelRunShards counted its unfinished shards as
// failed), so the rest failed. ok is false otherwise (r has its counts,
// or is an older run, or one an overwrite replaced: t holds another
// run's counts, or none).
func cancelledShards(t *raftfsm.Task, r *raftfsm.RunRecord) (succeeded int, ok bool) {
	sr := t.Shards
	if !shardCountsMissing(r) || sr == nil || t.State != raftfsm.StateCancelled ||
		t.RunNumber() != r.Run || t.Epoch != r.Epoch || sr.Total != r.Shards {
		return 0, false
	}
	return sr.Succeeded, true
}

// shardCountsOf fills in the shard counts of v, the view of a cancelled
// run of task id that lacks them (shardCountsMissing) and that the task
// could not give (cancelledShards: a run an overwrite replaced), from its
// shard tasks: those that ended SUCCESS succeeded, the others failed (the
// cancel ended every one). It reads at most shardIDsMax tasks, and leaves
// v as it is for a run with more shards, or when a shard task is gone
// (purged by its retention) or not ended.
func (b *Backend) shardCountsOf(id string, r *raftfsm.RunRecord, v *ipc.Run) error {
	if !shardCountsMissing(r) || v.ShardsSucceeded+v.ShardsFailed == r.Shards || r.Shards > shardIDsMax {
		return nil
	}
	succeeded := 0
	for i := range r.Shards {
		s, err := b.d.Store.Task(raftfsm.ShardID(id, r.Run, i))
		if errors.Is(err, raftfsm.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if !s.State.Terminal() {
			return nil
		}
		if s.State == raftfsm.StateSuccess {
			succeeded++
		}
	}
	v.ShardsSucceeded, v.ShardsFailed = succeeded, r.Shards-succeeded
	return nil
}

// withShardIDs lists the shard task ids of run v of task id.
func withShardIDs(v ipc.Run, id string) ipc.Run {
	if v.Shards > 0 && v.Shards <= shardIDsMax {
		v.ShardIDs = make([]string, v.Shards)
		for i := range v.ShardIDs {
			v.ShardIDs[i] = raftfsm.ShardID(id, v.Run, i)
		}
	}
	return v
}

// addLastRun adds the newest run's number and result to a task view.
func (b *Backend) addLastRun(v *ipc.Task) {
	recs, _, err := b.d.Store.Runs(v.ID, 0, 1)
	if err != nil || len(recs) == 0 {
		return
	}
	r := RunView(nil, &recs[0])
	v.LastRun, v.Result, v.ResultBase64, v.ResultTruncated = r.Run, r.Result, r.ResultBase64, r.ResultTruncated
}

// RunView is the API view of a run record of task t; with t nil, it has
// no trace ids. A run cancelled while its shards ran gets its shard
// counts from t when it is t's last run (cancelledShards).
func RunView(t *raftfsm.Task, r *raftfsm.RunRecord) ipc.Run {
	v := ipc.Run{
		Run: r.Run, State: r.State.String(), DueAt: utcMs(r.DueMs), FiredAt: utcMs(r.FiredMs),
		StartedAt: optMs(r.StartedMs), FinishedAt: optMs(r.FinishedMs),
		Attempts: make([]ipc.RunAttempt, 0, len(r.Attempts)), AttemptsDropped: r.DroppedAttempts,
		ResultTruncated: r.ResultTruncated,
		Shards:          r.Shards, ShardsSucceeded: r.ShardsSucceeded, ShardsFailed: r.ShardsFailed,
	}
	if t != nil {
		traceID, _ := axapi.TraceOf(t.Spec.TraceParent, t.ID)
		v.TraceID = hex.EncodeToString(traceID[:])
		if succeeded, ok := cancelledShards(t, r); ok {
			v.ShardsSucceeded, v.ShardsFailed = succeeded, r.Shards-succeeded
		}
	}
	if r.Late {
		retries, commit := r.CommitSplitNs()
		v.Lateness = &ipc.Lateness{
			TotalMs: nsToMs(r.LatenessNs()), ParkedMs: nsToMs(r.ParkedNs), ParkedReason: r.ParkedReason,
			RetriesMs: nsToMs(retries), CommitMs: nsToMs(commit), QueueMs: nsToMs(r.QueueNs), ConnectMs: nsToMs(r.ConnectNs),
		}
	}
	for _, a := range r.Attempts {
		av := ipc.RunAttempt{
			Attempt: a.Attempt, Node: a.Node, Executor: a.Executor, FiredAt: utcMs(a.FiredMs),
			StartedAt: optMs(a.StartedMs), EndedAt: optMs(a.EndedMs), DurationMs: nsToMs(a.DurationNs),
			HTTPStatus: a.HTTPStatus, Error: a.Error,
		}
		if a.Outcome != 0 {
			av.Outcome = a.Outcome.String()
		}
		if t != nil {
			span := axapi.AttemptParentID(t.ID, r.Run, a.Attempt)
			av.SpanID = hex.EncodeToString(span[:])
		}
		v.Attempts = append(v.Attempts, av)
	}
	if len(r.Result) > 0 {
		// A record stored as JSON with bytes that are not UTF-8 (an
		// executor's answer before EncodeResult checked it) goes out as
		// base64 too, or the view would not be JSON.
		if r.ResultBinary || !utf8.Valid(r.Result) {
			v.ResultBase64 = base64.StdEncoding.EncodeToString(r.Result)
		} else {
			v.Result = r.Result
		}
	}
	return v
}

func utcMs(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

func optMs(ms int64) *time.Time { return msTime(ms) }

// nsToMs gives nanoseconds as milliseconds with three decimals.
func nsToMs(ns int64) float64 { return float64(ns/1000) / 1000 }
