package ax

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
)

// ExecutorRegistration tells the local sidecar where an executor listens and
// which handlers it runs (POST /v1/executors). The leader then routes those
// handlers' attempts to this node, which calls the executor at URL. It is
// the API form of the sidecar's --executor flag.
type ExecutorRegistration struct {
	// Name identifies the registration on this node: 1 to 128 characters of
	// A-Z a-z 0-9 . _ : - (not "." or ".."). Registering the same name
	// again replaces it. Required.
	Name string
	// Handlers are handler patterns: a name ("order.timeout"), a prefix
	// ending in "*" ("order.*"), or "*" for every handler. An exact name
	// wins over a prefix, a prefix over "*". Required.
	Handlers []string
	// URL is where the sidecar posts callbacks: "unix://" followed by the
	// absolute path of the socket (see Executor.ListenAndServeUnix), or
	// "http://127.0.0.1:PORT". Required.
	URL string
	// MinConcurrency and MaxConcurrency bound the callbacks the sidecar
	// sends at once (0: the sidecar's default).
	MinConcurrency int
	MaxConcurrency int
	// Timeout is the attempt timeout of tasks that give none (0: the
	// task's own, 30s by default).
	Timeout time.Duration
}

// RegisterExecutor registers an executor with the local sidecar; see
// ExecutorRegistration. Unregister it before the executor stops, so the
// leader stops routing attempts to it:
//
//	ex := ax.NewExecutor()
//	ex.HandleFunc("order.timeout", closeOrder)
//	go ex.ListenAndServeUnix(sock) // sock: an absolute path
//	err := client.RegisterExecutor(ctx, ax.ExecutorRegistration{
//		Name: "orders", Handlers: []string{"order.timeout"}, URL: "unix://" + sock,
//	})
//	...
//	client.UnregisterExecutor(ctx, "orders")
//	ex.Shutdown(ctx)
//
// An invalid registration gives an error matching ErrInvalid (the message
// names the field); a sidecar without the route, one matching ErrNotFound.
func (c *Client) RegisterExecutor(ctx context.Context, reg ExecutorRegistration) error {
	if err := checkExecutorName(reg.Name); err != nil {
		return err
	}
	if len(reg.Handlers) == 0 {
		return fmt.Errorf("%w: ExecutorRegistration.Handlers is empty", ErrInvalid)
	}
	wire := axapi.ExecutorSpec{Name: reg.Name, Handlers: reg.Handlers, URL: reg.URL,
		MinConcurrency: reg.MinConcurrency, MaxConcurrency: reg.MaxConcurrency}
	if reg.Timeout > 0 {
		wire.Timeout = reg.Timeout.String()
	}
	body, err := json.Marshal(wire)
	if err != nil {
		return fmt.Errorf("ax: encode executor registration: %w", err)
	}
	return c.do(ctx, http.MethodPost, "/v1/executors", body, nil)
}

// UnregisterExecutor removes the executor registered under name from the
// local sidecar. An unknown name gives an error matching ErrNotFound.
func (c *Client) UnregisterExecutor(ctx context.Context, name string) error {
	if err := checkExecutorName(name); err != nil {
		return err
	}
	return c.do(ctx, http.MethodDelete, "/v1/executors/"+url.PathEscape(name), nil, nil)
}

// checkExecutorName refuses names the sidecar refuses, before sending.
func checkExecutorName(name string) error {
	if name == "" || len(name) > axapi.ExecutorNameMaxBytes || name == "." || name == ".." {
		return fmt.Errorf("%w: executor name %q: use 1 to %d characters of A-Z a-z 0-9 . _ : - (not . or ..)", ErrInvalid, name, axapi.ExecutorNameMaxBytes)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return fmt.Errorf("%w: executor name %q: use 1 to %d characters of A-Z a-z 0-9 . _ : - (not . or ..)", ErrInvalid, name, axapi.ExecutorNameMaxBytes)
		}
	}
	return nil
}
