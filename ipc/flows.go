package ipc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/axsched/ax/clients/go/axapi"
	"github.com/axsched/ax/internal/dag"
)

// FlowStagePrefix starts the task id of every flow stage
// ("flow/<flow id>/<run>/<stage>"): task submits may not use it.
const FlowStagePrefix = "flow/"

// FlowStagesMax bounds the stages of one flow.
const FlowStagesMax = 1000

// FlowBackend is the flows part of a backend, found by type assertion: a
// Backend without it answers the flow routes 404.
type FlowBackend interface {
	// SubmitFlow stores a new flow (created true), or returns the
	// existing one with an equal spec; a different spec is ErrConflict.
	SubmitFlow(ctx context.Context, spec FlowSpec) (flow Flow, created bool, err error)
	// Flow returns flow id with its stages' states, or ErrNotFound.
	Flow(ctx context.Context, id string) (Flow, error)
	// Flows returns a page of flows in id order after after.
	Flows(ctx context.Context, after string, limit int) (FlowPage, error)
	// CancelFlow cancels flow id: its pending, waiting and running stages
	// are CANCELLED. A finished flow is returned as it is.
	CancelFlow(ctx context.Context, id string) (Flow, error)
	// PurgeFlow deletes finished flow id (SUCCESS, FAILED, CANCELLED)
	// now, as the retention would: 1 when deleted; ErrNotFound, or
	// ErrConflict for a flow that has not ended (cancel it first). Its
	// stage tasks are left to the task retention.
	PurgeFlow(ctx context.Context, id string) (int, error)
}

// FlowSpec is a validated POST /v1/flows.
type FlowSpec struct {
	ID     string
	Stages []StageSpec
	Delay  time.Duration
	RunAt  time.Time
	Every  time.Duration
	// Cron (in Timezone, an IANA name; "" = UTC) makes the flow recurring
	// on a cron schedule, as a task's (at most one of Every and Cron).
	Cron     string
	Timezone string
	// TraceParent and TraceState are the W3C trace context of the submit
	// (the fields, else the request's headers; see TaskSpec): every stage
	// task of the flow carries it.
	TraceParent string
	TraceState  string
}

// StageSpec is one validated stage: Task holds its task fields (its ID
// is unused).
type StageSpec struct {
	Name      string
	Task      TaskSpec
	DependsOn []string
	// Continue is on_failure "continue".
	Continue bool
}

type flowRequest struct {
	ID       wireString        `json:"id"`
	Stages   []json.RawMessage `json:"stages"`
	Delay    *string           `json:"delay"`
	RunAt    *string           `json:"run_at"`
	Every    *string           `json:"every"`
	Cron     *string           `json:"cron"`
	Timezone *string           `json:"timezone"`
	// The trace context, validated as a task submit's (trace.go).
	TraceParent string `json:"traceparent"`
	TraceState  string `json:"tracestate"`
}

type stageRequest struct {
	submitRequest
	Name wireString `json:"name"`
	// Pointers, so that a null among the names is refused rather than
	// read as the name "".
	DependsOn []*string `json:"depends_on"`
	OnFailure *string   `json:"on_failure"`
}

// The flow views are axapi's (the one definition of the wire).
type (
	// Flow is the view of a flow (GET /v1/flows/{id}).
	Flow = axapi.Flow
	// StageView is one stage of the current flow run.
	StageView = axapi.StageView
	// FlowPage is one page of GET /v1/flows.
	FlowPage = axapi.FlowPage
)

