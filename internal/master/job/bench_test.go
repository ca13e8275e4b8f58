package job

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/task"
)

// benchJob drives the core of an ImageNet-sized job (2.5k tasks an
// epoch, 90 epochs) of benchWorkers workers.
type benchJob struct {
	b   *testing.B
	j   *Job
	now time.Time
}

const benchWorkers = 200

func newBenchJob(b *testing.B, workers int) *benchJob {
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
	bj := &benchJob{b: b, j: j, now: time.Unix(0, 0)}
	bj.step(Start{})
	return bj
}

// step applies ev (a refused request fails the benchmark) and collects
// the Ready.
func (bj *benchJob) step(ev Event) Reply {
	r, err := bj.j.Step(bj.now, ev)
	if err != nil {
		bj.b.Fatal(err)
	}
	bj.j.Ready()
	return r
}

// BenchmarkStepGetReport is the task package's BenchmarkGetReport through
// the whole core: one ReportTask plus one GetTask Step with 200 workers
// each holding a task, ~ImageNet sized (2.5k tasks an epoch). ns/op is
// what the master's lock is held for per task, Ready collection included.
func BenchmarkStepGetReport(b *testing.B) {
	var bj *benchJob
	held := make([]task.Task, benchWorkers)
	start := func() {
		bj = newBenchJob(b, benchWorkers)
		for w := range held {
			held[w] = bj.step(GetTask{Worker: w}).Assignment.Task
		}
	}
	start()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w := i % benchWorkers
		bj.now = bj.now.Add(time.Millisecond)
		bj.step(ReportTask{Worker: w, TaskID: held[w].ID, Result: task.Result{Records: 512, Steps: 8}})
		a := bj.step(GetTask{Worker: w}).Assignment
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
// way through its first epoch, its 10th and its 45th (of 90): a write
// must not grow with the tasks done so far. Reported: the encoded size.
func BenchmarkStatePersist(b *testing.B) {
	for _, done := range []struct {
		name  string
		tasks int
	}{{"epoch=0.5", 1250}, {"epoch=10", 9*2503 + 1250}, {"epoch=45", 44*2503 + 1250}} {
		b.Run(done.name, func(b *testing.B) {
			bj := newBenchJob(b, benchWorkers)
			for w := range benchWorkers {
				bj.step(Instance{cluster.Event{Role: cluster.Worker, ID: w, Phase: cluster.Running}})
			}
			for i := 0; i < done.tasks; i++ {
				w := i % benchWorkers
				t := bj.step(GetTask{Worker: w}).Assignment.Task
				bj.step(ReportTask{Worker: w, TaskID: t.ID, Result: task.Result{Records: t.Records(), Steps: 8}})
			}
			for w := range benchWorkers {
				bj.step(GetTask{Worker: w})
			}
			var size int
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				data, err := json.Marshal(bj.j.State())
				if err != nil {
					b.Fatal(err)
				}
				size = len(data)
			}
			b.ReportMetric(float64(size), "bytes")
		})
	}
}

// BenchmarkView is what a dashboard's view of the core costs under the
// shell's lock, once a tick: a job of 1,000 workers (running, each
// holding a task) that has done 45,000 training tasks (18 epochs of
// ~2.5k), with a task reported (untimed) before each view, so that the
// current epoch's coverage is measured again each time.
func BenchmarkView(b *testing.B) {
	const workers, done = 1000, 45_000
	bj := newBenchJob(b, workers)
	for w := range workers {
		bj.step(Instance{cluster.Event{Role: cluster.Worker, ID: w, Phase: cluster.Running}})
	}
	for i := 0; i < done; i++ {
		w := i % workers
		t := bj.step(GetTask{Worker: w}).Assignment.Task
		bj.step(ReportTask{Worker: w, TaskID: t.ID, Result: task.Result{Records: t.Records(), Steps: 8, LossSum: 4}})
	}
	held := make([]task.Task, workers)
	for w := range workers {
		held[w] = bj.step(GetTask{Worker: w}).Assignment.Task
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		w := i % workers
		bj.step(ReportTask{Worker: w, TaskID: held[w].ID, Result: task.Result{Records: held[w].Records(), Steps: 8, LossSum: 4}})
		held[w] = bj.step(GetTask{Worker: w}).Assignment.Task
		b.StartTimer()
		if v := bj.j.View(); len(v.Instances) != workers+testConfig().NumPS {
			b.Fatalf("%d instances", len(v.Instances))
		}
	}
}
