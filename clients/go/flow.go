package ax

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
)

// FlowRequest is a flow for SubmitFlow: stages with dependencies (README,
// "Flows"). ID is required and is the idempotency key: the same request
// again returns the stored flow, another spec fails with ErrConflict.
type FlowRequest struct {
	ID     string
	Stages []StageRequest
	// Delay or RunAt set when the (first) flow run is due; zero: now.
	Delay time.Duration
	RunAt time.Time
	// Every makes the flow recurring: one flow run per slot, never two
	// at once (slots that pass while a run is unfinished are skipped).
	Every time.Duration
	// Cron makes the flow recurring on a cron schedule (the task syntax),
	// evaluated in Timezone (an IANA name; empty: UTC), with the same
	// rule as Every: the next run at the first slot after the previous
	// one ended. At most one of Every and Cron.
	Cron     string
	Timezone string
	// TraceParent and TraceState are the W3C trace context every stage
	// task of the flow carries; empty TraceParent: SubmitFlow takes that
	// of its ctx (TraceContextFromContext), if any. Not part of the spec.
	TraceParent, TraceState string
}

// StageRequest is one stage of a FlowRequest. Zero fields take the task
// defaults (priority 2, timeout 30s, 4 attempts, BackoffDefault, the
// sidecar's retention). The task fields mean what they mean in a
// SubmitRequest; a stage has no id, timing or overwrite of its own (the
// flow's timing applies).
type StageRequest struct {
	Name    string
	Handler string
	// Payload is the stage's JSON payload (nil: none), sent byte for
	// byte. A stage with DependsOn receives an envelope instead:
	// {"payload": Payload, "upstream": {"<stage>": {"state", "result"}}}
	// (FlowEnvelope).
	Payload json.RawMessage
	// PayloadBytes is a binary payload (payload_base64); at most one of
	// Payload and PayloadBytes.
	PayloadBytes []byte
	DependsOn    []string
	// ContinueOnFailure is on_failure "continue": the stage runs once its
	// dependencies ended, even if one failed. Otherwise it is CANCELLED
	// when one does not succeed.
	ContinueOnFailure bool
	Priority          *int
	Timeout           time.Duration
	MaxAttempts       int
	Backoff           *Backoff
	RouteKey          string
	Labels            map[string]string
	Retention         time.Duration
	// Shards runs the stage's task as shards (README "Shards"); nil: not
	// sharded.
	Shards *Shards
}

// stageWire is the part of a stage that is not a task field (those are
// encodeSubmit's).
type stageWire struct {
	Name      string   `json:"name"`
	DependsOn []string `json:"depends_on,omitempty"`
	OnFailure string   `json:"on_failure,omitempty"`
}

type flowWire struct {
	ID          string `json:"id"`
	Delay       string `json:"delay,omitempty"`
	RunAt       string `json:"run_at,omitempty"`
	Every       string `json:"every,omitempty"`
	Cron        string `json:"cron,omitempty"`
	Timezone    string `json:"timezone,omitempty"`
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
}

// SubmitFlow stores a flow and returns it. A request the sidecar refuses
// (a dependency cycle, an unknown dependency, duplicate names, more than
// 1000 stages, a bad stage field) gives an error matching ErrInvalid whose
// message names the problem; the same ID with another spec, ErrConflict.
// The flow views and the stage envelope are axapi's, the one definition
// of the wire.
type (
	// Flow is a flow as the sidecar shows it (GET /v1/flows/{id}).
	Flow = axapi.Flow
	// StageView is one stage of a flow's current run.
	StageView = axapi.StageView
	// FlowPage is one page of Flows.
	FlowPage = axapi.FlowPage
	// FlowEnvelope is the callback body of a stage with dependencies.
	FlowEnvelope = axapi.FlowEnvelope
	// UpstreamStage is one upstream stage in a FlowEnvelope.
	UpstreamStage = axapi.UpstreamStage
)

