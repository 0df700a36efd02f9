package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/axsched/ax/sidecar"
	"github.com/axsched/ax/sidecar/cluster"
	"github.com/axsched/ax/sidecar/config"
)

// deployFlags are the `ax sidecar` flags for running in pods: advertised
// addresses, the health port, the socket's access, and the environment
// variables that stand in for flags.
type deployFlags struct {
	fs                                       *pflag.FlagSet
	raftAdvertise, peerAdvertise, healthAddr string
	socketMode, socketGroup, dnsHostsFile    string
}

// flagEnv maps the flags that read an environment variable when they are
// not given (an explicit flag wins) to its name. In a Kubernetes manifest,
// `env: [{name: AX_RAFT_ADVERTISE, value: "$(POD_IP):7420"}]` or the same
// in args takes the pod's address from the downward API.
var flagEnv = []struct{ flag, env string }{
	{"node-id", "AX_NODE_ID"},
	{"data-dir", "AX_DATA_DIR"},
	{"socket", "AX_SOCKET"},
	{"raft-addr", "AX_RAFT_ADDR"},
	{"raft-advertise", "AX_RAFT_ADVERTISE"},
	{"peer-addr", "AX_PEER_ADDR"},
	{"peer-advertise", "AX_PEER_ADVERTISE"},
	{"join", "AX_JOIN"},
	{"bootstrap-expect", "AX_BOOTSTRAP_EXPECT"},
	{"health-addr", "AX_HEALTH_ADDR"},
	{"socket-mode", "AX_SOCKET_MODE"},
	{"socket-group", "AX_SOCKET_GROUP"},
	{"otel-endpoint", "AX_OTEL_ENDPOINT"},
	{"otel-service-name", "AX_OTEL_SERVICE_NAME"},
}

func (d *deployFlags) register(fl *pflag.FlagSet) {
	d.fs = fl
	fl.StringVar(&d.raftAdvertise, "raft-advertise", "", "HOST:PORT other nodes dial for this node's Raft transport (default: --raft-addr; required when it binds 0.0.0.0)")
	fl.StringVar(&d.peerAdvertise, "peer-advertise", "", "HOST:PORT other nodes dial for this node's peer API (default: --peer-addr; required when it binds 0.0.0.0)")
	fl.StringVar(&d.healthAddr, "health-addr", "", "HOST:PORT of an HTTP port serving GET /healthz and /readyz only, for probes (default: none)")
	fl.StringVar(&d.socketMode, "socket-mode", fmt.Sprintf("%04o", uint32(config.SocketModeDefault)), "permission bits of the Unix socket, octal")
	fl.StringVar(&d.socketGroup, "socket-group", "", "group (name or gid) given to the Unix socket, so an app with another uid in that group can use it")
	fl.StringVar(&d.dnsHostsFile, "dns-hosts-file", "", "resolve the names of dns: join entries from this hosts(5) file instead of DNS (for tests)")
	_ = fl.MarkHidden("dns-hosts-file")
	for _, fe := range flagEnv {
		if f := fl.Lookup(fe.flag); f != nil {
			f.Usage += " [$" + fe.env + "]"
		}
	}
}

// applyEnv sets every flag of flagEnv that was not given from its
// environment variable, when that is set.
func (d *deployFlags) applyEnv() error {
	for _, fe := range flagEnv {
		v, ok := os.LookupEnv(fe.env)
		if !ok || d.fs.Lookup(fe.flag) == nil || d.fs.Changed(fe.flag) {
			continue
		}
		if err := d.fs.Set(fe.flag, v); err != nil {
			return fmt.Errorf("$%s (for --%s): %w", fe.env, fe.flag, err)
		}
	}
	return nil
}

// apply copies the flags into cfg.
func (d *deployFlags) apply(cfg *sidecar.Config) error {
	cfg.RaftAdvertise, cfg.PeerAdvertise, cfg.HealthAddr = d.raftAdvertise, d.peerAdvertise, d.healthAddr
	mode, err := strconv.ParseUint(d.socketMode, 8, 32)
	if err != nil || mode == 0 || mode > 0o777 {
		return fmt.Errorf("--socket-mode %q: want octal permission bits such as 0660", d.socketMode)
	}
	cfg.SocketMode = os.FileMode(mode)
	cfg.SocketGroup = d.socketGroup
	if d.dnsHostsFile != "" {
		cfg.Resolver = cluster.HostsFile(d.dnsHostsFile)
	}
	return nil
}
