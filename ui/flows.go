package ui

import (
	"context"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strconv"

	"github.com/axsched/ax/clients/go/axapi"
)

// Bounds of the flows pages.
const (
	// flowsShown is the flows of one page of the flows list (a page of
	// GET /v1/flows; the next is behind its cursor).
	flowsShown = 50
	// flowsCursorMax bounds the flows cursor a list URL may carry.
	flowsCursorMax = 1024
)

// flow, flowStage and flowPage are the socket API's flow views
// (axapi.Flow, axapi.StageView, axapi.FlowPage).
type (
	flow      = axapi.Flow
	flowStage = axapi.StageView
	flowPage  = axapi.FlowPage
)

// flowTerminal reports whether a flow state is final.
func flowTerminal(s string) bool {
	return s == axapi.StateSuccess || s == axapi.StateFailed || s == axapi.StateCancelled
}

func flowPath(id string) string { return "/v1/flows/" + pathEscape(id) }

// flows reads one page of GET /v1/flows from cursor. A node without the
// route answers 404 "no route" (routeMissing): the pages then say so.
func (a *api) flows(ctx context.Context, limit int, cursor string) (*flowPage, error) {
	v := url.Values{"limit": {strconv.Itoa(limit)}}
	if cursor != "" {
		v.Set("cursor", cursor)
	}
	var p flowPage
	return &p, a.call(ctx, "GET", "/v1/flows?"+v.Encode(), nil, &p)
}

func (a *api) flow(ctx context.Context, id string) (*flow, error) {
	var f flow
	return &f, a.call(ctx, "GET", flowPath(id), nil, &f)
}

const noFlowsAPI = "No flows API: this node has no flows routes (GET /v1/flows); it is older than flows."

// ---- flows list

type flowsData struct {
	Flows []flowRow
	None  string // why there is no list (an older node)
	Next  template.URL
	First template.URL
}

type flowRow struct {
	flow
	Counts []kvn
}

type kvn struct {
	K string
	N int
}

// stageCounts are a flow's stages by state, in a fixed state order.
func stageCounts(f *flow) []kvn {
	m := map[string]int{}
	for _, s := range f.Stages {
		m[s.State]++
	}
	var out []kvn
	for _, st := range append([]string{"PENDING"}, axapi.States()...) {
		if m[st] > 0 {
			out = append(out, kvn{st, m[st]})
			delete(m, st)
		}
	}
	for _, st := range sortedKeys(m) {
		out = append(out, kvn{st, m[st]})
	}
	return out
}

func (s *Server) flowsPage(w http.ResponseWriter, r *http.Request) {
	v := view{Title: "Flows", Nav: "flows"}
	cursor := r.URL.Query().Get("cursor")
	if err := checkText("cursor", cursor, flowsCursorMax); err != nil {
		v.Error = err.Error()
		s.render(w, r, "flows", http.StatusBadRequest, v)
		return
	}
	p, err := s.api.flows(r.Context(), flowsShown, cursor)
	d := flowsData{}
	switch {
	case routeMissing(err):
		d.None = noFlowsAPI
	case err != nil:
		v.Error = err.Error()
		s.render(w, r, "flows", statusOf(err), v)
		return
	default:
		for i := range p.Flows {
			d.Flows = append(d.Flows, flowRow{flow: p.Flows[i], Counts: stageCounts(&p.Flows[i])})
		}
		if p.NextCursor != "" {
			d.Next = template.URL("/flows?cursor=" + queryEscape(p.NextCursor))
		}
		if cursor != "" {
			d.First = "/flows"
		}
	}
	v.Data = d
	s.render(w, r, "flows", http.StatusOK, v)
}

// ---- one flow

type flowData struct {
	Flow     *flow
	Levels   [][]stageBox
	Counts   []kvn
	Terminal bool
	None     string
}

type stageBox struct {
	flowStage
	Level int
	Task  template.URL // its task page; "" while PENDING (no task yet)
}

// flowLevels groups a flow's stages by depth in the dependency graph: a
// stage without dependencies is at level 0, any other one level after its
// deepest dependency. Stages keep the flow's order within a level. An
// unknown dependency or a cycle (the API refuses both) counts as level 0.
func flowLevels(f *flow) [][]stageBox {
	idx := make(map[string]int, len(f.Stages))
	for i, s := range f.Stages {
		idx[s.Name] = i
	}
	depth := make([]int, len(f.Stages))
	for i := range depth {
		depth[i] = -1
	}
	var visit func(i int, seen int) int
	visit = func(i, seen int) int {
		if depth[i] >= 0 {
			return depth[i]
		}
		if seen > len(f.Stages) {
			return 0 // a cycle
		}
		d := 0
		for _, dep := range f.Stages[i].DependsOn {
			if j, ok := idx[dep]; ok {
				if dd := visit(j, seen+1) + 1; dd > d {
					d = dd
				}
			}
		}
		depth[i] = d
		return d
	}
	var levels [][]stageBox
	for i, s := range f.Stages {
		d := visit(i, 0)
		for len(levels) <= d {
			levels = append(levels, nil)
		}
		b := stageBox{flowStage: s, Level: d}
		if s.TaskID != "" {
			b.Task = template.URL("/tasks/" + pathEscape(s.TaskID))
		}
		levels[d] = append(levels[d], b)
	}
	return levels
}

func checkFlowID(id string) error {
	if id == "" {
		return errors.New("flow id: empty")
	}
	return checkText("flow id", id, axapi.IDMaxBytes)
}

func (s *Server) flowPage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	v := view{Title: "Flow " + id, Nav: "flows"}
	if err := checkFlowID(id); err != nil {
		v.Error = err.Error()
		s.render(w, r, "flow", http.StatusBadRequest, v)
		return
	}
	f, err := s.api.flow(r.Context(), id)
	switch {
	case routeMissing(err):
		v.Data = flowData{None: noFlowsAPI}
		s.render(w, r, "flow", http.StatusOK, v)
		return
	case err != nil:
		v.Error = err.Error()
		s.render(w, r, "flow", statusOf(err), v)
		return
	}
	v.Data = flowData{Flow: f, Levels: flowLevels(f), Counts: stageCounts(f), Terminal: flowTerminal(f.State)}
	s.render(w, r, "flow", http.StatusOK, v)
}

func (s *Server) flowAction(w http.ResponseWriter, r *http.Request) {
	id, action := r.PathValue("id"), r.PathValue("action")
	back := "/flows/" + pathEscape(id)
	if err := checkFlowID(id); err != nil {
		done(w, r, "/flows", "", err)
		return
	}
	switch action {
	case "cancel":
		if r.PostFormValue("confirm") != "yes" {
			done(w, r, back, "", errors.New("cancel: tick the box to confirm"))
			return
		}
		err := s.api.call(r.Context(), "DELETE", flowPath(id), nil, nil)
		if routeMissing(err) {
			err = errors.New(noFlowsAPI)
		}
		done(w, r, back, "cancel: done", err)
	default:
		http.NotFound(w, r)
	}
}
