package raftstore

import (
	"bytes"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
		l.Error("failed to get log", "index", 3, "error", "log not found")
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

// TestRaftLoggerRateLimitsRepeatedPeerLines: the lines raft repeats about
// one unreachable (or refusing) peer are logged once, then once per
// repeatEvery with the count left out; each peer and line on its own,
// through derived loggers too; other lines and lines below warn pass;
// with no Removed func nothing is demoted.
func TestRaftLoggerRateLimitsRepeatedPeerLines(t *testing.T) {
	var buf bytes.Buffer
	l := newRaftLogger(hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Debug, Output: &buf, JSONFormat: true}), nil).(*raftLogger)
	now := time.Unix(1000, 0)
	l.repeats.now = func() time.Time { return now }
	tick := func() { // one second of a dead peer n3 and a live n2's blip
		for range 4 {
			l.Error("failed to heartbeat to", "peer", "127.0.0.1:7003", "backoff time", 250*time.Millisecond, "error", "dial tcp: connection refused")
		}
		l.Error("failed to appendEntries to", "peer", hclog.Fmt("%v", "{Voter n3 127.0.0.1:7003}"), "error", "EOF")
		l.Named("sub").Warn("failed to contact", "server-id", "n3", "time", time.Second)
		l.Debug("failed to contact", "server-id", "n3", "time", time.Second) // below warn: passes
		l.Warn("heartbeat timeout reached, starting election")               // not a repeated line: passes
		now = now.Add(time.Second)
	}
	lines := func(msg string) (n int, repeated []string) {
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if strings.Contains(line, `"@message":"`+msg+`"`) {
				n++
				if i := strings.Index(line, `"repeated":`); i >= 0 {
					repeated = append(repeated, strings.TrimRight(strings.SplitN(line[i+len(`"repeated":`):], ",", 2)[0], "}"))
				}
			}
		}
		return
	}
	for range 65 {
		tick()
	}
	// 65 s: logged at 0, 30 and 60 s; the 2nd and 3rd say how many were left out.
	if n, rep := lines("failed to heartbeat to"); n != 3 || strings.Join(rep, ",") != "119,119" {
		t.Errorf("heartbeat lines %d, repeated %v; want 3, [119 119]\n%s", n, rep, buf.String())
	}
	if n, rep := lines("failed to appendEntries to"); n != 3 || strings.Join(rep, ",") != "29,29" {
		t.Errorf("appendEntries lines %d, repeated %v; want 3, [29 29]", n, rep)
	}
	if n, _ := lines("failed to contact"); n != 3+65 { // 3 at warn, 65 at debug
		t.Errorf("failed to contact: %d lines, want 68", n)
	}
	if n, _ := lines("heartbeat timeout reached, starting election"); n != 65 {
		t.Errorf("election lines %d, want 65 (not removed: neither demoted nor limited)", n)
	}
	// Another peer's line is its own.
	buf.Reset()
	l.Error("failed to heartbeat to", "peer", "127.0.0.1:7002", "error", "EOF")
	if n, _ := lines("failed to heartbeat to"); n != 1 {
		t.Errorf("another peer's first line was left out")
	}
}
