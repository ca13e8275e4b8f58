package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// container is one container of a pod and its current process.
type container struct {
	spec     corev1.Container
	isInit   bool
	logPath  string
	proc     *os.Process // nil when not running
	state    corev1.ContainerState
	last     corev1.ContainerState
	restarts int32
	id       string // "procnode://<pid>" of the current/last process
	env      []string
	cwd      string
}

// podRec is the provider's record of one pod.
type podRec struct {
	p   *Provider
	uid types.UID
	key string
	dir string
	ip  string // the pod's own IP; "" for the node's (podIP)

	mu          sync.Mutex
	pod         *corev1.Pod // as received (status is not used)
	inits       []*container
	ctrs        []*container
	startTime   *metav1.Time
	sandboxUp   bool // pod dir prepared (PodReadyToStartContainers)
	initsDone   bool
	terminating bool // deletion requested: no (re)starts any more
	killAt      time.Time
	killTimer   *time.Timer
	finalizing  bool

	stopCtx context.Context // cancelled on terminate: ends backoffs and retries
	stop    context.CancelFunc
	done    chan struct{} // closed when no process of the pod runs or will run
}

func newPodRec(p *Provider, pod *corev1.Pod) *podRec {
	pod = pod.DeepCopy()
	r := &podRec{p: p, uid: pod.UID, key: podKey(pod.Namespace, pod.Name), dir: p.podDir(pod), pod: pod, done: make(chan struct{})}
	r.stopCtx, r.stop = context.WithCancel(context.Background())
	waiting := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
	for _, c := range pod.Spec.InitContainers {
		state := waiting
		if len(r.inits) > 0 {
			state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}
		}
		r.inits = append(r.inits, &container{spec: c, isInit: true, state: state, logPath: filepath.Join(r.dir, c.Name+".log")})
	}
	for _, c := range pod.Spec.Containers {
		state := waiting
		if len(pod.Spec.InitContainers) > 0 {
			state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}
		}
		r.ctrs = append(r.ctrs, &container{spec: c, state: state, logPath: filepath.Join(r.dir, c.Name+".log")})
	}
	r.initsDone = len(r.inits) == 0
	return r
}

func (r *podRec) changed() { r.p.enqueue(r.uid) }

// podIP is the pod's IP: its own, or the node's when pods share it.
func (r *podRec) podIP() string {
	if r.ip != "" {
		return r.ip
	}
	return localIP
}

func now() metav1.Time { return metav1.Now().Rfc3339Copy() }

// run is the pod's lifecycle: prepare, init containers in order, then all
// containers in parallel, each restarted per restartPolicy, until all have
// exited for good or the pod is terminated.
func (r *podRec) run() {
	defer r.changed() // runs after close(done): the pod may now be terminal
	defer close(r.done)
	log := r.p.log.With("pod", r.key)

	if err := mkdirAll(r.dir); err != nil {
		log.Error("cannot create pod dir", "err", err)
	}
	saEnv := r.prepareServiceAccount()
	r.mu.Lock()
	t := now()
	r.startTime = &t
	r.sandboxUp = true
	r.mu.Unlock()
	r.changed()

	policy := r.pod.Spec.RestartPolicy
	for _, c := range r.inits {
		for {
			code, ok := r.runOnce(c, saEnv)
			if !ok {
				return
			}
			if code == 0 {
				break
			}
			if policy == corev1.RestartPolicyNever {
				log.Info("init container failed; pod failed", "container", c.spec.Name, "exit-code", code)
				return
			}
			if !r.backoff(c) {
				return
			}
		}
	}
	r.mu.Lock()
	r.initsDone = true
	for _, c := range r.ctrs {
		if c.state.Waiting != nil {
			c.state.Waiting.Reason = "ContainerCreating"
		}
	}
	r.mu.Unlock()
	r.changed()

	var wg sync.WaitGroup
	for _, c := range r.ctrs {
		wg.Add(1)
		go func(c *container) {
			defer wg.Done()
			for {
				code, ok := r.runOnce(c, saEnv)
				if !ok {
					return
				}
				if policy == corev1.RestartPolicyNever || (policy == corev1.RestartPolicyOnFailure && code == 0) {
					return
				}
				if !r.backoff(c) {
					return
				}
			}
		}(c)
	}
	wg.Wait()
	log.Info("all containers exited")
}

// backoff waits before a restart (Waiting/CrashLoopBackOff meanwhile); false
// if the pod is being terminated.
func (r *podRec) backoff(c *container) bool {
	r.mu.Lock()
	d := r.p.cfg.BackoffInitial << min(c.restarts, 20)
	if d > r.p.cfg.BackoffMax || d <= 0 {
		d = r.p.cfg.BackoffMax
	}
	c.last = c.state
	c.restarts++
	c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
		Reason:  "CrashLoopBackOff",
		Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", d, c.spec.Name, r.pod.Name, r.pod.Namespace, r.uid),
	}}
	r.mu.Unlock()
	r.changed()
	select {
	case <-time.After(d):
		return true
	case <-r.stopCtx.Done():
		return false
	}
}

