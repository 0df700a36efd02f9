package engine

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// Defaults of [LimiterOptions]. The package documentation (section
// "Adaptive concurrency") explains the algorithm and how they were chosen.
const (
	// LimiterMinDefault is the lowest limit when LimiterOptions.Min is 0.
	LimiterMinDefault = 4
	// LimiterMaxDefault is the highest limit when LimiterOptions.Max is 0.
	LimiterMaxDefault = 200
	// LimiterIntervalDefault is the decision interval when
	// LimiterOptions.Interval is 0.
	LimiterIntervalDefault = 100 * time.Millisecond
	// LimiterMaxWindowIntervals is how many intervals a sample window may
	// be extended to collect MinSamples when LimiterOptions.MaxWindow is 0.
	LimiterMaxWindowIntervals = 20
	// LimiterMinSamplesDefault is the fewest latency samples a window needs
	// for a latency decision when LimiterOptions.MinSamples is 0.
	LimiterMinSamplesDefault = 10
	// LimiterDrainTimeDefault is the time allowed to drain the backlog when
	// LimiterOptions.DrainTime is 0.
	LimiterDrainTimeDefault = time.Second
	// LimiterHeadroomDefault is the fraction added to the Little's-law
	// target when LimiterOptions.Headroom is 0.
	LimiterHeadroomDefault = 0.1
	// LimiterToleranceDefault is the latency ratio (window mean ÷ baseline)
	// above which the limit is cut, when LimiterOptions.Tolerance is 0.
	LimiterToleranceDefault = 2.0
	// LimiterGrowToleranceDefault is the latency ratio up to which the
	// limit may grow, when LimiterOptions.GrowTolerance is 0.
	LimiterGrowToleranceDefault = 1.25
	// LimiterBackoffDefault is the multiplicative decrease on a busy answer
	// or a time-out, when LimiterOptions.Backoff is 0.
	LimiterBackoffDefault = 0.8
	// LimiterSlowStartDefault is the slow-start growth per round trip when
	// LimiterOptions.SlowStart is 0.
	LimiterSlowStartDefault = 8.0
	// LimiterStepUpDefault is the fraction by which one window may raise
	// the limit outside slow start, when LimiterOptions.StepUp is 0.
	LimiterStepUpDefault = 0.2
	// LimiterBaselineFallDefault is the weight of a lower window mean in
	// the baseline when LimiterOptions.BaselineFall is 0.
	LimiterBaselineFallDefault = 0.25
	// LimiterBaselineRiseDefault is the weight of a higher window mean in
	// the baseline, in light windows only, when LimiterOptions.BaselineRise
	// is 0.
	LimiterBaselineRiseDefault = 0.1
	// LimiterMaxLimit is the largest accepted Max.
	LimiterMaxLimit = 1 << 20
)

// Constants of the algorithm that are not options.
const (
	// limiterSmoothing is the weight, per interval, of a new window in the
	// smoothed arrival rate and service time: an exponential moving
	// average with a time constant of about 20 intervals (2 s by
	// default), so that the target of a Poisson load of 50 calls per
	// window moves by about 2 % (a burst does not need the rate to react:
	// the backlog term of the target does, at once).
	limiterSmoothing = 0.05
	// limiterMaxCut is the deepest single cut: the latency gradient is
	// clamped to at least this (Gradient2 clamps to 0.5 for the same
	// reason: one bad window must not collapse the limit).
	limiterMaxCut = 0.5
	// limiterShrinkStep is the fraction of the limit one interval may take
	// away when the limit is above its target and nothing is congested.
	limiterShrinkStep = 0.1
	// limiterRestartWindows is how many consecutive healthy windows (a
	// backlog, below the target, not app-limited, latency within half of
	// GrowTolerance's margin) re-open slow start after a decrease.
	limiterRestartWindows = 3
)

