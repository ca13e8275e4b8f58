package job

import (
	"math"
	"math/rand"
	"slices"
	"testing"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/master/task"
)

func TestJudgeSlow(t *testing.T) {
	const long = slowFor
	ring := windowFor(true)
	tests := []struct {
		name     string
		win      rateWindow
		rate     float64
		others   []float64
		fraction float64
		was      bool
		below    int
		belowFor time.Duration
		slow     bool
		streak   int
		median   float64
		judged   bool
	}{
		{name: "off", rate: 1, others: []float64{10, 10}, fraction: 0, below: 1},
		{name: "two workers: no judgement", rate: 1, others: []float64{10}, fraction: 0.5, below: 1},
		{name: "first report below: not yet", rate: 4, others: []float64{10, 10}, fraction: 0.5, belowFor: long, streak: 1, median: 10, judged: true},
		{name: "second report below, too soon: not yet", rate: 4, others: []float64{10, 10}, fraction: 0.5, below: 1, belowFor: long - 1, streak: 2, median: 10, judged: true},
		{name: "second report below, long enough: slow", rate: 4, others: []float64{10, 10}, fraction: 0.5, below: 1, belowFor: long, slow: true, streak: 2, median: 10, judged: true},
		{name: "the median, not the mean", rate: 4, others: []float64{10, 12, 1000}, fraction: 0.5, below: 1, belowFor: long, slow: true, streak: 2, median: 12, judged: true},
		{name: "even count: mean of the middle two", rate: 4.9, others: []float64{8, 10, 12}, fraction: 0.5, below: 5, belowFor: time.Minute, slow: true, streak: 6, median: 10, judged: true},
		{name: "above the bar: streak reset", rate: 6, others: []float64{10, 10}, fraction: 0.5, below: 1, belowFor: long, median: 10, judged: true},
		{name: "slow, between the bars: stays", rate: 6, others: []float64{10, 10}, fraction: 0.5, was: true, slow: true, median: 10, judged: true},
		{name: "slow, at the upper bar: stays", rate: 7, others: []float64{10, 10}, fraction: 0.5, was: true, slow: true, median: 10, judged: true},
		{name: "slow, above the upper bar: unmarked", rate: 7.1, others: []float64{10, 10}, fraction: 0.5, was: true, median: 10, judged: true},
		{name: "slow, still below: stays", rate: 3, others: []float64{10, 10}, fraction: 0.5, was: true, below: 4, slow: true, streak: 5, median: 10, judged: true},
		{name: "slow, below again after between: stays", rate: 3, others: []float64{10, 10}, fraction: 0.5, was: true, slow: true, streak: 1, median: 10, judged: true},
		{name: "slow, too few rated: unchanged", rate: 30, others: []float64{10}, fraction: 0.5, was: true, slow: true},
		{name: "all equally slow: nobody marked", rate: 1, others: []float64{1, 1, 1}, fraction: 0.5, below: 3, belowFor: long, median: 1, judged: true},
		{name: "ring: long enough, too few reports", win: ring, rate: 4, others: []float64{10, 10}, fraction: 0.5, below: ringSlowStreak - 2, belowFor: long, streak: ringSlowStreak - 1, median: 10, judged: true},
		{name: "ring: enough reports, too soon", win: ring, rate: 4, others: []float64{10, 10}, fraction: 0.5, below: 20, belowFor: ringSlowFor - time.Millisecond, streak: 21, median: 10, judged: true},
		{name: "ring: enough reports, long enough", win: ring, rate: 4, others: []float64{10, 10}, fraction: 0.5, below: ringSlowStreak - 1, belowFor: ringSlowFor, slow: true, streak: ringSlowStreak, median: 10, judged: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.win == (rateWindow{}) {
				tc.win = windowFor(false)
			}
			slow, streak, median, judged := judgeSlow(tc.win, tc.rate, tc.others, tc.fraction, tc.was, tc.below, tc.belowFor)
			if slow != tc.slow || judged != tc.judged || (judged && (streak != tc.streak || median != tc.median)) || (!judged && streak != tc.below) {
				t.Fatalf("judgeSlow = slow %v streak %d median %v judged %v, want %v %d %v %v", slow, streak, median, judged, tc.slow, tc.streak, tc.median, tc.judged)
			}
		})
	}
}

