package engine

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func mustPush(t testing.TB, q *ReadyQueue, key string, p int) {
	t.Helper()
	if err := q.Push(key, p); err != nil {
		t.Fatal(err)
	}
}

func popKeys(t testing.TB, q *ReadyQueue, n int) []string {
	t.Helper()
	var out []string
	for range n {
		it, ok := q.Pop()
		if !ok {
			t.Fatalf("Pop: empty after %d", len(out))
		}
		out = append(out, it.Key)
	}
	return out
}

func TestReady_FIFOWithinLevel(t *testing.T) {
	q := NewReadyQueue(NewFakeClock(start), ReadyOptions{})
	for i := range 5 {
		mustPush(t, q, "k"+strconv.Itoa(i), 3)
	}
	if got := popKeys(t, q, 5); !slices.Equal(got, []string{"k0", "k1", "k2", "k3", "k4"}) {
		t.Fatalf("got %v", got)
	}
	if _, ok := q.Pop(); ok {
		t.Fatal("Pop of an empty queue")
	}
}

func TestReady_WeightedRoundRobin(t *testing.T) {
	tests := []struct {
		name    string
		weights [Priorities]int
		levels  []int // backlogged levels
		pops    int
		want    [Priorities]int
	}{
		{"defaults, all levels", [Priorities]int{}, []int{0, 1, 2, 3, 4}, 31 * 10, [Priorities]int{160, 80, 40, 20, 10}},
		{"defaults, one cycle", [Priorities]int{}, []int{0, 1, 2, 3, 4}, 31, [Priorities]int{16, 8, 4, 2, 1}},
		{"defaults, levels 0 and 4", [Priorities]int{}, []int{0, 4}, 17 * 3, [Priorities]int{48, 0, 0, 0, 3}},
		{"equal weights", [Priorities]int{1, 1, 1, 1, 1}, []int{0, 1, 2, 3, 4}, 10, [Priorities]int{2, 2, 2, 2, 2}},
		{"3:2:1", [Priorities]int{3, 2, 1, 1, 1}, []int{0, 1, 2}, 60, [Priorities]int{30, 20, 10, 0, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := NewReadyQueue(NewFakeClock(start), ReadyOptions{Weights: tc.weights, MaxWait: -1, Capacity: -1})
			for _, p := range tc.levels {
				for i := range tc.pops {
					mustPush(t, q, fmt.Sprintf("p%d-%d", p, i), p)
				}
			}
			var got [Priorities]int
			for range tc.pops {
				it, _ := q.Pop()
				got[it.Priority]++
			}
			if got != tc.want {
				t.Fatalf("pops per level = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestReady_SmoothInterleaving(t *testing.T) {
	// With 16:8:4:2:1 the top level never gets more than a few pops in a
	// row, and every level is served within one cycle of 31.
	q := NewReadyQueue(NewFakeClock(start), ReadyOptions{MaxWait: -1, Capacity: -1})
	for p := range Priorities {
		for i := range 100 {
			mustPush(t, q, fmt.Sprintf("p%d-%d", p, i), p)
		}
	}
	var seq []int
	for range 31 {
		it, _ := q.Pop()
		seq = append(seq, it.Priority)
	}
	run := 0
	for i := range seq {
		if i > 0 && seq[i] == seq[i-1] {
			run++
			if run >= 2 {
				t.Fatalf("level %d served 3 times in a row: %v", seq[i], seq)
			}
		} else {
			run = 0
		}
	}
	for p := range Priorities {
		if !slices.Contains(seq, p) {
			t.Fatalf("level %d not served in one cycle: %v", p, seq)
		}
	}
}

func TestReady_EmptyLevelsDoNotBankCredit(t *testing.T) {
	// Level 4 alone for a while must not earn credit to burst later.
	q := NewReadyQueue(NewFakeClock(start), ReadyOptions{Weights: [Priorities]int{1, 1, 1, 1, 1}, MaxWait: -1})
	for i := range 10 {
		mustPush(t, q, "low"+strconv.Itoa(i), 4)
	}
	popKeys(t, q, 5)
	for i := range 10 {
		mustPush(t, q, "high"+strconv.Itoa(i), 0)
	}
	var got []int
	for range 6 {
		it, _ := q.Pop()
		got = append(got, it.Priority)
	}
	if want := []int{0, 4, 0, 4, 0, 4}; !slices.Equal(got, want) && !slices.Equal(got, []int{4, 0, 4, 0, 4, 0}) {
		t.Fatalf("got %v, want alternation", got)
	}
}

func TestReady_Ageing(t *testing.T) {
	clock := NewFakeClock(start)
	q := NewReadyQueue(clock, ReadyOptions{MaxWait: 10 * time.Second})
	mustPush(t, q, "low-old", 4)
	clock.Advance(time.Second)
	mustPush(t, q, "mid-old", 2)
	clock.Advance(10 * time.Second) // low-old waited 11 s, mid-old 10 s
	for i := range 20 {
		mustPush(t, q, "high"+strconv.Itoa(i), 0)
	}
	it, _ := q.Pop()
	if it.Key != "low-old" || !it.Aged || !it.Queued.Equal(start) {
		t.Fatalf("first pop = %+v, want aged low-old", it)
	}
	if w := q.OldestWait(); w != 10*time.Second {
		t.Fatalf("OldestWait = %v, want 10s", w)
	}
	// mid-old waited exactly the budget: not over it, so WRR applies.
	it, _ = q.Pop()
	if it.Aged || it.Priority != 0 {
		t.Fatalf("second pop = %+v, want a high one by WRR", it)
	}
	clock.Advance(time.Nanosecond)
	it, _ = q.Pop()
	if it.Key != "mid-old" || !it.Aged {
		t.Fatalf("third pop = %+v, want aged mid-old", it)
	}
	// Disabled ageing: strict WRR.
	q = NewReadyQueue(clock, ReadyOptions{MaxWait: -1})
	mustPush(t, q, "low", 4)
	clock.Advance(time.Hour)
	for i := range 20 {
		mustPush(t, q, "high"+strconv.Itoa(i), 0)
	}
	if it, _ := q.Pop(); it.Key == "low" {
		t.Fatal("ageing disabled but low served first")
	}
}

// TestReady_NoStarvation feeds more high-priority work than is served and
// checks that a low-priority task is still served within the budget.
func TestReady_NoStarvation(t *testing.T) {
	clock := NewFakeClock(start)
	q := NewReadyQueue(clock, ReadyOptions{Weights: [Priorities]int{1000, 1, 1, 1, 1}, MaxWait: 5 * time.Second, Capacity: -1})
	for i := range 2000 {
		mustPush(t, q, "low"+strconv.Itoa(i), 4)
	}
	served, n := 0, 0
	for range 20000 {
		clock.Advance(10 * time.Millisecond)
		for range 3 { // 3 arrive, 1 is served per step: overload
			n++
			mustPush(t, q, "high"+strconv.Itoa(n), 0)
		}
		if it, _ := q.Pop(); it.Priority == 4 {
			served++
		}
	}
	// Weights alone would serve about 20000/1001 ≈ 20 low tasks; ageing
	// serves every low task once its wait passes the budget. (Overloaded,
	// the queue then runs FIFO by wait, so the waits grow, but nothing
	// starves.)
	if served != 2000 {
		t.Fatalf("%d of 2000 low tasks served in 20000 pops", served)
	}
}

func TestReady_Errors(t *testing.T) {
	q := NewReadyQueue(NewFakeClock(start), ReadyOptions{Capacity: 2})
	mustPush(t, q, "a", 0)
	if err := q.Push("a", 1); !errors.Is(err, ErrAlreadyQueued) {
		t.Fatalf("duplicate Push = %v", err)
	}
	for _, p := range []int{-1, 5} {
		if err := q.Push("x", p); !errors.Is(err, ErrInvalidPriority) {
			t.Fatalf("Push priority %d = %v", p, err)
		}
	}
	mustPush(t, q, "b", 4)
	if err := q.Push("c", 0); !errors.Is(err, ErrBacklogFull) {
		t.Fatalf("Push beyond capacity = %v", err)
	}
	// Requeue ignores the capacity: the item was counted before.
	it, _ := q.Pop()
	mustPush(t, q, "c", 0)
	if err := q.Requeue(it); err != nil {
		t.Fatalf("Requeue = %v", err)
	}
	if err := q.Requeue(it); !errors.Is(err, ErrAlreadyQueued) {
		t.Fatalf("second Requeue = %v", err)
	}
	if err := q.Requeue(ReadyItem{Key: "z", Priority: 9}); !errors.Is(err, ErrInvalidPriority) {
		t.Fatalf("Requeue priority 9 = %v", err)
	}
	if q.Len() != 3 {
		t.Fatalf("Len = %d, want 3", q.Len())
	}
	// Unbounded.
	q = NewReadyQueue(NewFakeClock(start), ReadyOptions{Capacity: -1})
	for i := range ReadyCapacityDefault + 10 {
		mustPush(t, q, strconv.Itoa(i), i%Priorities)
	}
}

func TestReady_RemoveRequeueDepths(t *testing.T) {
	clock := NewFakeClock(start)
	q := NewReadyQueue(clock, ReadyOptions{MaxWait: -1})
	for i := range 4 {
		mustPush(t, q, "a"+strconv.Itoa(i), 1)
		clock.Advance(time.Second)
	}
	mustPush(t, q, "b", 3)
	if d := q.Depths(); d != [Priorities]int{0, 4, 0, 1, 0} {
		t.Fatalf("Depths = %v", d)
	}
	if !q.Remove("a1") || q.Remove("a1") || q.Remove("zz") {
		t.Fatal("Remove results wrong")
	}
	// Pop two of level 1 and put them back in either order: the level
	// stays in Queued order.
	x, _ := q.Pop()
	y, _ := q.Pop()
	if x.Key != "a0" || y.Key != "a2" {
		t.Fatalf("popped %s %s, want a0 a2", x.Key, y.Key)
	}
	if err := q.Requeue(x); err != nil {
		t.Fatal(err)
	}
	if err := q.Requeue(y); err != nil {
		t.Fatal(err)
	}
	var got []string
	for q.Depths()[1] > 0 {
		it, _ := q.Pop()
		if it.Priority == 1 {
			got = append(got, it.Key)
		}
	}
	if !slices.Equal(got, []string{"a0", "a2", "a3"}) {
		t.Fatalf("level 1 order %v", got)
	}
	for q.Len() > 0 {
		q.Pop()
	}
	if q.OldestWait() != 0 {
		t.Fatal("OldestWait of empty queue")
	}
}

func TestReadyOptions(t *testing.T) {
	if err := (ReadyOptions{}).Validate(); err != nil {
		t.Fatal(err)
	}
	d := ReadyOptions{}.WithDefaults()
	if d.Weights != ReadyWeightsDefault || d.MaxWait != ReadyMaxWaitDefault || d.Capacity != ReadyCapacityDefault {
		t.Fatalf("defaults = %+v", d)
	}
	for _, w := range [][Priorities]int{{1, 0, 1, 1, 1}, {1, 1, 1, 1, -1}, {ReadyWeightMax + 1, 1, 1, 1, 1}} {
		err := ReadyOptions{Weights: w}.Validate()
		if !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("Weights %v: Validate = %v", w, err)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("NewReadyQueue with invalid options did not panic")
		}
	}()
	NewReadyQueue(RealClock(), ReadyOptions{Weights: [Priorities]int{1}})
}

func TestReady_Concurrent(t *testing.T) {
	q := NewReadyQueue(RealClock(), ReadyOptions{Capacity: -1, MaxWait: time.Millisecond})
	const pushers, per = 4, 5000
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[string]int{}
	done := make(chan struct{})
	for w := range pushers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				k := fmt.Sprintf("%d-%d", w, i)
				mustPush(t, q, k, i%Priorities)
				if i%7 == 0 && q.Remove(k) {
					mu.Lock()
					seen[k]++ // removed counts as consumed
					mu.Unlock()
				}
			}
		}()
	}
	var pg sync.WaitGroup
	for range 2 {
		pg.Add(1)
		go func() {
			defer pg.Done()
			for {
				it, ok := q.Pop()
				if !ok {
					select {
					case <-done:
						if q.Len() == 0 {
							return
						}
					default:
					}
					runtime.Gosched()
					continue
				}
				if it.Key[0] == '0' && len(it.Key)%3 == 0 {
					if err := q.Requeue(it); err != nil {
						t.Error(err)
					}
					it, ok = q.Pop()
					if !ok {
						continue
					}
				}
				mu.Lock()
				seen[it.Key]++
				mu.Unlock()
				_ = q.Depths()
			}
		}()
	}
	wg.Wait()
	close(done)
	pg.Wait()
	if len(seen) != pushers*per {
		t.Fatalf("consumed %d keys, want %d", len(seen), pushers*per)
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("%s consumed %d times", k, n)
		}
	}
}

