package main

import (
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/axsched/ax/sidecar"
	"github.com/axsched/ax/sidecar/cluster"
)

// parseNodeFlags parses an `ax sidecar` command line into its config.
func parseNodeFlags(t *testing.T, args ...string) (sidecar.Config, error) {
	t.Helper()
	var f nodeFlags
	cmd := &cobra.Command{Use: "sidecar"}
	f.register(cmd)
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	return f.config()
}

func TestAddressFlagsFromEnvironment(t *testing.T) {
	t.Setenv("AX_NODE_ID", "pod-a")
	t.Setenv("AX_RAFT_ADDR", "0.0.0.0:7420")
	t.Setenv("AX_PEER_ADDR", "0.0.0.0:7421")
	t.Setenv("AX_RAFT_ADVERTISE", "10.1.2.3:7420")
	t.Setenv("AX_PEER_ADVERTISE", "10.1.2.3:7421")
	t.Setenv("AX_JOIN", "dns:ax-peers:7421,10.9.9.9:7421")
	t.Setenv("AX_BOOTSTRAP_EXPECT", "3")
	t.Setenv("AX_SOCKET", "/run/ax/ax.sock")
	t.Setenv("AX_HEALTH_ADDR", ":7422")
	t.Setenv("AX_SOCKET_MODE", "0666")
	cfg, err := parseNodeFlags(t)
	if err != nil {
		t.Fatal(err)
	}
	want := sidecar.Config{NodeID: "pod-a", RaftAddr: "0.0.0.0:7420", PeerAddr: "0.0.0.0:7421", RaftAdvertise: "10.1.2.3:7420", PeerAdvertise: "10.1.2.3:7421",
		Join: []string{"dns:ax-peers:7421", "10.9.9.9:7421"}, BootstrapExpect: 3, Socket: "/run/ax/ax.sock", HealthAddr: ":7422", SocketMode: 0o666}
	got := sidecar.Config{NodeID: cfg.NodeID, RaftAddr: cfg.RaftAddr, PeerAddr: cfg.PeerAddr, RaftAdvertise: cfg.RaftAdvertise, PeerAdvertise: cfg.PeerAdvertise,
		Join: cfg.Join, BootstrapExpect: cfg.BootstrapExpect, Socket: cfg.Socket, HealthAddr: cfg.HealthAddr, SocketMode: cfg.SocketMode}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("from the environment:\n got %+v\nwant %+v", got, want)
	}
	// An explicit flag wins over its variable.
	cfg, err = parseNodeFlags(t, "--node-id", "explicit", "--raft-advertise", "10.7.7.7:7420", "--join", "10.8.8.8:7421")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodeID != "explicit" || cfg.RaftAdvertise != "10.7.7.7:7420" || !reflect.DeepEqual(cfg.Join, []string{"10.8.8.8:7421"}) || cfg.PeerAdvertise != "10.1.2.3:7421" {
		t.Errorf("flags over environment: %q %q %q %q", cfg.NodeID, cfg.RaftAdvertise, cfg.Join, cfg.PeerAdvertise)
	}
	// A bad value names its variable.
	t.Setenv("AX_BOOTSTRAP_EXPECT", "three")
	if _, err := parseNodeFlags(t); err == nil || !strings.Contains(err.Error(), "$AX_BOOTSTRAP_EXPECT") {
		t.Errorf("bad variable: %v", err)
	}
}

