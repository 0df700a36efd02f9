package sidecartest_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
	"github.com/axsched/ax/sidecar"
	"github.com/axsched/ax/sidecar/sidecartest"
)

// runsOf reads GET /v1/tasks/{id}/runs on node i.
func runsOf(t *testing.T, c *sidecartest.Cluster, i int, id string) []axapi.Run {
	t.Helper()
	resp := c.HTTP(i, "GET", axapi.RunsPath(id)+"?limit=100", nil)
	if resp.Status != 200 {
		t.Fatalf("runs of %s on node %d: %d %s", id, i, resp.Status, resp.Body)
	}
	var page axapi.RunsPage
	if err := json.Unmarshal(resp.Body, &page); err != nil {
		t.Fatalf("runs page %s: %v", resp.Body, err)
	}
	return page.Runs
}

// A recurring task of 5 runs whose second run fails its first attempt:
// every run is on record on every node, newest first, with its states,
// attempts, nodes, monotone times and lateness split; the failed
// attempt's status and error stay after the later runs succeeded; a JSON
// result is kept as JSON, one that is not UTF-8 shown in base64, a 100
// KiB one cut and flagged; the task view
// shows the newest run's result; a follower's history equals the
// leader's.
func TestRunHistory(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Nodes: 3})
	big := bytes.Repeat([]byte("x"), 100<<10)
	const notUTF8 = "{\"run\":\"\xff\"}" // JSON to json.Valid, but not UTF-8
	c.Respond(func(call sidecartest.Call) sidecartest.Reply {
		switch {
		case call.Run == 2 && call.Attempt == 1:
			return sidecartest.Reply{Status: 500, Body: []byte("boom")}
		case call.Run == 3:
			return sidecartest.Reply{Body: []byte(notUTF8)}
		case call.Run == 4:
			return sidecartest.Reply{Body: big}
		}
		return sidecartest.Reply{Body: []byte(fmt.Sprintf(`{"run":%d}`, call.Run))}
	})
	l := c.WaitLeader()
	start := c.Now().Add(time.Second).UTC().Truncate(time.Second)
	submitJSON(t, c, l, fmt.Sprintf(`{"id":"hist","handler":"h","every":"1s","repeats":5,"run_at":%q,"backoff":{"initial":"100ms","jitter":0}}`, start.Format(time.RFC3339Nano)))
	c.AdvanceUntil("five runs done", 50*time.Millisecond, func() bool {
		tk, err := c.Task(l, "hist")
		return err == nil && tk.State == "SUCCESS" && tk.Run == 5
	})

	runs := runsOf(t, c, l, "hist")
	if len(runs) != 5 {
		t.Fatalf("%d runs, want 5", len(runs))
	}
	var prevDue time.Time
	for i := len(runs) - 1; i >= 0; i-- {
		r := runs[i]
		if r.Run != 5-i || r.State != "SUCCESS" {
			t.Errorf("runs[%d]: run %d state %s", i, r.Run, r.State)
		}
		want := 1
		if r.Run == 2 {
			want = 2
		}
		if len(r.Attempts) != want {
			t.Fatalf("run %d: %d attempts, want %d: %+v", r.Run, len(r.Attempts), want, r.Attempts)
		}
		if !r.DueAt.After(prevDue) || r.StartedAt == nil || r.StartedAt.Before(r.DueAt) || r.FinishedAt == nil || r.FinishedAt.Before(*r.StartedAt) {
			t.Errorf("run %d times not monotone: %+v", r.Run, r)
		}
		prevDue = r.DueAt
		for _, a := range r.Attempts {
			if a.Node == "" || a.Executor == "" || a.StartedAt == nil || a.EndedAt == nil || a.EndedAt.Before(*a.StartedAt) {
				t.Errorf("run %d attempt %d: %+v", r.Run, a.Attempt, a)
			}
		}
		if r.Lateness == nil {
			t.Errorf("run %d: no lateness", r.Run)
		} else if lt := r.Lateness; lt.TotalMs < 0 || lt.ParkedMs+lt.RetriesMs+lt.CommitMs+lt.QueueMs+lt.ConnectMs-lt.TotalMs > 0.01 {
			t.Errorf("run %d: lateness parts do not add up: %+v", r.Run, lt)
		} else if gap := float64(r.StartedAt.Sub(r.DueAt)) / 1e6; math.Abs(lt.TotalMs-lt.ConnectMs-gap) > 1 {
			// The parts are measured apart (the leader's fire time, the
			// node's apply and queue wait); on the kit's one clock they
			// must add up to the measured start after due, plus connect.
			t.Errorf("run %d: lateness %.3f ms less connect %.3f ms, want the start's %.3f ms after due: %+v", r.Run, lt.TotalMs, lt.ConnectMs, gap, lt)
		}
	}
	failed := runs[3].Attempts[0]
	if failed.Outcome != "retryable" || failed.HTTPStatus != 500 || failed.Error != "http 500: boom" {
		t.Errorf("failed attempt of run 2: %+v", failed)
	}
	if ok := runs[3].Attempts[1]; ok.Attempt != 2 || ok.Outcome != "success" || ok.HTTPStatus != 200 {
		t.Errorf("second attempt of run 2: %+v", ok)
	}
	if string(runs[4].Result) != `{"run":1}` || runs[4].ResultBase64 != "" {
		t.Errorf("run 1 result %q base64 %q", runs[4].Result, runs[4].ResultBase64)
	}
	if odd, err := base64.StdEncoding.DecodeString(runs[2].ResultBase64); err != nil || string(odd) != notUTF8 || runs[2].Result != nil {
		t.Errorf("run 3 result %q base64 %q: want the answer not UTF-8 in base64", runs[2].Result, runs[2].ResultBase64)
	}
	cut, err := base64.StdEncoding.DecodeString(runs[1].ResultBase64)
	if err != nil || len(cut) != axapi.ResultMaxBytes || !runs[1].ResultTruncated || runs[1].Result != nil {
		t.Errorf("run 4 result: %d bytes, truncated %v, err %v", len(cut), runs[1].ResultTruncated, err)
	}
	tk, err := c.Task(l, "hist")
	if err != nil || tk.LastRun != 5 || string(tk.Result) != `{"run":5}` {
		t.Errorf("task view: last run %d result %q err %v", tk.LastRun, tk.Result, err)
	}
	resp := c.HTTP(l, "GET", axapi.RunPath("hist", 2), nil)
	var one axapi.Run
	if err := json.Unmarshal(resp.Body, &one); resp.Status != 200 || err != nil || !reflect.DeepEqual(one, runs[3]) {
		t.Errorf("GET run 2: %d %s", resp.Status, resp.Body)
	}

	f := c.Follower()
	c.Eventually("the follower's history equals the leader's", func() bool {
		return reflect.DeepEqual(runsOf(t, c, f, "hist"), runs)
	})
}

// --history-runs bounds the records per task: the leader's value, on
// every node.
func TestRunHistoryBound(t *testing.T) {
	c := sidecartest.New(t, sidecartest.Options{Nodes: 1, Config: func(_ int, cfg *sidecar.Config) { cfg.HistoryRuns = 2 }})
	start := c.Now().Add(time.Second).UTC().Truncate(time.Second)
	submitJSON(t, c, 0, fmt.Sprintf(`{"id":"b","handler":"h","every":"1s","repeats":4,"run_at":%q}`, start.Format(time.RFC3339Nano)))
	c.AdvanceUntil("four runs done", 50*time.Millisecond, func() bool {
		tk, err := c.Task(0, "b")
		return err == nil && tk.State == "SUCCESS" && tk.Run == 4
	})
	runs := runsOf(t, c, 0, "b")
	if len(runs) != 2 || runs[0].Run != 4 || runs[1].Run != 3 {
		t.Fatalf("runs %+v", runs)
	}
}
