package job

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"time"
)

// Slow workers (stragglers). A worker's rate is the records/s of its
// recent training tasks, each timed from when it was handed out, or from
// the worker's previous report if that came later (a worker asks for its
// next task while one trains), to its report (time enters through the
// Steps' now); on AllReduce, of its parts of the applied steps. A worker
// is judged at each of its reports against the median of the other
// workers' rates: below fraction × median (--slow_worker_fraction) on a
// window's streak of reports in a row spanning its slowFor marks it slow;
// above unmarkFactor × fraction unmarks it (the gap is the hysteresis: a
// worker near the bar does not flap). The marks drive backup tasks
// (backup.go) and parking (park.go) and show in the summary and the
// metrics; they are not persisted (a master that takes over measures
// afresh).
const (
	// rateSpan: a rate covers the worker's newest tasks that took at
	// least this long together (at least one task): tasks of tens of
	// milliseconds would otherwise give a rate that follows every
	// scheduling hiccup, and a worker throttled in bursts (a CPU quota's
	// period) would flap.
	rateSpan = 10 * time.Second
	// maxSamples bounds a rate's tasks however short they are.
	maxSamples = 1024
	// slowStreak and slowFor: one slow task is noise (a GC pause, a
	// checkpoint, a cold page cache, a PS re-shard); a worker is marked
	// once below the bar on two reports in a row and for slowFor — two
	// tasks when they are long, several rateSpans' worth when they are
	// short.
	slowStreak = 2
	slowFor    = 10 * time.Second
	// ringRateSpan, ringSlowStreak and ringSlowFor: the same on AllReduce,
	// where ring rank 0 reports the applied steps every 200 ms. A rate over
	// 2 s of steps already averages ten reports; the member must then stay
	// below the bar on every report for 3 s (15 reports). The task windows
	// would mark a throttled member 20 s in, when a job of minutes has
	// lost a third of a minute at the slowest member's pace (issue 34:
	// every step waits for it).
	ringRateSpan   = 2 * time.Second
	ringSlowStreak = 10
	ringSlowFor    = 3 * time.Second
	// unmarkFactor: unmarked above fraction × 1.4 (0.5 → 0.7).
	unmarkFactor = 1.4
	// minRated: with two workers, "the median of the others" is the other
	// one, and either of two workers could be the slow one; three rated
	// workers are needed to say which one is off.
	minRated = 3
	// maxSlowMarks bounds the summary's history of marks.
	maxSlowMarks = 200
	// typicalWindow: the accepted training tasks whose durations give the
	// typical task time (backup.go).
	typicalWindow = 32
)

// rateWindow is how rates are made and judged: a rate covers the newest
// samples that took span together; a worker is marked slow once below the
// bar on streak reports in a row spanning slowFor.
type rateWindow struct {
	span    time.Duration
	streak  int
	slowFor time.Duration
}

// windowFor is the window of a job's rates: its tasks' in PS mode, its
// ring's applied steps on AllReduce.
func windowFor(allReduce bool) rateWindow {
	if allReduce {
		return rateWindow{span: ringRateSpan, streak: ringSlowStreak, slowFor: ringSlowFor}
	}
	return rateWindow{span: rateSpan, streak: slowStreak, slowFor: slowFor}
}

// rateSample is one training task: its records and how long it took.
type rateSample struct {
	records int64
	secs    float64
}

// workerRate is what the core knows of one worker's speed.
type workerRate struct {
	// warm: its first task is done. That one carries the worker's start
	// (connecting, the first pull of the whole model, warming caches),
	// not its speed: a worker relaunched mid-job would look slow.
	warm bool
	// samples: the newest tasks covering rateSpan, and their sums.
	samples []rateSample
	records int64
	secs    float64
	// below: consecutive reports below the bar, since belowSince.
	below      int
	belowSince time.Time
	slow       bool
	slowSince  time.Time // when it was marked, while it is
	// lagging: below the trial bar (trial.go), on lagBelow reports since
	// lagSince.
	lagging  bool
	lagBelow int
	lagSince time.Time
	// last: its previous timed report; gone: it exited (kept for the
	// summary, out of the judging and the metrics).
	last time.Time
	gone bool
}

