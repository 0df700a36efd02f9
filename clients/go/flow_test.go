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
