package sidecartest_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axsched/ax/ipc"
	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar"
	"github.com/axsched/ax/sidecar/sidecartest"
)

func submitFlowJSON(t *testing.T, c *sidecartest.Cluster, body string) ipc.Flow {
	t.Helper()
	resp := c.HTTP(0, "POST", "/v1/flows", []byte(body))
	if resp.Status != 201 {
		t.Fatalf("submit flow %s: %d %s", body, resp.Status, resp.Body)
	}
	var fl ipc.Flow
	if err := json.Unmarshal(resp.Body, &fl); err != nil {
		t.Fatalf("flow view %s: %v", resp.Body, err)
	}
	return fl
}

func getFlow(t *testing.T, c *sidecartest.Cluster, id string) ipc.Flow {
	t.Helper()
	resp := c.HTTP(0, "GET", "/v1/flows/"+id, nil)
	if resp.Status != 200 {
		t.Fatalf("get flow %s: %d %s", id, resp.Status, resp.Body)
	}
	var fl ipc.Flow
	if err := json.Unmarshal(resp.Body, &fl); err != nil {
		t.Fatalf("flow view %s: %v", resp.Body, err)
	}
	return fl
}

func waitFlow(t *testing.T, c *sidecartest.Cluster, id, state string) ipc.Flow {
	t.Helper()
	var fl ipc.Flow
	c.Eventually("flow "+id+" "+state, func() bool {
		fl = getFlow(t, c, id)
		return fl.State == state
	})
	return fl
}

func stageState(fl ipc.Flow, name string) string {
	for _, s := range fl.Stages {
		if s.Name == name {
			return s.State
		}
	}
	return ""
}

// journal records, per stage task, the stages that had ended when its
// callback arrived, and lets a test hold stages until it says.
type journal struct {
	mu      sync.Mutex
	ended   map[string]bool
	seenAt  map[string][]string // task id -> ended stages at arrival
	calls   map[string]int
	hold    map[string]chan struct{}
	answers map[string]sidecartest.Reply
}

func newJournal() *journal {
	return &journal{ended: map[string]bool{}, seenAt: map[string][]string{}, calls: map[string]int{},
		hold: map[string]chan struct{}{}, answers: map[string]sidecartest.Reply{}}
}

func (j *journal) respond(call sidecartest.Call) sidecartest.Reply {
	j.mu.Lock()
	var ended []string
	for id := range j.ended {
		ended = append(ended, id)
	}
	j.seenAt[call.TaskID] = ended
	j.calls[call.TaskID]++
	h := j.hold[call.TaskID]
	rep := j.answers[call.TaskID]
	j.mu.Unlock()
	if h != nil {
		<-h
	}
	j.mu.Lock()
	j.ended[call.TaskID] = true
	j.mu.Unlock()
	return rep
}

func (j *journal) endedBefore(id string, stages ...string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, s := range stages {
		found := false
		for _, e := range j.seenAt[id] {
			found = found || e == s
		}
		if !found {
			return false
		}
	}
	return true
}

func (j *journal) count(id string) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.calls[id]
}

const diamondStages = `[{"name":"A","handler":"h"},{"name":"B","handler":"h","depends_on":["A"]},
{"name":"C","handler":"h","depends_on":["A"]},{"name":"D","handler":"h","depends_on":["B","C"]%s}]`

