package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/axsched/ax/clients/go/axapi"
)

// Bounds of what one page request asks of the API.
const (
	// taskListScanMax bounds the API pages a filtered task list (label,
	// id prefix) reads for one page of the dashboard; it then offers to
	// go on from where it stopped.
	taskListScanMax = 20
	// taskListBudget bounds the time a page spends on further API pages
	// (one is always read).
	taskListBudget = 150 * time.Millisecond
	// deadListMax is the tasks of one state the dead-letter page shows
	// (and a bulk retry may name).
	deadListMax = 100
	// bulkMax bounds the tasks one bulk retry retries, one API call each.
	bulkMax = 100
	// bulkPurgeMax bounds the tasks one bulk purge deletes (the limit of
	// its POST /v1/tasks/purge requests, all together).
	bulkPurgeMax = 1000
	// bulkPurgeRounds and bulkPurgeBudget bound the requests of one bulk
	// purge: it follows each answer's next_cursor while more may match,
	// so that finished tasks the filter skips (each request reads at most
	// 100 000 of them) do not make every click purge nothing.
	bulkPurgeRounds = 64
	bulkPurgeBudget = 3 * time.Second
	// runsShown is the runs of a task one task page reads (a page of
	// GET /v1/tasks/{id}/runs; older ones are behind its cursor).
	runsShown = 10
	// resultShownMax bounds the bytes of a run's result the task page
	// shows (a stored result may be 64 KiB).
	resultShownMax = 4096
	// runsCursorMax bounds the runs cursor a task page's URL may carry.
	runsCursorMax = 64
)

// pageSizes are the task list's page sizes; the first is the default.
var pageSizes = []int{50, 20, 100, 200}

// ---- cluster

type clusterData struct {
	Info     *axapi.ClusterInfo
	Members  []memberRow
	Warnings []string
	Voters   int
	Quorum   int
}

type memberRow struct {
	axapi.Member
	Lag     string // entries the member has still to apply to reach the commit index (ClusterInfo.Lag)
	Contact string // last contact, for people
}

func (s *Server) clusterPage(w http.ResponseWriter, r *http.Request) {
	v := view{Title: "Cluster", Nav: "cluster"}
	ci, err := s.api.cluster(r.Context())
	if err != nil {
		v.Error = err.Error()
		s.render(w, r, "cluster", http.StatusBadGateway, v)
		return
	}
	d := clusterData{Info: ci}
	reachable := 0
	for _, m := range ci.Members {
		row := memberRow{Member: m, Lag: "–", Contact: "–"}
		if c := m.LastContactMs; c != nil {
			row.Contact = "never"
			if *c >= 0 {
				row.Contact = strconv.FormatInt(*c, 10) + " ms ago"
			}
		}
		if m.AppliedIndex > 0 && ci.CommitIndex >= m.AppliedIndex {
			row.Lag = strconv.FormatUint(ci.Lag(m.AppliedIndex), 10)
		}
		if m.Suffrage == "Voter" {
			d.Voters++
			if m.Reachable != nil && *m.Reachable {
				reachable++
			}
		}
		d.Members = append(d.Members, row)
	}
	d.Quorum = d.Voters/2 + 1
	switch {
	case ci.Leader == "":
		d.Warnings = append(d.Warnings, "No leader is known: writes are refused until one is elected.")
	case ci.FailureTolerance != nil && *ci.FailureTolerance < 0:
		d.Warnings = append(d.Warnings, fmt.Sprintf("Quorum lost: %d of %d voters reachable, %d needed.", reachable, d.Voters, d.Quorum))
	case ci.FailureTolerance != nil && *ci.FailureTolerance == 0:
		d.Warnings = append(d.Warnings, fmt.Sprintf("Quorum at risk: %d of %d voters reachable; one more failure stops the cluster.", reachable, d.Voters))
	}
	if ci.Storage != nil {
		d.Warnings = append(d.Warnings, fmt.Sprintf("This node's storage refuses writes since %s: %s", ci.Storage.Since.UTC().Format(time.RFC3339), ci.Storage.Cause))
	}
	v.Data = d
	s.render(w, r, "cluster", http.StatusOK, v)
}

// ---- handlers

type handlersData struct {
	Node     string
	Handlers []handlerRow
	Window   string
}

type handlerRow struct {
	axapi.HandlerInfo
	Parked    []kv
	Tasks     []kv
	Rates     []kv
	P50, P99  string
	Chart     *chart
	Executors []executorRow
}

type kv struct {
	K string
	V string
}

