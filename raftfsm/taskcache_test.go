package raftfsm

import (
	"strconv"
	"testing"
)

// The Fire and the Complete of a task read its record from the task cache
// (the submit and the Fire wrote it), not from badger, and apply as
// before; a task written in the same entry is read from the entry's own
// transaction.
func TestTaskCacheServesTheNextCommand(t *testing.T) {
	e := newEnv(t)
	s := Spec{Handler: "h", TimeoutNs: 30e9, MaxAttempts: 3}
	epoch := e.apply1(1, submitCmd("a", s, 1000, 1)).Task.Epoch
	if r := e.apply1(2, fireCmd("a", epoch, 1, "n1", 1000, 40_000)); r.Code != CodeOK {
		t.Fatalf("fire: %+v", r)
	}
	if r := e.apply1(3, completeCmd("a", epoch, 1, OutcomeSuccess, "", 0, 1010)); r.Code != CodeOK {
		t.Fatalf("complete: %+v", r)
	}
	if got := e.task("a").State; got != StateSuccess {
		t.Fatalf("state %v, want SUCCESS", got)
	}
	if e.f.tasks.hits != 2 {
		t.Fatalf("%d reads from the task cache, want 2 (the fire's and the complete's)", e.f.tasks.hits)
	}
	// Fire and complete in one entry, the task cached WAITING by its
	// submit: the complete reads the fire's write from the entry's
	// transaction (the cache forgot the id as the fire wrote it).
	epoch = e.apply1(4, submitCmd("b", s, 1000, 2)).Task.Epoch
	rs := e.apply(5, fireCmd("b", epoch, 1, "n1", 1000, 40_000), completeCmd("b", epoch, 1, OutcomeSuccess, "", 0, 1010))
	if rs[0].Code != CodeOK || rs[1].Code != CodeOK {
		t.Fatalf("fire and complete in one entry: %+v", rs)
	}
	if got := e.task("b").State; got != StateSuccess {
		t.Fatalf("state %v, want SUCCESS", got)
	}
	e.checkIndexes()
}

// A restored snapshot replaces every task: the records cached before it
// must not answer after it. Here the task ran (cached RUNNING) after the
// snapshot that holds it WAITING; once restored, a Complete of that
// attempt is stale and the task stays WAITING.
func TestTaskCacheClearedByRestore(t *testing.T) {
	e := newEnv(t)
	s := Spec{Handler: "h", TimeoutNs: 30e9, MaxAttempts: 3}
	epoch := e.apply1(1, submitCmd("a", s, 1000, 1)).Task.Epoch
	stream := persist(t, e.snapshot())
	if r := e.apply1(2, fireCmd("a", epoch, 1, "n1", 1000, 40_000)); r.Code != CodeOK {
		t.Fatalf("fire: %+v", r)
	}
	if err := e.restore(stream); err != nil {
		t.Fatal(err)
	}
	if r := e.apply1(2, completeCmd("a", epoch, 1, OutcomeSuccess, "", 0, 1010)); r.Code == CodeOK {
		t.Fatalf("complete of an attempt the restored state never fired: %+v, want it refused", r)
	}
	if got := e.task("a").State; got != StateWaiting {
		t.Fatalf("state %v after the restore, want WAITING", got)
	}
	e.checkIndexes()
}

