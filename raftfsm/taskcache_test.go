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

// The cache keeps at most taskCacheSize records, the last written.
func TestTaskCacheIsBounded(t *testing.T) {
	var c taskCache
	ops := make([]writeOp, taskCacheSize+10)
	for i := range ops {
		ops[i] = writeOp{key: taskKey("t" + strconv.Itoa(i)), val: []byte{byte(i)}}
	}
	c.committed(ops)
	if len(c.m) != taskCacheSize {
		t.Fatalf("%d records, want %d", len(c.m), taskCacheSize)
	}
	if _, ok := c.get(ops[0].key); ok {
		t.Fatal("the first record is still cached")
	}
	if v, ok := c.get(ops[len(ops)-1].key); !ok || v[0] != byte(len(ops)-1) {
		t.Fatal("the last record is not cached")
	}
	// A record written again is kept by its last write, not evicted by
	// its first one's slot.
	c.committed([]writeOp{{key: ops[len(ops)-1].key, val: []byte{1}}})
	c.committed(ops[:taskCacheSize-1])
	if v, ok := c.get(ops[len(ops)-1].key); !ok || v[0] != 1 {
		t.Fatal("a record written again was evicted by its first write's slot")
	}
	c.committed([]writeOp{{key: ops[len(ops)-1].key, del: true}})
	if _, ok := c.get(ops[len(ops)-1].key); ok {
		t.Fatal("a deleted task is still cached")
	}
}

// Records with large payloads are held to taskCacheBytes (without the
// bound, 32 768 records of 48 KiB held 1.5 GiB), the newest kept; a record
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
	if _, ok := c.get(ops[len(ops)-1].key); !ok {
		t.Fatal("the newest record is not cached")
	}
	if _, ok := c.get(ops[0].key); ok {
		t.Fatal("the oldest record is still cached")
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
	if c.bytes != 0 || len(c.m) != 0 || c.n != 0 {
		t.Fatalf("after clear: %d bytes, %d records, %d slots", c.bytes, len(c.m), c.n)
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
	epochs := make([]uint64, n)
	for lo := 0; lo < n; lo += per {
		cmds := make([]Command, 0, per)
		for i := lo; i < lo+per; i++ {
			cmds = append(cmds, submitCmd("t"+strconv.Itoa(i), s, dueMs, at))
		}
		idx++
		for j, r := range e.apply(idx, cmds...) {
			epochs[lo+j] = r.Task.Epoch
		}
	}
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
