package k8s

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"elasticdl/internal/cluster"
)

// ErrNoJob is the error, wrapped, of a call about a job that has no
// master Job.
var ErrNoJob = errors.New("no job")

func noJob(namespace, job string) error {
	return fmt.Errorf("%w %s in namespace %s (no Job %s)", ErrNoJob, job, namespace, MasterName(job))
}

// PriorityClassUse is a PriorityClass a job's pods ask for, with the flag
// that named it, for the error message.
type PriorityClassUse struct{ Flag, Class string }

// PriorityClassError is a PriorityClass the job asks for that the cluster
// does not have: a mistake in the command line.
type PriorityClassError PriorityClassUse

func (e *PriorityClassError) Error() string {
	return fmt.Sprintf("--%s: PriorityClass %q does not exist in the cluster (deploy/priority-classes.yaml defines elasticdl-high and elasticdl-low)", e.Flag, e.Class)
}

// SubmitJob creates a job's master Job (built by NewMasterJob), once a
// preflight has turned the usual mistakes into one clear error before
// anything is created: an unreachable API server, a namespace without the
// RBAC objects for the master's ServiceAccount, an unknown PriorityClass
// among classes (empty ones are skipped; a missing one is a
// *PriorityClassError).
func (c *Client) SubmitJob(ctx context.Context, master *batchv1.Job, classes []PriorityClassUse) error {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	if err := c.preflight(ctx, master.Namespace, master.Spec.Template.Spec.ServiceAccountName, classes); err != nil {
		return err
	}
	ns, job := master.Namespace, master.Labels[LabelJob]
	if _, err := c.cs.BatchV1().Jobs(ns).Create(ctx, master, metav1.CreateOptions{}); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("job %s exists in namespace %s (Job %s): `elasticdl stop %s --namespace=%s` or choose another --job_name", job, ns, master.Name, job, ns)
		}
		return fmt.Errorf("create Job %s in namespace %s: %w", master.Name, ns, err)
	}
	return nil
}

func (c *Client) preflight(ctx context.Context, ns, sa string, classes []PriorityClassUse) error {
	if _, err := c.cs.CoreV1().ServiceAccounts(ns).Get(ctx, sa, metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("namespace %s has no ServiceAccount %s for the master: apply deploy/rbac.yaml to it first (see deploy/README.md), or set --service_account", ns, sa)
		}
		return fmt.Errorf("cannot reach the Kubernetes API server: %w", err)
	}
	if err := c.checkMasterRBAC(ctx, ns, sa); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, u := range classes {
		if u.Class == "" || seen[u.Class] {
			continue
		}
		seen[u.Class] = true
		_, err := c.cs.SchedulingV1().PriorityClasses().Get(ctx, u.Class, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return &PriorityClassError{Flag: u.Flag, Class: u.Class}
		case apierrors.IsForbidden(err):
			// Cluster-scoped reads may be denied to the user: the API
			// server checks the class when the pod is created.
		case err != nil:
			return fmt.Errorf("check PriorityClass %s: %w", u.Class, err)
		}
	}
	return nil
}

// checkMasterRBAC asks the API server whether the master's ServiceAccount
// may do what the master does (create and watch pods, create Services and
// Events, write its summary ConfigMap). A user who may not ask
// (SubjectAccessReview is cluster-scoped) gets no check: the master then
// fails on its first call, with the API server's message in its log.
func (c *Client) checkMasterRBAC(ctx context.Context, ns, sa string) error {
	user := "system:serviceaccount:" + ns + ":" + sa
	var missing []string
	for _, a := range []struct{ verb, resource, group string }{
		{"create", "pods", ""}, {"watch", "pods", ""}, {"delete", "pods", ""}, {"patch", "pods", ""},
		{"create", "services", ""}, {"create", "events", ""}, {"create", "configmaps", ""}, {"watch", "jobs", "batch"},
		{"create", "secrets", ""},
	} {
		r, err := c.cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User:               user,
				Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: a.verb, Resource: a.resource, Group: a.group},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return nil // not allowed to ask
		}
		if !r.Status.Allowed {
			missing = append(missing, a.verb+" "+a.resource)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("ServiceAccount %s/%s may not %s: apply deploy/rbac.yaml to namespace %s (see deploy/README.md)",
			ns, sa, strings.Join(missing, ", "), ns)
	}
	return nil
}

