// Package sim replays a trace of training jobs through the autoscaler's
// own decision functions (package autoscale) with modelled job speeds:
// event-driven, so a day of trace takes seconds of CPU. It compares
// policies by mean job completion time (JCT), makespan and how long jobs
// wait with no worker.
package sim

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"elasticdl/internal/autoscale"
)

// Policy is how the simulated cluster sizes its jobs.
type Policy int

// The policies compared.
const (
	// FCFSGang starts each job with its trace size, all at once, in
	// arrival order (no backfilling: autoscale.Admit for the head).
	FCFSGang Policy = iota
	// MaxMinFair is today's autoscaler: autoscale.Decide.
	MaxMinFair
	// Remaining is autoscale.DecideRemaining with the sizes the master
	// knows and speed-ups fitted from noisy measurements.
	Remaining
	// OracleSRPT is autoscale.DecideRemaining with exact sizes, speed-up
	// fitted to the whole measured curve, and no fairness floor.
	OracleSRPT
)

func (p Policy) String() string {
	return [...]string{"FCFS gang", "max-min fair", "remaining", "oracle SRPT"}[p]
}

// Config is the simulated cluster and the policies' knobs.
type Config struct {
	// Nodes of SlotsPerNode workers each (a worker is one GPU in the
	// trace).
	Nodes, SlotsPerNode int
	// NodeMilliCPU and WorkerMilliCPU, when set, size nodes and workers
	// in CPUs instead (a control-plane experiment's cluster), and every
	// job in the cluster holds JobMilliCPU beside its workers (its master
	// and PS) from its arrival to its end; a gang job that waits to be
	// admitted holds only GangWaitMilliCPU of it (its master: --gang
	// launches nothing before), when set.
	NodeMilliCPU, WorkerMilliCPU, JobMilliCPU, GangWaitMilliCPU int64
	// GangRace admits FCFSGang's jobs as our gang masters do (see
	// admitRacing) instead of strictly in arrival order.
	GangRace bool
	// Period is the seconds between decisions when nothing happens;
	// arrivals and completions bring one at once.
	Period float64
	// ResizeCost is the seconds a job makes no progress after it is
	// started or resized; StartCost, when set, after it is started.
	ResizeCost, StartCost float64
	// GrowDelay, when set, resizes a running job as the control plane
	// does instead: it goes on training while the workers added start,
	// and they train GrowDelay seconds later; removed ones stop at once
	// (ResizeCost then only stalls a start without StartCost).
	GrowDelay float64
	// Fairness and the change penalty of the remaining policy
	// (autoscale.RemainingOptions).
	Fairness      float64
	ChangePenalty float64
	MarginalGain  float64
	Horizon       float64
	Explore       float64
	// Noise is the relative spread of the throughput a job measures.
	Noise float64
	// Seed makes the noise reproducible.
	Seed uint64
}

// DefaultConfig is Pollux's simulated cluster: 16 nodes of 4 GPUs.
func DefaultConfig() Config {
	o := autoscale.DefaultRemainingOptions()
	return Config{Nodes: 16, SlotsPerNode: 4, Period: 60, ResizeCost: 30, Fairness: o.Fairness,
		ChangePenalty: o.ResizeCost, MarginalGain: o.MarginalGain, Horizon: o.Horizon, Explore: o.Explore, Noise: 0.1, Seed: 1}
}

// Result is one policy's run of one workload.
type Result struct {
	Policy   Policy
	JCT      []float64 // by job, arrival to completion
	MeanJCT  float64
	Makespan float64 // first arrival to last completion
	// LongestExcessPending is the longest time any job waited with no
	// worker beyond the trace's own queueing (see excessPending).
	LongestExcessPending float64
	Resizes              int
	// ShareRatio is the median over time of the largest ÷ the smallest
	// CPU share (workers and the job's own CPUs) among the jobs training,
	// while at least two are: the control-plane experiment's fairness
	// metric (experiment.TrainingFairness); 0 when never two trained.
	ShareRatio float64
}

