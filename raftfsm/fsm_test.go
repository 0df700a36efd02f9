package raftfsm

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

func raftConfiguration() raft.Configuration {
	return raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: "n1", Address: "127.0.0.1:7000"}}}
}

func TestAppliedIndexPersisted(t *testing.T) {
	e := newEnv(t)
	if e.f.AppliedIndex() != 0 {
		t.Fatalf("fresh FSM applied %d", e.f.AppliedIndex())
	}
	e.apply1(3, submitCmd("a", spec("h", "p"), 5000, 1000))
	e.apply1(4, fireCmd("a", 3, 1, "n1", 5000, 40000))
	// Raft may hand the FSM gaps (no-op and barrier entries never reach it).
	e.apply1(9, submitCmd("b", spec("h", "p"), 6000, 1000))
	if e.f.AppliedIndex() != 9 {
		t.Fatalf("applied %d", e.f.AppliedIndex())
	}
	want := e.dump()
	e.reopen()
	if e.f.AppliedIndex() != 9 {
		t.Fatalf("after reopen applied %d, want 9", e.f.AppliedIndex())
	}
	if d := diffDumps(e.dump(), want); d != "" {
		t.Fatalf("state after reopen:\n%s", d)
	}
	e.checkIndexes()
}

func TestApplySkipsEntriesAtOrBelowApplied(t *testing.T) {
	e := newEnv(t)
	e.apply1(1, submitCmd("a", spec("h", "p"), 5000, 1000))
	e.apply1(2, fireCmd("a", 1, 1, "n1", 5000, 40000))
	e.apply1(3, completeCmd("a", 1, 1, OutcomeRetryable, "500", 7000, 5500))
	before := e.dump()
	rec := &recorder{}
	e.f.SetObserver(rec)

	replay := func(stage string) {
		t.Helper()
		// Replaying the same entries, or different ones at those indexes,
		// must change nothing: the FSM has them already.
		for idx, c := range map[uint64]Command{
			1: submitCmd("a", spec("h", "p"), 5000, 1000),
			2: fireCmd("a", 1, 2, "n1", 7000, 40000),
			3: submitCmd("new", spec("h", "p"), 5000, 1000),
		} {
			if out := e.applyEntry(idx, c); out != nil {
				t.Fatalf("%s: replayed entry %d returned %v, want nil", stage, idx, out)
			}
		}
		// Even an entry that would panic is skipped without being decoded.
		if out := e.f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: []byte("garbage")}); out != nil {
			t.Fatalf("%s: replayed garbage returned %v", stage, out)
		}
		if d := diffDumps(e.dump(), before); d != "" {
			t.Fatalf("%s: replay changed state:\n%s", stage, d)
		}
		if e.f.AppliedIndex() != 3 {
			t.Fatalf("%s: applied %d", stage, e.f.AppliedIndex())
		}
		if len(rec.calls) != 0 {
			t.Fatalf("%s: observer told about replayed entries: %+v", stage, rec.calls)
		}
	}
	replay("live")
	e.reopen()
	e.f.SetObserver(rec)
	replay("after reopen")

	// The next entry applies.
	if r := e.apply1(4, fireCmd("a", 1, 2, "n2", 7000, 40000)); r.Code != CodeOK {
		t.Fatalf("entry 4: %+v", r)
	}
	if e.f.AppliedIndex() != 4 || len(rec.calls) != 1 {
		t.Fatalf("applied %d, observer calls %d", e.f.AppliedIndex(), len(rec.calls))
	}
	e.checkIndexes()
}

