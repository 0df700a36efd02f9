package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Knobs of the linearizability test (issue 4: "a client history (submits,
// cancels, strong reads) recorded during the kill test is checked for
// linearizability with porcupine, per task id"). The environment overrides
// some of them:
//
//	AX_LIN_DURATION    how long the clients run (Go duration, default 24s)
//	AX_LIN_KILLS       how many times the leader is SIGKILLed and restarted (default 2)
//	AX_LIN_SEED        seed of the clients' choices (default: the clock; printed)
//	AX_E2E_ARTIFACTS   directory for the porcupine visualization of a failed
//	                   check (default: a new directory under the system's
//	                   temporary directory, kept and logged)
const (
	linDurationDefault = 24 * time.Second
	// linClients run operations concurrently, each one at a time (closed
	// loop), each on a node picked at random for every operation.
	linClients = 8
	// Task ids: linKeys ids per linEpoch, so that concurrent operations
	// conflict on the same ids while each id's history (a porcupine
	// partition) stays short enough to check quickly even with the
	// open-ended operations of the kills.
	linKeys  = 5
	linEpoch = 4 * time.Second
	// linPayloads: payloads are {"v":1} … {"v":linPayloads}. Few values, so
	// that submits of an existing id often carry the same spec (200) and
	// often not (409).
	linPayloads = 3
	// linOpTimeout bounds one request; a write that times out has an
	// unknown outcome.
	linOpTimeout = 5 * time.Second
	// linErrPause is how long a client pauses after an error or a 503.
	linErrPause = 100 * time.Millisecond
	// linKillsDefault SIGKILLs of the leader are spread evenly over the
	// run; each victim is started again linRestartAfter later.
	linKillsDefault = 2
	linRestartAfter = 3 * time.Second
	// linCheckTimeout bounds porcupine's search (per history).
	linCheckTimeout = 15 * time.Second
	// linExplainOps bounds the operations logged around a violation.
	linExplainOps = 12
	// linDelay is the delay of every task: far enough that no task fires
	// during the test, so only the clients change a task's state.
	linDelay = "1h"
)

// linKind is the kind of one operation of the history.
type linKind uint8

const (
	linSubmit  linKind = iota // POST /v1/tasks {id, payload}
	linReplace                // POST /v1/tasks {id, payload, overwrite: true}
	linCancel                 // DELETE /v1/tasks/{id}
	linGet                    // GET /v1/tasks/{id}[?consistency=strong]
)

// linInput is an operation's input.
type linInput struct {
	Kind    linKind
	ID      string
	Payload int  // submit and replace
	Strong  bool // get
	// AtKill: the operation was in flight when the leader was SIGKILLed
	// (set after the run; it only labels the operation in reports).
	AtKill bool
}

// linOutput is an operation's output: the status and, for a task in the
// reply, its state and payload. Unknown: a write whose outcome is unknown
// (timeout, connection lost, 5xx); it may or may not have taken effect.
type linOutput struct {
	Unknown bool
	Status  int
	State   string // "" when the reply carries no task
	Payload int
}

// linState is the model's state of one task id.
type linState struct {
	Exists    bool
	Cancelled bool
	Payload   int
}

// linMeta is an operation's metadata (for the visualization only).
type linMeta struct {
	Node string
	Err  string
}

// linExpect returns what ax answers to in when the task is in state s, and
// the state after it (sidecar and raftfsm are the reference):
//
//   - submit: absent → 201, WAITING; exists with the same spec (payload)
//     → 200 and the task as it is (WAITING or CANCELLED), unchanged;
//     exists with another payload → 409, unchanged (applySubmit).
//   - replace (overwrite: true): → 201, a new WAITING task with this payload,
//     whatever was there (applySubmit).
//   - cancel: absent → 404; WAITING → 200, CANCELLED; CANCELLED (terminal) →
//     200 and the task unchanged (applyCancel).
//   - get: absent → 404; else 200 and the task.
func linExpect(s linState, in linInput) (linOutput, linState) {
	task := func(st linState) linOutput {
		state := "WAITING"
		if st.Cancelled {
			state = "CANCELLED"
		}
		return linOutput{Status: http.StatusOK, State: state, Payload: st.Payload}
	}
	switch in.Kind {
	case linSubmit:
		switch {
		case !s.Exists:
			next := linState{Exists: true, Payload: in.Payload}
			out := task(next)
			out.Status = http.StatusCreated
			return out, next
		case s.Payload == in.Payload:
			return task(s), s
		default:
			return linOutput{Status: http.StatusConflict}, s
		}
	case linReplace:
		next := linState{Exists: true, Payload: in.Payload}
		out := task(next)
		out.Status = http.StatusCreated
		return out, next
	case linCancel:
		if !s.Exists {
			return linOutput{Status: http.StatusNotFound}, s
		}
		next := s
		next.Cancelled = true
		return task(next), next
	default: // linGet
		if !s.Exists {
			return linOutput{Status: http.StatusNotFound}, s
		}
		return task(s), s
	}
}

func (s linState) String() string {
	switch {
	case !s.Exists:
		return "absent"
	case s.Cancelled:
		return fmt.Sprintf("CANCELLED v%d", s.Payload)
	default:
		return fmt.Sprintf("WAITING v%d", s.Payload)
	}
}

func (o linOutput) String() string {
	switch {
	case o.Unknown:
		return "?"
	case o.State != "":
		return fmt.Sprintf("%d %s v%d", o.Status, o.State, o.Payload)
	default:
		return strconv.Itoa(o.Status)
	}
}

func (in linInput) String() string {
	if in.AtKill {
		in.AtKill = false
		return in.String() + " (in flight at a kill)"
	}
	switch in.Kind {
	case linSubmit:
		return fmt.Sprintf("submit(%s, v%d)", in.ID, in.Payload)
	case linReplace:
		return fmt.Sprintf("replace(%s, v%d)", in.ID, in.Payload)
	case linCancel:
		return fmt.Sprintf("cancel(%s)", in.ID)
	default:
		if in.Strong {
			return fmt.Sprintf("get-strong(%s)", in.ID)
		}
		return fmt.Sprintf("get-local(%s)", in.ID)
	}
}

// linModel is the sequential specification of ax's task API, partitioned
// by task id: operations on different ids commute.
var linModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byID := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range history {
			id := op.Input.(linInput).ID
			if _, ok := byID[id]; !ok {
				order = append(order, id)
			}
			byID[id] = append(byID[id], op)
		}
		out := make([][]porcupine.Operation, 0, len(order))
		for _, id := range order {
			out = append(out, byID[id])
		}
		return out
	},
	Init: func() any { return linState{} },
	Step: func(state, input, output any) (bool, any) {
		want, next := linExpect(state.(linState), input.(linInput))
		out := output.(linOutput)
		if out.Unknown {
			// An open-ended write (its Return is "infinite"): linearized
			// anywhere after its call, or never (at the very end).
			return true, next
		}
		return out == want, next
	},
	Equal: func(a, b any) bool { return a.(linState) == b.(linState) },
	DescribeOperation: func(input, output any) string {
		return fmt.Sprintf("%s → %s", input.(linInput), output.(linOutput))
	},
	DescribeState: func(state any) string { return state.(linState).String() },
	DescribeOperationMetadata: func(info any) string {
		m, ok := info.(linMeta)
		if !ok {
			return ""
		}
		if m.Err != "" {
			return fmt.Sprintf("via %s: %s", m.Node, m.Err)
		}
		return "via " + m.Node
	},
}

