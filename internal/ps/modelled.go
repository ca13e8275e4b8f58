package ps

import (
	"context"
	"sync"
	"time"
)

// modelledPush is modelled PS work (experiments, Config.ModelledPush):
// every push holds the shard for d, one at a time. With w workers that
// each compute for t between pushes, a job then trains at
// min(w/(t+d), 1/d) minibatches a second: linear up to a knee, flat
// beyond, the shape of a PS-bound job's speed-up (and one the
// autoscaler's simulator replays exactly).
type modelledPush struct {
	d  time.Duration
	mu sync.Mutex
}

// wait spends d holding the shard, or returns at once when d is 0.
func (m *modelledPush) wait(ctx context.Context) error {
	if m.d <= 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t := time.NewTimer(m.d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
