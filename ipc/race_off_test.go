//go:build !race

package ipc

// raceDetector is true under -race (race_on_test.go).
const raceDetector = false
