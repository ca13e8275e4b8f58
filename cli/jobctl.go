package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"elasticdl/internal/cluster"
	"elasticdl/internal/cluster/k8s"
	"elasticdl/internal/master"
)

// jobCtl is what status, logs and stop share: a job name and a cluster.
type jobCtl struct {
	o   k8sOptions
	job string
}

func newJobCtl(env Env, name string, args []string, extra func(fs *flag.FlagSet)) (*jobCtl, kubernetes.Interface, error) {
	c := &jobCtl{}
	fs := newFlagSet(env, name)
	fs.StringVar(&c.o.namespace, "namespace", "default", "namespace of the job")
	fs.StringVar(&c.o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	fs.DurationVar(&c.o.apiTimeout, "api_timeout", 30*time.Second, "how long to wait for the API server")
	if extra != nil {
		extra(fs)
	}
	// The job name may come before or after the flags.
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		c.job, args = args[0], args[1:]
	}
	if err := parse(fs, args); err != nil {
		return nil, nil, err
	}
	if c.job == "" && fs.NArg() == 1 {
		c.job = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return nil, nil, usageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	if c.job == "" {
		return nil, nil, usageError{errors.New("usage: elasticdl " + name + " JOB [--namespace NS]")}
	}
	client, err := c.o.kubeClient()
	if err != nil {
		return nil, nil, err
	}
	return c, client, nil
}

func (c *jobCtl) noJob() error {
	return fmt.Errorf("no job %s in namespace %s (no pod %s)", c.job, c.o.namespace, k8s.MasterPodName(c.job))
}

// runStatus prints where a Kubernetes job is: its master pod, its worker
// and PS pods by phase, its summary when it has ended, its recent Events.
func runStatus(ctx context.Context, env Env, args []string) error {
	c, client, err := newJobCtl(env, "status", args, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.o.apiTimeout)
	defer cancel()
	ns, w := c.o.namespace, env.Stdout
	mp, err := client.CoreV1().Pods(ns).Get(ctx, k8s.MasterPodName(c.job), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return c.noJob()
	} else if err != nil {
		return fmt.Errorf("get master pod: %w", err)
	}
	status := mp.Labels[k8s.LabelStatus]
	if status == "" {
		status = "Running"
	}
	fmt.Fprintf(w, "job %s (namespace %s): %s; master pod %s %s", c.job, ns, status, mp.Name, mp.Status.Phase)
	if mp.Status.StartTime != nil {
		fmt.Fprintf(w, ", started %s ago", time.Since(mp.Status.StartTime.Time).Round(time.Second))
	}
	fmt.Fprintln(w)
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: k8s.JobSelector(c.job)})
	if err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	byRole := map[string]map[corev1.PodPhase]int{}
	for _, p := range pods.Items {
		r := p.Labels[k8s.LabelReplicaType]
		if r == k8s.ReplicaMaster {
			continue
		}
		if byRole[r] == nil {
			byRole[r] = map[corev1.PodPhase]int{}
		}
		byRole[r][p.Status.Phase]++
	}
	for _, r := range []string{string(cluster.Worker), string(cluster.PS)} {
		fmt.Fprintf(w, "  %s pods:", r)
		if len(byRole[r]) == 0 {
			fmt.Fprint(w, " none")
		}
		for _, ph := range []corev1.PodPhase{corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed, corev1.PodUnknown} {
			if n := byRole[r][ph]; n > 0 {
				fmt.Fprintf(w, " %d %s", n, ph)
			}
		}
		fmt.Fprintln(w)
	}
	cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, k8s.SummaryConfigMapName(c.job), metav1.GetOptions{})
	if err == nil {
		var s master.Summary
		if err := json.Unmarshal([]byte(cm.Data[k8s.SummaryKey]), &s); err == nil {
			printSummary(env, &s, "ConfigMap "+cm.Name, "elasticdl logs "+c.job)
		}
	}
	evs, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + mp.Name})
	if err == nil && len(evs.Items) > 0 {
		items := evs.Items
		sort.SliceStable(items, func(i, j int) bool { return eventTime(items[i]).Before(eventTime(items[j])) })
		if len(items) > 15 {
			items = items[len(items)-15:]
		}
		fmt.Fprintln(w, "  events:")
		for _, e := range items {
			fmt.Fprintf(w, "    %s %-8s %-22s %s\n", eventTime(e).Format(time.TimeOnly), e.Type, e.Reason, e.Message)
		}
	}
	return nil
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

