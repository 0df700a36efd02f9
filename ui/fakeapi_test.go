package ui

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
)

// fakeAPI is a node's socket API for the dashboard's tests: tasks in
// memory, the routes the dashboard calls, and a record of the calls.
type fakeAPI struct {
	mu       sync.Mutex
	tasks    map[string]*axapi.Task
	cluster  axapi.ClusterInfo
	handlers []axapi.HandlerInfo
	runs     map[string][]axapi.Run // newest first; nil: the runs route is missing
	flows    map[string]*flow       // nil: the flows routes are missing
	metrics  string
	calls    []string // "METHOD path?query"
	socket   string
	// purgeScan bounds the tasks one POST /v1/tasks/purge reads, in id
	// order from its cursor, as the real one reads at most 100 000
	// finished-index entries (0: no bound).
	purgeScan int
	// purgeFailAt makes the purge request of that number (1: the first)
	// and the later ones answer 503 (0: none fails).
	purgeFailAt int
	purges      int
}

func newFakeAPI(t *testing.T) *fakeAPI {
	t.Helper()
	dir, err := os.MkdirTemp("", "axui")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := &fakeAPI{tasks: map[string]*axapi.Task{}, socket: filepath.Join(dir, "ax.sock")}
	tol := 1
	yes := true
	contact := int64(12)
	f.cluster = axapi.ClusterInfo{NodeID: "n1", State: "Leader", Leader: "n1", Term: 3, AppliedIndex: 40, CommitIndex: 42, VotersTarget: 3, FailureTolerance: &tol,
		Members: []axapi.Member{
			{ID: "n1", RaftAddr: "127.0.0.1:1", Suffrage: "Voter", Leader: true, Reachable: &yes, LastContactMs: &contact, AppliedIndex: 42, Role: "leader", Status: "leader", Healthy: &yes},
			{ID: "n2", RaftAddr: "127.0.0.1:2", Suffrage: "Voter", Reachable: &yes, LastContactMs: &contact, AppliedIndex: 40, Role: "follower", Status: "voter", Healthy: &yes},
			{ID: "n3", RaftAddr: "127.0.0.1:3", Suffrage: "Voter", Reachable: &yes, LastContactMs: &contact, AppliedIndex: 41, Role: "follower", Status: "voter", Healthy: &yes},
		}}
	ln, err := net.Listen("unix", f.socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(f)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return f
}

func (f *fakeAPI) add(id, handler, state string, labels map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now().UTC()
	f.tasks[id] = &axapi.Task{ID: id, Handler: handler, State: state, MaxAttempts: 3, Timeout: "30s", Labels: labels, CreatedAt: now, UpdatedAt: now}
}

func (f *fakeAPI) state(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t := f.tasks[id]; t != nil {
		return t.State
	}
	return ""
}

func (f *fakeAPI) callLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func apiErr(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(axapi.ErrorBody{Error: axapi.ErrorDetail{Code: code, Message: msg}})
}

// reply answers v as JSON, with <, > and & as they are (as a result an
// executor sent may hold them).
func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, r.Method+" "+r.URL.RequestURI())
	p := r.URL.EscapedPath()
	switch {
	case r.Method == "GET" && p == "/v1/cluster":
		reply(w, f.cluster)
	case r.Method == "GET" && p == "/metrics":
		w.Write([]byte(f.metrics))
	case r.Method == "GET" && p == "/v1/handlers":
		if f.handlers != nil {
			reply(w, axapi.HandlerList{Handlers: f.handlers})
			return
		}
		counts := map[string]map[axapi.State]int{}
		for _, t := range f.tasks {
			if counts[t.Handler] == nil {
				counts[t.Handler] = map[axapi.State]int{}
			}
			counts[t.Handler][axapi.State(t.State)]++
		}
		var hl axapi.HandlerList
		for _, h := range sortedKeys(counts) {
			zero := 0
			hl.Handlers = append(hl.Handlers, axapi.HandlerInfo{Name: h, Backlog: &zero, Parked: map[string]int{}, Circuit: "closed", Tasks: counts[h]})
		}
		reply(w, hl)
	case strings.HasPrefix(p, "/v1/handlers/") && r.Method == "POST":
		reply(w, axapi.HandlerPause{Name: "x", Paused: strings.HasSuffix(p, "/pause")})
	case r.Method == "GET" && p == "/v1/tasks":
		f.list(w, r)
	case r.Method == "POST" && p == "/v1/tasks/purge":
		var req axapi.PurgeRequest
		json.NewDecoder(r.Body).Decode(&req)
		if f.purges++; f.purgeFailAt > 0 && f.purges >= f.purgeFailAt {
			apiErr(w, 503, "unavailable", "no leader")
			return
		}
		after := ""
		if req.Cursor != "" {
			b, err := base64.RawURLEncoding.DecodeString(req.Cursor)
			if err != nil {
				apiErr(w, 400, "bad_request", "cursor: not a cursor from a previous purge")
				return
			}
			after = string(b)
		}
		var res axapi.PurgeResult
		scanned := 0
		for _, id := range sortedKeys(f.tasks) {
			if id <= after {
				continue
			}
			if res.Purged == req.Limit || (f.purgeScan > 0 && scanned == f.purgeScan) {
				res.More = true
				break
			}
			scanned++
			after = id
			if t := f.tasks[id]; t.State == string(req.State) && (req.Handler == "" || req.Handler == t.Handler) {
				delete(f.tasks, id)
				res.Purged++
			}
		}
		if res.More {
			res.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(after))
		}
		reply(w, res)
	case strings.HasPrefix(p, "/v1/tasks/"):
		f.task(w, r, strings.TrimPrefix(p, "/v1/tasks/"))
	case f.flows != nil && r.Method == "GET" && p == "/v1/flows":
		f.flowList(w, r)
	case f.flows != nil && strings.HasPrefix(p, "/v1/flows/") && !strings.Contains(strings.TrimPrefix(p, "/v1/flows/"), "/"):
		f.flow(w, r, strings.TrimPrefix(p, "/v1/flows/"))
	default:
		apiErr(w, 404, "not_found", "no route for "+r.Method+" "+p)
	}
}

