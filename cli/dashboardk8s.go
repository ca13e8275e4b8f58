package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	flag "github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"elasticdl/internal/cluster/k8s"
)

// The ways `elasticdl dashboard` reaches a pod through the API server.
const (
	viaPortForward = "port-forward"
	viaProxy       = "proxy"
)

// dashboardCmdOptions are `elasticdl dashboard`'s own flags.
type dashboardCmdOptions struct {
	port       int
	address    string
	via        string
	autoscaler bool
}

func (o *dashboardCmdOptions) flags(fs *flag.FlagSet) func() error {
	fs.IntVar(&o.port, "port", 0, "local port of the dashboard (0: a free one)")
	fs.StringVar(&o.address, "address", "127.0.0.1", "local address to listen on")
	fs.StringVar(&o.via, "via", viaPortForward, "how to reach the pod through the API server: port-forward (RBAC create pods/portforward) or proxy (RBAC get pods/proxy; for clusters that forbid port-forward)")
	fs.BoolVar(&o.autoscaler, "autoscaler", false, "the cluster's dashboard, served by the autoscaler (namespace "+k8s.AutoscalerNamespace+" unless --namespace), instead of a job's")
	return func() error {
		switch {
		case o.via != viaPortForward && o.via != viaProxy:
			return fmt.Errorf("--via=%s: want port-forward or proxy", o.via)
		case o.port < 0 || o.port > 65535:
			return fmt.Errorf("--port=%d: want 0 (a free port) or a port up to 65535", o.port)
		}
		return nil
	}
}

// dashConnWait bounds how long a local connection waits for the
// dashboard's pod (a master pod being replaced after a failover).
const dashConnWait = 2 * time.Minute

// runDashboard opens a local port to a Kubernetes job's dashboard (or the
// autoscaler's) through the API server and keeps it open across master
// pods: each new local connection goes to the newest running one.
func runDashboard(ctx context.Context, env Env, args []string) error {
	var o dashboardCmdOptions
	var nsSet func() bool
	c, client, err := newCtl(env, "dashboard", args, func(fs *flag.FlagSet) func() error {
		nsSet = func() bool { return fs.Changed("namespace") }
		return o.flags(fs)
	}, func() bool { return o.autoscaler })
	if err != nil {
		return err
	}
	ns := c.o.namespace
	find := func(ctx context.Context) (k8s.DashboardTarget, error) { return client.JobDashboard(ctx, ns, c.job) }
	if o.autoscaler {
		if c.job != "" {
			return usageError{fmt.Errorf("--autoscaler shows the cluster's dashboard: no JOB (got %q)", c.job)}
		}
		if !nsSet() {
			ns = k8s.AutoscalerNamespace
		}
		find = func(ctx context.Context) (k8s.DashboardTarget, error) { return client.AutoscalerDashboard(ctx, ns) }
	}
	logger := newLogger(env.Stderr, slog.LevelInfo)
	res := &dashResolver{find: find, log: logger}
	if _, err := res.target(ctx); err != nil {
		return err
	}
	var fw dashForwarder
	if o.via == viaProxy {
		fw, err = newProxyForwarder(client, res)
	} else {
		fw = &tunnelForwarder{client: client, res: res, log: logger}
	}
	if err == nil {
		err = fw.probe(ctx)
	}
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", net.JoinHostPort(o.address, strconv.Itoa(o.port)))
	if err != nil {
		return usageError{fmt.Errorf("--address/--port: %w", err)}
	}
	fmt.Fprintf(env.Stdout, "dashboard url=http://%s/\n", lis.Addr())
	return fw.serve(ctx, lis)
}

// dashForwarder carries local connections to the dashboard's pod.
type dashForwarder interface {
	// probe checks, once, that the current pod's dashboard answers.
	probe(ctx context.Context) error
	// serve serves lis until ctx ends.
	serve(ctx context.Context, lis net.Listener) error
}

// dashRecheck is how long a found pod is used before the next connection
// asks the API server again (a newer master pod may have replaced it).
const dashRecheck = 2 * time.Second

// resolveDue says whether to ask the API server for the dashboard's pod:
// never found (or the last one failed: checked is zero), or found longer
// than dashRecheck ago.
func resolveDue(checked, now time.Time) bool {
	return checked.IsZero() || now.Sub(checked) >= dashRecheck || now.Before(checked)
}

// waitable says whether the dashboard's pod is worth waiting for (it does
// not run yet) rather than an error to report.
func waitable(err error) bool { return errors.Is(err, k8s.ErrNotRunning) }

