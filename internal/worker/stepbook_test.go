package worker

import (
	"testing"

	"elasticdl/data"
	"elasticdl/proto/masterpb"
)

func bookTask(id int64, records, done int64) *ringTask {
	return &ringTask{t: &masterpb.Task{Id: id, Done: done}, batch: &data.Batch{N: int(records)},
		next: done, confirmed: done, report: &masterpb.ReportTaskResultRequest{TaskId: id}}
}

// A task's records go into steps, are counted once their steps are
// confirmed, and the task leaves the book when all are.
func TestStepBookConfirm(t *testing.T) {
	var b stepBook
	rt := bookTask(1, 10, 0)
	b.add(rt)
	for step, want := range [][2]int64{{0, 4}, {4, 8}, {8, 10}} {
		if b.pending() != rt {
			t.Fatalf("step %d: no pending task", step+1)
		}
		if s, e := b.take(rt, 4, int64(step+1)); s != want[0] || e != want[1] {
			t.Fatalf("step %d took [%d,%d), want %v", step+1, s, e, want)
		}
		b.setLoss(float64(step + 1))
	}
	if b.pending() != nil {
		t.Fatal("all records taken, yet a task is pending")
	}
	if done := b.confirm(1); len(done) != 0 || rt.confirmed != 4 || rt.report.Records != 4 || rt.report.Steps != 1 || rt.report.LossSum != 1 {
		t.Fatalf("after confirming step 1: done %v, task %+v, report %+v", done, rt, rt.report)
	}
	if done := b.confirm(3); len(done) != 1 || done[0] != rt || !b.empty() {
		t.Fatalf("after confirming step 3: done %v, book %+v", done, b)
	}
	if rt.report.Records != 10 || rt.report.Steps != 3 || rt.report.LossSum != 6 {
		t.Fatalf("report %+v", rt.report)
	}
}

// When a ring re-forms, the records the agreed state holds count as
// confirmed by it; the others go back to their task, in order.
// TestStepBookNoTailOfOne: shares by rate cut tasks anywhere, and a last
// record alone would be a step BatchNorm cannot train; it goes with the
// step before (python/tests/test_ringbook.py: test_no_tail_of_one_record).
func TestStepBookNoTailOfOne(t *testing.T) {
	for _, c := range []struct {
		n, wantEnd int64
	}{{4, 4}, {5, 6}, {6, 6}, {8, 6}} {
		b, rt := &stepBook{}, bookTask(1, 6, 0)
		if s, e := b.take(rt, c.n, 1); s != 0 || e != c.wantEnd {
			t.Errorf("take(%d) of 6 = [%d,%d), want [0,%d)", c.n, s, e, c.wantEnd)
		}
	}
}

func TestStepBookSettle(t *testing.T) {
	for _, tc := range []struct {
		name      string
		heldUpTo  int64 // steps the agreed state holds
		confirmed int64 // of the task, after settling
		next      int64
	}{
		{"state holds every step", 7, 10, 10},
		{"state lacks the last step", 6, 8, 8},
		{"state holds none", 4, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b stepBook
			rt := bookTask(3, 10, 2) // 2 records done by an earlier holder
			b.add(rt)
			b.take(rt, 3, 5) // [2,5)
			b.take(rt, 3, 6) // [5,8)
			b.take(rt, 3, 7) // [8,10)
			b.settle(func(r stepRecord) bool { return r.step <= tc.heldUpTo })
			b.confirm(0)
			if rt.confirmed != tc.confirmed || rt.next != tc.next {
				t.Fatalf("confirmed %d, next %d; want %d, %d", rt.confirmed, rt.next, tc.confirmed, tc.next)
			}
			if got := rt.report.Records; got != tc.confirmed-2 {
				t.Fatalf("report counts %d records, want %d", got, tc.confirmed-2)
			}
			if tc.next < 10 {
				if s, e := b.take(rt, 8, 8); s != tc.next || e != 10 {
					t.Fatalf("redo took [%d,%d), want [%d,10)", s, e, tc.next)
				}
			}
		})
	}
}

// A member holding two tasks fetches no third; a reset forgets all.
func TestStepBookBusyAndReset(t *testing.T) {
	var b stepBook
	a, c := bookTask(1, 4, 0), bookTask(2, 4, 0)
	b.add(a)
	b.take(a, 4, 1)
	if b.busy() || b.pending() != nil {
		t.Fatal("one task, all taken: not busy, nothing pending")
	}
	b.add(c)
	if !b.busy() || b.pending() != c {
		t.Fatal("two tasks: busy, the second pending")
	}
	b.reset()
	if !b.empty() || b.pending() != nil || len(b.confirm(100)) != 0 {
		t.Fatal("reset left something")
	}
}
