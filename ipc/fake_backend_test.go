package ipc

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
)

// fakeBackend is an in-memory Backend for handler tests. Its error fields,
// when set, are returned by the matching method.
type fakeBackend struct {
	mu      sync.Mutex
	specs   map[string]TaskSpec
	tasks   map[string]Task
	cluster ClusterInfo

	submitErr  error
	taskErr    error
	readyErr   error
	clusterErr error
	// block makes Submit wait for its context to end and return ctx.Err().
	block bool
	// panicOn makes Task panic for this id.
	panicOn string
	// lastSpec is the spec of the last Submit.
	lastSpec TaskSpec

	executors map[string]ExecutorSpec
	// batchErr, listErr and executorsErr fail SubmitBatch, List and every
	// executor method; itemErr fails the batch items with these ids.
	batchErr     error
	listErr      error
	executorsErr error
	itemErr      map[string]error
	// Arguments of the last calls.
	lastBatch     []TaskSpec
	lastMinimal   bool
	lastQuery     ListQuery
	lastHeartbeat int
	lastResult    AttemptResult
	lastRuns      RunsQuery
	lastExecutor  ExecutorSpec
	// batchShort makes SubmitBatch drop its last result (a Backend bug).
	batchShort bool
	// lastPurge is the query of the last PurgeTasks (purge_test.go).
	lastPurge PurgeQuery
	// pausedHandlers holds the paused handlers (fake_pause_test.go).
	pausedHandlers map[string]bool
}

var _ Backend = (*fakeBackend)(nil)

func newFakeBackend() *fakeBackend {
	return &fakeBackend{specs: map[string]TaskSpec{}, tasks: map[string]Task{}, executors: map[string]ExecutorSpec{}}
}

var fakeNow = time.Date(2026, 11, 30, 11, 25, 0, 0, time.UTC)

func viewOf(s TaskSpec) Task {
	t := Task{
		ID:            s.ID,
		Handler:       s.Handler,
		State:         axapi.StateWaiting,
		Priority:      s.Priority,
		MaxAttempts:   s.MaxAttempts,
		Timeout:       s.Timeout.String(),
		CreatedAt:     fakeNow,
		UpdatedAt:     fakeNow,
		Payload:       s.Payload,
		PayloadBase64: s.PayloadBase64,
	}
	next := fakeNow.Add(s.Delay)
	if !s.RunAt.IsZero() {
		ra := s.RunAt
		t.RunAt, next = &ra, ra
	} else if s.Delay > 0 {
		t.Delay = s.Delay.String()
	}
	t.NextRunAt = &next
	return t
}

