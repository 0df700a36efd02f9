package harness

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

var (
	pythonOnce sync.Once
	pythonPath string
	pythonWhy  string // why there is no usable python3
)

// RequirePython returns the path of a python3 of version 3.9 or later, or
// skips the test (fails it under AX_E2E_REQUIRE_PYTHON=1).
func RequirePython(t testing.TB) string {
	t.Helper()
	p, ok := Python(t)
	if !ok {
		t.Skipf("skipping the Python client's tests: %s (install python3 >= 3.9 to run them)", pythonWhy)
	}
	return p
}

// Python returns RequirePython's python3 without skipping: ok is false
// when there is none, for a test that then uses a Go stand-in. Under
// AX_E2E_REQUIRE_PYTHON=1 a missing python3 fails the test, as in
// RequirePython, so CI never passes on the stand-in.
func Python(t testing.TB) (path string, ok bool) {
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
	if pythonPath == "" && os.Getenv("AX_E2E_REQUIRE_PYTHON") != "" {
		t.Fatalf("AX_E2E_REQUIRE_PYTHON is set but %s", pythonWhy)
	}
	return pythonPath, pythonPath != ""
}

// RepoDir returns the absolute path of a directory of the repository given
// by its path from the repository's root (found from this file's path, two
// levels below it; else from the e2e directory where go test runs).
func RepoDir(t testing.TB, rel ...string) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	root := ".."
	if ok {
		root = filepath.Join(filepath.Dir(file), "..", "..")
	}
	abs, err := filepath.Abs(filepath.Join(append([]string{root}, rel...)...))
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// PythonEnv is the environment of every Python process: the package from
// the checkout, no bytecode files written into it, unbuffered output, and
// no AX_SOCKET inherited from the developer's shell.
func PythonEnv(t testing.TB, extra ...string) []string {
	t.Helper()
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "AX_SOCKET=") || strings.HasPrefix(kv, "PYTHONPATH=") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "PYTHONPATH="+RepoDir(t, "clients", "python"), "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
	return append(env, extra...)
}
