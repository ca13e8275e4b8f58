package autoscale

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
)

const gi = int64(1) << 30

func cpu(m int64) Resources { return Resources{MilliCPU: m, Memory: gi} }

func nodes(n int, milliCPU int64) []Node {
	var ns []Node
	for i := range n {
		ns = append(ns, Node{Name: fmt.Sprintf("n%02d", i), Allocatable: Resources{milliCPU, 64 * gi}, Schedulable: true})
	}
	return ns
}

func job(key string, lo, hi int, workerCPU int64) Job {
	return Job{Key: key, Min: lo, Max: hi, Worker: cpu(workerCPU), Priority: 100}
}

// pools: n00 in pool train, n01 and n02 in pool web; 4 CPUs each.
func pools() []Node {
	ns := nodes(3, 4000)
	ns[0].Labels = map[string]string{"pool": "train"}
	for i := 1; i < 3; i++ {
		ns[i].Labels = map[string]string{"pool": "web", "zone": "a"}
	}
	return ns
}

func targets(ds []Decision) []int {
	var t []int
	for _, d := range ds {
		t = append(t, d.Target)
	}
	return t
}

// service is n pods of a higher-priority service: bound to node (or
// waiting, with "").
func service(n int, node string, milliCPU int64) []Pod {
	var ps []Pod
	for range n {
		ps = append(ps, Pod{Node: node, Request: cpu(milliCPU), Priority: 1000})
	}
	return ps
}

func TestDecide(t *testing.T) {
	cases := []struct {
		name string
		s    Snapshot
		want []int
	}{
		{"empty cluster: every job at its minimum", Snapshot{Jobs: []Job{job("a", 2, 8, 1000), job("b", 0, 4, 1000)}}, []int{2, 1}},
		{"one job fills the cluster up to its maximum", Snapshot{Nodes: nodes(2, 4000), Jobs: []Job{job("a", 1, 6, 1000)}}, []int{6}},
		{"one job fills what there is", Snapshot{Nodes: nodes(2, 4000), Jobs: []Job{job("a", 1, 20, 1000)}}, []int{8}},
		{"two equal jobs share evenly", Snapshot{Nodes: nodes(2, 4000), Jobs: []Job{job("a", 1, 20, 1000), job("b", 1, 20, 1000)}}, []int{4, 4}},
		{"a job's maximum leaves the rest to the other", Snapshot{Nodes: nodes(2, 4000), Jobs: []Job{job("a", 1, 2, 1000), job("b", 1, 20, 1000)}}, []int{2, 6}},
		{"minimums first, then max-min fair", Snapshot{Nodes: nodes(3, 4000), Jobs: []Job{job("a", 6, 20, 1000), job("b", 1, 20, 1000), job("c", 1, 20, 1000)}}, []int{6, 3, 3}},
		{"fair by resources: a job of bigger workers gets fewer", Snapshot{Nodes: nodes(4, 4000), Jobs: []Job{job("a", 1, 20, 2000), job("b", 1, 20, 1000)}}, []int{4, 8}},
		{"weights scale the share", Snapshot{Nodes: nodes(3, 4000), Jobs: []Job{{Key: "a", Min: 1, Max: 20, Worker: cpu(1000), Weight: 2}, job("b", 1, 20, 1000)}}, []int{8, 4}},
		{"bound pods take their room", Snapshot{Nodes: nodes(2, 4000), Pods: service(3, "n00", 1000), Jobs: []Job{job("a", 1, 20, 1000)}}, []int{5}},
		{"a service growing: its waiting pods are placed first",
			Snapshot{Nodes: nodes(2, 4000), Pods: append(service(2, "n00", 1000), service(3, "", 1000)...), Jobs: []Job{job("a", 1, 20, 1000)}}, []int{3}},
		{"waiting pods of no higher priority do not push training out",
			Snapshot{Nodes: nodes(2, 4000), Pods: []Pod{{Request: cpu(4000), Priority: 100}}, Jobs: []Job{job("a", 1, 20, 1000)}}, []int{8}},
		{"the jobs' own workers do not count as used",
			Snapshot{Nodes: nodes(2, 4000), Pods: []Pod{{Node: "n00", Request: cpu(1000), Job: "a"}, {Node: "n01", Request: cpu(1000), Job: "a"}}, Jobs: []Job{job("a", 1, 20, 1000)}}, []int{8}},
		{"an unmanaged job's workers do", Snapshot{Nodes: nodes(2, 4000), Pods: []Pod{{Node: "n00", Request: cpu(1000), Job: "gone"}}, Jobs: []Job{job("a", 1, 20, 1000)}}, []int{7}},
		{"nodes not schedulable are left out", Snapshot{Nodes: append(nodes(1, 4000), Node{Name: "cordoned", Allocatable: cpu(4000), Schedulable: false}), Jobs: []Job{job("a", 1, 20, 1000)}}, []int{4}},
		{"room split across nodes counts only where a worker fits whole",
			Snapshot{Nodes: nodes(3, 3000), Pods: append(append(service(1, "n00", 1500), service(1, "n01", 1500)...), service(1, "n02", 500)...),
				Jobs: []Job{job("a", 1, 20, 2000)}}, []int{1}},
		{"a job's node selector limits it to its pool",
			Snapshot{Nodes: pools(), Jobs: []Job{{Key: "a", Min: 1, Max: 20, Worker: cpu(1000), NodeSelector: Selector{"pool": "train"}}, job("b", 1, 20, 1000)}}, []int{4, 8}},
		{"a waiting pod takes room only where its selector lets it go",
			Snapshot{Nodes: pools(), Pods: []Pod{{Request: cpu(4000), Priority: 1000, NodeSelector: Selector{"pool": "web"}}},
				Jobs: []Job{{Key: "a", Min: 1, Max: 20, Worker: cpu(1000), NodeSelector: Selector{"pool": "train"}}}}, []int{4}},
		{"a job finishing frees its share", Snapshot{Nodes: nodes(2, 4000), Jobs: []Job{job("b", 1, 20, 1000)}}, []int{8}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := targets(Decide(c.s)); !slices.Equal(got, c.want) {
				t.Errorf("targets %v, want %v", got, c.want)
			}
		})
	}
}

