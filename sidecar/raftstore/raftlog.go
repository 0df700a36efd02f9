package raftstore

import (
	"fmt"
	"strings"
	"sync"
	"time"

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
//
// It also rate-limits the lines raft repeats about one peer for as long
// as that peer is down or refuses it (repeatedLines): a dead member made
// its leader log about five error lines a second ("failed to heartbeat
// to" at every capped backoff, "failed to appendEntries to", "failed to
// contact"), until it was removed. The first line about a peer is
// logged, then at most one per repeatEvery, with "repeated" = the lines
// left out since the last one.
type raftLogger struct {
	hclog.Logger
	removed func() bool // nil: never
	repeats *repeats    // shared by the derived loggers
}

// newRaftLogger wraps l; removed may be nil.
func newRaftLogger(l hclog.Logger, removed func() bool) hclog.Logger {
	if removed == nil {
		removed = func() bool { return false }
	}
	return &raftLogger{Logger: l, removed: removed, repeats: &repeats{now: time.Now}}
}

// repeatedLines are raft's (v1.8) lines at warn or error that it repeats
// about one peer while the peer is unreachable or refuses it, with the
// argument that names the peer.
var repeatedLines = map[string]string{
	"failed to heartbeat to":                                        "peer",
	"failed to appendEntries to":                                    "peer",
	"failed to contact":                                             "server-id",
	"failed to make requestVote RPC":                                "target",
	"rejecting vote request since node is not in configuration":     "from",
	"rejecting pre-vote request since node is not in configuration": "from",
}

// repeatEvery is how often a repeated line about one peer is logged.
const repeatEvery = 30 * time.Second

// repeats counts the repeated lines left out, per line and peer.
type repeats struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[string]*repeat
}

type repeat struct {
	last    time.Time
	skipped int
}

// admit reports whether a repeated line keyed key is logged now, and how
// many were left out since the last one logged.
func (r *repeats) admit(key string) (bool, int) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil || len(r.m) > 1024 {
		r.m = map[string]*repeat{}
	}
	e := r.m[key]
	if e == nil {
		r.m[key] = &repeat{last: now}
		return true, 0
	}
	if now.Sub(e.last) < repeatEvery {
		e.skipped++
		return false, 0
	}
	n := e.skipped
	e.last, e.skipped = now, 0
	return true, n
}

// repeatKey returns the key of msg about its peer when msg is one of
// repeatedLines, else "".
func repeatKey(msg string, args []interface{}) string {
	name, ok := repeatedLines[msg]
	if !ok {
		return ""
	}
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k == name {
			return msg + "\x00" + fmt.Sprint(args[i+1])
		}
	}
	return msg
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
	lvl = l.level(lvl, msg)
	if lvl >= hclog.Warn {
		if key := repeatKey(msg, args); key != "" {
			ok, n := l.repeats.admit(key)
			if !ok {
				return
			}
			if n > 0 {
				args = append(args[:len(args):len(args)], "repeated", n)
			}
		}
	}
	l.Logger.Log(lvl, msg, args...)
}

func (l *raftLogger) Warn(msg string, args ...interface{}) { l.Log(hclog.Warn, msg, args...) }

func (l *raftLogger) Error(msg string, args ...interface{}) { l.Log(hclog.Error, msg, args...) }

func (l *raftLogger) With(args ...interface{}) hclog.Logger {
	return &raftLogger{Logger: l.Logger.With(args...), removed: l.removed, repeats: l.repeats}
}

func (l *raftLogger) Named(name string) hclog.Logger {
	return &raftLogger{Logger: l.Logger.Named(name), removed: l.removed, repeats: l.repeats}
}

func (l *raftLogger) ResetNamed(name string) hclog.Logger {
	return &raftLogger{Logger: l.Logger.ResetNamed(name), removed: l.removed, repeats: l.repeats}
}
