// Command tracecycle lays out where the time of one request goes at one
// caller (issue 19), from Go runtime traces (runtime/trace, or a node's
// /debug/pprof/trace):
//
//	GOWORK=off go run . node.trace          # a node's trace
//	GOWORK=off go run . -client bench.trace # the trace of a process running the bench's sockSubmitter
//
// For a node it follows each request through the goroutines of its
// critical path (the API handler, raft's leader loop and FSM goroutine,
// badger's writer) by their state transitions and the stacks of the
// goroutines that wake them, and prints the median, quartiles and mean of
// each step over the complete request cycles. For the client it prints
// the write of each request, the wait for its answer and the CPU between
// an answer and the next request. It is a separate module (it needs
// golang.org/x/exp/trace), not part of ax's build; see docs/perf/README.md.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"golang.org/x/exp/trace"
)

func main() {
	client := flag.Bool("client", false, "the trace is the bench client's")
	flag.Parse()
	fh, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer fh.Close()
	r, err := trace.NewReader(fh)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if *client {
		clientCycles(r)
	} else {
		nodeCycles(r)
	}
}

func frames(s trace.Stack) []string {
	var out []string
	for f := range s.Frames() {
		out = append(out, f.Func)
	}
	return out
}

func has(s trace.Stack, sub string) bool {
	for f := range s.Frames() {
		if strings.Contains(f.Func, sub) {
			return true
		}
	}
	return false
}

// quartiles returns p25, p50, p75 and the mean of d.
func quartiles(d []float64) (p25, p50, p75, mean float64) {
	if len(d) == 0 {
		return
	}
	s := append([]float64(nil), d...)
	sort.Float64s(s)
	var sum float64
	for _, v := range s {
		sum += v
	}
	return s[len(s)/4], s[len(s)/2], s[len(s)*3/4], sum / float64(len(s))
}

func row(name string, d []float64, what string) {
	p25, p50, p75, mean := quartiles(d)
	fmt.Printf("%-11s %6.1f µs (p25 %5.1f, p75 %6.1f, mean %6.1f)  %s\n", name, p50, p25, p75, mean, what)
}

var steps = []string{"applylog", "leaderrun", "syncstart", "syncend", "fsmwake", "fsmrun", "badgersend", "badgerback", "respond", "handlerrun", "writestart", "writeend"}

var names = map[string]string{
	"applylog":   "request read → raft.Apply hands the entry to the leader loop (parse, handler, propose)",
	"leaderrun":  "→ leader loop runs",
	"syncstart":  "→ fsync starts (log write)",
	"syncend":    "fsync of the Raft log (raft-wal)",
	"fsmwake":    "→ leader loop hands the committed entry to the FSM goroutine",
	"fsmrun":     "→ FSM goroutine runs",
	"badgersend": "FSM apply until the badger commit is sent to its writer",
	"badgerback": "badger's writer goroutines write the memtable, FSM woken",
	"next":       "→ raft.Apply of the next request (the node reads and parses it, the handler proposes)",
	"respond":    "→ FSM finishes (counts, observer) and answers raft's future",
	"handlerrun": "→ the caller's goroutine runs again",
	"writestart": "→ answer encoded, write starts",
	"writeend":   "write(2) of the answer",
	"readdone":   "→ next request read by the node (the client: wake, parse the answer, build and write the next request; the node's read)",
}

