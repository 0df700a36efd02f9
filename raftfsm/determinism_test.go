package raftfsm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/raft"
)

// detDefaultSeeds and detDefaultEntries keep TestDeterminismAcrossReplicas
// at a few seconds (and under ~20 s with -race).
var detDefaultSeeds = []uint64{1, 2}

const detDefaultEntries = 800

// TestDeterminismAcrossReplicas is the differential test of the FSM's
// determinism: one randomized log (seeded: detGen), applied by FSMs that
// differ in everything a node may differ in but the log (how raft groups
// the entries, restarts, snapshot restores, the task cache's contents,
// the id filter's rebuilds, badger's transaction splits, failed commits),
// must give the same response to each entry and hand the observer the
// same events, and leave the same badger keys and values, counts per
// state and per handler, applied index and snapshot bytes (runDeterminism).
//
// AX_DETERMINISM_SEED replays one seed (AX_DETERMINISM_SEEDS runs that
// many from it), AX_DETERMINISM_ENTRIES sets the log's length.
func TestDeterminismAcrossReplicas(t *testing.T) {
	seeds := detDefaultSeeds
	entries := detDefaultEntries
	if s := os.Getenv("AX_DETERMINISM_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("AX_DETERMINISM_SEED=%q: %v", s, err)
		}
		seeds = []uint64{v}
		if n := os.Getenv("AX_DETERMINISM_SEEDS"); n != "" {
			k, err := strconv.Atoi(n)
			if err != nil || k < 1 {
				t.Fatalf("AX_DETERMINISM_SEEDS=%q", n)
			}
			for i := 1; i < k; i++ {
				seeds = append(seeds, v+uint64(i))
			}
		}
	}
	if s := os.Getenv("AX_DETERMINISM_ENTRIES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("AX_DETERMINISM_ENTRIES=%q", s)
		}
		entries = n
	}
	for _, seed := range seeds {
		t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
			t.Logf("replay: AX_DETERMINISM_SEED=%d AX_DETERMINISM_ENTRIES=%d go test ./raftfsm -run 'TestDeterminismAcrossReplicas'", seed, entries)
			runDeterminism(t, seed, entries)
		})
	}
}

// Labels, a map, are stored with their keys in increasing order, so that
// every replica stores the same bytes for the same log. msgpack.Marshal
// writes a map in Go's random iteration order: replicas applying one
// submit stored a task's labels (and a flow stage's) in different orders,
// and so did one replica each time it wrote the record again (found by
// TestDeterminismAcrossReplicas).
func TestLabelsStoredInKeyOrder(t *testing.T) {
	s := spec("h", "p")
	s.Labels = map[string]string{}
	var sorted []byte // the labels as msgpack writes them in key order
	sorted = append(sorted, 0x88)
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		s.Labels[k] = "v"
		sorted = append(sorted, 0xa1, k[0], 0xa1, 'v')
	}
	cmds := []Command{flowCmd("f", FlowSpec{Stages: []FlowStage{{Name: "A", Spec: s}}}, 5000, 1000)}
	for i := range 8 {
		cmds = append(cmds, submitCmd("t"+strconv.Itoa(i), s, 5000, 1000))
	}
	one, two := newEnv(t), newEnv(t)
	one.apply(1, cmds...)
	two.apply(1, cmds...)
	for i := range 8 { // each record written again
		id := "t" + strconv.Itoa(i)
		one.apply1(uint64(2+i), fireCmd(id, 1, 1, "n1", 5000, 40000))
		two.apply1(uint64(2+i), fireCmd(id, 1, 1, "n1", 5000, 40000))
	}
	got, want := one.dump(), two.dump()
	if d := diffDumps(got, want); d != "" {
		t.Fatalf("two replicas of one log store other bytes:\n%s", d)
	}
	for k, v := range got {
		if (strings.HasPrefix(k, "t/") || strings.HasPrefix(k, "ws/")) && !strings.Contains(v, string(sorted)) {
			t.Errorf("%q: labels not in key order: %q", k, v)
		}
	}
}

// detFSM is one replica of the differential test: an FSM over its own
// badger, fed the log in its own way.
type detFSM struct {
	name string
	e    *env
	open func(dir string) (*badger.DB, error) // nil: OpenDB
	rec  *recorder
	rng  *rand.Rand
	pos  int // the position in the log of the next entry it applies
	// maxGroup bounds the entries of one ApplyBatch; 0 applies one entry
	// at a time with Apply and StoreConfiguration (raft without batching).
	maxGroup int
	// bigGroups: an eighth of the groups take up to 400 entries more
	// (ApplyBatch commits such a group in parts of batchFlushOps writes).
	bigGroups bool
	group     int // the size of the group being gathered
	// restarts: close and open badger and the FSM between entries, half
	// the time after SaveHandlerCounts, and now and then restore a
	// snapshot of its own taken earlier (raft restores its newest
	// snapshot at start and replays the entries after it).
	restarts   bool
	ownSnap    []byte
	ownSnapIdx uint64 // ownSnap's applied index
	// fromSnapshots: now and then take the state from a snapshot of
	// another replica (a follower sent InstallSnapshot).
	fromSnapshots bool
	// clearCache: drop the task cache before half the batches.
	clearCache bool
	// faults: commits fail now and then (nothing written, or written and
	// reported failed), and are retried (a node with a failing disk).
	faults bool
	// for the log
	batches, restartsDone, restores, commits, rebuildsDone, faultsDone int
}

// detRun is one seed's run: the log so far, the reference replica's
// responses and events per entry, and the replicas.
type detRun struct {
	t       *testing.T
	seed    uint64
	logs    []*raft.Log        // in index order (with gaps)
	byIndex map[uint64]int     // an entry's position in logs
	results map[uint64]any     // the reference's response per entry
	events  map[uint64][]Event // the reference's events per entry
	ref     *detFSM
	vs      []*detFSM
	seen    map[string]int // what the reference's events show, for the log
	kinds   detKinds
}

// countEvents counts what the reference's events show happened: shards
// and flow stages created, runs ended, alerts written, tasks purged.
func (r *detRun) countEvents(evs []Event) {
	for _, ev := range evs {
		switch {
		case ev.Type == CmdSubmit && ev.Task != nil && strings.HasPrefix(ev.Task.ID, ShardPrefix):
			r.seen["shards created"]++
		case ev.Type == CmdSubmit && ev.Task != nil && strings.HasPrefix(ev.Task.ID, FlowStagePrefix):
			r.seen["stages created"]++
		case ev.Type == CmdPurge:
			r.seen["tasks purged"]++
		case ev.Type == CmdPause && ev.Task == nil:
			r.seen["handler pauses"]++
		}
		if ev.RunEnded != 0 {
			r.seen["runs ended"]++
		}
		if ev.Alert {
			r.seen["alerts"]++
		}
	}
}

