package ax_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	ax "github.com/axsched/ax/clients/go"
)

func TestFlows(t *testing.T) {
	f := startFakeSidecar(t)
	var got []string
	var body map[string]any
	f.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.HasPrefix(r.URL.Path, "/v1/flows") {
			return false
		}
		got = append(got, r.Method+" "+r.URL.EscapedPath()+"?"+r.URL.RawQuery)
		w.Header().Set("Content-Type", "application/json")
		fl := ax.Flow{ID: "etl", State: "WAITING", Run: 1, Stages: []ax.StageView{{Name: "A", State: "WAITING", TaskID: "flow/etl/1/A"}}}
		switch {
		case r.Method == "POST":
			b, _ := io.ReadAll(r.Body)
			json.Unmarshal(b, &body)
			w.WriteHeader(201)
			json.NewEncoder(w).Encode(fl)
		case r.URL.Path == "/v1/flows":
			json.NewEncoder(w).Encode(ax.FlowPage{Flows: []ax.Flow{fl}, NextCursor: "etl"})
		case r.URL.Path == "/v1/flows/nope":
			w.WriteHeader(404)
			w.Write([]byte(`{"error":{"code":"not_found","message":"flow \"nope\" not found"}}`))
		case r.Method == "DELETE":
			fl.State = "CANCELLED"
			json.NewEncoder(w).Encode(fl)
		default:
			json.NewEncoder(w).Encode(fl)
		}
		return true
	})
	c := newClient(t, f)
	ctx := context.Background()
	fl, err := c.SubmitFlow(ctx, ax.FlowRequest{ID: "etl", Every: 2 * time.Second, Stages: []ax.StageRequest{
		{Name: "A", Handler: "pull", Payload: json.RawMessage(`{"day":1}`)},
		{Name: "B", Handler: "clean", DependsOn: []string{"A"}, ContinueOnFailure: true, Timeout: time.Minute},
	}})
	if err != nil || fl.Stages[0].TaskID != "flow/etl/1/A" {
		t.Fatalf("SubmitFlow = %+v, %v", fl, err)
	}
	stages := body["stages"].([]any)
	if body["every"] != "2s" || stages[1].(map[string]any)["on_failure"] != "continue" || stages[1].(map[string]any)["timeout"] != "1m0s" {
		t.Fatalf("request body %v", body)
	}
	if fl, err := c.Flow(ctx, "etl"); err != nil || fl.State != "WAITING" {
		t.Fatalf("Flow = %+v, %v", fl, err)
	}
	if _, err := c.Flow(ctx, "nope"); !errors.Is(err, ax.ErrNotFound) {
		t.Fatalf("Flow nope: %v", err)
	}
	if fl, err := c.CancelFlow(ctx, "etl"); err != nil || fl.State != "CANCELLED" {
		t.Fatalf("CancelFlow = %+v, %v", fl, err)
	}
	if page, err := c.Flows(ctx, 5, "a"); err != nil || len(page.Flows) != 1 || page.NextCursor != "etl" {
		t.Fatalf("Flows = %+v, %v", page, err)
	}
	if err := c.PurgeFlow(ctx, "etl"); err != nil {
		t.Fatalf("PurgeFlow: %v", err)
	}
	body = nil
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if _, err := c.SubmitFlow(ax.WithTraceContext(ctx, tp, "rojo=1"), ax.FlowRequest{ID: "etl", Cron: "0 3 * * *", Timezone: "Europe/Berlin", Stages: []ax.StageRequest{{Name: "A", Handler: "pull"}}}); err != nil ||
		body["cron"] != "0 3 * * *" || body["timezone"] != "Europe/Berlin" || body["every"] != nil ||
		body["traceparent"] != tp || body["tracestate"] != "rojo=1" {
		t.Fatalf("cron flow: body %v, %v", body, err)
	}
	if _, err := c.SubmitFlow(ctx, ax.FlowRequest{}); !errors.Is(err, ax.ErrInvalid) {
		t.Fatalf("SubmitFlow without id: %v", err)
	}
	want := "POST /v1/flows? GET /v1/flows/etl? GET /v1/flows/nope? DELETE /v1/flows/etl? GET /v1/flows?cursor=a&limit=5 DELETE /v1/flows/etl?purge=true POST /v1/flows?"
	if strings.Join(got, " ") != want {
		t.Fatalf("requests %v", got)
	}
}

