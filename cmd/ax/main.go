// Command ax is the ax task scheduler: the sidecar (`ax sidecar`), a
// one-node development server (`ax dev`), the dashboard (`ax ui`), and
// tools for people: `ax submit`, `get`, `list`, `cancel`, `retry`,
// `cluster`, `version`, and `ax bench`.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run runs the command line args and returns the exit code: 0, 1 when the
// command failed (the sidecar refused or could not be reached), 2 for a
// usage error. An error is one line on stderr.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := rootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err != nil && !isQuiet(err) {
		fmt.Fprintln(stderr, "ax:", errorLine(err))
	}
	return exitCode(err)
}

func rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "ax",
		Short: "ax is a task scheduler that runs as a sidecar next to your app",
		Long: `ax is a task scheduler that runs as a sidecar next to every application pod.
Apps submit delayed tasks over a Unix socket; the sidecars of a cluster
replicate them with Raft; the leader fires each task when it is due and
delivers it as an HTTP callback to an executor of the app.

The commands for people talk to a sidecar through its socket: --socket,
else $AX_SOCKET, else ./ax.sock. Each has --json for scripts. Exit codes:
0 ok, 1 the sidecar refused or could not be reached, 2 a usage error.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(flagError)
	root.AddGroup(
		&cobra.Group{ID: "tasks", Title: "Tasks:"},
		&cobra.Group{ID: "ops", Title: "Running and operating ax:"},
	)
	for _, c := range taskCmds() {
		c.GroupID = "tasks"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{sidecarCmd(), devCmd(), uiCmd(), clusterCmd(), benchCmd(), echoExecutorCmd(), healthCmd(), tlsCmd()} {
		c.GroupID = "ops"
		root.AddCommand(c)
	}
	root.AddCommand(versionCmd())
	root.Version = version()
	root.SetVersionTemplate("ax {{.Version}}\n")
	return root
}