// LimiterOptions configures [NewLimiter]. The zero value selects the
// defaults; every field is optional.
type LimiterOptions struct {
	// Min is the lowest limit, in concurrent calls; the limit never goes
	// below it. Must be >= 1. Defaults to LimiterMinDefault (4).
	Min int
	// Max is the highest limit, in concurrent calls; the limit never goes
	// above it. Must be >= Min and <= LimiterMaxLimit. Defaults to
	// LimiterMaxDefault (200), or to Min if Min is larger.
	Max int
	// Initial is the limit the limiter starts at, in concurrent calls,
	// clamped to [Min, Max]. Defaults to Min.
	Initial int
	// Interval is the decision interval, a duration: at most one
	// window-based decision is taken per Interval, from the calls that
	// completed during it. Busy answers and time-outs cut at once and
	// slow start grows with every completion, so Interval does not bound
	// how fast the limiter reacts to those; it paces the latency and
	// target decisions, which must each see the effect of the previous
	// one (about one round trip of typical 10–80 ms callbacks) and
	// MinSamples answers (10 take 200 ms at 4 × 80 ms calls, 4 ms at
	// 200). brpc decides every 1 s, too slow for a burst; the in-house
	// scheduler ax grew out of recomputed every 2 s. Must be >= 1 ms. Defaults to
	// LimiterIntervalDefault (100 ms).
	Interval time.Duration
	// MaxWindow bounds how long a window that has fewer than MinSamples
	// latency samples is extended (a duration); after it the window is
	// discarded without a latency decision, unless a backlog waits and
	// the window has samples or calls in flight: then it waits for
	// MinSamples answers, so that slow calls at a low limit still lead to
	// decisions. Must be >= Interval.
	// Defaults to LimiterMaxWindowIntervals × Interval (2 s).
	MaxWindow time.Duration
	// MinSamples is the fewest latency samples (successes and failures
	// of calls admitted since the limit last moved by a window decision
	// or a decrease) a window needs before its mean latency is compared
	// with the baseline or moves it, and the fewest answers for a
	// loss-proportional cut; a count. Must be >= 1. Defaults to
	// LimiterMinSamplesDefault (10).
	MinSamples int
	// DrainTime is the time the target allows for working off the
	// backlog, a duration: target = (arrival rate + backlog ÷ DrainTime) ×
	// mean service time × (1 + Headroom). Defaults to
	// LimiterDrainTimeDefault (1 s).
	DrainTime time.Duration
	// Headroom is the fraction added to the Little's-law target, so the
	// limit is not exactly the mean concurrency and random bursts do not
	// queue; a ratio >= 0 (0 selects the default; use a tiny value such
	// as 1e-9 for none). Defaults to LimiterHeadroomDefault (0.1).
	Headroom float64
	// Tolerance is the latency ratio (a window's mean latency ÷ the
	// baseline) above which the limit is cut multiplicatively, by the
	// latency gradient GrowTolerance ÷ ratio clamped to [0.5, Backoff].
	// Must be > GrowTolerance. Defaults to LimiterToleranceDefault (2).
	Tolerance float64
	// GrowTolerance is the latency ratio up to which a window counts as
	// healthy and the limit may grow. Between GrowTolerance and Tolerance
	// the limit is eased down by the same gradient, but by no more than
	// Backoff. Must be >= 1. Defaults to LimiterGrowToleranceDefault
	// (1.25).
	GrowTolerance float64
	// Backoff is the multiplicative decrease when the executor answers
	// busy (429/503) or a call times out, a ratio in (0, 1); it is also
	// the mildest latency cut. Defaults to LimiterBackoffDefault (0.8).
	Backoff float64
	// SlowStart is the growth factor per round trip while in slow start:
	// each successful call with a healthy latency, a backlog waiting and
	// the limiter not app-limited raises the limit by SlowStart − 1, so
	// the limit multiplies by SlowStart every round trip, but never
	// beyond the demand (in flight + backlog). TCP uses 2; 8 climbs from
	// 4 to 200 in two round trips instead of six (160 ms instead of
	// 480 ms with 80 ms calls; 3 needs four, 4 three): each round trip
	// below the target idles (target − limit) slots, up to 0.08 s of
	// makespan per round trip on the burst benchmark. The demand bound keeps
	// a steady load from being overshot (it rises as with 3); what ×8
	// risks is a larger overshoot of an executor whose capacity is below
	// the backlog's need, up to 8× the last healthy limit (bounded by
	// Max), which the latency cut undoes at ×0.5 per window. A ratio in
	// (1, 16]. Defaults to LimiterSlowStartDefault (8).
	SlowStart float64
	// StepUp is the fraction by which one healthy window may raise the
	// limit toward its target, at a latency equal to the baseline; the
	// step shrinks linearly to nothing as the latency nears GrowTolerance
	// × baseline, so the limit comes to rest at the edge instead of
	// flapping across it. A ratio in (0, 1]. Defaults to
	// LimiterStepUpDefault (0.2).
	StepUp float64
	// BaselineFall is the weight of a window's mean success latency
	// (without its fastest sample) lower than the baseline, in an
	// exponential moving average like brpc's min_latency; a ratio in
	// (0, 1]. Defaults to LimiterBaselineFallDefault (0.25).
	BaselineFall float64
	// BaselineRise is the weight of a window's mean success latency higher
	// than the baseline, applied only in light windows (peak in flight
	// below half the limit, or the limit at Min), so sustained load cannot
	// drag the baseline up; a ratio in (0, 1]. Defaults to
	// LimiterBaselineRiseDefault (0.1).
	BaselineRise float64
	// OnChange, if set, is called once for every change of the limit with
	// the old and new limit and a human-readable reason, for a debug log
	// line. Slow-start growth is reported at most once per Interval (or
	// before the next other change), as one change covering all its
	// steps. It is called by whichever goroutine's call made the change,
	// after the limiter's lock is released (so it may call the Limiter),
	// possibly from several goroutines at once; it must be fast.
	OnChange func(old, new int, reason string)
}

// Validate reports whether the options are usable; the error names the
// field and the bound, and wraps [ErrInvalidOptions].
func (o LimiterOptions) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, args...)...)
	}
	if o.Min < 0 {
		return bad("Min %d must be >= 1 (0 = default)", o.Min)
	}
	if o.Max < 0 || o.Max > LimiterMaxLimit {
		return bad("Max %d must be in [1, %d] (0 = default)", o.Max, LimiterMaxLimit)
	}
	if o.Min > 0 && o.Max > 0 && o.Max < o.Min {
		return bad("Max %d must be >= Min %d", o.Max, o.Min)
	}
	if o.Min == 0 && o.Max > 0 && o.Max < LimiterMinDefault {
		return bad("Max %d must be >= Min %d (the default)", o.Max, LimiterMinDefault)
	}
	if o.Min > LimiterMaxLimit {
		return bad("Min %d must be <= %d", o.Min, LimiterMaxLimit)
	}
	if o.Initial < 0 {
		return bad("Initial %d must be >= 0", o.Initial)
	}
	if o.Interval < 0 || (o.Interval > 0 && o.Interval < time.Millisecond) {
		return bad("Interval %v must be 0 (default) or >= 1ms", o.Interval)
	}
	if o.MaxWindow < 0 {
		return bad("MaxWindow %v must be >= 0", o.MaxWindow)
	}
	if o.MaxWindow > 0 {
		iv := o.Interval
		if iv == 0 {
			iv = LimiterIntervalDefault
		}
		if o.MaxWindow < iv {
			return bad("MaxWindow %v must be >= Interval %v", o.MaxWindow, iv)
		}
	}
	if o.MinSamples < 0 {
		return bad("MinSamples %d must be >= 1 (0 = default)", o.MinSamples)
	}
	if o.DrainTime < 0 {
		return bad("DrainTime %v must be > 0 (0 = default)", o.DrainTime)
	}
	if o.Headroom < 0 || o.Headroom > 10 || math.IsNaN(o.Headroom) {
		return bad("Headroom %v must be in [0, 10]", o.Headroom)
	}
	if o.GrowTolerance != 0 && !(o.GrowTolerance >= 1 && o.GrowTolerance <= 100) {
		return bad("GrowTolerance %v must be in [1, 100]", o.GrowTolerance)
	}
	if o.Tolerance != 0 && !(o.Tolerance > 1 && o.Tolerance <= 100) {
		return bad("Tolerance %v must be in (1, 100]", o.Tolerance)
	}
	gt, tol := o.GrowTolerance, o.Tolerance
	if gt == 0 {
		gt = LimiterGrowToleranceDefault
	}
	if tol == 0 {
		tol = LimiterToleranceDefault
	}
	if tol <= gt {
		return bad("Tolerance %v must be > GrowTolerance %v", tol, gt)
	}
	if o.Backoff != 0 && !(o.Backoff > 0 && o.Backoff < 1) {
		return bad("Backoff %v must be in (0, 1)", o.Backoff)
	}
	if o.SlowStart != 0 && !(o.SlowStart > 1 && o.SlowStart <= 16) {
		return bad("SlowStart %v must be in (1, 16]", o.SlowStart)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"StepUp", o.StepUp}, {"BaselineFall", o.BaselineFall}, {"BaselineRise", o.BaselineRise}} {
		if f.v != 0 && !(f.v > 0 && f.v <= 1) {
			return bad("%s %v must be in (0, 1]", f.name, f.v)
		}
	}
	return nil
}

