package ipc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/axsched/ax/clients/go/axapi"
	"github.com/axsched/ax/sidecar/delivery/callback"
)

// DecodeSubmitBatch decodes and validates the body of POST /v1/tasks/batch,
// {"tasks": [<submit request>, ...]}: 1 to axapi.BatchMaxTasks items, each decoded
// and validated by DecodeSubmit. One invalid item fails the whole batch;
// the message names it ("tasks[3]: handler: required") and the error keeps
// the item's kind (ErrInvalid, ErrInvalidJSON, ErrTooLarge).
//
// A body of the usual shape is read in one pass (scanSubmitBatch); any
// other goes through encoding/json, with the same results and errors. A
// body that is not valid UTF-8 is ErrInvalidJSON (checkUTF8).
func DecodeSubmitBatch(body []byte) ([]TaskSpec, error) {
	if reqs, ok := scanSubmitBatch(body); ok { // valid UTF-8: the scanner reads no other
		specs := make([]TaskSpec, len(reqs))
		for i := range reqs {
			spec, err := reqs[i].spec()
			if err != nil {
				return nil, batchItemErr(i, err)
			}
			specs[i] = spec
		}
		return specs, nil
	}
	return decodeSubmitBatchJSON(body)
}

// decodeSubmitBatchJSON is DecodeSubmitBatch through encoding/json.
func decodeSubmitBatchJSON(body []byte) (specs []TaskSpec, err error) {
	defer checkUTF8(body, &specs, &err, hintPayload)
	var req struct {
		Tasks []json.RawMessage `json:"tasks"`
	}
	if err := decodeStrict(body, &req); err != nil {
		return nil, err
	}
	if req.Tasks == nil {
		return nil, Errorf(ErrInvalid, "tasks: required, an array of 1 to %d submit requests", axapi.BatchMaxTasks)
	}
	if n := len(req.Tasks); n < 1 || n > axapi.BatchMaxTasks {
		return nil, Errorf(ErrInvalid, "tasks: must hold 1 to %d submit requests, got %d", axapi.BatchMaxTasks, n)
	}
	specs = make([]TaskSpec, len(req.Tasks))
	for i, raw := range req.Tasks {
		if !bytes.HasPrefix(raw, []byte("{")) { // RawMessage holds the value without leading space
			return nil, Errorf(ErrInvalid, "tasks[%d]: must be a JSON object, got %s", i, jsonKind(raw))
		}
		spec, err := decodeBatchItem(raw)
		if err != nil {
			return nil, batchItemErr(i, err)
		}
		specs[i] = spec
	}
	return specs, nil
}

// batchItemErr is the error of item i of a batch: the item's kind, the
// message prefixed with its index.
func batchItemErr(i int, err error) error {
	kind := ErrInvalid
	_ = errors.As(err, &kind)
	return Errorf(kind, "tasks[%d]: %w", i, err)
}

// jsonKind names the type of a JSON value for messages.
func jsonKind(raw json.RawMessage) string {
	switch {
	case len(raw) == 0:
		return "nothing"
	case raw[0] == '[':
		return "an array"
	case raw[0] == '"':
		return "a string"
	case string(raw) == "null":
		return "null"
	case string(raw) == "true" || string(raw) == "false":
		return "a boolean"
	}
	return "a number"
}

// decodeEmpty accepts an empty body or an empty JSON object ({}), the body
// of POST /v1/tasks/{id}/retry.
func decodeEmpty(body []byte) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	var req struct{}
	if err := decodeStrict(body, &req); err != nil {
		return err
	}
	return utf8Error(body, "")
}

// DecodeHeartbeat decodes the body of POST /v1/tasks/{id}/heartbeat,
// {"attempt": N}, and returns N (required, >= 1).
func DecodeHeartbeat(body []byte) (attempt int, err error) {
	defer checkUTF8(body, &attempt, &err, "")
	var req struct {
		Attempt *int `json:"attempt"`
	}
	if err := decodeStrict(body, &req); err != nil {
		return 0, err
	}
	return checkAttempt(req.Attempt)
}

