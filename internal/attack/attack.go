// Package attack holds the hostile clients of the listener attack tests
// (ipc's and peerapi's TestAttack_*): many idle connections held by a
// helper process, slowloris clients that send headers one byte at a
// time, and the timing of the other clients' requests. The idle
// connections live in a child process (the test binary run again) because
// both ends of 10 000 connections would not fit the descriptor limit of
// one process (RLIMIT_NOFILE is often 20 000 and cannot always be raised).
//
// It imports only the standard library.
package attack

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EnvRun, set to 1, runs the attack tests: .ci/test sets it in its
// hostile-input step, after e2e, so that 10 000 connections are not
// opened beside the timing-sensitive tests.
const EnvRun = "AX_ATTACK_TESTS"

// Require skips the calling test unless EnvRun is set.
func Require(t testing.TB) {
	t.Helper()
	if os.Getenv(EnvRun) != "1" {
		t.Skipf("an attack test: run it with %s=1 (.ci/test does, after e2e)", EnvRun)
	}
}

// The environment of the helper process (IdleHelper).
const (
	envNetwork = "AX_ATTACK_NETWORK" // unix or tcp
	envAddr    = "AX_ATTACK_ADDR"    // the socket path or HOST:PORT
	envN       = "AX_ATTACK_N"       // how many connections
	envLocalIP = "AX_ATTACK_LOCAL_IP"
)

// IdleResult is what the helper saw of its connections once the server
// was done with them.
type IdleResult struct {
	// Dialed is how many connections were made (of the N asked for).
	Dialed int `json:"dialed"`
	// Silent were closed by the server without a byte.
	Silent int `json:"silent"`
	// Answered got bytes before the close; Answers counts their first
	// lines ("HTTP/1.1 429 Too Many Requests").
	Answered int            `json:"answered"`
	Answers  map[string]int `json:"answers"`
	// Open were still open when the helper gave up (30 s).
	Open int `json:"open"`
}

// Idle is a running helper process holding idle connections.
type Idle struct {
	cmd *exec.Cmd
	out *bufio.Reader
}

// StartIdle runs the test binary again as a helper (the calling package
// must have a test that calls IdleHelper and is selected by helperTest,
// a -test.run pattern) that opens n connections to addr on network, from
// localIP for tcp ("" lets the kernel choose), sends nothing on them and
// waits for the server to close each. It returns once they are all
// open.
func StartIdle(t testing.TB, helperTest, network, addr string, n int, localIP string) *Idle {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+helperTest+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envNetwork+"="+network, envAddr+"="+addr, envN+"="+strconv.Itoa(n), envLocalIP+"="+localIP)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	i := &Idle{cmd: cmd, out: bufio.NewReader(stdout)}
	line, err := i.line("ready")
	if err != nil {
		t.Fatalf("idle helper: %v", err)
	}
	t.Logf("idle helper: %s", line)
	return i
}

// line reads the helper's output up to a line starting with prefix.
func (i *Idle) line(prefix string) (string, error) {
	for {
		l, err := i.out.ReadString('\n')
		if err != nil {
			return "", fmt.Errorf("no %q line from the helper: %w", prefix, err)
		}
		if rest, ok := strings.CutPrefix(l, "attack: "+prefix+" "); ok {
			return strings.TrimSpace(rest), nil
		}
	}
}

// Wait waits for the helper's result: every connection closed by the
// server, or 30 s.
func (i *Idle) Wait(t testing.TB) IdleResult {
	t.Helper()
	l, err := i.line("result")
	if err != nil {
		t.Fatalf("idle helper: %v", err)
	}
	var r IdleResult
	if err := json.Unmarshal([]byte(l), &r); err != nil {
		t.Fatalf("idle helper result %q: %v", l, err)
	}
	return r
}

