// Package cli is the elasticdl command line: the client (train), the roles
// a job's processes run (master, worker, ps) and the model zoo listing.
// It is public so that a user's own binary, which registers its models in
// a model.Registry, gets the very same commands by calling Main.
package cli

import (
	"context"
	"errors"
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

	"github.com/spf13/cobra"
	flag "github.com/spf13/pflag"

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
	Stdin          io.Reader // nil: none (empty)
	Registry       *model.Registry
	// flagSets, when set, is handed every flag set newFlagSet makes (help,
	// completion and docs/cli.md read a command's flags through it).
	flagSets func(*flag.FlagSet)
}

// stdin is the standard input, empty when there is none.
func (env Env) stdin() io.Reader {
	if env.Stdin == nil {
		return strings.NewReader("")
	}
	return env.Stdin
}

type command struct {
	name, summary string
	run           func(ctx context.Context, env Env, args []string) error
	// args is what follows the command and its flags in its usage line.
	args string
	// hidden: a role the master starts, not a command for people (it
	// still has --help); not in the command list or docs/cli.md.
	hidden bool
}

// usage is the command's usage line, after "elasticdl ".
func (c command) usage() string {
	u := c.name + " [flags]"
	if c.args != "" {
		u = c.name + " " + c.args + " [flags]"
	}
	return u
}

func commands() []command {
	return []command{
		{name: "train", summary: "run a training job (local processes by default)", run: runTrain},
		{name: "sql", summary: "run SQL on a database: standard statements, and SQLFlow's TO TRAIN … INTO, TO PREDICT … USING and TO EVALUATE as local jobs", run: runSQL},
		{name: "evaluate", summary: "evaluate a saved model (a checkpoint or a training job's OUTPUT/model) on --validation_data", run: runEvaluate},
		{name: "predict", summary: "write a saved model's predictions for --prediction_data to a CSV file, in input order", run: runPredict},
		{name: "export", summary: "write a saved model as an ONNX file (opset 17) that onnxruntime, Triton or KServe serve", run: runExport},
		{name: "status", summary: "show a Kubernetes job: its pods, summary and events", run: runStatus, args: "JOB"},
		{name: "logs", summary: "print the log of a Kubernetes job's master (or --role=worker|ps --id=N)", run: runLogs, args: "JOB"},
		{name: "autoscaler", summary: "size every elastic job of a Kubernetes cluster to share what other pods leave (deploy/autoscaler.yaml)", run: runAutoscaler},
		{name: "dashboard", summary: "open a local port to a Kubernetes job's dashboard (or --autoscaler's) through the API server, across master pods", run: runDashboard, args: "JOB"},
		{name: "scale", summary: "ask a job to run N workers (within its --min_workers..--num_workers): JOB --workers=N, or --output=DIR --workers=N for a local job", run: runScale, args: "JOB"},
		{name: "stop", summary: "stop a Kubernetes job: delete its master Job, which garbage-collects the rest", run: runStop, args: "JOB"},
		{name: "master", summary: "a job's master (the command of the master pod that train --backend=k8s creates)", run: runMaster, hidden: true},
		{name: "worker", summary: "a job's training process (launched by the master)", run: runWorker, hidden: true},
		{name: "ps", summary: "a job's parameter server (launched by the master)", run: runPS, hidden: true},
		{name: "ringd", summary: "a Python worker's helper that runs the Go collective ring for it (started by the SDK)", run: runRingd, hidden: true},
		{name: "zoo", summary: "list the built-in models", run: runZoo},
		{name: "data", summary: "export a data source as CSV that any reader takes (the Python SDK's too) or as Parquet", run: runData, args: "export"},
		{name: "version", summary: "print the version, commit, Go version and BLAS backend", run: runVersion},
	}
}

// Main runs the command named by args[0] and returns the process exit code.
func Main(args []string, reg *model.Registry) int {
	env := Env{Stdout: os.Stdout, Stderr: os.Stderr, Stdin: os.Stdin, Registry: reg}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, env, args)
}