// JobStatus is where a job is, as `elasticdl status` shows it.
type JobStatus struct {
	// MasterPod is the job's latest master pod (empty while the Job has
	// none), MasterPhase its phase.
	MasterPod   string
	MasterPhase string
	// MasterPodsFailed is how many master pods the Job counts as failed
	// (lost for a reason other than eviction or preemption), against its
	// limit of MasterPodReplacements.
	MasterPodsFailed int
	// Started is when the master Job started; zero before.
	Started time.Time
	// Result is StatusFinished or StatusFailed once the job has ended
	// (the master pod's LabelStatus, or the Job's condition when no master
	// could say, such as when master pods failed too often); empty while
	// it runs.
	Result string
	// Condition says why the Job ended when it did so without a master
	// publishing the result (its reason and message); empty otherwise.
	Condition string
	// Pods counts the job's worker and PS pods by phase, in lifecycle
	// order (Pending, Running, Succeeded, Failed, Unknown); phases with no
	// pod are left out.
	Pods map[cluster.Role][]PhaseCount
	// Summary is the job summary (job_summary.json) the master published
	// in its ConfigMap at the end; nil before, or when it cannot be read.
	Summary []byte
	// Events are the Events about the master Job, oldest first.
	Events []Event
}

// PhaseCount is how many pods are in one phase.
type PhaseCount struct {
	Phase string
	Count int
}

// Event is one Kubernetes Event about a job's master pod.
type Event struct {
	Time                  time.Time
	Type, Reason, Message string
}

// podPhases is the order in which JobStatus lists phases.
var podPhases = []corev1.PodPhase{corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed, corev1.PodUnknown}

// JobStatus reads a job's master Job, its pods, summary and Events. An
// unknown job is an error wrapping ErrNoJob.
func (c *Client) JobStatus(ctx context.Context, namespace, job string) (*JobStatus, error) {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	mj, err := c.cs.BatchV1().Jobs(namespace).Get(ctx, MasterName(job), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, noJob(namespace, job)
	} else if err != nil {
		return nil, fmt.Errorf("get Job %s: %w", MasterName(job), err)
	}
	st := &JobStatus{Pods: map[cluster.Role][]PhaseCount{}}
	if mj.Status.StartTime != nil {
		st.Started = mj.Status.StartTime.Time
	}
	list, err := c.cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: JobSelector(job)})
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	var masters []corev1.Pod
	byRole := map[cluster.Role]map[corev1.PodPhase]int{}
	for _, p := range list.Items {
		r := p.Labels[LabelReplicaType]
		if r == ReplicaMaster {
			masters = append(masters, p)
			continue
		}
		if r != string(cluster.Worker) && r != string(cluster.PS) {
			continue
		}
		if byRole[cluster.Role(r)] == nil {
			byRole[cluster.Role(r)] = map[corev1.PodPhase]int{}
		}
		byRole[cluster.Role(r)][p.Status.Phase]++
	}
	for r, n := range byRole {
		for _, ph := range podPhases {
			if n[ph] > 0 {
				st.Pods[r] = append(st.Pods[r], PhaseCount{Phase: string(ph), Count: n[ph]})
			}
		}
	}
	st.MasterPodsFailed = int(mj.Status.Failed)
	if len(masters) > 0 {
		sortNewestFirst(masters)
		mp := masters[0]
		st.MasterPod, st.MasterPhase, st.Result = mp.Name, string(mp.Status.Phase), mp.Labels[LabelStatus]
	}
	if st.Result == "" {
		for _, cond := range mj.Status.Conditions {
			if cond.Status != corev1.ConditionTrue {
				continue
			}
			switch cond.Type {
			case batchv1.JobFailed:
				st.Result, st.Condition = StatusFailed, cond.Reason+": "+cond.Message
			case batchv1.JobComplete:
				st.Result = StatusFinished
			}
		}
	}
	// The summary and the Events add to the status; without them (not
	// yet written, or not readable) it is still worth showing.
	if cm, err := c.cs.CoreV1().ConfigMaps(namespace).Get(ctx, SummaryConfigMapName(job), metav1.GetOptions{}); err == nil {
		if s, ok := cm.Data[SummaryKey]; ok {
			st.Summary = []byte(s)
		}
	}
	// The master's Service has the Job's name: its Events are not the job's.
	if evs, err := c.cs.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Job,involvedObject.name=" + mj.Name}); err == nil {
		for _, e := range evs.Items {
			st.Events = append(st.Events, Event{Time: eventTime(e), Type: e.Type, Reason: e.Reason, Message: e.Message})
		}
		sort.SliceStable(st.Events, func(i, j int) bool { return st.Events[i].Time.Before(st.Events[j].Time) })
	}
	return st, nil
}

