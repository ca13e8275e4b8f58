package job

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"elasticdl/internal/cluster"
)

// brief renders the occurrences of the given kinds (all when none) as
// "kind role-id@slot cause", or "kind from→to cause" for the others.
func brief(os []Occurrence, kinds ...string) []string {
	var out []string
	for _, o := range os {
		if len(kinds) > 0 && !slices.Contains(kinds, o.Kind) {
			continue
		}
		s := o.Kind
		switch {
		case o.Role != "" && o.Kind != OccurTarget:
			s += fmt.Sprintf(" %s@%d", cluster.InstanceName(o.Role, o.ID), o.Slot)
		case o.From != 0 || o.To != 0:
			s += fmt.Sprintf(" %d→%d", o.From, o.To)
		}
		if o.Cause != "" {
			s += " " + o.Cause
		}
		out = append(out, s)
	}
	return out
}

func wantOccurred(t *testing.T, got []Occurrence, want []string, kinds ...string) {
	t.Helper()
	if b := brief(got, kinds...); !slices.Equal(b, want) {
		t.Fatalf("occurred\n  %s\nwant\n  %s", strings.Join(b, "\n  "), strings.Join(want, "\n  "))
	}
}

// The start launches in slots; running comes once per instance, from the
// backend or from the first request; a loss names its cause, the
// policy's reason and its exit code, and the relaunch keeps the slot with
// a new ID.
func TestOccurrencesOfInstances(t *testing.T) {
	h := newHarness(t, nil)
	rd := h.take()
	wantOccurred(t, rd.Occurred, []string{"phase 0→1 training", "launched ps-0@0 start", "launched worker-0@0 start", "launched worker-1@1 start"})
	if at := rd.Occurred[0].At; !at.Equal(h.now) {
		t.Errorf("at %v, want the Step's %v", at, h.now)
	}
	if s := h.summary().StartedAt; s == nil || !s.Equal(h.now) || s.Location() != time.UTC {
		t.Errorf("started at %v, want %v in UTC", s, h.now)
	}
	h.running(cluster.Worker, 0)
	h.running(cluster.Worker, 0)
	h.get(1) // running from its request
	h.get(1)
	h.running(cluster.Worker, 1)
	wantOccurred(t, h.take().Occurred, []string{"running worker-0@0", "running worker-1@1"})

	h.advance(time.Second)
	h.step(Instance{cluster.Event{Role: cluster.Worker, ID: 0, Phase: cluster.Exited, ExitCode: 137, Reason: cluster.OOMKilled, Message: "out of memory"}})
	os := h.take().Occurred
	wantOccurred(t, os, []string{"exited worker-0@0 oom-killed", "launched worker-2@0 relaunch"})
	if e := os[0]; !e.Warning || e.ExitCode != 137 || e.Reason == "" || e.Detail != "out of memory" || !e.At.Equal(h.now) {
		t.Errorf("exited %+v: want a loss with the exit code, the policy's reason and the message", e)
	}
	h.exit(cluster.PS, 0, cluster.Preempted)
	wantOccurred(t, h.take().Occurred, []string{"exited ps-0@0 preempted", "launched ps-1@0 relaunch"})
	h.exit(cluster.Worker, 0, cluster.Killed) // already replaced: nothing
	if os := h.take().Occurred; len(os) != 0 {
		t.Errorf("occurred %v for an instance already gone", brief(os))
	}
}

// A silent worker is exited with cause silent (a loss); its real exit
// afterwards raises nothing.
func TestOccurrenceOfASilentWorker(t *testing.T) {
	h := newHarness(t, nil)
	h.get(0)
	h.take()
	h.advance(2 * time.Minute)
	h.step(Tick{})
	os := h.take().Occurred
	wantOccurred(t, os, []string{"exited worker-0@0 silent", "launched worker-2@0 relaunch"})
	if !os[0].Warning || !strings.Contains(os[0].Detail, "silent for over") {
		t.Errorf("exited %+v, want a loss with the reason", os[0])
	}
	h.step(Instance{cluster.Event{Role: cluster.Worker, ID: 0, Phase: cluster.Exited, ExitCode: -1, Reason: cluster.Killed, Requested: true}})
	if os := h.take().Occurred; len(os) != 0 {
		t.Errorf("occurred %v after the end", brief(os))
	}
	if s := h.summary(); s.Workers.Lost != 1 {
		t.Errorf("lost %d, want 1", s.Workers.Lost)
	}
}

