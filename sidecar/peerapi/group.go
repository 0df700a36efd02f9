package peerapi

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/axsched/ax/raftfsm"
)

// Group forwarding: the proposals that wait on a follower while its
// earlier forwards are in flight go to the leader together, in one
// request to PathProposeGroup, instead of one request each. The leader
// proposes each of them on its own (so each keeps its own outcome: a full
// backlog refuses only the proposal that names that handler) but at the
// same time, so its proposer group-commits them into one Raft entry. A
// proposal alone goes to PathPropose as before.
//
// The body of both directions is a frame of items: a uint32 count, then
// per item a uint16 status (0 in a request), a uint32 length and that
// many bytes (big-endian). A request's item is a raftfsm entry
// (raftfsm.EncodeEntry); an answer's item is what PathPropose would have
// answered for that proposal: 200 with the results (raftfsm.EncodeResults)
// or an error status with its JSON body.

const (
	// GroupMax bounds the proposals of one group request.
	GroupMax = 256
	// groupLegacyRetry is how long a client sends proposals one by one to
	// a node that answered the group path 404 (an older version) before
	// it tries the group path there again.
	groupLegacyRetry = time.Minute
)

// GroupInflight is how many requests a client keeps in flight to one
// leader through ProposeGrouped; past it, proposals wait and go in the
// next group. (A variable for the benchmarks.)
var GroupInflight = 2

// groupItem is one item of a group frame.
type groupItem struct {
	Status int
	Body   []byte
}

// appendGroup appends the frame of items to b.
func appendGroup(b []byte, items []groupItem) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(items)))
	for _, it := range items {
		b = binary.BigEndian.AppendUint16(b, uint16(it.Status))
		b = binary.BigEndian.AppendUint32(b, uint32(len(it.Body)))
		b = append(b, it.Body...)
	}
	return b
}

// errBadGroup is returned by decodeGroup for a body that is not a frame
// of at most max items.
var errBadGroup = errors.New("not a group frame")

// decodeGroup reads a frame of at most max items; the items' bodies alias b.
func decodeGroup(b []byte, max int) ([]groupItem, error) {
	if len(b) < 4 {
		return nil, errBadGroup
	}
	n := binary.BigEndian.Uint32(b)
	b = b[4:]
	if n == 0 || n > uint32(max) || uint64(n)*6 > uint64(len(b)) {
		return nil, fmt.Errorf("%w: %d items", errBadGroup, n)
	}
	items := make([]groupItem, n)
	for i := range items {
		if len(b) < 6 {
			return nil, errBadGroup
		}
		st, l := binary.BigEndian.Uint16(b), binary.BigEndian.Uint32(b[2:])
		b = b[6:]
		if uint64(l) > uint64(len(b)) {
			return nil, errBadGroup
		}
		items[i] = groupItem{Status: int(st), Body: b[:l:l]}
		b = b[l:]
	}
	if len(b) != 0 {
		return nil, errBadGroup
	}
	return items, nil
}

// errorAnswer is the status and body WriteError answers for e.
func errorAnswer(e *Error) (int, []byte) {
	var ctx fasthttp.RequestCtx
	WriteError(&ctx, e)
	return ctx.Response.StatusCode(), append([]byte(nil), ctx.Response.Body()...)
}

// proposeAnswer is the status and body PathPropose answers for a
// proposal's outcome.
func proposeAnswer(res []raftfsm.Result, err error) (int, []byte) {
	if err != nil {
		return errorAnswer(ErrorOf(err, ErrUnavailable))
	}
	b, err := raftfsm.EncodeResults(res)
	if err != nil {
		return errorAnswer(Errorf(ErrInternal, "%s", err.Error()))
	}
	return http.StatusOK, b
}

// serveProposeGroup answers PathProposeGroup: each proposal is proposed
// on its own, all at once, and answered in order.
func (s *Server) serveProposeGroup(ctx *fasthttp.RequestCtx) {
	items, err := decodeGroup(ctx.PostBody(), GroupMax)
	if err != nil {
		WriteError(ctx, Errorf(ErrBadRequest, "%s", err.Error()))
		return
	}
	c, cancel := s.requestContext(ctx)
	defer cancel()
	answers := make([]groupItem, len(items))
	var wg sync.WaitGroup
	for i, it := range items {
		cmds, err := raftfsm.DecodeEntry(it.Body)
		if err != nil {
			answers[i].Status, answers[i].Body = errorAnswer(Errorf(ErrBadRequest, "%s", err.Error()))
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := s.cfg.Node.Propose(c, cmds)
			answers[i].Status, answers[i].Body = proposeAnswer(res, err)
		}()
	}
	wg.Wait()
	ctx.SetContentType("application/octet-stream")
	ctx.SetBody(appendGroup(nil, answers))
}

// groupMember is one proposal waiting in a group queue.
type groupMember struct {
	ctx  context.Context
	cmds []raftfsm.Command
	done chan groupAnswer // buffered: the sender never blocks
}

type groupAnswer struct {
	res []raftfsm.Result
	err error
}

// groupQueue is the proposals to one leader address waiting for a group
// request, and the requests in flight.
type groupQueue struct {
	mu       sync.Mutex
	inflight int
	waiting  []*groupMember
	// legacyUntil: until then the address is sent proposals one by one
	// (it answered the group path 404).
	legacyUntil time.Time
}

