// Package proctest finds the processes of a local elasticdl job from
// /proc (Linux), for the integration tests and benchmarks that signal
// them: an instance is a child of the master whose first argument is its
// role.
package proctest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Instance is one child process of a master.
type Instance struct {
	Pid  int
	Args []string // the command line, the executable first
}

// Flag returns the value of --name=value on the instance's command line.
func (in Instance) Flag(name string) (string, bool) {
	for _, a := range in.Args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// Children returns the processes of parent running `<binary> role ...`.
func Children(parent int, role string) []Instance {
	var out []Instance
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || ParentOf(pid) != parent {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if len(args) > 1 && args[1] == role {
			out = append(out, Instance{Pid: pid, Args: args})
		}
	}
	return out
}

// ParentOf returns pid's parent, -1 if pid is gone.
func ParentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// comm may contain spaces: fields after the last ')' are fixed.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return -1
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}
