package bench

import (
	"fmt"
	"net"
	"time"

	"github.com/valyala/fasthttp"
)

// fastSubmitter sends the one-task submits of the throughput workload
// (POST /v1/tasks) over one connection to a node's Unix socket with
// fasthttp, like one app with its own connection, for all phases but the
// one with a single caller (sockSubmitter). It parses the answer as
// sockSubmitter does (checkAnswer): the Go client's net/http
// (a read and a write goroutine per connection, the task decoded) cost
// the bench about 45 µs of CPU per request, which the node it measures
// shares on a small machine. One per caller; not safe for concurrent use.
type fastSubmitter struct {
	hc   *fasthttp.HostClient
	req  *fasthttp.Request
	resp *fasthttp.Response
}

func newFastSubmitter(socket string, timeout time.Duration) submitter {
	return &fastSubmitter{
		hc: &fasthttp.HostClient{
			Addr:         "ax",
			Dial:         func(string) (net.Conn, error) { return net.Dial("unix", socket) },
			MaxConns:     1,
			ReadTimeout:  timeout,
			WriteTimeout: timeout,
		},
		req: fasthttp.AcquireRequest(), resp: fasthttp.AcquireResponse(),
	}
}

// submit posts body, the encoded submit request of task id; an answer
// other than 200 or 201 with the view of task id is an error (with the
// API's code and message when it has them).
func (f *fastSubmitter) submit(body []byte, id string, deadline time.Time) error {
	f.req.Reset()
	f.resp.Reset()
	f.req.SetRequestURI("http://ax/v1/tasks")
	f.req.Header.SetMethod(fasthttp.MethodPost)
	f.req.Header.SetContentType("application/json")
	f.req.SetBodyRaw(body)
	if err := f.hc.DoDeadline(f.req, f.resp, deadline); err != nil {
		return fmt.Errorf("POST /v1/tasks: %w", err)
	}
	return checkAnswer(f.resp.StatusCode(), f.resp.Body(), id)
}

// close releases the connection and the buffers.
func (f *fastSubmitter) close() {
	f.hc.CloseIdleConnections()
	fasthttp.ReleaseRequest(f.req)
	fasthttp.ReleaseResponse(f.resp)
}
