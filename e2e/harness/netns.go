package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Pods: ax nodes as a Kubernetes Deployment runs them. Each pod is a
// network namespace of its own (`ip netns`) with a veth on a test bridge
// and an address in 198.18.0.0/15 (RFC 2544's range for benchmark tests:
// only inside the namespaces; the bridge has no address, so the host's
// routes do not change), and its own /etc/netns/<pod>/hosts, which
// `ip netns exec` bind-mounts over /etc/hosts: in it the headless name
// (PodService) resolves to every live pod's address, as a headless Service
// with publishNotReadyAddresses does. Each pod runs `ax echo-executor` and
// the ax sidecar under `ip netns exec`; both bind 0.0.0.0 inside the pod,
// advertise the pod's address and join with --join dns:PodService:7421.
// The test reaches each sidecar through its Unix socket, which crosses
// namespaces through the file system.

const (
	// PodService is the headless name every pod's hosts file lists.
	PodService = "ax-peers.test"
	// PodRaftPort and PodPeerPort are every pod's ports (each pod has its
	// own address, so they are the same in every pod).
	PodRaftPort = 7420
	PodPeerPort = 7421
	// PodExecDelay is how long every callback takes at the pods'
	// executors (echo-executor --delay), so that attempts are in flight
	// when a pod stops.
	PodExecDelay = 100 * time.Millisecond
	// podPrefix starts the name of every namespace, bridge and veth the
	// harness creates; the test binary's pid (hex) follows, so a later run
	// can remove what a crashed one left (sweepPods).
	podPrefix = "axp"
)

var (
	podSeq   atomic.Uint32
	podSweep sync.Once
	podEtcMu sync.Mutex // creating /etc/netns/<pod> and removing /etc/netns
)

var (
	podProbe    sync.Once
	podProbeWhy string // why pods cannot run here ("" when they can)
)

// RequireRoot skips the test unless it runs as root with `ip` (iproute2)
// and can create a network namespace: the pods need them. Under
// AX_E2E_REQUIRE_PODS=1 (CI) it fails the test instead.
func RequireRoot(t testing.TB) {
	t.Helper()
	podProbe.Do(func() {
		if os.Geteuid() != 0 {
			podProbeWhy = "needs root (ip netns, a bridge, /etc/netns); run as root, as CI does"
			return
		}
		if _, err := exec.LookPath("ip"); err != nil {
			podProbeWhy = "needs the ip command (iproute2)"
			return
		}
		probe := fmt.Sprintf("%s%06x-probe", podPrefix, os.Getpid()&0xffffff)
		if err := run("ip", "netns", "add", probe); err != nil {
			podProbeWhy = fmt.Sprintf("cannot create a network namespace: %v", err)
			return
		}
		_ = run("ip", "netns", "del", probe)
	})
	if podProbeWhy == "" {
		return
	}
	if os.Getenv("AX_E2E_REQUIRE_PODS") != "" {
		t.Fatalf("pods: %s (AX_E2E_REQUIRE_PODS is set)", podProbeWhy)
	}
	t.Skip("pods: " + podProbeWhy)
}

// run runs a command and returns its error with its output.
func run(name string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// sweepPods removes the namespaces, links and /etc/netns directories an
// earlier test binary left (crashed before its cleanups): those whose pid
// no longer runs.
func sweepPods() {
	dead := func(name string) bool {
		rest, ok := strings.CutPrefix(name, podPrefix)
		if !ok || len(rest) < 7 || rest[6] != '-' {
			return false
		}
		pid, err := strconv.ParseInt(rest[:6], 16, 64)
		if err != nil || int(pid) == os.Getpid() {
			return false
		}
		_, err = os.Stat(fmt.Sprintf("/proc/%d", pid))
		return os.IsNotExist(err)
	}
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 0 && dead(f[0]) {
				_ = run("ip", "netns", "del", f[0])
			}
		}
	}
	if out, err := exec.Command("ip", "-o", "link", "show").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			if dead(name) {
				_ = run("ip", "link", "del", name)
			}
		}
	}
	if ents, err := os.ReadDir("/etc/netns"); err == nil {
		for _, e := range ents {
			if dead(e.Name()) {
				_ = os.RemoveAll(filepath.Join("/etc/netns", e.Name()))
			}
		}
	}
}

