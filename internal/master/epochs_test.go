package master

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"elasticdl/proto/masterpb"
)

type recordingNotifier struct {
	mu   sync.Mutex
	msgs []string
}

func (r *recordingNotifier) Notify(_ bool, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, reason+": "+message)
}

// Each epoch's end is announced once, in order, when its last task is
// reported (announceEpochsLocked computes the coverage only then).
func TestEpochEndsAnnouncedOnce(t *testing.T) {
	m, _, _ := newTestMaster(t, func(c *Config) { c.NumEpochs = 3 })
	rec := &recordingNotifier{}
	m.notify = rec
	ctx := context.Background()
	for i := 0; i < 6; i++ { // 2 tasks an epoch
		tk := getTask(t, m, 0)
		n := tk.Shard.End - tk.Shard.Start
		if _, err := m.ReportTaskResult(ctx, &masterpb.ReportTaskResultRequest{WorkerId: 0, TaskId: tk.Id, Records: n, Steps: 1}); err != nil {
			t.Fatal(err)
		}
		if want := (i + 1) / 2; len(rec.msgs) != want {
			t.Fatalf("after %d reports: %d announcements %q, want %d", i+1, len(rec.msgs), rec.msgs, want)
		}
	}
	for i, msg := range rec.msgs {
		want := fmt.Sprintf("EpochFinished: epoch %d/3: 1000/1000 records trained, 0 twice, 0 missed", i+1)
		if msg != want {
			t.Errorf("announcement %d: %q, want %q", i, msg, want)
		}
	}
}
