package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/sidecar/peerapi"
)

// apSim drives the reconciler round by round on a fake clock, as the
// leader does: health from the previous round, one decision, the decision
// applied to the configuration.
type apSim struct {
	t       *testing.T
	cfg     autopilotConfig
	since   time.Time
	now     time.Time
	members map[string]*apMember
	order   []string
	health  map[string]apHealth
	log     []string // applied actions
}

var apT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func testAPConfig() autopilotConfig {
	return autopilotConfig{Voters: 3, Stabilization: 10 * time.Second, LastContact: 1500 * time.Millisecond, ReplaceAfter: 10 * time.Second, MaxLag: 250}
}

// newAPSim starts a leader "l" (a voter) at apT0 with the given other
// members: "v:ID" is a voter, "n:ID" a non-voter. Every member is alive and
// caught up until changed.
func newAPSim(t *testing.T, cfg autopilotConfig, members ...string) *apSim {
	s := &apSim{t: t, cfg: cfg, since: apT0, now: apT0, members: map[string]*apMember{}, health: map[string]apHealth{}}
	s.add(&apMember{ID: "l", Voter: true, Leader: true})
	for _, m := range members {
		kind, id, _ := strings.Cut(m, ":")
		s.add(&apMember{ID: id, Voter: kind == "v"})
	}
	for _, m := range s.members {
		m.LastContact = apT0
	}
	return s
}

func (s *apSim) add(m *apMember) {
	s.members[m.ID] = m
	s.order = append(s.order, m.ID)
}

// round advances the clock by d, refreshes the contact of every member
// not in down (down ones keep their last contact), runs one round and
// applies its action. It returns the action.
func (s *apSim) round(d time.Duration, down ...string) apAction {
	s.now = s.now.Add(d)
	isDown := map[string]bool{}
	for _, id := range down {
		isDown[id] = true
	}
	var in []apMember
	for _, id := range s.order {
		m := s.members[id]
		if !isDown[id] {
			m.LastContact = s.now
		}
		in = append(in, *m)
	}
	s.health = autopilotHealth(s.cfg, in, s.health, s.since, s.now)
	act := autopilotDecide(s.cfg, in, s.health, s.now)
	switch act.Kind {
	case apPromote:
		s.members[act.ID].Voter = true
		s.log = append(s.log, "promote "+act.ID)
	case apDemote:
		s.members[act.ID].Voter = false
		s.log = append(s.log, "demote "+act.ID)
	case apRemove:
		delete(s.members, act.ID)
		for i, id := range s.order {
			if id == act.ID {
				s.order = append(s.order[:i], s.order[i+1:]...)
				break
			}
		}
		s.log = append(s.log, "remove "+act.ID)
	}
	return act
}

// rounds runs n one-second rounds and returns the actions taken, each as
// "T+Ns promote ID".
func (s *apSim) rounds(n int, down ...string) []string {
	var out []string
	for i := 0; i < n; i++ {
		if act := s.round(time.Second, down...); act.Kind != apNone {
			out = append(out, "T+"+s.now.Sub(apT0).String()+" "+strings.Fields(act.String())[0]+" "+act.ID)
		}
	}
	return out
}

func (s *apSim) voters() []string {
	var out []string
	for _, id := range s.order {
		if s.members[id].Voter {
			out = append(out, id)
		}
	}
	return out
}

func eqStrings(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }

func TestAutopilot_PromotesAfterStabilizationNotBefore(t *testing.T) {
	s := newAPSim(t, testAPConfig(), "v:a", "n:b")
	// b has been healthy since the first round (T+1s): stable at T+11s.
	for i := 1; i <= 10; i++ {
		if act := s.round(time.Second); act.Kind != apNone {
			t.Fatalf("round at T+%ds: %v, want nothing before the stabilization time", i, act)
		}
	}
	act := s.round(time.Second)
	if act.Kind != apPromote || act.ID != "b" {
		t.Fatalf("at T+11s: %v, want promote b", act)
	}
	if got := s.voters(); !eqStrings(got, []string{"l", "a", "b"}) {
		t.Fatalf("voters %v", got)
	}
	if got := s.rounds(30); got != nil {
		t.Fatalf("at the target: %v, want nothing", got)
	}
}