func checkAttempt(a *int) (int, error) {
	if a == nil {
		return 0, Errorf(ErrInvalid, "attempt: required, the attempt number from the Ax-Attempt header")
	}
	if *a < 1 {
		return 0, Errorf(ErrInvalid, "attempt: must be >= 1, got %d", *a)
	}
	return *a, nil
}

// DecodeAttemptResult decodes the body of POST /v1/tasks/{id}/result:
//
//   - attempt: required, >= 1: the Ax-Attempt of the callback answered 202.
//   - status: required, "success", "failed" (retried) or "permanent" (FAILED,
//     not retried).
//   - error: optional text for Task.LastError, valid UTF-8, at most
//     axapi.ResultErrorMaxBytes; only with "failed" or "permanent".
//   - result: optional JSON value, kept byte for byte; only with "success".
//
// A body that is not valid UTF-8 (in result too) is ErrInvalidJSON
// (checkUTF8).
func DecodeAttemptResult(body []byte) (res AttemptResult, err error) {
	defer checkUTF8(body, &res, &err, hintResult)
	var req struct {
		Attempt *int            `json:"attempt"`
		Status  *string         `json:"status"`
		Error   string          `json:"error"`
		Result  json.RawMessage `json:"result"`
	}
	if err := decodeStrict(body, &req); err != nil {
		return AttemptResult{}, err
	}
	if string(req.Result) == "null" {
		req.Result = nil
	}
	attempt, err := checkAttempt(req.Attempt)
	if err != nil {
		return AttemptResult{}, err
	}
	if req.Status == nil {
		return AttemptResult{}, Errorf(ErrInvalid, `status: required, one of "success", "failed", "permanent"`)
	}
	switch *req.Status {
	case axapi.ResultSuccess, axapi.ResultFailed, axapi.ResultPermanent:
	default:
		return AttemptResult{}, Errorf(ErrInvalid, `status: must be one of "success", "failed", "permanent", got %q`, *req.Status)
	}
	if req.Error != "" {
		if *req.Status == axapi.ResultSuccess {
			return AttemptResult{}, Errorf(ErrInvalid, `error: only with status "failed" or "permanent"`)
		}
		if len(req.Error) > axapi.ResultErrorMaxBytes {
			return AttemptResult{}, Errorf(ErrInvalid, "error: %d bytes, the limit is %d", len(req.Error), axapi.ResultErrorMaxBytes)
		}
		if !utf8.ValidString(req.Error) {
			return AttemptResult{}, Errorf(ErrInvalid, "error: not valid UTF-8")
		}
	}
	if req.Result != nil {
		if *req.Status != axapi.ResultSuccess {
			return AttemptResult{}, Errorf(ErrInvalid, `result: only with status "success"`)
		}
		if len(req.Result) > axapi.ResultMaxBytes {
			return AttemptResult{}, Errorf(ErrInvalid, "result: %d bytes, the limit is %d", len(req.Result), axapi.ResultMaxBytes)
		}
	}
	return AttemptResult{Attempt: attempt, Status: *req.Status, Error: req.Error, Result: req.Result}, nil
}