// errStopped says the pod is terminating: the container is not started.
var errStopped = errors.New("pod terminating")

// runOnce starts the container's process and waits for it to exit. ok is
// false if it was not started because the pod is terminating.
func (r *podRec) runOnce(c *container, saEnv map[string]string) (code int, ok bool) {
	log := r.p.log.With("pod", r.key, "container", c.spec.Name)
	argv, err := r.prepareRetrying(c, saEnv)
	if errors.Is(err, errStopped) {
		return 0, false
	}
	if err != nil {
		return r.startFailed(c, "StartError", err), true
	}
	cmd, started, err := r.start(c, argv, log)
	if errors.Is(err, errStopped) {
		return 0, false
	}
	if err != nil {
		return r.startFailed(c, "StartError", err), true
	}
	return r.waitExit(c, cmd, started, log), true
}

// prepareRetrying runs prepareContainer until it succeeds, every second
// while the container's configuration is incomplete (a ConfigMap or Secret
// may still be created), as a kubelet does; errStopped if the pod is
// terminated meanwhile.
func (r *podRec) prepareRetrying(c *container, saEnv map[string]string) ([]string, error) {
	for {
		argv, err := r.prepareContainer(c, saEnv)
		if err == nil {
			return argv, nil
		}
		var ce configError
		if !errors.As(err, &ce) {
			// Not retryable (e.g. unmapped image without command): the
			// container fails to start, as with a broken image.
			return nil, err
		}
		r.mu.Lock()
		c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: err.Error()}}
		r.mu.Unlock()
		r.changed()
		select {
		case <-time.After(time.Second):
		case <-r.stopCtx.Done():
			return nil, errStopped
		}
	}
}

// pgidFile is where the container's process group id is kept while it
// runs, for procnodes.sh --stop: it finds groups left behind by a killed
// procnode.
func pgidFile(c *container) string { return strings.TrimSuffix(c.logPath, ".log") + ".pgid" }

// start starts the container's process for argv, output to its log file,
// and marks the container Running; errStopped if the pod is terminating.
func (r *podRec) start(c *container, argv []string, log *slog.Logger) (*exec.Cmd, metav1.Time, error) {
	r.mu.Lock()
	if r.terminating {
		r.mu.Unlock()
		return nil, metav1.Time{}, errStopped
	}
	// The previous run's output goes to NAME.previous.log (kubectl logs --previous).
	if c.restarts > 0 {
		_ = os.Rename(c.logPath, strings.TrimSuffix(c.logPath, ".log")+".previous.log")
	}
	f, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		r.mu.Unlock()
		return nil, metav1.Time{}, err
	}
	cmd := &exec.Cmd{Path: argv[0], Args: argv, Env: c.env, Dir: c.cwd, Stdout: f, Stderr: f}
	if filepath.Base(argv[0]) == argv[0] {
		if lp, err := exec.LookPath(argv[0]); err == nil {
			cmd.Path = lp
		} else {
			cmd.Err = err
		}
	}
	// Own process group (signals go to the whole group); SIGKILL if
	// procnode dies without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	f.Close()
	if err != nil {
		r.mu.Unlock()
		log.Warn("container failed to start", "argv", argv, "err", err)
		return nil, metav1.Time{}, err
	}
	pid := cmd.Process.Pid
	_ = os.WriteFile(pgidFile(c), []byte(fmt.Sprintf("%d\n", pid)), 0o644)
	c.proc = cmd.Process
	c.id = fmt.Sprintf("procnode://%d", pid)
	c.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now()}}
	started := c.state.Running.StartedAt
	r.mu.Unlock()
	r.changed()
	log.Info("container started", "pid", pid, "argv", argv, "log", c.logPath)
	return cmd, started, nil
}

// waitExit waits for the container's process, started at started, to
// exit, marks the container Terminated and returns its exit code.
func (r *podRec) waitExit(c *container, cmd *exec.Cmd, started metav1.Time, log *slog.Logger) int {
	pid := cmd.Process.Pid
	werr := cmd.Wait()
	code := exitCode(cmd.ProcessState, werr)
	// The container is its main process: what is left of the group goes too.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = os.Remove(pgidFile(c))

	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	r.mu.Lock()
	c.proc = nil
	c.state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: int32(code), Reason: reason, StartedAt: started, FinishedAt: now(), ContainerID: c.id,
		Message: terminationMessage(c.spec.TerminationMessagePolicy, code, c.logPath),
	}}
	if st, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && st.Signaled() {
		c.state.Terminated.Signal = int32(st.Signal())
	}
	r.mu.Unlock()
	r.changed()
	log.Info("container exited", "pid", pid, "exit-code", code)
	return code
}

