// Package cli is the elasticdl command line: the client (train), the roles
// a job's processes run (master, worker, ps) and the model zoo listing.
// It is public so that a user's own binary, which registers its models in
// a model.Registry, gets the very same commands by calling Main.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"

	"elasticdl/model"
	"elasticdl/nn"
)

// exit codes
const (
	exitOK    = 0
	exitError = 1 // the job or role failed
	exitUsage = 2 // bad command line
)

// usageError marks errors in the command line, as opposed to failures.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// Env is what a command may touch of its process: arguments aside, all
// I/O goes through here so commands are testable.
type Env struct {
	Stdout, Stderr io.Writer
	Registry       *model.Registry
}

type command struct {
	name, summary string
	run           func(ctx context.Context, env Env, args []string) error
}

func commands() []command {
	return []command{
		{"train", "run a training job (local processes by default)", runTrain},
		{"evaluate", "evaluate a saved model (a checkpoint or a training job's OUTPUT/model) on --validation_data", runEvaluate},
		{"predict", "write a saved model's predictions for --prediction_data to a CSV file, in input order", runPredict},
		{"status", "show a Kubernetes job: its pods, summary and events", runStatus},
		{"logs", "print the log of a Kubernetes job's master (or --role=worker|ps --id=N)", runLogs},
		{"autoscaler", "size every elastic job of a Kubernetes cluster to share what other pods leave (deploy/autoscaler.yaml)", runAutoscaler},
		{"scale", "ask a job to run N workers (within its --min_workers..--num_workers): JOB --workers=N, or --output=DIR --workers=N for a local job", runScale},
		{"stop", "stop a Kubernetes job: delete its master Job, which garbage-collects the rest", runStop},
		{"master", "a job's master (the command of the master pod that train --backend=k8s creates)", runMaster},
		{"worker", "a job's training process (launched by the master)", runWorker},
		{"ps", "a job's parameter server (launched by the master)", runPS},
		{"zoo", "list the built-in models", runZoo},
		{"data", "export a data source as CSV that any reader takes: data export --data=URI --output=FILE.csv", runData},
		{"version", "print the version, commit, Go version and BLAS backend", runVersion},
	}
}

// Main runs the command named by args[0] and returns the process exit code.
func Main(args []string, reg *model.Registry) int {
	env := Env{Stdout: os.Stdout, Stderr: os.Stderr, Registry: reg}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, env, args)
}

// Run is Main with the process's I/O and context given.
func Run(ctx context.Context, env Env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(env.Stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, env, args[1:])
		switch {
		case err == nil:
			return exitOK
		case errors.Is(err, flag.ErrHelp):
			return exitOK
		}
		var qe quietError
		if errors.As(err, &qe) {
			return exitError
		}
		fmt.Fprintf(env.Stderr, "elasticdl %s: %s\n", c.name, oneLine(err))
		var ue usageError
		if errors.As(err, &ue) {
			return exitUsage
		}
		var re restartError
		if errors.As(err, &re) {
			return exitRestart
		}
		var fe fencedError
		if errors.As(err, &fe) {
			return exitFenced
		}
		return exitError
	}
	fmt.Fprintf(env.Stderr, "elasticdl: unknown command %q\n", args[0])
	usage(env.Stderr)
	return exitUsage
}

// oneLine keeps a joined multi-error readable on one line.
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: elasticdl <command> [flags]\n\ncommands:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nRun 'elasticdl <command> -h' for a command's flags.")
}

// parse parses flags, turning flag errors into usage errors and refusing
// stray positional arguments (a common typo: a flag without its dashes).
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q (flags are written --name=value)", fs.Arg(0))}
	}
	return nil
}

func newFlagSet(env Env, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("elasticdl "+name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	return fs
}

func newLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// runVersion prints what this binary is: the module version and the
// commit it was built from (as the go command stamped them), Go, the
// platform and the BLAS backend compiled in.
func runVersion(_ context.Context, env Env, args []string) error {
	fs := newFlagSet(env, "version")
	if err := parse(fs, args); err != nil {
		return err
	}
	version, commit, modified, cgo := "(unknown)", "(unknown)", false, "(unknown)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		version = bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			case "CGO_ENABLED":
				cgo = s.Value
			}
		}
	}
	if modified {
		commit += " (with uncommitted changes)"
	}
	fmt.Fprintf(env.Stdout, "elasticdl %s\ncommit: %s\ngo: %s %s/%s\ncgo: %s\nBLAS backend: %s\n",
		version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH, cgo, nn.BLASBackend())
	return nil
}

func runZoo(_ context.Context, env Env, args []string) error {
	fs := newFlagSet(env, "zoo")
	if err := parse(fs, args); err != nil {
		return err
	}
	specs := env.Registry.Specs()
	sort.Slice(specs, func(i, j int) bool { return specs[i].Name < specs[j].Name })
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tINPUT\tCLASSES\tOPTIMIZER\tDESCRIPTION")
	var params []string
	for _, s := range specs {
		fmt.Fprintf(tw, "%s\t%v\t%d\t%s\t%s\n", s.Name, s.InputShape, s.NumClasses, s.Optimizer, s.Description)
		if s.ParamsHelp != "" {
			params = append(params, fmt.Sprintf("  %s: %s", s.Name, s.ParamsHelp))
		}
	}
	tw.Flush()
	if len(params) > 0 {
		fmt.Fprintf(env.Stdout, "\n--model_params (semicolon-separated key=value):\n%s\n", strings.Join(params, "\n"))
	}
	fmt.Fprintf(env.Stdout, "\nBLAS backend: %s\n", nn.BLASBackend())
	return nil
}
