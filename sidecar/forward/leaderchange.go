package forward

import "context"

// untilLeaderChanges returns a context that ends with ctx or at the next
// leader change after changed was taken, and its cancel function.
func untilLeaderChanges(ctx context.Context, changed <-chan struct{}) (context.Context, context.CancelFunc) {
	fctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-changed:
			cancel()
		case <-fctx.Done():
		}
	}()
	return fctx, cancel
}