// linCounts counts the operations of the run.
type linCounts struct {
	ok        map[string]int // definite outcome, by kind
	unknown   int            // writes with an unknown outcome (open-ended)
	dropped   int            // reads that failed (not in the history)
	notSent   int            // the node refused the connection (it was down)
	errByKind map[string]int // the failures, by kind
}

// linRecorder collects the operations of every client.
type linRecorder struct {
	base   time.Time
	mu     sync.Mutex
	strong []porcupine.Operation // writes and strong reads
	local  []porcupine.Operation // writes and local reads
	counts linCounts
}

func (r *linRecorder) now() int64 { return int64(time.Since(r.base)) }

func (r *linRecorder) add(op porcupine.Operation, what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	in := op.Input.(linInput)
	if op.Output.(linOutput).Unknown {
		r.counts.unknown++
	} else {
		r.counts.ok[what]++
	}
	switch {
	case in.Kind != linGet:
		r.strong = append(r.strong, op)
		r.local = append(r.local, op)
	case in.Strong:
		r.strong = append(r.strong, op)
	default:
		r.local = append(r.local, op)
	}
}

func (r *linRecorder) fail(kind string, dropped, notSent bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts.errByKind[kind]++
	if dropped {
		r.counts.dropped++
	}
	if notSent {
		r.counts.notSent++
	}
}

