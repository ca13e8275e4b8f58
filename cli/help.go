package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"

	flag "github.com/spf13/pflag"
)

// flagGroups orders a command's flags in its help and in docs/cli.md; a
// flag not named here is under "Other".
var flagGroups = []struct {
	name  string
	flags []string
}{
	{"Model", []string{"model_def", "model_params", "worker_command", "num_classes", "optimizer", "seed"}},
	{"Data", []string{"training_data", "validation_data", "prediction_data", "prediction_outputs", "evaluation_steps", "num_epochs", "keep_snapshot", "snapshot_max_age", "data", "start", "end", "row_group"}},
	{"Job size", []string{"num_workers", "min_workers", "num_ps_pods", "minibatch_size", "num_minibatches_per_task", "workers", "ps"}},
	{"Strategy and SGD", []string{"distribution_strategy", "use_async", "grads_to_wait", "sync_version_tolerance", "lr_staleness_modulation", "overlap_push", "transport_dtype", "ps_transport",
		"collective_port", "global_batch_size", "collective_addr"}},
	{"Checkpoints and output", []string{"output", "checkpoint_dir", "checkpoint_steps", "keep_checkpoint_max", "checkpoint_dir_for_init", "format", "export_format"}},
	{"Faults", []string{"max_task_attempts", "task_timeout", "slow_worker_fraction", "backup_tasks", "park_slow_workers", "park_trials", "replace_slow_workers", "replace_slow_after", "worker_heartbeat_timeout", "worker_master_timeout", "relaunch_on_worker_failure", "master_timeout"}},
	{"Where it runs", []string{"backend", "job_name"}},
	{"Kubernetes", []string{"image", "namespace", "kubeconfig", "yaml", "master_pod_priority", "worker_pod_priority", "ps_pod_priority",
		"high_priority_class", "low_priority_class", "master_resource_request", "master_resource_limit", "worker_resource_request",
		"worker_resource_limit", "ps_resource_request", "ps_resource_limit", "node_selector", "volume", "service_account",
		"image_pull_policy", "envs", "master_port", "ps_port", "ps_host", "master_host", "api_timeout", "gang", "pod_grace_period",
		"role", "id", "follow"}},
	{"Scheduling", []string{"policy", "fairness", "resize_cost"}},
	{"Observability", []string{"log_interval", "dashboard_port", "metrics_port", "metrics_addr", "verbose", "interval", "settle"}},
}

// groupOf is the group a flag's help lists it under.
func groupOf(name string) string {
	for _, g := range flagGroups {
		for _, f := range g.flags {
			if f == name {
				return g.name
			}
		}
	}
	return "Other"
}

// grouped splits fs's flags into the groups, in flagGroups order, each a
// flag set of its own (the same *Flag values); empty groups are left out.
func grouped(fs *flag.FlagSet) (names []string, sets []*flag.FlagSet) {
	byGroup := map[string]*flag.FlagSet{}
	fs.VisitAll(func(f *flag.Flag) {
		if f.Hidden {
			return
		}
		g := groupOf(f.Name)
		if byGroup[g] == nil {
			byGroup[g] = flag.NewFlagSet(g, flag.ContinueOnError)
			byGroup[g].SortFlags = false
		}
		// A copy without backquotes: help would take a `quoted` word for
		// the value's name.
		shown := *f
		shown.Usage = strings.ReplaceAll(f.Usage, "`", "'")
		byGroup[g].AddFlag(&shown)
	})
	for _, g := range append(groupNames(), "Other") {
		if s := byGroup[g]; s != nil {
			names, sets = append(names, g), append(sets, s)
		}
	}
	return names, sets
}

func groupNames() []string {
	var out []string
	for _, g := range flagGroups {
		out = append(out, g.name)
	}
	return out
}

// printCommandHelp writes a command's help: what it does, then its flags
// by group.
func printCommandHelp(w io.Writer, c command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "%s\n\nUsage:\n  elasticdl %s\n", c.summary, c.usage())
	names, sets := grouped(fs)
	for i, s := range sets {
		fmt.Fprintf(w, "\n%s:\n%s", names[i], s.FlagUsagesWrapped(120))
	}
}

// flagError turns a flag parse error into one line, with the closest flag
// name when the flag is unknown, and where help is.
func flagError(fs *flag.FlagSet, cmd string, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "unknown flag: --"); ok {
		if s := closest(fs, name); s != "" {
			msg += " (did you mean --" + s + "?)"
		}
	}
	return usageError{fmt.Errorf("%s; see 'elasticdl %s --help'", msg, cmd)}
}

// closest is the flag of fs nearest to name (edit distance at most 2, or
// a name that contains it), or "".
func closest(fs *flag.FlagSet, name string) string {
	best, bestD := "", 3
	fs.VisitAll(func(f *flag.Flag) {
		if f.Hidden {
			return
		}
		d := editDistance(name, f.Name)
		if d < bestD || (best == "" && len(name) >= 3 && strings.Contains(f.Name, name)) {
			best, bestD = f.Name, min(d, bestD)
		}
	})
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// flagsOf is command c's flag set, for help, completion and docs: c runs
// with --help, which every command parses before it does anything else
// (TestFlagsOf), and newFlagSet hands the set over through env.
func flagsOf(c command, env Env) *flag.FlagSet {
	var fs *flag.FlagSet
	env.Stdout, env.Stderr = io.Discard, io.Discard
	env.flagSets = func(s *flag.FlagSet) {
		if fs == nil {
			fs = s
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // nothing may start
	_ = c.run(ctx, env, []string{"--help"})
	return fs
}

// Reference is the command line's reference in Markdown: every command a
// user runs, its summary and its flags by group (docs/cli.md).
func Reference(env Env) string {
	var b bytes.Buffer
	b.WriteString("# Command-line reference\n\n")
	b.WriteString("Generated from the code by `make docs` (`TestCLIReference` fails when it is out of date). " +
		"Every flag is written `--name=value`; `elasticdl COMMAND --help` prints the same, and " +
		"`elasticdl completion bash|zsh|fish|powershell` prints a shell completion script.\n")
	for _, c := range commands() {
		if c.hidden {
			continue
		}
		fmt.Fprintf(&b, "\n## elasticdl %s\n\n%s\n\n```\nelasticdl %s\n```\n", c.name, c.summary, c.usage())
		fs := flagsOf(c, env)
		if fs == nil {
			continue
		}
		names, sets := grouped(fs)
		for i, s := range sets {
			fmt.Fprintf(&b, "\n**%s**\n\n| flag | default | meaning |\n| --- | --- | --- |\n", names[i])
			s.VisitAll(func(f *flag.Flag) {
				def := f.DefValue
				if def == "" || def == "[]" {
					def = " "
				} else {
					def = "`" + def + "`"
				}
				fmt.Fprintf(&b, "| `--%s` | %s | %s |\n", f.Name, def, strings.ReplaceAll(strings.ReplaceAll(f.Usage, "|", `\|`), "\n", " "))
			})
		}
	}
	return b.String()
}