// runDeterminism writes seed's log of entries entries, one at a time,
// applying each to the reference R (Apply, one entry at a time: the
// generator reads it) and feeding it to five replicas: A (ApplyBatch in
// random groups), B (Apply with restarts, saved counts and restores of
// its own snapshots), C (batches, and snapshots of A restored now and
// then), D (a tiny task cache, dropped often; the id filter rebuilt over
// and over), E (transactions split by a small badger; failed commits).
// Each response and each entry's events are checked as applied; all of
// them flush and compare every 97 entries, and again after a restart of
// every one.
func runDeterminism(t *testing.T, seed uint64, entries int) {
	r := &detRun{t: t, seed: seed, byIndex: map[uint64]int{}, results: map[uint64]any{}, events: map[uint64][]Event{}, seen: map[string]int{}}
	hrng := rand.New(rand.NewPCG(seed, 0x68617276)) // the harness's choices
	// Few pending alerts: the oldest are dropped as new ones come.
	defer func(n int) { alertsPendingMax = n }(alertsPendingMax)
	alertsPendingMax = 4
	newFSM := func(name string, open func(string) (*badger.DB, error)) *detFSM {
		v := &detFSM{name: name, e: &env{t: t, dir: t.TempDir()}, open: open, rec: &recorder{},
			rng: rand.New(rand.NewPCG(hrng.Uint64(), hrng.Uint64()))}
		v.openFSM()
		t.Cleanup(func() {
			if v.e.db != nil {
				v.e.db.Close()
			}
		})
		return v
	}
	// R: the reference, one entry at a time; the generator reads it.
	r.ref = newFSM("R", nil)
	// A: ApplyBatch in groups of 1..64 entries, some of up to 464.
	a := newFSM("A-batch", nil)
	a.maxGroup = 64
	a.bigGroups = true
	// B: one entry at a time, with restarts.
	b := newFSM("B-restarts", nil)
	b.restarts = true
	// C: starts empty, takes A's snapshots now and then.
	c := newFSM("C-snapshots", nil)
	c.maxGroup = 16
	c.fromSnapshots = true
	c.e.f.idRebuildSlack, c.e.f.idRebuildStep = 16, 2 // a restore drops a rebuild going on
	// D: a tiny task cache (taskCache.maxN, no production knob), dropped
	// before half the batches, and an id filter rebuilt over and over.
	d := newFSM("D-tiny-cache", nil)
	d.maxGroup = 8
	d.clearCache = true
	d.e.f.tasks.m = map[string]cachedRecord{}
	d.e.f.tasks.maxN = 1 + d.rng.IntN(4)
	d.e.f.idRebuildSlack = uint64(d.rng.IntN(8))
	d.e.f.idRebuildStep = 1 + d.rng.IntN(4)
	// E: badger with 64 KiB memtables: a transaction takes about 100
	// writes, so the writer splits entries and groups (ErrTxnTooBig).
	// Its commits fail now and then, and are retried.
	e := newFSM("E-split-faults", openSmallDB)
	e.maxGroup = 32
	e.faults = true
	r.vs = []*detFSM{a, b, c, d, e}

	g := newDetGen(t, seed, r.ref.e)
	const checkEvery = 97
	for i := 1; i <= entries; i++ {
		l := g.entry()
		r.byIndex[l.Index] = len(r.logs)
		r.logs = append(r.logs, l)
		r.applyGroup(r.ref, len(r.logs)-1, len(r.logs)-1)
		g.applied(l, r.events[l.Index])
		g.taskSum += len(g.tasks)
		flush := i%checkEvery == 0 || i == entries
		for _, v := range r.vs {
			r.feed(v, flush)
		}
		if flush {
			r.compare()
			r.prune()
		}
	}
	g.resync(true)
	stats := fmt.Sprintf("%d entries to index %d, %d commands; %d tasks, %d keys at the end (%.1f tasks on average); A %d batches in %d commits, %d task cache hits; B %d restarts, %d restores of its own snapshot; C %d snapshots restored, %d batches; D cache of %d, %d id filter rebuilds; E %d commits (%d failed) for %d batches",
		entries, g.idx, g.commands, r.ref.e.f.TotalTasks(), len(dumpDB(t, r.ref.e.db)), float64(g.taskSum)/float64(entries), a.batches, a.commits, a.e.f.tasks.hits,
		b.restartsDone, b.restores, c.restores, c.batches, d.e.f.tasks.maxN, d.rebuildsDone, e.commits, e.faultsDone, e.batches)
	// A restart of every replica (a clean stop for some) changes nothing,
	// and the entries raft re-delivers after it are skipped.
	for i, v := range append([]*detFSM{r.ref}, r.vs...) {
		if i%2 == 0 {
			if err := v.e.f.SaveHandlerCounts(); err != nil {
				t.Fatalf("%s: save counts: %v", v.name, err)
			}
		}
		r.restart(v)
		r.replayApplied(v)
	}
	r.compare()
	t.Log(stats)
	t.Logf("commands (applied/all): %s", &r.kinds)
	t.Logf("events: %v", r.seen)
}

// openFSM opens v's badger and FSM.
func (v *detFSM) openFSM() {
	e := v.e
	if v.open == nil {
		e.open()
	} else {
		db, err := v.open(e.dir)
		if err != nil {
			e.t.Fatalf("%s: open badger: %v", v.name, err)
		}
		f, err := Open(db)
		if err != nil {
			db.Close()
			e.t.Fatalf("%s: open: %v", v.name, err)
		}
		e.db, e.f = db, f
	}
	e.f.SetObserver(v.rec)
	e.f.commitTxn = func(txn *badger.Txn) error {
		v.commits++
		switch {
		case !v.faults:
		case v.commits%11 == 0: // in badger, yet reported failed
			v.faultsDone++
			if err := txn.Commit(); err != nil {
				e.t.Errorf("%s: real commit: %v", v.name, err)
			}
			return fmt.Errorf("sync: %w", errNoSpace)
		case v.commits%7 == 0: // a full disk, nothing written
			v.faultsDone++
			return errNoSpace
		}
		return txn.Commit()
	}
	e.f.sleep = func(time.Duration) {} // the retries' backoff
}

// openSmallDB opens badger with 64 KiB memtables, so that about 100
// writes fill a transaction (badger's limit is 15 % of a memtable).
func openSmallDB(dir string) (*badger.DB, error) {
	opts := badger.DefaultOptions(dir).
		WithLogger(nil).
		WithMemTableSize(64 << 10).
		WithValueThreshold(1 << 10).
		WithValueLogFileSize(1 << 20).
		WithBaseTableSize(64 << 10).
		WithNumMemtables(2).
		WithNumCompactors(2).
		WithSyncWrites(false).
		WithDetectConflicts(false).
		WithMetricsEnabled(false)
	return badger.Open(opts)
}

// feed lets v apply the log as far as it goes (all of it with flush),
// as its grouping and its restarts or restores decide.
func (r *detRun) feed(v *detFSM, flush bool) {
	end := len(r.logs)
	if v.maxGroup == 0 {
		for v.pos < end {
			if v.restarts && v.rng.IntN(150) == 0 {
				r.restartWithSnapshot(v)
				continue
			}
			r.applyGroup(v, v.pos, v.pos)
			if v.restarts && v.rng.IntN(60) == 0 {
				v.ownSnap, v.ownSnapIdx = r.snapshotOf(v, false), v.e.f.AppliedIndex()
			}
		}
		return
	}
	if v.fromSnapshots && !flush && v.rng.IntN(120) == 0 {
		r.restore(v, r.snapshotOf(r.vs[0], v.rng.IntN(2) == 0))
	}
	for v.pos < end {
		if v.group == 0 {
			v.group = 1 + v.rng.IntN(v.maxGroup)
			if v.bigGroups && v.rng.IntN(8) == 0 {
				v.group = v.maxGroup + v.rng.IntN(400) // past batchFlushOps writes
			}
		}
		n := end - v.pos
		if n < v.group && !flush {
			return
		}
		r.applyGroup(v, v.pos, v.pos+min(n, v.group)-1)
		v.group = 0
	}
}

