package ax_test

import (
	"context"
	"fmt"
	"log"

	ax "github.com/axsched/ax/clients/go"
)

// List every task of a handler in a given state, a page at a time. The
// iterator fetches the next page only when the loop gets there.
func ExampleClient_List() {
	socket, stop := exampleSidecar()
	defer stop()
	ctx := context.Background()
	client := ax.New(ax.Config{SocketPath: socket})

	for _, id := range []string{"order|1", "order|2", "order|3", "invoice|1"} {
		handler := "order.timeout"
		if id == "invoice|1" {
			handler = "invoice.send"
		}
		if _, err := client.Submit(ctx, ax.SubmitRequest{ID: id, Handler: handler}); err != nil {
			log.Fatal(err)
		}
	}

	opts := ax.ListOptions{Handler: "order.timeout", State: ax.StateWaiting, PageSize: 2}
	for task, err := range client.List(ctx, opts) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(task.ID, task.Handler, task.State)
	}

	// Or page by hand, carrying the cursor yourself.
	page, err := client.ListPage(ctx, ax.ListOptions{PageSize: 3}, "")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(page.Tasks), "tasks on the first page, more:", page.NextCursor != "")
	page, err = client.ListPage(ctx, ax.ListOptions{PageSize: 3}, page.NextCursor)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(page.Tasks), "task on the last page, more:", page.NextCursor != "")

	// Output:
	// order|1 order.timeout WAITING
	// order|2 order.timeout WAITING
	// order|3 order.timeout WAITING
	// 3 tasks on the first page, more: true
	// 1 task on the last page, more: false
}
