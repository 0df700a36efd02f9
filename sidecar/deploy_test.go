package sidecar

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/internal/freeport"
	"github.com/axsched/ax/sidecar/cluster"
)

func TestConfigAdvertiseDefaultsAndValidation(t *testing.T) {
	base := Config{NodeID: "n1", RaftAddr: "10.0.0.5:7420", PeerAddr: "10.0.0.5:7421"}
	c := base.WithDefaults()
	if c.RaftAdvertise != c.RaftAddr || c.PeerAdvertise != c.PeerAddr {
		t.Errorf("advertise defaults %q %q, want the bind addresses", c.RaftAdvertise, c.PeerAdvertise)
	}
	if c.SocketMode != 0o660 {
		t.Errorf("socket mode %#o, want 0660", c.SocketMode)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		mod     func(*Config)
		wantErr string // "" = valid
	}{
		{"bind 0.0.0.0 without advertise", func(c *Config) { c.RaftAddr = "0.0.0.0:7420" }, `raft-advertise "0.0.0.0:7420"`},
		{"bind [::] without advertise", func(c *Config) { c.PeerAddr = "[::]:7421" }, `peer-advertise "[::]:7421"`},
		{"bind 0.0.0.0 with advertise", func(c *Config) {
			c.RaftAddr, c.PeerAddr, c.RaftAdvertise, c.PeerAdvertise = "0.0.0.0:7420", "0.0.0.0:7421", "10.1.2.3:7420", "10.1.2.3:7421"
		}, ""},
		{"advertise a host name", func(c *Config) { c.RaftAdvertise = "ax-0.ax.default.svc:7420" }, ""},
		{"advertise without port", func(c *Config) { c.RaftAdvertise = "10.1.2.3" }, "raft-advertise"},
		{"advertise port 0", func(c *Config) { c.PeerAdvertise = "10.1.2.3:0" }, "peer-advertise"},
		{"advertise unspecified", func(c *Config) { c.PeerAdvertise = "0.0.0.0:7421" }, "unspecified"},
		{"advertised addresses equal", func(c *Config) { c.RaftAdvertise, c.PeerAdvertise = "10.1.2.3:1", "10.1.2.3:1" }, "must differ"},
		{"join dns", func(c *Config) { c.Join = []string{"dns:ax-peers.default.svc.cluster.local:7421"} }, ""},
		{"join mixed", func(c *Config) { c.Join = []string{"10.0.0.6:7421", "dns:ax:7421", "[fd00::1]:7421"} }, ""},
		{"join dns without port", func(c *Config) { c.Join = []string{"dns:ax"} }, "dns:NAME:PORT"},
		{"join dns empty name", func(c *Config) { c.Join = []string{"dns::7421"} }, "dns:NAME:PORT"},
		{"join dns bad port", func(c *Config) { c.Join = []string{"dns:ax:http"} }, "dns:NAME:PORT"},
		{"join static without port", func(c *Config) { c.Join = []string{"10.0.0.6"} }, "want HOST:PORT"},
		{"health addr", func(c *Config) { c.HealthAddr = ":8080" }, ""},
		{"health addr bad", func(c *Config) { c.HealthAddr = "8080" }, "health-addr"},
		{"socket mode 0600", func(c *Config) { c.SocketMode = 0o600 }, ""},
		{"socket mode not writable by owner", func(c *Config) { c.SocketMode = 0o444 }, "socket-mode"},
		{"socket mode beyond permissions", func(c *Config) { c.SocketMode = os.ModeSetgid | 0o660 }, "socket-mode"},
		{"socket group numeric", func(c *Config) { c.SocketGroup = "2000" }, ""},
		{"socket group unknown", func(c *Config) { c.SocketGroup = "no-such-group-ax" }, "socket-group"},
	} {
		c := base
		tc.mod(&c)
		err := c.WithDefaults().Validate()
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.wantErr)
		}
	}
}

// freeAddrs returns n TCP addresses on 127.0.0.1 that were free a moment
// ago, below the kernel's ephemeral range (see internal/freeport).
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	addrs, err := freeport.Addrs(n)
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