// PodNet is one test's bridge and its pods. Methods are safe for
// concurrent use.
type PodNet struct {
	t        testing.TB
	name     string // axp<pid>-<seq>: the bridge; pods add -<n>
	subnet   string // 198.18.S.
	dataRoot string
	sockRoot string
	args     []string // extra sidecar arguments
	calls    callLog

	mu   sync.Mutex
	pods []*Pod // every pod started, in order
	next int    // the next pod's number
}

// Pod is one pod: its namespace and address, its executor and its ax
// sidecar (the embedded Node: Process, ID, Socket, Client...).
type Pod struct {
	*Node
	NS     string   // network namespace
	IP     string   // its address in 198.18.0.0/15
	veth   string   // the host end of its veth
	App    *Process // the app container: ax echo-executor on the pod's app socket
	AppLog string   // its stdout: one JSON line per callback

	mu        sync.Mutex
	live      bool // in the hosts files (started, not stopped)
	stoppedAt time.Time
	exitedAt  time.Time
}

// NewPodNet creates a bridge for the test (removed in t.Cleanup, with
// every pod's namespace, veth and /etc/netns directory, also when the test
// fails). args are added to every pod's sidecar command line.
func NewPodNet(t testing.TB, args ...string) *PodNet {
	t.Helper()
	RequireRoot(t)
	podSweep.Do(sweepPods)
	seq := podSeq.Add(1)
	pn := &PodNet{
		t:      t,
		name:   fmt.Sprintf("%s%06x-%d", podPrefix, os.Getpid()&0xffffff, seq),
		subnet: fmt.Sprintf("198.18.%d.", seq%256),
		args:   args,
	}
	pn.dataRoot = t.TempDir()
	pn.sockRoot = ShortDir(t, pn.dataRoot)
	if len(pn.name)+3 > 15 {
		t.Fatalf("pods: link name %q too long", pn.name)
	}
	if err := run("ip", "link", "add", pn.name, "type", "bridge"); err != nil {
		t.Fatalf("pods: %v", err)
	}
	t.Cleanup(pn.cleanup)
	if err := run("ip", "link", "set", pn.name, "up"); err != nil {
		t.Fatalf("pods: %v", err)
	}
	return pn
}

// cleanup kills every process and removes every namespace, veth, hosts
// file and the bridge; it dumps the sidecars' logs when the test failed
// or AX_E2E_PODS_LOGS is set.
func (pn *PodNet) cleanup() {
	pn.mu.Lock()
	pods := append([]*Pod(nil), pn.pods...)
	pn.mu.Unlock()
	for _, p := range pods {
		_ = p.Process.Kill()
		_ = p.App.Kill()
		p.Client.Close()
	}
	if pn.t.Failed() || os.Getenv("AX_E2E_PODS_LOGS") != "" {
		for _, p := range pods {
			pn.t.Logf("----- log of %s (%s, %s) -----\n%s", p.ID, p.NS, p.IP, Tail(p.Logs(), LogDumpMaxBytes))
		}
	}
	for _, p := range pods {
		p.remove()
	}
	if err := run("ip", "link", "del", pn.name); err != nil {
		pn.t.Errorf("pods cleanup: %v", err)
	}
	podEtcMu.Lock()
	_ = os.Remove("/etc/netns") // only when empty: no other test's pods
	podEtcMu.Unlock()
}

// remove deletes the pod's namespace (its veth goes with it) and its
// /etc/netns directory.
func (p *Pod) remove() {
	_ = run("ip", "netns", "del", p.NS)
	_ = run("ip", "link", "del", p.veth) // gone with the namespace, normally
	_ = os.RemoveAll(filepath.Join("/etc/netns", p.NS))
}