// TestDecideReasons: what stopped each job's target.
func TestDecideReasons(t *testing.T) {
	trainOnly := Job{Key: "a", Min: 1, Max: 20, Worker: cpu(1000), NodeSelector: Selector{"pool": "train"}}
	cases := []struct {
		name string
		s    Snapshot
		want []string
	}{
		{"at its maximum", Snapshot{Nodes: nodes(2, 4000), Jobs: []Job{job("a", 1, 6, 1000)}}, []string{"max"}},
		{"a minimum at the maximum", Snapshot{Nodes: nodes(2, 4000), Jobs: []Job{job("a", 3, 3, 1000)}}, []string{"max"}},
		{"the cluster is full", Snapshot{Nodes: nodes(2, 4000), Jobs: []Job{job("a", 1, 20, 1000)}}, []string{"room"}},
		{"full of bound services", Snapshot{Nodes: nodes(2, 4000), Pods: service(3, "n00", 1000), Jobs: []Job{job("a", 1, 20, 1000)}}, []string{"room"}},
		{"too fragmented for a whole worker",
			Snapshot{Nodes: nodes(3, 3000), Pods: append(append(service(1, "n00", 1500), service(1, "n01", 1500)...), service(1, "n02", 500)...),
				Jobs: []Job{job("a", 1, 20, 2000)}}, []string{"room"}},
		{"two jobs share the cluster", Snapshot{Nodes: nodes(2, 4000), Jobs: []Job{job("a", 1, 20, 1000), job("b", 1, 20, 1000)}}, []string{"share", "share"}},
		{"a job's maximum leaves the rest to the other, which had the same share once",
			Snapshot{Nodes: nodes(2, 4000), Jobs: []Job{job("a", 1, 2, 1000), job("b", 1, 20, 1000)}}, []string{"max", "share"}},
		{"another job's minimum is no share", Snapshot{Nodes: nodes(2, 4000), Jobs: []Job{job("a", 6, 20, 1000), job("b", 1, 20, 1000)}}, []string{"share", "room"}},
		// a: b's workers are on nodes a may not use; b could have used a's.
		{"pools", Snapshot{Nodes: pools(), Jobs: []Job{trainOnly, job("b", 1, 20, 1000)}}, []string{"room", "share"}},
		{"a service growing: its waiting pods are placed first",
			Snapshot{Nodes: nodes(2, 4000), Pods: append(service(2, "n00", 1000), service(3, "", 1000)...), Jobs: []Job{job("a", 1, 20, 1000)}},
			[]string{"services-first (3 waiting)"}},
		{"services first before share",
			Snapshot{Nodes: nodes(2, 4000), Pods: service(2, "", 1000), Jobs: []Job{job("a", 1, 20, 1000), job("b", 1, 20, 1000)}},
			[]string{"services-first (2 waiting)", "services-first (2 waiting)"}},
		{"waiting pods placed where the job may not go are not in its way",
			Snapshot{Nodes: pools(), Pods: []Pod{{Request: cpu(4000), Priority: 1000, NodeSelector: Selector{"pool": "web"}}}, Jobs: []Job{trainOnly}},
			[]string{"room"}},
		{"waiting pods of no higher priority hold nothing",
			Snapshot{Nodes: nodes(1, 4000), Pods: []Pod{{Request: cpu(2000), Priority: 100}}, Jobs: []Job{job("a", 1, 20, 1000)}}, []string{"room"}},
		{"the minimum does not fit", Snapshot{Nodes: nodes(1, 2000), Jobs: []Job{job("a", 3, 8, 1000)}}, []string{"min-unfit"}},
		{"the minimum does not fit, at the maximum too", Snapshot{Nodes: nodes(1, 2000), Jobs: []Job{job("a", 3, 3, 1000)}}, []string{"min-unfit"}},
		{"no nodes", Snapshot{Jobs: []Job{job("a", 1, 4, 1000)}}, []string{"min-unfit"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, d := range Decide(c.s) {
				got = append(got, d.Reason)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("reasons %q, want %q (decisions %+v)", got, c.want, Decide(c.s))
			}
		})
	}
}