func BenchmarkReadyPushPop(b *testing.B) {
	q := NewReadyQueue(RealClock(), ReadyOptions{Capacity: -1})
	ks := benchKeys("ready", 1<<16)
	for i := range 10000 { // a standing backlog
		mustPush(b, q, "standing"+strconv.Itoa(i), i%Priorities)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := q.Push(ks[i&(1<<16-1)], i%Priorities); err != nil {
			b.Fatal(err)
		}
		q.Pop()
	}
}

// A look that PopIf refuses leaves the queue as it was: the same task
// comes next, and the pop sequence (round-robin credit included) is the
// one of a queue never looked at. Requeue after Pop spent the level's
// turn: a dispatcher that could not place priority 0's head then served
// priority 4 twice as often.
func TestReady_PopIfRefusedLeavesQueue(t *testing.T) {
	fill := func() *ReadyQueue {
		q := NewReadyQueue(NewFakeClock(start), ReadyOptions{MaxWait: -1, Capacity: -1})
		for i := range 20 {
			for _, p := range []int{0, 4} {
				if err := q.Push(fmt.Sprintf("p%d-%02d", p, i), p); err != nil {
					t.Fatal(err)
				}
			}
		}
		return q
	}
	plain, looked := fill(), fill()
	for {
		want, ok := plain.Pop()
		for range 3 {
			it, taken, ok2 := looked.PopIf(func(ReadyItem) bool { return false })
			if taken || ok2 != ok || (ok && it.Key != want.Key) {
				t.Fatalf("refused look: %v taken %v ok %v, want %v untaken", it.Key, taken, ok2, want.Key)
			}
		}
		got, taken, ok2 := looked.PopIf(func(ReadyItem) bool { return true })
		if ok2 != ok || (ok && (!taken || got.Key != want.Key)) {
			t.Fatalf("after refused looks: %v (taken %v), want %v", got.Key, taken, want.Key)
		}
		if !ok {
			break
		}
	}
	// Ageing: the aged head is offered, and stays when refused.
	c := NewFakeClock(start)
	q := NewReadyQueue(c, ReadyOptions{MaxWait: time.Second})
	_ = q.Push("old", 4)
	c.Advance(2 * time.Second)
	_ = q.Push("new", 0)
	if it, taken, _ := q.PopIf(func(ReadyItem) bool { return false }); taken || it.Key != "old" || !it.Aged || q.Len() != 2 {
		t.Fatalf("aged look: %+v taken %v len %d", it, taken, q.Len())
	}
}

