package config

import (
	"fmt"
	"net"
	"os"

	"github.com/axsched/ax/sidecar/cluster"
)

// The checks of the deployment fields (advertised addresses, join
// entries, health port, socket access) and of autopilot's, which call
// into package cluster.

// withDeployDefaults fills the advertised addresses and the socket mode.
func (c Config) withDeployDefaults() Config {
	if c.RaftAdvertise == "" {
		c.RaftAdvertise = c.RaftAddr
	}
	if c.PeerAdvertise == "" {
		c.PeerAdvertise = c.PeerAddr
	}
	if c.SocketMode == 0 {
		c.SocketMode = SocketModeDefault
	}
	return c
}

// validateDeploy checks the advertised addresses, the join entries, the
// health address and the socket's mode and group.
func (c Config) validateDeploy() error {
	for _, a := range []struct{ name, v, bindName, bind string }{
		{"raft-advertise", c.RaftAdvertise, "raft-addr", c.RaftAddr},
		{"peer-advertise", c.PeerAdvertise, "peer-addr", c.PeerAddr},
	} {
		host, port, err := net.SplitHostPort(a.v)
		if err != nil || host == "" || port == "" || port == "0" {
			return fmt.Errorf("%s %q: want HOST:PORT with a fixed port", a.name, a.v)
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			return fmt.Errorf("%s %q: other nodes cannot dial an unspecified address; --%s %s binds every interface, so give --%s with this node's own address (e.g. $(POD_IP):%s)", a.name, a.v, a.bindName, a.bind, a.name, port)
		}
	}
	if c.RaftAdvertise == c.PeerAdvertise {
		return fmt.Errorf("raft-advertise and peer-advertise must differ (both %q)", c.RaftAdvertise)
	}
	for _, j := range c.Join {
		if err := cluster.ValidateJoin(j); err != nil {
			return err
		}
	}
	if c.HealthAddr != "" {
		if _, _, err := net.SplitHostPort(c.HealthAddr); err != nil {
			return fmt.Errorf("health-addr %q: want HOST:PORT", c.HealthAddr)
		}
	}
	if c.SocketMode&^os.ModePerm != 0 || c.SocketMode&0o200 == 0 {
		return fmt.Errorf("socket-mode %#o: want permission bits (at most 0777) that let the owner write (connect)", uint32(c.SocketMode))
	}
	if c.SocketGroup != "" {
		if _, err := cluster.LookupGID(c.SocketGroup); err != nil {
			return err
		}
	}
	return nil
}

// validateAutopilot checks the autopilot fields of a config filled by
// WithDefaults.
func (c Config) validateAutopilot() error {
	if err := cluster.ValidateAutopilot(c.Voters, c.AutopilotStabilization, c.AutopilotReplaceAfter); err != nil {
		return err
	}
	if c.DeadMemberCleanup > 0 && c.DeadMemberCleanup < c.AutopilotReplaceAfter {
		return fmt.Errorf("DeadMemberCleanup (--dead-member-cleanup) %v: at least AutopilotReplaceAfter (--autopilot-replace-after, %v), or 0 to turn it off", c.DeadMemberCleanup, c.AutopilotReplaceAfter)
	}
	return nil
}
