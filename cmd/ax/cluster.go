package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	ax "github.com/axsched/ax/clients/go"
)

func clusterCmd() *cobra.Command {
	cmd := groupCmd(&cobra.Command{
		Use:   "cluster",
		Short: "Look at and change the Raft group: members, leader, indexes",
	})
	cmd.AddCommand(clusterStatusCmd(), clusterRemoveCmd())
	return cmd
}

func clusterStatusCmd() *cobra.Command {
	var f apiFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the members, the leader, their roles, and this node's applied index and lag",
		Long: `Show the cluster as the node behind --socket sees it: every member with its
addresses, suffrage (Voter or Nonvoter) and role, the leader and term, and
this node's commit and applied indexes. The lag is how many committed
entries this node has not applied yet; a follower's commit index trails the
leader's by at most one heartbeat.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := cmdContext(cmd)
			defer cancel()
			c := f.caller()
			defer c.Close()
			a, err := c.Cluster(ctx)
			if err != nil {
				return err
			}
			if f.json {
				return writeJSON(cmd.OutOrStdout(), a.Raw)
			}
			return printCluster(cmd.OutOrStdout(), &a.Info)
		},
	}
	f.register(cmd)
	return cmd
}

// printCluster prints `ax cluster status`.
func printCluster(w io.Writer, info *ax.ClusterInfo) error {
	leader := info.Leader
	if leader == "" {
		leader = "none known (election running, or no quorum)"
	}
	var lag uint64
	if info.CommitIndex > info.AppliedIndex {
		lag = info.CommitIndex - info.AppliedIndex
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "node:\t%s (%s)\n", info.NodeID, strings.ToLower(info.State))
	fmt.Fprintf(tw, "leader:\t%s\n", leader)
	fmt.Fprintf(tw, "term:\t%d\n", info.Term)
	fmt.Fprintf(tw, "commit index:\t%d\n", info.CommitIndex)
	fmt.Fprintf(tw, "applied index:\t%d (lag %d)\n", info.AppliedIndex, lag)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	rows := [][]string{{"ID", "ROLE", "SUFFRAGE", "RAFT ADDR", "PEER ADDR", "APPLIED", "LAG"}}
	for _, m := range info.Members {
		role := "follower"
		switch {
		case m.Leader || (m.ID == info.Leader && info.Leader != ""):
			role = "leader"
		case m.Suffrage != "Voter":
			role = "learner"
		}
		applied, mlag := "-", "-"
		id := m.ID
		if m.ID == info.NodeID {
			applied, mlag = fmt.Sprint(info.AppliedIndex), fmt.Sprint(lag)
			id += " *"
		}
		peer := m.PeerAddr
		if peer == "" {
			peer = "-"
		}
		rows = append(rows, []string{oneLine(id), role, m.Suffrage, m.RaftAddr, peer, applied, mlag})
	}
	if err := writeTable(w, rows); err != nil {
		return err
	}
	if len(info.Members) == 0 {
		fmt.Fprintln(w, "(no members: the cluster has not formed yet)")
	} else {
		fmt.Fprintln(w, "* this node; ask another node (--socket) for its applied index")
	}
	return nil
}

func clusterRemoveCmd() *cobra.Command {
	var f apiFlags
	cmd := &cobra.Command{
		Use:   "remove NODE",
		Short: "Remove a node from the Raft group (for a node that is gone for good)",
		Long: `Remove NODE (its node id) from the Raft configuration, through the leader.
Use it for a node that will not come back; a node that restarts with its
data rejoins by itself and needs nothing.`,
		Args: exactArgs("NODE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] == "" {
				return usagef("cluster remove: NODE must not be empty (usage: %s)", cmd.UseLine())
			}
			ctx, cancel := cmdContext(cmd)
			defer cancel()
			c := f.caller()
			defer c.Close()
			body, err := c.RemoveMember(ctx, args[0])
			if err != nil {
				// errorLine drops the inner "ax: " of err.
				return fmt.Errorf("cluster remove %s: %w", args[0], err)
			}
			if f.json {
				if len(strings.TrimSpace(string(body))) == 0 {
					return writeJSON(cmd.OutOrStdout(), map[string]string{"removed": args[0]})
				}
				return writeJSON(cmd.OutOrStdout(), json.RawMessage(body))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %s from the cluster\n", args[0])
			return nil
		},
	}
	f.register(cmd)
	return cmd
}