// Pods returns every pod started, in order.
func (pn *PodNet) Pods() []*Pod {
	pn.mu.Lock()
	defer pn.mu.Unlock()
	return append([]*Pod(nil), pn.pods...)
}

// Live returns the pods started and not stopped, oldest first.
func (pn *PodNet) Live() []*Pod {
	var out []*Pod
	for _, p := range pn.Pods() {
		if p.Live() {
			out = append(out, p)
		}
	}
	return out
}

// Nodes returns the nodes of pods.
func Nodes(pods []*Pod) []*Node {
	var out []*Node
	for _, p := range pods {
		out = append(out, p.Node)
	}
	return out
}

// Live reports whether the pod is started and not stopped.
func (p *Pod) Live() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.live
}

// StoppedAt and ExitedAt are when Stop sent SIGTERM and when the sidecar
// had exited (zero before).
func (p *Pod) StoppedAt() time.Time { p.mu.Lock(); defer p.mu.Unlock(); return p.stoppedAt }

// ExitedAt: see StoppedAt.
func (p *Pod) ExitedAt() time.Time { p.mu.Lock(); defer p.mu.Unlock(); return p.exitedAt }

// StartPod creates a pod with a new id (pod-N) and the next free address
// and starts it; see StartPodAt.
func (pn *PodNet) StartPod() *Pod { return pn.StartPodAt("") }

// StartPodAt creates a pod with a new id, an empty data dir and address ip
// (empty: the next unused one; an old pod's address may be given once that
// pod is stopped), lists it under PodService in every live pod's hosts
// file, and starts its executor and its sidecar. It does not wait for the
// sidecar to be ready.
func (pn *PodNet) StartPodAt(ip string) *Pod {
	pn.t.Helper()
	pn.mu.Lock()
	n := pn.next
	pn.next++
	pn.mu.Unlock()
	if ip == "" {
		ip = fmt.Sprintf("%s%d", pn.subnet, 10+n)
	}
	id := fmt.Sprintf("pod-%d", n)
	p := &Pod{
		NS:   fmt.Sprintf("%s-%d", pn.name, n),
		IP:   ip,
		veth: fmt.Sprintf("axv%06x-%d", os.Getpid()&0xffffff, podSeq.Add(1)),
		Node: &Node{
			ID: id, Index: n,
			Socket:   filepath.Join(pn.sockRoot, id+".sock"),
			DataDir:  filepath.Join(pn.dataRoot, id),
			RaftAddr: fmt.Sprintf("%s:%d", ip, PodRaftPort),
			PeerAddr: fmt.Sprintf("%s:%d", ip, PodPeerPort),
		},
	}
	p.Client = NewClient(p.Socket)
	p.AppLog = filepath.Join(pn.dataRoot, id+"-exec.log")
	execSock := filepath.Join(pn.sockRoot, id+"-app.sock")
	p.App = NewProcess(id+"-exec", "ip", p.AppLog, "netns", "exec", p.NS, AxBin, "echo-executor",
		"--listen", "unix://"+execSock, "--delay", PodExecDelay.String())
	args := []string{"netns", "exec", p.NS, AxBin, "sidecar",
		"--node-id", id, "--data-dir", p.DataDir, "--socket", p.Socket,
		"--raft-addr", fmt.Sprintf("0.0.0.0:%d", PodRaftPort), "--raft-advertise", p.RaftAddr,
		"--peer-addr", fmt.Sprintf("0.0.0.0:%d", PodPeerPort), "--peer-advertise", p.PeerAddr,
		"--join", fmt.Sprintf("dns:%s:%d", PodService, PodPeerPort), "--bootstrap-expect", "3",
		"--executor", "*=unix://" + execSock, "--leave-on-shutdown",
		"--log-format", "json", "--log-level", "info"}
	p.Process = NewProcess(id, "ip", filepath.Join(pn.dataRoot, id+".log"), append(args, pn.args...)...)

	pn.mu.Lock()
	pn.pods = append(pn.pods, p) // from here on, cleanup removes it
	pn.mu.Unlock()
	for _, c := range [][]string{
		{"ip", "netns", "add", p.NS},
		{"ip", "link", "add", p.veth, "type", "veth", "peer", "name", "eth0", "netns", p.NS},
		{"ip", "link", "set", p.veth, "master", pn.name, "up"},
		{"ip", "-n", p.NS, "addr", "add", ip + "/24", "dev", "eth0"},
		{"ip", "-n", p.NS, "link", "set", "eth0", "up"},
		{"ip", "-n", p.NS, "link", "set", "lo", "up"},
	} {
		if err := run(c[0], c[1:]...); err != nil {
			pn.t.Fatalf("pod %s: %v", id, err)
		}
	}
	podEtcMu.Lock()
	err := os.MkdirAll(filepath.Join("/etc/netns", p.NS), 0o755)
	podEtcMu.Unlock()
	if err != nil {
		pn.t.Fatalf("pod %s: %v", id, err)
	}
	p.mu.Lock()
	p.live = true
	p.mu.Unlock()
	pn.writeHosts()
	if err := p.App.Start(); err != nil {
		pn.t.Fatalf("pod %s: executor: %v", id, err)
	}
	WaitFor(pn.t, 10*time.Second, 20*time.Millisecond, id+"'s executor socket", func() error {
		_, err := os.Stat(execSock)
		return err
	})
	if err := p.Process.Start(); err != nil {
		pn.t.Fatalf("pod %s: sidecar: %v", id, err)
	}
	return p
}

