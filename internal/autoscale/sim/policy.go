package sim

import (
	"cmp"

	"elasticdl/internal/autoscale"
)

const priority = 100

// workerRequest is what one simulated worker requests: one slot of a
// node, or Config.WorkerMilliCPU.
func (r *run) workerRequest() autoscale.Resources {
	return autoscale.Resources{MilliCPU: cmp.Or(r.cfg.WorkerMilliCPU, 1000), Memory: 1 << 30}
}

// overhead is what job s holds beside its workers.
func (r *run) overhead(s *state) int64 {
	if r.policy == FCFSGang && !s.admitted && r.cfg.GangWaitMilliCPU > 0 {
		return r.cfg.GangWaitMilliCPU
	}
	return r.cfg.JobMilliCPU
}

// overheads are the pods of the jobs in the cluster beside their workers
// (overhead), each bound to the node with the most room left by those
// before it, as the scheduler spreads them.
func (r *run) overheads(active []*state) []autoscale.Pod {
	if r.cfg.JobMilliCPU <= 0 {
		return nil
	}
	nodes := r.nodes()
	used := make([]int64, len(nodes))
	var out []autoscale.Pod
	for _, s := range active {
		best := 0
		for i := range nodes {
			if nodes[i].Allocatable.MilliCPU-used[i] > nodes[best].Allocatable.MilliCPU-used[best] {
				best = i
			}
		}
		used[best] += r.overhead(s)
		out = append(out, autoscale.Pod{Node: nodes[best].Name, Request: autoscale.Resources{MilliCPU: r.overhead(s)}, Priority: priority})
	}
	return out
}

// decide sets every job's workers by the policy, from a snapshot of the
// cluster as the autoscaler would see it.
func (r *run) decide() {
	var active []*state
	for _, s := range r.jobs {
		if s.arrived && !s.done {
			active = append(active, s)
		}
	}
	if len(active) == 0 {
		return
	}
	if r.policy == FCFSGang {
		r.admitGangs(active)
		return
	}
	snap := autoscale.Snapshot{Nodes: r.nodes(), Pods: r.overheads(active)}
	for _, s := range active {
		snap.Jobs = append(snap.Jobs, autoscale.Job{Key: s.job.Name, Min: 1, Max: s.job.Curve.Max(),
			Worker: r.workerRequest(), Priority: priority})
	}
	var ds []autoscale.Decision
	switch r.policy {
	case MaxMinFair:
		ds = autoscale.Decide(snap)
	case Remaining:
		ds = autoscale.DecideRemaining(snap, r.work(active, false),
			autoscale.RemainingOptions{Fairness: r.cfg.Fairness, ResizeCost: r.cfg.ChangePenalty, MarginalGain: r.cfg.MarginalGain, Horizon: r.cfg.Horizon,
				Explore: r.cfg.Explore})
	case OracleSRPT:
		ds = autoscale.DecideRemaining(snap, r.work(active, true),
			autoscale.RemainingOptions{ResizeCost: r.cfg.ChangePenalty, MarginalGain: r.cfg.MarginalGain, Horizon: r.cfg.Horizon})
	}
	for i, s := range active {
		r.resize(s, ds[i].Placed)
	}
}

// work is what DecideRemaining knows of each active job: its exact
// remaining records (the master holds every task), and its speed-up,
// fitted from its measurements or, for the oracle, to its whole curve.
func (r *run) work(active []*state, oracle bool) []autoscale.Work {
	out := make([]autoscale.Work, len(active))
	for i, s := range active {
		out[i] = autoscale.Work{Remaining: s.left, Current: s.workers}
		if oracle {
			out[i].Speedup, out[i].Known = r.oracle[s.index], true
			continue
		}
		var samples []autoscale.Sample
		for _, sm := range s.samples {
			samples = append(samples, *sm)
		}
		out[i].Speedup, out[i].Known = autoscale.FitSpeedup(samples, autoscale.DefaultPrior())
		out[i].Samples = samples
	}
	return out
}