// The cache keeps at most taskCacheSize records. Past that, a record
// needed no sooner than those it would push out is not kept (a burst's
// later submits), one needed sooner pushes out the record needed latest,
// and a record written again or deleted gives its place back.
func TestTaskCacheIsBounded(t *testing.T) {
	var c taskCache
	ops := make([]writeOp, taskCacheSize+10)
	for i := range ops {
		ops[i] = writeOp{key: taskKey("t" + strconv.Itoa(i)), val: []byte{byte(i)}, next: int64(1000 + i)}
	}
	c.committed(ops)
	if len(c.m) != taskCacheSize {
		t.Fatalf("%d records, want %d", len(c.m), taskCacheSize)
	}
	if v, ok := c.get(ops[0].key); !ok || v[0] != 0 {
		t.Fatal("the record needed first is not cached")
	}
	if _, ok := c.get(ops[len(ops)-1].key); ok {
		t.Fatal("a record needed later than every cached one was kept")
	}
	// Needed sooner than every cached record (a Fire's RUNNING record):
	// kept, and the record needed latest goes.
	soon := writeOp{key: taskKey("soon"), val: []byte{1}, next: 10}
	c.committed([]writeOp{soon})
	if _, ok := c.get(soon.key); !ok {
		t.Fatal("a record needed sooner than every cached one was not kept")
	}
	if len(c.m) != taskCacheSize {
		t.Fatalf("%d records, want %d", len(c.m), taskCacheSize)
	}
	gone := 0
	for i := range taskCacheSize {
		if _, ok := c.m[string(ops[i].key)]; !ok {
			gone = i
		}
	}
	// The victim is the latest of taskCacheSample distinct records met in
	// the map's random order, so never one of the taskCacheSample-1
	// needed first.
	if gone < taskCacheSample-1 {
		t.Fatalf("record %d (needed at %d) was pushed out, want one needed late", gone, ops[gone].next)
	}
	// A record written again keeps one place; a deleted one frees it.
	c.committed([]writeOp{{key: soon.key, val: []byte{2}, next: 11}})
	if v, ok := c.get(soon.key); !ok || v[0] != 2 || len(c.m) != taskCacheSize {
		t.Fatalf("rewritten: cached %v (%v), %d records", ok, v, len(c.m))
	}
	c.committed([]writeOp{{key: soon.key, del: true}})
	if _, ok := c.get(soon.key); ok {
		t.Fatal("a deleted task is still cached")
	}
	if len(c.m) != taskCacheSize-1 {
		t.Fatalf("%d records after a delete, want %d", len(c.m), taskCacheSize-1)
	}
	late := writeOp{key: taskKey("late"), val: []byte{3}, next: 1 << 40}
	c.committed([]writeOp{late})
	if _, ok := c.get(late.key); !ok {
		t.Fatal("a record was not kept though there was room")
	}
}

// Records with large payloads are held to taskCacheBytes (without the
// bound, 32 768 records of 48 KiB held 1.5 GiB), the first kept when all
// are needed at once; a record
// over taskCacheMaxRecord is not kept at all, and a task written again
// or deleted gives its bytes back.
func TestTaskCacheBoundedInBytes(t *testing.T) {
	var c taskCache
	const size = 48 << 10
	big := make([]byte, size-200) // one buffer for every record: the test allocates little
	ops := make([]writeOp, taskCacheSize)
	for i := range ops {
		// A record's buffer is larger than the record: the cache keeps
		// the buffer, and counts it.
		ops[i] = writeOp{key: taskKey("t" + strconv.Itoa(i)), val: big[: size/2 : len(big)-i%7]}
	}
	held := func() (n int) {
		for k, r := range c.m {
			n += len(k) + cap(r.val) + taskCacheEntryOverhead
		}
		return n
	}
	c.committed(ops)
	if h := held(); h > taskCacheBytes || h != c.bytes {
		t.Fatalf("%d records hold %d bytes (counted %d), bound %d", len(c.m), h, c.bytes, taskCacheBytes)
	}
	if len(c.m) < taskCacheBytes/size-1 {
		t.Fatalf("%d records kept, want the bound's worth (%d)", len(c.m), taskCacheBytes/size)
	}
	// Every record is needed at the same time (next 0): those written
	// first stay, the later ones find no room.
	if _, ok := c.get(ops[0].key); !ok {
		t.Fatal("the first record is not cached")
	}
	if _, ok := c.get(ops[len(ops)-1].key); ok {
		t.Fatal("the last record was kept past the bound")
	}
	huge := writeOp{key: taskKey("huge"), val: make([]byte, taskCacheMaxRecord+1)}
	c.committed([]writeOp{huge})
	if _, ok := c.get(huge.key); ok {
		t.Fatal("a record over taskCacheMaxRecord is cached")
	}
	c.committed([]writeOp{{key: ops[len(ops)-1].key, val: []byte{1}}})
	c.committed([]writeOp{{key: ops[len(ops)-2].key, del: true}})
	if h := held(); h != c.bytes {
		t.Fatalf("after a rewrite and a delete: %d bytes held, %d counted", h, c.bytes)
	}
	c.clear()
	if c.bytes != 0 || len(c.m) != 0 {
		t.Fatalf("after clear: %d bytes, %d records", c.bytes, len(c.m))
	}
	c.committed(ops[:3])
	if len(c.m) != 3 || held() != c.bytes {
		t.Fatalf("%d records after clear and 3 writes", len(c.m))
	}
}

