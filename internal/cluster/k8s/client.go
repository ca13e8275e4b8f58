package k8s

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Client is a connection to the API server for the command line: submit a
// job, look at it, stop it, and (in the master pod) find the master's own
// pod. Each call is bounded by the timeout the Client was made with, except
// a followed log.
type Client struct {
	cs      kubernetes.Interface
	timeout time.Duration
	// rc is what Connect connected with: port-forward and the API server's
	// proxy need it. nil for a Client made by NewClient (a fake clientset).
	rc *rest.Config
}

// NewClient wraps a clientset (a fake one in tests); timeout bounds each
// call (30 s when not positive).
func NewClient(cs kubernetes.Interface, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	return &Client{cs: cs, timeout: timeout}
}

// The rate limits of the master's client (Connect): calls beyond the burst
// go at ClientQPS.
const (
	ClientQPS   = 50
	ClientBurst = 100
)

// Connect connects to the cluster named by kubeconfig, $KUBECONFIG,
// ~/.kube/config, or the pod's service account, in that order. timeout is
// how long to wait for the API server.
func Connect(kubeconfig string, timeout time.Duration) (*Client, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	rc.Timeout = timeout
	// A master creates and deletes pods in bursts (relaunches, the end of a
	// large job): client-go's default 5 QPS would make that slow.
	rc.QPS, rc.Burst = ClientQPS, ClientBurst
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	c := NewClient(cs, timeout)
	c.rc = rc
	return c, nil
}

// errNeedsAPIServer is the error of a call that streams through the API
// server (port-forward, proxy) on a Client without a rest.Config.
var errNeedsAPIServer = errors.New("needs a real API server (this client has no connection config)")

// bounded is ctx with the Client's timeout.
func (c *Client) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}
