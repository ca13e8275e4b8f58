package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Conditions the provider owns (as the kubelet does). Others on the pod
// (PodScheduled, DisruptionTarget, readiness gates, ...) are kept as the API
// server has them.
var ownedConditions = map[corev1.PodConditionType]bool{
	corev1.PodReadyToStartContainers: true,
	corev1.PodInitialized:            true,
	corev1.ContainersReady:           true,
	corev1.PodReady:                  true,
}

// mergedStatus is base (the API server's status) with the kubelet-owned
// parts replaced by the provider's view. r.mu must be held.
func (r *podRec) mergedStatus(base *corev1.PodStatus) corev1.PodStatus {
	st := *base.DeepCopy()
	terminal := r.terminating && r.isDone()

	st.HostIP = localIP
	st.HostIPs = []corev1.HostIP{{IP: localIP}}
	if r.sandboxUp {
		st.PodIP = r.podIP()
		st.PodIPs = []corev1.PodIP{{IP: st.PodIP}}
		if st.StartTime == nil && r.startTime != nil {
			t := *r.startTime
			st.StartTime = &t
		}
	}
	st.InitContainerStatuses = r.statuses(r.inits)
	st.ContainerStatuses = r.statuses(r.ctrs)
	st.Phase = r.phase(terminal)

	done := st.Phase == corev1.PodSucceeded || st.Phase == corev1.PodFailed
	containersReady, podReady := r.readyConditions(base.Conditions, done)
	conds := []corev1.PodCondition{
		podCondition(corev1.PodReadyToStartContainers, r.sandboxUp && !terminal, "", ""),
		r.initializedCondition(),
		containersReady,
		podReady,
	}
	st.Conditions = mergeConditions(base.Conditions, conds)
	return st
}

// podCondition is condition t, True when ok, else False for reason.
func podCondition(t corev1.PodConditionType, ok bool, reason, msg string) corev1.PodCondition {
	if ok {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue}
	}
	return corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, Reason: reason, Message: msg}
}

// initializedCondition is PodInitialized: True once every init container
// has succeeded.
func (r *podRec) initializedCondition() corev1.PodCondition {
	var initPending []string
	for _, c := range r.inits {
		if !(c.state.Terminated != nil && c.state.Terminated.ExitCode == 0) {
			initPending = append(initPending, c.spec.Name)
		}
	}
	return podCondition(corev1.PodInitialized, r.initsDone, "ContainersNotInitialized",
		fmt.Sprintf("containers with incomplete status: [%s]", strings.Join(initPending, " ")))
}

// readyConditions are ContainersReady (every container running, never
// once the pod is done) and PodReady (that, and every readiness gate's
// condition True in conds, the API server's).
func (r *podRec) readyConditions(conds []corev1.PodCondition, done bool) (containersReady, podReady corev1.PodCondition) {
	var unready []string
	for _, c := range r.ctrs {
		if c.state.Running == nil {
			unready = append(unready, c.spec.Name)
		}
	}
	ready, reason, msg := len(unready) == 0, "ContainersNotReady", fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " "))
	if done {
		ready, reason, msg = false, "PodCompleted", ""
	}
	containersReady = podCondition(corev1.ContainersReady, ready, reason, msg)
	isPodReady := ready
	if ready {
		if gates := r.unmetReadinessGates(conds); len(gates) > 0 {
			isPodReady, reason, msg = false, "ReadinessGatesNotReady", fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", gates[0])
		}
	}
	return containersReady, podCondition(corev1.PodReady, isPodReady, reason, msg)
}

// unmetReadinessGates are the pod's readiness gates whose condition is not
// True in conds.
func (r *podRec) unmetReadinessGates(conds []corev1.PodCondition) []string {
	var gates []string
	for _, g := range r.pod.Spec.ReadinessGates {
		ok := false
		for _, c := range conds {
			if c.Type == g.ConditionType && c.Status == corev1.ConditionTrue {
				ok = true
			}
		}
		if !ok {
			gates = append(gates, string(g.ConditionType))
		}
	}
	return gates
}

