package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	flag "github.com/spf13/pflag"

	"elasticdl/internal/cluster/agent"
	"elasticdl/internal/cluster/k8s"
	"elasticdl/internal/cluster/local"
	"elasticdl/internal/master"
	"elasticdl/internal/master/statestore"
)

// maxMasterRestarts bounds how often a local job's supervisor starts a new
// master after one died, against a master that crashes at once each time.
const maxMasterRestarts = 10

// exitRestart is the exit code of a master that stopped acting because it
// could not persist the job's state: the next master resumes. exitFenced:
// another master took the job over; this one must not come back.
const (
	exitRestart = 3
	exitFenced  = 4
)

// masterStateFile is where a local job's master persists its state, under
// --output.
func masterStateFile(output string) string { return filepath.Join(output, "master", "state.json") }

// superviseLocal runs a local job the failover way: this process owns the
// worker and PS processes (the local backend, served to the master over a
// Unix socket by package agent) and the master's port, and runs the master
// as a child process. When the master dies (kill -9, OOM, a crash), it
// starts a new one, which resumes from the state the dead one persisted
// under --output and adopts the instances, which never noticed more than a
// master that did not answer for a moment.
func superviseLocal(ctx context.Context, env Env, fs *flag.FlagSet, cfg master.Config, o jobOptions, notStarted func()) error {
	logDir := filepath.Join(o.localDir(cfg), "logs")
	level := slog.LevelInfo
	if o.verbose {
		level = slog.LevelDebug
	}
	logger := newLogger(env.Stderr, level)
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("own executable: %w", err)
	}
	be, err := local.New(local.Config{Binary: exe, LogDir: logDir, Logger: logger})
	if err != nil {
		return fmt.Errorf("local backend: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		be.Close(cctx)
	}()
	// Abstract namespace: no file to clean up, nothing left if killed.
	sock := fmt.Sprintf("@elasticdl-agent-%d-%d", os.Getpid(), time.Now().UnixNano())
	agentLis, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("agent socket: %w", err)
	}
	srv := agent.Serve(agentLis, be, logger)
	defer srv.Shutdown()
	runID := strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + strconv.Itoa(os.Getpid())
	args := append(masterArgs(fs, cfg.Mode), "--output="+cfg.Output, "--work_dir="+o.localDir(cfg), "--local_agent="+sock, "--listen_fd=3", "--refusal_fd=4", "--run_id="+runID)
	caDir, err := makeLocalCA(cfg.JobName, o.localDir(cfg), o)
	if err != nil {
		return err
	}
	if caDir != "" {
		args = append(args, "--tls_ca_dir="+caDir)
	}

	res, err := restartMasters(ctx, env, logger, exe, args, cfg.ListenAddr, o.dashboardAddr())
	if err != nil {
		return err
	}
	if res.refusal != "" {
		// The job was refused: before anything ran (bad data, model,
		// checkpoint), one line and nothing left behind; by a master
		// taking over (its data gone, say), the job ends with that.
		if res.restarts == 0 && notStarted != nil {
			notStarted()
		}
		return errors.New(res.refusal)
	}
	last := res.gaveUp
	s, err := master.ReadSummary(cfg.Output)
	if err != nil {
		if notStarted != nil {
			notStarted()
		}
		if last != nil {
			return fmt.Errorf("%w (no job summary: %v)", last, err)
		}
		return fmt.Errorf("the master ended without a job summary: %w", err)
	}
	printSummary(env, s, cfg.Output, logDir)
	if s.Status != "succeeded" {
		return errors.New(s.Error)
	}
	return nil
}

// masterEnd is how a supervised master ended the job.
type masterEnd struct {
	code     int    // the last master's exit code
	refusal  string // why it refused the job, if it did
	restarts int    // masters started after one died
	gaveUp   error  // set when masters died too often
}