// exitCode maps a wait status as container runtimes do: the exit status, or
// 128+signal when killed by a signal (137 for SIGKILL, 143 for SIGTERM).
func exitCode(ps *os.ProcessState, err error) int {
	if ps == nil {
		if err != nil {
			return 128
		}
		return 0
	}
	if st, ok := ps.Sys().(syscall.WaitStatus); ok && st.Signaled() {
		return 128 + int(st.Signal())
	}
	return ps.ExitCode()
}

func (r *podRec) startFailed(c *container, reason string, err error) int {
	r.mu.Lock()
	t := now()
	c.state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 128, Reason: reason, Message: err.Error(), StartedAt: t, FinishedAt: t,
	}}
	r.mu.Unlock()
	r.changed()
	return 128
}

// prepareContainer resolves env, argv and working dir.
func (r *podRec) prepareContainer(c *container, saEnv map[string]string) ([]string, error) {
	cfg := &r.p.cfg
	r.mu.Lock()
	pod := r.pod.DeepCopy()
	r.mu.Unlock()
	base, order := r.baseEnv(pod, saEnv)
	res := &envResolver{pod: pod, podIP: r.podIP(), nodeName: cfg.NodeName, allocCPU: r.p.allocCPU, allocMem: r.p.allocMem, configMaps: r.p.configMaps, secrets: r.p.secrets}
	podEnv, vals, err := res.containerEnv(&c.spec, base)
	if err != nil {
		return nil, err
	}
	var env []string
	for _, k := range order {
		if _, own := vals[k]; !own {
			env = append(env, k+"="+base[k])
		}
	}
	env = append(env, podEnv...)

	argv, err := expandArgv(cfg.Images, &c.spec, base, vals)
	if err != nil {
		return nil, err
	}
	mounts, err := secretVolumes(pod, &c.spec, r.dir, r.p.secrets)
	if err != nil {
		return nil, err
	}
	mounts.rewriteAll(argv, env)
	cwd := r.dir
	if wd := c.spec.WorkingDir; wd != "" {
		if st, err := os.Stat(wd); err == nil && st.IsDir() {
			cwd = wd
		}
	}
	r.mu.Lock()
	c.env, c.cwd = env, cwd
	r.mu.Unlock()
	return argv, nil
}

// baseEnv is the environment every container of pod starts from, and its
// keys in order: variables passed through from procnode's environment, the
// kubelet-like and procnode ones, --env. The pod's own override them.
func (r *podRec) baseEnv(pod *corev1.Pod, saEnv map[string]string) (map[string]string, []string) {
	cfg := &r.p.cfg
	base := map[string]string{}
	var order []string
	add := func(k, v string) {
		if _, ok := base[k]; !ok {
			order = append(order, k)
		}
		base[k] = v
	}
	for _, k := range cfg.PassEnv {
		if v, ok := os.LookupEnv(k); ok {
			add(k, v)
		}
	}
	add("HOSTNAME", pod.Name)
	add("KUBERNETES_SERVICE_HOST", cfg.APIHost)
	add("KUBERNETES_SERVICE_PORT", cfg.APIPort)
	add("KUBERNETES_SERVICE_PORT_HTTPS", cfg.APIPort)
	add("PROCNODE_POD_DIR", r.dir)
	add("PROCNODE_NODE_NAME", cfg.NodeName)
	for _, k := range sortedKeys(saEnv) {
		add(k, saEnv[k])
	}
	if cfg.PodEnv {
		add("POD_NAME", pod.Name)
		add("POD_NAMESPACE", pod.Namespace)
		add("POD_UID", string(pod.UID))
		add("POD_IP", r.podIP())
		add("NODE_NAME", cfg.NodeName)
	}
	for _, k := range cfg.FixedEnvOrder {
		add(k, cfg.FixedEnv[k])
	}
	return base, order
}

// expandArgv expands $(VAR) in the container's command and args, the
// pod's own variables (vals) first, then base, and resolves the argv to run.
func expandArgv(images imageMap, spec *corev1.Container, base, vals map[string]string) ([]string, error) {
	mapping := func(k string) (string, bool) {
		if v, ok := vals[k]; ok {
			return v, true
		}
		v, ok := base[k]
		return v, ok
	}
	command := make([]string, len(spec.Command))
	for i, s := range spec.Command {
		command[i] = expand(s, mapping)
	}
	args := make([]string, len(spec.Args))
	for i, s := range spec.Args {
		args[i] = expand(s, mapping)
	}
	return images.resolveArgv(spec, command, args)
}

