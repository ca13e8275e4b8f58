package k8s

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"elasticdl/internal/cluster"
)

func pod(phase corev1.PodPhase, mut ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{Status: corev1.PodStatus{Phase: phase}}
	for _, f := range mut {
		f(p)
	}
	return p
}

func exited(code int32, reason string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{
			Name:  ContainerName,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason}},
		}}
	}
}

func condition(typ corev1.PodConditionType, status corev1.ConditionStatus, reason string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: typ, Status: status, Reason: reason})
	}
}

func deleting(p *corev1.Pod) {
	now := metav1.Now()
	p.DeletionTimestamp = &now
}

func TestObserve(t *testing.T) {
	cases := []struct {
		name   string
		pod    *corev1.Pod
		gone   bool
		phase  cluster.Phase
		reason cluster.ExitReason
		code   int
	}{
		{"pending", pod(corev1.PodPending), false, cluster.Pending, 0, 0},
		{"unschedulable", pod(corev1.PodPending, condition(corev1.PodScheduled, corev1.ConditionFalse, "Unschedulable")), false, cluster.Pending, 0, 0},
		{"running", pod(corev1.PodRunning), false, cluster.Running, 0, 0},
		{"running while being deleted", pod(corev1.PodRunning, deleting), false, cluster.Running, 0, 0},
		{"succeeded", pod(corev1.PodSucceeded, exited(0, "Completed")), false, cluster.Exited, cluster.Completed, 0},
		{"failed with its own error", pod(corev1.PodFailed, exited(2, "Error")), false, cluster.Exited, cluster.Failed, 2},
		{"OOM-killed", pod(corev1.PodFailed, exited(137, "OOMKilled")), false, cluster.Exited, cluster.OOMKilled, 137},
		{"SIGKILL without OOM: preempted", pod(corev1.PodFailed, exited(137, "Error")), false, cluster.Exited, cluster.Preempted, 137},
		{"preempted by the scheduler", pod(corev1.PodFailed, exited(143, "Error"), deleting,
			condition(corev1.DisruptionTarget, corev1.ConditionTrue, "PreemptionByScheduler")), false, cluster.Exited, cluster.Preempted, 143},
		{"preempted, exit 0 on SIGTERM", pod(corev1.PodSucceeded, exited(0, "Completed"), deleting,
			condition(corev1.DisruptionTarget, corev1.ConditionTrue, "PreemptionByScheduler")), false, cluster.Exited, cluster.Preempted, 0},
		{"disruption condition false is ignored", pod(corev1.PodFailed, exited(3, "Error"),
			condition(corev1.DisruptionTarget, corev1.ConditionFalse, "PreemptionByScheduler")), false, cluster.Exited, cluster.Failed, 3},
		{"evicted", pod(corev1.PodFailed, func(p *corev1.Pod) { p.Status.Reason = "Evicted" }), false, cluster.Exited, cluster.Preempted, -1},
		{"deleted by hand, exit 0 on SIGTERM", pod(corev1.PodSucceeded, exited(0, "Completed"), deleting), false, cluster.Exited, cluster.Deleted, 0},
		{"deleted by hand, SIGKILL after grace", pod(corev1.PodFailed, exited(137, "Error"), deleting), false, cluster.Exited, cluster.Deleted, 137},
		{"gone while running", pod(corev1.PodRunning), true, cluster.Exited, cluster.Deleted, -1},
		{"gone while pending", pod(corev1.PodPending), true, cluster.Exited, cluster.Deleted, -1},
		{"gone while pending, preempted", pod(corev1.PodPending,
			condition(corev1.DisruptionTarget, corev1.ConditionTrue, "PreemptionByScheduler")), true, cluster.Exited, cluster.Preempted, -1},
		{"gone after completing", pod(corev1.PodSucceeded, exited(0, "Completed")), true, cluster.Exited, cluster.Completed, 0},
		{"gone after failing", pod(corev1.PodFailed, exited(1, "Error")), true, cluster.Exited, cluster.Failed, 1},
		{"failed without container status", pod(corev1.PodFailed, func(p *corev1.Pod) { p.Status.Message = "node lost" }), false, cluster.Exited, cluster.Failed, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := observe(c.pod, c.gone)
			if st.Phase != c.phase || st.Reason != c.reason || (c.phase == cluster.Exited && st.ExitCode != c.code) {
				t.Errorf("observe = %+v, want phase %v reason %v code %d", st, c.phase, c.reason, c.code)
			}
			if st.Phase == cluster.Exited && st.Message == "" {
				t.Errorf("observe = %+v: an exit needs a message", st)
			}
		})
	}
}

