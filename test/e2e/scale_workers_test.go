package e2e

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"elasticdl/internal/ps"
	"elasticdl/proto/masterpb"
	"elasticdl/proto/pserverpb"
)

// ---- the workers that do not compute ----------------------------------------------------------

// scaleWorkerPool runs one protocol-only worker per Running worker pod.
type scaleWorkerPool struct {
	addr string
	ctx  context.Context

	phase     atomic.Int32 // 0 paced, 1 saturated
	saturated chan struct{}
	// pacedBudget caps the tasks taken in the paced phase, so that the job
	// cannot end before the relaunches are measured.
	pacedBudget int64
	fetched     atomic.Int64

	// ps is the in-process PS the workers record their minibatches on.
	ps *ps.Server

	mu sync.Mutex
	// Until open, pods going Running are only noted in held: the creation
	// burst is measured without the workers' load on the machine (here the
	// control plane, the master and the workers share the CPUs; in a
	// cluster the master has its own).
	open     bool
	held     []int
	cancels  map[int]context.CancelFunc
	lat      [2][]time.Duration // GetTask latency by phase
	waits    [2]int
	reported map[int64]int // task ID → successful reports
	// lastReport is when the last successful report returned.
	lastReport time.Time
	errs       map[string]int
	wg         sync.WaitGroup
}

func (p *scaleWorkerPool) start(id int) {
	p.mu.Lock()
	if !p.open {
		p.held = append(p.held, id)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	ctx, cancel := context.WithCancel(p.ctx)
	p.mu.Lock()
	if _, dup := p.cancels[id]; dup {
		p.mu.Unlock()
		cancel()
		return
	}
	p.cancels[id] = cancel
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer cancel()
		p.run(ctx, int32(id))
	}()
}

// release starts the workers of the pods that went Running so far, and
// from now on each one as its pod goes Running.
func (p *scaleWorkerPool) release() {
	p.mu.Lock()
	p.open = true
	held := p.held
	p.held = nil
	p.mu.Unlock()
	for _, id := range held {
		p.start(id)
	}
}

func (p *scaleWorkerPool) stop(id int) {
	p.mu.Lock()
	cancel := p.cancels[id]
	p.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

func (p *scaleWorkerPool) fail(what string, err error) {
	p.mu.Lock()
	p.errs[what+": "+status.Code(err).String()]++
	p.mu.Unlock()
}

// run is one worker: the loop of internal/worker without data, model or PS.
func (p *scaleWorkerPool) run(ctx context.Context, id int32) {
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		p.fail("dial", err)
		return
	}
	defer conn.Close()
	mc := masterpb.NewMasterClient(conn)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		tick := time.NewTicker(scaleHeartbeat)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			resp, err := mc.Heartbeat(ctx, &masterpb.HeartbeatRequest{WorkerId: id})
			if err != nil {
				if ctx.Err() == nil {
					p.fail("heartbeat", err)
				}
				continue
			}
			if resp.Stop {
				cancel()
				return
			}
		}
	}()
	sleep := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	for ctx.Err() == nil {
		phase := p.phase.Load()
		if phase == 0 && p.fetched.Load() >= p.pacedBudget {
			select {
			case <-ctx.Done():
				return
			case <-p.saturated:
			}
			continue
		}
		start := time.Now()
		resp, err := mc.GetTask(ctx, &masterpb.GetTaskRequest{WorkerId: id})
		took := time.Since(start)
		if err != nil {
			if ctx.Err() != nil || status.Code(err) == codes.NotFound {
				return // deleted, or the master gave up on us
			}
			p.fail("get task", err)
			if !sleep(100 * time.Millisecond) {
				return
			}
			continue
		}
		p.mu.Lock()
		p.lat[phase] = append(p.lat[phase], took)
		if resp.Action == masterpb.GetTaskResponse_WAIT {
			p.waits[phase]++
		}
		p.mu.Unlock()
		switch resp.Action {
		case masterpb.GetTaskResponse_DONE:
			return
		case masterpb.GetTaskResponse_WAIT:
			if !sleep(time.Duration(resp.WaitMs) * time.Millisecond) {
				return
			}
			continue
		}
		p.fetched.Add(1)
		if phase == 0 && !sleep(scaleTaskTime) {
			return // deleted while "computing": the master requeues the task
		}
		t := resp.Task
		records := t.Shard.End - t.Shard.Start
		for i := range int32((records + scaleMinibatch - 1) / scaleMinibatch) {
			if _, err := p.ps.PushGradients(ctx, &pserverpb.PushGradientsRequest{WorkerId: int32(id), Minibatch: &pserverpb.MinibatchKey{TaskId: t.Id, Index: i}}); err != nil {
				p.fail("record a minibatch on the PS", err)
			}
		}
		_, err = mc.ReportTaskResult(ctx, &masterpb.ReportTaskResultRequest{
			WorkerId: id, TaskId: t.Id, Records: records,
			Steps: (records + scaleMinibatch - 1) / scaleMinibatch,
		})
		if err != nil {
			if ctx.Err() != nil || status.Code(err) == codes.NotFound {
				return
			}
			p.fail("report", err)
			continue
		}
		p.mu.Lock()
		p.reported[t.Id]++
		p.lastReport = time.Now()
		p.mu.Unlock()
	}
}
