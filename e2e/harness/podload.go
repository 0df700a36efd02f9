package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// PodHandler is the handler of every task of a PodLoad (the pods'
// echo-executors answer every handler 200).
const PodHandler = "pods.echo"

// podSubmitGiveUp bounds how long one task of a PodLoad is retried
// before it counts as never answered (not acknowledged: not counted lost).
const podSubmitGiveUp = 30 * time.Second

// PodTask is a task a PodLoad got acknowledged.
type PodTask struct {
	ID    string
	Due   time.Time // next_run_at of the acknowledgement
	Via   string    // the pod that acknowledged it
	AckAt time.Time
}

// PodLoad submits tasks at a steady rate, each through the next live pod
// (round robin), due within [0, maxDelay); a try that fails with a
// connection error, a 503 or a 429 is retried with the same id and body
// through the next live pod, for up to 30 s.
type PodLoad struct {
	pn       *PodNet
	rate     int
	maxDelay time.Duration
	prefix   string
	stop     chan struct{}
	genDone  chan struct{}
	wg       sync.WaitGroup

	mu         sync.Mutex
	rr         int
	acked      map[string]PodTask
	unanswered []string // given up (never acknowledged)
	refused    []string // a final answer other than 200/201
	errs       map[string]int
}

// StartLoad starts rate submits a second of tasks (ids prefix-N) due
// within [0, maxDelay); it runs until Stop (or the end of the test).
func (pn *PodNet) StartLoad(prefix string, rate int, maxDelay time.Duration) *PodLoad {
	l := &PodLoad{pn: pn, rate: rate, maxDelay: maxDelay, prefix: prefix,
		stop: make(chan struct{}), genDone: make(chan struct{}),
		acked: map[string]PodTask{}, errs: map[string]int{}}
	go l.generate()
	pn.t.Cleanup(l.Stop)
	return l
}

func (l *PodLoad) generate() {
	defer close(l.genDone)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	for n := 0; ; {
		select {
		case <-l.stop:
			return
		case now := <-tick.C:
			for want := int(now.Sub(start).Seconds() * float64(l.rate)); n < want; n++ {
				id := fmt.Sprintf("%s-%06d", l.prefix, n)
				delay := time.Duration(rand.Int64N(int64(l.maxDelay/time.Millisecond))) * time.Millisecond
				body := SubmitRequest{ID: id, Handler: PodHandler, Delay: delay.String(), Timeout: "10s"}.Body()
				l.wg.Add(1)
				go l.submit(id, delay, body)
			}
		}
	}
}

func (l *PodLoad) pick() *Pod {
	live := l.pn.Live()
	if len(live) == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rr++
	return live[l.rr%len(live)]
}

func (l *PodLoad) countErr(kind string) {
	l.mu.Lock()
	l.errs[kind]++
	l.mu.Unlock()
}

func (l *PodLoad) submit(id string, delay time.Duration, body []byte) {
	defer l.wg.Done()
	firstSent := time.Now()
	giveUp := firstSent.Add(podSubmitGiveUp)
	for time.Now().Before(giveUp) {
		p := l.pick()
		if p == nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := p.Client.Submit(ctx, body)
		cancel()
		switch {
		case err != nil:
			kind := SubmitErrKind(err)
			l.countErr(kind)
		case resp.Status == http.StatusOK || resp.Status == http.StatusCreated:
			task, derr := resp.Task()
			l.mu.Lock()
			switch {
			case derr != nil || task.ID != id:
				l.refused = append(l.refused, fmt.Sprintf("%s: success reply that is not the task: %s", id, resp))
			case task.NextRunAt != nil:
				l.acked[id] = PodTask{ID: id, Due: *task.NextRunAt, Via: p.ID, AckAt: time.Now()}
			default: // a retried submit of a task that runs already: due
				// no earlier than the first try plus the delay
				l.acked[id] = PodTask{ID: id, Due: firstSent.Add(delay), Via: p.ID, AckAt: time.Now()}
			}
			l.mu.Unlock()
			return
		case resp.Status == http.StatusServiceUnavailable || resp.Status == http.StatusTooManyRequests:
			code := "?"
			if e, derr := resp.APIError(); derr == nil {
				code = e.Error.Code
			}
			l.countErr(fmt.Sprintf("%d %s", resp.Status, code))
		default:
			l.mu.Lock()
			l.refused = append(l.refused, fmt.Sprintf("%s via %s: %s", id, p.ID, resp))
			l.mu.Unlock()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	l.mu.Lock()
	l.unanswered = append(l.unanswered, id)
	l.mu.Unlock()
}

// Stop stops generating and waits for the submits in progress (each gives
// up after 30 s). Stopping twice does nothing.
func (l *PodLoad) Stop() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.genDone
	l.wg.Wait()
}

// Acked returns the acknowledged tasks by id.
func (l *PodLoad) Acked() map[string]PodTask {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]PodTask, len(l.acked))
	for k, v := range l.acked {
		out[k] = v
	}
	return out
}

// Problems returns the submits given up (never acknowledged), the final
// refusals, and the transient errors by kind ("503 no_leader: 4").
func (l *PodLoad) Problems() (unanswered, refused []string, errs string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var kinds []string
	for k, n := range l.errs {
		kinds = append(kinds, fmt.Sprintf("%s: %d", k, n))
	}
	sort.Strings(kinds)
	return append([]string(nil), l.unanswered...), append([]string(nil), l.refused...), strings.Join(kinds, ", ")
}

// PodCall is one callback a pod's executor received.
type PodCall struct {
	Pod     string
	TaskID  string
	Attempt string
	At      time.Time
}

// callLog reads the pods' executor logs incrementally.
type callLog struct {
	mu   sync.Mutex
	off  map[string]int64 // bytes of each log read, whole lines only
	byID map[string][]PodCall
}

// Calls returns every callback the pods' executors received so far, by
// task id, each in the order received. It reads what the executors
// logged since the last call.
func (pn *PodNet) Calls() map[string][]PodCall {
	pn.calls.mu.Lock()
	defer pn.calls.mu.Unlock()
	if pn.calls.byID == nil {
		pn.calls.byID, pn.calls.off = map[string][]PodCall{}, map[string]int64{}
	}
	for _, p := range pn.Pods() {
		pn.calls.read(p)
	}
	out := make(map[string][]PodCall, len(pn.calls.byID))
	for id, cs := range pn.calls.byID {
		cs = append([]PodCall(nil), cs...)
		sort.SliceStable(cs, func(i, j int) bool { return cs[i].At.Before(cs[j].At) })
		out[id] = cs
	}
	return out
}

func (cl *callLog) read(p *Pod) {
	f, err := os.Open(p.AppLog)
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := f.Seek(cl.off[p.AppLog], io.SeekStart); err != nil {
		return
	}
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadString('\n')
		if err != nil { // a partial line: read it next time
			return
		}
		cl.off[p.AppLog] += int64(len(line))
		if !strings.HasPrefix(line, "{") {
			continue // the harness's own start and exit lines
		}
		var e struct {
			ReceivedAt time.Time `json:"received_at"`
			TaskID     string    `json:"task_id"`
			Attempt    string    `json:"attempt"`
		}
		if json.Unmarshal([]byte(line), &e) != nil || e.TaskID == "" {
			continue
		}
		cl.byID[e.TaskID] = append(cl.byID[e.TaskID], PodCall{Pod: p.ID, TaskID: e.TaskID, Attempt: e.Attempt, At: e.ReceivedAt})
	}
}