// A new task due soon after its creation is cached by its submit (its
// Fire comes next); one due later is not (the cache would have dropped it
// long before its Fire: a map insert and an eviction for nothing), and
// its Fire reads badger and applies as before, caching the fired record;
// a later write of a cached task still replaces it.
func TestTaskCacheKeepsNewTasksDueSoon(t *testing.T) {
	e := newEnv(t)
	s := Spec{Handler: "h", TimeoutNs: 30e9, MaxAttempts: 3}
	const at = 1_000_000
	soon := e.apply1(1, submitCmd("soon", s, at+newTaskCacheWithin.Milliseconds(), at)).Task.Epoch
	later := e.apply1(2, submitCmd("later", s, at+newTaskCacheWithin.Milliseconds()+1, at)).Task.Epoch
	cached := func(id string) bool {
		e.f.tasks.mu.Lock()
		defer e.f.tasks.mu.Unlock()
		_, ok := e.f.tasks.m[string(taskKey(id))]
		return ok
	}
	if !cached("soon") || cached("later") {
		t.Fatalf("cached soon %v, later %v; want true, false", cached("soon"), cached("later"))
	}
	if r := e.apply1(3, fireCmd("later", later, 1, "n1", at+20_000, at+60_000)); r.Code != CodeOK {
		t.Fatalf("fire of the uncached task: %+v", r)
	}
	if r := e.apply1(4, fireCmd("soon", soon, 1, "n1", at+10_000, at+40_000)); r.Code != CodeOK {
		t.Fatalf("fire of the cached task: %+v", r)
	}
	if e.f.tasks.hits != 1 {
		t.Fatalf("%d reads from the task cache, want 1 (the fire of soon)", e.f.tasks.hits)
	}
	for _, id := range []string{"soon", "later"} {
		if !cached(id) {
			t.Fatalf("%s not cached after its fire", id)
		}
		if got := e.task(id).State; got != StateRunning {
			t.Fatalf("%s: state %v, want RUNNING", id, got)
		}
	}
	e.checkIndexes()
}

// A burst of 50 000 tasks due at once, submitted, then fired and completed
// in the submits' order (entries of 1 000 commands): every Fire and every
// Complete reads its record from the task cache. With room for fewer
// records than the burst, each Fire's write pushed out the submit record
// of a task that fires later, and every Fire read badger. The final
// records are not kept: the cache is empty at the end, and holds only
// stored records throughout.
func TestTaskCacheHoldsABurstUntilItFires(t *testing.T) {
	if testing.Short() {
		t.Skip("50 000 tasks")
	}
	e := newEnv(t)
	s := Spec{Handler: "h", TimeoutNs: 30e9, MaxAttempts: 3}
	const (
		n     = 50_000
		per   = 1_000
		at    = 1_000_000
		dueMs = at + 2_000
	)
	idx := uint64(0)
	epochs := submitBurst(e, &idx, n, per, s, func(int) int64 { return dueMs }, at)
	for lo := 0; lo < n; lo += per {
		cmds := make([]Command, 0, per)
		for i := lo; i < lo+per; i++ {
			cmds = append(cmds, fireCmd("t"+strconv.Itoa(i), epochs[i], 1, "n1", dueMs, dueMs+30_000))
		}
		idx++
		e.apply(idx, cmds...)
	}
	if e.f.tasks.hits != n {
		t.Fatalf("%d of %d fires read the task cache", e.f.tasks.hits, n)
	}
	for lo := 0; lo < n; lo += per {
		cmds := make([]Command, 0, per)
		for i := lo; i < lo+per; i++ {
			cmds = append(cmds, completeCmd("t"+strconv.Itoa(i), epochs[i], 1, OutcomeSuccess, "", 0, dueMs+10))
		}
		idx++
		e.apply(idx, cmds...)
	}
	if e.f.tasks.hits != 2*n {
		t.Fatalf("%d of %d completes read the task cache", e.f.tasks.hits-n, n)
	}
	if c := len(e.f.tasks.m); c != 0 {
		t.Fatalf("%d records cached after every task finished, want 0", c)
	}
	// Fire and complete of one task in one entry: the RUNNING record the
	// fire wrote must not stay cached under the final one.
	ep := e.apply1(idx+1, submitCmd("one", s, dueMs, at)).Task.Epoch
	e.apply(idx+2, fireCmd("one", ep, 1, "n1", dueMs, dueMs+30_000), completeCmd("one", ep, 1, OutcomeSuccess, "", 0, dueMs+10))
	if got := e.task("one").State; got != StateSuccess {
		t.Fatalf("one: %v, want SUCCESS", got)
	}
	checkCacheMatchesStore(t, e)
	e.checkIndexes()
}

