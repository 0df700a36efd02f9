package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestClusterStatus(t *testing.T) {
	f := startFake(t)
	out, errOut, code := runAx(t, "cluster", "status", "--socket", f.Socket)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{
		"node:           n2 (follower)", "leader:         n1", "term:           7",
		"commit index:   100", "applied index:  95 (lag 5)",
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
	if r := rows["n1"]; strings.Join(r, " ") != "n1 leader Voter 127.0.0.1:7420 127.0.0.1:7421 - -" {
		t.Errorf("n1 row %q", r)
	}
	if r := rows["n2"]; strings.Join(r, " ") != "n2 * follower Voter 127.0.0.1:7430 127.0.0.1:7431 95 5" {
		t.Errorf("n2 row %q", r)
	}
	if r := rows["n3"]; strings.Join(r, " ") != "n3 learner Nonvoter 127.0.0.1:7440 - - -" {
		t.Errorf("n3 row %q", r)
	}

	out, _, code = runAx(t, "cluster", "status", "--socket", f.Socket, "--json")
	var info struct {
		NodeID  string `json:"node_id"`
		Members []struct {
			ID string `json:"id"`
		} `json:"members"`
		CommitIndex uint64 `json:"commit_index"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &info) != nil || info.NodeID != "n2" || len(info.Members) != 3 || info.CommitIndex != 100 {
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
