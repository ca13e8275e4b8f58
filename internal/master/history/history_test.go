package history

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/job"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func launched(s, id, slot int, cause string) job.Occurrence {
	return job.Occurrence{At: at(s), Kind: job.OccurLaunched, Role: cluster.Worker, ID: id, Slot: slot, Cause: cause}
}

func running(s, id, slot int) job.Occurrence {
	return job.Occurrence{At: at(s), Kind: job.OccurRunning, Role: cluster.Worker, ID: id, Slot: slot}
}

func exited(s, id, slot int, cause, reason string, lost bool) job.Occurrence {
	return job.Occurrence{At: at(s), Kind: job.OccurExited, Role: cluster.Worker, ID: id, Slot: slot, Cause: cause, Reason: reason, Warning: lost, ExitCode: 137}
}

// seg is a segment in short: "slot/id launch_cause launched running ended
// [cause] [reason] [lost]", times in seconds from t0.
func seg(s Segment) string {
	t := func(p *time.Time) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(p.Sub(t0).Seconds())
	}
	out := fmt.Sprintf("%d/%d %s %v %s %s", s.Slot, s.ID, s.LaunchCause, s.Launched.Sub(t0).Seconds(), t(s.Running), t(s.Ended))
	for _, f := range []string{s.Cause, s.Reason, map[bool]string{true: "lost"}[s.Lost]} {
		if f != "" {
			out += " " + f
		}
	}
	return out
}

