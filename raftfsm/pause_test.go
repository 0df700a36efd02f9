package raftfsm

import (
	"fmt"
	"slices"
	"testing"
)

func pauseTaskCmd(id string, paused bool, atMs int64) Command {
	return Command{Type: CmdPause, Pause: &Pause{ID: id, Paused: paused, AtMs: atMs}}
}

func pauseHandlerCmd(h string, paused bool, atMs int64) Command {
	return Command{Type: CmdPause, Pause: &Pause{Handler: h, Paused: paused, AtMs: atMs}}
}

// pauseEnv has a WAITING task w, a RUNNING task r and a SUCCESS task s of
// handler h, and a node n1 whose executor runs "exec.*" (entries 1..3).
func pauseEnv(t *testing.T) *env {
	e := newEnv(t)
	e.apply(1, submitCmd("w", spec("h", "p"), 5000, 1000), submitCmd("r", spec("h", "p"), 4000, 1000),
		submitCmd("s", spec("h", "p"), 4000, 1000),
		nodeCmd(Node{ID: "n1", Executors: flagExec("exec.*")}))
	e.apply(2, fireCmd("r", 1, 1, "n1", 4000, 34000), fireCmd("s", 1, 1, "n1", 4000, 34000))
	e.apply(3, completeCmd("s", 1, 1, OutcomeSuccess, "", 0, 4200))
	return e
}

func TestPauseTask(t *testing.T) {
	for _, tc := range []struct {
		name     string
		id       string
		cmds     []Command // applied first, from entry 10
		paused   bool
		wantCode string
		// wantPaused is the task's flag afterwards; wantEvent whether the
		// last command sent an event.
		wantPaused, wantEvent bool
	}{
		{name: "pause waiting", id: "w", paused: true, wantPaused: true, wantEvent: true},
		{name: "pause running", id: "r", paused: true, wantPaused: true, wantEvent: true},
		{name: "pause twice", id: "w", cmds: []Command{pauseTaskCmd("w", true, 5)}, paused: true, wantPaused: true},
		{name: "resume", id: "w", cmds: []Command{pauseTaskCmd("w", true, 5)}, paused: false, wantEvent: true},
		{name: "resume twice", id: "w", paused: false},
		{name: "pause finished", id: "s", paused: true, wantCode: CodeState},
		{name: "resume finished", id: "s", paused: false},
		{name: "resume after it finished paused", id: "r",
			cmds:   []Command{pauseTaskCmd("r", true, 5), completeCmd("r", 1, 1, OutcomeSuccess, "", 0, 6)},
			paused: false, wantEvent: true},
		{name: "unknown task", id: "nope", paused: true, wantCode: CodeNotFound},
		{name: "unknown task resumed", id: "nope", paused: false, wantCode: CodeNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := pauseEnv(t)
			idx := uint64(10)
			for _, c := range tc.cmds {
				e.apply1(idx, c)
				idx++
			}
			var before Task
			if tc.wantCode != CodeNotFound {
				before = *e.task(tc.id)
			}
			rec := &recorder{}
			e.f.SetObserver(rec)
			r := e.apply1(idx, pauseTaskCmd(tc.id, tc.paused, 77))
			if r.Code != tc.wantCode {
				t.Fatalf("code %q, want %q", r.Code, tc.wantCode)
			}
			if tc.wantCode == CodeNotFound {
				e.noTask(tc.id)
				return
			}
			got := e.task(tc.id)
			if got.Paused != tc.wantPaused || r.Task == nil || r.Task.Paused != tc.wantPaused {
				t.Fatalf("paused: stored %v, result %+v, want %v", got.Paused, r.Task, tc.wantPaused)
			}
			// Nothing else of the task changes: not its state, due time or
			// attempt (a running attempt goes on).
			want := before
			want.Paused = tc.wantPaused
			if tc.wantEvent {
				want.UpdatedMs = 77
			}
			if !taskEqual(*got, want) {
				t.Fatalf("task %+v\nwant %+v", *got, want)
			}
			events := len(rec.calls) > 0
			if events != tc.wantEvent {
				t.Fatalf("events %+v, want an event: %v", rec.calls, tc.wantEvent)
			}
			if events {
				ev := rec.calls[0].events[0]
				if ev.Type != CmdPause || ev.Task == nil || ev.Task.ID != tc.id || ev.Pause == nil || ev.Pause.Paused != tc.paused || ev.Prev != 0 {
					t.Fatalf("event %+v", ev)
				}
			}
			e.checkIndexes()
		})
	}
}

