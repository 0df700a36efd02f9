//go:build !race

package scheduler

// raceDetector is true under -race, where the big store tests run smaller.
const raceDetector = false
