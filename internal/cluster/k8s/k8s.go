// Package k8s implements cluster.Backend with Kubernetes pods: each worker
// and parameter server of a job is a pod (restartPolicy Never) created by
// the job's master through the API server, watched with a shared informer on
// the job's labels, and owned by the batch/v1 Job that runs the master, so
// that a master pod lost takes nothing with it (the Job starts another,
// which resumes) and deleting the Job garbage-collects the job. Each PS
// shard has a Service, and so has the master, so their addresses survive
// relaunches.
//
// Pods that cannot be scheduled stay Pending: they are the job's elastic
// headroom, and join when Kubernetes finds room. A pod preempted or evicted
// for higher-priority work is reported as cluster.Preempted, and the master
// launches a new (pending) pod in its place.
//
// The package also makes every other call to the API server: Client is
// what the command line does with a cluster (Connect; submit a job after a
// preflight of its namespace, read its status and logs, stop it), and
// MasterPod is the master's own pod, which finds the Job that owns the
// job's objects and carries its Events, and receives its result. The
// command line only parses flags, prints and calls these.
package k8s

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"elasticdl/internal/cluster"
)

// Config configures a Backend.
type Config struct {
	Client    kubernetes.Interface
	Namespace string
	JobName   string
	// Owner owns the job's pods and Services: the master's Job (see
	// JobOwner). Nil when the master runs outside the cluster (then
	// nothing garbage-collects them if the master dies).
	Owner *metav1.OwnerReference
	// Worker and PS are the settings of the job's pods. WorkerPriority[i]
	// overrides Worker.PriorityClass for worker slot i when not empty.
	Worker, PS     PodSettings
	WorkerPriority []string
	// MasterAddr is given to workers as MASTER_ADDR.
	MasterAddr string
	// MetricsPort > 0: PS shard i serves Prometheus metrics on
	// MetricsPort+1+i, announced with prometheus.io/* annotations.
	MetricsPort int
	// PSPort is the port of PS shard 0; shard i serves on PSPort+i (pods
	// of one node may share a network namespace, as on the test rig).
	PSPort int
	// PSHost, when set, is the host workers dial for every PS instead of
	// its Service's DNS name: for clusters without cluster DNS.
	PSHost string
	// GracePeriod between SIGTERM and SIGKILL for pods the master stops;
	// zero keeps Kubernetes' default (30 s).
	GracePeriod time.Duration
	// SyncTimeout bounds the first contact with the API server and the
	// informer's initial list (default 30 s), and how long a create that
	// fails for a transient reason (timeout, 429, 5xx, connection reset) is
	// retried.
	SyncTimeout time.Duration
	// StuckTimeout is how long a pod may wait on an error that capacity
	// will not cure (ErrImagePull, ImagePullBackOff, InvalidImageName,
	// CreateContainerConfigError, ...) before it is deleted and reported
	// failed, so that a bad image fails the job instead of hanging it
	// (default 3 min). Unschedulable pods are never stuck: they are the
	// job's elastic headroom.
	StuckTimeout time.Duration
	// CreateParallelism bounds how many pods LaunchBatch creates at once
	// (default ClientBurst); client-go's rate limiter (the client's QPS
	// and burst) still paces the calls.
	CreateParallelism int
	// Now is the clock (time.Now when nil).
	Now    func() time.Time
	Logger *slog.Logger
}

type instanceKey struct {
	role cluster.Role
	id   int
}

type instance struct {
	index     int
	reported  cluster.Phase // last phase sent on Events; 0: none yet
	requested bool          // Stop or Close asked it to end
	// stuckSince is when the pod was first seen waiting on an error that
	// capacity will not cure; zero when it is not.
	stuckSince time.Time
}

