package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

func echoExecutorCmd() *cobra.Command {
	var listen string
	var status int
	var delay time.Duration
	cmd := &cobra.Command{
		Use:   "echo-executor",
		Short: "Run a demo executor that prints every callback it receives",
		Long: `Run a demo executor: it serves POST /ax/v1/execute, prints one JSON line per
callback (time, task id, handler, attempt, payload) on stdout and answers
--status (200: success; 500: a failed attempt, retried; 422: a permanent failure).
Use it to try ax without writing an app.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ln, err := listenURL(listen)
			if err != nil {
				return err
			}
			enc := json.NewEncoder(os.Stdout)
			mux := http.NewServeMux()
			mux.HandleFunc("POST /ax/v1/execute", func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				enc.Encode(map[string]any{
					"received_at": time.Now().UTC().Format(time.RFC3339Nano),
					"task_id":     r.Header.Get("Ax-Task-Id"),
					"handler":     r.Header.Get("Ax-Handler"),
					"attempt":     r.Header.Get("Ax-Attempt"),
					"payload":     string(body),
				})
				if delay > 0 {
					select {
					case <-time.After(delay):
					case <-r.Context().Done():
						return
					}
				}
				w.WriteHeader(status)
			})
			srv := &http.Server{Handler: mux}
			go func() {
				sig := make(chan os.Signal, 1)
				signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
				<-sig
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				srv.Shutdown(ctx)
			}()
			fmt.Fprintf(os.Stderr, "echo-executor listening on %s\n", listen)
			if err := srv.Serve(ln); err != http.ErrServerClosed {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "unix:///tmp/app.sock", "where to listen: unix:///abs/path.sock or http://127.0.0.1:PORT")
	cmd.Flags().IntVar(&status, "status", 200, "HTTP status to answer every callback with")
	cmd.Flags().DurationVar(&delay, "delay", 0, "how long each callback takes before answering")
	return cmd
}

func listenURL(u string) (net.Listener, error) {
	switch {
	case strings.HasPrefix(u, "unix://"):
		path := strings.TrimPrefix(u, "unix://")
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("socket %s is in use", path)
		}
		os.Remove(path)
		return net.Listen("unix", path)
	case strings.HasPrefix(u, "http://"):
		return net.Listen("tcp", strings.TrimPrefix(u, "http://"))
	}
	return nil, usagef("--listen %q: want unix:///abs/path.sock or http://HOST:PORT", u)
}
