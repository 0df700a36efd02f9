package ax

import (
	"encoding/json"
	"testing"

	"github.com/axsched/ax/clients/go/axapi"
)

func TestSubmitShardsEncoding(t *testing.T) {
	for _, tc := range []struct {
		sh   *Shards
		want string
	}{
		{nil, ""},
		{&Shards{Count: 8}, `{"count":8}`},
		{&Shards{Ask: true, Max: 5}, `{"ask":true,"max":5}`},
		{&Shards{}, `{"count":0}`},                   // the sidecar refuses it: invalid_shards
		{&Shards{Ask: true}, `{"ask":true,"max":0}`}, // so this
	} {
		b, err := encodeSubmit(SubmitRequest{Handler: "h", Shards: tc.sh})
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]json.RawMessage
		if err := json.Unmarshal(b, &body); err != nil {
			t.Fatal(err)
		}
		if got := string(body["shards"]); got != tc.want {
			t.Errorf("%+v: shards %s, want %s", tc.sh, got, tc.want)
		}
	}
}

func TestTaskShardsView(t *testing.T) {
	var w axapi.Task
	if err := json.Unmarshal([]byte(`{"id":"shard/p/1/3","handler":"h","state":"SUCCESS","timeout":"30s","run":1,"snoozes":0,
		"created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z","shard_index":3,"shard_total":8}`), &w); err != nil {
		t.Fatal(err)
	}
	tk, err := taskFromWire(&w)
	if err != nil || tk.ShardIndex != 3 || tk.ShardTotal != 8 || tk.Shards != nil {
		t.Fatalf("%+v %v", tk, err)
	}
}