func TestStoreConfiguration(t *testing.T) {
	e := newEnv(t)
	e.apply1(1, submitCmd("a", spec("h", "p"), 5000, 1000))
	ch := e.f.AppliedCh()
	e.f.StoreConfiguration(2, raftConfiguration())
	select {
	case <-ch:
	default:
		t.Fatal("AppliedCh not closed by StoreConfiguration")
	}
	if e.f.AppliedIndex() != 2 {
		t.Fatalf("applied %d", e.f.AppliedIndex())
	}
	// An older configuration index changes nothing.
	ch = e.f.AppliedCh()
	e.f.StoreConfiguration(1, raftConfiguration())
	e.f.StoreConfiguration(2, raftConfiguration())
	select {
	case <-ch:
		t.Fatal("AppliedCh closed by an old configuration")
	default:
	}
	if e.f.AppliedIndex() != 2 {
		t.Fatalf("applied %d", e.f.AppliedIndex())
	}
	e.reopen()
	if e.f.AppliedIndex() != 2 {
		t.Fatalf("after reopen applied %d, want 2", e.f.AppliedIndex())
	}
	if out := e.applyEntry(2, submitCmd("b", spec("h", "p"), 5000, 1000)); out != nil {
		t.Fatalf("entry at the configuration index returned %v", out)
	}
	e.noTask("b")
	e.apply1(3, submitCmd("b", spec("h", "p"), 5000, 1000))
	e.task("b")
}

func TestAppliedCh(t *testing.T) {
	e := newEnv(t)
	ch := e.f.AppliedCh()
	select {
	case <-ch:
		t.Fatal("closed before any apply")
	default:
	}
	e.apply1(1, submitCmd("a", spec("h", "p"), 5000, 1000))
	select {
	case <-ch:
	default:
		t.Fatal("not closed by Apply")
	}
	ch2 := e.f.AppliedCh()
	if ch2 == ch {
		t.Fatal("channel not replaced")
	}
	e.applyEntry(1, submitCmd("a", spec("h", "p"), 5000, 1000)) // skipped
	select {
	case <-ch2:
		t.Fatal("closed by a skipped entry")
	default:
	}
}

func TestEmptyEntryAdvancesApplied(t *testing.T) {
	e := newEnv(t)
	out := e.f.Apply(&raft.Log{Index: 4, Type: raft.LogCommand, Data: mustEncode(t)})
	if rs, ok := out.([]Result); !ok || len(rs) != 0 {
		t.Fatalf("Apply = %#v", out)
	}
	if e.f.AppliedIndex() != 4 {
		t.Fatalf("applied %d", e.f.AppliedIndex())
	}
}

func TestApplyFailsClosed(t *testing.T) {
	good := submitCmd("ok", spec("h", "p"), 5000, 1000)
	entry := func(cmds ...Command) []byte { return mustEncode(t, cmds...) }
	cases := map[string]struct {
		data []byte
		want error
	}{
		"unknown command type":             {entry(good, Command{Type: 99}), ErrUnknownCommand},
		"zero command type":                {entry(Command{Type: 0, Submit: good.Submit}), ErrUnknownCommand},
		"submit without body":              {entry(good, Command{Type: CmdSubmit}), ErrBadEntry},
		"cancel without body":              {entry(Command{Type: CmdCancel}), ErrBadEntry},
		"fire without body":                {entry(Command{Type: CmdFire}), ErrBadEntry},
		"complete without body":            {entry(Command{Type: CmdComplete}), ErrBadEntry},
		"node without body":                {entry(Command{Type: CmdNode}), ErrBadEntry},
		"unknown outcome":                  {nil, ErrBadEntry}, // filled below
		"empty entry data":                 {nil, ErrBadEntry},
		"unknown entry version":            {append([]byte{EntryVersion + 1}, entry(good)[1:]...), ErrBadEntry},
		"version byte only":                {[]byte{EntryVersion}, ErrBadEntry},
		"not msgpack":                      {append([]byte{EntryVersion}, "{json: true}"...), ErrBadEntry},
		"truncated":                        {entry(good, good)[:20], ErrBadEntry},
		"msgpack map instead of the array": {[]byte{EntryVersion, 0x80}, ErrBadEntry},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			// A running task that the bad entry's commands could touch.
			e.apply1(1, submitCmd("a", spec("h", "p"), 5000, 1000))
			e.apply1(2, fireCmd("a", 1, 1, "n1", 5000, 40000))
			data := tc.data
			if name == "unknown outcome" {
				data = entry(good, completeCmd("a", 1, 1, Outcome(77), "", 0, 6000))
			}
			rec := &recorder{}
			e.f.SetObserver(rec)
			before := e.dump()
			v := mustPanic(t, func() {
				e.f.Apply(&raft.Log{Index: 3, Type: raft.LogCommand, Data: data})
			})
			msg := fmt.Sprint(v)
			if !strings.Contains(msg, tc.want.Error()) || !strings.Contains(msg, "entry 3") {
				t.Fatalf("panic %q, want it to name entry 3 and %q", msg, tc.want)
			}
			if e.f.AppliedIndex() != 2 {
				t.Fatalf("applied %d after a failed entry", e.f.AppliedIndex())
			}
			if d := diffDumps(e.dump(), before); d != "" {
				t.Fatalf("a failed entry left changes:\n%s", d)
			}
			if len(rec.calls) != 0 {
				t.Fatalf("observer told about a failed entry: %+v", rec.calls)
			}
			// The earlier commands of the entry were discarded, not half
			// committed; the FSM still works for the tests that follow.
			e.noTask("ok")
			e.apply1(4, completeCmd("a", 1, 1, OutcomeSuccess, "", 0, 6000))
			e.checkIndexes()
		})
	}
}