// parseListQuery checks the query of GET /v1/tasks: handler, state (a
// State* name, lower case accepted), limit (1..ListLimitMax, default
// ListLimitDefault) and cursor, each at most once. An empty value counts as
// absent; any other parameter is refused.
func parseListQuery(args iter.Seq2[[]byte, []byte]) (ListQuery, error) {
	q := ListQuery{Limit: ListLimitDefault}
	seen := map[string]bool{}
	for k, v := range args {
		key, val := string(k), string(v)
		switch key {
		case "handler", "state", "limit", "cursor":
		default:
			return ListQuery{}, Errorf(ErrInvalid, "unknown query parameter %q; known: handler, state, limit, cursor", key)
		}
		if seen[key] {
			return ListQuery{}, Errorf(ErrInvalid, "%s: give it at most once", key)
		}
		seen[key] = true
		if val == "" {
			continue
		}
		switch key {
		case "handler":
			if err := checkName("handler", val, axapi.HandlerMaxBytes); err != nil {
				return ListQuery{}, err
			}
			q.Handler = val
		case "state":
			q.State = strings.ToUpper(val)
			if !slices.Contains(axapi.States(), q.State) {
				return ListQuery{}, Errorf(ErrInvalid, "state: must be one of %s, got %q", strings.Join(axapi.States(), ", "), val)
			}
		case "limit":
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 || n > ListLimitMax {
				return ListQuery{}, Errorf(ErrInvalid, "limit: must be an integer from 1 to %d, got %q", ListLimitMax, val)
			}
			q.Limit = n
		case "cursor":
			if err := checkName("cursor", val, axapi.CursorMaxBytes); err != nil {
				return ListQuery{}, err
			}
			q.Cursor = val
		}
	}
	return q, nil
}

// executorRequest is the JSON body of POST /v1/executors.
type executorRequest struct {
	Name           string          `json:"name"`
	Handlers       []string        `json:"handlers"`
	URL            string          `json:"url"`
	MinConcurrency *int            `json:"min_concurrency"`
	MaxConcurrency *int            `json:"max_concurrency"`
	Timeout        *string         `json:"timeout"`
	FromFlag       json.RawMessage `json:"from_flag"` // read only: refused
}

// DecodeExecutor decodes and validates the body of POST /v1/executors (see
// ValidateExecutor). from_flag is read only and refused.
func DecodeExecutor(body []byte) (spec ExecutorSpec, err error) {
	defer checkUTF8(body, &spec, &err, "")
	var req executorRequest
	if err := decodeStrict(body, &req); err != nil {
		return ExecutorSpec{}, err
	}
	if !isNull(req.FromFlag) {
		return ExecutorSpec{}, Errorf(ErrInvalid, "from_flag: read only (set for executors given by --executor)")
	}
	e := ExecutorSpec{Name: req.Name, Handlers: req.Handlers, URL: req.URL}
	if req.MinConcurrency != nil {
		e.MinConcurrency = *req.MinConcurrency
		if err := checkConcurrency("min_concurrency", e.MinConcurrency); err != nil {
			return ExecutorSpec{}, err
		}
	}
	if req.MaxConcurrency != nil {
		e.MaxConcurrency = *req.MaxConcurrency
		if err := checkConcurrency("max_concurrency", e.MaxConcurrency); err != nil {
			return ExecutorSpec{}, err
		}
	}
	if req.Timeout != nil {
		if *req.Timeout == "" {
			return ExecutorSpec{}, Errorf(ErrInvalid, `timeout: must be a Go duration like "30s", got ""`)
		}
		e.Timeout = *req.Timeout
	}
	return ValidateExecutor(e)
}

