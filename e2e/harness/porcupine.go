package harness

import (
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

const (
	// LinCheckTimeout bounds porcupine's search (per history).
	LinCheckTimeout = 15 * time.Second
	// linExplainOps bounds the operations logged around a violation.
	linExplainOps = 12
)

// LinKind is the kind of one operation of the history.
type LinKind uint8

const (
	LinSubmit  LinKind = iota // POST /v1/tasks {id, payload}
	LinReplace                // POST /v1/tasks {id, payload, overwrite: true}
	LinCancel                 // DELETE /v1/tasks/{id}
	LinGet                    // GET /v1/tasks/{id}[?consistency=strong]
)

// LinInput is an operation's input.
type LinInput struct {
	Kind    LinKind
	ID      string
	Payload int  // submit and replace
	Strong  bool // get
	// AtKill: the operation was in flight when the leader was SIGKILLed
	// (set after the run; it only labels the operation in reports).
	AtKill bool
}

// LinOutput is an operation's output: the status and, for a task in the
// reply, its state and payload. Unknown: a write whose outcome is unknown
// (timeout, connection lost, 5xx); it may or may not have taken effect.
type LinOutput struct {
	Unknown bool
	Status  int
	State   string // "" when the reply carries no task
	Payload int
}

// LinState is the model's state of one task id.
type LinState struct {
	Exists    bool
	Cancelled bool
	Payload   int
}

// LinMeta is an operation's metadata (for the visualization only).
type LinMeta struct {
	Node string
	Err  string
}

// LinExpect returns what ax answers to in when the task is in state s, and
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
func LinExpect(s LinState, in LinInput) (LinOutput, LinState) {
	task := func(st LinState) LinOutput {
		state := "WAITING"
		if st.Cancelled {
			state = "CANCELLED"
		}
		return LinOutput{Status: http.StatusOK, State: state, Payload: st.Payload}
	}
	switch in.Kind {
	case LinSubmit:
		switch {
		case !s.Exists:
			next := LinState{Exists: true, Payload: in.Payload}
			out := task(next)
			out.Status = http.StatusCreated
			return out, next
		case s.Payload == in.Payload:
			return task(s), s
		default:
			return LinOutput{Status: http.StatusConflict}, s
		}
	case LinReplace:
		next := LinState{Exists: true, Payload: in.Payload}
		out := task(next)
		out.Status = http.StatusCreated
		return out, next
	case LinCancel:
		if !s.Exists {
			return LinOutput{Status: http.StatusNotFound}, s
		}
		next := s
		next.Cancelled = true
		return task(next), next
	default: // LinGet
		if !s.Exists {
			return LinOutput{Status: http.StatusNotFound}, s
		}
		return task(s), s
	}
}

// String describes the state: absent, WAITING vN or CANCELLED vN.
func (s LinState) String() string {
	switch {
	case !s.Exists:
		return "absent"
	case s.Cancelled:
		return fmt.Sprintf("CANCELLED v%d", s.Payload)
	default:
		return fmt.Sprintf("WAITING v%d", s.Payload)
	}
}

// String describes the output: the status, and the task when there is one.
func (o LinOutput) String() string {
	switch {
	case o.Unknown:
		return "?"
	case o.State != "":
		return fmt.Sprintf("%d %s v%d", o.Status, o.State, o.Payload)
	default:
		return strconv.Itoa(o.Status)
	}
}

// String describes the operation, e.g. submit(lin-00-1, v2).
func (in LinInput) String() string {
	if in.AtKill {
		in.AtKill = false
		return in.String() + " (in flight at a kill)"
	}
	switch in.Kind {
	case LinSubmit:
		return fmt.Sprintf("submit(%s, v%d)", in.ID, in.Payload)
	case LinReplace:
		return fmt.Sprintf("replace(%s, v%d)", in.ID, in.Payload)
	case LinCancel:
		return fmt.Sprintf("cancel(%s)", in.ID)
	default:
		if in.Strong {
			return fmt.Sprintf("get-strong(%s)", in.ID)
		}
		return fmt.Sprintf("get-local(%s)", in.ID)
	}
}

// LinModel is the sequential specification of ax's task API, partitioned
// by task id: operations on different ids commute.
var LinModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byID := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range history {
			id := op.Input.(LinInput).ID
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
	Init: func() any { return LinState{} },
	Step: func(state, input, output any) (bool, any) {
		want, next := LinExpect(state.(LinState), input.(LinInput))
		out := output.(LinOutput)
		if out.Unknown {
			// An open-ended write (its Return is "infinite"): linearized
			// anywhere after its call, or never (at the very end).
			return true, next
		}
		return out == want, next
	},
	Equal: func(a, b any) bool { return a.(LinState) == b.(LinState) },
	DescribeOperation: func(input, output any) string {
		return fmt.Sprintf("%s → %s", input.(LinInput), output.(LinOutput))
	},
	DescribeState: func(state any) string { return state.(LinState).String() },
	DescribeOperationMetadata: func(info any) string {
		m, ok := info.(LinMeta)
		if !ok {
			return ""
		}
		if m.Err != "" {
			return fmt.Sprintf("via %s: %s", m.Node, m.Err)
		}
		return "via " + m.Node
	},
}

// LinCheck checks one history. When it is not linearizable, it logs where
// (explain) and, when visualize is set or AX_E2E_ARTIFACTS is, writes
// porcupine's visualization and returns its path.
func LinCheck(t testing.TB, name string, history []porcupine.Operation, annotations []porcupine.Annotation, visualize bool) (porcupine.CheckResult, string) {
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(LinModel, history, LinCheckTimeout)
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
	if err := porcupine.VisualizePath(LinModel, info, path); err != nil {
		t.Errorf("visualization: %v", err)
		return res, ""
	}
	return res, path
}

// linExplain logs, for the first maxIDs task ids whose history is not
// linearizable, the state after porcupine's longest partial linearization
// and the operations around the first one that could not follow it.
func linExplain(t testing.TB, name string, history []porcupine.Operation, info porcupine.LinearizationInfo, maxIDs int) {
	parts := LinModel.Partition(history)
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
		state := LinState{}
		done := map[porcupine.Operation]bool{}
		for _, op := range best {
			_, state = LinExpect(state, op.Input.(LinInput))
			done[op] = true
		}
		var stuck *porcupine.Operation
		for i := range ops {
			if !done[ops[i]] && (stuck == nil || ops[i].Return < stuck.Return) {
				stuck = &ops[i]
			}
		}
		id := ops[0].Input.(LinInput).ID
		t.Logf("%s: id %s, %d operations: at most %d linearize, leaving the task %s; the first that cannot follow is %s → %s [%s, %s]; operations around it:",
			name, id, len(ops), len(best), state, stuck.Input.(LinInput), stuck.Output.(LinOutput), ts(stuck.Call), ts(stuck.Return))
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
			in := op.Input.(LinInput)
			if in.AtKill && in.Kind != LinGet && op.Call <= stuck.Return && !slices.Contains(around, op) {
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
				op.Input.(LinInput), op.Output.(LinOutput), LinModel.DescribeOperationMetadata(op.Metadata))
		}
	}
}
