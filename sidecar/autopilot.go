package sidecar

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Autopilot keeps the Raft configuration at a target number of voters
// (Config.Voters, 3 or 5) and the other members as non-voters, on the model
// of Consul's autopilot (server health, server stabilization time, dead
// server replacement; see hashicorp/raft-autopilot):
//
//   - A node that joins through the peer API is added as a non-voter.
//   - A member is healthy when the leader heard its load report within
//     autopilotLastContact and its applied index then was within
//     autopilotMaxLag entries of the leader's commit index (Consul:
//     LastContactThreshold and MaxTrailingLogs).
//   - A non-voter that stayed healthy for Config.AutopilotStabilization
//     (Consul: ServerStabilizationTime, 10 s) is stable. A flap (one
//     unhealthy round) restarts its stabilization.
//   - While there are fewer voters than the target, the leader promotes a
//     stable non-voter.
//   - A voter not heard from for Config.AutopilotReplaceAfter has failed:
//     the leader promotes a stable non-voter in its place, then (voters
//     now above the target) demotes the failed voter to a non-voter. It
//     stays a member; once it is back it is a spare.
//   - One change per round (every autopilotInterval), each conditioned on
//     the configuration index it was computed from; a change is made only
//     when the voters that are alive still form a quorum of the new voter
//     set, so autopilot never costs the cluster its quorum. The leader
//     itself is never demoted.
//
// Only the leader acts; a new leader starts with no stabilization history
// (every non-voter stabilizes again) and gives every member
// AutopilotReplaceAfter from its election before it counts it as failed.
// Removed and departed nodes are not in the configuration, so they are
// never candidates.
const (
	// autopilotInterval is how often the leader reconciles.
	autopilotInterval = time.Second
	// autopilotLastContact is how recent a member's last load report
	// (sent every reportInterval) must be for it to count as alive and
	// healthy (Consul: LastContactThreshold, 200 ms of Raft contact there;
	// five reports here).
	autopilotLastContact = 1500 * time.Millisecond
	// autopilotMaxLag is how many entries a member's applied index may
	// trail the leader's commit index and still be healthy (Consul:
	// MaxTrailingLogs).
	autopilotMaxLag = 250
	// autopilotMaxVoters bounds Config.Voters.
	autopilotMaxVoters = 9
)

// Autopilot status of a member (GET /v1/cluster's members[].status).
const (
	apStatusLeader   = "leader"
	apStatusVoter    = "voter"
	apStatusNonvoter = "nonvoter"
	// apStatusStaging is a healthy non-voter that autopilot will promote
	// once it is stable: the cluster is short of voters, or has a failed
	// one (Consul's "staging").
	apStatusStaging = "staging"
)

// validateAutopilot checks the autopilot fields of a config filled by
// WithDefaults.
func (c Config) validateAutopilot() error {
	if c.Voters < 1 || c.Voters > autopilotMaxVoters || c.Voters%2 == 0 {
		return fmt.Errorf("voters %d: want an odd number from 1 to %d (3 or 5 for most clusters)", c.Voters, autopilotMaxVoters)
	}
	if c.AutopilotStabilization < 0 {
		return fmt.Errorf("autopilot stabilization %v: must not be negative", c.AutopilotStabilization)
	}
	if c.AutopilotReplaceAfter < 2*autopilotLastContact {
		return fmt.Errorf("autopilot replace-after %v: at least %v", c.AutopilotReplaceAfter, 2*autopilotLastContact)
	}
	return nil
}

// autopilotConfig is what the reconciler's decisions depend on.
type autopilotConfig struct {
	Voters        int           // target number of voters
	Stabilization time.Duration // healthy this long before a promotion
	LastContact   time.Duration // heard from within this: alive
	ReplaceAfter  time.Duration // a voter unheard this long has failed
	MaxLag        uint64        // applied index at most this far behind the commit index
}

// apMember is the reconciler's input about one server of the Raft
// configuration.
type apMember struct {
	ID     string
	Voter  bool
	Leader bool // the leader running the reconciler
	// LastContact is when the leader last heard from the member (zero:
	// not since it leads); Applied the member's applied index then, and
	// Commit the leader's commit index then.
	LastContact time.Time
	Applied     uint64
	Commit      uint64
}