// ValidateExecutor checks an executor registration and returns it with
// Timeout normalized ("1m" becomes "1m0s"):
//
//   - name: required; see ValidateExecutorName.
//   - handlers: 1 to axapi.ExecutorHandlersMax patterns, each a handler name
//     (at most axapi.HandlerMaxBytes, valid UTF-8, no control characters) where
//     "*" may only stand alone (every handler) or end the pattern
//     ("order.*": by prefix).
//   - url: see callback.ParseExecutorURL.
//   - min_concurrency, max_concurrency: 0 (the sidecar's default) or 1 to
//     axapi.ConcurrencyMax; min <= max when both are set.
//   - timeout: optional Go duration, > 0 and <= axapi.TimeoutMax: the attempt
//     timeout of its tasks that give none.
//
// FromFlag is not checked. Errors wrap ErrInvalid and name the field.
func ValidateExecutor(e ExecutorSpec) (ExecutorSpec, error) {
	if err := ValidateExecutorName(e.Name); err != nil {
		return ExecutorSpec{}, err
	}
	if len(e.Handlers) == 0 {
		return ExecutorSpec{}, Errorf(ErrInvalid, `handlers: required, 1 to %d handler patterns ("*" for every handler)`, axapi.ExecutorHandlersMax)
	}
	if len(e.Handlers) > axapi.ExecutorHandlersMax {
		return ExecutorSpec{}, Errorf(ErrInvalid, "handlers: %d patterns, the limit is %d", len(e.Handlers), axapi.ExecutorHandlersMax)
	}
	for i, h := range e.Handlers {
		field := fmt.Sprintf("handlers[%d]", i)
		if h == "" {
			return ExecutorSpec{}, Errorf(ErrInvalid, "%s: must not be empty", field)
		}
		if err := checkName(field, h, axapi.HandlerMaxBytes); err != nil {
			return ExecutorSpec{}, err
		}
		if star := strings.IndexByte(h, '*'); star >= 0 && star != len(h)-1 {
			return ExecutorSpec{}, Errorf(ErrInvalid, `%s: %q: "*" may only stand alone or end the pattern, as in "order.*"`, field, h)
		}
	}
	if e.URL == "" {
		return ExecutorSpec{}, Errorf(ErrInvalid, "url: required, unix:///path/to.sock or http://127.0.0.1:PORT")
	}
	if _, _, err := callback.ParseExecutorURL(e.URL); err != nil {
		return ExecutorSpec{}, Errorf(ErrInvalid, "url: %v", err)
	}
	for _, c := range []struct {
		field string
		n     int
	}{{"min_concurrency", e.MinConcurrency}, {"max_concurrency", e.MaxConcurrency}} {
		if err := checkConcurrency(c.field, c.n); err != nil {
			return ExecutorSpec{}, err
		}
	}
	if e.MinConcurrency > 0 && e.MaxConcurrency > 0 && e.MinConcurrency > e.MaxConcurrency {
		return ExecutorSpec{}, Errorf(ErrInvalid, "min_concurrency: %d is more than max_concurrency %d", e.MinConcurrency, e.MaxConcurrency)
	}
	if e.Timeout != "" {
		d, err := time.ParseDuration(e.Timeout)
		if err != nil {
			return ExecutorSpec{}, Errorf(ErrInvalid, "timeout: must be a Go duration like \"30s\", got %q", e.Timeout)
		}
		if d <= 0 || d > axapi.TimeoutMax {
			return ExecutorSpec{}, Errorf(ErrInvalid, "timeout: must be > 0 and <= %s, got %q", axapi.TimeoutMax, e.Timeout)
		}
		e.Timeout = d.String()
	}
	e.Handlers = append([]string(nil), e.Handlers...)
	return e, nil
}

func checkConcurrency(field string, n int) error {
	if n < 0 || n > axapi.ConcurrencyMax {
		return Errorf(ErrInvalid, "%s: must be 0 (the default) or from 1 to %d, got %d", field, axapi.ConcurrencyMax, n)
	}
	return nil
}

// ValidateExecutorName checks an executor name: 1 to axapi.ExecutorNameMaxBytes
// characters among A-Z a-z 0-9 . _ : - and neither "." nor ".." (names
// appear as a path segment in DELETE /v1/executors/{name}). Errors wrap
// ErrInvalid.
func ValidateExecutorName(name string) error {
	if name == "" {
		return Errorf(ErrInvalid, "name: required")
	}
	if len(name) > axapi.ExecutorNameMaxBytes {
		return Errorf(ErrInvalid, "name: %d bytes, the limit is %d", len(name), axapi.ExecutorNameMaxBytes)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			r, _ := utf8.DecodeRuneInString(name[i:])
			return Errorf(ErrInvalid, "name: %q at byte %d is not allowed; use A-Z a-z 0-9 . _ : -", r, i)
		}
	}
	if name == "." || name == ".." {
		return Errorf(ErrInvalid, "name: %q is not allowed", name)
	}
	return nil
}
