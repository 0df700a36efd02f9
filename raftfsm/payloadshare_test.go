package raftfsm

import (
	"bytes"
	"runtime"
	"testing"
)

// bigPayload is a JSON payload of n bytes.
func bigPayload(n int) []byte {
	return append(append([]byte(`{"d":"`), bytes.Repeat([]byte("x"), n-8)...), `"}`...)
}

// The fired shards of a run, each decoded from its own record, share one
// payload array (the delivery of each holds its task until its callback:
// a run of 1 024 shards of 1 MB held a GB of copies of one payload), and
// a Complete's decode of a shard shares it too. Fails with every decoded
// payload a copy of its own.
func TestShardPayloadsShareOneArray(t *testing.T) {
	e := &flowEnv{env: newEnv(t)}
	s := shardSpec(Shards{Count: 4})
	s.Payload = bigPayload(sharedPayloadMin + 1000)
	e.startRun("p", s, 4)
	var first *byte
	same := func(what string, tk *Task) {
		t.Helper()
		if !bytes.Equal(tk.Spec.Payload, s.Payload) {
			t.Fatalf("%s: payload differs", what)
		}
		if first == nil {
			first = &tk.Spec.Payload[0]
		} else if &tk.Spec.Payload[0] != first {
			t.Fatalf("%s: its payload is a copy of its own, not the array the other shards share", what)
		}
		if cap(tk.Spec.Payload) != len(tk.Spec.Payload) {
			t.Fatalf("%s: shared payload has room to append (cap %d, len %d)", what, cap(tk.Spec.Payload), len(tk.Spec.Payload))
		}
	}
	for i := 0; i < 4; i++ {
		id := ShardID("p", 1, i)
		r := e.next(fireCmd(id, e.task(id).Epoch, 1, "n1", 3000, 33000))
		if r[0].Code != CodeOK || r[0].Task == nil {
			t.Fatalf("fire %s: %+v", id, r[0])
		}
		same("fired "+id, r[0].Task)
		same("read "+id, e.task(id))
	}
	// Another payload of the same size is its own.
	other := bigPayload(sharedPayloadMin + 1000)
	other[10] = 'y'
	var o Task
	b, err := encodeRecord(&Task{ID: "o", Spec: Spec{Handler: "h", Payload: other}})
	if err != nil {
		t.Fatal(err)
	}
	if err := decodeRecord(b, &o); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(o.Spec.Payload, other) || &o.Spec.Payload[0] == first {
		t.Fatal("a different payload of the same size decoded into the shared array")
	}
}

// The shared array is held weakly: once no task refers to it, it is
// collected. Fails if the last payload decoded is kept alive.
func TestSharedPayloadKeepsNothingAlive(t *testing.T) {
	p := bigPayload(sharedPayloadMin)
	b, err := encodeRecord(&Task{ID: "t", Spec: Spec{Handler: "h", Payload: p}})
	if err != nil {
		t.Fatal(err)
	}
	var tk Task
	if err := decodeRecord(b, &tk); err != nil {
		t.Fatal(err)
	}
	lastPayload.mu.Lock()
	wp := lastPayload.p // this array's, whatever is decoded later
	lastPayload.mu.Unlock()
	if wp.Value() != &tk.Spec.Payload[0] {
		t.Fatal("the decoded payload is not the one kept as the last")
	}
	tk = Task{}
	runtime.GC()
	if wp.Value() != nil {
		t.Fatal("the last large payload decoded is still alive with no task holding it")
	}
	// Small payloads are copies, as before.
	small := []byte(`{"a":1}`)
	b, _ = encodeRecord(&Task{ID: "s", Spec: Spec{Handler: "h", Payload: small}})
	var a, c Task
	if decodeRecord(b, &a) != nil || decodeRecord(b, &c) != nil || &a.Spec.Payload[0] == &c.Spec.Payload[0] {
		t.Fatal("small payloads: not decoded into copies of their own")
	}
}
