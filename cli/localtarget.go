package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"elasticdl/internal/atomicfile"
	"elasticdl/internal/master"
	"elasticdl/internal/master/job"
)

// A local job's worker target travels in a file under its --output, the
// local counterpart of the annotation a Kubernetes job's master watches:
// `elasticdl scale --output=DIR --workers=N` writes it, the master polls
// it. A file outlives the master, so a master that takes over after a
// crash reads the latest wish too.

// targetFile is where a local job's worker target is asked for;
// psTargetFile its number of PS.
func targetFile(output string) string   { return filepath.Join(output, "master", "target-workers") }
func psTargetFile(output string) string { return filepath.Join(output, "master", "target-ps") }

// sendTarget returns what a target watcher calls with each new target:
// it passes the target on to the master (Deps.Targets, read in its event
// loop), or gives up once ctx ends.
func sendTarget(ctx context.Context, targets chan<- master.Target, source string) func(int) {
	return func(n int) {
		select {
		case targets <- master.Target{Workers: n, Source: source}:
		case <-ctx.Done():
		}
	}
}

// sendPSTarget is sendTarget for a number of PS (0 is passed on as -1:
// not a PS count, which the master refuses with a warning).
func sendPSTarget(ctx context.Context, targets chan<- master.Target, source string) func(int) {
	return func(n int) {
		if n == 0 {
			n = -1
		}
		select {
		case targets <- master.Target{PS: n, Source: source}:
		case <-ctx.Done():
		}
	}
}

// targetPollInterval is how often a local master reads targetFile.
const targetPollInterval = time.Second

// watchTargetFile reads path every interval until ctx ends and calls
// onTarget with each new value that is a number of workers, onBad with
// each new one that is not. A missing or empty file asks for nothing.
func watchTargetFile(ctx context.Context, path string, interval time.Duration, onTarget func(int), onBad func(string)) {
	last := ""
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if data, err := os.ReadFile(path); err == nil {
			// Empty: a write by hand caught between truncating and writing.
			if v := strings.TrimSpace(string(data)); v != "" && v != last {
				last = v
				if n, err := strconv.Atoi(v); err == nil && n >= 0 {
					onTarget(n)
				} else {
					onBad(v)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// localScale reports whether scale's arguments name a local job
// (--output) rather than a Kubernetes one.
func localScale(args []string) bool {
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && name == "output" {
			return true
		}
	}
	return false
}

// runScaleLocal asks the local job whose --output is DIR to run N workers.
func runScaleLocal(env Env, args []string) error {
	fl := newFlagSet(env, "scale")
	output := fl.String("output", "", "the --output of a local job (`elasticdl train` on this machine)")
	workers := fl.Int("workers", -1, "the number of workers the job is to run (clamped to its --min_workers..--num_workers)")
	ps := fl.Int("ps", -1, psFlagUsage)
	if err := parse(fl, args); err != nil {
		return err
	}
	switch {
	case *output == "":
		return usageError{errors.New("--output: required, the local job's output directory")}
	case *workers < 0 && *ps < 0:
		return usageError{errors.New("--workers or --ps: required, a number of workers (0 or more) or of PS (1 or more)")}
	case *ps == 0 || *ps > job.MaxPS:
		return usageError{fmt.Errorf("--ps=%d: want 1..%d parameter servers", *ps, job.MaxPS)}
	}
	dir := filepath.Dir(targetFile(*output))
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("no local job under %s (its master keeps its state in %s)", *output, dir)
		}
		return err
	}
	if *workers >= 0 {
		if err := atomicfile.Write(targetFile(*output), []byte(strconv.Itoa(*workers)+"\n")); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "local job in %s: asked for %d workers (the master keeps within the job's bounds and applies it within %s)\n", *output, *workers, targetPollInterval)
	}
	if *ps > 0 {
		if err := atomicfile.Write(psTargetFile(*output), []byte(strconv.Itoa(*ps)+"\n")); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "local job in %s: asked for %d PS (the master re-shards them live, pausing new tasks meanwhile)\n", *output, *ps)
	}
	return nil
}
