// Package local implements cluster.Backend with child processes of the
// master on the same Linux machine, so that a whole elastic job (master,
// parameter servers, workers) runs on one host without Kubernetes: for
// development, tests and fault-injection experiments.
//
// Every instance runs as `Binary <role> <spec.Args...>` in its own process
// group, with stdout and stderr in LogDir/<role>-<id>.log. Instances die with
// the master: a terminal's Ctrl-C reaches only the master (which then stops
// the job through Close), and if the master is killed outright the kernel
// kills the instances (Pdeathsig). Processes that an instance starts itself
// are signalled by Stop and Close through the process group, but are not
// covered by Pdeathsig.
//
// Capped wraps a backend (this one, typically) into a cluster with room for
// only so many workers, whose room can be raised and lowered while a job
// runs: pending workers, preemptions and returning capacity, rehearsed on
// one machine.
package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"elasticdl/internal/cluster"
)

// DefaultGracePeriod is how long Stop and Close wait between SIGTERM and
// SIGKILL when Config.GracePeriod is zero.
const DefaultGracePeriod = 5 * time.Second

// Errors that callers may want to tell apart with errors.Is.
var (
	ErrClosed          = errors.New("backend closed")
	ErrUnknownInstance = errors.New("unknown instance")
)

// Config configures a Backend.
type Config struct {
	// Binary is the executable every instance runs, as
	// `Binary <role> <spec.Args...>`; os.Executable() when empty. A name
	// without a slash is looked up in PATH.
	Binary string
	// LogDir receives each instance's stdout and stderr in
	// <role>-<id>.log. Required; created if missing.
	LogDir string
	// Env is added to every instance's environment (KEY=VALUE), after the
	// master's own environment and before InstanceSpec.Env; the last value
	// of a repeated key wins.
	Env []string
	// GracePeriod is how long a stopped instance gets between SIGTERM and
	// SIGKILL; DefaultGracePeriod when zero or negative.
	GracePeriod time.Duration
	// Logger receives the backend's own log lines; slog.Default() when nil.
	Logger *slog.Logger
	// TLSDir is where instances' TLS bundles are written (WriteTLS).
	TLSDir string
}

// Backend runs instances as local child processes. Build it with New and
// always Close it: it owns a goroutine (and an OS thread) until then.
type Backend struct {
	binary string
	logDir string
	tlsDir string
	env    []string
	grace  time.Duration
	log    *slog.Logger

	forks  chan forkRequest
	events *cluster.EventQueue
	// live counts instances that are being launched or not yet reaped, plus
	// their pending SIGKILL timers; Close waits for it to drain.
	live sync.WaitGroup

	mu        sync.Mutex
	instances map[instanceKey]*instance // kept after exit so Stop can tell "done" from "unknown"
	psPorts   map[int]int               // PS shard index → port
	portTaken map[int]bool
	closing   bool          // Close has begun: launches fail, everything is being stopped
	killing   bool          // Close's context ended: SIGKILL rather than wait out the grace period
	closed    chan struct{} // closed when the first Close returns
}

type instanceKey struct {
	role cluster.Role
	id   int
}

type instance struct {
	spec    cluster.InstanceSpec
	logPath string

	// Guarded by Backend.mu.
	pid int // 0 until the process has started
	// exited is set once the process has exited but before it is reaped:
	// after reaping its pid (and process group ID) may belong to a stranger,
	// so nothing may signal it from then on.
	exited    bool
	requested bool          // Stop or Close asked it to end
	done      chan struct{} // closed when exited is set
}

// forkRequest asks the forker goroutine to start cmd.
type forkRequest struct {
	cmd *exec.Cmd
	err chan error // capacity 1
}

var _ cluster.Backend = (*Backend)(nil)

