// Package harness is the kit of ax's end-to-end tests: it builds the ax
// binary, starts real multi-process clusters on loopback ports and Unix
// sockets, cuts their links, drives them through the application API and
// records every callback. The tests in e2e/ import it; so can any other
// package's tests that need real processes. Everything here may call
// testing.T's Fatal: use it from a test's goroutine.
//
// # Files
//
//   - main.go: Main (the body of TestMain: builds the binary once, or takes
//     -ax-bin), SkipShort.
//   - process.go: Process, one ax process (Start, Stop, Kill, Pause,
//     Resume, Restart, Logs); procattr_*.go, procgroup_*.go: a process dies
//     with the test binary; procstat.go: its CPU and RSS from /proc.
//   - cluster.go: Cluster and its options (WithSize, WithArgs, WithNodeArgs,
//     WithPeerProxies, ...), Node, Leader, Followers, WaitReady,
//     WaitForNewLeader, WaitFor; query.go: reads that tolerate a cluster
//     in flux (AgreedLeader, ListTasks, ReaderClient, WaitReadyWithin).
//   - client.go: a small API client over a node's Unix socket and the wire
//     types, written against the documented JSON, not ipc's Go types;
//     tasks.go: submit and wait helpers that fail the test (MustSubmit,
//     WaitState, WantError, CheckHeaders).
//   - executor.go: the test executor, one per node, recording every
//     callback in a Recorder and answering by handler (HandlerOK,
//     HandlerFail, HandlerSlow, ...).
//   - faultproxy.go: FaultProxy, a TCP proxy per direction of a peer link
//     that can cut it (a black hole, as a real partition) and heal it;
//     FaultNet, the proxies of a cluster started WithPeerProxies.
//   - traffic.go: TrafficLoad, a steady stream of submits at a rate, each
//     retried with the same id and body through the next live node until
//     acknowledged (the kill and partition tests' load).
//   - porcupine.go: the sequential model of the task API (LinModel,
//     LinExpect) and LinCheck, which checks a history with
//     github.com/anishathalye/porcupine and explains a violation.
//   - lateness.go, metrics.go, logs.go: what the tests report (lateness
//     percentiles, callbacks per node, /metrics samples, the warnings and
//     errors in each node's log).
//   - env.go, python.go: knobs from the environment; the python3 the
//     Python client's tests need.
//   - netns.go: PodNet, pods as a Deployment runs them (root only:
//     RequireRoot): a network namespace per pod on a test bridge, an
//     address in 198.18.0.0/15, /etc/netns/<pod>/hosts listing every live
//     pod under PodService, an echo-executor and the sidecar started with
//     `ip netns exec` (StartPod, StartPodAt, Stop, Kill, Release); every
//     namespace, link and hosts file is removed in t.Cleanup, and what a
//     crashed run left is swept by the next. podload.go: PodLoad, a steady
//     submit rate through the live pods' sockets, and the callbacks the
//     pods' executors logged (PodNet.Calls).
package harness