// WithDefaults returns a copy of o with zero fields set to their defaults
// and Initial clamped to [Min, Max].
func (o LimiterOptions) WithDefaults() LimiterOptions {
	if o.Min == 0 {
		o.Min = LimiterMinDefault
	}
	if o.Max == 0 {
		o.Max = max(LimiterMaxDefault, o.Min)
	}
	if o.Initial == 0 {
		o.Initial = o.Min
	}
	o.Initial = min(max(o.Initial, o.Min), o.Max)
	if o.Interval == 0 {
		o.Interval = LimiterIntervalDefault
	}
	if o.MaxWindow == 0 {
		o.MaxWindow = LimiterMaxWindowIntervals * o.Interval
	}
	if o.MinSamples == 0 {
		o.MinSamples = LimiterMinSamplesDefault
	}
	if o.DrainTime == 0 {
		o.DrainTime = LimiterDrainTimeDefault
	}
	if o.Headroom == 0 {
		o.Headroom = LimiterHeadroomDefault
	}
	if o.Tolerance == 0 {
		o.Tolerance = LimiterToleranceDefault
	}
	if o.GrowTolerance == 0 {
		o.GrowTolerance = LimiterGrowToleranceDefault
	}
	if o.Backoff == 0 {
		o.Backoff = LimiterBackoffDefault
	}
	if o.SlowStart == 0 {
		o.SlowStart = LimiterSlowStartDefault
	}
	if o.StepUp == 0 {
		o.StepUp = LimiterStepUpDefault
	}
	if o.BaselineFall == 0 {
		o.BaselineFall = LimiterBaselineFallDefault
	}
	if o.BaselineRise == 0 {
		o.BaselineRise = LimiterBaselineRiseDefault
	}
	return o
}

// LimitSignal is what became of a call a [Limiter] admitted, as the
// limiter sees it, reported with [Token.Done]. It is the limiter's input,
// not an attempt's outcome: the caller maps its own outcome to it (ax's
// delivery maps an attempt's outcome, and whether the executor was
// overloaded, to it).
type LimitSignal uint8

const (
	// LimitSuccess: the executor answered 2xx (or 202 and later a
	// result). Its latency is a sample for the window mean, the baseline
	// and slow start.
	LimitSuccess LimitSignal = iota
	// LimitFailure: the executor answered 5xx, another error or a 4xx that
	// fails the task. Its latency counts in the window mean (a slow error
	// still shows queueing) but never in the baseline, and it does not
	// grow the limit: a fast error says nothing about the no-load latency.
	LimitFailure
	// LimitBusy: the executor answered 429 or 503 (busy, snooze). It cuts
	// the limit by Backoff at once and is never a latency sample: a fast
	// rejection would drag the mean and the baseline down.
	LimitBusy
	// LimitTimeout: the sidecar aborted the call at its deadline, or the
	// connection failed before an answer. It cuts the limit by Backoff at
	// once and is not a latency sample.
	LimitTimeout
	// LimitDropped: the call was cancelled (task cancelled, node shutting
	// down) before an answer, or it never reached the executor because
	// the executor is gone (connection refused, no socket). It only frees
	// the slot: no sample, no signal.
	LimitDropped
	// LimitOverload: the executor is there but did not take the
	// connection (its accept queue was full: EAGAIN on a Unix socket, a
	// TCP connect or request not acknowledged in time), so the request
	// was never given to it. It cuts the limit by Backoff at once, like
	// LimitBusy, and is not a latency sample; unlike LimitBusy it does
	// not count in a window's loss share (rule 4b): the connects that
	// fail together are one event.
	LimitOverload
)

// String returns the outcome's name.
func (o LimitSignal) String() string {
	switch o {
	case LimitSuccess:
		return "success"
	case LimitFailure:
		return "failure"
	case LimitBusy:
		return "busy"
	case LimitTimeout:
		return "timeout"
	case LimitDropped:
		return "dropped"
	case LimitOverload:
		return "overload"
	}
	return fmt.Sprintf("LimitSignal(%d)", uint8(o))
}

