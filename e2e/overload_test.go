package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axsched/ax/e2e/harness"
)

// Executor overload and absence are backpressure, never a failed attempt
// (issue 12): a plain standard-library Python executor with the default
// listen backlog of 5, registered with max_concurrency 100, gets 3000
// tasks of 100 ms; connects that find its accept queue full (EAGAIN on a
// Unix socket, a dropped SYN over TCP) must not count as attempts.

const (
	overloadHandler = "ov.sleep"
	overloadTasks   = 3000
	// overloadBound is a generous bound on the 3000-task run; the issue's
	// target on the reference machine is 8 s, which the test logs.
	overloadBound = 40 * time.Second
)

// pyExec is a Python executor process of testdata/overload_executor.py.
type pyExec struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startPyExec starts overload_executor.py in mode (unix, tcp, worker) on
// addr, each callback sleeping sleep seconds, and waits for it to be ready.
func startPyExec(t *testing.T, py, mode, addr, sleep string, env ...string) *pyExec {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, py, harness.RepoDir(t, "e2e", "testdata", "overload_executor.py"), mode, addr, sleep)
	cmd.Env = harness.PythonEnv(t, env...)
	cmd.Stderr = os.Stderr
	harness.InOwnGroup(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &pyExec{cancel: cancel, done: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				close(ready)
			}
		}
		cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	select {
	case <-ready:
	case <-p.done:
		t.Fatalf("python executor %s %s exited before it was ready", mode, addr)
	case <-time.After(20 * time.Second):
		t.Fatalf("python executor %s %s not ready after 20 s", mode, addr)
	}
	return p
}

// kill ends the executor's process group (SIGKILL) and waits for it.
func (p *pyExec) kill() {
	p.cancel()
	<-p.done
}

// registerExecutor registers an executor for overloadHandler on n.
func registerExecutor(t *testing.T, n *harness.Node, name, url string, maxConc int) {
	t.Helper()
	body := fmt.Sprintf(`{"name":%q,"handlers":[%q],"url":%q,"max_concurrency":%d}`, name, overloadHandler, url, maxConc)
	resp, err := n.Client.Do(harness.ReqCtx(t), "POST", "/v1/executors", []byte(body))
	if err != nil || (resp.Status != 201 && resp.Status != 200) {
		t.Fatalf("register %s: %v %v", name, resp, err)
	}
}

// submitOverloadBatch submits ids as tasks of overloadHandler in batches of 100.
func submitOverloadBatch(t *testing.T, n *harness.Node, ids []string) {
	t.Helper()
	for len(ids) > 0 {
		k := min(len(ids), 100)
		items := make([]string, k)
		for i, id := range ids[:k] {
			items[i] = fmt.Sprintf(`{"id":%q,"handler":%q}`, id, overloadHandler)
		}
		resp, err := n.Client.Do(harness.ReqCtx(t), "POST", "/v1/tasks/batch", []byte(`{"tasks":[`+strings.Join(items, ",")+`]}`))
		if err != nil || resp.Status != 200 {
			t.Fatalf("batch submit: %v %v", resp, err)
		}
		ids = ids[k:]
	}
}

// overloadWatch polls n's metrics until want tasks are SUCCESS (or timeout)
// and reports the highest executor limit seen and whether a circuit opened.
type overloadWatch struct {
	maxLimit    float64
	circuitOpen bool
	limits      []string
}