// state is a job in flight.
type state struct {
	index      int // in run.jobs
	job        Job
	arrived    bool
	admitted   bool // FCFSGang: its gang was admitted
	done       bool
	left       float64 // records
	workers    int
	stallUntil float64
	// joining of workers train from joinAt on (Config.GrowDelay).
	joining int
	joinAt  float64
	finish  float64
	samples map[int]*autoscale.Sample
	// excess is the current span of excess pending, longest the longest.
	excess, longest float64
}

// run is one simulation.
type run struct {
	cfg    Config
	policy Policy
	jobs   []*state
	oracle []autoscale.Speedup // by job: fitted to the whole curve
	rng    *rand.Rand
	now    float64
	res    Result
	shares []spanRatio // while ≥ 2 jobs train
}

// spanRatio is a span of time and the share ratio over it.
type spanRatio struct{ dt, ratio float64 }

// Run replays w under policy p.
func Run(w Workload, p Policy, cfg Config) (Result, error) {
	if len(w.Jobs) == 0 {
		return Result{}, fmt.Errorf("workload %s: no jobs", w.Name)
	}
	r := &run{cfg: cfg, policy: p, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(p))), res: Result{Policy: p}}
	for i, j := range w.Jobs {
		r.jobs = append(r.jobs, &state{index: i, job: j, left: j.Records, samples: map[int]*autoscale.Sample{}})
		var exact []autoscale.Sample
		for i, n := range j.Curve.Workers {
			exact = append(exact, autoscale.Sample{Workers: n, RecordsPerSecond: j.Curve.Rate[i], Count: 1})
		}
		m, _ := autoscale.FitSpeedup(exact, autoscale.Prior{})
		r.oracle = append(r.oracle, m)
	}
	next, tick := 0, cfg.Period
	for steps := 0; ; steps++ {
		if steps > 1e7 {
			return Result{}, fmt.Errorf("workload %s, %v: no end after %d steps", w.Name, p, steps)
		}
		for next < len(r.jobs) && r.jobs[next].job.Arrival <= r.now {
			r.jobs[next].arrived = true
			next++
		}
		if next == len(r.jobs) && r.allDone() {
			break
		}
		r.decide()
		t := r.nextEvent(next, tick)
		r.advance(t)
		for tick <= r.now {
			tick += cfg.Period
		}
	}
	return r.result(w), nil
}

func (r *run) allDone() bool {
	for _, s := range r.jobs {
		if !s.done {
			return false
		}
	}
	return true
}

// nextEvent is the time of the next arrival, decision tick, stall end or
// completion.
func (r *run) nextEvent(next int, tick float64) float64 {
	t := tick
	if next < len(r.jobs) {
		t = min(t, r.jobs[next].job.Arrival)
	}
	for _, s := range r.jobs {
		if !s.arrived || s.done || s.workers == 0 {
			continue
		}
		if s.stallUntil > r.now {
			t = min(t, s.stallUntil)
			continue
		}
		if s.joinAt > r.now {
			t = min(t, s.joinAt)
		}
		if v := s.job.Curve.Throughput(s.training(r.now)); v > 0 {
			t = min(t, r.now+s.left/v)
		}
	}
	return t
}

// advance moves time to t: running jobs progress, samples are measured,
// pending jobs' waits are counted.
func (r *run) advance(t float64) {
	dt := t - r.now
	r.countPending(dt)
	r.countShares(dt)
	for _, s := range r.jobs {
		if !s.arrived || s.done || s.workers == 0 {
			continue
		}
		busy := t - max(r.now, s.stallUntil)
		if busy <= 0 {
			continue
		}
		n := s.training(r.now)
		v := s.job.Curve.Throughput(n)
		s.left -= v * busy
		r.measure(s, n, v, busy)
		// Within a microsecond of the end counts as done (rounding).
		if s.left <= v*1e-6 {
			s.done, s.finish, s.workers, s.joining = true, t, 0, 0
		}
	}
	r.now = t
}

