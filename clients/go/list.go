package ax

import (
	"cmp"
	"context"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"

	"github.com/axsched/ax/clients/go/axapi"
)

// Page sizes of List and ListPage.
const (
	// ListPageSizeDefault is the page size when ListOptions.PageSize is 0.
	ListPageSizeDefault = axapi.ListLimitDefault
	// ListPageSizeMax is the largest page the sidecar serves.
	ListPageSizeMax = axapi.ListLimitMax
)

// ListOptions filters and pages Client.List and Client.ListPage. The zero
// value lists every task.
type ListOptions struct {
	// Handler lists only the tasks of this handler; empty lists all.
	Handler string
	// State lists only the tasks in this state; empty lists all.
	State State
	// PageSize is the number of tasks fetched per request, 1 to
	// ListPageSizeMax; 0 means ListPageSizeDefault (100).
	PageSize int
	// Limit stops List after this many tasks; 0 means no limit. ListPage
	// ignores it.
	Limit int
}

// TaskPage is one page of tasks, from Client.ListPage.
type TaskPage struct {
	// Tasks are in id order.
	Tasks []*Task
	// NextCursor fetches the next page when given to ListPage; it is empty
	// on the last page.
	NextCursor string
}

// List returns an iterator over the tasks that match opts, in id order,
// fetching a page of opts.PageSize tasks at a time:
//
//	for task, err := range client.List(ctx, ax.ListOptions{Handler: "order.timeout", State: ax.StateDead}) {
//		if err != nil {
//			return err
//		}
//		fmt.Println(task.ID, task.LastError)
//	}
//
// An error ends the iteration: it is yielded once, with a nil task. Pages
// are fetched lazily, so breaking out of the loop early costs no further
// requests. The listing is not a snapshot: tasks submitted or deleted while
// iterating may or may not be seen, and a task's state is the one it had
// when its page was read. Use ListPage to page by hand (for example across
// HTTP requests of your own).
func (c *Client) List(ctx context.Context, opts ListOptions) iter.Seq2[*Task, error] {
	return func(yield func(*Task, error) bool) {
		if err := opts.check(); err != nil {
			yield(nil, err)
			return
		}
		if opts.Limit < 0 {
			yield(nil, fmt.Errorf("%w: ListOptions.Limit must not be negative, got %d", ErrInvalid, opts.Limit))
			return
		}
		cursor, n := "", 0
		for {
			q := opts
			if opts.Limit > 0 {
				size := cmp.Or(opts.PageSize, ListPageSizeDefault)
				q.PageSize = min(size, opts.Limit-n)
			}
			page, err := c.ListPage(ctx, q, cursor)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, t := range page.Tasks {
				if !yield(t, nil) {
					return
				}
				if n++; opts.Limit > 0 && n >= opts.Limit {
					return
				}
			}
			if page.NextCursor == "" {
				return
			}
			if page.NextCursor == cursor {
				yield(nil, fmt.Errorf("ax: GET /v1/tasks: the sidecar answered the cursor it was given (%q); stopping", cursor))
				return
			}
			cursor = page.NextCursor
		}
	}
}

// ListPage returns one page of the tasks that match opts (Handler, State,
// PageSize; Limit is ignored), starting after cursor: "" for the first page,
// then the NextCursor of the previous page. A cursor is opaque; it stays
// valid while the sidecar runs the same version.
func (c *Client) ListPage(ctx context.Context, opts ListOptions, cursor string) (*TaskPage, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	q := url.Values{}
	if opts.Handler != "" {
		q.Set("handler", opts.Handler)
	}
	if opts.State != "" {
		q.Set("state", string(opts.State))
	}
	if opts.PageSize > 0 {
		q.Set("limit", strconv.Itoa(opts.PageSize))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	path := "/v1/tasks"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var w axapi.ListPage
	if err := c.do(ctx, http.MethodGet, path, nil, &w); err != nil {
		return nil, err
	}
	page := &TaskPage{Tasks: make([]*Task, 0, len(w.Tasks)), NextCursor: w.NextCursor}
	for i := range w.Tasks {
		t, err := taskFromWire(&w.Tasks[i])
		if err != nil {
			return nil, err
		}
		page.Tasks = append(page.Tasks, t)
	}
	return page, nil
}

// check refuses options the sidecar would refuse, before sending.
func (o ListOptions) check() error {
	if o.PageSize < 0 || o.PageSize > ListPageSizeMax {
		return fmt.Errorf("%w: ListOptions.PageSize must be 0 (default %d) to %d, got %d", ErrInvalid, ListPageSizeDefault, ListPageSizeMax, o.PageSize)
	}
	return nil
}
