package bench

import (
	"context"
	"math/rand"
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

// scaleSimWorkers are the simulated workers and what they measured.
type scaleSimWorkers struct {
	addr  string
	ps    *ps.Server
	phase atomic.Int32 // 0 paced, 1 saturated
	// saturated is closed when the saturated phase starts; paced workers
	// that used up the paced budget wait for it.
	saturated   chan struct{}
	pacedBudget int64
	fetched     atomic.Int64
	reportedN   [2]atomic.Int64
	release     chan struct{} // closed once every worker is launched
	lastReport  atomic.Int64  // unix ns of the last report accepted
	origin      time.Time     // when release was closed
	exited      func(id, index int)

	mu       sync.Mutex
	wg       sync.WaitGroup
	res      masterScaleResult
	reported map[int64]int
	errs     map[string]int
}

func (p *scaleSimWorkers) fail(what string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.errs[what+": "+status.Code(err).String()]++
}

// run is one worker: the loop of internal/worker without data or model.
func (p *scaleSimWorkers) run(ctx context.Context, id int32, index int, rng *rand.Rand) {
	defer p.wg.Done()
	var lat [2]masterScalePhase
	reported := map[int64]int{}
	done := false
	defer func() {
		p.mu.Lock()
		for ph := range lat {
			r := &p.res.phases[ph]
			r.get = append(r.get, lat[ph].get...)
			r.report = append(r.report, lat[ph].report...)
			r.heartbeat = append(r.heartbeat, lat[ph].heartbeat...)
			for sec, n := range lat[ph].slow {
				if r.slow == nil {
					r.slow = map[int]int{}
				}
				r.slow[sec] += n
			}
		}
		for t, n := range reported {
			p.reported[t] += n
		}
		p.mu.Unlock()
		if done {
			p.exited(int(id), index) // told DONE: the process exits
		}
	}()
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		p.fail("dial", err)
		return
	}
	defer conn.Close()
	mc := masterpb.NewMasterClient(conn)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sleep := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	select {
	case <-p.release:
	case <-ctx.Done():
		return
	}
	// Workers come up over a second, as processes do.
	if !sleep(time.Duration(rng.Int63n(int64(time.Second)))) {
		return
	}
	var hbMu sync.Mutex
	var hbLat [2][]time.Duration
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		tick := time.NewTicker(msHeartbeat)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			ph := p.phase.Load()
			start := time.Now()
			resp, err := mc.Heartbeat(ctx, &masterpb.HeartbeatRequest{WorkerId: id})
			if err != nil {
				if ctx.Err() == nil {
					p.fail("heartbeat", err)
				}
				continue
			}
			hbMu.Lock()
			hbLat[ph] = append(hbLat[ph], time.Since(start))
			hbMu.Unlock()
			if resp.Stop {
				cancel()
				return
			}
		}
	}()
	defer func() {
		cancel()
		<-hbDone
		for ph := range hbLat {
			lat[ph].heartbeat = hbLat[ph]
		}
	}()
	for ctx.Err() == nil {
		ph := p.phase.Load()
		if ph == 0 && p.fetched.Load() >= p.pacedBudget {
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
				return
			}
			p.fail("get task", err)
			if !sleep(100 * time.Millisecond) {
				return
			}
			continue
		}
		lat[ph].get = append(lat[ph].get, took)
		lat[ph].noteSlow(p.origin, start, took)
		switch resp.Action {
		case masterpb.GetTaskResponse_DONE:
			done = true
			return
		case masterpb.GetTaskResponse_WAIT:
			if !sleep(time.Duration(resp.WaitMs) * time.Millisecond) {
				return
			}
			continue
		}
		p.fetched.Add(1)
		if ph == 0 && !sleep(500*time.Millisecond+time.Duration(rng.Int63n(int64(time.Second)))) {
			return
		}
		t := resp.Task
		records := t.Shard.End - t.Shard.Start
		steps := (records + msMinibatch - 1) / msMinibatch
		for i := range int32(steps) {
			if _, err := p.ps.PushGradients(ctx, &pserverpb.PushGradientsRequest{WorkerId: id, Minibatch: &pserverpb.MinibatchKey{TaskId: t.Id, Index: i}}); err != nil {
				p.fail("record a minibatch on the PS", err)
			}
		}
		ph = p.phase.Load()
		start = time.Now()
		_, err = mc.ReportTaskResult(ctx, &masterpb.ReportTaskResultRequest{WorkerId: id, TaskId: t.Id, Records: records, Steps: steps})
		took = time.Since(start)
		if err != nil {
			if ctx.Err() != nil || status.Code(err) == codes.NotFound {
				return
			}
			p.fail("report", err)
			continue
		}
		lat[ph].report = append(lat[ph].report, took)
		lat[ph].noteSlow(p.origin, start, took)
		reported[t.Id]++
		p.reportedN[ph].Add(1)
		p.lastReport.Store(time.Now().UnixNano())
	}
}