func TestAutopilot_NotBeyondTarget(t *testing.T) {
	s := newAPSim(t, testAPConfig(), "v:a", "v:b", "n:c", "n:d")
	if got := s.rounds(60); got != nil {
		t.Fatalf("3 voters, target 3: %v, want nothing", got)
	}
	// Five, with a target of five: both promoted, one per round.
	cfg := testAPConfig()
	cfg.Voters = 5
	s = newAPSim(t, cfg, "v:a", "v:b", "n:c", "n:d", "n:e")
	got := s.rounds(30)
	if !eqStrings(got, []string{"T+11s promote c", "T+12s promote d"}) {
		t.Fatalf("target 5: %v", got)
	}
	if v := s.voters(); len(v) != 5 {
		t.Fatalf("voters %v", v)
	}
}

func TestAutopilot_ReplacesFailedVoter(t *testing.T) {
	s := newAPSim(t, testAPConfig(), "v:a", "v:b", "n:c")
	// c is stable from T+11s, but nothing is missing.
	if got := s.rounds(15); got != nil {
		t.Fatalf("healthy cluster: %v", got)
	}
	// b goes silent at T+15s: it has failed from T+25s; then c is
	// promoted, and b demoted in the next round.
	got := s.rounds(20, "b")
	if !eqStrings(got, []string{"T+25s promote c", "T+26s demote b"}) {
		t.Fatalf("replacement: %v", got)
	}
	if v := s.voters(); !eqStrings(v, []string{"l", "a", "c"}) {
		t.Fatalf("voters %v", v)
	}
	// b comes back: a healthy spare, never promoted again (target met).
	if got := s.rounds(30); got != nil {
		t.Fatalf("after b's return: %v", got)
	}
	if st := s.status("b"); st != apStatusNonvoter {
		t.Fatalf("b's status %q", st)
	}
}

func TestAutopilot_NoReplacementWithoutStableNonvoter(t *testing.T) {
	// A dead voter and a non-voter that is still stabilizing: nothing
	// until it is stable; a dead voter is never demoted without a
	// replacement (the voter count stays at the target).
	s := newAPSim(t, testAPConfig(), "v:a", "v:b")
	if got := s.rounds(30, "b"); got != nil {
		t.Fatalf("no non-voter: %v", got)
	}
	s.add(&apMember{ID: "c", LastContact: s.now})
	got := s.rounds(15, "b")
	if !eqStrings(got, []string{"T+41s promote c", "T+42s demote b"}) {
		t.Fatalf("%v", got)
	}
}

func TestAutopilot_NeverUnsafe(t *testing.T) {
	// Target lowered to 3 with 5 voters of which 3 are dead: demoting any
	// dead one leaves 4 voters with 2 alive, no quorum. Nothing happens.
	s := newAPSim(t, testAPConfig(), "v:a", "v:b", "v:c", "v:d")
	s.silent("a", "b", "c")
	if got := s.rounds(60, "a", "b", "c"); got != nil {
		t.Fatalf("unsafe demotion: %v", got)
	}
	// Two of three voters dead (the leader has no quorum): promoting a
	// stable non-voter would make 4 voters with 2 alive. Nothing.
	s = newAPSim(t, testAPConfig(), "v:a", "v:b", "n:c")
	s.silent("a", "b")
	if got := s.rounds(60, "a", "b"); got != nil {
		t.Fatalf("unsafe promotion: %v", got)
	}
	// Target 1 with 2 voters, the other one alive: demote it (1 of 1 is
	// a quorum). The leader ("l", above "a" by id) is never the one.
	cfg := testAPConfig()
	cfg.Voters = 1
	s = newAPSim(t, cfg, "v:a")
	if got := s.rounds(3); !eqStrings(got, []string{"T+1s demote a"}) {
		t.Fatalf("target 1: %v", got)
	}
	// Target 1, 3 voters, both others dead: demoting one leaves 2 voters
	// with 1 alive. Nothing.
	s = newAPSim(t, cfg, "v:a", "v:b")
	s.silent("a", "b")
	if got := s.rounds(30, "a", "b"); got != nil {
		t.Fatalf("target 1, no quorum: %v", got)
	}
}