// prepareServiceAccount writes the pod's ServiceAccount token (bound to the
// pod), the cluster CA and a kubeconfig using them into the pod dir, and
// returns KUBECONFIG (plus PROCNODE_SA_DIR) for the containers. Best effort.
func (r *podRec) prepareServiceAccount() map[string]string {
	cfg := &r.p.cfg
	pod := r.pod
	if !cfg.SAToken || (pod.Spec.AutomountServiceAccountToken != nil && !*pod.Spec.AutomountServiceAccountToken) {
		return nil
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	ctx, cancel := context.WithTimeout(r.stopCtx, 10*time.Second)
	defer cancel()
	token, err := requestToken(ctx, r.p.client, pod, sa)
	if err != nil {
		r.p.log.Warn("no ServiceAccount token for pod", "pod", r.key, "serviceaccount", sa, "err", err)
		return nil
	}
	dir := filepath.Join(r.dir, "serviceaccount")
	kc := filepath.Join(r.dir, "kubeconfig")
	if err := writeSAFiles(dir, kc, cfg.APIServerURL, pod.Namespace, sa, token, cfg.CAData); err != nil {
		r.p.log.Warn("cannot write ServiceAccount files", "pod", r.key, "err", err)
		return nil
	}
	return map[string]string{"KUBECONFIG": kc, "PROCNODE_SA_DIR": dir}
}

// terminate stops the pod: no more (re)starts, SIGTERM to every running
// container's process group, SIGKILL at now+grace (an earlier deadline from a
// later call wins, as on a kubelet).
func (r *podRec) terminate(grace time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := !r.terminating
	r.terminating = true
	r.stop()
	at := time.Now().Add(grace)
	if first || at.Before(r.killAt) {
		r.killAt = at
		if r.killTimer != nil {
			r.killTimer.Stop()
		}
		r.killTimer = time.AfterFunc(grace, func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.signalAll(syscall.SIGKILL)
		})
	}
	if first {
		n := r.signalAll(syscall.SIGTERM)
		r.p.log.Info("terminating pod", "pod", r.key, "grace", grace, "running-containers", n)
	}
}

// signalAll signals every running container's process group; r.mu held.
func (r *podRec) signalAll(sig syscall.Signal) int {
	n := 0
	for _, c := range append(append([]*container{}, r.inits...), r.ctrs...) {
		if c.proc != nil {
			n++
			if err := syscall.Kill(-c.proc.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
				r.p.log.Warn("kill failed", "pod", r.key, "container", c.spec.Name, "signal", sig, "err", err)
			}
		}
	}
	return n
}

// startFinalize (once): when the processes are gone, write the final status
// and delete the pod object with grace 0 (virtual-kubelet would otherwise
// leave it until the full grace period has passed), then forget the pod.
func (r *podRec) startFinalize() {
	r.mu.Lock()
	if r.finalizing {
		r.mu.Unlock()
		return
	}
	r.finalizing = true
	r.mu.Unlock()
	go func() {
		p := r.p
		<-r.done
		r.mu.Lock()
		if r.killTimer != nil {
			r.killTimer.Stop()
		}
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
		defer cancel()
		for i := 0; i < 5; i++ {
			if err := p.writeStatus(ctx, r.uid); err == nil {
				break
			} else if ctx.Err() != nil {
				break
			} else {
				p.log.Warn("final status update failed", "pod", r.key, "err", err)
				time.Sleep(200 * time.Millisecond)
			}
		}
		zero := int64(0)
		uid := r.uid
		err := p.client.CoreV1().Pods(r.pod.Namespace).Delete(ctx, r.pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: &zero,
			Preconditions:      &metav1.Preconditions{UID: &uid},
		})
		switch {
		case err == nil:
			p.log.Info("pod processes gone; pod object deleted", "pod", r.key)
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		default:
			p.log.Warn("deleting pod object failed", "pod", r.key, "err", err)
		}
		p.mu.Lock()
		if p.byKey[r.key] == r {
			delete(p.byKey, r.key)
		}
		delete(p.byUID, r.uid)
		p.mu.Unlock()
		if p.ips != nil && r.ip != "" {
			p.ips.release(r.ip, r.uid)
		}
	}()
}

// snapshot returns the pod as received with the provider's status.
func (r *podRec) snapshot() *corev1.Pod {
	r.mu.Lock()
	defer r.mu.Unlock()
	pod := r.pod.DeepCopy()
	pod.Status = r.mergedStatus(&corev1.PodStatus{})
	return pod
}

// isDone reports whether no process will run any more.
func (r *podRec) isDone() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}
