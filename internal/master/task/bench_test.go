package task

import (
	"testing"
	"time"
)

// BenchmarkGetReport measures one successful Report plus one Get with 200
// workers each holding a task (ns/op is the master's cost per task,
// including the amortised creation of each epoch's tasks).
func BenchmarkGetReport(b *testing.B) {
	const workers = 200
	benchmarks := []struct {
		name    string
		records int64
		epochs  int
	}{
		// ~ImageNet: 1.28M records, 512 per task, 2.5k tasks per epoch.
		{"2.5k_tasks_per_epoch", 1_281_167, 90},
		// A huge epoch: 2M tasks created at once.
		{"2M_tasks_per_epoch", 1 << 30, 2},
	}
	for _, bm := range benchmarks {
		b.Run(bm.name, func(b *testing.B) {
			cfg := Config{
				Training:       []Shard{{"a", bm.records}},
				RecordsPerTask: 512,
				NumEpochs:      bm.epochs,
				MaxAttempts:    3,
				TaskTimeout:    time.Hour,
				Shuffle:        true,
			}
			var d *Dispatcher
			held := make([]Task, workers)
			now := t0
			start := func() {
				d = mustNew(b, cfg)
				for w := range held {
					held[w] = mustGet(b, d, w, now)
				}
			}
			start()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				w := i % workers
				now = now.Add(time.Millisecond)
				if err := d.Report(w, held[w].ID, Result{Records: 512, Steps: 8}, now); err != nil {
					b.Fatal(err)
				}
				a := d.Get(w, now)
				if a.Kind != KindTask { // the job ran out of tasks: start another
					b.StopTimer()
					start()
					b.StartTimer()
					continue
				}
				held[w] = a.Task
			}
		})
	}
}