func TestSegments(t *testing.T) {
	cases := []struct {
		name string
		occ  []job.Occurrence
		want []string
	}{
		{"launch, running, exited", []job.Occurrence{launched(0, 0, 0, "start"), running(2, 0, 0), exited(9, 0, 0, "completed", "", false)},
			[]string{"0/0 start 0 2 9 completed"}},
		{"never ran", []job.Occurrence{launched(0, 0, 0, "start"), exited(5, 0, 0, "failed", "give up", true)},
			[]string{"0/0 start 0 - 5 failed give up lost"}},
		{"relaunch in the same slot", []job.Occurrence{
			launched(0, 0, 0, "start"), launched(0, 1, 1, "start"), running(1, 0, 0), running(1, 1, 1),
			exited(4, 1, 1, "killed", "relaunch (1 of 3)", true), launched(4, 2, 1, "relaunch"), running(6, 2, 1)},
			[]string{"0/0 start 0 1 -", "1/1 start 0 1 4 killed relaunch (1 of 3) lost", "1/2 relaunch 4 6 -"}},
		{"let go", []job.Occurrence{launched(0, 3, 2, "scale-up"), running(1, 3, 2),
			{At: at(7), Kind: job.OccurLetGo, Role: cluster.Worker, ID: 3, Slot: 2, Cause: "elasticdl scale"}},
			[]string{"2/3 scale-up 0 1 7 let-go elasticdl scale"}},
		{"a PS and a worker share IDs, not segments", []job.Occurrence{launched(0, 0, 0, "start"),
			{At: at(0), Kind: job.OccurLaunched, Role: cluster.PS, ID: 0, Slot: 0, Cause: "start"},
			{At: at(3), Kind: job.OccurRunning, Role: cluster.PS, ID: 0, Slot: 0}},
			[]string{"0/0 start 0 - -", "0/0 start 0 3 -"}},
		{"an end without its launch", []job.Occurrence{exited(3, 5, 1, "preempted", "", true)},
			[]string{"1/5 unknown 3 - 3 preempted lost"}},
		{"running twice, phases and notices", []job.Occurrence{launched(0, 0, 0, "start"), running(1, 0, 0), running(2, 0, 0),
			{At: at(2), Kind: job.OccurPhase, Cause: "training"}, {At: at(2), Kind: job.OccurNotice, Reason: "X"}},
			[]string{"0/0 start 0 1 -"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := New()
			h.Add(c.occ)
			var got []string
			for _, s := range h.Segments() {
				got = append(got, seg(s))
			}
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("segments:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
			oldest, events := h.Events(0, 0)
			if len(events) != len(c.occ) || oldest != 1 || events[len(events)-1].Seq != int64(len(c.occ)) {
				t.Errorf("events: oldest %d, %d of them (last %+v), want 1..%d", oldest, len(events), events[len(events)-1], len(c.occ))
			}
		})
	}
}

// TestEnd: the job's end closes what is still open (the PS, a worker
// not yet exited) as stopped, not lost, and leaves ended segments alone.
func TestEnd(t *testing.T) {
	h := New()
	h.Add([]job.Occurrence{launched(0, 0, 0, "start"), running(1, 0, 0), launched(0, 1, 1, "start"),
		exited(5, 1, 1, "completed", "", false),
		{At: at(0), Kind: job.OccurLaunched, Role: cluster.PS, ID: 0, Slot: 0, Cause: "start"},
		{At: at(2), Kind: job.OccurRunning, Role: cluster.PS, ID: 0, Slot: 0}})
	h.End(at(9))
	var got []string
	for _, s := range h.Segments() {
		got = append(got, fmt.Sprint(s.Role, " ", seg(s)))
	}
	want := []string{"worker 0/0 start 0 1 9 " + CauseJobEnded, "worker 1/1 start 0 - 5 completed", "ps 0/0 start 0 2 9 " + CauseJobEnded}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("segments after End:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// A late exit (the stop's own) does not reopen or change the segment.
	h.Add([]job.Occurrence{exited(10, 0, 0, "killed", "", true)})
	if segs := h.Segments(); len(segs) != 3 || segs[0].Cause != CauseJobEnded || segs[0].Lost {
		t.Errorf("a late exit changed the ended timeline: %d segments, the first %s", len(segs), seg(segs[0]))
	}
}

// TestLimits: the event ring keeps the latest MaxEvents, numbered on;
// segments keep to MaxSegments, dropping the oldest closed ones, never a
// live instance's.
func TestLimits(t *testing.T) {
	h := New()
	h.Add([]job.Occurrence{launched(0, 0, 0, "start")}) // lives throughout
	for id := 1; id <= 3*MaxSegments; id++ {
		h.Add([]job.Occurrence{launched(id, id, 1, "relaunch"), exited(id, id, 1, "killed", "", true)})
	}
	oldest, events := h.Events(0, 0)
	if total := int64(1 + 2*3*MaxSegments); len(events) != MaxEvents || oldest != total-MaxEvents+1 || events[len(events)-1].Seq != total {
		t.Errorf("events: %d, oldest %d, last %d; want %d, the latest", len(events), oldest, events[len(events)-1].Seq, MaxEvents)
	}
	if _, ev := h.Events(oldest+10, 5); len(ev) != 5 || ev[0].Seq != oldest+11 {
		t.Errorf("Events(since, 5): %d from %d", len(ev), ev[0].Seq)
	}
	segs := h.Segments()
	if len(segs) > MaxSegments || len(segs) < MaxSegments*7/8 {
		t.Fatalf("%d segments, want at most %d", len(segs), MaxSegments)
	}
	if segs[0].ID != 0 || segs[0].Ended != nil || segs[len(segs)-1].ID != 3*MaxSegments {
		t.Errorf("kept %s .. %s: want the live one and the latest", seg(segs[0]), seg(segs[len(segs)-1]))
	}
	// The live one still closes.
	h.Add([]job.Occurrence{exited(1e5, 0, 0, "completed", "", false)})
	if s := h.Segments()[0]; s.Ended == nil || s.Cause != "completed" {
		t.Errorf("the live segment after trims: %s", seg(s))
	}
}

func view(records, steps int64, lossSum float64) job.View {
	v := job.View{Records: records, Steps: steps, LossSum: lossSum, Phase: job.Training, Target: 2}
	v.WorkersRunning, v.Progress.Epoch = 2, 1
	v.Progress.RecordsDone, v.Progress.RecordsTotal = records, 10000
	return v
}

func TestSample(t *testing.T) {
	h := New()
	h.Sample(view(0, 0, 0), at(0))
	h.Sample(view(100, 10, 5), at(1))
	h.Sample(view(100, 10, 5), at(1))                         // same time: nothing
	h.Sample(view(150, 12, 9), t0.Add(1300*time.Millisecond)) // within the stride: nothing
	h.Sample(view(100, 10, 5), at(2))                         // unchanged
	_, ss := h.Samples()
	if len(ss) != 3 {
		t.Fatalf("%d samples, want 3", len(ss))
	}
	if ss[0].RPS != nil || ss[0].Loss != nil || ss[0].Gap {
		t.Errorf("the first sample has an interval: %+v", ss[0])
	}
	if ss[1].RPS == nil || *ss[1].RPS != 100 || ss[1].Loss == nil || *ss[1].Loss != 0.5 {
		t.Errorf("second sample %+v, want 100 records/s and loss 0.5", ss[1])
	}
	if ss[2].RPS == nil || *ss[2].RPS != 0 || ss[2].Loss != nil || ss[2].Gap {
		t.Errorf("an unchanged view: %+v, want rate 0 and no loss", ss[2])
	}
	if _, err := json.Marshal(h.Persisted()); err != nil {
		t.Error(err)
	}
	h.Sample(view(50, 5, 1), at(3)) // totals went back
	if _, ss = h.Samples(); !ss[3].Gap || ss[3].RPS != nil {
		t.Errorf("totals going back: %+v, want a gap", ss[3])
	}
}

// TestDecimation: a long job keeps at most MaxSamples samples spanning it
// all, its first and last kept, evenly spaced at a doubled stride, with
// the mean rate and loss of the intervals merged.
func TestDecimation(t *testing.T) {
	h := New()
	const secs = 10000
	for s := 0; s <= secs; s++ {
		// 10 records a second, loss s/1000 per step, a step per 10 records.
		h.Sample(view(int64(10*s), int64(s), float64(s*(s+1)/2)/1000), at(s))
		if _, ss := h.Samples(); len(ss) > MaxSamples {
			t.Fatalf("%d samples at %d s", len(ss), s)
		}
	}
	stride, ss := h.Samples()
	if !ss[0].T.Equal(t0) || stride != 16*time.Second {
		t.Errorf("first at %v, stride %v; want the job's start, 16s", ss[0].T.Sub(t0), stride)
	}
	if end := ss[len(ss)-1].T; end.Before(at(secs).Add(-stride)) {
		t.Errorf("the series ends at %v of %ds", end.Sub(t0), secs)
	}
	for i := 1; i < len(ss); i++ {
		if d := ss[i].T.Sub(ss[i-1].T); d != stride && i > 1 {
			t.Fatalf("samples %d, %d are %v apart, want %v", i-1, i, d, stride)
		}
		if ss[i].RPS == nil || *ss[i].RPS != 10 {
			t.Fatalf("sample %d: rate %v, want 10", i, ss[i].RPS)
		}
		// The interval (a, b]'s mean loss is (a+1+b)/2000.
		a, b := ss[i-1].T.Sub(t0).Seconds(), ss[i].T.Sub(t0).Seconds()
		if want := (a + 1 + b) / 2000; ss[i].Loss == nil || abs(*ss[i].Loss-want) > 1e-9 {
			t.Fatalf("sample %d (%v..%v]: loss %v, want %v", i, a, b, *ss[i].Loss, want)
		}
	}
}

func abs(x float64) float64 { return max(x, -x) }

// TestSamplesSince: a reader that holds the first n samples gets the
// rest, or all of them once the series was thinned under it.
func TestSamplesSince(t *testing.T) {
	h := New()
	for s := range 5 {
		h.Sample(view(int64(10*s), int64(s), 0), at(s))
	}
	for _, c := range []struct {
		stride         time.Duration
		n, from, count int
	}{
		{time.Second, 0, 0, 5},
		{time.Second, 3, 3, 2},
		{time.Second, 5, 5, 0},
		{time.Second, 6, 0, 5},     // more than there are: all
		{2 * time.Second, 3, 0, 5}, // another stride: thinned since, all
	} {
		stride, from, ss := h.SamplesSince(c.stride, c.n)
		if stride != time.Second || from != c.from || len(ss) != c.count {
			t.Errorf("SamplesSince(%v, %d) = %v, %d, %d samples; want 1s, %d, %d", c.stride, c.n, stride, from, len(ss), c.from, c.count)
		}
		if len(ss) > 0 && !ss[0].T.Equal(at(from)) {
			t.Errorf("SamplesSince(%v, %d): the first at %v, want %v", c.stride, c.n, ss[0].T, at(from))
		}
	}
}

func TestETA(t *testing.T) {
	h := New()
	for s := 0; s <= 9; s++ {
		h.Sample(view(int64(100*s), int64(s), 0), at(s))
		if _, ok := h.ETA(view(int64(100*s), 0, 0)); ok {
			t.Fatalf("an ETA after %d s", s)
		}
	}
	for s := 10; s <= 60; s++ {
		h.Sample(view(int64(100*s), int64(s), 0), at(s))
	}
	v := view(6000, 0, 0)
	if eta, ok := h.ETA(v); !ok || eta != 40*time.Second {
		t.Errorf("ETA %v, %v; want 40s (4000 records at 100/s)", eta, ok)
	}
	// The rate doubles: the last 30 s count, not the whole job.
	for s := 61; s <= 100; s++ {
		h.Sample(view(6000+int64(200*(s-60)), int64(s), 0), at(s))
	}
	if eta, ok := h.ETA(view(8000, 0, 0)); !ok || eta != 10*time.Second {
		t.Errorf("ETA %v, %v; want 10s (2000 records at 200/s)", eta, ok)
	}
	v.Phase = job.Evaluating
	if _, ok := h.ETA(v); ok {
		t.Error("an ETA outside training")
	}
}

// TestResume: a history persisted (as JSON), restored by the next master
// and reconciled with what it adopted: the events go on numbering, gone
// instances close as unknown, unknown ones open as adopted, and the next
// sample marks the gap.
func TestResume(t *testing.T) {
	h := New()
	h.Add([]job.Occurrence{launched(0, 0, 0, "start"), launched(0, 1, 1, "start"), running(1, 0, 0), running(1, 1, 1)})
	h.Sample(view(0, 0, 0), at(1))
	h.Sample(view(100, 10, 5), at(2))
	data, err := Encode(h.Persisted())
	if err != nil {
		t.Fatal(err)
	}
	var p Persisted
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	next := New()
	if err := next.Restore(p); err != nil {
		t.Fatal(err)
	}
	// The core adopted worker 0 and worker 2 (launched in the gap); 1 is gone.
	next.Add([]job.Occurrence{{At: at(20), Kind: job.OccurResumed, Cause: "training"}})
	v := view(300, 30, 10)
	v.Instances = []job.InstanceView{{Role: cluster.Worker, ID: 0, Slot: 0, Running: true, StartedAt: at(1)},
		{Role: cluster.Worker, ID: 2, Slot: 1, Running: true, StartedAt: at(15)}}
	next.Reconcile(v, at(20))
	var got []string
	for _, s := range next.Segments() {
		got = append(got, seg(s))
	}
	want := []string{"0/0 start 0 1 -", "1/1 start 0 1 20 unknown (failover)", "1/2 adopted 20 15 -"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("segments:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	_, ev := next.Events(0, 0)
	if len(ev) != 6 || ev[4].Seq != 5 || ev[4].Kind != job.OccurResumed || ev[5].Reason != ReasonGap ||
		!strings.Contains(ev[5].Detail, at(2).Format(time.RFC3339)) {
		t.Errorf("events after resume: %+v", ev)
	}
	next.Reconcile(v, at(20))
	if _, ev := next.Events(0, 0); len(ev) != 6 {
		t.Errorf("a second Reconcile added %+v", ev[6:])
	}
	next.Sample(v, at(21))
	next.Sample(view(400, 40, 12), at(22))
	_, ss := next.Samples()
	if len(ss) != 4 || !ss[2].Gap || ss[2].RPS != nil || ss[3].Gap || *ss[3].RPS != 100 {
		t.Errorf("samples after resume: %+v", ss)
	}
	// Worker 2 goes on as any other.
	next.Add([]job.Occurrence{exited(30, 2, 1, "completed", "", false)})
	if s := next.Segments()[2]; s.Ended == nil || s.Cause != "completed" {
		t.Errorf("adopted segment: %s", seg(s))
	}
	if err := next.Restore(Persisted{Format: 99}); err == nil {
		t.Error("another format restored")
	}
}

// TestEncodeTrims: a history over MaxEncoded loses its oldest events
// first, and keeps its segments and samples while events remain.
func TestEncodeTrims(t *testing.T) {
	h := New()
	long := strings.Repeat("x", 400)
	for id := range MaxSegments {
		h.Add([]job.Occurrence{launched(id, id, id%8, "start")})
	}
	for i := range MaxEvents {
		h.Add([]job.Occurrence{{At: at(i), Kind: job.OccurNotice, Reason: "R", Detail: long}})
	}
	for s := range MaxSamples {
		h.Sample(view(int64(s), int64(s), float64(s)), at(s))
	}
	p := h.Persisted()
	full, _ := json.Marshal(p)
	if len(full) <= MaxEncoded {
		t.Fatalf("the test's history is %d bytes, not over %d", len(full), MaxEncoded)
	}
	data, err := Encode(p)
	if err != nil {
		t.Fatal(err)
	}
	var q Persisted
	if err := json.Unmarshal(data, &q); err != nil {
		t.Fatal(err)
	}
	if len(data) > MaxEncoded || len(q.Events) == 0 || len(q.Events) >= MaxEvents ||
		q.Events[len(q.Events)-1].Seq != p.Events[len(p.Events)-1].Seq || len(q.Segments) != MaxSegments || len(q.Samples) != MaxSamples {
		t.Errorf("encoded %d bytes: %d events (to %d), %d segments, %d samples", len(data), len(q.Events), q.Events[len(q.Events)-1].Seq, len(q.Segments), len(q.Samples))
	}
	if len(p.Events) != MaxEvents {
		t.Error("Encode changed its argument")
	}
	small, _ := Encode(New().Persisted())
	if !strings.Contains(string(small), `"format":1`) {
		t.Errorf("an empty history: %s", small)
	}
}
