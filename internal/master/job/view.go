package job

import (
	"cmp"
	"slices"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/task"
)

// View is what a dashboard shows of the job now: a copy, shared with
// nothing the core changes later, so that it can be read without the
// shell's lock once taken.
type View struct {
	Snapshot
	Phase Phase
	// Instances: the live workers, then PS, each by slot and ID.
	Instances []InstanceView
	// Coverage is the per-epoch ledger so far (Coverage).
	Coverage []task.EpochCoverage
	// Target and its bounds [MinWorkers, MaxWorkers].
	Target, MinWorkers, MaxWorkers int
	// NumPS, PSLayout: the PS the job has and their layout; PSTarget the
	// number asked for.
	NumPS, PSTarget int
	PSLayout        int64
	// Records (trained or corrupt), LossSum and Steps total the accepted
	// training reports: differences of two views give an interval's
	// records/s and exact mean loss.
	Records int64
	LossSum float64
	Steps   int64
}

// InstanceView is one live instance. Slot as in Occurrence; StartedAt is
// zero until it is seen running.
type InstanceView struct {
	Role      cluster.Role
	ID, Slot  int
	Running   bool
	StartedAt time.Time
}

// View returns the job's View now.
func (j *Job) View() View {
	v := View{Snapshot: j.Snapshot(), Phase: j.phase, Coverage: j.disp.Coverage(),
		Target: j.target, MinWorkers: j.minWorkers(), MaxWorkers: j.cfg.NumWorkers,
		NumPS: j.numPS, PSTarget: j.psTarget, PSLayout: j.psLayout,
		Records: j.progress.records, LossSum: j.progress.lossSum, Steps: j.progress.steps}
	v.Summary = cloneSummary(v.Summary)
	v.Instances = make([]InstanceView, 0, len(j.workers)+len(j.ps))
	for _, in := range j.workers {
		v.Instances = append(v.Instances, instanceView(cluster.Worker, in))
	}
	for _, in := range j.ps {
		v.Instances = append(v.Instances, instanceView(cluster.PS, in))
	}
	slices.SortFunc(v.Instances, func(a, b InstanceView) int {
		// Workers first: "worker" > "ps".
		return cmp.Or(-cmp.Compare(a.Role, b.Role), cmp.Compare(a.Slot, b.Slot), cmp.Compare(a.ID, b.ID))
	})
	return v
}

func instanceView(r cluster.Role, in *instance) InstanceView {
	return InstanceView{Role: r, ID: in.id, Slot: in.index, Running: in.running, StartedAt: in.startedAt}
}

// cloneSummary copies the slices of s the core changes in place or
// appends to (Failovers' FirstTaskAt is set later).
func cloneSummary(s Summary) Summary {
	s.Evaluations = slices.Clone(s.Evaluations)
	s.Failovers = slices.Clone(s.Failovers)
	s.Resizes = slices.Clone(s.Resizes)
	s.PS.Reshards = slices.Clone(s.PS.Reshards)
	s.PS.Restores = slices.Clone(s.PS.Restores)
	s.PS.AppliedUnknown = slices.Clone(s.PS.AppliedUnknown)
	return s
}
