package raftfsm

import (
	"fmt"
	"testing"
)

// The filter never answers "absent" for an added id, across its growth
// from the smallest first part to several parts, and its false "maybe
// present" stay near idFilterFP.
func TestIDFilterNoFalseAbsent(t *testing.T) {
	f := newIDFilter(0)
	const n = 4*idFilterMin + 1000 // three parts: 1Mi, 2Mi, 4Mi
	for i := range n {
		f.add(taskKey(fmt.Sprintf("task-%d", i)))
	}
	if len(f.parts) != 3 {
		t.Fatalf("%d parts after %d ids, want 3", len(f.parts), n)
	}
	for i := range n {
		if k := taskKey(fmt.Sprintf("task-%d", i)); !f.mayContain(k) {
			t.Fatalf("added id %q reported absent", k)
		}
	}
	fp := 0
	const probes = 100000
	for i := range probes {
		if f.mayContain(taskKey(fmt.Sprintf("other-%d", i))) {
			fp++
		}
	}
	// Three parts at 1 % each: at most about 3 %.
	if rate := float64(fp) / probes; rate > 3.5*idFilterFP {
		t.Fatalf("false maybe-present rate %.4f, want about %.2f per part", rate, idFilterFP)
	}
	if f.added != n {
		t.Fatalf("added %d, want %d", f.added, n)
	}
}

// A stored task is found by a submit of the same id wherever the id came
// from: written by an earlier entry, by the same entry, found by Open's
// scan after a restart, or restored from a snapshot (over an FSM holding
// other ids). Without the ids in the filter, the submit would see no
// task and create it again (Created).
func TestSubmitOfStoredIDThroughFilter(t *testing.T) {
	again := func(t *testing.T, e *env, idx uint64, id string) {
		t.Helper()
		r := e.apply1(idx, submitCmd(id, spec("h", "p"), 5000, 1000))
		if r.Created {
			t.Fatalf("submit of the stored id %q created it again", id)
		}
	}
	t.Run("same and later entry", func(t *testing.T) {
		e := newEnv(t)
		rs := e.apply(1, submitCmd("a", spec("h", "p"), 5000, 1000), submitCmd("a", spec("h", "p"), 5000, 1000))
		if !rs[0].Created || rs[1].Created {
			t.Fatalf("created %v, %v; want true, false", rs[0].Created, rs[1].Created)
		}
		again(t, e, 2, "a")
	})
	t.Run("after a restart", func(t *testing.T) {
		e := newEnv(t)
		e.apply(1, submitCmd("a", spec("h", "p"), 5000, 1000))
		e.reopen()
		if e.f.ids == nil || !e.f.ids.mayContain(taskKey("a")) {
			t.Fatal("Open's scan did not put the stored id in the filter")
		}
		again(t, e, 2, "a")
	})
	t.Run("after a restore", func(t *testing.T) {
		src := newEnv(t)
		src.apply(1, submitCmd("a", spec("h", "p"), 5000, 1000))
		stream := persist(t, src.snapshot())
		dst := newEnv(t)
		dst.apply(1, submitCmd("other", spec("h", "p"), 5000, 1000))
		if err := dst.restore(stream); err != nil {
			t.Fatal(err)
		}
		if dst.f.ids == nil || !dst.f.ids.mayContain(taskKey("a")) {
			t.Fatal("Restore's scan did not put the restored id in the filter")
		}
		again(t, dst, 2, "a")
		// "other" went with the restore: a submit creates it.
		if r := dst.apply1(3, submitCmd("other", spec("h", "p"), 5000, 1000)); !r.Created {
			t.Fatal("submit of an id the restore dropped was not created")
		}
	})
}

// A purged id stays in the filter ("maybe present"): the read then finds
// nothing, and a submit of the id creates the task again.
func TestSubmitAfterPurgeThroughFilter(t *testing.T) {
	e := newEnv(t)
	e.apply(1, submitCmd("a", spec("h", "p"), 5000, 1000))
	e.apply(2, Command{Type: CmdCancel, Cancel: &Cancel{ID: "a", AtMs: 2000}})
	rs := e.apply1(3, purgeCmd(targetOf(e.task("a"))))
	if len(rs.Purged) != 1 || !rs.Purged[0] {
		t.Fatalf("purge: %+v", rs)
	}
	e.noTask("a")
	if !e.f.ids.mayContain(taskKey("a")) {
		t.Fatal("a purged id left the filter (a Bloom filter cannot remove)")
	}
	if r := e.apply1(4, submitCmd("a", spec("h", "p"), 5000, 1000)); !r.Created {
		t.Fatal("submit after purge did not create the task")
	}
}

