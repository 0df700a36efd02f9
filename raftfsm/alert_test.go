package raftfsm

import (
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// alerting returns c with Complete.Alert set, as a leader with a webhook
// prepares it.
func alerting(c Command) Command {
	c.Complete.Alert = true
	return c
}

func alertDoneCmd(seq uint64) Command {
	return Command{Type: CmdAlertDone, AlertDone: &AlertDone{Seq: seq}}
}

func (e *env) alerts() []Alert {
	e.t.Helper()
	as, err := e.f.Alerts(0, 100_000)
	if err != nil {
		e.t.Fatal(err)
	}
	return as
}

func (e *env) alertStats() AlertMeta {
	e.t.Helper()
	m, err := e.f.AlertStats()
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *env) alertKeys() int {
	n := 0
	if err := e.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefixAlert})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// TestAlertOncePerDeadOrFailedRun: a Complete with Alert that ends a run
// DEAD or FAILED writes one pending alert; a failed attempt with attempts
// left, a success, a cancel, a stale or replayed Complete, and a Complete
// without Alert write none.
func TestAlertOncePerDeadOrFailedRun(t *testing.T) {
	e := newEnv(t)
	rec := &recorder{}
	e.f.SetObserver(rec)
	s := spec("mail", "{}")
	s.MaxAttempts = 2
	e.apply(1, submitCmd("dead", s, 1000, 900), submitCmd("failed", s, 1000, 900), submitCmd("ok", s, 1000, 900),
		submitCmd("cancelled", s, 1000, 900), submitCmd("quiet", s, 1000, 900))
	e.apply(2, fireCmd("dead", 1, 1, "n1", 1000, 9000), fireCmd("failed", 1, 1, "n1", 1000, 9000), fireCmd("ok", 1, 1, "n1", 1000, 9000),
		fireCmd("cancelled", 1, 1, "n1", 1000, 9000), fireCmd("quiet", 1, 1, "n1", 1000, 9000))
	// First attempts: one fails with an attempt left, one fails for good,
	// one succeeds, one is cancelled; "quiet" fails without Alert (a
	// leader without a webhook).
	e.apply(3, alerting(completeCmd("dead", 1, 1, OutcomeRetryable, "http 500", 2000, 1100)),
		alerting(completeCmd("failed", 1, 1, OutcomePermanent, "http 400: bad", 0, 1100)),
		alerting(completeCmd("ok", 1, 1, OutcomeSuccess, "", 0, 1100)),
		cancelCmd("cancelled", 1100), completeCmd("quiet", 1, 1, OutcomeRetryable, "http 500", 1100, 1100))
	if as := e.alerts(); len(as) != 1 || as[0].TaskID != "failed" || as[0].State != StateFailed || as[0].Run != 1 ||
		as[0].Seq != 1 || as[0].Handler != "mail" || as[0].FinishedMs != 1100 || as[0].Error != "http 400: bad" || as[0].ID() != "failed/1" {
		t.Fatalf("alerts after the first attempts: %+v", as)
	}
	e.apply(4, fireCmd("dead", 1, 2, "n1", 2000, 9000), fireCmd("quiet", 1, 2, "n1", 1100, 9000))
	e.apply(5, alerting(completeCmd("dead", 1, 2, OutcomeTimeout, "timeout after 30s", 0, 2100)),
		completeCmd("quiet", 1, 2, OutcomeLost, "lost", 0, 2100))
	// The same Complete again (a resend after an election) is stale, and
	// the same entry again (a replay after a restart) is skipped.
	e.apply(6, alerting(completeCmd("dead", 1, 2, OutcomeTimeout, "timeout after 30s", 0, 2200)))
	if out := e.applyEntry(5, alerting(completeCmd("dead", 1, 2, OutcomeTimeout, "x", 0, 2100))); out != nil {
		t.Fatalf("replayed entry applied: %v", out)
	}
	e.reopen()
	as := e.alerts()
	if len(as) != 2 || as[1].TaskID != "dead" || as[1].State != StateDead || as[1].Seq != 2 || as[1].FinishedMs != 2100 {
		t.Fatalf("alerts: %+v", as)
	}
	if e.task("quiet").State != StateDead {
		t.Fatalf("quiet is %v", e.task("quiet").State)
	}
	if m := e.alertStats(); m.Pending != 2 || m.Next != 3 || m.Oldest != 1 || m.Dropped != 0 {
		t.Fatalf("stats %+v", m)
	}
	// The events of the Completes that wrote an alert say so.
	alerted := map[string]bool{}
	for _, c := range rec.calls {
		for _, ev := range c.events {
			if ev.Alert {
				alerted[ev.Task.ID] = true
			}
		}
	}
	if len(alerted) != 2 || !alerted["dead"] || !alerted["failed"] {
		t.Fatalf("events with Alert: %v", alerted)
	}
}