// The diamond A -> (B, C) -> D: B and C start only after A ended and run
// at the same time (each is called while the other is held), D only
// after both ended, with their results in its envelope; the flow ends
// SUCCESS, each stage called once.
func TestFlowDiamond(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Nodes: 3})
	id := func(s string) string { return raftfsm.FlowStageID("dia", 1, s) }
	j := newJournal()
	release := make(chan struct{})
	j.hold[id("B")], j.hold[id("C")] = release, release
	j.answers[id("B")] = sidecartest.Reply{Body: []byte(`{"b":2}`)}
	j.answers[id("C")] = sidecartest.Reply{Body: []byte(`{"c":3}`)}
	c.Respond(j.respond)
	fl := submitFlowJSON(t, c, `{"id":"dia","stages":`+fmt.Sprintf(diamondStages, "")+`}`)
	if len(fl.Stages) != 4 || fl.Stages[3].State != "PENDING" {
		t.Fatalf("submitted flow: %+v", fl)
	}
	// B and C are both called while both are held: they overlap.
	c.WaitCalls(id("B"), 1)
	c.WaitCalls(id("C"), 1)
	if !j.endedBefore(id("B"), id("A")) || !j.endedBefore(id("C"), id("A")) {
		t.Fatal("B or C called before A ended")
	}
	if n := j.count(id("D")); n != 0 {
		t.Fatal("D called before B and C ended")
	}
	if fl := getFlow(t, c, "dia"); fl.State != "RUNNING" {
		t.Fatalf("flow with B and C running: %+v", fl)
	}
	// A conflicting resubmit names the state the flow's view shows (it
	// said WAITING, the stored state, for a flow every read shows RUNNING).
	if resp := c.HTTP(0, "POST", "/v1/flows", []byte(`{"id":"dia","stages":[{"name":"A","handler":"x"}]}`)); resp.Status != 409 ||
		!strings.Contains(string(resp.Body), "(state RUNNING)") {
		t.Fatalf("conflicting resubmit while running: %d %s", resp.Status, resp.Body)
	}
	close(release)
	calls := c.WaitCalls(id("D"), 1)
	if !j.endedBefore(id("D"), id("B"), id("C")) {
		t.Fatal("D called before B and C ended")
	}
	var env raftfsm.FlowEnvelope
	if err := json.Unmarshal(calls[0].Payload, &env); err != nil || string(env.Upstream["B"].Result) != `{"b":2}` ||
		string(env.Upstream["C"].Result) != `{"c":3}` {
		t.Fatalf("D's payload %s: %v", calls[0].Payload, err)
	}
	fl = waitFlow(t, c, "dia", "SUCCESS")
	for _, s := range fl.Stages {
		if s.State != "SUCCESS" || j.count(s.TaskID) != 1 {
			t.Fatalf("stage %+v called %d times", s, j.count(s.TaskID))
		}
	}
	// Resubmitting the same flow is 200, another spec 409.
	if resp := c.HTTP(0, "POST", "/v1/flows", []byte(`{"id":"dia","stages":`+fmt.Sprintf(diamondStages, "")+`}`)); resp.Status != 200 {
		t.Fatalf("resubmit: %d %s", resp.Status, resp.Body)
	}
	if resp := c.HTTP(0, "POST", "/v1/flows", []byte(`{"id":"dia","stages":[{"name":"A","handler":"x"}]}`)); resp.Status != 409 {
		t.Fatalf("conflicting resubmit: %d %s", resp.Status, resp.Body)
	}
	resp := c.HTTP(0, "GET", "/v1/flows?limit=10", nil)
	if resp.Status != 200 || !strings.Contains(string(resp.Body), `"id":"dia"`) {
		t.Fatalf("list: %d %s", resp.Status, resp.Body)
	}
}

