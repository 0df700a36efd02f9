package alert

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/clients/go/axapi"
	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// Sender defaults (Config).
const (
	// BackoffMinDefault is the wait after the first failed send; each
	// failure in a row doubles it up to BackoffMaxDefault.
	BackoffMinDefault = time.Second
	BackoffMaxDefault = time.Minute
	// TimeoutDefault bounds one POST (on the wall clock: a real request).
	TimeoutDefault = 10 * time.Second
	// batch is how many alerts one read of the store returns.
	batch = 64
)

// Outcomes of a send (label outcome of ax_alerts_sent_total).
const (
	OutcomeDelivered = "delivered" // the webhook answered 2xx
	OutcomeFailed    = "failed"    // an error or a non-2xx answer: sent again later
)

// Store is what the sender reads of the FSM (*raftfsm.FSM).
type Store interface {
	// Alerts returns up to limit pending alerts with seq above after,
	// oldest first.
	Alerts(after uint64, limit int) ([]raftfsm.Alert, error)
	// AlertStats returns the pending and dropped counts.
	AlertStats() (raftfsm.AlertMeta, error)
	// Task returns a task, raftfsm.ErrNotFound when there is none.
	Task(id string) (*raftfsm.Task, error)
	// Run returns a run record, raftfsm.ErrNotFound when there is none.
	Run(id string, run int) (*raftfsm.RunRecord, error)
}

// Proposer commits commands through this node, the leader.
type Proposer interface {
	Propose(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error)
}

// Poster POSTs an alert's JSON body to the webhook at baseURL and
// returns the answer's status (callback.Caller.PostAlert).
type Poster interface {
	PostAlert(ctx context.Context, baseURL string, h http.Header, body []byte) (int, error)
}

// Config is the sender's configuration.
type Config struct {
	// URL is the webhook's base URL (--on-dead-url, checked with
	// callback.ParseAlertURL); "" turns the sender off.
	URL string
	// BackoffMin and BackoffMax bound the wait before a failed send is
	// tried again. Default to BackoffMinDefault and BackoffMaxDefault.
	BackoffMin, BackoffMax time.Duration
	// Timeout bounds one POST. Defaults to TimeoutDefault.
	Timeout time.Duration
}

// Deps is what the sender uses of the node. All are required but Log.
type Deps struct {
	Store    Store
	Proposer Proposer
	Poster   Poster
	// TaskView and RunView give the API's views of a stored task and run
	// record (package api's).
	TaskView func(*raftfsm.Task) axapi.Task
	RunView  func(*raftfsm.Task, *raftfsm.RunRecord) axapi.Run
	Clock    engine.Clock
	Log      zerolog.Logger
}

// Sender sends the pending alerts while this node leads (Start, Stop).
// Safe for concurrent use.
type Sender struct {
	cfg  Config
	d    Deps
	wake chan struct{}

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}

	sent *prometheus.CounterVec
}

// New returns a Sender over cfg and d; Start runs it.
func New(cfg Config, d Deps) *Sender {
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = BackoffMinDefault
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = max(BackoffMaxDefault, cfg.BackoffMin)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = TimeoutDefault
	}
	s := &Sender{cfg: cfg, d: d, wake: make(chan struct{}, 1)}
	s.sent = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ax_alerts_sent_total",
		Help: "Dead-run alerts this node POSTed to --on-dead-url while it led: outcome delivered (2xx) or failed (an error or another status; sent again after a backoff).",
	}, []string{"outcome"})
	s.sent.WithLabelValues(OutcomeDelivered)
	s.sent.WithLabelValues(OutcomeFailed)
	return s
}

// Enabled reports whether a webhook is configured.
func (s *Sender) Enabled() bool { return s.cfg.URL != "" }