// DecodeFlow decodes and validates a POST /v1/flows body. Errors are
// ErrInvalidJSON (not JSON, or not valid UTF-8: checkUTF8) or ErrInvalid
// (bad_request) naming the problem: a missing id, no stages, more than
// FlowStagesMax, a stage that is not a JSON object (null included), a
// duplicate or invalid stage name, an unknown dependency,
// a dependency cycle (naming its stages), a bad task field of a stage (the
// task rules, prefixed with the stage).
func DecodeFlow(body []byte) (spec FlowSpec, err error) {
	defer checkUTF8(body, &spec, &err, hintPayload)
	var req flowRequest
	if err := decodeStrict(body, &req); err != nil {
		return FlowSpec{}, err
	}
	var fs FlowSpec
	if req.ID.bad {
		return FlowSpec{}, Errorf(ErrInvalid, "id: not valid UTF-8")
	}
	if req.ID.s == "" {
		return FlowSpec{}, Errorf(ErrInvalid, "id: required")
	}
	if err := ValidateID(req.ID.s); err != nil {
		return FlowSpec{}, err
	}
	if err := checkIDEnds("id", req.ID.s); err != nil {
		return FlowSpec{}, err
	}
	if len(req.ID.s) > FlowIDMaxBytes {
		return FlowSpec{}, Errorf(ErrInvalid, "id: %d bytes, the limit for a flow is %d (its stages' task ids, flow/<id>/<run>/<stage>, must fit in %d)",
			len(req.ID.s), FlowIDMaxBytes, axapi.IDMaxBytes)
	}
	fs.ID = req.ID.s
	switch n := len(req.Stages); {
	case n == 0:
		return FlowSpec{}, Errorf(ErrInvalid, "stages: at least one stage required")
	case n > FlowStagesMax:
		return FlowSpec{}, Errorf(ErrInvalid, "stages: %d stages, at most %d", n, FlowStagesMax)
	}
	if req.Delay != nil && req.RunAt != nil {
		return FlowSpec{}, Errorf(ErrInvalid, "delay and run_at: give at most one")
	}
	// The flow's timing fields go through the task rules.
	var timing submitRequest
	timing.Delay, timing.RunAt, timing.Every = req.Delay, req.RunAt, req.Every
	timing.Cron, timing.Timezone = req.Cron, req.Timezone
	timing.TraceParent, timing.TraceState = req.TraceParent, req.TraceState
	timing.Handler.s = "flow"
	ts, err := timing.spec()
	if err != nil {
		return FlowSpec{}, err
	}
	if ts.Every%time.Millisecond != 0 {
		// The state machine steps a flow's slots by whole milliseconds
		// (raftfsm's endFlowRun): 1.5005s ran every 1.5 s, a run early
		// by half a millisecond more each time. Changing that step would
		// make nodes of two versions apply the same entry differently.
		return FlowSpec{}, Errorf(ErrInvalid, "every: a flow's interval must be a whole number of milliseconds, got %q", *req.Every)
	}
	fs.Delay, fs.RunAt, fs.Every, fs.Cron, fs.Timezone = ts.Delay, ts.RunAt, ts.Every, ts.Cron, ts.Timezone
	fs.TraceParent, fs.TraceState = ts.TraceParent, ts.TraceState
	for i, raw := range req.Stages {
		st, err := decodeStage(i, raw)
		if err != nil {
			return FlowSpec{}, err
		}
		if n := len(FlowStagePrefix) + len(fs.ID) + 1 + 20 + 1 + len(st.Name); st.Task.Shards != nil && n > ShardParentIDMaxBytes {
			return FlowSpec{}, Errorf(ErrInvalidShards, "stage %q: its task id may take %d bytes, the limit for a task with shards is %d: shorten the flow id or the stage name", st.Name, n, ShardParentIDMaxBytes)
		}
		fs.Stages = append(fs.Stages, st)
	}
	if err := checkFlowGraph(fs.Stages); err != nil {
		return FlowSpec{}, err
	}
	return fs, nil
}