// TestAlertRecurringRunGoesOn: a recurring task's run that ends DEAD
// alerts with that run's number though the task goes on WAITING.
func TestAlertRecurringRunGoesOn(t *testing.T) {
	e := newEnv(t)
	s := recurringSpec()
	s.MaxAttempts = 1
	e.apply1(1, submitCmd("cron", s, 1000, 900))
	e.apply1(2, fireCmd("cron", 1, 1, "n1", 1000, 9000))
	c := alerting(completeCmd("cron", 1, 1, OutcomeRetryable, "boom", 0, 1100))
	c.Complete.NextSlotMs, c.Complete.NextDueMs = 2000, 2000
	e.apply1(3, c)
	if tk := e.task("cron"); tk.State != StateWaiting || tk.RunNumber() != 2 {
		t.Fatalf("task %v run %d", tk.State, tk.RunNumber())
	}
	if as := e.alerts(); len(as) != 1 || as[0].ID() != "cron/1" || as[0].State != StateDead {
		t.Fatalf("alerts %+v", as)
	}
}

// TestAlertDone: CmdAlertDone deletes its alert once; a second one, or
// one for an unknown seq, changes nothing.
func TestAlertDone(t *testing.T) {
	e := newEnv(t)
	s := spec("h", "{}")
	s.MaxAttempts = 1
	for i, id := range []string{"a", "b", "c"} {
		idx := uint64(10 * (i + 1))
		e.apply1(idx, submitCmd(id, s, 1000, 900))
		epoch := e.task(id).Epoch
		e.apply1(idx+1, fireCmd(id, epoch, 1, "n1", 1000, 9000))
		e.apply1(idx+2, alerting(completeCmd(id, epoch, 1, OutcomeLost, "lost", 0, 1100)))
	}
	if r := e.apply1(40, alertDoneCmd(1)); r.Code != CodeOK {
		t.Fatalf("done 1: %+v", r)
	}
	before := e.dump()
	if r := e.apply1(41, alertDoneCmd(1)); r.Code != CodeNotFound {
		t.Fatalf("done 1 again: %+v", r)
	}
	if r := e.apply1(42, alertDoneCmd(99)); r.Code != CodeNotFound {
		t.Fatalf("done 99: %+v", r)
	}
	e.assertUnchanged(before)
	// Out of order: 3 before 2; Oldest stays at 2 until 2 goes.
	e.apply1(43, alertDoneCmd(3))
	if m := e.alertStats(); m.Pending != 1 || m.Oldest != 2 {
		t.Fatalf("stats %+v", m)
	}
	e.apply1(44, alertDoneCmd(2))
	if m := e.alertStats(); m.Pending != 0 || m.Oldest != 4 || m.Next != 4 || e.alertKeys() != 0 {
		t.Fatalf("stats %+v, %d keys", m, e.alertKeys())
	}
}

// TestAlertBound: beyond the bound a new alert drops the oldest pending
// one, counted; the store never holds more.
func TestAlertBound(t *testing.T) {
	defer func(n int) { alertsPendingMax = n }(alertsPendingMax)
	alertsPendingMax = 3
	e := newEnv(t)
	s := spec("h", "{}")
	s.MaxAttempts = 1
	idx := uint64(0)
	for i := range 5 {
		id := string(rune('a' + i))
		idx++
		e.apply1(idx, submitCmd(id, s, 1000, 900))
		epoch := e.task(id).Epoch
		idx++
		e.apply1(idx, fireCmd(id, epoch, 1, "n1", 1000, 9000))
		idx++
		e.apply1(idx, alerting(completeCmd(id, epoch, 1, OutcomePermanent, "no", 0, 1100)))
		if i == 1 {
			idx++
			e.apply1(idx, alertDoneCmd(1)) // a sent, b pending
		}
	}
	as := e.alerts()
	if len(as) != 3 || as[0].TaskID != "c" || as[2].TaskID != "e" || e.alertKeys() != 3 {
		t.Fatalf("alerts %+v", as)
	}
	if m := e.alertStats(); m.Pending != 3 || m.Dropped != 1 || m.Oldest != 3 {
		t.Fatalf("stats %+v", m)
	}
}