func TestPauseHandler(t *testing.T) {
	for _, tc := range []struct {
		name     string
		handler  string
		cmds     []Command
		paused   bool
		wantCode string
		// want is the list of paused handlers afterwards.
		want      []string
		wantEvent bool
	}{
		{name: "with tasks", handler: "h", paused: true, want: []string{"h"}, wantEvent: true},
		{name: "matched by an executor only", handler: "exec.mail", paused: true, want: []string{"exec.mail"}, wantEvent: true},
		{name: "twice", handler: "h", cmds: []Command{pauseHandlerCmd("h", true, 5)}, paused: true, want: []string{"h"}},
		{name: "resume", handler: "h", cmds: []Command{pauseHandlerCmd("h", true, 5)}, paused: false, wantEvent: true},
		{name: "resume twice", handler: "h", paused: false},
		{name: "unknown", handler: "nobody", paused: true, wantCode: CodeNotFound},
		{name: "unknown resumed", handler: "nobody", paused: false, wantCode: CodeNotFound},
		// A paused handler stays known (resumable) when its tasks are gone.
		{name: "resume with no tasks left", handler: "only",
			cmds: []Command{submitCmd("o", spec("only", "p"), 5000, 1), pauseHandlerCmd("only", true, 5),
				overwriteCmd("o", spec("h", "p"), 5000, 6)},
			paused: false, wantEvent: true},
		// A submit in the same entry makes the handler known.
		{name: "same entry as its first task", handler: "new",
			cmds:   []Command{submitCmd("n", spec("new", "p"), 5000, 1)},
			paused: true, want: []string{"new"}, wantEvent: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := pauseEnv(t)
			idx := uint64(10)
			rec := &recorder{}
			var r Result
			if tc.name == "same entry as its first task" {
				e.f.SetObserver(rec)
				r = e.apply(idx, append(tc.cmds, pauseHandlerCmd(tc.handler, tc.paused, 77))...)[1]
				rec.calls[0].events = rec.calls[0].events[1:] // the submit's
			} else {
				for _, c := range tc.cmds {
					e.apply1(idx, c)
					idx++
				}
				e.f.SetObserver(rec)
				r = e.apply1(idx, pauseHandlerCmd(tc.handler, tc.paused, 77))
			}
			if r.Code != tc.wantCode {
				t.Fatalf("code %q, want %q", r.Code, tc.wantCode)
			}
			got, err := e.f.PausedHandlers()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("paused handlers %v, want %v", got, tc.want)
			}
			for _, h := range []string{"h", "exec.mail", "nobody", "only", "new"} {
				p, err := e.f.IsHandlerPaused(h)
				if err != nil || p != slices.Contains(tc.want, h) {
					t.Fatalf("IsHandlerPaused(%q) = %v, %v", h, p, err)
				}
			}
			events := len(rec.calls) > 0 && len(rec.calls[0].events) > 0
			if events != tc.wantEvent {
				t.Fatalf("events %+v, want an event: %v", rec.calls, tc.wantEvent)
			}
			if events {
				ev := rec.calls[0].events[0]
				if ev.Type != CmdPause || ev.Task != nil || ev.Pause == nil || ev.Pause.Handler != tc.handler || ev.Pause.Paused != tc.paused {
					t.Fatalf("event %+v", ev)
				}
			}
			// The tasks are not touched.
			if w := e.task("w"); w.Paused || w.State != StateWaiting {
				t.Fatalf("task w: %+v", w)
			}
		})
	}
}

// A pause naming both or neither a handler and a task is a malformed
// entry: the FSM refuses it (fails closed) rather than guess.
func TestPauseMalformed(t *testing.T) {
	for _, p := range []*Pause{nil, {}, {Handler: "h", ID: "w", Paused: true}} {
		e := pauseEnv(t)
		mustPanic(t, func() { e.applyEntry(10, Command{Type: CmdPause, Pause: p}) })
	}
}

