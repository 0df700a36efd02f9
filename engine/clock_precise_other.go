//go:build !(linux && (amd64 || arm64))

package engine

import "time"

// newWaitTimer returns the timer that [TimerSet.Run] sleeps on when its
// clock is [RealClock]: on this system a time.Timer (on Linux, amd64 and
// arm64, a timerfd; see there).
func newWaitTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }
