package dashboard

import (
	"encoding/json"
	"math"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Fake documents, shaped as the job's master and the autoscaler publish
// them (docs/dashboard.md), for the pages' browser tests and the
// screenshots in docs/images.

var fakeT0 = time.Date(2026, 3, 2, 9, 30, 0, 0, time.UTC)

type obj = map[string]any

func at(s float64) string {
	return fakeT0.Add(time.Duration(s * float64(time.Second))).Format(time.RFC3339Nano)
}

// fakeJob is a job 90 s in: worker 0 killed at 40 s and relaunched, a
// scale-up whose worker was let go, a PS re-shard, a master failover at
// 70 s (a gap), two evaluations.
type fakeJob struct {
	samples  []obj
	events   []obj
	segments map[string][]obj // by "role/slot"
	evals    []obj
	reshards []obj
	ring     []obj
	elapsed  float64
	phase    string
}

func newFakeJob() *fakeJob {
	j := &fakeJob{segments: map[string][]obj{}, phase: "training"}
	for s := 0; s <= 90; s++ {
		j.sample(s)
	}
	ev := func(s float64, kind, role string, id, slot int, cause, reason string, warn bool) {
		e := obj{"seq": len(j.events) + 1, "at": at(s), "kind": kind, "id": id, "slot": slot}
		for k, v := range map[string]string{"role": role, "cause": cause, "reason": reason} {
			if v != "" {
				e[k] = v
			}
		}
		if warn {
			e["warning"] = true
			e["exit_code"] = -1
			e["detail"] = "killed by signal: killed"
		}
		j.events = append(j.events, e)
	}
	ev(0, "phase", "", 0, 0, "training", "", false)
	for i, role := range []string{"ps", "worker", "worker"} {
		ev(0, "launched", role, max(i-1, 0), max(i-1, 0), "start", "", false)
	}
	for i, role := range []string{"ps", "worker", "worker"} {
		ev(2, "running", role, max(i-1, 0), max(i-1, 0), "", "", false)
	}
	ev(40, "exited", "worker", 0, 0, "killed", "instance lost, relaunching (worker relaunch 1 of 200)", true)
	ev(40, "launched", "worker", 2, 0, "relaunch", "", false)
	ev(44, "running", "worker", 2, 0, "", "", false)
	ev(52, "reshard", "ps", 0, 0, "target", "", false)
	ev(52, "launched", "ps", 1, 1, "scale-up", "", false)
	ev(54, "running", "ps", 1, 1, "", "", false)
	ev(60, "epoch", "", 0, 0, "", "", false)
	ev(60, "eval", "", 0, 0, "periodic", "", false)
	ev(61, "target", "worker", 0, 0, "autoscaler", "", false)
	ev(61, "launched", "worker", 3, 2, "scale-up", "", false)
	ev(64, "running", "worker", 3, 2, "", "", false)
	ev(70, "resumed", "", 0, 0, "", "MasterResumed", false)
	ev(80, "let-go", "worker", 3, 2, "autoscaler", "target 2 (autoscaler)", false)
	seg := func(key string, id int, launched, running, ended float64, launch, cause, reason string, lost bool) {
		s := obj{"id": id, "launch_cause": launch, "launched": at(launched), "running": nil, "ended": nil}
		if running >= 0 {
			s["running"] = at(running)
		}
		if ended >= 0 {
			s["ended"], s["cause"], s["reason"], s["lost"] = at(ended), cause, reason, lost
		}
		j.segments[key] = append(j.segments[key], s)
	}
	seg("worker/0", 0, 0, 2, 40, "start", "killed", "instance lost, relaunching (worker relaunch 1 of 200)", true)
	seg("worker/0", 2, 40, 44, -1, "relaunch", "", "", false)
	seg("worker/1", 1, 0, 2, -1, "start", "", "", false)
	seg("worker/2", 3, 61, 64, 80, "scale-up", "let-go", "target 2 (autoscaler)", false)
	seg("ps/0", 0, 0, 1, -1, "start", "", "", false)
	seg("ps/1", 1, 52, 54, -1, "scale-up", "", "", false)
	j.evals = []obj{
		{"version": 310, "accuracy": 0.79, "loss": 0.61, "records": 10000, "records_trained": 60000},
		{"version": 520, "accuracy": 0.84, "loss": 0.47, "records": 10000, "records_trained": 105000},
	}
	j.reshards = []obj{{"layout": 1, "from": 1, "to": 2, "at": at(52), "seconds": 1.6, "paused_seconds": 0.4}}
	j.ring = []obj{}
	j.elapsed = 90.4
	return j
}

// sample adds the sample at s seconds: ~1,500 records/s with 2 workers,
// 1 between 40 and 44 s and 3 between 64 and 80; a gap at 71 s.
func (j *fakeJob) sample(s int) {
	workers := 2
	switch {
	case s >= 40 && s < 44:
		workers = 1
	case s >= 64 && s < 80:
		workers = 3
	}
	rps := float64(workers)*720 + 40*math.Sin(float64(s))
	var records float64
	if n := len(j.samples); n > 0 {
		records = float64(j.samples[n-1]["records"].(int64)) + rps
	}
	loss := 0.35 + 1.9*math.Exp(-records/25000) + 0.03*math.Cos(float64(3*s))
	smp := obj{"t": at(float64(s)), "records": int64(records), "loss": loss, "rps": math.Round(rps*100) / 100,
		"workers_running": workers, "workers_pending": 0, "ps_running": 1, "target": 2, "epoch": 1 + int(records)/60000}
	switch {
	case s == 0:
		smp["loss"], smp["rps"] = nil, nil
	case s == 71:
		smp["loss"], smp["rps"], smp["gap"] = nil, nil, true
	}
	j.samples = append(j.samples, smp)
}

// counts says how many loss and records/s points the page should draw.
func (j *fakeJob) counts() (loss, rps int) {
	for _, s := range j.samples {
		if s["loss"] != nil {
			loss++
		}
		if s["rps"] != nil {
			rps++
		}
	}
	return loss, rps
}

func (j *fakeJob) jobDoc() obj {
	last := j.samples[len(j.samples)-1]
	records := last["records"].(int64)
	var eta any = (180000 - float64(records)) / 1500
	if j.phase != "training" {
		eta = nil
	}
	return obj{"job": "mnist-demo", "mode": "train", "model": "fashion_mnist.mlp", "strategy": "ps-sync",
		"phase": j.phase, "started_at": at(0), "elapsed_seconds": j.elapsed, "eta_seconds": eta,
		"epoch": last["epoch"], "num_epochs": 3, "epochs_done": 1, "records_done": records, "records_total": 180000,
		"epochs": []obj{
			{"epoch": 1, "records": 60000, "trained": 60000, "twice": 1200, "missed": 0, "final": true},
			{"epoch": 2, "records": 60000, "trained": records - 60000, "twice": 0, "missed": 0, "final": false}},
		"workers": obj{"target": 2, "min": 1, "max": 3, "running": 2, "pending": 0},
		"ps":      obj{"count": 2, "target": 2, "running": 2, "pending": 0, "layout": 1},
		"ring":    obj{"version": 0, "world_size": 0}, "model_version": 561}
}

func (j *fakeJob) timeline() obj {
	keys := make([]string, 0, len(j.segments))
	for k := range j.segments {
		keys = append(keys, k)
	}
	// Workers first ("worker" > "ps"), then by slot (all below 10).
	sort.Slice(keys, func(a, b int) bool {
		ra, sa, _ := strings.Cut(keys[a], "/")
		rb, sb, _ := strings.Cut(keys[b], "/")
		return ra > rb || ra == rb && sa < sb
	})
	slots := []obj{}
	for _, k := range keys {
		role, slot, _ := strings.Cut(k, "/")
		n, _ := strconv.Atoi(slot)
		slots = append(slots, obj{"role": role, "slot": n, "segments": j.segments[k]})
	}
	return obj{"slots": slots, "ring": j.ring, "reshards": j.reshards}
}

func (j *fakeJob) summary(status string) obj {
	return obj{"job": "mnist-demo", "mode": "train", "status": status, "error": "", "duration_seconds": j.elapsed,
		"records_per_second": 1489.5, "model_version": 561, "master_restarts": 1,
		"workers": obj{"launched": 4, "lost": 2, "relaunched": 1, "preempted": 1, "max_running": 3, "parked": 0},
		"slow_workers": []obj{
			{"worker": 1, "slow": true, "at": at(50), "records_per_second": 310.5, "median_others": 980},
			{"worker": 1, "slow": false, "at": at(70), "records_per_second": 850, "median_others": 990},
			{"worker": 3, "slow": true, "at": at(75), "records_per_second": 120, "median_others": 1010}},
		"ps":          obj{"launched": 2, "lost": 0, "relaunched": 0, "preempted": 0},
		"tasks":       obj{"completed": 180, "failed": 0, "requeued": 3},
		"eval":        obj{"accuracy": 0.86, "loss": 0.41, "records": 10000, "model_version": 561},
		"evaluations": j.evals}
}

// docs are the job's documents, as the master publishes them.
func (j *fakeJob) docs(t *testing.T, status string) map[string]json.RawMessage {
	return encodeDocs(t, obj{"job": j.jobDoc(), "events": obj{"oldest": 1, "events": j.events},
		"series":   obj{"stride_seconds": 1, "samples": j.samples, "evals": j.evals},
		"timeline": j.timeline(), "summary": j.summary(status)})
}

func encodeDocs(t *testing.T, m obj) map[string]json.RawMessage {
	t.Helper()
	docs := map[string]json.RawMessage{}
	for k, v := range m {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		docs[k] = b
	}
	return docs
}

func encode(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