// restartMasters keeps the master's port at listenAddr (and the
// dashboard's at dashAddr, "" none) for the whole job and runs the master
// (exe args, with the ports as its fds 3 and 5), and a new one each time
// one dies, until one ends the job (exit 0: succeeded, 1: failed,
// exitFenced: another master has it) or ctx ends.
func restartMasters(ctx context.Context, env Env, logger *slog.Logger, exe string, args []string, listenAddr, dashAddr string) (masterEnd, error) {
	// Workers reconnect to the same address, and wait in the backlog while
	// a master restarts.
	lis, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return masterEnd{}, fmt.Errorf("master listen on %s: %w", listenAddr, err)
	}
	defer lis.Close()
	f, err := lis.(*net.TCPListener).File()
	if err != nil {
		return masterEnd{}, fmt.Errorf("master listener: %w", err)
	}
	defer f.Close()
	dash := bindDashboard(logger, dashAddr)
	if dash != nil {
		defer dash.Close()
		args = append(args[:len(args):len(args)], "--dashboard_fd="+strconv.Itoa(dashboardFD))
	}
	quick := 0
	for restarts := 0; ; restarts++ {
		started := time.Now()
		code, how, refusal, err := runMasterProcess(ctx, env, exe, args, f, dash)
		if err != nil {
			return masterEnd{}, err
		}
		end := masterEnd{code: code, refusal: refusal, restarts: restarts}
		var next afterMaster
		next, quick = decideAfterMaster(masterExit{code: code, refused: refusal != "", stopping: ctx.Err() != nil, lived: time.Since(started)}, restarts, quick)
		switch next.verdict {
		case jobEnded:
			return end, nil
		case giveUp:
			logger.Error("master died too often, giving up", "restarts", restarts, "last", how)
			end.gaveUp = fmt.Errorf("master %s, %d times in all", how, restarts+1)
			return end, nil
		}
		logger.Warn("master died; starting a new one, which resumes the job", "how", how, "restart", restarts+1, "of", maxMasterRestarts, "after", next.wait)
		select {
		case <-time.After(next.wait):
		case <-ctx.Done():
		}
	}
}

// masterExit is how one supervised master ended.
type masterExit struct {
	code     int  // exit code, -1 when a signal ended it
	refused  bool // it refused the job (bad input)
	stopping bool // the supervisor is stopping the job
	lived    time.Duration
}

type verdict int

const (
	jobEnded verdict = iota // the master ended the job (or was stopped): no restart
	restart                 // start a new master, after wait
	giveUp                  // masters died too often
)

type afterMaster struct {
	verdict verdict
	wait    time.Duration
}

// decideAfterMaster decides what follows a master's end, after restarts
// restarts and quick deaths in a row of masters that lived under a
// second; it returns the new count of quick deaths. The first restart is
// at once (workers wait for it); a crash loop backs off a second more each
// time; a master killed while it worked is no crash loop.
func decideAfterMaster(e masterExit, restarts, quick int) (afterMaster, int) {
	switch {
	case e.refused || e.stopping || e.code == exitOK || e.code == exitError || e.code == exitFenced:
		return afterMaster{verdict: jobEnded}, quick
	case restarts >= maxMasterRestarts:
		return afterMaster{verdict: giveUp}, quick
	}
	quick++
	if e.lived >= time.Second {
		quick = 1
	}
	return afterMaster{verdict: restart, wait: time.Duration(quick-1) * time.Second}, quick
}

// superviseMaster is a master pod's first process: it keeps the master's
// port and runs the master (args) as a child, restarting it in place when
// it dies; its exit code is the last master's.
func superviseMaster(ctx context.Context, env Env, args []string, listenAddr, dashAddr string) error {
	logger := newLogger(env.Stderr, slog.LevelInfo)
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("own executable: %w", err)
	}
	res, err := restartMasters(ctx, env, logger, exe, args, listenAddr, dashAddr)
	switch {
	case err != nil:
		return err
	case res.gaveUp != nil:
		return res.gaveUp
	case res.code == exitOK:
		return nil
	case res.code == exitFenced:
		return fencedError{errors.New("another master took the job over")}
	case res.code == exitRestart:
		// Stopped (the pod deleted or evicted): the pod's Job starts the
		// next master, which resumes.
		return restartable(errors.New("the master handed the job over to the next master pod"))
	}
	return quietError{fmt.Errorf("master exited with code %d", res.code)} // it said why
}