func TestBindEverywhereNeedsAdvertise(t *testing.T) {
	_, err := parseNodeFlags(t, "--raft-addr", "0.0.0.0:7420", "--peer-addr", "0.0.0.0:7421")
	if err == nil || !strings.Contains(err.Error(), "--raft-advertise") {
		t.Errorf("0.0.0.0 without advertise: %v", err)
	}
	cfg, err := parseNodeFlags(t, "--raft-addr", "0.0.0.0:7420", "--peer-addr", "0.0.0.0:7421", "--raft-advertise", "10.0.0.1:7420", "--peer-advertise", "10.0.0.1:7421")
	if err != nil || cfg.RaftAdvertise != "10.0.0.1:7420" {
		t.Errorf("with advertise: %v %q", err, cfg.RaftAdvertise)
	}
	cfg, err = parseNodeFlags(t, "--socket-mode", "0600", "--socket-group", "0", "--dns-hosts-file", "/tmp/hosts")
	if err != nil || cfg.SocketMode != 0o600 || cfg.SocketGroup != "0" || cfg.Resolver != cluster.HostsFile("/tmp/hosts") {
		t.Errorf("socket flags: %v %#o %q %v", err, cfg.SocketMode, cfg.SocketGroup, cfg.Resolver)
	}
	for _, m := range []string{"660x", "0", "1777", "rw"} {
		if _, err := parseNodeFlags(t, "--socket-mode", m); err == nil || !strings.Contains(err.Error(), "--socket-mode") {
			t.Errorf("--socket-mode %s: %v", m, err)
		}
	}
	if _, err := parseNodeFlags(t, "--join", "dns:ax-peers"); err == nil || !strings.Contains(err.Error(), "dns:NAME:PORT") {
		t.Errorf("--join dns:ax-peers: %v", err)
	}
}

// serveUnix serves h on a Unix socket in a temp dir and returns its path.
func serveUnix(t *testing.T, h http.Handler) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ax.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return path
}

func TestHealthCommand(t *testing.T) {
	sock := startNode(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"health", "--socket", sock}, "ok\n"},
		{[]string{"health", "--ready", "--socket", sock}, "ready\n"},
	} {
		out, errOut, code := runAx(t, c.args...)
		if code != 0 || out != c.want || errOut != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 0 and %q", c.args, code, out, errOut, c.want)
		}
	}
	t.Setenv("AX_SOCKET", sock)
	if out, _, code := runAx(t, "health", "--ready"); code != 0 || out != "ready\n" {
		t.Errorf("with $AX_SOCKET: exit %d, stdout %q", code, out)
	}

	notReady := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/healthz" {
			w.Write([]byte(`{"status":"ok"}`))
			return
		}
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(503)
		w.Write([]byte(`{"error":{"code":"not_ready","message":"no leader known yet"}}`))
	}))
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"health", "--socket", notReady}, 0, "ok\n"},
		{[]string{"health", "--ready", "--socket", notReady}, 1, "not ready: no leader known yet (not_ready"},
		{[]string{"health", "--socket", "/nonexistent/ax.sock"}, 1, "not alive: cannot reach sidecar at /nonexistent/ax.sock"},
	} {
		out, errOut, code := runAx(t, c.args...)
		if code != c.code || !strings.HasPrefix(out, c.want) || strings.Count(out, "\n") != 1 || errOut != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d and %q", c.args, code, out, errOut, c.code, c.want)
		}
	}
	if _, _, code := runAx(t, "health", "extra"); code != 2 {
		t.Errorf("health extra: exit %d, want 2", code)
	}
}

// --otel-endpoint and --otel-service-name: off and "ax" by default, from
// their flags or variables, the flag winning.
func TestOtelFlags(t *testing.T) {
	cfg, err := parseNodeFlags(t)
	if err != nil || cfg.OtelEndpoint != "" || cfg.OtelServiceName != "ax" {
		t.Fatalf("defaults: %q %q %v", cfg.OtelEndpoint, cfg.OtelServiceName, err)
	}
	t.Setenv("AX_OTEL_ENDPOINT", "http://127.0.0.1:4318")
	t.Setenv("AX_OTEL_SERVICE_NAME", "ax-prod")
	if cfg, err = parseNodeFlags(t); err != nil || cfg.OtelEndpoint != "http://127.0.0.1:4318" || cfg.OtelServiceName != "ax-prod" {
		t.Errorf("from the environment: %q %q %v", cfg.OtelEndpoint, cfg.OtelServiceName, err)
	}
	if cfg, err = parseNodeFlags(t, "--otel-endpoint", "https://otel:4318/v1/traces"); err != nil || cfg.OtelEndpoint != "https://otel:4318/v1/traces" {
		t.Errorf("flag over environment: %q %v", cfg.OtelEndpoint, err)
	}
}