// C fails permanently: D is CANCELLED (never called) and the flow FAILED;
// with on_failure continue on D, D runs and the flow is still FAILED.
func TestFlowFailure(t *testing.T) {
	for _, cont := range []bool{false, true} {
		t.Run(fmt.Sprintf("continue=%v", cont), func(t *testing.T) {
			c := sidecartest.New(t, sidecartest.Options{})
			id := func(s string) string { return raftfsm.FlowStageID("fail", 1, s) }
			j := newJournal()
			j.answers[id("C")] = sidecartest.Reply{Status: 422}
			c.Respond(j.respond)
			extra := ""
			if cont {
				extra = `,"on_failure":"continue"`
			}
			submitFlowJSON(t, c, `{"id":"fail","stages":`+fmt.Sprintf(diamondStages, extra)+`}`)
			fl := waitFlow(t, c, "fail", "FAILED")
			if stageState(fl, "C") != "FAILED" || stageState(fl, "B") != "SUCCESS" {
				t.Fatalf("flow: %+v", fl)
			}
			if cont {
				if stageState(fl, "D") != "SUCCESS" || j.count(id("D")) != 1 || !j.endedBefore(id("D"), id("B"), id("C")) {
					t.Fatalf("D with continue: %+v, called %d", fl, j.count(id("D")))
				}
				return
			}
			if stageState(fl, "D") != "CANCELLED" || j.count(id("D")) != 0 {
				t.Fatalf("D: %+v, called %d", fl, j.count(id("D")))
			}
		})
	}
}

// Cancelling a flow cancels its running stage and the stages after it.
func TestFlowCancel(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{})
	id := func(s string) string { return raftfsm.FlowStageID("cf", 1, s) }
	j := newJournal()
	j.hold[id("A")] = make(chan struct{}) // never released: the cancel ends the call
	c.Respond(j.respond)
	submitFlowJSON(t, c, `{"id":"cf","stages":`+fmt.Sprintf(diamondStages, "")+`}`)
	c.WaitCalls(id("A"), 1)
	resp := c.HTTP(0, "DELETE", "/v1/flows/cf", nil)
	if resp.Status != 200 {
		t.Fatalf("cancel: %d %s", resp.Status, resp.Body)
	}
	fl := waitFlow(t, c, "cf", "CANCELLED")
	for _, s := range fl.Stages {
		if s.State != "CANCELLED" {
			t.Fatalf("stage %+v after the cancel", s)
		}
	}
	close(j.hold[id("A")])
}

// A recurring flow (every 2s) runs one flow run per slot, never two at
// once: the slot that comes while run 1 is still going is skipped, run 2
// starts at the next slot after run 1 ended. Three runs, then a cancel.
func TestFlowRecurring(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{})
	j := newJournal()
	id := func(run int, s string) string { return raftfsm.FlowStageID("rf", run, s) }
	hold := make(chan struct{})
	j.hold[id(1, "B")] = hold
	c.Respond(j.respond)
	start := c.Now().Add(time.Second).UTC().Truncate(time.Millisecond)
	slot := func(k int) time.Time { return start.Add(time.Duration(k) * 2 * time.Second) }
	submitFlowJSON(t, c, fmt.Sprintf(`{"id":"rf","every":"2s","run_at":%q,"stages":[{"name":"A","handler":"h"},{"name":"B","handler":"h","depends_on":["A"]}]}`,
		start.Format(time.RFC3339Nano)))
	c.AdvanceTo(slot(0))
	c.WaitCalls(id(1, "B"), 1)
	c.AdvanceTo(slot(1).Add(500 * time.Millisecond)) // run 1 overruns slot 1
	if fl := getFlow(t, c, "rf"); fl.Run != 1 || fl.State != "RUNNING" {
		t.Fatalf("flow while run 1 overruns: %+v", fl)
	}
	close(hold)
	var fl ipc.Flow
	c.Eventually("run 2 armed", func() bool { fl = getFlow(t, c, "rf"); return fl.Run == 2 })
	if !fl.RunDueAt.Equal(slot(2)) || fl.SucceededRuns != 1 {
		t.Fatalf("run 2: %+v, want due at %v (slot 1 skipped)", fl, slot(2))
	}
	for run := 2; run <= 3; run++ {
		c.AdvanceTo(slot(run))
		calls := c.WaitCalls(id(run, "B"), 1)
		a := c.WaitCalls(id(run, "A"), 1)
		if a[0].At.Before(slot(run)) || calls[0].At.Before(a[0].At) {
			t.Fatalf("run %d: A at %v, B at %v, slot %v", run, a[0].At, calls[0].At, slot(run))
		}
		if !j.endedBefore(id(run, "A"), id(run-1, "B")) {
			t.Fatalf("run %d started before run %d ended", run, run-1)
		}
		c.Eventually(fmt.Sprintf("run %d armed", run+1), func() bool { fl = getFlow(t, c, "rf"); return fl.Run == run+1 })
	}
	if fl.SucceededRuns != 3 || fl.State != "WAITING" {
		t.Fatalf("after three runs: %+v", fl)
	}
	if resp := c.HTTP(0, "DELETE", "/v1/flows/rf", nil); resp.Status != 200 {
		t.Fatalf("cancel: %d %s", resp.Status, resp.Body)
	}
	waitFlow(t, c, "rf", "CANCELLED")
	for run := 1; run <= 3; run++ {
		if j.count(id(run, "A")) != 1 || j.count(id(run, "B")) != 1 {
			t.Fatalf("run %d: A called %d, B %d times", run, j.count(id(run, "A")), j.count(id(run, "B")))
		}
	}
}

