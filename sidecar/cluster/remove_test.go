package cluster

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/axsched/ax/sidecar/peerapi"
)

// A node learns it was removed only from the leader's member list: listed
// is not removed, left out is, and a peer that is not the leader (421) or
// does not answer proves nothing.
func TestRemovedByCluster(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   bool
	}{
		{"listed", 200, `{"n1":{"reachable":true},"n3":{"reachable":false}}`, false},
		{"left out", 200, `{"n1":{"reachable":true},"n2":{"reachable":true}}`, true},
		{"not the leader", http.StatusMisdirectedRequest, `{"error":"not the leader"}`, false},
		{"not the leader, coded", http.StatusMisdirectedRequest, `{"error":{"code":"not_leader","message":"not the leader"}}`, false},
		{"empty list", 200, `{}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != peerapi.PathMembers {
					http.NotFound(w, r)
					return
				}
				w.WriteHeader(tc.status)
				w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			addr := strings.TrimPrefix(srv.URL, "http://")
			m := New(Config{NodeID: "n3", PeerAddr: "127.0.0.1:1", Join: []string{"127.0.0.1:1", addr}},
				Deps{Peers: peerapi.NewClient("", nil), Log: zerolog.Nop()})
			if got := m.removedByCluster(context.Background()); got != tc.want {
				t.Fatalf("removedByCluster = %v, want %v", got, tc.want)
			}
		})
	}
}