// admitGangs starts waiting jobs in arrival order while the head's gang
// fits (autoscale.Admit): the running gangs' pods are placed first.
func (r *run) admitGangs(active []*state) {
	if r.cfg.GangRace {
		r.admitRacing(active)
		return
	}
	snap := autoscale.Snapshot{Nodes: r.nodes(), Pods: r.overheads(active)}
	for _, s := range active {
		snap.Pods = append(snap.Pods, r.workerPods(s.workers)...)
	}
	for _, s := range active {
		if s.admitted {
			continue
		}
		gang := r.gangPods(s)
		if !autoscale.Admit(snap, priority, gang) {
			return
		}
		snap.Pods = append(snap.Pods, gang...)
		s.admitted = true
		r.resize(s, s.job.Gang)
	}
}

// admitRacing is admission as our gang masters do it (Config.GangRace):
// each waiting master looks at the cluster on its own, so when room frees
// they all see the same room, and every one whose gang fits in it is
// admitted (the race WaitAdmitted names); the admitted jobs' pods then
// run as room frees, in admission order, and a job trains with those that
// run.
func (r *run) admitRacing(active []*state) {
	// What a master sees: every admitted gang's pods, running or waiting.
	seen := autoscale.Snapshot{Nodes: r.nodes(), Pods: r.overheads(active)}
	for _, s := range active {
		if s.admitted {
			seen.Pods = append(seen.Pods, r.workerPods(s.job.Gang)...)
		}
	}
	var now []*state
	for _, s := range active {
		if !s.admitted && autoscale.Admit(seen, priority, r.gangPods(s)) {
			now = append(now, s)
		}
	}
	for _, s := range now {
		s.admitted = true
	}
	running := autoscale.Snapshot{Nodes: r.nodes(), Pods: r.overheads(active)}
	for _, s := range active {
		running.Pods = append(running.Pods, r.workerPods(s.workers)...)
	}
	for _, s := range active {
		n := s.workers
		for s.admitted && n < s.job.Gang && autoscale.Admit(running, priority, r.workerPods(1)) {
			running.Pods = append(running.Pods, r.workerPods(1)...)
			n++
		}
		r.resize(s, n)
	}
}

// workerPods are n workers' pods, not placed.
func (r *run) workerPods(n int) []autoscale.Pod {
	out := make([]autoscale.Pod, n)
	for i := range out {
		out[i] = autoscale.Pod{Request: r.workerRequest(), Priority: priority}
	}
	return out
}

// gangPods are what s launches when admitted: its workers and its PS.
func (r *run) gangPods(s *state) []autoscale.Pod {
	gang := r.workerPods(s.job.Gang)
	if rest := r.cfg.JobMilliCPU - r.overhead(s); rest > 0 {
		gang = append(gang, autoscale.Pod{Request: autoscale.Resources{MilliCPU: rest}, Priority: priority})
	}
	return gang
}

// resize gives s n workers: a start stalls it for the start cost; a
// resize stalls it for the resize cost, or with Config.GrowDelay lets it
// train on while the added workers start.
func (r *run) resize(s *state, n int) {
	if n == s.workers {
		return
	}
	switch {
	case n == 0:
		s.joining = 0
	case s.workers == 0 || r.cfg.GrowDelay <= 0:
		s.stallUntil = r.now + r.cfg.ResizeCost
		if s.workers == 0 && r.cfg.StartCost > 0 {
			s.stallUntil = r.now + r.cfg.StartCost
		}
		s.joining = 0
	default:
		// Those training keep on (as many as stay); the rest join
		// GrowDelay after the last growth.
		training := s.training(r.now)
		if n > s.workers || s.joinAt <= r.now {
			s.joinAt = r.now + r.cfg.GrowDelay
		}
		s.joining = max(0, n-training)
	}
	if n > 0 {
		r.res.Resizes++
	}
	s.workers = n
}

func (r *run) nodes() []autoscale.Node {
	ns := make([]autoscale.Node, r.cfg.Nodes)
	alloc := autoscale.Resources{MilliCPU: 1000 * int64(r.cfg.SlotsPerNode), Memory: int64(r.cfg.SlotsPerNode) << 30}
	if r.cfg.NodeMilliCPU > 0 {
		alloc = autoscale.Resources{MilliCPU: r.cfg.NodeMilliCPU, Memory: 1 << 50}
	}
	for i := range ns {
		ns[i] = autoscale.Node{Name: nodeName(i), Schedulable: true, Allocatable: alloc}
	}
	return ns
}

func nodeName(i int) string { return "n" + string(rune('a'+i/26)) + string(rune('a'+i%26)) }
