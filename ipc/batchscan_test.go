package ipc

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

// jsonRequests decodes a batch body as DecodeSubmitBatch did before the
// scanner: the batch with encoding/json, then each item on its own.
func jsonRequests(body []byte) ([]submitRequest, error) {
	var req struct {
		Tasks []json.RawMessage `json:"tasks"`
	}
	if err := decodeStrict(body, &req); err != nil {
		return nil, err
	}
	if req.Tasks == nil {
		return nil, errors.New("no tasks")
	}
	out := make([]submitRequest, len(req.Tasks))
	for i, raw := range req.Tasks {
		if !strings.HasPrefix(string(raw), "{") {
			return nil, fmt.Errorf("tasks[%d] is not an object", i)
		}
		if err := decodeStrict(raw, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// The bodies the scanner must read itself.
var scannedBodies = []string{
	`{"tasks":[{"id":"a","handler":"h"}]}`,
	" \n{ \"tasks\" :\t[ { \"id\" : \"a\" , \"handler\" : \"h\" } , {\"handler\":\"h2\"} ] } \r\n",
	`{"tasks":[{}]}`,
	`{"tasks":[{"id":"a","handler":"h","delay":"1s","priority":0,"timeout":"30s","max_attempts":12,"overwrite":true,` +
		`"route_key":"k","retention":"1h","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":"a=b"}]}`,
	`{"tasks":[{"handler":"h","run_at":"2030-01-01T00:00:00Z","priority":-3,"overwrite":false,"payload_base64":"aGk="}]}`,
	`{"tasks":[{"handler":"h","cron":"*/5 * * * *","timezone":"Europe/Paris","repeats":3,"until":"2031-01-01T00:00:00Z"}]}`,
	`{"tasks":[{"handler":"h","every":"1m","repeats":-0}]}`,
	`{"tasks":[{"handler":"h","payload":{"a":[1,-2.5e+3,true,false,null,"x\"\\\/\b\f\n\r\t\u00e9",{}],"b":[]}}]}`,
	`{"tasks":[{"handler":"h","payload":"\u00e9 é"},{"handler":"h","payload":0},{"handler":"h","payload":[ ]},{"handler":"h","payload":-0.5E-2}]}`,
	string(batchBody(1000, `{"n":1}`)),
}

func TestScanSubmitBatchReadsUsualBodies(t *testing.T) {
	for i, body := range scannedBodies {
		got, ok := scanSubmitBatch([]byte(body))
		if !ok {
			t.Errorf("body %d: the scanner gave up on %.200s", i, body)
			continue
		}
		want, err := jsonRequests([]byte(body))
		if err != nil {
			t.Fatalf("body %d: encoding/json refuses it: %v", i, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("body %d:\nscanner: %+v\njson:    %+v", i, got, want)
		}
	}
}

// The bodies the scanner must leave to encoding/json: valid ones it does
// not read, and invalid ones.
var jsonBodies = []string{
	`{"tasks":[{"id":"a\u0062","handler":"h"}]}`,                  // escape in a string
	`{"tasks":[{"id":"é","handler":"h"}]}`,                        // non-ASCII
	`{"tasks":[{"id":"` + "\xff" + `","handler":"h"}]}`,           // invalid UTF-8: refused by spec
	`{"tasks":[{"id":null,"handler":"h"}]}`,                       // null
	`{"tasks":[{"handler":"h","payload":"` + "\xff\xfe" + `"}]}`,  // invalid UTF-8 in a payload: refused by checkUTF8
	`{"tasks":[{"handler":"h","payload":{"` + "\xc3" + `":1}}]}`,  // a cut sequence in a payload's key
	`{"tasks":[{"handler":"h","payload":null}]}`,                  // null payload
	`{"tasks":[{"handler":"h","labels":{"a":"b"}}]}`,              // an object field
	`{"tasks":[{"handler":"h","backoff":{"initial":"1s"}}]}`,      // an object field
	`{"tasks":[{"handler":"h","shards":{"count":2}}]}`,            // an object field
	`{"tasks":[{"ID":"a","handler":"h"}]}`,                        // another case: encoding/json folds it
	`{"tasks":[{"id":"a","id":"b","handler":"h"}]}`,               // a duplicate: refused (decodeStrict)
	`{"tasks":[{"handler":"h","priority":1.0}]}`,                  // not an integer
	`{"tasks":[{"handler":"h","priority":1e0}]}`,                  // not an integer
	`{"tasks":[{"handler":"h","priority":01}]}`,                   // not JSON
	`{"tasks":[{"handler":"h","priority":"1"}]}`,                  // a string for an integer
	`{"tasks":[{"handler":"h","priority":99999999999999999999}]}`, // out of range
	`{"tasks":[{"handler":"h","overwrite":"yes"}]}`,
	`{"tasks":[{"handler":"h","unknown":1}]}`,
	`{"tasks":[{"handler":"h"}],"more":1}`,
	`{"tasks":[{"handler":"h"}]}x`,
	`{"tasks":[{"handler":"h"}]`,
	`{"tasks":[{"handler":"h"},]}`,
	`{"tasks":[{"handler":"h",}]}`,
	`{"tasks":[]}`,
	`{"tasks":null}`,
	`{}`,
	`[]`,
	``,
	`{"tasks":[1]}`,
	`{"tasks":[{"handler":"h","payload":{"a":}}]}`,
	`{"tasks":[{"handler":"h","payload":"` + "\x01" + `"}]}`,
	`{"tasks":[{"handler":"h","payload":[1 2]}]}`,
	`{"tasks":[{"handler":"h","payload":tru}]}`,
	`{"tasks":[{"handler":"h","payload":-}]}`,
	`{"tasks":[{"handler":"h","payload":"\x"}]}`,
	`{"tasks":[{"handler":"h","payload":"\u12"}]}`,
	`{"tasks":[{"handler":"h","payload":1.}]}`,
	`{"tasks":[{"handler":"h","payload":1e}]}`,
	`{"tasks":[` + strings.Repeat(`{"handler":"h"},`, 1000) + `{"handler":"h"}]}`, // over the bound
	`{"tasks":[{"handler":"h","payload":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}]}`,
}

func TestScanSubmitBatchLeavesTheRestToJSON(t *testing.T) {
	for i, body := range jsonBodies {
		if _, ok := scanSubmitBatch([]byte(body)); ok {
			t.Errorf("body %d: the scanner read %.200s", i, body)
		}
	}
}

// TestDecodeSubmitBatchAnswersAsJSON checks that DecodeSubmitBatch gives
// the specs and errors the encoding/json path gives, on bodies either
// path reads, valid or not (ids made by NewID aside).
func TestDecodeSubmitBatchAnswersAsJSON(t *testing.T) {
	bodies := append(append([]string{}, scannedBodies[:2]...), scannedBodies[3:]...)
	bodies = append(bodies, jsonBodies...)
	bodies = append(bodies,
		`{"tasks":[{"id":"a","handler":"h"},{"id":"b"}]}`,                                   // handler required
		`{"tasks":[{"id":"a","handler":"h","delay":"1s","run_at":"2030-01-01T00:00:00Z"}]}`, // both
		`{"tasks":[{"id":"a","handler":"h","priority":9}]}`,
		`{"tasks":[{"id":"a","handler":"h","max_attempts":0}]}`,
		`{"tasks":[{"id":"a","handler":"h","payload":"x","payload_base64":"eA=="}]}`,
		`{"tasks":[{"id":"a","handler":"h","payload":"`+strings.Repeat("x", 2<<20)+`"}]}`, // too large
		`{"tasks":[{"id":"flow/x","handler":"h"}]}`,
	)
	for i, body := range bodies {
		got, err1 := DecodeSubmitBatch([]byte(body))
		want, err2 := decodeSubmitBatchJSON([]byte(body))
		for j := range min(len(got), len(want)) {
			if len(got[j].ID) == 32 && len(want[j].ID) == 32 && got[j].ID != want[j].ID {
				got[j].ID, want[j].ID = "", "" // both made by NewID
			}
		}
		if fmt.Sprint(err1) != fmt.Sprint(err2) || errKind(err1) != errKind(err2) {
			t.Errorf("body %d (%.100s): error %v, encoding/json's %v", i, body, err1, err2)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("body %d (%.100s):\ngot  %+v\nwant %+v", i, body, got, want)
		}
	}
}

func errKind(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return fmt.Sprint(err)
}

// FuzzScanSubmitBatchMatchesJSON: whatever body the scanner reads,
// encoding/json reads too, into the same requests.
func FuzzScanSubmitBatchMatchesJSON(f *testing.F) {
	for _, b := range scannedBodies[:len(scannedBodies)-1] {
		f.Add([]byte(b))
	}
	for _, b := range jsonBodies[:len(jsonBodies)-2] {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := scanSubmitBatch(body)
		if !ok {
			return
		}
		want, err := jsonRequests(body)
		if err != nil {
			t.Fatalf("the scanner read %q, encoding/json refuses it: %v", body, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\nscanner: %+v\njson:    %+v", body, got, want)
		}
	})
}

// singleBodies are the items of the scanned batch bodies, each as a body
// of its own (POST /v1/tasks), with white space around some.
func singleBodies(t testing.TB) []string {
	var out []string
	for i, b := range scannedBodies {
		var req struct {
			Tasks []json.RawMessage `json:"tasks"`
		}
		if err := json.Unmarshal([]byte(b), &req); err != nil {
			t.Fatalf("scanned body %d: %v", i, err)
		}
		for j, raw := range req.Tasks {
			if j%2 == 1 {
				raw = append(append([]byte(" \n"), raw...), "\t "...)
			}
			out = append(out, string(raw))
		}
	}
	return out
}

// A single submit of the usual shape is read by the scanner, with the
// request encoding/json gives; other bodies are left to encoding/json.
func TestScanSubmitMatchesJSON(t *testing.T) {
	bodies := singleBodies(t)
	if len(bodies) < 5 {
		t.Fatalf("only %d single bodies", len(bodies))
	}
	for _, b := range bodies {
		got, ok := scanSubmit([]byte(b))
		if !ok {
			t.Fatalf("scanner refused %q", b)
		}
		var want submitRequest
		if err := decodeStrict([]byte(b), &want); err != nil {
			t.Fatalf("encoding/json refuses %q: %v", b, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\nscanner: %+v\njson:    %+v", b, got, want)
		}
	}
	for _, b := range []string{``, `null`, `{"handler":"h"} x`, `{"handler":"h","handler":"g"}`, `{"Handler":"h"}`, `{"handler":"h\u0041"}`, `{"priority":1.5}`, `[{"handler":"h"}]`, `{"colour":"red"}`} {
		if _, ok := scanSubmit([]byte(b)); ok {
			t.Errorf("scanner read %q, which is encoding/json's to answer", b)
		}
	}
}

func FuzzScanSubmitMatchesJSON(f *testing.F) {
	for _, b := range singleBodies(f) {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := scanSubmit(body)
		if !ok {
			return
		}
		var want submitRequest
		if err := decodeStrict(body, &want); err != nil {
			t.Fatalf("the scanner read %q, encoding/json refuses it: %v", body, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\nscanner: %+v\njson:    %+v", body, got, want)
		}
	})
}

// A batch's items that repeat the string of the item before share it (a
// handler's, a delay's, one pointer for both items), and each reads its
// own value: the copies were most of a batch task's allocations.
func TestScanSubmitBatchSharesRepeatedStrings(t *testing.T) {
	body := `{"tasks":[{"handler":"a","delay":"1s"},{"handler":"a","delay":"1s"},{"handler":"b","delay":"2s"},{"handler":"a","delay":"1s"}]}`
	reqs, ok := scanSubmitBatch([]byte(body))
	if !ok || len(reqs) != 4 {
		t.Fatalf("scanner: %v, %d items", ok, len(reqs))
	}
	for i, want := range []struct{ h, d string }{{"a", "1s"}, {"a", "1s"}, {"b", "2s"}, {"a", "1s"}} {
		if reqs[i].Handler.s != want.h || reqs[i].Delay == nil || *reqs[i].Delay != want.d {
			t.Fatalf("item %d: handler %q delay %v, want %q %q", i, reqs[i].Handler.s, reqs[i].Delay, want.h, want.d)
		}
	}
	if reqs[0].Delay != reqs[1].Delay || unsafe.StringData(reqs[0].Handler.s) != unsafe.StringData(reqs[1].Handler.s) {
		t.Fatal("a repeated string was copied again")
	}
	if reqs[1].Delay == reqs[2].Delay || *reqs[0].Delay != "1s" {
		t.Fatal("different values share a string")
	}
}
