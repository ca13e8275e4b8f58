package task

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestWorkerLostRequeuesFirst(t *testing.T) {
	cfg := baseConfig()
	cfg.Training = []Shard{{"a", 100}}
	d := mustNew(t, cfg)
	var lostHeld []Task
	for i := 0; i < 3; i++ {
		lostHeld = append(lostHeld, mustGet(t, d, 1, t0))
	}
	other := mustGet(t, d, 2, t0)
	if got := d.Held(1); !reflect.DeepEqual(got, lostHeld) {
		t.Fatalf("Held(1) = %v, want %v", got, lostHeld)
	}
	back := d.WorkerLost(1, t0)
	if !reflect.DeepEqual(back, lostHeld) {
		t.Fatalf("WorkerLost returned %v, want %v", back, lostHeld)
	}
	if len(d.Held(1)) != 0 {
		t.Fatalf("worker 1 still holds %v", d.Held(1))
	}
	p := d.Progress()
	if p.Requeues != 3 || p.Failures != 0 || p.TasksDoing != 1 {
		t.Fatalf("progress after loss: %+v", p)
	}
	for _, want := range lostHeld {
		got := mustGet(t, d, 3, t0)
		if got.ID != want.ID || got.Attempt != 0 {
			t.Fatalf("after loss got %v, want %v with Attempt 0 (deaths do not count as failures)", got, want)
		}
	}
	if next := mustGet(t, d, 3, t0); next.Start != 40 || next.ID == other.ID {
		t.Fatalf("after the requeued tasks got %v, want the fresh task [40,50)", next)
	}
	if got := d.WorkerLost(99, t0); len(got) != 0 {
		t.Fatalf("WorkerLost(unknown) = %v, want none", got)
	}
}

func TestTickTimeout(t *testing.T) {
	tests := []struct {
		name    string
		timeout time.Duration
		age     time.Duration
		want    bool // requeued
	}{
		{"young", 10 * time.Second, 5 * time.Second, false},
		{"exactly timeout", 10 * time.Second, 10 * time.Second, false},
		{"just older", 10 * time.Second, 10*time.Second + time.Nanosecond, true},
		{"much older", 10 * time.Second, time.Hour, true},
		{"no timeout", 0, 1000 * time.Hour, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := baseConfig()
			cfg.TaskTimeout = tc.timeout
			d := mustNew(t, cfg)
			held := mustGet(t, d, 1, t0)
			fresh := mustGet(t, d, 2, t0.Add(tc.age)) // got at tick time: never expires
			back := d.Tick(t0.Add(tc.age))
			if !tc.want {
				if len(back) != 0 || d.Progress().Requeues != 0 {
					t.Fatalf("Tick requeued %v", back)
				}
				return
			}
			if len(back) != 1 || back[0].ID != held.ID {
				t.Fatalf("Tick = %v, want [%v]", back, held)
			}
			if st, _ := d.TaskState(fresh.ID); st != Doing {
				t.Fatalf("fresh task state %v, want doing", st)
			}
			if got := mustGet(t, d, 3, t0.Add(tc.age)); got.ID != held.ID || got.Attempt != 0 {
				t.Fatalf("next Get = %v, want timed-out %v at attempt 0", got, held)
			}
			if p := d.Progress(); p.Requeues != 1 || p.Failures != 0 {
				t.Fatalf("progress %+v", p)
			}
			// The timed-out worker's report is now rejected.
			if err := d.Report(1, held.ID, ok(held), t0.Add(tc.age)); !errors.Is(err, ErrNotOwner) {
				t.Fatalf("late report err = %v, want ErrNotOwner", err)
			}
		})
	}
}

func TestPoisonTaskRequeueCap(t *testing.T) {
	tests := []struct {
		name        string
		maxRequeues int
		wantCap     int
		viaTimeout  bool
	}{
		{"default cap via worker loss", 0, 20, false},
		{"explicit cap via worker loss", 3, 3, false},
		{"explicit cap via timeout", 4, 4, true},
		{"cap of one", 1, 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := baseConfig()
			cfg.MaxAttempts = 2
			cfg.MaxRequeues = tc.maxRequeues
			cfg.TaskTimeout = time.Minute
			d := mustNew(t, cfg)
			now := t0
			var poison Task
			for i := 1; i <= tc.wantCap; i++ {
				worker := i
				task := mustGet(t, d, worker, now)
				if i == 1 {
					poison = task
				} else if task.ID != poison.ID {
					t.Fatalf("requeue %d: got %v, want the poison task back first", i, task)
				}
				var back []Task
				if tc.viaTimeout {
					now = now.Add(2 * time.Minute)
					back = d.Tick(now)
				} else {
					back = d.WorkerLost(worker, now)
				}
				if i < tc.wantCap {
					if d.Err() != nil || len(back) != 1 {
						t.Fatalf("after %d requeues: Err=%v back=%v", i, d.Err(), back)
					}
					continue
				}
				if len(back) != 0 {
					t.Fatalf("capped task returned to todo: %v", back)
				}
			}
			err := d.Err()
			var fe *FailedError
			if !errors.As(err, &fe) || fe.Task.ID != poison.ID || fe.Requeues != tc.wantCap || fe.Failures != 0 {
				t.Fatalf("Err = %v (%+v), want poison task after %d requeues", err, fe, tc.wantCap)
			}
			if !strings.Contains(err.Error(), "taken back from workers") {
				t.Errorf("Err %q does not explain the requeue cap", err)
			}
			if p := d.Progress(); p.Requeues != int64(tc.wantCap) || p.Failures != 0 {
				t.Errorf("progress %+v", p)
			}
		})
	}
}
