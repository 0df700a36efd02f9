package forward

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

var (
	// ErrNotLeader is what Local and Leader return (errors.Is) when the
	// node asked does not lead: it did not propose, so the commands go to
	// the leader (again).
	ErrNotLeader = errors.New("not the leader")
	// ErrNoLeader is returned when no leader is known before the request's
	// deadline (an election is running, or no quorum).
	ErrNoLeader = errors.New("no leader")
	// ErrOutcomeUnknown is returned for an application's write whose
	// proposal may have been committed although its result was lost (the
	// leader died or lost leadership with the write in flight). It is not
	// proposed again: a second copy would apply a second time, after other
	// writes, and undo them (a replace after a cancel) or answer what the
	// first copy did (200 "existing task" to the submit that created it).
	// The client hears 503 and may retry, submits being idempotent by id
	// (etcd answers ErrTimeoutDueToLeaderFail in the same case).
	ErrOutcomeUnknown = errors.New("the leader changed while the write was in flight: it may or may not have been applied")
)

// Local is this node's Raft group commit.
type Local interface {
	// IsLeader reports whether this node leads now.
	IsLeader() bool
	// Propose commits cmds on this node and returns one result per
	// command; ErrNotLeader when it does not lead, raft.ErrLeadershipLost
	// when the entry may or may not survive, raft.ErrEnqueueTimeout, or
	// an error that is the answer (returned as it is).
	Propose(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error)
}

// Leader sends commands to the leader's peer API.
type Leader interface {
	// Propose sends cmds to the peer API at addr and returns its results;
	// ErrNotLeader when that node answers that it does not lead.
	Propose(ctx context.Context, addr string, cmds []raftfsm.Command) ([]raftfsm.Result, error)
}

// Leaders tells where the leader is and when it changes.
type Leaders interface {
	// Changed returns a channel closed at the next leader change after
	// the call.
	Changed() <-chan struct{}
	// PeerAddr returns the peer API address to dial for the current
	// leader, "" when no leader is known or its address is not known yet.
	PeerAddr() string
}

// Applied is this node's applied index (a *raftfsm.FSM).
type Applied interface {
	AppliedIndex() uint64
	// AppliedCh returns a channel closed at the next applied entry.
	AppliedCh() <-chan struct{}
}

// Config is what New needs.
type Config struct {
	Local   Local
	Leader  Leader
	Leaders Leaders
	Applied Applied
	// Final reports whether an error from Leader is the leader's answer to
	// the commands (a full backlog), returned as it is, without retry; nil:
	// none is.
	Final func(error) bool
	// NoLeaderWait is how long Propose waits without a leader before it
	// gives up with ErrNoLeader (several election timeouts).
	NoLeaderWait time.Duration
	// Clock times the retries and waits; nil: the real clock.
	Clock engine.Clock
	Log   zerolog.Logger
}

// Forwarder gets commands committed wherever the leader is. This is the
// one place that forwards (rqlite's proxy): on the leader it proposes
// locally; on a follower it sends the commands to the leader's peer API.
// While no leader is known (an election), or the leader changes under it,
// it retries until ctx ends and then returns ErrNoLeader. Every command
// type is safe to send twice (submits are idempotent by id and spec; fires
// and completions name their attempt; cancels of a cancelled task change
// nothing), which is what makes retrying after raft.ErrLeadershipLost
// correct.
//
// Read your writes on a follower: the forwarder remembers the highest
// index of an entry it forwarded and the leader answered (Forwarded), and
// the node's API reads wait until the node has applied it (WaitForwarded)
// before they read the local store, so a client that writes through a
// follower and then reads from it sees its own write. The application's
// writes (ProposeAPI) answer as soon as the leader has answered, without
// that wait: a follower learns the new commit index only with the
// leader's next AppendEntries, up to raft's CommitTimeout (5–10 ms) later
// when nothing else is written, and waiting for it on every write capped
// a caller at about 100 writes/s. The node's own writes (Propose) still
// wait until applied, as their callers read the store directly.
type Forwarder struct {
	cfg Config
	// forwarded is the highest index of a forwarded entry the leader
	// answered (an atomic max).
	forwarded atomic.Uint64
	// changes ends forwards at leader changes.
	changes changeContexts
	// giveUps keeps stopped give-up timers (giveUpTimer).
	giveUps sync.Pool
}