// Backend runs a job's instances as pods. Build it with New; Close it.
type Backend struct {
	cfg    Config
	log    *slog.Logger
	pods   cache.SharedIndexInformer
	stopCh chan struct{}
	events *cluster.EventQueue

	// selector selects the job's worker and PS pods (not its master's).
	selector string

	mu        sync.Mutex
	instances map[instanceKey]*instance
	services  map[int]bool
	closed    bool
}

// New checks that the API server is reachable and that the master may list
// pods in the namespace, starts the informer and waits for its first list.
func New(ctx context.Context, cfg Config) (*Backend, error) {
	if cfg.Client == nil {
		return nil, errors.New("k8s: no client")
	}
	if err := CheckJobName(cfg.JobName); err != nil {
		return nil, fmt.Errorf("k8s: %w", err)
	}
	if cfg.Namespace == "" {
		return nil, errors.New("k8s: no namespace")
	}
	if cfg.PSPort <= 0 || cfg.PSPort > 65535 {
		return nil, fmt.Errorf("k8s: PS port %d out of range", cfg.PSPort)
	}
	if cfg.SyncTimeout <= 0 {
		cfg.SyncTimeout = 30 * time.Second
	}
	if cfg.StuckTimeout <= 0 {
		cfg.StuckTimeout = 3 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.CreateParallelism <= 0 {
		cfg.CreateParallelism = ClientBurst
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	b := &Backend{
		cfg:       cfg,
		log:       cfg.Logger.With("backend", "k8s", "namespace", cfg.Namespace),
		stopCh:    make(chan struct{}),
		events:    cluster.NewEventQueue(),
		instances: map[instanceKey]*instance{},
		services:  map[int]bool{},
	}
	selector := JobSelector(cfg.JobName) + "," + LabelReplicaType + " in (" + string(cluster.Worker) + "," + string(cluster.PS) + ")"
	b.selector = selector
	pctx, cancel := context.WithTimeout(ctx, cfg.SyncTimeout)
	defer cancel()
	if _, err := cfg.Client.CoreV1().Pods(cfg.Namespace).List(pctx, metav1.ListOptions{LabelSelector: selector, Limit: 1}); err != nil {
		b.events.Close()
		return nil, fmt.Errorf("k8s: list pods in namespace %s: %w", cfg.Namespace, err)
	}
	// The resync re-examines pods that wait on an error even when the
	// kubelet writes nothing new.
	resync := min(cfg.StuckTimeout/4, 30*time.Second)
	factory := informers.NewSharedInformerFactoryWithOptions(cfg.Client, resync,
		informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	b.pods = factory.Core().V1().Pods().Informer()
	_, err := b.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { b.onPod(obj, false) },
		UpdateFunc: func(_, obj any) { b.onPod(obj, false) },
		DeleteFunc: func(obj any) { b.onPod(obj, true) },
	})
	if err != nil {
		b.events.Close()
		return nil, fmt.Errorf("k8s: pod informer: %w", err)
	}
	factory.Start(b.stopCh)
	if !cache.WaitForCacheSync(pctx.Done(), b.pods.HasSynced) {
		close(b.stopCh)
		b.events.Close()
		return nil, fmt.Errorf("k8s: pod informer of namespace %s did not sync within %s", cfg.Namespace, cfg.SyncTimeout)
	}
	return b, nil
}

// Events delivers Pending, Running and Exited events of the job's pods.
func (b *Backend) Events() <-chan cluster.Event { return b.events.Out() }

// Existing implements cluster.Backend: the job's worker and PS pods that a
// master before this one created, found by label and adopted (their later
// changes arrive on Events), each as its state now.
func (b *Backend) Existing(context.Context) ([]cluster.Event, error) {
	var out []cluster.Event
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, obj := range b.pods.GetStore().List() {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			continue
		}
		role := cluster.Role(pod.Labels[LabelReplicaType])
		id, err := strconv.Atoi(pod.Labels[LabelInstanceID])
		index, ierr := strconv.Atoi(pod.Labels[LabelReplicaIndex])
		if err != nil || ierr != nil || (role != cluster.Worker && role != cluster.PS) {
			continue
		}
		key := instanceKey{role, id}
		if _, known := b.instances[key]; known {
			continue
		}
		st := observe(pod, false)
		b.instances[key] = &instance{index: index, reported: st.Phase}
		out = append(out, cluster.Event{Role: role, ID: id, Index: index, Phase: st.Phase,
			ExitCode: st.ExitCode, Reason: st.Reason, Message: st.Message, Node: pod.Spec.NodeName})
	}
	return out, nil
}