// A cron flow (every even second, in a time zone) behaves as an every
// flow: its first run is at the schedule's first slot after the submit,
// and each next run at the first slot after the previous run ended (the
// leader computes it, the FSM applies it): the slot that comes while run
// 1 is still going is skipped, runs never overlap. Three runs, then a
// cancel.
func TestFlowCron(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{})
	j := newJournal()
	id := func(run int, s string) string { return raftfsm.FlowStageID("cr", run, s) }
	hold := make(chan struct{})
	j.hold[id(1, "B")] = hold
	c.Respond(j.respond)
	first := c.Now().Truncate(2 * time.Second).Add(2 * time.Second).UTC()
	slot := func(k int) time.Time { return first.Add(time.Duration(k) * 2 * time.Second) }
	fl := submitFlowJSON(t, c, `{"id":"cr","cron":"*/2 * * * * *","timezone":"Europe/Berlin","stages":[{"name":"A","handler":"h"},{"name":"B","handler":"h","depends_on":["A"]}]}`)
	if !fl.RunDueAt.Equal(slot(0)) || fl.Cron != "*/2 * * * * *" || fl.Timezone != "Europe/Berlin" {
		t.Fatalf("submitted: %+v, want run 1 due at %v", fl, slot(0))
	}
	c.AdvanceTo(slot(0))
	c.WaitCalls(id(1, "B"), 1)
	c.AdvanceTo(slot(1).Add(500 * time.Millisecond)) // run 1 overruns slot 1
	if fl := getFlow(t, c, "cr"); fl.Run != 1 || fl.State != "RUNNING" {
		t.Fatalf("flow while run 1 overruns: %+v", fl)
	}
	close(hold)
	c.Eventually("run 2 armed", func() bool { fl = getFlow(t, c, "cr"); return fl.Run == 2 })
	if !fl.RunDueAt.Equal(slot(2)) || fl.SucceededRuns != 1 {
		t.Fatalf("run 2: %+v, want due at %v (slot 1 skipped)", fl, slot(2))
	}
	for run := 2; run <= 3; run++ {
		c.AdvanceTo(slot(run))
		b := c.WaitCalls(id(run, "B"), 1)
		a := c.WaitCalls(id(run, "A"), 1)
		if a[0].At.Before(slot(run)) || b[0].At.Before(a[0].At) {
			t.Fatalf("run %d: A at %v, B at %v, slot %v", run, a[0].At, b[0].At, slot(run))
		}
		if !j.endedBefore(id(run, "A"), id(run-1, "B")) {
			t.Fatalf("run %d started before run %d ended", run, run-1)
		}
		c.Eventually(fmt.Sprintf("run %d armed", run+1), func() bool { fl = getFlow(t, c, "cr"); return fl.Run == run+1 })
		if !fl.RunDueAt.Equal(slot(run + 1)) {
			t.Fatalf("run %d due at %v, want %v", run+1, fl.RunDueAt, slot(run+1))
		}
	}
	if fl.SucceededRuns != 3 || fl.State != "WAITING" {
		t.Fatalf("after three runs: %+v", fl)
	}
	if resp := c.HTTP(0, "DELETE", "/v1/flows/cr", nil); resp.Status != 200 {
		t.Fatalf("cancel: %d %s", resp.Status, resp.Body)
	}
	waitFlow(t, c, "cr", "CANCELLED")
	for run := 1; run <= 3; run++ {
		if j.count(id(run, "A")) != 1 || j.count(id(run, "B")) != 1 {
			t.Fatalf("run %d: A called %d, B %d times", run, j.count(id(run, "A")), j.count(id(run, "B")))
		}
	}
}

