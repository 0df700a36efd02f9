package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// axBin is the ax binary TestMain builds from the repository.
var axBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "axdeploy")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	axBin = filepath.Join(dir, "ax")
	// Built from the repository root, in its own workspace (go.work), not
	// in this module's; with -trimpath and CGO_ENABLED=0 as image/build.sh
	// builds, so that the image test reuses the compiled packages.
	cmd := exec.Command("go", "build", "-trimpath", "-o", axBin, "./cmd/ax")
	cmd.Dir = ".."
	cmd.Env = append(withoutEnv(os.Environ(), "GOWORK"), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build ./cmd/ax: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func withoutEnv(env []string, name string) []string {
	var kept []string
	for _, e := range env {
		if !strings.HasPrefix(e, name+"=") {
			kept = append(kept, e)
		}
	}
	return kept
}

var flagLine = regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9-]+)`)

// axFlags returns the flags `ax ARGS --help` lists (hidden ones are not
// listed: the manifests must not use them), and the environment
// variables named in their help ([$AX_...]).
func axFlags(t *testing.T, args ...string) (flags, env map[string]bool) {
	t.Helper()
	out, err := exec.Command(axBin, append(args, "--help")...).CombinedOutput()
	if err != nil {
		t.Fatalf("ax %s --help: %v\n%s", strings.Join(args, " "), err, out)
	}
	flags, env = map[string]bool{}, map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if m := flagLine.FindStringSubmatch(line); m != nil {
			flags[m[1]] = true
		}
		for _, m := range regexp.MustCompile(`\$(AX_[A-Z_]+)`).FindAllStringSubmatch(line, -1) {
			env[m[1]] = true
		}
	}
	if len(flags) < 3 {
		t.Fatalf("ax %s --help lists only %d flags:\n%s", strings.Join(args, " "), len(flags), out)
	}
	return flags, env
}

// checkArgs reports the flags of an ax command line (after the
// subcommand) that are not in flags, and a missing subcommand.
func checkArgs(t *testing.T, where string, args []string, sub string, flags map[string]bool) {
	t.Helper()
	if len(args) == 0 || args[0] != sub {
		t.Errorf("%s: ax command line %q does not start with %q", where, args, sub)
		return
	}
	for _, a := range args[1:] {
		if !strings.HasPrefix(a, "--") {
			continue // a flag's value (--flag value), or a stray argument ax refuses itself
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !flags[name] {
			t.Errorf("%s: --%s is not a flag of `ax %s`", where, name, sub)
		}
	}
}