func decodeStage(i int, raw json.RawMessage) (StageSpec, error) {
	if !bytes.HasPrefix(raw, []byte("{")) { // RawMessage holds the value without leading space
		// As a batch's item: null decoded into an empty stage ("name
		// required"), another value was invalid_json.
		return StageSpec{}, Errorf(ErrInvalid, "stages[%d]: must be a JSON object (a stage), got %s", i, jsonKind(raw))
	}
	var r stageRequest
	// The flow's body had its keys checked whole (decodeStrict).
	if err := decodeKeysChecked(raw, &r); err != nil {
		var e *Error
		if errors.As(err, &e) {
			return StageSpec{}, Errorf(e, "stages[%d]: %s", i, e.Message)
		}
		return StageSpec{}, Errorf(ErrInvalid, "stages[%d]: %v", i, err)
	}
	where := "stages[" + strconv.Itoa(i) + "]"
	if r.Name.bad || r.Name.s == "" {
		return StageSpec{}, Errorf(ErrInvalid, "%s: name required", where)
	}
	name := r.Name.s
	if err := checkStageName(name); err != nil {
		return StageSpec{}, Errorf(ErrInvalid, "%s: name %q: %v", where, name, err)
	}
	where = fmt.Sprintf("stage %q", name)
	for field, set := range map[string]bool{
		"id": r.ID.s != "", "delay": r.Delay != nil, "run_at": r.RunAt != nil, "cron": r.Cron != nil,
		"timezone": r.Timezone != nil, "every": r.Every != nil, "repeats": r.Repeats != nil, "until": r.Until != nil,
		"overwrite": r.Overwrite, "traceparent": r.TraceParent != "", "tracestate": r.TraceState != "",
	} {
		if set {
			return StageSpec{}, Errorf(ErrInvalid, "%s: %s: not allowed on a stage (set timing on the flow)", where, field)
		}
	}
	r.ID.s = "stage" // not used: keeps spec() from making an id
	ts, err := r.spec()
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return StageSpec{}, Errorf(e, "%s: %s", where, e.Message)
		}
		return StageSpec{}, err
	}
	ts.ID = ""
	st := StageSpec{Name: name, Task: ts}
	for i, d := range r.DependsOn {
		if d == nil {
			return StageSpec{}, Errorf(ErrInvalid, "%s: depends_on[%d]: must be a stage name, got null", where, i)
		}
		st.DependsOn = append(st.DependsOn, *d)
	}
	if r.OnFailure != nil {
		switch *r.OnFailure {
		case "cancel":
		case "continue":
			st.Continue = true
		default:
			return StageSpec{}, Errorf(ErrInvalid, "%s: on_failure: want cancel (the default) or continue, got %q", where, *r.OnFailure)
		}
	}
	return st, nil
}

// StageNameMaxBytes bounds a stage's name.
const StageNameMaxBytes = 128

// FlowIDMaxBytes bounds a flow's id so that its stages' task ids
// ("flow/<id>/<run>/<stage>", with a run number of up to 20 digits and a
// stage name of up to StageNameMaxBytes) stay within axapi.IDMaxBytes: a
// longer one gave stage tasks that no route could name (found by review).
const FlowIDMaxBytes = axapi.IDMaxBytes - len(FlowStagePrefix) - 1 - 20 - 1 - StageNameMaxBytes

// checkStageName: 1 to StageNameMaxBytes bytes of letters, digits, '-',
// '_', '.'.
func checkStageName(name string) error {
	if len(name) > StageNameMaxBytes {
		return fmt.Errorf("at most %d bytes", StageNameMaxBytes)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return errors.New("only letters, digits, '-', '_' and '.'")
		}
	}
	return nil
}

// checkFlowGraph refuses duplicate names, unknown dependencies and
// cycles (naming the stages in the cycle).
func checkFlowGraph(stages []StageSpec) error {
	idx := make(map[string]int, len(stages))
	for _, s := range stages {
		if _, dup := idx[s.Name]; dup {
			return Errorf(ErrInvalid, "stages: duplicate stage name %q", s.Name)
		}
		idx[s.Name] = len(idx)
	}
	for _, s := range stages {
		seen := map[string]bool{}
		for _, d := range s.DependsOn {
			if _, ok := idx[d]; !ok {
				return Errorf(ErrInvalid, "stage %q: depends_on: unknown stage %q", s.Name, d)
			}
			if seen[d] {
				return Errorf(ErrInvalid, "stage %q: depends_on: %q twice", s.Name, d)
			}
			seen[d] = true
		}
	}
	deps := make([][]int, len(stages))
	for i, s := range stages {
		for _, d := range s.DependsOn {
			deps[i] = append(deps[i], idx[d])
		}
	}
	if _, cycle := dag.Order(deps); cycle != nil {
		names := make([]string, len(cycle))
		for k, i := range cycle {
			names[k] = stages[i].Name
		}
		return Errorf(ErrInvalid, "stages: dependency cycle: %s -> %s", strings.Join(names, " -> "), names[0])
	}
	return nil
}

func (s *Server) flowBackend() (FlowBackend, error) {
	fb, ok := s.backend.(FlowBackend)
	if !ok {
		return nil, Errorf(ErrNotFound, "flows are not served by this backend")
	}
	return fb, nil
}

