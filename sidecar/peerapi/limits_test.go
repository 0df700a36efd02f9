package peerapi

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// rawPeer sends req on a new connection to addr, then body (if any) in
// the background, and reads one answer.
func rawPeer(t *testing.T, addr, req string, body io.Reader) (int, Error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	if body != nil {
		go func() { _, _ = io.Copy(c, body) }()
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", req, err)
	}
	defer resp.Body.Close()
	var e struct{ Error Error }
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 400 && (json.Unmarshal(b, &e) != nil || e.Error.Code == "") {
		t.Fatalf("%q: %d %s: not the error shape", req, resp.StatusCode, b)
	}
	return resp.StatusCode, e.Error
}

// A request without the cluster token is refused (401) after at most
// maxUnauthenticatedBody bytes of its body, whatever its Content-Length;
// with the token, a body over maxBody is 413; a malformed request is 400
// (401 when the token cannot be read from it); all in the error shape.
func TestServer_Limits(t *testing.T) {
	addr := serve(t, ServerConfig{Node: &fakeNode{}, Token: "tok"})
	const big = 32 << 20
	req := func(token string, n int) string {
		h := ""
		if token != "" {
			h = TokenHeader + ": " + token + "\r\n"
		}
		return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: ax\r\n%sContent-Length: %d\r\n\r\n", PathPropose, h, n)
	}
	// The body is never sent: the server answers from the headers alone
	// (a server that waited for the body would answer nothing before
	// rawPeer's deadline).
	for _, tok := range []string{"", "wrong"} {
		if st, e := rawPeer(t, addr, req(tok, big), nil); st != 401 || e.Code != CodeUnauthorized {
			t.Errorf("token %q, %d-byte body: %d %+v, want 401 unauthorized", tok, big, st, e)
		}
	}
	if st, e := rawPeer(t, addr, req("tok", maxBody+1), nil); st != 413 || e.Code != CodeBadRequest {
		t.Errorf("body over maxBody: %d %+v, want 413", st, e)
	}
	open := serve(t, ServerConfig{Node: &fakeNode{}}) // a cluster without a token
	if st, e := rawPeer(t, open, "POST "+PathPropose+" HTTP/1.1\r\nHost: ax\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", nil); st != 400 || e.Code != CodeBadRequest {
		t.Errorf("malformed body: %d %+v, want 400", st, e)
	}
	// Headers that do not parse cannot show the token: 401.
	if st, e := rawPeer(t, addr, "GET "+PathInfo+" HTTP/1.1\r\nHost: ax\r\n"+TokenHeader+": tok\r\nBad Header\r\n\r\n", nil); st != 401 {
		t.Errorf("malformed header: %d %+v, want 401", st, e)
	}
}
