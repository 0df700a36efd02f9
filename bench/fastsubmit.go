package bench

import (
	"encoding/json"
	"fmt"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/axsched/ax/clients/go/axapi"
)

// fastSubmitter sends the one-task submits of the throughput workload
// (POST /v1/tasks) over one connection to a node's Unix socket with
// fasthttp, like one app with its own connection. It reads the answer's
// status only (and an error body's message): the Go client's net/http
// (a read and a write goroutine per connection, the task decoded) cost
// the bench about 45 µs of CPU per request, which the node it measures
// shares on a small machine. One per caller; not safe for concurrent use.
type fastSubmitter struct {
	hc   *fasthttp.HostClient
	req  *fasthttp.Request
	resp *fasthttp.Response
}

func newFastSubmitter(socket string, timeout time.Duration) *fastSubmitter {
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

// submit posts one encoded submit request; an answer other than 200 or
// 201 is an error with the API's code and message.
func (f *fastSubmitter) submit(body []byte, deadline time.Time) error {
	f.req.Reset()
	f.resp.Reset()
	f.req.SetRequestURI("http://ax/v1/tasks")
	f.req.Header.SetMethod(fasthttp.MethodPost)
	f.req.Header.SetContentType("application/json")
	f.req.SetBodyRaw(body)
	if err := f.hc.DoDeadline(f.req, f.resp, deadline); err != nil {
		return fmt.Errorf("POST /v1/tasks: %w", err)
	}
	switch st := f.resp.StatusCode(); st {
	case fasthttp.StatusOK, fasthttp.StatusCreated:
		return nil
	default:
		var eb axapi.ErrorBody
		if json.Unmarshal(f.resp.Body(), &eb) == nil && eb.Error.Code != "" {
			return fmt.Errorf("POST /v1/tasks: %d %s: %s", st, eb.Error.Code, eb.Error.Message)
		}
		return fmt.Errorf("POST /v1/tasks: %d: %.80s", st, f.resp.Body())
	}
}

// close releases the connection and the buffers.
func (f *fastSubmitter) close() {
	f.hc.CloseIdleConnections()
	fasthttp.ReleaseRequest(f.req)
	fasthttp.ReleaseResponse(f.resp)
}