// silent makes members never heard from by this leader.
func (s *apSim) silent(ids ...string) {
	for _, id := range ids {
		s.members[id].LastContact = time.Time{}
	}
}

func TestAutopilot_FlapResetsStableTime(t *testing.T) {
	s := newAPSim(t, testAPConfig(), "v:a", "n:b")
	if got := s.rounds(8); got != nil { // healthy T+1s..T+8s
		t.Fatal(got)
	}
	// b silent for 2 s: unhealthy at T+10s.
	if got := s.rounds(2, "b"); got != nil {
		t.Fatal(got)
	}
	if h := s.health["b"]; h.Healthy || !h.StableSince.IsZero() {
		t.Fatalf("b after its flap: %+v", h)
	}
	// Healthy again from T+11s: promoted at T+21s, not earlier.
	got := s.rounds(15)
	if !eqStrings(got, []string{"T+21s promote b"}) {
		t.Fatalf("%v", got)
	}
}

func TestAutopilot_LaggingNonvoterIsNotPromoted(t *testing.T) {
	s := newAPSim(t, testAPConfig(), "v:a", "n:b")
	s.members["b"].Applied, s.members["b"].Commit = 100, 100+251
	if got := s.rounds(20); got != nil {
		t.Fatalf("lagging: %v", got)
	}
	if st := s.status("b"); st != apStatusNonvoter || s.health["b"].Healthy {
		t.Fatalf("b: %q %+v", st, s.health["b"])
	}
	s.members["b"].Applied = 101 // within 250
	if st := s.status("b"); st != apStatusNonvoter {
		t.Fatalf("b before the next round: %q", st)
	}
	got := s.rounds(12)
	if !eqStrings(got, []string{"T+31s promote b"}) {
		t.Fatalf("%v", got)
	}
}

func TestAutopilot_NewLeaderGivesEveryoneReplaceAfter(t *testing.T) {
	// A member the new leader has never heard from fails ReplaceAfter
	// after the election, not at once.
	s := newAPSim(t, testAPConfig(), "v:a", "v:b", "n:c")
	s.members["b"].LastContact = time.Time{}
	got := s.rounds(15, "b")
	if !eqStrings(got, []string{"T+11s promote c", "T+12s demote b"}) {
		t.Fatalf("%v", got)
	}
	if h := s.health["b"]; h.Failed {
		t.Fatalf("b is a non-voter now; failed applies to voters: %+v", h)
	}
	// Before ReplaceAfter: not failed.
	s = newAPSim(t, testAPConfig(), "v:a", "v:b", "n:c")
	s.members["b"].LastContact = time.Time{}
	s.rounds(9, "b")
	if s.health["b"].Failed {
		t.Fatalf("b failed after 9s")
	}
}

func TestAutopilot_Status(t *testing.T) {
	s := newAPSim(t, testAPConfig(), "v:a", "n:b", "n:c")
	s.members["c"].LastContact = time.Time{}
	s.round(time.Second, "c")
	for id, want := range map[string]string{"l": apStatusLeader, "a": apStatusVoter, "b": apStatusStaging, "c": apStatusNonvoter} {
		if got := s.status(id); got != want {
			t.Errorf("%s: status %q, want %q", id, got, want)
		}
	}
}

