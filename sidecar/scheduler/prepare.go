package scheduler

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// PrepareConfig is what Preparer needs: the lease grace it writes into
// leases, the bounds of a circuit probe's backoff, a read of the local
// store and a logger.
type PrepareConfig struct {
	// LeaseGrace is added to an attempt's timeout to form its lease
	// (time.Duration; Config.LeaseGrace of the node).
	LeaseGrace time.Duration
	// ProbeMin and ProbeMax bound an unavailable executor's probe backoff
	// (delivery.ProbeBackoffMin, delivery.ProbeBackoffMax).
	ProbeMin, ProbeMax time.Duration
	// Task reads a task from the local store (nil when absent), for the
	// decisions that depend on it: a retry's backoff, a recurring task's
	// next slot. A stale read is harmless: the FSM checks epoch and attempt
	// (a read from before the Fire of the completed attempt still decides
	// a recurring task's next run: raftfsm's nextRun).
	Task func(id string) *raftfsm.Task
	// Alerts says this node has a dead-run webhook (--on-dead-url): every
	// Complete it prepares carries raftfsm.Complete.Alert, so a run that
	// ends DEAD or FAILED leaves a pending alert.
	Alerts bool
	// OneOff, when set, reports whether the attempt (task id, epoch,
	// attempt) is RUNNING and its task not recurring, as this leader
	// knows from the FSM's events (Scheduler.RunningOneOff): a successful
	// Complete of such an attempt needs no read of the task (its next run
	// is none; the backoff is for failures). A Complete of another
	// attempt is stale and changes nothing whatever Prepare decided.
	OneOff func(id string, epoch uint64, attempt int) bool
	// Flow reads a flow from the local store (nil when absent), for the
	// next slot of a cron flow, decided in the Complete or Cancel of each
	// of its stage tasks (nil Flow: cron flows end after their first run).
	Flow func(id string) *raftfsm.Flow
	// Log receives what Prepare noticed (an invalid schedule, missed
	// slots).
	Log zerolog.Logger
}

// Preparer holds the leader's decisions on a command just before it is
// proposed (times, due times, next runs); raftstore.Proposer calls
// Prepare on every command of an entry it builds. Safe for concurrent use.
type Preparer struct {
	cfg       PrepareConfig
	schedules scheduleCache
	// schedule is schedules.schedule, the method value made once: made
	// in Prepare, it was an allocation of every command.
	schedule func(*raftfsm.Spec) (raftfsm.Schedule, error)
}

// NewPreparer returns a Preparer over cfg.
func NewPreparer(cfg PrepareConfig) *Preparer {
	p := &Preparer{cfg: cfg}
	p.schedule = p.schedules.schedule
	return p
}

// Task reads task id from the local store (PrepareConfig.Task): nil when
// absent.
func (p *Preparer) Task(id string) *raftfsm.Task { return p.cfg.Task(id) }

// Flow reads flow id from the local store (PrepareConfig.Flow): nil when
// absent or when the config has no flow reads.
func (p *Preparer) Flow(id string) *raftfsm.Flow {
	if p.cfg.Flow == nil {
		return nil
	}
	return p.cfg.Flow(id)
}