// applyGroup applies the log's entries at positions i to j to v (one
// ApplyBatch, or one Apply or StoreConfiguration per entry) and checks
// each response and the events against the reference's; the reference
// keeps its own. An entry at or below the applied index must respond nil
// and hand no event.
func (r *detRun) applyGroup(v *detFSM, i, j int) {
	r.t.Helper()
	logs := r.logs[i : j+1]
	before := len(v.rec.calls)
	wasApplied := v.e.f.AppliedIndex()
	resps := make([]any, len(logs))
	if v.maxGroup == 0 {
		for k, l := range logs {
			if l.Type == raft.LogConfiguration {
				v.e.f.StoreConfiguration(l.Index, raftConfiguration())
				continue
			}
			resps[k] = v.e.f.Apply(l)
		}
	} else {
		if v.clearCache && v.rng.IntN(2) == 0 {
			v.e.f.tasks.clear()
		}
		rebuilding := v.e.f.rebuild != nil
		resps = v.e.f.ApplyBatch(logs)
		if rebuilding && v.e.f.rebuild == nil {
			v.rebuildsDone++
		}
		v.batches++
	}
	if got, want := v.e.f.AppliedIndex(), max(wasApplied, logs[len(logs)-1].Index); got != want {
		r.t.Fatalf("%s: applied %d after entries %d-%d, want %d", v.name, got, logs[0].Index, logs[len(logs)-1].Index, want)
	}
	got := map[uint64][]Event{}
	for _, c := range v.rec.calls[before:] {
		if _, dup := got[c.index]; dup {
			r.t.Fatalf("%s: events of entry %d handed twice", v.name, c.index)
		}
		got[c.index] = c.events
	}
	v.rec.calls = v.rec.calls[:before]
	for k, l := range logs {
		switch {
		case l.Index <= wasApplied:
			if resps[k] != nil || got[l.Index] != nil {
				r.t.Fatalf("%s: entry %d at or below the applied index %d answered %s, events %s", v.name, l.Index, wasApplied, detJSON(resps[k]), detJSON(got[l.Index]))
			}
		case v == r.ref:
			r.results[l.Index], r.events[l.Index] = resps[k], got[l.Index]
			r.countEvents(got[l.Index])
			r.kinds.add(l, resps[k])
		case !reflect.DeepEqual(resps[k], r.results[l.Index]):
			r.t.Fatalf("%s: entry %d responds differently from R (seed %d)\nentry: %s\ngot:  %s\nwant: %s",
				v.name, l.Index, r.seed, detEntryString(l), detJSON(resps[k]), detJSON(r.results[l.Index]))
		case !reflect.DeepEqual(got[l.Index], r.events[l.Index]):
			r.t.Fatalf("%s: entry %d hands the observer other events than R (seed %d)\nentry: %s\ngot:  %s\nwant: %s",
				v.name, l.Index, r.seed, detEntryString(l), detJSON(got[l.Index]), detJSON(r.events[l.Index]))
		}
	}
	v.pos = max(v.pos, j+1)
}

// appliedAt is the index of the entry before position pos (0 at the
// start).
func (r *detRun) appliedAt(pos int) uint64 {
	if pos == 0 {
		return 0
	}
	return r.logs[pos-1].Index
}

// restart closes and opens v's badger and FSM, as a node's restart does.
func (r *detRun) restart(v *detFSM) {
	r.t.Helper()
	if err := v.e.db.Close(); err != nil {
		r.t.Fatalf("%s: close badger: %v", v.name, err)
	}
	v.e.db = nil
	v.openFSM()
	v.restartsDone++
	if got, want := v.e.f.AppliedIndex(), r.appliedAt(v.pos); got != want {
		r.t.Fatalf("%s: applied %d after a restart, want %d", v.name, got, want)
	}
}

// restartWithSnapshot restarts v, after SaveHandlerCounts half the time
// (a clean stop), then either restores the snapshot of its own it took
// last (a third of the time, when it has one) and goes on from there, or
// is handed again entries it applied before.
func (r *detRun) restartWithSnapshot(v *detFSM) {
	r.t.Helper()
	if v.rng.IntN(2) == 0 {
		if err := v.e.f.SaveHandlerCounts(); err != nil {
			r.t.Fatalf("%s: save counts: %v", v.name, err)
		}
	}
	r.restart(v)
	if v.ownSnap != nil && v.rng.IntN(3) == 0 {
		r.restore(v, v.ownSnap)
		return
	}
	r.replayApplied(v)
}

// replayApplied hands v again up to the last 5 entries it applied, as
// raft replays the entries after its snapshot: each must respond nil,
// hand no event and change nothing.
func (r *detRun) replayApplied(v *detFSM) {
	r.t.Helper()
	k := v.pos - 1
	if k < 0 {
		return
	}
	before := dumpDB(r.t, v.e.db)
	r.applyGroup(v, max(0, k-v.rng.IntN(5)), k)
	if d := diffDumps(dumpDB(r.t, v.e.db), before); d != "" {
		r.t.Fatalf("%s: entries re-delivered up to %d changed the state:\n%s", v.name, r.logs[k].Index, d)
	}
}

// snapshotOf returns a snapshot stream of v's state. With later, v
// applies a group of entries between Snapshot and Persist (raft persists
// while the FSM goes on): the stream holds the state at Snapshot.
func (r *detRun) snapshotOf(v *detFSM, later bool) []byte {
	r.t.Helper()
	snap, err := v.e.f.Snapshot()
	if err != nil {
		r.t.Fatalf("%s: snapshot: %v", v.name, err)
	}
	if later && v.maxGroup > 0 && v.pos < len(r.logs) {
		r.applyGroup(v, v.pos, min(v.pos+v.rng.IntN(v.maxGroup), len(r.logs)-1))
		v.group = 0
	}
	return persist(r.t, snap)
}

// restore restores stream into v, checks that the observer heard of it,
// and sets v to apply the entries after the snapshot's index.
func (r *detRun) restore(v *detFSM, stream []byte) {
	r.t.Helper()
	before := len(v.rec.calls)
	if err := v.e.f.Restore(io.NopCloser(bytes.NewReader(stream))); err != nil {
		r.t.Fatalf("%s: restore: %v", v.name, err)
	}
	v.restores++
	idx := v.e.f.AppliedIndex()
	calls := v.rec.calls[before:]
	if len(calls) != 1 || calls[0].index != idx || len(calls[0].events) != 1 || !calls[0].events[0].Restored {
		r.t.Fatalf("%s: restore to %d told the observer %+v", v.name, idx, calls)
	}
	v.rec.calls = v.rec.calls[:before]
	v.pos, v.group = 0, 0
	if idx > 0 {
		v.pos = r.byIndex[idx] + 1
	}
}