// apHealth is what the reconciler knows about a member after a round, and
// remembers for the next one.
type apHealth struct {
	Alive   bool // heard from within LastContact (the leader always is)
	Healthy bool // alive and caught up (within MaxLag)
	// Failed: a voter not heard from for ReplaceAfter (counted from the
	// leader's election when never heard from).
	Failed bool
	// StableSince is when the member's current healthy streak began; zero
	// while unhealthy.
	StableSince time.Time
}

// apActionKind is what the reconciler decided.
type apActionKind int

const (
	apNone apActionKind = iota
	apPromote
	apDemote
)

// apAction is the reconciler's decision for one round.
type apAction struct {
	Kind   apActionKind
	ID     string
	Reason string
}

func (a apAction) String() string {
	switch a.Kind {
	case apPromote:
		return "promote " + a.ID + " (" + a.Reason + ")"
	case apDemote:
		return "demote " + a.ID + " (" + a.Reason + ")"
	}
	return "none"
}

// quorum is the majority of n voters.
func quorum(n int) int { return n/2 + 1 }

// autopilotHealth computes every member's health at now from the inputs
// and the previous round's health (for the healthy streaks). since is when
// the leader took office.
func autopilotHealth(cfg autopilotConfig, members []apMember, prev map[string]apHealth, since, now time.Time) map[string]apHealth {
	out := make(map[string]apHealth, len(members))
	for _, m := range members {
		var h apHealth
		if m.Leader {
			h.Alive, h.Healthy = true, true
		} else {
			heard := !m.LastContact.IsZero() && now.Sub(m.LastContact) <= cfg.LastContact
			h.Alive = heard
			h.Healthy = heard && m.Applied+cfg.MaxLag >= m.Commit
			last := m.LastContact
			if last.IsZero() || last.Before(since) {
				last = since
			}
			h.Failed = m.Voter && now.Sub(last) >= cfg.ReplaceAfter
		}
		if h.Healthy {
			h.StableSince = now
			if p, ok := prev[m.ID]; ok && p.Healthy && !p.StableSince.IsZero() {
				h.StableSince = p.StableSince
			}
		}
		out[m.ID] = h
	}
	return out
}

// autopilotDecide picks at most one configuration change from the
// members and their health at now. It is a pure function of its inputs.
func autopilotDecide(cfg autopilotConfig, members []apMember, health map[string]apHealth, now time.Time) apAction {
	var voters, aliveVoters int
	var candidates, failed, others []apMember
	for _, m := range members {
		h := health[m.ID]
		switch {
		case m.Voter:
			voters++
			if h.Alive {
				aliveVoters++
			}
			if m.Leader {
				continue
			}
			if h.Failed {
				failed = append(failed, m)
			} else {
				others = append(others, m)
			}
		case h.Healthy && now.Sub(h.StableSince) >= cfg.Stabilization:
			candidates = append(candidates, m)
		}
	}
	// The candidate stable the longest first; then by id.
	sort.Slice(candidates, func(i, j int) bool {
		si, sj := health[candidates[i].ID].StableSince, health[candidates[j].ID].StableSince
		if !si.Equal(sj) {
			return si.Before(sj)
		}
		return candidates[i].ID < candidates[j].ID
	})
	// The voter unheard the longest first; then by id.
	sort.Slice(failed, func(i, j int) bool {
		if !failed[i].LastContact.Equal(failed[j].LastContact) {
			return failed[i].LastContact.Before(failed[j].LastContact)
		}
		return failed[i].ID < failed[j].ID
	})

	// Promote: to reach the target, or to stand in for a failed voter.
	if len(candidates) > 0 && (voters < cfg.Voters || (len(failed) > 0 && voters <= cfg.Voters)) {
		c := candidates[0]
		// The candidate is alive: the new voter set keeps a quorum of
		// alive voters only if this holds.
		if aliveVoters+1 >= quorum(voters+1) {
			reason := fmt.Sprintf("stable for %s; %d of %d voters", now.Sub(health[c.ID].StableSince).Round(time.Millisecond), voters, cfg.Voters)
			if voters >= cfg.Voters {
				reason = fmt.Sprintf("stable for %s; replaces failed voter %s", now.Sub(health[c.ID].StableSince).Round(time.Millisecond), failed[0].ID)
			}
			return apAction{Kind: apPromote, ID: c.ID, Reason: reason}
		}
	}
	// Demote: a voter above the target, a failed one first.
	if voters > cfg.Voters {
		var victim apMember
		switch {
		case len(failed) > 0:
			victim = failed[0]
		case len(others) > 0:
			// Above the target with no failed voter (the target was
			// lowered): the voter heard from the longest ago, else the
			// highest id.
			sort.Slice(others, func(i, j int) bool {
				hi, hj := health[others[i].ID], health[others[j].ID]
				if hi.Alive != hj.Alive {
					return !hi.Alive
				}
				if hi.Healthy != hj.Healthy {
					return !hi.Healthy
				}
				return others[i].ID > others[j].ID
			})
			victim = others[0]
		default:
			return apAction{}
		}
		alive := aliveVoters
		if health[victim.ID].Alive {
			alive--
		}
		if alive >= quorum(voters-1) {
			reason := fmt.Sprintf("%d voters, target %d", voters, cfg.Voters)
			if health[victim.ID].Failed {
				reason = "failed: not heard from for " + lastHeard(victim, now)
			}
			return apAction{Kind: apDemote, ID: victim.ID, Reason: reason}
		}
	}
	return apAction{}
}

