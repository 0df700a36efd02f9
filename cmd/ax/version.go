package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Set at link time, e.g.
//
//	go build -ldflags "-X main.buildVersion=v1.2.0 -X main.buildCommit=$(git rev-parse HEAD)" ./cmd/ax
//
// Empty: taken from the module version and the VCS stamp of the build
// (debug.ReadBuildInfo); a build without them (go run, -buildvcs=false)
// reports "devel" and "unknown".
var buildVersion, buildCommit string

// version returns "VERSION (commit COMMIT)", with COMMIT the first 12
// hex digits of the commit and "-dirty" when the tree had local changes.
func version() string {
	bi, _ := debug.ReadBuildInfo()
	return versionOf(bi, buildVersion, buildCommit)
}

// versionOf renders the version line from the build info (nil: none) and
// the link-time values, which win when set.
func versionOf(bi *debug.BuildInfo, ldVersion, ldCommit string) string {
	v, commit, dirty := "devel", "unknown", false
	if bi != nil {
		if mv := bi.Main.Version; mv != "" && mv != "(devel)" {
			v = mv
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if ldVersion != "" {
		v = ldVersion
	}
	if ldCommit != "" {
		commit, dirty = ldCommit, false
	}
	if len(commit) > 12 && commit != "unknown" {
		commit = commit[:12]
	}
	if dirty {
		commit += "-dirty"
	}
	return fmt.Sprintf("%s (commit %s)", v, commit)
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of ax and the commit it was built from",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), "ax", version())
			return nil
		},
	}
}
