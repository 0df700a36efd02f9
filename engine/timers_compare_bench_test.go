package engine

import (
	"container/heap"
	"context"
	"math"
	"math/rand/v2"
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
//   - wheel: this package's [Timers] (wheel + heaps, keyed by string);
//   - heap: a plain container/heap of *item with an index field, so that
//     removal is O(log n), run by one goroutine like Timers.Run;
//   - runtime: one time.AfterFunc per timer (Go's per-P timer heaps).
//
// Workload: 1M timers pending, 70 % due within a minute and 30 % within an
// hour (uniform). One op cancels the timer armed one million ops earlier
// (most are still pending: cancelled before they fire; the few whose
// deadline came first have fired by then) and arms a new one from the same
// distribution, so 1M stay pending. ns/op is that insert+cancel pair,
// with the set firing in the background. All three take the same calls
// the leader makes: arm by task id, cancel by task id. Timers finds the id
// in its own index; heap and runtime keep a map[string] of their handles
// (*item, *time.Timer), since a leader using them would need one.
//
// Metrics besides ns/op and allocs/op:
//
//   - B/pending: heap bytes per pending timer (runtime.GC, then
//     runtime.ReadMemStats before and after arming the 1M; the keys are
//     allocated before, so their bytes are not counted);
//   - same-key-ns: arm a new timer and cancel it at once (a task submitted
//     and cancelled before it fires), 1M pending, mean of 1M pairs;
//   - by-handle-ns (heap and runtime only): the timed workload again for
//     1M ops, but cancelling through the handle, without the map: the raw
//     cost of the structure;
//   - p50/p99/max-late-µs and early: lateness (fire time minus due time on
//     the real clock) of every timer fired during 3 s after the timed
//     loop, while a goroutine allocates about 100 MB/s of garbage (GC
//     cycles: the gcs metric; one is forced at 1 s), so the collector
//     marks the 1M timers while they fire. ENGINE_BENCH_NO_GC=1 leaves
//     the garbage out.
func BenchmarkTimers(b *testing.B) {
	const pending = 1_000_000
	impls := []struct {
		name string
		make func(fire fireFunc) timerImpl
	}{
		{"wheel", newWheelImpl},
		{"heap", newHeapImpl},
		{"runtime", newRuntimeImpl},
	}
	// One workload for all: 2×pending keys (a cancelled slot's successor
	// gets the other key of its pair) and 64Ki due offsets.
	keys := benchKeys("t", 2*pending)
	rng := rand.New(rand.NewPCG(11, 12))
	offs := make([]time.Duration, 1<<16)
	for i := range offs {
		span := time.Minute
		if rng.IntN(10) >= 7 {
			span = time.Hour
		}
		offs[i] = 1 + time.Duration(rng.Int64N(int64(span)))
	}
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
				impl.cancel(ring[r].key)
				k := r
				if (i/pending)&1 == 0 {
					k += pending
				}
				ring[r] = impl.insert(keys[k], base+int64(offs[i&(1<<16-1)]))
				i++
			}
			b.StopTimer()

			// The same by handle, where the structure has handles.
			var handleNs float64
			if hi, ok := impl.(handleImpl); ok {
				const handleN = 1_000_000
				t0 := time.Now()
				for range handleN {
					if i&1023 == 0 {
						base = time.Now().UnixNano()
					}
					r := i % pending
					hi.cancelHandle(ring[r])
					k := r
					if (i/pending)&1 == 0 {
						k += pending
					}
					ring[r] = hi.insertHandle(keys[k], base+int64(offs[i&(1<<16-1)]))
					i++
				}
				handleNs = float64(time.Since(t0).Nanoseconds()) / handleN
			}

			// Same key: insert a timer and cancel it at once.
			const sameN = 1_000_000
			sameKeys := benchKeys("same", 1<<12)
			t0 := time.Now()
			for j := range sameN {
				if j&1023 == 0 {
					base = time.Now().UnixNano()
				}
				k := sameKeys[j&(1<<12-1)]
				impl.insert(k, base+int64(offs[j&(1<<16-1)]))
				impl.cancel(k)
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
			if handleNs > 0 {
				b.ReportMetric(handleNs, "by-handle-ns")
			}
			b.ReportMetric(float64(ms.NumGC-gc0), "gcs")
			rec.report(b)
		})
	}
}

// fireFunc is the work done per fired timer: record lateness, hand the id
// to the channel.
type fireFunc func(id string, due int64, now int64)

