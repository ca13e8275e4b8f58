package k8s

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"

	"elasticdl/internal/autoscale"
)

// progressed is an autoscaled master Job that published remaining records
// left, measured at 100 records/s per worker at 2 and 4 workers.
func progressed(t *testing.T, name string, remaining int64) *batchv1.Job {
	t.Helper()
	mj := autoscaledMasterJob("ns", name, 1, 16, "cpu=1")
	v, err := autoscale.EncodeProgress(autoscale.Progress{Remaining: remaining, Min: 1, Max: 16, Samples: []autoscale.ProgressSample{
		{Workers: 2, RecordsPerSecond: 200, Count: 30, Seconds: 30},
		{Workers: 4, RecordsPerSecond: 400, Count: 30, Seconds: 30},
	}})
	if err != nil {
		t.Fatal(err)
	}
	mj.Annotations[AnnotationProgress] = v
	return mj
}

// TestAutoscalerPolicies: with the remaining policy, the job with little
// left gets more than its fair share and the one with much left less;
// jobs whose progress is missing or garbled (said once) get the equal
// share. The fair policy ignores the progress.
func TestAutoscalerPolicies(t *testing.T) {
	for _, c := range []struct {
		policy string
		want   map[string]int
	}{
		{PolicyFair, map[string]int{"ns/big": 4, "ns/small": 4, "ns/garbled": 4, "ns/quiet": 4}},
		{PolicyRemaining, map[string]int{"ns/big": 2, "ns/small": 6, "ns/garbled": 4, "ns/quiet": 4}},
	} {
		t.Run(c.policy, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			garbled := autoscaledMasterJob("ns", "garbled", 1, 16, "cpu=1")
			garbled.Annotations[AnnotationProgress] = `{"v":1,"remaining":"lots"}`
			cs := fake.NewClientset(testNode("n0", "8", true), testNode("n1", "8", true),
				progressed(t, "big", 1e8), progressed(t, "small", 1e4), garbled, autoscaledMasterJob("ns", "quiet", 1, 16, "cpu=1"))
			a := syncedAutoscaler(ctx, t, cs)
			var logged strings.Builder
			a.log = slog.New(slog.NewTextHandler(&logged, nil))
			a.policy, a.remaining = c.policy, autoscale.RemainingOptions{}
			for range 2 {
				ds, err := a.round(ctx)
				if err != nil {
					t.Fatal(err)
				}
				got := map[string]int{}
				for _, d := range ds {
					got[d.Key] = d.Target
				}
				for k, w := range c.want {
					if got[k] != w {
						t.Errorf("targets %v, want %v", got, c.want)
						break
					}
				}
			}
			n := strings.Count(logged.String(), "progress unreadable")
			if want := map[string]int{PolicyFair: 0, PolicyRemaining: 1}[c.policy]; n != want || (n == 1 && !strings.Contains(logged.String(), "job=ns/elasticdl-garbled-master")) {
				t.Errorf("logged %d warnings about the garbled progress, want %d:\n%s", n, want, logged.String())
			}
		})
	}
}

func TestCheckPolicy(t *testing.T) {
	for _, p := range []string{PolicyFair, PolicyRemaining} {
		if err := CheckPolicy(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if err := CheckPolicy("srpt"); err == nil || err.Error() != `policy "srpt": want fair or remaining` {
		t.Errorf("srpt: %v", err)
	}
}

func TestProgressOnly(t *testing.T) {
	old := autoscaledMasterJob("ns", "a", 1, 8, "cpu=1")
	old.ResourceVersion = "1"
	progressed := old.DeepCopy()
	progressed.ResourceVersion = "2"
	progressed.Annotations[AnnotationProgress] = `{"v":1}`
	retargeted := progressed.DeepCopy()
	retargeted.Annotations[AnnotationTargetWorkers] = "3"
	ended := progressed.DeepCopy()
	ended.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	for _, c := range []struct {
		name string
		o, n any
		want bool
	}{
		{"progress published", old, progressed, true},
		{"progress and target", old, retargeted, false},
		{"progress and status", old, ended, false},
		{"nothing but the version", old, old, false},
		{"not Jobs", old, "x", false},
	} {
		if got := progressOnly(c.o, c.n); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