// Find returns the first task of a kind in the order successive Pops
// would serve the queue (ageing, then weighted round robin from the
// credit the queue holds, FIFO within a level), not merely the first of
// its level or of the highest priority, and it changes nothing: the
// queue then pops exactly as if never looked at. The leader uses it to
// pick a fresh run, rather than a parked retry, as a half-open circuit's
// probe.
func TestReady_FindInPopOrder(t *testing.T) {
	fill := func() *ReadyQueue {
		c := NewFakeClock(start)
		q := NewReadyQueue(c, ReadyOptions{MaxWait: 10 * time.Second, Capacity: -1})
		mustPush(t, q, "old4-r", 4)
		mustPush(t, q, "old2-f", 2)
		c.Advance(11 * time.Second) // both over the budget: served first
		for i := range 6 {
			for _, p := range []int{0, 1, 4} {
				kind := "r" // p0-5, p1-2, p1-5, p4-2 and p4-5 are "f"
				if p == 0 && i == 5 || p != 0 && i%3 == 2 {
					kind = "f"
				}
				mustPush(t, q, fmt.Sprintf("p%d-%d-%s", p, i, kind), p)
			}
		}
		return q
	}
	var order []ReadyItem
	for q := fill(); ; {
		it, ok := q.Pop()
		if !ok {
			break
		}
		order = append(order, it)
	}
	looked := fill()
	// Some pops first, so that the round robin holds credit.
	for _, want := range order[:4] {
		if it, _ := looked.Pop(); it.Key != want.Key {
			t.Fatalf("pop %s, want %s", it.Key, want.Key)
		}
	}
	rest := order[4:]
	for _, want := range rest {
		it, ok := looked.Find(func(it ReadyItem) bool { return it.Key == want.Key })
		if !ok || it.Key != want.Key || it.Priority != want.Priority || it.Aged != want.Aged || !it.Queued.Equal(want.Queued) {
			t.Fatalf("Find(%s) = %+v, %v; want %+v as Pop serves it", want.Key, it, ok, want)
		}
	}
	var firstFresh string
	for _, it := range rest {
		if strings.HasSuffix(it.Key, "-f") {
			firstFresh = it.Key
			break
		}
	}
	var looks []string
	it, ok := looked.Find(func(it ReadyItem) bool {
		looks = append(looks, it.Key)
		return strings.HasSuffix(it.Key, "-f")
	})
	// Pop order here: p0-1, p0-2, p1-1, p0-3, p0-4, p1-2-f, p0-5-f, …
	if !ok || it.Key != firstFresh || firstFresh != "p1-2-f" {
		t.Fatalf("first fresh: %s (%v), want %s, the first in pop order (p1-2-f, not the highest priority's p0-5-f)", it.Key, ok, firstFresh)
	}
	for i, k := range looks {
		if k != rest[i].Key {
			t.Fatalf("Find looked at %v, want pop order %v", looks, rest[:len(looks)])
		}
	}
	if it, ok := looked.Find(func(ReadyItem) bool { return false }); ok {
		t.Fatalf("Find with no match: %+v", it)
	}
	if looked.Len() != len(rest) {
		t.Fatalf("Len %d after Find, want %d", looked.Len(), len(rest))
	}
	for _, want := range rest {
		if it, _ := looked.Pop(); it.Key != want.Key {
			t.Fatalf("after Find: pop %s, want %s (order changed)", it.Key, want.Key)
		}
	}
	if _, ok := NewReadyQueue(NewFakeClock(start), ReadyOptions{}).Find(func(ReadyItem) bool { return true }); ok {
		t.Fatal("Find in an empty queue found something")
	}
}