func lastHeard(m apMember, now time.Time) string {
	if m.LastContact.IsZero() {
		return "this whole term"
	}
	return now.Sub(m.LastContact).Round(time.Millisecond).String()
}

// autopilotStatus is a member's autopilot status (apStatus*).
func autopilotStatus(cfg autopilotConfig, members []apMember, health map[string]apHealth, m apMember) string {
	switch {
	case m.Leader:
		return apStatusLeader
	case m.Voter:
		return apStatusVoter
	}
	voters, failed := 0, false
	for _, o := range members {
		if o.Voter {
			voters++
			failed = failed || health[o.ID].Failed
		}
	}
	if health[m.ID].Healthy && (voters < cfg.Voters || (failed && voters <= cfg.Voters)) {
		return apStatusStaging
	}
	return apStatusNonvoter
}

// apReport is the leader's record of a member's last load report.
type apReport struct {
	at      time.Time
	applied uint64 // the member's applied index
	commit  uint64 // the leader's commit index when the report arrived
	role    string // the member's Raft state, lower case
}

// autopilot runs the reconciler on the leader and keeps what GET
// /v1/cluster shows about each member.
type autopilot struct {
	n   *Node
	cfg autopilotConfig
	now func() time.Time

	mu      sync.Mutex
	reports map[string]apReport
	health  map[string]apHealth // the last round's, while leading
	since   time.Time           // when this node took office; zero when not leading
	term    uint64
}

func newAutopilot(n *Node) *autopilot {
	return &autopilot{
		n: n,
		cfg: autopilotConfig{
			Voters: n.cfg.Voters, Stabilization: n.cfg.AutopilotStabilization,
			LastContact: autopilotLastContact, ReplaceAfter: n.cfg.AutopilotReplaceAfter, MaxLag: autopilotMaxLag,
		},
		now:     time.Now,
		reports: map[string]apReport{},
		health:  map[string]apHealth{},
	}
}

// observe records a member's load report; commit is the leader's commit
// index on its arrival.
func (a *autopilot) observe(r loadReport, commit uint64) {
	a.mu.Lock()
	a.reports[r.ID] = apReport{at: a.now(), applied: r.Applied, commit: commit, role: strings.ToLower(r.State)}
	a.mu.Unlock()
}

// run reconciles every autopilotInterval until ctx ends.
func (a *autopilot) run(ctx context.Context) {
	t := time.NewTicker(autopilotInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.round(ctx)
	}
}

// round is one reconciliation: on a follower it only forgets the
// leader's state.
func (a *autopilot) round(ctx context.Context) {
	n := a.n
	if n.raft.State() != raft.Leader {
		a.mu.Lock()
		a.since, a.health = time.Time{}, map[string]apHealth{}
		a.mu.Unlock()
		return
	}
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	conf, confIndex := f.Configuration(), f.Index()
	term := n.term()
	now := a.now()

	a.mu.Lock()
	if a.since.IsZero() || term != a.term {
		a.since, a.term, a.health = now, term, map[string]apHealth{}
	}
	members := a.membersLocked(conf, now)
	a.health = autopilotHealth(a.cfg, members, a.health, a.since, now)
	act := autopilotDecide(a.cfg, members, a.health, now)
	a.mu.Unlock()

	if act.Kind == apNone {
		return
	}
	var addr raft.ServerAddress
	for _, s := range conf.Servers {
		if string(s.ID) == act.ID {
			addr = s.Address
		}
	}
	var err error
	switch act.Kind {
	case apPromote:
		err = n.raft.AddVoter(raft.ServerID(act.ID), addr, confIndex, peerTimeout).Error()
	case apDemote:
		err = n.raft.DemoteVoter(raft.ServerID(act.ID), confIndex, peerTimeout).Error()
	}
	if err != nil {
		n.log.Warn().Err(err).Str("member", act.ID).Str("action", act.String()).Msg("autopilot: configuration change failed")
		return
	}
	n.log.Info().Str("member", act.ID).Str("action", act.String()).Msg("autopilot: configuration changed")
}