// LimiterStats is a snapshot of a [Limiter], for metrics and debugging.
type LimiterStats struct {
	// Limit is the current limit, in concurrent calls.
	Limit int
	// InFlight is the number of admitted calls not yet Done.
	InFlight int
	// Queue is the backlog last reported with Observe.
	Queue int
	// Target is the last Little's-law target, in concurrent calls (0 until
	// the first decision).
	Target int
	// SlowStart reports whether slow start is open (no decrease since
	// the start, or re-opened since) and the limit is below Max.
	SlowStart bool
	// Baseline is the no-load latency estimate (0 until measured).
	Baseline time.Duration
	// LastRTT is the mean latency of the last window decided on.
	LastRTT time.Duration
	// ServiceTime is the smoothed mean latency used in the target.
	ServiceTime time.Duration
	// ArrivalRate is the smoothed arrival rate, in calls per second:
	// admissions, less what the backlog shrank by (its growth is left to
	// the backlog term of the target).
	ArrivalRate float64
	// Decisions counts decisions: windows evaluated (whether or not the
	// limit moved) and immediate cuts on busy answers and time-outs.
	Decisions uint64
	// Changes counts changes of the limit, as reported to OnChange.
	Changes uint64
	// SkippedWindows counts windows discarded for having fewer than
	// MinSamples samples after MaxWindow.
	SkippedWindows uint64
	// LastReason is the reason of the last change ("" before any).
	LastReason string
	// Successes, Failures, Busy, Timeouts, Overloads and Dropped count
	// Done calls by outcome.
	Successes, Failures, Busy, Timeouts, Overloads, Dropped uint64
	// Stale counts answers to calls admitted before the last decrease:
	// they free their slot but are neither samples nor signals, since
	// they describe the old limit.
	Stale uint64
	// Rejected counts TryAcquire calls that found the limit reached.
	Rejected uint64
}

// Limiter is an adaptive concurrency limit for one executor: it decides
// how many callbacks may be in flight to it at once. The delivery loop
// keeps its own (priority) queue of ready runs and, for each, calls
// TryAcquire; when that fails it waits on Changed. Every admitted call
// ends with exactly one [Token.Done] carrying its outcome and latency.
// Observe reports the caller's backlog. A Limiter has no goroutine and no
// timer: decisions are taken inside those calls, once an Interval has
// passed on its Clock, so it runs on a [FakeClock] deterministically.
//
// # Algorithm
//
// The limit starts at Initial (default Min) and is steered by four rules;
// the package documentation discusses them and the simulated figures.
//
//  1. Slow start (TCP's, RFC 5681, ack-clocked). While slow start is
//     open, every successful call whose latency is within GrowTolerance ×
//     baseline raises the limit by SlowStart − 1, if a backlog is waiting
//     (Observe > 0) and the call was not app-limited (at least half the
//     limit in flight when it was admitted or when it ended). The limit
//     thus multiplies by SlowStart (8) every round trip, whatever the
//     Interval. It stops at Max, at the demand (the calls in flight plus
//     the backlog: a limit is grown only while it is used, RFC 7661), and
//     one below the Little's-law target when that is lower.
//  2. Target (Little's law, L = λW, plus a backlog term). A
//     window closes after Interval once it holds MinSamples latency
//     samples (it is extended up to MaxWindow, then discarded). Its mean
//     latency and arrivals update the smoothed service time S and rate λ,
//     and target = (λ + backlog ÷ DrainTime) × S × (1 + Headroom). A
//     healthy window moves the limit toward it: up by StepUp × limit,
//     scaled down to nothing as the latency nears GrowTolerance × baseline,
//     never while app-limited (Netflix Gradient2Limit: "don't grow the
//     limit if we are app limited", in flight below half the limit); down
//     by 10 % per Interval when the limit is more than one above it and
//     no backlog waits.
//  3. Latency (Netflix Gradient2Limit's gradient, Vegas-style bands). The
//     window mean is compared with the baseline, the no-load latency.
//     Above Tolerance × baseline the limit is cut by the gradient
//     GrowTolerance ÷ ratio, clamped to [0.5, Backoff] (Gradient2 clamps
//     it to 0.5 so one bad window cannot collapse the limit); between
//     GrowTolerance and Tolerance it is eased down by the same gradient,
//     by no more than 1 − Backoff.
//  4. Busy answers and time-outs (AIMD's multiplicative decrease, Netflix
//     AIMDLimit's backoffRatio). A 429/503 or a time-out cuts the limit
//     by Backoff at once. A window in which more than 1 − Backoff of at
//     least MinSamples answers were busy or timed out cuts it in
//     proportion, to limit × (1 − that fraction).
//
// Every decrease closes slow start and starts a new generation, and every
// window decision that moves the limit starts a new epoch: answers to
// calls admitted before them describe the old limit, so they are not
// latency samples (epoch), and a stale busy answer or time-out
// (generation) cuts again only if nothing has cut for an Interval — TCP
// likewise reduces once per round trip. Slow start re-opens after
// limiterRestartWindows (3) healthy windows in a row with a backlog and
// the latency within half of GrowTolerance's margin (one suffices at
// Min), but not before the latency of the last busy answer or time-out
// has passed again, since a time-out is only learnt a whole deadline
// after the call that caused it.
//
// The baseline is brpc's min_latency (auto concurrency limiter): it
// starts as the mean of the first MinSamples successes, taken at the
// lowest concurrency the limiter runs at; then each window with
// MinSamples successes moves it, following a lower window mean with
// weight BaselineFall and a higher one with weight BaselineRise, the
// latter only in light windows (app-limited, or the limit at Min). Both
// means leave out the window's single fastest sample. So a fast outlier
// does not set it, sustained load does not drag it up, and a real change
// of the executor's speed is learnt once the limit has been cut to Min
// (brpc instead halves its limit periodically to remeasure). Busy, timed
// out and dropped answers are never samples; failures count in the
// window mean but not in the baseline.
//
// A window discarded for too few samples while app-limited lets the limit
// decay toward the target by 10 % per Interval it spanned, like TCP's
// congestion window validation after idle (RFC 7661), so a quiet executor
// does not keep a limit it has not been tested at.
//
// The limit never leaves [Min, Max]. All methods are safe for concurrent
// use.
type Limiter struct {
	clock  Clock
	mono   monoClock // the clock's monotonic reading, or nil
	origin time.Time // reference for Now-based readings when mono is nil
	o      LimiterOptions

	changed chan struct{}

	mu       sync.Mutex
	limit    int
	inflight int
	ssthresh int           // slow start is open while limit < ssthresh
	ssAcc    float64       // fractional slow-start increments
	gen      uint64        // bumped by every decrease; tokens carry it
	epoch    uint64        // bumped by every window decision that moves the limit
	queue    int           // last Observe
	dropCut  time.Duration // when a busy answer or time-out last cut
	dropSet  bool          // dropCut is valid
	// reopenAt is the earliest time slow start may re-open after a busy
	// answer or time-out: one Interval, or the latency of the drop if
	// longer, since a time-out is only learnt a whole deadline later.
	reopenAt time.Duration

	baseline   time.Duration
	rate       float64 // calls per second, smoothed; valid when rateSet
	rateSet    bool
	service    time.Duration // smoothed mean latency
	target     int
	lastRTT    time.Duration
	healthyRun int
	w          limiterWindow
	reported   int           // limit as last reported to OnChange
	reportedAt time.Duration // when
	pending    []limitChange // for OnChange, delivered after unlocking
	lastReason string
	decisions  uint64
	changes    uint64
	skipped    uint64
	successes  uint64
	failures   uint64
	busy       uint64
	timeouts   uint64
	overloads  uint64
	dropped    uint64
	stale      uint64
	rejected   uint64
}

