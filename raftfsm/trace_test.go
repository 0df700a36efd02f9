package raftfsm

import (
	"bytes"
	"reflect"
	"testing"
)

// TestSpecTraceContext: the trace context round-trips through a record,
// is absent from the encoding of a task without one (records of earlier
// versions decode as before), and is not part of Equal: a resubmit from
// another trace is the same task and keeps the first trace context.
func TestSpecTraceContext(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	task := &Task{ID: "a", State: StateWaiting, Spec: Spec{Handler: "h", TimeoutNs: 1, MaxAttempts: 1, TraceParent: tp, TraceState: "rojo=1"}}
	b, err := encodeRecord(task)
	if err != nil {
		t.Fatal(err)
	}
	var got Task
	if err := decodeRecord(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, task) {
		t.Fatalf("round trip: got %+v, want %+v", got, task)
	}

	plain := *task
	plain.Spec.TraceParent, plain.Spec.TraceState = "", ""
	b, err = encodeRecord(&plain)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("\xa2tp")) || bytes.Contains(b, []byte("\xa2ts")) {
		t.Errorf("a task without a trace context encodes trace keys: %q", b)
	}

	if !task.Spec.Equal(plain.Spec) {
		t.Errorf("specs that differ only in their trace context are not Equal")
	}
	other := &Submit{ID: "a", Spec: task.Spec}
	other.Spec.TraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	next, r := submitTask(task, other, 9)
	if next != nil || r.Code != CodeOK || r.Task.Spec.TraceParent != tp {
		t.Errorf("resubmit from another trace: got task %v, result %+v; want the stored task, unchanged", next, r)
	}
}