// New checks cfg, creates LogDir and returns a Backend ready to launch.
func New(cfg Config) (*Backend, error) {
	if cfg.LogDir == "" {
		return nil, errors.New("local: Config.LogDir is required")
	}
	binary := cfg.Binary
	if binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("local: default binary: %w", err)
		}
		binary = exe
	}
	if err := os.MkdirAll(cfg.LogDir, 0o755); err != nil {
		return nil, fmt.Errorf("local: log directory: %w", err)
	}
	grace := cfg.GracePeriod
	if grace <= 0 {
		grace = DefaultGracePeriod
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	b := &Backend{
		binary:    binary,
		logDir:    cfg.LogDir,
		tlsDir:    cfg.TLSDir,
		env:       slices.Clone(cfg.Env),
		grace:     grace,
		log:       logger.With("backend", "local"),
		forks:     make(chan forkRequest),
		events:    cluster.NewEventQueue(),
		instances: map[instanceKey]*instance{},
		psPorts:   map[int]int{},
		portTaken: map[int]bool{},
		closed:    make(chan struct{}),
	}
	locked := make(chan struct{})
	go b.forker(locked)
	// Its thread is the forker's before anyone else forks: a thread that
	// forked something earlier (a child of another owner) must not be the
	// one discarded at Close.
	<-locked
	return b, nil
}

// forker starts every child process from one OS thread that lives as long as
// the Backend. Linux sends Pdeathsig when the *thread* that forked a child
// exits, not when its process does; Go forks on whatever thread the calling
// goroutine happens to run on, and terminates a thread whose goroutine exits
// while locked to it (runtime.LockOSThread). Forking from an arbitrary
// goroutine could therefore get a healthy instance SIGKILLed at a random
// moment. Here the thread exits only after Close has reaped every child.
func (b *Backend) forker(locked chan<- struct{}) {
	// Deliberately never unlocked: when the loop ends the thread is
	// discarded with the goroutine instead of going back to the scheduler.
	runtime.LockOSThread()
	close(locked)
	for req := range b.forks {
		req.err <- req.cmd.Start()
	}
}

// Events delivers instance events: Running after a successful start, then
// Exited. Events of one instance arrive in order. The channel is closed
// after Close, once every event has been received: keep receiving until
// then. Events queue up without bound when nobody receives, so a slow
// consumer never delays reaping.
func (b *Backend) Events() <-chan cluster.Event { return b.events.Out() }

// Existing implements cluster.Backend: a Backend's instances are its own
// children, none older than it. (Package agent keeps them for the next
// master when the master is another process.)
func (b *Backend) Existing(context.Context) ([]cluster.Event, error) { return nil, nil }

// Launch starts `Binary <role> <spec.Args...>` and emits Running. It fails
// if the binary cannot be started, if the role and ID were already launched
// on this Backend, or after Close. ctx bounds only the start itself: the
// instance outlives it.
func (b *Backend) Launch(ctx context.Context, spec cluster.InstanceSpec) error {
	name := spec.Name()
	if spec.Role == "" {
		return fmt.Errorf("local: launch %s: empty role", name)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("local: launch %s: %w", name, err)
	}
	spec, err := WriteTLS(b.tlsDir, spec)
	if err != nil {
		return fmt.Errorf("local: launch %s: %w", name, err)
	}
	key := instanceKey{spec.Role, spec.ID}
	inst := &instance{
		spec:    spec,
		logPath: filepath.Join(b.logDir, name+".log"),
		done:    make(chan struct{}),
	}

	b.mu.Lock()
	if b.closing {
		b.mu.Unlock()
		return fmt.Errorf("local: launch %s: %w", name, ErrClosed)
	}
	if _, dup := b.instances[key]; dup {
		b.mu.Unlock()
		return fmt.Errorf("local: launch %s: already launched (IDs are unique per launch)", name)
	}
	// Registered before the start so that Close waits for this launch, and
	// a Stop that races with it is honoured right after the start.
	b.instances[key] = inst
	b.live.Add(1)
	b.mu.Unlock()

	cmd, err := b.start(ctx, inst)
	if err != nil {
		b.mu.Lock()
		delete(b.instances, key)
		b.mu.Unlock()
		b.live.Done()
		return fmt.Errorf("local: launch %s: %w", name, err)
	}

	b.mu.Lock()
	inst.pid = cmd.Process.Pid
	// Pushed before the reaper starts, so Running always precedes Exited.
	b.events.Push(cluster.Event{Role: spec.Role, ID: spec.ID, Index: spec.Index, Phase: cluster.Running})
	if b.closing || inst.requested {
		inst.requested = true
		b.terminateLocked(inst)
	}
	b.mu.Unlock()
	b.log.Info("instance started", "instance", name, "pid", cmd.Process.Pid, "log", inst.logPath)

	go b.reap(inst, cmd)
	return nil
}

