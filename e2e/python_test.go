package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/e2e/harness"
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

// TestPythonClient runs the Python client's unittest suite
// (python3 -m unittest discover -s tests in clients/python). Its live tests
// start `ax dev` from the binary this package built and drive it through
// axsched's Client and Worker.
func TestPythonClient(t *testing.T) {
	harness.SkipShort(t)
	py := harness.RequirePython(t)
	ctx, cancel := context.WithTimeout(t.Context(), pythonTestTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "discover", "-s", "tests", "-v")
	cmd.Dir = harness.RepoDir(t, "clients", "python")
	cmd.Env = harness.PythonEnv(t, "AX_BIN="+harness.AxBin)
	harness.InOwnGroup(cmd)
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
		live, filepath.Base(harness.AxBin), time.Since(start).Round(time.Millisecond), strings.ReplaceAll(summary, "\n", " "))
}
