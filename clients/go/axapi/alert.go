package axapi

import "time"

// The dead-run alert: what the leader sidecar POSTs to the webhook of
// --on-dead-url, once per run that ends DEAD or FAILED (docs/DESIGN.md
// section 12). The URL is a base URL like an executor's; the request goes
// to AlertPath on it, with headers HeaderAlertID, HeaderTaskID,
// HeaderHandler, HeaderRun and Content-Type: application/json, and the
// body Alert. A 2xx answer is taken as delivered; anything else is sent
// again later (at least once: de-duplicate on HeaderAlertID).
const (
	// AlertPath is the path of the alert on the webhook's base URL.
	AlertPath = "/ax/v1/alert"
	// HeaderAlertID is the alert's id, "<task id>/<run>": the same for
	// every send of one alert, whichever node sends it.
	HeaderAlertID = "Ax-Alert-Id"
)

// Alert is the body of a dead-run alert. Task and RunRecord are the views
// GET /v1/tasks/{id} and GET /v1/tasks/{id}/runs/{run} give, as they
// stand when the alert is sent: absent when the task was purged first
// (or the run record is not kept: --history-runs -1); the other fields
// are always there.
type Alert struct {
	// ID is "<task id>/<run>", as HeaderAlertID.
	ID      string `json:"id"`
	TaskID  string `json:"task_id"`
	Handler string `json:"handler"`
	// Run is the run number that ended (Ax-Run of its attempts).
	Run int `json:"run"`
	// State is DEAD (its attempts ran out) or FAILED (a permanent error).
	State      string    `json:"state"`
	FinishedAt time.Time `json:"finished_at"`
	// Error is the last attempt's error, at most RunErrorMaxBytes.
	Error     string `json:"error,omitempty"`
	Task      *Task  `json:"task,omitempty"`
	RunRecord *Run   `json:"run_record,omitempty"`
}
