// Package autoscale decides how many workers each elastic training job of
// a cluster should run: a pure function from a snapshot of the cluster
// (nodes, every pod's requests, the jobs and their bounds) to a target per
// job. Training fills the capacity that other pods leave, shared max-min
// fairly between jobs, and gives it back before the scheduler has to
// preempt: pods waiting to be scheduled that are not training workers
// (an online service growing) are placed first. DecideRemaining sizes the
// jobs by their remaining work and speed-up (FitSpeedup) instead, through
// the same decision; package sim compares the two on a trace.
//
// The decision simulates placement node by node (first fit, among the
// nodes a pod's node selector allows), so that a worker is only counted
// where one fits whole; it does not move pods, and the scheduler remains
// free to place them as it likes.
package autoscale

import (
	"cmp"
	"fmt"
	"slices"
)

// Resources are requests or capacities: CPU in millicores, memory in bytes.
type Resources struct {
	MilliCPU, Memory int64
}

// Add is r plus o.
func (r Resources) Add(o Resources) Resources {
	return Resources{r.MilliCPU + o.MilliCPU, r.Memory + o.Memory}
}

func (r Resources) sub(o Resources) Resources {
	return Resources{r.MilliCPU - o.MilliCPU, r.Memory - o.Memory}
}

// fits reports whether o fits into r.
func (r Resources) fits(o Resources) bool { return o.MilliCPU <= r.MilliCPU && o.Memory <= r.Memory }

// Node is a node pods may be scheduled to.
type Node struct {
	Name        string
	Allocatable Resources
	// Schedulable: Ready and not cordoned; other nodes are left out (the
	// pods bound to them still count where they are).
	Schedulable bool
	// Labels are what node selectors match.
	Labels map[string]string
}

// Selector is a node selector: the labels a node must have (nil: any node).
type Selector map[string]string