type executorRow struct {
	axapi.HandlerExecutor
	InFlight string // this node's executors only
}

func (s *Server) handlersPage(w http.ResponseWriter, r *http.Request) {
	v := view{Title: "Handlers", Nav: "handlers"}
	hs, err := s.api.handlers(r.Context())
	if err != nil {
		v.Error = err.Error()
		s.render(w, r, "handlers", http.StatusBadGateway, v)
		return
	}
	node := ""
	if ci, err := s.api.cluster(r.Context()); err == nil {
		node = ci.NodeID
	}
	ss := s.sampler.snapshot()
	d := handlersData{Node: node, Window: s.opts.SampleWindow.String()}
	for _, h := range hs {
		row := handlerRow{HandlerInfo: h, P50: "–", P99: "–"}
		for _, k := range sortedKeys(h.Parked) {
			row.Parked = append(row.Parked, kv{k, strconv.Itoa(h.Parked[k])})
		}
		for _, st := range axapi.States() {
			if n := h.Tasks[axapi.State(st)]; n > 0 {
				row.Tasks = append(row.Tasks, kv{st, strconv.Itoa(n)})
			}
		}
		rates := attemptRates(ss, h.Name, time.Minute)
		for _, k := range sortedKeys(rates) {
			row.Rates = append(row.Rates, kv{k, strconv.FormatFloat(rates[k], 'f', 2, 64)})
		}
		if from, to, ok := recentSpan(ss, time.Minute); ok {
			if p, ok := quantile(0.5, to.lateness[h.Name], from.lateness[h.Name]); ok {
				row.P50 = seconds(p)
				p99, _ := quantile(0.99, to.lateness[h.Name], from.lateness[h.Name])
				row.P99 = seconds(p99)
			}
		}
		if len(ss) > 0 {
			row.Chart = newChart(latenessSeries(ss, h.Name), ss[0].at)
		}
		for _, e := range h.Executors {
			er := executorRow{HandlerExecutor: e, InFlight: "–"}
			if e.Node == node && len(ss) > 0 {
				if f, ok := ss[len(ss)-1].inFlight[e.Name]; ok {
					er.InFlight = strconv.FormatFloat(f, 'f', 0, 64)
				}
			}
			row.Executors = append(row.Executors, er)
		}
		d.Handlers = append(d.Handlers, row)
	}
	v.Data = d
	s.render(w, r, "handlers", http.StatusOK, v)
}

func (s *Server) handlerAction(w http.ResponseWriter, r *http.Request) {
	name, action := r.PathValue("name"), r.PathValue("action")
	if action != "pause" && action != "resume" {
		http.NotFound(w, r)
		return
	}
	if err := checkText("handler", name, axapi.HandlerMaxBytes); err != nil || name == "" {
		done(w, r, "/handlers", "", fmt.Errorf("bad handler name"))
		return
	}
	err := s.api.call(r.Context(), "POST", "/v1/handlers/"+pathEscape(name)+"/"+action, struct{}{}, nil)
	done(w, r, "/handlers", fmt.Sprintf("%s: %sd", name, action), err)
}

// ---- tasks

type tasksData struct {
	Filter   taskFilter
	Tasks    []axapi.Task
	Next     template.URL // the next page, "" on the last
	First    template.URL // the first page, when this is not it
	Scanned  int          // API pages read for this page
	Stopped  bool         // a filtered scan stopped at taskListScanMax
	Handlers []string
	Counts   []kv // the handler's (or all) tasks by state
	Total    int
	States   []string
	Sizes    []int
}

// taskFilter is the task list's query, checked.
type taskFilter struct {
	State, Handler, Label, Prefix, Cursor string
	Limit                                 int
}

// url is the task list's URL for f at cursor.
func (f taskFilter) url(cursor string) template.URL {
	q := make([]string, 0, 6)
	add := func(k, v string) {
		if v != "" {
			q = append(q, k+"="+queryEscape(v))
		}
	}
	add("state", f.State)
	add("handler", f.Handler)
	add("label", f.Label)
	add("prefix", f.Prefix)
	if f.Limit != pageSizes[0] {
		add("limit", strconv.Itoa(f.Limit))
	}
	add("cursor", cursor)
	return template.URL("/tasks?" + strings.Join(q, "&"))
}