// add adds a sample to the window, dropping the oldest ones the newer
// cover span without.
func (w *workerRate) add(s rateSample, span time.Duration) {
	w.samples = append(w.samples, s)
	w.records += s.records
	w.secs += s.secs
	for len(w.samples) > 1 && (w.secs-w.samples[0].secs >= span.Seconds() || len(w.samples) > maxSamples) {
		w.records -= w.samples[0].records
		w.secs -= w.samples[0].secs
		w.samples = w.samples[1:]
	}
}

func (w *workerRate) rate() (float64, bool) {
	if len(w.samples) == 0 || w.secs <= 0 {
		return 0, false
	}
	return float64(w.records) / w.secs, true
}

// slowTracker keeps every worker's rate and the recent task times.
type slowTracker struct {
	workers   map[int]*workerRate
	durations []time.Duration // the newest typicalWindow, oldest first
	// ringAt: the last ReportApplied that brought new steps (AllReduce);
	// ring: the whole ring's records/s over them.
	ringAt time.Time
	ring   workerRate
}

// worker is worker's rate, made on first use.
func (t *slowTracker) worker(id int) *workerRate {
	if t.workers == nil {
		t.workers = map[int]*workerRate{}
	}
	w := t.workers[id]
	if w == nil {
		w = &workerRate{}
		t.workers[id] = w
	}
	return w
}

// judgeSlow decides a worker's mark from its rate and the other workers'
// (each with a rate), given its streak of reports below the bar so far
// and for how long (belowFor), under window win: it returns the mark, the
// new streak and the others' median; judged is false (mark and streak
// unchanged) when fewer than minRated workers have a rate or the
// detection is off (fraction <= 0).
func judgeSlow(win rateWindow, rate float64, others []float64, fraction float64, was bool, below int, belowFor time.Duration) (slow bool, streak int, median float64, judged bool) {
	if fraction <= 0 || len(others)+1 < minRated {
		return was, below, 0, false
	}
	median = medianOf(others)
	switch {
	case rate < fraction*median:
		streak = below + 1
	case was && rate <= unmarkFactor*fraction*median:
		return true, 0, median, true // between the bars: stays slow
	}
	return was && streak > 0 || streak >= win.streak && belowFor >= win.slowFor, streak, median, true
}