func TestDecodeEntryErrors(t *testing.T) {
	for name, data := range map[string][]byte{
		"nil":           nil,
		"wrong version": {0, 0x90},
		"garbage":       {EntryVersion, 0xc1},
		"short array":   {EntryVersion, 0x92, 0x80},
	} {
		if _, err := DecodeEntry(data); !errors.Is(err, ErrBadEntry) {
			t.Errorf("%s: err %v, want ErrBadEntry", name, err)
		}
	}
}

func TestEncodeDecodeEntryRoundTrip(t *testing.T) {
	n := Node{ID: "n1", RaftAddr: "r", PeerAddr: "p", Executors: flagExec("a", "*"), UpdateMs: 9}
	s := spec("order.timeout", "\x00\xffbinary")
	s.PayloadBase64, s.DelayNs, s.RunAtMs = true, 5e9, 1234
	in := []Command{
		{Type: CmdSubmit, Submit: &Submit{ID: "order|42", Spec: s, DueMs: 99, AtMs: 98, Overwrite: true}},
		cancelCmd("x", 5),
		fireCmd("y", 7, 2, "n1", 100, 200),
		completeCmd("z", 7, 2, OutcomeTimeout, "deadline", 300, 250),
		nodeCmd(n),
	}
	data := mustEncode(t, in...)
	if data[0] != EntryVersion {
		t.Fatalf("first byte %d", data[0])
	}
	out, err := DecodeEntry(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("%d commands", len(out))
	}
	if got := *out[0].Submit; got.ID != "order|42" || !got.Spec.Equal(s) || got.DueMs != 99 || got.AtMs != 98 || !got.Overwrite {
		t.Errorf("submit %+v", got)
	}
	if got := *out[1].Cancel; got != *in[1].Cancel {
		t.Errorf("cancel %+v", got)
	}
	if got := *out[2].Fire; got != *in[2].Fire {
		t.Errorf("fire %+v", got)
	}
	if got := *out[3].Complete; !reflect.DeepEqual(got, *in[3].Complete) {
		t.Errorf("complete %+v", got)
	}
	if got := *out[4].Node; !nodeEqual(got, n) {
		t.Errorf("node %+v", got)
	}
	for i := range out {
		if out[i].Type != in[i].Type {
			t.Errorf("command %d type %d", i, out[i].Type)
		}
	}
}

