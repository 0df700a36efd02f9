// Package bench runs the workloads of `ax bench` against a cluster it starts
// itself (one or three `ax sidecar` processes on 127.0.0.1, data in a
// temporary directory) or against a running one, with its own executor that
// records when each callback arrives:
//
//   - delayed: the lateness test. N tasks with due times spread uniformly over
//     a range, submitted in batches with an explicit run_at; it checks that
//     none is called back early, counts the ones late by more than a second
//     ("expired") and duplicates, and reports the lateness distribution.
//   - burst: the limiter test. N tasks due at once on one node, each callback
//     taking a fixed time; for each delivery limit it reports the makespan,
//     the lateness and the peak in-flight at the executor.
//   - throughput: the highest submit rate that 1, 8 and 16 (any list of)
//     concurrent callers reach, one task per request, then in batches, with
//     request latencies, each rate as a ratio to the disk's synced-write
//     rate the bench measures first, and the commands per Raft entry and
//     log fsyncs per entry read from the nodes' /metrics.
//
// Lateness is the time from a task's due time to the moment the executor
// receives its callback; both are read from the same machine's clock.
package bench