// TestDecideNodesComeAndGo: targets follow the capacity as nodes are added
// and removed.
func TestDecideNodesComeAndGo(t *testing.T) {
	jobs := []Job{job("a", 1, 20, 1000), job("b", 1, 20, 1000)}
	var got [][]int
	for _, n := range []int{1, 3, 2} {
		got = append(got, targets(Decide(Snapshot{Nodes: nodes(n, 4000), Jobs: jobs})))
	}
	if want := [][]int{{2, 2}, {6, 6}, {4, 4}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("targets with 1, 3, 2 nodes: %v, want %v", got, want)
	}
}

// TestDecideMinimumThatDoesNotFit: a job's minimum is its target even
// where it does not fit (the job runs with fewer, pending the rest), and
// says so.
func TestDecideMinimumThatDoesNotFit(t *testing.T) {
	d := Decide(Snapshot{Nodes: nodes(1, 2000), Jobs: []Job{job("a", 3, 8, 1000)}})
	if d[0].Target != 3 || d[0].Placed != 2 {
		t.Errorf("decision %+v, want target 3 with 2 placed", d[0])
	}
}

// TestDecideInvariants: on random clusters, every target is within its
// job's bounds, and what was placed never exceeds a node.
func TestDecideInvariants(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for range 2000 {
		s := randomSnapshot(rng, 1+rng.Intn(20), rng.Intn(100), 1+rng.Intn(8))
		ds := Decide(s)
		var placed Resources
		for i, d := range ds {
			j := s.Jobs[i]
			lo := max(1, min(j.Min, j.Max))
			if d.Key != j.Key || d.Target < lo || d.Target > max(lo, j.Max) || d.Placed > d.Target {
				t.Fatalf("job %+v: decision %+v out of bounds", j, d)
			}
			if !reasonFits(d, j) {
				t.Fatalf("job %+v: decision %+v: reason does not match", j, d)
			}
			placed = placed.Add(Resources{int64(d.Placed) * j.Worker.MilliCPU, int64(d.Placed) * j.Worker.Memory})
		}
		var capacity Resources
		for _, n := range s.Nodes {
			if n.Schedulable {
				capacity = capacity.Add(n.Allocatable)
			}
		}
		if !capacity.fits(placed) {
			t.Fatalf("placed %+v on a capacity of %+v", placed, capacity)
		}
	}
}

// reasonFits: min-unfit exactly when not all of the target was placed,
// max exactly when the whole target, at the maximum, was; any other a
// reason for stopping below the maximum.
func reasonFits(d Decision, j Job) bool {
	switch {
	case d.Placed < d.Target:
		return d.Reason == ReasonMinUnfit
	case d.Target >= j.Max:
		return d.Reason == ReasonMax
	}
	return d.Reason == ReasonRoom || d.Reason == ReasonShare || strings.HasPrefix(d.Reason, ReasonServicesFirst+" (")
}

func randomSnapshot(rng *rand.Rand, nNodes, nPods, nJobs int) Snapshot {
	var s Snapshot
	for i := range nNodes {
		s.Nodes = append(s.Nodes, Node{Name: fmt.Sprintf("n%d", i), Allocatable: Resources{int64(1000 * (1 + rng.Intn(16))), int64(1+rng.Intn(64)) * gi}, Schedulable: rng.Intn(10) > 0})
	}
	for i := range nJobs {
		lo := rng.Intn(4)
		s.Jobs = append(s.Jobs, Job{Key: fmt.Sprintf("j%d", i), Min: lo, Max: lo + rng.Intn(16), Worker: Resources{int64(250 * (1 + rng.Intn(8))), int64(1+rng.Intn(4)) * gi / 2}, Priority: int32(rng.Intn(3) * 100)})
	}
	for range nPods {
		p := Pod{Request: Resources{int64(100 * (1 + rng.Intn(20))), int64(1+rng.Intn(8)) * gi / 4}, Priority: int32(rng.Intn(4) * 100)}
		if rng.Intn(4) > 0 {
			p.Node = s.Nodes[rng.Intn(len(s.Nodes))].Name
		}
		if rng.Intn(3) == 0 && nJobs > 0 {
			p.Job = s.Jobs[rng.Intn(nJobs)].Key
		}
		s.Pods = append(s.Pods, p)
	}
	return s
}