// TestRateWindow: a rate covers the newest tasks that took rateSpan
// together, however short each.
func TestRateWindow(t *testing.T) {
	var w workerRate
	for range 1000 { // 10 records in 10 ms: 1000/s
		w.add(rateSample{records: 10, secs: 0.01}, rateSpan)
	}
	if r, _ := w.rate(); math.Abs(r-1000) > 1e-6 || len(w.samples) != 1000 {
		t.Fatalf("rate %v over %d tasks, want 1000/s over 1000", r, len(w.samples))
	}
	w.add(rateSample{records: 100, secs: 10}, rateSpan) // one long task: 10/s
	if r, _ := w.rate(); len(w.samples) > 2 || math.Abs(r-10) > 1 {
		t.Fatalf("rate %v over %d tasks, want 10/s over the long one (and a short one, by rounding)", r, len(w.samples))
	}
}

func TestPickBackup(t *testing.T) {
	now := time.Unix(1000, 0)
	c := func(id int64, owner int, ago time.Duration) task.Straggler {
		return task.Straggler{Task: task.Task{ID: id}, Owner: owner, Since: now.Add(-ago)}
	}
	// Oldest first, as task.BackupCandidates gives them.
	cands := []task.Straggler{c(1, 1, 50*time.Second), c(2, 2, 40*time.Second), c(3, 3, 5*time.Second)}
	slowOnly := func(s int) func(int) bool { return func(w int) bool { return w == s } }
	tests := []struct {
		name    string
		worker  int
		slow    func(int) bool
		typical time.Duration
		known   bool
		want    int64 // 0: none
	}{
		{"slow holder first, however recent", 9, slowOnly(3), time.Hour, true, 3},
		{"never the worker's own", 3, slowOnly(3), time.Hour, true, 0},
		{"no typical time: only slow holders", 9, slowOnly(0), 0, false, 0},
		{"held 3× the typical time: the oldest", 9, slowOnly(0), 10 * time.Second, true, 1},
		{"the oldest is the worker's own", 1, slowOnly(0), 10 * time.Second, true, 2},
		{"nothing held long enough", 9, slowOnly(0), 20 * time.Second, true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := pickBackup(cands, tc.worker, tc.slow, tc.typical, tc.known, now)
			if id := map[bool]int64{true: got.Task.ID}[ok]; id != tc.want {
				t.Fatalf("pickBackup = task %d (%v), want %d", got.Task.ID, ok, tc.want)
			}
		})
	}
}

