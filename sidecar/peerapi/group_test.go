package peerapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/axsched/ax/raftfsm"
)

func TestGroupFrame(t *testing.T) {
	items := []groupItem{{Status: 200, Body: []byte("abc")}, {Status: 429, Body: nil}, {Body: []byte{0}}}
	b := appendGroup(nil, items)
	got, err := decodeGroup(b, 3)
	if err != nil || len(got) != 3 || got[0].Status != 200 || !bytes.Equal(got[0].Body, []byte("abc")) ||
		got[1].Status != 429 || len(got[1].Body) != 0 || !bytes.Equal(got[2].Body, []byte{0}) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for name, bad := range map[string][]byte{
		"empty":      nil,
		"no items":   appendGroup(nil, nil),
		"over max":   b,
		"short item": b[:len(b)-1],
		"trailing":   append(append([]byte(nil), b...), 0),
		"huge count": {0xff, 0xff, 0xff, 0xff, 0, 0},
		"huge len":   {0, 0, 0, 1, 0, 0, 0xff, 0xff, 0xff, 0xff},
	} {
		max := 3
		if name == "over max" {
			max = 2
		}
		if _, err := decodeGroup(bad, max); !errors.Is(err, errBadGroup) {
			t.Errorf("%s: %v, want errBadGroup", name, err)
		}
	}
}

// gateNode holds every proposal until release is closed, and answers a
// proposal whose cancel names an id in refuse with that error.
type gateNode struct {
	fakeNode
	started chan string
	release chan struct{}
	refuse  map[string]error
	calls   atomic.Int32
}

func (g *gateNode) Propose(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	g.calls.Add(1)
	id := cmds[0].Cancel.ID
	g.started <- id
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := g.refuse[id]; err != nil {
		return nil, err
	}
	res := make([]raftfsm.Result, len(cmds))
	for i := range res {
		res[i] = raftfsm.Result{Code: raftfsm.CodeOK, Index: 7}
	}
	return res, nil
}

func cancelOf(id string) []raftfsm.Command {
	return []raftfsm.Command{{Type: raftfsm.CmdCancel, Cancel: &raftfsm.Cancel{ID: id}}}
}

// groupServer serves g and counts the group requests and their items.
func groupServer(t *testing.T, g *gateNode, legacy bool) (addr string, groups, items *atomic.Int32) {
	groups, items = &atomic.Int32{}, &atomic.Int32{}
	var s *Server
	s = NewServer(ServerConfig{Node: g, Routes: map[string]fasthttp.RequestHandler{
		PathProposeGroup: func(ctx *fasthttp.RequestCtx) {
			if legacy { // a node from before the group path
				WriteError(ctx, Errorf(ErrNotFound, "no such peer route"))
				return
			}
			groups.Add(1)
			if its, err := decodeGroup(ctx.PostBody(), GroupMax); err == nil {
				items.Add(int32(len(its)))
			}
			s.serveProposeGroup(ctx)
		},
	}})
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s.Addr(), groups, items
}

// waiting is how many proposals wait in c's queue to addr.
func waiting(c *Client, addr string) int {
	q := c.groupQueue(addr)
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting)
}

type answer struct {
	id  string
	res []raftfsm.Result
	err error
}

// While GroupInflight proposals are in flight, the next ones wait and go
// to the leader in one request; each gets its own answer (one refused
// with queue_full, the others committed).
func TestProposeGroupedSendsWaitingProposalsTogether(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("legacy=%v", legacy), func(t *testing.T) {
			g := &gateNode{started: make(chan string, 64), release: make(chan struct{}),
				refuse: map[string]error{"b2": Errorf(ErrQueueFull, "backlog of h full")}}
			addr, groups, items := groupServer(t, g, legacy)
			c := NewClient("", nil)
			ctx := context.Background()
			answers := make(chan answer, 16)
			propose := func(id string) {
				go func() {
					res, err := c.ProposeGrouped(ctx, addr, cancelOf(id))
					answers <- answer{id, res, err}
				}()
			}
			for i := range GroupInflight {
				propose(fmt.Sprintf("a%d", i))
			}
			for range GroupInflight {
				<-g.started // both at the leader, held
			}
			const queued = 5
			for i := range queued {
				propose(fmt.Sprintf("b%d", i))
			}
			for waiting(c, addr) < queued {
				runtime.Gosched()
			}
			close(g.release)
			got := map[string]answer{}
			for range GroupInflight + queued {
				a := <-answers
				got[a.id] = a
			}
			for id, a := range got {
				if id == "b2" {
					if !errors.Is(a.err, ErrQueueFull) {
						t.Errorf("%s: %v, want its own queue_full", id, a.err)
					}
					continue
				}
				if a.err != nil || len(a.res) != 1 || a.res[0].Index != 7 {
					t.Errorf("%s: %+v %v", id, a.res, a.err)
				}
			}
			if n := int(g.calls.Load()); n != GroupInflight+queued {
				t.Errorf("the leader proposed %d times, want %d", n, GroupInflight+queued)
			}
			if legacy {
				if groups.Load() != 0 {
					t.Errorf("%d group requests counted on a legacy node", groups.Load())
				}
				return
			}
			if groups.Load() != 1 || items.Load() != queued {
				t.Errorf("%d group requests with %d proposals, want 1 with %d", groups.Load(), items.Load(), queued)
			}
		})
	}
}

// A caller whose context ends stops waiting; the other proposals of its
// group are answered.
func TestProposeGroupedCallerGivesUp(t *testing.T) {
	g := &gateNode{started: make(chan string, 64), release: make(chan struct{})}
	addr, _, _ := groupServer(t, g, false)
	c := NewClient("", nil)
	var wg sync.WaitGroup
	for i := range GroupInflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.ProposeGrouped(context.Background(), addr, cancelOf(fmt.Sprintf("a%d", i))); err != nil {
				t.Errorf("a%d: %v", i, err)
			}
		}()
	}
	for range GroupInflight {
		<-g.started
	}
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := c.ProposeGrouped(ctx, addr, cancelOf("quitter"))
		gaveUp <- err
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := c.ProposeGrouped(context.Background(), addr, cancelOf("stayer")); err != nil {
			t.Errorf("stayer: %v", err)
		}
	}()
	for waiting(c, addr) < 2 {
		runtime.Gosched()
	}
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("quitter: %v, want context.Canceled", err)
	}
	close(g.release)
	wg.Wait()
	if n := int(g.calls.Load()); n != GroupInflight+1 {
		t.Errorf("the leader proposed %d times, want %d (the quitter is not sent)", n, GroupInflight+1)
	}
}
