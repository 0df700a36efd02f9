package sidecartest

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/axsched/ax/internal/metricstext"
)

// Response is an answer of node's application API over HTTP.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// HTTP sends method path (with body, nil for none; JSON) to node i's
// application API socket, as an app would, and returns the answer; it
// fails the test on a transport error. A 503 no_leader (an election:
// Raft's timeouts are real time, and a loaded machine can miss one) is
// sent again until PollFor, as the Go client does for its calls, all of
// which are idempotent.
func (c *Cluster) HTTP(i int, method, path string, body []byte) Response {
	c.t.Helper()
	deadline := time.Now().Add(PollFor)
	for {
		r := c.http1(i, method, path, body)
		if r.Status != http.StatusServiceUnavailable || !bytes.Contains(r.Body, []byte(`"no_leader"`)) || time.Now().After(deadline) {
			return r
		}
		time.Sleep(10 * PollEvery)
	}
}

func (c *Cluster) http1(i int, method, path string, body []byte) Response {
	c.t.Helper()
	sock := c.Socket(i)
	cl := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}, Timeout: PollFor}
	defer cl.CloseIdleConnections()
	var resp Response
	var err error
	c.Do(func() {
		var r io.Reader
		if body != nil {
			r = bytes.NewReader(body)
		}
		req, e := http.NewRequest(method, "http://ax"+path, r)
		if e != nil {
			err = e
			return
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		hr, e := cl.Do(req)
		if e != nil {
			err = e
			return
		}
		defer hr.Body.Close()
		b, e := io.ReadAll(hr.Body)
		resp, err = Response{Status: hr.StatusCode, Header: hr.Header, Body: b}, e
	})
	if err != nil {
		c.t.Fatalf("%s %s on n%d: %v", method, path, i, err)
	}
	return resp
}

// Metrics scrapes node i's GET /metrics: sample name with its labels, as
// written (`ax_tasks{state="WAITING"}`), to value.
func (c *Cluster) Metrics(i int) map[string]float64 {
	c.t.Helper()
	resp := c.HTTP(i, "GET", "/metrics", nil)
	if resp.Status != http.StatusOK {
		c.t.Fatalf("GET /metrics on n%d: %d %s", i, resp.Status, resp.Body)
	}
	out, err := metricstext.Parse(resp.Body)
	if err != nil {
		c.t.Fatalf("GET /metrics on n%d: %v", i, err)
	}
	return out
}

// RetryAfter is the answer's Retry-After in seconds as a duration, 0
// without one.
func (r Response) RetryAfter() time.Duration {
	n, err := strconv.Atoi(r.Header.Get("Retry-After"))
	if err != nil {
		return 0
	}
	return time.Duration(n) * time.Second
}
