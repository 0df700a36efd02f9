// Package peertls authenticates the traffic between the nodes of an ax
// cluster: mutual TLS for the Raft transport and the peer API, and, without
// TLS, a token handshake on the Raft port.
//
//   - files.go: Files (--tls-cert, --tls-key, --tls-ca, --tls-server-name)
//     and Load, which checks them: all three or none, readable PEM, a key
//     that matches the certificate, a certificate the CA bundle verifies.
//   - reload.go: Reloader, which holds the current certificate and CA pool,
//     re-reads the files every poll interval when their contents change (a
//     bad new set keeps the old one and logs an error), and hands out
//     tls.Configs that always use the current ones: ServerConfig (through
//     GetConfigForClient) and ClientConfig (built per dial). TLS 1.3 only;
//     both sides require and verify the other's certificate.
//   - stream.go: StreamLayer, a raft.StreamLayer over TCP that runs an
//     Authenticator on every connection, on both the Dial and the Accept
//     side, under a deadline, before raft reads or writes a frame. Accept
//     runs the handshakes aside (at most MaxPendingHandshakes at once), so
//     a slow or silent client holds no other connection up; a failed one
//     is closed and logged (rate-limited) with the remote address.
//   - tls.go: TLSAuth, the Authenticator of mutual TLS.
//   - token.go: TokenAuth, the Authenticator of --cluster-token: each side
//     sends a fresh 32-byte random nonce and answers
//     HMAC-SHA256(token, direction || client nonce || server nonce),
//     compared with hmac.Equal (the challenge-response of RFC 2104's HMAC
//     with a nonce from each side, as in SCRAM, RFC 5802).
//   - certgen.go: NewCA and NewNodeCert, ECDSA P-256 certificates from
//     crypto/x509 for development and tests (`ax tls ca`, `ax tls cert`).
//
// # Imports
//
// peertls imports the standard library, hashicorp/raft (for the
// StreamLayer interface), internal/rawio (the Raft connections' raw reads
// and writes on one P, StreamConfig.Hold) and zerolog. It must not import package sidecar
// or its other sub-packages: raftstore takes its StreamLayer through a
// constructor in its Config, peerapi takes plain *tls.Config functions.
package peertls