func parseTaskFilter(r *http.Request) (taskFilter, error) {
	q := r.URL.Query()
	f := taskFilter{Limit: pageSizes[0]}
	f.State = strings.ToUpper(strings.TrimSpace(q.Get("state")))
	if f.State != "" && !validState(f.State) {
		return f, fmt.Errorf("state %q: want one of %s", f.State, strings.Join(axapi.States(), ", "))
	}
	f.Handler = strings.TrimSpace(q.Get("handler"))
	f.Label = strings.TrimSpace(q.Get("label"))
	f.Prefix = q.Get("prefix")
	f.Cursor = q.Get("cursor")
	for _, c := range []struct {
		name, val string
		max       int
	}{{"handler", f.Handler, axapi.HandlerMaxBytes}, {"label", f.Label, 1024}, {"prefix", f.Prefix, axapi.IDMaxBytes}, {"cursor", f.Cursor, axapi.CursorMaxBytes}} {
		if err := checkText(c.name, c.val, c.max); err != nil {
			return f, err
		}
	}
	if f.Label != "" {
		if k, _, ok := strings.Cut(f.Label, "="); !ok || k == "" {
			return f, fmt.Errorf("label %q: want KEY=VALUE", f.Label)
		}
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || !contains(pageSizes, n) {
			return f, fmt.Errorf("limit %q: want one of 20, 50, 100, 200", l)
		}
		f.Limit = n
	}
	return f, nil
}

func (s *Server) tasksPage(w http.ResponseWriter, r *http.Request) {
	v := view{Title: "Tasks", Nav: "tasks"}
	f, err := parseTaskFilter(r)
	d := tasksData{Filter: f, States: axapi.States(), Sizes: pageSizes}
	if err != nil {
		v.Error, v.Data = err.Error(), d
		s.render(w, r, "tasks", http.StatusBadRequest, v)
		return
	}
	ctx := r.Context()
	if hs, err := s.api.handlers(ctx); err == nil {
		counts := map[string]int{}
		for _, h := range hs {
			d.Handlers = append(d.Handlers, h.Name)
			if f.Handler == "" || f.Handler == h.Name {
				for st, n := range h.Tasks {
					counts[string(st)] += n
				}
			}
		}
		for _, st := range axapi.States() {
			d.Counts = append(d.Counts, kv{st, strconv.Itoa(counts[st])})
			d.Total += counts[st]
		}
	}
	tasks, next, scanned, stopped, err := s.listTasks(ctx, f)
	d.Tasks, d.Scanned, d.Stopped = tasks, scanned, stopped
	if next != "" {
		d.Next = f.url(next)
	}
	if f.Cursor != "" {
		d.First = f.url("")
	}
	v.Data = d
	if err != nil {
		v.Error = err.Error()
		s.render(w, r, "tasks", statusOf(err), v)
		return
	}
	s.render(w, r, "tasks", http.StatusOK, v)
}

// listTasks reads one page of the dashboard's task list: API pages of at
// most the missing count (so that the API's cursor is always where the
// dashboard's page ends) until the page is full, the list or the prefix
// ends, or taskListScanMax pages or taskListBudget were spent. One API
// page fills it unless a filter matches little or many tasks were purged
// recently: the API reads at most 10 000 task keys a call and then
// answers a short page with a cursor.
func (s *Server) listTasks(ctx context.Context, f taskFilter) (tasks []axapi.Task, next string, scanned int, stopped bool, err error) {
	cursor := f.Cursor
	if f.Prefix != "" && cursor == "" {
		// The task whose id is the prefix itself, then those after it.
		t, err := s.api.task(ctx, f.Prefix)
		if err == nil && f.match(t) {
			tasks = append(tasks, *t)
		} else if err != nil && !isNotFound(err) {
			return nil, "", 0, false, err
		}
		cursor = cursorAfter(f.Prefix)
	}
	start := time.Now()
	for len(tasks) < f.Limit {
		if scanned == taskListScanMax || scanned > 0 && time.Since(start) > taskListBudget {
			return tasks, cursor, scanned, true, nil
		}
		p, err := s.api.list(ctx, listQuery{Handler: f.Handler, State: f.State, Cursor: cursor, Limit: f.Limit - len(tasks)})
		scanned++
		if err != nil {
			return tasks, "", scanned, false, err
		}
		for i := range p.Tasks {
			t := &p.Tasks[i]
			if f.Prefix != "" && !strings.HasPrefix(t.ID, f.Prefix) && t.ID > f.Prefix {
				return tasks, "", scanned, false, nil
			}
			if f.match(t) {
				tasks = append(tasks, *t)
			}
		}
		if cursor = p.NextCursor; cursor == "" {
			break
		}
	}
	return tasks, cursor, scanned, false, nil
}

