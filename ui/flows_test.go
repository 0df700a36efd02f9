package ui

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// diamond is A → (B, C) → D with B running, A done.
func diamond(name string) []flowStage {
	return []flowStage{
		{Name: "A", Handler: "h", State: "SUCCESS"},
		{Name: "B", Handler: "h", DependsOn: []string{"A"}, State: "RUNNING"},
		{Name: name, Handler: "<i>h</i>", DependsOn: []string{"A"}, OnFailure: "continue"},
		{Name: "D", Handler: "h", DependsOn: []string{"B", name}},
	}
}

func TestPages_FlowsNoAPI(t *testing.T) {
	f := newFakeAPI(t) // no flows routes: an older node
	_, b := startUI(t, f, "")
	st, body := b.get("/flows")
	if st != http.StatusOK {
		t.Errorf("flows list on an older node: %d", st)
	}
	mustContain(t, "list", body, `id="no-flows-api"`, "No flows API", `href="/flows" class="on"`)
	_, body = b.get("/flows/x")
	mustContain(t, "flow", body, "No flows API")
}

func TestPages_FlowsList(t *testing.T) {
	f := newFakeAPI(t)
	for i := 0; i < flowsShown+3; i++ {
		f.addFlow(fmt.Sprintf("f%03d", i), "RUNNING", diamond("C"))
	}
	f.addFlow("zz<b>", "SUCCESS", []flowStage{{Name: "only", Handler: "h", State: "SUCCESS"}})
	_, b := startUI(t, f, "")
	_, body := b.get("/flows")
	mustContain(t, "first page", body, `data-id="f000"`, `href="/flows/f000"`, `data-state="RUNNING">RUNNING`,
		`data-state="PENDING">PENDING <b>2</b>`, `data-state="SUCCESS">SUCCESS <b>1</b>`, `data-state="RUNNING">RUNNING <b>1</b>`, `id="next"`)
	if strings.Contains(body, "f050") {
		t.Error("more than one page of flows shown")
	}
	next := regexp.MustCompile(`id="next" href="([^"]+)"`).FindStringSubmatch(body)
	if next == nil {
		t.Fatal("no next link")
	}
	_, body = b.get(strings.ReplaceAll(next[1], "&amp;", "&"))
	mustContain(t, "second page", body, `data-id="f050"`, `data-id="f052"`, "zz&lt;b&gt;", `href="/flows/zz%3Cb%3E"`, "first page")
	if strings.Contains(body, "zz<b>") || strings.Contains(body, `data-id="f049"`) {
		t.Error("second page: unescaped id or a flow of the first page")
	}
	if !containsCall(f.callLog(), "GET /v1/flows?cursor=") {
		t.Errorf("no cursor passed on: %v", f.callLog())
	}
}

func TestPages_FlowAndCancel(t *testing.T) {
	f := newFakeAPI(t)
	f.addFlow("a/b", "RUNNING", diamond(`C"><script>x</script>`))
	_, b := startUI(t, f, "")
	page := "/flows/" + url.PathEscape("a/b")
	_, body := b.get(page)
	mustContain(t, "flow", body, `id="flow-id">a/b`, `id="flow-state">RUNNING`, `id="cancel"`)
	if strings.Contains(body, "<script>x") || strings.Contains(body, "<i>h") {
		t.Fatal("a stage name or handler is not escaped")
	}
	// Levels: A | B, C | D, in that order, each box with its state and link.
	levels := strings.Split(body, `<div class="level" data-level=`)[1:]
	want := [][]string{{"A"}, {"B", `C&#34;&gt;&lt;script&gt;x&lt;/script&gt;`}, {"D"}}
	if len(levels) != len(want) {
		t.Fatalf("levels: %d, want 3:\n%s", len(levels), body)
	}
	stageRE := regexp.MustCompile(`data-stage="([^"]*)" data-state="([^"]*)"`)
	for i, l := range levels {
		var got []string
		if !strings.HasPrefix(l, fmt.Sprintf(`"%d"`, i)) {
			t.Errorf("level %d: out of order", i)
		}
		for _, m := range stageRE.FindAllStringSubmatch(l, -1) {
			got = append(got, m[1])
		}
		if strings.Join(got, "|") != strings.Join(want[i], "|") {
			t.Errorf("level %d: %v, want %v\n%s", i, got, want[i], l)
		}
	}
	mustContain(t, "stages", body, `class="stage state-success" data-stage="A" data-state="SUCCESS"`,
		`class="stage state-running" data-stage="B" data-state="RUNNING"`, `data-stage="D" data-state="PENDING"`,
		`href="/tasks/flow%2Fa%2Fb%2F1%2FA"`, `href="/tasks/flow%2Fa%2Fb%2F1%2FB"`, "no task yet",
		"&lt;i&gt;h&lt;/i&gt;", "after B, C&#34;&gt;", "(even if failed)")
	// Live updates: the partial is the same content without the layout.
	st, part := b.do("GET", page, nil, map[string]string{"X-Ax-Partial": "1"})
	if st != 200 || strings.Contains(part, "<html") || !strings.Contains(part, `id="flow-state">RUNNING`) {
		t.Errorf("partial: %d %q", st, part)
	}
	// Cancel: CSRF required, then the confirmation box.
	if st, _ := b.do("POST", page+"/cancel", url.Values{"confirm": {"yes"}}, nil); st != http.StatusForbidden {
		t.Errorf("cancel without csrf: %d, want 403", st)
	}
	_, body = b.post(page, page+"/cancel", nil)
	mustContain(t, "unconfirmed", body, "tick the box")
	if f.flowState("a/b") != "RUNNING" || containsCall(f.callLog(), "DELETE") {
		t.Fatal("cancelled without CSRF or confirmation")
	}
	_, body = b.post(page, page+"/cancel", url.Values{"confirm": {"yes"}})
	mustContain(t, "cancelled", body, "cancel: done", `id="flow-state">CANCELLED`, `data-stage="D" data-state="CANCELLED"`)
	if strings.Contains(body, `id="cancel"`) {
		t.Error("a cancelled flow still offers Cancel")
	}
	if !containsCall(f.callLog(), "DELETE /v1/flows/a%2Fb") {
		t.Errorf("calls: %v", f.callLog())
	}
	// A missing flow: the API's 404.
	st, body = b.get("/flows/nope")
	if st != 404 {
		t.Errorf("missing flow: %d", st)
	}
	mustContain(t, "missing", body, "not_found")
}

func TestFlowLevels(t *testing.T) {
	f := &flow{ID: "x", Stages: []flowStage{
		{Name: "D", DependsOn: []string{"C", "A"}}, {Name: "A"}, {Name: "C", DependsOn: []string{"B"}}, {Name: "B", DependsOn: []string{"A"}}, {Name: "E"},
	}}
	var got []string
	for _, l := range flowLevels(f) {
		var names []string
		for _, s := range l {
			names = append(names, s.Name)
		}
		got = append(got, strings.Join(names, ","))
	}
	if g := strings.Join(got, " | "); g != "A,E | B | C | D" {
		t.Errorf("levels: %s", g)
	}
}
