package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/valyala/fastjson"

	"github.com/axsched/ax/clients/go/axapi"
)

// submitter sends the one-task submits of one caller of the throughput
// workload (newFastSubmitter). submit posts body, the encoded submit
// request of task id, and returns nil when the answer is 200 or 201 with
// the task view of id, else an error (with the API's code and message
// when the answer has them). Not safe for concurrent use.
type submitter interface {
	submit(body []byte, id string, deadline time.Time) error
	close()
}

// appendSubmitRequest appends the request POST /v1/tasks carrying body
// (a JSON submit request) to dst: HTTP/1.1, keep-alive, Content-Length.
func appendSubmitRequest(dst, body []byte) []byte {
	dst = append(dst, "POST /v1/tasks HTTP/1.1\r\nHost: ax\r\nContent-Type: application/json\r\nContent-Length: "...)
	dst = strconv.AppendInt(dst, int64(len(body)), 10)
	dst = append(dst, "\r\n\r\n"...)
	return append(dst, body...)
}

// errIncomplete: the answer needs more bytes than read so far.
var errIncomplete = errors.New("incomplete answer")

// parseAnswer parses one HTTP/1.1 answer at the start of b. It returns
// the status code, the body, whether the connection stays open, and the
// number of bytes of b the answer used; errIncomplete when b holds only
// a part of it, another error when it is malformed (no Content-Length, a
// chunked body: the API's answers to a submit have neither).
func parseAnswer(b []byte) (status int, body []byte, keep bool, n int, err error) {
	end := bytes.Index(b, []byte("\r\n\r\n"))
	if end < 0 {
		if len(b) > 64<<10 {
			return 0, nil, false, 0, errors.New("answer header over 64 KiB")
		}
		return 0, nil, false, 0, errIncomplete
	}
	head := b[:end]
	line, rest, _ := bytes.Cut(head, []byte("\r\n"))
	proto, code, ok := bytes.Cut(line, []byte(" "))
	if !ok || !bytes.HasPrefix(proto, []byte("HTTP/1.")) || len(code) < 3 {
		return 0, nil, false, 0, fmt.Errorf("bad status line %.60q", line)
	}
	status, err = strconv.Atoi(string(code[:3]))
	if err != nil || status < 100 {
		return 0, nil, false, 0, fmt.Errorf("bad status line %.60q", line)
	}
	keep = bytes.Equal(proto, []byte("HTTP/1.1"))
	length := -1
	for len(rest) > 0 {
		var h []byte
		h, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		name, val, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			return 0, nil, false, 0, fmt.Errorf("bad header line %.60q", h)
		}
		val = bytes.TrimSpace(val)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			length, err = strconv.Atoi(string(val))
			if err != nil || length < 0 {
				return 0, nil, false, 0, fmt.Errorf("bad Content-Length %q", val)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return 0, nil, false, 0, fmt.Errorf("unexpected Transfer-Encoding %q", val)
		case bytes.EqualFold(name, []byte("Connection")):
			keep = !bytes.EqualFold(val, []byte("close"))
		}
	}
	if length < 0 {
		return 0, nil, false, 0, errors.New("answer without Content-Length")
	}
	n = end + 4 + length
	if len(b) < n {
		return 0, nil, false, 0, errIncomplete
	}
	return status, b[end+4 : n], keep, n, nil
}

// checkAnswer turns the answer to the submit of task id into nil or an
// error: 200 or 201 with the task view of id (the bench checks its id and
// state), or the API's error. It parses with p (fastjson, reused by the
// caller): encoding/json's decode of the ~330-byte view into two fields,
// used before, cost 2.6–3.0 µs and 7 allocations against 0.3–0.4 µs and
// none now (`BenchmarkCheckAnswer`), CPU the bench took from the nodes
// it measures on a small machine.
func checkAnswer(p *fastjson.Parser, status int, body []byte, id string) error {
	switch status {
	case 200, 201:
		v, err := p.ParseBytes(body)
		if err != nil {
			return fmt.Errorf("POST /v1/tasks: %d: answer: %w", status, err)
		}
		got, state := v.GetStringBytes("id"), v.GetStringBytes("state")
		if string(got) != id || len(state) == 0 {
			return fmt.Errorf("POST /v1/tasks: %d: answer for task %q (state %q), want %q", status, got, state, id)
		}
		return nil
	default:
		return answerError("POST /v1/tasks", status, body)
	}
}

// answerError is the error of an API answer other than success: its status
// with the API's code and message when body has them, else the body's
// start.
func answerError(call string, status int, body []byte) error {
	var eb axapi.ErrorBody
	if json.Unmarshal(body, &eb) == nil && eb.Error.Code != "" {
		return fmt.Errorf("%s: %d %s: %s", call, status, eb.Error.Code, eb.Error.Message)
	}
	return fmt.Errorf("%s: %d: %.80s", call, status, body)
}
