package engine

import (
	"fmt"
	"sync"
	"time"
)

// Priority levels of tasks: 0 is the highest, 4 the lowest (as in the API's
// `priority` field).
const (
	// Priorities is the number of priority levels.
	Priorities = 5
	// PriorityHighest is the most urgent level.
	PriorityHighest = 0
	// PriorityDefault is the level of a task that names none.
	PriorityDefault = 2
	// PriorityLowest is the least urgent level.
	PriorityLowest = Priorities - 1
)

// Defaults and limits of [ReadyOptions].
const (
	// ReadyMaxWaitDefault is the ageing budget when ReadyOptions.MaxWait is 0.
	ReadyMaxWaitDefault = 30 * time.Second
	// ReadyCapacityDefault is the bound on queued tasks when
	// ReadyOptions.Capacity is 0.
	ReadyCapacityDefault = 100_000
	// ReadyWeightMax is the largest accepted weight.
	ReadyWeightMax = 1000
)

// ReadyWeightsDefault are the round-robin weights when ReadyOptions.Weights
// is all zero: each level gets twice the share of the next lower one, so
// when every level is backlogged, priority 0 gets 16/31 of the pops and
// priority 4 gets 1/31.
var ReadyWeightsDefault = [Priorities]int{16, 8, 4, 2, 1}

// ReadyOptions configures [NewReadyQueue]. The zero value selects the
// defaults.
type ReadyOptions struct {
	// Weights are the weighted-round-robin weights of the priority levels,
	// index = priority. Each must be in [1, ReadyWeightMax]; all zero
	// selects the defaults. Defaults to ReadyWeightsDefault.
	Weights [Priorities]int
	// MaxWait is the ageing budget: a task queued for longer than MaxWait
	// is served before anything else, oldest first, whatever its priority.
	// Negative disables ageing. Defaults to ReadyMaxWaitDefault.
	MaxWait time.Duration
	// Capacity bounds the number of queued tasks; Push fails with
	// ErrBacklogFull beyond it. Negative means unbounded. Defaults to
	// ReadyCapacityDefault.
	Capacity int
}

// Validate reports whether the options are usable; the error names the
// field and the bound and wraps [ErrInvalidOptions].
func (o ReadyOptions) Validate() error {
	if o.Weights == ([Priorities]int{}) {
		return nil
	}
	for p, w := range o.Weights {
		if w < 1 || w > ReadyWeightMax {
			return fmt.Errorf("%w: Weights[%d] %d must be in [1, %d]", ErrInvalidOptions, p, w, ReadyWeightMax)
		}
	}
	return nil
}

// WithDefaults returns a copy of o with zero fields set to their defaults.
func (o ReadyOptions) WithDefaults() ReadyOptions {
	if o.Weights == ([Priorities]int{}) {
		o.Weights = ReadyWeightsDefault
	}
	if o.MaxWait == 0 {
		o.MaxWait = ReadyMaxWaitDefault
	}
	if o.Capacity == 0 {
		o.Capacity = ReadyCapacityDefault
	}
	return o
}

// ReadyItem is a task taken from a [ReadyQueue].
type ReadyItem struct {
	// Key identifies the task (its id).
	Key string
	// Priority is its level, 0 (highest) to 4 (lowest).
	Priority int
	// Queued is when it was first pushed (by the queue's Clock); Requeue
	// keeps it, so ageing counts the whole wait.
	Queued time.Time
	// Aged reports that it was served by the ageing rule, ahead of its
	// turn in the round robin.
	Aged bool
}

// ReadyQueue holds tasks that are due and wait to be dispatched, in five
// priority levels. Pop serves:
//
//  1. the task that has waited longest, if it has waited more than MaxWait
//     (ageing: nothing waits much longer than the budget while the queue
//     drains faster than it fills);
//  2. otherwise the head of a level chosen by smooth weighted round robin
//     over the non-empty levels (the nginx algorithm: every pop adds each
//     level's weight to its credit, serves the level with the most credit
//     and takes the sum of the weights from it), so that with weights
//     16:8:4:2:1 a backlogged level 4 still gets one pop in 31 and levels
//     interleave evenly rather than in runs;
//
// and within a level, first in, first out. When the backlog makes every
// head older than MaxWait, rule 1 serves them in wait order: the queue
// degrades to FIFO, which bounds every wait, until it catches up.
//
// Waits are measured with the queue's Clock (on the monotonic clock with
// [RealClock]). Push, Pop, Requeue (see there) and Remove are O(1), Find
// O(n); all methods are safe for concurrent use.
type ReadyQueue struct {
	clock   Clock
	weights [Priorities]int
	maxWait time.Duration
	cap     int

	mu     sync.Mutex
	levels [Priorities]readyList
	credit [Priorities]int
	m      map[string]*readyNode
}

