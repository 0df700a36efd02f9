package ax_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	ax "github.com/axsched/ax/clients/go"
)

// A handler of tasks submitted with "shards": {"ask": true} counts the
// shards of a run with WithShardCount; each shard then arrives as its own
// callback, with ShardIndex of ShardTotal.
func ExampleWithShardCount() {
	ex := ax.NewExecutor()
	ex.HandleFunc("reindex", func(ctx context.Context, d *ax.Delivery) error {
		fmt.Printf("reindexing part %d of %d\n", d.ShardIndex+1, d.ShardTotal)
		return nil
	}, ax.WithShardCount(func(ctx context.Context, d *ax.Delivery) (int, error) {
		var p struct{ Rows int }
		if err := json.Unmarshal(d.Payload, &p); err != nil {
			return 0, err // 500: the sidecar asks again later
		}
		return max(1, (p.Rows+999)/1000), nil
	}))

	// The sidecar's ask, then one of the shards' callbacks.
	send := func(path string, shard string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{"rows":2500}`))
		req.Header.Set(ax.HeaderTaskID, "reindex|nightly")
		req.Header.Set(ax.HeaderHandler, "reindex")
		req.Header.Set(ax.HeaderAttempt, "1")
		req.Header.Set(ax.HeaderRun, "1")
		if shard != "" {
			req.Header.Set(ax.HeaderShardIndex, shard)
			req.Header.Set(ax.HeaderShardTotal, "3")
		}
		rec := httptest.NewRecorder()
		ex.ServeHTTP(rec, req)
		return rec
	}
	rec := send(ax.ShardsPath, "")
	fmt.Print(rec.Code, " ", rec.Body)
	rec = send(ax.ExecutePath, "1")
	fmt.Println(rec.Code)

	// Output:
	// 200 {"count":3}
	// reindexing part 2 of 3
	// 200
}
