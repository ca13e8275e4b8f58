package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	flag "github.com/spf13/pflag"

	"elasticdl/internal/master"
	"elasticdl/internal/sqldb"
	"elasticdl/internal/sqlflow"
)

// sqlOptions are elasticdl sql's own flags.
type sqlOptions struct {
	datasource string
	execute    string
	file       string
	sharedDir  string
	maxAge     time.Duration // --snapshot_max_age
}

// runSQL parses SQLFlow's extended SQL from -e, -f or standard input and
// runs it on --datasource, statement by statement. The whole script is
// checked first: a script with a mistake runs nothing.
func runSQL(ctx context.Context, env Env, args []string) error {
	fs := newFlagSet(env, "sql")
	var o sqlOptions
	fs.StringVar(&o.datasource, "datasource", "", "the database: sqlite://PATH, postgres://USER:PASSWORD@HOST:PORT/DB or mysql://USER:PASSWORD@tcp(HOST:PORT)/DB")
	fs.StringVarP(&o.execute, "execute", "e", "", "the statements to run (several separated by ';')")
	fs.StringVarP(&o.file, "file", "f", "", "a file of statements to run ('-': standard input, the default without -e)")
	fs.StringVar(&o.sharedDir, "shared_dir", "", "where each statement's model and job output go (default: the temporary directory); required with --backend=k8s: a directory the job's pods see at the same path (a volume mounted here too, given to the pods by --volume)")
	fs.DurationVar(&o.maxAge, "snapshot_max_age", 24*time.Hour, "a script that runs a job first drops the snapshot tables (elasticdl_snap_*) last prepared this long ago or more: "+
		"leftovers of jobs killed as a whole, or kept by --keep_snapshot (a running job's master records its own every hour; 0: drop none)")
	// train's flags set the jobs of TO TRAIN statements, whose attributes win.
	cfg := master.DefaultConfig()
	var jo jobOptions
	addTrainFlags(fs, &cfg, &jo)
	for _, name := range statementFlags {
		if err := fs.MarkHidden(name); err != nil {
			return err
		}
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	jobFlags, err := setJobFlags(fs)
	if err != nil {
		return err
	}
	if o.datasource == "" {
		return usageError{errors.New("--datasource is required: " + sqldb.URISyntax)}
	}
	if err := checkSQLBackend(o, jo); err != nil {
		return err
	}
	src, err := o.source(env)
	if err != nil {
		return err
	}
	stmts, err := sqlflow.Parse(src)
	if err != nil {
		return usageError{fmt.Errorf("%s: %w", o.origin(), err)}
	}
	checks := make([]stmtCheck, len(stmts))
	for i, s := range stmts {
		if checks[i], err = checkRunnable(s); err != nil {
			return usageError{fmt.Errorf("%s: %w", o.origin(), err)}
		}
	}
	db, ds, err := sqldb.Connect(ctx, o.datasource)
	if err != nil {
		return err
	}
	defer db.Close()
	if runsJob(stmts) {
		sweepSnapshots(ctx, env, db, ds.Dialect, o.maxAge)
	}
	r := sqlRun{env: env, db: db, dialect: ds.Dialect, datasource: o.datasource, jobFlags: jobFlags,
		sharedDir: o.sharedDir, jobs: jo, jobName: cfg.JobName}
	for i, s := range stmts {
		if err := r.run(ctx, s, checks[i]); err != nil {
			// The statements before it ran: say which one failed.
			return fmt.Errorf("statement %d of %d (%s): %w", i+1, len(stmts), s.Start(), err)
		}
	}
	return nil
}

// sqlOwnFlags are elasticdl sql's flags that its jobs do not take.
var sqlOwnFlags = []string{"datasource", "execute", "file", "shared_dir", "snapshot_max_age"}

// setJobFlags are the train flags given to elasticdl sql, as arguments
// for its jobs; the flags a statement sets itself are refused.
func setJobFlags(fs *flag.FlagSet) ([]string, error) {
	var out []string
	var err error
	fs.Visit(func(f *flag.Flag) {
		switch {
		case slices.Contains(statementFlags, f.Name):
			err = usageError{fmt.Errorf("--%s: a TO TRAIN statement sets it (TO TRAIN model, the SELECT, WITH model.*)", f.Name)}
		case !slices.Contains(sqlOwnFlags, f.Name):
			out = append(out, "--"+f.Name+"="+f.Value.String())
		}
	})
	return out, err
}

// source is the script: -e's text, or -f's file ("-" or neither: stdin).
func (o sqlOptions) source(env Env) (string, error) {
	if o.execute != "" && o.file != "" {
		return "", usageError{errors.New("give the statements with -e or with -f, not both")}
	}
	if o.execute != "" {
		return o.execute, nil
	}
	var r io.Reader = env.stdin()
	if o.file != "" && o.file != "-" {
		f, err := os.Open(o.file)
		if err != nil {
			return "", usageError{fmt.Errorf("-f: %w", err)}
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", o.origin(), err)
	}
	if !utf8.Valid(b) {
		return "", usageError{fmt.Errorf("%s: not UTF-8 text", o.origin())}
	}
	return string(b), nil
}

// origin names where the script came from, for errors.
func (o sqlOptions) origin() string {
	switch {
	case o.execute != "":
		return "-e"
	case o.file != "" && o.file != "-":
		return o.file
	}
	return "standard input"
}

// checkRunnable checks a statement before anything runs.
func checkRunnable(s sqlflow.Statement) (stmtCheck, error) {
	switch s := s.(type) {
	case sqlflow.Standard:
		return stmtCheck{}, nil
	case *sqlflow.Train:
		settings, features, err := checkTrain(s)
		return stmtCheck{settings: settings, features: features}, err
	case *sqlflow.Evaluate:
		c, err := checkEvaluate(s)
		return stmtCheck{eval: c}, err
	case *sqlflow.Predict:
		flags, err := checkPredict(s)
		return stmtCheck{predict: flags}, err
	}
	return stmtCheck{}, fmt.Errorf("%s: %T: not a statement elasticdl sql runs", s.Start(), s)
}

// writeResult prints a query's rows as an aligned table with a row
// count, or what a statement changed.
func writeResult(w io.Writer, res sqldb.Result, truncated bool) {
	if !res.Query {
		if res.Affected >= 0 {
			fmt.Fprintf(w, "OK, %d %s\n", res.Affected, plural(res.Affected, "row", "rows"))
		} else {
			fmt.Fprintln(w, "OK")
		}
		return
	}
	cells := make([][]string, 0, len(res.Rows)+1)
	cells = append(cells, res.Columns)
	for _, r := range res.Rows {
		row := make([]string, len(r))
		for i, v := range r {
			row[i] = "NULL"
			if v.Valid {
				row[i] = strings.NewReplacer("\n", `\n`, "\t", `\t`).Replace(v.String)
			}
		}
		cells = append(cells, row)
	}
	width := make([]int, len(res.Columns))
	for _, row := range cells {
		for i, c := range row {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	line := func(row []string) {
		for i, c := range row {
			if i > 0 {
				fmt.Fprint(w, " | ")
			}
			pad := width[i] - utf8.RuneCountInString(c)
			if i == len(row)-1 {
				pad = 0 // no trailing spaces
			}
			fmt.Fprint(w, c, strings.Repeat(" ", pad))
		}
		fmt.Fprintln(w)
	}
	line(cells[0])
	rule := make([]string, len(width))
	for i, n := range width {
		rule[i] = strings.Repeat("-", n)
	}
	fmt.Fprintln(w, strings.Join(rule, "-+-"))
	for _, row := range cells[1:] {
		line(row)
	}
	n := int64(len(res.Rows))
	if truncated {
		fmt.Fprintf(w, "(the first %d rows; more not shown)\n", n)
		return
	}
	fmt.Fprintf(w, "(%d %s)\n", n, plural(n, "row", "rows"))
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