// DELETE /v1/flows/{id}?purge=true deletes a finished flow (200
// {"purged":1}, then 404); a flow still going on is 409 (cancel it first).
func TestFlowPurgeAPI(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{})
	j := newJournal()
	id := raftfsm.FlowStageID("pf", 1, "A")
	j.hold[id] = make(chan struct{})
	c.Respond(j.respond)
	submitFlowJSON(t, c, `{"id":"pf","stages":[{"name":"A","handler":"h"}]}`)
	c.WaitCalls(id, 1)
	if resp := c.HTTP(0, "DELETE", "/v1/flows/pf?purge=true", nil); resp.Status != 409 || !strings.Contains(string(resp.Body), `"code":"conflict"`) {
		t.Fatalf("purge of a running flow: %d %s", resp.Status, resp.Body)
	}
	if resp := c.HTTP(0, "DELETE", "/v1/flows/pf?purge=maybe", nil); resp.Status != 400 {
		t.Fatalf("purge=maybe: %d %s", resp.Status, resp.Body)
	}
	close(j.hold[id])
	waitFlow(t, c, "pf", "SUCCESS")
	if resp := c.HTTP(0, "DELETE", "/v1/flows/pf?purge=true", nil); resp.Status != 200 || strings.TrimSpace(string(resp.Body)) != `{"purged":1}` {
		t.Fatalf("purge: %d %s", resp.Status, resp.Body)
	}
	if resp := c.HTTP(0, "GET", "/v1/flows/pf", nil); resp.Status != 404 {
		t.Fatalf("get after the purge: %d %s", resp.Status, resp.Body)
	}
	if resp := c.HTTP(0, "DELETE", "/v1/flows/pf?purge=true", nil); resp.Status != 404 {
		t.Fatalf("second purge: %d %s", resp.Status, resp.Body)
	}
}

// A flow submit counts its root stages against their handlers' backlog
// bound: past it, 429 queue_full with Retry-After, and nothing is stored.
func TestFlowBacklogBound(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{NoExecutor: true, Config: func(_ int, cfg *sidecar.Config) {
		cfg.BacklogLimit = 3
	}})
	c.Submit(0, sidecartest.Spec("t1", "bp"))
	c.Submit(0, sidecartest.Spec("t2", "bp"))
	c.Eventually("the backlog of bp at 2", func() bool {
		h := handlersOf(t, c, 0)["bp"]
		return h.Backlog != nil && *h.Backlog == 2
	})
	two := `{"id":"big","stages":[{"name":"A","handler":"bp"},{"name":"B","handler":"bp"},{"name":"C","handler":"bp","depends_on":["A","B"]}]}`
	resp := c.HTTP(0, "POST", "/v1/flows", []byte(two))
	if resp.Status != 429 || !strings.Contains(string(resp.Body), `"code":"queue_full"`) || resp.RetryAfter() <= 0 {
		t.Fatalf("flow with two roots over the bound: %d %s %v", resp.Status, resp.Body, resp.Header)
	}
	if resp := c.HTTP(0, "GET", "/v1/flows/big", nil); resp.Status != 404 {
		t.Fatalf("refused flow: %d %s", resp.Status, resp.Body)
	}
	// One root fits; its dependent stage is not counted.
	submitFlowJSON(t, c, `{"id":"small","stages":[{"name":"A","handler":"bp"},{"name":"B","handler":"bp","depends_on":["A"]}]}`)
}