// mergeConditions replaces the owned conditions of old by mine in place
// (keeping the transition time when the status did not change), keeps all
// others, and appends those of mine that old lacks.
func mergeConditions(old, mine []corev1.PodCondition) []corev1.PodCondition {
	t := now()
	byType := map[corev1.PodConditionType]corev1.PodCondition{}
	for _, c := range mine {
		byType[c.Type] = c
	}
	var out []corev1.PodCondition
	seen := map[corev1.PodConditionType]bool{}
	for _, o := range old {
		if !ownedConditions[o.Type] {
			out = append(out, o)
			continue
		}
		c := byType[o.Type]
		c.ObservedGeneration = o.ObservedGeneration
		if c.Status == o.Status {
			c.LastTransitionTime = o.LastTransitionTime
		} else {
			c.LastTransitionTime = t
		}
		out = append(out, c)
		seen[o.Type] = true
	}
	for _, c := range mine {
		if !seen[c.Type] {
			c.LastTransitionTime = t
			out = append(out, c)
		}
	}
	return out
}

func (r *podRec) statuses(cs []*container) []corev1.ContainerStatus {
	if len(cs) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, 0, len(cs))
	for _, c := range cs {
		running := c.state.Running != nil
		ready := running
		if c.isInit {
			ready = c.state.Terminated != nil && c.state.Terminated.ExitCode == 0
		}
		started := running
		s := corev1.ContainerStatus{
			Name:                 c.spec.Name,
			Image:                c.spec.Image,
			ImageID:              "procnode://" + c.spec.Image,
			ContainerID:          c.id,
			State:                *c.state.DeepCopy(),
			LastTerminationState: *c.last.DeepCopy(),
			Ready:                ready,
			RestartCount:         c.restarts,
			Started:              &started,
		}
		if s.State.Terminated != nil && s.State.Terminated.ContainerID == "" {
			s.State.Terminated.ContainerID = c.id
		}
		out = append(out, s)
	}
	return out
}

// phase follows the kubelet's getPhase: podIsTerminal means the pod was
// deleted and its processes are gone (nothing will restart).
func (r *podRec) phase(podIsTerminal bool) corev1.PodPhase {
	policy := r.pod.Spec.RestartPolicy
	if !r.initsDone {
		for _, c := range r.inits {
			failed := (c.state.Terminated != nil && c.state.Terminated.ExitCode != 0) ||
				(c.state.Waiting != nil && c.last.Terminated != nil && c.last.Terminated.ExitCode != 0)
			if failed && policy == corev1.RestartPolicyNever {
				return corev1.PodFailed
			}
		}
		if podIsTerminal {
			return corev1.PodFailed
		}
		return corev1.PodPending
	}
	var waiting, running, stopped, succeeded int
	for _, c := range r.ctrs {
		switch {
		case c.state.Running != nil:
			running++
		case c.state.Terminated != nil:
			stopped++
			if c.state.Terminated.ExitCode == 0 {
				succeeded++
			}
		case c.last.Terminated != nil: // waiting to restart
			stopped++
			if c.last.Terminated.ExitCode == 0 {
				succeeded++
			}
		default:
			waiting++
		}
	}
	switch {
	case podIsTerminal:
		if waiting == 0 && running == 0 && stopped == succeeded {
			return corev1.PodSucceeded
		}
		return corev1.PodFailed
	case waiting > 0:
		return corev1.PodPending
	case running > 0:
		return corev1.PodRunning
	case stopped > 0:
		if policy == corev1.RestartPolicyAlways {
			return corev1.PodRunning
		}
		if stopped == succeeded {
			return corev1.PodSucceeded
		}
		if policy == corev1.RestartPolicyOnFailure {
			return corev1.PodRunning
		}
		return corev1.PodFailed
	}
	return corev1.PodPending
}

// The kubelet's bounds on a termination message taken from the log.
const (
	terminationLogBytes = 2048
	terminationLogLines = 80
)

// terminationMessage is what the kubelet reports as a terminated
// container's message. Processes here share the node's file system, so
// there is no per-container terminationMessagePath file to read; with
// FallbackToLogsOnError a failed container's message is its log's tail
// (at most 80 lines and 2048 bytes, as the kubelet takes it).
func terminationMessage(policy corev1.TerminationMessagePolicy, code int, logPath string) string {
	if policy != corev1.TerminationMessageFallbackToLogsOnError || code == 0 {
		return ""
	}
	f, err := os.Open(logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	from := max(st.Size()-terminationLogBytes, 0)
	b := make([]byte, st.Size()-from)
	if _, err := f.ReadAt(b, from); err != nil && err != io.EOF {
		return ""
	}
	lines := strings.SplitAfter(string(b), "\n")
	if n := len(lines); n > 0 && lines[n-1] == "" {
		lines = lines[:n-1]
	}
	if len(lines) > terminationLogLines {
		lines = lines[len(lines)-terminationLogLines:]
	}
	return strings.Join(lines, "")
}
