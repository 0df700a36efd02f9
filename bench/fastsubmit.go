package bench

import (
	"encoding/json"
	"fmt"
	"net"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"github.com/axsched/ax/clients/go/axapi"
	"github.com/axsched/ax/internal/rawio"
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
	hc     *fasthttp.HostClient
	req    *fasthttp.Request
	resp   *fasthttp.Response
	body   []byte          // submitBatch's request body
	parser fastjson.Parser // the answers (checkAnswer, submitBatch)
}

func newFastSubmitter(socket string, timeout time.Duration) submitter {
	return &fastSubmitter{
		hc: &fasthttp.HostClient{
			Addr: "ax",
			Dial: func(string) (net.Conn, error) {
				c, err := net.Dial("unix", socket)
				if err != nil {
					return nil, err
				}
				return rawio.Wrap(c, clientOneP.Load), nil // raw on one P (ClientProcs)
			},
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
	return checkAnswer(&f.parser, f.resp.StatusCode(), f.resp.Body(), id)
}

// close releases the connection and the buffers.
func (f *fastSubmitter) close() {
	f.hc.CloseIdleConnections()
	fasthttp.ReleaseRequest(f.req)
	fasthttp.ReleaseResponse(f.resp)
}

// submitBatch posts one POST /v1/tasks/batch of items (encoded submit
// requests of the tasks ids, in order) and returns one result per item: an
// item answered other than 200 or 201 with the view of its own task (full,
// or with minimal its id and state: Prefer: return=minimal) is failed
// (with the API's message when it has one). The request body is
// the items joined (they are JSON already), and the answer is parsed with
// fastjson: encoding/json's decode of the 1 000 task views of an answer
// was about 60 % of the bench's CPU on the batched phase, which shares the
// machine with the nodes it measures.
func (f *fastSubmitter) submitBatch(items []json.RawMessage, ids []string, minimal bool, deadline time.Time) ([]batchResultLite, error) {
	f.req.Reset()
	f.resp.Reset()
	f.req.SetRequestURI("http://ax/v1/tasks/batch")
	f.req.Header.SetMethod(fasthttp.MethodPost)
	f.req.Header.SetContentType("application/json")
	if minimal {
		f.req.Header.Set(axapi.HeaderPrefer, axapi.PreferReturnMinimal)
	}
	f.body = append(f.body[:0], `{"tasks":[`...)
	for i, it := range items {
		if i > 0 {
			f.body = append(f.body, ',')
		}
		f.body = append(f.body, it...)
	}
	f.body = append(f.body, "]}"...)
	f.req.SetBodyRaw(f.body)
	if err := f.hc.DoDeadline(f.req, f.resp, deadline); err != nil {
		return nil, fmt.Errorf("POST /v1/tasks/batch: %w", err)
	}
	return checkBatchAnswer(&f.parser, f.resp.StatusCode(), f.resp.Body(), ids)
}

// checkBatchAnswer checks a batch answer (status, body) for the tasks
// ids: one result per id, in order, each 200 or 201 with the view of that
// task (its id, a state), else failed with the API's message.
func checkBatchAnswer(p *fastjson.Parser, status int, body []byte, ids []string) ([]batchResultLite, error) {
	if status != 200 {
		return nil, answerError("POST /v1/tasks/batch", status, body)
	}
	v, err := p.ParseBytes(body)
	if err != nil {
		return nil, fmt.Errorf("POST /v1/tasks/batch: answer: %w", err)
	}
	res := v.GetArray("results")
	if len(res) != len(ids) {
		return nil, fmt.Errorf("batch of %d answered with %d results", len(ids), len(res))
	}
	out := make([]batchResultLite, len(res))
	for i, r := range res {
		switch st := r.GetInt("status"); st {
		case 200, 201:
			if id, state := r.GetStringBytes("task", "id"), r.GetStringBytes("task", "state"); string(id) != ids[i] || len(state) == 0 {
				out[i] = batchResultLite{failed: true, msg: fmt.Sprintf("item %d: %d: answer for task %q (state %q), want %q", i, st, id, state, ids[i])}
			}
		default:
			out[i] = batchResultLite{failed: true, msg: fmt.Sprintf("item %d: %d %s: %s", i, st, r.GetStringBytes("error", "code"), r.GetStringBytes("error", "message"))}
		}
	}
	return out, nil
}