// linPayload is the JSON payload of value v.
func linPayload(v int) []byte { return fmt.Appendf(nil, `{"v":%d}`, v) }

// linDo runs one operation through n and records it. It returns false
// when the operation failed (the client then pauses).
func linDo(t *testing.T, rec *linRecorder, clientID *int, nextClient *atomic.Int64, n *Node, in linInput) bool {
	ctx, cancel := context.WithTimeout(context.Background(), linOpTimeout)
	defer cancel()
	var resp *Response
	var err error
	call := rec.now()
	switch in.Kind {
	case linSubmit, linReplace:
		body := SubmitRequest{ID: in.ID, Handler: handlerOK, Delay: linDelay,
			Payload: linPayload(in.Payload), Overwrite: in.Kind == linReplace}.Body()
		resp, err = n.Client.Submit(ctx, body)
	case linCancel:
		resp, err = n.Client.Cancel(ctx, in.ID)
	case linGet:
		path := TaskPath(in.ID)
		if in.Strong {
			path += "?consistency=strong"
		}
		resp, err = n.Client.Do(ctx, "GET", path, nil)
	}
	ret := rec.now()
	write := in.Kind != linGet
	unknown := func(kind, detail string) bool {
		if !write {
			rec.fail("read "+kind, true, false)
			return false
		}
		rec.fail("write "+kind, false, false)
		// Open-ended: it may take effect at any time after its call. The
		// client goes on as a new porcupine client, since this operation
		// never returns.
		rec.add(porcupine.Operation{ClientId: *clientID, Input: in, Call: call,
			Output: linOutput{Unknown: true}, Return: math.MaxInt64,
			Metadata: linMeta{Node: n.ID, Err: detail}}, "")
		*clientID = int(nextClient.Add(1)) - 1
		return false
	}
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			// Nothing was sent: the node is down.
			rec.fail("connection refused", false, true)
			return false
		}
		kind := "connection error"
		if errors.Is(err, context.DeadlineExceeded) {
			kind = "timeout"
		}
		return unknown(kind, err.Error())
	}
	out := linOutput{Status: resp.Status}
	switch resp.Status {
	case http.StatusOK, http.StatusCreated:
		task, derr := resp.Task()
		var p struct{ V int }
		if derr == nil {
			derr = json.Unmarshal(task.Payload, &p)
		}
		if derr != nil || task.ID != in.ID {
			t.Errorf("%s via %s: a reply that is not the task: %s (%v)", in, n.ID, resp, derr)
			return false
		}
		out.State, out.Payload = task.State, p.V
	case http.StatusNotFound, http.StatusConflict:
	case http.StatusServiceUnavailable, http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusGatewayTimeout:
		code := ""
		if e, derr := resp.APIError(); derr == nil {
			code = " " + e.Error.Code
		}
		return unknown(fmt.Sprintf("%d%s", resp.Status, code), resp.String())
	default:
		t.Errorf("%s via %s: unexpected reply %s", in, n.ID, resp)
		return false
	}
	what := [...]string{"submit", "replace", "cancel", "get"}[in.Kind]
	if in.Kind == linGet {
		what += map[bool]string{true: " strong", false: " local"}[in.Strong]
	}
	rec.add(porcupine.Operation{ClientId: *clientID, Input: in, Call: call, Output: out, Return: ret,
		Metadata: linMeta{Node: n.ID}}, what)
	return true
}

