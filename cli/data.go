package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"elasticdl/data"
)

// runData is `elasticdl data export`: a data source written as a CSV file
// that any reader takes (the Python SDK's included), with the csv:// URI
// that reads it back record for record; `data serve` is the SDK's reader
// of the sources it has none of its own for (dataserve.go).
func runData(_ context.Context, env Env, args []string) error {
	fs := newFlagSet(env, "data export")
	uri := fs.String("data", "", "the source: any --training_data value (an IDX file, a CSV file, csv://..., synthetic-ctr://...)")
	output := fs.String("output", "", "the CSV file to write")
	start := fs.Int64("start", 0, "first record to export")
	end := fs.Int64("end", -1, "record to stop before (-1: the end of the source)")
	switch {
	case len(args) > 0 && args[0] == "serve":
		return runDataServe(env, args[1:])
	case len(args) > 0 && args[0] == "export":
		args = args[1:]
	case len(args) == 0 || (args[0] != "--help" && args[0] != "-h"):
		return usageError{errors.New("want `elasticdl data export --data=URI --output=FILE.csv` (or `data serve`, the Python SDK's reader)")}
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case *uri == "":
		return usageError{errors.New("--data: required")}
	case *output == "":
		return usageError{errors.New("--output: required: the CSV file to write")}
	case filepath.Ext(*output) != ".csv":
		return usageError{fmt.Errorf("--output=%s: name it *.csv", *output)}
	}
	src, err := data.Open(*uri)
	if err != nil {
		return fmt.Errorf("--data: %w", err)
	}
	defer src.Close()
	if *end < 0 {
		*end = src.Len()
	}
	if *start < 0 || *start > *end || *end > src.Len() {
		return usageError{fmt.Errorf("--start=%d --end=%d: want 0 <= start <= end <= %d (the source's records)", *start, *end, src.Len())}
	}
	// Written beside the target and renamed: no half file under its name.
	tmp, err := os.CreateTemp(filepath.Dir(*output), filepath.Base(*output)+".*.tmp")
	if err != nil {
		return fmt.Errorf("--output: %w", err)
	}
	defer os.Remove(tmp.Name())
	schema, corrupt, err := data.ExportCSV(tmp, src, *start, *end)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), *output)
	}
	if err != nil {
		return fmt.Errorf("export %s to %s: %w", *uri, *output, err)
	}
	abs, _ := filepath.Abs(*output)
	fmt.Fprintf(env.Stdout, "wrote %d records of %s to %s (%d corrupt left out); read them as\n  csv://%s?schema=%s\n",
		*end-*start-int64(corrupt), *uri, *output, corrupt, abs, schema)
	return nil
}