// IdleHelper is the helper process's side of StartIdle; call it from a
// test of its own. It skips unless run by StartIdle.
func IdleHelper(t *testing.T) {
	network, addr := os.Getenv(envNetwork), os.Getenv(envAddr)
	if network == "" {
		t.Skip("the helper process of an attack test (started by it)")
	}
	n, _ := strconv.Atoi(os.Getenv(envN))
	d := net.Dialer{Timeout: 5 * time.Second}
	if ip := os.Getenv(envLocalIP); ip != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(ip)}
	}
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := Retry(func() (net.Conn, error) { return d.Dial(network, addr) })
		if err != nil {
			fmt.Fprintf(os.Stderr, "attack: dial %d: %v\n", len(conns), err)
			break
		}
		conns = append(conns, c)
	}
	fmt.Printf("attack: ready %d of %d connections open\n", len(conns), n)
	r := IdleResult{Dialed: len(conns), Answers: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	deadline := time.Now().Add(30 * time.Second)
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			_ = c.SetReadDeadline(deadline)
			b, err := io.ReadAll(c)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case len(b) > 0:
				r.Answered++
				first, _, _ := strings.Cut(string(b), "\r\n")
				r.Answers[first]++
			case err != nil:
				r.Open++
			default:
				r.Silent++
			}
		}()
	}
	wg.Wait()
	b, _ := json.Marshal(r)
	fmt.Printf("attack: result %s\n", b)
}

// Retry calls dial until it succeeds, fails otherwise than with EAGAIN, or
// 10 s have passed. A Unix socket refuses a connection with EAGAIN when
// its listen backlog is full, which a dialer that outpaces the server's
// accept loop sees; an attacker would dial again.
func Retry(dial func() (net.Conn, error)) (net.Conn, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := dial()
		if err == nil || !errors.Is(err, syscall.EAGAIN) || time.Now().After(deadline) {
			return c, err
		}
		time.Sleep(time.Millisecond)
	}
}

// RaiseNoFile makes room for n descriptors in the test process, raising
// the hard limit too where it may (root with CAP_SYS_RESOURCE); it skips
// the test when the limit stays below n.
func RaiseNoFile(t testing.TB, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("getrlimit: %v", err)
	}
	if lim.Cur >= n {
		return
	}
	err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: max(lim.Max, n)})
	if err != nil && lim.Max >= n {
		err = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: lim.Max})
	}
	if err != nil {
		t.Skipf("needs %d file descriptors; RLIMIT_NOFILE is %d (hard %d) and cannot be raised: %v", n, lim.Cur, lim.Max, err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) })
}

// Latencies runs n requests with do, one after another, failing t at the
// first that fails, and returns their durations, sorted.
func Latencies(t testing.TB, n int, do func() error) []time.Duration {
	t.Helper()
	d := make([]time.Duration, n)
	for i := range n {
		start := time.Now()
		if err := do(); err != nil {
			t.Fatalf("request %d of %d: %v", i+1, n, err)
		}
		d[i] = time.Since(start)
	}
	slices.Sort(d)
	return d
}

// Pct is the p-th percentile of sorted durations.
func Pct(sorted []time.Duration, p int) time.Duration { return sorted[(len(sorted)-1)*p/100] }

// SlowResult is what one slowloris client saw.
type SlowResult struct {
	// Sent is how many bytes of its headers it sent.
	Sent int
	// Closed: the server closed the connection (or answered) before the
	// headers were all sent.
	Closed bool
	// Answer is the first line of what the server sent, if anything.
	Answer string
}

// Slowloris is a set of running slowloris clients.
type Slowloris struct {
	wg  sync.WaitGroup
	res []SlowResult
}

// Wait waits for every client to end and returns what each saw.
func (s *Slowloris) Wait() []SlowResult { s.wg.Wait(); return s.res }

// StartSlowloris starts n clients on connections from dial that each send
// request (its line and headers) one byte every 100 ms; a request of 600
// bytes takes a minute. Each ends when the server answers or closes the
// connection, or when all is sent.
func StartSlowloris(t testing.TB, n int, request string, dial func() (net.Conn, error)) *Slowloris {
	t.Helper()
	s := &Slowloris{res: make([]SlowResult, n)}
	for i := range n {
		c, err := Retry(dial)
		if err != nil {
			t.Fatalf("dial slowloris %d: %v", i, err)
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			answer := make(chan string, 1)
			go func() {
				b, _ := io.ReadAll(c)
				first, _, _ := strings.Cut(string(b), "\r\n")
				answer <- first
			}()
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for j := range len(request) {
				select {
				case a := <-answer:
					s.res[i] = SlowResult{Sent: j, Closed: true, Answer: a}
					return
				case <-tick.C:
				}
				if _, err := c.Write([]byte{request[j]}); err != nil {
					s.res[i] = SlowResult{Sent: j, Closed: true, Answer: <-answer}
					return
				}
			}
			s.res[i] = SlowResult{Sent: len(request)}
		}()
	}
	return s
}