// limiterWindow accumulates one sample window.
type limiterWindow struct {
	start      time.Duration // limiter time when it opened
	startQueue int           // backlog when it opened
	admitted   int           // TryAcquire successes
	peak       int           // peak in-flight
	n          int           // latency samples (successes and failures)
	sum        time.Duration // their total
	nSucc      int           // successful samples
	sumSucc    time.Duration // their total
	minSucc    time.Duration // the fastest of them
	grown      int           // slow-start increments
	answers    int           // Done calls other than LimitDropped, any generation
	drops      int           // of which busy answers and time-outs
}

type limitChange struct {
	old, new int
	reason   string
}

// Token is a slot admitted by [Limiter.TryAcquire]. Report its outcome
// with Done exactly once; later calls are ignored.
type Token struct {
	l        *Limiter
	gen      uint64
	epoch    uint64
	inflight int // in flight when admitted, itself included
	limit    int // the limit when admitted
	done     bool
}

// NewLimiter returns a limiter at opts.Initial (default Min) with nothing
// in flight. It panics if opts are invalid (see [LimiterOptions.Validate]).
func NewLimiter(clock Clock, opts LimiterOptions) *Limiter {
	if err := opts.Validate(); err != nil {
		panic("engine: NewLimiter: " + err.Error())
	}
	o := opts.WithDefaults()
	l := &Limiter{
		clock:    clock,
		origin:   clock.Now(),
		o:        o,
		changed:  make(chan struct{}, 1),
		limit:    o.Initial,
		ssthresh: o.Max + 1,
		reported: o.Initial,
	}
	if m, ok := clock.(monoClock); ok {
		l.mono = m
	}
	now := l.since()
	l.w = limiterWindow{start: now}
	l.reportedAt = now
	return l
}

// since returns the limiter's time: the clock's monotonic reading when it
// has one, so a wall-clock step does not distort windows.
func (l *Limiter) since() time.Duration {
	if l.mono != nil {
		return l.mono.mono()
	}
	return l.clock.Now().Sub(l.origin)
}

// Limit returns the current limit.
func (l *Limiter) Limit() int {
	now := l.since()
	l.mu.Lock()
	l.tickLocked(now)
	n := l.limit
	l.unlockAndNotify()
	return n
}

// Bounds returns the limiter's current Min and Max, in concurrent calls.
func (l *Limiter) Bounds() (minLimit, maxLimit int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.o.Min, l.o.Max
}

// SetBounds changes Min and Max at once (an executor registered again
// with new concurrency bounds): the limit is clamped into [minLimit,
// maxLimit] and slow start is re-opened, so a raised Max is reached as
// fast as a new limiter's would be. Calls in flight are not affected. It
// returns an error wrapping [ErrInvalidOptions], and changes nothing, when
// minLimit < 1, maxLimit < minLimit or maxLimit > LimiterMaxLimit.
func (l *Limiter) SetBounds(minLimit, maxLimit int) error {
	if minLimit < 1 || maxLimit < minLimit || maxLimit > LimiterMaxLimit {
		return fmt.Errorf("%w: bounds [%d, %d] must satisfy 1 <= Min <= Max <= %d", ErrInvalidOptions, minLimit, maxLimit, LimiterMaxLimit)
	}
	now := l.since()
	l.mu.Lock()
	l.tickLocked(now)
	if l.o.Min == minLimit && l.o.Max == maxLimit {
		l.unlockAndNotify()
		return nil
	}
	l.o.Min, l.o.Max = minLimit, maxLimit
	l.ssthresh, l.ssAcc = maxLimit+1, 0
	l.setLimitLocked(now, l.limit, fmt.Sprintf("bounds changed to [%d, %d]", minLimit, maxLimit))
	l.epoch++
	l.resetWindowLocked(now)
	l.signal()
	l.unlockAndNotify()
	return nil
}

// InFlight returns the number of admitted calls not yet Done.
func (l *Limiter) InFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inflight
}

// Changed returns a channel that receives (one-slot, never blocking the
// limiter) whenever a slot may have become free: a token was Done or the
// limit rose. The caller's delivery loop waits on it after TryAcquire
// fails, then tries again.
func (l *Limiter) Changed() <-chan struct{} { return l.changed }

// TryAcquire admits one call if fewer than Limit calls are in flight; it
// never blocks. The caller must end every admitted call with Token.Done.
func (l *Limiter) TryAcquire() (token *Token, ok bool) {
	now := l.since()
	l.mu.Lock()
	l.tickLocked(now)
	if l.inflight >= l.limit {
		l.rejected++
		l.unlockAndNotify()
		return nil, false
	}
	l.inflight++
	l.w.admitted++
	l.w.peak = max(l.w.peak, l.inflight)
	t := &Token{l: l, gen: l.gen, epoch: l.epoch, inflight: l.inflight, limit: l.limit}
	l.unlockAndNotify()
	return t, true
}

// Observe reports the caller's backlog for this limiter: the number of
// runs ready for its executor and not yet admitted. Call it whenever that
// number changes, or at least before each TryAcquire; the limiter uses the
// last value at each decision (for the target and the arrival rate) and
// grows in slow start only while it is > 0. Negative values count as 0.
func (l *Limiter) Observe(queueLen int) {
	now := l.since()
	l.mu.Lock()
	l.queue = max(queueLen, 0)
	l.tickLocked(now)
	l.unlockAndNotify()
}

