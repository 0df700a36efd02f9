package ipc

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/axsched/ax/clients/go/axapi"
	"github.com/axsched/ax/sidecar/delivery/callback"
)

// openapi.yaml is written in the JSON subset of YAML, after a header of
// "#" comment lines, so that it is read here without a YAML library.

// specPending lists routes that openapi.yaml describes before the server has
// them: GET /metrics is added outside this package.
var specPending = map[string]bool{}

// loadSpec reads openapi.yaml as JSON, skipping comment lines.
func loadSpec(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var lines [][]byte
	for _, line := range bytes.Split(b, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			lines = append(lines, line)
		}
	}
	var spec map[string]any
	dec := json.NewDecoder(bytes.NewReader(bytes.Join(lines, []byte("\n"))))
	dec.UseNumber()
	if err := dec.Decode(&spec); err != nil {
		t.Fatalf("openapi.yaml is not in the JSON subset of YAML: %v", err)
	}
	if v, _ := spec["openapi"].(string); !strings.HasPrefix(v, "3.1.") {
		t.Fatalf("openapi = %q, want 3.1.x", v)
	}
	return spec
}

// at follows keys through nested objects and fails the test when one is
// missing.
func at(t *testing.T, v any, keys ...string) any {
	t.Helper()
	for i, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("openapi.yaml: %s is not an object", strings.Join(keys[:i], "."))
		}
		if v, ok = m[k]; !ok {
			t.Fatalf("openapi.yaml: no %s", strings.Join(keys[:i+1], "."))
		}
	}
	return v
}

// strs turns a JSON array of strings into a []string.
func strs(t *testing.T, v any) []string {
	t.Helper()
	arr, ok := v.([]any)
	if !ok {
		t.Fatalf("%v is not an array", v)
	}
	out := make([]string, len(arr))
	for i, x := range arr {
		if out[i], ok = x.(string); !ok {
			t.Fatalf("%v is not an array of strings", v)
		}
	}
	return out
}

// num reads a JSON number as an int.
func num(t *testing.T, v any) int {
	t.Helper()
	n, ok := v.(json.Number)
	if !ok {
		t.Fatalf("%v is not a number", v)
	}
	i, err := n.Int64()
	if err != nil {
		t.Fatal(err)
	}
	return int(i)
}

var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// specRoutes lists "METHOD /path" of every operation in paths.
func specRoutes(t *testing.T, spec map[string]any) []string {
	var out []string
	for path, item := range at(t, spec, "paths").(map[string]any) {
		for m := range item.(map[string]any) {
			if slices.Contains(httpMethods, m) {
				out = append(out, strings.ToUpper(m)+" "+path)
			}
		}
	}
	sort.Strings(out)
	return out
}

// serverRoutes lists "METHOD /pattern" of the route table.
func serverRoutes() []string {
	var out []string
	for _, r := range routes {
		out = append(out, r.Method+" "+r.Pattern)
	}
	sort.Strings(out)
	return out
}

func TestOpenAPI_Routes(t *testing.T) {
	spec := loadSpec(t)
	inSpec, inServer := specRoutes(t, spec), serverRoutes()
	for _, r := range inServer {
		if !slices.Contains(inSpec, r) {
			t.Errorf("%s is served but not in openapi.yaml", r)
		}
	}
	for _, r := range inSpec {
		if !slices.Contains(inServer, r) && !specPending[r] {
			t.Errorf("%s is in openapi.yaml but not served (routes in routes.go)", r)
		}
	}

	// Every {param} of a path is declared as a path parameter, and every
	// operation answers something.
	paths := at(t, spec, "paths").(map[string]any)
	for path, item := range paths {
		item := item.(map[string]any)
		for m, o := range item {
			if !slices.Contains(httpMethods, m) {
				continue
			}
			declared := map[string]bool{}
			var params []any
			if p, ok := item["parameters"].([]any); ok {
				params = append(params, p...)
			}
			if p, ok := o.(map[string]any)["parameters"].([]any); ok {
				params = append(params, p...)
			}
			for _, p := range params {
				p := resolve(t, spec, p).(map[string]any)
				if p["in"] == "path" {
					declared[p["name"].(string)] = true
				}
			}
			for _, seg := range strings.Split(path, "/") {
				if name, ok := strings.CutPrefix(seg, "{"); ok && !declared[strings.TrimSuffix(name, "}")] {
					t.Errorf("%s %s: path parameter %s is not declared", m, path, seg)
				}
			}
			if len(at(t, o, "responses").(map[string]any)) == 0 {
				t.Errorf("%s %s: no responses", m, path)
			}
			if _, ok := o.(map[string]any)["operationId"].(string); !ok {
				t.Errorf("%s %s: no operationId", m, path)
			}
		}
	}
}

