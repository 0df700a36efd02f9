package api

import (
	"context"
	"encoding/base64"
	"errors"
	"hash/fnv"
	"strings"
	"time"

	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
)

// The API's purges; the retention loop itself is the scheduler's
// (sidecar/scheduler/retention.go).

// PurgeTask implements ipc.Backend: it reads the task (from the leader
// when this node does not have it or lags) and proposes its purge.
func (b *Backend) PurgeTask(ctx context.Context, id string) (int, error) {
	b.readOwnWrites(ctx)
	if flowID, running := b.stageOfRunningFlow(id); running {
		return 0, ipc.Errorf(ipc.ErrConflict, "purge: task %q is a stage of flow %q, which has not ended: its result goes to the stages after it; purge it once the flow has ended", id, flowID)
	}
	t, err := b.d.Store.Task(id)
	if err != nil && !errors.Is(err, raftfsm.ErrNotFound) {
		return 0, err
	}
	if err != nil || !b.d.Membership.CaughtUp() || !t.State.Terminal() {
		// The local copy may be missing or old: ask the leader.
		if t, err = b.strongTask(ctx, id); err != nil {
			return 0, err
		}
	}
	for range 3 {
		if !t.State.Terminal() {
			return 0, ipc.Errorf(ipc.ErrConflict, "purge: task %q is %s; only finished tasks (SUCCESS, CANCELLED, DEAD, FAILED) can be purged (cancel it first)", id, t.State)
		}
		k, err := b.d.Purger.Purge(ctx, []raftfsm.FinishedTask{{ID: t.ID, Epoch: t.Epoch, FinishedMs: t.FinishedMs}})
		if err != nil {
			return 0, err
		}
		if k == 1 {
			return 1, nil
		}
		// It changed between the read and the purge (retried,
		// overwritten, purged by retention): look again.
		if t, err = b.strongTask(ctx, id); err != nil {
			return 0, err
		}
	}
	return 0, ipc.Errorf(ipc.ErrConflict, "purge: task %q kept changing; try again", id)
}

// stageOfRunningFlow reports whether task id is a stage task of the current
// run of a flow that has not ended (a local read), and that flow's id: the
// FSM does not purge those (raftfsm stageOfRunningFlow).
func (b *Backend) stageOfRunningFlow(id string) (string, bool) {
	flowID, run, _, ok := raftfsm.ParseFlowStageID(id)
	if !ok {
		return "", false
	}
	fs, err := b.flows()
	if err != nil {
		return "", false
	}
	fl, err := fs.Flow(flowID)
	if err != nil {
		return "", false
	}
	return flowID, !fl.State.Terminal() && fl.Run == run
}

// PurgeTasks implements ipc.Backend: it reads the matching finished tasks
// from this node's finished index and proposes their purge (through the
// leader) in entries of at most Config.MaxBatchCommands ids.
//
// q.Cursor (an earlier answer's NextCursor) resumes the read where that
// one stopped; the answer's NextCursor, set with More, is where this one
// stopped. The cursor names an entry of the finished index, the same on
// every node, so a purge resumed on another node goes on alike; it
// carries a tag of the handler and state filters (purgeCursorTag) and
// goes on only with those. When a purge fails part way, More is set and
// NextCursor is q.Cursor: the read is done again from there.
func (b *Backend) PurgeTasks(ctx context.Context, q ipc.PurgeQuery) (ipc.PurgeResult, error) {
	cur := &raftfsm.PurgeCursor{}
	tag := purgeCursorTag(q.Handler, raftfsm.ParseState(q.State))
	if q.Cursor != "" {
		key, got, ok := strings.Cut(q.Cursor, ".")
		var err error
		if cur, err = raftfsm.ParseFinishedCursor(key); err != nil || !ok {
			return ipc.PurgeResult{}, ipc.Errorf(ipc.ErrInvalid, "cursor: %q is not a cursor of this API (send the next_cursor of the previous answer, or none to start over)", q.Cursor)
		}
		if got != tag {
			return ipc.PurgeResult{}, ipc.Errorf(ipc.ErrInvalid, "cursor: %q comes from a purge with another handler or state: a cursor goes on only with the handler and state of the request it came from (send those, or no cursor to start over)", q.Cursor)
		}
	}
	b.readOwnWrites(ctx)
	fq := raftfsm.FinishedQuery{Handler: q.Handler, State: raftfsm.ParseState(q.State), BeforeMs: ceilMilli(q.FinishedBefore)}
	fts, more, err := b.d.Store.Finished(fq, q.Limit, cur)
	if err != nil {
		return ipc.PurgeResult{}, err
	}
	var res ipc.PurgeResult
	for len(fts) > 0 {
		k := min(len(fts), b.cfg.MaxBatchCommands)
		got, err := b.d.Purger.Purge(ctx, fts[:k])
		res.Purged += got
		if err != nil {
			if res.Purged > 0 {
				// Part is deleted: say so, and that more may be left
				// (from where this request started).
				res.More, res.NextCursor = true, q.Cursor
				return res, nil
			}
			return res, err
		}
		fts = fts[k:]
	}
	res.More = more
	if more {
		res.NextCursor = cur.String() + "." + tag
	}
	return res, nil
}

// purgeCursorTag is the part of a bulk purge's cursor after its "." (not
// in base64url): a hash of the handler and state filters it was made
// with. The finished index is read class after class (SUCCESS and
// CANCELLED, DEAD and FAILED, own retention), so a cursor resumed with
// other filters would pass over, silently, what those match behind it;
// with the tag it is refused instead. finished_before is not in it: it
// defaults to the time of each request.
func purgeCursorTag(handler string, state raftfsm.State) string {
	h := fnv.New64a()
	h.Write([]byte{byte(state)})
	h.Write([]byte(handler))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// ceilMilli is t in Unix milliseconds, rounded up: finish times are
// stored to the millisecond (rounded down), so a task that finished before
// t in the same millisecond (a cancel just before a purge "finished
// before now") has a finish time below it and is included.
func ceilMilli(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.Sub(time.UnixMilli(ms)) > 0 {
		ms++
	}
	return ms
}