func TestEncodeDecodeResults(t *testing.T) {
	in := []Result{
		{Created: true, Task: &Task{ID: "a", State: StateWaiting, Epoch: 3, DueMs: 10}, Index: 3},
		{Code: CodeConflict, Task: &Task{ID: "b"}, Index: 3},
		{Code: CodeNotFound, Index: 3},
	}
	b, err := EncodeResults(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeResults(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 3 || !out[0].Created || out[0].Task.ID != "a" || out[0].Task.Epoch != 3 ||
		out[1].Code != CodeConflict || out[2].Code != CodeNotFound || out[2].Task != nil || out[2].Index != 3 {
		t.Fatalf("results %+v", out)
	}
	if _, err := DecodeResults([]byte{0xc1}); err == nil {
		t.Fatal("garbage decoded")
	}
}

func TestLargeEntrySplitsTransaction(t *testing.T) {
	e := newEnv(t)
	const n = 2000
	payload := bytes.Repeat([]byte("x"), 4<<10)
	if total := int64(n * len(payload)); total <= e.db.MaxBatchSize() {
		t.Fatalf("entry of %d bytes fits one badger transaction (%d): the test would not split", total, e.db.MaxBatchSize())
	}
	cmds := make([]Command, 0, n)
	for i := range n {
		s := Spec{Handler: "h", Payload: payload, MaxAttempts: 3}
		cmds = append(cmds, submitCmd(fmt.Sprintf("task-%05d", i), s, int64(10000+i), 1000))
	}
	rs := e.apply(1, cmds...)
	for i, r := range rs {
		if !r.Created {
			t.Fatalf("result %d: %+v", i, r)
		}
	}
	if e.f.AppliedIndex() != 1 {
		t.Fatalf("applied %d", e.f.AppliedIndex())
	}
	if d := e.due(); len(d) != n || d[0].ID != "task-00000" || d[n-1].ID != fmt.Sprintf("task-%05d", n-1) {
		t.Fatalf("due index holds %d entries", len(d))
	}

	// One entry that reads what an earlier part of the same entry wrote, and
	// deletes as many index keys as it sets.
	cmds = cmds[:0]
	for i := range n {
		cmds = append(cmds, fireCmd(fmt.Sprintf("task-%05d", i), 1, 1, "n1", 20000, 60000))
	}
	for i := range n {
		cmds = append(cmds, completeCmd(fmt.Sprintf("task-%05d", i), 1, 1, OutcomeRetryable, "500", int64(30000+i), 21000))
	}
	for i := 0; i < n; i += 2 {
		cmds = append(cmds, cancelCmd(fmt.Sprintf("task-%05d", i), 22000))
	}
	rs = e.apply(2, cmds...)
	for i, r := range rs {
		if r.Code != CodeOK {
			t.Fatalf("result %d: %+v", i, r)
		}
	}
	if got := e.task("task-00001"); got.State != StateWaiting || got.Attempts != 1 || got.DueMs != 30001 ||
		!bytes.Equal(got.Spec.Payload, payload) {
		t.Fatalf("task-00001: %+v", got)
	}
	if got := e.task("task-00000"); got.State != StateCancelled {
		t.Fatalf("task-00000: %+v", got)
	}
	if d := e.due(); len(d) != n/2 {
		t.Fatalf("due index holds %d entries, want %d", len(d), n/2)
	}
	e.checkIndexes()
	e.reopen()
	if e.f.AppliedIndex() != 2 {
		t.Fatalf("after reopen applied %d", e.f.AppliedIndex())
	}
	e.checkIndexes()
}

// The writer splits on deletes as on sets: fill one badger transaction to its
// entry-count limit, then delete.
func TestWriterSplitsOnDelete(t *testing.T) {
	e := newEnv(t)
	w := e.f.newWriter()
	n := int(e.db.MaxBatchCount()) - 2 // a new transaction counts one entry for its end mark
	for i := range n {
		if err := w.set(fmt.Appendf(nil, "x/%06d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	first := w.txn
	if err := w.del([]byte("x/000000")); err != nil {
		t.Fatal(err)
	}
	if w.txn == first {
		t.Fatal("the delete did not start a new transaction: the test does not reach the limit")
	}
	if err := w.finish(7); err != nil {
		t.Fatal(err)
	}
	d := e.dump()
	if len(d) != n || d["x/000001"] != "v" || d[fmt.Sprintf("x/%06d", n-1)] != "v" {
		t.Fatalf("%d keys", len(d))
	}
	if _, ok := d["x/000000"]; ok {
		t.Fatal("deleted key still there")
	}
	e.reopen()
	if e.f.AppliedIndex() != 7 {
		t.Fatalf("applied %d", e.f.AppliedIndex())
	}
}
