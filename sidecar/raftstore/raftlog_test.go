package raftstore

import (
	"bytes"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// TestRaftLoggerDemotesElectionLinesOnceRemoved: raft's election lines
// (a removed node campaigns at every election timeout) show at warn until
// the node knows it was removed, then at info only (ax's debug), through
// the loggers derived with With and Named too; other warnings and errors
// pass as they are, and with the flag cleared (a leader is known again)
// the election lines are back at warn.
func TestRaftLoggerDemotesElectionLinesOnceRemoved(t *testing.T) {
	var removed atomic.Bool
	newLogger := func(level hclog.Level) (*bytes.Buffer, hclog.Logger) {
		var buf bytes.Buffer
		return &buf, newRaftLogger(hclog.New(&hclog.LoggerOptions{Name: "raft", Level: level, Output: &buf, JSONFormat: true}), removed.Load)
	}
	second := func(l hclog.Logger) {
		l.Warn("heartbeat timeout reached, starting election", "last-leader-addr", "", "last-leader-id", "")
		l.Warn("Election timeout reached, restarting election")
		l.Error("failed to make requestVote RPC", "target", "n1", "error", "dial tcp: connection refused", "term", 7)
		l.With("peer", "n2").Warn("heartbeat timeout reached, not part of a stable configuration or a non-voter, not triggering a leader election")
		l.Named("sub").Log(hclog.Warn, "Election timeout reached, restarting election")
		l.Warn("failed to get previous log", "previous-index", 1)
		l.Error("failed to appendEntries to", "peer", "n3")
	}
	const elections, others = 5, 2
	count := func(buf *bytes.Buffer, level string) (election, other int) {
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if line == "" || !strings.Contains(line, `"@level":"`+level+`"`) {
				continue
			}
			if strings.Contains(line, "election") || strings.Contains(line, "requestVote") {
				election++
			} else {
				other++
			}
		}
		return
	}

	buf, l := newLogger(hclog.Warn) // ax at info
	second(l)
	if e, _ := count(buf, "warn"); e != 4 {
		t.Errorf("not removed: %d election lines at warn, want 4\n%s", e, buf)
	}
	if e, _ := count(buf, "error"); e != 1 {
		t.Errorf("not removed: %d election lines at error, want 1\n%s", e, buf)
	}

	removed.Store(true)
	buf.Reset()
	for range 10 { // ten seconds of a removed node's elections
		second(l)
	}
	if strings.Contains(buf.String(), "election") || strings.Contains(buf.String(), "requestVote") {
		t.Errorf("removed, ax at info: election lines logged\n%s", buf)
	}
	if _, o := count(buf, "warn"); o != 10 {
		t.Errorf("removed: %d other warnings, want 10 (they must pass)\n%s", o, buf)
	}
	if _, o := count(buf, "error"); o != 10 {
		t.Errorf("removed: %d other errors, want 10\n%s", o, buf)
	}

	dbuf, dl := newLogger(hclog.Info) // ax at debug: raft's info lines show
	second(dl)
	if e, _ := count(dbuf, "info"); e != elections {
		t.Errorf("removed, ax at debug: %d election lines at info, want %d\n%s", e, elections, dbuf)
	}
	if _, o := count(dbuf, "warn"); o != 1 {
		t.Errorf("removed, ax at debug: %d other warnings, want 1 (of %d others)\n%s", o, others, dbuf)
	}

	removed.Store(false)
	buf.Reset()
	second(l)
	if e, _ := count(buf, "warn"); e != 4 {
		t.Errorf("no longer removed: %d election lines at warn, want 4\n%s", e, buf)
	}
}

// TestNewRaftLoggerWithoutRemoved: with no Removed func, raft's logger is
// hclog's own.
func TestNewRaftLoggerWithoutRemoved(t *testing.T) {
	l := hclog.NewNullLogger()
	if got := newRaftLogger(l, nil); got != l {
		t.Errorf("newRaftLogger(l, nil) = %T, want l", got)
	}
}
