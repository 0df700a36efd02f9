package engine

import (
	"container/heap"
	"context"
	"math"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkTimers compares three timer sets on one workload, on the real
// clock, each doing the same work per fire (hand the fired id to one
// channel, drained by another goroutine, and record the lateness):
//
//   - wheel: this package's [TimerSet] (wheel + heaps, named by handle);
//   - heap: a plain container/heap of *item with an index field, so that
//     removal is O(log n), run by one goroutine like TimerSet.Run;
//   - runtime: one time.AfterFunc per timer (Go's per-P timer heaps),
//     stopped through its *time.Timer.
//
// Workload: 1M timers pending, 70 % due within a minute and 30 % within an
// hour (uniform). One op cancels the timer armed one million ops earlier
// (most are still pending: cancelled before they fire; the few whose
// deadline came first have fired by then) and arms a new one from the same
// distribution, so 1M stay pending. ns/op is that insert+cancel pair,
// with the set firing in the background. Each timer carries its task id
// (a string), which fire hands on.
//
// The rows wheel, heap and runtime cancel through the handle that insert
// returned (TimerHandle, *item, *time.Timer): the like-for-like comparison
// of the structures. The -by-id rows take the calls the leader makes, arm
// by task id and cancel by task id: wheel-by-id is [Timers], which finds
// the id in its own index; heap-by-id and runtime-by-id keep a map[string]
// of their handles, as a leader using them would need.
//
// Metrics besides ns/op and allocs/op:
//
//   - B/pending: heap bytes per pending timer (runtime.GC, then
//     runtime.ReadMemStats before and after arming the 1M; the keys are
//     allocated before, so their bytes are not counted);
//   - same-key-ns: arm a new timer and cancel it at once (a task submitted
//     and cancelled before it fires), 1M pending, mean of 1M pairs;
//   - p50/p99/max-late-µs and early: lateness (fire time minus due time on
//     the real clock) of every timer fired during 3 s after the timed
//     loop, while a goroutine allocates about 100 MB/s of garbage (GC
//     cycles: the gcs metric; one is forced at 1 s), so the collector
//     marks the 1M timers while they fire. ENGINE_BENCH_NO_GC=1 leaves
//     the garbage out.
//
// The wheel rows run on RealClock, so TimerSet.Run sleeps on a timerfd
// (on Linux); ENGINE_BENCH_WAIT=go makes it sleep on a time.Timer, like
// the heap's runner, to separate the structure from the wake-up.
func BenchmarkTimers(b *testing.B) {
	const pending = 1_000_000
	impls := []struct {
		name string
		make func(fire fireFunc) timerImpl
	}{
		{"wheel", newWheelImpl},
		{"heap", func(f fireFunc) timerImpl { return newHeapImpl(f, false) }},
		{"runtime", func(f fireFunc) timerImpl { return newRuntimeImpl(f, false) }},
		{"wheel-by-id", newWheelByIDImpl},
		{"heap-by-id", func(f fireFunc) timerImpl { return newHeapImpl(f, true) }},
		{"runtime-by-id", func(f fireFunc) timerImpl { return newRuntimeImpl(f, true) }},
	}
	// One workload for all: 2×pending keys (a cancelled slot's successor
	// gets the other key of its pair) and 64Ki due offsets.
	keys := benchKeys("t", 2*pending)
	offs := benchOffsets()
	for _, im := range impls {
		b.Run(im.name, func(b *testing.B) {
			runtime.GC()
			var rec fireRecorder
			rec.start()
			impl := im.make(rec.fire)
			ring := make([]timerHandle, pending)
			var m0, m1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&m0)
			base := time.Now().UnixNano()
			for i := range ring {
				ring[i] = impl.insert(keys[i], base+int64(offs[i&(1<<16-1)]))
			}
			runtime.GC()
			runtime.ReadMemStats(&m1)
			perTimer := float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc)) / pending

			i := 0
			b.ReportAllocs()
			for b.Loop() {
				if i&1023 == 0 {
					base = time.Now().UnixNano()
				}
				r := i % pending
				impl.cancel(ring[r])
				k := r
				if (i/pending)&1 == 0 {
					k += pending
				}
				ring[r] = impl.insert(keys[k], base+int64(offs[i&(1<<16-1)]))
				i++
			}
			b.StopTimer()

			// Same key: insert a timer and cancel it at once.
			const sameN = 1_000_000
			sameKeys := benchKeys("same", 1<<12)
			t0 := time.Now()
			for j := range sameN {
				if j&1023 == 0 {
					base = time.Now().UnixNano()
				}
				k := sameKeys[j&(1<<12-1)]
				impl.cancel(impl.insert(k, base+int64(offs[j&(1<<16-1)])))
			}
			sameNs := float64(time.Since(t0).Nanoseconds()) / sameN

			// Lateness under GC, with the set firing on its own.
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			gc0 := ms.NumGC
			rec.reset()
			stopGC := func() {}
			if os.Getenv("ENGINE_BENCH_NO_GC") == "" {
				stopGC = garbage()
			}
			time.Sleep(3 * time.Second)
			stopGC()
			rec.stopRecording()
			runtime.ReadMemStats(&ms)
			impl.stop(ring)
			rec.stop()

			b.ReportMetric(perTimer, "B/pending")
			b.ReportMetric(sameNs, "same-key-ns")
			b.ReportMetric(float64(ms.NumGC-gc0), "gcs")
			rec.report(b)
		})
	}
}