// EnvBinary names the elasticdl binary in a command instance's
// environment.
const EnvBinary = "ELASTICDL_BINARY"

// start opens the instance's log file and has the forker start the process.
func (b *Backend) start(ctx context.Context, inst *instance) (*exec.Cmd, error) {
	logf, err := os.OpenFile(inst.logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	// The child gets its own descriptors; ours is not needed after Start.
	defer logf.Close()

	program, args := b.binary, append([]string{string(inst.spec.Role)}, inst.spec.Args...)
	var binEnv []string
	if len(inst.spec.Command) > 0 {
		program, args = inst.spec.Command[0], inst.spec.Command[1:]
		// A worker program finds this build's helpers (the SDK's ring
		// helper, `elasticdl ringd`) here, not on PATH.
		binEnv = []string{EnvBinary + "=" + b.binary}
	}
	cmd := exec.Command(program, args...)
	cmd.Stdout = logf // an *os.File: no copying goroutine, nothing to drain on Wait
	cmd.Stderr = logf
	cmd.Env = slices.Concat(os.Environ(), b.env, binEnv, inst.spec.Env)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group: a terminal's SIGINT goes to the master alone,
		// which stops the job in order; Stop signals the whole group.
		Setpgid: true,
		// Die with the master even when it is SIGKILLed. Safe only because
		// the forker thread outlives every child; see forker.
		Pdeathsig: syscall.SIGKILL,
	}

	req := forkRequest{cmd: cmd, err: make(chan error, 1)}
	select {
	case b.forks <- req:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	// Once handed over the start cannot be abandoned, or a started child
	// would go unwatched.
	if err := <-req.err; err != nil {
		return nil, fmt.Errorf("start %q: %w", program, err)
	}
	return cmd, nil
}

// reap waits for inst to exit and emits its Exited event.
func (b *Backend) reap(inst *instance, cmd *exec.Cmd) {
	defer b.live.Done()
	name := inst.spec.Name()
	// Learn of the exit without reaping, so that exited is set while the
	// pid still cannot be reused; see instance.exited.
	if err := waitExited(inst.pid); err != nil {
		b.log.Warn("waiting for instance", "instance", name, "pid", inst.pid, "err", err)
	}
	b.mu.Lock()
	inst.exited = true
	requested := inst.requested
	close(inst.done)
	b.mu.Unlock()

	werr := cmd.Wait()
	if err := RemoveTLS(b.tlsDir, inst.spec.Role, inst.spec.ID); err != nil {
		b.log.Warn("removing an exited instance's TLS bundle", "instance", name, "err", err)
	}
	ev := exitEvent(inst, cmd.ProcessState, werr, requested)
	level := slog.LevelInfo
	if !requested && ev.Reason != cluster.Completed {
		level = slog.LevelWarn
	}
	b.log.Log(context.Background(), level, "instance exited", "instance", name, "pid", inst.pid,
		"code", ev.ExitCode, "reason", ev.Reason, "requested", requested, "message", ev.Message, "log", inst.logPath)
	if !b.events.Push(ev) {
		// Cannot happen: Close closes the queue only after every reaper is done.
		b.log.Error("event after close dropped", "instance", name)
	}
}

// exitEvent describes how inst ended.
func exitEvent(inst *instance, ps *os.ProcessState, werr error, requested bool) cluster.Event {
	ev := cluster.Event{
		Role:      inst.spec.Role,
		ID:        inst.spec.ID,
		Index:     inst.spec.Index,
		Phase:     cluster.Exited,
		Requested: requested,
	}
	ws, ok := waitStatus(ps)
	switch {
	case !ok:
		// Someone else reaped it (or wait failed): the outcome is unknown.
		ev.ExitCode = -1
		ev.Reason = cluster.Failed
		ev.Message = fmt.Sprintf("exit status unknown: %v", werr)
	case ws.Signaled():
		ev.ExitCode = -1
		ev.Reason = cluster.Killed
		ev.Message = "killed by signal: " + ws.Signal().String()
		if ws.CoreDump() {
			ev.Message += " (core dumped)"
		}
	case ws.ExitStatus() == 0:
		ev.Reason = cluster.Completed
	default:
		ev.ExitCode = ws.ExitStatus()
		ev.Reason = cluster.Failed
		// The last words in the log usually say why; the user sees them
		// in the master's log and the job summary without opening files.
		ev.Message = logTail(inst.logPath)
		if ev.Message == "" {
			ev.Message = fmt.Sprintf("exit status %d (empty log %s)", ev.ExitCode, inst.logPath)
		}
	}
	return ev
}

func waitStatus(ps *os.ProcessState) (syscall.WaitStatus, bool) {
	if ps == nil {
		return 0, false
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ws, ok
}

// Stop asks an instance to end: SIGTERM to its process group now, SIGKILL
// after the grace period if it is still there. It returns at once; the
// Exited event (with Requested=true) follows. Stopping an instance that has
// already exited, or is already stopping, is a no-op. ctx is not used:
// stopping must work on shutdown paths whose context is already done.
func (b *Backend) Stop(_ context.Context, role cluster.Role, id int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	inst, ok := b.instances[instanceKey{role, id}]
	if !ok {
		return fmt.Errorf("local: stop %s: %w", cluster.InstanceName(role, id), ErrUnknownInstance)
	}
	b.stopLocked(inst)
	return nil
}

// stopLocked marks inst as asked to end and, once it runs, terminates it.
// A launch still starting terminates it as soon as its process exists.
func (b *Backend) stopLocked(inst *instance) {
	if inst.requested || inst.exited {
		return
	}
	inst.requested = true
	if inst.pid != 0 {
		b.terminateLocked(inst)
	}
}

// terminateLocked sends SIGTERM and arms the SIGKILL that follows the grace
// period (at once when Close has run out of time). inst is running.
func (b *Backend) terminateLocked(inst *instance) {
	b.signalLocked(inst, syscall.SIGTERM)
	if b.killing {
		b.signalLocked(inst, syscall.SIGKILL)
		return
	}
	// inst is not reaped, so live > 0 and adding to it is safe even while
	// Close waits on it.
	b.live.Add(1)
	go func() {
		defer b.live.Done()
		t := time.NewTimer(b.grace)
		defer t.Stop()
		select {
		case <-inst.done:
			return
		case <-t.C:
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if !inst.exited {
			b.log.Warn("instance ignored SIGTERM, killing it", "instance", inst.spec.Name(), "pid", inst.pid, "grace", b.grace)
			b.signalLocked(inst, syscall.SIGKILL)
		}
	}()
}

// signalLocked signals inst's process group, unless inst has exited (its pid
// may then be reused at any moment).
func (b *Backend) signalLocked(inst *instance, sig syscall.Signal) {
	if inst.pid == 0 || inst.exited {
		return
	}
	// The group takes along whatever the instance started itself.
	err := syscall.Kill(-inst.pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		// It moved to a group of its own (setsid); it is still our child.
		err = syscall.Kill(inst.pid, sig)
	}
	if err != nil {
		b.log.Warn("signal instance", "instance", inst.spec.Name(), "pid", inst.pid, "signal", sig, "err", err)
	}
}

// Pid returns the process ID of a started instance that has not exited yet.
// It is meant for tests and fault injection (e.g. kill -9 a worker).
func (b *Backend) Pid(role cluster.Role, id int) (int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	inst, ok := b.instances[instanceKey{role, id}]
	if !ok || inst.pid == 0 || inst.exited {
		return 0, false
	}
	return inst.pid, true
}

// Kill ends a running instance at once with SIGKILL to its process group,
// as a cluster that takes the machine back would: it is not a requested
// stop, so its Exited event has Requested=false (Reason Killed). Killing an
// instance that has exited is a no-op; one still starting cannot be killed
// yet. For fault injection and Capped's preemption.
func (b *Backend) Kill(role cluster.Role, id int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	inst, ok := b.instances[instanceKey{role, id}]
	switch {
	case !ok:
		return fmt.Errorf("local: kill %s: %w", cluster.InstanceName(role, id), ErrUnknownInstance)
	case inst.exited:
		return nil
	case inst.pid == 0:
		return fmt.Errorf("local: kill %s: not started yet", cluster.InstanceName(role, id))
	}
	b.signalLocked(inst, syscall.SIGKILL)
	return nil
}

// PSAddress returns "127.0.0.1:<port>" (to listen and dial) for PS shard index. The port is
// chosen on first use by binding port 0 and closing the listener, then
// remembered, so every relaunch of the shard serves at the same address.
//
// Race: between that close and the PS binding the port, another process
// (or an outgoing connection's ephemeral port) may take it; the PS then
// fails to listen and exits non-zero, which the master treats as a PS
// failure. Ephemeral ports are handed out in a rotating fashion, which
// makes this rare on a development machine.
func (b *Backend) PSAddress(index int) (cluster.Endpoint, error) {
	if index < 0 {
		return cluster.Endpoint{}, fmt.Errorf("local: PS address: negative shard index %d", index)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if port, ok := b.psPorts[index]; ok {
		return psAddr(port), nil
	}
	// A closed port can come straight back from the kernel; shards must
	// not share one.
	for range 100 {
		port, err := freePort()
		if err != nil {
			return cluster.Endpoint{}, fmt.Errorf("local: PS %d address: %w", index, err)
		}
		if !b.portTaken[port] {
			b.portTaken[port] = true
			b.psPorts[index] = port
			return psAddr(port), nil
		}
	}
	return cluster.Endpoint{}, fmt.Errorf("local: PS %d address: no distinct free port found", index)
}

func psAddr(port int) cluster.Endpoint {
	a := fmt.Sprintf("127.0.0.1:%d", port)
	return cluster.Endpoint{Listen: a, Dial: a}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("find free port: %w", err)
	}
	return port, nil
}

// Close stops every instance still running (SIGTERM, then SIGKILL after the
// grace period, or at once when ctx is done), waits until all are reaped,
// and then lets Events close once its backlog has been received. Launch
// fails afterwards. Close is idempotent: a later call waits for the first
// one (or its own ctx) and returns nil.
func (b *Backend) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closing {
		b.mu.Unlock()
		select {
		case <-b.closed:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("local: close: waiting for a concurrent Close: %w", ctx.Err())
		}
	}
	b.closing = true
	for _, inst := range b.instances {
		b.stopLocked(inst)
	}
	b.mu.Unlock()

	reaped := make(chan struct{})
	go func() {
		b.live.Wait()
		close(reaped)
	}()
	select {
	case <-reaped:
	case <-ctx.Done():
		b.mu.Lock()
		b.killing = true
		var left []string
		for _, inst := range b.instances {
			if inst.pid != 0 && !inst.exited {
				left = append(left, inst.spec.Name())
				b.signalLocked(inst, syscall.SIGKILL)
			}
		}
		b.mu.Unlock()
		b.log.Warn("close: context done, killing instances", "instances", left, "err", ctx.Err())
		// SIGKILL cannot be caught or ignored: reaping follows promptly.
		<-reaped
	}
	// No launch can be in flight any more (live is zero and closing is
	// set), so nothing sends on forks, and every child is reaped, so the
	// forker thread may go.
	close(b.forks)
	b.events.Close()
	close(b.closed)
	return nil
}
