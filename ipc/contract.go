package ipc

import "github.com/axsched/ax/clients/go/axapi"

// The wire contract (JSON types, limits, error codes) is package axapi of
// the Go client's module, written once for the server, the Go client and
// the command line; ipc uses its limits and codes directly (axapi.TimeoutMax,
// axapi.CodeNotFound). The types the Backend and the sidecar use are
// named here under their server names: the same types, not copies.

// Task is the JSON view of a task (axapi.Task).
type Task = axapi.Task

// BackoffView is a task's retry backoff in the API (axapi.BackoffView).
type BackoffView = axapi.BackoffView

// ShardsView is a sharded task's shards in its view.
type ShardsView = axapi.ShardsView

// Run is one run of a task's history (axapi.Run); RunsPage a page of
// them (axapi.RunsPage).
type (
	Run        = axapi.Run
	RunsPage   = axapi.RunsPage
	RunAttempt = axapi.RunAttempt
	Lateness   = axapi.Lateness
)

// ListPage is one page of List (axapi.ListPage).
type ListPage = axapi.ListPage

// AttemptResult is the body of POST /v1/tasks/{id}/result
// (axapi.AttemptResult).
type AttemptResult = axapi.AttemptResult

// ExecutorSpec is an executor registered on a node (axapi.ExecutorSpec).
type ExecutorSpec = axapi.ExecutorSpec

// HandlerPause is the answer of the handler pause routes
// (axapi.HandlerPause).
type HandlerPause = axapi.HandlerPause

// HandlerInfo is one handler of GET /v1/handlers (axapi.HandlerInfo).
type HandlerInfo = axapi.HandlerInfo

// HandlerExecutor is an executor of a HandlerInfo (axapi.HandlerExecutor).
type HandlerExecutor = axapi.HandlerExecutor

// PurgeResult is the reply of the purge endpoints (axapi.PurgeResult).
type PurgeResult = axapi.PurgeResult

// ClusterInfo is the reply of GET /v1/cluster (axapi.ClusterInfo).
type ClusterInfo = axapi.ClusterInfo

// Member is one server of the Raft configuration (axapi.Member).
type Member = axapi.Member

// StorageStatus says why a node refuses writes (axapi.StorageStatus).
type StorageStatus = axapi.StorageStatus

// State types the keys of HandlerInfo.Tasks (axapi.State).
type State = axapi.State

// PayloadMaxBytes bounds a payload: 1 MiB (axapi.PayloadMaxBytes).
const PayloadMaxBytes = axapi.PayloadMaxBytes

// List page sizes of GET /v1/tasks (axapi.ListLimitDefault,
// axapi.ListLimitMax).
const (
	ListLimitDefault = axapi.ListLimitDefault
	ListLimitMax     = axapi.ListLimitMax
)
