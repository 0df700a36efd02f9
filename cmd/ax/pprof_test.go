package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPprof_ServesOnLoopback: --pprof-addr on 127.0.0.1 serves the
// net/http/pprof index.
func TestPprof_ServesOnLoopback(t *testing.T) {
	ln, err := listenPprof("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var stderr bytes.Buffer
	servePprof(ln, &stderr)
	if !strings.Contains(stderr.String(), "pprof: serving http://"+ln.Addr().String()+"/debug/pprof/") {
		t.Errorf("stderr %q does not say where", stderr.String())
	}
	resp, err := http.Get("http://" + ln.Addr().String() + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine") {
		t.Errorf("GET /debug/pprof/: %d\n%.300s", resp.StatusCode, body)
	}
	if ln, err := listenPprof(""); ln != nil || err != nil {
		t.Errorf("no --pprof-addr: listener %v, err %v; want none", ln, err)
	}
}

// TestPprof_RefusesNonLoopback: `ax sidecar --pprof-addr` with an address
// that is not loopback is a usage error, and the node does not start.
func TestPprof_RefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:1", ":6061", "10.1.2.3:6061", "[::]:6061", "example.com:6061", "127.0.0.1"} {
		if err := checkPprofAddr(addr); err == nil {
			t.Errorf("checkPprofAddr(%q) accepted", addr)
		}
	}
	for _, addr := range []string{"127.0.0.1:6061", "127.0.0.2:0", "[::1]:6061", "localhost:6061"} {
		if err := checkPprofAddr(addr); err != nil {
			t.Errorf("checkPprofAddr(%q): %v", addr, err)
		}
	}
	// Both commands that run a node: a non-loopback address is a usage
	// error before the node starts.
	for _, cmd := range []string{"sidecar", "dev"} {
		dir := t.TempDir()
		data := filepath.Join(dir, "data")
		_, errOut, code := runAx(t, cmd, "--pprof-addr", "0.0.0.0:1", "--data-dir", data, "--socket", filepath.Join(dir, "ax.sock"))
		if code != exitUsage || !strings.Contains(errOut, "--pprof-addr 0.0.0.0:1 is not a loopback address") {
			t.Errorf("ax %s: exit %d, stderr %q", cmd, code, errOut)
		}
		if _, err := os.Stat(data); !os.IsNotExist(err) {
			t.Errorf("ax %s: the data dir was created (%v): the node started", cmd, err)
		}
	}
}
