// Package alert is the leader's dead-run webhook sender: while this node
// leads, it POSTs every pending alert (a run that ended DEAD or FAILED,
// raftfsm/alert.go) to the --on-dead-url webhook, oldest first, and once
// the webhook answers 2xx proposes raftfsm.CmdAlertDone, which deletes
// it. A failed send (an error or a non-2xx answer) is tried again after a
// capped backoff (BackoffMin doubling to BackoffMax), on the node's clock;
// alerts the webhook keeps refusing (400, 409, 413, 422) do not hold
// up the later ones, however many (a round goes through every pending
// alert; after another failure too, but a second one ends the round, and
// a round with a failure waits out the backoff); it never holds up
// anything else: the
// sender is its own goroutine, and
// the alerts wait in the store, replicated, so a new leader sends what the
// old one had not (at least once: a receiver de-duplicates on the
// Ax-Alert-Id header, "<task id>/<run>").
//
// The body is axapi.Alert (JSON): the alert's own fields, which outlive a
// purge of the task, and the task and run record views as they stand.
//
// # Imports
//
// alert imports engine (the clock), raftfsm (the alerts, CmdAlertDone),
// the wire types (clients/go/axapi), prometheus and zerolog. What it needs
// of the node it asks through Store, Proposer and Poster (a
// callback.Caller's PostAlert), which sidecar/wire_alert.go satisfies; it
// must not import sidecar or its other parts.
package alert