// timerHandle is what an implementation returns from insert: the key for
// wheel, *heapItem for heap, *time.Timer for runtime.
type timerHandle struct {
	key string
	p   any
}

type timerImpl interface {
	insert(id string, due int64) timerHandle
	cancel(id string)
	stop(pending []timerHandle) // stop firing and drop everything
}

// handleImpl is implemented by the baselines, which can also work without
// their id map.
type handleImpl interface {
	insertHandle(id string, due int64) timerHandle
	cancelHandle(h timerHandle)
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

// wheel: this package's Timers on the real clock.

type wheelImpl struct {
	tm   *Timers
	quit context.CancelFunc
	done chan struct{}
}

func newWheelImpl(fire fireFunc) timerImpl {
	w := &wheelImpl{tm: NewTimers(RealClock(), TimersOptions{}), done: make(chan struct{})}
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

func (w *wheelImpl) insert(id string, due int64) timerHandle {
	w.tm.Arm(id, time.Unix(0, due))
	return timerHandle{key: id}
}

func (w *wheelImpl) cancel(id string) { w.tm.Cancel(id) }

func (w *wheelImpl) stop([]timerHandle) {
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
	byID map[string]*heapItem
	wake chan struct{}
	quit context.CancelFunc
	done chan struct{}
}

func newHeapImpl(fire fireFunc) timerImpl {
	t := &heapImpl{byID: map[string]*heapItem{}, wake: make(chan struct{}, 1), done: make(chan struct{})}
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
				if t.byID[it.id] == it {
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
	if old := t.byID[id]; old != nil && old.index >= 0 {
		heap.Remove(&t.h, old.index)
	}
	t.byID[id] = it
	t.push(it)
	t.mu.Unlock()
	return timerHandle{key: id, p: it}
}

func (t *heapImpl) cancel(id string) {
	t.mu.Lock()
	if it := t.byID[id]; it != nil {
		delete(t.byID, id)
		if it.index >= 0 {
			heap.Remove(&t.h, it.index)
		}
	}
	t.mu.Unlock()
}

func (t *heapImpl) insertHandle(id string, due int64) timerHandle {
	it := &heapItem{id: id, due: due}
	t.mu.Lock()
	t.push(it)
	t.mu.Unlock()
	return timerHandle{key: id, p: it}
}

func (t *heapImpl) cancelHandle(h timerHandle) {
	it := h.p.(*heapItem)
	t.mu.Lock()
	if it.index >= 0 {
		heap.Remove(&t.h, it.index)
	}
	t.mu.Unlock()
}

// push adds it and wakes the runner if it is the new earliest; t.mu is held.
func (t *heapImpl) push(it *heapItem) {
	heap.Push(&t.h, it)
	if it.index == 0 {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
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
	byID    map[string]*time.Timer
}

func newRuntimeImpl(fire fireFunc) timerImpl {
	return &runtimeImpl{fire: fire, byID: map[string]*time.Timer{}}
}

func (r *runtimeImpl) start(id string, due int64) *time.Timer {
	return time.AfterFunc(time.Until(time.Unix(0, due)), func() {
		r.mu.RLock()
		if !r.stopped {
			r.fire(id, due, time.Now().UnixNano())
		}
		r.mu.RUnlock()
	})
}

// insert starts a timer and records it under id. A fired timer's id stays
// in the map until it is cancelled or re-armed (deleting it from the
// callback would cost every fire a lock); Stop on it is a no-op.
func (r *runtimeImpl) insert(id string, due int64) timerHandle {
	t := r.start(id, due)
	r.idMu.Lock()
	if old := r.byID[id]; old != nil {
		old.Stop()
	}
	r.byID[id] = t
	r.idMu.Unlock()
	return timerHandle{key: id, p: t}
}

func (r *runtimeImpl) cancel(id string) {
	r.idMu.Lock()
	t := r.byID[id]
	delete(r.byID, id)
	r.idMu.Unlock()
	if t != nil {
		t.Stop()
	}
}

func (r *runtimeImpl) insertHandle(id string, due int64) timerHandle {
	return timerHandle{key: id, p: r.start(id, due)}
}

func (r *runtimeImpl) cancelHandle(h timerHandle) { h.p.(*time.Timer).Stop() }

func (r *runtimeImpl) stop(pending []timerHandle) {
	r.mu.Lock()
	r.stopped = true // no callback fires after this
	r.mu.Unlock()
	for _, h := range pending {
		h.p.(*time.Timer).Stop()
	}
}
