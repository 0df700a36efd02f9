package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/bench"
)

// recurringTask is a fake task with every field of the API's Task view,
// and one the CLI does not know yet.
func recurringTask(id string) fakeTask {
	t := newFakeTask(id, "report.build", "WAITING")
	t["cron"], t["timezone"], t["repeats"], t["until"] = "0 2 * * *", "Europe/Berlin", 10, "2030-01-01T00:00:00Z"
	t["run"], t["snoozes"] = 3, 2
	t["labels"] = map[string]string{"team": "ops", "env": "prod"}
	t["route_key"] = "tenant-7"
	t["backoff"] = map[string]any{"initial": "1s", "max": "1m0s", "multiplier": 3, "jitter": 0.1}
	t["future_field"] = map[string]any{"x": []int{1, 2}}
	return t
}

// jsonKeys decodes a JSON object and returns it.
func jsonObject(t *testing.T, out string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, out)
	}
	return v
}

// TestJSONIsTheAPIsJSON checks that --json of get, cancel and retry prints
// every field of the answer, including those the Go client drops.
func TestJSONIsTheAPIsJSON(t *testing.T) {
	f := startFake(t)
	f.put(recurringTask("r"))
	dead := recurringTask("d")
	dead["state"] = "DEAD"
	delete(dead, "next_run_at")
	f.put(dead)
	fields := []string{"cron", "timezone", "repeats", "until", "run", "snoozes", "labels", "route_key", "backoff", "future_field"}
	for _, args := range [][]string{{"get", "r"}, {"get", "r", "--consistency", "strong"}, {"retry", "d"}, {"cancel", "r"}} {
		out, errOut, code := runAx(t, append(args, "--socket", f.Socket, "--json")...)
		if code != 0 {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errOut)
		}
		v := jsonObject(t, out)
		for _, k := range fields {
			if _, ok := v[k]; !ok {
				t.Errorf("%v --json lacks %q:\n%s", args, k, out)
			}
		}
		if v["run"] != float64(3) || v["snoozes"] != float64(2) || v["route_key"] != "tenant-7" {
			t.Errorf("%v --json: %v", args, v)
		}
	}

	out, errOut, code := runAx(t, "submit", "h", "--socket", f.Socket, "--id", "e", "--every", "5m", "--repeats", "3",
		"--until", "2030-01-01T01:00:00+01:00", "--label", "a=1", "--route-key", "k", "--json")
	if code != 0 {
		t.Fatalf("submit: exit %d, stderr %q", code, errOut)
	}
	v := jsonObject(t, out)
	if v["every"] != "5m0s" || v["repeats"] != float64(3) || v["route_key"] != "k" || v["until"] != "2030-01-01T00:00:00Z" || v["run"] != float64(1) {
		t.Errorf("submit --json: %v", v)
	}
}

func TestGetShowsScheduleLabelsAndBackoff(t *testing.T) {
	f := startFake(t)
	f.put(recurringTask("r"))
	out, errOut, code := runAx(t, "get", "r", "--socket", f.Socket)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for k, want := range map[string]string{
		"Cron": "0 2 * * * (Europe/Berlin)", "Repeats": "10 runs", "Run": "3", "Snoozes": "2",
		"Labels": "env=prod, team=ops", "Route key": "tenant-7", "Backoff": "1s, ×3 per retry, at most 1m0s, jitter ±10%",
	} {
		if got := field(out, k); got != want {
			t.Errorf("%s: %q, want %q in\n%s", k, got, want, out)
		}
	}
	if got := field(out, "Until"); !strings.HasPrefix(got, "2030-01-01 00:00:00Z (in ") {
		t.Errorf("Until: %q", got)
	}

	every := newFakeTask("e", "poll", "WAITING")
	every["every"] = "5m0s"
	f.put(every)
	out, _, _ = runAx(t, "get", "e", "--socket", f.Socket)
	if field(out, "Every") != "5m0s" || field(out, "Repeats") != "no limit" || field(out, "Cron") != "" || field(out, "Labels") != "" {
		t.Errorf("every task:\n%s", out)
	}
	out, _, _ = runAx(t, "get", "e", "--socket", f.Socket, "--consistency", "strong")
	if got := f.lastRequest(); got != "GET /v1/tasks/e?consistency=strong" {
		t.Errorf("request %q", got)
	}
	if field(out, "Every") != "5m0s" {
		t.Errorf("--consistency strong:\n%s", out)
	}
}