// submitFlow answers POST /v1/flows: 201 with the flow when created, 200
// when the same spec was stored before. The trace context of the
// request's headers applies when the body has none.
func (s *Server) submitFlow(rctx context.Context, ctx *fasthttp.RequestCtx, _ string) error {
	spec, err := DecodeFlow(ctx.PostBody())
	if err != nil {
		return err
	}
	tc, err := requestTrace(ctx)
	if err != nil {
		return err
	}
	if spec.TraceParent == "" {
		spec.TraceParent, spec.TraceState = tc.Parent, tc.State
	}
	fb, err := s.flowBackend()
	if err != nil {
		return err
	}
	fl, created, err := fb.SubmitFlow(rctx, spec)
	if err != nil {
		return err
	}
	status := fasthttp.StatusOK
	if created {
		status = fasthttp.StatusCreated
		ctx.Response.Header.Set("Location", "/v1/flows/"+url.PathEscape(fl.ID))
	}
	s.writeJSON(ctx, status, fl)
	return nil
}

// getFlow answers GET /v1/flows/{id}, which takes no query parameters.
func (s *Server) getFlow(rctx context.Context, ctx *fasthttp.RequestCtx, rawID string) error {
	if err := noQuery(ctx, "GET /v1/flows/{id}", ""); err != nil {
		return err
	}
	return s.flowByID(rctx, ctx, rawID, FlowBackend.Flow)
}

// cancelFlow answers DELETE /v1/flows/{id}; with ?purge=true it deletes
// a finished flow instead: 200 {"purged": 1}.
func (s *Server) cancelFlow(rctx context.Context, ctx *fasthttp.RequestCtx, rawID string) error {
	purge, err := purgeParam(ctx)
	if err != nil {
		return err
	}
	if !purge {
		return s.flowByID(rctx, ctx, rawID, FlowBackend.CancelFlow)
	}
	fb, err := s.flowBackend()
	if err != nil {
		return err
	}
	id, err := pathID(rawID)
	if err != nil {
		return err
	}
	n, err := fb.PurgeFlow(rctx, id)
	if err != nil {
		return err
	}
	s.writeJSON(ctx, fasthttp.StatusOK, struct {
		Purged int `json:"purged"`
	}{n})
	return nil
}

// flowByID answers a route of one flow: op on the flow the path names.
func (s *Server) flowByID(rctx context.Context, ctx *fasthttp.RequestCtx, rawID string, op func(FlowBackend, context.Context, string) (Flow, error)) error {
	fb, err := s.flowBackend()
	if err != nil {
		return err
	}
	id, err := pathID(rawID)
	if err != nil {
		return err
	}
	fl, err := op(fb, rctx, id)
	if err != nil {
		return err
	}
	s.writeJSON(ctx, fasthttp.StatusOK, fl)
	return nil
}

// listFlows answers GET /v1/flows?limit=&cursor=.
func (s *Server) listFlows(rctx context.Context, ctx *fasthttp.RequestCtx, _ string) error {
	fb, err := s.flowBackend()
	if err != nil {
		return err
	}
	args, err := queryArgs(ctx)
	if err != nil {
		return err
	}
	after, limit, err := parseFlowsQuery(args)
	if err != nil {
		return err
	}
	page, err := fb.Flows(rctx, after, limit)
	if err != nil {
		return err
	}
	if page.Flows == nil {
		page.Flows = []Flow{}
	}
	s.writeJSON(ctx, fasthttp.StatusOK, page)
	return nil
}

// parseFlowsQuery checks the query of GET /v1/flows, as GET /v1/tasks's:
// limit (1..ListLimitMax, default ListLimitDefault) and cursor (the
// next_cursor of the previous page: a flow id, so at most FlowIDMaxBytes
// of UTF-8 without control characters), each at most once; an empty value
// counts as absent; any other parameter is refused (ErrInvalid).
func parseFlowsQuery(args iter.Seq2[[]byte, []byte]) (after string, limit int, err error) {
	limit, err = parsePageQuery(args, ListLimitDefault, ListLimitMax, func(val string) error {
		if err := checkName("cursor", val, FlowIDMaxBytes); err != nil {
			var e *Error
			errors.As(err, &e)
			return Errorf(ErrInvalid, "%s (not a cursor of this API: use next_cursor of the previous page)", e.Message)
		}
		after = val
		return nil
	})
	if err != nil {
		return "", 0, err
	}
	return after, limit, nil
}