type readyNode struct {
	item       ReadyItem
	prev, next *readyNode
}

// readyList is a doubly linked FIFO.
type readyList struct {
	head, tail *readyNode
	n          int
}

func (l *readyList) pushBack(n *readyNode) {
	n.prev, n.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = n
	} else {
		l.head = n
	}
	l.tail = n
	l.n++
}

// insertBefore links n before at, or at the back if at is nil.
func (l *readyList) insertBefore(n, at *readyNode) {
	if at == nil {
		l.pushBack(n)
		return
	}
	n.prev, n.next = at.prev, at
	if at.prev != nil {
		at.prev.next = n
	} else {
		l.head = n
	}
	at.prev = n
	l.n++
}

func (l *readyList) remove(n *readyNode) {
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		l.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		l.tail = n.prev
	}
	n.prev, n.next = nil, nil
	l.n--
}

// NewReadyQueue returns an empty queue on clock. It panics if opts is
// invalid (see [ReadyOptions.Validate]).
func NewReadyQueue(clock Clock, opts ReadyOptions) *ReadyQueue {
	if err := opts.Validate(); err != nil {
		panic("engine: NewReadyQueue: " + err.Error())
	}
	opts = opts.WithDefaults()
	return &ReadyQueue{
		clock:   clock,
		weights: opts.Weights,
		maxWait: opts.MaxWait,
		cap:     opts.Capacity,
		m:       make(map[string]*readyNode),
	}
}

