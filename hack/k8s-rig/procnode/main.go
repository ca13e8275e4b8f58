// Command procnode is a virtual-kubelet (v1.13.0) node whose pods run as local
// processes: it registers a Node, and every pod the scheduler binds to it has
// its containers started as child processes (command + args of the container,
// environment resolved as a kubelet would, one process group each, output to a
// per-container log file). See README.md next to this file.
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
	vkslog "github.com/virtual-kubelet/virtual-kubelet/log/slog"
	"github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// LabelProcessNode is set to "true" on every process node; e2e tests target
// these nodes with `nodeSelector: {elasticdl.io/process-node: "true"}`.
const LabelProcessNode = "elasticdl.io/process-node"

// multiFlag collects a repeatable flag; each value may also be a comma-separated list.
type multiFlag []string

func (m *multiFlag) String() string { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*m = append(*m, s)
		}
	}
	return nil
}

// rawMultiFlag is repeatable, values are taken verbatim (for --env K=V where V may contain commas).
type rawMultiFlag []string

func (m *rawMultiFlag) String() string     { return strings.Join(*m, " ") }
func (m *rawMultiFlag) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "procnode: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	o, err := parseFlags()
	if err != nil {
		return err
	}
	logger, err := newLogger(o.logLevel, o.name)
	if err != nil {
		return err
	}
	images, err := parseImageMap(o.imageMap)
	if err != nil {
		return err
	}
	fixedEnv, fixedOrder, err := parseFixedEnv(o.extraEnv)
	if err != nil {
		return err
	}
	capacity, err := o.capacity()
	if err != nil {
		return err
	}
	nodeTaints, err := parseTaints(o.taints)
	if err != nil {
		return err
	}
	absRoot, err := filepath.Abs(o.rootDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(absRoot, "pods"), 0o755); err != nil {
		return err
	}
	restCfg, client, err := newClient(o.kubeconfig, o.name)
	if err != nil {
		return err
	}
	apiHost, apiPort, caPEM, err := apiserverEndpoint(restCfg)
	if err != nil {
		return err
	}

	// The kubelet API: our own listener so the port is known (and free) before
	// the Node is registered with it as its kubelet endpoint.
	tlsCfg, err := servingTLS(o.name, o.clientCA)
	if err != nil {
		return err
	}
	ln, err := tls.Listen("tcp", o.listen, tlsCfg)
	if err != nil {
		return fmt.Errorf("listen %s: %w", o.listen, err)
	}
	port := ln.Addr().(*net.TCPAddr).Port

	cfg := Config{
		NodeName:       o.name,
		RootDir:        absRoot,
		Images:         images,
		PassEnv:        o.passEnv,
		FixedEnv:       fixedEnv,
		FixedEnvOrder:  fixedOrder,
		PodEnv:         o.podEnv,
		SAToken:        o.saToken,
		APIHost:        apiHost,
		APIPort:        apiPort,
		APIServerURL:   restCfg.Host,
		CAData:         caPEM,
		BackoffInitial: o.restartInit,
		BackoffMax:     o.restartMax,
		PodCIDR:        o.podCIDR,
		Logger:         logger,
	}
	nodeSpec := nodeObject(o, capacity, nodeTaints, port)
	vkNode, prov, err := newNode(cfg, client, nodeSpec, o.workers)
	if err != nil {
		return err
	}
	srv := serveKubeletAPI(ln, prov)
	logger.Info("starting", "kubelet-port", port, "root-dir", absRoot, "capacity", fmt.Sprintf("cpu=%s memory=%s pods=%s", o.cpu, o.mem, o.maxPods), "images", images.String())
	return runUntilStopped(logger, vkNode, prov, srv, o.shutdown)
}

// defaultPassEnv is --pass-env's default.
const defaultPassEnv = "PATH,HOME,USER,LANG,LC_ALL,TZ,TMPDIR,GOCOVERDIR,GOTRACEBACK,GODEBUG,GORACE"

