package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	flag "github.com/spf13/pflag"

	"elasticdl/internal/cluster"
	"elasticdl/internal/cluster/k8s"
	"elasticdl/internal/master"
	"elasticdl/internal/master/job"
)

// psFlagUsage is `elasticdl scale --ps`.
const psFlagUsage = "the number of parameter servers the job is to run (1 or more; the master re-shards them while training: new tasks pause until the parameters have moved)"

// jobCtl is what status, logs and stop share: a job name and a cluster.
type jobCtl struct {
	o   k8sOptions
	job string
}

// newJobCtl parses a job command's flags (extra registers its own and
// returns their check, which runs before the cluster is contacted) and
// connects to the cluster.
func newJobCtl(env Env, name string, args []string, extra func(fs *flag.FlagSet) (check func() error)) (*jobCtl, *k8s.Client, error) {
	return newCtl(env, name, args, extra, nil)
}

// newCtl is newJobCtl for a command whose JOB is optional when
// noJob, asked once the flags are parsed, says so.
func newCtl(env Env, name string, args []string, extra func(fs *flag.FlagSet) (check func() error), noJob func() bool) (*jobCtl, *k8s.Client, error) {
	c := &jobCtl{}
	fs := newFlagSet(env, name)
	fs.StringVar(&c.o.namespace, "namespace", "default", "namespace of the job")
	fs.StringVar(&c.o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	fs.DurationVar(&c.o.apiTimeout, "api_timeout", 30*time.Second, "how long to wait for the API server")
	var check func() error
	if extra != nil {
		check = extra(fs)
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
	if c.job == "" && (noJob == nil || !noJob()) {
		return nil, nil, usageError{errors.New("usage: elasticdl " + name + " JOB [--namespace NS]")}
	}
	if check != nil {
		if err := check(); err != nil {
			return nil, nil, usageError{err}
		}
	}
	client, err := k8s.Connect(c.o.kubeconfig, c.o.apiTimeout)
	if err != nil {
		return nil, nil, err
	}
	return c, client, nil
}

// maxStatusEvents is how many of the master Job's latest Events status
// shows.
const maxStatusEvents = 15

// runStatus prints where a Kubernetes job is: its master pod, its worker
// and PS pods by phase, its summary when it has ended, its recent Events.
func runStatus(ctx context.Context, env Env, args []string) error {
	c, client, err := newJobCtl(env, "status", args, nil)
	if err != nil {
		return err
	}
	st, err := client.JobStatus(ctx, c.o.namespace, c.job)
	if err != nil {
		return err
	}
	w := env.Stdout
	status := st.Result
	if status == "" {
		status = "Running"
	}
	fmt.Fprintf(w, "job %s (namespace %s): %s", c.job, c.o.namespace, status)
	if st.MasterPod != "" {
		fmt.Fprintf(w, "; master pod %s %s", st.MasterPod, st.MasterPhase)
	}
	if st.MasterPodsFailed > 0 {
		fmt.Fprintf(w, " (%d master pods lost, of the %d the Job replaces; evictions not counted)", st.MasterPodsFailed, k8s.MasterPodReplacements)
	}
	if !st.Started.IsZero() {
		fmt.Fprintf(w, ", started %s ago", time.Since(st.Started).Round(time.Second))
	}
	fmt.Fprintln(w)
	if st.Condition != "" {
		fmt.Fprintf(w, "  Job: %s\n", st.Condition)
	}
	for _, r := range []cluster.Role{cluster.Worker, cluster.PS} {
		fmt.Fprintf(w, "  %s pods:", r)
		if len(st.Pods[r]) == 0 {
			fmt.Fprint(w, " none")
		}
		for _, n := range st.Pods[r] {
			fmt.Fprintf(w, " %d %s", n.Count, n.Phase)
		}
		fmt.Fprintln(w)
	}
	if st.Summary != nil {
		var s master.Summary
		if err := json.Unmarshal(st.Summary, &s); err == nil {
			printSummary(env, &s, "ConfigMap "+k8s.SummaryConfigMapName(c.job), "elasticdl logs "+c.job)
		}
	}
	events := st.Events
	if len(events) > maxStatusEvents {
		events = events[len(events)-maxStatusEvents:]
	}
	if len(events) > 0 {
		fmt.Fprintln(w, "  events:")
		for _, e := range events {
			fmt.Fprintf(w, "    %s %-8s %-22s %s\n", e.Time.Format(time.TimeOnly), e.Type, e.Reason, e.Message)
		}
	}
	return nil
}

// runLogs prints (or follows) the log of a job's pod: the master by
// default, or --role=worker|ps with --id.
func runLogs(ctx context.Context, env Env, args []string) error {
	var role string
	var id int
	var follow bool
	c, client, err := newJobCtl(env, "logs", args, func(fs *flag.FlagSet) func() error {
		fs.StringVar(&role, "role", k8s.ReplicaMaster, "master, worker or ps")
		fs.IntVar(&id, "id", -1, "instance ID of the worker or PS (see `elasticdl status` or the master's log); default: all of that role")
		fs.BoolVarP(&follow, "follow", "f", false, "follow the log")
		return func() error {
			if role != k8s.ReplicaMaster && role != string(cluster.Worker) && role != string(cluster.PS) {
				return fmt.Errorf("--role=%s: want master, worker or ps", role)
			}
			return nil
		}
	})
	if err != nil {
		return err
	}
	ns := c.o.namespace
	var names []string
	switch {
	case role == k8s.ReplicaMaster:
		// The master pod that runs the job now (or ran it last).
		if names, err = client.PodNames(ctx, ns, c.job, k8s.ReplicaMaster); err != nil {
			return err
		}
		if len(names) == 0 {
			return fmt.Errorf("job %s has no master pod in namespace %s yet", c.job, ns)
		}
		names = names[:1]
	case id >= 0:
		names = []string{k8s.InstancePodName(c.job, cluster.Role(role), id)}
	default:
		names, err = client.PodNames(ctx, ns, c.job, cluster.Role(role))
		if err != nil {
			return err
		}
		if len(names) == 0 {
			return fmt.Errorf("job %s has no %s pods in namespace %s", c.job, role, ns)
		}
		if follow && len(names) > 1 {
			return usageError{errors.New("--follow follows one pod: give --id")}
		}
	}
	for _, name := range names {
		if len(names) > 1 {
			fmt.Fprintf(env.Stdout, "==> %s <==\n", name)
		}
		if err := client.Logs(ctx, env.Stdout, ns, name, follow); err != nil {
			return err
		}
	}
	return nil
}

// runScale asks a job to run --workers workers: it annotates the master's
// Job, which the master watches and applies within the job's bounds,
// letting workers go once they have reported their task.
func runScale(ctx context.Context, env Env, args []string) error {
	if localScale(args) {
		return runScaleLocal(env, args)
	}
	workers, ps := -1, -1
	c, client, err := newJobCtl(env, "scale", args, func(fs *flag.FlagSet) func() error {
		fs.IntVar(&workers, "workers", -1, "the number of workers the job is to run (clamped to its --min_workers..--num_workers)")
		fs.IntVar(&ps, "ps", -1, psFlagUsage)
		return func() error {
			switch {
			case workers < 0 && ps < 0:
				return errors.New("--workers or --ps: required, a number of workers (0 or more) or of PS (1 or more)")
			case ps == 0 || ps > job.MaxPS:
				return fmt.Errorf("--ps=%d: want 1..%d parameter servers", ps, job.MaxPS)
			}
			return nil
		}
	})
	if err != nil {
		return err
	}
	if workers >= 0 {
		if err := client.ScaleJob(ctx, c.o.namespace, c.job, workers); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "job %s: asked for %d workers (the master keeps within the job's bounds; `elasticdl status %s` shows the result)\n", c.job, workers, c.job)
	}
	if ps > 0 {
		if err := client.ScalePS(ctx, c.o.namespace, c.job, ps); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "job %s: asked for %d PS (the master re-shards them live, pausing new tasks meanwhile)\n", c.job, ps)
	}
	return nil
}

// runStop deletes the job's master Job; Kubernetes garbage-collects the
// job's pods, Services and ConfigMaps with it. It waits until they are
// gone (bounded by --api_timeout).
func runStop(ctx context.Context, env Env, args []string) error {
	c, client, err := newJobCtl(env, "stop", args, nil)
	if err != nil {
		return err
	}
	if err := client.StopJob(ctx, c.o.namespace, c.job); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "job %s stopped: its pods are gone\n", c.job)
	return nil
}
