package ipc

import (
	"context"
	"fmt"
	"sync"
	"time"
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
}

var _ Backend = (*fakeBackend)(nil)

func newFakeBackend() *fakeBackend {
	return &fakeBackend{specs: map[string]TaskSpec{}, tasks: map[string]Task{}}
}

var fakeNow = time.Date(2026, 11, 30, 11, 25, 0, 0, time.UTC)

func viewOf(s TaskSpec) Task {
	t := Task{
		ID:            s.ID,
		Handler:       s.Handler,
		State:         StateWaiting,
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
	if t.State == StateWaiting || t.State == StateRunning {
		t.State = StateCancelled
		t.NextRunAt = nil
		fin := fakeNow.Add(time.Second)
		t.FinishedAt = &fin
		t.UpdatedAt = fin
	}
	f.tasks[id] = t
	return t, nil
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
