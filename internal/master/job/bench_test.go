package job

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/task"
)

// BenchmarkStepGetReport is the task package's BenchmarkGetReport through
// the whole core: one ReportTask plus one GetTask Step with 200 workers
// each holding a task, ~ImageNet sized (2.5k tasks an epoch). ns/op is
// what the master's lock is held for per task, Ready collection included.
func BenchmarkStepGetReport(b *testing.B) {
	const workers = 200
	cfg := testConfig()
	cfg.NumWorkers = workers
	cfg.Tasks.Training = []task.Shard{{Name: "a", Records: 1_281_167}}
	cfg.Tasks.NumEpochs = 90
	cfg.Tasks.TaskTimeout = time.Hour
	cfg.Logger = slog.New(slog.DiscardHandler)
	var j *Job
	held := make([]task.Task, workers)
	now := time.Unix(0, 0)
	step := func(ev Event) Reply {
		r, err := j.Step(now, ev)
		if err != nil {
			b.Fatal(err)
		}
		j.Ready()
		return r
	}
	start := func() {
		var err error
		if j, err = New(cfg); err != nil {
			b.Fatal(err)
		}
		step(Start{})
		for w := range held {
			held[w] = step(GetTask{Worker: w}).Assignment.Task
		}
	}
	start()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w := i % workers
		now = now.Add(time.Millisecond)
		step(ReportTask{Worker: w, TaskID: held[w].ID, Result: task.Result{Records: 512, Steps: 8}})
		a := step(GetTask{Worker: w}).Assignment
		if a.Kind != task.KindTask {
			b.StopTimer()
			start()
			b.StartTimer()
			continue
		}
		held[w] = a.Task
	}
}

// BenchmarkStatePersist is what persisting the core costs before a
// failover-safe acknowledgement: State plus its JSON encoding, for the
// job of BenchmarkStepGetReport (200 workers, each holding a task) half
// way through its first epoch. Reported: the encoded size.
func BenchmarkStatePersist(b *testing.B) {
	const workers = 200
	cfg := testConfig()
	cfg.NumWorkers = workers
	cfg.Tasks.Training = []task.Shard{{Name: "a", Records: 1_281_167}}
	cfg.Tasks.NumEpochs = 90
	cfg.Tasks.TaskTimeout = time.Hour
	cfg.Logger = slog.New(slog.DiscardHandler)
	j, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Unix(0, 0)
	step := func(ev Event) Reply {
		r, err := j.Step(now, ev)
		if err != nil {
			b.Fatal(err)
		}
		j.Ready()
		return r
	}
	step(Start{})
	for w := range workers {
		step(Instance{cluster.Event{Role: cluster.Worker, ID: w, Phase: cluster.Running}})
	}
	for i := 0; i < 1250; i++ { // half an epoch of 2.5k tasks, done
		w := i % workers
		t := step(GetTask{Worker: w}).Assignment.Task
		step(ReportTask{Worker: w, TaskID: t.ID, Result: task.Result{Records: t.Records(), Steps: 8}})
	}
	for w := range workers {
		step(GetTask{Worker: w})
	}
	var size int
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		data, err := json.Marshal(j.State())
		if err != nil {
			b.Fatal(err)
		}
		size = len(data)
	}
	b.ReportMetric(float64(size), "bytes")
}