// dashResolver is the dashboard's current pod.
type dashResolver struct {
	find func(ctx context.Context) (k8s.DashboardTarget, error)
	log  *slog.Logger

	// mu is held while resolving, so that a burst of connections asks
	// the API server once.
	mu      sync.Mutex
	cur     k8s.DashboardTarget
	checked time.Time
}

// target is the dashboard's pod, found again when resolveDue; while none
// runs, it waits (saying so once) until one does or ctx ends.
func (r *dashResolver) target(ctx context.Context) (k8s.DashboardTarget, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !resolveDue(r.checked, time.Now()) {
		return r.cur, nil
	}
	said := false
	for {
		t, err := r.find(ctx)
		switch {
		case err == nil:
			if t != r.cur {
				r.log.Info("forwarding to the dashboard", "pod", t.Namespace+"/"+t.Pod, "port", t.Port)
			}
			r.cur, r.checked = t, time.Now()
			return t, nil
		case !waitable(err):
			return t, err
		case !said:
			r.log.Info("waiting for the dashboard's pod", "why", err.Error())
			said = true
		}
		select {
		case <-ctx.Done():
			return k8s.DashboardTarget{}, fmt.Errorf("%w (gave up waiting: %w)", err, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// failed says that t failed: the next connection asks the API server.
func (r *dashResolver) failed(t k8s.DashboardTarget) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur == t {
		r.checked = time.Time{}
	}
}

// tunnelForwarder forwards each local connection over a port-forward
// tunnel to the current pod. It keeps its own local listener for the whole
// session, rather than restarting client-go's PortForwarder (which owns
// its listeners) on the same port after each failover: the port is never
// released for another process to take, a browser reconnecting during a
// failover waits in the accept queue instead of being refused, and each
// connection picks the pod at the time it comes, which is when an
// EventSource reconnects to the next master.
type tunnelForwarder struct {
	client *k8s.Client
	res    *dashResolver
	log    *slog.Logger

	mu  sync.Mutex
	tun *k8s.Tunnel
}

// reuseTunnel says whether an open tunnel to have serves a connection to
// want.
func reuseTunnel(have k8s.DashboardTarget, open bool, want k8s.DashboardTarget) bool {
	return open && have == want
}

// tunnel is a tunnel to t: the open one, or a new one (closing the old).
func (f *tunnelForwarder) tunnel(t k8s.DashboardTarget) (*k8s.Tunnel, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tun != nil {
		open := true
		select {
		case <-f.tun.Done():
			open = false
		default:
		}
		if reuseTunnel(f.tun.Target(), open, t) {
			return f.tun, nil
		}
		f.tun.Close()
		f.tun = nil
	}
	tn, err := f.client.OpenTunnel(t)
	if err != nil {
		return nil, explainForwardError(t, err)
	}
	f.tun = tn
	return tn, nil
}

// forward carries conn to the current pod.
func (f *tunnelForwarder) forward(ctx context.Context, conn net.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, dashConnWait)
	t, err := f.res.target(ctx)
	cancel()
	if err != nil {
		conn.Close()
		return err
	}
	tn, err := f.tunnel(t)
	if err == nil {
		err = tn.Forward(conn)
	} else {
		conn.Close()
	}
	if err != nil {
		f.res.failed(t)
		f.mu.Lock()
		if f.tun == tn && tn != nil {
			f.tun.Close()
			f.tun = nil
		}
		f.mu.Unlock()
	}
	return err
}

// probe sends one request for the page through the tunnel.
func (f *tunnelForwarder) probe(ctx context.Context) error {
	local, remote := net.Pipe()
	defer local.Close()
	done := make(chan error, 1)
	go func() { done <- f.forward(ctx, remote) }()
	local.SetDeadline(time.Now().Add(30 * time.Second))
	_, err := io.WriteString(local, "GET / HTTP/1.0\r\nHost: dashboard\r\n\r\n")
	var resp *http.Response
	if err == nil {
		resp, err = http.ReadResponse(bufio.NewReader(local), nil)
	}
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("the dashboard answered %s", resp.Status)
		}
		return err
	}
	local.Close()
	if ferr := <-done; ferr != nil {
		return ferr
	}
	return fmt.Errorf("port-forward to the dashboard: %w", err)
}