// The flag survives an overwrite, a retry and a run of a recurring task;
// the counts per handler follow every change.
func TestPausedFlagKeptAndHandlerCounts(t *testing.T) {
	e := pauseEnv(t)
	e.apply1(10, pauseTaskCmd("w", true, 5))
	e.apply1(11, overwriteCmd("w", spec("h2", "v2"), 6000, 6))
	if w := e.task("w"); !w.Paused || w.Spec.Handler != "h2" {
		t.Fatalf("after overwrite: %+v", w)
	}
	e.apply1(12, pauseTaskCmd("r", true, 7))
	e.apply1(13, completeCmd("r", 1, 1, OutcomePermanent, "400", 0, 8))
	if r := e.task("r"); !r.Paused || r.State != StateFailed {
		t.Fatalf("after its attempt ended: %+v", r)
	}
	e.apply1(14, Command{Type: CmdRetry, Retry: &Retry{ID: "r", AtMs: 9}})
	if r := e.task("r"); !r.Paused || r.State != StateWaiting {
		t.Fatalf("after retry: %+v", r)
	}
	want := map[string][numStates]int64{}
	h := want["h"]
	h[StateWaiting], h[StateSuccess] = 1, 1
	want["h"] = h
	h2 := want["h2"]
	h2[StateWaiting] = 1
	want["h2"] = h2
	if got := e.f.HandlerCounts(); !mapsEqual(got, want) {
		t.Fatalf("handler counts %v, want %v", got, want)
	}
	// Counted again from the store at open, they are the same.
	e.reopen()
	if got := e.f.HandlerCounts(); !mapsEqual(got, want) {
		t.Fatalf("handler counts after reopen %v, want %v", got, want)
	}
}

// A snapshot carries paused handlers and tasks; a restore replaces them
// and the counts per handler.
func TestPauseSnapshotRestore(t *testing.T) {
	src := pauseEnv(t)
	src.apply(10, pauseTaskCmd("w", true, 5), pauseHandlerCmd("h", true, 5), pauseHandlerCmd("exec.x", true, 5))
	stream := persist(t, src.snapshot())

	dst := newEnv(t)
	dst.apply(1, submitCmd("other", spec("z", "p"), 1, 1), pauseHandlerCmd("z", true, 1))
	if err := dst.restore(stream); err != nil {
		t.Fatal(err)
	}
	got, err := dst.f.PausedHandlers()
	if err != nil || !slices.Equal(got, []string{"exec.x", "h"}) {
		t.Fatalf("paused handlers after restore %v (%v)", got, err)
	}
	if w := dst.task("w"); !w.Paused {
		t.Fatalf("task w after restore: %+v", w)
	}
	if c := dst.f.HandlerCounts(); len(c) != 1 || c["h"][StateWaiting] != 1 || c["h"][StateRunning] != 1 || c["h"][StateSuccess] != 1 {
		t.Fatalf("handler counts after restore: %v", c)
	}
	// Resuming on the restored FSM works as on the source.
	if r := dst.apply1(11, pauseHandlerCmd("h", false, 6)); r.Code != CodeOK {
		t.Fatalf("resume: %+v", r)
	}
	if got, _ := dst.f.PausedHandlers(); !slices.Equal(got, []string{"exec.x"}) {
		t.Fatalf("paused handlers %v", got)
	}
}

func mapsEqual(a, b map[string][numStates]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// BenchmarkLoadHandlerCounts measures the count of tasks per handler and
// state that Open and Restore make (one scan of the task records), over
// 100 000 tasks of 10 handlers with 256-byte payloads.
func BenchmarkLoadHandlerCounts(b *testing.B) {
	e := newEnv(b)
	const tasks, perEntry = 100_000, 500
	payload := make([]byte, 256)
	for idx := uint64(1); idx <= tasks/perEntry; idx++ {
		cmds := make([]Command, perEntry)
		for i := range cmds {
			n := int(idx-1)*perEntry + i
			s := Spec{Handler: "h" + string(rune('0'+n%10)), Payload: payload, Priority: 2, TimeoutNs: 30e9, MaxAttempts: 3}
			cmds[i] = submitCmd("t"+string(rune('a'+n%26))+itoa(n), s, 1_700_000_000_000, 1)
		}
		e.apply(idx, cmds...)
	}
	b.ResetTimer()
	for range b.N {
		if err := e.f.loadHandlerCounts(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if c := e.f.HandlerCounts(); len(c) != 10 || c["h0"][StateWaiting] != tasks/10 {
		b.Fatalf("counts %v", c)
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/load")
}

func itoa(n int) string { return fmt.Sprint(n) }
