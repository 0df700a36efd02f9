package cluster

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/sidecar/peerapi"
)

// Autopilot keeps the Raft configuration at a target number of voters
// (Config.Voters, 3 or 5) and the other members as non-voters, on the model
// of Consul's autopilot (server health, server stabilization time, dead
// server replacement; see hashicorp/raft-autopilot):
//
//   - A node that joins through the peer API is added as a non-voter.
//   - A member is healthy when the leader heard its load report within
//     AutopilotLastContact and its applied index then was within
//     AutopilotMaxLag entries of the leader's commit index (Consul:
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
//   - A member not heard from for Config.DeadMemberCleanup (1 h by
//     default; Consul: CleanupDeadServers) is dead and is removed from the
//     configuration, a non-voter at once, a voter when the voters still
//     alive form a quorum of the voters without it, so stale members of
//     pods that vanished without leaving (SIGKILL, a crashed machine) do
//     not pile up. A failed voter with a stable non-voter to stand in for
//     it is demoted long before that. Back, a removed node finds itself
//     removed (WatchRemoval) and must rejoin with --join.
//   - One change per round (every AutopilotInterval), each conditioned on
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
	// AutopilotInterval is how often the leader reconciles.
	AutopilotInterval = time.Second
	// AutopilotLastContact is how recent a member's last load report
	// (sent every reportInterval) must be for it to count as alive and
	// healthy (Consul: LastContactThreshold, 200 ms of Raft contact there;
	// five reports here).
	AutopilotLastContact = 1500 * time.Millisecond
	// AutopilotMaxLag is how many entries a member's applied index may
	// trail the leader's commit index and still be healthy (Consul:
	// MaxTrailingLogs).
	AutopilotMaxLag = 250
	// AutopilotMaxVoters bounds Config.Voters.
	AutopilotMaxVoters = 9
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

// ValidateAutopilot checks autopilot's settings: voters is an odd
// number from 1 to AutopilotMaxVoters, stabilization is not negative, and
// replaceAfter is at least twice AutopilotLastContact. The error names the
// setting.
func ValidateAutopilot(voters int, stabilization, replaceAfter time.Duration) error {
	if voters < 1 || voters > AutopilotMaxVoters || voters%2 == 0 {
		return fmt.Errorf("voters %d: want an odd number from 1 to %d (3 or 5 for most clusters)", voters, AutopilotMaxVoters)
	}
	if stabilization < 0 {
		return fmt.Errorf("autopilot stabilization %v: must not be negative", stabilization)
	}
	if replaceAfter < 2*AutopilotLastContact {
		return fmt.Errorf("autopilot replace-after %v: at least %v", replaceAfter, 2*AutopilotLastContact)
	}
	return nil
}

// autopilotConfig is what the reconciler's decisions depend on.
type autopilotConfig struct {
	Voters        int           // target number of voters
	Stabilization time.Duration // healthy this long before a promotion
	LastContact   time.Duration // heard from within this: alive
	ReplaceAfter  time.Duration // a voter unheard this long has failed
	// DeadAfter: a member unheard this long is removed; 0 never.
	DeadAfter time.Duration
	MaxLag    uint64 // applied index at most this far behind the commit index
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
	// Dead: a member not heard from for DeadAfter (counted the same way).
	Dead bool
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
	apRemove
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
	case apRemove:
		return "remove " + a.ID + " (" + a.Reason + ")"
	}
	return "none"
}

// Quorum is the majority of n voters.
func Quorum(n int) int { return n/2 + 1 }

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
			h.Dead = cfg.DeadAfter > 0 && now.Sub(last) >= cfg.DeadAfter
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
		if aliveVoters+1 >= Quorum(voters+1) {
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
		if alive >= Quorum(voters-1) {
			reason := fmt.Sprintf("%d voters, target %d", voters, cfg.Voters)
			if health[victim.ID].Failed {
				reason = "failed: not heard from for " + lastHeard(victim, now)
			}
			return apAction{Kind: apDemote, ID: victim.ID, Reason: reason}
		}
	}
	return autopilotCleanup(members, health, voters, aliveVoters, now)
}