// PSAddress: PS shard index listens on all interfaces at PSPort+index and
// is dialled through its Service (or PSHost).
func (b *Backend) PSAddress(index int) (cluster.Endpoint, error) {
	if index < 0 {
		return cluster.Endpoint{}, fmt.Errorf("k8s: PS address: negative shard index %d", index)
	}
	port := b.cfg.PSPort + index
	if port > 65535 {
		return cluster.Endpoint{}, fmt.Errorf("k8s: PS %d: port %d out of range", index, port)
	}
	host := b.cfg.PSHost
	if host == "" {
		host = PSServiceName(b.cfg.JobName, index) + "." + b.cfg.Namespace + ".svc"
	}
	return cluster.Endpoint{
		Listen: ":" + strconv.Itoa(port),
		Dial:   host + ":" + strconv.Itoa(port),
	}, nil
}

// Launch creates the instance's pod (and, for a PS, its Service if it does
// not exist yet). An API error — no such PriorityClass, forbidden, quota —
// is returned as is, wrapped with the pod's name.
func (b *Backend) Launch(ctx context.Context, spec cluster.InstanceSpec) error {
	key := instanceKey{spec.Role, spec.ID}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return errors.New("k8s: backend closed")
	}
	if _, dup := b.instances[key]; dup {
		b.mu.Unlock()
		return fmt.Errorf("k8s: %s launched twice", spec.Name())
	}
	b.instances[key] = &instance{index: spec.Index}
	needService := spec.Role == cluster.PS && !b.services[spec.Index]
	b.mu.Unlock()

	forget := func() {
		b.mu.Lock()
		delete(b.instances, key)
		b.mu.Unlock()
	}
	if needService {
		if err := b.ensureService(ctx, spec.Index); err != nil {
			forget()
			return err
		}
	}
	pod := b.podFor(spec)
	created, err := b.createPod(ctx, pod)
	if err != nil {
		forget()
		return fmt.Errorf("k8s: create pod %s: %w", pod.Name, err)
	}
	if spec.TLS != nil {
		if err := b.createBundleSecret(ctx, created, spec.TLS); err != nil {
			// The pod would wait for its Secret forever.
			derr := b.deletePod(context.WithoutCancel(ctx), pod.Name)
			forget()
			return errors.Join(fmt.Errorf("k8s: create Secret %s: %w", InstanceTLSSecretName(pod.Name), err), derr)
		}
	}
	b.log.Debug("pod created", "pod", pod.Name, "priority_class", pod.Spec.PriorityClassName)
	return nil
}

// LaunchBatch launches specs as Launch does, up to CreateParallelism at
// once (a job's initial workers: one create after another took 2–13 s for
// 200 pods on the test rig), and returns each one's error, in order.
func (b *Backend) LaunchBatch(ctx context.Context, specs []cluster.InstanceSpec) []error {
	return LaunchEach(ctx, specs, b.cfg.CreateParallelism, b.Launch)
}

