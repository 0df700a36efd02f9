// Package peerapi is the node-to-node API of an ax cluster (HTTP on
// --peer-addr): its paths and bodies, its error codes, a Server that answers
// them for a Node, and a Client that calls other nodes and remembers their
// addresses.
//
//	GET  /peer/v1/info      this node's id, addresses and the leader it knows (Info, JSON)
//	POST /peer/v1/join      add the node in the body (Info) to the cluster: the leader does it, others forward
//	POST /peer/v1/propose   body: a raftfsm entry; the leader commits it and answers the results (msgpack)
//	POST /peer/v1/report    a node's load (LoadReport) to the leader; answers ReportReply
//	GET  /peer/v1/task?id=  a task as this node has it (msgpack), for a follower that is catching up;
//	                        &consistency=strong reads it on the leader, linearizably
//	POST /peer/v1/remove    remove the node {id} from the configuration (the leader does it)
//	GET  /peer/v1/members   the leader's view of every member (map of MemberStatus)
//
// Other components add routes of their own (ServerConfig.Routes).
//
// # Errors
//
// Every error answer has the body {"error": {"code": ..., "message": ...}},
// like the application API's; the codes are listed in errors.go. A Client
// returns them as *Error, which errors.Is matches by code, so a storage
// failure or a full backlog on the leader reaches the forwarding node as
// what it is (storage_unavailable, queue_full), not as a lost leader. The
// Client also reads the bare answers of older nodes ({"error": "text"} with
// only a status) during a rolling upgrade.
//
// # Deadlines
//
// A request whose context has a deadline carries the time left
// (DeadlineHeader); the server answers within nine tenths of it (and within
// Timeout), so the caller hears why a proposal failed before it gives up
// waiting.
//
// # Authentication
//
// With --cluster-token every request carries TokenHeader (401 without
// it). With TLS the node wraps the server's listener
// (ServerConfig.Listener: peertls.Listener, which answers only the
// connections whose mutual TLS handshake passed) and makes the client dial
// TLS (Client.SetTLS); a failed handshake is a dial failure (DialFailed).
//
// # Limits
//
// The server bounds what a client may hold (limits.go): a header
// time-out (HeaderTimeout, which also bounds the wait for a new
// connection's first request), an idle time-out longer than the Client's
// own, MaxConns connections in all and MaxConnsPerIP from one address,
// and 4 KiB of body for a request without the cluster token. Its logs and
// error answers never quote a request's bytes.
//
// # Imports
//
// peerapi imports raftfsm (the entry and result encodings), ipc (the codes
// shared with the application API), engine (the clock), internal/rawio
// (its connections' raw reads and writes on one P) and fasthttp. It
// must not import sidecar or its other sub-packages: what it needs from the
// node it asks through the Node interface.
package peerapi