func (c *Client) SubmitFlow(ctx context.Context, req FlowRequest) (*Flow, error) {
	if req.ID == "" {
		return nil, fmt.Errorf("%w: flow id: required", ErrInvalid)
	}
	w := flowWire{ID: req.ID}
	if req.Delay > 0 {
		w.Delay = req.Delay.String()
	}
	if !req.RunAt.IsZero() {
		w.RunAt = req.RunAt.UTC().Format(time.RFC3339Nano)
	}
	if req.Every > 0 {
		w.Every = req.Every.String()
	}
	w.Cron, w.Timezone = req.Cron, req.Timezone
	w.TraceParent, w.TraceState = req.TraceParent, req.TraceState
	if w.TraceParent == "" {
		w.TraceParent, w.TraceState = TraceContextFromContext(ctx)
	}
	head, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("%w: encode flow: %v", ErrInvalid, err)
	}
	// The stages are spliced in as encoded: json.Marshal would compact
	// their payloads and escape <, > and &, and the executor would get
	// other bytes than the caller gave.
	body := append(head[:len(head)-1:len(head)-1], `,"stages":[`...)
	for i, s := range req.Stages {
		st, err := encodeStage(s)
		if err != nil {
			return nil, fmt.Errorf("stage %q: %w", s.Name, err)
		}
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, st...)
	}
	body = append(body, "]}"...)
	var fl Flow
	if err := c.do(ctx, http.MethodPost, "/v1/flows", body, &fl); err != nil {
		return nil, err
	}
	return &fl, nil
}

// encodeStage encodes one stage: its task fields as a submit's
// (encodeSubmit, the payload byte for byte), then its name, dependencies
// and on_failure.
func encodeStage(s StageRequest) ([]byte, error) {
	req := SubmitRequest{Handler: s.Handler, PayloadBytes: s.PayloadBytes, Priority: s.Priority, Timeout: s.Timeout,
		MaxAttempts: s.MaxAttempts, Backoff: s.Backoff, RouteKey: s.RouteKey, Labels: s.Labels,
		Retention: s.Retention, Shards: s.Shards}
	if s.Payload != nil {
		req.Payload = s.Payload
	}
	task, err := encodeSubmit(req)
	if err != nil {
		return nil, err
	}
	sw := stageWire{Name: s.Name, DependsOn: s.DependsOn}
	if s.ContinueOnFailure {
		sw.OnFailure = "continue"
	}
	head, err := json.Marshal(sw)
	if err != nil {
		return nil, fmt.Errorf("%w: encode stage: %v", ErrInvalid, err)
	}
	// head is {"name":...}; task is {"handler":...}: one object.
	out := append(head[:len(head)-1:len(head)-1], ',')
	return append(out, task[1:]...), nil
}

// Flow returns the flow with the given id and its stages' states. An
// unknown id gives an error matching ErrNotFound.
func (c *Client) Flow(ctx context.Context, id string) (*Flow, error) {
	return c.flowCall(ctx, http.MethodGet, id)
}

// CancelFlow cancels a flow (its pending, waiting and running stages) and
// returns it. A finished flow is returned unchanged.
func (c *Client) CancelFlow(ctx context.Context, id string) (*Flow, error) {
	return c.flowCall(ctx, http.MethodDelete, id)
}

// PurgeFlow deletes a finished flow (SUCCESS, FAILED, CANCELLED) now
// instead of waiting for its retention; its stage tasks are left to the
// task retention. A flow that has not ended gives an error matching
// ErrConflict (cancel it first); an unknown id, ErrNotFound.
func (c *Client) PurgeFlow(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty flow id", ErrInvalid)
	}
	var out PurgeResult
	return c.do(ctx, http.MethodDelete, "/v1/flows/"+url.PathEscape(id)+"?purge=true", nil, &out)
}

func (c *Client) flowCall(ctx context.Context, method, id string) (*Flow, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: empty flow id", ErrInvalid)
	}
	var fl Flow
	if err := c.do(ctx, method, "/v1/flows/"+url.PathEscape(id), nil, &fl); err != nil {
		return nil, err
	}
	return &fl, nil
}

// Flows returns a page of flows in id order after cursor ("" for the
// first), at most limit (0: the sidecar's default, 100).
func (c *Client) Flows(ctx context.Context, limit int, cursor string) (*FlowPage, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	path := "/v1/flows"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var page FlowPage
	if err := c.do(ctx, http.MethodGet, path, nil, &page); err != nil {
		return nil, err
	}
	return &page, nil
}
