package master

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/job"
	"elasticdl/proto/masterpb"
)

// metricValue finds a gathered metric by name and label values.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue(), true
			case dto.MetricType_GAUGE:
				return m.GetGauge().GetValue(), true
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func TestMetricsFollowTheJob(t *testing.T) {
	m, _, _ := newTestMaster(t, nil)
	reg := prometheus.NewRegistry()
	if err := m.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterMetrics(reg); err == nil {
		t.Error("registering twice succeeded")
	}
	ctx := context.Background()
	tk := getTask(t, m, 0)
	n := tk.Shard.End - tk.Shard.Start
	if _, err := m.ReportTaskResult(ctx, &masterpb.ReportTaskResultRequest{WorkerId: 0, TaskId: tk.Id, Records: n, Steps: 1, ModelVersion: 5}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"elasticdl_master_tasks_total", map[string]string{"outcome": "completed", "job": m.cfg.JobName}, 1},
		{"elasticdl_master_tasks_total", map[string]string{"outcome": "failed"}, 0},
		{"elasticdl_master_records_done_total", nil, float64(n)},
		{"elasticdl_master_model_version", nil, 5},
		{"elasticdl_master_instances_launched_total", map[string]string{"role": "worker"}, float64(summaryOf(m).Workers.Launched)},
		{"elasticdl_master_instances", map[string]string{"role": "worker", "state": "running"}, 1}, // worker 0 called
		{"elasticdl_master_get_task_seconds", nil, 1},
		{"elasticdl_master_job_finished", nil, 0},
	} {
		got, ok := metricValue(t, reg, c.name, c.labels)
		if !ok || got != c.want {
			t.Errorf("%s%v = %v (found %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
}

// With --metrics_port, PS shard i is told to serve on metrics_port+1+i, on
// the host it listens on.
func TestLaunchPSPassesMetricsAddr(t *testing.T) {
	_, fb, _ := newTestMaster(t, func(c *Config) { c.MetricsPort = 9100 })
	if args := fb.launches()[0].Args; !slices.Contains(args, "--metrics_addr=127.0.0.1:9101") {
		t.Errorf("PS args %v lack --metrics_addr=127.0.0.1:9101", args)
	}
	_, fb, _ = newTestMaster(t, nil)
	if args := strings.Join(fb.launches()[0].Args, " "); strings.Contains(args, "metrics") {
		t.Errorf("metrics flag passed without --metrics_port: %s", args)
	}
}

// TestElasticityMetrics: the target and bounds, the CPU the running pods
// request, goodput over the time between scrapes, and the time to train at
// a new size after the target changes.
func TestElasticityMetrics(t *testing.T) {
	m, _, clk := newTestMaster(t, func(c *Config) {
		c.MinWorkers = 1
		c.RequestedCPU = RequestedCPU{Master: 0.5, Worker: 1, PS: 0.25}
	})
	reg := prometheus.NewRegistry()
	if err := m.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	value := func(name string, labels map[string]string) float64 {
		t.Helper()
		v, ok := metricValue(t, reg, name, labels)
		if !ok {
			t.Fatalf("no metric %s%v", name, labels)
		}
		return v
	}
	if g := value("elasticdl_master_goodput_records_per_cpu_second", nil); g != 0 {
		t.Errorf("goodput %v before any training, want 0", g)
	}
	ctx := context.Background()
	tk := getTask(t, m, 0)
	m.step(ctx, job.SetTarget{Workers: 1, Source: "test"}) // worker 1 goes
	clk.t = clk.t.Add(12 * time.Second)
	n := tk.Shard.End - tk.Shard.Start
	if _, err := m.ReportTaskResult(ctx, &masterpb.ReportTaskResultRequest{WorkerId: 0, TaskId: tk.Id, Records: n, Steps: 1}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"elasticdl_master_target_workers", nil, 1},
		{"elasticdl_master_worker_bounds", map[string]string{"bound": "min"}, 1},
		{"elasticdl_master_worker_bounds", map[string]string{"bound": "max"}, 2},
		{"elasticdl_master_resize_seconds", map[string]string{"cause": "target"}, 1}, // one observation
	} {
		if got := value(c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	cores := value("elasticdl_master_requested_cpu_cores", nil)
	running, _ := metricValue(t, reg, "elasticdl_master_instances", map[string]string{"role": "ps", "state": "running"})
	if want := 0.5 + 1 + 0.25*running; cores != want {
		t.Errorf("requested cores %v, want %v (master, 1 worker, %v PS)", cores, want, running)
	}
	want := float64(n) / 12 / cores
	if g := value("elasticdl_master_goodput_records_per_cpu_second", nil); math.Abs(g-want) > 1e-9 {
		t.Errorf("goodput %v, want %v", g, want)
	}
	clk.t = clk.t.Add(time.Second) // within the window: the same value
	if g := value("elasticdl_master_goodput_records_per_cpu_second", nil); math.Abs(g-want) > 1e-9 {
		t.Errorf("goodput %v a second later, want %v still", g, want)
	}
	if s := summaryOf(m); len(s.Resizes) != 1 || s.Resizes[0].Cause != "target" || s.Resizes[0].Seconds != 12 {
		t.Errorf("summary resizes %+v, want one of 12 s", s.Resizes)
	}
}

// TestReshardMetrics: after a live re-shard, the shard count, the layout,
// the count of re-shards and how long it took.
func TestReshardMetrics(t *testing.T) {
	m, _, clk := newTestMaster(t, nil)
	reg := prometheus.NewRegistry()
	if err := m.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m.step(ctx, job.SetPSTarget{PS: 2, Source: "test"})
	m.step(ctx, job.AppliedFound{Gen: 1, Reshard: true, Shards: []job.ShardMinibatches{{}}})
	m.step(ctx, job.Instance{Event: cluster.Event{Role: cluster.PS, ID: 1, Phase: cluster.Running}})
	clk.t = clk.t.Add(2 * time.Second)
	m.step(ctx, job.ReshardDone{Layout: 1})
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"elasticdl_master_ps_shards", nil, 2},
		{"elasticdl_master_ps_layout", nil, 1},
		{"elasticdl_master_ps_reshards_total", nil, 1},
		{"elasticdl_master_ps_reshard_seconds", map[string]string{"kind": "total"}, 1}, // one observation
		{"elasticdl_master_ps_reshard_seconds", map[string]string{"kind": "paused"}, 1},
	} {
		if got, ok := metricValue(t, reg, c.name, c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if s := summaryOf(m); len(s.PS.Reshards) != 1 || s.PS.Reshards[0].Seconds != 2 {
		t.Errorf("summary re-shards %+v, want one of 2 s", s.PS.Reshards)
	}
}

// TestWorkerSlowMetrics: of three workers, the one taking 5× as long per
// task is marked slow, in the metrics with every worker's rate.
func TestWorkerSlowMetrics(t *testing.T) {
	m, _, clk := newTestMaster(t, func(c *Config) {
		c.NumWorkers, c.MinibatchSize, c.NumMinibatchesPerTask = 3, 10, 1
	})
	reg := prometheus.NewRegistry()
	if err := m.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	held := map[int32]*masterpb.Task{}
	report := func(w int32) {
		t.Helper()
		tk := held[w]
		n := tk.Shard.End - tk.Shard.Start
		if _, err := m.ReportTaskResult(ctx, &masterpb.ReportTaskResultRequest{WorkerId: w, TaskId: tk.Id, Records: n, Steps: 1}); err != nil {
			t.Fatal(err)
		}
		held[w] = getTask(t, m, w)
	}
	for w := range int32(3) {
		held[w] = getTask(t, m, w)
	}
	// Workers 0 and 1: a task of 10 records every 10 s; worker 2: every 50 s.
	for round := 1; round <= 15; round++ { // each worker's first task is not timed
		clk.t = clk.t.Add(10 * time.Second)
		report(0)
		report(1)
		if round%5 == 0 {
			report(2)
		}
	}
	for _, c := range []struct {
		name, worker string
		want         float64
	}{
		{"elasticdl_worker_slow", "2", 1},
		{"elasticdl_worker_slow", "0", 0},
		{"elasticdl_worker_records_per_second", "0", 1},
		{"elasticdl_worker_records_per_second", "2", 0.2},
	} {
		if got, ok := metricValue(t, reg, c.name, map[string]string{"worker": c.worker}); !ok || got != c.want {
			t.Errorf("%s{worker=%s} = %v (present %v), want %v", c.name, c.worker, got, ok, c.want)
		}
	}
	if s := summaryOf(m); len(s.SlowWorkers) != 1 || s.SlowWorkers[0].Worker != 2 || !s.SlowWorkers[0].Slow {
		t.Errorf("summary slow marks %+v, want worker 2 marked", s.SlowWorkers)
	}
}
