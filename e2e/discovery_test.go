package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/axsched/ax/e2e/harness"
)

// Three ax processes form a cluster from dns: join entries alone (the
// name resolves, through the hidden --dns-hosts-file, to 127.0.0.1: on
// loopback each node needs its own port, so each entry names one port), a
// fourth joins it with its settings from AX_* variables, and every node's
// health port and `ax health --ready` say ready.
func TestDiscovery_BootstrapAndJoinByDNS(t *testing.T) {
	harness.SkipShort(t)
	dataRoot := t.TempDir()
	sockRoot := harness.ShortDir(t, dataRoot)
	hosts := filepath.Join(dataRoot, "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.1 ax-peers.e2e.test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ports := harness.FreePorts(t, 12)
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	var join []string
	for i := range 3 {
		join = append(join, fmt.Sprintf("dns:ax-peers.e2e.test:%d", ports[3*i+1]))
	}
	type pod struct {
		id, socket, health string
		p                  *harness.Process
	}
	var pods []*pod
	start := func(i int, args ...string) {
		t.Helper()
		pd := &pod{id: fmt.Sprintf("p%d", i), socket: filepath.Join(sockRoot, fmt.Sprintf("p%d.sock", i)), health: addr(3*i + 2)}
		args = append([]string{"sidecar", "--data-dir", filepath.Join(dataRoot, pd.id), "--socket", pd.socket,
			"--dns-hosts-file", hosts, "--health-addr", pd.health, "--socket-mode", "0600",
			"--autopilot-stabilization", "1s", "--log-format", "json"}, args...)
		pd.p = harness.NewProcess(pd.id, harness.AxBin, filepath.Join(dataRoot, pd.id+".log"), args...)
		if err := pd.p.Start(); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, pd)
	}
	t.Cleanup(func() {
		for _, pd := range pods {
			_ = pd.p.Kill()
			if t.Failed() {
				t.Logf("----- log of %s -----\n%s", pd.id, harness.Tail(pd.p.Logs(), harness.LogDumpMaxBytes))
			}
		}
	})
	for i := range 3 {
		start(i, "--node-id", fmt.Sprintf("p%d", i), "--raft-addr", addr(3*i), "--peer-addr", addr(3*i+1),
			"--bootstrap-expect", "3", "--join", strings.Join(join, ","))
	}
	// The fourth takes its node id, addresses and join list from the
	// environment, as a pod would from its manifest's env.
	for k, v := range map[string]string{"AX_NODE_ID": "p3", "AX_RAFT_ADDR": addr(9), "AX_PEER_ADDR": addr(10), "AX_JOIN": join[1]} {
		t.Setenv(k, v)
	}
	start(3)

	ready := func(pd *pod) func() error {
		return func() error {
			resp, err := http.Get("http://" + pd.health + "/readyz")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("%s: GET /readyz %d", pd.id, resp.StatusCode)
			}
			return nil
		}
	}
	for _, pd := range pods {
		harness.WaitFor(t, 60*time.Second, 100*time.Millisecond, pd.id+" ready on its health port", ready(pd))
		out, err := exec.Command(harness.AxBin, "health", "--ready", "--socket", pd.socket).CombinedOutput()
		if err != nil || string(out) != "ready\n" {
			t.Errorf("%s: ax health --ready: %v, output %q", pd.id, err, out)
		}
		if fi, err := os.Stat(pd.socket); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: socket %v %v, want mode 0600", pd.id, fi, err)
		}
	}
	var members []string
	harness.WaitFor(t, 30*time.Second, 200*time.Millisecond, "four members", func() error {
		out, err := exec.Command(harness.AxBin, "cluster", "status", "--json", "--socket", pods[0].socket).Output()
		if err != nil {
			return err
		}
		var st struct {
			Members []struct {
				ID       string `json:"id"`
				RaftAddr string `json:"raft_addr"`
			} `json:"members"`
		}
		if err := json.Unmarshal(out, &st); err != nil {
			return err
		}
		members = members[:0]
		for _, m := range st.Members {
			members = append(members, m.ID+"@"+m.RaftAddr)
		}
		sort.Strings(members)
		if len(members) != 4 {
			return fmt.Errorf("members %q", members)
		}
		return nil
	})
	want := []string{"p0@" + addr(0), "p1@" + addr(3), "p2@" + addr(6), "p3@" + addr(9)}
	if strings.Join(members, " ") != strings.Join(want, " ") {
		t.Errorf("members %q, want %q", members, want)
	}
}