// options are procnode's flags.
type options struct {
	kubeconfig, name, cpu, mem, maxPods, rootDir, listen, clientCA string
	restartInit, restartMax, shutdown                              time.Duration
	podEnv, saToken                                                bool
	workers                                                        int
	logLevel, kubeletVer, podCIDR                                  string
	podLabels, taints, imageMap, passEnv                           multiFlag
	extraEnv                                                       rawMultiFlag
}

// parseFlags parses the command line and checks that the required flags
// are there.
func parseFlags() (*options, error) {
	o := &options{}
	flag.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of an identity that may manage nodes, leases and pods (the rig's admin.kubeconfig)")
	flag.StringVar(&o.name, "name", "", "node name (required)")
	flag.StringVar(&o.cpu, "cpu", "4", "node capacity/allocatable cpu")
	flag.StringVar(&o.mem, "memory", "8Gi", "node capacity/allocatable memory")
	flag.StringVar(&o.maxPods, "pods", "110", "node capacity/allocatable pods")
	flag.StringVar(&o.rootDir, "root-dir", "", "directory for per-pod dirs and logs (required)")
	flag.StringVar(&o.listen, "listen", "127.0.0.1:0", "address of the kubelet API (logs, exec, port-forward); port 0 picks a free one, published as the node's kubelet endpoint")
	flag.StringVar(&o.clientCA, "client-ca", "", "if set, the kubelet API requires client certificates signed by this CA (the apiserver's kubelet client cert)")
	flag.DurationVar(&o.restartInit, "restart-backoff", time.Second, "first delay before restarting a container (restartPolicy Always/OnFailure); doubles per restart")
	flag.DurationVar(&o.restartMax, "restart-backoff-max", 30*time.Second, "maximum restart delay")
	flag.DurationVar(&o.shutdown, "shutdown-grace", 3*time.Second, "on SIGTERM/SIGINT of procnode: time between SIGTERM and SIGKILL to every pod process group")
	flag.BoolVar(&o.podEnv, "pod-env", false, "also set POD_NAME, POD_NAMESPACE, POD_UID, POD_IP, NODE_NAME in every container unless the pod defines them (a real kubelet does not)")
	flag.BoolVar(&o.saToken, "sa-token", true, "write each pod's ServiceAccount token (TokenRequest bound to the pod), ca.crt and a kubeconfig into its pod dir and set KUBECONFIG unless the container sets it")
	flag.IntVar(&o.workers, "workers", 4, "pod sync workers")
	flag.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn, error")
	flag.StringVar(&o.kubeletVer, "kubelet-version", "v1.35.4", "reported in node.status.nodeInfo.kubeletVersion")
	flag.StringVar(&o.podCIDR, "pod-cidr", "", "give each pod an IP of its own from this range of 127.0.0.0/8 (e.g. 127.64.0.0/24; Linux routes all of 127/8 to lo, nothing to set up); empty: every pod's IP is 127.0.0.1")
	flag.Var(&o.podLabels, "labels", "extra node labels k=v (repeatable, comma-separated)")
	flag.Var(&o.taints, "taints", "node taints key[=value]:Effect (repeatable, comma-separated)")
	flag.Var(&o.imageMap, "image-map", "IMAGE=PATH: containers of IMAGE run the local binary PATH (repeatable, comma-separated); see README for the matching rule")
	flag.Var(&o.passEnv, "pass-env", "variables copied from procnode's own environment into every container (default "+defaultPassEnv+")")
	flag.Var(&o.extraEnv, "env", "K=V set in every container unless the pod sets K (repeatable)")
	flag.Parse()
	if len(o.passEnv) == 0 {
		_ = o.passEnv.Set(defaultPassEnv)
	}
	if o.name == "" || o.rootDir == "" {
		flag.Usage()
		return nil, errors.New("--name and --root-dir are required")
	}
	if flag.NArg() != 0 {
		return nil, fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	return o, nil
}

// newLogger makes the node's logger at level and makes virtual-kubelet and
// client-go log through it.
func newLogger(level, name string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})).With("node", name)
	vklog.L = vkslog.FromSlog(logger)
	klog.SetSlogLogger(logger)
	return logger, nil
}

