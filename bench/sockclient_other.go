//go:build !unix

package bench

import "time"

// newSockSubmitter returns nil where there is no blocking Unix socket
// client (sockclient_unix.go): the bench uses fasthttp's.
func newSockSubmitter(string, time.Duration) submitter { return nil }