// A burst larger than the cache (taskCacheSize + 20 000 tasks, due in
// the submits' order, 1 000 at the same millisecond), fired and
// completed entry after entry as a node processes it: the submits of the
// taskCacheSize tasks due first stay cached until they fire, and every
// Complete reads the record its Fire wrote. First in, first out, each
// Fire's write pushed out the submit of a task that fires later and no
// Fire read the cache (docs/perf/README.md, Eighteenth session: a node
// processing 120 000 no-op tasks spent 76-78 µs a task against 60-67 for
// 50 000).
func TestTaskCacheKeepsTheBurstDueFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("85 536 tasks")
	}
	e := newEnv(t)
	s := Spec{Handler: "h", TimeoutNs: 30e9, MaxAttempts: 3}
	const (
		n   = taskCacheSize + 20_000
		per = 1_000
		at  = 1_000_000
	)
	due := func(i int) int64 { return at + 2_000 + int64(i/per) }
	idx := uint64(0)
	epochs := submitBurst(e, &idx, n, per, s, due, at)
	if len(e.f.tasks.m) != taskCacheSize {
		t.Fatalf("%d records cached after the submits, want %d", len(e.f.tasks.m), taskCacheSize)
	}
	var fireHits, completeHits uint64
	for lo := 0; lo < n; lo += per {
		var fires, completes []Command
		for i := lo; i < min(lo+per, n); i++ {
			fires = append(fires, fireCmd("t"+strconv.Itoa(i), epochs[i], 1, "n1", due(i), due(i)+30_000))
			completes = append(completes, completeCmd("t"+strconv.Itoa(i), epochs[i], 1, OutcomeSuccess, "", 0, due(i)+10))
		}
		h := e.f.tasks.hits
		idx++
		for _, r := range e.apply(idx, fires...) {
			if r.Code != CodeOK {
				t.Fatalf("fire: %+v", r)
			}
		}
		fireHits += e.f.tasks.hits - h
		h = e.f.tasks.hits
		idx++
		e.apply(idx, completes...)
		completeHits += e.f.tasks.hits - h
	}
	if fireHits != taskCacheSize || completeHits != n {
		t.Fatalf("fires read the cache %d times (want %d, the tasks due first), completes %d (want %d)", fireHits, taskCacheSize, completeHits, n)
	}
	if st := e.task("t" + strconv.Itoa(n-1)).State; st != StateSuccess {
		t.Fatalf("last task %v, want SUCCESS", st)
	}
	checkCacheMatchesStore(t, e)
	e.checkIndexes()
}

