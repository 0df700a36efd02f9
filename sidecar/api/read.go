package api

import (
	"context"
	"encoding/base64"
	"errors"
	"time"

	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
)

// Task implements ipc.Backend: a local read (after this node's own
// forwarded writes, readOwnWrites; while it has not applied them, the
// leader's copy when the leader has: ownWriteFromLeader), unless this node is catching
// up with the leader (just restarted, or partitioned) or does not have the
// task: then the leader's copy is read, so that a lagging node never
// answers "not found" for a task that exists, nor an old state.
func (b *Backend) Task(ctx context.Context, id string) (ipc.Task, error) {
	if ipc.StrongRead(ctx) {
		t, err := b.strongTask(ctx, id)
		if err != nil {
			return ipc.Task{}, err
		}
		vs := []ipc.Task{taskView(t)}
		b.addWaiting(ctx, vs)
		b.addLastRun(&vs[0])
		return vs[0], nil
	}
	if t, ok := b.ownWriteFromLeader(ctx, id); ok {
		vs := []ipc.Task{taskView(t)}
		b.addWaiting(ctx, vs)
		b.addLastRun(&vs[0])
		return vs[0], nil
	}
	b.readOwnWrites(ctx)
	t, err := b.d.Store.Task(id)
	if err != nil && !errors.Is(err, raftfsm.ErrNotFound) {
		return ipc.Task{}, err
	}
	if (err != nil || !b.d.Membership.CaughtUp()) && !b.isLeader() {
		if addr := b.d.Routes.LeaderPeerAddr(); addr != "" {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			lt, lerr := b.d.Peers.Task(rctx, addr, id)
			cancel()
			if lerr == nil {
				t, err = lt, nil
				if lt == nil {
					err = raftfsm.ErrNotFound
				}
			}
		}
	}
	if errors.Is(err, raftfsm.ErrNotFound) {
		return ipc.Task{}, ipc.Errorf(ipc.ErrNotFound, "task %q not found", id)
	}
	if err != nil {
		return ipc.Task{}, err
	}
	vs := []ipc.Task{taskView(t)}
	b.addWaiting(ctx, vs)
	b.addLastRun(&vs[0])
	return vs[0], nil
}

// ownWriteFromLeader reads task id from the leader when this follower has
// not applied its own latest forwarded write yet (it learns the commit
// only with the leader's next AppendEntries, up to raft's CommitTimeout
// later): the leader's copy, taken once the leader had applied that write,
// answers at once. ok is false when it does not apply or the leader's
// copy cannot be used (no leader, an error, no such task there, or the
// leader behind that write); the caller then waits and reads locally.
func (b *Backend) ownWriteFromLeader(ctx context.Context, id string) (*raftfsm.Task, bool) {
	pending := b.ownWritesPending()
	if pending == 0 || b.isLeader() {
		return nil, false
	}
	addr := b.d.Routes.LeaderPeerAddr()
	if addr == "" {
		return nil, false
	}
	rctx, cancel := context.WithTimeout(ctx, ReadWait)
	defer cancel()
	t, applied, err := b.d.Peers.TaskAt(rctx, addr, id)
	if err != nil || t == nil || applied < pending {
		return nil, false
	}
	b.d.OwnWrites.Observed(applied) // later reads here wait for it: none shows an older state
	return t, true
}

// strongTask is a linearizable read (rqlite's recipe): on the leader, after
// this term's barrier (the leader's timers run only once it passed), take
// the commit index, verify leadership with a quorum round, wait until the
// FSM has applied that index, then read. A follower asks the leader.
func (b *Backend) strongTask(ctx context.Context, id string) (*raftfsm.Task, error) {
	notFound := ipc.Errorf(ipc.ErrNotFound, "task %q not found", id)
	if !b.isLeader() {
		addr := b.d.Routes.LeaderPeerAddr()
		if addr == "" {
			return nil, ipc.Errorf(ipc.ErrNoLeader, "strong read: no leader known")
		}
		t, err := b.d.Peers.StrongTask(ctx, addr, id)
		if err != nil {
			return nil, ipc.Errorf(ipc.ErrNoLeader, "strong read through the leader failed: %v", err)
		}
		if t == nil {
			return nil, notFound
		}
		return t, nil
	}
	t, err := b.LeaderRead(ctx, id)
	if errors.Is(err, raftfsm.ErrNotFound) {
		return nil, notFound
	}
	return t, err
}

// LeaderRead is the leader's side of a strong read of task id (the peer
// API's strong task read calls it too): raftfsm.ErrNotFound for no such
// task; no_leader while the leader is starting or once it lost
// leadership; not_ready when applying up to the commit index takes over
// 5 s. (Up to the last entry the FSM applies: a commit index that ends on
// the term's no-op or barrier is never reached by the FSM.)
func (b *Backend) LeaderRead(ctx context.Context, id string) (*raftfsm.Task, error) {
	if !b.d.Scheduler.Leading() {
		return nil, ipc.Errorf(ipc.ErrNoLeader, "strong read: the leader is still starting (barrier)")
	}
	commit := b.d.Raft.CommitIndex()
	if err := b.d.Raft.VerifyLeader().Error(); err != nil {
		return nil, ipc.Errorf(ipc.ErrNoLeader, "strong read: not the leader any more: %v", err)
	}
	if !b.d.Membership.WaitApplied(ctx, b.d.Membership.StateIndex(commit), 5*time.Second) {
		return nil, ipc.Errorf(ipc.ErrNotReady, "strong read: applying up to %d took too long", commit)
	}
	return b.d.Store.Task(id)
}

// List implements ipc.Backend: a local read in id order (after this
// node's own forwarded writes, readOwnWrites). The cursor is the
// last id scanned, base64url-encoded.
func (b *Backend) List(ctx context.Context, q ipc.ListQuery) (ipc.ListPage, error) {
	var after string
	if q.Cursor != "" {
		c, err := base64.RawURLEncoding.DecodeString(q.Cursor)
		// A cursor is a task id: one that decodes to what no id can be
		// (not UTF-8, control characters) was not made by a page, and
		// going on from it would answer a wrong page as if it were right.
		if err != nil || ipc.ValidateID(string(c)) != nil {
			return ipc.ListPage{}, ipc.Errorf(ipc.ErrInvalid, "cursor: not a cursor from a previous page")
		}
		after = string(c)
	}
	var state raftfsm.State
	if q.State != "" {
		if state = raftfsm.ParseState(q.State); state == 0 {
			return ipc.ListPage{}, ipc.Errorf(ipc.ErrInvalid, "state %q: unknown", q.State)
		}
	}
	limit := q.Limit
	if limit <= 0 {
		limit = ipc.ListLimitDefault
	}
	b.readOwnWrites(ctx)
	tasks, next, more, err := b.d.Store.List(q.Handler, state, after, limit)
	if err != nil {
		return ipc.ListPage{}, err
	}
	page := ipc.ListPage{Tasks: make([]ipc.Task, len(tasks))}
	for i := range tasks {
		page.Tasks[i] = taskView(&tasks[i])
	}
	b.addWaiting(ctx, page.Tasks) // one call to the leader per page
	if more {
		page.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(next))
	}
	return page, nil
}
