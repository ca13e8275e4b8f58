package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"

	"elasticdl/internal/cluster"
	"elasticdl/internal/collective"
	"elasticdl/internal/ringd"
	"elasticdl/internal/tlsid"
)

// runRingd is the helper a Python worker starts to drive the Go ring
// (internal/ringd): the worker passes two socket ends and a memfd.
func runRingd(ctx context.Context, env Env, args []string) error {
	fs := newFlagSet(env, "ringd")
	listen := fs.String("listen", "127.0.0.1:0", "host:port the ring's listener binds (port 0: any free port; HELLO answers the real one)")
	dataFD := fs.Int("data_fd", -1, "the data socket's file descriptor in this process")
	ctlFD := fs.Int("ctl_fd", -1, "the control socket's file descriptor in this process")
	memFD := fs.Int("mem_fd", -1, "the shared memory file's (memfd) descriptor in this process")
	if err := parse(fs, args); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		fd   int
	}{{"data_fd", *dataFD}, {"ctl_fd", *ctlFD}, {"mem_fd", *memFD}} {
		if f.fd < 0 {
			return usageError{fmt.Errorf("--%s is required", f.name)}
		}
	}
	// It shares the CPU with the training process it serves.
	if runtime.GOMAXPROCS(0) > 2 {
		runtime.GOMAXPROCS(2)
	}
	logger := newLogger(env.Stderr, slog.LevelInfo).With("role", "ringd")
	data, err := socketConn(*dataFD, "data_fd")
	if err != nil {
		return usageError{err}
	}
	ctl, err := socketConn(*ctlFD, "ctl_fd")
	if err != nil {
		data.Close()
		return usageError{err}
	}
	mem := os.NewFile(uintptr(*memFD), "ringd-memory")
	defer mem.Close()
	var ln *collective.Listener
	creds, err := loadTLSDir()
	if err == nil {
		ln, err = collective.ListenTLS(*listen, logger, creds)
	}
	if err != nil {
		data.Close()
		ctl.Close()
		return err
	}
	defer ln.Close()
	logger.Info("ringd: serving", "addr", ln.Addr())
	if err := ringd.New(ln, mem, logger).Serve(ctx, data, ctl); err != nil {
		return err
	}
	logger.Info("ringd: worker gone, exiting")
	return nil
}

// loadTLSDir loads the credentials in the directory cluster.EnvTLSDir
// names; nil when it is unset (the job runs without TLS).
func loadTLSDir() (*tlsid.Creds, error) {
	dir := os.Getenv(cluster.EnvTLSDir)
	if dir == "" {
		return nil, nil
	}
	c, err := tlsid.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("$%s: %w", cluster.EnvTLSDir, err)
	}
	return c, nil
}

// socketConn is a net.Conn of the socket at fd (which it takes over),
// passed as flag.
func socketConn(fd int, flag string) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "ringd-"+flag)
	defer f.Close() // FileConn holds a duplicate
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("--%s=%d is not a socket: %w", flag, fd, err)
	}
	return c, nil
}
