package experiment

// MeasuredCosts are what the simulator charges for the control plane's
// own latencies (Predict), measured in e's runs over all modes (they are
// the control plane's, not a policy's). start: how long the first job of
// a run, in an empty cluster, took beyond the modelled training at the
// workers it held: from its submission to its first worker running, plus
// the time its running workers did not train (a pod running before its
// worker trains); the mean over runs. It is not the first task's time,
// which the simulator trains itself. end: from a job's last task to its
// Job's end (the master's wind-down), the mean over all jobs. Zero where
// the runs do not tell.
func (e SharedCluster) MeasuredCosts() (start, end float64) {
	var starts, ends []float64
	for _, r := range e.Runs {
		if x, ok := e.startCost(r, 0); ok {
			starts = append(starts, x)
		}
		for _, j := range r.Jobs {
			if j.Trained > 0 && j.Ended >= j.Trained {
				ends = append(ends, j.Ended-j.Trained)
			}
		}
	}
	return SpreadOf(starts).Mean, SpreadOf(ends).Mean
}

// startCost is job i of r's start cost (see MeasuredCosts): from its
// submission to its last task, less the time its records take at the
// modelled rate of the workers the timeline shows running from the first
// on.
func (e SharedCluster) startCost(r Run, i int) (float64, bool) {
	if i >= len(r.Jobs) || i >= len(e.Specs) || len(r.Timeline) < 2 {
		return 0, false
	}
	j, curve := r.Jobs[i], e.Curve(e.Specs[i])
	records := float64(e.Specs[i].Epochs) * float64(e.RecordsPerEpoch)
	first, done := r.FirstRunning(i), 0.0
	if first < 0 || j.Trained <= 0 {
		return 0, false
	}
	for k, s := range r.Timeline[:len(r.Timeline)-1] {
		next := r.Timeline[k+1].T
		if next <= j.Submitted {
			continue
		}
		v := curve.Throughput(s.workers(i))
		from := max(s.T, j.Submitted)
		if v > 0 && done+v*(next-from) >= records {
			at := from + (records-done)/v
			return j.Trained - j.Submitted - (at - first), true
		}
		done += v * (next - from)
	}
	return 0, false
}
