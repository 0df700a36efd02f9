package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	ax "github.com/axsched/ax/clients/go"
	"github.com/axsched/ax/internal/procs"
	"github.com/axsched/ax/sidecar"
)

// Both commands that run a node have --adaptive-procs, on by default
// (it keeps all the CPUs while timers are due: internal/procs, "Timers
// first").
func TestAdaptiveProcsFlag(t *testing.T) {
	for _, c := range []struct {
		name string
		def  string
	}{{"sidecar", sidecarCmd().Flags().Lookup("adaptive-procs").DefValue}, {"dev", devCmd().Flags().Lookup("adaptive-procs").DefValue}} {
		if c.def != "true" {
			t.Errorf("ax %s --adaptive-procs defaults to %q, want true", c.name, c.def)
		}
	}
}

// The controller runs only when not turned off, and never against a
// GOMAXPROCS the operator set. (Off, startProcs returns a no-op: a test
// of GOMAXPROCS after its stop could not tell, since stopping gives the
// process its default back.)
func TestProcsEnabled(t *testing.T) {
	if (&nodeFlags{adaptiveProcs: false}).procsEnabled() {
		t.Fatal("controller enabled with --adaptive-procs=false")
	}
	if runtime.GOMAXPROCS(0) >= 2 && !(&nodeFlags{adaptiveProcs: true}).procsEnabled() {
		t.Fatal("controller not enabled with --adaptive-procs on a multi-CPU host")
	}
	t.Setenv("GOMAXPROCS", "2")
	if (&nodeFlags{adaptiveProcs: true}).procsEnabled() {
		t.Fatal("controller enabled with GOMAXPROCS in the environment")
	}
}

// On a real node the controller counts its changes on the node's
// /metrics by reason: the start on one P, and the way up when a task
// falls due within procsDueWindow (NothingDueWithin, wired as Quiet).
func TestProcsCountsItsChangesOnARealNode(t *testing.T) {
	if !procs.Enabled() {
		t.Skip("the controller cannot run here (one CPU, or GOMAXPROCS set)")
	}
	sock, n := startNodeN(t)
	defer (&nodeFlags{adaptiveProcs: true}).startProcs(zerolog.Nop(), n)()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	changes := func(why string) string {
		t.Helper()
		resp, err := hc.Get("http://ax/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, `ax_gomaxprocs_changes_total{why="`+why+`"} `) {
				return strings.Fields(l)[1]
			}
		}
		return "0"
	}
	waitFor := func(why, want string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); changes(why) != want; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("ax_gomaxprocs_changes_total{why=%q} = %s after 20s, want %s", why, changes(why), want)
			}
		}
	}
	waitFor("start", "1")
	if got := changes("due"); got != "0" {
		t.Fatalf("changes up for a due task before any task: %s", got)
	}
	c := ax.New(ax.Config{SocketPath: sock, Timeout: 5 * time.Second})
	if _, err := c.Submit(context.Background(), ax.SubmitRequest{ID: "soon", Handler: "h", Delay: procsDueWindow / 2}); err != nil {
		t.Fatal(err)
	}
	waitFor("due", "1")
}

// fakeShutdowner records whether the adaptive GOMAXPROCS was stopped when
// Shutdown began.
type fakeShutdowner struct {
	stopped           *bool
	stoppedAtShutdown bool
	shutdowns         int
}

func (f *fakeShutdowner) Config() sidecar.Config { return sidecar.Config{} }
func (f *fakeShutdowner) Shutdown(context.Context) error {
	f.shutdowns++
	f.stoppedAtShutdown = *f.stopped
	return nil
}

// On a signal the controller is stopped before the node shuts down: its
// due-time check reads badger, which Shutdown closes (a "DB Closed" panic
// when the reading came after).
func TestShutdownStopsTheControllerFirst(t *testing.T) {
	stopped := false
	n := &fakeShutdowner{stopped: &stopped}
	sig := make(chan os.Signal, 1)
	sig <- os.Interrupt
	if err := shutdownOnSignal(n, sig, func() { stopped = true }); err != nil {
		t.Fatal(err)
	}
	if n.shutdowns != 1 || !n.stoppedAtShutdown {
		t.Fatalf("shutdowns %d, controller stopped when Shutdown began: %v; want 1 and true", n.shutdowns, n.stoppedAtShutdown)
	}
}