// resolve follows a local $ref ("#/components/parameters/TaskID").
func resolve(t *testing.T, spec map[string]any, v any) any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	ref, ok := m["$ref"].(string)
	if !ok {
		return v
	}
	p, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		t.Fatalf("$ref %q is not local", ref)
	}
	var cur any = spec
	for _, k := range strings.Split(p, "/") {
		k = strings.NewReplacer("~1", "/", "~0", "~").Replace(k)
		next, ok := cur.(map[string]any)[k]
		if !ok {
			t.Fatalf("$ref %q does not resolve", ref)
		}
		cur = next
	}
	return cur
}

func TestOpenAPI_RefsResolve(t *testing.T) {
	spec := loadSpec(t)
	n := 0
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if _, ok := v["$ref"].(string); ok {
				resolve(t, spec, v)
				n++
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(spec)
	if n < 20 {
		t.Errorf("only %d $refs: the walk is broken", n)
	}
}

func TestOpenAPI_ErrorCodes(t *testing.T) {
	spec := loadSpec(t)
	got := strs(t, at(t, spec, "components", "schemas", "ErrorDetail", "properties", "code", "enum"))
	if !slices.Equal(got, ErrorCodes()) {
		t.Errorf("openapi.yaml error codes = %v\nErrorCodes() = %v", got, ErrorCodes())
	}
	if ref := at(t, spec, "components", "schemas", "Error", "properties", "error", "$ref"); ref != "#/components/schemas/ErrorDetail" {
		t.Errorf("Error.error = %v", ref)
	}
	// Each documented error response uses the Error schema.
	for name, r := range at(t, spec, "components", "responses").(map[string]any) {
		if ref := at(t, r, "content", "application/json", "schema", "$ref"); ref != "#/components/schemas/Error" {
			t.Errorf("response %s: schema %v, want Error", name, ref)
		}
	}
}

// jsonFields lists the JSON names of a struct's fields, those of an
// embedded struct without a tag included (as encoding/json promotes them).
func jsonFields(v any) []string {
	var out []string
	typ := reflect.TypeOf(v)
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for _, n := range jsonFields(reflect.Zero(f.Type).Interface()) {
				if !slices.Contains(out, n) {
					out = append(out, n)
				}
			}
			continue
		}
		if name != "" && name != "-" && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// props lists the property names of a schema.
func props(t *testing.T, spec map[string]any, schema string) []string {
	t.Helper()
	var out []string
	for k := range at(t, spec, "components", "schemas", schema, "properties").(map[string]any) {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestOpenAPI_Schemas checks the schemas against the Go types and bounds.
func TestOpenAPI_Schemas(t *testing.T) {
	spec := loadSpec(t)
	submit := jsonFields(submitRequest{})
	for _, tc := range []struct {
		schema string
		fields []string
	}{
		{"Task", append(jsonFields(Task{}), "payload", "payload_base64")},
		{"SubmitRequest", submit},
		{"ExecutorSpec", jsonFields(ExecutorSpec{})},
		{"AttemptResult", jsonFields(AttemptResult{})},
		{"ListPage", jsonFields(ListPage{})},
		{"ClusterInfo", jsonFields(ClusterInfo{})},
		{"Member", jsonFields(Member{})},
		{"HandlerInfo", jsonFields(HandlerInfo{})},
		{"HandlerExecutor", jsonFields(HandlerExecutor{})},
		{"HandlerPause", jsonFields(HandlerPause{})},
		{"Run", jsonFields(Run{})},
		{"RunAttempt", jsonFields(RunAttempt{})},
		{"Lateness", jsonFields(Lateness{})},
		{"RunsPage", jsonFields(RunsPage{})},
		{"Flow", jsonFields(Flow{})},
		{"StageView", jsonFields(StageView{})},
		{"FlowPage", jsonFields(FlowPage{})},
		{"Alert", jsonFields(axapi.Alert{})},
	} {
		sort.Strings(tc.fields)
		if got := props(t, spec, tc.schema); !slices.Equal(got, tc.fields) {
			t.Errorf("schema %s has properties %v, the Go type %v", tc.schema, got, tc.fields)
		}
	}

	sch := func(keys ...string) any { return at(t, spec, append([]string{"components", "schemas"}, keys...)...) }
	if got := strs(t, sch("State", "enum")); !slices.Equal(got, axapi.States()) {
		t.Errorf("State enum = %v, want %v", got, axapi.States())
	}
	if got := strs(t, sch("AttemptResult", "properties", "status", "enum")); !slices.Equal(got, axapi.ResultStatuses()) {
		t.Errorf("AttemptResult.status enum = %v, want %v", got, axapi.ResultStatuses())
	}
	for _, tc := range []struct {
		got  any
		want int
		what string
	}{
		{sch("BatchRequest", "properties", "tasks", "maxItems"), axapi.BatchMaxTasks, "BatchRequest.tasks maxItems"},
		{sch("AttemptResult", "properties", "error", "maxLength"), axapi.ResultErrorMaxBytes, "AttemptResult.error maxLength"},
		{sch("ExecutorSpec", "properties", "handlers", "maxItems"), axapi.ExecutorHandlersMax, "ExecutorSpec.handlers maxItems"},
		{sch("ExecutorSpec", "properties", "handlers", "items", "maxLength"), axapi.HandlerMaxBytes, "ExecutorSpec.handlers item maxLength"},
		{sch("ExecutorSpec", "properties", "min_concurrency", "maximum"), axapi.ConcurrencyMax, "min_concurrency maximum"},
		{sch("ExecutorSpec", "properties", "max_concurrency", "maximum"), axapi.ConcurrencyMax, "max_concurrency maximum"},
		{sch("SubmitRequest", "properties", "id", "maxLength"), axapi.IDMaxBytes, "SubmitRequest.id maxLength"},
		{sch("SubmitRequest", "properties", "handler", "maxLength"), axapi.HandlerMaxBytes, "SubmitRequest.handler maxLength"},
		{sch("SubmitRequest", "properties", "priority", "maximum"), axapi.PriorityMax, "priority maximum"},
		{sch("SubmitRequest", "properties", "priority", "default"), axapi.PriorityDefault, "priority default"},
		{sch("SubmitRequest", "properties", "max_attempts", "maximum"), axapi.MaxAttemptsMax, "max_attempts maximum"},
		{sch("SubmitRequest", "properties", "max_attempts", "default"), axapi.MaxAttemptsDefault, "max_attempts default"},
	} {
		if got := num(t, tc.got); got != tc.want {
			t.Errorf("%s = %d, want %d", tc.what, got, tc.want)
		}
	}
	if got := sch("SubmitRequest", "properties", "timeout", "default"); got != axapi.TimeoutDefault.String() {
		t.Errorf("SubmitRequest.timeout default = %v, want %s", got, axapi.TimeoutDefault)
	}

	// The list query parameters are those parseListQuery knows.
	var names []string
	for _, p := range at(t, spec, "paths", "/v1/tasks", "get", "parameters").([]any) {
		p := p.(map[string]any)
		names = append(names, p["name"].(string))
		if p["name"] == "limit" {
			if num(t, at(t, p, "schema", "maximum")) != ListLimitMax || num(t, at(t, p, "schema", "default")) != ListLimitDefault {
				t.Errorf("limit schema = %v, want maximum %d default %d", p["schema"], ListLimitMax, ListLimitDefault)
			}
		}
	}
	for _, n := range names {
		if _, err := parseListQuery(func(yield func(k, v []byte) bool) { yield([]byte(n), nil) }); err != nil {
			t.Errorf("list parameter %q of openapi.yaml: %v", n, err)
		}
	}
	if !slices.Equal(names, []string{"handler", "state", "limit", "cursor"}) {
		t.Errorf("list parameters = %v", names)
	}

	// The patterns agree with the validators.
	namePattern := regexp.MustCompile(sch("ExecutorSpec", "properties", "name", "pattern").(string))
	for _, name := range []string{"w", "a.b_c:d-1", strings.Repeat("n", axapi.ExecutorNameMaxBytes), "", "a b", "a/b", "ü", strings.Repeat("n", axapi.ExecutorNameMaxBytes+1)} {
		if ok := ValidateExecutorName(name) == nil; ok != namePattern.MatchString(name) {
			t.Errorf("name %q: ValidateExecutorName ok = %v, pattern %v", name, ok, !ok)
		}
	}
	if p := at(t, spec, "components", "parameters", "ExecutorName", "schema", "pattern"); p != namePattern.String() {
		t.Errorf("ExecutorName parameter pattern = %v, want %s", p, namePattern)
	}
	handlerPattern := regexp.MustCompile(sch("ExecutorSpec", "properties", "handlers", "items", "pattern").(string))
	for _, h := range []string{"*", "order.*", "order", "a*b", "**", "*x"} {
		_, err := ValidateExecutor(ExecutorSpec{Name: "w", Handlers: []string{h}, URL: "unix:///w.sock"})
		if ok := err == nil; ok != handlerPattern.MatchString(h) {
			t.Errorf("handler %q: ValidateExecutor ok = %v, pattern %v", h, ok, !ok)
		}
	}
}

func TestOpenAPI_Callback(t *testing.T) {
	spec := loadSpec(t)
	post := at(t, spec, "webhooks", "execute", "post")
	var headers []string
	for _, p := range at(t, post, "parameters").([]any) {
		p := p.(map[string]any)
		if p["in"] == "header" && p["required"] == true {
			headers = append(headers, p["name"].(string))
		}
	}
	want := []string{callback.HeaderTaskID, callback.HeaderHandler, callback.HeaderAttempt, callback.HeaderRun, callback.HeaderDeadline, callback.HeaderTraceParent}
	if !slices.Equal(headers, want) {
		t.Errorf("callback headers = %v, want %v", headers, want)
	}
	for _, text := range []string{at(t, post, "description").(string), at(t, spec, "info", "description").(string)} {
		if !strings.Contains(text, callback.ExecutePath) {
			t.Errorf("callback description does not name %s", callback.ExecutePath)
		}
	}
	alert := at(t, spec, "webhooks", "alert", "post")
	headers = nil
	for _, p := range at(t, alert, "parameters").([]any) {
		p := p.(map[string]any)
		if p["in"] == "header" && p["required"] == true {
			headers = append(headers, p["name"].(string))
		}
	}
	if want := []string{axapi.HeaderAlertID, axapi.HeaderTaskID, axapi.HeaderHandler, axapi.HeaderRun}; !slices.Equal(headers, want) {
		t.Errorf("alert headers = %v, want %v", headers, want)
	}
	if !strings.Contains(at(t, alert, "description").(string), callback.AlertPath) {
		t.Errorf("alert description does not name %s", callback.AlertPath)
	}
}

// TestDocRoutes checks the route table of doc.go against the server's.
func TestDocRoutes(t *testing.T) {
	b, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^//\t(GET|HEAD|POST|PUT|PATCH|DELETE) +(/\S*)`)
	var got []string
	for _, m := range line.FindAllStringSubmatch(string(b), -1) {
		got = append(got, m[1]+" "+m[2])
	}
	sort.Strings(got)
	if want := serverRoutes(); !slices.Equal(got, want) {
		t.Errorf("doc.go lists %v\nthe server serves %v", got, want)
	}
}

func TestOpenAPI_ShardsCallback(t *testing.T) {
	spec := loadSpec(t)
	post := at(t, spec, "webhooks", "shards", "post")
	if !strings.Contains(at(t, post, "description").(string), callback.ShardsPath) {
		t.Errorf("shards webhook does not name %s", callback.ShardsPath)
	}
	var optional []string
	for _, p := range at(t, spec, "webhooks", "execute", "post", "parameters").([]any) {
		p := p.(map[string]any)
		if p["in"] == "header" && p["required"] != true {
			optional = append(optional, p["name"].(string))
		}
	}
	for _, h := range []string{callback.HeaderShardIndex, callback.HeaderShardTotal} {
		if !slices.Contains(optional, h) {
			t.Errorf("execute webhook lacks the optional header %s (has %v)", h, optional)
		}
	}
}