// With room for taskCacheSample records, an eviction looks at all of
// them: each write needed sooner than the latest pushes out exactly that
// one, a write tied with it or later is not kept, the bytes counted are
// the bytes held, and a record overdue on the cache's clock ranks last.
func TestTaskCacheEvictsTheLatest(t *testing.T) {
	c := taskCache{maxN: taskCacheSample}
	key := func(i int) []byte { return taskKey("t" + strconv.Itoa(i)) }
	check := func(what string, wantLatest int64) {
		t.Helper()
		held, latest := 0, int64(-1)
		for k, r := range c.m {
			held += len(k) + cap(r.val) + taskCacheEntryOverhead
			latest = max(latest, r.next)
		}
		if held != c.bytes || len(c.m) != taskCacheSample || latest != wantLatest {
			t.Fatalf("%s: %d records, %d bytes held, %d counted, latest %d; want %d records, latest %d", what, len(c.m), held, c.bytes, latest, taskCacheSample, wantLatest)
		}
	}
	for i := range taskCacheSample {
		c.committed([]writeOp{{key: key(i), val: make([]byte, 10+i), next: int64(100 + i), stale: 1000}})
	}
	check("filled", 115)
	for i := range 10 {
		// Needed at 50+i: each pushes out the latest, 115-i.
		c.committed([]writeOp{{key: key(100 + i), val: make([]byte, 20), next: int64(50 + i), stale: 1000}})
		if _, ok := c.get(key(taskCacheSample - 1 - i)); ok {
			t.Fatalf("record needed at %d kept, the latest", 115-i)
		}
		check("after a write needed sooner", int64(114-i))
	}
	for _, next := range []int64{105, 106, 1 << 40} {
		c.committed([]writeOp{{key: key(200), val: make([]byte, 20), next: next, stale: 1 << 41}})
		if _, ok := c.get(key(200)); ok {
			t.Fatalf("a write needed at %d, no sooner than the latest (105), was kept", next)
		}
		check("after a write needed no sooner", 105)
	}
	// The clock passes every record's stale time (1000): all rank last,
	// and a write needed much later is kept in place of one of them.
	c.committed([]writeOp{{key: key(300), val: make([]byte, 20), next: 5000, stale: 6000, at: 2000}})
	if _, ok := c.get(key(300)); !ok {
		t.Fatal("a write was not kept in place of an overdue record")
	}
	check("after the clock passed the others' stale time", 5000)
}

// Tasks due at once but never fired (a paused handler's, tasks parked
// for want of an executor) must not hold the cache once they are
// overdue: later tasks, submitted, fired and completed 20 s after, read
// their records from it. With the records of the unfired tasks ranked by
// their due time alone, they ranked sooner than any later task, and
// nothing new was kept.
func TestTaskCacheOverdueRecordsGiveWay(t *testing.T) {
	e := newEnv(t)
	e.f.tasks.maxN = 4
	s := Spec{Handler: "h", TimeoutNs: 30e9, MaxAttempts: 3}
	const at = 1_000_000
	idx := uint64(0)
	submitBurst(e, &idx, 4, 4, s, func(int) int64 { return at + 1_000 }, at)
	if len(e.f.tasks.m) != 4 {
		t.Fatalf("%d records cached, want 4", len(e.f.tasks.m))
	}
	later := int64(at + 1_000 + taskCacheOverdue.Milliseconds() + 10_000)
	h := e.f.tasks.hits
	for i := range 20 {
		id := "w" + strconv.Itoa(i)
		now := later + int64(i)*100
		idx++
		ep := e.apply1(idx, submitCmd(id, s, now+50, now)).Task.Epoch
		idx++
		e.apply1(idx, fireCmd(id, ep, 1, "n1", now+50, now+30_050))
		idx++
		e.apply1(idx, completeCmd(id, ep, 1, OutcomeSuccess, "", 0, now+60))
	}
	if got := e.f.tasks.hits - h; got != 40 {
		t.Fatalf("%d of 40 fires and completes read the cache", got)
	}
	checkCacheMatchesStore(t, e)
}