// matches reports whether n has every label of s.
func (s Selector) matches(n Node) bool {
	for k, v := range s {
		if got, ok := n.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Pod is any pod of the cluster that holds or wants resources (not
// finished ones).
type Pod struct {
	// Node is where it is bound; "" while it waits to be scheduled.
	Node    string
	Request Resources
	// Job is the key of the elastic job whose worker the pod is; "" for
	// any other pod (services, masters, parameter servers, other work).
	Job string
	// Priority is the pod's scheduling priority.
	Priority int32
	// NodeSelector limits where a waiting pod may go.
	NodeSelector Selector
}

// Job is an elastic training job the autoscaler sizes.
type Job struct {
	// Key names the job (namespace/name).
	Key string
	// Min and Max bound its workers (--min_workers, --num_workers).
	Min, Max int
	// Worker is what one worker pod requests.
	Worker Resources
	// Weight scales the job's fair share (e.g. by priority class); 0
	// means 1.
	Weight float64
	// Priority is its worker pods' scheduling priority.
	Priority int32
	// NodeSelector is its workers' node selector: only the capacity of
	// the nodes it matches counts for the job.
	NodeSelector Selector
}

// Snapshot is what the autoscaler sees of the cluster.
type Snapshot struct {
	Nodes []Node
	Pods  []Pod
	Jobs  []Job
}

// Decision is a job's target and how it came about.
type Decision struct {
	Key    string
	Target int
	// Placed is how many of the target fit in the capacity left; fewer
	// than Target when even the job's minimum does not fit.
	Placed int
	// Reason says what stopped the target where it is (the Reason*
	// constants; services-first carries a count).
	Reason string
}

// Why a job's target is not higher. A job's target stops growing when it
// reaches its maximum, or when its next worker fits nowhere it may go; in
// the latter case the reason says what took the room it would have had.
const (
	// ReasonMax: the target is the job's maximum.
	ReasonMax = "max"
	// ReasonMinUnfit: even the job's minimum does not fit (Placed <
	// Target); the job runs with fewer, pending the rest.
	ReasonMinUnfit = "min-unfit"
	// ReasonServicesFirst: the next worker would fit but for the room
	// given to pods waiting to be scheduled that are served before
	// training (a service growing); the reason reads
	// "services-first (N waiting)", N the pods placed first.
	ReasonServicesFirst = "services-first"
	// ReasonShare: the next worker would fit but for the workers given to
	// other jobs beyond their minimums, each when its share was smaller
	// (max-min fairness).
	ReasonShare = "share"
	// ReasonRoom: the next worker fits nowhere, even without the pods
	// waiting and the other jobs' shares: the cluster is full of bound
	// pods and minimums, or too fragmented for a whole worker.
	ReasonRoom = "room"
)

// Decide returns a target for every job of s, in s.Jobs' order:
//
//  1. capacity is each schedulable node's allocatable less the requests of
//     the pods bound to it that are not the jobs' workers;
//  2. pods waiting to be scheduled that are not the jobs' workers, of a
//     higher priority than some job's workers (which the scheduler would
//     preempt for them), are placed first, largest first: training makes
//     room for them;
//  3. every job gets its minimum (it runs with no fewer);
//  4. the rest goes one worker at a time to the job with the smallest
//     weighted dominant share (its workers' largest fraction of a
//     resource of the cluster), until no job below its maximum has a
//     worker that fits.
//
// Each decision's Reason says which of these stopped the job's target.
func Decide(s Snapshot) []Decision {
	d := newDecider(s)
	d.minimums()
	d.fairShare()
	return d.out
}

// decider is one Decide: the room left and the decisions so far.
type decider struct {
	jobs []Job
	r    *room
	out  []Decision
	// fair is where each job's workers beyond its minimum went (node index
	// to what they hold), and fairAll all jobs' together: what a job that
	// stopped would have had but for the others' shares.
	fair    []map[int]Resources
	fairAll []Resources
}

func newDecider(s Snapshot) *decider {
	r := newRoom(s.Nodes, s.Jobs)
	lowest := int32(0)
	for i, j := range s.Jobs {
		if i == 0 || j.Priority < lowest {
			lowest = j.Priority
		}
	}
	managed := make(map[string]bool, len(s.Jobs))
	for _, j := range s.Jobs {
		managed[j.Key] = true
	}
	// The jobs' own workers are what is decided: they hold nothing here.
	r.hold(s.Pods, managed, func(priority int32) bool { return priority > lowest })
	return &decider{jobs: s.Jobs, r: r, out: make([]Decision, len(s.Jobs)),
		fair: make([]map[int]Resources, len(s.Jobs)), fairAll: make([]Resources, len(r.order))}
}

// minimums gives every job its minimum, placed or not.
func (d *decider) minimums() {
	for i, j := range d.jobs {
		d.out[i] = Decision{Key: j.Key}
		lo := max(1, min(j.Min, j.Max))
		for range lo {
			if d.r.place(j.Worker, j.NodeSelector) >= 0 {
				d.out[i].Placed++
			}
		}
		d.out[i].Target = lo
		switch {
		case d.out[i].Placed < lo:
			d.out[i].Reason = ReasonMinUnfit
		case lo >= j.Max:
			d.out[i].Reason = ReasonMax
		}
	}
}

// fairShare gives the rest one worker at a time to the job of smallest
// share, until every job is at its maximum or has a reason to stop.
func (d *decider) fairShare() {
	// Each job's share, kept up to date: only the one that grew changes.
	sh := make([]float64, len(d.jobs))
	for i := range d.jobs {
		sh[i] = d.share(i)
	}
	for {
		best := -1
		for i := range d.jobs {
			if d.out[i].Reason != "" {
				continue
			}
			if best < 0 || sh[i] < sh[best] {
				best = i
			}
		}
		if best < 0 {
			return
		}
		j := d.jobs[best]
		n := d.r.place(j.Worker, j.NodeSelector)
		if n < 0 {
			d.out[best].Reason = d.stopped(best)
			continue
		}
		if d.fair[best] == nil {
			d.fair[best] = map[int]Resources{}
		}
		d.fair[best][n] = d.fair[best][n].Add(j.Worker)
		d.fairAll[n] = d.fairAll[n].Add(j.Worker)
		d.out[best].Target++
		d.out[best].Placed++
		sh[best] = d.share(best)
		if d.out[best].Target >= j.Max {
			d.out[best].Reason = ReasonMax
		}
	}
}

// share is job i's weighted dominant share at its target so far.
func (d *decider) share(i int) float64 {
	j, total := d.jobs[i], d.r.total
	w := j.Weight
	if w <= 0 {
		w = 1
	}
	var sh float64
	if total.MilliCPU > 0 {
		sh = max(sh, float64(int64(d.out[i].Target)*j.Worker.MilliCPU)/float64(total.MilliCPU))
	}
	if total.Memory > 0 {
		sh = max(sh, float64(int64(d.out[i].Target)*j.Worker.Memory)/float64(total.Memory))
	}
	return sh / w
}

// stopped is why job i's next worker fits nowhere: a node it may use would
// have room for it but for the pods waiting placed first, or else but for
// the other jobs' workers beyond their minimums; or neither.
func (d *decider) stopped(i int) string {
	j := d.jobs[i]
	r := d.r
	fits := func(back func(n int) Resources) bool {
		for n, node := range r.order {
			if j.NodeSelector.matches(node) && r.free[n].Add(back(n)).fits(j.Worker) {
				return true
			}
		}
		return false
	}
	if r.waitingPlaced > 0 && fits(func(n int) Resources { return r.waiting[n] }) {
		return fmt.Sprintf("%s (%d waiting)", ReasonServicesFirst, r.waitingPlaced)
	}
	if fits(func(n int) Resources { return d.fairAll[n].sub(d.fair[i][n]) }) {
		return ReasonShare
	}
	return ReasonRoom
}

// Admit reports whether every pod of pods fits at once in what the
// cluster of s leaves free: all-or-nothing admission of a gang (a job that
// starts only with all its pods). Every pod of s.Pods bound to a node
// holds its room; pods waiting to be scheduled at priority or above are
// placed first, as the scheduler serves them before pods created later
// at the same priority (they include the pods of a gang admitted a moment
// ago, not bound yet); then pods are placed largest first, each on the
// first node with room that its selector allows. s.Jobs is not used.
func Admit(s Snapshot, priority int32, pods []Pod) bool {
	r := newRoom(s.Nodes, nil)
	r.hold(s.Pods, nil, func(p int32) bool { return p >= priority })
	pods = slices.Clone(pods)
	largestFirst(pods)
	for _, p := range pods {
		if r.place(p.Request, p.NodeSelector) < 0 {
			return false
		}
	}
	return true
}

// room is the free capacity of a cluster's schedulable nodes, in the order
// first fit tries them.
type room struct {
	order []Node
	free  []Resources // by order's index
	at    map[string]int
	total Resources
	// waiting is what the pods waiting to be scheduled that hold placed
	// on each node (by order's index), and waitingPlaced how many.
	waiting       []Resources
	waitingPlaced int
}

// newRoom is the nodes' allocatable, nothing held. First fit tries the
// nodes fewest of jobs may use first, so that a job that may go anywhere
// leaves a pool to the jobs limited to it.
func newRoom(nodes []Node, jobs []Job) *room {
	r := &room{}
	for _, n := range nodes {
		if n.Schedulable {
			r.order = append(r.order, n)
			r.total = r.total.Add(n.Allocatable)
		}
	}
	// Counted by index, not by name: this runs nodes × jobs times.
	type claimed struct {
		n      Node
		claims int
	}
	cs := make([]claimed, len(r.order))
	for i, n := range r.order {
		cs[i].n = n
		for _, j := range jobs {
			if j.NodeSelector.matches(n) {
				cs[i].claims++
			}
		}
	}
	slices.SortFunc(cs, func(a, b claimed) int {
		return cmp.Or(cmp.Compare(a.claims, b.claims), cmp.Compare(a.n.Name, b.n.Name))
	})
	for i, c := range cs {
		r.order[i] = c.n
	}
	r.free = make([]Resources, len(r.order))
	r.waiting = make([]Resources, len(r.order))
	r.at = make(map[string]int, len(r.order))
	for i, n := range r.order {
		r.free[i], r.at[n.Name] = n.Allocatable, i
	}
	return r
}

// hold takes what pods hold, but those of the jobs in skip: a bound pod
// its request on its node; waiting pods whose priority the scheduler
// serves first (servedFirst) are placed, largest first; other waiting pods
// hold nothing.
func (r *room) hold(pods []Pod, skip map[string]bool, servedFirst func(priority int32) bool) {
	var waiting []Pod
	for _, p := range pods {
		if skip[p.Job] {
			continue
		}
		if p.Node == "" {
			if servedFirst(p.Priority) {
				waiting = append(waiting, p)
			}
			continue
		}
		if i, ok := r.at[p.Node]; ok {
			r.free[i] = r.free[i].sub(p.Request)
		}
	}
	largestFirst(waiting)
	for _, p := range waiting {
		if n := r.place(p.Request, p.NodeSelector); n >= 0 {
			r.waiting[n] = r.waiting[n].Add(p.Request)
			r.waitingPlaced++
		}
	}
}

// largestFirst sorts pods by request, largest first: a big pod is the
// hardest to fit later.
func largestFirst(pods []Pod) {
	slices.SortStableFunc(pods, func(a, b Pod) int {
		return cmp.Or(cmp.Compare(b.Request.MilliCPU, a.Request.MilliCPU), cmp.Compare(b.Request.Memory, a.Request.Memory))
	})
}

// place takes req from the first node with room that sel allows, and
// returns its index in order; -1: none has room.
func (r *room) place(req Resources, sel Selector) int {
	for i := range r.order {
		if r.free[i].fits(req) && sel.matches(r.order[i]) {
			r.free[i] = r.free[i].sub(req)
			return i
		}
	}
	return -1
}
