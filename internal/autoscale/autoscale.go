// Package autoscale decides how many workers each elastic training job of
// a cluster should run: a pure function from a snapshot of the cluster
// (nodes, every pod's requests, the jobs and their bounds) to a target per
// job. Training fills the capacity that other pods leave, shared max-min
// fairly between jobs, and gives it back before the scheduler has to
// preempt: pods waiting to be scheduled that are not training workers
// (an online service growing) are placed first.
//
// The decision simulates placement node by node (first fit, among the
// nodes a pod's node selector allows), so that a worker is only counted
// where one fits whole; it does not move pods, and the scheduler remains
// free to place them as it likes.
package autoscale

import (
	"cmp"
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
}

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
func Decide(s Snapshot) []Decision {
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
	out := make([]Decision, len(s.Jobs))
	for i, j := range s.Jobs {
		out[i] = Decision{Key: j.Key}
		lo := max(1, min(j.Min, j.Max))
		for range lo {
			if r.place(j.Worker, j.NodeSelector) {
				out[i].Placed++
			}
		}
		out[i].Target = lo
	}
	share := func(i int) float64 {
		j := s.Jobs[i]
		w := j.Weight
		if w <= 0 {
			w = 1
		}
		var sh float64
		if r.total.MilliCPU > 0 {
			sh = max(sh, float64(int64(out[i].Target)*j.Worker.MilliCPU)/float64(r.total.MilliCPU))
		}
		if r.total.Memory > 0 {
			sh = max(sh, float64(int64(out[i].Target)*j.Worker.Memory)/float64(r.total.Memory))
		}
		return sh / w
	}
	full := make([]bool, len(s.Jobs)) // at its maximum, or its worker fits nowhere
	for {
		best := -1
		for i := range s.Jobs {
			if full[i] || out[i].Target >= s.Jobs[i].Max {
				continue
			}
			if best < 0 || share(i) < share(best) {
				best = i
			}
		}
		if best < 0 {
			return out
		}
		if !r.place(s.Jobs[best].Worker, s.Jobs[best].NodeSelector) {
			full[best] = true
			continue
		}
		out[best].Target++
		out[best].Placed++
	}
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
		if !r.place(p.Request, p.NodeSelector) {
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
	claims := map[string]int{}
	for _, n := range r.order {
		for _, j := range jobs {
			if j.NodeSelector.matches(n) {
				claims[n.Name]++
			}
		}
	}
	slices.SortFunc(r.order, func(a, b Node) int {
		return cmp.Or(cmp.Compare(claims[a.Name], claims[b.Name]), cmp.Compare(a.Name, b.Name))
	})
	r.free = make([]Resources, len(r.order))
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
		r.place(p.Request, p.NodeSelector)
	}
}

// largestFirst sorts pods by request, largest first: a big pod is the
// hardest to fit later.
func largestFirst(pods []Pod) {
	slices.SortStableFunc(pods, func(a, b Pod) int {
		return cmp.Or(cmp.Compare(b.Request.MilliCPU, a.Request.MilliCPU), cmp.Compare(b.Request.Memory, a.Request.Memory))
	})
}

// place takes req from the first node with room that sel allows.
func (r *room) place(req Resources, sel Selector) bool {
	for i := range r.order {
		if r.free[i].fits(req) && sel.matches(r.order[i]) {
			r.free[i] = r.free[i].sub(req)
			return true
		}
	}
	return false
}
