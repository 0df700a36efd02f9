package main

import (
	"fmt"
	"io"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/axsched/ax/sidecar/config"
	"github.com/axsched/ax/sidecar/raftstore"
)

func clusterRecoverCmd() *cobra.Command {
	var dataDir, nodeID, advertise string
	var yes bool
	cmd := &cobra.Command{
		Use:   "recover --data-dir DIR --node-id ID [--raft-advertise HOST:PORT] --yes",
		Short: "Last resort after a quorum of voters is lost for good: make a stopped node the only voter",
		Long: `Rewrite the Raft configuration in the data dir of a STOPPED node to one
voter, the node itself, so that it elects itself when started again (raft's
RecoverCluster). Use it only when a quorum of voters is gone for good (two of
three voters' machines lost, say) and the cluster cannot elect a leader:
the node's own log becomes the truth, so writes that reached only the lost
voters are gone, and entries in its log that were not yet committed are
kept.

Without --yes it only prints the old and the new configuration. Then:
start the node again with its usual flags; it leads alone. Give every other
node a fresh data dir and start it with --join pointing at this node: they
join as non-voters and autopilot makes them voters. Never start an old
member with its old data dir again: it would try to elect itself in the old
configuration.

--raft-advertise defaults to the address the old configuration gives the
node.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataDir == "" || nodeID == "" {
				return usagef("cluster recover: --data-dir and --node-id are required (usage: %s)", cmd.UseLine())
			}
			cfg := config.Config{NodeID: nodeID, DataDir: dataDir}.WithDefaults()
			st := raftstore.Config{
				NodeID: cfg.NodeID, DataDir: cfg.DataDir,
				HeartbeatTimeout: cfg.HeartbeatTimeout, ElectionTimeout: cfg.ElectionTimeout, LeaderLeaseTimeout: cfg.LeaderLeaseTimeout,
				SnapshotThreshold: cfg.SnapshotThreshold, SnapshotInterval: cfg.SnapshotInterval,
				TrailingLogs: cfg.TrailingLogs, TrailingLogsBytes: cfg.TrailingLogsBytes,
				StorageReserve: -1, StorageProbeInterval: cfg.StorageProbeInterval,
				Log: zerolog.New(cmd.ErrOrStderr()).Level(zerolog.WarnLevel),
			}
			res, err := raftstore.Recover(st, advertise, yes)
			if err != nil {
				return fmt.Errorf("cluster recover: %w", err)
			}
			w := cmd.OutOrStdout()
			printServers(w, "old configuration:", res.Old)
			printServers(w, "new configuration:", res.New)
			if !yes {
				fmt.Fprintf(w, "nothing changed: run again with --yes to write the new configuration (applied index %d)\n", res.AppliedIndex)
				return nil
			}
			fmt.Fprintf(w, "recovered: %s is the only voter (applied index %d). Start it with its usual flags; start the other nodes with fresh data dirs and --join.\n", nodeID, res.AppliedIndex)
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "the stopped node's data dir")
	cmd.Flags().StringVar(&nodeID, "node-id", "", "the node's id (as given to ax sidecar --node-id)")
	cmd.Flags().StringVar(&advertise, "raft-advertise", "", "the node's Raft address in the new configuration (default: its address in the old one)")
	cmd.Flags().BoolVar(&yes, "yes", false, "write the new configuration (without it: only print what would change)")
	return cmd
}

func printServers(w io.Writer, title string, c raft.Configuration) {
	fmt.Fprintln(w, title)
	for _, s := range c.Servers {
		fmt.Fprintf(w, "  %s\t%s\t%s\n", s.ID, s.Suffrage, s.Address)
	}
}
