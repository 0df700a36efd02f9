package axapi

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestSubmitRequest_Encode(t *testing.T) {
	j := 0.0
	r := SubmitRequest{ID: "x", Handler: "h", Delay: new("1.5s"), Priority: new(0), Every: new("1m0s"),
		Backoff: &BackoffRequest{Jitter: &j}, Labels: map[string]string{"a": "b"}, Payload: json.RawMessage("[1,  2]")}
	b, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"x","handler":"h","delay":"1.5s","priority":0,"every":"1m0s","backoff":{"jitter":0},"labels":{"a":"b"},"payload":[1,  2]}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
	if r.Payload == nil {
		t.Error("Encode cleared the request's payload")
	}
	b, err = (&SubmitRequest{Handler: "h"}).Encode()
	if err != nil || string(b) != `{"handler":"h"}` {
		t.Errorf("minimal: %s, %v", b, err)
	}
}

// The server decodes the body the clients encode into the same type.
func TestSubmitRequest_RoundTrip(t *testing.T) {
	in := SubmitRequest{ID: "a|b", Handler: "h", PayloadBase64: new("AAE="), RunAt: new("2030-01-01T00:00:00Z"),
		MaxAttempts: new(3), Overwrite: true, Cron: new("0 2 * * *"), Timezone: new("Europe/Berlin"), Repeats: new(2),
		Until: new("2031-01-01T00:00:00Z"), RouteKey: new("k"), Retention: new("1h")}
	b, err := in.Encode()
	if err != nil {
		t.Fatal(err)
	}
	var out SubmitRequest
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	again, _ := out.Encode()
	if string(again) != string(b) {
		t.Errorf("round trip\n%s\n%s", b, again)
	}
}

func TestTask_JSON(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	v := Task{ID: "a", Handler: "h", State: StateWaiting, Timeout: "30s", CreatedAt: at, UpdatedAt: at, Payload: []byte(`{"k": 1}`)}
	b, err := v.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	// run and snoozes are always sent; the payload is spliced byte for byte.
	for _, want := range []string{`"run":0`, `"snoozes":0`, `"payload":{"k": 1}}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
	var back Task
	if err := back.UnmarshalJSON(b); err != nil || string(back.Payload) != `{"k": 1}` || back.PayloadBase64 {
		t.Errorf("decoded %+v, %v", back, err)
	}
	// payload_base64, with or without padding, sets PayloadBase64.
	for _, enc := range []string{"AAE=", "AAE"} {
		var bin Task
		if err := bin.UnmarshalJSON([]byte(`{"id":"a","payload_base64":"` + enc + `"}`)); err != nil || !bin.PayloadBase64 || string(bin.Payload) != "\x00\x01" {
			t.Errorf("payload_base64 %q: %+v, %v", enc, bin, err)
		}
	}
	var bad Task
	if err := bad.UnmarshalJSON([]byte(`{"id":"a","payload_base64":"!"}`)); err == nil {
		t.Error("a payload_base64 that is not base64 decoded")
	}
	// A payload that json.Valid takes but that is not UTF-8 (stored by a
	// sidecar before it checked request bodies) goes out as base64: the
	// view stays JSON, UTF-8 included.
	odd := Task{ID: "a", Handler: "h", Payload: []byte("{\"a\":\"\xff\"}")}
	b, err = odd.MarshalJSON()
	if err != nil || !utf8.Valid(b) || !strings.Contains(string(b), `"payload_base64":"eyJhIjoi/yJ9"`) || strings.Contains(string(b), `"payload":`) {
		t.Errorf("view of a payload not UTF-8: %q, %v", b, err)
	}
}

func TestState_Terminal(t *testing.T) {
	for _, s := range States() {
		want := s != StateWaiting && s != StateRunning
		if State(s).Terminal() != want {
			t.Errorf("%s.Terminal() = %v", s, !want)
		}
	}
	if State("").Terminal() {
		t.Error("the empty state is terminal")
	}
}

func TestTaskPath(t *testing.T) {
	if got := TaskPath("A/B c|ü"); got != "/v1/tasks/A%2FB%20c%7C%C3%BC" {
		t.Errorf("TaskPath = %s", got)
	}
}

func TestClusterInfo_Lag(t *testing.T) {
	for _, tc := range []struct {
		commit, state, applied, want uint64
	}{
		{commit: 12, state: 10, applied: 10, want: 0}, // a new leader's no-op and barrier: no lag
		{commit: 12, state: 10, applied: 7, want: 3},
		{commit: 12, state: 12, applied: 11, want: 1},
		{commit: 12, state: 0, applied: 10, want: 2},  // an older sidecar: counted to the commit index
		{commit: 12, state: 10, applied: 13, want: 0}, // a member ahead of this node
	} {
		c := ClusterInfo{CommitIndex: tc.commit, StateIndex: tc.state}
		if got := c.Lag(tc.applied); got != tc.want {
			t.Errorf("commit %d, state %d: Lag(%d) = %d, want %d", tc.commit, tc.state, tc.applied, got, tc.want)
		}
	}
	var c ClusterInfo
	if err := json.Unmarshal([]byte(`{"commit_index":12,"state_index":10}`), &c); err != nil || c.StateIndex != 10 {
		t.Fatalf("state_index not read: %+v %v", c, err)
	}
}