// runLogs prints (or follows) the log of a job's pod: the master by
// default, or --role=worker|ps with --id.
func runLogs(ctx context.Context, env Env, args []string) error {
	var role string
	var id int
	var follow bool
	c, client, err := newJobCtl(env, "logs", args, func(fs *flag.FlagSet) {
		fs.StringVar(&role, "role", k8s.ReplicaMaster, "master, worker or ps")
		fs.IntVar(&id, "id", -1, "instance ID of the worker or PS (see `elasticdl status` or the master's log); default: all of that role")
		fs.BoolVar(&follow, "f", false, "follow the log")
	})
	if err != nil {
		return err
	}
	ns := c.o.namespace
	var names []string
	switch {
	case role == k8s.ReplicaMaster:
		names = []string{k8s.MasterPodName(c.job)}
	case role != string(cluster.Worker) && role != string(cluster.PS):
		return usageError{fmt.Errorf("--role=%s: want master, worker or ps", role)}
	case id >= 0:
		names = []string{k8s.InstancePodName(c.job, cluster.Role(role), id)}
	default:
		lctx, cancel := context.WithTimeout(ctx, c.o.apiTimeout)
		pods, err := client.CoreV1().Pods(ns).List(lctx, metav1.ListOptions{LabelSelector: k8s.JobSelector(c.job) + "," + k8s.LabelReplicaType + "=" + role})
		cancel()
		if err != nil {
			return fmt.Errorf("list pods: %w", err)
		}
		sort.Slice(pods.Items, func(i, j int) bool {
			a, _ := strconv.Atoi(pods.Items[i].Labels[k8s.LabelInstanceID])
			b, _ := strconv.Atoi(pods.Items[j].Labels[k8s.LabelInstanceID])
			return a < b
		})
		for _, p := range pods.Items {
			names = append(names, p.Name)
		}
		if len(names) == 0 {
			return fmt.Errorf("job %s has no %s pods in namespace %s", c.job, role, ns)
		}
		if follow && len(names) > 1 {
			return usageError{errors.New("-f follows one pod: give --id")}
		}
	}
	for _, name := range names {
		if len(names) > 1 {
			fmt.Fprintf(env.Stdout, "==> %s <==\n", name)
		}
		rc, err := client.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Container: k8s.ContainerName, Follow: follow}).Stream(ctx)
		if err != nil {
			return fmt.Errorf("logs of pod %s: %w", name, err)
		}
		_, err = io.Copy(env.Stdout, rc)
		rc.Close()
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("logs of pod %s: %w", name, err)
		}
	}
	return nil
}

// runStop deletes the job's master pod; Kubernetes garbage-collects the
// job's other pods, Services and summary with it. It waits until they are
// gone (bounded by --api_timeout).
func runStop(ctx context.Context, env Env, args []string) error {
	c, client, err := newJobCtl(env, "stop", args, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.o.apiTimeout)
	defer cancel()
	ns, name := c.o.namespace, k8s.MasterPodName(c.job)
	fg := metav1.DeletePropagationForeground
	err = client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &fg})
	if apierrors.IsNotFound(err) {
		return c.noJob()
	} else if err != nil {
		return fmt.Errorf("delete master pod %s: %w", name, err)
	}
	for {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: k8s.JobSelector(c.job)})
		if err == nil && len(pods.Items) == 0 {
			fmt.Fprintf(env.Stdout, "job %s stopped: its pods are gone\n", c.job)
			return nil
		}
		select {
		case <-ctx.Done():
			n := -1
			if pods != nil {
				n = len(pods.Items)
			}
			return fmt.Errorf("job %s: master pod deleted, %d pods still terminating after %s", c.job, n, c.o.apiTimeout)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
