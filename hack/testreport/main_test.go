package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestReport(t *testing.T) {
	cases := []struct {
		name, in   string
		failed     bool
		want, lose []string
	}{
		{"passing tests are quiet", `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"chatter\n"}
{"Action":"pass","Package":"p","Test":"TestA","Elapsed":2.5}
{"Action":"output","Package":"p","Output":"ok  \tp\t2.6s\n"}
{"Action":"pass","Package":"p","Elapsed":2.6}
`, false, []string{"ok  \tp\t2.6s", "2.5 s  pass  p.TestA"}, []string{"chatter"}},
		{"a failed test's output is printed", `{"Action":"start","Package":"p"}
{"Action":"output","Package":"p","Test":"TestB","Output":"why it broke\n"}
{"Action":"output","Package":"p","Test":"TestB/sub","Output":"in a subtest\n"}
{"Action":"fail","Package":"p","Test":"TestB/sub","Elapsed":1}
{"Action":"fail","Package":"p","Test":"TestB","Elapsed":1}
{"Action":"output","Package":"p","Output":"FAIL\tp\t1.1s\n"}
{"Action":"fail","Package":"p","Elapsed":1.1}
`, true, []string{"why it broke", "in a subtest", "FAIL\tp", "p.TestB"}, []string{"p.TestB/sub"}},
		{"a panic shows the test that was running", `{"Action":"start","Package":"p"}
{"Action":"output","Package":"p","Test":"TestC","Output":"last words\n"}
{"Action":"output","Package":"p","Output":"panic: test timed out\n"}
{"Action":"fail","Package":"p","Elapsed":600}
`, true, []string{"panic: test timed out", "still running when p failed: TestC", "last words"}, nil},
		{"a build failure", `{"ImportPath":"p","Action":"build-output","Output":"p/x.go:1: syntax error\n"}
{"ImportPath":"p","Action":"build-fail"}
not json
`, true, []string{"syntax error", "not json"}, nil},
		{"input ends before a package's result", `{"Action":"start","Package":"p"}
`, true, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			r := &report{out: &out, running: map[string][]string{}, open: map[string]bool{}}
			if err := r.read(strings.NewReader(c.in)); err != nil {
				t.Fatal(err)
			}
			r.slowest(10)
			failed := r.finish()
			if failed != c.failed {
				t.Errorf("failed = %v, want %v\n%s", failed, c.failed, out.String())
			}
			for _, w := range c.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			for _, l := range c.lose {
				if strings.Contains(out.String(), l) {
					t.Errorf("output has %q:\n%s", l, out.String())
				}
			}
		})
	}
}
