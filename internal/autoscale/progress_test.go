package autoscale

import (
	"reflect"
	"strings"
	"testing"
)

func TestProgressRoundTrip(t *testing.T) {
	p := Progress{Remaining: 120000, Min: 1, Max: 8, Samples: []ProgressSample{
		{Workers: 4, RecordsPerSecond: 700, Count: 30, Seconds: 30.5},
		{Workers: 2, RecordsPerSecond: 400.25, Count: 12, Seconds: 12},
	}}
	v, err := EncodeProgress(p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeProgress(v)
	if err != nil {
		t.Fatalf("decode %s: %v", v, err)
	}
	want := p
	want.Version = ProgressVersion
	want.Samples = []ProgressSample{p.Samples[1], p.Samples[0]} // by workers
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip %+v, want %+v (encoded %s)", got, want, v)
	}
	if p.Samples[0].Workers != 4 {
		t.Error("EncodeProgress sorted its caller's samples")
	}
}

// TestProgressKeepsLongestMeasured: past MaxProgressSamples sizes, the
// longest measured stay.
func TestProgressKeepsLongestMeasured(t *testing.T) {
	var p Progress
	for w := 1; w <= MaxProgressSamples+3; w++ {
		p.Samples = append(p.Samples, ProgressSample{Workers: w, RecordsPerSecond: 1, Count: 1, Seconds: float64(w)})
	}
	p.Max = MaxProgressSamples + 3
	v, err := EncodeProgress(p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeProgress(v)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Samples) != MaxProgressSamples || got.Samples[0].Workers != 4 {
		t.Errorf("%d samples from %d workers; want %d from 4", len(got.Samples), got.Samples[0].Workers, MaxProgressSamples)
	}
}

func TestDecodeProgressGarbled(t *testing.T) {
	for _, c := range []struct{ value, want string }{
		{"", "not JSON"},
		{"lots", "not JSON"},
		{`{"v":1,"remaining":"many"}`, "not JSON"},
		{`{"remaining":5,"min":1,"max":2}`, "version 0, want 1"},
		{`{"v":2,"remaining":5,"min":1,"max":2}`, "version 2, want 1"},
		{`{"v":1,"remaining":-5,"min":1,"max":2}`, "remaining -5"},
		{`{"v":1,"remaining":5,"min":3,"max":2}`, "bounds [3, 2]"},
		{`{"v":1,"remaining":5,"min":1,"max":2,"samples":[{"w":0,"rps":1,"n":1,"s":1}]}`, "sample 0"},
		{`{"v":1,"remaining":5,"min":1,"max":2,"samples":[{"w":1,"rps":-1,"n":1,"s":1}]}`, "sample 0"},
		{`{"v":1,"remaining":5,"min":1,"max":2,"samples":[{"w":1,"rps":1,"n":0,"s":1}]}`, "sample 0"},
		{`{"v":1,"remaining":5,"min":1,"max":2,"samples":[{"w":2,"rps":1,"n":1,"s":1},{"w":1,"rps":1,"n":1,"s":1}]}`, "want increasing"},
	} {
		_, err := DecodeProgress(c.value)
		if err == nil || !strings.HasPrefix(err.Error(), "progress") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("DecodeProgress(%q) = %v, want an error saying %q", c.value, err, c.want)
		}
	}
	if _, err := EncodeProgress(Progress{Remaining: -1}); err == nil {
		t.Error("EncodeProgress wrote an impossible progress")
	}
}

func TestProgressWork(t *testing.T) {
	p := Progress{Remaining: 1000, Min: 1, Max: 8, Samples: []ProgressSample{
		{Workers: 1, RecordsPerSecond: 100, Count: 10, Seconds: 10},
		{Workers: 4, RecordsPerSecond: 400, Count: 10, Seconds: 10},
	}}
	w := p.Work(4, Prior{})
	if !w.Known || w.Remaining != 1000 || w.Current != 4 || w.Speedup.Exponent < 0.99 || w.Speedup.Base < 99 || w.Speedup.Base > 101 {
		t.Errorf("work %+v, want linear speed-up from 100 records/s, 1000 left, at 4", w)
	}
	if w := (Progress{Remaining: 5}).Work(2, DefaultPrior()); w.Known || w.Remaining != 5 {
		t.Errorf("no samples: %+v, want size known, speed-up unknown", w)
	}
	if w := UnknownWork(3); w.Known || w.Remaining >= 0 || w.Current != 3 {
		t.Errorf("unknown: %+v", w)
	}
}
