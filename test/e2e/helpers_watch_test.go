package e2e

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"elasticdl/internal/cluster/k8s"
	"elasticdl/internal/master"
)

// ---- watching a job -------------------------------------------------------------------------

// jobPods lists the job's pods of a replica type (master, worker, ps).
func jobPods(t *testing.T, ns, name, replicaType string) []pod {
	t.Helper()
	var l podList
	getJSON(t, &l, "pods", "-n", ns, "-l",
		"app.kubernetes.io/name=elasticdl,elasticdl.io/job-name="+name+",elasticdl.io/replica-type="+replicaType)
	return l.Items
}

func (j *job) pods(replicaType string) []pod { return jobPods(j.t, j.ns, j.name, replicaType) }

func countRunning(ps []pod) (running, unschedulable int) {
	for _, p := range ps {
		if p.running() {
			running++
		}
		if p.unschedulable() {
			unschedulable++
		}
	}
	return
}

// events returns the events about the job's master Job (the master's
// own, and the Job controller's).
func (j *job) events() []event {
	var l struct{ Items []event }
	getJSON(j.t, &l, "events", "-n", j.ns, "--field-selector", "involvedObject.kind=Job,involvedObject.name="+j.masterJob())
	return l.Items
}

// jobResult is how a job ended.
type jobResult struct {
	Phase   string // of the master Job: Succeeded (Complete) or Failed
	Summary master.Summary
	Raw     string // the summary JSON; empty when there is no summary ConfigMap
	// FirstTaskTrainedAt is the summary's first_task_trained_at (zero if absent).
	FirstTaskTrainedAt time.Time
	Took               time.Duration // from submission to the end of the master pod
}

// waitJob waits for the master Job to end (Complete or Failed) and returns
// the summary from ConfigMap elasticdl-JOB-summary, key job_summary.json.
// On timeout it fails the test with the master's log.
func waitJob(t *testing.T, j *job, timeout time.Duration) jobResult {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var mj masterJobState
	for {
		if getJSON(t, &mj, "job", "-n", j.ns, j.masterJob()) {
			if mj.ended() != "" {
				break
			}
		} else if time.Since(j.submitEnd) > 30*time.Second {
			t.Fatalf("master Job %s/%s does not exist 30 s after the job was submitted", j.ns, j.masterJob())
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s did not finish within %s (master Job %+v); master log:\n%s",
				j.name, timeout, mj.Status, tail(j.podLog(j.masterPod()), 60))
		}
		time.Sleep(time.Second)
	}
	r := jobResult{Phase: mj.ended(), Took: time.Since(j.submitted)}
	var cm struct{ Data map[string]string }
	if getJSON(t, &cm, "configmap", "-n", j.ns, "elasticdl-"+j.name+"-summary") {
		r.Raw = cm.Data["job_summary.json"]
		if r.Raw == "" {
			t.Fatalf("ConfigMap elasticdl-%s-summary has no key job_summary.json (keys: %v)", j.name, keys(cm.Data))
		}
		if err := json.Unmarshal([]byte(r.Raw), &r.Summary); err != nil {
			t.Fatalf("decode job_summary.json: %v\n%s", err, r.Raw)
		}
		var extra struct {
			FirstTaskTrainedAt string `json:"first_task_trained_at"`
		}
		json.Unmarshal([]byte(r.Raw), &extra)
		if extra.FirstTaskTrainedAt != "" {
			ts, err := time.Parse(time.RFC3339Nano, extra.FirstTaskTrainedAt)
			if err != nil {
				t.Errorf("first_task_trained_at %q is not RFC3339: %v", extra.FirstTaskTrainedAt, err)
			}
			r.FirstTaskTrainedAt = ts
		}
	}
	t.Logf("job %s ended %s %.1fs after submission: %s", j.name, r.Phase, r.Took.Seconds(), summaryLine(r.Summary))
	return r
}

// waitSucceeded is waitJob that requires a succeeded job with a summary.
func waitSucceeded(t *testing.T, j *job, timeout time.Duration) jobResult {
	t.Helper()
	r := waitJob(t, j, timeout)
	if r.Phase != "Succeeded" || r.Raw == "" || r.Summary.Status != "succeeded" {
		t.Fatalf("job %s: master Job %s, summary status %q error %q (summary present: %v); master log:\n%s",
			j.name, r.Phase, r.Summary.Status, r.Summary.Error, r.Raw != "", tail(j.podLog(j.masterPod()), 60))
	}
	return r
}