// A running attempt's record is expected to be read until its lease
// ends (a Complete of a 60 s attempt may come 25 s after the fire): new
// tasks do not push it out before, though it was fired long before they
// are due.
func TestTaskCacheKeepsARunningAttemptUntilItsLease(t *testing.T) {
	e := newEnv(t)
	e.f.tasks.maxN = 2
	s := Spec{Handler: "h", TimeoutNs: 60e9, MaxAttempts: 3}
	const at = 1_000_000
	ep := e.apply1(1, submitCmd("x", s, at, at)).Task.Epoch
	e.apply1(2, fireCmd("x", ep, 1, "n1", at, at+60_000))
	idx := uint64(2)
	for i := range 5 {
		now := int64(at + 20_000 + i*1_000)
		idx++
		e.apply1(idx, submitCmd("n"+strconv.Itoa(i), s, now+50, now))
	}
	h := e.f.tasks.hits
	if r := e.apply1(idx+1, completeCmd("x", ep, 1, OutcomeSuccess, "", 0, at+25_000)); r.Code != CodeOK {
		t.Fatalf("complete: %+v", r)
	}
	if e.f.tasks.hits == h {
		t.Fatal("the Complete of the running attempt read badger: its record was pushed out before its lease ended")
	}
	checkCacheMatchesStore(t, e)
}

// Submitted in the reverse of their due order, into room for four: the
// four due first are the ones kept, and their fires read the cache.
func TestTaskCacheKeepsTheDueFirstWhateverTheSubmitOrder(t *testing.T) {
	e := newEnv(t)
	e.f.tasks.maxN = 4
	s := Spec{Handler: "h", TimeoutNs: 30e9, MaxAttempts: 3}
	const at = 1_000_000
	idx := uint64(0)
	due := func(i int) int64 { return at + 8_000 - int64(i)*1_000 }
	epochs := submitBurst(e, &idx, 8, 1, s, due, at)
	h := e.f.tasks.hits
	for i := 7; i >= 0; i-- {
		idx++
		if r := e.apply1(idx, fireCmd("t"+strconv.Itoa(i), epochs[i], 1, "n1", due(i), due(i)+30_000)); r.Code != CodeOK {
			t.Fatalf("fire t%d: %+v", i, r)
		}
		if want := uint64(min(8-i, 4)); e.f.tasks.hits-h != want {
			t.Fatalf("after the fire of t%d (due %d): %d fires read the cache, want %d", i, due(i), e.f.tasks.hits-h, want)
		}
	}
	checkCacheMatchesStore(t, e)
}

// submitBurst submits tasks "t0" to "t<n-1>" of spec s, created at at
// and task i due at due(i), in entries of per commands from index *idx+1
// on (advancing *idx), and returns their epochs.
func submitBurst(e *env, idx *uint64, n, per int, s Spec, due func(i int) int64, at int64) []uint64 {
	epochs := make([]uint64, n)
	for lo := 0; lo < n; lo += per {
		cmds := make([]Command, 0, per)
		for i := lo; i < min(lo+per, n); i++ {
			cmds = append(cmds, submitCmd("t"+strconv.Itoa(i), s, due(i), at))
		}
		*idx++
		for j, r := range e.apply(*idx, cmds...) {
			epochs[lo+j] = r.Task.Epoch
		}
	}
	return epochs
}

// BenchmarkTaskCacheFull: a new record into a full cache, needed sooner
// than every cached one (kept: the latest of taskCacheSample records is
// evicted), or later (a burst's later submit: not kept).
func BenchmarkTaskCacheFull(b *testing.B) {
	var c taskCache
	ops := make([]writeOp, taskCacheSize)
	for i := range ops {
		ops[i] = writeOp{key: taskKey("t" + strconv.Itoa(i)), val: make([]byte, 250), next: int64(1_000_000 + i)}
	}
	c.committed(ops)
	keys := make([][]byte, 1<<20)
	for i := range keys {
		keys[i] = taskKey("n" + strconv.Itoa(i))
	}
	val := make([]byte, 250)
	for _, bc := range []struct {
		name string
		next int64
	}{{"kept", 0}, {"not-kept", 1 << 40}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				c.committed([]writeOp{{key: keys[i%len(keys)], val: val, next: bc.next}})
			}
			if len(c.m) != taskCacheSize {
				b.Fatalf("%d records, want %d", len(c.m), taskCacheSize)
			}
		})
	}
}
