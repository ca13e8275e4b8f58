package sim

import (
	"math"
	"slices"
	"testing"
)

func loadTestdata(t testing.TB) []Workload {
	t.Helper()
	ws, err := LoadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// TestPolluxWorkloads is the simulator acceptance, on all eight
// Pollux workloads (-v prints the table docs/experiments.md shows).
func TestPolluxWorkloads(t *testing.T) {
	ws := loadTestdata(t)
	if len(ws) != 8 {
		t.Fatalf("%d workloads, want 8", len(ws))
	}
	policies := []Policy{FCFSGang, MaxMinFair, Remaining, OracleSRPT}
	sums, err := Compare(ws, policies, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", Table(policies, sums))
	fcfs, fair, rem, oracle := sums[0], sums[1], sums[2], sums[3]
	t.Logf("Mean JCT, remaining ÷ FCFS gang: %.3f; ÷ max-min fair: %.3f; ÷ oracle SRPT: %.3f",
		rem.MeanJCT/fcfs.MeanJCT, rem.MeanJCT/fair.MeanJCT, rem.MeanJCT/oracle.MeanJCT)
	checks := []struct {
		what string
		ok   bool
	}{
		{"mean JCT ≤ 0.7 × FCFS gang", rem.MeanJCT <= 0.7*fcfs.MeanJCT},
		{"mean JCT ≤ 0.8 × max-min fair", rem.MeanJCT <= 0.8*fair.MeanJCT},
		{"makespan ≤ FCFS gang's", rem.Makespan <= fcfs.Makespan},
		{"mean JCT ≤ 1.15 × oracle SRPT", rem.MeanJCT <= 1.15*oracle.MeanJCT},
		{"no excess pending over 5 s", rem.LongestExcessPending <= 5},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("remaining: %s does not hold", c.what)
		}
	}
}

func TestCurveThroughput(t *testing.T) {
	c := Curve{Workers: []int{2, 4, 8}, Rate: []float64{20, 30, 25}}
	for _, tc := range []struct {
		w    int
		want float64
	}{{0, 0}, {1, 10}, {2, 20}, {3, 25}, {4, 30}, {6, 27.5}, {8, 25}, {16, 25}} {
		if got := c.Throughput(tc.w); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Throughput(%d) = %v, want %v", tc.w, got, tc.want)
		}
	}
}

