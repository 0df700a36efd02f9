// Command ordertimeout is the "close the order if it is still unpaid" example
// of ax: it runs an executor for the handler order.timeout on a Unix socket,
// registers it with the local sidecar, submits one task with a 3 second delay,
// waits for the callback and prints the task's final state.
//
// Start a sidecar first:
//
//	ax dev
//
// then, in the same directory:
//
//	go run ./examples/ordertimeout --socket ./ax.sock --executor-socket ./app.sock
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	ax "github.com/axsched/ax/clients/go"
)

// orderTimeout is the payload of an order.timeout task.
type orderTimeout struct {
	OrderID int `json:"order_id"`
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("ordertimeout: ")

	defaultSocket := os.Getenv(ax.SocketEnv)
	if defaultSocket == "" {
		defaultSocket = ax.SocketPathDefault
	}
	socket := flag.String("socket", defaultSocket, "Unix socket of the ax sidecar; the default comes from $AX_SOCKET when set")
	executorSocket := flag.String("executor-socket", "./app.sock", "Unix socket this program's executor listens on")
	delay := flag.Duration("delay", 3*time.Second, "delay of the order.timeout task")
	wait := flag.Duration("wait", time.Minute, "how long to wait for the callback")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *socket, *executorSocket, *delay, *wait); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, socket, executorSocket string, delay, wait time.Duration) error {
	absExecutor, err := filepath.Abs(executorSocket)
	if err != nil {
		return err
	}

	// 1. The executor: the sidecar calls it back when the task is due.
	delivered := make(chan *ax.Delivery, 1)
	ex := ax.NewExecutor()
	ex.HandleFunc("order.timeout", func(ctx context.Context, d *ax.Delivery) error {
		var p orderTimeout
		if err := json.Unmarshal(d.Payload, &p); err != nil {
			return ax.Permanent(fmt.Errorf("bad payload: %w", err)) // never retried
		}
		// A real application would close order p.OrderID here if it is
		// still unpaid, idempotently: delivery is at least once.
		select {
		case delivered <- d:
		default: // a duplicate delivery; already handled
		}
		return nil
	})
	serveErr := make(chan error, 1)
	served := make(chan struct{})
	go func() {
		defer close(served)
		serveErr <- ex.ListenAndServeUnix(absExecutor)
	}()
	defer func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ex.Shutdown(shutdownCtx)
		<-served // the socket file is gone once ListenAndServeUnix has returned
	}()

	// 2. The client: check the sidecar, tell it where the executor
	// listens, then submit.
	client := ax.New(ax.Config{SocketPath: socket})
	if err := waitReady(ctx, client); err != nil {
		if errors.Is(err, ax.ErrUnavailable) {
			return fmt.Errorf("%w\nstart the sidecar first: ax dev", err)
		}
		return err
	}
	select {
	case err := <-serveErr: // the executor socket is in use, or not writable
		return err
	default:
		fmt.Printf("executor listening on unix://%s\n", absExecutor)
	}
	reg := ax.ExecutorRegistration{Name: "ordertimeout", Handlers: []string{"order.timeout"}, URL: "unix://" + absExecutor}
	switch err := client.RegisterExecutor(ctx, reg); {
	case errors.Is(err, ax.ErrNotFound): // a sidecar without POST /v1/executors
		log.Printf("cannot register with the sidecar (%v); start it with --executor 'order.timeout=%s'", err, reg.URL)
	case err != nil:
		return fmt.Errorf("register the executor: %w", err)
	default:
		// Unregister first when leaving, so that the leader stops sending
		// attempts here before the executor stops answering.
		defer client.UnregisterExecutor(context.WithoutCancel(ctx), reg.Name)
	}
	task, err := client.Submit(ctx, ax.SubmitRequest{
		Handler: "order.timeout", // no ID: the sidecar generates one, so every run is a new task
		Payload: orderTimeout{OrderID: 42},
		Delay:   delay,
	})
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	fmt.Printf("submitted: %s\n", describe(task))

	// 3. Wait for the callback.
	var d *ax.Delivery
	select {
	case d = <-delivered:
	case err := <-serveErr:
		return err
	case <-time.After(wait):
		return fmt.Errorf("no callback within %v; does the sidecar log show the executor %q registered?", wait, reg.Name)
	case <-ctx.Done():
		return ctx.Err()
	}
	fmt.Printf("callback: task=%s handler=%s attempt=%d run=%d deadline=%s payload=%s\n",
		d.TaskID, d.Handler, d.Attempt, d.Run, d.Deadline.Format(time.RFC3339), d.Payload)

	// 4. The sidecar records the outcome once the callback has answered.
	final, err := waitTerminal(ctx, client, task.ID, 10*time.Second)
	if err != nil {
		return err
	}
	fmt.Printf("final: %s\n", describe(final))
	return nil
}

// waitReady polls the sidecar until it is ready, for up to 10 seconds.
func waitReady(ctx context.Context, client *ax.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		err := client.Ready(ctx)
		if err == nil || !errors.Is(err, ax.ErrNotReady) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitTerminal polls the task until it reaches a final state.
func waitTerminal(ctx context.Context, client *ax.Client, id string, limit time.Duration) (*ax.Task, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		task, err := client.Get(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("get %s: %w", id, err)
		}
		if task.State.Terminal() {
			return task, nil
		}
		select {
		case <-ctx.Done():
			return task, fmt.Errorf("task %s still %s after %v", id, task.State, limit)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func describe(t *ax.Task) string {
	s := fmt.Sprintf("id=%s handler=%s state=%s attempts=%d/%d", t.ID, t.Handler, t.State, t.Attempts, t.MaxAttempts)
	if !t.NextRunAt.IsZero() {
		s += " next_run_at=" + t.NextRunAt.Format(time.RFC3339Nano)
	}
	if !t.FinishedAt.IsZero() {
		s += " finished_at=" + t.FinishedAt.Format(time.RFC3339Nano)
	}
	if t.LastError != "" {
		s += fmt.Sprintf(" last_error=%q", t.LastError)
	}
	if t.Payload != nil {
		s += " payload=" + string(t.Payload)
	}
	return s
}
