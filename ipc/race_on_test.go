//go:build race

package ipc

// raceDetector is true under -race, whose instrumentation allocates where
// a plain build does not (TestRoutes_MatchInPlace counts allocations).
const raceDetector = true