// parseFixedEnv parses the --env K=V values into a map and the order in
// which each K first came (a later K=V overrides an earlier one).
func parseFixedEnv(extraEnv []string) (map[string]string, []string, error) {
	fixedEnv := map[string]string{}
	var fixedOrder []string
	for _, kv := range extraEnv {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, nil, fmt.Errorf("--env %q: want K=V", kv)
		}
		if _, dup := fixedEnv[k]; !dup {
			fixedOrder = append(fixedOrder, k)
		}
		fixedEnv[k] = v
	}
	return fixedEnv, fixedOrder, nil
}

// capacity parses the node's cpu, memory and pods, and checks that
// --pod-cidr has an address for each pod.
func (o *options) capacity() (corev1.ResourceList, error) {
	capacity := corev1.ResourceList{}
	for res, v := range map[corev1.ResourceName]string{corev1.ResourceCPU: o.cpu, corev1.ResourceMemory: o.mem, corev1.ResourcePods: o.maxPods} {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("%s quantity %q: %w", res, v, err)
		}
		capacity[res] = q
	}
	if o.podCIDR != "" {
		ips, err := newPodIPs(o.podCIDR)
		if err != nil {
			return nil, fmt.Errorf("--pod-cidr: %w", err)
		}
		pods := capacity[corev1.ResourcePods]
		if free := int64(ips.size) - int64(len(ips.used)); pods.Value() > free {
			return nil, fmt.Errorf("--pod-cidr %s has %d addresses for pods, fewer than --pods %s", o.podCIDR, free, o.maxPods)
		}
	}
	return capacity, nil
}

// parseTaints parses --taints values, key[=value]:Effect.
func parseTaints(taints []string) ([]corev1.Taint, error) {
	var nodeTaints []corev1.Taint
	for _, t := range taints {
		kv, eff, ok := strings.Cut(t, ":")
		if !ok {
			return nil, fmt.Errorf("--taints %q: want key[=value]:Effect", t)
		}
		k, v, _ := strings.Cut(kv, "=")
		nodeTaints = append(nodeTaints, corev1.Taint{Key: k, Value: v, Effect: corev1.TaintEffect(eff)})
	}
	return nodeTaints, nil
}

// newClient makes the API client from the kubeconfig, with limits high
// enough for a node syncing many pods.
func newClient(kubeconfig, name string) (*rest.Config, *kubernetes.Clientset, error) {
	restCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeconfig: %w", err)
	}
	restCfg.QPS, restCfg.Burst = 100, 200
	restCfg.UserAgent = "procnode/" + name
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, nil, err
	}
	return restCfg, client, nil
}

// nodeObject is the Node procnode registers, its kubelet endpoint on port.
func nodeObject(o *options, capacity corev1.ResourceList, taints []corev1.Taint, port int) corev1.Node {
	nodeLabels := map[string]string{
		LabelProcessNode:         "true",
		"type":                   "procnode",
		"kubernetes.io/hostname": o.name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     runtime.GOARCH,
	}
	for _, kv := range o.podLabels {
		k, v, _ := strings.Cut(kv, "=")
		nodeLabels[k] = v
	}
	now := metav1.Now()
	return corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        o.name,
			Labels:      nodeLabels,
			Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0"},
		},
		Spec: corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{
			Phase:       corev1.NodeRunning,
			Capacity:    capacity,
			Allocatable: capacity.DeepCopy(),
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: "127.0.0.1"},
				{Type: corev1.NodeHostName, Address: o.name},
			},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(port)}},
			NodeInfo: corev1.NodeSystemInfo{
				OperatingSystem:         "linux",
				Architecture:            runtime.GOARCH,
				KubeletVersion:          o.kubeletVer,
				ContainerRuntimeVersion: "procnode://v1",
				OSImage:                 "local processes",
			},
			Conditions: []corev1.NodeCondition{
				// Ready from the start (so the node lifecycle controller never
				// taints it not-ready); nodeutil re-asserts it once running.
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "procnode is ready", LastHeartbeatTime: now, LastTransitionTime: now},
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", LastHeartbeatTime: now, LastTransitionTime: now},
				{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", LastHeartbeatTime: now, LastTransitionTime: now},
				{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", LastHeartbeatTime: now, LastTransitionTime: now},
				{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse, Reason: "RouteCreated", LastHeartbeatTime: now, LastTransitionTime: now},
			},
		},
	}
}