// serve accepts connections until ctx ends.
func (f *tunnelForwarder) serve(ctx context.Context, lis net.Listener) error {
	stop := context.AfterFunc(ctx, func() { lis.Close() })
	defer stop()
	for {
		conn, err := lis.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("dashboard: accept: %w", err)
		}
		go func() {
			if err := f.forward(ctx, conn); err != nil && ctx.Err() == nil {
				f.log.Warn("a dashboard connection failed", "err", err)
			}
		}()
	}
}

// explainForwardError says what to do about a port-forward that failed.
func explainForwardError(t k8s.DashboardTarget, err error) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("port-forward to pod %s/%s is forbidden (RBAC: create pods/portforward in namespace %s); try --via=proxy (RBAC: get pods/proxy): %w", t.Namespace, t.Pod, t.Namespace, err)
	}
	return err
}

// proxyForwarder is a local reverse proxy to the API server's proxy of the
// current pod (pods/NAME:PORT/proxy/).
type proxyForwarder struct {
	client *k8s.Client
	res    *dashResolver
	rt     http.RoundTripper
}

func newProxyForwarder(client *k8s.Client, res *dashResolver) (*proxyForwarder, error) {
	rt, err := client.Transport()
	if err != nil {
		return nil, err
	}
	return &proxyForwarder{client: client, res: res, rt: rt}, nil
}

// proxyFailed says whether an answer through the API server's proxy says
// that the pod could not be reached (rather than the dashboard's own).
func proxyFailed(code int) bool {
	return code == http.StatusBadGateway || code == http.StatusServiceUnavailable
}

type proxyTargetKey struct{}

type proxyTarget struct {
	t    k8s.DashboardTarget
	base *url.URL
}

func (f *proxyForwarder) handler() http.Handler {
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(pr.In.Context().Value(proxyTargetKey{}).(proxyTarget).base)
		},
		Transport: f.rt,
		// Server-Sent Events: each event goes out as it comes.
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			if proxyFailed(resp.StatusCode) {
				f.res.failed(resp.Request.Context().Value(proxyTargetKey{}).(proxyTarget).t)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			f.res.failed(r.Context().Value(proxyTargetKey{}).(proxyTarget).t)
			http.Error(w, "elasticdl dashboard: "+err.Error(), http.StatusBadGateway)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), dashConnWait)
		t, err := f.res.target(ctx)
		cancel()
		var base *url.URL
		if err == nil {
			base, err = f.client.PodProxyURL(t)
		}
		if err != nil {
			http.Error(w, "elasticdl dashboard: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), proxyTargetKey{}, proxyTarget{t, base})))
	})
}

// probe gets the page through the API server's proxy.
func (f *proxyForwarder) probe(ctx context.Context) error {
	t, err := f.res.target(ctx)
	if err != nil {
		return err
	}
	base, err := f.client.PodProxyURL(t)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base.String(), nil)
	if err != nil {
		return fmt.Errorf("proxy to %s: %w", t, err)
	}
	resp, err := (&http.Client{Transport: f.rt, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("proxy to %s: %w", t, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return explainProxyStatus(t, resp.StatusCode, body)
}

// explainProxyStatus says what an answer of the API server's proxy to the
// dashboard's page means (nil: the page).
func explainProxyStatus(t k8s.DashboardTarget, code int, body []byte) error {
	if code == http.StatusOK {
		return nil
	}
	msg := strings.TrimSpace(string(body))
	var st struct{ Message string }
	if json.Unmarshal(body, &st) == nil && st.Message != "" {
		msg = st.Message
	}
	switch {
	case code == http.StatusForbidden:
		return fmt.Errorf("the API server's proxy to pod %s/%s is forbidden (RBAC: get pods/proxy in namespace %s); try --via=port-forward: %s", t.Namespace, t.Pod, t.Namespace, msg)
	case code == http.StatusBadRequest && strings.Contains(msg, "address not allowed"):
		return fmt.Errorf("the API server does not proxy to pod %s/%s: its IP is a loopback or link-local address (as on the test rig's process nodes); use --via=port-forward", t.Namespace, t.Pod)
	}
	return fmt.Errorf("proxy to %s: HTTP %d: %s", t, code, msg)
}

// serve serves the reverse proxy until ctx ends.
func (f *proxyForwarder) serve(ctx context.Context, lis net.Listener) error {
	srv := &http.Server{Handler: f.handler(), ReadHeaderTimeout: 10 * time.Second}
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	defer stop()
	if err := srv.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("dashboard: %w", err)
	}
	return nil
}
