package forward

import (
	"context"
	"sync"
)

// changeContexts turns the leader watch's channels (Leaders.Changed: one
// channel, closed at the next change, per leader as this node sees it)
// into contexts, one per channel, made on first use. A forward ends at the
// next leader change through its channel's context (context.AfterFunc,
// untilLeaderChanges) instead of a goroutine of its own that waits on the
// channel: the forwards to one leader share one such goroutine, which ends
// when the channel closes (BenchmarkProposeAPIForwarded).
type changeContexts struct {
	mu  sync.Mutex
	ch  <-chan struct{}
	ctx context.Context
}

// of returns the context that ends when ch closes.
func (c *changeContexts) of(ch <-chan struct{}) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch != ch || c.ctx == nil {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			<-ch
			cancel()
		}()
		c.ch, c.ctx = ch, ctx
	}
	return c.ctx
}

// untilLeaderChanges returns a context that ends with ctx or at the next
// leader change after changed was taken, and its cancel function.
func (c *changeContexts) untilLeaderChanges(ctx context.Context, changed <-chan struct{}) (context.Context, context.CancelFunc) {
	fctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.of(changed), cancel)
	return fctx, func() {
		stop()
		cancel()
	}
}