// Stats returns a snapshot of the limiter.
func (l *Limiter) Stats() LimiterStats {
	now := l.since()
	l.mu.Lock()
	l.tickLocked(now)
	s := LimiterStats{
		Limit:          l.limit,
		InFlight:       l.inflight,
		Queue:          l.queue,
		Target:         l.target,
		SlowStart:      l.limit < l.ssthresh && l.limit < l.o.Max,
		Baseline:       l.baseline,
		LastRTT:        l.lastRTT,
		ServiceTime:    l.service,
		ArrivalRate:    l.rate,
		Decisions:      l.decisions,
		Changes:        l.changes,
		SkippedWindows: l.skipped,
		LastReason:     l.lastReason,
		Successes:      l.successes,
		Failures:       l.failures,
		Busy:           l.busy,
		Timeouts:       l.timeouts,
		Overloads:      l.overloads,
		Dropped:        l.dropped,
		Stale:          l.stale,
		Rejected:       l.rejected,
	}
	l.unlockAndNotify()
	return s
}

// Done reports the outcome of the call t admitted and its latency (from
// sending the request to the answer; for LimitTimeout the time waited).
// It frees the slot. An unknown outcome counts as LimitDropped. Calls
// after the first, and calls on a nil Token, are ignored.
func (t *Token) Done(outcome LimitSignal, latency time.Duration) {
	if t == nil || t.l == nil {
		return
	}
	l := t.l
	now := l.since()
	l.mu.Lock()
	if t.done {
		l.mu.Unlock()
		return
	}
	t.done = true
	l.inflight--
	l.tickLocked(now)
	latency = max(latency, 0)
	if outcome > LimitOverload {
		outcome = LimitDropped // unknown: only free the slot
	}
	fresh := t.gen == l.gen
	switch outcome {
	case LimitDropped:
	case LimitOverload:
		// Not an answer of the window: the calls that found the accept
		// queue full together are one congestion event, so their share
		// says how many were connecting at that moment, not how far the
		// limit is above the executor's capacity (rule 4b would cut by
		// it). The cut is rule 4's, once per generation.
		l.reopenAt = max(l.reopenAt, now+max(latency, l.o.Interval))
	default:
		l.w.answers++
		if outcome == LimitBusy || outcome == LimitTimeout {
			l.noteDropLocked(now, latency)
		}
	}
	// Only calls admitted since the last window decision that moved the
	// limit are window samples: the others describe the old limit.
	current := t.epoch == l.epoch
	if !fresh && outcome != LimitDropped {
		l.stale++
	}
	switch outcome {
	case LimitSuccess:
		l.successes++
		if current {
			l.addSampleLocked(latency, true)
			if l.baseline == 0 && l.w.nSucc >= l.o.MinSamples {
				// The first baseline comes from the first MinSamples
				// successes, taken at the lowest concurrency the limiter
				// runs at, before slow start has pushed it anywhere.
				l.baseline = l.w.noLoadMean()
			}
		}
		if fresh {
			l.slowStartLocked(t, latency)
		}
	case LimitFailure:
		l.failures++
		if current {
			l.addSampleLocked(latency, false)
		}
	case LimitBusy:
		l.busy++
		l.dropLocked(now, fresh, fmt.Sprintf("busy: executor answered 429/503 (in flight %d, backlog %d)", l.inflight+1, l.queue))
	case LimitTimeout:
		l.timeouts++
		l.dropLocked(now, fresh, fmt.Sprintf("timeout after %v (in flight %d, backlog %d)", latency, l.inflight+1, l.queue))
	case LimitOverload:
		l.overloads++
		l.dropLocked(now, fresh, fmt.Sprintf("overload: executor did not take the connection (in flight %d, backlog %d)", l.inflight+1, l.queue))
	default:
		l.dropped++
	}
	l.signal()
	l.unlockAndNotify()
}

// dropLocked applies rule 4 for a busy answer or a time-out: a cut by
// Backoff if the call was admitted since the last decrease, or if no busy
// answer or time-out has cut for an Interval (so time-outs, whose round
// trip is the whole deadline, still cut every Interval while they go on).
func (l *Limiter) dropLocked(now time.Duration, fresh bool, reason string) {
	if !fresh && l.dropSet && now-l.dropCut < l.o.Interval {
		return
	}
	l.decisions++
	l.dropCut, l.dropSet = now, true
	l.decreaseLocked(now, int(float64(l.limit)*l.o.Backoff), reason)
}

// noteDropLocked records a busy answer or time-out of the given latency.
func (l *Limiter) noteDropLocked(now, latency time.Duration) {
	l.w.drops++
	l.reopenAt = max(l.reopenAt, now+max(latency, l.o.Interval))
}

func (l *Limiter) addSampleLocked(latency time.Duration, success bool) {
	l.w.n++
	l.w.sum += latency
	if success {
		if l.w.nSucc == 0 || latency < l.w.minSucc {
			l.w.minSucc = latency
		}
		l.w.nSucc++
		l.w.sumSucc += latency
	}
}

// noLoadMean is the window's mean success latency without its fastest
// sample, the baseline candidate: a single fast outlier (a cached answer,
// an early return) cannot pull it down.
func (w *limiterWindow) noLoadMean() time.Duration {
	if w.nSucc < 2 {
		return w.sumSucc
	}
	return (w.sumSucc - w.minSucc) / time.Duration(w.nSucc-1)
}

