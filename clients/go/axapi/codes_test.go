package axapi

import (
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestErrorTable checks the table itself: each code once, an error status,
// and a Code constant per row (LookupCode finds it).
func TestErrorTable(t *testing.T) {
	want := []string{"bad_request", "invalid_json", "invalid_traceparent", "invalid_tracestate", "invalid_shards", "not_found", "handler_not_found", "method_not_allowed", "conflict",
		"task_finished", "payload_too_large", "queue_full", "no_leader", "not_ready", "storage_unavailable", "internal"}
	if got := Codes(); !slices.Equal(got, want) {
		t.Errorf("Codes() = %q, want %q", got, want)
	}
	for _, e := range ErrorTable() {
		if e.Status < 400 || e.Status > 599 || e.Message == "" {
			t.Errorf("code %q: status %d, message %q", e.Code, e.Status, e.Message)
		}
		if got, ok := LookupCode(e.Code); !ok || got != e {
			t.Errorf("LookupCode(%q) = %+v, %v", e.Code, got, ok)
		}
	}
	if _, ok := LookupCode("teapot"); ok {
		t.Error("LookupCode found a code the table does not have")
	}
	table := ErrorTable()
	table[0].Code = "changed"
	if Codes()[0] != CodeBadRequest {
		t.Error("ErrorTable returned the table itself, not a copy")
	}
}

// Python's ERROR_CODES entries ("code": Class) and the classes'
// default_status.
var (
	pyEntry  = regexp.MustCompile(`(?m)^\s*"([a-z_]+)":\s*(\w+),\s*$`)
	pyClass  = regexp.MustCompile(`(?m)^class (\w+)\((\w+)`)
	pyStatus = regexp.MustCompile(`(?m)^\s*default_status\s*=\s*(\d+)`)
)

// pythonCodes returns the codes of ERROR_CODES in clients/python's
// axsched/errors.py, in order, with the default_status of each class (its
// own, or its base class's).
func pythonCodes(src string) (codes []string, status map[string]int) {
	classStatus, base := map[string]int{}, map[string]string{}
	classes := pyClass.FindAllStringSubmatchIndex(src, -1)
	for i, m := range classes {
		end := len(src)
		if i+1 < len(classes) {
			end = classes[i+1][0]
		}
		name := src[m[2]:m[3]]
		base[name] = src[m[4]:m[5]]
		if s := pyStatus.FindStringSubmatch(src[m[1]:end]); s != nil {
			classStatus[name], _ = strconv.Atoi(s[1])
		}
	}
	for name := range base {
		for c := name; classStatus[name] == 0 && c != ""; c = base[c] {
			classStatus[name] = classStatus[c]
		}
	}
	status = map[string]int{}
	for _, m := range pyEntry.FindAllStringSubmatch(src, -1) {
		codes = append(codes, m[1])
		status[m[1]] = classStatus[m[2]]
	}
	return codes, status
}

// TestErrorTable_MatchesPython fails when the Python client's ERROR_CODES
// (clients/python/axsched/errors.py) and this table drift apart: the same
// codes, in the same order, each class with the row's HTTP status. It skips
// outside the repository.
func TestErrorTable_MatchesPython(t *testing.T) {
	path := filepath.Join("..", "..", "python", "axsched", "errors.py")
	src, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("%s not found (the module is used outside the repository)", path)
	}
	if err != nil {
		t.Fatal(err)
	}
	codes, status := pythonCodes(string(src))
	if !slices.Equal(codes, Codes()) {
		t.Errorf("%s ERROR_CODES = %q\nthe error table (codes.go) = %q", path, codes, Codes())
	}
	for _, e := range ErrorTable() {
		if s, ok := status[e.Code]; ok && s != e.Status {
			t.Errorf("%s: the class of %q has default_status %d, the table %d", path, e.Code, s, e.Status)
		}
	}
}

// TestPythonCodes_SeesADrift keeps the parser honest: a code added on one
// side only, or a status changed, shows.
func TestPythonCodes_SeesADrift(t *testing.T) {
	src := "class NotFound(AxError):\n    default_code = \"not_found\"\n    default_status = 404\n\n\n" +
		"class Teapot(AxError):\n    default_status = 418\n\n\n" +
		"class GoneTask(NotFound):\n    default_code = \"gone\"\n\n\n" +
		"ERROR_CODES = {\n    \"not_found\": NotFound,\n    \"teapot\": Teapot,\n    \"gone\": GoneTask,\n}\n"
	codes, status := pythonCodes(src)
	if !slices.Equal(codes, []string{"not_found", "teapot", "gone"}) || status["not_found"] != 404 || status["teapot"] != 418 || status["gone"] != 404 {
		t.Errorf("pythonCodes = %q, %v", codes, status)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":                     0,
		"5":                    5 * time.Second,
		" 2 ":                  2 * time.Second,
		"0":                    0,
		"-1":                   0,
		"soon":                 0,
		"99999999999999999999": time.Duration(1<<63-1) / time.Second * time.Second,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Minute).Format(http.TimeFormat):     0,
	} {
		if got := ParseRetryAfter(v, now); got != want {
			t.Errorf("ParseRetryAfter(%q) = %s, want %s", v, got, want)
		}
	}
}