// TestFailedMessageIsTheLogsLastLine: with FallbackToLogsOnError the
// termination message is the log's tail; the exit names the last line,
// where an elasticdl process writes its cause.
func TestFailedMessageIsTheLogsLastLine(t *testing.T) {
	for _, c := range []struct{ termination, want string }{
		{"", "exit 1"},
		{"elasticdl worker: cannot reach the master\n", "exit 1: elasticdl worker: cannot reach the master"},
		{"time=1 level=WARN msg=retrying\nelasticdl worker: cannot reach the master\n\n", "exit 1: elasticdl worker: cannot reach the master"},
	} {
		p := pod(corev1.PodFailed, exited(1, "Error"), func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State.Terminated.Message = c.termination
		})
		if got := observe(p, false).Message; got != c.want {
			t.Errorf("termination message %q: exit message %q, want %q", c.termination, got, c.want)
		}
	}
	if got := NewPod("w", "ns", nil, PodSettings{}, nil, nil).Spec.Containers[0].TerminationMessagePolicy; got != corev1.TerminationMessageFallbackToLogsOnError {
		t.Errorf("the pod's termination message policy is %q, want the log's tail on error", got)
	}
}

func TestPendingMessageSaysWhy(t *testing.T) {
	p := pod(corev1.PodPending, func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: "Unschedulable", Message: "0/2 nodes are available: 2 Insufficient cpu."}}
	})
	if got := observe(p, false).Message; got != "Unschedulable: 0/2 nodes are available: 2 Insufficient cpu." {
		t.Errorf("message %q", got)
	}
}

func TestStuckVerdict(t *testing.T) {
	t0 := time.Unix(1000, 0)
	waiting := func(reason string) *corev1.Pod {
		return pod(corev1.PodPending, func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{
				Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "m"}}}}
		})
	}
	cases := []struct {
		name      string
		pod       *corev1.Pod
		since     time.Time
		now       time.Time
		wantSince time.Time
		wantFail  string
	}{
		{"not waiting on an error", pod(corev1.PodPending), t0, t0.Add(time.Hour), time.Time{}, ""},
		{"pulling normally", waiting("ContainerCreating"), time.Time{}, t0, time.Time{}, ""},
		{"first seen stuck", waiting("ErrImagePull"), time.Time{}, t0, t0, ""},
		{"stuck, not long enough", waiting("ImagePullBackOff"), t0, t0.Add(59 * time.Second), t0, ""},
		{"stuck long enough", waiting("ImagePullBackOff"), t0, t0.Add(time.Minute), t0, "pod stuck for 1m0s: ImagePullBackOff: m"},
		{"config error", waiting("CreateContainerConfigError"), t0, t0.Add(2 * time.Minute), t0, "pod stuck for 2m0s: CreateContainerConfigError: m"},
		{"recovered", pod(corev1.PodPending), t0, t0.Add(2 * time.Minute), time.Time{}, ""},
	}
	for _, c := range cases {
		since, failed := stuckVerdict(c.pod, c.since, c.now, time.Minute)
		if !since.Equal(c.wantSince) {
			t.Errorf("%s: since %v, want %v", c.name, since, c.wantSince)
		}
		switch {
		case c.wantFail == "" && failed != nil:
			t.Errorf("%s: failed %+v", c.name, failed)
		case c.wantFail != "" && (failed == nil || failed.Message != c.wantFail || failed.Phase != cluster.Exited || failed.Reason != cluster.Failed):
			t.Errorf("%s: failed %+v, want %q", c.name, failed, c.wantFail)
		}
	}
}
