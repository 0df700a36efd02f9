package ax_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	ax "github.com/axsched/ax/clients/go"
)

// A binary payload over the sidecar's limit fails before anything is sent,
// with ErrTooLarge, instead of a broken pipe when the sidecar hangs up.
func TestSubmitPayloadOverLimit(t *testing.T) {
	c := ax.New(ax.Config{SocketPath: "/nonexistent/ax.sock"})
	_, err := c.Submit(context.Background(), ax.SubmitRequest{Handler: "h", PayloadBytes: make([]byte, ax.PayloadMaxBytes+1)})
	if !errors.Is(err, ax.ErrTooLarge) || !strings.Contains(err.Error(), "1 MiB") {
		t.Fatalf("err = %v, want ErrTooLarge naming the limit", err)
	}
	if errors.Is(err, ax.ErrUnavailable) {
		t.Fatal("the request must not have been sent")
	}
}