// linClient runs random operations until stop is closed.
func linClient(t *testing.T, c *Cluster, rec *linRecorder, id int, nextClient *atomic.Int64, rng *rand.Rand, stop <-chan struct{}) {
	clientID := id
	fresh := 0
	for {
		select {
		case <-stop:
			return
		default:
		}
		epoch := int(time.Since(rec.base) / linEpoch)
		in := linInput{ID: fmt.Sprintf("lin-%02d-%d", epoch, rng.IntN(linKeys))}
		switch w := rng.IntN(100); {
		case w < 5:
			// A task id nobody used: the submit must create it (201). A
			// submit the sidecar proposed again after a leader change
			// answered 200 here (see sidecar.ErrOutcomeUnknown).
			fresh++
			in.ID = fmt.Sprintf("lin-new-%d-%d", id, fresh)
			in.Kind, in.Payload = linSubmit, 1+rng.IntN(linPayloads)
		case w < 25:
			in.Kind, in.Payload = linSubmit, 1+rng.IntN(linPayloads)
		case w < 35:
			in.Kind, in.Payload = linReplace, 1+rng.IntN(linPayloads)
		case w < 55:
			in.Kind = linCancel
		case w < 85:
			in.Kind, in.Strong = linGet, true
		default:
			in.Kind = linGet
		}
		n := c.Nodes[rng.IntN(len(c.Nodes))]
		if !linDo(t, rec, &clientID, nextClient, n, in) {
			select {
			case <-stop:
				return
			case <-time.After(linErrPause):
			}
		}
	}
}

// linCheck checks one history. When it is not linearizable, it logs where
// (explain) and, when visualize is set or AX_E2E_ARTIFACTS is, writes
// porcupine's visualization and returns its path.
func linCheck(t *testing.T, name string, history []porcupine.Operation, annotations []porcupine.Annotation, visualize bool) (porcupine.CheckResult, string) {
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(linModel, history, linCheckTimeout)
	t.Logf("%s: %d operations, porcupine says %s in %s", name, len(history), res, time.Since(start).Round(time.Millisecond))
	if res != porcupine.Illegal {
		return res, ""
	}
	linExplain(t, name, history, info, map[bool]int{true: 3, false: 1}[visualize])
	dir := os.Getenv("AX_E2E_ARTIFACTS")
	if dir == "" && !visualize {
		return res, ""
	}
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "ax-lin-"); err != nil {
			t.Errorf("visualization: %v", err)
			return res, ""
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("visualization: %v", err)
		return res, ""
	}
	info.AddAnnotations(annotations)
	path := filepath.Join(dir, fmt.Sprintf("%s-%s.html", t.Name(), name))
	if err := porcupine.VisualizePath(linModel, info, path); err != nil {
		t.Errorf("visualization: %v", err)
		return res, ""
	}
	return res, path
}