// ReadWait bounds how long a read waits for this node to apply the writes
// it forwarded (WaitForwarded) before it reads what it has.
const ReadWait = time.Second

// New returns a forwarder over cfg.
func New(cfg Config) *Forwarder {
	if cfg.Clock == nil {
		cfg.Clock = engine.RealClock()
	}
	return &Forwarder{cfg: cfg}
}

// Propose gets cmds committed (see Forwarder), proposing them again after
// raft.ErrLeadershipLost: for the node's own writes, which are safe to
// apply twice. Forwarded, it returns once this node has applied the entry
// too (or after ReadWait): its callers read the local store directly. It
// returns ErrNoLeader when no leader took them before ctx ended or
// NoLeaderWait passed without a leader.
func (f *Forwarder) Propose(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	res, forwarded, err := f.proposeRetrying(ctx, cmds, true)
	if err == nil && forwarded {
		f.WaitApplied(ctx, maxIndex(res), ReadWait)
	}
	return res, err
}

// ProposeAPI is Propose for the application's writes (submit, cancel,
// retry, heartbeat, result): it proposes again only when the first try
// was surely not committed (no leader, "not the leader", a connection
// that was never made). When the try may have been committed (the leader
// died or lost leadership with it in flight) it returns
// ErrOutcomeUnknown instead: proposed again, the command would apply
// twice, and the client's history would not be linearizable. Forwarded,
// it returns as soon as the leader answers, before this node may have
// applied the entry: the node's reads wait for it (WaitForwarded).
func (f *Forwarder) ProposeAPI(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	res, _, err := f.proposeRetrying(ctx, cmds, false)
	return res, err
}

// Forwarded returns the highest Raft index of an entry this node forwarded
// and the leader answered (0 when none): what a read on this node must
// have applied to see the node's own writes.
func (f *Forwarder) Forwarded() uint64 { return f.forwarded.Load() }

// WaitForwarded waits until this node has applied every entry it forwarded
// and the leader answered (Forwarded), so that a read of the local store
// that follows sees them. It returns true at once when nothing is
// pending, false when ctx ends or limit passes first (the caller then
// reads what it has).
func (f *Forwarder) WaitForwarded(ctx context.Context, limit time.Duration) bool {
	idx := f.forwarded.Load()
	if f.cfg.Applied.AppliedIndex() >= idx {
		return true
	}
	return f.WaitApplied(ctx, idx, limit)
}

// Observed raises Forwarded to idx: this node answered a read with the
// leader's state as of idx, so its next reads wait until it has applied
// idx too and never show an older state than that answer (monotonic
// reads on one node).
func (f *Forwarder) Observed(idx uint64) { f.noteForwarded(idx) }

// noteForwarded raises Forwarded to idx (an atomic max).
func (f *Forwarder) noteForwarded(idx uint64) {
	for {
		cur := f.forwarded.Load()
		if idx <= cur || f.forwarded.CompareAndSwap(cur, idx) {
			return
		}
	}
}

// forwardMaybeDelivered reports whether a failed forward may have reached
// the leader, and so may be committed: anything but the leader's answer
// that it does not lead (it did not propose) or a dial that failed.
func forwardMaybeDelivered(err error) bool {
	var dial *fasthttp.ErrDialWithUpstream
	switch {
	case errors.Is(err, ErrNotLeader), errors.As(err, &dial), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, fasthttp.ErrDialTimeout), errors.Is(err, fasthttp.ErrNoFreeConns):
		return false
	}
	return true
}

// forwardErrText is err's text for the client's 503: fasthttp's
// ErrConnectionClosed (the leader died with the forward in flight) says,
// after what happened, "make sure the server returns 'connection: close'
// response header before closing the connection", advice to the author
// of a server that reads, in ax's answer, as if addressed to the app.
func forwardErrText(err error) string {
	if errors.Is(err, fasthttp.ErrConnectionClosed) {
		return "the leader closed the connection before answering"
	}
	return err.Error()
}

