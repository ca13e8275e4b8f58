package ps

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestModelledPushSerializes: concurrent pushes hold the shard one at a
// time, so n of them take at least n × d; a cancelled one returns.
func TestModelledPushSerializes(t *testing.T) {
	m := &modelledPush{d: 20 * time.Millisecond}
	start := time.Now()
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if err := m.wait(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if took := time.Since(start); took < 3*m.d {
		t.Errorf("3 pushes took %s, want at least %s", took, 3*m.d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := (&modelledPush{d: time.Hour}).wait(ctx); err == nil {
		t.Error("a cancelled push waited out its hour")
	}
	if err := (&modelledPush{}).wait(ctx); err != nil {
		t.Errorf("no modelled push: %v", err)
	}
}