func medianOf(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// SlowMark is a worker marked slow, or unmarked: when, its rate then, and
// the median of the other workers' rates it was judged against.
type SlowMark struct {
	Worker           int       `json:"worker"`
	Slow             bool      `json:"slow"`
	At               time.Time `json:"at"`
	RecordsPerSecond float64   `json:"records_per_second"`
	MedianOthers     float64   `json:"median_others"`
}

// WorkerRate is a worker's recent training rate and mark; Gone: it has
// exited (its last ones).
type WorkerRate struct {
	Worker           int     `json:"worker"`
	RecordsPerSecond float64 `json:"records_per_second"`
	Slow             bool    `json:"slow"`
	Gone             bool    `json:"gone,omitempty"`
}

// noteTaskTime records that worker trained records of a task handed out
// at since (an accepted training report at now) and judges it.
func (j *Job) noteTaskTime(now time.Time, worker int, records int64, since time.Time) {
	t := &j.slow
	w := t.worker(worker)
	if w.last.After(since) {
		since = w.last // it trained the one before until then
	}
	w.last = now
	d := now.Sub(since)
	t.durations = append(t.durations, max(d, 0))
	if len(t.durations) > typicalWindow {
		t.durations = t.durations[1:]
	}
	if j.cfg.AllReduce {
		return // rated from the applied steps (noteRingParts)
	}
	if !w.warm || d <= 0 { // its first task, or no time passed: no rate
		w.warm = true
		return
	}
	w.add(rateSample{records: records, secs: d.Seconds()}, windowFor(false).span)
	j.judgeRate(now, worker, w)
}

// noteRingParts rates AllReduce members from the steps a ReportApplied
// newly brought: each member's records in them over the time since the
// previous such report. A task's time says little on AllReduce (every
// step waits for the slowest member, so every member's task takes the
// ring's time, and a slow member's tasks take many seconds each); a
// member's part of each step says how fast it computes once the shares go
// by rate (the workers' side), and rank 0 reports every 200 ms. A member
// with no records in them (no task) is not rated.
func (j *Job) noteRingParts(now time.Time, records map[int]int64) {
	t := &j.slow
	last := t.ringAt
	t.ringAt = now
	if last.IsZero() || !now.After(last) {
		return
	}
	secs := now.Sub(last).Seconds()
	var total int64
	for _, n := range records {
		total += max(n, 0)
	}
	t.ring.add(rateSample{records: total, secs: secs}, ringRateSpan)
	j.noteTrialParts(now, total, secs)
	for _, worker := range slices.Sorted(maps.Keys(records)) {
		if _, alive := j.workers[worker]; !alive || records[worker] <= 0 {
			continue // a member gone since (its records came late), or idle
		}
		w := t.worker(worker)
		if !w.warm { // its first steps: it may have joined meanwhile
			w.warm = true
			continue
		}
		w.add(rateSample{records: records[worker], secs: secs}, windowFor(true).span)
		j.judgeRate(now, worker, w)
	}
}

// judgeRate judges worker's new rate against the others' and marks or
// unmarks it.
func (j *Job) judgeRate(now time.Time, worker int, w *workerRate) {
	rate, _ := w.rate()
	var others []float64
	for id, o := range j.slow.workers {
		if r, ok := o.rate(); ok && id != worker && !o.gone {
			others = append(others, r)
		}
	}
	if w.below == 0 {
		w.belowSince = now // from this report, should it be below
	}
	slow, streak, median, judged := judgeSlow(windowFor(j.cfg.AllReduce), rate, others, j.cfg.SlowWorkerFraction, w.slow, w.below, now.Sub(w.belowSince))
	if !judged {
		return
	}
	w.below = streak
	if slow != w.slow {
		w.slow, w.slowSince = slow, time.Time{}
		if slow {
			w.slowSince = now
		}
		j.markSlow(now, worker, slow, rate, median)
	}
	if j.cfg.AllReduce && j.cfg.ParkTrials && !w.slow {
		j.judgeLag(now, worker, w, rate, others)
	}
}

// markSlow records a change of worker's mark.
func (j *Job) markSlow(now time.Time, worker int, slow bool, rate, median float64) {
	round := func(x float64) float64 { return math.Round(x*1000) / 1000 }
	s := &j.summary
	s.SlowWorkers = append(s.SlowWorkers, SlowMark{Worker: worker, Slow: slow, At: now.UTC(), RecordsPerSecond: round(rate), MedianOthers: round(median)})
	if len(s.SlowWorkers) > maxSlowMarks {
		s.SlowWorkers = s.SlowWorkers[len(s.SlowWorkers)-maxSlowMarks:]
	}
	if slow {
		j.noticeOccur(true, "WorkerSlow", fmt.Sprintf("worker-%d is slow: %.1f records/s, the others' median %.1f", worker, rate, median))
		j.maybePark(now, worker)
		return
	}
	j.noticeOccur(false, "WorkerRecovered", fmt.Sprintf("worker-%d is no longer slow: %.1f records/s, the others' median %.1f", worker, rate, median))
}

// SlowWorkers returns the live workers marked slow now, in ID order.
func (j *Job) SlowWorkers() []int {
	var out []int
	for _, id := range slices.Sorted(maps.Keys(j.slow.workers)) {
		if w := j.slow.workers[id]; w.slow && !w.gone {
			out = append(out, id)
		}
	}
	return out
}

// workerRates returns the workers' last rates, in ID order: those gone
// too when all is set (the summary), else the live ones (the metrics).
func (j *Job) workerRates(all bool) []WorkerRate {
	var out []WorkerRate
	for _, id := range slices.Sorted(maps.Keys(j.slow.workers)) {
		w := j.slow.workers[id]
		if r, ok := w.rate(); ok && (all || !w.gone) {
			out = append(out, WorkerRate{Worker: id, RecordsPerSecond: math.Round(r*1000) / 1000, Slow: w.slow, Gone: w.gone})
		}
	}
	return out
}

// typicalTaskTime is the median duration of the recent training tasks
// (false with fewer than minRated of them).
func (j *Job) typicalTaskTime() (time.Duration, bool) {
	if len(j.slow.durations) < minRated {
		return 0, false
	}
	s := make([]float64, len(j.slow.durations))
	for i, d := range j.slow.durations {
		s[i] = float64(d)
	}
	return time.Duration(medianOf(s)), true
}

// forgetRate notes that a worker is gone.
func (j *Job) forgetRate(worker int) {
	if w := j.slow.workers[worker]; w != nil {
		w.gone = true
	}
}
