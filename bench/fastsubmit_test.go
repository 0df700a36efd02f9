package bench

import (
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

// A batch answer is checked item by item: an error status, a view of
// another task and a view without a state fail their item; a wrong count
// or a non-200 answer fails the batch.
func TestCheckBatchAnswer(t *testing.T) {
	var p fastjson.Parser
	ids := []string{"a", "b", "c", "d"}
	body := `{"results":[` +
		`{"status":201,"task":{"id":"a","state":"WAITING","handler":"h"}},` +
		`{"status":200,"task":{"id":"x","state":"WAITING"}},` +
		`{"status":409,"error":{"code":"conflict","message":"task b exists with another spec"}},` +
		`{"status":201,"task":{"id":"d"}}]}`
	out, err := checkBatchAnswer(&p, 200, []byte(body), ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 4 || out[0].failed || !out[1].failed || !out[2].failed || !out[3].failed {
		t.Fatalf("results %+v, want only the first to pass", out)
	}
	if !strings.Contains(out[2].msg, "409 conflict: task b exists") {
		t.Fatalf("error item's message %q", out[2].msg)
	}
	if _, err := checkBatchAnswer(&p, 200, []byte(`{"results":[]}`), ids); err == nil {
		t.Fatal("a short answer passed")
	}
	_, err = checkBatchAnswer(&p, 503, []byte(`{"error":{"code":"no_leader","message":"no leader"}}`), ids)
	if err == nil || !strings.Contains(err.Error(), "503 no_leader") {
		t.Fatalf("a 503 answer: %v", err)
	}
	if _, err := checkBatchAnswer(&p, 200, []byte(`{"results":[`), ids); err == nil {
		t.Fatal("a cut answer passed")
	}
}