func summaryLine(s master.Summary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "status=%s", s.Status)
	if s.Error != "" {
		fmt.Fprintf(&b, " error=%q", s.Error)
	}
	for _, e := range s.Epochs {
		fmt.Fprintf(&b, " epoch%d=%d/%d(twice %d, missed %d)", e.Epoch, e.RecordsTrained, e.Records, e.RecordsTrainedTwice, e.RecordsMissed)
	}
	if s.Eval != nil {
		fmt.Fprintf(&b, " accuracy=%.4f", s.Eval.Accuracy)
	}
	fmt.Fprintf(&b, " workers=%+v ps=%+v tasks=%+v duration=%.1fs", s.Workers, s.PS, s.Tasks, s.DurationSeconds)
	return b.String()
}

func keys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// assertTrained checks exactly-once training of every epoch and the final
// test accuracy.
func assertTrained(t *testing.T, r jobResult, epochs int, minAccuracy float64) {
	t.Helper()
	s := r.Summary
	if len(s.Epochs) != epochs {
		t.Errorf("summary has %d epochs, want %d: %s", len(s.Epochs), epochs, r.Raw)
	}
	for _, e := range s.Epochs {
		if e.Records != 60000 || e.RecordsTrained != e.Records || e.RecordsTrainedTwice != 0 || e.RecordsMissed != 0 {
			t.Errorf("epoch %d is not exactly-once: records %d, trained %d, twice %d, missed %d",
				e.Epoch, e.Records, e.RecordsTrained, e.RecordsTrainedTwice, e.RecordsMissed)
		}
	}
	if s.Eval == nil {
		t.Errorf("summary has no final evaluation: %s", r.Raw)
	} else if s.Eval.Accuracy < minAccuracy || s.Eval.Records != 10000 {
		t.Errorf("final evaluation: accuracy %.4f on %d records, want >= %.2f on 10000", s.Eval.Accuracy, s.Eval.Records, minAccuracy)
	}
}

// waitFor polls cond every 250 ms until it returns true; after timeout it
// fails the test with what and cond's last description.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	last := ""
	for {
		ok, desc := cond()
		if ok {
			return time.Since(start)
		}
		last = desc
		if time.Since(start) > timeout {
			t.Fatalf("timed out after %s waiting for %s; last seen: %s", timeout, what, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitWorkers waits until the job has `running` worker pods Running and
// `unschedulable` Pending unschedulable ones.
func (j *job) waitWorkers(timeout time.Duration, running, unschedulable int) []pod {
	j.t.Helper()
	var ps []pod
	took := waitFor(j.t, timeout, fmt.Sprintf("%d worker pods Running and %d unschedulable", running, unschedulable), func() (bool, string) {
		ps = j.pods("worker")
		r, u := countRunning(ps)
		return r == running && u == unschedulable, fmt.Sprint(ps)
	})
	j.t.Logf("%.1fs after submission: %v (waited %.1fs)", time.Since(j.submitted).Seconds(), ps, took.Seconds())
	return ps
}

// waitTraining waits until the master's log reports training progress (a
// progress line with records done > 0).
var progressRE = regexp.MustCompile(`records_done=([1-9][0-9]*)`)

// recordsDoneRE reads a progress line's records done over all epochs.
var recordsDoneRE = regexp.MustCompile(`records_done=([0-9]+)`)

// recordsDone is the records trained, over all epochs, as of the master's
// last progress line.
func (j *job) recordsDone() int64 {
	m := recordsDoneRE.FindAllStringSubmatch(j.podLog(j.masterPod()), -1)
	if len(m) == 0 {
		return 0
	}
	n, _ := strconv.ParseInt(m[len(m)-1][1], 10, 64)
	return n
}

func (j *job) waitTraining(timeout time.Duration) {
	j.t.Helper()
	waitFor(j.t, timeout, "the master to report training progress", func() (bool, string) {
		l := j.podLog(j.masterPod())
		return progressRE.MatchString(l), tail(l, 3)
	})
	j.t.Logf("%.1fs after submission: training in progress", time.Since(j.submitted).Seconds())
}

// waitSized waits until every job of jobs runs as many workers as it is
// asked for, none pending: size workers each, or (size 0) its master Job's
// target annotation, which an autoscaler sets. An experiment's clock
// starts from there, so that it measures the jobs' answer to the load and
// not how long they took to start on a busy machine.
func waitSized(t *testing.T, jobs []*job, size int, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, "every job at its size", func() (bool, string) {
		var b strings.Builder
		ok := true
		for _, j := range jobs {
			want := size
			if size == 0 {
				var mj masterJobState
				if getJSON(t, &mj, "job", "-n", j.ns, j.masterJob()) {
					want, _ = strconv.Atoi(mj.Metadata.Annotations[k8s.AnnotationTargetWorkers])
				}
			}
			running, pending := 0, 0
			for _, p := range j.pods("worker") {
				switch {
				case p.running():
					running++
				case p.Status.Phase == "Pending":
					pending++
				}
			}
			fmt.Fprintf(&b, "%s %d of %d running, %d pending; ", j.name, running, want, pending)
			ok = ok && want > 0 && running == want && pending == 0
		}
		return ok, b.String()
	})
}