func TestSubmitScheduleAndRoutingFlags(t *testing.T) {
	f := startFake(t)
	_, errOut, code := runAx(t, "submit", "h", "--socket", f.Socket, "--cron", "0 2 * * *", "--timezone", "Europe/Berlin",
		"--repeats", "5", "--until", "2030-01-01T00:00:00Z", "--label", "team=ops", "--label", "k=v=w", "--route-key", "rk",
		"--backoff-initial", "1s", "--backoff-max", "1m", "--backoff-multiplier", "1.5", "--backoff-jitter", "0")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal([]byte(f.bodies[0]), &body); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"cron": `"0 2 * * *"`, "timezone": `"Europe/Berlin"`, "repeats": `5`, "until": `"2030-01-01T00:00:00Z"`,
		"labels": `{"k":"v=w","team":"ops"}`, "route_key": `"rk"`,
		"backoff": `{"initial":"1s","max":"1m0s","multiplier":1.5,"jitter":0}`,
	} {
		if got := string(body[k]); got != want {
			t.Errorf("%s: %s, want %s (body %s)", k, got, want, f.bodies[0])
		}
	}
	for _, k := range []string{"every", "delay", "priority", "max_attempts", "timeout"} {
		if _, ok := body[k]; ok {
			t.Errorf("body has %s without the flag: %s", k, f.bodies[0])
		}
	}
	_, _, code = runAx(t, "submit", "h", "--socket", f.Socket, "--id", "second", "--every", "90s", "--backoff-jitter", "0.5")
	if code != 0 || !strings.Contains(f.bodies[1], `"every":"1m30s"`) || !strings.Contains(f.bodies[1], `"backoff":{"jitter":0.5}`) {
		t.Errorf("exit %d, body %s", code, f.bodies[1])
	}
}