func (f *fakeBackend) Submit(ctx context.Context, spec TaskSpec) (Task, bool, error) {
	if f.block {
		<-ctx.Done()
		return Task{}, false, ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastSpec = spec
	if f.submitErr != nil {
		return Task{}, false, f.submitErr
	}
	return f.submitLocked(spec)
}

func (f *fakeBackend) submitLocked(spec TaskSpec) (Task, bool, error) {
	if old, ok := f.specs[spec.ID]; ok && !spec.Overwrite {
		if SameSpec(old, spec) {
			return f.tasks[spec.ID], false, nil
		}
		return Task{}, false, fmt.Errorf("task %q exists with a different spec: %w", spec.ID, ErrConflict)
	}
	f.specs[spec.ID] = spec
	f.tasks[spec.ID] = viewOf(spec)
	return f.tasks[spec.ID], true, nil
}

func (f *fakeBackend) Task(ctx context.Context, id string) (Task, error) {
	if id == f.panicOn {
		panic("fake backend panics for " + id)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.taskErr != nil {
		return Task{}, f.taskErr
	}
	t, ok := f.tasks[id]
	if !ok {
		return Task{}, fmt.Errorf("task %q: %w", id, ErrNotFound)
	}
	return t, nil
}

func (f *fakeBackend) Cancel(ctx context.Context, id string) (Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tasks[id]
	if !ok {
		return Task{}, Errorf(ErrNotFound, "task %q", id)
	}
	if t.State == axapi.StateWaiting || t.State == axapi.StateRunning {
		t.State = axapi.StateCancelled
		t.NextRunAt = nil
		fin := fakeNow.Add(time.Second)
		t.FinishedAt = &fin
		t.UpdatedAt = fin
	}
	f.tasks[id] = t
	return t, nil
}

func (f *fakeBackend) RemoveMember(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, m := range f.cluster.Members {
		if m.ID == id {
			f.cluster.Members = append(f.cluster.Members[:i], f.cluster.Members[i+1:]...)
			return nil
		}
	}
	return Errorf(ErrNotFound, "member %q not found", id)
}

func (f *fakeBackend) Cluster(ctx context.Context) (ClusterInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cluster, f.clusterErr
}

func (f *fakeBackend) Ready(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.readyErr
}

func (f *fakeBackend) set(fn func(f *fakeBackend)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeBackend) SubmitBatch(ctx context.Context, specs []TaskSpec, minimal bool) ([]BatchItem, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastBatch, f.lastMinimal = specs, minimal
	if f.batchErr != nil {
		return nil, f.batchErr
	}
	items := make([]BatchItem, len(specs))
	for i, spec := range specs {
		if err := f.itemErr[spec.ID]; err != nil {
			items[i].Err = err
			continue
		}
		items[i].Task, items[i].Created, items[i].Err = f.submitLocked(spec)
	}
	if f.batchShort {
		items = items[:len(items)-1]
	}
	return items, nil
}

// List pages through the tasks in id order; the cursor is the last id of
// the previous page.
func (f *fakeBackend) List(ctx context.Context, q ListQuery) (ListPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastQuery = q
	if f.listErr != nil {
		return ListPage{}, f.listErr
	}
	if q.Cursor == "bad" {
		return ListPage{}, Errorf(ErrInvalid, "cursor: not one of ours")
	}
	ids := make([]string, 0, len(f.tasks))
	for id, t := range f.tasks {
		if (q.Handler == "" || t.Handler == q.Handler) && (q.State == "" || t.State == q.State) && id > q.Cursor {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	var page ListPage
	for i, id := range ids {
		if i == q.Limit {
			page.NextCursor = ids[i-1]
			break
		}
		page.Tasks = append(page.Tasks, f.tasks[id])
	}
	return page, nil
}

func (f *fakeBackend) Retry(ctx context.Context, id string) (Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tasks[id]
	if !ok {
		return Task{}, Errorf(ErrNotFound, "task %q", id)
	}
	if t.State != axapi.StateDead && t.State != axapi.StateFailed {
		return Task{}, Errorf(ErrConflict, "task %q is %s, not DEAD or FAILED", id, t.State)
	}
	t.State, t.Attempts, t.FinishedAt = axapi.StateWaiting, 0, nil
	next := fakeNow
	t.NextRunAt = &next
	f.tasks[id] = t
	return t, nil
}

// running returns the task if attempt is its current, running attempt.
func (f *fakeBackend) running(id string, attempt int) (Task, error) {
	t, ok := f.tasks[id]
	if !ok {
		return Task{}, Errorf(ErrNotFound, "task %q", id)
	}
	if t.State != axapi.StateRunning || t.Attempts != attempt {
		return Task{}, Errorf(ErrConflict, "task %q: attempt %d is not running", id, attempt)
	}
	return t, nil
}

func (f *fakeBackend) Heartbeat(ctx context.Context, id string, attempt int) (Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastHeartbeat = attempt
	return f.running(id, attempt)
}

func (f *fakeBackend) ReportResult(ctx context.Context, id string, r AttemptResult) (Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastResult = r
	t, err := f.running(id, r.Attempt)
	if err != nil {
		return Task{}, err
	}
	t.State = map[string]string{axapi.ResultSuccess: axapi.StateSuccess, axapi.ResultFailed: axapi.StateWaiting, axapi.ResultPermanent: axapi.StateFailed}[r.Status]
	t.LastError = r.Error
	f.tasks[id] = t
	return t, nil
}

func (f *fakeBackend) RegisterExecutor(ctx context.Context, e ExecutorSpec) (ExecutorSpec, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastExecutor = e
	if f.executorsErr != nil {
		return ExecutorSpec{}, false, f.executorsErr
	}
	old, exists := f.executors[e.Name]
	if exists && old.FromFlag {
		return ExecutorSpec{}, false, Errorf(ErrConflict, "executor %q is set by --executor", e.Name)
	}
	f.executors[e.Name] = e
	return e, !exists, nil
}

func (f *fakeBackend) UnregisterExecutor(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.executorsErr != nil {
		return f.executorsErr
	}
	if _, ok := f.executors[name]; !ok {
		return fmt.Errorf("executor %q: %w", name, ErrNotFound)
	}
	delete(f.executors, name)
	return nil
}

func (f *fakeBackend) Executors(ctx context.Context) ([]ExecutorSpec, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.executorsErr != nil {
		return nil, f.executorsErr
	}
	var out []ExecutorSpec
	for _, e := range f.executors {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b ExecutorSpec) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// setTask changes a stored task, for tests that need RUNNING or DEAD tasks.
func (f *fakeBackend) setTask(id string, fn func(t *Task)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.tasks[id]
	fn(&t)
	f.tasks[id] = t
}