// TestRunSmall: one job alone finishes in its work at its best size plus
// one start; under FCFS gang at its trace size.
func TestRunSmall(t *testing.T) {
	c := Curve{Workers: []int{1, 2, 4}, Rate: []float64{10, 20, 40}}
	w := Workload{Name: "one", Jobs: []Job{{Name: "a", Arrival: 5, Records: 4000, Curve: c, Gang: 2}}}
	cfg := DefaultConfig()
	for _, tc := range []struct {
		p    Policy
		want float64
	}{{FCFSGang, 30 + 4000/20.0}, {MaxMinFair, 30 + 4000/40.0}, {Remaining, 30 + 4000/40.0}, {OracleSRPT, 30 + 4000/40.0}} {
		res, err := Run(w, tc.p, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(res.MeanJCT-tc.want) > 1e-6 || res.LongestExcessPending != 0 {
			t.Errorf("%v: JCT %v, excess pending %v; want %v, 0", tc.p, res.MeanJCT, res.LongestExcessPending, tc.want)
		}
	}
}

// TestExcessPending: FCFS gang holds a job of one worker behind a head
// that does not fit; the time it waits with room for its floor counts.
func TestExcessPending(t *testing.T) {
	c := Curve{Workers: []int{1, 64}, Rate: []float64{10, 640}}
	w := Workload{Name: "two", Jobs: []Job{
		{Name: "big", Arrival: 0, Records: 64000, Curve: c, Gang: 64},
		{Name: "small", Arrival: 10, Records: 100, Curve: c, Gang: 1}}}
	res, err := Run(w, FCFSGang, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	// big runs 30 s start + 100 s; small waits from 10 s to 130 s.
	if math.Abs(res.LongestExcessPending-120) > 1e-6 {
		t.Errorf("excess pending %v, want 120", res.LongestExcessPending)
	}
}

// TestGrowDelay: with Config.GrowDelay a running job trains on through
// its resizes; workers added train GrowDelay after the last growth, and
// removed ones stop at once.
func TestGrowDelay(t *testing.T) {
	r := &run{cfg: Config{GrowDelay: 5, StartCost: 3}}
	s := &state{}
	steps := []struct {
		now      float64
		n        int
		at       float64
		training int
	}{
		{0, 2, 2, 2},   // a start: stalled (stallUntil), none joining
		{3, 4, 4, 2},   // two join at 8
		{8, 4, 8, 4},   // joined
		{10, 6, 12, 4}, // two more join at 15
		{12, 5, 12, 4}, // one of them goes: one still joins at 15
		{12, 5, 15, 5},
		{16, 2, 16, 2}, // removed at once
		{17, 0, 17, 0},
	}
	for i, st := range steps {
		r.now = st.now
		r.resize(s, st.n)
		if got := s.training(st.at); got != st.training || s.workers != st.n {
			t.Errorf("step %d: %d workers, %d training at %v; want %d, %d", i, s.workers, got, st.at, st.n, st.training)
		}
	}
	if s.stallUntil != 3 {
		t.Errorf("start stall until %v, want 3", s.stallUntil)
	}
}

// TestGangRace: the gang masters waiting when room frees all see it; each
// whose gang fits is admitted, and their workers run as room allows, in
// order. Strictly in order, the second waits for a whole gang's room.
func TestGangRace(t *testing.T) {
	for _, race := range []bool{false, true} {
		r := &run{cfg: Config{Nodes: 1, NodeMilliCPU: 6000, WorkerMilliCPU: 1000, GangRace: race}, policy: FCFSGang}
		a, b, c := &state{job: Job{Gang: 4}}, &state{job: Job{Gang: 4}}, &state{job: Job{Gang: 4}}
		r.admitGangs([]*state{a})
		r.admitGangs([]*state{a, b, c}) // 2 free: neither fits
		r.admitGangs([]*state{b, c})    // a done: 6 free
		want := []int{4, 4, 0}
		if race {
			want = []int{4, 4, 2}
		}
		if got := []int{a.workers, b.workers, c.workers}; !slices.Equal(got, want) {
			t.Errorf("race %v: workers %v, want %v", race, got, want)
		}
	}
}

// TestShareRatio: the time-weighted median of the share ratio among the
// jobs training, counted only while two train.
func TestShareRatio(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spans []spanRatio
		want  float64
	}{
		{"none", nil, 0},
		{"one span", []spanRatio{{1, 2}}, 2},
		{"weighted by time", []spanRatio{{1, 4}, {3, 1}}, 1},
		{"long span wins", []spanRatio{{1, 1}, {1, 1.5}, {5, 3}}, 3},
	} {
		if got := medianShare(tc.spans); got != tc.want {
			t.Errorf("%s: medianShare = %v, want %v", tc.name, got, tc.want)
		}
	}
	// Two jobs of one worker at first, then 3 against 1: CPU shares
	// with each job's own 100 mCPU beside its workers.
	r := &run{cfg: Config{WorkerMilliCPU: 500, JobMilliCPU: 100}}
	a := &state{arrived: true, workers: 1}
	b := &state{arrived: true, workers: 1}
	alone := &state{arrived: true}
	r.jobs = []*state{a, b, alone}
	r.countShares(1)
	a.workers = 3
	r.countShares(3)
	b.done = true
	r.countShares(10) // one job training: not counted
	if got, want := medianShare(r.shares), 1600.0/600; len(r.shares) != 2 || math.Abs(got-want) > 1e-12 {
		t.Errorf("spans %v, median %v; want 2 spans, median %v", r.shares, got, want)
	}
}