func TestSubmitIdempotentAndBacklogWarning(t *testing.T) {
	f := startFake(t)
	args := []string{"submit", "h", "--socket", f.Socket, "--id", "x", "--delay", "1m"}
	if out, errOut, code := runAx(t, args...); code != 0 || !strings.HasPrefix(out, "submitted x: WAITING, runs ") {
		t.Fatalf("first submit: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, errOut, code := runAx(t, args...)
	if code != 0 || out != "task x already exists with the same spec (WAITING)\n" || errOut != "" {
		t.Errorf("second submit: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, errOut, code = runAx(t, "submit", "busy", "--socket", f.Socket)
	if code != 0 || !strings.HasPrefix(out, "submitted ") || !strings.Contains(errOut, "850/1000") {
		t.Errorf("backlog warning: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestPayloadOverTheLimit(t *testing.T) {
	f := startFake(t)
	dir := t.TempDir()
	big := filepath.Join(dir, "big.bin")
	if err := os.WriteFile(big, bytes.Repeat([]byte{0}, 1<<20+1), 0o644); err != nil {
		t.Fatal(err)
	}
	exact := filepath.Join(dir, "exact.bin")
	if err := os.WriteFile(exact, bytes.Repeat([]byte{0}, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	bigJSON := `"` + strings.Repeat("a", 1<<20) + `"`

	_, errOut, code := runAx(t, "submit", "h", "--socket", f.Socket, "--payload-file", big)
	if code != exitUsage || errOut != "ax: payload is 1048577 bytes; the limit is 1 MiB\n" {
		t.Errorf("file: exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = runAx(t, "submit", "h", "--socket", f.Socket, "--payload", bigJSON)
	if code != exitUsage || errOut != "ax: payload is 1048578 bytes; the limit is 1 MiB\n" {
		t.Errorf("--payload: exit %d, stderr %q", code, errOut)
	}
	var out, stderr bytes.Buffer
	code = run([]string{"submit", "h", "--socket", f.Socket, "--payload-file", "-"}, bytes.NewReader(bytes.Repeat([]byte("x"), 3<<20)), &out, &stderr)
	if code != exitUsage || stderr.String() != "ax: payload is 3145728 bytes; the limit is 1 MiB\n" {
		t.Errorf("stdin: exit %d, stderr %q", code, stderr.String())
	}
	if len(f.requests) != 0 {
		t.Errorf("a payload over the limit was sent: %v", f.requests)
	}
	// Exactly 1 MiB is fine; binary goes as base64.
	if _, errOut, code := runAx(t, "submit", "h", "--socket", f.Socket, "--payload-file", exact); code != 0 {
		t.Errorf("1 MiB: exit %d, stderr %q", code, errOut)
	}
	if len(f.bodies) != 1 || !strings.Contains(f.bodies[0], `"payload_base64":"AAAA`) {
		t.Errorf("1 MiB binary payload not sent as base64")
	}
}

// A payload file that is JSON but not UTF-8 goes as payload_base64: the
// sidecar refuses a body that is not UTF-8 (400 invalid_json).
func TestPayloadFileNotUTF8(t *testing.T) {
	f := startFake(t)
	file := filepath.Join(t.TempDir(), "p.json")
	if err := os.WriteFile(file, []byte("{\"a\":\"\xff\"}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := runAx(t, "submit", "h", "--socket", f.Socket, "--payload-file", file); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if len(f.bodies) != 1 || !strings.Contains(f.bodies[0], `"payload_base64":"eyJhIjoi/yJ9"`) {
		t.Errorf("bodies %q, want the file as payload_base64", f.bodies)
	}
}

// startNotSidecar serves HTTP on a Unix socket like an executor does: 404
// "404 page not found" for the API's paths, 200 text for /healthz.
func startNotSidecar(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "axcli")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "exec.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /ax/v1/execute", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET /v1/cluster", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

func TestNotASidecar(t *testing.T) {
	sock := startNotSidecar(t)
	want404 := "ax: " + sock + " does not look like an ax sidecar (HTTP 404 Not Found: 404 page not found)\n"
	for _, args := range [][]string{
		{"get", "x"}, {"list"}, {"cancel", "x"}, {"retry", "x"}, {"submit", "h"}, {"get", "x", "--json"},
	} {
		out, errOut, code := runAx(t, append(args, "--socket", sock)...)
		if code != exitAPIError || out != "" || errOut != want404 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q, want %q", args, code, out, errOut, want404)
		}
	}
	_, errOut, code := runAx(t, "cluster", "status", "--socket", sock)
	if want := "ax: " + sock + " does not look like an ax sidecar (HTTP 200 OK, not the API's JSON)\n"; code != exitAPIError || errOut != want {
		t.Errorf("cluster status: exit %d, stderr %q, want %q", code, errOut, want)
	}
	_, errOut, code = runAx(t, "cluster", "remove", "n9", "--socket", sock)
	if code != exitAPIError || !strings.Contains(errOut, "does not look like an ax sidecar") || strings.Contains(errOut, "not supported") {
		t.Errorf("cluster remove: exit %d, stderr %q", code, errOut)
	}
}

func TestNoDoubledPrefix(t *testing.T) {
	_, errOut, code := runAx(t, "cluster", "remove", "n9", "--socket", "/nonexistent/ax.sock")
	want := "ax: cluster remove n9: cannot reach sidecar at /nonexistent/ax.sock: connect: no such file or directory (is the sidecar running? see --socket or $AX_SOCKET)\n"
	if code != exitAPIError || errOut != want {
		t.Errorf("exit %d, stderr %q, want %q", code, errOut, want)
	}
}

func TestCommandGroupsRefuseUnknownSubcommands(t *testing.T) {
	for args, want := range map[string]string{
		"cluster bogus":  `ax: cluster: unknown command "bogus" (want one of: recover, remove, status; see ax cluster --help)`,
		"cluster statsu": `ax: cluster: unknown command "statsu"; did you mean status? (want one of: recover, remove, status; see ax cluster --help)`,
		"cluster":        `ax: cluster: missing command, one of: recover, remove, status (see ax cluster --help)`,
		"bench bogus":    `ax: bench: unknown command "bogus" (want one of: burst, delayed, throughput; see ax bench --help)`,
		"bench":          `ax: bench: missing command, one of: burst, delayed, throughput (see ax bench --help)`,
	} {
		out, errOut, code := runAx(t, strings.Fields(args)...)
		if code != exitUsage || out != "" || errOut != want+"\n" {
			t.Errorf("ax %s: exit %d, stdout %q, stderr %q, want %q", args, code, out, errOut, want)
		}
	}
	// --socket on a group is taken for what it is: a missing subcommand.
	if _, errOut, code := runAx(t, "cluster", "--socket", "x"); code != exitUsage || !strings.Contains(errOut, "missing command") {
		t.Errorf("cluster --socket x: exit %d, stderr %q", code, errOut)
	}
	// Help still works, and shows no [flags] usage line for the group.
	out, _, code := runAx(t, "cluster", "--help")
	if code != 0 || !strings.Contains(out, "ax cluster [command]") || strings.Contains(out, "ax cluster [flags]") {
		t.Errorf("cluster --help: exit %d\n%s", code, out)
	}
}

func TestMoreUsageErrors(t *testing.T) {
	f := startFake(t)
	for args, want := range map[string]string{
		"submit ''":                                      "ax: handler: required",
		"submit h --max-attempts 1000000":                "ax: --max-attempts 1000000: want 1 to 1000",
		"submit h --max-attempts 0":                      "ax: --max-attempts 0: want 1 to 1000",
		"submit h --priority 9":                          "ax: --priority 9: want 0 (highest) to 4 (lowest)",
		"submit h --priority -1":                         "ax: --priority -1: want 0 (highest) to 4 (lowest)",
		"submit h --priority abc":                        `ax: --priority "abc": not a number`,
		"submit h --delay soon":                          `ax: --delay "soon": not a duration (like 500ms, 90s, 30m, 2h)`,
		"submit h --backoff-jitter lots":                 `ax: --backoff-jitter "lots": not a number`,
		"submit h --overwrite=maybe":                     `ax: --overwrite "maybe": want true or false`,
		"list --limit 99999999999999999999":              `ax: --limit "99999999999999999999": out of range`,
		"submit h --timeout 25h":                         "ax: --timeout 25h0m0s: want more than 0 and at most 24h0m0s",
		"submit h --every 1s --cron @daily":              "ax: give --every or --cron, not both",
		"submit h --every 100ms":                         "ax: --every 100ms: must be at least 1s",
		"submit h --timezone UTC":                        "ax: --timezone goes with --cron",
		"submit h --repeats 3":                           "ax: --repeats goes with --every or --cron",
		"submit h --until 2030-01-01T00:00:00Z":          "ax: --until goes with --every or --cron",
		"submit h --every 1m --until later":              `ax: --until "later": want an RFC 3339 time like 2026-07-01T06:00:00Z`,
		"submit h --label nokey":                         `ax: --label "nokey": want KEY=VALUE`,
		"submit h --label a=1 --label a=2":               `ax: --label "a=2": key "a" given twice`,
		"submit h --backoff-initial 0s":                  "ax: --backoff-initial 0s: must be positive",
		"submit h --backoff-initial 2s --backoff-max 1s": "ax: --backoff-max 1s: must not be less than --backoff-initial 2s",
		"submit h --backoff-multiplier 0.5":              "ax: --backoff-multiplier 0.5: must be 1 or more",
		"submit h --backoff-jitter 2":                    "ax: --backoff-jitter 2: want a fraction from 0 to 1",
		"get x --consistency eventual":                   `ax: --consistency "eventual": want local or strong`,
		"sidecar --routing foo":                          `ax: routing "foo": want least_loaded, round_robin or hash`,
		"sidecar --log-level loud":                       `ax: --log-level "loud": want debug, info, warn or error`,
		"sidecar --log-format xml":                       `ax: --log-format "xml": want json or console`,
		"sidecar --executor bogus":                       `ax: executor "bogus": want HANDLER=URL`,
		"sidecar --handler-limit h=0":                    `ax: --handler-limit "h=0": want HANDLER=N with N >= 1`,
		"sidecar --on-dead-url https://x.example/hook":   `ax: OnDeadURL (--on-dead-url): alert url "https://x.example/hook": scheme "https" is not supported: want unix or http`,
		"dev --routing foo":                              `ax: routing "foo": want least_loaded, round_robin or hash`,
		"dev --log-level loud":                           `ax: --log-level "loud": want debug, info, warn or error`,
		"dev --executor bogus":                           `ax: executor "bogus": want HANDLER=URL`,
		"dev --bootstrap-expect 3 --join 127.0.0.1:1":    "ax: ax dev runs one node; use 'ax sidecar' for a cluster",
		"sidecar extra":                                  `ax: sidecar: unexpected argument "extra" (usage: ax sidecar [flags])`,
		"get ''":                                         "ax: get: ID must not be empty (usage: ax get ID [flags])",
		"cancel ''":                                      "ax: cancel: ID must not be empty (usage: ax cancel ID [flags])",
		"retry ''":                                       "ax: retry: ID must not be empty (usage: ax retry ID [flags])",
		"cluster remove ''":                              "ax: cluster remove: NODE must not be empty (usage: ax cluster remove NODE [flags])",
	} {
		argv := strings.Fields(args)
		for i := range argv {
			if argv[i] == "''" {
				argv[i] = ""
			}
		}
		if argv[0] != "sidecar" && argv[0] != "dev" {
			argv = append(argv, "--socket", f.Socket)
		}
		out, errOut, code := runAx(t, argv...)
		if code != exitUsage || out != "" || errOut != want+"\n" {
			t.Errorf("ax %s: exit %d, stdout %q, stderr %q, want %q", args, code, out, errOut, want)
		}
	}
	if len(f.requests) != 0 {
		t.Errorf("usage errors sent requests: %v", f.requests)
	}
}

func TestCancelAlreadyCancelled(t *testing.T) {
	f := startFake(t)
	c := newFakeTask("c", "h", "CANCELLED")
	f.put(c)
	out, errOut, code := runAx(t, "cancel", "c", "--socket", f.Socket)
	if code != 0 || out != "c was already CANCELLED; nothing to cancel\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	f.put(newFakeTask("s", "h", "SUCCESS"))
	out, _, _ = runAx(t, "cancel", "s", "--socket", f.Socket)
	if out != "s was already SUCCESS; nothing to cancel\n" {
		t.Errorf("SUCCESS: stdout %q", out)
	}
}

func TestListCursor(t *testing.T) {
	f := startFake(t)
	for _, id := range []string{"a", "b", "c", "d"} {
		f.put(newFakeTask(id, "h", "WAITING"))
	}
	out, errOut, code := runAx(t, "list", "--socket", f.Socket, "--limit", "2")
	if code != 0 || !strings.Contains(errOut, "continue with --cursor b") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, _, code = runAx(t, "list", "--socket", f.Socket, "--cursor", "b")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[1], "c ") || !strings.HasPrefix(lines[2], "d ") {
		t.Errorf("--cursor b: exit %d\n%s", code, out)
	}
	if !strings.Contains(f.lastRequest(), "cursor=b") {
		t.Errorf("request %q", f.lastRequest())
	}
	out, _, _ = runAx(t, "list", "--socket", f.Socket, "--limit", "1", "--json")
	if v := jsonObject(t, out); v["next_cursor"] != "a" {
		t.Errorf("--json next_cursor: %v", v)
	}
}

func TestVersion(t *testing.T) {
	out, errOut, code := runAx(t, "version")
	if code != 0 || !strings.HasPrefix(out, "ax ") || strings.Count(out, "\n") != 1 || errOut != "" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if v := strings.TrimSpace(strings.TrimPrefix(out, "ax ")); v != version() || v == "" {
		t.Errorf("version %q, want %q", v, version())
	}
	if out2, _, code := runAx(t, "--version"); code != 0 || out2 != out {
		t.Errorf("--version: %q, want %q", out2, out)
	}
}

func TestTimesAreUTC(t *testing.T) {
	now := time.Date(2026, 11, 30, 7, 59, 57, 0, time.UTC)
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.FixedZone("CET", 3600))
	if got, want := fmtTime(&at, now), "2026-11-30 08:00:00Z (in 3s)"; got != want {
		t.Errorf("fmtTime %q, want %q", got, want)
	}
	if got := fmtTime(nil, now); got != "-" {
		t.Errorf("nil: %q", got)
	}
	t.Setenv("TZ", "Asia/Tokyo")
	f := startFake(t)
	task := newFakeTask("x", "h", "WAITING")
	task["next_run_at"] = "2030-01-02T03:04:05Z"
	f.put(task)
	out, _, _ := runAx(t, "get", "x", "--socket", f.Socket)
	if got := field(out, "Next run"); !strings.HasPrefix(got, "2030-01-02 03:04:05Z (in ") {
		t.Errorf("Next run %q", got)
	}
}

func TestDisplayWidth(t *testing.T) {
	for s, want := range map[string]int{
		"abc": 3, "注文": 4, "🍣": 2, "e\u0301": 1, "ｱ": 1, "Ａ": 2, "한국": 4, "a\u200db": 2, "": 0, "✅": 2, "é": 1,
	} {
		if got := displayWidth(s); got != want {
			t.Errorf("displayWidth(%q) = %d, want %d", s, got, want)
		}
	}
	if got := truncateWidth("注文注文注文", 7); got != "注文注…" || displayWidth(got) != 7 {
		t.Errorf("truncateWidth %q", got)
	}
	if got := truncateWidth("abc", 3); got != "abc" {
		t.Errorf("truncateWidth %q", got)
	}
}

// TestListAlignsWideIDs checks that the columns of `ax list` line up when
// ids have CJK characters or emoji, and that an overlong id is cut.
func TestListAlignsWideIDs(t *testing.T) {
	f := startFake(t)
	long := strings.Repeat("長", 100)
	for _, id := range []string{"ascii-id", "注文|42", "🍣🍣", long} {
		f.put(newFakeTask(id, "h", "WAITING"))
	}
	out, errOut, code := runAx(t, "list", "--socket", f.Socket)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines:\n%s", len(lines), out)
	}
	col := -1
	for _, l := range lines {
		i := strings.Index(l, "HANDLER")
		if i < 0 {
			i = strings.Index(l, "  h  ") + 2
		}
		c := displayWidth(l[:i])
		if col >= 0 && c != col {
			t.Errorf("HANDLER column at %d, want %d:\n%s", c, col, out)
		}
		col = c
	}
	if strings.Contains(out, long) || !strings.Contains(out, "…") || col > idWidth+2 {
		t.Errorf("the long id is not cut:\n%s", out)
	}
}

func TestBenchNotesHideTheRemovedDataDir(t *testing.T) {
	var buf bytes.Buffer
	n := &noteFilter{w: &buf, dropDataDir: true}
	n.Write([]byte("ax bench: 1 node(s) ready in 1.2s (data and logs in /tmp/axb-123)\nax bench: kept the"))
	n.Write([]byte(" nodes' data and logs in /tmp/axb-123\n"))
	if want := "ax bench: 1 node(s) ready in 1.2s\nax bench: kept the nodes' data and logs in /tmp/axb-123\n"; buf.String() != want {
		t.Errorf("got %q, want %q", buf.String(), want)
	}
	buf.Reset()
	n = &noteFilter{w: &buf}
	n.Write([]byte("ax bench: 1 node(s) ready in 1.2s (data and logs in /tmp/axb-123)\n"))
	if !strings.Contains(buf.String(), "/tmp/axb-123") {
		t.Errorf("--keep-data: %q", buf.String())
	}
	for _, args := range [][]string{
		{"bench", "throughput", "--keep-tasks"},
		{"bench", "throughput", "--socket", "/x.sock", "--executor-listen", "unix:///x.sock", "--keep-data"},
	} {
		if _, errOut, code := runAx(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
}

func TestCancelWaitingBenchTasks(t *testing.T) {
	f := startFake(t)
	handler := bench.HandlerPrefix + "throughput"
	for _, id := range []string{"axb01-0-1", "axb01-0-2", "axb01-b0-1-1"} {
		f.put(newFakeTask(id, handler, "WAITING"))
	}
	f.put(newFakeTask("axb01-0-3", handler, "SUCCESS"))
	f.put(newFakeTask("mine", handler, "WAITING"))
	f.put(newFakeTask("axb02-0-1", "other", "WAITING"))
	old := newFakeTask("axb00-0-1", handler, "WAITING")
	old["created_at"] = time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano)
	f.put(old)

	n, err := cancelWaiting(context.Background(), f.Socket, handler, time.Now().Add(-time.Minute), nil)
	if err != nil || n != 3 {
		t.Fatalf("cancelled %d, err %v; want 3", n, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, want := range map[string]string{
		"axb01-0-1": "CANCELLED", "axb01-b0-1-1": "CANCELLED", "axb01-0-3": "SUCCESS", "mine": "WAITING", "axb02-0-1": "WAITING", "axb00-0-1": "WAITING",
	} {
		if got := f.tasks[id]["state"]; got != want {
			t.Errorf("%s: %v, want %s", id, got, want)
		}
	}
}

func TestRoundDurKeepsNonZeroSeconds(t *testing.T) {
	for d, want := range map[time.Duration]string{
		40 * time.Second:                "40s",
		5*time.Minute + 40*time.Second:  "5m40s",
		5*time.Minute + 10*time.Second:  "5m10s",
		5 * time.Minute:                 "5m",
		59*time.Minute + 59*time.Second: "59m59s",
		2*time.Hour + 5*time.Minute:     "2h5m",
		2*time.Hour + 50*time.Minute:    "2h50m",
		3 * time.Hour:                   "3h0m",
		50 * time.Hour:                  "2d2h",
	} {
		if got := roundDur(d); got != want {
			t.Errorf("roundDur(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestSubmitShardsFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--shards", "8"}, `{"count":8}`},
		{[]string{"--shards-ask", "--shards-max", "64"}, `{"ask":true,"max":64}`},
	} {
		f := startFake(t)
		_, errOut, code := runAx(t, append([]string{"submit", "h", "--socket", f.Socket}, tc.args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d, stderr %q", tc.args, code, errOut)
		}
		var body map[string]json.RawMessage
		if err := json.Unmarshal([]byte(f.bodies[0]), &body); err != nil {
			t.Fatal(err)
		}
		if got := string(body["shards"]); got != tc.want {
			t.Errorf("%v: shards %s, want %s", tc.args, got, tc.want)
		}
	}
	f := startFake(t)
	runAx(t, "submit", "h", "--socket", f.Socket)
	if strings.Contains(f.bodies[0], "shards") {
		t.Errorf("submit without shard flags sent %s", f.bodies[0])
	}
}
