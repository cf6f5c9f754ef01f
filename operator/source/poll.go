package source

import (
	"context"
	"time"
)

// pollLoop runs run at once, then after every interval and on every
// trigger, until ctx ends. A trigger during a run is kept (the channel has
// room for one), so a push that lands mid-sync is not lost.
func pollLoop(ctx context.Context, interval time.Duration, trigger <-chan struct{}, run func(context.Context)) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-trigger:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
		run(ctx)
		t.Reset(interval)
	}
}