// LaunchEach calls launch for every spec, up to parallelism at once, and
// returns each one's error, in order.
func LaunchEach(ctx context.Context, specs []cluster.InstanceSpec, parallelism int, launch func(context.Context, cluster.InstanceSpec) error) []error {
	errs := make([]error, len(specs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(len(specs), max(parallelism, 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				errs[i] = launch(ctx, specs[i])
			}
		}()
	}
	for i := range specs {
		next <- i
	}
	close(next)
	wg.Wait()
	return errs
}

// createPod creates pod and returns it as created (with its UID).
func (b *Backend) createPod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	pods := b.cfg.Client.CoreV1().Pods(b.cfg.Namespace)
	var created *corev1.Pod
	err := b.retry(ctx, func(ctx context.Context) error {
		got, err := pods.Create(ctx, pod, metav1.CreateOptions{})
		if err == nil {
			created = got
			return nil
		}
		if apierrors.IsAlreadyExists(err) {
			// A retried create whose first attempt got through.
			if got, gerr := pods.Get(ctx, pod.Name, metav1.GetOptions{}); gerr == nil && got.Labels[LabelInstanceID] == pod.Labels[LabelInstanceID] &&
				got.Labels[LabelJob] == b.cfg.JobName {
				created = got
				return nil
			}
		}
		return err
	})
	return created, err
}

