package k8s

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"elasticdl/internal/cluster"
)

// podState is what the backend reports about a pod: pure function of the
// pod object (and whether it is gone from the API), table-tested.
type podState struct {
	Phase    cluster.Phase
	ExitCode int
	Reason   cluster.ExitReason
	Message  string
}

// exitSIGKILL is the exit code of a container killed by SIGKILL: without
// OOMKilled, Kubernetes killed it to make room (ElasticDL's rule).
const exitSIGKILL = 137

// observe classifies a pod. gone says the pod object was deleted.
//
//   - A DisruptionTarget condition (PreemptionByScheduler,
//     EvictionByEvictionAPI, TerminationByKubelet, DeletionByTaintManager)
//     or status reason Evicted/Preempting: preempted.
//   - Container reason OOMKilled: OOM-killed.
//   - Exit 137 otherwise: preempted (killed to make room).
//   - Deleted by someone else (deletionTimestamp set, or gone before it
//     terminated): deleted.
//   - Otherwise exit 0 (Succeeded) is completed, any other exit failed.
func observe(p *corev1.Pod, gone bool) podState {
	term := terminatedState(p)
	terminal := p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	if !terminal && !gone {
		if p.Status.Phase == corev1.PodRunning {
			return podState{Phase: cluster.Running}
		}
		return podState{Phase: cluster.Pending, Message: pendingMessage(p)}
	}
	st := podState{Phase: cluster.Exited, ExitCode: -1}
	if term != nil {
		st.ExitCode = int(term.ExitCode)
	}
	if c := disruption(p); c != nil {
		st.Reason = cluster.Preempted
		st.Message = strings.TrimSpace(c.Reason + ": " + c.Message)
		return st
	}
	if r := p.Status.Reason; r == "Evicted" || r == "Preempting" {
		st.Reason, st.Message = cluster.Preempted, strings.TrimSpace(r+": "+p.Status.Message)
		return st
	}
	if term != nil && term.Reason == "OOMKilled" {
		st.Reason, st.Message = cluster.OOMKilled, "container OOMKilled (exit "+fmt.Sprint(term.ExitCode)+")"
		return st
	}
	if term != nil && term.ExitCode == exitSIGKILL && p.DeletionTimestamp == nil {
		st.Reason, st.Message = cluster.Preempted, "killed by SIGKILL (exit 137) without OOMKilled"
		return st
	}
	// A process asked to stop may exit 0: deletion, not completion.
	if p.DeletionTimestamp != nil || (gone && !terminal) {
		st.Reason, st.Message = cluster.Deleted, "pod deleted"
		if term != nil {
			st.Message += fmt.Sprintf(" (exit %d)", term.ExitCode)
		}
		return st
	}
	if p.Status.Phase == corev1.PodSucceeded || (term != nil && term.ExitCode == 0) {
		st.ExitCode, st.Reason, st.Message = 0, cluster.Completed, "exit 0"
		return st
	}
	st.Reason = cluster.Failed
	switch {
	case term != nil:
		st.Message = fmt.Sprintf("exit %d", term.ExitCode)
		if term.Reason != "" && term.Reason != "Error" {
			st.Message += " (" + term.Reason + ")"
		}
		if why := lastLine(term.Message); why != "" {
			st.Message += ": " + why
		}
	case p.Status.Message != "":
		st.Message = p.Status.Message
	default:
		st.Message = "pod failed"
	}
	return st
}

// lastLine is the last non-empty line of a termination message: with
// FallbackToLogsOnError the message is the log's tail (up to 80 lines),
// and a failed elasticdl process ends its log with its cause.
func lastLine(msg string) string {
	lines := strings.Split(strings.TrimSpace(msg), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func terminatedState(p *corev1.Pod) *corev1.ContainerStateTerminated {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Terminated != nil {
			return cs.State.Terminated
		}
	}
	return nil
}

func disruption(p *corev1.Pod) *corev1.PodCondition {
	for i, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// stuckReasons are the waiting reasons that more capacity will not cure.
var stuckReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true,
}

// stuckReason is why a pending pod waits on an error, or "".
func stuckReason(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && stuckReasons[w.Reason] {
			return strings.TrimSpace(w.Reason + ": " + w.Message)
		}
	}
	return ""
}

// stuckVerdict follows a pending pod that may wait on an error: it returns
// when the wait began (zero: the pod does not wait on one) and, once it has
// lasted timeout, the failed exit to report instead.
func stuckVerdict(p *corev1.Pod, since, now time.Time, timeout time.Duration) (time.Time, *podState) {
	why := stuckReason(p)
	switch {
	case why == "":
		return time.Time{}, nil
	case since.IsZero():
		return now, nil
	case now.Sub(since) < timeout:
		return since, nil
	}
	return since, &podState{Phase: cluster.Exited, ExitCode: -1, Reason: cluster.Failed,
		Message: fmt.Sprintf("pod stuck for %s: %s", now.Sub(since).Round(time.Second), why)}
}

// pendingMessage says why a pod is not running yet: unschedulable, a
// container waiting on its image, ...
func pendingMessage(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			return strings.TrimSpace(w.Reason + ": " + w.Message)
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return strings.TrimSpace(c.Reason + ": " + c.Message)
		}
	}
	return ""
}
