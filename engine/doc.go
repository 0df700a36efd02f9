// Package engine is the in-memory scheduling core of ax: the timer set that
// the Raft leader fires runs from, the ready queues that order due runs by
// priority, and the retry backoff. It is pure Go with no I/O — no files, no
// network, no logging — and takes every reading of time from an injected
// [Clock], so all of its tests run on a [FakeClock].
//
// # Clock
//
// [Clock] has two methods, Now and NewTimer. The engine keeps two kinds of
// time apart, like river's TimeGenerator: due times come from storage as
// wall-clock UTC instants and are compared with Now() as wall time (a
// monotonic reading on either side is ignored); waiting is done with
// timers, which run on the monotonic clock. Convert to UTC milliseconds
// only at the raftfsm boundary.
//
// [RealClock] wraps the time package. [FakeClock] moves only when told:
// Advance moves wall and monotonic time together and fires due timers
// (non-blocking sends on one-slot channels, like [time.Timer]); Set steps
// the wall time alone, as NTP or an operator would, and fires nothing,
// as real timers ignore such a step. BlockUntil(n) waits until n timers
// are armed, so a test can wait for the goroutine under test to go to
// sleep instead of sleeping itself:
//
//	clock := engine.NewFakeClock(start)
//	timers := engine.NewTimers(clock, engine.TimersOptions{})
//	go timers.Run(ctx, fire)
//	timers.Arm("order-123", start.Add(30*time.Minute))
//	clock.BlockUntil(1)             // Run sleeps on its timer
//	clock.Advance(30 * time.Minute) // fire is called with order-123
//
// # Timers
//
// [Timers] is a set of one-shot timers keyed by task id, with Arm (add or
// move), Cancel, and Run, which calls a fire function with batches of due
// timers. It is a hybrid of three structures under one mutex:
//
//   - a single-level timing wheel of Slots slots of width Tick, holding the
//     deadlines between the cursor (the tick of the latest Now seen by Run)
//     and Tick × Slots later: Arm and Cancel are O(1) there. Each slot holds
//     one tick only, so no "rounds" are needed. A two-level bitmap finds
//     the next non-empty slot in a few word reads, and each slot caches its
//     earliest deadline;
//   - a min-heap for deadlines beyond the window, whose entries migrate
//     into the wheel as the cursor comes within a window of them (Cancel
//     leaves a tombstone, so it stays O(1); tombstones are compacted when
//     they outnumber live entries);
//   - a small exact-order heap for the current tick: when the cursor passes
//     a slot, its entries move there, and Run fires from it in due order.
//
// Run is tickless. It sleeps on one clock timer until the exact earliest
// deadline — the near heap's top, or the cached minimum of the first
// non-empty slot, or the far heap's top — not until a tick boundary, so
// the tick does not limit precision. Arm wakes it when a new deadline is
// earlier than the one it sleeps for. With nothing armed it holds no timer
// at all. While timers are armed it wakes at least every [MaxSleep] (1 s):
// timers wait on the monotonic clock but deadlines are wall-clock
// instants, and this bounds how late a forward wall-clock step (or a
// suspended VM) is noticed.
//
// Every wake-up re-evaluates against Now(): a timer fires only when
// Now() >= due by the wall clock, so a step backwards delays timers (never
// an early fire), and a step forwards fires what became due, once, in one
// batch. A large step backwards re-centres the wheel on the new time.
// [Timers.Stats] counts the steps (a difference of more than
// [ClockJumpThreshold] between elapsed wall and monotonic time) for the
// leader to log and export as a metric; the leader should then reload
// from storage, as DESIGN §7 says.
//
// # Choosing Tick and Slots
//
// Since Run sleeps until exact deadlines, the tick only decides how many
// slots a window needs and how many entries move into the near heap at a
// time. Two things matter:
//
//  1. The window, Tick × Slots, should cover the leader's load window
//     (10 minutes, plus the lead time of its refill), so that every timer
//     the leader loads is armed in O(1) and never migrates through the heap.
//  2. Memory: 16 bytes per slot (list head and cached minimum) plus a bit.
//     A 1 ms tick would need 2^20 slots (16 MiB) to span 13 minutes.
//
// BenchmarkTimersConfig measures the whole life of a workload (arm every
// timer, then walk fake time in 1 ms steps through migrate, drain and
// fire) for several pairs. Figures are µs per timer, medians of 6 runs on a
// 2-vCPU AMD EPYC VM shared with other builds, so ±15 % is noise:
//
//	Tick × Slots       window  slot tables  1M in 10 min  200k in 2 s
//	100 ms ×    512     51 s       8 KiB       2.63          1.10   (seed 003)
//	  1 ms ×  4 096      4 s      64 KiB       2.90          1.05
//	  1 ms × 65 536     65 s       1 MiB       2.83          1.12
//	 10 ms ×  4 096     41 s      64 KiB       2.46          1.29
//	 10 ms × 65 536   10.9 min     1 MiB       1.53          1.20
//	 50 ms × 16 384   13.7 min   256 KiB       1.65          1.29   (default)
//	100 ms ×  8 192   13.7 min   128 KiB       1.83          1.46
//	  1 s  ×  1 024   17.1 min    16 KiB       1.79          1.27
//
// The window decides: every pair whose window covers the 10 minutes costs
// about 1.5–1.8 µs per timer, every pair that sends most timers through
// the heap 2.5–2.9 µs. Bursts cost about the same everywhere (slightly
// less with fine ticks, whose drained slots are smaller). Among the
// covering pairs, 10 ms × 65 536 and 50 ms × 16 384 are within noise
// (1M timers over 12 minutes, as when the next window is loaded two
// minutes early: 1.78 vs 1.61 µs; 10 ms × 131 072, 2 MiB: 1.50 µs). The
// default is 50 ms × 16 384 ([TimersTickDefault], [TimersSlotsDefault]):
// a 13.7-minute window that still covers a 10-minute window loaded early,
// in a quarter of the memory of 10 ms × 65 536. Coarser ticks lose a
// little because each drained slot pushes more entries into the near
// heap. Most of the per-timer cost is the key map and cache misses, not
// the wheel.
//
// With the defaults and 1M timers armed (BenchmarkTimersArm, …Cancel,
// …ArmCancel, …ArmParallel; same machine, medians of 5):
//
//	Arm: re-arm one of 1M, inside the window         0.61 µs
//	Arm: re-arm one of 1M, beyond the window         0.78 µs
//	Cancel one of 2M, inside / beyond the window     0.82 / 0.78 µs
//	Arm + Cancel a new key, inside / beyond          0.34 / 0.57 µs
//	Arm + Cancel from 2 goroutines at once           0.15 µs per pair
//
// These are dominated by cache misses on a map of a million keys; the
// wheel operations themselves are a few dozen nanoseconds.
//
// # Lateness
//
// Lateness — the time from a due time to the start of the fire call — on
// the real clock (BenchmarkTimersLateness, same shared VM, medians of 5
// runs):
//
//	                                            p50       p99
//	sparse: one timer at a time, idle process  0.57 ms   1.13 ms
//	sparse, 1M other timers armed              0.59 ms   1.12 ms
//	dense: 10 000 timers/s                     0.54 ms   1.09 ms
//	seed's 100 ms × 512 wheel, sparse / dense  0.57 / 0.54 ms  1.09 / 1.11 ms
//
// The seeds' wheels fired at tick boundaries and reported a p99 of 210 ms.
// Here the tick does not enter lateness; what remains is the Go runtime's
// timer resolution: on Linux an idle Go process sleeps in epoll_wait,
// whose timeout is in whole milliseconds, so a wake-up is up to about 1 ms
// late. Maxima of 2–5 ms (one of 13 ms), and p99 up to 2–4 ms in some
// runs, came from other processes on the 2 vCPUs.
//
// # Ready queues
//
// [ReadyQueue] holds runs that are due and wait to be dispatched, in five
// priority levels (0 highest … 4 lowest). Pop serves, first, the task that
// has waited longest if it has waited more than MaxWait (ageing, so
// nothing waits much beyond the budget while the queue drains); otherwise
// the head of a level chosen by smooth weighted round robin (weights
// 16:8:4:2:1 by default), FIFO within a level. It is bounded: Push fails
// with [ErrBacklogFull] at capacity, for the API to answer 429.
//
// # Backoff
//
// [Backoff] computes retry delays: Initial × Multiplier^(attempt−1), capped
// at Max, spread by ±Jitter and capped at Max again, never negative.
// [Backoff.Delay] takes the random number as an argument, so the leader
// draws it, records the resulting due time in the Raft command, and every
// node's state machine stays deterministic. [BackoffDefault] is 2 s
// doubling to 30 s, ±20 %, the seed's defaults.
//
// # Errors
//
// Errors wrap the sentinels of errors.go ([ErrInvalidOptions],
// [ErrInvalidBackoff], [ErrBacklogFull], [ErrAlreadyQueued],
// [ErrInvalidPriority]); test them with errors.Is.
package engine