// Collectors returns the sender's metrics: ax_alerts_sent_total, and the
// replicated ax_alerts_pending and ax_alerts_dropped_total (the same on
// every node).
func (s *Sender) Collectors() []prometheus.Collector {
	stat := func(f func(raftfsm.AlertMeta) float64) func() float64 {
		return func() float64 {
			m, err := s.d.Store.AlertStats()
			if err != nil {
				return 0
			}
			return f(m)
		}
	}
	return []prometheus.Collector{
		s.sent,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ax_alerts_pending",
			Help: "Dead-run alerts stored and not yet delivered to --on-dead-url (at most 10 000; replicated: the same on every node).",
		}, stat(func(m raftfsm.AlertMeta) float64 { return float64(m.Pending) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ax_alerts_dropped_total",
			Help: "Dead-run alerts deleted unsent because 10 000 were pending (the oldest goes).",
		}, stat(func(m raftfsm.AlertMeta) float64 { return float64(m.Dropped) })),
	}
}

// OnEvent wakes the sender when an applied Complete wrote an alert. It
// never blocks.
func (s *Sender) OnEvent(ev *raftfsm.Event) {
	if ev.Alert || ev.Restored {
		s.poke()
	}
}

func (s *Sender) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Start runs the sender until Stop or ctx ends (when this node wins
// leadership). It does nothing without a URL, or when already running.
func (s *Sender) Start(parent context.Context) {
	if !s.Enabled() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(parent)
	s.cancel, s.done = cancel, make(chan struct{})
	done := s.done
	go func() {
		defer close(done)
		s.run(ctx)
	}()
}

// Stop stops the sender and waits for it (when this node loses
// leadership). A send in flight is abandoned; its alert stays pending.
func (s *Sender) Stop() {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.cancel, s.done = nil, nil
	s.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (s *Sender) run(ctx context.Context) {
	s.d.Log.Info().Str("url", s.cfg.URL).Msg("sending dead-run alerts while leading")
	var wait time.Duration // the backoff after a failure in a row; 0 after a success
	var after uint64       // the last alert delivered this term
	for ctx.Err() == nil {
		// One round: every pending alert from the cursor on, batch by
		// batch. Alerts the webhook keeps refusing (refusal: a 413 for
		// its size, a 400 for its content) must not hold up the others,
		// however many they are: after a refusal the round goes on to
		// the next alert. Another failure (an error, a 5xx, another 4xx:
		// the webhook is down, busy or wrongly addressed, most likely)
		// is passed over once too, and a second one ends the round. A
		// round with a failure ends with the backoff, and the failed
		// alerts are tried first in the next: the cursor moves only past
		// delivered alerts with no failed one before them.
		scan := after
		seen, failed, down := false, false, 0
	round:
		for ctx.Err() == nil {
			as, err := s.d.Store.Alerts(scan, batch)
			if err != nil {
				s.d.Log.Error().Err(err).Msg("reading pending alerts failed")
				failed = true
				break
			}
			seen = seen || len(as) > 0
			for i := range as {
				scan = as[i].Seq
				r := s.send(ctx, &as[i])
				if r == sendDelivered {
					if !failed {
						wait, after = 0, as[i].Seq
					}
					continue
				}
				if ctx.Err() != nil {
					return
				}
				failed = true
				if r == sendFailed {
					if down++; down == 2 {
						break round
					}
				}
			}
			if len(as) < batch {
				break
			}
		}
		switch {
		case ctx.Err() != nil:
			return
		case failed:
			wait = s.next(wait)
			s.sleep(ctx, wait)
		case !seen:
			select {
			case <-ctx.Done():
			case <-s.wake:
			}
		}
	}
}

// sendResult is how the send of one alert ended.
type sendResult int

const (
	sendDelivered sendResult = iota // POSTed (2xx) and deleted
	sendRefused                     // the webhook answered 400, 409, 413 or 422: it is up, and refuses this alert
	sendFailed                      // an error, another status, or the deletion of a delivered alert failed
)

// refusal reports whether a webhook's status refuses one alert for what
// it is (400 its content, 409 a conflict with what the receiver holds,
// 413 its size, 422 its fields) rather than saying the webhook is down,
// busy or not there at all: a 404, 401, 403 or 405 answers every alert
// alike (a wrong URL or credentials), and a round that went on past
// them would POST every pending alert, up to 10 000, at each backoff.
func refusal(status int) bool {
	switch status {
	case http.StatusBadRequest, http.StatusConflict, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return true
	}
	return false
}

// next returns the wait after another failure, from the last one.
func (s *Sender) next(wait time.Duration) time.Duration {
	if wait == 0 {
		return s.cfg.BackoffMin
	}
	return min(2*wait, s.cfg.BackoffMax)
}

// sleep waits d on the node's clock, or until ctx ends.
func (s *Sender) sleep(ctx context.Context, d time.Duration) {
	t := s.d.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C():
	}
}

// send POSTs a and, on a 2xx answer, deletes it through Raft. It reports
// whether both happened, or else whether the webhook refused a.
func (s *Sender) send(ctx context.Context, a *raftfsm.Alert) sendResult {
	log := s.d.Log.With().Str("alert_id", a.ID()).Str("task_id", a.TaskID).Int("run", a.Run).Logger()
	body, err := json.Marshal(s.body(a))
	if err != nil { // the views always encode
		log.Error().Err(err).Msg("encoding an alert failed")
		return sendFailed
	}
	h := http.Header{}
	h.Set(axapi.HeaderAlertID, a.ID())
	h.Set(axapi.HeaderTaskID, a.TaskID)
	h.Set(axapi.HeaderHandler, a.Handler)
	h.Set(axapi.HeaderRun, strconv.Itoa(a.Run))
	pctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	status, err := s.d.Poster.PostAlert(pctx, s.cfg.URL, h, body)
	cancel()
	if ctx.Err() != nil {
		return sendFailed // stopped: not a failure of the webhook (run checks ctx)
	}
	if err != nil || status < 200 || status > 299 {
		s.sent.WithLabelValues(OutcomeFailed).Inc()
		ev := log.Warn()
		if err != nil {
			ev = ev.Err(err)
		} else {
			ev = ev.Int("status", status)
		}
		ev.Msg("dead-run webhook did not take the alert; trying again later")
		if err == nil && refusal(status) {
			return sendRefused
		}
		return sendFailed
	}
	s.sent.WithLabelValues(OutcomeDelivered).Inc()
	if _, err := s.d.Proposer.Propose(ctx, []raftfsm.Command{{Type: raftfsm.CmdAlertDone, AlertDone: &raftfsm.AlertDone{Seq: a.Seq}}}); err != nil {
		// Sent, not deleted: it is sent again (the receiver de-duplicates
		// on the alert id), by this leader or the next.
		if ctx.Err() == nil {
			log.Warn().Err(err).Msg("deleting a delivered alert failed; it will be sent again")
		}
		return sendFailed
	}
	log.Debug().Msg("dead-run alert delivered")
	return sendDelivered
}

// body is the JSON of alert a: its own fields, and the task and run
// record as they stand (absent once purged).
func (s *Sender) body(a *raftfsm.Alert) axapi.Alert {
	b := axapi.Alert{
		ID: a.ID(), TaskID: a.TaskID, Handler: a.Handler, Run: a.Run, State: a.State.String(),
		FinishedAt: time.UnixMilli(a.FinishedMs).UTC(), Error: a.Error,
	}
	t, err := s.d.Store.Task(a.TaskID)
	if err == nil && t != nil {
		v := s.d.TaskView(t)
		b.Task = &v
	} else if err != nil && !errors.Is(err, raftfsm.ErrNotFound) {
		s.d.Log.Warn().Err(err).Str("task_id", a.TaskID).Msg("reading an alert's task failed; sending without it")
	}
	if r, err := s.d.Store.Run(a.TaskID, a.Run); err == nil && r != nil && r.Epoch == a.Epoch {
		v := s.d.RunView(t, r) // t nil once purged: the view has no trace id then
		b.RunRecord = &v
	}
	return b
}