// slowStartLocked applies rule 1 for one successful, fresh sample.
func (l *Limiter) slowStartLocked(t *Token, latency time.Duration) {
	// App-limited: fewer than half the slots were in use both when the
	// call was admitted and when it ended.
	if l.limit >= l.ssthresh || l.queue == 0 || 2*max(t.inflight, l.inflight+1) < t.limit {
		return
	}
	if l.baseline > 0 && float64(latency) > l.o.GrowTolerance*float64(l.baseline) {
		return
	}
	// Demand: no higher than the calls that could use the slots right now,
	// those in flight and the backlog waiting (RFC 7661: a window grows
	// only while it is used). Without it a steady load that queues a few
	// runs now and then would be grown ×SlowStart per round trip to far
	// above its need before the first window measures the target; with
	// it a large SlowStart costs nothing unless a backlog is there to use
	// it.
	ceiling := min(l.o.Max, l.ssthresh, l.inflight+l.queue)
	if l.service > 0 {
		// The live target: with the backlog just observed, not the one of
		// the last window, so a burst after a quiet spell is not held
		// back by a stale, small target.
		// One below it when it is not Max, so slow start does not chase
		// the noise of the target; the window rule takes the last step.
		if t := l.targetLocked(); t < l.o.Max {
			ceiling = min(ceiling, t-1)
		}
	}
	if l.limit >= ceiling {
		return
	}
	l.ssAcc += l.o.SlowStart - 1
	inc := int(l.ssAcc)
	if inc <= 0 {
		return
	}
	l.ssAcc -= float64(inc)
	n := min(l.limit+inc, ceiling)
	l.w.grown += n - l.limit
	l.limit = n
	l.signal()
}

// targetLocked returns the Little's-law target for the current backlog,
// clamped to [Min, Max].
func (l *Limiter) targetLocked() int {
	x := (l.rate + float64(l.queue)/l.o.DrainTime.Seconds()) * l.service.Seconds() * (1 + l.o.Headroom)
	if x >= float64(l.o.Max) || math.IsNaN(x) {
		return l.o.Max
	}
	// Ceil, ignoring float noise (10 × 1.1 is 11.000000000000002).
	return min(max(int(math.Ceil(x-1e-9)), l.o.Min), l.o.Max)
}

// tickLocked reports pending slow-start growth and closes the window if an
// Interval has passed.
func (l *Limiter) tickLocked(now time.Duration) {
	if l.reported != l.limit && now-l.reportedAt >= l.o.Interval {
		l.reportGrowthLocked(now)
	}
	age := now - l.w.start
	if age < l.o.Interval {
		return
	}
	if l.w.answers >= l.o.MinSamples && l.w.drops > 0 {
		// Rule 4b: a loss-proportional cut when many answers of the
		// window (of any generation) were busy or timed out.
		p := float64(l.w.drops) / float64(l.w.answers)
		if p > 1-l.o.Backoff {
			l.decisions++
			l.dropCut, l.dropSet = now, true
			l.decreaseLocked(now, int(float64(l.limit)*(1-p)),
				fmt.Sprintf("loss: %d of %d answers busy or timed out", l.w.drops, l.w.answers))
			return
		}
	}
	if l.w.n < l.o.MinSamples {
		if age < l.o.MaxWindow {
			return // extend the window until it has enough samples
		}
		if l.queue > 0 && (l.inflight > 0 || l.w.n > 0) {
			// A backlog waits and the window has answers, or calls out
			// whose answers will come (a Done ticks before its own
			// sample is added): wait for MinSamples however long the
			// calls take. Discarding the window would leave a limit too
			// low to collect MinSamples answers within MaxWindow (below
			// MinSamples × MaxWindow ÷ latency: 10 for calls of 2 s)
			// without a decision for good: the baseline, which rises
			// only through decisions, would never learn an executor that
			// became slow but not saturated, and the backlog would be
			// served at that low limit forever.
			return
		}
		l.skipWindowLocked(now, age)
		return
	}
	l.decideLocked(now, age)
}

// smooth returns the weight of a window of the given age in an exponential
// moving average with weight limiterSmoothing per Interval.
func (l *Limiter) smooth(age time.Duration) float64 {
	k := float64(age) / float64(l.o.Interval)
	return 1 - math.Pow(1-limiterSmoothing, k)
}

// updateRateLocked folds the window's arrivals into the rate: admissions
// plus the change of the backlog when it shrank. When it grew, the growth
// is left to the backlog term of the target, or a burst would count twice
// (and linger in the rate long after it has been served).
func (l *Limiter) updateRateLocked(age time.Duration) {
	arrivals := max(l.w.admitted+min(l.queue-l.w.startQueue, 0), 0)
	rate := float64(arrivals) / age.Seconds()
	if !l.rateSet {
		l.rate, l.rateSet = rate, true
		return
	}
	l.rate += l.smooth(age) * (rate - l.rate)
}

// skipWindowLocked discards a window that has too few samples after
// MaxWindow. With no latency evidence only the target is updated, and an
// app-limited limit above it decays by 10 % per elapsed Interval (like
// TCP's congestion window validation after idle, RFC 7661).
func (l *Limiter) skipWindowLocked(now, age time.Duration) {
	l.skipped++
	l.updateRateLocked(age)
	if l.service > 0 {
		l.target = l.targetLocked()
		if 2*l.w.peak < l.limit && l.limit > l.target+1 {
			k := min(float64(age)/float64(l.o.Interval), 64)
			n := max(int(float64(l.limit)*math.Pow(1-limiterShrinkStep, k)), l.target)
			l.decisions++
			l.setLimitLocked(now, n, fmt.Sprintf("idle: %d in flight at most, target %d", l.w.peak, l.target))
		}
	}
	l.resetWindowLocked(now)
}