// runMasterProcess runs one master and returns its exit code (-1 when a
// signal ended it), how it ended, in words, and why it refused the job if
// it did before anything ran. ctx ending asks the master to stop the job
// (SIGTERM). dash, when set, is the dashboard's listener (fd 5).
func runMasterProcess(ctx context.Context, env Env, exe string, args []string, lis, dash *os.File) (code int, how, refusal string, err error) {
	refusals, refusalW, err := os.Pipe()
	if err != nil {
		return 0, "", "", fmt.Errorf("start master: %w", err)
	}
	defer refusals.Close()
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = env.Stderr, env.Stderr
	cmd.ExtraFiles = []*os.File{lis, refusalW} // fds 3 and 4
	if dash != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, dash) // fd 5
	}
	// The master goes with this process, whatever kills it. Linux sends
	// the death signal when the *thread* that forked the child exits, and
	// Go discards a thread whose goroutine exits locked to it (the local
	// backend's forker does at Close): fork and reap the master from a
	// thread held for that time, so it is never one that goes away.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started, done := make(chan error, 1), make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		done <- cmd.Wait()
	}()
	err = <-started
	refusalW.Close()
	if err != nil {
		return 0, "", "", fmt.Errorf("start master: %w", err)
	}
	read := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(refusals, 1<<16))
		read <- strings.TrimSpace(string(b))
	}()
	var werr error
	select {
	case werr = <-done:
	case <-ctx.Done():
		cmd.Process.Signal(syscall.SIGTERM)
		werr = <-done
	}
	refusal = <-read // the pipe ends with the master
	if werr == nil {
		return exitOK, "exited", refusal, nil
	}
	var ee *exec.ExitError
	if !errors.As(werr, &ee) {
		return 0, "", "", fmt.Errorf("master: %w", werr)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return -1, "killed (" + ws.Signal().String() + ")", refusal, nil
	}
	return ee.ExitCode(), fmt.Sprintf("exited with code %d", ee.ExitCode()), refusal, nil
}

// localMasterOptions are the master's flags under a local supervisor.
type localMasterOptions struct {
	agent       string
	listenFD    int
	refusalFD   int
	dashboardFD int
	runID       string
	supervised  bool
	// caDir holds the job's CA (tlsid's ca.crt, ca.key): OUTPUT/tls, or
	// the CA Secret's mount on Kubernetes.
	caDir string
}

func (l *localMasterOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&l.agent, "local_agent", "", "local jobs: the supervisor's socket serving the job's instances (set by `elasticdl train`)")
	fs.IntVar(&l.listenFD, "listen_fd", 0, "local jobs: serve on this inherited listening socket (set by `elasticdl train`)")
	fs.IntVar(&l.dashboardFD, "dashboard_fd", 0, "serve the dashboard on this inherited listening socket (set by the job's supervisor)")
	fs.IntVar(&l.refusalFD, "refusal_fd", 0, "local jobs: write why the job was refused before it started to this inherited descriptor, not to stderr (set by `elasticdl train`)")
	fs.BoolVar(&l.supervised, "supervised", false, "k8s: this is the master process under the pod's first process, which restarts it (set by `elasticdl master`)")
	fs.StringVar(&l.runID, "run_id", "", "local jobs: the run whose persisted state a restarted master resumes (set by `elasticdl train`)")
	fs.StringVar(&l.caDir, "tls_ca_dir", "", "the job's certificate authority (ca.crt, ca.key), which --tls needs (set by `elasticdl train`)")
}

// listener is the listening socket inherited as --listen_fd (nil: none).
func (l *localMasterOptions) listener() (net.Listener, error) {
	if l.listenFD <= 0 {
		return nil, nil
	}
	f := os.NewFile(uintptr(l.listenFD), "master-listener")
	defer f.Close()
	lis, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("--listen_fd=%d: %w", l.listenFD, err)
	}
	return lis, nil
}

