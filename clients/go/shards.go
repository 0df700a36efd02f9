package ax

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/axsched/ax/clients/go/axapi"
)

// ShardCountFunc answers the sidecar's question of how many shards a run of
// a task with "shards": {"ask": true} gets: a count n >= 1, after which the
// sidecar delivers the run as n callbacks with ShardIndex 0 to n-1 and
// ShardTotal n (n is bounded by the task's "max").
//
// The Delivery is the ask's: TaskID, Handler, Run, Attempt (the ask's own
// attempt, from 1), Deadline and Payload as for a callback, and no shard
// (ShardIndex and ShardTotal are 0). The context ends at the Deadline, when
// the sidecar gives up the request, and when Executor.Shutdown runs out of
// time; it carries the Delivery (DeliveryFromContext) and the remote span
// context, but the Executor's Middleware does not run around a
// ShardCountFunc.
//
// An error, a panic or a count below 1 answers 500: a failed attempt of the
// ask, which the sidecar retries like any attempt (Permanent and Snooze are
// not told apart here).
type ShardCountFunc func(ctx context.Context, d *Delivery) (int, error)

// HandlerOption configures one handler, in Executor.Handle, HandleFunc or
// HandleResult.
type HandlerOption func(*handlerOptions)

type handlerOptions struct {
	shardCount ShardCountFunc
}

// WithShardCount makes the Executor answer the sidecar's shard-count asks
// (POST ShardsPath) for the handler with fn: 200 and {"count": n}. Give it
// to the handlers of tasks submitted with "shards": {"ask": true}; tasks
// with a fixed "shards": {"count": N} need none. A handler registered
// without it answers such an ask 501 (code shard_count_unsupported), which
// the sidecar counts as a failed attempt:
//
//	ex.HandleFunc("reindex", reindexShard, ax.WithShardCount(func(ctx context.Context, d *ax.Delivery) (int, error) {
//		n, err := countPartitions(ctx, d.Payload)
//		return max(1, n/1000), err
//	}))
//
// WithShardCount panics if fn is nil.
func WithShardCount(fn ShardCountFunc) HandlerOption {
	if fn == nil {
		panic("ax: WithShardCount: nil function")
	}
	return func(o *handlerOptions) { o.shardCount = fn }
}

// Error codes of the Executor's answers to shard-count asks (in the
// {"error": {"code", "message"}} body). The sidecar counts every one as a
// failed attempt of the ask; the message becomes its last error.
const (
	shardCodeMethod      = "method_not_allowed"      // 405: not a POST
	shardCodeShutdown    = "shutting_down"           // 503: Shutdown has begun
	shardCodeBadRequest  = "bad_request"             // 400: malformed headers
	shardCodeNoHandler   = "handler_not_found"       // 404: no handler for the name, nor "*"
	shardCodeUnsupported = "shard_count_unsupported" // 501: the handler has no WithShardCount
	shardCodeFailed      = "shard_count_failed"      // 500: error, panic or count < 1
)

// shardCounter returns the ShardCountFunc for name and whether a handler
// (by name, else FallbackHandler) is registered at all. The counter is the
// one registered with the handler that a callback of name would reach.
func (e *Executor) shardCounter(name string) (fn ShardCountFunc, found bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if _, ok := e.handlers[name]; !ok {
		name = FallbackHandler
		if _, ok := e.handlers[name]; !ok {
			return nil, false
		}
	}
	return e.shardCounters[name], true
}

// serveShards answers one shard-count ask (POST ShardsPath with the
// callback's headers and the task's payload):
//
//   - 200 with {"count": n} from the handler's ShardCountFunc;
//   - 400 for malformed headers, 404 when no handler (nor "*") is
//     registered for the name, 501 when the handler has no ShardCountFunc;
//   - 500 when it fails, panics or returns a count below 1;
//   - 503 with Retry-After: 1 once Shutdown has begun; 405 for a method
//     other than POST.
//
// Every answer but 200 has a JSON error body, and is a failed attempt of the
// ask for the sidecar.
func (e *Executor) serveShards(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, shardCodeMethod, "method not allowed: use POST")
		return
	}
	if !e.enter() {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, shardCodeShutdown, "executor is shutting down")
		return
	}
	defer e.leave()
	d, err := parseDelivery(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, shardCodeBadRequest, err.Error())
		return
	}
	fn, found := e.shardCounter(d.Handler)
	switch {
	case !found:
		writeError(w, http.StatusNotFound, shardCodeNoHandler, "no handler registered for "+strconv.Quote(d.Handler))
		return
	case fn == nil:
		writeError(w, http.StatusNotImplemented, shardCodeUnsupported,
			"handler "+strconv.Quote(d.Handler)+" cannot count shards: register it with ax.WithShardCount")
		return
	}
	ctx, _, release := e.attemptContext(r, d)
	defer release()
	n, err := runShardCount(ctx, fn, d)
	switch {
	case err != nil:
		writeError(w, http.StatusInternalServerError, shardCodeFailed, err.Error())
	case n < 1:
		writeError(w, http.StatusInternalServerError, shardCodeFailed,
			fmt.Sprintf("shard count of handler %q is %d, want at least 1", d.Handler, n))
	default:
		writeJSON(w, http.StatusOK, axapi.ShardCount{Count: n})
	}
}

// runShardCount calls fn, turning a panic into an error.
func runShardCount(ctx context.Context, fn ShardCountFunc, d *Delivery) (n int, err error) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			n, err = 0, fmt.Errorf("panic in shard count of handler %q: %v", d.Handler, p)
		}
	}()
	return fn(ctx, d)
}

// parseShard reads Ax-Shard-Index and Ax-Shard-Total: both absent (0, 0,
// no shard), or an index from 0 to total-1 and a total of at least 1.
func parseShard(r *http.Request) (index, total int, err error) {
	iv, tv := r.Header.Get(HeaderShardIndex), r.Header.Get(HeaderShardTotal)
	switch {
	case iv == "" && tv == "":
		return 0, 0, nil
	case iv == "":
		return 0, 0, fmt.Errorf("%s header without %s", HeaderShardTotal, HeaderShardIndex)
	case tv == "":
		return 0, 0, fmt.Errorf("%s header without %s", HeaderShardIndex, HeaderShardTotal)
	}
	total, err = strconv.Atoi(tv)
	if err != nil || total < 1 {
		return 0, 0, fmt.Errorf("bad %s header %q: want an integer >= 1", HeaderShardTotal, tv)
	}
	index, err = strconv.Atoi(iv)
	if err != nil || index < 0 || index >= total {
		return 0, 0, fmt.Errorf("bad %s header %q: want an integer from 0 to %d (%s is %d)", HeaderShardIndex, iv, total-1, HeaderShardTotal, total)
	}
	return index, total, nil
}

// writeError writes an error answer with the API's error body.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, axapi.ErrorBody{Error: axapi.ErrorDetail{Code: code, Message: msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
