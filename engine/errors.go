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
)
