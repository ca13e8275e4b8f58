package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/util/workqueue"
)

// Config of a Provider.
type Config struct {
	NodeName       string
	RootDir        string
	Images         imageMap
	PassEnv        []string
	FixedEnv       map[string]string
	FixedEnvOrder  []string
	PodEnv         bool
	SAToken        bool
	APIHost        string
	APIPort        string
	APIServerURL   string
	CAData         []byte
	BackoffInitial time.Duration
	BackoffMax     time.Duration
	// PodCIDR, when set, gives each pod an IP of its own from this range
	// of 127.0.0.0/8 (see podIPs); empty: every pod's IP is 127.0.0.1.
	PodCIDR string
	Logger  *slog.Logger
}

// Provider runs pods as local processes. It implements nodeutil.Provider.
//
// Pod status is written by the provider itself (statusLoop), not through
// virtual-kubelet's NotifyPods path: VK replaces the whole status with the
// provider's copy, which drops conditions other components set (the
// scheduler's DisruptionTarget on preemption). Here every write starts from
// the pod as the API server has it and replaces only the kubelet-owned
// parts; conditions of other types are kept.
type Provider struct {
	cfg        Config
	log        *slog.Logger
	client     kubernetes.Interface
	podLister  corev1listers.PodLister
	configMaps corev1listers.ConfigMapLister
	secrets    corev1listers.SecretLister
	allocCPU   resource.Quantity
	allocMem   resource.Quantity
	ips        *podIPs // nil: pods share 127.0.0.1

	mu    sync.Mutex
	byKey map[string]*podRec    // namespace/name -> current pod
	byUID map[types.UID]*podRec // every pod whose goroutines have not finished, incl. replaced ones

	queue    workqueue.TypedRateLimitingInterface[types.UID]
	ctx      context.Context // cancelled on Shutdown
	cancel   context.CancelFunc
	notifyCb func(*corev1.Pod)
}

var _ nodeutil.Provider = (*Provider)(nil)

// NewProvider makes a provider and starts its status writers.
func NewProvider(cfg Config, client kubernetes.Interface, pc nodeutil.ProviderConfig) (*Provider, error) {
	var ips *podIPs
	if cfg.PodCIDR != "" {
		var err error
		if ips, err = newPodIPs(cfg.PodCIDR); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Provider{
		cfg:        cfg,
		log:        cfg.Logger,
		client:     client,
		podLister:  pc.Pods,
		configMaps: pc.ConfigMaps,
		secrets:    pc.Secrets,
		byKey:      map[string]*podRec{},
		byUID:      map[types.UID]*podRec{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](50*time.Millisecond, 5*time.Second),
			workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "procnode-status"}),
		ctx:    ctx,
		cancel: cancel,
		ips:    ips,
	}
	if pc.Node != nil {
		p.allocCPU = pc.Node.Status.Allocatable[corev1.ResourceCPU]
		p.allocMem = pc.Node.Status.Allocatable[corev1.ResourceMemory]
	}
	for i := 0; i < 4; i++ {
		go p.statusLoop()
	}
	return p, nil
}

func podKey(ns, name string) string { return ns + "/" + name }

func (p *Provider) lookup(ns, name string) *podRec {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byKey[podKey(ns, name)]
}

// ---- nodeutil.Provider / node.PodLifecycleHandler --------------------------------

// CreatePod starts the pod's processes (asynchronously) and returns.
func (p *Provider) CreatePod(_ context.Context, pod *corev1.Pod) error {
	key := podKey(pod.Namespace, pod.Name)
	p.mu.Lock()
	if old := p.byKey[key]; old != nil {
		if old.uid == pod.UID {
			p.mu.Unlock()
			return nil
		}
		// The name was reused by a new pod before the old one was cleaned
		// up: stop the old one (its API object is gone).
		p.log.Info("pod replaced by a new one with the same name; stopping the old processes", "pod", key, "old-uid", old.uid)
		go func() { old.terminate(0); old.startFinalize() }()
	}
	rec := newPodRec(p, pod)
	if p.ips != nil {
		ip, err := p.ips.acquire(rec.uid)
		if err != nil {
			// More pods than addresses (main checks --pods against the
			// CIDR, but pods ending still hold theirs): share the node's.
			p.log.Warn("no pod IP of its own; the pod gets the node's", "pod", key, "err", err)
		}
		rec.ip = ip
	}
	p.byKey[key] = rec
	p.byUID[rec.uid] = rec
	p.mu.Unlock()
	p.log.Info("creating pod", "pod", key, "uid", pod.UID, "ip", rec.podIP(), "dir", rec.dir)
	go rec.run()
	return nil
}

// UpdatePod records changed labels/annotations (the only spec changes of a
// running pod that matter here; env was resolved at start as on a kubelet).
func (p *Provider) UpdatePod(_ context.Context, pod *corev1.Pod) error {
	rec := p.lookup(pod.Namespace, pod.Name)
	if rec == nil || rec.uid != pod.UID {
		return errdefs.NotFoundf("pod %s/%s not found", pod.Namespace, pod.Name)
	}
	rec.mu.Lock()
	rec.pod.Labels = pod.Labels
	rec.pod.Annotations = pod.Annotations
	rec.pod.Spec.ActiveDeadlineSeconds = pod.Spec.ActiveDeadlineSeconds
	rec.pod.Spec.Tolerations = pod.Spec.Tolerations
	for i := range rec.pod.Spec.Containers {
		if i < len(pod.Spec.Containers) {
			rec.pod.Spec.Containers[i].Image = pod.Spec.Containers[i].Image
		}
	}
	rec.mu.Unlock()
	return nil
}