// compare checks every replica against the reference at its applied
// index: the applied index, every badger key and value, the counts per
// state and per handler, the bytes of a snapshot, the counts against a
// count of the stored records, and the indexes (checkIndexes).
func (r *detRun) compare() {
	r.t.Helper()
	ref := r.ref
	idx := ref.e.f.AppliedIndex()
	want := dumpDB(r.t, ref.e.db)
	wantSnap := r.snapshotOf(ref, false)
	r.checkStoredCounts(ref)
	ref.e.checkIndexes()
	for _, v := range r.vs {
		if got := v.e.f.AppliedIndex(); got != idx {
			r.t.Fatalf("%s: applied %d, want %d", v.name, got, idx)
		}
		got := dumpDB(r.t, v.e.db)
		if d := diffDumps(got, want); d != "" {
			r.t.Fatalf("%s: state at %d differs from R's (seed %d):\n%s%s", v.name, idx, r.seed, d, detDumpDiff(got, want))
		}
		if g, w := v.e.f.Counts(), ref.e.f.Counts(); g != w {
			r.t.Fatalf("%s: counts at %d %v, want %v", v.name, idx, g, w)
		}
		if g, w := v.e.f.HandlerCounts(), ref.e.f.HandlerCounts(); !reflect.DeepEqual(g, w) {
			r.t.Fatalf("%s: counts per handler at %d\n%v\nwant %v", v.name, idx, g, w)
		}
		// What a snapshot sends a follower: the same keys, and the same
		// counts per handler.
		if got := r.snapshotOf(v, false); !bytes.Equal(got, wantSnap) {
			r.t.Fatalf("%s: snapshot stream at %d differs from R's (%d bytes, R's %d)", v.name, idx, len(got), len(wantSnap))
		}
		r.checkStoredCounts(v)
		v.e.checkIndexes()
		if r.t.Failed() {
			r.t.FailNow()
		}
	}
}

// prune drops the reference's responses and events of the entries no
// replica will apply again (a long run's memory): those up to B's own
// snapshot, the oldest state a replica may go back to (the others are
// at the reference's index, and C restores snapshots of A, which is
// there too).
func (r *detRun) prune() {
	low := r.ref.e.f.AppliedIndex()
	for _, v := range r.vs {
		if v.restarts {
			low = min(low, v.ownSnapIdx)
		}
	}
	for idx := range r.results {
		if idx <= low {
			delete(r.results, idx)
			delete(r.events, idx)
		}
	}
}

// checkStoredCounts compares v's counts per state and per handler with a
// count of the task records in its badger.
func (r *detRun) checkStoredCounts(v *detFSM) {
	r.t.Helper()
	states, hc := storedTaskCounts(r.t, v.e.db)
	if got := v.e.f.Counts(); got != states {
		r.t.Fatalf("%s: counts %v, the stored tasks %v", v.name, got, states)
	}
	if got := v.e.f.HandlerCounts(); !reflect.DeepEqual(got, hc) && (len(got) != 0 || len(hc) != 0) {
		r.t.Fatalf("%s: counts per handler\n%v\nthe stored tasks\n%v", v.name, got, hc)
	}
}

// detDumpDiff shows up to 5 differing values of two dumps, task and
// flow records decoded.
func detDumpDiff(got, want map[string]string) string {
	var keys []string
	for k, v := range got {
		if w, ok := want[k]; !ok || w != v {
			keys = append(keys, k)
		}
	}
	for k := range want {
		if _, ok := got[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i == 5 {
			break
		}
		g, w := detValue(k, got), detValue(k, want)
		if g == w {
			g, w = strconv.Quote(got[k]), strconv.Quote(want[k])
			fmt.Fprintf(&b, "key %q: the same record in other bytes:\n  got:  %s\n  want: %s\n", k, g, w)
			continue
		}
		fmt.Fprintf(&b, "key %q:\n  got:  %s\n  want: %s\n", k, g, w)
	}
	return b.String()
}

// detValue is the value of key k in dump d for a failure message: a
// task, flow, run or stage record decoded, anything else quoted.
func detValue(k string, d map[string]string) string {
	v, ok := d[k]
	if !ok {
		return "(absent)"
	}
	var rec any
	switch {
	case strings.HasPrefix(k, string(prefixTask)):
		rec = new(Task)
	case strings.HasPrefix(k, string(prefixFlow)):
		rec = new(Flow)
	case strings.HasPrefix(k, string(prefixHistory)):
		rec = new(RunRecord)
	case strings.HasPrefix(k, string(prefixFlowStage)):
		rec = new(FlowStage)
	}
	if rec != nil && decodeRecord([]byte(v), rec) == nil {
		return detJSON(rec)
	}
	return strconv.Quote(v)
}

// detJSON is v in JSON for a failure message.
func detJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return string(b)
}

// detEntryString is the commands of l in JSON for a failure message.
func detEntryString(l *raft.Log) string {
	if l.Type != raft.LogCommand {
		return fmt.Sprintf("(%v entry)", l.Type)
	}
	cmds, err := DecodeEntry(l.Data)
	if err != nil {
		return err.Error()
	}
	return detJSON(cmds)
}

// detGen writes the log: entries of 1 to 8 commands over a small pool of
// task ids, flows and nodes, most of them valid for the state the
// reference replica holds (and for what the entry's earlier commands did
// to it), some stale, some repeated, as leaders propose them.
type detGen struct {
	t     testing.TB
	rng   *rand.Rand
	ref   *env
	idx   uint64
	now   int64
	pool  []string
	specs map[string]Spec
	flows map[string]FlowSpec
	// tasks are the reference's tasks after the last entry; pending are
	// those the current entry changed so far (nil: deleted), as the
	// lifecycle's functions tell.
	tasks    map[string]*Task
	pending  map[string]*Task
	focus    []string  // ids the last entry touched
	force    string    // the id the next command is about, if it can be
	last     []Command // the last entry's commands
	commands int
	taskSum  int // tasks after each entry, summed
}

var (
	detHandlers = []string{"mail", "pay.card", "pay.bank", "report", "img"}
	detNodes    = []string{"n1", "n2", "n3"}
	// detRare are handlers with few tasks, often none: a pause of one is
	// refused unless a node runs it (knownHandler).
	detRare = []string{"rare1", "rare2"}
	// detPatterns are executors' handler patterns; "*" (every handler
	// known) comes and goes, in a node's record only.
	detPatterns = []string{"pay.*", "mail", "report", "img", "h.*", "pay.card", "rare1"}
	detFlowIDs  = []string{"f0", "f1", "f2", "f3"}
)

// newDetGen returns the generator of seed's log, reading the reference
// replica ref, with a pool of 30 to 60 task ids.
func newDetGen(t testing.TB, seed uint64, ref *env) *detGen {
	g := &detGen{t: t, rng: rand.New(rand.NewPCG(seed, 0x67656e)), ref: ref, now: 1_000_000,
		specs: map[string]Spec{}, flows: map[string]FlowSpec{}, tasks: map[string]*Task{}}
	n := 30 + g.rng.IntN(31)
	for i := range n {
		g.pool = append(g.pool, fmt.Sprintf("t%02d", i))
	}
	return g
}

