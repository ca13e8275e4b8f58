package progress

import (
	"math"
	"reflect"
	"testing"
	"time"

	"elasticdl/internal/autoscale"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func sec(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }

func base() autoscale.Progress {
	return autoscale.Progress{Remaining: 10000, Min: 1, Max: 8, Samples: []autoscale.ProgressSample{
		{Workers: 2, RecordsPerSecond: 100, Count: 20, Seconds: 20},
	}}
}

func with(f func(*autoscale.Progress)) autoscale.Progress {
	p := base()
	p.Samples = append([]autoscale.ProgressSample(nil), p.Samples...)
	f(&p)
	return p
}

func TestDue(t *testing.T) {
	last := base()
	for _, c := range []struct {
		name  string
		last  *autoscale.Progress
		tried time.Time
		cur   autoscale.Progress
		now   time.Time
		want  bool
	}{
		{"first, nothing measured yet", nil, time.Time{}, autoscale.Progress{Remaining: 5, Min: 1, Max: 2}, sec(0), true},
		{"first try failed, too soon to retry", nil, sec(0), base(), sec(29), false},
		{"first try failed, retried", nil, sec(0), base(), sec(30), true},
		{"unchanged", &last, sec(0), base(), sec(600), false},
		{"remaining 4.9% less", &last, sec(0), with(func(p *autoscale.Progress) { p.Remaining = 9510 }), sec(60), false},
		{"remaining 5% less", &last, sec(0), with(func(p *autoscale.Progress) { p.Remaining = 9500 }), sec(60), true},
		{"remaining 5% less, too soon", &last, sec(0), with(func(p *autoscale.Progress) { p.Remaining = 9500 }), sec(29), false},
		{"done", &last, sec(0), with(func(p *autoscale.Progress) { p.Remaining = 0 }), sec(30), true},
		{"bounds", &last, sec(0), with(func(p *autoscale.Progress) { p.Max = 4 }), sec(30), true},
		{"a new size", &last, sec(0), with(func(p *autoscale.Progress) {
			p.Samples = append(p.Samples, autoscale.ProgressSample{Workers: 4, RecordsPerSecond: 150, Count: 1, Seconds: 1})
		}), sec(30), true},
		{"throughput 3% up", &last, sec(0), with(func(p *autoscale.Progress) { p.Samples[0].RecordsPerSecond = 103 }), sec(30), false},
		{"throughput 6% down", &last, sec(0), with(func(p *autoscale.Progress) { p.Samples[0].RecordsPerSecond = 94 }), sec(30), true},
		{"measured a little longer", &last, sec(0), with(func(p *autoscale.Progress) { p.Samples[0].Count = 39 }), sec(30), false},
		{"measured twice as long", &last, sec(0), with(func(p *autoscale.Progress) { p.Samples[0].Count = 40 }), sec(30), true},
	} {
		if got := Due(c.last, c.tried, c.cur, c.now, MinInterval); got != c.want {
			t.Errorf("%s: Due = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestMeter: intervals count once their size has held Settle, toward the
// size they ran at; a size change, a long gap and a counter gone back
// count nothing.
func TestMeter(t *testing.T) {
	var m Meter
	records := int64(0)
	at := 0
	run := func(seconds, workers int, perSecond int64) {
		for range seconds {
			m.Observe(sec(at), records, workers)
			at++
			records += perSecond
		}
	}
	run(30, 2, 100) // 2 workers: 10 s settle, then 20 intervals at 100/s
	run(5, 0, 0)    // none running
	run(15, 4, 180) // 4 workers: 10 s settle, 5 intervals at 180/s
	m.Observe(sec(at+60), records+6000, 4)
	m.Observe(sec(at+61), records+6180, 4) // after a gap: counts
	m.Observe(sec(at+62), 10, 4)           // a new counter: does not
	want := []autoscale.ProgressSample{
		{Workers: 2, RecordsPerSecond: 100, Count: 19, Seconds: 19},
		{Workers: 4, RecordsPerSecond: 180, Count: 5, Seconds: 5},
	}
	if got := m.Samples(); !reflect.DeepEqual(got, want) {
		t.Errorf("samples %+v, want %+v", got, want)
	}
	// A master that takes over goes on from them.
	r := Restore(append(m.Samples(), autoscale.ProgressSample{Workers: 0, Count: 1, Seconds: 1}))
	for i := range 12 {
		r.Observe(sec(1000+i), int64(i*120), 2)
	}
	got := r.Samples()
	if len(got) != 2 || got[0].Count != 20 || math.Abs(got[0].RecordsPerSecond-(1900+120)/20.0) > 1e-9 || got[1] != want[1] {
		t.Errorf("restored and measured %+v, want 20 counts at 2 workers, 4 as they were", got)
	}
}

// TestMeterSettleFor: a short job's meter (SettleFor) counts a size's
// intervals sooner; Due publishes as often as the interval it is given.
func TestMeterSettleFor(t *testing.T) {
	m := Meter{SettleFor: 2 * time.Second}
	for i := range 6 {
		m.Observe(sec(i), int64(i*50), 3)
	}
	// Settled at 2 s: the intervals from 2 to 5 count.
	want := []autoscale.ProgressSample{{Workers: 3, RecordsPerSecond: 50, Count: 3, Seconds: 3}}
	if got := m.Samples(); !reflect.DeepEqual(got, want) {
		t.Errorf("samples %+v, want %+v", got, want)
	}
	last := autoscale.Progress{Remaining: 1000}
	cur := autoscale.Progress{Remaining: 500}
	if !Due(&last, sec(0), cur, sec(2), 2*time.Second) || Due(&last, sec(0), cur, sec(2), MinInterval) {
		t.Error("Due: want a publish 2 s on with a 2 s interval, none with the default")
	}
}