// fireFunc is the work done per fired timer: record lateness, hand the id
// to the channel.
type fireFunc func(id string, due int64, now int64)

// timerHandle is what an implementation returns from insert and takes in
// cancel: the id, and the handle of the structure where it has one
// (TimerHandle for wheel, *heapItem for heap, *time.Timer for runtime).
type timerHandle struct {
	key string
	wh  TimerHandle
	p   any // a pointer: storing it allocates nothing
}

type timerImpl interface {
	insert(id string, due int64) timerHandle
	cancel(h timerHandle)
	stop(pending []timerHandle) // stop firing and drop everything
}

// fireRecorder receives fires from any goroutine: a lateness histogram in
// microseconds (atomic buckets) and one channel of ids.
type fireRecorder struct {
	hist      [100_001]atomic.Uint32 // µs; the last bucket holds >= 100 ms
	early     atomic.Int64
	maxLate   atomic.Int64
	recording atomic.Bool
	ids       chan string
	done      chan struct{}
}

func (r *fireRecorder) start() {
	r.ids = make(chan string, 1<<16)
	r.done = make(chan struct{})
	go func() {
		defer close(r.done)
		n := 0
		for range r.ids {
			n++
		}
		_ = n
	}()
}

func (r *fireRecorder) fire(id string, due, now int64) {
	if r.recording.Load() {
		late := now - due
		if late < 0 {
			r.early.Add(1)
		} else {
			us := min(late/1000, int64(len(r.hist)-1))
			r.hist[us].Add(1)
			for {
				m := r.maxLate.Load()
				if late <= m || r.maxLate.CompareAndSwap(m, late) {
					break
				}
			}
		}
	}
	r.ids <- id
}

func (r *fireRecorder) reset() {
	for i := range r.hist {
		r.hist[i].Store(0)
	}
	r.early.Store(0)
	r.maxLate.Store(0)
	r.recording.Store(true)
}

func (r *fireRecorder) stopRecording() { r.recording.Store(false) }

func (r *fireRecorder) stop() {
	close(r.ids)
	<-r.done
}

func (r *fireRecorder) report(b *testing.B) {
	var n uint64
	for i := range r.hist {
		n += uint64(r.hist[i].Load())
	}
	q := func(p float64) float64 {
		want := uint64(math.Ceil(p * float64(n)))
		var c uint64
		for i := range r.hist {
			c += uint64(r.hist[i].Load())
			if c >= want {
				return float64(i)
			}
		}
		return float64(len(r.hist) - 1)
	}
	if e := r.early.Load(); e > 0 {
		b.Errorf("%d timers fired early", e)
	}
	b.ReportMetric(float64(n), "fired")
	b.ReportMetric(float64(r.early.Load()), "early")
	b.ReportMetric(q(0.50), "p50-late-µs")
	b.ReportMetric(q(0.99), "p99-late-µs")
	b.ReportMetric(float64(r.maxLate.Load())/1e3, "max-late-µs")
}