// Push queues key at the back of its priority level, stamped with the
// clock's Now. It fails with an error wrapping [ErrInvalidPriority] if
// priority is outside 0..4, [ErrAlreadyQueued] if key is queued, or
// [ErrBacklogFull] (with the depth in the message) if the queue is at
// capacity.
func (q *ReadyQueue) Push(key string, priority int) error {
	if priority < 0 || priority >= Priorities {
		return fmt.Errorf("push %s: %w: %d", key, ErrInvalidPriority, priority)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.clock.Now() // under the lock, so that each level is in Queued order
	if _, ok := q.m[key]; ok {
		return fmt.Errorf("push %s: %w", key, ErrAlreadyQueued)
	}
	if q.cap >= 0 && len(q.m) >= q.cap {
		return fmt.Errorf("push %s: %w: depth %d", key, ErrBacklogFull, len(q.m))
	}
	n := &readyNode{item: ReadyItem{Key: key, Priority: priority, Queued: now}}
	q.m[key] = n
	q.levels[priority].pushBack(n)
	return nil
}

// Requeue puts an item taken by Pop back in its level, in the place its
// Queued time gives it (the front, for the item just popped), for a
// dispatcher that popped a task it could not place (no executor capacity).
// It is O(1) when the item is older than everything in its level, which is
// the case for an item just popped. It ignores the capacity bound, since the item
// was counted before it was popped, and fails only with [ErrAlreadyQueued]
// or [ErrInvalidPriority].
func (q *ReadyQueue) Requeue(it ReadyItem) error {
	if it.Priority < 0 || it.Priority >= Priorities {
		return fmt.Errorf("requeue %s: %w: %d", it.Key, ErrInvalidPriority, it.Priority)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.m[it.Key]; ok {
		return fmt.Errorf("requeue %s: %w", it.Key, ErrAlreadyQueued)
	}
	it.Aged = false
	n := &readyNode{item: it}
	q.m[it.Key] = n
	// Keep the level ordered by Queued: the item goes before the first one
	// queued after it, which for the item just popped is the front.
	l := &q.levels[it.Priority]
	at := l.head
	for at != nil && !at.item.Queued.After(it.Queued) {
		at = at.next
	}
	l.insertBefore(n, at)
	return nil
}

// Pop removes and returns the next task to dispatch (see [ReadyQueue] for
// the order), or false if the queue is empty.
func (q *ReadyQueue) Pop() (ReadyItem, bool) {
	it, _, ok := q.PopIf(nil)
	return it, ok
}

// PopIf is Pop for a dispatcher that may not be able to place the next
// task: it calls accept (nil accepts all) with the task Pop would return,
// and removes it only if accept returns true. Otherwise the queue is left
// exactly as it was, round-robin credit included, so the same task comes
// next and a refused look costs its level nothing (Requeue after Pop
// would spend the level's turn). It returns the task, whether it was
// taken, and false as the last value if the queue is empty. accept runs
// with the queue locked: it must not call the queue.
func (q *ReadyQueue) PopIf(accept func(ReadyItem) bool) (it ReadyItem, taken, ok bool) {
	now := q.clock.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	heads, credit := q.cursors()
	p, aged := q.serve(&heads, &credit, now)
	if p < 0 {
		return ReadyItem{}, false, false
	}
	it = heads[p].item
	it.Aged = aged
	if accept != nil && !accept(it) {
		return it, false, true
	}
	q.credit = credit
	q.take(p)
	return it, true, true
}

// Find returns the first queued task that match accepts, in the order in
// which successive Pops at this instant would serve the queued tasks
// (ageing, round robin and FIFO, as in [ReadyQueue]; Aged set as Pop
// would set it), or false if match accepts none. It removes nothing and
// leaves the round-robin credit as it is: a caller that then takes the
// task with Remove takes it out of turn, and its level's turn is not
// spent. It is O(n) in the tasks looked at before the match, for a
// caller that needs a task of a kind once in a while, not on every pop.
// match runs with the queue locked: it must not call the queue.
func (q *ReadyQueue) Find(match func(ReadyItem) bool) (ReadyItem, bool) {
	now := q.clock.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	// Pops simulated on cursors: heads[p] is level p's first task not
	// looked at yet, credit what the round robin would hold by then.
	heads, credit := q.cursors()
	for {
		p, aged := q.serve(&heads, &credit, now)
		if p < 0 {
			return ReadyItem{}, false
		}
		it := heads[p].item
		it.Aged = aged
		if match(it) {
			return it, true
		}
		heads[p] = heads[p].next
	}
}

// cursors returns each level's head and a copy of the round-robin
// credit: the state serve reads and advances for one pop, or for a walk
// of several (Find). q.mu is held.
func (q *ReadyQueue) cursors() (heads [Priorities]*readyNode, credit [Priorities]int) {
	for p := range q.levels {
		heads[p] = q.levels[p].head
	}
	return heads, q.credit
}

// serve picks the level whose head a pop at now serves, given the levels'
// heads (nil: empty) and the round-robin credit, which it updates as that
// pop would (ageing leaves it as it is); it returns -1 if every level is
// empty. q.mu is held.
func (q *ReadyQueue) serve(heads *[Priorities]*readyNode, credit *[Priorities]int, now time.Time) (int, bool) {
	// Ageing: the oldest head, if it is over budget. Each level is FIFO by
	// push time (Requeue puts back an item older than the rest), so its
	// head is its oldest task.
	oldest := -1
	for p, h := range heads {
		if h != nil && (oldest < 0 || h.item.Queued.Before(heads[oldest].item.Queued)) {
			oldest = p
		}
	}
	if oldest < 0 {
		return -1, false
	}
	if q.maxWait >= 0 && now.Sub(heads[oldest].item.Queued) > q.maxWait {
		return oldest, true
	}
	// Smooth weighted round robin over the non-empty levels.
	best, total := -1, 0
	for p, h := range heads {
		if h == nil {
			credit[p] = 0
			continue
		}
		credit[p] += q.weights[p]
		total += q.weights[p]
		if best < 0 || credit[p] > credit[best] {
			best = p
		}
	}
	credit[best] -= total
	return best, false
}

// take removes the head of level p; q.mu is held and the level is not empty.
func (q *ReadyQueue) take(p int) ReadyItem {
	n := q.levels[p].head
	q.levels[p].remove(n)
	delete(q.m, n.item.Key)
	return n.item
}

// Remove drops key from the queue (a cancelled task) and reports whether it
// was queued.
func (q *ReadyQueue) Remove(key string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	n, ok := q.m[key]
	if !ok {
		return false
	}
	q.levels[n.item.Priority].remove(n)
	delete(q.m, key)
	return true
}

// Len returns the number of queued tasks.
func (q *ReadyQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.m)
}

// Depths returns the number of queued tasks per priority level, for the
// ready-queue depth metric.
func (q *ReadyQueue) Depths() [Priorities]int {
	q.mu.Lock()
	defer q.mu.Unlock()
	var d [Priorities]int
	for p := range q.levels {
		d[p] = q.levels[p].n
	}
	return d
}

// OldestWait returns how long the longest-waiting task has been queued, or
// 0 if the queue is empty.
func (q *ReadyQueue) OldestWait() time.Duration {
	now := q.clock.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	var oldest time.Duration
	for p := range q.levels {
		if h := q.levels[p].head; h != nil {
			oldest = max(oldest, now.Sub(h.item.Queued))
		}
	}
	return oldest
}