// TestSlowWorkerBackedUp: of three workers, one takes 5× as long per
// task: it is marked slow after two tasks (its first one not timed), and at the end of the epoch an
// idle worker gets a copy of its task, which wins; the slow worker's late
// report is taken and dropped, the ledger stays exact.
func TestSlowWorkerBackedUp(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.NumWorkers, c.RecordsPerTask, c.Tasks.RecordsPerTask = 3, 10, 10
		c.Tasks.Training = []task.Shard{{Name: "train", Records: 400}}
		c.CheckApplied, c.MinibatchSize = true, 10
		c.SlowWorkerFraction, c.BackupTasks = 0.5, true
	})
	for w := range 3 {
		h.running(cluster.Worker, w)
	}
	// Rounds of 10 s: workers 0 and 1 train a task each round, worker 2
	// one task every 5 rounds.
	held := map[int]task.Task{}
	slowStart := h.now
	var backup task.Task
	for round := 0; backup.ID == 0; round++ {
		if round > 100 {
			t.Fatal("no backup of the slow worker's task")
		}
		for w := range 2 {
			if tk, ok := held[w]; ok {
				h.train(w, tk, 1)
				delete(held, w)
			}
			if a := h.step(GetTask{Worker: w}).Assignment; a.Kind == task.KindTask {
				if a.Task.ID == held[2].ID {
					backup = a.Task
				}
				held[w] = a.Task
			}
		}
		if tk, ok := held[2]; backup.ID == 0 && (!ok || h.now.Sub(slowStart) >= 50*time.Second) {
			if ok {
				h.train(2, tk, 1)
			}
			delete(held, 2)
			if a := h.step(GetTask{Worker: 2}).Assignment; a.Kind == task.KindTask {
				held[2], slowStart = a.Task, h.now
			}
		}
		h.advance(10 * time.Second)
	}
	if got := h.j.SlowWorkers(); len(got) != 1 || got[0] != 2 {
		t.Fatalf("slow workers %v, want [2]", got)
	}
	// The backup wins; the slow worker's report comes after.
	for w, tk := range held {
		if w != 2 && tk.ID != 0 {
			h.train(w, tk, 1)
		}
	}
	if r := h.step(ReportTask{Worker: 2, TaskID: backup.ID, Result: task.Result{Records: backup.Records()}}); !r.Superseded {
		t.Fatalf("the slow copy's report: %+v, want superseded", r)
	}
	s := h.summary()
	if s.Tasks.Backups == 0 || s.Tasks.BackupsWon != 1 || s.Tasks.Superseded != 1 {
		t.Fatalf("task counts %+v, want a backup that won and a report superseded", s.Tasks)
	}
	if len(s.SlowWorkers) == 0 || s.SlowWorkers[0].Worker != 2 || !s.SlowWorkers[0].Slow || s.SlowWorkers[0].MedianOthers != 1 {
		t.Fatalf("slow marks %+v, want worker 2 marked against a median of 1 record/s", s.SlowWorkers)
	}
	if e := s.Epochs[0]; e.RecordsTrained != 400 || e.RecordsTrainedTwice != 0 {
		t.Fatalf("ledger %+v, want every record once", e)
	}
}

// TestSlowDetectionRandomized: seeded jobs of 3 to 8 workers whose task
// times jitter by ±30%, one of them (in most jobs) 3 to 10 times slower
// for its first 15 tasks and then well again. The slow one is marked by
// its sixth task and unmarked once recovered; no other worker is ever
// marked (no false positives).
func TestSlowDetectionRandomized(t *testing.T) {
	for seed := int64(0); seed < 200; seed++ {
		rng := rand.New(rand.NewSource(seed))
		n := 3 + rng.Intn(6)
		slowOne, factor := -1, 3+7*rng.Float64()
		if rng.Intn(4) > 0 {
			slowOne = rng.Intn(n)
		}
		j, err := New(testConfig())
		if err != nil {
			t.Fatal(err)
		}
		j.cfg.SlowWorkerFraction = 0.5
		now := time.Unix(0, 0)
		next := make([]time.Time, n) // when each worker's task ends
		done := make([]int, n)
		markedAt := -1
		for slices.Min(done) < 30 { // 15 tasks well: more than rateSpan
			w := 0
			for i := range n {
				if next[i].Before(next[w]) {
					w = i
				}
			}
			if next[w].After(now) {
				now = next[w]
			}
			d := 0.7 + 0.6*rng.Float64() // seconds per task of 100 records
			if w == slowOne && done[w] < 15 {
				d *= factor
			}
			dur := time.Duration(d * float64(time.Second))
			j.noteTaskTime(now.Add(dur), w, 100, now)
			next[w] = now.Add(dur)
			done[w]++
			if slow := j.SlowWorkers(); len(slow) > 0 && markedAt < 0 && w == slowOne {
				markedAt = done[w]
			}
		}
		for _, m := range j.summary.SlowWorkers {
			if m.Worker != slowOne {
				t.Fatalf("seed %d: worker %d of %d marked %+v, slow one %d (×%.1f)", seed, m.Worker, n, m, slowOne, factor)
			}
		}
		if slowOne < 0 {
			continue
		}
		if markedAt < 0 || markedAt > 6 {
			t.Fatalf("seed %d: slow worker %d (×%.1f) of %d marked at its task %d, want by its sixth", seed, slowOne, factor, n, markedAt)
		}
		if len(j.SlowWorkers()) != 0 {
			t.Fatalf("seed %d: worker %d still marked after it recovered: %+v", seed, slowOne, j.summary.SlowWorkers)
		}
	}
}