func (b *Backend) ensureService(ctx context.Context, index int) error {
	port := b.cfg.PSPort + index
	svc := newPSService(b.cfg.JobName, b.cfg.Namespace, index, port, b.cfg.Owner)
	err := b.retry(ctx, func(ctx context.Context) error {
		_, err := b.cfg.Client.CoreV1().Services(b.cfg.Namespace).Create(ctx, svc, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("k8s: create service %s: %w", svc.Name, err)
	}
	b.mu.Lock()
	b.services[index] = true
	b.mu.Unlock()
	return nil
}

func (b *Backend) podFor(spec cluster.InstanceSpec) *corev1.Pod {
	settings := b.cfg.PS
	if spec.Role == cluster.Worker {
		settings = b.cfg.Worker
		if spec.Index < len(b.cfg.WorkerPriority) && b.cfg.WorkerPriority[spec.Index] != "" {
			settings.PriorityClass = b.cfg.WorkerPriority[spec.Index]
		}
	}
	labels := JobLabels(b.cfg.JobName, string(spec.Role))
	labels[LabelReplicaIndex] = strconv.Itoa(spec.Index)
	labels[LabelInstanceID] = strconv.Itoa(spec.ID)
	var env []corev1.EnvVar
	if b.cfg.MasterAddr != "" {
		env = append(env, corev1.EnvVar{Name: "MASTER_ADDR", Value: b.cfg.MasterAddr})
	}
	if spec.Role == cluster.Worker {
		env = append(env, corev1.EnvVar{Name: "WORKER_ID", Value: strconv.Itoa(spec.ID)})
	}
	for _, kv := range spec.Env {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	settings.Env = append(env, settings.Env...)
	if b.cfg.GracePeriod > 0 {
		settings.TerminationGracePeriod = b.graceSeconds()
	}
	if spec.Role == cluster.PS && b.cfg.MetricsPort > 0 {
		settings.Annotations = ScrapeAnnotations(b.cfg.MetricsPort + 1 + spec.Index)
	}
	args := append([]string{string(spec.Role)}, spec.Args...)
	pod := NewPod(InstancePodName(b.cfg.JobName, spec.Role, spec.ID), b.cfg.Namespace, labels, settings, args, b.cfg.Owner)
	if spec.TLS != nil {
		mountBundle(pod)
	}
	AvoidNodes(pod, spec.AvoidNodes)
	if len(spec.Command) > 0 {
		// A user's worker program (--worker_command), in the job's --image.
		pod.Spec.Containers[0].Command, pod.Spec.Containers[0].Args = spec.Command, nil
	}
	return pod
}

// retry calls f until it succeeds, fails for a reason a retry will not
// cure, or SyncTimeout has passed.
func (b *Backend) retry(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.SyncTimeout)
	defer cancel()
	delay := 100 * time.Millisecond
	for {
		err := f(ctx)
		if err == nil || !transient(err) {
			return err
		}
		b.log.Debug("API call failed, retrying", "err", err, "in", delay)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// transient reports whether an API error may go away by itself.
func transient(err error) bool {
	switch {
	case apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsTooManyRequests(err),
		apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), apierrors.IsUnexpectedServerError(err):
		return true
	case utilnet.IsConnectionReset(err), utilnet.IsConnectionRefused(err), utilnet.IsProbableEOF(err):
		return true
	}
	return false
}

// Stop deletes the instance's pod: Kubernetes sends SIGTERM, then SIGKILL
// after the grace period. Its Exited event carries Requested=true.
func (b *Backend) Stop(ctx context.Context, role cluster.Role, id int) error {
	key := instanceKey{role, id}
	b.mu.Lock()
	in, ok := b.instances[key]
	if !ok {
		b.mu.Unlock()
		return fmt.Errorf("k8s: stop %s: unknown instance", cluster.InstanceName(role, id))
	}
	in.requested = true
	b.mu.Unlock()
	return b.deletePod(ctx, InstancePodName(b.cfg.JobName, role, id))
}

// graceSeconds is GracePeriod rounded up to whole seconds, as the API takes it.
func (b *Backend) graceSeconds() int64 {
	return int64((b.cfg.GracePeriod + time.Second - 1) / time.Second)
}

// deleteOptions are a pod delete's options: GracePeriod, where set.
func (b *Backend) deleteOptions() metav1.DeleteOptions {
	opts := metav1.DeleteOptions{}
	if b.cfg.GracePeriod > 0 {
		g := b.graceSeconds()
		opts.GracePeriodSeconds = &g
	}
	return opts
}

func (b *Backend) deletePod(ctx context.Context, name string) error {
	opts := b.deleteOptions()
	err := b.cfg.Client.CoreV1().Pods(b.cfg.Namespace).Delete(ctx, name, opts)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("k8s: delete pod %s: %w", name, err)
	}
	return nil
}

// onPod turns an informer notification into at most one event per phase
// change of a known instance.
func (b *Backend) onPod(obj any, gone bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	role := cluster.Role(pod.Labels[LabelReplicaType])
	id, err := strconv.Atoi(pod.Labels[LabelInstanceID])
	if err != nil || (role != cluster.Worker && role != cluster.PS) {
		return
	}
	st := observe(pod, gone)
	b.mu.Lock()
	in, known := b.instances[instanceKey{role, id}]
	if !known {
		b.mu.Unlock()
		// A pod of an earlier master of the same job, or created by hand.
		b.log.Debug("ignoring pod of an unknown instance", "pod", pod.Name)
		return
	}
	if st.Phase == cluster.Pending && in.reported != cluster.Exited && !in.requested {
		var failed *podState
		in.stuckSince, failed = stuckVerdict(pod, in.stuckSince, b.cfg.Now(), b.cfg.StuckTimeout)
		if failed != nil {
			// Report it failed now and delete it; its deletion events
			// come after Exited and are ignored.
			st = *failed
			go func(name string) {
				ctx, cancel := context.WithTimeout(context.Background(), b.cfg.SyncTimeout)
				defer cancel()
				if err := b.deletePod(ctx, name); err != nil {
					b.log.Warn("delete stuck pod", "pod", name, "err", err)
				}
			}(pod.Name)
		}
	}
	if in.reported == cluster.Exited || st.Phase <= in.reported {
		b.mu.Unlock()
		return
	}
	in.reported = st.Phase
	ev := cluster.Event{
		Role: role, ID: id, Index: in.index, Phase: st.Phase,
		ExitCode: st.ExitCode, Reason: st.Reason, Message: st.Message,
		Requested: in.requested, Node: pod.Spec.NodeName,
	}
	b.mu.Unlock()
	if st.Phase == cluster.Pending && st.Message != "" {
		b.log.Debug("pod pending", "pod", pod.Name, "why", st.Message)
	}
	b.events.Push(ev)
}

// Close deletes the job's worker and PS pods and Services, waits (bounded
// by ctx) until the pods are gone, reports every instance not yet reported
// as exited, and closes Events.
func (b *Backend) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	// Every pod launched, whether or not the informer has seen it yet.
	names := map[string]bool{}
	for key, in := range b.instances {
		in.requested = true
		if in.reported != cluster.Exited {
			names[InstancePodName(b.cfg.JobName, key.role, key.id)] = true
		}
	}
	b.mu.Unlock()
	for _, obj := range b.pods.GetStore().List() {
		if p, ok := obj.(*corev1.Pod); ok && p.DeletionTimestamp == nil {
			names[p.Name] = true
		}
	}

	var errs []error
	if err := b.deletePods(ctx, names); err != nil {
		errs = append(errs, err)
	}
	svcs, err := b.cfg.Client.CoreV1().Services(b.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: JobSelector(b.cfg.JobName)})
	if err != nil {
		errs = append(errs, fmt.Errorf("k8s: list services: %w", err))
	} else {
		for _, s := range svcs.Items {
			err := b.cfg.Client.CoreV1().Services(b.cfg.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("k8s: delete service %s: %w", s.Name, err))
			}
		}
	}
	// Wait for the pods to go, so that their exits are in the events and
	// nothing of the job outlives the master's Run.
	if err := b.waitPodsGone(ctx); err != nil {
		errs = append(errs, err)
	}
	close(b.stopCh)
	b.mu.Lock()
	for key, in := range b.instances {
		if in.reported != cluster.Exited {
			in.reported = cluster.Exited
			b.events.Push(cluster.Event{Role: key.role, ID: key.id, Index: in.index, Phase: cluster.Exited,
				ExitCode: -1, Reason: cluster.Deleted, Message: "stopped with the job", Requested: true})
		}
	}
	b.mu.Unlock()
	b.events.Close()
	return errors.Join(errs...)
}