// A lower target lets workers go (cause: the target's source), which is no
// loss; a higher one launches in the freed slots (scale-up).
func TestOccurrencesOfTargets(t *testing.T) {
	h := newHarness(t, scaleConfig)
	h.runAll()
	h.take()
	h.step(SetTarget{Workers: 2, Source: "autoscaler"})
	os := h.take().Occurred
	wantOccurred(t, os, []string{"target 4→2 autoscaler", "let-go worker-3@3 autoscaler", "let-go worker-2@2 autoscaler"})
	if os[1].Warning || os[1].ExitCode != 0 || os[1].Reason == "" {
		t.Errorf("let-go %+v: want no warning, no exit code, the policy's reason", os[1])
	}
	h.step(Instance{cluster.Event{Role: cluster.Worker, ID: 3, Phase: cluster.Exited, ExitCode: -1, Reason: cluster.Deleted, Requested: true}})
	h.step(SetTarget{Workers: 9, Source: "user"})
	wantOccurred(t, h.take().Occurred, []string{"target 2→4 user", "launched worker-4@2 scale-up", "launched worker-5@3 scale-up"})
	if s := h.summary(); s.Workers.Lost != 0 {
		t.Errorf("lost %d, want 0", s.Workers.Lost)
	}
	// A draining worker let go after its task: the source survives a
	// failover.
	h.runAll()
	h.get(0)
	tk := h.get(1) // started with 0's: ties let the newest go
	h.step(SetTarget{Workers: 1, Source: "autoscaler"})
	h.failover(running(cluster.Worker, 0), running(cluster.Worker, 1), running(cluster.Worker, 4), running(cluster.Worker, 5), running(cluster.PS, 0))
	h.take()
	h.train(1, tk, 1)
	h.kind(1)
	wantOccurred(t, h.take().Occurred, []string{"let-go worker-1@1 autoscaler"}, OccurLetGo)
}

// Phases, epochs and evaluation passes, in order; exits once the workers
// are done are no loss.
func TestOccurrencesOfPhasesEpochsAndEvaluations(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.ValidationData, c.ValidationRecords = "val", 1000 })
	h.runAll()
	a, b := h.get(0), h.get(1)
	h.train(0, a, 3)
	h.train(1, b, 5)
	e1, e2 := h.get(0), h.get(1)
	h.evaluate(0, e1, 5, 256)
	h.evaluate(1, e2, 5, 244)
	h.step(Saved{})
	h.exit(cluster.Worker, 0, cluster.Completed)
	h.exit(cluster.Worker, 1, cluster.Killed)
	os := h.take().Occurred
	wantOccurred(t, os, []string{"epoch 0→1", "phase 1→2 evaluating", "eval final", "phase 2→5 saving", "phase 5→6 succeeded",
		"exited worker-0@0 completed", "exited worker-1@1 killed"}, OccurPhase, OccurEpoch, OccurEval, OccurExited)
	for _, o := range os {
		if o.Kind == OccurEpoch && o.Version != 5 || o.Kind == OccurEval && o.Version != 5 || o.Kind == OccurExited && o.Warning {
			t.Errorf("%+v", o)
		}
	}
	if ev := h.summary().Evaluations; len(ev) != 1 || ev[0].RecordsTrained != 1000 {
		t.Errorf("evaluations %+v, want one at 1000 records trained", ev)
	}
}

func TestOccurrenceOfAFailure(t *testing.T) {
	h := newHarness(t, nil)
	h.take()
	h.step(Fail{Err: errors.New("boom")})
	os := h.take().Occurred
	wantOccurred(t, os, []string{"phase 1→7 failed"})
	if !os[0].Warning || os[0].Detail != "boom" {
		t.Errorf("%+v, want a warning with the error", os[0])
	}
}

// A resumed master says so first, then what it learnt happened while no
// master listened; the meter's totals, the start time and an evaluation
// pass's records survive it.
func TestOccurrencesAfterAFailover(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.ValidationData, c.ValidationRecords, c.EvaluationSteps, c.Tasks.NumEpochs = "val", 1000, 10, 2
	})
	h.runAll()
	h.take()
	started := h.summary().StartedAt
	tk := h.get(0)
	h.train(0, tk, 12) // queues a pass at 10
	h.advance(time.Minute)
	h.failover(running(cluster.PS, 0), running(cluster.Worker, 0))
	os := h.take().Occurred
	wantOccurred(t, os, []string{"resumed 0→1 training", "exited worker-1@1 deleted", "launched worker-2@1 relaunch"})
	if os[0].To != 1 || !os[1].Warning || os[1].Detail != goneWhileAway {
		t.Errorf("%+v", os[:2])
	}
	if v := h.j.View(); v.LossSum != 2 || v.Steps != 8 || v.Records != tk.Records() {
		t.Errorf("view totals %v loss, %d steps, %d records; want 2, 8, %d", v.LossSum, v.Steps, v.Records, tk.Records())
	}
	if s := h.summary().StartedAt; s == nil || !s.Equal(*started) {
		t.Errorf("started at %v, want %v", s, started)
	}
	h.running(cluster.Worker, 2)
	e1, e2 := h.get(0), h.get(2)
	h.evaluate(0, e1, 12, 1)
	h.evaluate(2, e2, 12, 1)
	if ev := h.summary().Evaluations; len(ev) != 1 || ev[0].RecordsTrained != tk.Records() {
		t.Errorf("evaluations %+v, want one queued at %d records trained", ev, tk.Records())
	}
}