// Prepare fills in the fields the leader decides (raftfsm.Prepare: times,
// due times of new tasks, retries and next runs) at now and logs what it
// noticed. It gathers the inputs raftfsm.Prepare needs: the stored task of
// a Complete, its backoff, a random draw for the backoff's jitter, the
// parsed schedule. It is idempotent: a command prepared twice (resent to
// the next leader) gets the values of the last call.
func (p *Preparer) Prepare(c *raftfsm.Command, now time.Time) {
	schedule := p.schedule
	if schedule == nil { // a Preparer not made by NewPreparer
		schedule = p.schedules.schedule
	}
	in := raftfsm.LeaderInputs{
		Schedule: schedule, LeaseGrace: p.cfg.LeaseGrace,
		ProbeMin: p.cfg.ProbeMin, ProbeMax: p.cfg.ProbeMax, Alerts: p.cfg.Alerts,
	}
	var id string // the task the command is about, for the flow and the log
	switch c.Type {
	case raftfsm.CmdComplete:
		x := c.Complete
		id = x.ID
		if x.Outcome != raftfsm.OutcomeSuccess || p.cfg.OneOff == nil || !p.cfg.OneOff(id, x.Epoch, x.Attempt) {
			in.Task = p.cfg.Task(id)
		}
		in.Backoff, in.Jitter = taskBackoff(in.Task), rand.Float64()
	case raftfsm.CmdCancel:
		id = c.Cancel.ID
	}
	if flowID, ok := raftfsm.FlowOfTask(id); ok && p.cfg.Flow != nil {
		in.Flow = p.cfg.Flow(flowID)
	}
	pr := raftfsm.Prepare(c, now, in)
	log := &p.cfg.Log
	switch {
	case pr.ScheduleErr != nil && c.Type == raftfsm.CmdSubmit: // validated by the API: cannot happen
		log.Error().Err(pr.ScheduleErr).Str("task_id", c.Submit.ID).Msg("invalid schedule")
	case pr.ScheduleErr != nil && c.Type == raftfsm.CmdFlow:
		log.Error().Err(pr.ScheduleErr).Str("flow_id", c.Flow.ID).Msg("invalid schedule")
	case pr.ScheduleErr != nil && in.Flow != nil:
		log.Error().Err(pr.ScheduleErr).Str("task_id", id).Msg("cron flow has an invalid schedule; it ends with this run")
	case pr.ScheduleErr != nil:
		log.Error().Err(pr.ScheduleErr).Str("task_id", c.Complete.ID).Msg("recurring task has an invalid schedule; ending it")
	case pr.Skipped > 0:
		log.Info().Str("task_id", c.Complete.ID).Int("skipped", pr.Skipped).Time("slot", pr.NextSlot).Msg("recurring task missed slots: firing once for all of them")
	}
}

// taskBackoff returns the retry backoff of t: its spec's, or
// engine.BackoffDefault when it names none or t is nil.
func taskBackoff(t *raftfsm.Task) engine.Backoff {
	if t == nil || t.Spec.Backoff == nil {
		return engine.BackoffDefault
	}
	sb := t.Spec.Backoff
	return engine.Backoff{Initial: time.Duration(sb.InitialNs), Max: time.Duration(sb.MaxNs), Multiplier: sb.Multiplier, Jitter: sb.Jitter}
}

// scheduleCache keeps parsed schedules by their spec, so that a busy
// recurring task is not parsed at every run.
type scheduleCache struct {
	mu sync.Mutex
	m  map[string]*engine.Schedule
}

// recurrence is a parsed schedule with the spec's end (Repeats, UntilMs):
// the raftfsm.Schedule the lifecycle rules use.
type recurrence struct {
	*engine.Schedule
	engine.Limits
}

// schedule returns the raftfsm.Schedule of spec s, parsed once per
// (cron, time zone, interval).
func (c *scheduleCache) schedule(s *raftfsm.Spec) (raftfsm.Schedule, error) {
	sc, err := c.get(s)
	if err != nil {
		return nil, err
	}
	r := recurrence{Schedule: sc, Limits: engine.Limits{Repeats: s.Repeats}}
	if s.UntilMs != 0 {
		r.Until = time.UnixMilli(s.UntilMs)
	}
	return r, nil
}

// scheduleCacheMax bounds the cache; it is cleared when full.
const scheduleCacheMax = 4096

func (c *scheduleCache) get(s *raftfsm.Spec) (*engine.Schedule, error) {
	key := s.Cron + "\x00" + s.Timezone + "\x00" + strconv.FormatInt(s.EveryNs, 10)
	c.mu.Lock()
	defer c.mu.Unlock()
	if sc := c.m[key]; sc != nil {
		return sc, nil
	}
	var sc *engine.Schedule
	var err error
	if s.Cron != "" {
		sc, err = engine.ParseCron(s.Cron, s.Timezone)
	} else {
		sc, err = engine.Every(time.Duration(s.EveryNs))
	}
	if err != nil {
		return nil, err
	}
	if c.m == nil || len(c.m) >= scheduleCacheMax {
		c.m = map[string]*engine.Schedule{}
	}
	c.m[key] = sc
	return sc, nil
}