// nodeCycles prints the steps of a node's request cycles.
func nodeCycles(r *trace.Reader) {
	label := map[trace.GoID]string{}
	var handler, leader, fsm trace.GoID = -1, -1, -1
	type cyc map[string]trace.Time
	var cycles []cyc
	var cur cyc
	next := 0
	var lastRead trace.Time
	mark := func(k string, t trace.Time) {
		if cur == nil || next >= len(steps) || steps[next] != k {
			return
		}
		cur[k] = t
		next++
	}
	for {
		ev, err := r.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		g := st.Resource.Goroutine()
		o, n := st.Goroutine()
		if st.Stack != trace.NoStack {
			fs := frames(st.Stack)
			if len(fs) > 0 && label[g] == "" {
				label[g] = fs[len(fs)-1]
			}
		}
		t := ev.Time()
		by := ev.Goroutine()
		switch {
		case o == trace.GoWaiting && n == trace.GoRunnable && by != trace.NoGoroutine && strings.Contains(label[by], "workerPool") && has(ev.Stack(), "ApplyLog"):
			// a handler hands a new entry to the leader loop
			if cur != nil && next == len(steps) && lastRead > cur["writeend"] {
				cur["readdone"] = lastRead
				cur["next"] = t
				cycles = append(cycles, cur)
			}
			handler, leader = by, g
			cur = cyc{"applylog": t}
			next = 1
		case g == handler && o == trace.GoSyscall && next == len(steps):
			lastRead = t
		case g == leader && o == trace.GoRunnable && n == trace.GoRunning:
			mark("leaderrun", t)
		case g == leader && o == trace.GoRunning && n == trace.GoSyscall && has(st.Stack, "Sync"):
			mark("syncstart", t)
		case g == leader && o == trace.GoSyscall && (n == trace.GoRunning || n == trace.GoRunnable):
			mark("syncend", t)
		case o == trace.GoWaiting && n == trace.GoRunnable && by == leader && has(ev.Stack(), "processLogs"):
			fsm = g
			mark("fsmwake", t)
		case g == fsm && o == trace.GoRunnable && n == trace.GoRunning:
			mark("fsmrun", t)
		case by == fsm && o == trace.GoWaiting && n == trace.GoRunnable && has(ev.Stack(), "sendToWriteCh"):
			mark("badgersend", t)
		case g == fsm && o == trace.GoWaiting && n == trace.GoRunnable && has(ev.Stack(), "writeRequests"):
			mark("badgerback", t)
		case by == fsm && o == trace.GoWaiting && n == trace.GoRunnable && has(ev.Stack(), "respond"):
			mark("respond", t)
		case g == handler && o == trace.GoRunnable && n == trace.GoRunning:
			mark("handlerrun", t)
		case g == handler && o == trace.GoRunning && n == trace.GoSyscall && has(st.Stack, "Writer).Flush"):
			mark("writestart", t)
		case g == handler && o == trace.GoSyscall && next == len(steps)-1:
			mark("writeend", t)
		}
	}
	all := append(append([]string{}, steps...), "readdone", "next")
	fmt.Printf("%d complete cycles\n", len(cycles))
	var totals []float64
	for _, c := range cycles {
		totals = append(totals, float64(c["next"]-c["applylog"])/1e3)
	}
	for i := 1; i < len(all); i++ {
		var d []float64
		for _, c := range cycles {
			d = append(d, float64(c[all[i]]-c[all[i-1]])/1e3)
		}
		row(all[i], d, names[all[i]])
	}
	row("cycle", totals, "one request: raft.Apply to the next one's")
}

// clientCycles prints the steps of the bench client's requests.
func clientCycles(r *trace.Reader) {
	var wS, wE, rE trace.Time
	var inWrite, inRead bool
	var write, wait, cpu []float64
	var gcs int
	for {
		ev, err := r.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if ev.Kind() == trace.EventRangeBegin && strings.Contains(ev.Range().Name, "GC") {
			gcs++
		}
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		o, n := st.Goroutine()
		t := ev.Time()
		switch {
		case o == trace.GoRunning && n == trace.GoSyscall && has(st.Stack, "sockSubmitter).exchange") && has(st.Stack, "syscall.Write"):
			if rE != 0 && wS != 0 {
				cpu = append(cpu, float64(t-rE)/1e3)
				write = append(write, float64(wE-wS)/1e3)
				wait = append(wait, float64(rE-wE)/1e3)
			}
			wS, inWrite = t, true
		case inWrite && o == trace.GoSyscall:
			wE, inWrite = t, false
		case o == trace.GoRunning && n == trace.GoSyscall && has(st.Stack, "sockSubmitter).exchange") && has(st.Stack, "syscall.Read"):
			inRead = true
		case inRead && o == trace.GoSyscall:
			rE, inRead = t, false
		}
	}
	fmt.Printf("%d requests, %d GC cycles\n", len(write), gcs)
	row("write", write, "write(2) of the request")
	row("wait", wait, "request written → answer read (the node, and the kernel's wake-ups)")
	row("cpu", cpu, "answer read → next request's write (the client: parse the answer, build the next request)")
}
