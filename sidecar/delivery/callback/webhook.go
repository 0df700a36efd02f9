package callback

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/axsched/ax/clients/go/axapi"
)

// AlertPath is the path of a dead-run alert on the webhook's base URL
// (--on-dead-url; axapi.AlertPath).
const AlertPath = axapi.AlertPath

// ParseAlertURL checks the base URL of the dead-run webhook
// (--on-dead-url). It takes the forms of an executor's base URL and
// follows the same rules (ParseExecutorURL): unix:///abs/path.sock or
// http://LOOPBACK:PORT[/prefix]; the alert goes to AlertPath on it.
func ParseAlertURL(s string) error {
	_, err := parseBaseURL("alert url", s)
	return err
}

// PostAlert POSTs body, JSON, to baseURL + AlertPath over the Caller's
// connection pool of that address (the executors' transport: no proxy,
// no redirect followed), with the headers of h plus Content-Type:
// application/json and User-Agent. It returns the answer's status, or an
// error when no answer came (a bad URL, a connection error, ctx done).
// It reads and drops at most 64 KiB of the answer.
func (c *Caller) PostAlert(ctx context.Context, baseURL string, h http.Header, body []byte) (int, error) {
	ep, err := parseBaseURL("alert url", baseURL)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.base+AlertPath, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("build request: %w", err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", c.opts.UserAgent)
	resp, err := c.client(endpointKey{ep.network, ep.address}, 0).Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, errorBodyMaxBytes))
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}
