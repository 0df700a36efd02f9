package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	ax "github.com/axsched/ax/clients/go"
)

func TestClusterStatus(t *testing.T) {
	f := startFake(t)
	out, errOut, code := runAx(t, "cluster", "status", "--socket", f.Socket)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{
		"node:           n2 (follower)", "leader:         n1", "term:           7",
		"commit index:   100", "applied index:  95 (lag 5)", "voters:         3 (target 3, failure tolerance 0)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	rows := map[string][]string{}
	for _, l := range strings.Split(out, "\n") {
		if fs := strings.Fields(l); len(fs) > 0 && strings.HasPrefix(fs[0], "n") && len(fs) >= 6 {
			rows[fs[0]] = fs
		}
	}
	// ID ROLE SUFFRAGE STATUS HEALTHY CONTACT APPLIED LAG STABLE-FOR RAFT PEER
	for id, want := range map[string]string{
		"n1": "n1 leader Voter leader yes 0s 100 0 STABLE 127.0.0.1:7420 127.0.0.1:7421",
		"n2": "n2 * follower Voter voter yes 120ms 95 5 - 127.0.0.1:7430 127.0.0.1:7431", // its own applied index
		"n3": "n3 follower Nonvoter staging yes 250ms 90 10 - 127.0.0.1:7440 -",
		"n4": "n4 - Voter voter no never - - - 127.0.0.1:7450 -",
	} {
		if id == "n1" && len(rows[id]) > 8 {
			// Stable for about 90s (wall clock): its own test below.
			if d, err := time.ParseDuration(rows[id][8]); err != nil || d < 90*time.Second {
				t.Errorf("n1 stable for %q", rows[id][8])
			}
			rows[id][8] = "STABLE"
		}
		if r := strings.Join(rows[id], " "); r != want {
			t.Errorf("%s row %q\nwant     %q", id, r, want)
		}
	}

	out, _, code = runAx(t, "cluster", "status", "--socket", f.Socket, "--json")
	var info struct {
		NodeID  string `json:"node_id"`
		Members []struct {
			ID string `json:"id"`
		} `json:"members"`
		CommitIndex uint64 `json:"commit_index"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &info) != nil || info.NodeID != "n2" || len(info.Members) != 4 || info.CommitIndex != 100 {
		t.Errorf("--json: exit %d, %s", code, out)
	}
}

func TestClusterRemoveWithoutRoute(t *testing.T) {
	f := startFake(t)
	out, errOut, code := runAx(t, "cluster", "remove", "n3", "--socket", f.Socket)
	if code != exitAPIError || out != "" {
		t.Errorf("exit %d, stdout %q", code, out)
	}
	if !strings.Contains(errOut, "not supported by this sidecar yet") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("stderr %q", errOut)
	}
	if got := f.lastRequest(); got != "DELETE /v1/cluster/members/n3?" {
		t.Errorf("request %q", got)
	}
}

func TestPrintCluster_StableForAndOldSidecar(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	since := now.Add(-(2*time.Minute + 5*time.Second + 700*time.Millisecond))
	yes := true
	contact := int64(300)
	info := &ax.ClusterInfo{NodeID: "n1", State: "Leader", Leader: "n1", CommitIndex: 10, AppliedIndex: 10,
		Members: []ax.Member{
			{ID: "n1", RaftAddr: "a:1", Suffrage: "Voter", Leader: true},
			{ID: "n2", RaftAddr: "a:2", Suffrage: "Nonvoter", Role: "follower", Status: "nonvoter", Healthy: &yes, LastContactMs: &contact, AppliedIndex: 9, StableSince: &since},
		}}
	var b bytes.Buffer
	if err := printCluster(&b, info, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"n1 *  leader    Voter     -         -        -        10       0    -",
		"n2    follower  Nonvoter  nonvoter  yes      300ms    9        1    2m5s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// An old sidecar (no voters_target, no failure_tolerance): no such line.
	if strings.Contains(out, "voters:") || strings.Contains(out, "failure tolerance") {
		t.Errorf("lines for absent fields:\n%s", out)
	}
}

// After an election the commit index ends on the new leader's no-op and
// barrier, which no node applies: with state_index they are no lag.
func TestPrintCluster_NoLagForEntriesThatChangeNothing(t *testing.T) {
	yes := true
	contact := int64(40)
	info := &ax.ClusterInfo{NodeID: "n1", State: "Leader", Leader: "n1", CommitIndex: 12, StateIndex: 10, AppliedIndex: 10,
		Members: []ax.Member{
			{ID: "n1", RaftAddr: "a:1", Suffrage: "Voter", Leader: true},
			{ID: "n2", RaftAddr: "a:2", Suffrage: "Voter", Role: "follower", Status: "voter", Healthy: &yes, LastContactMs: &contact, AppliedIndex: 10},
			{ID: "n3", RaftAddr: "a:3", Suffrage: "Voter", Role: "follower", Status: "voter", Healthy: &yes, LastContactMs: &contact, AppliedIndex: 8},
		}}
	var b bytes.Buffer
	if err := printCluster(&b, info, time.Now()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"commit index:   12", "applied index:  10 (lag 0)",
		"n1 *  leader    Voter     -       -        -        10       0",
		"n2    follower  Voter     voter   yes      40ms     10       0",
		"n3    follower  Voter     voter   yes      40ms     8        2",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
