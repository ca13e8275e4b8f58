package k8s

import (
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"elasticdl/internal/autoscale"
)

// The autoscaler's policies (AutoscalerConfig.Policy).
const (
	// PolicyFair is max-min fair sharing (autoscale.Decide).
	PolicyFair = "fair"
	// PolicyRemaining sizes jobs by the work they have left and their
	// measured speed-up, heSRPT-style (autoscale.DecideRemaining), from
	// each job's AnnotationProgress.
	PolicyRemaining = "remaining"
)

// CheckPolicy says what is wrong with a policy's name.
func CheckPolicy(p string) error {
	if p != PolicyFair && p != PolicyRemaining {
		return fmt.Errorf("policy %q: want %s or %s", p, PolicyFair, PolicyRemaining)
	}
	return nil
}

// decide is the policy's decision for s, whose jobs are jobs (by index);
// u says how many workers each job runs now.
func (a *autoscaler) decide(s autoscale.Snapshot, jobs []*batchv1.Job, u clusterUsage) []autoscale.Decision {
	if a.policy != PolicyRemaining {
		return autoscale.Decide(s)
	}
	work := make([]autoscale.Work, len(s.Jobs))
	for i, j := range s.Jobs {
		work[i] = a.work(jobs[i], u.bound[j.Key])
	}
	return autoscale.DecideRemaining(s, work, a.remaining)
}

// work is what the remaining policy knows of the job j, which runs current
// workers: its published progress, or nothing (the equal share) when it
// published none or one that cannot be read, said once.
func (a *autoscaler) work(j *batchv1.Job, current int) autoscale.Work {
	v, ok := j.Annotations[AnnotationProgress]
	if !ok {
		return autoscale.UnknownWork(current)
	}
	p, err := autoscale.DecodeProgress(v)
	if err != nil {
		if key := "progress " + j.Namespace + "/" + j.Name; !a.warned[key] {
			a.warned[key] = true
			a.log.Warn("job's progress unreadable: sized as of unknown size", "job", j.Namespace+"/"+j.Name, "err", err)
		}
		return autoscale.UnknownWork(current)
	}
	return p.Work(current, autoscale.DefaultPrior())
}

// progressOnly says whether a master Job's update changed nothing but its
// AnnotationProgress. That is no reason to decide early: the next round
// reads it, and a hundred masters publishing every 30 s would keep the
// autoscaler deciding.
func progressOnly(oldObj, newObj any) bool {
	o, ok1 := oldObj.(*batchv1.Job)
	n, ok2 := newObj.(*batchv1.Job)
	if !ok1 || !ok2 || o.Annotations[AnnotationProgress] == n.Annotations[AnnotationProgress] {
		return false
	}
	o, n = o.DeepCopy(), n.DeepCopy()
	for _, j := range []*batchv1.Job{o, n} {
		delete(j.Annotations, AnnotationProgress)
		j.ResourceVersion, j.ManagedFields = "", nil
	}
	return equality.Semantic.DeepEqual(o, n)
}
