package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// masterLink is the worker's side of its connection to the master: it
// retries what the master could not take and, when the master stays out
// of reach, ends the worker with the concrete cause. A worker that never
// reached its master (a Service name the cluster cannot resolve, a port
// nothing listens on) must say why, or its relaunches fail the same way
// with nothing for the user to read.
type masterLink struct {
	addr    string
	timeout time.Duration
	log     *slog.Logger
	// reached: the master has answered at least once.
	reached atomic.Bool
}

// retryUnavailable retries a call the master could not take — it is down,
// or a new master is taking over after a crash — with backoff, for up to
// timeout from the first failure; then the call fails with a clear error.
// (A request the dead master had taken is safe to repeat: the master
// answers a repeated GetTask with the same task, and a repeated report of
// a done task is refused without effect.)
func (l *masterLink) retryUnavailable(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var deadline time.Time
	backoff := 100 * time.Millisecond
	for {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if status.Code(err) != codes.Unavailable {
			if answered(err) {
				l.reached.Store(true)
			}
			return err
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(l.timeout)
			l.log.Warn("master unavailable, retrying", "call", method, "master", l.addr, "for_up_to", l.timeout, "cause", l.cause(ctx, err))
		}
		if now.After(deadline) {
			return l.giveUp(ctx, err)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// answered says whether a call's outcome came from the master: a result or
// a refusal, not a deadline, a cancellation or an unknown failure.
func answered(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown:
		return false
	}
	return true
}

// giveUp is the error that ends the worker once the master stayed
// unavailable for the whole timeout. It keeps err's Unavailable status.
func (l *masterLink) giveUp(ctx context.Context, err error) error {
	if !l.reached.Load() {
		return fmt.Errorf("cannot reach the master at %s: no answer in %s since the worker started: %s: %w",
			l.addr, l.timeout, l.cause(ctx, err), err)
	}
	return fmt.Errorf("master unavailable for %s, the worker's limit: %w", l.timeout, err)
}

// cause is why the master cannot be reached, in the network's words. gRPC
// hides a failed name lookup behind "produced zero addresses", so a
// resolver error is looked up again here to name the host and the lookup's
// own error; other errors are gRPC's own text.
func (l *masterLink) cause(ctx context.Context, err error) string {
	msg := status.Convert(err).Message()
	if !strings.Contains(msg, "name resolver error") && !strings.Contains(msg, "produced zero addresses") {
		return msg
	}
	host, _, splitErr := net.SplitHostPort(l.addr)
	if splitErr != nil {
		return fmt.Sprintf("%s (%v)", msg, splitErr)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, lookErr := net.DefaultResolver.LookupHost(ctx, host); lookErr != nil {
		var dnsErr *net.DNSError
		if errors.As(lookErr, &dnsErr) && dnsErr.IsNotFound {
			return fmt.Sprintf("the name %s does not resolve (%v): where the cluster has no DNS for Services, pass the master's address (--master_host)", host, lookErr)
		}
		return lookErr.Error()
	}
	return msg
}
