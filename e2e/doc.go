// Package e2e holds the end-to-end tests of ax: they build the ax binary
// once (or take a prebuilt one from -ax-bin), start real multi-process
// clusters on loopback ports and Unix sockets under the test's temporary
// directory, drive them through the application API and record every
// callback in an in-test executor.
//
// The tests are ordinary Go tests (no build tag); they skip under -short.
// Tests without a timing bound or a CPU or throughput figure call
// t.Parallel (each cluster has its own ports, from internal/freeport, and
// directories); the others run first, one at a time. .ci/test runs the
// package with -parallel 3.
//
//	go test ./e2e/ -v -count=1
//	go test ./e2e/ -v -count=1 -ax-bin=$PWD/bin/ax
//	AX_E2E_LATENCY_OUT=/tmp/lateness.json go test ./e2e/ -run TestCluster
//	AX_E2E_LOG_LEVEL=debug go test ./e2e/ -run TestSemantics
//	AX_E2E_VERBOSE=1 go test ./e2e/ -run PendingAndRunning   # per-task lateness
//	AX_E2E_KEEP_LOGS=/tmp/axlogs go test ./e2e/ -run TestSigstop   # whole node logs of a failed test
//	AX_CHAOS_DURATION=40s go test ./e2e/ -run TestChaos -v    # the SIGKILL loop
//	AX_LIN_DURATION=60s AX_LIN_KILLS=10 go test ./e2e/ -run TestLinearizab -v
//
// # Layout
//
//   - harness/: the kit every test here uses (package harness): processes,
//     clusters, the API client, the test executor and its Recorder, fault
//     proxies, the submit load, the porcupine model; see its doc.
//   - main_test.go: TestMain (harness.Main builds the binary once).
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
//     every 10 s; counts lost, early and duplicate callbacks. Split as
//     etcd's robustness tests are: traffic (harness.TrafficLoad), faults
//     (chaos_faults_test.go, the kill loop), checks (chaos_checks_test.go)
//     and report (chaos_report_test.go).
//   - partition_test.go, sigstop_test.go: the leader (or a follower) cut
//     off, or stopped with SIGSTOP, under load: a new leader takes over,
//     the old one delivers nothing stale, nothing is lost, state converges.
//   - snapshot_catchup_test.go: a follower partitioned past the trailing
//     logs and a late joiner both catch up from one snapshot install.
//   - linearizability_test.go: concurrent clients on every node, leader
//     kills, and github.com/anishathalye/porcupine checking that writes and
//     ?consistency=strong reads are linearizable (AX_LIN_DURATION,
//     AX_LIN_KILLS, AX_LIN_SEED); the model and the checker are
//     harness/porcupine.go, the clients and the kills are here.
//   - autopilot_test.go: joins as non-voters, promotion when a voter dies.
//   - flow_test.go: flows — the diamond A -> (B, C) -> D with a leader
//     SIGKILL while B and C run (each stage once, never early), a failing
//     stage (dependents CANCELLED, or run with on_failure continue), a
//     recurring flow every 2s (three runs, none overlapping).
//   - shards_test.go: shards — count 8 on 3 nodes (indexes 0-7, spread, a
//     shard failing twice then succeeding with 3 attempts on record) and
//     ask mode answered 5; the Go client's Executor with WithShardCount
//     answering 3 (its Delivery's shard index and total).
//   - diskfull_test.go: a node's data dir on a small tmpfs filled up: 503
//     storage_unavailable, no crash, recovery (root only; skips otherwise).
//   - discovery_test.go: three nodes bootstrap from dns:NAME:PORT join
//     entries alone (the hidden --dns-hosts-file resolves NAME), a fourth
//     joins with its settings from AX_* variables; the health port and
//     `ax health --ready`.
//   - lifecycle_test.go: graceful stops (drain.go) — a leader SIGTERMed
//     while 1 000 tasks fall due delivers each exactly once; a scale-down
//     from 3 to 1 with two SIGTERMs at once leaves the survivor the only
//     member, accepting and firing (lost / early / duplicates printed);
//     a callback that never answers holds a stop only for --drain-timeout.
//   - security_test.go: peer security (sidecar/peertls) — a mutual-TLS
//     cluster forms, fires and survives a leader kill while a node of
//     another CA, plaintext HTTP and rogue Raft clients get nothing; with
//     --cluster-token, a rogue speaking raw Raft (AppendEntries,
//     RequestVote, InstallSnapshot at term 1 000 000) moves no term,
//     leader, member or task; certificate rotation under load (new key,
//     then a new CA alongside the old) with no restart and no lost or
//     early task.
//   - pods_test.go: ax in pods (harness.PodNet; root only, skipped
//     otherwise): each node in a network namespace of its own on a test
//     bridge (198.18.0.0/15), found through the headless name in its
//     /etc/netns/<pod>/hosts (--join dns:NAME:PORT, bind 0.0.0.0, advertise
//     the pod address), an echo-executor in every pod, 100 submits/s due
//     within 0-3 s through the live pods' sockets; each scenario prints
//     lost / early / duplicates: three pods bootstrap by DNS; a rolling
//     update; scale 3 -> 5 -> 1 -> 3 with two SIGTERMs at once; a new pod at
//     an old pod's address (after a graceful stop and after SIGKILL); a
//     leader SIGTERMed while 1 000 tasks fall due (lateness and the
//     hand-over printed).
package e2e
