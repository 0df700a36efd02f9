package sidecar

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/ipc"
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