// A flow submitted with a trace context passes it to every stage task:
// each callback carries its trace id, flags and tracestate, the task views
// show it; a resubmit from another trace is the same flow (200).
func TestFlowTraceContext(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{})
	c.Respond(func(sidecartest.Call) sidecartest.Reply { return sidecartest.Reply{} })
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	body := `{"id":"tr","traceparent":"` + tp + `","tracestate":"rojo=1","stages":[{"name":"A","handler":"h"},{"name":"B","handler":"h","depends_on":["A"]}]}`
	submitFlowJSON(t, c, body)
	waitFlow(t, c, "tr", "SUCCESS")
	for _, s := range []string{"A", "B"} {
		id := raftfsm.FlowStageID("tr", 1, s)
		calls := c.WaitCalls(id, 1)
		if got := calls[0].TraceParent; len(got) != len(tp) || got[:36] != tp[:36] || got[52:] != tp[52:] || calls[0].TraceState != "rojo=1" {
			t.Errorf("stage %s: traceparent %q tracestate %q, want the trace id and flags of %q", s, got, calls[0].TraceState, tp)
		}
		tk, err := c.Task(0, id)
		if err != nil || tk.TraceParent != tp || tk.TraceState != "rojo=1" {
			t.Errorf("stage %s task view: %+v, %v", s, tk, err)
		}
	}
	other := strings.Replace(body, "4bf92f35", "5bf92f35", 1)
	if resp := c.HTTP(0, "POST", "/v1/flows", []byte(other)); resp.Status != 200 {
		t.Fatalf("resubmit from another trace: %d %s", resp.Status, resp.Body)
	}
}

// POST /v1/tasks/{stage}/retry is 409 conflict while the flow is stored (a
// retried stage would not move it), and DELETE /v1/tasks/{stage}?purge=true
// is 409 while its flow is still going on (its dependents read its result).
func TestFlowStageRetryAndPurgeRefused(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{})
	j := newJournal()
	id := func(s string) string { return raftfsm.FlowStageID("rp", 1, s) }
	j.answers[id("A")] = sidecartest.Reply{Status: 422}
	j.hold[id("C")] = make(chan struct{})
	c.Respond(j.respond)
	submitFlowJSON(t, c, `{"id":"rp","stages":[{"name":"A","handler":"h"},{"name":"B","handler":"h"},{"name":"C","handler":"h","depends_on":["B"]}]}`)
	c.WaitCalls(id("C"), 1)
	c.WaitState(0, id("A"), "FAILED")
	esc := func(s string) string { return strings.ReplaceAll(s, "/", "%2F") }
	if resp := c.HTTP(0, "POST", "/v1/tasks/"+esc(id("A"))+"/retry", nil); resp.Status != 409 || !strings.Contains(string(resp.Body), "is a stage of flow") {
		t.Fatalf("retry of a stage: %d %s", resp.Status, resp.Body)
	}
	if resp := c.HTTP(0, "DELETE", "/v1/tasks/"+esc(id("B"))+"?purge=true", nil); resp.Status != 409 || !strings.Contains(string(resp.Body), "has not ended") {
		t.Fatalf("purge of a stage of a running flow: %d %s", resp.Status, resp.Body)
	}
	close(j.hold[id("C")])
	waitFlow(t, c, "rp", "FAILED")
	if resp := c.HTTP(0, "DELETE", "/v1/tasks/"+esc(id("B"))+"?purge=true", nil); resp.Status != 200 {
		t.Fatalf("purge of a stage once the flow ended: %d %s", resp.Status, resp.Body)
	}
}
