package raftstore

import (
	"strings"

	"github.com/hashicorp/go-hclog"
)

// raftLogger is the hclog.Logger raft (and its log store, snapshot store
// and transport) write through. While removed reports that this node
// knows it was removed from the cluster (cluster.WatchRemoval, which says
// so once, with what to do), it demotes raft's election lines at warn and
// error to info (ax's debug: raftLogLevel): a removed node whose log
// still lists it as a voter campaigns at every election timeout, for as
// long as it runs, and would repeat "heartbeat timeout reached, starting
// election" and "Election timeout reached, restarting election" about
// every second. Raft's behaviour is unchanged; other lines pass as they
// are, and nothing is demoted while a leader is known (WatchRemoval clears
// the flag).
type raftLogger struct {
	hclog.Logger
	removed func() bool // nil: never
}

// newRaftLogger wraps l; removed may be nil.
func newRaftLogger(l hclog.Logger, removed func() bool) hclog.Logger {
	if removed == nil {
		return l
	}
	return &raftLogger{Logger: l, removed: removed}
}

// electionLines are the starts of raft's (v1.8) election lines a removed
// node repeats.
var electionLines = []string{
	"heartbeat timeout reached",      // "…, starting election"; "…, not part of a stable configuration…"
	"Election timeout reached",       // "…, restarting election"
	"failed to make requestVote RPC", // per unreachable peer, per election (also for pre-votes)
	"not part of stable configuration",
	"no known peers, aborting election",
}

// level is the level msg is logged at: lvl, or info for an election line
// at warn or above while this node knows it was removed.
func (l *raftLogger) level(lvl hclog.Level, msg string) hclog.Level {
	if lvl < hclog.Warn || !l.removed() {
		return lvl
	}
	for _, p := range electionLines {
		if strings.HasPrefix(msg, p) {
			return hclog.Info
		}
	}
	return lvl
}

func (l *raftLogger) Log(lvl hclog.Level, msg string, args ...interface{}) {
	l.Logger.Log(l.level(lvl, msg), msg, args...)
}

func (l *raftLogger) Warn(msg string, args ...interface{}) { l.Log(hclog.Warn, msg, args...) }

func (l *raftLogger) Error(msg string, args ...interface{}) { l.Log(hclog.Error, msg, args...) }

func (l *raftLogger) With(args ...interface{}) hclog.Logger {
	return &raftLogger{Logger: l.Logger.With(args...), removed: l.removed}
}

func (l *raftLogger) Named(name string) hclog.Logger {
	return &raftLogger{Logger: l.Logger.Named(name), removed: l.removed}
}

func (l *raftLogger) ResetNamed(name string) hclog.Logger {
	return &raftLogger{Logger: l.Logger.ResetNamed(name), removed: l.removed}
}