// BenchmarkIDFilter measures the filter's answer for a new id (the
// submit's usual case) and its add, with a filter of 1 part and of 6
// parts (4M ids added to an empty store's filter).
func BenchmarkIDFilter(b *testing.B) {
	for _, n := range []int{1000, 4 << 20} {
		f := newIDFilter(0)
		for i := range n {
			f.add(taskKey(fmt.Sprintf("stored-%012d", i)))
		}
		keys := make([][]byte, 1024)
		for i := range keys {
			keys[i] = taskKey(fmt.Sprintf("new-task-%012d", i))
		}
		b.Run(fmt.Sprintf("mayContain/%dparts", len(f.parts)), func(b *testing.B) {
			for i := range b.N {
				f.mayContain(keys[i%len(keys)])
			}
		})
		b.Run(fmt.Sprintf("add/%dparts", len(f.parts)), func(b *testing.B) {
			for i := range b.N {
				f.add(keys[i%len(keys)])
			}
		})
	}
}

// The filter grows with ids, not with writes: a task's fire and completion
// rewrite its record but add nothing; the records other commands create
// (a sharded run's shards) are added.
func TestIDFilterGrowsWithIDsNotWrites(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	e.next(submitCmd("a", spec("h", "p"), 1000, 1000))
	tk := e.task("a")
	e.next(fireCmd("a", tk.Epoch, 1, "n1", 1000, 31000))
	e.next(completeCmd("a", tk.Epoch, 1, OutcomeSuccess, "", 0, 2000))
	if got := e.f.ids.added; got != 1 {
		t.Fatalf("%d ids added for one task submitted, fired and completed; want 1", got)
	}
	e.startRun("p", shardSpec(Shards{Count: 3}), 3)
	for i := range 3 {
		if k := taskKey(ShardID("p", 1, i)); !e.f.ids.mayContain(k) {
			t.Fatalf("shard %q not in the filter", k)
		}
	}
	if got := e.f.ids.added; got != 1+1+3 {
		t.Fatalf("%d ids added, want 5 (a, p, 3 shards)", got)
	}
	// A submit of a shard's id finds it stored.
	if r := e.next(submitCmd(ShardID("p", 1, 0), spec("h", "p"), 1000, 1000)); r[0].Created {
		t.Fatal("a submit of a shard's id did not find the shard")
	}
}

// Once the filter holds many more ids than are stored (purged ones), the
// FSM builds the next one from the stored keys in steps, one per
// ApplyBatch, and swaps it in: no stored id is lost, neither those stored
// before the rebuild started nor those created while it ran, and the
// purged ones are gone.
func TestIDFilterRebuiltWhenPurgedIDsPileUp(t *testing.T) {
	e := newEnv(t)
	e.f.idRebuildSlack, e.f.idRebuildStep = 10, 3
	idx := uint64(0)
	next := func(cmds ...Command) []Result { idx++; return e.apply(idx, cmds...) }
	var cmds []Command
	for i := range 5 {
		cmds = append(cmds, submitCmd(fmt.Sprintf("keep%d", i), spec("h", "p"), 5000, 1000))
	}
	for i := range 20 {
		cmds = append(cmds, submitCmd(fmt.Sprintf("gone%d", i), spec("h", "p"), 5000, 1000))
	}
	next(cmds...)
	cmds = nil
	for i := range 20 {
		cmds = append(cmds, cancelCmd(fmt.Sprintf("gone%d", i), 2000))
	}
	next(cmds...)
	var targets []PurgeTask
	for i := range 20 {
		targets = append(targets, targetOf(e.task(fmt.Sprintf("gone%d", i))))
	}
	next(purgeCmd(targets...))
	old := e.f.ids
	if old.added != 25 || e.f.rebuild != nil {
		t.Fatalf("before: %d ids added, rebuilding %v", old.added, e.f.rebuild != nil)
	}
	// 25 ids > 2×5 stored + 10: the next ApplyBatch starts the rebuild and
	// scans 3 keys, the one after that the rest, and swaps.
	next(submitCmd("new1", spec("h", "p"), 5000, 1000))
	if e.f.rebuild == nil || e.f.ids != old {
		t.Fatal("the rebuild did not start, or ended in one step of 3 keys")
	}
	next(submitCmd("new2", spec("h", "p"), 5000, 1000))
	if e.f.rebuild != nil || e.f.ids == old {
		t.Fatal("the rebuild did not end in its second step")
	}
	// Scanned: keep0–2, then keep3, keep4 and new1 (stored by then, past
	// the cursor); added by putTask while it ran: new1 (again: harmless)
	// and new2.
	if e.f.ids.added != 8 {
		t.Fatalf("new filter took %d ids, want 8", e.f.ids.added)
	}
	for _, id := range []string{"keep0", "keep1", "keep2", "keep3", "keep4", "new1", "new2"} {
		if !e.f.ids.mayContain(taskKey(id)) {
			t.Fatalf("stored id %q absent from the rebuilt filter", id)
		}
		if r := next(submitCmd(id, spec("h", "p"), 5000, 1000)); r[0].Created {
			t.Fatalf("resubmit of %q created it again", id)
		}
	}
	// The purged ids are gone (up to the rare false "maybe present").
	absent := 0
	for i := range 20 {
		if !e.f.ids.mayContain(taskKey(fmt.Sprintf("gone%d", i))) {
			absent++
		}
	}
	if absent < 18 {
		t.Fatalf("%d of 20 purged ids absent from the rebuilt filter", absent)
	}
}
