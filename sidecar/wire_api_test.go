package sidecar

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/api"
)

// The waiting reasons a stored task carries itself are spelled in the
// API's views as the scheduler spells them.
func TestWireAPIReasonsAreTheSchedulers(t *testing.T) {
	if api.ReasonExecutorBusy != ReasonExecutorBusy || api.ReasonExecutorUnavailable != ReasonExecutorUnavailable {
		t.Fatalf("api's reasons %q, %q; the scheduler's %q, %q", api.ReasonExecutorBusy, api.ReasonExecutorUnavailable, ReasonExecutorBusy, ReasonExecutorUnavailable)
	}
}

// The errors of the proposal path reach the API with their codes.
func TestWireAPIErrors(t *testing.T) {
	if apiError(nil) != nil {
		t.Fatal("no error became one")
	}
	for _, tc := range []struct {
		err  error
		code string
	}{
		{&BacklogError{Handler: "h", Depth: 5, Limit: 4}, "queue_full"},
		{&StorageUnavailableError{Cause: "disk full", Since: time.UnixMilli(1_700_000_000_000)}, "storage_unavailable"},
		{ErrOutcomeUnknown, "no_leader"},
		{ErrNoLeader, "no_leader"},
		{ErrNotLeader, "no_leader"},
		{raft.ErrLeadershipLost, "no_leader"},
		{context.DeadlineExceeded, "no_leader"},
		{errors.New("disk on fire"), "internal"},
	} {
		if _, code, _, _ := ipc.MapError(apiError(tc.err)); code != tc.code {
			t.Fatalf("%v: code %q, want %q", tc.err, code, tc.code)
		}
	}
	_, _, _, after := ipc.MapError(apiError(&BacklogError{Handler: "h", Depth: 5, Limit: 4}))
	if after != time.Second {
		t.Fatalf("queue_full Retry-After %v, want 1s", after)
	}
}

// A node that knows it was removed from the cluster answers a write at
// once, saying so (no_leader, as any node without a leader), instead of
// waiting for a leader it will never hear of and asking the app to retry:
// by hand, a removed node restarted with its old data answered every
// submit after 2 s with "no leader: the cluster is electing one or has no
// quorum; retry", long after its /readyz said it was removed.
func TestWireAPIRemovedNodeRefusesWritesAtOnce(t *testing.T) {
	n := &Node{} // no Raft, no forwarder: a write must not get that far
	n.removed.Store(true)
	for _, propose := range []func(context.Context, []raftfsm.Command) ([]raftfsm.Result, error){
		apiProposer{n}.Propose, apiProposer{n}.ProposeAPI,
	} {
		_, err := propose(context.Background(), nil)
		status, code, msg, _ := ipc.MapError(err)
		if status != 503 || code != "no_leader" || !strings.Contains(msg, "removed from the cluster") {
			t.Fatalf("write on a removed node: %d %s %q", status, code, msg)
		}
	}
}