// entry returns the next entry of the log.
func (g *detGen) entry() *raft.Log {
	g.idx++
	if g.rng.IntN(30) == 0 { // no-op and barrier entries never reach the FSM
		g.idx += uint64(1 + g.rng.IntN(2))
	}
	g.now += int64(1 + g.rng.IntN(1500))
	if g.rng.IntN(100) == 0 {
		g.last = nil
		return &raft.Log{Index: g.idx, Term: 1, Type: raft.LogConfiguration, Data: raft.EncodeConfiguration(raftConfiguration())}
	}
	n := 1
	if g.rng.IntN(2) == 0 {
		n = 2 + g.rng.IntN(7)
	}
	g.pending = map[string]*Task{}
	g.force = ""
	if len(g.focus) > 0 && g.rng.IntN(5) < 2 {
		g.force = g.focus[g.rng.IntN(len(g.focus))]
	}
	chain := 35 // percent: the next command is about the same task
	if g.rng.IntN(4) == 0 {
		chain = 85 // a task's lifecycle in one entry
	}
	var cmds []Command
	for len(cmds) < n {
		if g.rng.IntN(12) == 0 && (len(cmds) > 0 || len(g.last) > 0) {
			// The same command again, from this entry or the last.
			from := append(slices.Clone(g.last), cmds...)
			c := from[g.rng.IntN(len(from))]
			g.model(&c)
			cmds = append(cmds, c)
			continue
		}
		c := g.command()
		g.model(&c)
		cmds = append(cmds, c)
		g.force = ""
		if id := cmdTaskID(&c); id != "" && g.rng.IntN(100) < chain {
			g.force = id // the next command is about it too (a fire, then its complete)
		}
	}
	g.last = cmds
	g.commands += len(cmds)
	return &raft.Log{Index: g.idx, Term: 1, Type: raft.LogCommand, Data: mustEncode(g.t, cmds...)}
}

// applied brings the generator's view in step with the reference after
// it applied l: the tasks the entry's commands name or its events
// changed (and the parents of shards, which change without an event of
// their own) are read again; every 50 entries all of them.
func (g *detGen) applied(l *raft.Log, evs []Event) {
	g.focus = g.focus[:0]
	if l.Type != raft.LogCommand {
		return
	}
	cmds, err := DecodeEntry(l.Data)
	if err != nil {
		g.t.Fatal(err)
	}
	touched := map[string]bool{}
	for i := range cmds {
		if id := cmdTaskID(&cmds[i]); id != "" {
			touched[id] = true
			if !slices.Contains(g.focus, id) {
				g.focus = append(g.focus, id)
			}
		}
		if p := cmds[i].Purge; p != nil {
			for _, pt := range p.Tasks {
				touched[pt.ID] = true
			}
		}
	}
	for _, ev := range evs {
		if ev.Task != nil {
			touched[ev.Task.ID] = true
			if parent, _, _, ok := ParseShardID(ev.Task.ID); ok {
				touched[parent] = true
			}
		}
	}
	for id := range touched {
		tk, err := g.ref.f.Task(id)
		switch {
		case errors.Is(err, ErrNotFound):
			delete(g.tasks, id)
		case err != nil:
			g.t.Fatal(err)
		default:
			g.tasks[id] = tk
		}
	}
	if l.Index%50 == 0 {
		g.resync(true)
	}
}

// resync reads every task of the reference; with check, it fails when
// the view kept by applied missed a change (a task changed by an entry
// that neither named it nor told an event of it).
func (g *detGen) resync(check bool) {
	all := map[string]*Task{}
	err := g.ref.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.Prefix = prefixTask
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			tk := new(Task)
			if err := it.Item().Value(func(b []byte) error { return decodeRecord(b, tk) }); err != nil {
				return err
			}
			all[tk.ID] = tk
		}
		return nil
	})
	if err != nil {
		g.t.Fatal(err)
	}
	if check && !reflect.DeepEqual(all, g.tasks) {
		for id, tk := range all {
			if !reflect.DeepEqual(tk, g.tasks[id]) {
				g.t.Fatalf("task %s changed without a command or event naming it:\n%s\nwas %s", id, detJSON(tk), detJSON(g.tasks[id]))
			}
		}
		for id := range g.tasks {
			if all[id] == nil {
				g.t.Fatalf("task %s deleted without a command or event naming it", id)
			}
		}
	}
	g.tasks = all
}

// cur is task id as the entry so far leaves it (nil: none).
func (g *detGen) cur(id string) *Task {
	if t, ok := g.pending[id]; ok {
		return t
	}
	return g.tasks[id]
}

