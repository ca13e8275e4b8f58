package task

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestNewValidation(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr string // "" = valid
	}{
		{"valid", func(*Config) {}, ""},
		{"no shards", func(c *Config) { c.Training = nil }, "no shards"},
		{"zero records", func(c *Config) { c.Training = []Shard{{"a", 0}} }, "0 records"},
		{"negative records", func(c *Config) { c.Training = []Shard{{"a", -5}} }, "-5 records"},
		{"unnamed shard", func(c *Config) { c.Training = []Shard{{"", 5}} }, "no name"},
		{"duplicate shard", func(c *Config) { c.Training = []Shard{{"a", 5}, {"a", 6}} }, "duplicate"},
		{"zero records per task", func(c *Config) { c.RecordsPerTask = 0 }, "RecordsPerTask"},
		{"negative records per task", func(c *Config) { c.RecordsPerTask = -1 }, "RecordsPerTask"},
		{"zero epochs with training shards", func(c *Config) { c.NumEpochs = 0 }, "NumEpochs is 0"},
		{"zero epochs, no training", func(c *Config) { c.NumEpochs = 0; c.Training = nil }, ""},
		{"negative epochs", func(c *Config) { c.NumEpochs = -1; c.Training = nil }, "NumEpochs"},
		{"zero attempts", func(c *Config) { c.MaxAttempts = 0 }, "MaxAttempts"},
		{"negative requeues", func(c *Config) { c.MaxRequeues = -1 }, "MaxRequeues"},
		{"negative timeout", func(c *Config) { c.TaskTimeout = -time.Second }, "TaskTimeout"},
		{"one record per task", func(c *Config) { c.RecordsPerTask = 1 }, ""},
		{"task bigger than shards", func(c *Config) { c.RecordsPerTask = 1000 }, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := baseConfig()
			tc.mod(&cfg)
			d, err := New(cfg)
			if tc.wantErr == "" {
				if err != nil || d == nil {
					t.Fatalf("New = %v, %v; want valid", d, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("New error = %v, want containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestNewCopiesShards(t *testing.T) {
	cfg := baseConfig()
	d := mustNew(t, cfg)
	cfg.Training[0].Records = 1000 // caller reuses its slice
	if got := d.Progress().EpochRecordsTotal; got != 35 {
		t.Fatalf("EpochRecordsTotal = %d after caller mutated its config, want 35", got)
	}
}

type rng struct {
	shard      string
	start, end int64
}

func TestTaskCutting(t *testing.T) {
	tests := []struct {
		name   string
		shards []Shard
		per    int64
		want   []rng
	}{
		{"exact multiple", []Shard{{"a", 20}}, 10, []rng{{"a", 0, 10}, {"a", 10, 20}}},
		{"last shorter", []Shard{{"a", 25}}, 10, []rng{{"a", 0, 10}, {"a", 10, 20}, {"a", 20, 25}}},
		{"shard smaller than task", []Shard{{"a", 3}, {"b", 4}}, 10, []rng{{"a", 0, 3}, {"b", 0, 4}}},
		{"one record per task", []Shard{{"a", 3}}, 1, []rng{{"a", 0, 1}, {"a", 1, 2}, {"a", 2, 3}}},
		{"shard order kept", []Shard{{"z", 2}, {"a", 2}}, 2, []rng{{"z", 0, 2}, {"a", 0, 2}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := mustNew(t, Config{Training: tc.shards, RecordsPerTask: tc.per, NumEpochs: 1, MaxAttempts: 1})
			var got []rng
			for {
				a := d.Get(1, t0)
				if a.Kind != KindTask {
					break
				}
				if a.Task.Epoch != 1 || a.Task.Type != Training || a.Task.Attempt != 0 {
					t.Errorf("task %+v: want epoch 1, training, attempt 0", a.Task)
				}
				got = append(got, rng{a.Task.Shard, a.Task.Start, a.Task.End})
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("tasks = %v, want %v", got, tc.want)
			}
		})
	}
}

// order returns the (shard,start) order in which one worker receives the
// tasks of each epoch.
func order(t *testing.T, cfg Config) [][]rng {
	t.Helper()
	d := mustNew(t, cfg)
	out := make([][]rng, cfg.NumEpochs)
	for {
		a := d.Get(1, t0)
		if a.Kind != KindTask {
			break
		}
		out[a.Task.Epoch-1] = append(out[a.Task.Epoch-1], rng{a.Task.Shard, a.Task.Start, a.Task.End})
		mustReport(t, d, 1, a.Task, ok(a.Task), t0)
	}
	return out
}

func TestShuffle(t *testing.T) {
	cfg := Config{Training: []Shard{{"a", 200}, {"b", 100}}, RecordsPerTask: 10, NumEpochs: 3, MaxAttempts: 1}
	with := func(shuffle bool, seed int64) Config {
		c := cfg
		c.Shuffle, c.Seed = shuffle, seed
		return c
	}
	plain := order(t, with(false, 0))
	s1 := order(t, with(true, 1))
	tests := []struct {
		name      string
		a, b      [][]rng
		wantEqual bool
	}{
		{"same seed, same order", s1, order(t, with(true, 1)), true},
		{"different seed, different order", s1, order(t, with(true, 2)), false},
		{"shuffled differs from plain", s1, plain, false},
		{"seed ignored without shuffle", plain, order(t, with(false, 99)), true},
		{"epochs shuffled differently", s1[:1], s1[1:2], false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := reflect.DeepEqual(tc.a, tc.b); got != tc.wantEqual {
				t.Fatalf("orders equal = %v, want %v", got, tc.wantEqual)
			}
		})
	}
	// Shuffling permutes tasks; it must still cover every record once.
	for e := range s1 {
		got := slices.Clone(s1[e])
		slices.SortFunc(got, func(x, y rng) int {
			if x.shard != y.shard {
				return strings.Compare(x.shard, y.shard)
			}
			return int(x.start - y.start)
		})
		if !reflect.DeepEqual(got, plain[e]) {
			t.Fatalf("epoch %d shuffled tasks are not a permutation of the plain tasks", e+1)
		}
	}
}
