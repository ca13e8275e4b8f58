package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"

	"elasticdl/internal/cluster/k8s"
)

// checkSQLBackend checks what elasticdl sql needs to run its jobs on the
// chosen backend, before anything runs.
func checkSQLBackend(o sqlOptions, jo jobOptions) error {
	if jo.backend != backendK8s {
		return nil
	}
	if err := jo.check(); err != nil {
		return err
	}
	if jo.k8s.yaml {
		return usageError{errors.New("--yaml: elasticdl sql runs its jobs and uses what they leave; it does not print them")}
	}
	if o.sharedDir == "" {
		return usageError{errors.New("--shared_dir: required with --backend=k8s: a directory the job's pods see at the same path, for the stored model they load and the model, summary and predictions they write (docs/sql.md, On Kubernetes)")}
	}
	if fi, err := os.Stat(o.sharedDir); err != nil || !fi.IsDir() {
		return usageError{fmt.Errorf("--shared_dir=%s: not a directory", o.sharedDir)}
	}
	return nil
}

// workDir makes a statement's directory, for the model its job loads and
// what the job writes.
func (r sqlRun) workDir(prefix string) (string, error) {
	dir, err := os.MkdirTemp(r.sharedDir, prefix)
	if err != nil {
		return "", fmt.Errorf("the statement's directory: %w", err)
	}
	if r.jobs.backend == backendK8s {
		// The job's pods may run as another user, and write here.
		if err := os.Chmod(dir, 0o777); err != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("the statement's directory: %w", err)
		}
	}
	return dir, nil
}

// runJob runs a statement's job (run: runTrain, runEvaluate or
// runPredict with their arguments). On Kubernetes it waits for the job to
// end and then deletes it, so that the next statement's job can take the
// same name; a failed job is left for `elasticdl logs`.
func (r sqlRun) runJob(ctx context.Context, run func(context.Context, Env, []string) error, args []string) error {
	if r.jobs.backend != backendK8s {
		return run(ctx, r.env, args)
	}
	job := cmp.Or(lastFlag("job_name", args), r.jobName)
	err := run(ctx, r.env, append(args, "--wait"))
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("%w (elasticdl stop %s --namespace=%s deletes it)", err, job, r.jobs.k8s.namespace)
	}
	client, cerr := k8s.Connect(r.jobs.k8s.kubeconfig, r.jobs.k8s.apiTimeout)
	if cerr != nil {
		return errors.Join(err, cerr)
	}
	// Interrupted, the job is stopped too: nobody waits for it.
	sctx, ns := context.WithoutCancel(ctx), r.jobs.k8s.namespace
	if serr := client.StopJob(sctx, ns, job); serr != nil && !errors.Is(serr, k8s.ErrNoJob) {
		return errors.Join(err, fmt.Errorf("delete the finished job: %w", serr))
	}
	if err != nil {
		return err
	}
	return client.WaitJobGone(sctx, ns, job)
}