// decideLocked takes the window decision (rules 2 and 3).
func (l *Limiter) decideLocked(now, age time.Duration) {
	w := l.w
	l.decisions++
	rtt := w.sum / time.Duration(w.n)
	l.lastRTT = rtt
	l.updateRateLocked(age)
	if l.service == 0 {
		l.service = rtt
	} else {
		l.service += time.Duration(l.smooth(age) * float64(rtt-l.service))
	}
	l.target = l.targetLocked()
	appLimited := 2*w.peak < l.limit
	if l.baseline == 0 {
		if w.nSucc < l.o.MinSamples {
			l.resetWindowLocked(now)
			return // nothing to compare with yet
		}
		l.baseline = w.noLoadMean()
	}
	ratio := float64(rtt) / float64(l.baseline)
	// The baseline moves after the decision, which is judged against the
	// baseline as it was.
	defer l.updateBaselineLocked(w, appLimited)

	switch {
	case ratio > l.o.Tolerance:
		f := min(max(l.o.GrowTolerance/ratio, limiterMaxCut), l.o.Backoff)
		l.decreaseLocked(now, int(float64(l.limit)*f),
			fmt.Sprintf("latency: mean %v is %.2f× baseline %v (tolerance %.2f)", rtt, ratio, l.baseline, l.o.Tolerance))
		return
	case ratio > l.o.GrowTolerance:
		l.healthyRun = 0
		if appLimited {
			break // the latency is not ours to fix
		}
		f := max(l.o.GrowTolerance/ratio, l.o.Backoff)
		l.decreaseLocked(now, int(float64(l.limit)*f),
			fmt.Sprintf("latency: mean %v is %.2f× baseline %v (grow tolerance %.2f)", rtt, ratio, l.baseline, l.o.GrowTolerance))
		return
	}

	// Healthy window. room is 1 at the baseline and falls to 0 as the
	// latency nears GrowTolerance.
	room := 1.0
	if l.o.GrowTolerance > 1 {
		room = min(max((l.o.GrowTolerance-ratio)/(l.o.GrowTolerance-1), 0), 1)
	}
	if !appLimited && l.queue > 0 && l.limit < l.target && room >= 0.5 {
		l.healthyRun++
	} else {
		l.healthyRun = 0
	}
	reopened := false
	if l.limit >= l.ssthresh && now >= l.reopenAt &&
		(l.healthyRun >= limiterRestartWindows || (l.healthyRun > 0 && l.limit <= l.o.Min)) {
		// The congestion that closed slow start is gone: the latency is
		// well within GrowTolerance with a backlog waiting, for
		// limiterRestartWindows windows in a row, or once at Min, where
		// there is nothing to lose.
		l.ssthresh = l.o.Max + 1
		l.healthyRun = 0
		reopened = true
	}
	switch {
	case l.limit > l.target+1 && l.queue == 0:
		// 10 % per Interval elapsed (a window that spans a quiet spell
		// takes several steps at once), at least 1.
		k := min(float64(age)/float64(l.o.Interval), 64)
		n := min(int(float64(l.limit)*math.Pow(1-limiterShrinkStep, k)), l.limit-1)
		l.setLimitLocked(now, max(l.target, n),
			fmt.Sprintf("above target %d (rate %.0f/s, service %v, backlog %d)", l.target, l.rate, l.service, l.queue))
	case l.limit < l.target && !appLimited && w.grown == 0:
		// The step shrinks with room: a full StepUp at the baseline,
		// nothing at the edge.
		step := int(math.Round(float64(l.limit) * l.o.StepUp * room))
		if step == 0 {
			break // near the edge: hold rather than flap by one
		}
		reason := fmt.Sprintf("toward target %d (rate %.0f/s, service %v, backlog %d, latency %.2f× baseline)",
			l.target, l.rate, l.service, l.queue, ratio)
		if reopened {
			reason += "; slow start re-opened"
		}
		l.setLimitLocked(now, min(l.target, l.limit+step), reason)
	}
	l.resetWindowLocked(now)
}

// updateBaselineLocked moves the baseline toward the window's mean success
// latency: down with weight BaselineFall, up with weight BaselineRise and
// only in light windows.
func (l *Limiter) updateBaselineLocked(w limiterWindow, appLimited bool) {
	if w.nSucc < l.o.MinSamples {
		return
	}
	mean := w.noLoadMean()
	switch {
	case mean < l.baseline:
		l.baseline -= time.Duration(l.o.BaselineFall * float64(l.baseline-mean))
	case mean > l.baseline && (appLimited || l.limit <= l.o.Min):
		l.baseline += time.Duration(l.o.BaselineRise * float64(mean-l.baseline))
	}
}

// decreaseLocked lowers the limit to n (clamped), closes slow start and
// starts a new generation and window.
func (l *Limiter) decreaseLocked(now time.Duration, n int, reason string) {
	n = min(max(n, l.o.Min), l.o.Max)
	l.ssthresh = n
	l.ssAcc = 0
	l.healthyRun = 0
	l.gen++
	l.epoch++
	if n < l.limit {
		l.setLimitLocked(now, n, reason)
	}
	l.resetWindowLocked(now)
}

// setLimitLocked sets the limit and reports the change, after reporting
// any slow-start growth before it.
func (l *Limiter) setLimitLocked(now time.Duration, n int, reason string) {
	n = min(max(n, l.o.Min), l.o.Max)
	if l.reported != l.limit {
		l.reportGrowthLocked(now)
	}
	if n == l.limit {
		return
	}
	if n > l.limit {
		l.signal()
	}
	l.report(now, l.limit, n, reason)
	l.limit = n
	l.epoch++
}

func (l *Limiter) reportGrowthLocked(now time.Duration) {
	l.report(now, l.reported, l.limit,
		fmt.Sprintf("slow start: ×%.3g per round trip (backlog %d, in flight %d, baseline %v)",
			l.o.SlowStart, l.queue, l.inflight, l.baseline))
}

func (l *Limiter) report(now time.Duration, old, n int, reason string) {
	l.changes++
	l.lastReason = reason
	l.reported = n
	l.reportedAt = now
	if l.o.OnChange != nil {
		l.pending = append(l.pending, limitChange{old, n, reason})
	}
}

func (l *Limiter) resetWindowLocked(now time.Duration) {
	l.w = limiterWindow{start: now, startQueue: l.queue, peak: l.inflight}
}

// signal wakes a waiter on Changed without blocking.
func (l *Limiter) signal() {
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

// unlockAndNotify releases l.mu and then calls OnChange for the changes
// made under it.
func (l *Limiter) unlockAndNotify() {
	if len(l.pending) == 0 {
		l.mu.Unlock()
		return
	}
	p := l.pending
	l.pending = nil
	l.mu.Unlock()
	for _, c := range p {
		l.o.OnChange(c.old, c.new, c.reason)
	}
}