// garbage allocates about 100 MB/s of short-lived memory, and forces one GC
// cycle after a second, until the returned function is called.
func garbage() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		var keep [][]byte
		tk := time.NewTicker(time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
				keep = append(keep, make([]byte, 100<<10))
				if len(keep) > 256 {
					keep = keep[:0]
				}
			}
		}
	}()
	go func() {
		defer wg.Done()
		select {
		case <-done:
		case <-time.After(time.Second):
			runtime.GC()
		}
	}()
	return func() { close(done); wg.Wait() }
}

// wheel: this package's TimerSet on the real clock, by handle.

type wheelImpl struct {
	ts   *TimerSet[string]
	quit context.CancelFunc
	done chan struct{}
}

func newWheelImpl(fire fireFunc) timerImpl {
	w := &wheelImpl{ts: NewTimerSet[string](benchClock(), TimersOptions{}), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	w.quit = cancel
	go func() {
		defer close(w.done)
		w.ts.Run(ctx, func(batch []Fired[string]) {
			now := time.Now().UnixNano()
			for _, f := range batch {
				fire(f.Payload, f.Due.UnixNano(), now)
			}
		})
	}()
	return w
}

func (w *wheelImpl) insert(id string, due int64) timerHandle {
	return timerHandle{wh: w.ts.Arm(time.Unix(0, due), id)}
}

func (w *wheelImpl) cancel(h timerHandle) { w.ts.Cancel(h.wh) }

func (w *wheelImpl) stop([]timerHandle) {
	w.quit()
	<-w.done
}

// wheel-by-id: this package's Timers on the real clock, by task id.

type wheelByIDImpl struct {
	tm   *Timers
	quit context.CancelFunc
	done chan struct{}
}

func newWheelByIDImpl(fire fireFunc) timerImpl {
	w := &wheelByIDImpl{tm: NewTimers(benchClock(), TimersOptions{}), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	w.quit = cancel
	go func() {
		defer close(w.done)
		w.tm.Run(ctx, func(batch []Expired) {
			now := time.Now().UnixNano()
			for _, e := range batch {
				fire(e.Key, e.Due.UnixNano(), now)
			}
		})
	}()
	return w
}

func (w *wheelByIDImpl) insert(id string, due int64) timerHandle {
	w.tm.Arm(id, time.Unix(0, due))
	return timerHandle{key: id}
}

func (w *wheelByIDImpl) cancel(h timerHandle) { w.tm.Cancel(h.key) }

func (w *wheelByIDImpl) stop([]timerHandle) {
	w.quit()
	<-w.done
}

// heap: container/heap with an index per item, run like Timers.Run.

type heapItem struct {
	id    string
	due   int64
	index int // in the heap, -1 when out
}

type itemHeap []*heapItem

func (h itemHeap) Len() int           { return len(h) }
func (h itemHeap) Less(i, j int) bool { return h[i].due < h[j].due }
func (h itemHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *itemHeap) Push(x any) {
	it := x.(*heapItem)
	it.index = len(*h)
	*h = append(*h, it)
}
func (h *itemHeap) Pop() any {
	old := *h
	n := len(old) - 1
	it := old[n]
	old[n] = nil
	it.index = -1
	*h = old[:n]
	return it
}

type heapImpl struct {
	mu   sync.Mutex
	h    itemHeap
	byID map[string]*heapItem // nil: by handle
	wake chan struct{}
	quit context.CancelFunc
	done chan struct{}
}

func newHeapImpl(fire fireFunc, byID bool) timerImpl {
	t := &heapImpl{wake: make(chan struct{}, 1), done: make(chan struct{})}
	if byID {
		t.byID = map[string]*heapItem{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.quit = cancel
	go func() {
		defer close(t.done)
		timer := time.NewTimer(time.Hour)
		var batch []*heapItem
		for ctx.Err() == nil {
			now := time.Now().UnixNano()
			t.mu.Lock()
			batch = batch[:0]
			for len(t.h) > 0 && t.h[0].due <= now {
				it := heap.Pop(&t.h).(*heapItem)
				if t.byID != nil && t.byID[it.id] == it {
					delete(t.byID, it.id)
				}
				batch = append(batch, it)
			}
			next := int64(math.MaxInt64)
			if len(t.h) > 0 {
				next = t.h[0].due
			}
			t.mu.Unlock()
			if len(batch) > 0 {
				now = time.Now().UnixNano()
				for _, it := range batch {
					fire(it.id, it.due, now)
				}
				continue
			}
			d := time.Duration(math.MaxInt64)
			if next != math.MaxInt64 {
				d = time.Duration(next - now)
			}
			timer.Reset(d)
			select {
			case <-ctx.Done():
			case <-timer.C:
			case <-t.wake:
			}
		}
	}()
	return t
}

func (t *heapImpl) insert(id string, due int64) timerHandle {
	it := &heapItem{id: id, due: due}
	t.mu.Lock()
	if t.byID != nil {
		if old := t.byID[id]; old != nil && old.index >= 0 {
			heap.Remove(&t.h, old.index)
		}
		t.byID[id] = it
	}
	heap.Push(&t.h, it)
	if it.index == 0 {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
	t.mu.Unlock()
	return timerHandle{key: id, p: it}
}

func (t *heapImpl) cancel(h timerHandle) {
	t.mu.Lock()
	it, _ := h.p.(*heapItem)
	if t.byID != nil {
		it = t.byID[h.key]
		delete(t.byID, h.key)
	}
	if it != nil && it.index >= 0 {
		heap.Remove(&t.h, it.index)
	}
	t.mu.Unlock()
}

func (t *heapImpl) stop([]timerHandle) {
	t.quit()
	<-t.done
}

// runtime: one time.AfterFunc per timer.

type runtimeImpl struct {
	fire    fireFunc
	mu      sync.RWMutex // callbacks hold it for reading while they fire
	stopped bool
	idMu    sync.Mutex
	byID    map[string]*time.Timer // nil: by handle
}

func newRuntimeImpl(fire fireFunc, byID bool) timerImpl {
	r := &runtimeImpl{fire: fire}
	if byID {
		r.byID = map[string]*time.Timer{}
	}
	return r
}

// insert starts a timer and, by id, records it under id. A fired timer's
// id stays in the map until it is cancelled or re-armed (deleting it from
// the callback would cost every fire a lock); Stop on it is a no-op.
func (r *runtimeImpl) insert(id string, due int64) timerHandle {
	t := time.AfterFunc(time.Until(time.Unix(0, due)), func() {
		r.mu.RLock()
		if !r.stopped {
			r.fire(id, due, time.Now().UnixNano())
		}
		r.mu.RUnlock()
	})
	if r.byID != nil {
		r.idMu.Lock()
		if old := r.byID[id]; old != nil {
			old.Stop()
		}
		r.byID[id] = t
		r.idMu.Unlock()
	}
	return timerHandle{key: id, p: t}
}

func (r *runtimeImpl) cancel(h timerHandle) {
	t, _ := h.p.(*time.Timer)
	if r.byID != nil {
		r.idMu.Lock()
		t = r.byID[h.key]
		delete(r.byID, h.key)
		r.idMu.Unlock()
	}
	if t != nil {
		t.Stop()
	}
}

func (r *runtimeImpl) stop(pending []timerHandle) {
	r.mu.Lock()
	r.stopped = true // no callback fires after this
	r.mu.Unlock()
	for _, h := range pending {
		if t, ok := h.p.(*time.Timer); ok {
			t.Stop()
		}
	}
}

// benchClock is the clock of the wheel rows: RealClock, on which Run
// sleeps on a timerfd (Linux), or with ENGINE_BENCH_WAIT=go a wrapper of
// it, on which Run sleeps on a time.Timer like the heap's runner.
func benchClock() Clock {
	if os.Getenv("ENGINE_BENCH_WAIT") == "go" {
		return goTimerClock{RealClock()}
	}
	return RealClock()
}

// goTimerClock is RealClock under another type, so that TimerSet.Run uses
// its NewTimer (a time.Timer) as for any clock not of this package.
type goTimerClock struct{ Clock }
