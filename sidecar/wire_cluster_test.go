package sidecar

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/config"
	"github.com/axsched/ax/sidecar/peerapi"
)

func TestConfig_Autopilot(t *testing.T) {
	base := Config{NodeID: "n1", RaftAddr: "127.0.0.1:1", PeerAddr: "127.0.0.1:2"}
	c := base.WithDefaults()
	if c.Voters != 3 || c.AutopilotStabilization != 10*time.Second || c.AutopilotReplaceAfter != 10*time.Second || c.Validate() != nil {
		t.Fatalf("defaults: %d %v %v %v", c.Voters, c.AutopilotStabilization, c.AutopilotReplaceAfter, c.Validate())
	}
	for _, v := range []int{1, 3, 5, 9} {
		c := base
		c.Voters = v
		if err := c.WithDefaults().Validate(); err != nil {
			t.Errorf("voters %d: %v", v, err)
		}
	}
	for _, v := range []int{-1, 2, 4, 11} {
		c := base
		c.Voters = v
		if err := c.WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), "voters") {
			t.Errorf("voters %d: %v", v, err)
		}
	}
	c = base
	c.AutopilotStabilization = -time.Second
	if err := c.WithDefaults().Validate(); err == nil {
		t.Errorf("negative stabilization accepted")
	}
	c = base
	c.AutopilotReplaceAfter = time.Second
	if err := c.WithDefaults().Validate(); err == nil {
		t.Errorf("replace-after 1s accepted")
	}
}

// A submit forwarded to a leader whose storage takes no writes fails as
// it does on the leader itself, 503 storage_unavailable with the cause,
// not as no_leader: the peer API carries the error's code and the
// forwarding node rebuilds the leader's error from it.
func TestForwardedSubmitReachesStorageUnavailable(t *testing.T) {
	dir := t.TempDir()
	a := freeAddrs(t, 4)
	cfg := func(i int) Config {
		return Config{NodeID: fmt.Sprintf("f%d", i), DataDir: filepath.Join(dir, fmt.Sprintf("d%d", i)), Socket: filepath.Join(dir, fmt.Sprintf("s%d.sock", i)),
			RaftAddr: a[2*i], PeerAddr: a[2*i+1], Voters: 1} // one voter: leadership cannot move away from n1
	}
	n1 := startTestNode(t, cfg(0))
	waitUntil(t, "f0 ready", func() bool { return n1.Ready(context.Background()) == nil })
	c2 := cfg(1)
	c2.Join = []string{a[1]}
	n2 := startTestNode(t, c2)
	waitUntil(t, "f1 ready", func() bool { return n2.Ready(context.Background()) == nil })

	ch := n1.storage.Changed()
	n1.storage.SetReserve(1 << 62) // more than any disk has free
	n1.storage.Probe()
	<-ch
	t.Cleanup(func() { // before the nodes stop
		n1.storage.SetReserve(config.StorageReserveDefault)
		n1.storage.Probe()
	})

	// The leader holds the write while its storage is down, until nine
	// tenths of the caller's time (peerapi.DeadlineHeader).
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, _, err := n2.Submit(ctx, ipc.TaskSpec{ID: "a", Handler: "h", Delay: time.Hour})
	status, code, msg, _ := ipc.MapError(err)
	if status != 503 || code != "storage_unavailable" || !strings.Contains(msg, "below the reserve") {
		t.Fatalf("forwarded submit: %d %s %q (%v), want 503 storage_unavailable naming the cause", status, code, msg, err)
	}
}

// The errors of the local proposal path cross the peer API as
// themselves: what the leader's propose returned is what the forwarding
// node's propose returns.
func TestPeerProposeErrorsRoundTrip(t *testing.T) {
	since := time.UnixMilli(time.Now().UnixMilli())
	for _, want := range []error{
		ErrNotLeader,
		&BacklogError{Handler: "h", Depth: 7, Limit: 5},
		&StorageUnavailableError{Cause: "data dir /x: 1 MiB free, below the reserve", Since: since},
	} {
		srv := peerapi.NewServer(peerapi.ServerConfig{Node: proposeFails{peerError(want)}})
		if err := srv.Listen("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		p := newPeerClient("", engine.RealClock())
		_, got := p.propose(context.Background(), srv.Addr(), []raftfsm.Command{{Type: raftfsm.CmdCancel}})
		srv.Close()
		var be *BacklogError
		var se *StorageUnavailableError
		switch w := want.(type) {
		case *BacklogError:
			if !errors.As(got, &be) || *be != *w {
				t.Errorf("backlog: got %#v, want %#v", got, w)
			}
		case *StorageUnavailableError:
			if !errors.As(got, &se) || se.Cause != w.Cause || !se.Since.Equal(w.Since) {
				t.Errorf("storage: got %#v, want %#v", got, w)
			}
		default:
			if !errors.Is(got, want) {
				t.Errorf("got %v, want %v", got, want)
			}
		}
		if leaderRefused(got) != leaderRefused(want) {
			t.Errorf("%v: leaderRefused %v, want %v", want, leaderRefused(got), leaderRefused(want))
		}
	}
}

// proposeFails is a peerapi.Node whose proposals fail with err.
type proposeFails struct{ err error }

func (f proposeFails) Info() peerapi.Info                                { return peerapi.Info{} }
func (f proposeFails) Join(context.Context, peerapi.Info) error          { return f.err }
func (f proposeFails) Report(peerapi.LoadReport) peerapi.ReportReply     { return peerapi.ReportReply{} }
func (f proposeFails) Remove(context.Context, string) error              { return f.err }
func (f proposeFails) Members() (map[string]peerapi.MemberStatus, error) { return nil, f.err }
func (f proposeFails) Propose(context.Context, []raftfsm.Command) ([]raftfsm.Result, error) {
	return nil, f.err
}
func (f proposeFails) Task(context.Context, string, bool) (*raftfsm.Task, uint64, error) {
	return nil, 0, f.err
}