func watchUntilDone(t *testing.T, n *harness.Node, executor string, want int, timeout time.Duration) overloadWatch {
	t.Helper()
	var w overloadWatch
	deadline := time.Now().Add(timeout)
	last := -1.0
	for {
		m := harness.Scrape(t, n)
		if l, ok := m[fmt.Sprintf(`ax_executor_limit{executor=%q}`, executor)]; ok {
			w.maxLimit = max(w.maxLimit, l)
			if l != last {
				w.limits = append(w.limits, strconv.FormatFloat(l, 'f', 0, 64))
				last = l
			}
		}
		for k, v := range m {
			if strings.HasPrefix(k, "ax_circuit_open{") && v != 0 {
				w.circuitOpen = true
			}
		}
		done := m[`ax_tasks{state="SUCCESS"}`]
		if int(done) >= want {
			return w
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v of %d tasks SUCCESS after %v (DEAD %v, WAITING %v, RUNNING %v)", done, want, timeout,
				m[`ax_tasks{state="DEAD"}`], m[`ax_tasks{state="WAITING"}`], m[`ax_tasks{state="RUNNING"}`])
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkAllOnce checks that every task of n is SUCCESS after exactly one
// attempt, that no failed attempt was counted and no circuit opened.
func checkAllOnce(t *testing.T, n *harness.Node, want int, w overloadWatch) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tasks, err := harness.ListTasks(ctx, n.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != want {
		t.Fatalf("%d tasks listed, want %d", len(tasks), want)
	}
	bad := 0
	for _, task := range tasks {
		if task.State != "SUCCESS" || task.Attempts != 1 {
			if bad++; bad <= 5 {
				t.Errorf("task %s: %s after %d attempts (last error %q), want SUCCESS after 1", task.ID, task.State, task.Attempts, task.LastError)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d tasks not SUCCESS after exactly one attempt", bad, want)
	}
	m := harness.Scrape(t, n)
	for _, outcome := range []string{"failed", "timeout"} {
		if v := m[harness.AttemptsMetric(overloadHandler, outcome)]; v != 0 {
			t.Errorf("%v attempts counted %s", v, outcome)
		}
	}
	if w.circuitOpen || strings.Contains(n.Logs(), "circuit breaker state changed") {
		t.Errorf("the circuit breaker opened")
	}
	t.Logf("unavailable callbacks (not attempts): %v; executor limit seen: max %v, changes %s",
		m[harness.AttemptsMetric(overloadHandler, "unavailable")], w.maxLimit, strings.Join(w.limits, " "))
}

// runOverloadBurst submits 3000 tasks and checks they all succeed first time.
func runOverloadBurst(t *testing.T, n *harness.Node, executor, variant string) {
	t.Helper()
	ids := make([]string, overloadTasks)
	for i := range ids {
		ids[i] = fmt.Sprintf("ov-%04d", i)
	}
	start := time.Now()
	submitOverloadBatch(t, n, ids)
	w := watchUntilDone(t, n, executor, overloadTasks, 2*time.Minute)
	took := time.Since(start)
	t.Logf("%s: %d tasks x 100 ms, max_concurrency 100: all SUCCESS in %.2f s (target 8 s)", variant, overloadTasks, took.Seconds())
	checkAllOnce(t, n, overloadTasks, w)
	// AX_E2E_OVERLOAD_LOG=1 (with AX_E2E_LOG_LEVEL=debug) prints the
	// limiter's changes and the unavailable callbacks, with their reasons.
	if os.Getenv("AX_E2E_OVERLOAD_LOG") != "" {
		for _, l := range strings.Split(n.Logs(), "\n") {
			if strings.Contains(l, "concurrency limit changed") || strings.Contains(l, "not an attempt") {
				t.Log(l)
			}
		}
	}
	if took > overloadBound {
		t.Errorf("%s: took %v, over the generous bound %v", variant, took, overloadBound)
	}
}

func overloadCluster(t *testing.T) (*harness.Node, string) {
	t.Helper()
	c := harness.NewCluster(t, harness.WithSize(1), harness.WithBootstrapExpect(1), harness.WithExecutorsOn())
	c.WaitReady()
	dir, err := os.MkdirTemp("", "axov")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return c.Nodes[0], dir
}

// TestOverload_PlainPythonUnix: the stdlib executor on a Unix socket.
func TestOverload_PlainPythonUnix(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	py := harness.RequirePython(t)
	n, dir := overloadCluster(t)
	sock := filepath.Join(dir, "ex.sock")
	startPyExec(t, py, "unix", sock, "0.1")
	registerExecutor(t, n, "ov-exec", "unix://"+sock, 100)
	runOverloadBurst(t, n, "ov-exec", "plain python, unix socket, backlog 5")
}

// TestOverload_PlainPythonTCP: the same executor on loopback TCP.
func TestOverload_PlainPythonTCP(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	py := harness.RequirePython(t)
	n, _ := overloadCluster(t)
	port := harness.FreePorts(t, 1)[0]
	startPyExec(t, py, "tcp", strconv.Itoa(port), "0.1")
	registerExecutor(t, n, "ov-exec", fmt.Sprintf("http://127.0.0.1:%d", port), 100)
	runOverloadBurst(t, n, "ov-exec", "plain python, loopback tcp, backlog 5")
}

// TestOverload_PythonWorker: the provided axsched.Worker at max_threads=100
// (it registers itself with max_concurrency 100).
func TestOverload_PythonWorker(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	py := harness.RequirePython(t)
	n, dir := overloadCluster(t)
	startPyExec(t, py, "worker", filepath.Join(dir, "w.sock"), "0.1", "AX_SOCKET="+n.Socket)
	runOverloadBurst(t, n, "ov-worker", "axsched.Worker, max_threads 100")
}

// TestOverload_ExecutorKilled20s: the executor process is killed for 20 s
// during a stream of tasks (its socket file stays: connects are refused).
// No attempt is counted for the outage, no task goes DEAD, and all finish
// after it returns.
func TestOverload_ExecutorKilled20s(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	py := harness.RequirePython(t)
	n, dir := overloadCluster(t)
	sock := filepath.Join(dir, "ex.sock")
	ex := startPyExec(t, py, "unix", sock, "0.05")
	registerExecutor(t, n, "ov-exec", "unix://"+sock, 100)

	// A stream of 50 tasks/s for 30 s: 5 s up, 20 s down, 5 s up.
	var submitted atomic.Int64
	// pause holds the stream: a batch is submitted under it, so once the
	// test holds it no submit is under way.
	var pause sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			ids := make([]string, 5)
			for j := range ids {
				ids[j] = fmt.Sprintf("kill-%05d", i*5+j)
			}
			pause.Lock()
			submitOverloadBatch(t, n, ids)
			submitted.Add(int64(len(ids)))
			pause.Unlock()
		}
	}()
	time.Sleep(5 * time.Second)
	// Kill it between callbacks: one running at the kill may have done
	// its work, and counts as a failed attempt (rightly). The stream
	// pauses until every task submitted is done, and goes on once it is
	// dead.
	pause.Lock()
	harness.WaitFor(t, 10*time.Second, 10*time.Millisecond, "every task so far SUCCESS", func() error {
		m := harness.Scrape(t, n)
		if f, s := m[`ax_executor_in_flight{executor="ov-exec"}`], m[`ax_tasks{state="SUCCESS"}`]; f != 0 || s != float64(submitted.Load()) {
			return fmt.Errorf("%v in flight, %v of %d SUCCESS", f, s, submitted.Load())
		}
		return nil
	})
	ex.kill()
	pause.Unlock()
	t.Logf("executor killed after %d tasks submitted", submitted.Load())
	time.Sleep(20 * time.Second)
	m := harness.Scrape(t, n)
	t.Logf("after 20 s without the executor: %d submitted, WAITING %v, RUNNING %v, SUCCESS %v, DEAD %v, unavailable callbacks %v",
		submitted.Load(), m[`ax_tasks{state="WAITING"}`], m[`ax_tasks{state="RUNNING"}`], m[`ax_tasks{state="SUCCESS"}`],
		m[`ax_tasks{state="DEAD"}`], m[harness.AttemptsMetric(overloadHandler, "unavailable")])
	if d := m[`ax_tasks{state="DEAD"}`]; d != 0 {
		t.Errorf("%v tasks DEAD during the outage", d)
	}
	// Meanwhile the due tasks wait, and say why: the executor is gone.
	// The stream is held while they are listed, so that none was just
	// submitted and not parked yet.
	pause.Lock()
	harness.WaitFor(t, 5*time.Second, 50*time.Millisecond, "every WAITING task executor_unavailable", func() error {
		resp, err := n.Client.Do(harness.ReqCtx(t), "GET", "/v1/tasks?state=waiting&limit=500", nil)
		if err != nil || resp.Status != 200 {
			return fmt.Errorf("list: %v %v", resp, err)
		}
		var page struct {
			Tasks []struct {
				ID            string `json:"id"`
				WaitingReason string `json:"waiting_reason"`
				Attempts      int    `json:"attempts"`
			} `json:"tasks"`
		}
		if err := json.Unmarshal(resp.Body, &page); err != nil || len(page.Tasks) == 0 {
			return fmt.Errorf("no WAITING task listed during the outage (%v): %s", err, resp.Body)
		}
		for _, v := range page.Tasks {
			if v.WaitingReason != "executor_unavailable" || v.Attempts != 0 {
				return fmt.Errorf("%s waits with reason %q after %d attempts, want executor_unavailable and 0", v.ID, v.WaitingReason, v.Attempts)
			}
		}
		return nil
	})
	pause.Unlock()
	back := time.Now()
	startPyExec(t, py, "unix", sock, "0.05")
	time.Sleep(5 * time.Second)
	close(stop)
	wg.Wait()
	total := int(submitted.Load())
	w := watchUntilDone(t, n, "ov-exec", total, time.Minute)
	t.Logf("all %d tasks SUCCESS %.1f s after the executor returned", total, time.Since(back).Seconds())
	checkAllOnce(t, n, total, w)
}

// TestOverload_ReRegistration: an executor registered with max_concurrency
// 10, deleted, and registered again under the same name with 100: a burst
// then reaches the new limit (in flight above 10), and while it is deleted
// its ax_executor_* series are gone from /metrics.
func TestOverload_ReRegistration(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	py := harness.RequirePython(t)
	n, dir := overloadCluster(t)
	sock := filepath.Join(dir, "ex.sock")
	startPyExec(t, py, "unix", sock, "0.1")
	url := "unix://" + sock
	// burst submits count tasks and waits until total tasks are SUCCESS.
	burst := func(prefix string, count, total int) (maxLimit, maxFlight float64) {
		ids := make([]string, count)
		for i := range ids {
			ids[i] = fmt.Sprintf("%s-%04d", prefix, i)
		}
		submitOverloadBatch(t, n, ids)
		var done float64
		harness.WaitFor(t, time.Minute, 20*time.Millisecond, prefix+" burst done", func() error {
			m := harness.Scrape(t, n)
			maxLimit = max(maxLimit, m[`ax_executor_limit{executor="ov-exec"}`])
			maxFlight = max(maxFlight, m[`ax_executor_in_flight{executor="ov-exec"}`])
			if done = m[`ax_tasks{state="SUCCESS"}`]; done < float64(total) {
				return fmt.Errorf("%v SUCCESS", done)
			}
			return nil
		})
		return maxLimit, maxFlight
	}
	registerExecutor(t, n, "ov-exec", url, 10)
	if l, f := burst("small", 300, 300); l > 10 || f > 10 {
		t.Fatalf("max_concurrency 10: limit reached %v, in flight %v", l, f)
	}
	resp, err := n.Client.Do(harness.ReqCtx(t), "DELETE", "/v1/executors/ov-exec", nil)
	if err != nil || resp.Status/100 != 2 {
		t.Fatalf("delete executor: %v %v", resp, err)
	}
	harness.WaitFor(t, 10*time.Second, 20*time.Millisecond, "the deleted executor's series to leave /metrics", func() error {
		for k := range harness.Scrape(t, n) {
			if strings.HasPrefix(k, "ax_executor_") && strings.Contains(k, `executor="ov-exec"`) {
				return fmt.Errorf("still there: %s", k)
			}
		}
		return nil
	})
	registerExecutor(t, n, "ov-exec", url, 100)
	l, f := burst("big", 3000, 3300)
	t.Logf("registered again with max_concurrency 100: limit reached %v, in flight up to %v", l, f)
	if l <= 10 || f <= 10 {
		t.Fatalf("after registering again with max_concurrency 100: limit reached %v, in flight %v; want above the old 10", l, f)
	}
	if l > 100 {
		t.Fatalf("limit %v above max_concurrency 100", l)
	}
}
