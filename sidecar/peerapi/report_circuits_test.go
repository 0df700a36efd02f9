package peerapi

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"testing"
)

// oldLoadReport is LoadReport as nodes of the version before Circuits
// declare it: what an older leader decodes a report into, and what an
// older node encodes.
type oldLoadReport struct {
	ID                 string         `json:"id"`
	InFlight           int            `json:"in_flight"`
	Applied            uint64         `json:"applied"`
	State              string         `json:"state,omitempty"`
	Queued             map[string]int `json:"queued,omitempty"`
	Executors          []ExecutorLoad `json:"executors,omitempty"`
	Draining           bool           `json:"draining,omitempty"`
	StorageUnavailable bool           `json:"storage_unavailable,omitempty"`
}

// A node's open circuits reach the leader; a report from a node of an
// older version (no circuits field) decodes as none open; an older
// leader decodes a new report's other fields as before, without error,
// and a report with no circuit open is byte for byte what an older node
// sends.
func TestLoadReportCircuitsMixedVersions(t *testing.T) {
	f := &fakeNode{}
	addr := serve(t, ServerConfig{Node: f})
	c := NewClient("", nil)
	ctx := context.Background()
	execs := []ExecutorLoad{{Name: "x", Handlers: []string{"h"}, Limit: 4, InFlight: 4}}
	circuits := []Circuit{{Handler: "h", UntilMs: 1_700_000_030_000}}
	report := LoadReport{ID: "n2", InFlight: 4, Applied: 7, Executors: execs, Circuits: circuits}
	if _, err := c.Report(ctx, addr, report); err != nil {
		t.Fatal(err)
	}
	if len(f.reported) != 1 || !reflect.DeepEqual(f.reported[0].Circuits, circuits) {
		t.Fatalf("reported %+v, want the circuits %+v", f.reported, circuits)
	}

	// An older node's report, as it encodes it.
	old, _ := json.Marshal(oldLoadReport{ID: "n3", InFlight: 1, Executors: execs})
	if st, body, err := c.Do(ctx, "POST", addr, PathReport, "application/json", old); err != nil || st != 200 {
		t.Fatalf("older node's report: %d %s %v", st, body, err)
	}
	if got := f.reported[1]; got.ID != "n3" || got.Circuits != nil || !reflect.DeepEqual(got.Executors, execs) {
		t.Fatalf("older node's report decoded as %+v, want no circuits", got)
	}

	// An older leader reads the new report (json.Unmarshal, as its
	// server does) without error and with the same fields.
	b, err := json.Marshal(report)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"circuits":[{"handler":"h","until_ms":1700000030000}]`)) {
		t.Fatalf("encoded %s, want the circuits field", b)
	}
	var o oldLoadReport
	if err := json.Unmarshal(b, &o); err != nil {
		t.Fatalf("an older leader cannot decode the report: %v", err)
	}
	want := oldLoadReport{ID: "n2", InFlight: 4, Applied: 7, Executors: execs}
	if !reflect.DeepEqual(o, want) {
		t.Fatalf("an older leader decodes %+v, want %+v", o, want)
	}
	// No circuit open: the very bytes an older node sends.
	report.Circuits = nil
	b, _ = json.Marshal(report)
	ob, _ := json.Marshal(want)
	if !bytes.Equal(b, ob) {
		t.Fatalf("a report without circuits encodes as %s, an older node's as %s", b, ob)
	}
}
