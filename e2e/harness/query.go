package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// AgreedLeader returns the leader the given nodes agree on, waiting up to
// timeout; nil if they do not agree in time.
func AgreedLeader(c *Cluster, nodes []*Node, timeout time.Duration) *Node {
	deadline := time.Now().Add(timeout)
	for {
		if l := c.LeaderOf(nodes); l != nil {
			return l
		}
		if time.Now().After(deadline) {
			return nil
		}
		time.Sleep(PollInterval)
	}
}

// ListTasks lists every task (of one state when state is not empty)
// through cl, page by page.
func ListTasks(ctx context.Context, cl *Client, state string) ([]Task, error) {
	var out []Task
	cursor := ""
	for {
		q := url.Values{}
		q.Set("limit", "1000")
		if state != "" {
			q.Set("state", state)
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		resp, err := cl.Do(ctx, "GET", "/v1/tasks?"+q.Encode(), nil)
		if err != nil {
			return nil, err
		}
		if resp.Status != http.StatusOK {
			return nil, fmt.Errorf("GET /v1/tasks?%s: %s", q.Encode(), resp)
		}
		var page struct {
			Tasks      []Task `json:"tasks"`
			NextCursor string `json:"next_cursor"`
		}
		if err := json.Unmarshal(resp.Body, &page); err != nil {
			return nil, fmt.Errorf("decode task page: %w", err)
		}
		out = append(out, page.Tasks...)
		if page.NextCursor == "" {
			return out, nil
		}
		cursor = page.NextCursor
	}
}

// ReaderClient returns a client of the current leader, else of any running
// node.
func ReaderClient(c *Cluster, clients map[string]*Client) (*Client, string) {
	run := c.Running()
	if l := c.LeaderOf(run); l != nil {
		return clients[l.ID], l.ID
	}
	if len(run) > 0 {
		return clients[run[0].ID], run[0].ID
	}
	return clients[c.Nodes[0].ID], c.Nodes[0].ID
}

// WaitReadyWithin polls /readyz on n until 200 or timeout; it returns how
// long it took (0 when it never answered 200).
func WaitReadyWithin(cl *Client, timeout time.Duration) time.Duration {
	start := time.Now()
	for time.Since(start) < timeout {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := cl.Do(ctx, "GET", "/readyz", nil)
		cancel()
		if err == nil && resp.Status == http.StatusOK {
			return max(time.Since(start), time.Nanosecond)
		}
		time.Sleep(PollInterval)
	}
	return 0
}
