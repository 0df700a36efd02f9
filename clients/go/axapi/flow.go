package axapi

import (
	"encoding/json"
	"time"
)

// Flow is a flow as the API shows it (GET /v1/flows/{id}, and each item of
// GET /v1/flows).
type Flow struct {
	ID string `json:"id"`
	// State is WAITING, RUNNING, SUCCESS, FAILED or CANCELLED.
	State string `json:"state"`
	// Run is the current (or last) flow run, from 1; RunDueAt when it was
	// (or is) due.
	Run      int       `json:"run"`
	RunDueAt time.Time `json:"run_due_at"`
	// Every is a recurring flow's interval (a Go duration).
	Every string `json:"every,omitempty"`
	// Cron is a recurring flow's cron expression, evaluated in Timezone
	// (an IANA name; empty: UTC).
	Cron     string      `json:"cron,omitempty"`
	Timezone string      `json:"timezone,omitempty"`
	Stages   []StageView `json:"stages"`
	// SucceededRuns and FailedRuns count the flow runs that ended so.
	SucceededRuns int        `json:"succeeded_runs"`
	FailedRuns    int        `json:"failed_runs"`
	LastRunState  string     `json:"last_run_state,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	UpdatedAt     time.Time  `json:"updated_at"`
	FinishedAt    *time.Time `json:"finished_at,omitempty"`
}

// StageView is one stage of a flow's current run.
type StageView struct {
	Name      string   `json:"name"`
	Handler   string   `json:"handler"`
	DependsOn []string `json:"depends_on"`
	// OnFailure is "cancel" or "continue".
	OnFailure string `json:"on_failure"`
	// State is PENDING (its dependencies have not all ended), then its
	// task's state: WAITING, RUNNING, SUCCESS, DEAD, FAILED, CANCELLED (a
	// stage cancelled before it started has no task).
	State string `json:"state"`
	// TaskID is the stage's task in this run, "flow/<flow id>/<run>/<stage>"
	// ("" while PENDING, or when it was cancelled before it started).
	TaskID string `json:"task_id,omitempty"`
}

// FlowPage is one page of GET /v1/flows; NextCursor, when set, asks for
// the next.
type FlowPage struct {
	Flows      []Flow `json:"flows"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// FlowEnvelope is the callback body of a stage with dependencies: its own
// payload (JSON, or PayloadBase64 when it was given as payload_base64)
// and, per upstream stage, how it ended and its result.
type FlowEnvelope struct {
	Payload       json.RawMessage          `json:"payload,omitempty"`
	PayloadBase64 string                   `json:"payload_base64,omitempty"`
	Upstream      map[string]UpstreamStage `json:"upstream"`
}

// UpstreamStage is one upstream stage in a FlowEnvelope: its state and the
// JSON body its successful attempt answered (ResultBase64 instead for a
// body that is not JSON or was truncated at ResultMaxBytes).
// ResultOmitted says the result was left out because the envelope with
// every upstream result would not fit in a stored task (over 64 MiB, a
// wide fan-in of large results): read it from the upstream stage task's
// run history (GET /v1/tasks/{id}/runs) instead.
type UpstreamStage struct {
	State           string          `json:"state"`
	Result          json.RawMessage `json:"result,omitempty"`
	ResultBase64    string          `json:"result_base64,omitempty"`
	ResultTruncated bool            `json:"result_truncated,omitempty"`
	ResultOmitted   bool            `json:"result_omitted,omitempty"`
}