// flowBody starts a fake sidecar whose POST /v1/flows keeps the raw body.
func flowBody(t *testing.T) (*ax.Client, *[]byte) {
	f := startFakeSidecar(t)
	raw := new([]byte)
	f.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/v1/flows" {
			return false
		}
		*raw, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		json.NewEncoder(w).Encode(ax.Flow{ID: "etl", State: "WAITING", Run: 1})
		return true
	})
	return newClient(t, f), raw
}

// A stage's payload reaches the sidecar byte for byte, as a task's does:
// json.Marshal compacted it and escaped <, > and &, so the executor got
// other bytes than the caller gave (README: "delivered byte for byte").
func TestSubmitFlowStagePayloadByteForByte(t *testing.T) {
	c, raw := flowBody(t)
	ctx := context.Background()
	const payload = `{ "html": "<b>a & b</b>",  "n": 1 }`
	if _, err := c.SubmitFlow(ctx, ax.FlowRequest{ID: "etl", Stages: []ax.StageRequest{
		{Name: "A", Handler: "pull", Payload: json.RawMessage(payload)}}}); err != nil {
		t.Fatalf("SubmitFlow: %v", err)
	}
	if !strings.Contains(string(*raw), `"payload":`+payload) {
		t.Fatalf("stage payload not sent byte for byte: %s", *raw)
	}
	if _, err := c.SubmitFlow(ctx, ax.FlowRequest{ID: "etl", Stages: []ax.StageRequest{
		{Name: "A", Handler: "h", Payload: json.RawMessage(`{`)}}}); !errors.Is(err, ax.ErrInvalid) {
		t.Fatalf("invalid stage payload: %v", err)
	}
}

// A stage takes the task fields the API accepts on a stage: shards,
// backoff, retention and a binary payload (a Go caller could not submit
// a sharded stage at all).
func TestSubmitFlowStageFields(t *testing.T) {
	c, raw := flowBody(t)
	_, err := c.SubmitFlow(context.Background(), ax.FlowRequest{ID: "etl", Stages: []ax.StageRequest{
		{Name: "A", Handler: "pull", Shards: &ax.Shards{Count: 8},
			Backoff: &ax.Backoff{Initial: time.Second, Max: 4 * time.Second}, Retention: time.Hour},
		{Name: "B", Handler: "bin", DependsOn: []string{"A"}, PayloadBytes: []byte{0, 1, 2}, Shards: &ax.Shards{Ask: true, Max: 16}},
	}})
	if err != nil {
		t.Fatalf("SubmitFlow: %v", err)
	}
	var body struct {
		Stages []map[string]json.RawMessage `json:"stages"`
	}
	if err := json.Unmarshal(*raw, &body); err != nil || len(body.Stages) != 2 {
		t.Fatalf("body %s: %v", *raw, err)
	}
	a, b := body.Stages[0], body.Stages[1]
	for k, want := range map[string]string{"shards": `{"count":8}`, "backoff": `{"initial":"1s","max":"4s"}`, "retention": `"1h0m0s"`, "name": `"A"`} {
		if string(a[k]) != want {
			t.Errorf("stage A %s = %s, want %s", k, a[k], want)
		}
	}
	for k, want := range map[string]string{"shards": `{"ask":true,"max":16}`, "payload_base64": `"AAEC"`, "depends_on": `["A"]`} {
		if string(b[k]) != want {
			t.Errorf("stage B %s = %s, want %s", k, b[k], want)
		}
	}
}
