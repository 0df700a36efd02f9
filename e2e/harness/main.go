package harness

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

var axBinFlag = flag.String("ax-bin", "", "path of a prebuilt ax binary; empty: build github.com/axsched/ax/cmd/ax once")

// AxBin is the binary every Process runs, set by Main.
var AxBin string

// Timeouts of the harness. Each carries its unit in its value.
const (
	// ReadyTimeout bounds WaitReady after a cluster starts.
	ReadyTimeout = 30 * time.Second
	// LeaderTimeout bounds WaitForNewLeader.
	LeaderTimeout = 20 * time.Second
	// stopTimeout is how long Stop waits after SIGTERM before it kills.
	stopTimeout = 20 * time.Second
	// PollInterval is how often the pollers look again.
	PollInterval = 50 * time.Millisecond
	// LogDumpMaxBytes bounds how much of one process's log is dumped on
	// failure (the tail is kept).
	LogDumpMaxBytes = 256 << 10
	// unixPathMax is the size of sun_path on Linux, NUL included.
	unixPathMax = 108
)

// Main is the body of an e2e package's TestMain: it parses the flags,
// builds the ax binary once into a temporary directory (or takes -ax-bin)
// and sets AxBin, then runs the tests. It returns the exit code (2 when
// the binary cannot be built or found). Under -short it builds nothing.
//
//	func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
func Main(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		return m.Run() // every test skips itself
	}
	if *axBinFlag != "" {
		abs, err := filepath.Abs(*axBinFlag)
		if err == nil {
			_, err = os.Stat(abs)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "e2e: -ax-bin %q: %v\n", *axBinFlag, err)
			return 2
		}
		AxBin = abs
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "ax-e2e-bin")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 2
	}
	defer os.RemoveAll(dir)
	AxBin = filepath.Join(dir, "ax")
	start := time.Now()
	cmd := exec.Command(goTool(), "build", "-o", AxBin, "github.com/axsched/ax/cmd/ax")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: building ax: %v\n", err)
		return 2
	}
	fmt.Fprintf(os.Stderr, "e2e: built %s in %s\n", AxBin, time.Since(start).Round(time.Millisecond))
	return m.Run()
}

// goTool returns the go command of the toolchain running the tests.
func goTool() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// SkipShort skips the calling test under -short: every test here starts
// processes.
func SkipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("e2e: starts real ax processes; skipped with -short")
	}
}