// linExplain logs, for the first maxIDs task ids whose history is not
// linearizable, the state after porcupine's longest partial linearization
// and the operations around the first one that could not follow it.
func linExplain(t *testing.T, name string, history []porcupine.Operation, info porcupine.LinearizationInfo, maxIDs int) {
	parts := linModel.Partition(history)
	partials := info.PartialLinearizationsOperations()
	shown := 0
	ts := func(v int64) string {
		if v == math.MaxInt64 {
			return "∞"
		}
		return "+" + time.Duration(v).Round(time.Microsecond).String()
	}
	for p, ops := range parts {
		if p >= len(partials) {
			break
		}
		var best []porcupine.Operation
		for _, l := range partials[p] {
			if len(l) > len(best) {
				best = l
			}
		}
		if len(best) == len(ops) {
			continue
		}
		shown++
		if shown > maxIDs {
			t.Logf("%s: (more ids are not linearizable)", name)
			break
		}
		state := linState{}
		done := map[porcupine.Operation]bool{}
		for _, op := range best {
			_, state = linExpect(state, op.Input.(linInput))
			done[op] = true
		}
		var stuck *porcupine.Operation
		for i := range ops {
			if !done[ops[i]] && (stuck == nil || ops[i].Return < stuck.Return) {
				stuck = &ops[i]
			}
		}
		id := ops[0].Input.(linInput).ID
		t.Logf("%s: id %s, %d operations: at most %d linearize, leaving the task %s; the first that cannot follow is %s → %s [%s, %s]; operations around it:",
			name, id, len(ops), len(best), state, stuck.Input.(linInput), stuck.Output.(linOutput), ts(stuck.Call), ts(stuck.Return))
		// The last linearized operation, then the operations that overlap
		// the stuck one or ended shortly before it (at most linExplainOps,
		// the closest), by call time, and the writes of this id that were
		// in flight at a kill before it.
		var around []porcupine.Operation
		for _, op := range ops {
			if op.Return >= stuck.Call-int64(20*time.Millisecond) && op.Call <= stuck.Return {
				around = append(around, op)
			}
		}
		sort.Slice(around, func(i, j int) bool { return around[i].Call < around[j].Call })
		for len(around) > linExplainOps {
			if stuck.Call-around[0].Call > around[len(around)-1].Call-stuck.Call {
				around = around[1:]
			} else {
				around = around[:len(around)-1]
			}
		}
		// The usual suspects: writes of this id in flight at a kill
		// before the stuck operation returned.
		for _, op := range ops {
			in := op.Input.(linInput)
			if in.AtKill && in.Kind != linGet && op.Call <= stuck.Return && !slices.Contains(around, op) {
				around = append(around, op)
			}
		}
		sort.Slice(around, func(i, j int) bool { return around[i].Call < around[j].Call })
		if len(best) > 0 {
			around = append([]porcupine.Operation{best[len(best)-1]}, around...)
		}
		for i, op := range around {
			mark := " "
			switch {
			case i == 0 && len(best) > 0:
				mark = "last linearized:"
			case op == *stuck:
				mark = "stuck →"
			case done[op]:
				mark = "✓"
			}
			t.Logf("  %16s client %2d [%s, %s] %s → %s (%s)", mark, op.ClientId, ts(op.Call), ts(op.Return),
				op.Input.(linInput), op.Output.(linOutput), linModel.DescribeOperationMetadata(op.Metadata))
		}
	}
}