// An AllReduce ring re-forms (why), forms (world sizes), and recovers at
// the first step the new version commits (how long).
func TestOccurrencesOfTheRing(t *testing.T) {
	h := allReduceJob(t, 2)
	h.take()
	h.join(0)
	h.join(1)
	h.join(0)
	t0, t1 := h.get(0), h.get(1)
	h.advance(1500 * time.Millisecond)
	h.step(ReportApplied{Worker: 0, Lineage: 1, Steps: []AppliedStep{{Step: 1, RingVersion: 2,
		Parts: []Part{{Worker: 0, Task: t0.ID, Start: 0, End: 64}, {Worker: 1, Task: t1.ID, Start: 0, End: 64}}}}})
	h.exit(cluster.Worker, 1, cluster.Killed)
	os := h.take().Occurred
	wantOccurred(t, os, []string{"ring-reform worker 0 joins", "ring-formed 0→1", "ring-reform 1→0 worker 1 joins", "ring-formed 1→2",
		"ring-recovered worker 1 joins", "ring-reform 2→0 worker-1 lost"}, OccurRingReform, OccurRingFormed, OccurRingRecovered)
	var versions []int64
	for _, o := range os {
		if strings.HasPrefix(o.Kind, "ring-") {
			versions = append(versions, o.Version)
		}
		if o.Kind == OccurRingRecovered && o.Seconds != 1.5 {
			t.Errorf("recovered in %v s, want 1.5", o.Seconds)
		}
	}
	if !slices.Equal(versions, []int64{1, 1, 2, 2, 2, 3}) {
		t.Errorf("versions %v", versions)
	}
}

// A re-shard: the PS target, the new shard launched (scale-up), the layout
// moved (from, to, layout, seconds); shrinking lets the shard go.
func TestOccurrencesOfAReshard(t *testing.T) {
	h := psJob(t)
	h.take()
	h.step(SetPSTarget{PS: 2, Source: "user"})
	rd := h.take()
	os := rd.Occurred
	f := shardsHolding(1)
	f.Gen = rd.CheckApplied.Gen
	h.step(f)
	rd = h.take()
	os = append(os, rd.Occurred...)
	h.running(cluster.PS, psLaunches(rd)[0].ID)
	h.advance(2 * time.Second)
	h.step(ReshardDone{Layout: 1})
	h.step(SetPSTarget{PS: 1, Source: "user"})
	rd = h.take()
	os = append(os, rd.Occurred...)
	f = shardsHolding(2)
	f.Gen = rd.CheckApplied.Gen
	h.step(f)
	h.step(ReshardDone{Layout: 2})
	os = append(os, h.take().Occurred...)
	wantOccurred(t, os, []string{"target 1→2 user", "launched ps-1@1 scale-up", "running ps-1@1", "reshard 1→2", "target 2→1 user",
		"let-go ps-1@1 reshard", "reshard 2→1"})
	if r := os[3]; r.Version != 1 || r.Seconds != 2 || r.Role != "" {
		t.Errorf("reshard %+v, want layout 1 in 2 s", r)
	}
	if h.summary().PS.Lost != 0 {
		t.Error("a PS let go counted lost")
	}
}

// Notices no structured occurrence covers are notice occurrences.
func TestNoticeOccurrences(t *testing.T) {
	h := psJob(t, func(c *Config) { c.SyncSGD = true })
	h.take()
	h.step(SetPSTarget{PS: 2, Source: "user"})
	os := h.take().Occurred
	if len(os) != 1 || os[0].Kind != OccurNotice || os[0].Reason != "PSTargetInvalid" || !os[0].Warning {
		t.Fatalf("occurred %+v, want a PSTargetInvalid notice", os)
	}
}

// View: the instances by role and slot, the ledger, bounds and totals.
func TestView(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.NumWorkers, c.MinWorkers = 3, 1 })
	h.step(SetTarget{Workers: 2, Source: "test"})
	h.running(cluster.Worker, 1)
	tk := h.get(1)
	h.train(1, tk, 1)
	v := h.j.View()
	var got []string
	for _, in := range v.Instances {
		got = append(got, fmt.Sprintf("%s@%d %v", cluster.InstanceName(in.Role, in.ID), in.Slot, in.Running && in.StartedAt.Equal(h.now)))
	}
	if want := []string{"worker-0@0 false", "worker-1@1 true", "ps-0@0 false"}; !slices.Equal(got, want) {
		t.Errorf("instances %v, want %v", got, want)
	}
	if v.Target != 2 || v.MinWorkers != 1 || v.MaxWorkers != 3 || v.NumPS != 1 || v.PSTarget != 1 || v.Phase != Training {
		t.Errorf("view %+v", v)
	}
	if len(v.Coverage) != 1 || v.Coverage[0].RecordsTrained != tk.Records() || v.Records != tk.Records() || v.LossSum != 2 || v.Steps != 8 {
		t.Errorf("coverage %+v, totals %d %v %d", v.Coverage, v.Records, v.LossSum, v.Steps)
	}
	// A copy: what the core changes in place later does not reach it.
	h.failover(running(cluster.Worker, 0), running(cluster.Worker, 1), running(cluster.PS, 0))
	v = h.j.View()
	h.get(1)
	if v.Summary.Failovers[0].FirstTaskAt != nil || h.summary().Failovers[0].FirstTaskAt == nil {
		t.Errorf("view's failovers %+v changed with the core's", v.Summary.Failovers)
	}
}
