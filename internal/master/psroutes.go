package master

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"elasticdl/internal/master/job"
	"elasticdl/internal/rpc"
	"elasticdl/internal/tlsid"
	"elasticdl/proto/pserverpb"
)

// psRoutes is where the job's PS shards are: the endpoints of every shard
// index resolved so far (they are stable: a relaunched shard serves at the
// same address), and how many shards the current layout has. A re-shard
// changes the count; workers learn it with their next task.
type psRoutes struct {
	mu           sync.Mutex
	dial, listen []string // by shard index
	n            int
	layout       int64
}

// resolvePS makes sure the endpoints of shards 0..n-1 are known.
func (m *Master) resolvePS(n int) error {
	r := &m.routes.ps
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.dial); i < n; i++ {
		addr, err := m.backend.PSAddress(i)
		if err != nil {
			return fmt.Errorf("address of PS %d: %w", i, err)
		}
		r.dial, r.listen = append(r.dial, addr.Dial), append(r.listen, addr.Listen)
	}
	return nil
}

// setPSLayout makes the current layout n shards, numbered layout.
func (m *Master) setPSLayout(n int, layout int64) error {
	if err := m.resolvePS(n); err != nil {
		return err
	}
	m.routes.ps.mu.Lock()
	m.routes.ps.n, m.routes.ps.layout = n, layout
	m.routes.ps.mu.Unlock()
	return nil
}

// psAddrs are the dial addresses of the current layout's shards, and its
// number.
func (m *Master) psAddrs() ([]string, int64) {
	m.routes.ps.mu.Lock()
	defer m.routes.ps.mu.Unlock()
	return slices.Clone(m.routes.ps.dial[:m.routes.ps.n]), m.routes.ps.layout
}

// psListen is where shard index binds; resolved by resolvePS.
func (m *Master) psListen(index int) string {
	m.routes.ps.mu.Lock()
	defer m.routes.ps.mu.Unlock()
	if index < len(m.routes.ps.listen) {
		return m.routes.ps.listen[index]
	}
	return ""
}

// reshardTimeout bounds one try of staging and committing a layout.
const reshardTimeout = 2 * time.Minute

// reshardPS moves the shards to the layout r asks for and steps the
// outcome: every shard of the new layout stages its part, gathered from
// every shard of the current one; then each commits. A staging failure
// changes nothing. A shard that has the layout already (a master that took
// over mid-commit asks again) counts as committed.
func (m *Master) reshardPS(ctx context.Context, r job.Reshard) {
	done := job.ReshardDone{Layout: r.Layout}
	start := time.Now()
	done.Committed, done.Err = m.moveShards(ctx, r)
	if ctx.Err() != nil {
		return // the master is stopping; a new one asks again
	}
	if done.Err == nil {
		if err := m.setPSLayout(r.To, r.Layout); err != nil {
			done.Err, done.Committed = err, true
		}
	}
	m.log.Info("re-shard of the PS", "from", r.From, "to", r.To, "layout", r.Layout, "took", time.Since(start).Round(time.Millisecond), "err", done.Err)
	m.step(ctx, done)
}

func (m *Master) moveShards(ctx context.Context, r job.Reshard) (committed bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, reshardTimeout)
	defer cancel()
	if err := m.resolvePS(max(r.From, r.To)); err != nil {
		return false, err
	}
	m.routes.ps.mu.Lock()
	sources := slices.Clone(m.routes.ps.dial[:r.From])
	targets := slices.Clone(m.routes.ps.dial[:r.To])
	m.routes.ps.mu.Unlock()
	conns := make([]pserverpb.PserverClient, len(targets))
	for i, addr := range targets {
		conn, err := grpc.NewClient(addr, rpc.DialOptions(m.routes.tls.Creds(), tlsid.PS)...)
		if err != nil {
			return false, fmt.Errorf("PS %d (%s): %w", i, addr, err)
		}
		defer conn.Close()
		conns[i] = pserverpb.NewPserverClient(conn)
	}
	// Stage, in parallel: each shard gathers from all the sources.
	errs := make([]error, len(conns))
	already := make([]bool, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A new shard's process may not listen yet: wait for it (bounded
			// by reshardTimeout) rather than fail.
			_, err := c.Reshard(ctx, &pserverpb.ReshardRequest{Layout: r.Layout, NumShards: int32(r.To), Sources: sources}, grpc.WaitForReady(true))
			if status.Code(err) == codes.AlreadyExists {
				already[i], err = true, nil
			}
			if err != nil {
				errs[i] = fmt.Errorf("stage layout %d on PS %d: %w", r.Layout, i, err)
			}
		}()
	}
	wg.Wait()
	committed = slices.Contains(already, true)
	if err := errors.Join(errs...); err != nil {
		return committed, err
	}
	// Commit: past this point the old layout is gone on some shard.
	for i, c := range conns {
		if already[i] {
			continue
		}
		if _, err := c.CommitReshard(ctx, &pserverpb.CommitReshardRequest{Layout: r.Layout}); err != nil {
			return committed, fmt.Errorf("commit layout %d on PS %d: %w", r.Layout, i, err)
		}
		committed = true
	}
	return true, nil
}
