package engine

import "errors"

// Sentinel errors of the engine. Errors returned by this package wrap one of
// them (with %w and lower-case context), so callers branch with errors.Is.
var (
	// ErrInvalidOptions is returned (wrapped) by TimersOptions.Validate
	// and ReadyOptions.Validate when a field is out of range; the message
	// names the field and the bound.
	ErrInvalidOptions = errors.New("engine: invalid options")
	// ErrInvalidBackoff is returned (wrapped) by Backoff.Validate when a
	// field is out of range; the message names the field and the bound.
	ErrInvalidBackoff = errors.New("engine: invalid backoff")
	// ErrBacklogFull is returned (wrapped, with the depth) by
	// ReadyQueue.Push when the queue holds ReadyOptions.Capacity tasks;
	// the API turns it into 429 with Retry-After.
	ErrBacklogFull = errors.New("engine: backlog full")
	// ErrAlreadyQueued is returned (wrapped) by ReadyQueue.Push and
	// Requeue when the key is already in the queue.
	ErrAlreadyQueued = errors.New("engine: already queued")
	// ErrInvalidPriority is returned (wrapped) by ReadyQueue.Push and
	// Requeue when the priority is outside 0..4.
	ErrInvalidPriority = errors.New("engine: invalid priority")
)
