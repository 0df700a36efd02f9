package harness

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ProcessCPU returns the CPU the process used over d, in cores
// (utime + stime from /proc/PID/stat).
func ProcessCPU(t testing.TB, p *Process, d time.Duration) float64 {
	t.Helper()
	p.mu.Lock()
	pid := p.cmd.Process.Pid
	p.mu.Unlock()
	read := func() float64 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Skipf("no /proc: %v", err)
		}
		// Fields after the command name (which may hold spaces), from
		// field 3: utime and stime are fields 14 and 15.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		u, _ := strconv.ParseFloat(f[11], 64)
		s, _ := strconv.ParseFloat(f[12], 64)
		return (u + s) / 100 // USER_HZ
	}
	a := read()
	start := time.Now()
	time.Sleep(d)
	return (read() - a) / time.Since(start).Seconds()
}

// ProcessRSS returns the process's resident set size (VmRSS), or "?".
func ProcessRSS(p *Process) string {
	p.mu.Lock()
	pid := p.cmd.Process.Pid
	p.mu.Unlock()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}