// TestRingSlowDetectionRandomized: seeded rings of 3 to 8 members, rank
// 0 reporting every 150-300 ms, each member's part of a step jittering by
// ±30 %, and one member's part dipping to 0.3 for up to 2 s (a pause, a
// hiccup) now and then, at least 2 s apart. In most rings one member is slow from
// the first step on, but its part shrinks to 0.2-0.4 of the others' only
// once the shares turn (the workers' side) 1-4 s in: it is marked within
// 10 s of that (ringRateSpan + ringSlowFor + 1 s, unless another member's
// dip lowered the others' median and restarted its streak), and no other
// member ever is.
func TestRingSlowDetectionRandomized(t *testing.T) {
	var marks []float64
	for seed := int64(0); seed < 300; seed++ {
		rng := rand.New(rand.NewSource(seed))
		n := 3 + rng.Intn(6)
		slowOne, ratio := -1, 0.2+0.2*rng.Float64()
		if rng.Intn(4) > 0 {
			slowOne = rng.Intn(n)
		}
		h := allReduceJob(t, n, func(c *Config) { c.SlowWorkerFraction, c.ParkSlowWorkers = 0.5, false })
		start := h.now
		turn := start.Add(time.Second + time.Duration(rng.Int63n(int64(3*time.Second))))
		dipper, dipUntil := rng.Intn(n), time.Time{}
		var markedAt time.Duration = -1
		for h.now.Sub(start) < 30*time.Second {
			h.advance(time.Duration(150+rng.Intn(151)) * time.Millisecond)
			if h.now.Sub(dipUntil) > 2*time.Second && rng.Intn(40) == 0 {
				dipUntil = h.now.Add(time.Duration(rng.Int63n(int64(2 * time.Second))))
			}
			parts := map[int]int64{}
			for w := range n {
				f := 0.7 + 0.6*rng.Float64()
				switch {
				case w == slowOne && h.now.After(turn):
					f *= ratio
				case w == dipper && w != slowOne && h.now.Before(dipUntil):
					f *= 0.3
				}
				parts[w] = max(1, int64(math.Round(40*f)))
			}
			h.j.noteRingParts(h.now, parts)
			if markedAt < 0 && slices.Contains(h.j.SlowWorkers(), slowOne) {
				markedAt = h.now.Sub(turn)
			}
		}
		for _, m := range h.j.summary.SlowWorkers {
			if m.Worker != slowOne {
				t.Fatalf("seed %d: member %d of %d marked %+v, slow one %d (×%.2f)", seed, m.Worker, n, m, slowOne, ratio)
			}
		}
		if slowOne >= 0 && (markedAt < 0 || markedAt > 10*time.Second) {
			t.Fatalf("seed %d: slow member %d (×%.2f) of %d marked %v after the shares turned, want within 10 s", seed, slowOne, ratio, n, markedAt)
		}
		if slowOne >= 0 {
			marks = append(marks, markedAt.Seconds())
		}
	}
	slices.Sort(marks)
	t.Logf("marked after the shares turned: median %.1f s, 90th percentile %.1f s, max %.1f s of %d",
		marks[len(marks)/2], marks[len(marks)*9/10], marks[len(marks)-1], len(marks))
}
