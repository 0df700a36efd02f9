package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Progress bar geometry and refresh.
const (
	barWidth        = 16
	progressRefresh = 200 * time.Millisecond
)

// progress redraws a one-line bar on a terminal until stopped. A nil
// *progress (no terminal, or --no-progress) does nothing.
type progress struct {
	w      io.Writer
	render func() (frac float64, text string)
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
	width  int
}

// startProgress draws the bar every progressRefresh from render, which
// returns the fraction done (0..1) and a short text. It returns nil when w
// is nil.
func startProgress(w io.Writer, title string, render func() (float64, string)) *progress {
	if w == nil {
		return nil
	}
	p := &progress{w: w, stop: make(chan struct{}), done: make(chan struct{})}
	p.render = func() (float64, string) {
		f, s := render()
		return f, title + " " + s
	}
	go func() {
		defer close(p.done)
		t := time.NewTicker(progressRefresh)
		defer t.Stop()
		p.draw()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.draw()
			}
		}
	}()
	return p
}

func (p *progress) draw() {
	frac, text := p.render()
	frac = min(max(frac, 0), 1)
	full := int(frac * barWidth)
	bar := strings.Repeat("█", full) + strings.Repeat("░", barWidth-full)
	line := fmt.Sprintf("\r%s %3.0f%% %s", bar, frac*100, text)
	// \x1b[K clears what a longer previous line left behind.
	fmt.Fprint(p.w, line+"\x1b[K")
}

// Stop draws the bar a last time, then clears the line.
func (p *progress) Stop() {
	if p == nil {
		return
	}
	p.once.Do(func() {
		close(p.stop)
		<-p.done
		fmt.Fprint(p.w, "\r\x1b[K")
	})
}