// membersLocked builds the reconciler's input from the configuration and
// the reports. a.mu is held.
func (a *autopilot) membersLocked(conf raft.Configuration, now time.Time) []apMember {
	self := a.n.cfg.NodeID
	out := make([]apMember, 0, len(conf.Servers))
	for _, s := range conf.Servers {
		m := apMember{ID: string(s.ID), Voter: s.Suffrage == raft.Voter, Leader: string(s.ID) == self}
		if m.Leader {
			m.LastContact, m.Applied, m.Commit = now, a.n.fsm.AppliedIndex(), a.n.raft.CommitIndex()
		} else if r, ok := a.reports[m.ID]; ok {
			m.LastContact, m.Applied, m.Commit = r.at, r.applied, r.commit
		}
		out = append(out, m)
	}
	return out
}

// memberStatus is the leader's view of one member: the reply of the peer
// API's /peer/v1/members (by member id) and the source of GET
// /v1/cluster's per-member fields. Its JSON is a superset of memberView's.
type memberStatus struct {
	memberView
	// Role is the member's Raft state at its last report: leader,
	// follower or candidate ("" when not heard from).
	Role string `json:"role,omitempty"`
	// Status is autopilot's: leader, voter, nonvoter or staging.
	Status string `json:"status,omitempty"`
	// Healthy: heard from recently and caught up (autopilot's rule).
	Healthy bool `json:"healthy"`
	// StableSinceMs is when the current healthy streak began (Unix ms; 0
	// when unhealthy).
	StableSinceMs int64 `json:"stable_since_ms,omitempty"`
}

// statuses returns the leader's view of every member of conf, as of the
// last reconciliation round (health) and the latest reports (contact).
func (a *autopilot) statuses(conf raft.Configuration) map[string]memberStatus {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	members := a.membersLocked(conf, now)
	out := make(map[string]memberStatus, len(members))
	for _, m := range members {
		h := a.health[m.ID]
		st := memberStatus{Healthy: h.Healthy, Status: autopilotStatus(a.cfg, members, a.health, m)}
		if !h.StableSince.IsZero() {
			st.StableSinceMs = h.StableSince.UnixMilli()
		}
		st.AppliedIndex = m.Applied
		switch {
		case m.Leader:
			st.Reachable, st.LastContactMs, st.Role, st.Healthy = true, 0, "leader", true
		case m.LastContact.IsZero():
			st.LastContactMs = -1
		default:
			age := now.Sub(m.LastContact)
			st.Reachable, st.LastContactMs = age <= a.cfg.LastContact, age.Milliseconds()
			st.Role = a.reports[m.ID].role
		}
		out[m.ID] = st
	}
	return out
}

// memberStatuses is the leader's view of every member in its current
// configuration (nil when that cannot be read).
func (n *Node) memberStatuses() map[string]memberStatus {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	return n.autopilot.statuses(f.Configuration())
}

// bootstrapServers is the configuration a --bootstrap-expect set starts
// with: every node sorted by id, the first voters of them voters and the
// rest non-voters (autopilot promotes them if a voter fails). Every node of
// the set computes the same.
func bootstrapServers(seen map[string]peerInfo, voters int) []raft.Server {
	var servers []raft.Server
	for _, pi := range seen {
		servers = append(servers, raft.Server{ID: raft.ServerID(pi.ID), Address: raft.ServerAddress(pi.RaftAddr), Suffrage: raft.Voter})
	}
	sort.Slice(servers, func(i, j int) bool { return servers[i].ID < servers[j].ID })
	for i := range servers {
		if i >= voters {
			servers[i].Suffrage = raft.Nonvoter
		}
	}
	return servers
}
