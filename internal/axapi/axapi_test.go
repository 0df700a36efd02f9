package axapi

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	ax "github.com/axsched/ax/clients/go"
)

func TestTaskFromClientMatchesTheAPI(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.FixedZone("x", 3600))
	v := TaskFromClient(&ax.Task{
		ID: "a", Handler: "h", State: ax.StateDead, Priority: 1, Attempts: 4, MaxAttempts: 4,
		Timeout: 90 * time.Second, Delay: time.Minute, NextRunAt: at, CreatedAt: at, UpdatedAt: at,
		LastError: "http 500", PayloadBytes: []byte{0, 1, 2},
	})
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"a","handler":"h","state":"DEAD","priority":1,"attempts":4,"max_attempts":4,"timeout":"1m30s","delay":"1m0s",` +
		`"next_run_at":"2026-01-02T02:04:05.006Z","last_error":"http 500","created_at":"2026-01-02T02:04:05.006Z",` +
		`"updated_at":"2026-01-02T02:04:05.006Z","payload_base64":"AAEC"}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

func TestRouteMissing(t *testing.T) {
	if !IsRouteMissing(&ax.APIError{Status: 404, Code: "not_found", Message: "no route for DELETE /v1/cluster/members/n3"}) {
		t.Error("a 404 no route is not recognized")
	}
	if IsRouteMissing(&ax.APIError{Status: 404, Code: "not_found", Message: `member "n3": not found`}) {
		t.Error("an unknown member is taken for a missing route")
	}
	if IsRouteMissing(errors.New("no route for x")) {
		t.Error("a plain error is taken for a missing route")
	}
}

func TestSocketPath(t *testing.T) {
	t.Setenv(ax.SocketEnv, "")
	if got := SocketPath(""); got != "./ax.sock" {
		t.Errorf("default %q", got)
	}
	t.Setenv(ax.SocketEnv, "unix:///run/ax.sock")
	if got := SocketPath(""); got != "/run/ax.sock" {
		t.Errorf("from the environment %q", got)
	}
	if got := SocketPath("/x.sock"); got != "/x.sock" {
		t.Errorf("given %q", got)
	}
	err := (&unavailableError{socket: "/x.sock", err: errors.New("boom")}).Error()
	if !strings.Contains(err, "/x.sock") {
		t.Errorf("unavailable error %q does not name the socket", err)
	}
}