func (f *fakeAPI) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	after := ""
	if c := q.Get("cursor"); c != "" {
		b, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil {
			apiErr(w, 400, "bad_request", "cursor: not a cursor from a previous page")
			return
		}
		after = string(b)
	}
	limit := 100
	if l := q.Get("limit"); l != "" {
		limit, _ = strconv.Atoi(l)
	}
	ids := make([]string, 0, len(f.tasks))
	for id := range f.tasks {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	page := axapi.ListPage{Tasks: []axapi.Task{}}
	last := ""
	for _, id := range ids {
		if id <= after && after != "" {
			continue
		}
		t := f.tasks[id]
		if len(page.Tasks) == limit {
			page.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(last))
			break
		}
		last = id
		if (q.Get("handler") == "" || q.Get("handler") == t.Handler) && (q.Get("state") == "" || q.Get("state") == t.State) {
			page.Tasks = append(page.Tasks, *t)
		}
	}
	reply(w, page)
}

func (f *fakeAPI) task(w http.ResponseWriter, r *http.Request, rest string) {
	seg := strings.SplitN(rest, "/", 2)
	id, err := pathUnescape(seg[0])
	if err != nil {
		apiErr(w, 400, "bad_request", err.Error())
		return
	}
	t := f.tasks[id]
	action := ""
	if len(seg) == 2 {
		action = seg[1]
	}
	if action == "runs" && r.Method == "GET" && f.runs == nil {
		apiErr(w, 404, "not_found", "no route for GET /v1/tasks/"+rest)
		return
	}
	if t == nil {
		apiErr(w, 404, "not_found", fmt.Sprintf("task %q not found", id))
		return
	}
	switch {
	case r.Method == "GET" && action == "":
		reply(w, t)
	case r.Method == "GET" && action == "runs":
		f.runsPage(w, r, id)
	case r.Method == "DELETE" && action == "" && r.URL.Query().Get("purge") == "true":
		delete(f.tasks, id)
		reply(w, axapi.PurgeResult{Purged: 1})
	case r.Method == "DELETE" && action == "":
		if !axapi.State(t.State).Terminal() {
			t.State = axapi.StateCancelled
		}
		reply(w, t)
	case r.Method == "POST" && action == "retry":
		if t.State != axapi.StateDead && t.State != axapi.StateFailed {
			apiErr(w, 409, "conflict", "task is "+t.State+", not DEAD or FAILED")
			return
		}
		t.State = axapi.StateWaiting
		reply(w, t)
	default:
		apiErr(w, 404, "not_found", "no route for "+r.Method+" /v1/tasks/"+rest)
	}
}

