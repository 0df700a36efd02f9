package ax_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	ax "github.com/axsched/ax/clients/go"
)

// Submit many tasks in one request. Each item succeeds or fails on its own:
// here one id exists already with another spec.
func ExampleClient_SubmitBatch() {
	socket, stop := exampleSidecar()
	defer stop()
	ctx := context.Background()
	client := ax.New(ax.Config{SocketPath: socket})

	if _, err := client.Submit(ctx, ax.SubmitRequest{ID: "remind|7", Handler: "cart.remind", Delay: time.Hour}); err != nil {
		log.Fatal(err)
	}

	results, err := client.SubmitBatch(ctx, []ax.SubmitRequest{
		{ID: "remind|5", Handler: "cart.remind", Delay: 24 * time.Hour, Payload: map[string]int{"cart": 5}},
		{ID: "remind|6", Handler: "cart.remind", Delay: 24 * time.Hour, Payload: map[string]int{"cart": 6}},
		{ID: "remind|7", Handler: "cart.remind", Delay: 24 * time.Hour}, // exists with Delay: time.Hour
	})
	if err != nil {
		log.Fatal(err) // the batch as a whole: invalid, queue full, sidecar down...
	}
	for _, r := range results {
		switch {
		case errors.Is(r.Err, ax.ErrConflict):
			fmt.Println(r.Status, "conflict:", r.Err)
		case r.Err != nil:
			log.Fatal(r.Err)
		default:
			fmt.Println(r.Status, r.Task.ID, r.Created, string(r.Task.Payload))
		}
	}

	// Output:
	// 201 remind|5 true {"cart":5}
	// 201 remind|6 true {"cart":6}
	// 409 conflict: ax: task "remind|7" exists with a different spec (conflict, http 409)
}
