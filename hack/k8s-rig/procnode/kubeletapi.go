package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	utilexec "k8s.io/utils/exec"
)

func (p *Provider) findContainer(ns, pod, name string) (*podRec, *container, error) {
	rec := p.lookup(ns, pod)
	if rec == nil {
		return nil, nil, errdefs.NotFoundf("pod %s/%s not found on node %s", ns, pod, p.cfg.NodeName)
	}
	for _, c := range append(append([]*container{}, rec.ctrs...), rec.inits...) {
		if c.spec.Name == name {
			return rec, c, nil
		}
	}
	return nil, nil, errdefs.NotFoundf("container %q not found in pod %s/%s", name, ns, pod)
}

// GetContainerLogs serves `kubectl logs`: the container's log file, with
// --tail, --limit-bytes, --previous and --follow (polls the file until the
// container's current process has exited). --timestamps and --since are ignored (the
// file has no timestamps).
func (p *Provider) GetContainerLogs(ctx context.Context, ns, podName, containerName string, opts api.ContainerLogOpts) (io.ReadCloser, error) {
	rec, c, err := p.findContainer(ns, podName, containerName)
	if err != nil {
		return nil, err
	}
	path := c.logPath
	if opts.Previous {
		path = strings.TrimSuffix(path, ".log") + ".previous.log"
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	if err != nil {
		return nil, err
	}
	if opts.Tail > 0 {
		if err := seekTail(f, opts.Tail); err != nil {
			f.Close()
			return nil, err
		}
	}
	var r io.Reader = f
	if opts.Follow && !opts.Previous {
		// Follow the process running now, until it exits (as a kubelet does).
		rec.mu.Lock()
		id := c.id
		rec.mu.Unlock()
		r = &followReader{ctx: ctx, f: f, alive: func() bool {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			return c.proc != nil && c.id == id
		}}
	}
	if opts.LimitBytes > 0 {
		r = io.LimitReader(r, int64(opts.LimitBytes))
	}
	return struct {
		io.Reader
		io.Closer
	}{r, f}, nil
}

// seekTail positions f at the start of its last n lines.
func seekTail(f *os.File, n int) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	const chunk = 64 << 10
	buf := make([]byte, chunk)
	lines := 0
	pos := size
	// A final newline ends the last line rather than starting a new one.
	first := true
	for pos > 0 {
		readAt := max(pos-chunk, 0)
		b := buf[:pos-readAt]
		if _, err := f.ReadAt(b, readAt); err != nil && err != io.EOF {
			return err
		}
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] != '\n' {
				first = false
				continue
			}
			if first {
				first = false
				continue
			}
			lines++
			if lines == n {
				_, err := f.Seek(readAt+int64(i)+1, io.SeekStart)
				return err
			}
		}
		pos = readAt
	}
	_, err = f.Seek(0, io.SeekStart)
	return err
}

type followReader struct {
	ctx   context.Context
	f     *os.File
	alive func() bool
}

func (r *followReader) Read(b []byte) (int, error) {
	for {
		n, err := r.f.Read(b)
		if n > 0 || (err != nil && err != io.EOF) {
			return n, err
		}
		if !r.alive() {
			// One last read: output written just before exit.
			if n, err = r.f.Read(b); n > 0 {
				return n, nil
			}
			return 0, io.EOF
		}
		select {
		case <-r.ctx.Done():
			return 0, io.EOF
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// RunInContainer serves `kubectl exec` (no TTY): the command runs as a local
// process with the container's environment and working directory.
func (p *Provider) RunInContainer(ctx context.Context, ns, podName, containerName string, cmd []string, attach api.AttachIO) error {
	rec, c, err := p.findContainer(ns, podName, containerName)
	if err != nil {
		return err
	}
	if len(cmd) == 0 {
		return errdefs.InvalidInput("no command")
	}
	rec.mu.Lock()
	env, cwd := c.env, c.cwd
	rec.mu.Unlock()
	if cwd == "" {
		cwd = rec.dir
	}
	x := exec.CommandContext(ctx, cmd[0], cmd[1:]...)
	x.Env, x.Dir = env, cwd
	x.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	x.Cancel = func() error { return syscall.Kill(-x.Process.Pid, syscall.SIGKILL) }
	if in := attach.Stdin(); in != nil {
		x.Stdin = in
	}
	if out := attach.Stdout(); out != nil {
		defer out.Close()
		x.Stdout = out
	}
	if e := attach.Stderr(); e != nil {
		defer e.Close()
		x.Stderr = e
	}
	if attach.TTY() && x.Stderr == nil {
		x.Stderr = x.Stdout
	}
	err = x.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return utilexec.CodeExitError{Err: err, Code: exitCode(ee.ProcessState, err)}
	}
	return err
}

// AttachToContainer is not supported (processes have no attachable stdin).
func (p *Provider) AttachToContainer(context.Context, string, string, string, api.AttachIO) error {
	return errdefs.InvalidInput("attach is not supported by procnode")
}

// PortForward serves `kubectl port-forward`: the pod's port is 127.0.0.1:port.
func (p *Provider) PortForward(ctx context.Context, ns, podName string, port int32, stream io.ReadWriteCloser) error {
	if p.lookup(ns, podName) == nil {
		return errdefs.NotFoundf("pod %s/%s not found", ns, podName)
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", fmt.Sprintf("%s:%d", localIP, port))
	if err != nil {
		return err
	}
	defer conn.Close()
	errc := make(chan error, 2)
	go func() { _, err := io.Copy(conn, stream); errc <- err }()
	go func() { _, err := io.Copy(stream, conn); errc <- err }()
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	return err
}

// GetStatsSummary: not provided (no /stats/summary route is registered).
func (p *Provider) GetStatsSummary(context.Context) (*statsv1alpha1.Summary, error) {
	return nil, errdefs.NotFound("stats are not supported by procnode")
}

// GetMetricsResource: not provided.
func (p *Provider) GetMetricsResource(context.Context) ([]*dto.MetricFamily, error) {
	return nil, errdefs.NotFound("metrics are not supported by procnode")
}

// ---- ServiceAccount token -------------------------------------------------------------

func requestToken(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, sa string) (string, error) {
	exp := int64(3600)
	tr, err := client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{
			ExpirationSeconds: &exp,
			BoundObjectRef:    &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}

// writeSAFiles writes DIR/{token,ca.crt,namespace} (the layout of
// /var/run/secrets/kubernetes.io/serviceaccount) and a kubeconfig using them.
func writeSAFiles(dir, kubeconfig, server, ns, sa, token string, ca []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for name, data := range map[string][]byte{"token": []byte(token), "ca.crt": ca, "namespace": []byte(ns)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["rig"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: filepath.Join(dir, "ca.crt")}
	cfg.AuthInfos[sa] = &clientcmdapi.AuthInfo{TokenFile: filepath.Join(dir, "token")}
	cfg.Contexts["default"] = &clientcmdapi.Context{Cluster: "rig", AuthInfo: sa, Namespace: ns}
	cfg.CurrentContext = "default"
	return clientcmd.WriteToFile(*cfg, kubeconfig)
}
