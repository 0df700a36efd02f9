package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	ax "github.com/axsched/ax/clients/go"
)

func clusterCmd() *cobra.Command {
	cmd := groupCmd(&cobra.Command{
		Use:   "cluster",
		Short: "Look at and change the Raft group: members, leader, indexes",
	})
	cmd.AddCommand(clusterStatusCmd(), clusterRemoveCmd(), clusterRecoverCmd())
	return cmd
}

func clusterStatusCmd() *cobra.Command {
	var f apiFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the members with their roles, suffrage, autopilot status, health, last contact and applied index",
		Long: `Show the cluster as the node behind --socket sees it: the leader and term,
this node's commit and applied indexes, the voter target and failure
tolerance, and every member with its role (its Raft state: leader,
follower, candidate), suffrage (Voter or Nonvoter), autopilot status
(leader, voter, nonvoter, or staging: a healthy non-voter that autopilot
promotes once it has been stable for --autopilot-stabilization), health
(heard from within 1.5s and caught up), last contact, applied index and lag,
how long it has been healthy, and its addresses.

Health, contact and the members' applied indexes are the leader's view (a
follower asks the leader); "-" when no leader is known. The lag is how many
entries a member has still to apply to reach this node's commit index,
counting only entries that change the state (a new leader's no-op and
barriers are committed but never applied, so they are not lag).`,
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
			return printCluster(cmd.OutOrStdout(), &a.Info, time.Now())
		},
	}
	f.register(cmd)
	return cmd
}

// printCluster prints `ax cluster status`; now dates the "stable for"
// column.
func printCluster(w io.Writer, info *ax.ClusterInfo, now time.Time) error {
	leader := info.Leader
	if leader == "" {
		leader = "none known (election running, or no quorum)"
	}
	lag := info.Lag(info.AppliedIndex)
	voters := 0
	for _, m := range info.Members {
		if m.Suffrage == "Voter" {
			voters++
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "node:\t%s (%s)\n", info.NodeID, strings.ToLower(info.State))
	fmt.Fprintf(tw, "leader:\t%s\n", leader)
	fmt.Fprintf(tw, "term:\t%d\n", info.Term)
	fmt.Fprintf(tw, "commit index:\t%d\n", info.CommitIndex)
	fmt.Fprintf(tw, "applied index:\t%d (lag %d)\n", info.AppliedIndex, lag)
	if info.VotersTarget > 0 {
		ft := ""
		if info.FailureTolerance != nil {
			ft = fmt.Sprintf(", failure tolerance %d", *info.FailureTolerance)
		}
		fmt.Fprintf(tw, "voters:\t%d (target %d%s)\n", voters, info.VotersTarget, ft)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	rows := [][]string{{"ID", "ROLE", "SUFFRAGE", "STATUS", "HEALTHY", "CONTACT", "APPLIED", "LAG", "STABLE FOR", "RAFT ADDR", "PEER ADDR"}}
	for _, m := range info.Members {
		role := m.Role
		switch {
		case role != "":
		case m.Leader || (m.ID == info.Leader && info.Leader != ""):
			role = "leader"
		case m.ID == info.NodeID:
			role = strings.ToLower(info.State)
		default:
			role = "-"
		}
		status, healthy, contact, applied, mlag, stable := dash(m.Status), "-", "-", "-", "-", "-"
		if m.Healthy != nil {
			healthy = map[bool]string{true: "yes", false: "no"}[*m.Healthy]
		}
		if m.LastContactMs != nil {
			contact = "never"
			if *m.LastContactMs >= 0 {
				contact = (time.Duration(*m.LastContactMs) * time.Millisecond).String()
			}
		}
		if m.LastContactMs != nil && *m.LastContactMs >= 0 {
			applied, mlag = fmt.Sprint(m.AppliedIndex), fmt.Sprint(info.Lag(m.AppliedIndex))
		}
		if m.StableSince != nil {
			stable = max(now.Sub(*m.StableSince), 0).Truncate(time.Second).String()
		}
		id := m.ID
		if m.ID == info.NodeID {
			applied, mlag = fmt.Sprint(info.AppliedIndex), fmt.Sprint(lag)
			id += " *"
		}
		rows = append(rows, []string{oneLine(id), role, m.Suffrage, status, healthy, contact, applied, mlag, stable, m.RaftAddr, dash(m.PeerAddr)})
	}
	if err := writeTable(w, rows); err != nil {
		return err
	}
	if len(info.Members) == 0 {
		fmt.Fprintln(w, "(no members: the cluster has not formed yet)")
	} else {
		fmt.Fprintln(w, "* this node (its applied index and lag are its own, fresher than the leader's view)")
	}
	return nil
}

// dash shows an empty value as "-".
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
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
