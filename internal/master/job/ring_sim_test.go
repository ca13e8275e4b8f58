package job

import (
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"slices"
	"testing"
	"time"

	"elasticdl/internal/cluster"
)

// TestRingRendezvousRandomized drives the rendezvous with random worker
// behaviour — joins, status polls and re-joins, reported breaks, kills
// (relaunched), freezes and thaws, time passing — and checks after every
// event: versions never go back; a formed ring's members are distinct, in
// worker order, and alive; a ring forms only with a member of the last
// one while any of those is alive; and once the workers that are not
// frozen keep checking in, a ring forms within the grace.
func TestRingRendezvousRandomized(t *testing.T) {
	if underRace && os.Getenv("ELASTICDL_SIMS_UNDER_RACE") == "" {
		// One goroutine drives a pure state machine: the race detector has
		// nothing to find, and makes the run 10-20× slower. hack/test.sh
		// runs the simulations without it.
		t.Skip("a single-goroutine simulation: run without -race (hack/test.sh does)")
	}
	for seed := int64(0); seed < 2000; seed++ {
		if err := ringSim(seed); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

func ringSim(seed int64) error {
	rng := rand.New(rand.NewSource(seed))
	workers := 1 + rng.Intn(5)
	cfg := testConfig()
	cfg.AllReduce, cfg.NumPS, cfg.NumWorkers, cfg.RingGrace = true, 0, workers, 3*time.Second
	cfg.HeartbeatTimeout, cfg.Policy.MaxTotalWorkerRelaunches = time.Hour, 1<<20
	j, err := New(cfg)
	if err != nil {
		return err
	}
	now := time.Unix(0, 0)
	alive := map[int]bool{}                             // processes that exist
	frozen := map[int]bool{}                            // processes that do nothing
	version := map[int]int64{}                          // the ring version each worker is in (0: none)
	restarts := rand.New(rand.NewSource(seed ^ 0x5eed)) // master failovers between events
	talked := false                                     // a worker's request was taken
	step := func(ev Event) (Reply, error) {
		if restarts.Intn(20) == 0 {
			n, _, err := resumeThroughJSON(cfg, j)
			if err != nil {
				panic(fmt.Sprintf("seed %d: %v", seed, err)) // not a refused request: fail loudly
			}
			j = n
			var have []cluster.Event
			for _, w := range slices.Sorted(maps.Keys(alive)) {
				if alive[w] {
					have = append(have, cluster.Event{Role: cluster.Worker, ID: w, Phase: cluster.Running})
				}
			}
			j.Step(now, Resumed{Instances: have})
			for _, l := range j.Ready().Launch {
				alive[l.ID] = true
			}
		}
		r, err := j.Step(now, ev)
		for _, l := range j.Ready().Launch {
			alive[l.ID] = true
		}
		switch ev.(type) {
		case RingStatus, JoinRing, RingBroken:
			talked = talked || err == nil
		}
		return r, err
	}
	step(Start{})
	var lastVersion int64
	var prev []RingMember
	check := func() error {
		r := j.currentRing()
		if r.Version < lastVersion {
			return fmt.Errorf("version %d after %d", r.Version, lastVersion)
		}
		lastVersion = r.Version
		if r.Members == nil {
			return nil
		}
		ids := make([]int, len(r.Members))
		for i, m := range r.Members {
			ids[i] = m.Worker
			if _, ok := j.workers[m.Worker]; !ok {
				return fmt.Errorf("ring v%d has worker %d, which is gone", r.Version, m.Worker)
			}
		}
		if !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
			return fmt.Errorf("ring v%d members %v", r.Version, ids)
		}
		if prev != nil && !slices.Equal(prev, r.Members) {
			holder, prevAlive := false, false
			for _, p := range prev {
				_, ok := j.workers[p.Worker]
				prevAlive = prevAlive || ok
				holder = holder || slices.ContainsFunc(r.Members, func(m RingMember) bool { return m.Worker == p.Worker })
			}
			if prevAlive && !holder {
				return fmt.Errorf("ring v%d %v formed without any of the last ring %v, some alive", r.Version, ids, prev)
			}
		}
		prev = slices.Clone(r.Members)
		return nil
	}
	act := func(w int) error {
		if !alive[w] || frozen[w] {
			return nil
		}
		st, err := step(RingStatus{Worker: w})
		if err != nil {
			return fmt.Errorf("status of %d: %w", w, err)
		}
		if version[w] != 0 && st.Ring.Version == version[w] && st.Ring.Members != nil {
			if rng.Intn(20) == 0 {
				step(RingBroken{Worker: w, Version: version[w], Err: "peer gone"})
				version[w] = 0
			}
			return nil
		}
		r, err := step(JoinRing{Worker: w, Addr: fmt.Sprintf("a%d", w)})
		if err != nil {
			return fmt.Errorf("join of %d: %w", w, err)
		}
		version[w] = 0
		if r.Ring != nil && r.Ring.Members != nil {
			version[w] = r.Ring.Version
		}
		return nil
	}
	for n := 0; n < 400; n++ {
		ids := make([]int, 0, len(alive))
		for w := range alive {
			ids = append(ids, w)
		}
		slices.Sort(ids)
		if len(ids) == 0 {
			break
		}
		w := ids[rng.Intn(len(ids))]
		switch r := rng.Intn(100); {
		case r < 70:
			if err := act(w); err != nil {
				return err
			}
		case r < 75:
			delete(alive, w)
			delete(frozen, w)
			step(Instance{cluster.Event{Role: cluster.Worker, ID: w, Phase: cluster.Exited, ExitCode: -1, Reason: cluster.Killed}})
		case r < 80:
			frozen[w] = !frozen[w]
		default:
			now = now.Add(time.Duration(rng.Intn(2000)) * time.Millisecond)
			step(Tick{})
		}
		if err := check(); err != nil {
			return err
		}
		if j.Phase() == Failed {
			if errors.Is(j.Err(), ErrNoWorkerReached) && !talked {
				return nil // the first workers all died before any talked: failing is right
			}
			return fmt.Errorf("job failed: %v", j.Err())
		}
	}
	// Liveness: thaw everyone; the workers check in until a ring forms.
	clear(frozen)
	for round := 0; round < 20; round++ {
		for w := range alive {
			if err := act(w); err != nil {
				return err
			}
		}
		if err := check(); err != nil {
			return err
		}
		if r := j.currentRing(); r.Members != nil && len(r.Members) == len(alive) {
			return nil
		}
		now = now.Add(time.Second)
		step(Tick{})
	}
	return fmt.Errorf("no ring of the %d live workers formed: %s", len(alive), ringOf(j.currentRing()))
}