// sortNewestFirst sorts pods by creation, the newest first.
func sortNewestFirst(pods []corev1.Pod) {
	sort.SliceStable(pods, func(i, j int) bool {
		a, b := pods[i].CreationTimestamp, pods[j].CreationTimestamp
		if a.Equal(&b) {
			return pods[i].Name > pods[j].Name
		}
		return b.Before(&a)
	})
}

// eventTime is when an Event last happened; the scheduler's events.k8s.io
// events only set EventTime.
func eventTime(e corev1.Event) time.Time {
	if !e.LastTimestamp.IsZero() {
		return e.LastTimestamp.Time
	}
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// PodNames lists the names of a job's pods of one role: workers and PS by
// instance ID; master pods the newest first (the one running the job,
// then those it replaced), or an error wrapping ErrNoJob when the job has
// no master Job.
func (c *Client) PodNames(ctx context.Context, namespace, job string, role cluster.Role) ([]string, error) {
	var items []corev1.Pod
	if role == ReplicaMaster {
		var err error
		if items, err = c.masterPods(ctx, namespace, job); err != nil {
			return nil, err
		}
		sortNewestFirst(items)
	} else {
		bctx, cancel := c.bounded(ctx)
		defer cancel()
		pods, err := c.cs.CoreV1().Pods(namespace).List(bctx, metav1.ListOptions{LabelSelector: JobSelector(job) + "," + LabelReplicaType + "=" + string(role)})
		if err != nil {
			return nil, fmt.Errorf("list pods: %w", err)
		}
		items = pods.Items
		sort.Slice(items, func(i, j int) bool {
			a, _ := strconv.Atoi(items[i].Labels[LabelInstanceID])
			b, _ := strconv.Atoi(items[j].Labels[LabelInstanceID])
			return a < b
		})
	}
	names := make([]string, 0, len(items))
	for _, p := range items {
		names = append(names, p.Name)
	}
	return names, nil
}

// Logs copies the log of a job's pod to w; with follow, until the pod ends
// or ctx is cancelled, which is no error (a user's Ctrl-C). The Client's
// timeout does not bound it.
func (c *Client) Logs(ctx context.Context, w io.Writer, namespace, pod string, follow bool) error {
	rc, err := c.cs.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Container: ContainerName, Follow: follow}).Stream(ctx)
	if err != nil {
		return fmt.Errorf("logs of pod %s: %w", pod, err)
	}
	defer rc.Close()
	if _, err := io.Copy(w, rc); err != nil && ctx.Err() == nil {
		return fmt.Errorf("logs of pod %s: %w", pod, err)
	}
	return nil
}

// StopJob deletes a job's master Job, so that Kubernetes garbage-collects
// the job's master, worker and PS pods, Services and ConfigMaps with it,
// and waits until the job's pods are gone (bounded by the Client's
// timeout). An unknown job is an error wrapping ErrNoJob.
func (c *Client) StopJob(ctx context.Context, namespace, job string) error {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	name := MasterName(job)
	fg := metav1.DeletePropagationForeground
	err := c.cs.BatchV1().Jobs(namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &fg})
	if apierrors.IsNotFound(err) {
		return noJob(namespace, job)
	} else if err != nil {
		return fmt.Errorf("delete Job %s: %w", name, err)
	}
	c.deleteUnowned(ctx, namespace, job)
	pods := c.cs.CoreV1().Pods(namespace)
	for {
		left, err := pods.List(ctx, metav1.ListOptions{LabelSelector: JobSelector(job)})
		if err == nil && len(left.Items) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			n := -1
			if left != nil {
				n = len(left.Items)
			}
			return fmt.Errorf("job %s: Job %s deleted, %d pods still terminating after %s", job, name, n, c.timeout)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// deleteUnowned deletes, best effort, the job's CA Secret and NetworkPolicy
// by name: those of a job applied from --yaml have no owner (the Job's UID
// was not known), and the Secret holds the key that signs the job's
// identities. The Job owns those of a submitted job anyway.
func (c *Client) deleteUnowned(ctx context.Context, namespace, job string) {
	_ = c.cs.CoreV1().Secrets(namespace).Delete(ctx, CASecretName(job), metav1.DeleteOptions{})
	_ = c.cs.NetworkingV1().NetworkPolicies(namespace).Delete(ctx, NetworkPolicyName(job), metav1.DeleteOptions{})
}
