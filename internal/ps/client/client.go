// Package client is what workers use to talk to all parameter-server
// shards of a job: it routes each parameter to its shard (ShardOf), pushes
// the initial model, pulls parameters and pushes gradients to all shards in
// parallel, and rides out PS restarts.
//
// # Resilience
//
// PS processes get killed and relaunched at the same address. Every call
// retries codes.Unavailable with capped exponential backoff until its
// context ends. A PS relaunched with checkpoints restores the newest one
// before serving and is initialized from the start: the client just pulls
// everything again. Without checkpoints it comes back empty; when a shard
// answers that it is not initialized and this client has held that
// shard's parameters (it pulled them, or its PushModel was the one
// accepted), the client re-initializes the shard by pushing its CURRENT
// parameter values, tagged with the version it last pulled, and carries
// on. So such a PS restarts from the newest parameters some worker holds,
// losing only the optimizer's slots (momentum, Adam moments). If several
// workers race to re-initialize, the shard keeps the first and the others
// re-pull.
//
// A client that never held a shard's parameters (a fresh worker) instead
// waits, with backoff, for some other worker to initialize it.
//
// After a call to a shard has failed with Unavailable, the next Pull from
// it fetches everything: the shard may meanwhile have been restored by
// another worker from older values and reached our version number again.
// A worker that never noticed the outage can keep such stale values until
// the shard's version next changes, i.e. for one step of async training.
//
// Gradient pushes are retried on Unavailable too, so a push whose reply
// was lost after the PS applied it may be applied twice; async SGD
// tolerates that noise.
//
// # Embedding tables
//
// PushModel also registers a model's sparse embedding tables on every
// shard; PullEmbeddings and Push route each id to shard id mod NumShards,
// in parallel, and PullEmbeddings reassembles rows in the caller's order.
// A relaunched empty shard is re-initialized as above, its tables
// registered again; its rows restart from their deterministic initial
// values unless the PS restored a checkpoint.
package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"

	"elasticdl/internal/ps/direct"
	"elasticdl/internal/rpc"
	"elasticdl/internal/tlsid"
	"elasticdl/internal/wire"
	"elasticdl/nn"
	"elasticdl/proto/pserverpb"
)

// Client talks to every shard of one job. It is safe for concurrent use,
// though a worker normally alternates Pull and Push from one goroutine.
type Client struct {
	shards []*shardConn
	opts   options

	mu     sync.Mutex
	layout *layout // split of the params slice seen last
	// tables are the embedding tables registered by PushModel; every
	// initialization of a shard (re-initializations included) carries them.
	tables []*pserverpb.EmbeddingTableInfo
	dims   map[string]int
}

// shardConn is one shard's connection and what this client knows of it.
type shardConn struct {
	index int
	addr  string
	conn  *grpc.ClientConn
	rpc   pserverpb.PserverClient
	// direct carries pushes and pulls when not nil.
	direct *direct.Client

	mu sync.Mutex
	// version is the shard version the worker's values came from; -1 when
	// unknown, which makes the next pull fetch everything.
	version int64
	// haveValues: the worker's parameters for this shard came from it (or
	// initialized it), so they may re-initialize it after a relaunch.
	haveValues bool
	// refetch makes the next pull ask for everything: after an outage the
	// shard may have been restored by another worker from values that
	// differ from ours under the same version number.
	refetch bool

	// pushMu serializes gradient pushes to this shard so they can reuse
	// pushBuf, avoiding a model-sized allocation per push.
	pushMu  sync.Mutex
	pushBuf []*pserverpb.Tensor
	// rejected: the last push to this shard was declined (sync SGD, too
	// stale); guarded by pushMu.
	rejected bool
}

// Dial creates connections to every shard, addrs[i] being shard i. It does
// not wait for the servers: calls retry until they are up.
func Dial(ctx context.Context, addrs []string, opts ...Option) (*Client, error) {
	if len(addrs) == 0 {
		return nil, errors.New("ps client: no PS addresses")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("ps client: dial: %w", err)
	}
	o := options{minBackoff: 50 * time.Millisecond, maxBackoff: time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	if o.minBackoff <= 0 || o.maxBackoff < o.minBackoff {
		return nil, fmt.Errorf("ps client: bad backoff %v..%v", o.minBackoff, o.maxBackoff)
	}
	if err := wire.CheckDType(o.dtype); err != nil {
		return nil, fmt.Errorf("ps client: transport: %w", err)
	}
	dialOpts := append(rpc.DialOptions(o.creds, tlsid.PS), o.dialOpts...)
	c := &Client{opts: o}
	for i, addr := range addrs {
		conn, err := grpc.NewClient(addr, dialOpts...)
		if err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("ps client: shard %d (%s): %w", i, addr, err)
		}
		conn.Connect() // start connecting now rather than on the first call
		s := &shardConn{index: i, addr: addr, conn: conn, rpc: pserverpb.NewPserverClient(conn), version: -1}
		if _, _, err := net.SplitHostPort(addr); err == nil && !o.grpcOnly {
			s.direct = direct.NewClientTLS(addr, o.creds)
			if o.noSharedMemory {
				s.direct.NoSharedMemory()
			}
		}
		c.shards = append(c.shards, s)
	}
	return c, nil
}

// Close closes all connections.
func (c *Client) Close() error {
	var errs []error
	for _, s := range c.shards {
		if err := s.conn.Close(); err != nil {
			errs = append(errs, fmt.Errorf("ps shard %d (%s): close: %w", s.index, s.addr, err))
		}
		if s.direct != nil {
			s.direct.Close()
		}
	}
	return errors.Join(errs...)
}

// NumShards is the number of PS shards.
func (c *Client) NumShards() int { return len(c.shards) }

// Version is the model version of the values this client holds: the
// highest shard version it last pulled (each shard counts its own
// updates), or -1 before the first pull.
func (c *Client) Version() int64 {
	v := int64(-1)
	for _, s := range c.shards {
		s.mu.Lock()
		v = max(v, s.version)
		s.mu.Unlock()
	}
	return v
}

// Versions returns, by shard, the version of the values this client holds
// (-1: unknown), to name what gradients are computed on (PushRequest).
func (c *Client) Versions() []int64 {
	out := make([]int64, len(c.shards))
	for i, s := range c.shards {
		s.mu.Lock()
		out[i] = s.version
		s.mu.Unlock()
	}
	return out
}

// each runs fn for every shard with parameters (every shard when
// includeEmpty), in parallel, and joins the errors.
func (c *Client) each(ctx context.Context, l *layout, includeEmpty bool, fn func(context.Context, *shardConn, []*nn.Param) error) error {
	return c.eachShard(func(i int) bool { return includeEmpty || len(l.groups[i]) > 0 },
		func(s *shardConn) error { return fn(ctx, s, l.groups[s.index]) })
}

// eachShard runs fn for the shards that want(index), in parallel (no
// goroutine for a single one), and joins the errors.
func (c *Client) eachShard(want func(int) bool, fn func(*shardConn) error) error {
	var work []*shardConn
	for _, s := range c.shards {
		if want(s.index) {
			work = append(work, s)
		}
	}
	if len(work) == 1 {
		return fn(work[0])
	}
	errs := make([]error, len(work))
	var wg sync.WaitGroup
	for i, s := range work {
		wg.Go(func() { errs[i] = fn(s) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// allShards is eachShard's want for calls that go to every shard.
func allShards(int) bool { return true }
