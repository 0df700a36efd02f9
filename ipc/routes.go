package ipc

import (
	"context"
	"strings"
	"unsafe"

	"github.com/valyala/fasthttp"
)

// routeDef is one (method, path pattern) the API answers.
type routeDef struct {
	// Method is the HTTP method. A GET route also answers HEAD.
	Method string
	// Pattern is the path, with {id} or {name} standing for one non-empty
	// path segment, still URL-escaped. openapi.yaml uses the same spelling.
	Pattern string
	// handle answers the request; param is the raw (escaped) segment that
	// matched the pattern's {…}, "" when it has none; with two, the two
	// segments joined by "/" (a raw segment holds no "/": splitParams). It writes the reply
	// on success and returns the error to answer otherwise.
	handle func(s *Server, rctx context.Context, ctx *fasthttp.RequestCtx, param string) error
}

// routes is the route table of the API: match, the Allow header of 405
// replies, openapi.yaml and doc.go all follow it (see openapi_test.go).
// A literal segment never competes with a parameter for the same method:
// "POST /v1/tasks/batch" is the batch route, "GET /v1/tasks/batch" the task
// whose id is "batch".
var routes = []routeDef{
	{"GET", "/v1/tasks", (*Server).listTasks},
	{"POST", "/v1/tasks", (*Server).submit},
	{"POST", "/v1/tasks/batch", (*Server).submitBatch},
	{"POST", "/v1/tasks/purge", (*Server).purgeTasks},
	{"GET", "/v1/tasks/{id}", (*Server).getTask},
	{"GET", "/v1/tasks/{id}/runs", (*Server).listRuns},
	{"GET", "/v1/tasks/{id}/runs/{run}", (*Server).getRun},
	{"DELETE", "/v1/tasks/{id}", (*Server).cancelTask},
	{"POST", "/v1/tasks/{id}/retry", (*Server).retryTask},
	{"POST", "/v1/tasks/{id}/heartbeat", (*Server).heartbeat},
	{"POST", "/v1/tasks/{id}/result", (*Server).reportResult},
	{"POST", "/v1/tasks/{id}/pause", (*Server).pauseTask},
	{"POST", "/v1/tasks/{id}/resume", (*Server).resumeTask},
	{"GET", "/v1/flows", (*Server).listFlows},
	{"POST", "/v1/flows", (*Server).submitFlow},
	{"GET", "/v1/flows/{id}", (*Server).getFlow},
	{"DELETE", "/v1/flows/{id}", (*Server).cancelFlow},
	{"GET", "/v1/handlers", (*Server).listHandlers},
	{"POST", "/v1/handlers/{name}/pause", (*Server).pauseHandler},
	{"POST", "/v1/handlers/{name}/resume", (*Server).resumeHandler},
	{"GET", "/v1/executors", (*Server).listExecutors},
	{"POST", "/v1/executors", (*Server).registerExecutor},
	{"DELETE", "/v1/executors/{name}", (*Server).unregisterExecutor},
	{"GET", "/v1/cluster", (*Server).cluster},
	{"DELETE", "/v1/cluster/members/{id}", (*Server).removeMember},
	{"GET", "/healthz", (*Server).health},
	{"GET", "/readyz", (*Server).ready},
	{"GET", "/metrics", (*Server).metrics},
}

// readsQuery holds the routes (method and pattern) that read their query
// string themselves: the lists, one task, one run, one flow, the DELETEs
// (?purge=true), the purge (which refuses one with its own hint), the
// handlers' list, and the probes and metrics (left to their scrapers and
// probes as they are). Every other route takes no query parameter, and
// serve refuses one (noQuery): POST /v1/tasks?overwrite=true, ignored,
// submitted without the overwrite the caller meant.
var readsQuery = map[string]bool{
	"GET /v1/tasks": true, "POST /v1/tasks/purge": true, "GET /v1/tasks/{id}": true,
	"GET /v1/tasks/{id}/runs": true, "GET /v1/tasks/{id}/runs/{run}": true, "DELETE /v1/tasks/{id}": true,
	"GET /v1/flows": true, "GET /v1/flows/{id}": true, "DELETE /v1/flows/{id}": true,
	"GET /v1/handlers": true, "GET /healthz": true, "GET /readyz": true, "GET /metrics": true,
}

// refusesQuery holds the routes that take no query string (every route
// readsQuery does not name), by their entry in routes: serve looks its
// route up here, without building its name on every request.
var refusesQuery = func() map[*routeDef]bool {
	m := map[*routeDef]bool{}
	for i := range routes {
		if r := &routes[i]; !readsQuery[r.Method+" "+r.Pattern] {
			m[r] = true
		}
	}
	return m
}()

// methodOrder is the order of methods in an Allow header.
var methodOrder = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"}

// match finds the route for a method and a raw (still escaped) request
// path. It returns the route and the raw segment matched by its parameter,
// or nil and the methods the path allows ("" when no route has this path:
// 404; otherwise 405 with that Allow header). Routing on the raw path keeps
// "%2F" inside an id from being taken for a path separator. The path is
// matched in place (unsafe.String: nothing here keeps it or writes to
// rawPath); only a parameter is copied, so that a route without one
// allocates nothing.
func match(method string, rawPath []byte) (def *routeDef, param, allow string) {
	p := unsafe.String(unsafe.SliceData(rawPath), len(rawPath))
	var methods []string
	for i := range routes {
		r := &routes[i]
		prm, ok := matchPattern(r.Pattern, p)
		if !ok {
			continue
		}
		if r.Method == method || r.Method == "GET" && method == "HEAD" {
			return r, strings.Clone(prm), ""
		}
		methods = append(methods, r.Method)
		if r.Method == "GET" {
			methods = append(methods, "HEAD")
		}
	}
	if len(methods) == 0 {
		return nil, "", ""
	}
	var order []string
	for _, m := range methodOrder {
		for _, have := range methods {
			if have == m {
				order = append(order, m)
				break
			}
		}
	}
	return nil, "", strings.Join(order, ", ")
}

// splitParams splits the param of a route with two {…} segments.
func splitParams(param string) (first, second string) {
	first, second, _ = strings.Cut(param, "/")
	return first, second
}

// matchPattern matches path against a pattern segment by segment. A
// "{…}" segment matches any non-empty segment, returned as param.
func matchPattern(pattern, path string) (param string, ok bool) {
	for {
		pseg, prest, pmore := strings.Cut(pattern, "/")
		seg, rest, more := strings.Cut(path, "/")
		if pmore != more {
			return "", false
		}
		if strings.HasPrefix(pseg, "{") && strings.HasSuffix(pseg, "}") {
			if seg == "" {
				return "", false
			}
			if param != "" {
				seg = param + "/" + seg
			}
			param = seg
		} else if pseg != seg {
			return "", false
		}
		if !more {
			return param, true
		}
		pattern, path = prest, rest
	}
}
