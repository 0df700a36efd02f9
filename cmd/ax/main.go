// Command ax is the ax task scheduler: the sidecar (`ax sidecar`), a
// one-node development server (`ax dev`), and tools for people.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := rootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "ax:", err)
		os.Exit(1)
	}
}

func rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "ax",
		Short: "ax is a task scheduler that runs as a sidecar next to your app",
		Long: `ax is a task scheduler that runs as a sidecar next to every application pod.
Apps submit delayed tasks over a Unix socket; the sidecars of a cluster
replicate them with Raft; the leader fires each task when it is due and
delivers it as an HTTP callback to an executor of the app.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(sidecarCmd(), devCmd(), echoExecutorCmd())
	return root
}
