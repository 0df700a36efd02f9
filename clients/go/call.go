package ax

import (
	"context"
	"net/http"
)

// callResponseMaxBytes bounds an answer of Call: a page of ListPageSizeMax
// tasks with their payloads can be large.
const callResponseMaxBytes = 256 << 20

// Response is an answer of Client.Call, as received.
type Response struct {
	// Status is the HTTP status code.
	Status int
	// Header holds the answer's headers (Ax-Backlog-Warning, Retry-After).
	Header http.Header
	// Body is the answer's body, at most 256 MiB of it.
	Body []byte
}

// Socket returns the path of the sidecar's socket the Client talks to.
func (c *Client) Socket() string { return c.socket }

// Call sends one request of the socket API (ipc/openapi.yaml; the JSON
// types are package axapi's) and returns the answer undecoded, for tools
// that print or forward the API's JSON, such as the ax command line's
// --json. path holds the path and query, escaped ("/v1/tasks?limit=5",
// axapi.TaskPath(id)); body is JSON, or nil for none. Call tries once: it
// does not retry no_leader answers as the typed calls do.
//
// A 2xx answer returns its Response and nil. Any other status returns its
// Response too, with an *APIError (whose Code is empty when the body is not
// the API's error shape, for example when the socket is not a sidecar's).
// No answer returns a nil Response and an error matching ErrUnavailable, or
// the context's error, as for the typed calls.
func (c *Client) Call(ctx context.Context, method, path string, body []byte) (*Response, error) {
	return c.roundTrip(ctx, method, path, body, callResponseMaxBytes)
}
