// Package freeport picks TCP ports on 127.0.0.1 for tests and benchmarks that
// must name a port before the process that listens on it starts.
//
// A port that the kernel handed out for "127.0.0.1:0" and that was closed
// again lies in the ephemeral range (/proc/sys/net/ipv4/ip_local_port_range,
// 32768–60999 by default), the same range the kernel takes source ports of
// outgoing connections from: in the window between the pick and the bind,
// any connection on the machine may take it ("bind: address already in
// use"). freeport therefore picks below the ephemeral range, where the
// kernel never assigns ports by itself, from a random start that differs per
// process and a counter that never repeats a port within one process, and
// checks each by binding it once. Two processes' counters can still meet
// (go test runs packages side by side, the e2e tests beside them: a
// raftstore test once failed to bind a port another process had just
// picked), so a port is also claimed across processes: an exclusive flock
// on a file named after it in a shared directory (claimDir: empty files,
// one per port ever claimed), held until the process exits; a port whose
// file another process holds is skipped.
//
// It imports only the standard library.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// lowest is the lowest port handed out: above the ports well-known services
// tend to use.
const lowest = 10000

var (
	mu   sync.Mutex
	next int // next port to try; 0 before the first call
	top  int // first port of the ephemeral range (exclusive upper bound)
)

// ephemeralStart returns the first port of the kernel's ephemeral range, or
// 32768 when it cannot be read.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 32768
	}
	p, err := strconv.Atoi(f[0])
	if err != nil || p <= lowest+1000 {
		return 32768
	}
	return p
}

// Ports returns n distinct ports on 127.0.0.1 that were free a moment ago and
// that lie below the kernel's ephemeral range. It returns an error when it
// has tried every port in the range once.
func Ports(n int) ([]int, error) {
	mu.Lock()
	defer mu.Unlock()
	if next == 0 {
		top = ephemeralStart()
		next = lowest + rand.IntN(top-lowest)
	}
	var out []int
	for tries := 0; len(out) < n; tries++ {
		if tries >= top-lowest {
			return nil, fmt.Errorf("freeport: no free port in %d–%d", lowest, top-1)
		}
		p := next
		next++
		if next >= top {
			next = lowest
		}
		if !claim(p) {
			continue // another process's
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		ln.Close()
		out = append(out, p)
	}
	return out, nil
}

// Addrs returns n distinct "127.0.0.1:port" addresses picked as Ports picks
// them.
func Addrs(n int) ([]string, error) {
	ps, err := Ports(n)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	return out, nil
}