// match applies the filters the API does not: label and id prefix.
func (f taskFilter) match(t *axapi.Task) bool {
	if f.Prefix != "" && !strings.HasPrefix(t.ID, f.Prefix) {
		return false
	}
	if f.Handler != "" && t.Handler != f.Handler || f.State != "" && t.State != f.State {
		return false
	}
	if f.Label != "" {
		k, val, _ := strings.Cut(f.Label, "=")
		if got, ok := t.Labels[k]; !ok || got != val {
			return false
		}
	}
	return true
}

type taskData struct {
	Task     *axapi.Task
	Terminal bool
	Retry    bool
	Payload  string
	Runs     []runRow
	History  string       // why there is no history, when there is none
	Older    template.URL // the next (older) page of runs, "" on the last
	Newest   template.URL // the first page of runs, when this is not it
	Labels   []kv
}

// runRow is one run as the task page shows it.
type runRow struct {
	axapi.Run
	// Tries is the highest attempt number of the run (busy answers give
	// theirs back, so it can be less than the attempts listed).
	Tries int
	// Took is the run's length, from its first callback to its end.
	Took string
	// Result is what the page shows of the result: JSON indented, or the
	// base64 text as the API gives it; ResultKind "json" or "base64", ""
	// without a result; ResultCut when the page shows only its first
	// resultShownMax bytes (ResultTruncated: the node cut the answer).
	Result     string
	ResultKind string
	ResultCut  bool
}

func newRunRow(r axapi.Run) runRow {
	row := runRow{Run: r}
	for _, a := range r.Attempts {
		row.Tries = max(row.Tries, a.Attempt)
	}
	if r.StartedAt != nil && r.FinishedAt != nil {
		row.Took = duration(r.FinishedAt.Sub(*r.StartedAt))
	}
	switch {
	case len(r.Result) > 0:
		row.ResultKind = "json"
		var buf bytes.Buffer
		if json.Indent(&buf, r.Result, "", "  ") == nil {
			row.Result = buf.String()
		} else {
			row.Result = string(r.Result)
		}
	case r.ResultBase64 != "":
		row.ResultKind, row.Result = "base64", r.ResultBase64
	}
	if len(row.Result) > resultShownMax {
		cut := resultShownMax
		for cut > 0 && !utf8.RuneStart(row.Result[cut]) {
			cut--
		}
		row.Result, row.ResultCut = row.Result[:cut], true
	}
	return row
}

// duration formats a run's or attempt's length for people.
func duration(d time.Duration) string {
	switch {
	case d < 0:
		return "–"
	case d < time.Second:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + " s"
	default:
		return d.Round(time.Second).String()
	}
}

// runsURL is the task page of id showing the runs from cursor.
func runsURL(id, cursor string) template.URL {
	u := "/tasks/" + pathEscape(id)
	if cursor != "" {
		u += "?runs=" + queryEscape(cursor)
	}
	return template.URL(u)
}

func (s *Server) taskPage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	v := view{Title: "Task " + id, Nav: "tasks"}
	cursor := r.URL.Query().Get("runs")
	err := checkID(id)
	if err == nil {
		err = checkText("runs cursor", cursor, runsCursorMax)
	}
	if err != nil {
		v.Error = err.Error()
		s.render(w, r, "task", http.StatusBadRequest, v)
		return
	}
	t, err := s.api.task(r.Context(), id)
	if err != nil {
		v.Error = err.Error()
		s.render(w, r, "task", statusOf(err), v)
		return
	}
	d := taskData{Task: t, Terminal: axapi.State(t.State).Terminal(), Retry: t.State == axapi.StateDead || t.State == axapi.StateFailed}
	if len(t.Payload) > 0 {
		d.Payload = string(t.Payload)
		if t.PayloadBase64 {
			d.Payload = "(base64) " + d.Payload
		}
		if len(d.Payload) > 4096 {
			d.Payload = d.Payload[:4096] + " …"
		}
	}
	for _, k := range sortedKeys(t.Labels) {
		d.Labels = append(d.Labels, kv{k, t.Labels[k]})
	}
	runs, err := s.api.runs(r.Context(), id, runsShown, cursor)
	switch {
	case err == nil:
		for _, run := range runs.Runs {
			d.Runs = append(d.Runs, newRunRow(run))
		}
		if runs.NextCursor != "" {
			d.Older = runsURL(id, runs.NextCursor)
		}
		if cursor != "" {
			d.Newest = runsURL(id, "")
		}
		if len(d.Runs) == 0 {
			d.History = "No run on record yet."
			if cursor != "" {
				d.History = "No older run on record."
			}
		}
	case routeMissing(err):
		d.History = "No history: this node has no run-history API (GET /v1/tasks/{id}/runs)."
	default:
		d.History = "Run history unavailable: " + err.Error()
	}
	v.Data = d
	s.render(w, r, "task", http.StatusOK, v)
}

