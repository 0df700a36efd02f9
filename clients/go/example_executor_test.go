package ax_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	ax "github.com/axsched/ax/clients/go"
)

// Middleware runs around every handler: the first given to Use is the
// outermost. Inside, DeliveryFromContext tells which attempt is running.
func ExampleExecutor_Use() {
	logging := func(next ax.Handler) ax.Handler {
		return ax.HandlerFunc(func(ctx context.Context, d *ax.Delivery) error {
			err := next.Handle(ctx, d)
			fmt.Printf("%s %s attempt %d run %d: err=%v\n", d.Handler, d.TaskID, d.Attempt, d.Run, err)
			return err
		})
	}
	ex := ax.NewExecutor()
	ex.Use(logging)
	ex.HandleFunc("order.timeout", func(ctx context.Context, d *ax.Delivery) error {
		cur, _ := ax.DeliveryFromContext(ctx) // the same Delivery, for code that only has ctx
		fmt.Println("closing", cur.TaskID)
		return nil
	})

	// A callback as the sidecar sends it.
	req := httptest.NewRequest(http.MethodPost, ax.ExecutePath, nil)
	req.Header.Set(ax.HeaderTaskID, "order|42")
	req.Header.Set(ax.HeaderHandler, "order.timeout")
	req.Header.Set(ax.HeaderAttempt, "1")
	req.Header.Set(ax.HeaderRun, "1")
	rec := httptest.NewRecorder()
	ex.ServeHTTP(rec, req)
	fmt.Println(rec.Code)

	// Output:
	// closing order|42
	// order.timeout order|42 attempt 1 run 1: err=<nil>
	// 200
}
