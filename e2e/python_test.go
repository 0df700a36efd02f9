package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// The Python client (clients/python, package axsched) is tested from here so
// that the README's test command runs its tests too: TestPythonClient runs
// its unittest suite with AX_BIN set to the binary TestMain built (so its
// live tests run against a real sidecar), and polyglot_test.go drives it
// beside the Go client against a three-node cluster.
//
// Without python3 (3.9 or later) these tests skip, saying why; set
// AX_E2E_REQUIRE_PYTHON=1 (as CI should) to make that a failure instead.

// pythonTestTimeout bounds the whole unittest run.
const pythonTestTimeout = 3 * time.Minute

var (
	pythonOnce sync.Once
	pythonPath string
	pythonWhy  string // why there is no usable python3
)

// requirePython returns the path of a python3 of version 3.9 or later, or
// skips the test (fails it under AX_E2E_REQUIRE_PYTHON=1).
func requirePython(t *testing.T) string {
	t.Helper()
	pythonOnce.Do(func() {
		p, err := exec.LookPath("python3")
		if err != nil {
			pythonWhy = "python3 is not installed (not in $PATH)"
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, p, "-c", "import sys; print('%d.%d' % sys.version_info[:2]); sys.exit(0 if sys.version_info >= (3, 9) else 1)").CombinedOutput()
		if err != nil {
			pythonWhy = fmt.Sprintf("%s is Python %s; axsched needs 3.9 or later (%v)", p, strings.TrimSpace(string(out)), err)
			return
		}
		pythonPath = p
	})
	if pythonPath == "" {
		if os.Getenv("AX_E2E_REQUIRE_PYTHON") != "" {
			t.Fatalf("AX_E2E_REQUIRE_PYTHON is set but %s", pythonWhy)
		}
		t.Skipf("skipping the Python client's tests: %s (install python3 >= 3.9 to run them)", pythonWhy)
	}
	return pythonPath
}

// repoDir returns the absolute path of a directory of the repository, from
// the e2e package's directory (where go test runs).
func repoDir(t *testing.T, rel ...string) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	root := ".."
	if ok {
		root = filepath.Join(filepath.Dir(file), "..")
	}
	abs, err := filepath.Abs(filepath.Join(append([]string{root}, rel...)...))
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// pythonEnv is the environment of every Python process: the package from
// the checkout, no bytecode files written into it, unbuffered output, and
// no AX_SOCKET inherited from the developer's shell.
func pythonEnv(t *testing.T, extra ...string) []string {
	t.Helper()
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "AX_SOCKET=") || strings.HasPrefix(kv, "PYTHONPATH=") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "PYTHONPATH="+repoDir(t, "clients", "python"), "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
	return append(env, extra...)
}

// TestPythonClient runs the Python client's unittest suite
// (python3 -m unittest discover -s tests in clients/python). Its live tests
// start `ax dev` from the binary this package built and drive it through
// axsched's Client and Worker.
func TestPythonClient(t *testing.T) {
	skipShort(t)
	py := requirePython(t)
	ctx, cancel := context.WithTimeout(t.Context(), pythonTestTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "discover", "-s", "tests", "-v")
	cmd.Dir = repoDir(t, "clients", "python")
	cmd.Env = pythonEnv(t, "AX_BIN="+axBin)
	inOwnGroup(cmd)
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	text := string(out)
	if ctx.Err() != nil {
		t.Fatalf("the Python client's tests did not finish within %s:\n%s", pythonTestTimeout, text)
	}
	if err != nil {
		t.Fatalf("the Python client's tests failed (%v); to rerun them: go build -o bin/ax ./cmd/ax && cd clients/python && AX_BIN=../../bin/ax python3 -m unittest discover -s tests -v\n%s",
			err, text)
	}
	// The live tests skip without AX_BIN: make sure they ran.
	live := 0
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, "(test_live.") {
			if !strings.HasSuffix(strings.TrimSpace(line), "... ok") {
				t.Errorf("live test did not pass: %s", line)
			}
			live++
		}
	}
	if live == 0 {
		t.Errorf("no live test ran (test_live.py missing, or AX_BIN not seen):\n%s", text)
	}
	summary := text
	if i := strings.LastIndex(text, "\nRan "); i >= 0 {
		summary = strings.TrimSpace(text[i:])
	}
	t.Logf("python3 -m unittest in clients/python (%d live tests against %s), %s: %s",
		live, filepath.Base(axBin), time.Since(start).Round(time.Millisecond), strings.ReplaceAll(summary, "\n", " "))
}