// TestAlertSurvivesPurgeAndSnapshot: a purge of the task keeps its alert
// (it carries what the webhook needs); a snapshot carries the alerts and
// their bookkeeping.
func TestAlertSurvivesPurgeAndSnapshot(t *testing.T) {
	e := newEnv(t)
	s := spec("h", "{}")
	s.MaxAttempts = 1
	e.apply1(1, submitCmd("a", s, 1000, 900))
	e.apply1(2, fireCmd("a", 1, 1, "n1", 1000, 9000))
	e.apply1(3, alerting(completeCmd("a", 1, 1, OutcomePermanent, "no", 0, 1100)))
	if r := e.apply1(4, purgeCmd(targetOf(e.task("a")))); len(r.Purged) != 1 || !r.Purged[0] {
		t.Fatalf("purge: %+v", r)
	}
	e.noTask("a")
	if as := e.alerts(); len(as) != 1 || as[0].ID() != "a/1" || as[0].Handler != "h" {
		t.Fatalf("alerts after purge %+v", as)
	}
	stream := persist(t, e.snapshot())
	dst := newEnv(t)
	if err := dst.restore(stream); err != nil {
		t.Fatal(err)
	}
	if as := dst.alerts(); len(as) != 1 || as[0].ID() != "a/1" {
		t.Fatalf("restored alerts %+v", as)
	}
	if m := dst.alertStats(); m.Pending != 1 || m.Next != 2 {
		t.Fatalf("restored stats %+v", m)
	}
	dst.apply1(5, alertDoneCmd(1))
	if dst.alertKeys() != 0 {
		t.Fatal("alert not deleted on the restored FSM")
	}
}

// TestPrepareSetsAlert: the leader's Prepare writes its webhook setting
// into every Complete, and again when prepared twice.
func TestPrepareSetsAlert(t *testing.T) {
	c := completeCmd("a", 1, 1, OutcomeRetryable, "x", 0, 0)
	in := LeaderInputs{Backoff: doubling{}, Alerts: true}
	Prepare(&c, time.UnixMilli(5000), in)
	if !c.Complete.Alert {
		t.Fatal("Alert not set")
	}
	in.Alerts = false
	Prepare(&c, time.UnixMilli(5000), in)
	if c.Complete.Alert {
		t.Fatal("Alert kept by a leader without a webhook")
	}
}

// BenchmarkApplyDeadRunAlerts is BenchmarkApplyDeadRun with a webhook:
// the Complete writes an alert, and its CmdAlertDone (the webhook took
// it) is one more entry.
func BenchmarkApplyDeadRunAlerts(b *testing.B) {
	benchDeadRun(b, func(c *Complete, run int) []Command {
		c.Alert = true
		return []Command{alertDoneCmd(uint64(run + 1))}
	})
}

// TestAlertFlowStage: a flow stage task whose run fails alerts like any
// task, in the same apply that ends the stage (and the flow).
func TestAlertFlowStage(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	e.next(flowCmd("f", diamond(), 5000, 1000))
	a := e.task(sid("A"))
	e.next(fireCmd(sid("A"), a.Epoch, 1, "n1", 5000, 35000))
	e.next(alerting(completeCmd(sid("A"), a.Epoch, 1, OutcomePermanent, "http 400", 0, 5100)))
	if fl := e.flow("f"); !fl.State.Terminal() {
		t.Fatalf("flow %v after its first stage failed", fl.State)
	}
	if as := e.alerts(); len(as) != 1 || as[0].TaskID != sid("A") || as[0].State != StateFailed || as[0].Handler != "h.A" {
		t.Fatalf("alerts %+v", as)
	}
}