func (s *Server) taskAction(w http.ResponseWriter, r *http.Request) {
	id, action := r.PathValue("id"), r.PathValue("action")
	back := "/tasks/" + pathEscape(id)
	if err := checkID(id); err != nil {
		done(w, r, "/tasks", "", err)
		return
	}
	ctx := r.Context()
	var err error
	switch action {
	case "cancel":
		if r.PostFormValue("confirm") != "yes" {
			done(w, r, back, "", errors.New("cancel: tick the box to confirm"))
			return
		}
		err = s.api.call(ctx, "DELETE", axapi.TaskPath(id), nil, nil)
	case "retry":
		err = s.api.call(ctx, "POST", axapi.TaskPath(id)+"/retry", struct{}{}, nil)
	case "purge":
		if r.PostFormValue("confirm") != "yes" {
			done(w, r, back, "", errors.New("purge: tick the box to confirm"))
			return
		}
		err = s.api.call(ctx, "DELETE", axapi.TaskPath(id)+"?purge=true", nil, nil)
		if err == nil {
			done(w, r, "/tasks", "purged "+id, nil)
			return
		}
	default:
		http.NotFound(w, r)
		return
	}
	done(w, r, back, action+": done", err)
}

// ---- dead letters

type deadData struct {
	Handler  string
	Handlers []deadHandler
	Lists    []deadList
	BulkMax  int
	PurgeMax int
}

type deadHandler struct {
	Name         string
	Dead, Failed int
}

type deadList struct {
	State string
	Tasks []axapi.Task
	More  bool
}

func (s *Server) deadPage(w http.ResponseWriter, r *http.Request) {
	v := view{Title: "Dead letters", Nav: "dead"}
	handler := strings.TrimSpace(r.URL.Query().Get("handler"))
	d := deadData{Handler: handler, BulkMax: bulkMax, PurgeMax: bulkPurgeMax}
	if err := checkText("handler", handler, axapi.HandlerMaxBytes); err != nil {
		v.Error, v.Data = err.Error(), d
		s.render(w, r, "dead", http.StatusBadRequest, v)
		return
	}
	ctx := r.Context()
	hs, err := s.api.handlers(ctx)
	if err != nil {
		v.Error, v.Data = err.Error(), d
		s.render(w, r, "dead", statusOf(err), v)
		return
	}
	for _, h := range hs {
		dh := deadHandler{Name: h.Name, Dead: h.Tasks[axapi.StateDead], Failed: h.Tasks[axapi.StateFailed]}
		if dh.Dead+dh.Failed > 0 {
			d.Handlers = append(d.Handlers, dh)
		}
	}
	for _, st := range []string{axapi.StateDead, axapi.StateFailed} {
		l := deadList{State: st}
		cursor, start := "", time.Now()
		for i := 0; i < taskListScanMax && len(l.Tasks) < deadListMax && (i == 0 || time.Since(start) < taskListBudget); i++ {
			p, err := s.api.list(ctx, listQuery{Handler: handler, State: st, Cursor: cursor, Limit: deadListMax - len(l.Tasks)})
			if err != nil {
				v.Error = err.Error()
				break
			}
			l.Tasks = append(l.Tasks, p.Tasks...)
			if cursor = p.NextCursor; cursor == "" {
				break
			}
		}
		l.More = cursor != ""
		d.Lists = append(d.Lists, l)
	}
	v.Data = d
	s.render(w, r, "dead", http.StatusOK, v)
}

