package collective

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// simulate runs one plan per member against in-memory links, in a random
// interleaving drawn from rng, and returns the members' buffers. Links are
// unbounded queues of floats (the stream); a send copies its segment at the
// moment it runs, so a plan that overwrites a region before sending it, or
// forwards a segment before it has arrived, produces a wrong result in some
// interleaving. It fails the test when the plans cannot all complete.
func simulate(t *testing.T, rng *rand.Rand, inputs [][]float32, plans []plan) [][]float32 {
	t.Helper()
	n := len(inputs)
	data := make([][]float32, n)
	for i := range inputs {
		data[i] = append([]float32(nil), inputs[i]...)
	}
	links := make([][]float32, n) // links[m]: from member m to member m+1
	sent := make([]int, n)        // sends completed per member
	recvd := make([]int, n)       // receives completed per member
	for {
		type move struct{ member, side int }
		var enabled []move
		for m := range n {
			p := plans[m]
			if s := sent[m]; s < len(p.sends) && p.sends[s].after < recvd[m] {
				enabled = append(enabled, move{m, 0})
			}
			prev := mod(m-1, n)
			if r := recvd[m]; r < len(p.recvs) && p.recvs[r].after < sent[m] &&
				len(links[prev]) >= p.recvs[r].hi-p.recvs[r].lo {
				enabled = append(enabled, move{m, 1})
			}
		}
		if len(enabled) == 0 {
			break
		}
		mv := enabled[rng.IntN(len(enabled))]
		m := mv.member
		if mv.side == 0 {
			x := plans[m].sends[sent[m]]
			links[m] = append(links[m], data[m][x.lo:x.hi]...)
			sent[m]++
			continue
		}
		x := plans[m].recvs[recvd[m]]
		prev := mod(m-1, n)
		seg := links[prev][:x.hi-x.lo]
		links[prev] = links[prev][x.hi-x.lo:]
		for i, v := range seg {
			if x.reduce {
				data[m][x.lo+i] += v
			} else {
				data[m][x.lo+i] = v
			}
		}
		recvd[m]++
	}
	for m := range n {
		if sent[m] != len(plans[m].sends) || recvd[m] != len(plans[m].recvs) || len(links[m]) != 0 {
			t.Fatalf("member %d stuck: %d/%d sends, %d/%d receives, %d floats left on its link",
				m, sent[m], len(plans[m].sends), recvd[m], len(plans[m].recvs), len(links[m]))
		}
	}
	return data
}

func TestAllReducePlanSimulated(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 6; n++ {
		for _, count := range []int{0, 1, 2, 3, 5, 7, 12, 25, 64} {
			for _, segs := range [][]int{{1}, {2}, {3}, {1000}, {1, 2, 3, 5, 8, 13}} {
				t.Run(fmt.Sprintf("n=%d/count=%d/seg=%v", n, count, segs), func(t *testing.T) {
					inputs := randomInputs(rng, n, count)
					want := ringOrderSum(inputs)
					plans := make([]plan, n)
					for r := range n {
						plans[r] = allReducePlan(r, n, count, segs[r%len(segs)])
					}
					for trial := range 4 {
						got := simulate(t, rng, inputs, plans)
						for r := range n {
							if i := firstBitDiff(got[r], want); i >= 0 {
								t.Fatalf("trial %d: member %d element %d = %v, want %v", trial, r, i, got[r][i], want[i])
							}
						}
					}
				})
			}
		}
	}
}

// Each member moves 2(n-1)/n of the buffer, rounded up to whole chunks:
// the ring is bandwidth-optimal for every n, 2 included.
func TestAllReducePlanVolume(t *testing.T) {
	for n := 2; n <= 6; n++ {
		for _, count := range []int{0, 1, 10, 1000, 1001} {
			chunk := (count + n - 1) / n
			for r := range n {
				p := allReducePlan(r, n, count, 7)
				for _, side := range [][]xfer{p.sends, p.recvs} {
					total := 0
					for _, x := range side {
						total += x.hi - x.lo
					}
					if limit := 2 * (n - 1) * chunk; total > limit {
						t.Errorf("n=%d count=%d rank %d moves %d floats one way, more than %d", n, count, r, total, limit)
					}
				}
			}
		}
	}
}

func TestBroadcastPlanSimulated(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for n := 1; n <= 5; n++ {
		for _, count := range []int{0, 1, 4, 9, 50} {
			for root := range n {
				inputs := randomInputs(rng, n, count)
				plans := make([]plan, n)
				for r := range n {
					plans[r] = broadcastPlan(r, n, root, count, 1+r%3)
				}
				got := simulate(t, rng, inputs, plans)
				for r := range n {
					if i := firstBitDiff(got[r], inputs[root]); i >= 0 {
						t.Fatalf("n=%d count=%d root=%d: member %d element %d = %v, want %v", n, count, root, r, i, got[r][i], inputs[root][i])
					}
				}
			}
		}
	}
}

func TestSpan(t *testing.T) {
	for _, c := range []struct{ count, parts int }{{0, 1}, {0, 3}, {1, 3}, {10, 3}, {11, 4}, {12, 4}} {
		next := 0
		for i := range c.parts {
			lo, hi := span(c.count, c.parts, i)
			if lo != next || hi < lo || hi-lo > (c.count+c.parts-1)/c.parts || hi-lo < c.count/c.parts {
				t.Errorf("span(%d, %d, %d) = [%d, %d), after %d", c.count, c.parts, i, lo, hi, next)
			}
			next = hi
		}
		if next != c.count {
			t.Errorf("span(%d, %d, ·) covers %d elements", c.count, c.parts, next)
		}
	}
}