// newNode makes the virtual-kubelet node for nodeSpec with the process
// Provider from cfg.
func newNode(cfg Config, client kubernetes.Interface, nodeSpec corev1.Node, workers int) (*nodeutil.Node, *Provider, error) {
	var prov *Provider
	newProvider := func(pc nodeutil.ProviderConfig) (nodeutil.Provider, node.NodeProvider, error) {
		var err error
		prov, err = NewProvider(cfg, client, pc)
		if err != nil {
			return nil, nil, err
		}
		return prov, nil, nil
	}
	vkNode, err := nodeutil.NewNode(cfg.NodeName, newProvider,
		nodeutil.WithClient(client),
		func(c *nodeutil.NodeConfig) error {
			c.NodeSpec = nodeSpec
			c.NumWorkers = workers
			// We resolve env ourselves: VK's resolver gives status.podIP = ""
			// (the pod has no IP yet when it is created).
			c.SkipDownwardAPIResolution = true
			return nil
		},
	)
	if err != nil {
		return nil, nil, err
	}
	return vkNode, prov, nil
}

// serveKubeletAPI serves the kubelet API (logs, exec, attach,
// port-forward) of prov's pods on ln.
func serveKubeletAPI(ln net.Listener, prov *Provider) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("/", api.PodHandler(api.PodHandlerConfig{
		RunInContainer:    prov.RunInContainer,
		AttachToContainer: prov.AttachToContainer,
		GetContainerLogs:  prov.GetContainerLogs,
		GetPods:           prov.GetPods,
		GetPodsFromKubernetes: func(context.Context) ([]*corev1.Pod, error) {
			return prov.podLister.List(labels.Everything())
		},
		PortForward:           prov.PortForward,
		StreamIdleTimeout:     30 * time.Minute,
		StreamCreationTimeout: 30 * time.Second,
	}, true))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv
}

// runUntilStopped runs the node until SIGTERM/SIGINT or the node fails,
// then closes the kubelet API and stops every pod within shutdown.
func runUntilStopped(logger *slog.Logger, vkNode *nodeutil.Node, prov *Provider, srv *http.Server, shutdown time.Duration) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		s := <-sigs
		logger.Info("signal received; stopping pods and exiting", "signal", s.String())
		cancel()
	}()

	errc := make(chan error, 1)
	go func() { errc <- vkNode.Run(ctx) }()
	go func() {
		if err := vkNode.WaitReady(ctx, 0); err == nil {
			logger.Info("node ready")
		}
	}()
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
		cancel()
	}
	srv.Close()
	prov.Shutdown(shutdown)
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return runErr
	}
	return nil
}

// apiserverEndpoint returns host and port of the apiserver (for
// KUBERNETES_SERVICE_HOST/PORT in containers) and its CA in PEM.
func apiserverEndpoint(c *rest.Config) (string, string, []byte, error) {
	u, err := url.Parse(c.Host)
	if err != nil || u.Host == "" {
		return "", "", nil, fmt.Errorf("apiserver URL %q: %v", c.Host, err)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "443"
		if u.Scheme == "http" {
			port = "80"
		}
	}
	ca := c.CAData
	if len(ca) == 0 && c.CAFile != "" {
		if ca, err = os.ReadFile(c.CAFile); err != nil {
			return "", "", nil, err
		}
	}
	if _, err := strconv.Atoi(port); err != nil {
		return "", "", nil, fmt.Errorf("apiserver port %q", port)
	}
	return host, port, ca, nil
}

// servingTLS makes a throwaway self-signed serving certificate (the apiserver
// in the rig does not verify kubelet serving certs: no
// --kubelet-certificate-authority) and, with clientCA, requires client certs
// signed by it.
func servingTLS(name, clientCA string) (*tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{name, "localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		ClientAuth:   tls.NoClientCert,
	}
	if clientCA != "" {
		pem, err := os.ReadFile(clientCA)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("no certificates in %s", clientCA)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}