// ProposeGrouped is Propose for concurrent callers: while GroupInflight
// requests to addr are in flight, cmds waits and goes with the other
// waiting proposals in one request (PathProposeGroup, at most GroupMax),
// each answered on its own as Propose answers it. A proposal that finds
// a free slot goes at once, alone, to PathPropose. It returns when its
// answer comes or ctx ends (context.Cause(ctx); the proposal may still be
// delivered).
func (p *Client) ProposeGrouped(ctx context.Context, addr string, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	q := p.groupQueue(addr)
	m := &groupMember{ctx: ctx, cmds: cmds, done: make(chan groupAnswer, 1)}
	q.mu.Lock()
	q.waiting = append(q.waiting, m)
	var batch []*groupMember
	if q.inflight < GroupInflight {
		q.inflight++
		batch = q.takeLocked()
	}
	q.mu.Unlock()
	if batch != nil {
		go p.sendGroups(q, addr, batch)
	}
	select {
	case a := <-m.done:
		return a.res, a.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

func (p *Client) groupQueue(addr string) *groupQueue {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.groups == nil {
		p.groups = map[string]*groupQueue{}
	}
	q := p.groups[addr]
	if q == nil {
		q = &groupQueue{}
		p.groups[addr] = q
	}
	return q
}

// takeLocked takes up to GroupMax waiting proposals whose callers still
// wait (q.mu held).
func (q *groupQueue) takeLocked() []*groupMember {
	var batch []*groupMember
	k := 0
	for ; k < len(q.waiting) && len(batch) < GroupMax; k++ {
		if m := q.waiting[k]; m.ctx.Err() == nil {
			batch = append(batch, m)
		}
	}
	q.waiting = append(q.waiting[:0], q.waiting[k:]...)
	return batch
}

// sendGroups sends batch, then whatever waits meanwhile, until nothing
// waits; it holds one of q's in-flight slots.
func (p *Client) sendGroups(q *groupQueue, addr string, batch []*groupMember) {
	for {
		if len(batch) > 0 {
			p.sendGroup(q, addr, batch)
		}
		q.mu.Lock()
		batch = q.takeLocked()
		if len(batch) == 0 {
			q.inflight--
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
	}
}

// groupContext is the context of one group request: its deadline is the
// latest of its members' (Timeout for a member without one), and it ends
// early once every member's caller has given up.
func groupContext(batch []*groupMember) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, m := range batch {
		d, ok := m.ctx.Deadline()
		if !ok {
			d = time.Now().Add(Timeout)
		}
		if d.After(latest) {
			latest = d
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), latest)
	left := atomic.Int64{}
	left.Store(int64(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, m := range batch {
		stops[i] = context.AfterFunc(m.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// sendGroup sends one group and hands each member its answer.
func (p *Client) sendGroup(q *groupQueue, addr string, batch []*groupMember) {
	q.mu.Lock()
	legacy := time.Now().Before(q.legacyUntil)
	q.mu.Unlock()
	if len(batch) == 1 || legacy {
		var wg sync.WaitGroup
		for _, m := range batch {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := p.Propose(m.ctx, addr, m.cmds)
				m.done <- groupAnswer{res, err}
			}()
		}
		wg.Wait()
		return
	}
	items := make([]groupItem, 0, len(batch))
	live := batch[:0:0]
	for _, m := range batch {
		data, err := raftfsm.EncodeEntry(m.cmds)
		if err != nil {
			m.done <- groupAnswer{nil, err} // not sent
			continue
		}
		items = append(items, groupItem{Body: data})
		live = append(live, m)
	}
	if batch = live; len(batch) == 0 {
		return
	}
	ctx, cancel := groupContext(batch)
	defer cancel()
	status, body, err := p.Do(ctx, "POST", addr, PathProposeGroup, "application/octet-stream", appendGroup(nil, items))
	if err == nil && status == http.StatusNotFound {
		// An older leader: no group path. Send these one by one, and
		// the next ones too for a while.
		q.mu.Lock()
		q.legacyUntil = time.Now().Add(groupLegacyRetry)
		q.mu.Unlock()
		p.sendGroup(q, addr, batch)
		return
	}
	var answers []groupItem
	if err == nil {
		if status != http.StatusOK {
			err = &callError{addr: addr, path: PathProposeGroup, err: decodeError(status, body, nil)}
		} else if answers, err = decodeGroup(body, GroupMax); err == nil && len(answers) != len(items) {
			err = fmt.Errorf("peer %s: %d answers for %d proposals", addr, len(answers), len(items))
		} else if err != nil {
			err = fmt.Errorf("peer %s: %s: bad answer: %w", addr, PathProposeGroup, err)
		}
	}
	for i, m := range batch {
		if err != nil {
			m.done <- groupAnswer{nil, err}
			continue
		}
		res, err := proposeResults(addr, answers[i].Status, answers[i].Body, len(m.cmds))
		m.done <- groupAnswer{res, err}
	}
}

// proposeResults reads PathPropose's answer (or a group's item) to a
// proposal of n commands.
func proposeResults(addr string, status int, body []byte, n int) ([]raftfsm.Result, error) {
	if status != http.StatusOK {
		return nil, &callError{addr: addr, path: PathPropose,
			err: decodeError(status, body, map[int]string{http.StatusTooManyRequests: CodeQueueFull})}
	}
	res, err := raftfsm.DecodeResults(body)
	if err != nil {
		return nil, err
	}
	if len(res) != n {
		return nil, fmt.Errorf("peer %s: %d results for %d commands", addr, len(res), n)
	}
	return res, nil
}
