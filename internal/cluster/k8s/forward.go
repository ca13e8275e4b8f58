package k8s

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// Tunnel is one port-forward connection through the API server to a pod's
// port, as `kubectl port-forward` opens: each local connection gets a pair
// of streams over it (Forward).
type Tunnel struct {
	conn   httpstream.Connection
	target DashboardTarget
	nextID atomic.Int64
}

// OpenTunnel opens a port-forward connection to t: over WebSocket, or
// SPDY when the API server cannot upgrade to WebSocket (as kubectl does).
// A forbidden port-forward is an error that apierrors.IsForbidden finds.
func (c *Client) OpenTunnel(t DashboardTarget) (*Tunnel, error) {
	if c.rc == nil {
		return nil, fmt.Errorf("port-forward to %s: %w", t, errNeedsAPIServer)
	}
	u := c.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(t.Namespace).Name(t.Pod).SubResource("portforward").URL()
	ws, err := portforward.NewSPDYOverWebsocketDialer(u, c.rc)
	if err != nil {
		return nil, fmt.Errorf("port-forward to %s: %w", t, err)
	}
	rt, up, err := spdy.RoundTripperFor(c.rc)
	if err != nil {
		return nil, fmt.Errorf("port-forward to %s: %w", t, err)
	}
	dialer := portforward.NewFallbackDialer(ws, spdy.NewDialer(up, &http.Client{Transport: rt}, http.MethodPost, u),
		func(err error) bool { return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err) })
	conn, proto, err := dialer.Dial(portforward.PortForwardProtocolV1Name)
	if err != nil {
		return nil, fmt.Errorf("port-forward to %s: %w", t, err)
	}
	if proto != portforward.PortForwardProtocolV1Name {
		conn.Close()
		return nil, fmt.Errorf("port-forward to %s: the API server speaks %q, not %q", t, proto, portforward.PortForwardProtocolV1Name)
	}
	return &Tunnel{conn: conn, target: t}, nil
}

// Target is where the tunnel goes.
func (tn *Tunnel) Target() DashboardTarget { return tn.target }

// Done is closed once the tunnel broke or was closed.
func (tn *Tunnel) Done() <-chan bool { return tn.conn.CloseChan() }

// Close closes the tunnel and every stream on it.
func (tn *Tunnel) Close() error { return tn.conn.Close() }

// Forward copies between local and the pod's port until either side ends,
// then closes local. An error says the tunnel failed (it could not open
// the streams, or the kubelet reported one, such as nothing listening on
// the port): the caller should not reuse it.
func (tn *Tunnel) Forward(local net.Conn) error {
	defer local.Close()
	h := http.Header{}
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	h.Set(corev1.PortHeader, strconv.Itoa(tn.target.Port))
	h.Set(corev1.PortForwardRequestIDHeader, strconv.FormatInt(tn.nextID.Add(1), 10))
	errStream, err := tn.conn.CreateStream(h)
	if err != nil {
		return fmt.Errorf("port-forward to %s: error stream: %w", tn.target, err)
	}
	errStream.Close() // nothing to send on it
	defer tn.conn.RemoveStreams(errStream)
	remoteErr := make(chan error, 1)
	go func() {
		msg, err := io.ReadAll(errStream)
		switch {
		case err != nil:
			remoteErr <- fmt.Errorf("port-forward to %s: read its error stream: %w", tn.target, err)
		case len(msg) > 0:
			remoteErr <- fmt.Errorf("port-forward to %s: %s", tn.target, msg)
		default:
			remoteErr <- nil
		}
	}()
	h.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := tn.conn.CreateStream(h)
	if err != nil {
		return fmt.Errorf("port-forward to %s: data stream: %w", tn.target, err)
	}
	defer tn.conn.RemoveStreams(data)
	fromPod := make(chan struct{})
	go func() {
		io.Copy(local, data)
		close(fromPod)
	}()
	toPodFailed := make(chan struct{})
	go func() {
		defer data.Close() // no more to send
		if _, err := io.Copy(data, local); err != nil && !errors.Is(err, net.ErrClosed) {
			close(toPodFailed)
		}
	}()
	select {
	case <-fromPod:
	case <-toPodFailed:
	}
	// Unsent data would hold the error stream back (as in client-go).
	data.Reset()
	return <-remoteErr
}

// PodProxyURL is the base URL of the API server's proxy to t's port:
// pods/NAME:PORT/proxy/.
func (c *Client) PodProxyURL(t DashboardTarget) (*url.URL, error) {
	if c.rc == nil {
		return nil, fmt.Errorf("proxy to %s: %w", t, errNeedsAPIServer)
	}
	u := c.cs.CoreV1().RESTClient().Get().Resource("pods").Namespace(t.Namespace).Name(t.Pod + ":" + strconv.Itoa(t.Port)).SubResource("proxy").URL()
	u.Path += "/"
	return u, nil
}

// Transport carries the client's credentials to the API server (for its
// proxy).
func (c *Client) Transport() (http.RoundTripper, error) {
	if c.rc == nil {
		return nil, fmt.Errorf("proxy: %w", errNeedsAPIServer)
	}
	rt, err := rest.TransportFor(c.rc)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	return rt, nil
}
