package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"elasticdl/internal/ps"
	"elasticdl/internal/ps/client"
	"elasticdl/internal/ps/optimizer"
	"elasticdl/model"
	"elasticdl/model/zoo"
)

// The clients' process and the benchmark speak in lines: to the clients
// "start ID INDEX", "stop ID", "release" (every worker launched), "end"
// (the job is over); from them, prefixed with msLine, "ps ADDR" (where
// their PS serves), "exited ID INDEX" (a worker told DONE ends) and
// "result JSON" (msClientResult, after "end").
const (
	msLine       = "MSCALE "
	msClientsEnv = "ELASTICDL_MASTER_SCALE_CLIENTS" // the master's address
)

// msClientResult is what the clients measured.
type msClientResult struct {
	Phases [2]struct {
		Get, Report, Heartbeat []time.Duration
		Slow                   map[int]int
		Tasks                  int64
		Took                   time.Duration
	}
	Reported map[int64]int
	Errs     map[string]int
}

// TestMasterScaleClients is BenchmarkMasterScale's workers (and PS), in a
// process of their own; it does nothing unless the benchmark runs it.
func TestMasterScaleClients(t *testing.T) {
	addr := os.Getenv(msClientsEnv)
	if addr == "" {
		t.Skip("run by BenchmarkMasterScale")
	}
	if err := masterScaleClients(addr, os.Stdin, os.Stdout); err != nil {
		t.Fatal(err)
	}
}

func masterScaleClients(addr string, in io.Reader, out io.Writer) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(out, msLine+format+"\n", args...)
	}
	// The PS, holding the model's initial parameters (the first worker
	// would push them): the master asks it what it holds and saves the
	// model from it.
	reg := model.NewRegistry()
	if err := zoo.Register(reg); err != nil {
		return err
	}
	spec, err := reg.Lookup("fashion_mnist.mlp")
	if err != nil {
		return err
	}
	opt, err := optimizer.Parse(spec.Optimizer)
	if err != nil {
		return err
	}
	psSrv, err := ps.NewServer(ps.Config{Index: 0, NumPS: 1, Optimizer: opt})
	if err != nil {
		return err
	}
	defer psSrv.Close()
	psLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	psGRPC := grpc.NewServer()
	psSrv.Register(psGRPC)
	go psGRPC.Serve(psLis)
	defer psGRPC.Stop()
	pc, err := client.Dial(ctx, []string{psLis.Addr().String()})
	if err != nil {
		return err
	}
	if err := pc.PushModel(ctx, spec.Build(rand.New(rand.NewSource(1))).Params()); err != nil {
		return err
	}
	pc.Close()

	pool := &scaleSimWorkers{
		addr: addr, ps: psSrv, saturated: make(chan struct{}), release: make(chan struct{}),
		reported: map[int64]int{}, errs: map[string]int{},
	}
	pool.exited = func(id, index int) { say("exited %d %d", id, index) }
	stops := map[int]context.CancelFunc{}
	var seed int64
	say("ps %s", psLis.Addr())
	sc := bufio.NewScanner(in)
	var pacedStart, pacedEnd time.Time
	pacedDone := make(chan struct{})
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "start":
			id, _ := strconv.Atoi(f[1])
			index, _ := strconv.Atoi(f[2])
			wctx, stop := context.WithCancel(ctx)
			stops[id] = stop
			seed++
			pool.wg.Add(1)
			go pool.run(wctx, int32(id), index, rand.New(rand.NewSource(seed)))
		case "stop":
			id, _ := strconv.Atoi(f[1])
			if stop := stops[id]; stop != nil {
				stop()
			}
		case "release":
			pool.pacedBudget = int64(len(stops) * msPacedPerW)
			pacedStart = time.Now()
			pool.origin = pacedStart
			close(pool.release)
			go func() {
				// Paced until the budget is fetched and reported (or 5 s after).
				defer close(pacedDone)
				var budgetAt time.Time
				for {
					if pool.fetched.Load() >= pool.pacedBudget && budgetAt.IsZero() {
						budgetAt = time.Now()
					}
					if !budgetAt.IsZero() && (pool.reportedN[0].Load() >= pool.pacedBudget || time.Since(budgetAt) > 5*time.Second) {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				pacedEnd = time.Now()
				pool.phase.Store(1)
				close(pool.saturated)
			}()
		case "end":
			cancel()
			pool.wg.Wait()
			if pacedStart.IsZero() {
				return errors.New("ended before the workers were released")
			}
			<-pacedDone
			var res msClientResult
			for ph := range res.Phases {
				r, o := &pool.res.phases[ph], &res.Phases[ph]
				o.Get, o.Report, o.Heartbeat, o.Slow = r.get, r.report, r.heartbeat, r.slow
				o.Tasks = pool.reportedN[ph].Load()
			}
			res.Phases[0].Took = pacedEnd.Sub(pacedStart)
			res.Phases[1].Took = time.Unix(0, pool.lastReport.Load()).Sub(pacedEnd)
			res.Reported, res.Errs = pool.reported, pool.errs
			b, err := json.Marshal(res)
			if err != nil {
				return err
			}
			say("result %s", b)
			return nil
		}
	}
	return fmt.Errorf("the benchmark went away: %v", sc.Err())
}

// msClients is the clients' process, seen from the benchmark.
type msClients struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	in     io.WriteCloser
	psAddr chan string
	result chan msClientResult
	exited func(id, index int)
}

func (c *msClients) send(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(c.in, format+"\n", args...)
}

func startMSClients(b *testing.B, masterAddr string, exited func(id, index int)) *msClients {
	cmd := exec.Command(os.Args[0], "-test.run=^TestMasterScaleClients$", "-test.count=1")
	cmd.Env = append(os.Environ(), msClientsEnv+"="+masterAddr)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	c := &msClients{cmd: cmd, in: in, psAddr: make(chan string, 1), result: make(chan msClientResult, 1), exited: exited}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<30)
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), msLine)
			if !ok {
				continue
			}
			kind, rest, _ := strings.Cut(line, " ")
			switch kind {
			case "ps":
				c.psAddr <- rest
			case "exited":
				f := strings.Fields(rest)
				id, _ := strconv.Atoi(f[0])
				index, _ := strconv.Atoi(f[1])
				c.exited(id, index)
			case "result":
				var r msClientResult
				if err := json.Unmarshal([]byte(rest), &r); err != nil {
					b.Errorf("clients' result: %v", err)
				}
				c.result <- r
			}
		}
		close(c.result)
	}()
	return c
}
