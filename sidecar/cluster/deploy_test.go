package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/user"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/axsched/ax/ipc"
)

// fakeResolver answers from a map; a name it lacks is not found.
type fakeResolver map[string][]string

func (f fakeResolver) LookupHost(_ context.Context, host string) ([]string, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func TestExpandJoin(t *testing.T) {
	r := fakeResolver{
		"ax-peers": {"10.0.0.1", "10.0.0.2", "fd00::3"},
		"ax-other": {"10.0.0.2", "10.0.0.9"},
	}
	got, errs := expandJoin(context.Background(), r, []string{"10.0.0.7:7421", "dns:ax-peers:7421", "dns:missing:7421", "dns:ax-other:7421", "10.0.0.1:7421"})
	want := []string{"10.0.0.7:7421", "10.0.0.1:7421", "10.0.0.2:7421", "[fd00::3]:7421", "10.0.0.9:7421"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("addresses %q, want %q", got, want)
	}
	var dnsErr *net.DNSError
	if len(errs) != 1 || !errors.As(errs[0], &dnsErr) || dnsErr.Name != "missing" {
		t.Errorf("errors %v, want one not-found for missing", errs)
	}
	// Each round resolves again: a pod that appears is found next round.
	r["missing"] = []string{"10.0.0.4"}
	got, errs = expandJoin(context.Background(), r, []string{"dns:missing:7421"})
	if !reflect.DeepEqual(got, []string{"10.0.0.4:7421"}) || len(errs) != 0 {
		t.Errorf("second round: %q %v", got, errs)
	}
}

func TestHostsFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "hosts")
	os.WriteFile(p, []byte("# pods\n127.0.0.1 localhost\n10.0.0.1 ax-peers pod-a # a\n10.0.0.2   AX-PEERS\nbad-line ax-peers\n::1 ax-peers\n"), 0o644)
	got, err := HostsFile(p).LookupHost(context.Background(), "ax-peers")
	if want := []string{"10.0.0.1", "10.0.0.2", "::1"}; err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ax-peers: %q %v, want %q", got, err, want)
	}
	var dnsErr *net.DNSError
	if _, err := HostsFile(p).LookupHost(context.Background(), "nope"); !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Errorf("nope: %v, want not found", err)
	}
}

func TestHealthHandler(t *testing.T) {
	var readyErr error
	srv := httptest.NewServer(HealthHandler(func(context.Context) error { return readyErr }))
	defer srv.Close()
	get := func(method, path string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	for _, c := range []struct {
		method, path string
		ready        error
		status       int
		body         string
	}{
		{"GET", "/healthz", nil, 200, `{"status":"ok"}`},
		{"GET", "/readyz", nil, 200, `{"status":"ready"}`},
		{"GET", "/readyz", ipc.Errorf(ipc.ErrNotReady, "no leader known yet"), 503, `{"error":{"code":"not_ready","message":"no leader known yet"}}`},
		{"GET", "/readyz", ipc.ErrNoLeader, 503, `{"error":{"code":"no_leader","message":"no leader"}}`},
		{"GET", "/readyz", errors.New("boom"), 503, `{"error":{"code":"not_ready","message":"boom"}}`},
		{"GET", "/healthz", errors.New("liveness ignores readiness"), 200, `{"status":"ok"}`},
		{"GET", "/v1/tasks", nil, 404, `{"error":{"code":"not_found","message":"the health port serves GET /healthz and /readyz only"}}`},
		{"GET", "/metrics", nil, 404, ""},
		{"GET", "/", nil, 404, ""},
		{"GET", "/healthz/x", nil, 404, ""},
		{"POST", "/healthz", nil, 405, ""},
	} {
		readyErr = c.ready
		status, body := get(c.method, c.path)
		if status != c.status || (c.body != "" && body != c.body) {
			t.Errorf("%s %s (ready: %v): %d %s, want %d %s", c.method, c.path, c.ready, status, body, c.status, c.body)
		}
	}
}

func TestSetSocketAccess(t *testing.T) {
	dir := t.TempDir()
	gid := os.Getgid()
	groups := []string{strconv.Itoa(gid)}
	if g, err := user.LookupGroupId(strconv.Itoa(gid)); err == nil {
		groups = append(groups, g.Name)
	}
	for i, group := range groups {
		path := filepath.Join(dir, fmt.Sprintf("s%d.sock", i))
		ln, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		if err := SetSocketAccess(path, 0o606, group); err != nil {
			t.Fatalf("group %q: %v", group, err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o606 || int(fi.Sys().(*syscall.Stat_t).Gid) != gid {
			t.Errorf("group %q: mode %v gid %d, want 0606 and %d", group, fi.Mode().Perm(), fi.Sys().(*syscall.Stat_t).Gid, gid)
		}
	}
	if err := SetSocketAccess(filepath.Join(dir, "s0.sock"), 0o660, "no-such-group-ax"); err == nil || !strings.Contains(err.Error(), "socket-group") {
		t.Errorf("unknown group: %v", err)
	}
}