func startTestNode(t *testing.T, cfg Config) *Node {
	t.Helper()
	n, err := Start(cfg, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	return n
}

// A node that binds every interface puts its advertised addresses, not
// the bind addresses, into the Raft configuration and its node record;
// its health port answers, and its socket has the configured mode.
func TestNodeBindsEverywhereAndAdvertises(t *testing.T) {
	dir := t.TempDir()
	a := freeAddrs(t, 2)
	_, raftPort, _ := net.SplitHostPort(a[0])
	_, peerPort, _ := net.SplitHostPort(a[1])
	cfg := Config{NodeID: "adv1", DataDir: filepath.Join(dir, "data"), Socket: filepath.Join(dir, "ax.sock"),
		RaftAddr: "0.0.0.0:" + raftPort, PeerAddr: "0.0.0.0:" + peerPort, RaftAdvertise: a[0], PeerAdvertise: a[1],
		HealthAddr: "127.0.0.1:0", SocketMode: 0o600}
	n := startTestNode(t, cfg)
	waitUntil(t, "ready", func() bool { return n.Ready(context.Background()) == nil })
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	if s := f.Configuration().Servers; len(s) != 1 || s[0].Address != raft.ServerAddress(a[0]) {
		t.Errorf("raft configuration %+v, want one server at %s", s, a[0])
	}
	nd, err := n.fsm.Node("adv1")
	if err != nil || nd.RaftAddr != a[0] || nd.PeerAddr != a[1] {
		t.Errorf("node record %+v %v, want the advertised %s %s", nd, err, a[0], a[1])
	}
	if fi, err := os.Stat(cfg.Socket); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket: %v %v, want mode 0600", fi, err)
	}
	resp, err := http.Get("http://" + n.HealthAddr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /readyz on the health port: %d", resp.StatusCode)
	}
}

// Three nodes form a cluster from dns: join entries alone (the name
// resolves through a hosts file), and a fourth joins it the same way.
func TestBootstrapAndJoinByDNS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four in-process nodes")
	}
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.1 ax-peers.test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addrs := freeAddrs(t, 8)
	var join []string
	for i := range 3 {
		_, port, _ := net.SplitHostPort(addrs[2*i+1])
		join = append(join, "dns:ax-peers.test:"+port)
	}
	cfgOf := func(i int) Config {
		return Config{NodeID: fmt.Sprintf("d%d", i), DataDir: filepath.Join(dir, fmt.Sprintf("d%d", i)), Socket: filepath.Join(dir, fmt.Sprintf("d%d.sock", i)),
			RaftAddr: addrs[2*i], PeerAddr: addrs[2*i+1], Resolver: cluster.HostsFile(hosts), AutopilotStabilization: 200 * time.Millisecond}
	}
	var nodes []*Node
	for i := range 3 {
		c := cfgOf(i)
		c.BootstrapExpect, c.Join = 3, join
		nodes = append(nodes, startTestNode(t, c))
	}
	for _, n := range nodes {
		waitUntil(t, n.ID()+" ready", func() bool { return n.Ready(context.Background()) == nil })
	}
	c := cfgOf(3)
	c.Join = join[:1]
	n4 := startTestNode(t, c)
	waitUntil(t, "d3 ready", func() bool { return n4.Ready(context.Background()) == nil })
	f := n4.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range f.Configuration().Servers {
		got[string(s.ID)] = string(s.Address)
	}
	want := map[string]string{"d0": addrs[0], "d1": addrs[2], "d2": addrs[4], "d3": addrs[6]}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("configuration %v, want %v", got, want)
	}
}

// A node advertising a host name that resolves only after it started
// waits for the name, then starts with the name in its configuration.
func TestNodeWaitsForItsAdvertisedName(t *testing.T) {
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	a := freeAddrs(t, 2)
	_, raftPort, _ := net.SplitHostPort(a[0])
	cfg := Config{NodeID: "late1", DataDir: filepath.Join(dir, "data"), Socket: filepath.Join(dir, "ax.sock"),
		RaftAddr: a[0], PeerAddr: a[1], RaftAdvertise: "ax-late.test:" + raftPort, Resolver: cluster.HostsFile(hosts)}
	written := make(chan struct{})
	go func() {
		time.Sleep(300 * time.Millisecond)
		os.WriteFile(hosts, []byte("127.0.0.1 ax-late.test\n"), 0o644)
		close(written)
	}()
	n := startTestNode(t, cfg)
	select {
	case <-written:
	default:
		t.Fatal("Start returned before the name resolved")
	}
	waitUntil(t, "ready", func() bool { return n.Ready(context.Background()) == nil })
	f := n.raft.GetConfiguration()
	if s := f.Configuration().Servers; f.Error() != nil || len(s) != 1 || s[0].Address != raft.ServerAddress(cfg.RaftAdvertise) {
		t.Errorf("configuration %+v %v, want the name %s", s, f.Error(), cfg.RaftAdvertise)
	}

	// A name that never resolves fails the start, naming the address.
	cfg2 := Config{NodeID: "late2", DataDir: filepath.Join(dir, "data2"), Socket: filepath.Join(dir, "ax2.sock"),
		RaftAddr: a[0], PeerAddr: a[1], RaftAdvertise: "never.test:" + raftPort, Resolver: cluster.HostsFile(hosts)}
	n2 := &Node{cfg: cfg2.WithDefaults(), log: zerolog.Nop(), ctx: context.Background()}
	if _, err := n2.resolveAdvertise(600 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "never.test:"+raftPort) {
		t.Errorf("unresolvable name: %v", err)
	}
}