// ids lists the ids of the tasks there are (or were, in this entry), sorted.
func (g *detGen) ids() []string {
	out := make([]string, 0, len(g.tasks)+len(g.pending))
	for id := range g.tasks {
		out = append(out, id)
	}
	for id := range g.pending {
		if _, ok := g.tasks[id]; !ok {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// pick returns a task for which ok holds: the forced one when it does,
// else one of the last entry's half the time, else any.
func (g *detGen) pick(ok func(*Task) bool) (string, *Task) {
	if g.force != "" {
		if t := g.cur(g.force); t != nil && ok(t) {
			return g.force, t
		}
	}
	if len(g.focus) > 0 && g.rng.IntN(2) == 0 {
		id := g.focus[g.rng.IntN(len(g.focus))]
		if t := g.cur(id); t != nil && ok(t) {
			return id, t
		}
	}
	var cands []string
	for _, id := range g.ids() {
		if t := g.cur(id); t != nil && ok(t) {
			cands = append(cands, id)
		}
	}
	if len(cands) == 0 {
		return "", nil
	}
	id := cands[g.rng.IntN(len(cands))]
	return id, g.cur(id)
}

// Predicates of pick.
func isWaiting(t *Task) bool  { return t.State == StateWaiting }
func isRunning(t *Task) bool  { return t.State == StateRunning && !t.AwaitingShards() }
func isTerminal(t *Task) bool { return t.State.Terminal() }
func anyTask(*Task) bool      { return true }

// command returns the next command: of the kind that suits the forced
// task's state when there is one, else of a random kind.
func (g *detGen) command() Command {
	for {
		kind := g.kind()
		var c Command
		var ok bool
		switch kind {
		case "submit":
			c, ok = g.submit()
		case "fire":
			c, ok = g.fire()
		case "complete":
			c, ok = g.complete()
		case "cancel":
			c, ok = g.cancel()
		case "retry":
			c, ok = g.retry()
		case "lease":
			c, ok = g.lease()
		case "purge":
			c, ok = g.purge()
		case "pause":
			c, ok = g.pause()
		case "node":
			c, ok = g.node(), true
		case "executor":
			c, ok = g.executor(), true
		case "flow":
			c, ok = g.flow()
		case "alertdone":
			c, ok = g.alertDone(), true
		}
		if ok {
			return c
		}
		g.force = ""
	}
}

// kind chooses the kind of the next command: by the forced task's state
// when there is one, else by weight.
func (g *detGen) kind() string {
	if g.force != "" {
		t := g.cur(g.force)
		switch {
		case t == nil:
			return "submit"
		case t.State == StateWaiting:
			return []string{"fire", "fire", "fire", "fire", "fire", "cancel", "pause", "submit"}[g.rng.IntN(8)]
		case t.State == StateRunning:
			return []string{"complete", "complete", "complete", "lease", "cancel"}[g.rng.IntN(5)]
		default:
			return []string{"purge", "retry", "submit", "submit", "cancel"}[g.rng.IntN(5)]
		}
	}
	weights := []struct {
		kind string
		w    int
	}{
		{"submit", 20}, {"fire", 20}, {"complete", 22}, {"cancel", 3}, {"retry", 4}, {"lease", 5},
		{"purge", 4}, {"pause", 4}, {"node", 2}, {"executor", 2}, {"flow", 5}, {"alertdone", 2},
	}
	total := 0
	for _, w := range weights {
		total += w.w
	}
	n := g.rng.IntN(total)
	for _, w := range weights {
		if n < w.w {
			return w.kind
		}
		n -= w.w
	}
	panic("unreachable")
}

// newSpec returns a spec for id: a plain, recurring (every or cron) or
// sharded task by the id's place in the pool, with random details.
func (g *detGen) newSpec(id string) Spec {
	n, _ := strconv.Atoi(strings.TrimPrefix(id, "t"))
	h := detHandlers[n%len(detHandlers)]
	switch g.rng.IntN(15) {
	case 0, 1, 2:
		h = detHandlers[g.rng.IntN(len(detHandlers))]
	case 3:
		h = detRare[g.rng.IntN(len(detRare))]
	}
	s := Spec{Handler: h, Priority: g.rng.IntN(3), TimeoutNs: 30e9, MaxAttempts: 1 + g.rng.IntN(3)}
	switch g.rng.IntN(40) {
	case 0, 1, 2, 3:
	case 4, 5, 6, 7:
		s.Payload = []byte{}
	case 8: // past E's value threshold: in badger's value log
		s.Payload = bytes.Repeat([]byte{'x'}, 2000+g.rng.IntN(100))
		s.PayloadBase64 = true
	default:
		s.Payload = []byte(`{"v":` + strconv.Itoa(g.rng.IntN(4)) + `}`)
	}
	switch n % 8 {
	case 0:
		s.EveryNs = 60e9
	case 1:
		s.Cron = "*/5 * * * *"
		if g.rng.IntN(2) == 0 {
			s.Timezone = "Europe/Paris"
		}
	case 2:
		if g.rng.IntN(2) == 0 {
			s.Shards = &Shards{Count: 1 + g.rng.IntN(3)}
		} else {
			s.Shards = &Shards{Ask: true, Max: 1 + g.rng.IntN(4)}
		}
		if g.rng.IntN(3) == 0 {
			s.EveryNs = 120e9
		}
	}
	if g.rng.IntN(6) == 0 {
		s.RetentionNs = int64(1+g.rng.IntN(3600)) * 1e9
	}
	if g.rng.IntN(8) == 0 {
		s.Labels = map[string]string{"team": strconv.Itoa(g.rng.IntN(2))}
		for _, k := range []string{"env", "tier", "zone"}[:g.rng.IntN(4)] {
			s.Labels[k] = strconv.Itoa(g.rng.IntN(2))
		}
	}
	if g.rng.IntN(8) == 0 {
		s.Backoff = &Backoff{InitialNs: 1e9, MaxNs: 60e9, Multiplier: 2, Jitter: 0.1}
	}
	if g.rng.IntN(5) == 0 {
		s.DelayNs = int64(g.rng.IntN(5000)) * 1e6
	}
	if g.rng.IntN(8) == 0 {
		s.RouteKey = "k" + strconv.Itoa(g.rng.IntN(3))
	}
	return s
}

// traced gives s a random trace context a third of the time.
func (g *detGen) traced(s Spec) Spec {
	if g.rng.IntN(3) == 0 { // not part of Equal: a resubmit from another trace is the same task
		s.TraceParent = fmt.Sprintf("00-%032x-%016x-01", g.rng.Uint64(), g.rng.Uint64())
	}
	return s
}

// submit writes a submit of a pool id: a new task or its spec again
// (half the time), another spec (a conflict), or an overwrite.
func (g *detGen) submit() (Command, bool) {
	var id string
	switch {
	case g.force != "" && !strings.HasPrefix(g.force, FlowStagePrefix) && !strings.HasPrefix(g.force, ShardPrefix):
		id = g.force
	case len(g.focus) > 0 && g.rng.IntN(3) == 0:
		id = g.focus[g.rng.IntN(len(g.focus))]
	default:
		id = g.pool[g.rng.IntN(len(g.pool))]
	}
	if strings.HasPrefix(id, FlowStagePrefix) || strings.HasPrefix(id, ShardPrefix) {
		return Command{}, false // the API reserves those ids
	}
	cur := g.cur(id)
	canon, has := g.specs[id]
	s := Submit{ID: id, AtMs: g.now}
	switch k := g.rng.IntN(10); {
	case k < 5 || cur == nil && !has: // a new task, or the same again
		if !has {
			canon = g.newSpec(id)
			g.specs[id] = canon
		}
		s.Spec = g.traced(canon)
	case k < 7: // another spec: a conflict
		s.Spec = g.traced(g.newSpec(id))
		if cur == nil {
			g.specs[id] = s.Spec
		}
	default: // an overwrite
		s.Spec = canon
		if g.rng.IntN(3) != 0 {
			s.Spec = g.newSpec(id)
		}
		s.Spec = g.traced(s.Spec)
		s.Overwrite = true
		g.specs[id] = s.Spec
	}
	s.DueMs = g.now + int64(g.rng.IntN(3000))
	if s.Spec.Recurring() {
		s.SlotMs = s.DueMs
	}
	return Command{Type: CmdSubmit, Submit: &s}, true
}

// fire writes the Fire of a WAITING task's next attempt, stale one time in
// six (another attempt or epoch).
func (g *detGen) fire() (Command, bool) {
	id, cur := g.pick(isWaiting)
	if cur == nil {
		return Command{}, false
	}
	f := Fire{ID: id, Epoch: cur.Epoch, Attempt: cur.Attempts + 1, Node: detNodes[g.rng.IntN(len(detNodes))],
		AtMs: g.now, LeaseMs: g.now + 30000}
	switch g.rng.IntN(16) {
	case 0:
		f.Attempt++
	case 1:
		f.Attempt--
	case 2:
		f.Epoch--
	}
	f.HistoryRuns = []int{0, 0, 0, 0, 0, 1, 2, -1}[g.rng.IntN(8)]
	if g.rng.IntN(5) == 0 {
		f.ParkedReason = []string{"paused", "concurrency", "rate"}[g.rng.IntN(3)]
	}
	return Command{Type: CmdFire, Fire: &f}, true
}

// nextSlot is the slot of a recurring task's next run after its slot
// (0 a fifth of the time: the schedule ends).
func (g *detGen) nextSlot(t *Task) (slot, due int64) {
	if !t.Spec.Recurring() || g.rng.IntN(5) == 0 {
		return 0, 0
	}
	period := int64(60000)
	if t.Spec.EveryNs > 0 {
		period = t.Spec.EveryNs / 1e6
	}
	slot = max(t.SlotMs, t.DueMs) + period
	for slot <= g.now-10*period {
		slot += period
	}
	due = slot
	if slot < g.now && g.rng.IntN(2) == 0 {
		due = g.now // a catch-up
	}
	return slot, due
}

// complete writes the Complete of a RUNNING task's attempt with any
// stored outcome, as the leader prepares it (retry due times, the next
// run of a recurring task, shards, alerts, the node's report), now and
// then an app's report (epoch 0) or stale.
func (g *detGen) complete() (Command, bool) {
	id, cur := g.pick(isRunning)
	if cur == nil {
		if id, cur = g.pick(func(t *Task) bool { return t.State == StateRunning }); cur == nil {
			return Command{}, false
		}
	}
	outcomes := []Outcome{OutcomeSuccess, OutcomeSuccess, OutcomeSuccess, OutcomeRetryable, OutcomeRetryable,
		OutcomePermanent, OutcomeTimeout, OutcomeBusy, OutcomeLost, OutcomeUnavailable}
	c := Complete{ID: id, Epoch: cur.Epoch, Attempt: cur.Attempts, Outcome: outcomes[g.rng.IntN(len(outcomes))], AtMs: g.now}
	switch g.rng.IntN(20) {
	case 0, 1:
		c.Epoch = 0 // an app's report
	case 2:
		c.Attempt--
	case 3:
		c.Attempt++
	}
	switch o := c.Outcome; {
	case o == OutcomeSuccess:
		c.NextSlotMs, c.NextDueMs = g.nextSlot(cur)
		if cur.Spec.Shards != nil && g.rng.IntN(8) != 0 {
			c.ShardCount = 1 + g.rng.IntN(4)
		}
		switch g.rng.IntN(4) {
		case 0:
			c.Result = []byte(`{"ok":` + strconv.Itoa(g.rng.IntN(9)) + `}`)
		case 1:
			c.Result, c.ResultBinary = []byte{0xff, byte(g.rng.IntN(256))}, true
		}
	case o.Failed():
		c.Error = "error " + strconv.Itoa(g.rng.IntN(5))
		c.RetryDueMs = g.now + int64(100+g.rng.IntN(5000))
		if lastAttempt(cur, c.Attempt) {
			c.NextSlotMs, c.NextDueMs = g.nextSlot(cur)
		}
	case o == OutcomePermanent:
		c.Error = "bad request"
	case o == OutcomeBusy:
		c.RetryAfterMs = int64(g.rng.IntN(3000))
		c.RetryDueMs = g.now + max(c.RetryAfterMs, 1000)
	case o == OutcomeUnavailable:
		if g.rng.IntN(5) == 0 { // a draining node hands the attempt back
			c.RetryDueMs = cur.RunDueMs + 1
		} else {
			c.RetryAfterMs = int64(100 + g.rng.IntN(2000))
			c.RetryDueMs = g.now + c.RetryAfterMs
		}
	}
	c.Alert = g.rng.IntN(3) == 0
	if g.rng.IntN(5) < 3 { // the delivering node's report
		c.Executor = "x" + strconv.Itoa(g.rng.IntN(2))
		c.HTTPStatus = 200
		if c.Outcome != OutcomeSuccess {
			c.HTTPStatus = 500
		}
		c.AppliedMs, c.StartedMs, c.EndedMs = g.now-5, g.now-3, g.now-1
		c.DurationNs, c.QueueNs, c.ConnectNs = 2e6, int64(g.rng.IntN(3))*1e6, 1e5
	}
	c.FlowNextSlotMs = g.flowNextSlot(id)
	return Command{Type: CmdComplete, Complete: &c}, true
}

// flowNextSlot is what the leader puts in a Complete or Cancel of a
// stage of a cron flow (or of a shard of one): the flow's next slot.
func (g *detGen) flowNextSlot(id string) int64 {
	fid, ok := FlowOfTask(id)
	if !ok {
		return 0
	}
	fl, err := g.ref.f.Flow(fid)
	if err != nil || fl.Spec.Cron == "" || fl.State.Terminal() || g.rng.IntN(5) == 0 {
		return 0
	}
	return max(fl.SlotMs, g.now) + 300000
}

// cancel writes a Cancel of any task, or of a pool id.
func (g *detGen) cancel() (Command, bool) {
	id, _ := g.pick(anyTask)
	if id == "" || g.rng.IntN(6) == 0 {
		id = g.pool[g.rng.IntN(len(g.pool))]
	}
	return Command{Type: CmdCancel, Cancel: &Cancel{ID: id, AtMs: g.now, FlowNextSlotMs: g.flowNextSlot(id)}}, true
}

// retry writes a Retry, mostly of a DEAD or FAILED task.
func (g *detGen) retry() (Command, bool) {
	id, _ := g.pick(func(t *Task) bool { return t.State == StateDead || t.State == StateFailed })
	if id == "" || g.rng.IntN(6) == 0 {
		if id, _ = g.pick(anyTask); id == "" {
			return Command{}, false
		}
	}
	return Command{Type: CmdRetry, Retry: &Retry{ID: id, AtMs: g.now}}, true
}

// lease writes a Lease of a RUNNING task's attempt (now and then stale).
func (g *detGen) lease() (Command, bool) {
	id, cur := g.pick(func(t *Task) bool { return t.State == StateRunning })
	if cur == nil {
		return Command{}, false
	}
	l := Lease{ID: id, Attempt: cur.Attempts, GraceMs: 5000, AtMs: g.now}
	if g.rng.IntN(6) == 0 {
		l.Attempt--
	}
	return Command{Type: CmdLease, Lease: &l}, true
}

// purge writes a Purge of 1 to 4 tasks, finished ones with the epoch and
// finish time the reference holds (now and then not), and a quarter of
// the time of flows.
func (g *detGen) purge() (Command, bool) {
	var p Purge
	for range 1 + g.rng.IntN(4) {
		id, cur := g.pick(isTerminal)
		if g.rng.IntN(8) == 0 {
			id, cur = g.pick(anyTask)
		}
		if cur == nil {
			continue
		}
		pt := PurgeTask{ID: id, Epoch: cur.Epoch, FinishedMs: cur.FinishedMs}
		switch g.rng.IntN(10) {
		case 0:
			pt.Epoch++
		case 1:
			pt.FinishedMs++
		}
		p.Tasks = append(p.Tasks, pt)
	}
	if g.rng.IntN(4) == 0 {
		flows, _, err := g.ref.f.Flows("", 100)
		if err != nil {
			g.t.Fatal(err)
		}
		for _, fl := range flows {
			if fl.State.Terminal() || g.rng.IntN(4) == 0 {
				pt := fl.FlowTarget()
				if g.rng.IntN(8) == 0 {
					pt.FinishedMs++
				}
				p.Flows = append(p.Flows, pt)
			}
		}
	}
	if len(p.Tasks) == 0 && len(p.Flows) == 0 {
		return Command{}, false
	}
	return Command{Type: CmdPurge, Purge: &p}, true
}

// pause writes a pause or resume of a task or of a handler (a rare one, an
// unknown one).
func (g *detGen) pause() (Command, bool) {
	p := Pause{Paused: g.rng.IntN(2) == 0, AtMs: g.now}
	if g.rng.IntN(2) == 0 {
		id, _ := g.pick(anyTask)
		if id == "" {
			id = g.pool[g.rng.IntN(len(g.pool))]
		}
		p.ID = id
	} else {
		hs := append(append(slices.Clone(detHandlers), detRare...), detRare...)
		hs = append(hs, "ghost", "h.A", "h.C")
		p.Handler = hs[g.rng.IntN(len(hs))]
	}
	return Command{Type: CmdPause, Pause: &p}, true
}

// node writes a node's record with 0 to 2 executors from its flags.
func (g *detGen) node() Command {
	id := detNodes[g.rng.IntN(len(detNodes))]
	n := Node{ID: id, RaftAddr: "raft-" + id, PeerAddr: "peer-" + id, UpdateMs: g.now, Incarnation: "inc-" + strconv.Itoa(g.rng.IntN(2))}
	for i := range g.rng.IntN(3) {
		p := detPatterns[g.rng.IntN(len(detPatterns))]
		if g.rng.IntN(20) == 0 {
			p = "*"
		}
		n.Executors = append(n.Executors, Executor{Name: "flag" + strconv.Itoa(i),
			Handlers: []string{p}, URL: "http://app/" + strconv.Itoa(i)})
	}
	return Command{Type: CmdNode, Node: &n}
}

// executor registers or removes an executor through the API, now and then
// on an unknown node.
func (g *detGen) executor() Command {
	x := ExecutorChange{Node: detNodes[g.rng.IntN(len(detNodes))], AtMs: g.now, Remove: g.rng.IntN(3) == 0,
		Executor: Executor{Name: "api" + strconv.Itoa(g.rng.IntN(3)), Handlers: []string{detPatterns[g.rng.IntN(len(detPatterns))]},
			URL: "http://api", MaxConcurrency: g.rng.IntN(4)}}
	if g.rng.IntN(10) == 0 {
		x.Node = "n9"
	}
	return Command{Type: CmdExecutor, Executor: &x}
}

// newFlowSpec returns a flow of two or four stages (a chain, two roots, a
// diamond), sometimes recurring.
func (g *detGen) newFlowSpec() FlowSpec {
	st := func(name string, deps ...string) FlowStage {
		s := FlowStage{Name: name, Spec: Spec{Handler: "h." + name, Payload: []byte(`{"s":"` + name + `"}`),
			TimeoutNs: 30e9, MaxAttempts: 1 + g.rng.IntN(2)}, DependsOn: deps, Continue: g.rng.IntN(5) == 0}
		if g.rng.IntN(10) == 0 {
			s.Spec.Shards = &Shards{Count: 2}
		}
		if g.rng.IntN(8) == 0 {
			s.Spec.Labels = map[string]string{"flow": "1", "stage": name}
		}
		return s
	}
	var fs FlowSpec
	switch g.rng.IntN(3) {
	case 0:
		fs.Stages = []FlowStage{st("A"), st("B", "A")}
	case 1:
		fs.Stages = []FlowStage{st("A"), st("B", "A"), st("C", "A"), st("D", "B", "C")}
	default:
		fs.Stages = []FlowStage{st("A"), st("C")}
	}
	switch g.rng.IntN(6) {
	case 0:
		fs.EveryNs = 60e9
	case 1:
		fs.Cron = "*/10 * * * *"
	}
	return fs
}

// flow writes a flow's submit (its spec again, or another: a conflict)
// or, a fifth of the time, its cancel.
func (g *detGen) flow() (Command, bool) {
	id := detFlowIDs[g.rng.IntN(len(detFlowIDs))]
	if g.rng.IntN(5) == 0 {
		return Command{Type: CmdFlow, Flow: &FlowSubmit{ID: id, Cancel: true, AtMs: g.now}}, true
	}
	fs, ok := g.flows[id]
	if !ok || g.rng.IntN(6) == 0 {
		fs = g.newFlowSpec()
	}
	if _, err := g.ref.f.Flow(id); errors.Is(err, ErrNotFound) {
		g.flows[id] = fs
	}
	return Command{Type: CmdFlow, Flow: &FlowSubmit{ID: id, Spec: fs, DueMs: g.now + int64(g.rng.IntN(2000)), AtMs: g.now}}, true
}

// alertDone writes the AlertDone of a pending alert, or of any sequence
// number.
func (g *detGen) alertDone() Command {
	seq := uint64(1 + g.rng.IntN(40))
	if alerts, err := g.ref.f.Alerts(0, 20); err == nil && len(alerts) > 0 && g.rng.IntN(4) != 0 {
		seq = alerts[g.rng.IntN(len(alerts))].Seq
	}
	return Command{Type: CmdAlertDone, AlertDone: &AlertDone{Seq: seq}}
}

// model moves the entry's view of the task c is about as the lifecycle's
// functions move it (the side effects on flows and shards are left to
// the next read of the reference).
func (g *detGen) model(c *Command) {
	switch c.Type {
	case CmdSubmit:
		if t, _ := submitTask(g.cur(c.Submit.ID), c.Submit, g.idx); t != nil {
			g.pending[c.Submit.ID] = t
		}
	case CmdFire:
		if cur := g.cur(c.Fire.ID); cur != nil {
			if t, _ := fireTask(cur, c.Fire); t != nil {
				g.pending[c.Fire.ID] = t
			}
		}
	case CmdComplete:
		if cur := g.cur(c.Complete.ID); cur != nil {
			if t, _, err := completeTask(cur, c.Complete); err == nil && t != nil {
				g.pending[c.Complete.ID] = t
			}
		}
	case CmdCancel:
		if cur := g.cur(c.Cancel.ID); cur != nil {
			if t, _ := cancelTask(cur, c.Cancel); t != nil {
				g.pending[c.Cancel.ID] = t
			}
		}
	case CmdRetry:
		if cur := g.cur(c.Retry.ID); cur != nil {
			if t, _ := retryTask(cur, c.Retry); t != nil {
				g.pending[c.Retry.ID] = t
			}
		}
	case CmdLease:
		if cur := g.cur(c.Lease.ID); cur != nil {
			if t, _ := leaseTask(cur, c.Lease); t != nil {
				g.pending[c.Lease.ID] = t
			}
		}
	case CmdPause:
		if c.Pause.ID != "" {
			if cur := g.cur(c.Pause.ID); cur != nil {
				if t, _ := pauseTask(cur, c.Pause); t != nil {
					g.pending[c.Pause.ID] = t
				}
			}
		}
	case CmdPurge:
		for _, pt := range c.Purge.Tasks {
			if cur := g.cur(pt.ID); cur != nil && cur.State.Terminal() && cur.Epoch == pt.Epoch && cur.FinishedMs == pt.FinishedMs &&
				!strings.HasPrefix(pt.ID, FlowStagePrefix) {
				g.pending[pt.ID] = nil
			}
		}
	}
}

// cmdTaskID is the id of the task c is about, "" for other commands.
func cmdTaskID(c *Command) string {
	switch c.Type {
	case CmdSubmit:
		return c.Submit.ID
	case CmdFire:
		return c.Fire.ID
	case CmdComplete:
		return c.Complete.ID
	case CmdCancel:
		return c.Cancel.ID
	case CmdRetry:
		return c.Retry.ID
	case CmdLease:
		return c.Lease.ID
	case CmdPause:
		return c.Pause.ID
	}
	return ""
}

// detKinds counts the commands of the log by type, and those that took
// effect by their result (no code; a submit that created, a purge that
// deleted).
type detKinds struct{ all, ok [CmdAlertDone + 1]int }

func (k *detKinds) add(l *raft.Log, resp any) {
	rs, _ := resp.([]Result)
	if rs == nil {
		return
	}
	cmds, _ := DecodeEntry(l.Data)
	for i, c := range cmds {
		k.all[c.Type]++
		switch x := rs[i]; {
		case x.Code != "":
		case c.Type == CmdSubmit && !x.Created:
		case c.Type == CmdPurge && x.PurgedCount()+x.PurgedFlowCount() == 0:
		default:
			k.ok[c.Type]++
		}
	}
}

func (k *detKinds) String() string {
	names := []string{CmdSubmit: "submit", CmdCancel: "cancel", CmdFire: "fire", CmdComplete: "complete",
		CmdNode: "node", CmdExecutor: "executor", CmdRetry: "retry", CmdLease: "lease", CmdPurge: "purge", CmdPause: "pause",
		CmdFlow: "flow", CmdAlertDone: "alertdone"}
	var b strings.Builder
	for t := CmdSubmit; t <= CmdAlertDone; t++ {
		fmt.Fprintf(&b, "%s %d/%d ", names[t], k.ok[t], k.all[t])
	}
	return b.String()
}