// training is how many of s's workers train at time now: all but those
// still joining (Config.GrowDelay).
func (s *state) training(now float64) int {
	if now < s.joinAt {
		return s.workers - s.joining
	}
	return s.workers
}

// measure adds what the job's master would measure running busy seconds
// at rate v on w workers: one noisy mean, worth one sample per 10 s.
func (r *run) measure(s *state, w int, v, busy float64) {
	got := v * (1 + r.cfg.Noise*(2*r.rng.Float64()-1))
	n := max(1, int(busy/10))
	sm := s.samples[w]
	if sm == nil {
		sm = &autoscale.Sample{Workers: w}
		s.samples[w] = sm
	}
	sm.RecordsPerSecond = (sm.RecordsPerSecond*float64(sm.Count) + got*float64(n)) / float64(sm.Count+n)
	sm.Count += n
}

// countPending adds dt to the excess pending of every job that waits with
// no worker while the cluster has room for its minimum beyond the
// minimums (one worker each) of the jobs that arrived before it: a
// policy that serves every job's floor first come, first served would
// have started it. Waiting while those minimums fill the cluster is the
// trace's own queueing and does not count.
func (r *run) countPending(dt float64) {
	slots := r.cfg.Nodes * r.cfg.SlotsPerNode
	ahead := 0
	for _, s := range r.jobs {
		if !s.arrived || s.done {
			continue
		}
		if s.workers == 0 && slots-ahead >= 1 {
			s.excess += dt
			s.longest = max(s.longest, s.excess)
		} else {
			s.excess = 0
		}
		ahead++
	}
}

// countShares records the share ratio among the jobs training over dt.
func (r *run) countShares(dt float64) {
	lo, hi, n := math.Inf(1), 0.0, 0
	for _, s := range r.jobs {
		if !s.arrived || s.done || s.workers == 0 {
			continue
		}
		v := float64(int64(s.workers)*r.workerRequest().MilliCPU + r.cfg.JobMilliCPU)
		lo, hi, n = min(lo, v), max(hi, v), n+1
	}
	if n >= 2 && dt > 0 {
		r.shares = append(r.shares, spanRatio{dt, hi / lo})
	}
}

// medianShare is the time-weighted median of the recorded ratios.
func medianShare(spans []spanRatio) float64 {
	if len(spans) == 0 {
		return 0
	}
	spans = slices.Clone(spans)
	slices.SortFunc(spans, func(a, b spanRatio) int { return cmp.Compare(a.ratio, b.ratio) })
	total := 0.0
	for _, x := range spans {
		total += x.dt
	}
	acc := 0.0
	for _, x := range spans {
		if acc += x.dt; acc >= total/2 {
			return x.ratio
		}
	}
	return spans[len(spans)-1].ratio
}

func (r *run) result(w Workload) Result {
	res := r.res
	res.ShareRatio = medianShare(r.shares)
	first, last := math.Inf(1), 0.0
	for _, s := range r.jobs {
		jct := s.finish - s.job.Arrival
		res.JCT = append(res.JCT, jct)
		res.MeanJCT += jct / float64(len(r.jobs))
		first, last = min(first, s.job.Arrival), max(last, s.finish)
		res.LongestExcessPending = max(res.LongestExcessPending, s.longest)
	}
	res.Makespan = last - first
	return res
}

// Summary is results averaged over workloads.
type Summary struct {
	MeanJCT, Makespan, LongestExcessPending, Resizes float64
	ShareRatio                                       float64 // mean of the workloads' medians
}

// add adds res's share of a mean over n workloads; the longest pending
// is the longest of all.
func (s *Summary) add(res Result, n int) {
	s.MeanJCT += res.MeanJCT / float64(n)
	s.Makespan += res.Makespan / float64(n)
	s.Resizes += float64(res.Resizes) / float64(n)
	s.ShareRatio += res.ShareRatio / float64(n)
	s.LongestExcessPending = max(s.LongestExcessPending, res.LongestExcessPending)
}
