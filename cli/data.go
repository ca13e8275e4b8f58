package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"elasticdl/data"
)

// dataExport is what `elasticdl data export` was asked for.
type dataExport struct {
	uri, output, format string
	start, end          int64
	rowGroup            int
}

// runData is `elasticdl data export`: a data source written as a CSV file
// that any reader takes (the Python SDK's included), with the csv:// URI
// that reads it back record for record, or as a Parquet file; `data serve`
// is the SDK's reader of the sources it has none of its own for
// (dataserve.go).
func runData(_ context.Context, env Env, args []string) error {
	fs := newFlagSet(env, "data export")
	var o dataExport
	fs.StringVar(&o.uri, "data", "", "the source: any --training_data value (an IDX file, a CSV file, csv://..., a Parquet file or directory, parquet://..., synthetic-ctr://...)")
	fs.StringVar(&o.output, "output", "", "the file to write (*.csv or *.parquet), or - for standard output")
	fs.StringVar(&o.format, "format", "", "csv or parquet (default: parquet for --output=*.parquet, else csv)")
	fs.IntVar(&o.rowGroup, "row_group", data.DefaultParquetRowGroup, "--format=parquet: records per row group")
	fs.Int64Var(&o.start, "start", 0, "first record to export")
	fs.Int64Var(&o.end, "end", -1, "record to stop before (-1: the end of the source)")
	switch {
	case len(args) > 0 && args[0] == "serve":
		return runDataServe(env, args[1:])
	case len(args) > 0 && args[0] == "export":
		args = args[1:]
	case len(args) == 0 || (args[0] != "--help" && args[0] != "-h"):
		return usageError{errors.New("want `elasticdl data export --data=URI --output=FILE.csv` (or FILE.parquet; or `data serve`, the Python SDK's reader)")}
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := o.check(); err != nil {
		return err
	}
	src, err := data.Open(o.uri)
	if err != nil {
		return fmt.Errorf("--data: %w", err)
	}
	defer src.Close()
	if o.end < 0 {
		o.end = src.Len()
	}
	if o.start < 0 || o.start > o.end || o.end > src.Len() {
		return usageError{fmt.Errorf("--start=%d --end=%d: want 0 <= start <= end <= %d (the source's records)", o.start, o.end, src.Len())}
	}
	schema, corrupt, err := o.write(env, src)
	if err != nil {
		return fmt.Errorf("export %s to %s: %w", o.uri, o.output, err)
	}
	n := o.end - o.start - int64(corrupt)
	if o.output == "-" { // standard output holds the records
		fmt.Fprintf(env.Stderr, "wrote %d records of %s as %s (%d corrupt left out); schema=%s\n", n, o.uri, o.format, corrupt, schema)
		return nil
	}
	abs, _ := filepath.Abs(o.output)
	fmt.Fprintf(env.Stdout, "wrote %d records of %s to %s (%d corrupt left out); read them as\n  %s://%s?schema=%s\n",
		n, o.uri, o.output, corrupt, o.format, abs, schema)
	return nil
}

// check validates the flags and settles the format.
func (o *dataExport) check() error {
	ext := strings.TrimPrefix(strings.ToLower(filepath.Ext(o.output)), ".")
	switch {
	case o.uri == "":
		return usageError{errors.New("--data: required")}
	case o.output == "":
		return usageError{errors.New("--output: required: the file to write (*.csv or *.parquet), or - for standard output")}
	case o.format == "" && ext == "parquet" && o.output != "-":
		o.format = "parquet"
	case o.format == "":
		o.format = "csv"
	}
	switch {
	case o.format != "csv" && o.format != "parquet":
		return usageError{fmt.Errorf("--format=%s: want csv or parquet", o.format)}
	case o.output != "-" && ext != o.format:
		return usageError{fmt.Errorf("--output=%s: name it *.%s", o.output, o.format)}
	case o.rowGroup < 1:
		return usageError{fmt.Errorf("--row_group=%d: want at least 1 record", o.rowGroup)}
	}
	return nil
}

// write exports the records to standard output, or to a file written
// beside the target and renamed: no half file under its name.
func (o *dataExport) write(env Env, src data.Source) (schema string, corrupt int, err error) {
	export := func(w io.Writer) (string, int, error) {
		if o.format == "parquet" {
			return data.ExportParquet(w, src, o.start, o.end, o.rowGroup)
		}
		return data.ExportCSV(w, src, o.start, o.end)
	}
	if o.output == "-" {
		return export(env.Stdout)
	}
	tmp, err := os.CreateTemp(filepath.Dir(o.output), filepath.Base(o.output)+".*.tmp")
	if err != nil {
		return "", 0, err
	}
	defer os.Remove(tmp.Name())
	schema, corrupt, err = export(tmp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), o.output)
	}
	return schema, corrupt, err
}