// Run is Main with the process's I/O and context given. The commands are
// cobra commands (which gives `elasticdl completion` and suggestions for
// mistyped commands) that parse their own flags with pflag, so that each
// command checks its flags its own way and help groups them.
func Run(ctx context.Context, env Env, args []string) int {
	if len(args) == 0 {
		usage(env.Stderr)
		return exitUsage
	}
	var ran *command
	var runErr error
	root := rootCommand(env, func(c command, err error) { ran, runErr = &c, err })
	root.SetArgs(args)
	if _, err := root.ExecuteContextC(ctx); err != nil && ran == nil {
		// cobra's own errors: an unknown command, or completion's.
		msg := strings.SplitN(err.Error(), "\n", 2)[0]
		if sugg := root.SuggestionsFor(args[0]); len(sugg) > 0 {
			msg += " (did you mean " + strings.Join(sugg, " or ") + "?)"
		}
		fmt.Fprintf(env.Stderr, "elasticdl: %s; see 'elasticdl --help'\n", msg)
		return exitUsage
	}
	if ran == nil {
		return exitOK // help or completion
	}
	return exitCode(env, *ran, runErr)
}

// rootCommand is the command tree; done is told which command ran and how
// it ended.
func rootCommand(env Env, done func(command, error)) *cobra.Command {
	root := &cobra.Command{
		Use:           "elasticdl",
		Short:         "elastic, distributed deep-learning training on Kubernetes",
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.NoArgs,
		// Runnable, so that an unknown command is an error (cobra would
		// print help for it otherwise).
		RunE:                       func(*cobra.Command, []string) error { return nil },
		SuggestionsMinimumDistance: 2,
	}
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	root.SetHelpFunc(func(cmd *cobra.Command, _ []string) {
		if cmd == root {
			usage(env.Stdout)
			return
		}
		for _, c := range commands() {
			if c.name == cmd.Name() {
				_ = c.run(cmd.Context(), env, []string{"--help"})
			}
		}
	})
	for _, c := range commands() {
		root.AddCommand(&cobra.Command{
			Use:                c.usage(),
			Short:              c.summary,
			Hidden:             c.hidden,
			DisableFlagParsing: true,
			RunE: func(cmd *cobra.Command, args []string) error {
				err := c.run(cmd.Context(), env, args)
				done(c, err)
				return nil
			},
			ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
				return completeFlags(c, env, toComplete)
			},
		})
	}
	return root
}

// completeFlags completes a flag name (the shell completes file names
// otherwise).
func completeFlags(c command, env Env, toComplete string) ([]string, cobra.ShellCompDirective) {
	if !strings.HasPrefix(toComplete, "-") || strings.Contains(toComplete, "=") {
		return nil, cobra.ShellCompDirectiveDefault
	}
	fs := flagsOf(c, env)
	if fs == nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	fs.VisitAll(func(f *flag.Flag) {
		if name := "--" + f.Name; !f.Hidden && strings.HasPrefix(name, toComplete) {
			if f.Value.Type() == "bool" {
				out = append(out, name+"\t"+f.Usage)
			} else {
				out = append(out, name+"=\t"+f.Usage)
			}
		}
	})
	return out, cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
}

// exitCode prints a command's error (one line) and picks the exit code.
func exitCode(env Env, c command, err error) int {
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

// oneLine keeps a joined multi-error readable on one line.
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: elasticdl <command> [flags]\n\ncommands:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range commands() {
		if !c.hidden {
			fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
		}
	}
	fmt.Fprintf(tw, "  %s\t%s\n", "completion", "a shell completion script: completion bash|zsh|fish|powershell")
	tw.Flush()
	fmt.Fprintln(w, "\nThe roles a job's processes run (started by the master): master, worker, ps.")
	fmt.Fprintln(w, "Run 'elasticdl <command> --help' for a command's flags; docs/cli.md lists them all.")
}

// parse parses flags, turning flag errors into one-line usage errors (with
// the nearest flag's name when one is unknown) and refusing stray
// positional arguments (a common typo: a flag without its dashes).
func parse(fs *flag.FlagSet, args []string) error {
	name := strings.TrimPrefix(fs.Name(), "elasticdl ")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return flagError(fs, name, err)
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q (flags are written --name=value); see 'elasticdl %s --help'", fs.Arg(0), name)}
	}
	return nil
}

// newFlagSet is the flag set of command name ("data export": a command
// and its subcommand); --help prints the command's help, flags grouped.
func newFlagSet(env Env, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("elasticdl "+name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	fs.SortFlags = false
	fs.Usage = func() {
		first, _, _ := strings.Cut(name, " ")
		for _, c := range commands() {
			if c.name == first {
				printCommandHelp(env.Stdout, c, fs)
			}
		}
	}
	if env.flagSets != nil {
		env.flagSets(fs)
	}
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