// proposeRetrying proposes or forwards cmds until one try is answered;
// forwarded reports whether the answer came from the leader's peer API.
func (f *Forwarder) proposeRetrying(ctx context.Context, cmds []raftfsm.Command, retryUnknown bool) (res []raftfsm.Result, forwarded bool, err error) {
	backoff := 10 * time.Millisecond
	var lastErr error
	// Without a leader for NoLeaderWait, give up early: an election takes
	// about one election timeout, so longer means no quorum, and the
	// client should hear 503 no_leader now rather than at its deadline.
	giveUp := f.giveUpTimer()
	defer f.putGiveUp(giveUp)
	for {
		if f.cfg.Local.IsLeader() {
			res, err := f.cfg.Local.Propose(ctx, cmds)
			if err == nil {
				return res, false, nil
			}
			if !errors.Is(err, ErrNotLeader) && !errors.Is(err, raft.ErrLeadershipLost) && !errors.Is(err, raft.ErrEnqueueTimeout) {
				return nil, false, err
			}
			if !retryUnknown && errors.Is(err, raft.ErrLeadershipLost) {
				return nil, false, fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
			}
			lastErr = err
		} else if changed, addr := f.cfg.Leaders.Changed(), f.cfg.Leaders.PeerAddr(); addr != "" {
			// Abandon the forward if the leader changes meanwhile: a
			// leader cut off by a partition would hold it until the peer
			// API's timeout while a new one already serves. (changed is
			// taken first, so a change after reading addr counts.)
			fctx, cancel := f.changes.untilLeaderChanges(ctx, changed)
			res, err := f.cfg.Leader.Propose(fctx, addr, cmds)
			cancel()
			if err == nil {
				f.noteForwarded(maxIndex(res))
				return res, true, nil
			}
			if f.cfg.Final != nil && f.cfg.Final(err) {
				return nil, false, err // the leader's answer: do not retry
			}
			if !retryUnknown && forwardMaybeDelivered(err) {
				return nil, false, fmt.Errorf("%w: forward to the leader at %s: %s", ErrOutcomeUnknown, addr, forwardErrText(err))
			}
			lastErr = err
			f.cfg.Log.Debug().Err(err).Str("leader", addr).Msg("forward to leader failed; retrying")
		}
		wait := f.cfg.Clock.NewTimer(backoff)
		select {
		case <-ctx.Done():
			wait.Stop()
			if lastErr != nil && !errors.Is(lastErr, ErrNotLeader) {
				f.cfg.Log.Debug().Err(lastErr).Msg("no leader before deadline")
			}
			return nil, false, ErrNoLeader
		case <-giveUp.C():
			wait.Stop()
			f.cfg.Log.Debug().Err(lastErr).Msg("no leader: giving up")
			return nil, false, ErrNoLeader
		case <-wait.C():
		}
		backoff = min(backoff*2, 200*time.Millisecond)
	}
}

// giveUpTimer returns a timer of NoLeaderWait for proposeRetrying, from
// f.giveUps when one is there (a new timer per write was two allocations
// of every forwarded or local write: BenchmarkProposeAPIForwarded);
// putGiveUp stops it and puts it back. A stopped timer delivers nothing
// stale after Reset (engine.Timer), so a pooled one is as good as new.
func (f *Forwarder) giveUpTimer() engine.Timer {
	if t, ok := f.giveUps.Get().(engine.Timer); ok {
		t.Reset(f.cfg.NoLeaderWait)
		return t
	}
	return f.cfg.Clock.NewTimer(f.cfg.NoLeaderWait)
}

// putGiveUp stops t and keeps it for the next giveUpTimer.
func (f *Forwarder) putGiveUp(t engine.Timer) {
	t.Stop()
	f.giveUps.Put(t)
}

func maxIndex(rs []raftfsm.Result) uint64 {
	var m uint64
	for _, r := range rs {
		m = max(m, r.Index)
	}
	return m
}

// WaitApplied waits until this node has applied idx and returns true, or
// returns false when ctx ends or limit passes first.
func (f *Forwarder) WaitApplied(ctx context.Context, idx uint64, limit time.Duration) bool {
	return WaitApplied(ctx, f.cfg.Applied, f.cfg.Clock, idx, limit)
}

// WaitApplied waits until a has applied idx and returns true, or returns
// false when ctx ends or limit (on clock) passes first.
func WaitApplied(ctx context.Context, a Applied, clock engine.Clock, idx uint64, limit time.Duration) bool {
	t := clock.NewTimer(limit)
	defer t.Stop()
	for {
		ch := a.AppliedCh()
		if a.AppliedIndex() >= idx {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		case <-t.C():
			return false
		}
	}
}