// DeletePod is called when the pod has a deletionTimestamp (possibly several
// times) or is gone from the API server. It sends SIGTERM to every
// container's process group and SIGKILL after the grace period, and returns
// at once; when the processes are gone, the final status is written and the
// pod object is deleted with grace 0 (finalize).
func (p *Provider) DeletePod(_ context.Context, pod *corev1.Pod) error {
	rec := p.lookup(pod.Namespace, pod.Name)
	if rec == nil || (pod.UID != "" && rec.uid != pod.UID) {
		return errdefs.NotFoundf("pod %s/%s not found", pod.Namespace, pod.Name)
	}
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if pod.DeletionGracePeriodSeconds != nil {
		grace = *pod.DeletionGracePeriodSeconds
	} else if pod.Spec.TerminationGracePeriodSeconds != nil {
		grace = *pod.Spec.TerminationGracePeriodSeconds
	}
	// As the kubelet (minimumGracePeriodInSeconds): never less than 2 s.
	if grace < 2 {
		grace = 2
	}
	rec.terminate(time.Duration(grace) * time.Second)
	rec.startFinalize()
	return nil
}

// GetPod returns the provider's copy of the pod, with the status it would write.
func (p *Provider) GetPod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	rec := p.lookup(ns, name)
	if rec == nil {
		return nil, errdefs.NotFoundf("pod %s/%s not found", ns, name)
	}
	// A pod object recreated with the same name is a different pod: report
	// the old one as unknown so VK calls CreatePod for the new one.
	if cur, err := p.podLister.Pods(ns).Get(name); err == nil && cur.UID != rec.uid {
		return nil, errdefs.NotFoundf("pod %s/%s not found", ns, name)
	}
	return rec.snapshot(), nil
}

// GetPodStatus returns the status the provider would write.
func (p *Provider) GetPodStatus(ctx context.Context, ns, name string) (*corev1.PodStatus, error) {
	pod, err := p.GetPod(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods returns every pod the provider knows.
func (p *Provider) GetPods(context.Context) ([]*corev1.Pod, error) {
	p.mu.Lock()
	recs := make([]*podRec, 0, len(p.byKey))
	for _, r := range p.byKey {
		recs = append(recs, r)
	}
	p.mu.Unlock()
	pods := make([]*corev1.Pod, 0, len(recs))
	for _, r := range recs {
		pods = append(pods, r.snapshot())
	}
	return pods, nil
}

// NotifyPods registers VK's status callback. It is never called: the
// provider writes pod status itself (see Provider).
func (p *Provider) NotifyPods(_ context.Context, cb func(*corev1.Pod)) { p.notifyCb = cb }

// ---- status writing -------------------------------------------------------------------

func (p *Provider) enqueue(uid types.UID) { p.queue.Add(uid) }

func (p *Provider) statusLoop() {
	for {
		uid, quit := p.queue.Get()
		if quit {
			return
		}
		err := p.writeStatus(p.ctx, uid)
		if err != nil && p.ctx.Err() == nil {
			p.log.Warn("pod status update failed; retrying", "uid", uid, "err", err)
			p.queue.AddRateLimited(uid)
		} else {
			p.queue.Forget(uid)
		}
		p.queue.Done(uid)
	}
}

// writeStatus merges the provider's view of a pod into the API server's
// status. Conflicts are retried with a fresh GET.
func (p *Provider) writeStatus(ctx context.Context, uid types.UID) error {
	p.mu.Lock()
	rec := p.byUID[uid]
	p.mu.Unlock()
	if rec == nil {
		return nil
	}
	ns, name := rec.pod.Namespace, rec.pod.Name
	base, err := p.podLister.Pods(ns).Get(name)
	if err != nil || base.UID != uid {
		base, err = p.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	for attempt := 0; ; attempt++ {
		if base.UID != uid {
			return nil
		}
		// The API server keeps a terminal phase; nothing the provider says
		// changes it.
		if base.Status.Phase == corev1.PodSucceeded || base.Status.Phase == corev1.PodFailed {
			return nil
		}
		rec.mu.Lock()
		st := rec.mergedStatus(&base.Status)
		rec.mu.Unlock()
		if equality.Semantic.DeepEqual(st, base.Status) {
			return nil
		}
		upd := base.DeepCopy()
		upd.Status = st
		_, err = p.client.CoreV1().Pods(ns).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
		switch {
		case err == nil:
			p.log.Debug("pod status written", "pod", podKey(ns, name), "phase", st.Phase)
			return nil
		case apierrors.IsNotFound(err):
			return nil
		case apierrors.IsConflict(err) && attempt < 10:
			base, err = p.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
		default:
			return err
		}
	}
}

// Shutdown stops every pod's processes (SIGTERM, SIGKILL after grace) and
// waits for them; the API server is not told (the node is going away).
func (p *Provider) Shutdown(grace time.Duration) {
	p.mu.Lock()
	recs := make([]*podRec, 0, len(p.byUID))
	for _, r := range p.byUID {
		recs = append(recs, r)
	}
	p.mu.Unlock()
	for _, r := range recs {
		r.terminate(grace)
	}
	deadline := time.After(grace + 3*time.Second)
	for _, r := range recs {
		select {
		case <-r.done:
		case <-deadline:
			p.log.Warn("pod processes still running at exit", "pod", r.key)
		}
	}
	p.cancel()
	p.queue.ShutDown()
}

// podDir is where a pod's logs, token and working directory live.
func (p *Provider) podDir(pod *corev1.Pod) string {
	return filepath.Join(p.cfg.RootDir, "pods", fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID))
}

func mkdirAll(dir string) error { return os.MkdirAll(dir, 0o755) }
