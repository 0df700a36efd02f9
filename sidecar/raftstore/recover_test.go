package raftstore

import (
	"context"
	"errors"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/raftfsm"
)

// Recover refuses a data dir without Raft state; without apply it only
// reads the configuration; with apply the node is the only voter at the
// given address, its state is kept, and it elects itself when started
// again.
func TestRecoverMakesTheNodeTheOnlyVoter(t *testing.T) {
	if _, err := Recover(testStoreConfig(t, t.TempDir()), "", true); !errors.Is(err, ErrNoState) {
		t.Fatalf("an empty data dir: %v, want ErrNoState", err)
	}
	dir := t.TempDir()
	cfg := testStoreConfig(t, dir)
	st := startTestStore(t, cfg, nil)
	p := NewProposer(ProposerConfig{Raft: st.Raft, Guard: st.Guard, Clock: cfg.Clock})
	ctx, cancel := context.WithCancel(context.Background())
	go p.Run(ctx)
	if _, err := p.Propose(ctx, []raftfsm.Command{nodeCmd("kept")}); err != nil {
		t.Fatal(err)
	}
	cancel()
	// A second voter that is gone for good: the node alone has no quorum.
	if err := st.Raft.AddVoter("gone", "127.0.0.1:1", 0, 0).Error(); err != nil {
		t.Fatal(err)
	}
	stopTestStore(t, st)

	res, err := Recover(cfg, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Old.Servers) != 2 || len(res.New.Servers) != 1 || string(res.New.Servers[0].Address) != cfg.RaftAdvertise {
		t.Fatalf("dry run: old %v new %v", res.Old.Servers, res.New.Servers)
	}
	res, err = Recover(cfg, "", true)
	if err != nil {
		t.Fatal(err)
	}
	if res.New.Servers[0].ID != raft.ServerID(cfg.NodeID) || res.New.Servers[0].Suffrage != raft.Voter {
		t.Fatalf("recovered configuration %v", res.New.Servers)
	}
	st = startTestStore(t, cfg, nil) // returns once it leads, alone
	defer stopTestStore(t, st)
	f := st.Raft.GetConfiguration()
	if err := f.Error(); err != nil || len(f.Configuration().Servers) != 1 {
		t.Fatalf("configuration after the restart: %v %v", f.Configuration().Servers, err)
	}
	if n, err := st.FSM.Node("kept"); err != nil || n == nil {
		t.Fatalf("the state before the recovery: node s1 %v %v", n, err)
	}
}
