package callback

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/axsched/ax/clients/go/axapi"
)

func TestParseAlertURL(t *testing.T) {
	for _, ok := range []string{"unix:///run/alerts.sock", "http://127.0.0.1:9000", "http://localhost:9000/hooks"} {
		if err := ParseAlertURL(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "127.0.0.1:9000", "https://127.0.0.1:9000", "http://example.com:80", "unix://rel.sock", "http://127.0.0.1"} {
		err := ParseAlertURL(bad)
		if err == nil || !strings.Contains(err.Error(), "alert url") {
			t.Errorf("%q: %v, want an alert url error", bad, err)
		}
	}
}

// TestPostAlert: the body, the headers given and the JSON content type
// reach AlertPath on the base URL, over TCP (with a path prefix) and a
// Unix socket; the status comes back.
func TestPostAlert(t *testing.T) {
	type got struct {
		path, ctype, id, body string
	}
	ch := make(chan got, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ch <- got{r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get(axapi.HeaderAlertID), string(b)}
		w.WriteHeader(http.StatusTeapot)
	})}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "a.sock")
	unix, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(tcp)
	go srv.Serve(unix)
	t.Cleanup(func() { srv.Close() })
	c := NewCaller(CallerOptions{})
	defer c.Close()
	for base, path := range map[string]string{"http://" + tcp.Addr().String() + "/hooks/": "/hooks" + AlertPath, "unix://" + sock: AlertPath} {
		h := http.Header{}
		h.Set(axapi.HeaderAlertID, "t/1")
		status, err := c.PostAlert(context.Background(), base, h, []byte(`{"id":"t/1"}`))
		if err != nil || status != http.StatusTeapot {
			t.Fatalf("%s: %d %v", base, status, err)
		}
		g := <-ch
		if g.path != path || g.ctype != "application/json" || g.id != "t/1" || g.body != `{"id":"t/1"}` {
			t.Fatalf("%s: received %+v", base, g)
		}
	}
	if _, err := c.PostAlert(context.Background(), "unix://"+filepath.Join(t.TempDir(), "none.sock"), nil, nil); err == nil {
		t.Fatal("no error from an absent socket")
	}
}