// runLocalMaster is the master of a supervised local job: the backend is
// the supervisor's (package agent), its state persists under --output.
func runLocalMaster(ctx context.Context, env Env, cfg master.Config, o jobOptions, l localMasterOptions) error {
	level := slog.LevelInfo
	if o.verbose {
		level = slog.LevelDebug
	}
	logger := newLogger(env.Stderr, level)
	if l.runID == "" {
		return usageError{errors.New("--local_agent needs --run_id")}
	}
	ca, err := loadJobCA(o, l, cfg.JobName, logger)
	if err != nil {
		return err
	}
	stopProfile, err := startProfile("master", 0)
	if err != nil {
		return err
	}
	defer stopProfile()
	local := o.localDir(cfg)
	store, err := statestore.Open(masterStateFile(local), 10*time.Second)
	if err != nil {
		return restartable(err)
	}
	defer store.Close()
	lis, err := l.listener()
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	be, err := agent.Dial(dctx, l.agent, logger)
	cancel()
	if err != nil {
		return restartable(err)
	}
	cfg.RunID = l.runID
	be.SetTLSDir(filepath.Join(l.caDir, "instances"))
	targets := make(chan master.Target, 16)
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go watchTargetFile(wctx, targetFile(local), targetPollInterval, sendTarget(wctx, targets, "elasticdl scale ("+targetFile(local)+")"), func(v string) {
		logger.Warn("ignoring a target that is not a number of workers", "file", targetFile(local), "value", v)
	})
	go watchTargetFile(wctx, psTargetFile(local), targetPollInterval, sendPSTarget(wctx, targets, "elasticdl scale ("+psTargetFile(local)+")"), func(v string) {
		logger.Warn("ignoring a target that is not a number of PS", "file", psTargetFile(local), "value", v)
	})
	m, err := master.New(cfg, master.Deps{Backend: be, Registry: env.Registry, Logger: logger, Store: store, Listener: lis, Targets: targets,
		History: master.HistoryFile(master.HistoryFileName(local)), Dashboard: l.dashboardListener(logger), CA: ca})
	if err != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		be.Close(cctx)
		if l.refusalFD > 0 {
			// The supervisor says it, once.
			f := os.NewFile(uintptr(l.refusalFD), "refusal")
			_, werr := f.WriteString(oneLine(err))
			f.Close()
			if werr == nil {
				return quietError{err}
			}
		}
		return err
	}
	if cfg.MetricsPort > 0 {
		stop, err := startMasterMetrics(m, portAddr("127.0.0.1", cfg.MetricsPort), logger)
		if err != nil {
			be.Detach()
			return restartable(err)
		}
		defer stop()
	}
	_, runErr := m.Run(ctx)
	if errors.Is(runErr, master.ErrStateLost) {
		be.Detach() // the instances stay for the next master
		return stateError(runErr)
	}
	return runErr
}

// stateError makes a master that cannot persist the job's state exit for
// its supervisor: to be restarted (exitRestart), or, when another master
// took the job over, not (exitFenced).
func stateError(err error) error {
	if errors.Is(err, k8s.ErrFenced) {
		return fencedError{err}
	}
	return restartable(err)
}

type fencedError struct{ err error }

func (e fencedError) Error() string { return e.err.Error() }
func (e fencedError) Unwrap() error { return e.err }

// restartError makes the master exit with exitRestart: the supervisor
// starts another.
type restartError struct{ err error }

func (e restartError) Error() string { return e.err.Error() }
func (e restartError) Unwrap() error { return e.err }

func restartable(err error) error { return restartError{err} }

// quietError fails the command (exit 1) without printing: someone else
// reports it.
type quietError struct{ err error }

func (e quietError) Error() string { return e.err.Error() }
func (e quietError) Unwrap() error { return e.err }
