package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// call runs one RPC, retrying codes.Unavailable (PS down or restarting)
// with backoff until ctx ends. Errors name the shard and its address and
// keep the gRPC status for status.Code.
func (c *Client) call(ctx context.Context, s *shardConn, op string, rpc func(context.Context) error) error {
	bo := c.newBackoff()
	for {
		err := rpc(ctx)
		if err == nil {
			return nil
		}
		if cerr := callerEnded(ctx, err, time.Now()); cerr != nil {
			// The caller's deadline or cancellation ended the call: say so
			// in a way errors.Is sees, whatever status gRPC reported.
			return fmt.Errorf("ps shard %d (%s): %s: %w (%w)", s.index, s.addr, op, cerr, err)
		}
		if status.Code(err) != codes.Unavailable {
			return fmt.Errorf("ps shard %d (%s): %s: %w", s.index, s.addr, op, err)
		}
		c.opts.log.Debug("PS shard unavailable; retrying", "shard", s.index, "addr", s.addr, "op", op, "err", err)
		s.mu.Lock()
		s.refetch = true
		s.mu.Unlock()
		if werr := bo.wait(ctx); werr != nil {
			return fmt.Errorf("ps shard %d (%s): %s: gave up retrying: %w (last error: %w)", s.index, s.addr, op, werr, err)
		}
	}
}

// callerEnded is the caller's context error when its deadline or
// cancellation ended a call. A deadline can strike first on the
// connection (the direct transport sets the context's deadline on its
// socket) and come back as DeadlineExceeded a moment before the context's
// own timer fires: that is the caller's deadline too.
func callerEnded(ctx context.Context, err error, now time.Time) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if dl, ok := ctx.Deadline(); ok && status.Code(err) == codes.DeadlineExceeded && !now.Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// expBackoff is capped exponential backoff with ±20% jitter, so workers
// retrying against one relaunched PS do not arrive in lockstep.
type expBackoff struct {
	next, max time.Duration
}

func (c *Client) newBackoff() *expBackoff {
	return &expBackoff{next: c.opts.minBackoff, max: c.opts.maxBackoff}
}

func (b *expBackoff) wait(ctx context.Context) error {
	d := time.Duration(float64(b.next) * (0.8 + 0.4*rand.Float64()))
	b.next = min(2*b.next, b.max)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
