// Package e2e holds the end-to-end tests of ax: they build the ax binary
// once (or take a prebuilt one from -ax-bin), start real multi-process
// clusters on loopback ports and Unix sockets under the test's temporary
// directory, drive them through the application API and record every
// callback in an in-test executor.
//
// The tests are ordinary Go tests (no build tag); they skip under -short.
//
//	go test ./e2e/ -v -count=1
//	go test ./e2e/ -v -count=1 -ax-bin=$PWD/bin/ax
//	AX_E2E_LATENCY_OUT=/tmp/lateness.json go test ./e2e/ -run TestCluster
//	AX_E2E_LOG_LEVEL=debug go test ./e2e/ -run TestSemantics
//	AX_E2E_VERBOSE=1 go test ./e2e/ -run PendingAndRunning   # per-task lateness
//	AX_CHAOS_DURATION=40s go test ./e2e/ -run TestChaos -v    # the SIGKILL loop
//	AX_LIN_DURATION=60s AX_LIN_KILLS=10 go test ./e2e/ -run TestLinearizab -v
//
// # Layout
//
//   - harness_test.go: TestMain (builds the binary), Process (one ax
//     process: Start, Stop, Kill, Restart, Logs) and Cluster (options,
//     Leader, Followers, WaitReady, WaitForNewLeader).
//   - client_test.go: a small API client over a node's Unix socket and the
//     wire types, written against the documented JSON, not ipc's Go types.
//   - executor_test.go: the test executor, one per node, recording every
//     callback and answering by handler (e2e.ok, e2e.fail, e2e.slow, ...).
//   - cluster_test.go: firing and failover on three nodes, with lateness
//     figures (TestCluster_ThreeNodes_FireOnceAndSurviveLeaderKill); a
//     leader killed with tasks waiting and attempts running, and its restart
//     (TestCluster_LeaderKill_PendingAndRunningTasks); a busy answer whose
//     report crosses a leader change (TestCluster_BusyAnswerAcrossLeaderChange).
//   - semantics_test.go: API semantics on three nodes (retries and DEAD,
//     FAILED, timeouts, cancel of waiting and running tasks, busy snoozes,
//     run_at, idempotency, conflicts and overwrite, bad input, forwarding,
//     reading one's writes on a follower, the cluster view) and a single
//     node restarted with SIGTERM.
//   - chaos_test.go: 2 minutes of load while a random node is SIGKILLed
//     every 10 s; counts lost, early and duplicate callbacks.
//   - faultproxy_test.go: a TCP proxy per peer link (Cluster option
//     WithPeerProxies, nodes started with the hidden --peer-route) that can
//     cut a link (blackhole: no RST, as a real partition) and heal it.
//   - partition_test.go, sigstop_test.go: the leader (or a follower) cut
//     off, or stopped with SIGSTOP, under load: a new leader takes over,
//     the old one delivers nothing stale, nothing is lost, state converges.
//   - snapshot_catchup_test.go: a follower partitioned past the trailing
//     logs and a late joiner both catch up from one snapshot install.
//   - linearizability_test.go: concurrent clients on every node, leader
//     kills, and github.com/anishathalye/porcupine checking that writes and
//     ?consistency=strong reads are linearizable (AX_LIN_DURATION,
//     AX_LIN_KILLS, AX_LIN_SEED).
//   - autopilot_test.go: joins as non-voters, promotion when a voter dies.
//   - diskfull_test.go: a node's data dir on a small tmpfs filled up: 503
//     storage_unavailable, no crash, recovery (root only; skips otherwise).
package e2e
