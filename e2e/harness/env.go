package harness

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// EnvDuration returns the Go duration in the environment variable name,
// def when it is unset; it fails the test on a value that is not positive.
func EnvDuration(t testing.TB, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive Go duration", name, v)
	}
	return d
}

// EnvInt returns the integer in the environment variable name, def when
// it is unset; it fails the test on a value that is not positive.
func EnvInt(t testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