func (s *apSim) status(id string) string {
	var in []apMember
	for _, o := range s.order {
		in = append(in, *s.members[o])
	}
	return autopilotStatus(s.cfg, in, s.health, *s.members[id])
}

func TestBootstrapServers(t *testing.T) {
	seen := map[string]peerapi.Info{}
	for _, id := range []string{"n5", "n2", "n4", "n1", "n3"} {
		seen[id] = peerapi.Info{ID: id, RaftAddr: id + ":1"}
	}
	var got []string
	for _, s := range bootstrapServers(seen, 3) {
		got = append(got, string(s.ID)+"="+s.Suffrage.String())
	}
	if want := "n1=Voter,n2=Voter,n3=Voter,n4=Nonvoter,n5=Nonvoter"; strings.Join(got, ",") != want {
		t.Fatalf("%v, want %s", got, want)
	}
	for _, s := range bootstrapServers(seen, 5) {
		if s.Suffrage != raft.Voter {
			t.Fatalf("target 5: %v", s)
		}
	}
}

// A member not heard from for DeadAfter is removed: a non-voter at once, a
// voter that was replaced after it failed, and a voter nobody could
// replace, as long as the voters alive keep a quorum; never before
// DeadAfter, never with DeadAfter 0.
func TestAutopilot_RemovesDeadMembers(t *testing.T) {
	cfg := testAPConfig()
	cfg.DeadAfter = time.Minute
	s := newAPSim(t, cfg, "v:a", "v:b", "n:c")
	if got := s.rounds(90, "c"); !eqStrings(got, []string{"T+1m0s remove c"}) {
		t.Fatalf("dead non-voter: %v", got)
	}
	// A voter replaced by a stable spare when it failed, removed when dead.
	s = newAPSim(t, cfg, "v:a", "v:b", "n:c")
	s.rounds(15)
	got := s.rounds(90, "b")
	if !eqStrings(got, []string{"T+25s promote c", "T+26s demote b", "T+1m15s remove b"}) {
		t.Fatalf("replaced voter: %v", got)
	}
	// A voter with no spare to stand in: removed when dead (2 alive of 3
	// voters are a quorum of the 2 left).
	s = newAPSim(t, cfg, "v:a", "v:b")
	if got := s.rounds(90, "b"); !eqStrings(got, []string{"T+1m0s remove b"}) {
		t.Fatalf("unreplaced voter: %v", got)
	}
	if v := s.voters(); !eqStrings(v, []string{"l", "a"}) {
		t.Fatalf("voters %v", v)
	}
	// Three dead of five voters: the two alive are no quorum of any
	// smaller set; nothing is removed. (The dead non-voter is.)
	cfg5 := cfg
	cfg5.Voters = 5
	s = newAPSim(t, cfg5, "v:a", "v:b", "v:c", "v:d", "n:e")
	s.silent("a", "b", "c", "e")
	if got := s.rounds(120, "a", "b", "c", "e"); !eqStrings(got, []string{"T+1m0s remove e"}) {
		t.Fatalf("no quorum among the alive: %v", got)
	}
	// Off.
	s = newAPSim(t, testAPConfig(), "v:a", "v:b", "n:c")
	if got := s.rounds(7200, "b", "c"); got != nil {
		t.Fatalf("cleanup off: %v", got)
	}
}

// A new leader counts DeadAfter from its election for members it never
// heard from, as it does ReplaceAfter.
func TestAutopilot_DeadCountedFromElection(t *testing.T) {
	cfg := testAPConfig()
	cfg.DeadAfter = time.Minute
	s := newAPSim(t, cfg, "v:a", "n:c")
	s.members["c"].LastContact = time.Time{} // never heard from this term
	s.since = apT0.Add(30 * time.Second)     // elected at T+30s
	got := s.rounds(120, "c")
	if !eqStrings(got, []string{"T+1m30s remove c"}) {
		t.Fatalf("%v", got)
	}
}