// autopilotCleanup picks a dead member to remove: a non-voter first (its
// removal changes no quorum), else a dead voter whose removal leaves the
// alive voters a quorum of the rest; the one unheard the longest, then by
// id. The leader is never dead.
func autopilotCleanup(members []apMember, health map[string]apHealth, voters, aliveVoters int, now time.Time) apAction {
	var dead []apMember
	for _, m := range members {
		if !m.Leader && health[m.ID].Dead {
			dead = append(dead, m)
		}
	}
	sort.Slice(dead, func(i, j int) bool {
		if dead[i].Voter != dead[j].Voter {
			return !dead[i].Voter
		}
		if !dead[i].LastContact.Equal(dead[j].LastContact) {
			return dead[i].LastContact.Before(dead[j].LastContact)
		}
		return dead[i].ID < dead[j].ID
	})
	for _, m := range dead {
		if m.Voter && aliveVoters < Quorum(voters-1) {
			continue
		}
		kind := "non-voter"
		if m.Voter {
			kind = "voter"
		}
		return apAction{Kind: apRemove, ID: m.ID, Reason: "dead " + kind + ": not heard from for " + lastHeard(m, now)}
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
	cfg  autopilotConfig
	self string // this node's id
	d    Deps   // Raft, FSM, Clock, Log

	mu      sync.Mutex
	reports map[string]apReport
	health  map[string]apHealth // the last round's, while leading
	since   time.Time           // when this node took office; zero when not leading
	term    uint64
}

func newAutopilot(cfg autopilotConfig, self string, d Deps) *autopilot {
	return &autopilot{cfg: cfg, self: self, d: d, reports: map[string]apReport{}, health: map[string]apHealth{}}
}

// observe records a member's load report; commit is the leader's commit
// index on its arrival.
func (a *autopilot) observe(r peerapi.LoadReport, commit uint64) {
	now := a.d.Clock.Now()
	a.mu.Lock()
	a.reports[r.ID] = apReport{at: now, applied: r.Applied, commit: commit, role: strings.ToLower(r.State)}
	a.mu.Unlock()
}

// heardWithin reports whether member id's last load report came within
// the LastContact bound (the member is alive).
func (a *autopilot) heardWithin(id string) bool {
	a.mu.Lock()
	r, ok := a.reports[id]
	a.mu.Unlock()
	return ok && a.d.Clock.Now().Sub(r.at) <= a.cfg.LastContact
}

// RunAutopilot reconciles every AutopilotInterval until ctx ends (it acts
// only while this node leads).
func (m *Membership) RunAutopilot(ctx context.Context) {
	every(ctx, m.d.Clock, AutopilotInterval, func() { m.autopilot.round(ctx) })
}

// round is one reconciliation: on a follower it only forgets the
// leader's state.
func (a *autopilot) round(ctx context.Context) {
	r := a.d.Raft
	if r.State() != raft.Leader {
		a.mu.Lock()
		a.since, a.health = time.Time{}, map[string]apHealth{}
		a.mu.Unlock()
		return
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return
	}
	conf, confIndex := f.Configuration(), f.Index()
	term := r.CurrentTerm()
	now := a.d.Clock.Now()

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
		err = r.AddVoter(raft.ServerID(act.ID), addr, confIndex, peerapi.Timeout).Error()
	case apDemote:
		err = r.DemoteVoter(raft.ServerID(act.ID), confIndex, peerapi.Timeout).Error()
	case apRemove:
		err = r.RemoveServer(raft.ServerID(act.ID), confIndex, peerapi.Timeout).Error()
	}
	if err != nil {
		a.d.Log.Warn().Err(err).Str("member", act.ID).Str("action", act.String()).Msg("autopilot: configuration change failed")
		return
	}
	a.d.Log.Info().Str("member", act.ID).Str("action", act.String()).Msg("autopilot: configuration changed")
}

// membersLocked builds the reconciler's input from the configuration and
// the reports. a.mu is held.
func (a *autopilot) membersLocked(conf raft.Configuration, now time.Time) []apMember {
	out := make([]apMember, 0, len(conf.Servers))
	for _, s := range conf.Servers {
		m := apMember{ID: string(s.ID), Voter: s.Suffrage == raft.Voter, Leader: string(s.ID) == a.self}
		if m.Leader {
			m.LastContact, m.Applied, m.Commit = now, a.d.FSM.AppliedIndex(), a.d.Raft.CommitIndex()
		} else if r, ok := a.reports[m.ID]; ok {
			m.LastContact, m.Applied, m.Commit = r.at, r.applied, r.commit
		}
		out = append(out, m)
	}
	return out
}

// statuses returns the leader's view of every member of conf, as of the
// last reconciliation round (health) and the latest reports (contact).
func (a *autopilot) statuses(conf raft.Configuration) map[string]peerapi.MemberStatus {
	now := a.d.Clock.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	members := a.membersLocked(conf, now)
	out := make(map[string]peerapi.MemberStatus, len(members))
	for _, m := range members {
		h := a.health[m.ID]
		st := peerapi.MemberStatus{Healthy: h.Healthy, Status: autopilotStatus(a.cfg, members, a.health, m)}
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

// MemberStatuses is the leader's view of every member in its current
// configuration (nil when that cannot be read).
func (m *Membership) MemberStatuses() map[string]peerapi.MemberStatus {
	f := m.d.Raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	return m.autopilot.statuses(f.Configuration())
}