func (s *Server) deadAction(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		done(w, r, "/dead", "", fmt.Errorf("bad form: %v", err))
		return
	}
	handler := strings.TrimSpace(r.PostForm.Get("handler"))
	back := "/dead"
	if handler != "" {
		back += "?handler=" + queryEscape(handler)
	}
	if err := checkText("handler", handler, axapi.HandlerMaxBytes); err != nil {
		done(w, r, "/dead", "", err)
		return
	}
	ctx := r.Context()
	switch r.PathValue("action") {
	case "retry":
		ids := r.PostForm["id"]
		if len(ids) == 0 {
			done(w, r, back, "", errors.New("retry: no task selected"))
			return
		}
		if len(ids) > bulkMax {
			done(w, r, back, "", fmt.Errorf("retry: %d tasks selected, at most %d at once", len(ids), bulkMax))
			return
		}
		ok, errs := 0, []string{}
		for _, id := range ids {
			if err := checkID(id); err != nil {
				errs = append(errs, err.Error())
				continue
			}
			if err := s.api.call(ctx, "POST", axapi.TaskPath(id)+"/retry", struct{}{}, nil); err != nil {
				errs = append(errs, id+": "+err.Error())
				continue
			}
			ok++
		}
		if len(errs) > 0 {
			if len(errs) > 5 {
				errs = append(errs[:5], fmt.Sprintf("and %d more", len(errs)-5))
			}
			done(w, r, back, "", fmt.Errorf("retried %d of %d; %s", ok, len(ids), strings.Join(errs, "; ")))
			return
		}
		done(w, r, back, fmt.Sprintf("retried %d tasks", ok), nil)
	case "purge":
		st := strings.ToUpper(r.PostForm.Get("state"))
		if st != axapi.StateDead && st != axapi.StateFailed {
			done(w, r, back, "", fmt.Errorf("purge: state %q: want DEAD or FAILED", st))
			return
		}
		if r.PostForm.Get("confirm") != "yes" {
			done(w, r, back, "", errors.New("purge: tick the box to confirm"))
			return
		}
		purged, more, err := s.bulkPurge(ctx, handler, st)
		msg := fmt.Sprintf("purged %d %s tasks", purged, st)
		if more {
			msg += " (more remain: purge again)"
		}
		if err != nil && purged > 0 {
			// done shows the error alone: say what the earlier requests
			// of this click purged, which is gone all the same.
			err = fmt.Errorf("purged %d %s tasks, then: %w", purged, st, err)
		}
		done(w, r, back, msg, err)
	default:
		http.NotFound(w, r)
	}
}

// bulkPurge deletes up to bulkPurgeMax finished tasks of state st (and of
// handler, when not empty) through POST /v1/tasks/purge, following each
// answer's next_cursor while more may match, for at most bulkPurgeRounds
// requests and bulkPurgeBudget. It returns how many were purged, whether
// more may match, and the first error (with what was purged before it).
func (s *Server) bulkPurge(ctx context.Context, handler, st string) (purged int, more bool, err error) {
	req := axapi.PurgeRequest{Handler: handler, State: axapi.State(st), Limit: bulkPurgeMax}
	deadline := time.Now().Add(bulkPurgeBudget)
	for round := 1; ; round++ {
		var res axapi.PurgeResult
		if err := s.api.call(ctx, "POST", "/v1/tasks/purge", req, &res); err != nil {
			return purged, true, err
		}
		purged += res.Purged
		if !res.More {
			return purged, false, nil
		}
		if purged >= bulkPurgeMax || res.NextCursor == "" || round >= bulkPurgeRounds || time.Now().After(deadline) {
			return purged, true, nil
		}
		req.Cursor, req.Limit = res.NextCursor, bulkPurgeMax-purged
	}
}

// ---- helpers

func validState(s string) bool {
	for _, st := range axapi.States() {
		if s == st {
			return true
		}
	}
	return false
}

// checkText refuses what the API would: too long, not UTF-8, control
// characters.
func checkText(name, v string, max int) error {
	if len(v) > max {
		return fmt.Errorf("%s: longer than %d bytes", name, max)
	}
	if !utf8.ValidString(v) {
		return fmt.Errorf("%s: not valid UTF-8", name)
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%s: control characters are not allowed", name)
		}
	}
	return nil
}

func checkID(id string) error {
	if id == "" {
		return errors.New("task id: empty")
	}
	return checkText("task id", id, axapi.IDMaxBytes)
}

func isNotFound(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}

// statusOf is the dashboard's status for a failed API call: the API's
// 4xx as it is, 502 for the rest (the node failed or is unreachable).
func statusOf(err error) int {
	var e *APIError
	if errors.As(err, &e) && e.Status/100 == 4 {
		return e.Status
	}
	return http.StatusBadGateway
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// seconds formats a lateness in seconds for people.
func seconds(v float64) string {
	switch {
	case v < 0.001:
		return fmt.Sprintf("%.0f µs", v*1e6)
	case v < 1:
		return fmt.Sprintf("%.0f ms", v*1e3)
	default:
		return fmt.Sprintf("%.2f s", v)
	}
}