// BenchmarkDecide: 1,000 nodes, 10,000 pods, 100 jobs.
func BenchmarkDecide(b *testing.B) {
	rng := rand.New(rand.NewSource(2))
	s := randomSnapshot(rng, 1000, 10000, 100)
	for i := range s.Nodes {
		s.Nodes[i].Schedulable = true
	}
	b.ResetTimer()
	for range b.N {
		Decide(s)
	}
}

func TestAdmit(t *testing.T) {
	gang := func(n int, milliCPU int64) []Pod {
		var ps []Pod
		for range n {
			ps = append(ps, Pod{Request: cpu(milliCPU)})
		}
		return ps
	}
	// The seeds' experiment: 24 CPUs on 3 nodes, a job of 13 1-CPU workers
	// and a 500m PS; the first job holds 13.75 CPUs.
	three := nodes(3, 8000)
	first := append(service(7, "n00", 1000), service(6, "n01", 1000)...)
	first = append(first, Pod{Node: "n00", Request: cpu(750)})
	second := append(gang(13, 1000), Pod{Request: cpu(500)})
	cases := []struct {
		name     string
		s        Snapshot
		priority int32
		pods     []Pod
		want     bool
	}{
		{"empty cluster", Snapshot{Nodes: three}, 0, second, true},
		{"no nodes", Snapshot{}, 0, second, false},
		{"nothing to admit", Snapshot{}, 0, nil, true},
		{"the second of two 13-CPU jobs on 24 CPUs waits", Snapshot{Nodes: three, Pods: first}, 0, second, false},
		{"9 CPUs fit where 10.25 are free", Snapshot{Nodes: three, Pods: first}, 0, gang(9, 1000), true},
		// 10.25 CPUs are free in all, but 0.25 + 2 + 8 on three nodes: 10 whole CPUs.
		{"room split across nodes", Snapshot{Nodes: three, Pods: first}, 0, gang(11, 1000), false},
		{"a cordoned node does not count", Snapshot{Nodes: []Node{three[0], {Name: "n01", Allocatable: Resources{8000, 64 * gi}}}}, 0, gang(9, 1000), false},
		{"a higher-priority pod waiting is served first", Snapshot{Nodes: nodes(1, 4000), Pods: service(1, "", 2000)}, 0, gang(3, 1000), false},
		{"a lower-priority pod waiting holds nothing", Snapshot{Nodes: nodes(1, 4000), Pods: service(1, "", 2000)}, 1001, gang(4, 1000), true},
		// A gang admitted a moment ago whose pods are not bound yet.
		{"an equal-priority pod waiting is served first", Snapshot{Nodes: nodes(1, 4000), Pods: service(1, "", 2000)}, 1000, gang(3, 1000), false},
		{"a bound pod of any priority holds its room", Snapshot{Nodes: nodes(1, 4000), Pods: []Pod{{Node: "n00", Request: cpu(1000), Priority: -5}}}, 0, gang(4, 1000), false},
		{"largest first: 3 + 1 + 1 + 3 on two 4-CPU nodes", Snapshot{Nodes: nodes(2, 4000)}, 0, []Pod{{Request: cpu(1000)}, {Request: cpu(3000)}, {Request: cpu(1000)}, {Request: cpu(3000)}}, true},
		{"node selectors", Snapshot{Nodes: pools()}, 0, []Pod{{Request: cpu(3000), NodeSelector: Selector{"pool": "train"}}, {Request: cpu(3000), NodeSelector: Selector{"pool": "train"}}}, false},
		{"memory counts", Snapshot{Nodes: nodes(1, 8000)}, 0, []Pod{{Request: Resources{1000, 40 * gi}}, {Request: Resources{1000, 40 * gi}}}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := slices.Clone(c.pods)
			if got := Admit(c.s, c.priority, c.pods); got != c.want {
				t.Errorf("Admit = %v, want %v", got, c.want)
			}
			if !slices.EqualFunc(in, c.pods, func(a, b Pod) bool { return a.Request == b.Request }) {
				t.Errorf("Admit reordered its argument")
			}
		})
	}
}