// TestLinearizability records a history of submits (with client-chosen
// ids, with and without overwrite), cancels and reads on a few task ids
// from concurrent clients on every node of a 3-node cluster while the
// leader is SIGKILLed and restarted twice, and checks it with porcupine
// against a model of the API, per task id (a few ids shared by every
// client, changing every linEpoch, and now and then a fresh id, whose submit
// must answer 201). Writes whose outcome is unknown
// (time-out, connection lost, 5xx) are open-ended operations; failed reads
// are left out. Strong reads (?consistency=strong) must be linearizable;
// whether the local reads (the default) happened to be is only reported.
func TestLinearizability(t *testing.T) {
	skipShort(t)
	duration := envDuration(t, "AX_LIN_DURATION", linDurationDefault)
	kills := envInt(t, "AX_LIN_KILLS", linKillsDefault)
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("AX_LIN_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("AX_LIN_SEED=%q: %v", v, err)
		}
		seed = s
	}
	t.Logf("linearizability: %d clients for %s, %d ids per %s, %d SIGKILLs of the leader, seed %d (AX_LIN_SEED to replay the choices)",
		linClients, duration, linKeys, linEpoch, kills, seed)

	c := NewCluster(t, WithSize(3))
	c.WaitReady()
	rec := &linRecorder{base: time.Now(), counts: linCounts{ok: map[string]int{}, errByKind: map[string]int{}}}
	var nextClient atomic.Int64
	nextClient.Store(linClients)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range linClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			linClient(t, c, rec, i, &nextClient, rand.New(rand.NewPCG(seed, uint64(i))), stop)
		}()
	}
	stopped := false
	stopClients := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer stopClients() // never leave the clients running on a t.Fatal

	var annotations []porcupine.Annotation
	var killWindows [][2]int64 // from SIGKILL to the victim's exit
	for k := range kills {
		time.Sleep(time.Until(rec.base.Add(duration * time.Duration(k+1) / time.Duration(kills+1))))
		leader := c.Leader()
		killed := rec.now()
		if err := leader.Kill(); err != nil {
			t.Errorf("kill %d: SIGKILL %s: %v", k+1, leader.ID, err)
		}
		killWindows = append(killWindows, [2]int64{killed, rec.now()})
		time.Sleep(linRestartAfter)
		if err := leader.Start(); err != nil {
			t.Fatalf("kill %d: restart %s: %v", k+1, leader.ID, err)
		}
		restarted := rec.now()
		t.Logf("kill %d at +%s: leader %s SIGKILLed, restarted %s later",
			k+1, time.Duration(killed).Round(time.Millisecond), leader.ID, time.Duration(restarted-killed).Round(time.Millisecond))
		annotations = append(annotations, porcupine.Annotation{Tag: "chaos", Start: killed, End: restarted,
			Description: "SIGKILL " + leader.ID, Details: "leader killed, restarted at the end of this span",
			BackgroundColor: "#f4cccc"})
	}
	time.Sleep(time.Until(rec.base.Add(duration)))
	stopClients()

	atKill := 0
	for _, h := range [][]porcupine.Operation{rec.strong, rec.local} {
		for i := range h {
			for _, w := range killWindows {
				if h[i].Call <= w[1] && h[i].Return >= w[0] {
					in := h[i].Input.(linInput)
					in.AtKill = true
					h[i].Input = in
				}
			}
		}
	}
	for _, op := range rec.strong {
		if op.Input.(linInput).AtKill {
			atKill++
		}
	}

	cnt := rec.counts
	t.Logf("operations with a definite outcome: %v; open-ended writes (unknown outcome): %d; failed reads (left out): %d; not sent (node down): %d",
		cnt.ok, cnt.unknown, cnt.dropped, cnt.notSent)
	t.Logf("failures by kind: %v; operations in flight at a kill: %d", cnt.errByKind, atKill)
	if cnt.ok["get strong"] == 0 || cnt.ok["submit"] == 0 || cnt.ok["cancel"] == 0 {
		t.Fatalf("too few operations to check: %v", cnt.ok)
	}

	res, path := linCheck(t, "strong", rec.strong, annotations, true)
	switch res {
	case porcupine.Illegal:
		t.Errorf("the history of writes and strong reads is NOT linearizable; visualization: %s", path)
	case porcupine.Unknown:
		t.Logf("WARNING: porcupine did not finish within %s: no violation found, none ruled out", linCheckTimeout)
	}
	lres, lpath := linCheck(t, "local", rec.local, annotations, false)
	switch lres {
	case porcupine.Illegal:
		where := ""
		if lpath != "" {
			where = "; visualization: " + lpath
		}
		t.Logf("local reads (the default) were not linearizable in this run, as allowed (reads are local)%s", where)
	default:
		t.Logf("local reads (the default) happened to be linearizable in this run (%s)", lres)
	}
}
