// Command testreport reads `go test -json` on its standard input and prints
// what CI's log needs: each package's result line, the whole output of
// every test that failed (and of tests still running when their package
// failed: a panic or a timeout), and at the end the slowest tests, so that
// the log says where the suite's time goes without -v's every line.
//
//	go test -json ./... | go run ./hack/testreport [-slowest N]
//
// It exits 1 when a test or package failed, or when its input ends
// without a package's result (go test killed).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// timing is one finished top-level test.
type timing struct {
	name    string
	seconds float64
	result  string
}

// report is what has been read so far.
type report struct {
	out     io.Writer
	running map[string][]string // package + "\x00" + test: its output until it ends
	open    map[string]bool     // packages without a result yet
	times   []timing
	failed  bool
}

func main() {
	slowest := flag.Int("slowest", 30, "how many of the slowest tests to list at the end")
	flag.Parse()
	r := &report{out: os.Stdout, running: map[string][]string{}, open: map[string]bool{}}
	if err := r.read(os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(1)
	}
	r.slowest(*slowest)
	if r.finish() {
		os.Exit(1)
	}
}

// finish says which packages never got a result and whether anything
// failed.
func (r *report) finish() bool {
	open := make([]string, 0, len(r.open))
	for p := range r.open {
		open = append(open, p)
	}
	slices.Sort(open)
	for _, p := range open {
		fmt.Fprintf(r.out, "testreport: %s: no result (go test was stopped?)\n", p)
		r.failed = true
	}
	return r.failed
}

// read handles every event; a line that is not JSON (go test's own
// messages, a build failure) is printed as it is.
func (r *report) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(r.out, sc.Text())
			continue
		}
		r.handle(e)
	}
	return sc.Err()
}

func (r *report) handle(e event) {
	key := e.Package + "\x00" + e.Test
	switch {
	case e.Action == "build-output":
		fmt.Fprint(r.out, e.Output)
	case e.Action == "build-fail":
		r.failed = true
	case e.Action == "start":
		r.open[e.Package] = true
	case e.Test == "" && e.Action == "output":
		// The package's own lines: "ok  pkg 1.2s", "FAIL", build errors.
		fmt.Fprint(r.out, e.Output)
	case e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
		delete(r.open, e.Package)
		if e.Action == "fail" {
			r.failed = true
			r.flushPackage(e.Package)
		}
		r.dropPackage(e.Package)
	case e.Action == "output":
		r.running[key] = append(r.running[key], e.Output)
	case e.Action == "pass" || e.Action == "skip" || e.Action == "fail":
		if e.Action == "fail" {
			r.failed = true
			fmt.Fprint(r.out, strings.Join(r.running[key], ""))
		}
		delete(r.running, key)
		if !strings.Contains(e.Test, "/") {
			r.times = append(r.times, timing{e.Package + "." + e.Test, e.Elapsed, e.Action})
		}
	}
}

// flushPackage prints the output of pkg's tests that never ended: what
// was running when it panicked or timed out.
func (r *report) flushPackage(pkg string) {
	var keys []string
	for k := range r.running {
		if strings.HasPrefix(k, pkg+"\x00") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(r.out, "=== still running when %s failed: %s\n", pkg, strings.TrimPrefix(k, pkg+"\x00"))
		fmt.Fprint(r.out, strings.Join(r.running[k], ""))
	}
}

func (r *report) dropPackage(pkg string) {
	for k := range r.running {
		if strings.HasPrefix(k, pkg+"\x00") {
			delete(r.running, k)
		}
	}
}

// slowest lists the n slowest top-level tests.
func (r *report) slowest(n int) {
	if n <= 0 || len(r.times) == 0 {
		return
	}
	slices.SortFunc(r.times, func(a, b timing) int {
		if a.seconds != b.seconds {
			if a.seconds > b.seconds {
				return -1
			}
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	total := 0.0
	for _, t := range r.times {
		total += t.seconds
	}
	fmt.Fprintf(r.out, "== the %d slowest tests (of %d, %.0f s in all)\n", min(n, len(r.times)), len(r.times), total)
	for _, t := range r.times[:min(n, len(r.times))] {
		fmt.Fprintf(r.out, "%8.1f s  %s  %s\n", t.seconds, t.result, t.name)
	}
}
