package rounds

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// TestAddSamples: a round is sampled when a stride has passed since the
// last sample (less the jitter a ticker has).
func TestAddSamples(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name   string
		rounds []time.Duration
		want   []bool
	}{
		{"the first round", []time.Duration{0}, []bool{true}},
		{"a round a second", []time.Duration{0, time.Second, 2 * time.Second}, []bool{true, true, true}},
		{"rounds every 5 s", []time.Duration{0, 5 * time.Second, 10 * time.Second}, []bool{true, true, true}},
		{"a ticker's wobble", []time.Duration{0, 800 * ms, 1700 * ms}, []bool{true, true, true}},
		{"rounds a settle apart: one a second", []time.Duration{0, 200 * ms, 400 * ms, 1000 * ms, 1200 * ms}, []bool{true, false, false, true, false}},
		{"a round at the same time", []time.Duration{0, 0}, []bool{true, false}},
		{"a clock that went back", []time.Duration{0, -time.Second}, []bool{true, false}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := New()
			var got []bool
			for _, d := range c.rounds {
				a := h.Add(Round{At: at(d)})
				got = append(got, a.Sample)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("sampled %v, want %v", got, c.want)
			}
		})
	}
}

// TestSampleOf: a sample holds the round's levels and each job's.
func TestSampleOf(t *testing.T) {
	h := New()
	h.Add(Round{At: t0, CapacityCPU: 8, ServicesCPU: 2.5, PendingServicePods: 1, Jobs: []Job{
		{Key: "ns/a", Min: 1, Max: 4, Target: 3, Placed: 3, Running: 2, Pending: 1, CPU: 3, Reason: "share"},
		{Key: "ns/b", Min: 1, Max: 2, Target: 2, Placed: 2, Running: 2, CPU: 2.5, Reason: "max"},
	}})
	stride, ss := h.Samples()
	want := []Sample{{T: t0, CapacityCPU: 8, ServicesCPU: 2.5, Jobs: map[string]JobSample{
		"ns/a": {CPU: 3, Target: 3, Running: 2, Pending: 1}, "ns/b": {CPU: 2.5, Target: 2, Running: 2}}}}
	if stride != time.Second || !reflect.DeepEqual(ss, want) {
		t.Errorf("stride %s, samples %+v; want 1s, %+v", stride, ss, want)
	}
	h.Add(Round{At: at(time.Second)})
	if _, ss := h.Samples(); len(ss) != 2 || ss[1].Jobs == nil || len(ss[1].Jobs) != 0 {
		t.Errorf("a round without jobs: samples %+v, want a second one with an empty jobs map", ss)
	}
}

// TestDecimation: rounds for hours keep at most MaxSamples samples, the
// first round's among them, and the last; each time the series is full,
// the stride doubles and Add says so.
func TestDecimation(t *testing.T) {
	h := New()
	thinned := 0
	for i := range 5000 {
		a := h.Add(Round{At: at(time.Duration(i) * time.Second), CapacityCPU: float64(i)})
		stride, ss := h.Samples()
		if len(ss) > MaxSamples {
			t.Fatalf("round %d: %d samples", i, len(ss))
		}
		if a.Thinned {
			thinned++
			if len(ss) != MaxSamples/2+1 || stride != Stride<<thinned {
				t.Fatalf("round %d thinned: %d samples, stride %s", i, len(ss), stride)
			}
		}
		if ss[0].CapacityCPU != 0 {
			t.Fatalf("round %d: the first sample is round %v's", i, ss[0].CapacityCPU)
		}
		if last := ss[len(ss)-1]; a.Sample && last.CapacityCPU != float64(i) {
			t.Fatalf("round %d sampled, but the last sample is round %v's", i, last.CapacityCPU)
		}
	}
	stride, ss := h.Samples()
	// 5000 s: 720 at 1 s, then 2 s to 1440 s, 4 s to 2880 s, 8 s beyond.
	if thinned != 3 || stride != 8*time.Second {
		t.Errorf("thinned %d times, stride %s; want 3, 8s", thinned, stride)
	}
	for i := 1; i < len(ss); i++ {
		if gap := ss[i].T.Sub(ss[i-1].T); gap < stride-stride/4 && i < len(ss)-1 {
			t.Errorf("samples %d and %d %s apart, stride %s", i-1, i, gap, stride)
			break
		}
	}
}

// TestChanges: the latest MaxChanges changes, oldest first; Add says how
// many are the round's.
func TestChanges(t *testing.T) {
	changes := func(from, n int) []Change {
		var cs []Change
		for i := range n {
			cs = append(cs, Change{At: t0, Job: fmt.Sprintf("ns/j%d", from+i), From: 1, To: 2, Reason: "share"})
		}
		return cs
	}
	cases := []struct {
		name        string
		rounds      []int // changes in each round
		wantAdded   []int
		first, last int // of the changes kept
	}{
		{"none", []int{0, 0}, []int{0, 0}, -1, -1},
		{"a few", []int{1, 0, 2}, []int{1, 0, 2}, 0, 2},
		{"the oldest go", []int{150, 100}, []int{150, 100}, 50, 249},
		{"a round of more than are kept", []int{10, 300}, []int{10, MaxChanges}, 110, 309},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := New()
			n := 0
			var added []int
			for i, k := range c.rounds {
				added = append(added, h.Add(Round{At: at(time.Duration(i) * time.Second), Changes: changes(n, k)}).Changes)
				n += k
			}
			if !reflect.DeepEqual(added, c.wantAdded) {
				t.Errorf("added %v, want %v", added, c.wantAdded)
			}
			got := h.Changes()
			if c.first < 0 {
				if len(got) != 0 {
					t.Errorf("changes %+v, want none", got)
				}
				return
			}
			if len(got) != c.last-c.first+1 || got[0].Job != fmt.Sprintf("ns/j%d", c.first) || got[len(got)-1].Job != fmt.Sprintf("ns/j%d", c.last) {
				t.Errorf("%d changes, %s..%s; want j%d..j%d", len(got), got[0].Job, got[len(got)-1].Job, c.first, c.last)
			}
		})
	}
}

// TestCopies: what Samples and Changes return is the caller's.
func TestCopies(t *testing.T) {
	h := New()
	h.Add(Round{At: t0, CapacityCPU: 1, Changes: []Change{{Job: "ns/a", To: 2}}})
	_, ss := h.Samples()
	cs := h.Changes()
	ss[0].CapacityCPU, cs[0].To = 99, 99
	if _, ss := h.Samples(); ss[0].CapacityCPU != 1 {
		t.Errorf("a sample changed through a copy: %+v", ss[0])
	}
	if cs := h.Changes(); cs[0].To != 2 {
		t.Errorf("a change changed through a copy: %+v", cs[0])
	}
}