// writeHosts rewrites every pod's hosts file: localhost, and PodService
// for every live pod's address. Each file is rewritten in place (truncated
// and written), not replaced: `ip netns exec` bind-mounts the file itself,
// so a process started earlier sees the new content only in the same
// inode. (Go's resolver reads /etc/hosts again when its mtime or size
// changed, at most every 5 s.)
func (pn *PodNet) writeHosts() {
	pn.t.Helper()
	var b strings.Builder
	b.WriteString("127.0.0.1 localhost\n::1 localhost\n")
	for _, p := range pn.Live() {
		fmt.Fprintf(&b, "%s %s %s\n", p.IP, PodService, p.ID)
	}
	for _, p := range pn.Pods() {
		dir := filepath.Join("/etc/netns", p.NS)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, "hosts"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err == nil {
			_, err = f.WriteString(b.String())
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			pn.t.Errorf("pods: hosts file of %s: %v", p.ID, err)
		}
	}
}

// Stop is kubelet's stop of the pod: its address leaves PodService, the
// sidecar gets SIGTERM (and drains, hands over, leaves), and once it has
// exited the executor is stopped. It returns the sidecar's exit error (nil
// for a clean exit), or an error when it did not exit within 20 s.
func (pn *PodNet) Stop(p *Pod) error {
	p.mu.Lock()
	p.live, p.stoppedAt = false, time.Now()
	p.mu.Unlock()
	pn.writeHosts()
	err := p.Process.Stop()
	p.mu.Lock()
	p.exitedAt = time.Now()
	p.mu.Unlock()
	_ = p.App.Stop()
	return err
}

// Kill is a pod's hard end (its node crashed): SIGKILL to the sidecar and
// the executor; the address leaves PodService.
func (pn *PodNet) Kill(p *Pod) {
	p.mu.Lock()
	p.live, p.stoppedAt = false, time.Now()
	p.mu.Unlock()
	pn.writeHosts()
	_ = p.Process.Kill()
	p.mu.Lock()
	p.exitedAt = time.Now()
	p.mu.Unlock()
	_ = p.App.Kill()
}

// Release removes a stopped pod's namespace, so that its address can be
// given to a new pod (StartPodAt).
func (pn *PodNet) Release(p *Pod) {
	if p.Live() {
		pn.t.Fatalf("pods: release of live pod %s", p.ID)
	}
	p.remove()
}