// runsPage pages f.runs[id] as the node does: limit (default 20), and
// cursor "r<N>" for the runs older than run N.
func (f *fakeAPI) runsPage(w http.ResponseWriter, r *http.Request, id string) {
	q := r.URL.Query()
	limit := axapi.RunsLimitDefault
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > axapi.RunsLimitMax {
			apiErr(w, 400, "invalid", "limit: must be an integer from 1 to 100")
			return
		}
		limit = n
	}
	before := 0
	if c := q.Get("cursor"); c != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(c, "r"))
		if !strings.HasPrefix(c, "r") || err != nil || n < 1 {
			apiErr(w, 400, "invalid", "cursor: not a cursor of this API")
			return
		}
		before = n
	}
	page := axapi.RunsPage{Runs: []axapi.Run{}}
	for _, run := range f.runs[id] {
		if before > 0 && run.Run >= before {
			continue
		}
		if len(page.Runs) == limit {
			page.NextCursor = "r" + strconv.Itoa(page.Runs[limit-1].Run)
			break
		}
		page.Runs = append(page.Runs, run)
	}
	reply(w, page)
}

func pathUnescape(s string) (string, error) { return url.PathUnescape(s) }

// addFlow stores a flow of stages (name, handler, dependencies) whose
// states are states[i] ("" or PENDING: no task yet).
func (f *fakeAPI) addFlow(id, state string, stages []flowStage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.flows == nil {
		f.flows = map[string]*flow{}
	}
	now := time.Now().UTC()
	fl := &flow{ID: id, State: state, Run: 1, RunDueAt: now, CreatedAt: now, UpdatedAt: now}
	for _, st := range stages {
		if st.State == "" {
			st.State = "PENDING"
		}
		if st.State != "PENDING" {
			st.TaskID = "flow/" + id + "/1/" + st.Name
		}
		fl.Stages = append(fl.Stages, st)
	}
	f.flows[id] = fl
}

func (f *fakeAPI) flowState(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl := f.flows[id]; fl != nil {
		return fl.State
	}
	return ""
}

// flowList pages f.flows in id order as the node does: limit (default
// 100), cursor the base64url of the last id of the previous page.
func (f *fakeAPI) flowList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	after := ""
	if c := q.Get("cursor"); c != "" {
		b, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil {
			apiErr(w, 400, "bad_request", "cursor: not a cursor from a previous page")
			return
		}
		after = string(b)
	}
	limit := 100
	if l := q.Get("limit"); l != "" {
		limit, _ = strconv.Atoi(l)
	}
	page := flowPage{Flows: []flow{}}
	for _, id := range sortedKeys(f.flows) {
		if after != "" && id <= after {
			continue
		}
		if len(page.Flows) == limit {
			page.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(page.Flows[limit-1].ID))
			break
		}
		page.Flows = append(page.Flows, *f.flows[id])
	}
	reply(w, page)
}

func (f *fakeAPI) flow(w http.ResponseWriter, r *http.Request, esc string) {
	id, err := pathUnescape(esc)
	if err != nil {
		apiErr(w, 400, "bad_request", err.Error())
		return
	}
	fl := f.flows[id]
	if fl == nil {
		apiErr(w, 404, "not_found", fmt.Sprintf("flow %q not found", id))
		return
	}
	switch r.Method {
	case "GET":
		reply(w, fl)
	case "DELETE":
		if !flowTerminal(fl.State) {
			fl.State = axapi.StateCancelled
			for i := range fl.Stages {
				if st := fl.Stages[i].State; st == "PENDING" || !axapi.State(st).Terminal() {
					fl.Stages[i].State = axapi.StateCancelled
				}
			}
		}
		reply(w, fl)
	default:
		apiErr(w, 404, "not_found", "no route for "+r.Method+" /v1/flows/"+esc)
	}
}
