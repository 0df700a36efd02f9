package bench

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axsched/ax/internal/syncbuf"
)

func TestProgressBar(t *testing.T) {
	var buf syncbuf.Buffer
	frac := 0.0
	var mu sync.Mutex
	p := startProgress(&buf, "delayed", func() (float64, string) {
		mu.Lock()
		defer mu.Unlock()
		return frac, "called back 3/6"
	})
	mu.Lock()
	frac = 0.5
	mu.Unlock()
	time.Sleep(2 * progressRefresh)
	p.Stop()
	p.Stop() // idempotent
	out := buf.String()
	if !strings.Contains(out, "\r"+strings.Repeat("█", barWidth/2)+strings.Repeat("░", barWidth/2)+"  50% delayed called back 3/6\x1b[K") {
		t.Errorf("no half bar in %q", out)
	}
	if !strings.HasSuffix(out, "\r\x1b[K") {
		t.Errorf("the line is not cleared at the end: %q", out)
	}
	var none *progress
	none.Stop() // a nil bar (no terminal) does nothing
	if startProgress(nil, "x", func() (float64, string) { return 0, "" }) != nil {
		t.Error("a bar without a writer")
	}
}

func TestParseLimits(t *testing.T) {
	got, err := ParseLimits("32, 128,adaptive")
	if err != nil || strings.Join(got, "|") != "32|128|adaptive" {
		t.Errorf("ParseLimits = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "x", "32,-1", "100000"} {
		if _, err := ParseLimits(bad); err == nil {
			t.Errorf("ParseLimits(%q) accepted", bad)
		}
	}
}

func TestRecorder(t *testing.T) {
	r := newRecorder("run1", 3)
	r.due[1].Store(time.Unix(100, 0).UnixMilli())
	r.record("run1-1", 1, time.Unix(99, 0))   // early
	r.record("run1-1", 2, time.Unix(101, 0))  // duplicate
	r.record("run1-2", 1, time.Unix(100, 0))  // no due known
	r.record("other-1", 1, time.Unix(100, 0)) // not ours
	r.record("run1-7", 1, time.Unix(100, 0))  // out of range
	if r.recv.Load() != 2 || r.dups.Load() != 1 || r.early.Load() != 1 || r.other.Load() != 2 || r.maxAtt.Load() != 2 {
		t.Errorf("recv %d dups %d early %d other %d maxAtt %d", r.recv.Load(), r.dups.Load(), r.early.Load(), r.other.Load(), r.maxAtt.Load())
	}
	if r.first[1].Load() != time.Unix(99, 0).UnixNano() {
		t.Error("the first callback's time was not kept")
	}
}
