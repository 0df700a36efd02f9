package ipc

import (
	"context"
	"sort"

	"github.com/axsched/ax/clients/go/axapi"
)

// The fake backend's pause and handler methods: a handler is known when a
// task or an executor names it, or it is paused.

func (f *fakeBackend) PauseHandler(ctx context.Context, name string, paused bool) (HandlerPause, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.knownHandler(name) {
		return HandlerPause{}, Errorf(ErrHandlerNotFound, "handler %q: no task, executor or pause", name)
	}
	if f.pausedHandlers == nil {
		f.pausedHandlers = map[string]bool{}
	}
	if paused {
		f.pausedHandlers[name] = true
	} else {
		delete(f.pausedHandlers, name)
	}
	return HandlerPause{Name: name, Paused: paused}, nil
}

func (f *fakeBackend) knownHandler(name string) bool {
	if f.pausedHandlers[name] {
		return true
	}
	for _, t := range f.tasks {
		if t.Handler == name {
			return true
		}
	}
	for _, e := range f.executors {
		for _, h := range e.Handlers {
			if h == name || h == "*" {
				return true
			}
		}
	}
	return false
}

func (f *fakeBackend) PauseTask(ctx context.Context, id string, paused bool) (Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tasks[id]
	if !ok {
		return Task{}, Errorf(ErrNotFound, "task %q", id)
	}
	if paused && t.State != axapi.StateWaiting && t.State != axapi.StateRunning {
		return Task{}, Errorf(ErrTaskFinished, "task %q is %s", id, t.State)
	}
	t.Paused = paused
	f.tasks[id] = t
	return t, nil
}

func (f *fakeBackend) Handlers(ctx context.Context) ([]HandlerInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	byName := map[string]*HandlerInfo{}
	get := func(name string) *HandlerInfo {
		h := byName[name]
		if h == nil {
			h = &HandlerInfo{Name: name, Paused: f.pausedHandlers[name], Tasks: map[State]int{}}
			byName[name] = h
		}
		return h
	}
	for _, t := range f.tasks {
		get(t.Handler).Tasks[State(t.State)]++
	}
	for name := range f.pausedHandlers {
		get(name)
	}
	out := make([]HandlerInfo, 0, len(byName))
	for _, h := range byName {
		out = append(out, *h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
