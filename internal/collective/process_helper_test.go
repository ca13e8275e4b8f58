package collective

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The test binary doubles as a ring member process: run with helperEnv=1 it
// listens on a loopback port, prints "addr <host:port>" and then obeys
// commands on stdin, one per line, answering each on stdout:
//
//	form <version> <rank> <timeout> <peer,peer,...>  -> formed | error <msg>
//	allreduce <count> <iterations> <verify 0|1>      -> done <n> | error <n> <msg>
//	                                                   (0 iterations: until an error)
//	close                                            -> closed
const helperEnv = "COLLECTIVE_TEST_HELPER"

func helperMain(in io.Reader, out io.Writer) int {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	l, err := Listen("127.0.0.1:0", logger)
	if err != nil {
		fmt.Fprintln(out, "error", err)
		return 1
	}
	defer l.Close()
	fmt.Fprintln(out, "addr", l.Addr())
	var ring *Ring
	ctx := context.Background()
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch {
		case f[0] == "form" && len(f) == 5:
			version, _ := strconv.ParseInt(f[1], 10, 64)
			rank, _ := strconv.Atoi(f[2])
			timeout, _ := time.ParseDuration(f[3])
			if ring != nil {
				_ = ring.Close()
			}
			ring, err = l.Form(ctx, Config{Rank: rank, Peers: strings.Split(f[4], ","), Version: version, Timeout: timeout, Logger: logger})
			if err != nil {
				fmt.Fprintln(out, "error", err)
				continue
			}
			fmt.Fprintln(out, "formed")
		case f[0] == "allreduce" && len(f) == 4 && ring != nil:
			count, _ := strconv.Atoi(f[1])
			iters, _ := strconv.Atoi(f[2])
			done, err := runAllReduces(ctx, ring, count, iters, f[3] == "1", nil)
			if err != nil {
				fmt.Fprintln(out, "error", done, err)
				continue
			}
			fmt.Fprintln(out, "done", done)
		case f[0] == "close" && ring != nil:
			_ = ring.Close()
			fmt.Fprintln(out, "closed")
		default:
			fmt.Fprintln(out, "error unknown command", sc.Text())
		}
	}
	return 0
}

// helper is a member process run from the test binary.
type helper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	addr  string
}

func startHelpers(t testing.TB, n int) []*helper {
	t.Helper()
	hs := make([]*helper, n)
	for i := range hs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"=1")
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		h := &helper{cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				h.lines <- sc.Text()
			}
			close(h.lines)
		}()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		line := h.expect(t, "addr", 30*time.Second)
		h.addr = strings.TrimPrefix(line, "addr ")
		hs[i] = h
	}
	return hs
}

func (h *helper) send(t testing.TB, format string, args ...any) {
	t.Helper()
	if _, err := fmt.Fprintf(h.stdin, format+"\n", args...); err != nil {
		t.Fatalf("helper %d: %v", h.cmd.Process.Pid, err)
	}
}

// expect waits up to within for the helper's next line and requires it to
// start with prefix.
func (h *helper) expect(t testing.TB, prefix string, within time.Duration) string {
	t.Helper()
	select {
	case line, ok := <-h.lines:
		if !ok {
			t.Fatalf("helper %d exited while %q was expected", h.cmd.Process.Pid, prefix)
		}
		if !strings.HasPrefix(line, prefix) {
			t.Fatalf("helper %d said %q, want %q", h.cmd.Process.Pid, line, prefix)
		}
		return line
	case <-time.After(within):
		t.Fatalf("helper %d: no %q within %v", h.cmd.Process.Pid, prefix, within)
	}
	return ""
}

// formWithHelpers forms ring version over this process (rank 0, listener l)
// and the helpers (ranks 1..), and returns this process's Ring.
func formWithHelpers(t testing.TB, l *Listener, hs []*helper, version int64, timeout time.Duration) *Ring {
	t.Helper()
	peers := []string{l.Addr()}
	for _, h := range hs {
		peers = append(peers, h.addr)
	}
	for i, h := range hs {
		h.send(t, "form %d %d %v %s", version, i+1, timeout, strings.Join(peers, ","))
	}
	ring, err := l.Form(context.Background(), Config{Rank: 0, Peers: peers, Version: version, Timeout: timeout, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ring.Close() })
	for _, h := range hs {
		h.expect(t, "formed", 2*timeout)
	}
	return ring
}