// deletePods deletes the job's worker and PS pods with one call (a
// collection delete by the job's labels); where that is refused (a Role
// without deletecollection on pods) or fails, it deletes names, the pods it
// knows of, one call each.
func (b *Backend) deletePods(ctx context.Context, names map[string]bool) error {
	opts := b.deleteOptions()
	err := b.cfg.Client.CoreV1().Pods(b.cfg.Namespace).DeleteCollection(ctx, opts, metav1.ListOptions{LabelSelector: b.selector})
	if err == nil {
		return nil
	}
	b.log.Info("could not delete the job's pods with one call: deleting them one by one", "pods", len(names), "err", err)
	var errs []error
	for name := range names {
		if err := b.deletePod(ctx, name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// strayPodWait is how long Close lets the informer see a pod's deletion
// before it deletes the pod on its own.
const strayPodWait = 2 * time.Second

// waitPodsGone waits until the informer has seen every pod of the job go.
// A pod that is not being deleted (its create was under way during the
// collection delete) is deleted on its own.
func (b *Backend) waitPodsGone(ctx context.Context) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	// When each pod was first seen here not being deleted: the informer
	// may not have seen the collection delete yet.
	undeleted := map[string]time.Time{}
	for {
		pods := b.pods.GetStore().List()
		n := len(pods)
		if n == 0 {
			return nil
		}
		now := time.Now()
		for _, obj := range pods {
			p, ok := obj.(*corev1.Pod)
			if !ok || p.DeletionTimestamp != nil {
				continue
			}
			since, seen := undeleted[p.Name]
			switch {
			case !seen:
				undeleted[p.Name] = now
			case !since.IsZero() && now.Sub(since) > strayPodWait:
				undeleted[p.Name] = time.Time{} // deleted once
				b.log.Info("deleting a pod the collection delete left", "pod", p.Name)
				if err := b.deletePod(ctx, p.Name); err != nil {
					b.log.Warn("delete pod", "pod", p.Name, "err", err)
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("k8s: %d pods still terminating: %w", n, ctx.Err())
		case <-tick.C:
		}
	}
}
