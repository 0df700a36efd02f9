package bench

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"slices"
	"time"
)

// HostSpeed is how fast this host runs the kinds of work a request to ax
// is made of: computing in cache, entering the kernel, and handing off
// between goroutines through it. The bench measures it beside the disk's sync rate
// so that runs on different hosts, or on the same virtual machine on
// different days, can be compared: on the project's 2-CPU machine every
// rate of the throughput workload halved from one day to the next while
// the disk's sync rate stayed (docs/perf/README.md), and a figure that
// moves with these is the host's, not ax's.
type HostSpeed struct {
	// HashMicros is the median time of a SHA-256 of one 4 KiB block
	// (µs): the CPU alone.
	HashMicros float64 `json:"sha256_4k_us"`
	// SyscallNanos is the median time of a trivial system call
	// (getppid, in batches of 1 000; ns): what the kernel's entry and
	// exit cost, with the CPU's side-channel mitigations (on the project's
	// machine, whose kernel clears CPU buffers and uses safe returns on
	// each exit, 490-590 ns). A request crosses the kernel tens of
	// times (socket reads and writes, futex wake-ups, the log's write and
	// fsync).
	SyscallNanos float64 `json:"syscall_ns"`
	// RoundTripMicros is the median round trip of one byte between two
	// goroutines of the bench over a pair of pipes (µs): a write, a
	// wake-up of the parked reader through Go's network poller, and the
	// same back — the hand-offs a request makes between a socket's
	// reader and the goroutines that serve it.
	RoundTripMicros float64 `json:"pipe_round_trip_us"`
}

// measureHostSpeed measures HostSpeed for about d: a quarter for the hash,
// a quarter for the system call, half for the round trips, and one
// sample of each at least, however short d is. It returns an error when
// ctx ends before every figure has a sample.
func measureHostSpeed(ctx context.Context, d time.Duration) (*HostSpeed, error) {
	block := make([]byte, 4096)
	for i := range block {
		block[i] = byte(i)
	}
	hashes := timeFor(ctx, d/4, func() {
		sum := sha256.Sum256(block)
		block[0] = sum[0]
	})
	const batch = 1000
	calls := timeFor(ctx, d/4, func() {
		for range batch {
			os.Getppid()
		}
	})
	trips, err := pipeRoundTrips(ctx, d/2)
	if err != nil {
		return nil, fmt.Errorf("host speed probe: %w", err)
	}
	if len(hashes) == 0 || len(calls) == 0 || len(trips) == 0 {
		return nil, fmt.Errorf("host speed probe: nothing measured")
	}
	return &HostSpeed{HashMicros: medianMicros(hashes), SyscallNanos: medianMicros(calls) * 1000 / batch,
		RoundTripMicros: medianMicros(trips)}, nil
}

// timeFor runs f again and again for about d (once at least, unless ctx
// is done) and returns each run's time.
func timeFor(ctx context.Context, d time.Duration, f func()) []time.Duration {
	var ts []time.Duration
	end := time.Now().Add(d)
	for (len(ts) == 0 || time.Now().Before(end)) && ctx.Err() == nil {
		t := time.Now()
		f()
		ts = append(ts, time.Since(t))
	}
	return ts
}

// pipeRoundTrips sends one byte back and forth between this goroutine and
// an echo goroutine over two pipes for about d (once at least, unless ctx
// is done) and returns each round trip's time.
func pipeRoundTrips(ctx context.Context, d time.Duration) ([]time.Duration, error) {
	ar, aw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	br, bw, err := os.Pipe()
	if err != nil {
		ar.Close()
		aw.Close()
		return nil, err
	}
	defer br.Close()
	defer ar.Close()
	echoed := make(chan struct{})
	go func() {
		defer close(echoed)
		defer bw.Close()
		b := make([]byte, 1)
		for {
			if _, err := ar.Read(b); err != nil {
				return
			}
			if _, err := bw.Write(b); err != nil {
				return
			}
		}
	}()
	var trips []time.Duration
	b := []byte{1}
	end := time.Now().Add(d)
	for (len(trips) == 0 || time.Now().Before(end)) && ctx.Err() == nil {
		t := time.Now()
		if _, err = aw.Write(b); err == nil {
			_, err = br.Read(b)
		}
		if err != nil {
			break
		}
		trips = append(trips, time.Since(t))
	}
	aw.Close() // the echo goroutine reads EOF and ends
	<-echoed
	return trips, err
}

// medianMicros returns the median of ds in microseconds (0 when empty);
// it sorts ds.
func medianMicros(ds []time.Duration) float64 {
	slices.Sort(ds)
	return float64(Percentile(ds, 50)) / float64(time.Microsecond)
}
